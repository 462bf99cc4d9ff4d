/*
 * kvs_test_engine: what the engine tests that compare two runs bit for
 * bit share (test_engine_cache, test_engine_tier, test_swa_free; the
 * engine setup test_engine too): an engine on one thread with a given
 * block size, pool and step budget (0: the engine's defaults), the
 * prefix cache on or off; one greedy request with log-probabilities run
 * to its end; the comparison of two outputs; seeded prompt tokens.
 * Any failure fails the test; after every request the engine's own
 * check passes.  Header-only, like kvs_test.h.
 */

#ifndef KVS_TEST_ENGINE_H
#define KVS_TEST_ENGINE_H

#include "kvs_test.h"
#include "kvs_test_model.h"

#include "base/kvs_clock.h"
#include "engine/kvs_engine.h"


/* Called after each kvs_engine_step() of kvs_test_engine_run(): the
 * step took ns; out holds what was read so far. */
typedef void (*kvs_test_engine_step_pt)(kvs_engine_t *e,
    const kvs_engine_out_t *out, uint64_t ns, void *arg);


/* md's engine on one thread: blocks of bt tokens, n_blocks of them, a
 * step budget of budget tokens, the prefix cache on when cache; the
 * caller may set more fields before kvs_test_engine_new(). */
static inline void
kvs_test_engine_conf(kvs_engine_conf_t *conf, const kvs_test_model_t *md,
    uint32_t bt, uint32_t n_blocks, uint32_t budget, int cache)
{
    memset(conf, 0, sizeof(*conf));
    conf->model = md->m;
    conf->vocab = md->v;
    conf->block_tokens = bt;
    conf->n_blocks = n_blocks;
    conf->threads = 1;
    conf->max_batch_tokens = budget;
    conf->no_prefix_cache = !cache;
}


static inline kvs_engine_t *
kvs_test_engine_new(const kvs_engine_conf_t *conf)
{
    kvs_err_t      err;
    kvs_engine_t  *e;

    if (kvs_engine_new(&e, conf, &err) != KVS_OK) {
        fail_msg("engine: %s", err.msg);
    }

    return e;
}


/* A greedy request for gen tokens past the end of text, with
 * top_logprobs alternatives per token. */
static inline void
kvs_test_engine_req(kvs_engine_req_t *req, const int32_t *prompt,
    uint32_t n_prompt, uint32_t gen, uint32_t top_logprobs)
{
    memset(req, 0, sizeof(*req));
    req->prompt = prompt;
    req->n_prompt = n_prompt;
    req->max_tokens = gen;
    req->ignore_eos = 1;
    req->sample.top_p = 1.0f;
    req->sample.logprobs = 1;
    req->sample.top_logprobs = top_logprobs;
}


/* Submits a greedy request (top-5 logprobs) without stepping. */
static inline kvs_engine_seq_t *
kvs_test_engine_submit(kvs_engine_t *e, const int32_t *prompt,
    uint32_t n_prompt, uint32_t gen)
{
    kvs_err_t          err;
    kvs_engine_req_t   req;
    kvs_engine_seq_t  *h;

    kvs_test_engine_req(&req, prompt, n_prompt, gen, 5);

    if (kvs_engine_submit(e, &req, &h, &err) != KVS_OK) {
        fail_msg("submit: %s", err.msg);
    }

    return h;
}


/* Submits req alone and steps e until it ends (step, when not NULL,
 * after each step); it must end by its length, the engine consistent. */
static inline void
kvs_test_engine_run(kvs_engine_t *e, const kvs_engine_req_t *req,
    kvs_engine_out_t *out, kvs_test_engine_step_pt step, void *arg)
{
    uint64_t           t0;
    kvs_err_t          err;
    kvs_engine_seq_t  *h, *hs[1];

    memset(out, 0, sizeof(*out));

    if (kvs_engine_submit(e, req, &h, &err) != KVS_OK) {
        fail_msg("submit: %s", err.msg);
    }

    while (out->finish == KVS_FINISH_NONE) {
        t0 = kvs_now_ns();
        (void) kvs_engine_step(e);
        t0 = kvs_now_ns() - t0;

        if (step != NULL) {
            step(e, out, t0, arg);
        }

        while (kvs_engine_ready(e, hs, 1) > 0) {
            assert_ptr_equal(hs[0], h);
            assert_true(kvs_engine_read(e, h, out) >= 0);
        }
    }

    kvs_engine_close(e, h);
    assert_int_equal(out->finish, KVS_FINISH_LENGTH);
    assert_int_equal(out->n_tokens, req->max_tokens);

    if (kvs_engine_check(e, &err) != KVS_OK) {
        fail_msg("engine check: %s", err.msg);
    }
}


/* a's and b's tokens and log-probabilities are the same, bit for bit
 * (so the logits behind them are). */
static inline void
kvs_test_engine_same(const kvs_engine_out_t *a, const kvs_engine_out_t *b,
    const char *what)
{
    size_t  i;

    assert_int_equal(a->n_tokens, b->n_tokens);
    assert_int_equal(a->n_lp, b->n_lp);

    for (i = 0; i < a->n_tokens; i++) {
        if (a->tokens[i] != b->tokens[i]) {
            fail_msg("%s: token %zu is %d, %d in the other run",
                     what, i, a->tokens[i], b->tokens[i]);
        }
    }

    for (i = 0; i < a->n_lp; i++) {
        if (memcmp(&a->lp[i], &b->lp[i], sizeof(a->lp[i])) != 0) {
            fail_msg("%s: logprobs of token %zu differ (%.9g vs %.9g)",
                     what, i, a->lp[i].logprob, b->lp[i].logprob);
        }
    }
}


/* n ids below n_vocab from seed, never bos. */
static inline void
kvs_test_engine_fill(int32_t *t, uint32_t n, uint64_t seed,
    uint32_t n_vocab, int32_t bos)
{
    uint32_t  i;

    for (i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        t[i] = (int32_t) ((seed >> 33) % n_vocab);
        if (t[i] == bos) {
            t[i] = (t[i] + 1) % (int32_t) n_vocab;
        }
    }
}


#endif /* KVS_TEST_ENGINE_H */
