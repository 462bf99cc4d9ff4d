/*
 * kvs_k_dtype: element sizes, the F32 -> F32/F16/BF16 conversion and the
 * GGUF Q8_0 dequantization (load time only).
 *
 * Thread layout: both kernels are a grid-stride loop, one element per
 * thread per turn, 256 threads a block; the grid is sized from n alone
 * (capped), so a launch is graph-capturable.
 *
 * Invariants: every index is a size_t (a weight can pass 2^32
 * elements); a Q8_0 block is 34 bytes, an F16 scale d then 32 int8 q,
 * and element j of block b is d * q[j] formed in F32 as
 * kvs_q8_0_dequantize() does (exact: 11 + 7 significant bits), then
 * rounded once to the destination's dtype.
 */

#include <stdint.h>

#include "kvs_k_util.cuh"

#define KVS_K_DTYPE_THREADS  256
#define KVS_K_DTYPE_BLOCKS   65535u     /* cap: the loop strides past it */
#define KVS_K_Q8_0_BLOCK     32
#define KVS_K_Q8_0_BYTES     34


/* dst [n] of dtype t <- src [n] F32 */
__global__ void
kvs_k_convert_kernel(void *dst, int t, const float *src, size_t n)
{
    size_t  i, step;

    step = (size_t) gridDim.x * blockDim.x;

    for (i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += step)
    {
        kvs_k_store(dst, t, i, src[i]);
    }
}


/* dst [n] of dtype t <- src [n / 32] Q8_0 blocks */
__global__ void
kvs_k_q8_0_kernel(void *dst, int t, const uint8_t *src, size_t n)
{
    size_t          i, step;
    float           d;
    const uint8_t  *blk;

    step = (size_t) gridDim.x * blockDim.x;

    for (i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += step)
    {
        blk = src + (i / KVS_K_Q8_0_BLOCK) * KVS_K_Q8_0_BYTES;

        /* blocks are 34 bytes, so the scale is 2-aligned when src is */
        d = __half2float(*(const __half *) blk);

        kvs_k_store(dst, t, i,
                    d * (float) (int8_t) blk[2 + i % KVS_K_Q8_0_BLOCK]);
    }
}


static unsigned
kvs_k_dtype_grid(size_t n)
{
    size_t  g;

    g = (n + KVS_K_DTYPE_THREADS - 1) / KVS_K_DTYPE_THREADS;

    return g > KVS_K_DTYPE_BLOCKS ? KVS_K_DTYPE_BLOCKS : (unsigned) g;
}


extern "C" size_t
kvs_k_dtype_size(int t)
{
    switch (t) {
    case KVS_K_F32:
        return 4;
    case KVS_K_F16:
    case KVS_K_BF16:
        return 2;
    case KVS_K_I8:
    case KVS_K_FP8:
        return 1;
    default:
        return 0;
    }
}


extern "C" int
kvs_k_convert(void *dst, int dtype, const float *src, size_t n,
    cudaStream_t st)
{
    if (dst == NULL || src == NULL || n == 0 || !kvs_k_dtype_ok(dtype)
        || n > SIZE_MAX / sizeof(float))
    {
        return KVS_K_EARG;
    }

    kvs_k_convert_kernel<<<kvs_k_dtype_grid(n), KVS_K_DTYPE_THREADS, 0,
                           st>>>(dst, dtype, src, n);

    return kvs_k_launched();
}


extern "C" int
kvs_k_q8_0_to(void *dst, int dtype, const void *src, size_t n,
    cudaStream_t st)
{
    if (dst == NULL || src == NULL || n == 0 || n % KVS_K_Q8_0_BLOCK != 0
        || !kvs_k_dtype_ok(dtype) || n > SIZE_MAX / sizeof(float)
        || ((uintptr_t) src & 1) != 0)
    {
        return KVS_K_EARG;
    }

    kvs_k_q8_0_kernel<<<kvs_k_dtype_grid(n), KVS_K_DTYPE_THREADS, 0, st>>>(
        dst, dtype, (const uint8_t *) src, n);

    return kvs_k_launched();
}
