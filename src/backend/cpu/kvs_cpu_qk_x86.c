/*
 * kvs_cpu_qk_x86: the AVX2 twins of kvs_cpu_qk.c, to the same bits
 * (kvs_cpu_qdot.h), each behind its own target attribute.
 *
 * A kernel reads each super-block of its row once into kvs_cpu_qk_w_t:
 * eight vectors of 32 unsigned bytes, one per 32 elements (IQ4_XS: the
 * levels' magnitudes, and the levels for their signs), and eight vectors
 * of 16-bit scales matching vpmaddubsw's pairs (a 16-element type's
 * lanes 0..15 and 16..31 each take their own sub-block's).  Then for
 * each token: vpmaddubsw (no pair can saturate: at most 2 * 63 * 127;
 * IQ4_XS's |level| by the input with the level's sign, 2 * 127 * 127)
 * and vpmaddwd by the scales give int32 partial sums, exact, so their
 * order is free.  A type stored with an offset (Q3_K's q + 4, Q6_K's
 * q + 32) takes the offset times the input's 16-column sums (bsums) by
 * the same scales back; Q2_K, Q4_K and Q5_K's mins multiply the bsums.
 * The integers are kvs_cpu_qk.c's (no partial sum beyond twice its
 * bound, far inside int32), and the float steps are its operations in
 * its order (kvs_cpu_qk_acc / _min; for 8 tokens at once the same
 * operations in 8 lanes), so the bits are the same.
 *
 * Batch 1 streams the row (prefetched ahead) with its accumulator in a
 * register.  Batches take each super-block for up to 64 tokens: 8 at a
 * time (the weights loaded once per pair of tokens, the 8 sums reduced
 * together, the float steps in 8 lanes), then by 2, then 1.
 */

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

#include <string.h>

#include "model/kvs_quant.h"
#include "model/kvs_quant_iq4.h"
#include "model/kvs_quant_k.h"
#include "kvs_cpu_qdot.h"

#if KVS_CPU_X86

#include <immintrin.h>

#define KVS_QK_AVX2    __attribute__((target("avx2,fma,f16c")))
#define KVS_QK_INLINE  __attribute__((target("avx2,fma,f16c"), \
                                      always_inline)) static inline

/* Batch 1 streams the row: prefetch this far ahead of the super-block
 * being read (the rows after it follow in memory). */
#define KVS_QK_PF      1024

/* How a kernel's sums end (kvs_cpu_qk_end) */
#define KVS_QK_MIN     0              /* Q2_K, Q4_K, Q5_K: msum by mv */
#define KVS_QK_OFF     1              /* Q3_K, Q6_K: minus bsums by mv */
#define KVS_QK_SIGN    2              /* IQ4_XS: signed levels */


/* One super-block, ready for the tokens. */
typedef struct {
    __m256i  w[8];                    /* unsigned bytes per 32 elements */
    __m256i  sg[8];                   /* KVS_QK_SIGN: the signed levels */
    __m256i  sv[8];                   /* the 16-bit scale of each pair */
    __m256i  mv;                      /* per 16 elements: the mins (MIN),
                                         offset * scale (OFF) */
    float    d;
    float    dmin;
} kvs_cpu_qk_w_t;

typedef void (*kvs_cpu_qk_read_pt)(const uint8_t *p, kvs_cpu_qk_w_t *k);


KVS_QK_INLINE float
kvs_cpu_qk_f16(const uint8_t *p)
{
    uint16_t  h;

    memcpy(&h, p, 2);

    return _cvtsh_ss(h);
}


/* The int32 lanes of a summed (exact, so in any order). */
KVS_QK_INLINE int32_t
kvs_cpu_qk_hsum(__m256i a)
{
    __m128i  s;

    s = _mm_add_epi32(_mm256_castsi256_si128(a),
                      _mm256_extracti128_si256(a, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));

    return _mm_cvtsi128_si32(s);
}


