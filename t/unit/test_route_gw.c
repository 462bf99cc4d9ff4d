/*
 * test_route_gw: the gateway's pure helpers for kvserve_route
 * (src/index/kvs_index_gw.c): the host table's update rule, advertise
 * URL addresses and pseudo host ids.
 *
 * Records are written by hand in the schema of docs/prefix-index.md;
 * every expected outcome follows from the rule stated in kvs_index_gw.h
 * (a restart replaces at once, a replaced incarnation never comes back,
 * a vanished key drops the host, an unreadable record keeps what was
 * known while it is fresh, the sent count restarts at each heartbeat).
 */

#include "kvs_test.h"

#include "index/kvs_index_gw.h"

#define NOW  1700000010000ULL


static kvs_index_reply_t
str_reply(const char *s)
{
    kvs_index_reply_t  r;

    memset(&r, 0, sizeof(r));
    r.type = KVS_INDEX_REPLY_STRING;
    r.str = s;
    r.len = strlen(s);

    return r;
}


static kvs_index_reply_t
nil_reply(void)
{
    kvs_index_reply_t  r;

    memset(&r, 0, sizeof(r));
    r.type = KVS_INDEX_REPLY_NIL;

    return r;
}


#define REC_A1 "kvs1 id=e1 inc=00000000000000a1 epoch=0123456789abcdef " \
               "bt=16 run=3 wait=1 free=100 ts=1700000009000 model=m "     \
               "url=http://127.0.0.1:8081"
#define REC_A1_NEXT "kvs1 id=e1 inc=00000000000000a1 " \
               "epoch=0123456789abcdef bt=16 run=0 wait=0 free=120 "     \
               "ts=1700000009900 model=m url=http://127.0.0.1:8081"
#define REC_A2 "kvs1 id=e1 inc=00000000000000a2 epoch=0123456789abcdef " \
               "bt=16 run=0 wait=0 free=200 ts=1700000009500 model=m "     \
               "url=http://127.0.0.1:8081"
#define REC_A0_OLD "kvs1 id=e1 inc=00000000000000a0 " \
               "epoch=0123456789abcdef bt=16 run=9 wait=9 free=1 "       \
               "ts=1700000008000 model=m url=http://127.0.0.1:8081"


static void
test_accept_new(void **state)
{
    kvs_index_reply_t    r;
    kvs_index_reject_t   why;
    kvs_index_gw_host_t  out;

    r = str_reply(REC_A1);

    assert_int_equal(kvs_index_gw_accept(NULL, &r, "e1", 2, NOW, 10000,
                                         &out, &why), 1);
    assert_int_equal(why, KVS_INDEX_OK);
    assert_string_equal(out.rec.id, "e1");
    assert_true(out.rec.incarnation == 0xa1);
    assert_int_equal(out.rec.running, 3);
    assert_int_equal(out.rec.waiting, 1);
    assert_int_equal(out.sent, 0);
    assert_int_equal(kvs_index_gw_load(&out), 4);
}


static void
test_accept_sent(void **state)
{
    kvs_index_reply_t    r;
    kvs_index_reject_t   why;
    kvs_index_gw_host_t  known, out;

    r = str_reply(REC_A1);
    assert_int_equal(kvs_index_gw_accept(NULL, &r, "e1", 2, NOW, 10000,
                                         &known, &why), 1);
    known.sent = 5;

    /* the same heartbeat read again: the 5 sent are not in its load */
    assert_int_equal(kvs_index_gw_accept(&known, &r, "e1", 2, NOW, 10000,
                                         &out, &why), 1);
    assert_int_equal(out.sent, 5);
    assert_int_equal(kvs_index_gw_load(&out), 3 + 1 + 5);

    /* a new heartbeat counts them itself */
    r = str_reply(REC_A1_NEXT);
    assert_int_equal(kvs_index_gw_accept(&known, &r, "e1", 2, NOW, 10000,
                                         &out, &why), 1);
    assert_int_equal(out.sent, 0);
    assert_int_equal(out.rec.free_blocks, 120);
    assert_int_equal(kvs_index_gw_load(&out), 0);

    /* saturating */
    out.rec.running = UINT32_MAX;
    out.sent = 7;
    assert_true(kvs_index_gw_load(&out) == UINT32_MAX);
}


