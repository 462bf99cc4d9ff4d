/*
 * kvs_triage: per-hop figures from two scrapes, their bounds, the
 * guilty hop, and the report's text (docs/triage.md has the walk and
 * where each default threshold comes from).
 *
 * Invariants: figures come only from the two scrapes (deltas of
 * counters and histograms, gauges as scraped); a counter that went down
 * between them (a restart) counts from zero; nothing here does I/O.
 */

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kvs_triage.h"


#define KVS_TRIAGE_P  "kvserve:"

static const char  *kvs_triage_names[KVS_TRIAGE_N] = {
    "network", "queueing", "tokenization", "limit", "route", "prefill",
    "kv_cache", "batching", "decode"
};

/* the first figure's default threshold, per hop (docs/triage.md) */
static const double  kvs_triage_max[KVS_TRIAGE_N] = {
    0.100,      /* network: mean body time, s */
    0.050,      /* queueing: mean worker -> engine time, s */
    0.050,      /* tokenization: mean tokenize time, s */
    0.050,      /* limit: mean kvserve_limit delay, s */
    0.010,      /* route: mean prefix lookup, s */
    1.000,      /* prefill: mean engine receipt -> first token, s */
    0.050,      /* kv_cache: preemptions per finished request */
    0.500,      /* batching: requests waiting while the KV cache has room */
    0.100       /* decode: mean inter-token latency, s */
};

/* KV usage at or above which waiting requests are the cache's, not the
 * batch's */
#define KVS_TRIAGE_KV_FULL  0.9


const char *
kvs_triage_hop_name(kvs_triage_hop_t hop)
{
    return (unsigned) hop < KVS_TRIAGE_N ? kvs_triage_names[hop] : "?";
}


int
kvs_triage_hop_by_name(const char *name)
{
    int  i;

    for (i = 0; i < KVS_TRIAGE_N; i++) {
        if (strcmp(name, kvs_triage_names[i]) == 0) {
            return i;
        }
    }

    return -1;
}


double
kvs_triage_default_max(kvs_triage_hop_t hop)
{
    return (unsigned) hop < KVS_TRIAGE_N ? kvs_triage_max[hop] : -1;
}


/* ---- reading the scrapes ------------------------------------------------ */

typedef struct {
    const kvs_prom_t  *a;
    const kvs_prom_t  *b;
    const char        *model;
    double             seconds;
    kvs_err_t         *err;
} kvs_triage_in_t;


/* A counter's increase between the scrapes (summed over the series that
 * match); *found: the later scrape has it. */
static double
kvs_triage_delta(const kvs_triage_in_t *in, const char *name,
    const char *key, const char *value, unsigned *found)
{
    double            va, vb;
    kvs_prom_match_t  m;

    m.name = name;
    m.model = in->model;
    m.key = key;
    m.value = value;

    va = kvs_prom_sum(in->a, &m, NULL);
    vb = kvs_prom_sum(in->b, &m, found);

    return vb >= va ? vb - va : vb;
}


/* A gauge in scrape p; *found: p has it. */
static double
kvs_triage_gauge(const kvs_triage_in_t *in, const kvs_prom_t *p,
    const char *name, unsigned *found)
{
    kvs_prom_match_t  m;

    memset(&m, 0, sizeof(m));
    m.name = name;
    m.model = in->model;

    return kvs_prom_sum(p, &m, found);
}


