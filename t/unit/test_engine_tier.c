/*
 * test_engine_tier: the prefix cache's disk tier inside the engine
 * (kvs_engine_tier.c), against an engine with the cache off.
 *
 * A prompt whose blocks were evicted from a small pool comes back from
 * the disk tier: it reports the loaded tokens (n_cached_tier), and its
 * tokens and log-probabilities are bit for bit the cold engine's.  The
 * tier honours namespaces (another scope loads nothing), a flipped byte
 * in the file is detected (corrupt, the run stops there) and the reply
 * is still the cold one, a restart keeps the file under the same model
 * and discards it under another model tag or another model's weights,
 * with a disk that takes 300 ms a write no step waits for it (the
 * queue drops instead), and with one that takes 150 ms a read a load
 * waits outside the batch while another request runs to its end, and a
 * request cancelled while its blocks load gives every block back.
 */

#include "kvs_test.h"
#include "kvs_test_engine.h"
#include "kvs_test_model.h"

#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>

#include "engine/kvs_engine.h"

/* the disk tier's file: one a process */
#define TIER_FILE  kvs_test_tmp_pid("test_engine_tier")

#define BT       16
#define BUDGET   32
#define POOL     12                   /* blocks: two 64-token turns */
#define TIER     (4u << 20)           /* bytes of file */


typedef struct {
    const char  *scope;
    uint64_t     tag;                 /* tier_model */
    uint32_t     delay_us;
    uint32_t     read_delay_us;
    uint32_t     depth;
} opts_t;


static kvs_engine_t *
engine_new(const kvs_test_model_t *md, int cache, const opts_t *o)
{
    kvs_engine_conf_t  conf;

    kvs_test_engine_conf(&conf, md, BT, cache ? POOL : 64, BUDGET, cache);

    if (cache) {
        conf.tier_path = TIER_FILE;
        conf.tier_size = TIER;
        conf.tier_model = o != NULL ? o->tag : 1;
        conf.tier_write_delay_us = o != NULL ? o->delay_us : 0;
        conf.tier_read_delay_us = o != NULL ? o->read_delay_us : 0;
        conf.tier_depth = o != NULL ? o->depth : 0;
    }

    return kvs_test_engine_new(&conf);
}


/* arg: the longest step so far */
static void
step_max(kvs_engine_t *e, const kvs_engine_out_t *out, uint64_t ns,
    void *arg)
{
    uint64_t  *max_ns;

    max_ns = arg;
    *max_ns = ns > *max_ns ? ns : *max_ns;
}


/* One step, timed into *max_ns, and what it made ready read into outs
 * (hs[i]'s into outs[i]). */
static void
step_read(kvs_engine_t *e, kvs_engine_seq_t **hs, kvs_engine_out_t *outs,
    uint32_t n, uint64_t *max_ns)
{
    uint32_t           i;
    uint64_t           t0;
    kvs_engine_seq_t  *r[4];

    t0 = kvs_now_ns();
    (void) kvs_engine_step(e);
    t0 = kvs_now_ns() - t0;
    *max_ns = t0 > *max_ns ? t0 : *max_ns;

    while (kvs_engine_ready(e, r, 1) > 0) {
        for (i = 0; i < n && hs[i] != r[0]; i++) {
            /* void */
        }

        assert_true(i < n);
        assert_true(kvs_engine_read(e, r[0], &outs[i]) >= 0);
    }
}


/* One greedy request with top-5 logprobs, run to its end; *max_ns the
 * longest kvs_engine_step() call (may be NULL). */
static void
run1(kvs_engine_t *e, const int32_t *prompt, uint32_t n_prompt,
    uint32_t gen, const char *scope, kvs_engine_out_t *out,
    uint64_t *max_ns)
{
    kvs_engine_req_t  req;

    kvs_test_engine_req(&req, prompt, n_prompt, gen, 5);
    req.scope = scope;
    req.scope_len = scope != NULL ? strlen(scope) : 0;

    kvs_test_engine_run(e, &req, out, max_ns != NULL ? step_max : NULL,
                        max_ns);
}


