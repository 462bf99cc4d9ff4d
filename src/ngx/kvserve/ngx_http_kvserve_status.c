/*
 * ngx_http_kvserve_status: the kvserve_status location (the engine's
 * stats as JSON), and nginx's own error pages (400, 413, 414, 501, ...)
 * rewritten in OpenAI's shape in kvserve locations and, before a location
 * is chosen, in servers having one, with the $kvserve_tokenize_where
 * variable.
 *
 * Invariants:
 *  - a status request is one STATS sub (ctx->stats) for every model's
 *    engine (NGX_HTTP_KVSERVE_ALL: one merged answer), forgotten by the
 *    request's pool cleanup, and bounded by the request timer; a model
 *    whose engine is down is listed with "available": false and why;
 *  - the error filters only rewrite a page nginx itself made (text/html
 *    with r->err_status set); nginx keeps enforcing every limit.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_completions.h"


static ngx_http_output_header_filter_pt  ngx_http_kvserve_next_header;
static ngx_http_output_body_filter_pt    ngx_http_kvserve_next_body;


/* ---- kvserve_status ---------------------------------------------------- */

/* s's bytes as the inside of a JSON string: the reasons are ours (model
 * names are letters, digits and . _ - : / @ +), but quote what JSON
 * needs anyway. */
static int
ngx_http_kvserve_status_json_str(kvs_buf_t *b, ngx_str_t *s)
{
    int         rc;
    size_t      i;
    u_char      c;

    for (i = 0, rc = KVS_OK; rc == KVS_OK && i < s->len; i++) {
        c = s->data[i];

        if (c == '"' || c == '\\') {
            rc = kvs_buf_printf(b, "\\%c", c);

        } else if (c < 0x20) {
            rc = kvs_buf_printf(b, "\\u%04x", (unsigned) c);

        } else {
            rc = kvs_buf_append(b, &c, 1);
        }
    }

    return rc;
}


