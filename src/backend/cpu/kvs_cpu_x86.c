/*
 * kvs_cpu_x86: the CPU backend's x86 product kernels, each behind its own
 * target attribute (the build stays generic x86-64; kvs_cpu_simd() says
 * which ones this CPU runs).  Other architectures compile nothing here.
 *
 *   AVX2 + FMA + F16C   F32 rows (2 tokens x 4 rows per pass), row
 *                       conversions, the Q8_0 input quantization (the
 *                       quantized types' products: kvs_cpu_ql_x86.c,
 *                       kvs_cpu_qk_x86.c)
 *   AVX-512             F32 rows (6 tokens x 4 rows per pass, 16 lanes);
 *                       with VNNI, packed Q8_0: 16 rows x up to 8 tokens
 *                       per pass, vpdpbusd
 *
 * Invariant: an output's summation order depends only on its row length,
 * never on how many tokens or rows share its pass, so batching changes
 * no bit of a token's results.  Batch-1 passes stream the weights, so
 * they prefetch the rows ahead into L2 (+6% F32, +23% F16, +20% Q8_0
 * decode on the 100M model).
 */

#include <string.h>

#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "kvs_cpu_impl.h"
#include "kvs_cpu_qdot.h"

#if KVS_CPU_X86

#include <immintrin.h>

#include "kvs_cpu_vnni.h"


/* Lanes of a summed in a fixed order: (0+4, 1+5, 2+6, 3+7), then pairs. */
__attribute__((target("avx2,fma"))) static inline float
kvs_cpu_hsum(__m256 a)
{
    __m128  s;

    s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));

    return _mm_cvtss_f32(s);
}


/*
 * y[i][r] = x[i] . w[r] for the nr (1..4) rows and n tokens: each output
 * keeps one 8-lane FMA accumulator over j in steps of 8, then
 * kvs_cpu_hsum(), then the tail of cols % 8 in order.  Two tokens by up
 * to four rows per pass: eight independent accumulators hide the FMA
 * latency, and each load feeds several FMAs.
 */
__attribute__((target("avx2,fma"))) void
kvs_cpu_mm_rows_avx2(float *y, size_t ldy, const float *x, uint32_t n,
    uint32_t cols, const float *const *w, uint32_t nr)
{
    float         t0, t1;
    size_t        pf;
    uint32_t      i, r, j, c8;
    __m256        a0, a1, a2, a3, b0, b1, b2, b3, x0, x1, wv;
    const float  *w0, *w1, *w2, *w3, *p0, *p1;

    c8 = cols & ~7u;
    w0 = w[0];
    w1 = w[nr > 1 ? 1 : 0];
    w2 = w[nr > 2 ? 2 : 0];
    w3 = w[nr > 3 ? 3 : 0];

    /* one token streams the weights: fetch the next four rows (adjacent
     * when they are F32 in the mapping) into L2 ahead */
    pf = n == 1 && nr == 4 && w1 == w0 + cols && w3 == w2 + cols
         ? 4 * (size_t) cols * sizeof(float) : 0;

    for (i = 0; i + 1 < n; i += 2) {
        p0 = x + (size_t) i * cols;
        p1 = p0 + cols;
        a0 = a1 = a2 = a3 = _mm256_setzero_ps();
        b0 = b1 = b2 = b3 = _mm256_setzero_ps();

        for (j = 0; j < c8; j += 8) {
            x0 = _mm256_loadu_ps(p0 + j);
            x1 = _mm256_loadu_ps(p1 + j);
            wv = _mm256_loadu_ps(w0 + j);
            a0 = _mm256_fmadd_ps(wv, x0, a0);
            b0 = _mm256_fmadd_ps(wv, x1, b0);
            wv = _mm256_loadu_ps(w1 + j);
            a1 = _mm256_fmadd_ps(wv, x0, a1);
            b1 = _mm256_fmadd_ps(wv, x1, b1);
            wv = _mm256_loadu_ps(w2 + j);
            a2 = _mm256_fmadd_ps(wv, x0, a2);
            b2 = _mm256_fmadd_ps(wv, x1, b2);
            wv = _mm256_loadu_ps(w3 + j);
            a3 = _mm256_fmadd_ps(wv, x0, a3);
            b3 = _mm256_fmadd_ps(wv, x1, b3);
        }

        {
            __m256  acc[2][4] = { { a0, a1, a2, a3 }, { b0, b1, b2, b3 } };

            for (r = 0; r < nr; r++) {
                t0 = kvs_cpu_hsum(acc[0][r]);
                t1 = kvs_cpu_hsum(acc[1][r]);

                for (j = c8; j < cols; j++) {
                    t0 += w[r][j] * p0[j];
                    t1 += w[r][j] * p1[j];
                }

                y[(size_t) i * ldy + r] = t0;
                y[(size_t) (i + 1) * ldy + r] = t1;
            }
        }
    }

    if (i < n) {
        p0 = x + (size_t) i * cols;
        a0 = a1 = a2 = a3 = _mm256_setzero_ps();

        for (j = 0; j < c8; j += 8) {
            if (pf) {
                _mm_prefetch((const char *) (w0 + j) + pf, _MM_HINT_T1);
                _mm_prefetch((const char *) (w1 + j) + pf, _MM_HINT_T1);
                _mm_prefetch((const char *) (w2 + j) + pf, _MM_HINT_T1);
                _mm_prefetch((const char *) (w3 + j) + pf, _MM_HINT_T1);
            }

            x0 = _mm256_loadu_ps(p0 + j);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + j), x0, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + j), x0, a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + j), x0, a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + j), x0, a3);
        }

        {
            __m256  acc[4] = { a0, a1, a2, a3 };

            for (r = 0; r < nr; r++) {
                t0 = kvs_cpu_hsum(acc[r]);

                for (j = c8; j < cols; j++) {
                    t0 += w[r][j] * p0[j];
                }

                y[(size_t) i * ldy + r] = t0;
            }
        }
    }
}


