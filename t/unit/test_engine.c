/*
 * test_engine: the whole engine (scheduler, pool, CPU backend, sampler,
 * detokenizer, stop strings, hand-over) on stories260K and on seeded
 * random models of several shapes.
 *
 * Batching invariance, issue 4's (b) and (c): 32 sequences of different
 * prompt and output lengths; each one's tokens when it runs alone are
 * the reference, and must come back identical when it runs batched with
 * 1, 7 and 31 others, with chunked prefill (a step budget smaller than
 * most prompts) and without, with preemption forced by a cache of barely
 * more than one sequence's blocks, and with block sizes 1 and 64.  On
 * stories260K this holds for seeded sampling too: a sequence's sampler
 * state does not depend on its neighbours or on being recomputed.
 *
 * After every run every block is back in the pool (kvs_engine_check).
 * The expected texts of the stop and length cases come from the model's
 * own unconstrained output in the same test, cut by hand-stated rules.
 */

#include "kvs_test.h"
#include "kvs_test_engine.h"
#include "kvs_test_model.h"

#include <poll.h>
#include <unistd.h>

#include "base/kvs_clock.h"
#include "engine/kvs_engine.h"
#include "tokenizer/kvs_tok.h"

#define N_SEQ   32
#define MAX_GEN 24


/* One sequence of the set and what came back for it. */
typedef struct {
    int32_t           prompt[48];
    uint32_t          n_prompt;
    uint32_t          gen;
    float             temp;
    uint64_t          seed;
    kvs_engine_out_t  out;
} seq_t;

typedef struct {
    uint32_t  block;
    uint32_t  n_blocks;               /* 0: plenty */
    uint32_t  budget;
    int       no_chunk;
    int       threaded;
} run_conf_t;


static void
model_gen(kvs_test_model_t *md, uint32_t n_head, uint32_t n_head_kv,
    uint32_t dtype, int tied)
{
    kvs_gen_spec_t  spec;

    memset(&spec, 0, sizeof(spec));
    snprintf(spec.name, sizeof(spec.name), "test-engine");
    spec.n_layer = 2;
    spec.n_embd = n_head * 16;
    spec.n_head = n_head;
    spec.n_head_kv = n_head_kv;
    spec.n_ff = spec.n_embd * 2;
    spec.n_vocab = 300;
    spec.n_ctx = 128;
    spec.dtype = dtype;
    spec.tied = tied;
    spec.seed = 0xe9e9 + n_head * 7 + n_head_kv + dtype * 3 + tied;

    kvs_test_model_gen(md, &spec);
}


/* The set: prompts of 1..45 seeded ids (BOS first when the vocabulary
 * has one), outputs of 4..MAX_GEN tokens. */
static void
seqs_make(seq_t *seqs, const kvs_test_model_t *md, float temp)
{
    uint32_t  s, i;
    uint64_t  rng;

    rng = 0x1234567;

    for (s = 0; s < N_SEQ; s++) {
        memset(&seqs[s], 0, sizeof(seq_t));
        seqs[s].n_prompt = 1 + (s * 13) % 45;
        seqs[s].gen = 4 + (s * 7) % (MAX_GEN - 3);
        seqs[s].temp = temp;
        seqs[s].seed = 1000 + s;

        for (i = 0; i < seqs[s].n_prompt; i++) {
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            seqs[s].prompt[i] = (int32_t) ((rng >> 33) % md->m->hp.n_vocab);
        }

        if (md->v->bos >= 0) {
            seqs[s].prompt[0] = md->v->bos;
        }
    }
}


static void
seqs_free(seq_t *seqs)
{
    uint32_t  s;

    for (s = 0; s < N_SEQ; s++) {
        kvs_engine_out_free(&seqs[s].out);
    }
}


/* Reads whatever the engine has ready into the sequences' outs; returns
 * how many handles ended (and closes them). */
static uint32_t
drain(kvs_engine_t *e, seq_t *seqs)
{
    size_t             k, n;
    uint32_t           ended;
    seq_t             *sq;
    kvs_engine_seq_t  *hs[16];

    ended = 0;

    while ((n = kvs_engine_ready(e, hs, 16)) > 0) {
        for (k = 0; k < n; k++) {
            sq = kvs_engine_seq_data(hs[k]);
            assert_true(kvs_engine_read(e, hs[k], &sq->out) >= 0);

            if (sq->out.finish != KVS_FINISH_NONE) {
                kvs_engine_close(e, hs[k]);
                ended++;
            }
        }
    }

    return ended;
}


