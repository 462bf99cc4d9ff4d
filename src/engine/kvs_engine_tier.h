/*
 * kvs_engine_tier: the lower tiers' state inside the engine, shared by
 * kvs_engine_tier.c (open, spill, the cost model's prefill samples,
 * stats), kvs_engine_tload.c (the loader thread and the requests
 * waiting for it) and kvs_engine_thost.c (the host tier).  Not for use
 * outside src/engine.
 *
 * Invariants: everything here but the loader's own locked part (see
 * kvs_engine_tload.c) is the engine thread's; the tiers and the spill
 * queue lock themselves.  tier (the disk's) and th (the host's) may
 * each be NULL, not both.
 */

#ifndef KVS_ENGINE_TIER_H
#define KVS_ENGINE_TIER_H

#include "kv/kvs_tier.h"
#include "kv/kvs_tier_cost.h"
#include "kv/kvs_tier_host.h"
#include "kv/kvs_tier_spill.h"
#include "kvs_engine_impl.h"

typedef struct kvs_engine_tload_s  kvs_engine_tload_t;
typedef struct kvs_engine_thost_s  kvs_engine_thost_t;
typedef struct kvs_engine_hcopy_s  kvs_engine_hcopy_t;

struct kvs_engine_tier_s {
    kvs_tier_t          *tier;          /* the disk tier; NULL: none */
    kvs_tier_spill_t    *spill;         /* its queue */
    kvs_engine_thost_t  *th;            /* the host tier; NULL: none */
    kvs_engine_hcopy_t  *hc;            /* the tiers' copies off the step
                                           (kvs_engine_hcopy.c); NULL: the
                                           backend copies at once */
    uint8_t             *block;         /* [block_bytes] a spilled block */
    uint64_t             block_bytes;   /* KV bytes of one block */
    uint64_t             slot_bytes;    /* file bytes of one block */
    uint8_t            (*ids)[KVS_TIER_ID_LEN];  /* [max_blocks] a plan's
                                                    path names */
    uint32_t            *table;         /* [max_blocks] a plan's match */
    uint8_t             *host;          /* [max_blocks] a plan's run: 1
                                           for a host tier's block */
    int                  load_room;     /* a load evicts for its room:
                                           spills take no host block
                                           out (it may be the load's) */
    uint32_t             max_blocks;    /* of a sequence's tokens */
    kvs_tier_cost_t      cost;          /* the disk's loads */
    kvs_tier_cost_t      cost_host;     /* the host tier's copies in */
    kvs_engine_tier_stats_t  st;
    kvs_engine_tload_t  *ld;            /* the loader; NULL until made */
};


/* kvs_engine_thost.c: the host tier */

/* Opens the host tier of conf.tier_host_size bytes in memory from the
 * backend's host_alloc; KVS_EUNSUPPORTED when the backend has none (the
 * CPU's: its pool is host memory already).  What was made stays in
 * e->tier->th for kvs_engine_thost_free(). */
int kvs_engine_thost_new(kvs_engine_t *e, kvs_err_t *err);
void kvs_engine_thost_free(kvs_engine_t *e);

/* The tree evicts a block (the spill function): into the host tier.
 * 0 when it could not take it (the caller hands it to the disk tier). */
int kvs_engine_thost_spill(kvs_engine_t *e, const kvs_radix_key_t *key,
    const uint8_t *path, const int32_t *tokens, uint32_t block);

/*
 * A plan's host run: the whole blocks after *m (a locked match of h's
 * tokens, key its namespace) that the host tier holds, as far as the
 * pool has room (at most room blocks), copied into new pool blocks,
 * inserted into the tree and recorded in h's host_from/host_to; *m is
 * then the longer match, locked, and et->ids[0, m's blocks) are the
 * path names.  Returns the blocks loaded (0: *m as it was).
 */
uint32_t kvs_engine_thost_load(kvs_engine_t *e, kvs_engine_seq_t *h,
    const kvs_radix_key_t *key, kvs_radix_match_t *m, uint32_t kmax,
    uint32_t room);

/* 1 when the host tier holds the block under key and id (now its most
 * recently used); any thread. */
