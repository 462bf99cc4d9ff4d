/*
 * test_index_thost: the host memory tier's blocks in the prefix index
 * (docs/prefix-index.md, "Lower tiers"): the block entry's host field
 * (h:<host id>) written, read and skipped by a reader of the pool
 * alone; the host record's host tier weight (hw); the lookup's split of
 * a host's prefix into pool, host-tier and disk blocks; the choice that
 * weighs a host-tier block between a pool block and a disk block.  The
 * expected values are worked out by hand in the comments.
 */

#include "kvs_test.h"
#include "kvs_test_index.h"

#include "index/kvs_index_lookup.h"
#include "index/kvs_index_schema.h"


static void
test_entry(void **state)
{
    char                buf[4096];
    size_t              argvlen[64], first[16], id_len;
    uint64_t            inc;
    kvs_err_t           err;
    const char         *argv[64], *id;
    kvs_index_tier_t    tier;
    kvs_index_name_t    name;
    kvs_index_cmds_t    c;
    kvs_index_reply_t   f, v;

    (void) state;

    memset(name.b, 0xcd, sizeof(name.b));
    kvs_index_cmds_init(&c, buf, sizeof(buf), argv, argvlen, 64, first, 16);

    assert_int_equal(kvs_index_cmd_blk_tier_add(&c, &name, "gpu-b", 5,
                                                 0xfeed, 60000,
                                                 KVS_INDEX_TIER_HOST, &err),
                     KVS_OK);
    assert_int_equal(kvs_index_cmd_blk_tier_del(&c, &name, "gpu-b", 5,
                                                 KVS_INDEX_TIER_HOST, &err),
                     KVS_OK);
    assert_int_equal(c.n_cmds, 3);
    kvs_test_assert_cmd(&c, 0, "HSET|kvs:v1:blk:"
                        "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd|h:gpu-b|"
                        "000000000000feed");
    kvs_test_assert_cmd(&c, 1, "PEXPIRE|kvs:v1:blk:"
                        "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd|60000");
    kvs_test_assert_cmd(&c, 2, "HDEL|kvs:v1:blk:"
                        "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd|h:gpu-b");

    v = kvs_test_str_reply("00000000000000b2");
    f = kvs_test_str_reply("h:gpu-b");
    assert_int_equal(kvs_index_blk_entry_tier(&f, &v, &id, &id_len, &inc,
                                              &tier), KVS_OK);
    assert_int_equal(tier, KVS_INDEX_TIER_HOST);
    assert_int_equal(id_len, 5);
    assert_memory_equal(id, "gpu-b", 5);
    assert_int_equal(inc, 0xb2);

    /* a reader of the pool alone skips it as a malformed entry */
    assert_int_equal(kvs_index_blk_entry(&f, &v, &id, &id_len, &inc),
                     KVS_EFORMAT);

    /* "h:" alone, "h:d:x", "h:" with a bad id: malformed */
    f = kvs_test_str_reply("h:");
    assert_int_equal(kvs_index_blk_entry_tier(&f, &v, &id, &id_len, &inc,
                                              &tier), KVS_EFORMAT);
    f = kvs_test_str_reply("h:d:gpu");
    assert_int_equal(kvs_index_blk_entry_tier(&f, &v, &id, &id_len, &inc,
                                              &tier), KVS_EFORMAT);
    f = kvs_test_str_reply("h:gpu b");
    assert_int_equal(kvs_index_blk_entry_tier(&f, &v, &id, &id_len, &inc,
                                              &tier), KVS_EFORMAT);
}


