/*
 * test_gguf_write: writer -> reader round trips (every value type, nested
 * arrays, tensors of F32/F16/BF16/Q8_0, alignment, v2), the writer's
 * refusal of malformed sequences, dtype conversions, and generated models
 * (determinism, shapes, hyper-parameters).
 */

#include <math.h>
#include <unistd.h>

#include "kvs_test.h"
#include "kvs_sample.h"

#include "gen/kvs_gen.h"
#include "model/kvs_hparams.h"
#include "model/kvs_model.h"


static kvs_gguf_t *
write_and_open(uint32_t version, uint32_t alignment)
{
    kvs_err_t    err;
    kvs_gguf_t  *g;
    const char  *path;

    path = kvs_test_tmp("roundtrip.gguf");

    if (kvs_sample_write(path, version, alignment, &err) != KVS_OK) {
        fail_msg("write: %s", err.msg);
    }

    if (kvs_gguf_open(&g, path, &err) != KVS_OK) {
        fail_msg("read back: %s", err.msg);
    }

    return g;
}


static void
check_sample_values(kvs_gguf_t *g)
{
    int              b;
    double           f64, d;
    float            f32;
    int8_t           i8;
    int16_t          i16;
    int32_t          i32;
    int64_t          i64, iv;
    uint8_t          u8;
    uint16_t         u16;
    uint32_t         u32;
    uint64_t         u64, uv;
    kvs_gguf_str_t   s;
    kvs_gguf_arr_t   a, sub, sub2;
    kvs_gguf_iter_t  it, it2, it3;

    assert_int_equal(kvs_gguf_get_u8(g, "t.u8", &u8, NULL), KVS_OK);
    assert_int_equal(u8, 255);
    assert_int_equal(kvs_gguf_get_i8(g, "t.i8", &i8, NULL), KVS_OK);
    assert_int_equal(i8, -128);
    assert_int_equal(kvs_gguf_get_u16(g, "t.u16", &u16, NULL), KVS_OK);
    assert_int_equal(u16, 65535);
    assert_int_equal(kvs_gguf_get_i16(g, "t.i16", &i16, NULL), KVS_OK);
    assert_int_equal(i16, -32768);
    assert_int_equal(kvs_gguf_get_u32(g, "t.u32", &u32, NULL), KVS_OK);
    assert_int_equal(u32, 4294967295u);
    assert_int_equal(kvs_gguf_get_i32(g, "t.i32", &i32, NULL), KVS_OK);
    assert_true(i32 == INT32_MIN);
    assert_int_equal(kvs_gguf_get_u64(g, "t.u64", &u64, NULL), KVS_OK);
    assert_true(u64 == UINT64_MAX);
    assert_int_equal(kvs_gguf_get_i64(g, "t.i64", &i64, NULL), KVS_OK);
    assert_true(i64 == INT64_MIN);
    assert_int_equal(kvs_gguf_get_f32(g, "t.f32", &f32, NULL), KVS_OK);
    assert_true(f32 == 3.14159274f);
    assert_int_equal(kvs_gguf_get_f64(g, "t.f64", &f64, NULL), KVS_OK);
    assert_true(f64 == -2.718281828459045);
    assert_int_equal(kvs_gguf_get_f32(g, "t.f32.inf", &f32, NULL), KVS_OK);
    assert_true(isinf(f32));
    assert_int_equal(kvs_gguf_get_f64(g, "t.f64.denormal", &f64, NULL),
                     KVS_OK);
    assert_true(f64 == 4.9406564584124654e-324);
    assert_int_equal(kvs_gguf_get_bool(g, "t.bool", &b, NULL), KVS_OK);
    assert_int_equal(b, 1);
    assert_int_equal(kvs_gguf_get_str(g, "t.str", &s, NULL), KVS_OK);
    assert_true(kvs_gguf_str_eq(s, "h\xc3\xa9llo, w\xc3\xb6rld "
                                   "\xf0\x9f\xa6\x99"));
    assert_int_equal(kvs_gguf_get_str(g, "t.str.empty", &s, NULL), KVS_OK);
    assert_int_equal(s.len, 0);

    /* lenient getters */
    assert_int_equal(kvs_gguf_get_uint(g, "t.i8", &uv, NULL), KVS_ERANGE);
    assert_int_equal(kvs_gguf_get_uint(g, "t.u64", &uv, NULL), KVS_OK);
    assert_true(uv == UINT64_MAX);
    assert_int_equal(kvs_gguf_get_float(g, "t.f32", &d, NULL), KVS_OK);
    assert_true(d == (double) 3.14159274f);

    assert_int_equal(kvs_gguf_get_arr(g, "t.arr.bool", &a, NULL), KVS_OK);
    assert_int_equal(a.type, KVS_GGUF_BOOL);
    assert_int_equal(a.n, 3);
    assert_int_equal(kvs_gguf_arr_int(&a, 1, &iv), KVS_OK);
    assert_int_equal(iv, 0);
    assert_int_equal(kvs_gguf_arr_int(&a, 2, &iv), KVS_OK);
    assert_int_equal(iv, 1);

    assert_int_equal(kvs_gguf_get_arr(g, "t.arr.i32", &a, NULL), KVS_OK);
    assert_int_equal(kvs_gguf_arr_int(&a, 3, &iv), KVS_OK);
    assert_int_equal(iv, -4);
    assert_int_equal(kvs_gguf_arr_uint(&a, 3, &uv), KVS_ERANGE);

    assert_int_equal(kvs_gguf_get_arr(g, "t.arr.u64", &a, NULL), KVS_OK);
    assert_int_equal(kvs_gguf_arr_uint(&a, 1, &uv), KVS_OK);
    assert_true(uv == UINT64_MAX);

    assert_int_equal(kvs_gguf_get_arr(g, "t.arr.f64", &a, NULL), KVS_OK);
    assert_int_equal(kvs_gguf_arr_float(&a, 1, &d), KVS_OK);
    assert_true(d == -1e300);

    assert_int_equal(kvs_gguf_get_arr(g, "t.arr.str", &a, NULL), KVS_OK);
    kvs_gguf_iter_init(&it, &a);
    assert_true(kvs_gguf_iter_str(&it, &s) && kvs_gguf_str_eq(s, "a"));
    assert_true(kvs_gguf_iter_str(&it, &s) && s.len == 0);
    assert_true(kvs_gguf_iter_str(&it, &s)
                && kvs_gguf_str_eq(s, "\xe2\x96\x81the"));
    assert_false(kvs_gguf_iter_str(&it, &s));

    assert_int_equal(kvs_gguf_get_arr(g, "t.arr.empty", &a, NULL), KVS_OK);
    assert_int_equal(a.type, KVS_GGUF_U8);
    assert_int_equal(a.n, 0);

    /* [[1, 2], [], [["x"]]] */
    assert_int_equal(kvs_gguf_get_arr(g, "t.arr.nested", &a, NULL), KVS_OK);
    assert_int_equal(a.type, KVS_GGUF_ARR);
    assert_int_equal(a.n, 3);
    kvs_gguf_iter_init(&it, &a);
    assert_true(kvs_gguf_iter_arr(&it, &sub));
    assert_int_equal(sub.type, KVS_GGUF_I16);
    assert_int_equal(sub.n, 2);
    assert_int_equal(kvs_gguf_arr_int(&sub, 1, &iv), KVS_OK);
    assert_int_equal(iv, 2);
    assert_true(kvs_gguf_iter_arr(&it, &sub));
    assert_int_equal(sub.type, KVS_GGUF_F32);
    assert_int_equal(sub.n, 0);
    assert_true(kvs_gguf_iter_arr(&it, &sub));
    assert_int_equal(sub.type, KVS_GGUF_ARR);
    kvs_gguf_iter_init(&it2, &sub);
    assert_true(kvs_gguf_iter_arr(&it2, &sub2));
    assert_int_equal(sub2.type, KVS_GGUF_STR);
    kvs_gguf_iter_init(&it3, &sub2);
    assert_true(kvs_gguf_iter_str(&it3, &s) && kvs_gguf_str_eq(s, "x"));
    assert_false(kvs_gguf_iter_arr(&it, &sub));
    assert_ptr_equal(it.p, a.end);
}


