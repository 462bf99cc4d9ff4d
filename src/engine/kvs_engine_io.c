/*
 * kvs_engine_io: the hand-over between the engine thread and its
 * consumer: requests checked and queued, outputs published into each
 * handle's outbox and the ready list, read, and handles closed (see
 * kvs_engine_impl.h for the locking rules).
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvs_engine_impl.h"


static int kvs_engine_cache_setup(kvs_engine_seq_t *h,
    const kvs_engine_req_t *req, kvs_err_t *err);


int
kvs_engine_fd(const kvs_engine_t *e)
{
    return e->efd;
}


int
kvs_engine_submit(kvs_engine_t *e, const kvs_engine_req_t *req,
    kvs_engine_seq_t **hs, kvs_err_t *err)
{
    uint32_t             i, n;
    kvs_engine_seq_t    *h;
    kvs_engine_req_t     one;

    n = req->n > 1 ? req->n : 1;

    if (n > KVS_ENGINE_MAX_N) {
        return kvs_err_set(err, KVS_EINVAL, "n: at most %d choices (got %"
                           PRIu32 ")", KVS_ENGINE_MAX_N, n);
    }

    /* every choice set up before any is queued: all or nothing */

    one = *req;

    for (i = 0; i < n; i++) {
        hs[i] = NULL;
    }

    for (i = 0; i < n; i++) {
        h = calloc(1, sizeof(kvs_engine_seq_t));

        if (h == NULL) {
            kvs_err_set(err, KVS_ENOMEM, "request: out of memory");
            goto failed;
        }

        hs[i] = h;
        one.sample.seed = req->sample.seed + i;

        if (kvs_engine_seq_setup(e, h, &one, err) != KVS_OK) {
            goto failed;
        }

        h->refs = 2;
        h->out.n_prompt = req->n_prompt;

        if (i > 0) {
            /* pins are the request's: choice 0 sets them */
            h->n_pins = 0;

            /* held back until choice 0 has the prompt's blocks; closes
             * go through the cancel list */
            h->leader = hs[0];
            h->scheduled = 1;
            h->next_follower = hs[0]->followers;
            hs[0]->followers = h;
        }
    }

    pthread_mutex_lock(&e->lock);
    hs[0]->next_in = e->inbox;
    e->inbox = hs[0];
    e->shown.requests++;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);

    return KVS_OK;

failed:

    for (i = 0; i < n && hs[i] != NULL; i++) {
        kvs_engine_seq_free(hs[i]);
        hs[i] = NULL;
    }

    return err->code;
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
        out->kv_block_us = in->kv_block_us;

        /* the cache figures are handed over once; out keeps them */
        if (in->has_cache) {
            out->n_cached = in->n_cached;
            out->n_cache_created = in->n_cache_created;
            out->n_cached_tier = in->n_cached_tier;
            out->n_cached_host = in->n_cached_host;
            out->miss = in->miss;
            out->miss_pos = in->miss_pos;
            out->has_cache = 1;
            in->has_cache = 0;
        }

        memcpy(out->error, in->error, sizeof(out->error));
        out->retry_after = in->retry_after;
        out->client_fault = in->client_fault;
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
            h->next_cancel = e->cancels;
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


void
kvs_engine_out_free(kvs_engine_out_t *out)
{
    free(out->tokens);
    free(out->lp);
    kvs_buf_free(&out->text);
    memset(out, 0, sizeof(kvs_engine_out_t));
}



/* Everything a request carries is checked here, on the consumer's
 * thread, so the engine thread never meets a bad request. */
int
kvs_engine_seq_setup(kvs_engine_t *e, kvs_engine_seq_t *h,
    const kvs_engine_req_t *req, kvs_err_t *err)
{
    uint32_t            i, n_vocab, n_loras;
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

    n_loras = kvs_engine_lora_bound(e);

    if (req->adapter > n_loras) {
        return kvs_err_set(err, KVS_EINVAL, "adapter %" PRIu32 ": the "
                           "model serves %" PRIu32 " LoRA adapter%s",
                           req->adapter, n_loras, n_loras == 1 ? "" : "s");
    }

    if (kvs_engine_cache_setup(h, req, err) != KVS_OK) {
        return err->code;
    }

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

    if (kvs_engine_gram_setup(e, h, req, err) != KVS_OK) {
        return err->code;
    }

    h->max_tokens = req->max_tokens;
    h->ignore_eos = req->ignore_eos;
    h->want_lp = req->sample.logprobs;
    h->data = req->data;

    return KVS_OK;
}


