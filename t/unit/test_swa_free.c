/*
 * test_swa_free: a model whose every layer has a sliding window gives
 * back the KV blocks that left it (kvs_sched.h, "Sliding windows").
 *
 * Which models qualify: every layer windowed (kvs_hparams_swa_all),
 * gemma's global layers keep every block.  A block table's holes: drop,
 * fork, slot, check and release.
 *
 * On generated llama (window 8) and phi3 (window 6) files, blocks of 4
 * positions, far longer generations than the window:
 *   - the blocks a decoding sequence holds stay at ceil(window / 4) + 1,
 *     a chunked prefill's at its span, while the same run keeping every
 *     block (keep_window_blocks) holds its whole length;
 *   - the tokens and log-probabilities, bit for bit, are those of the
 *     run that keeps every block, and of a full recompute (the prompt
 *     plus the first k generated tokens, prefilled in chunks on a fresh
 *     engine) at several k;
 *   - every block is back in the pool after each request;
 *   - with the prefix cache: a request sharing a prefix longer than the
 *     window with an earlier one, and a second turn holding the first's
 *     prompt and reply, reuse exactly the cached whole blocks (the reply's
 *     too: published before they were given back) and give the outputs
 *     of an engine without a cache;
 *   - n = 3 choices fork from a table with holes, computing the prompt
 *     once, each as a single request;
 *   - sequences preempted on a pool too small for them all, cache on
 *     and off, are recomputed to the tokens of single requests;
 *   - a request longer than the pool is admitted when its window and a
 *     chunk fit, and refused when every block is kept;
 *   - the CPU kernels never read a position before the window: blocks
 *     that left it are replaced in the table by a block of NaNs, and
 *     the logits stay those of the intact table (a mask one position too
 *     wide would turn them to NaN).
 */

#include "kvs_test_cpu.h"
#include "kvs_test_engine.h"
#include "kvs_test_model.h"

#include <math.h>

#include "engine/kvs_engine.h"

#define BT        4
#define BUDGET    32
#define N_BLOCKS  256
#define N_PROMPT  10
#define N_GEN     150
#define MAX_TOK   400
#define NP        8                   /* test_preemption's sequences */


typedef struct {
    const char  *label;
    kvs_arch_t   arch;
    uint32_t     swa;
} shape_t;

static const shape_t  shapes[] = {
    { "swa-llama", KVS_ARCH_LLAMA, 8 },
    { "swa-phi3",  KVS_ARCH_PHI3,  6 },
};


static void
model_gen(kvs_test_model_t *md, const shape_t *sh)
{
    kvs_gen_spec_t  spec;

    memset(&spec, 0, sizeof(spec));
    snprintf(spec.name, sizeof(spec.name), "test-%s", sh->label);
    spec.arch = sh->arch;
    spec.n_layer = 2;
    spec.n_embd = 64;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.n_ff = 96;
    spec.n_vocab = 300;
    spec.n_ctx = 512;
    spec.dtype = KVS_GGML_F32;
    spec.n_swa = sh->swa;
    spec.seed = 0x5a5a0000u + sh->swa;

    kvs_test_model_gen(md, &spec);
    assert_int_equal(kvs_hparams_swa_all(&md->m->hp), sh->swa);
}


static kvs_engine_t *
engine_new(const kvs_test_model_t *md, int cache, int keep)
{
    kvs_engine_conf_t  conf;

    kvs_test_engine_conf(&conf, md, BT, N_BLOCKS, BUDGET, cache);
    conf.keep_window_blocks = keep;

    return kvs_test_engine_new(&conf);
}


/* arg: the most KV blocks in use after a step once the first token
 * came */
static void
step_blocks(kvs_engine_t *e, const kvs_engine_out_t *out, uint64_t ns,
    void *arg)
{
    uint32_t            *decode_max;
    kvs_engine_stats_t   st;

    decode_max = arg;

    if (out->n_tokens > 0) {
        kvs_engine_stats(e, &st);
        *decode_max = st.kv_used > *decode_max ? st.kv_used : *decode_max;
    }
}


