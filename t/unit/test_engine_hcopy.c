/*
 * test_engine_hcopy: the host tier's copies off the step
 * (kvs_engine_hcopy.c), on the CPU backend wrapped by kvs_test_acopy.h
 * with asynchronous copies that a thread of their own does, each taking
 * a set delay, against an engine with the cache off.
 *
 * A prompt evicted into the host tier by asynchronous copies comes back
 * from it bit for bit; with copies of 200 ms, no step takes 100 ms while
 * blocks spill and while a request's blocks are copied in (it waits
 * parked while another request runs to its end, then gets them all),
 * where the synchronous path on the same slow copies has steps of over
 * 200 ms; a request closed while its copies run gives every pool block
 * back once they are done, and its host blocks serve the next request;
 * an engine freed with copies in flight (spills and a load) frees the
 * host memory once and leaks nothing (ASan); a backend at its limit of
 * staged copies refuses spills, which the engine counts and steps on;
 * a spill copied off the step enters the prefix index as the host
 * tier's only once its copy is done, and every stored one does.
 *
 * The disk tier's spills alone (no host tier), copied off the step into
 * the staging ring: with copies of 200 ms no step takes 100 ms while
 * blocks spill, where the synchronous path has steps of 200 ms, and the
 * prompt evicted comes back from the disk bit for bit; an engine freed
 * with spill copies in flight frees the staging ring once, leaks
 * nothing (ASan) and queues them to be written (a new engine keeps
 * them from the file); a full staging ring or a backend at its limit
 * drops spills, counted, and no step waits.
 */

#include "kvs_test.h"
#include "kvs_test_acopy.h"
#include "kvs_test_engine_ix.h"
#include "kvs_test_model.h"

#include <inttypes.h>

#include "base/kvs_clock.h"
#include "engine/kvs_engine.h"

#define BT       16
#define BUDGET   32
#define POOL     12                   /* blocks: two 64-token turns */
#define SLOW     200000               /* us a slow copy takes */
#define TIER     (4u << 20)           /* bytes of disk tier file */

/* the disk tier's file: one a process */
#define TIER_FILE  kvs_test_tmp_pid("test_engine_hcopy")


static kvs_test_acopy_t  ac;


/* cache on, a host tier of host bytes (0: none), a disk tier when depth
 * (its spill queue's depth, and the staging ring's) is not 0 */
static kvs_engine_t *
engine_tiers(const kvs_test_model_t *md, uint64_t host, uint32_t depth)
{
    kvs_engine_conf_t  conf;

    kvs_test_engine_conf(&conf, md, BT, POOL, BUDGET, 1);
    conf.backend_hook = kvs_test_acopy_wrap;
    conf.backend_hook_arg = &ac;
    conf.tier_host_size = host;

    if (depth > 0) {
        conf.tier_path = TIER_FILE;
        conf.tier_size = TIER;
        conf.tier_model = 1;
        conf.tier_depth = depth;
    }

    return kvs_test_engine_new(&conf);
}


static kvs_engine_t *
engine_new(const kvs_test_model_t *md, int cache, uint64_t host)
{
    kvs_engine_conf_t  conf;

    if (cache) {
        return engine_tiers(md, host, 0);
    }

    kvs_test_engine_conf(&conf, md, BT, 64, BUDGET, 0);

    return kvs_test_engine_new(&conf);
}


/* ac zeroed, with these settings */
static void
ac_set(uint32_t delay_us, uint32_t n_stage, int sync)
{
    memset(&ac, 0, sizeof(ac));
    ac.delay_us = delay_us;
    ac.n_stage = n_stage;
    ac.sync = sync;
}


/* after each step: its time, the longest kept */
static void
step_time(kvs_engine_t *e, const kvs_engine_out_t *out, uint64_t ns,
    void *arg)
{
    uint64_t  *max = arg;

    if (max != NULL) {
        *max = ns > *max ? ns : *max;
    }
}


static void
run1(kvs_engine_t *e, const int32_t *prompt, uint32_t n_prompt,
    uint32_t gen, kvs_engine_out_t *out, uint64_t *max)
{
    kvs_engine_req_t  req;

    kvs_test_engine_req(&req, prompt, n_prompt, gen, 5);
    kvs_test_engine_run(e, &req, out, step_time, max);
}


