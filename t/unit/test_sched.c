/*
 * test_sched: the continuous-batching scheduler without a model: what a
 * step takes (decodes first, prefill chunks within the token budget,
 * admission in arrival order), preemption of the newest running sequence
 * when the pool runs dry, up-front refusal of what can never fit, and
 * every block back in the pool at the end.  The expected plans are
 * worked out by hand from the rules in kvs_sched.h.
 */

#include "kvs_test_sched.h"


static void
env_init(env_t *env, uint32_t n_blocks, uint32_t block_tokens,
    uint32_t budget, int chunked)
{
    uint32_t          i;
    kvs_err_t         err;
    kvs_sched_conf_t  conf;

    memset(env, 0, sizeof(env_t));

    for (i = 0; i < 256; i++) {
        env->prompt[i] = (int32_t) (i * 7 % 100);
    }

    assert_int_equal(kvs_kv_pool_new(&env->pool, n_blocks, block_tokens,
                                     &err), KVS_OK);

    memset(&conf, 0, sizeof(conf));
    conf.max_batch_tokens = budget;
    conf.max_running = 4;
    conf.n_ctx = 128;
    conf.chunked_prefill = chunked;

    assert_int_equal(kvs_sched_init(&env->s, &conf, env->pool, &err),
                     KVS_OK);
}


static void
test_chunked_prefill(void **state)
{
    env_t             env;
    kvs_sched_plan_t  plan;

    (void) state;

    /* budget 8: A (3 tokens) and B (20 tokens) arrive together */
    env_init(&env, 64, 4, 8, 1);
    env_add(&env, 0, 3, 10);
    env_add(&env, 1, 20, 10);

    /* step 1: A's whole prompt, then 5 of B's */
    env_step(&env, &plan);
    assert_int_equal(plan.batch.n, 8);
    assert_int_equal(batch_count(&plan, &env.seq[0]), 3);
    assert_int_equal(batch_count(&plan, &env.seq[1]), 5);
    assert_int_equal(plan.n_logits, 1);
    assert_ptr_equal(plan.logits_seq[0], &env.seq[0]);
    assert_int_equal(env.seq[1].n_computed, 5);

    /* step 2: A decodes one, B goes on with 7: B is prefilled in chunks
     * while A keeps decoding */
    env_step(&env, &plan);
    assert_int_equal(batch_count(&plan, &env.seq[0]), 1);
    assert_int_equal(batch_count(&plan, &env.seq[1]), 7);
    assert_int_equal(plan.n_decode, 1);
    assert_int_equal(plan.n_prefill, 7);
    assert_int_equal(plan.batch.toks[0].pos, 3);

    /* step 3: A 1, B 7 more (19 of 20) */
    env_step(&env, &plan);
    assert_int_equal(env.seq[1].n_computed, 19);
    assert_int_equal(plan.n_logits, 1);

    /* step 4: B's last prompt token gives its first logits */
    env_step(&env, &plan);
    assert_int_equal(batch_count(&plan, &env.seq[1]), 1);
    assert_int_equal(plan.n_logits, 2);
    assert_int_equal(env.seq[1].n_tokens, 21);

    /* blocks cover exactly what is cached, rounded up to a block */
    assert_int_equal(env.seq[1].table.n_blocks, 5);
    assert_int_equal(env.seq[0].table.n_blocks, 2);

    env_free(&env);
}


static void
test_no_chunking(void **state)
{
    env_t             env;
    kvs_err_t         err;
    kvs_seq_t         big;
    kvs_sched_plan_t  plan;

    (void) state;

    env_init(&env, 64, 4, 8, 0);

    /* 7 + 2 - 1 = 8 cached positions fit the budget; 9 do not */
    assert_int_equal(kvs_seq_init(&big, &env.s, env.prompt, 8, 2, &err),
                     KVS_ERANGE);
    assert_non_null(strstr(err.msg, "chunked prefill"));

    env_add(&env, 0, 3, 4);
    env_add(&env, 1, 7, 2);

    /* B does not fit after A in one step, and is not split */
    env_step(&env, &plan);
    assert_int_equal(plan.batch.n, 3);
    assert_int_equal(env.s.waiting.n, 1);

    env_step(&env, &plan);
    assert_int_equal(plan.batch.n, 8);
    assert_int_equal(batch_count(&plan, &env.seq[1]), 7);

    env_free(&env);
}