/* kvs_cpu_q8_quant() 32 values at a time, to the same bits: the max is
 * exact in any order, d and 1 / d are the same scalar divisions, and
 * vcvtps2dq rounds to nearest even as lrintf does in the default mode. */
__attribute__((target("avx2,fma"))) void
kvs_cpu_q8_quant_avx2(const float *x, kvs_cpu_q8_t *dst, uint32_t cols)
{
    float     amax, d, id;
    uint32_t  b, k;
    __m128    m4;
    __m256    v[4], m, sign, iv;
    __m256i   q[4], s, p16, p8;

    sign = _mm256_set1_ps(-0.0f);

    for (b = 0; b < cols / KVS_Q8_0_BLOCK; b++) {
        m = _mm256_setzero_ps();

        for (k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[k]));
        }

        m4 = _mm_max_ps(_mm256_castps256_ps128(m),
                        _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        amax = _mm_cvtss_f32(m4);

        d = amax / 127.0f;
        id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[b].d = d;
        iv = _mm256_set1_ps(id);

        for (k = 0; k < 4; k++) {
            q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], iv));
        }

        s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]),
                             _mm256_add_epi32(q[2], q[3]));
        s = _mm256_add_epi32(s, _mm256_srli_si256(s, 8));
        s = _mm256_add_epi32(s, _mm256_srli_si256(s, 4));
        dst[b].c = -128 * (_mm256_cvtsi256_si32(s)
                           + _mm256_extract_epi32(s, 4));

        /* packs work within 128-bit lanes: 0 1 | 2 3 -> 0 2 | 1 3 ... */
        p16 = _mm256_packs_epi32(q[0], q[1]);
        p8 = _mm256_packs_epi16(p16, _mm256_packs_epi32(q[2], q[3]));
        p8 = _mm256_permutevar8x32_epi32(p8,
                 _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *) dst[b].q, p8);

        x += KVS_Q8_0_BLOCK;
    }
}


/* kvs_cpu_row()'s conversions, 8 or 32 values at a time.  Rows are
 * converted four at a time, in order: the four after them are fetched
 * into L2 on the way (a batch-1 decode streams the weights). */
