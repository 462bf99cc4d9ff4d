/*
 * test_api: request routing, the /v1/models and error JSON bodies (parsed
 * back with jansson and checked field by field), strict UTF-8, and the
 * error-message helpers.
 */

#include <jansson.h>

#include "kvs_test.h"

#include "api/kvs_api.h"
#include "base/kvs_utf8.h"


static void
route(const char *path, kvs_route_kind_t kind, const char *id)
{
    kvs_route_t  r;

    kvs_api_route(path, strlen(path), &r);

    if (r.kind != kind) {
        fail_msg("%s: kind %d, want %d", path, r.kind, kind);
    }

    if (id != NULL
        && (r.id_len != strlen(id) || memcmp(r.id, id, r.id_len) != 0))
    {
        fail_msg("%s: id '%.*s', want '%s'", path, (int) r.id_len, r.id, id);
    }
}


static void
test_route(void **state)
{
    route("/v1/models", KVS_ROUTE_MODELS, NULL);
    route("/v1/models/", KVS_ROUTE_MODELS, NULL);
    route("/api/v1/models", KVS_ROUTE_MODELS, NULL);
    route("/v1/models/tiny", KVS_ROUTE_MODEL, "tiny");
    route("/v1/models/org/name:v2", KVS_ROUTE_MODEL, "org/name:v2");
    route("/v1/models/v1/models", KVS_ROUTE_MODEL, "v1/models");
    route("/v1/modelsx", KVS_ROUTE_UNKNOWN, NULL);
    route("/v1/model", KVS_ROUTE_UNKNOWN, NULL);
    route("/v2/models", KVS_ROUTE_UNKNOWN, NULL);
    route("/v1", KVS_ROUTE_UNKNOWN, NULL);
    route("", KVS_ROUTE_UNKNOWN, NULL);
    route("/v1/chat/completions", KVS_ROUTE_UNKNOWN, NULL);
}


static json_t *
parse(kvs_buf_t *b)
{
    json_t        *j;
    json_error_t   e;

    j = json_loadb((const char *) b->data, b->len, JSON_ALLOW_NUL, &e);
    if (j == NULL) {
        fail_msg("invalid JSON (%s): %.*s", e.text, (int) b->len, b->data);
    }

    return j;
}


static void
test_models_json(void **state)
{
    json_t           *j, *d, *k;
    kvs_buf_t         b;
    kvs_err_t         err;
    kvs_hparams_t     hp;
    kvs_api_model_t   m[2];

    memset(&hp, 0, sizeof(hp));
    strcpy(hp.arch, "llama");
    hp.n_layer = 80;
    hp.n_head = 64;
    hp.n_head_kv = 8;
    hp.head_dim_k = 128;
    hp.head_dim_v = 128;
    hp.n_embd = 8192;
    hp.n_ctx_train = 131072;
    hp.n_vocab = 128256;
    hp.n_params = 70553706496ULL;

    memset(m, 0, sizeof(m));
    m[0].id = "llama-3-70b";
    m[0].id_len = strlen(m[0].id);
    m[0].created = 1700000000;
    m[0].file_size = 141107412992ULL;
    m[0].hp = &hp;
    /* what the caller's cache holds is reported, not derived here */
    m[0].kv_bytes_per_token = kvs_hparams_kv_bytes_per_token(&hp, 4);
    m[0].kv_dtype = "f32";
    m[1] = m[0];
    m[1].id = "second";
    m[1].id_len = 6;

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_api_models_json(m, 2, &b, &err), KVS_OK);
    j = parse(&b);

    assert_string_equal(json_string_value(json_object_get(j, "object")),
                        "list");
    d = json_object_get(j, "data");
    assert_int_equal(json_array_size(d), 2);
    assert_string_equal(json_string_value(json_object_get(
        json_array_get(d, 1), "id")), "second");

    d = json_array_get(d, 0);
    assert_string_equal(json_string_value(json_object_get(d, "id")),
                        "llama-3-70b");
    assert_string_equal(json_string_value(json_object_get(d, "object")),
                        "model");
    assert_int_equal(json_integer_value(json_object_get(d, "created")),
                     1700000000);
    assert_string_equal(json_string_value(json_object_get(d, "owned_by")),
                        "kvserve");

    k = json_object_get(d, "kvserve");
    assert_int_equal(json_integer_value(json_object_get(k, "context_length")),
                     131072);
    assert_true(json_integer_value(json_object_get(k, "parameters"))
                == 70553706496LL);
    /* DESIGN.md: Llama-3-70B in bf16 holds 327,680 bytes per token; an
     * f32 cache twice that, and the answer says what the cache holds
     * (the model's f16 size was once reported for an f32 cache) */
    assert_int_equal(json_integer_value(json_object_get(k,
                         "kv_bytes_per_token")), 2 * 327680);
    assert_string_equal(json_string_value(json_object_get(k, "kv_dtype")),
                        "f32");
    assert_true(json_integer_value(json_object_get(k, "file_bytes"))
                == 141107412992LL);
    /* no backend known (no engine answered yet): no weights object */
    assert_null(json_object_get(k, "weights"));

    json_decref(j);
    kvs_buf_free(&b);

    /* a backend's figures, above 2^32, as they came */
    m[1].kv_dtype = "bf16";
    m[1].kv_bytes_per_token = kvs_hparams_kv_bytes_per_token(&hp, 2);
    m[1].backend = "cuda";
    m[1].weights_mapped = 0;
    m[1].weights_owned = 7;
    m[1].weights_device = 141107412992ULL + 256;

    assert_int_equal(kvs_api_model_json(&m[1], &b, &err), KVS_OK);
    j = parse(&b);
    assert_string_equal(json_string_value(json_object_get(j, "id")),
                        "second");
    k = json_object_get(j, "kvserve");
    assert_string_equal(json_string_value(json_object_get(k, "kv_dtype")),
                        "bf16");
    assert_int_equal(json_integer_value(json_object_get(k,
                         "kv_bytes_per_token")), 327680);
    d = json_object_get(k, "weights");
    assert_non_null(d);
    assert_string_equal(json_string_value(json_object_get(d, "backend")),
                        "cuda");
    assert_int_equal(json_integer_value(json_object_get(d, "mapped_bytes")),
                     0);
    assert_int_equal(json_integer_value(json_object_get(d, "owned_bytes")),
                     7);
    assert_true(json_integer_value(json_object_get(d, "device_bytes"))
                == 141107412992LL + 256);
    json_decref(j);
    kvs_buf_free(&b);
}