/* Runs sequences [first, first + n) of the set through a fresh engine;
 * returns the number of preemptions. */
static uint64_t
run(const kvs_test_model_t *md, seq_t *seqs, uint32_t first, uint32_t n,
    const run_conf_t *rc)
{
    uint32_t            s, ended;
    kvs_err_t           err;
    kvs_engine_t       *e;
    struct pollfd       pfd;
    kvs_engine_req_t    req;
    kvs_engine_seq_t   *h;
    kvs_engine_conf_t   conf;
    uint32_t            k;
    uint64_t            steps;
    kvs_engine_stats_t  st;

    memset(&conf, 0, sizeof(conf));
    conf.model = md->m;
    conf.vocab = md->v;
    conf.block_tokens = rc->block;
    conf.n_blocks = rc->n_blocks != 0 ? rc->n_blocks
                                      : n * (72 / rc->block + 1);
    conf.threads = rc->threaded ? 2 : 1;   /* compute threads too */
    conf.max_batch_tokens = rc->budget;
    conf.max_running = N_SEQ;
    conf.no_chunked_prefill = rc->no_chunk;

    if (kvs_engine_new(&e, &conf, &err) != KVS_OK) {
        fail_msg("engine: %s", err.msg);
    }

    if (rc->threaded) {
        assert_int_equal(kvs_engine_start(e, &err), KVS_OK);
    }

    for (s = first; s < first + n; s++) {
        memset(&req, 0, sizeof(req));
        req.prompt = seqs[s].prompt;
        req.n_prompt = seqs[s].n_prompt;
        req.max_tokens = seqs[s].gen;
        req.sample.temperature = seqs[s].temp;
        req.sample.top_p = 0.9f;
        req.sample.seed = seqs[s].seed;
        req.data = &seqs[s];
        kvs_engine_out_free(&seqs[s].out);

        if (kvs_engine_submit(e, &req, &h, &err) != KVS_OK) {
            fail_msg("submit %u: %s", s, err.msg);
        }
    }

    ended = 0;

    if (rc->threaded) {
        pfd.fd = kvs_engine_fd(e);
        pfd.events = POLLIN;

        while (ended < n) {
            assert_true(poll(&pfd, 1, 10000) == 1);
            ended += drain(e, seqs);
        }

        kvs_engine_stop(e);

    } else {
        while (kvs_engine_step(e)) {
            ended += drain(e, seqs);
        }

        ended += drain(e, seqs);
    }

    assert_int_equal(ended, n);

    kvs_engine_stats(e, &st);
    assert_int_equal(st.kv_used, 0);
    assert_int_equal(st.running + st.waiting, 0);

    /* iteration_tokens_total's buckets: every step in one of them, with
     * every token it computed */
    steps = 0;
    for (k = 0; k <= KVS_ENGINE_ITER_BOUNDS; k++) {
        steps += st.iter_tokens[k];
    }
    assert_true(st.steps > 0);
    assert_int_equal(steps, st.steps);
    assert_int_equal(st.iter_tokens_sum, st.prefill_tokens + st.decode_tokens);

    if (kvs_engine_check(e, &err) != KVS_OK) {
        fail_msg("pool: %s", err.msg);
    }

    kvs_engine_free(e);

    for (s = first; s < first + n; s++) {
        assert_true(seqs[s].out.finish == KVS_FINISH_LENGTH
                    || seqs[s].out.finish == KVS_FINISH_STOP);
    }

    return st.preemptions;
}


static void
expect_same(const seq_t *ref, const seq_t *got, uint32_t first, uint32_t n,
    const char *what)
{
    uint32_t  s;

    for (s = first; s < first + n; s++) {
        if (ref[s].out.n_tokens != got[s].out.n_tokens
            || (ref[s].out.n_tokens > 0
                && memcmp(ref[s].out.tokens, got[s].out.tokens,
                          ref[s].out.n_tokens * sizeof(int32_t)) != 0)
            || ref[s].out.finish != got[s].out.finish)
        {
            fail_msg("%s: sequence %u differs from its run alone (%zu vs "
                     "%zu tokens)", what, s, got[s].out.n_tokens,
                     ref[s].out.n_tokens);
        }
    }
}


