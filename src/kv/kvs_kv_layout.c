/*
 * kvs_kv_layout: dtype names and the byte layout of a KV block (see the
 * header).  Every size is checked against 64 bits before it is summed.
 */

#include <inttypes.h>
#include <string.h>

#include "kvs_kv_layout.h"

static const struct {
    const char  *name;
    uint32_t     elem;
    uint32_t     scaled;
} kvs_kv_dtypes[] = {
    [KVS_KV_F32]  = { "f32",  4, 0 },
    [KVS_KV_BF16] = { "bf16", 2, 0 },
    [KVS_KV_F16]  = { "f16",  2, 0 },
    [KVS_KV_INT8] = { "int8", 1, 1 },
    [KVS_KV_FP8]  = { "fp8",  1, 1 },
};


const char *
kvs_kv_dtype_name(uint32_t dtype)
{
    return dtype <= KVS_KV_DTYPE_MAX ? kvs_kv_dtypes[dtype].name : "?";
}


int
kvs_kv_dtype_parse(const char *s, size_t len, uint32_t *dtype)
{
    uint32_t  d;

    for (d = 0; d <= KVS_KV_DTYPE_MAX; d++) {
        if (strlen(kvs_kv_dtypes[d].name) == len
            && memcmp(kvs_kv_dtypes[d].name, s, len) == 0)
        {
            *dtype = d;
            return KVS_OK;
        }
    }

    return KVS_EINVAL;
}


uint32_t
kvs_kv_dtype_elem(uint32_t dtype)
{
    return dtype <= KVS_KV_DTYPE_MAX ? kvs_kv_dtypes[dtype].elem : 0;
}


/* a + b rounded up to 4, into *r; 0 on overflow */
static int
kvs_kv_add4(uint64_t a, uint64_t b, uint64_t *r)
{
    if (b > UINT64_MAX - 3 - a) {
        return 0;
    }

    *r = (a + b + 3) & ~(uint64_t) 3;

    return 1;
}


int
kvs_kv_layout_init(kvs_kv_layout_t *lo, uint32_t dtype, uint32_t n_layer,
    uint32_t n_head_kv, uint32_t hd_k, uint32_t hd_v, uint32_t block_tokens,
    kvs_err_t *err)
{
    uint64_t  kb, vb, sb, end;

    memset(lo, 0, sizeof(*lo));

    if (dtype > KVS_KV_DTYPE_MAX) {
        return kvs_err_set(err, KVS_EINVAL, "kv layout: unknown dtype %"
                           PRIu32, dtype);
    }

    if (n_layer == 0 || n_head_kv == 0 || hd_k == 0 || hd_v == 0
        || block_tokens == 0)
    {
        return kvs_err_set(err, KVS_EINVAL, "kv layout: a zero size (%"
                           PRIu32 " layers, %" PRIu32 " heads of %" PRIu32
                           "/%" PRIu32 ", blocks of %" PRIu32 " tokens)",
                           n_layer, n_head_kv, hd_k, hd_v, block_tokens);
    }

    lo->dtype = dtype;
    lo->elem = kvs_kv_dtypes[dtype].elem;
    lo->scaled = kvs_kv_dtypes[dtype].scaled;
    lo->n_layer = n_layer;
    lo->n_head_kv = n_head_kv;
    lo->hd_k = hd_k;
    lo->hd_v = hd_v;
    lo->block_tokens = block_tokens;

    /* two 32-bit factors fit in 64 bits; the element (<= 4) and the
     * block's tokens are checked before they multiply */
    kb = (uint64_t) n_head_kv * hd_k;
    vb = (uint64_t) n_head_kv * hd_v;

    if (kb > UINT64_MAX / 16 / block_tokens
        || vb > UINT64_MAX / 16 / block_tokens)
    {
        goto range;
    }

    lo->k_row = kb * lo->elem;
    lo->v_row = vb * lo->elem;

    kb = lo->k_row * block_tokens;
    vb = lo->v_row * block_tokens;
    sb = lo->scaled ? (uint64_t) n_head_kv * sizeof(float) : 0;

    if (!kvs_kv_add4(0, kb, &lo->v_off)
        || !kvs_kv_add4(lo->v_off, vb, &lo->ks_off)
        || !kvs_kv_add4(lo->ks_off, sb, &lo->vs_off)
        || !kvs_kv_add4(lo->vs_off, sb, &end))
    {
        goto range;
    }

    lo->layer_bytes = end;

    if (lo->layer_bytes > UINT64_MAX / n_layer) {
        goto range;
    }

    lo->block_bytes = lo->layer_bytes * n_layer;

    return KVS_OK;

range:

    memset(lo, 0, sizeof(*lo));

    return kvs_err_set(err, KVS_ERANGE, "kv layout: a block of %" PRIu32
                       " tokens of %" PRIu32 " layers overflows 64 bits",
                       block_tokens, n_layer);
}


uint64_t
kvs_kv_bytes_per_token(uint32_t dtype, uint32_t n_layer, uint32_t n_head_kv,
    uint32_t hd_k, uint32_t hd_v, uint32_t block_tokens)
{
    kvs_kv_layout_t  lo;

    if (kvs_kv_layout_init(&lo, dtype, n_layer, n_head_kv, hd_k, hd_v,
                           block_tokens, NULL)
        != KVS_OK)
    {
        return 0;
    }

    return kvs_kv_layout_bytes_per_token(&lo);
}
