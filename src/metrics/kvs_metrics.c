/*
 * kvs_metrics: the Prometheus counters and histograms kept in caller
 * (shared) memory, and their exposition (the per-request hops and
 * Server-Timing are kvs_req_times.c's; the engine's optional families
 * kvs_metrics_engine.c's and kvs_metrics_tier.c's).
 *
 * Invariants: writers only ever add (relaxed 64-bit atomics), so any
 * number of processes update one kvs_metrics_t without a lock; the
 * exposition reads each bucket once and derives _count from the buckets
 * it read, so the +Inf bucket always equals _count.  Bucket bounds are
 * vLLM's (vllm/v1/metrics/loggers.py); their `le` labels are written as
 * Python's prometheus_client writes them ("0.001", "1.0"), so the series
 * are the same strings a vLLM dashboard selects.
 */

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kvs_metrics_impl.h"


/* ---- the metric families ---------------------------------------------- */

static const double  kvs_ttft_bounds[] = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0
};

static const double  kvs_itl_bounds[] = {
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0
};

static const double  kvs_latency_bounds[] = {
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
    50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0
};

/* the worker's own hops (not vLLM's): 100 us ... 60 s */
static const double  kvs_hop_bounds[] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0
};

/* vLLM's request_params_n buckets */
static const double  kvs_n_bounds[] = {
    1, 2, 5, 10, 20
};

/* iteration_tokens_total: tokens per engine step, the engine's buckets
 * (KVS_ENGINE_ITER_BOUNDS, 1 ... 16384) */
static const double  kvs_iter_bounds[KVS_METRICS_ITER_BOUNDS] = {
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384
};


typedef struct {
    const char    *name;      /* after "kvserve:" */
    const char    *help;
    kvs_hist_id_t  id;
    const double  *bounds;    /* seconds, or counts; NULL: the model's
                                 token bounds */
    unsigned       n_bounds;
    unsigned       counts;    /* bounds are counts, not seconds */
} kvs_hist_def_t;

