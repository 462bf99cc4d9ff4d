/*
 * kvs_cpu_lora.h: the CPU backend's packed form of an adapter's pairs
 * (kvs_cpu_lora.c builds it when an adapter is put into a slot) and the
 * group kernels that read it (portable C in kvs_cpu_lora.c, AVX2 and
 * AVX-512 in kvs_cpu_lora_x86.c).
 *
 * A pair is held as F16: A scaled by 2^ea, B transposed and scaled by
 * 2^eb, in blocks of KVS_CPU_LORA_BLK outputs ([n_out / 16][rank][16],
 * the last block zero-padded: kvs_cpu_lora_bt()), so that a run of
 * outputs finds its part of B^T in one stretch; the
 * powers of two chosen per matrix so that its
 * largest magnitude lands in [2^14, 2^15) (the factor at most 2^40): no
 * value overflows F16, and every value of at least 2^-28 of the
 * matrix's largest keeps 11 significant bits (relative rounding at most
 * 2^-11); the pair's scale is the adapter's alpha / rank times
 * 2^-(ea + eb), so the product is the adapter's up to that rounding.
 * The adapter itself (kvs_lora_t) keeps its F32 values: what other
 * backends upload from.
 *
 * Invariants: a pair with rank 0 is "not adapted"; a, bt point into the
 * slot's one buffer, in the forward's order (layer, then target), so a
 * step walks each adapter's buffer forwards; the group kernels compute
 * each row alone (a row's sums go in an order fixed by the pair's shape
 * and the kernel level, whatever the other rows of its group), T = A x,
 * T *= scale, then y += B T summed over the rank in order.
 */

#ifndef KVS_CPU_LORA_H
#define KVS_CPU_LORA_H

#include <stddef.h>
#include <stdint.h>

#define KVS_CPU_LORA_BLK  16          /* outputs per block of B^T */

typedef struct kvs_cpu_lora_pair_s {
    const uint16_t  *a;               /* [rank][n_in], F16 */
    const uint16_t  *bt;              /* [n_out / 16][rank][16], F16 */
    uint32_t         rank;            /* 0: this matrix is not adapted */
    uint32_t         n_in;
    uint32_t         n_out;
    float            scale;           /* alpha / rank x 2^-(ea + eb) */
} kvs_cpu_lora_pair_t;

/* Outputs rounded up to whole blocks: B^T holds rank times this. */
static inline size_t
kvs_cpu_lora_blk_out(size_t n_out)
{
    return (n_out + KVS_CPU_LORA_BLK - 1) & ~(size_t) (KVS_CPU_LORA_BLK - 1);
}

/* B^T's value of rank r for output o, and the run of it that follows
 * (to o's block's end, within rank r) */
static inline const uint16_t *
kvs_cpu_lora_bt(const kvs_cpu_lora_pair_t *p, uint32_t r, uint32_t o)
{
    return p->bt + ((size_t) (o / KVS_CPU_LORA_BLK) * p->rank + r)
                   * KVS_CPU_LORA_BLK + o % KVS_CPU_LORA_BLK;
}

/* The rows the group kernels take: cnt rows of x (stride ldx) and of y
 * (ldy), rows[i] their indexes; t holds cnt * p->rank floats. */
typedef struct {
    const float     *x;
    size_t           ldx;
    float           *y;
    size_t           ldy;
    const uint32_t  *rows;
    uint32_t         cnt;
    float           *t;
} kvs_cpu_lora_rows_t;

/* F16 <-> F32: f2h rounds to nearest even and expects |v| < 65520 (the
 * packing guarantees it), h2f is exact. */
uint16_t kvs_cpu_lora_f2h(float v);
float kvs_cpu_lora_h2f(uint16_t h);

/* dst[i] = f2h(src[i] * f), n values: F16C's rounding at simd level
 * AVX2 and up (the same as kvs_cpu_lora_f2h's, test_cpu_lora checks),
 * else kvs_cpu_lora_f2h; the packing's inner loop. */
void kvs_cpu_lora_f2h_n(int simd, uint16_t *dst, const float *src, size_t n,
    float f);
void kvs_cpu_lora_f2h_n_f16c(uint16_t *dst, const float *src, size_t n,
    float f);

/* y[rows] += the pair's product, the portable reference. */
void kvs_cpu_lora_rows_c(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g);

void kvs_cpu_lora_rows_avx2(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g);
void kvs_cpu_lora_rows_avx512(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g);

/* The product's two halves (rows is shrink, then expand over all the
 * outputs): shrink fills g's T rows (T = scale A x), expand adds B T to
 * the outputs o0 .. o1 of g's rows.  shrink, then expand over any split
 * of 0 .. n_out, gives each row exactly what rows gives it. */
void kvs_cpu_lora_shrink_c(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g);
void kvs_cpu_lora_expand_c(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g, uint32_t o0, uint32_t o1);
void kvs_cpu_lora_shrink_avx2(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g);
void kvs_cpu_lora_expand_avx2(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g, uint32_t o0, uint32_t o1);
void kvs_cpu_lora_shrink_avx512(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g);
void kvs_cpu_lora_expand_avx512(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g, uint32_t o0, uint32_t o1);

#endif /* KVS_CPU_LORA_H */
