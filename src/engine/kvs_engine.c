/*
 * kvs_engine: the step loop and the hand-over between the engine thread
 * and its consumer (see kvs_engine.h).
 *
 * State split:
 *   - engine thread only: the scheduler, pool, backend, and each
 *     sequence's kvs_seq_t, sampler, detokenizer and stop matcher;
 *   - under e->lock: the inbox (submitted, not yet scheduled), the
 *     cancel list, every handle's outbox, refs and flags, the ready
 *     list, the stats copy.
 * The engine thread computes without the lock and takes it once per step
 * to publish what the step produced.
 *
 * Invariants:
 *   - refs counts the engine's hold (until the sequence ends) and the
 *     consumer's (until close); the handle is freed at 0;
 *   - a handle is on the ready list (ready == 1) iff it has output the
 *     consumer has not read, or its end, and the consumer still holds
 *     it; the eventfd is written when the list goes from empty to not;
 *   - every block a sequence holds is released when it ends, whatever
 *     the reason, before its engine hold is dropped.
 */

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "../backend/kvs_backend.h"
#include "../kv/kvs_kv_pool.h"
#include "../sched/kvs_sched.h"
#include "../tokenizer/kvs_tok.h"
#include "kvs_engine.h"
#include "kvs_stop.h"


struct kvs_engine_seq_s {
    /* engine thread only */
    kvs_seq_t                seq;      /* first: a kvs_seq_t * is one */
    kvs_sampler_t            sampler;
    kvs_detok_t              detok;
    kvs_stop_t               stop;
    int32_t                  stop_ids[KVS_ENGINE_MAX_STOP_IDS];
    uint32_t                 n_stop_ids;
    uint32_t                 max_tokens;
    int                      ignore_eos;
    int                      want_lp;
    void                    *data;

    /* under the engine's lock */
    kvs_engine_out_t         out;      /* not yet read */
    unsigned                 refs;
    unsigned                 cancelled:1;  /* the consumer closed early */
    unsigned                 ended:1;      /* the engine let go */
    unsigned                 ready:1;
    unsigned                 scheduled:1;  /* taken from the inbox */
    kvs_engine_seq_t        *link;         /* inbox or cancel list */
    kvs_engine_seq_t        *ready_prev;
    kvs_engine_seq_t        *ready_next;
};

struct kvs_engine_s {
    kvs_engine_conf_t        conf;
    kvs_backend_t           *be;
    kvs_kv_pool_t           *pool;
    kvs_sched_t              sched;
    float                   *logits;   /* [max_running][n_vocab] */
    kvs_buf_t                piece;    /* detokenized text of a token */
    kvs_buf_t                text;     /* what of it the stop matcher
                                          let through */
    int                      efd;

    pthread_mutex_t          lock;
    pthread_cond_t           wake;
    pthread_t                thread;
    int                      started;
    int                      quit;
    kvs_engine_seq_t        *inbox;    /* newest first */
    kvs_engine_seq_t        *cancels;
    kvs_engine_seq_t        *ready_head;
    kvs_engine_seq_t        *ready_tail;
    kvs_engine_stats_t       stats;    /* engine thread's, published */
    kvs_engine_stats_t       shown;    /* copy under the lock */
};


static int kvs_engine_seq_setup(kvs_engine_t *e, kvs_engine_seq_t *h,
    const kvs_engine_req_t *req, kvs_err_t *err);
static void kvs_engine_seq_free(kvs_engine_seq_t *h);
static void kvs_engine_take_inbox(kvs_engine_t *e);
static void kvs_engine_take_cancels(kvs_engine_t *e);
static void kvs_engine_emit(kvs_engine_t *e, kvs_engine_seq_t *h,
    int32_t token, const char *text, size_t len, kvs_finish_t finish,
    const char *error);
static void kvs_engine_end(kvs_engine_t *e, kvs_engine_seq_t *h,
    kvs_finish_t finish, const char *error, int flush);
static void kvs_engine_sample(kvs_engine_t *e, kvs_engine_seq_t *h,
    float *logits);
static void kvs_engine_unref(kvs_engine_seq_t *h);
static void *kvs_engine_main(void *arg);
static uint64_t kvs_engine_now(void);


