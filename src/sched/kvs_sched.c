/*
 * kvs_sched: continuous batching: queues, step planning, preemption (see
 * kvs_sched.h).
 *
 * Invariants:
 *   - both queues are sorted by order (oldest at head), so "newest
 *     running" is the running tail and a preempted sequence goes back
 *     ahead of everything that arrived after it;
 *   - a waiting sequence holds no blocks (n_computed == 0, empty table);
 *   - a running sequence's table covers at least n_computed positions,
 *     and n_computed < n_tokens: one token (at least) is always left to
 *     compute, whose logits give the next token (a tail_only sequence
 *     reaches n_tokens in its last step, and its caller ends it then);
 *   - plan visits running sequences oldest first and preempts from the
 *     newest, so a victim is never one already in the step; the caps'
 *     preemptions (kvs_sched_rebalance) happen before the visit;
 *   - a tenant's and a group's kv_blocks are their running sequences'
 *     blocks: recounted at each plan, kept up to date by admissions and
 *     the caps' preemptions within it;
 *   - with pools on, a running long sequence's table covers its whole
 *     need (cap - 1 positions) from its admission on, so it never asks
 *     the pool for a block; no preemption chooses it as a victim;
 *   - a pool's used is its running sequences' blocks, recounted at each
 *     plan and kept up to date by admissions within it;
 *   - with a window, a running sequence's table has no block wholly
 *     before n_computed + 1 - window once a commit or a lookup is done
 *     (kvs_sched_trim), and, with a cache, the tree held every whole
 *     block it gave back at the time it gave it (inserted first); such a
 *     sequence has no cache_node (no lock on the tree).
 */

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_sched.h"
#include "kvs_sched_impl.h"


static void kvs_seq_queue_insert(kvs_seq_queue_t *q, kvs_seq_t *seq);
static void kvs_sched_preempt(kvs_sched_t *s, kvs_seq_t *seq);
static int kvs_sched_take(kvs_sched_t *s, kvs_sched_plan_t *plan,
    kvs_seq_t *seq, uint32_t take);
static uint32_t kvs_sched_blocks_for(kvs_sched_t *s, kvs_seq_t *seq,
    uint32_t take);
static void kvs_sched_lookup(kvs_sched_t *s, kvs_seq_t *seq);
static void kvs_sched_let_go(kvs_sched_t *s, kvs_seq_t *seq);
static int kvs_sched_room(kvs_sched_t *s, uint32_t need);
static int kvs_sched_run(kvs_sched_t *s, kvs_sched_plan_t *plan,
    kvs_seq_t *seq, uint32_t most, uint32_t *budget, kvs_seq_t **next);
static int kvs_sched_admit(kvs_sched_t *s, kvs_sched_plan_t *plan,
    kvs_seq_t *seq, uint32_t most, uint32_t hold, uint32_t *budget);
static int kvs_sched_group_capped(kvs_sched_t *s, kvs_seq_group_t *g);
static kvs_seq_t *kvs_sched_rebalance(kvs_sched_t *s);
static int kvs_sched_over(kvs_sched_t *s, kvs_seq_t *seq, int tenants,
    int groups);
static void kvs_sched_held(kvs_seq_t *seq, int32_t sign);
static void kvs_sched_trim(kvs_sched_t *s, kvs_seq_t *seq);


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


