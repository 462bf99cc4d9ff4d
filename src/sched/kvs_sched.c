/*
 * kvs_sched: continuous batching (see kvs_sched.h): the scheduler's
 * state and its sequences' lives: configuration, sequences, tenants and
 * request groups, the two queues, arrival, removal, forks and
 * preemption.  The rest is in files of its own (kvs_sched_impl.h): the
 * step's batch (kvs_sched_step.c), fair admission and the KV caps
 * (kvs_sched_caps.c), a sequence's blocks against the prefix tree
 * (kvs_sched_cache.c) and the KV pools (kvs_sched_pool.c).
 *
 * Invariants (the scheduler's as a whole; each file adds its own):
 *   - both queues are sorted by order (oldest at head), so "newest
 *     running" is the running tail and a preempted sequence goes back
 *     ahead of everything that arrived after it;
 *   - a waiting sequence holds no blocks (n_computed == 0, empty table);
 *   - a running sequence's table covers at least n_computed positions,
 *     and n_computed < n_tokens: one token (at least) is always left to
 *     compute, whose logits give the next token (a tail_only sequence
 *     reaches n_tokens in its last step, and its caller ends it then);
 *   - with pools on, a running long sequence's table covers its whole
 *     need (cap - 1 positions) from its admission (or fork) on, so it
 *     never asks the pool for a block; no preemption chooses it as a
 *     victim.
 */

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_sched_impl.h"


int
kvs_sched_init(kvs_sched_t *s, const kvs_sched_conf_t *conf,
    kvs_kv_pool_t *pool, kvs_err_t *err)
{
    memset(s, 0, sizeof(kvs_sched_t));

    if (conf->max_batch_tokens == 0) {
        return kvs_err_set(err, KVS_EINVAL, "max_batch_tokens must be at "
                           "least 1");
    }

    if (conf->max_running == 0) {
        return kvs_err_set(err, KVS_EINVAL, "max_running must be at "
                           "least 1");
    }

    if (conf->n_ctx == 0) {
        return kvs_err_set(err, KVS_EINVAL, "n_ctx must be at least 1");
    }

    if (conf->req_kv_max_milli > 1000) {
        return kvs_err_set(err, KVS_EINVAL, "a request's KV cap of %u "
                           "thousandths of the cache; at most 1000",
                           conf->req_kv_max_milli);
    }

    if (conf->pool_min_tokens != 0
        && (conf->pool_share_milli == 0 || conf->pool_share_milli > 1000))
    {
        return kvs_err_set(err, KVS_EINVAL, "the long pool's share of %u "
                           "thousandths of the cache; from 1 to 1000",
                           conf->pool_share_milli);
    }

    if (conf->pool_min_tokens != 0 && conf->pool_max_prefill == 0) {
        return kvs_err_set(err, KVS_EINVAL, "the long pool's max_prefill "
                           "must be at least 1");
    }

    if (kvs_fair_init(&s->fair, conf->fair_w_prefill, conf->fair_w_decode,
                      conf->fair_kv_max_milli, err) != KVS_OK)
    {
        return err != NULL ? err->code : KVS_EINVAL;
    }

    s->toks = malloc(conf->max_batch_tokens * sizeof(kvs_batch_tok_t));
    s->logits_seq = malloc(conf->max_running * sizeof(kvs_seq_t *));
    s->cow = malloc(2 * (size_t) conf->max_running * sizeof(uint32_t));

    if (s->toks == NULL || s->logits_seq == NULL || s->cow == NULL) {
        free(s->toks);
        free(s->logits_seq);
        free(s->cow);
        memset(s, 0, sizeof(kvs_sched_t));
        return kvs_err_set(err, KVS_ENOMEM, "scheduler: out of memory");
    }

    s->conf = *conf;
    s->pool = pool;

    /* a window's sequences hold a bounded span, not their whole need */
    s->pools_on = conf->pool_min_tokens != 0 && conf->window == 0;
    s->pools[KVS_POOL_SHORT].max_blocks = pool->n_blocks;
    s->pools[KVS_POOL_LONG].max_blocks = s->pools_on
        ? (uint32_t) ((uint64_t) pool->n_blocks * conf->pool_share_milli
                      / 1000)
        : 0;

    return KVS_OK;
}


int
kvs_sched_set_cache(kvs_sched_t *s, kvs_radix_t *radix, kvs_err_t *err)
{
    size_t  n;

    n = s->conf.n_ctx / s->pool->block_tokens + 1;

    s->match = malloc(n * sizeof(uint32_t));
    if (s->match == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "scheduler: out of memory");
    }

    s->radix = radix;

    return KVS_OK;
}


void
kvs_sched_free(kvs_sched_t *s)
{
    while (s->running.head != NULL) {
        kvs_sched_remove(s, s->running.head);
    }

    while (s->waiting.head != NULL) {
        kvs_sched_remove(s, s->waiting.head);
    }

    free(s->toks);
    free(s->logits_seq);
    free(s->cow);
    free(s->match);
    kvs_fair_free(&s->fair);
    memset(s, 0, sizeof(kvs_sched_t));
}


