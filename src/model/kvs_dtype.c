/*
 * kvs_dtype: f16 / bf16 / Q8_0 conversions (see kvs_dtype.h).
 * Bit manipulation on IEEE-754 binary32, no lookup tables.
 */

#include <math.h>
#include <string.h>

#include "kvs_dtype.h"


static uint32_t
kvs_f32_bits(float f)
{
    uint32_t  u;

    memcpy(&u, &f, 4);

    return u;
}


static float
kvs_bits_f32(uint32_t u)
{
    float  f;

    memcpy(&f, &u, 4);

    return f;
}


uint16_t
kvs_f32_to_f16(float f)
{
    int       e;
    uint32_t  u, sign, mant, half, rem, shift;

    u = kvs_f32_bits(f);
    sign = (u >> 16) & 0x8000;
    e = (int) ((u >> 23) & 0xff);
    mant = u & 0x7fffff;

    if (e == 0xff) {                             /* inf or NaN */
        return (uint16_t) (sign | 0x7c00 | (mant ? 0x200 | (mant >> 13) : 0));
    }

    e = e - 127 + 15;

    if (e >= 0x1f) {                             /* overflow */
        return (uint16_t) (sign | 0x7c00);
    }

    if (e <= 0) {                                /* subnormal or zero */
        if (e < -10) {
            return (uint16_t) sign;
        }
        mant |= 0x800000;
        shift = (uint32_t) (14 - e);
        half = mant >> shift;
        rem = mant & ((1u << shift) - 1);
        if (rem > (1u << (shift - 1))
            || (rem == (1u << (shift - 1)) && (half & 1)))
        {
            half++;
        }
        return (uint16_t) (sign | half);
    }

    half = ((uint32_t) e << 10) | (mant >> 13);
    rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) {
        half++;                                  /* may carry into inf */
    }

    return (uint16_t) (sign | half);
}


float
kvs_f16_to_f32(uint16_t h)
{
    uint32_t  sign, e, mant;

    sign = (uint32_t) (h & 0x8000) << 16;
    e = (h >> 10) & 0x1f;
    mant = h & 0x3ff;

    if (e == 0x1f) {
        return kvs_bits_f32(sign | 0x7f800000 | (mant << 13));
    }

    if (e == 0) {
        if (mant == 0) {
            return kvs_bits_f32(sign);
        }
        /* subnormal: mant * 2^-24 */
        return (sign ? -1.0f : 1.0f) * ldexpf((float) mant, -24);
    }

    return kvs_bits_f32(sign | ((e + 112) << 23) | (mant << 13));
}


uint16_t
kvs_f32_to_bf16(float f)
{
    uint32_t  u;

    u = kvs_f32_bits(f);

    if ((u & 0x7fffffff) > 0x7f800000) {          /* NaN: keep it quiet */
        return (uint16_t) ((u >> 16) | 0x40);
    }

    u += 0x7fff + ((u >> 16) & 1);

    return (uint16_t) (u >> 16);
}


float
kvs_bf16_to_f32(uint16_t h)
{
    return kvs_bits_f32((uint32_t) h << 16);
}


void
kvs_q8_0_quantize(const float *src, uint8_t *dst, size_t n)
{
    size_t    b, i;
    float     amax, d, id;
    int8_t    q;
    uint16_t  dh;

    for (b = 0; b < n / KVS_Q8_0_BLOCK; b++) {
        amax = 0.0f;
        for (i = 0; i < KVS_Q8_0_BLOCK; i++) {
            amax = fmaxf(amax, fabsf(src[i]));
        }

        d = amax / 127.0f;
        id = d != 0.0f ? 1.0f / d : 0.0f;
        dh = kvs_f32_to_f16(d);
        memcpy(dst, &dh, 2);

        for (i = 0; i < KVS_Q8_0_BLOCK; i++) {
            q = (int8_t) lroundf(src[i] * id);
            dst[2 + i] = (uint8_t) q;
        }

        src += KVS_Q8_0_BLOCK;
        dst += KVS_Q8_0_BYTES;
    }
}


void
kvs_q8_0_dequantize(const uint8_t *src, float *dst, size_t n)
{
    size_t    b, i;
    float     d;
    uint16_t  dh;

    for (b = 0; b < n / KVS_Q8_0_BLOCK; b++) {
        memcpy(&dh, src, 2);
        d = kvs_f16_to_f32(dh);

        for (i = 0; i < KVS_Q8_0_BLOCK; i++) {
            dst[i] = d * (float) (int8_t) src[2 + i];
        }

        src += KVS_Q8_0_BYTES;
        dst += KVS_Q8_0_BLOCK;
    }
}