/* Both sums at once: *sa = the lanes of a, *sb those of b. */
KVS_QK_INLINE void
kvs_cpu_qk_hsum2(__m256i a, __m256i b, int32_t *sa, int32_t *sb)
{
    __m128i  s;
    __m256i  h;

    h = _mm256_hadd_epi32(a, b);      /* a01 a23 b01 b23 | a45 a67 b45 b67 */
    s = _mm_add_epi32(_mm256_castsi256_si128(h),
                      _mm256_extracti128_si256(h, 1));
    s = _mm_hadd_epi32(s, s);         /* a b a b */

    *sa = _mm_cvtsi128_si32(s);
    *sb = _mm_extract_epi32(s, 1);
}


/* Elements 32j .. 32j + 31 of the super-block times input q, paired. */
KVS_QK_INLINE __m256i
kvs_cpu_qk_pairs(const kvs_cpu_qk_w_t *k, int j, const int8_t *q, int kind)
{
    __m256i  v;

    v = _mm256_loadu_si256((const __m256i *) (q + 32 * j));

    if (kind == KVS_QK_SIGN) {
        v = _mm256_sign_epi8(v, k->sg[j]);
    }

    return _mm256_madd_epi16(_mm256_maddubs_epi16(k->w[j], v), k->sv[j]);
}


/* A token's int32 lanes a folded into its float accumulator acc. */
KVS_QK_INLINE float
kvs_cpu_qk_end(float acc, __m256i a, const kvs_cpu_q8k_t *xb,
    const kvs_cpu_qk_w_t *k, int kind)
{
    int32_t  isum, msum;
    __m256i  m;

    if (kind == KVS_QK_SIGN) {
        return kvs_cpu_qk_acc(acc, k->d, xb->d, kvs_cpu_qk_hsum(a));
    }

    m = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *) xb->bsums),
                          k->mv);

    if (kind == KVS_QK_OFF) {
        return kvs_cpu_qk_acc(acc, k->d, xb->d,
                              kvs_cpu_qk_hsum(_mm256_sub_epi32(a, m)));
    }

    kvs_cpu_qk_hsum2(a, m, &isum, &msum);

    return kvs_cpu_qk_acc_min(acc, k->d, k->dmin, xb->d, isum, msum);
}


/* Token x0's 256 products with the super-block k, in int32 lanes. */
KVS_QK_INLINE __m256i
kvs_cpu_qk_tok(const kvs_cpu_qk_w_t *k, const kvs_cpu_q8k_t *x0, int kind)
{
    int      j;
    __m256i  a0;

    a0 = kvs_cpu_qk_pairs(k, 0, x0->q, kind);

#pragma GCC unroll 8
    for (j = 1; j < 8; j++) {
        a0 = _mm256_add_epi32(a0, kvs_cpu_qk_pairs(k, j, x0->q, kind));
    }

    return a0;
}


/* Lane t = the sum of a[t]'s lanes, for 8 tokens at once (exact). */
KVS_QK_INLINE __m256i
kvs_cpu_qk_hsum8(const __m256i *a)
{
    __m256i  h0, h1;

    /* a0..3's sums of lanes 0..3 | of lanes 4..7, then a4..7's */
    h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]),
                           _mm256_hadd_epi32(a[2], a[3]));
    h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(a[4], a[5]),
                           _mm256_hadd_epi32(a[6], a[7]));

    return _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20),
                            _mm256_permute2x128_si256(h0, h1, 0x31));
}


/* Tokens x0, x1's products with the super-block k: the weights loaded
 * once for both. */
KVS_QK_INLINE void
kvs_cpu_qk_tok2(const kvs_cpu_qk_w_t *k, const kvs_cpu_q8k_t *x0,
    const kvs_cpu_q8k_t *x1, int kind, __m256i *a0, __m256i *a1)
{
    int  j;

    *a0 = kvs_cpu_qk_pairs(k, 0, x0->q, kind);
    *a1 = kvs_cpu_qk_pairs(k, 0, x1->q, kind);

#pragma GCC unroll 8
    for (j = 1; j < 8; j++) {
        *a0 = _mm256_add_epi32(*a0, kvs_cpu_qk_pairs(k, j, x0->q, kind));
        *a1 = _mm256_add_epi32(*a1, kvs_cpu_qk_pairs(k, j, x1->q, kind));
    }
}


