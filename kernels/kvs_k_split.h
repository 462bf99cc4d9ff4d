/*
 * kvs_k_split: which positions each split of the decode attention
 * kernel (kvs_k_attn_decode.cu) covers, in one place for the kernel and
 * for a C unit test (t/unit/test_k_split.c), since a device kernel
 * cannot be run on the build hosts.
 *
 * A token at position pos >= 0 sees positions first .. pos, first =
 * pos + 1 - window once pos >= window (window != 0), else 0 (the CPU
 * backend's kvs_cpu_attn_first).  Split s nominally covers [s * len,
 * (s + 1) * len), len = ceil(max_ctx / n_split) >= 1; the last split
 * also takes everything past its end up to pos.  The invariant the
 * test checks: the splits' ranges are disjoint and together exactly
 * first .. pos, every split in [split0, active) holds at least one of
 * them (the combine kernel reads those splits' parts and no others),
 * and every other split holds none.
 *
 * Plain C99 under a C compiler; host and device functions under nvcc.
 */

#ifndef KVS_K_SPLIT_H
#define KVS_K_SPLIT_H

#include <stdint.h>

#ifdef __CUDACC__
#define KVS_KS_FN  static __host__ __device__ __forceinline__
#else
#define KVS_KS_FN  static inline
#endif


/* The first position a token at pos >= 0 sees. */
KVS_KS_FN uint32_t
kvs_ks_first(uint32_t window, int32_t pos)
{
    return window != 0 && (uint32_t) pos >= window
           ? (uint32_t) pos + 1 - window : 0;
}


/* One past the last split holding positions <= pos. */
KVS_KS_FN uint32_t
kvs_ks_active(uint32_t n_split, uint32_t len, int32_t pos)
{
    uint32_t  n;

    n = (uint32_t) pos / len + 1;

    return n < n_split ? n : n_split;
}


/* The first split holding a position the token sees: the one of its
 * first position, or the last split, which runs up to pos whatever its
 * nominal length. */
KVS_KS_FN uint32_t
kvs_ks_split0(uint32_t n_split, uint32_t len, uint32_t window, int32_t pos)
{
    uint32_t  s;

    s = kvs_ks_first(window, pos) / len;

    return s < n_split - 1 ? s : n_split - 1;
}


/*
 * Split s's positions for a token at pos >= 0: [*start, *end), and 1;
 * 0 when it holds none the token sees.  The end is the split's own,
 * taken before the window moves the start: an end counted from the
 * moved start reaches into the next split, whose positions then count
 * twice (the H200's gpu-check, 2026-12-04: splits 4 and 16 at a window
 * of 300 were 2.9e-2 and 4.4e-2 off).
 */
KVS_KS_FN int
kvs_ks_range(uint32_t n_split, uint32_t len, uint32_t window, int32_t pos,
    uint32_t s, uint64_t *start, uint64_t *end)
{
    uint64_t  b, e, first;

    b = (uint64_t) s * len;
    if (b > (uint64_t) pos || s < kvs_ks_split0(n_split, len, window, pos)) {
        return 0;
    }

    e = s + 1 == n_split ? (uint64_t) pos + 1 : b + len;
    if (e > (uint64_t) pos + 1) {
        e = (uint64_t) pos + 1;
    }

    first = kvs_ks_first(window, pos);
    if (b < first) {
        b = first;
    }

    *start = b;
    *end = e;

    return 1;
}

#endif /* KVS_K_SPLIT_H */
