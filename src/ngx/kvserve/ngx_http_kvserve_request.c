/*
 * ngx_http_kvserve_request: the request core, below the phases of a
 * completion (ngx_http_kvserve_request.h draws the layers): a request's
 * context and its lifetime, the request timer, sending (whole JSON
 * answers, OpenAI error objects, the SSE stream's buffers), and failing
 * and finishing a request.  Every phase, kvserve_status and
 * kvserve_route call these; nothing here calls back into them.
 *
 * Invariants:
 *  - the per-request timer is an ordinary (non-cancelable) timer, so a
 *    gracefully exiting worker finishes its streams; the phases re-arm it
 *    at every output and it is what notices a hung engine;
 *  - the pool cleanup forgets every part (CANCEL when still running), so
 *    a client that goes away (ngx_http_test_reading) frees its KV blocks,
 *    and records a completion that reached the engine side if nothing did
 *    (client gone: abort; engine failure: error);
 *  - finish() ends a request once: parts forgotten, the timer gone, then
 *    finalized; after the response header a failure is an SSE error
 *    event and [DONE], since the status is already 200;
 *  - every answer, errors included, is JSON in OpenAI's shapes, but on
 *    the Messages endpoints (by r->uri), whose errors are Anthropic's
 *    (kvs_api_msg.h).
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_request.h"


static void ngx_http_kvserve_cleanup(void *data);
static ngx_http_kvserve_ctx_t *ngx_http_kvserve_timer_ctx(ngx_event_t *ev);


/* ---- lifetime ----------------------------------------------------------- */

ngx_http_kvserve_ctx_t *
ngx_http_kvserve_ctx_new(ngx_http_request_t *r, ngx_event_handler_pt timer)
{
    ngx_pool_cleanup_t      *cln;
    ngx_http_kvserve_ctx_t  *ctx;

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_kvserve_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    ctx->r = r;
    ctx->timer.handler = timer;
    ctx->timer.data = r->connection;     /* the debug log reads its fd */
    ctx->timer.log = r->connection->log;

    cln->handler = ngx_http_kvserve_cleanup;
    cln->data = ctx;

    ngx_http_set_ctx(r, ctx, ngx_http_kvserve_module);

    return ctx;
}


static void
ngx_http_kvserve_cleanup(void *data)
{
    ngx_http_kvserve_ctx_t  *ctx = data;

    ngx_uint_t  i;

    if (ctx->completion) {
        ngx_http_kvserve_record(ctx);
    }

    for (i = 0; i < ctx->n_parts; i++) {
        ngx_http_kvserve_engine_forget(&ctx->parts[i].sub);
    }

    ngx_http_kvserve_engine_forget(&ctx->stats);

    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }

    for (i = 0; i < ctx->n_choices; i++) {
        kvs_buf_free(&ctx->choices[i].text);
        kvs_buf_free(&ctx->choices[i].msg_full);
        free(ctx->choices[i].lp);
    }

    kvs_buf_free(&ctx->out);
    kvs_api_req_free(&ctx->req);
}


/* ---- the request timer -------------------------------------------------- */

void
ngx_http_kvserve_timer_arm(ngx_http_kvserve_ctx_t *ctx, ngx_msec_t ms)
{
    ngx_add_timer(&ctx->timer, ms);
}


void
ngx_http_kvserve_timeout(ngx_event_t *ev)
{
    ngx_uint_t               i, waiting;
    ngx_http_kvserve_ctx_t  *ctx;

    ctx = ngx_http_kvserve_timer_ctx(ev);
    waiting = 0;

    for (i = 0; i < ctx->n_parts; i++) {
        if (ctx->parts[i].sub.waiting) {
            waiting = 1;
        }
    }

    if (waiting && ctx->model != NULL) {
        ngx_http_kvserve_fail_unavailable(ctx);
        return;
    }

    if (waiting || ctx->stats.waiting) {
        ngx_log_error(NGX_LOG_ERR, ctx->r->connection->log, 0,
                      "kvserve: no engine within kvserve_engine_wait");
        ngx_http_kvserve_fail(ctx, NGX_HTTP_SERVICE_UNAVAILABLE,
                              "No engine is available to serve the "
                              "request; retry later.", "server_error",
                              NULL);
        return;
    }

    ngx_log_error(NGX_LOG_ERR, ctx->r->connection->log, 0,
                  "kvserve: no output from the engine within "
                  "kvserve_engine_timeout");
    ngx_http_kvserve_fail(ctx, NGX_HTTP_GATEWAY_TIME_OUT,
                          "The engine did not answer in time.",
                          "server_error", "timeout");
}