/* Runs six other 64-token prompts: the pool of 12 blocks keeps none of
 * what came before, and the tier gets it (written before returning). */
static void
evict_all(kvs_engine_t *e, const kvs_test_model_t *md, uint64_t seed,
    uint64_t *max_ns)
{
    int32_t           other[64];
    uint32_t          k;
    kvs_engine_out_t  c;

    for (k = 0; k < 6; k++) {
        kvs_test_engine_fill(other, 64, seed + k, md->m->hp.n_vocab,
                             md->v->bos);
        run1(e, other, 64, 8, NULL, &c, max_ns);
        kvs_engine_out_free(&c);
    }

    kvs_engine_tier_wait(e);
}


/* Flips one byte of every block's KV bytes in the file. */
static void
corrupt_file(const kvs_engine_stats_t *st)
{
    int       fd;
    uint8_t   b;
    uint64_t  i, off;

    fd = open(TIER_FILE, O_RDWR);
    assert_true(fd >= 0);

    for (i = 0; i < st->tier.slots; i++) {
        /* file header, slot header, the tokens, then a KV byte */
        off = 4096 + i * st->tier.slot_bytes + 512 + 4 * BT + 100;
        assert_int_equal(pread(fd, &b, 1, (off_t) off), 1);
        b ^= 0x40;
        assert_int_equal(pwrite(fd, &b, 1, (off_t) off), 1);
    }

    close(fd);
}


static void
test_evicted_comes_back(void **state)
{
    int32_t             sys[72];
    kvs_test_model_t    md;
    kvs_engine_t       *on, *off;
    kvs_engine_out_t    a, b, c;
    kvs_engine_stats_t  st;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    unlink(TIER_FILE);
    on = engine_new(&md, 1, NULL);
    off = engine_new(&md, 0, NULL);
    kvs_test_engine_fill(sys, 72, 11, md.m->hp.n_vocab, md.v->bos);

    run1(on, sys, 64, 8, NULL, &a, NULL);
    assert_int_equal(a.n_cached_tier, 0);
    evict_all(on, &md, 1000, NULL);

    kvs_engine_stats(on, &st);
    assert_true(st.tier.on);
    assert_true(st.tier.spilled > 0);
    assert_int_equal(st.tier.spill_written, st.tier.spilled);
    assert_true(st.tier.used > 0 && st.tier.used <= st.tier.slots);

    /* the 64-token prompt and 8 more: its 4 whole blocks, and the
     * reply's fifth, come back from the tier */
    run1(on, sys, 72, 8, NULL, &b, NULL);
    run1(off, sys, 72, 8, NULL, &c, NULL);
    kvs_test_engine_same(&b, &c, "loaded from the tier");
    assert_int_equal(b.n_cached, 64);
    assert_int_equal(b.n_cached_tier, 64);

    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.loaded_blocks, 4);
    assert_int_equal(st.tier.corrupt, 0);
    assert_int_equal(st.cache_tier_hit_tokens, 64);
    assert_true(st.tier.bytes_read >= 4 * st.tier.slot_bytes);
    printf("tier: %" PRIu64 " blocks of %" PRIu64 " bytes loaded in %.1f "
           "us by the loader (%s)\n", st.tier.loaded_blocks,
           st.tier.slot_bytes, (double) st.tier.load_ns / 1e3,
           st.tier.direct ? "O_DIRECT" : "buffered");

    /* another scope: the same tokens, nothing of them loaded */
    kvs_engine_out_free(&b);
    evict_all(on, &md, 2000, NULL);
    run1(on, sys, 72, 8, "tenant-b", &b, NULL);
    assert_int_equal(b.n_cached, 0);
    assert_int_equal(b.n_cached_tier, 0);
    kvs_test_engine_same(&b, &c, "another scope");

    kvs_engine_out_free(&a);
    kvs_engine_out_free(&b);
    kvs_engine_out_free(&c);
    kvs_engine_free(on);
    kvs_engine_free(off);
    unlink(TIER_FILE);
    kvs_test_model_free(&md);
}


