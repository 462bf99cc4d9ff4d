/*
 * ngx_http_kvserve_timing: a completion request's timings: the clock,
 * its figures for the variables, recording it into the shared metrics,
 * and its Server-Timing field.
 *
 * Invariants:
 *  - every hop is stamped on CLOCK_MONOTONIC (ctx->t; the engine's stamps
 *    come in OUT frames, same clock, same host);
 *  - a request that reached the engine side, and was not refused there,
 *    is added to the shared metrics exactly once (ctx->recorded);
 *  - the worker's own hops (body, tokenize, limit) are added as each
 *    ends, once, for every request whose model is known by then.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_completions.h"



/* ---- timings and metrics ---------------------------------------------- */

/* kvs_reason_t, or -1 while the request has none (not submitted, or
 * refused by the engine, or still running) */
static ngx_int_t
ngx_http_kvserve_reason(ngx_http_kvserve_ctx_t *ctx)
{
    ngx_uint_t  i;

    if (ctx->recorded) {
        return ctx->reason;
    }

    if (!ctx->completion || ctx->t.submit_ns == 0 || ctx->refused) {
        return -1;
    }

    /* the client went away (ngx_http_test_reading, a failed write): the
     * engine may have finished since, but the response was not had */
    if (ctx->r->connection->error && !ctx->failed) {
        return KVS_REASON_ABORT;
    }

    if (ctx->n_choices > 0 && ctx->n_ended == ctx->n_choices) {
        for (i = 0; i < ctx->n_choices; i++) {
            if (ctx->choices[i].finish == KVS_FINISH_LENGTH) {
                return KVS_REASON_LENGTH;
            }
        }
        return KVS_REASON_STOP;
    }

    /* ended early: by the server, or by the client going away */
    return ctx->failed ? KVS_REASON_ERROR : KVS_REASON_ABORT;
}


uint32_t
ngx_http_kvserve_completion_tokens(ngx_http_kvserve_ctx_t *ctx)
{
    uint32_t    n;
    ngx_uint_t  i;

    n = 0;

    for (i = 0; i < ctx->n_choices; i++) {
        n += ctx->choices[i].ended ? ctx->choices[i].n_generated
                                   : ctx->choices[i].n_seen;
    }

    return n;
}


ngx_int_t
ngx_http_kvserve_req_info(ngx_http_request_t *r,
    ngx_http_kvserve_req_info_t *info)
{
    ngx_http_kvserve_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_kvserve_module);

    if (ctx == NULL || !ctx->completion) {
        return NGX_DECLINED;
    }

    ngx_memzero(info, sizeof(ngx_http_kvserve_req_info_t));

    info->t = ctx->t;
    if (ctx->model != NULL) {
        /* an adapter's requests: its model id, BASE:NAME */
        info->model = ctx->lora != NULL ? ctx->lora->id : ctx->model->name;
    }
    info->prompt_tokens = ctx->prompt_tokens;
    info->completion_tokens = ngx_http_kvserve_completion_tokens(ctx);
    info->cached_tokens = ctx->cached_tokens;
    info->cache_miss = ctx->cache_miss;
    info->cache_miss_pos = ctx->cache_miss_pos;
    info->reason = ngx_http_kvserve_reason(ctx);
    info->submitted = (ctx->t.submit_ns != 0 && !ctx->refused);
    info->kv_block_us = ctx->kv_block_us;
    info->kv_counted = (ctx->kv_ns != 0);

    /* the log phase of a request that has not ended its own way (a
     * client gone): its total is up to now */
    if (info->t.end_ns == 0 && info->t.start_ns != 0) {
        info->t.end_ns = kvs_now_ns();
    }

    return NGX_OK;
}


/* Adds the request to the shared counters, once; it must have reached
 * the engine side and not been refused there. */
void
ngx_http_kvserve_record(ngx_http_kvserve_ctx_t *ctx)
{
    uint32_t        most;
    ngx_int_t       reason;
    ngx_uint_t      i;
    kvs_metrics_t  *m;

    if (ctx->recorded) {
        return;
    }

    if (ctx->t.end_ns == 0) {
        ctx->t.end_ns = kvs_now_ns();
    }

    reason = ngx_http_kvserve_reason(ctx);
    if (reason < 0) {
        return;
    }

    ctx->recorded = 1;
    ctx->reason = reason;

    m = ngx_http_kvserve_metrics(ctx->r);
    if (m == NULL) {
        return;
    }

    kvs_metrics_request(m, (uint32_t) ctx->model_index, &ctx->t,
                        ctx->prompt_tokens,
                        ngx_http_kvserve_completion_tokens(ctx),
                        ctx->preempted, (kvs_reason_t) reason);
    kvs_metrics_prefix_cache(m, (uint32_t) ctx->model_index,
                             ctx->cache_queried, ctx->cached_tokens);

    /* vLLM's request parameters: n, the client's max_tokens (when it
     * gave one; completions always have one), and the most tokens a
     * choice generated */
    kvs_metrics_observe(m, (uint32_t) ctx->model_index, KVS_HIST_PARAMS_N,
                        ctx->req.n, 1);

    if (ctx->req.max_tokens >= 0) {
        kvs_metrics_observe(m, (uint32_t) ctx->model_index,
                            KVS_HIST_PARAMS_MAX_TOKENS,
                            (uint64_t) ctx->req.max_tokens, 1);
    }

    most = 0;
    for (i = 0; i < ctx->n_choices; i++) {
        most = ngx_max(most, ctx->choices[i].ended
                             ? ctx->choices[i].n_generated
                             : ctx->choices[i].n_seen);
    }

    kvs_metrics_observe(m, (uint32_t) ctx->model_index,
                        KVS_HIST_MAX_GEN_TOKENS, most, 1);
}


void
ngx_http_kvserve_record_hop(ngx_http_kvserve_ctx_t *ctx, kvs_hop_t hop)
{
    kvs_metrics_t  *m;

    m = ngx_http_kvserve_metrics(ctx->r);

    if (m != NULL && ctx->model != NULL) {
        kvs_metrics_hop(m, (uint32_t) ctx->model_index, &ctx->t, hop);
    }
}


/* A Server-Timing field in list: the response's headers or trailers. */
ngx_int_t
ngx_http_kvserve_server_timing(ngx_http_kvserve_ctx_t *ctx,
    ngx_list_t *list)
{
    u_char           *p;
    kvs_buf_t         v;
    kvs_err_t         err;
    ngx_table_elt_t  *h;

    ngx_memzero(&v, sizeof(v));

    if (kvs_req_times_server_timing(&ctx->t, &v, &err) != KVS_OK) {
        return NGX_ERROR;
    }

    if (v.len == 0) {
        return NGX_OK;
    }

    p = ngx_pnalloc(ctx->r->pool, v.len);
    if (p == NULL) {
        kvs_buf_free(&v);
        return NGX_ERROR;
    }

    ngx_memcpy(p, v.data, v.len);

    h = ngx_list_push(list);
    if (h == NULL) {
        kvs_buf_free(&v);
        return NGX_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Server-Timing");
    h->value.data = p;
    h->value.len = v.len;
    kvs_buf_free(&v);

    return NGX_OK;
}
