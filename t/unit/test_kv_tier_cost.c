/*
 * test_kv_tier_cost: the load-or-recompute choice (kvs_tier_cost): load
 * while a rate is not trusted (fewer than KVS_TIER_COST_MIN loads), then
 * only when (bytes ahead + bytes) / load rate <= (1 + others) x
 * tokens / prefill rate (a tie loads), so a close call is loaded when
 * the prefill would hold up a batch (test_batch); the
 * load rate is the median of the last KVS_TIER_COST_WINDOW loads, so one
 * slow first load changes no choice (seed 2's geometric trace, issue
 * 26); a disk slow for good shows once it fills half the window; after
 * KVS_TIER_COST_PROBE computed runs in a row one is loaded anyway; the
 * prefill's duration-weighted mean worked out by hand; bad samples and
 * a bad half-life change nothing.
 */

#include "kvs_test.h"

#include "kv/kvs_tier_cost.h"

#define S  1000000000ull              /* ns per second */


/* n loads of 1 MB at bps bytes a second */
static void
loads(kvs_tier_cost_t *c, uint32_t n, double bps)
{
    uint32_t  i;

    for (i = 0; i < n; i++) {
        kvs_tier_cost_load(c, 1000000, (uint64_t) (1e6 / bps * 1e9));
    }
}


static void
test_choice(void **state)
{
    kvs_tier_cost_t  c;

    kvs_tier_cost_init(&c, 10);

    /* unmeasured: load (to measure), but never an empty run */
    assert_true(kvs_tier_cost_worth(&c, 16, 1ull << 30, 0, 0));
    assert_false(kvs_tier_cost_worth(&c, 0, 100, 0, 0));
    assert_false(kvs_tier_cost_decide(&c, 0, 100, 0, 0));

    /* 1000 prompt tokens/s; one or two loads are not trusted yet */
    kvs_tier_cost_prefill(&c, 1000, S);
    kvs_tier_cost_load(&c, 1000000000, S);
    kvs_tier_cost_load(&c, 1000000000, S);
    assert_true(c.load_bps == 0);
    assert_true(kvs_tier_cost_worth(&c, 16, 100000000, 0, 0));

    /* the third: 1 GB/s */
    kvs_tier_cost_load(&c, 1000000000, S);
    assert_true(c.load_bps == 1e9 && c.prefill_tps == 1000);

    /* 16 tokens in 1 MiB: 1.05 ms to load, 16 ms to compute */
    assert_true(kvs_tier_cost_worth(&c, 16, 1 << 20, 0, 0));
    /* 16 tokens in 100 MB: 100 ms to load */
    assert_false(kvs_tier_cost_worth(&c, 16, 100000000, 0, 0));
    /* equal costs: 16 ms both ways, load; a byte more, compute */
    assert_true(kvs_tier_cost_worth(&c, 16, 16000000, 0, 0));
    assert_false(kvs_tier_cost_worth(&c, 16, 16000001, 0, 0));
}


/*
 * The close calls of the tiny model's 4-user trace (issue 26): a run
 * whose read costs a little more than its prefill.  Alone in the
 * engine it is computed; with one sequence running, whose steps the
 * prefill would hold up, it is loaded; a read of 3x its prefill needs
 * 2 others, and loads queued before it count against it.
 */
static void
test_batch(void **state)
{
    kvs_tier_cost_t  c;

    kvs_tier_cost_init(&c, 10);
    kvs_tier_cost_prefill(&c, 1000, S);
    loads(&c, 3, 1e6);                /* 1 MB/s: 12288 B in 12.3 ms */

    /* 10 tokens: 10 ms of prefill against 12.3 ms of read */
    assert_false(kvs_tier_cost_worth(&c, 10, 12288, 0, 0));
    assert_true(kvs_tier_cost_worth(&c, 10, 12288, 0, 1));

    /* 4 tokens, 4 ms: 3.07x the read; 2 others make 12 ms, 3 16 ms */
    assert_false(kvs_tier_cost_worth(&c, 4, 12288, 0, 1));
    assert_false(kvs_tier_cost_worth(&c, 4, 12288, 0, 2));
    assert_true(kvs_tier_cost_worth(&c, 4, 12288, 0, 3));

    /* 16 tokens, 16 ms against 12.3 ms: loaded alone, but not behind
     * 8 KB of loads under way (20.5 ms), unless one other runs (32 ms) */
    assert_true(kvs_tier_cost_worth(&c, 16, 12288, 0, 0));
    assert_false(kvs_tier_cost_worth(&c, 16, 12288, 8192, 0));
    assert_true(kvs_tier_cost_worth(&c, 16, 12288, 8192, 1));

    /* the choice follows the rule: no probe needed for a loaded one */
    assert_true(kvs_tier_cost_decide(&c, 10, 12288, 0, 1));
    assert_false(kvs_tier_cost_decide(&c, 10, 12288, 0, 0));
    assert_int_equal(c.declined, 1);
    assert_int_equal(c.probes, 0);

    /* unmeasured rates load whatever queues ahead */
    kvs_tier_cost_init(&c, 10);
    assert_true(kvs_tier_cost_worth(&c, 1, 1ull << 30, 1ull << 30, 0));
}


/* Seed 2's geometric trace: the first load, under load, ran at a tenth
 * of the disk's speed.  The median of the window does not follow it. */
