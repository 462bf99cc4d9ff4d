/*
 * test_metrics: per-request hops, Server-Timing and the Prometheus
 * exposition (src/metrics/kvs_metrics.c).
 *
 * Expected values are written by hand from the definitions: vLLM's
 * bucket bounds (docs/api.md), the hop intervals, milliseconds with three
 * decimals cut (not rounded), the text format 0.0.4 (every line HELP,
 * TYPE or `name{labels} value`, buckets cumulative, +Inf = _count).  Two
 * processes adding to one shared mapping lose no observation.
 */

#include "kvs_test.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "metrics/kvs_metrics.h"


static kvs_metrics_t *
new_metrics(uint32_t n, const char *const *names, const uint32_t *len)
{
    size_t          size;
    kvs_err_t       err;
    kvs_metrics_t  *m;

    size = kvs_metrics_size(n);
    m = malloc(size);
    assert_non_null(m);
    assert_int_equal(kvs_metrics_init(m, size, n, names, len, &err), KVS_OK);

    return m;
}


/* The exposition as a NUL-terminated string (owned by the caller). */
static char *
expose(const kvs_metrics_t *m, const kvs_metrics_gauges_t *g)
{
    kvs_buf_t  b;
    kvs_err_t  err;

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_metrics_write(m, g, &b, &err), KVS_OK);
    assert_int_equal(kvs_buf_append(&b, "", 1), KVS_OK);

    return (char *) b.data;
}


/* The value of the sample line that starts with key (up to the space),
 * or -1 when there is none. */
static double
sample(const char *text, const char *key)
{
    size_t       n;
    const char  *p;

    n = strlen(key);

    for (p = text; p != NULL && *p; p = strchr(p, '\n'), p = p ? p + 1 : p) {
        if (strncmp(p, key, n) == 0 && p[n] == ' ') {
            return strtod(p + n + 1, NULL);
        }
    }

    return -1;
}


/* Every line is a comment of the two kinds or `name{labels} number`;
 * the text ends with a newline; every TYPE comes before its samples and
 * appears once. */
static void
check_format(const char *text)
{
    char         line[1024], name[256], types[64][128];
    size_t       len, n_types, i, k;
    const char  *p, *nl, *brace, *sp;
    char        *end;

    n_types = 0;
    len = strlen(text);
    assert_true(len > 0);
    assert_int_equal(text[len - 1], '\n');

    for (p = text; *p; p = nl + 1) {
        nl = strchr(p, '\n');
        assert_non_null(nl);
        assert_true((size_t) (nl - p) < sizeof(line));
        memcpy(line, p, nl - p);
        line[nl - p] = '\0';

        if (strncmp(line, "# HELP kvserve:", 15) == 0) {
            continue;
        }

        if (strncmp(line, "# TYPE ", 7) == 0) {
            assert_true(n_types < 64);
            sp = strchr(line + 7, ' ');
            assert_non_null(sp);
            assert_true(strcmp(sp + 1, "counter") == 0
                        || strcmp(sp + 1, "gauge") == 0
                        || strcmp(sp + 1, "histogram") == 0);
            for (i = 0; i < n_types; i++) {
                assert_true(strncmp(types[i], line + 7, sp - line - 7) != 0
                            || types[i][sp - line - 7] != '\0');
            }
            memcpy(types[n_types], line + 7, sp - line - 7);
            types[n_types][sp - line - 7] = '\0';
            n_types++;
            continue;
        }

        assert_true(line[0] != '#');
        brace = strchr(line, '{');
        assert_non_null(brace);
        assert_true(strncmp(line, "kvserve:", 8) == 0);
        for (k = 0; line + k < brace; k++) {
            assert_true(line[k] == ':' || line[k] == '_'
                        || (line[k] >= 'a' && line[k] <= 'z')
                        || (line[k] >= '0' && line[k] <= '9'));
        }
        memcpy(name, line, brace - line);
        name[brace - line] = '\0';

        sp = strstr(brace, "} ");
        assert_non_null(sp);
        assert_non_null(strstr(brace, "model_name=\""));
        strtod(sp + 2, &end);
        assert_true(end != sp + 2 && *end == '\0');

        /* its family's TYPE came before it */
        for (i = 0; i < n_types; i++) {
            k = strlen(types[i]);
            if (strncmp(name, types[i], k) == 0
                && (name[k] == '\0' || strcmp(name + k, "_bucket") == 0
                    || strcmp(name + k, "_count") == 0
                    || strcmp(name + k, "_sum") == 0))
            {
                break;
            }
        }
        assert_true(i < n_types);
    }
}


/* --- hops ---------------------------------------------------------------- */

static void
test_hops(void **state)
{
    char             ms[KVS_METRICS_MS_LEN];
    uint64_t         ns;
    kvs_req_times_t  t;

    (void) state;

    assert_int_equal(kvs_metrics_fmt_ms(ms, 0), 5);
    assert_string_equal(ms, "0.000");
    kvs_metrics_fmt_ms(ms, 999);
    assert_string_equal(ms, "0.000");
    kvs_metrics_fmt_ms(ms, 1234567);
    assert_string_equal(ms, "1.234");
    kvs_metrics_fmt_ms(ms, 12345678901ULL);
    assert_string_equal(ms, "12345.678");

    memset(&t, 0, sizeof(t));
    assert_int_equal(kvs_req_times_hop(&t, KVS_HOP_TOTAL, &ns),
                     KVS_ENOTFOUND);

    t.start_ns = 1000000000;
    t.body_ns = t.start_ns + 100000;           /* 0.1 ms */
    t.parse_ns = t.body_ns + 20000;
    t.tokenize_ns = t.parse_ns + 30000;
    t.submit_ns = t.tokenize_ns + 1000;
    t.recv_ns = t.submit_ns + 50000;
    t.engine_first_ns = t.recv_ns + 4000000;
    t.first_ns = t.engine_first_ns + 60000;
    t.last_ns = t.first_ns + 9000000;
    t.end_ns = t.last_ns + 7000;
    t.itl_sum_ns = 9000000;
    t.itl_n = 3;

    assert_int_equal(kvs_req_times_hop(&t, KVS_HOP_BODY, &ns), KVS_OK);
    assert_int_equal(ns, 100000);
    assert_int_equal(kvs_req_times_hop(&t, KVS_HOP_LIMIT, &ns), KVS_OK);
    assert_int_equal(ns, 1000);
    assert_int_equal(kvs_req_times_hop(&t, KVS_HOP_QUEUE, &ns), KVS_OK);
    assert_int_equal(ns, 50000);
    assert_int_equal(kvs_req_times_hop(&t, KVS_HOP_PREFILL, &ns), KVS_OK);
    assert_int_equal(ns, 4000000);
    assert_int_equal(kvs_req_times_hop(&t, KVS_HOP_TTFT, &ns), KVS_OK);
    assert_int_equal(ns, 100000 + 20000 + 30000 + 1000 + 50000 + 4000000
                         + 60000);
    assert_int_equal(kvs_req_times_hop(&t, KVS_HOP_ITL, &ns), KVS_OK);
    assert_int_equal(ns, 3000000);
    assert_int_equal(kvs_req_times_hop(&t, KVS_HOP_TOTAL, &ns), KVS_OK);
    assert_int_equal(ns, 4261000 + 9000000 + 7000);

    /* a point out of order is not a negative duration */
    t.recv_ns = t.submit_ns - 1;
    assert_int_equal(kvs_req_times_hop(&t, KVS_HOP_QUEUE, &ns),
                     KVS_ENOTFOUND);
}


