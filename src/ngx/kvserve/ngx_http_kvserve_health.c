/*
 * ngx_http_kvserve_health: GET /health, for load balancers: 200
 * {"status":"ok"} when every model's engine is ready (as this worker
 * sees it), else 503 with an OpenAI error object whose message names
 * each model that is not, and why.  Served by `kvserve_health`
 * locations and by kvserve locations for a path ending in /health.
 *
 * Invariants: a check allocates nothing but its answer (one buffer from
 * the request's pool, sized before it is written); it reads only this
 * worker's view of the engines, so it never waits; with no model
 * configured there is nothing to wait for and the answer is 200.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_request.h"


static const char  ngx_http_kvserve_health_ok[] = "{\"status\":\"ok\"}\n";
static const char  ngx_http_kvserve_health_head[] =
    "{\"error\":{\"message\":\"Not every model is ready:";
static const char  ngx_http_kvserve_health_tail[] =
    "\",\"type\":\"server_error\",\"param\":null,"
    "\"code\":\"model_unavailable\"}}\n";


char *
ngx_http_kvserve_health_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_loc_conf_t  *klcf = conf;

    ngx_http_core_loc_conf_t  *clcf;

    if (klcf->health != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    klcf->health = 1;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_kvserve_health_handler;

    return NGX_CONF_OK;
}


/* A reason for the message: the engine's, or that it has none yet. */
static void
ngx_http_kvserve_health_why(ngx_uint_t i, ngx_str_t *why)
{
    if (ngx_http_kvserve_engine_available(i, why) != NGX_OK
        && why->len == 0)
    {
        ngx_str_set(why, "its engine is starting");
    }
}


ngx_int_t
ngx_http_kvserve_health_handler(ngx_http_request_t *r)
{
    size_t                         len;
    ngx_int_t                      rc;
    ngx_str_t                      why;
    ngx_buf_t                     *b;
    ngx_uint_t                     i, n, down, status;
    ngx_chain_t                    out;
    ngx_http_kvserve_model_t      *m;
    ngx_http_kvserve_main_conf_t  *kmcf;

    rc = ngx_http_kvserve_cors_preflight(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return ngx_http_kvserve_error_json(r, NGX_HTTP_NOT_ALLOWED,
                                           "Use GET or HEAD for /health.",
                                           NULL, "method_not_allowed");
    }

    kmcf = ngx_http_get_module_main_conf(r, ngx_http_kvserve_module);
    m = kmcf->models->elts;
    n = kmcf->models->nelts;

    /* the size first: one allocation, whatever the models' reasons */
    down = 0;
    len = sizeof(ngx_http_kvserve_health_head) - 1
          + sizeof(ngx_http_kvserve_health_tail) - 1;

    for (i = 0; i < n; i++) {
        if (ngx_http_kvserve_engine_available(i, &why) == NGX_OK) {
            continue;
        }

        ngx_http_kvserve_health_why(i, &why);

        /* " name: why;" */
        len += 4 + m[i].name.len
               + ngx_escape_json(NULL, m[i].name.data, m[i].name.len)
               + why.len + ngx_escape_json(NULL, why.data, why.len);
        down++;
    }

    status = down == 0 ? NGX_HTTP_OK : NGX_HTTP_SERVICE_UNAVAILABLE;

    if (down == 0) {
        len = sizeof(ngx_http_kvserve_health_ok) - 1;
    }

    b = ngx_create_temp_buf(r->pool, len);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (down == 0) {
        b->last = ngx_cpymem(b->last, ngx_http_kvserve_health_ok, len);

    } else {
        b->last = ngx_cpymem(b->last, ngx_http_kvserve_health_head,
                             sizeof(ngx_http_kvserve_health_head) - 1);

        for (i = 0; i < n; i++) {
            if (ngx_http_kvserve_engine_available(i, &why) == NGX_OK) {
                continue;
            }

            ngx_http_kvserve_health_why(i, &why);

            *b->last++ = ' ';
            b->last = (u_char *) ngx_escape_json(b->last, m[i].name.data,
                                                 m[i].name.len);
            *b->last++ = ':';
            *b->last++ = ' ';
            b->last = (u_char *) ngx_escape_json(b->last, why.data,
                                                 why.len);
            *b->last++ = --down ? ';' : '.';
        }

        b->last = ngx_cpymem(b->last, ngx_http_kvserve_health_tail,
                             sizeof(ngx_http_kvserve_health_tail) - 1);
    }

    r->headers_out.status = status;
    r->headers_out.content_length_n = b->last - b->pos;
    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;

    /* a balancer's answer is now's, and a 503 asks to retry soon */
    if (ngx_http_kvserve_add_header(r, "Cache-Control", "no-store")
        != NGX_OK
        || (status == NGX_HTTP_SERVICE_UNAVAILABLE
            && ngx_http_kvserve_add_header(r, "Retry-After", "1") != NGX_OK))
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

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
