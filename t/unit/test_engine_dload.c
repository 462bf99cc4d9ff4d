/*
 * test_engine_dload: a disk load's writes into the pool off the step
 * (kvs_engine_tload.c, on a backend with the asynchronous copies), on
 * stories260K with a 12-block pool and a disk tier alone, the CPU
 * backend wrapped by kvs_test_acopy.h: copies a thread does, each taking
 * a set delay, and (slow_sync) a synchronous block_write that takes the
 * same delay on the engine thread, so a write still made there shows.
 *
 * A prompt evicted to the disk comes back through 4 queued writes bit
 * for bit as a cache-off engine's; with writes of 200 ms it comes back
 * while another request runs to its end, no step taking 100 ms, where
 * the synchronous path on the same writes has a step of 200 ms or more;
 * a backend that takes two writes and refuses every one after: the run
 * ends at the third block (counted in load_copy_full and load_failed),
 * the plan at the request's admission is refused again, and the rest is
 * computed (32 tokens from the disk), bit for bit; a request closed
 * while its writes run leaves its blocks to them until they are done
 * (load_reserved), then all come back and the engine check passes; an
 * engine freed with writes in flight waits for them before the staging
 * goes (ASan: the copy thread reads it), host memory freed once.
 */

#include "kvs_test.h"
#include "kvs_test_acopy.h"
#include "kvs_test_engine.h"
#include "kvs_test_model.h"

#include <inttypes.h>

#include "base/kvs_clock.h"
#include "engine/kvs_engine.h"

#define BT       16
#define BUDGET   32
#define POOL     12                   /* blocks: two 64-token turns */
#define SLOW     200000               /* us a slow copy takes */
#define TIER     (4u << 20)           /* bytes of disk tier file */

#define TIER_FILE  kvs_test_tmp_pid("test_engine_dload")


static kvs_test_acopy_t  ac;


static kvs_engine_t *
engine_new(const kvs_test_model_t *md, int cache)
{
    kvs_engine_conf_t  conf;

    if (!cache) {
        kvs_test_engine_conf(&conf, md, BT, 64, BUDGET, 0);
        return kvs_test_engine_new(&conf);
    }

    kvs_test_engine_conf(&conf, md, BT, POOL, BUDGET, 1);
    conf.backend_hook = kvs_test_acopy_wrap;
    conf.backend_hook_arg = &ac;
    conf.tier_path = TIER_FILE;
    conf.tier_size = TIER;
    conf.tier_model = 1;
    conf.tier_depth = 64;

    return kvs_test_engine_new(&conf);
}


static void
ac_set(int sync, uint32_t max_writes)
{
    memset(&ac, 0, sizeof(ac));
    ac.sync = sync;
    ac.slow_sync = !sync;
    ac.max_writes = max_writes;
}


static void
run1(kvs_engine_t *e, const int32_t *prompt, uint32_t n_prompt,
    kvs_engine_out_t *out)
{
    kvs_engine_req_t  req;

    kvs_test_engine_req(&req, prompt, n_prompt, 8, 5);
    kvs_test_engine_run(e, &req, out, NULL, NULL);
}


/* A fresh cache-on engine whose disk holds sys[72]'s first 64 tokens,
 * out of the pool (evicted by four others, every spill written); the
 * copies then take delay_us. */
static kvs_engine_t *
engine_evicted(const kvs_test_model_t *md, int32_t *sys, uint64_t seed,
    uint32_t delay_us)
{
    int32_t           other[64];
    uint32_t          k;
    kvs_engine_t     *e;
    kvs_engine_out_t  a;

    unlink(TIER_FILE);
    e = engine_new(md, 1);

    kvs_test_engine_fill(sys, 72, seed, md->m->hp.n_vocab, md->v->bos);
    run1(e, sys, 64, &a);
    kvs_engine_out_free(&a);

    for (k = 0; k < 4; k++) {
        kvs_test_engine_fill(other, 64, seed * 100 + k, md->m->hp.n_vocab,
                             md->v->bos);
        run1(e, other, 64, &a);
        kvs_engine_out_free(&a);
    }

    kvs_engine_tier_wait(e);

    /* set with no copy in flight; the copy thread reads it after the
     * next queue's lock */
    ac.delay_us = delay_us;

    return e;
}


/* Steps until a disk load's writes are in flight, at most 5 s. */
static void
step_until_copies(kvs_engine_t *e)
{
    uint64_t            t0;
    kvs_engine_stats_t  st;

    t0 = kvs_now_ns();

    for ( ;; ) {
        (void) kvs_engine_step(e);
        kvs_engine_stats(e, &st);

        if (st.tier.load_copies > 0) {
            return;
        }

        assert_true(kvs_now_ns() - t0 < 5000000000ull);
        usleep(1000);
    }
}


