/*
 * kvs_metrics: per-request timings (the hops a request goes through, on
 * CLOCK_MONOTONIC nanoseconds) and the server's Prometheus counters and
 * histograms, as pure functions on caller memory, so that nginx keeps the
 * counters in a shared memory zone and every worker adds to the same ones
 * (docs/api.md, "Metrics and variables").
 *
 * Names, meanings and buckets are vLLM's (v1 engine) with the prefix
 * `kvserve:` instead of `vllm:`, so dashboards work with a rename; the
 * hops vLLM has no figure for (request_{body,tokenize,limit,route}_
 * time_seconds) are ours, for the triage walk (docs/triage.md).
 *
 * Invariants:
 *  - kvs_metrics_t holds no pointers (it lives in shared memory) and only
 *    64-bit counters updated with relaxed atomic adds: writers never lock
 *    and never wait;
 *  - histogram buckets are kept per bucket, not cumulated; the exposition
 *    cumulates them and writes _count as the +Inf bucket, so +Inf equals
 *    _count in every scrape even while workers are adding;
 *  - time observations are nanoseconds (exact integer bucket bounds),
 *    token observations are counts.
 */

#ifndef KVS_METRICS_H
#define KVS_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_buf.h"
#include "base/kvs_err.h"

#define KVS_METRICS_MAGIC        0x6b766d33u   /* "kvm3" */
#define KVS_METRICS_MAX_BOUNDS   32
#define KVS_METRICS_NAME_MAX     255
#define KVS_METRICS_TENANT_LABEL 12     /* bytes of a tenant's key shown */

/* ---- per-request timings ---------------------------------------------- */

/* CLOCK_MONOTONIC ns at each hop; 0: not reached (or not known). */
typedef struct {
    uint64_t  start_ns;       /* the content handler took the request */
    uint64_t  body_ns;        /* the body was read */
    uint64_t  parse_ns;       /* the JSON was parsed */
    uint64_t  tokenize_ns;    /* rendered, tokenized, SUBMIT frames built */
    uint64_t  submit_ns;      /* handed to the engine connection */
    uint64_t  recv_ns;        /* the engine decoded the SUBMIT */
    uint64_t  engine_first_ns;  /* the engine read the first token */
    uint64_t  first_ns;       /* the worker got the first token */
    uint64_t  last_ns;        /* the worker got the last token */
    uint64_t  end_ns;         /* the response was complete */
    uint64_t  itl_sum_ns;     /* sum of gaps between a choice's tokens */
    uint64_t  itl_n;          /* ... over this many tokens */
} kvs_req_times_t;

typedef enum {
    KVS_HOP_BODY = 0,         /* start -> body: the network */
    KVS_HOP_PARSE,            /* body -> parse */
    KVS_HOP_TOKENIZE,         /* parse -> tokenize */
    KVS_HOP_LIMIT,            /* tokenize -> submit: kvserve_limit's
                                 delay */
    KVS_HOP_QUEUE,            /* submit -> recv: to the engine, waiting
                                 for one if none was connected */
    KVS_HOP_PREFILL,          /* recv -> engine_first: the engine's
                                 queue and the prompt's forward */
    KVS_HOP_TTFT,             /* start -> first */
    KVS_HOP_DECODE,           /* first -> last */
    KVS_HOP_ITL,              /* itl_sum_ns / itl_n */
    KVS_HOP_TOTAL,            /* start -> end */
    KVS_HOP_N
} kvs_hop_t;

/* "body", "parse", ...: the Server-Timing names and variable stems. */
const char *kvs_hop_name(kvs_hop_t hop);

/* The hop's duration in *ns: KVS_OK, or KVS_ENOTFOUND when one of its
 * points was not reached (or they are out of order). */
int kvs_req_times_hop(const kvs_req_times_t *t, kvs_hop_t hop,
    uint64_t *ns);

/* Writes ns as milliseconds with 3 decimals ("12.345") into buf, which
 * holds at least KVS_METRICS_MS_LEN bytes; returns the length. */
#define KVS_METRICS_MS_LEN  32
size_t kvs_metrics_fmt_ms(char *buf, uint64_t ns);

/* Appends a Server-Timing value (W3C): "body;dur=0.012, parse;dur=...",
 * every hop reached, in kvs_hop_t order; nothing when none is. */
