/*
 * test_engine_tcost: the cost model's hook for the host memory tier
 * (kvs_engine_tload.c, docs/prefix-cache.md "When to load"): the host
 * tier's copies into the pool are measured (their bytes over the plan's
 * copy time) and weighed against the prefill like the disk's reads, on
 * the step loop (no batch weight).  On the CPU backend, whose ops the
 * test wraps to offer host_alloc/host_free and a block_write that can
 * be made slow, with the cost model on (no load=always):
 *
 *   - fast copies (a memcpy of a block): the first three loads measure
 *     the rate, and the fourth prompt is loaded from host memory too;
 *   - copies slowed to SLOW_US a block (far more than the prefill of a
 *     block's 16 tokens): the first three are loaded all the same (the
 *     rate is not trusted yet), the fourth prompt's blocks are passed
 *     over and computed, its reply equal to a cache-off engine's.
 */

#include "kvs_test.h"
#include "kvs_test_engine.h"
#include "kvs_test_model.h"

#include <inttypes.h>
#include <unistd.h>

#include "engine/kvs_engine.h"

#define BT       16
#define BUDGET   32
#define POOL     12                   /* blocks: two 64-token turns */
#define HOST     64                   /* blocks of host tier */
#define SLOW_US  100000               /* a slow copy of one block */


static kvs_backend_ops_t  wrapped;
static uint32_t           slow_us;    /* block_write's delay; 0: none */
static uint32_t           writes;
static int              (*orig_write)(kvs_backend_t *be, uint32_t b,
                                      const void *src, kvs_err_t *err);


static void *
host_alloc(kvs_backend_t *be, size_t bytes, kvs_err_t *err)
{
    return malloc(bytes);
}


static void
host_free(kvs_backend_t *be, void *p)
{
    free(p);
}


static int
slow_write(kvs_backend_t *be, uint32_t b, const void *src, kvs_err_t *err)
{
    writes++;

    if (slow_us > 0) {
        usleep(slow_us);
    }

    return orig_write(be, b, src, err);
}


static void
wrap_ops(kvs_backend_t *be, void *arg)
{
    wrapped = *be->ops;
    orig_write = be->ops->block_write;
    wrapped.host_alloc = host_alloc;
    wrapped.host_free = host_free;
    wrapped.block_write = slow_write;
    be->ops = &wrapped;
}


static kvs_engine_t *
engine_new(const kvs_test_model_t *md, int cache, uint64_t host)
{
    kvs_engine_conf_t  conf;

    kvs_test_engine_conf(&conf, md, BT, cache ? POOL : 64, BUDGET, cache);

    if (cache) {
        conf.backend_hook = wrap_ops;
        conf.tier_host_size = host;
        conf.tier_load_always = 0;
    }

    return kvs_test_engine_new(&conf);
}


static void
run1(kvs_engine_t *e, const int32_t *prompt, uint32_t n_prompt,
    kvs_engine_out_t *out)
{
    kvs_engine_req_t  req;

    kvs_test_engine_req(&req, prompt, n_prompt, 8, 5);
    kvs_test_engine_run(e, &req, out, NULL, NULL);
}


/* Runs n other prompts of 64 tokens: what came before leaves the pool
 * (for the host tier). */
static void
evict(kvs_engine_t *e, const kvs_test_model_t *md, uint64_t seed,
    uint32_t n)
{
    int32_t           other[64];
    uint32_t          k;
    kvs_engine_out_t  c;

    for (k = 0; k < n; k++) {
        kvs_test_engine_fill(other, 64, seed + k, md->m->hp.n_vocab,
                             md->v->bos);
        run1(e, other, 64, &c);
        kvs_engine_out_free(&c);
    }
}


/* Bytes of one KV block of md (a probe engine's). */
static uint64_t
block_bytes(const kvs_test_model_t *md)
{
    uint64_t            b;
    kvs_engine_t       *e;
    kvs_engine_stats_t  st;

    e = engine_new(md, 1, 1u << 20);
    kvs_engine_stats(e, &st);
    b = st.tier.host_block_bytes;
    assert_true(st.tier.host_on && b > 0);
    kvs_engine_free(e);

    return b;
}


/*
 * Three prompts of 24 tokens, each run, evicted and run again (its
 * first block from host memory: the rate's three samples), then a
 * prompt of 72 tokens the same way, whose 4 whole blocks are loaded
 * (want_host 64 tokens) or computed (0).
 */
static void
rounds(const kvs_test_model_t *md, uint32_t delay, uint32_t want_host)
{
    int32_t             p[72];
    uint64_t            bb;
    uint32_t            i, n;
    kvs_engine_t       *on, *off;
    kvs_engine_out_t    a, b, c;
    kvs_engine_stats_t  st;

    bb = block_bytes(md);
    on = engine_new(md, 1, HOST * bb);
    off = engine_new(md, 0, 0);

    for (i = 0; i < 4; i++) {
        n = i < 3 ? 24 : 72;
        kvs_test_engine_fill(p, n, 100 + i, md->m->hp.n_vocab, md->v->bos);

        slow_us = 0;
        run1(on, p, n, &a);
        kvs_engine_out_free(&a);
        evict(on, md, 1000 + 10 * i, 6);

        /* only the copies back in are slow */
        slow_us = delay;
        writes = 0;
        run1(on, p, n, &b);
        run1(off, p, n, &c);
        kvs_test_engine_same(&b, &c, "a prompt again");

        if (i < 3) {
            /* not measured yet: loaded whatever its cost */
            assert_int_equal(b.n_cached_host, 16);
            assert_int_equal(writes, 1);

        } else {
            assert_int_equal(b.n_cached_host, want_host);
            assert_int_equal(b.n_cached, want_host);
            assert_int_equal(writes, want_host / BT);
        }

        kvs_engine_out_free(&b);
        kvs_engine_out_free(&c);
    }

    kvs_engine_stats(on, &st);
    assert_int_equal(st.tier.host_loads, 3 + (want_host > 0));
    assert_int_equal(st.tier.host_loaded_blocks, 3 + want_host / BT);
    printf("host copies %s: %" PRIu64 " blocks of %" PRIu64 " bytes in "
           "%.1f ms; prefill %.0f tokens/s\n",
           delay ? "slowed" : "as they are",
           st.tier.host_loaded_blocks, bb,
           (double) st.tier.host_load_ns / 1e6, st.tier.prefill_tps);

    slow_us = 0;
    kvs_engine_free(on);
    kvs_engine_free(off);
}


static void
test_fast_copies_load(void **state)
{
    kvs_test_model_t  md;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    rounds(&md, 0, 64);
    kvs_test_model_free(&md);
}


static void
test_slow_copies_compute(void **state)
{
    kvs_test_model_t  md;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    rounds(&md, SLOW_US, 0);
    kvs_test_model_free(&md);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fast_copies_load),
        cmocka_unit_test(test_slow_copies_compute),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
