/*
 * kvs_cpu_qkp_x86: the 256-column types (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
 * IQ4_XS) repacked at load for an AVX-512 VNNI kernel that takes 16 rows
 * per vector, to the same bits as kvs_cpu_qk.c's portable kernel (and
 * kvs_cpu_qk_x86.c's AVX2 twin).
 *
 * Layout (kvs_cpu_qkp_fill, portable C so every build links it): rows in
 * groups of KVS_CPU_Q8P_ROWS (16); per group g and super-block b of 256
 * columns one record of kvs_cpu_qkp_rec() bytes (a multiple of 64),
 * records of a group in super-block order.  A record starts with a head
 * of KVS_QKP_HEAD bytes, then "vectors": 64 bytes whose 4-byte lane r
 * holds 4 bytes of row r, in the order the kernel reads them (so that a
 * matrix is one sequential stream, which the hardware prefetcher follows
 * best: on the AVX-512 host, reading Q6_K's vectors out of order, or
 * adding software prefetches, cost up to half the speed):
 *
 *   Q4_K, Q5_K  head: sc[j] of the 16 rows (16 bytes per j, j 0..7),
 *               the mins likewise, the 16 f16 d, the 16 f16 dmin
 *               nibbles (c 0..3, k 0..7): qs[32c + 4k .. + 3]; their low
 *               nibbles are columns 64c + 4k .. + 3 (sub-block 2c), their
 *               high nibbles 64c + 32 + 4k .. + 3 (sub-block 2c + 1)
 *   Q5_K        fifth bits (k 0..7): qh[4k .. + 3]; byte i's bit j is the
 *               fifth bit of column 32j + 4k + i; read with c = 0, so
 *               vector 2k is nibbles (0, k), 2k + 1 fifth bits k, then
 *               16 + 8 (c - 1) + k nibbles (c, k) for c >= 1
 *   Q4_K        vector 8c + k is nibbles (c, k)
 *   Q6_K        head: the 16 int8 scales of the rows (16 bytes per
 *               scale), the 16 f16 d, 32 bytes of padding; then for h
 *               0..1 and k 0..7 three vectors 24h + 3k + (0, 1, 2):
 *               ql[64h + 4k ..], ql[64h + 32 + 4k ..], qh[32h + 4k ..]
 *               (+ 3 each)
 *   Q2_K        head: the 16 scale bytes of the rows as stored (low
 *               nibble sc, high nibble m; 16 bytes per sub-block k), the
 *               16 f16 d, the 16 f16 dmin; then for h 0..1 and k 0..7
 *               vector 8h + k: qs[32h + 4k .. + 3], whose bits 2s..2s+1
 *               are columns 128h + 32s + 4k .. + 3 (sub-block 8h + 2s +
 *               k / 4)
 *   Q3_K        head: the 16 scales of the rows unpacked to int8 (-32..31,
 *               16 bytes per sub-block), the 16 f16 d, 32 bytes of
 *               padding; Q2_K's 16 vectors of qs, then vector 16 + k:
 *               hmask[4k .. + 3] (bit 4h + s: the third bit of column
 *               128h + 32s + 4k ..)
 *   IQ4_XS      a head of KVS_QKP_IQ4_HEAD bytes: the int8 scale ls - 32
 *               of the rows (16 bytes per sub-block s, 0..7), the 16 f16
 *               d, 32 bytes of padding; then vector 4s + k: qs[16s + 4k ..
 *               + 3] (low nibbles: columns 32s + 4k .., high: 32s + 16 +
 *               4k ..)
 *
 * Rows past the matrix are zero bytes (d = 0); their outputs are never
 * stored.  The packed copy holds every bit of the rows, so a matrix's
 * products read only it.
 *
 * The kernel (kvs_cpu_qkp_rows_avx512): per super-block and token, each
 * row's exact int32 sums come from vpdpbusd of 4 columns (unsigned
 * levels: Q2_K's 2 bits, Q4_K's nibbles, Q5_K's with the fifth bit, Q3_K's
 * q + 4, Q6_K's q + 32, IQ4_XS's level + 128 (a vpshufb of the nibble),
 * their offsets taken back exactly by starting each 16- or 32-column sum
 * at minus the offset times the input's bsums) by the token's 4 int8
 * inputs, lane r row r; each
 * sub-block's sum times its scale (vpmulld) into isum, and the mins by
 * the input's bsums (vpdpwssd, pairs of 16 columns) into msum; then
 * kvs_cpu_qk_acc / _min's float steps, lane for lane, super-block by
 * super-block.  Invariant: every output is the portable kernel's bits,
 * for any number of tokens (test_cpu_qdot_k compares them by memcmp).
 * The integers stay far inside int32: kvs_cpu_qk.c's bounds, and a
 * partial sum here never exceeds its final magnitude's bound.
 *
 * Prefill, Q4_K and Q6_K (kvs_qkp_wtile): passes of KVS_QKP_WT tokens
 * after the first, one sub-block at a time with one chain per token in
 * flight, so that a record's unpacking (Q6_K: 224 vector operations)
 * serves 12 tokens instead of 4; what a super-block costs is its count of
 * vector operations (two a cycle here).  Q4_K's halves of a sub-block
 * (16 columns) fit an int16, so vpdpwssd by (scale, 0) scales and adds
 * each in one operation (the narrow kernel: vpmulld, two, and an add).
 * The integer sums are the same whatever their order, so the bits are.
 */

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

#include <string.h>

#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"
#include "model/kvs_quant_iq4.h"
#include "model/kvs_quant_k.h"
#include "kvs_cpu_qdot.h"