int
kvs_engine_new(kvs_engine_t **out, const kvs_engine_conf_t *conf,
    kvs_err_t *err)
{
    int                 rc;
    kvs_engine_t       *e;
    kvs_sched_conf_t    sc;
    kvs_backend_conf_t  bc;

    *out = NULL;

    if (conf->model == NULL || conf->vocab == NULL) {
        return kvs_err_set(err, KVS_EINVAL, "engine: no model or vocab");
    }

    if (conf->vocab->n_tokens != conf->model->hp.n_vocab) {
        return kvs_err_set(err, KVS_EINVAL, "engine: the vocabulary has "
                           "%" PRIu32 " tokens, the model %" PRIu32,
                           (uint32_t) conf->vocab->n_tokens,
                           conf->model->hp.n_vocab);
    }

    e = calloc(1, sizeof(kvs_engine_t));
    if (e == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "engine: out of memory");
    }

    e->conf = *conf;
    e->efd = -1;

    if (e->conf.block_tokens == 0) {
        e->conf.block_tokens = KVS_KV_BLOCK_TOKENS;
    }

    if (e->conf.max_batch_tokens == 0) {
        e->conf.max_batch_tokens = 2048;
    }

    if (e->conf.max_running == 0) {
        e->conf.max_running = 256;
    }

    if (e->conf.n_ctx == 0) {
        e->conf.n_ctx = conf->model->hp.n_ctx_train;
    }

    sc.max_batch_tokens = e->conf.max_batch_tokens;
    sc.max_running = e->conf.max_running;
    sc.n_ctx = e->conf.n_ctx;
    sc.chunked_prefill = !e->conf.no_chunked_prefill;

    bc.n_blocks = e->conf.n_blocks;
    bc.block_tokens = e->conf.block_tokens;
    bc.threads = e->conf.threads;

    rc = kvs_kv_pool_new(&e->pool, e->conf.n_blocks, e->conf.block_tokens,
                         err);
    if (rc != KVS_OK) {
        e->pool = NULL;
        goto failed;
    }

    rc = kvs_sched_init(&e->sched, &sc, e->pool, err);
    if (rc != KVS_OK) {
        goto failed;
    }

    rc = kvs_backend_cpu_new(&e->be, conf->model, &bc, err);
    if (rc != KVS_OK) {
        goto failed;
    }

    e->logits = malloc((size_t) e->conf.max_running
                       * conf->model->hp.n_vocab * sizeof(float));
    if (e->logits == NULL) {
        rc = kvs_err_set(err, KVS_ENOMEM, "engine: out of memory for "
                         "logits");
        goto failed;
    }

    e->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (e->efd == -1) {
        rc = kvs_err_set(err, KVS_EIO, "eventfd: %s", strerror(errno));
        goto failed;
    }

    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->wake, NULL);

    e->stats.kv_blocks = e->conf.n_blocks;
    e->stats.block_tokens = e->conf.block_tokens;
    e->shown = e->stats;

    *out = e;

    return KVS_OK;

failed:

    if (e->efd != -1) {
        close(e->efd);
    }

    free(e->logits);
    kvs_backend_free(e->be);
    kvs_sched_free(&e->sched);
    kvs_kv_pool_free(e->pool);
    free(e);

    return rc;
}


int
kvs_engine_start(kvs_engine_t *e, kvs_err_t *err)
{
    int  rc;

    rc = pthread_create(&e->thread, NULL, kvs_engine_main, e);
    if (rc != 0) {
        return kvs_err_set(err, KVS_ENOMEM, "engine thread: %s",
                           strerror(rc));
    }

    e->started = 1;

    return KVS_OK;
}


void
kvs_engine_stop(kvs_engine_t *e)
{
    if (!e->started) {
        return;
    }

    pthread_mutex_lock(&e->lock);
    e->quit = 1;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);

    e->started = 0;
    e->quit = 0;
}


