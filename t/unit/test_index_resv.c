/*
 * test_index_resv: the long-pool reservations' library
 * (src/index/kvs_index_resv.c, the resv commands of kvs_index_cmd.c and
 * the host record's lmin, lroom and lslots in kvs_index_schema.c).
 *
 * Needs, members and argv arrays are worked out by hand from the rules
 * in docs/pools.md and docs/prefix-index.md; replies are built by hand as
 * Redis would answer the script, and as a broken server might.  The
 * script itself runs against a real redis-server in t/044-route-resv.t.
 */

#include "kvs_test.h"
#include "kvs_test_index.h"

#include "index/kvs_index_resv.h"

static char                cmd_buf[8192];
static const char         *cmd_argv[32];
static size_t              cmd_argvlen[32];
static size_t              cmd_first[8];
static kvs_index_cmds_t    cmds;


static void
cmds_init(size_t buf_cap)
{
    kvs_index_cmds_init(&cmds, cmd_buf, buf_cap, cmd_argv, cmd_argvlen, 32,
                        cmd_first, 8);
}


/* Command i of the batch, its words separated by '|'. */
#define assert_cmd(i, want)  kvs_test_assert_cmd(&cmds, i, want)


static void
pool_host(kvs_index_host_t *h)
{
    memset(h, 0, sizeof(*h));
    strcpy(h->id, "gpu-a.1");
    strcpy(h->model, "m");
    strcpy(h->url, "http://10.0.0.7:8080");
    h->incarnation = 0xdeadbeef;
    h->epoch = 0x0123456789abcdefULL;
    h->block_tokens = 16;
    h->free_blocks = 4096;
    h->ts_ms = 1700000000123ULL;
    h->long_min = 2048;
    h->long_room = 300;
    h->long_slots = 1;
}


/* ---- the host record's long-pool fields ---------------------------------- */

static void
test_record_round_trip(void **state)
{
    char               out[KVS_INDEX_HOST_VALUE_MAX + 1];
    size_t             len;
    kvs_err_t          err;
    kvs_index_host_t   h, back;
    kvs_index_reply_t  r;
    kvs_index_reject_t why;

    (void) state;
    pool_host(&h);

    assert_int_equal(kvs_index_host_format(&h, out, &len, &err), KVS_OK);
    assert_string_equal(out, "kvs1 id=gpu-a.1 inc=00000000deadbeef "
                        "epoch=0123456789abcdef bt=16 run=0 wait=0 "
                        "free=4096 ts=1700000000123 model=m "
                        "url=http://10.0.0.7:8080 lmin=2048 lroom=300 "
                        "lslots=1");

    r = kvs_test_str_reply(out);
    assert_int_equal(kvs_index_host_parse(&r, "gpu-a.1", 7, &back, &why,
                                          &err), KVS_OK);
    assert_int_equal(back.long_min, 2048);
    assert_int_equal(back.long_room, 300);
    assert_int_equal(back.long_slots, 1);

    /* no pools: the fields are not written, and read back as 0 */
    h.long_min = 0;
    assert_int_equal(kvs_index_host_format(&h, out, &len, &err), KVS_OK);
    assert_null(strstr(out, "lmin"));
    r = kvs_test_str_reply(out);
    assert_int_equal(kvs_index_host_parse(&r, "gpu-a.1", 7, &back, &why,
                                          &err), KVS_OK);
    assert_int_equal(back.long_min, 0);
    assert_int_equal(back.long_room, 0);
}


