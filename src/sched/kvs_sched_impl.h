/*
 * kvs_sched_impl.h: what kvs_sched.c and kvs_sched_pool.c share inside
 * the scheduler (not for its users: kvs_sched.h is the interface).
 */

#ifndef KVS_SCHED_IMPL_H
#define KVS_SCHED_IMPL_H

#include "kvs_sched.h"


/* kvs_sched.c */
void kvs_seq_queue_unlink(kvs_seq_queue_t *q, kvs_seq_t *seq);
kvs_seq_t *kvs_sched_pick(kvs_sched_t *s, int only_short);

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
