/*
 * gpu_check_hcopy: the host tier's copies off the step on the device
 * (issue 26; docs/prefix-cache.md, "Copies off the step"), on
 * stories260K in the CUDA backend's own K/V dtype and int8 (with its
 * scale arrays), against the synchronous block_read / block_write:
 *
 *   1. every written block read out by block_read_async into pinned
 *      memory (host_alloc) equals block_read's bytes; a block read
 *      asynchronously, then overwritten on the step's stream
 *      (copy_block) before the copy is waited for, still arrives with
 *      its old bytes (the device staging); blocks written by
 *      block_write_async read back equal;
 *   2. timing: 64 blocks out and 64 in, synchronously against queued
 *      (the engine thread's share) and done, microseconds a block
 *      (INFO rows);
 *   3. the engine: a host tier, a prompt evicted into it by others and
 *      asked again comes back from host memory with the cache-off
 *      engine's greedy tokens (gpu_check_tier.c's check, its copies off
 *      the step).
 *
 * Under --self-test the CPU backend stands in for CUDA, wrapped by the
 * unit tests' copy thread (t/unit/kvs_test_acopy.h, no delay), so the
 * harness runs in `make cuda-check`.  Written without a device: its
 * first run on one is still to come.
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_check.h"
#include "../unit/kvs_test_acopy.h"
#include "backend/kvs_backend.h"
#include "model/kvs_model.h"

#define GC_HC_BLOCKS   160            /* the copies' pool */
#define GC_HC_N        64             /* blocks timed each way */


static kvs_test_acopy_t  gc_hc_ac;    /* --self-test's wrapper */


static void
gc_hc_fill(uint8_t *p, size_t n, uint64_t seed)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (uint8_t) (seed >> 56);
    }
}


static int
gc_hc_has_async(const kvs_backend_t *be)
{
    return be->ops->block_read_async != NULL
           && be->ops->block_write_async != NULL
           && be->ops->copy_poll != NULL && be->ops->copy_wait != NULL
           && be->ops->host_alloc != NULL && be->ops->host_free != NULL;
}


/* 1 and 2 on be; a failure names itself in why. */
static int
gc_hc_copies(gc_ctx_t *c, kvs_backend_t *be, const char *tag, char *why,
    size_t why_len)
{
    int        rc, ok;
    char       name[160], v[96];
    uint8_t   *sync, *pin, *seeded;
    uint32_t   k;
    uint64_t   bb, t, last;
    double     t0, t_sync_out, t_q_out, t_out, t_sync_in, t_q_in, t_in;
    kvs_err_t  err;

    bb = be->kv_bytes / be->n_blocks;
    sync = malloc(bb * GC_HC_N);
    seeded = malloc(bb * GC_HC_N);
    pin = be->ops->host_alloc(be, bb * GC_HC_N, &err);
    ok = 0;
    rc = KVS_OK;
    last = 0;
    snprintf(why, why_len, "out of memory");

    if (sync == NULL || seeded == NULL || pin == NULL) {
        goto done;
    }

    /* seeded bytes into blocks 0..N-1 (synchronously), then each read
     * out both ways, timed */
    gc_hc_fill(seeded, bb * GC_HC_N, c->seed ^ 0x4c0917ull);

    for (k = 0; k < GC_HC_N && rc == KVS_OK; k++) {
        rc = be->ops->block_write(be, k, seeded + k * bb, &err);
    }

    t0 = gc_now();
    for (k = 0; k < GC_HC_N && rc == KVS_OK; k++) {
        rc = be->ops->block_read(be, k, sync + k * bb, &err);
    }
    t_sync_out = gc_now() - t0;

    memset(pin, 0, bb * GC_HC_N);
    t0 = gc_now();
    for (k = 0; k < GC_HC_N && rc == KVS_OK; k++) {
        rc = be->ops->block_read_async(be, k, pin + k * bb, &last, &err);
    }
    t_q_out = gc_now() - t0;

    if (rc == KVS_OK) {
        rc = be->ops->copy_wait(be, last, &err);
    }
    t_out = gc_now() - t0;

    if (rc != KVS_OK) {
        snprintf(why, why_len, "reads: %s", err.msg);
        goto done;
    }

    if (memcmp(sync, seeded, bb * GC_HC_N) != 0
        || memcmp(pin, sync, bb * GC_HC_N) != 0)
    {
        snprintf(why, why_len, "a block read asynchronously is not the "
                 "synchronous read's");
        goto done;
    }

    /* read block 1 asynchronously, overwrite it on the step's stream at
     * once (block 2's bytes): the copy must carry block 1's old bytes */
    memset(pin, 0, bb);
    rc = be->ops->block_read_async(be, 1, pin, &t, &err);
    if (rc == KVS_OK) {
        rc = kvs_backend_copy_block(be, 1, 2, &err);
    }
    if (rc == KVS_OK) {
        rc = be->ops->copy_wait(be, t, &err);
    }

    if (rc != KVS_OK || memcmp(pin, seeded + bb, bb) != 0) {
        snprintf(why, why_len, "a block overwritten after its read was "
                 "queued: %s", rc != KVS_OK ? err.msg : "the new bytes "
                 "arrived (no staging)");
        goto done;
    }

    /* blocks N..2N-1 written asynchronously from pinned memory (the
     * seeded bytes again), timed against synchronous writes of the same
     * bytes into 0..N-1, then read back */
    memcpy(pin, seeded, bb * GC_HC_N);
    t0 = gc_now();
    for (k = 0; k < GC_HC_N && rc == KVS_OK; k++) {
        rc = be->ops->block_write(be, k, seeded + k * bb, &err);
    }
    t_sync_in = gc_now() - t0;

    t0 = gc_now();
    for (k = 0; k < GC_HC_N && rc == KVS_OK; k++) {
        rc = be->ops->block_write_async(be, GC_HC_N + k, pin + k * bb,
                                        &last, &err);
    }
    t_q_in = gc_now() - t0;

    if (rc == KVS_OK) {
        rc = be->ops->copy_wait(be, last, &err);
    }
    t_in = gc_now() - t0;

    for (k = 0; k < GC_HC_N && rc == KVS_OK; k++) {
        rc = be->ops->block_read(be, GC_HC_N + k, sync + k * bb, &err);
    }

    if (rc != KVS_OK) {
        snprintf(why, why_len, "writes: %s", err.msg);
        goto done;
    }

    if (memcmp(sync, seeded, bb * GC_HC_N) != 0) {
        snprintf(why, why_len, "a block written asynchronously reads back "
                 "other bytes");
        goto done;
    }

    printf("  hcopy %-40s %6" PRIu64 " bytes a block: async = sync PASS\n",
           tag, bb);

    snprintf(name, sizeof(name), "%s, out: sync / queued / done", tag);
    snprintf(v, sizeof(v), "%.1f / %.1f / %.1f us a block",
             t_sync_out * 1e6 / GC_HC_N, t_q_out * 1e6 / GC_HC_N,
             t_out * 1e6 / GC_HC_N);
    gc_row(c, "hcopy", name, v, "", "", "INFO", "");
    printf("  hcopy %s: %s\n", name, v);

    snprintf(name, sizeof(name), "%s, in: sync / queued / done", tag);
    snprintf(v, sizeof(v), "%.1f / %.1f / %.1f us a block",
             t_sync_in * 1e6 / GC_HC_N, t_q_in * 1e6 / GC_HC_N,
             t_in * 1e6 / GC_HC_N);
    gc_row(c, "hcopy", name, v, "", "", "INFO", "");
    printf("  hcopy %s: %s\n", name, v);

    ok = 1;

done:

    if (pin != NULL) {
        be->ops->host_free(be, pin);
    }

    free(sync);
    free(seeded);

    return ok;
}