int kvs_engine_thost_has(kvs_engine_t *e, const kvs_radix_key_t *key,
    const uint8_t *id);

/* The block under key and id whose tokens are tokens copied into dst
 * (the loader thread's staging); KVS_ENOTFOUND when gone. */
int kvs_engine_thost_get(kvs_engine_t *e, const kvs_radix_key_t *key,
    const uint8_t *id, const int32_t *tokens, void *dst, kvs_err_t *err);

/* The host tier's own figures into st (any thread). */
void kvs_engine_thost_live(kvs_engine_t *e, kvs_engine_tier_stats_t *st);

/* The host tier (engine thread). */
kvs_tier_host_t *kvs_engine_thost_tier(kvs_engine_t *e);


/* kvs_engine_hcopy.c: the tiers' copies off the step, for a backend with
 * the asynchronous block copies (engine thread only) */

/* Into e->tier->hc once the tiers are open: the host tier's copies (when
 * there is one) and a staging ring of depth blocks (0: no disk tier) for
 * the disk tier's spills, in the backend's host memory. */
int kvs_engine_hcopy_new(kvs_engine_t *e, uint32_t depth, kvs_err_t *err);
/* Waits for every copy in flight, settles them (a disk spill into its
 * queue), frees e->tier->hc (NULL: no-op); before the host tier and the
 * spill queue are freed. */
void kvs_engine_hcopy_free(kvs_engine_t *e);

/* A spill into the host tier queued (1), or not taken (0: the caller
 * hands it to the disk tier). */
int kvs_engine_hcopy_spill(kvs_engine_t *e, const kvs_radix_key_t *key,
    const uint8_t *path, const int32_t *tokens, uint32_t block);

/* The tree evicts a block the disk tier lacks: its copy out queued into
 * the staging ring, into the spill queue once done; a full ring or a
 * copy the backend refuses drops it (counted in spill_copy_full). */
void kvs_engine_hcopy_spill_disk(kvs_engine_t *e, const kvs_radix_key_t *key,
    const uint8_t *path, const int32_t *tokens, uint32_t block);

/* kvs_engine_thost_load's run queued: the run's n held host slots
 * (slots, data) and its first got pool blocks (e->tier->table from k0,
 * reserved) into a load of h, under m's lock; what is not queued goes
 * back.  Returns the blocks queued (0: nothing, all given back). */
uint32_t kvs_engine_hcopy_load(kvs_engine_t *e, kvs_engine_seq_t *h,
    kvs_radix_match_t *m, uint32_t k0, uint32_t n, uint32_t got,
    const uint32_t *slots, const void *const *data);

/* The copies done so far settled: spills stored; loads (when loads)
 * into the tree, their requests' waits over.  Never waits. */
void kvs_engine_hcopy_poll(kvs_engine_t *e, int loads);

/* 1 when a load of h's is in flight (h waits parked). */
int kvs_engine_hcopy_busy(kvs_engine_t *e, kvs_engine_seq_t *h);

/* h ends: its loads' copies go on, and give back what they hold once
 * done. */
void kvs_engine_hcopy_release(kvs_engine_t *e, kvs_engine_seq_t *h);

/* Pool blocks the loads in flight hold (within the loads' bound). */
uint32_t kvs_engine_hcopy_reserved(kvs_engine_t *e);

/* A disk load's block written into the pool block from src (the
 * loader's staging, host_alloc's memory, untouched until the ticket is
 * settled): *ticket, counted in flight; KVS_KV_EFULL when the backend is
 * at its limit (nothing queued). */
int kvs_engine_hcopy_write(kvs_engine_t *e, uint32_t block, const void *src,
    uint64_t *ticket, kvs_err_t *err);

/* The write under ticket as of the last poll: 0 in flight, else settled
 * (no longer counted; asked once then): 1 done, -1 failed. */
int kvs_engine_hcopy_settled(kvs_engine_t *e, uint64_t ticket);

/* Waits for every copy in flight and settles them (tests, free). */
void kvs_engine_hcopy_wait(kvs_engine_t *e);

#endif /* KVS_ENGINE_TIER_H */
