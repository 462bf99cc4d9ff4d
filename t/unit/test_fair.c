/*
 * test_fair: tenants' virtual token counters (kvs_fair) and the order in
 * which the scheduler admits waiting sequences by them, without a model.
 * Expected orders are worked out by hand from kvs_fair.h's rules:
 * counters grow by weighted tokens computed, the least served tenant's
 * oldest sequence goes first (the oldest wins a tie), a tenant back from
 * idle starts level with the least served present, and a tenant over its
 * KV cap is passed over while others wait; a tenant or a request (a
 * group) over its cap loses its newest running sequence when another's
 * needs blocks the pool lacks.
 */

#include "kvs_test.h"
#include "kvs_test_model.h"

#include "engine/kvs_engine.h"
#include "kv/kvs_kv_pool.h"
#include "sched/kvs_sched.h"

#define N_SEQ  6


typedef struct {
    kvs_kv_pool_t  *pool;
    kvs_sched_t     s;
    kvs_seq_t       seq[N_SEQ];
    int32_t         prompt[64];
    int             admitted[N_SEQ];  /* order of first scheduling */
    int             n_admitted;
    uint32_t        max_tokens[N_SEQ];
} env_t;


static void
env_init_fifo(env_t *env, uint32_t n_blocks, uint32_t max_running,
    uint32_t kv_max_milli, int no_fair)
{
    uint32_t          i;
    kvs_err_t         err;
    kvs_sched_conf_t  conf;

    memset(env, 0, sizeof(env_t));

    for (i = 0; i < 64; i++) {
        env->prompt[i] = (int32_t) i;
    }

    assert_int_equal(kvs_kv_pool_new(&env->pool, n_blocks, 4, &err),
                     KVS_OK);

    memset(&conf, 0, sizeof(conf));
    conf.max_batch_tokens = 64;
    conf.max_running = max_running;
    conf.n_ctx = 64;
    conf.chunked_prefill = 1;
    conf.fair_w_prefill = 1;
    conf.fair_w_decode = 2;
    conf.fair_kv_max_milli = kv_max_milli;
    conf.no_fair = no_fair;

    assert_int_equal(kvs_sched_init(&env->s, &conf, env->pool, &err),
                     KVS_OK);
}


static void
env_init(env_t *env, uint32_t n_blocks, uint32_t max_running,
    uint32_t kv_max_milli)
{
    env_init_fifo(env, n_blocks, max_running, kv_max_milli, 0);
}


static void
env_add(env_t *env, int i, const char *tenant, uint32_t n_prompt,
    uint32_t max_tokens)
{
    kvs_err_t  err;

    assert_int_equal(kvs_seq_init(&env->seq[i], &env->s, env->prompt,
                                  n_prompt, max_tokens, &err), KVS_OK);
    assert_int_equal(kvs_sched_tenant(&env->s, &env->seq[i], tenant,
                                      strlen(tenant), &err), KVS_OK);
    kvs_sched_add(&env->s, &env->seq[i]);
    env->max_tokens[i] = max_tokens;
}


/* Steps until nothing runs, as the engine would: a token for each
 * sequence whose logits came back, the end at max_tokens. */
static void
env_run(env_t *env)
{
    int               i, seen;
    uint32_t          k;
    kvs_seq_t        *seq;
    kvs_sched_plan_t  plan;

    for ( ;; ) {
        kvs_sched_plan(&env->s, &plan);
        if (plan.batch.n == 0) {
            break;
        }

        for (seq = plan.seqs; seq != NULL; seq = seq->step_next) {
            i = (int) (seq - env->seq);
            seen = 0;

            for (k = 0; k < (uint32_t) env->n_admitted; k++) {
                seen |= env->admitted[k] == i;
            }

            if (!seen) {
                env->admitted[env->n_admitted++] = i;
            }
        }

        kvs_sched_commit(&env->s, &plan);

        for (k = 0; k < plan.n_logits; k++) {
            seq = plan.logits_seq[k];
            kvs_seq_append(seq, 7);

            if (kvs_seq_generated(seq) == env->max_tokens[seq - env->seq]) {
                kvs_sched_remove(&env->s, seq);
                kvs_sched_untenant(&env->s, seq);
                kvs_sched_ungroup(seq);
            }
        }
    }
}


