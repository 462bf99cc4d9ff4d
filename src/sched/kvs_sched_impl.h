/*
 * kvs_sched_impl.h: what the scheduler's files share inside it (not for
 * its users: kvs_sched.h is the interface).  kvs_sched.c says which file
 * owns what.
 */

#ifndef KVS_SCHED_IMPL_H
#define KVS_SCHED_IMPL_H

#include "kvs_sched.h"


/* kvs_sched.c: sequences and the queues */
void kvs_seq_queue_insert(kvs_seq_queue_t *q, kvs_seq_t *seq);
void kvs_seq_queue_unlink(kvs_seq_queue_t *q, kvs_seq_t *seq);
void kvs_sched_preempt(kvs_sched_t *s, kvs_seq_t *seq);

/* kvs_sched_step.c: the step's batch */
uint32_t kvs_sched_blocks_for(kvs_sched_t *s, kvs_seq_t *seq,
    uint32_t take);

/* kvs_sched_cache.c: a sequence's blocks against the prefix tree */
void kvs_sched_lookup(kvs_sched_t *s, kvs_seq_t *seq);
void kvs_sched_unlook(kvs_sched_t *s, kvs_seq_t *seq);
void kvs_sched_computed(kvs_sched_t *s, kvs_seq_t *seq);
void kvs_sched_let_go(kvs_sched_t *s, kvs_seq_t *seq);
int kvs_sched_room(kvs_sched_t *s, uint32_t need);

/* kvs_sched_caps.c: fair admission and the KV caps */
kvs_seq_t *kvs_sched_pick(kvs_sched_t *s, int only_short);
kvs_seq_t *kvs_sched_rebalance(kvs_sched_t *s);
void kvs_sched_held(kvs_seq_t *seq, int32_t sign);

/* kvs_sched_pool.c: the KV pools (docs/pools.md) */
int kvs_sched_long(const kvs_sched_t *s, const kvs_seq_t *seq);
kvs_seq_t *kvs_sched_victim(kvs_sched_t *s, kvs_seq_t *seq);
uint32_t kvs_sched_avail(kvs_sched_t *s);
int kvs_sched_long_prefill(const kvs_sched_t *s,
    const kvs_seq_t *seq);
kvs_seq_t *kvs_sched_long_next(kvs_sched_t *s);
int kvs_sched_long_pending(kvs_sched_t *s);
kvs_seq_t *kvs_sched_pool_pick(kvs_sched_t *s, kvs_seq_t *first,
    uint32_t *hold);
void kvs_sched_admitted(kvs_sched_t *s, kvs_seq_t *seq);
void kvs_sched_rate(kvs_sched_t *s);

#endif /* KVS_SCHED_IMPL_H */
