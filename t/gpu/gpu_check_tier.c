/*
 * gpu_check_tier: the prefix cache's lower tiers on the device (issue 26;
 * docs/prefix-cache.md, "The second tier"), on stories260K in each K/V
 * dtype the CUDA backend stores (its own, f16, int8 and fp8: the last
 * two with their scale arrays).
 *
 *   1. copies: every block of the pool is read out (block_read), seeded
 *      bytes are written into some (block_write) and read back equal,
 *      the other blocks' bytes unchanged; copy_block of a written block
 *      reads back the same bytes, so block_read's block is the one the
 *      kernels address;
 *   2. host then disk: the blocks go into a host tier of 2 slots in the
 *      backend's own host memory (host_alloc: pinned on CUDA) whose
 *      evictions go on to a disk tier (kvs_tier.c) in KVS_TMP; each is
 *      loaded back from where it is (host hold, or disk read) into a
 *      fresh block, and read out again: the bytes must be equal;
 *   3. the engine: a prompt computed, evicted by others into the disk
 *      tier, then asked again: its blocks come back from the tier
 *      (n_cached_tier > 0) and the greedy tokens equal the cache-off
 *      engine's on the same device.  The disk load's writes into the
 *      pool must be off the step (2026-12-04: block_write_async from the
 *      loader's pinned staging, load_async) and none may fail.
 *
 * Under --self-test the CPU backend stands in for CUDA (its host memory
 * is plain malloc), so the harness itself runs in `make cuda-check`;
 * its engine with a disk tier is wrapped with the unit tests' copy
 * thread (t/unit/kvs_test_acopy.h, no delay) so that the writes go the
 * asynchronous way there too.
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_check.h"
#include "backend/kvs_backend.h"
#include "engine/kvs_engine.h"
#include "kv/kvs_tier.h"
#include "kv/kvs_tier_host.h"
#include "model/kvs_model.h"
#include "tokenizer/kvs_vocab.h"

#include "../unit/kvs_test_acopy.h"

#define GC_TIER_BT       16           /* tokens per block */
#define GC_TIER_BLOCKS   24           /* the copies' pool */
#define GC_TIER_WRITTEN  6            /* blocks written with seeded bytes */
#define GC_TIER_POOL     12           /* the engine's pool */
#define GC_TIER_PROMPT   64
#define GC_TIER_GEN      8
#define GC_TIER_EPOCH    0x7e57ull


typedef struct {
    kvs_tier_t     *disk;
    kvs_tier_io_t  *io;
    uint32_t        spilled;
    int             failed;
} gc_tier_next_t;


static kvs_test_acopy_t  gc_tier_ac;  /* --self-test's disk engine */


static void
gc_tier_fill(uint8_t *p, size_t n, uint64_t seed)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (uint8_t) (seed >> 56);
    }
}


/* The host tier's evictions, on to the disk tier. */
static void
gc_tier_evict(void *arg, const kvs_radix_key_t *key, const uint8_t *id,
    const uint8_t *name, const int32_t *tokens, const void *data)
{
    kvs_err_t        err;
    gc_tier_next_t  *nx = arg;

    if (kvs_tier_put(nx->disk, nx->io, key, id, tokens, data, &err)
        != KVS_OK)
    {
        printf("  tier disk put: %s\n", err.msg);
        nx->failed = 1;
        return;
    }

    nx->spilled++;
}


static void *
gc_tier_halloc(void *arg, size_t bytes, kvs_err_t *err)
{
    kvs_backend_t  *be = arg;

    if (be->ops->host_alloc != NULL) {
        return be->ops->host_alloc(be, bytes, err);
    }

    return malloc(bytes);
}


static void
gc_tier_hfree(void *arg, void *p)
{
    kvs_backend_t  *be = arg;

    if (be->ops->host_free != NULL) {
        be->ops->host_free(be, p);
    } else {
        free(p);
    }
}


