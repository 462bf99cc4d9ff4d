/*
 * kvs_cpu_lora_x86: the AVX2 and AVX-512 group kernels of the CPU
 * backend's LoRA (kvs_cpu_lora.h): for a group of rows of one adapter,
 * T = A x over the F16 A (converted to F32 as it is loaded, every
 * product and sum in F32), T *= scale, then y += B T over the F16 B^T.
 * A and B are read once per block of up to 4 rows (one pass over the
 * adapter's matrices for a group of 4 rows), the reason to group rows by
 * adapter.
 *
 * Invariants: a row's result does not depend on the other rows of its
 * group nor on where it sits in it: T[r] is one vector sum over x in
 * column order (lanes, then a fixed reduction), y[o] is y[o] + T[0]
 * B[o][0] + T[1] B[o][1] + ... in rank order, in every block shape; the
 * tails (sides no multiple of the lanes) go through the same arithmetic
 * with zero padding (AVX2) or masks (AVX-512).  Nothing here allocates.
 */

#include <string.h>

#include "kvs_cpu_impl.h"
#include "kvs_cpu_lora.h"

#if KVS_CPU_X86

#include <immintrin.h>

#define KVS_CPU_LORA_T2    "avx2,fma,f16c"
#define KVS_CPU_LORA_T512  "avx512f,avx512bw,avx512vl,avx2,fma,f16c"
#define KVS_CPU_LORA_NX    4          /* rows per block */


/* The pair's values (A then B^T, adjacent in the slot's buffer) asked
 * for at once: a pair is a few KiB to a few hundred, read once per group
 * and, with many adapters in a step, never in the cache; fetched line by
 * line as the loops reach them it waits on each page's first misses. */
__attribute__((target(KVS_CPU_LORA_T2), always_inline)) static inline void
kvs_cpu_lora_prefetch(const kvs_cpu_lora_pair_t *p)
{
    size_t      n, o;
    const char *a;

    a = (const char *) p->a;
    n = (size_t) p->rank * ((size_t) p->n_in + p->n_out) * sizeof(uint16_t);

    for (o = 0; o < n; o += 64) {
        _mm_prefetch(a + o, _MM_HINT_T1);
    }
}


__attribute__((target(KVS_CPU_LORA_T2))) void
kvs_cpu_lora_f2h_n_f16c(uint16_t *dst, const float *src, size_t n, float f)
{
    size_t  i;
    __m256  fv;

    fv = _mm256_set1_ps(f);

    for (i = 0; i + 8 <= n; i += 8) {
        _mm_storeu_si128((__m128i *) (dst + i),
                         _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(src + i),
                                                       fv),
                                         _MM_FROUND_TO_NEAREST_INT));
    }

    for ( /* void */ ; i < n; i++) {
        dst[i] = kvs_cpu_lora_f2h(src[i] * f);
    }
}


/* The block of g's rows from i: 4, 2 or 1 of them (its count), their
 * inputs, outputs and T rows. */
static uint32_t
kvs_cpu_lora_block(const kvs_cpu_lora_pair_t *p, const kvs_cpu_lora_rows_t *g,
    uint32_t i, const float **xs, float **ys, float **ts)
{
    uint32_t  k, nx;

    nx = g->cnt - i >= 4 ? 4 : g->cnt - i >= 2 ? 2 : 1;

    for (k = 0; k < nx; k++) {
        xs[k] = g->x + (size_t) g->rows[i + k] * g->ldx;
        ys[k] = g->y + (size_t) g->rows[i + k] * g->ldy;
        ts[k] = g->t + (size_t) (i + k) * p->rank;
    }

    return nx;
}


/* ---- AVX2: 8 lanes, tails through zero-padded copies ---- */

__attribute__((target(KVS_CPU_LORA_T2), always_inline)) static inline __m256
kvs_cpu_lora_h8(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) p));
}


/* the first n (< 8) halves of p, zero-padded */
__attribute__((target(KVS_CPU_LORA_T2), always_inline)) static inline __m256
kvs_cpu_lora_h8_tail(const uint16_t *p, uint32_t n)
{
    uint16_t  buf[8];

    memset(buf, 0, sizeof(buf));
    memcpy(buf, p, n * sizeof(uint16_t));

    return kvs_cpu_lora_h8(buf);
}