/*
 * Eight tokens (x, x + xstride, ..) into acc[0..8): their sums reduced
 * together, and kvs_cpu_qk_acc() / kvs_cpu_qk_acc_min() in 8 float lanes,
 * the same operations in the same order as one token's.
 */
KVS_QK_INLINE void
kvs_cpu_qk_tok8(float *acc, const kvs_cpu_qk_w_t *k, const uint8_t *x,
    size_t xstride, int kind)
{
    int                   t;
    __m256                dx, f;
    __m256i               a[8], m[8];
    const kvs_cpu_q8k_t  *xt[8];

#pragma GCC unroll 8
    for (t = 0; t < 8; t++) {
        xt[t] = (const kvs_cpu_q8k_t *) (x + (size_t) t * xstride);
    }

#pragma GCC unroll 4
    for (t = 0; t < 8; t += 2) {
        kvs_cpu_qk_tok2(k, xt[t], xt[t + 1], kind, &a[t], &a[t + 1]);
    }

    if (kind != KVS_QK_SIGN) {
#pragma GCC unroll 8
        for (t = 0; t < 8; t++) {
            m[t] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)
                                                        xt[t]->bsums),
                                     k->mv);
            if (kind == KVS_QK_OFF) {
                a[t] = _mm256_sub_epi32(a[t], m[t]);
            }
        }
    }

    dx = _mm256_setr_ps(xt[0]->d, xt[1]->d, xt[2]->d, xt[3]->d,
                        xt[4]->d, xt[5]->d, xt[6]->d, xt[7]->d);
    f = _mm256_loadu_ps(acc);
    f = _mm256_add_ps(f, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(k->d),
                                                     dx),
                                       _mm256_cvtepi32_ps(
                                           kvs_cpu_qk_hsum8(a))));

    if (kind == KVS_QK_MIN) {
        f = _mm256_sub_ps(f, _mm256_mul_ps(_mm256_mul_ps(
                                               _mm256_set1_ps(k->dmin), dx),
                                           _mm256_cvtepi32_ps(
                                               kvs_cpu_qk_hsum8(m))));
    }

    _mm256_storeu_ps(acc, f);
}


/* Tokens per pass over a row: their accumulators stay on the stack. */
#define KVS_QK_GROUP   64

/*
 * The kernels' common body: y[i * ldy] for the n tokens.  Batch 1
 * streams the row, prefetching ahead, its accumulator in a register.
 * Else by groups of up to KVS_QK_GROUP tokens, each super-block read once
 * (read) for all of a group, taken by 8 tokens at a time (their float
 * steps in 8 lanes), then 2 (the weights loaded once for both), then 1.
 */
KVS_QK_INLINE void
kvs_cpu_qk_run(float *y, size_t ldy, const uint8_t *row, const void *x,
    size_t xstride, uint32_t n, uint32_t cols, size_t bytes,
    kvs_cpu_qk_read_pt read, int kind)
{
    float                 acc[KVS_QK_GROUP];
    size_t                o;
    uint32_t              b, i, i0, nn;
    __m256i               a0, a1;
    const uint8_t        *p, *xb;
    kvs_cpu_qk_w_t        k;
    const kvs_cpu_q8k_t  *x0;

    if (n == 1) {
        acc[0] = 0.0f;
        x0 = x;

        for (b = 0; b < cols / 256; b++) {
            p = row + (size_t) b * bytes;

            for (o = 0; o < bytes; o += 64) {
                _mm_prefetch((const char *) p + KVS_QK_PF + o, _MM_HINT_T0);
            }

            read(p, &k);
            acc[0] = kvs_cpu_qk_end(acc[0], kvs_cpu_qk_tok(&k, x0 + b, kind),
                                    x0 + b, &k, kind);
        }

        y[0] = acc[0];
        return;
    }

    for (i0 = 0; i0 < n; i0 += KVS_QK_GROUP) {
        nn = n - i0 < KVS_QK_GROUP ? n - i0 : KVS_QK_GROUP;
        memset(acc, 0, nn * sizeof(float));

        for (b = 0; b < cols / 256; b++) {
            read(row + (size_t) b * bytes, &k);

            /* token i0 + i's input block b */
            xb = (const uint8_t *) x + (size_t) i0 * xstride
                 + (size_t) b * sizeof(kvs_cpu_q8k_t);

            for (i = 0; i + 8 <= nn; i += 8) {
                kvs_cpu_qk_tok8(acc + i, &k, xb + (size_t) i * xstride,
                                xstride, kind);
            }

            for (; i + 2 <= nn; i += 2) {
                x0 = (const kvs_cpu_q8k_t *) (xb + (size_t) i * xstride);
                kvs_cpu_qk_tok2(&k, x0, (const kvs_cpu_q8k_t *)
                                        ((const uint8_t *) x0 + xstride),
                                kind, &a0, &a1);
                acc[i] = kvs_cpu_qk_end(acc[i], a0, x0, &k, kind);
                acc[i + 1] = kvs_cpu_qk_end(acc[i + 1], a1,
                                            (const kvs_cpu_q8k_t *)
                                            ((const uint8_t *) x0 + xstride),
                                            &k, kind);
            }

            if (i < nn) {
                x0 = (const kvs_cpu_q8k_t *) (xb + (size_t) i * xstride);
                acc[i] = kvs_cpu_qk_end(acc[i], kvs_cpu_qk_tok(&k, x0, kind),
                                        x0, &k, kind);
            }
        }

        for (i = 0; i < nn; i++) {
            y[(size_t) (i0 + i) * ldy] = acc[i];
        }
    }
}