/* 1 and 2 on backend be; a failure names itself in why. */
static int
gc_tier_copies(gc_ctx_t *c, kvs_backend_t *be, const char *tag, char *why,
    size_t why_len)
{
    int                    rc, ok;
    char                   path[4096];
    uint8_t               *before, *after, *seeded, *one, id[KVS_TIER_ID_LEN];
    int32_t                tok[GC_TIER_BT];
    uint32_t               b, k, slot, from_host, from_disk;
    uint64_t               bb;
    kvs_err_t              err;
    const char            *where;
    const void            *data;
    kvs_radix_key_t        key;
    gc_tier_next_t         nx;
    kvs_tier_conf_t        dc;
    kvs_tier_host_t       *host;
    kvs_tier_host_conf_t   hc;

    bb = be->kv_bytes / be->n_blocks;
    before = malloc(bb * be->n_blocks);
    after = malloc(bb * be->n_blocks);
    seeded = malloc(bb * GC_TIER_WRITTEN);
    one = malloc(bb);
    host = NULL;
    memset(&nx, 0, sizeof(nx));
    ok = 0;
    rc = KVS_OK;
    snprintf(why, why_len, "out of memory");

    if (before == NULL || after == NULL || seeded == NULL || one == NULL) {
        goto done;
    }

    /* 1. out, seeded bytes in, out again */
    for (b = 0; b < be->n_blocks && rc == KVS_OK; b++) {
        rc = be->ops->block_read(be, b, before + b * bb, &err);
    }

    gc_tier_fill(seeded, bb * GC_TIER_WRITTEN, c->seed ^ 0x7131ull);

    for (k = 0; k < GC_TIER_WRITTEN && rc == KVS_OK; k++) {
        rc = be->ops->block_write(be, 3 * k + 1, seeded + k * bb, &err);
        memcpy(before + (3 * k + 1) * bb, seeded + k * bb, bb);
    }

    for (b = 0; b < be->n_blocks && rc == KVS_OK; b++) {
        rc = be->ops->block_read(be, b, after + b * bb, &err);
    }

    if (rc != KVS_OK) {
        snprintf(why, why_len, "%s", err.msg);
        goto done;
    }

    for (b = 0; b < be->n_blocks; b++) {
        if (memcmp(before + b * bb, after + b * bb, bb) != 0) {
            snprintf(why, why_len, "block %u reads back other bytes", b);
            goto done;
        }
    }

    /* copy_block's block is block_read's */
    rc = kvs_backend_copy_block(be, 0, 4, &err);
    if (rc == KVS_OK) {
        rc = be->ops->block_read(be, 0, one, &err);
    }

    if (rc != KVS_OK || memcmp(one, seeded + 1 * bb, bb) != 0) {
        snprintf(why, why_len, "copy_block 4 -> 0: %s",
                 rc != KVS_OK ? err.msg : "other bytes");
        goto done;
    }

    printf("  tier %-44s %6" PRIu64 " bytes a block: copies PASS\n", tag,
           bb);

    /* 2. host tier of 2 slots, then the disk */
    snprintf(path, sizeof(path), "%s/gpu-check-tier-%d", c->tmp,
             (int) getpid());
    unlink(path);

    memset(&dc, 0, sizeof(dc));
    dc.path = path;
    dc.size = 64 * (bb + 2 * 4096 + GC_TIER_BT * 4);
    dc.block_bytes = bb;
    dc.block_tokens = GC_TIER_BT;
    dc.epoch = GC_TIER_EPOCH;
    dc.model = 1;

    rc = kvs_tier_open(&nx.disk, &dc, NULL, 0, &err);
    if (rc == KVS_OK) {
        rc = kvs_tier_io_new(nx.disk, &nx.io, &err);
    }

    memset(&hc, 0, sizeof(hc));
    hc.size = 2 * bb;
    hc.block_bytes = bb;
    hc.block_tokens = GC_TIER_BT;
    hc.epoch = GC_TIER_EPOCH;
    hc.alloc = gc_tier_halloc;
    hc.free = gc_tier_hfree;
    hc.mem_arg = be;
    hc.evict = gc_tier_evict;
    hc.evict_arg = &nx;

    if (rc == KVS_OK) {
        rc = kvs_tier_host_new(&host, &hc, &err);
    }

    key.epoch = GC_TIER_EPOCH;
    key.adapter = 0;
    key.scope = "gpu-check";
    key.scope_len = strlen(key.scope);

    /* the written blocks, read out of the pool into the host tier */
    for (k = 0; k < GC_TIER_WRITTEN && rc == KVS_OK; k++) {
        for (b = 0; b < GC_TIER_BT; b++) {
            tok[b] = (int32_t) (k * GC_TIER_BT + b);
        }

        kvs_tier_path_id(NULL, tok, GC_TIER_BT, id);
        rc = be->ops->block_read(be, 3 * k + 1, one, &err);

        if (rc == KVS_OK) {
            rc = kvs_tier_host_put(host, &key, id, tok, one, &err);
        }
    }

    if (rc != KVS_OK || nx.failed || nx.spilled != GC_TIER_WRITTEN - 2) {
        snprintf(why, why_len, "host tier: %s", rc != KVS_OK ? err.msg
                 : "spills to disk not as many as evictions");
        goto done;
    }

    /* each back from where it is, into block 2, out again */
    from_host = 0;
    from_disk = 0;

    for (k = 0; k < GC_TIER_WRITTEN && rc == KVS_OK; k++) {
        for (b = 0; b < GC_TIER_BT; b++) {
            tok[b] = (int32_t) (k * GC_TIER_BT + b);
        }

        kvs_tier_path_id(NULL, tok, GC_TIER_BT, id);

        if (kvs_tier_host_hold(host, &key, id, tok, &data, &slot, &err)
            == KVS_OK)
        {
            rc = be->ops->block_write(be, 2, data, &err);
            kvs_tier_host_release(host, slot);
            from_host++;
            where = "host";

        } else {
            rc = kvs_tier_get(nx.disk, nx.io, &key, id, tok, one, &err);
            if (rc == KVS_OK) {
                rc = be->ops->block_write(be, 2, one, &err);
            }
            from_disk++;
            where = "disk";
        }

        if (rc == KVS_OK) {
            memset(one, 0, bb);
            rc = be->ops->block_read(be, 2, one, &err);
        }

        if (rc == KVS_OK && memcmp(one, seeded + k * bb, bb) != 0) {
            snprintf(why, why_len, "block %u back from the %s tier: other "
                     "bytes", k, where);
            goto done;
        }
    }

    if (rc != KVS_OK || from_host != 2 || from_disk != GC_TIER_WRITTEN - 2) {
        snprintf(why, why_len, "loads: %s (%u from host, %u from disk)",
                 rc != KVS_OK ? err.msg : "not where they should be",
                 from_host, from_disk);
        goto done;
    }

    printf("  tier %-44s host %u, disk %u blocks back: PASS\n", tag,
           from_host, from_disk);
    ok = 1;

done:

    kvs_tier_host_free(host);
    kvs_tier_io_free(nx.io);
    kvs_tier_close(nx.disk);
    unlink(path);
    free(before);
    free(after);
    free(seeded);
    free(one);

    return ok;
}


