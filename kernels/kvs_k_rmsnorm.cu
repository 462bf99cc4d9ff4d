/*
 * kvs_k_rmsnorm: RMSNorm, optionally fused with the residual add before
 * it, writing the next product's input in its dtype (see kvs_kernels.h).
 *
 * Thread layout: one block of 256 threads per output row (blockIdx.x =
 * i), striding over d; the sum of squares is reduced per warp with
 * shuffles, then across the 8 warps through shared memory.
 *
 * Invariants: sums in F32; the scale is 1.0f / sqrtf(ss / d + eps) and
 * each output w[j] * (scale * x[j]), the formula and rounding order of
 * kvs_cpu_rmsnorm() (only the order of the additions in ss differs); a
 * thread reads back only the x[j] it wrote itself, so the in-place
 * residual add needs no barrier; a negative rows[i] (padding) writes a
 * zero row and reads nothing.  out must not overlap x or r.
 */

#include <stdint.h>

#include "kvs_k_util.cuh"

#define KVS_K_RMS_THREADS  256
#define KVS_K_RMS_WARPS    (KVS_K_RMS_THREADS / 32)


/* out [n][d] of dtype t; x, r [n_x][d]; w [d] */
__global__ void __launch_bounds__(KVS_K_RMS_THREADS)
kvs_k_rmsnorm_kernel(void *out, int t, float *x, const float *r,
    const float *w, const int32_t *rows, uint32_t d, float eps)
{
    int32_t   row;
    size_t    o;
    float    *xr, v, ss;
    uint32_t  j, k;

    __shared__ float  part[KVS_K_RMS_WARPS];

    o = (size_t) blockIdx.x * d;
    row = rows != NULL ? rows[blockIdx.x] : (int32_t) blockIdx.x;

    if (row < 0) {
        for (j = threadIdx.x; j < d; j += blockDim.x) {
            kvs_k_store(out, t, o + j, 0.0f);
        }

        return;
    }

    xr = x + (size_t) row * d;
    ss = 0.0f;

    if (r != NULL) {
        r += (size_t) row * d;

        for (j = threadIdx.x; j < d; j += blockDim.x) {
            v = xr[j] + r[j];
            xr[j] = v;
            ss += v * v;
        }

    } else {
        for (j = threadIdx.x; j < d; j += blockDim.x) {
            v = xr[j];
            ss += v * v;
        }
    }

    for (k = 16; k > 0; k >>= 1) {
        ss += __shfl_xor_sync(0xffffffffu, ss, k);
    }

    if (threadIdx.x % 32 == 0) {
        part[threadIdx.x / 32] = ss;
    }

    __syncthreads();

    ss = 0.0f;

    for (k = 0; k < KVS_K_RMS_WARPS; k++) {
        ss += part[k];
    }

    /* every thread forms the same scale from the same sums */
    ss = 1.0f / sqrtf(ss / (float) d + eps);

    for (j = threadIdx.x; j < d; j += blockDim.x) {
        kvs_k_store(out, t, o + j, w[j] * (ss * xr[j]));
    }
}


extern "C" int
kvs_k_rmsnorm(void *out, int out_dtype, float *x, const float *r,
    const float *w, const int32_t *rows, uint32_t n, uint32_t d, float eps,
    cudaStream_t st)
{
    if (out == NULL || x == NULL || w == NULL || n == 0 || n > INT32_MAX
        || d == 0 || d > INT32_MAX || !kvs_k_dtype_ok(out_dtype)
        || (rows != NULL && r != NULL) || out == (void *) x)
    {
        return KVS_K_EARG;
    }

    kvs_k_rmsnorm_kernel<<<n, KVS_K_RMS_THREADS, 0, st>>>(out, out_dtype, x,
                                                         r, w, rows, d, eps);

    return kvs_k_launched();
}