/* Offsets inside a record (see the top of the file). */
#define KVS_QKP_HEAD          KVS_CPU_QKP_HEAD
#define KVS_QKP_Q45_M         KVS_CPU_QKP_Q45_M
#define KVS_QKP_D             KVS_CPU_QKP_D       /* all but IQ4_XS */
#define KVS_QKP_DMIN          KVS_CPU_QKP_DMIN    /* Q2_K, Q4_K, Q5_K */
#define KVS_QKP_IQ4_HEAD      192
#define KVS_QKP_IQ4_D         128

/* Q4_K / Q5_K: the nibbles (c, k), Q5_K's fifth bits k; Q6_K: vector i
 * (0: ql low, 1: ql high, 2: qh) of (h, k). */
#define KVS_QKP_NIB(five, c, k)                                             \
    (KVS_QKP_HEAD + 64 * ((five) ? ((c) == 0 ? 2 * (k) : 8 + 8 * (c) + (k)) \
                                 : 8 * (c) + (k)))
#define KVS_QKP_Q5_HB(k)      (KVS_QKP_HEAD + 64 * (2 * (k) + 1))
#define KVS_QKP_Q6_V(h, k, i) (KVS_QKP_HEAD + 64 * (24 * (h) + 3 * (k) + (i)))
/* Q2_K / Q3_K: qs vector (h, k); Q3_K's hmask vector k; IQ4_XS's (s, k) */
#define KVS_QKP_Q2_V(h, k)    (KVS_QKP_HEAD + 64 * (8 * (h) + (k)))
#define KVS_QKP_Q3_HM(k)      (KVS_QKP_HEAD + 64 * (16 + (k)))
#define KVS_QKP_IQ4_V(s, k)   (KVS_QKP_IQ4_HEAD + 64 * (4 * (s) + (k)))


uint32_t
kvs_cpu_qkp_rec(uint32_t type)
{
    switch (type) {
    case KVS_GGML_Q2_K:
        return KVS_QKP_HEAD + 16 * 64;
    case KVS_GGML_Q3_K:
        return KVS_QKP_HEAD + 24 * 64;
    case KVS_GGML_IQ4_XS:
        return KVS_QKP_IQ4_HEAD + 32 * 64;
    case KVS_GGML_Q4_K:
        return KVS_QKP_HEAD + 32 * 64;
    case KVS_GGML_Q5_K:
        return KVS_QKP_HEAD + 40 * 64;
    case KVS_GGML_Q6_K:
        return KVS_QKP_HEAD + 48 * 64;
    default:
        return 0;
    }
}


size_t
kvs_cpu_qkp_size(const kvs_cpu_mat_t *w)
{
    return kvs_cpu_pack_bytes(w, 256, kvs_cpu_qkp_rec(w->type));
}


/* Q2_K / Q3_K: one row's super-block src into lane r of rec. */
static void
kvs_cpu_qkp_put23(uint32_t type, const uint8_t *src, uint8_t *rec,
    uint32_t r)
{
    uint32_t        h, k;
    const uint8_t  *qs;

    qs = src + (type == KVS_GGML_Q2_K ? KVS_Q2_K_QS : KVS_Q3_K_QS);

    for (h = 0; h < 2; h++) {
        for (k = 0; k < 8; k++) {
            memcpy(rec + KVS_QKP_Q2_V(h, k) + 4 * r, qs + 32 * h + 4 * k, 4);
        }
    }

    if (type == KVS_GGML_Q2_K) {
        for (k = 0; k < 16; k++) {
            rec[16 * k + r] = src[KVS_Q2_K_SCALES + k];
        }

        memcpy(rec + KVS_QKP_D + 2 * r, src + KVS_Q2_K_D, 2);
        memcpy(rec + KVS_QKP_DMIN + 2 * r, src + KVS_Q2_K_DMIN, 2);
        return;
    }

    for (k = 0; k < 8; k++) {
        memcpy(rec + KVS_QKP_Q3_HM(k) + 4 * r, src + KVS_Q3_K_HMASK + 4 * k,
               4);
    }

    for (k = 0; k < 16; k++) {
        rec[16 * k + r] = (uint8_t) (int8_t)
                          kvs_q3k_scale_unpack(src + KVS_Q3_K_SCALES, (int) k);
    }

    memcpy(rec + KVS_QKP_D + 2 * r, src + KVS_Q3_K_D, 2);
}


/* One row's super-block src into lane r of rec. */
static void
kvs_cpu_qkp_put(uint32_t type, const uint8_t *src, uint8_t *rec, uint32_t r)
{
    int             five;
    uint8_t         sc, m;
    uint32_t        c, k, h, j, s;
    const uint8_t  *qs;

    if (type == KVS_GGML_Q6_K) {
        for (h = 0; h < 2; h++) {
            for (k = 0; k < 8; k++) {
                memcpy(rec + KVS_QKP_Q6_V(h, k, 0) + 4 * r,
                       src + KVS_Q6_K_QL + 64 * h + 4 * k, 4);
                memcpy(rec + KVS_QKP_Q6_V(h, k, 1) + 4 * r,
                       src + KVS_Q6_K_QL + 64 * h + 32 + 4 * k, 4);
                memcpy(rec + KVS_QKP_Q6_V(h, k, 2) + 4 * r,
                       src + KVS_Q6_K_QH + 32 * h + 4 * k, 4);
            }
        }

        for (k = 0; k < 16; k++) {
            rec[16 * k + r] = src[KVS_Q6_K_SCALES + k];
        }

        memcpy(rec + KVS_QKP_D + 2 * r, src + KVS_Q6_K_D, 2);
        return;
    }

    if (type == KVS_GGML_Q2_K || type == KVS_GGML_Q3_K) {
        kvs_cpu_qkp_put23(type, src, rec, r);
        return;
    }

    if (type == KVS_GGML_IQ4_XS) {
        for (s = 0; s < KVS_IQ4_XS_SUBS; s++) {
            for (k = 0; k < 4; k++) {
                memcpy(rec + KVS_QKP_IQ4_V(s, k) + 4 * r,
                       src + KVS_IQ4_XS_QS + 16 * s + 4 * k, 4);
            }

            rec[16 * s + r] = (uint8_t) (int8_t) ((int) kvs_iq4_xs_ls(src, s)
                                                  - 32);
        }

        memcpy(rec + KVS_QKP_IQ4_D + 2 * r, src + KVS_IQ4_XS_D, 2);
        return;
    }

    /* Q4_K, Q5_K: d and dmin first in both */
    five = type == KVS_GGML_Q5_K;
    qs = src + (five ? KVS_Q5_K_QS : KVS_Q4_K_QS);

    for (c = 0; c < 4; c++) {
        for (k = 0; k < 8; k++) {
            memcpy(rec + KVS_QKP_NIB(five, c, k) + 4 * r,
                   qs + 32 * c + 4 * k, 4);
        }
    }

    if (five) {
        for (k = 0; k < 8; k++) {
            memcpy(rec + KVS_QKP_Q5_HB(k) + 4 * r,
                   src + KVS_Q5_K_QH + 4 * k, 4);
        }
    }

    for (j = 0; j < 8; j++) {
        kvs_qk_scales_unpack(src + KVS_Q4_K_SCALES, (int) j, &sc, &m);
        rec[16 * j + r] = sc;
        rec[KVS_QKP_Q45_M + 16 * j + r] = m;
    }

    memcpy(rec + KVS_QKP_D + 2 * r, src + KVS_Q4_K_D, 2);
    memcpy(rec + KVS_QKP_DMIN + 2 * r, src + KVS_Q4_K_DMIN, 2);
}