static void
test_error_json(void **state)
{
    json_t     *j, *e;
    kvs_buf_t   b;

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_api_error_json(&b, "bad \"x\"\n",
                                        "invalid_request_error", "messages",
                                        NULL), KVS_OK);
    j = parse(&b);
    e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "message")),
                        "bad \"x\"\n");
    assert_string_equal(json_string_value(json_object_get(e, "param")),
                        "messages");
    assert_true(json_is_null(json_object_get(e, "code")));
    assert_int_equal(json_object_size(e), 4);
    json_decref(j);
    kvs_buf_free(&b);

    /* ids with NUL and invalid UTF-8 bytes still give valid JSON */
    assert_int_equal(kvs_api_model_not_found_json(&b, "a\0b\xff\xc3", 5),
                     KVS_OK);
    j = parse(&b);
    e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "code")),
                        "model_not_found");
    assert_true(json_is_null(json_object_get(e, "param")));
    assert_int_equal(json_string_length(json_object_get(e, "message")),
                     strlen("The model `") + 1 + 1 + 1 + 3 + 3
                     + strlen("` does not exist or you do not have access "
                              "to it."));
    json_decref(j);
    kvs_buf_free(&b);
}


static void
test_utf8(void **state)
{
    uint32_t  cp;

    assert_int_equal(kvs_utf8_next((const uint8_t *) "A", 1, &cp), 1);
    assert_int_equal(cp, 'A');
    assert_int_equal(kvs_utf8_next((const uint8_t *) "\xc3\xa9", 2, &cp), 2);
    assert_int_equal(cp, 0xe9);
    assert_int_equal(kvs_utf8_next((const uint8_t *) "\xf0\x9f\xa6\x99", 4,
                                   &cp), 4);
    assert_int_equal(cp, 0x1f999);

    /* overlong, surrogate, above U+10FFFF, truncated, stray continuation */
    assert_int_equal(kvs_utf8_next((const uint8_t *) "\xc0\xaf", 2, &cp), 0);
    assert_int_equal(kvs_utf8_next((const uint8_t *) "\xe0\x80\xaf", 3, &cp),
                     0);
    assert_int_equal(kvs_utf8_next((const uint8_t *) "\xed\xa0\x80", 3, &cp),
                     0);
    assert_int_equal(kvs_utf8_next((const uint8_t *) "\xf4\x90\x80\x80", 4,
                                   &cp), 0);
    assert_int_equal(kvs_utf8_next((const uint8_t *) "\xe2\x82", 2, &cp), 0);
    assert_int_equal(kvs_utf8_next((const uint8_t *) "\x80", 1, &cp), 0);

    assert_true(kvs_utf8_valid((const uint8_t *) "h\xc3\xa9llo", 6));
    assert_false(kvs_utf8_valid((const uint8_t *) "h\xc3llo", 5));
}


static void
test_err(void **state)
{
    kvs_err_t  err;
    char       big[400];

    assert_int_equal(kvs_err_set(&err, KVS_EFORMAT, "bad %s at %d", "x", 3),
                     KVS_EFORMAT);
    assert_string_equal(err.msg, "bad x at 3");
    assert_int_equal(kvs_err_prefix(&err, "\"%s\"", "f.gguf"), KVS_EFORMAT);
    assert_string_equal(err.msg, "\"f.gguf\": bad x at 3");

    memset(big, 'y', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    kvs_err_set(&err, KVS_EIO, "%s", big);
    assert_int_equal(strlen(err.msg), KVS_ERR_MSG_LEN - 1);
    kvs_err_prefix(&err, "p");
    assert_int_equal(strlen(err.msg), KVS_ERR_MSG_LEN - 1);
    assert_memory_equal(err.msg, "p: yyy", 6);

    assert_int_equal(kvs_err_set(NULL, KVS_EIO, "ignored"), KVS_EIO);
    assert_string_equal(kvs_err_name(KVS_ENOTFOUND), "notfound");
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_route),
        cmocka_unit_test(test_models_json),
        cmocka_unit_test(test_error_json),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_err),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
