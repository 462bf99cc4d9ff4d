/*
 * test_index_tier: lower-tier blocks in the prefix index
 * (docs/prefix-index.md, "Lower tiers"): the block entry's disk field
 * (d:<host id>) written, read and skipped by a reader of the pool alone;
 * the host record's tier weight (tw); the lookup's split of a host's
 * prefix into pool and disk blocks; the choice that weighs disk blocks;
 * the weight a host publishes from its load and prefill rates.  The
 * expected values are worked out by hand in the comments.
 */

#include "kvs_test.h"
#include "kvs_test_index.h"

#include "index/kvs_index_lookup.h"
#include "index/kvs_index_schema.h"


static void
test_entry_commands(void **state)
{
    char              buf[4096];
    size_t            argvlen[64], first[16], n_args, buf_len;
    kvs_err_t         err;
    const char       *argv[64];
    kvs_index_name_t  name;
    kvs_index_cmds_t  c;

    (void) state;

    memset(name.b, 0xab, sizeof(name.b));
    kvs_index_cmds_init(&c, buf, sizeof(buf), argv, argvlen, 64, first, 16);

    assert_int_equal(kvs_index_cmd_blk_tier_add(&c, &name, "gpu-a.1", 7,
                                                 0xdeadbeef, 3600000,
                                                 KVS_INDEX_TIER_DISK, &err),
                     KVS_OK);
    assert_int_equal(kvs_index_cmd_blk_tier_del(&c, &name, "gpu-a.1", 7,
                                                 KVS_INDEX_TIER_DISK, &err),
                     KVS_OK);
    assert_int_equal(kvs_index_cmd_blk_tier_add(&c, &name, "gpu-a.1", 7,
                                                 0xdeadbeef, 3600000,
                                                 KVS_INDEX_TIER_POOL, &err),
                     KVS_OK);
    assert_int_equal(kvs_index_cmd_blk_del(&c, &name, "gpu-a.1", 7, &err),
                     KVS_OK);
    assert_int_equal(c.n_cmds, 6);

    kvs_test_assert_cmd(&c, 0, "HSET|kvs:v1:blk:"
                        "abababababababababababababababab|d:gpu-a.1|"
                        "00000000deadbeef");
    kvs_test_assert_cmd(&c, 1, "PEXPIRE|kvs:v1:blk:"
                        "abababababababababababababababab|3600000");
    kvs_test_assert_cmd(&c, 2, "HDEL|kvs:v1:blk:"
                        "abababababababababababababababab|d:gpu-a.1");
    /* the pool's entry is what it always was */
    kvs_test_assert_cmd(&c, 3, "HSET|kvs:v1:blk:"
                        "abababababababababababababababab|gpu-a.1|"
                        "00000000deadbeef");
    kvs_test_assert_cmd(&c, 5, "HDEL|kvs:v1:blk:"
                        "abababababababababababababababab|gpu-a.1");

    /* a tier that is not one, or a bad id: refused, the batch unchanged */
    n_args = c.n_args;
    buf_len = c.buf_len;
    assert_int_equal(kvs_index_cmd_blk_tier_add(&c, &name, "gpu-a.1", 7, 1,
                                                 1000, (kvs_index_tier_t) 3,
                                                 &err), KVS_EINVAL);
    assert_int_equal(kvs_index_cmd_blk_tier_del(&c, &name, "d:x", 3,
                                                 KVS_INDEX_TIER_DISK, &err),
                     KVS_EINVAL);
    assert_int_equal(c.n_cmds, 6);
    assert_int_equal(c.n_args, n_args);
    assert_int_equal(c.buf_len, buf_len);
}