void
kvs_sched_plan(kvs_sched_t *s, kvs_sched_plan_t *plan)
{
    uint32_t    budget, chunk, hold;
    kvs_seq_t  *seq, *next, *first;

    memset(plan, 0, sizeof(kvs_sched_plan_t));
    plan->batch.toks = s->toks;
    plan->logits_seq = s->logits_seq;
    plan->cow_src = s->cow;
    plan->cow_dst = s->cow + s->conf.max_running;

    budget = s->conf.max_batch_tokens;
    kvs_sched_kv_count(s);
    kvs_sched_rate(s);
    first = kvs_sched_rebalance(s);

    /* the running, oldest first; with pools, long prefills come last */
    for (seq = s->running.head; seq != NULL && budget > 0; seq = next) {
        if (kvs_sched_long_prefill(s, seq)) {
            next = seq->next;
            continue;
        }

        if (kvs_sched_run(s, plan, seq, budget, &budget, &next) != KVS_OK) {
            break;
        }
    }

    hold = 0;

    while (budget > 0 && s->running.n < s->conf.max_running
           && s->waiting.head != NULL)
    {
        /* the one the caps made room for goes first: those they
         * preempted would tie with it, and are older */
        if (s->pools_on) {
            seq = kvs_sched_pool_pick(s, first, &hold);
            if (seq == NULL) {
                break;
            }

        } else {
            seq = first != NULL && first->state == KVS_SEQ_WAITING
                  ? first : kvs_sched_pick(s, 0);
        }

        first = NULL;

        if (kvs_sched_admit(s, plan, seq, budget, hold, &budget)
            != KVS_OK)
        {
            break;
        }
    }

    if (!s->pools_on) {
        return;
    }

    /*
     * Long prefills: in a step that prefills no short prompt, or else
     * every other step (never starved); pool_chunk tokens in all, the
     * running ones oldest first, then the oldest waiting one if the
     * long pool may take it.
     */
    if (plan->n_prefill > 0 && !s->long_skipped) {
        s->long_skipped = kvs_sched_long_pending(s);
        return;
    }

    s->long_skipped = 0;
    chunk = s->conf.pool_chunk != 0 ? s->conf.pool_chunk : budget;

    for (seq = s->running.head;
         seq != NULL && budget > 0 && chunk > 0;
         seq = next)
    {
        if (!kvs_sched_long_prefill(s, seq)) {
            next = seq->next;
            continue;
        }

        if (kvs_sched_run(s, plan, seq, chunk < budget ? chunk : budget,
                          &budget, &next) != KVS_OK)
        {
            break;
        }

        chunk -= seq->n_step;
    }

    if (budget > 0 && chunk > 0 && s->running.n < s->conf.max_running) {
        seq = kvs_sched_long_next(s);

        if (seq != NULL && kvs_sched_avail(s) >= seq->need) {
            (void) kvs_sched_admit(s, plan, seq,
                                   chunk < budget ? chunk : budget, 0,
                                   &budget);
        }
    }
}


/*
 * One running sequence's part of the step: at most most positions
 * (and what the budget has left), after making room from the newest
 * running (never a long one); *budget drops by what it takes, *next is
 * where the visit goes on.  KVS_KV_EFULL: the visit stops (a short seq
 * was preempted for lack of blocks).
 */
static int
kvs_sched_run(kvs_sched_t *s, kvs_sched_plan_t *plan, kvs_seq_t *seq,
    uint32_t most, uint32_t *budget, kvs_seq_t **next)
{
    uint32_t    want, take;
    kvs_seq_t  *victim;

    want = seq->n_tokens - seq->n_computed;
    take = want < most ? want : most;
    take = take < *budget ? take : *budget;

    /* make room from the newest; when seq is the newest, it goes */

    while (!kvs_sched_room(s, kvs_sched_blocks_for(s, seq, take))) {
        victim = kvs_sched_victim(s, seq);
        if (victim == NULL) {
            break;
        }

        kvs_sched_preempt(s, victim);
    }

    /* seq may have been the tail all along, or next just went */
    *next = seq->next;

    if (kvs_sched_take(s, plan, seq, take) != KVS_OK) {
        if (kvs_sched_long(s, seq)) {
            /* never preempted: it waits for a block a step */
            return KVS_OK;
        }

        kvs_sched_preempt(s, seq);
        return KVS_KV_EFULL;
    }

    *budget -= take;

    return KVS_OK;
}


