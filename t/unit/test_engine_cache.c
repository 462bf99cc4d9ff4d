/*
 * test_engine_cache: the prefix cache inside the engine, against the
 * engine with the cache off.
 *
 * A request served from cached blocks (a hit) must give the very tokens
 * and log-probabilities, bit for bit, that the same request gives on an
 * engine that computes everything (cold): on stories260K and on random
 * models of several head layouts, over multi-turn conversations whose
 * next prompt holds the previous reply, and after a copy-on-write of a
 * partly reused block.  The step budget stays under the CPU backend's
 * matrix-product threshold, so both runs use the same kernels.
 *
 * The reuse itself is checked by number: a turn reuses exactly the
 * whole blocks of the previous turn's prompt and reply (the reply's last
 * token is computed for the cache when it completes a block), a
 * diverging prompt reuses up to the first differing token, other scopes
 * reuse nothing and say why.
 */

#include "kvs_test.h"
#include "kvs_test_engine.h"
#include "kvs_test_model.h"

#include "engine/kvs_engine.h"

#define BT       16
#define BUDGET   32
#define MAX_TOK  512


typedef struct {
    kvs_engine_t  *on;                /* cache on */
    kvs_engine_t  *off;               /* cache off */
} pair_t;

typedef struct {
    const char        *scope;
    uint32_t           n_pins;
    kvs_engine_pin_t   pins[KVS_ENGINE_MAX_PINS];
} opts_t;


static kvs_engine_t *
engine_new(const kvs_test_model_t *md, int cache, uint32_t n_blocks)
{
    kvs_engine_conf_t  conf;

    kvs_test_engine_conf(&conf, md, BT, n_blocks, BUDGET, cache);

    return kvs_test_engine_new(&conf);
}


/* One greedy request with top-5 logprobs, run to its end. */
static void
run1(kvs_engine_t *e, const int32_t *prompt, uint32_t n_prompt,
    uint32_t gen, const opts_t *o, kvs_engine_out_t *out)
{
    kvs_engine_req_t  req;

    kvs_test_engine_req(&req, prompt, n_prompt, gen, 5);

    if (o != NULL) {
        req.scope = o->scope;
        req.scope_len = o->scope != NULL ? strlen(o->scope) : 0;
        req.n_pins = o->n_pins;
        memcpy(req.pins, o->pins, sizeof(req.pins));
    }

    kvs_test_engine_run(e, &req, out, NULL, NULL);
}


/*
 * turns conversation turns: each prompt is the previous prompt, its
 * reply and `user` new tokens.  The cached run reuses exactly the whole
 * blocks of what the previous turn computed, and matches the cold run.
 */
static void
conversation(const kvs_test_model_t *md, uint32_t turns, uint32_t user,
    uint32_t gen)
{
    int32_t             conv[MAX_TOK];
    uint32_t            n, t, computed;
    pair_t              p;
    kvs_engine_out_t    hot, cold;
    kvs_engine_stats_t  st;
    char                what[64];

    p.on = engine_new(md, 1, 256);
    p.off = engine_new(md, 0, 256);

    n = 0;
    computed = 0;

    for (t = 0; t < turns; t++) {
        assert_true(n + user + gen <= MAX_TOK);
        kvs_test_engine_fill(conv + n, user, 0xabc + t, md->m->hp.n_vocab,
                             md->v->bos);
        if (t == 0 && md->v->bos >= 0) {
            conv[0] = md->v->bos;
        }
        n += user;

        run1(p.on, conv, n, gen, NULL, &hot);
        run1(p.off, conv, n, gen, NULL, &cold);

        snprintf(what, sizeof(what), "turn %u", t);
        kvs_test_engine_same(&hot, &cold, what);

        assert_true(hot.has_cache);
        assert_int_equal(hot.n_cached, computed / BT * BT);
        assert_int_equal(cold.n_cached, 0);
        assert_int_equal(cold.miss, KVS_RADIX_MISS_OFF);

        if (t > 0) {
            /* the reply's blocks were cached too */
            assert_true(hot.n_cached + BT >= n - user);
            assert_int_equal(hot.miss, KVS_RADIX_MISS_EMPTY);
            assert_int_equal(hot.miss_pos, hot.n_cached);
        }

        /* the reply joins the conversation; all but its last token
         * were computed, and that one too when it completes a block */
        memcpy(conv + n, hot.tokens, gen * sizeof(int32_t));
        n += gen;
        computed = n % BT == 0 ? n : n - 1;

        kvs_engine_out_free(&hot);
        kvs_engine_out_free(&cold);
    }

    kvs_engine_stats(p.on, &st);
    assert_true(st.cache_hit_tokens > 0);
    assert_true(st.cache_query_tokens > st.cache_hit_tokens);
    assert_int_equal(st.kv_used, 0);
    assert_true(st.cache_blocks > 0);

    kvs_engine_free(p.on);
    kvs_engine_free(p.off);
}


