/*
 * kvs_quant_k: the K-quant super-blocks (kvs_quant_k.h) dequantized to
 * f32, and their packed sub-block scales.
 *
 * Exactness: the f32 values equal, bit for bit, gguf.quants.dequantize's.
 * That holds because each value is computed with the same float32
 * operations in the same order:
 *
 *   Q2_K, Q4_K, Q5_K   x = (d * sc) * q - (dmin * m)
 *   Q3_K, Q6_K         x = (d * sc) * q
 *
 * each product and the difference rounded to f32 on its own (d, dmin from
 * f16, exact; sc, m, q small integers, exact as f32).  A fused
 * multiply-add would round once and change the last bit, so contraction
 * is off in this file (GCC contracts across statements when allowed to).
 *
 * Invariants: every function reads n / 256 whole super-blocks and writes
 * n floats; no input byte pattern is invalid (f16 inf/NaN in d give
 * inf/NaN, as in gguf), so nothing here can fail.
 */

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

#include <string.h>

#include "kvs_dtype.h"
#include "kvs_quant.h"
#include "kvs_quant_k.h"


/*
 * Q4_K/Q5_K scales, 12 bytes, sc and m 6 bits each, sub-blocks 0..7
 * (bit 7 on the left; A..H the scales' bits, a..h the mins'):
 *
 *   p[0..3]   HHssssss  scale j (j = 0..3) low 6 bits, 2 high bits of
 *                       scale j + 4 on top
 *   p[4..7]   hhmmmmmm  min j, and 2 high bits of min j + 4
 *   p[8..11]  mmmmssss  low 4 bits of min j + 4 and scale j + 4
 */
void
kvs_qk_scales_unpack(const uint8_t *p, int j, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = p[j] & 0x3f;
        *m = p[j + 4] & 0x3f;
        return;
    }

    *sc = (uint8_t) ((p[j + 4] & 0x0f) | ((p[j - 4] >> 6) << 4));
    *m = (uint8_t) ((p[j + 4] >> 4) | ((p[j] >> 6) << 4));
}


void
kvs_qk_scales_pack(uint8_t *p, const uint8_t sc[8], const uint8_t m[8])
{
    int  j;

    for (j = 0; j < 4; j++) {
        p[j] = (uint8_t) ((sc[j] & 0x3f) | ((sc[j + 4] >> 4) << 6));
        p[j + 4] = (uint8_t) ((m[j] & 0x3f) | ((m[j + 4] >> 4) << 6));
        p[j + 8] = (uint8_t) ((sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4));
    }
}


/*
 * Q3_K scales, 12 bytes, 16 scales of 6 bits stored as u = scale + 32:
 *
 *   p[0..7]   low 4 bits of u_j (j = 0..7) in the low nibble, of u_j+8
 *             in the high nibble
 *   p[8..11]  high 2 bits of u: byte 8 + (j % 4), bits 2 * (j / 4)
 */
int
kvs_q3k_scale_unpack(const uint8_t *p, int j)
{
    int  lo, hi;

    lo = j < 8 ? (p[j] & 0x0f) : (p[j - 8] >> 4);
    hi = (p[8 + j % 4] >> (2 * (j / 4))) & 3;

    return (lo | (hi << 4)) - 32;
}


void
kvs_q3k_scales_pack(uint8_t *p, const int8_t sc[16])
{
    int  j, u;

    memset(p, 0, 12);

    for (j = 0; j < 16; j++) {
        u = (sc[j] + 32) & 0x3f;
        p[j % 8] |= (uint8_t) ((u & 0x0f) << (4 * (j / 8)));
        p[8 + j % 4] |= (uint8_t) ((u >> 4) << (2 * (j / 4)));
    }
}


/*
 * Q2_K: element e = 128 h + 32 k + l (h 0..1, k 0..3, l 0..31) is bits
 * 2k..2k+1 of qs[32 h + l]; sub-block e / 16 has scale byte s:
 * x = (d * (s & 15)) * q - (dmin * (s >> 4)).
 */
