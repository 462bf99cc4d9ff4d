/*
 * kvs_triage: the triage walk of docs/triage.md over two scrapes of a
 * server's /metrics: per hop of a request (network, queueing,
 * tokenization, limit, route, prefill, KV cache, batching, decode) its
 * figures over the interval between the scrapes (means from histogram
 * _sum/_count deltas, p90 from bucket deltas, rates from counters,
 * gauges as the later scrape shows them), each against its threshold,
 * and the guilty hop: the first out of bounds in the walk's order that
 * no later hop explains.
 *
 * Invariants:
 *  - no I/O: the caller scrapes and prints; kvs_triage_write() appends
 *    the report to a buffer;
 *  - a figure the scrapes do not have (no request in the interval, a
 *    metric not exported, such as route on an engine host) is "no data"
 *    and never out of bounds;
 *  - prefill and decode times include waiting for KV blocks and batch
 *    slots (the engine does not stamp when it schedules a request), so
 *    while the KV cache or batching hop is out of bounds, they are marked
 *    as its consequence and are not guilty.
 */

#ifndef KVS_TRIAGE_H
#define KVS_TRIAGE_H

#include "base/kvs_buf.h"
#include "base/kvs_err.h"
#include "metrics/kvs_prom.h"

typedef enum {
    KVS_TRIAGE_NETWORK = 0,
    KVS_TRIAGE_QUEUEING,
    KVS_TRIAGE_TOKENIZATION,
    KVS_TRIAGE_LIMIT,
    KVS_TRIAGE_ROUTE,
    KVS_TRIAGE_PREFILL,
    KVS_TRIAGE_KV_CACHE,
    KVS_TRIAGE_BATCHING,
    KVS_TRIAGE_DECODE,
    KVS_TRIAGE_N
} kvs_triage_hop_t;

#define KVS_TRIAGE_FIGURES  3

typedef struct {
    const char  *what;        /* "mean", "p90", "preemptions/request" */
    const char  *unit;        /* "s", "", "/s" */
    int          have;        /* 0: no data */
    double       value;
    double       max;         /* out of bounds above it; < 0: shown
                                 only, never out */
    int          out;
} kvs_triage_fig_t;

typedef struct {
    kvs_triage_fig_t  fig[KVS_TRIAGE_FIGURES];
    unsigned          n_fig;
    int               out;         /* a figure is out of bounds */
    int               consequence; /* out, but explained by a later hop */
    const char       *source;      /* the metric the first figure reads */
} kvs_triage_row_t;

typedef struct {
    double            seconds;     /* between the scrapes */
    double            requests;    /* finished in the interval */
    kvs_triage_row_t  row[KVS_TRIAGE_N];
    int               guilty;      /* kvs_triage_hop_t, or -1 */
} kvs_triage_t;

/* "network", "queueing", ...; "?" */
const char *kvs_triage_hop_name(kvs_triage_hop_t hop);

/* The hop named name, or -1. */
int kvs_triage_hop_by_name(const char *name);

/* The default threshold of hop's first figure (docs/triage.md). */
double kvs_triage_default_max(kvs_triage_hop_t hop);

/* The walk over scrapes a (earlier) and b, seconds apart, for the model
 * named model (NULL: every model summed); max[hop] overrides the first
 * figure's threshold when max is not NULL and max[hop] >= 0. */
int kvs_triage_compute(const kvs_prom_t *a, const kvs_prom_t *b,
    double seconds, const char *model, const double *max, kvs_triage_t *t,
    kvs_err_t *err);

/* Appends the report: one line per hop in order, its figures, "OUT"
 * where out of bounds, then the verdict. */
int kvs_triage_write(const kvs_triage_t *t, kvs_buf_t *out, kvs_err_t *err);

#endif /* KVS_TRIAGE_H */