/* sys[72] asked of on: the reply bit for bit a cache-off engine's, with
 * n_tier tokens from the disk; on checked, then freed. */
static void
back_same(kvs_engine_t *on, const kvs_test_model_t *md,
    const int32_t *sys, uint32_t n_tier, const char *what)
{
    kvs_err_t          err;
    kvs_engine_t      *off;
    kvs_engine_out_t   b, c;

    off = engine_new(md, 0);
    run1(on, sys, 72, &b);
    run1(off, sys, 72, &c);
    kvs_test_engine_same(&b, &c, what);
    assert_int_equal(b.n_cached_tier, n_tier);
    kvs_engine_out_free(&b);
    kvs_engine_out_free(&c);
    kvs_engine_free(off);

    if (kvs_engine_check(on, &err) != KVS_OK) {
        fail_msg("engine check: %s", err.msg);
    }
}


/* The async path: the prompt back from the disk through 4 queued
 * writes, bit for bit. */
static void
test_load_async(void **state)
{
    int32_t             sys[72];
    kvs_test_model_t    md;
    kvs_engine_t       *on;
    kvs_engine_stats_t  st;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    ac_set(0, 0);
    on = engine_evicted(&md, sys, 11, 2000);

    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.load_async, 1);
    assert_int_equal(ac.writes, 0);

    back_same(on, &md, sys, 64, "loaded through queued writes");

    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.loaded_blocks, 4);
    assert_int_equal(st.tier.load_copies, 0);
    assert_int_equal(st.tier.load_copy_full, 0);
    assert_int_equal(st.tier.load_copy_failed, 0);
    assert_int_equal(st.tier.load_failed, 0);

    /* each block written once, by a queued copy (a synchronous write
     * counts here too) */
    assert_int_equal(ac.writes, 4);
    kvs_engine_free(on);

    /* the spills' staging and the loader's, each freed once */
    assert_int_equal(ac.allocs, 2);
    assert_int_equal(ac.frees, 2);
    unlink(TIER_FILE);
    kvs_test_model_free(&md);
}


/*
 * Writes of delay_us (sync: the backend has no asynchronous copies and
 * its block_write takes them on the engine thread): sys asked again
 * beside another request; both run to their end.  Returns the longest
 * step.
 */
static uint64_t
scenario(const kvs_test_model_t *md, uint32_t delay_us, int sync)
{
    int                 seen;
    int32_t             sys[72], other[64];
    uint64_t            max, t0, ns;
    kvs_err_t           err;
    kvs_engine_t       *on, *off;
    kvs_engine_seq_t   *h, *g, *hs[2];
    kvs_engine_out_t    b, c, d;
    kvs_engine_stats_t  st;

    ac_set(sync, 0);
    on = engine_evicted(md, sys, 21, delay_us);
    off = engine_new(md, 0);
    kvs_test_engine_fill(other, 64, 22, md->m->hp.n_vocab, md->v->bos);

    h = kvs_test_engine_submit(on, sys, 72, 8);
    g = kvs_test_engine_submit(on, other, 64, 8);
    memset(&b, 0, sizeof(b));
    memset(&d, 0, sizeof(d));
    seen = 0;
    max = 0;

    while (b.finish == KVS_FINISH_NONE || d.finish == KVS_FINISH_NONE) {
        t0 = kvs_now_ns();
        (void) kvs_engine_step(on);
        ns = kvs_now_ns() - t0;
        max = ns > max ? ns : max;

        while (kvs_engine_ready(on, hs, 2) > 0) {
            assert_true(kvs_engine_read(on, hs[0],
                                        hs[0] == h ? &b : &d) >= 0);
        }

        /* the other request ended while sys still waits for its writes */
        if (d.finish != KVS_FINISH_NONE && b.n_tokens == 0) {
            kvs_engine_stats(on, &st);
            seen |= st.tier.load_copies > 0;
        }
    }

    kvs_engine_close(on, h);
    kvs_engine_close(on, g);
    printf("writes of %u us %s: longest step %.1f ms\n", delay_us,
           sync ? "on the step" : "(async ops)", (double) max / 1e6);

    run1(off, sys, 72, &c);
    kvs_test_engine_same(&b, &c, "loaded while another request ran");
    assert_int_equal(b.n_cached_tier, 64);

    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.loaded_blocks, 4);
    assert_int_equal(st.tier.load_waits, 1);

    if (!sync && delay_us >= SLOW) {
        assert_true(seen);
        assert_true(st.tier.load_wait_ns >= 4ull * delay_us * 1000);
    }

    if (kvs_engine_check(on, &err) != KVS_OK) {
        fail_msg("engine check: %s", err.msg);
    }

    kvs_engine_out_free(&b);
    kvs_engine_out_free(&c);
    kvs_engine_out_free(&d);
    kvs_engine_free(on);
    kvs_engine_free(off);
    assert_int_equal(ac.frees, ac.allocs);
    unlink(TIER_FILE);

    return max;
}