/*
 * 503 naming the request's model and why its engine is not there ("The
 * engine for model "x" (pid P) exited; restarting. Retry later."): one
 * model's engine being down says nothing of the others'.
 */
void
ngx_http_kvserve_fail_unavailable(ngx_http_kvserve_ctx_t *ctx)
{
    u_char     *msg, *p;
    size_t      len;
    ngx_str_t   why;

    if (ngx_http_kvserve_engine_available(ctx->model_index, &why)
        == NGX_OK)
    {
        ngx_str_set(&why, "engine did not take the request in time");
    }

    ngx_log_error(NGX_LOG_ERR, ctx->r->connection->log, 0,
                  "kvserve: no engine within kvserve_engine_wait: %V", &why);

    len = sizeof("The . Retry later.") + why.len;
    msg = ngx_pnalloc(ctx->r->pool, len);

    if (msg == NULL) {
        ngx_http_kvserve_fail(ctx, NGX_HTTP_SERVICE_UNAVAILABLE,
                              "No engine is available to serve the "
                              "request; retry later.", "server_error",
                              "model_unavailable");
        return;
    }

    p = ngx_snprintf(msg, len - 1, "The %V. Retry later.", &why);
    *p = '\0';

    ngx_http_kvserve_fail(ctx, NGX_HTTP_SERVICE_UNAVAILABLE, (char *) msg,
                          "server_error", "model_unavailable");
}


static ngx_http_kvserve_ctx_t *
ngx_http_kvserve_timer_ctx(ngx_event_t *ev)
{
    return (ngx_http_kvserve_ctx_t *)
           ((u_char *) ev - offsetof(ngx_http_kvserve_ctx_t, timer));
}


/* ---- ending ------------------------------------------------------------- */

/* A failure, as a JSON error before the header or an event after it. */
void
ngx_http_kvserve_fail(ngx_http_kvserve_ctx_t *ctx, ngx_uint_t status,
    const char *message, const char *type, const char *code)
{
    ngx_int_t  rc;

    ctx->failed = 1;

    if (ctx->header_sent) {
        ngx_http_kvserve_stream_abort(ctx, message, type, code);
        return;
    }

    rc = ngx_http_kvserve_error_json(ctx->r, status, message, NULL, code);
    ngx_http_kvserve_finish(ctx, rc);
}


/* Ends the request: every part forgotten, the timer gone. */
void
ngx_http_kvserve_finish(ngx_http_kvserve_ctx_t *ctx, ngx_int_t rc)
{
    ngx_uint_t  i;

    if (ctx->finished) {
        return;
    }

    ctx->finished = 1;

    for (i = 0; i < ctx->n_parts; i++) {
        ngx_http_kvserve_engine_forget(&ctx->parts[i].sub);
    }

    ngx_http_kvserve_engine_forget(&ctx->stats);

    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }

    ngx_http_finalize_request(ctx->r, rc);
}


/* Sends what the filters kept back while the engine answers; a client
 * too slow to take it ends the request. */
void
ngx_http_kvserve_write_handler(ngx_http_request_t *r)
{
    ngx_event_t             *wev;
    ngx_http_kvserve_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_kvserve_module);
    wev = r->connection->write;

    if (wev->timedout) {
        r->connection->timedout = 1;
        if (ctx != NULL && !ctx->finished) {
            ngx_http_kvserve_finish(ctx, NGX_HTTP_REQUEST_TIME_OUT);
        }
        return;
    }

    if (ngx_http_output_filter(r, NULL) == NGX_ERROR) {
        if (ctx != NULL && !ctx->finished) {
            ngx_http_kvserve_finish(ctx, NGX_ERROR);
        }
    }
}