int kvs_req_times_server_timing(const kvs_req_times_t *t, kvs_buf_t *out,
    kvs_err_t *err);

/* ---- counters and histograms ----------------------------------------- */

typedef enum {
    KVS_HIST_TTFT = 0,        /* time_to_first_token_seconds */
    KVS_HIST_ITL,             /* inter_token_latency_seconds, and
                                 time_per_output_token_seconds (same
                                 observations, vLLM's older name) */
    KVS_HIST_E2E,             /* e2e_request_latency_seconds */
    KVS_HIST_QUEUE,           /* request_queue_time_seconds */
    KVS_HIST_PREFILL,         /* request_prefill_time_seconds */
    KVS_HIST_DECODE,          /* request_decode_time_seconds */
    KVS_HIST_INFERENCE,       /* request_inference_time_seconds */
    KVS_HIST_PROMPT_TOKENS,   /* request_prompt_tokens */
    KVS_HIST_GEN_TOKENS,      /* request_generation_tokens */
    KVS_HIST_PARAMS_N,        /* request_params_n: choices asked */
    KVS_HIST_PARAMS_MAX_TOKENS,   /* request_params_max_tokens: the
                                     client's max_tokens, when given */
    KVS_HIST_MAX_GEN_TOKENS,  /* request_max_num_generation_tokens: the
                                 most tokens one choice generated */
    KVS_HIST_BODY,            /* request_body_time_seconds: the network */
    KVS_HIST_TOKENIZE,        /* request_tokenize_time_seconds */
    KVS_HIST_LIMIT,           /* request_limit_time_seconds */
    KVS_HIST_ROUTE,           /* request_route_time_seconds: a gateway's
                                 choice of a host, once tokenized */
    KVS_HIST_N
} kvs_hist_id_t;

typedef enum {
    KVS_REASON_STOP = 0,
    KVS_REASON_LENGTH,
    KVS_REASON_ABORT,         /* the client went away */
    KVS_REASON_ERROR,         /* the engine failed or was lost */
    KVS_REASON_N
} kvs_reason_t;

const char *kvs_reason_name(kvs_reason_t r);   /* "stop"; "?" */

typedef struct {
    uint64_t  bucket[KVS_METRICS_MAX_BOUNDS + 1];  /* [n_bounds + 1]: v <=
                                                      bound[i] and above
                                                      the previous; the
                                                      last: above all */
    uint64_t  sum;            /* ns for times, tokens for counts */
} kvs_hist_t;

typedef struct {
    char        name[KVS_METRICS_NAME_MAX + 1];   /* model_name label */
    uint32_t    max_model_len;
    uint32_t    n_tok_bounds;                     /* 1-2-5 series up to
                                                     max_model_len */
    uint64_t    tok_bounds[KVS_METRICS_MAX_BOUNDS];
    uint64_t    prompt_tokens;
    uint64_t    generation_tokens;
    uint64_t    preemptions;
    uint64_t    prefix_cache_queries;             /* prompt tokens looked
                                                     up in the prefix
                                                     cache */
    uint64_t    prefix_cache_hits;                /* of those, reused */
    uint64_t    route_pool_won;                   /* a gateway's long-pool
                                                     reservations made, */
    uint64_t    route_pool_lost;                  /*   refused (no room), */
    uint64_t    route_pool_expired;               /*   found expired */
    uint64_t    success[KVS_REASON_N];
    kvs_hist_t  hist[KVS_HIST_N];
} kvs_metrics_model_t;

typedef struct {
    uint32_t             magic;
    uint32_t             n_models;
    kvs_metrics_model_t  models[];   /* [n_models] */
} kvs_metrics_t;

/* A gateway's long-pool reservations (docs/pools.md "Across hosts"):
 * won and lost (0 or 1 each), and the expired ones a take removed. */
void kvs_metrics_route_pool(kvs_metrics_t *m, uint32_t model,
    uint64_t won, uint64_t lost, uint64_t expired);

/* A tenant of the engine's fair share, as the exposition shows it; the
 * glue fills it from what the engine reported. */
