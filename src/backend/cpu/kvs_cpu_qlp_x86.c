/*
 * kvs_cpu_qlp_x86: the 32-column 4- and 5-bit types (Q4_0, Q4_1, Q5_0,
 * Q5_1, IQ4_NL) repacked at load for an AVX-512 VNNI kernel that takes
 * 16 rows per vector, to the same bits as kvs_cpu_ql.c's portable kernel.
 *
 * Layout (kvs_cpu_qlp_fill, portable C so every build links it): rows in
 * groups of KVS_CPU_Q8P_ROWS (16); per group g and block b of 32 columns
 * one record of kvs_cpu_qlp_rec() bytes, records of a group in block
 * order:
 *
 *   4 vectors of 64 bytes: vector k (0..3) holds, in the 4-byte lane of
 *     row r, bytes 4k .. 4k + 3 of that row's qs (low nibbles: columns
 *     4k .. 4k + 3; high nibbles: 16 + 4k .. 16 + 4k + 3)
 *   Q5_0, Q5_1: one vector: in row r's lane, byte j bit k is the fifth
 *     bit of column 4k + j (qh bit 4k + j), so one shift brings every
 *     column of unpacked vector k to bit 4
 *   the 16 rows' f16 d, then (Q4_1, Q5_1) their 16 f16 m
 *
 * Rows past the matrix are zero bytes (d = 0); their outputs are never
 * stored.  The packed copy holds the same information as the rows, so a
 * matrix's products read only it.
 *
 * The kernel (kvs_cpu_qlp_rows_avx512): per block, each row's exact int32
 * sum of levels times input comes from 8 vpdpbusd (unsigned levels: the
 * nibbles, with the fifth bit, or IQ4_NL's grid value + 128; the offsets
 * corrected exactly from the input's c = -128 sum(q)), lane r row r; then
 * the portable kernel's float steps, lane for lane: t = (d_w * d_x) *
 * (float) isum (+ (m_w * d_x) * (float) sum(q) for the _1 types), added
 * to accumulator b % 8 (16 rows each), and the same tree of the eight at
 * the end.  Invariant: every output is the portable kernel's bits, for
 * any number of tokens (test_cpu_qdot_l compares them with memcmp).
 *
 * Prefill (kvs_qlp_wide): this machine runs two 512-bit operations a
 * cycle, vpdpbusd included, so what a block costs is its count of vector
 * operations: 8 vpdpbusd and 4 float steps per token (the offset start
 * is a broadcast load), plus the record's 12 unpacking steps shared by
 * the tokens of a pass.  Passes of 2 tokens spent 6 per token on
 * unpacking; passes of up to KVS_QLP_WT tokens, one accumulator class at
 * a time (so one accumulator per token is live, not eight), spend 1,
 * with each token's 8 vpdpbusd interleaved with the others' (k outer,
 * tokens inner) so that no chain waits on its own latency.  The class
 * order keeps every sum's order, hence its bits.
 */

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

#include <string.h>

#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"
#include "kvs_cpu_qdot.h"


/* Bytes of one record of type, or 0 when type is not packed this way. */
uint32_t
kvs_cpu_qlp_rec(uint32_t type)
{
    switch (type) {
    case KVS_GGML_Q4_0:
    case KVS_GGML_IQ4_NL:
        return 256 + 32;
    case KVS_GGML_Q4_1:
        return 256 + 32 + 32;
    case KVS_GGML_Q5_0:
        return 256 + 64 + 32;
    case KVS_GGML_Q5_1:
        return 256 + 64 + 32 + 32;
    default:
        return 0;
    }
}


size_t
kvs_cpu_qlp_size(const kvs_cpu_mat_t *w)
{
    return kvs_cpu_pack_bytes(w, 32, kvs_cpu_qlp_rec(w->type));
}


void
kvs_cpu_qlp_fill(const kvs_cpu_mat_t *w, uint8_t *dst)
{
    int             five, affine;
    size_t          groups, blocks, g, b, r, row;
    uint8_t        *rec, hb[4];
    uint32_t        recb, qh, k, j, off;
    const uint8_t  *src;

    recb = kvs_cpu_qlp_rec(w->type);
    five = w->type == KVS_GGML_Q5_0 || w->type == KVS_GGML_Q5_1;
    affine = w->type == KVS_GGML_Q4_1 || w->type == KVS_GGML_Q5_1;
    groups = (w->rows + KVS_CPU_Q8P_ROWS - 1) / KVS_CPU_Q8P_ROWS;
    blocks = w->cols / 32;

    for (g = 0; g < groups; g++) {
        for (b = 0; b < blocks; b++) {
            rec = dst + (g * blocks + b) * recb;
            memset(rec, 0, recb);

            for (r = 0; r < KVS_CPU_Q8P_ROWS; r++) {
                row = g * KVS_CPU_Q8P_ROWS + r;
                if (row >= w->rows) {
                    continue;
                }

                src = (const uint8_t *) w->data + row * w->row_bytes
                      + b * kvs_cpu_ql_bytes(w->type);
                off = 256 + (five ? 64 : 0);

                /* d, then m (after d in the _1 types' blocks) */
                memcpy(rec + off + 2 * r, src, 2);
                if (affine) {
                    memcpy(rec + off + 32 + 2 * r, src + 2, 2);
                }

                qh = 0;
                if (five) {
                    memcpy(&qh, src + (affine ? 4 : 2), 4);
                }

                /* the nibbles follow d (m) (qh) */
                src += 2 + (affine ? 2 : 0) + (five ? 4 : 0);

                for (k = 0; k < 4; k++) {
                    memcpy(rec + 64 * k + 4 * r, src + 4 * k, 4);
                }

                if (five) {
                    memset(hb, 0, 4);

                    for (k = 0; k < 8; k++) {
                        for (j = 0; j < 4; j++) {
                            hb[j] |= ((qh >> (4 * k + j)) & 1) << k;
                        }
                    }

                    memcpy(rec + 256 + 4 * r, hb, 4);
                }
            }
        }
    }
}


