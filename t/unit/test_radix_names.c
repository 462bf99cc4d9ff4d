/*
 * test_radix_names: what the prefix cache says about blocks by name, over
 * the simulated sequences of kvs_test_radix.h.  Why a match stopped:
 * every reason has a name of its own (kvs_radix_miss_name()), and the
 * reason is told right across namespaces (another epoch, adapter or
 * scope) and after an eviction, from the names of cached and evicted
 * blocks that kv/kvs_radix_names.c keeps, while each namespace keeps its
 * own blocks.  The prefix index's block names, by hand: the hooks of
 * kv/kvs_radix.c (test_radix_check.c checks them in its random run).
 */

#include "kvs_test.h"
#include "kvs_test_radix.h"


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


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_miss_names),
        cmocka_unit_test(test_index_names),
        cmocka_unit_test(test_miss_isolation),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}