static void
test_accept_restart(void **state)
{
    kvs_index_reply_t    r;
    kvs_index_reject_t   why;
    kvs_index_gw_host_t  known, out;

    r = str_reply(REC_A1);
    assert_int_equal(kvs_index_gw_accept(NULL, &r, "e1", 2, NOW, 10000,
                                         &known, &why), 1);
    known.sent = 2;

    /* a restart with a newer heartbeat replaces it at once */
    r = str_reply(REC_A2);
    assert_int_equal(kvs_index_gw_accept(&known, &r, "e1", 2, NOW, 10000,
                                         &out, &why), 1);
    assert_int_equal(why, KVS_INDEX_OK);
    assert_true(out.rec.incarnation == 0xa2);
    assert_int_equal(out.sent, 0);

    /* the replaced process's record (older heartbeat) never comes back */
    known = out;
    r = str_reply(REC_A0_OLD);
    assert_int_equal(kvs_index_gw_accept(&known, &r, "e1", 2, NOW, 10000,
                                         &out, &why), 1);
    assert_int_equal(why, KVS_INDEX_REJECT_STALE_INCARNATION);
    assert_true(out.rec.incarnation == 0xa2);
    assert_int_equal(out.rec.free_blocks, 200);
}


static void
test_accept_gone(void **state)
{
    kvs_index_reply_t    r;
    kvs_index_reject_t   why;
    kvs_index_gw_host_t  known, out;

    r = str_reply(REC_A1);
    assert_int_equal(kvs_index_gw_accept(NULL, &r, "e1", 2, NOW, 10000,
                                         &known, &why), 1);

    /* the key expired: the host leaves */
    r = nil_reply();
    assert_int_equal(kvs_index_gw_accept(&known, &r, "e1", 2, NOW, 10000,
                                         &out, &why), 0);
    assert_int_equal(why, KVS_INDEX_REJECT_MISSING);

    /* at NOW + 12 s its heartbeat (NOW - 1 s) is 13 s old: dead */
    r = str_reply(REC_A1);
    assert_int_equal(kvs_index_gw_accept(NULL, &r, "e1", 2,
                                         NOW + 12000, 10000, &out, &why), 0);
    assert_int_equal(why, KVS_INDEX_REJECT_STALE);

    /* no age bound: kept */
    assert_int_equal(kvs_index_gw_accept(NULL, &r, "e1", 2,
                                         NOW + 12000, 0, &out, &why), 1);
}


static void
test_accept_unreadable(void **state)
{
    kvs_index_reply_t    r;
    kvs_index_reject_t   why;
    kvs_index_gw_host_t  known, out;

    r = str_reply(REC_A1);
    assert_int_equal(kvs_index_gw_accept(NULL, &r, "e1", 2, NOW, 10000,
                                         &known, &why), 1);

    /* a foreign version, garbage, a record naming another host: the
     * known record stays while fresh; without one, nothing */
    r = str_reply("kvs2 id=e1 whatever");
    assert_int_equal(kvs_index_gw_accept(&known, &r, "e1", 2, NOW, 10000,
                                         &out, &why), 1);
    assert_int_equal(why, KVS_INDEX_REJECT_FOREIGN);
    assert_true(out.rec.incarnation == 0xa1);
    assert_int_equal(kvs_index_gw_accept(NULL, &r, "e1", 2, NOW, 10000,
                                         &out, &why), 0);

    r = str_reply("kvs1 id=e1 inc=zz");
    assert_int_equal(kvs_index_gw_accept(&known, &r, "e1", 2, NOW, 10000,
                                         &out, &why), 1);
    assert_true(why == KVS_INDEX_REJECT_MALFORMED
                || why == KVS_INDEX_REJECT_PARTIAL);

    r = str_reply(REC_A1);
    assert_int_equal(kvs_index_gw_accept(NULL, &r, "e2", 2, NOW, 10000,
                                         &out, &why), 0);
    assert_int_equal(why, KVS_INDEX_REJECT_HOST_MISMATCH);

    /* known but itself too old by now: dropped */
    r = str_reply("kvs1 garbage");
    assert_int_equal(kvs_index_gw_accept(&known, &r, "e1", 2, NOW + 12000,
                                         10000, &out, &why), 0);
}