static const kvs_hist_def_t  kvs_hist_defs[] = {
    { "time_to_first_token_seconds",
      "Histogram of time to first token in seconds.",
      KVS_HIST_TTFT, kvs_ttft_bounds, KVS_NELTS(kvs_ttft_bounds), 0 },
    { "inter_token_latency_seconds",
      "Histogram of inter-token latency in seconds.",
      KVS_HIST_ITL, kvs_itl_bounds, KVS_NELTS(kvs_itl_bounds), 0 },
    { "time_per_output_token_seconds",
      "Histogram of time per output token in seconds (the same "
      "observations as inter_token_latency_seconds; vLLM's older name).",
      KVS_HIST_ITL, kvs_itl_bounds, KVS_NELTS(kvs_itl_bounds), 0 },
    { "e2e_request_latency_seconds",
      "Histogram of e2e request latency in seconds.",
      KVS_HIST_E2E, kvs_latency_bounds, KVS_NELTS(kvs_latency_bounds), 0 },
    { "request_queue_time_seconds",
      "Histogram of time from the worker handing the request over to the "
      "engine process receiving it, in seconds.",
      KVS_HIST_QUEUE, kvs_latency_bounds,
      KVS_NELTS(kvs_latency_bounds), 0 },
    { "request_prefill_time_seconds",
      "Histogram of time from the engine receiving the request to its "
      "first token, in seconds.",
      KVS_HIST_PREFILL, kvs_latency_bounds,
      KVS_NELTS(kvs_latency_bounds), 0 },
    { "request_decode_time_seconds",
      "Histogram of time from the first token to the last, in seconds.",
      KVS_HIST_DECODE, kvs_latency_bounds,
      KVS_NELTS(kvs_latency_bounds), 0 },
    { "request_inference_time_seconds",
      "Histogram of time from the engine receiving the request to its "
      "last token, in seconds.",
      KVS_HIST_INFERENCE, kvs_latency_bounds,
      KVS_NELTS(kvs_latency_bounds), 0 },
    { "request_prompt_tokens",
      "Number of prefill tokens processed.",
      KVS_HIST_PROMPT_TOKENS, NULL, 0, 0 },
    { "request_generation_tokens",
      "Number of generation tokens processed.",
      KVS_HIST_GEN_TOKENS, NULL, 0, 0 },
    { "request_params_n",
      "Histogram of the n request parameter.",
      KVS_HIST_PARAMS_N, kvs_n_bounds, KVS_NELTS(kvs_n_bounds), 1 },
    { "request_params_max_tokens",
      "Histogram of the max_tokens request parameter.",
      KVS_HIST_PARAMS_MAX_TOKENS, NULL, 0, 0 },
    { "request_max_num_generation_tokens",
      "Histogram of maximum number of requested generation tokens.",
      KVS_HIST_MAX_GEN_TOKENS, NULL, 0, 0 },
    { "request_body_time_seconds",
      "Histogram of time from the content handler to the request body "
      "read (the network), in seconds.",
      KVS_HIST_BODY, kvs_hop_bounds, KVS_NELTS(kvs_hop_bounds), 0 },
    { "request_tokenize_time_seconds",
      "Histogram of time from the body parsed to the prompt tokenized, "
      "the thread pool's wait included, in seconds.",
      KVS_HIST_TOKENIZE, kvs_hop_bounds, KVS_NELTS(kvs_hop_bounds), 0 },
    { "request_limit_time_seconds",
      "Histogram of time from the prompt tokenized to the request handed "
      "to the engine (kvserve_limit's delay), in seconds.",
      KVS_HIST_LIMIT, kvs_hop_bounds, KVS_NELTS(kvs_hop_bounds), 0 },
    { "request_route_time_seconds",
      "Histogram of time a gateway's kvserve_route took to choose a host "
      "once the prompt was tokenized (the prefix lookup), in seconds.",
      KVS_HIST_ROUTE, kvs_hop_bounds, KVS_NELTS(kvs_hop_bounds), 0 },
};

/* the per-model counters, in exposition order (after "kvserve:", before
 * "_total") */
typedef struct {
    const char    *name;
    const char    *help;
    size_t         offset;    /* of the uint64_t in kvs_metrics_model_t */
} kvs_counter_def_t;

static const kvs_counter_def_t  kvs_counter_defs[] = {
    { "prompt_tokens", "Number of prefill tokens processed.",
      offsetof(kvs_metrics_model_t, prompt_tokens) },
    { "generation_tokens", "Number of generation tokens processed.",
      offsetof(kvs_metrics_model_t, generation_tokens) },
    { "num_preemptions",
      "Cumulative number of preemption from the engine.",
      offsetof(kvs_metrics_model_t, preemptions) },
    { "prefix_cache_queries",
      "Prefix cache queries, in terms of number of queried tokens.",
      offsetof(kvs_metrics_model_t, prefix_cache_queries) },
    { "prefix_cache_hits",
      "Prefix cache hits, in terms of number of cached tokens.",
      offsetof(kvs_metrics_model_t, prefix_cache_hits) },
    { "route_pool_reservations_won",
      "Long KV pool reservations a gateway made in Redis.",
      offsetof(kvs_metrics_model_t, route_pool_won) },
    { "route_pool_reservations_lost",
      "Long KV pool reservations a gateway was refused: no room left.",
      offsetof(kvs_metrics_model_t, route_pool_lost) },
    { "route_pool_reservations_expired",
      "Unreleased long KV pool reservations a gateway found expired.",
      offsetof(kvs_metrics_model_t, route_pool_expired) },
};

static const char  *kvs_reason_names[KVS_REASON_N] = {
    "stop", "length", "abort", "error"
};


const char *
kvs_reason_name(kvs_reason_t r)
{
    return (unsigned) r < KVS_REASON_N ? kvs_reason_names[r] : "?";
}