void
kvs_engine_free(kvs_engine_t *e)
{
    kvs_seq_t  *seq;

    if (e == NULL) {
        return;
    }

    kvs_engine_stop(e);

    /* no thread now: end whatever is left, then drop the consumer's
     * holds that were never closed */

    kvs_engine_take_inbox(e);

    while ((seq = e->sched.running.head) != NULL
           || (seq = e->sched.waiting.head) != NULL)
    {
        kvs_engine_end(e, (kvs_engine_seq_t *) seq, KVS_FINISH_CANCELLED,
                       NULL, 0);
    }

    kvs_engine_take_cancels(e);

    kvs_sched_free(&e->sched);
    kvs_backend_free(e->be);
    kvs_kv_pool_free(e->pool);
    kvs_buf_free(&e->piece);
    kvs_buf_free(&e->text);
    free(e->logits);
    close(e->efd);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->wake);
    free(e);
}


int
kvs_engine_fd(const kvs_engine_t *e)
{
    return e->efd;
}


int
kvs_engine_submit(kvs_engine_t *e, const kvs_engine_req_t *req,
    kvs_engine_seq_t **out, kvs_err_t *err)
{
    kvs_engine_seq_t  *h;

    *out = NULL;

    h = calloc(1, sizeof(kvs_engine_seq_t));
    if (h == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "request: out of memory");
    }

    if (kvs_engine_seq_setup(e, h, req, err) != KVS_OK) {
        kvs_engine_seq_free(h);
        return err->code;
    }

    h->refs = 2;
    h->out.n_prompt = req->n_prompt;

    pthread_mutex_lock(&e->lock);
    h->link = e->inbox;
    e->inbox = h;
    e->shown.requests++;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);

    *out = h;

    return KVS_OK;
}


size_t
kvs_engine_ready(kvs_engine_t *e, kvs_engine_seq_t **hs, size_t max)
{
    size_t             n;
    uint64_t           v;
    kvs_engine_seq_t  *h;

    /* clear before taking, so output queued after the take rewrites it */
    if (read(e->efd, &v, sizeof(v)) < 0) {
        /* EAGAIN: nothing was signalled; the list may still hold
         * handles a previous call left for lack of room */
    }

    pthread_mutex_lock(&e->lock);

    for (n = 0; n < max && (h = e->ready_head) != NULL; n++) {
        e->ready_head = h->ready_next;
        if (e->ready_head != NULL) {
            e->ready_head->ready_prev = NULL;
        } else {
            e->ready_tail = NULL;
        }

        h->ready = 0;
        h->ready_next = NULL;
        hs[n] = h;
    }

    if (e->ready_head != NULL) {
        v = 1;
        if (write(e->efd, &v, sizeof(v)) < 0) {
            /* the counter is already non-zero */
        }
    }

    pthread_mutex_unlock(&e->lock);

    return n;
}


int
kvs_engine_read(kvs_engine_t *e, kvs_engine_seq_t *h, kvs_engine_out_t *out)
{
    int                rc;
    kvs_engine_out_t  *in;

    pthread_mutex_lock(&e->lock);

    in = &h->out;
    rc = KVS_OK;

    if (in->n_tokens > 0
        && kvs_grow((void **) &out->tokens, &out->tokens_cap,
                    out->n_tokens + in->n_tokens, sizeof(int32_t))
           != KVS_OK)
    {
        rc = KVS_ENOMEM;
    }

    if (rc == KVS_OK && in->n_lp > 0
        && kvs_grow((void **) &out->lp, &out->lp_cap, out->n_lp + in->n_lp,
                    sizeof(kvs_sample_logprobs_t))
           != KVS_OK)
    {
        rc = KVS_ENOMEM;
    }

    if (rc == KVS_OK && kvs_buf_reserve(&out->text, in->text.len) != KVS_OK)
    {
        rc = KVS_ENOMEM;
    }

    if (rc == KVS_OK) {
        if (in->n_tokens > 0) {
            memcpy(out->tokens + out->n_tokens, in->tokens,
                   in->n_tokens * sizeof(int32_t));
        }

        if (in->n_lp > 0) {
            memcpy(out->lp + out->n_lp, in->lp,
                   in->n_lp * sizeof(kvs_sample_logprobs_t));
        }

        if (in->text.len > 0) {
            memcpy(out->text.data + out->text.len, in->text.data,
                   in->text.len);
        }

        out->n_tokens += in->n_tokens;
        out->n_lp += in->n_lp;
        out->text.len += in->text.len;
        in->n_tokens = 0;
        in->n_lp = 0;
        in->text.len = 0;

        out->finish = in->finish;
        out->n_prompt = in->n_prompt;
        out->n_generated = in->n_generated;
        out->n_preempted = in->n_preempted;
        memcpy(out->error, in->error, sizeof(out->error));
        rc = in->finish;
    }

    pthread_mutex_unlock(&e->lock);

    return rc;
}


