/*
 * kvs_cpu_ffn: the CPU backend's FFN activation, SwiGLU: per token,
 * h1 = silu(h1) * h3, between the gate/up products and the down product
 * (kvs_cpu_forward runs it as one task per token); or Gemma's GeGLU,
 * h1 = gelu(h1) * h3 with gelu's tanh form, portable only (libm's
 * tanhf).  Portable in run.c's
 * order with libm's expf, or AVX2 + FMA with kvs_cpu_exp8 (within ~1 ulp
 * of expf), rounding each element as the portable loop does.
 *
 * Invariant: a token's activations depend only on its own row, never on
 * the batch or the thread that runs it.
 */

#include <math.h>

#include "kvs_cpu_exp.h"
#include "kvs_cpu_impl.h"


#if KVS_CPU_X86
static void kvs_cpu_swiglu_avx2(float *h1, const float *h3, uint32_t f);
#endif


/* Per token i: h1[i] = silu(h1[i]) * h3[i]. */
void
kvs_cpu_swiglu_task(void *arg, uint32_t i, uint32_t thread)
{
    float         *h1, *h3, z;
    uint32_t       j;
    kvs_cpu_fw_t  *fw;

    fw = arg;
    h1 = fw->h1 + (size_t) i * fw->f;
    h3 = fw->h3 + (size_t) i * fw->f;

#if KVS_CPU_X86
    if (fw->simd >= KVS_CPU_SIMD_AVX2) {
        kvs_cpu_swiglu_avx2(h1, h3, fw->f);
        return;
    }
#endif

    for (j = 0; j < fw->f; j++) {
        z = h1[j];
        h1[j] = z * (1.0f / (1.0f + expf(-z))) * h3[j];
    }
}


#if KVS_CPU_X86

/* silu(h1) * h3 as the portable loop rounds it, with kvs_cpu_exp8. */
__attribute__((target("avx2,fma"))) static void
kvs_cpu_swiglu_avx2(float *h1, const float *h3, uint32_t f)
{
    float     z;
    uint32_t  j;
    __m256    x, one, s;

    one = _mm256_set1_ps(1.0f);

    for (j = 0; j + 8 <= f; j += 8) {
        x = _mm256_loadu_ps(h1 + j);
        s = _mm256_div_ps(one, _mm256_add_ps(one, kvs_cpu_exp8(
                _mm256_sub_ps(_mm256_setzero_ps(), x))));
        _mm256_storeu_ps(h1 + j, _mm256_mul_ps(_mm256_mul_ps(x, s),
                                               _mm256_loadu_ps(h3 + j)));
    }

    for ( /* void */ ; j < f; j++) {
        z = h1[j];
        h1[j] = z * (1.0f / (1.0f + expf(-z))) * h3[j];
    }
}

#endif /* KVS_CPU_X86 */


/* Per token i: h1[i] = gelu(h1[i]) * h3[i], gelu(z) = z/2 (1 + tanh(
 * sqrt(2/pi) (z + 0.044715 z^3))), as ggml and Hugging Face's
 * gelu_pytorch_tanh define it. */
void
kvs_cpu_geglu_task(void *arg, uint32_t i, uint32_t thread)
{
    float         *h1, *h3, z;
    uint32_t       j;
    kvs_cpu_fw_t  *fw;

    const float    c = 0.7978845608f;      /* sqrt(2 / pi) */

    fw = arg;
    h1 = fw->h1 + (size_t) i * fw->f;
    h3 = fw->h3 + (size_t) i * fw->f;

    for (j = 0; j < fw->f; j++) {
        z = h1[j];
        h1[j] = 0.5f * z * (1.0f + tanhf(c * (z + 0.044715f * z * z * z)))
                * h3[j];
    }
}