int
kvs_sched_tenant(kvs_sched_t *s, kvs_seq_t *seq, const char *key,
    size_t key_len, kvs_err_t *err)
{
    return kvs_fair_join(&s->fair, key, key_len, &seq->tenant, err);
}


void
kvs_sched_untenant(kvs_sched_t *s, kvs_seq_t *seq)
{
    kvs_fair_leave(&s->fair, seq->tenant);
    seq->tenant = NULL;
}


int
kvs_sched_group_new(kvs_seq_group_t **g, kvs_err_t *err)
{
    *g = calloc(1, sizeof(kvs_seq_group_t));
    if (*g == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "scheduler: out of memory");
    }

    return KVS_OK;
}


void
kvs_sched_group(kvs_seq_t *seq, kvs_seq_group_t *g)
{
    seq->group = g;
    g->refs++;
}


void
kvs_sched_ungroup(kvs_seq_t *seq)
{
    kvs_seq_group_t  *g;

    g = seq->group;
    seq->group = NULL;

    if (g != NULL && --g->refs == 0) {
        free(g);
    }
}


int
kvs_seq_init(kvs_seq_t *seq, const kvs_sched_t *s, const int32_t *prompt,
    uint32_t n_prompt, uint32_t max_tokens, kvs_err_t *err)
{
    uint64_t  total, cached, blocks, span;

    memset(seq, 0, sizeof(kvs_seq_t));

    if (n_prompt == 0) {
        return kvs_err_set(err, KVS_EINVAL, "the prompt is empty");
    }

    if (max_tokens == 0) {
        return kvs_err_set(err, KVS_EINVAL, "max_tokens must be at least "
                           "1");
    }

    total = (uint64_t) n_prompt + max_tokens;

    if (total > s->conf.n_ctx) {
        return kvs_err_set(err, KVS_ERANGE, "the prompt (%" PRIu32
                           " tokens) plus max_tokens (%" PRIu32 ") is %"
                           PRIu64 " tokens, more than the context of %"
                           PRIu32, n_prompt, max_tokens, total,
                           s->conf.n_ctx);
    }

    /* the last generated token is sampled, never computed */
    cached = total - 1;
    blocks = (cached + s->pool->block_tokens - 1) / s->pool->block_tokens;

    /* with a window, at most the window's positions before a step and
     * the step's own are held at once: their span, plus one block for
     * a span that straddles one more */
    if (s->conf.window != 0) {
        span = s->conf.chunked_prefill && cached > s->conf.max_batch_tokens
               ? s->conf.max_batch_tokens : cached;
        span += s->conf.window - 1;
        span = (span + s->pool->block_tokens - 1) / s->pool->block_tokens
               + 1;
        blocks = span < blocks ? span : blocks;
    }

    if (blocks > s->pool->n_blocks) {
        return kvs_err_set(err, KVS_ERANGE, "the prompt (%" PRIu32
                           " tokens) plus max_tokens (%" PRIu32 ") needs %"
                           PRIu64 " KV blocks; the whole cache has %"
                           PRIu32, n_prompt, max_tokens, blocks,
                           s->pool->n_blocks);
    }

    if (!s->conf.chunked_prefill && cached > s->conf.max_batch_tokens) {
        return kvs_err_set(err, KVS_ERANGE, "the prompt (%" PRIu32
                           " tokens) plus max_tokens (%" PRIu32 ") exceeds "
                           "the step budget of %" PRIu32 " tokens, which "
                           "chunked prefill being off requires",
                           n_prompt, max_tokens,
                           s->conf.max_batch_tokens);
    }

    if (s->pools_on && total >= s->conf.pool_min_tokens
        && blocks > s->pools[KVS_POOL_LONG].max_blocks)
    {
        return kvs_err_set(err, KVS_ERANGE, "the prompt (%" PRIu32
                           " tokens) plus max_tokens (%" PRIu32 ") needs %"
                           PRIu64 " KV blocks; the long pool may hold %"
                           PRIu32 " (share %u/1000 of %" PRIu32 ")",
                           n_prompt, max_tokens, blocks,
                           s->pools[KVS_POOL_LONG].max_blocks,
                           s->conf.pool_share_milli, s->pool->n_blocks);
    }

    seq->tokens = malloc(total * sizeof(int32_t));
    if (seq->tokens == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "sequence: out of memory");
    }

    memcpy(seq->tokens, prompt, n_prompt * sizeof(int32_t));
    seq->cap = (uint32_t) total;
    seq->n_prompt = n_prompt;
    seq->n_tokens = n_prompt;
    seq->need = (uint32_t) blocks;
    seq->pool = s->pools_on && total >= s->conf.pool_min_tokens
                ? KVS_POOL_LONG : KVS_POOL_SHORT;

    return KVS_OK;
}


