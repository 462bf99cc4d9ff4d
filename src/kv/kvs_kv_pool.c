/*
 * kvs_kv_pool: block metadata, refcounts and the intrusive free list (see
 * kvs_kv_pool.h for the invariants).  The free list is LIFO so that a
 * block released by one sequence is the next one handed out, while its
 * KV bytes are likely still in the backend's caches.
 */

#include <inttypes.h>
#include <stdlib.h>

#include "kvs_kv_pool.h"


int
kvs_kv_pool_new(kvs_kv_pool_t **pool, uint32_t n_blocks,
    uint32_t block_tokens, kvs_err_t *err)
{
    uint32_t        i;
    kvs_kv_pool_t  *p;

    *pool = NULL;

    if (n_blocks == 0 || n_blocks > KVS_KV_MAX_BLOCKS) {
        return kvs_err_set(err, KVS_EINVAL, "kv pool: %" PRIu32 " blocks, "
                           "expected 1..%u", n_blocks, KVS_KV_MAX_BLOCKS);
    }

    if (block_tokens == 0 || block_tokens > KVS_KV_MAX_BLOCK_TOKENS) {
        return kvs_err_set(err, KVS_EINVAL, "kv pool: block of %" PRIu32
                           " tokens, expected 1..%u", block_tokens,
                           KVS_KV_MAX_BLOCK_TOKENS);
    }

    p = calloc(1, sizeof(kvs_kv_pool_t));
    if (p == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "kv pool: out of memory");
    }

    p->blocks = malloc((size_t) n_blocks * sizeof(kvs_kv_block_t));
    if (p->blocks == NULL) {
        free(p);
        return kvs_err_set(err, KVS_ENOMEM, "kv pool: out of memory for "
                           "%" PRIu32 " blocks", n_blocks);
    }

    /* ascending ids first, so that a fresh pool hands out 0, 1, 2, ... */
    for (i = 0; i < n_blocks; i++) {
        p->blocks[i].ref = 0;
        p->blocks[i].next_free = i + 1 < n_blocks ? i + 1 : KVS_KV_NONE;
    }

    p->n_blocks = n_blocks;
    p->block_tokens = block_tokens;
    p->n_free = n_blocks;
    p->free_head = 0;

    *pool = p;

    return KVS_OK;
}


void
kvs_kv_pool_free(kvs_kv_pool_t *pool)
{
    if (pool == NULL) {
        return;
    }

    free(pool->blocks);
    free(pool);
}


int
kvs_kv_pool_blocks_for_bytes(uint64_t bytes, uint64_t kv_bytes_per_token,
    uint32_t block_tokens, uint32_t *n_blocks, kvs_err_t *err)
{
    uint64_t  block_bytes, n;

    *n_blocks = 0;

    if (kv_bytes_per_token == 0) {
        return kvs_err_set(err, KVS_EINVAL, "kv cache: 0 bytes per token");
    }

    if (block_tokens == 0 || block_tokens > KVS_KV_MAX_BLOCK_TOKENS) {
        return kvs_err_set(err, KVS_EINVAL, "kv cache: block of %" PRIu32
                           " tokens, expected 1..%u", block_tokens,
                           KVS_KV_MAX_BLOCK_TOKENS);
    }

    if (kv_bytes_per_token > UINT64_MAX / block_tokens) {
        return kvs_err_set(err, KVS_ERANGE, "kv cache: a block of %" PRIu32
                           " tokens of %" PRIu64 " bytes overflows 64 bits",
                           block_tokens, kv_bytes_per_token);
    }

    block_bytes = kv_bytes_per_token * block_tokens;
    n = bytes / block_bytes;

    if (n == 0) {
        return kvs_err_set(err, KVS_ERANGE, "kv cache: %" PRIu64 " bytes "
                           "hold no block of %" PRIu32 " tokens (%" PRIu64
                           " bytes)", bytes, block_tokens, block_bytes);
    }

    *n_blocks = n > KVS_KV_MAX_BLOCKS ? KVS_KV_MAX_BLOCKS : (uint32_t) n;

    return KVS_OK;
}