/* One scale per 32 elements: sv[j] = 16 x sc[j] from 8 int16 scales. */
KVS_QK_INLINE void
kvs_cpu_qk_sv32(__m128i sc, __m256i *sv)
{
    int      j;
    __m256i  b;

    b = _mm256_broadcastsi128_si256(sc);

#pragma GCC unroll 8
    for (j = 0; j < 8; j++) {
        sv[j] = _mm256_shuffle_epi8(b,
                    _mm256_set1_epi16((short) ((2 * j + 1) << 8 | 2 * j)));
    }
}


/* One scale per 16 elements from 16 scale bytes: sv[t] = 8 x sc[2t],
 * 8 x sc[2t + 1], zero-extended (sgn = 0) or sign-extended (sgn = 1):
 * the even scales to 16 bits in the low lane, the odd ones in the high
 * lane, then lane element t of each. */
KVS_QK_INLINE void
kvs_cpu_qk_sv16(__m128i sc, __m256i *sv, int sgn)
{
    int      t;
    __m256i  e;

    sc = _mm_shuffle_epi8(sc, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14,
                                            1, 3, 5, 7, 9, 11, 13, 15));
    e = sgn ? _mm256_cvtepi8_epi16(sc) : _mm256_cvtepu8_epi16(sc);

#pragma GCC unroll 8
    for (t = 0; t < 8; t++) {
        sv[t] = _mm256_shuffle_epi8(e,
                    _mm256_set1_epi16((short) ((2 * t + 1) << 8 | 2 * t)));
    }
}


/* Q4_K / Q5_K's 12 scale bytes (kvs_qk_scales_unpack, all eight at once,
 * 4 bytes a word; x86 is little-endian): sv per sub-block, and mv the
 * mins per 16 elements (m0 m0 m1 m1 .. m7 m7) for the bsums. */
KVS_QK_INLINE void
kvs_cpu_qk_scales45(const uint8_t *p, kvs_cpu_qk_w_t *k)
{
    uint32_t  u[4], t;
    __m128i   sm, m;

    memcpy(u, p, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0f) | ((u[1] >> 6) & 0x03030303) << 4;
    t = u[1] & 0x3f3f3f3f;
    u[1] = (u[2] & 0x0f0f0f0f) | ((u[0] >> 6) & 0x03030303) << 4;
    u[2] = t;
    u[0] &= 0x3f3f3f3f;

    /* bytes: sc0 .. sc7, m0 .. m7 */
    sm = _mm_loadu_si128((const __m128i *) u);
    kvs_cpu_qk_sv32(_mm_cvtepu8_epi16(sm), k->sv);
    m = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    k->mv = _mm256_setr_m128i(_mm_unpacklo_epi16(m, m),
                              _mm_unpackhi_epi16(m, m));
}


