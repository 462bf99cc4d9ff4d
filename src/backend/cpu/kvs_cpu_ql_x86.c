/*
 * kvs_cpu_ql_x86: the AVX2 twins of kvs_cpu_ql.c, to the same bits
 * (kvs_cpu_qdot.h; the float contract is written at the top of
 * kvs_cpu_ql.c), each behind its own target attribute.
 *
 * A row is taken 8 blocks (256 columns) at a time: the 8 blocks are
 * unpacked once (32 bytes of levels each, their 8 scales in one vector)
 * for up to 4 or 8 tokens.  Per token, the 8 blocks' int8
 * products (maddubs / madd: Q4_0 .. Q5_1 take their levels unsigned and
 * correct the _0 offset through the input's c; Q8_0 and IQ4_NL move
 * the weights' signs onto the input) are reduced to one exact int32 sum
 * per block, lane b holding block b, scaled, and added to lane b of the
 * token's accumulator: the portable kernel's lanes b % 8.  A row's last
 * blocks (cols not a multiple of 256) fill the first lanes and leave the
 * others +0.  A row's first pass prefetches the row ahead (through the
 * next rows): one token streams the weights.
 *
 * From KVS_CPU_QLI_MIN tokens on, kvs_cpu_mm.c hands the _avx2i
 * kernels the input interleaved (kvs_cpu_q8i_t) instead: the 8 unpacked
 * blocks are interleaved alike once per pass, and each token's 8 block
 * sums come out one per lane without the horizontal adds that cost the
 * kernels above more than their products (1.4 to 1.6x the speed on
 * prefill chunks).  Same float steps, same bits.
 *
 * maddubs saturates its int16 pairs: the levels' bounds keep them exact
 * (31 * 127 * 2, or 128 * 127 * 2 with the signs moved), as the input's
 * q stays in -127 .. 127 (kvs_cpu_q8_quant: |x| / d never rounds past
 * 127); a -128 there would change sign wrongly in the Q8_0 and IQ4_NL
 * kernels.
 */

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

#include <string.h>

#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"
#include "kvs_cpu_qdot.h"

#if KVS_CPU_X86

#include <immintrin.h>


/* tokens per pass over the row: 4, or for Q4_0 .. Q5_1 this many */
#ifndef KVS_QLX_WIDE
#define KVS_QLX_WIDE    8
#endif

/* how far ahead (bytes) a one-token pass prefetches its row */
#ifndef KVS_QLX_PF
#define KVS_QLX_PF      4096
#endif

#ifndef KVS_QLX_HINT
#define KVS_QLX_HINT    _MM_HINT_T0
#endif

#define KVS_QLX_INLINE                                                      \
    static inline __attribute__((always_inline, target("avx2,fma,f16c")))


/* Eight blocks of a row, unpacked. */
typedef struct {
    __m256i  u[8];     /* maddubs's unsigned operand: the levels (Q4_0 ..
                          Q5_1) or their magnitudes (Q8_0, IQ4_NL) */
    __m256i  s[8];     /* Q8_0, IQ4_NL: the signed levels */
    __m256   d;        /* the blocks' scales */
    __m256   m;        /* Q4_1, Q5_1: their mins */
} kvs_qlx_grp_t;


/* the 16 bytes at qs as 32 nibbles: low ones in bytes 0..15, high ones
 * in 16..31 (the blocks' element order) */
KVS_QLX_INLINE __m256i
kvs_qlx_nibbles(const uint8_t *qs)
{
    __m256i  v;

    v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *) qs));
    v = _mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4));

    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}


/* bit j of the 32 at qh as 16 in byte j */
KVS_QLX_INLINE __m256i
kvs_qlx_bit4(const uint8_t *qh)
{
    int32_t  h;
    __m256i  v;

    memcpy(&h, qh, 4);
    v = _mm256_shuffle_epi8(_mm256_set1_epi32(h),
                            _mm256_setr_epi64x(0x0000000000000000,
                                               0x0101010101010101,
                                               0x0202020202020202,
                                               0x0303030303030303));
    v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    v = _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1));

    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}


