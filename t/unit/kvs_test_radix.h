/*
 * kvs_test_radix: what the prefix cache's tests (test_radix*.c) share: a
 * real kvs_kv_pool and radix tree with simulated sequences and no
 * backend.  A block's "K/V" is the token ids written into it, kept in a
 * shadow array (block id -> tokens), so a reuse is right iff every
 * returned block's shadow equals the query's tokens; a write into a
 * block that anyone else holds is a test failure (copy-on-write broken).
 * do_match(), do_insert() and do_pin() make the tree's calls with every
 * check that needs no knowledge of the tree.  Any failure fails the
 * test.  Header-only, like kvs_test.h; the names are the radix tests'
 * own vocabulary, kept short.
 */

#ifndef KVS_TEST_RADIX_H
#define KVS_TEST_RADIX_H

#include "kvs_test.h"

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


static inline void
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


static inline void
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


static inline kvs_radix_stats_t
stats(const env_t *e)
{
    kvs_radix_stats_t  st;

    memset(&st, 0xa5, sizeof(st));
    kvs_radix_stats(e->r, &st);

    return st;
}


static inline uint32_t
ref(const env_t *e, uint32_t b)
{
    return kvs_kv_pool_refcount(e->pool, b);
}


/* Frees the tree, which must give every block back (no table is left). */
static inline void
env_done(env_t *e)
{
    env_ok(e);
    kvs_radix_free(e->r);
    assert_int_equal(kvs_kv_pool_free_count(e->pool), e->pool->n_blocks);
    kvs_kv_pool_free(e->pool);
    free(e->shadow);
    free(e->owner);
}


static inline kvs_radix_ns_t *
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


static inline void
fill(int32_t *tok, uint32_t n, int32_t base)
{
    uint32_t  i;

    for (i = 0; i < n; i++) {
        tok[i] = base + (int32_t) i;
    }
}


/* Writes tokens[from, to) into the table's slots: each slot's block must
 * be this table's alone, or a shared block would be corrupted. */
static inline void
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
static inline uint32_t
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
static inline int
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
static inline void
seq_fresh(env_t *e, seq_t *s, int key, const int32_t *tokens, uint32_t n)
{
    memset(s, 0, sizeof(seq_t));
    s->key = key;
    assert_int_equal(seq_grow(e, s, tokens, n, NULL), KVS_OK);
}


/* A sequence starting from a match: shares the matched blocks through
 * its table (one pool reference each), covering n_tokens positions. */
static inline void
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


static inline void
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
static inline void
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
static inline void
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


static inline kvs_radix_node_t *
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


static inline uint32_t
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

#endif /* KVS_TEST_RADIX_H */