/* Row by row into its lane of each record of its group (a group's
 * records stay in cache while its 16 rows go in); lanes of rows past the
 * matrix stay zero. */
void
kvs_cpu_qkp_fill(const kvs_cpu_mat_t *w, uint8_t *dst)
{
    size_t          blocks, b, row, bytes, recb;
    const uint8_t  *src;

    recb = kvs_cpu_qkp_rec(w->type);
    bytes = kvs_ggml_type_info(w->type)->size;
    blocks = w->cols / 256;

    memset(dst, 0, kvs_cpu_qkp_size(w));

    for (row = 0; row < w->rows; row++) {
        src = (const uint8_t *) w->data + row * w->row_bytes;

        for (b = 0; b < blocks; b++) {
            kvs_cpu_qkp_put(w->type, src + b * bytes,
                            dst + ((row / KVS_CPU_Q8P_ROWS) * blocks + b)
                                  * recb,
                            (uint32_t) (row % KVS_CPU_Q8P_ROWS));
        }
    }
}


#if KVS_CPU_X86

#include <immintrin.h>

#include "kvs_cpu_vnni.h"

#define KVS_QKP_TARGET  "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"

#define KVS_QKP_INLINE                                                      \
    static inline __attribute__((always_inline, target(KVS_QKP_TARGET)))

/* tokens per pass over a group's records */
#ifndef KVS_QKP_NT
#define KVS_QKP_NT  4
#endif

/* tokens per pass of the wide kernels (one chain per token in flight) */
#ifndef KVS_QKP_WT
#define KVS_QKP_WT  12
#endif


/* The 4 int8 inputs of token x at column j, in every lane, as a
 * register: with vpdpbusd's own broadcast (kvs_cpu_dpbusd_m) Q4_K's,
 * Q5_K's and Q6_K's narrow passes ran 0-8% slower, where Q2_K's and
 * IQ4_XS's ran 8-10% faster and Q3_K's the same (bench_qpack,
 * 2026-12-06), so only those three take it. */
KVS_QKP_INLINE __m512i
kvs_qkp_x4(const kvs_cpu_q8k_t *x, uint32_t j)
{
    int32_t  v;

    memcpy(&v, x->q + j, 4);

    return _mm512_set1_epi32(v);
}


/* msum[t] += the mins of sub-blocks 2j and 2j + 1 (mv: the two 16-bit
 * halves of each row's lane) by token t's pair of bsums; j 0 starts it. */
KVS_QKP_INLINE void
kvs_qkp_msum(__m512i *msum, __m512i mv, const kvs_cpu_q8k_t *const *x,
    uint32_t j, const uint32_t NT)
{
    int32_t   v;
    uint32_t  t;

#pragma GCC unroll 4
    for (t = 0; t < NT; t++) {
        memcpy(&v, x[t]->bsums + 2 * j, 4);
        msum[t] = _mm512_dpwssd_epi32(j == 0 ? _mm512_setzero_si512()
                                             : msum[t],
                                      mv, _mm512_set1_epi32(v));
    }
}


/*
 * Q4_K / Q5_K: isum[t] and msum[t] of the record r's 16 rows for the NT
 * tokens x[t].  Per c, the low nibbles (sub-block 2c) and high (2c + 1)
 * are two dpbusd chains per token.
 */
