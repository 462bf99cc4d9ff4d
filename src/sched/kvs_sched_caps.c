/*
 * kvs_sched_caps: fair admission and the KV caps: which waiting sequence
 * is admitted next (the oldest of the tenant served least, passing over
 * a tenant or a request group over its cap while others wait), the
 * caps' preemption before a step, and the counts of the blocks that
 * tenants, groups and pools hold.
 *
 * Invariants:
 *   - a tenant's and a group's kv_blocks are their running sequences'
 *     blocks: recounted at each plan (kvs_sched_kv_count), kept up to
 *     date by admissions and the caps' preemptions within it;
 *   - a tenant's cap applies only while another tenant is queued, a
 *     group's only while another group is; pick passes over a capped
 *     one only while one not capped waits;
 *   - the caps' preemption takes only sequences over a cap, newest
 *     first, never a long one with pools on.
 */

#include "kvs_sched_impl.h"


static int kvs_sched_over(kvs_sched_t *s, kvs_seq_t *seq, int tenants,
    int groups);
static int kvs_sched_group_capped(kvs_sched_t *s, kvs_seq_group_t *g);


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
kvs_seq_t *
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
void
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
