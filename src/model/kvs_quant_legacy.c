/*
 * kvs_quant_legacy: ggml's first 4- and 5-bit block types, Q4_0, Q4_1,
 * Q5_0 and Q5_1, converted to and from f32 (prototypes in kvs_quant.h).
 *
 * Every block holds 32 elements; element j < 16 is the low nibble of
 * qs[j], element j + 16 its high nibble.  f16 fields are little-endian.
 *
 *   Q4_0 (18 bytes): f16 d | u8 qs[16]
 *       x[i] = d * (float) (q[i] - 8),   q[i] in 0..15
 *   Q4_1 (20 bytes): f16 d | f16 m | u8 qs[16]
 *       x[i] = d * (float) q[i] + m,     q[i] in 0..15
 *   Q5_0 (22 bytes): f16 d | u32 qh | u8 qs[16]
 *       q[i] = nibble(i) | ((qh >> i) & 1) << 4
 *       x[i] = d * (float) (q[i] - 16),  q[i] in 0..31
 *   Q5_1 (24 bytes): f16 d | f16 m | u32 qh | u8 qs[16]
 *       x[i] = d * (float) q[i] + m,     q[i] in 0..31
 *
 * Invariants: dequantization is bit for bit gguf.quants.dequantize's (one
 * f32 multiply, then for _1 one f32 add: never fused, so this file must
 * not be built with FMA contraction); quantization gives exactly the
 * bytes of gguf.quants.quantize, whose arithmetic is all f32:
 *
 *   _0: xm = the element of largest |x| (the first of equals), d = xm /
 *       -(2^(bits-1)), id = d == 0 ? 0 : 1 / d,
 *       q = trunc(x * id + 2^(bits-1) + 0.5), clipped to the range;
 *   _1: d = (max - min) / (2^bits - 1), m = min, id as above,
 *       q = trunc((x - min) * id + 0.5), clipped.
 *
 * so the largest |x| of a _0 block is exactly -2^(bits-1) steps, and
 * halves round up (towards +inf).  Nothing here fails: any float input,
 * NaN and inf included, gives some block without undefined behaviour.
 */

/* bit-identical to gguf's numpy, which rounds every product and sum on
 * its own: no fused multiply-add, whatever -march a build uses */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

#include <math.h>
#include <string.h>

#include "model/kvs_dtype.h"
#include "model/kvs_quant.h"


#define KVS_QL_BLOCK     32
#define KVS_Q4_0_BYTES   18
#define KVS_Q4_1_BYTES   20
#define KVS_Q5_0_BYTES   22
#define KVS_Q5_1_BYTES   24


/*
 * v (already truncated) as numpy's astype(uint8).clip(0, max) leaves it
 * on x86-64: the f32 goes through a 32-bit integer (cvttss2si), whose
 * "indefinite" value for NaN, inf and out-of-range is 0x80000000 (low
 * byte 0); the low byte is then clipped.  Written so C never converts an
 * out-of-range float (undefined behaviour).
 */
static uint8_t
kvs_ql_level(float v, unsigned max)
{
    uint8_t  q;

    if (v >= 0.0f && v < 2147483648.0f) {
        q = (uint8_t) (uint32_t) v;

    } else if (v < 0.0f && v > -2147483648.0f) {
        q = (uint8_t) (uint32_t) (int32_t) v;

    } else {
        q = 0;
    }

    return q > max ? (uint8_t) max : q;
}


/* 5-bit levels q[32] -> qh (bit i = bit 4 of q[i]) and qs[16] */
static void
kvs_ql_pack5(const uint8_t *q, uint8_t *qh, uint8_t *qs)
{
    size_t    j;
    uint32_t  h;

    h = 0;

    for (j = 0; j < KVS_QL_BLOCK; j++) {
        h |= (uint32_t) (q[j] >> 4) << j;
    }

    qh[0] = (uint8_t) h;
    qh[1] = (uint8_t) (h >> 8);
    qh[2] = (uint8_t) (h >> 16);
    qh[3] = (uint8_t) (h >> 24);

    for (j = 0; j < KVS_QL_BLOCK / 2; j++) {
        qs[j] = (uint8_t) ((q[j] & 0x0f) | (q[j + 16] << 4));
    }
}