static void
env_free(env_t *env)
{
    int  i;

    for (i = 0; i < N_SEQ; i++) {
        kvs_sched_remove(&env->s, &env->seq[i]);
        kvs_sched_untenant(&env->s, &env->seq[i]);
        kvs_sched_ungroup(&env->seq[i]);
        kvs_seq_free(&env->seq[i]);
    }

    assert_int_equal(env->s.fair.n_tenants, env->s.fair.n_idle);
    assert_int_equal(kvs_kv_pool_used_count(env->pool), 0);
    kvs_sched_free(&env->s);
    kvs_kv_pool_free(env->pool);
}


/*
 * One sequence runs at a time; A's three arrive before B's three.  Each
 * costs 8 prefill + 1 decode token (its second token is its last) =
 * 8 + 2 = 10 units.  A1 (tie, oldest), then B (0 < 10), then A2 (tie
 * at 10, older), B2, A3, B3: alternation instead of A's three first.
 */
static void
test_alternation(void **state)
{
    int              i;
    env_t            env;
    static const int  want[N_SEQ] = { 0, 3, 1, 4, 2, 5 };

    env_init(&env, 64, 1, 0);
    env_add(&env, 0, "a", 8, 2);
    env_add(&env, 1, "a", 8, 2);
    env_add(&env, 2, "a", 8, 2);
    env_add(&env, 3, "b", 8, 2);
    env_add(&env, 4, "b", 8, 2);
    env_add(&env, 5, "b", 8, 2);

    env_run(&env);

    assert_int_equal(env.n_admitted, N_SEQ);
    assert_memory_equal(env.admitted, want, sizeof(want));
    env_free(&env);

    /* no_fair: arrival order, A's three first, counters still kept */
    env_init_fifo(&env, 64, 1, 0, 1);
    env_add(&env, 0, "a", 8, 2);
    env_add(&env, 1, "a", 8, 2);
    env_add(&env, 2, "a", 8, 2);
    env_add(&env, 3, "b", 8, 2);
    env_add(&env, 4, "b", 8, 2);
    env_add(&env, 5, "b", 8, 2);
    env_run(&env);

    for (i = 0; i < N_SEQ; i++) {
        assert_int_equal(env.admitted[i], i);
    }

    env_free(&env);
}


/* One tenant alone is served in arrival order. */
static void
test_one_tenant_fifo(void **state)
{
    env_t            env;
    static const int  want[4] = { 0, 1, 2, 3 };

    env_init(&env, 64, 1, 0);
    env_add(&env, 0, "", 8, 2);
    env_add(&env, 1, "", 4, 3);
    env_add(&env, 2, "", 12, 1);
    env_add(&env, 3, "", 8, 2);

    env_run(&env);

    assert_int_equal(env.n_admitted, 4);
    assert_memory_equal(env.admitted, want, sizeof(want));
    env_free(&env);
}