/* One greedy request run to its end on e; tokens into out[gen]. */
static int
gc_tier_gen(kvs_engine_t *e, const int32_t *prompt, uint32_t n,
    int32_t *out, uint32_t *n_tier, kvs_err_t *err)
{
    int                rc;
    size_t             i;
    kvs_engine_req_t   req;
    kvs_engine_out_t   o;
    kvs_engine_seq_t  *h, *hs[1];

    memset(&req, 0, sizeof(req));
    req.prompt = prompt;
    req.n_prompt = n;
    req.max_tokens = GC_TIER_GEN;
    req.ignore_eos = 1;
    req.sample.top_p = 1.0f;
    memset(&o, 0, sizeof(o));

    rc = kvs_engine_submit(e, &req, &h, err);
    if (rc != KVS_OK) {
        return rc;
    }

    for (i = 0; o.finish == KVS_FINISH_NONE && i < 100000; i++) {
        (void) kvs_engine_step(e);

        while (kvs_engine_ready(e, hs, 1) > 0) {
            (void) kvs_engine_read(e, hs[0], &o);
        }
    }

    kvs_engine_close(e, h);

    if (o.n_tokens != GC_TIER_GEN) {
        kvs_engine_out_free(&o);
        return kvs_err_set(err, KVS_EIO, "a reply of %zu tokens, not %d",
                           o.n_tokens, GC_TIER_GEN);
    }

    memcpy(out, o.tokens, GC_TIER_GEN * sizeof(int32_t));

    /* what came from the lower tiers: the disk's, and the host's */
    if (n_tier != NULL) {
        *n_tier = o.n_cached_tier + o.n_cached_host;
    }

    kvs_engine_out_free(&o);

    return KVS_OK;
}


/* 3: an engine with a disk tier (host NULL) or a host tier against a
 * cache-off one. */
