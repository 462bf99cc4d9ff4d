/*
 * kvs_dtype: scalar conversions between f32 and the stored weight types
 * (f16, bf16) and Q8_0 block (de)quantization.
 *
 * Rounding is round-to-nearest-even, as ggml and PyTorch do, so a value
 * converted here has the same bits as one converted by them.  NaN stays
 * NaN (quiet); overflow to f16 gives +-inf.
 *
 * Q8_0 block (34 bytes, 32 elements): f16 d | int8 qs[32], x = d * qs[i],
 * d = max|x| / 127.
 */

#ifndef KVS_DTYPE_H
#define KVS_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KVS_Q8_0_BLOCK  32
#define KVS_Q8_0_BYTES  34

uint16_t kvs_f32_to_f16(float f);
float kvs_f16_to_f32(uint16_t h);
uint16_t kvs_f32_to_bf16(float f);
float kvs_bf16_to_f32(uint16_t h);

/* The f16 of a quantized block's field at p (little-endian, unaligned),
 * read as f32, and f written there: every block codec's scales. */
static inline float
kvs_f16_load(const uint8_t *p)
{
    uint16_t  h;

    memcpy(&h, p, 2);

    return kvs_f16_to_f32(h);
}


static inline void
kvs_f16_store(uint8_t *p, float f)
{
    uint16_t  h;

    h = kvs_f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* n must be a multiple of KVS_Q8_0_BLOCK; dst holds n / 32 * 34 bytes. */
void kvs_q8_0_quantize(const float *src, uint8_t *dst, size_t n);
void kvs_q8_0_dequantize(const uint8_t *src, float *dst, size_t n);

#endif /* KVS_DTYPE_H */