void *
kvs_engine_seq_data(const kvs_engine_seq_t *h)
{
    return h->data;
}


void
kvs_engine_close(kvs_engine_t *e, kvs_engine_seq_t *h)
{
    pthread_mutex_lock(&e->lock);

    if (h->ready) {
        if (h->ready_prev != NULL) {
            h->ready_prev->ready_next = h->ready_next;
        } else {
            e->ready_head = h->ready_next;
        }

        if (h->ready_next != NULL) {
            h->ready_next->ready_prev = h->ready_prev;
        } else {
            e->ready_tail = h->ready_prev;
        }

        h->ready = 0;
    }

    if (!h->ended) {
        /* the engine still holds it: let its next step end it */
        h->cancelled = 1;

        if (h->scheduled) {
            h->link = e->cancels;
            e->cancels = h;
            h->refs++;                /* the cancel list's hold */
        }

        pthread_cond_signal(&e->wake);
    }

    h->refs--;
    if (h->refs == 0) {
        kvs_engine_seq_free(h);
    }

    pthread_mutex_unlock(&e->lock);
}


int
kvs_engine_step(kvs_engine_t *e)
{
    int                 rc;
    uint32_t            i, used;
    uint64_t            t0, dt;
    kvs_err_t           err;
    kvs_seq_t          *seq, *next;
    kvs_sched_plan_t    plan;

    kvs_err_clear(&err);

    /* new requests and cancellations first, so a cancelled sequence's
     * blocks serve this very step */

    kvs_engine_take_inbox(e);
    kvs_engine_take_cancels(e);

    kvs_sched_plan(&e->sched, &plan);

    if (plan.batch.n == 0) {
        return 0;
    }

    t0 = kvs_engine_now();

    rc = kvs_backend_forward(e->be, &plan.batch, e->logits, &err);

    if (rc != KVS_OK) {
        /* nothing was computed; end the step's requests rather than
         * retry a step that may fail the same way forever */
        for (seq = plan.seqs; seq != NULL; seq = next) {
            next = seq->step_next;
            kvs_engine_end(e, (kvs_engine_seq_t *) seq, KVS_FINISH_ERROR,
                           err.msg, 0);
        }

        return 1;
    }

    kvs_sched_commit(&e->sched, &plan);

    used = kvs_kv_pool_used_count(e->pool);

    for (i = 0; i < plan.n_logits; i++) {
        kvs_engine_sample(e, (kvs_engine_seq_t *) plan.logits_seq[i],
                          e->logits + (size_t) i * e->be->n_vocab);
    }

    dt = kvs_engine_now() - t0;

    e->stats.steps++;
    e->stats.prefill_tokens += plan.n_prefill;
    e->stats.decode_tokens += plan.n_decode;
    e->stats.step_ns += dt;
    e->stats.step_ns_max = dt > e->stats.step_ns_max ? dt
                                                     : e->stats.step_ns_max;
    e->stats.batch_seqs += plan.n_logits;

    if (plan.n_prefill == 0) {
        e->stats.decode_only_steps++;
        e->stats.decode_only_tokens += plan.n_decode;
        e->stats.decode_only_ns += dt;
    }

    e->stats.kv_used_max = used > e->stats.kv_used_max
                           ? used : e->stats.kv_used_max;

    pthread_mutex_lock(&e->lock);
    e->stats.requests = e->shown.requests;
    e->stats.preemptions = e->sched.n_preemptions;
    e->stats.running = e->sched.running.n;
    e->stats.waiting = e->sched.waiting.n;
    e->stats.kv_used = kvs_kv_pool_used_count(e->pool);
    e->shown = e->stats;
    pthread_mutex_unlock(&e->lock);

    return 1;
}


unsigned
kvs_engine_threads(const kvs_engine_t *e)
{
    return e->be->threads;
}


uint64_t
kvs_engine_kv_bytes(const kvs_engine_t *e)
{
    return e->be->kv_bytes;
}