static void
test_record_weight(void **state)
{
    char                 out[KVS_INDEX_HOST_VALUE_MAX + 1], bad[1200];
    size_t               len;
    kvs_err_t            err;
    kvs_index_host_t     h, got;
    kvs_index_reply_t    r;
    kvs_index_reject_t   why;

    (void) state;

    memset(&h, 0, sizeof(h));
    strcpy(h.id, "gpu-b");
    strcpy(h.model, "m");
    strcpy(h.url, "http://10.0.0.8:8080");
    h.incarnation = 0xfeed;
    h.epoch = 7;
    h.block_tokens = 16;

    /* no weight: no hw (a record as before) */
    assert_int_equal(kvs_index_host_format(&h, out, &len, &err), KVS_OK);
    assert_null(strstr(out, "hw="));
    r = kvs_test_str_reply(out);
    assert_int_equal(kvs_index_host_parse(&r, "gpu-b", 5, &got, &why, &err),
                     KVS_OK);
    assert_int_equal(got.host_weight, 0);

    h.host_weight = 985;
    h.tier_weight = 640;
    assert_int_equal(kvs_index_host_format(&h, out, &len, &err), KVS_OK);
    assert_non_null(strstr(out, " tw=640 hw=985"));
    r = kvs_test_str_reply(out);
    assert_int_equal(kvs_index_host_parse(&r, "gpu-b", 5, &got, &why, &err),
                     KVS_OK);
    assert_int_equal(got.host_weight, 985);
    assert_int_equal(got.tier_weight, 640);

    h.host_weight = 1001;
    assert_int_equal(kvs_index_host_format(&h, out, &len, &err),
                     KVS_EINVAL);

    /* 0, over 1000, twice: malformed; 1000: taken */
    snprintf(bad, sizeof(bad), "kvs1 id=gpu-b inc=000000000000feed "
             "epoch=0000000000000007 bt=16 run=0 wait=0 free=0 ts=1 "
             "model=m url=u hw=0");
    r = kvs_test_str_reply(bad);
    assert_int_equal(kvs_index_host_parse(&r, "gpu-b", 5, &got, &why, &err),
                     KVS_EFORMAT);
    assert_int_equal(why, KVS_INDEX_REJECT_MALFORMED);

    bad[strlen(bad) - 1] = '\0';
    strcat(bad, "1001");
    r = kvs_test_str_reply(bad);
    assert_int_equal(kvs_index_host_parse(&r, "gpu-b", 5, &got, &why, &err),
                     KVS_EFORMAT);

    bad[strlen(bad) - 4] = '\0';
    strcat(bad, "1000 hw=5");
    r = kvs_test_str_reply(bad);
    assert_int_equal(kvs_index_host_parse(&r, "gpu-b", 5, &got, &why, &err),
                     KVS_EFORMAT);

    bad[strlen(bad) - 5] = '\0';
    r = kvs_test_str_reply(bad);
    assert_int_equal(kvs_index_host_parse(&r, "gpu-b", 5, &got, &why, &err),
                     KVS_OK);
    assert_int_equal(got.host_weight, 1000);
}


static void
test_weights(void **state)
{
    uint32_t          tw, hw;
    kvs_index_cand_t  c;

    (void) state;

    memset(&c, 0, sizeof(c));

    /* nothing said: the defaults */
    kvs_index_tier_weights(&c, &tw, &hw);
    assert_int_equal(tw, KVS_INDEX_TIER_WEIGHT_DEFAULT);
    assert_int_equal(hw, KVS_INDEX_HOST_WEIGHT_DEFAULT);
    assert_int_equal(hw, 900);

    c.tier_weight = 700;
    kvs_index_tier_weights(&c, &tw, &hw);
    assert_int_equal(tw, 700);
    assert_int_equal(hw, 900);

    /* a disk block never outweighs a host-tier block */
    c.tier_weight = 950;
    kvs_index_tier_weights(&c, &tw, &hw);
    assert_int_equal(tw, 950);
    assert_int_equal(hw, 950);

    c.tier_weight = 500;
    c.host_weight = 300;
    kvs_index_tier_weights(&c, &tw, &hw);
    assert_int_equal(hw, 500);

    c.host_weight = 1000;
    kvs_index_tier_weights(&c, &tw, &hw);
    assert_int_equal(hw, 1000);

    /* over a pool block's: a pool block's */
    c.tier_weight = 4000;
    c.host_weight = 3000;
    kvs_index_tier_weights(&c, &tw, &hw);
    assert_int_equal(tw, 1000);
    assert_int_equal(hw, 1000);
}