/* Blocks 0 .. k-1 (k <= 8) of the group at p; the others zero. */
KVS_QLX_INLINE void
kvs_qlx_unpack(uint32_t type, const uint8_t *p, uint32_t k,
    kvs_qlx_grp_t *g)
{
    uint16_t        hd[8], hm[8];
    uint32_t        b, bytes;
    __m256i         w, tbl;
    const uint8_t  *q;

    bytes = kvs_cpu_ql_bytes(type);
    tbl = _mm256_setzero_si256();

    if (type == KVS_GGML_IQ4_NL) {
        tbl = _mm256_broadcastsi128_si256(
                  _mm_loadu_si128((const __m128i *) kvs_iq4_kv));
    }

#pragma GCC unroll 8
    for (b = 0; b < 8; b++) {
        hd[b] = 0;
        hm[b] = 0;

        if (b >= k) {
            g->u[b] = _mm256_setzero_si256();
            g->s[b] = _mm256_setzero_si256();
            continue;
        }

        q = p + (size_t) b * bytes;
        memcpy(&hd[b], q, 2);

        switch (type) {
        case KVS_GGML_Q8_0:
            w = _mm256_loadu_si256((const __m256i *) (q + 2));
            g->u[b] = _mm256_sign_epi8(w, w);
            g->s[b] = w;
            break;

        case KVS_GGML_IQ4_NL:
            w = _mm256_shuffle_epi8(tbl, kvs_qlx_nibbles(q + 2));
            g->u[b] = _mm256_sign_epi8(w, w);
            g->s[b] = w;
            break;

        case KVS_GGML_Q4_0:
            g->u[b] = kvs_qlx_nibbles(q + 2);
            break;

        case KVS_GGML_Q4_1:
            memcpy(&hm[b], q + 2, 2);
            g->u[b] = kvs_qlx_nibbles(q + 4);
            break;

        case KVS_GGML_Q5_0:
            g->u[b] = _mm256_or_si256(kvs_qlx_nibbles(q + 6),
                                      kvs_qlx_bit4(q + 2));
            break;

        default: /* Q5_1 */
            memcpy(&hm[b], q + 2, 2);
            g->u[b] = _mm256_or_si256(kvs_qlx_nibbles(q + 8),
                                      kvs_qlx_bit4(q + 4));
            break;
        }
    }

    g->d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) hd));
    g->m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) hm));
}


/* acc + this token's terms of the group's blocks 0 .. k-1, xb the
 * token's first block of the group. */
