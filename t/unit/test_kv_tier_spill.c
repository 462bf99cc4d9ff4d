/*
 * test_kv_tier_spill: blocks spilled to the disk tier by the writer
 * thread (kvs_tier_spill): what is pushed is stored and reads back the
 * same; with a slow disk (500 ms per write, the tier's test delay) a
 * push never waits for a write (each returns in far less than one
 * write), a full queue drops (counted) instead of waiting, and a lookup
 * in the tier answers while a write is under way; free stops the writer
 * with blocks still queued; bad arguments refused.  Files go to
 * KVS_TMP.
 */

#include "kvs_test.h"

#include "base/kvs_clock.h"
#include "kv/kvs_tier_spill.h"

#define BT        16
#define BB        3000
#define DELAY_US  500000              /* the slow disk: 0.5 s a write */
#define FAST_NS   150000000ull        /* a push: well under one write */


static kvs_radix_key_t  ns = { 9, 1, "scope", 5 };


static kvs_tier_t *
tier_open(const char *name, uint32_t delay_us)
{
    kvs_err_t        err;
    kvs_tier_t      *t;
    kvs_tier_conf_t  c;

    memset(&c, 0, sizeof(c));
    c.path = kvs_test_tmp(name);
    c.size = 4096 + 64 * 4096;
    c.block_bytes = BB;
    c.block_tokens = BT;
    c.epoch = 9;
    c.write_delay_us = delay_us;
    unlink(c.path);

    assert_int_equal(kvs_tier_open(&t, &c, NULL, 0, &err), KVS_OK);

    return t;
}


static void
block_make(uint32_t b, int32_t *tok, uint8_t *data, uint8_t *id)
{
    uint32_t  i;

    for (i = 0; i < BT; i++) {
        tok[i] = (int32_t) (1000 + b * BT + i);
    }

    for (i = 0; i < BB; i++) {
        data[i] = (uint8_t) (b * 13 + i * 3);
    }

    kvs_tier_path_id(NULL, tok, BT, id);
}


static void
test_spill(void **state)
{
    int32_t                 tok[BT];
    uint8_t                 data[BB], out[BB], id[16];
    uint32_t                b;
    kvs_err_t               err;
    kvs_tier_t             *t;
    kvs_tier_io_t          *io;
    kvs_tier_spill_t       *sp;
    kvs_tier_spill_stats_t  st;

    t = tier_open("spill-basic", 0);
    assert_int_equal(kvs_tier_spill_new(&sp, t, 8, &err), KVS_OK);

    for (b = 0; b < 5; b++) {
        block_make(b, tok, data, id);
        assert_int_equal(kvs_tier_spill_push(sp, &ns, id, tok, data, &err),
                         KVS_OK);
    }

    /* the caller's buffers are free once push returns */
    memset(data, 0, BB);
    memset(tok, 0, sizeof(tok));

    kvs_tier_spill_wait(sp);
    kvs_tier_spill_stats(sp, &st);
    assert_true(st.pushed == 5 && st.written == 5 && st.dropped == 0
                && st.failed == 0 && st.queued == 0);

    assert_int_equal(kvs_tier_io_new(t, &io, &err), KVS_OK);

    for (b = 0; b < 5; b++) {
        block_make(b, tok, data, id);
        assert_int_equal(kvs_tier_get(t, io, &ns, id, tok, out, &err),
                         KVS_OK);
        assert_memory_equal(out, data, BB);
    }

    kvs_tier_io_free(io);
    kvs_tier_spill_free(sp);
    kvs_tier_close(t);
}