/* Q2_K / Q3_K's low bits: w[4h + k] = bits 2k..2k+1 of qs[32h ..]. */
KVS_QK_INLINE void
kvs_cpu_qk_low2(const uint8_t *qs, __m256i *w)
{
    int      h;
    __m256i  v, m3;

    m3 = _mm256_set1_epi8(3);

#pragma GCC unroll 2
    for (h = 0; h < 2; h++) {
        v = _mm256_loadu_si256((const __m256i *) (qs + 32 * h));
        w[4 * h] = _mm256_and_si256(v, m3);
        w[4 * h + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 2), m3);
        w[4 * h + 2] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m3);
        w[4 * h + 3] = _mm256_and_si256(_mm256_srli_epi16(v, 6), m3);
    }
}


/* Q4_K / Q5_K's nibbles: w[2c + h] = nibble h of qs[32c ..]. */
KVS_QK_INLINE void
kvs_cpu_qk_nib4(const uint8_t *qs, __m256i *w)
{
    int      c;
    __m256i  v, m4;

    m4 = _mm256_set1_epi8(0x0f);

#pragma GCC unroll 4
    for (c = 0; c < 4; c++) {
        v = _mm256_loadu_si256((const __m256i *) (qs + 32 * c));
        w[2 * c] = _mm256_and_si256(v, m4);
        w[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
}


/* Q2_K (kvs_q2_k_dequantize): scale bytes, low nibble sc, high m. */
KVS_QK_INLINE void
kvs_cpu_qk_read_q2_k(const uint8_t *p, kvs_cpu_qk_w_t *k)
{
    __m128i  sc, m4;

    m4 = _mm_set1_epi8(0x0f);
    k->d = kvs_cpu_qk_f16(p + KVS_Q2_K_D);
    k->dmin = kvs_cpu_qk_f16(p + KVS_Q2_K_DMIN);
    sc = _mm_loadu_si128((const __m128i *) (p + KVS_Q2_K_SCALES));
    kvs_cpu_qk_sv16(_mm_and_si128(sc, m4), k->sv, 0);
    k->mv = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), m4));
    kvs_cpu_qk_low2(p + KVS_Q2_K_QS, k->w);
}


/* Q3_K (kvs_q3_k_dequantize): the weights as q + 4 (0..7), the third
 * bit (bit 4h + k of hmask) to bit 2; the 16 scales by
 * kvs_q3k_scale_unpack() for all at once, 4 bytes a word (byte j of a[]
 * is scale j + 32). */
KVS_QK_INLINE void
kvs_cpu_qk_read_q3_k(const uint8_t *p, kvs_cpu_qk_w_t *k)
{
    uint32_t  a[4], t;
    __m128i   sc;
    __m256i   hm, m4;

    k->d = kvs_cpu_qk_f16(p + KVS_Q3_K_D);

    memcpy(a, p + KVS_Q3_K_SCALES, 12);
    t = a[2];
    a[2] = ((a[0] >> 4) & 0x0f0f0f0f) | ((t >> 4) & 0x03030303) << 4;
    a[3] = ((a[1] >> 4) & 0x0f0f0f0f) | ((t >> 6) & 0x03030303) << 4;
    a[0] = (a[0] & 0x0f0f0f0f) | (t & 0x03030303) << 4;
    a[1] = (a[1] & 0x0f0f0f0f) | ((t >> 2) & 0x03030303) << 4;
    sc = _mm_sub_epi8(_mm_loadu_si128((const __m128i *) a),
                      _mm_set1_epi8(32));
    kvs_cpu_qk_sv16(sc, k->sv, 1);
    k->mv = _mm256_slli_epi16(_mm256_cvtepi8_epi16(sc), 2);

    kvs_cpu_qk_low2(p + KVS_Q3_K_QS, k->w);
    m4 = _mm256_set1_epi8(4);
    hm = _mm256_loadu_si256((const __m256i *) (p + KVS_Q3_K_HMASK));
    k->w[0] = _mm256_or_si256(k->w[0],
                  _mm256_and_si256(_mm256_slli_epi16(hm, 2), m4));
    k->w[1] = _mm256_or_si256(k->w[1],
                  _mm256_and_si256(_mm256_slli_epi16(hm, 1), m4));
    k->w[2] = _mm256_or_si256(k->w[2], _mm256_and_si256(hm, m4));
    k->w[3] = _mm256_or_si256(k->w[3],
                  _mm256_and_si256(_mm256_srli_epi16(hm, 1), m4));
    k->w[4] = _mm256_or_si256(k->w[4],
                  _mm256_and_si256(_mm256_srli_epi16(hm, 2), m4));
    k->w[5] = _mm256_or_si256(k->w[5],
                  _mm256_and_si256(_mm256_srli_epi16(hm, 3), m4));
    k->w[6] = _mm256_or_si256(k->w[6],
                  _mm256_and_si256(_mm256_srli_epi16(hm, 4), m4));
    k->w[7] = _mm256_or_si256(k->w[7],
                  _mm256_and_si256(_mm256_srli_epi16(hm, 5), m4));
}


