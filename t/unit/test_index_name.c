/*
 * test_index_name: block-chain names of the prefix index
 * (src/index/kvs_index_name.c).
 *
 * The fixed vectors below were computed independently of this code, in
 * Python with the PyPI package xxhash 3.x (xxhash.xxh3_128(data,
 * seed=0x6b76736964783031).digest()), from the serialization documented
 * in docs/prefix-index.md ("Reference implementation" there is the
 * script that printed them): a root from "kvsn", u32le(1) and the
 * length-prefixed fields, then each block from its parent's 16 canonical
 * bytes, u32le(block_tokens) and the tokens as u32le.  If one of them
 * fails, the wire format changed: every host and gateway would disagree.
 */

#include "kvs_test.h"

#include "index/kvs_index_name.h"


static void
root_of(const char *model, uint64_t epoch, const char *adapter,
    const char *scope, kvs_index_name_t *root)
{
    kvs_err_t       err;
    kvs_index_ns_t  ns;

    ns.model = model;
    ns.model_len = strlen(model);
    ns.epoch = epoch;
    ns.adapter = adapter;
    ns.adapter_len = strlen(adapter);
    ns.scope = scope;
    ns.scope_len = strlen(scope);

    assert_int_equal(kvs_index_name_root(&ns, root, &err), KVS_OK);
}


static void
assert_name(const kvs_index_name_t *name, const char *want)
{
    char  hex[KVS_INDEX_NAME_HEX_LEN + 1];

    kvs_index_name_hex(name, hex);
    assert_string_equal(hex, want);
}


static void
test_seed_is_ascii(void **state)
{
    uint64_t  s;
    size_t    i;

    (void) state;

    /* the documented seed is "kvsidx01" read big-endian */
    s = 0;
    for (i = 0; i < 8; i++) {
        s = s << 8 | (uint8_t) "kvsidx01"[i];
    }

    assert_true(s == KVS_INDEX_NAME_SEED);
}


static void
test_vector_a(void **state)
{
    size_t            i, n;
    int32_t           tokens[50];
    kvs_err_t         err;
    kvs_index_name_t  root, names[4];

    (void) state;

    root_of("stories260K", 0x0123456789abcdefULL, "", "", &root);
    assert_name(&root, "a9689ed0fc1a128276a46e8bc735bb09");

    for (i = 0; i < 50; i++) {
        tokens[i] = (int32_t) (i * 7 + 1);
    }

    assert_int_equal(kvs_index_name_chain(&root, tokens, 50, 16, names, 4,
                                          &n, &err), KVS_OK);
    assert_int_equal(n, 3);                 /* 2 tail tokens: no name */
    assert_name(&names[0], "61da174a1a9d3d638e05c40b811596ea");
    assert_name(&names[1], "a62c74ed234c694265a3ae4e1917db01");
    assert_name(&names[2], "ac2aac18a8b071242c69e72c31fd0991");
}


static void
test_vector_b(void **state)
{
    size_t            n;
    kvs_err_t         err;
    kvs_index_name_t  root, names[1];

    static const int32_t  tokens[] = { -1, 0x7fffffff, INT32_MIN, 5, 9, 10 };

    (void) state;

    root_of("llama-3-8b", UINT64_MAX, "sql-lora",
            "0f1e2d3c4b5a69788796a5b4c3d2e1f0", &root);
    assert_name(&root, "85c75bdb1cbb8cebc5584ab30c75fbeb");

    assert_int_equal(kvs_index_name_chain(&root, tokens, 6, 4, names, 1, &n,
                                          &err), KVS_OK);
    assert_int_equal(n, 1);
    assert_name(&names[0], "cfa3103fb35e8b7c96861e23dd779257");
}


static void
test_vector_c(void **state)
{
    size_t            n;
    int32_t           zero;
    kvs_err_t         err;
    kvs_index_name_t  root, name;

    (void) state;

    root_of("", 0, "", "", &root);
    assert_name(&root, "b23953cfe89e68e088d031404cf29cc4");

    zero = 0;
    assert_int_equal(kvs_index_name_chain(&root, &zero, 1, 1, &name, 1, &n,
                                          &err), KVS_OK);
    assert_int_equal(n, 1);
    assert_name(&name, "05cd1c9cd55cf5ba550a50ec19391a48");
}


static void
test_vector_d_long(void **state)
{
    size_t             i, n;
    int32_t           *tokens;
    kvs_err_t          err;
    kvs_index_name_t   root, *names, again;

    (void) state;

    tokens = malloc(2000 * sizeof(int32_t));
    names = malloc(125 * sizeof(kvs_index_name_t));
    assert_non_null(tokens);
    assert_non_null(names);

    for (i = 0; i < 2000; i++) {
        tokens[i] = (int32_t) ((i * 2654435761ULL) % 32000);
    }

    root_of("stories260K", 0x0123456789abcdefULL, "", "", &root);

    /* one short of room: refused, nothing written */
    n = 7;
    assert_int_equal(kvs_index_name_chain(&root, tokens, 2000, 16, names,
                                          124, &n, &err), KVS_ERANGE);
    assert_int_equal(n, 0);

    assert_int_equal(kvs_index_name_chain(&root, tokens, 2000, 16, names,
                                          125, &n, &err), KVS_OK);
    assert_int_equal(n, 125);
    assert_name(&names[0], "2af61cc8df439d008268910c860364ff");
    assert_name(&names[124], "3f9f87533d9cd0870b778f2b8199df64");

    /* a chain continues from any named block: the next turn of a
     * conversation names only its new blocks */
    kvs_index_name_next(&names[122], tokens + 123 * 16, 16, &again);
    assert_memory_equal(again.b, names[123].b, KVS_INDEX_NAME_LEN);

    free(tokens);
    free(names);
}


