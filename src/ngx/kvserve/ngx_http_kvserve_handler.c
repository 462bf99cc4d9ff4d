/*
 * ngx_http_kvserve_handler: the content handler of `kvserve` locations.
 *
 * Routing and bodies come from libkvserve (kvs_api_*); this file only maps
 * outcomes to HTTP statuses and headers and sends the body.  Every answer,
 * errors included, is JSON in OpenAI's shapes.  POST /v1/chat/completions
 * and /v1/completions go to ngx_http_kvserve_completions.c.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve.h"
#include "api/kvs_api.h"


static ngx_int_t ngx_http_kvserve_error(ngx_http_request_t *r,
    ngx_uint_t status, const char *message, const char *code);


static void
ngx_http_kvserve_describe(ngx_http_kvserve_model_t *m, kvs_api_model_t *out)
{
    out->id = (const char *) m->name.data;
    out->id_len = m->name.len;
    out->created = m->model->mtime;
    out->file_size = m->model->file_size;
    out->hp = &m->model->hp;
}


static ngx_int_t
ngx_http_kvserve_models(ngx_http_request_t *r, kvs_route_t *route)
{
    ngx_int_t                      rc;
    ngx_uint_t                     i, n;
    kvs_buf_t                      body;
    kvs_err_t                      err;
    kvs_api_model_t               *list;
    ngx_http_kvserve_model_t      *m;
    ngx_http_kvserve_main_conf_t  *kmcf;

    kmcf = ngx_http_get_module_main_conf(r, ngx_http_kvserve_module);
    m = kmcf->models->elts;
    n = kmcf->models->nelts;

    ngx_memzero(&body, sizeof(kvs_buf_t));

    if (route->kind == KVS_ROUTE_MODEL) {
        for (i = 0; i < n; i++) {
            if (m[i].name.len == route->id_len
                && ngx_strncmp(m[i].name.data, route->id, route->id_len)
                   == 0)
            {
                break;
            }
        }

        if (i == n) {
            if (kvs_api_model_not_found_json(&body, route->id,
                                             route->id_len) != KVS_OK)
            {
                kvs_buf_free(&body);
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }
            return ngx_http_kvserve_send_json(r, NGX_HTTP_NOT_FOUND, &body);
        }

        list = ngx_palloc(r->pool, sizeof(kvs_api_model_t));
        if (list == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
        ngx_http_kvserve_describe(&m[i], list);
        rc = kvs_api_model_json(list, &body, &err);

    } else {
        list = ngx_palloc(r->pool, n * sizeof(kvs_api_model_t));
        if (list == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
        for (i = 0; i < n; i++) {
            ngx_http_kvserve_describe(&m[i], &list[i]);
        }
        rc = kvs_api_models_json(list, n, &body, &err);
    }

    if (rc != KVS_OK) {
        kvs_buf_free(&body);
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "kvserve: %s", err.msg);
        return ngx_http_kvserve_error(r, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                      "The server could not build the "
                                      "response.", NULL);
    }

    return ngx_http_kvserve_send_json(r, NGX_HTTP_OK, &body);
}


/*
 * The POST endpoints, matched as kvs_api_route() matches the others
 * (from the first "/v1/" in the path): 1 chat, 0 completions,
 * NGX_DECLINED neither.
 */
ngx_int_t
ngx_http_kvserve_route_post(ngx_http_request_t *r)
{
    u_char  *p, *last;
    size_t   len;

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
        return 1;
    }

    if (len == sizeof("completions") - 1
        && ngx_strncmp(p, "completions", len) == 0)
    {
        return 0;
    }

    return NGX_DECLINED;
}


ngx_int_t
ngx_http_kvserve_handler(ngx_http_request_t *r)
{
    u_char       *msg;
    ngx_int_t     rc, chat;
    kvs_route_t   route;

    chat = ngx_http_kvserve_route_post(r);

    if (chat != NGX_DECLINED) {
        if (r->method == NGX_HTTP_POST) {
            return ngx_http_kvserve_completions(r, chat);
        }

        rc = ngx_http_discard_request_body(r);
        if (rc != NGX_OK) {
            return rc;
        }

        msg = ngx_pnalloc(r->pool, r->method_name.len + 64);
        if (msg == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
        ngx_sprintf(msg, "Method %V is not allowed here; use POST.%Z",
                    &r->method_name);
        return ngx_http_kvserve_error(r, NGX_HTTP_NOT_ALLOWED, (char *) msg,
                                      "method_not_allowed");
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    kvs_api_route((const char *) r->uri.data, r->uri.len, &route);

    if (route.kind == KVS_ROUTE_UNKNOWN) {
        msg = ngx_pnalloc(r->pool, r->method_name.len + r->uri.len + 32);
        if (msg == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
        ngx_sprintf(msg, "Invalid URL (%V %V)%Z", &r->method_name, &r->uri);
        return ngx_http_kvserve_error(r, NGX_HTTP_NOT_FOUND, (char *) msg,
                                      NULL);
    }

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        msg = ngx_pnalloc(r->pool, r->method_name.len + 64);
        if (msg == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
        ngx_sprintf(msg, "Method %V is not allowed here; use GET.%Z",
                    &r->method_name);
        return ngx_http_kvserve_error(r, NGX_HTTP_NOT_ALLOWED, (char *) msg,
                                      "method_not_allowed");
    }

    return ngx_http_kvserve_models(r, &route);
}


static ngx_int_t
ngx_http_kvserve_error(ngx_http_request_t *r, ngx_uint_t status,
    const char *message, const char *code)
{
    kvs_buf_t  body;

    ngx_memzero(&body, sizeof(kvs_buf_t));

    if (kvs_api_error_json(&body, message, status >= 500 ? "server_error"
                                           : "invalid_request_error",
                           NULL, code) != KVS_OK)
    {
        kvs_buf_free(&body);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_kvserve_send_json(r, status, &body);
}


/* Adds a response header; key and value are static strings. */
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
                ? "POST" : "GET, HEAD";

        if (ngx_http_kvserve_add_header(r, "Allow", allow) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    if (status == NGX_HTTP_SERVICE_UNAVAILABLE
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
