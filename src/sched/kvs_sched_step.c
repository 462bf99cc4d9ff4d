/*
 * kvs_sched_step: one step's batch (kvs_sched_plan) and its commit: the
 * running sequences' next positions, oldest first, then admissions from
 * the waiting queue, then (with pools) the long prefills' turn; each
 * sequence's positions, the copy of a shared block it writes into and
 * its logits row go into the plan.
 *
 * Invariants:
 *   - plan visits running sequences oldest first and preempts from the
 *     newest, so a victim is never one already in the step; the caps'
 *     preemptions (kvs_sched_rebalance) happen before the visit;
 *   - a sequence's positions enter the plan only once their blocks are
 *     reserved: a take that fails leaves the plan as it was;
 *   - with pools on, a long sequence is admitted with its whole need
 *     and, short of a block, waits a step rather than being preempted;
 *     a pool's used is its running sequences' blocks, recounted at each
 *     plan and kept up to date by admissions within it;
 *   - commit adds each planned sequence's n_step to its n_computed once,
 *     and charges its tenant for them.
 */

#include <string.h>

#include "kvs_sched_impl.h"


static int kvs_sched_run(kvs_sched_t *s, kvs_sched_plan_t *plan,
    kvs_seq_t *seq, uint32_t most, uint32_t *budget, kvs_seq_t **next);
static int kvs_sched_admit(kvs_sched_t *s, kvs_sched_plan_t *plan,
    kvs_seq_t *seq, uint32_t most, uint32_t hold, uint32_t *budget);
static int kvs_sched_take(kvs_sched_t *s, kvs_sched_plan_t *plan,
    kvs_seq_t *seq, uint32_t take);


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
    int       fits, lng, first;
    uint32_t  want, take, whole;

    /* a lower tier may hold what was evicted while it waited: then it
     * loads that first, out of the queue, and the next one is picked */
    if (s->lower != NULL && seq->n_computed == 0 && seq->ns != NULL
        && s->lower(s->lower_arg, seq))
    {
        return KVS_OK;
    }

    /* what the prefix cache has of it comes first (a waiting sequence
     * holds nothing, so this is undone if it must wait, its first
     * lookup's answer too: the admission's lookup is the one reported) */
    first = !seq->looked_up;
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
        if (first) {
            kvs_sched_unlook(s, seq);
        }

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
    kvs_seq_t  *seq;

    for (seq = plan->seqs; seq != NULL; seq = seq->step_next) {
        kvs_fair_served(&s->fair, seq->tenant, seq->n_step,
                        seq->step_decode);
        seq->n_computed += seq->n_step;
        seq->n_step = 0;
        kvs_sched_computed(s, seq);
    }
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
uint32_t
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
