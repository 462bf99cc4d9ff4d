/*
 * test_index_schema: the prefix index's Redis key schema, command
 * batches and the checks on what is read back
 * (src/index/kvs_index_schema.c, kvs_index_cmd.c).
 *
 * Expected keys, argv arrays and record strings are written by hand from
 * the schema in docs/prefix-index.md; replies are built by hand as Redis
 * would send them, and as a broken or hostile server might.
 */

#include "kvs_test.h"
#include "kvs_test_index.h"

#include "index/kvs_index_schema.h"

#define CMDS_DECL(name, bytes, args, cmds)                                   \
    char               name##_buf[bytes];                                    \
    const char        *name##_argv[args];                                    \
    size_t             name##_argvlen[args];                                 \
    size_t             name##_first[cmds];                                   \
    kvs_index_cmds_t   name

#define CMDS_INIT(name)                                                      \
    kvs_index_cmds_init(&name, name##_buf, sizeof(name##_buf),               \
                        name##_argv, name##_argvlen,                         \
                        sizeof(name##_argv) / sizeof(name##_argv[0]),        \
                        name##_first,                                        \
                        sizeof(name##_first) / sizeof(name##_first[0]))

static const char  name_hex[] = "00112233445566778899aabbccddeeff";


/* Command i of c is exactly the words of want, separated by '|'. */
#define assert_cmd  kvs_test_assert_cmd


static void
sample_host(kvs_index_host_t *h)
{
    memset(h, 0, sizeof(*h));
    strcpy(h->id, "gpu-a.1");
    strcpy(h->url, "http://10.0.0.7:8080");
    strcpy(h->model, "llama-3-8b");
    h->incarnation = 0x00000000deadbeefULL;
    h->epoch = 0x0123456789abcdefULL;
    h->block_tokens = 16;
    h->running = 3;
    h->waiting = 0;
    h->free_blocks = 4096;
    h->ts_ms = 1700000000123ULL;
}

static const char  sample_value[] =
    "kvs1 id=gpu-a.1 inc=00000000deadbeef epoch=0123456789abcdef bt=16 "
    "run=3 wait=0 free=4096 ts=1700000000123 model=llama-3-8b "
    "url=http://10.0.0.7:8080";


static void
test_commands(void **state)
{
    kvs_err_t         err;
    kvs_index_host_t  h;
    kvs_index_name_t  name;
    CMDS_DECL(c, 4096, 64, 16);

    (void) state;

    CMDS_INIT(c);
    sample_host(&h);
    assert_int_equal(kvs_index_name_from_hex(name_hex, 32, &name, &err),
                     KVS_OK);

    assert_int_equal(kvs_index_cmd_host_set(&c, &h, 3000, &err), KVS_OK);
    assert_int_equal(kvs_index_cmd_host_get(&c, "gpu-a.1", 7, &err), KVS_OK);
    assert_int_equal(kvs_index_cmd_host_del(&c, "gpu-a.1", 7, &err), KVS_OK);
    assert_int_equal(kvs_index_cmd_hosts_add(&c, "gpu-a.1", 7,
                                             1700000000123ULL, &err),
                     KVS_OK);
    assert_int_equal(kvs_index_cmd_hosts_trim(&c, 1699999940000ULL, &err),
                     KVS_OK);
    assert_int_equal(kvs_index_cmd_hosts_list(&c, 1699999997000ULL, &err),
                     KVS_OK);
    assert_int_equal(kvs_index_cmd_blk_add(&c, &name, "gpu-a.1", 7,
                                           0xdeadbeef, 3600000, &err),
                     KVS_OK);
    assert_int_equal(kvs_index_cmd_blk_touch(&c, &name, 3600000, &err),
                     KVS_OK);
    assert_int_equal(kvs_index_cmd_blk_del(&c, &name, "gpu-a.1", 7, &err),
                     KVS_OK);
    assert_int_equal(kvs_index_cmd_blk_get(&c, &name, &err), KVS_OK);

    assert_int_equal(c.n_cmds, 11);
    assert_cmd(&c, 0, "SET|kvs:v1:host:gpu-a.1|kvs1 id=gpu-a.1 "
               "inc=00000000deadbeef epoch=0123456789abcdef bt=16 run=3 "
               "wait=0 free=4096 ts=1700000000123 model=llama-3-8b "
               "url=http://10.0.0.7:8080|PX|3000");
    assert_cmd(&c, 1, "GET|kvs:v1:host:gpu-a.1");
    assert_cmd(&c, 2, "DEL|kvs:v1:host:gpu-a.1");
    assert_cmd(&c, 3, "ZADD|kvs:v1:hosts|1700000000123|gpu-a.1");
    assert_cmd(&c, 4, "ZREMRANGEBYSCORE|kvs:v1:hosts|-inf|(1699999940000");
    assert_cmd(&c, 5, "ZRANGEBYSCORE|kvs:v1:hosts|1699999997000|+inf");
    assert_cmd(&c, 6, "HSET|kvs:v1:blk:00112233445566778899aabbccddeeff|"
               "gpu-a.1|00000000deadbeef");
    assert_cmd(&c, 7, "PEXPIRE|kvs:v1:blk:00112233445566778899aabbccddeeff|"
               "3600000");
    assert_cmd(&c, 8, "PEXPIRE|kvs:v1:blk:00112233445566778899aabbccddeeff|"
               "3600000");
    assert_cmd(&c, 9, "HDEL|kvs:v1:blk:00112233445566778899aabbccddeeff|"
               "gpu-a.1");
    assert_cmd(&c, 10, "HGETALL|kvs:v1:blk:00112233445566778899aabbccddeeff");

    kvs_index_cmds_reset(&c);
    assert_int_equal(c.n_cmds, 0);
    assert_int_equal(c.buf_len, 0);
}


static void
test_command_arguments(void **state)
{
    kvs_err_t         err;
    kvs_index_host_t  h;
    kvs_index_name_t  name;
    CMDS_DECL(c, 4096, 64, 16);

    (void) state;

    CMDS_INIT(c);
    memset(&name, 0, sizeof(name));

    /* ids go into keys and fields unquoted: only [A-Za-z0-9._-] */
    assert_int_equal(kvs_index_cmd_host_get(&c, "a b", 3, &err), KVS_EINVAL);
    assert_int_equal(kvs_index_cmd_host_get(&c, "a:b", 3, &err), KVS_EINVAL);
    assert_int_equal(kvs_index_cmd_host_get(&c, "", 0, &err), KVS_EINVAL);
    assert_int_equal(kvs_index_cmd_blk_del(&c, &name, "x\r\n", 3, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_index_host_id_check(
                         "a123456789b123456789c123456789d123456789"
                         "e123456789f123456789g1234", 65, &err), KVS_EINVAL);
    assert_int_equal(kvs_index_host_id_check(
                         "a123456789b123456789c123456789d123456789"
                         "e123456789f123456789g123", 64, &err), KVS_OK);

    /* a block entry needs an incarnation and a TTL */
    assert_int_equal(kvs_index_cmd_blk_add(&c, &name, "h", 1, 0, 1, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_index_cmd_blk_add(&c, &name, "h", 1, 1, 0, &err),
                     KVS_EINVAL);

    /* a record that could not be read back is never written */
    sample_host(&h);
    strcpy(h.url, "http://x/a b");
    assert_int_equal(kvs_index_cmd_host_set(&c, &h, 1000, &err),
                     KVS_EINVAL);
    sample_host(&h);
    h.model[0] = '\0';
    assert_int_equal(kvs_index_cmd_host_set(&c, &h, 1000, &err),
                     KVS_EINVAL);
    sample_host(&h);
    h.incarnation = 0;
    assert_int_equal(kvs_index_cmd_host_set(&c, &h, 1000, &err),
                     KVS_EINVAL);
    sample_host(&h);
    assert_int_equal(kvs_index_cmd_host_set(&c, &h, 0, &err), KVS_EINVAL);

    assert_int_equal(c.n_cmds, 0);
    assert_int_equal(c.n_args, 0);
}


static void
test_batch_capacity(void **state)
{
    size_t            i, n;
    kvs_err_t         err;
    kvs_index_name_t  name;
    CMDS_DECL(c, 120, 16, 3);
    CMDS_DECL(d, 4096, 5, 8);

    (void) state;

    memset(&name, 7, sizeof(name));

    /* bytes run out first: 2 HGETALLs take 2 * (8 + 44) = 104 bytes */
    CMDS_INIT(c);
    assert_int_equal(kvs_index_cmd_blk_get(&c, &name, &err), KVS_OK);
    assert_int_equal(kvs_index_cmd_blk_get(&c, &name, &err), KVS_OK);
    assert_int_equal(c.buf_len, 104);
    assert_int_equal(kvs_index_cmd_blk_get(&c, &name, &err), KVS_ERANGE);
    assert_non_null(strstr(err.msg, "no room for HGETALL block"));
    assert_int_equal(c.n_cmds, 2);
    assert_int_equal(c.n_args, 4);
    assert_int_equal(c.buf_len, 104);

    /* commands run out: the third fits in bytes, not in cmd_cap = 3 when
     * it takes two (HSET + PEXPIRE) */
    kvs_index_cmds_reset(&c);
    assert_int_equal(kvs_index_cmd_host_get(&c, "h", 1, &err), KVS_OK);
    assert_int_equal(kvs_index_cmd_host_get(&c, "h", 1, &err), KVS_OK);
    n = c.buf_len;
    assert_int_equal(kvs_index_cmd_blk_add(&c, &name, "h", 1, 5, 9, &err),
                     KVS_ERANGE);
    assert_int_equal(c.n_cmds, 2);
    assert_int_equal(c.n_args, 4);
    assert_int_equal(c.buf_len, n);
    assert_int_equal(kvs_index_cmd_host_get(&c, "h", 1, &err), KVS_OK);
    assert_int_equal(kvs_index_cmd_host_get(&c, "h", 1, &err), KVS_ERANGE);
    assert_cmd(&c, 2, "GET|kvs:v1:host:h");

    /* arguments run out inside the pair: neither half is kept */
    CMDS_INIT(d);
    assert_int_equal(kvs_index_cmd_blk_add(&d, &name, "h", 1, 5, 9, &err),
                     KVS_ERANGE);
    assert_int_equal(d.n_cmds, 0);
    assert_int_equal(d.n_args, 0);
    assert_int_equal(d.buf_len, 0);
    assert_int_equal(kvs_index_cmd_blk_get(&d, &name, &err), KVS_OK);

    for (i = 0; i < 2; i++) {
        assert_int_equal(kvs_index_cmd_blk_get(&d, &name, &err),
                         i == 0 ? KVS_OK : KVS_ERANGE);
    }
}


static void
test_host_round_trip(void **state)
{
    char               value[KVS_INDEX_HOST_VALUE_MAX + 1];
    size_t             len;
    kvs_err_t          err;
    kvs_index_host_t   h, got;
    kvs_index_reply_t  r;
    kvs_index_reject_t why;

    (void) state;

    sample_host(&h);
    assert_int_equal(kvs_index_host_format(&h, value, &len, &err), KVS_OK);
    assert_string_equal(value, sample_value);
    assert_int_equal(len, strlen(sample_value));

    r = kvs_test_str_reply(sample_value);
    assert_int_equal(kvs_index_host_parse(&r, "gpu-a.1", 7, &got, &why,
                                          &err), KVS_OK);
    assert_int_equal(why, KVS_INDEX_OK);
    assert_memory_equal(&h, &got, sizeof(h));

    /* the extremes of every number */
    r = kvs_test_str_reply("kvs1 id=z inc=ffffffffffffffff epoch=0000000000000000 "
                  "bt=1024 run=4294967295 wait=0 free=0 "
                  "ts=18446744073709551615 model=m url=u");
    assert_int_equal(kvs_index_host_parse(&r, "z", 1, &got, &why, &err),
                     KVS_OK);
    assert_true(got.incarnation == UINT64_MAX);
    assert_true(got.ts_ms == UINT64_MAX);
    assert_int_equal(got.running, UINT32_MAX);
    assert_int_equal(got.block_tokens, 1024);

    /* any order, and fields a later v1 may add are skipped */
    r = kvs_test_str_reply("kvs1 url=u model=m gpu=h200 ts=5 free=1 wait=2 run=3 "
                  "bt=16 epoch=0000000000000001 inc=0000000000000002 id=q "
                  "x=");
    assert_int_equal(kvs_index_host_parse(&r, "q", 1, &got, &why, &err),
                     KVS_OK);
    assert_int_equal(got.waiting, 2);
    assert_true(got.epoch == 1 && got.incarnation == 2);
}


typedef struct {
    const char          *value;
    kvs_index_reject_t   why;
    int                  rc;
} bad_record_t;


static void
test_host_rejected(void **state)
{
    size_t              i;
    kvs_err_t           err;
    kvs_index_host_t    got;
    kvs_index_reply_t   r, e[1];
    kvs_index_reject_t  why;

    static const bad_record_t  bad[] = {
        { "kvs2 id=gpu-a.1 inc=00000000deadbeef",
          KVS_INDEX_REJECT_FOREIGN, KVS_EUNSUPPORTED },
        { "kvs10", KVS_INDEX_REJECT_FOREIGN, KVS_EUNSUPPORTED },
        { "kvs1x id=a", KVS_INDEX_REJECT_MALFORMED, KVS_EFORMAT },
        { "kvs", KVS_INDEX_REJECT_MALFORMED, KVS_EFORMAT },
        { "", KVS_INDEX_REJECT_MALFORMED, KVS_EFORMAT },
        { "{\"id\":\"gpu-a.1\"}", KVS_INDEX_REJECT_MALFORMED, KVS_EFORMAT },
        { "kvs1", KVS_INDEX_REJECT_PARTIAL, KVS_EFORMAT },
        { "kvs1 id=gpu-a.1 inc=00000000deadbeef epoch=0123456789abcdef "
          "bt=16 run=3 wait=0 free=4096 ts=1700000000123 model=llama-3-8b",
          KVS_INDEX_REJECT_PARTIAL, KVS_EFORMAT },
        { "kvs1 id=gpu-a.1 id=gpu-a.1", KVS_INDEX_REJECT_MALFORMED,
          KVS_EFORMAT },
        { "kvs1 id=gpu-a.1  inc=00000000deadbeef", KVS_INDEX_REJECT_MALFORMED,
          KVS_EFORMAT },
        { "kvs1 id=gpu-a.1 ", KVS_INDEX_REJECT_MALFORMED, KVS_EFORMAT },
        { "kvs1 id", KVS_INDEX_REJECT_MALFORMED, KVS_EFORMAT },
        { "kvs1 inc=0000000000000000", KVS_INDEX_REJECT_MALFORMED,
          KVS_EFORMAT },
        { "kvs1 inc=00000000DEADBEEF", KVS_INDEX_REJECT_MALFORMED,
          KVS_EFORMAT },
        { "kvs1 inc=deadbeef", KVS_INDEX_REJECT_MALFORMED, KVS_EFORMAT },
        { "kvs1 epoch=0123456789abcdef0", KVS_INDEX_REJECT_MALFORMED,
          KVS_EFORMAT },
        { "kvs1 bt=0", KVS_INDEX_REJECT_MALFORMED, KVS_EFORMAT },
        { "kvs1 bt=1025", KVS_INDEX_REJECT_MALFORMED, KVS_EFORMAT },
        { "kvs1 run=4294967296", KVS_INDEX_REJECT_MALFORMED, KVS_EFORMAT },
        { "kvs1 run=-1", KVS_INDEX_REJECT_MALFORMED, KVS_EFORMAT },
        { "kvs1 run=07", KVS_INDEX_REJECT_MALFORMED, KVS_EFORMAT },
        { "kvs1 run=", KVS_INDEX_REJECT_MALFORMED, KVS_EFORMAT },
        { "kvs1 ts=18446744073709551616", KVS_INDEX_REJECT_MALFORMED,
          KVS_EFORMAT },
        { "kvs1 id=gpu:a", KVS_INDEX_REJECT_MALFORMED, KVS_EFORMAT },
        { "kvs1 model=", KVS_INDEX_REJECT_MALFORMED, KVS_EFORMAT },
        { "kvs1 url=http://\x7f", KVS_INDEX_REJECT_MALFORMED, KVS_EFORMAT },
        /* a whole record, of another host than its key says */
        { "kvs1 id=gpu-b inc=00000000deadbeef epoch=0123456789abcdef "
          "bt=16 run=3 wait=0 free=4096 ts=1700000000123 model=llama-3-8b "
          "url=http://10.0.0.7:8080", KVS_INDEX_REJECT_HOST_MISMATCH,
          KVS_EFORMAT },
    };

    (void) state;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        r = kvs_test_str_reply(bad[i].value);
        why = KVS_INDEX_OK;
        err.msg[0] = '\0';

        if (kvs_index_host_parse(&r, "gpu-a.1", 7, &got, &why, &err)
            != bad[i].rc || why != bad[i].why)
        {
            fail_msg("record %zu \"%s\": %s (%s)", i, bad[i].value,
                     kvs_index_reject_name(why), err.msg);
        }

        assert_non_null(strstr(err.msg, kvs_index_reject_name(bad[i].why)));
    }

    /* a NUL inside the value is not printable: the length decides */
    r = kvs_test_str_reply(sample_value);
    {
        char  copy[sizeof(sample_value)];

        memcpy(copy, sample_value, sizeof(copy));
        copy[70] = '\0';
        r.str = copy;
        assert_int_equal(kvs_index_host_parse(&r, "gpu-a.1", 7, &got, &why,
                                              &err), KVS_EFORMAT);
        assert_int_equal(why, KVS_INDEX_REJECT_MALFORMED);
    }

    /* nil, errors, other types */
    memset(&r, 0, sizeof(r));
    assert_int_equal(kvs_index_host_parse(&r, "h", 1, &got, &why, &err),
                     KVS_ENOTFOUND);
    assert_int_equal(why, KVS_INDEX_REJECT_MISSING);
    assert_int_equal(kvs_index_host_parse(NULL, "h", 1, &got, &why, &err),
                     KVS_ENOTFOUND);

    r = kvs_test_str_reply("WRONGTYPE Operation against a key holding the wrong "
                  "kind of value");
    r.type = KVS_INDEX_REPLY_ERROR;
    assert_int_equal(kvs_index_host_parse(&r, "h", 1, &got, &why, &err),
                     KVS_EIO);
    assert_int_equal(why, KVS_INDEX_REJECT_ERROR);
    assert_non_null(strstr(err.msg, "WRONGTYPE"));

    memset(&r, 0, sizeof(r));
    r.type = KVS_INDEX_REPLY_INTEGER;
    r.integer = 1;
    assert_int_equal(kvs_index_host_parse(&r, "h", 1, &got, &why, &err),
                     KVS_ETYPE);
    assert_int_equal(why, KVS_INDEX_REJECT_TYPE);

    e[0] = kvs_test_str_reply(sample_value);
    memset(&r, 0, sizeof(r));
    r.type = KVS_INDEX_REPLY_ARRAY;
    r.element = e;
    r.elements = 1;
    assert_int_equal(kvs_index_host_parse(&r, "gpu-a.1", 7, &got, &why,
                                          &err), KVS_ETYPE);
    r = kvs_test_str_reply("OK");
    r.type = KVS_INDEX_REPLY_STATUS;
    assert_int_equal(kvs_index_host_parse(&r, "h", 1, &got, &why, &err),
                     KVS_ETYPE);

    /* lengths: a huge one is refused before a byte is read (str points
     * at 3 bytes); NULL data with a length too */
    r = kvs_test_str_reply("kvs");
    r.len = SIZE_MAX;
    assert_int_equal(kvs_index_host_parse(&r, "h", 1, &got, &why, &err),
                     KVS_EFORMAT);
    assert_int_equal(why, KVS_INDEX_REJECT_TOO_LONG);
    r.len = KVS_INDEX_HOST_VALUE_MAX + 1;
    assert_int_equal(kvs_index_host_parse(&r, "h", 1, &got, &why, &err),
                     KVS_EFORMAT);
    assert_int_equal(why, KVS_INDEX_REJECT_TOO_LONG);
    r.str = NULL;
    r.len = 5;
    assert_int_equal(kvs_index_host_parse(&r, "h", 1, &got, &why, &err),
                     KVS_EFORMAT);
    assert_int_equal(why, KVS_INDEX_REJECT_MALFORMED);
}


static void
test_host_check(void **state)
{
    kvs_err_t              err;
    kvs_index_host_t       h, known;
    kvs_index_reject_t     why;
    kvs_index_host_want_t  want;

    (void) state;

    sample_host(&h);
    memset(&want, 0, sizeof(want));
    want.now_ms = h.ts_ms + 2999;
    want.max_age_ms = 3000;
    want.check_epoch = 1;
    want.epoch = h.epoch;
    want.model = "llama-3-8b";
    want.model_len = 10;

    assert_int_equal(kvs_index_host_check(&h, &want, &why, &err), KVS_OK);
    assert_int_equal(why, KVS_INDEX_OK);

    /* a heartbeat from the future (clock skew) is not stale */
    want.now_ms = h.ts_ms - 100000;
    assert_int_equal(kvs_index_host_check(&h, &want, &why, &err), KVS_OK);

    want.now_ms = h.ts_ms + 3001;
    assert_int_equal(kvs_index_host_check(&h, &want, &why, &err),
                     KVS_EINVAL);
    assert_int_equal(why, KVS_INDEX_REJECT_STALE);
    assert_non_null(strstr(err.msg, "3001 ms old"));

    want.max_age_ms = 0;                     /* no age check */
    assert_int_equal(kvs_index_host_check(&h, &want, &why, &err), KVS_OK);

    want.epoch = h.epoch - 1;                /* the gateway's weights */
    assert_int_equal(kvs_index_host_check(&h, &want, &why, &err),
                     KVS_EINVAL);
    assert_int_equal(why, KVS_INDEX_REJECT_OLD_EPOCH);
    assert_string_equal(kvs_index_reject_name(why), "old_epoch");
    want.check_epoch = 0;
    assert_int_equal(kvs_index_host_check(&h, &want, &why, &err), KVS_OK);

    want.model_len = 9;                      /* "llama-3-8" */
    assert_int_equal(kvs_index_host_check(&h, &want, &why, &err),
                     KVS_EINVAL);
    assert_int_equal(why, KVS_INDEX_REJECT_OTHER_MODEL);
    want.model = NULL;

    /* incarnations: a restart (newer heartbeat, new incarnation) is
     * taken; a record of the replaced process is not */
    known = h;
    known.incarnation = 0x1111;
    known.ts_ms = h.ts_ms - 1;
    want.known = &known;
    assert_int_equal(kvs_index_host_check(&h, &want, &why, &err), KVS_OK);

    known.ts_ms = h.ts_ms + 1;
    assert_int_equal(kvs_index_host_check(&h, &want, &why, &err),
                     KVS_EINVAL);
    assert_int_equal(why, KVS_INDEX_REJECT_STALE_INCARNATION);
    assert_string_equal(kvs_index_reject_name(why), "stale_incarnation");

    known.incarnation = h.incarnation;       /* same process, reordered */
    assert_int_equal(kvs_index_host_check(&h, &want, &why, &err), KVS_OK);
}


static void
test_host_list(void **state)
{
    char               ids[3][KVS_INDEX_HOST_ID_MAX + 1];
    size_t             n, skipped;
    kvs_err_t          err;
    kvs_index_reply_t  r, e[6];

    (void) state;

    e[0] = kvs_test_str_reply("gpu-a");
    e[1] = kvs_test_str_reply("bad id");
    e[2] = kvs_test_str_reply("gpu-b");
    memset(&e[3], 0, sizeof(e[3]));
    e[3].type = KVS_INDEX_REPLY_INTEGER;
    e[4] = kvs_test_str_reply("gpu-c");
    e[5] = kvs_test_str_reply("gpu-d");

    memset(&r, 0, sizeof(r));
    r.type = KVS_INDEX_REPLY_ARRAY;
    r.element = e;
    r.elements = 6;

    assert_int_equal(kvs_index_hosts_parse(&r, ids, 3, &n, &skipped, &err),
                     KVS_OK);
    assert_int_equal(n, 3);
    assert_int_equal(skipped, 3);            /* bad id, integer, no room */
    assert_string_equal(ids[0], "gpu-a");
    assert_string_equal(ids[1], "gpu-b");
    assert_string_equal(ids[2], "gpu-c");

    r.elements = SIZE_MAX / 2;               /* never walked */
    assert_int_equal(kvs_index_hosts_parse(&r, ids, 3, &n, &skipped, &err),
                     KVS_EFORMAT);

    r.elements = 0;
    assert_int_equal(kvs_index_hosts_parse(&r, ids, 3, &n, &skipped, &err),
                     KVS_OK);
    assert_int_equal(n, 0);

    r = kvs_test_str_reply("gpu-a");
    assert_int_equal(kvs_index_hosts_parse(&r, ids, 3, &n, &skipped, &err),
                     KVS_ETYPE);
    memset(&r, 0, sizeof(r));
    r.type = KVS_INDEX_REPLY_ARRAY;
    r.elements = 2;                          /* elements missing */
    assert_int_equal(kvs_index_hosts_parse(&r, ids, 3, &n, &skipped, &err),
                     KVS_ETYPE);
}


static void
test_block_entry_and_writes(void **state)
{
    size_t             len;
    uint64_t           inc;
    kvs_err_t          err;
    const char        *id;
    kvs_index_reply_t  f, v, r;

    (void) state;

    f = kvs_test_str_reply("gpu-a");
    v = kvs_test_str_reply("00000000deadbeef");
    assert_int_equal(kvs_index_blk_entry(&f, &v, &id, &len, &inc), KVS_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(id, "gpu-a", 5);
    assert_true(inc == 0xdeadbeef);

    v = kvs_test_str_reply("0000000000000000");       /* no incarnation is 0 */
    assert_int_equal(kvs_index_blk_entry(&f, &v, &id, &len, &inc),
                     KVS_EFORMAT);
    v = kvs_test_str_reply("deadbeef");
    assert_int_equal(kvs_index_blk_entry(&f, &v, &id, &len, &inc),
                     KVS_EFORMAT);
    v = kvs_test_str_reply("00000000deadbeef");
    v.type = KVS_INDEX_REPLY_STATUS;
    assert_int_equal(kvs_index_blk_entry(&f, &v, &id, &len, &inc),
                     KVS_EFORMAT);
    v = kvs_test_str_reply("00000000deadbeef");
    f = kvs_test_str_reply("gpu a");
    assert_int_equal(kvs_index_blk_entry(&f, &v, &id, &len, &inc),
                     KVS_EFORMAT);
    f = kvs_test_str_reply("gpu-a");
    f.len = SIZE_MAX;
    assert_int_equal(kvs_index_blk_entry(&f, &v, &id, &len, &inc),
                     KVS_EFORMAT);

    r = kvs_test_str_reply("OK");
    r.type = KVS_INDEX_REPLY_STATUS;
    assert_int_equal(kvs_index_reply_written(&r, &err), KVS_OK);
    memset(&r, 0, sizeof(r));
    r.type = KVS_INDEX_REPLY_INTEGER;
    assert_int_equal(kvs_index_reply_written(&r, &err), KVS_OK);
    r = kvs_test_str_reply("OOM command not allowed when used memory > 'maxmemory'");
    r.type = KVS_INDEX_REPLY_ERROR;
    assert_int_equal(kvs_index_reply_written(&r, &err), KVS_EIO);
    assert_non_null(strstr(err.msg, "OOM command"));
    r = kvs_test_str_reply("OK");
    assert_int_equal(kvs_index_reply_written(&r, &err), KVS_ETYPE);
    assert_int_equal(kvs_index_reply_written(NULL, &err), KVS_EIO);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_commands),
        cmocka_unit_test(test_command_arguments),
        cmocka_unit_test(test_batch_capacity),
        cmocka_unit_test(test_host_round_trip),
        cmocka_unit_test(test_host_rejected),
        cmocka_unit_test(test_host_check),
        cmocka_unit_test(test_host_list),
        cmocka_unit_test(test_block_entry_and_writes),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
