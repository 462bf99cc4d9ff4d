/*
 * test_engine_tier_admit: the disk tier is looked at again when a
 * request comes to be admitted (kvs_engine_tload.c, the scheduler's
 * lower-tier hook), not only at its arrival.
 *
 * A follow-up request arrives while its conversation's blocks are still
 * in the pool, so its arrival plan has nothing to load; it then waits
 * in the queue (one sequence runs at a time) while a long request
 * evicts those blocks into the tier.  At its admission it loads them
 * back (n_cached_tier) instead of computing them, and its reply is bit
 * for bit the cache-off engine's.  With a disk that takes 300 ms a
 * write the evicted blocks are still in the spill queue at that
 * admission: the load waits for their write (off the step loop: no step
 * takes 250 ms) and still gets them.
 */

#include "kvs_test.h"
#include "kvs_test_engine.h"
#include "kvs_test_model.h"

#include <inttypes.h>

#include "engine/kvs_engine.h"

/* the disk tier's file: one a process */
#define TIER_FILE  kvs_test_tmp_pid("test_engine_tier_a")

#define BT       16
#define BUDGET   32
#define POOL     12                   /* blocks */
#define TIER     (4u << 20)           /* bytes of file */
#define LONG     150                  /* the evicting request's prompt */
#define LONG_GEN 24


static kvs_engine_t *
engine_new(const kvs_test_model_t *md, int cache, uint32_t delay_us)
{
    kvs_engine_conf_t  conf;

    kvs_test_engine_conf(&conf, md, BT, cache ? POOL : 64, BUDGET, cache);
    conf.max_running = 1;

    if (cache) {
        conf.tier_path = TIER_FILE;
        conf.tier_size = TIER;
        conf.tier_model = 1;
        conf.tier_write_delay_us = delay_us;
    }

    return kvs_test_engine_new(&conf);
}


/* Submits a then b at once and steps until both ended; *max_ns the
 * longest kvs_engine_step() call. */
static void
run2(kvs_engine_t *e, const kvs_engine_req_t *ra, const kvs_engine_req_t *rb,
    kvs_engine_out_t *a, kvs_engine_out_t *b, uint64_t *max_ns)
{
    int                 worked;
    uint64_t            t0, until;
    kvs_err_t           err;
    kvs_engine_seq_t   *ha, *hb, *r[1];
    kvs_engine_stats_t  st;

    memset(a, 0, sizeof(*a));
    memset(b, 0, sizeof(*b));
    *max_ns = 0;

    if (kvs_engine_submit(e, ra, &ha, &err) != KVS_OK
        || kvs_engine_submit(e, rb, &hb, &err) != KVS_OK)
    {
        fail_msg("submit: %s", err.msg);
    }

    until = kvs_now_ns() + 30000000000ull;

    while (a->finish == KVS_FINISH_NONE || b->finish == KVS_FINISH_NONE) {
        assert_true(kvs_now_ns() < until);

        t0 = kvs_now_ns();
        worked = kvs_engine_step(e);
        t0 = kvs_now_ns() - t0;
        *max_ns = t0 > *max_ns ? t0 : *max_ns;

        while (kvs_engine_ready(e, r, 1) > 0) {
            assert_true(r[0] == ha || r[0] == hb);
            assert_true(kvs_engine_read(e, r[0], r[0] == ha ? a : b) >= 0);
        }

        if (!worked) {
            /* only a load is under way: the loader reads */
            kvs_engine_stats(e, &st);
            assert_true(st.tier.loading > 0);
            usleep(1000);
        }
    }

    kvs_engine_close(e, ha);
    kvs_engine_close(e, hb);
    assert_int_equal(a->finish, KVS_FINISH_LENGTH);
    assert_int_equal(b->finish, KVS_FINISH_LENGTH);

    if (kvs_engine_check(e, &err) != KVS_OK) {
        fail_msg("engine check: %s", err.msg);
    }
}


/*
 * The conversation's first turn (64 tokens, 8 generated: 4 whole blocks
 * cached), then its follow-up (the same 64 and 8 more) submitted just
 * after a long request that takes the pool: the follow-up's blocks are
 * in the pool at its arrival and in the tier (or its queue, with
 * delay_us) at its admission.
 */
static void
waited_one(uint32_t delay_us, int queued)
{
    int32_t             conv[72], other[LONG];
    uint64_t            max_ns;
    kvs_test_model_t    md;
    kvs_engine_t       *on, *off;
    kvs_engine_req_t    ra, rb;
    kvs_engine_out_t    first, a, b, a0, b0;
    kvs_engine_stats_t  st;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    unlink(TIER_FILE);
    on = engine_new(&md, 1, delay_us);
    off = engine_new(&md, 0, 0);
    kvs_test_engine_fill(conv, 72, 31, md.m->hp.n_vocab, md.v->bos);
    kvs_test_engine_fill(other, LONG, 77, md.m->hp.n_vocab, md.v->bos);

    kvs_test_engine_req(&ra, conv, 64, 8, 5);
    kvs_test_engine_run(on, &ra, &first, NULL, NULL);
    assert_int_equal(first.n_cached, 0);

    kvs_test_engine_req(&ra, other, LONG, LONG_GEN, 5);
    kvs_test_engine_req(&rb, conv, 72, 8, 5);
    run2(off, &ra, &rb, &a0, &b0, &max_ns);
    run2(on, &ra, &rb, &a, &b, &max_ns);
    kvs_test_engine_same(&a, &a0, "the long request");
    kvs_test_engine_same(&b, &b0, "the follow-up, loaded at admission");

    kvs_engine_stats(on, &st);
    printf("follow-up: %u cached, %u of them from the tier; %" PRIu64
           " loads at admission, %" PRIu64 " blocks from the spill "
           "queue; longest step %.1f ms\n", b.n_cached, b.n_cached_tier,
           st.tier.admit_loads, st.tier.queued_blocks,
           (double) max_ns / 1e6);

    /* its 4 whole blocks are reused: those evicted while it waited
     * (the deepest first) came back from the tier at its admission */
    assert_int_equal(b.n_cached, 64);
    assert_true(b.n_cached_tier >= BT && b.n_cached_tier % BT == 0);
    assert_true(st.tier.admit_loads >= 1);
    assert_int_equal(st.tier.corrupt, 0);

    if (queued) {
        /* still queued for the slow disk: the loader waited for the
         * writes, no step did (a step that waited for one would take
         * 300 ms; steps here take 20-40 ms, more on a loaded machine) */
        assert_true(st.tier.queued_blocks > 0);
        assert_true(max_ns < 250000000ull);
    }

    kvs_engine_out_free(&first);
    kvs_engine_out_free(&a);
    kvs_engine_out_free(&b);
    kvs_engine_out_free(&a0);
    kvs_engine_out_free(&b0);
    kvs_engine_free(on);
    kvs_engine_free(off);
    unlink(TIER_FILE);
    kvs_test_model_free(&md);
}


static void
test_loaded_at_admission(void **state)
{
    waited_one(0, 0);
}


static void
test_loaded_from_the_queue(void **state)
{
    waited_one(300000, 1);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loaded_at_admission),
        cmocka_unit_test(test_loaded_from_the_queue),
    };

    return cmocka_run_group_tests(tests, 0, NULL);
}
