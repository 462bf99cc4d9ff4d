/*
 * kvs_cpu_ql: the products of the 32-column types (Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1, IQ4_NL) with a Q8_0-style input (kvs_cpu_q8_t), portable
 * C.  Their AVX2 twins (kvs_cpu_ql_x86.c) give the same bits
 * (kvs_cpu_qdot.h).
 *
 * The float contract, per (row, token): block b of the row (32 columns,
 * weight scale d_w and for _1 types min m_w, input block's d_x and
 * s_x = sum(q_x) = -c / 128) gives
 *
 *     t_b = (d_w * d_x) * (float) isum_b
 *     t_b = t_b + (m_w * d_x) * (float) s_x         (Q4_1, Q5_1)
 *
 * where isum_b is the exact int32 sum of the 32 products of the weights'
 * integer levels (q - 8, q - 16, q, the int8 q, IQ4_NL's table value)
 * with q_x; t_b is added to lane b % 8 of eight float accumulators
 * starting at +0, in block order, and the result is
 *
 *     ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))
 *
 * (the AVX2 kernels keep the eight lanes in one vector and end with this
 * horizontal sum).  Every step is one IEEE f32 operation, never fused:
 * this file builds with contraction off.
 */

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

#include <string.h>

#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"
#include "kvs_cpu_qdot.h"


/* tokens whose accumulators one pass over the row keeps */
#define KVS_QL_TOKENS  8


/* One weight block: its integer levels and scales. */
typedef struct {
    float    d;
    float    m;
    int8_t   q[32];
} kvs_ql_blk_t;


/* Block p of type as levels: q - 8 (Q4_0), q - 16 (Q5_0), q (Q4_1,
 * Q5_1), the int8 (Q8_0), kvs_iq4_kv[q] (IQ4_NL). */
static inline void
kvs_ql_unpack(uint32_t type, const uint8_t *p, kvs_ql_blk_t *w)
{
    uint32_t        j, h;
    const uint8_t  *qs;

    w->d = kvs_f16_load(p);
    w->m = 0.0f;
    h = 0;

    switch (type) {
    case KVS_GGML_Q8_0:
        memcpy(w->q, p + 2, 32);
        return;

    case KVS_GGML_IQ4_NL:
        for (j = 0; j < 16; j++) {
            w->q[j] = kvs_iq4_kv[p[2 + j] & 0x0f];
            w->q[j + 16] = kvs_iq4_kv[p[2 + j] >> 4];
        }
        return;

    case KVS_GGML_Q4_0:
        for (j = 0; j < 16; j++) {
            w->q[j] = (int8_t) ((p[2 + j] & 0x0f) - 8);
            w->q[j + 16] = (int8_t) ((p[2 + j] >> 4) - 8);
        }
        return;

    case KVS_GGML_Q4_1:
        w->m = kvs_f16_load(p + 2);
        for (j = 0; j < 16; j++) {
            w->q[j] = (int8_t) (p[4 + j] & 0x0f);
            w->q[j + 16] = (int8_t) (p[4 + j] >> 4);
        }
        return;

    case KVS_GGML_Q5_0:
        h = (uint32_t) p[2] | (uint32_t) p[3] << 8 | (uint32_t) p[4] << 16
            | (uint32_t) p[5] << 24;
        qs = p + 6;
        break;

    default: /* Q5_1 */
        w->m = kvs_f16_load(p + 2);
        h = (uint32_t) p[4] | (uint32_t) p[5] << 8 | (uint32_t) p[6] << 16
            | (uint32_t) p[7] << 24;
        qs = p + 8;
        break;
    }

    for (j = 0; j < 16; j++) {
        w->q[j] = (int8_t) ((qs[j] & 0x0f) | ((h >> j) & 1) << 4);
        w->q[j + 16] = (int8_t) ((qs[j] >> 4) | ((h >> (j + 16)) & 1) << 4);
    }

    if (type == KVS_GGML_Q5_0) {
        for (j = 0; j < 32; j++) {
            w->q[j] = (int8_t) (w->q[j] - 16);
        }
    }
}


/*
 * The contract above for up to KVS_QL_TOKENS tokens at a time: each
 * block is unpacked once per pass and serves every token of it.
 */
