/*
 * kvs_k_geglu: gemma's FFN gate, out = gelu(g) * u, in the dtype of the
 * down product's input; kvs_k_swiglu's twin (same layout and strides).
 *
 * Thread layout: one block of 256 threads per token row (blockIdx.x =
 * t), striding over n_ff; g and u are read at row stride ld, so a fused
 * gate/up product ([n][2 * n_ff], u = g + n_ff) needs no copy.
 *
 * Invariants: gelu is the tanh approximation, z/2 (1 + tanh(sqrt(2/pi)
 * (z + 0.044715 z^3))), written operation for operation as
 * kvs_cpu_geglu_task() writes it in F32 (tanhf here is CUDA's, within
 * 2 ulp of the CPU's libm); offsets are size_t.
 */

#include <stdint.h>

#include "kvs_k_util.cuh"

#define KVS_K_GEGLU_THREADS  256


/* out [n][n_ff] of dtype t; g, u [n][ld] F32, n_ff <= ld */
__global__ void
kvs_k_geglu_kernel(void *out, int t, const float *g, const float *u,
    size_t ld, uint32_t n_ff)
{
    float     z;
    size_t    o, in;
    uint32_t  j;

    const float  c = 0.7978845608f;            /* sqrt(2 / pi) */

    o = (size_t) blockIdx.x * n_ff;
    in = (size_t) blockIdx.x * ld;

    for (j = threadIdx.x; j < n_ff; j += blockDim.x) {
        z = g[in + j];
        kvs_k_store(out, t, o + j,
                    0.5f * z * (1.0f + tanhf(c * (z + 0.044715f * z * z
                                                      * z)))
                    * u[in + j]);
    }
}


extern "C" int
kvs_k_geglu(void *out, int out_dtype, const float *g, const float *u,
    size_t ld, uint32_t n, uint32_t n_ff, cudaStream_t st)
{
    if (out == NULL || g == NULL || u == NULL || n == 0 || n > INT32_MAX
        || n_ff == 0 || n_ff > INT32_MAX || ld < n_ff
        || ld > SIZE_MAX / sizeof(float) / n || !kvs_k_dtype_ok(out_dtype))
    {
        return KVS_K_EARG;
    }

    kvs_k_geglu_kernel<<<n, KVS_K_GEGLU_THREADS, 0, st>>>(out, out_dtype,
                                                         g, u, ld, n_ff);

    return kvs_k_launched();
}
