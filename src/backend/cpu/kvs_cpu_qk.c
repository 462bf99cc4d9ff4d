/*
 * kvs_cpu_qk: the products of the 256-column types (Q2_K .. Q6_K,
 * IQ4_XS) with a Q8_K input, portable C, and that input's quantization.
 * Their AVX2 twins (kvs_cpu_qk_x86.c) give the same bits
 * (kvs_cpu_qdot.h).
 *
 * Each super-block of a row is read once per call into its integers
 * (kvs_cpu_qk_blk_t: the element values q, the scale and min of every 16
 * elements, a 32-element sub-block's twice), whatever the type, and every
 * token of the call takes its exact sums from those:
 *
 *   isum = sum over k < 16 of sc[k] * sum(q[16k + l] * q_x[16k + l])
 *   msum = sum over k < 16 of m[k] * bsums[k]
 *
 * then kvs_cpu_qk_acc() / kvs_cpu_qk_acc_min().  In the dequantizers'
 * terms (kvs_quant_k.c, kvs_quant_iq4.c), element x = (d * sc) * q -
 * (dmin * m):
 *
 *   type    q                       sc             m       d, dmin
 *   Q2_K    0..3                    0..15          0..15   d, dmin
 *   Q3_K    -4..3                   -32..31        -       d
 *   Q4_K    0..15                   0..63          0..63   d, dmin
 *   Q5_K    0..31                   0..63          0..63   d, dmin
 *   Q6_K    -32..31                 -128..127      -       d
 *   IQ4_XS  kv[idx], -127..113      ls - 32        -       d
 *
 * No int32 overflows, for any bytes and any input (|q_x| <= 127, so
 * |bsums| <= 2032): |isum| <= 256 * max |sc q| * 127, at most Q6_K's
 * 256 * (128 * 32) * 127 = 133,169,152 (IQ4_XS's 256 * (32 * 127) * 127
 * = 132,128,768), and |msum| <= 16 * 63 * 2032 = 2,048,256, far below
 * 2^31; every partial sum is bounded by the same.
 */

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

#include <math.h>
#include <string.h>

#include "model/kvs_dtype.h"
#include "model/kvs_quant.h"
#include "model/kvs_quant_iq4.h"
#include "model/kvs_quant_k.h"
#include "kvs_cpu_qdot.h"


/* One super-block's integers (see the top of the file). */
typedef struct {
    float    d;
    float    dmin;                    /* 0 without minimums */
    int16_t  sc[16];
    int16_t  m[16];
    int8_t   q[256];
} kvs_cpu_qk_blk_t;

typedef void (*kvs_cpu_qk_unpack_pt)(const uint8_t *p, kvs_cpu_qk_blk_t *w);


/* kvs_cpu_q8_quant()'s rule over 256 columns, plus the 16-column sums. */
void
kvs_cpu_q8k_quant(const float *x, kvs_cpu_q8k_t *dst, uint32_t cols)
{
    float     amax, d, id;
    int32_t   sum;
    uint32_t  b, j, k;

    for (b = 0; b < cols / 256; b++) {
        amax = 0.0f;

        for (j = 0; j < 256; j++) {
            amax = fmaxf(amax, fabsf(x[j]));
        }

        d = amax / 127.0f;
        id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[b].d = d;

        for (k = 0; k < 16; k++) {
            sum = 0;

            for (j = 16 * k; j < 16 * k + 16; j++) {
                dst[b].q[j] = (int8_t) lrintf(x[j] * id);
                sum += dst[b].q[j];
            }

            dst[b].bsums[k] = (int16_t) sum;
        }

        x += 256;
    }
}


/* Q2_K (kvs_q2_k_dequantize): e = 128 h + 32 k + l is bits 2k..2k+1 of
 * qs[32 h + l]; scale byte per 16: low nibble sc, high nibble m. */
static void
kvs_cpu_qk_unpack_q2_k(const uint8_t *p, kvs_cpu_qk_blk_t *w)
{
    unsigned  e, k;

    w->d = kvs_f16_load(p + KVS_Q2_K_D);
    w->dmin = kvs_f16_load(p + KVS_Q2_K_DMIN);

    for (k = 0; k < 16; k++) {
        w->sc[k] = p[KVS_Q2_K_SCALES + k] & 0x0f;
        w->m[k] = p[KVS_Q2_K_SCALES + k] >> 4;
    }

    for (e = 0; e < 256; e++) {
        w->q[e] = (int8_t) ((p[KVS_Q2_K_QS + 32 * (e / 128) + e % 32]
                             >> (2 * ((e / 32) % 4))) & 3);
    }
}


/* Q3_K (kvs_q3_k_dequantize): Q2_K's low bits, the third at bit e / 32
 * of hmask[e % 32], clear meaning q - 4. */
