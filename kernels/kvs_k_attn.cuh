/*
 * kvs_k_attn: device helpers the two attention kernels share
 * (kvs_k_attn_decode.cu, kvs_k_attn_prefill.cu): the cache's element
 * types as raw storage and F32, vector loads from shared memory, and the
 * 16-byte cp.async staging of K/V rows (with its commit and wait).
 * Header only; nothing here allocates or synchronizes a block.
 */

#ifndef KVS_K_ATTN_CUH
#define KVS_K_ATTN_CUH

#include <stdint.h>

#include "kvs_k_util.cuh"


/* Raw storage of the cache's element types and their F32 value. */
template <int DT> struct kvs_ka_ty;

template <> struct kvs_ka_ty<KVS_K_F32> {
    typedef float  raw;
    static __device__ __forceinline__ float f(raw x) { return x; }
};

template <> struct kvs_ka_ty<KVS_K_F16> {
    typedef unsigned short  raw;
    static __device__ __forceinline__ float f(raw x)
    {
        return __half2float(__ushort_as_half(x));
    }
};

template <> struct kvs_ka_ty<KVS_K_BF16> {
    typedef unsigned short  raw;
    static __device__ __forceinline__ float f(raw x)
    {
        return __uint_as_float((unsigned) x << 16);
    }
};


/* Two 16-bit elements packed in w, low first, as F32. */
template <int DT>
__device__ __forceinline__ void
kvs_ka_unpack2(unsigned w, float *f)
{
    f[0] = kvs_ka_ty<DT>::f((unsigned short) (w & 0xffffu));
    f[1] = kvs_ka_ty<DT>::f((unsigned short) (w >> 16));
}


/* V consecutive elements at p (shared memory, 16-byte aligned when V
 * elements make 16 bytes) as F32. */
template <int DT, int V>
__device__ __forceinline__ void
kvs_ka_ld(const typename kvs_ka_ty<DT>::raw *p, float *f)
{
    typedef typename kvs_ka_ty<DT>::raw  raw;

    if constexpr (V * sizeof(raw) == 16) {
        uint4  u = *(const uint4 *) p;

        if constexpr (sizeof(raw) == 4) {
            f[0] = __uint_as_float(u.x);
            f[1] = __uint_as_float(u.y);
            f[2] = __uint_as_float(u.z);
            f[3] = __uint_as_float(u.w);

        } else {
            kvs_ka_unpack2<DT>(u.x, f);
            kvs_ka_unpack2<DT>(u.y, f + 2);
            kvs_ka_unpack2<DT>(u.z, f + 4);
            kvs_ka_unpack2<DT>(u.w, f + 6);
        }

    } else {
#pragma unroll
        for (int i = 0; i < V; i++) {
            f[i] = kvs_ka_ty<DT>::f(p[i]);
        }
    }
}


/* Copies V elements from global src to shared dst, or zeros when !ok:
 * 16-byte cp.async (src-size 0 zero-fills) or plain element copies. */
template <int DT, int V>
__device__ __forceinline__ void
kvs_ka_copy(typename kvs_ka_ty<DT>::raw *dst,
    const typename kvs_ka_ty<DT>::raw *src, bool ok)
{
    typedef typename kvs_ka_ty<DT>::raw  raw;

    if constexpr (V * sizeof(raw) == 16) {
        unsigned  s = (unsigned) __cvta_generic_to_shared(dst);

        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                     :: "r"(s), "l"(src), "r"(ok ? 16 : 0) : "memory");

    } else {
#pragma unroll
        for (int i = 0; i < V; i++) {
            dst[i] = ok ? src[i] : (raw) 0;
        }
    }
}


__device__ __forceinline__ void
kvs_ka_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}


/* Waits until at most one group of this thread's copies is pending. */
__device__ __forceinline__ void
kvs_ka_wait1(void)
{
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}

#endif /* KVS_K_ATTN_CUH */