/*
 * Admits waiting seq with at most most positions this step, if what it
 * needs fits: with pools its whole need, a short one's leaving hold
 * blocks free (the waiting long one's); else its first chunk's.  A long
 * one takes its whole need now.  KVS_KV_EFULL: it stays waiting and
 * admission stops.
 */
static int
kvs_sched_admit(kvs_sched_t *s, kvs_sched_plan_t *plan, kvs_seq_t *seq,
    uint32_t most, uint32_t hold, uint32_t *budget)
{
    int       fits, lng;
    uint32_t  want, take, whole;

    /* what the prefix cache has of it comes first (a waiting sequence
     * holds nothing, so this is undone if it must wait) */
    kvs_sched_lookup(s, seq);

    want = seq->n_tokens - seq->n_computed;
    take = want < most ? want : most;
    take = take < *budget ? take : *budget;
    lng = kvs_sched_long(s, seq);

    if (!s->conf.chunked_prefill && want > *budget) {
        fits = 0;

    } else if (s->pools_on) {
        whole = kvs_kv_table_blocks_needed(&seq->table, s->pool,
                                           seq->cap - 1);
        fits = take > 0 && kvs_sched_room(s, whole + (lng ? 0 : hold));

    } else {
        fits = kvs_sched_room(s, kvs_sched_blocks_for(s, seq, take));
    }

    if (!fits) {
        kvs_sched_let_go(s, seq);
        return KVS_KV_EFULL;
    }

    kvs_seq_queue_unlink(&s->waiting, seq);
    seq->state = KVS_SEQ_RUNNING;
    kvs_seq_queue_insert(&s->running, seq);

    /* a long one takes its whole need now (room was checked) */
    if ((lng && kvs_kv_table_reserve(&seq->table, s->pool, seq->cap - 1,
                                     NULL) != KVS_OK)
        || kvs_sched_take(s, plan, seq, take) != KVS_OK)
    {
        kvs_sched_preempt(s, seq);
        return KVS_KV_EFULL;
    }

    kvs_sched_admitted(s, seq);
    kvs_sched_held(seq, 1);
    s->pools[seq->pool].used += kvs_kv_table_held(&seq->table);

    *budget -= take;

    return KVS_OK;
}


void
kvs_sched_commit(kvs_sched_t *s, kvs_sched_plan_t *plan)
{
    int                err;
    kvs_seq_t         *seq;
    kvs_radix_node_t  *node;

    for (seq = plan->seqs; seq != NULL; seq = seq->step_next) {
        kvs_fair_served(&s->fair, seq->tenant, seq->n_step,
                        seq->step_decode);
        seq->n_computed += seq->n_step;
        seq->n_step = 0;

        /* a computed prompt is shared at once with those that follow
         * (other requests with its prefix); a failure only costs reuse.
         * A windowed sequence takes no lock (kvs_sched.h) */
        if (seq->ns != NULL && !seq->prompt_cached
            && seq->n_computed >= seq->n_prompt)
        {
            err = kvs_radix_insert(s->radix, seq->ns, seq->tokens,
                                   seq->n_computed, seq->table.blocks,
                                   s->conf.window == 0, s->now, &node,
                                   NULL);
            if (err == KVS_OK) {
                kvs_radix_unlock(s->radix, seq->cache_node);
                seq->cache_node = s->conf.window == 0 ? node : NULL;
                seq->prompt_cached = 1;
            }
        }

        kvs_sched_trim(s, seq);
    }
}


/*
 * With a window: gives back seq's blocks that hold only positions no
 * layer reads again (before the window of n_computed, the next position
 * to compute), the tree taking them first when there is one (what it
 * cannot take, out of memory, is simply not cached).
 */