/*
 * One greedy request with top-3 logprobs, run to its end; *decode_max:
 * the most KV blocks in use after a step once the first token came
 * (NULL: not watched).  The engine is consistent after it.
 */
static void
run1(kvs_engine_t *e, const int32_t *prompt, uint32_t n_prompt,
    uint32_t gen, kvs_engine_out_t *out, uint32_t *decode_max)
{
    kvs_engine_req_t  req;

    kvs_test_engine_req(&req, prompt, n_prompt, gen, 3);

    if (decode_max != NULL) {
        *decode_max = 0;
    }

    kvs_test_engine_run(e, &req, out,
                        decode_max != NULL ? step_blocks : NULL, decode_max);
}


/* Token i of a and token j of b, and the logprobs behind them, are the
 * same bit for bit. */
static void
same_at(const kvs_engine_out_t *a, size_t i, const kvs_engine_out_t *b,
    size_t j, const char *what)
{
    if (a->tokens[i] != b->tokens[j]) {
        fail_msg("%s: token %zu is %d, %d in the other run", what, i,
                 a->tokens[i], b->tokens[j]);
    }

    if (memcmp(&a->lp[i], &b->lp[j], sizeof(a->lp[i])) != 0) {
        fail_msg("%s: logprobs of token %zu differ (%.9g vs %.9g)", what,
                 i, a->lp[i].logprob, b->lp[j].logprob);
    }
}


static void
same_all(const kvs_engine_out_t *a, const kvs_engine_out_t *b,
    const char *what)
{
    assert_int_equal(a->n_lp, a->n_tokens);
    assert_int_equal(b->n_lp, b->n_tokens);
    kvs_test_engine_same(a, b, what);
}


static uint32_t
blocks_for(uint32_t n)
{
    return (n + BT - 1) / BT;
}


/* A long generation: bounded blocks, the outputs of the run that keeps
 * every block and of a full recompute, nothing leaked. */
static void
test_long_generation(void **state)
{
    int32_t             seq[MAX_TOK];
    size_t              s;
    uint32_t            k, dmax, kmax, w, i;
    kvs_engine_t       *fr, *keep, *cold;
    kvs_engine_out_t    a, b, c;
    kvs_engine_stats_t  st;
    kvs_test_model_t    md;

    static const uint32_t  ks[] = { 0, 9, 40, 97, N_GEN - 1 };

    (void) state;

    for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        model_gen(&md, &shapes[s]);
        w = shapes[s].swa;

        fr = engine_new(&md, 0, 0);
        keep = engine_new(&md, 0, 1);

        kvs_test_engine_fill(seq, N_PROMPT, 0x77 + s, md.m->hp.n_vocab, -1);

        run1(fr, seq, N_PROMPT, N_GEN, &a, &dmax);
        run1(keep, seq, N_PROMPT, N_GEN, &b, &kmax);
        same_all(&a, &b, shapes[s].label);

        /* decoding holds the window's blocks and the one written;
         * keeping them all, the whole sequence */
        assert_true(dmax <= blocks_for(w) + 1);
        assert_true(dmax >= 2);
        assert_int_equal(kmax, blocks_for(N_PROMPT + N_GEN - 1));

        kvs_engine_stats(fr, &st);
        assert_int_equal(st.kv_used, 0);
        assert_true(st.kv_used_max <= blocks_for(w) + 1);

        /* the full recompute: prompt and k generated tokens prefilled
         * in chunks of BUDGET on a fresh engine (given back between
         * chunks) give token k and its logprobs */
        memcpy(seq + N_PROMPT, a.tokens, N_GEN * sizeof(int32_t));

        for (i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
            k = ks[i];
            cold = engine_new(&md, 0, 0);

            run1(cold, seq, N_PROMPT + k, 1, &c, NULL);
            same_at(&a, k, &c, 0, shapes[s].label);

            /* a chunk's span and the window before it, not all */
            kvs_engine_stats(cold, &st);
            assert_true(st.kv_used_max
                        <= blocks_for(w - 1 + BUDGET) + 1);
            if (N_PROMPT + k > 2 * BUDGET) {
                assert_true(st.kv_used_max < blocks_for(N_PROMPT + k));
            }
            assert_int_equal(st.kv_used, 0);

            kvs_engine_out_free(&c);
            kvs_engine_free(cold);
        }

        kvs_engine_out_free(&a);
        kvs_engine_out_free(&b);
        kvs_engine_free(fr);
        kvs_engine_free(keep);
        kvs_test_model_free(&md);
    }
}


