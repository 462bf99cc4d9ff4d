/*
 * kvs_sched_pool: the scheduler's KV pools (kvs_sched.h, docs/pools.md):
 * which sequences are long, what a class may still take (free plus
 * evictable blocks, the long pool's share), the long prefills' turns,
 * the queue deadline, and the Retry-After from the measured rate at
 * which blocks come free.
 *
 * Invariants (with those of kvs_sched.c and kvs_sched_step.c): a
 * running long sequence holds its whole need and is never a preemption
 * victim; the oldest waiting long sequence's need is left free by short
 * admissions; an expired sequence leaves the waiting queue holding no
 * block.
 */

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_sched_impl.h"


/* 1 when seq is a long one with pools on: admitted with its whole need,
 * never preempted. */
int
kvs_sched_long(const kvs_sched_t *s, const kvs_seq_t *seq)
{
    return s->pools_on && seq->pool == KVS_POOL_LONG;
}


/* The newest running sequence newer than seq that may be preempted (not
 * a long one), or NULL. */
kvs_seq_t *
kvs_sched_victim(kvs_sched_t *s, kvs_seq_t *seq)
{
    kvs_seq_t  *v;

    for (v = s->running.tail; v != NULL && v != seq; v = v->prev) {
        if (!kvs_sched_long(s, v)) {
            return v;
        }
    }

    return NULL;
}


/* Free blocks and cached ones nobody uses. */
uint32_t
kvs_sched_avail(kvs_sched_t *s)
{
    uint64_t  n;

    n = kvs_kv_pool_free_count(s->pool);

    if (s->radix != NULL) {
        n += kvs_radix_evictable(s->radix);
    }

    return n < UINT32_MAX ? (uint32_t) n : UINT32_MAX;
}


/* 1 when seq is a running long one still prefilling (pools on). */
int
kvs_sched_long_prefill(const kvs_sched_t *s, const kvs_seq_t *seq)
{
    return kvs_sched_long(s, seq) && seq->n_computed < seq->n_prompt;
}


void
kvs_sched_long_room(const kvs_sched_t *s, uint32_t *room, uint32_t *slots)
{
    uint64_t                 taken, busy;
    const kvs_seq_t         *seq;
    const kvs_sched_pool_t  *lp;

    *room = 0;
    *slots = 0;

    if (!s->pools_on) {
        return;
    }

    lp = &s->pools[KVS_POOL_LONG];
    taken = lp->used;
    busy = 0;

    for (seq = s->running.head; seq != NULL; seq = seq->next) {
        busy += (uint64_t) kvs_sched_long_prefill(s, seq);
    }

    for (seq = s->waiting.head; seq != NULL; seq = seq->next) {
        if (seq->pool == KVS_POOL_LONG) {
            taken += seq->need;
            busy++;
        }
    }

    *room = taken < lp->max_blocks ? (uint32_t) (lp->max_blocks - taken) : 0;
    *slots = busy < s->conf.pool_max_prefill
             ? (uint32_t) (s->conf.pool_max_prefill - busy) : 0;
}


/*
 * The oldest waiting long sequence if the long pool may take it now: a
 * prefill slot free (fewer than pool_max_prefill prefilling) and its
 * need within the pool's share; else NULL.
 */
kvs_seq_t *
kvs_sched_long_next(kvs_sched_t *s)
{
    uint32_t           prefilling;
    kvs_seq_t         *seq, *lng;
    kvs_sched_pool_t  *lp;

    lp = &s->pools[KVS_POOL_LONG];

    for (lng = s->waiting.head; lng != NULL; lng = lng->next) {
        if (lng->pool == KVS_POOL_LONG) {
            break;
        }
    }

    if (lng == NULL) {
        return NULL;
    }

    prefilling = 0;

    for (seq = s->running.head; seq != NULL; seq = seq->next) {
        prefilling += kvs_sched_long_prefill(s, seq);
    }

    if (prefilling >= s->conf.pool_max_prefill
        || (uint64_t) lp->used + lng->need > lp->max_blocks)
    {
        return NULL;
    }

    return lng;
}


/* 1 when a long sequence would prefill this step if allowed: one runs
 * still prefilling, or one waits that the long pool may take. */
