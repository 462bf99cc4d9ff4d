/*
 * test_sched_pool: the scheduler's KV pools (kvs_sched.h, docs/pools.md)
 * without a model: requests classed by their whole need, refusal of a
 * long one its pool can never hold, the long pool's share and prefill
 * slots, a long one admitted with its whole need and never preempted,
 * short ones leaving the waiting long one its blocks, long prefills
 * after short ones but at least every other step, the queue deadline
 * and its Retry-After from the measured rate of freed blocks, and the
 * pools' counts.  Expected plans are worked out by hand from the rules.
 */

#include "kvs_test_sched.h"


/* Blocks of 4 tokens, a step budget of 64, long from 24 tokens. */
static void
env_init(env_t *env, uint32_t n_blocks, uint32_t share_milli,
    uint32_t max_prefill, uint32_t chunk, uint32_t timeout_ms)
{
    uint32_t          i;
    kvs_err_t         err;
    kvs_sched_conf_t  conf;

    memset(env, 0, sizeof(env_t));

    for (i = 0; i < 128; i++) {
        env->prompt[i] = (int32_t) (i * 5 % 97);
    }

    assert_int_equal(kvs_kv_pool_new(&env->pool, n_blocks, 4, &err),
                     KVS_OK);

    memset(&conf, 0, sizeof(conf));
    conf.max_batch_tokens = 64;
    conf.max_running = MAX_SEQ;
    conf.n_ctx = 128;
    conf.chunked_prefill = 1;
    conf.no_fair = 1;
    conf.pool_min_tokens = 24;
    conf.pool_share_milli = share_milli;
    conf.pool_max_prefill = max_prefill;
    conf.pool_chunk = chunk;
    conf.queue_timeout_ms = timeout_ms;

    assert_int_equal(kvs_sched_init(&env->s, &conf, env->pool, &err),
                     KVS_OK);
    assert_int_equal(env->s.pools_on, 1);
}


static void
env_end(env_t *env, int i)
{
    kvs_sched_remove(&env->s, &env->seq[i]);
}


static void
test_classes(void **state)
{
    env_t             env;
    kvs_err_t         err;
    kvs_seq_t         big;
    kvs_sched_t       s;
    kvs_sched_conf_t  conf;

    (void) state;

    /* 32 blocks, the long pool half of them: 16 */
    env_init(&env, 32, 500, 1, 0, 0);
    assert_int_equal(env.s.pools[KVS_POOL_LONG].max_blocks, 16);
    assert_int_equal(env.s.pools[KVS_POOL_SHORT].max_blocks, 32);

    /* 23 tokens: short; 24: long; the need is of all but the last */
    env_add(&env, 0, 20, 3);
    assert_int_equal(env.seq[0].pool, KVS_POOL_SHORT);
    assert_int_equal(env.seq[0].need, 6);
    env_add(&env, 1, 20, 4);
    assert_int_equal(env.seq[1].pool, KVS_POOL_LONG);
    assert_int_equal(env.seq[1].need, 6);

    /* 65 tokens need 16 blocks: the whole long pool; 66 need 17 */
    env_add(&env, 2, 60, 5);
    assert_int_equal(env.seq[2].need, 16);
    memset(&big, 0, sizeof(big));
    assert_int_equal(kvs_seq_init(&big, &env.s, env.prompt, 60, 6, &err),
                     KVS_ERANGE);
    assert_non_null(strstr(err.msg, "17 KV blocks"));
    assert_non_null(strstr(err.msg, "long pool may hold 16"));
    assert_null(big.tokens);

    env_free(&env);

    /* the conf's bounds */
    assert_int_equal(kvs_kv_pool_new(&env.pool, 8, 4, &err), KVS_OK);
    memset(&conf, 0, sizeof(conf));
    conf.max_batch_tokens = 8;
    conf.max_running = 2;
    conf.n_ctx = 32;
    conf.pool_min_tokens = 8;
    conf.pool_max_prefill = 1;
    assert_int_equal(kvs_sched_init(&s, &conf, env.pool, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "share"));
    conf.pool_share_milli = 1001;
    assert_int_equal(kvs_sched_init(&s, &conf, env.pool, &err), KVS_EINVAL);
    conf.pool_share_milli = 1000;
    conf.pool_max_prefill = 0;
    assert_int_equal(kvs_sched_init(&s, &conf, env.pool, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "max_prefill"));

    /* with a window, no pools: everything is short */
    conf.pool_max_prefill = 1;
    conf.window = 4;
    assert_int_equal(kvs_sched_init(&s, &conf, env.pool, &err), KVS_OK);
    assert_int_equal(s.pools_on, 0);
    kvs_sched_free(&s);
    kvs_kv_pool_free(env.pool);
}