/*
 * The prefix cache: B shares a prefix of 42 tokens (longer than the
 * window, ending inside a block) with A; C is A's second turn (A's
 * prompt, its reply, new tokens).  Each reuses exactly the whole blocks
 * cached and matches an engine without a cache.
 */
static void
test_prefix_cache(void **state)
{
    int32_t             pa[MAX_TOK], pb[MAX_TOK];
    size_t              s;
    uint32_t            n_a, n_b, n_c, done;
    kvs_engine_t       *hot, *off;
    kvs_engine_out_t    h, o;
    kvs_engine_stats_t  st;
    kvs_test_model_t    md;

    (void) state;

    for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        model_gen(&md, &shapes[s]);

        hot = engine_new(&md, 1, 0);
        off = engine_new(&md, 0, 0);

        /* A: 50 tokens, 60 generated */
        n_a = 50;
        kvs_test_engine_fill(pa, n_a, 0x1234 + s, md.m->hp.n_vocab, -1);

        run1(hot, pa, n_a, 60, &h, NULL);
        run1(off, pa, n_a, 60, &o, NULL);
        same_all(&h, &o, "A");
        assert_int_equal(h.n_cached, 0);

        /* C's prompt: A's, its reply, 7 new tokens; all but the reply's
         * last token were computed (60 + 50 is not a whole block) */
        memcpy(pa + n_a, h.tokens, 60 * sizeof(int32_t));
        n_c = n_a + 60;
        done = n_c - 1;
        kvs_test_engine_fill(pa + n_c, 7, 0x99, md.m->hp.n_vocab, -1);
        n_c += 7;
        kvs_engine_out_free(&h);
        kvs_engine_out_free(&o);

        /* B: A's first 42 tokens, then its own */
        n_b = 42 + 20;
        memcpy(pb, pa, 42 * sizeof(int32_t));
        kvs_test_engine_fill(pb + 42, 20, 0x4321, md.m->hp.n_vocab, -1);
        if (pb[42] == pa[42]) {
            pb[42] = (pb[42] + 1) % (int32_t) md.m->hp.n_vocab;
        }

        run1(hot, pb, n_b, 40, &h, NULL);
        run1(off, pb, n_b, 40, &o, NULL);
        same_all(&h, &o, "B");
        assert_true(h.has_cache);
        assert_int_equal(h.n_cached, 42);
        kvs_engine_out_free(&h);
        kvs_engine_out_free(&o);

        run1(hot, pa, n_c, 30, &h, NULL);
        run1(off, pa, n_c, 30, &o, NULL);
        same_all(&h, &o, "C");
        assert_int_equal(h.n_cached, done / BT * BT);
        kvs_engine_out_free(&h);
        kvs_engine_out_free(&o);

        /* only the tree holds blocks now, none in use */
        kvs_engine_stats(hot, &st);
        assert_int_equal(st.kv_used, 0);
        assert_true(st.cache_blocks > 0);

        kvs_engine_free(hot);
        kvs_engine_free(off);
        kvs_test_model_free(&md);
    }
}


/*
 * n = 3 choices of a prompt longer than the window: choices 1 and 2
 * fork from choice 0's table once its prompt is computed, holes and all
 * (the prompt is computed once), and, greedy, each gives the tokens of
 * a single request on an engine keeping every block.
 */
