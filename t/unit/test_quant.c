/*
 * test_quant: the table of computable types (src/model/kvs_quant.c):
 * which types it holds, the refusal naming the tensor and its type for
 * every other type a GGUF file may declare, row conversions through it
 * equal to each type's own, and element counts that are not whole blocks
 * refused.  Each quantized type's own layout is tested in its file's
 * test (test_quant_legacy.c, test_quant_k.c, test_quant_iq4.c) and
 * against the gguf package by t/unit/test_quant_python.py.
 */

#include "kvs_test.h"

#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"


/* the types the issue lists, and only those */
static const uint32_t  supported[] = {
    KVS_GGML_F32, KVS_GGML_F16, KVS_GGML_BF16,
    KVS_GGML_Q4_0, KVS_GGML_Q4_1, KVS_GGML_Q5_0, KVS_GGML_Q5_1,
    KVS_GGML_Q8_0, KVS_GGML_Q2_K, KVS_GGML_Q3_K, KVS_GGML_Q4_K,
    KVS_GGML_Q5_K, KVS_GGML_Q6_K, KVS_GGML_IQ4_NL, KVS_GGML_IQ4_XS
};


static int
is_supported(uint32_t type)
{
    size_t  i;

    for (i = 0; i < sizeof(supported) / sizeof(supported[0]); i++) {
        if (supported[i] == type) {
            return 1;
        }
    }

    return 0;
}


static void
test_table(void **state)
{
    char                        names[KVS_QUANT_NAMES_LEN];
    uint32_t                    t;
    kvs_err_t                   err;
    const kvs_quant_type_t     *q;
    const kvs_ggml_type_info_t *info;

    for (t = 0; t < KVS_GGML_TYPE_END + 2; t++) {
        q = kvs_quant_type(t);
        info = kvs_ggml_type_info(t);

        if (is_supported(t)) {
            assert_non_null(q);
            assert_non_null(info);
            assert_int_equal(q->type, t);
            assert_non_null(q->dequantize);
            assert_int_equal(kvs_quant_check("w", t, &err), KVS_OK);
            continue;
        }

        assert_null(q);
        assert_int_equal(kvs_quant_check("blk.0.attn_q.weight", t, &err),
                         KVS_EINVAL);
        assert_non_null(strstr(err.msg, "\"blk.0.attn_q.weight\""));
        assert_non_null(strstr(err.msg, kvs_ggml_type_name(t)));
        assert_non_null(strstr(err.msg, "supported: F32, F16, BF16"));
    }

    kvs_quant_names(names, sizeof(names));
    assert_non_null(strstr(names, "Q8_0"));

    /* a short buffer holds whole names only */
    kvs_quant_names(names, 12);
    assert_string_equal(names, "F32, F16");
}


static void
test_rows(void **state)
{
    size_t     i;
    float      x[64], y[64], z[64];
    uint8_t    b[64 * 4], c[64 * 4];
    uint16_t   h;
    kvs_err_t  err;

    for (i = 0; i < 64; i++) {
        x[i] = (float) ((int) i - 31) * 0.37f;
    }

    /* F16 through the table is kvs_dtype's conversion, element by element */
    assert_int_equal(kvs_quant_quantize(KVS_GGML_F16, x, b, 64, &err),
                     KVS_OK);
    assert_int_equal(kvs_quant_dequantize(KVS_GGML_F16, b, y, 64, &err),
                     KVS_OK);

    for (i = 0; i < 64; i++) {
        memcpy(&h, b + 2 * i, 2);
        assert_int_equal(h, kvs_f32_to_f16(x[i]));
        assert_true(y[i] == kvs_f16_to_f32(h));
    }

    assert_int_equal(kvs_quant_quantize(KVS_GGML_BF16, x, b, 64, &err),
                     KVS_OK);
    assert_int_equal(kvs_quant_dequantize(KVS_GGML_BF16, b, y, 64, &err),
                     KVS_OK);

    for (i = 0; i < 64; i++) {
        memcpy(&h, b + 2 * i, 2);
        assert_int_equal(h, kvs_f32_to_bf16(x[i]));
        assert_true(y[i] == kvs_bf16_to_f32(h));
    }

    /* Q8_0 is kvs_dtype's blocks */
    assert_int_equal(kvs_quant_quantize(KVS_GGML_Q8_0, x, b, 64, &err),
                     KVS_OK);
    kvs_q8_0_quantize(x, c, 64);
    assert_memory_equal(b, c, 2 * KVS_Q8_0_BYTES);
    assert_int_equal(kvs_quant_dequantize(KVS_GGML_Q8_0, b, y, 64, &err),
                     KVS_OK);
    kvs_q8_0_dequantize(c, z, 64);
    assert_memory_equal(y, z, sizeof(y));

    /* F32 copies */
    assert_int_equal(kvs_quant_dequantize(KVS_GGML_F32, x, y, 64, &err),
                     KVS_OK);
    assert_memory_equal(x, y, sizeof(x));

    /* not whole blocks, an unsupported type */
    assert_int_equal(kvs_quant_dequantize(KVS_GGML_Q8_0, b, y, 48, &err),
                     KVS_EINVAL);
    assert_non_null(strstr(err.msg, "48 elements of Q8_0"));
    assert_int_equal(kvs_quant_dequantize(KVS_GGML_IQ2_XXS, b, y, 256,
                                          &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "IQ2_XXS is not supported"));
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_rows),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