/* Q4_K (kvs_q4_k_dequantize). */
KVS_QK_INLINE void
kvs_cpu_qk_read_q4_k(const uint8_t *p, kvs_cpu_qk_w_t *k)
{
    k->d = kvs_cpu_qk_f16(p + KVS_Q4_K_D);
    k->dmin = kvs_cpu_qk_f16(p + KVS_Q4_K_DMIN);
    kvs_cpu_qk_scales45(p + KVS_Q4_K_SCALES, k);
    kvs_cpu_qk_nib4(p + KVS_Q4_K_QS, k->w);
}


/* Q5_K (kvs_q5_k_dequantize): Q4_K's, the fifth bit (bit j of qh) to
 * bit 4. */
KVS_QK_INLINE void
kvs_cpu_qk_read_q5_k(const uint8_t *p, kvs_cpu_qk_w_t *k)
{
    __m256i  hb, m10;

    k->d = kvs_cpu_qk_f16(p + KVS_Q5_K_D);
    k->dmin = kvs_cpu_qk_f16(p + KVS_Q5_K_DMIN);
    kvs_cpu_qk_scales45(p + KVS_Q5_K_SCALES, k);
    kvs_cpu_qk_nib4(p + KVS_Q5_K_QS, k->w);

    m10 = _mm256_set1_epi8(0x10);
    hb = _mm256_loadu_si256((const __m256i *) (p + KVS_Q5_K_QH));
    k->w[0] = _mm256_or_si256(k->w[0],
                  _mm256_and_si256(_mm256_slli_epi16(hb, 4), m10));
    k->w[1] = _mm256_or_si256(k->w[1],
                  _mm256_and_si256(_mm256_slli_epi16(hb, 3), m10));
    k->w[2] = _mm256_or_si256(k->w[2],
                  _mm256_and_si256(_mm256_slli_epi16(hb, 2), m10));
    k->w[3] = _mm256_or_si256(k->w[3],
                  _mm256_and_si256(_mm256_slli_epi16(hb, 1), m10));
    k->w[4] = _mm256_or_si256(k->w[4], _mm256_and_si256(hb, m10));
    k->w[5] = _mm256_or_si256(k->w[5],
                  _mm256_and_si256(_mm256_srli_epi16(hb, 1), m10));
    k->w[6] = _mm256_or_si256(k->w[6],
                  _mm256_and_si256(_mm256_srli_epi16(hb, 2), m10));
    k->w[7] = _mm256_or_si256(k->w[7],
                  _mm256_and_si256(_mm256_srli_epi16(hb, 3), m10));
}


/* Q6_K (kvs_q6_k_dequantize): the weights as q + 32 (0..63); w[4h + c]
 * has its low 4 bits in nibble c / 2 of ql[64h + 32 (c % 2) ..], its high
 * 2 at bits 2c of qh[32h ..], moved to bits 4..5. */
