/*
 * kvs_kv_quant: the quantized KV cache's element conversions and its
 * per-block scale rule, header only, compiled alike as C (the CPU
 * backend, tests) and as CUDA device code (kernels/), so that both
 * backends write the same bytes for the same floats: the one source of
 * truth for int8 and fp8 elements (kvs_kv_layout.h lays them out).
 *
 * fp8 is OCP FP8 E4M3: a sign, 4 exponent bits of bias 7, 3 mantissa
 * bits; no infinities; 0x7f and 0xff are NaN; the largest finite is
 * 448 (0x7e); exponent field 0 holds subnormals m x 2^-9.  From a float
 * it rounds to nearest even and saturates: anything of magnitude >= 448,
 * infinities included, becomes +-448; a NaN stays a NaN (0x7f, signed).
 *
 * int8 holds round-to-nearest-even of x / scale clamped to [-127, 127];
 * a NaN becomes 0.  Both are given x / scale as x times kvs_kvq_inv(scale),
 * one rounding, and decode unscaled (kvs_kvq_dec; the reader multiplies).
 *
 * The scale rule (kvs_kvq_scale), per (block, layer, K or V, head):
 * writing slot 0 sets the scale to the row's largest |x| over the
 * dtype's largest code (127, 448); a later row whose largest |x|
 * exceeds scale x that largest grows it to its own and the block's
 * earlier slots of that head are requantized by old / new scale
 * (x_q := enc(dec(x_q) x old / new)); else the scale stays.
 *
 * Invariants: every function is pure, total (any input, NaN included,
 * gives a defined output) and computes in IEEE single precision with
 * no contraction into fused operations, so host and device agree bit
 * for bit.  Nothing here allocates.
 */

#ifndef KVS_KV_QUANT_H
#define KVS_KV_QUANT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define KVS_KVQ_FN  static __host__ __device__ __forceinline__
#else
#define KVS_KVQ_FN  static inline
#endif

#define KVS_KVQ_I8_MAX   127.0f
#define KVS_KVQ_FP8_MAX  448.0f


KVS_KVQ_FN uint32_t
kvs_kvq_bits(float f)
{
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t  u;

    memcpy(&u, &f, sizeof(u));

    return u;
#endif
}


KVS_KVQ_FN float
kvs_kvq_float(uint32_t u)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float  f;

    memcpy(&f, &u, sizeof(f));

    return f;
#endif
}


/* a + b rounded once to nearest even (never fused with a product) */
KVS_KVQ_FN float
kvs_kvq_add(float a, float b)
{
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}


/* The e4m3 code of x: see the file's comment. */
KVS_KVQ_FN uint8_t
kvs_kv_fp8_from_f32(float x)
{
    float     m;
    uint32_t  u, a, s;

    u = kvs_kvq_bits(x);
    s = (u >> 24) & 0x80u;
    a = u & 0x7fffffffu;

    if (a > 0x7f800000u) {
        return (uint8_t) (s | 0x7fu);                   /* NaN */
    }

    if (a >= 0x43e00000u) {
        return (uint8_t) (s | 0x7eu);                   /* >= 448 */
    }

    if (a < 0x3c800000u) {
        /* below 2^-6: m x 2^-9, m in 0..8 (8 is 2^-6, code 8); 2^14's
         * ulp is 2^-9, so the sum's low bits are m rounded to even */
        m = kvs_kvq_add(kvs_kvq_float(a), 16384.0f);

        return (uint8_t) (s | (kvs_kvq_bits(m) - 0x46800000u));
    }

    /* 2^-6 .. 448: the float's exponent and top 3 mantissa bits,
     * rounded to nearest even at bit 20 (a carry steps the exponent) */
    a += 0x7ffffu + ((a >> 20) & 1u);

    return (uint8_t) (s | ((a >> 20) - (120u << 3)));
}


/* The value of e4m3 code c. */
KVS_KVQ_FN float
kvs_kv_fp8_to_f32(uint8_t c)
{
    float     f;
    uint32_t  s, em;

    s = (uint32_t) (c & 0x80u) << 24;
    em = c & 0x7fu;

    if (em == 0x7fu) {
        return kvs_kvq_float(s | 0x7fc00000u);
    }

    if (em < 8u) {
        f = (float) em * 0.001953125f;                  /* m x 2^-9 */

        return s != 0 ? -f : f;
    }

    return kvs_kvq_float(s | ((em << 20) + (120u << 23)));
}


/* The int8 code of r = x / scale: see the file's comment. */
KVS_KVQ_FN int8_t
kvs_kv_i8_from_f32(float r)
{
    r = r > KVS_KVQ_I8_MAX ? KVS_KVQ_I8_MAX : r;
    r = r < -KVS_KVQ_I8_MAX ? -KVS_KVQ_I8_MAX : r;

    if (r != r) {
        return 0;
    }

#if defined(__CUDA_ARCH__)
    return (int8_t) __float2int_rn(r);
#else
    return (int8_t) lrintf(r);
#endif
}


/* Code of r = x / scale in dtype fp8 (fp8 != 0) or int8, as a byte. */
KVS_KVQ_FN uint8_t
kvs_kvq_enc(int fp8, float r)
{
    return fp8 ? kvs_kv_fp8_from_f32(r) : (uint8_t) kvs_kv_i8_from_f32(r);
}


/* Unscaled value of byte c in dtype fp8 (fp8 != 0) or int8. */
KVS_KVQ_FN float
kvs_kvq_dec(int fp8, uint8_t c)
{
    return fp8 ? kvs_kv_fp8_to_f32(c) : (float) (int8_t) c;
}


/*
 * The scale of a (block, layer, K or V, head) after slot u's row of
 * largest |x| amax is written, s the scale before (unused when u == 0),
 * qmax the dtype's largest code (KVS_KVQ_I8_MAX, KVS_KVQ_FP8_MAX).
 * *grow = 1 when slots 0..u-1 must be requantized by s / (the result).
 */
KVS_KVQ_FN float
kvs_kvq_scale(float s, float amax, uint32_t u, float qmax, int *grow)
{
    *grow = 0;

    if (u == 0) {
        return amax / qmax;
    }

    if (amax > s * qmax) {
        *grow = 1;
        return amax / qmax;
    }

    return s;
}


/* 1 / s, 0 for a zero scale (a row of zeros stores zeros). */
KVS_KVQ_FN float
kvs_kvq_inv(float s)
{
    return s > 0.0f ? 1.0f / s : 0.0f;
}

#endif /* KVS_KV_QUANT_H */
