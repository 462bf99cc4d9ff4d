/*
 * kvs_kv_pool: the KV cache's blocks as metadata.
 *
 * The cache is cut into n_blocks fixed-size blocks of block_tokens token
 * positions each.  The KV bytes themselves live in the backend, which
 * indexes them by block id (bytes of block b start at b * block_bytes);
 * this object only decides who holds which block.  Per block it keeps a
 * reference count and, while the block is free, an intrusive link to the
 * next free block, so that allocation and release are O(1) per block and
 * need no memory beyond the metadata array sized at creation.
 *
 * Invariants (kvs_kv_pool_check() verifies them):
 *   - a block is free iff its refcount is 0, and every free block is on
 *     the free list exactly once; n_free is the length of that list;
 *   - a block with refcount r is held by r owners (block tables, later the
 *     prefix cache); each owner drops exactly one reference with unref;
 *   - a failing call changes nothing: capacity and arguments are checked
 *     before the first mutation.
 *
 * Ownership and threads: the engine thread owns the pool; nothing here
 * locks.  Block ids are uint32_t in [0, n_blocks).
 */

#ifndef KVS_KV_POOL_H
#define KVS_KV_POOL_H

#include <stdint.h>

#include "base/kvs_err.h"

#define KVS_KV_BLOCK_TOKENS      16           /* default tokens per block */
#define KVS_KV_MAX_BLOCK_TOKENS  1024
#define KVS_KV_MAX_BLOCKS        (1u << 30)   /* 8 GiB of metadata at most */
#define KVS_KV_NONE              UINT32_MAX   /* "no block": end of lists */

/*
 * Status of an allocation that the pool cannot satisfy with its free
 * blocks (as opposed to KVS_ENOMEM, a failed malloc): the scheduler
 * answers it by preempting or waiting, not by failing the request.
 */
#define KVS_KV_EFULL             KVS_ERANGE

typedef struct {
    uint32_t  ref;                    /* owners; 0: free */
    uint32_t  next_free;              /* next free id, KVS_KV_NONE at end;
                                         meaningful only while ref == 0 */
} kvs_kv_block_t;

/* Fields are read-only outside kvs_kv_pool.c. */
typedef struct {
    kvs_kv_block_t  *blocks;          /* [n_blocks] */
    uint32_t         n_blocks;
    uint32_t         block_tokens;    /* token positions per block */
    uint32_t         n_free;          /* length of the free list */
    uint32_t         free_head;       /* first free id, KVS_KV_NONE: none */
} kvs_kv_pool_t;


/* A pool of n_blocks free blocks (1..KVS_KV_MAX_BLOCKS) of block_tokens
 * tokens (1..KVS_KV_MAX_BLOCK_TOKENS); *pool is NULL on failure. */
int kvs_kv_pool_new(kvs_kv_pool_t **pool, uint32_t n_blocks,
    uint32_t block_tokens, kvs_err_t *err);

/* Frees the metadata; blocks still referenced are simply forgotten. */
void kvs_kv_pool_free(kvs_kv_pool_t *pool);

/*
 * How many blocks of block_tokens tokens, kv_bytes_per_token bytes each
 * (kvs_hparams_kv_bytes_per_token()), fit in bytes of cache memory,
 * capped at KVS_KV_MAX_BLOCKS (the rest of the memory is then unused).
 * KVS_EINVAL for zero sizes or a block size outside the limits,
 * KVS_ERANGE when one block's bytes overflow 64 bits or not even one
 * block fits.
 */
int kvs_kv_pool_blocks_for_bytes(uint64_t bytes, uint64_t kv_bytes_per_token,
    uint32_t block_tokens, uint32_t *n_blocks, kvs_err_t *err);

/*
 * Takes k blocks off the free list, each with refcount 1, into ids[0..k).
 * All or nothing: KVS_KV_EFULL ("pool has F free blocks, need k") leaves
 * the pool and ids untouched.  k == 0 succeeds and does nothing.
 */
int kvs_kv_pool_alloc(kvs_kv_pool_t *pool, uint32_t k, uint32_t *ids,
    kvs_err_t *err);

/* Adds an owner to a held block (sharing); KVS_EINVAL for a free or
 * out-of-range id, KVS_ERANGE if the count would overflow. */
int kvs_kv_pool_ref(kvs_kv_pool_t *pool, uint32_t id, kvs_err_t *err);

/* Drops one owner; at 0 the block goes back on the free list.  A free or
 * out-of-range id is KVS_EINVAL and changes nothing. */
int kvs_kv_pool_unref(kvs_kv_pool_t *pool, uint32_t id, kvs_err_t *err);

/* The owner count of id; 0 for a free block and for an out-of-range id. */
uint32_t kvs_kv_pool_refcount(const kvs_kv_pool_t *pool, uint32_t id);

static inline uint32_t
kvs_kv_pool_free_count(const kvs_kv_pool_t *pool)
{
    return pool->n_free;
}


static inline uint32_t
kvs_kv_pool_used_count(const kvs_kv_pool_t *pool)
{
    return pool->n_blocks - pool->n_free;
}


/* Walks the free list and the block array, verifying the invariants
 * above in O(n_blocks) without allocating; KVS_EFORMAT names the first
 * broken one.  For tests and debug builds. */
int kvs_kv_pool_check(const kvs_kv_pool_t *pool, kvs_err_t *err);

#endif /* KVS_KV_POOL_H */