static void
test_server_timing(void **state)
{
    kvs_buf_t        b;
    kvs_err_t        err;
    kvs_req_times_t  t;

    (void) state;

    memset(&b, 0, sizeof(b));
    memset(&t, 0, sizeof(t));

    assert_int_equal(kvs_req_times_server_timing(&t, &b, &err), KVS_OK);
    assert_int_equal(b.len, 0);

    t.start_ns = 5000000;
    t.body_ns = 5120000;
    t.parse_ns = 5130000;
    t.end_ns = 7000000;

    assert_int_equal(kvs_req_times_server_timing(&t, &b, &err), KVS_OK);
    assert_int_equal(kvs_buf_append(&b, "", 1), KVS_OK);
    assert_string_equal((char *) b.data,
                        "body;dur=0.120, parse;dur=0.010, total;dur=2.000");
    kvs_buf_free(&b);

    assert_string_equal(kvs_hop_name(KVS_HOP_TOKENIZE), "tokenize");
    assert_string_equal(kvs_hop_name(KVS_HOP_LIMIT), "limit");
    assert_string_equal(kvs_hop_name(KVS_HOP_N), "?");

    /* limit sits between tokenize and queue */
    t.tokenize_ns = 5200000;
    t.submit_ns = 5450000;
    t.recv_ns = 5460000;
    assert_int_equal(kvs_req_times_server_timing(&t, &b, &err), KVS_OK);
    assert_int_equal(kvs_buf_append(&b, "", 1), KVS_OK);
    assert_string_equal((char *) b.data,
                        "body;dur=0.120, parse;dur=0.010, "
                        "tokenize;dur=0.070, limit;dur=0.250, "
                        "queue;dur=0.010, total;dur=2.000");
    kvs_buf_free(&b);
}


/* The worker's hops go to their histograms as each ends, the others not
 * at all; the exposition shows them with the hop buckets (100 us ...). */
static void
test_worker_hops(void **state)
{
    char                 *text;
    unsigned              h;
    uint32_t              len = 512;
    kvs_metrics_t        *m;
    kvs_req_times_t       t;
    const char           *names[] = { "m" };

    (void) state;

    m = new_metrics(1, names, &len);

    memset(&t, 0, sizeof(t));
    t.start_ns = 1000000000;
    t.body_ns = t.start_ns + 2000000;          /* 2 ms: le 0.0025 */
    t.parse_ns = t.body_ns + 10000;
    t.tokenize_ns = t.parse_ns + 80000;        /* 80 us: le 0.0001 */
    t.submit_ns = t.tokenize_ns + 300000000;   /* 0.3 s: le 0.5 */
    t.recv_ns = t.submit_ns + 1000;

    kvs_metrics_hop(m, 0, &t, KVS_HOP_BODY);
    kvs_metrics_hop(m, 0, &t, KVS_HOP_TOKENIZE);
    kvs_metrics_hop(m, 0, &t, KVS_HOP_LIMIT);
    kvs_metrics_hop(m, 0, &t, KVS_HOP_QUEUE);    /* not a worker's hop */
    kvs_metrics_hop(m, 1, &t, KVS_HOP_BODY);     /* no such model */

    for (h = 0; h < KVS_HIST_N; h++) {
        if (h != KVS_HIST_BODY && h != KVS_HIST_TOKENIZE
            && h != KVS_HIST_LIMIT)
        {
            assert_int_equal(m->models[0].hist[h].sum, 0);
        }
    }
    assert_int_equal(m->models[0].hist[KVS_HIST_BODY].sum, 2000000);
    assert_int_equal(m->models[0].hist[KVS_HIST_TOKENIZE].sum, 80000);
    assert_int_equal(m->models[0].hist[KVS_HIST_LIMIT].sum, 300000000);

    /* a hop not reached is not observed */
    t.submit_ns = 0;
    kvs_metrics_hop(m, 0, &t, KVS_HOP_LIMIT);
    assert_int_equal(m->models[0].hist[KVS_HIST_LIMIT].sum, 300000000);

    text = expose(m, NULL);
    check_format(text);
    assert_true(sample(text, "kvserve:request_body_time_seconds_bucket"
                       "{model_name=\"m\",le=\"0.001\"}") == 0);
    assert_true(sample(text, "kvserve:request_body_time_seconds_bucket"
                       "{model_name=\"m\",le=\"0.0025\"}") == 1);
    assert_true(sample(text, "kvserve:request_tokenize_time_seconds_bucket"
                       "{model_name=\"m\",le=\"0.0001\"}") == 1);
    assert_true(sample(text, "kvserve:request_limit_time_seconds_bucket"
                       "{model_name=\"m\",le=\"0.25\"}") == 0);
    assert_true(sample(text, "kvserve:request_limit_time_seconds_bucket"
                       "{model_name=\"m\",le=\"0.5\"}") == 1);
    assert_true(sample(text, "kvserve:request_limit_time_seconds_count"
                       "{model_name=\"m\"}") == 1);
    assert_true(fabs(sample(text, "kvserve:request_limit_time_seconds_sum"
                            "{model_name=\"m\"}") - 0.3) < 1e-9);

    free(text);
    free(m);
}