#if KVS_CPU_X86

#include "kvs_cpu_qlp_x86.h"

/* how far ahead (bytes) a group's first token pass fetches its records:
 * batch-1 decode of a 1.1B Q4_0 model, whose weights stream from memory,
 * ran 22.1-23.1 tokens/s at 1024 against 17.8-18.4 at 4096 (20.6-22.0 at
 * 512, 768, 1536 and 2048; 22.0-22.3 into L2 or L3 instead of L1) on the
 * AMX host of docs/performance.md (2026-12-06); a 100M model, whose
 * weights sit in L3 there, ran the same at both */
#ifndef KVS_QLP_PF
#define KVS_QLP_PF  1024
#endif

/* tokens per pass over a group's records (their accumulators: 8 each) */
#ifndef KVS_QLP_NT
#define KVS_QLP_NT  2
#endif

/* tokens per pass of the class-by-class kernel (one accumulator each) */
#ifndef KVS_QLP_WT
#define KVS_QLP_WT  12
#endif


/* acc + one token's terms of the record's 16 rows: u the unpacked
 * levels, d (m) the rows' scales, xb the token's input block */
KVS_QLP_INLINE __m512
kvs_qlp_term(uint32_t type, const __m512i *u, __m512 d, __m512 m,
    const kvs_cpu_q8_t *xb, __m512 acc)
{
    int32_t   v;
    uint32_t  k;
    __m512i   ia, ib;

    ia = kvs_qlp_init(type, xb);
    ib = _mm512_setzero_si512();

#pragma GCC unroll 4
    for (k = 0; k < 4; k++) {
        memcpy(&v, xb->q + 4 * k, 4);
        ia = _mm512_dpbusd_epi32(ia, u[k], _mm512_set1_epi32(v));
        memcpy(&v, xb->q + 16 + 4 * k, 4);
        ib = _mm512_dpbusd_epi32(ib, u[4 + k], _mm512_set1_epi32(v));
    }

    return kvs_qlp_fold(type, _mm512_add_epi32(ia, ib), d, m, xb, acc);
}


/*
 * NT (1 .. KVS_QLP_NT) tokens by the 16 rows of one group: its nb
 * records at p (rec bytes each), token t's blocks at xq + t * xs.
 */
KVS_QLP_INLINE void
kvs_qlp_tile(uint32_t type, float *y, size_t ldy, const uint8_t *p,
    uint32_t rec, const kvs_cpu_q8_t *xq, size_t xs, uint32_t nb,
    __mmask16 mask, int pf, const uint32_t NT)
{
    uint32_t        b0, j, t, off;
    __m512          acc[KVS_QLP_NT][8], d, m;
    __m512i         u[8];
    const uint8_t  *r;

#pragma GCC unroll 2
    for (t = 0; t < NT; t++) {
#pragma GCC unroll 8
        for (j = 0; j < 8; j++) {
            acc[t][j] = _mm512_setzero_ps();
        }
    }

    for (b0 = 0; b0 < nb; b0 += 8) {
#pragma GCC unroll 8
        for (j = 0; j < 8; j++) {
            if (b0 + j >= nb) {
                break;
            }

            r = p + (size_t) (b0 + j) * rec;

            if (pf) {
                for (off = 0; off < rec; off += 64) {
                    _mm_prefetch((const char *) r + KVS_QLP_PF + off,
                                 _MM_HINT_T0);
                }
            }

            kvs_qlp_record(type, r, u, &d, &m);

#pragma GCC unroll 2
            for (t = 0; t < NT; t++) {
                acc[t][j] = kvs_qlp_term(type, u, d, m,
                                         xq + t * xs + b0 + j, acc[t][j]);
            }
        }
    }

#pragma GCC unroll 2
    for (t = 0; t < NT; t++) {
        _mm512_mask_storeu_ps(y + t * ldy, mask, kvs_qlp_tree(acc[t]));
    }
}


/*
 * NT (KVS_QLP_WT or fewer) tokens by the 16 rows of one group, one
 * accumulator class at a time: blocks j, j + 8, j + 16 ... into each
 * token's accumulator j (the order above), so that NT accumulators live
 * in registers instead of 8 NT, and a record's unpacking serves NT
 * tokens.  The eight classes' sums wait in part[] for the same tree.
 */
