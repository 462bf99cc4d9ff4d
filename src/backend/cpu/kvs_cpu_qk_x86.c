/*
 * kvs_cpu_qk_x86: the AVX2 twins of kvs_cpu_qk.c, to the same bits
 * (kvs_cpu_qdot.h), each behind its own target attribute.
 */

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

#include <string.h>

#include "kvs_cpu_qdot.h"

#if KVS_CPU_X86

#include <immintrin.h>


/* kvs_cpu_q8k_quant() 256 values at a time, to the same bits: the max is
 * exact in any order, d and 1 / d are the same scalar divisions, and
 * vcvtps2dq rounds to nearest even as lrintf does in the default mode. */
__attribute__((target("avx2,fma"))) void
kvs_cpu_q8k_quant_avx2(const float *x, kvs_cpu_q8k_t *dst, uint32_t cols)
{
    float     amax, d, id;
    uint32_t  b, k;
    __m128    m4;
    __m256    m, sign, iv;
    __m256i   q[4], s, p8;

    sign = _mm256_set1_ps(-0.0f);

    for (b = 0; b < cols / 256; b++) {
        m = _mm256_setzero_ps();

        for (k = 0; k < 32; k++) {
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign,
                                                  _mm256_loadu_ps(x + 8 * k)));
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

        for (k = 0; k < 8; k++) {
            q[0] = _mm256_cvtps_epi32(_mm256_mul_ps(
                       _mm256_loadu_ps(x + 32 * k), iv));
            q[1] = _mm256_cvtps_epi32(_mm256_mul_ps(
                       _mm256_loadu_ps(x + 32 * k + 8), iv));
            q[2] = _mm256_cvtps_epi32(_mm256_mul_ps(
                       _mm256_loadu_ps(x + 32 * k + 16), iv));
            q[3] = _mm256_cvtps_epi32(_mm256_mul_ps(
                       _mm256_loadu_ps(x + 32 * k + 24), iv));

            /* the two 16-column sums of these 32 */
            s = _mm256_hadd_epi32(_mm256_add_epi32(q[0], q[1]),
                                  _mm256_add_epi32(q[2], q[3]));
            s = _mm256_hadd_epi32(s, s);
            s = _mm256_hadd_epi32(s, s);
            dst[b].bsums[2 * k] = (int16_t) _mm256_cvtsi256_si32(s);
            dst[b].bsums[2 * k + 1] = (int16_t) _mm256_extract_epi32(s, 4);

            /* packs work within 128-bit lanes: 0 1 | 2 3 -> 0 2 | 1 3 */
            p8 = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
                                    _mm256_packs_epi32(q[2], q[3]));
            p8 = _mm256_permutevar8x32_epi32(p8,
                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *) (dst[b].q + 32 * k), p8);
        }

        x += 256;
    }
}

#endif /* KVS_CPU_X86 */