/* The definition that observations of id go to (the first listed). */
static const kvs_hist_def_t *
kvs_hist_def(kvs_hist_id_t id)
{
    size_t  i;

    for (i = 0; i < KVS_NELTS(kvs_hist_defs); i++) {
        if (kvs_hist_defs[i].id == id) {
            return &kvs_hist_defs[i];
        }
    }

    return NULL;
}


static uint64_t
kvs_seconds_ns(double s)
{
    return (uint64_t) llround(s * 1e9);
}


/* ---- layout ----------------------------------------------------------- */

size_t
kvs_metrics_size(uint32_t n_models)
{
    return sizeof(kvs_metrics_t)
           + (size_t) n_models * sizeof(kvs_metrics_model_t);
}


/* vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... <= max. */
static uint32_t
kvs_metrics_tok_bounds(uint64_t *b, uint32_t max)
{
    uint32_t  n;
    uint64_t  decade, v;
    unsigned  k;
    static const unsigned  mant[3] = { 1, 2, 5 };

    n = 0;

    for (decade = 1; n < KVS_METRICS_MAX_BOUNDS; decade *= 10) {
        for (k = 0; k < 3; k++) {
            v = mant[k] * decade;
            if (v > max || n == KVS_METRICS_MAX_BOUNDS) {
                return n;
            }
            b[n++] = v;
        }
    }

    return n;
}


int
kvs_metrics_init(kvs_metrics_t *m, size_t size, uint32_t n_models,
    const char *const *names, const uint32_t *max_model_len,
    kvs_err_t *err)
{
    size_t                len;
    uint32_t              i;
    kvs_metrics_model_t  *mm;

    if (size < kvs_metrics_size(n_models)) {
        return kvs_err_set(err, KVS_EINVAL, "metrics: %zu bytes cannot "
                           "hold %u models", size, (unsigned) n_models);
    }

    for (i = 0; i < n_models; i++) {
        len = strlen(names[i]);
        if (len == 0 || len > KVS_METRICS_NAME_MAX) {
            return kvs_err_set(err, KVS_EINVAL, "metrics: model name of "
                               "%zu bytes", len);
        }
        if (max_model_len[i] == 0) {
            return kvs_err_set(err, KVS_EINVAL, "metrics: model \"%s\" "
                               "has no context length", names[i]);
        }
    }

    memset(m, 0, kvs_metrics_size(n_models));
    m->n_models = n_models;

    for (i = 0; i < n_models; i++) {
        mm = &m->models[i];
        memcpy(mm->name, names[i], strlen(names[i]));
        mm->max_model_len = max_model_len[i];
        mm->n_tok_bounds = kvs_metrics_tok_bounds(mm->tok_bounds,
                                                  max_model_len[i]);
    }

    m->magic = KVS_METRICS_MAGIC;

    return KVS_OK;
}


int
kvs_metrics_same(const kvs_metrics_t *m, size_t size, uint32_t n_models,
    const char *const *names, const uint32_t *max_model_len)
{
    uint32_t  i;

    if (size < kvs_metrics_size(n_models) || m->magic != KVS_METRICS_MAGIC
        || m->n_models != n_models)
    {
        return 0;
    }

    for (i = 0; i < n_models; i++) {
        if (strcmp(m->models[i].name, names[i]) != 0
            || m->models[i].max_model_len != max_model_len[i])
        {
            return 0;
        }
    }

    return 1;
}


/* ---- writers ---------------------------------------------------------- */

static void
kvs_metrics_add(uint64_t *p, uint64_t v)
{
    __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}


static uint64_t
kvs_metrics_load(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}


