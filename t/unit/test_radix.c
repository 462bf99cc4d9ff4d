/*
 * test_radix: the prefix cache's tree (kv/kvs_radix.c) by hand, over the
 * simulated sequences of kvs_test_radix.h: namespaces and their keys,
 * match (hits, partial last block, the limit cap, the miss reasons),
 * insert (new, existing, split), COW on a shared partial block,
 * refcounts, and LRU eviction with locks.  Pins and TTLs are in
 * test_radix_pin.c, the names the cache gives and keeps (why a match
 * missed, the prefix index's) in test_radix_names.c, and the seeded
 * random run against an oracle in test_radix_check.c.
 */

#include "kvs_test.h"
#include "kvs_test_radix.h"


static void
test_ns_keys(void **state)
{
    env_t               e;
    kvs_radix_ns_t     *a, *b, *c, *d, *t;
    kvs_radix_key_t     k;
    kvs_err_t           err;
    seq_t               s;
    char                scope[KVS_RADIX_MAX_SCOPE + 1], other[16];
    int32_t             tok[8];

    env_init(&e, 32, BT, 8);

    /* one namespace per key, however often it is asked for */
    a = ns_get(&e, &key_g1);
    b = ns_get(&e, &key_g1);
    assert_ptr_equal(a, b);
    assert_int_equal(stats(&e).namespaces, 1);

    /* a scope is its bytes and length, not its address */
    k = key_g1;
    k.scope = "t1 and more";
    k.scope_len = 2;
    c = ns_get(&e, &key_t1);
    d = ns_get(&e, &k);
    assert_ptr_equal(c, d);
    assert_ptr_not_equal(a, c);
    k.scope_len = 1;
    t = ns_get(&e, &k);
    assert_ptr_not_equal(t, c);
    assert_ptr_not_equal(t, a);
    assert_int_equal(stats(&e).namespaces, 3);

    memset(scope, 'x', sizeof(scope));
    k.scope = scope;
    k.scope_len = KVS_RADIX_MAX_SCOPE + 1;
    d = NULL;
    assert_int_equal(kvs_radix_ns_get(e.r, &k, &d, &err), KVS_EINVAL);
    assert_int_equal(stats(&e).namespaces, 3);

    k.scope_len = KVS_RADIX_MAX_SCOPE;
    d = ns_get(&e, &k);
    assert_int_equal(stats(&e).namespaces, 4);
    env_ok(&e);

    /* a namespace with no hold and no node is freed */
    kvs_radix_ns_put(e.r, d);
    assert_int_equal(stats(&e).namespaces, 3);
    kvs_radix_ns_put(e.r, a);
    assert_int_equal(stats(&e).namespaces, 3);
    kvs_radix_ns_put(e.r, b);
    kvs_radix_ns_put(e.r, c);
    kvs_radix_ns_put(e.r, c);
    kvs_radix_ns_put(e.r, t);
    assert_int_equal(stats(&e).namespaces, 0);
    env_ok(&e);

    /* one with nodes outlives its holds and keeps its own scope bytes */
    memcpy(scope, "tenant-7", 8);
    k.scope = scope;
    k.scope_len = 8;
    a = ns_get(&e, &k);
    fill(tok, 8, 100);
    seq_fresh(&e, &s, 0, tok, 8);
    do_insert(&e, a, &s, 8, 0, 1);
    seq_end(&e, &s);
    kvs_radix_ns_put(e.r, a);
    assert_int_equal(stats(&e).namespaces, 1);
    env_ok(&e);

    memset(scope, 'z', 8);
    memcpy(other, "tenant-7", 8);
    k.scope = other;
    a = ns_get(&e, &k);
    match_is(&e, a, tok, 8, 8, KVS_RADIX_MISS_NONE, NULL);
    kvs_radix_ns_put(e.r, a);
    assert_int_equal(stats(&e).namespaces, 1);

    env_done(&e);
}


