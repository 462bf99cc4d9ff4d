/*
 * kvs_cpu_exp: the CPU backend's vectorized e^x, 8 floats with AVX2 +
 * FMA, for the attention's softmax (kvs_cpu_attn.c) and the SwiGLU
 * activation (kvs_cpu_ffn.c); and its 16-lane twin for the AVX-512
 * attention, lane for lane the same operations.  Header only: each user
 * inlines it into its own AVX2 (AVX-512) functions.  Private to
 * src/backend/cpu/.
 *
 * Invariant: one definition for both users, since stories260K's texts
 * are byte exact with these bits; kvs_cpu_exp16 gives them too.
 */

#ifndef KVS_CPU_EXP_H
#define KVS_CPU_EXP_H

#include "kvs_cpu_impl.h"

#if KVS_CPU_X86

#include <immintrin.h>


/*
 * e^x for 8 floats: x = n ln2 + r (ln2 in two parts, |r| <= ln2 / 2),
 * e^r by its Taylor polynomial of degree 7 (truncation under 1e-8
 * relative), scaled by 2^n through the exponent bits.  Within ~1 ulp of
 * expf; 0 below -87.3 (and for -inf, NaN), finite (2^127-ish) above
 * 88.3: callers want 0 for masked scores and a saturated sigmoid.
 */
__attribute__((target("avx2,fma"))) static inline __m256
kvs_cpu_exp8(__m256 x)
{
    __m256   n, r, p, keep;
    __m256i  e;

    keep = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_GE_OQ);
    x = _mm256_min_ps(x, _mm256_set1_ps(88.3f));
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));

    n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);

    p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));

    e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
                                           _mm256_set1_epi32(127)), 23);

    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
}


/* kvs_cpu_exp8 in 16 lanes (AVX-512 F): the same operations lane for
 * lane, so the same bits, at half the instructions per float. */
__attribute__((target("avx512f"))) static inline __m512
kvs_cpu_exp16(__m512 x)
{
    __m512     n, r, p;
    __m512i    e;
    __mmask16  keep;

    keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GE_OQ);
    x = _mm512_min_ps(x, _mm512_set1_ps(88.3f));
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));

    n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);

    p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));

    e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n),
                                           _mm512_set1_epi32(127)), 23);

    return _mm512_maskz_mov_ps(keep,
                               _mm512_mul_ps(p, _mm512_castsi512_ps(e)));
}

#endif /* KVS_CPU_X86 */

#endif /* KVS_CPU_EXP_H */
