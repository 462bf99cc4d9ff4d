/*
 * kvs_sample: a GGUF file that uses every metadata value type (nested
 * arrays, empty arrays, non-ASCII and empty strings, extreme integers,
 * special floats) and tensors of F32, F16, BF16 and Q8_0 with known
 * contents.  Written by our writer; read back by our reader
 * (test_gguf_write.c) and by the Python gguf package
 * (test_gguf_python.py, through t/unit/gguf_sample.c).
 */

#ifndef KVS_SAMPLE_H
#define KVS_SAMPLE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_gguf.h"

#define KVS_SAMPLE_Q8_ROWS  2

/* Tensor contents: element i of tensor t is kvs_sample_value(t, i). */
static inline float
kvs_sample_value(unsigned t, uint64_t i)
{
    return (float) ((int64_t) ((i * 37 + t * 11) % 201) - 100) / 64.0f;
}


static inline int
kvs_sample_fill(void *ctx, const char *name, void *dst, uint64_t nbytes,
    kvs_err_t *err)
{
    float     row[64];
    uint64_t  i;
    uint16_t *h;

    (void) ctx;

    if (strcmp(name, "t.f16") == 0 || strcmp(name, "t.bf16") == 0) {
        h = dst;
        for (i = 0; i < nbytes / 2; i++) {
            h[i] = name[2] == 'f' ? kvs_f32_to_f16(kvs_sample_value(1, i))
                                  : kvs_f32_to_bf16(kvs_sample_value(2, i));
        }
        return KVS_OK;
    }

    if (strcmp(name, "t.q8_0") == 0) {
        for (i = 0; i < 64 * KVS_SAMPLE_Q8_ROWS; i++) {
            row[i % 64] = kvs_sample_value(3, i);
            if (i % 64 == 63) {
                kvs_q8_0_quantize(row, (uint8_t *) dst + (i / 64) * 68, 64);
            }
        }
        return KVS_OK;
    }

    return kvs_err_set(err, KVS_EINVAL, "unexpected tensor %s", name);
}


