/*
 * test_route_gw: the gateway's pure helpers for kvserve_route
 * (src/index/kvs_index_gw.c): the host table's update rule, advertise
 * URL addresses and pseudo host ids.
 *
 * Records are written by hand in the schema of docs/prefix-index.md;
 * every expected outcome follows from the rule stated in kvs_index_gw.h
 * (a restart replaces at once, a replaced incarnation never comes back,
 * a vanished key drops the host, an unreadable record keeps what was
 * known while it is fresh, the sent count restarts at each heartbeat),
 * and, for a request's candidates refreshed with its first round
 * (kvs_index_gw_cand_update), from the entries a test writes by hand
 * and the lookup's stated rules (only the candidate's incarnation
 * counts).
 */

#include "kvs_test.h"
#include "kvs_test_index.h"

#include "index/kvs_index_gw.h"

#define NOW  1700000010000ULL


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
#define REC_A2_EPOCH "kvs1 id=e1 inc=00000000000000a2 " \
               "epoch=00000000000000ee bt=16 run=1 wait=0 free=50 "      \
               "ts=1700000009500 model=m url=http://127.0.0.1:8081"
#define REC_A2_OTHER "kvs1 id=e1 inc=00000000000000a2 " \
               "epoch=0123456789abcdef bt=16 run=0 wait=0 free=50 "     \
               "ts=1700000009500 model=other url=http://127.0.0.1:8081"
#define REC_E2 "kvs1 id=e2 inc=00000000000000b1 epoch=0123456789abcdef " \
               "bt=16 run=0 wait=0 free=100 ts=1700000009000 model=m "     \
               "url=http://127.0.0.1:8082"
#define REC_A0_OLD "kvs1 id=e1 inc=00000000000000a0 " \
               "epoch=0123456789abcdef bt=16 run=9 wait=9 free=1 "       \
               "ts=1700000008000 model=m url=http://127.0.0.1:8081"


static void
test_accept_new(void **state)
{
    kvs_index_reply_t    r;
    kvs_index_reject_t   why;
    kvs_index_gw_host_t  out;

    r = kvs_test_str_reply(REC_A1);

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

    r = kvs_test_str_reply(REC_A1);
    assert_int_equal(kvs_index_gw_accept(NULL, &r, "e1", 2, NOW, 10000,
                                         &known, &why), 1);
    known.sent = 5;

    /* the same heartbeat read again: the 5 sent are not in its load */
    assert_int_equal(kvs_index_gw_accept(&known, &r, "e1", 2, NOW, 10000,
                                         &out, &why), 1);
    assert_int_equal(out.sent, 5);
    assert_int_equal(kvs_index_gw_load(&out), 3 + 1 + 5);

    /* a new heartbeat counts them itself */
    r = kvs_test_str_reply(REC_A1_NEXT);
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

    r = kvs_test_str_reply(REC_A1);
    assert_int_equal(kvs_index_gw_accept(NULL, &r, "e1", 2, NOW, 10000,
                                         &known, &why), 1);
    known.sent = 2;

    /* a restart with a newer heartbeat replaces it at once */
    r = kvs_test_str_reply(REC_A2);
    assert_int_equal(kvs_index_gw_accept(&known, &r, "e1", 2, NOW, 10000,
                                         &out, &why), 1);
    assert_int_equal(why, KVS_INDEX_OK);
    assert_true(out.rec.incarnation == 0xa2);
    assert_int_equal(out.sent, 0);

    /* the replaced process's record (older heartbeat) never comes back */
    known = out;
    r = kvs_test_str_reply(REC_A0_OLD);
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

    r = kvs_test_str_reply(REC_A1);
    assert_int_equal(kvs_index_gw_accept(NULL, &r, "e1", 2, NOW, 10000,
                                         &known, &why), 1);

    /* the key expired: the host leaves */
    r = nil_reply();
    assert_int_equal(kvs_index_gw_accept(&known, &r, "e1", 2, NOW, 10000,
                                         &out, &why), 0);
    assert_int_equal(why, KVS_INDEX_REJECT_MISSING);

    /* at NOW + 12 s its heartbeat (NOW - 1 s) is 13 s old: dead */
    r = kvs_test_str_reply(REC_A1);
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

    r = kvs_test_str_reply(REC_A1);
    assert_int_equal(kvs_index_gw_accept(NULL, &r, "e1", 2, NOW, 10000,
                                         &known, &why), 1);

    /* a foreign version, garbage, a record naming another host: the
     * known record stays while fresh; without one, nothing */
    r = kvs_test_str_reply("kvs2 id=e1 whatever");
    assert_int_equal(kvs_index_gw_accept(&known, &r, "e1", 2, NOW, 10000,
                                         &out, &why), 1);
    assert_int_equal(why, KVS_INDEX_REJECT_FOREIGN);
    assert_true(out.rec.incarnation == 0xa1);
    assert_int_equal(kvs_index_gw_accept(NULL, &r, "e1", 2, NOW, 10000,
                                         &out, &why), 0);

    r = kvs_test_str_reply("kvs1 id=e1 inc=zz");
    assert_int_equal(kvs_index_gw_accept(&known, &r, "e1", 2, NOW, 10000,
                                         &out, &why), 1);
    assert_true(why == KVS_INDEX_REJECT_MALFORMED
                || why == KVS_INDEX_REJECT_PARTIAL);

    r = kvs_test_str_reply(REC_A1);
    assert_int_equal(kvs_index_gw_accept(NULL, &r, "e2", 2, NOW, 10000,
                                         &out, &why), 0);
    assert_int_equal(why, KVS_INDEX_REJECT_HOST_MISMATCH);

    /* known but itself too old by now: dropped */
    r = kvs_test_str_reply("kvs1 garbage");
    assert_int_equal(kvs_index_gw_accept(&known, &r, "e1", 2, NOW + 12000,
                                         10000, &out, &why), 0);
}


