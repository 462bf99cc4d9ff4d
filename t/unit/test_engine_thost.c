/*
 * test_engine_thost: the prefix cache's host memory tier inside the
 * engine (kvs_engine_thost.c), on the CPU backend whose ops the test
 * wraps to offer host_alloc/host_free (counted malloc), against an
 * engine with the cache off.
 *
 * A prompt evicted from a small pool comes back from the host tier bit
 * for bit (tokens and log-probabilities of a cache-off engine), and
 * under another scope nothing loads; with a host tier of 3 blocks and a
 * disk tier, an evicted prompt's blocks are split between host memory
 * and the disk, and it comes back from both (the tokens of each
 * counted); the tier never holds more than its slots; a
 * request closed while its disk part loads (its host part in already)
 * gives every block back; an engine freed with a load under way frees
 * the tier's memory once (ASan: nothing leaks); the CPU backend as it
 * is refuses the tier.
 */

#include "kvs_test.h"
#include "kvs_test_engine.h"
#include "kvs_test_model.h"

#include <inttypes.h>

#include "engine/kvs_engine.h"

/* the disk tier's file: one a process */
#define TIER_FILE  kvs_test_tmp_pid("test_engine_thost")

#define BT       16
#define BUDGET   32
#define POOL     12                   /* blocks: two 64-token turns */
#define DISK     (4u << 20)           /* bytes of file */


/* the host memory the wrapped backend gave and took back */
static struct {
    int     allocs;
    int     frees;
    size_t  bytes;
} mem;

static kvs_backend_ops_t  wrapped;


static void *
host_alloc(kvs_backend_t *be, size_t bytes, kvs_err_t *err)
{
    mem.allocs++;
    mem.bytes = bytes;

    return malloc(bytes);
}


static void
host_free(kvs_backend_t *be, void *p)
{
    mem.frees++;
    free(p);
}


/* the CPU backend's ops, with a host memory pair (as CUDA's) */
static void
wrap_ops(kvs_backend_t *be, void *arg)
{
    wrapped = *be->ops;
    wrapped.host_alloc = host_alloc;
    wrapped.host_free = host_free;
    be->ops = &wrapped;
}


/* host: bytes of host tier (0: none); disk: a disk tier too, reading
 * read_delay_us a block */
static kvs_engine_t *
engine_new(const kvs_test_model_t *md, int cache, uint64_t host, int disk,
    uint32_t read_delay_us)
{
    kvs_engine_conf_t  conf;

    kvs_test_engine_conf(&conf, md, BT, cache ? POOL : 64, BUDGET, cache);

    if (cache) {
        conf.backend_hook = wrap_ops;
        conf.tier_host_size = host;
    }

    if (cache && disk) {
        conf.tier_path = TIER_FILE;
        conf.tier_size = DISK;
        conf.tier_model = 1;
        conf.tier_load_always = 1;
        conf.tier_read_delay_us = read_delay_us;
    }

    return kvs_test_engine_new(&conf);
}


/* after each step: the tier within its slots */
static void
step_check(kvs_engine_t *e, const kvs_engine_out_t *out, uint64_t ns,
    void *arg)
{
    kvs_engine_stats_t  st;

    kvs_engine_stats(e, &st);

    if (st.tier.host_on && st.tier.host_used > st.tier.host_slots) {
        fail_msg("host tier: %" PRIu64 " blocks in %" PRIu64 " slots",
                 st.tier.host_used, st.tier.host_slots);
    }
}


static void
run1(kvs_engine_t *e, const int32_t *prompt, uint32_t n_prompt,
    uint32_t gen, const char *scope, kvs_engine_out_t *out)
{
    kvs_engine_req_t  req;

    kvs_test_engine_req(&req, prompt, n_prompt, gen, 5);
    req.scope = scope;
    req.scope_len = scope != NULL ? strlen(scope) : 0;

    kvs_test_engine_run(e, &req, out, step_check, NULL);
}


/* The 72-token prompt again on on (into b) and on the cache-off engine
 * off (into c): the same tokens, 64 of them cached, host of those from
 * host memory and disk from the disk. */
static void
comes_back(kvs_engine_t *on, kvs_engine_t *off, const int32_t *sys,
    uint32_t host, uint32_t disk, const char *what, kvs_engine_out_t *b,
    kvs_engine_out_t *c)
{
    run1(on, sys, 72, 8, NULL, b);
    run1(off, sys, 72, 8, NULL, c);
    kvs_test_engine_same(b, c, what);
    assert_int_equal(b->n_cached, 64);
    assert_int_equal(b->n_cached_host, host);
    assert_int_equal(b->n_cached_tier, disk);
}


