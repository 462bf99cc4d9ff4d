/*
 * kvs_kv_layout: what one KV block holds, byte for byte, for every dtype
 * the cache can store (kvserve_kv_dtype), and the bytes it takes.
 *
 * This is the one place that knows a block's size and layout: the
 * backends' storage, the pool sizing (kvs_kv_size), the prices the
 * limiter charges (kv_bytes_per_token) and a lower tier that copies
 * whole blocks all take them from here; to anyone else a block is
 * block_bytes opaque bytes.
 *
 * A block of block_tokens (bt) token slots is n_layer parts of
 * layer_bytes each, part l at l * layer_bytes; one part:
 *
 *   k       [bt][n_head_kv][hd_k]  elements     at k_off (= 0)
 *   v       [bt][n_head_kv][hd_v]  elements     at v_off
 *   k_scale [n_head_kv]            float        at ks_off   (int8, fp8)
 *   v_scale [n_head_kv]            float        at vs_off   (int8, fp8)
 *
 * An element is an IEEE float (f32), a half (f16), a bfloat16 (bf16),
 * a signed byte (int8) or an OCP FP8 E4M3 byte (fp8, kvs_kv_quant.h);
 * halves and floats in host order.  A quantized element x_q of head h
 * stands for x_q x scale[h]: one scale per (block, layer, K or V,
 * head), shared by the block's bt tokens.  Sections start 4-byte
 * aligned and layer_bytes and block_bytes are multiples of 4, so that
 * in a 4-aligned pool every float is aligned.
 *
 * kv_bytes_per_token is block_bytes / bt rounded up: with scales, a
 * token's exact share is a fraction of a byte more than its elements.
 *
 * Blocks of one dtype are never read as another: an engine's pool keeps
 * one layout for its life (a new kvserve_kv_dtype means a new engine
 * process and pool).  A lower tier that keeps blocks beyond that life
 * must store the layout's fields with them and take back only a block of
 * the same layout (kvs_kv_layout_same).
 *
 * Invariants: a layout made by kvs_kv_layout_init() has every size > 0,
 * block_bytes = n_layer x layer_bytes and no sum overflows 64 bits.
 * Nothing here allocates.
 */

#ifndef KVS_KV_LAYOUT_H
#define KVS_KV_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"

/* The values are the wire's (HELLO's kv_dtype): never renumber. */
typedef enum {
    KVS_KV_F32 = 0,
    KVS_KV_BF16 = 1,
    KVS_KV_F16 = 2,
    KVS_KV_INT8 = 3,
    KVS_KV_FP8 = 4,                   /* e4m3 */
    KVS_KV_DTYPE_MAX = KVS_KV_FP8
} kvs_kv_dtype_t;

/* "no dtype asked for": the backend stores its default (CPU f32, CUDA
 * bf16 or f32 for an all-F32 model) */
#define KVS_KV_DTYPE_DEFAULT   255u

/* int8's and fp8's codes, their largest and the scale rule:
 * kvs_kv_quant.h, shared with the CUDA kernels */

typedef struct {
    uint32_t  dtype;                  /* kvs_kv_dtype_t */
    uint32_t  elem;                   /* bytes of one element */
    uint32_t  n_layer;
    uint32_t  n_head_kv;
    uint32_t  hd_k;
    uint32_t  hd_v;
    uint32_t  block_tokens;
    uint32_t  scaled;                 /* int8, fp8: scales follow */
    uint64_t  k_row;                  /* bytes of one slot's K in a part:
                                         n_head_kv x hd_k x elem */
    uint64_t  v_row;                  /* ... V */
    uint64_t  v_off;                  /* in a part: bt x k_row, aligned */
    uint64_t  ks_off;                 /* k_scale, when scaled */
    uint64_t  vs_off;                 /* v_scale, when scaled */
    uint64_t  layer_bytes;
    uint64_t  block_bytes;
} kvs_kv_layout_t;


/* "f32", "f16", "bf16", "int8", "fp8"; "?" for another value. */
const char *kvs_kv_dtype_name(uint32_t dtype);

/* One of those names (exactly, lower case) into *dtype; KVS_EINVAL
 * (*dtype untouched) for anything else. */
int kvs_kv_dtype_parse(const char *s, size_t len, uint32_t *dtype);

/* Bytes of one element; 0 for an unknown dtype. */
uint32_t kvs_kv_dtype_elem(uint32_t dtype);

/*
 * The layout of blocks of block_tokens slots for a model of n_layer
 * layers of n_head_kv K/V heads of hd_k (K) and hd_v (V) elements.
 * KVS_EINVAL naming the bad value for an unknown dtype or a zero size,
 * KVS_ERANGE when a block's bytes overflow 64 bits; *lo zeroed then.
 */
int kvs_kv_layout_init(kvs_kv_layout_t *lo, uint32_t dtype,
    uint32_t n_layer, uint32_t n_head_kv, uint32_t hd_k, uint32_t hd_v,
    uint32_t block_tokens, kvs_err_t *err);

/* block_bytes / block_tokens, rounded up. */
static inline uint64_t
kvs_kv_layout_bytes_per_token(const kvs_kv_layout_t *lo)
{
    return (lo->block_bytes + lo->block_tokens - 1) / lo->block_tokens;
}

/* The same from the sizes alone; 0 when kvs_kv_layout_init() fails. */
uint64_t kvs_kv_bytes_per_token(uint32_t dtype, uint32_t n_layer,
    uint32_t n_head_kv, uint32_t hd_k, uint32_t hd_v,
    uint32_t block_tokens);

/* 1 when a and b lay blocks out alike (dtype and every size), else 0. */
static inline int
kvs_kv_layout_same(const kvs_kv_layout_t *a, const kvs_kv_layout_t *b)
{
    return a->dtype == b->dtype && a->n_layer == b->n_layer
           && a->n_head_kv == b->n_head_kv && a->hd_k == b->hd_k
           && a->hd_v == b->hd_v && a->block_tokens == b->block_tokens
           && a->block_bytes == b->block_bytes;
}

/* Byte offsets in a block: slot u's K (V) row of layer l, and the
 * layer's K (V) scales. */
static inline uint64_t
kvs_kv_layout_k(const kvs_kv_layout_t *lo, uint32_t l, uint32_t u)
{
    return (uint64_t) l * lo->layer_bytes + (uint64_t) u * lo->k_row;
}

static inline uint64_t
kvs_kv_layout_v(const kvs_kv_layout_t *lo, uint32_t l, uint32_t u)
{
    return (uint64_t) l * lo->layer_bytes + lo->v_off
           + (uint64_t) u * lo->v_row;
}

static inline uint64_t
kvs_kv_layout_ks(const kvs_kv_layout_t *lo, uint32_t l)
{
    return (uint64_t) l * lo->layer_bytes + lo->ks_off;
}

static inline uint64_t
kvs_kv_layout_vs(const kvs_kv_layout_t *lo, uint32_t l)
{
    return (uint64_t) l * lo->layer_bytes + lo->vs_off;
}

#endif /* KVS_KV_LAYOUT_H */
