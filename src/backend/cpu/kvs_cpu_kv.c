/*
 * kvs_cpu_kv: the CPU backend's K/V writes and reads in the cache's dtype
 * (f32, f16, bf16, int8), over kvs_kv_layout's blocks.
 *
 * f16 and bf16 round to nearest even (kvs_dtype).  int8 keeps one scale
 * per (block, layer, K or V, head), the largest |x| the block's slots of
 * that head have held, over 127, and x_q = round(x / scale) in
 * [-127, 127].  Writing slot 0 starts a block afresh; a later row larger
 * than the scale grows it and requantizes the slots before it, so each
 * stored element is within scale / 2 of its value per growth it went
 * through (one growth per row at most: within u / 2 + 1/2 scales at
 * slot u, in practice a few).
 *
 * Invariant: the bytes written for a row depend only on the rows written
 * to that block before it, in order, never on the batch or the thread.
 */

#include <math.h>
#include <string.h>

#include "kvs_cpu_impl.h"
#include "model/kvs_dtype.h"


uint8_t *
kvs_cpu_kv_block(const kvs_cpu_kv_t *kv, uint32_t b)
{
    return b < kv->n_blocks ? kv->mem + (size_t) b * kv->lo.block_bytes
                            : NULL;
}


static inline int8_t
kvs_cpu_kv_q8(float x, float id)
{
    long  r;

    r = lrintf(x * id);

    /* a NaN gives lrintf's LONG_MIN: clamped like any overflow */
    r = r > 127 ? 127 : r;
    r = r < -127 ? -127 : r;

    return (int8_t) r;
}


/* Head h's hd elements of row x into slot u's q, growing the block's
 * scale *s (requantizing slots 0..u-1 at stride row bytes) first. */
static void
kvs_cpu_kv_write_q8(int8_t *q, float *s, const float *x, uint32_t hd,
    uint32_t u, size_t row)
{
    float     amax, ns, r, id;
    uint32_t  j, t;
    int8_t   *p;

    amax = 0.0f;

    for (j = 0; j < hd; j++) {
        amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    }

    if (u == 0) {
        *s = amax / KVS_KV_INT8_MAX;

    } else if (amax > *s * KVS_KV_INT8_MAX) {
        ns = amax / KVS_KV_INT8_MAX;
        r = *s / ns;

        for (t = 0; t < u; t++) {
            p = q - (size_t) (u - t) * row;

            for (j = 0; j < hd; j++) {
                p[j] = kvs_cpu_kv_q8((float) p[j], r);
            }
        }

        *s = ns;
    }

    id = *s > 0.0f ? 1.0f / *s : 0.0f;

    for (j = 0; j < hd; j++) {
        q[j] = kvs_cpu_kv_q8(x[j], id);
    }
}


/* Slot u's K (v == 0) or V row of layer l in block b, its elements' count
 * into *n, the layer's scales for it into *sc. */
static uint8_t *
kvs_cpu_kv_at(const kvs_cpu_kv_t *kv, uint32_t b, uint32_t l, uint32_t u,
    int v, uint32_t *n, float **sc)
{
    uint8_t                *blk;
    const kvs_kv_layout_t  *lo;

    lo = &kv->lo;
    blk = kvs_cpu_kv_block(kv, b);
    *n = v ? kv->v_width : kv->k_width;
    *sc = (float *) (void *) (blk + (v ? kvs_kv_layout_vs(lo, l)
                                       : kvs_kv_layout_ks(lo, l)));

    return blk + (v ? kvs_kv_layout_v(lo, l, u) : kvs_kv_layout_k(lo, l, u));
}


void
kvs_cpu_kv_write(kvs_cpu_kv_t *kv, uint32_t b, uint32_t l, uint32_t u,
    int v, const float *row)
{
    float                  *sc;
    uint8_t                *p;
    uint16_t                h;
    uint32_t                j, n, hd, head;
    const kvs_kv_layout_t  *lo;

    lo = &kv->lo;
    p = kvs_cpu_kv_at(kv, b, l, u, v, &n, &sc);

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

    default:    /* int8: kvs_cpu_kv_new_dtype() allows nothing else */
        hd = v ? lo->hd_v : lo->hd_k;

        for (head = 0; head < lo->n_head_kv; head++) {
            kvs_cpu_kv_write_q8((int8_t *) p + (size_t) head * hd,
                                &sc[head], row + (size_t) head * hd, hd, u,
                                v ? lo->v_row : lo->k_row);
        }
        break;
    }
}


void
kvs_cpu_kv_read(const kvs_cpu_kv_t *kv, uint32_t b, uint32_t l, uint32_t u,
    int v, float *row)
{
    float                  *sc;
    const uint8_t          *p;
    uint16_t                h;
    uint32_t                j, n, hd;
    const kvs_kv_layout_t  *lo;

    lo = &kv->lo;
    p = kvs_cpu_kv_at(kv, b, l, u, v, &n, &sc);

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
            row[j] = (float) ((const int8_t *) p)[j] * sc[j / hd];
        }
        break;
    }
}