KVS_QK_INLINE void
kvs_cpu_qk_read_q6_k(const uint8_t *p, kvs_cpu_qk_w_t *k)
{
    int      h;
    __m128i  sc;
    __m256i  l0, l1, hq, m4, m30;

    k->d = kvs_cpu_qk_f16(p + KVS_Q6_K_D);
    sc = _mm_loadu_si128((const __m128i *) (p + KVS_Q6_K_SCALES));
    kvs_cpu_qk_sv16(sc, k->sv, 1);
    k->mv = _mm256_slli_epi16(_mm256_cvtepi8_epi16(sc), 5);

    m4 = _mm256_set1_epi8(0x0f);
    m30 = _mm256_set1_epi8(0x30);

#pragma GCC unroll 2
    for (h = 0; h < 2; h++) {
        l0 = _mm256_loadu_si256((const __m256i *) (p + KVS_Q6_K_QL + 64 * h));
        l1 = _mm256_loadu_si256((const __m256i *) (p + KVS_Q6_K_QL + 64 * h
                                                   + 32));
        hq = _mm256_loadu_si256((const __m256i *) (p + KVS_Q6_K_QH + 32 * h));
        k->w[4 * h] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                          _mm256_and_si256(_mm256_slli_epi16(hq, 4), m30));
        k->w[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                              _mm256_and_si256(_mm256_slli_epi16(hq, 2),
                                               m30));
        k->w[4 * h + 2] = _mm256_or_si256(
                              _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                              _mm256_and_si256(hq, m30));
        k->w[4 * h + 3] = _mm256_or_si256(
                              _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                              _mm256_and_si256(_mm256_srli_epi16(hq, 2),
                                               m30));
    }
}


/* IQ4_XS (kvs_iq4_xs_dequantize): the eight 6-bit scales as
 * kvs_iq4_xs_ls() (low nibbles from scales_l[s / 2]; bits 2s..2s+1 of
 * scales_h moved to the top of a 16-bit lane by a product, then down);
 * sub-blocks 2u and 2u + 1 from qs[32u ..], low nibbles then high of each
 * 16 bytes, looked up in the levels. */
KVS_QK_INLINE void
kvs_cpu_qk_read_iq4_xs(const uint8_t *p, kvs_cpu_qk_w_t *k)
{
    int       u;
    uint16_t  sh;
    uint32_t  sl;
    __m128i   lo, hi, m4x;
    __m256i   kv, v, l4, h4, m4;

    k->d = kvs_cpu_qk_f16(p + KVS_IQ4_XS_D);

    m4x = _mm_set1_epi8(0x0f);
    memcpy(&sh, p + KVS_IQ4_XS_SCALES_H, 2);
    memcpy(&sl, p + KVS_IQ4_XS_SCALES_L, 4);
    lo = _mm_cvtsi32_si128((int) sl);
    lo = _mm_unpacklo_epi8(_mm_and_si128(lo, m4x),
                           _mm_and_si128(_mm_srli_epi16(lo, 4), m4x));
    hi = _mm_srli_epi16(_mm_mullo_epi16(_mm_set1_epi16((short) sh),
                                        _mm_setr_epi16(1 << 14, 1 << 12,
                                                       1 << 10, 1 << 8,
                                                       1 << 6, 1 << 4,
                                                       1 << 2, 1)), 14);
    kvs_cpu_qk_sv32(_mm_sub_epi16(_mm_or_si128(_mm_cvtepu8_epi16(lo),
                                               _mm_slli_epi16(hi, 4)),
                                  _mm_set1_epi16(32)), k->sv);

    kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)
                                                     kvs_iq4_kv));
    m4 = _mm256_set1_epi8(0x0f);

#pragma GCC unroll 4
    for (u = 0; u < 4; u++) {
        v = _mm256_loadu_si256((const __m256i *) (p + KVS_IQ4_XS_QS + 32 * u));
        l4 = _mm256_and_si256(v, m4);
        h4 = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        k->sg[2 * u] = _mm256_shuffle_epi8(kv,
                           _mm256_permute2x128_si256(l4, h4, 0x20));
        k->sg[2 * u + 1] = _mm256_shuffle_epi8(kv,
                               _mm256_permute2x128_si256(l4, h4, 0x31));
        k->w[2 * u] = _mm256_sign_epi8(k->sg[2 * u], k->sg[2 * u]);
        k->w[2 * u + 1] = _mm256_sign_epi8(k->sg[2 * u + 1],
                                           k->sg[2 * u + 1]);
    }
}


