/*
 * kvs_quant_k: the K-quant super-block layouts (Q2_K, Q3_K, Q4_K, Q5_K,
 * Q6_K), shared by their dequantizers (kvs_quant_k.c), quantizers
 * (kvs_quant_kq.c) and tests.  The conversions themselves are declared in
 * kvs_quant.h.
 *
 * Every K type packs 256 elements (KVS_QK_K) in one super-block of
 * sub-blocks of 16 or 32 elements, each with its own small integer scale
 * (and min) relative to the super-block's f16 d (and dmin).  Offsets are
 * bytes from the start of a super-block; f16 fields are little-endian and
 * may be unaligned (a super-block of 110 or 210 bytes is not even 2-byte
 * aligned in an array of them), so they are read with memcpy.
 *
 * Element e of a super-block is in sub-block e / 16 (e / 32 for Q4_K and
 * Q5_K); where its bits lie in qs/qh/hmask is described per type in
 * kvs_quant_k.c and docs/quantization.md.
 */

#ifndef KVS_QUANT_K_H
#define KVS_QUANT_K_H

#include <stdint.h>

#define KVS_QK_K             256

/* Q2_K, 84 bytes: scales[16] (low nibble scale, high nibble min, one byte
 * per sub-block of 16) | qs[64] (2 bits per element) | f16 d | f16 dmin */
#define KVS_Q2_K_SCALES      0
#define KVS_Q2_K_QS          16
#define KVS_Q2_K_D           80
#define KVS_Q2_K_DMIN        82
#define KVS_Q2_K_BYTES       84

/* Q3_K, 110 bytes: hmask[32] (the third bit of each element) | qs[64]
 * (low 2 bits) | scales[12] (16 signed 6-bit scales) | f16 d */
#define KVS_Q3_K_HMASK       0
#define KVS_Q3_K_QS          32
#define KVS_Q3_K_SCALES      96
#define KVS_Q3_K_D           108
#define KVS_Q3_K_BYTES       110

/* Q4_K, 144 bytes: f16 d | f16 dmin | scales[12] (8 6-bit scales and 8
 * 6-bit mins) | qs[128] (4 bits per element) */
#define KVS_Q4_K_D           0
#define KVS_Q4_K_DMIN        2
#define KVS_Q4_K_SCALES      4
#define KVS_Q4_K_QS          16
#define KVS_Q4_K_BYTES       144

/* Q5_K, 176 bytes: Q4_K's fields, with qh[32] (the fifth bit of each
 * element) between scales and qs */
#define KVS_Q5_K_D           0
#define KVS_Q5_K_DMIN        2
#define KVS_Q5_K_SCALES      4
#define KVS_Q5_K_QH          16
#define KVS_Q5_K_QS          48
#define KVS_Q5_K_BYTES       176

/* Q6_K, 210 bytes: ql[128] (low 4 bits) | qh[64] (high 2 bits) |
 * int8 scales[16] | f16 d */
#define KVS_Q6_K_QL          0
#define KVS_Q6_K_QH          128
#define KVS_Q6_K_SCALES      192
#define KVS_Q6_K_D           208
#define KVS_Q6_K_BYTES       210

/* Q4_K/Q5_K's 12 bytes of 6-bit scale/min pairs, sub-block j in 0..7. */
void kvs_qk_scales_unpack(const uint8_t *p, int j, uint8_t *sc, uint8_t *m);
void kvs_qk_scales_pack(uint8_t *p, const uint8_t sc[8], const uint8_t m[8]);

/* Q3_K's 12 bytes of 16 6-bit scales, stored biased by 32 (0..63, read
 * back as -32..31), sub-block j in 0..15. */
int kvs_q3k_scale_unpack(const uint8_t *p, int j);
void kvs_q3k_scales_pack(uint8_t *p, const int8_t sc[16]);

#endif /* KVS_QUANT_K_H */