void
kvs_q2_k_dequantize(const uint8_t *src, float *dst, size_t n)
{
    int             e, q;
    size_t          b;
    float           d, dmin, dl[16], ml[16];
    const uint8_t  *qs, *sc;

    for (b = 0; b < n / KVS_QK_K; b++) {
        sc = src + KVS_Q2_K_SCALES;
        qs = src + KVS_Q2_K_QS;
        d = kvs_f16_load(src + KVS_Q2_K_D);
        dmin = kvs_f16_load(src + KVS_Q2_K_DMIN);

        for (e = 0; e < 16; e++) {
            dl[e] = d * (float) (sc[e] & 0x0f);
            ml[e] = dmin * (float) (sc[e] >> 4);
        }

        for (e = 0; e < KVS_QK_K; e++) {
            q = (qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
            dst[e] = dl[e / 16] * (float) q - ml[e / 16];
        }

        src += KVS_Q2_K_BYTES;
        dst += KVS_QK_K;
    }
}


/*
 * Q3_K: element e = 128 h + 32 k + l has its low 2 bits at bits 2k..2k+1
 * of qs[32 h + l] and its third bit at bit e / 32 of hmask[e % 32]; the
 * third bit set means q = low bits, clear means q = low bits - 4 (q in
 * -4..3); x = (d * scale) * q, scale in -32..31 per sub-block e / 16.
 */
void
kvs_q3_k_dequantize(const uint8_t *src, float *dst, size_t n)
{
    int             e, q;
    size_t          b;
    float           d, dl[16];
    const uint8_t  *hm, *qs;

    for (b = 0; b < n / KVS_QK_K; b++) {
        hm = src + KVS_Q3_K_HMASK;
        qs = src + KVS_Q3_K_QS;
        d = kvs_f16_load(src + KVS_Q3_K_D);

        for (e = 0; e < 16; e++) {
            dl[e] = d * (float) kvs_q3k_scale_unpack(src + KVS_Q3_K_SCALES,
                                                    e);
        }

        for (e = 0; e < KVS_QK_K; e++) {
            q = (qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
            if (((hm[e % 32] >> (e / 32)) & 1) == 0) {
                q -= 4;
            }
            dst[e] = dl[e / 16] * (float) q;
        }

        src += KVS_Q3_K_BYTES;
        dst += KVS_QK_K;
    }
}


/*
 * Q4_K: element e = 64 c + 32 h + l (c 0..3, h 0..1, l 0..31) is the low
 * (h = 0) or high (h = 1) nibble of qs[32 c + l]; sub-block j = e / 32:
 * x = (d * sc_j) * q - (dmin * m_j).
 */
void
kvs_q4_k_dequantize(const uint8_t *src, float *dst, size_t n)
{
    int             e, j, q;
    size_t          b;
    float           d, dmin, dl[8], ml[8];
    uint8_t         sc, m;
    const uint8_t  *qs;

    for (b = 0; b < n / KVS_QK_K; b++) {
        qs = src + KVS_Q4_K_QS;
        d = kvs_f16_load(src + KVS_Q4_K_D);
        dmin = kvs_f16_load(src + KVS_Q4_K_DMIN);

        for (j = 0; j < 8; j++) {
            kvs_qk_scales_unpack(src + KVS_Q4_K_SCALES, j, &sc, &m);
            dl[j] = d * (float) sc;
            ml[j] = dmin * (float) m;
        }

        for (e = 0; e < KVS_QK_K; e++) {
            q = (qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 0x0f;
            dst[e] = dl[e / 32] * (float) q - ml[e / 32];
        }

        src += KVS_Q4_K_BYTES;
        dst += KVS_QK_K;
    }
}


/*
 * Q5_K: Q4_K's low 4 bits, and the fifth bit of element e at bit e / 32
 * of qh[e % 32] (q in 0..31).
 */
void
kvs_q5_k_dequantize(const uint8_t *src, float *dst, size_t n)
{
    int             e, j, q;
    size_t          b;
    float           d, dmin, dl[8], ml[8];
    uint8_t         sc, m;
    const uint8_t  *qs, *qh;

    for (b = 0; b < n / KVS_QK_K; b++) {
        qs = src + KVS_Q5_K_QS;
        qh = src + KVS_Q5_K_QH;
        d = kvs_f16_load(src + KVS_Q5_K_D);
        dmin = kvs_f16_load(src + KVS_Q5_K_DMIN);

        for (j = 0; j < 8; j++) {
            kvs_qk_scales_unpack(src + KVS_Q5_K_SCALES, j, &sc, &m);
            dl[j] = d * (float) sc;
            ml[j] = dmin * (float) m;
        }

        for (e = 0; e < KVS_QK_K; e++) {
            q = (qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 0x0f;
            q |= ((qh[e % 32] >> (e / 32)) & 1) << 4;
            dst[e] = dl[e / 32] * (float) q - ml[e / 32];
        }

        src += KVS_Q5_K_BYTES;
        dst += KVS_QK_K;
    }
}


/*
 * Q6_K: element e = 128 h + r (h 0..1, r 0..127) has its low 4 bits in
 * the nibble r / 64 of ql[64 h + r % 64] and its high 2 bits at bits
 * 2 (r / 32) of qh[32 h + r % 32]; q = those 6 bits - 32 (-32..31);
 * x = (d * scale) * q, int8 scale per sub-block e / 16.
 */
void
kvs_q6_k_dequantize(const uint8_t *src, float *dst, size_t n)
{
    int             e, h, r, q;
    size_t          b;
    float           d, dl[16];
    const uint8_t  *ql, *qh;

    for (b = 0; b < n / KVS_QK_K; b++) {
        ql = src + KVS_Q6_K_QL;
        qh = src + KVS_Q6_K_QH;
        d = kvs_f16_load(src + KVS_Q6_K_D);

        for (e = 0; e < 16; e++) {
            dl[e] = d * (float) (int8_t) src[KVS_Q6_K_SCALES + e];
        }

        for (e = 0; e < KVS_QK_K; e++) {
            h = e / 128;
            r = e % 128;
            q = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0f;
            q |= ((qh[32 * h + r % 32] >> (2 * (r / 32))) & 3) << 4;
            dst[e] = dl[e / 16] * (float) (q - 32);
        }

        src += KVS_Q6_K_BYTES;
        dst += KVS_QK_K;
    }
}
