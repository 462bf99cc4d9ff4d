/*
 * test_triage: the text-format reader (src/metrics/kvs_prom.c) and the
 * triage walk (src/metrics/kvs_triage.c) on real scrapes of servers made
 * slow on purpose (t/unit/triage_scrapes.h, from t/038-triage.t).
 *
 * Expected figures are not copied from the reader: the test finds the
 * sample lines in the scrape text itself (strstr + strtod) and computes
 * the deltas, means and ratios from them; quantiles are worked out by
 * hand from Prometheus' histogram_quantile() definition.
 */

#include "kvs_test.h"

#include "metrics/kvs_prom.h"
#include "metrics/kvs_triage.h"

#include "triage_scrapes.h"

#define MODEL_LABEL  "{model_name=\"kvserve-tiny\"}"


/* The value of the sample line that starts with key followed by a space,
 * read from the text itself; fails the test when there is none. */
static double
line_value(const char *text, const char *key)
{
    size_t       n;
    const char  *p;

    n = strlen(key);

    for (p = text; *p; p = strchr(p, '\n') + 1) {
        if (strncmp(p, key, n) == 0 && p[n] == ' ') {
            return strtod(p + n + 1, NULL);
        }
        if (strchr(p, '\n') == NULL) {
            break;
        }
    }

    fail_msg("no sample line %s", key);
    return 0;
}


/* The sum of every request_success_total line of text. */
static double
successes(const char *text)
{
    double       sum;
    const char  *p, *sp;

    sum = 0;

    for (p = strstr(text, "\nkvserve:request_success_total{"); p != NULL;
         p = strstr(p + 1, "\nkvserve:request_success_total{"))
    {
        sp = strchr(p + 1, ' ');
        sum += strtod(sp + 1, NULL);
    }

    return sum;
}


static size_t
sample_lines(const char *text)
{
    size_t       n;
    const char  *p;

    n = 0;

    for (p = text; *p; p = strchr(p, '\n') + 1) {
        n += *p != '#' && *p != '\n';
    }

    return n;
}


static void
parse(kvs_prom_t *p, const char *text)
{
    kvs_err_t  err;

    assert_int_equal(kvs_prom_parse(p, text, strlen(text), &err), KVS_OK);
}


static void
walk(const char *a, const char *b, const char *model, const double *max,
    kvs_triage_t *t)
{
    kvs_err_t   err;
    kvs_prom_t  pa, pb;

    parse(&pa, a);
    parse(&pb, b);
    assert_int_equal(kvs_triage_compute(&pa, &pb, 3.0, model, max, t, &err),
                     KVS_OK);
    kvs_prom_free(&pa);
    kvs_prom_free(&pb);
}


/* ---- the reader --------------------------------------------------------- */

static void
test_parse_scrape(void **state)
{
    size_t                    i;
    kvs_err_t                 err;
    kvs_prom_t                p;
    kvs_prom_match_t          m;
    const kvs_prom_sample_t  *s;

    (void) state;

    assert_int_equal(kvs_prom_parse(&p, triage_kv_2, strlen(triage_kv_2),
                                    &err), KVS_OK);
    assert_int_equal(p.n, sample_lines(triage_kv_2));

    /* cache_config_info: five labels, in the order written */
    s = NULL;
    for (i = 0; i < p.n; i++) {
        if (strcmp(p.samples[i].name, "kvserve:cache_config_info") == 0) {
            s = &p.samples[i];
        }
    }
    assert_non_null(s);
    assert_int_equal(s->n_labels, 5);
    assert_string_equal(s->labels[0].key, "model_name");
    assert_string_equal(kvs_prom_label(s, "model_name"), "kvserve-tiny");
    assert_string_equal(kvs_prom_label(s, "block_size"), "16");
    assert_string_equal(kvs_prom_label(s, "num_gpu_blocks"), "32");
    assert_null(kvs_prom_label(s, "le"));
    assert_true(s->value == 1.0);

    memset(&m, 0, sizeof(m));
    m.name = "kvserve:num_preemptions_total";
    assert_true(kvs_prom_sum(&p, &m, NULL)
                == line_value(triage_kv_2, "kvserve:num_preemptions_total"
                              MODEL_LABEL));

    /* by label: one finished_reason */
    m.name = "kvserve:request_success_total";
    m.key = "finished_reason";
    m.value = "length";
    assert_true(kvs_prom_sum(&p, &m, NULL)
                == line_value(triage_kv_2, "kvserve:request_success_total"
                              "{model_name=\"kvserve-tiny\","
                              "finished_reason=\"length\"}"));

    /* another model's series are not taken */
    m.key = NULL;
    m.model = "other";
    assert_true(kvs_prom_sum(&p, &m, NULL) == 0);

    kvs_prom_free(&p);
}