static void
check_sample_tensors(kvs_gguf_t *g, uint32_t alignment)
{
    float                     deq[128];
    uint64_t                  i;
    const uint16_t           *h;
    const kvs_gguf_tensor_t  *t;

    assert_int_equal(kvs_gguf_alignment(g), alignment);
    assert_int_equal(kvs_gguf_data_offset(g) % alignment, 0);
    assert_int_equal(kvs_gguf_n_tensors(g), 4);

    t = kvs_gguf_find_tensor(g, "t.f32");
    assert_int_equal(t->type, KVS_GGML_F32);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->nbytes, 60);
    for (i = 0; i < 15; i++) {
        assert_true(((const float *) t->data)[i] == kvs_sample_value(0, i));
    }

    t = kvs_gguf_find_tensor(g, "t.f16");
    assert_int_equal(t->n_dims, 3);
    assert_int_equal(t->ne[2], 2);
    assert_int_equal(t->ne[3], 1);
    assert_int_equal(t->offset % alignment, 0);
    h = t->data;
    for (i = 0; i < 14; i++) {
        /* multiples of 1/64 in [-100/64, 100/64] are exact in f16 */
        assert_true(kvs_f16_to_f32(h[i]) == kvs_sample_value(1, i));
    }

    t = kvs_gguf_find_tensor(g, "t.bf16");
    assert_int_equal(t->n_dims, 4);
    assert_int_equal(t->nelem, 24);
    h = t->data;
    for (i = 0; i < 24; i++) {
        assert_true(fabsf(kvs_bf16_to_f32(h[i]) - kvs_sample_value(2, i))
                    <= fabsf(kvs_sample_value(2, i)) / 128.0f);
    }

    t = kvs_gguf_find_tensor(g, "t.q8_0");
    assert_int_equal(t->nbytes, 2 * 34 * 2);
    kvs_q8_0_dequantize(t->data, deq, 128);
    for (i = 0; i < 128; i++) {
        /* one quantisation step of the block's scale, 100/64/127 */
        assert_true(fabsf(deq[i] - kvs_sample_value(3, i)) <= 0.0062f);
    }
}


