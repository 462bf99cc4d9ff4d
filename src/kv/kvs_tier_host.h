/*
 * kvs_tier_host: the prefix cache's host memory tier, a bounded store of
 * KV blocks in one allocation of host memory, in front of the disk tier
 * (docs/prefix-cache.md, "The host tier").  On CUDA the allocation is
 * pinned (the backend's host_alloc hook), so a block goes between the
 * device pool and its slot in one DMA; the tests pass plain malloc.
 *
 * What it owns: the slots' memory (through the caller's alloc and free
 * hooks), a copy of each block's namespace (weight epoch, adapter, cache
 * scope) and tokens, the table from (namespace, path id) to a slot, the
 * LRU list, the free list and the holds.
 *
 * Invariants:
 *   - at most size / block_bytes slots, all allocated at new: the tier
 *     never grows; a (namespace, path id) pair names at most one slot;
 *   - a block is given back (get, hold) only when its namespace matches
 *     whole (epoch, adapter and scope compared byte by byte), its path
 *     id matches and its tokens match token by token; a block of another
 *     weight epoch than the tier's is never stored;
 *   - a put that needs room takes the least recently used slot that no
 *     hold pins, and hands the block it held to the evict hook first (so
 *     the engine can pass it on to the disk tier), then overwrites it;
 *     when every slot is held the put fails and changes nothing;
 *   - a held slot is neither overwritten nor dropped until released;
 *   - a reserved slot (kvs_tier_host_reserve) is pending until ready or
 *     cancel: held, and given to no lookup, hold or get, since its
 *     bytes are still on their way.
 * No checksums: the bytes never leave process memory.
 *
 * Threads: one mutex guards everything; the evict hook is called with
 * it held (it must not call back into the tier) and the bytes of a held
 * slot may be read without it.  Library code: no nginx, no abort on bad
 * input.
 */

#ifndef KVS_TIER_HOST_H
#define KVS_TIER_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"
#include "kvs_radix.h"
#include "kvs_tier.h"                 /* KVS_TIER_ID_LEN */

#define KVS_TIER_HOST_MAX_SLOTS  (1u << 26)
#define KVS_TIER_HOST_NONE       UINT32_MAX

/* memory for the slots (NULL and err set when refused), and its free */
typedef void *(*kvs_tier_host_alloc_pt)(void *arg, size_t bytes,
    kvs_err_t *err);
typedef void (*kvs_tier_host_free_pt)(void *arg, void *p);

/* a block leaves the tier to make room: key, path id, its prefix index
 * name (KVS_RADIX_NAME_LEN bytes; NULL: none), tokens and bytes, valid
 * only during the call */
typedef void (*kvs_tier_host_evict_pt)(void *arg, const kvs_radix_key_t *key,
    const uint8_t *id, const uint8_t *name, const int32_t *tokens,
    const void *data);

/* fills a new slot's block_bytes at dst (kvs_tier_host_put_with) */
typedef int (*kvs_tier_host_fill_pt)(void *arg, void *dst, kvs_err_t *err);

typedef struct {
    uint64_t                 size;          /* bytes of blocks at most */
    uint64_t                 block_bytes;   /* KV bytes of one block */
    uint32_t                 block_tokens;
    uint64_t                 epoch;         /* the only epoch stored */
    kvs_tier_host_alloc_pt   alloc;         /* NULL: malloc */
    kvs_tier_host_free_pt    free;          /* NULL: free */
    void                    *mem_arg;
    kvs_tier_host_evict_pt   evict;         /* NULL: evicted blocks go */
    void                    *evict_arg;
} kvs_tier_host_conf_t;

typedef struct {
    uint64_t  slots;                  /* capacity */
    uint64_t  used;                   /* slots holding a block */
    uint64_t  block_bytes;
    uint64_t  puts;                   /* blocks stored */
    uint64_t  put_dups;               /* already stored: refreshed */
    uint64_t  hits;                   /* blocks given back */
    uint64_t  misses;                 /* asked for and not here (or other
                                         tokens, another namespace) */
    uint64_t  evicted;                /* slots taken for room */
    uint64_t  held;                   /* slots held now */
} kvs_tier_host_stats_t;

typedef struct kvs_tier_host_s  kvs_tier_host_t;


/* KVS_EINVAL for a zero size or no block_tokens (or one memory hook
 * without the other), KVS_ERANGE when not one
 * block fits (or more than KVS_TIER_HOST_MAX_SLOTS would), KVS_ENOMEM
 * (or the alloc hook's error).  *out is NULL on failure. */