KVS_QLX_INLINE __m256
kvs_qlx_pass(uint32_t type, const kvs_qlx_grp_t *g, const kvs_cpu_q8_t *xb,
    uint32_t k, __m256 acc)
{
    static const kvs_cpu_q8_t  none;

    uint32_t             b;
    __m256               dx, f, t, mt;
    __m256i              p[8], qx, ones, q, r, s, c;
    const kvs_cpu_q8_t  *xh[8];

    ones = _mm256_set1_epi16(1);

#pragma GCC unroll 8
    for (b = 0; b < 8; b++) {
        xh[b] = b < k ? &xb[b] : &none;

        if (b >= k) {
            p[b] = _mm256_setzero_si256();
            continue;
        }

        qx = _mm256_loadu_si256((const __m256i *) xb[b].q);

        if (type == KVS_GGML_Q8_0 || type == KVS_GGML_IQ4_NL) {
            qx = _mm256_sign_epi8(qx, g->s[b]);
        }

        p[b] = _mm256_maddubs_epi16(g->u[b], qx);
    }

    if (type == KVS_GGML_Q8_0 || type == KVS_GGML_IQ4_NL) {
        /* pairs of products reach 2 * 128 * 127: int32 from here */
#pragma GCC unroll 8
        for (b = 0; b < 8; b++) {
            p[b] = _mm256_madd_epi16(p[b], ones);
        }

        q = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]),
                              _mm256_hadd_epi32(p[2], p[3]));
        r = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]),
                              _mm256_hadd_epi32(p[6], p[7]));

    } else {
        /* levels below 32: 8 products stay within int16 (31496) */
        q = _mm256_hadd_epi16(_mm256_hadd_epi16(p[0], p[1]),
                              _mm256_hadd_epi16(p[2], p[3]));
        r = _mm256_hadd_epi16(_mm256_hadd_epi16(p[4], p[5]),
                              _mm256_hadd_epi16(p[6], p[7]));
        q = _mm256_madd_epi16(q, ones);
        r = _mm256_madd_epi16(r, ones);
    }

    /* q: blocks 0..3 over columns 0..15 | over 16..31; r: blocks 4..7 */
    s = _mm256_add_epi32(_mm256_permute2x128_si256(q, r, 0x20),
                         _mm256_permute2x128_si256(q, r, 0x31));

    {
        __m128d  h[4];
        __m256   a, bb;

        /* [d0 c0 d1 c1 | d4 c4 d5 c5], [d2 c2 d3 c3 | d6 c6 d7 c7] */
#pragma GCC unroll 4
        for (b = 0; b < 4; b++) {
            h[b] = _mm_loadh_pd(_mm_load_sd((const double *) xh[2 * b]),
                                (const double *) xh[2 * b + 1]);
        }

        a = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_castpd_ps(h[0])),
                                 _mm_castpd_ps(h[2]), 1);
        bb = _mm256_insertf128_ps(
                 _mm256_castps128_ps256(_mm_castpd_ps(h[1])),
                 _mm_castpd_ps(h[3]), 1);
        dx = _mm256_shuffle_ps(a, bb, 0x88);
        c = _mm256_castps_si256(_mm256_shuffle_ps(a, bb, 0xdd));
    }

    /* c = -128 sum(q_x): - 8 sum(q_x) is c / 16, - 16 sum(q_x) c / 8 */
    if (type == KVS_GGML_Q4_0) {
        s = _mm256_add_epi32(s, _mm256_srai_epi32(c, 4));

    } else if (type == KVS_GGML_Q5_0) {
        s = _mm256_add_epi32(s, _mm256_srai_epi32(c, 3));
    }

    f = _mm256_cvtepi32_ps(s);
    t = _mm256_mul_ps(g->d, dx);
    t = _mm256_mul_ps(t, f);

    if (type == KVS_GGML_Q4_1 || type == KVS_GGML_Q5_1) {
        c = _mm256_sub_epi32(_mm256_setzero_si256(),
                             _mm256_srai_epi32(c, 7));
        mt = _mm256_mul_ps(g->m, dx);
        mt = _mm256_mul_ps(mt, _mm256_cvtepi32_ps(c));
        t = _mm256_add_ps(t, mt);
    }

    return _mm256_add_ps(acc, t);
}


/* ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) */
KVS_QLX_INLINE float
kvs_qlx_hsum(__m256 a)
{
    __m128  s;

    s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));

    return _mm_cvtss_f32(s);
}


/* nt (1 .. 8) tokens from x (the first one's blocks) */
KVS_QLX_INLINE void
kvs_qlx_run(uint32_t type, uint32_t nt, int pf, float *y, size_t ldy,
    const uint8_t *row, const uint8_t *x, size_t xstride, uint32_t cols)
{
    uint32_t             i, gi, ng, k, bytes, off;
    __m256               acc[8];
    kvs_qlx_grp_t        g;
    const uint8_t       *p;
    const kvs_cpu_q8_t  *xb[8];

    bytes = kvs_cpu_ql_bytes(type);
    ng = cols / 256;
    k = cols / 32 % 8;

#pragma GCC unroll 8
    for (i = 0; i < nt; i++) {
        acc[i] = _mm256_setzero_ps();
        xb[i] = (const kvs_cpu_q8_t *) (x + i * xstride);
    }

    for (gi = 0; gi < ng; gi++) {
        p = row + (size_t) gi * 8 * bytes;

        if (pf) {
            for (off = 0; off < 8 * bytes; off += 64) {
                _mm_prefetch((const char *) p + KVS_QLX_PF + off,
                             KVS_QLX_HINT);
            }
        }

        kvs_qlx_unpack(type, p, 8, &g);

#pragma GCC unroll 8
        for (i = 0; i < nt; i++) {
            acc[i] = kvs_qlx_pass(type, &g, xb[i] + 8 * gi, 8, acc[i]);
        }
    }

    if (k != 0) {
        kvs_qlx_unpack(type, row + (size_t) ng * 8 * bytes, k, &g);

#pragma GCC unroll 8
        for (i = 0; i < nt; i++) {
            acc[i] = kvs_qlx_pass(type, &g, xb[i] + 8 * ng, k, acc[i]);
        }
    }

#pragma GCC unroll 8
    for (i = 0; i < nt; i++) {
        y[i * ldy] = kvs_qlx_hsum(acc[i]);
    }
}