/* The invariance matrix on one model. */
static void
check_batching(const kvs_test_model_t *md, float temp)
{
    uint32_t    s, k, per_seq;
    uint64_t    pre;
    seq_t      *ref, *got;
    run_conf_t  alone = { 16, 0, 2048, 0, 0 };
    run_conf_t  conf;
    const uint32_t  others[] = { 1, 7, 31 };

    ref = calloc(N_SEQ, sizeof(seq_t));
    got = calloc(N_SEQ, sizeof(seq_t));
    assert_non_null(ref);
    assert_non_null(got);

    seqs_make(ref, md, temp);
    seqs_make(got, md, temp);

    for (s = 0; s < N_SEQ; s++) {
        run(md, ref, s, 1, &alone);
    }

    for (k = 0; k < 3; k++) {
        /* chunked: a budget of 8 splits most prompts */
        conf = alone;
        conf.budget = 8;
        run(md, got, 0, others[k] + 1, &conf);
        expect_same(ref, got, 0, others[k] + 1, "chunked");

        conf = alone;
        conf.budget = 96;
        conf.no_chunk = 1;
        run(md, got, 0, others[k] + 1, &conf);
        expect_same(ref, got, 0, others[k] + 1, "not chunked");
    }

    /* a cache of one longest sequence plus a little: 45 + 24 - 1 = 68
     * positions are 5 blocks of 16 */
    per_seq = 5;
    conf = alone;
    conf.n_blocks = per_seq + 3;
    conf.budget = 8;
    pre = run(md, got, 0, N_SEQ, &conf);
    assert_true(pre > 0);
    expect_same(ref, got, 0, N_SEQ, "preempted, chunked");

    conf.no_chunk = 1;
    conf.budget = 96;
    pre = run(md, got, 0, N_SEQ, &conf);
    assert_true(pre > 0);
    expect_same(ref, got, 0, N_SEQ, "preempted, not chunked");

    conf = alone;
    conf.block = 1;
    run(md, got, 0, 8, &conf);
    expect_same(ref, got, 0, 8, "block 1");

    conf.block = 64;
    run(md, got, 0, 8, &conf);
    expect_same(ref, got, 0, 8, "block 64");

    conf = alone;
    conf.threaded = 1;
    conf.budget = 16;
    run(md, got, 0, N_SEQ, &conf);
    expect_same(ref, got, 0, N_SEQ, "engine thread");

    seqs_free(ref);
    seqs_free(got);
    free(ref);
    free(got);
}


static void
test_batching_stories(void **state)
{
    kvs_test_model_t  md;

    (void) state;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    check_batching(&md, 0.0f);
    check_batching(&md, 0.8f);
    kvs_test_model_free(&md);
}


static void
test_batching_random(void **state)
{
    kvs_test_model_t  md;

    (void) state;

    model_gen(&md, 4, 4, KVS_GGML_F32, 0);     /* MHA, untied */
    check_batching(&md, 0.0f);
    kvs_test_model_free(&md);

    model_gen(&md, 8, 2, KVS_GGML_F32, 1);     /* GQA, tied */
    check_batching(&md, 0.0f);
    kvs_test_model_free(&md);

    model_gen(&md, 3, 1, KVS_GGML_F16, 0);     /* odd heads, F16 */
    check_batching(&md, 0.0f);
    kvs_test_model_free(&md);

    model_gen(&md, 5, 5, KVS_GGML_F16, 1);
    check_batching(&md, 0.0f);
    kvs_test_model_free(&md);
}


/* One request through a step-driven engine; returns its output. */
static void
one(const kvs_test_model_t *md, const kvs_engine_req_t *req,
    kvs_engine_out_t *out)
{
    kvs_err_t          err;
    kvs_engine_t      *e;
    kvs_engine_seq_t  *h, *r;
    kvs_engine_conf_t  conf;

    kvs_test_engine_conf(&conf, md, 0, 64, 0, 1);
    e = kvs_test_engine_new(&conf);

    if (kvs_engine_submit(e, req, &h, &err) != KVS_OK) {
        fail_msg("submit: %s", err.msg);
    }

    memset(out, 0, sizeof(kvs_engine_out_t));

    while (kvs_engine_step(e)) {
        /* nothing to do between steps */
    }

    assert_int_equal(kvs_engine_ready(e, &r, 1), 1);
    assert_ptr_equal(r, h);
    assert_true(kvs_engine_read(e, h, out) > 0);
    kvs_engine_close(e, h);
    assert_int_equal(kvs_engine_check(e, &err), KVS_OK);
    kvs_engine_free(e);
}