static void
test_match(void **state)
{
    env_t               e;
    kvs_radix_ns_t     *ns;
    kvs_radix_node_t   *n1, *n2;
    kvs_radix_match_t   m;
    seq_t               s1, s2;
    uint32_t            got[MAX_BLK], i;
    int32_t             tok[20], q[20];

    env_init(&e, 32, BT, 8);
    ns = ns_get(&e, &key_g1);
    fill(tok, 20, 100);

    /* empty tree */
    do_match(&e, ns, tok, 9, 1, 1, -1, &m, NULL);
    assert_int_equal(m.n_tokens, 0);
    assert_int_equal(m.n_blocks, 0);
    assert_null(m.node);
    assert_int_equal(m.miss, KVS_RADIX_MISS_EMPTY);
    assert_int_equal(m.miss_pos, 0);
    env_ok(&e);

    /* three blocks a b c for tokens 100..111 */
    seq_fresh(&e, &s1, 0, tok, 12);
    n1 = do_insert(&e, ns, &s1, 12, 0, 2);
    assert_int_equal(stats(&e).blocks, 3);
    for (i = 0; i < 3; i++) {
        assert_int_equal(ref(&e, s1.t.blocks[i]), 2);
    }
    env_ok(&e);

    /* exact, block-aligned hits, and hits that end inside a block: the
     * block holding the last reused token is returned too */
    do_match(&e, ns, tok, 12, 0, 3, -1, &m, got);
    assert_int_equal(m.n_tokens, 12);
    assert_int_equal(m.miss, KVS_RADIX_MISS_NONE);
    assert_ptr_equal(m.node, n1);
    assert_memory_equal(got, s1.t.blocks, 3 * sizeof(uint32_t));

    match_is(&e, ns, tok, 11, 11, KVS_RADIX_MISS_NONE, got);
    assert_memory_equal(got, s1.t.blocks, 3 * sizeof(uint32_t));
    match_is(&e, ns, tok, 9, 9, KVS_RADIX_MISS_NONE, got);
    assert_memory_equal(got, s1.t.blocks, 3 * sizeof(uint32_t));
    match_is(&e, ns, tok, 8, 8, KVS_RADIX_MISS_NONE, got);
    assert_memory_equal(got, s1.t.blocks, 2 * sizeof(uint32_t));
    match_is(&e, ns, tok, 1, 1, KVS_RADIX_MISS_NONE, got);
    assert_int_equal(got[0], s1.t.blocks[0]);

    /* past the cached end: nothing went further */
    match_is(&e, ns, tok, 15, 12, KVS_RADIX_MISS_EMPTY, got);
    assert_memory_equal(got, s1.t.blocks, 3 * sizeof(uint32_t));

    /* divergence inside a block, at a block boundary inside the edge,
     * and at the edge's last block */
    memcpy(q, tok, sizeof(q));
    q[6] = 999;
    match_is(&e, ns, q, 11, 6, KVS_RADIX_MISS_DIVERGED, got);
    assert_memory_equal(got, s1.t.blocks, 2 * sizeof(uint32_t));
    memcpy(q, tok, sizeof(q));
    q[4] = 999;
    match_is(&e, ns, q, 11, 4, KVS_RADIX_MISS_DIVERGED, got);
    assert_int_equal(got[0], s1.t.blocks[0]);
    memcpy(q, tok, sizeof(q));
    q[11] = 999;
    match_is(&e, ns, q, 12, 11, KVS_RADIX_MISS_DIVERGED, got);
    assert_memory_equal(got, s1.t.blocks, 3 * sizeof(uint32_t));

    /* matching takes no pool reference */
    for (i = 0; i < 3; i++) {
        assert_int_equal(ref(&e, s1.t.blocks[i]), 2);
    }
    seq_end(&e, &s1);
    env_ok(&e);

    /* a second turn: match with a lock, extend, insert; then the match
     * crosses two nodes */
    do_match(&e, ns, tok, 19, 1, 4, 0, &m, got);
    assert_int_equal(m.n_tokens, 12);
    assert_int_equal(m.miss, KVS_RADIX_MISS_EMPTY);
    assert_ptr_equal(m.node, n1);
    seq_adopt(&e, &s2, 0, tok, got, m.n_tokens);
    assert_int_equal(seq_grow(&e, &s2, tok, 20, NULL), KVS_OK);
    n2 = do_insert(&e, ns, &s2, 20, 0, 5);
    assert_ptr_not_equal(n2, n1);
    assert_int_equal(stats(&e).blocks, 5);
    for (i = 0; i < 5; i++) {
        assert_int_equal(ref(&e, s2.t.blocks[i]), 2);
    }
    kvs_radix_unlock(e.r, m.node);
    env_ok(&e);

    do_match(&e, ns, tok, 20, 0, 6, 0, &m, got);
    assert_int_equal(m.n_tokens, 20);
    assert_ptr_equal(m.node, n2);
    assert_memory_equal(got, s2.t.blocks, 5 * sizeof(uint32_t));
    do_match(&e, ns, tok, 14, 0, 6, 0, &m, got);
    assert_int_equal(m.n_tokens, 14);
    assert_int_equal(m.n_blocks, 4);
    assert_ptr_equal(m.node, n2);
    do_match(&e, ns, tok, 12, 0, 6, 0, &m, got);
    assert_int_equal(m.n_tokens, 12);
    assert_ptr_equal(m.node, n1);

    seq_end(&e, &s2);
    kvs_radix_ns_put(e.r, ns);
    env_done(&e);
}