/* kvs_cpu_q8k_quant() 256 values at a time, to the same bits: the max is
 * exact in any order, d and 1 / d are the same scalar divisions, and
 * vcvtps2dq rounds to nearest even as lrintf does in the default mode. */
__attribute__((target("avx2,fma"))) void
kvs_cpu_q8k_quant_avx2(const float *x, kvs_cpu_q8k_t *dst, uint32_t cols)
{
    float     amax, d, id;
    uint32_t  b, k;
    __m128    m4;
    __m128i   s4;
    __m256    m, sign, iv;
    __m256i   q[4], s, p8;

    sign = _mm256_set1_ps(-0.0f);

    for (b = 0; b < cols / 256; b++) {
        m = _mm256_setzero_ps();

        for (k = 0; k < 32; k++) {
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign,
                                                  _mm256_loadu_ps(x + 8 * k)));
        }

        m4 = _mm_max_ps(_mm256_castps256_ps128(m),
                        _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        amax = _mm_cvtss_f32(m4);

        d = amax / 127.0f;
        id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[b].d = d;
        iv = _mm256_set1_ps(id);

        for (k = 0; k < 8; k++) {
            q[0] = _mm256_cvtps_epi32(_mm256_mul_ps(
                       _mm256_loadu_ps(x + 32 * k), iv));
            q[1] = _mm256_cvtps_epi32(_mm256_mul_ps(
                       _mm256_loadu_ps(x + 32 * k + 8), iv));
            q[2] = _mm256_cvtps_epi32(_mm256_mul_ps(
                       _mm256_loadu_ps(x + 32 * k + 16), iv));
            q[3] = _mm256_cvtps_epi32(_mm256_mul_ps(
                       _mm256_loadu_ps(x + 32 * k + 24), iv));

            /* the two 16-column sums of these 32: a = q[0] + q[1] and
             * c = q[2] + q[3] pairwise (a01 a23 c01 c23 | a45 a67 c45
             * c67), again (a0123 c0123 .. | a4567 c4567 ..), then the
             * halves added: sum a, sum c */
            s = _mm256_hadd_epi32(_mm256_add_epi32(q[0], q[1]),
                                  _mm256_add_epi32(q[2], q[3]));
            s = _mm256_hadd_epi32(s, s);
            s4 = _mm_add_epi32(_mm256_castsi256_si128(s),
                               _mm256_extracti128_si256(s, 1));
            dst[b].bsums[2 * k] = (int16_t) _mm_cvtsi128_si32(s4);
            dst[b].bsums[2 * k + 1] = (int16_t) _mm_extract_epi32(s4, 1);

            /* packs work within 128-bit lanes: 0 1 | 2 3 -> 0 2 | 1 3 */
            p8 = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
                                    _mm256_packs_epi32(q[2], q[3]));
            p8 = _mm256_permutevar8x32_epi32(p8,
                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *) (dst[b].q + 32 * k), p8);
        }

        x += 256;
    }
}




#define KVS_QK_KERNEL(name, bytes, kind)                                     \
KVS_QK_AVX2 void                                                             \
kvs_cpu_qdot_##name##_avx2(float *y, size_t ldy, const uint8_t *row,         \
    const void *x, size_t xstride, uint32_t n, uint32_t cols)                \
{                                                                            \
    kvs_cpu_qk_run(y, ldy, row, x, xstride, n, cols, bytes,                  \
                   kvs_cpu_qk_read_##name, kind);                            \
}

KVS_QK_KERNEL(q2_k, KVS_Q2_K_BYTES, KVS_QK_MIN)
KVS_QK_KERNEL(q3_k, KVS_Q3_K_BYTES, KVS_QK_OFF)
KVS_QK_KERNEL(q4_k, KVS_Q4_K_BYTES, KVS_QK_MIN)
KVS_QK_KERNEL(q5_k, KVS_Q5_K_BYTES, KVS_QK_MIN)
KVS_QK_KERNEL(q6_k, KVS_Q6_K_BYTES, KVS_QK_OFF)
KVS_QK_KERNEL(iq4_xs, KVS_IQ4_XS_BYTES, KVS_QK_SIGN)

#endif /* KVS_CPU_X86 */