static void
test_stops(void **state)
{
    char               *cut;
    uint8_t            *want;
    size_t              at, len, want_len;
    kvs_test_model_t    md;
    int32_t             bos;
    kvs_err_t           err;
    kvs_buf_t           dec;
    const char         *stop[2];
    kvs_engine_req_t    req;
    kvs_engine_out_t    full, o;

    (void) state;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    bos = md.v->bos;

    memset(&req, 0, sizeof(req));
    req.prompt = &bos;
    req.n_prompt = 1;
    req.max_tokens = 120;

    /* unconstrained: the text is the decode of the tokens */
    one(&md, &req, &full);
    assert_int_equal(full.n_tokens, full.n_generated);
    assert_true(full.n_tokens > 40);

    memset(&dec, 0, sizeof(dec));
    assert_int_equal(kvs_tok_decode(md.v, full.tokens, full.n_tokens, 0,
                                    &dec, &err), KVS_OK);

    /* after a bare BOS the text is the plain decode (the first space
     * dropped, as llama2.c prints it) */
    assert_int_equal(dec.len, full.text.len);
    assert_memory_equal(dec.data, full.text.data, full.text.len);

    /* and through the whole engine it is llama2.c's greedy text: its
     * first 120 tokens' worth of the 200-token reference */
    want = kvs_test_slurp(
        kvs_test_fixture("models/stories260K.expected-greedy-n200.txt"),
        &want_len);
    assert_non_null(want);
    assert_true(want_len > full.text.len);
    assert_memory_equal(want, full.text.data, full.text.len);
    free(want);

    req.max_tokens = 200;
    one(&md, &req, &o);
    assert_int_equal(o.finish, KVS_FINISH_LENGTH);
    want = kvs_test_slurp(
        kvs_test_fixture("models/stories260K.expected-greedy-n200.txt"),
        &want_len);
    assert_int_equal(o.text.len, want_len);
    assert_memory_equal(o.text.data, want, want_len);
    free(want);
    kvs_engine_out_free(&o);
    req.max_tokens = 120;

    /* a stop string from the middle of that text, 7 bytes from byte 60:
     * output is the text before its first occurrence */
    assert_true(full.text.len > 80);
    stop[0] = strndup((const char *) full.text.data + 60, 7);
    stop[1] = "zzzzzzzzzz";
    cut = memmem(full.text.data, full.text.len, stop[0], 7);
    at = (size_t) (cut - (char *) full.text.data);

    req.stop = stop;
    req.n_stop = 2;
    len = 7;
    req.stop_len = (size_t[]) { len, 10 };
    one(&md, &req, &o);
    assert_int_equal(o.finish, KVS_FINISH_STOP);
    assert_int_equal(o.text.len, at);
    assert_memory_equal(o.text.data, full.text.data, at);
    assert_true(o.n_tokens < full.n_tokens);
    kvs_engine_out_free(&o);
    free((char *) stop[0]);

    /* max_tokens: length, exactly that many */
    req.n_stop = 0;
    req.max_tokens = 10;
    one(&md, &req, &o);
    assert_int_equal(o.finish, KVS_FINISH_LENGTH);
    assert_int_equal(o.n_tokens, 10);
    assert_memory_equal(o.tokens, full.tokens, 10 * sizeof(int32_t));
    kvs_engine_out_free(&o);

    /* a stop token id: generation ends before its first occurrence */
    req.max_tokens = 120;
    req.stop_ids = &full.tokens[5];
    req.n_stop_ids = 1;
    one(&md, &req, &o);
    assert_int_equal(o.finish, KVS_FINISH_STOP);
    assert_true(o.n_tokens <= 5);
    assert_memory_equal(o.tokens, full.tokens,
                        o.n_tokens * sizeof(int32_t));
    kvs_engine_out_free(&o);

    /* logprobs: one record per token, of that token, top ones sorted */
    req.n_stop_ids = 0;
    req.max_tokens = 8;
    req.sample.logprobs = 1;
    req.sample.top_logprobs = 3;
    one(&md, &req, &o);
    assert_int_equal(o.n_lp, 8);

    for (len = 0; len < 8; len++) {
        assert_int_equal(o.lp[len].token, o.tokens[len]);
        assert_true(o.lp[len].logprob <= 0);
        assert_int_equal(o.lp[len].n_top, 3);
        /* greedy: the chosen token is the most likely */
        assert_int_equal(o.lp[len].top_token[0], o.tokens[len]);
        assert_true(o.lp[len].top_logprob[0] >= o.lp[len].top_logprob[1]);
    }

    kvs_engine_out_free(&o);
    kvs_engine_out_free(&full);
    kvs_buf_free(&dec);
    kvs_test_model_free(&md);
}


