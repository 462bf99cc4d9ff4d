/*
 * kvs_k_util: device helpers shared by the kernels in this directory:
 * loading and storing the three element types as F32, which dtypes a
 * kernel takes, and the launch check every launcher ends with.  Header
 * only; nothing here allocates.
 */

#ifndef KVS_K_UTIL_CUH
#define KVS_K_UTIL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "kvs_kernels.h"

/* Element i of a buffer of dtype t, as F32. */
__device__ __forceinline__ float
kvs_k_load(const void *p, int t, size_t i)
{
    if (t == KVS_K_BF16) {
        return __bfloat162float(((const __nv_bfloat16 *) p)[i]);
    }

    if (t == KVS_K_F16) {
        return __half2float(((const __half *) p)[i]);
    }

    return ((const float *) p)[i];
}

/* Stores x into element i of a buffer of dtype t, rounding to nearest
 * even. */
__device__ __forceinline__ void
kvs_k_store(void *p, int t, size_t i, float x)
{
    if (t == KVS_K_BF16) {
        ((__nv_bfloat16 *) p)[i] = __float2bfloat16_rn(x);

    } else if (t == KVS_K_F16) {
        ((__half *) p)[i] = __float2half_rn(x);

    } else {
        ((float *) p)[i] = x;
    }
}

/* An activation's or weight's dtype (a kernel's input or output). */
static __forceinline__ int
kvs_k_dtype_ok(int t)
{
    return t == KVS_K_F32 || t == KVS_K_F16 || t == KVS_K_BF16;
}

/* A K/V cache's dtype: those, or int8 and fp8 with scales. */
static __host__ __device__ __forceinline__ int
kvs_k_kv_scaled(int t)
{
    return t == KVS_K_I8 || t == KVS_K_FP8;
}

static __forceinline__ int
kvs_k_kv_dtype_ok(int t)
{
    return kvs_k_dtype_ok(t) || kvs_k_kv_scaled(t);
}

/* What a launcher returns after its launches: the launch error, if any. */
static __forceinline__ int
kvs_k_launched(void)
{
    return (int) cudaGetLastError();
}

#endif /* KVS_K_UTIL_CUH */