int
kvs_kv_pool_alloc(kvs_kv_pool_t *pool, uint32_t k, uint32_t *ids,
    kvs_err_t *err)
{
    uint32_t         i, id;
    kvs_kv_block_t  *b;

    if (k > pool->n_free) {
        return kvs_err_set(err, KVS_KV_EFULL, "kv pool has %" PRIu32
                           " free blocks, need %" PRIu32, pool->n_free, k);
    }

    for (i = 0; i < k; i++) {
        id = pool->free_head;
        b = &pool->blocks[id];

        pool->free_head = b->next_free;
        b->next_free = KVS_KV_NONE;
        b->ref = 1;
        ids[i] = id;
    }

    pool->n_free -= k;

    return KVS_OK;
}


/* The block behind a held id, or NULL with err set. */
static kvs_kv_block_t *
kvs_kv_pool_held(kvs_kv_pool_t *pool, uint32_t id, const char *op,
    kvs_err_t *err)
{
    if (id >= pool->n_blocks) {
        kvs_err_set(err, KVS_EINVAL, "kv pool: %s of block %" PRIu32
                    ", pool has %" PRIu32 " blocks", op, id, pool->n_blocks);
        return NULL;
    }

    if (pool->blocks[id].ref == 0) {
        kvs_err_set(err, KVS_EINVAL, "kv pool: %s of block %" PRIu32
                    ", which is free", op, id);
        return NULL;
    }

    return &pool->blocks[id];
}


int
kvs_kv_pool_ref(kvs_kv_pool_t *pool, uint32_t id, kvs_err_t *err)
{
    kvs_kv_block_t  *b;

    b = kvs_kv_pool_held(pool, id, "ref", err);
    if (b == NULL) {
        return KVS_EINVAL;
    }

    if (b->ref == UINT32_MAX) {
        return kvs_err_set(err, KVS_ERANGE, "kv pool: block %" PRIu32
                           " has too many owners", id);
    }

    b->ref++;

    return KVS_OK;
}


int
kvs_kv_pool_unref(kvs_kv_pool_t *pool, uint32_t id, kvs_err_t *err)
{
    kvs_kv_block_t  *b;

    b = kvs_kv_pool_held(pool, id, "unref", err);
    if (b == NULL) {
        return KVS_EINVAL;
    }

    if (--b->ref == 0) {
        b->next_free = pool->free_head;
        pool->free_head = id;
        pool->n_free++;
    }

    return KVS_OK;
}


uint32_t
kvs_kv_pool_refcount(const kvs_kv_pool_t *pool, uint32_t id)
{
    return id < pool->n_blocks ? pool->blocks[id].ref : 0;
}


int
kvs_kv_pool_check(const kvs_kv_pool_t *pool, kvs_err_t *err)
{
    uint32_t  i, id, n_zero;

    if (pool->n_free > pool->n_blocks) {
        return kvs_err_set(err, KVS_EFORMAT, "kv pool: %" PRIu32 " free of %"
                           PRIu32 " blocks", pool->n_free, pool->n_blocks);
    }

    /*
     * A walk of exactly n_free steps that then meets the end proves the
     * list has n_free distinct entries: a repeated entry would be a cycle,
     * and a cycle never reaches the end.
     */
    id = pool->free_head;

    for (i = 0; i < pool->n_free; i++) {
        if (id >= pool->n_blocks) {
            return kvs_err_set(err, KVS_EFORMAT, "kv pool: free list entry %"
                               PRIu32 " is block %" PRIu32 ", expected %"
                               PRIu32 " free blocks", i, id, pool->n_free);
        }

        if (pool->blocks[id].ref != 0) {
            return kvs_err_set(err, KVS_EFORMAT, "kv pool: block %" PRIu32
                               " is on the free list with refcount %" PRIu32,
                               id, pool->blocks[id].ref);
        }

        id = pool->blocks[id].next_free;
    }

    if (id != KVS_KV_NONE) {
        return kvs_err_set(err, KVS_EFORMAT, "kv pool: free list is longer "
                           "than its count %" PRIu32 " (or cycles)",
                           pool->n_free);
    }

    n_zero = 0;
    for (i = 0; i < pool->n_blocks; i++) {
        n_zero += pool->blocks[i].ref == 0;
    }

    if (n_zero != pool->n_free) {
        return kvs_err_set(err, KVS_EFORMAT, "kv pool: %" PRIu32 " blocks "
                           "have refcount 0 but %" PRIu32 " are on the free "
                           "list", n_zero, pool->n_free);
    }

    return KVS_OK;
}
