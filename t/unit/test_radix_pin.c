/*
 * test_radix_pin: client cache breakpoints (kv/kvs_radix_pin.c) over the
 * simulated sequences of kvs_test_radix.h: a pin holds its prefix
 * against eviction until its TTL ends; a later pin or a hit refreshes
 * it, a short TTL never shortens it; past pin_max a namespace releases
 * its least recently refreshed pin, and another namespace's pins count
 * against its own bound only; only cached whole blocks are pinned; a
 * pin ending inside an edge holds only its own blocks.
 */

#include "kvs_test.h"
#include "kvs_test_radix.h"


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


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_pins),
        cmocka_unit_test(test_pin_hit_refresh),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}