int
gc_tier_engine(gc_ctx_t *c, kvs_model_t *m, kvs_vocab_t *v, int kv_dt,
    const gc_tier_host_t *host, const char *name, char *why,
    size_t why_len)
{
    int                 rc, ok;
    char                path[4096];
    int32_t             prompt[GC_TIER_PROMPT], other[GC_TIER_PROMPT];
    int32_t             a[GC_TIER_GEN], b[GC_TIER_GEN], x[GC_TIER_GEN];
    uint32_t            i, k, n_tier;
    uint64_t            s;
    kvs_err_t           err;
    kvs_engine_t       *on, *off;
    kvs_engine_conf_t   conf;
    kvs_engine_stats_t  st;
    const char         *tier;

    on = NULL;
    off = NULL;
    ok = 0;
    snprintf(path, sizeof(path), "%s/gpu-check-etier-%d", c->tmp,
             (int) getpid());
    unlink(path);

    memset(&conf, 0, sizeof(conf));
    conf.model = m;
    conf.vocab = v;
    conf.block_tokens = GC_TIER_BT;
    conf.n_blocks = 64;
    conf.threads = 1;
    conf.backend = c->self_test ? KVS_BACKEND_CPU : KVS_BACKEND_CUDA;
    conf.device = c->device;
    conf.kv_dtype_set = kv_dt >= 0;
    conf.kv_dtype = kv_dt >= 0 ? (uint32_t) kv_dt : 0;
    conf.no_prefix_cache = 1;

    rc = kvs_engine_new(&off, &conf, &err);

    if (rc == KVS_OK) {
        conf.no_prefix_cache = 0;
        conf.n_blocks = GC_TIER_POOL;

        if (host != NULL) {
            conf.tier_host_size = 16u << 20;
            conf.backend_hook = host->hook;
            conf.backend_hook_arg = host->arg;
        } else {
            conf.tier_path = path;
            conf.tier_size = 8u << 20;
            conf.tier_model = 1;

            if (c->self_test) {
                memset(&gc_tier_ac, 0, sizeof(gc_tier_ac));
                conf.backend_hook = kvs_test_acopy_wrap;
                conf.backend_hook_arg = &gc_tier_ac;
            }
        }

        rc = kvs_engine_new(&on, &conf, &err);
    }

    s = c->seed ^ 0x7e1e7ull;
    for (i = 0; i < GC_TIER_PROMPT; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        prompt[i] = 3 + (int32_t) ((s >> 33) % (m->hp.n_vocab - 3));
    }
    prompt[0] = 1;

    if (rc == KVS_OK) {
        rc = gc_tier_gen(on, prompt, GC_TIER_PROMPT, a, NULL, &err);
    }

    /* six other prompts: the pool of 12 blocks keeps none of it */
    for (k = 0; k < 6 && rc == KVS_OK; k++) {
        memcpy(other, prompt, sizeof(other));
        for (i = 1; i < GC_TIER_PROMPT; i++) {
            other[i] = 3 + (int32_t) ((other[i] + 7 * (k + 1))
                                      % (m->hp.n_vocab - 3));
        }
        rc = gc_tier_gen(on, other, GC_TIER_PROMPT, x, NULL, &err);
    }

    if (rc == KVS_OK) {
        kvs_engine_tier_wait(on);
        rc = gc_tier_gen(on, prompt, GC_TIER_PROMPT, b, &n_tier, &err);
    }

    if (rc == KVS_OK) {
        rc = gc_tier_gen(off, prompt, GC_TIER_PROMPT, x, NULL, &err);
    }

    memset(&st, 0, sizeof(st));
    if (on != NULL) {
        kvs_engine_stats(on, &st);
    }

    tier = host != NULL ? "host" : "disk";

    if (rc != KVS_OK) {
        snprintf(why, why_len, "engine: %s", err.msg);

    } else if (host != NULL && host->async && !st.tier.host_async) {
        snprintf(why, why_len, "the host tier's copies are not off the "
                 "step (no asynchronous copies)");

    } else if (host == NULL && !st.tier.load_async) {
        snprintf(why, why_len, "the disk load's writes are not off the "
                 "step (no asynchronous copies)");

    } else if (host == NULL && st.tier.load_copy_failed > 0) {
        snprintf(why, why_len, "%" PRIu64 " of the disk load's writes "
                 "into the pool failed", st.tier.load_copy_failed);

    } else if (n_tier == 0) {
        snprintf(why, why_len, "nothing came back from the %s tier", tier);

    } else if (memcmp(b, x, sizeof(b)) != 0 || memcmp(a, x, sizeof(a)) != 0)
    {
        snprintf(why, why_len, "greedy tokens after the load differ from "
                 "the cache-off run's");

    } else {
        printf("  tier %-44s %u tokens from the %s tier%s, greedy tokens "
               "= cache off: PASS\n", name, n_tier, tier,
               st.tier.host_async || st.tier.load_async
               ? " (its copies off the step)" : "");

        if (host == NULL) {
            printf("  tier %-44s %" PRIu64 " blocks written in off the "
                   "step, %" PRIu64 " refused\n", name,
                   st.tier.loaded_blocks, st.tier.load_copy_full);
        }
        ok = 1;
    }

    kvs_engine_free(on);
    kvs_engine_free(off);
    unlink(path);

    return ok;
}