static void
test_choices(void **state)
{
    int32_t             p[40];
    size_t              s, n;
    uint32_t            i, ended;
    kvs_err_t           err;
    kvs_engine_t       *e, *keep;
    kvs_engine_req_t    req;
    kvs_engine_seq_t   *hs[3], *r[3];
    kvs_engine_out_t    out[3], one;
    kvs_engine_stats_t  st;
    kvs_test_model_t    md;

    (void) state;

    for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        model_gen(&md, &shapes[s]);
        kvs_test_engine_fill(p, 40, 0xc0ffee + s, md.m->hp.n_vocab, -1);

        keep = engine_new(&md, 0, 1);
        run1(keep, p, 40, 50, &one, NULL);

        e = engine_new(&md, 0, 0);
        memset(&req, 0, sizeof(req));
        req.prompt = p;
        req.n_prompt = 40;
        req.max_tokens = 50;
        req.n = 3;
        req.ignore_eos = 1;
        req.sample.top_p = 1.0f;
        req.sample.logprobs = 1;
        req.sample.top_logprobs = 3;
        memset(out, 0, sizeof(out));

        if (kvs_engine_submit(e, &req, hs, &err) != KVS_OK) {
            fail_msg("submit: %s", err.msg);
        }

        for (ended = 0; ended < 3; ) {
            (void) kvs_engine_step(e);

            while ((n = kvs_engine_ready(e, r, 3)) > 0) {
                while (n-- > 0) {
                    i = r[n] == hs[0] ? 0 : r[n] == hs[1] ? 1 : 2;
                    assert_ptr_equal(r[n], hs[i]);
                    if (kvs_engine_read(e, r[n], &out[i])
                        == KVS_FINISH_LENGTH)
                    {
                        ended++;
                    }
                }
            }
        }

        kvs_engine_stats(e, &st);
        assert_int_equal(st.prefill_tokens, 40);
        assert_true(st.kv_used_max <= 3 * (blocks_for(shapes[s].swa) + 1)
                                      + blocks_for(40));

        for (i = 0; i < 3; i++) {
            kvs_engine_close(e, hs[i]);
            same_all(&out[i], &one, "choice");
            kvs_engine_out_free(&out[i]);
        }

        if (kvs_engine_check(e, &err) != KVS_OK) {
            fail_msg("engine check: %s", err.msg);
        }

        kvs_engine_stats(e, &st);
        assert_int_equal(st.kv_used, 0);

        kvs_engine_out_free(&one);
        kvs_engine_free(e);
        kvs_engine_free(keep);
        kvs_test_model_free(&md);
    }
}


/*
 * Preemption: NP sequences of 12 + 40 tokens on a pool of 11 blocks (a
 * decoding one holds 2 or 3, a chunk up to 11: the least admission
 * allows)
 * preempt one another; a preempted sequence caches what it computed
 * (its table has holes: only what the tree can hold without a gap) and
 * is recomputed.  Cache on and off, each gives the tokens of a single
 * request on an engine keeping every block, and nothing leaks.
 */
