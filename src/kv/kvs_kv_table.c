/*
 * kvs_kv_table: a sequence's block table over a kvs_kv_pool (see
 * kvs_kv_table.h for the invariants, holes included).  Every mutation
 * plans first (block count, pool capacity, id array growth) and commits
 * only when nothing can fail any more.
 */

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_buf.h"
#include "kvs_kv_table.h"


/* Blocks covering n positions; in 64 bits since n + block_tokens - 1
 * may exceed 32. */
static uint32_t
kvs_kv_table_blocks_for(uint32_t n, uint32_t block_tokens)
{
    return (uint32_t) (((uint64_t) n + block_tokens - 1) / block_tokens);
}


static int
kvs_kv_table_same_pool(const kvs_kv_table_t *table,
    const kvs_kv_pool_t *pool, kvs_err_t *err)
{
    if (table->block_tokens != 0
        && table->block_tokens != pool->block_tokens)
    {
        return kvs_err_set(err, KVS_EINVAL, "kv table: built on blocks of %"
                           PRIu32 " tokens, pool has %" PRIu32,
                           table->block_tokens, pool->block_tokens);
    }

    return KVS_OK;
}


uint32_t
kvs_kv_table_blocks_needed(const kvs_kv_table_t *table,
    const kvs_kv_pool_t *pool, uint32_t n_tokens)
{
    uint32_t  need;

    need = kvs_kv_table_blocks_for(n_tokens, pool->block_tokens);

    return need > table->n_blocks ? need - table->n_blocks : 0;
}


int
kvs_kv_table_reserve(kvs_kv_table_t *table, kvs_kv_pool_t *pool,
    uint32_t n_tokens, kvs_err_t *err)
{
    int       rc;
    uint32_t  add;

    rc = kvs_kv_table_same_pool(table, pool, err);
    if (rc != KVS_OK) {
        return rc;
    }

    if (n_tokens <= table->n_tokens) {
        return KVS_OK;
    }

    add = kvs_kv_table_blocks_needed(table, pool, n_tokens);

    if (add > kvs_kv_pool_free_count(pool)) {
        return kvs_err_set(err, KVS_KV_EFULL, "kv pool has %" PRIu32
                           " free blocks, need %" PRIu32 " for %" PRIu32
                           " tokens", kvs_kv_pool_free_count(pool), add,
                           n_tokens);
    }

    /* growing the array changes nothing the caller can observe */
    if (kvs_grow((void **) &table->blocks, &table->cap,
                 (size_t) table->n_blocks + add, sizeof(uint32_t))
        != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM, "kv table: out of memory for %"
                           PRIu32 " block ids", table->n_blocks + add);
    }

    rc = kvs_kv_pool_alloc(pool, add, table->blocks + table->n_blocks, err);
    if (rc != KVS_OK) {
        return rc;
    }

    table->n_blocks += add;
    table->n_tokens = n_tokens;
    table->block_tokens = pool->block_tokens;

    return KVS_OK;
}


int
kvs_kv_table_slot(const kvs_kv_table_t *table, uint32_t pos,
    uint32_t *block, uint32_t *offset, kvs_err_t *err)
{
    if (pos >= table->n_tokens) {
        return kvs_err_set(err, KVS_ERANGE, "kv table: position %" PRIu32
                           " is past the %" PRIu32 " covered", pos,
                           table->n_tokens);
    }

    if (pos / table->block_tokens < table->n_dropped) {
        return kvs_err_set(err, KVS_ERANGE, "kv table: position %" PRIu32
                           " left the window; its block was given back",
                           pos);
    }

    *block = table->blocks[pos / table->block_tokens];
    *offset = pos % table->block_tokens;

    return KVS_OK;
}


int
kvs_kv_table_fork(kvs_kv_table_t *dst, const kvs_kv_table_t *src,
    kvs_kv_pool_t *pool, kvs_err_t *err)
{
    int  rc;

    if (dst == src) {
        return kvs_err_set(err, KVS_EINVAL, "kv table: fork into a table "
                           "that is not empty");
    }

    rc = kvs_kv_table_same_pool(src, pool, err);
    if (rc != KVS_OK) {
        return rc;
    }

    return kvs_kv_table_share(dst, pool, src->blocks, src->n_tokens, err);
}


int
kvs_kv_table_share(kvs_kv_table_t *dst, kvs_kv_pool_t *pool,
    const uint32_t *blocks, uint32_t n_tokens, kvs_err_t *err)
{
    int       rc;
    uint32_t  i, n, holes;

    if (dst->n_blocks != 0 || dst->n_tokens != 0) {
        return kvs_err_set(err, KVS_EINVAL, "kv table: sharing into a "
                           "table that is not empty");
    }

    rc = kvs_kv_table_same_pool(dst, pool, err);
    if (rc != KVS_OK) {
        return rc;
    }

    n = (uint32_t) (((uint64_t) n_tokens + pool->block_tokens - 1)
                    / pool->block_tokens);

    /* a windowed source's leading holes stay holes */
    for (holes = 0; holes < n && blocks[holes] == KVS_KV_HOLE; holes++) {
        /* void */
    }

    for (i = holes; i < n; i++) {
        if (kvs_kv_pool_refcount(pool, blocks[i]) == 0) {
            return kvs_err_set(err, KVS_EINVAL, "kv table: block %" PRIu32
                               " of the source is not held", blocks[i]);
        }

        if (kvs_kv_pool_refcount(pool, blocks[i]) == UINT32_MAX) {
            return kvs_err_set(err, KVS_ERANGE, "kv pool: block %" PRIu32
                               " has too many owners", blocks[i]);
        }
    }

    if (kvs_grow((void **) &dst->blocks, &dst->cap, n, sizeof(uint32_t))
        != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM, "kv table: out of memory for %"
                           PRIu32 " block ids", n);
    }

    /* every id was checked held and below the count limit: ref cannot
     * fail (a table or the prefix cache never holds one id twice) */
    for (i = 0; i < n; i++) {
        if (i >= holes) {
            (void) kvs_kv_pool_ref(pool, blocks[i], NULL);
        }

        dst->blocks[i] = blocks[i];
    }

    dst->n_blocks = n;
    dst->n_dropped = holes;
    dst->n_tokens = n_tokens;
    dst->block_tokens = pool->block_tokens;

    return KVS_OK;
}