/*
 * 100 blocks, stride 10: round 1 probes 9, 19, ..., 99.  Host a holds
 * [0, 25) in its pool, [20, 60) in its host tier and [50, 100) on disk;
 * host b holds [0, 73) in its pool.
 *   a: every probe hits: lo = 100; pool hits at 9, 19, misses at 29:
 *      plo = 20; pool or host hits to 59, misses at 69: flo = 60; so
 *      pool 20, host 40, disk 40;
 *   b: hits to 69, misses at 79: lo = 70, hi = 79.
 * Worth (16 tokens a block): b's proven 1120, best case 1264; a's
 * (20 + 40 * hw + 40 * tw) * 16.
 */
static void
run_two_hosts(uint32_t tw, uint32_t hw, uint32_t *pool, uint32_t *host,
    uint32_t *disk, kvs_index_choice_t *ch, uint32_t *round2)
{
    void                    *mem;
    size_t                   len;
    kvs_test_fake_t          f[4];
    kvs_err_t                err;
    uint32_t                 old_pool[2], old_disk[2];
    kvs_index_cand_t         c[2];
    kvs_index_lookup_t       lk;
    kvs_index_route_conf_t   conf;

    kvs_index_route_conf_default(&conf);
    conf.load_weight = 0;
    conf.stride = 10;

    kvs_test_cand_set(&c[0], "a", 0xa1, 0);
    kvs_test_cand_set(&c[1], "b", 0xb1, 0);
    c[0].tier_weight = tw;
    c[0].host_weight = hw;
    kvs_test_fake_set(&f[0], "a", 0xa1, 0, 25);
    kvs_test_fake_set(&f[1], "h:a", 0xa1, 20, 60);
    kvs_test_fake_set(&f[2], "d:a", 0xa1, 50, 100);
    kvs_test_fake_set(&f[3], "b", 0xb1, 0, 73);

    len = kvs_index_lookup_mem(100, 2, &conf);
    mem = malloc(len);
    assert_non_null(mem);
    assert_int_equal(kvs_index_lookup_init(&lk, mem, len, c, 2, 7, 100, 16,
                                           &conf, &err), KVS_OK);
    assert_int_equal(lk.n_probe, 10);
    kvs_test_fake_answer(&lk, f, 4);

    *round2 = lk.round == 2 ? lk.n_probe : 0;

    if (lk.round == 2) {
        kvs_test_fake_answer(&lk, f, 4);
    }

    assert_int_equal(lk.round, 3);
    assert_int_equal(lk.bad_entries, 0);
    kvs_index_lookup_result_tiers(&lk, pool, host, disk);

    /* the two-way split counts the host tier's blocks as not the
     * pool's */
    kvs_index_lookup_result_tier(&lk, old_pool, old_disk);
    assert_int_equal(old_pool[0], pool[0]);
    assert_int_equal(old_disk[0], host[0] + disk[0]);
    assert_int_equal(old_pool[1], pool[1]);
    assert_int_equal(old_disk[1], host[1] + disk[1]);

    kvs_index_choose_tiers(c, 2, pool, host, disk, 16, 0, &conf, ch);
    free(mem);
}


static void
test_lookup_split(void **state)
{
    uint32_t            pool[2], host[2], disk[2], round2;
    kvs_index_choice_t  ch;

    (void) state;

    /* the defaults (hw 900, tw 500): a is worth (20 + 36 + 20) * 16 =
     * 1216, under b's best case (1264): b's gap 70..78 is probed, b
     * holds 73 blocks (1168) and a wins */
    run_two_hosts(0, 0, pool, host, disk, &ch, &round2);
    assert_int_equal(pool[0], 20);
    assert_int_equal(host[0], 40);
    assert_int_equal(disk[0], 40);
    assert_int_equal(pool[1], 73);
    assert_int_equal(host[1], 0);
    assert_int_equal(disk[1], 0);
    assert_int_equal(round2, 9);
    assert_int_equal(ch.host, 0);
    assert_int_equal(ch.reason, KVS_INDEX_ROUTE_PREFIX);
    assert_int_equal(ch.cached_tokens, 100 * 16);
    assert_true(ch.score > 1215.9 && ch.score < 1216.1);

    /* the host tier read as disk (hw = tw = 500): 60 * 16 = 960, and b
     * wins: without the split a would have lost */
    run_two_hosts(500, 500, pool, host, disk, &ch, &round2);
    assert_int_equal(ch.host, 1);
    assert_int_equal(ch.cached_tokens, 73 * 16);

    /* hw under tw: taken as tw, the same */
    run_two_hosts(500, 200, pool, host, disk, &ch, &round2);
    assert_int_equal(ch.host, 1);

    /* hw 1000 (as fast as the pool), tw 1: (20 + 40 + 0.04) * 16 =
     * 960.64, under b's proven 1120: b's best case is probed, b wins */
    run_two_hosts(1, 1000, pool, host, disk, &ch, &round2);
    assert_int_equal(ch.host, 1);

    /* hw 1000, tw 950: (60 + 38) * 16 = 1568, over b's best (1264): no
     * round 2 at all */
    run_two_hosts(950, 1000, pool, host, disk, &ch, &round2);
    assert_int_equal(round2, 0);
    assert_int_equal(ch.host, 0);
    assert_true(ch.score > 1567.9 && ch.score < 1568.1);
}