/* lines that are not samples, and the line each error names */
static const struct {
    const char  *text;
    const char  *line;
} bad_lines[] = {
    { "a 1\nb\n", "line 2 " },
    { "a{x=1} 2\n", "line 1 " },
    { "# c\na{x=\"1} 2\n", "line 2 " },
    { "a{x=\"\\t\"} 2\n", "line 1 " },
    { "a 1 2 3\n", "line 1 " },
    { "a one\n", "line 1 " },
    { "9a 1\n", "line 1 " },
};


static void
test_parse_syntax(void **state)
{
    size_t            i;
    unsigned          found;
    kvs_err_t         err;
    kvs_prom_t        p;
    const char       *text;
    kvs_prom_match_t  m;

    (void) state;

    text = "# HELP x a\n"
           "\n"
           "x{a=\"q\\\"u\\\\o\\nte\",b=\"\"} 1.5 1700000000000\r\n"
           "y +Inf\n"
           "y{k=\"1\"} NaN\n"
           "  z -2e3";
    assert_int_equal(kvs_prom_parse(&p, text, strlen(text), &err), KVS_OK);
    assert_int_equal(p.n, 4);
    assert_string_equal(p.samples[0].name, "x");
    assert_string_equal(p.samples[0].labels[0].value, "q\"u\\o\nte");
    assert_string_equal(p.samples[0].labels[1].value, "");
    assert_true(p.samples[0].value == 1.5);
    assert_true(isinf(p.samples[1].value) && p.samples[1].value > 0);
    assert_true(isnan(p.samples[2].value));
    assert_true(p.samples[3].value == -2000);

    memset(&m, 0, sizeof(m));
    m.name = "y";
    m.key = "k";
    m.value = "1";
    (void) kvs_prom_sum(&p, &m, &found);
    assert_int_equal(found, 1);
    kvs_prom_free(&p);

    /* bad lines: named by number, nothing kept */
    for (i = 0; i < sizeof(bad_lines) / sizeof(bad_lines[0]); i++) {
        assert_int_equal(kvs_prom_parse(&p, bad_lines[i].text,
                                        strlen(bad_lines[i].text), &err),
                         KVS_EFORMAT);
        assert_non_null(strstr(err.msg, bad_lines[i].line));
        assert_int_equal(p.n, 0);
        assert_null(p.samples);
    }

    assert_int_equal(kvs_prom_parse(&p, "a 1\0", 4, &err), KVS_EFORMAT);
}