static void
test_turns_stories(void **state)
{
    kvs_test_model_t  md;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    conversation(&md, 6, 21, 23);     /* turn 3 ends on a block */
    kvs_test_model_free(&md);
}


static void
test_turns_random(void **state)
{
    uint32_t          k;
    kvs_gen_spec_t    spec;
    kvs_test_model_t  md;
    static const uint32_t  heads[][2] = { { 4, 4 }, { 8, 2 }, { 3, 1 } };

    for (k = 0; k < 3; k++) {
        memset(&spec, 0, sizeof(spec));
        snprintf(spec.name, sizeof(spec.name), "test-cache-%u", k);
        spec.n_layer = 2;
        spec.n_embd = heads[k][0] * 16;
        spec.n_head = heads[k][0];
        spec.n_head_kv = heads[k][1];
        spec.n_ff = spec.n_embd * 2;
        spec.n_vocab = 300;
        spec.n_ctx = 256;
        spec.dtype = k == 1 ? KVS_GGML_F16 : KVS_GGML_F32;
        spec.tied = k != 2;
        spec.seed = 0xcace + k;

        kvs_test_model_gen(&md, &spec);
        conversation(&md, 5, 13, 19);     /* turn 0 ends on a block */
        kvs_test_model_free(&md);
    }
}


/*
 * A prompt that shares only its first 20 tokens with a cached one reuses
 * them: block 1 is shared part-filled, copied before the first write;
 * the cached block is left as it was, so the first prompt still hits.
 */
static void
test_partial_block_cow(void **state)
{
    int32_t             x[40], y[40];
    kvs_test_model_t    md;
    kvs_engine_t       *on, *off;
    kvs_engine_out_t    a, b, c, d;
    kvs_engine_stats_t  st0, st1;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    on = engine_new(&md, 1, 64);
    off = engine_new(&md, 0, 64);

    kvs_test_engine_fill(x, 40, 7, md.m->hp.n_vocab, md.v->bos);
    x[0] = md.v->bos;
    memcpy(y, x, sizeof(y));
    kvs_test_engine_fill(y + 20, 20, 99, md.m->hp.n_vocab, md.v->bos);
    assert_true(y[20] != x[20]);

    run1(on, x, 40, 10, NULL, &a);
    assert_int_equal(a.n_cached, 0);
    assert_int_equal(a.miss, KVS_RADIX_MISS_EMPTY);

    kvs_engine_stats(on, &st0);
    run1(on, y, 40, 10, NULL, &b);
    kvs_engine_stats(on, &st1);

    assert_int_equal(b.n_cached, 20);
    assert_int_equal(b.miss, KVS_RADIX_MISS_DIVERGED);
    assert_int_equal(b.miss_pos, 20);
    assert_int_equal(st1.kv_copies, st0.kv_copies + 1);

    run1(off, y, 40, 10, NULL, &c);
    kvs_test_engine_same(&b, &c, "diverged prompt");

    /* x again: everything but its last token, the cached block intact */
    run1(on, x, 40, 10, NULL, &d);
    assert_int_equal(d.n_cached, 39);
    assert_int_equal(d.miss, KVS_RADIX_MISS_NONE);
    kvs_test_engine_same(&d, &a, "the first prompt again");

    kvs_engine_out_free(&a);
    kvs_engine_out_free(&b);
    kvs_engine_out_free(&c);
    kvs_engine_out_free(&d);
    kvs_engine_free(on);
    kvs_engine_free(off);
    kvs_test_model_free(&md);
}