int
gc_tier_open(gc_ctx_t *c, const char *part, const char *label,
    const char *path, int kv_dt, uint32_t n_blocks, kvs_model_t **m,
    kvs_vocab_t **v, kvs_backend_t **be)
{
    char                 why[KVS_ERR_MSG_LEN + 64];
    kvs_err_t            err;
    kvs_backend_conf_t   conf;

    *m = NULL;
    *v = NULL;
    *be = NULL;

    if (kvs_model_open(m, path, &err) != KVS_OK
        || kvs_vocab_load(v, (*m)->gguf, &err) != KVS_OK)
    {
        snprintf(why, sizeof(why), "open %s: %s", path, err.msg);
        gc_fail(c, part, label, why);
        kvs_model_close(*m);
        *m = NULL;
        return 0;
    }

    memset(&conf, 0, sizeof(conf));
    conf.n_blocks = n_blocks;
    conf.block_tokens = GC_TIER_BT;
    conf.device = c->device;
    conf.kind = c->self_test ? KVS_BACKEND_CPU : KVS_BACKEND_CUDA;
    conf.kv_dtype_set = kv_dt >= 0;
    conf.kv_dtype = kv_dt >= 0 ? (uint32_t) kv_dt : 0;

    if (kvs_backend_new(be, *m, &conf, NULL, &err) != KVS_OK) {
        snprintf(why, sizeof(why), "%s", err.msg);
        gc_fail(c, part, label, why);
        *be = NULL;
    }

    return 1;
}


static int
gc_tier_model(gc_ctx_t *c, const char *label, const char *path, int kv_dt)
{
    char                 why[KVS_ERR_MSG_LEN + 64], name[96];
    kvs_model_t         *m;
    kvs_vocab_t         *v;
    kvs_backend_t       *be;

    if (!gc_tier_open(c, "tier", label, path, kv_dt, GC_TIER_BLOCKS, &m, &v,
                      &be))
    {
        return 0;
    }

    if (be == NULL) {
        /* failed, said */

    } else if (be->ops->block_read == NULL || be->ops->block_write == NULL)
    {
        gc_fail(c, "tier", label, "no block_read / block_write");

    } else if (!gc_tier_copies(c, be, label, why, sizeof(why))) {
        gc_fail(c, "tier", label, why);

    } else {
        gc_row(c, "tier", label, "copies, host, disk", "", "", "PASS", "");
    }

    kvs_backend_free(be);

    if (!c->dead) {
        snprintf(name, sizeof(name), "%s, engine", label);

        if (gc_tier_engine(c, m, v, kv_dt, NULL, name, why,
                           sizeof(why)))
        {
            gc_row(c, "tier", name, "greedy = cache off", "", "", "PASS",
                   "");
        } else {
            gc_fail(c, "tier", name, why);
        }
    }

    kvs_vocab_free(v);
    kvs_model_close(m);

    return c->dead ? -1 : 0;
}


int
gc_tier_fixture(gc_ctx_t *c, const char *part, char *path, size_t len)
{
    if (c->fixtures == NULL || c->fixtures[0] == '\0') {
        gc_row(c, part, "stories260K", "-", "", "", "SKIP",
               "KVS_FIXTURES not set");
        return 0;
    }

    snprintf(path, len, "%s/models/stories260K-f32.gguf", c->fixtures);

    if (access(path, R_OK) != 0) {
        printf("  %s stories260K: SKIP: fixture %s is absent\n", part,
               path);
        gc_row(c, part, "stories260K", "-", "", "", "SKIP",
               "fixture absent");
        return 0;
    }

    return 1;
}


int
gc_tier_run(gc_ctx_t *c)
{
    char  path[4096];

    if (!gc_tier_fixture(c, "tier", path, sizeof(path))) {
        return 0;
    }

    if (gc_tier_model(c, "stories260K, own K/V", path, -1) != 0
        || gc_tier_model(c, "stories260K, K/V f16", path, KVS_KV_F16) != 0
        || gc_tier_model(c, "stories260K, K/V int8", path, KVS_KV_INT8) != 0
        || gc_tier_model(c, "stories260K, K/V fp8", path, KVS_KV_FP8) != 0)
    {
        return -1;
    }

    return 0;
}