static void
check_addr(const char *url, const char *want)
{
    char       out[KVS_INDEX_GW_ADDR_MAX + 1];
    size_t     len;
    kvs_err_t  err;

    assert_int_equal(kvs_index_gw_url_addr(url, strlen(url), out,
                                           sizeof(out), &len, &err), KVS_OK);
    assert_string_equal(out, want);
    assert_int_equal(len, strlen(want));
}


static void
check_addr_bad(const char *url)
{
    char       out[KVS_INDEX_GW_ADDR_MAX + 1];
    size_t     len;
    kvs_err_t  err;

    assert_int_not_equal(kvs_index_gw_url_addr(url, strlen(url), out,
                                               sizeof(out), &len, &err),
                         KVS_OK);
}


static void
test_url_addr(void **state)
{
    char       small[8];
    size_t     len;
    kvs_err_t  err;

    check_addr("http://127.0.0.1:8081", "127.0.0.1:8081");
    check_addr("http://10.0.0.7:8080/v1/chat", "10.0.0.7:8080");
    check_addr("http://gpu-a", "gpu-a:80");
    check_addr("https://gpu-a/x", "gpu-a:443");
    check_addr("HTTP://gpu-a?q", "gpu-a:80");
    check_addr("http://user:pw@gpu-b:9000/", "gpu-b:9000");
    check_addr("http://[::1]:8081/v1", "[::1]:8081");
    check_addr("http://[fe80::1]", "[fe80::1]:80");
    check_addr("grpc://h:7", "h:7");

    check_addr_bad("");
    check_addr_bad("127.0.0.1:8081");
    check_addr_bad("http://");
    check_addr_bad("http://:80");
    check_addr_bad("http://h:");
    check_addr_bad("http://h:8x");
    check_addr_bad("http://[::1");
    check_addr_bad("http://[::1]x");
    check_addr_bad("grpc://h");

    assert_int_equal(kvs_index_gw_url_addr("http://long-host:1", 18, small,
                                           sizeof(small), &len, &err),
                     KVS_ERANGE);
}


static void
test_pseudo_id(void **state)
{
    char    out[KVS_INDEX_HOST_ID_MAX + 1], addr[100];
    size_t  n;

    n = kvs_index_gw_pseudo_id("127.0.0.1:8081", 14, out);
    assert_int_equal(n, 14);
    assert_string_equal(out, "127.0.0.1_8081");

    n = kvs_index_gw_pseudo_id("[::1]:80", 8, out);
    assert_string_equal(out, "___1__80");

    n = kvs_index_gw_pseudo_id("unix:/tmp/a.sock", 16, out);
    assert_string_equal(out, "unix__tmp_a.sock");

    assert_int_equal(kvs_index_gw_pseudo_id("", 0, out), 0);
    assert_string_equal(out, "");

    /* 90 bytes keep their last 64, the port's end */
    memset(addr, 'a', 86);
    memcpy(addr + 86, ":123", 4);
    n = kvs_index_gw_pseudo_id(addr, 90, out);
    assert_int_equal(n, KVS_INDEX_HOST_ID_MAX);
    assert_memory_equal(out + 60, "_123", 4);
    assert_int_equal(out[64], '\0');

    /* every pseudo id is a valid host id */
    assert_int_equal(kvs_index_host_id_check(out, n, NULL), KVS_OK);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_accept_new),
        cmocka_unit_test(test_accept_sent),
        cmocka_unit_test(test_accept_restart),
        cmocka_unit_test(test_accept_gone),
        cmocka_unit_test(test_accept_unreadable),
        cmocka_unit_test(test_url_addr),
        cmocka_unit_test(test_pseudo_id),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