static void
test_preempt_newest(void **state)
{
    int               i;
    env_t             env;
    uint32_t          before;
    kvs_sched_plan_t  plan;

    (void) state;

    /* 6 blocks of 2 tokens; three sequences of prompt 3 take 2 blocks
     * each and fill the pool */
    env_init(&env, 6, 2, 64, 1);
    env_add(&env, 0, 3, 6);
    env_add(&env, 1, 3, 6);
    env_add(&env, 2, 3, 6);

    env_step(&env, &plan);
    assert_int_equal(plan.n_logits, 3);
    assert_int_equal(kvs_kv_pool_free_count(env.pool), 0);

    /* all three now decode position 3, which fits their second block */
    env_step(&env, &plan);
    assert_int_equal(plan.n_decode, 3);

    /* position 4 needs a third block each: the oldest two take the
     * newest's blocks, the newest goes back to waiting */
    before = (uint32_t) env.s.n_preemptions;
    env_step(&env, &plan);
    assert_int_equal(env.s.n_preemptions, before + 1);
    assert_int_equal(env.seq[2].state, KVS_SEQ_WAITING);
    assert_int_equal(env.seq[2].n_computed, 0);
    assert_int_equal(env.seq[2].table.n_blocks, 0);
    assert_int_equal(env.seq[2].n_preempted, 1);
    assert_int_equal(batch_count(&plan, &env.seq[0]), 1);
    assert_int_equal(batch_count(&plan, &env.seq[1]), 1);
    assert_int_equal(batch_count(&plan, &env.seq[2]), 0);

    /* its tokens, generated ones included, are kept for the recompute */
    assert_int_equal(env.seq[2].n_tokens, 5);

    /* when A finishes, C comes back and recomputes all 5 tokens */
    kvs_sched_remove(&env.s, &env.seq[0]);

    for (i = 0; i < 4 && env.seq[2].state == KVS_SEQ_WAITING; i++) {
        env_step(&env, &plan);
    }

    assert_int_equal(env.seq[2].state, KVS_SEQ_RUNNING);
    assert_int_equal(batch_count(&plan, &env.seq[2]), 5);
    assert_int_equal(env.seq[2].n_tokens, 6);

    env_free(&env);
}


static void
test_preempt_self(void **state)
{
    env_t             env;
    kvs_sched_plan_t  plan;

    (void) state;

    /* one sequence alone always fits: it was checked against the pool */
    env_init(&env, 2, 2, 64, 1);
    env_add(&env, 0, 1, 4);
    env_add(&env, 1, 1, 4);

    env_step(&env, &plan);
    assert_int_equal(plan.n_logits, 2);

    /* position 1 fits block 0 of each */
    env_step(&env, &plan);
    assert_int_equal(plan.n_logits, 2);

    /* position 2 needs a second block each: the newest yields */
    env_step(&env, &plan);
    assert_int_equal(env.seq[1].state, KVS_SEQ_WAITING);
    assert_int_equal(plan.n_logits, 1);
    assert_int_equal(env.s.n_preemptions, 1);

    env_free(&env);
}


