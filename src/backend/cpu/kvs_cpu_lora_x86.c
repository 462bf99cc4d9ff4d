/*
 * kvs_cpu_lora_x86: the AVX2 and AVX-512 group kernels of the CPU
 * backend's LoRA (kvs_cpu_lora.h): for a group of rows of one adapter,
 * T = A x over the F16 A (converted to F32 as it is loaded, every
 * product and sum in F32), T *= scale, then y += B T over the F16 B^T.
 * A and B are read once per block of up to 4 rows (one pass over the
 * adapter's matrices for a group of 4 rows), the reason to group rows by
 * adapter.  The two levels share one body (kvs_cpu_lora_body.h, included
 * once per level); what differs is here: the vector width, how many
 * ranks and outputs a pass takes, and how a tail is read (AVX2: a
 * zero-padded copy; AVX-512: a mask).
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
    n = (size_t) p->rank * ((size_t) p->n_in + kvs_cpu_lora_blk_out(p->n_out))
        * sizeof(uint16_t);

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
kvs_cpu_lora_h8(const uint16_t *p, uint32_t n)
{
    uint16_t  buf[8];

    if (n == 8) {
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) p));
    }

    memset(buf, 0, sizeof(buf));
    memcpy(buf, p, n * sizeof(uint16_t));

    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) buf));
}


__attribute__((target(KVS_CPU_LORA_T2), always_inline)) static inline __m256
kvs_cpu_lora_f8(const float *p, uint32_t n)
{
    float  buf[8];

    if (n == 8) {
        return _mm256_loadu_ps(p);
    }

    memset(buf, 0, sizeof(buf));
    memcpy(buf, p, n * sizeof(float));

    return _mm256_loadu_ps(buf);
}


__attribute__((target(KVS_CPU_LORA_T2), always_inline)) static inline void
kvs_cpu_lora_st8(float *p, __m256 v, uint32_t n)
{
    float  buf[8];

    if (n == 8) {
        _mm256_storeu_ps(p, v);
        return;
    }

    _mm256_storeu_ps(buf, v);
    memcpy(p, buf, n * sizeof(float));
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


#define KVS_LX(name)         name##_avx2
#define KVS_LX_TARGET        KVS_CPU_LORA_T2
#define KVS_LX_V             __m256
#define KVS_LX_L             8
#define KVS_LX_NR            2
#define KVS_LX_NV            2
#define KVS_LX_ZERO()        _mm256_setzero_ps()
#define KVS_LX_FMA(a, b, c)  _mm256_fmadd_ps(a, b, c)
#define KVS_LX_SET1(f)       _mm256_set1_ps(f)
#define KVS_LX_LDH(p, n)     kvs_cpu_lora_h8(p, n)
#define KVS_LX_LDF(p, n)     kvs_cpu_lora_f8(p, n)
#define KVS_LX_STF(p, v, n)  kvs_cpu_lora_st8(p, v, n)
#define KVS_LX_HSUM(v)       kvs_cpu_lora_hsum8(v)

#include "kvs_cpu_lora_body.h"    /* undefines the KVS_LX names */


/* ---- AVX-512: 16 lanes, tails masked ---- */

__attribute__((target(KVS_CPU_LORA_T512), always_inline)) static inline
__mmask16
kvs_cpu_lora_m16(uint32_t n)
{
    return n >= 16 ? (__mmask16) 0xffff : (__mmask16) ((1u << n) - 1);
}


#define KVS_LX(name)         name##_avx512
#define KVS_LX_TARGET        KVS_CPU_LORA_T512
#define KVS_LX_V             __m512
#define KVS_LX_L             16
#define KVS_LX_NR            4
#define KVS_LX_NV            4
#define KVS_LX_ZERO()        _mm512_setzero_ps()
#define KVS_LX_FMA(a, b, c)  _mm512_fmadd_ps(a, b, c)
#define KVS_LX_SET1(f)       _mm512_set1_ps(f)
#define KVS_LX_LDH(p, n)                                                    \
    _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(kvs_cpu_lora_m16(n), p))
#define KVS_LX_LDF(p, n)     _mm512_maskz_loadu_ps(kvs_cpu_lora_m16(n), p)
#define KVS_LX_STF(p, v, n)                                                 \
    _mm512_mask_storeu_ps(p, kvs_cpu_lora_m16(n), v)
#define KVS_LX_HSUM(v)       _mm512_reduce_add_ps(v)

#include "kvs_cpu_lora_body.h"    /* undefines the KVS_LX names */

#endif /* KVS_CPU_X86 */
