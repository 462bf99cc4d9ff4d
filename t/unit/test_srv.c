/*
 * test_srv: the engine process's server loop (src/server/kvs_srv.c) on
 * a temporary unix socket, served by a thread of this test, with
 * clients speaking kvs_wire over real sockets.
 *
 * What comes back through the server must be what the engine gives
 * directly: each request's tokens, text and finish are compared with a
 * run of the same request on a fresh engine stepped by this thread (the
 * engine's batching invariance makes that exact whatever else the server
 * is running), and on stories260K with llama2.c's greedy text.  Then the
 * failure paths: CANCEL mid-stream and a client that disconnects give
 * every KV block back (STATS kv_used returns to 0), a malformed frame
 * closes only its own client, a client that stops reading is cut off
 * without holding up another, refusals come back as REFUSED and leave
 * the connection usable, the orphan rule ends the loop once the last
 * client leaves, and the socket path is removed only while it is ours.
 * DRAIN: the listener goes (path removed while ours), the flock lease is
 * released (another open file takes it) and its file emptied (the
 * workers' respawn backoff is about dead engines), the clients already
 * connected are served to the end, and the loop ends when the last one
 * leaves.
 */

#include "kvs_test.h"
#include "kvs_test_model.h"
#include "kvs_test_srv.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/kvs_engine.h"
#include "server/kvs_srv.h"
#include "wire/kvs_wire.h"

#define WAIT_MS   30000               /* any single wait; generous for
                                         TSan on a loaded machine */
#define LONG_GEN  3900                /* tokens: runs long enough to be
                                         cancelled mid-stream */

typedef kvs_test_srv_t  server_t;
typedef kvs_test_cl_t   client_t;

/* What came back for one choice. */
typedef struct {
    kvs_engine_out_t  out;
    uint64_t          recv_ns;
    uint64_t          first_ns;
    uint64_t          last_ns;
    uint32_t          frames;
} got_t;


static uint64_t
now_ns(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}


/* --- models -------------------------------------------------------------- */

static void
model_gen(kvs_test_model_t *md)
{
    kvs_gen_spec_t  spec;

    memset(&spec, 0, sizeof(spec));
    snprintf(spec.name, sizeof(spec.name), "test-srv");
    spec.n_layer = 2;
    spec.n_embd = 32;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.n_ff = 64;
    spec.n_vocab = 300;
    spec.n_ctx = 4096;
    spec.dtype = KVS_GGML_F32;
    spec.seed = 0x5e5e;

    kvs_test_model_gen(md, &spec);
}


static void
engine_conf(kvs_engine_conf_t *conf, const kvs_test_model_t *md)
{
    memset(conf, 0, sizeof(*conf));
    conf->model = md->m;
    conf->vocab = md->v;
    conf->n_blocks = 1024;
    conf->block_tokens = 16;
    conf->threads = 1;
    /* batches under 64 tokens: the CPU backend's sums are then the same
     * whatever the batch (docs/engine.md), so a request's logprobs too
     * equal its direct run's bit for bit */
    conf->max_batch_tokens = 48;
}


/* The reference: req alone on a fresh engine stepped here. */
static void
direct(const kvs_test_model_t *md, const kvs_engine_req_t *req,
    kvs_engine_out_t *out)
{
    uint32_t            i, n, left;
    kvs_err_t           err;
    kvs_engine_t       *e;
    kvs_engine_conf_t   conf;
    kvs_engine_seq_t   *hs[KVS_ENGINE_MAX_N];

    engine_conf(&conf, md);
    assert_int_equal(kvs_engine_new(&e, &conf, &err), KVS_OK);

    if (kvs_engine_submit(e, req, hs, &err) != KVS_OK) {
        fail_msg("direct submit: %s", err.msg);
    }

    n = req->n > 1 ? req->n : 1;
    left = n;

    while (left > 0) {
        kvs_engine_step(e);

        for (i = 0; i < n; i++) {
            if (hs[i] == NULL) {
                continue;
            }

            assert_true(kvs_engine_read(e, hs[i], &out[i]) >= 0);

            if (out[i].finish != KVS_FINISH_NONE) {
                kvs_engine_close(e, hs[i]);
                hs[i] = NULL;
                left--;
            }
        }
    }

    kvs_engine_free(e);
}


/* --- the server thread --------------------------------------------------- */

/* Starts a server on a fresh socket path; md already loaded; lease_fd
 * (or -1) becomes the server's. */
static void
server_start_lease(server_t *s, size_t out_limit, int parent_fd,
    int lease_fd)
{
    memset(&s->sm, 0, sizeof(s->sm));
    engine_conf(&s->sm.engine, &s->md);
    s->sm.name = "test-model";

    kvs_test_srv_start(s, "srv", out_limit, parent_fd, lease_fd);
}


static void
server_start(server_t *s, size_t out_limit, int parent_fd)
{
    server_start_lease(s, out_limit, parent_fd, -1);
}


/* --- a client ------------------------------------------------------------ */

/* Reads until a whole frame is there; 0 with cl->frame and cl->h set, 1
 * on EOF; no frame within WAIT_MS fails the test. */
static int
cl_read(client_t *cl)
{
    int  rc;

    rc = kvs_test_cl_read(cl, WAIT_MS);
    if (rc == 2) {
        fail_msg("client: no frame within %d ms", WAIT_MS);
    }

    return rc;
}


static void
cl_connect(client_t *cl, const server_t *s)
{
    /* the engine speaks first */
    kvs_test_cl_connect(cl, s->path, WAIT_MS);
    assert_int_equal(cl->hello.pid, (uint32_t) getpid());
    assert_true(cl->hello.incarnation == kvs_srv_incarnation(s->srv));
    assert_int_equal(cl->hello.n_models, 1);
    assert_string_equal(cl->hello.models[0].name, "test-model");
    assert_int_equal(cl->hello.models[0].n_vocab, s->md.m->hp.n_vocab);
    assert_int_equal(cl->hello.models[0].n_ctx, s->md.m->hp.n_ctx_train);
    assert_int_equal(cl->hello.models[0].block_tokens, 16);
    assert_int_equal(cl->hello.models[0].kv_blocks, 1024);
    assert_true(cl->hello.models[0].file_size == s->md.m->file_size);
}


