/*
 * kvs_cpu_kv: the CPU backend's K/V writes and reads in the cache's dtype
 * (f32, f16, bf16, int8, fp8), over kvs_kv_layout's blocks.
 *
 * f16 and bf16 round to nearest even (kvs_dtype).  int8 and fp8 keep one
 * scale per (block, layer, K or V, head), the largest |x| the block's
 * slots of that head have held over the dtype's largest code (127, 448),
 * and x_q = enc(x / scale): int8's round to nearest even in [-127, 127],
 * fp8's OCP E4M3 (kvs_kv_quant.h, which the CUDA kernels share, so both
 * backends write the same bytes).  Writing slot 0 starts a block afresh;
 * a later row larger than the scale grows it and requantizes the slots
 * before it (kvs_kvq_scale), so in int8 each stored element is within
 * scale / 2 of its value per growth it went through (one growth per row
 * at most: within u / 2 + 1/2 scales at slot u, in practice a few); in
 * fp8 within half an e4m3 step (2^-4 of it relative, 2^-10 scales
 * absolute below 2^-6 scales) per growth likewise.
 *
 * Invariant: the bytes written for a row depend only on the rows written
 * to that block before it, in order, never on the batch or the thread.
 */

#include <math.h>
#include <string.h>

#include "kvs_cpu_impl.h"
#include "kv/kvs_kv_quant.h"
#include "model/kvs_dtype.h"


uint8_t *
kvs_cpu_kv_block(const kvs_cpu_kv_t *kv, uint32_t b)
{
    return b < kv->n_blocks ? kv->mem + (size_t) b * kv->lo.block_bytes
                            : NULL;
}


/*
 * Head h's hd elements of row x into slot u's codes q (int8, or fp8 when
 * fp8 != 0), the block's scale *s updated by kvs_kvq_scale(): a growth
 * requantizes slots 0..u-1 (at stride row bytes before q) first.
 */
static void
kvs_cpu_kv_write_q(uint8_t *q, float *s, const float *x, uint32_t hd,
    uint32_t u, size_t row, int fp8)
{
    int       grow;
    float     amax, ns, r, id, qmax;
    uint32_t  j, t;
    uint8_t  *p;

    amax = 0.0f;

    for (j = 0; j < hd; j++) {
        amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    }

    qmax = fp8 ? KVS_KVQ_FP8_MAX : KVS_KVQ_I8_MAX;
    ns = kvs_kvq_scale(*s, amax, u, qmax, &grow);

    if (grow) {
        r = *s / ns;

        for (t = 0; t < u; t++) {
            p = q - (size_t) (u - t) * row;

            for (j = 0; j < hd; j++) {
                p[j] = kvs_kvq_enc(fp8, kvs_kvq_dec(fp8, p[j]) * r);
            }
        }
    }

    *s = ns;
    id = kvs_kvq_inv(ns);

    for (j = 0; j < hd; j++) {
        q[j] = kvs_kvq_enc(fp8, x[j] * id);
    }
}


/* Slot u's K (v == 0) or V row of layer l in block blk, its elements'
 * count into *n, the layer's scales for it into *sc. */
static uint8_t *
kvs_cpu_block_at(const kvs_kv_layout_t *lo, uint8_t *blk, uint32_t l,
    uint32_t u, int v, uint32_t *n, float **sc)
{
    *n = lo->n_head_kv * (v ? lo->hd_v : lo->hd_k);
    *sc = (float *) (void *) (blk + (v ? kvs_kv_layout_vs(lo, l)
                                       : kvs_kv_layout_ks(lo, l)));

    return blk + (v ? kvs_kv_layout_v(lo, l, u) : kvs_kv_layout_k(lo, l, u));
}


void
kvs_cpu_block_write(const kvs_kv_layout_t *lo, uint8_t *blk, uint32_t l,
    uint32_t u, int v, const float *row)
{
    float     *sc;
    uint8_t   *p;
    uint16_t   h;
    uint32_t   j, n, hd, head;

    p = kvs_cpu_block_at(lo, blk, l, u, v, &n, &sc);

    switch (lo->dtype) {
    case KVS_KV_F32:
        memcpy(p, row, (size_t) n * sizeof(float));
        break;

    case KVS_KV_F16:
    case KVS_KV_BF16:
        for (j = 0; j < n; j++) {
            h = lo->dtype == KVS_KV_F16 ? kvs_f32_to_f16(row[j])
                                        : kvs_f32_to_bf16(row[j]);
            memcpy(p + 2 * (size_t) j, &h, 2);
        }
        break;

    default:    /* int8, fp8: kvs_cpu_kv_new_dtype() allows nothing else */
        hd = v ? lo->hd_v : lo->hd_k;

        for (head = 0; head < lo->n_head_kv; head++) {
            kvs_cpu_kv_write_q(p + (size_t) head * hd, &sc[head],
                               row + (size_t) head * hd, hd, u,
                               v ? lo->v_row : lo->k_row,
                               lo->dtype == KVS_KV_FP8);
        }
        break;
    }
}


void
kvs_cpu_kv_write(kvs_cpu_kv_t *kv, uint32_t b, uint32_t l, uint32_t u,
    int v, const float *row)
{
    kvs_cpu_block_write(&kv->lo, kvs_cpu_kv_block(kv, b), l, u, v, row);
}


void
kvs_cpu_block_read(const kvs_kv_layout_t *lo, const uint8_t *blk,
    uint32_t l, uint32_t u, int v, float *row)
{
    float          *sc;
    const uint8_t  *p;
    uint16_t        h;
    uint32_t        j, n, hd;

    p = kvs_cpu_block_at(lo, (uint8_t *) blk, l, u, v, &n, &sc);

    switch (lo->dtype) {
    case KVS_KV_F32:
        memcpy(row, p, (size_t) n * sizeof(float));
        break;

    case KVS_KV_F16:
    case KVS_KV_BF16:
        for (j = 0; j < n; j++) {
            memcpy(&h, p + 2 * (size_t) j, 2);
            row[j] = lo->dtype == KVS_KV_F16 ? kvs_f16_to_f32(h)
                                             : kvs_bf16_to_f32(h);
        }
        break;

    default:
        hd = v ? lo->hd_v : lo->hd_k;

        for (j = 0; j < n; j++) {
            row[j] = kvs_kvq_dec(lo->dtype == KVS_KV_FP8, p[j])
                     * sc[j / hd];
        }
        break;
    }
}


void
kvs_cpu_kv_read(const kvs_cpu_kv_t *kv, uint32_t b, uint32_t l, uint32_t u,
    int v, float *row)
{
    kvs_cpu_block_read(&kv->lo, kvs_cpu_kv_block(kv, b), l, u, v, row);
}