KVS_QLX_INLINE void
kvs_qlx_dot(uint32_t type, float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols)
{
    uint32_t        i;
    const uint8_t  *xi;

    xi = x;

    i = 0;

    /* the unsigned-level types keep 8 accumulators and 8 unpacked blocks
     * in registers; Q8_0 and IQ4_NL hold the signs too, and spill */
    if (type != KVS_GGML_Q8_0 && type != KVS_GGML_IQ4_NL) {
        for (; i + KVS_QLX_WIDE <= n; i += KVS_QLX_WIDE) {
            kvs_qlx_run(type, KVS_QLX_WIDE, i == 0, y + i * ldy, ldy, row,
                        xi + i * xstride, xstride, cols);
        }
    }

    for (; i + 4 <= n; i += 4) {
        kvs_qlx_run(type, 4, i == 0, y + i * ldy, ldy, row, xi + i * xstride,
                    xstride, cols);
    }

    switch (n - i) {
    case 3:
        kvs_qlx_run(type, 3, i == 0, y + i * ldy, ldy, row, xi + i * xstride,
                    xstride, cols);
        break;
    case 2:
        kvs_qlx_run(type, 2, i == 0, y + i * ldy, ldy, row, xi + i * xstride,
                    xstride, cols);
        break;
    case 1:
        kvs_qlx_run(type, 1, i == 0, y + i * ldy, ldy, row, xi + i * xstride,
                    xstride, cols);
        break;
    default:
        break;
    }
}


/*
 * The batched kernels on interleaved inputs (kvs_cpu_q8i_t): a group's 8
 * unpacked blocks are interleaved alike (kvs_qlx_transpose), so that the
 * int8 products of vector k leave block b's partial sums in lane b and
 * adding the 8 vectors' gives every block's exact int32 sum in its lane:
 * no horizontal sums per token, and the token's scales load as a vector.
 * The float steps on those sums are kvs_qlx_pass's, lane for lane, so
 * the results are the same bits as the other kernels'.
 */

/* out[k] lane b (4 bytes) = in[b] lane k: an 8 x 8 transpose of 4-byte
 * lanes */
KVS_QLX_INLINE void
kvs_qlx_transpose(const __m256i *in, __m256i *out)
{
    uint32_t  r;
    __m256i   a[8], b[8];

#pragma GCC unroll 4
    for (r = 0; r < 8; r += 2) {
        /* per 128-bit half: in[r] and in[r + 1]'s lanes 0, 1 | 2, 3 */
        a[r] = _mm256_unpacklo_epi32(in[r], in[r + 1]);
        a[r + 1] = _mm256_unpackhi_epi32(in[r], in[r + 1]);
    }

#pragma GCC unroll 2
    for (r = 0; r < 8; r += 4) {
        /* in[r .. r + 3]'s lane 0, 1, 2, 3 (4, 5, 6, 7 in the high half) */
        b[r] = _mm256_unpacklo_epi64(a[r], a[r + 2]);
        b[r + 1] = _mm256_unpackhi_epi64(a[r], a[r + 2]);
        b[r + 2] = _mm256_unpacklo_epi64(a[r + 1], a[r + 3]);
        b[r + 3] = _mm256_unpackhi_epi64(a[r + 1], a[r + 3]);
    }

#pragma GCC unroll 4
    for (r = 0; r < 4; r++) {
        out[r] = _mm256_permute2x128_si256(b[r], b[r + 4], 0x20);
        out[r + 4] = _mm256_permute2x128_si256(b[r], b[r + 4], 0x31);
    }
}


/* acc + one token's terms of an interleaved group: w (and for Q8_0,
 * IQ4_NL the signs ws) its weights, d and m their scales, xg the token's
 * group */
