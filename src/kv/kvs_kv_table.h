/*
 * kvs_kv_table: one sequence's block table, the map from its token
 * positions to KV slots (block id, offset in block).
 *
 * Position p lives in blocks[p / block_tokens] at offset p % block_tokens.
 * The table holds one pool reference on each of its blocks (holes
 * aside, below) and covers n_tokens positions with exactly
 * ceil(n_tokens / block_tokens) entries, so the only waste is the
 * unfilled tail of the last block (fewer than block_tokens slots).
 *
 * Sharing: kvs_kv_table_fork() makes a second table reference the same
 * blocks (n > 1, and the prefix cache later).  Full shared blocks are read
 * only by construction; the last block, if partially filled and shared
 * (kvs_kv_table_last_shared()), must be copied to a block of its own
 * before any position in it is written: copy-on-write belongs to the
 * caller that writes, not to this table.
 *
 * Holes (sliding windows): when no layer of the model reads positions
 * before some point again, kvs_kv_table_drop() gives the blocks wholly
 * before it back and leaves KVS_KV_HOLE in their entries, so positions
 * stay block-indexed.  Holes are always the leading entries [0,
 * n_dropped); the table holds a reference on every other entry.  Nothing
 * may read a hole: the backends check every block a token's attention
 * reads (its window) before the step, and fail it on a hole.
 *
 * A zeroed table is empty and valid; it takes its pool's block size at the
 * first reserve or fork, and every later call must pass the same pool.
 * kvs_kv_table_release() returns it to the zeroed state.  Failing calls
 * change nothing.  Not thread-safe (the engine thread owns tables).
 */

#ifndef KVS_KV_TABLE_H
#define KVS_KV_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_kv_pool.h"

/* A block table entry whose block was given back (kvs_kv_table_drop) */
#define KVS_KV_HOLE  KVS_KV_NONE

typedef struct {
    uint32_t  *blocks;                /* [cap] ids, [n_dropped, n_blocks)
                                         held, [0, n_dropped) holes */
    uint32_t   n_blocks;              /* == ceil(n_tokens / block_tokens) */
    size_t     cap;                   /* elements allocated in blocks */
    uint32_t   n_tokens;              /* positions covered, [0, n_tokens) */
    uint32_t   block_tokens;          /* the pool's; 0 until first used */
    uint32_t   n_dropped;             /* leading holes */
} kvs_kv_table_t;


/* Blocks the table still has to allocate to cover n_tokens positions (0 if
 * it already does): what kvs_kv_table_reserve() would take from the pool,
 * for the scheduler to plan a step before committing to it. */
uint32_t kvs_kv_table_blocks_needed(const kvs_kv_table_t *table,
    const kvs_kv_pool_t *pool, uint32_t n_tokens);

/*
 * Makes the table cover positions [0, n_tokens), allocating the missing
 * blocks; n_tokens at or below the current count is a no-op (tables only
 * grow).  KVS_KV_EFULL when the pool lacks free blocks, KVS_ENOMEM when
 * the id array cannot grow; either way nothing changed.
 */
int kvs_kv_table_reserve(kvs_kv_table_t *table, kvs_kv_pool_t *pool,
    uint32_t n_tokens, kvs_err_t *err);

/* The slot of position pos: *block, the pool block id, and *offset in
 * [0, block_tokens).  KVS_ERANGE when pos is not covered. */
int kvs_kv_table_slot(const kvs_kv_table_t *table, uint32_t pos,
    uint32_t *block, uint32_t *offset, kvs_err_t *err);

/*
 * Makes the empty table dst share all of src's blocks (one more reference
 * each; src's holes are dst's too) and cover the same positions.
 * KVS_EINVAL if dst is not empty or the pool is another one, KVS_ENOMEM,
 * KVS_ERANGE on refcount overflow; nothing changes on failure.
 */
int kvs_kv_table_fork(kvs_kv_table_t *dst, const kvs_kv_table_t *src,
    kvs_kv_pool_t *pool, kvs_err_t *err);

/*
 * Makes the empty table dst cover positions [0, n_tokens) with blocks[0..
 * ceil(n_tokens / block_tokens)), one more reference each: a prefix
 * found in the prefix cache, or a fork's source.  Leading KVS_KV_HOLE
 * entries stay holes (no reference); a hole after a held block is
 * KVS_EINVAL.  Errors as for fork; nothing changes on failure.
 */
int kvs_kv_table_share(kvs_kv_table_t *dst, kvs_kv_pool_t *pool,
    const uint32_t *blocks, uint32_t n_tokens, kvs_err_t *err);

/* 1 when the table's last block has other owners too (write to it only
 * after copying it), 0 otherwise or when the table is empty. */
int kvs_kv_table_last_shared(const kvs_kv_table_t *table,
    const kvs_kv_pool_t *pool);

/*
 * Copy-on-write, the table's half: when the block that holds (or will
 * hold) position pos has other owners, takes a new block for this table
 * in its place and sets *src (the shared block) and *dst (the new one),
 * whose K/V the caller must copy (kvs_backend_copy_block) before anything
 * writes to dst; otherwise both are KVS_KV_NONE.  KVS_KV_EFULL when the
 * pool has no free block, KVS_ERANGE when pos is past the table's
 * blocks; nothing changes on failure.
 */
int kvs_kv_table_unshare(kvs_kv_table_t *table, kvs_kv_pool_t *pool,
    uint32_t pos, uint32_t *src, uint32_t *dst, kvs_err_t *err);

/*
 * Drops the table's reference on each block and frees its id array,
 * leaving a zeroed table: on finish, cancel and preemption.  Returns the
 * first unref error (a table not built on this pool), releasing the rest.
 */
int kvs_kv_table_release(kvs_kv_table_t *table, kvs_kv_pool_t *pool,
    kvs_err_t *err);

/*
 * Gives back the blocks that hold only positions before pos (no layer
 * reads them again: the caller's window rule), leaving holes; *dropped
 * is how many blocks this call released.  Holes already there stay;
 * never fails (each unref is of a block the table holds).
 */
void kvs_kv_table_drop(kvs_kv_table_t *table, kvs_kv_pool_t *pool,
    uint32_t pos, uint32_t *dropped);

/* Blocks the table holds: entries that are not holes. */
static inline uint32_t
kvs_kv_table_held(const kvs_kv_table_t *table)
{
    return table->n_blocks - table->n_dropped;
}

/* Verifies the table against the pool: block count matches n_tokens,
 * holes are the leading n_dropped entries, the other ids held.
 * KVS_EFORMAT names the first problem.  For tests. */
int kvs_kv_table_check(const kvs_kv_table_t *table,
    const kvs_kv_pool_t *pool, kvs_err_t *err);

#endif /* KVS_KV_TABLE_H */