/* The histogram's observations between the scrapes. */
static int
kvs_triage_hist(const kvs_triage_in_t *in, const char *base,
    kvs_prom_hist_t *d)
{
    kvs_prom_hist_t   ha, hb;
    kvs_prom_match_t  m;

    memset(&m, 0, sizeof(m));
    m.model = in->model;

    if (kvs_prom_hist(in->a, base, &m, &ha, in->err) != KVS_OK
        || kvs_prom_hist(in->b, base, &m, &hb, in->err) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    kvs_prom_hist_delta(&ha, &hb, d);

    if (hb.found == 0) {
        d->count = 0;
    }

    return KVS_OK;
}


static kvs_triage_fig_t *
kvs_triage_fig(kvs_triage_row_t *row, const char *what, const char *unit,
    double max)
{
    kvs_triage_fig_t  *f;

    f = &row->fig[row->n_fig++];
    f->what = what;
    f->unit = unit;
    f->max = max;

    return f;
}


static void
kvs_triage_set(kvs_triage_fig_t *f, double value)
{
    f->have = 1;
    f->value = value;
}


/* A row of a time histogram: its mean (against max) and p90 (shown). */
static int
kvs_triage_time_row(const kvs_triage_in_t *in, kvs_triage_row_t *row,
    const char *base, double max)
{
    kvs_prom_hist_t    d;
    kvs_triage_fig_t  *mean, *p90;

    row->source = base;
    mean = kvs_triage_fig(row, "mean", "s", max);
    p90 = kvs_triage_fig(row, "p90<=", "s", -1);

    if (kvs_triage_hist(in, base, &d) != KVS_OK) {
        return KVS_EFORMAT;
    }

    if (d.count > 0) {
        kvs_triage_set(mean, d.sum / d.count);
        kvs_triage_set(p90, kvs_prom_hist_bound(&d, 0.9));
    }

    return KVS_OK;
}


/* limit: the delay, and the share of requests rejected */
static int
kvs_triage_limit(const kvs_triage_in_t *in, kvs_triage_row_t *row,
    double max)
{
    double             pass, delay, reject;
    unsigned           found;
    kvs_triage_fig_t  *f;

    if (kvs_triage_time_row(in, row, KVS_TRIAGE_P
                            "request_limit_time_seconds", max)
        != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    /* p90 gives way to what a client sees of a limit: 429s */
    row->n_fig = 1;
    f = kvs_triage_fig(row, "rejected", "share", 0.05);

    pass = kvs_triage_delta(in, KVS_TRIAGE_P "limit_passed_total", NULL,
                            NULL, &found);
    delay = kvs_triage_delta(in, KVS_TRIAGE_P "limit_delayed_total", NULL,
                             NULL, NULL);
    reject = kvs_triage_delta(in, KVS_TRIAGE_P "limit_rejected_total", NULL,
                              NULL, NULL);

    if (found && pass + delay + reject > 0) {
        kvs_triage_set(f, reject / (pass + delay + reject));
    }

    return KVS_OK;
}


/* A time row with a counter's rate beside it: prefill with the prompt
 * tokens served per second, decode with the tokens generated. */
static int
kvs_triage_time_rate(const kvs_triage_in_t *in, kvs_triage_row_t *row,
    const char *base, double max, const char *what, const char *counter)
{
    double             v;
    unsigned           found;
    kvs_triage_fig_t  *f;

    if (kvs_triage_time_row(in, row, base, max) != KVS_OK) {
        return KVS_EFORMAT;
    }

    f = kvs_triage_fig(row, what, "tok/s", -1);
    v = kvs_triage_delta(in, counter, NULL, NULL, &found);
    if (found && in->seconds > 0) {
        kvs_triage_set(f, v / in->seconds);
    }

    return KVS_OK;
}


/* KV cache: preemptions per finished request; usage and evictions */
static void
kvs_triage_kv(const kvs_triage_in_t *in, kvs_triage_row_t *row,
    double requests, double max)
{
    double             v;
    unsigned           found;
    kvs_triage_fig_t  *f;

    row->source = KVS_TRIAGE_P "num_preemptions_total";

    f = kvs_triage_fig(row, "preempted", "/req", max);
    v = kvs_triage_delta(in, KVS_TRIAGE_P "num_preemptions_total", NULL,
                         NULL, &found);
    if (found && requests > 0) {
        kvs_triage_set(f, v / requests);
    }

    f = kvs_triage_fig(row, "usage", "share", -1);
    v = kvs_triage_gauge(in, in->b, KVS_TRIAGE_P "kv_cache_usage_perc",
                         &found);
    if (found) {
        kvs_triage_set(f, v / found);
    }

    f = kvs_triage_fig(row, "evicted", "blocks/s", -1);
    v = kvs_triage_delta(in, KVS_TRIAGE_P "prefix_cache_evicted_blocks_total",
                         NULL, NULL, &found);
    if (found && in->seconds > 0) {
        kvs_triage_set(f, v / in->seconds);
    }
}


/* batching: requests that wait at both scrapes while the KV cache has
 * room (so the batch, not the cache, keeps them out); tokens per step */
static int
kvs_triage_batching(const kvs_triage_in_t *in, kvs_triage_row_t *row,
    double max)
{
    double             wa, wb, ua, ub;
    unsigned           fa, fb, ga, gb;
    kvs_prom_hist_t    d;
    kvs_triage_fig_t  *f;

    row->source = KVS_TRIAGE_P "num_requests_waiting";

    f = kvs_triage_fig(row, "waiting", "req", max);
    wa = kvs_triage_gauge(in, in->a, KVS_TRIAGE_P "num_requests_waiting",
                          &fa);
    wb = kvs_triage_gauge(in, in->b, KVS_TRIAGE_P "num_requests_waiting",
                          &fb);
    ua = kvs_triage_gauge(in, in->a, KVS_TRIAGE_P "kv_cache_usage_perc",
                          &ga);
    ub = kvs_triage_gauge(in, in->b, KVS_TRIAGE_P "kv_cache_usage_perc",
                          &gb);

    if (fa && fb && ga && gb) {
        /* with the cache full, the wait is the cache's */
        kvs_triage_set(f, ua / ga >= KVS_TRIAGE_KV_FULL
                          || ub / gb >= KVS_TRIAGE_KV_FULL
                          ? 0 : fmin(wa, wb));
    }

    f = kvs_triage_fig(row, "step", "tok", -1);
    if (kvs_triage_hist(in, KVS_TRIAGE_P "iteration_tokens_total", &d)
        != KVS_OK)
    {
        return KVS_EFORMAT;
    }
    if (d.count > 0) {
        kvs_triage_set(f, d.sum / d.count);
    }

    f = kvs_triage_fig(row, "running", "req", -1);
    wb = kvs_triage_gauge(in, in->b, KVS_TRIAGE_P "num_requests_running",
                          &fb);
    if (fb) {
        kvs_triage_set(f, wb);
    }

    return KVS_OK;
}


/* ---- the walk ----------------------------------------------------------- */

/* Which hops explain an out-of-bounds hop: prefill and decode times
 * include waiting for KV blocks and batch slots; batching's waits are
 * the cache's while it preempts. */
static int
kvs_triage_explained(const kvs_triage_t *t, kvs_triage_hop_t hop)
{
    int  kv, batch;

    kv = t->row[KVS_TRIAGE_KV_CACHE].out;
    batch = t->row[KVS_TRIAGE_BATCHING].out;

    switch (hop) {
    case KVS_TRIAGE_PREFILL:
    case KVS_TRIAGE_DECODE:
        return kv || batch;
    case KVS_TRIAGE_BATCHING:
        return kv;
    default:
        return 0;
    }
}


int
kvs_triage_compute(const kvs_prom_t *a, const kvs_prom_t *b,
    double seconds, const char *model, const double *max, kvs_triage_t *t,
    kvs_err_t *err)
{
    int                rc;
    double             mx[KVS_TRIAGE_N];
    unsigned           h, k;
    kvs_triage_in_t    in;
    kvs_triage_row_t  *row;
    kvs_triage_fig_t  *f;

    memset(t, 0, sizeof(kvs_triage_t));
    t->seconds = seconds;
    t->guilty = -1;

    for (h = 0; h < KVS_TRIAGE_N; h++) {
        mx[h] = max != NULL && max[h] >= 0 ? max[h] : kvs_triage_max[h];
    }

    in.a = a;
    in.b = b;
    in.model = model;
    in.seconds = seconds;
    in.err = err;

    t->requests = kvs_triage_delta(&in, KVS_TRIAGE_P "request_success_total",
                                   NULL, NULL, NULL);

    rc = kvs_triage_time_row(&in, &t->row[KVS_TRIAGE_NETWORK],
                             KVS_TRIAGE_P "request_body_time_seconds",
                             mx[KVS_TRIAGE_NETWORK]);

    if (rc == KVS_OK) {
        rc = kvs_triage_time_row(&in, &t->row[KVS_TRIAGE_QUEUEING],
                                 KVS_TRIAGE_P "request_queue_time_seconds",
                                 mx[KVS_TRIAGE_QUEUEING]);
    }

    if (rc == KVS_OK) {
        rc = kvs_triage_time_row(&in, &t->row[KVS_TRIAGE_TOKENIZATION],
                                 KVS_TRIAGE_P
                                 "request_tokenize_time_seconds",
                                 mx[KVS_TRIAGE_TOKENIZATION]);
    }

    if (rc == KVS_OK) {
        rc = kvs_triage_limit(&in, &t->row[KVS_TRIAGE_LIMIT],
                              mx[KVS_TRIAGE_LIMIT]);
    }

    if (rc == KVS_OK) {
        /* a gateway's; an engine host has none */
        rc = kvs_triage_time_row(&in, &t->row[KVS_TRIAGE_ROUTE],
                                 KVS_TRIAGE_P "request_route_time_seconds",
                                 mx[KVS_TRIAGE_ROUTE]);
    }

    if (rc == KVS_OK) {
        rc = kvs_triage_time_rate(&in, &t->row[KVS_TRIAGE_PREFILL],
                                  KVS_TRIAGE_P "request_prefill_time_seconds",
                                  mx[KVS_TRIAGE_PREFILL], "prompt",
                                  KVS_TRIAGE_P "prompt_tokens_total");
    }

    if (rc == KVS_OK) {
        kvs_triage_kv(&in, &t->row[KVS_TRIAGE_KV_CACHE], t->requests,
                      mx[KVS_TRIAGE_KV_CACHE]);
        rc = kvs_triage_batching(&in, &t->row[KVS_TRIAGE_BATCHING],
                                 mx[KVS_TRIAGE_BATCHING]);
    }

    if (rc == KVS_OK) {
        rc = kvs_triage_time_rate(&in, &t->row[KVS_TRIAGE_DECODE],
                                  KVS_TRIAGE_P "inter_token_latency_seconds",
                                  mx[KVS_TRIAGE_DECODE], "generated",
                                  KVS_TRIAGE_P "generation_tokens_total");
    }

    if (rc != KVS_OK) {
        return rc;
    }

    for (h = 0; h < KVS_TRIAGE_N; h++) {
        row = &t->row[h];
        for (k = 0; k < row->n_fig; k++) {
            f = &row->fig[k];
            f->out = f->have && f->max >= 0 && f->value > f->max;
            row->out |= f->out;
        }
    }

    for (h = 0; h < KVS_TRIAGE_N; h++) {
        row = &t->row[h];
        row->consequence = row->out
                           && kvs_triage_explained(t, (kvs_triage_hop_t) h);

        if (row->out && !row->consequence && t->guilty < 0) {
            t->guilty = (int) h;
        }
    }

    return KVS_OK;
}


/* ---- the report --------------------------------------------------------- */

/* A figure's value (or bound) in its unit: seconds as ms. */
static int
kvs_triage_value(kvs_buf_t *out, const char *unit, double v)
{
    if (isinf(v)) {
        return kvs_buf_printf(out, "+Inf");
    }

    if (strcmp(unit, "s") == 0) {
        return kvs_buf_printf(out, "%.3f ms", v * 1e3);
    }

    if (strcmp(unit, "share") == 0) {
        return kvs_buf_printf(out, "%.1f%%", v * 100);
    }

    return kvs_buf_printf(out, "%.2f %s", v, unit);
}


static int
kvs_triage_fig_write(kvs_buf_t *out, const kvs_triage_fig_t *f)
{
    int  rc;

    rc = kvs_buf_printf(out, "  %s%s", f->what,
                        f->what[strlen(f->what) - 1] == '=' ? "" : " ");

    if (rc == KVS_OK) {
        rc = f->have ? kvs_triage_value(out, f->unit, f->value)
                     : kvs_buf_printf(out, "-");
    }

    if (rc == KVS_OK && f->max >= 0) {
        rc = kvs_buf_printf(out, " (%s ", f->out ? ">" : "max");
        if (rc == KVS_OK) {
            rc = kvs_triage_value(out, f->unit, f->max);
        }
        if (rc == KVS_OK) {
            rc = kvs_buf_printf(out, ")");
        }
    }

    return rc;
}


int
kvs_triage_write(const kvs_triage_t *t, kvs_buf_t *out, kvs_err_t *err)
{
    int                      rc;
    size_t                   len0;
    unsigned                 h, k, have;
    const char              *st;
    const kvs_triage_row_t  *row;

    len0 = out->len;

    rc = kvs_buf_printf(out, "interval %.1f s, %.0f requests finished\n",
                        t->seconds, t->requests);

    for (h = 0; rc == KVS_OK && h < KVS_TRIAGE_N; h++) {
        row = &t->row[h];

        have = 0;
        for (k = 0; k < row->n_fig; k++) {
            have |= (unsigned) row->fig[k].have;
        }

        st = row->consequence ? "out*" : row->out ? "OUT" : have ? "ok"
                                                                 : "-";

        rc = kvs_buf_printf(out, "%u %-12s %-4s", h + 1,
                            kvs_triage_names[h], st);

        for (k = 0; rc == KVS_OK && k < row->n_fig; k++) {
            rc = kvs_triage_fig_write(out, &row->fig[k]);
        }

        if (rc == KVS_OK) {
            rc = kvs_buf_printf(out, "  [%s]\n", row->source);
        }
    }

    if (rc == KVS_OK) {
        if (t->guilty >= 0) {
            rc = kvs_buf_printf(out, "guilty: %s\n",
                                kvs_triage_names[t->guilty]);
        } else {
            rc = kvs_buf_printf(out, "guilty: none (every hop within "
                                "bounds)\n");
        }
    }

    for (h = 0; rc == KVS_OK && h < KVS_TRIAGE_N; h++) {
        if (t->row[h].consequence) {
            rc = kvs_buf_printf(out, "out*: %s is out of bounds as a "
                                "consequence of kv_cache or batching\n",
                                kvs_triage_names[h]);
        }
    }

    if (rc != KVS_OK) {
        out->len = len0;
        return kvs_err_set(err, KVS_ENOMEM, "triage: out of memory");
    }

    return KVS_OK;
}