static void
cl_submit(client_t *cl, uint64_t id, uint32_t model,
    const kvs_engine_req_t *req)
{
    kvs_buf_t  b;
    kvs_err_t  err;

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_wire_enc_submit(&b, id, model, req, now_ns(), &err),
                     KVS_OK);
    kvs_test_cl_send(cl, b.data, b.len);
    kvs_buf_free(&b);
}


static void
cl_empty(client_t *cl, kvs_wire_type_t type, uint64_t id)
{
    kvs_buf_t  b;
    kvs_err_t  err;

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_wire_enc_empty(&b, type, id, &err), KVS_OK);
    kvs_test_cl_send(cl, b.data, b.len);
    kvs_buf_free(&b);
}


/* Adds one OUT frame to what was got for its choice. */
static void
got_add(got_t *g, const kvs_wire_out_t *o)
{
    assert_int_equal(g->out.finish, KVS_FINISH_NONE);   /* none after */

    if (o->out.n_tokens > 0) {
        assert_int_equal(kvs_grow((void **) &g->out.tokens,
                                  &g->out.tokens_cap,
                                  g->out.n_tokens + o->out.n_tokens,
                                  sizeof(int32_t)), KVS_OK);
        memcpy(g->out.tokens + g->out.n_tokens, o->out.tokens,
               o->out.n_tokens * sizeof(int32_t));
        g->out.n_tokens += o->out.n_tokens;
    }

    if (o->out.n_lp > 0) {
        assert_int_equal(kvs_grow((void **) &g->out.lp, &g->out.lp_cap,
                                  g->out.n_lp + o->out.n_lp,
                                  sizeof(kvs_sample_logprobs_t)), KVS_OK);
        memcpy(g->out.lp + g->out.n_lp, o->out.lp,
               o->out.n_lp * sizeof(kvs_sample_logprobs_t));
        g->out.n_lp += o->out.n_lp;
    }

    kvs_buf_append(&g->out.text, o->out.text.data, o->out.text.len);
    g->out.finish = o->out.finish;
    g->out.n_prompt = o->out.n_prompt;
    g->out.n_generated = o->out.n_generated;
    memcpy(g->out.error, o->out.error, sizeof(g->out.error));

    /* the hop timestamps: received, then first token, then this frame */
    assert_true(o->t.recv_ns > 0 && o->t.now_ns >= o->t.recv_ns);
    if (o->out.n_tokens > 0 || g->out.n_tokens > 0) {
        assert_true(o->t.first_ns >= o->t.recv_ns);
        assert_true(o->t.now_ns >= o->t.first_ns);
    }
    assert_true(o->t.now_ns >= g->last_ns);

    g->recv_ns = o->t.recv_ns;
    g->first_ns = o->t.first_ns;
    g->last_ns = o->t.now_ns;
    g->frames++;
}


/* Reads frames until every choice of requests ids[0..n_req) has
 * finished; gots[r][choice]; other frames are failures. */
static void
cl_collect(client_t *cl, const uint64_t *ids, size_t n_req,
    const uint32_t *n_choices, got_t **gots)
{
    size_t          r, left;
    uint32_t        c;
    kvs_err_t       err;
    kvs_wire_out_t  o;

    memset(&o, 0, sizeof(o));
    left = 0;
    for (r = 0; r < n_req; r++) {
        left += n_choices[r];
    }

    while (left > 0) {
        assert_int_equal(cl_read(cl), 0);

        if (cl->h.type == KVS_WIRE_REFUSED) {
            kvs_wire_refused_t  rf;

            kvs_wire_dec_refused(cl->frame, cl->h.len, &rf, &err);
            fail_msg("request %llu refused: %s",
                     (unsigned long long) cl->h.id, rf.msg);
        }

        assert_int_equal(cl->h.type, KVS_WIRE_OUT);
        assert_int_equal(kvs_wire_dec_out(cl->frame, cl->h.len, &o, &err),
                         KVS_OK);

        for (r = 0; r < n_req && ids[r] != cl->h.id; r++) {
            /* find it */
        }

        assert_true(r < n_req);
        c = o.choice;
        assert_true(c < n_choices[r]);
        got_add(&gots[r][c], &o);

        if (o.out.finish != KVS_FINISH_NONE) {
            left--;
        }
    }

    kvs_engine_out_free(&o.out);
}


/* STATS through the wire. */
static void
cl_stats(client_t *cl, kvs_wire_stats_t *st)
{
    kvs_err_t  err;

    cl_empty(cl, KVS_WIRE_STATS, 4242);

    for ( ;; ) {
        assert_int_equal(cl_read(cl), 0);
        if (cl->h.type == KVS_WIRE_STATS_REPLY) {
            break;
        }
        /* late OUT frames of a cancelled request may come first */
        assert_int_equal(cl->h.type, KVS_WIRE_OUT);
    }

    assert_true(cl->h.id == 4242);
    assert_int_equal(kvs_wire_dec_stats(cl->frame, cl->h.len, st, &err),
                     KVS_OK);
    assert_int_equal(st->n_models, 1);
}


/* Polls STATS until no request is left and every block is back. */
static void
cl_wait_idle(client_t *cl, uint32_t clients)
{
    int                i;
    kvs_wire_stats_t  *st;

    st = malloc(sizeof(*st));

    for (i = 0; i < WAIT_MS / 10; i++) {
        cl_stats(cl, st);

        if (st->requests == 0 && st->clients == clients
            && st->models[0].st.kv_used == 0
            && st->models[0].st.running == 0
            && st->models[0].st.waiting == 0)
        {
            free(st);
            return;
        }

        usleep(10000);
    }

    fail_msg("not idle: %u requests, %u clients, %u KV blocks in use",
             st->requests, st->clients, st->models[0].st.kv_used);
}