typedef struct {
    const char  *key;         /* [key_len], borrowed for the call to
                                 kvs_metrics_write(); the label shows its
                                 first KVS_METRICS_TENANT_LABEL bytes */
    size_t       key_len;     /* 0: the empty key */
    uint64_t     prefill;     /* tokens computed for it since the engine */
    uint64_t     decode;      /* first saw it */
    uint32_t     kv_blocks;   /* held by its running sequences */
} kvs_metrics_tenant_t;

#define KVS_METRICS_TOP_TENANTS  8

typedef struct {
    kvs_metrics_tenant_t  top[KVS_METRICS_TOP_TENANTS];  /* [n_top],
                                                         served most
                                                         first */
    uint32_t              n_top;
    kvs_metrics_tenant_t  other;      /* the rest summed */
    uint32_t              n_tenants;  /* the engine knows: "other" is
                                         shown when it exceeds n_top */
} kvs_metrics_tenants_t;

/* iteration_tokens_total's bounds: tokens per engine step, 1, 8, 16,
 * 32, ... 16384; the engine keeps the same buckets
 * (KVS_ENGINE_ITER_BOUNDS, checked by the glue that copies them) */
#define KVS_METRICS_ITER_BOUNDS  13

#define KVS_METRICS_AVAIL_UNKNOWN  0   /* left out */
#define KVS_METRICS_AVAIL_DOWN     1
#define KVS_METRICS_AVAIL_UP       2

/* What the engine reports at scrape time, per model. */
typedef struct {
    int       available;      /* KVS_METRICS_AVAIL_*: whether its engine
                                 serves, as the scraped worker sees it;
                                 written for every model, engine
                                 answering or not */
    int       have;           /* 0: the engine did not answer: left out */
    uint32_t  running;
    uint32_t  waiting;
    uint32_t  kv_blocks;
    uint32_t  kv_used;
    uint64_t  cache_evicted_blocks;   /* the engine's count since it
                                         started (a counter) */
    kvs_metrics_tenants_t  tenants;   /* the fair share's top tenants and
                                         the rest (keys: nginx's hashes) */
    uint64_t  iter_tokens[KVS_METRICS_ITER_BOUNDS + 1];  /* when have:
                                         engine steps by tokens computed,
                                         per bucket (the last: above
                                         all), since the engine started */
    uint64_t  iter_tokens_sum;

    /* KV pools (docs/pools.md), when have and pools: [0] short, [1]
     * long; the counters are the engine's since it started */
    int       pools;
    uint32_t  pool_max[2];            /* blocks it may hold */
    uint32_t  pool_used[2];           /* held by its running requests */
    uint32_t  pool_queued[2];         /* waiting now */
    uint64_t  pool_admitted[2];
    uint64_t  pool_waited[2];         /* admitted after waiting */
    uint64_t  pool_wait_ms[2];        /* their time waiting */
    uint64_t  pool_refused[2];        /* not admitted within the queue
                                         timeout (503) */

    /* the disk tier (kvs_metrics_tier.c), when have and tier; the
     * counters are the engine's since it started; the hits by tier also
     * with tier_host alone */
    int       tier;
    uint64_t  tier_hit_tokens_pool;   /* prompt tokens reused from the
                                         pool */
    uint64_t  tier_hit_tokens_disk;   /* ... loaded from the disk tier */
    uint64_t  tier_blocks;            /* held now */
    uint64_t  tier_capacity;          /* at most */
    uint64_t  tier_loaded;            /* blocks read back */
    uint64_t  tier_load_ns;
    uint64_t  tier_read_bytes;
    uint64_t  tier_written_bytes;
    uint64_t  tier_spilled;           /* blocks queued */
    uint64_t  tier_dropped;           /* the queue was full */
    uint64_t  tier_corrupt;
    uint64_t  tier_recomputed;        /* held, computed (cost model) */
    uint64_t  tier_load_waits;        /* requests that waited for a load */
    uint64_t  tier_load_wait_ns;      /* their time waiting */
    uint64_t  tier_loading;           /* waiting now */
    /* the host tier (kvs_metrics_tier.c), when have and tier_host */
    int       tier_host;
    uint64_t  tier_hit_tokens_host;   /* prompt tokens copied in from
                                         the host tier */
    uint64_t  host_blocks;            /* held now */
    uint64_t  host_capacity;          /* at most */
    uint64_t  host_loaded;            /* blocks copied into the pool */
    uint64_t  host_load_ns;
    uint64_t  host_in_bytes;          /* copied into the tier */
    uint64_t  host_out_bytes;         /* copied out into the pool */
    uint64_t  host_spilled;           /* evicted pool blocks stored */
    uint64_t  host_evicted;           /* taken out for room (on to the
                                         disk tier if any) */
    uint64_t  host_copies;            /* blocks being copied off the
                                         step now */
    uint64_t  host_copy_wait_ns;      /* requests' wait for them */
    uint64_t  host_copy_full;         /* copies the backend refused */
    /* LoRA adapters (docs/lora.md), when have and lora_adapters: now,
     * and the engine's counters since it started */
    uint32_t  lora_adapters;          /* served */
    uint32_t  lora_slots;             /* resident at most */
    uint32_t  lora_resident;
    uint32_t  lora_parked;            /* requests waiting for theirs */
    uint64_t  lora_loads;
    uint64_t  lora_evictions;
    uint64_t  lora_waited;
    uint64_t  lora_wait_ms;
    uint64_t  lora_load_ns;           /* the loader's time */
    uint64_t  lora_install_ns;        /* the step loop's, total */
    uint64_t  lora_install_max_ns;    /* ... the longest once */

    /* cache_config_info, from the configuration: written for every model
     * whose block_size is not 0, engine answering or not */
    uint32_t     block_size;          /* tokens per KV block */
    uint32_t     num_blocks;          /* of its KV cache */
    const char  *cache_dtype;         /* "f32", "f16", ...; borrowed */
    int          prefix_caching;
} kvs_metrics_gauges_t;