static void
test_preemption(void **state)
{
    int32_t             p[NP][12];
    size_t              s, n;
    uint32_t            i, ended;
    int                 cache;
    kvs_err_t           err;
    kvs_engine_t       *e, *keep;
    kvs_engine_req_t    req;
    kvs_engine_seq_t   *hs[NP], *r[NP];
    kvs_engine_out_t    out[NP], one[NP];
    kvs_engine_conf_t   conf;
    kvs_engine_stats_t  st;
    kvs_test_model_t    md;

    (void) state;

    for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        model_gen(&md, &shapes[s]);
        keep = engine_new(&md, 0, 1);

        for (i = 0; i < NP; i++) {
            kvs_test_engine_fill(p[i], 12, 0xbeef + 16 * s + i,
                                 md.m->hp.n_vocab, -1);
            run1(keep, p[i], 12, 40, &one[i], NULL);
        }

        for (cache = 0; cache < 2; cache++) {
            kvs_test_engine_conf(&conf, &md, BT, 11, BUDGET, cache);
            e = kvs_test_engine_new(&conf);

            kvs_test_engine_req(&req, NULL, 12, 40, 3);
            memset(out, 0, sizeof(out));

            for (i = 0; i < NP; i++) {
                req.prompt = p[i];
                if (kvs_engine_submit(e, &req, &hs[i], &err) != KVS_OK) {
                    fail_msg("submit: %s", err.msg);
                }
            }

            for (ended = 0; ended < NP; ) {
                (void) kvs_engine_step(e);

                while ((n = kvs_engine_ready(e, r, NP)) > 0) {
                    while (n-- > 0) {
                        for (i = 0; hs[i] != r[n]; i++) {
                            assert_true(i < NP - 1);
                        }

                        if (kvs_engine_read(e, r[n], &out[i])
                            != KVS_FINISH_NONE)
                        {
                            assert_int_equal(out[i].finish,
                                             KVS_FINISH_LENGTH);
                            ended++;
                        }
                    }
                }
            }

            kvs_engine_stats(e, &st);
            assert_true(st.preemptions > 0);

            for (i = 0; i < NP; i++) {
                kvs_engine_close(e, hs[i]);
                same_all(&out[i], &one[i], cache ? "preempted, cache"
                                                 : "preempted");
                kvs_engine_out_free(&out[i]);
            }

            if (kvs_engine_check(e, &err) != KVS_OK) {
                fail_msg("engine check: %s", err.msg);
            }

            kvs_engine_stats(e, &st);
            assert_int_equal(st.kv_used, 0);
            kvs_engine_free(e);
        }

        for (i = 0; i < NP; i++) {
            kvs_engine_out_free(&one[i]);
        }

        kvs_engine_free(keep);
        kvs_test_model_free(&md);
    }
}


/*
 * Admission: a request whose whole length needs 40 blocks of a 16-block
 * pool is refused by an engine keeping every block, naming the numbers,
 * and served, as a single request on a large pool, by one that gives
 * them back (its window and a chunk need 11).
 */
static void
test_admission(void **state)
{
    int32_t             p[N_PROMPT];
    kvs_err_t           err;
    kvs_engine_t       *e, *keep, *big;
    kvs_engine_req_t    req;
    kvs_engine_seq_t   *h;
    kvs_engine_conf_t   conf;
    kvs_engine_out_t    a, b;
    kvs_test_model_t    md;
    int                 k;

    (void) state;
    model_gen(&md, &shapes[0]);
    kvs_test_engine_fill(p, N_PROMPT, 0xad, md.m->hp.n_vocab, -1);

    for (k = 0; k < 2; k++) {
        kvs_test_engine_conf(&conf, &md, BT, 16, BUDGET, 1);
        conf.keep_window_blocks = k;
        *(k ? &keep : &e) = kvs_test_engine_new(&conf);
    }

    memset(&req, 0, sizeof(req));
    req.prompt = p;
    req.n_prompt = N_PROMPT;
    req.max_tokens = N_GEN;
    req.ignore_eos = 1;

    assert_int_equal(kvs_engine_submit(keep, &req, &h, &err), KVS_ERANGE);
    assert_non_null(strstr(err.msg, "needs 40 KV blocks; the whole cache "
                                    "has 16"));

    big = engine_new(&md, 0, 1);
    run1(e, p, N_PROMPT, N_GEN, &a, NULL);
    run1(big, p, N_PROMPT, N_GEN, &b, NULL);
    same_all(&a, &b, "admitted");

    kvs_engine_out_free(&a);
    kvs_engine_out_free(&b);
    kvs_engine_free(e);
    kvs_engine_free(keep);
    kvs_engine_free(big);
    kvs_test_model_free(&md);
}


/*
 * The kernels' mask: the same decode twice over one prompt, the second
 * with every block that left the window swapped, in the table, for a
 * block of NaNs (a real block: the backend's own checks pass).  The
 * logits must stay the same, bit for bit.
 */