static void
make_prompt(int32_t *p, uint32_t n, uint32_t seed, uint32_t n_vocab)
{
    uint32_t  i;
    uint64_t  x;

    x = seed * 0x9e3779b97f4a7c15ULL + 1;

    for (i = 0; i < n; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        p[i] = (int32_t) ((x * 0x2545F4914F6CDD1DULL >> 33) % n_vocab);
    }
}


/* Bit for bit, over the entries each record uses. */
static void
lp_equal(const kvs_sample_logprobs_t *a, const kvs_sample_logprobs_t *b,
    size_t n)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        assert_int_equal(a[i].token, b[i].token);
        assert_memory_equal(&a[i].logprob, &b[i].logprob, sizeof(float));
        assert_int_equal(a[i].n_top, b[i].n_top);
        assert_memory_equal(a[i].top_token, b[i].top_token,
                            (size_t) b[i].n_top * sizeof(int32_t));
        assert_memory_equal(a[i].top_logprob, b[i].top_logprob,
                            (size_t) b[i].n_top * sizeof(float));
    }
}


static void
got_free(got_t *g, size_t n)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        kvs_engine_out_free(&g[i].out);
    }
}


/* --- tests --------------------------------------------------------------- */

/* 3 clients, 2 requests each (one with n = 2 sampled), interleaved: each
 * equals its direct run. */
static void
test_matches_direct(void **state)
{
    size_t             r, k, c;
    int32_t            prompts[6][40];
    uint64_t           ids[6];
    uint32_t           nch[6];
    server_t           s;
    client_t           cl[3];
    got_t              g[6][2], *gp[2];
    kvs_engine_out_t   want[2];
    kvs_engine_req_t   req[6];
    static const char *stop[1] = { "zz" };
    static size_t      stop_len[1] = { 2 };
    static const kvs_logit_bias_t  bias[1] = { { 7, 5.0f } };

    memset(&s, 0, sizeof(s));
    memset(g, 0, sizeof(g));
    model_gen(&s.md);
    server_start(&s, 0, -1);

    for (k = 0; k < 3; k++) {
        cl_connect(&cl[k], &s);
    }

    for (r = 0; r < 6; r++) {
        make_prompt(prompts[r], 5 + r * 7, (uint32_t) r, 300);
        memset(&req[r], 0, sizeof(req[r]));
        req[r].prompt = prompts[r];
        req[r].n_prompt = 5 + r * 7;
        req[r].max_tokens = 10 + r * 5;
        req[r].sample.top_p = 1.0f;
        ids[r] = 1000 + r;
        nch[r] = 1;

        if (r == 3) {                 /* n = 2, sampled, logprobs */
            req[r].n = 2;
            nch[r] = 2;
            req[r].sample.temperature = 0.8f;
            req[r].sample.seed = 77;
            req[r].sample.logprobs = 1;
            req[r].sample.top_logprobs = 3;
        }

        if (r == 4) {                 /* stop strings, penalties, bias */
            req[r].stop = stop;
            req[r].stop_len = stop_len;
            req[r].n_stop = 1;
            req[r].sample.frequency_penalty = 0.5f;
            req[r].sample.logit_bias = bias;
            req[r].sample.n_logit_bias = 1;
        }

        /* the same id on two clients is two requests */
        if (r == 5) {
            ids[r] = ids[1];
        }

        cl_submit(&cl[r % 3], ids[r], 0, &req[r]);
    }

    for (k = 0; k < 3; k++) {
        uint64_t   kid[2] = { ids[k], ids[k + 3] };
        uint32_t   kn[2] = { nch[k], nch[k + 3] };
        got_t     *kg[2] = { g[k], g[k + 3] };

        cl_collect(&cl[k], kid, 2, kn, kg);
    }

    for (r = 0; r < 6; r++) {
        memset(want, 0, sizeof(want));
        direct(&s.md, &req[r], want);
        gp[0] = g[r];

        for (c = 0; c < nch[r]; c++) {
            assert_int_equal(gp[0][c].out.finish, want[c].finish);
            assert_int_equal(gp[0][c].out.n_tokens, want[c].n_tokens);
            assert_memory_equal(gp[0][c].out.tokens, want[c].tokens,
                                want[c].n_tokens * sizeof(int32_t));
            assert_int_equal(gp[0][c].out.text.len, want[c].text.len);
            if (want[c].text.len > 0) {
                assert_memory_equal(gp[0][c].out.text.data,
                                    want[c].text.data, want[c].text.len);
            }
            assert_int_equal(gp[0][c].out.n_lp, want[c].n_lp);
            lp_equal(gp[0][c].out.lp, want[c].lp, want[c].n_lp);
            assert_int_equal(gp[0][c].out.n_prompt, req[r].n_prompt);
            assert_int_equal(gp[0][c].out.n_generated, want[c].n_generated);
            assert_true(gp[0][c].out.n_tokens > 0);
        }

        /* the two sampled choices differ (seed and seed + 1) */
        if (nch[r] == 2) {
            assert_true(gp[0][0].out.n_tokens != gp[0][1].out.n_tokens
                        || memcmp(gp[0][0].out.tokens, gp[0][1].out.tokens,
                                  gp[0][0].out.n_tokens * sizeof(int32_t))
                           != 0);
        }

        kvs_engine_out_free(&want[0]);
        kvs_engine_out_free(&want[1]);
        got_free(g[r], 2);
    }

    cl_wait_idle(&cl[0], 3);

    for (k = 0; k < 3; k++) {
        kvs_test_cl_close(&cl[k]);
    }

    kvs_test_srv_stop(&s);

    /* the socket is gone with the server */
    assert_int_equal(access(s.path, F_OK), -1);

    kvs_test_model_free(&s.md);
}