/* Counters: weights, and no banked credit for a tenant back from idle. */
static void
test_counters(void **state)
{
    kvs_err_t      err;
    kvs_fair_t     f;
    char             key[32];
    uint32_t         k;
    kvs_tenant_t    *a, *b, *c, *a2;
    kvs_fair_row_t   rows[2], all;

    assert_int_equal(kvs_fair_init(&f, 1, 2, 0, &err), KVS_OK);
    assert_int_equal(kvs_fair_join(&f, "a", 1, &a, &err), KVS_OK);
    assert_int_equal(kvs_fair_join(&f, "b", 1, &b, &err), KVS_OK);
    assert_int_equal(a->vtc, 0);

    kvs_fair_served(&f, a, 100, 0);
    kvs_fair_served(&f, a, 10, 1);
    kvs_fair_served(&f, b, 30, 0);
    assert_int_equal(a->vtc, 120);
    assert_int_equal(b->vtc, 30);

    /* b leaves and comes back: lifted to a, the least served active;
     * while idle it is kept, with what it was served */
    kvs_fair_leave(&f, b);
    assert_int_equal(f.n_tenants, 2);
    assert_int_equal(f.n_idle, 1);
    assert_int_equal(kvs_fair_join(&f, "b", 1, &b, &err), KVS_OK);
    assert_int_equal(b->vtc, 120);
    assert_int_equal(b->prefill, 30);
    assert_int_equal(f.n_idle, 0);

    /* a tenant served more than the least active keeps its counter */
    kvs_fair_served(&f, b, 50, 0);
    kvs_fair_leave(&f, b);
    assert_int_equal(kvs_fair_join(&f, "b", 1, &b, &err), KVS_OK);
    assert_int_equal(b->vtc, 170);

    /* a second sequence of a present tenant is the same tenant */
    assert_int_equal(kvs_fair_join(&f, "a", 1, &a2, &err), KVS_OK);
    assert_ptr_equal(a2, a);
    assert_int_equal(a->n_seqs, 2);

    assert_int_equal(kvs_fair_join(&f, "c", 1, &c, &err), KVS_OK);
    assert_int_equal(c->vtc, 120);

    /* rows: most served first (b 80, a 110, c 0), and the sums */
    assert_int_equal(kvs_fair_rows(&f, rows, 2, &all), 2);
    assert_int_equal(rows[0].key_len, 1);
    assert_memory_equal(rows[0].key, "a", 1);
    assert_int_equal(rows[0].prefill, 100);
    assert_int_equal(rows[0].decode, 10);
    assert_memory_equal(rows[1].key, "b", 1);
    assert_int_equal(all.prefill, 180);
    assert_int_equal(all.decode, 10);
    assert_int_equal(all.n_seqs, 4);

    /* idle tenants are bounded: the one idle longest goes */
    for (k = 0; k < KVS_FAIR_MAX_IDLE + 10; k++) {
        snprintf(key, sizeof(key), "one-off-%u", k);
        assert_int_equal(kvs_fair_join(&f, key, strlen(key), &c, &err),
                         KVS_OK);
        kvs_fair_leave(&f, c);
    }

    assert_int_equal(f.n_idle, KVS_FAIR_MAX_IDLE);
    assert_int_equal(f.n_tenants, KVS_FAIR_MAX_IDLE + 3);
    assert_int_equal(kvs_fair_rows(&f, rows, 2, &all), 2);
    assert_int_equal(all.prefill, 180);   /* a, b, c are still there */

    /* limits */
    assert_int_equal(kvs_fair_join(&f, "x", KVS_FAIR_MAX_KEY + 1, &c,
                                   &err), KVS_EINVAL);
    assert_null(c);
    kvs_fair_free(&f);
    assert_int_equal(kvs_fair_init(&f, 1, 1, 1001, &err), KVS_EINVAL);

    /* the cap: over 500 thousandths of 10 blocks is 6 */
    assert_int_equal(kvs_fair_init(&f, 1, 1, 500, &err), KVS_OK);
    assert_int_equal(kvs_fair_join(&f, "a", 1, &a, &err), KVS_OK);
    a->kv_blocks = 5;
    assert_false(kvs_fair_capped(&f, a, 0, 10));
    assert_true(kvs_fair_capped(&f, a, 1, 10));
    kvs_fair_free(&f);
}


/*
 * A runs a 24-token prompt (6 of 10 blocks); then A's second sequence
 * and B's wait, B made the most served, and one of them is admitted
 * (two running at most).  Returns which: 1 for A's, 2 for B's.
 */
static int
cap_case(uint32_t kv_max_milli)
{
    int               first;
    env_t             env;
    kvs_sched_plan_t  plan;

    env_init(&env, 10, 2, kv_max_milli);
    env_add(&env, 0, "a", 24, 8);

    kvs_sched_plan(&env.s, &plan);
    kvs_sched_commit(&env.s, &plan);
    kvs_seq_append(&env.seq[0], 7);
    assert_int_equal(env.seq[0].table.n_blocks, 6);

    env_add(&env, 1, "a", 4, 1);
    env_add(&env, 2, "b", 4, 1);
    env.seq[2].tenant->vtc = 1000;

    kvs_sched_plan(&env.s, &plan);
    assert_true((env.seq[1].state == KVS_SEQ_RUNNING)
                != (env.seq[2].state == KVS_SEQ_RUNNING));
    first = env.seq[1].state == KVS_SEQ_RUNNING ? 1 : 2;
    kvs_sched_commit(&env.s, &plan);

    env_free(&env);

    return first;
}


/*
 * The KV cap: by counter A's second sequence goes first; but A holds
 * over half the cache while B waits, so with a cap of one half B goes
 * first.
 */
