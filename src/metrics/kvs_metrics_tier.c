/*
 * kvs_metrics_tier: the prefix cache's disk tier in the Prometheus text
 * (docs/prefix-cache.md, "The second tier"): hits per tier, what the
 * tier holds, blocks and bytes moved, load time, spills, drops and
 * corrupt blocks, for the models whose engine answered with a tier on.
 * Every counter is the engine's since it started.
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
      "was: the pool, or the disk tier (loaded back)." },
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
        if (rc == KVS_OK) {
            rc = kvs_metrics_sample_u64(out, kvs_metrics_tier_defs[k].name,
                                        "_total", model, "tier=\"disk\"",
                                        g->tier_hit_tokens_disk);
        }
        return rc;

    case KVS_MT_LOAD_SECONDS:
    case KVS_MT_WAIT_SECONDS:
        snprintf(val, sizeof(val), "%.6f",
                 (double) (k == KVS_MT_LOAD_SECONDS ? g->tier_load_ns
                                                    : g->tier_load_wait_ns)
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
    default:
        v = g->tier_loading;
        break;
    }

    return kvs_metrics_sample_u64(out, kvs_metrics_tier_defs[k].name,
                                  kvs_metrics_tier_defs[k].suffix, model,
                                  NULL, v);
}


int
kvs_metrics_tier(kvs_buf_t *out, const kvs_metrics_t *m,
    const kvs_metrics_gauges_t *g)
{
    int       rc;
    uint32_t  i, k, any;

    any = 0;
    for (i = 0; g != NULL && i < m->n_models; i++) {
        any |= (uint32_t) (g[i].have && g[i].tier);
    }

    if (!any) {
        return KVS_OK;
    }

    rc = KVS_OK;

    for (k = 0; rc == KVS_OK && k < KVS_MT_N; k++) {
        rc = kvs_metrics_head(out, kvs_metrics_tier_defs[k].name,
                              kvs_metrics_tier_defs[k].suffix,
                              kvs_metrics_tier_defs[k].help,
                              kvs_metrics_tier_defs[k].type);

        for (i = 0; rc == KVS_OK && i < m->n_models; i++) {
            if (g[i].have && g[i].tier) {
                rc = kvs_metrics_tier_model(out,
                                            (kvs_metrics_tier_line_t) k,
                                            m->models[i].name, &g[i]);
            }
        }
    }

    return rc;
}