/* stories260K through the server: llama2.c's greedy text. */
static void
test_stories_greedy(void **state)
{
    int32_t           bos;
    size_t            want_len;
    uint8_t          *want;
    uint64_t          id;
    uint32_t          n;
    server_t          s;
    client_t          cl;
    got_t             g[1], *gp[1];
    kvs_engine_req_t  req;

    memset(&s, 0, sizeof(s));
    if (kvs_test_model_stories(&s.md) != 0) {
        skip();
    }

    server_start(&s, 0, -1);
    cl_connect(&cl, &s);

    bos = s.md.v->bos;
    memset(&req, 0, sizeof(req));
    req.prompt = &bos;
    req.n_prompt = 1;
    req.max_tokens = 200;

    memset(g, 0, sizeof(g));
    id = 1;
    n = 1;
    gp[0] = g;
    cl_submit(&cl, id, 0, &req);
    cl_collect(&cl, &id, 1, &n, gp);

    want = kvs_test_slurp(
        kvs_test_fixture("models/stories260K.expected-greedy-n200.txt"),
        &want_len);
    assert_non_null(want);
    assert_int_equal(g[0].out.finish, KVS_FINISH_LENGTH);
    assert_int_equal(g[0].out.n_tokens, 200);
    assert_int_equal(g[0].out.text.len, want_len);
    assert_memory_equal(g[0].out.text.data, want, want_len);

    /* streamed: more than one frame */
    assert_true(g[0].frames > 1);

    free(want);
    got_free(g, 1);
    kvs_test_cl_close(&cl);
    kvs_test_srv_stop(&s);
    kvs_test_model_free(&s.md);
}


/* Waits for the first OUT of id that carries a token. */
static void
wait_first_token(client_t *cl, uint64_t id)
{
    kvs_err_t       err;
    kvs_wire_out_t  o;

    memset(&o, 0, sizeof(o));

    for ( ;; ) {
        assert_int_equal(cl_read(cl), 0);
        assert_int_equal(cl->h.type, KVS_WIRE_OUT);
        assert_int_equal(kvs_wire_dec_out(cl->frame, cl->h.len, &o, &err),
                         KVS_OK);

        if (cl->h.id == id && o.out.n_tokens > 0) {
            assert_int_equal(o.out.finish, KVS_FINISH_NONE);
            break;
        }
    }

    kvs_engine_out_free(&o.out);
}


static void
long_req(kvs_engine_req_t *req, int32_t *prompt)
{
    make_prompt(prompt, 16, 99, 300);
    memset(req, 0, sizeof(*req));
    req->prompt = prompt;
    req->n_prompt = 16;
    req->max_tokens = LONG_GEN;
    req->ignore_eos = 1;
    req->sample.top_p = 1.0f;
}


/* CANCEL mid-stream: KV back to 0, the id usable again. */
static void
test_cancel(void **state)
{
    int                i;
    int32_t            prompt[16];
    uint64_t           id;
    uint32_t           n;
    server_t           s;
    client_t           cl;
    got_t              g[1], *gp[1];
    kvs_engine_req_t   req;
    kvs_wire_stats_t  *st;

    memset(&s, 0, sizeof(s));
    model_gen(&s.md);
    server_start(&s, 0, -1);
    cl_connect(&cl, &s);

    long_req(&req, prompt);
    cl_submit(&cl, 5, 0, &req);
    wait_first_token(&cl, 5);

    /* running and holding blocks (stats are published at the end of
     * each step, so the first look may predate the first step): the
     * cancel comes mid-stream */
    st = malloc(sizeof(*st));
    for (i = 0; i < WAIT_MS / 10; i++) {
        cl_stats(&cl, st);
        assert_int_equal(st->requests, 1);
        if (st->models[0].st.kv_used > 0 && st->models[0].st.running == 1) {
            break;
        }
        usleep(10000);
    }
    assert_true(st->models[0].st.kv_used > 0);
    free(st);

    cl_empty(&cl, KVS_WIRE_CANCEL, 5);
    cl_empty(&cl, KVS_WIRE_CANCEL, 12345);    /* unknown: ignored */
    cl_wait_idle(&cl, 1);

    /* the same id again, short this time: served whole */
    req.max_tokens = 5;
    memset(g, 0, sizeof(g));
    id = 5;
    n = 1;
    gp[0] = g;
    cl_submit(&cl, id, 0, &req);

    /* nothing of the cancelled one can follow: the server handled the
     * CANCEL before the STATS that saw it idle */
    cl_collect(&cl, &id, 1, &n, gp);
    assert_int_equal(g[0].out.finish, KVS_FINISH_LENGTH);
    got_free(g, 1);

    cl_wait_idle(&cl, 1);
    kvs_test_cl_close(&cl);
    kvs_test_srv_stop(&s);
    kvs_test_model_free(&s.md);
}


/* A client that disconnects mid-stream has its requests cancelled; the
 * other client sees the KV go back to 0. */
static void
test_disconnect(void **state)
{
    int32_t           prompt[16];
    server_t          s;
    client_t          a, b;
    kvs_engine_req_t  req;

    memset(&s, 0, sizeof(s));
    model_gen(&s.md);
    server_start(&s, 0, -1);
    cl_connect(&a, &s);
    cl_connect(&b, &s);

    long_req(&req, prompt);
    cl_submit(&a, 1, 0, &req);
    req.n = 3;                                /* three handles */
    cl_submit(&a, 2, 0, &req);
    wait_first_token(&a, 1);

    kvs_test_cl_close(&a);
    cl_wait_idle(&b, 1);

    kvs_test_cl_close(&b);
    kvs_test_srv_stop(&s);
    kvs_test_model_free(&s.md);
}