static void
test_entry_parse(void **state)
{
    size_t              id_len;
    uint64_t            inc;
    const char         *id;
    kvs_index_tier_t    tier;
    kvs_index_reply_t   f, v;

    (void) state;

    v = kvs_test_str_reply("00000000000000a1");

    f = kvs_test_str_reply("gpu-a.1");
    assert_int_equal(kvs_index_blk_entry_tier(&f, &v, &id, &id_len, &inc,
                                              &tier), KVS_OK);
    assert_int_equal(tier, KVS_INDEX_TIER_POOL);
    assert_int_equal(id_len, 7);
    assert_memory_equal(id, "gpu-a.1", 7);
    assert_int_equal(inc, 0xa1);

    f = kvs_test_str_reply("d:gpu-a.1");
    assert_int_equal(kvs_index_blk_entry_tier(&f, &v, &id, &id_len, &inc,
                                              &tier), KVS_OK);
    assert_int_equal(tier, KVS_INDEX_TIER_DISK);
    assert_int_equal(id_len, 7);
    assert_memory_equal(id, "gpu-a.1", 7);

    /* a reader of the pool alone (every gateway before tiers) takes the
     * disk field for a malformed entry and skips it */
    assert_int_equal(kvs_index_blk_entry(&f, &v, &id, &id_len, &inc),
                     KVS_EFORMAT);
    f = kvs_test_str_reply("gpu-a.1");
    assert_int_equal(kvs_index_blk_entry(&f, &v, &id, &id_len, &inc),
                     KVS_OK);

    /* "d:" alone, another prefix, a bad id after it, a zero incarnation */
    f = kvs_test_str_reply("d:");
    assert_int_equal(kvs_index_blk_entry_tier(&f, &v, &id, &id_len, &inc,
                                              &tier), KVS_EFORMAT);
    f = kvs_test_str_reply("x:gpu-a.1");
    assert_int_equal(kvs_index_blk_entry_tier(&f, &v, &id, &id_len, &inc,
                                              &tier), KVS_EFORMAT);
    f = kvs_test_str_reply("d:d:gpu");
    assert_int_equal(kvs_index_blk_entry_tier(&f, &v, &id, &id_len, &inc,
                                              &tier), KVS_EFORMAT);
    f = kvs_test_str_reply("d:gpu");
    v = kvs_test_str_reply("0000000000000000");
    assert_int_equal(kvs_index_blk_entry_tier(&f, &v, &id, &id_len, &inc,
                                              &tier), KVS_EFORMAT);
}


static void
test_host_tier_weight(void **state)
{
    char                 out[KVS_INDEX_HOST_VALUE_MAX + 1], bad[1200];
    size_t               len;
    kvs_err_t            err;
    kvs_index_host_t     h, got;
    kvs_index_reply_t    r;
    kvs_index_reject_t   why;

    (void) state;

    memset(&h, 0, sizeof(h));
    strcpy(h.id, "gpu-a.1");
    strcpy(h.model, "m");
    strcpy(h.url, "http://10.0.0.7:8080");
    h.incarnation = 0xbeef;
    h.epoch = 7;
    h.block_tokens = 16;

    /* without a weight the record is what it was: no tw */
    assert_int_equal(kvs_index_host_format(&h, out, &len, &err), KVS_OK);
    assert_null(strstr(out, "tw="));
    r = kvs_test_str_reply(out);
    assert_int_equal(kvs_index_host_parse(&r, "gpu-a.1", 7, &got, &why,
                                          &err), KVS_OK);
    assert_int_equal(got.tier_weight, 0);

    h.tier_weight = 870;
    assert_int_equal(kvs_index_host_format(&h, out, &len, &err), KVS_OK);
    assert_non_null(strstr(out, " tw=870"));
    r = kvs_test_str_reply(out);
    assert_int_equal(kvs_index_host_parse(&r, "gpu-a.1", 7, &got, &why,
                                          &err), KVS_OK);
    assert_int_equal(got.tier_weight, 870);
    assert_int_equal(got.incarnation, 0xbeef);

    /* out of 1..1000: refused both ways */
    h.tier_weight = 1001;
    assert_int_equal(kvs_index_host_format(&h, out, &len, &err),
                     KVS_EINVAL);

    snprintf(bad, sizeof(bad), "kvs1 id=gpu-a.1 inc=000000000000beef "
             "epoch=0000000000000007 bt=16 run=0 wait=0 free=0 ts=1 "
             "model=m url=u tw=0");
    r = kvs_test_str_reply(bad);
    assert_int_equal(kvs_index_host_parse(&r, "gpu-a.1", 7, &got, &why,
                                          &err), KVS_EFORMAT);
    assert_int_equal(why, KVS_INDEX_REJECT_MALFORMED);

    bad[strlen(bad) - 1] = '\0';
    strcat(bad, "1001");
    r = kvs_test_str_reply(bad);
    assert_int_equal(kvs_index_host_parse(&r, "gpu-a.1", 7, &got, &why,
                                          &err), KVS_EFORMAT);

    bad[strlen(bad) - 4] = '\0';
    strcat(bad, "1000");
    r = kvs_test_str_reply(bad);
    assert_int_equal(kvs_index_host_parse(&r, "gpu-a.1", 7, &got, &why,
                                          &err), KVS_OK);
    assert_int_equal(got.tier_weight, 1000);
}