int
kvs_sched_long_pending(kvs_sched_t *s)
{
    kvs_seq_t  *seq;

    for (seq = s->running.head; seq != NULL; seq = seq->next) {
        if (kvs_sched_long_prefill(s, seq)) {
            return 1;
        }
    }

    return kvs_sched_long_next(s) != NULL;
}


/*
 * With pools: the short waiting sequence to admit next, as pick chooses
 * (first, the caps' choice, when it is short); NULL when none waits.
 * *hold is the need of the oldest waiting long one when the long pool
 * may take it: short ones must leave it free, so that it is not
 * starved (it is admitted in the step's long part).
 */
kvs_seq_t *
kvs_sched_pool_pick(kvs_sched_t *s, kvs_seq_t *first, uint32_t *hold)
{
    kvs_seq_t  *lng;

    lng = kvs_sched_long_next(s);
    *hold = lng != NULL ? lng->need : 0;

    if (first != NULL && first->state == KVS_SEQ_WAITING
        && first->pool == KVS_POOL_SHORT)
    {
        return first;
    }

    return kvs_sched_pick(s, 1);
}


/* seq joins the running for the first time: its pool's counts. */
void
kvs_sched_admitted(kvs_sched_t *s, kvs_seq_t *seq)
{
    kvs_sched_pool_t  *p;

    if (seq->admitted) {
        return;
    }

    seq->admitted = 1;
    p = &s->pools[seq->pool];
    p->admitted++;

    if (s->now > seq->queued_ms) {
        p->waited++;
        p->wait_ms += s->now - seq->queued_ms;
    }
}


/* The rate at which ended sequences give blocks back: sampled at most
 * once a second, smoothed (0.7 old, 0.3 new). */
void
kvs_sched_rate(kvs_sched_t *s)
{
    double    inst;
    uint64_t  dt;

    if (s->rate_ms == 0 || s->now < s->rate_ms) {
        s->rate_ms = s->now;
        s->rate_freed = s->n_freed;
        return;
    }

    dt = s->now - s->rate_ms;
    if (dt < 1000) {
        return;
    }

    inst = (double) (s->n_freed - s->rate_freed) * 1000.0 / (double) dt;
    s->free_rate = s->free_rate == 0.0 ? inst
                                       : 0.7 * s->free_rate + 0.3 * inst;
    s->rate_ms = s->now;
    s->rate_freed = s->n_freed;
}


kvs_seq_t *
kvs_sched_expire(kvs_sched_t *s)
{
    kvs_seq_t  *seq, *next, *list;

    list = NULL;

    if (s->conf.queue_timeout_ms == 0) {
        return NULL;
    }

    for (seq = s->waiting.head; seq != NULL; seq = next) {
        next = seq->next;

        if (seq->admitted
            || s->now < seq->queued_ms + s->conf.queue_timeout_ms)
        {
            continue;
        }

        /* a waiting sequence holds no blocks (invariant) */
        kvs_seq_queue_unlink(&s->waiting, seq);
        seq->state = KVS_SEQ_NEW;
        s->pools[seq->pool].refused++;

        seq->step_next = list;
        list = seq;
    }

    return list;
}


uint32_t
kvs_sched_retry_after(kvs_sched_t *s, const kvs_seq_t *seq)
{
    double             secs;
    uint32_t           avail, lack, room;
    kvs_sched_pool_t  *p;

    avail = kvs_sched_avail(s);
    lack = seq->need > avail ? seq->need - avail : 0;

    p = &s->pools[seq->pool];

    if (kvs_sched_long(s, seq)) {
        room = p->max_blocks > p->used ? p->max_blocks - p->used : 0;
        lack = seq->need > room && seq->need - room > lack
               ? seq->need - room : lack;
    }

    /* it lacked a turn, not blocks: one block's worth of turnover */
    lack = lack > 0 ? lack : 1;

    if (s->free_rate <= 0.0) {
        secs = (double) s->conf.queue_timeout_ms / 1000.0;
    } else {
        secs = (double) lack / s->free_rate;
    }

    secs = secs < 1.0 ? 1.0 : secs;

    return secs > 3600.0 ? 3600 : (uint32_t) (secs + 0.999);
}
