/*
 * test_kv_pool: the KV block pool and block tables: all-or-nothing
 * allocation, refcounted sharing, errors that leave the pool intact, the
 * position -> (block, offset) map for several block sizes with waste under
 * one block, fork and release, sizing arithmetic, and a seeded random
 * stress that checks every invariant after each step and ends with every
 * block back in the pool.
 */

#include "kvs_test.h"

#include "base/kvs_hash.h"
#include "kv/kvs_kv_pool.h"
#include "kv/kvs_kv_table.h"

#define N_TABLES  24
#define N_STEPS   4000


/* A copy of everything a failing call must leave as it was. */
typedef struct {
    uint32_t         n_free;
    uint32_t         free_head;
    kvs_kv_block_t  *blocks;
} snap_t;


static void
snap_take(snap_t *s, const kvs_kv_pool_t *p)
{
    size_t  n;

    n = (size_t) p->n_blocks * sizeof(kvs_kv_block_t);
    s->n_free = p->n_free;
    s->free_head = p->free_head;
    s->blocks = malloc(n);
    assert_non_null(s->blocks);
    memcpy(s->blocks, p->blocks, n);
}


static void
snap_same(snap_t *s, const kvs_kv_pool_t *p)
{
    assert_int_equal(s->n_free, p->n_free);
    assert_int_equal(s->free_head, p->free_head);
    assert_memory_equal(s->blocks, p->blocks,
                        (size_t) p->n_blocks * sizeof(kvs_kv_block_t));
    free(s->blocks);
    s->blocks = NULL;
}