/*
 * 100 blocks, stride 10: round 1 probes 9, 19, ..., 99.  Host a holds
 * [0, 45) in its pool and [30, 100) on disk (a pool block spilled and
 * loaded back is in both); host b holds [0, 73) in its pool.
 *   a: every probe hits, so lo = 100; pool hits at 9..39, misses at 49:
 *      plo = 40 (the pool's end at 45 is known to the stride), so
 *      pool 40, disk 60;
 *   b: hits to 69, misses at 79: lo = 70, hi = 79.
 * Worth (16 tokens a block): b's proven 70 * 16 = 1120, best case
 * 79 * 16 = 1264; a's 40 * 16 + 60 * 16 * w.
 */
static void
run_two_hosts(uint32_t tw, uint32_t *pool, uint32_t *disk,
    kvs_index_choice_t *ch, uint32_t *round2)
{
    void                    *mem;
    size_t                   len;
    kvs_test_fake_t          f[3];
    kvs_err_t                err;
    kvs_index_cand_t         c[2];
    kvs_index_lookup_t       lk;
    kvs_index_route_conf_t   conf;

    kvs_index_route_conf_default(&conf);
    conf.load_weight = 0;
    conf.stride = 10;

    kvs_test_cand_set(&c[0], "a", 0xa1, 0);
    kvs_test_cand_set(&c[1], "b", 0xb1, 0);
    c[0].tier_weight = tw;
    kvs_test_fake_set(&f[0], "a", 0xa1, 0, 45);
    kvs_test_fake_set(&f[1], "d:a", 0xa1, 30, 100);
    kvs_test_fake_set(&f[2], "b", 0xb1, 0, 73);

    len = kvs_index_lookup_mem(100, 2, &conf);
    mem = malloc(len);
    assert_non_null(mem);
    assert_int_equal(kvs_index_lookup_init(&lk, mem, len, c, 2, 7, 100, 16,
                                           &conf, &err), KVS_OK);
    assert_int_equal(lk.n_probe, 10);
    kvs_test_fake_answer(&lk, f, 3);

    *round2 = lk.round == 2 ? lk.n_probe : 0;

    if (lk.round == 2) {
        kvs_test_fake_answer(&lk, f, 3);
    }

    assert_int_equal(lk.round, 3);
    assert_int_equal(lk.bad_entries, 0);
    kvs_index_lookup_result_tier(&lk, pool, disk);
    kvs_index_choose_tier(c, 2, pool, disk, 16, 0, &conf, ch);
    free(mem);
}


static void
test_lookup_split(void **state)
{
    uint32_t            pool[2], disk[2], round2;
    kvs_index_choice_t  ch;

    (void) state;

    /* tw 900: a is worth 640 + 960 * 0.9 = 1504, above b's best case
     * (1264): b's gap is not probed */
    run_two_hosts(900, pool, disk, &ch, &round2);
    assert_int_equal(pool[0], 40);
    assert_int_equal(disk[0], 60);
    assert_int_equal(pool[1], 70);
    assert_int_equal(disk[1], 0);
    assert_int_equal(round2, 0);
    assert_int_equal(ch.host, 0);
    assert_int_equal(ch.reason, KVS_INDEX_ROUTE_PREFIX);
    assert_int_equal(ch.cached_tokens, 100 * 16);
    assert_true(ch.score > 1503.9 && ch.score < 1504.1);

    /* tw 200: a is worth 640 + 192 = 832; b's gap 70..78 is probed and
     * b holds 73 blocks, 1168 tokens, and wins */
    run_two_hosts(200, pool, disk, &ch, &round2);
    assert_int_equal(round2, 9);
    assert_int_equal(pool[0], 40);
    assert_int_equal(disk[0], 60);
    assert_int_equal(pool[1], 73);
    assert_int_equal(disk[1], 0);
    assert_int_equal(ch.host, 1);
    assert_int_equal(ch.reason, KVS_INDEX_ROUTE_PREFIX);
    assert_int_equal(ch.cached_tokens, 73 * 16);

    /* no weight said: the default, 500: 640 + 480 = 1120, below b's
     * 1168 after round 2 */
    run_two_hosts(0, pool, disk, &ch, &round2);
    assert_int_equal(round2, 9);
    assert_int_equal(ch.host, 1);
}