static void
test_cancel_and_refusals(void **state)
{
    int                 i;
    kvs_test_model_t    md;
    int32_t             prompt[40];
    kvs_err_t           err;
    const char         *bad_stop = "";
    size_t              zero = 0;
    kvs_engine_t       *e;
    struct pollfd       pfd;
    kvs_engine_req_t    req, bad;
    kvs_engine_seq_t   *h, *h2, *r[4];
    kvs_engine_conf_t   conf;
    kvs_engine_stats_t  st;

    (void) state;

    model_gen(&md, 4, 2, KVS_GGML_F32, 0);

    kvs_test_engine_conf(&conf, &md, 16, 6, 0, 1);
    e = kvs_test_engine_new(&conf);

    for (i = 0; i < 40; i++) {
        prompt[i] = i + 7;
    }

    memset(&req, 0, sizeof(req));
    req.prompt = prompt;
    req.n_prompt = 40;
    req.max_tokens = 50;

    /* refusals: each names its reason and queues nothing */
    bad = req;
    bad.max_tokens = 100;           /* 140 > the context of 128 */
    assert_int_equal(kvs_engine_submit(e, &bad, &h, &err), KVS_ERANGE);
    assert_non_null(strstr(err.msg, "context"));
    assert_null(h);

    /* 6 blocks of 16 hold 96 positions: 40 + 57 - 1 fits, one more
     * does not */
    bad = req;
    bad.max_tokens = 58;
    assert_int_equal(kvs_engine_submit(e, &bad, &h, &err), KVS_ERANGE);
    assert_non_null(strstr(err.msg, "7 KV blocks"));

    bad.max_tokens = 57;
    assert_int_equal(kvs_engine_submit(e, &bad, &h, &err), KVS_OK);
    kvs_engine_close(e, h);

    bad = req;
    prompt[3] = 300;
    assert_int_equal(kvs_engine_submit(e, &bad, &h, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "prompt token 3"));
    prompt[3] = 10;

    bad = req;
    bad.n_prompt = 0;
    assert_int_equal(kvs_engine_submit(e, &bad, &h, &err), KVS_EINVAL);

    bad = req;
    bad.sample.top_p = 1.5f;
    assert_int_equal(kvs_engine_submit(e, &bad, &h, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "top_p"));

    bad = req;
    bad.stop = &bad_stop;
    bad.stop_len = &zero;
    bad.n_stop = 1;
    assert_int_equal(kvs_engine_submit(e, &bad, &h, &err), KVS_EINVAL);

    /* the one that was accepted and closed before any step is dropped by
     * the step, and nothing else runs */
    assert_int_equal(kvs_engine_step(e), 0);
    kvs_engine_stats(e, &st);
    assert_int_equal(st.kv_used, 0);

    /* cancel mid-generation: blocks free after the next step */
    assert_int_equal(kvs_engine_submit(e, &req, &h, &err), KVS_OK);
    assert_int_equal(kvs_engine_submit(e, &req, &h2, &err), KVS_OK);

    pfd.fd = kvs_engine_fd(e);
    pfd.events = POLLIN;
    assert_int_equal(poll(&pfd, 1, 0), 0);

    for (i = 0; i < 4; i++) {
        assert_int_equal(kvs_engine_step(e), 1);
    }

    /* output is signalled on the eventfd and taken once */
    assert_int_equal(poll(&pfd, 1, 0), 1);
    assert_int_equal(kvs_engine_ready(e, r, 4), 2);
    assert_int_equal(poll(&pfd, 1, 0), 0);

    kvs_engine_stats(e, &st);
    assert_true(st.kv_used >= 6);

    kvs_engine_close(e, h);
    assert_int_equal(kvs_engine_step(e), 1);
    kvs_engine_stats(e, &st);
    assert_int_equal(st.kv_used, 3);

    kvs_engine_close(e, h2);
    assert_int_equal(kvs_engine_step(e), 0);
    assert_int_equal(kvs_engine_check(e, &err), KVS_OK);
    kvs_engine_stats(e, &st);

    kvs_engine_free(e);
    kvs_test_model_free(&md);
}