static void
cand_from(kvs_index_cand_t *c, const kvs_index_gw_host_t *h)
{
    memset(c, 0, sizeof(*c));
    c->id = h->rec.id;
    c->id_len = strlen(h->rec.id);
    c->incarnation = h->rec.incarnation;
    c->epoch = h->rec.epoch;
    c->load = kvs_index_gw_load(h);
    c->free_blocks = h->rec.free_blocks;
    c->up = 1;
}


static void
test_cand_update(void **state)
{
    kvs_index_cand_t     c;
    kvs_index_reply_t    r;
    kvs_index_reject_t   why;
    kvs_index_gw_host_t  known, out;

    r = kvs_test_str_reply(REC_A1);
    assert_int_equal(kvs_index_gw_accept(NULL, &r, "e1", 2, NOW, 10000,
                                         &known, &why), 1);
    known.sent = 4;
    cand_from(&c, &known);
    assert_int_equal(c.load, 3 + 1 + 4);

    /* the same record: its sent capped by what still runs */
    kvs_index_gw_cand_update(&c, &known, "m", 1, 0x0123456789abcdefULL, 16,
                             2);
    assert_int_equal(c.up, 1);
    assert_true(c.incarnation == 0xa1);
    assert_int_equal(c.load, 3 + 1 + 2);
    assert_int_equal(c.free_blocks, 100);

    /* a restart: the new incarnation, load and free blocks */
    r = kvs_test_str_reply(REC_A2);
    assert_int_equal(kvs_index_gw_accept(&known, &r, "e1", 2, NOW, 10000,
                                         &out, &why), 1);
    kvs_index_gw_cand_update(&c, &out, "m", 1, 0x0123456789abcdefULL, 16,
                             100);
    assert_int_equal(c.up, 1);
    assert_true(c.incarnation == 0xa2);
    assert_int_equal(c.load, 0);
    assert_int_equal(c.free_blocks, 200);

    /* gone: not up, holds nothing */
    kvs_index_gw_cand_update(&c, NULL, "m", 1, 0x0123456789abcdefULL, 16,
                             100);
    assert_int_equal(c.up, 0);
    assert_true(c.incarnation == 0);

    /* new weights: routable on load, but none of the names are its */
    cand_from(&c, &known);
    r = kvs_test_str_reply(REC_A2_EPOCH);
    assert_int_equal(kvs_index_gw_accept(&known, &r, "e1", 2, NOW, 10000,
                                         &out, &why), 1);
    kvs_index_gw_cand_update(&c, &out, "m", 1, 0x0123456789abcdefULL, 16,
                             100);
    assert_int_equal(c.up, 1);
    assert_true(c.incarnation == 0);
    assert_int_equal(c.load, 1);
    assert_int_equal(c.free_blocks, 50);

    /* another block size likewise */
    cand_from(&c, &known);
    kvs_index_gw_cand_update(&c, &known, "m", 1, 0x0123456789abcdefULL, 32,
                             100);
    assert_int_equal(c.up, 1);
    assert_true(c.incarnation == 0);

    /* another model: not a candidate any more */
    cand_from(&c, &known);
    r = kvs_test_str_reply(REC_A2_OTHER);
    assert_int_equal(kvs_index_gw_accept(&known, &r, "e1", 2, NOW, 10000,
                                         &out, &why), 1);
    kvs_index_gw_cand_update(&c, &out, "m", 1, 0x0123456789abcdefULL, 16,
                             100);
    assert_int_equal(c.up, 0);
    assert_true(c.incarnation == 0);
}