/* ---- the stream --------------------------------------------------------- */

/* After the header: an error event, [DONE], the end. */
void
ngx_http_kvserve_stream_abort(ngx_http_kvserve_ctx_t *ctx,
    const char *message, const char *type, const char *code)
{
    int  rc;

    ctx->failed = 1;
    ctx->out.len = 0;
    ctx->t.end_ns = kvs_now_ns();

    if (ctx->trailers
        && ngx_http_kvserve_server_timing(ctx, &ctx->r->headers_out.trailers)
           != NGX_OK)
    {
        ngx_http_kvserve_finish(ctx, NGX_ERROR);
        return;
    }

    /* Anthropic's stream ends with its error event, without [DONE] */
    if (ctx->anthropic) {
        rc = kvs_api_msg_error_event(&ctx->out,
                                     ngx_strcmp(type, "server_error") != 0
                                     ? NGX_HTTP_BAD_REQUEST
                                     : code != NULL
                                       && ngx_strcmp(code, "engine_lost") == 0
                                     ? NGX_HTTP_SERVICE_UNAVAILABLE
                                     : NGX_HTTP_INTERNAL_SERVER_ERROR,
                                     message);

    } else {
        rc = kvs_api_resp_error_event(&ctx->out, message, type, code);
        if (rc == KVS_OK) {
            rc = kvs_api_resp_done(&ctx->out);
        }
    }

    if (rc != KVS_OK || ngx_http_kvserve_stream_send(ctx, 1) != NGX_OK) {
        ngx_http_kvserve_finish(ctx, NGX_ERROR);
        return;
    }

    ngx_http_kvserve_finish(ctx, NGX_OK);
}


/* Sends ctx->out (emptied) as one flushed buffer; buffers are reused. */
ngx_int_t
ngx_http_kvserve_stream_send(ngx_http_kvserve_ctx_t *ctx, ngx_uint_t last)
{
    size_t        size;
    u_char       *p;
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    cl = ngx_chain_get_free_buf(ctx->r->pool, &ctx->free);
    if (cl == NULL) {
        return NGX_ERROR;
    }

    b = cl->buf;

    if (ctx->out.len > 0
        && (b->start == NULL || (size_t) (b->end - b->start) < ctx->out.len))
    {
        size = ngx_max(ctx->out.len, 1024);
        p = ngx_palloc(ctx->r->pool, size);
        if (p == NULL) {
            return NGX_ERROR;
        }
        b->start = p;
        b->end = p + size;
    }

    b->pos = b->start;
    b->last = b->start;
    if (ctx->out.len > 0) {
        b->last = ngx_cpymem(b->start, ctx->out.data, ctx->out.len);
    }

    b->temporary = (ctx->out.len > 0);
    b->memory = 0;
    b->flush = 1;
    b->last_buf = last;
    b->last_in_chain = 1;
    b->tag = (ngx_buf_tag_t) &ngx_http_kvserve_module;

    ctx->out.len = 0;

    rc = ngx_http_output_filter(ctx->r, cl);

    ngx_chain_update_chains(ctx->r->pool, &ctx->free, &ctx->busy, &cl,
                            (ngx_buf_tag_t) &ngx_http_kvserve_module);

    return rc == NGX_ERROR ? NGX_ERROR : NGX_OK;
}


/* ---- whole JSON answers ------------------------------------------------- */

/* ---- Anthropic's errors (the Messages endpoints, by r->uri) ---------- */

static ngx_uint_t
ngx_http_kvserve_is_msg(ngx_http_request_t *r)
{
    ngx_int_t  kind;

    kind = ngx_http_kvserve_route_post(r);

    return kind == NGX_HTTP_KVSERVE_POST_MSG
           || kind == NGX_HTTP_KVSERVE_POST_MSG_COUNT;
}


/* {"type":"error","error":{...}} with Anthropic's status (529 for 503);
 * a field the message does not name leads it ("max_tokens: ..."). */