static void
test_slow_first_load(void **state)
{
    kvs_tier_cost_t  c;

    kvs_tier_cost_init(&c, 10);
    kvs_tier_cost_prefill(&c, 1000, S);

    /* 16 tokens in 12 KiB: compute 16 ms; load at 100 MB/s 0.12 ms, at
     * 0.5 MB/s 24.6 ms */
    loads(&c, 1, 0.5e6);
    assert_true(kvs_tier_cost_decide(&c, 16, 12288, 0, 0));
    loads(&c, 2, 100e6);
    assert_true(fabs(c.load_bps - 100e6) < 1);
    assert_true(kvs_tier_cost_decide(&c, 16, 12288, 0, 0));

    /* slow for good: 3 and 4 of 8 slow are not a majority (with 4 the
     * median is the mean of the middle two), 5 of 8 are */
    loads(&c, 5, 100e6);
    loads(&c, 3, 0.5e6);
    assert_int_equal(c.win_n, KVS_TIER_COST_WINDOW);
    assert_true(kvs_tier_cost_worth(&c, 16, 12288, 0, 0));
    loads(&c, 1, 0.5e6);
    assert_true(fabs(c.load_bps - (100e6 + 0.5e6) / 2) < 1);
    assert_true(kvs_tier_cost_worth(&c, 16, 12288, 0, 0));
    loads(&c, 1, 0.5e6);
    assert_true(fabs(c.load_bps - 0.5e6) < 1e-3);
    assert_false(kvs_tier_cost_worth(&c, 16, 12288, 0, 0));

    /* and fast again: it follows once fast ones are the majority */
    loads(&c, 3, 100e6);
    assert_false(kvs_tier_cost_worth(&c, 16, 12288, 0, 0));
    loads(&c, 1, 100e6);
    assert_true(kvs_tier_cost_worth(&c, 16, 12288, 0, 0));
    assert_int_equal(c.load_samples, 17);
}


static void
test_probe(void **state)
{
    uint32_t         i;
    kvs_tier_cost_t  c;

    kvs_tier_cost_init(&c, 10);
    kvs_tier_cost_prefill(&c, 1000, S);
    loads(&c, 3, 0.5e6);

    /* computed _PROBE - 1 times, then one load; a load's sample starts
     * the count again */
    for (i = 0; i + 1 < KVS_TIER_COST_PROBE; i++) {
        assert_false(kvs_tier_cost_decide(&c, 16, 12288, 0, 0));
    }

    assert_true(kvs_tier_cost_decide(&c, 16, 12288, 0, 0));
    assert_int_equal(c.probes, 1);
    assert_false(kvs_tier_cost_decide(&c, 16, 12288, 0, 0));
    loads(&c, 1, 0.5e6);
    assert_int_equal(c.declined, 0);

    for (i = 0; i + 1 < KVS_TIER_COST_PROBE; i++) {
        assert_false(kvs_tier_cost_decide(&c, 16, 12288, 0, 0));
    }

    assert_true(kvs_tier_cost_decide(&c, 16, 12288, 0, 0));
    assert_int_equal(c.probes, 2);

    /* a run worth loading by the rule is no probe */
    assert_true(kvs_tier_cost_decide(&c, 16, 1000, 0, 0));
    assert_int_equal(c.probes, 2);
}


static void
test_prefill_mean(void **state)
{
    kvs_tier_cost_t  c;

    kvs_tier_cost_init(&c, 10);
    kvs_tier_cost_prefill(&c, 1000, S);

    /* 2000 tok/s for 10 s, one half-life: halfway, 1500 */
    kvs_tier_cost_prefill(&c, 20000, 10 * S);
    assert_true(fabs(c.prefill_tps - 1500) < 1e-9);

    /* 1000 tok/s for 20 s, two half-lives: 1500 - 500 * 0.75 = 1125 */
    kvs_tier_cost_prefill(&c, 20000, 20 * S);
    assert_true(fabs(c.prefill_tps - 1125) < 1e-9);
    assert_int_equal(c.prefill_samples, 3);

    /* a 4 ms sample of 10x the rate moves it by ~0.03% of the gap
     * (2.8 of 10,125) */
    kvs_tier_cost_prefill(&c, 45, 4 * S / 1000);
    assert_true(c.prefill_tps > 1127 && c.prefill_tps < 1129);

    /* the load rate is its own */
    assert_true(c.load_bps == 0 && c.load_samples == 0);
}


static void
test_bad(void **state)
{
    kvs_tier_cost_t  c;

    kvs_tier_cost_init(&c, 0);
    assert_true(c.half_life_s == 10);
    kvs_tier_cost_init(&c, NAN);
    assert_true(c.half_life_s == 10);

    kvs_tier_cost_load(&c, 0, S);
    kvs_tier_cost_load(&c, 100, 0);
    kvs_tier_cost_prefill(&c, 0, S);
    kvs_tier_cost_prefill(&c, 100, 0);
    assert_true(c.load_bps == 0 && c.prefill_tps == 0);
    assert_true(c.load_samples == 0 && c.prefill_samples == 0);
    assert_int_equal(c.win_n, 0);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choice),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_slow_first_load),
        cmocka_unit_test(test_probe),
        cmocka_unit_test(test_prefill_mean),
        cmocka_unit_test(test_bad),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