void
kvs_seq_free(kvs_seq_t *seq)
{
    free(seq->tokens);
    seq->tokens = NULL;
    seq->cap = 0;
}


void
kvs_sched_add(kvs_sched_t *s, kvs_seq_t *seq)
{
    seq->order = s->next_order++;
    seq->state = KVS_SEQ_WAITING;
    seq->queued_ms = s->now;
    kvs_seq_queue_insert(&s->waiting, seq);
}


void
kvs_sched_set_lower(kvs_sched_t *s, kvs_sched_lower_pt fn, void *arg)
{
    s->lower = fn;
    s->lower_arg = fn != NULL ? arg : NULL;
}


void
kvs_sched_return(kvs_sched_t *s, kvs_seq_t *seq)
{
    seq->state = KVS_SEQ_WAITING;
    kvs_seq_queue_insert(&s->waiting, seq);
}


void
kvs_sched_remove(kvs_sched_t *s, kvs_seq_t *seq)
{
    switch (seq->state) {
    case KVS_SEQ_WAITING:
        kvs_seq_queue_unlink(&s->waiting, seq);
        break;
    case KVS_SEQ_RUNNING:
        kvs_seq_queue_unlink(&s->running, seq);
        s->n_freed += kvs_kv_table_held(&seq->table);
        break;
    default:
        return;
    }

    kvs_sched_let_go(s, seq);
    seq->state = KVS_SEQ_NEW;
}


int
kvs_sched_fork(kvs_sched_t *s, kvs_seq_t *parent, kvs_seq_t *child)
{
    child->order = s->next_order++;

    if (s->running.n < s->conf.max_running
        && parent->n_computed <= child->n_tokens
        && kvs_kv_table_fork(&child->table, &parent->table, s->pool, NULL)
           == KVS_OK)
    {
        /* a long choice holds its whole need, as its parent does */
        if (kvs_sched_long(s, child)
            && kvs_kv_table_reserve(&child->table, s->pool, child->cap - 1,
                                    NULL) != KVS_OK)
        {
            (void) kvs_kv_table_release(&child->table, s->pool, NULL);
            goto queue;
        }

        child->admitted = 1;
        child->n_computed = parent->n_computed;
        child->state = KVS_SEQ_RUNNING;

        /* the shared prefix stays cached while any choice runs (a
         * windowed parent holds no lock: its holes are the child's) */
        if (child->ns != NULL && parent->cache_node != NULL) {
            kvs_radix_lock(s->radix, parent->cache_node);
            child->cache_node = parent->cache_node;
        }

        if (child->ns != NULL) {
            child->prompt_cached = parent->prompt_cached;
        }

        if (!child->looked_up) {
            child->looked_up = 1;
            child->n_cached = parent->n_cached;
            child->n_cached_tier = parent->n_cached_tier;
            child->n_cached_host = parent->n_cached_host;
            child->miss = parent->miss;
            child->miss_pos = parent->miss_pos;
        }

        kvs_seq_queue_insert(&s->running, child);
        return 1;
    }

queue:

    child->state = KVS_SEQ_WAITING;
    child->queued_ms = s->now;
    kvs_seq_queue_insert(&s->waiting, child);

    return 0;
}


void
kvs_sched_preempt(kvs_sched_t *s, kvs_seq_t *seq)
{
    kvs_seq_queue_unlink(&s->running, seq);
    kvs_sched_let_go(s, seq);

    seq->n_step = 0;
    seq->n_preempted++;
    seq->state = KVS_SEQ_WAITING;
    kvs_seq_queue_insert(&s->waiting, seq);

    s->n_preemptions++;
}


/* Inserts by order, scanning from the tail: arrivals and most returns
 * land there, so this is O(1) but for preempted sequences. */
void
kvs_seq_queue_insert(kvs_seq_queue_t *q, kvs_seq_t *seq)
{
    kvs_seq_t  *at;

    at = q->tail;

    while (at != NULL && at->order > seq->order) {
        at = at->prev;
    }

    /* seq goes after at (or first, when at is NULL) */

    seq->prev = at;
    seq->next = at != NULL ? at->next : q->head;

    if (seq->next != NULL) {
        seq->next->prev = seq;
    } else {
        q->tail = seq;
    }

    if (at != NULL) {
        at->next = seq;
    } else {
        q->head = seq;
    }

    q->n++;
}


void
kvs_seq_queue_unlink(kvs_seq_queue_t *q, kvs_seq_t *seq)
{
    if (seq->prev != NULL) {
        seq->prev->next = seq->next;
    } else {
        q->head = seq->next;
    }

    if (seq->next != NULL) {
        seq->next->prev = seq->prev;
    } else {
        q->tail = seq->prev;
    }

    seq->prev = NULL;
    seq->next = NULL;
    q->n--;
}