void
kvs_metrics_observe(kvs_metrics_t *m, uint32_t model, kvs_hist_id_t h,
    uint64_t v, uint64_t n)
{
    unsigned               i;
    kvs_hist_t            *hist;
    const kvs_hist_def_t  *def;
    kvs_metrics_model_t   *mm;

    if (m == NULL || model >= m->n_models || (unsigned) h >= KVS_HIST_N
        || n == 0)
    {
        return;
    }

    mm = &m->models[model];
    hist = &mm->hist[h];
    def = kvs_hist_def(h);

    if (def->bounds != NULL) {
        for (i = 0; i < def->n_bounds; i++) {
            if (v <= (def->counts ? (uint64_t) def->bounds[i]
                                  : kvs_seconds_ns(def->bounds[i])))
            {
                break;
            }
        }

    } else {
        for (i = 0; i < mm->n_tok_bounds; i++) {
            if (v <= mm->tok_bounds[i]) {
                break;
            }
        }
    }

    kvs_metrics_add(&hist->bucket[i], n);
    kvs_metrics_add(&hist->sum, v * n);
}


void
kvs_metrics_hop(kvs_metrics_t *m, uint32_t model, const kvs_req_times_t *t,
    kvs_hop_t hop)
{
    uint64_t       ns;
    kvs_hist_id_t  h;

    switch (hop) {
    case KVS_HOP_BODY:
        h = KVS_HIST_BODY;
        break;
    case KVS_HOP_TOKENIZE:
        h = KVS_HIST_TOKENIZE;
        break;
    case KVS_HOP_LIMIT:
        h = KVS_HIST_LIMIT;
        break;
    default:
        return;
    }

    if (kvs_req_times_hop(t, hop, &ns) == KVS_OK) {
        kvs_metrics_observe(m, model, h, ns, 1);
    }
}


void
kvs_metrics_prefix_cache(kvs_metrics_t *m, uint32_t model, uint64_t queries,
    uint64_t hits)
{
    if (m == NULL || model >= m->n_models) {
        return;
    }

    kvs_metrics_add(&m->models[model].prefix_cache_queries, queries);
    kvs_metrics_add(&m->models[model].prefix_cache_hits, hits);
}


void
kvs_metrics_route_pool(kvs_metrics_t *m, uint32_t model, uint64_t won,
    uint64_t lost, uint64_t expired)
{
    kvs_metrics_model_t  *mm;

    if (m == NULL || model >= m->n_models) {
        return;
    }

    mm = &m->models[model];

    kvs_metrics_add(&mm->route_pool_won, won);
    kvs_metrics_add(&mm->route_pool_lost, lost);
    kvs_metrics_add(&mm->route_pool_expired, expired);
}


void
kvs_metrics_request(kvs_metrics_t *m, uint32_t model,
    const kvs_req_times_t *t, uint64_t prompt_tokens,
    uint64_t generation_tokens, uint64_t preemptions, kvs_reason_t reason)
{
    uint64_t              ns;
    kvs_metrics_model_t  *mm;

    if (m == NULL || model >= m->n_models) {
        return;
    }

    mm = &m->models[model];

    kvs_metrics_add(&mm->prompt_tokens, prompt_tokens);
    kvs_metrics_add(&mm->generation_tokens, generation_tokens);
    kvs_metrics_add(&mm->preemptions, preemptions);

    if ((unsigned) reason < KVS_REASON_N) {
        kvs_metrics_add(&mm->success[reason], 1);
    }

    kvs_metrics_observe(m, model, KVS_HIST_PROMPT_TOKENS, prompt_tokens, 1);
    kvs_metrics_observe(m, model, KVS_HIST_GEN_TOKENS, generation_tokens,
                        1);

    if (kvs_req_times_hop(t, KVS_HOP_TOTAL, &ns) == KVS_OK) {
        kvs_metrics_observe(m, model, KVS_HIST_E2E, ns, 1);
    }

    if (kvs_req_times_hop(t, KVS_HOP_QUEUE, &ns) == KVS_OK) {
        kvs_metrics_observe(m, model, KVS_HIST_QUEUE, ns, 1);
    }

    if (kvs_req_times_hop(t, KVS_HOP_PREFILL, &ns) == KVS_OK) {
        kvs_metrics_observe(m, model, KVS_HIST_PREFILL, ns, 1);
    }

    if (kvs_req_times_hop(t, KVS_HOP_DECODE, &ns) == KVS_OK) {
        kvs_metrics_observe(m, model, KVS_HIST_DECODE, ns, 1);
    }

    if (kvs_req_span(t->recv_ns, t->last_ns, &ns) == KVS_OK) {
        kvs_metrics_observe(m, model, KVS_HIST_INFERENCE, ns, 1);
    }

    /* TTFT and ITL are observed as tokens arrive; body, tokenize and
     * limit as each ends (kvs_metrics_hop), refused requests too */
}


