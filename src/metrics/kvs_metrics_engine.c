/*
 * kvs_metrics_engine: the per-model families whose figures come from the
 * engine's stats reply (kvs_metrics_gauges_t) and exist only when the
 * engine has the feature on: KV pools, LoRA adapters, tenants.  One
 * writer (kvs_metrics_family) writes them all: each family's HELP/TYPE
 * head once, and only when some model has the feature, so a scrape never
 * shows an empty family; then each such model's rows, in model order.
 */

#include <stdio.h>
#include <string.h>

#include "kvs_metrics_impl.h"


/* One family: kvserve:<name><suffix>, its type and help. */
typedef struct {
    const char  *name;
    const char  *suffix;
    const char  *type;
    const char  *help;
} kvs_metrics_def_t;

/* Whether the model's engine answered with the feature on. */
typedef int (*kvs_metrics_has_pt)(const kvs_metrics_gauges_t *g);

/* Row r of family k for one model: fills its extra labels ("" for none)
 * and its value; 0 when the model has no row r (rows end at the first). */
typedef int (*kvs_metrics_row_pt)(const kvs_metrics_gauges_t *g, uint32_t k,
    uint32_t r, char *extra, size_t extra_size, char *val, size_t val_size);


static int
kvs_metrics_family(kvs_buf_t *out, const kvs_metrics_t *m,
    const kvs_metrics_gauges_t *g, const kvs_metrics_def_t *defs,
    uint32_t n_defs, kvs_metrics_has_pt has, kvs_metrics_row_pt row)
{
    int       rc;
    char      extra[48], val[32];
    uint32_t  i, k, r, any;

    any = 0;
    for (i = 0; g != NULL && i < m->n_models; i++) {
        any |= (uint32_t) (has(&g[i]) != 0);
    }

    if (!any) {
        return KVS_OK;
    }

    rc = KVS_OK;

    for (k = 0; rc == KVS_OK && k < n_defs; k++) {
        rc = kvs_metrics_head(out, defs[k].name, defs[k].suffix,
                              defs[k].help, defs[k].type);

        for (i = 0; rc == KVS_OK && i < m->n_models; i++) {
            if (!has(&g[i])) {
                continue;
            }

            for (r = 0; rc == KVS_OK; r++) {
                extra[0] = '\0';

                if (!row(&g[i], k, r, extra, sizeof(extra), val,
                         sizeof(val)))
                {
                    break;
                }

                rc = kvs_metrics_sample(out, defs[k].name, defs[k].suffix,
                                        m->models[i].name,
                                        extra[0] != '\0' ? extra : NULL,
                                        val);
            }
        }
    }

    return rc;
}


/* ---- KV pools: one row per pool="short"|"long" ------------------------ */

static const kvs_metrics_def_t  kvs_metrics_pool_defs[] = {
    { "kv_pool_blocks_max", "", "gauge",
      "KV blocks the pool's requests may hold." },
    { "kv_pool_blocks_used", "", "gauge",
      "KV blocks held by the pool's running requests." },
    { "kv_pool_queued", "", "gauge",
      "Requests of the pool waiting to be admitted." },
    { "kv_pool_admitted", "_total", "counter",
      "Requests the pool admitted since the engine started." },
    { "kv_pool_waited", "_total", "counter",
      "Of those, requests admitted after waiting in the queue." },
    { "kv_pool_wait_seconds", "_total", "counter",
      "Their time waiting in the queue." },
    { "kv_pool_refused", "_total", "counter",
      "Requests not admitted within kvserve_queue_timeout (503)." },
};


static int
kvs_metrics_pools_has(const kvs_metrics_gauges_t *g)
{
    return g->have && g->pools;
}


static int
kvs_metrics_pools_row(const kvs_metrics_gauges_t *g, uint32_t k,
    uint32_t r, char *extra, size_t extra_size, char *val, size_t val_size)
{
    double  v;

    static const char  *pool_names[2] = { "short", "long" };

    if (r >= 2) {
        return 0;
    }

    switch (k) {
    case 0:  v = g->pool_max[r]; break;
    case 1:  v = g->pool_used[r]; break;
    case 2:  v = g->pool_queued[r]; break;
    case 3:  v = (double) g->pool_admitted[r]; break;
    case 4:  v = (double) g->pool_waited[r]; break;
    case 5:  v = (double) g->pool_wait_ms[r] / 1000.0; break;
    default: v = (double) g->pool_refused[r]; break;
    }

    snprintf(val, val_size, k == 5 ? "%.3f" : "%.0f", v);
    snprintf(extra, extra_size, "pool=\"%s\"", pool_names[r]);

    return 1;
}


/* The KV pools' gauges and counters, for the models whose engine
 * answered with pools on. */
int
kvs_metrics_pools(kvs_buf_t *out, const kvs_metrics_t *m,
    const kvs_metrics_gauges_t *g)
{
    return kvs_metrics_family(out, m, g, kvs_metrics_pool_defs,
                              KVS_NELTS(kvs_metrics_pool_defs),
                              kvs_metrics_pools_has, kvs_metrics_pools_row);
}


/* ---- LoRA adapters: one row per model --------------------------------- */