static void
kvs_sched_trim(kvs_sched_t *s, kvs_seq_t *seq)
{
    uint32_t           first, end, dropped;
    kvs_radix_node_t  *node;

    if (s->conf.window == 0 || seq->n_computed + 1 <= s->conf.window) {
        return;
    }

    first = seq->n_computed + 1 - s->conf.window;
    end = first / s->pool->block_tokens;

    if (end <= seq->table.n_dropped) {
        return;
    }

    if (seq->ns != NULL) {
        (void) kvs_radix_insert(s->radix, seq->ns, seq->tokens,
                                end * s->pool->block_tokens,
                                seq->table.blocks, 0, s->now, &node, NULL);
    }

    kvs_kv_table_drop(&seq->table, s->pool, first, &dropped);
}


/* Adds positions [n_computed, n_computed + take) of seq to the step,
 * reserving their blocks first; KVS_KV_EFULL (or KVS_ENOMEM for the id
 * array) leaves the plan as it was. */
static int
kvs_sched_take(kvs_sched_t *s, kvs_sched_plan_t *plan, kvs_seq_t *seq,
    uint32_t take)
{
    uint32_t          i, pos, src, dst;
    kvs_batch_tok_t  *t;

    src = KVS_KV_NONE;
    dst = KVS_KV_NONE;

    /* the first position may fall in a block shared with another
     * sequence (n > 1 after a fork): write into a copy of our own */
    if (seq->n_computed % s->pool->block_tokens != 0
        && kvs_kv_table_unshare(&seq->table, s->pool, seq->n_computed,
                                &src, &dst, NULL) != KVS_OK)
    {
        return KVS_KV_EFULL;
    }

    if (kvs_kv_table_reserve(&seq->table, s->pool, seq->n_computed + take,
                             NULL)
        != KVS_OK)
    {
        /* the caller preempts seq, which drops dst unwritten */
        return KVS_KV_EFULL;
    }

    if (src != KVS_KV_NONE) {
        plan->cow_src[plan->n_cow] = src;
        plan->cow_dst[plan->n_cow] = dst;
        plan->n_cow++;
    }

    for (i = 0; i < take; i++) {
        pos = seq->n_computed + i;
        t = &s->toks[plan->batch.n++];
        t->token = seq->tokens[pos];
        t->pos = pos;
        t->table = &seq->table;
        t->want_logits = pos + 1 == seq->n_tokens && !seq->tail_only;

        if (t->want_logits) {
            plan->logits_seq[plan->n_logits++] = seq;
        }
    }

    seq->step_decode = take == 1 && seq->n_computed + 1 == seq->n_tokens
                       && seq->n_tokens > seq->n_prompt;

    if (seq->step_decode) {
        plan->n_decode++;
    } else {
        plan->n_prefill += take;
    }

    seq->n_step = take;
    seq->step_next = plan->seqs;
    plan->seqs = seq;

    return KVS_OK;
}


/* Free blocks seq needs for its next take positions: new blocks, plus
 * one when it must first copy a shared block it writes into. */