/* n > 1: choice i is what a single request with seed + i gives, though
 * the choices share the prompt's blocks and copy the half-full last one
 * on their first write; with a cache too small for all, preemption and
 * the copies mix; closing choices before and after they fork. */
static void
test_choices(void **state)
{
    int                 i, k;
    kvs_test_model_t    md;
    int32_t             prompt[19];
    kvs_err_t           err;
    kvs_engine_t       *e;
    kvs_engine_req_t    req;
    kvs_engine_seq_t   *h[4];
    kvs_engine_out_t    alone[4], got[4];
    kvs_engine_conf_t   conf;
    kvs_engine_stats_t  st;

    (void) state;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    for (i = 0; i < 19; i++) {
        prompt[i] = i == 0 ? md.v->bos : 30 + i * 17 % 400;
    }

    memset(&req, 0, sizeof(req));
    req.prompt = prompt;
    req.n_prompt = 19;              /* 16 + 3: a half-full second block */
    req.max_tokens = 40;
    req.ignore_eos = 1;
    req.sample.temperature = 0.9f;
    req.sample.top_p = 0.95f;
    req.sample.seed = 77;

    for (i = 0; i < 4; i++) {
        one(&md, &req, &alone[i]);
        req.sample.seed++;
    }

    req.sample.seed = 77;
    req.n = 4;

    for (k = 0; k < 2; k++) {
        /* k 1: 8 blocks of 16 for 4 x 58 positions: preemption */
        kvs_test_engine_conf(&conf, &md, 0, k == 0 ? 64 : 8, 0, 1);
        e = kvs_test_engine_new(&conf);
        assert_int_equal(kvs_engine_submit(e, &req, h, &err), KVS_OK);

        while (kvs_engine_step(e)) {
            /* run to the end */
        }

        for (i = 0; i < 4; i++) {
            memset(&got[i], 0, sizeof(kvs_engine_out_t));
            assert_int_equal(kvs_engine_read(e, h[i], &got[i]),
                             KVS_FINISH_LENGTH);
            assert_int_equal(got[i].n_tokens, alone[i].n_tokens);
            assert_memory_equal(got[i].tokens, alone[i].tokens,
                                alone[i].n_tokens * sizeof(int32_t));
            assert_int_equal(got[i].text.len, alone[i].text.len);
            kvs_engine_close(e, h[i]);
            kvs_engine_out_free(&got[i]);
        }

        kvs_engine_stats(e, &st);
        assert_int_equal(st.kv_used, 0);
        assert_true(k == 0 || st.preemptions > 0);
        assert_true(st.kv_copies >= 3);     /* 3 of 4 choices copied */
        assert_int_equal(kvs_engine_check(e, &err), KVS_OK);
        kvs_engine_free(e);
    }

    /* choices closed early: 1 before the fork, 0 (the leader) after its
     * first token, 2 and 3 run on */
    kvs_test_engine_conf(&conf, &md, 0, 64, 0, 1);
    e = kvs_test_engine_new(&conf);
    assert_int_equal(kvs_engine_submit(e, &req, h, &err), KVS_OK);
    kvs_engine_close(e, h[1]);
    assert_int_equal(kvs_engine_step(e), 1);
    kvs_engine_close(e, h[0]);

    while (kvs_engine_step(e)) {
        /* run to the end */
    }

    for (i = 2; i < 4; i++) {
        memset(&got[i], 0, sizeof(kvs_engine_out_t));
        assert_int_equal(kvs_engine_read(e, h[i], &got[i]),
                         KVS_FINISH_LENGTH);
        assert_memory_equal(got[i].tokens, alone[i].tokens,
                            alone[i].n_tokens * sizeof(int32_t));
        kvs_engine_close(e, h[i]);
        kvs_engine_out_free(&got[i]);
    }

    kvs_engine_stats(e, &st);
    assert_int_equal(st.finished, 4);
    assert_int_equal(st.kv_used, 0);
    assert_int_equal(kvs_engine_check(e, &err), KVS_OK);

    /* the leader closed before any step: the others prefill alone */
    assert_int_equal(kvs_engine_submit(e, &req, h, &err), KVS_OK);
    kvs_engine_close(e, h[0]);

    while (kvs_engine_step(e)) {
        /* run to the end */
    }

    for (i = 1; i < 4; i++) {
        memset(&got[i], 0, sizeof(kvs_engine_out_t));
        assert_int_equal(kvs_engine_read(e, h[i], &got[i]),
                         KVS_FINISH_LENGTH);
        assert_memory_equal(got[i].tokens, alone[i].tokens,
                            alone[i].n_tokens * sizeof(int32_t));
        kvs_engine_close(e, h[i]);
        kvs_engine_out_free(&got[i]);
    }

    assert_int_equal(kvs_engine_check(e, &err), KVS_OK);
    kvs_engine_free(e);

    for (i = 0; i < 4; i++) {
        kvs_engine_out_free(&alone[i]);
    }

    kvs_test_model_free(&md);
}


