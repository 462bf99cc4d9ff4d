/*
 * kvs_tier_impl: the disk tier's insides, shared by kvs_tier.c (the
 * file: its format, open, reads and writes) and kvs_tier_slots.c (the
 * slot index: namespace hash, lookup, LRU, free list, reclaim).  Not
 * for use outside src/kv.
 *
 * Invariants kept by kvs_tier_slots.c, under t->mu: a slot is on the
 * free list exactly when its state is SLOT_FREE; it is in the index and
 * the LRU list exactly when it is SLOT_READY; st.used counts the ready
 * slots.
 */

#ifndef KVS_TIER_IMPL_H
#define KVS_TIER_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include "kvs_tier.h"

#define KVS_TIER_NONE  UINT32_MAX

typedef enum {
    KVS_TIER_SLOT_FREE = 0,
    KVS_TIER_SLOT_BUSY,               /* being written */
    KVS_TIER_SLOT_READY,
    KVS_TIER_SLOT_DEAD                /* found corrupt while read by
                                         others: freed by the last */
} kvs_tier_slot_state_t;

typedef struct {
    uint8_t    state;
    uint32_t   readers;
    uint64_t   ns;                    /* namespace hash */
    uint8_t    id[KVS_TIER_ID_LEN];
    uint8_t    name[KVS_RADIX_NAME_LEN];  /* index name; zeros: none */
    uint64_t   seq;
    uint32_t   prev, next;            /* LRU: head most recent */
    uint32_t   link;                  /* index chain or free list */
} kvs_tier_slot_t;

struct kvs_tier_s {
    pthread_mutex_t    mu;
    int                fd;
    kvs_tier_conf_t    conf;
    uint64_t           slot_bytes;
    uint32_t           n_slots;
    kvs_tier_slot_t   *slots;
    uint32_t          *buckets;
    uint32_t           mask;
    uint32_t           free_head;
    uint32_t           lru_head, lru_tail;
    uint64_t           seq;
    kvs_tier_stats_t   st;
    kvs_tier_watch_pt  watch;         /* kvs_tier_set_watch()'s */
    void              *watch_arg;
};

/* The slot index (kvs_tier_slots.c); all but kvs_tier_ns_hash() and
 * kvs_tier_slots_init() are called under t->mu. */

/* Allocates the index for t->n_slots slots, all free: KVS_ENOMEM. */
int kvs_tier_slots_init(kvs_tier_t *t);

/* The ready slot of (ns, id), or KVS_TIER_NONE. */
uint32_t kvs_tier_slot_find(const kvs_tier_t *t, uint64_t ns,
    const uint8_t *id);

/* Makes slot i ready: into the index, the most recently used. */
void kvs_tier_slot_index(kvs_tier_t *t, uint32_t i);

/* Takes a ready slot out of the index and the LRU (it stays allocated:
 * the caller frees it or writes it). */
void kvs_tier_slot_unindex(kvs_tier_t *t, uint32_t i);

/* Puts slot i on the free list. */
void kvs_tier_slot_release(kvs_tier_t *t, uint32_t i);

/* Makes ready slot i the most recently used. */
void kvs_tier_slot_touch(kvs_tier_t *t, uint32_t i);

/* The slot a put writes: a free one, else the least recently used ready
 * slot no read holds (taken out of the index); KVS_TIER_NONE if all are
 * busy. */
uint32_t kvs_tier_slot_take(kvs_tier_t *t);

#endif /* KVS_TIER_IMPL_H */