/* Runs n other prompts of len tokens: what came before leaves the pool. */
static void
evict(kvs_engine_t *e, const kvs_test_model_t *md, uint64_t seed,
    uint32_t n, uint32_t len)
{
    int32_t           other[256];
    uint32_t          k;
    kvs_engine_out_t  c;

    for (k = 0; k < n; k++) {
        kvs_test_engine_fill(other, len, seed + k, md->m->hp.n_vocab,
                             md->v->bos);
        run1(e, other, len, 8, NULL, &c);
        kvs_engine_out_free(&c);
    }

    kvs_engine_tier_wait(e);
}


/* Bytes of one KV block of md (a probe engine's). */
static uint64_t
block_bytes(const kvs_test_model_t *md)
{
    uint64_t            b;
    kvs_engine_t       *e;
    kvs_engine_stats_t  st;

    e = engine_new(md, 1, 1u << 20, 0, 0);
    kvs_engine_stats(e, &st);
    b = st.tier.host_block_bytes;
    assert_true(st.tier.host_on);
    assert_true(b > 0);
    kvs_engine_free(e);

    return b;
}


/* An 80-token prompt (sys, 72 + 8), then a long one that evicts it: a
 * host tier of 3 blocks keeps its blocks 0, 1 and 3, the disk gets 4 and
 * 2 (written before returning). */
static void
split(kvs_engine_t *e, const kvs_test_model_t *md, uint64_t seed,
    int32_t *sys)
{
    int32_t           big[176];
    kvs_engine_out_t  a;

    kvs_test_engine_fill(sys, 72, seed, md->m->hp.n_vocab, md->v->bos);
    kvs_test_engine_fill(big, 176, seed + 1, md->m->hp.n_vocab,
                         md->v->bos);

    run1(e, sys, 72, 8, NULL, &a);
    kvs_engine_out_free(&a);
    run1(e, big, 176, 8, NULL, &a);
    kvs_engine_out_free(&a);
    kvs_engine_tier_wait(e);
}


static void
test_host_comes_back(void **state)
{
    int32_t             sys[72];
    uint64_t            bb;
    kvs_test_model_t    md;
    kvs_engine_t       *on, *off;
    kvs_engine_out_t    a, b, c;
    kvs_engine_stats_t  st;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    memset(&mem, 0, sizeof(mem));
    bb = block_bytes(&md);
    assert_int_equal(mem.allocs, 1);
    assert_int_equal(mem.frees, 1);

    /* 64 blocks: all six prompts' blocks fit */
    memset(&mem, 0, sizeof(mem));
    on = engine_new(&md, 1, 64 * bb, 0, 0);
    off = engine_new(&md, 0, 0, 0, 0);
    assert_int_equal(mem.allocs, 1);
    assert_int_equal(mem.bytes, 64 * bb);

    kvs_test_engine_fill(sys, 72, 11, md.m->hp.n_vocab, md.v->bos);

    run1(on, sys, 64, 8, NULL, &a);
    assert_int_equal(a.n_cached_host, 0);
    evict(on, &md, 1000, 6, 64);

    kvs_engine_stats(on, &st);
    assert_true(st.tier.host_on);
    assert_false(st.tier.on);
    assert_int_equal(st.tier.host_slots, 64);
    assert_true(st.tier.host_spilled > 0);
    assert_int_equal(st.tier.host_used, st.tier.host_spilled);
    assert_int_equal(st.tier.host_bytes_in, st.tier.host_spilled * bb);
    assert_int_equal(st.tier.host_evicted, 0);

    /* its 4 whole blocks come back from host memory */
    comes_back(on, off, sys, 64, 0, "copied in from the host tier", &b, &c);

    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.host_loads, 1);
    assert_int_equal(st.tier.host_loaded_blocks, 4);
    assert_int_equal(st.tier.host_bytes_out, 4 * bb);
    assert_true(st.tier.host_hits >= 4);
    assert_int_equal(st.cache_host_hit_tokens, 64);
    assert_int_equal(st.cache_tier_hit_tokens, 0);
    printf("host tier: 4 blocks of %" PRIu64 " bytes copied in in %.1f "
           "us\n", bb, (double) st.tier.host_load_ns / 1e3);

    /* another scope: the same tokens, nothing loaded */
    kvs_engine_out_free(&b);
    evict(on, &md, 2000, 6, 64);
    run1(on, sys, 72, 8, "tenant-b", &b);
    assert_int_equal(b.n_cached, 0);
    assert_int_equal(b.n_cached_host, 0);
    kvs_test_engine_same(&b, &c, "another scope");
    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.host_loaded_blocks, 4);

    kvs_engine_out_free(&a);
    kvs_engine_out_free(&b);
    kvs_engine_out_free(&c);
    kvs_engine_free(on);
    kvs_engine_free(off);
    assert_int_equal(mem.frees, 1);
    kvs_test_model_free(&md);
}


/* A host tier of 3 blocks before a disk tier: one long prompt evicts
 * the whole of an 80-token one (5 blocks: the reply's, then blocks 2-3
 * as one cut, then 1 and 0), so host memory keeps blocks 0, 1 and 3 and
 * blocks 4 and 2 go on to the disk.  The prompt comes back as blocks
 * 0-1 copied in at once, then block 2 from the disk and 3 from host
 * memory by the loader. */