static inline int
kvs_sample_write(const char *path, uint32_t version, uint32_t alignment,
    kvs_err_t *err)
{
    int                 rc;
    float               f32[3 * 5];
    uint64_t            i, ne[4];
    kvs_gguf_writer_t  *w;

    uint8_t   u8 = 255;       int8_t   i8 = -128;
    uint16_t  u16 = 65535;    int16_t  i16 = -32768;
    uint32_t  u32 = 4294967295u;  int32_t  i32 = INT32_MIN;
    uint64_t  u64 = UINT64_MAX;   int64_t  i64 = INT64_MIN;
    float     fv = 3.14159274f;   double   dv = -2.718281828459045;
    float     finf = INFINITY;    double   dtiny = 4.9406564584124654e-324;
    uint8_t   bools[3] = { 1, 0, 1 };
    int32_t   ints[4] = { 1, -2, 3, -4 };
    uint64_t  big[2] = { 0, UINT64_MAX };
    double    dbl[2] = { 0.5, -1e300 };

    rc = kvs_gguf_writer_new(&w, version, err);
    if (rc != KVS_OK) {
        return rc;
    }

    kvs_gguf_set_str(w, "general.architecture", "sample");
    kvs_gguf_set_u32(w, "general.alignment", alignment);

    kvs_gguf_w_key(w, "t.u8", KVS_GGUF_U8);    kvs_gguf_w_scalar(w, KVS_GGUF_U8, &u8);
    kvs_gguf_w_key(w, "t.i8", KVS_GGUF_I8);    kvs_gguf_w_scalar(w, KVS_GGUF_I8, &i8);
    kvs_gguf_w_key(w, "t.u16", KVS_GGUF_U16);  kvs_gguf_w_scalar(w, KVS_GGUF_U16, &u16);
    kvs_gguf_w_key(w, "t.i16", KVS_GGUF_I16);  kvs_gguf_w_scalar(w, KVS_GGUF_I16, &i16);
    kvs_gguf_w_key(w, "t.u32", KVS_GGUF_U32);  kvs_gguf_w_scalar(w, KVS_GGUF_U32, &u32);
    kvs_gguf_w_key(w, "t.i32", KVS_GGUF_I32);  kvs_gguf_w_scalar(w, KVS_GGUF_I32, &i32);
    kvs_gguf_w_key(w, "t.u64", KVS_GGUF_U64);  kvs_gguf_w_scalar(w, KVS_GGUF_U64, &u64);
    kvs_gguf_w_key(w, "t.i64", KVS_GGUF_I64);  kvs_gguf_w_scalar(w, KVS_GGUF_I64, &i64);
    kvs_gguf_w_key(w, "t.f32", KVS_GGUF_F32);  kvs_gguf_w_scalar(w, KVS_GGUF_F32, &fv);
    kvs_gguf_w_key(w, "t.f64", KVS_GGUF_F64);  kvs_gguf_w_scalar(w, KVS_GGUF_F64, &dv);
    kvs_gguf_w_key(w, "t.f32.inf", KVS_GGUF_F32);
    kvs_gguf_w_scalar(w, KVS_GGUF_F32, &finf);
    kvs_gguf_w_key(w, "t.f64.denormal", KVS_GGUF_F64);
    kvs_gguf_w_scalar(w, KVS_GGUF_F64, &dtiny);
    kvs_gguf_set_bool(w, "t.bool", 1);
    kvs_gguf_set_str(w, "t.str", "h\xc3\xa9llo, w\xc3\xb6rld \xf0\x9f\xa6\x99");
    kvs_gguf_set_str(w, "t.str.empty", "");

    kvs_gguf_w_key(w, "t.arr.bool", KVS_GGUF_ARR);
    kvs_gguf_w_arr(w, KVS_GGUF_BOOL, 3);
    kvs_gguf_w_elems(w, bools, 3);

    kvs_gguf_w_key(w, "t.arr.i32", KVS_GGUF_ARR);
    kvs_gguf_w_arr(w, KVS_GGUF_I32, 4);
    kvs_gguf_w_elems(w, ints, 4);

    kvs_gguf_w_key(w, "t.arr.u64", KVS_GGUF_ARR);
    kvs_gguf_w_arr(w, KVS_GGUF_U64, 2);
    kvs_gguf_w_elems(w, big, 2);

    kvs_gguf_w_key(w, "t.arr.f64", KVS_GGUF_ARR);
    kvs_gguf_w_arr(w, KVS_GGUF_F64, 2);
    kvs_gguf_w_elems(w, dbl, 2);

    kvs_gguf_w_key(w, "t.arr.str", KVS_GGUF_ARR);
    kvs_gguf_w_arr(w, KVS_GGUF_STR, 3);
    kvs_gguf_w_str(w, "a", 1);
    kvs_gguf_w_str(w, "", 0);
    kvs_gguf_w_str(w, "\xe2\x96\x81the", 6);

    kvs_gguf_w_key(w, "t.arr.empty", KVS_GGUF_ARR);
    kvs_gguf_w_arr(w, KVS_GGUF_U8, 0);

    /* [[1, 2], [], [[ "x" ]]] as arrays of arrays */
    kvs_gguf_w_key(w, "t.arr.nested", KVS_GGUF_ARR);
    kvs_gguf_w_arr(w, KVS_GGUF_ARR, 3);
    kvs_gguf_w_arr(w, KVS_GGUF_I16, 2);
    kvs_gguf_w_scalar(w, KVS_GGUF_I16, &(int16_t) { 1 });
    kvs_gguf_w_scalar(w, KVS_GGUF_I16, &(int16_t) { 2 });
    kvs_gguf_w_arr(w, KVS_GGUF_F32, 0);
    kvs_gguf_w_arr(w, KVS_GGUF_ARR, 1);
    kvs_gguf_w_arr(w, KVS_GGUF_STR, 1);
    kvs_gguf_w_str(w, "x", 1);

    for (i = 0; i < 15; i++) {
        f32[i] = kvs_sample_value(0, i);
    }

    ne[0] = 5; ne[1] = 3;
    kvs_gguf_w_tensor(w, "t.f32", KVS_GGML_F32, 2, ne, f32);
    ne[0] = 7; ne[1] = 1; ne[2] = 2;
    kvs_gguf_w_tensor(w, "t.f16", KVS_GGML_F16, 3, ne, NULL);
    ne[0] = 3; ne[1] = 2; ne[2] = 2; ne[3] = 2;
    kvs_gguf_w_tensor(w, "t.bf16", KVS_GGML_BF16, 4, ne, NULL);
    ne[0] = 64; ne[1] = KVS_SAMPLE_Q8_ROWS;
    kvs_gguf_w_tensor(w, "t.q8_0", KVS_GGML_Q8_0, 2, ne, NULL);

    rc = kvs_gguf_writer_write(w, path, kvs_sample_fill, NULL, err);
    kvs_gguf_writer_free(w);

    return rc;
}

#endif /* KVS_SAMPLE_H */