/* Bytes kvs_metrics_init() needs for n models. */
size_t kvs_metrics_size(uint32_t n_models);

/* Lays m out in size bytes (zeroed counters); names[i] of at most
 * KVS_METRICS_NAME_MAX bytes, max_model_len[i] >= 1. */
int kvs_metrics_init(kvs_metrics_t *m, size_t size, uint32_t n_models,
    const char *const *names, const uint32_t *max_model_len,
    kvs_err_t *err);

/* 1 when m was laid out by kvs_metrics_init() with these models (a
 * reload may keep its counters), else 0. */
int kvs_metrics_same(const kvs_metrics_t *m, size_t size, uint32_t n_models,
    const char *const *names, const uint32_t *max_model_len);

/* n observations of v (ns for times, a count for tokens); out-of-range
 * models and ids are ignored. */
void kvs_metrics_observe(kvs_metrics_t *m, uint32_t model,
    kvs_hist_id_t h, uint64_t v, uint64_t n);

/* One request that ended: its tokens, preemptions, finish reason and
 * the per-request histograms that t reached. */
void kvs_metrics_request(kvs_metrics_t *m, uint32_t model,
    const kvs_req_times_t *t, uint64_t prompt_tokens,
    uint64_t generation_tokens, uint64_t preemptions, kvs_reason_t reason);

/* A worker-side hop of t that just ended: KVS_HOP_BODY, _TOKENIZE or
 * _LIMIT into its histogram (request_body_time_seconds ...), for every
 * request that reaches the hop's end, refused afterwards or not; other
 * hops, and hops not reached, are ignored. */
void kvs_metrics_hop(kvs_metrics_t *m, uint32_t model,
    const kvs_req_times_t *t, kvs_hop_t hop);

/* One request's prefix cache lookup: queries prompt tokens looked up,
 * hits of them reused (vLLM's prefix_cache_queries/_hits, in tokens). */
void kvs_metrics_prefix_cache(kvs_metrics_t *m, uint32_t model,
    uint64_t queries, uint64_t hits);

/* Appends the Prometheus text exposition (format 0.0.4) of m, with the
 * engine's gauges g[n_models] when g is not NULL, its tenants among them:
 * per model, tenant_prefill_tokens_total and tenant_decode_tokens_total
 * (counters while the engine knows the tenant) and tenant_kv_blocks,
 * labelled tenant="<the key's first 12 bytes>", "none" (the empty key) or
 * "other" (the rest, when there are more). */
int kvs_metrics_write(const kvs_metrics_t *m, const kvs_metrics_gauges_t *g,
    kvs_buf_t *out, kvs_err_t *err);

#endif /* KVS_METRICS_H */
