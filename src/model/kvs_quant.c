/*
 * kvs_quant: the table of the types kvserve computes with (see
 * kvs_quant.h), and row conversions through it.
 *
 * The table is the one place a type becomes supported: an entry names
 * its conversions, and every check (a model's load, nginx -t, kvserve
 * info) and every backend's row conversion reads it.
 */

#include <string.h>

#include "kvs_dtype.h"
#include "kvs_ggml_type.h"
#include "kvs_quant.h"


static void kvs_quant_f32_rows(const uint8_t *src, float *dst, size_t n);
static void kvs_quant_f32_make(const float *src, uint8_t *dst, size_t n);
static void kvs_quant_f16_rows(const uint8_t *src, float *dst, size_t n);
static void kvs_quant_f16_make(const float *src, uint8_t *dst, size_t n);
static void kvs_quant_bf16_rows(const uint8_t *src, float *dst, size_t n);
static void kvs_quant_bf16_make(const float *src, uint8_t *dst, size_t n);


static const kvs_quant_type_t  kvs_quant_types[] = {
    { KVS_GGML_F32, kvs_quant_f32_rows, kvs_quant_f32_make },
    { KVS_GGML_F16, kvs_quant_f16_rows, kvs_quant_f16_make },
    { KVS_GGML_BF16, kvs_quant_bf16_rows, kvs_quant_bf16_make },
    { KVS_GGML_Q4_0, kvs_q4_0_dequantize, kvs_q4_0_quantize },
    { KVS_GGML_Q4_1, kvs_q4_1_dequantize, kvs_q4_1_quantize },
    { KVS_GGML_Q5_0, kvs_q5_0_dequantize, kvs_q5_0_quantize },
    { KVS_GGML_Q5_1, kvs_q5_1_dequantize, kvs_q5_1_quantize },
    { KVS_GGML_Q8_0, kvs_q8_0_dequantize, kvs_q8_0_quantize },
    { KVS_GGML_Q2_K, kvs_q2_k_dequantize, kvs_q2_k_quantize },
    { KVS_GGML_Q3_K, kvs_q3_k_dequantize, kvs_q3_k_quantize },
    { KVS_GGML_Q4_K, kvs_q4_k_dequantize, kvs_q4_k_quantize },
    { KVS_GGML_Q5_K, kvs_q5_k_dequantize, kvs_q5_k_quantize },
    { KVS_GGML_Q6_K, kvs_q6_k_dequantize, kvs_q6_k_quantize },
    { KVS_GGML_IQ4_NL, kvs_iq4_nl_dequantize, kvs_iq4_nl_quantize },
    { KVS_GGML_IQ4_XS, kvs_iq4_xs_dequantize, kvs_iq4_xs_quantize },
};

#define KVS_QUANT_N  (sizeof(kvs_quant_types) / sizeof(kvs_quant_types[0]))


const kvs_quant_type_t *
kvs_quant_type(uint32_t type)
{
    size_t  i;

    for (i = 0; i < KVS_QUANT_N; i++) {
        if (kvs_quant_types[i].type == type) {
            return &kvs_quant_types[i];
        }
    }

    return NULL;
}


void
kvs_quant_names(char *buf, size_t size)
{
    size_t       i, len, k;
    const char  *name;

    len = 0;

    for (i = 0; i < KVS_QUANT_N && size > 0; i++) {
        name = kvs_ggml_type_name(kvs_quant_types[i].type);
        k = strlen(name);

        if (len + k + 3 > size) {
            break;
        }

        if (i > 0) {
            memcpy(buf + len, ", ", 2);
            len += 2;
        }

        memcpy(buf + len, name, k);
        len += k;
    }

    if (size > 0) {
        buf[len] = '\0';
    }
}