static void
pool_ok(const kvs_kv_pool_t *p)
{
    kvs_err_t  err;

    if (kvs_kv_pool_check(p, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
}


static kvs_kv_pool_t *
pool_new(uint32_t n, uint32_t bt)
{
    kvs_kv_pool_t  *p;
    kvs_err_t       err;

    if (kvs_kv_pool_new(&p, n, bt, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }

    return p;
}


static void
test_pool_new(void **state)
{
    kvs_kv_pool_t  *p;
    kvs_err_t       err;
    uint32_t        ids[5], i;

    p = (kvs_kv_pool_t *) 1;
    assert_int_equal(kvs_kv_pool_new(&p, 0, 16, &err), KVS_EINVAL);
    assert_null(p);
    assert_int_equal(kvs_kv_pool_new(&p, KVS_KV_MAX_BLOCKS + 1, 16, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_kv_pool_new(&p, 8, 0, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "block of 0 tokens"));
    assert_int_equal(kvs_kv_pool_new(&p, 8, 1025, &err), KVS_EINVAL);
    assert_null(p);

    p = pool_new(5, 1024);
    assert_int_equal(p->block_tokens, 1024);
    assert_int_equal(kvs_kv_pool_free_count(p), 5);
    assert_int_equal(kvs_kv_pool_used_count(p), 0);
    pool_ok(p);

    /* a fresh pool hands out ascending ids, each with one owner */
    assert_int_equal(kvs_kv_pool_alloc(p, 5, ids, &err), KVS_OK);
    for (i = 0; i < 5; i++) {
        assert_int_equal(ids[i], i);
        assert_int_equal(kvs_kv_pool_refcount(p, i), 1);
    }
    assert_int_equal(kvs_kv_pool_free_count(p), 0);
    assert_int_equal(p->free_head, KVS_KV_NONE);
    pool_ok(p);

    for (i = 0; i < 5; i++) {
        assert_int_equal(kvs_kv_pool_unref(p, ids[i], &err), KVS_OK);
    }
    assert_int_equal(kvs_kv_pool_free_count(p), 5);
    pool_ok(p);
    kvs_kv_pool_free(p);
    kvs_kv_pool_free(NULL);
}


static void
test_alloc_all_or_nothing(void **state)
{
    kvs_kv_pool_t  *p;
    kvs_err_t       err;
    snap_t          s;
    uint32_t        a[4], b[7], i, j;

    p = pool_new(10, 16);
    assert_int_equal(kvs_kv_pool_alloc(p, 4, a, &err), KVS_OK);

    memset(b, 0xab, sizeof(b));
    snap_take(&s, p);
    assert_int_equal(kvs_kv_pool_alloc(p, 7, b, &err), KVS_KV_EFULL);
    assert_string_equal(err.msg, "kv pool has 6 free blocks, need 7");
    snap_same(&s, p);
    for (i = 0; i < 7; i++) {
        assert_int_equal(b[i], 0xabababab);
    }
    pool_ok(p);

    assert_int_equal(kvs_kv_pool_alloc(p, 0, NULL, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_alloc(p, 6, b, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_free_count(p), 0);
    assert_int_equal(kvs_kv_pool_used_count(p), 10);

    /* all ten ids distinct */
    for (i = 0; i < 10; i++) {
        for (j = i + 1; j < 10; j++) {
            assert_int_not_equal(i < 4 ? a[i] : b[i - 4],
                                 j < 4 ? a[j] : b[j - 4]);
        }
    }

    snap_take(&s, p);
    assert_int_equal(kvs_kv_pool_alloc(p, 1, b, &err), KVS_KV_EFULL);
    assert_string_equal(err.msg, "kv pool has 0 free blocks, need 1");
    snap_same(&s, p);
    pool_ok(p);

    for (i = 0; i < 4; i++) {
        assert_int_equal(kvs_kv_pool_unref(p, a[i], &err), KVS_OK);
    }
    for (i = 0; i < 6; i++) {
        assert_int_equal(kvs_kv_pool_unref(p, b[i], &err), KVS_OK);
    }
    assert_int_equal(kvs_kv_pool_free_count(p), 10);
    pool_ok(p);
    kvs_kv_pool_free(p);
}


static void
test_refcount_sharing(void **state)
{
    kvs_kv_pool_t  *p;
    kvs_err_t       err;
    uint32_t        id, other, again;

    p = pool_new(4, 16);
    assert_int_equal(kvs_kv_pool_alloc(p, 1, &id, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_alloc(p, 1, &other, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_ref(p, id, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_ref(p, id, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_refcount(p, id), 3);
    assert_int_equal(kvs_kv_pool_used_count(p), 2);
    pool_ok(p);

    /* the block stays held until its last owner lets go */
    assert_int_equal(kvs_kv_pool_unref(p, id, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_unref(p, id, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_refcount(p, id), 1);
    assert_int_equal(kvs_kv_pool_free_count(p), 2);
    pool_ok(p);

    assert_int_equal(kvs_kv_pool_unref(p, id, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_refcount(p, id), 0);
    assert_int_equal(kvs_kv_pool_free_count(p), 3);
    pool_ok(p);

    /* the free list is LIFO: the block just released is reused first */
    assert_int_equal(kvs_kv_pool_alloc(p, 1, &again, &err), KVS_OK);
    assert_int_equal(again, id);

    assert_int_equal(kvs_kv_pool_unref(p, other, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_unref(p, again, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_free_count(p), 4);
    pool_ok(p);
    kvs_kv_pool_free(p);
}


static void
test_unref_errors(void **state)
{
    kvs_kv_pool_t  *p;
    kvs_err_t       err;
    snap_t          s;
    uint32_t        ids[2];

    p = pool_new(6, 16);
    assert_int_equal(kvs_kv_pool_alloc(p, 2, ids, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_unref(p, ids[0], &err), KVS_OK);

    snap_take(&s, p);

    assert_int_equal(kvs_kv_pool_unref(p, ids[0], &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "which is free"));
    assert_int_equal(kvs_kv_pool_unref(p, 5, &err), KVS_EINVAL);
    assert_int_equal(kvs_kv_pool_unref(p, 6, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "unref of block 6, pool has 6 blocks"));
    assert_int_equal(kvs_kv_pool_unref(p, UINT32_MAX, &err), KVS_EINVAL);
    assert_int_equal(kvs_kv_pool_ref(p, ids[0], &err), KVS_EINVAL);
    assert_int_equal(kvs_kv_pool_ref(p, 6, &err), KVS_EINVAL);
    assert_int_equal(kvs_kv_pool_refcount(p, 6), 0);
    assert_int_equal(kvs_kv_pool_unref(p, ids[0], NULL), KVS_EINVAL);

    snap_same(&s, p);
    pool_ok(p);

    /* the owner count saturates with an error rather than wrapping */
    p->blocks[ids[1]].ref = UINT32_MAX;
    assert_int_equal(kvs_kv_pool_ref(p, ids[1], &err), KVS_ERANGE);
    assert_int_equal(p->blocks[ids[1]].ref, UINT32_MAX);
    p->blocks[ids[1]].ref = 1;

    assert_int_equal(kvs_kv_pool_unref(p, ids[1], &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_free_count(p), 6);
    pool_ok(p);
    kvs_kv_pool_free(p);
}


/* The checker itself must notice each kind of damage. */
static void
test_check_detects(void **state)
{
    kvs_kv_pool_t  *p;
    kvs_err_t       err;
    uint32_t        ids[2];

    p = pool_new(4, 16);
    assert_int_equal(kvs_kv_pool_alloc(p, 2, ids, &err), KVS_OK);
    pool_ok(p);

    p->blocks[p->free_head].ref = 1;              /* held, yet listed */
    assert_int_equal(kvs_kv_pool_check(p, &err), KVS_EFORMAT);
    assert_non_null(strstr(err.msg, "on the free list with refcount 1"));
    p->blocks[p->free_head].ref = 0;
    pool_ok(p);

    p->blocks[ids[0]].ref = 0;                    /* free, not listed */
    assert_int_equal(kvs_kv_pool_check(p, &err), KVS_EFORMAT);
    assert_non_null(strstr(err.msg, "3 blocks have refcount 0"));
    p->blocks[ids[0]].ref = 1;

    p->n_free = 1;                                /* list longer than count */
    assert_int_equal(kvs_kv_pool_check(p, &err), KVS_EFORMAT);
    p->n_free = 2;

    p->blocks[p->blocks[p->free_head].next_free].next_free = p->free_head;
    assert_int_equal(kvs_kv_pool_check(p, &err), KVS_EFORMAT);  /* cycle */
    p->blocks[p->blocks[p->free_head].next_free].next_free = KVS_KV_NONE;
    pool_ok(p);

    p->n_free = 3;                                /* list shorter */
    assert_int_equal(kvs_kv_pool_check(p, &err), KVS_EFORMAT);
    p->n_free = 2;
    pool_ok(p);

    kvs_kv_pool_unref(p, ids[0], NULL);
    kvs_kv_pool_unref(p, ids[1], NULL);
    pool_ok(p);
    kvs_kv_pool_free(p);
}


/*
 * Grows two interleaved tables by uneven steps; checks every position's
 * slot against the definition (block p / bt, offset p % bt), that no two
 * positions of either table share a slot, and that the blocks held are
 * exactly ceil(n / bt) per table.
 */
static void
map_case(uint32_t bt)
{
    static const uint32_t  steps[] = { 1, 1, 5, 17, 64, 3, 100, 2, 250 };
    kvs_kv_pool_t         *p;
    kvs_kv_table_t         t[2];
    kvs_err_t              err;
    uint32_t               n, i, k, pos, blk, off, want_blocks;
    uint8_t               *seen;

    p = pool_new(2 * (1000 / bt + 2), bt);
    memset(t, 0, sizeof(t));
    seen = calloc((size_t) p->n_blocks * bt, 1);
    assert_non_null(seen);

    n = 0;
    for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        n += steps[i];

        for (k = 0; k < 2; k++) {
            if (kvs_kv_table_reserve(&t[k], p, n + k, &err) != KVS_OK) {
                fail_msg("%s", err.msg);
            }
            assert_int_equal(t[k].n_tokens, n + k);
            want_blocks = (n + k + bt - 1) / bt;
            assert_int_equal(t[k].n_blocks, want_blocks);
            /* the only waste is the last block's unfilled tail */
            assert_true(t[k].n_blocks * bt - t[k].n_tokens < bt);
            assert_int_equal(kvs_kv_table_check(&t[k], p, &err), KVS_OK);
            assert_int_equal(kvs_kv_table_blocks_needed(&t[k], p, n + k), 0);
        }

        assert_int_equal(kvs_kv_pool_used_count(p),
                         t[0].n_blocks + t[1].n_blocks);
        pool_ok(p);

        memset(seen, 0, (size_t) p->n_blocks * bt);
        for (k = 0; k < 2; k++) {
            for (pos = 0; pos < t[k].n_tokens; pos++) {
                assert_int_equal(kvs_kv_table_slot(&t[k], pos, &blk, &off,
                                                   &err), KVS_OK);
                assert_int_equal(blk, t[k].blocks[pos / bt]);
                assert_int_equal(off, pos % bt);
                assert_true(blk < p->n_blocks);
                assert_int_equal(seen[(size_t) blk * bt + off], 0);
                seen[(size_t) blk * bt + off] = 1;
            }

            assert_int_equal(kvs_kv_table_slot(&t[k], t[k].n_tokens, &blk,
                                               &off, &err), KVS_ERANGE);
        }
    }

    /* shrinking is a no-op; one more token past a full block needs one */
    assert_int_equal(kvs_kv_table_reserve(&t[0], p, 1, &err), KVS_OK);
    assert_int_equal(t[0].n_tokens, n);
    assert_int_equal(kvs_kv_table_blocks_needed(&t[0], p,
                                                t[0].n_blocks * bt + 1), 1);

    assert_int_equal(kvs_kv_table_release(&t[0], p, &err), KVS_OK);
    assert_int_equal(kvs_kv_table_release(&t[1], p, &err), KVS_OK);
    assert_null(t[0].blocks);
    assert_int_equal(t[1].n_tokens, 0);
    assert_int_equal(kvs_kv_pool_free_count(p), p->n_blocks);
    pool_ok(p);

    free(seen);
    kvs_kv_pool_free(p);
}


static void
test_table_map(void **state)
{
    map_case(1);
    map_case(16);
    map_case(64);
}


static void
test_table_full(void **state)
{
    kvs_kv_pool_t   *p, *q;
    kvs_kv_table_t   t, u, saved;
    kvs_err_t        err;
    snap_t           s;

    p = pool_new(4, 16);
    memset(&t, 0, sizeof(t));
    memset(&u, 0, sizeof(u));

    assert_int_equal(kvs_kv_table_reserve(&t, p, 20, &err), KVS_OK);
    assert_int_equal(kvs_kv_table_reserve(&u, p, 16, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_free_count(p), 1);

    /* 20 -> 49 tokens needs 2 more blocks, only 1 is free */
    saved = t;
    snap_take(&s, p);
    assert_int_equal(kvs_kv_table_blocks_needed(&t, p, 49), 2);
    assert_int_equal(kvs_kv_table_reserve(&t, p, 49, &err), KVS_KV_EFULL);
    assert_string_equal(err.msg,
                        "kv pool has 1 free blocks, need 2 for 49 tokens");
    snap_same(&s, p);
    assert_memory_equal(&saved, &t, sizeof(t));

    /* 48 fits exactly */
    assert_int_equal(kvs_kv_table_reserve(&t, p, 48, &err), KVS_OK);
    assert_int_equal(t.n_blocks, 3);
    assert_int_equal(kvs_kv_pool_free_count(p), 0);
    pool_ok(p);

    /* a table built on 16-token blocks is refused by an 8-token pool */
    q = pool_new(4, 8);
    assert_int_equal(kvs_kv_table_reserve(&t, q, 60, &err), KVS_EINVAL);
    assert_int_equal(kvs_kv_pool_free_count(q), 4);
    kvs_kv_pool_free(q);

    assert_int_equal(kvs_kv_table_release(&u, p, &err), KVS_OK);
    assert_int_equal(kvs_kv_table_release(&t, p, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_free_count(p), 4);
    pool_ok(p);
    kvs_kv_pool_free(p);
}


static void
test_fork_release(void **state)
{
    kvs_kv_pool_t   *p;
    kvs_kv_table_t   a, b, c;
    kvs_err_t        err;
    uint32_t         i, blk_a, blk_b, off_a, off_b;

    p = pool_new(8, 16);
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    memset(&c, 0, sizeof(c));

    assert_int_equal(kvs_kv_table_last_shared(&a, p), 0);
    assert_int_equal(kvs_kv_table_reserve(&a, p, 40, &err), KVS_OK);
    assert_int_equal(kvs_kv_table_last_shared(&a, p), 0);
    assert_int_equal(kvs_kv_table_fork(&b, &a, p, &err), KVS_OK);

    assert_int_equal(b.n_tokens, 40);
    assert_int_equal(b.n_blocks, 3);
    assert_int_equal(kvs_kv_pool_used_count(p), 3);
    for (i = 0; i < 3; i++) {
        assert_int_equal(kvs_kv_pool_refcount(p, a.blocks[i]), 2);
    }
    for (i = 0; i < 40; i++) {
        kvs_kv_table_slot(&a, i, &blk_a, &off_a, NULL);
        kvs_kv_table_slot(&b, i, &blk_b, &off_b, NULL);
        assert_int_equal(blk_a, blk_b);
        assert_int_equal(off_a, off_b);
    }
    /* the partially filled last block is shared: a writer must copy it */
    assert_int_equal(kvs_kv_table_last_shared(&a, p), 1);
    assert_int_equal(kvs_kv_table_last_shared(&b, p), 1);

    /* into a table that holds blocks: refused, nothing changes */
    assert_int_equal(kvs_kv_table_fork(&b, &a, p, &err), KVS_EINVAL);
    assert_int_equal(kvs_kv_pool_refcount(p, a.blocks[0]), 2);

    /* growing one side past the shared blocks takes private ones */
    assert_int_equal(kvs_kv_table_reserve(&b, p, 70, &err), KVS_OK);
    assert_int_equal(b.n_blocks, 5);
    assert_int_equal(kvs_kv_pool_refcount(p, b.blocks[4]), 1);
    assert_int_equal(kvs_kv_table_last_shared(&b, p), 0);

    /* fork of a fork: three owners of the first three */
    assert_int_equal(kvs_kv_table_fork(&c, &b, p, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_refcount(p, a.blocks[0]), 3);
    assert_int_equal(kvs_kv_pool_refcount(p, b.blocks[4]), 2);
    assert_int_equal(kvs_kv_pool_used_count(p), 5);

    /* release in any order; blocks come back only with their last owner */
    assert_int_equal(kvs_kv_table_release(&b, p, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_used_count(p), 5);
    assert_int_equal(kvs_kv_table_release(&a, p, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_used_count(p), 5);
    assert_int_equal(kvs_kv_table_last_shared(&c, p), 0);
    pool_ok(p);
    assert_int_equal(kvs_kv_table_release(&c, p, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_free_count(p), 8);
    pool_ok(p);

    /* a fork of an empty table is empty; releasing twice is harmless */
    assert_int_equal(kvs_kv_table_fork(&b, &a, p, &err), KVS_OK);
    assert_int_equal(b.n_blocks, 0);
    assert_int_equal(kvs_kv_table_release(&b, p, &err), KVS_OK);
    assert_int_equal(kvs_kv_table_release(&b, p, &err), KVS_OK);

    /* a table whose block was freed behind its back: release reports it
     * and still releases the rest */
    assert_int_equal(kvs_kv_table_reserve(&a, p, 33, &err), KVS_OK);
    assert_int_equal(kvs_kv_pool_unref(p, a.blocks[1], &err), KVS_OK);
    assert_int_equal(kvs_kv_table_check(&a, p, &err), KVS_EFORMAT);
    assert_int_equal(kvs_kv_table_fork(&b, &a, p, &err), KVS_EINVAL);
    assert_null(b.blocks);
    assert_int_equal(kvs_kv_table_release(&a, p, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "which is free"));
    assert_int_equal(kvs_kv_pool_free_count(p), 8);
    pool_ok(p);

    kvs_kv_pool_free(p);
}


static void
test_blocks_for_bytes(void **state)
{
    kvs_err_t  err;
    uint32_t   n;

    /* 10 bytes a token, 16 tokens: 160 bytes a block */
    assert_int_equal(kvs_kv_pool_blocks_for_bytes(1000, 10, 16, &n, &err),
                     KVS_OK);
    assert_int_equal(n, 6);
    assert_int_equal(kvs_kv_pool_blocks_for_bytes(960, 10, 16, &n, &err),
                     KVS_OK);
    assert_int_equal(n, 6);
    assert_int_equal(kvs_kv_pool_blocks_for_bytes(959, 10, 16, &n, &err),
                     KVS_OK);
    assert_int_equal(n, 5);
    assert_int_equal(kvs_kv_pool_blocks_for_bytes(159, 10, 16, &n, &err),
                     KVS_ERANGE);
    assert_int_equal(n, 0);
    assert_non_null(strstr(err.msg, "hold no block"));

    /* Llama-3-70B in bf16: 2 x 80 x 8 x 128 x 2 = 327680 bytes a token;
     * 80 GiB / (327680 x 16) = 16384 blocks */
    assert_int_equal(kvs_kv_pool_blocks_for_bytes(80ULL << 30, 327680, 16,
                                                  &n, &err), KVS_OK);
    assert_int_equal(n, 16384);

    assert_int_equal(kvs_kv_pool_blocks_for_bytes(1000, 0, 16, &n, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_kv_pool_blocks_for_bytes(1000, 10, 0, &n, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_kv_pool_blocks_for_bytes(1000, 10, 1025, &n, &err),
                     KVS_EINVAL);

    /* one block's bytes overflow 64 bits, or exactly fit */
    assert_int_equal(kvs_kv_pool_blocks_for_bytes(UINT64_MAX,
                                                  UINT64_MAX / 16 + 1, 16,
                                                  &n, &err), KVS_ERANGE);
    assert_non_null(strstr(err.msg, "overflows"));
    assert_int_equal(kvs_kv_pool_blocks_for_bytes(UINT64_MAX,
                                                  UINT64_MAX / 16, 16,
                                                  &n, &err), KVS_OK);
    assert_int_equal(n, 1);

    /* more blocks than the metadata can index: capped */
    assert_int_equal(kvs_kv_pool_blocks_for_bytes(UINT64_MAX, 1, 1, &n,
                                                  &err), KVS_OK);
    assert_int_equal(n, KVS_KV_MAX_BLOCKS);
    assert_int_equal(kvs_kv_pool_blocks_for_bytes(
                         (uint64_t) KVS_KV_MAX_BLOCKS * 64 - 1, 8, 8,
                         &n, &err), KVS_OK);
    assert_int_equal(n, KVS_KV_MAX_BLOCKS - 1);
}


/* Recounts every block's owners from the tables and compares with the
 * pool; checks every table, the pool, and that blocks with one owner are
 * in exactly one table slot range. */
static void
stress_verify(const kvs_kv_pool_t *p, kvs_kv_table_t *t, uint32_t *count)
{
    kvs_err_t  err;
    uint32_t   i, k, used;

    pool_ok(p);
    memset(count, 0, (size_t) p->n_blocks * sizeof(uint32_t));

    for (k = 0; k < N_TABLES; k++) {
        if (kvs_kv_table_check(&t[k], p, &err) != KVS_OK) {
            fail_msg("table %u: %s", k, err.msg);
        }
        assert_true(t[k].n_blocks * p->block_tokens - t[k].n_tokens
                    < p->block_tokens || t[k].n_blocks == 0);

        for (i = 0; i < t[k].n_blocks; i++) {
            count[t[k].blocks[i]]++;
        }
    }

    used = 0;
    for (i = 0; i < p->n_blocks; i++) {
        assert_int_equal(count[i], kvs_kv_pool_refcount(p, i));
        used += count[i] != 0;
    }
    assert_int_equal(used, kvs_kv_pool_used_count(p));
}


static void
stress_case(uint32_t bt, uint64_t seed)
{
    kvs_kv_pool_t   *p;
    kvs_kv_table_t   t[N_TABLES], saved;
    kvs_err_t        err;
    snap_t           s;
    uint64_t         r;
    uint32_t        *count, step, k, j, n, fails, forks;
    int              rc;

    p = pool_new(97 + (uint32_t) (seed % 64), bt);
    memset(t, 0, sizeof(t));
    count = malloc((size_t) p->n_blocks * sizeof(uint32_t));
    assert_non_null(count);
    fails = 0;
    forks = 0;

    for (step = 0; step < N_STEPS; step++) {
        r = kvs_splitmix64(&seed);
        k = (uint32_t) (r % N_TABLES);
        j = (uint32_t) ((r >> 8) % N_TABLES);

        switch ((r >> 16) % 8) {

        case 0:
            assert_int_equal(kvs_kv_table_release(&t[k], p, &err), KVS_OK);
            break;

        case 1:
            if (t[k].n_blocks != 0 || k == j) {
                break;
            }
            assert_int_equal(kvs_kv_table_fork(&t[k], &t[j], p, &err),
                             KVS_OK);
            forks += t[j].n_blocks != 0;
            break;

        default:
            /* grow by up to three blocks' worth, sometimes past the pool */
            n = t[k].n_tokens + 1 + (uint32_t) ((r >> 24) % (3 * bt));
            saved = t[k];
            snap_take(&s, p);
            rc = kvs_kv_table_reserve(&t[k], p, n, &err);

            if (rc == KVS_OK) {
                free(s.blocks);
                assert_int_equal(t[k].n_tokens, n);
                break;
            }

            assert_int_equal(rc, KVS_KV_EFULL);
            assert_true(kvs_kv_table_blocks_needed(&t[k], p, n)
                        > kvs_kv_pool_free_count(p));
            snap_same(&s, p);
            assert_memory_equal(&saved, &t[k], sizeof(saved));
            fails++;

            /* what a scheduler does: preempt someone, freeing blocks */
            assert_int_equal(kvs_kv_table_release(&t[j], p, &err), KVS_OK);
            break;
        }

        stress_verify(p, t, count);
    }

    /* the run must have exercised full pools and real sharing */
    assert_true(fails > 10);
    assert_true(forks > 10);

    for (k = 0; k < N_TABLES; k++) {
        assert_int_equal(kvs_kv_table_release(&t[k], p, &err), KVS_OK);
    }
    assert_int_equal(kvs_kv_pool_free_count(p), p->n_blocks);
    pool_ok(p);

    free(count);
    kvs_kv_pool_free(p);
}


static void
test_stress(void **state)
{
    stress_case(1, 1);
    stress_case(16, 2);
    stress_case(64, 3);
    stress_case(16, 0x5eed);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_pool_new),
        cmocka_unit_test(test_alloc_all_or_nothing),
        cmocka_unit_test(test_refcount_sharing),
        cmocka_unit_test(test_unref_errors),
        cmocka_unit_test(test_check_detects),
        cmocka_unit_test(test_table_map),
        cmocka_unit_test(test_table_full),
        cmocka_unit_test(test_fork_release),
        cmocka_unit_test(test_blocks_for_bytes),
        cmocka_unit_test(test_stress),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
