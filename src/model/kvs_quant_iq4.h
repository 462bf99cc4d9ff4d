/*
 * kvs_quant_iq4: the IQ4_NL and IQ4_XS block layouts, shared by their
 * conversions (kvs_quant_iq4.c, which describes the format) and the CPU
 * products that read the blocks as they are.  The conversions themselves
 * and the 16 levels (kvs_iq4_kv) are declared in kvs_quant.h.
 */

#ifndef KVS_QUANT_IQ4_H
#define KVS_QUANT_IQ4_H

#include <stdint.h>

/* IQ4_NL, 18 bytes per 32 elements: f16 d | u8 qs[16] */
#define KVS_IQ4_BLOCK        32
#define KVS_IQ4_NL_BYTES     18

/* IQ4_XS, 136 bytes per 256 elements (8 sub-blocks of 32): f16 d |
 * u16 scales_h | u8 scales_l[4] | u8 qs[128] */
#define KVS_IQ4_XS_BLOCK     256
#define KVS_IQ4_XS_BYTES     136
#define KVS_IQ4_XS_SUBS      8
#define KVS_IQ4_XS_D         0
#define KVS_IQ4_XS_SCALES_H  2
#define KVS_IQ4_XS_SCALES_L  4
#define KVS_IQ4_XS_QS        8


/* IQ4_XS sub-block s's 6-bit scale ls (0..63; the scale is d * (ls - 32))
 * in the super-block at p. */
static inline unsigned
kvs_iq4_xs_ls(const uint8_t *p, unsigned s)
{
    unsigned  sh;

    sh = (unsigned) p[KVS_IQ4_XS_SCALES_H]
         | (unsigned) p[KVS_IQ4_XS_SCALES_H + 1] << 8;

    return ((p[KVS_IQ4_XS_SCALES_L + s / 2] >> 4 * (s & 1)) & 0x0f)
           | ((sh >> 2 * s) & 3) << 4;
}

#endif /* KVS_QUANT_IQ4_H */