/* n other prompts of 64 tokens: what came before leaves the pool */
static void
evict(kvs_engine_t *e, const kvs_test_model_t *md, uint64_t seed,
    uint32_t n, uint64_t *max)
{
    int32_t           other[64];
    uint32_t          k;
    kvs_engine_out_t  c;

    for (k = 0; k < n; k++) {
        kvs_test_engine_fill(other, 64, seed + k, md->m->hp.n_vocab,
                             md->v->bos);
        run1(e, other, 64, 8, &c, max);
        kvs_engine_out_free(&c);
    }
}


/* sys[72] filled from seed, its first 64 tokens run, then evicted by n
 * other prompts (seeded from other) */
static void
run_evicted(kvs_engine_t *e, const kvs_test_model_t *md, int32_t *sys,
    uint64_t seed, uint64_t other, uint32_t n, uint64_t *max)
{
    kvs_engine_out_t  a;

    kvs_test_engine_fill(sys, 72, seed, md->m->hp.n_vocab, md->v->bos);
    run1(e, sys, 64, 8, &a, max);
    kvs_engine_out_free(&a);
    evict(e, md, other, n, max);
}


/* Bytes of one KV block of md (a probe engine's). */
static uint64_t
block_bytes(const kvs_test_model_t *md)
{
    uint64_t            b;
    kvs_engine_t       *e;
    kvs_engine_stats_t  st;

    ac_set(0, 0, 0);
    e = engine_new(md, 1, 1u << 20);
    kvs_engine_stats(e, &st);
    b = st.tier.host_block_bytes;
    assert_true(st.tier.host_async);
    kvs_engine_free(e);
    assert_int_equal(ac.allocs, 1);
    assert_int_equal(ac.frees, 1);

    return b;
}


static void
test_async_comes_back(void **state)
{
    int32_t             sys[72];
    uint64_t            bb, max;
    kvs_test_model_t    md;
    kvs_engine_t       *on, *off;
    kvs_engine_out_t    a, b, c;
    kvs_engine_stats_t  st;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    bb = block_bytes(&md);
    ac_set(2000, 0, 0);
    on = engine_new(&md, 1, 64 * bb);
    off = engine_new(&md, 0, 0);
    max = 0;

    kvs_test_engine_fill(sys, 72, 11, md.m->hp.n_vocab, md.v->bos);
    run1(on, sys, 64, 8, &a, &max);
    evict(on, &md, 1000, 6, &max);
    kvs_engine_tier_wait(on);

    kvs_engine_stats(on, &st);
    assert_true(st.tier.host_async);
    assert_true(st.tier.host_spilled > 0);
    assert_int_equal(st.tier.host_used, st.tier.host_spilled);
    assert_int_equal(ac.reads, st.tier.host_spilled);
    assert_int_equal(st.tier.host_copies, 0);
    assert_int_equal(st.tier.host_copy_full, 0);

    /* its 4 whole blocks come back through 4 asynchronous copies */
    run1(on, sys, 72, 8, &b, &max);
    run1(off, sys, 72, 8, &c, &max);
    kvs_test_engine_same(&b, &c, "copied in off the step");
    assert_int_equal(b.n_cached, 64);
    assert_int_equal(b.n_cached_host, 64);

    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.host_loads, 1);
    assert_int_equal(st.tier.host_loaded_blocks, 4);
    assert_int_equal(ac.writes, 4);
    assert_int_equal(st.tier.host_copy_waits, 1);
    assert_true(st.tier.host_copy_wait_ns >= 4 * 2000 * 1000ull);
    assert_int_equal(st.tier.host_copy_failed, 0);

    /* what its run evicted spills meanwhile */
    kvs_engine_tier_wait(on);
    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.host_copies, 0);
    assert_int_equal(st.tier.host_used, st.tier.host_spilled);

    kvs_engine_out_free(&a);
    kvs_engine_out_free(&b);
    kvs_engine_out_free(&c);
    kvs_engine_free(on);
    kvs_engine_free(off);
    assert_int_equal(ac.allocs, 1);
    assert_int_equal(ac.frees, 1);
    kvs_test_model_free(&md);
}


/*
 * One scenario with copies of delay_us (sync: on the engine thread):
 * a prompt run, evicted by two others (its blocks spill), then, once
 * the spills are in, asked again while another request runs.  Returns
 * the longest step.
 */