static void
test_insert(void **state)
{
    env_t               e;
    kvs_radix_ns_t     *ns;
    kvs_radix_node_t   *n1, *n;
    kvs_radix_stats_t   st;
    seq_t               s1, s2, s3, s4;
    uint32_t            i;
    int32_t             tok[16], tok3[16], tok4[8];

    env_init(&e, 32, BT, 8);
    ns = ns_get(&e, &key_g1);
    fill(tok, 16, 100);
    fill(tok3, 16, 200);
    fill(tok4, 8, 300);

    seq_fresh(&e, &s1, 0, tok, 12);
    n1 = do_insert(&e, ns, &s1, 12, 0, 1);
    st = stats(&e);
    assert_int_equal(st.blocks, 3);

    /* the same tokens computed again in other blocks: the tree keeps its
     * own, takes no reference on the new ones, adds no node */
    seq_fresh(&e, &s2, 0, tok, 12);
    n = do_insert(&e, ns, &s2, 12, 0, 2);
    assert_ptr_equal(n, n1);
    assert_int_equal(stats(&e).blocks, 3);
    assert_int_equal(stats(&e).nodes, st.nodes);
    for (i = 0; i < 3; i++) {
        assert_int_equal(ref(&e, s1.t.blocks[i]), 2);
        assert_int_equal(ref(&e, s2.t.blocks[i]), 1);
    }
    match_is(&e, ns, tok, 12, 12, KVS_RADIX_MISS_NONE, NULL);
    env_ok(&e);

    /* under one block: nothing to cache */
    do_insert(&e, ns, &s2, 3, 0, 2);
    assert_int_equal(stats(&e).blocks, 3);

    /* only whole blocks are cached; the partial last one stays private */
    seq_fresh(&e, &s3, 0, tok3, 14);
    do_insert(&e, ns, &s3, 14, 0, 3);
    assert_int_equal(stats(&e).blocks, 6);
    for (i = 0; i < 3; i++) {
        assert_int_equal(ref(&e, s3.t.blocks[i]), 2);
    }
    assert_int_equal(ref(&e, s3.t.blocks[3]), 1);
    match_is(&e, ns, tok3, 14, 12, KVS_RADIX_MISS_EMPTY, NULL);
    env_ok(&e);

    seq_end(&e, &s1);
    seq_end(&e, &s2);
    seq_end(&e, &s3);
    assert_int_equal(kvs_kv_pool_free_count(e.pool), 32 - 6);
    assert_int_equal(kvs_radix_evictable(e.r), 6);

    /* insert with a lock: the new node is held until unlocked */
    seq_fresh(&e, &s4, 0, tok4, 8);
    n = do_insert(&e, ns, &s4, 8, 1, 4);
    seq_end(&e, &s4);
    assert_int_equal(stats(&e).blocks, 8);
    assert_int_equal(kvs_radix_evictable(e.r), 6);
    assert_int_equal(kvs_radix_evict(e.r, ALL), 6);
    assert_int_equal(stats(&e).blocks, 2);
    match_is(&e, ns, tok4, 8, 8, KVS_RADIX_MISS_NONE, NULL);
    env_ok(&e);

    kvs_radix_unlock(e.r, n);
    kvs_radix_unlock(e.r, NULL);
    assert_int_equal(kvs_radix_evictable(e.r), 2);
    assert_int_equal(kvs_radix_evict(e.r, ALL), 2);
    assert_int_equal(stats(&e).blocks, 0);
    assert_int_equal(kvs_kv_pool_free_count(e.pool), 32);

    kvs_radix_ns_put(e.r, ns);
    assert_int_equal(stats(&e).namespaces, 0);
    env_done(&e);
}