int
kvs_engine_check(kvs_engine_t *e, kvs_err_t *err)
{
    if (kvs_kv_pool_check(e->pool, err) != KVS_OK) {
        return err->code;
    }

    if (e->sched.running.n == 0 && e->sched.waiting.n == 0
        && kvs_kv_pool_used_count(e->pool) != 0)
    {
        return kvs_err_set(err, KVS_EFORMAT, "%" PRIu32 " blocks in use "
                           "with no sequence left",
                           kvs_kv_pool_used_count(e->pool));
    }

    return KVS_OK;
}


void
kvs_engine_stats(kvs_engine_t *e, kvs_engine_stats_t *st)
{
    pthread_mutex_lock(&e->lock);
    *st = e->shown;
    pthread_mutex_unlock(&e->lock);
}


void
kvs_engine_out_free(kvs_engine_out_t *out)
{
    free(out->tokens);
    free(out->lp);
    kvs_buf_free(&out->text);
    memset(out, 0, sizeof(kvs_engine_out_t));
}


const char *
kvs_finish_name(kvs_finish_t f)
{
    switch (f) {
    case KVS_FINISH_STOP:
        return "stop";
    case KVS_FINISH_LENGTH:
        return "length";
    case KVS_FINISH_CANCELLED:
        return "cancelled";
    case KVS_FINISH_ERROR:
        return "error";
    default:
        return "none";
    }
}


/* Everything a request carries is checked here, on the consumer's
 * thread, so the engine thread never meets a bad request. */
static int
kvs_engine_seq_setup(kvs_engine_t *e, kvs_engine_seq_t *h,
    const kvs_engine_req_t *req, kvs_err_t *err)
{
    uint32_t            i, n_vocab;
    const kvs_vocab_t  *v;

    v = e->conf.vocab;
    n_vocab = e->be->n_vocab;

    for (i = 0; i < req->n_prompt; i++) {
        if (req->prompt[i] < 0 || (uint32_t) req->prompt[i] >= n_vocab) {
            return kvs_err_set(err, KVS_EINVAL, "prompt token %" PRIu32
                               " is %" PRId32 ", outside the vocabulary "
                               "of %" PRIu32, i, req->prompt[i], n_vocab);
        }
    }

    if (req->n_stop_ids > KVS_ENGINE_MAX_STOP_IDS) {
        return kvs_err_set(err, KVS_EINVAL, "%" PRIu32 " stop token ids; "
                           "at most %d", req->n_stop_ids,
                           KVS_ENGINE_MAX_STOP_IDS);
    }

    for (i = 0; i < req->n_stop_ids; i++) {
        if (req->stop_ids[i] < 0 || (uint32_t) req->stop_ids[i] >= n_vocab)
        {
            return kvs_err_set(err, KVS_EINVAL, "stop token id %" PRId32
                               " is outside the vocabulary",
                               req->stop_ids[i]);
        }

        h->stop_ids[i] = req->stop_ids[i];
    }

    h->n_stop_ids = req->n_stop_ids;

    if (kvs_seq_init(&h->seq, &e->sched, req->prompt, req->n_prompt,
                     req->max_tokens, err) != KVS_OK)
    {
        return err->code;
    }

    if (kvs_stop_init(&h->stop, req->stop, req->stop_len, req->n_stop, err)
        != KVS_OK)
    {
        return err->code;
    }

    if (kvs_sampler_init(&h->sampler, &req->sample, n_vocab, err)
        != KVS_OK)
    {
        memset(&h->sampler, 0, sizeof(kvs_sampler_t));
        return err->code;
    }

    /* the detokenizer learns where the prompt ends (a SentencePiece
     * vocabulary drops the first space only at the very start) */

    kvs_detok_init(&h->detok, v, 0);
    kvs_detok_skip(&h->detok, req->prompt, req->n_prompt);

    h->max_tokens = req->max_tokens;
    h->ignore_eos = req->ignore_eos;
    h->want_lp = req->sample.logprobs;
    h->data = req->data;

    return KVS_OK;
}


static void
kvs_engine_seq_free(kvs_engine_seq_t *h)
{
    kvs_seq_free(&h->seq);
    kvs_sampler_free(&h->sampler);
    kvs_stop_free(&h->stop);
    kvs_engine_out_free(&h->out);
    free(h);
}