static void
test_choose_weights(void **state)
{
    uint32_t                pool[2], disk[2];
    kvs_index_cand_t        c[2];
    kvs_index_choice_t      ch, old;
    kvs_index_route_conf_t  conf;

    (void) state;

    kvs_index_route_conf_default(&conf);
    kvs_test_cand_set(&c[0], "x", 1, 0);
    kvs_test_cand_set(&c[1], "y", 2, 0);

    /* x: 10 pool blocks, 160 tokens; y: 4 pool + 8 disk blocks */
    pool[0] = 10;
    disk[0] = 0;
    pool[1] = 4;
    disk[1] = 8;

    /* y at 800 per mille: 64 + 128 * 0.8 = 166.4 > 160 */
    c[1].tier_weight = 800;
    kvs_index_choose_tier(c, 2, pool, disk, 16, 0, &conf, &ch);
    assert_int_equal(ch.host, 1);
    assert_int_equal(ch.cached_tokens, 12 * 16);
    assert_int_equal(ch.reason, KVS_INDEX_ROUTE_PREFIX);

    /* at 600: 64 + 76.8 = 140.8 < 160: x */
    c[1].tier_weight = 600;
    kvs_index_choose_tier(c, 2, pool, disk, 16, 0, &conf, &ch);
    assert_int_equal(ch.host, 0);
    assert_int_equal(ch.cached_tokens, 160);

    /* the default (500), and x loaded by one sequence (256 tokens):
     * y wins on load although x's prefix is worth more (160 > 128) */
    c[1].tier_weight = 0;
    c[0].load = 1;
    kvs_index_choose_tier(c, 2, pool, disk, 16, 0, &conf, &ch);
    assert_int_equal(ch.host, 1);
    assert_int_equal(ch.reason, KVS_INDEX_ROUTE_LOAD);
    assert_true(ch.score > 127.9 && ch.score < 128.1);

    /* no disk blocks: exactly kvs_index_choose */
    kvs_index_choose_tier(c, 2, pool, NULL, 16, 0, &conf, &ch);
    kvs_index_choose(c, 2, pool, 16, 0, &conf, &old);
    assert_int_equal(ch.host, old.host);
    assert_int_equal(ch.reason, old.reason);
    assert_int_equal(ch.cached_tokens, old.cached_tokens);
    assert_true(ch.score == old.score);
}


static void
test_weight(void **state)
{
    (void) state;

    /* stories260K's 24,576-byte slot of 16 tokens at 1.5 GB/s against
     * 20,000 tokens/s: 16.4 us to load, 800 us to compute:
     * 1 - 0.02048 = 0.97952 -> 980 */
    assert_int_equal(kvs_index_tier_weight(16, 24576, 1.5e9, 20000), 980);

    /* an 8B model in f16 (128 KiB a token, 2 MiB a block) at 1 GB/s
     * against 5,000 tokens/s: 2.097 ms against 3.2 ms:
     * 1 - 0.65536 = 0.34464 -> 345 */
    assert_int_equal(kvs_index_tier_weight(16, 2097152, 1e9, 5000), 345);

    /* as slow as computing, or slower: 1 (the engine recomputes) */
    assert_int_equal(kvs_index_tier_weight(16, 1600, 100, 1), 1);
    assert_int_equal(kvs_index_tier_weight(16, 2097152, 1e8, 5000), 1);

    /* unmeasured or nonsense: not said */
    assert_int_equal(kvs_index_tier_weight(16, 24576, 0, 20000), 0);
    assert_int_equal(kvs_index_tier_weight(16, 24576, 1e9, 0), 0);
    assert_int_equal(kvs_index_tier_weight(0, 24576, 1e9, 1e4), 0);
    assert_int_equal(kvs_index_tier_weight(16, 24576, 1.0 / 0.0, 1e4), 0);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_entry_commands),
        cmocka_unit_test(test_entry_parse),
        cmocka_unit_test(test_host_tier_weight),
        cmocka_unit_test(test_lookup_split),
        cmocka_unit_test(test_choose_weights),
        cmocka_unit_test(test_weight),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
