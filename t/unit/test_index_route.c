/*
 * test_index_route: the gateway's choice of a host (src/index/
 * kvs_index_route.c): score = cached tokens - load_weight * load, its
 * ties and reasons, and the rendezvous-hash fallback without Redis.
 * Expected choices are worked out by hand from those definitions (the
 * scores are in the comments); the hash fallback is checked against the
 * definition "the largest kvs_index_hrw_weight" and its two properties:
 * later blocks do not move a key, removing a host moves only its keys.
 */

#include "kvs_test.h"
#include "kvs_test_index.h"

#include "index/kvs_index_lookup.h"


static void
test_choose(void **state)
{
    uint32_t                blocks[3];
    kvs_index_cand_t        c[3];
    kvs_index_choice_t      ch;
    kvs_index_route_conf_t  conf;

    (void) state;

    kvs_index_route_conf_default(&conf);
    conf.load_weight = 100;
    kvs_test_cand_set(&c[0], "a", 1, 4);
    kvs_test_cand_set(&c[1], "b", 2, 1);
    kvs_test_cand_set(&c[2], "c", 3, 1);

    /* a: 5 blocks * 16 - 400 = -320; b: 0 - 100; c: 2 * 16 - 100 = -68:
     * c wins with a prefix, but a's longer one lost on load */
    blocks[0] = 5;
    blocks[1] = 0;
    blocks[2] = 2;
    kvs_index_choose(c, 3, blocks, 16, 0, &conf, &ch);
    assert_int_equal(ch.host, 2);
    assert_int_equal(ch.reason, KVS_INDEX_ROUTE_LOAD);
    assert_int_equal(ch.cached_tokens, 32);
    assert_true(ch.score == -68.0);

    /* a as loaded as the others: its longest prefix wins */
    c[0].load = 1;
    kvs_index_choose(c, 3, blocks, 16, 0, &conf, &ch);
    assert_int_equal(ch.host, 0);
    assert_int_equal(ch.reason, KVS_INDEX_ROUTE_PREFIX);
    assert_string_equal(kvs_index_reason_name(ch.reason), "prefix");
    c[0].load = 4;

    /* c loses its prefix: a's prefix loses to load; b and c tie at
     * -100: the smaller id */
    blocks[2] = 0;
    kvs_index_choose(c, 3, blocks, 16, 0, &conf, &ch);
    assert_int_equal(ch.host, 1);
    assert_int_equal(ch.reason, KVS_INDEX_ROUTE_LOAD);
    assert_string_equal(kvs_index_reason_name(ch.reason), "load");

    /* nothing cached: least loaded; ties by free blocks, then id */
    blocks[0] = 0;
    kvs_index_choose(c, 3, blocks, 16, 0, &conf, &ch);
    assert_int_equal(ch.host, 1);
    assert_int_equal(ch.reason, KVS_INDEX_ROUTE_LEAST_LOADED);
    c[2].free_blocks = 101;
    kvs_index_choose(c, 3, blocks, 16, 0, &conf, &ch);
    assert_int_equal(ch.host, 2);

    /* equal scores, a = 48 - 64, b = c = 0 - 16: the less loaded (b,
     * c), then the more free blocks (c) */
    conf.load_weight = 16;
    blocks[0] = 3;
    kvs_index_choose(c, 3, blocks, 16, 0, &conf, &ch);
    assert_int_equal(ch.host, 2);
    assert_int_equal(ch.reason, KVS_INDEX_ROUTE_LOAD);

    kvs_index_choose(c, 3, NULL, 16, 1, &conf, &ch);
    assert_int_equal(ch.reason, KVS_INDEX_ROUTE_SHORT);
    assert_string_equal(kvs_index_reason_name(ch.reason), "short_prompt");

    c[0].up = c[1].up = c[2].up = 0;
    kvs_index_choose(c, 3, blocks, 16, 0, &conf, &ch);
    assert_int_equal(ch.host, -1);
    assert_int_equal(ch.reason, KVS_INDEX_ROUTE_NO_HOSTS);
    assert_string_equal(kvs_index_reason_name(ch.reason), "no_hosts");
}


static void
test_choose_hash(void **state)
{
    int                     hits[3];
    size_t                  i;
    uint64_t                w, best;
    kvs_index_cand_t        c[3];
    kvs_index_name_t        names[8];
    kvs_index_choice_t      ch, ch2;
    kvs_index_route_conf_t  conf;

    (void) state;

    kvs_index_route_conf_default(&conf);
    kvs_test_cand_set(&c[0], "gpu-a", 1, 0);
    kvs_test_cand_set(&c[1], "gpu-b", 2, 0);
    kvs_test_cand_set(&c[2], "gpu-c", 3, 0);
    memset(hits, 0, sizeof(hits));

    for (i = 0; i < 300; i++) {
        memset(names, 0, sizeof(names));
        memcpy(names[3].b, &i, sizeof(i));   /* block 3 is the key */

        kvs_index_choose_hash(c, 3, names, 8, &conf, &ch);
        assert_int_equal(ch.reason, KVS_INDEX_ROUTE_NO_INDEX);
        assert_true(ch.host >= 0 && ch.host < 3);
        hits[ch.host]++;

        /* by definition: the largest rendezvous weight */
        best = 0;
        for (w = 0; w < 3; w++) {
            if (kvs_index_hrw_weight(&names[3], c[w].id, c[w].id_len)
                > kvs_index_hrw_weight(&names[3], c[best].id,
                                       c[best].id_len))
            {
                best = w;
            }
        }
        assert_int_equal(ch.host, (int) best);

        /* later blocks do not move it: the next turn keeps its host */
        memset(names[7].b, 0xff, KVS_INDEX_NAME_LEN);
        kvs_index_choose_hash(c, 3, names, 8, &conf, &ch2);
        assert_int_equal(ch2.host, ch.host);

        /* a host going away moves only its own keys */
        c[(ch.host + 1) % 3].up = 0;
        kvs_index_choose_hash(c, 3, names, 8, &conf, &ch2);
        assert_int_equal(ch2.host, ch.host);
        c[(ch.host + 1) % 3].up = 1;
    }

    /* spread: each host gets a fair share of 300 keys */
    for (i = 0; i < 3; i++) {
        assert_true(hits[i] > 60);
    }

    /* overloaded hosts are skipped; a short prompt goes least loaded */
    c[best].load = 100;
    kvs_index_choose_hash(c, 3, names, 8, &conf, &ch);
    assert_true(ch.host != (int) best);
    kvs_index_choose_hash(c, 3, names, 0, &conf, &ch);
    assert_int_equal(ch.reason, KVS_INDEX_ROUTE_NO_INDEX);
    assert_true(ch.host != (int) best);
    assert_string_equal(kvs_index_reason_name(ch.reason), "no_index");

    c[0].up = c[1].up = c[2].up = 0;
    kvs_index_choose_hash(c, 3, names, 8, &conf, &ch);
    assert_int_equal(ch.host, -1);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_choose),
        cmocka_unit_test(test_choose_hash),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