/* qh and qs[16] -> 5-bit levels q[32] */
static void
kvs_ql_unpack5(const uint8_t *qh, const uint8_t *qs, uint8_t *q)
{
    size_t    j;
    uint32_t  h;

    h = (uint32_t) qh[0] | (uint32_t) qh[1] << 8 | (uint32_t) qh[2] << 16
        | (uint32_t) qh[3] << 24;

    for (j = 0; j < KVS_QL_BLOCK / 2; j++) {
        q[j] = (uint8_t) ((qs[j] & 0x0f) | ((h >> j) & 1) << 4);
        q[j + 16] = (uint8_t) ((qs[j] >> 4) | ((h >> (j + 16)) & 1) << 4);
    }
}


/*
 * One block of a symmetric type (_0) with 2^bits levels: fills the f32
 * scale d (to be stored as f16) and the levels q[32].
 */
static float
kvs_ql_sym(const float *x, unsigned bits, uint8_t *q)
{
    size_t  i;
    float   xm, amax, d, id, half;

    /* the first element of largest |x|, as numpy's argmax of abs */
    xm = x[0];
    amax = fabsf(x[0]);

    for (i = 1; i < KVS_QL_BLOCK; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            xm = x[i];
        }
    }

    half = (float) (1u << (bits - 1));
    d = xm / -half;
    id = d == 0.0f ? 0.0f : 1.0f / d;

    for (i = 0; i < KVS_QL_BLOCK; i++) {
        q[i] = kvs_ql_level(truncf(x[i] * id + (half + 0.5f)),
                            (1u << bits) - 1);
    }

    return d;
}


/* One block of an affine type (_1): fills d and m (f32) and q[32]. */
static float
kvs_ql_affine(const float *x, unsigned bits, float *m, uint8_t *q)
{
    size_t  i;
    float   mn, mx, d, id;

    mn = x[0];
    mx = x[0];

    for (i = 1; i < KVS_QL_BLOCK; i++) {
        mn = x[i] < mn ? x[i] : mn;
        mx = x[i] > mx ? x[i] : mx;
    }

    d = (mx - mn) / (float) ((1u << bits) - 1);
    id = d == 0.0f ? 0.0f : 1.0f / d;

    for (i = 0; i < KVS_QL_BLOCK; i++) {
        q[i] = kvs_ql_level(truncf((x[i] - mn) * id + 0.5f),
                            (1u << bits) - 1);
    }

    *m = mn;

    return d;
}


/* ---- Q4_0 --------------------------------------------------------------- */

void
kvs_q4_0_dequantize(const uint8_t *src, float *dst, size_t n)
{
    size_t  b, j;
    float   d;

    for (b = 0; b < n / KVS_QL_BLOCK; b++) {
        d = kvs_f16_load(src);

        for (j = 0; j < KVS_QL_BLOCK / 2; j++) {
            dst[j] = d * (float) ((int) (src[2 + j] & 0x0f) - 8);
            dst[j + 16] = d * (float) ((int) (src[2 + j] >> 4) - 8);
        }

        src += KVS_Q4_0_BYTES;
        dst += KVS_QL_BLOCK;
    }
}


void
kvs_q4_0_quantize(const float *src, uint8_t *dst, size_t n)
{
    size_t   b, j;
    float    d;
    uint8_t  q[KVS_QL_BLOCK];

    for (b = 0; b < n / KVS_QL_BLOCK; b++) {
        d = kvs_ql_sym(src, 4, q);
        kvs_f16_store(dst, d);

        for (j = 0; j < KVS_QL_BLOCK / 2; j++) {
            dst[2 + j] = (uint8_t) (q[j] | q[j + 16] << 4);
        }

        src += KVS_QL_BLOCK;
        dst += KVS_Q4_0_BYTES;
    }
}