static void
test_poisoned_blocks(void **state)
{
    int32_t            ids[80];
    float             *lg, *ref;
    size_t             s, z, per;
    uint32_t           i, j, w, n, poison, first;
    kvs_err_t          err;
    kvs_cpu_kv_t      *kv;
    kvs_kv_pool_t     *pool;
    kvs_kv_table_t     t;
    kvs_cpu_model_t   *cm;
    kvs_batch_tok_t    tok;
    kvs_batch_t        b;
    kvs_test_model_t   md;
    int                pass;

    (void) state;
    n = 80;

    for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        model_gen(&md, &shapes[s]);
        w = shapes[s].swa;
        kvs_test_engine_fill(ids, n, 0x5150 + s, md.m->hp.n_vocab, -1);

        if (kvs_cpu_model_new(&cm, md.m, &err) != KVS_OK
            || kvs_cpu_kv_new(&kv, cm, 64, BT, &err) != KVS_OK
            || kvs_kv_pool_new(&pool, 64, BT, &err) != KVS_OK)
        {
            fail_msg("%s", err.msg);
        }

        lg = malloc(2 * (size_t) n * cm->hp.n_vocab * sizeof(float));
        assert_non_null(lg);
        ref = lg + (size_t) n * cm->hp.n_vocab;

        /* the poison: a block of the pool the tables never get, all its
         * f32 K and V (kvs_kv_layout: the block is one run of floats) */
        assert_int_equal(kvs_kv_pool_alloc(pool, 1, &poison, &err), KVS_OK);

        per = (size_t) kv->lo.block_bytes / sizeof(float);
        for (z = 0; z < per; z++) {
            ((float *) (void *) kvs_cpu_kv_block(kv, poison))[z] = NAN;
        }

        for (pass = 0; pass < 2; pass++) {
            memset(&t, 0, sizeof(t));

            for (j = 0; j < n; j++) {
                if (kvs_kv_table_reserve(&t, pool, j + 1, &err) != KVS_OK) {
                    fail_msg("%s", err.msg);
                }

                tok.token = ids[j];
                tok.pos = j;
                tok.table = &t;
                tok.want_logits = 1;
                b.toks = &tok;
                b.n = 1;

                if (kvs_cpu_forward(cm, kv, &b, (pass ? lg : ref)
                                    + (size_t) j * cm->hp.n_vocab, &err)
                    != KVS_OK)
                {
                    fail_msg("%s: pos %u: %s", shapes[s].label, j, err.msg);
                }

                /* what position j + 1 no longer reads: poisoned */
                first = j + 2 > w ? j + 2 - w : 0;

                for (i = 0; pass && i < first / BT; i++) {
                    if (t.blocks[i] != poison) {
                        (void) kvs_kv_pool_unref(pool, t.blocks[i], NULL);
                        t.blocks[i] = poison;
                    }
                }
            }

            /* the poisoned entries are not the table's to give back */
            for (i = 0; pass && i < t.n_blocks && t.blocks[i] == poison;
                 i++)
            {
                t.blocks[i] = KVS_KV_HOLE;
                t.n_dropped = i + 1;
            }

            assert_int_equal(kvs_kv_table_check(&t, pool, &err), KVS_OK);
            assert_true(!pass || t.n_dropped > 0);
            (void) kvs_kv_table_release(&t, pool, &err);
        }

        for (z = 0; z < (size_t) n * cm->hp.n_vocab; z++) {
            if (!(lg[z] == ref[z])) {
                fail_msg("%s: logit %zu of position %zu is %g, %g with "
                         "the whole table", shapes[s].label,
                         z % cm->hp.n_vocab, z / cm->hp.n_vocab,
                         lg[z], ref[z]);
            }
        }

        (void) kvs_kv_pool_unref(pool, poison, NULL);
        kvs_test_pool_ok(pool);
        free(lg);
        kvs_kv_pool_free(pool);
        kvs_cpu_kv_free(kv);
        kvs_cpu_model_free(cm);
        kvs_test_model_free(&md);
    }
}


/* A table's holes: drop gives back whole blocks before a position
 * only, a fork copies the holes, slot refuses a hole, release and check
 * skip them, and the pool gets every block back. */
