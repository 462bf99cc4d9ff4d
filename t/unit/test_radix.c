/*
 * test_radix: the prefix cache (kv/kvs_radix.h) over a real kvs_kv_pool
 * with simulated sequences and no backend.  A block's "K/V" is the token
 * ids written into it, kept in a shadow array (block id -> tokens), so a
 * reuse is right iff every returned block's shadow equals the query's
 * tokens; a write into a block that anyone else holds is a test failure
 * (copy-on-write broken).  Covers match (hits, partial last block, the
 * limit cap, every miss reason), insert (new, existing, split), COW on a
 * shared partial block, refcounts, LRU eviction with locks, pins and TTL,
 * namespace isolation, and a seeded random run (KVS_SEED, KVS_RADIX_OPS)
 * that checks after every operation that free + table-only + tree
 * blocks == pool size, with the tree holding exactly one reference on
 * each of its blocks, and checks every match against an oracle built
 * from outside the tree (the longest cached prefix, the miss reason).
 * The index hooks: the random run names every block with a hash of its
 * own (test_name(), nothing of the tree's) and checks after every
 * operation that the blocks that joined were named exactly once, in
 * order, from the right parent; that the names reported evicted are
 * exactly those of the blocks that left, once each, children before
 * parents; and that kvs_radix_list_names() lists exactly the tree's
 * blocks' names, parents first.  test_index_names does the same by hand.
 */

#include "kvs_test.h"

#include <xxhash.h>

#include "base/kvs_hash.h"
#include "kv/kvs_kv_pool.h"
#include "kv/kvs_kv_table.h"
#include "kv/kvs_radix.h"

#define BT          4             /* tokens per block, fixed tests */
#define MAX_TOK     256           /* positions of a simulated sequence */
#define MAX_BLK     MAX_TOK       /* ids a match may return (bt >= 1) */
#define ALL         UINT32_MAX    /* evict everything evictable */


typedef struct {
    kvs_kv_pool_t  *pool;
    kvs_radix_t    *r;
    int32_t        *shadow;           /* [n_blocks][bt] token ids written */
    int            *owner;            /* [n_blocks] key of the writer */
    uint32_t        bt;
} env_t;


/* A sequence: its block table and the tokens at [0, t.n_tokens). */
typedef struct {
    kvs_kv_table_t  t;
    int32_t         tok[MAX_TOK];
    int             key;              /* writer tag for env_t.owner */
} seq_t;


static const kvs_radix_key_t  key_g1 = { 1, 0, "", 0 };
static const kvs_radix_key_t  key_g2 = { 2, 0, "", 0 };   /* new weights */
static const kvs_radix_key_t  key_ad = { 1, 5, "", 0 };   /* an adapter */
static const kvs_radix_key_t  key_t1 = { 1, 0, "t1", 2 }; /* a tenant */


static void
env_init(env_t *e, uint32_t n_blocks, uint32_t bt, uint32_t pin_max)
{
    kvs_err_t  err;
    size_t     i;

    if (kvs_kv_pool_new(&e->pool, n_blocks, bt, &err) != KVS_OK) {
        fail_msg("pool: %s", err.msg);
    }

    e->r = NULL;
    if (kvs_radix_new(&e->r, e->pool, pin_max, &err) != KVS_OK) {
        fail_msg("radix_new: %s", err.msg);
    }
    assert_non_null(e->r);

    e->shadow = malloc((size_t) n_blocks * bt * sizeof(int32_t));
    e->owner = calloc(n_blocks, sizeof(int));
    assert_non_null(e->shadow);
    assert_non_null(e->owner);

    /* -1 is no token: a block never written matches nothing */
    for (i = 0; i < (size_t) n_blocks * bt; i++) {
        e->shadow[i] = -1;
    }

    e->bt = bt;
}


static void
env_ok(const env_t *e)
{
    kvs_err_t  err;

    if (kvs_kv_pool_check(e->pool, &err) != KVS_OK) {
        fail_msg("kvs_kv_pool_check: %s", err.msg);
    }

    if (kvs_radix_check(e->r, &err) != KVS_OK) {
        fail_msg("kvs_radix_check: %s", err.msg);
    }
}


static kvs_radix_stats_t
stats(const env_t *e)
{
    kvs_radix_stats_t  st;

    memset(&st, 0xa5, sizeof(st));
    kvs_radix_stats(e->r, &st);

    return st;
}


static uint32_t
ref(const env_t *e, uint32_t b)
{
    return kvs_kv_pool_refcount(e->pool, b);
}


/* Frees the tree, which must give every block back (no table is left). */
static void
env_done(env_t *e)
{
    env_ok(e);
    kvs_radix_free(e->r);
    assert_int_equal(kvs_kv_pool_free_count(e->pool), e->pool->n_blocks);
    kvs_kv_pool_free(e->pool);
    free(e->shadow);
    free(e->owner);
}


static kvs_radix_ns_t *
ns_get(env_t *e, const kvs_radix_key_t *key)
{
    kvs_radix_ns_t  *ns;
    kvs_err_t        err;

    ns = NULL;
    if (kvs_radix_ns_get(e->r, key, &ns, &err) != KVS_OK) {
        fail_msg("ns_get: %s", err.msg);
    }
    assert_non_null(ns);

    return ns;
}


static void
fill(int32_t *tok, uint32_t n, int32_t base)
{
    uint32_t  i;

    for (i = 0; i < n; i++) {
        tok[i] = base + (int32_t) i;
    }
}


/* Writes tokens[from, to) into the table's slots: each slot's block must
 * be this table's alone, or a shared block would be corrupted. */
static void
seq_write(env_t *e, seq_t *s, const int32_t *tokens, uint32_t from,
    uint32_t to)
{
    uint32_t   pos, b, off;
    kvs_err_t  err;

    for (pos = from; pos < to; pos++) {
        if (kvs_kv_table_slot(&s->t, pos, &b, &off, &err) != KVS_OK) {
            fail_msg("slot %u: %s", pos, err.msg);
        }

        if (ref(e, b) != 1) {
            fail_msg("position %u goes to block %u, which has %u owners: "
                     "a write into a shared block", pos, b, ref(e, b));
        }

        e->shadow[(size_t) b * e->bt + off] = tokens[pos];
        e->owner[b] = s->key;
        s->tok[pos] = tokens[pos];
    }
}


/* Blocks that growing s to n tokens takes from the pool, COW included. */
static uint32_t
seq_need(const env_t *e, const seq_t *s, uint32_t n)
{
    uint32_t  need;

    need = kvs_kv_table_blocks_needed(&s->t, e->pool, n);

    if (n > s->t.n_tokens && s->t.n_tokens % e->bt != 0
        && kvs_kv_table_last_shared(&s->t, e->pool))
    {
        need++;
    }

    return need;
}


/*
 * Computes tokens[t.n_tokens, n): copies a shared partial last block
 * first (the backend's copy is the shadow's), then reserves and writes.
 * KVS_KV_EFULL when the pool is short (the COW may have happened).
 */
static int
seq_grow(env_t *e, seq_t *s, const int32_t *tokens, uint32_t n,
    uint64_t *cows)
{
    int        rc;
    uint32_t   from, src, dst;
    kvs_err_t  err;

    from = s->t.n_tokens;
    assert_true(n <= MAX_TOK);

    if (n <= from) {
        return KVS_OK;
    }

    if (from % e->bt != 0) {
        rc = kvs_kv_table_unshare(&s->t, e->pool, from, &src, &dst, &err);
        if (rc == KVS_KV_EFULL) {
            return rc;
        }
        if (rc != KVS_OK) {
            fail_msg("unshare: %s", err.msg);
        }

        if (src != KVS_KV_NONE) {
            assert_int_not_equal(src, dst);
            memcpy(e->shadow + (size_t) dst * e->bt,
                   e->shadow + (size_t) src * e->bt,
                   e->bt * sizeof(int32_t));
            e->owner[dst] = e->owner[src];
            if (cows != NULL) {
                (*cows)++;
            }
        }
    }

    rc = kvs_kv_table_reserve(&s->t, e->pool, n, &err);
    if (rc == KVS_KV_EFULL) {
        return rc;
    }
    if (rc != KVS_OK) {
        fail_msg("reserve: %s", err.msg);
    }

    seq_write(e, s, tokens, from, n);

    return KVS_OK;
}


/* A sequence computed from scratch: its own fresh blocks. */
static void
seq_fresh(env_t *e, seq_t *s, int key, const int32_t *tokens, uint32_t n)
{
    memset(s, 0, sizeof(seq_t));
    s->key = key;
    assert_int_equal(seq_grow(e, s, tokens, n, NULL), KVS_OK);
}


/* A sequence starting from a match: shares the matched blocks through
 * its table (one pool reference each), covering n_tokens positions. */
static void
seq_adopt(env_t *e, seq_t *s, int key, const int32_t *tokens,
    const uint32_t *blocks, uint32_t n_tokens)
{
    kvs_err_t  err;

    memset(s, 0, sizeof(seq_t));
    s->key = key;

    if (kvs_kv_table_share(&s->t, e->pool, blocks, n_tokens, &err)
        != KVS_OK)
    {
        fail_msg("share of %u matched tokens: %s", n_tokens, err.msg);
    }

    assert_int_equal(s->t.n_tokens, n_tokens);
    memcpy(s->tok, tokens, n_tokens * sizeof(int32_t));
}


static void
seq_end(env_t *e, seq_t *s)
{
    kvs_err_t  err;

    if (kvs_kv_table_release(&s->t, e->pool, &err) != KVS_OK) {
        fail_msg("release: %s", err.msg);
    }
}


/*
 * kvs_radix_match with every check that needs no knowledge of the tree:
 * the result's shape, miss_pos, and that each reused position's block
 * holds the query's token (and was written under key, when key >= 0).
 * blocks[] is exactly the documented room, so ASan sees an overrun.
 * out (room for MAX_BLK) gets the ids.
 */