int kvs_tier_host_new(kvs_tier_host_t **out,
    const kvs_tier_host_conf_t *conf, kvs_err_t *err);

/* Frees the slots (nothing is passed to the evict hook); every hold
 * must have been released. */
void kvs_tier_host_free(kvs_tier_host_t *h);

/*
 * Stores a copy of one block: tokens[block_tokens], data[block_bytes],
 * under key and path id.  One already stored is refreshed (the most
 * recently used), not copied.  KVS_EINVAL for a scope over
 * KVS_RADIX_MAX_SCOPE or another epoch than the tier's; KVS_KV_EFULL
 * when every slot is held.  Nothing changes on failure.
 */
int kvs_tier_host_put(kvs_tier_host_t *h, const kvs_radix_key_t *key,
    const uint8_t *id, const int32_t *tokens, const void *data,
    kvs_err_t *err);

/*
 * The same, with the block's prefix index name (NULL: none), its bytes
 * written straight into the slot by fill (called with the tier's lock
 * held: it must not call back into the tier), e.g. a device-to-host
 * copy into pinned memory.  When fill fails the slot goes back free and
 * its error is returned; a block the put evicted to make room has gone
 * to the evict hook already.  *stored (may be NULL): 1 when a new block
 * was stored, 0 when one already stored was refreshed.  With no_evict a
 * full tier takes no block out for room: KVS_KV_EFULL, nothing changed.
 */
int kvs_tier_host_put_with(kvs_tier_host_t *h, const kvs_radix_key_t *key,
    const uint8_t *id, const uint8_t *name, const int32_t *tokens,
    kvs_tier_host_fill_pt fill, void *fill_arg, int no_evict, int *stored,
    kvs_err_t *err);

/*
 * put_with for a copy that finishes later (an asynchronous device copy):
 * the slot is taken as put_with takes it, its bytes at *dst for the
 * caller to write, and it stays pending (held; a put of the same key
 * finds it, has, touch, hold and get do not) until
 * kvs_tier_host_ready(h, *slot) makes it a stored block, or
 * kvs_tier_host_cancel(h, *slot) forgets it (the copy failed).
 * *stored 0: the block was stored (or pending) already, *slot is
 * KVS_TIER_HOST_NONE and there is nothing to copy.  Errors as put_with.
 */
int kvs_tier_host_reserve(kvs_tier_host_t *h, const kvs_radix_key_t *key,
    const uint8_t *id, const uint8_t *name, const int32_t *tokens,
    int no_evict, int *stored, uint32_t *slot, void **dst, kvs_err_t *err);
void kvs_tier_host_ready(kvs_tier_host_t *h, uint32_t slot);
void kvs_tier_host_cancel(kvs_tier_host_t *h, uint32_t slot);

/* 1 when a block is stored under key and id (touch: and it becomes the
 * most recently used); a pending one is not stored yet. */
int kvs_tier_host_has(kvs_tier_host_t *h, const kvs_radix_key_t *key,
    const uint8_t *id);
int kvs_tier_host_touch(kvs_tier_host_t *h, const kvs_radix_key_t *key,
    const uint8_t *id);

/*
 * The block stored under key and id, when its tokens are tokens: held
 * (*slot) and its bytes at *data until kvs_tier_host_release(h, *slot);
 * it becomes the most recently used.  KVS_ENOTFOUND when absent, of
 * another namespace or other tokens (counted a miss).
 */
int kvs_tier_host_hold(kvs_tier_host_t *h, const kvs_radix_key_t *key,
    const uint8_t *id, const int32_t *tokens, const void **data,
    uint32_t *slot, kvs_err_t *err);
void kvs_tier_host_release(kvs_tier_host_t *h, uint32_t slot);

/* kvs_tier_host_hold(), the bytes copied into dst, and released. */
int kvs_tier_host_get(kvs_tier_host_t *h, const kvs_radix_key_t *key,
    const uint8_t *id, const int32_t *tokens, void *dst, kvs_err_t *err);

/* Forgets the block under key and id, unless held; 1 when one went. */
int kvs_tier_host_drop(kvs_tier_host_t *h, const kvs_radix_key_t *key,
    const uint8_t *id);

void kvs_tier_host_stats(kvs_tier_host_t *h, kvs_tier_host_stats_t *st);

#endif /* KVS_TIER_HOST_H */