static inline __attribute__((always_inline)) void
kvs_ql_dot(uint32_t type, float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols)
{
    float                acc[KVS_QL_TOKENS][8], t, m;
    int32_t              isum;
    uint32_t             i0, nt, i, b, j, nb, bytes;
    kvs_ql_blk_t         w;
    const kvs_cpu_q8_t  *xb;

    nb = cols / 32;
    bytes = kvs_cpu_ql_bytes(type);

    for (i0 = 0; i0 < n; i0 += nt) {
        nt = n - i0 < KVS_QL_TOKENS ? n - i0 : KVS_QL_TOKENS;
        memset(acc, 0, sizeof(acc));

        for (b = 0; b < nb; b++) {
            kvs_ql_unpack(type, row + (size_t) b * bytes, &w);

            for (i = 0; i < nt; i++) {
                xb = (const kvs_cpu_q8_t *) ((const uint8_t *) x
                                             + (i0 + i) * xstride) + b;
                isum = 0;

                for (j = 0; j < 32; j++) {
                    isum += (int32_t) w.q[j] * xb->q[j];
                }

                t = w.d * xb->d;
                t = t * (float) isum;

                if (type == KVS_GGML_Q4_1 || type == KVS_GGML_Q5_1) {
                    m = w.m * xb->d;
                    m = m * (float) (-(xb->c / 128));
                    t = t + m;
                }

                acc[i][b & 7] = acc[i][b & 7] + t;
            }
        }

        for (i = 0; i < nt; i++) {
            y[(i0 + i) * ldy] = ((acc[i][0] + acc[i][4])
                                 + (acc[i][2] + acc[i][6]))
                                + ((acc[i][1] + acc[i][5])
                                   + (acc[i][3] + acc[i][7]));
        }
    }
}


void
kvs_cpu_qdot_q8_0(float *y, size_t ldy, const uint8_t *row, const void *x,
    size_t xstride, uint32_t n, uint32_t cols)
{
    kvs_ql_dot(KVS_GGML_Q8_0, y, ldy, row, x, xstride, n, cols);
}


void
kvs_cpu_qdot_q4_0(float *y, size_t ldy, const uint8_t *row, const void *x,
    size_t xstride, uint32_t n, uint32_t cols)
{
    kvs_ql_dot(KVS_GGML_Q4_0, y, ldy, row, x, xstride, n, cols);
}


void
kvs_cpu_qdot_q4_1(float *y, size_t ldy, const uint8_t *row, const void *x,
    size_t xstride, uint32_t n, uint32_t cols)
{
    kvs_ql_dot(KVS_GGML_Q4_1, y, ldy, row, x, xstride, n, cols);
}


void
kvs_cpu_qdot_q5_0(float *y, size_t ldy, const uint8_t *row, const void *x,
    size_t xstride, uint32_t n, uint32_t cols)
{
    kvs_ql_dot(KVS_GGML_Q5_0, y, ldy, row, x, xstride, n, cols);
}


void
kvs_cpu_qdot_q5_1(float *y, size_t ldy, const uint8_t *row, const void *x,
    size_t xstride, uint32_t n, uint32_t cols)
{
    kvs_ql_dot(KVS_GGML_Q5_1, y, ldy, row, x, xstride, n, cols);
}


void
kvs_cpu_qdot_iq4_nl(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols)
{
    kvs_ql_dot(KVS_GGML_IQ4_NL, y, ldy, row, x, xstride, n, cols);
}


/* x[cols / 32] as (cols + 255) / 256 interleaved groups (kvs_cpu_q8i_t);
 * only moves bytes, so every kernel level sees the same input. */
void
kvs_cpu_q8i_fill(const kvs_cpu_q8_t *x, kvs_cpu_q8i_t *dst, uint32_t cols)
{
    uint32_t  nb, g, b, k;

    nb = cols / 32;

    for (g = 0; g < (nb + 7) / 8; g++) {
        for (b = 0; b < 8; b++) {
            if (8 * g + b >= nb) {
                dst[g].d[b] = 0.0f;
                dst[g].c[b] = 0;

                for (k = 0; k < 8; k++) {
                    memset(&dst[g].q[k][4 * b], 0, 4);
                }

                continue;
            }

            dst[g].d[b] = x[8 * g + b].d;
            dst[g].c[b] = x[8 * g + b].c;

            for (k = 0; k < 8; k++) {
                memcpy(&dst[g].q[k][4 * b], &x[8 * g + b].q[4 * k], 4);
            }
        }
    }
}