/* Malformed frames close only their own client. */
static void
test_malformed(void **state)
{
    uint8_t           junk[32];
    uint64_t          id, u;
    uint32_t          n;
    server_t          s;
    client_t          a, b, c, d;
    kvs_buf_t         buf;
    kvs_err_t         err;
    got_t             g[1], *gp[1];
    int32_t           prompt[8];
    kvs_engine_req_t  req;

    memset(&s, 0, sizeof(s));
    model_gen(&s.md);
    server_start(&s, 0, -1);
    cl_connect(&a, &s);
    cl_connect(&b, &s);
    cl_connect(&c, &s);
    cl_connect(&d, &s);

    /* a: a frame length past the limit */
    memset(junk, 0xff, sizeof(junk));
    kvs_test_cl_send(&a, junk, sizeof(junk));
    assert_int_equal(cl_read(&a), 1);         /* EOF */

    /* c: a message only the engine sends */
    memset(&buf, 0, sizeof(buf));
    kvs_wire_enc_pong(&buf, 1, 2, &err);
    buf.data[4] = KVS_WIRE_OUT;
    kvs_test_cl_send(&c, buf.data, buf.len);
    assert_int_equal(cl_read(&c), 1);

    /* d: a SUBMIT whose prompt count overruns its frame; a long request
     * it had running is cancelled with it */
    make_prompt(prompt, 8, 3, 300);
    memset(&req, 0, sizeof(req));
    req.prompt = prompt;
    req.n_prompt = 8;
    req.max_tokens = LONG_GEN;
    req.ignore_eos = 1;
    cl_submit(&d, 1, 0, &req);

    buf.len = 0;
    kvs_wire_enc_submit(&buf, 2, 0, &req, 0, &err);
    buf.data[16 + 12] = 0xff;
    buf.data[16 + 13] = 0xff;
    kvs_test_cl_send(&d, buf.data, buf.len);
    while (cl_read(&d) == 0) {
        /* OUT frames of request 1, then EOF */
    }

    /* b still works: PING, and a request served whole */
    cl_empty(&b, KVS_WIRE_PING, 31337);
    assert_int_equal(cl_read(&b), 0);
    assert_int_equal(b.h.type, KVS_WIRE_PONG);
    assert_true(b.h.id == 31337);
    assert_int_equal(kvs_wire_dec_pong(b.frame, b.h.len, &u, &err), KVS_OK);
    assert_true(u > 0 && u <= now_ns());

    req.max_tokens = 6;
    req.ignore_eos = 0;
    memset(g, 0, sizeof(g));
    id = 9;
    n = 1;
    gp[0] = g;
    cl_submit(&b, id, 0, &req);
    cl_collect(&b, &id, 1, &n, gp);
    assert_true(g[0].out.finish == KVS_FINISH_LENGTH
                || g[0].out.finish == KVS_FINISH_STOP);
    got_free(g, 1);

    cl_wait_idle(&b, 1);

    kvs_buf_free(&buf);
    kvs_test_cl_close(&a);
    kvs_test_cl_close(&b);
    kvs_test_cl_close(&c);
    kvs_test_cl_close(&d);
    kvs_test_srv_stop(&s);
    kvs_test_model_free(&s.md);
}


static void
expect_refused(client_t *cl, uint64_t id, int code, const char *what)
{
    kvs_err_t           err;
    kvs_wire_refused_t  rf;

    assert_int_equal(cl_read(cl), 0);
    assert_int_equal(cl->h.type, KVS_WIRE_REFUSED);
    assert_true(cl->h.id == id);
    assert_int_equal(kvs_wire_dec_refused(cl->frame, cl->h.len, &rf, &err),
                     KVS_OK);

    if (rf.code != code || strstr(rf.msg, what) == NULL) {
        fail_msg("REFUSED %d \"%s\", expected %d naming \"%s\"", rf.code,
                 rf.msg, code, what);
    }
}


/* Refusals: context overflow, no such model, a bad token, a duplicate
 * id; the connection stays usable. */
static void
test_refused(void **state)
{
    int32_t           prompt[16], bad, *big;
    uint64_t          id;
    uint32_t          n;
    server_t          s;
    client_t          cl;
    got_t             g[1], *gp[1];
    kvs_engine_req_t  req;

    memset(&s, 0, sizeof(s));
    model_gen(&s.md);
    server_start(&s, 0, -1);
    cl_connect(&cl, &s);

    make_prompt(prompt, 16, 1, 300);
    memset(&req, 0, sizeof(req));
    req.prompt = prompt;
    req.n_prompt = 16;
    req.sample.top_p = 1.0f;

    /* 16 + 4090 > the 4096-token context */
    req.max_tokens = 4090;
    cl_submit(&cl, 1, 0, &req);
    expect_refused(&cl, 1, KVS_ERANGE, "4096");

    req.max_tokens = 4;
    cl_submit(&cl, 2, 1, &req);
    expect_refused(&cl, 2, KVS_EINVAL, "model");

    /* a 400 KB frame, reassembled from many reads: refused on length */
    big = calloc(100000, sizeof(int32_t));
    assert_non_null(big);
    req.prompt = big;
    req.n_prompt = 100000;
    cl_submit(&cl, 6, 0, &req);
    expect_refused(&cl, 6, KVS_ERANGE, "100000");
    free(big);
    req.prompt = prompt;
    req.n_prompt = 16;

    bad = 300;                                /* == n_vocab */
    req.prompt = &bad;
    req.n_prompt = 1;
    cl_submit(&cl, 3, 0, &req);
    expect_refused(&cl, 3, KVS_EINVAL, "300");

    req.prompt = prompt;
    req.n_prompt = 16;
    req.sample.temperature = 5.0f;            /* out of [0, 2] */
    cl_submit(&cl, 4, 0, &req);
    expect_refused(&cl, 4, KVS_EINVAL, "temperature");

    /* a duplicate id while the first still runs */
    req.sample.temperature = 0;
    req.max_tokens = LONG_GEN;
    req.ignore_eos = 1;
    cl_submit(&cl, 7, 0, &req);
    cl_submit(&cl, 7, 0, &req);
    for ( ;; ) {
        assert_int_equal(cl_read(&cl), 0);
        if (cl.h.type == KVS_WIRE_REFUSED) {
            break;
        }
        assert_int_equal(cl.h.type, KVS_WIRE_OUT);
    }
    assert_true(cl.h.id == 7);
    cl_empty(&cl, KVS_WIRE_CANCEL, 7);
    cl_wait_idle(&cl, 1);

    /* and the connection still serves */
    req.max_tokens = 3;
    req.ignore_eos = 1;
    memset(g, 0, sizeof(g));
    id = 8;
    n = 1;
    gp[0] = g;
    cl_submit(&cl, id, 0, &req);
    cl_collect(&cl, &id, 1, &n, gp);
    assert_int_equal(g[0].out.finish, KVS_FINISH_LENGTH);
    assert_int_equal(g[0].out.n_tokens, 3);
    got_free(g, 1);

    kvs_test_cl_close(&cl);
    kvs_test_srv_stop(&s);
    kvs_test_model_free(&s.md);
}