/* The KV each request held (kv_block_us): its blocks x the time from
 * the step that admitted it to its end.  Two requests of 3 blocks each
 * (40 + 8 positions of 16) and room to run one at a time: the second
 * waits in the queue through the first's whole run, which counts
 * nothing; GAP_US between steps makes the times large against a step. */
#define GAP_US  20000

static void
test_kv_count(void **state)
{
    int                 i, fa, fb;
    uint32_t            n_a, n_b;
    uint64_t            t0, a_end, b_end;
    int32_t             pa[40], pb[40];
    kvs_err_t           err;
    kvs_engine_t       *e;
    kvs_test_model_t    md;
    kvs_engine_req_t    req;
    kvs_engine_seq_t   *ha, *hb;
    kvs_engine_conf_t   conf;
    kvs_engine_out_t    oa, ob;

    (void) state;

    model_gen(&md, 4, 2, KVS_GGML_F32, 0);

    kvs_test_engine_conf(&conf, &md, 16, 16, 0, 0);
    conf.max_running = 1;
    e = kvs_test_engine_new(&conf);

    for (i = 0; i < 40; i++) {
        pa[i] = i + 7;
        pb[i] = i + 50;
    }

    memset(&req, 0, sizeof(req));
    req.n_prompt = 40;
    req.max_tokens = 8;
    req.ignore_eos = 1;
    req.sample.top_p = 1.0f;

    req.prompt = pa;
    assert_int_equal(kvs_engine_submit(e, &req, &ha, &err), KVS_OK);
    req.prompt = pb;
    assert_int_equal(kvs_engine_submit(e, &req, &hb, &err), KVS_OK);

    memset(&oa, 0, sizeof(oa));
    memset(&ob, 0, sizeof(ob));
    fa = KVS_FINISH_NONE;
    fb = KVS_FINISH_NONE;
    n_a = 0;
    n_b = 0;
    a_end = 0;
    b_end = 0;
    t0 = kvs_now_ns();

    while (fb == KVS_FINISH_NONE) {
        assert_int_equal(kvs_engine_step(e), 1);

        if (fa == KVS_FINISH_NONE) {
            n_a++;
            fa = kvs_engine_read(e, ha, &oa);
            a_end = kvs_now_ns();
        } else {
            n_b++;
            fb = kvs_engine_read(e, hb, &ob);
            b_end = kvs_now_ns();
        }

        usleep(GAP_US);
    }

    assert_int_equal(fa, KVS_FINISH_LENGTH);
    assert_int_equal(fb, KVS_FINISH_LENGTH);
    assert_int_equal(oa.n_generated, 8);
    assert_true(n_a >= 8 && n_b >= 8);

    /* A held its 3 blocks through at least the gaps between its steps,
     * and at most from the start to its end */
    assert_true(oa.kv_block_us >= 3ULL * (n_a - 1) * GAP_US);
    assert_true(oa.kv_block_us <= 3ULL * (a_end - t0) / 1000);

    /* B held its 3 blocks from after A's end only: the n_a steps it
     * waited (at least 3 x (n_a - 1) x GAP_US) count nothing */
    assert_true(ob.kv_block_us >= 3ULL * (n_b - 1) * GAP_US);
    assert_true(ob.kv_block_us <= 3ULL * (b_end - a_end) / 1000);

    kvs_engine_close(e, ha);
    kvs_engine_close(e, hb);
    assert_int_equal(kvs_engine_check(e, &err), KVS_OK);

    kvs_engine_out_free(&oa);
    kvs_engine_out_free(&ob);
    kvs_engine_free(e);
    kvs_test_model_free(&md);
}