/* The request's prefix cache key, pins and tenant, checked. */
static int
kvs_engine_cache_setup(kvs_engine_seq_t *h, const kvs_engine_req_t *req,
    kvs_err_t *err)
{
    uint32_t  i;

    if (req->scope_len > KVS_RADIX_MAX_SCOPE
        || (req->scope_len > 0 && req->scope == NULL))
    {
        return kvs_err_set(err, KVS_EINVAL, "cache scope of %zu bytes; at "
                           "most %d", req->scope_len, KVS_RADIX_MAX_SCOPE);
    }

    if (req->n_pins > KVS_ENGINE_MAX_PINS) {
        return kvs_err_set(err, KVS_EINVAL, "%" PRIu32 " cache breakpoints;"
                           " at most %d", req->n_pins, KVS_ENGINE_MAX_PINS);
    }

    for (i = 0; i < req->n_pins; i++) {
        if (req->pins[i].n_tokens == 0
            || req->pins[i].n_tokens > req->n_prompt)
        {
            return kvs_err_set(err, KVS_EINVAL, "cache breakpoint %" PRIu32
                               " at token %" PRIu32 ", outside the prompt "
                               "of %" PRIu32, i, req->pins[i].n_tokens,
                               req->n_prompt);
        }

        if (req->pins[i].ttl_ms == 0
            || req->pins[i].ttl_ms > KVS_ENGINE_MAX_PIN_TTL)
        {
            return kvs_err_set(err, KVS_EINVAL, "cache breakpoint %" PRIu32
                               " ttl of %" PRIu32 " ms; expected 1..%d",
                               i, req->pins[i].ttl_ms,
                               KVS_ENGINE_MAX_PIN_TTL);
        }

        h->pins[i] = req->pins[i];
    }

    if (req->tenant_len > KVS_FAIR_MAX_KEY
        || (req->tenant_len > 0 && req->tenant == NULL))
    {
        return kvs_err_set(err, KVS_EINVAL, "tenant key of %zu bytes; at "
                           "most %d", req->tenant_len, KVS_FAIR_MAX_KEY);
    }

    h->tenant_len = req->tenant_len;
    if (req->tenant_len > 0) {
        memcpy(h->tenant, req->tenant, req->tenant_len);
    }

    h->n_pins = req->n_pins;
    h->scope_len = req->scope_len;
    if (req->scope_len > 0) {
        memcpy(h->scope, req->scope, req->scope_len);
    }
    h->adapter = req->adapter;

    return KVS_OK;
}


void
kvs_engine_seq_free(kvs_engine_seq_t *h)
{
    kvs_engine_gram_seq_free(h);
    kvs_seq_free(&h->seq);
    kvs_sampler_free(&h->sampler);
    kvs_stop_free(&h->stop);
    kvs_engine_out_free(&h->out);
    free(h);
}


/*
 * Publishes output: token (or -1 for none) with its logprobs, text, and
 * when finish is set the end.  Allocation failure here cannot be handed
 * back to anyone but the consumer, so it becomes the request's error.
 */
void
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
    o->kv_block_us = h->kv_block_us;

    if (!h->cache_told && h->seq.looked_up) {
        h->cache_told = 1;
        o->has_cache = 1;
        o->n_cached = h->seq.n_cached;
        o->n_cache_created = h->n_cache_created;
        o->n_cached_tier = h->seq.n_cached_tier;
        o->n_cached_host = h->seq.n_cached_host;
        o->miss = h->seq.miss;
        o->miss_pos = h->seq.miss_pos;
    }

    if (finish != KVS_FINISH_NONE && o->finish == KVS_FINISH_NONE) {
        o->finish = finish;

        if (error != NULL) {
            snprintf(o->error, sizeof(o->error), "%s", error);
        }

        o->retry_after = finish == KVS_FINISH_ERROR ? h->retry_after : 0;
        o->client_fault = finish == KVS_FINISH_ERROR ? h->client_fault : 0;
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


void
kvs_engine_unref(kvs_engine_seq_t *h)
{
    h->refs--;
    if (h->refs == 0) {
        kvs_engine_seq_free(h);
    }
}