/* --- exposition ---------------------------------------------------------- */

static void
test_layout(void **state)
{
    char                 long_name[KVS_METRICS_NAME_MAX + 2];
    size_t               size;
    kvs_err_t            err;
    kvs_metrics_t       *m;
    uint32_t             len[2] = { 512, 4000000000u };
    const char          *names[2] = { "a", "b" };
    const char          *bad[1] = { long_name };

    (void) state;

    m = new_metrics(2, names, len);

    /* vLLM's build_1_2_5_buckets(512) and (4e9) */
    assert_int_equal(m->models[0].n_tok_bounds, 9);
    assert_int_equal(m->models[0].tok_bounds[8], 500);
    assert_int_equal(m->models[1].n_tok_bounds, 29);  /* 9 decades, 1e9, 2e9 */
    assert_int_equal(m->models[1].tok_bounds[28], 2000000000ULL);

    size = kvs_metrics_size(2);
    assert_true(kvs_metrics_same(m, size, 2, names, len));
    len[0] = 1024;
    assert_false(kvs_metrics_same(m, size, 2, names, len));
    assert_false(kvs_metrics_same(m, size, 1, names, len));
    assert_false(kvs_metrics_same(m, size - 1, 2, names, len));

    assert_int_equal(kvs_metrics_init(m, size - 1, 2, names, len, &err),
                     KVS_EINVAL);
    memset(long_name, 'x', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    assert_int_equal(kvs_metrics_init(m, size, 1, bad, len, &err),
                     KVS_EINVAL);

    free(m);
}


static void
test_exposition(void **state)
{
    char                  *text;
    kvs_metrics_t         *m;
    kvs_req_times_t        t;
    kvs_metrics_gauges_t   g[2];
    uint32_t               len[2] = { 512, 64 };
    const char            *names[2] = { "m1", "a\"b\\c" };

    (void) state;

    m = new_metrics(2, names, len);

    /* nothing yet: every family, every series at 0, no gauges */
    text = expose(m, NULL);
    check_format(text);
    assert_null(strstr(text, "num_requests_running"));
    assert_int_equal(sample(text, "kvserve:prompt_tokens_total"
                            "{model_name=\"m1\"}"), 0);
    assert_int_equal(sample(text, "kvserve:request_success_total"
                            "{model_name=\"m1\",finished_reason=\"abort\"}"),
                     0);
    assert_non_null(strstr(text, "{model_name=\"a\\\"b\\\\c\"}"));
    free(text);

    /* TTFT: 1 ms exactly is in le=0.001; 3 ms in le=0.005; 3000 s above
     * every bound */
    kvs_metrics_observe(m, 0, KVS_HIST_TTFT, 1000000, 1);
    kvs_metrics_observe(m, 0, KVS_HIST_TTFT, 3000000, 1);
    kvs_metrics_observe(m, 0, KVS_HIST_TTFT, 3000000000000ULL, 1);
    /* ITL: 20 ms, 4 tokens */
    kvs_metrics_observe(m, 0, KVS_HIST_ITL, 20000000, 4);
    /* ignored */
    kvs_metrics_observe(m, 2, KVS_HIST_TTFT, 1, 1);
    kvs_metrics_observe(m, 0, KVS_HIST_N, 1, 1);

    memset(&t, 0, sizeof(t));
    t.start_ns = 1000;
    t.end_ns = 1000 + 700000000;               /* 0.7 s */
    t.submit_ns = 2000;
    t.recv_ns = 3000;
    kvs_metrics_request(m, 0, &t, 7, 300, 2, KVS_REASON_LENGTH);
    kvs_metrics_request(m, 0, &t, 600, 0, 0, KVS_REASON_ABORT);
    kvs_metrics_request(m, 1, &t, 3, 1, 0, KVS_REASON_STOP);

    memset(g, 0, sizeof(g));
    g[0].have = 1;
    g[0].running = 3;
    g[0].waiting = 1;
    g[0].kv_blocks = 8;
    g[0].kv_used = 2;

    /* availability unknown (as the glue leaves it with no engines): no
     * family */
    text = expose(m, g);
    assert_null(strstr(text, "model_available"));
    free(text);

    /* m1's engine serves; the other's is down (and did not report) */
    g[0].available = KVS_METRICS_AVAIL_UP;
    g[1].available = KVS_METRICS_AVAIL_DOWN;

    text = expose(m, g);
    check_format(text);
    assert_int_equal(sample(text, "kvserve:model_available"
                            "{model_name=\"m1\"}"), 1);
    assert_int_equal(sample(text, "kvserve:model_available"
                            "{model_name=\"a\\\"b\\\\c\"}"), 0);

#define KEY(name, labels)  "kvserve:" name "{model_name=\"m1\"" labels "}"

    assert_int_equal(sample(text, KEY("num_requests_running", "")), 3);
    assert_int_equal(sample(text, KEY("num_requests_waiting", "")), 1);
    assert_true(sample(text, KEY("kv_cache_usage_perc", "")) == 0.25);
    assert_true(sample(text, KEY("gpu_cache_usage_perc", "")) == 0.25);
    /* the model the engine did not report has no gauge */
    assert_null(strstr(text, "kvserve:num_requests_running{model_name=\"a"));

    assert_int_equal(sample(text, KEY("prompt_tokens_total", "")), 607);
    assert_int_equal(sample(text, KEY("generation_tokens_total", "")), 300);
    assert_int_equal(sample(text, KEY("num_preemptions_total", "")), 2);
    assert_int_equal(sample(text, KEY("request_success_total",
                                      ",finished_reason=\"length\"")), 1);
    assert_int_equal(sample(text, KEY("request_success_total",
                                      ",finished_reason=\"abort\"")), 1);
    assert_int_equal(sample(text, KEY("request_success_total",
                                      ",finished_reason=\"stop\"")), 0);

    assert_int_equal(sample(text, KEY("time_to_first_token_seconds_bucket",
                                      ",le=\"0.001\"")), 1);
    assert_int_equal(sample(text, KEY("time_to_first_token_seconds_bucket",
                                      ",le=\"0.005\"")), 2);
    assert_int_equal(sample(text, KEY("time_to_first_token_seconds_bucket",
                                      ",le=\"2560.0\"")), 2);
    assert_int_equal(sample(text, KEY("time_to_first_token_seconds_bucket",
                                      ",le=\"+Inf\"")), 3);
    assert_int_equal(sample(text, KEY("time_to_first_token_seconds_count",
                                      "")), 3);
    assert_true(sample(text, KEY("time_to_first_token_seconds_sum", ""))
                == 3000.004);

    assert_int_equal(sample(text, KEY("inter_token_latency_seconds_bucket",
                                      ",le=\"0.01\"")), 0);
    assert_int_equal(sample(text, KEY("inter_token_latency_seconds_bucket",
                                      ",le=\"0.025\"")), 4);
    assert_int_equal(sample(text, KEY("time_per_output_token_seconds_count",
                                      "")), 4);
    assert_true(sample(text, KEY("inter_token_latency_seconds_sum", ""))
                == 0.08);

    /* e2e 0.7 s: not in le=0.5, in le=0.8; queue 1 us */
    assert_int_equal(sample(text, KEY("e2e_request_latency_seconds_bucket",
                                      ",le=\"0.5\"")), 0);
    assert_int_equal(sample(text, KEY("e2e_request_latency_seconds_bucket",
                                      ",le=\"0.8\"")), 2);
    assert_int_equal(sample(text, KEY("request_queue_time_seconds_bucket",
                                      ",le=\"0.3\"")), 2);
    /* not reached: no observation */
    assert_int_equal(sample(text, KEY("request_decode_time_seconds_count",
                                      "")), 0);

    /* tokens: 7 in le=10, 600 above 500 (the last bound under 512) */
    assert_int_equal(sample(text, KEY("request_prompt_tokens_bucket",
                                      ",le=\"5.0\"")), 0);
    assert_int_equal(sample(text, KEY("request_prompt_tokens_bucket",
                                      ",le=\"10.0\"")), 1);
    assert_int_equal(sample(text, KEY("request_prompt_tokens_bucket",
                                      ",le=\"500.0\"")), 1);
    assert_int_equal(sample(text, KEY("request_prompt_tokens_bucket",
                                      ",le=\"+Inf\"")), 2);
    assert_int_equal(sample(text, KEY("request_prompt_tokens_sum", "")),
                     607);
    assert_int_equal(sample(text, KEY("request_generation_tokens_bucket",
                                      ",le=\"1.0\"")), 1);
    assert_null(strstr(text, "request_prompt_tokens_bucket{model_name="
                             "\"m1\",le=\"1000.0\"}"));

#undef KEY

    /* the second model's own bounds stop at 50 (context 64) */
    assert_int_equal(sample(text, "kvserve:request_prompt_tokens_bucket"
                            "{model_name=\"a\\\"b\\\\c\",le=\"50.0\"}"), 1);
    assert_null(strstr(text, "{model_name=\"a\\\"b\\\\c\",le=\"100.0\"}"));

    free(text);
    free(m);
}


/* The engine's tenants: labelled by the first 12 bytes of their keys,
 * "none" for the empty key, "other" only when some tenant is not shown;
 * a model the engine did not report has none. */
/* vLLM's request-parameter histograms (counts, not seconds), the
 * engine's iteration buckets and cache_config_info, from the gauges. */
static void
test_params_iter_config(void **state)
{
    char                  *text;
    kvs_metrics_t         *m;
    kvs_metrics_gauges_t   g[2];
    uint32_t               len[2] = { 100, 64 };
    const char            *names[2] = { "m1", "m2" };

    (void) state;

    m = new_metrics(2, names, len);

    /* n: 1, 2 and 3 (le=5), 50 above every bound (1 2 5 10 20) */
    kvs_metrics_observe(m, 0, KVS_HIST_PARAMS_N, 1, 1);
    kvs_metrics_observe(m, 0, KVS_HIST_PARAMS_N, 2, 1);
    kvs_metrics_observe(m, 0, KVS_HIST_PARAMS_N, 3, 1);
    kvs_metrics_observe(m, 0, KVS_HIST_PARAMS_N, 50, 1);
    /* max_tokens on the model's 1-2-5 bounds up to 100 */
    kvs_metrics_observe(m, 0, KVS_HIST_PARAMS_MAX_TOKENS, 16, 1);
    kvs_metrics_observe(m, 0, KVS_HIST_MAX_GEN_TOKENS, 100, 1);
    kvs_metrics_observe(m, 0, KVS_HIST_MAX_GEN_TOKENS, 101, 1);

    memset(g, 0, sizeof(g));

    /* no engine answered, no configuration: neither family */
    text = expose(m, g);
    check_format(text);
    assert_null(strstr(text, "iteration_tokens_total"));
    assert_null(strstr(text, "cache_config_info"));

    assert_int_equal(sample(text, "kvserve:request_params_n_bucket"
                            "{model_name=\"m1\",le=\"1.0\"}"), 1);
    assert_int_equal(sample(text, "kvserve:request_params_n_bucket"
                            "{model_name=\"m1\",le=\"2.0\"}"), 2);
    assert_int_equal(sample(text, "kvserve:request_params_n_bucket"
                            "{model_name=\"m1\",le=\"5.0\"}"), 3);
    assert_int_equal(sample(text, "kvserve:request_params_n_bucket"
                            "{model_name=\"m1\",le=\"20.0\"}"), 3);
    assert_int_equal(sample(text, "kvserve:request_params_n_bucket"
                            "{model_name=\"m1\",le=\"+Inf\"}"), 4);
    /* a count's sum is a count, not seconds */
    assert_int_equal(sample(text, "kvserve:request_params_n_sum"
                            "{model_name=\"m1\"}"), 56);
    assert_int_equal(sample(text, "kvserve:request_params_max_tokens_bucket"
                            "{model_name=\"m1\",le=\"10.0\"}"), 0);
    assert_int_equal(sample(text, "kvserve:request_params_max_tokens_bucket"
                            "{model_name=\"m1\",le=\"20.0\"}"), 1);
    assert_int_equal(sample(text, "kvserve:request_max_num_generation_"
                            "tokens_bucket{model_name=\"m1\",le=\"100.0\"}"),
                     1);
    assert_int_equal(sample(text, "kvserve:request_max_num_generation_"
                            "tokens_count{model_name=\"m1\"}"), 2);
    assert_int_equal(sample(text, "kvserve:request_max_num_generation_"
                            "tokens_sum{model_name=\"m1\"}"), 201);
    free(text);

    /* model 0's engine answered: 3 steps of 1 token, 2 of 9..16, 1 over
     * 16384; model 1's configuration only */
    g[0].have = 1;
    g[0].iter_tokens[0] = 3;
    g[0].iter_tokens[2] = 2;
    g[0].iter_tokens[KVS_METRICS_ITER_BOUNDS] = 1;
    g[0].iter_tokens_sum = 3 + 25 + 20000;
    g[1].block_size = 16;
    g[1].num_blocks = 1024;
    g[1].cache_dtype = "f16";
    g[1].prefix_caching = 1;

    text = expose(m, g);
    check_format(text);
    assert_int_equal(sample(text, "kvserve:iteration_tokens_total_bucket"
                            "{model_name=\"m1\",le=\"1.0\"}"), 3);
    assert_int_equal(sample(text, "kvserve:iteration_tokens_total_bucket"
                            "{model_name=\"m1\",le=\"8.0\"}"), 3);
    assert_int_equal(sample(text, "kvserve:iteration_tokens_total_bucket"
                            "{model_name=\"m1\",le=\"16.0\"}"), 5);
    assert_int_equal(sample(text, "kvserve:iteration_tokens_total_bucket"
                            "{model_name=\"m1\",le=\"16384.0\"}"), 5);
    assert_int_equal(sample(text, "kvserve:iteration_tokens_total_bucket"
                            "{model_name=\"m1\",le=\"+Inf\"}"), 6);
    assert_int_equal(sample(text, "kvserve:iteration_tokens_total_count"
                            "{model_name=\"m1\"}"), 6);
    assert_int_equal(sample(text, "kvserve:iteration_tokens_total_sum"
                            "{model_name=\"m1\"}"), 20028);
    /* only for the engine that answered */
    assert_null(strstr(text, "iteration_tokens_total_count"
                       "{model_name=\"m2\"}"));

    assert_int_equal(sample(text, "kvserve:cache_config_info"
                            "{model_name=\"m2\",block_size=\"16\","
                            "cache_dtype=\"f16\",enable_prefix_caching="
                            "\"True\",num_gpu_blocks=\"1024\"}"), 1);
    assert_null(strstr(text, "cache_config_info{model_name=\"m1\""));
    free(text);

    /* a dtype that would need escaping never reaches a label */
    g[1].cache_dtype = "f\"16";
    g[1].prefix_caching = 0;
    text = expose(m, g);
    check_format(text);
    assert_int_equal(sample(text, "kvserve:cache_config_info"
                            "{model_name=\"m2\",block_size=\"16\","
                            "cache_dtype=\"?\",enable_prefix_caching="
                            "\"False\",num_gpu_blocks=\"1024\"}"), 1);
    free(text);

    free(m);
}


static void
test_tenants(void **state)
{
    char                   *text;
    kvs_metrics_t          *m;
    kvs_metrics_gauges_t    g[2];
    kvs_metrics_tenants_t  *tn;
    uint32_t                len[2] = { 512, 64 };
    const char             *names[2] = { "m1", "m2" };

    (void) state;

    m = new_metrics(2, names, len);

    /* no engine answer: no tenant family at all */
    text = expose(m, NULL);
    assert_null(strstr(text, "tenant"));
    free(text);

    memset(g, 0, sizeof(g));
    g[0].have = 1;
    tn = &g[0].tenants;
    tn->n_top = 3;
    tn->n_tenants = 5;
    tn->top[0].key = "0f3c9a7e51d24b86a0e97c1f5d3b2a64";
    tn->top[0].key_len = 32;
    tn->top[0].prefill = 1200;
    tn->top[0].decode = 34;
    tn->top[0].kv_blocks = 7;
    tn->top[1].key_len = 0;                    /* no kvserve_limit */
    tn->top[1].prefill = 5;
    tn->top[1].decode = 6;
    tn->top[2].key = "a\"b\n";               /* not nginx's: no escape */
    tn->top[2].key_len = 4;
    tn->top[2].decode = UINT64_MAX;
    tn->other.prefill = 11;
    tn->other.decode = 12;
    tn->other.kv_blocks = 13;

    text = expose(m, g);
    check_format(text);

#define KEY(name, t) \
    "kvserve:" name "{model_name=\"m1\",tenant=\"" t "\"}"

    assert_int_equal(sample(text, KEY("tenant_prefill_tokens_total",
                                      "0f3c9a7e51d2")), 1200);
    assert_int_equal(sample(text, KEY("tenant_decode_tokens_total",
                                      "0f3c9a7e51d2")), 34);
    assert_int_equal(sample(text, KEY("tenant_kv_blocks", "0f3c9a7e51d2")),
                     7);
    assert_int_equal(sample(text, KEY("tenant_prefill_tokens_total",
                                      "none")), 5);
    assert_int_equal(sample(text, KEY("tenant_decode_tokens_total",
                                      "none")), 6);
    assert_true(sample(text, KEY("tenant_decode_tokens_total", "a_b_"))
                == (double) UINT64_MAX);
    assert_int_equal(sample(text, KEY("tenant_prefill_tokens_total",
                                      "other")), 11);
    assert_int_equal(sample(text, KEY("tenant_decode_tokens_total",
                                      "other")), 12);
    assert_int_equal(sample(text, KEY("tenant_kv_blocks", "other")), 13);
    /* never more than the 12 bytes of a key */
    assert_null(strstr(text, "0f3c9a7e51d24"));
    assert_null(strstr(text, "tenant_kv_blocks{model_name=\"m2\""));
    assert_non_null(strstr(text, "# TYPE kvserve:tenant_prefill_tokens_total "
                                 "counter\n"));
    assert_non_null(strstr(text, "# TYPE kvserve:tenant_kv_blocks gauge\n"));
    free(text);

    /* every tenant shown: no "other" */
    tn->n_tenants = 3;
    text = expose(m, g);
    check_format(text);
    assert_null(strstr(text, "tenant=\"other\""));
    assert_int_equal(sample(text, KEY("tenant_kv_blocks", "0f3c9a7e51d2")),
                     7);
    free(text);

    /* the engine knows no tenant yet: the families, no samples */
    memset(tn, 0, sizeof(*tn));
    text = expose(m, g);
    check_format(text);
    assert_null(strstr(text, "tenant=\""));
    free(text);

#undef KEY

    free(m);
}


/* What test_engine_families' gauges expose, from the tenants' head to
 * the last adapters' sample: the text kvs_metrics_engine.c wrote before
 * its three families shared one writer. */
static const char  engine_families_text[] =
    "# HELP kvserve:tenant_prefill_tokens_total Prompt tokens the engine "
    "computed for a tenant (the hash of its kvserve_limit key), since the "
    "engine first saw it.\n"
    "# TYPE kvserve:tenant_prefill_tokens_total counter\n"
    "kvserve:tenant_prefill_tokens_total{model_name=\"m1\",tenant=\"c0ffee\"}"
    " 300\n"
    "kvserve:tenant_prefill_tokens_total{model_name=\"m1\",tenant=\"other\"} "
    "9\n"
    "kvserve:tenant_prefill_tokens_total{model_name=\"m2\",tenant=\"other\"} "
    "1\n"
    "# HELP kvserve:tenant_decode_tokens_total Generated tokens the engine "
    "computed for a tenant, since the engine first saw it.\n"
    "# TYPE kvserve:tenant_decode_tokens_total counter\n"
    "kvserve:tenant_decode_tokens_total{model_name=\"m1\",tenant=\"c0ffee\"} "
    "40\n"
    "kvserve:tenant_decode_tokens_total{model_name=\"m1\",tenant=\"other\"} "
    "8\n"
    "kvserve:tenant_decode_tokens_total{model_name=\"m2\",tenant=\"other\"} "
    "2\n"
    "# HELP kvserve:tenant_kv_blocks KV blocks a tenant's running sequences "
    "hold.\n"
    "# TYPE kvserve:tenant_kv_blocks gauge\n"
    "kvserve:tenant_kv_blocks{model_name=\"m1\",tenant=\"c0ffee\"} 5\n"
    "kvserve:tenant_kv_blocks{model_name=\"m1\",tenant=\"other\"} 1\n"
    "kvserve:tenant_kv_blocks{model_name=\"m2\",tenant=\"other\"} 3\n"
    "# HELP kvserve:kv_pool_blocks_max KV blocks the pool's requests may "
    "hold.\n"
    "# TYPE kvserve:kv_pool_blocks_max gauge\n"
    "kvserve:kv_pool_blocks_max{model_name=\"m1\",pool=\"short\"} 96\n"
    "kvserve:kv_pool_blocks_max{model_name=\"m1\",pool=\"long\"} 160\n"
    "# HELP kvserve:kv_pool_blocks_used KV blocks held by the pool's running "
    "requests.\n"
    "# TYPE kvserve:kv_pool_blocks_used gauge\n"
    "kvserve:kv_pool_blocks_used{model_name=\"m1\",pool=\"short\"} 12\n"
    "kvserve:kv_pool_blocks_used{model_name=\"m1\",pool=\"long\"} 140\n"
    "# HELP kvserve:kv_pool_queued Requests of the pool waiting to be "
    "admitted.\n"
    "# TYPE kvserve:kv_pool_queued gauge\n"
    "kvserve:kv_pool_queued{model_name=\"m1\",pool=\"short\"} 0\n"
    "kvserve:kv_pool_queued{model_name=\"m1\",pool=\"long\"} 3\n"
    "# HELP kvserve:kv_pool_admitted_total Requests the pool admitted since "
    "the engine started.\n"
    "# TYPE kvserve:kv_pool_admitted_total counter\n"
    "kvserve:kv_pool_admitted_total{model_name=\"m1\",pool=\"short\"} 1000\n"
    "kvserve:kv_pool_admitted_total{model_name=\"m1\",pool=\"long\"} 25\n"
    "# HELP kvserve:kv_pool_waited_total Of those, requests admitted after "
    "waiting in the queue.\n"
    "# TYPE kvserve:kv_pool_waited_total counter\n"
    "kvserve:kv_pool_waited_total{model_name=\"m1\",pool=\"short\"} 0\n"
    "kvserve:kv_pool_waited_total{model_name=\"m1\",pool=\"long\"} 7\n"
    "# HELP kvserve:kv_pool_wait_seconds_total Their time waiting in the "
    "queue.\n"
    "# TYPE kvserve:kv_pool_wait_seconds_total counter\n"
    "kvserve:kv_pool_wait_seconds_total{model_name=\"m1\",pool=\"short\"} "
    "0.001\n"
    "kvserve:kv_pool_wait_seconds_total{model_name=\"m1\",pool=\"long\"} "
    "123.456\n"
    "# HELP kvserve:kv_pool_refused_total Requests not admitted within "
    "kvserve_queue_timeout (503).\n"
    "# TYPE kvserve:kv_pool_refused_total counter\n"
    "kvserve:kv_pool_refused_total{model_name=\"m1\",pool=\"short\"} 0\n"
    "kvserve:kv_pool_refused_total{model_name=\"m1\",pool=\"long\"} 2\n"
    "# HELP kvserve:lora_adapters LoRA adapters the model serves.\n"
    "# TYPE kvserve:lora_adapters gauge\n"
    "kvserve:lora_adapters{model_name=\"m2\"} 8\n"
    "# HELP kvserve:lora_slots LoRA adapters resident at most "
    "(kvserve_lora_slots).\n"
    "# TYPE kvserve:lora_slots gauge\n"
    "kvserve:lora_slots{model_name=\"m2\"} 4\n"
    "# HELP kvserve:lora_resident LoRA adapters resident now.\n"
    "# TYPE kvserve:lora_resident gauge\n"
    "kvserve:lora_resident{model_name=\"m2\"} 3\n"
    "# HELP kvserve:lora_waiting Requests waiting for their adapter to be "
    "loaded.\n"
    "# TYPE kvserve:lora_waiting gauge\n"
    "kvserve:lora_waiting{model_name=\"m2\"} 2\n"
    "# HELP kvserve:lora_loads_total Adapters loaded since the engine "
    "started (not at its start).\n"
    "# TYPE kvserve:lora_loads_total counter\n"
    "kvserve:lora_loads_total{model_name=\"m2\"} 17\n"
    "# HELP kvserve:lora_evictions_total Adapters unloaded to make room for "
    "another.\n"
    "# TYPE kvserve:lora_evictions_total counter\n"
    "kvserve:lora_evictions_total{model_name=\"m2\"} 13\n"
    "# HELP kvserve:lora_waited_total Requests that waited for their adapter "
    "to be loaded.\n"
    "# TYPE kvserve:lora_waited_total counter\n"
    "kvserve:lora_waited_total{model_name=\"m2\"} 11\n"
    "# HELP kvserve:lora_wait_seconds_total Their time waiting for it.\n"
    "# TYPE kvserve:lora_wait_seconds_total counter\n"
    "kvserve:lora_wait_seconds_total{model_name=\"m2\"} 2.500\n"
    "# HELP kvserve:lora_load_seconds_total Time the adapters' loader spent "
    "reading and packing adapters (off the step loop).\n"
    "# TYPE kvserve:lora_load_seconds_total counter\n"
    "kvserve:lora_load_seconds_total{model_name=\"m2\"} 12.345678901\n"
    "# HELP kvserve:lora_install_seconds_total Time the step loop spent "
    "putting adapters into slots and taking them out.\n"
    "# TYPE kvserve:lora_install_seconds_total counter\n"
    "kvserve:lora_install_seconds_total{model_name=\"m2\"} 0.000004500\n"
    "# HELP kvserve:lora_install_max_seconds The longest single install or "
    "eviction on the step loop since the engine started.\n"
    "# TYPE kvserve:lora_install_max_seconds gauge\n"
    "kvserve:lora_install_max_seconds{model_name=\"m2\"} 0.000000301\n";


/* The engine's optional families (KV pools, tenants, LoRA adapters)
 * byte for byte: each family's head once, then its rows in model order,
 * only for the models whose engine answered with the feature on (m3's
 * engine did not answer: its pools are left out). */
static void
test_engine_families(void **state)
{
    char                  *text, *from, *to;
    kvs_metrics_t         *m;
    kvs_metrics_gauges_t   g[3];
    uint32_t               len[3] = { 64, 64, 64 };
    const char            *names[3] = { "m1", "m2", "m3" };

    (void) state;

    m = new_metrics(3, names, len);

    memset(g, 0, sizeof(g));
    g[0].have = 1;
    g[0].pools = 1;
    g[0].pool_max[0] = 96;
    g[0].pool_max[1] = 160;
    g[0].pool_used[0] = 12;
    g[0].pool_used[1] = 140;
    g[0].pool_queued[1] = 3;
    g[0].pool_admitted[0] = 1000;
    g[0].pool_admitted[1] = 25;
    g[0].pool_waited[1] = 7;
    g[0].pool_wait_ms[0] = 1;
    g[0].pool_wait_ms[1] = 123456;
    g[0].pool_refused[1] = 2;
    g[0].tenants.n_top = 1;
    g[0].tenants.n_tenants = 4;
    g[0].tenants.top[0].key = "c0ffee";
    g[0].tenants.top[0].key_len = 6;
    g[0].tenants.top[0].prefill = 300;
    g[0].tenants.top[0].decode = 40;
    g[0].tenants.top[0].kv_blocks = 5;
    g[0].tenants.other.prefill = 9;
    g[0].tenants.other.decode = 8;
    g[0].tenants.other.kv_blocks = 1;

    g[1].have = 1;
    g[1].lora_adapters = 8;
    g[1].lora_slots = 4;
    g[1].lora_resident = 3;
    g[1].lora_parked = 2;
    g[1].lora_loads = 17;
    g[1].lora_evictions = 13;
    g[1].lora_waited = 11;
    g[1].lora_wait_ms = 2500;
    g[1].lora_load_ns = 12345678901ull;
    g[1].lora_install_ns = 4500;
    g[1].lora_install_max_ns = 301;
    g[1].tenants.n_tenants = 2;               /* none on top: "other" */
    g[1].tenants.other.prefill = 1;
    g[1].tenants.other.decode = 2;
    g[1].tenants.other.kv_blocks = 3;

    g[2].pools = 1;
    g[2].pool_max[0] = 1;
    g[2].lora_adapters = 1;

    text = expose(m, g);
    check_format(text);

    from = strstr(text, "# HELP kvserve:tenant_prefill_tokens_total ");
    to = strstr(text, "# HELP kvserve:request_success_total ");
    assert_non_null(from);
    assert_non_null(to);
    assert_true(from < to);

    *to = '\0';
    assert_string_equal(from, engine_families_text);

    free(text);
    free(m);
}

/* The lower tiers: m1 has a disk tier, m2 a host tier, m3 both, m4
 * none; the hits by tier name the tiers each has, and each tier's own
 * lines are there for the models that have it. */
static void
test_tiers(void **state)
{
    char                  *text;
    kvs_metrics_t         *m;
    kvs_metrics_gauges_t   g[4];
    uint32_t               i, len[4] = { 64, 64, 64, 64 };
    const char            *names[4] = { "m1", "m2", "m3", "m4" };

    (void) state;

    m = new_metrics(4, names, len);

    memset(g, 0, sizeof(g));
    for (i = 0; i < 4; i++) {
        g[i].have = 1;
        g[i].tier = i == 0 || i == 2;
        g[i].tier_host = i == 1 || i == 2;
        g[i].tier_hit_tokens_pool = 100 + i;
        g[i].tier_hit_tokens_disk = 200 + i;
        g[i].tier_hit_tokens_host = 300 + i;
        g[i].tier_blocks = 10 + i;
        g[i].host_blocks = 20 + i;
        g[i].host_capacity = 30 + i;
        g[i].host_loaded = 40 + i;
        g[i].host_load_ns = 1500000000;
        g[i].host_in_bytes = 50 + i;
        g[i].host_out_bytes = 60 + i;
        g[i].host_spilled = 70 + i;
        g[i].host_evicted = 80 + i;
        g[i].host_copies = 90 + i;
        g[i].host_copy_wait_ns = 2500000000;
        g[i].host_copy_full = 110 + i;
    }

    text = expose(m, g);
    check_format(text);

#define HITS  "kvserve:prefix_cache_hit_tokens_by_tier_total"

    assert_true(sample(text, HITS "{model_name=\"m1\",tier=\"pool\"}")
                == 100);
    assert_true(sample(text, HITS "{model_name=\"m1\",tier=\"disk\"}")
                == 200);
    assert_true(sample(text, HITS "{model_name=\"m1\",tier=\"host\"}")
                == -1);
    assert_true(sample(text, HITS "{model_name=\"m2\",tier=\"pool\"}")
                == 101);
    assert_true(sample(text, HITS "{model_name=\"m2\",tier=\"host\"}")
                == 301);
    assert_true(sample(text, HITS "{model_name=\"m2\",tier=\"disk\"}")
                == -1);
    assert_true(sample(text, HITS "{model_name=\"m3\",tier=\"host\"}")
                == 302);
    assert_true(sample(text, HITS "{model_name=\"m3\",tier=\"disk\"}")
                == 202);
    assert_true(sample(text, HITS "{model_name=\"m4\",tier=\"pool\"}")
                == -1);

    assert_true(sample(text, "kvserve:kv_tier_blocks{model_name=\"m1\"}")
                == 10);
    assert_true(sample(text, "kvserve:kv_tier_blocks{model_name=\"m2\"}")
                == -1);
    assert_true(sample(text, "kvserve:kv_host_tier_blocks{model_name="
                             "\"m2\"}") == 21);
    assert_true(sample(text, "kvserve:kv_host_tier_blocks{model_name="
                             "\"m1\"}") == -1);
    assert_true(sample(text, "kvserve:kv_host_tier_capacity_blocks{"
                             "model_name=\"m3\"}") == 32);
    assert_true(sample(text, "kvserve:kv_host_tier_loaded_blocks_total{"
                             "model_name=\"m3\"}") == 42);
    assert_true(sample(text, "kvserve:kv_host_tier_load_seconds_total{"
                             "model_name=\"m3\"}") == 1.5);
    assert_true(sample(text, "kvserve:kv_host_tier_in_bytes_total{"
                             "model_name=\"m2\"}") == 51);
    assert_true(sample(text, "kvserve:kv_host_tier_out_bytes_total{"
                             "model_name=\"m2\"}") == 61);
    assert_true(sample(text, "kvserve:kv_host_tier_spilled_blocks_total{"
                             "model_name=\"m2\"}") == 71);
    assert_true(sample(text, "kvserve:kv_host_tier_evicted_blocks_total{"
                             "model_name=\"m2\"}") == 81);
    assert_true(sample(text, "kvserve:kv_host_tier_copies{"
                             "model_name=\"m2\"}") == 91);
    assert_true(sample(text, "kvserve:kv_host_tier_copy_wait_seconds_total{"
                             "model_name=\"m3\"}") == 2.5);
    assert_true(sample(text, "kvserve:kv_host_tier_copy_full_blocks_total{"
                             "model_name=\"m3\"}") == 112);
    assert_true(sample(text, "kvserve:kv_host_tier_copies{"
                             "model_name=\"m1\"}") == -1);
    assert_true(sample(text, "kvserve:kv_tier_blocks{model_name=\"m4\"}")
                == -1);
    assert_true(sample(text, "kvserve:kv_host_tier_blocks{model_name="
                             "\"m4\"}") == -1);

#undef HITS

    free(text);

    /* a host tier alone: no disk tier family at all */
    g[0].tier = 0;
    g[2].tier = 0;
    text = expose(m, g);
    check_format(text);
    assert_null(strstr(text, "kvserve:kv_tier_blocks"));
    assert_non_null(strstr(text, "kvserve:kv_host_tier_blocks"));
    free(text);

    free(m);
}


/* Two processes add to one shared mapping, as nginx workers do. */
static void
test_shared(void **state)
{
    int             status;
    char           *text;
    pid_t           pid;
    size_t          size;
    kvs_err_t       err;
    uint32_t        i, len[1] = { 2048 };
    kvs_metrics_t  *m;
    const char     *names[1] = { "m" };

    (void) state;

    size = kvs_metrics_size(1);
    m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
             -1, 0);
    assert_true(m != MAP_FAILED);
    assert_int_equal(kvs_metrics_init(m, size, 1, names, len, &err), KVS_OK);

    pid = fork();
    assert_true(pid >= 0);

    for (i = 0; i < 100000; i++) {
        kvs_metrics_observe(m, 0, KVS_HIST_ITL, 30000000, 1);
    }

    if (pid == 0) {
        _exit(0);
    }

    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    text = expose(m, NULL);
    assert_int_equal(sample(text, "kvserve:inter_token_latency_seconds_"
                            "bucket{model_name=\"m\",le=\"0.05\"}"), 200000);
    assert_int_equal(sample(text, "kvserve:inter_token_latency_seconds_"
                            "count{model_name=\"m\"}"), 200000);
    free(text);

    munmap(m, size);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_hops),
        cmocka_unit_test(test_server_timing),
        cmocka_unit_test(test_worker_hops),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_exposition),
        cmocka_unit_test(test_params_iter_config),
        cmocka_unit_test(test_tenants),
        cmocka_unit_test(test_tiers),
        cmocka_unit_test(test_engine_families),
        cmocka_unit_test(test_shared),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