static void
test_kv_cap(void **state)
{
    assert_int_equal(cap_case(0), 1);
    assert_int_equal(cap_case(500), 2);
}


/*
 * A hog filled the cache before the newcomer came: a's sequences 0 and
 * 1 (one request, group x) prefill 18 and 22 tokens in step 1, 5 + 6 =
 * 11 blocks of 4 tokens, the whole pool; each then decodes inside its
 * last block (positions 18 and 22), so it needs no new block and
 * nothing runs dry.  The newcomer, sequence 2 (4 tokens: one block),
 * arrives as tenant nc_tenant in group nc_group (0: x, 1: a group of its
 * own).  Without a cap that applies it waits for a's sequences to end;
 * with one, a holds 11 of 11 blocks (over 500 and 250 thousandths), so
 * a's newest, sequence 1 (6 blocks), is preempted in step 2 and the
 * newcomer runs in that same step.  Returns 1 when it does.  Then all
 * three run to their ends and the pool is empty again (env_free).
 */
static int
hog_case(uint32_t fair_milli, uint32_t req_milli, const char *nc_tenant,
    int nc_group)
{
    int               in;
    env_t             env;
    uint32_t          k;
    kvs_seq_t        *seq;
    kvs_err_t         err;
    kvs_seq_group_t  *x, *y;
    kvs_sched_plan_t  plan;

    env_init(&env, 11, 4, fair_milli);
    env.s.conf.req_kv_max_milli = req_milli;
    assert_int_equal(kvs_sched_group_new(&x, &err), KVS_OK);
    assert_int_equal(kvs_sched_group_new(&y, &err), KVS_OK);

    assert_int_equal(kvs_seq_init(&env.seq[0], &env.s, env.prompt, 18, 2,
                                  &err), KVS_OK);
    assert_int_equal(kvs_seq_init(&env.seq[1], &env.s, env.prompt, 22, 2,
                                  &err), KVS_OK);

    for (in = 0; in < 2; in++) {
        assert_int_equal(kvs_sched_tenant(&env.s, &env.seq[in], "a", 1,
                                          &err), KVS_OK);
        kvs_sched_group(&env.seq[in], x);
        kvs_sched_add(&env.s, &env.seq[in]);
        env.max_tokens[in] = 2;
    }

    kvs_sched_plan(&env.s, &plan);
    assert_int_equal(plan.batch.n, 40);
    kvs_sched_commit(&env.s, &plan);
    kvs_seq_append(&env.seq[0], 7);
    kvs_seq_append(&env.seq[1], 7);
    assert_int_equal(kvs_kv_pool_free_count(env.pool), 0);

    assert_int_equal(kvs_seq_init(&env.seq[2], &env.s, env.prompt, 4, 1,
                                  &err), KVS_OK);
    assert_int_equal(kvs_sched_tenant(&env.s, &env.seq[2], nc_tenant,
                                      strlen(nc_tenant), &err), KVS_OK);
    kvs_sched_group(&env.seq[2], nc_group ? y : x);
    kvs_sched_add(&env.s, &env.seq[2]);
    env.max_tokens[2] = 1;

    /* y was only lent: it goes with its last sequence, or now */
    if (!nc_group) {
        kvs_sched_group(&env.seq[3], y);
        kvs_sched_ungroup(&env.seq[3]);
    }

    kvs_sched_plan(&env.s, &plan);
    in = env.seq[2].state == KVS_SEQ_RUNNING;

    /* only the newest over its cap went, and only when the newcomer
     * came in */
    assert_int_equal(env.seq[0].state, KVS_SEQ_RUNNING);
    assert_int_equal(env.seq[1].state,
                     in ? KVS_SEQ_WAITING : KVS_SEQ_RUNNING);
    assert_int_equal(env.s.n_preemptions, in ? 1 : 0);

    kvs_sched_commit(&env.s, &plan);

    for (k = 0; k < plan.n_logits; k++) {
        seq = plan.logits_seq[k];
        kvs_seq_append(seq, 7);

        if (kvs_seq_generated(seq) == env.max_tokens[seq - env.seq]) {
            kvs_sched_remove(&env.s, seq);
            kvs_sched_untenant(&env.s, seq);
            kvs_sched_ungroup(seq);
        }
    }

    env_run(&env);

    for (k = 0; k < 3; k++) {
        assert_int_equal(kvs_seq_generated(&env.seq[k]), env.max_tokens[k]);
    }

    env_free(&env);

    return in;
}