/*
 * Round 2 bounds a host by its host-tier blocks too.  60 blocks, stride
 * 10: host c holds [0, 5) in its pool and [0, 44) in its host tier (tw
 * 1); host d holds [0, 36) in its pool.  After round 1: c lo = 40,
 * hi = 49, plo = 0 (pool miss at 9), flo = 40, fmiss = 49; d lo = 30,
 * hi = 39 (proven 480, best 624).  c's proven worth is 40 * hw * 16, its
 * best (9 + 40 * hw) * 16 (its pool could hold up to 9 blocks).
 *   hw 1000: c proven 640 > d's best 624: d's gap is not probed, c's
 *            is (40..48), c holds 44 blocks and wins;
 *   hw 300:  c's best 336 < d's proven 480: c's gap is not probed, d's
 *            is (30..38), d holds 36 blocks and wins.
 */
static void
test_round2_host_bound(void **state)
{
    void                    *mem;
    size_t                   len;
    kvs_test_fake_t          f[3];
    uint32_t                 pool[2], host[2], disk[2], hw;
    kvs_err_t                err;
    kvs_index_cand_t         c[2];
    kvs_index_choice_t       ch;
    kvs_index_lookup_t       lk;
    kvs_index_route_conf_t   conf;

    (void) state;

    kvs_index_route_conf_default(&conf);
    conf.load_weight = 0;
    conf.stride = 10;

    kvs_test_fake_set(&f[0], "c", 0xc1, 0, 5);
    kvs_test_fake_set(&f[1], "h:c", 0xc1, 0, 44);
    kvs_test_fake_set(&f[2], "d", 0xd1, 0, 36);

    len = kvs_index_lookup_mem(60, 2, &conf);
    mem = malloc(len);
    assert_non_null(mem);

    for (hw = 300; hw <= 1000; hw += 700) {
        kvs_test_cand_set(&c[0], "c", 0xc1, 0);
        kvs_test_cand_set(&c[1], "d", 0xd1, 0);
        c[0].host_weight = hw;
        c[0].tier_weight = 1;

        assert_int_equal(kvs_index_lookup_init(&lk, mem, len, c, 2, 7, 60,
                                               16, &conf, &err), KVS_OK);
        kvs_test_fake_answer(&lk, f, 3);
        assert_int_equal(lk.host[0].lo, 40);
        assert_int_equal(lk.host[0].flo, 40);
        assert_int_equal(lk.host[0].fmiss, 49);
        assert_int_equal(lk.host[0].plo, 0);

        assert_int_equal(lk.round, 2);
        assert_int_equal(lk.n_probe, 9);
        assert_int_equal(lk.probe[0], hw == 1000 ? 40 : 30);
        kvs_test_fake_answer(&lk, f, 3);

        kvs_index_lookup_result_tiers(&lk, pool, host, disk);
        assert_int_equal(pool[0], 0);
        assert_int_equal(host[0], hw == 1000 ? 44 : 40);
        assert_int_equal(disk[0], 0);
        kvs_index_choose_tiers(c, 2, pool, host, disk, 16, 0, &conf, &ch);
        assert_int_equal(ch.host, hw == 1000 ? 0 : 1);
        assert_int_equal(pool[1], hw == 1000 ? 30 : 36);
    }

    free(mem);
}