/* Moves submitted requests into the scheduler, oldest first; ones the
 * consumer closed meanwhile are dropped. */
static void
kvs_engine_take_inbox(kvs_engine_t *e)
{
    kvs_engine_seq_t  *h, *next, *list;

    pthread_mutex_lock(&e->lock);
    list = NULL;

    for (h = e->inbox; h != NULL; h = next) {
        next = h->link;
        h->link = list;
        list = h;
        h->scheduled = 1;
    }

    e->inbox = NULL;
    pthread_mutex_unlock(&e->lock);

    for (h = list; h != NULL; h = next) {
        next = h->link;
        h->link = NULL;

        if (h->cancelled) {
            kvs_engine_end(e, h, KVS_FINISH_CANCELLED, NULL, 0);
            continue;
        }

        kvs_sched_add(&e->sched, &h->seq);
    }
}


/* Ends the sequences whose consumer closed them early. */
static void
kvs_engine_take_cancels(kvs_engine_t *e)
{
    kvs_engine_seq_t  *h, *next, *list;

    pthread_mutex_lock(&e->lock);
    list = e->cancels;
    e->cancels = NULL;
    pthread_mutex_unlock(&e->lock);

    for (h = list; h != NULL; h = next) {
        next = h->link;

        /* it may have finished in the step during which it was closed */
        kvs_engine_end(e, h, KVS_FINISH_CANCELLED, NULL, 0);

        pthread_mutex_lock(&e->lock);
        kvs_engine_unref(h);
        pthread_mutex_unlock(&e->lock);
    }
}


/* Samples h's next token from its logits row and hands it on. */
static void
kvs_engine_sample(kvs_engine_t *e, kvs_engine_seq_t *h, float *logits)
{
    int32_t             tok;
    uint32_t            i;
    kvs_err_t           err;
    const kvs_vocab_t  *v;

    kvs_err_clear(&err);
    v = e->conf.vocab;

    if (kvs_sample(&h->sampler, logits, &tok, &err) != KVS_OK) {
        kvs_engine_end(e, h, KVS_FINISH_ERROR, err.msg, 0);
        return;
    }

    if (!h->ignore_eos && kvs_vocab_ends_text(v, tok)) {
        goto stop;
    }

    for (i = 0; i < h->n_stop_ids; i++) {
        if (tok == h->stop_ids[i]) {
            goto stop;
        }
    }

    if (kvs_sampler_accept(&h->sampler, tok, &err) != KVS_OK) {
        kvs_engine_end(e, h, KVS_FINISH_ERROR, err.msg, 0);
        return;
    }

    kvs_seq_append(&h->seq, tok);

    e->piece.len = 0;
    e->text.len = 0;

    if (kvs_detok_push(&h->detok, tok, &e->piece, &err) != KVS_OK
        || kvs_stop_feed(&h->stop, (const char *) e->piece.data,
                         e->piece.len, &e->text, &err) != KVS_OK)
    {
        kvs_engine_end(e, h, KVS_FINISH_ERROR, err.msg, 0);
        return;
    }

    kvs_engine_emit(e, h, tok, (const char *) e->text.data, e->text.len,
                    KVS_FINISH_NONE, NULL);

    if (h->stop.matched >= 0) {
        /* text past the stop string is never shown */
        kvs_engine_end(e, h, KVS_FINISH_STOP, NULL, 0);

    } else if (kvs_seq_generated(&h->seq) == h->max_tokens) {
        kvs_engine_end(e, h, KVS_FINISH_LENGTH, NULL, 1);
    }

    return;

stop:

    /* an end or stop token: not shown, but what was held back is */
    kvs_engine_end(e, h, KVS_FINISH_STOP, NULL, 1);
}


/*
 * Publishes output: token (or -1 for none) with its logprobs, text, and
 * when finish is set the end.  Allocation failure here cannot be handed
 * back to anyone but the consumer, so it becomes the request's error.
 */