KVS_QKP_INLINE void
kvs_qkp_sums45(int five, const uint8_t *r, const kvs_cpu_q8k_t *const *x,
    __m512i *isum, __m512i *msum, const uint32_t NT)
{
    uint32_t        c, k, t, j;
    __m512i         a0[KVS_QKP_NT], a1[KVS_QKP_NT], w, lo, hi, hb, m4, b10,
                    s0, s1, mv, p;

    m4 = _mm512_set1_epi8(0x0f);
    b10 = _mm512_set1_epi8(0x10);

#pragma GCC unroll 4
    for (c = 0; c < 4; c++) {
#pragma GCC unroll 4
        for (t = 0; t < NT; t++) {
            a0[t] = _mm512_setzero_si512();
            a1[t] = _mm512_setzero_si512();
        }

#pragma GCC unroll 8
        for (k = 0; k < 8; k++) {
            w = _mm512_load_si512((const void *)
                                  (r + KVS_QKP_NIB(five, c, k)));
            lo = _mm512_and_si512(w, m4);
            hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);

            if (five) {
                /* bit 2c of each byte to bit 4 for lo, 2c + 1 for hi */
                hb = _mm512_load_si512((const void *)
                                       (r + KVS_QKP_Q5_HB(k)));
                lo = _mm512_ternarylogic_epi32(lo,
                         c < 2 ? _mm512_slli_epi16(hb, 4 - 2 * c)
                               : _mm512_srli_epi16(hb, 2 * c - 4),
                         b10, 0xf8);
                hi = _mm512_ternarylogic_epi32(hi,
                         c < 2 ? _mm512_slli_epi16(hb, 3 - 2 * c)
                               : _mm512_srli_epi16(hb, 2 * c - 3),
                         b10, 0xf8);
            }

#pragma GCC unroll 4
            for (t = 0; t < NT; t++) {
                a0[t] = _mm512_dpbusd_epi32(a0[t], lo,
                                            kvs_qkp_x4(x[t], 64 * c + 4 * k));
                a1[t] = _mm512_dpbusd_epi32(a1[t], hi,
                                            kvs_qkp_x4(x[t],
                                                       64 * c + 32 + 4 * k));
            }
        }

        s0 = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)
                                                 (r + 32 * c)));
        s1 = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)
                                                 (r + 32 * c + 16)));

#pragma GCC unroll 4
        for (t = 0; t < NT; t++) {
            p = _mm512_add_epi32(_mm512_mullo_epi32(a0[t], s0),
                                 _mm512_mullo_epi32(a1[t], s1));
            isum[t] = c == 0 ? p : _mm512_add_epi32(isum[t], p);
        }
    }

    /* msum = sum over j of m_j (bsums[2j] + bsums[2j + 1]): the min in
     * both 16-bit halves of its lane, the two bsums in those of the
     * input's word */
#pragma GCC unroll 8
    for (j = 0; j < 8; j++) {
        mv = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)
                                      (r + KVS_QKP_Q45_M + 16 * j)));
        mv = _mm512_or_si512(mv, _mm512_slli_epi32(mv, 16));

        kvs_qkp_msum(msum, mv, x, j, NT);
    }
}


/*
 * Q6_K: isum[t] of the record r's 16 rows for the NT tokens x[t].  For
 * each half h and each s, the 4 sub-blocks 8h + 2u + s (u 0..3) are
 * summed together, each chain starting at -32 times its input bsum.
 */
KVS_QKP_INLINE void
kvs_qkp_sums6(const uint8_t *r, const kvs_cpu_q8k_t *const *x,
    __m512i *isum, const uint32_t NT)
{
    uint32_t  h, s, k, t, u, j;
    __m512i   a[KVS_QKP_NT][4], l0, l1, hq, m4, m30, q[4], sv;

    m4 = _mm512_set1_epi8(0x0f);
    m30 = _mm512_set1_epi8(0x30);

#pragma GCC unroll 4
    for (t = 0; t < NT; t++) {
        isum[t] = _mm512_setzero_si512();
    }

#pragma GCC unroll 2
    for (h = 0; h < 2; h++) {
#pragma GCC unroll 2
        for (s = 0; s < 2; s++) {
#pragma GCC unroll 4
            for (t = 0; t < NT; t++) {
#pragma GCC unroll 4
                for (u = 0; u < 4; u++) {
                    a[t][u] = _mm512_set1_epi32(
                                  -32 * x[t]->bsums[8 * h + 2 * u + s]);
                }
            }

#pragma GCC unroll 4
            for (k = 4 * s; k < 4 * s + 4; k++) {
                l0 = _mm512_load_si512((const void *)
                                       (r + KVS_QKP_Q6_V(h, k, 0)));
                l1 = _mm512_load_si512((const void *)
                                       (r + KVS_QKP_Q6_V(h, k, 1)));
                hq = _mm512_load_si512((const void *)
                                       (r + KVS_QKP_Q6_V(h, k, 2)));

                /* columns 128h + 32u + 4k ..: q + 32 = low 4 bits | the
                 * 2 high ones at bits 4..5 (0xe4: m4 ? first : second) */
                q[0] = _mm512_ternarylogic_epi32(l0,
                           _mm512_and_si512(_mm512_slli_epi16(hq, 4), m30),
                           m4, 0xe4);
                q[1] = _mm512_ternarylogic_epi32(l1,
                           _mm512_and_si512(_mm512_slli_epi16(hq, 2), m30),
                           m4, 0xe4);
                q[2] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l0, 4),
                           _mm512_and_si512(hq, m30), m4, 0xe4);
                q[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l1, 4),
                           _mm512_and_si512(_mm512_srli_epi16(hq, 2), m30),
                           m4, 0xe4);

#pragma GCC unroll 4
                for (t = 0; t < NT; t++) {
#pragma GCC unroll 4
                    for (u = 0; u < 4; u++) {
                        a[t][u] = _mm512_dpbusd_epi32(a[t][u], q[u],
                                      kvs_qkp_x4(x[t],
                                                 128 * h + 32 * u + 4 * k));
                    }
                }
            }

#pragma GCC unroll 4
            for (u = 0; u < 4; u++) {
                j = 8 * h + 2 * u + s;
                sv = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)
                                                         (r + 16 * j)));

#pragma GCC unroll 4
                for (t = 0; t < NT; t++) {
                    isum[t] = _mm512_add_epi32(isum[t],
                                  _mm512_mullo_epi32(a[t][u], sv));
                }
            }
        }
    }
}


/* off[t][j] = -32 bsums[j] of token x[t]'s super-block: where Q6_K's
 * chain of sub-block j starts (taking the levels' +32 back), laid out so
 * that a chain's start is one broadcast load. */
