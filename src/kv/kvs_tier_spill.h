/*
 * kvs_tier_spill: blocks on their way to the disk tier, off the step
 * loop.
 *
 * The engine thread pushes a block it is about to lose (its namespace,
 * path id, tokens and KV bytes): the push copies it into one of `depth`
 * preallocated staging entries and returns; a writer thread of its own
 * takes the entries in order and stores them with kvs_tier_put().  The
 * step loop therefore pays one memcpy per block and never waits on the
 * disk: when every entry is still queued or being written, the push
 * drops the block (counted) instead of waiting.
 *
 * Invariants:
 *   - the queue's lock is held only to claim or hand back an entry
 *     (O(1)), never during a copy into the tier or a write;
 *   - an entry being written stays counted in the queue until its write
 *     returns, so a push never reuses it;
 *   - pushed = written + failed + queued, and every push that was not
 *     queued is counted in dropped;
 *   - entries are written in the order they were queued: the n-th
 *     queued entry (its ticket, n from 1) is done, written or failed,
 *     once n entries are.
 *
 * Threads: kvs_tier_spill_push() from one producer (the engine thread);
 * find, stats and the waits from any thread.  The writer blocks every signal.
 */

#ifndef KVS_TIER_SPILL_H
#define KVS_TIER_SPILL_H

#include <stdint.h>

#include "base/kvs_err.h"
#include "kvs_tier.h"

#define KVS_TIER_SPILL_MAX_DEPTH  65536

typedef struct {
    uint64_t  pushed;                 /* queued */
    uint64_t  dropped;                /* refused: the queue was full */
    uint64_t  written;                /* stored by the writer */
    uint64_t  failed;                 /* kvs_tier_put() failed */
    uint32_t  queued;                 /* in the queue now */
    uint32_t  depth;
} kvs_tier_spill_stats_t;

typedef struct kvs_tier_spill_s  kvs_tier_spill_t;


/* A queue of depth (1..KVS_TIER_SPILL_MAX_DEPTH) entries for tier's
 * blocks, and its writer thread.  KVS_EINVAL, KVS_ENOMEM, KVS_EIO when
 * the thread cannot start.  *out is NULL on failure. */
int kvs_tier_spill_new(kvs_tier_spill_t **out, kvs_tier_t *tier,
    uint32_t depth, kvs_err_t *err);

/* Stops the writer once its current write returns; what is still queued
 * is dropped.  The tier stays open.  NULL: no-op. */
void kvs_tier_spill_free(kvs_tier_spill_t *sp);

/*
 * Queues a copy of one block (tokens[block_tokens], data[block_bytes]
 * of the tier) and its index name (NULL: none; kvs_tier_put_named()).
 * KVS_KV_EFULL when no entry is free (the block is dropped, counted),
 * KVS_EINVAL for a scope over KVS_RADIX_MAX_SCOPE.  Never waits for a
 * write.
 */
int kvs_tier_spill_push_named(kvs_tier_spill_t *sp,
    const kvs_radix_key_t *key, const uint8_t *id, const uint8_t *name,
    const int32_t *tokens, const void *data, kvs_err_t *err);

static inline int
kvs_tier_spill_push(kvs_tier_spill_t *sp, const kvs_radix_key_t *key,
    const uint8_t *id, const int32_t *tokens, const void *data,
    kvs_err_t *err)
{
    return kvs_tier_spill_push_named(sp, key, id, NULL, tokens, data, err);
}

/* Waits until the queue is empty (tests, benches, shutdown). */
void kvs_tier_spill_wait(kvs_tier_spill_t *sp);

/* The ticket of the newest queued entry (not yet written) of the block
 * named id under key (epoch, adapter and scope compared byte by byte);
 * 0: none.  A block evicted just before a lookup is still queued: its
 * ticket lets a reader wait for its write (kvs_tier_spill_wait_for()),
 * then read it from the tier.  O(queued). */
uint64_t kvs_tier_spill_find(kvs_tier_spill_t *sp,
    const kvs_radix_key_t *key, const uint8_t *id);

/* Waits until the entry of ticket is written or failed (or the writer
 * stopped); at once for 0 or a ticket already done. */
void kvs_tier_spill_wait_for(kvs_tier_spill_t *sp, uint64_t ticket);

void kvs_tier_spill_stats(kvs_tier_spill_t *sp,
    kvs_tier_spill_stats_t *st);

#endif /* KVS_TIER_SPILL_H */
