/*
 * kvs_engine_seq: a sequence's tokens, on the engine thread: sampling on
 * the host from its logits row (with the grammar's mask), what every new
 * token does (stop tokens, the sampler's counts, text and stop strings),
 * the choices of an n > 1 request forking from their leader's first
 * logits, and the end of a sequence.  The step loop that calls them is
 * kvs_engine.c.
 *
 * Invariants: a sequence ends once (h->ended), and ending it returns its
 * blocks, publishes its end and drops the engine's hold; as it ends, a
 * choice still waiting for its leader leaves the leader's list and a
 * leader that has no first token yet lets its followers go (to compute
 * the prompt themselves), so none waits on a sequence that is gone.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kvs_kv_pool.h"
#include "kvs_engine_impl.h"


static void kvs_engine_unfollow(kvs_engine_t *e, kvs_engine_seq_t *h);



/*
 * Choice 0 of an n > 1 request has its prompt cached and logits for its
 * first token: the other choices take its blocks by reference and sample
 * their first tokens from the same logits, each with its own sampler.
 */
static void
kvs_engine_fork(kvs_engine_t *e, kvs_engine_seq_t *h, const float *logits)
{
    size_t             n_vocab;
    kvs_engine_seq_t  *f, *next;

    n_vocab = e->be->n_vocab;
    memcpy(e->fork_logits, logits, n_vocab * sizeof(float));

    f = h->followers;
    h->followers = NULL;

    for ( ; f != NULL; f = next) {
        next = f->next_follower;
        f->leader = NULL;
        f->next_follower = NULL;
        f->n_cache_created = h->n_cache_created;

        (void) kvs_sched_fork(&e->sched, &h->seq, &f->seq);

        /* sampling modifies its row in place */
        memcpy(e->row, e->fork_logits, n_vocab * sizeof(float));
        kvs_engine_sample(e, f, e->row);
    }
}


/* Samples h's next token from its logits row and hands it on. */
void
kvs_engine_sample(kvs_engine_t *e, kvs_engine_seq_t *h, float *logits)
{
    int        rc;
    int32_t    tok;
    uint32_t   m;
    kvs_err_t  err;

    kvs_err_clear(&err);

    if (h->followers != NULL) {
        kvs_engine_fork(e, h, logits);
    }

    /* a constrained row is sampled over its allowed ids only: the same
     * token, at the cost of the few a grammar leaves, not the vocabulary */
    if (h->gram != NULL) {
        rc = kvs_engine_gram_mask(e, h, logits, &m, &err);
        if (rc == KVS_OK) {
            rc = kvs_sample_sparse(&h->sampler, logits, e->gids, m, &tok,
                                   &err);
        }

    } else {
        rc = kvs_sample(&h->sampler, logits, &tok, &err);
    }

    if (rc != KVS_OK) {
        kvs_engine_end(e, h, KVS_FINISH_ERROR, err.msg, 0);
        return;
    }

    if (h->gram != NULL) {
        tok = kvs_engine_gram_fix(e, logits, tok);
    }

    kvs_engine_token(e, h, tok);
}


/* h's next token, sampled on the host or the device: stop tokens, the
 * sampler's counts, the sequence, text and stop strings, the end. */