/* ---- exposition ------------------------------------------------------- */

/* model_name="..." with \\, \" and \n escaped */
static int
kvs_metrics_label(kvs_buf_t *out, const char *name)
{
    int          rc;
    const char  *p;

    rc = kvs_buf_append(out, "model_name=\"", 12);

    for (p = name; rc == KVS_OK && *p; p++) {
        if (*p == '\\' || *p == '"') {
            rc = kvs_buf_printf(out, "\\%c", *p);
        } else if (*p == '\n') {
            rc = kvs_buf_append(out, "\\n", 2);
        } else {
            rc = kvs_buf_append(out, p, 1);
        }
    }

    if (rc == KVS_OK) {
        rc = kvs_buf_append(out, "\"", 1);
    }

    return rc;
}


int
kvs_metrics_head(kvs_buf_t *out, const char *name, const char *suffix,
    const char *help, const char *type)
{
    return kvs_buf_printf(out, "# HELP kvserve:%s%s %s\n"
                          "# TYPE kvserve:%s%s %s\n",
                          name, suffix, help, name, suffix, type);
}


/* name{model_name="m"[,extra]} value */
int
kvs_metrics_sample(kvs_buf_t *out, const char *name, const char *suffix,
    const char *model, const char *extra, const char *value)
{
    int  rc;

    rc = kvs_buf_printf(out, "kvserve:%s%s{", name, suffix);

    if (rc == KVS_OK) {
        rc = kvs_metrics_label(out, model);
    }

    if (rc == KVS_OK && extra != NULL) {
        rc = kvs_buf_printf(out, ",%s", extra);
    }

    if (rc == KVS_OK) {
        rc = kvs_buf_printf(out, "} %s\n", value);
    }

    return rc;
}


int
kvs_metrics_sample_u64(kvs_buf_t *out, const char *name,
    const char *suffix, const char *model, const char *extra, uint64_t v)
{
    char  val[24];

    snprintf(val, sizeof(val), "%llu", (unsigned long long) v);

    return kvs_metrics_sample(out, name, suffix, model, extra, val);
}


/* prometheus_client's float text: "0.001", "1.0", "2560.0" */
static void
kvs_metrics_le(char *buf, size_t size, double v)
{
    snprintf(buf, size, "%g", v);

    if (strpbrk(buf, ".e") == NULL) {
        snprintf(buf + strlen(buf), size - strlen(buf), ".0");
    }
}


static int
kvs_metrics_hist(kvs_buf_t *out, const kvs_metrics_t *m,
    const kvs_hist_def_t *def)
{
    int                         rc;
    char                        le[64], val[48];
    uint32_t                    i, k, n_bounds;
    uint64_t                    cum, sum;
    const kvs_hist_t           *hist;
    const kvs_metrics_model_t  *mm;

    rc = kvs_metrics_head(out, def->name, "", def->help, "histogram");

    for (i = 0; rc == KVS_OK && i < m->n_models; i++) {
        mm = &m->models[i];
        hist = &mm->hist[def->id];
        n_bounds = def->bounds ? def->n_bounds : mm->n_tok_bounds;
        cum = 0;

        for (k = 0; rc == KVS_OK && k <= n_bounds; k++) {
            cum += kvs_metrics_load(&hist->bucket[k]);

            if (k == n_bounds) {
                snprintf(le, sizeof(le), "le=\"+Inf\"");
            } else if (def->bounds != NULL) {
                memcpy(le, "le=\"", 4);
                kvs_metrics_le(le + 4, sizeof(le) - 5, def->bounds[k]);
                strcat(le, "\"");
            } else {
                snprintf(le, sizeof(le), "le=\"%llu.0\"",
                         (unsigned long long) mm->tok_bounds[k]);
            }

            rc = kvs_metrics_sample_u64(out, def->name, "_bucket", mm->name,
                                        le, cum);
        }

        if (rc == KVS_OK) {
            rc = kvs_metrics_sample_u64(out, def->name, "_count", mm->name,
                                        NULL, cum);
        }

        if (rc == KVS_OK) {
            sum = kvs_metrics_load(&hist->sum);
            if (def->bounds != NULL && !def->counts) {
                snprintf(val, sizeof(val), "%.9f", (double) sum / 1e9);
            } else {
                snprintf(val, sizeof(val), "%llu",
                         (unsigned long long) sum);
            }
            rc = kvs_metrics_sample(out, def->name, "_sum", mm->name, NULL,
                                    val);
        }
    }

    return rc;
}