/* One request of one choice, sent and read to its end into g[0]. */
static void
submit_one(client_t *cl, uint64_t id, const kvs_engine_req_t *req,
    got_t *g)
{
    uint32_t  n;

    n = 1;
    memset(g, 0, sizeof(*g));
    cl_submit(cl, id, 0, req);
    cl_collect(cl, &id, 1, &n, &g);
}


/*
 * LORA (docs/lora.md, "Reload"): a connection's adapter ids are its
 * LORA frame's files, bound with the engine: an id past the frame is
 * refused naming the count; one whose file cannot be opened ends with
 * the loader's reason; the base is still served on that connection; and
 * a connection that sent no LORA names the engine's ids as they are.
 */
static void
test_lora_map(void **state)
{
    int32_t           prompt[16];
    server_t          s;
    client_t          cl, other;
    kvs_buf_t         b;
    kvs_err_t         err;
    got_t             g[1];
    kvs_wire_lora_t  *m;
    kvs_engine_req_t  req;

    memset(&s, 0, sizeof(s));
    model_gen(&s.md);
    server_start(&s, 0, -1);
    cl_connect(&cl, &s);
    cl_connect(&other, &s);

    m = calloc(1, sizeof(*m));
    assert_non_null(m);
    m->n = 1;
    m->ad[0].epoch = 1;
    m->ad[0].path = "/nonexistent/kvs-lora-a.gguf";
    m->ad[0].path_len = (uint32_t) strlen(m->ad[0].path);
    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_wire_enc_lora(&b, m, &err), KVS_OK);
    kvs_test_cl_send(&cl, b.data, b.len);
    kvs_buf_free(&b);
    free(m);

    make_prompt(prompt, 16, 1, 300);
    memset(&req, 0, sizeof(req));
    req.prompt = prompt;
    req.n_prompt = 16;
    req.max_tokens = 3;
    req.ignore_eos = 1;
    req.sample.top_p = 1.0f;

    req.adapter = 2;
    cl_submit(&cl, 1, 0, &req);
    expect_refused(&cl, 1, KVS_EINVAL, "adapter 2: the model serves 1 LoRA "
                   "adapter");

    req.adapter = 1;
    submit_one(&cl, 2, &req, g);
    assert_int_equal(g[0].out.finish, KVS_FINISH_ERROR);
    assert_non_null(strstr(g[0].out.error, "LoRA adapter 1 could not be "
                           "loaded"));
    assert_non_null(strstr(g[0].out.error, "kvs-lora-a.gguf"));
    got_free(g, 1);

    req.adapter = 0;
    submit_one(&cl, 3, &req, g);
    assert_int_equal(g[0].out.finish, KVS_FINISH_LENGTH);
    got_free(g, 1);

    /* no LORA: the engine's own ids (the one bound above) */
    req.adapter = 2;
    cl_submit(&other, 4, 0, &req);
    expect_refused(&other, 4, KVS_EINVAL, "adapter 2: the model serves 1 "
                   "LoRA adapter");

    kvs_test_cl_close(&other);
    kvs_test_cl_close(&cl);
    kvs_test_srv_stop(&s);
    kvs_test_model_free(&s.md);
}


/* A client that stops reading is cut off once its unsent output passes
 * the limit; meanwhile another client is served. */
static void
test_slow_client(void **state)
{
    int32_t           prompt[16];
    uint64_t          id;
    uint32_t          n;
    server_t          s;
    client_t          slow, fast;
    got_t             g[1], *gp[1];
    kvs_engine_req_t  req;

    memset(&s, 0, sizeof(s));
    model_gen(&s.md);
    server_start(&s, 16384, -1);
    cl_connect(&slow, &s);
    cl_connect(&fast, &s);

    /* 4 x 3900 frames of ~250 bytes with top-20 logprobs: about 4 MB,
     * far more than the socket buffer (wmem_default, 208 KiB here) and
     * the limit together */
    long_req(&req, prompt);
    req.n = 4;
    req.sample.logprobs = 1;
    req.sample.top_logprobs = 20;
    cl_submit(&slow, 1, 0, &req);
    req.n = 1;

    req.max_tokens = 8;
    req.sample.logprobs = 0;
    req.sample.top_logprobs = 0;
    memset(g, 0, sizeof(g));
    id = 2;
    n = 1;
    gp[0] = g;
    cl_submit(&fast, id, 0, &req);
    cl_collect(&fast, &id, 1, &n, gp);
    assert_int_equal(g[0].out.n_tokens, 8);
    got_free(g, 1);

    /* the slow one is dropped and its request cancelled */
    cl_wait_idle(&fast, 1);

    /* what it gets is what was sent before the cut, then EOF */
    while (cl_read(&slow) == 0) {
        assert_int_equal(slow.h.type, KVS_WIRE_OUT);
    }

    kvs_test_cl_close(&slow);
    kvs_test_cl_close(&fast);
    kvs_test_srv_stop(&s);
    kvs_test_model_free(&s.md);
}


/* The orphan rule: once the parent fd is readable, the loop ends when
 * the last client leaves (no kvs_srv_stop). */
static void
test_orphan(void **state)
{
    int        pfd[2];
    uint64_t   u;
    server_t   s;
    client_t   cl;
    kvs_err_t  err;

    assert_int_equal(pipe(pfd), 0);

    memset(&s, 0, sizeof(s));
    model_gen(&s.md);
    server_start(&s, 0, pfd[0]);
    cl_connect(&cl, &s);

    /* "the master is gone" */
    assert_int_equal(write(pfd[1], "x", 1), 1);

    /* still serving the connected client */
    usleep(20000);
    cl_empty(&cl, KVS_WIRE_PING, 1);
    assert_int_equal(cl_read(&cl), 0);
    assert_int_equal(cl.h.type, KVS_WIRE_PONG);
    assert_int_equal(kvs_wire_dec_pong(cl.frame, cl.h.len, &u, &err),
                     KVS_OK);

    kvs_test_cl_close(&cl);
    kvs_test_srv_join(&s);                          /* ends by itself */
    assert_int_equal(access(s.path, F_OK), -1);

    close(pfd[0]);
    close(pfd[1]);
    kvs_test_model_free(&s.md);
}