static uint64_t
scenario(const kvs_test_model_t *md, uint64_t bb, uint32_t delay_us,
    int sync)
{
    int                 seen;
    int32_t             sys[72], other[64];
    uint64_t            max, t0, ns;
    kvs_err_t           err;
    kvs_engine_t       *on, *off;
    kvs_engine_seq_t   *h, *g, *hs[2];
    kvs_engine_out_t    a, b, c, d;
    kvs_engine_stats_t  st;

    ac_set(delay_us, 0, sync);
    on = engine_new(md, 1, 64 * bb);
    off = engine_new(md, 0, 0);
    max = 0;

    kvs_test_engine_fill(sys, 72, 21, md->m->hp.n_vocab, md->v->bos);
    kvs_test_engine_fill(other, 64, 22, md->m->hp.n_vocab, md->v->bos);

    run1(on, sys, 64, 8, &a, &max);
    kvs_engine_out_free(&a);
    evict(on, md, 3000, 4, &max);
    kvs_engine_tier_wait(on);

    /* sys's blocks copied in while another request runs */
    h = kvs_test_engine_submit(on, sys, 72, 8);
    g = kvs_test_engine_submit(on, other, 64, 8);
    memset(&b, 0, sizeof(b));
    memset(&d, 0, sizeof(d));
    seen = 0;

    while (b.finish == KVS_FINISH_NONE || d.finish == KVS_FINISH_NONE) {
        t0 = kvs_now_ns();
        (void) kvs_engine_step(on);
        ns = kvs_now_ns() - t0;
        max = ns > max ? ns : max;

        while (kvs_engine_ready(on, hs, 2) > 0) {
            assert_true(kvs_engine_read(on, hs[0],
                                        hs[0] == h ? &b : &d) >= 0);
        }

        /* the other request ends while sys still waits for its copies */
        if (!sync && d.finish != KVS_FINISH_NONE
            && b.finish == KVS_FINISH_NONE && b.n_tokens == 0)
        {
            kvs_engine_stats(on, &st);
            seen |= st.tier.host_copies > 0;
        }
    }

    kvs_engine_close(on, h);
    kvs_engine_close(on, g);

    if (kvs_engine_check(on, &err) != KVS_OK) {
        fail_msg("engine check: %s", err.msg);
    }

    run1(off, sys, 72, 8, &c, NULL);
    kvs_test_engine_same(&b, &c, "copied in while another request ran");
    assert_int_equal(b.n_cached_host, 64);

    kvs_engine_stats(on, &st);

    if (!sync && delay_us > 0) {
        assert_true(seen);
        assert_true(st.tier.host_copy_wait_ns >= 4ull * delay_us * 1000);
    }

    kvs_engine_out_free(&b);
    kvs_engine_out_free(&c);
    kvs_engine_out_free(&d);
    kvs_engine_free(on);
    kvs_engine_free(off);
    assert_int_equal(ac.frees, 1);

    return max;
}


/* The longest steps of one tier's three runs (fast: copies of fast_us
 * off the step; slow and sync: of SLOW us, off the step and on it). */
static void
steps_check(const char *tier, uint32_t fast_us, uint64_t fast,
    uint64_t slow, uint64_t sync)
{
    printf("%s, longest step: copies of %u us %.1f ms, of %u us off the "
           "step %.1f ms, on it %.1f ms\n", tier, fast_us,
           (double) fast / 1e6, SLOW, (double) slow / 1e6,
           (double) sync / 1e6);

    /* off the step, no step waits for a copy; on it, one does */
    assert_true(slow < SLOW * 1000ull / 2);
    assert_true(sync >= SLOW * 1000ull);
}


static void
test_steps_not_slowed(void **state)
{
    uint64_t          bb, fast, slow, sync;
    kvs_test_model_t  md;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    bb = block_bytes(&md);

    fast = scenario(&md, bb, 0, 0);
    slow = scenario(&md, bb, SLOW, 0);
    sync = scenario(&md, bb, SLOW, 1);
    steps_check("host tier", 0, fast, slow, sync);

    kvs_test_model_free(&md);
}


/* Closed while its copies run: the blocks come back once they are done;
 * freed with copies in flight: nothing leaks, memory freed once. */
