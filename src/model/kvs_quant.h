/*
 * kvs_quant: the tensor types kvserve computes with, and their rows
 * converted to and from f32.
 *
 * Block layouts are ggml's, as GGUF files store them (little-endian, no
 * padding); each type's file says its layout.  Dequantization is exact:
 * for every type, the f32 values equal, bit for bit, those of the `gguf`
 * PyPI package's gguf.quants.dequantize (t/unit/test_quant*.c and the
 * interop test check it), so a row converted here is the row the model's
 * authors meant, on every CPU.
 *
 * Supported: F32, F16, BF16 and the quantized types Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS (what the
 * usual mixes use).  Any other type a GGUF file may declare is refused
 * before a model is loaded (kvs_quant_check()).
 *
 * n (elements) is always a multiple of the type's block
 * (kvs_ggml_type_info()); src holds n / block * size bytes.
 */

#ifndef KVS_QUANT_H
#define KVS_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"

typedef void (*kvs_quant_dequantize_pt)(const uint8_t *src, float *dst,
    size_t n);
typedef void (*kvs_quant_quantize_pt)(const float *src, uint8_t *dst,
    size_t n);

typedef struct {
    uint32_t                  type;        /* kvs_ggml_type_t */
    kvs_quant_dequantize_pt   dequantize;
    kvs_quant_quantize_pt     quantize;    /* NULL: we cannot make it */
} kvs_quant_type_t;

/* The entry of a type we compute with; NULL for any other. */
const kvs_quant_type_t *kvs_quant_type(uint32_t type);

/* KVS_OK when tensor `name` of `type` can be computed; else an error
 * naming the tensor and its type, and what is supported. */
int kvs_quant_check(const char *name, uint32_t type, kvs_err_t *err);

/* Row conversions for any supported type (F32 copies).  KVS_EINVAL for
 * a type without the conversion, n not a multiple of its block. */
int kvs_quant_dequantize(uint32_t type, const void *src, float *dst,
    size_t n, kvs_err_t *err);
int kvs_quant_quantize(uint32_t type, const float *src, void *dst,
    size_t n, kvs_err_t *err);

/* The supported types' names in buf[size] as one line for messages:
 * "F32, F16, BF16, Q4_0, ..." (KVS_QUANT_NAMES_LEN holds them all). */
#define KVS_QUANT_NAMES_LEN  160
void kvs_quant_names(char *buf, size_t size);

/* The types' own conversions (kvs_quant_legacy.c, kvs_quant_k.c,
 * kvs_quant_iq4.c; Q8_0's are kvs_dtype.h's). */
void kvs_q4_0_dequantize(const uint8_t *src, float *dst, size_t n);
void kvs_q4_0_quantize(const float *src, uint8_t *dst, size_t n);
void kvs_q4_1_dequantize(const uint8_t *src, float *dst, size_t n);
void kvs_q4_1_quantize(const float *src, uint8_t *dst, size_t n);
void kvs_q5_0_dequantize(const uint8_t *src, float *dst, size_t n);
void kvs_q5_0_quantize(const float *src, uint8_t *dst, size_t n);
void kvs_q5_1_dequantize(const uint8_t *src, float *dst, size_t n);
void kvs_q5_1_quantize(const float *src, uint8_t *dst, size_t n);

void kvs_q2_k_dequantize(const uint8_t *src, float *dst, size_t n);
void kvs_q2_k_quantize(const float *src, uint8_t *dst, size_t n);
void kvs_q3_k_dequantize(const uint8_t *src, float *dst, size_t n);
void kvs_q3_k_quantize(const float *src, uint8_t *dst, size_t n);
void kvs_q4_k_dequantize(const uint8_t *src, float *dst, size_t n);
void kvs_q4_k_quantize(const float *src, uint8_t *dst, size_t n);
void kvs_q5_k_dequantize(const uint8_t *src, float *dst, size_t n);
void kvs_q5_k_quantize(const float *src, uint8_t *dst, size_t n);
void kvs_q6_k_dequantize(const uint8_t *src, float *dst, size_t n);
void kvs_q6_k_quantize(const float *src, uint8_t *dst, size_t n);

/* IQ4_NL's and IQ4_XS's 16 levels (kvs_quant_iq4.c), for the products
 * that keep these weights quantized. */
extern const int8_t kvs_iq4_kv[16];

void kvs_iq4_nl_dequantize(const uint8_t *src, float *dst, size_t n);
void kvs_iq4_nl_quantize(const float *src, uint8_t *dst, size_t n);
void kvs_iq4_xs_dequantize(const uint8_t *src, float *dst, size_t n);
void kvs_iq4_xs_quantize(const float *src, uint8_t *dst, size_t n);

#endif /* KVS_QUANT_H */