static void
test_flipped_byte(void **state)
{
    int32_t             sys[64];
    kvs_test_model_t    md;
    kvs_engine_t       *on, *off;
    kvs_engine_out_t    a, b, c;
    kvs_engine_stats_t  st;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    unlink(TIER_FILE);
    on = engine_new(&md, 1, NULL);
    off = engine_new(&md, 0, NULL);
    kvs_test_engine_fill(sys, 64, 21, md.m->hp.n_vocab, md.v->bos);

    run1(on, sys, 64, 8, NULL, &a, NULL);
    evict_all(on, &md, 3000, NULL);
    kvs_engine_stats(on, &st);
    corrupt_file(&st);

    /* the first block read fails its checksum: nothing is loaded, the
     * reply is computed, the slot is dropped */
    run1(on, sys, 64, 8, NULL, &b, NULL);
    run1(off, sys, 64, 8, NULL, &c, NULL);
    kvs_test_engine_same(&b, &c, "after a flipped byte");
    assert_int_equal(b.n_cached_tier, 0);

    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.corrupt, 1);
    assert_int_equal(st.tier.load_failed, 1);
    assert_int_equal(st.tier.loaded_blocks, 0);

    kvs_engine_out_free(&a);
    kvs_engine_out_free(&b);
    kvs_engine_out_free(&c);
    kvs_engine_free(on);
    kvs_engine_free(off);
    unlink(TIER_FILE);
    kvs_test_model_free(&md);
}


static void
test_restart(void **state)
{
    int32_t             sys[64];
    opts_t              o;
    kvs_test_model_t    md, other;
    kvs_engine_t       *on, *off;
    kvs_engine_out_t    a, b, c;
    kvs_engine_stats_t  st;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    unlink(TIER_FILE);
    memset(&o, 0, sizeof(o));
    o.tag = 7;

    on = engine_new(&md, 1, &o);
    off = engine_new(&md, 0, NULL);
    kvs_test_engine_fill(sys, 64, 31, md.m->hp.n_vocab, md.v->bos);
    run1(on, sys, 64, 8, NULL, &a, NULL);
    evict_all(on, &md, 4000, NULL);
    kvs_engine_free(on);

    /* the same model and tag: the file is kept, and a fresh engine with
     * an empty pool loads the prompt from it */
    on = engine_new(&md, 1, &o);
    kvs_engine_stats(on, &st);
    assert_true(st.tier.kept > 0);
    assert_string_equal(st.tier.discarded, "");

    run1(on, sys, 64, 8, NULL, &b, NULL);
    run1(off, sys, 64, 8, NULL, &c, NULL);
    kvs_test_engine_same(&b, &c, "after a restart");
    assert_int_equal(b.n_cached, 63);
    assert_int_equal(b.n_cached_tier, 63);
    kvs_engine_free(on);

    /* another tag: discarded */
    o.tag = 8;
    on = engine_new(&md, 1, &o);
    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.kept, 0);
    assert_int_equal(st.tier.used, 0);
    assert_string_equal(st.tier.discarded, "another model");
    kvs_engine_free(on);

    /* other weights of the same shape and block size: another epoch */
    kvs_engine_out_free(&a);
    kvs_test_model_small(&other, "tier_a", 256, 1, 0);
    kvs_test_engine_fill(sys, 64, 32, other.m->hp.n_vocab, other.v->bos);
    on = engine_new(&other, 1, &o);
    run1(on, sys, 64, 8, NULL, &a, NULL);
    evict_all(on, &other, 6000, NULL);
    kvs_engine_stats(on, &st);
    assert_true(st.tier.used > 0);
    kvs_engine_free(on);
    kvs_test_model_free(&other);

    kvs_test_model_small(&other, "tier_b", 256, 2, 0);
    on = engine_new(&other, 1, &o);
    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.kept, 0);
    assert_true(strncmp(st.tier.discarded, "weight epoch", 12) == 0);
    kvs_engine_free(on);
    kvs_test_model_free(&other);

    kvs_engine_out_free(&a);
    kvs_engine_out_free(&b);
    kvs_engine_out_free(&c);
    kvs_engine_free(off);
    unlink(TIER_FILE);
    kvs_test_model_free(&md);
}