static void
test_slow_disk(void **state)
{
    int32_t                 tok[BT];
    uint8_t                 data[BB], id[16], id0[16];
    uint32_t                b;
    uint64_t                t0, dt, worst, loop;
    kvs_err_t               err;
    kvs_tier_t             *t;
    kvs_tier_spill_t       *sp;
    kvs_tier_spill_stats_t  st;
    kvs_tier_stats_t        ts;

    t = tier_open("spill-slow", DELAY_US);
    assert_int_equal(kvs_tier_spill_new(&sp, t, 2, &err), KVS_OK);

    /* a step loop that evicts one block a step, twenty steps */
    worst = 0;
    loop = kvs_now_ns();

    for (b = 0; b < 20; b++) {
        block_make(b, tok, data, id);

        if (b == 0) {
            memcpy(id0, id, 16);
        }

        t0 = kvs_now_ns();
        (void) kvs_tier_spill_push(sp, &ns, id, tok, data, &err);
        dt = kvs_now_ns() - t0;
        worst = dt > worst ? dt : worst;

        /* a lookup while the writer sleeps in its write */
        t0 = kvs_now_ns();
        assert_false(kvs_tier_has(t, &ns, id0));
        dt = kvs_now_ns() - t0;
        worst = dt > worst ? dt : worst;
    }

    loop = kvs_now_ns() - loop;
    print_message("20 pushes: worst %.3f ms, loop %.1f ms, one write "
                  "%.0f ms\n", worst / 1e6, loop / 1e6, DELAY_US / 1e3);

    assert_true(worst < FAST_NS);
    /* the loop as a whole took less than one write */
    assert_true(loop < DELAY_US * 1000ull);

    kvs_tier_spill_stats(sp, &st);
    assert_true(st.pushed + st.dropped == 20);
    assert_true(st.pushed >= 2 && st.dropped >= 10);
    assert_true(st.written == 0);

    kvs_tier_spill_wait(sp);
    kvs_tier_spill_stats(sp, &st);
    assert_true(st.written == st.pushed && st.queued == 0);

    kvs_tier_stats(t, &ts);
    assert_true(ts.puts == st.pushed);
    assert_true(kvs_tier_has(t, &ns, id0));

    kvs_tier_spill_free(sp);
    kvs_tier_close(t);
}


static void
test_free_queued(void **state)
{
    int32_t                 tok[BT];
    uint8_t                 data[BB], id[16];
    uint32_t                b;
    uint64_t                t0;
    kvs_err_t               err;
    kvs_tier_t             *t;
    kvs_tier_spill_t       *sp;
    kvs_tier_stats_t        ts;

    t = tier_open("spill-free", DELAY_US);
    assert_int_equal(kvs_tier_spill_new(&sp, t, 4, &err), KVS_OK);

    for (b = 0; b < 4; b++) {
        block_make(b, tok, data, id);
        assert_int_equal(kvs_tier_spill_push(sp, &ns, id, tok, data, &err),
                         KVS_OK);
    }

    /* waits for the write under way only, not the three behind it */
    t0 = kvs_now_ns();
    kvs_tier_spill_free(sp);
    assert_true(kvs_now_ns() - t0 < 3 * DELAY_US * 1000ull);

    kvs_tier_stats(t, &ts);
    assert_true(ts.puts <= 1);
    kvs_tier_close(t);
}


static void
test_errors(void **state)
{
    int32_t                 tok[BT];
    uint8_t                 data[BB], id[16];
    char                    big[KVS_RADIX_MAX_SCOPE + 1];
    kvs_err_t               err;
    kvs_tier_t             *t;
    kvs_tier_spill_t       *sp;
    kvs_radix_key_t         key = ns;
    kvs_tier_spill_stats_t  st;

    t = tier_open("spill-errors", 0);

    sp = (kvs_tier_spill_t *) 1;
    assert_int_equal(kvs_tier_spill_new(&sp, t, 0, &err), KVS_EINVAL);
    assert_null(sp);
    assert_int_equal(kvs_tier_spill_new(&sp, t, KVS_TIER_SPILL_MAX_DEPTH + 1,
                                        &err), KVS_EINVAL);

    assert_int_equal(kvs_tier_spill_new(&sp, t, 1, &err), KVS_OK);
    block_make(0, tok, data, id);
    memset(big, 'y', sizeof(big));
    key.scope = big;
    key.scope_len = sizeof(big);
    assert_int_equal(kvs_tier_spill_push(sp, &key, id, tok, data, &err),
                     KVS_EINVAL);

    kvs_tier_spill_stats(sp, &st);
    assert_true(st.pushed == 0 && st.dropped == 0);

    kvs_tier_spill_free(sp);
    kvs_tier_spill_free(NULL);
    kvs_tier_close(t);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spill),
        cmocka_unit_test(test_slow_disk),
        cmocka_unit_test(test_free_queued),
        cmocka_unit_test(test_errors),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
