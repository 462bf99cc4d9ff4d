/*
 * test_api_models: the availability fields of a /v1/models entry
 * (kvs_api_model_t's has_availability): absent when not asked for,
 * "available": true with a null reason, "available": false with the
 * reason as a JSON string (quotes escaped, invalid UTF-8 replaced), and
 * the weights object still after them.  Parsed back with jansson.
 */

#include <jansson.h>

#include "kvs_test.h"

#include "api/kvs_api.h"


static json_t *
model_kvserve(const kvs_api_model_t *m, json_t **root)
{
    kvs_buf_t     b;
    kvs_err_t     err;
    json_error_t  e;

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_api_model_json(m, &b, &err), KVS_OK);

    *root = json_loadb((const char *) b.data, b.len, 0, &e);
    if (*root == NULL) {
        fail_msg("invalid JSON (%s): %.*s", e.text, (int) b.len, b.data);
    }

    kvs_buf_free(&b);

    return json_object_get(*root, "kvserve");
}


static void
test_availability(void **state)
{
    json_t           *j, *k, *v;
    kvs_hparams_t     hp;
    kvs_api_model_t   m;
    static const char why[] = "engine for model \"b\" (pid 42) exited; "
                              "restarting";

    memset(&hp, 0, sizeof(hp));
    strcpy(hp.arch, "llama");
    hp.n_layer = 2;
    hp.n_ctx_train = 512;

    memset(&m, 0, sizeof(m));
    m.id = "b";
    m.id_len = 1;
    m.hp = &hp;
    m.kv_dtype = "f32";

    /* not asked for: neither field */
    k = model_kvserve(&m, &j);
    assert_null(json_object_get(k, "available"));
    assert_null(json_object_get(k, "unavailable_reason"));
    json_decref(j);

    /* unavailable: false and the reason, quotes and all */
    m.has_availability = 1;
    m.available = 0;
    m.reason = why;
    m.reason_len = sizeof(why) - 1;

    k = model_kvserve(&m, &j);
    v = json_object_get(k, "available");
    assert_true(json_is_false(v));
    assert_string_equal(json_string_value(json_object_get(k,
                            "unavailable_reason")), why);
    json_decref(j);

    /* only reason_len bytes are the reason */
    m.reason_len = 20;
    k = model_kvserve(&m, &j);
    assert_string_equal(json_string_value(json_object_get(k,
                            "unavailable_reason")), "engine for model \"b\"");
    json_decref(j);

    /* bytes that are not UTF-8 become U+FFFD, the JSON stays valid */
    m.reason = "bad \xff byte";
    m.reason_len = 10;
    k = model_kvserve(&m, &j);
    assert_string_equal(json_string_value(json_object_get(k,
                            "unavailable_reason")), "bad \xef\xbf\xbd byte");
    json_decref(j);

    /* available: true, a null reason whatever reason holds, and the
     * engine's weights after them */
    m.available = 1;
    m.backend = "cpu";
    m.weights_mapped = 656640;

    k = model_kvserve(&m, &j);
    assert_true(json_is_true(json_object_get(k, "available")));
    v = json_object_get(k, "unavailable_reason");
    assert_non_null(v);
    assert_true(json_is_null(v));
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(k, "weights"), "mapped_bytes")),
                     656640);
    json_decref(j);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_availability),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