/* HGETALL's reply listing (id, incarnation hex) pairs: elem[2 * n]. */
static kvs_index_reply_t
entries_reply(kvs_index_reply_t *elem, const char **pairs, size_t n)
{
    size_t             i;
    kvs_index_reply_t  r;

    for (i = 0; i < 2 * n; i++) {
        elem[i] = kvs_test_str_reply(pairs[i]);
    }

    memset(&r, 0, sizeof(r));
    r.type = KVS_INDEX_REPLY_ARRAY;
    r.element = elem;
    r.elements = 2 * n;

    return r;
}


/*
 * Blocks the lookup believes each of e1 and e2 holds, for a 4-block
 * prompt whose round-1 probes (blocks 1 and 3, stride 2) both list e1
 * under incarnation a1 and e2 under b1, after the request's first round
 * read e1's record as rec (NULL: nil) with e1 known as a1 before.
 */
static void
restart_lookup(const char *rec, uint32_t *blocks, int *up)
{
    size_t                  len;
    uint64_t                mem[256];     /* 8-byte aligned */
    kvs_err_t               err;
    const char             *pairs[] = { "e1", "00000000000000a1",
                                        "e2", "00000000000000b1" };
    kvs_index_cand_t        c[2];
    kvs_index_reply_t       r, elem[2][4], probes[2];
    kvs_index_reject_t      why;
    kvs_index_lookup_t      lk;
    kvs_index_gw_host_t     known[2], out;
    kvs_index_route_conf_t  conf;

    r = kvs_test_str_reply(REC_A1);
    assert_int_equal(kvs_index_gw_accept(NULL, &r, "e1", 2, NOW, 10000,
                                         &known[0], &why), 1);
    r = kvs_test_str_reply(REC_E2);
    assert_int_equal(kvs_index_gw_accept(NULL, &r, "e2", 2, NOW, 10000,
                                         &known[1], &why), 1);
    cand_from(&c[0], &known[0]);
    cand_from(&c[1], &known[1]);

    kvs_index_route_conf_default(&conf);
    len = kvs_index_lookup_mem(4, 2, &conf);
    assert_true(len <= sizeof(mem));
    assert_int_equal(kvs_index_lookup_init(&lk, mem, sizeof(mem), c, 2,
                                           0x0123456789abcdefULL, 4, 16,
                                           &conf, &err), KVS_OK);
    assert_int_equal(lk.n_probe, 2);

    /* the GET sent with round 1, folded before its entries are read */
    r = rec != NULL ? kvs_test_str_reply(rec) : nil_reply();
    if (kvs_index_gw_accept(&known[0], &r, "e1", 2, NOW, 10000, &out,
                            &why))
    {
        kvs_index_gw_cand_update(&c[0], &out, "m", 1,
                                 0x0123456789abcdefULL, 16, 0);
    } else {
        kvs_index_gw_cand_update(&c[0], NULL, "m", 1,
                                 0x0123456789abcdefULL, 16, 0);
    }

    probes[0] = entries_reply(elem[0], pairs, 2);
    probes[1] = entries_reply(elem[1], pairs, 2);
    assert_int_equal(kvs_index_lookup_round1(&lk, probes, 2, &err), KVS_OK);
    assert_int_equal(lk.n_probe, 0);

    kvs_index_lookup_result(&lk, blocks);
    *up = c[0].up;
}


static void
test_restart_lookup(void **state)
{
    int       up;
    uint32_t  blocks[2];

    /* the same incarnation read again: e1's entries stand */
    restart_lookup(REC_A1_NEXT, blocks, &up);
    assert_int_equal(blocks[0], 4);
    assert_int_equal(blocks[1], 4);
    assert_int_equal(up, 1);

    /* restarted: the same request ignores a1's entries */
    restart_lookup(REC_A2, blocks, &up);
    assert_int_equal(blocks[0], 0);
    assert_int_equal(blocks[1], 4);
    assert_int_equal(up, 1);

    /* its key gone: e1 is no candidate and holds nothing */
    restart_lookup(NULL, blocks, &up);
    assert_int_equal(blocks[0], 0);
    assert_int_equal(up, 0);

    /* unreadable: what was known stands */
    restart_lookup("kvs1 garbage", blocks, &up);
    assert_int_equal(blocks[0], 4);
    assert_int_equal(up, 1);

    /* a replaced process's record (older heartbeat): a1 stands */
    restart_lookup(REC_A0_OLD, blocks, &up);
    assert_int_equal(blocks[0], 4);
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
        cmocka_unit_test(test_cand_update),
        cmocka_unit_test(test_restart_lookup),
        cmocka_unit_test(test_url_addr),
        cmocka_unit_test(test_pseudo_id),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