static void
test_record_bad_fields(void **state)
{
    size_t              i;
    kvs_err_t           err;
    kvs_index_host_t    h;
    kvs_index_reply_t   r;
    kvs_index_reject_t  why;
    static const char  *bad[] = {
        /* one without the others */
        "lmin=100",
        "lmin=100 lroom=5",
        "lroom=5 lslots=1",
        /* lmin 0 says no pools: it is never written */
        "lmin=0 lroom=5 lslots=1",
        /* not u32 */
        "lmin=100 lroom=-1 lslots=1",
        "lmin=100 lroom=5 lslots=4294967296",
        "lmin=x lroom=5 lslots=1",
        /* twice */
        "lmin=100 lroom=5 lslots=1 lroom=6",
    };
    char                rec[512];

    (void) state;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(rec, sizeof(rec), "kvs1 id=h inc=0000000000000001 "
                 "epoch=0000000000000002 bt=16 run=0 wait=0 free=1 ts=5 "
                 "model=m url=u %s", bad[i]);
        r = kvs_test_str_reply(rec);

        assert_int_equal(kvs_index_host_parse(&r, "h", 1, &h, &why, &err),
                         KVS_EFORMAT);
        assert_int_equal(why, KVS_INDEX_REJECT_MALFORMED);
    }

    /* an old reader's view: a later field it does not know is skipped,
     * so a record with the pool's fields stays readable ("lfuture") */
    snprintf(rec, sizeof(rec), "kvs1 id=h inc=0000000000000001 "
             "epoch=0000000000000002 bt=16 run=0 wait=0 free=1 ts=5 "
             "model=m url=u lmin=9 lroom=5 lslots=1 lfuture=7");
    r = kvs_test_str_reply(rec);
    assert_int_equal(kvs_index_host_parse(&r, "h", 1, &h, &why, &err),
                     KVS_OK);
    assert_int_equal(h.long_min, 9);
}


/* ---- class and need -------------------------------------------------------- */

static void
test_need(void **state)
{
    kvs_index_host_t       h;
    kvs_index_resv_need_t  need;

    (void) state;
    pool_host(&h);
    memset(&need, 0, sizeof(need));

    /* 2047 tokens: short, nothing added */
    assert_int_equal(kvs_index_resv_add(&h, 2000, 47, &need), 0);
    assert_int_equal(need.blocks, 0);
    assert_int_equal(need.seqs, 0);

    /* 2048: long; 2047 computed tokens in 16-token blocks: 128 */
    assert_int_equal(kvs_index_resv_add(&h, 2000, 48, &need), 1);
    assert_int_equal(need.blocks, 128);
    assert_int_equal(need.seqs, 1);

    /* 2049: 2048 computed, exactly 128 blocks; summed */
    assert_int_equal(kvs_index_resv_add(&h, 2049, 0, &need), 1);
    assert_int_equal(need.blocks, 256);
    assert_int_equal(need.seqs, 2);

    /* 2050: 2049 computed, 129 blocks */
    memset(&need, 0, sizeof(need));
    assert_int_equal(kvs_index_resv_add(&h, 1, 2049, &need), 1);
    assert_int_equal(need.blocks, 129);

    /* sums saturate instead of wrapping */
    need.blocks = UINT64_MAX - 3;
    need.seqs = UINT32_MAX;
    assert_int_equal(kvs_index_resv_add(&h, UINT64_MAX, UINT64_MAX, &need),
                     1);
    assert_true(need.blocks == UINT64_MAX);
    assert_true(need.seqs == UINT32_MAX);

    /* no pools on the host: never long */
    h.long_min = 0;
    memset(&need, 0, sizeof(need));
    assert_int_equal(kvs_index_resv_add(&h, 100000, 100000, &need), 0);
    assert_int_equal(need.blocks, 0);
}


static void
test_fits(void **state)
{
    kvs_index_host_t       h;
    kvs_index_resv_need_t  need;

    (void) state;
    pool_host(&h);

    need.blocks = 300;
    need.seqs = 1;
    assert_true(kvs_index_resv_fits(&h, &need));

    need.blocks = 301;
    assert_false(kvs_index_resv_fits(&h, &need));

    need.blocks = 1;
    need.seqs = 2;
    assert_false(kvs_index_resv_fits(&h, &need));

    h.long_slots = 0;
    need.seqs = 1;
    assert_false(kvs_index_resv_fits(&h, &need));

    h.long_slots = 5;
    h.long_min = 0;
    assert_false(kvs_index_resv_fits(&h, &need));
}


/* ---- members and commands ---------------------------------------------- */

static void
test_member(void **state)
{
    char                   out[KVS_INDEX_RESV_MEMBER_MAX + 1];
    size_t                 len;
    kvs_err_t              err;
    kvs_index_resv_need_t  need;

    (void) state;

    need.blocks = 128;
    need.seqs = 1;
    assert_int_equal(kvs_index_resv_member(&need, 0xabcULL, 0x1f, out, &len,
                                           &err), KVS_OK);
    assert_string_equal(out, "128:1:0000000000000abc:1f");
    assert_int_equal(len, strlen(out));

    /* the longest there is still fits */
    need.blocks = UINT64_MAX;
    need.seqs = UINT32_MAX;
    assert_int_equal(kvs_index_resv_member(&need, UINT64_MAX, UINT64_MAX,
                                           out, &len, &err), KVS_OK);
    assert_int_equal(len, 65);

    need.blocks = 0;
    assert_int_equal(kvs_index_resv_member(&need, 1, 1, out, &len, &err),
                     KVS_EINVAL);
}