static void
test_host_then_disk(void **state)
{
    int32_t             sys[72];
    uint64_t            bb;
    kvs_test_model_t    md;
    kvs_engine_t       *on, *off;
    kvs_engine_out_t    b, c;
    kvs_engine_stats_t  st;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    bb = block_bytes(&md);
    unlink(TIER_FILE);
    memset(&mem, 0, sizeof(mem));
    on = engine_new(&md, 1, 3 * bb, 1, 0);
    off = engine_new(&md, 0, 0, 0, 0);
    split(on, &md, 31, sys);

    kvs_engine_stats(on, &st);
    assert_true(st.tier.on && st.tier.host_on);
    assert_int_equal(st.tier.host_slots, 3);
    assert_int_equal(st.tier.host_used, 3);
    assert_int_equal(st.tier.host_spilled, 5);
    assert_int_equal(st.tier.host_evicted, 2);
    assert_int_equal(st.tier.host_to_disk, 2);
    assert_int_equal(st.tier.spilled, 2);
    assert_int_equal(st.tier.spill_written, 2);

    /* the shallow blocks from host memory, then the disk's */
    comes_back(on, off, sys, 48, 16, "from host memory and the disk", &b,
               &c);

    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.host_loads, 1);
    assert_int_equal(st.tier.host_loaded_blocks, 3);
    assert_int_equal(st.tier.host_bytes_out, 3 * bb);
    assert_int_equal(st.tier.loads, 1);
    assert_int_equal(st.tier.loaded_blocks, 1);
    assert_int_equal(st.tier.load_failed, 0);
    assert_int_equal(st.cache_host_hit_tokens, 48);
    assert_int_equal(st.cache_tier_hit_tokens, 16);
    assert_true(st.tier.host_used <= 3);

    kvs_engine_out_free(&b);
    kvs_engine_out_free(&c);
    kvs_engine_free(on);
    kvs_engine_free(off);
    assert_int_equal(mem.allocs, 1);
    assert_int_equal(mem.frees, 1);
    unlink(TIER_FILE);
    kvs_test_model_free(&md);
}


/* The same split, the disk reading 100 ms a block: closed while its
 * disk block loads, the request gives back what it reserved, its host
 * blocks stay cached, and a later request finds them; an engine freed
 * with a load under way frees everything. */
static void
test_close_during_load(void **state)
{
    int32_t             sys[72];
    uint64_t            bb;
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
    unlink(TIER_FILE);
    memset(&mem, 0, sizeof(mem));
    on = engine_new(&md, 1, 3 * bb, 1, 100000);
    split(on, &md, 41, sys);

    h = kvs_test_engine_submit(on, sys, 72, 8);
    (void) kvs_engine_step(on);

    /* blocks 0-1 in, blocks 2-3 loading */
    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.host_loaded_blocks, 2);
    assert_int_equal(st.tier.loading, 1);
    assert_int_equal(st.tier.load_reserved, 2);

    kvs_engine_close(on, h);
    (void) kvs_engine_step(on);

    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.loading, 0);
    assert_int_equal(st.tier.load_reserved, 0);

    if (kvs_engine_check(on, &err) != KVS_OK) {
        fail_msg("engine check after the close: %s", err.msg);
    }

    /* the host run is in the tree: the next request reuses it */
    run1(on, sys, 72, 8, NULL, &a);
    assert_true(a.n_cached >= 32);
    kvs_engine_out_free(&a);

    /* freed with a load under way */
    split(on, &md, 43, sys);
    h = kvs_test_engine_submit(on, sys, 72, 8);
    (void) kvs_engine_step(on);
    kvs_engine_close(on, h);
    kvs_engine_free(on);
    assert_int_equal(mem.allocs, 1);
    assert_int_equal(mem.frees, 1);

    unlink(TIER_FILE);
    kvs_test_model_free(&md);
}


/* The CPU backend as it is (no host_alloc) refuses a host tier. */
static void
test_cpu_refuses(void **state)
{
    kvs_err_t           err;
    kvs_engine_t       *e;
    kvs_test_model_t    md;
    kvs_engine_conf_t   conf;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    kvs_test_engine_conf(&conf, &md, BT, POOL, BUDGET, 1);
    conf.tier_host_size = 1u << 20;

    assert_int_equal(kvs_engine_new(&e, &conf, &err), KVS_EUNSUPPORTED);
    if (strstr(err.msg, "backend gives no host memory") == NULL) {
        fail_msg("refused with: %s", err.msg);
    }

    kvs_test_model_free(&md);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_host_comes_back),
        cmocka_unit_test(test_host_then_disk),
        cmocka_unit_test(test_close_during_load),
        cmocka_unit_test(test_cpu_refuses),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