/* ---- Q4_1 --------------------------------------------------------------- */

void
kvs_q4_1_dequantize(const uint8_t *src, float *dst, size_t n)
{
    size_t  b, j;
    float   d, m;

    for (b = 0; b < n / KVS_QL_BLOCK; b++) {
        d = kvs_f16_load(src);
        m = kvs_f16_load(src + 2);

        for (j = 0; j < KVS_QL_BLOCK / 2; j++) {
            dst[j] = d * (float) (src[4 + j] & 0x0f) + m;
            dst[j + 16] = d * (float) (src[4 + j] >> 4) + m;
        }

        src += KVS_Q4_1_BYTES;
        dst += KVS_QL_BLOCK;
    }
}


void
kvs_q4_1_quantize(const float *src, uint8_t *dst, size_t n)
{
    size_t   b, j;
    float    d, m;
    uint8_t  q[KVS_QL_BLOCK];

    for (b = 0; b < n / KVS_QL_BLOCK; b++) {
        d = kvs_ql_affine(src, 4, &m, q);
        kvs_f16_store(dst, d);
        kvs_f16_store(dst + 2, m);

        for (j = 0; j < KVS_QL_BLOCK / 2; j++) {
            dst[4 + j] = (uint8_t) (q[j] | q[j + 16] << 4);
        }

        src += KVS_QL_BLOCK;
        dst += KVS_Q4_1_BYTES;
    }
}


/* ---- Q5_0 --------------------------------------------------------------- */

void
kvs_q5_0_dequantize(const uint8_t *src, float *dst, size_t n)
{
    size_t   b, i;
    float    d;
    uint8_t  q[KVS_QL_BLOCK];

    for (b = 0; b < n / KVS_QL_BLOCK; b++) {
        d = kvs_f16_load(src);
        kvs_ql_unpack5(src + 2, src + 6, q);

        for (i = 0; i < KVS_QL_BLOCK; i++) {
            dst[i] = d * (float) ((int) q[i] - 16);
        }

        src += KVS_Q5_0_BYTES;
        dst += KVS_QL_BLOCK;
    }
}


void
kvs_q5_0_quantize(const float *src, uint8_t *dst, size_t n)
{
    size_t   b;
    float    d;
    uint8_t  q[KVS_QL_BLOCK];

    for (b = 0; b < n / KVS_QL_BLOCK; b++) {
        d = kvs_ql_sym(src, 5, q);
        kvs_f16_store(dst, d);
        kvs_ql_pack5(q, dst + 2, dst + 6);

        src += KVS_QL_BLOCK;
        dst += KVS_Q5_0_BYTES;
    }
}


/* ---- Q5_1 --------------------------------------------------------------- */

void
kvs_q5_1_dequantize(const uint8_t *src, float *dst, size_t n)
{
    size_t   b, i;
    float    d, m;
    uint8_t  q[KVS_QL_BLOCK];

    for (b = 0; b < n / KVS_QL_BLOCK; b++) {
        d = kvs_f16_load(src);
        m = kvs_f16_load(src + 2);
        kvs_ql_unpack5(src + 4, src + 8, q);

        for (i = 0; i < KVS_QL_BLOCK; i++) {
            dst[i] = d * (float) q[i] + m;
        }

        src += KVS_Q5_1_BYTES;
        dst += KVS_QL_BLOCK;
    }
}


void
kvs_q5_1_quantize(const float *src, uint8_t *dst, size_t n)
{
    size_t   b;
    float    d, m;
    uint8_t  q[KVS_QL_BLOCK];

    for (b = 0; b < n / KVS_QL_BLOCK; b++) {
        d = kvs_ql_affine(src, 5, &m, q);
        kvs_f16_store(dst, d);
        kvs_f16_store(dst + 2, m);
        kvs_ql_pack5(q, dst + 4, dst + 8);

        src += KVS_QL_BLOCK;
        dst += KVS_Q5_1_BYTES;
    }
}
