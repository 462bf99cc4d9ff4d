/*
 * test_index_lora: the adapter files a host serves, as its prefix index
 * record says them (src/index/kvs_index_lora.c: the set;
 * kvs_index_schema.c: the record's "lora" field and
 * kvs_index_host_serves), and the namespace fields of an adapter's
 * blocks.
 *
 * The set's promise is checked over many files: no file added is ever
 * denied, and with 64 files few others are admitted.  Records are
 * written by hand as docs/prefix-index.md describes them.
 */

#include "kvs_test.h"
#include "kvs_test_index.h"

#include "index/kvs_index_lora.h"
#include "index/kvs_index_schema.h"


/* splitmix64: file epochs for the tests, as xxh3 would spread them */
static uint64_t
next_epoch(uint64_t *s)
{
    uint64_t  z;

    z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;

    return z ^ (z >> 31);
}


static void
test_set(void **state)
{
    int                   i, k, fp;
    uint64_t              s, files[64];
    kvs_index_lora_set_t  set;

    (void) state;

    memset(&set, 0, sizeof(set));
    assert_false(kvs_index_lora_set_has(&set, 0));
    assert_false(kvs_index_lora_set_has(&set, 0x5b17a0de8b91ee90ull));

    /* one file: itself, and neighbours of its low bits are not */
    kvs_index_lora_set_add(&set, 0x5b17a0de8b91ee90ull);
    assert_true(kvs_index_lora_set_has(&set, 0x5b17a0de8b91ee90ull));
    for (i = 1; i < 256; i++) {
        assert_false(kvs_index_lora_set_has(&set,
                                            0x5b17a0de8b91ee90ull ^ i));
    }

    /* 64 files: every one of them admitted; of 100000 others, under 5%
     * (the filter's 3.1% with 3 bits of 512) */
    s = 25;
    for (k = 0; k < 20; k++) {
        memset(&set, 0, sizeof(set));

        for (i = 0; i < 64; i++) {
            files[i] = next_epoch(&s);
            kvs_index_lora_set_add(&set, files[i]);
        }

        for (i = 0; i < 64; i++) {
            assert_true(kvs_index_lora_set_has(&set, files[i]));
        }
    }

    fp = 0;
    for (i = 0; i < 100000; i++) {
        fp += kvs_index_lora_set_has(&set, next_epoch(&s));
    }

    print_message("    64 files: %d of 100000 others admitted\n", fp);
    assert_true(fp < 5000);
    assert_true(fp > 0);

    /* 4 files: next to none */
    memset(&set, 0, sizeof(set));
    for (i = 0; i < 4; i++) {
        kvs_index_lora_set_add(&set, next_epoch(&s));
    }

    fp = 0;
    for (i = 0; i < 100000; i++) {
        fp += kvs_index_lora_set_has(&set, next_epoch(&s));
    }

    print_message("    4 files: %d of 100000 others admitted\n", fp);
    assert_true(fp < 100);
}


static void
host(kvs_index_host_t *h)
{
    memset(h, 0, sizeof(*h));
    strcpy(h->id, "h1");
    strcpy(h->url, "http://127.0.0.1:8080");
    strcpy(h->model, "base");
    h->incarnation = 0xbeef;
    h->epoch = 7;
    h->block_tokens = 16;
    h->ts_ms = 1;
}