static void
test_roundtrip_v3(void **state)
{
    kvs_gguf_t  *g;

    g = write_and_open(3, 32);
    assert_int_equal(kvs_gguf_version(g), 3);
    check_sample_values(g);
    check_sample_tensors(g, 32);
    kvs_gguf_close(g);
}


static void
test_roundtrip_v2_aligned(void **state)
{
    kvs_gguf_t  *g;

    g = write_and_open(2, 256);
    assert_int_equal(kvs_gguf_version(g), 2);
    check_sample_values(g);
    check_sample_tensors(g, 256);
    kvs_gguf_close(g);
}


static void
test_writer_refuses(void **state)
{
    uint32_t            v;
    kvs_err_t           err;
    kvs_gguf_writer_t  *w;
    const char         *path;
    uint64_t            ne[2] = { 33, 1 };

    path = kvs_test_tmp("refused.gguf");
    unlink(path);

    /* a value without a key */
    assert_int_equal(kvs_gguf_writer_new(&w, 3, NULL), KVS_OK);
    v = 1;
    assert_int_not_equal(kvs_gguf_w_scalar(w, KVS_GGUF_U32, &v), KVS_OK);
    assert_int_not_equal(kvs_gguf_writer_write(w, path, NULL, NULL, &err),
                         KVS_OK);
    assert_non_null(strstr(err.msg, "without a key"));
    kvs_gguf_writer_free(w);

    /* an array with fewer elements than declared */
    assert_int_equal(kvs_gguf_writer_new(&w, 3, NULL), KVS_OK);
    kvs_gguf_w_key(w, "a", KVS_GGUF_ARR);
    kvs_gguf_w_arr(w, KVS_GGUF_STR, 2);
    kvs_gguf_w_str(w, "x", 1);
    assert_int_not_equal(kvs_gguf_writer_write(w, path, NULL, NULL, &err),
                         KVS_OK);
    assert_non_null(strstr(err.msg, "incomplete"));
    kvs_gguf_writer_free(w);

    /* an element of the wrong type, then more than declared */
    assert_int_equal(kvs_gguf_writer_new(&w, 3, NULL), KVS_OK);
    kvs_gguf_w_key(w, "a", KVS_GGUF_ARR);
    kvs_gguf_w_arr(w, KVS_GGUF_U32, 1);
    assert_int_not_equal(kvs_gguf_w_str(w, "x", 1), KVS_OK);
    kvs_gguf_writer_free(w);

    assert_int_equal(kvs_gguf_writer_new(&w, 3, NULL), KVS_OK);
    kvs_gguf_w_key(w, "a", KVS_GGUF_ARR);
    kvs_gguf_w_arr(w, KVS_GGUF_U32, 1);
    assert_int_not_equal(kvs_gguf_w_elems(w, ((uint32_t[2]) { 1, 2 }), 2),
                         KVS_OK);
    kvs_gguf_writer_free(w);

    /* a bad alignment, a Q8_0 row that is not whole blocks, bad version */
    assert_int_equal(kvs_gguf_writer_new(&w, 3, NULL), KVS_OK);
    assert_int_not_equal(kvs_gguf_set_u32(w, "general.alignment", 48),
                         KVS_OK);
    kvs_gguf_writer_free(w);

    assert_int_equal(kvs_gguf_writer_new(&w, 3, NULL), KVS_OK);
    assert_int_not_equal(kvs_gguf_w_tensor(w, "q", KVS_GGML_Q8_0, 2, ne,
                                           NULL), KVS_OK);
    assert_int_not_equal(kvs_gguf_writer_write(w, path, NULL, NULL, &err),
                         KVS_OK);
    assert_non_null(strstr(err.msg, "block size"));
    kvs_gguf_writer_free(w);

    assert_int_not_equal(kvs_gguf_writer_new(&w, 1, &err), KVS_OK);

    /* nothing was written under the final name */
    assert_int_not_equal(access(path, F_OK), 0);
}


