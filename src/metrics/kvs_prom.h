/*
 * kvs_prom: a reader of Prometheus' text exposition format (0.0.4) as a
 * scrape of /metrics gives it, and the sums a reader of it needs: a
 * counter or gauge summed over the series that match, a histogram's
 * buckets summed per `le`, and the quantile of a histogram's buckets as
 * Prometheus' histogram_quantile() computes it.
 *
 * Invariants:
 *  - pure functions on caller memory: no I/O; kvs_prom_parse() copies
 *    the text, so the samples do not borrow the caller's buffer;
 *  - a sample's labels are unescaped (\\, \" and \n) and kept in the
 *    order written; `# HELP` and `# TYPE` lines and blank lines are
 *    skipped; a line that is not a sample is an error naming its line
 *    number, and nothing is kept;
 *  - values are doubles ("+Inf", "-Inf" and "NaN" included); a
 *    timestamp after the value is read and ignored.
 */

#ifndef KVS_PROM_H
#define KVS_PROM_H

#include <stddef.h>

#include "base/kvs_err.h"

#define KVS_PROM_MAX_LABELS  16
#define KVS_PROM_MAX_BUCKETS 64

typedef struct {
    const char  *key;
    const char  *value;
} kvs_prom_label_t;

typedef struct {
    const char        *name;       /* e.g. "kvserve:ttft_seconds_bucket" */
    kvs_prom_label_t   labels[KVS_PROM_MAX_LABELS];
    unsigned           n_labels;
    double             value;
} kvs_prom_sample_t;

typedef struct {
    kvs_prom_sample_t  *samples;   /* [n] */
    size_t              n;
    char               *text;      /* the copy the samples point into */
} kvs_prom_t;

/* Which series a sum takes: name exactly, and, when not NULL, the label
 * `model_name` equal to model (series without that label are taken
 * either way: a limit zone's counters), and the label key equal to
 * value. */
typedef struct {
    const char  *name;
    const char  *model;
    const char  *key;
    const char  *value;
} kvs_prom_match_t;

/* A histogram summed over the series that match: cumulative counts per
 * distinct `le`, in increasing order (+Inf last), count and sum. */
typedef struct {
    double    le[KVS_PROM_MAX_BUCKETS];
    double    cum[KVS_PROM_MAX_BUCKETS];
    unsigned  n_buckets;
    double    count;
    double    sum;
    unsigned  found;              /* series of _count that matched */
} kvs_prom_hist_t;

/* Parses len bytes of exposition into p (zeroed by the caller or freed
 * before): KVS_OK, KVS_EFORMAT naming the first bad line, KVS_ENOMEM. */
int kvs_prom_parse(kvs_prom_t *p, const char *text, size_t len,
    kvs_err_t *err);

void kvs_prom_free(kvs_prom_t *p);

/* The value of label key of s, or NULL. */
const char *kvs_prom_label(const kvs_prom_sample_t *s, const char *key);

/* The sum of the values of the samples that match m; *found (when not
 * NULL) gets how many matched. */
double kvs_prom_sum(const kvs_prom_t *p, const kvs_prom_match_t *m,
    unsigned *found);

/* The histogram named base (base_bucket, base_count, base_sum) summed
 * over the series that match model (m->name is ignored, m->key and
 * m->value filter as in kvs_prom_sum). */
int kvs_prom_hist(const kvs_prom_t *p, const char *base,
    const kvs_prom_match_t *m, kvs_prom_hist_t *h, kvs_err_t *err);

/* b - a, bucket by bucket (by `le`), for the observations between two
 * scrapes; a bucket a lacks counts from 0 (a series that appeared).
 * Counts that went down (a restart) make the difference b itself. */
void kvs_prom_hist_delta(const kvs_prom_hist_t *a, const kvs_prom_hist_t *b,
    kvs_prom_hist_t *d);

/* The q-quantile (0 < q < 1) of h's buckets, interpolated linearly
 * within its bucket, as histogram_quantile(): the lower bound of the
 * first bucket is 0, a quantile in the +Inf bucket is the highest
 * finite bound; -1 when h has no observation. */
double kvs_prom_hist_quantile(const kvs_prom_hist_t *h, double q);

/* The upper bound of the bucket that holds h's q-quantile: an exact
 * statement ("p90 <= bound"), where the interpolation of
 * kvs_prom_hist_quantile() guesses within the bucket; +Inf when it is in
 * the last bucket, -1 when h has no observation. */
double kvs_prom_hist_bound(const kvs_prom_hist_t *h, double q);

#endif /* KVS_PROM_H */
