/*
 * kvs_k_headnorm: RMSNorm of every head of q or k in place, with one
 * weight vector of the head's width shared by all heads (qwen3's
 * attn_q_norm / attn_k_norm, applied before RoPE).
 *
 * Thread layout: one warp per head row (4 warps per block of 128
 * threads); a warp strides over the head's d elements and reduces the
 * sum of squares with shuffles, so no shared memory and no barrier.
 *
 * Invariants: sums in F32; the scale is 1.0f / sqrtf(ss / d + eps) and
 * each output w[j] * (scale * x[j]), kvs_cpu_rmsnorm()'s formula (only
 * the order of the additions in ss differs); each lane rewrites only the
 * elements it read, after the reduction, so in place is safe.  Padding
 * rows (zeros) stay zeros.
 */

#include <stdint.h>

#include "kvs_k_util.cuh"

#define KVS_K_HN_WARPS    4
#define KVS_K_HN_THREADS  (32 * KVS_K_HN_WARPS)


/* x [n_rows][d] F32, w [d] F32 */
__global__ void __launch_bounds__(KVS_K_HN_THREADS)
kvs_k_headnorm_kernel(float *x, const float *w, uint32_t n_rows, uint32_t d,
    float eps)
{
    float     *xr, ss;
    uint32_t   j, k, lane;
    uint64_t   row;

    row = (uint64_t) blockIdx.x * KVS_K_HN_WARPS + threadIdx.x / 32;
    lane = threadIdx.x % 32;

    if (row >= n_rows) {
        return;
    }

    xr = x + row * d;
    ss = 0.0f;

    for (j = lane; j < d; j += 32) {
        ss += xr[j] * xr[j];
    }

    for (k = 16; k > 0; k >>= 1) {
        ss += __shfl_xor_sync(0xffffffffu, ss, k);
    }

    ss = 1.0f / sqrtf(ss / (float) d + eps);

    for (j = lane; j < d; j += 32) {
        xr[j] = w[j] * (ss * xr[j]);
    }
}


extern "C" int
kvs_k_headnorm(float *x, const float *w, uint32_t n_rows, uint32_t d,
    float eps, cudaStream_t st)
{
    uint32_t  blocks;

    if (x == NULL || w == NULL || n_rows == 0 || n_rows > INT32_MAX
        || d == 0 || d > INT32_MAX)
    {
        return KVS_K_EARG;
    }

    blocks = (n_rows + KVS_K_HN_WARPS - 1) / KVS_K_HN_WARPS;

    kvs_k_headnorm_kernel<<<blocks, KVS_K_HN_THREADS, 0, st>>>(x, w, n_rows,
                                                              d, eps);

    return kvs_k_launched();
}