static void
test_dtype_conversions(void **state)
{
    float     f;
    uint32_t  h;
    uint8_t   q[KVS_Q8_0_BYTES];
    float     x[32], y[32];
    int       i;

    /* every finite f16 survives f16 -> f32 -> f16 */
    for (h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) {
            assert_true(isnan(kvs_f16_to_f32((uint16_t) h)));
            continue;
        }
        assert_int_equal(kvs_f32_to_f16(kvs_f16_to_f32((uint16_t) h)), h);
    }

    /* round to nearest even, overflow, underflow */
    assert_int_equal(kvs_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);
    assert_int_equal(kvs_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);
    assert_int_equal(kvs_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(kvs_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(kvs_f32_to_f16(-1e-9f), 0x8000);
    assert_int_equal(kvs_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);
    assert_int_equal(kvs_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);

    assert_int_equal(kvs_f32_to_bf16(1.0f), 0x3f80);
    f = 1.0f + 1.0f / 256;                       /* a tie: stays even */
    assert_int_equal(kvs_f32_to_bf16(f), 0x3f80);
    f = 1.0f + 3.0f / 256;
    assert_int_equal(kvs_f32_to_bf16(f), 0x3f82);
    assert_true(isnan(kvs_bf16_to_f32(kvs_f32_to_bf16(NAN))));

    for (i = 0; i < 32; i++) {
        x[i] = (float) (i - 16) / 8.0f;
    }
    kvs_q8_0_quantize(x, q, 32);
    kvs_q8_0_dequantize(q, y, 32);
    assert_int_equal((int8_t) q[2], -127);        /* -2.0 is the max |x| */
    for (i = 0; i < 32; i++) {
        assert_true(fabsf(x[i] - y[i]) <= 2.0f / 127 / 2 + 1e-3f);
    }
}


static void
test_gen_model(void **state)
{
    size_t           la = 0, lb = 0, lc = 0;
    uint8_t         *a, *b, *c;
    kvs_err_t        err;
    kvs_model_t     *m;
    kvs_gen_spec_t   spec;
    const char      *pa, *pb, *pc;

    assert_int_equal(kvs_gen_preset(&spec, "tiny", &err), KVS_OK);
    spec.seed = 42;
    spec.dtype = KVS_GGML_Q8_0;

    pa = kvs_test_tmp("gen-a.gguf");
    pb = kvs_test_tmp("gen-b.gguf");
    pc = kvs_test_tmp("gen-c.gguf");

    assert_int_equal(kvs_gen_write(&spec, pa, &err), KVS_OK);
    assert_int_equal(kvs_gen_write(&spec, pb, &err), KVS_OK);
    spec.seed = 43;
    assert_int_equal(kvs_gen_write(&spec, pc, &err), KVS_OK);

    a = kvs_test_slurp(pa, &la);
    b = kvs_test_slurp(pb, &lb);
    c = kvs_test_slurp(pc, &lc);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    assert_true(la != lc || memcmp(a, c, la) != 0);
    free(a);
    free(b);
    free(c);

    if (kvs_model_open(&m, pa, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_int_equal(m->hp.n_layer, 2);
    assert_int_equal(m->hp.n_embd, 64);
    assert_int_equal(m->hp.n_head, 4);
    assert_int_equal(m->hp.n_head_kv, 2);
    assert_int_equal(m->hp.n_vocab, 512);
    assert_int_equal(kvs_gguf_find_tensor(m->gguf, "blk.1.ffn_up.weight")
                     ->type, KVS_GGML_Q8_0);
    assert_int_equal(kvs_gguf_find_tensor(m->gguf, "blk.1.ffn_norm.weight")
                     ->type, KVS_GGML_F32);
    kvs_model_close(m);

    /* a tied model has no output.weight; the parameter count drops */
    assert_int_equal(kvs_gen_preset(&spec, "small", &err), KVS_OK);
    spec.seed = 1;
    spec.tied = 1;
    assert_int_equal(kvs_gen_write(&spec, pa, &err), KVS_OK);
    assert_int_equal(kvs_model_open(&m, pa, &err), KVS_OK);
    assert_true(m->hp.tied_embeddings);
    assert_null(kvs_gguf_find_tensor(m->gguf, "output.weight"));
    assert_int_equal(m->hp.n_params,
                     2048ULL * 256 + 256
                     + 4ULL * (2 * 256 + 256 * 256 * 2 + 2 * 256 * 128
                               + 3 * 256 * 768));
    kvs_model_close(m);

    /* bad shapes are refused with the option named */
    assert_int_equal(kvs_gen_preset(&spec, "tiny", &err), KVS_OK);
    spec.n_head_kv = 3;
    assert_int_equal(kvs_gen_write(&spec, pa, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "--kv-heads 3"));
    spec.n_head_kv = 2;
    spec.n_ff = 100;
    spec.dtype = KVS_GGML_Q8_0;
    assert_int_equal(kvs_gen_write(&spec, pa, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "q8_0"));
    assert_int_equal(kvs_gen_preset(&spec, "huge", &err), KVS_EINVAL);
}


static void
test_gen_vocab(void **state)
{
    uint32_t         i, j;
    kvs_err_t        err;
    kvs_gen_vocab_t  v;
    char             left[128], *sp;

    assert_int_equal(kvs_gen_vocab_build(&v, 1000, 5, &err), KVS_OK);
    assert_int_equal(v.n_tokens, 1000);
    assert_int_equal(v.n_merges, 1000 - 256 - KVS_GEN_N_SPECIAL);
    assert_string_equal(v.tokens[v.bos], "<|begin_of_text|>");
    assert_string_equal(v.tokens[v.eot], "<|eot_id|>");
    assert_int_equal(v.types[v.eos], 3);
    assert_string_equal(v.tokens[' '], "\xc4\xa0");      /* U+0120 */
    assert_string_equal(v.tokens['A'], "A");

    /* every merge "a b" joins two earlier tokens into the next one */
    for (i = 0; i < v.n_merges; i++) {
        snprintf(left, sizeof(left), "%s", v.merges[i]);
        sp = strchr(left, ' ');
        assert_non_null(sp);
        *sp = '\0';
        for (j = 0; j < 256 + i; j++) {
            if (strcmp(v.tokens[j], left) == 0) {
                break;
            }
        }
        assert_true(j < 256 + i);
        assert_int_equal(strlen(v.tokens[256 + i]),
                         strlen(left) + strlen(sp + 1));
    }

    /* unique strings */
    for (i = 0; i < v.n_tokens; i++) {
        for (j = i + 1; j < v.n_tokens; j++) {
            assert_string_not_equal(v.tokens[i], v.tokens[j]);
        }
    }

    kvs_gen_vocab_free(&v);

    assert_int_equal(kvs_gen_vocab_build(&v, 200, 5, &err), KVS_EINVAL);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_roundtrip_v3),
        cmocka_unit_test(test_roundtrip_v2_aligned),
        cmocka_unit_test(test_writer_refuses),
        cmocka_unit_test(test_dtype_conversions),
        cmocka_unit_test(test_gen_model),
        cmocka_unit_test(test_gen_vocab),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
