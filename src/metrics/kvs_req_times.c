/*
 * kvs_req_times: one request's hops (kvs_hop_t) from its timestamps
 * (kvs_req_times_t), their milliseconds as text and the Server-Timing
 * header; split from kvs_metrics.c, which keeps the Prometheus metrics.
 *
 * Invariants: a hop is known only when both of its ends are stamped and
 * in order (never a negative or made-up duration); milliseconds are
 * written with integer arithmetic, three decimals cut, not rounded; a
 * Server-Timing header that does not fit leaves out unchanged.
 */

#include <stdio.h>

#include "kvs_metrics_impl.h"


static const char  *kvs_hop_names[KVS_HOP_N] = {
    "body", "parse", "tokenize", "limit", "queue", "prefill", "ttft",
    "decode", "itl", "total"
};


const char *
kvs_hop_name(kvs_hop_t hop)
{
    return (unsigned) hop < KVS_HOP_N ? kvs_hop_names[hop] : "?";
}


int
kvs_req_span(uint64_t a, uint64_t b, uint64_t *ns)
{
    if (a == 0 || b == 0 || b < a) {
        return KVS_ENOTFOUND;
    }

    *ns = b - a;

    return KVS_OK;
}


int
kvs_req_times_hop(const kvs_req_times_t *t, kvs_hop_t hop, uint64_t *ns)
{
    switch (hop) {

    case KVS_HOP_BODY:
        return kvs_req_span(t->start_ns, t->body_ns, ns);

    case KVS_HOP_PARSE:
        return kvs_req_span(t->body_ns, t->parse_ns, ns);

    case KVS_HOP_TOKENIZE:
        return kvs_req_span(t->parse_ns, t->tokenize_ns, ns);

    case KVS_HOP_LIMIT:
        return kvs_req_span(t->tokenize_ns, t->submit_ns, ns);

    case KVS_HOP_QUEUE:
        return kvs_req_span(t->submit_ns, t->recv_ns, ns);

    case KVS_HOP_PREFILL:
        return kvs_req_span(t->recv_ns, t->engine_first_ns, ns);

    case KVS_HOP_TTFT:
        return kvs_req_span(t->start_ns, t->first_ns, ns);

    case KVS_HOP_DECODE:
        return kvs_req_span(t->first_ns, t->last_ns, ns);

    case KVS_HOP_ITL:
        if (t->itl_n == 0) {
            return KVS_ENOTFOUND;
        }
        *ns = t->itl_sum_ns / t->itl_n;
        return KVS_OK;

    case KVS_HOP_TOTAL:
        return kvs_req_span(t->start_ns, t->end_ns, ns);

    default:
        return KVS_ENOTFOUND;
    }
}


size_t
kvs_metrics_fmt_ms(char *buf, uint64_t ns)
{
    int  n;

    /* integer arithmetic: no rounding surprises, 3 decimals exactly */
    n = snprintf(buf, KVS_METRICS_MS_LEN, "%llu.%03llu",
                 (unsigned long long) (ns / 1000000),
                 (unsigned long long) (ns / 1000 % 1000));

    return n > 0 ? (size_t) n : 0;
}


int
kvs_req_times_server_timing(const kvs_req_times_t *t, kvs_buf_t *out,
    kvs_err_t *err)
{
    char      ms[KVS_METRICS_MS_LEN];
    size_t    len0;
    uint64_t  ns;
    unsigned  h, n;

    len0 = out->len;
    n = 0;

    for (h = 0; h < KVS_HOP_N; h++) {
        if (kvs_req_times_hop(t, (kvs_hop_t) h, &ns) != KVS_OK) {
            continue;
        }

        kvs_metrics_fmt_ms(ms, ns);

        if (kvs_buf_printf(out, "%s%s;dur=%s", n ? ", " : "",
                           kvs_hop_names[h], ms)
            != KVS_OK)
        {
            out->len = len0;
            return kvs_err_set(err, KVS_ENOMEM, "Server-Timing: out of "
                               "memory");
        }

        n++;
    }

    return KVS_OK;
}
