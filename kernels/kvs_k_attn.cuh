/*
 * kvs_k_attn: device helpers the two attention kernels share
 * (kvs_k_attn_decode.cu, kvs_k_attn_prefill.cu): the cache's element
 * types as raw storage and F32 (int8's and fp8's unscaled, by
 * kvs_kv_quant.h's decoding: `scaled` says the kernel applies the
 * block's head scale, per position, to the score and to the V weight),
 * vector loads from shared memory, the 16-byte (8-byte for 1-byte
 * elements) cp.async staging of K/V rows (with its commit and waits), and
 * the double-buffered tile loop's staging: positions pass through
 * shared memory in tiles, two stages, tile i + 1's rows in flight while
 * tile i is computed.  Header only; nothing here allocates; only
 * kvs_ka_tiles_first and kvs_ka_tiles_next synchronize the block.
 *
 * Register budget: the kernels are tuned to ptxas' register counts (no
 * spills, t/cuda_check.sh), which follow small changes of the code
 * handed to it.  So the tile loop's body stays in each kernel, and the
 * staging helpers take the kernels' variables by reference, as the
 * kernels' own lambdas capture them (by value, or with the body in a
 * lambda, decode's kernels grew by up to 10 registers).
 */

#ifndef KVS_K_ATTN_CUH
#define KVS_K_ATTN_CUH

#include <stdint.h>

#include "kvs_k_util.cuh"
#include "kv/kvs_kv_quant.h"


/* Raw storage of the cache's element types, their F32 value (unscaled),
 * whether a block scale applies, and the elements of one cp.async copy
 * (16 bytes; 8 for bytes, so that q and accumulator registers stay
 * those of a 16-bit cache). */
template <int DT> struct kvs_ka_ty;

template <> struct kvs_ka_ty<KVS_K_F32> {
    typedef float  raw;
    static constexpr bool  scaled = false;
    static constexpr int   vec = 4;
    static __device__ __forceinline__ float f(raw x) { return x; }
};

template <> struct kvs_ka_ty<KVS_K_F16> {
    typedef unsigned short  raw;
    static constexpr bool  scaled = false;
    static constexpr int   vec = 8;
    static __device__ __forceinline__ float f(raw x)
    {
        return __half2float(__ushort_as_half(x));
    }
};

template <> struct kvs_ka_ty<KVS_K_BF16> {
    typedef unsigned short  raw;
    static constexpr bool  scaled = false;
    static constexpr int   vec = 8;
    static __device__ __forceinline__ float f(raw x)
    {
        return __uint_as_float((unsigned) x << 16);
    }
};

/* int8 (FP8 0) and fp8 (FP8 1) codes, by kvs_kv_quant.h */
template <int FP8> struct kvs_ka_q8 {
    typedef unsigned char  raw;
    static constexpr bool  scaled = true;
    static constexpr int   vec = 8;
    static __device__ __forceinline__ float f(raw x)
    {
        return kvs_kvq_dec(FP8, x);
    }
};

template <> struct kvs_ka_ty<KVS_K_I8> : kvs_ka_q8<0> {};
template <> struct kvs_ka_ty<KVS_K_FP8> : kvs_ka_q8<1> {};


/* Two 16-bit elements packed in w, low first, as F32. */
template <int DT>
__device__ __forceinline__ void
kvs_ka_unpack2(unsigned w, float *f)
{
    f[0] = kvs_ka_ty<DT>::f((unsigned short) (w & 0xffffu));
    f[1] = kvs_ka_ty<DT>::f((unsigned short) (w >> 16));
}


/* V consecutive elements at p (shared memory, 16-byte aligned when V
 * elements make 16 bytes, 8-byte when 8 bytes) as F32. */