static void
test_slow_disk(void **state)
{
    int32_t             sys[64];
    opts_t              o;
    uint64_t            max_ns;
    kvs_test_model_t    md;
    kvs_engine_t       *on;
    kvs_engine_out_t    a;
    kvs_engine_stats_t  st;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    unlink(TIER_FILE);
    memset(&o, 0, sizeof(o));
    o.tag = 1;
    o.delay_us = 300000;
    o.depth = 2;

    on = engine_new(&md, 1, &o);
    kvs_test_engine_fill(sys, 64, 41, md.m->hp.n_vocab, md.v->bos);
    run1(on, sys, 64, 8, NULL, &a, NULL);

    max_ns = 0;
    evict_all(on, &md, 5000, &max_ns);

    /* dozens of blocks evicted, two written at 300 ms each at a time:
     * the rest dropped, and no step waited for a write */
    kvs_engine_stats(on, &st);
    assert_true(st.tier.spill_dropped > 0);
    assert_int_equal(st.tier.spilled + st.tier.spill_dropped
                     + st.tier.spill_kept,
                     st.cache_evicted_blocks);
    assert_true(max_ns < 150000000);

    kvs_engine_out_free(&a);
    kvs_engine_free(on);
    unlink(TIER_FILE);
    kvs_test_model_free(&md);
}


/* A slow disk (150 ms a block read): the tier's request waits outside
 * the batch for its 4 blocks (600 ms) while another runs to its end, no
 * step waits for a read, and the loaded reply is the cold one. */
static void
test_load_off_step(void **state)
{
    int32_t             sys[72], fresh[40];
    opts_t              o;
    uint64_t            max_ns, t0;
    kvs_test_model_t    md;
    kvs_engine_t       *on, *off;
    kvs_engine_seq_t   *hs[2];
    kvs_engine_out_t    outs[2], a, c;
    kvs_engine_stats_t  st;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    unlink(TIER_FILE);
    memset(&o, 0, sizeof(o));
    o.tag = 1;
    o.read_delay_us = 150000;

    on = engine_new(&md, 1, &o);
    off = engine_new(&md, 0, NULL);
    kvs_test_engine_fill(sys, 72, 51, md.m->hp.n_vocab, md.v->bos);
    kvs_test_engine_fill(fresh, 40, 52, md.m->hp.n_vocab, md.v->bos);

    run1(on, sys, 64, 8, NULL, &a, NULL);
    kvs_engine_out_free(&a);
    evict_all(on, &md, 7000, NULL);

    memset(outs, 0, sizeof(outs));
    hs[0] = kvs_test_engine_submit(on, sys, 72, 8);
    hs[1] = kvs_test_engine_submit(on, fresh, 40, 8);
    max_ns = 0;
    t0 = kvs_now_ns();

    /* the other request ends while the first still waits for blocks */
    while (outs[1].finish == KVS_FINISH_NONE) {
        step_read(on, hs, outs, 2, &max_ns);
    }

    kvs_engine_stats(on, &st);
    assert_int_equal(outs[1].n_tokens, 8);
    assert_int_equal(outs[0].n_tokens, 0);
    assert_int_equal(st.tier.loading, 1);
    assert_true(kvs_now_ns() - t0 < 500000000ull);

    while (outs[0].finish == KVS_FINISH_NONE) {
        step_read(on, hs, outs, 2, &max_ns);
    }

    t0 = kvs_now_ns() - t0;
    kvs_engine_close(on, hs[0]);
    kvs_engine_close(on, hs[1]);

    run1(off, sys, 72, 8, NULL, &c, NULL);
    kvs_test_engine_same(&outs[0], &c, "loaded off the step");
    assert_int_equal(outs[0].n_cached_tier, 64);

    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.loaded_blocks, 4);
    assert_int_equal(st.tier.load_waits, 1);
    assert_int_equal(st.tier.loading, 0);
    assert_int_equal(st.tier.load_reserved, 0);
    assert_true(st.tier.load_wait_ns >= 4 * 150000000ull);
    assert_true(st.tier.load_ns >= 4 * 150000000ull);
    assert_true(max_ns < 100000000ull);
    printf("tier: 4 blocks loaded in %.1f ms (150 ms a read), waited "
           "%.1f ms; the longest step %.2f ms, all %.1f ms\n",
           (double) st.tier.load_ns / 1e6,
           (double) st.tier.load_wait_ns / 1e6, (double) max_ns / 1e6,
           (double) t0 / 1e6);

    kvs_engine_out_free(&outs[0]);
    kvs_engine_out_free(&outs[1]);
    kvs_engine_out_free(&c);
    kvs_engine_free(on);
    kvs_engine_free(off);
    unlink(TIER_FILE);
    kvs_test_model_free(&md);
}


