/*
 * kvs_cuda_bcopy: the plan of one KV block's copy between the CUDA pool
 * and a host staging block (kvs_cuda_bcopy.h says the layout and the
 * invariants).  Plain C, no CUDA: built into libkvserve.a.
 */

#include <inttypes.h>
#include <string.h>

#include "kvs_cuda_bcopy.h"


/* Bytes of one layer's rows of the arrays: kb, vb, sb (0 unscaled). */
static int
kvs_cuda_bc_rows(const kvs_cuda_bc_geom_t *g, uint64_t *kb, uint64_t *vb,
    uint64_t *sb, kvs_err_t *err)
{
    if (g->n_layer == 0 || g->n_blocks == 0 || g->block_tokens == 0
        || g->k_width == 0 || g->v_width == 0 || g->elem == 0
        || (g->scaled && g->n_head_kv == 0))
    {
        return kvs_err_set(err, KVS_EINVAL, "cuda block copy: a zero size "
                           "in the cache's geometry");
    }

    if (__builtin_mul_overflow((uint64_t) g->block_tokens, g->k_width, kb)
        || __builtin_mul_overflow(*kb, (uint64_t) g->elem, kb)
        || __builtin_mul_overflow((uint64_t) g->block_tokens, g->v_width,
                                  vb)
        || __builtin_mul_overflow(*vb, (uint64_t) g->elem, vb))
    {
        return kvs_err_set(err, KVS_ERANGE, "cuda block copy: a block of "
                           "%" PRIu32 " tokens overflows", g->block_tokens);
    }

    *sb = g->scaled ? (uint64_t) g->n_head_kv * sizeof(float) : 0;

    return KVS_OK;
}


int
kvs_cuda_bc_bytes(const kvs_cuda_bc_geom_t *g, uint64_t *bytes,
    kvs_err_t *err)
{
    int       rc;
    uint64_t  kb, vb, sb, row;

    rc = kvs_cuda_bc_rows(g, &kb, &vb, &sb, err);
    if (rc != KVS_OK) {
        return rc;
    }

    if (__builtin_add_overflow(kb, vb, &row)
        || __builtin_add_overflow(row, 2 * sb, &row)
        || __builtin_mul_overflow(row, (uint64_t) g->n_layer, bytes))
    {
        return kvs_err_set(err, KVS_ERANGE, "cuda block copy: a block of "
                           "%" PRIu32 " layers overflows", g->n_layer);
    }

    return KVS_OK;
}


/* One array's piece: rows of `row` bytes, block b's at b * row in each
 * layer's n_blocks * row; the whole array must be addressable. */
static int
kvs_cuda_bc_piece(const kvs_cuda_bc_geom_t *g, uint32_t b, uint32_t array,
    uint64_t row, uint64_t *host_off, kvs_cuda_bc_piece_t *p,
    kvs_err_t *err)
{
    uint64_t  pitch, all, packed;

    /* all: the array's bytes, so that every row's offset fits too */
    if (__builtin_mul_overflow(row, (uint64_t) g->n_blocks, &pitch)
        || __builtin_mul_overflow(pitch, (uint64_t) g->n_layer, &all)
        || __builtin_mul_overflow(row, (uint64_t) g->n_layer, &packed)
        || __builtin_add_overflow(*host_off, packed, &packed))
    {
        return kvs_err_set(err, KVS_ERANGE, "cuda block copy: the cache's "
                           "arrays overflow 64 bits");
    }

    (void) all;

    p->array = array;
    p->dev_off = (uint64_t) b * row;
    p->dev_pitch = pitch;
    p->host_off = *host_off;
    p->width = row;
    p->height = g->n_layer;
    p->per_row = g->max_pitch != 0 && pitch > g->max_pitch;

    *host_off = packed;

    return KVS_OK;
}


int
kvs_cuda_bc_plan(const kvs_cuda_bc_geom_t *g, uint32_t b,
    kvs_cuda_bc_plan_t *out, kvs_err_t *err)
{
    int                  rc;
    uint32_t             i, n;
    uint64_t             kb, vb, sb, off, bytes;
    kvs_cuda_bc_piece_t  p[KVS_CUDA_BC_MAX];
    uint64_t             rows[KVS_CUDA_BC_MAX];

    rc = kvs_cuda_bc_bytes(g, &bytes, err);
    if (rc != KVS_OK) {
        return rc;
    }

    if (b >= g->n_blocks) {
        return kvs_err_set(err, KVS_EINVAL, "cuda block copy: block %"
                           PRIu32 " of a cache of %" PRIu32, b,
                           g->n_blocks);
    }

    rc = kvs_cuda_bc_rows(g, &kb, &vb, &sb, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rows[KVS_CUDA_BC_K] = kb;
    rows[KVS_CUDA_BC_V] = vb;
    rows[KVS_CUDA_BC_KS] = sb;
    rows[KVS_CUDA_BC_VS] = sb;
    n = g->scaled ? 4 : 2;
    off = 0;

    for (i = 0; i < n; i++) {
        rc = kvs_cuda_bc_piece(g, b, i, rows[i], &off, &p[i], err);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    /* the pieces end where the block does (kvs_cuda_bc_bytes) */
    if (off != bytes) {
        return kvs_err_set(err, KVS_ERANGE, "cuda block copy: pieces of "
                           "%" PRIu64 " bytes for a block of %" PRIu64,
                           off, bytes);
    }

    memcpy(out->p, p, n * sizeof(kvs_cuda_bc_piece_t));
    out->n = n;
    out->block_bytes = bytes;

    return KVS_OK;
}