KVS_QLX_INLINE __m256
kvs_qlx_ipass(uint32_t type, const __m256i *w, const __m256i *ws, __m256 d,
    __m256 m, const kvs_cpu_q8i_t *xg, __m256 acc)
{
    uint32_t  k;
    __m256    dx, f, t, mt;
    __m256i   ones, qx, p, s, h, c;

    ones = _mm256_set1_epi16(1);

    if (type == KVS_GGML_Q8_0 || type == KVS_GGML_IQ4_NL) {
        /* pairs of products reach 2 * 128 * 127: int32 at once */
        s = _mm256_setzero_si256();

#pragma GCC unroll 8
        for (k = 0; k < 8; k++) {
            qx = _mm256_loadu_si256((const __m256i *) xg->q[k]);
            qx = _mm256_sign_epi8(qx, ws[k]);
            p = _mm256_madd_epi16(_mm256_maddubs_epi16(w[k], qx), ones);
            s = k == 0 ? p : _mm256_add_epi32(s, p);
        }

    } else if (type == KVS_GGML_Q4_0 || type == KVS_GGML_Q4_1) {
        /* levels below 16: 16 products stay within int16 (30480) */
        h = _mm256_setzero_si256();

#pragma GCC unroll 8
        for (k = 0; k < 8; k++) {
            qx = _mm256_loadu_si256((const __m256i *) xg->q[k]);
            p = _mm256_maddubs_epi16(w[k], qx);
            h = k == 0 ? p : _mm256_add_epi16(h, p);
        }

        s = _mm256_madd_epi16(h, ones);

    } else {
        /* levels below 32: 8 products stay within int16 (31496) */
        s = _mm256_setzero_si256();
        h = _mm256_setzero_si256();

#pragma GCC unroll 8
        for (k = 0; k < 8; k++) {
            qx = _mm256_loadu_si256((const __m256i *) xg->q[k]);
            p = _mm256_maddubs_epi16(w[k], qx);
            h = k % 4 == 0 ? p : _mm256_add_epi16(h, p);

            if (k % 4 == 3) {
                p = _mm256_madd_epi16(h, ones);
                s = k == 3 ? p : _mm256_add_epi32(s, p);
            }
        }
    }

    dx = _mm256_loadu_ps(xg->d);
    c = _mm256_loadu_si256((const __m256i *) xg->c);

    /* c = -128 sum(q_x): - 8 sum(q_x) is c / 16, - 16 sum(q_x) c / 8 */
    if (type == KVS_GGML_Q4_0) {
        s = _mm256_add_epi32(s, _mm256_srai_epi32(c, 4));

    } else if (type == KVS_GGML_Q5_0) {
        s = _mm256_add_epi32(s, _mm256_srai_epi32(c, 3));
    }

    f = _mm256_cvtepi32_ps(s);
    t = _mm256_mul_ps(d, dx);
    t = _mm256_mul_ps(t, f);

    if (type == KVS_GGML_Q4_1 || type == KVS_GGML_Q5_1) {
        c = _mm256_sub_epi32(_mm256_setzero_si256(),
                             _mm256_srai_epi32(c, 7));
        mt = _mm256_mul_ps(m, dx);
        mt = _mm256_mul_ps(mt, _mm256_cvtepi32_ps(c));
        t = _mm256_add_ps(t, mt);
    }

    return _mm256_add_ps(acc, t);
}


/* Group gi's k blocks at p (k <= 8) for nt tokens' interleaved groups. */
KVS_QLX_INLINE void
kvs_qlx_igroup(uint32_t type, uint32_t nt, const uint8_t *p, uint32_t k,
    const uint8_t *x, size_t xstride, uint32_t gi, __m256 *acc)
{
    uint32_t        i;
    __m256i         w[8], ws[8];
    kvs_qlx_grp_t   g;

    kvs_qlx_unpack(type, p, k, &g);
    kvs_qlx_transpose(g.u, w);

    if (type == KVS_GGML_Q8_0 || type == KVS_GGML_IQ4_NL) {
        kvs_qlx_transpose(g.s, ws);
    }

#pragma GCC unroll 8
    for (i = 0; i < nt; i++) {
        acc[i] = kvs_qlx_ipass(type, w, ws, g.d, g.m,
                               (const kvs_cpu_q8i_t *) (x + i * xstride)
                               + gi, acc[i]);
    }
}