static void
ngx_http_kvserve_status_event(ngx_http_kvserve_sub_t *s, ngx_uint_t ev,
    void *msg)
{
    ngx_int_t                      rc;
    uint32_t                       i, k;
    ngx_str_t                      why;
    kvs_buf_t                      body;
    kvs_wire_stats_t              *st;
    kvs_engine_stats_t            *e;
    const kvs_wire_hello_t        *hello, *mh;
    ngx_http_kvserve_ctx_t        *ctx;
    ngx_http_kvserve_model_t      *m;
    ngx_http_kvserve_main_conf_t  *kmcf;

    ctx = s->data;

    if (ctx->finished) {
        return;
    }

    if (ev == NGX_HTTP_KVSERVE_EV_LOST) {
        if (ngx_http_kvserve_engine_send(s) != NGX_OK) {
            ngx_http_kvserve_fail(ctx, NGX_HTTP_SERVICE_UNAVAILABLE,
                                  "The engine was lost.", "server_error",
                                  NULL);
        }
        return;
    }

    if (ev != NGX_HTTP_KVSERVE_EV_STATS) {
        return;
    }

    st = msg;
    hello = ngx_http_kvserve_engine_hello();
    kmcf = ngx_http_get_module_main_conf(ctx->r, ngx_http_kvserve_module);
    m = kmcf->models->elts;

    ngx_memzero(&body, sizeof(body));

    rc = kvs_buf_printf(&body, "{\"engine\":{\"pid\":%u,\"incarnation\":"
                        "\"%016llx\",\"clients\":%u,\"requests\":%u},"
                        "\"worker\":{\"pid\":%d},\"models\":[",
                        hello ? (unsigned) hello->pid : 0,
                        hello ? (unsigned long long) hello->incarnation : 0,
                        (unsigned) st->clients, (unsigned) st->requests,
                        (int) ngx_pid);

    /* every configured model, in order: its engine's entry, or why it
     * has none */
    for (k = 0; rc == KVS_OK && k < kmcf->models->nelts; k++) {
        for (i = 0; i < st->n_models; i++) {
            if (st->models[i].index == k) {
                break;
            }
        }

        mh = ngx_http_kvserve_engine_hello_of(k);

        if (i == st->n_models || mh == NULL) {
            if (ngx_http_kvserve_engine_available(k, &why) == NGX_OK) {
                ngx_str_set(&why, "its engine did not answer");
            }

            rc = kvs_buf_printf(&body, "%s{\"name\":\"%.*s\","
                                "\"available\":false,"
                                "\"unavailable_reason\":\"", k ? "," : "",
                                (int) m[k].name.len, m[k].name.data);
            if (rc == KVS_OK) {
                rc = ngx_http_kvserve_status_json_str(&body, &why);
            }
            if (rc == KVS_OK) {
                rc = kvs_buf_append(&body, "\"}", 2);
            }
            continue;
        }

        e = &st->models[i].st;
        rc = kvs_buf_printf(&body, "%s{\"name\":\"%.*s\","
                            "\"available\":true,\"engine_pid\":%u,"
                            "\"kv_blocks\":%u,"
                            "\"kv_used\":%u,\"kv_used_max\":%u,"
                            "\"block_tokens\":%u,\"running\":%u,"
                            "\"waiting\":%u,\"requests\":%llu,"
                            "\"finished\":%llu,\"steps\":%llu,"
                            "\"prefill_tokens\":%llu,"
                            "\"decode_tokens\":%llu,\"preemptions\":%llu,"
                            "\"prefix_cache\":{\"blocks\":%u,"
                            "\"pinned_blocks\":%u,\"evicted_blocks\":%llu,"
                            "\"query_tokens\":%llu,\"hit_tokens\":%llu,"
                            "\"epoch\":\"%016llx\"}}",
                            k ? "," : "",
                            (int) m[k].name.len, m[k].name.data,
                            (unsigned) mh->pid, e->kv_blocks, e->kv_used,
                            e->kv_used_max,
                            e->block_tokens, e->running, e->waiting,
                            (unsigned long long) e->requests,
                            (unsigned long long) e->finished,
                            (unsigned long long) e->steps,
                            (unsigned long long) e->prefill_tokens,
                            (unsigned long long) e->decode_tokens,
                            (unsigned long long) e->preemptions,
                            e->cache_blocks, e->cache_pinned_blocks,
                            (unsigned long long) e->cache_evicted_blocks,
                            (unsigned long long) e->cache_query_tokens,
                            (unsigned long long) e->cache_hit_tokens,
                            (unsigned long long) e->epoch);
    }

    if (rc == KVS_OK) {
        rc = kvs_buf_append(&body, "]}", 2);
    }

    if (rc != KVS_OK) {
        kvs_buf_free(&body);
        ngx_http_kvserve_finish(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    rc = ngx_http_kvserve_send_json(ctx->r, NGX_HTTP_OK, &body);
    ngx_http_kvserve_finish(ctx, rc);
}


ngx_int_t
ngx_http_kvserve_status_handler(ngx_http_request_t *r)
{
    ngx_int_t                      rc;
    ngx_http_kvserve_ctx_t        *ctx;
    ngx_http_kvserve_main_conf_t  *kmcf;

    rc = ngx_http_kvserve_cors_preflight(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    kmcf = ngx_http_get_module_main_conf(r, ngx_http_kvserve_module);

    if (kmcf->models->nelts == 0) {
        return ngx_http_kvserve_error_json(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                                           "No model is configured.", NULL,
                                           NULL);
    }

    ctx = ngx_http_kvserve_ctx_new(r, ngx_http_kvserve_timeout);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->stats.type = KVS_WIRE_STATS;
    ctx->stats.model = NGX_HTTP_KVSERVE_ALL;
    ctx->stats.handler = ngx_http_kvserve_status_event;
    ctx->stats.data = ctx;

    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_kvserve_write_handler;

    ngx_http_kvserve_timer_arm(ctx, kmcf->engine_wait);

    if (ngx_http_kvserve_engine_send(&ctx->stats) != NGX_OK) {
        return ngx_http_kvserve_error_json(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                                           "No engine in this process.",
                                           NULL, NULL);
    }

    r->main->count++;

    return NGX_DONE;
}


/* ---- nginx's own error pages in OpenAI's shape ------------------------- */

/*
 * nginx answers what it refuses itself with an HTML page: a malformed
 * request line or header (400), a URI or header over the buffers (414,
 * 494, sent as 400), an unknown Transfer-Encoding (501), bad chunked
 * framing (400), a body over client_max_body_size (413), no length
 * (411), a timeout (408), and the like.  In kvserve locations, and in a
 * server having one before any location is chosen (framing errors come
 * first), the page becomes an OpenAI error object.  Only nginx's own page
 * is rewritten (text/html made by ngx_http_send_special_response, in the
 * server or a kvserve location): an operator's error_page leads to a
 * location of its own, which is neither, and nginx keeps enforcing every
 * limit itself.
 */

typedef struct {
    ngx_uint_t   status;
    const char  *message;
} ngx_http_kvserve_page_t;


static ngx_http_kvserve_page_t  ngx_http_kvserve_pages[] = {
    { NGX_HTTP_BAD_REQUEST, "The request is not valid HTTP: its request "
      "line, a header (or the headers' size), or its chunked body framing "
      "is malformed or too large." },
    { NGX_HTTP_UNAUTHORIZED, "Authorization is required." },
    { NGX_HTTP_FORBIDDEN, "Access is forbidden." },
    { NGX_HTTP_NOT_FOUND, "Not found." },
    { NGX_HTTP_NOT_ALLOWED, "The method is not allowed." },
    { NGX_HTTP_REQUEST_TIME_OUT, "The request was not received in time." },
    { NGX_HTTP_CONFLICT, "Conflict." },
    { NGX_HTTP_LENGTH_REQUIRED, "A request body needs a Content-Length or "
      "chunked Transfer-Encoding." },
    { NGX_HTTP_PRECONDITION_FAILED, "A precondition failed." },
    { NGX_HTTP_REQUEST_ENTITY_TOO_LARGE, "The request body is larger than "
      "the server accepts." },
    { NGX_HTTP_REQUEST_URI_TOO_LARGE, "The request URI is longer than the "
      "server accepts." },
    { NGX_HTTP_UNSUPPORTED_MEDIA_TYPE, "Unsupported media type." },
    { NGX_HTTP_RANGE_NOT_SATISFIABLE, "The range is not satisfiable." },
    { 421, "The request was sent to the wrong server." },
    { 429, "Too many requests." },
    { NGX_HTTP_INTERNAL_SERVER_ERROR, "The server had an error while "
      "processing your request." },
    { NGX_HTTP_NOT_IMPLEMENTED, "The request uses an HTTP feature the "
      "server does not implement (an unknown Transfer-Encoding or "
      "method)." },
    { NGX_HTTP_BAD_GATEWAY, "Bad gateway." },
    { NGX_HTTP_SERVICE_UNAVAILABLE, "The service is unavailable." },
    { NGX_HTTP_GATEWAY_TIME_OUT, "The gateway timed out." },
    { NGX_HTTP_VERSION_NOT_SUPPORTED, "The HTTP version is not "
      "supported." },
    { NGX_HTTP_INSUFFICIENT_STORAGE, "Insufficient storage." },
    { 0, NULL }
};


/* Is this nginx's page, in a place that answers JSON? */
static ngx_uint_t
ngx_http_kvserve_json_page(ngx_http_request_t *r)
{
    ngx_http_core_srv_conf_t     *cscf;
    ngx_http_kvserve_loc_conf_t  *klcf;

    if (r->headers_out.status < NGX_HTTP_BAD_REQUEST
        || r != r->main
        || r->err_status == 0
        || r->headers_out.content_type.len != sizeof("text/html") - 1
        || ngx_strncmp(r->headers_out.content_type.data, "text/html", 9)
           != 0)
    {
        return 0;
    }

    klcf = ngx_http_get_module_loc_conf(r, ngx_http_kvserve_module);
    if (klcf == NULL) {
        return 0;
    }

    if (klcf->enable == 1) {
        return 1;
    }

    /* no location chosen yet: the server's own configuration */
    cscf = ngx_http_get_module_srv_conf(r, ngx_http_core_module);

    return klcf->json_errors && r->loc_conf == cscf->ctx->loc_conf;
}


static ngx_int_t
ngx_http_kvserve_header_filter(ngx_http_request_t *r)
{
    u_char                   *p;
    size_t                    len;
    ngx_int_t                 kind;
    ngx_uint_t                i, status;
    kvs_buf_t                 body;
    const char               *type, *msg;
    kvs_api_err_t             aerr;
    ngx_http_kvserve_ctx_t   *ctx;

    if (!ngx_http_kvserve_json_page(r)) {
        return ngx_http_kvserve_next_header(r);
    }

    status = r->headers_out.status;
    msg = "The request failed.";

    for (i = 0; ngx_http_kvserve_pages[i].status != 0; i++) {
        if (ngx_http_kvserve_pages[i].status == status) {
            msg = ngx_http_kvserve_pages[i].message;
            break;
        }
    }

    /* 501 (an unknown Transfer-Encoding) and 505 (an HTTP version) are
     * the client's framing, not a fault of ours */
    type = (status < NGX_HTTP_INTERNAL_SERVER_ERROR
            || status == NGX_HTTP_NOT_IMPLEMENTED
            || status == NGX_HTTP_VERSION_NOT_SUPPORTED)
           ? "invalid_request_error" : "server_error";

    kvs_api_err_set(&aerr, (int) status, NULL, NULL, "%s", msg);
    ngx_cpystrn((u_char *) aerr.type, (u_char *) type, sizeof(aerr.type));
    ngx_memzero(&body, sizeof(body));

    /* the Messages endpoints answer in Anthropic's shape */
    kind = ngx_http_kvserve_route_post(r);

    if ((kind == NGX_HTTP_KVSERVE_POST_MSG
         || kind == NGX_HTTP_KVSERVE_POST_MSG_COUNT
         ? kvs_api_msg_error_json(&body, (int) status, msg)
         : kvs_api_err_json(&aerr, &body)) != KVS_OK
        || kvs_buf_append(&body, "\n", 1) != KVS_OK)
    {
        kvs_buf_free(&body);
        return ngx_http_kvserve_next_header(r);
    }

    /* in the pool: a HEAD request never reaches the body filter */
    p = ngx_pnalloc(r->pool, body.len);
    if (p == NULL) {
        kvs_buf_free(&body);
        return NGX_ERROR;
    }

    ngx_memcpy(p, body.data, body.len);
    len = body.len;
    kvs_buf_free(&body);

    ctx = ngx_http_get_module_ctx(r, ngx_http_kvserve_module);
    if (ctx == NULL) {
        ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_kvserve_ctx_t));
        if (ctx == NULL) {
            return NGX_ERROR;
        }
        ctx->r = r;
        ngx_http_set_ctx(r, ctx, ngx_http_kvserve_module);
    }

    ctx->error_body.data = p;
    ctx->error_body.len = len;
    ctx->json_error = 1;

    r->headers_out.content_length_n = ctx->error_body.len;
    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;
    r->headers_out.charset.len = 0;

    return ngx_http_kvserve_next_header(r);
}


/* nginx's page arrives in one call: our body replaces it. */
static ngx_int_t
ngx_http_kvserve_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_buf_t               *b;
    ngx_chain_t              out, *cl;
    ngx_http_kvserve_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_kvserve_module);

    if (ctx == NULL || !ctx->json_error) {
        return ngx_http_kvserve_next_body(r, in);
    }

    /* the page's buffers are static text: consumed, never sent */
    for (cl = in; cl != NULL; cl = cl->next) {
        cl->buf->pos = cl->buf->last;
    }

    if (ctx->json_error_sent || in == NULL) {
        return ngx_http_kvserve_next_body(r, NULL);
    }

    ctx->json_error_sent = 1;

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->pos = ctx->error_body.data;
    b->last = b->pos + ctx->error_body.len;
    b->memory = 1;
    b->last_buf = 1;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_kvserve_next_body(r, &out);
}