static void
test_ttl(void **state)
{
    kvs_err_t  err;

    (void) state;

    assert_int_equal(kvs_index_resv_ttl_check(100, &err), KVS_OK);
    assert_int_equal(kvs_index_resv_ttl_check(3600000, &err), KVS_OK);
    assert_int_equal(kvs_index_resv_ttl_check(99, &err), KVS_ERANGE);
    assert_non_null(strstr(err.msg, "99 ms"));
    assert_int_equal(kvs_index_resv_ttl_check(3600001, &err), KVS_ERANGE);
    assert_int_equal(kvs_index_resv_ttl_check(0, &err), KVS_ERANGE);
}


static void
test_commands(void **state)
{
    kvs_err_t    err;
    const char  *sha = "0123456789abcdef0123456789abcdef01234567";

    (void) state;
    cmds_init(sizeof(cmd_buf));

    assert_int_equal(kvs_index_cmd_resv_load(&cmds, &err), KVS_OK);
    assert_cmd(0, "SCRIPT|LOAD|<script>");

    assert_int_equal(kvs_index_cmd_resv_take(&cmds, sha, "gpu-a.1", 7,
                                             "128:1:00000000000000ab:1", 24,
                                             128, 1, 5000, &err), KVS_OK);
    assert_cmd(1, "EVALSHA|0123456789abcdef0123456789abcdef01234567|2|"
               "kvs:v1:host:gpu-a.1|kvs:v1:resv:gpu-a.1|"
               "128:1:00000000000000ab:1|128|1|5000");

    assert_int_equal(kvs_index_cmd_resv_take(&cmds, NULL, "gpu-a.1", 7,
                                             "128:1:00000000000000ab:2", 24,
                                             128, 1, 5000, &err), KVS_OK);
    assert_cmd(2, "EVAL|<script>|2|kvs:v1:host:gpu-a.1|kvs:v1:resv:gpu-a.1|"
               "128:1:00000000000000ab:2|128|1|5000");

    assert_int_equal(kvs_index_cmd_resv_drop(&cmds, "gpu-a.1", 7,
                                             "128:1:00000000000000ab:2", 24,
                                             &err), KVS_OK);
    assert_cmd(3, "ZREM|kvs:v1:resv:gpu-a.1|128:1:00000000000000ab:2");
    assert_int_equal(cmds.n_cmds, 4);

    /* refused whole: bad id, sha, member, TTL, empty need */
    assert_int_equal(kvs_index_cmd_resv_take(&cmds, sha, "a b", 3, "1:1:a",
                                             5, 1, 1, 5000, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_index_cmd_resv_take(&cmds, "0123", "h", 1, "1:1:a",
                                             5, 1, 1, 5000, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_index_cmd_resv_take(&cmds,
                                             "0123456789ABCDEF0123456789"
                                             "abcdef01234567", "h", 1,
                                             "1:1:a", 5, 1, 1, 5000, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_index_cmd_resv_take(&cmds, sha, "h", 1, "1 1", 3,
                                             1, 1, 5000, &err), KVS_EINVAL);
    assert_int_equal(kvs_index_cmd_resv_take(&cmds, sha, "h", 1, "", 0,
                                             1, 1, 5000, &err), KVS_EINVAL);
    assert_int_equal(kvs_index_cmd_resv_take(&cmds, sha, "h", 1, "1:1:a", 5,
                                             1, 1, 99, &err), KVS_EINVAL);
    assert_int_equal(kvs_index_cmd_resv_take(&cmds, sha, "h", 1, "1:1:a", 5,
                                             0, 1, 5000, &err), KVS_EINVAL);
    assert_int_equal(kvs_index_cmd_resv_take(&cmds, sha, "h", 1, "1:1:a", 5,
                                             1, 0, 5000, &err), KVS_EINVAL);
    assert_int_equal(kvs_index_cmd_resv_drop(&cmds, "h", 1, "1:1:A", 5,
                                             &err), KVS_EINVAL);
    assert_int_equal(cmds.n_cmds, 4);
}


static void
test_commands_no_room(void **state)
{
    size_t     used;
    kvs_err_t  err;

    (void) state;

    /* a buffer too small for the script: nothing added, nothing used */
    cmds_init(200);
    assert_int_equal(kvs_index_cmd_resv_load(&cmds, &err), KVS_ERANGE);
    assert_int_equal(cmds.n_cmds, 0);
    assert_int_equal(cmds.n_args, 0);
    assert_int_equal(cmds.buf_len, 0);

    assert_int_equal(kvs_index_cmd_resv_drop(&cmds, "h", 1, "1:1:a", 5,
                                             &err), KVS_OK);
    used = cmds.buf_len;
    assert_int_equal(kvs_index_cmd_resv_take(&cmds, NULL, "h", 1, "1:1:a",
                                             5, 1, 1, 5000, &err),
                     KVS_ERANGE);
    assert_int_equal(cmds.n_cmds, 1);
    assert_int_equal(cmds.buf_len, used);
}


/* ---- replies --------------------------------------------------------------- */

static kvs_index_reply_t
int_reply(long long v)
{
    kvs_index_reply_t  r;

    memset(&r, 0, sizeof(r));
    r.type = KVS_INDEX_REPLY_INTEGER;
    r.integer = v;

    return r;
}


static kvs_index_reply_t
arr_reply(const kvs_index_reply_t *e, size_t n)
{
    kvs_index_reply_t  r;

    memset(&r, 0, sizeof(r));
    r.type = KVS_INDEX_REPLY_ARRAY;
    r.element = e;
    r.elements = n;

    return r;
}


static void
test_parse(void **state)
{
    kvs_err_t                err;
    kvs_index_reply_t        e[4], r;
    kvs_index_resv_result_t  res;

    (void) state;

    e[0] = int_reply(1);
    e[1] = int_reply(2);
    e[2] = int_reply(172);
    e[3] = int_reply(0);
    r = arr_reply(e, 4);
    assert_int_equal(kvs_index_resv_parse(&r, &res, &err), KVS_OK);
    assert_int_equal(res.outcome, KVS_INDEX_RESV_WON);
    assert_int_equal(res.expired, 2);
    assert_int_equal(res.room_left, 172);
    assert_int_equal(res.slots_left, 0);

    /* lost on an over-full host: what is left reads as none */
    e[0] = int_reply(0);
    e[2] = int_reply(-128);
    e[3] = int_reply(-1);
    assert_int_equal(kvs_index_resv_parse(&r, &res, &err), KVS_OK);
    assert_int_equal(res.outcome, KVS_INDEX_RESV_LOST);
    assert_int_equal(res.room_left, 0);
    assert_int_equal(res.slots_left, 0);

    e[0] = int_reply(-1);
    assert_int_equal(kvs_index_resv_parse(&r, &res, &err), KVS_OK);
    assert_int_equal(res.outcome, KVS_INDEX_RESV_NO_RECORD);
    e[0] = int_reply(-2);
    assert_int_equal(kvs_index_resv_parse(&r, &res, &err), KVS_OK);
    assert_int_equal(res.outcome, KVS_INDEX_RESV_NO_POOL);
}


static void
test_parse_bad(void **state)
{
    kvs_err_t                err;
    kvs_index_reply_t        e[5], r, s;
    kvs_index_resv_result_t  res;

    (void) state;

    /* errors: NOSCRIPT asks for EVAL, the rest fail */
    memset(&r, 0, sizeof(r));
    r.type = KVS_INDEX_REPLY_ERROR;
    r.str = "NOSCRIPT No matching script. Please use EVAL.";
    r.len = strlen(r.str);
    assert_int_equal(kvs_index_resv_parse(&r, &res, &err), KVS_ENOTFOUND);

    r.str = "ERR Error running script: WRONGTYPE";
    r.len = strlen(r.str);
    assert_int_equal(kvs_index_resv_parse(&r, &res, &err), KVS_EIO);
    assert_non_null(strstr(err.msg, "WRONGTYPE"));

    r.str = "NOSC";
    r.len = 4;
    assert_int_equal(kvs_index_resv_parse(&r, &res, &err), KVS_EIO);

    assert_int_equal(kvs_index_resv_parse(NULL, &res, &err), KVS_ETYPE);

    s = kvs_test_str_reply("1");
    assert_int_equal(kvs_index_resv_parse(&s, &res, &err), KVS_ETYPE);

    /* the wrong count, a NULL array, a non-integer */
    e[0] = int_reply(1);
    e[1] = int_reply(0);
    e[2] = int_reply(1);
    e[3] = int_reply(1);
    e[4] = int_reply(1);
    r = arr_reply(e, 3);
    assert_int_equal(kvs_index_resv_parse(&r, &res, &err), KVS_ETYPE);
    r = arr_reply(e, 5);
    assert_int_equal(kvs_index_resv_parse(&r, &res, &err), KVS_ETYPE);
    r = arr_reply(NULL, 4);
    assert_int_equal(kvs_index_resv_parse(&r, &res, &err), KVS_ETYPE);
    r = arr_reply(e, 4);
    e[2] = kvs_test_str_reply("1");
    assert_int_equal(kvs_index_resv_parse(&r, &res, &err), KVS_ETYPE);
    e[2] = int_reply(1);

    /* values out of range */
    e[0] = int_reply(2);
    assert_int_equal(kvs_index_resv_parse(&r, &res, &err), KVS_EFORMAT);
    e[0] = int_reply(-3);
    assert_int_equal(kvs_index_resv_parse(&r, &res, &err), KVS_EFORMAT);
    e[0] = int_reply(1);
    e[1] = int_reply(-1);
    assert_int_equal(kvs_index_resv_parse(&r, &res, &err), KVS_EFORMAT);
    e[1] = int_reply(4294967296LL);
    assert_int_equal(kvs_index_resv_parse(&r, &res, &err), KVS_EFORMAT);
    e[1] = int_reply(0);

    /* won, yet the pool would be over: not the script's answer */
    e[2] = int_reply(-1);
    assert_int_equal(kvs_index_resv_parse(&r, &res, &err), KVS_EFORMAT);
    assert_int_equal(res.outcome, KVS_INDEX_RESV_LOST);  /* zeroed */
}


static void
test_sha(void **state)
{
    char               sha[KVS_INDEX_RESV_SHA_LEN + 1];
    kvs_err_t          err;
    kvs_index_reply_t  r;

    (void) state;

    r = kvs_test_str_reply("0123456789abcdef0123456789abcdef01234567");
    assert_int_equal(kvs_index_resv_sha_parse(&r, sha, &err), KVS_OK);
    assert_string_equal(sha, "0123456789abcdef0123456789abcdef01234567");

    r = kvs_test_str_reply("0123456789abcdef0123456789abcdef0123456");
    assert_int_equal(kvs_index_resv_sha_parse(&r, sha, &err), KVS_ETYPE);
    r = kvs_test_str_reply("0123456789abcdef0123456789abcdef0123456g");
    assert_int_equal(kvs_index_resv_sha_parse(&r, sha, &err), KVS_EFORMAT);
    r.type = KVS_INDEX_REPLY_ERROR;
    assert_int_equal(kvs_index_resv_sha_parse(&r, sha, &err), KVS_ETYPE);
    assert_int_equal(kvs_index_resv_sha_parse(NULL, sha, &err), KVS_ETYPE);
}


/* The script as text: its keys, arguments and the four-integer answers
 * the parser expects, so that the two cannot drift apart unseen. */
static void
test_script_text(void **state)
{
    (void) state;

    assert_non_null(strstr(kvs_index_resv_script, "redis.call('TIME')"));
    assert_non_null(strstr(kvs_index_resv_script,
                           "'ZREMRANGEBYSCORE', KEYS[2], '-inf', now"));
    assert_non_null(strstr(kvs_index_resv_script,
                           "'ZADD', KEYS[2], now + ttl, ARGV[1]"));
    assert_non_null(strstr(kvs_index_resv_script, "'PEXPIRE', KEYS[2], "
                           "2 * ttl"));
    assert_non_null(strstr(kvs_index_resv_script, "return {1, expired, "));
    assert_non_null(strstr(kvs_index_resv_script, "' lroom=(%d+)'"));
    assert_non_null(strstr(kvs_index_resv_script, "' lslots=(%d+)'"));
    assert_non_null(strstr(kvs_index_resv_script, "'kvs1 '"));
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_round_trip),
        cmocka_unit_test(test_record_bad_fields),
        cmocka_unit_test(test_need),
        cmocka_unit_test(test_fits),
        cmocka_unit_test(test_member),
        cmocka_unit_test(test_ttl),
        cmocka_unit_test(test_commands),
        cmocka_unit_test(test_commands_no_room),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_parse_bad),
        cmocka_unit_test(test_sha),
        cmocka_unit_test(test_script_text),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