static void
test_close_and_free(void **state)
{
    int32_t             sys[72];
    uint64_t            bb, max;
    kvs_err_t           err;
    kvs_test_model_t    md;
    kvs_engine_t       *on;
    kvs_engine_seq_t   *h;
    kvs_engine_out_t    a;
    kvs_engine_stats_t  st;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    bb = block_bytes(&md);
    ac_set(50000, 0, 0);
    on = engine_new(&md, 1, 64 * bb);
    max = 0;

    kvs_test_engine_fill(sys, 72, 31, md.m->hp.n_vocab, md.v->bos);
    run1(on, sys, 64, 8, &a, &max);
    kvs_engine_out_free(&a);
    evict(on, &md, 4000, 6, &max);
    kvs_engine_tier_wait(on);

    h = kvs_test_engine_submit(on, sys, 72, 8);
    (void) kvs_engine_step(on);

    kvs_engine_stats(on, &st);
    assert_true(st.tier.host_copies >= 4);
    assert_int_equal(st.tier.loading, 1);

    kvs_engine_close(on, h);
    (void) kvs_engine_step(on);

    /* the copies go on, holding their blocks; then all come back */
    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.loading, 0);
    assert_true(st.tier.host_copies > 0);

    kvs_engine_tier_wait(on);
    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.host_copies, 0);
    assert_int_equal(st.tier.host_loads, 0);

    if (kvs_engine_check(on, &err) != KVS_OK) {
        fail_msg("engine check after the close: %s", err.msg);
    }

    /* its host blocks were let go: the next request gets them */
    run1(on, sys, 72, 8, &a, &max);
    assert_int_equal(a.n_cached_host, 64);
    kvs_engine_out_free(&a);

    /* freed with spills in flight and a load under way */
    evict(on, &md, 5000, 6, &max);
    h = kvs_test_engine_submit(on, sys, 72, 8);
    (void) kvs_engine_step(on);
    kvs_engine_stats(on, &st);
    assert_true(st.tier.host_copies > 0);
    kvs_engine_close(on, h);
    kvs_engine_free(on);
    assert_int_equal(ac.allocs, 1);
    assert_int_equal(ac.frees, 1);

    kvs_test_model_free(&md);
}


/* One staged copy at most, each slow: the spills the backend refuses go
 * uncached (no disk tier), counted, and no step waits. */
static void
test_backend_full(void **state)
{
    int32_t             sys[72];
    uint64_t            bb, max;
    kvs_err_t           err;
    kvs_test_model_t    md;
    kvs_engine_t       *on;
    kvs_engine_stats_t  st;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    bb = block_bytes(&md);
    ac_set(SLOW, 1, 0);
    on = engine_new(&md, 1, 64 * bb);
    max = 0;

    run_evicted(on, &md, sys, 41, 6000, 3, &max);

    kvs_engine_stats(on, &st);
    printf("one staged copy: %" PRIu64 " spills refused, %" PRIu64 " taken, "
           "longest step %.1f ms\n", st.tier.host_copy_full,
           st.tier.host_spilled, (double) max / 1e6);
    assert_true(st.tier.host_copy_full > 0);
    assert_int_equal(st.tier.host_copy_full, ac.refused);
    assert_true(st.tier.host_spill_failed >= st.tier.host_copy_full);
    assert_true(max < SLOW * 1000ull / 2);

    kvs_engine_tier_wait(on);
    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.host_used, st.tier.host_spilled);
    assert_int_equal(st.tier.host_spilled, ac.reads);

    if (kvs_engine_check(on, &err) != KVS_OK) {
        fail_msg("engine check: %s", err.msg);
    }

    kvs_engine_free(on);
    assert_int_equal(ac.frees, 1);
    kvs_test_model_free(&md);
}


/* The prefix index learns of a spill copied off the step when its copy
 * is done: not while it is pending (no load could use it yet), and
 * then every block stored (a small model: no fixture needed). */