/* Split at a mid-edge divergence: both branches match afterwards, the
 * lock taken before the split is dropped whole by one unlock. */
static void
test_split(void **state)
{
    env_t               e;
    kvs_radix_ns_t     *ns;
    kvs_radix_match_t   m, m2;
    kvs_radix_stats_t   st0, st;
    seq_t               s1, s2;
    uint32_t            got[MAX_BLK], t1[4], i;
    int32_t             tok[16], u[16], q[16];

    env_init(&e, 32, BT, 8);
    ns = ns_get(&e, &key_g1);
    fill(tok, 16, 10);
    memcpy(u, tok, sizeof(u));
    fill(u + 6, 10, 900);

    seq_fresh(&e, &s1, 0, tok, 16);
    do_insert(&e, ns, &s1, 16, 0, 1);
    memcpy(t1, s1.t.blocks, sizeof(t1));
    seq_end(&e, &s1);
    st0 = stats(&e);
    assert_int_equal(st0.blocks, 4);

    /* u shares 6 tokens: 1.5 blocks of the 4-block node; the lock
     * covers the 2 blocks used, so the node is split after them */
    do_match(&e, ns, u, 15, 1, 2, 0, &m, got);
    assert_int_equal(m.n_tokens, 6);
    assert_int_equal(m.n_blocks, 2);
    assert_int_equal(m.miss, KVS_RADIX_MISS_DIVERGED);
    assert_int_equal(m.miss_pos, 6);
    assert_int_equal(got[0], t1[0]);
    assert_int_equal(got[1], t1[1]);
    assert_int_equal(stats(&e).nodes, st0.nodes + 1);
    assert_int_equal(kvs_radix_evictable(e.r), 2);

    seq_adopt(&e, &s2, 0, u, got, 6);
    assert_int_equal(seq_grow(&e, &s2, u, 16, NULL), KVS_OK);
    assert_int_equal(s2.t.blocks[0], t1[0]);
    assert_int_not_equal(s2.t.blocks[1], t1[1]);
    do_insert(&e, ns, &s2, 16, 0, 3);
    env_ok(&e);

    /* [a] -> {[b] -> [c d], [b' e f]} */
    st = stats(&e);
    assert_int_equal(st.blocks, 7);
    assert_int_equal(st.nodes, st0.nodes + 3);
    assert_int_equal(ref(&e, t1[0]), 2);
    for (i = 1; i < 4; i++) {
        assert_int_equal(ref(&e, t1[i]), 1);
        assert_int_equal(ref(&e, s2.t.blocks[i]), 2);
    }

    match_is(&e, ns, tok, 16, 16, KVS_RADIX_MISS_NONE, got);
    assert_memory_equal(got, t1, sizeof(t1));
    match_is(&e, ns, u, 16, 16, KVS_RADIX_MISS_NONE, got);
    assert_memory_equal(got, s2.t.blocks, 4 * sizeof(uint32_t));

    /* children may share their first tokens: 10 11 12 13 | 14 15 . . */
    memcpy(q, tok, sizeof(q));
    q[6] = 777;
    match_is(&e, ns, q, 15, 6, KVS_RADIX_MISS_DIVERGED, NULL);

    seq_end(&e, &s2);

    /* the match's lock, split again since, holds [a] and [b]; [c d]
     * and the new branch are evictable */
    assert_int_equal(kvs_radix_evictable(e.r), 5);
    assert_int_equal(kvs_radix_evict(e.r, ALL), 5);
    match_is(&e, ns, tok, 16, 8, KVS_RADIX_MISS_EVICTED, NULL);
    do_match(&e, ns, u, 16, 0, 3, 0, &m2, NULL);
    assert_int_equal(m2.n_tokens, 6);
    env_ok(&e);

    kvs_radix_unlock(e.r, m.node);
    env_ok(&e);
    assert_int_equal(kvs_radix_evictable(e.r), 2);

    /* a strict prefix of an edge: insert ends mid-node, splitting it at
     * a block boundary; no new block, one more node */
    fill(tok, 16, 3000);
    seq_fresh(&e, &s1, 0, tok, 16);
    do_insert(&e, ns, &s1, 16, 0, 4);
    memcpy(t1, s1.t.blocks, sizeof(t1));
    seq_end(&e, &s1);
    st0 = stats(&e);
    seq_fresh(&e, &s1, 0, tok, 8);
    m.node = do_insert(&e, ns, &s1, 8, 1, 4);
    st = stats(&e);
    assert_int_equal(st.blocks, st0.blocks);
    assert_int_equal(st.nodes, st0.nodes + 1);
    assert_int_equal(ref(&e, s1.t.blocks[0]), 1);
    seq_end(&e, &s1);
    /* locked: the prefix's 2 blocks; evictable: the 2 after, [a], [b] */
    assert_int_equal(kvs_radix_evictable(e.r), 4);
    assert_int_equal(kvs_radix_evict(e.r, ALL), 4);
    match_is(&e, ns, tok, 16, 8, KVS_RADIX_MISS_EVICTED, got);
    assert_int_equal(got[0], t1[0]);
    assert_int_equal(got[1], t1[1]);
    kvs_radix_unlock(e.r, m.node);
    env_ok(&e);

    /* divergence at a block boundary inside an edge */
    fill(tok, 16, 2000);
    seq_fresh(&e, &s1, 0, tok, 16);
    do_insert(&e, ns, &s1, 16, 0, 5);
    seq_end(&e, &s1);
    memcpy(u, tok, sizeof(u));
    fill(u + 8, 8, 500);
    st0 = stats(&e);
    do_match(&e, ns, u, 15, 1, 6, 0, &m, got);
    assert_int_equal(m.n_tokens, 8);
    assert_int_equal(m.miss, KVS_RADIX_MISS_DIVERGED);
    seq_adopt(&e, &s2, 0, u, got, 8);
    assert_int_equal(seq_grow(&e, &s2, u, 16, NULL), KVS_OK);
    do_insert(&e, ns, &s2, 16, 0, 7);
    kvs_radix_unlock(e.r, m.node);
    st = stats(&e);
    assert_int_equal(st.blocks, st0.blocks + 2);
    assert_int_equal(st.nodes, st0.nodes + 2);
    match_is(&e, ns, tok, 16, 16, KVS_RADIX_MISS_NONE, NULL);
    match_is(&e, ns, u, 16, 16, KVS_RADIX_MISS_NONE, got);
    assert_memory_equal(got, s2.t.blocks, 4 * sizeof(uint32_t));
    seq_end(&e, &s2);

    kvs_radix_ns_put(e.r, ns);
    env_done(&e);
}