static void
test_refusals(void **state)
{
    env_t      env;
    kvs_err_t  err;
    kvs_seq_t  seq;

    (void) state;

    env_init(&env, 8, 4, 64, 1);

    /* the context is 128 */
    assert_int_equal(kvs_seq_init(&seq, &env.s, env.prompt, 100, 29, &err),
                     KVS_ERANGE);
    assert_non_null(strstr(err.msg, "129 tokens"));
    assert_non_null(strstr(err.msg, "context of 128"));

    /* 8 blocks of 4 hold 32 positions: 30 + 3 - 1 = 32 fits, 33 not */
    assert_int_equal(kvs_seq_init(&seq, &env.s, env.prompt, 30, 3, &err),
                     KVS_OK);
    kvs_seq_free(&seq);
    assert_int_equal(kvs_seq_init(&seq, &env.s, env.prompt, 30, 4, &err),
                     KVS_ERANGE);
    assert_non_null(strstr(err.msg, "9 KV blocks"));

    assert_int_equal(kvs_seq_init(&seq, &env.s, env.prompt, 0, 4, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_seq_init(&seq, &env.s, env.prompt, 3, 0, &err),
                     KVS_EINVAL);

    /* refusals change nothing */
    assert_int_equal(env.s.waiting.n, 0);
    assert_int_equal(kvs_kv_pool_used_count(env.pool), 0);

    env_free(&env);
}


static void
test_admission_order(void **state)
{
    int               i;
    env_t             env;
    kvs_sched_plan_t  plan;

    (void) state;

    /* max_running 4: the fifth waits for a slot, then goes first among
     * the waiting */
    env_init(&env, 64, 4, 64, 1);

    for (i = 0; i < 5; i++) {
        env_add(&env, i, 2, 3);
    }

    env_step(&env, &plan);
    assert_int_equal(env.s.running.n, 4);
    assert_int_equal(env.seq[4].state, KVS_SEQ_WAITING);

    /* the queue is in arrival order */
    assert_ptr_equal(env.s.running.head, &env.seq[0]);
    assert_ptr_equal(env.s.running.tail, &env.seq[3]);

    kvs_sched_remove(&env.s, &env.seq[1]);
    env_step(&env, &plan);
    assert_int_equal(env.seq[4].state, KVS_SEQ_RUNNING);
    assert_ptr_equal(env.s.running.tail, &env.seq[4]);

    env_free(&env);
}


static void
test_fork_cow(void **state)
{
    env_t             env;
    uint32_t          b0, b1;
    kvs_sched_plan_t  plan;

    (void) state;

    /* blocks of 4; a prompt of 6 fills block 0 and half of block 1 */
    env_init(&env, 16, 4, 64, 1);
    env_add(&env, 0, 6, 5);
    env_step(&env, &plan);
    assert_int_equal(env.seq[0].n_computed, 6);

    /* the second choice shares both blocks */
    assert_int_equal(kvs_seq_init(&env.seq[1], &env.s, env.prompt, 6, 5,
                                  NULL), KVS_OK);
    assert_int_equal(kvs_sched_fork(&env.s, &env.seq[0], &env.seq[1]), 1);
    kvs_seq_append(&env.seq[1], 43);

    b0 = env.seq[0].table.blocks[0];
    b1 = env.seq[0].table.blocks[1];
    assert_int_equal(env.seq[1].n_computed, 6);
    assert_int_equal(env.seq[1].table.blocks[1], b1);
    assert_int_equal(kvs_kv_pool_refcount(env.pool, b1), 2);
    assert_int_equal(kvs_kv_pool_used_count(env.pool), 2);

    /* both write position 6, in the shared half-full block: the first
     * planned (the older) copies it, the other then owns it alone */
    env_step(&env, &plan);
    assert_int_equal(plan.n_cow, 1);
    assert_int_equal(plan.cow_src[0], b1);
    assert_int_equal(plan.cow_dst[0], env.seq[0].table.blocks[1]);
    assert_int_not_equal(env.seq[0].table.blocks[1], b1);
    assert_int_equal(env.seq[1].table.blocks[1], b1);
    assert_int_equal(kvs_kv_pool_refcount(env.pool, b1), 1);

    /* the full block stays shared; nothing more to copy */
    assert_int_equal(env.seq[1].table.blocks[0], b0);
    assert_int_equal(kvs_kv_pool_refcount(env.pool, b0), 2);
    assert_int_equal(kvs_kv_pool_used_count(env.pool), 3);
    env_step(&env, &plan);
    assert_int_equal(plan.n_cow, 0);

    env_free(&env);
}


static void
test_fork_no_slot(void **state)
{
    int               i;
    env_t             env;
    kvs_sched_plan_t  plan;

    (void) state;

    /* max_running 4, all taken: a fork is queued to compute itself */
    env_init(&env, 64, 4, 64, 1);

    for (i = 0; i < 4; i++) {
        env_add(&env, i, 5, 3);
    }

    env_step(&env, &plan);
    assert_int_equal(kvs_seq_init(&env.seq[4], &env.s, env.prompt, 5, 3,
                                  NULL), KVS_OK);
    assert_int_equal(kvs_sched_fork(&env.s, &env.seq[0], &env.seq[4]), 0);
    assert_int_equal(env.seq[4].state, KVS_SEQ_WAITING);
    assert_int_equal(env.seq[4].table.n_blocks, 0);

    env_free(&env);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_chunked_prefill),
        cmocka_unit_test(test_no_chunking),
        cmocka_unit_test(test_preempt_newest),
        cmocka_unit_test(test_preempt_self),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_admission_order),
        cmocka_unit_test(test_fork_cow),
        cmocka_unit_test(test_fork_no_slot),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