/* A scope never sees another's entries, and the miss says so. */
static void
test_scopes(void **state)
{
    int32_t           x[48];
    opts_t            oa, ob;
    kvs_test_model_t  md;
    kvs_engine_t     *on;
    kvs_engine_out_t  a, b, c;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    on = engine_new(&md, 1, 64);
    kvs_test_engine_fill(x, 48, 3, md.m->hp.n_vocab, md.v->bos);

    memset(&oa, 0, sizeof(oa));
    memset(&ob, 0, sizeof(ob));
    oa.scope = "tenant-a";
    ob.scope = "tenant-b";

    run1(on, x, 48, 4, &oa, &a);
    run1(on, x, 48, 4, &ob, &b);
    run1(on, x, 48, 4, &oa, &c);

    assert_int_equal(a.n_cached, 0);
    assert_int_equal(b.n_cached, 0);
    assert_int_equal(b.miss, KVS_RADIX_MISS_SCOPE);
    assert_int_equal(b.miss_pos, 0);
    assert_int_equal(c.n_cached, 47);
    kvs_test_engine_same(&a, &b, "scope b");
    kvs_test_engine_same(&a, &c, "scope a again");

    kvs_engine_out_free(&a);
    kvs_engine_out_free(&b);
    kvs_engine_out_free(&c);
    kvs_engine_free(on);
    kvs_test_model_free(&md);
}


/*
 * A pinned prefix survives a flood of other prompts that evicts every
 * unpinned block; without the pin it is gone.  Usage counts what the
 * pins wrote.
 */
static void
test_pins(void **state)
{
    int32_t             sys[65], other[64];
    uint32_t            k;
    opts_t              o;
    kvs_test_model_t    md;
    kvs_engine_t       *on, *off;
    kvs_engine_out_t    a, b, c;
    kvs_engine_stats_t  st;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    /* 12 blocks: one 64-token prompt with 8 new tokens takes 5 */
    on = engine_new(&md, 1, 12);
    off = engine_new(&md, 0, 12);
    kvs_test_engine_fill(sys, 65, 11, md.m->hp.n_vocab, md.v->bos);

    memset(&o, 0, sizeof(o));
    o.n_pins = 1;
    o.pins[0].n_tokens = 48;
    o.pins[0].ttl_ms = 60000;

    run1(on, sys, 64, 8, &o, &a);
    assert_int_equal(a.n_cache_created, 48);

    kvs_engine_stats(on, &st);
    assert_int_equal(st.cache_pinned_blocks, 3);

    for (k = 0; k < 6; k++) {
        kvs_test_engine_fill(other, 64, 1000 + k, md.m->hp.n_vocab, md.v->bos);
        run1(on, other, 64, 8, NULL, &c);
        kvs_engine_out_free(&c);
    }

    kvs_engine_stats(on, &st);
    assert_true(st.cache_evicted_blocks > 0);

    /* the pinned 48 are there; the unpinned block after them (whole
     * within the reusable part of a 65-token prompt) was evicted */
    run1(on, sys, 65, 8, NULL, &b);
    assert_int_equal(b.n_cached, 48);
    assert_int_equal(b.miss, KVS_RADIX_MISS_EVICTED);
    assert_int_equal(b.miss_pos, 48);

    run1(off, sys, 65, 8, NULL, &c);
    kvs_test_engine_same(&b, &c, "pinned prefix");

    kvs_engine_out_free(&a);
    kvs_engine_out_free(&b);
    kvs_engine_out_free(&c);
    kvs_engine_free(on);
    kvs_engine_free(off);
    kvs_test_model_free(&md);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_turns_stories),
        cmocka_unit_test(test_turns_random),
        cmocka_unit_test(test_partial_block_cow),
        cmocka_unit_test(test_scopes),
        cmocka_unit_test(test_pins),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