void
kvs_engine_token(kvs_engine_t *e, kvs_engine_seq_t *h, int32_t tok)
{
    int                 gend, rc;
    unsigned            dflags;
    uint32_t            i;
    kvs_err_t           err;
    const kvs_vocab_t  *v;

    kvs_err_clear(&err);
    v = e->conf.vocab;
    gend = 0;

    if (tok < 0 || (uint32_t) tok >= e->be->n_vocab) {
        kvs_err_set(&err, KVS_EIO, "backend: sampled token id %d is out "
                    "of range (vocabulary of %" PRIu32 ")", (int) tok,
                    e->be->n_vocab);
        kvs_engine_end(e, h, KVS_FINISH_ERROR, err.msg, 0);
        return;
    }

    /* constrained: an END token only came because the grammar is
     * complete, and ends the output even under ignore_eos */
    if (h->gram != NULL) {
        if (kvs_engine_gram_accept(e, h, tok, &gend, &err) != KVS_OK) {
            kvs_engine_end(e, h, KVS_FINISH_ERROR, err.msg, 0);
            return;
        }

        if (gend == 1) {
            goto stop;
        }

    } else if (!h->ignore_eos && kvs_vocab_ends_text(v, tok)) {
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

    /* a tool-call marker that is a control token (Mistral's [TOOL_CALLS])
     * is text to the grammar, so its text is written where a grammar
     * allowed it (kvs_gram_vocab_marker) */
    dflags = h->detok.flags;
    if (h->gram != NULL && e->gv != NULL
        && (uint32_t) tok < e->gv->n_tokens && (uint32_t) tok < v->n_tokens
        && e->gv->kind[tok] == KVS_GRAM_TOK_TEXT
        && v->tokens[tok].type == KVS_TOKT_CONTROL)
    {
        h->detok.flags |= KVS_DETOK_SPECIAL;
    }

    rc = kvs_detok_push(&h->detok, tok, &e->piece, &err);
    h->detok.flags = dflags;

    if (rc != KVS_OK
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

    } else if (gend == 2) {
        /* the grammar accepts nothing more: the output is complete now,
         * not after a step spent on an end token */
        kvs_engine_end(e, h, KVS_FINISH_STOP, NULL, 1);

    } else if (kvs_seq_generated(&h->seq) == h->max_tokens) {
        /* the last token completes a block: compute its K/V in one more
         * step, so that the next turn, whose prompt holds this reply,
         * finds that block cached too */
        if (h->seq.ns != NULL
            && h->seq.n_tokens % e->conf.block_tokens == 0)
        {
            h->pending = KVS_FINISH_LENGTH;
            h->seq.tail_only = 1;
            return;
        }

        kvs_engine_end(e, h, KVS_FINISH_LENGTH, NULL, 1);
    }

    return;

stop:

    /* an end or stop token: not shown, but what was held back is */
    kvs_engine_end(e, h, KVS_FINISH_STOP, NULL, 1);
}


/* Ends h's sequence once: blocks back to the pool, held-back text
 * flushed when flush is set, the end published, the engine's hold
 * dropped. */
void
kvs_engine_end(kvs_engine_t *e, kvs_engine_seq_t *h, kvs_finish_t finish,
    const char *error, int flush)
{
    kvs_err_t  err;

    if (h->ended) {
        return;
    }

    /* the output was complete before the tail step: whatever ends it
     * now (the step, a cancel, a failure) it ends as it would have */
    if (h->pending != KVS_FINISH_NONE) {
        finish = h->pending;
        error = NULL;
        flush = 1;
    }

    kvs_engine_tier_release(e, h);     /* its load stopped, given back */
    kvs_engine_lora_release(e, h);     /* before unfollow: it may park
                                          followers */
    kvs_engine_unfollow(e, h);
    kvs_engine_kv_end(h);
    kvs_sched_remove(&e->sched, &h->seq);

    if (h->seq.ns != NULL) {
        kvs_radix_ns_put(e->radix, h->seq.ns);
        h->seq.ns = NULL;
    }

    kvs_sched_untenant(&e->sched, &h->seq);
    kvs_sched_ungroup(&h->seq);

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
    kvs_engine_publish(e);
    h->ended = 1;
    h->refs--;
    if (h->refs == 0) {
        kvs_engine_seq_free(h);
    }
    pthread_mutex_unlock(&e->lock);
}


/*
 * Before h ends: a choice still waiting for its leader leaves the
 * leader's list; a leader ending before its first token (cancelled,
 * failed) lets its followers go, to compute the prompt themselves.
 */
static void
kvs_engine_unfollow(kvs_engine_t *e, kvs_engine_seq_t *h)
{
    kvs_engine_seq_t  **pp, *f, *next;

    if (h->leader != NULL) {
        for (pp = &h->leader->followers; *pp != NULL;
             pp = &(*pp)->next_follower)
        {
            if (*pp == h) {
                *pp = h->next_follower;
                break;
            }
        }

        h->leader = NULL;
        h->next_follower = NULL;
    }

    for (f = h->followers; f != NULL; f = next) {
        next = f->next_follower;
        f->leader = NULL;
        f->next_follower = NULL;
        kvs_sched_add(&e->sched, &f->seq);
    }

    h->followers = NULL;
}