/* Copy-on-write of a shared partial block. */
static void
test_cow(void **state)
{
    env_t               e;
    kvs_radix_ns_t     *ns;
    kvs_radix_match_t   m;
    kvs_kv_table_t      saved;
    kvs_err_t           err;
    seq_t               s1, s2, s3;
    uint32_t            got[MAX_BLK], t1[3], b, src, dst;
    int32_t             tok[12], p[9], before[BT];

    env_init(&e, 16, BT, 8);
    ns = ns_get(&e, &key_g1);
    fill(tok, 12, 40);
    seq_fresh(&e, &s1, 0, tok, 12);
    do_insert(&e, ns, &s1, 12, 0, 1);
    memcpy(t1, s1.t.blocks, sizeof(t1));
    seq_end(&e, &s1);

    /* p = 40..45 50 51 52: matches into the middle of block b */
    memcpy(p, tok, 6 * sizeof(int32_t));
    p[6] = 50;
    p[7] = 51;
    p[8] = 52;
    do_match(&e, ns, p, 8, 1, 2, 0, &m, got);
    assert_int_equal(m.n_tokens, 6);
    assert_int_equal(m.n_blocks, 2);
    assert_int_equal(m.miss, KVS_RADIX_MISS_DIVERGED);

    seq_adopt(&e, &s2, 0, p, got, 6);
    b = t1[1];
    assert_int_equal(s2.t.blocks[1], b);
    assert_int_equal(ref(&e, b), 2);
    assert_true(kvs_kv_table_last_shared(&s2.t, e.pool));
    memcpy(before, e.shadow + (size_t) b * BT, sizeof(before));

    assert_int_equal(kvs_kv_table_unshare(&s2.t, e.pool, 6, &src, &dst,
                                          &err), KVS_OK);
    assert_int_equal(src, b);
    assert_int_not_equal(dst, b);
    assert_int_equal(ref(&e, b), 1);
    assert_int_equal(ref(&e, dst), 1);
    assert_int_equal(s2.t.blocks[1], dst);
    memcpy(e.shadow + (size_t) dst * BT, before, sizeof(before));
    env_ok(&e);

    /* a second unshare of an own block does nothing */
    saved = s2.t;
    assert_int_equal(kvs_kv_table_unshare(&s2.t, e.pool, 7, &src, &dst,
                                          &err), KVS_OK);
    assert_int_equal(src, KVS_KV_NONE);
    assert_int_equal(dst, KVS_KV_NONE);
    assert_memory_equal(&saved, &s2.t, sizeof(saved));

    assert_int_equal(seq_grow(&e, &s2, p, 9, NULL), KVS_OK);

    /* the tree's block is as it was and still serves the old prefix */
    assert_memory_equal(before, e.shadow + (size_t) b * BT, sizeof(before));
    match_is(&e, ns, tok, 12, 12, KVS_RADIX_MISS_NONE, got);
    assert_memory_equal(got, t1, sizeof(t1));
    assert_int_equal(ref(&e, t1[0]), 2);

    /* the copy joins the tree as a sibling of [b c] */
    do_insert(&e, ns, &s2, 9, 0, 3);
    kvs_radix_unlock(e.r, m.node);
    assert_int_equal(stats(&e).blocks, 4);
    match_is(&e, ns, p, 9, 8, KVS_RADIX_MISS_EMPTY, got);
    assert_int_equal(got[0], t1[0]);
    assert_int_equal(got[1], s2.t.blocks[1]);
    match_is(&e, ns, tok, 12, 12, KVS_RADIX_MISS_NONE, NULL);
    seq_end(&e, &s2);
    env_ok(&e);

    /* a full hit capped by limit inside the last block: the prompt is the
     * cached 11 tokens, the 11th must be computed, into a copy */
    do_match(&e, ns, tok, 10, 1, 4, 0, &m, got);
    assert_int_equal(m.n_tokens, 10);
    assert_int_equal(m.n_blocks, 3);
    assert_int_equal(m.miss, KVS_RADIX_MISS_NONE);
    seq_adopt(&e, &s3, 0, tok, got, 10);
    assert_int_equal(seq_grow(&e, &s3, tok, 11, NULL), KVS_OK);
    assert_int_not_equal(s3.t.blocks[2], t1[2]);
    assert_int_equal(ref(&e, t1[2]), 1);
    match_is(&e, ns, tok, 12, 12, KVS_RADIX_MISS_NONE, got);
    assert_memory_equal(got, t1, sizeof(t1));
    kvs_radix_unlock(e.r, m.node);
    seq_end(&e, &s3);

    kvs_radix_ns_put(e.r, ns);
    env_done(&e);
}