/* Closed while its blocks load: every reserved block and lock is given
 * back at once (the engine checks out with only the cache's blocks in
 * use while the loader still reads), and a later request loads the same
 * blocks; an engine freed while a load runs leaks nothing (ASan). */
static void
test_cancel_during_load(void **state)
{
    int32_t             sys[72];
    opts_t              o;
    uint32_t            i;
    uint64_t            max_ns;
    kvs_err_t           err;
    kvs_test_model_t    md;
    kvs_engine_t       *on;
    kvs_engine_seq_t   *hs[1];
    kvs_engine_out_t    outs[1], a;
    kvs_engine_stats_t  st;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    unlink(TIER_FILE);
    memset(&o, 0, sizeof(o));
    o.tag = 1;
    o.read_delay_us = 100000;

    on = engine_new(&md, 1, &o);
    kvs_test_engine_fill(sys, 72, 61, md.m->hp.n_vocab, md.v->bos);
    run1(on, sys, 64, 8, NULL, &a, NULL);
    kvs_engine_out_free(&a);
    evict_all(on, &md, 8000, NULL);

    memset(outs, 0, sizeof(outs));
    hs[0] = kvs_test_engine_submit(on, sys, 72, 8);
    max_ns = 0;
    step_read(on, hs, outs, 1, &max_ns);

    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.loading, 1);
    assert_int_equal(st.tier.load_reserved, 4);

    kvs_engine_close(on, hs[0]);
    step_read(on, hs, outs, 0, &max_ns);

    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.loading, 0);
    assert_int_equal(st.tier.load_reserved, 0);
    assert_int_equal(st.tier.loaded_blocks, 0);

    if (kvs_engine_check(on, &err) != KVS_OK) {
        fail_msg("engine check after the cancel: %s", err.msg);
    }

    /* the loader finishes its read and drops it; then the same blocks
     * load for another request */
    for (i = 0; i < 50; i++) {
        step_read(on, hs, outs, 0, &max_ns);
        usleep(10000);
    }

    run1(on, sys, 72, 8, NULL, &a, NULL);
    assert_int_equal(a.n_cached_tier, 64);
    kvs_engine_out_free(&a);

    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.loaded_blocks, 4);
    assert_int_equal(st.tier.load_waits, 1);

    /* freed with a load under way */
    evict_all(on, &md, 9000, NULL);
    hs[0] = kvs_test_engine_submit(on, sys, 72, 8);
    step_read(on, hs, outs, 1, &max_ns);
    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.loading, 1);
    kvs_engine_close(on, hs[0]);
    kvs_engine_free(on);

    unlink(TIER_FILE);
    kvs_test_model_free(&md);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_evicted_comes_back),
        cmocka_unit_test(test_flipped_byte),
        cmocka_unit_test(test_restart),
        cmocka_unit_test(test_slow_disk),
        cmocka_unit_test(test_load_off_step),
        cmocka_unit_test(test_cancel_during_load),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
