/*
 * kvs_metrics_engine: the per-model families whose figures come from the
 * engine's stats reply (kvs_metrics_gauges_t) and exist only when the
 * engine has the feature on: KV pools, LoRA adapters, tenants.  Each
 * family writes its HELP/TYPE head once, and only when some model
 * answered with it, so a scrape never shows an empty family.
 */

#include <stdio.h>
#include <string.h>

#include "kvs_metrics_impl.h"


/* The KV pools' gauges and counters, for the models whose engine
 * answered with pools on: one sample per pool="short"|"long". */
int
kvs_metrics_pools(kvs_buf_t *out, const kvs_metrics_t *m,
    const kvs_metrics_gauges_t *g)
{
    int       rc;
    char      extra[32], val[32];
    double    v;
    uint32_t  i, k, p, any;

    static const char  *pool_names[2] = { "short", "long" };

    static const struct {
        const char  *name;
        const char  *suffix;
        const char  *type;
        const char  *help;
    } defs[] = {
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

    any = 0;
    for (i = 0; g != NULL && i < m->n_models; i++) {
        any |= (uint32_t) (g[i].have && g[i].pools);
    }

    if (!any) {
        return KVS_OK;
    }

    rc = KVS_OK;

    for (k = 0; rc == KVS_OK && k < KVS_NELTS(defs); k++) {
        rc = kvs_metrics_head(out, defs[k].name, defs[k].suffix,
                              defs[k].help, defs[k].type);

        for (i = 0; rc == KVS_OK && i < m->n_models; i++) {
            if (!g[i].have || !g[i].pools) {
                continue;
            }

            for (p = 0; rc == KVS_OK && p < 2; p++) {
                switch (k) {
                case 0:
                    v = g[i].pool_max[p];
                    break;
                case 1:
                    v = g[i].pool_used[p];
                    break;
                case 2:
                    v = g[i].pool_queued[p];
                    break;
                case 3:
                    v = (double) g[i].pool_admitted[p];
                    break;
                case 4:
                    v = (double) g[i].pool_waited[p];
                    break;
                case 5:
                    v = (double) g[i].pool_wait_ms[p] / 1000.0;
                    break;
                default:
                    v = (double) g[i].pool_refused[p];
                    break;
                }

                if (k == 5) {
                    snprintf(val, sizeof(val), "%.3f", v);
                } else {
                    snprintf(val, sizeof(val), "%.0f", v);
                }

                snprintf(extra, sizeof(extra), "pool=\"%s\"",
                         pool_names[p]);
                rc = kvs_metrics_sample(out, defs[k].name, defs[k].suffix,
                                        m->models[i].name, extra, val);
            }
        }
    }

    return rc;
}


/* The LoRA adapters' gauges and counters, for the models whose engine
 * answered and serves adapters (docs/lora.md, "Paging"). */
int
kvs_metrics_lora(kvs_buf_t *out, const kvs_metrics_t *m,
    const kvs_metrics_gauges_t *g)
{
    int       rc;
    char      val[32];
    double    v;
    uint32_t  i, k, any;

    static const struct {
        const char  *name;
        const char  *suffix;
        const char  *type;
        const char  *help;
    } defs[] = {
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
    };

    any = 0;
    for (i = 0; g != NULL && i < m->n_models; i++) {
        any |= (uint32_t) (g[i].have && g[i].lora_adapters != 0);
    }

    if (!any) {
        return KVS_OK;
    }

    rc = KVS_OK;

    for (k = 0; rc == KVS_OK && k < KVS_NELTS(defs); k++) {
        rc = kvs_metrics_head(out, defs[k].name, defs[k].suffix,
                              defs[k].help, defs[k].type);

        for (i = 0; rc == KVS_OK && i < m->n_models; i++) {
            if (!g[i].have || g[i].lora_adapters == 0) {
                continue;
            }

            switch (k) {
            case 0:  v = g[i].lora_adapters; break;
            case 1:  v = g[i].lora_slots; break;
            case 2:  v = g[i].lora_resident; break;
            case 3:  v = g[i].lora_parked; break;
            case 4:  v = (double) g[i].lora_loads; break;
            case 5:  v = (double) g[i].lora_evictions; break;
            case 6:  v = (double) g[i].lora_waited; break;
            default: v = (double) g[i].lora_wait_ms / 1000.0; break;
            }

            snprintf(val, sizeof(val), k == 7 ? "%.3f" : "%.0f", v);
            rc = kvs_metrics_sample(out, defs[k].name, defs[k].suffix,
                                    m->models[i].name, NULL, val);
        }
    }

    return rc;
}


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


/* The engine's tenants, when it answered: the top ones, then the rest
 * summed when there are more. */
int
kvs_metrics_tenants(kvs_buf_t *out, const kvs_metrics_t *m,
    const kvs_metrics_gauges_t *g)
{
    int                           rc;
    char                          extra[48];
    uint64_t                      v;
    uint32_t                      i, j, k, n, any;
    const kvs_metrics_tenant_t   *t;
    const kvs_metrics_tenants_t  *tn;
    static const struct {
        const char  *name;
        const char  *suffix;
        const char  *type;
        const char  *help;
    } defs[] = {
        { "tenant_prefill_tokens", "_total", "counter",
          "Prompt tokens the engine computed for a tenant (the hash of "
          "its kvserve_limit key), since the engine first saw it." },
        { "tenant_decode_tokens", "_total", "counter",
          "Generated tokens the engine computed for a tenant, since the "
          "engine first saw it." },
        { "tenant_kv_blocks", "", "gauge",
          "KV blocks a tenant's running sequences hold." },
    };

    any = 0;
    for (i = 0; g != NULL && i < m->n_models; i++) {
        any |= (uint32_t) g[i].have;
    }

    if (!any) {
        return KVS_OK;
    }

    rc = KVS_OK;

    for (k = 0; rc == KVS_OK && k < KVS_NELTS(defs); k++) {
        rc = kvs_metrics_head(out, defs[k].name, defs[k].suffix,
                              defs[k].help, defs[k].type);

        for (i = 0; rc == KVS_OK && i < m->n_models; i++) {
            tn = &g[i].tenants;

            if (!g[i].have) {
                continue;
            }

            n = tn->n_top < KVS_METRICS_TOP_TENANTS
                ? tn->n_top : KVS_METRICS_TOP_TENANTS;

            /* the top ones, then "other" when some are not among them */
            for (j = 0; rc == KVS_OK && j <= n; j++) {
                if (j == n) {
                    if (tn->n_tenants <= n) {
                        break;
                    }
                    t = &tn->other;
                } else {
                    t = &tn->top[j];
                }

                kvs_metrics_tenant_label(extra, sizeof(extra), t,
                                         t == &tn->other);

                v = k == 0 ? t->prefill : k == 1 ? t->decode : t->kv_blocks;

                rc = kvs_metrics_sample_u64(out, defs[k].name,
                                            defs[k].suffix,
                                            m->models[i].name, extra, v);
            }
        }
    }

    return rc;
}