static void
kvs_cpu_qk_unpack_q3_k(const uint8_t *p, kvs_cpu_qk_blk_t *w)
{
    int       q;
    unsigned  e, k;

    w->d = kvs_f16_load(p + KVS_Q3_K_D);
    w->dmin = 0.0f;

    for (k = 0; k < 16; k++) {
        w->sc[k] = (int16_t) kvs_q3k_scale_unpack(p + KVS_Q3_K_SCALES,
                                                  (int) k);
        w->m[k] = 0;
    }

    for (e = 0; e < 256; e++) {
        q = (p[KVS_Q3_K_QS + 32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4)))
            & 3;
        if (((p[KVS_Q3_K_HMASK + e % 32] >> (e / 32)) & 1) == 0) {
            q -= 4;
        }
        w->q[e] = (int8_t) q;
    }
}


/* Q4_K / Q5_K's scales and mins, per 32 elements, as per 16. */
static void
kvs_cpu_qk_scales(const uint8_t *p, kvs_cpu_qk_blk_t *w)
{
    int      j;
    uint8_t  sc, m;

    for (j = 0; j < 8; j++) {
        kvs_qk_scales_unpack(p, j, &sc, &m);
        w->sc[2 * j] = sc;
        w->sc[2 * j + 1] = sc;
        w->m[2 * j] = m;
        w->m[2 * j + 1] = m;
    }
}


/* Q4_K (kvs_q4_k_dequantize): e = 64 c + 32 h + l is nibble h of
 * qs[32 c + l]. */
static void
kvs_cpu_qk_unpack_q4_k(const uint8_t *p, kvs_cpu_qk_blk_t *w)
{
    unsigned  e;

    w->d = kvs_f16_load(p + KVS_Q4_K_D);
    w->dmin = kvs_f16_load(p + KVS_Q4_K_DMIN);
    kvs_cpu_qk_scales(p + KVS_Q4_K_SCALES, w);

    for (e = 0; e < 256; e++) {
        w->q[e] = (int8_t) ((p[KVS_Q4_K_QS + 32 * (e / 64) + e % 32]
                             >> (4 * ((e / 32) % 2))) & 0x0f);
    }
}


/* Q5_K (kvs_q5_k_dequantize): Q4_K's nibbles, the fifth bit at bit
 * e / 32 of qh[e % 32]. */
static void
kvs_cpu_qk_unpack_q5_k(const uint8_t *p, kvs_cpu_qk_blk_t *w)
{
    unsigned  e;

    w->d = kvs_f16_load(p + KVS_Q5_K_D);
    w->dmin = kvs_f16_load(p + KVS_Q5_K_DMIN);
    kvs_cpu_qk_scales(p + KVS_Q5_K_SCALES, w);

    for (e = 0; e < 256; e++) {
        w->q[e] = (int8_t) (((p[KVS_Q5_K_QS + 32 * (e / 64) + e % 32]
                              >> (4 * ((e / 32) % 2))) & 0x0f)
                            | ((p[KVS_Q5_K_QH + e % 32] >> (e / 32)) & 1) << 4);
    }
}


/* Q6_K (kvs_q6_k_dequantize): e = 128 h + r has its low 4 bits in nibble
 * r / 64 of ql[64 h + r % 64], its high 2 at bits 2 (r / 32) of
 * qh[32 h + r % 32]; q = those 6 bits - 32. */
static void
kvs_cpu_qk_unpack_q6_k(const uint8_t *p, kvs_cpu_qk_blk_t *w)
{
    unsigned  e, h, r, k;

    w->d = kvs_f16_load(p + KVS_Q6_K_D);
    w->dmin = 0.0f;

    for (k = 0; k < 16; k++) {
        w->sc[k] = (int8_t) p[KVS_Q6_K_SCALES + k];
        w->m[k] = 0;
    }

    for (e = 0; e < 256; e++) {
        h = e / 128;
        r = e % 128;
        w->q[e] = (int8_t) ((((p[KVS_Q6_K_QL + 64 * h + r % 64]
                               >> (4 * (r / 64))) & 0x0f)
                             | ((p[KVS_Q6_K_QH + 32 * h + r % 32]
                                 >> (2 * (r / 32))) & 3) << 4) - 32);
    }
}


/* IQ4_XS (kvs_iq4_xs_dequantize): sub-block s's elements are the levels
 * of the nibbles of qs[16 s .. 16 s + 15], low nibbles first. */