static uint32_t
kvs_sched_blocks_for(kvs_sched_t *s, kvs_seq_t *seq, uint32_t take)
{
    uint32_t  n, i;

    n = kvs_kv_table_blocks_needed(&seq->table, s->pool,
                                   seq->n_computed + take);
    i = seq->n_computed / s->pool->block_tokens;

    if (seq->n_computed % s->pool->block_tokens != 0
        && i < seq->table.n_blocks
        && kvs_kv_pool_refcount(s->pool, seq->table.blocks[i]) > 1)
    {
        n++;
    }

    return n;
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


static void
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


/*
 * Gives a sequence about to be admitted the longest cached prefix of its
 * tokens (all but the last, whose logits are wanted): the table shares
 * the cached blocks, the path is locked.  The first lookup of a sequence
 * is its answer for usage and metrics; a preempted one looks up again.
 */
static void
kvs_sched_lookup(kvs_sched_t *s, kvs_seq_t *seq)
{
    uint32_t           last;
    kvs_radix_match_t  m;

    if (seq->n_computed > 0) {
        return;
    }

    if (seq->ns == NULL) {
        if (!seq->looked_up) {
            seq->looked_up = 1;
            seq->miss = KVS_RADIX_MISS_OFF;
        }
        return;
    }

    kvs_radix_match(s->radix, seq->ns, seq->tokens, seq->n_tokens - 1,
                    s->match, 1, s->now, &m);

    if (m.n_tokens > 0
        && kvs_kv_table_share(&seq->table, s->pool, s->match, m.n_tokens,
                              NULL) != KVS_OK)
    {
        kvs_radix_unlock(s->radix, m.node);
        m.n_tokens = 0;
        m.node = NULL;
    }

    seq->n_computed = m.n_tokens;
    seq->cache_node = m.node;

    /* a windowed sequence locks nothing: the match's lock only split
     * and refreshed the path, its table keeps what its window reads */
    if (s->conf.window != 0) {
        kvs_radix_unlock(s->radix, seq->cache_node);
        seq->cache_node = NULL;
        kvs_sched_trim(s, seq);
    }

    if (!seq->looked_up) {
        seq->looked_up = 1;
        seq->n_cached = m.n_tokens < seq->n_prompt ? m.n_tokens
                                                   : seq->n_prompt - 1;
        /* what of it a lower tier loaded for this sequence */
        last = seq->n_cached < seq->tier_to ? seq->n_cached : seq->tier_to;
        seq->n_cached_tier = last > seq->tier_from ? last - seq->tier_from
                                                   : 0;
        seq->miss = m.miss;
        seq->miss_pos = m.miss_pos;
        s->n_query_tokens += seq->n_prompt;
        s->n_hit_tokens += seq->n_cached;
        s->n_tier_hit_tokens += seq->n_cached_tier;
    }
}


/*
 * A sequence gives its blocks back (end, preemption, or a lookup undone):
 * what it computed is cached first, so that the next turn of its
 * conversation, or its own recompute, finds it; then its lock goes.
 */
static void
kvs_sched_let_go(kvs_sched_t *s, kvs_seq_t *seq)
{
    kvs_radix_node_t  *node;

    if (seq->ns != NULL) {
        /* out of memory, the blocks are simply not kept */
        if (seq->n_computed >= s->pool->block_tokens) {
            (void) kvs_radix_insert(s->radix, seq->ns, seq->tokens,
                                    seq->n_computed, seq->table.blocks, 0,
                                    s->now, &node, NULL);
        }

        kvs_radix_unlock(s->radix, seq->cache_node);
        seq->cache_node = NULL;
    }

    /* the table was built on this pool, so release cannot fail */
    (void) kvs_kv_table_release(&seq->table, s->pool, NULL);
    seq->n_computed = 0;
}


/* 1 when the pool has need free blocks, after evicting cached ones
 * if that is enough to get there (preempting is the caller's). */
static int
kvs_sched_room(kvs_sched_t *s, uint32_t need)
{
    uint32_t  free;

    free = kvs_kv_pool_free_count(s->pool);

    if (need <= free) {
        return 1;
    }

    if (s->radix == NULL
        || (uint64_t) free + kvs_radix_evictable(s->radix) < need)
    {
        return 0;
    }

    (void) kvs_radix_evict(s->radix, need - free);

    return kvs_kv_pool_free_count(s->pool) >= need;
}


/*
 * The waiting sequence to admit next: the oldest of the tenant served
 * least.  While several tenants wait, one holding more than its KV cap
 * is passed over, and so is, while several groups wait, a group over
 * its own; unless all are.  only_short: among short ones alone (NULL
 * when none waits).
 */
kvs_seq_t *
kvs_sched_pick(kvs_sched_t *s, int only_short)
{
    int               others, other_groups;
    uint64_t          vtc, best_vtc, any_vtc;
    kvs_seq_t        *seq, *best, *any;
    kvs_tenant_t     *first;
    kvs_seq_group_t  *first_group;

    if (s->conf.no_fair) {
        for (seq = s->waiting.head; seq != NULL; seq = seq->next) {
            if (!only_short || seq->pool == KVS_POOL_SHORT) {
                return seq;
            }
        }

        return NULL;
    }

    first = s->waiting.head->tenant;
    first_group = s->waiting.head->group;
    others = 0;
    other_groups = 0;

    for (seq = s->waiting.head;
         seq != NULL && !(others && other_groups);
         seq = seq->next)
    {
        others |= seq->tenant != first;
        other_groups |= seq->group != first_group;
    }

    best = NULL;
    any = NULL;
    best_vtc = 0;
    any_vtc = 0;

    /* strictly smaller: the oldest wins a tie */
    for (seq = s->waiting.head; seq != NULL; seq = seq->next) {
        if (only_short && seq->pool != KVS_POOL_SHORT) {
            continue;
        }

        vtc = seq->tenant != NULL ? seq->tenant->vtc : 0;

        if (any == NULL || vtc < any_vtc) {
            any = seq;
            any_vtc = vtc;
        }

        if (others && kvs_fair_capped(&s->fair, seq->tenant, 0,
                                      s->pool->n_blocks))
        {
            continue;
        }

        if (other_groups && kvs_sched_group_capped(s, seq->group)) {
            continue;
        }

        if (best == NULL || vtc < best_vtc) {
            best = seq;
            best_vtc = vtc;
        }
    }

    return best != NULL ? best : any;
}


/*
 * The caps' preemption: when the sequences under both caps (running,
 * and the one pick would admit) need more blocks this step than the pool
 * has, the newest running sequences over a cap go back to waiting until
 * the pool has them, or none over a cap runs.  Those counted are an
 * estimate of the step (each takes what the budget left it, oldest
 * first, the waiting one without its cached prefix): it errs towards
 * preempting, and only sequences over their share.  Returns the waiting
 * sequence room was made for, to be admitted first; NULL when none was.
 */
static kvs_seq_t *
kvs_sched_rebalance(kvs_sched_t *s)
{
    int               tenants, groups;
    uint32_t          budget, take, need, protect, blocks;
    kvs_seq_t        *seq, *victim, *first, *wait;
    kvs_seq_queue_t  *q;

    if (s->conf.no_fair
        || ((s->fair.kv_max_milli == 0 || s->fair.kv_max_milli >= 1000)
            && (s->conf.req_kv_max_milli == 0
                || s->conf.req_kv_max_milli >= 1000)))
    {
        return NULL;
    }

    /* a cap shares the pool between several: with one tenant queued
     * its cap does not apply, nor with one group queued the group's */
    first = s->running.head != NULL ? s->running.head : s->waiting.head;
    tenants = 0;
    groups = 0;

    for (q = &s->running; q != NULL && first != NULL;
         q = q == &s->running ? &s->waiting : NULL)
    {
        for (seq = q->head; seq != NULL && !(tenants && groups);
             seq = seq->next)
        {
            tenants |= seq->tenant != first->tenant;
            groups |= seq->group != first->group;
        }
    }

    if (!tenants && !groups) {
        return NULL;
    }

    budget = s->conf.max_batch_tokens;
    need = 0;
    protect = 0;

    for (seq = s->running.head; seq != NULL && budget > 0;
         seq = seq->next)
    {
        take = seq->n_tokens - seq->n_computed;
        take = take < budget ? take : budget;
        blocks = kvs_sched_blocks_for(s, seq, take);
        need += blocks;
        budget -= take;

        if (!kvs_sched_over(s, seq, tenants, groups)) {
            protect += blocks;
        }
    }

    wait = NULL;

    if (budget > 0 && s->running.n < s->conf.max_running
        && s->waiting.head != NULL)
    {
        seq = kvs_sched_pick(s, 0);

        if (!kvs_sched_over(s, seq, tenants, groups)) {
            wait = seq;
            take = seq->n_tokens < budget ? seq->n_tokens : budget;
            blocks = (take + s->pool->block_tokens - 1)
                     / s->pool->block_tokens;
            need += blocks;
            protect += blocks;
        }
    }

    /* nobody under the caps is short of blocks: nothing to share */
    if (protect == 0 || kvs_sched_room(s, need)) {
        return NULL;
    }

    do {
        for (victim = s->running.tail; victim != NULL;
             victim = victim->prev)
        {
            if (kvs_sched_over(s, victim, tenants, groups)
                && !kvs_sched_long(s, victim))
            {
                break;
            }
        }

        if (victim == NULL) {
            return wait;
        }

        /* it will not take its blocks this step: the estimate drops */
        take = victim->n_tokens - victim->n_computed;
        take = take < s->conf.max_batch_tokens
               ? take : s->conf.max_batch_tokens;
        blocks = kvs_sched_blocks_for(s, victim, take);
        need = need > blocks ? need - blocks : 0;

        kvs_sched_held(victim, -1);
        kvs_sched_preempt(s, victim);

    } while (!kvs_sched_room(s, need));

    return wait;
}


/* 1 when seq's tenant (tenants: others are queued) or group (groups:
 * likewise) holds over its cap. */
static int
kvs_sched_over(kvs_sched_t *s, kvs_seq_t *seq, int tenants, int groups)
{
    return (tenants && kvs_fair_capped(&s->fair, seq->tenant, 0,
                                       s->pool->n_blocks))
           || (groups && kvs_sched_group_capped(s, seq->group));
}


/* 1 when g holds over the request cap of the pool's blocks. */
static int
kvs_sched_group_capped(kvs_sched_t *s, kvs_seq_group_t *g)
{
    if (g == NULL || s->conf.req_kv_max_milli == 0
        || s->conf.req_kv_max_milli >= 1000)
    {
        return 0;
    }

    return (uint64_t) g->kv_blocks * 1000
           > (uint64_t) s->pool->n_blocks * s->conf.req_kv_max_milli;
}


/* seq's blocks join (sign 1) or leave (-1) its tenant's and group's. */
static void
kvs_sched_held(kvs_seq_t *seq, int32_t sign)
{
    uint32_t  n;

    n = kvs_kv_table_held(&seq->table);

    if (seq->tenant != NULL) {
        seq->tenant->kv_blocks = sign > 0 ? seq->tenant->kv_blocks + n
                                          : seq->tenant->kv_blocks - n;
    }

    if (seq->group != NULL) {
        seq->group->kv_blocks = sign > 0 ? seq->group->kv_blocks + n
                                         : seq->group->kv_blocks - n;
    }
}


void
kvs_sched_kv_count(kvs_sched_t *s)
{
    size_t         b;
    kvs_seq_t     *seq;
    kvs_tenant_t  *t;

    for (b = 0; b < KVS_FAIR_BUCKETS; b++) {
        for (t = s->fair.buckets[b]; t != NULL; t = t->next) {
            t->kv_blocks = 0;
        }
    }

    for (b = 0; b < KVS_POOL_N; b++) {
        s->pools[b].used = 0;
        s->pools[b].queued = 0;
    }

    /* the groups of waiting sequences are read by pick too */
    for (seq = s->waiting.head; seq != NULL; seq = seq->next) {
        if (seq->group != NULL) {
            seq->group->kv_blocks = 0;
        }

        s->pools[seq->pool].queued++;
    }

    for (seq = s->running.head; seq != NULL; seq = seq->next) {
        if (seq->group != NULL) {
            seq->group->kv_blocks = 0;
        }
    }

    for (seq = s->running.head; seq != NULL; seq = seq->next) {
        kvs_sched_held(seq, 1);
        s->pools[seq->pool].used += kvs_kv_table_held(&seq->table);
    }
}


/* Inserts by order, scanning from the tail: arrivals and most returns
 * land there, so this is O(1) but for preempted sequences. */
static void
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