int
kvs_quant_check(const char *name, uint32_t type, kvs_err_t *err)
{
    char  names[KVS_QUANT_NAMES_LEN];

    if (kvs_quant_type(type) != NULL) {
        return KVS_OK;
    }

    kvs_quant_names(names, sizeof(names));

    return kvs_err_set(err, KVS_EINVAL, "tensor \"%s\" is of type %s, "
                       "which kvserve cannot compute with (supported: %s)",
                       name, kvs_ggml_type_name(type), names);
}


/* n against the type's block; the entry, or NULL with err set */
static const kvs_quant_type_t *
kvs_quant_entry(uint32_t type, size_t n, kvs_err_t *err)
{
    char                         names[KVS_QUANT_NAMES_LEN];
    const kvs_quant_type_t      *q;
    const kvs_ggml_type_info_t  *info;

    q = kvs_quant_type(type);
    info = kvs_ggml_type_info(type);

    if (q == NULL || info == NULL) {
        kvs_quant_names(names, sizeof(names));
        (void) kvs_err_set(err, KVS_EINVAL, "type %s is not supported "
                           "(supported: %s)", kvs_ggml_type_name(type),
                           names);
        return NULL;
    }

    if (n % info->block != 0) {
        (void) kvs_err_set(err, KVS_EINVAL, "%zu elements of %s: not a "
                           "multiple of its block of %u", n, info->name,
                           info->block);
        return NULL;
    }

    return q;
}


int
kvs_quant_dequantize(uint32_t type, const void *src, float *dst, size_t n,
    kvs_err_t *err)
{
    const kvs_quant_type_t  *q;

    q = kvs_quant_entry(type, n, err);
    if (q == NULL) {
        return KVS_EINVAL;
    }

    q->dequantize(src, dst, n);

    return KVS_OK;
}


int
kvs_quant_quantize(uint32_t type, const float *src, void *dst, size_t n,
    kvs_err_t *err)
{
    const kvs_quant_type_t  *q;

    q = kvs_quant_entry(type, n, err);
    if (q == NULL) {
        return KVS_EINVAL;
    }

    if (q->quantize == NULL) {
        return kvs_err_set(err, KVS_EINVAL, "kvserve cannot quantize to "
                           "%s", kvs_ggml_type_name(type));
    }

    q->quantize(src, dst, n);

    return KVS_OK;
}


/* ---- the unquantized types, as rows ----------------------------------- */

static void
kvs_quant_f32_rows(const uint8_t *src, float *dst, size_t n)
{
    memcpy(dst, src, n * sizeof(float));
}


static void
kvs_quant_f32_make(const float *src, uint8_t *dst, size_t n)
{
    memcpy(dst, src, n * sizeof(float));
}


/* 16-bit floats through cv, unaligned (a GGUF tensor is aligned, a
 * caller's buffer may not be) */
static void
kvs_quant_u16_rows(const uint8_t *src, float *dst, size_t n,
    float (*cv)(uint16_t))
{
    size_t    i;
    uint16_t  h;

    for (i = 0; i < n; i++) {
        memcpy(&h, src + 2 * i, 2);
        dst[i] = cv(h);
    }
}


static void
kvs_quant_u16_make(const float *src, uint8_t *dst, size_t n,
    uint16_t (*cv)(float))
{
    size_t    i;
    uint16_t  h;

    for (i = 0; i < n; i++) {
        h = cv(src[i]);
        memcpy(dst + 2 * i, &h, 2);
    }
}


static void
kvs_quant_f16_rows(const uint8_t *src, float *dst, size_t n)
{
    kvs_quant_u16_rows(src, dst, n, kvs_f16_to_f32);
}


static void
kvs_quant_f16_make(const float *src, uint8_t *dst, size_t n)
{
    kvs_quant_u16_make(src, dst, n, kvs_f32_to_f16);
}


static void
kvs_quant_bf16_rows(const uint8_t *src, float *dst, size_t n)
{
    kvs_quant_u16_rows(src, dst, n, kvs_bf16_to_f32);
}


static void
kvs_quant_bf16_make(const float *src, uint8_t *dst, size_t n)
{
    kvs_quant_u16_make(src, dst, n, kvs_f32_to_bf16);
}