static void
do_match(env_t *e, kvs_radix_ns_t *ns, const int32_t *tok, uint32_t limit,
    int lock, uint64_t now, int key, kvs_radix_match_t *m, uint32_t *out)
{
    uint32_t  *buf, room, i, b;
    int32_t    have;

    room = (limit + e->bt - 1) / e->bt;
    buf = malloc((room != 0 ? room : 1) * sizeof(uint32_t));
    assert_non_null(buf);
    memset(m, 0xa5, sizeof(kvs_radix_match_t));

    kvs_radix_match(e->r, ns, tok, limit, buf, lock, now, m);

    if (m->n_tokens > limit) {
        fail_msg("match reused %u tokens, limit %u", m->n_tokens, limit);
    }
    assert_int_equal(m->n_blocks, (m->n_tokens + e->bt - 1) / e->bt);
    assert_int_not_equal(m->miss, KVS_RADIX_MISS_OFF);
    assert_true((int) m->miss >= KVS_RADIX_MISS_NONE
                && m->miss <= KVS_RADIX_MISS_OFF);

    if (m->n_tokens == 0) {
        assert_null(m->node);
    } else {
        assert_non_null(m->node);
    }

    if (limit > 0) {
        if ((m->miss == KVS_RADIX_MISS_NONE) != (m->n_tokens == limit)) {
            fail_msg("match: %u of limit %u tokens with miss %s",
                     m->n_tokens, limit, kvs_radix_miss_name(m->miss));
        }
    }

    /* the match stops at the first token it cannot reuse */
    if (m->miss_pos != m->n_tokens) {
        fail_msg("match: miss_pos %u, n_tokens %u (miss %s)", m->miss_pos,
                 m->n_tokens, kvs_radix_miss_name(m->miss));
    }

    for (i = 0; i < m->n_tokens; i++) {
        b = buf[i / e->bt];
        if (b >= e->pool->n_blocks || ref(e, b) == 0) {
            fail_msg("match: block %u (position %u) is not a held block",
                     b, i);
        }

        have = e->shadow[(size_t) b * e->bt + i % e->bt];
        if (have != tok[i]) {
            fail_msg("match: position %u reused from block %u, which holds "
                     "token %d, query has %d", i, b, have, tok[i]);
        }

        if (key >= 0 && e->owner[b] != key) {
            fail_msg("match under key %d returned block %u of key %d", key,
                     b, e->owner[b]);
        }
    }

    if (out != NULL) {
        memcpy(out, buf, m->n_blocks * sizeof(uint32_t));
    }
    free(buf);
}


/* A match without a lock that must reuse n tokens and stop for miss. */
static void
match_is_at(int line, env_t *e, kvs_radix_ns_t *ns, const int32_t *tok,
    uint32_t limit, uint32_t n, kvs_radix_miss_t miss, uint32_t *out)
{
    kvs_radix_match_t  m;

    do_match(e, ns, tok, limit, 0, 0, -1, &m, out);

    if (m.n_tokens != n || m.miss != miss) {
        fail_msg("line %d: match of limit %u: %u tokens, miss %s; expected "
                 "%u, %s", line, limit, m.n_tokens,
                 kvs_radix_miss_name(m.miss), n, kvs_radix_miss_name(miss));
    }
}

#define match_is(...)  match_is_at(__LINE__, __VA_ARGS__)


static kvs_radix_node_t *
do_insert(env_t *e, kvs_radix_ns_t *ns, const seq_t *s, uint32_t n,
    int lock, uint64_t now)
{
    kvs_radix_node_t  *node;
    kvs_err_t          err;

    assert_true(n <= s->t.n_tokens);
    node = (kvs_radix_node_t *) &node;

    if (kvs_radix_insert(e->r, ns, s->tok, n, s->t.blocks, lock, now, &node,
                         &err)
        != KVS_OK)
    {
        fail_msg("insert: %s", err.msg);
    }

    if (n < e->bt) {
        assert_null(node);
    } else {
        assert_non_null(node);
    }

    return node;
}


static uint32_t
do_pin(env_t *e, kvs_radix_ns_t *ns, const int32_t *tok, uint32_t n,
    uint64_t ttl, uint64_t now, int *created)
{
    uint32_t   pinned;
    kvs_err_t  err;

    pinned = UINT32_MAX;
    *created = -1;

    if (kvs_radix_pin(e->r, ns, tok, n, ttl, now, &pinned, created, &err)
        != KVS_OK)
    {
        fail_msg("pin: %s", err.msg);
    }

    assert_true(pinned <= n);
    assert_int_equal(pinned % e->bt, 0);
    assert_true(*created == 0 || *created == 1);

    return pinned;
}


static void
test_miss_names(void **state)
{
    const char  *name[KVS_RADIX_MISS_OFF + 1];
    int          i, j;

    for (i = 0; i <= KVS_RADIX_MISS_OFF; i++) {
        name[i] = kvs_radix_miss_name((kvs_radix_miss_t) i);
        assert_non_null(name[i]);
        assert_true(name[i][0] != '\0');

        for (j = 0; j < i; j++) {
            assert_string_not_equal(name[i], name[j]);
        }
    }
}


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


/* The hooks' calls, for test_index_names. */
typedef struct {
    uint8_t   added[16][KVS_RADIX_NAME_LEN];
    uint8_t   parent[16][KVS_RADIX_NAME_LEN];     /* zero: NULL given */
    uint32_t  n_added;
    uint8_t   ev[16][KVS_RADIX_NAME_LEN];
    uint32_t  n_ev;
} ixrec_t;


/* A name made by hand: the block's first token, big-endian, then 0xa5
 * (never all zero). */
static void
nm(int32_t first, uint8_t *out)
{
    memset(out, 0, KVS_RADIX_NAME_LEN);
    out[0] = (uint8_t) ((uint32_t) first >> 24);
    out[1] = (uint8_t) ((uint32_t) first >> 16);
    out[2] = (uint8_t) ((uint32_t) first >> 8);
    out[3] = (uint8_t) first;
    out[4] = 0xa5;
}


static void
ix_added(void *arg, const kvs_radix_key_t *key, const uint8_t *parent,
    const int32_t *tokens, uint32_t n, uint8_t (*names)[KVS_RADIX_NAME_LEN])
{
    uint32_t   i;
    ixrec_t   *x = arg;

    assert_int_equal(key->epoch, key_g1.epoch);

    for (i = 0; i < n; i++) {
        assert_true(x->n_added < 16);
        nm(tokens[(size_t) i * BT], names[i]);
        memcpy(x->added[x->n_added], names[i], KVS_RADIX_NAME_LEN);
        memset(x->parent[x->n_added], 0, KVS_RADIX_NAME_LEN);
        if (i > 0 || parent != NULL) {
            memcpy(x->parent[x->n_added], i > 0 ? names[i - 1] : parent,
                   KVS_RADIX_NAME_LEN);
        }
        x->n_added++;
    }
}


static void
ix_evicted(void *arg, const uint8_t *name)
{
    ixrec_t  *x = arg;

    assert_true(x->n_ev < 16);
    memcpy(x->ev[x->n_ev++], name, KVS_RADIX_NAME_LEN);
}


static void
ix_listed(void *arg, const uint8_t *name)
{
    ix_evicted(arg, name);
}


/* got is the hand-made name of first. */
static void
ix_is(const uint8_t *got, int32_t first)
{
    uint8_t  want[KVS_RADIX_NAME_LEN];

    nm(first, want);
    assert_memory_equal(got, want, KVS_RADIX_NAME_LEN);
}


/*
 * The index hooks by hand: names given at insert are stored and only the
 * new blocks are named, from the right parent (a split keeps them);
 * eviction reports each once, children before parents, a leaf's tail
 * first; the listing goes parents first; blocks cached before the hooks
 * (or under such a block) stay unnamed and are never reported.
 */
