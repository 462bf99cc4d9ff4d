/*
 * ngx_http_kvserve_handler: the content handler of `kvserve` locations,
 * above the phases of a request (ngx_http_kvserve_request.h draws the
 * layers).
 *
 * Routing and bodies come from libkvserve (kvs_api_*); this file only maps
 * outcomes to HTTP statuses, and the request core sends them.  Every
 * answer, errors included, is JSON in OpenAI's shapes.  POST
 * /v1/chat/completions, /v1/completions and Anthropic's /v1/messages
 * (and /v1/messages/count_tokens) go to
 * ngx_http_kvserve_completions.c; POST .../tokenize and .../detokenize
 * (by the path's last segment) to ngx_http_kvserve_tokens.c, GET
 * .../health to ngx_http_kvserve_health.c; a CORS preflight is answered
 * first (ngx_http_kvserve_cors.c).
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_completions.h"
#include "api/kvs_api.h"


static ngx_int_t ngx_http_kvserve_not_allowed(ngx_http_request_t *r,
    const char *method);


static void
ngx_http_kvserve_describe(ngx_http_kvserve_model_t *m, ngx_uint_t index,
    kvs_api_model_t *out)
{
    ngx_str_t                why;
    const kvs_wire_model_t  *wm;

    ngx_memzero(out, sizeof(kvs_api_model_t));

    /* this worker's view of the model's engine: ready, or why not */
    out->has_availability = 1;
    out->available = ngx_http_kvserve_engine_available(index, &why)
                     == NGX_OK;
    out->reason = (const char *) why.data;
    out->reason_len = why.len;

    out->id = (const char *) m->name.data;
    out->id_len = m->name.len;
    out->created = m->model->mtime;
    out->file_size = m->model->file_size;
    out->hp = &m->model->hp;
    /* what the engine's cache holds (the configured dtype until it said
     * hello), scales included */
    out->kv_bytes_per_token = ngx_http_kvserve_kv_bpt(m);
    out->kv_dtype = kvs_kv_dtype_name(ngx_http_kvserve_kv_dtype(m));

    /* the engine's own figures once it said hello; before, only the
     * default backend's element, and no weights */
    wm = ngx_http_kvserve_engine_model(m);

    if (wm != NULL && kvs_backend_kv_size(wm->kv_dtype) != 0) {
        out->backend = wm->backend == KVS_BACKEND_CUDA ? "cuda" : "cpu";
        out->weights_mapped = wm->weights_mapped;
        out->weights_owned = wm->weights_owned;
        out->weights_device = wm->weights_device;
    }
}


static ngx_int_t
ngx_http_kvserve_models(ngx_http_request_t *r, kvs_route_t *route)
{
    ngx_int_t                      rc;
    ngx_uint_t                     i, j, k, n, total;
    kvs_buf_t                      body;
    kvs_err_t                      err;
    kvs_api_model_t               *list;
    ngx_http_kvserve_lora_t       *a;
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

        /* an adapter's id, BASE:NAME */
        a = i == n ? ngx_http_kvserve_lora_find(kmcf, route->id,
                                                route->id_len, &i)
                   : NULL;

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
        ngx_http_kvserve_describe(&m[i], i, list);
        if (a != NULL) {
            list->id = (const char *) a->id.data;
            list->id_len = a->id.len;
        }
        rc = kvs_api_model_json(list, &body, &err);

    } else {
        /* every model, each followed by its adapters */
        total = n;
        for (i = 0; i < n; i++) {
            total += m[i].loras != NULL ? m[i].loras->nelts : 0;
        }

        list = ngx_palloc(r->pool, total * sizeof(kvs_api_model_t));
        if (list == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        for (i = 0, j = 0; i < n; i++) {
            ngx_http_kvserve_describe(&m[i], i, &list[j++]);

            a = m[i].loras != NULL ? m[i].loras->elts : NULL;
            for (k = 0; a != NULL && k < m[i].loras->nelts; k++) {
                list[j] = list[j - 1 - k];
                list[j].id = (const char *) a[k].id.data;
                list[j].id_len = a[k].id.len;
                j++;
            }
        }
        rc = kvs_api_models_json(list, total, &body, &err);
    }

    if (rc != KVS_OK) {
        kvs_buf_free(&body);
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "kvserve: %s", err.msg);
        return ngx_http_kvserve_error_json(r, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                           "The server could not build "
                                           "the response.", NULL, NULL);
    }

    return ngx_http_kvserve_send_json(r, NGX_HTTP_OK, &body);
}


ngx_int_t
ngx_http_kvserve_handler(ngx_http_request_t *r)
{
    u_char       *msg;
    ngx_int_t     rc, kind, tokens;
    kvs_route_t   route;

    rc = ngx_http_kvserve_cors_preflight(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    kind = ngx_http_kvserve_route_post(r);

    if (kind != NGX_DECLINED) {
        if (r->method == NGX_HTTP_POST) {
            return ngx_http_kvserve_completions(r, kind);
        }

        rc = ngx_http_discard_request_body(r);
        if (rc != NGX_OK) {
            return rc;
        }

        return ngx_http_kvserve_not_allowed(r, "POST");
    }

    kvs_api_route((const char *) r->uri.data, r->uri.len, &route);
    tokens = route.kind == KVS_ROUTE_UNKNOWN
             ? ngx_http_kvserve_route_tokens(r) : NGX_DECLINED;

    if (tokens == 0 || tokens == 1) {
        if (r->method == NGX_HTTP_POST) {
            return ngx_http_kvserve_tokens(r);
        }

        rc = ngx_http_discard_request_body(r);
        if (rc != NGX_OK) {
            return rc;
        }

        return ngx_http_kvserve_not_allowed(r, "POST");
    }

    if (tokens == 2) {
        return ngx_http_kvserve_health_handler(r);
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    if (route.kind == KVS_ROUTE_UNKNOWN) {
        msg = ngx_pnalloc(r->pool, r->method_name.len + r->uri.len + 32);
        if (msg == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
        ngx_sprintf(msg, "Invalid URL (%V %V)%Z", &r->method_name, &r->uri);
        return ngx_http_kvserve_error_json(r, NGX_HTTP_NOT_FOUND, (char *) msg,
                                           NULL, NULL);
    }

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return ngx_http_kvserve_not_allowed(r, "GET");
    }

    return ngx_http_kvserve_models(r, &route);
}


/* The 405 of an endpoint that takes only method (the core's answer adds
 * the Allow header). */
static ngx_int_t
ngx_http_kvserve_not_allowed(ngx_http_request_t *r, const char *method)
{
    u_char  *msg;

    msg = ngx_pnalloc(r->pool, r->method_name.len + 64);
    if (msg == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_sprintf(msg, "Method %V is not allowed here; use %s.%Z",
                &r->method_name, method);

    return ngx_http_kvserve_error_json(r, NGX_HTTP_NOT_ALLOWED, (char *) msg,
                                       NULL, "method_not_allowed");
}
