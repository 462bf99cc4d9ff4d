/*
 * kvs_metrics_impl: what kvs_metrics.c (the exposition) shares with
 * kvs_metrics_engine.c (pools, adapters, tenants), kvs_metrics_tier.c
 * (the disk tier's metrics) and kvs_req_times.c (a request's hops): the
 * HELP/TYPE head, one sample line, the span between two timestamps.
 * Not for use outside src/metrics.
 */

#ifndef KVS_METRICS_IMPL_H
#define KVS_METRICS_IMPL_H

#include "kvs_metrics.h"

#define KVS_NELTS(a)  (sizeof(a) / sizeof((a)[0]))

/* *ns = b - a when both are stamped (not 0) and in order; else
 * KVS_ENOTFOUND (kvs_req_times.c) */
int kvs_req_span(uint64_t a, uint64_t b, uint64_t *ns);

/* # HELP and # TYPE of kvserve:<name><suffix> */
int kvs_metrics_head(kvs_buf_t *out, const char *name, const char *suffix,
    const char *help, const char *type);

/* kvserve:<name><suffix>{model_name="model"[,extra]} value */
int kvs_metrics_sample(kvs_buf_t *out, const char *name, const char *suffix,
    const char *model, const char *extra, const char *value);
int kvs_metrics_sample_u64(kvs_buf_t *out, const char *name,
    const char *suffix, const char *model, const char *extra, uint64_t v);

/* The engine's optional families (kvs_metrics_engine.c): KV pools, LoRA
 * adapters and tenants, for the models whose engine answered with them */
int kvs_metrics_pools(kvs_buf_t *out, const kvs_metrics_t *m,
    const kvs_metrics_gauges_t *g);
int kvs_metrics_lora(kvs_buf_t *out, const kvs_metrics_t *m,
    const kvs_metrics_gauges_t *g);
int kvs_metrics_tenants(kvs_buf_t *out, const kvs_metrics_t *m,
    const kvs_metrics_gauges_t *g);

/* The disk tier's metrics, for the models whose engine answered with a
 * tier (kvs_metrics_tier.c). */
int kvs_metrics_tier(kvs_buf_t *out, const kvs_metrics_t *m,
    const kvs_metrics_gauges_t *g);

#endif /* KVS_METRICS_IMPL_H */