static void
test_hist(void **state)
{
    unsigned          i;
    kvs_err_t         err;
    kvs_prom_t        p;
    kvs_prom_hist_t   h, a, d;
    kvs_prom_match_t  m;
    const char       *text;

    (void) state;

    /* a real one: buckets increasing, +Inf last and equal to _count */
    parse(&p, triage_kv_2);
    memset(&m, 0, sizeof(m));
    assert_int_equal(kvs_prom_hist(&p, "kvserve:inter_token_latency_seconds",
                                   &m, &h, &err), KVS_OK);
    assert_int_equal(h.found, 1);
    assert_true(h.count > 0);
    assert_true(h.count == line_value(triage_kv_2,
                    "kvserve:inter_token_latency_seconds_count" MODEL_LABEL));
    assert_true(h.sum == line_value(triage_kv_2,
                    "kvserve:inter_token_latency_seconds_sum" MODEL_LABEL));
    assert_int_equal(h.n_buckets, 20);    /* 19 bounds and +Inf */
    for (i = 1; i < h.n_buckets; i++) {
        assert_true(h.le[i] > h.le[i - 1]);
        assert_true(h.cum[i] >= h.cum[i - 1]);
    }
    assert_true(isinf(h.le[h.n_buckets - 1]));
    assert_true(h.cum[h.n_buckets - 1] == h.count);
    kvs_prom_free(&p);

    /* two series summed per le, written out of order; then quantiles by
     * histogram_quantile(): 8 observations, 2 <= 1, 4 in (1, 2], 2 above:
     * q=0.5: rank 4 in (1, 2] after 2: 1 + (2 - 1) * (4 - 2) / 4 = 1.5;
     * q=0.25: rank 2 in the first bucket: 0 + 1 * 2 / 2 = 1;
     * q=0.9: rank 7.2 in +Inf: the highest finite bound, 2 */
    text = "h_bucket{m=\"a\",le=\"2\"} 4\n"
           "h_bucket{m=\"a\",le=\"1\"} 1\n"
           "h_bucket{m=\"a\",le=\"+Inf\"} 5\n"
           "h_count{m=\"a\"} 5\nh_sum{m=\"a\"} 9\n"
           "h_bucket{m=\"b\",le=\"1\"} 1\n"
           "h_bucket{m=\"b\",le=\"2\"} 2\n"
           "h_bucket{m=\"b\",le=\"+Inf\"} 3\n"
           "h_count{m=\"b\"} 3\nh_sum{m=\"b\"} 7\n";
    parse(&p, text);
    assert_int_equal(kvs_prom_hist(&p, "h", &m, &h, &err), KVS_OK);
    assert_int_equal(h.n_buckets, 3);
    assert_true(h.le[0] == 1 && h.le[1] == 2 && isinf(h.le[2]));
    assert_true(h.cum[0] == 2 && h.cum[1] == 6 && h.cum[2] == 8);
    assert_true(h.count == 8 && h.sum == 16);
    assert_int_equal(h.found, 2);
    assert_true(fabs(kvs_prom_hist_quantile(&h, 0.5) - 1.5) < 1e-12);
    assert_true(fabs(kvs_prom_hist_quantile(&h, 0.25) - 1.0) < 1e-12);
    assert_true(kvs_prom_hist_quantile(&h, 0.9) == 2);
    assert_true(kvs_prom_hist_bound(&h, 0.5) == 2);
    assert_true(kvs_prom_hist_bound(&h, 0.25) == 1);
    assert_true(isinf(kvs_prom_hist_bound(&h, 0.9)));

    /* only series "a": */
    m.key = "m";
    m.value = "a";
    assert_int_equal(kvs_prom_hist(&p, "h", &m, &a, &err), KVS_OK);
    assert_true(a.count == 5 && a.cum[0] == 1);

    /* h - a is series "b" */
    kvs_prom_hist_delta(&a, &h, &d);
    assert_true(d.count == 3 && d.sum == 7);
    assert_true(d.cum[0] == 1 && d.cum[1] == 2 && d.cum[2] == 3);

    /* a counter that went down (a restart): the later scrape itself */
    kvs_prom_hist_delta(&h, &a, &d);
    assert_true(d.count == 5 && d.cum[0] == 1);

    /* nothing observed */
    memset(&d, 0, sizeof(d));
    assert_true(kvs_prom_hist_quantile(&d, 0.5) == -1);
    assert_true(kvs_prom_hist_bound(&d, 0.5) == -1);

    kvs_prom_free(&p);

    /* a bucket without le */
    parse(&p, "h_bucket 1\n");
    memset(&m, 0, sizeof(m));
    assert_int_equal(kvs_prom_hist(&p, "h", &m, &h, &err), KVS_EFORMAT);
    kvs_prom_free(&p);
}