__attribute__((target(KVS_CPU_LORA_T2), always_inline)) static inline __m256
kvs_cpu_lora_f8_tail(const float *p, uint32_t n)
{
    float  buf[8];

    memset(buf, 0, sizeof(buf));
    memcpy(buf, p, n * sizeof(float));

    return _mm256_loadu_ps(buf);
}


__attribute__((target(KVS_CPU_LORA_T2), always_inline)) static inline float
kvs_cpu_lora_hsum8(__m256 v)
{
    __m128  s;

    s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));

    return _mm_cvtss_f32(s);
}


/* t[i][r0 .. r0 + NR) = A[r0 .. r0 + NR) . x_i for NX rows */
__attribute__((target(KVS_CPU_LORA_T2), always_inline)) static inline void
kvs_cpu_lora_a2(const kvs_cpu_lora_pair_t *p, const float *const *xs,
    float *const *ts, uint32_t r0, const uint32_t NX, const uint32_t NR)
{
    uint32_t        c, i, k, n;
    __m256          acc[KVS_CPU_LORA_NX][2], av[2], xv;
    const uint16_t *a;

    n = p->n_in;
    a = p->a + (size_t) r0 * n;

#pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
#pragma GCC unroll 2
        for (k = 0; k < NR; k++) {
            acc[i][k] = _mm256_setzero_ps();
        }
    }

    for (c = 0; c + 8 <= n; c += 8) {
#pragma GCC unroll 2
        for (k = 0; k < NR; k++) {
            av[k] = kvs_cpu_lora_h8(a + (size_t) k * n + c);
        }
#pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            xv = _mm256_loadu_ps(xs[i] + c);
#pragma GCC unroll 2
            for (k = 0; k < NR; k++) {
                acc[i][k] = _mm256_fmadd_ps(xv, av[k], acc[i][k]);
            }
        }
    }

    if (c < n) {
#pragma GCC unroll 2
        for (k = 0; k < NR; k++) {
            av[k] = kvs_cpu_lora_h8_tail(a + (size_t) k * n + c, n - c);
        }
#pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            xv = kvs_cpu_lora_f8_tail(xs[i] + c, n - c);
#pragma GCC unroll 2
            for (k = 0; k < NR; k++) {
                acc[i][k] = _mm256_fmadd_ps(xv, av[k], acc[i][k]);
            }
        }
    }

#pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
#pragma GCC unroll 2
        for (k = 0; k < NR; k++) {
            ts[i][r0 + k] = kvs_cpu_lora_hsum8(acc[i][k]) * p->scale;
        }
    }
}


/* y_i[o .. o + 8 NV) += sum over r of t_i[r] B^T[r][...] for NX rows;
 * n (< 8, NV 1) for a tail, through padded copies */
__attribute__((target(KVS_CPU_LORA_T2), always_inline)) static inline void
kvs_cpu_lora_b2(const kvs_cpu_lora_pair_t *p, float *const *ys,
    const float *const *ts, uint32_t o, const uint32_t NX, const uint32_t NV,
    uint32_t n)
{
    float           buf[8];
    uint32_t        i, r, v;
    __m256          acc[KVS_CPU_LORA_NX][2], bv[2], tb;
    const uint16_t *b;

#pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
#pragma GCC unroll 2
        for (v = 0; v < NV; v++) {
            acc[i][v] = n ? kvs_cpu_lora_f8_tail(ys[i] + o, n)
                          : _mm256_loadu_ps(ys[i] + o + 8 * v);
        }
    }

    for (r = 0; r < p->rank; r++) {
        b = p->bt + (size_t) r * p->n_out + o;
#pragma GCC unroll 2
        for (v = 0; v < NV; v++) {
            bv[v] = n ? kvs_cpu_lora_h8_tail(b, n)
                      : kvs_cpu_lora_h8(b + 8 * v);
        }
#pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            tb = _mm256_set1_ps(ts[i][r]);
#pragma GCC unroll 2
            for (v = 0; v < NV; v++) {
                acc[i][v] = _mm256_fmadd_ps(tb, bv[v], acc[i][v]);
            }
        }
    }

#pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
        if (n) {
            _mm256_storeu_ps(buf, acc[i][0]);
            memcpy(ys[i] + o, buf, n * sizeof(float));
            continue;
        }
#pragma GCC unroll 2
        for (v = 0; v < NV; v++) {
            _mm256_storeu_ps(ys[i] + o + 8 * v, acc[i][v]);
        }
    }
}


__attribute__((target(KVS_CPU_LORA_T2), always_inline)) static inline void
kvs_cpu_lora_blk2(const kvs_cpu_lora_pair_t *p, const float *const *xs,
    float *const *ys, float *const *ts, const uint32_t NX)
{
    uint32_t  r, o;

    for (r = 0; r + 2 <= p->rank; r += 2) {
        kvs_cpu_lora_a2(p, xs, ts, r, NX, 2);
    }
    if (r < p->rank) {
        kvs_cpu_lora_a2(p, xs, ts, r, NX, 1);
    }

    for (o = 0; o + 16 <= p->n_out; o += 16) {
        kvs_cpu_lora_b2(p, ys, (const float *const *) ts, o, NX, 2, 0);
    }
    if (o + 8 <= p->n_out) {
        kvs_cpu_lora_b2(p, ys, (const float *const *) ts, o, NX, 1, 0);
        o += 8;
    }
    if (o < p->n_out) {
        kvs_cpu_lora_b2(p, ys, (const float *const *) ts, o, NX, 1,
                        p->n_out - o);
    }
}


__attribute__((target(KVS_CPU_LORA_T2))) void
kvs_cpu_lora_rows_avx2(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g)
{
    float        *ys[KVS_CPU_LORA_NX], *ts[KVS_CPU_LORA_NX];
    uint32_t      i, nx;
    const float  *xs[KVS_CPU_LORA_NX];

    kvs_cpu_lora_prefetch(p);

    for (i = 0; i < g->cnt; i += nx) {
        nx = kvs_cpu_lora_block(p, g, i, xs, ys, ts);

        if (nx == 4) {
            kvs_cpu_lora_blk2(p, xs, ys, ts, 4);
        } else if (nx == 2) {
            kvs_cpu_lora_blk2(p, xs, ys, ts, 2);
        } else {
            kvs_cpu_lora_blk2(p, xs, ys, ts, 1);
        }
    }
}


/* ---- AVX-512: 16 lanes, tails masked ---- */

__attribute__((target(KVS_CPU_LORA_T512), always_inline)) static inline
__m512
kvs_cpu_lora_h16(const uint16_t *p, __mmask16 m)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}


/* t[i][r0 .. r0 + NR) = A[r0 .. r0 + NR) . x_i for NX rows */
__attribute__((target(KVS_CPU_LORA_T512), always_inline)) static inline void
kvs_cpu_lora_a512(const kvs_cpu_lora_pair_t *p, const float *const *xs,
    float *const *ts, uint32_t r0, const uint32_t NX, const uint32_t NR)
{
    uint32_t        c, i, k, n;
    __m512          acc[KVS_CPU_LORA_NX][4], av[4], xv;
    __mmask16       m;
    const uint16_t *a;

    n = p->n_in;
    a = p->a + (size_t) r0 * n;

#pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
#pragma GCC unroll 4
        for (k = 0; k < NR; k++) {
            acc[i][k] = _mm512_setzero_ps();
        }
    }

    for (c = 0; c < n; c += 16) {
        m = n - c >= 16 ? (__mmask16) 0xffff
                        : (__mmask16) ((1u << (n - c)) - 1);
#pragma GCC unroll 4
        for (k = 0; k < NR; k++) {
            av[k] = kvs_cpu_lora_h16(a + (size_t) k * n + c, m);
        }
#pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            xv = _mm512_maskz_loadu_ps(m, xs[i] + c);
#pragma GCC unroll 4
            for (k = 0; k < NR; k++) {
                acc[i][k] = _mm512_fmadd_ps(xv, av[k], acc[i][k]);
            }
        }
    }

#pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
#pragma GCC unroll 4
        for (k = 0; k < NR; k++) {
            ts[i][r0 + k] = _mm512_reduce_add_ps(acc[i][k]) * p->scale;
        }
    }
}


/* y_i[o .. o + 16 NV) += sum over r of t_i[r] B^T[r][...] for NX rows,
 * the last vector under mask m */
__attribute__((target(KVS_CPU_LORA_T512), always_inline)) static inline void
kvs_cpu_lora_b512(const kvs_cpu_lora_pair_t *p, float *const *ys,
    const float *const *ts, uint32_t o, const uint32_t NX, const uint32_t NV,
    __mmask16 m)
{
    uint32_t        i, r, v;
    __m512          acc[KVS_CPU_LORA_NX][4], bv[4], tb;
    __mmask16       mv[4];
    const uint16_t *b;

#pragma GCC unroll 4
    for (v = 0; v < NV; v++) {
        mv[v] = v + 1 == NV ? m : (__mmask16) 0xffff;
    }

#pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
#pragma GCC unroll 4
        for (v = 0; v < NV; v++) {
            acc[i][v] = _mm512_maskz_loadu_ps(mv[v], ys[i] + o + 16 * v);
        }
    }

    for (r = 0; r < p->rank; r++) {
        b = p->bt + (size_t) r * p->n_out + o;
#pragma GCC unroll 4
        for (v = 0; v < NV; v++) {
            bv[v] = kvs_cpu_lora_h16(b + 16 * v, mv[v]);
        }
#pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            tb = _mm512_set1_ps(ts[i][r]);
#pragma GCC unroll 4
            for (v = 0; v < NV; v++) {
                acc[i][v] = _mm512_fmadd_ps(tb, bv[v], acc[i][v]);
            }
        }
    }

#pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
#pragma GCC unroll 4
        for (v = 0; v < NV; v++) {
            _mm512_mask_storeu_ps(ys[i] + o + 16 * v, mv[v], acc[i][v]);
        }
    }
}


__attribute__((target(KVS_CPU_LORA_T512), always_inline)) static inline void
kvs_cpu_lora_blk512(const kvs_cpu_lora_pair_t *p, const float *const *xs,
    float *const *ys, float *const *ts, const uint32_t NX)
{
    uint32_t  r, o, n;

    for (r = 0; r + 4 <= p->rank; r += 4) {
        kvs_cpu_lora_a512(p, xs, ts, r, NX, 4);
    }
    for ( /* void */ ; r < p->rank; r++) {
        kvs_cpu_lora_a512(p, xs, ts, r, NX, 1);
    }

    n = p->n_out;

    for (o = 0; o + 64 <= n; o += 64) {
        kvs_cpu_lora_b512(p, ys, (const float *const *) ts, o, NX, 4,
                          (__mmask16) 0xffff);
    }
    for ( /* void */ ; o < n; o += 16) {
        kvs_cpu_lora_b512(p, ys, (const float *const *) ts, o, NX, 1,
                          n - o >= 16 ? (__mmask16) 0xffff
                                      : (__mmask16) ((1u << (n - o)) - 1));
    }
}


__attribute__((target(KVS_CPU_LORA_T512))) void
kvs_cpu_lora_rows_avx512(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g)
{
    float        *ys[KVS_CPU_LORA_NX], *ts[KVS_CPU_LORA_NX];
    uint32_t      i, nx;
    const float  *xs[KVS_CPU_LORA_NX];

    kvs_cpu_lora_prefetch(p);

    for (i = 0; i < g->cnt; i += nx) {
        nx = kvs_cpu_lora_block(p, g, i, xs, ys, ts);

        if (nx == 4) {
            kvs_cpu_lora_blk512(p, xs, ys, ts, 4);
        } else if (nx == 2) {
            kvs_cpu_lora_blk512(p, xs, ys, ts, 2);
        } else {
            kvs_cpu_lora_blk512(p, xs, ys, ts, 1);
        }
    }
}

#endif /* KVS_CPU_X86 */