static void
kvs_cpu_qk_unpack_iq4_xs(const uint8_t *p, kvs_cpu_qk_blk_t *w)
{
    unsigned        s, j;
    const uint8_t  *qs;

    w->d = kvs_f16_load(p + KVS_IQ4_XS_D);
    w->dmin = 0.0f;

    for (s = 0; s < KVS_IQ4_XS_SUBS; s++) {
        w->sc[2 * s] = (int16_t) ((int) kvs_iq4_xs_ls(p, s) - 32);
        w->sc[2 * s + 1] = w->sc[2 * s];
        w->m[2 * s] = 0;
        w->m[2 * s + 1] = 0;
        qs = p + KVS_IQ4_XS_QS + 16 * s;

        for (j = 0; j < 16; j++) {
            w->q[32 * s + j] = kvs_iq4_kv[qs[j] & 0x0f];
            w->q[32 * s + j + 16] = kvs_iq4_kv[qs[j] >> 4];
        }
    }
}


/* The product of any 256-column type, given its block size and reader:
 * each super-block read once, then every token's sums from it. */
static void
kvs_cpu_qk_dot(float *y, size_t ldy, const uint8_t *row, const void *x,
    size_t xstride, uint32_t n, uint32_t cols, size_t bytes,
    kvs_cpu_qk_unpack_pt unpack, int has_min)
{
    int32_t               isum, msum, s;
    uint32_t              b, i, k, l;
    kvs_cpu_qk_blk_t      w;
    const kvs_cpu_q8k_t  *xb;

    for (i = 0; i < n; i++) {
        y[(size_t) i * ldy] = 0.0f;
    }

    for (b = 0; b < cols / 256; b++) {
        unpack(row + (size_t) b * bytes, &w);

        for (i = 0; i < n; i++) {
            xb = (const kvs_cpu_q8k_t *) ((const uint8_t *) x
                                          + (size_t) i * xstride) + b;
            isum = 0;
            msum = 0;

            for (k = 0; k < 16; k++) {
                s = 0;

                for (l = 16 * k; l < 16 * k + 16; l++) {
                    s += (int32_t) w.q[l] * xb->q[l];
                }

                isum += w.sc[k] * s;
                msum += w.m[k] * xb->bsums[k];
            }

            if (has_min) {
                y[(size_t) i * ldy] = kvs_cpu_qk_acc_min(y[(size_t) i * ldy],
                                                         w.d, w.dmin, xb->d,
                                                         isum, msum);
            } else {
                y[(size_t) i * ldy] = kvs_cpu_qk_acc(y[(size_t) i * ldy],
                                                     w.d, xb->d, isum);
            }
        }
    }
}


void
kvs_cpu_qdot_q2_k(float *y, size_t ldy, const uint8_t *row, const void *x,
    size_t xstride, uint32_t n, uint32_t cols)
{
    kvs_cpu_qk_dot(y, ldy, row, x, xstride, n, cols, KVS_Q2_K_BYTES,
                   kvs_cpu_qk_unpack_q2_k, 1);
}


void
kvs_cpu_qdot_q3_k(float *y, size_t ldy, const uint8_t *row, const void *x,
    size_t xstride, uint32_t n, uint32_t cols)
{
    kvs_cpu_qk_dot(y, ldy, row, x, xstride, n, cols, KVS_Q3_K_BYTES,
                   kvs_cpu_qk_unpack_q3_k, 0);
}


void
kvs_cpu_qdot_q4_k(float *y, size_t ldy, const uint8_t *row, const void *x,
    size_t xstride, uint32_t n, uint32_t cols)
{
    kvs_cpu_qk_dot(y, ldy, row, x, xstride, n, cols, KVS_Q4_K_BYTES,
                   kvs_cpu_qk_unpack_q4_k, 1);
}


void
kvs_cpu_qdot_q5_k(float *y, size_t ldy, const uint8_t *row, const void *x,
    size_t xstride, uint32_t n, uint32_t cols)
{
    kvs_cpu_qk_dot(y, ldy, row, x, xstride, n, cols, KVS_Q5_K_BYTES,
                   kvs_cpu_qk_unpack_q5_k, 1);
}


void
kvs_cpu_qdot_q6_k(float *y, size_t ldy, const uint8_t *row, const void *x,
    size_t xstride, uint32_t n, uint32_t cols)
{
    kvs_cpu_qk_dot(y, ldy, row, x, xstride, n, cols, KVS_Q6_K_BYTES,
                   kvs_cpu_qk_unpack_q6_k, 0);
}


void
kvs_cpu_qdot_iq4_xs(float *y, size_t ldy, const uint8_t *row, const void *x,
    size_t xstride, uint32_t n, uint32_t cols)
{
    kvs_cpu_qk_dot(y, ldy, row, x, xstride, n, cols, KVS_IQ4_XS_BYTES,
                   kvs_cpu_qk_unpack_iq4_xs, 0);
}