/* Tree references against table references through a block's life. */
static void
test_refcounts(void **state)
{
    env_t               e;
    kvs_radix_ns_t     *ns;
    kvs_radix_match_t   m;
    kvs_radix_stats_t   st;
    seq_t               s1, s2;
    uint32_t            got[MAX_BLK], a, b;
    int32_t             tok[8];

    env_init(&e, 8, BT, 8);
    ns = ns_get(&e, &key_g1);
    fill(tok, 8, 1);

    seq_fresh(&e, &s1, 0, tok, 8);
    a = s1.t.blocks[0];
    b = s1.t.blocks[1];
    assert_int_equal(ref(&e, a), 1);
    do_insert(&e, ns, &s1, 8, 0, 1);
    assert_int_equal(ref(&e, a), 2);
    assert_int_equal(ref(&e, b), 2);

    /* neither match nor a lock is a pool reference */
    do_match(&e, ns, tok, 8, 0, 2, 0, &m, got);
    assert_int_equal(ref(&e, a), 2);
    do_match(&e, ns, tok, 8, 1, 2, 0, &m, got);
    assert_int_equal(ref(&e, a), 2);
    seq_adopt(&e, &s2, 0, tok, got, 8);
    assert_int_equal(ref(&e, a), 3);
    assert_int_equal(ref(&e, b), 3);
    kvs_radix_unlock(e.r, m.node);
    assert_int_equal(ref(&e, a), 3);
    seq_end(&e, &s1);
    assert_int_equal(ref(&e, a), 2);
    env_ok(&e);

    /* evicting a block a table shares takes it out of the tree but does
     * not free it */
    assert_int_equal(kvs_radix_evictable(e.r), 2);
    assert_int_equal(kvs_radix_evict(e.r, ALL), 0);
    st = stats(&e);
    assert_int_equal(st.blocks, 0);
    assert_int_equal(st.evicted_blocks, 2);
    assert_int_equal(ref(&e, a), 1);
    assert_int_equal(ref(&e, b), 1);
    assert_int_equal(kvs_kv_pool_free_count(e.pool), 6);
    match_is(&e, ns, tok, 8, 0, KVS_RADIX_MISS_EVICTED, NULL);
    env_ok(&e);

    /* the table's blocks can be cached again */
    do_insert(&e, ns, &s2, 8, 0, 3);
    assert_int_equal(ref(&e, a), 2);
    seq_end(&e, &s2);
    assert_int_equal(ref(&e, a), 1);
    assert_int_equal(kvs_kv_pool_free_count(e.pool), 6);

    /* the tree's references go with the tree */
    kvs_radix_ns_put(e.r, ns);
    env_done(&e);
}