__attribute__((target("avx2,fma,f16c"))) void
kvs_cpu_row_avx2(const kvs_cpu_mat_t *w, const uint8_t *p, float *dst)
{
    float            d;
    size_t           pf;
    uint16_t         dh;
    uint32_t         j, b, c8;
    __m256           dv;
    __m256i          q;
    const uint16_t  *h;

    h = (const uint16_t *) p;
    c8 = w->cols & ~7u;
    pf = 4 * w->row_bytes;

    switch (w->type) {
    case KVS_GGML_F16:
        for (j = 0; j < c8; j += 8) {
            if ((j & 31) == 0) {
                _mm_prefetch((const char *) (h + j) + pf, _MM_HINT_T1);
            }

            _mm256_storeu_ps(dst + j, _mm256_cvtph_ps(
                _mm_loadu_si128((const __m128i *) (h + j))));
        }
        for (j = c8; j < w->cols; j++) {
            dst[j] = kvs_f16_to_f32(h[j]);
        }
        return;

    case KVS_GGML_BF16:
        for (j = 0; j < c8; j += 8) {
            if ((j & 31) == 0) {
                _mm_prefetch((const char *) (h + j) + pf, _MM_HINT_T1);
            }

            q = _mm256_cvtepu16_epi32(
                _mm_loadu_si128((const __m128i *) (h + j)));
            _mm256_storeu_ps(dst + j,
                             _mm256_castsi256_ps(_mm256_slli_epi32(q, 16)));
        }
        for (j = c8; j < w->cols; j++) {
            dst[j] = kvs_bf16_to_f32(h[j]);
        }
        return;

    default: /* Q8_0: cols is a multiple of 32 */
        for (b = 0; b < w->cols / KVS_Q8_0_BLOCK; b++) {
            memcpy(&dh, p, 2);
            d = kvs_f16_to_f32(dh);
            dv = _mm256_set1_ps(d);

            for (j = 0; j < KVS_Q8_0_BLOCK; j += 8) {
                q = _mm256_cvtepi8_epi32(
                    _mm_loadl_epi64((const __m128i *) (p + 2 + j)));
                _mm256_storeu_ps(dst + j,
                                 _mm256_mul_ps(dv, _mm256_cvtepi32_ps(q)));
            }

            p += KVS_Q8_0_BYTES;
            dst += KVS_Q8_0_BLOCK;
        }
        return;
    }
}


#ifndef KVS_CPU_Q8P_PF
#define KVS_CPU_Q8P_PF  8192
#endif

#define KVS_CPU_AVX512  "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"

/*
 * T tokens (1..6, a constant once inlined) by 4 rows: per output one
 * 16-lane FMA sum over j in steps of 16, the last cols % 16 as one more
 * step with zeros past the row, then _mm512_reduce_add_ps's fixed tree.
 * 24 accumulators; per step 4 + T loads feed 4 T FMAs.
 */
__attribute__((target(KVS_CPU_AVX512), always_inline)) static inline void
kvs_cpu_mm_tile512(float *y, size_t ldy, const float *x, uint32_t cols,
    const float *const *w, uint32_t nr, size_t pf, const uint32_t T)
{
    uint32_t   t, r, j, c16;
    __m512     acc[6][4], wv[4], xv;
    __mmask16  tail;

    c16 = cols & ~15u;
    tail = (__mmask16) ((1u << (cols & 15)) - 1);

#pragma GCC unroll 6
    for (t = 0; t < T; t++) {
#pragma GCC unroll 4
        for (r = 0; r < 4; r++) {
            acc[t][r] = _mm512_setzero_ps();
        }
    }

    for (j = 0; j < c16; j += 16) {
#pragma GCC unroll 4
        for (r = 0; r < 4; r++) {
            if (pf) {
                _mm_prefetch((const char *) (w[r] + j) + pf, _MM_HINT_T1);
            }

            wv[r] = _mm512_loadu_ps(w[r] + j);
        }

#pragma GCC unroll 6
        for (t = 0; t < T; t++) {
            xv = _mm512_loadu_ps(x + (size_t) t * cols + j);

#pragma GCC unroll 4
            for (r = 0; r < 4; r++) {
                acc[t][r] = _mm512_fmadd_ps(wv[r], xv, acc[t][r]);
            }
        }
    }

    if (tail) {
#pragma GCC unroll 4
        for (r = 0; r < 4; r++) {
            wv[r] = _mm512_maskz_loadu_ps(tail, w[r] + j);
        }

#pragma GCC unroll 6
        for (t = 0; t < T; t++) {
            xv = _mm512_maskz_loadu_ps(tail, x + (size_t) t * cols + j);

#pragma GCC unroll 4
            for (r = 0; r < 4; r++) {
                acc[t][r] = _mm512_fmadd_ps(wv[r], xv, acc[t][r]);
            }
        }
    }

#pragma GCC unroll 6
    for (t = 0; t < T; t++) {
        for (r = 0; r < nr; r++) {
            y[(size_t) t * ldy + r] = _mm512_reduce_add_ps(acc[t][r]);
        }
    }
}