/* The engine thread against a consumer that closes handles at every
 * stage: before scheduling, mid-generation, after the end.  Every block
 * must come back and nothing may be used after it was freed (run under
 * ASan, and TSan by hand). */
static void
test_thread_cancel(void **state)
{
    int                 i, left, closed[48];
    size_t              k, n;
    kvs_test_model_t    md;
    int32_t             prompt[20];
    kvs_err_t           err;
    kvs_engine_t       *e;
    struct pollfd       pfd;
    kvs_engine_req_t    req;
    kvs_engine_seq_t   *h[48], *r[16];
    kvs_engine_out_t    out;
    kvs_engine_conf_t   conf;
    kvs_engine_stats_t  st;

    (void) state;

    model_gen(&md, 4, 2, KVS_GGML_F32, 0);

    /* 40 blocks, short: preemption happens too */
    kvs_test_engine_conf(&conf, &md, 4, 40, 16, 1);
    conf.threads = 2;
    e = kvs_test_engine_new(&conf);
    assert_int_equal(kvs_engine_start(e, &err), KVS_OK);

    for (i = 0; i < 20; i++) {
        prompt[i] = 3 + i * 11 % 250;
    }

    memset(&req, 0, sizeof(req));
    req.prompt = prompt;
    req.max_tokens = 40;
    req.ignore_eos = 1;

    for (i = 0; i < 48; i++) {
        req.n_prompt = 1 + i % 20;
        req.data = (void *) (intptr_t) i;
        assert_int_equal(kvs_engine_submit(e, &req, &h[i], &err), KVS_OK);
        closed[i] = 0;

        if (i % 5 == 0) {           /* gone before any step takes it */
            kvs_engine_close(e, h[i]);
            closed[i] = 1;
        }
    }

    memset(&out, 0, sizeof(out));
    left = 48 - 10;
    pfd.fd = kvs_engine_fd(e);
    pfd.events = POLLIN;

    while (left > 0) {
        assert_true(poll(&pfd, 1, 10000) == 1);

        while ((n = kvs_engine_ready(e, r, 16)) > 0) {
            for (k = 0; k < n; k++) {
                i = (int) (intptr_t) kvs_engine_seq_data(r[k]);
                assert_false(closed[i]);
                out.n_tokens = 0;
                out.text.len = 0;
                assert_true(kvs_engine_read(e, r[k], &out) >= 0);

                /* every third one is closed mid-generation */
                if (out.finish != KVS_FINISH_NONE
                    || (i % 3 == 0 && out.n_generated >= 3))
                {
                    assert_true(out.finish == KVS_FINISH_NONE
                                || out.finish == KVS_FINISH_LENGTH);
                    kvs_engine_close(e, r[k]);
                    closed[i] = 1;
                    left--;
                }
            }
        }
    }

    /* the cancellations are taken at the engine's next steps */
    for (i = 0; i < 1000; i++) {
        kvs_engine_stats(e, &st);
        if (st.finished == 48) {
            break;
        }
        usleep(1000);
    }

    kvs_engine_stop(e);
    kvs_engine_stats(e, &st);
    assert_int_equal(st.finished, 48);
    assert_int_equal(st.kv_used, 0);
    assert_int_equal(kvs_engine_check(e, &err), KVS_OK);

    kvs_engine_out_free(&out);
    kvs_engine_free(e);
    kvs_test_model_free(&md);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_stops),
        cmocka_unit_test(test_cancel_and_refusals),
        cmocka_unit_test(test_kv_count),
        cmocka_unit_test(test_thread_cancel),
        cmocka_unit_test(test_choices),
        cmocka_unit_test(test_batching_stories),
        cmocka_unit_test(test_batching_random),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
