/*
 * kvs_prom: reads a Prometheus text exposition into samples, and sums
 * counters, gauges and histograms over the series a reader selects.
 *
 * Invariants: the text is copied once and cut in place (names, label
 * keys and values NUL-terminated there, values unescaped in place: an
 * unescaped value is never longer than its escaped text); a parse error
 * leaves p empty; no function does I/O.
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_prom.h"


static int
kvs_prom_name_char(char c, int first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'
           || c == ':' || (!first && c >= '0' && c <= '9');
}


/* The labels of s from p (just after '{') to the '}': the end's next
 * character, or NULL when they are malformed. */
static char *
kvs_prom_labels(char *p, kvs_prom_sample_t *s)
{
    char  *w;

    for ( ;; ) {
        while (*p == ' ') {
            p++;
        }

        if (*p == '}') {
            return p + 1;
        }

        if (!kvs_prom_name_char(*p, 1) || s->n_labels == KVS_PROM_MAX_LABELS)
        {
            return NULL;
        }

        s->labels[s->n_labels].key = p;

        while (kvs_prom_name_char(*p, 0)) {
            p++;
        }

        if (p[0] != '=' || p[1] != '"') {
            return NULL;
        }

        *p = '\0';
        p += 2;
        s->labels[s->n_labels].value = p;
        w = p;

        while (*p != '"') {
            if (*p == '\0' || *p == '\n') {
                return NULL;
            }

            if (*p == '\\') {
                p++;
                if (*p == 'n') {
                    *w++ = '\n';
                } else if (*p == '\\' || *p == '"') {
                    *w++ = *p;
                } else {
                    return NULL;
                }
                p++;
                continue;
            }

            *w++ = *p++;
        }

        *w = '\0';
        p++;
        s->n_labels++;

        while (*p == ' ') {
            p++;
        }

        if (*p == ',') {
            p++;
        } else if (*p != '}') {
            return NULL;
        }
    }
}


/* One sample line (NUL-terminated, no newline) into s. */
static int
kvs_prom_line(char *line, kvs_prom_sample_t *s)
{
    char  *p, *end;

    memset(s, 0, sizeof(kvs_prom_sample_t));

    p = line;

    if (!kvs_prom_name_char(*p, 1)) {
        return KVS_EINVAL;
    }

    s->name = p;

    while (kvs_prom_name_char(*p, 0)) {
        p++;
    }

    if (*p == '{') {
        *p = '\0';
        p = kvs_prom_labels(p + 1, s);
        if (p == NULL) {
            return KVS_EINVAL;
        }

    } else if (*p == ' ' || *p == '\t') {
        *p++ = '\0';

    } else {
        return KVS_EINVAL;
    }

    while (*p == ' ' || *p == '\t') {
        p++;
    }

    if (*p == '\0') {
        return KVS_EINVAL;
    }

    s->value = strtod(p, &end);

    if (end == p || (*end != '\0' && *end != ' ' && *end != '\t')) {
        return KVS_EINVAL;
    }

    /* a timestamp may follow: an integer, ignored */
    while (*end == ' ' || *end == '\t') {
        end++;
    }

    if (*end != '\0') {
        if (*end == '-') {
            end++;
        }
        if (*end < '0' || *end > '9') {
            return KVS_EINVAL;
        }
        while (*end >= '0' && *end <= '9') {
            end++;
        }
        if (*end != '\0') {
            return KVS_EINVAL;
        }
    }

    return KVS_OK;
}


int
kvs_prom_parse(kvs_prom_t *p, const char *text, size_t len, kvs_err_t *err)
{
    char    *line, *nl, *next, *end;
    size_t   n, i, lineno;

    memset(p, 0, sizeof(kvs_prom_t));

    if (memchr(text, '\0', len) != NULL) {
        return kvs_err_set(err, KVS_EFORMAT, "metrics: a NUL byte in the "
                           "exposition");
    }

    n = 1;
    for (i = 0; i < len; i++) {
        n += text[i] == '\n';
    }

    p->text = malloc(len + 1);
    p->samples = malloc(n * sizeof(kvs_prom_sample_t));

    if (p->text == NULL || p->samples == NULL) {
        kvs_prom_free(p);
        return kvs_err_set(err, KVS_ENOMEM, "metrics: out of memory");
    }

    memcpy(p->text, text, len);
    p->text[len] = '\0';

    lineno = 0;
    end = p->text + len;

    for (line = p->text; line < end; line = next) {
        lineno++;

        nl = memchr(line, '\n', (size_t) (end - line));
        next = nl != NULL ? nl + 1 : end;
        if (nl == NULL) {
            nl = end;
        }
        *nl = '\0';

        if (nl > line && nl[-1] == '\r') {
            nl[-1] = '\0';
        }

        while (*line == ' ' || *line == '\t') {
            line++;
        }

        if (*line == '\0' || *line == '#') {
            continue;
        }

        if (kvs_prom_line(line, &p->samples[p->n]) != KVS_OK) {
            kvs_prom_free(p);
            return kvs_err_set(err, KVS_EFORMAT, "metrics: line %zu is not "
                               "a sample of the text format", lineno);
        }

        p->n++;
    }

    return KVS_OK;
}


void
kvs_prom_free(kvs_prom_t *p)
{
    free(p->samples);
    free(p->text);
    memset(p, 0, sizeof(kvs_prom_t));
}


const char *
kvs_prom_label(const kvs_prom_sample_t *s, const char *key)
{
    unsigned  i;

    for (i = 0; i < s->n_labels; i++) {
        if (strcmp(s->labels[i].key, key) == 0) {
            return s->labels[i].value;
        }
    }

    return NULL;
}