static int
kvs_metrics_counter(kvs_buf_t *out, const kvs_metrics_t *m,
    const char *name, const char *help, size_t offset)
{
    int       rc;
    uint32_t  i;

    rc = kvs_metrics_head(out, name, "_total", help, "counter");

    for (i = 0; rc == KVS_OK && i < m->n_models; i++) {
        rc = kvs_metrics_sample_u64(out, name, "_total", m->models[i].name,
                                    NULL,
                                    kvs_metrics_load((const uint64_t *)
                                        ((const char *) &m->models[i]
                                         + offset)));
    }

    return rc;
}


static int
kvs_metrics_gauges(kvs_buf_t *out, const kvs_metrics_t *m,
    const kvs_metrics_gauges_t *g)
{
    int        rc;
    char       val[48];
    uint32_t   i, k;
    unsigned   any;
    static const struct {
        const char  *name;
        const char  *help;
    } defs[] = {
        { "num_requests_running",
          "Number of requests in model execution batches." },
        { "num_requests_waiting",
          "Number of requests waiting to be processed." },
        { "kv_cache_usage_perc",
          "KV-cache usage. 1 means 100 percent usage." },
        { "gpu_cache_usage_perc",
          "KV-cache usage. 1 means 100 percent usage (vLLM's older name "
          "for kv_cache_usage_perc; the cache may be in host memory)." },
    };

    any = 0;
    for (i = 0; g != NULL && i < m->n_models; i++) {
        any |= g[i].have;
    }

    if (!any) {
        return KVS_OK;
    }

    rc = KVS_OK;

    for (k = 0; rc == KVS_OK && k < KVS_NELTS(defs); k++) {
        rc = kvs_metrics_head(out, defs[k].name, "", defs[k].help, "gauge");

        for (i = 0; rc == KVS_OK && i < m->n_models; i++) {
            if (!g[i].have) {
                continue;
            }

            switch (k) {
            case 0:
                snprintf(val, sizeof(val), "%u", (unsigned) g[i].running);
                break;
            case 1:
                snprintf(val, sizeof(val), "%u", (unsigned) g[i].waiting);
                break;
            default:
                snprintf(val, sizeof(val), "%.6f", g[i].kv_blocks
                         ? (double) g[i].kv_used / g[i].kv_blocks : 0.0);
                break;
            }

            rc = kvs_metrics_sample(out, defs[k].name, "", m->models[i].name,
                                    NULL, val);
        }
    }

    return rc;
}


/* The engine's prefix cache evictions, when it answered: a counter kept
 * by the engine, so it restarts with it (as counters may). */