KVS_QKP_INLINE void
kvs_qkp_q6_off(int32_t (*off)[16], const kvs_cpu_q8k_t *const *x,
    const uint32_t NT)
{
    uint32_t  t;
    __m512i   b;

#pragma GCC unroll 16
    for (t = 0; t < NT; t++) {
        b = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)
                                                     x[t]->bsums));
        _mm512_store_si512((void *) off[t],
                           _mm512_sub_epi32(_mm512_setzero_si512(),
                                            _mm512_slli_epi32(b, 5)));
    }
}


/* Q6_K: the 4 level vectors (q + 32: low 4 bits | the 2 high ones at
 * bits 4..5, as kvs_qkp_sums6) of sub-block j = 8h + 2u + s of record r:
 * columns 128h + 32u + 4k .. for k 4s .. 4s + 3. */
KVS_QKP_INLINE void
kvs_qkp_q6_levels(const uint8_t *r, uint32_t j, __m512i *q)
{
    uint32_t        k, u;
    __m512i         l, hq, m4, m30, sl, sr;
    const uint8_t  *vr;

    m4 = _mm512_set1_epi8(0x0f);
    m30 = _mm512_set1_epi8(0x30);
    u = (j >> 1) & 3;
    vr = r + KVS_QKP_Q6_V(j >> 3, 4 * (j & 1), 0);
    sl = _mm512_set1_epi16(u == 0 ? 4 : u == 1 ? 2 : 0);
    sr = _mm512_set1_epi16(u == 3 ? 2 : 0);

#pragma GCC unroll 4
    for (k = 0; k < 4; k++) {
        l = _mm512_load_si512((const void *) (vr + 192 * k + 64 * (u & 1)));
        hq = _mm512_load_si512((const void *) (vr + 192 * k + 128));
        hq = _mm512_srlv_epi16(_mm512_sllv_epi16(hq, sl), sr);
        if (u >= 2) {
            l = _mm512_srli_epi16(l, 4);
        }
        q[k] = _mm512_ternarylogic_epi32(l, _mm512_and_si512(hq, m30), m4,
                                         0xe4);
    }
}


/*
 * Q6_K for many tokens: isum[t] as kvs_qkp_sums6 gives it, one sub-block
 * at a time, so that one chain per token is in flight (NT up to
 * KVS_QKP_WT) while the sub-block's 4 level vectors serve every token;
 * the next sub-block's levels are made while this one's chains run.  The
 * integers are the same (exact int32 sums, whatever their order).
 */
KVS_QKP_INLINE void
kvs_qkp_wide6(const uint8_t *r, const kvs_cpu_q8k_t *const *x,
    const int32_t (*off)[16], __m512i *isum, const uint32_t NT)
{
    uint32_t  k, t, j, col;
    __m512i   a[KVS_QKP_WT], q[4], qn[4], sv;

#pragma GCC unroll 16
    for (t = 0; t < NT; t++) {
        isum[t] = _mm512_setzero_si512();
    }

    kvs_qkp_q6_levels(r, 0, qn);

#pragma GCC unroll 1
    for (j = 0; j < 16; j++) {
#pragma GCC unroll 4
        for (k = 0; k < 4; k++) {
            q[k] = qn[k];
        }

        col = 128 * (j >> 3) + 32 * ((j >> 1) & 3) + 16 * (j & 1);

#pragma GCC unroll 16
        for (t = 0; t < NT; t++) {
            a[t] = _mm512_set1_epi32(off[t][j]);
        }

        if (j < 15) {
            kvs_qkp_q6_levels(r, j + 1, qn);
        }

#pragma GCC unroll 4
        for (k = 0; k < 4; k++) {
#pragma GCC unroll 16
            for (t = 0; t < NT; t++) {
                a[t] = kvs_cpu_dpbusd_m(a[t], q[k], x[t]->q + col + 4 * k);
            }
        }

        sv = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)
                                                 (r + 16 * j)));

#pragma GCC unroll 16
        for (t = 0; t < NT; t++) {
            isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(a[t], sv));
        }
    }
}


/*
 * Q4_K for many tokens: isum[t] and msum[t] as kvs_qkp_sums45 gives them,
 * one half sub-block (16 columns) at a time with one chain per token in
 * flight.  A half's sum of nibble times input is at most 16 * 15 * 127 =
 * 30480 in magnitude, an int16, so vpdpwssd of its lane with (scale, 0)
 * adds scale times it to isum exactly, where the narrow kernel needs a
 * vpmulld (two operations) and an add per sub-block.  isum waits in isb[]
 * while the mins' chains run.
 */
KVS_QKP_INLINE void
kvs_qkp_wide4(const uint8_t *r, const kvs_cpu_q8k_t *const *x,
    __m512i *isum, __m512i *msum, const uint32_t NT)
{
    int32_t   v;
    uint32_t  j, h, k, t;
    __m512i   a[KVS_QKP_WT], q[4], m4, sv, mv, w;
    int32_t   isb[KVS_QKP_WT][16] __attribute__((aligned(64)));

    m4 = _mm512_set1_epi8(0x0f);

#pragma GCC unroll 16
    for (t = 0; t < NT; t++) {
        isum[t] = _mm512_setzero_si512();
    }

#pragma GCC unroll 1
    for (j = 0; j < 8; j++) {
        /* sub-block j: nibbles (j / 2, k), low ones for even j */
        sv = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)
                                                 (r + 16 * j)));

#pragma GCC unroll 2
        for (h = 0; h < 2; h++) {
#pragma GCC unroll 4
            for (k = 0; k < 4; k++) {
                w = _mm512_load_si512((const void *)
                        (r + KVS_QKP_NIB(0, j >> 1, 4 * h + k)));
                q[k] = _mm512_and_si512(j & 1 ? _mm512_srli_epi16(w, 4) : w,
                                        m4);
            }

#pragma GCC unroll 16
            for (t = 0; t < NT; t++) {
                a[t] = _mm512_setzero_si512();
            }

#pragma GCC unroll 4
            for (k = 0; k < 4; k++) {
#pragma GCC unroll 16
                for (t = 0; t < NT; t++) {
                    a[t] = kvs_cpu_dpbusd_m(a[t], q[k], x[t]->q + 32 * j
                                                    + 16 * h + 4 * k);
                }
            }

#pragma GCC unroll 16
            for (t = 0; t < NT; t++) {
                isum[t] = _mm512_dpwssd_epi32(isum[t], a[t], sv);
            }
        }
    }