static void
test_record(void **state)
{
    char                 out[KVS_INDEX_HOST_VALUE_MAX + 1], *p;
    size_t               len;
    uint64_t             a, b;
    kvs_err_t            err;
    kvs_index_host_t     h, got;
    kvs_index_reply_t    r;
    kvs_index_reject_t   why;

    (void) state;

    a = 0x5b17a0de8b91ee90ull;
    b = 0x0123456789abcdefull;

    /* a host that does not say: no field, and it serves any file */
    host(&h);
    assert_int_equal(kvs_index_host_format(&h, out, &len, &err), KVS_OK);
    assert_null(strstr(out, "lora="));
    r = kvs_test_str_reply(out);
    assert_int_equal(kvs_index_host_parse(&r, "h1", 2, &got, &why, &err),
                     KVS_OK);
    assert_false(got.has_loras);
    assert_true(kvs_index_host_serves(&got, a));

    /* no adapters: "lora=0", and it serves none */
    h.has_loras = 1;
    assert_int_equal(kvs_index_host_format(&h, out, &len, &err), KVS_OK);
    assert_non_null(strstr(out, " lora=0"));
    assert_int_equal(strlen(strstr(out, " lora=")), 7);
    assert_int_equal(len, strlen(out));
    r = kvs_test_str_reply(out);
    assert_int_equal(kvs_index_host_parse(&r, "h1", 2, &got, &why, &err),
                     KVS_OK);
    assert_true(got.has_loras);
    assert_false(kvs_index_host_serves(&got, a));
    assert_memory_equal(&h, &got, sizeof(h));

    /* file a: 128 lowercase hex digits; a served, b not */
    kvs_index_lora_set_add(&h.loras, a);
    assert_int_equal(kvs_index_host_format(&h, out, &len, &err), KVS_OK);
    p = strstr(out, " lora=");
    assert_non_null(p);
    assert_int_equal(strlen(p), 6 + KVS_INDEX_LORA_SET_HEX);
    assert_int_equal(strspn(p + 6, "0123456789abcdef"),
                     KVS_INDEX_LORA_SET_HEX);
    r = kvs_test_str_reply(out);
    assert_int_equal(kvs_index_host_parse(&r, "h1", 2, &got, &why, &err),
                     KVS_OK);
    assert_memory_equal(&h, &got, sizeof(h));
    assert_true(kvs_index_host_serves(&got, a));
    assert_false(kvs_index_host_serves(&got, b));

    /* a value of another length, an uppercase digit, twice: malformed */
    len = strlen(out);
    out[len - 1] = '\0';
    r = kvs_test_str_reply(out);
    assert_int_equal(kvs_index_host_parse(&r, "h1", 2, &got, &why, &err),
                     KVS_EFORMAT);
    assert_int_equal(why, KVS_INDEX_REJECT_MALFORMED);

    assert_int_equal(kvs_index_host_format(&h, out, &len, &err), KVS_OK);
    p = strstr(out, " lora=") + 6;
    p[0] = 'A';
    r = kvs_test_str_reply(out);
    assert_int_equal(kvs_index_host_parse(&r, "h1", 2, &got, &why, &err),
                     KVS_EFORMAT);

    r = kvs_test_str_reply("kvs1 id=h1 inc=000000000000beef "
                           "epoch=0000000000000007 bt=16 run=0 wait=0 "
                           "free=0 ts=1 model=m url=u lora=00");
    assert_int_equal(kvs_index_host_parse(&r, "h1", 2, &got, &why, &err),
                     KVS_EFORMAT);
    r = kvs_test_str_reply("kvs1 id=h1 inc=000000000000beef "
                           "epoch=0000000000000007 bt=16 run=0 wait=0 "
                           "free=0 ts=1 model=m url=u lora=");
    assert_int_equal(kvs_index_host_parse(&r, "h1", 2, &got, &why, &err),
                     KVS_EFORMAT);
    r = kvs_test_str_reply("kvs1 id=h1 inc=000000000000beef "
                           "epoch=0000000000000007 bt=16 run=0 wait=0 "
                           "free=0 ts=1 model=m url=u lora=0 lora=0");
    assert_int_equal(kvs_index_host_parse(&r, "h1", 2, &got, &why, &err),
                     KVS_EFORMAT);
    assert_int_equal(why, KVS_INDEX_REJECT_MALFORMED);
}


/* Every field at its longest, the set full: still within the record's
 * bound, and read back whole. */
static void
test_record_longest(void **state)
{
    char                 out[KVS_INDEX_HOST_VALUE_MAX + 1];
    size_t               len, i;
    kvs_err_t            err;
    kvs_index_host_t     h, got;
    kvs_index_reply_t    r;
    kvs_index_reject_t   why;

    (void) state;

    memset(&h, 0, sizeof(h));
    memset(h.id, 'i', KVS_INDEX_HOST_ID_MAX);
    memset(h.model, 'm', KVS_INDEX_MODEL_MAX);
    memset(h.url, 'u', KVS_INDEX_URL_MAX);
    h.incarnation = UINT64_MAX;
    h.epoch = UINT64_MAX;
    h.block_tokens = KVS_INDEX_BLOCK_TOKENS_MAX;
    h.running = UINT32_MAX;
    h.waiting = UINT32_MAX;
    h.free_blocks = UINT32_MAX;
    h.ts_ms = UINT64_MAX;
    h.long_min = UINT32_MAX;
    h.long_room = UINT32_MAX;
    h.long_slots = UINT32_MAX;
    h.tier_weight = KVS_INDEX_TIER_WEIGHT_ONE;
    h.host_weight = KVS_INDEX_TIER_WEIGHT_ONE;
    h.has_loras = 1;
    for (i = 0; i < KVS_INDEX_LORA_SET_WORDS; i++) {
        h.loras.w[i] = UINT64_MAX;
    }

    assert_int_equal(kvs_index_host_format(&h, out, &len, &err), KVS_OK);
    print_message("    the longest record: %zu bytes\n", len);
    assert_true(len <= KVS_INDEX_HOST_VALUE_MAX);
    assert_int_equal(len, strlen(out));

    r = kvs_test_str_reply(out);
    assert_int_equal(kvs_index_host_parse(&r, h.id, KVS_INDEX_HOST_ID_MAX,
                                          &got, &why, &err), KVS_OK);
    assert_memory_equal(&h, &got, sizeof(h));
}


/* The namespace of an adapter's blocks: a function of both epochs,
 * never the base's own, and the field the file's 16 hex digits. */
static void
test_names(void **state)
{
    char      field[KVS_INDEX_LORA_FIELD_LEN + 1];
    uint64_t  s, base, f;
    int       i;

    (void) state;

    kvs_index_lora_field(0x5b17a0de8b91ee90ull, field);
    assert_string_equal(field, "5b17a0de8b91ee90");
    kvs_index_lora_field(1, field);
    assert_string_equal(field, "0000000000000001");

    s = 7;
    for (i = 0; i < 1000; i++) {
        base = next_epoch(&s);
        f = next_epoch(&s);
        assert_true(kvs_index_lora_epoch(base, f) != base);
        assert_true(kvs_index_lora_epoch(base, f)
                    != kvs_index_lora_epoch(base, f ^ 1));
        assert_true(kvs_index_lora_epoch(base, f)
                    == kvs_index_lora_epoch(base, f));
    }
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set),
        cmocka_unit_test(test_record),
        cmocka_unit_test(test_record_longest),
        cmocka_unit_test(test_names),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