static void
kvs_engine_emit(kvs_engine_t *e, kvs_engine_seq_t *h, int32_t token,
    const char *text, size_t len, kvs_finish_t finish, const char *error)
{
    int                rc;
    uint64_t           one;
    kvs_engine_out_t  *o;

    pthread_mutex_lock(&e->lock);

    o = &h->out;
    rc = KVS_OK;

    if (token >= 0) {
        if (kvs_grow((void **) &o->tokens, &o->tokens_cap, o->n_tokens + 1,
                     sizeof(int32_t)) != KVS_OK
            || (h->want_lp
                && kvs_grow((void **) &o->lp, &o->lp_cap, o->n_lp + 1,
                            sizeof(kvs_sample_logprobs_t)) != KVS_OK))
        {
            rc = KVS_ENOMEM;
        } else {
            o->tokens[o->n_tokens++] = token;

            if (h->want_lp) {
                o->lp[o->n_lp++] = h->sampler.lp;
            }
        }
    }

    if (rc == KVS_OK && len > 0 && kvs_buf_append(&o->text, text, len)
                                   != KVS_OK)
    {
        rc = KVS_ENOMEM;
    }

    if (rc != KVS_OK && finish == KVS_FINISH_NONE) {
        finish = KVS_FINISH_ERROR;
        error = "out of memory for the output";
    }

    o->n_generated = kvs_seq_generated(&h->seq);
    o->n_preempted = h->seq.n_preempted;

    if (finish != KVS_FINISH_NONE && o->finish == KVS_FINISH_NONE) {
        o->finish = finish;

        if (error != NULL) {
            snprintf(o->error, sizeof(o->error), "%s", error);
        }
    }

    if (!h->ready && !h->cancelled) {
        h->ready = 1;
        h->ready_prev = e->ready_tail;
        h->ready_next = NULL;

        if (e->ready_tail != NULL) {
            e->ready_tail->ready_next = h;
        } else {
            e->ready_head = h;

            one = 1;
            if (write(e->efd, &one, sizeof(one)) < 0) {
                /* the counter is already non-zero */
            }
        }

        e->ready_tail = h;
    }

    pthread_mutex_unlock(&e->lock);
}


/* Ends h's sequence once: blocks back to the pool, held-back text
 * flushed when flush is set, the end published, the engine's hold
 * dropped. */
static void
kvs_engine_end(kvs_engine_t *e, kvs_engine_seq_t *h, kvs_finish_t finish,
    const char *error, int flush)
{
    kvs_err_t  err;

    if (h->ended) {
        return;
    }

    kvs_sched_remove(&e->sched, &h->seq);

    e->text.len = 0;

    if (flush) {
        /* a character cut off by the end, then what the matcher held
         * back; a stop string can still complete in it */
        e->piece.len = 0;

        if (kvs_detok_finish(&h->detok, &e->piece) != KVS_OK
            || kvs_stop_feed(&h->stop, (const char *) e->piece.data,
                             e->piece.len, &e->text, &err) != KVS_OK
            || kvs_stop_flush(&h->stop, &e->text, &err) != KVS_OK)
        {
            finish = KVS_FINISH_ERROR;
            error = "out of memory for the output";
        }

        if (h->stop.matched >= 0) {
            finish = KVS_FINISH_STOP;
        }
    }

    kvs_engine_emit(e, h, -1, (const char *) e->text.data, e->text.len,
                    finish, error);

    pthread_mutex_lock(&e->lock);
    e->stats.finished++;
    e->shown.finished = e->stats.finished;
    h->ended = 1;
    h->refs--;
    if (h->refs == 0) {
        kvs_engine_seq_free(h);
    }
    pthread_mutex_unlock(&e->lock);
}


static void
kvs_engine_unref(kvs_engine_seq_t *h)
{
    h->refs--;
    if (h->refs == 0) {
        kvs_engine_seq_free(h);
    }
}


static void *
kvs_engine_main(void *arg)
{
    int            busy;
    kvs_engine_t  *e = arg;

    busy = 0;

    for ( ;; ) {
        pthread_mutex_lock(&e->lock);

        /* idle (the last step found nothing to run): sleep until a
         * submit, a close or quit */
        while (!busy && !e->quit && e->inbox == NULL && e->cancels == NULL)
        {
            pthread_cond_wait(&e->wake, &e->lock);
        }

        if (e->quit) {
            pthread_mutex_unlock(&e->lock);
            break;
        }

        pthread_mutex_unlock(&e->lock);

        busy = kvs_engine_step(e);
    }

    return NULL;
}


static uint64_t
kvs_engine_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}