#pragma GCC unroll 16
    for (t = 0; t < NT; t++) {
        _mm512_store_si512((void *) isb[t], isum[t]);
    }

    /* msum = sum over j of m_j (bsums[2j] + bsums[2j + 1]), as
     * kvs_qkp_sums45 */
#pragma GCC unroll 1
    for (j = 0; j < 8; j++) {
        mv = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)
                                      (r + KVS_QKP_Q45_M + 16 * j)));
        mv = _mm512_or_si512(mv, _mm512_slli_epi32(mv, 16));

#pragma GCC unroll 16
        for (t = 0; t < NT; t++) {
            memcpy(&v, x[t]->bsums + 2 * j, 4);
            msum[t] = _mm512_dpwssd_epi32(j == 0 ? _mm512_setzero_si512()
                                                 : msum[t],
                                          mv, _mm512_set1_epi32(v));
        }
    }

#pragma GCC unroll 16
    for (t = 0; t < NT; t++) {
        isum[t] = _mm512_load_si512((const void *) isb[t]);
    }
}


/*
 * Q2_K / Q3_K: isum[t] (and Q2_K's msum[t]) of the record r's 16 rows for
 * the NT tokens x[t].  Vector (h, k) holds 4 columns of each shift s (its
 * bits 2s..2s+1): for each h and half v (k 4v .. 4v + 3: sub-block 8h +
 * 2s + v) one chain per shift and token.  Q3_K's third bit (hmask bit 4h
 * + s, moved to bit 2) makes its level q + 4, unsigned; each chain starts
 * at -4 times its input bsum to take the offset back.
 */
KVS_QKP_INLINE void
kvs_qkp_sums23(int three, const uint8_t *r, const kvs_cpu_q8k_t *const *x,
    __m512i *isum, __m512i *msum, const uint32_t NT)
{
    uint32_t  h, u, k, s, t, j;
    __m512i   a[KVS_QKP_NT][4], w, hm, q, m3, b4, m15, sv, lo, hi;

    m3 = _mm512_set1_epi8(0x03);
    b4 = _mm512_set1_epi8(0x04);
    m15 = _mm512_set1_epi32(0x0f);
    hm = _mm512_setzero_si512();

#pragma GCC unroll 4
    for (t = 0; t < NT; t++) {
        isum[t] = _mm512_setzero_si512();
    }

#pragma GCC unroll 2
    for (h = 0; h < 2; h++) {
#pragma GCC unroll 2
        for (u = 0; u < 2; u++) {
#pragma GCC unroll 4
            for (t = 0; t < NT; t++) {
#pragma GCC unroll 4
                for (s = 0; s < 4; s++) {
                    a[t][s] = three ? _mm512_set1_epi32(
                                  -4 * x[t]->bsums[8 * h + 2 * s + u])
                                    : _mm512_setzero_si512();
                }
            }

#pragma GCC unroll 4
            for (k = 4 * u; k < 4 * u + 4; k++) {
                w = _mm512_load_si512((const void *)
                                      (r + KVS_QKP_Q2_V(h, k)));
                if (three) {
                    hm = _mm512_load_si512((const void *)
                                           (r + KVS_QKP_Q3_HM(k)));
                }

#pragma GCC unroll 4
                for (s = 0; s < 4; s++) {
                    q = _mm512_and_si512(s == 0 ? w
                                         : _mm512_srli_epi16(w, 2 * s), m3);

                    if (three) {
                        /* no bit crosses a byte: 4h + s - 2 <= 5 */
                        q = _mm512_ternarylogic_epi32(q,
                                4 * h + s >= 2
                                ? _mm512_srli_epi16(hm, 4 * h + s - 2)
                                : _mm512_slli_epi16(hm, 2 - 4 * h - s),
                                b4, 0xf8);
                    }

#pragma GCC unroll 4
                    for (t = 0; t < NT; t++) {
                        a[t][s] = kvs_cpu_dpbusd_m(a[t][s], q,
                                      x[t]->q + 128 * h + 32 * s + 4 * k);
                    }
                }
            }

#pragma GCC unroll 4
            for (s = 0; s < 4; s++) {
                j = 8 * h + 2 * s + u;
                sv = three
                     ? _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)
                                                           (r + 16 * j)))
                     : _mm512_and_si512(_mm512_cvtepu8_epi32(
                           _mm_load_si128((const __m128i *) (r + 16 * j))),
                           m15);

#pragma GCC unroll 4
                for (t = 0; t < NT; t++) {
                    isum[t] = _mm512_add_epi32(isum[t],
                                  _mm512_mullo_epi32(a[t][s], sv));
                }
            }
        }
    }

    if (three) {
        return;
    }

    /* msum: sub-blocks 2j and 2j + 1's mins (the scale bytes' high
     * nibbles) in the two 16-bit halves of a lane, by the input's pair of
     * bsums */
#pragma GCC unroll 8
    for (j = 0; j < 8; j++) {
        lo = _mm512_srli_epi32(_mm512_cvtepu8_epi32(
                 _mm_load_si128((const __m128i *) (r + 32 * j))), 4);
        hi = _mm512_srli_epi32(_mm512_cvtepu8_epi32(
                 _mm_load_si128((const __m128i *) (r + 32 * j + 16))), 4);
        sv = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));

        kvs_qkp_msum(msum, sv, x, j, NT);
    }
}