/* Whether s matches m, its name aside. */
static int
kvs_prom_labels_match(const kvs_prom_sample_t *s, const kvs_prom_match_t *m)
{
    const char  *v;

    if (m->model != NULL) {
        v = kvs_prom_label(s, "model_name");
        if (v != NULL && strcmp(v, m->model) != 0) {
            return 0;
        }
    }

    if (m->key != NULL) {
        v = kvs_prom_label(s, m->key);
        if (v == NULL || m->value == NULL || strcmp(v, m->value) != 0) {
            return 0;
        }
    }

    return 1;
}


double
kvs_prom_sum(const kvs_prom_t *p, const kvs_prom_match_t *m,
    unsigned *found)
{
    size_t    i;
    double    sum;
    unsigned  n;

    sum = 0;
    n = 0;

    for (i = 0; i < p->n; i++) {
        if (strcmp(p->samples[i].name, m->name) == 0
            && kvs_prom_labels_match(&p->samples[i], m))
        {
            sum += p->samples[i].value;
            n++;
        }
    }

    if (found != NULL) {
        *found = n;
    }

    return sum;
}


/* The bucket of h whose bound is le, added in order when new; -1 when h
 * is full. */
static int
kvs_prom_bucket(kvs_prom_hist_t *h, double le)
{
    unsigned  i, k;

    for (i = 0; i < h->n_buckets; i++) {
        if (h->le[i] == le) {
            return (int) i;
        }
        if (h->le[i] > le) {
            break;
        }
    }

    if (h->n_buckets == KVS_PROM_MAX_BUCKETS) {
        return -1;
    }

    for (k = h->n_buckets; k > i; k--) {
        h->le[k] = h->le[k - 1];
        h->cum[k] = h->cum[k - 1];
    }

    h->le[i] = le;
    h->cum[i] = 0;
    h->n_buckets++;

    return (int) i;
}


int
kvs_prom_hist(const kvs_prom_t *p, const char *base,
    const kvs_prom_match_t *m, kvs_prom_hist_t *h, kvs_err_t *err)
{
    int                       k;
    char                     *end;
    size_t                    i, blen;
    double                    le;
    const char               *v, *name;
    const kvs_prom_sample_t  *s;

    memset(h, 0, sizeof(kvs_prom_hist_t));
    blen = strlen(base);

    for (i = 0; i < p->n; i++) {
        s = &p->samples[i];
        name = s->name;

        if (strncmp(name, base, blen) != 0 || !kvs_prom_labels_match(s, m)) {
            continue;
        }

        name += blen;

        if (strcmp(name, "_count") == 0) {
            h->count += s->value;
            h->found++;

        } else if (strcmp(name, "_sum") == 0) {
            h->sum += s->value;

        } else if (strcmp(name, "_bucket") == 0) {
            v = kvs_prom_label(s, "le");
            if (v == NULL) {
                return kvs_err_set(err, KVS_EFORMAT, "metrics: %s_bucket "
                                   "without le", base);
            }

            le = strtod(v, &end);
            if (end == v || *end != '\0') {
                return kvs_err_set(err, KVS_EFORMAT, "metrics: %s_bucket "
                                   "with le=\"%s\"", base, v);
            }

            k = kvs_prom_bucket(h, le);
            if (k < 0) {
                return kvs_err_set(err, KVS_ERANGE, "metrics: %s has over "
                                   "%d buckets", base, KVS_PROM_MAX_BUCKETS);
            }

            h->cum[k] += s->value;
        }
    }

    return KVS_OK;
}


void
kvs_prom_hist_delta(const kvs_prom_hist_t *a, const kvs_prom_hist_t *b,
    kvs_prom_hist_t *d)
{
    unsigned  i, j;
    int       reset;

    *d = *b;

    reset = b->count < a->count;

    for (i = 0; !reset && i < b->n_buckets; i++) {
        for (j = 0; j < a->n_buckets; j++) {
            if (a->le[j] == b->le[i]) {
                if (b->cum[i] < a->cum[j]) {
                    reset = 1;
                }
                d->cum[i] = b->cum[i] - a->cum[j];
                break;
            }
        }
    }

    if (reset) {
        *d = *b;
        return;
    }

    d->count = b->count - a->count;
    d->sum = b->sum - a->sum;
}


double
kvs_prom_hist_quantile(const kvs_prom_hist_t *h, double q)
{
    double    rank, lo, prev, in;
    unsigned  i, last;

    if (h->n_buckets == 0 || h->cum[h->n_buckets - 1] <= 0) {
        return -1;
    }

    rank = q * h->cum[h->n_buckets - 1];
    lo = 0;
    prev = 0;

    for (i = 0; i < h->n_buckets; i++) {
        if (h->cum[i] >= rank) {
            break;
        }
        lo = h->le[i];
        prev = h->cum[i];
    }

    if (i == h->n_buckets) {
        i = h->n_buckets - 1;
    }

    if (isinf(h->le[i])) {
        /* the highest finite bound */
        last = i;
        while (last > 0 && isinf(h->le[last])) {
            last--;
        }
        return isinf(h->le[last]) ? -1 : h->le[last];
    }

    in = h->cum[i] - prev;

    return lo + (h->le[i] - lo) * (in > 0 ? (rank - prev) / in : 1.0);
}


double
kvs_prom_hist_bound(const kvs_prom_hist_t *h, double q)
{
    double    rank;
    unsigned  i;

    if (h->n_buckets == 0 || h->cum[h->n_buckets - 1] <= 0) {
        return -1;
    }

    rank = q * h->cum[h->n_buckets - 1];

    for (i = 0; i + 1 < h->n_buckets; i++) {
        if (h->cum[i] >= rank) {
            break;
        }
    }

    return h->le[i];
}
