/*
 * test_kv_tier_cost: the load-or-recompute choice (kvs_tier_cost): load
 * while unmeasured, then only when bytes / load rate < tokens / prefill
 * rate (strictly); the duration-weighted means worked out by hand; bad
 * samples and a bad half-life change nothing.
 */

#include "kvs_test.h"

#include "kv/kvs_tier_cost.h"

#define S  1000000000ull              /* ns per second */


static void
test_choice(void **state)
{
    kvs_tier_cost_t  c;

    kvs_tier_cost_init(&c, 10);

    /* unmeasured: load (to measure), but never an empty run */
    assert_true(kvs_tier_cost_worth(&c, 16, 1ull << 30));
    assert_false(kvs_tier_cost_worth(&c, 0, 100));

    /* 1 GB/s from the tier, 1000 prompt tokens/s */
    kvs_tier_cost_load(&c, 1000000000, S);
    assert_true(kvs_tier_cost_worth(&c, 16, 1 << 20));
    kvs_tier_cost_prefill(&c, 1000, S);
    assert_true(c.load_bps == 1e9 && c.prefill_tps == 1000);

    /* 16 tokens in 1 MiB: 1.05 ms to load, 16 ms to compute */
    assert_true(kvs_tier_cost_worth(&c, 16, 1 << 20));
    /* 16 tokens in 100 MB: 100 ms to load */
    assert_false(kvs_tier_cost_worth(&c, 16, 100000000));
    /* equal costs: 16 ms both ways, recompute */
    assert_false(kvs_tier_cost_worth(&c, 16, 16000000));
    assert_true(kvs_tier_cost_worth(&c, 16, 15999999));
}


static void
test_means(void **state)
{
    kvs_tier_cost_t  c;

    kvs_tier_cost_init(&c, 10);
    kvs_tier_cost_load(&c, 1000000000, S);

    /* 2 GB/s for 10 s, one half-life: halfway, 1.5 GB/s */
    kvs_tier_cost_load(&c, 20000000000ull, 10 * S);
    assert_true(fabs(c.load_bps - 1.5e9) < 1);

    /* 1 GB/s for 20 s, two half-lives: 1.5 - 0.5 * 0.75 = 1.125 */
    kvs_tier_cost_load(&c, 20000000000ull, 20 * S);
    assert_true(fabs(c.load_bps - 1.125e9) < 1);
    assert_int_equal(c.load_samples, 3);

    /* a 1 ms sample of 10x the rate moves it by ~0.007% of the gap */
    kvs_tier_cost_load(&c, 11250000, S / 1000);
    assert_true(c.load_bps > 1.125e9 && c.load_bps < 1.126e9);

    /* the prefill rate is its own */
    assert_true(c.prefill_tps == 0);
    kvs_tier_cost_prefill(&c, 500, S / 2);
    assert_true(c.prefill_tps == 1000);
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
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choice),
        cmocka_unit_test(test_means),
        cmocka_unit_test(test_bad),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