static void
test_table_holes(void **state)
{
    uint32_t         n, blk, off;
    kvs_err_t        err;
    kvs_kv_pool_t   *pool;
    kvs_kv_table_t   t, f;

    (void) state;
    assert_int_equal(kvs_kv_pool_new(&pool, 16, BT, &err), KVS_OK);
    memset(&t, 0, sizeof(t));
    memset(&f, 0, sizeof(f));

    assert_int_equal(kvs_kv_table_reserve(&t, pool, 21, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_used_count(pool), 6);

    /* position 11 is in block 2: blocks 0 and 1 go */
    kvs_kv_table_drop(&t, pool, 11, &n);
    assert_int_equal(n, 2);
    kvs_kv_table_drop(&t, pool, 11, &n);
    assert_int_equal(n, 0);
    assert_int_equal(t.n_dropped, 2);
    assert_int_equal(t.n_blocks, 6);
    assert_int_equal(kvs_kv_table_held(&t), 4);
    assert_int_equal(t.blocks[1], KVS_KV_HOLE);
    assert_int_equal(kvs_kv_pool_used_count(pool), 4);
    assert_int_equal(kvs_kv_table_check(&t, pool, &err), KVS_OK);

    assert_int_equal(kvs_kv_table_slot(&t, 7, &blk, &off, &err),
                     KVS_ERANGE);
    assert_int_equal(kvs_kv_table_slot(&t, 8, &blk, &off, &err), KVS_OK);
    assert_int_equal(blk, t.blocks[2]);

    assert_int_equal(kvs_kv_table_fork(&f, &t, pool, &err), KVS_OK);
    assert_int_equal(f.n_dropped, 2);
    assert_int_equal(kvs_kv_pool_refcount(pool, t.blocks[2]), 2);
    assert_int_equal(kvs_kv_table_check(&f, pool, &err), KVS_OK);

    /* growing keeps the holes where they are */
    assert_int_equal(kvs_kv_table_reserve(&t, pool, 30, &err), KVS_OK);
    assert_int_equal(t.n_dropped, 2);
    assert_int_equal(t.n_blocks, 8);

    /* past every position: all but nothing beyond the table */
    kvs_kv_table_drop(&f, pool, 1000, &n);
    assert_int_equal(n, 4);
    assert_int_equal(kvs_kv_table_held(&f), 0);
    assert_int_equal(kvs_kv_table_check(&f, pool, &err), KVS_OK);

    assert_int_equal(kvs_kv_table_release(&f, pool, &err), KVS_OK);
    assert_int_equal(kvs_kv_table_release(&t, pool, &err), KVS_OK);
    kvs_test_pool_ok(pool);
    kvs_kv_pool_free(pool);
}


/* Which models give blocks back: every layer windowed, the largest
 * window; a global layer anywhere (gemma's period) keeps them all. */
static void
test_swa_all(void **state)
{
    kvs_hparams_t  hp;

    (void) state;
    memset(&hp, 0, sizeof(hp));
    hp.n_layer = 4;
    assert_int_equal(kvs_hparams_swa_all(&hp), 0);

    hp.n_swa = 4096;                  /* Mistral, phi3 */
    assert_int_equal(kvs_hparams_swa_all(&hp), 4096);

    hp.swa_period = 2;                /* gemma2: odd layers global */
    assert_int_equal(kvs_hparams_swa_all(&hp), 0);

    hp.swa_period = 6;                /* gemma3, 4 layers: all windowed */
    assert_int_equal(kvs_hparams_swa_all(&hp), 4096);

    hp.n_layer = 6;                   /* layer 5 is global */
    assert_int_equal(kvs_hparams_swa_all(&hp), 0);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_table_holes),
        cmocka_unit_test(test_swa_all),
        cmocka_unit_test(test_long_generation),
        cmocka_unit_test(test_prefix_cache),
        cmocka_unit_test(test_choices),
        cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_admission),
        cmocka_unit_test(test_poisoned_blocks),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
