/*
 * kvs_test_sched.h: the scheduler tests' bench without a model (a pool,
 * a scheduler, MAX_SEQ sequences over one prompt buffer): adding
 * sequences, running a plan as the engine would, counting a sequence's
 * tokens in a batch, and the end check that every block came back.
 * Each test has its own env_init() (its scheduler settings).
 */

#ifndef KVS_TEST_SCHED_H
#define KVS_TEST_SCHED_H

#include "kvs_test.h"

#include "kv/kvs_kv_pool.h"
#include "sched/kvs_sched.h"

#define MAX_SEQ  8


typedef struct {
    kvs_kv_pool_t  *pool;
    kvs_sched_t     s;
    kvs_seq_t       seq[MAX_SEQ];
    int32_t         prompt[256];  /* token ids; a test fills what it uses */
} env_t;


static void
env_add(env_t *env, int i, uint32_t n_prompt, uint32_t max_tokens)
{
    kvs_err_t  err;

    assert_int_equal(kvs_seq_init(&env->seq[i], &env->s, env->prompt,
                                  n_prompt, max_tokens, &err), KVS_OK);
    kvs_sched_add(&env->s, &env->seq[i]);
}


/* Ends the test: every sequence removed, the pool whole again. */
static void
env_free(env_t *env)
{
    int        i;
    kvs_err_t  err;

    for (i = 0; i < MAX_SEQ; i++) {
        kvs_sched_remove(&env->s, &env->seq[i]);
        kvs_seq_free(&env->seq[i]);
    }

    assert_int_equal(kvs_kv_pool_used_count(env->pool), 0);
    assert_int_equal(kvs_kv_pool_check(env->pool, &err), KVS_OK);

    kvs_sched_free(&env->s);
    kvs_kv_pool_free(env->pool);
}


/* Runs the plan "as the engine would": commit, then one new token for
 * every sequence whose logits came back. */
static void
env_step(env_t *env, kvs_sched_plan_t *plan)
{
    uint32_t  i;

    kvs_sched_plan(&env->s, plan);
    kvs_sched_commit(&env->s, plan);

    for (i = 0; i < plan->n_logits; i++) {
        kvs_seq_append(plan->logits_seq[i], 42);
    }
}


static int
batch_count(const kvs_sched_plan_t *plan, const kvs_seq_t *seq)
{
    uint32_t  i;
    int       n;

    n = 0;

    for (i = 0; i < plan->batch.n; i++) {
        n += plan->batch.toks[i].table == &seq->table;
    }

    return n;
}


#endif /* KVS_TEST_SCHED_H */
