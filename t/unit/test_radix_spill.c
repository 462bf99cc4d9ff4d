/*
 * test_radix_spill: what eviction reports to the disk tier
 * (kvs_radix_set_spill): every evicted block once, while the tree still
 * holds it, with its namespace, its tokens (equal to what was written
 * into the block), and its path name equal to kvs_tier_path_id()
 * chained by hand over the prompt's blocks, across a split; a leaf cut
 * short reports only its tail; other namespaces report their own key;
 * no report without a spill function nor at kvs_radix_free().
 */

#include "kvs_test_radix.h"

#include "kv/kvs_tier.h"

#define MAX_REC  32

typedef struct {
    env_t     *e;
    uint32_t   n;
    uint32_t   block[MAX_REC];
    uint32_t   ref[MAX_REC];          /* pool refcount during the call */
    int32_t    tok[MAX_REC][BT];
    uint8_t    path[MAX_REC][KVS_TIER_ID_LEN];
    uint64_t   epoch[MAX_REC];
    char       scope[MAX_REC][8];
} rec_t;


static void
on_spill(void *arg, const kvs_radix_key_t *key, const uint8_t *path,
    const int32_t *tokens, uint32_t block)
{
    rec_t  *x = arg;

    assert_true(x->n < MAX_REC);
    x->block[x->n] = block;
    x->ref[x->n] = kvs_kv_pool_refcount(x->e->pool, block);
    memcpy(x->tok[x->n], tokens, sizeof(x->tok[0]));
    memcpy(x->path[x->n], path, KVS_TIER_ID_LEN);
    x->epoch[x->n] = key->epoch;
    assert_true(key->scope_len < 8);
    memcpy(x->scope[x->n], key->scope, key->scope_len);
    x->scope[x->n][key->scope_len] = '\0';
    x->n++;
}


/* The path name of block k of tok, chained by hand. */
static void
path_of(const int32_t *tok, uint32_t k, uint8_t *id)
{
    uint32_t  i;

    kvs_tier_path_id(NULL, tok, BT, id);

    for (i = 1; i <= k; i++) {
        kvs_tier_path_id(id, tok + i * BT, BT, id);
    }
}


/* Record i is block k of tok, written into the pool as those tokens. */
static void
rec_is(const rec_t *x, uint32_t i, const int32_t *tok, uint32_t k)
{
    uint8_t  want[KVS_TIER_ID_LEN];

    assert_memory_equal(x->tok[i], tok + k * BT, sizeof(x->tok[0]));
    assert_memory_equal(&x->e->shadow[x->block[i] * BT], tok + k * BT,
                        sizeof(x->tok[0]));
    assert_true(x->ref[i] >= 1);
    path_of(tok, k, want);
    assert_memory_equal(x->path[i], want, KVS_TIER_ID_LEN);
}


static void
test_spill(void **state)
{
    env_t               e;
    rec_t               x;
    seq_t               s1, s2, s5, s6;
    int32_t             tok[16], tok2[12], tok5[16];
    kvs_radix_ns_t     *ns, *nt;

    memset(&x, 0, sizeof(x));
    x.e = &e;
    env_init(&e, 32, BT, 8);
    kvs_radix_set_spill(e.r, on_spill, &x);
    ns = ns_get(&e, &key_g1);

    /* 100..115 (4 blocks), then 100..107 + 500..503: a split after two */
    fill(tok, 16, 100);
    seq_fresh(&e, &s1, 0, tok, 16);
    do_insert(&e, ns, &s1, 16, 0, 1);
    memcpy(tok2, tok, 8 * sizeof(int32_t));
    fill(tok2 + 8, 4, 500);
    seq_fresh(&e, &s2, 0, tok2, 12);
    do_insert(&e, ns, &s2, 12, 0, 2);
    seq_end(&e, &s1);
    seq_end(&e, &s2);
    assert_int_equal(x.n, 0);

    /* a leaf cut short: only its last block */
    fill(tok5, 16, 900);
    seq_fresh(&e, &s5, 0, tok5, 16);
    do_insert(&e, ns, &s5, 16, 0, 3);
    seq_end(&e, &s5);

    /* 108..115 is least recently used: its two blocks, in path order */
    assert_int_equal(kvs_radix_evict(e.r, 2), 2);
    assert_int_equal(x.n, 2);
    rec_is(&x, 0, tok, 2);
    rec_is(&x, 1, tok, 3);
    assert_true(x.epoch[0] == 1 && x.scope[0][0] == '\0');

    /* then 500 (its path runs through the split) */
    x.n = 0;
    assert_int_equal(kvs_radix_evict(e.r, 1), 1);
    assert_int_equal(x.n, 1);
    rec_is(&x, 0, tok2, 2);

    /* a tenant's block carries the tenant's key */
    nt = ns_get(&e, &key_t1);
    seq_fresh(&e, &s6, 1, tok, 4);
    do_insert(&e, nt, &s6, 4, 0, 4);
    seq_end(&e, &s6);

    x.n = 0;
    assert_int_equal(kvs_radix_evict(e.r, ALL), 7);
    assert_int_equal(x.n, 7);
    assert_int_equal(stats(&e).spilled_blocks, 10);
    assert_int_equal(stats(&e).spill_lost, 0);

    for (uint32_t i = 0; i < x.n; i++) {
        if (strcmp(x.scope[i], "t1") == 0) {
            rec_is(&x, i, tok, 0);
        }
    }

    /* no spill function: nothing reported; nor at free */
    kvs_radix_set_spill(e.r, NULL, &x);
    seq_fresh(&e, &s1, 0, tok, 16);
    do_insert(&e, ns, &s1, 16, 0, 5);
    seq_end(&e, &s1);
    x.n = 0;
    assert_int_equal(kvs_radix_evict(e.r, 1), 1);
    assert_int_equal(x.n, 0);

    kvs_radix_set_spill(e.r, on_spill, &x);
    kvs_radix_ns_put(e.r, ns);
    kvs_radix_ns_put(e.r, nt);
    env_done(&e);
    assert_int_equal(x.n, 0);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spill),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