static int
kvs_metrics_evictions(kvs_buf_t *out, const kvs_metrics_t *m,
    const kvs_metrics_gauges_t *g)
{
    int       rc;
    uint32_t  i, any;

    any = 0;
    for (i = 0; g != NULL && i < m->n_models; i++) {
        any |= (uint32_t) g[i].have;
    }

    if (!any) {
        return KVS_OK;
    }

    rc = kvs_metrics_head(out, "prefix_cache_evicted_blocks", "_total",
                          "KV blocks evicted from the prefix cache by the "
                          "engine since it started.", "counter");

    for (i = 0; rc == KVS_OK && i < m->n_models; i++) {
        if (g[i].have) {
            rc = kvs_metrics_sample_u64(out, "prefix_cache_evicted_blocks",
                                        "_total", m->models[i].name, NULL,
                                        g[i].cache_evicted_blocks);
        }
    }

    return rc;
}


/* iteration_tokens_total: the engine's steps by tokens computed, when
 * it answered (kept by the engine, so it restarts with it). */
static int
kvs_metrics_iter(kvs_buf_t *out, const kvs_metrics_t *m,
    const kvs_metrics_gauges_t *g)
{
    int       rc;
    char      le[64];
    uint32_t  i, k, any;
    uint64_t  cum;

    any = 0;
    for (i = 0; g != NULL && i < m->n_models; i++) {
        any |= (uint32_t) g[i].have;
    }

    if (!any) {
        return KVS_OK;
    }

    rc = kvs_metrics_head(out, "iteration_tokens_total", "",
                          "Histogram of number of tokens per engine_step.",
                          "histogram");

    for (i = 0; rc == KVS_OK && i < m->n_models; i++) {
        if (!g[i].have) {
            continue;
        }

        cum = 0;

        for (k = 0; rc == KVS_OK && k <= KVS_METRICS_ITER_BOUNDS; k++) {
            cum += g[i].iter_tokens[k];

            if (k == KVS_METRICS_ITER_BOUNDS) {
                snprintf(le, sizeof(le), "le=\"+Inf\"");
            } else {
                memcpy(le, "le=\"", 4);
                kvs_metrics_le(le + 4, sizeof(le) - 5, kvs_iter_bounds[k]);
                strcat(le, "\"");
            }

            rc = kvs_metrics_sample_u64(out, "iteration_tokens_total",
                                        "_bucket", m->models[i].name, le,
                                        cum);
        }

        if (rc == KVS_OK) {
            rc = kvs_metrics_sample_u64(out, "iteration_tokens_total",
                                        "_count", m->models[i].name, NULL,
                                        cum);
        }

        if (rc == KVS_OK) {
            rc = kvs_metrics_sample_u64(out, "iteration_tokens_total",
                                        "_sum", m->models[i].name, NULL,
                                        g[i].iter_tokens_sum);
        }
    }

    return rc;
}


/* cache_config_info: 1, the KV cache's configuration in labels (vLLM's
 * names for what we have: block_size, num_gpu_blocks, cache_dtype,
 * enable_prefix_caching, written as Python writes them). */
static int
kvs_metrics_cache_config(kvs_buf_t *out, const kvs_metrics_t *m,
    const kvs_metrics_gauges_t *g)
{
    int          rc;
    char         extra[192];
    uint32_t     i, any;
    const char  *p;

    any = 0;
    for (i = 0; g != NULL && i < m->n_models; i++) {
        any |= g[i].block_size != 0;
    }

    if (!any) {
        return KVS_OK;
    }

    rc = kvs_metrics_head(out, "cache_config_info", "",
                          "Information of the LLMEngine CacheConfig.",
                          "gauge");

    for (i = 0; rc == KVS_OK && i < m->n_models; i++) {
        if (g[i].block_size == 0) {
            continue;
        }

        /* a dtype name is ours ("f32", "q8_0"): nothing to escape, but
         * nothing odd reaches a label either */
        p = g[i].cache_dtype != NULL ? g[i].cache_dtype : "";
        if (strpbrk(p, "\\\"\n") != NULL) {
            p = "?";
        }

        snprintf(extra, sizeof(extra), "block_size=\"%u\","
                 "cache_dtype=\"%s\",enable_prefix_caching=\"%s\","
                 "num_gpu_blocks=\"%u\"", (unsigned) g[i].block_size, p,
                 g[i].prefix_caching ? "True" : "False",
                 (unsigned) g[i].num_blocks);

        rc = kvs_metrics_sample(out, "cache_config_info", "",
                                m->models[i].name, extra, "1.0");
    }

    return rc;
}