static int
gc_hc_model(gc_ctx_t *c, const char *label, const char *path, int kv_dt)
{
    char                 why[KVS_ERR_MSG_LEN + 64], name[96];
    kvs_model_t         *m;
    kvs_vocab_t         *v;
    kvs_backend_t       *be;
    gc_tier_host_t       host;

    if (!gc_tier_open(c, "hcopy", label, path, kv_dt, GC_HC_BLOCKS, &m, &v,
                      &be))
    {
        return 0;
    }

    if (be != NULL) {
        if (c->self_test) {
            memset(&gc_hc_ac, 0, sizeof(gc_hc_ac));
            kvs_test_acopy_wrap(be, &gc_hc_ac);
        }

        if (!gc_hc_has_async(be)) {
            gc_fail(c, "hcopy", label, "no asynchronous block copies");

        } else if (!gc_hc_copies(c, be, label, why, sizeof(why))) {
            gc_fail(c, "hcopy", label, why);

        } else {
            gc_row(c, "hcopy", label, "async = sync, staged", "", "",
                   "PASS", "");
        }
    }

    kvs_backend_free(be);

    if (!c->dead) {
        snprintf(name, sizeof(name), "%s, engine", label);
        memset(&gc_hc_ac, 0, sizeof(gc_hc_ac));
        host.hook = c->self_test ? kvs_test_acopy_wrap : NULL;
        host.arg = &gc_hc_ac;
        host.async = 1;

        if (gc_tier_engine(c, m, v, kv_dt, &host, name, why, sizeof(why)))
        {
            gc_row(c, "hcopy", name, "greedy = cache off", "", "", "PASS",
                   "");
        } else {
            gc_fail(c, "hcopy", name, why);
        }
    }

    kvs_vocab_free(v);
    kvs_model_close(m);

    return c->dead ? -1 : 0;
}


int
gc_hcopy_run(gc_ctx_t *c)
{
    char  path[4096];

    if (!gc_tier_fixture(c, "hcopy", path, sizeof(path))) {
        return 0;
    }

    if (gc_hc_model(c, "stories260K, own K/V", path, -1) != 0
        || gc_hc_model(c, "stories260K, K/V int8", path, KVS_KV_INT8) != 0)
    {
        return -1;
    }

    return 0;
}