static const kvs_metrics_def_t  kvs_metrics_lora_defs[] = {
    { "lora_adapters", "", "gauge", "LoRA adapters the model serves." },
    { "lora_slots", "", "gauge",
      "LoRA adapters resident at most (kvserve_lora_slots)." },
    { "lora_resident", "", "gauge", "LoRA adapters resident now." },
    { "lora_waiting", "", "gauge",
      "Requests waiting for their adapter to be loaded." },
    { "lora_loads", "_total", "counter",
      "Adapters loaded since the engine started (not at its start)." },
    { "lora_evictions", "_total", "counter",
      "Adapters unloaded to make room for another." },
    { "lora_waited", "_total", "counter",
      "Requests that waited for their adapter to be loaded." },
    { "lora_wait_seconds", "_total", "counter",
      "Their time waiting for it." },
    { "lora_load_seconds", "_total", "counter",
      "Time the adapters' loader spent reading and packing adapters "
      "(off the step loop)." },
    { "lora_install_seconds", "_total", "counter",
      "Time the step loop spent putting adapters into slots and taking "
      "them out." },
    { "lora_install_max_seconds", "", "gauge",
      "The longest single install or eviction on the step loop since "
      "the engine started." },
};


static int
kvs_metrics_lora_has(const kvs_metrics_gauges_t *g)
{
    return g->have && g->lora_adapters != 0;
}


static int
kvs_metrics_lora_row(const kvs_metrics_gauges_t *g, uint32_t k, uint32_t r,
    char *extra, size_t extra_size, char *val, size_t val_size)
{
    double       v;
    const char  *fmt;

    if (r != 0) {
        return 0;
    }

    /* counts as integers; the wait in ms as seconds; the load times in
     * ns to the ns (an install, a pointer swap on the CPU, takes well
     * under a microsecond) */
    fmt = k < 7 ? "%.0f" : k == 7 ? "%.3f" : "%.9f";

    switch (k) {
    case 0:  v = g->lora_adapters; break;
    case 1:  v = g->lora_slots; break;
    case 2:  v = g->lora_resident; break;
    case 3:  v = g->lora_parked; break;
    case 4:  v = (double) g->lora_loads; break;
    case 5:  v = (double) g->lora_evictions; break;
    case 6:  v = (double) g->lora_waited; break;
    case 7:  v = (double) g->lora_wait_ms / 1e3; break;
    case 8:  v = (double) g->lora_load_ns / 1e9; break;
    case 9:  v = (double) g->lora_install_ns / 1e9; break;
    default: v = (double) g->lora_install_max_ns / 1e9; break;
    }

    snprintf(val, val_size, fmt, v);

    return 1;
}


/* The LoRA adapters' gauges and counters, for the models whose engine
 * answered and serves adapters (docs/lora.md, "Paging"). */
int
kvs_metrics_lora(kvs_buf_t *out, const kvs_metrics_t *m,
    const kvs_metrics_gauges_t *g)
{
    return kvs_metrics_family(out, m, g, kvs_metrics_lora_defs,
                              KVS_NELTS(kvs_metrics_lora_defs),
                              kvs_metrics_lora_has, kvs_metrics_lora_row);
}


/* ---- tenants: the top ones, then "other" ------------------------------ */

static const kvs_metrics_def_t  kvs_metrics_tenant_defs[] = {
    { "tenant_prefill_tokens", "_total", "counter",
      "Prompt tokens the engine computed for a tenant (the hash of "
      "its kvserve_limit key), since the engine first saw it." },
    { "tenant_decode_tokens", "_total", "counter",
      "Generated tokens the engine computed for a tenant, since the "
      "engine first saw it." },
    { "tenant_kv_blocks", "", "gauge",
      "KV blocks a tenant's running sequences hold." },
};


/* tenant="..." of t: its key's first KVS_METRICS_TENANT_LABEL bytes
 * (nginx's keys are hex digits; any other byte becomes '_', so a label
 * never needs escaping), "none" for the empty key, or "other". */
static void
kvs_metrics_tenant_label(char *buf, size_t size,
    const kvs_metrics_tenant_t *t, int other)
{
    size_t  i, n;
    char    c, label[KVS_METRICS_TENANT_LABEL + 1];

    n = t->key_len < KVS_METRICS_TENANT_LABEL ? t->key_len
                                              : KVS_METRICS_TENANT_LABEL;

    for (i = 0; i < n; i++) {
        c = t->key[i];
        label[i] = ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')
                    || (c >= 'A' && c <= 'Z') || c == '-' || c == '.')
                   ? c : '_';
    }

    label[n] = '\0';

    snprintf(buf, size, "tenant=\"%s\"",
             other ? "other" : n == 0 ? "none" : label);
}


static int
kvs_metrics_tenants_has(const kvs_metrics_gauges_t *g)
{
    return g->have;
}


/* Row r: the r-th top tenant, then "other" when some are not among
 * them. */
static int
kvs_metrics_tenants_row(const kvs_metrics_gauges_t *g, uint32_t k,
    uint32_t r, char *extra, size_t extra_size, char *val, size_t val_size)
{
    uint32_t                      n;
    const kvs_metrics_tenant_t   *t;
    const kvs_metrics_tenants_t  *tn;

    tn = &g->tenants;
    n = tn->n_top < KVS_METRICS_TOP_TENANTS
        ? tn->n_top : KVS_METRICS_TOP_TENANTS;

    if (r < n) {
        t = &tn->top[r];
    } else if (r == n && tn->n_tenants > n) {
        t = &tn->other;
    } else {
        return 0;
    }

    kvs_metrics_tenant_label(extra, extra_size, t, t == &tn->other);

    snprintf(val, val_size, "%llu", (unsigned long long)
             (k == 0 ? t->prefill : k == 1 ? t->decode : t->kv_blocks));

    return 1;
}


/* The engine's tenants, when it answered. */
int
kvs_metrics_tenants(kvs_buf_t *out, const kvs_metrics_t *m,
    const kvs_metrics_gauges_t *g)
{
    return kvs_metrics_family(out, m, g, kvs_metrics_tenant_defs,
                              KVS_NELTS(kvs_metrics_tenant_defs),
                              kvs_metrics_tenants_has,
                              kvs_metrics_tenants_row);
}