/* nt (1 .. KVS_QLX_WIDE) tokens' interleaved inputs from x */
KVS_QLX_INLINE void
kvs_qlx_irun(uint32_t type, uint32_t nt, int pf, float *y, size_t ldy,
    const uint8_t *row, const uint8_t *x, size_t xstride, uint32_t cols)
{
    uint32_t        i, gi, ng, k, bytes, off;
    __m256          acc[KVS_QLX_WIDE];
    const uint8_t  *p;

    bytes = kvs_cpu_ql_bytes(type);
    ng = cols / 256;
    k = cols / 32 % 8;

#pragma GCC unroll 8
    for (i = 0; i < nt; i++) {
        acc[i] = _mm256_setzero_ps();
    }

    for (gi = 0; gi < ng; gi++) {
        p = row + (size_t) gi * 8 * bytes;

        if (pf) {
            for (off = 0; off < 8 * bytes; off += 64) {
                _mm_prefetch((const char *) p + KVS_QLX_PF + off,
                             KVS_QLX_HINT);
            }
        }

        kvs_qlx_igroup(type, nt, p, 8, x, xstride, gi, acc);
    }

    if (k != 0) {
        kvs_qlx_igroup(type, nt, row + (size_t) ng * 8 * bytes, k, x,
                       xstride, ng, acc);
    }

#pragma GCC unroll 8
    for (i = 0; i < nt; i++) {
        y[i * ldy] = kvs_qlx_hsum(acc[i]);
    }
}


KVS_QLX_INLINE void
kvs_qlx_idot(uint32_t type, float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols)
{
    uint32_t        i;
    const uint8_t  *xi;

    xi = x;

    for (i = 0; i + KVS_QLX_WIDE <= n; i += KVS_QLX_WIDE) {
        kvs_qlx_irun(type, KVS_QLX_WIDE, i == 0, y + i * ldy, ldy, row,
                     xi + i * xstride, xstride, cols);
    }

    switch (n - i) {
#define KVS_QLX_TAIL(c)                                                     \
    case c:                                                                 \
        kvs_qlx_irun(type, c, i == 0, y + i * ldy, ldy, row,                \
                     xi + i * xstride, xstride, cols);                      \
        break;
    KVS_QLX_TAIL(7)
    KVS_QLX_TAIL(6)
    KVS_QLX_TAIL(5)
    KVS_QLX_TAIL(4)
    KVS_QLX_TAIL(3)
    KVS_QLX_TAIL(2)
    KVS_QLX_TAIL(1)
#undef KVS_QLX_TAIL
    default:
        break;
    }
}


#define KVS_QLX_KERNEL(name, type)                                          \
__attribute__((target("avx2,fma,f16c"))) void                               \
name(float *y, size_t ldy, const uint8_t *row, const void *x,               \
    size_t xstride, uint32_t n, uint32_t cols)                              \
{                                                                           \
    kvs_qlx_dot(type, y, ldy, row, x, xstride, n, cols);                    \
}

KVS_QLX_KERNEL(kvs_cpu_qdot_q8_0_avx2, KVS_GGML_Q8_0)
KVS_QLX_KERNEL(kvs_cpu_qdot_q4_0_avx2, KVS_GGML_Q4_0)
KVS_QLX_KERNEL(kvs_cpu_qdot_q4_1_avx2, KVS_GGML_Q4_1)
KVS_QLX_KERNEL(kvs_cpu_qdot_q5_0_avx2, KVS_GGML_Q5_0)
KVS_QLX_KERNEL(kvs_cpu_qdot_q5_1_avx2, KVS_GGML_Q5_1)
KVS_QLX_KERNEL(kvs_cpu_qdot_iq4_nl_avx2, KVS_GGML_IQ4_NL)

#define KVS_QLX_IKERNEL(name, type)                                         \
__attribute__((target("avx2,fma,f16c"))) void                               \
name(float *y, size_t ldy, const uint8_t *row, const void *x,               \
    size_t xstride, uint32_t n, uint32_t cols)                              \
{                                                                           \
    kvs_qlx_idot(type, y, ldy, row, x, xstride, n, cols);                   \
}

KVS_QLX_IKERNEL(kvs_cpu_qdot_q8_0_avx2i, KVS_GGML_Q8_0)
KVS_QLX_IKERNEL(kvs_cpu_qdot_q4_0_avx2i, KVS_GGML_Q4_0)
KVS_QLX_IKERNEL(kvs_cpu_qdot_q4_1_avx2i, KVS_GGML_Q4_1)
KVS_QLX_IKERNEL(kvs_cpu_qdot_q5_0_avx2i, KVS_GGML_Q5_0)
KVS_QLX_IKERNEL(kvs_cpu_qdot_q5_1_avx2i, KVS_GGML_Q5_1)
KVS_QLX_IKERNEL(kvs_cpu_qdot_iq4_nl_avx2i, KVS_GGML_IQ4_NL)

#endif /* KVS_CPU_X86 */