static void
test_choose(void **state)
{
    uint32_t                pool[2], host[2], disk[2];
    kvs_index_cand_t        c[2];
    kvs_index_choice_t      ch, old;
    kvs_index_route_conf_t  conf;

    (void) state;

    kvs_index_route_conf_default(&conf);
    kvs_test_cand_set(&c[0], "x", 1, 0);
    kvs_test_cand_set(&c[1], "y", 2, 0);

    /* x: 10 pool blocks, 160 tokens; y: 4 pool + 8 host-tier blocks */
    pool[0] = 10;
    host[0] = 0;
    disk[0] = 0;
    pool[1] = 4;
    host[1] = 8;
    disk[1] = 0;

    /* the default 900: 64 + 115.2 = 179.2 > 160: y, with all its
     * blocks' tokens cached */
    kvs_index_choose_tiers(c, 2, pool, host, disk, 16, 0, &conf, &ch);
    assert_int_equal(ch.host, 1);
    assert_int_equal(ch.cached_tokens, 12 * 16);
    assert_true(ch.score > 179.1 && ch.score < 179.3);

    /* at 600: 64 + 76.8 = 140.8 < 160: x */
    c[1].host_weight = 600;
    kvs_index_choose_tiers(c, 2, pool, host, disk, 16, 0, &conf, &ch);
    assert_int_equal(ch.host, 0);

    /* the same 8 blocks on y's disk at the default 500: 128 < 160, x;
     * in its host tier at 600 they would not win either, but with a
     * disk weight of 800 the host tier's are worth 800 too: 166.4 */
    host[1] = 0;
    disk[1] = 8;
    c[1].host_weight = 0;
    kvs_index_choose_tiers(c, 2, pool, host, disk, 16, 0, &conf, &ch);
    assert_int_equal(ch.host, 0);
    host[1] = 8;
    disk[1] = 0;
    c[1].host_weight = 600;
    c[1].tier_weight = 800;
    kvs_index_choose_tiers(c, 2, pool, host, disk, 16, 0, &conf, &ch);
    assert_int_equal(ch.host, 1);
    assert_true(ch.score > 166.3 && ch.score < 166.5);

    /* host and disk blocks together: 64 + 4 * 16 * 0.9 + 4 * 16 * 0.5
     * = 153.6 < 160: x */
    c[1].host_weight = 0;
    c[1].tier_weight = 0;
    host[1] = 4;
    disk[1] = 4;
    kvs_index_choose_tiers(c, 2, pool, host, disk, 16, 0, &conf, &ch);
    assert_int_equal(ch.host, 0);
    host[1] = 5;
    disk[1] = 3;                      /* 64 + 72 + 24 = 160: the tie goes
                                         to the smaller id: x */
    kvs_index_choose_tiers(c, 2, pool, host, disk, 16, 0, &conf, &ch);
    assert_int_equal(ch.host, 0);
    host[1] = 6;
    disk[1] = 2;                      /* 64 + 86.4 + 16 = 166.4: y */
    kvs_index_choose_tiers(c, 2, pool, host, disk, 16, 0, &conf, &ch);
    assert_int_equal(ch.host, 1);
    assert_int_equal(ch.cached_tokens, 12 * 16);

    /* no host tier's blocks: exactly kvs_index_choose_tier */
    kvs_index_choose_tiers(c, 2, pool, NULL, disk, 16, 0, &conf, &ch);
    kvs_index_choose_tier(c, 2, pool, disk, 16, 0, &conf, &old);
    assert_int_equal(ch.host, old.host);
    assert_int_equal(ch.reason, old.reason);
    assert_int_equal(ch.cached_tokens, old.cached_tokens);
    assert_true(ch.score == old.score);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_entry),
        cmocka_unit_test(test_record_weight),
        cmocka_unit_test(test_weights),
        cmocka_unit_test(test_lookup_split),
        cmocka_unit_test(test_round2_host_bound),
        cmocka_unit_test(test_choose),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