static void
test_index_names(void **state)
{
    env_t               e;
    kvs_radix_ns_t     *ns;
    kvs_radix_hooks_t   hooks;
    seq_t               s1, s2, s3, s4, s5;
    ixrec_t             x;
    int32_t             tok[16], tok2[12], tok3[12], tok5[16];
    uint8_t             want[KVS_RADIX_NAME_LEN], zero[KVS_RADIX_NAME_LEN];

    memset(&x, 0, sizeof(x));
    memset(zero, 0, sizeof(zero));
    env_init(&e, 32, BT, 8);
    hooks.added = ix_added;
    hooks.evicted = ix_evicted;
    hooks.arg = &x;
    kvs_radix_set_hooks(e.r, &hooks);
    ns = ns_get(&e, &key_g1);

    /* three new blocks: 100, 104, 108, the first from the root */
    fill(tok, 16, 100);
    seq_fresh(&e, &s1, 0, tok, 14);
    do_insert(&e, ns, &s1, 14, 0, 1);
    assert_int_equal(x.n_added, 3);
    ix_is(x.added[0], 100);
    ix_is(x.added[1], 104);
    ix_is(x.added[2], 108);
    assert_memory_equal(x.parent[0], zero, KVS_RADIX_NAME_LEN);
    assert_memory_equal(x.parent[1], x.added[0], KVS_RADIX_NAME_LEN);
    assert_memory_equal(x.parent[2], x.added[1], KVS_RADIX_NAME_LEN);

    /* the same prefix again: nothing new, nothing named */
    x.n_added = 0;
    do_insert(&e, ns, &s1, 14, 0, 2);
    assert_int_equal(x.n_added, 0);

    /* diverging after two blocks: the edge splits, one block is new, its
     * parent the second block */
    memcpy(tok2, tok, 8 * sizeof(int32_t));
    fill(tok2 + 8, 4, 500);
    seq_fresh(&e, &s2, 0, tok2, 12);
    do_insert(&e, ns, &s2, 12, 0, 3);
    assert_int_equal(x.n_added, 1);
    ix_is(x.added[0], 500);
    ix_is(x.parent[0], 104);
    env_ok(&e);

    /* the listing: 100, 104, then 108 and 500 in either order */
    x.n_ev = 0;
    assert_int_equal(kvs_radix_list_names(e.r, ix_listed, &x), 4);
    ix_is(x.ev[0], 100);
    ix_is(x.ev[1], 104);
    nm(108, want);
    if (memcmp(x.ev[2], want, KVS_RADIX_NAME_LEN) == 0) {
        ix_is(x.ev[3], 500);
    } else {
        ix_is(x.ev[2], 500);
        ix_is(x.ev[3], 108);
    }

    /* a leaf cut short: its last block goes first */
    fill(tok5, 16, 900);
    seq_fresh(&e, &s5, 0, tok5, 16);
    do_insert(&e, ns, &s5, 16, 0, 4);
    seq_end(&e, &s5);
    seq_end(&e, &s1);
    seq_end(&e, &s2);
    x.n_ev = 0;
    /* s5 is the most recent: the two older leaves go first, whole */
    assert_int_equal(kvs_radix_evict(e.r, 2), 2);
    assert_int_equal(x.n_ev, 2);
    ix_is(x.ev[0], 108);                /* used least recently */
    ix_is(x.ev[1], 500);
    x.n_ev = 0;
    assert_int_equal(kvs_radix_evict(e.r, ALL), 6);
    assert_int_equal(x.n_ev, 6);
    /* children before parents: 104 before 100; 912 .. 900 in reverse */
    ix_is(x.ev[0], 104);
    ix_is(x.ev[1], 100);
    ix_is(x.ev[2], 912);
    ix_is(x.ev[3], 908);
    ix_is(x.ev[4], 904);
    ix_is(x.ev[5], 900);
    env_ok(&e);

    /* cached without hooks: unnamed, and so is what is inserted under it
     * once they are set; neither is listed nor reported */
    kvs_radix_set_hooks(e.r, NULL);
    fill(tok3, 12, 700);
    seq_fresh(&e, &s3, 0, tok3, 8);
    do_insert(&e, ns, &s3, 8, 0, 5);
    kvs_radix_set_hooks(e.r, &hooks);
    x.n_added = 0;
    seq_fresh(&e, &s4, 0, tok3, 12);
    do_insert(&e, ns, &s4, 12, 0, 6);
    assert_int_equal(stats(&e).blocks, 3);
    assert_int_equal(x.n_added, 0);
    x.n_ev = 0;
    assert_int_equal(kvs_radix_list_names(e.r, ix_listed, &x), 0);
    env_ok(&e);
    seq_end(&e, &s3);
    seq_end(&e, &s4);
    assert_int_equal(kvs_radix_evict(e.r, ALL), 3);
    assert_int_equal(x.n_ev, 0);

    kvs_radix_ns_put(e.r, ns);
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


/* Every miss reason, and that no key ever sees another key's blocks. */
static void
test_miss_isolation(void **state)
{
    env_t               e;
    kvs_radix_ns_t     *g1, *g2, *ad, *t1;
    kvs_radix_match_t   m;
    seq_t               s, s2;
    uint32_t            got[MAX_BLK], own[3], i;
    int32_t             tok[16];

    env_init(&e, 32, BT, 8);
    g1 = ns_get(&e, &key_g1);
    g2 = ns_get(&e, &key_g2);
    ad = ns_get(&e, &key_ad);
    t1 = ns_get(&e, &key_t1);
    fill(tok, 16, 60);

    seq_fresh(&e, &s, 0, tok, 12);
    do_insert(&e, g1, &s, 12, 0, 1);
    memcpy(own, s.t.blocks, sizeof(own));
    seq_end(&e, &s);

    match_is(&e, g1, tok, 11, 11, KVS_RADIX_MISS_NONE, NULL);
    do_match(&e, g2, tok, 11, 1, 2, 1, &m, got);
    assert_int_equal(m.n_tokens, 0);
    assert_null(m.node);
    assert_int_equal(m.miss, KVS_RADIX_MISS_EPOCH);
    match_is(&e, ad, tok, 11, 0, KVS_RADIX_MISS_ADAPTER, NULL);
    match_is(&e, t1, tok, 11, 0, KVS_RADIX_MISS_SCOPE, NULL);
    env_ok(&e);

    /* the new epoch caches its own first block: it matches that one, and
     * the rest is still another epoch's */
    seq_fresh(&e, &s2, 1, tok, 4);
    do_insert(&e, g2, &s2, 4, 0, 3);
    do_match(&e, g2, tok, 11, 0, 3, 1, &m, got);
    assert_int_equal(m.n_tokens, 4);
    assert_int_equal(got[0], s2.t.blocks[0]);
    assert_int_not_equal(got[0], own[0]);
    assert_int_equal(m.miss, KVS_RADIX_MISS_EPOCH);
    seq_end(&e, &s2);

    /* the same tokens cached under every key: each gets its own */
    seq_fresh(&e, &s2, 2, tok, 12);
    do_insert(&e, ad, &s2, 12, 0, 4);
    seq_end(&e, &s2);
    seq_fresh(&e, &s2, 3, tok, 12);
    do_insert(&e, t1, &s2, 12, 0, 4);
    seq_end(&e, &s2);
    do_match(&e, g1, tok, 12, 0, 5, 0, &m, got);
    assert_int_equal(m.n_tokens, 12);
    assert_memory_equal(got, own, sizeof(own));
    do_match(&e, ad, tok, 12, 0, 5, 2, &m, got);
    assert_int_equal(m.n_tokens, 12);
    do_match(&e, t1, tok, 12, 0, 5, 3, &m, got);
    assert_int_equal(m.n_tokens, 12);
    for (i = 0; i < 3; i++) {
        assert_int_not_equal(got[i], own[i]);
    }
    assert_int_equal(stats(&e).blocks, 3 + 1 + 3 + 3);
    env_ok(&e);

    /* evicted: the whole prefix, then only the tail of a longer one */
    assert_int_equal(kvs_radix_evict(e.r, ALL), 10);
    match_is(&e, g1, tok, 11, 0, KVS_RADIX_MISS_EVICTED, NULL);

    seq_fresh(&e, &s, 0, tok, 8);
    do_insert(&e, g1, &s, 8, 0, 10);
    seq_end(&e, &s);
    seq_fresh(&e, &s, 0, tok, 16);
    do_insert(&e, g1, &s, 16, 0, 11);
    seq_end(&e, &s);
    match_is(&e, g1, tok, 16, 16, KVS_RADIX_MISS_NONE, NULL);
    assert_int_equal(kvs_radix_evict(e.r, 2), 2);
    match_is(&e, g1, tok, 16, 8, KVS_RADIX_MISS_EVICTED, NULL);
    env_ok(&e);

    kvs_radix_ns_put(e.r, g1);
    kvs_radix_ns_put(e.r, g2);
    kvs_radix_ns_put(e.r, ad);
    kvs_radix_ns_put(e.r, t1);
    env_done(&e);
}


static void
insert_fresh(env_t *e, kvs_radix_ns_t *ns, const int32_t *tok, uint32_t n,
    uint64_t now)
{
    seq_t  s;

    seq_fresh(e, &s, 0, tok, n);
    do_insert(e, ns, &s, n, 0, now);
    seq_end(e, &s);
}


static void
test_pins(void **state)
{
    env_t               e;
    kvs_radix_ns_t     *ns, *nt;
    kvs_radix_stats_t   st;
    kvs_err_t           err;
    uint32_t            i, pinned;
    int32_t             p[4][8], longer[16];
    int                 created;

    env_init(&e, 64, BT, 6);
    ns = ns_get(&e, &key_g1);
    for (i = 0; i < 4; i++) {
        fill(p[i], 8, 1000 * (int32_t) (i + 1));
        insert_fresh(&e, ns, p[i], 8, 0);
    }

    /* a pin holds its prefix against eviction */
    assert_int_equal(do_pin(&e, ns, p[0], 8, 1000, 0, &created), 8);
    assert_int_equal(created, 1);
    st = stats(&e);
    assert_int_equal(st.pins, 1);
    assert_int_equal(st.pinned_blocks, 2);
    assert_int_equal(kvs_radix_evictable(e.r), 6);
    assert_int_equal(kvs_radix_evict(e.r, ALL), 6);
    match_is(&e, ns, p[0], 8, 8, KVS_RADIX_MISS_NONE, NULL);
    match_is(&e, ns, p[1], 8, 0, KVS_RADIX_MISS_EVICTED, NULL);
    env_ok(&e);

    for (i = 1; i < 4; i++) {
        insert_fresh(&e, ns, p[i], 8, 100);
    }

    /* refreshed to 1500 at 500, never shortened by a short ttl */
    assert_int_equal(do_pin(&e, ns, p[0], 8, 1000, 500, &created), 8);
    assert_int_equal(created, 0);
    assert_int_equal(do_pin(&e, ns, p[0], 8, 10, 600, &created), 8);
    assert_int_equal(created, 0);
    assert_int_equal(stats(&e).pins, 1);

    kvs_radix_expire(e.r, 1000);
    kvs_radix_expire(e.r, 1499);
    st = stats(&e);
    assert_int_equal(st.pins, 1);
    assert_int_equal(st.expired_pins, 0);
    assert_int_equal(kvs_radix_evict(e.r, ALL), 6);
    match_is(&e, ns, p[0], 8, 8, KVS_RADIX_MISS_NONE, NULL);

    kvs_radix_expire(e.r, 1501);
    st = stats(&e);
    assert_int_equal(st.pins, 0);
    assert_int_equal(st.pinned_blocks, 0);
    assert_int_equal(st.expired_pins, 1);
    assert_int_equal(kvs_radix_evictable(e.r), 2);
    assert_int_equal(kvs_radix_evict(e.r, ALL), 2);
    env_ok(&e);

    /* pin_max_blocks 6: a fourth 2-block pin releases the least recently
     * refreshed one (p[1]), not the oldest created (p[0]) */
    for (i = 0; i < 4; i++) {
        insert_fresh(&e, ns, p[i], 8, 2000);
    }
    st = stats(&e);
    assert_int_equal(do_pin(&e, ns, p[0], 8, 100000, 2000, &created), 8);
    assert_int_equal(created, 1);
    assert_int_equal(do_pin(&e, ns, p[1], 8, 100000, 2010, &created), 8);
    assert_int_equal(do_pin(&e, ns, p[2], 8, 100000, 2020, &created), 8);
    assert_int_equal(stats(&e).pinned_blocks, 6);
    assert_int_equal(stats(&e).released_pins, st.released_pins);
    assert_int_equal(do_pin(&e, ns, p[0], 8, 100000, 2030, &created), 8);
    assert_int_equal(created, 0);
    assert_int_equal(do_pin(&e, ns, p[3], 8, 100000, 2040, &created), 8);
    assert_int_equal(created, 1);
    st = stats(&e);
    assert_int_equal(st.pins, 3);
    assert_int_equal(st.pinned_blocks, 6);
    assert_int_equal(st.released_pins, 1);
    assert_int_equal(kvs_radix_evictable(e.r), 2);
    assert_int_equal(kvs_radix_evict(e.r, ALL), 2);
    match_is(&e, ns, p[1], 8, 0, KVS_RADIX_MISS_EVICTED, NULL);
    match_is(&e, ns, p[0], 8, 8, KVS_RADIX_MISS_NONE, NULL);
    match_is(&e, ns, p[2], 8, 8, KVS_RADIX_MISS_NONE, NULL);
    match_is(&e, ns, p[3], 8, 8, KVS_RADIX_MISS_NONE, NULL);
    env_ok(&e);

    /* another namespace's pins count against its own bound only */
    nt = ns_get(&e, &key_t1);
    insert_fresh(&e, nt, p[1], 8, 2050);
    assert_int_equal(do_pin(&e, nt, p[1], 8, 100000, 2050, &created), 8);
    assert_int_equal(created, 1);
    st = stats(&e);
    assert_int_equal(st.pins, 4);
    assert_int_equal(st.released_pins, 1);
    assert_int_equal(st.pinned_blocks, 8);

    /* only the cached whole blocks of the tokens are pinned */
    memcpy(longer, p[2], sizeof(p[2]));
    fill(longer + 8, 8, 9999);
    assert_int_equal(do_pin(&e, ns, longer, 16, 100000, 2060, &created), 8);
    assert_int_equal(do_pin(&e, ns, longer, 7, 100000, 2060, &created), 4);
    assert_int_equal(stats(&e).pinned_blocks, 8);
    env_ok(&e);

    /* after an expiry a pin on the same prefix is new again */
    kvs_radix_expire(e.r, 2000000);
    st = stats(&e);
    assert_int_equal(st.pins, 0);
    assert_int_equal(st.pinned_blocks, 0);
    assert_int_equal(do_pin(&e, ns, p[0], 8, 100, 2000001, &created), 8);
    assert_int_equal(created, 1);
    env_ok(&e);

    /* a pin on what is not cached pins nothing */
    fill(longer, 16, 77777);
    assert_int_equal(do_pin(&e, ns, longer, 16, 1000, 2000002, &created),
                     0);
    assert_int_equal(stats(&e).pinned_blocks, 2);

    /* freeing the tree with a live pin gives every block back */
    kvs_radix_ns_put(e.r, ns);
    kvs_radix_ns_put(e.r, nt);
    env_done(&e);

    /* pin_max_blocks 0: pins are refused */
    env_init(&e, 16, BT, 0);
    ns = ns_get(&e, &key_g1);
    insert_fresh(&e, ns, p[0], 8, 0);
    pinned = 0;
    created = 0;
    (void) kvs_radix_pin(e.r, ns, p[0], 8, 1000, 0, &pinned, &created, &err);
    assert_int_equal(pinned, 0);
    st = stats(&e);
    assert_int_equal(st.pins, 0);
    assert_int_equal(st.pinned_blocks, 0);
    assert_int_equal(kvs_radix_evict(e.r, ALL), 2);
    kvs_radix_ns_put(e.r, ns);
    env_done(&e);
}


/*
 * A hit refreshes the pins on its path (the issue: "refreshed on each
 * hit"), so it must count as a refresh for the pin_max order too: the
 * least recently refreshed pin is the one released.
 */
static void
test_pin_hit_refresh(void **state)
{
    env_t               e;
    kvs_radix_ns_t     *ns;
    kvs_radix_match_t   m;
    kvs_radix_stats_t   st;
    uint32_t            i;
    int32_t             p[3][8], t[12];
    int                 created;

    env_init(&e, 64, BT, 4);
    ns = ns_get(&e, &key_g1);
    for (i = 0; i < 3; i++) {
        fill(p[i], 8, 1000 * (int32_t) (i + 1));
        insert_fresh(&e, ns, p[i], 8, 0);
    }

    /* a pin ending inside an edge holds only its own blocks */
    fill(t, 12, 5000);
    insert_fresh(&e, ns, t, 12, 0);
    assert_int_equal(do_pin(&e, ns, t, 8, 100, 0, &created), 8);
    assert_int_equal(stats(&e).pinned_blocks, 2);
    assert_int_equal(kvs_radix_evictable(e.r), 3 * 2 + 1);
    kvs_radix_expire(e.r, 200);
    assert_int_equal(stats(&e).pins, 0);

    /* A until 1000, B until 1010; a hit on A at 500 makes it 1500 */
    assert_int_equal(do_pin(&e, ns, p[0], 8, 1000, 0, &created), 8);
    assert_int_equal(do_pin(&e, ns, p[1], 8, 1000, 10, &created), 8);
    do_match(&e, ns, p[0], 8, 1, 500, 0, &m, NULL);
    assert_int_equal(m.n_tokens, 8);
    kvs_radix_unlock(e.r, m.node);
    kvs_radix_expire(e.r, 1200);
    st = stats(&e);
    assert_int_equal(st.pins, 1);
    assert_int_equal(st.expired_pins, 2);
    match_is(&e, ns, p[1], 8, 8, KVS_RADIX_MISS_NONE, NULL);
    assert_int_equal(kvs_radix_evict(e.r, ALL), 2 + 2 + 3);
    match_is(&e, ns, p[0], 8, 8, KVS_RADIX_MISS_NONE, NULL);
    env_ok(&e);

    /* B pinned again at 1200; A hit at 1300; C at 1400 is one pin too
     * many: B, refreshed at 1200, goes, not A */
    insert_fresh(&e, ns, p[1], 8, 1200);
    insert_fresh(&e, ns, p[2], 8, 1200);
    assert_int_equal(do_pin(&e, ns, p[1], 8, 1000, 1200, &created), 8);
    assert_int_equal(created, 1);
    do_match(&e, ns, p[0], 8, 1, 1300, 0, &m, NULL);
    kvs_radix_unlock(e.r, m.node);
    assert_int_equal(do_pin(&e, ns, p[2], 8, 1000, 1400, &created), 8);
    st = stats(&e);
    assert_int_equal(st.released_pins, 1);
    assert_int_equal(st.pins, 2);
    assert_int_equal(kvs_radix_evict(e.r, ALL), 2);
    match_is(&e, ns, p[0], 8, 8, KVS_RADIX_MISS_NONE, NULL);
    match_is(&e, ns, p[1], 8, 0, KVS_RADIX_MISS_EVICTED, NULL);
    env_ok(&e);

    kvs_radix_ns_put(e.r, ns);
    env_done(&e);
}


/*
 * The randomized run: live sequences that match, copy a shared partial
 * block, grow (evicting when the pool is short, skipping when still
 * short), fork, insert midway or at the end, cancel; pins with TTLs while
 * time advances; evictions; namespace holds across keys.
 *
 * The oracle: which blocks are in the tree is known without looking
 * inside it (a block's references beyond its tables' are the tree's),
 * and each block that joins the tree is recorded with its key, its index
 * in the prefix and the chain hash of the prefix through it.  From that,
 * the longest cached prefix of any query is computed independently of
 * the tree's shape, and every match must reuse exactly that many tokens.
 */

#define R_KEYS      6
#define R_CONV      6
#define R_CONV_LEN  192
#define R_VOCAB     12
#define R_SEQS      8
#define R_TOKENS    1024          /* the pool, in token positions */
#define R_PIN_MAX   16            /* blocks per namespace */
#define R_LOCKS     4
#define R_EVER      (1u << 19)    /* (key, prefix) pairs ever cached */
#define R_PINREC    64            /* recent pins whose blocks are watched */


static const kvs_radix_key_t  r_keys[R_KEYS] = {
    { 1, 0, "", 0 },
    { 2, 0, "", 0 },
    { 1, 3, "", 0 },
    { 1, 0, "alice", 5 },
    { 1, 0, "bob", 3 },
    { 2, 3, "alice", 5 },
};


typedef struct {
    seq_t               s;
    int                 live;
    kvs_radix_ns_t     *ns;
    int32_t             plan[MAX_TOK];    /* the tokens it will have */
    uint32_t            plan_len;
    kvs_radix_node_t   *lock[R_LOCKS];
    uint32_t            n_locks;
    /* [lock][block] tree blocks each lock keeps in the tree */
    uint32_t            held[R_LOCKS][MAX_BLK];
    uint32_t            n_held[R_LOCKS];
} rseq_t;


/* What a block in the tree caches, recorded when it joined. */
typedef struct {
    uint64_t  hash;                   /* chain hash through this block */
    uint64_t  parent;                 /* chain hash of what precedes it */
    uint32_t  pos;                    /* its index in the prefix */
    int       key;
    uint64_t  stamp;                  /* the op that recorded it */
} rblk_t;


/* A pin made: until its time is up, and unless its namespace released
 * a pin over pin_max since, its blocks stay in the tree. */
typedef struct {
    int                 key;
    uint64_t            until;            /* a lower bound: hits extend */
    uint64_t            rel;              /* rel[key] when made */
    uint32_t            n;
    uint32_t            blocks[R_PIN_MAX];
} rpin_t;


typedef struct {
    env_t               e;
    uint32_t            nb;               /* pool blocks */
    uint32_t            bt;
    rseq_t              seq[R_SEQS];
    int32_t             conv[R_CONV][R_CONV_LEN];
    uint32_t            holds[R_KEYS];
    uint32_t           *refs;             /* [nb] table references */
    uint8_t            *tree;             /* [nb] 1: in the tree */
    uint8_t            *was;              /* [nb] tree[] at the last check */
    uint8_t            *seen;             /* [nb] scratch */
    rblk_t             *info;             /* [nb] valid while tree[b] */
    uint32_t           *set;              /* [mask + 1] tree blocks + 1 by
                                             (key, hash), 0: empty */
    uint32_t            mask;
    rblk_t             *ever;             /* [R_EVER] every (key, hash)
                                             that was ever cached */
    uint32_t            n_ever;
    rpin_t              pinrec[R_PINREC]; /* a ring */
    uint32_t            n_pinrec;
    uint64_t            rel[R_KEYS];      /* pin calls that released */
    uint64_t            rng;
    uint64_t            now;
    uint64_t            op;
    const char         *op_name;
    uint64_t            prev_blocks;
    /* what the run went through */
    uint64_t            n_miss[KVS_RADIX_MISS_OFF + 1];
    uint64_t            hit_tokens, query_tokens, partial_hits, cows;
    uint64_t            skips, forks, inserts, splits, evicted, pins;
    /* index names (see the top): [nb] per tree block, as recorded */
    uint8_t           (*iname)[KVS_RADIX_NAME_LEN];
    uint8_t           (*iparent)[KVS_RADIX_NAME_LEN];  /* zero: root */
    uint8_t             added[MAX_BLK][KVS_RADIX_NAME_LEN];  /* by the
                                             hook, since the last insert */
    uint32_t            n_added;
    uint8_t           (*evl)[KVS_RADIX_NAME_LEN];  /* [nb] reported
                                             evicted since the last check */
    uint32_t            n_evl;
    uint32_t           *ord;              /* [nb] scratch */
    uint64_t            names_added, names_evicted;
} rt_t;


/* The test's own block name: xxh3-128 of (parent name or 16 zeros,
 * epoch, adapter, scope, the block's tokens); any injective-enough
 * function would do, the tree must only store and report it. */
static void
test_name(const kvs_radix_key_t *key, const uint8_t *parent,
    const int32_t *tokens, uint32_t bt, uint8_t *out)
{
    size_t              n;
    uint8_t             buf[KVS_RADIX_NAME_LEN + 12 + KVS_RADIX_MAX_SCOPE
                            + 64 * sizeof(int32_t)];
    XXH128_canonical_t  c;

    assert_true(bt <= 64);
    memset(buf, 0, KVS_RADIX_NAME_LEN);
    if (parent != NULL) {
        memcpy(buf, parent, KVS_RADIX_NAME_LEN);
    }
    n = KVS_RADIX_NAME_LEN;
    memcpy(buf + n, &key->epoch, 8);
    memcpy(buf + n + 8, &key->adapter, 4);
    n += 12;
    memcpy(buf + n, key->scope, key->scope_len);
    n += key->scope_len;
    memcpy(buf + n, tokens, bt * sizeof(int32_t));
    n += bt * sizeof(int32_t);

    XXH128_canonicalFromHash(&c, XXH3_128bits(buf, n));
    memcpy(out, c.digest, KVS_RADIX_NAME_LEN);
}


static void
rt_hook_added(void *arg, const kvs_radix_key_t *key, const uint8_t *parent,
    const int32_t *tokens, uint32_t n, uint8_t (*names)[KVS_RADIX_NAME_LEN])
{
    uint32_t   i;
    rt_t      *rt = arg;

    for (i = 0; i < n; i++) {
        assert_false(kvs_radix_named(names[i]));      /* zeroed for us */
        test_name(key, i == 0 ? parent : names[i - 1],
                  tokens + (size_t) i * rt->e.bt, rt->e.bt, names[i]);

        if (rt->n_added >= MAX_BLK) {
            fail_msg("op %lu: more than %u names added by one insert",
                     (unsigned long) rt->op, MAX_BLK);
        }
        memcpy(rt->added[rt->n_added++], names[i], KVS_RADIX_NAME_LEN);
    }
}


static void
rt_hook_evicted(void *arg, const uint8_t *name)
{
    rt_t  *rt = arg;

    if (rt->n_evl >= rt->nb) {
        fail_msg("op %lu: more names evicted than the pool has blocks",
                 (unsigned long) rt->op);
    }
    memcpy(rt->evl[rt->n_evl++], name, KVS_RADIX_NAME_LEN);
}


static const uint8_t (*rt_sort_names)[KVS_RADIX_NAME_LEN];

static int
rt_name_cmp(const void *a, const void *b)
{
    return memcmp(rt_sort_names[*(const uint32_t *) a],
                  rt_sort_names[*(const uint32_t *) b], KVS_RADIX_NAME_LEN);
}


/* Where name is among names[n], through ord (indices sorted by name);
 * -1 when absent. */
static long
rt_name_pos(uint8_t (*names)[KVS_RADIX_NAME_LEN], const uint32_t *ord,
    uint32_t n, const uint8_t *name)
{
    uint32_t  lo, hi, mid;
    int       c;

    lo = 0;
    hi = n;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        c = memcmp(names[ord[mid]], name, KVS_RADIX_NAME_LEN);
        if (c == 0) {
            return (long) ord[mid];
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }

    return -1;
}


/* Sorts ord[0, n) as the indices of names[] by name; fails on a
 * duplicate. */
static void
rt_names_sort(rt_t *rt, uint8_t (*names)[KVS_RADIX_NAME_LEN], uint32_t n,
    const char *what)
{
    uint32_t  i;

    for (i = 0; i < n; i++) {
        rt->ord[i] = i;
    }
    rt_sort_names = (const uint8_t (*)[KVS_RADIX_NAME_LEN]) names;
    qsort(rt->ord, n, sizeof(uint32_t), rt_name_cmp);

    for (i = 1; i < n; i++) {
        if (memcmp(names[rt->ord[i - 1]], names[rt->ord[i]],
                   KVS_RADIX_NAME_LEN) == 0)
        {
            fail_msg("op %lu (%s): a name %s twice", (unsigned long) rt->op,
                     rt->op_name, what);
        }
    }
}


static void
rt_list_one(void *arg, const uint8_t *name)
{
    rt_t  *rt = arg;

    /* into the eviction list's room, which is empty while listing */
    if (rt->n_evl >= rt->nb) {
        fail_msg("op %lu: more names listed than the pool has blocks",
                 (unsigned long) rt->op);
    }
    memcpy(rt->evl[rt->n_evl++], name, KVS_RADIX_NAME_LEN);
}


/*
 * The index names against the blocks that left and stayed since the
 * last check (needs a fresh rt_scan(), was[] still the last check's):
 * those that left were reported once each, children first; the listing
 * is exactly the tree's blocks' names, parents first.
 */
static void
rt_check_names(rt_t *rt)
{
    uint32_t  b, n, gone;
    long      at, up;
    uint64_t  listed;

    rt_names_sort(rt, rt->evl, rt->n_evl, "reported evicted");
    gone = 0;

    for (b = 0; b < rt->nb; b++) {
        if (!rt->was[b] || rt->tree[b]) {
            continue;
        }

        gone++;
        at = rt_name_pos(rt->evl, rt->ord, rt->n_evl, rt->iname[b]);
        if (at < 0) {
            fail_msg("op %lu (%s): block %u left the tree, its name was not "
                     "reported", (unsigned long) rt->op, rt->op_name, b);
        }

        up = rt_name_pos(rt->evl, rt->ord, rt->n_evl, rt->iparent[b]);
        if (up >= 0 && up < at) {
            fail_msg("op %lu (%s): a parent block's name was reported "
                     "evicted before its child's", (unsigned long) rt->op,
                     rt->op_name);
        }
    }

    if (gone != rt->n_evl) {
        fail_msg("op %lu (%s): %u blocks left the tree, %u names reported "
                 "evicted", (unsigned long) rt->op, rt->op_name, gone,
                 rt->n_evl);
    }

    rt->names_evicted += rt->n_evl;
    rt->n_evl = 0;

    /* the listing: the tree's names, each after its parent's (an
     * O(n log n) check: every 16th operation) */
    if (rt->op % 16 != 0) {
        return;
    }

    listed = kvs_radix_list_names(rt->e.r, rt_list_one, rt);
    n = rt->n_evl;
    assert_int_equal(listed, n);
    rt_names_sort(rt, rt->evl, n, "listed");
    gone = 0;

    for (b = 0; b < rt->nb; b++) {
        if (!rt->tree[b]) {
            continue;
        }

        at = rt_name_pos(rt->evl, rt->ord, n, rt->iname[b]);
        if (at < 0) {
            fail_msg("op %lu (%s): block %u is in the tree, its name is not "
                     "listed", (unsigned long) rt->op, rt->op_name, b);
        }

        if (kvs_radix_named(rt->iparent[b])) {
            up = rt_name_pos(rt->evl, rt->ord, n, rt->iparent[b]);
            if (up < 0 || up > at) {
                fail_msg("op %lu (%s): block %u is listed before its parent",
                         (unsigned long) rt->op, rt->op_name, b);
            }
        }
        gone++;
    }

    if (gone != n) {
        fail_msg("op %lu (%s): %u names listed, %u tree blocks",
                 (unsigned long) rt->op, rt->op_name, n, gone);
    }

    rt->n_evl = 0;
}


static uint32_t
rnd(rt_t *rt, uint32_t n)
{
    return (uint32_t) (kvs_splitmix64(&rt->rng) % n);
}


/* h[i]: the chain hash of tokens[0, i * bt), for i in [0, levels]. */
static void
rt_chain(const rt_t *rt, const int32_t *tokens, uint32_t levels,
    uint64_t *h)
{
    uint32_t  i;

    h[0] = KVS_FNV1A64_INIT;
    for (i = 0; i < levels; i++) {
        h[i + 1] = kvs_fnv1a64(h[i], tokens + (size_t) i * rt->bt,
                               rt->bt * sizeof(int32_t));
    }
}


static uint32_t
rt_slot(const rt_t *rt, int key, uint64_t hash)
{
    return (uint32_t) ((hash ^ ((uint64_t) key * 0x9e3779b97f4a7c15ULL))
                       & rt->mask);
}


/* The tree block caching (key, hash), or KVS_KV_NONE. */
static uint32_t
rt_find(const rt_t *rt, int key, uint64_t hash)
{
    uint32_t  i, b;

    for (i = rt_slot(rt, key, hash); rt->set[i] != 0;
         i = (i + 1) & rt->mask)
    {
        b = rt->set[i] - 1;
        if (rt->info[b].key == key && rt->info[b].hash == hash) {
            return b;
        }
    }

    return KVS_KV_NONE;
}


/* Records that (key, hash) was cached; 0 once the record is full. */
static int
rt_ever(rt_t *rt, int key, uint64_t hash, int add)
{
    uint32_t  i;

    for (i = (uint32_t) (hash ^ (uint64_t) key) & (R_EVER - 1);
         rt->ever[i].stamp != 0; i = (i + 1) & (R_EVER - 1))
    {
        if (rt->ever[i].key == key && rt->ever[i].hash == hash) {
            return 1;
        }
    }

    if (!add || rt->n_ever >= R_EVER / 4 * 3) {
        return 0;
    }

    rt->ever[i].key = key;
    rt->ever[i].hash = hash;
    rt->ever[i].stamp = 1;
    rt->n_ever++;

    return 1;
}


/* The reason a block cached under key o is no hit for key q. */
static kvs_radix_miss_t
rt_why(int o, int q)
{
    return r_keys[o].epoch != r_keys[q].epoch ? KVS_RADIX_MISS_EPOCH
           : r_keys[o].adapter != r_keys[q].adapter ? KVS_RADIX_MISS_ADAPTER
           : KVS_RADIX_MISS_SCOPE;
}


static void
rt_refs(rt_t *rt)
{
    uint32_t  i, j, b, d;

    memset(rt->refs, 0, rt->nb * sizeof(uint32_t));

    for (i = 0; i < R_SEQS; i++) {
        if (!rt->seq[i].live) {
            continue;
        }
        for (j = 0; j < rt->seq[i].s.t.n_blocks; j++) {
            rt->refs[rt->seq[i].s.t.blocks[j]]++;
        }
    }

    for (b = 0; b < rt->nb; b++) {
        d = ref(&rt->e, b) - rt->refs[b];
        if (ref(&rt->e, b) < rt->refs[b] || d > 1) {
            fail_msg("op %lu (%s): block %u has %u references, tables "
                     "hold %u (the tree holds at most one)",
                     (unsigned long) rt->op, rt->op_name, b, ref(&rt->e, b),
                     rt->refs[b]);
        }
        rt->tree[b] = (uint8_t) d;
    }
}


/* Recomputes tree[] and the (key, hash) index of the tree's blocks; no
 * two blocks may cache the same prefix under one key. */
static void
rt_scan(rt_t *rt)
{
    uint32_t  b, i;

    rt_refs(rt);
    memset(rt->set, 0, (rt->mask + 1) * sizeof(uint32_t));

    for (b = 0; b < rt->nb; b++) {
        if (!rt->tree[b]) {
            continue;
        }

        for (i = rt_slot(rt, rt->info[b].key, rt->info[b].hash);
             rt->set[i] != 0; i = (i + 1) & rt->mask)
        {
            if (rt->info[rt->set[i] - 1].key == rt->info[b].key
                && rt->info[rt->set[i] - 1].hash == rt->info[b].hash)
            {
                fail_msg("op %lu (%s): blocks %u and %u both cache block "
                         "%u of one prefix under key %d",
                         (unsigned long) rt->op, rt->op_name,
                         rt->set[i] - 1, b, rt->info[b].pos,
                         rt->info[b].key);
            }
        }
        rt->set[i] = b + 1;
    }
}


/*
 * The longest cached prefix of tokens[0, limit) under key, from the
 * recorded blocks alone: whole blocks while the prefix through the next
 * one is cached, then the longest common run with any cached block that
 * follows that prefix.  *whole gets the whole blocks' tokens.  Needs a
 * fresh rt_scan().
 */
static uint32_t
rt_expect(rt_t *rt, int key, const int32_t *tokens, uint32_t limit,
    uint32_t *whole)
{
    uint64_t  h[MAX_BLK + 1];
    uint32_t  w, n, best, b, j, at;

    rt_chain(rt, tokens, limit / rt->bt, h);

    for (w = 0; w < limit / rt->bt; w++) {
        b = rt_find(rt, key, h[w + 1]);
        if (b == KVS_KV_NONE) {
            break;
        }
        assert_int_equal(rt->info[b].pos, w);
    }

    *whole = w * rt->bt;
    best = *whole;
    at = *whole;

    if (at == limit) {
        return best;
    }

    for (b = 0; b < rt->nb; b++) {
        if (!rt->tree[b] || rt->info[b].key != key || rt->info[b].pos != w
            || rt->info[b].parent != h[w])
        {
            continue;
        }

        for (j = 0; j < rt->bt && at + j < limit; j++) {
            if (rt->e.shadow[(size_t) b * rt->bt + j] != tokens[at + j]) {
                break;
            }
        }

        n = at + j;
        best = n > best ? n : best;
    }

    return best;
}


static void
rt_check(rt_t *rt, int evicting)
{
    env_t              *e;
    kvs_radix_stats_t   st;
    kvs_err_t           err;
    const rpin_t       *pr;
    uint32_t            i, j, k, b, table_only, ev, nk, locked;
    uint64_t            in_tree;

    e = &rt->e;

    if (kvs_kv_pool_check(e->pool, &err) != KVS_OK) {
        fail_msg("op %lu (%s): kvs_kv_pool_check: %s",
                 (unsigned long) rt->op, rt->op_name, err.msg);
    }
    if (kvs_radix_check(e->r, &err) != KVS_OK) {
        fail_msg("op %lu (%s): kvs_radix_check: %s",
                 (unsigned long) rt->op, rt->op_name, err.msg);
    }

    for (i = 0; i < R_SEQS; i++) {
        if (rt->seq[i].live
            && kvs_kv_table_check(&rt->seq[i].s.t, e->pool, &err) != KVS_OK)
        {
            fail_msg("op %lu: table %u: %s", (unsigned long) rt->op, i,
                     err.msg);
        }
    }

    rt_scan(rt);
    st = stats(e);
    in_tree = 0;
    table_only = 0;

    for (b = 0; b < rt->nb; b++) {
        in_tree += rt->tree[b];
        table_only += rt->refs[b] > 0 && !rt->tree[b];

        /* blocks join the tree only by an insert of a table's blocks */
        if (rt->tree[b] && !rt->was[b] && rt->info[b].stamp != rt->op + 1) {
            fail_msg("op %lu (%s): block %u joined the tree, not from an "
                     "insert", (unsigned long) rt->op, rt->op_name, b);
        }

        /* the cached prefixes are closed under taking prefixes */
        if (rt->tree[b] && rt->info[b].pos > 0
            && rt_find(rt, rt->info[b].key, rt->info[b].parent)
               == KVS_KV_NONE)
        {
            fail_msg("op %lu (%s): block %u (index %u) is cached without "
                     "the block before it", (unsigned long) rt->op,
                     rt->op_name, b, rt->info[b].pos);
        }
    }
    rt_check_names(rt);
    memcpy(rt->was, rt->tree, rt->nb);

    if (in_tree != st.blocks) {
        fail_msg("op %lu (%s): the tree holds references on %lu blocks, "
                 "stats say %lu", (unsigned long) rt->op, rt->op_name,
                 (unsigned long) in_tree, (unsigned long) st.blocks);
    }

    if (kvs_kv_pool_free_count(e->pool) + table_only + st.blocks != rt->nb) {
        fail_msg("op %lu (%s): free %u + table-only %u + tree %lu != %u",
                 (unsigned long) rt->op, rt->op_name,
                 kvs_kv_pool_free_count(e->pool), table_only,
                 (unsigned long) st.blocks, rt->nb);
    }

    if (!evicting && st.blocks < rt->prev_blocks) {
        fail_msg("op %lu (%s): the tree lost %lu blocks outside eviction",
                 (unsigned long) rt->op, rt->op_name,
                 (unsigned long) (rt->prev_blocks - st.blocks));
    }
    rt->prev_blocks = st.blocks;

    /* locked paths stay in the tree */
    memset(rt->seen, 0, rt->nb);
    locked = 0;
    for (i = 0; i < R_SEQS; i++) {
        if (!rt->seq[i].live) {
            continue;
        }
        for (k = 0; k < rt->seq[i].n_locks; k++) {
            for (j = 0; j < rt->seq[i].n_held[k]; j++) {
                b = rt->seq[i].held[k][j];
                if (!rt->tree[b]) {
                    fail_msg("op %lu (%s): block %u of a locked path left "
                             "the tree", (unsigned long) rt->op,
                             rt->op_name, b);
                }
                locked += !rt->seen[b];
                rt->seen[b] = 1;
            }
        }
    }

    /* live pins stay in the tree */
    for (i = 0; i < R_PINREC && i < rt->n_pinrec; i++) {
        pr = &rt->pinrec[i];

        if (rt->now >= pr->until || rt->rel[pr->key] != pr->rel) {
            continue;
        }
        for (j = 0; j < pr->n; j++) {
            if (!rt->tree[pr->blocks[j]]) {
                fail_msg("op %lu (%s): block %u of a pin live until %lu "
                         "(now %lu) left the tree", (unsigned long) rt->op,
                         rt->op_name, pr->blocks[j],
                         (unsigned long) pr->until, (unsigned long) rt->now);
            }
        }
    }

    ev = kvs_radix_evictable(e->r);
    assert_true(st.pinned_blocks <= st.blocks);
    if (ev + st.pinned_blocks > st.blocks || ev + locked > st.blocks) {
        fail_msg("op %lu (%s): evictable %u, tree %lu, pinned %lu, locked "
                 "%u", (unsigned long) rt->op, rt->op_name, ev,
                 (unsigned long) st.blocks, (unsigned long) st.pinned_blocks,
                 locked);
    }
    assert_true(st.pinned_blocks <= (uint64_t) R_PIN_MAX * st.namespaces);

    nk = 0;
    for (k = 0; k < R_KEYS; k++) {
        nk += rt->holds[k] > 0;
    }
    assert_true(st.namespaces >= nk && st.namespaces <= R_KEYS);
    if (st.blocks == 0 && st.pins == 0 && st.namespaces != nk) {
        fail_msg("op %lu (%s): empty tree, %lu namespaces, %u held",
                 (unsigned long) rt->op, rt->op_name,
                 (unsigned long) st.namespaces, nk);
    }
}


/* kvs_radix_evict(want), checked against evictable and the pool. */
static void
rt_evict(rt_t *rt, uint32_t want)
{
    env_t              *e;
    kvs_radix_stats_t   st0, st1;
    uint32_t            free0, ev0, ev1, freed, gone;

    e = &rt->e;
    st0 = stats(e);
    free0 = kvs_kv_pool_free_count(e->pool);
    ev0 = kvs_radix_evictable(e->r);

    freed = kvs_radix_evict(e->r, want);

    st1 = stats(e);
    ev1 = kvs_radix_evictable(e->r);
    assert_true(st1.blocks <= st0.blocks);
    gone = (uint32_t) (st0.blocks - st1.blocks);

    if (freed != kvs_kv_pool_free_count(e->pool) - free0) {
        fail_msg("op %lu: evict(%u) returned %u, the pool gained %u",
                 (unsigned long) rt->op, want, freed,
                 kvs_kv_pool_free_count(e->pool) - free0);
    }

    if (gone > ev0 || ev1 != ev0 - gone) {
        fail_msg("op %lu: evict(%u): evictable %u before, %u after, %u "
                 "blocks left the tree", (unsigned long) rt->op, want, ev0,
                 ev1, gone);
    }

    if (freed < want && ev1 != 0) {
        fail_msg("op %lu: evict(%u) freed %u and stopped with %u evictable",
                 (unsigned long) rt->op, want, freed, ev1);
    }

    if (st1.evicted_blocks - st0.evicted_blocks != gone) {
        fail_msg("op %lu: evicted_blocks grew by %lu, %u left the tree",
                 (unsigned long) rt->op,
                 (unsigned long) (st1.evicted_blocks - st0.evicted_blocks),
                 gone);
    }

    rt->evicted += gone;
    rt_check(rt, 1);
}


static kvs_radix_ns_t *
rt_ns_get(rt_t *rt, int k)
{
    rt->holds[k]++;
    return ns_get(&rt->e, &r_keys[k]);
}


static void
rt_ns_put(rt_t *rt, int k, kvs_radix_ns_t *ns)
{
    assert_true(rt->holds[k] > 0);
    rt->holds[k]--;
    kvs_radix_ns_put(rt->e.r, ns);
}


/* Grows a live sequence to n tokens of its plan, evicting first when the
 * pool is short; KVS_KV_EFULL when it still is. */
static int
rt_grow(rt_t *rt, rseq_t *q, uint32_t n)
{
    uint32_t  need, nfree;
    int       rc;

    need = seq_need(&rt->e, &q->s, n);
    nfree = kvs_kv_pool_free_count(rt->e.pool);

    if (need > nfree) {
        rt_evict(rt, need - nfree);
        need = seq_need(&rt->e, &q->s, n);
        if (need > kvs_kv_pool_free_count(rt->e.pool)) {
            rt->skips++;
            return KVS_KV_EFULL;
        }
    }

    rc = seq_grow(&rt->e, &q->s, q->plan, n, &rt->cows);
    assert_int_equal(rc, KVS_OK);

    return rc;
}


static void
rt_lock_add(rt_t *rt, rseq_t *q, kvs_radix_node_t *node,
    const uint32_t *blocks, uint32_t n)
{
    assert_true(q->n_locks < R_LOCKS);
    q->lock[q->n_locks] = node;
    memcpy(q->held[q->n_locks], blocks, n * sizeof(uint32_t));
    q->n_held[q->n_locks] = n;
    q->n_locks++;
}


/* Drops the sequence: its locks, its namespace hold, its blocks. */
static void
rt_end(rt_t *rt, rseq_t *q)
{
    uint32_t  i;

    for (i = 0; i < q->n_locks; i++) {
        kvs_radix_unlock(rt->e.r, q->lock[i]);
    }
    q->n_locks = 0;
    rt_ns_put(rt, q->s.key, q->ns);
    seq_end(&rt->e, &q->s);
    q->live = 0;
}


/*
 * Why a match stopped, against the oracle: inside a block only on a
 * divergence; at a block boundary with a whole block left to compare,
 * EVICTED only for a prefix this key once cached, and otherwise the
 * first of EPOCH, ADAPTER, SCOPE that another key's cached copy of the
 * next block shows, EMPTY when there is none.
 */
static void
rt_verify_miss(rt_t *rt, int key, const int32_t *tok, uint32_t limit,
    const kvs_radix_match_t *m)
{
    uint64_t          h[MAX_BLK + 1];
    uint32_t          n, w, b;
    kvs_radix_miss_t  why, o;

    n = m->n_tokens;
    w = n / rt->bt;

    if (n == limit || m->miss == KVS_RADIX_MISS_DIVERGED) {
        return;
    }

    if (n % rt->bt != 0) {
        fail_msg("op %lu (%s): stopped inside a block at %u with miss %s",
                 (unsigned long) rt->op, rt->op_name, n,
                 kvs_radix_miss_name(m->miss));
    }

    if (limit - n < rt->bt) {
        if (m->miss != KVS_RADIX_MISS_EMPTY) {
            fail_msg("op %lu (%s): under a block left at %u, miss %s",
                     (unsigned long) rt->op, rt->op_name, n,
                     kvs_radix_miss_name(m->miss));
        }
        return;
    }

    rt_chain(rt, tok, w + 1, h);

    if (m->miss == KVS_RADIX_MISS_EVICTED) {
        if (!rt_ever(rt, key, h[w + 1], 0)
            && rt->n_ever < R_EVER / 4 * 3)
        {
            fail_msg("op %lu (%s): miss evicted at %u under key %d, which "
                     "never cached that block", (unsigned long) rt->op,
                     rt->op_name, n, key);
        }
        return;
    }

    why = KVS_RADIX_MISS_EMPTY;
    for (b = 0; b < rt->nb; b++) {
        if (rt->tree[b] && rt->info[b].hash == h[w + 1]
            && rt->info[b].pos == w && rt->info[b].key != key)
        {
            o = rt_why(rt->info[b].key, key);
            why = why == KVS_RADIX_MISS_EMPTY || o < why ? o : why;
        }
    }

    if (m->miss != why) {
        fail_msg("op %lu (%s): miss %s at %u under key %d; the other keys' "
                 "cached blocks say %s", (unsigned long) rt->op,
                 rt->op_name, kvs_radix_miss_name(m->miss), n, key,
                 kvs_radix_miss_name(why));
    }
}


/* A match checked against the oracle: exactly the longest cached prefix,
 * from blocks in the tree, written under the same key. */
static void
rt_verify(rt_t *rt, int key, const int32_t *tok, uint32_t limit,
    const kvs_radix_match_t *m, const uint32_t *got)
{
    uint32_t  i, want, whole;

    rt_scan(rt);

    for (i = 0; i < m->n_blocks; i++) {
        if (!rt->tree[got[i]]) {
            fail_msg("op %lu (%s): match returned block %u, not in the "
                     "tree", (unsigned long) rt->op, rt->op_name, got[i]);
        }
    }

    want = rt_expect(rt, key, tok, limit, &whole);
    if (m->n_tokens != want) {
        fail_msg("op %lu (%s): match under key %d, limit %u: reused %u "
                 "tokens, the longest cached prefix is %u (%u in whole "
                 "blocks), miss %s", (unsigned long) rt->op, rt->op_name,
                 key, limit, m->n_tokens, want, whole,
                 kvs_radix_miss_name(m->miss));
    }

    rt_verify_miss(rt, key, tok, limit, m);
}


static void
rt_match(rt_t *rt, rseq_t *q, uint32_t limit, int lock, uint32_t *got,
    kvs_radix_match_t *m)
{
    do_match(&rt->e, q->ns, q->plan, limit, lock, rt->now, q->s.key, m, got);
    rt_verify(rt, q->s.key, q->plan, limit, m, got);

    rt->n_miss[m->miss]++;
    rt->query_tokens += limit;
    rt->hit_tokens += m->n_tokens;
    rt->partial_hits += m->n_tokens % rt->bt != 0;
}


static void
rt_start(rt_t *rt, rseq_t *q)
{
    kvs_radix_match_t   m;
    uint32_t            got[MAX_BLK], p, g, i, c;
    int                 k, lock, follow;

    memset(q, 0, sizeof(rseq_t));
    k = rnd(rt, 3) != 0 ? 0 : (int) rnd(rt, R_KEYS);
    c = rnd(rt, R_CONV);
    p = 1 + rnd(rt, R_CONV_LEN - 1);
    g = rnd(rt, 48);
    follow = rnd(rt, 4) != 0;

    /* a prompt from a conversation, sometimes edited; a reply that either
     * continues the conversation (the next turn hits it) or not */
    q->plan_len = p + g < MAX_TOK ? p + g : MAX_TOK;
    for (i = 0; i < q->plan_len; i++) {
        q->plan[i] = i < p || (follow && i < R_CONV_LEN)
                     ? rt->conv[c][i] : (int32_t) rnd(rt, R_VOCAB);
    }
    if (rnd(rt, 4) == 0) {
        i = rnd(rt, p);
        q->plan[i] = (q->plan[i] + 1 + (int32_t) rnd(rt, R_VOCAB - 1))
                     % R_VOCAB;
    }

    q->ns = rt_ns_get(rt, k);
    q->live = 1;
    q->s.key = k;

    lock = rnd(rt, 4) != 0;
    rt_match(rt, q, p - 1, lock, got, &m);

    seq_adopt(&rt->e, &q->s, k, q->plan, got, m.n_tokens);
    if (lock && m.node != NULL) {
        rt_lock_add(rt, q, m.node, got, m.n_blocks);
    }
    rt_check(rt, 0);

    /* the prompt's prefill */
    if (rt_grow(rt, q, p) != KVS_OK) {
        rt_end(rt, q);
    }
}


static void
rt_insert(rt_t *rt, rseq_t *q, int lock)
{
    kvs_radix_match_t   m;
    kvs_radix_stats_t   st0, st1;
    kvs_radix_node_t   *node;
    uint64_t            h[MAX_BLK + 1];
    uint32_t            got[MAX_BLK], n, w, i, b, first;
    rblk_t             *in;
    uint8_t             want[MAX_BLK][KVS_RADIX_NAME_LEN];

    n = q->s.t.n_tokens;
    w = n / rt->bt;
    rt_chain(rt, q->s.tok, w, h);

    for (i = 0; i < w; i++) {
        test_name(&r_keys[q->s.key], i == 0 ? NULL : want[i - 1],
                  q->s.tok + (size_t) i * rt->bt, rt->bt, want[i]);
    }

    /* a table's block already in the tree caches the same prefix */
    rt_scan(rt);
    for (i = 0; i < w; i++) {
        b = q->s.t.blocks[i];
        in = &rt->info[b];
        if (rt->tree[b] && (in->key != q->s.key || in->pos != i
                            || in->hash != h[i + 1]))
        {
            fail_msg("op %lu: block %u at index %u of a key %d table is in "
                     "the tree as index %u of key %d",
                     (unsigned long) rt->op, b, i, q->s.key, in->pos,
                     in->key);
        }
    }

    st0 = stats(&rt->e);
    rt->n_added = 0;
    node = do_insert(&rt->e, q->ns, &q->s, n, lock, rt->now);
    st1 = stats(&rt->e);
    assert_true(st1.blocks - st0.blocks <= w);
    rt->inserts++;
    rt->splits += st1.nodes >= st0.nodes + 2;

    /* the blocks that joined are the prefix's last ones, named by the
     * hook in order, once each */
    first = (uint32_t) (w - (st1.blocks - st0.blocks));
    if (rt->n_added != w - first
        || (rt->n_added > 0
            && memcmp(rt->added, want[first],
                      (size_t) rt->n_added * KVS_RADIX_NAME_LEN) != 0))
    {
        fail_msg("op %lu: insert of %u blocks (%u new): %u names added, or "
                 "not the blocks' own", (unsigned long) rt->op, w,
                 w - first, rt->n_added);
    }
    rt->names_added += rt->n_added;

    /* record the blocks that joined */
    for (i = 0; i < w; i++) {
        b = q->s.t.blocks[i];
        if (!rt->tree[b] && ref(&rt->e, b) == rt->refs[b] + 1) {
            if (i < first) {
                fail_msg("op %lu: block %u joined at index %u, before the "
                         "new ones (%u..)", (unsigned long) rt->op, b, i,
                         first);
            }
            memcpy(rt->iname[b], want[i], KVS_RADIX_NAME_LEN);
            memset(rt->iparent[b], 0, KVS_RADIX_NAME_LEN);
            if (i > 0) {
                memcpy(rt->iparent[b], want[i - 1], KVS_RADIX_NAME_LEN);
            }
            rt->info[b].hash = h[i + 1];
            rt->info[b].parent = h[i];
            rt->info[b].pos = i;
            rt->info[b].key = q->s.key;
            rt->info[b].stamp = rt->op + 1;
            (void) rt_ever(rt, q->s.key, h[i + 1], 1);
        }
    }

    /* what was inserted is all there */
    do_match(&rt->e, q->ns, q->s.tok, n, 0, rt->now, q->s.key, &m, got);
    rt_verify(rt, q->s.key, q->s.tok, n, &m, got);
    if (m.n_tokens < w * rt->bt) {
        fail_msg("op %lu: inserted %u tokens, a match then reuses %u",
                 (unsigned long) rt->op, n, m.n_tokens);
    }

    if (lock && node != NULL) {
        rt_lock_add(rt, q, node, got, w);
    }
}


static void
rt_step(rt_t *rt)
{
    rseq_t             *q, *src;
    kvs_radix_ns_t     *ns;
    kvs_radix_match_t   m;
    kvs_err_t           err;
    rpin_t             *pr;
    uint64_t            ttl, released;
    uint32_t            i, j, n, pinned, op, whole;
    int                 k, created;

    op = rnd(rt, 1000);
    i = rnd(rt, R_SEQS);
    q = &rt->seq[i];

    if (op < 200) {
        rt->op_name = "start";
        if (!q->live) {
            rt_start(rt, q);
        }

    } else if (op < 450) {
        rt->op_name = "grow";
        if (q->live && q->s.t.n_tokens < q->plan_len) {
            n = q->s.t.n_tokens + 1 + rnd(rt, 8);
            (void) rt_grow(rt, q, n < q->plan_len ? n : q->plan_len);
        }

    } else if (op < 500) {
        rt->op_name = "fork";
        src = &rt->seq[rnd(rt, R_SEQS)];
        if (!q->live && src->live && src != q && src->s.t.n_tokens > 0) {
            memset(q, 0, sizeof(rseq_t));
            q->ns = rt_ns_get(rt, src->s.key);
            assert_ptr_equal(q->ns, src->ns);
            q->live = 1;
            q->s.key = src->s.key;
            if (kvs_kv_table_fork(&q->s.t, &src->s.t, rt->e.pool, &err)
                != KVS_OK)
            {
                fail_msg("fork: %s", err.msg);
            }
            memcpy(q->s.tok, src->s.tok,
                   src->s.t.n_tokens * sizeof(int32_t));

            /* another choice of the same request: same prefix, own reply */
            n = src->s.t.n_tokens;
            memcpy(q->plan, src->s.tok, n * sizeof(int32_t));
            q->plan_len = n + rnd(rt, MAX_TOK - n);
            for (j = n; j < q->plan_len; j++) {
                q->plan[j] = (int32_t) rnd(rt, R_VOCAB);
            }
            if (src->n_locks > 0) {
                kvs_radix_lock(rt->e.r, src->lock[0]);
                rt_lock_add(rt, q, src->lock[0], src->held[0],
                            src->n_held[0]);
            }
            rt->forks++;
        }

    } else if (op < 650) {
        rt->op_name = "finish";
        if (q->live) {
            rt_insert(rt, q, rnd(rt, 2) && q->n_locks < R_LOCKS);
            rt_check(rt, 0);
            if (rnd(rt, 32) == 0) {
                /* the locks hold through a flush */
                rt_evict(rt, ALL);
            }
            rt_end(rt, q);
        }

    } else if (op < 690) {
        rt->op_name = "insert midway";
        if (q->live) {
            rt_insert(rt, q, q->n_locks < R_LOCKS);
        }

    } else if (op < 730) {
        rt->op_name = "cancel";
        if (q->live) {
            rt_end(rt, q);
        }

    } else if (op < 810) {
        rt->op_name = "pin";
        k = rnd(rt, 2) != 0 ? 0 : (int) rnd(rt, R_KEYS);
        ns = rt_ns_get(rt, k);
        n = 1 + rnd(rt, R_PIN_MAX * rt->bt);
        j = rnd(rt, R_CONV);
        ttl = rnd(rt, 3) == 0 ? 100 : rnd(rt, 2) ? 1000 : 10000;
        released = stats(&rt->e).released_pins;
        pinned = do_pin(&rt->e, ns, rt->conv[j], n, ttl, rt->now, &created);
        rt->pins += created;
        rt->rel[k] += stats(&rt->e).released_pins != released;

        /* it pinned exactly the cached whole blocks of the tokens */
        rt_scan(rt);
        (void) rt_expect(rt, k, rt->conv[j], n, &whole);
        if (pinned != whole) {
            fail_msg("op %lu: pin of %u tokens under key %d pinned %u, %u "
                     "are cached in whole blocks", (unsigned long) rt->op,
                     n, k, pinned, whole);
        }
        if (pinned > 0) {
            pr = &rt->pinrec[rt->n_pinrec++ % R_PINREC];
            do_match(&rt->e, ns, rt->conv[j], pinned, 0, rt->now, k, &m,
                     pr->blocks);
            assert_int_equal(m.n_tokens, pinned);
            pr->key = k;
            pr->until = rt->now + ttl;
            pr->rel = rt->rel[k];
            pr->n = m.n_blocks;
        }
        rt_ns_put(rt, k, ns);

    } else if (op < 900) {
        rt->op_name = "time";
        rt->now += rnd(rt, 300);
        kvs_radix_expire(rt->e.r, rt->now);

    } else if (op < 940) {
        rt->op_name = "evict";
        rt_evict(rt, rnd(rt, 16));

    } else if (op < 945) {
        rt->op_name = "evict all";
        rt_evict(rt, ALL);
        assert_int_equal(kvs_radix_evictable(rt->e.r), 0);

    } else {
        rt->op_name = "namespace";
        k = (int) rnd(rt, R_KEYS);
        ns = rt_ns_get(rt, k);
        rt_check(rt, 0);
        rt_ns_put(rt, k, ns);
    }

    rt_check(rt, 0);
}


static void
random_run(uint32_t bt, uint64_t seed, uint64_t n_ops, int coverage)
{
    rt_t               *rt;
    kvs_radix_stats_t   st;
    kvs_radix_hooks_t   hooks;
    uint32_t            i, j;

    rt = calloc(1, sizeof(rt_t));
    assert_non_null(rt);
    rt->bt = bt;
    rt->nb = R_TOKENS / bt;
    for (rt->mask = 1; rt->mask < 2 * rt->nb; rt->mask <<= 1) {
        /* void */
    }
    rt->refs = calloc(rt->nb, sizeof(uint32_t));
    rt->tree = calloc(rt->nb, 1);
    rt->was = calloc(rt->nb, 1);
    rt->seen = calloc(rt->nb, 1);
    rt->info = calloc(rt->nb, sizeof(rblk_t));
    rt->set = calloc(rt->mask, sizeof(uint32_t));
    rt->mask--;
    rt->ever = calloc(R_EVER, sizeof(rblk_t));
    assert_non_null(rt->ever);
    rt->iname = calloc(rt->nb, KVS_RADIX_NAME_LEN);
    rt->iparent = calloc(rt->nb, KVS_RADIX_NAME_LEN);
    rt->evl = calloc(rt->nb, KVS_RADIX_NAME_LEN);
    rt->ord = calloc(rt->nb, sizeof(uint32_t));
    assert_true(rt->iname != NULL && rt->iparent != NULL && rt->evl != NULL
                && rt->ord != NULL);
    assert_true(rt->refs != NULL && rt->tree != NULL && rt->was != NULL
                && rt->seen != NULL && rt->info != NULL && rt->set != NULL);
    rt->rng = seed;
    rt->now = 1000;
    rt->op_name = "init";

    env_init(&rt->e, rt->nb, bt, R_PIN_MAX);

    hooks.added = rt_hook_added;
    hooks.evicted = rt_hook_evicted;
    hooks.arg = rt;
    kvs_radix_set_hooks(rt->e.r, &hooks);

    /* a small vocabulary, so that branches share first tokens */
    for (i = 0; i < R_CONV; i++) {
        for (j = 0; j < R_CONV_LEN; j++) {
            rt->conv[i][j] = (int32_t) rnd(rt, R_VOCAB);
        }
    }

    for (rt->op = 0; rt->op < n_ops; rt->op++) {
        rt_step(rt);
    }

    /* wind down: pins expire, sequences end, everything is evictable */
    rt->now += 100000000;
    kvs_radix_expire(rt->e.r, rt->now);
    st = stats(&rt->e);
    assert_int_equal(st.pins, 0);
    assert_int_equal(st.pinned_blocks, 0);
    rt->op_name = "end";
    for (i = 0; i < R_SEQS; i++) {
        if (rt->seq[i].live) {
            rt_end(rt, &rt->seq[i]);
        }
    }
    rt_evict(rt, ALL);
    st = stats(&rt->e);
    assert_int_equal(st.blocks, 0);
    assert_int_equal(st.namespaces, 0);
    assert_int_equal(st.nodes, 0);
    assert_int_equal(kvs_kv_pool_free_count(rt->e.pool), rt->nb);

    /* every name added was evicted once (the tree is empty) */
    assert_int_equal(kvs_radix_list_names(rt->e.r, rt_list_one, rt), 0);
    assert_true(rt->names_added > 0);
    assert_int_equal(rt->names_added, rt->names_evicted);

    print_message("radix random: %lu index names added and evicted\n",
                  (unsigned long) rt->names_added);
    print_message("radix random: bt %u, seed %#lx, %lu ops, %lu/%lu tokens "
                  "hit (%lu ending in a block), misses none %lu empty %lu "
                  "evicted %lu epoch %lu adapter %lu scope %lu diverged %lu; "
                  "%lu cows, %lu forks, %lu inserts, %lu splits, %lu "
                  "evicted, %lu skips, %lu pins, %lu expired, %lu "
                  "released\n", bt, (unsigned long) seed,
                  (unsigned long) n_ops, (unsigned long) rt->hit_tokens,
                  (unsigned long) rt->query_tokens,
                  (unsigned long) rt->partial_hits,
                  (unsigned long) rt->n_miss[KVS_RADIX_MISS_NONE],
                  (unsigned long) rt->n_miss[KVS_RADIX_MISS_EMPTY],
                  (unsigned long) rt->n_miss[KVS_RADIX_MISS_EVICTED],
                  (unsigned long) rt->n_miss[KVS_RADIX_MISS_EPOCH],
                  (unsigned long) rt->n_miss[KVS_RADIX_MISS_ADAPTER],
                  (unsigned long) rt->n_miss[KVS_RADIX_MISS_SCOPE],
                  (unsigned long) rt->n_miss[KVS_RADIX_MISS_DIVERGED],
                  (unsigned long) rt->cows, (unsigned long) rt->forks,
                  (unsigned long) rt->inserts, (unsigned long) rt->splits,
                  (unsigned long) rt->evicted, (unsigned long) rt->skips,
                  (unsigned long) rt->pins,
                  (unsigned long) st.expired_pins,
                  (unsigned long) st.released_pins);

    /* the run must have gone through every path it is meant to test */
    if (coverage && n_ops >= 100000) {
        assert_true(rt->hit_tokens * 8 > rt->query_tokens);
        assert_true(rt->partial_hits > 100);
        assert_true(rt->cows > 100);
        assert_true(rt->splits > 100);
        assert_true(rt->skips > 10);
        assert_true(rt->forks > 100);
        assert_true(rt->n_miss[KVS_RADIX_MISS_EVICTED] > 10);
        assert_true(rt->n_miss[KVS_RADIX_MISS_EPOCH] > 10);
        assert_true(rt->n_miss[KVS_RADIX_MISS_ADAPTER] > 10);
        assert_true(rt->n_miss[KVS_RADIX_MISS_SCOPE] > 10);
        assert_true(rt->n_miss[KVS_RADIX_MISS_DIVERGED] > 10);
        assert_true(st.expired_pins > 10);
        assert_true(st.released_pins > 10);
    }

    env_done(&rt->e);
    free(rt->refs);
    free(rt->tree);
    free(rt->was);
    free(rt->seen);
    free(rt->info);
    free(rt->set);
    free(rt->ever);
    free(rt->iname);
    free(rt->iparent);
    free(rt->evl);
    free(rt->ord);
    free(rt);
}


static void
test_random(void **state)
{
    const char  *s;
    uint64_t     seed, n_ops;

    s = getenv("KVS_SEED");
    seed = s != NULL ? strtoull(s, NULL, 0) : 0x5eed6;
    s = getenv("KVS_RADIX_OPS");
    n_ops = s != NULL ? strtoull(s, NULL, 0) : 100000;

    print_message("radix random: seed %#lx (set KVS_SEED to replay, "
                  "KVS_RADIX_OPS for the length)\n", (unsigned long) seed);

    /* the main run, then whole-token blocks and an odd block size */
    random_run(BT, seed, n_ops, 1);
    random_run(1, seed + 1, n_ops / 5, 0);
    random_run(7, seed + 2, n_ops / 5, 0);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_miss_names),
        cmocka_unit_test(test_ns_keys),
        cmocka_unit_test(test_match),
        cmocka_unit_test(test_insert),
        cmocka_unit_test(test_index_names),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_cow),
        cmocka_unit_test(test_refcounts),
        cmocka_unit_test(test_evict_order),
        cmocka_unit_test(test_miss_isolation),
        cmocka_unit_test(test_pins),
        cmocka_unit_test(test_pin_hit_refresh),
        cmocka_unit_test(test_random),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