int
kvs_kv_table_last_shared(const kvs_kv_table_t *table,
    const kvs_kv_pool_t *pool)
{
    if (table->n_blocks == 0) {
        return 0;
    }

    return kvs_kv_pool_refcount(pool, table->blocks[table->n_blocks - 1]) > 1;
}


int
kvs_kv_table_unshare(kvs_kv_table_t *table, kvs_kv_pool_t *pool,
    uint32_t pos, uint32_t *src, uint32_t *dst, kvs_err_t *err)
{
    int       rc;
    uint32_t  i, id;

    *src = KVS_KV_NONE;
    *dst = KVS_KV_NONE;

    /* the block may hold pos without the table covering it yet: the
     * first position after a fork lies in the shared last block */
    i = table->block_tokens != 0 ? pos / table->block_tokens : 0;

    if (i >= table->n_blocks) {
        return kvs_err_set(err, KVS_ERANGE, "kv table: position %" PRIu32
                           " is past the table's %" PRIu32 " blocks", pos,
                           table->n_blocks);
    }

    if (kvs_kv_pool_refcount(pool, table->blocks[i]) <= 1) {
        return KVS_OK;
    }

    /* plan: one new block; commit: swap it in, drop our hold on the old
     * one (others still hold it, so the unref cannot free or fail) */
    rc = kvs_kv_pool_alloc(pool, 1, &id, err);
    if (rc != KVS_OK) {
        return rc;
    }

    *src = table->blocks[i];
    *dst = id;
    table->blocks[i] = id;
    (void) kvs_kv_pool_unref(pool, *src, NULL);

    return KVS_OK;
}


int
kvs_kv_table_release(kvs_kv_table_t *table, kvs_kv_pool_t *pool,
    kvs_err_t *err)
{
    int        rc, first;
    uint32_t   i;
    kvs_err_t  e;

    first = KVS_OK;

    /* in reverse, so that the LIFO free list hands the blocks out again in
     * the order this table had them */
    for (i = table->n_blocks; i > table->n_dropped; i--) {
        rc = kvs_kv_pool_unref(pool, table->blocks[i - 1], &e);
        if (rc != KVS_OK && first == KVS_OK) {
            first = kvs_err_set(err, rc, "%s", e.msg);
        }
    }

    free(table->blocks);
    memset(table, 0, sizeof(kvs_kv_table_t));

    return first;
}


void
kvs_kv_table_drop(kvs_kv_table_t *table, kvs_kv_pool_t *pool, uint32_t pos,
    uint32_t *dropped)
{
    uint32_t  end;

    *dropped = 0;

    if (table->block_tokens == 0) {
        return;
    }

    /* blocks [0, end) hold only positions before pos */
    end = pos / table->block_tokens;
    end = end < table->n_blocks ? end : table->n_blocks;

    for ( ; table->n_dropped < end; table->n_dropped++) {
        (void) kvs_kv_pool_unref(pool, table->blocks[table->n_dropped],
                                 NULL);
        table->blocks[table->n_dropped] = KVS_KV_HOLE;
        (*dropped)++;
    }
}


int
kvs_kv_table_check(const kvs_kv_table_t *table, const kvs_kv_pool_t *pool,
    kvs_err_t *err)
{
    uint32_t  i;

    if (table->n_blocks == 0 && table->n_tokens == 0) {
        return KVS_OK;
    }

    if (table->block_tokens != pool->block_tokens) {
        return kvs_err_set(err, KVS_EFORMAT, "kv table: blocks of %" PRIu32
                           " tokens, pool has %" PRIu32,
                           table->block_tokens, pool->block_tokens);
    }

    if (table->n_blocks != kvs_kv_table_blocks_for(table->n_tokens,
                                                   table->block_tokens)
        || table->n_blocks > table->cap)
    {
        return kvs_err_set(err, KVS_EFORMAT, "kv table: %" PRIu32 " blocks "
                           "for %" PRIu32 " tokens of %" PRIu32 " per block",
                           table->n_blocks, table->n_tokens,
                           table->block_tokens);
    }

    if (table->n_dropped > table->n_blocks) {
        return kvs_err_set(err, KVS_EFORMAT, "kv table: %" PRIu32 " holes "
                           "in %" PRIu32 " entries", table->n_dropped,
                           table->n_blocks);
    }

    for (i = 0; i < table->n_dropped; i++) {
        if (table->blocks[i] != KVS_KV_HOLE) {
            return kvs_err_set(err, KVS_EFORMAT, "kv table: entry %" PRIu32
                               " is block %" PRIu32 ", not a hole, among "
                               "the %" PRIu32 " dropped", i,
                               table->blocks[i], table->n_dropped);
        }
    }

    for (i = table->n_dropped; i < table->n_blocks; i++) {
        if (kvs_kv_pool_refcount(pool, table->blocks[i]) == 0) {
            return kvs_err_set(err, KVS_EFORMAT, "kv table: entry %" PRIu32
                               " is block %" PRIu32 ", which is not held",
                               i, table->blocks[i]);
        }
    }

    return KVS_OK;
}
