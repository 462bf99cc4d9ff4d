/*
 * kvs_test_engine_ix: what the engine tests of the prefix index share
 * (test_engine_index, test_engine_tier_ix): an engine on one thread that
 * names its cached blocks under a model name; seeded prompts; one greedy
 * token run on this thread, which computes and caches the prompt; a
 * prompt's block names as a gateway computes them; a name's place in a
 * list, a count of flags, the disk writer waited for.  Any failure fails
 * the test; after every request the engine's own check passes.
 * Header-only, like kvs_test_engine.h, which it builds on.
 */

#ifndef KVS_TEST_ENGINE_IX_H
#define KVS_TEST_ENGINE_IX_H

#include "kvs_test_engine.h"

#include "index/kvs_index_name.h"


/* md's engine on one thread naming its blocks under model: blocks of bt
 * tokens, n_blocks of them, a step budget of 64 tokens, the prefix cache
 * on; the caller may set more fields before kvs_test_engine_new(). */
static inline void
kvs_test_engine_ix_conf(kvs_engine_conf_t *conf, const kvs_test_model_t *md,
    uint32_t bt, uint32_t n_blocks, const char *model)
{
    kvs_test_engine_conf(conf, md, bt, n_blocks, 64, 1);
    conf->index_model = model;
}


/* n tokens in [10, 290) from seed: distinct prompts by seed. */
static inline void
kvs_test_engine_ix_prompt(int32_t *tok, uint32_t n, uint32_t seed)
{
    uint32_t  i;

    for (i = 0; i < n; i++) {
        tok[i] = (int32_t) ((seed * 31 + i * 7 + (i * i) % 13) % 280 + 10);
    }
}


/* One greedy token after the n tokens of tok in scope (NULL: none),
 * driven on this thread: the prompt alone is computed and cached.
 * Returns the tokens of it loaded from a lower tier. */
static inline uint32_t
kvs_test_engine_ix_run1(kvs_engine_t *e, const int32_t *tok, uint32_t n,
    const char *scope)
{
    uint32_t           tier;
    kvs_err_t          err;
    kvs_engine_req_t   req;
    kvs_engine_out_t   out;
    kvs_engine_seq_t  *h, *hs[1];

    memset(&req, 0, sizeof(req));
    req.prompt = tok;
    req.n_prompt = n;
    req.max_tokens = 1;
    req.ignore_eos = 1;
    req.sample.top_p = 1.0f;
    req.scope = scope;
    req.scope_len = scope != NULL ? strlen(scope) : 0;

    memset(&out, 0, sizeof(out));

    if (kvs_engine_submit(e, &req, &h, &err) != KVS_OK) {
        fail_msg("submit: %s", err.msg);
    }

    while (out.finish == KVS_FINISH_NONE) {
        (void) kvs_engine_step(e);

        while (kvs_engine_ready(e, hs, 1) > 0) {
            assert_true(kvs_engine_read(e, h, &out) >= 0);
        }
    }

    assert_int_equal(out.finish, KVS_FINISH_LENGTH);
    tier = out.n_cached_tier;
    kvs_engine_close(e, h);
    kvs_engine_out_free(&out);

    if (kvs_engine_check(e, &err) != KVS_OK) {
        fail_msg("engine check: %s", err.msg);
    }

    return tier;
}


/* The names of the whole blocks (bt tokens each) of the n tokens of tok
 * in scope (NULL: none) under model and e's epoch, as a gateway computes
 * them, into out (room for max); returns how many: n / bt, checked. */
static inline uint32_t
kvs_test_engine_ix_names(kvs_engine_t *e, const char *model,
    const int32_t *tok, uint32_t n, uint32_t bt, const char *scope,
    kvs_index_name_t *out, uint32_t max)
{
    size_t              k;
    kvs_err_t           err;
    kvs_index_ns_t      ns;
    kvs_index_name_t    root;
    kvs_engine_stats_t  st;

    kvs_engine_stats(e, &st);
    memset(&ns, 0, sizeof(ns));
    ns.model = model;
    ns.model_len = strlen(model);
    ns.epoch = st.epoch;
    ns.adapter = "";
    ns.scope = scope != NULL ? scope : "";
    ns.scope_len = strlen(ns.scope);

    assert_int_equal(kvs_index_name_root(&ns, &root, &err), KVS_OK);
    assert_int_equal(kvs_index_name_chain(&root, tok, n, bt, out, max, &k,
                                          &err), KVS_OK);
    assert_int_equal(k, n / bt);

    return (uint32_t) k;
}


/* The place of name in names[0, n); -1 when not there. */
static inline long
kvs_test_engine_ix_find(const kvs_index_name_t *names, uint32_t n,
    const uint8_t *name)
{
    uint32_t  i;

    for (i = 0; i < n; i++) {
        if (memcmp(names[i].b, name, KVS_INDEX_NAME_LEN) == 0) {
            return i;
        }
    }

    return -1;
}


/* How many of v[0, n) are set. */
static inline uint32_t
kvs_test_engine_ix_count(const uint8_t *v, uint32_t n)
{
    uint32_t  i, c;

    for (c = 0, i = 0; i < n; i++) {
        c += v[i];
    }

    return c;
}


/* The disk tier's writer done, and one step to drain what it reported
 * to the index. */
static inline void
kvs_test_engine_ix_settle(kvs_engine_t *e)
{
    kvs_engine_tier_wait(e);
    (void) kvs_engine_step(e);
}


#endif /* KVS_TEST_ENGINE_IX_H */