static void
test_steps_not_slowed(void **state)
{
    uint64_t          fast, slow, sync;
    kvs_test_model_t  md;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    /* in this order: the slow runs' figures beside a fast one's */
    fast = scenario(&md, 2000, 0);
    slow = scenario(&md, SLOW, 0);
    sync = scenario(&md, SLOW, 1);

    printf("disk load, longest step: writes of 2000 us %.1f ms, of %u us "
           "off the step %.1f ms, on it %.1f ms\n", (double) fast / 1e6,
           SLOW, (double) slow / 1e6, (double) sync / 1e6);

    assert_true(slow < SLOW * 1000ull / 2);
    assert_true(sync >= SLOW * 1000ull);

    kvs_test_model_free(&md);
}


/* Two writes taken, every later one refused: the run ends at the third
 * block, which (refused again when planned at the admission) is
 * computed with the rest. */
static void
test_refused(void **state)
{
    int32_t             sys[72];
    kvs_test_model_t    md;
    kvs_engine_t       *on;
    kvs_engine_stats_t  st;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    ac_set(0, 2);
    on = engine_evicted(&md, sys, 31, SLOW);
    back_same(on, &md, sys, 32, "a load cut short by a refused write");

    kvs_engine_stats(on, &st);
    printf("refused: %" PRIu64 " writes, %" PRIu64 " blocks loaded, %"
           PRIu64 " refused\n", ac.writes, st.tier.loaded_blocks,
           st.tier.load_copy_full);
    assert_int_equal(st.tier.loaded_blocks, 2);
    assert_int_equal(ac.writes, 2);
    assert_true(st.tier.load_copy_full >= 1);
    assert_int_equal(st.tier.load_copy_full, ac.refused);
    assert_int_equal(st.tier.load_failed, st.tier.load_copy_full);
    assert_int_equal(st.tier.load_copies, 0);
    kvs_engine_free(on);
    unlink(TIER_FILE);
    kvs_test_model_free(&md);
}


/* Closed while its writes run: its blocks stay theirs until done, then
 * all come back; freed with writes in flight: waited for, nothing
 * leaked, host memory freed once. */
static void
test_close_and_free(void **state)
{
    int32_t             sys[72];
    kvs_err_t           err;
    kvs_test_model_t    md;
    kvs_engine_t       *on;
    kvs_engine_seq_t   *h;
    kvs_engine_stats_t  st;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    ac_set(0, 0);
    on = engine_evicted(&md, sys, 41, 50000);

    h = kvs_test_engine_submit(on, sys, 72, 8);
    step_until_copies(on);

    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.loading, 1);
    assert_int_equal(st.tier.load_reserved, 4);

    kvs_engine_close(on, h);
    (void) kvs_engine_step(on);

    /* the writes go on, their blocks still reserved */
    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.loading, 0);
    assert_true(st.tier.load_copies > 0);
    assert_int_equal(st.tier.load_reserved, 4);

    /* done: settled at the next step, every block back */
    kvs_engine_tier_wait(on);
    (void) kvs_engine_step(on);
    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.load_copies, 0);
    assert_int_equal(st.tier.load_reserved, 0);
    assert_int_equal(st.tier.loads, 0);

    if (kvs_engine_check(on, &err) != KVS_OK) {
        fail_msg("engine check after the close: %s", err.msg);
    }

    /* the disk still has them: the next request loads them */
    back_same(on, &md, sys, 64, "loaded after a load closed");
    kvs_engine_free(on);
    assert_int_equal(ac.allocs, 2);
    assert_int_equal(ac.frees, 2);

    /* freed with a load's writes in flight (its request closed just
     * before, as a consumer does: the blocks owed to the writes) */
    ac_set(0, 0);
    on = engine_evicted(&md, sys, 51, SLOW);
    h = kvs_test_engine_submit(on, sys, 72, 8);
    step_until_copies(on);
    kvs_engine_close(on, h);
    kvs_engine_free(on);
    assert_int_equal(ac.allocs, 2);
    assert_int_equal(ac.frees, 2);
    assert_true(ac.writes > 0);

    unlink(TIER_FILE);
    kvs_test_model_free(&md);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_async),
        cmocka_unit_test(test_steps_not_slowed),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_close_and_free),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