/* Takes an flock lease on path as nginx's worker does; -1 when another
 * open file holds it. */
static int
lease_take(const char *path)
{
    int  fd;

    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    assert_true(fd >= 0);

    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        assert_int_equal(errno, EWOULDBLOCK);
        close(fd);
        return -1;
    }

    return fd;
}


/* Polls until path is gone or the wait is over. */
static int
wait_gone(const char *path)
{
    int  i;

    for (i = 0; i < WAIT_MS / 5; i++) {
        if (access(path, F_OK) != 0) {
            return 0;
        }
        usleep(5000);
    }

    return -1;
}


/* DRAIN (as a worker of a newer configuration sends it): no more
 * accepting, the lease released, the connected client served to the end
 * (its running stream and a request sent after), the loop ends by
 * itself when it leaves. */
static void
test_drain(void **state)
{
    int               lease, other, cfd;
    char              lock[300];
    int32_t           prompt[16];
    uint64_t          ids[2];
    uint32_t          n[2];
    server_t          s;
    client_t          a, b;
    got_t             g[2], *gp[2];
    kvs_engine_req_t  req, req2;
    struct sockaddr_un  sa;

    snprintf(lock, sizeof(lock), "%s", kvs_test_tmp("srv-drain.lock"));
    unlink(lock);
    lease = lease_take(lock);
    assert_true(lease > 2);
    assert_int_equal(lease_take(lock), -1);   /* held */
    assert_int_equal(write(lease, "1 2 0 100\n", 10), 10);

    memset(&s, 0, sizeof(s));
    model_gen(&s.md);
    server_start_lease(&s, 0, -1, lease);

    cl_connect(&a, &s);
    long_req(&req, prompt);
    cl_submit(&a, 1, 0, &req);
    wait_first_token(&a, 1);

    /* a new worker: HELLO, DRAIN, gone */
    cl_connect(&b, &s);
    cl_empty(&b, KVS_WIRE_DRAIN, 0);
    kvs_test_cl_close(&b);

    assert_int_equal(wait_gone(s.path), 0);

    /* the listener is closed, not just unlinked: nobody can reach it */
    cfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, s.path, strlen(s.path));
    assert_int_equal(connect(cfd, (struct sockaddr *) &sa, sizeof(sa)), -1);
    close(cfd);

    /* the lease is free (closed right after the unlink) */
    other = -1;
    for (cfd = 0; cfd < WAIT_MS / 5 && other < 0; cfd++) {
        other = lease_take(lock);
        if (other < 0) {
            usleep(5000);
        }
    }
    assert_true(other >= 0);
    assert_int_equal(lseek(other, 0, SEEK_END), 0);   /* emptied */

    /* the server still runs for a: a second DRAIN changes nothing, the
     * stream goes on to its end and a new request is served */
    assert_int_equal(pthread_tryjoin_np(s.thr, NULL), EBUSY);
    cl_empty(&a, KVS_WIRE_DRAIN, 0);

    req2 = req;
    req2.max_tokens = 7;
    cl_submit(&a, 2, 0, &req2);

    memset(g, 0, sizeof(g));
    ids[0] = 1;
    ids[1] = 2;
    n[0] = 1;
    n[1] = 1;
    gp[0] = &g[0];
    gp[1] = &g[1];
    cl_collect(&a, ids, 2, n, gp);

    assert_int_equal(g[0].out.finish, KVS_FINISH_LENGTH);
    assert_int_equal(g[0].out.n_generated, LONG_GEN);
    assert_int_equal(g[1].out.finish, KVS_FINISH_LENGTH);
    assert_int_equal(g[1].out.n_tokens, 7);
    got_free(g, 2);

    cl_wait_idle(&a, 1);
    assert_int_equal(pthread_tryjoin_np(s.thr, NULL), EBUSY);

    kvs_test_cl_close(&a);
    kvs_test_srv_join(&s);                          /* ends by itself */
    assert_int_equal(access(s.path, F_OK), -1);

    close(other);
    unlink(lock);
    kvs_test_model_free(&s.md);
}


/* DRAIN when a newer engine already owns the path: it is left alone;
 * without a lease nothing is closed that is not ours (a conf zeroed
 * without lease_fd must not close stdin). */