/*
 * The caps' preemption, worked out in hog_case: by tenant (b is another
 * tenant, a holds over half), by request (the same tenant's other
 * request, a's request holds over a quarter), and not when the cap does
 * not share anything: no caps, a tenant cap with one tenant, caps with
 * the newcomer in the hog's own request.
 */
static void
test_cap_preempt(void **state)
{
    assert_int_equal(hog_case(500, 0, "b", 1), 1);
    assert_int_equal(hog_case(0, 250, "a", 1), 1);
    assert_int_equal(hog_case(0, 0, "b", 1), 0);
    assert_int_equal(hog_case(500, 0, "a", 1), 0);
    assert_int_equal(hog_case(500, 250, "a", 0), 0);
}


/*
 * Through the engine: each tenant's tokens as the engine reports them
 * add up to the engine's own prefill and decode counts, the one served
 * most comes first, and "other" holds the rest.
 */
static void
test_engine_tenants(void **state)
{
    int32_t               prompt[40];
    uint32_t              i, k;
    kvs_err_t             err;
    kvs_test_model_t      md;
    kvs_engine_t         *e;
    kvs_engine_seq_t     *hs[4];
    kvs_engine_req_t      req;
    kvs_engine_conf_t     conf;
    kvs_engine_stats_t    st;
    kvs_engine_tenants_t  tn;
    static const char    *keys[] = { "big", "small", "" };
    static const uint32_t  lens[] = { 40, 10, 5 };

    kvs_test_model_small(&md, "test-fair", 128, 77, 0);

    memset(&conf, 0, sizeof(conf));
    conf.model = md.m;
    conf.vocab = md.v;
    conf.n_blocks = 64;
    conf.threads = 1;
    conf.no_prefix_cache = 1;
    conf.fair_w_decode = 2;
    assert_int_equal(kvs_engine_new(&e, &conf, &err), KVS_OK);

    for (i = 0; i < 40; i++) {
        prompt[i] = (int32_t) (i * 7 % 250);
    }

    for (k = 0; k < 3; k++) {
        memset(&req, 0, sizeof(req));
        req.prompt = prompt;
        req.n_prompt = lens[k];
        req.max_tokens = 6;
        req.ignore_eos = 1;
        req.sample.top_p = 1.0f;
        req.tenant = keys[k];
        req.tenant_len = strlen(keys[k]);
        assert_int_equal(kvs_engine_submit(e, &req, &hs[k], &err), KVS_OK);
    }

    while (kvs_engine_step(e)) {
        /* void */
    }

    kvs_engine_stats(e, &st);
    kvs_engine_tenants(e, &tn);

    assert_int_equal(tn.n_tenants, 3);
    assert_int_equal(tn.n_top, 3);
    assert_int_equal(tn.top[0].key_len, 3);
    assert_memory_equal(tn.top[0].key, "big", 3);
    assert_int_equal(tn.top[0].prefill, 40);
    assert_int_equal(tn.top[0].decode, 5);     /* the 6th is sampled */
    assert_int_equal(tn.top[0].n_seqs, 0);
    assert_int_equal(tn.top[0].prefill + tn.top[1].prefill
                     + tn.top[2].prefill, st.prefill_tokens);
    assert_int_equal(tn.top[0].decode + tn.top[1].decode
                     + tn.top[2].decode, st.decode_tokens);
    assert_int_equal(tn.other.prefill, 0);

    /* blocks as of the end, not of the last plan */
    for (k = 0; k < 3; k++) {
        assert_int_equal(tn.top[k].kv_blocks, 0);
    }

    for (k = 0; k < 3; k++) {
        kvs_engine_close(e, hs[k]);
    }

    kvs_engine_free(e);
    kvs_test_model_free(&md);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_alternation),
        cmocka_unit_test(test_one_tenant_fifo),
        cmocka_unit_test(test_counters),
        cmocka_unit_test(test_kv_cap),
        cmocka_unit_test(test_cap_preempt),
        cmocka_unit_test(test_engine_tenants),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