/* An admitted long sequence holds its whole need, and the short ones
 * running out of blocks preempt themselves rather than it, though it is
 * the newest. */
static void
test_never_preempted(void **state)
{
    int               i;
    env_t             env;
    kvs_seq_t        *s1, *l;
    kvs_sched_plan_t  plan;

    (void) state;

    env_init(&env, 12, 1000, 1, 0, 0);
    s1 = &env.seq[0];
    l = &env.seq[1];

    /* S1: 4 + 19 tokens, short, needs 6 blocks (of 12) */
    env_add(&env, 0, 4, 19);
    env_step(&env, &plan);
    assert_int_equal(s1->state, KVS_SEQ_RUNNING);
    assert_int_equal(s1->table.n_blocks, 1);

    /* L: 12 + 20, long, 8 blocks: all of them at its admission, in a
     * step without a short prefill */
    env_add(&env, 1, 12, 20);
    env_step(&env, &plan);
    assert_int_equal(l->state, KVS_SEQ_RUNNING);
    assert_int_equal(l->table.n_blocks, 8);
    assert_int_equal(batch_count(&plan, l), 12);
    assert_int_equal(kvs_kv_pool_free_count(env.pool), 2);

    kvs_sched_kv_count(&env.s);
    assert_int_equal(env.s.pools[KVS_POOL_LONG].used, 8);
    assert_int_equal(env.s.pools[KVS_POOL_SHORT].used, 2);

    /* S1 grows into the last free blocks, then lacks one: the newest
     * running is L, which is never a victim, so S1 goes */
    for (i = 0; i < 16 && s1->n_preempted == 0; i++) {
        env_step(&env, &plan);
        assert_int_equal(l->table.n_blocks, 8);
    }

    assert_int_equal(s1->n_preempted, 1);
    assert_int_equal(s1->state, KVS_SEQ_WAITING);
    assert_int_equal(l->state, KVS_SEQ_RUNNING);
    assert_int_equal(l->n_preempted, 0);
    assert_int_equal(env.s.n_preemptions, 1);

    /* S1's whole need does not fit beside L: it waits; L ends, S1 is
     * back */
    env_step(&env, &plan);
    assert_int_equal(s1->state, KVS_SEQ_WAITING);
    env_end(&env, 1);
    env_step(&env, &plan);
    assert_int_equal(s1->state, KVS_SEQ_RUNNING);

    env_free(&env);
}


/* max_prefill: one long prefill at a time; share: long ones wait for
 * the pool's share while blocks are free, and short ones go past. */
