/*
 * kvs_metrics_tier: the prefix cache's lower tiers in the Prometheus
 * text (docs/prefix-cache.md, "The second tier"): hits per tier (the
 * label tier: pool, host, disk), what each tier holds, blocks and bytes
 * moved, load time, spills, drops and corrupt blocks, for the models
 * whose engine answered with a tier on (the disk tier's lines for a
 * disk tier, the host tier's for a host tier).  Every counter is the
 * engine's since it started.
 */

#include <stdio.h>

#include "base/kvs_err.h"
#include "kvs_metrics_impl.h"


/* One per line of the output, in this order. */
typedef enum {
    KVS_MT_HITS = 0,
    KVS_MT_BLOCKS,
    KVS_MT_CAPACITY,
    KVS_MT_LOADED,
    KVS_MT_LOAD_SECONDS,
    KVS_MT_READ,
    KVS_MT_WRITTEN,
    KVS_MT_SPILLED,
    KVS_MT_DROPPED,
    KVS_MT_CORRUPT,
    KVS_MT_RECOMPUTED,
    KVS_MT_WAITS,
    KVS_MT_WAIT_SECONDS,
    KVS_MT_LOADING,
    KVS_MT_H_BLOCKS,                  /* the host tier's from here on */
    KVS_MT_H_CAPACITY,
    KVS_MT_H_LOADED,
    KVS_MT_H_LOAD_SECONDS,
    KVS_MT_H_IN,
    KVS_MT_H_OUT,
    KVS_MT_H_SPILLED,
    KVS_MT_H_EVICTED,
    KVS_MT_H_COPIES,
    KVS_MT_H_COPY_WAIT_SECONDS,
    KVS_MT_H_COPY_FULL,
    KVS_MT_N
} kvs_metrics_tier_line_t;

static const struct {
    const char  *name;
    const char  *suffix;
    const char  *type;
    const char  *help;
} kvs_metrics_tier_defs[KVS_MT_N] = {
    { "prefix_cache_hit_tokens_by_tier", "_total", "counter",
      "Prompt tokens reused from the prefix cache, by where their K/V "
      "was: the pool, the host tier or the disk tier (loaded back)." },
    { "kv_tier_blocks", "", "gauge",
      "KV blocks the disk tier holds." },
    { "kv_tier_capacity_blocks", "", "gauge",
      "KV blocks the disk tier can hold (its file's size)." },
    { "kv_tier_loaded_blocks", "_total", "counter",
      "KV blocks read back from the disk tier into the pool." },
    { "kv_tier_load_seconds", "_total", "counter",
      "Time the disk tier's loader spent reading blocks (off the step "
      "loop)." },
    { "kv_tier_read_bytes", "_total", "counter",
      "Bytes read from the disk tier and verified." },
    { "kv_tier_written_bytes", "_total", "counter",
      "Bytes written to the disk tier." },
    { "kv_tier_spilled_blocks", "_total", "counter",
      "Evicted KV blocks queued for the disk tier." },
    { "kv_tier_spill_dropped_blocks", "_total", "counter",
      "Evicted KV blocks dropped because the spill queue was full." },
    { "kv_tier_corrupt_blocks", "_total", "counter",
      "Disk tier blocks that failed their checksum or were short "
      "(recomputed, never used)." },
    { "kv_tier_recomputed_blocks", "_total", "counter",
      "Blocks the disk tier held that the cost model chose to compute." },
    { "kv_tier_load_waits", "_total", "counter",
      "Requests that waited outside the batch for their blocks to load "
      "from the disk tier." },
    { "kv_tier_load_wait_seconds", "_total", "counter",
      "Their time waiting, from arrival to admission with the blocks." },
    { "kv_tier_loading_requests", "", "gauge",
      "Requests waiting for a disk tier load now." },
    { "kv_host_tier_blocks", "", "gauge",
      "KV blocks the host memory tier holds." },
    { "kv_host_tier_capacity_blocks", "", "gauge",
      "KV blocks the host memory tier can hold." },
    { "kv_host_tier_loaded_blocks", "_total", "counter",
      "KV blocks copied back from the host tier into the pool." },
    { "kv_host_tier_load_seconds", "_total", "counter",
      "Time spent copying blocks from the host tier into the pool." },
    { "kv_host_tier_in_bytes", "_total", "counter",
      "Bytes of evicted KV blocks copied into the host tier." },
    { "kv_host_tier_out_bytes", "_total", "counter",
      "Bytes copied from the host tier back into the pool." },
    { "kv_host_tier_spilled_blocks", "_total", "counter",
      "Evicted KV blocks the host tier stored." },
    { "kv_host_tier_evicted_blocks", "_total", "counter",
      "Blocks the host tier evicted for room (on to the disk tier when "
      "there is one)." },
    { "kv_host_tier_copies", "", "gauge",
      "KV blocks being copied between the pool and the host tier off "
      "the step now (a backend with asynchronous copies)." },
    { "kv_host_tier_copy_wait_seconds", "_total", "counter",
      "Time requests waited for their blocks' copies from the host "
      "tier, queued to done." },
    { "kv_host_tier_copy_full_blocks", "_total", "counter",
      "Block copies the backend refused, at its limit of copies in "
      "flight (a spill on to the disk tier, a load cut short)." },
};