/*
 * kvs_cpu_mm_rows_avx2()'s contract with AVX-512: up to 4 rows (w[0..nr))
 * by 6 tokens per pass, then a pass of the n % 6 left (their own
 * specialization; the order of each output is the same in all of them).
 */
__attribute__((target(KVS_CPU_AVX512))) void
kvs_cpu_mm_rows_avx512(float *y, size_t ldy, const float *x, uint32_t n,
    uint32_t cols, const float *const *w, uint32_t nr)
{
    size_t        pf;
    uint32_t      i;
    const float  *ww[4];

    for (i = 0; i < 4; i++) {
        ww[i] = w[i < nr ? i : 0];
    }

    /* the first pass streams the weights (later ones find them in L1):
     * it fetches the next four rows (adjacent when they are F32 in the
     * mapping) into L2 ahead */
    pf = nr == 4 && ww[1] == ww[0] + cols && ww[3] == ww[2] + cols
         ? 4 * (size_t) cols * sizeof(float) : 0;

    for (i = 0; i + 6 <= n; i += 6) {
        kvs_cpu_mm_tile512(y + (size_t) i * ldy, ldy, x + (size_t) i * cols,
                           cols, ww, nr, i == 0 ? pf : 0, 6);
    }

    y += (size_t) i * ldy;
    x += (size_t) i * cols;

    pf = i == 0 ? pf : 0;

    switch (n - i) {
    case 5:
        kvs_cpu_mm_tile512(y, ldy, x, cols, ww, nr, pf, 5);
        break;
    case 4:
        kvs_cpu_mm_tile512(y, ldy, x, cols, ww, nr, pf, 4);
        break;
    case 3:
        kvs_cpu_mm_tile512(y, ldy, x, cols, ww, nr, pf, 3);
        break;
    case 2:
        kvs_cpu_mm_tile512(y, ldy, x, cols, ww, nr, pf, 2);
        break;
    case 1:
        kvs_cpu_mm_tile512(y, ldy, x, cols, ww, nr, pf, 1);
        break;
    default:
        break;
    }
}


/*
 * NT tokens (1..8, a constant once inlined) by the 16 rows of one packed
 * group: per block, each lane's int32 sum starts at the token's
 * correction (-128 * sum of its q, undoing the weights' +128) and takes
 * 8 vpdpbusd of 4 bytes each, so it ends as the exact int32 block sum of
 * q_w * q_x; then acc += (float) sum * (d_w * d_x).  Each token has its
 * own accumulators and order, whatever NT is.
 */
__attribute__((target(KVS_CPU_AVX512), always_inline)) static inline void
kvs_cpu_q8p_tile(float *y, size_t ldy, const uint8_t *wq,
    const uint16_t *wd, const kvs_cpu_q8_t *xq, size_t xs, uint32_t nb,
    __mmask16 mask, const uint32_t NT)
{
    int32_t              v;
    uint32_t             b, k, t;
    __m512               fa[8], dw;
    __m512i              ia[8], ib[4], wv, wv1;
    const kvs_cpu_q8_t  *xb;

#pragma GCC unroll 8
    for (t = 0; t < NT; t++) {
        fa[t] = _mm512_setzero_ps();
    }

    for (b = 0; b < nb; b++) {
        dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) wd));