static void
test_share_and_prefill(void **state)
{
    env_t             env;
    kvs_seq_t        *l1, *l2, *l3, *s;
    kvs_sched_plan_t  plan;

    (void) state;

    /* 32 blocks, the long pool 16; long prefills 4 tokens a step */
    env_init(&env, 32, 500, 1, 4, 0);
    l1 = &env.seq[0];
    l2 = &env.seq[1];
    l3 = &env.seq[2];
    s = &env.seq[3];

    /* L1, L2: 20 + 8, 7 blocks each; L3 the same */
    env_add(&env, 0, 20, 8);
    env_add(&env, 1, 20, 8);

    env_step(&env, &plan);
    assert_int_equal(l1->state, KVS_SEQ_RUNNING);
    assert_int_equal(batch_count(&plan, l1), 4);
    assert_int_equal(l2->state, KVS_SEQ_WAITING);

    /* L2 waits for L1's prefill (5 steps of 4) */
    while (l1->n_computed < l1->n_prompt) {
        assert_int_equal(l2->state, KVS_SEQ_WAITING);
        env_step(&env, &plan);
    }

    /* the step that ended L1's prefill took the slot's last tokens;
     * the next admits L2 */
    env_step(&env, &plan);
    assert_int_equal(l2->state, KVS_SEQ_RUNNING);

    /* L3 would make 21 blocks of the long pool's 16: it waits, though
     * 18 blocks are free, and a short one arriving after it runs */
    env_add(&env, 2, 20, 8);
    env_add(&env, 3, 4, 16);

    while (l2->n_computed < l2->n_prompt) {
        env_step(&env, &plan);
    }

    env_step(&env, &plan);
    assert_true(kvs_kv_pool_free_count(env.pool) >= 7);
    assert_int_equal(l3->state, KVS_SEQ_WAITING);
    assert_int_equal(s->state, KVS_SEQ_RUNNING);

    kvs_sched_kv_count(&env.s);
    assert_int_equal(env.s.pools[KVS_POOL_LONG].used, 14);
    assert_int_equal(env.s.pools[KVS_POOL_LONG].queued, 1);

    /* L1 ends: L3 fits the share */
    env_end(&env, 0);
    env_step(&env, &plan);
    env_step(&env, &plan);
    assert_int_equal(l3->state, KVS_SEQ_RUNNING);
    assert_int_equal(env.s.pools[KVS_POOL_LONG].admitted, 3);

    env_free(&env);
}


/* The waiting long one's need is held: a short one that would eat into
 * it waits, though it alone would fit. */
static void
test_hold(void **state)
{
    int               i;
    env_t             env;
    kvs_seq_t        *l, *s3;
    kvs_sched_plan_t  plan;

    (void) state;

    env_init(&env, 12, 1000, 1, 0, 0);
    l = &env.seq[3];
    s3 = &env.seq[4];

    /* three short ones of 4 + 12 tokens: after 6 steps, 3 blocks each */
    for (i = 0; i < 3; i++) {
        env_add(&env, i, 4, 12);
    }

    for (i = 0; i < 6; i++) {
        env_step(&env, &plan);
    }

    assert_int_equal(kvs_kv_pool_free_count(env.pool), 3);

    /* L: 16 + 8, 6 blocks; S3: 4 + 2, 2 blocks, which are free */
    env.s.now = 100;
    env_add(&env, 3, 16, 8);
    env_add(&env, 4, 4, 2);
    assert_int_equal(s3->need, 2);

    env.s.now = 200;
    env_step(&env, &plan);
    assert_int_equal(l->state, KVS_SEQ_WAITING);
    assert_int_equal(s3->state, KVS_SEQ_WAITING);

    /* one short one ends: 6 free, L's need; S3 still leaves them */
    env_end(&env, 0);
    env.s.now = 300;
    env_step(&env, &plan);
    assert_int_equal(l->state, KVS_SEQ_RUNNING);
    assert_int_equal(l->table.n_blocks, 6);
    assert_int_equal(s3->state, KVS_SEQ_WAITING);

    /* the others end: S3 runs, having waited 300 ms */
    env_end(&env, 1);
    env_end(&env, 2);
    env.s.now = 400;
    env_step(&env, &plan);
    assert_int_equal(s3->state, KVS_SEQ_RUNNING);

    assert_int_equal(env.s.pools[KVS_POOL_SHORT].admitted, 4);
    assert_int_equal(env.s.pools[KVS_POOL_SHORT].waited, 1);
    assert_int_equal(env.s.pools[KVS_POOL_SHORT].wait_ms, 300);
    assert_int_equal(env.s.pools[KVS_POOL_LONG].waited, 1);
    assert_int_equal(env.s.pools[KVS_POOL_LONG].wait_ms, 200);

    env_free(&env);
}


/* Long prefills come after short ones: not in a step that prefills a
 * short prompt, unless the last step left them out. */