/* ---- the walk ----------------------------------------------------------- */

static void
test_walk_kv(void **state)
{
    double        preempt, req;
    kvs_triage_t  t;

    (void) state;

    walk(triage_kv_1, triage_kv_2, NULL, NULL, &t);

    req = successes(triage_kv_2) - successes(triage_kv_1);
    preempt = line_value(triage_kv_2, "kvserve:num_preemptions_total"
                         MODEL_LABEL)
              - line_value(triage_kv_1, "kvserve:num_preemptions_total"
                           MODEL_LABEL);

    assert_true(req > 0);
    assert_true(t.requests == req);
    assert_true(t.row[KVS_TRIAGE_KV_CACHE].fig[0].have);
    assert_true(fabs(t.row[KVS_TRIAGE_KV_CACHE].fig[0].value
                     - preempt / req) < 1e-12);
    assert_true(t.row[KVS_TRIAGE_KV_CACHE].out);
    assert_false(t.row[KVS_TRIAGE_TOKENIZATION].out);
    assert_int_equal(t.guilty, KVS_TRIAGE_KV_CACHE);

    /* usage: the later scrape's gauge */
    assert_true(t.row[KVS_TRIAGE_KV_CACHE].fig[1].value
                == line_value(triage_kv_2, "kvserve:kv_cache_usage_perc"
                              MODEL_LABEL));

    /* route: an engine host has no figure for it */
    assert_false(t.row[KVS_TRIAGE_ROUTE].fig[0].have);
    assert_false(t.row[KVS_TRIAGE_ROUTE].out);
}


static void
test_walk_tokenization(void **state)
{
    double        sum, count;
    kvs_triage_t  t;

    (void) state;

    walk(triage_tok_1, triage_tok_2, "kvserve-tiny", NULL, &t);

    sum = line_value(triage_tok_2, "kvserve:request_tokenize_time_seconds_sum"
                     MODEL_LABEL)
          - line_value(triage_tok_1,
                       "kvserve:request_tokenize_time_seconds_sum"
                       MODEL_LABEL);
    count = line_value(triage_tok_2,
                       "kvserve:request_tokenize_time_seconds_count"
                       MODEL_LABEL)
            - line_value(triage_tok_1,
                         "kvserve:request_tokenize_time_seconds_count"
                         MODEL_LABEL);

    assert_true(count > 0);
    assert_true(fabs(t.row[KVS_TRIAGE_TOKENIZATION].fig[0].value
                     - sum / count) < 1e-12);
    assert_true(t.row[KVS_TRIAGE_TOKENIZATION].fig[0].value
                > kvs_triage_default_max(KVS_TRIAGE_TOKENIZATION));
    assert_int_equal(t.guilty, KVS_TRIAGE_TOKENIZATION);
    assert_false(t.row[KVS_TRIAGE_KV_CACHE].out);

    /* the prompts were refused: no request finished, no KV figure */
    assert_true(t.requests == 0);
    assert_false(t.row[KVS_TRIAGE_KV_CACHE].fig[0].have);
}


static void
test_walk_healthy(void **state)
{
    unsigned      h;
    double        max[KVS_TRIAGE_N];
    kvs_triage_t  t;

    (void) state;

    walk(triage_ok_1, triage_ok_2, NULL, NULL, &t);
    assert_int_equal(t.guilty, -1);
    for (h = 0; h < KVS_TRIAGE_N; h++) {
        assert_false(t.row[h].out);
    }
    assert_true(t.row[KVS_TRIAGE_DECODE].fig[0].have);

    /* a threshold under the healthy mean puts decode out */
    for (h = 0; h < KVS_TRIAGE_N; h++) {
        max[h] = -1;
    }
    max[KVS_TRIAGE_DECODE] = t.row[KVS_TRIAGE_DECODE].fig[0].value / 2;
    walk(triage_ok_1, triage_ok_2, NULL, max, &t);
    assert_int_equal(t.guilty, KVS_TRIAGE_DECODE);

    /* and one over the slow tokenization's mean clears it */
    walk(triage_tok_1, triage_tok_2, NULL, NULL, &t);
    max[KVS_TRIAGE_DECODE] = -1;
    max[KVS_TRIAGE_TOKENIZATION] = t.row[KVS_TRIAGE_TOKENIZATION].fig[0].value
                                   * 2;
    walk(triage_tok_1, triage_tok_2, NULL, max, &t);
    assert_int_equal(t.guilty, -1);

    /* another model: no data anywhere, nothing guilty */
    walk(triage_kv_1, triage_kv_2, "no-such-model", NULL, &t);
    assert_int_equal(t.guilty, -1);
    assert_false(t.row[KVS_TRIAGE_PREFILL].fig[0].have);
}