#pragma GCC unroll 8
        for (k = 0; k < 8; k++) {
            _mm_prefetch((const char *) wq + KVS_CPU_Q8P_PF + k * 64,
                         _MM_HINT_T1);
        }

#pragma GCC unroll 8
        for (t = 0; t < NT; t++) {
            ia[t] = _mm512_set1_epi32(xq[t * xs + b].c);
        }

        if (NT <= 4) {
            /* few tokens: two chains per token (even, odd k) so that the
             * vpdpbusd latency does not bound the weight stream */
#pragma GCC unroll 8
            for (t = 0; t < NT; t++) {
                ib[t] = _mm512_setzero_si512();
            }

#pragma GCC unroll 8
            for (k = 0; k < 8; k += 2) {
                wv = _mm512_load_si512((const void *) (wq + k * 64));
                wv1 = _mm512_load_si512((const void *) (wq + k * 64 + 64));

#pragma GCC unroll 8
                for (t = 0; t < NT; t++) {
                    memcpy(&v, xq[t * xs + b].q + 4 * k, 4);
                    ia[t] = _mm512_dpbusd_epi32(ia[t], wv,
                                                _mm512_set1_epi32(v));
                    memcpy(&v, xq[t * xs + b].q + 4 * k + 4, 4);
                    ib[t] = _mm512_dpbusd_epi32(ib[t], wv1,
                                                _mm512_set1_epi32(v));
                }
            }

#pragma GCC unroll 8
            for (t = 0; t < NT; t++) {
                ia[t] = _mm512_add_epi32(ia[t], ib[t]);
            }

        } else {
#pragma GCC unroll 8
            for (k = 0; k < 8; k++) {
                wv = _mm512_load_si512((const void *) (wq + k * 64));

#pragma GCC unroll 8
                for (t = 0; t < NT; t++) {
                    ia[t] = kvs_cpu_dpbusd_m(ia[t], wv,
                                             xq[t * xs + b].q + 4 * k);
                }
            }
        }

#pragma GCC unroll 8
        for (t = 0; t < NT; t++) {
            xb = &xq[t * xs + b];
            fa[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[t]),
                                    _mm512_mul_ps(dw,
                                                  _mm512_set1_ps(xb->d)),
                                    fa[t]);
        }

        wq += KVS_CPU_Q8P_BYTES;
        wd += KVS_CPU_Q8P_ROWS;
    }

#pragma GCC unroll 8
    for (t = 0; t < NT; t++) {
        _mm512_mask_storeu_ps(y + t * ldy, mask, fa[t]);
    }
}


/*
 * y[i][g * 16 + r] for the rows r of packed group g (those inside the
 * matrix) and every token i < n, 8 tokens per pass: the group's weights
 * (cols bytes per row) stay in L1/L2 across the passes.
 */
__attribute__((target(KVS_CPU_AVX512))) void
kvs_cpu_q8p_rows_avx512(float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8_t *xq, uint32_t n)
{
    size_t           nb;
    uint32_t         i;
    __mmask16        mask;
    const uint8_t   *wq;
    const uint16_t  *wd;

    nb = w->cols / KVS_Q8_0_BLOCK;
    wq = kvs_cpu_q8p_group(w, g, &wd);
    mask = kvs_cpu_pack_mask(w, g);
    y += (size_t) g * KVS_CPU_Q8P_ROWS;

    for (i = 0; i + 8 <= n; i += 8) {
        kvs_cpu_q8p_tile(y + i * ldy, ldy, wq, wd, xq + i * nb, nb, nb,
                         mask, 8);
    }

    if (n - i >= 4) {
        kvs_cpu_q8p_tile(y + i * ldy, ldy, wq, wd, xq + i * nb, nb, nb,
                         mask, 4);
        i += 4;
    }

    if (n - i >= 2) {
        kvs_cpu_q8p_tile(y + i * ldy, ldy, wq, wd, xq + i * nb, nb, nb,
                         mask, 2);
        i += 2;
    }

    if (n - i >= 1) {
        kvs_cpu_q8p_tile(y + i * ldy, ldy, wq, wd, xq + i * nb, nb, nb,
                         mask, 1);
    }
}

#endif /* KVS_CPU_X86 */
