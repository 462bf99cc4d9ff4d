/*
 * kvs_cuda_bcopy: the plan of one KV block's copy between the CUDA pool
 * and a host staging block (the backend ops block_read and block_write,
 * docs/prefix-cache.md "The second tier"), in plain C so that it is part
 * of libkvserve.a and unit-tested on hosts without a device
 * (t/unit/test_cuda_bcopy.c).  kvs_cuda_tier.c turns each piece into a
 * cudaMemcpy2DAsync.
 *
 * The pool keeps K and V each as [n_layer][n_blocks][bt][width] and, in
 * int8 and fp8, the scales as [n_layer][n_blocks][n_head_kv] floats, so
 * one block is n_layer strided rows of each array.  The staging block is
 * those rows packed, array after array:
 *
 *   [K: n_layer x kb][V: n_layer x vb][K scales: n_layer x sb]
 *   [V scales: n_layer x sb]
 *
 * (kb, vb: bytes of one block of one layer; sb: n_head_kv floats), and
 * its length is the backend's block bytes (be->kv_bytes / n_blocks).
 *
 * Invariants:
 *   - the pieces cover the staging block exactly once, in order, and each
 *     reads only block b's rows of its array;
 *   - a pitch over max_pitch (the device's cudaDevAttrMaxPitch) is never
 *     passed to a 2D copy: such a piece says per_row, and its rows are
 *     copied one by one (height 1D copies);
 *   - every size is checked: an overflow or a block out of range is an
 *     error, and *out is left as it was.
 */

#ifndef KVS_CUDA_BCOPY_H
#define KVS_CUDA_BCOPY_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"

/* the arrays of the pool a piece reads or writes */
typedef enum {
    KVS_CUDA_BC_K = 0,
    KVS_CUDA_BC_V,
    KVS_CUDA_BC_KS,
    KVS_CUDA_BC_VS
} kvs_cuda_bc_array_t;

/* pieces at most: K, V and the two scale arrays */
#define KVS_CUDA_BC_MAX  4

typedef struct {
    uint32_t  n_layer;
    uint32_t  n_blocks;
    uint32_t  block_tokens;
    uint32_t  k_width;                /* elements of a token's K row */
    uint32_t  v_width;
    uint32_t  elem;                   /* bytes of one cache element */
    uint32_t  n_head_kv;
    int       scaled;                 /* int8, fp8: the scale arrays too */
    uint64_t  max_pitch;              /* bytes; 0: no limit */
} kvs_cuda_bc_geom_t;

/* One cudaMemcpy2D: height rows of width bytes, the pool's rows pitch
 * apart from dev_off of its array, the staging's packed (pitch width)
 * from host_off. */
typedef struct {
    uint32_t  array;                  /* kvs_cuda_bc_array_t */
    uint64_t  dev_off;                /* bytes into the array */
    uint64_t  dev_pitch;
    uint64_t  host_off;               /* bytes into the staging block */
    uint64_t  width;
    uint32_t  height;
    int       per_row;                /* dev_pitch over max_pitch: height
                                         1D copies of width bytes, row i
                                         at dev_off + i * dev_pitch */
} kvs_cuda_bc_piece_t;

typedef struct {
    uint32_t             n;
    uint64_t             block_bytes; /* the staging block's length */
    kvs_cuda_bc_piece_t  p[KVS_CUDA_BC_MAX];
} kvs_cuda_bc_plan_t;


/* Bytes of one staging block for geometry g into *bytes; KVS_EINVAL for
 * a zero size, KVS_ERANGE on overflow. */
int kvs_cuda_bc_bytes(const kvs_cuda_bc_geom_t *g, uint64_t *bytes,
    kvs_err_t *err);

/* The pieces of block b's copy; KVS_EINVAL for b out of range or a bad
 * geometry (kvs_cuda_bc_bytes), KVS_ERANGE on overflow. */
int kvs_cuda_bc_plan(const kvs_cuda_bc_geom_t *g, uint32_t b,
    kvs_cuda_bc_plan_t *out, kvs_err_t *err);

#endif /* KVS_CUDA_BCOPY_H */