static void
test_short_first(void **state)
{
    int               i;
    env_t             env;
    kvs_seq_t        *l;
    kvs_sched_plan_t  plan;

    (void) state;

    env_init(&env, 64, 1000, 1, 4, 0);
    l = &env.seq[0];

    /* L: 40 + 4; alone, it prefills 4 tokens a step */
    env_add(&env, 0, 40, 4);
    env_step(&env, &plan);
    assert_int_equal(batch_count(&plan, l), 4);
    env_step(&env, &plan);
    assert_int_equal(batch_count(&plan, l), 4);

    /* a short arrival every step: L advances every other step */
    for (i = 1; i <= 6; i++) {
        env_add(&env, i, 4, 8);
        env_step(&env, &plan);
        assert_int_equal(batch_count(&plan, &env.seq[i]), 4);
        assert_int_equal(batch_count(&plan, l), i % 2 == 1 ? 0 : 4);
        assert_int_equal(plan.n_prefill, i % 2 == 1 ? 4 : 8);
    }

    assert_int_equal(l->n_computed, 20);

    env_free(&env);
}


/* The queue deadline: a request never admitted leaves the queue, counted
 * refused, holding nothing; Retry-After is the blocks it lacks over the
 * measured rate of blocks freed. */
static void
test_expire(void **state)
{
    env_t             env;
    uint32_t          free0;
    kvs_seq_t        *l, *list;
    kvs_sched_plan_t  plan;

    (void) state;

    env_init(&env, 12, 1000, 1, 0, 1500);
    l = &env.seq[2];

    /* S0, S1: 8 + 15, short, 6 blocks each; 3 held after two steps */
    env.s.now = 1000;
    env_add(&env, 0, 8, 15);
    env_add(&env, 1, 8, 15);
    env_step(&env, &plan);

    /* L: 44 + 4, long, all 12 blocks */
    env_add(&env, 2, 44, 4);
    assert_int_equal(l->need, 12);
    env_step(&env, &plan);
    assert_int_equal(l->state, KVS_SEQ_WAITING);

    /* nothing freed yet: the timeout's seconds */
    assert_int_equal(kvs_sched_retry_after(&env.s, l), 2);

    /* S0 gives back 3 blocks; 2 s later the rate is 1.5 blocks/s */
    env.s.now = 1500;
    env_end(&env, 0);
    env.s.now = 3000;
    env_step(&env, &plan);
    assert_true(env.s.free_rate > 1.49 && env.s.free_rate < 1.51);
    assert_int_equal(l->state, KVS_SEQ_WAITING);

    /* L lacks 12 - (12 - 3 held by S1) = 3 blocks: 3 / 1.5 = 2 s */
    assert_int_equal(kvs_sched_retry_after(&env.s, l), 2);

    /* not yet at 2499 ms, at 2500 ms */
    free0 = kvs_kv_pool_free_count(env.pool);
    env.s.now = 2499;
    assert_null(kvs_sched_expire(&env.s));
    env.s.now = 2500;
    list = kvs_sched_expire(&env.s);
    assert_ptr_equal(list, l);
    assert_null(list->step_next);
    assert_int_equal(l->state, KVS_SEQ_NEW);
    assert_int_equal(env.s.waiting.n, 0);
    assert_int_equal(env.s.pools[KVS_POOL_LONG].refused, 1);
    assert_int_equal(env.s.pools[KVS_POOL_SHORT].refused, 0);
    assert_int_equal(kvs_kv_pool_free_count(env.pool), free0);

    /* an admitted one never expires */
    env.s.now = 1000;
    env_add(&env, 3, 4, 4);
    env_step(&env, &plan);
    env.s.now = 100000;
    assert_null(kvs_sched_expire(&env.s));
    assert_int_equal(env.seq[3].state, KVS_SEQ_RUNNING);

    env_free(&env);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_classes),
        cmocka_unit_test(test_never_preempted),
        cmocka_unit_test(test_share_and_prefill),
        cmocka_unit_test(test_hold),
        cmocka_unit_test(test_short_first),
        cmocka_unit_test(test_expire),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