static ngx_int_t
ngx_http_kvserve_msg_error(ngx_http_request_t *r, ngx_uint_t status,
    const char *message, const char *param)
{
    u_char     *p;
    size_t      len;
    kvs_buf_t   body;

    if (param != NULL && param[0] != '\0'
        && ngx_strstr(message, param) == NULL)
    {
        len = ngx_strlen(param) + ngx_strlen(message) + sizeof(": ");
        p = ngx_pnalloc(r->pool, len);
        if (p == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_snprintf(p, len, "%s: %s%Z", param, message);
        message = (const char *) p;
    }

    ngx_memzero(&body, sizeof(kvs_buf_t));

    if (kvs_api_msg_error_json(&body, (int) status, message) != KVS_OK) {
        kvs_buf_free(&body);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (status == NGX_HTTP_SERVICE_UNAVAILABLE
        && !ngx_http_kvserve_has_header(r, "Retry-After")
        && ngx_http_kvserve_add_header(r, "Retry-After", "1") != NGX_OK)
    {
        kvs_buf_free(&body);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_kvserve_send_json(r, kvs_api_msg_status((int) status),
                                      &body);
}


ngx_int_t
ngx_http_kvserve_api_error(ngx_http_request_t *r, kvs_api_err_t *aerr)
{
    kvs_buf_t  body;

    if (ngx_http_kvserve_is_msg(r)) {
        return ngx_http_kvserve_msg_error(r, aerr->status, aerr->message,
                                          aerr->param);
    }

    ngx_memzero(&body, sizeof(kvs_buf_t));

    if (kvs_api_err_json(aerr, &body) != KVS_OK) {
        kvs_buf_free(&body);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_kvserve_send_json(r, aerr->status, &body);
}


/* nginx's own 413 is an HTML page: a body announced over
 * client_max_body_size is answered in OpenAI's shape before it is read */
ngx_int_t
ngx_http_kvserve_body_too_large(ngx_http_request_t *r)
{
    ngx_int_t                  rc;
    kvs_api_err_t              aerr;
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    if (clcf->client_max_body_size == 0
        || r->headers_in.content_length_n <= clcf->client_max_body_size)
    {
        return NGX_DECLINED;
    }

    kvs_api_err_set(&aerr, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE, NULL, NULL,
                    "The request body is larger than the %lld bytes "
                    "allowed.", (long long) clcf->client_max_body_size);
    r->keepalive = 0;

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    return ngx_http_kvserve_api_error(r, &aerr);
}


ngx_int_t
ngx_http_kvserve_error_json(ngx_http_request_t *r, ngx_uint_t status,
    const char *message, const char *param, const char *code)
{
    kvs_buf_t  body;

    if (ngx_http_kvserve_is_msg(r)) {
        return ngx_http_kvserve_msg_error(r, status, message, param);
    }

    ngx_memzero(&body, sizeof(kvs_buf_t));

    if (kvs_api_error_json(&body, message,
                           status >= 500 ? "server_error"
                                         : "invalid_request_error",
                           param, code)
        != KVS_OK)
    {
        kvs_buf_free(&body);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_kvserve_send_json(r, status, &body);
}


/* Sends body (freed here) as the whole JSON response; a 405 names the
 * allowed methods, a 503 asks to retry in a second. */
ngx_int_t
ngx_http_kvserve_send_json(ngx_http_request_t *r, ngx_uint_t status,
    kvs_buf_t *body)
{
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_chain_t   out;
    const char   *allow;

    b = ngx_create_temp_buf(r->pool, body->len + 1);
    if (b == NULL) {
        kvs_buf_free(body);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->last = ngx_cpymem(b->last, body->data, body->len);
    *b->last++ = LF;
    kvs_buf_free(body);

    if (status == NGX_HTTP_NOT_ALLOWED) {
        allow = ngx_http_kvserve_route_post(r) != NGX_DECLINED
                || ngx_http_kvserve_route_tokens(r) == 0
                || ngx_http_kvserve_route_tokens(r) == 1
                ? "POST" : "GET, HEAD";

        if (ngx_http_kvserve_add_header(r, "Allow", allow) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    if (status == NGX_HTTP_SERVICE_UNAVAILABLE
        && !ngx_http_kvserve_has_header(r, "Retry-After")
        && ngx_http_kvserve_add_header(r, "Retry-After", "1") != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->headers_out.status = status;
    r->headers_out.content_length_n = b->last - b->pos;
    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;

    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b->last_buf = (r == r->main);
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


/* Adds a response header; key and value are NUL-terminated and outlive
 * the header (static strings, or the request's pool). */
ngx_int_t
ngx_http_kvserve_add_header(ngx_http_request_t *r, const char *key,
    const char *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key.data = (u_char *) key;
    h->key.len = ngx_strlen(key);
    h->value.data = (u_char *) value;
    h->value.len = ngx_strlen(value);

    return NGX_OK;
}


ngx_uint_t
ngx_http_kvserve_has_header(ngx_http_request_t *r, const char *key)
{
    size_t            len;
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    len = ngx_strlen(key);

    for (part = &r->headers_out.headers.part; part != NULL;
         part = part->next)
    {
        h = part->elts;

        for (i = 0; i < part->nelts; i++) {
            if (h[i].hash != 0 && h[i].key.len == len
                && ngx_strncasecmp(h[i].key.data, (u_char *) key, len) == 0)
            {
                return 1;
            }
        }
    }

    return 0;
}


/*
 * The POST endpoints, matched as kvs_api_route() matches the others
 * (from the first "/v1/" in the path): NGX_HTTP_KVSERVE_POST_*,
 * NGX_DECLINED none.
 */
ngx_int_t
ngx_http_kvserve_route_post(ngx_http_request_t *r)
{
    u_char  *p, *last;
    size_t   len;

    /* nginx's own error pages ask too, before a request line was read */
    if (r->uri.len < 4) {
        return NGX_DECLINED;
    }

    last = r->uri.data + r->uri.len;
    p = ngx_strlcasestrn(r->uri.data, last, (u_char *) "/v1/", 4 - 1);

    if (p == NULL || ngx_strncmp(p, "/v1/", 4) != 0) {
        return NGX_DECLINED;
    }

    p += 4;
    len = last - p;

    if (len == sizeof("chat/completions") - 1
        && ngx_strncmp(p, "chat/completions", len) == 0)
    {
        return NGX_HTTP_KVSERVE_POST_CHAT;
    }

    if (len == sizeof("completions") - 1
        && ngx_strncmp(p, "completions", len) == 0)
    {
        return NGX_HTTP_KVSERVE_POST_CMPL;
    }

    if (len == sizeof("messages") - 1
        && ngx_strncmp(p, "messages", len) == 0)
    {
        return NGX_HTTP_KVSERVE_POST_MSG;
    }

    if (len == sizeof("messages/count_tokens") - 1
        && ngx_strncmp(p, "messages/count_tokens", len) == 0)
    {
        return NGX_HTTP_KVSERVE_POST_MSG_COUNT;
    }

    return NGX_DECLINED;
}


/* The operator endpoints, by the path's last segment, so that a location
 * of their own (location = /tokenize) and one holding /v1/ alike serve
 * them: 0 tokenize, 1 detokenize, 2 health, NGX_DECLINED none. */
ngx_int_t
ngx_http_kvserve_route_tokens(ngx_http_request_t *r)
{
    u_char  *p, *last;
    size_t   len;

    last = r->uri.data + r->uri.len;

    for (p = last; p > r->uri.data && p[-1] != '/'; p--) {
        /* the last segment */
    }

    len = last - p;

    if (len == sizeof("tokenize") - 1
        && ngx_strncmp(p, "tokenize", len) == 0)
    {
        return 0;
    }

    if (len == sizeof("detokenize") - 1
        && ngx_strncmp(p, "detokenize", len) == 0)
    {
        return 1;
    }

    if (len == sizeof("health") - 1 && ngx_strncmp(p, "health", len) == 0) {
        return 2;
    }

    return NGX_DECLINED;
}