static int
kvs_metrics_tier_model(kvs_buf_t *out, kvs_metrics_tier_line_t k,
    const char *model, const kvs_metrics_gauges_t *g)
{
    int       rc;
    char      val[32];
    uint64_t  v;

    switch (k) {
    case KVS_MT_HITS:
        rc = kvs_metrics_sample_u64(out, kvs_metrics_tier_defs[k].name,
                                    "_total", model, "tier=\"pool\"",
                                    g->tier_hit_tokens_pool);
        if (rc == KVS_OK && g->tier_host) {
            rc = kvs_metrics_sample_u64(out, kvs_metrics_tier_defs[k].name,
                                        "_total", model, "tier=\"host\"",
                                        g->tier_hit_tokens_host);
        }
        if (rc == KVS_OK && g->tier) {
            rc = kvs_metrics_sample_u64(out, kvs_metrics_tier_defs[k].name,
                                        "_total", model, "tier=\"disk\"",
                                        g->tier_hit_tokens_disk);
        }
        return rc;

    case KVS_MT_LOAD_SECONDS:
    case KVS_MT_WAIT_SECONDS:
    case KVS_MT_H_LOAD_SECONDS:
    case KVS_MT_H_COPY_WAIT_SECONDS:
        snprintf(val, sizeof(val), "%.6f",
                 (double) (k == KVS_MT_LOAD_SECONDS ? g->tier_load_ns
                           : k == KVS_MT_WAIT_SECONDS ? g->tier_load_wait_ns
                           : k == KVS_MT_H_LOAD_SECONDS ? g->host_load_ns
                           : g->host_copy_wait_ns)
                 / 1e9);
        return kvs_metrics_sample(out, kvs_metrics_tier_defs[k].name,
                                  kvs_metrics_tier_defs[k].suffix, model,
                                  NULL, val);

    case KVS_MT_BLOCKS:
        v = g->tier_blocks;
        break;
    case KVS_MT_CAPACITY:
        v = g->tier_capacity;
        break;
    case KVS_MT_LOADED:
        v = g->tier_loaded;
        break;
    case KVS_MT_READ:
        v = g->tier_read_bytes;
        break;
    case KVS_MT_WRITTEN:
        v = g->tier_written_bytes;
        break;
    case KVS_MT_SPILLED:
        v = g->tier_spilled;
        break;
    case KVS_MT_DROPPED:
        v = g->tier_dropped;
        break;
    case KVS_MT_CORRUPT:
        v = g->tier_corrupt;
        break;
    case KVS_MT_RECOMPUTED:
        v = g->tier_recomputed;
        break;
    case KVS_MT_WAITS:
        v = g->tier_load_waits;
        break;
    case KVS_MT_LOADING:
        v = g->tier_loading;
        break;
    case KVS_MT_H_BLOCKS:
        v = g->host_blocks;
        break;
    case KVS_MT_H_CAPACITY:
        v = g->host_capacity;
        break;
    case KVS_MT_H_LOADED:
        v = g->host_loaded;
        break;
    case KVS_MT_H_IN:
        v = g->host_in_bytes;
        break;
    case KVS_MT_H_OUT:
        v = g->host_out_bytes;
        break;
    case KVS_MT_H_SPILLED:
        v = g->host_spilled;
        break;
    case KVS_MT_H_COPIES:
        v = g->host_copies;
        break;
    case KVS_MT_H_COPY_FULL:
        v = g->host_copy_full;
        break;
    default:
        v = g->host_evicted;
        break;
    }

    return kvs_metrics_sample_u64(out, kvs_metrics_tier_defs[k].name,
                                  kvs_metrics_tier_defs[k].suffix, model,
                                  NULL, v);
}


/* 1: a disk tier, 2: a host tier (bits), 0: neither or no answer */
static uint32_t
kvs_metrics_tier_kinds(const kvs_metrics_gauges_t *g)
{
    return g->have ? (uint32_t) (g->tier != 0) | (g->tier_host ? 2 : 0) : 0;
}


int
kvs_metrics_tier(kvs_buf_t *out, const kvs_metrics_t *m,
    const kvs_metrics_gauges_t *g)
{
    int       rc;
    uint32_t  i, k, any, want;

    any = 0;
    for (i = 0; g != NULL && i < m->n_models; i++) {
        any |= kvs_metrics_tier_kinds(&g[i]);
    }

    if (!any) {
        return KVS_OK;
    }

    rc = KVS_OK;

    for (k = 0; rc == KVS_OK && k < KVS_MT_N; k++) {
        /* the hits: either tier; the rest: their own tier's */
        want = k == KVS_MT_HITS ? 3 : k >= KVS_MT_H_BLOCKS ? 2 : 1;

        if (!(any & want)) {
            continue;
        }

        rc = kvs_metrics_head(out, kvs_metrics_tier_defs[k].name,
                              kvs_metrics_tier_defs[k].suffix,
                              kvs_metrics_tier_defs[k].help,
                              kvs_metrics_tier_defs[k].type);

        for (i = 0; rc == KVS_OK && i < m->n_models; i++) {
            if (kvs_metrics_tier_kinds(&g[i]) & want) {
                rc = kvs_metrics_tier_model(out,
                                            (kvs_metrics_tier_line_t) k,
                                            m->models[i].name, &g[i]);
            }
        }
    }

    return rc;
}