static void
test_namespace_separates(void **state)
{
    size_t            i, n;
    int32_t           tokens[16];
    kvs_err_t         err;
    kvs_index_name_t  r[6], names[6];

    (void) state;

    for (i = 0; i < 16; i++) {
        tokens[i] = (int32_t) i;
    }

    root_of("m", 1, "", "", &r[0]);
    root_of("m", 2, "", "", &r[1]);         /* other weights */
    root_of("m", 1, "a", "", &r[2]);        /* an adapter */
    root_of("m", 1, "", "s", &r[3]);        /* a scope */
    root_of("n", 1, "", "", &r[4]);         /* another model */
    root_of("", 1, "m", "", &r[5]);         /* lengths keep fields apart */

    for (i = 0; i < 6; i++) {
        assert_int_equal(kvs_index_name_chain(&r[i], tokens, 16, 16,
                                              &names[i], 1, &n, &err),
                         KVS_OK);
    }

    for (i = 1; i < 6; i++) {
        assert_memory_not_equal(r[0].b, r[i].b, KVS_INDEX_NAME_LEN);
        assert_memory_not_equal(names[0].b, names[i].b, KVS_INDEX_NAME_LEN);
    }

    /* the block size is hashed: 16 tokens as one block or two halves
     * never share a name */
    assert_int_equal(kvs_index_name_chain(&r[0], tokens, 16, 8, names, 2,
                                          &n, &err), KVS_OK);
    assert_memory_not_equal(names[1].b, names[0].b, KVS_INDEX_NAME_LEN);
}


static void
test_bad_arguments(void **state)
{
    char              big[KVS_INDEX_NS_FIELD_MAX + 2];
    size_t            n;
    int32_t           t;
    kvs_err_t         err;
    kvs_index_ns_t    ns;
    kvs_index_name_t  root, name;

    (void) state;

    memset(big, 'x', sizeof(big));
    memset(&ns, 0, sizeof(ns));
    ns.model = big;
    ns.model_len = KVS_INDEX_NS_FIELD_MAX;
    assert_int_equal(kvs_index_name_root(&ns, &root, &err), KVS_OK);

    ns.model_len = KVS_INDEX_NS_FIELD_MAX + 1;
    assert_int_equal(kvs_index_name_root(&ns, &root, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "more than 256"));

    ns.model_len = 0;
    ns.scope = big;
    ns.scope_len = sizeof(big);
    assert_int_equal(kvs_index_name_root(&ns, &root, &err), KVS_EINVAL);

    t = 1;
    assert_int_equal(kvs_index_name_chain(&root, &t, 1, 0, &name, 1, &n,
                                          &err), KVS_EINVAL);
    assert_int_equal(kvs_index_name_chain(&root, &t, 1,
                                          KVS_INDEX_BLOCK_TOKENS_MAX + 1,
                                          &name, 1, &n, &err), KVS_EINVAL);

    /* fewer tokens than a block: no names, no room needed */
    assert_int_equal(kvs_index_name_chain(&root, &t, 1, 16, NULL, 0, &n,
                                          &err), KVS_OK);
    assert_int_equal(n, 0);
}


static void
test_hex_round_trip(void **state)
{
    char              hex[KVS_INDEX_NAME_HEX_LEN + 1];
    size_t            i;
    kvs_err_t         err;
    kvs_index_name_t  a, b;

    static const char  upper[] = "031425364758697A8B9CADBECFE0F102";
    static const char  bad[] = "031425364758697a8b9cadbecfe0f10g";

    (void) state;

    for (i = 0; i < KVS_INDEX_NAME_LEN; i++) {
        a.b[i] = (uint8_t) (i * 17 + 3);
    }

    kvs_index_name_hex(&a, hex);
    assert_string_equal(hex, "031425364758697a8b9cadbecfe0f102");

    assert_int_equal(kvs_index_name_from_hex(hex, 32, &b, &err), KVS_OK);
    assert_memory_equal(a.b, b.b, KVS_INDEX_NAME_LEN);

    assert_int_equal(kvs_index_name_from_hex(upper, 32, &b, &err), KVS_OK);
    assert_memory_equal(a.b, b.b, KVS_INDEX_NAME_LEN);

    assert_int_equal(kvs_index_name_from_hex(hex, 31, &b, &err),
                     KVS_EFORMAT);
    assert_int_equal(kvs_index_name_from_hex(bad, 32, &b, &err),
                     KVS_EFORMAT);
    assert_non_null(strstr(err.msg, "at 31"));
    assert_memory_equal(a.b, b.b, KVS_INDEX_NAME_LEN);  /* unchanged */
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_seed_is_ascii),
        cmocka_unit_test(test_vector_a),
        cmocka_unit_test(test_vector_b),
        cmocka_unit_test(test_vector_c),
        cmocka_unit_test(test_vector_d_long),
        cmocka_unit_test(test_namespace_separates),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_hex_round_trip),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