static void
test_async_published(void **state)
{
    int32_t              tok[16][48];
    uint32_t             s, hadd, hdel;
    kvs_err_t            err;
    kvs_test_model_t     md;
    kvs_engine_t        *e;
    kvs_engine_conf_t    conf;
    kvs_engine_stats_t   st;
    kvs_engine_index_t   ix;

    kvs_test_model_small(&md, "tiny-hcopy-index", 256, 41, 1);
    ac_set(20000, 0, 0);
    kvs_test_engine_ix_conf(&conf, &md, BT, POOL, "tiny-hcopy-index");
    conf.backend_hook = kvs_test_acopy_wrap;
    conf.backend_hook_arg = &ac;
    conf.tier_host_size = 1u << 20;   /* room for every spill */
    e = kvs_test_engine_new(&conf);

    memset(&ix, 0, sizeof(ix));
    kvs_engine_index_subscribe(e, 1);
    hadd = hdel = 0;

    for (s = 0; s < 16; s++) {
        kvs_test_engine_ix_prompt(tok[s], 48, 300 + s);
        (void) kvs_test_engine_ix_run1(e, tok[s], 48, NULL);
    }

    /* 20 ms a copy, one at a time: most spills are still in flight */
    assert_int_equal(kvs_engine_index_take(e, &ix, &err), KVS_OK);
    hadd += ix.n_hadd;
    hdel += ix.n_hdel;
    kvs_engine_stats(e, &st);
    assert_true(st.tier.host_copies > 0);
    assert_true(hadd + st.tier.host_copies <= st.tier.host_spilled);

    /* settled by the steps' polls, as the engine thread's loop polls
     * while copies are in flight (kvs_engine_tier_wait() would settle
     * outside a step, where the index records nothing) */
    for (s = 0; s < 1000 && hadd < st.tier.host_used; s++) {
        usleep(5000);
        (void) kvs_engine_step(e);
        assert_int_equal(kvs_engine_index_take(e, &ix, &err), KVS_OK);
        hadd += ix.n_hadd;
        hdel += ix.n_hdel;
    }

    kvs_engine_stats(e, &st);
    assert_true(st.tier.host_spilled >= 16);
    assert_int_equal(st.tier.host_evicted, 0);
    assert_int_equal(hdel, 0);
    assert_int_equal(hadd, st.tier.host_used);

    kvs_engine_index_free(&ix);
    kvs_engine_free(e);
    kvs_test_model_free(&md);
    assert_int_equal(ac.allocs, ac.frees);
}


/*
 * The disk tier alone, copies of delay_us (sync: on the engine thread):
 * a prompt run, then evicted by four others (its blocks spill to the
 * disk, the longest step of those kept); off the step, it then comes
 * back from the disk bit for bit.  Returns the longest step.
 */
static uint64_t
disk_scenario(const kvs_test_model_t *md, uint32_t delay_us, int sync)
{
    int32_t             sys[72];
    uint64_t            max;
    kvs_err_t           err;
    kvs_engine_t       *on, *off;
    kvs_engine_out_t    b, c;
    kvs_engine_stats_t  st;

    unlink(TIER_FILE);
    ac_set(delay_us, 0, sync);
    on = engine_tiers(md, 0, 64);
    max = 0;

    run_evicted(on, md, sys, 51, 7000, 4, &max);

    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.spill_async, !sync);
    assert_int_equal(st.tier.host_on, 0);
    assert_true(st.tier.spilled + st.tier.spill_copies > 0);

    if (!sync && delay_us >= SLOW) {
        /* the copies' thread is behind: spills still in flight */
        assert_true(st.tier.spill_copies > 0);
    }

    kvs_engine_tier_wait(on);
    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.spill_copies, 0);
    assert_int_equal(st.tier.spill_copy_full, 0);
    assert_int_equal(st.tier.spill_failed, 0);
    assert_int_equal(st.tier.spill_written, st.tier.spilled);
    assert_int_equal(ac.reads, st.tier.spilled);

    if (!sync) {
        /* back from the disk: its 4 whole blocks */
        off = engine_new(md, 0, 0);
        run1(on, sys, 72, 8, &b, NULL);
        run1(off, sys, 72, 8, &c, NULL);
        kvs_test_engine_same(&b, &c, "spilled to disk off the step");
        assert_int_equal(b.n_cached, 64);
        assert_int_equal(b.n_cached_tier, 64);
        kvs_engine_out_free(&b);
        kvs_engine_out_free(&c);
        kvs_engine_free(off);
    }

    if (kvs_engine_check(on, &err) != KVS_OK) {
        fail_msg("engine check: %s", err.msg);
    }

    kvs_engine_free(on);
    /* the spills' staging ring and the loader's, each once */
    assert_int_equal(ac.allocs, 2 * !sync);
    assert_int_equal(ac.frees, ac.allocs);
    unlink(TIER_FILE);

    return max;
}