KVS_QLP_INLINE void
kvs_qlp_wide(uint32_t type, float *y, size_t ldy, const uint8_t *p,
    uint32_t rec, const kvs_cpu_q8_t *xq, size_t xs, uint32_t nb,
    __mmask16 mask, const uint32_t NT)
{
    uint32_t        b, j, k, t;
    __m512          acc[KVS_QLP_WT], part[KVS_QLP_WT][8], d, m;
    __m512i         u[8], is[KVS_QLP_WT];
    const uint8_t  *r;

    for (j = 0; j < 8; j++) {
#pragma GCC unroll 16
        for (t = 0; t < NT; t++) {
            acc[t] = _mm512_setzero_ps();
        }

        for (b = j; b < nb; b += 8) {
            r = p + (size_t) b * rec;

            kvs_qlp_record(type, r, u, &d, &m);

            /* k outer, tokens inner: NT chains in flight */
#pragma GCC unroll 16
            for (t = 0; t < NT; t++) {
                is[t] = kvs_qlp_init(type, xq + t * xs + b);
            }

#pragma GCC unroll 8
            for (k = 0; k < 8; k++) {
#pragma GCC unroll 16
                for (t = 0; t < NT; t++) {
                    is[t] = kvs_cpu_dpbusd_m(is[t], u[k],
                                         xq[t * xs + b].q + 4 * k);
                }
            }

#pragma GCC unroll 16
            for (t = 0; t < NT; t++) {
                acc[t] = kvs_qlp_fold(type, is[t], d, m, xq + t * xs + b,
                                      acc[t]);
            }
        }

#pragma GCC unroll 16
        for (t = 0; t < NT; t++) {
            part[t][j] = acc[t];
        }
    }

#pragma GCC unroll 16
    for (t = 0; t < NT; t++) {
        _mm512_mask_storeu_ps(y + t * ldy, mask, kvs_qlp_tree(part[t]));
    }
}


KVS_QLP_INLINE void
kvs_qlp_rows(uint32_t type, float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8_t *xq, uint32_t n)
{
    size_t          nb;
    uint32_t        i, rec;
    __mmask16       mask;
    const uint8_t  *p;

    rec = kvs_cpu_qlp_rec(type);
    nb = w->cols / 32;
    p = (const uint8_t *) w->pack + (size_t) g * nb * rec;
    mask = kvs_cpu_pack_mask(w, g);
    y += (size_t) g * KVS_CPU_Q8P_ROWS;

    i = 0;

    /* the first token streams the group's records in, fetching ahead;
     * then passes of up to KVS_QLP_WT tokens find them in the cache */
    if (n > 4) {
        kvs_qlp_tile(type, y, ldy, p, rec, xq, nb, nb, mask, 1, 1);
        i = 1;
    }

    for ( /* void */ ; i + KVS_QLP_WT <= n; i += KVS_QLP_WT) {
        kvs_qlp_wide(type, y + i * ldy, ldy, p, rec, xq + i * nb, nb, nb,
                     mask, KVS_QLP_WT);
    }

    if (i + 8 <= n) {
        kvs_qlp_wide(type, y + i * ldy, ldy, p, rec, xq + i * nb, nb, nb,
                     mask, 8);
        i += 8;
    }

    if (i + 4 <= n) {
        kvs_qlp_wide(type, y + i * ldy, ldy, p, rec, xq + i * nb, nb, nb,
                     mask, 4);
        i += 4;
    }

    for ( /* void */ ; i + KVS_QLP_NT <= n; i += KVS_QLP_NT) {
        kvs_qlp_tile(type, y + i * ldy, ldy, p, rec, xq + i * nb, nb, nb,
                     mask, i == 0, KVS_QLP_NT);
    }

    if (i < n) {
        kvs_qlp_tile(type, y + i * ldy, ldy, p, rec, xq + i * nb, nb, nb,
                     mask, i == 0, 1);
    }
}


/* y[i][g * 16 + r] for the rows r of packed group g inside the matrix
 * and every token i < n (xq: n tokens of w->cols / 32 blocks) */
__attribute__((target(KVS_QLP_TARGET))) void
kvs_cpu_qlp_rows_avx512(float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8_t *xq, uint32_t n)
{
    /* one specialization of the kernel per type (a constant inside) */
    switch (w->type) {
#define KVS_QLP_TYPE(t)                                                     \
    case t:                                                                 \
        kvs_qlp_rows(t, y, ldy, w, g, xq, n);                               \
        break;
    KVS_QLP_TYPE(KVS_GGML_Q4_0)
    KVS_QLP_TYPE(KVS_GGML_Q4_1)
    KVS_QLP_TYPE(KVS_GGML_Q5_0)
    KVS_QLP_TYPE(KVS_GGML_Q5_1)
#undef KVS_QLP_TYPE
    default: /* IQ4_NL */
        kvs_qlp_rows(KVS_GGML_IQ4_NL, y, ldy, w, g, xq, n);
        break;
    }
}

#endif /* KVS_CPU_X86 */