template <int DT, int V>
__device__ __forceinline__ void
kvs_ka_ld(const typename kvs_ka_ty<DT>::raw *p, float *f)
{
    typedef typename kvs_ka_ty<DT>::raw  raw;

    if constexpr (sizeof(raw) == 1 && V == 8) {
        uint2  u = *(const uint2 *) p;

#pragma unroll
        for (int i = 0; i < 4; i++) {
            f[i] = kvs_ka_ty<DT>::f((raw) (u.x >> (8 * i)));
            f[i + 4] = kvs_ka_ty<DT>::f((raw) (u.y >> (8 * i)));
        }

    } else if constexpr (V * sizeof(raw) == 16) {
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
 * 16-byte cp.async (src-size 0 zero-fills), 8-byte for V bytes, or
 * plain element copies. */
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

    } else if constexpr (V * sizeof(raw) == 8) {
        unsigned  s = (unsigned) __cvta_generic_to_shared(dst);

        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n"
                     :: "r"(s), "l"(src), "r"(ok ? 8 : 0) : "memory");

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


/* Waits until none of this thread's copies is pending. */
__device__ __forceinline__ void
kvs_ka_wait_all(void)
{
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}


/*
 * rowbase[b * a.tile + tid] := the cache row (block * bt + slot) of
 * position p0 + tid, by thread tid < a.tile when p0 + tid < end; ~0 when
 * the sequence's block id there (a.table[tbase + position / bt]) is
 * outside [0, n_blocks).  A is a kernel's arguments (table, bt, n_blocks,
 * tile).
 */
template <typename A>
__device__ __forceinline__ void
kvs_ka_rows_find(const A &a, uint64_t *const &rowbase, uint32_t b,
    uint64_t p0, const uint64_t &end, const int32_t &tbase,
    const uint32_t &tid)
{
    int32_t   blk;
    uint32_t  pu;

    if (tid < a.tile && p0 + tid < end) {
        pu = (uint32_t) (p0 + tid);
        blk = a.table[(size_t) tbase + pu / a.bt];
        rowbase[b * a.tile + tid] =
            blk >= 0 && (uint32_t) blk < a.n_blocks
            ? (uint64_t) blk * a.bt + pu % a.bt : ~(uint64_t) 0;
    }
}


/*
 * The double-buffered tile loop over positions [start, end), tiles of
 * a.tile, stage b = i & 1 for tile i.  Every thread of the CTA runs:
 *
 *     kvs_ka_tiles_first(a, rowbase, start, end, tbase, tid, issue);
 *
 *     for (i = 0; i < ntiles; i++) {
 *         p0 = start + i * a.tile;  nrows = min(end - p0, a.tile);
 *         kvs_ka_tiles_next(a, rowbase, i, ntiles, p0 + a.tile, end,
 *                           tbase, tid, issue);
 *         ... tile i's rows, in stage i & 1 ...
 *         __syncthreads();
 *     }
 *
 *     kvs_ka_wait_all();
 *
 * issue(b, p) issues this thread's copies of the rows of positions p..
 * into stage b, from rowbase[b]; kvs_ka_tiles_first stages tile 0 (call
 * it only when there is a tile).  kvs_ka_tiles_next puts tile i + 1's
 * copies in flight and returns once tile i's have landed for the whole
 * block; the stage it refills was last read before the barrier that
 * ended the previous iteration.
 */
template <typename A, typename Issue>
__device__ __forceinline__ void
kvs_ka_tiles_first(const A &a, uint64_t *const &rowbase,
    const uint64_t &start, const uint64_t &end, const int32_t &tbase,
    const uint32_t &tid, const Issue &issue)
{
    kvs_ka_rows_find(a, rowbase, 0, start, end, tbase, tid);
    __syncthreads();
    issue(0, start);
    kvs_ka_commit();
}


template <typename A, typename Issue>
__device__ __forceinline__ void
kvs_ka_tiles_next(const A &a, uint64_t *const &rowbase, uint32_t i,
    uint32_t ntiles, uint64_t p_next, const uint64_t &end,
    const int32_t &tbase, const uint32_t &tid, const Issue &issue)
{
    if (i + 1 < ntiles) {
        kvs_ka_rows_find(a, rowbase, (i + 1) & 1, p_next, end, tbase, tid);
    }

    __syncthreads();

    if (i + 1 < ntiles) {
        issue((i + 1) & 1, p_next);
    }

    kvs_ka_commit();
    kvs_ka_wait1();
    __syncthreads();
}

#endif /* KVS_K_ATTN_CUH */