/* The disk tier alone: steps while its blocks spill, each way. */
static void
test_disk_steps_not_slowed(void **state)
{
    uint64_t          fast, slow, sync;
    kvs_test_model_t  md;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    /* in this order: the slow runs' figures beside a fast one's */
    fast = disk_scenario(&md, 2000, 0);
    slow = disk_scenario(&md, SLOW, 0);
    sync = disk_scenario(&md, SLOW, 1);
    steps_check("disk tier (while spilling)", 2000, fast, slow, sync);

    kvs_test_model_free(&md);
}


/* Freed with the disk spills' copies in flight: the staging ring freed
 * once, nothing leaked, and every copy done was queued and written (a
 * new engine on the file keeps them all). */
static void
test_disk_free_in_flight(void **state)
{
    int32_t             sys[72];
    uint64_t            reads, max;
    kvs_test_model_t    md;
    kvs_engine_t       *on;
    kvs_engine_stats_t  st;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    unlink(TIER_FILE);
    ac_set(SLOW, 0, 0);
    on = engine_tiers(&md, 0, 64);
    max = 0;

    run_evicted(on, &md, sys, 61, 8000, 3, &max);

    kvs_engine_stats(on, &st);
    assert_true(st.tier.spill_copies > 0);
    kvs_engine_free(on);
    assert_int_equal(ac.allocs, 2);
    assert_int_equal(ac.frees, 2);
    reads = ac.reads;
    assert_true(reads > 0);

    ac_set(0, 0, 0);
    on = engine_tiers(&md, 0, 64);
    kvs_engine_stats(on, &st);
    printf("freed with copies in flight: %" PRIu64 " spills copied, %"
           PRIu64 " kept from the file\n", reads, st.tier.kept);
    assert_int_equal(st.tier.kept, reads);
    kvs_engine_free(on);
    unlink(TIER_FILE);

    kvs_test_model_free(&md);
}


/* A staging ring of 2 (the spill queue's depth), then a backend of one
 * staged copy: the spills either cannot take are dropped and counted,
 * and no step waits. */
static void
test_disk_ring_full(void **state)
{
    int                 round;
    int32_t             sys[72];
    uint64_t            max;
    kvs_err_t           err;
    kvs_test_model_t    md;
    kvs_engine_t       *on;
    kvs_engine_stats_t  st;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    for (round = 0; round < 2; round++) {
        unlink(TIER_FILE);
        ac_set(SLOW, round == 0 ? 0 : 1, 0);
        on = engine_tiers(&md, 0, round == 0 ? 2 : 64);
        max = 0;

        run_evicted(on, &md, sys, 71, 9000, 3, &max);

        kvs_engine_stats(on, &st);
        printf("%s: %" PRIu64 " spills dropped (%" PRIu64 " refused by "
               "the backend), %" PRIu64 " in flight, longest step %.1f "
               "ms\n", round == 0 ? "staging ring of 2"
                                   : "one staged copy",
               st.tier.spill_copy_full, ac.refused, st.tier.spill_copies,
               (double) max / 1e6);

        assert_true(st.tier.spill_copy_full > 0);
        assert_true(st.tier.spill_dropped >= st.tier.spill_copy_full);
        assert_true(max < SLOW * 1000ull / 2);

        if (round == 0) {
            /* the engine's ring was full, not the backend */
            assert_int_equal(ac.refused, 0);
            assert_true(st.tier.spill_copies <= 2);

        } else {
            assert_int_equal(st.tier.spill_copy_full, ac.refused);
        }

        kvs_engine_tier_wait(on);
        kvs_engine_stats(on, &st);
        assert_int_equal(st.tier.spill_copies, 0);
        assert_int_equal(st.tier.spilled + st.tier.spill_dropped
                         - st.tier.spill_copy_full, ac.reads);

        if (kvs_engine_check(on, &err) != KVS_OK) {
            fail_msg("engine check: %s", err.msg);
        }

        kvs_engine_free(on);
        assert_int_equal(ac.frees, 2);
    }

    unlink(TIER_FILE);
    kvs_test_model_free(&md);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_async_comes_back),
        cmocka_unit_test(test_steps_not_slowed),
        cmocka_unit_test(test_close_and_free),
        cmocka_unit_test(test_backend_full),
        cmocka_unit_test(test_async_published),
        cmocka_unit_test(test_disk_steps_not_slowed),
        cmocka_unit_test(test_disk_free_in_flight),
        cmocka_unit_test(test_disk_ring_full),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