/* LRU among evictable leaves; a parent only once its children are gone;
 * locked paths never. */
static void
test_evict_order(void **state)
{
    env_t               e;
    kvs_radix_ns_t     *ns;
    kvs_radix_match_t   m;
    seq_t               s;
    int32_t             x1[8], x2[8], x3[8], pc1[12], pc2[12], q[8], r[8];

    env_init(&e, 64, BT, 8);
    ns = ns_get(&e, &key_g1);
    fill(x1, 8, 100);
    fill(x2, 8, 200);
    fill(x3, 8, 300);

    seq_fresh(&e, &s, 0, x1, 8);
    do_insert(&e, ns, &s, 8, 0, 10);
    seq_end(&e, &s);
    seq_fresh(&e, &s, 0, x2, 8);
    do_insert(&e, ns, &s, 8, 0, 20);
    seq_end(&e, &s);
    seq_fresh(&e, &s, 0, x3, 8);
    do_insert(&e, ns, &s, 8, 0, 30);
    seq_end(&e, &s);

    /* using x1 at 40 makes x2 the least recently used */
    do_match(&e, ns, x1, 8, 1, 40, 0, &m, NULL);
    kvs_radix_unlock(e.r, m.node);
    assert_int_equal(kvs_radix_evictable(e.r), 6);

    assert_int_equal(kvs_radix_evict(e.r, 2), 2);
    match_is(&e, ns, x2, 8, 0, KVS_RADIX_MISS_EVICTED, NULL);
    match_is(&e, ns, x1, 8, 8, KVS_RADIX_MISS_NONE, NULL);
    match_is(&e, ns, x3, 8, 8, KVS_RADIX_MISS_NONE, NULL);
    assert_int_equal(kvs_radix_evictable(e.r), 4);
    env_ok(&e);

    assert_int_equal(kvs_radix_evict(e.r, 2), 2);
    match_is(&e, ns, x3, 8, 0, KVS_RADIX_MISS_EVICTED, NULL);
    match_is(&e, ns, x1, 8, 8, KVS_RADIX_MISS_NONE, NULL);
    assert_int_equal(kvs_radix_evict(e.r, 2), 2);
    assert_int_equal(kvs_radix_evictable(e.r), 0);
    assert_int_equal(kvs_radix_evict(e.r, 5), 0);
    assert_int_equal(stats(&e).evicted_blocks, 6);
    env_ok(&e);

    /* P [p1 p2] with children C1 (used at 10) and C2 (20), a leaf Q (15)
     * and a leaf R (25): C1, Q, C2, then P (20) before R */
    fill(pc1, 12, 400);
    memcpy(pc2, pc1, sizeof(pc2));
    fill(pc2 + 8, 4, 450);
    fill(q, 8, 500);
    fill(r, 8, 600);

    seq_fresh(&e, &s, 0, pc1, 12);
    do_insert(&e, ns, &s, 12, 0, 10);
    seq_end(&e, &s);
    seq_fresh(&e, &s, 0, q, 8);
    do_insert(&e, ns, &s, 8, 0, 15);
    seq_end(&e, &s);
    seq_fresh(&e, &s, 0, pc2, 12);
    do_insert(&e, ns, &s, 12, 0, 20);
    seq_end(&e, &s);
    seq_fresh(&e, &s, 0, r, 8);
    do_insert(&e, ns, &s, 8, 0, 25);
    seq_end(&e, &s);
    assert_int_equal(kvs_radix_evictable(e.r), 8);
    env_ok(&e);

    assert_int_equal(kvs_radix_evict(e.r, 1), 1);
    match_is(&e, ns, pc1, 12, 8, KVS_RADIX_MISS_EVICTED, NULL);
    match_is(&e, ns, pc2, 12, 12, KVS_RADIX_MISS_NONE, NULL);
    assert_int_equal(kvs_radix_evictable(e.r), 7);

    assert_int_equal(kvs_radix_evict(e.r, 2), 2);
    match_is(&e, ns, q, 8, 0, KVS_RADIX_MISS_EVICTED, NULL);
    match_is(&e, ns, pc2, 12, 12, KVS_RADIX_MISS_NONE, NULL);

    assert_int_equal(kvs_radix_evict(e.r, 1), 1);
    match_is(&e, ns, pc2, 12, 8, KVS_RADIX_MISS_EVICTED, NULL);
    assert_int_equal(kvs_radix_evictable(e.r), 4);

    assert_int_equal(kvs_radix_evict(e.r, 2), 2);
    match_is(&e, ns, pc2, 12, 0, KVS_RADIX_MISS_EVICTED, NULL);
    match_is(&e, ns, r, 8, 8, KVS_RADIX_MISS_NONE, NULL);
    assert_int_equal(kvs_radix_evict(e.r, ALL), 2);
    assert_int_equal(stats(&e).blocks, 0);
    env_ok(&e);

    /* locked: [a1 a2] -> {[b] locked at 40, [c] (20)}, Z (30) */
    fill(pc1, 12, 700);
    memcpy(pc2, pc1, sizeof(pc2));
    fill(pc2 + 8, 4, 750);
    fill(q, 8, 800);

    seq_fresh(&e, &s, 0, pc1, 12);
    do_insert(&e, ns, &s, 12, 0, 10);
    seq_end(&e, &s);
    seq_fresh(&e, &s, 0, pc2, 12);
    do_insert(&e, ns, &s, 12, 0, 20);
    seq_end(&e, &s);
    seq_fresh(&e, &s, 0, q, 8);
    do_insert(&e, ns, &s, 8, 0, 30);
    seq_end(&e, &s);
    do_match(&e, ns, pc1, 12, 1, 40, 0, &m, NULL);
    assert_int_equal(m.n_tokens, 12);

    assert_int_equal(kvs_radix_evictable(e.r), 3);
    assert_int_equal(kvs_radix_evict(e.r, 1), 1);
    match_is(&e, ns, pc2, 12, 8, KVS_RADIX_MISS_EVICTED, NULL);
    match_is(&e, ns, q, 8, 8, KVS_RADIX_MISS_NONE, NULL);
    assert_int_equal(kvs_radix_evict(e.r, ALL), 2);
    assert_int_equal(kvs_radix_evictable(e.r), 0);
    match_is(&e, ns, pc1, 12, 12, KVS_RADIX_MISS_NONE, NULL);
    assert_int_equal(stats(&e).blocks, 3);
    env_ok(&e);

    /* a second holder: two unlocks before it can go */
    kvs_radix_lock(e.r, m.node);
    kvs_radix_unlock(e.r, m.node);
    assert_int_equal(kvs_radix_evictable(e.r), 0);
    assert_int_equal(kvs_radix_evict(e.r, ALL), 0);
    kvs_radix_unlock(e.r, m.node);
    assert_int_equal(kvs_radix_evictable(e.r), 3);
    assert_int_equal(kvs_radix_evict(e.r, ALL), 3);
    env_ok(&e);

    kvs_radix_ns_put(e.r, ns);
    assert_int_equal(stats(&e).namespaces, 0);
    env_done(&e);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_ns_keys),
        cmocka_unit_test(test_match),
        cmocka_unit_test(test_insert),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_cow),
        cmocka_unit_test(test_refcounts),
        cmocka_unit_test(test_evict_order),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}