/*
 * IQ4_XS: isum[t] of the record r's 16 rows for the NT tokens x[t].  A
 * nibble's level + 128 (unsigned) comes from one vpshufb of the 16
 * levels with their sign bit flipped; each sub-block's chain starts at
 * -128 times its two input bsums.
 */
KVS_QKP_INLINE void
kvs_qkp_sums_iq4(const uint8_t *r, const kvs_cpu_q8k_t *const *x,
    __m512i *isum, const uint32_t NT)
{
    uint32_t  s, k, t;
    __m512i   a[KVS_QKP_NT], w, lo, hi, m4, lv, sv;

    m4 = _mm512_set1_epi8(0x0f);
    lv = _mm512_xor_si512(_mm512_broadcast_i32x4(
             _mm_loadu_si128((const __m128i *) kvs_iq4_kv)),
             _mm512_set1_epi8((char) 0x80));

#pragma GCC unroll 8
    for (s = 0; s < KVS_IQ4_XS_SUBS; s++) {
#pragma GCC unroll 4
        for (t = 0; t < NT; t++) {
            a[t] = _mm512_set1_epi32(-128 * (x[t]->bsums[2 * s]
                                             + x[t]->bsums[2 * s + 1]));
        }

#pragma GCC unroll 4
        for (k = 0; k < 4; k++) {
            w = _mm512_load_si512((const void *) (r + KVS_QKP_IQ4_V(s, k)));
            lo = _mm512_shuffle_epi8(lv, _mm512_and_si512(w, m4));
            hi = _mm512_shuffle_epi8(lv, _mm512_and_si512(
                                             _mm512_srli_epi16(w, 4), m4));

#pragma GCC unroll 4
            for (t = 0; t < NT; t++) {
                a[t] = kvs_cpu_dpbusd_m(a[t], lo, x[t]->q + 32 * s + 4 * k);
                a[t] = kvs_cpu_dpbusd_m(a[t], hi,
                                        x[t]->q + 32 * s + 16 + 4 * k);
            }
        }

        sv = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)
                                                 (r + 16 * s)));

#pragma GCC unroll 4
        for (t = 0; t < NT; t++) {
            isum[t] = s == 0 ? _mm512_mullo_epi32(a[t], sv)
                             : _mm512_add_epi32(isum[t],
                                                _mm512_mullo_epi32(a[t], sv));
        }
    }
}


/*
 * NT (1 .. KVS_QKP_NT) tokens by the 16 rows of one group: its nb
 * records at p (rec bytes each), token t's blocks at xk + t * xs.
 */
KVS_QKP_INLINE void
kvs_qkp_tile(uint32_t type, float *y, size_t ldy, const uint8_t *p,
    uint32_t rec, const kvs_cpu_q8k_t *xk, size_t xs, uint32_t nb,
    __mmask16 mask, const uint32_t NT)
{
    int                   has_min;
    uint32_t              b, t, doff;
    __m512                fa[KVS_QKP_NT], d, dm, dx;
    __m512i               isum[KVS_QKP_NT], msum[KVS_QKP_NT];
    const uint8_t        *r;
    const kvs_cpu_q8k_t  *x[KVS_QKP_NT];

    has_min = type == KVS_GGML_Q2_K || type == KVS_GGML_Q4_K
              || type == KVS_GGML_Q5_K;
    doff = type == KVS_GGML_IQ4_XS ? KVS_QKP_IQ4_D : KVS_QKP_D;

#pragma GCC unroll 4
    for (t = 0; t < NT; t++) {
        fa[t] = _mm512_setzero_ps();
    }

    for (b = 0; b < nb; b++) {
        r = p + (size_t) b * rec;

#pragma GCC unroll 4
        for (t = 0; t < NT; t++) {
            x[t] = xk + t * xs + b;
        }

        d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)
                                              (r + doff)));

        switch (type) {
        case KVS_GGML_Q6_K:
            kvs_qkp_sums6(r, x, isum, NT);
            break;
        case KVS_GGML_Q2_K:
        case KVS_GGML_Q3_K:
            kvs_qkp_sums23(type == KVS_GGML_Q3_K, r, x, isum, msum, NT);
            break;
        case KVS_GGML_IQ4_XS:
            kvs_qkp_sums_iq4(r, x, isum, NT);
            break;
        default:
            kvs_qkp_sums45(type == KVS_GGML_Q5_K, r, x, isum, msum, NT);
            break;
        }

#pragma GCC unroll 4
        for (t = 0; t < NT; t++) {
            dx = _mm512_set1_ps(x[t]->d);
            fa[t] = _mm512_add_ps(fa[t],
                        _mm512_mul_ps(_mm512_mul_ps(d, dx),
                                      _mm512_cvtepi32_ps(isum[t])));

            if (has_min) {
                dm = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)
                                         (r + KVS_QKP_DMIN)));
                fa[t] = _mm512_sub_ps(fa[t],
                            _mm512_mul_ps(_mm512_mul_ps(dm, dx),
                                          _mm512_cvtepi32_ps(msum[t])));
            }
        }
    }

#pragma GCC unroll 4
    for (t = 0; t < NT; t++) {
        _mm512_mask_storeu_ps(y + t * ldy, mask, fa[t]);
    }
}


/*
 * NT (KVS_QKP_WT or fewer) tokens by the 16 rows of one group, for the
 * types with a wide kernel (Q4_K, Q6_K): each token's float accumulator
 * waits in fa[] between super-blocks, so that the registers hold the
 * chains.
 */