/* A slow prefill while the KV cache preempts is the cache's doing. */
static void
test_walk_consequence(void **state)
{
    unsigned      h;
    double        max[KVS_TRIAGE_N];
    kvs_triage_t  t;

    (void) state;

    for (h = 0; h < KVS_TRIAGE_N; h++) {
        max[h] = -1;
    }

    max[KVS_TRIAGE_PREFILL] = 0;
    max[KVS_TRIAGE_DECODE] = 0;
    walk(triage_kv_1, triage_kv_2, NULL, max, &t);
    assert_true(t.row[KVS_TRIAGE_PREFILL].out);
    assert_true(t.row[KVS_TRIAGE_PREFILL].consequence);
    assert_true(t.row[KVS_TRIAGE_DECODE].consequence);
    assert_int_equal(t.guilty, KVS_TRIAGE_KV_CACHE);

    /* without the cache's preemptions, prefill is the first guilty */
    max[KVS_TRIAGE_KV_CACHE] = 1e9;
    walk(triage_kv_1, triage_kv_2, NULL, max, &t);
    assert_false(t.row[KVS_TRIAGE_PREFILL].consequence);
    assert_int_equal(t.guilty, KVS_TRIAGE_PREFILL);
}


static void
test_report(void **state)
{
    char          *s, *p, line[16];
    unsigned       h;
    kvs_buf_t      b;
    kvs_err_t      err;
    kvs_triage_t   t;

    (void) state;

    assert_int_equal(kvs_triage_hop_by_name("kv_cache"),
                     KVS_TRIAGE_KV_CACHE);
    assert_int_equal(kvs_triage_hop_by_name("kv"), -1);
    assert_string_equal(kvs_triage_hop_name(KVS_TRIAGE_N), "?");

    walk(triage_kv_1, triage_kv_2, NULL, NULL, &t);

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_triage_write(&t, &b, &err), KVS_OK);
    assert_int_equal(kvs_buf_append(&b, "", 1), KVS_OK);
    s = (char *) b.data;

    /* every hop, in the walk's order, one line each */
    p = s;
    for (h = 0; h < KVS_TRIAGE_N; h++) {
        snprintf(line, sizeof(line), "\n%u %s ", h + 1,
                 kvs_triage_hop_name((kvs_triage_hop_t) h));
        p = strstr(p, line);
        assert_non_null(p);
    }

    assert_non_null(strstr(s, "\n7 kv_cache     OUT "));
    assert_non_null(strstr(s, "\n3 tokenization ok "));
    assert_non_null(strstr(s, "\n5 route        -  "));
    assert_non_null(strstr(s, "\nguilty: kv_cache\n"));
    assert_non_null(strstr(s, "[kvserve:num_preemptions_total]"));

    kvs_buf_free(&b);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_scrape),
        cmocka_unit_test(test_parse_syntax),
        cmocka_unit_test(test_hist),
        cmocka_unit_test(test_walk_kv),
        cmocka_unit_test(test_walk_tokenization),
        cmocka_unit_test(test_walk_healthy),
        cmocka_unit_test(test_walk_consequence),
        cmocka_unit_test(test_report),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