/* model_available: 1 while a model's engine serves, 0 while it is down
 * (its requests are answered 503 model_unavailable), for the models the
 * glue knows about. */
static int
kvs_metrics_available(kvs_buf_t *out, const kvs_metrics_t *m,
    const kvs_metrics_gauges_t *g)
{
    int       rc;
    uint32_t  i, any;

    any = 0;
    for (i = 0; g != NULL && i < m->n_models; i++) {
        any |= g[i].available != KVS_METRICS_AVAIL_UNKNOWN;
    }

    if (!any) {
        return KVS_OK;
    }

    rc = kvs_metrics_head(out, "model_available", "", "1 while the model's "
                          "engine process serves requests, 0 while it is "
                          "down (its requests get 503 model_unavailable).",
                          "gauge");

    for (i = 0; rc == KVS_OK && i < m->n_models; i++) {
        if (g[i].available != KVS_METRICS_AVAIL_UNKNOWN) {
            rc = kvs_metrics_sample(out, "model_available", "",
                                    m->models[i].name, NULL,
                                    g[i].available == KVS_METRICS_AVAIL_UP
                                    ? "1" : "0");
        }
    }

    return rc;
}


int
kvs_metrics_write(const kvs_metrics_t *m, const kvs_metrics_gauges_t *g,
    kvs_buf_t *out, kvs_err_t *err)
{
    int       rc;
    char      extra[32];
    size_t    len0, i;
    uint32_t  k, r;

    len0 = out->len;

    rc = kvs_metrics_available(out, m, g);

    if (rc == KVS_OK) {
        rc = kvs_metrics_gauges(out, m, g);
    }

    if (rc == KVS_OK) {
        rc = kvs_metrics_cache_config(out, m, g);
    }

    for (i = 0; rc == KVS_OK && i < KVS_NELTS(kvs_counter_defs); i++) {
        rc = kvs_metrics_counter(out, m, kvs_counter_defs[i].name,
                                 kvs_counter_defs[i].help,
                                 kvs_counter_defs[i].offset);
    }

    if (rc == KVS_OK) {
        rc = kvs_metrics_evictions(out, m, g);
    }

    if (rc == KVS_OK) {
        rc = kvs_metrics_tenants(out, m, g);
    }

    if (rc == KVS_OK) {
        rc = kvs_metrics_pools(out, m, g);
    }

    if (rc == KVS_OK) {
        rc = kvs_metrics_tier(out, m, g);
    }

    if (rc == KVS_OK) {
        rc = kvs_metrics_lora(out, m, g);
    }

    if (rc == KVS_OK) {
        rc = kvs_metrics_head(out, "request_success", "_total",
                              "Count of successfully processed requests.",
                              "counter");
    }

    for (k = 0; rc == KVS_OK && k < m->n_models; k++) {
        for (r = 0; rc == KVS_OK && r < KVS_REASON_N; r++) {
            snprintf(extra, sizeof(extra), "finished_reason=\"%s\"",
                     kvs_reason_names[r]);
            rc = kvs_metrics_sample_u64(out, "request_success", "_total",
                                        m->models[k].name, extra,
                                        kvs_metrics_load(
                                            &m->models[k].success[r]));
        }
    }

    for (i = 0; rc == KVS_OK && i < KVS_NELTS(kvs_hist_defs); i++) {
        rc = kvs_metrics_hist(out, m, &kvs_hist_defs[i]);
    }

    if (rc == KVS_OK) {
        rc = kvs_metrics_iter(out, m, g);
    }

    if (rc != KVS_OK) {
        out->len = len0;
        return kvs_err_set(err, KVS_ENOMEM, "metrics: out of memory");
    }

    return KVS_OK;
}