KVS_QKP_INLINE void
kvs_qkp_wtile(uint32_t type, float *y, size_t ldy, const uint8_t *p,
    uint32_t rec, const kvs_cpu_q8k_t *xk, size_t xs, uint32_t nb,
    __mmask16 mask, const uint32_t NT)
{
    uint32_t              b, t;
    __m512                d, dm, dx, f;
    __m512i               isum[KVS_QKP_WT], msum[KVS_QKP_WT];
    const uint8_t        *r;
    const kvs_cpu_q8k_t  *x[KVS_QKP_WT];
    float                 fa[KVS_QKP_WT][16] __attribute__((aligned(64)));
    int32_t               off[KVS_QKP_WT][16] __attribute__((aligned(64)));

#pragma GCC unroll 16
    for (t = 0; t < NT; t++) {
        _mm512_store_ps(fa[t], _mm512_setzero_ps());
    }

    for (b = 0; b < nb; b++) {
        r = p + (size_t) b * rec;

#pragma GCC unroll 16
        for (t = 0; t < NT; t++) {
            x[t] = xk + t * xs + b;
        }

        if (type == KVS_GGML_Q6_K) {
            kvs_qkp_q6_off(off, x, NT);
            kvs_qkp_wide6(r, x, (const int32_t (*)[16]) off, isum, NT);
        } else {
            kvs_qkp_wide4(r, x, isum, msum, NT);
        }

        d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)
                                              (r + KVS_QKP_D)));
        dm = _mm512_setzero_ps();

        if (type == KVS_GGML_Q4_K) {
            dm = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)
                                                   (r + KVS_QKP_DMIN)));
        }

        /* kvs_cpu_qk_acc (_min)'s steps, lane for lane */
#pragma GCC unroll 16
        for (t = 0; t < NT; t++) {
            dx = _mm512_set1_ps(x[t]->d);
            f = _mm512_add_ps(_mm512_load_ps(fa[t]),
                              _mm512_mul_ps(_mm512_mul_ps(d, dx),
                                            _mm512_cvtepi32_ps(isum[t])));

            if (type == KVS_GGML_Q4_K) {
                f = _mm512_sub_ps(f, _mm512_mul_ps(_mm512_mul_ps(dm, dx),
                                      _mm512_cvtepi32_ps(msum[t])));
            }

            _mm512_store_ps(fa[t], f);
        }
    }

#pragma GCC unroll 16
    for (t = 0; t < NT; t++) {
        _mm512_mask_storeu_ps(y + t * ldy, mask, _mm512_load_ps(fa[t]));
    }
}


/* The n tokens by group g of w: KVS_QKP_NT at a time, then 2, then 1. */
KVS_QKP_INLINE void
kvs_qkp_rows(uint32_t type, float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8k_t *xk, uint32_t n)
{
    size_t          nb, rec;
    uint32_t        i, nt;
    const uint8_t  *p;

    rec = kvs_cpu_qkp_rec(type);
    nb = w->cols / 256;
    p = (const uint8_t *) w->pack + g * nb * rec;
    y += (size_t) g * KVS_CPU_Q8P_ROWS;

    i = 0;

    if ((type == KVS_GGML_Q6_K || type == KVS_GGML_Q4_K) && n > 4) {
        /* the first token streams the records in, in order; then passes
         * of up to KVS_QKP_WT tokens find them in the cache */
        kvs_qkp_tile(type, y, ldy, p, rec, xk, nb, nb,
                     kvs_cpu_pack_mask(w, g), 1);

        for (i = 1; i + KVS_QKP_WT <= n; i += KVS_QKP_WT) {
            kvs_qkp_wtile(type, y + i * ldy, ldy, p, rec, xk + i * nb, nb,
                          nb, kvs_cpu_pack_mask(w, g), KVS_QKP_WT);
        }

        if (i + 8 <= n) {
            kvs_qkp_wtile(type, y + i * ldy, ldy, p, rec, xk + i * nb, nb,
                          nb, kvs_cpu_pack_mask(w, g), 8);
            i += 8;
        }
    }

    for ( /* void */ ; i < n; i += nt) {
        nt = n - i >= KVS_QKP_NT ? KVS_QKP_NT : n - i >= 2 ? 2 : 1;

        if (nt == KVS_QKP_NT) {
            kvs_qkp_tile(type, y + i * ldy, ldy, p, rec, xk + i * nb, nb,
                         nb, kvs_cpu_pack_mask(w, g), KVS_QKP_NT);

        } else if (nt == 2) {
            kvs_qkp_tile(type, y + i * ldy, ldy, p, rec, xk + i * nb, nb,
                         nb, kvs_cpu_pack_mask(w, g), 2);

        } else {
            kvs_qkp_tile(type, y + i * ldy, ldy, p, rec, xk + i * nb, nb,
                         nb, kvs_cpu_pack_mask(w, g), 1);
        }
    }
}


/* y[i][g * 16 + r] for the rows r of packed group g inside the matrix
 * and every token i < n (xk: n tokens of w->cols / 256 blocks) */
__attribute__((target(KVS_QKP_TARGET))) void
kvs_cpu_qkp_rows_avx512(float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8k_t *xk, uint32_t n)
{
    /* one specialization of the kernel per type (a constant inside) */
    switch (w->type) {
    case KVS_GGML_Q2_K:
        kvs_qkp_rows(KVS_GGML_Q2_K, y, ldy, w, g, xk, n);
        break;
    case KVS_GGML_Q3_K:
        kvs_qkp_rows(KVS_GGML_Q3_K, y, ldy, w, g, xk, n);
        break;
    case KVS_GGML_IQ4_XS:
        kvs_qkp_rows(KVS_GGML_IQ4_XS, y, ldy, w, g, xk, n);
        break;
    case KVS_GGML_Q4_K:
        kvs_qkp_rows(KVS_GGML_Q4_K, y, ldy, w, g, xk, n);
        break;
    case KVS_GGML_Q5_K:
        kvs_qkp_rows(KVS_GGML_Q5_K, y, ldy, w, g, xk, n);
        break;
    default: /* Q6_K */
        kvs_qkp_rows(KVS_GGML_Q6_K, y, ldy, w, g, xk, n);
        break;
    }
}

#endif /* KVS_CPU_X86 */