/* $kvserve_tokenize_where: inline, pool, or - (not tokenized) */
static ngx_int_t
ngx_http_kvserve_where_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_kvserve_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_kvserve_module);

    if (ctx == NULL || ctx->tok_where == 0) {
        v->data = (u_char *) "-";
        v->len = 1;

    } else if (ctx->tok_where == NGX_HTTP_KVSERVE_TOK_POOL) {
        v->data = (u_char *) "pool";
        v->len = 4;

    } else {
        v->data = (u_char *) "inline";
        v->len = 6;
    }

    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


static ngx_http_variable_t  ngx_http_kvserve_where_vars[] = {

    { ngx_string("kvserve_tokenize_where"), NULL,
      ngx_http_kvserve_where_variable, 0, NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


/* Also adds $kvserve_tokenize_where: a postconfiguration variable is
 * known to the configuration (nginx resolves names at the end of the
 * http block). */
ngx_int_t
ngx_http_kvserve_filter_init(ngx_conf_t *cf)
{
    if (ngx_http_kvserve_add_vars(cf, ngx_http_kvserve_where_vars)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* below the error pages' filter: CORS headers go on what it makes */
    if (ngx_http_kvserve_cors_init(cf) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_http_kvserve_next_header = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_kvserve_header_filter;

    ngx_http_kvserve_next_body = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_kvserve_body_filter;

    return NGX_OK;
}