static void
test_drain_not_ours(void **state)
{
    int          stdin_open;
    FILE        *f;
    char         other[300];
    server_t     s;
    client_t     cl;
    struct stat  sb;

    stdin_open = fcntl(0, F_GETFD) >= 0;

    memset(&s, 0, sizeof(s));
    model_gen(&s.md);
    server_start_lease(&s, 0, -1, 0);
    cl_connect(&cl, &s);

    snprintf(other, sizeof(other), "%s.newer", s.path);
    f = fopen(other, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(rename(other, s.path), 0);

    cl_empty(&cl, KVS_WIRE_DRAIN, 0);
    cl_wait_idle(&cl, 1);                     /* DRAIN handled by now */
    kvs_test_cl_close(&cl);
    kvs_test_srv_join(&s);

    assert_int_equal(stat(s.path, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
    assert_int_equal(fcntl(0, F_GETFD) >= 0, stdin_open);
    unlink(s.path);
    kvs_test_model_free(&s.md);
}


/* A socket renamed onto the path by someone else is not removed. */
static void
test_path_not_ours(void **state)
{
    FILE      *f;
    char       other[300];
    server_t   s;
    client_t   cl;

    memset(&s, 0, sizeof(s));
    model_gen(&s.md);
    server_start(&s, 0, -1);
    cl_connect(&cl, &s);

    /* a newer engine took the path over */
    snprintf(other, sizeof(other), "%s.newer", s.path);
    f = fopen(other, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(rename(other, s.path), 0);

    kvs_test_cl_close(&cl);
    kvs_test_srv_stop(&s);

    assert_int_equal(access(s.path, F_OK), 0);
    unlink(s.path);
    kvs_test_model_free(&s.md);
}


/* Configuration errors: nothing left behind. */
static void
test_new_errors(void **state)
{
    char              path[300];
    kvs_err_t         err;
    kvs_srv_t        *srv;
    kvs_srv_conf_t    conf;
    kvs_srv_model_t   sm;
    kvs_test_model_t  md;

    model_gen(&md);
    memset(&sm, 0, sizeof(sm));
    engine_conf(&sm.engine, &md);

    memset(&conf, 0, sizeof(conf));
    conf.models = &sm;
    conf.n_models = 1;
    conf.parent_pidfd = -1;

    conf.socket_path = NULL;
    assert_int_equal(kvs_srv_new(&srv, &conf, &err), KVS_EINVAL);
    assert_null(srv);
    assert_non_null(strstr(err.msg, "socket_path"));

    /* longer than sun_path with the .pid suffix */
    memset(path, 'x', sizeof(path) - 1);
    path[sizeof(path) - 1] = '\0';
    memcpy(path, "/tmp/", 5);
    conf.socket_path = path;
    assert_int_equal(kvs_srv_new(&srv, &conf, &err), KVS_EINVAL);
    if (strstr(err.msg, "too long") == NULL) {
        fail_msg("%s", err.msg);
    }

    conf.socket_path = "/nonexistent-kvs-dir/engine.sock";
    assert_int_equal(kvs_srv_new(&srv, &conf, &err), KVS_EIO);
    assert_non_null(strstr(err.msg, "bind"));

    conf.socket_path = kvs_test_tmp("never.sock");
    conf.n_models = 0;
    assert_int_equal(kvs_srv_new(&srv, &conf, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "models"));

    /* an engine configuration the engine refuses, named */
    conf.n_models = 1;
    sm.engine.block_tokens = 100000;
    assert_int_equal(kvs_srv_new(&srv, &conf, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "models[0]"));
    assert_int_equal(access(conf.socket_path, F_OK), -1);

    kvs_test_model_free(&md);
}


/* `kvserve engine` as its own process: serves, then SIGTERM stops it
 * cleanly and removes the socket. */
static void
test_cli(void **state)
{
    int          status, i;
    char        *text, log[1024];
    size_t       len;
    pid_t        pid;
    const char  *cli, *model;
    server_t     s;
    client_t     cl;
    struct stat  sb;

    cli = getenv("KVS_CLI");
    model = kvs_test_fixture("models/stories260K-f32.gguf");

    if (cli == NULL || access(cli, X_OK) != 0 || model == NULL) {
        print_message("SKIP: KVS_CLI or stories260K absent\n");
        skip();
    }

    memset(&s, 0, sizeof(s));
    snprintf(s.path, sizeof(s.path), "%s",
             kvs_test_tmp("cli-engine.sock"));
    unlink(s.path);
    snprintf(log, sizeof(log), "%s", kvs_test_tmp("cli-engine.log"));

    pid = fork();
    assert_true(pid >= 0);

    if (pid == 0) {
        if (freopen(log, "w", stderr) == NULL) {
            _exit(126);
        }

        execl(cli, cli, "engine", "--socket", s.path, model, "--name",
              "test-model", "--threads", "1", "--kv-blocks", "1024",
              (char *) NULL);
        _exit(127);
    }

    for (i = 0; i < WAIT_MS / 10 && stat(s.path, &sb) != 0; i++) {
        usleep(10000);
    }

    assert_int_equal(kvs_test_model_stories(&s.md), 0);

    /* cl_connect's checks, without a server object of this process */
    {
        kvs_err_t           err;
        struct sockaddr_un  sa;

        memset(&cl, 0, sizeof(cl));
        cl.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        memset(&sa, 0, sizeof(sa));
        sa.sun_family = AF_UNIX;
        memcpy(sa.sun_path, s.path, strlen(s.path));
        assert_int_equal(connect(cl.fd, (struct sockaddr *) &sa,
                                 sizeof(sa)), 0);
        assert_int_equal(cl_read(&cl), 0);
        assert_int_equal(cl.h.type, KVS_WIRE_HELLO);
        assert_int_equal(kvs_wire_dec_hello(cl.frame, cl.h.len, &cl.hello,
                                            &err), KVS_OK);
        assert_int_equal(cl.hello.pid, (uint32_t) pid);
        assert_string_equal(cl.hello.models[0].name, "test-model");
        assert_int_equal(cl.hello.models[0].kv_blocks, 1024);
    }

    cl_empty(&cl, KVS_WIRE_PING, 8);
    assert_int_equal(cl_read(&cl), 0);
    assert_int_equal(cl.h.type, KVS_WIRE_PONG);

    assert_int_equal(kill(pid, SIGTERM), 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(access(s.path, F_OK), -1);

    /* the connection ended with it */
    assert_int_equal(cl_read(&cl), 1);

    /* one line when it started serving, one when it stopped */
    len = 0;
    text = (char *) kvs_test_slurp(log, &len);
    assert_non_null(text);
    text = realloc(text, len + 1);
    text[len] = '\0';
    assert_non_null(strstr(text, "serving 1 model on"));
    assert_non_null(strstr(text, "stopped"));
    free(text);
    unlink(log);

    kvs_test_cl_close(&cl);
    kvs_test_model_free(&s.md);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_direct),
        cmocka_unit_test(test_stories_greedy),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_disconnect),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_lora_map),
        cmocka_unit_test(test_slow_client),
        cmocka_unit_test(test_orphan),
        cmocka_unit_test(test_drain),
        cmocka_unit_test(test_drain_not_ours),
        cmocka_unit_test(test_path_not_ours),
        cmocka_unit_test(test_new_errors),
        cmocka_unit_test(test_cli),
    };

    signal(SIGPIPE, SIG_IGN);

    return cmocka_run_group_tests(tests, NULL, NULL);
}
