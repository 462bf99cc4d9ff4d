/*
 * ngx_http_kvserve_cors: `kvserve_cors_origins * | off | ORIGIN ...;`
 * (http, server, location), the CORS preflight answer (OPTIONS with
 * Access-Control-Request-Method: 204 and the allowed methods and
 * headers) and a header filter that adds Access-Control-Allow-Origin to
 * every answer of the module's locations (kvserve, kvserve_health,
 * kvserve_metrics, kvserve_status) whose Origin is allowed, errors and
 * nginx's own pages included, so a browser can read why a call failed.
 *
 * Invariants:
 *  - an origin is checked when the configuration is read (`nginx -t`
 *    names a bad one): scheme http or https, a host, an optional port
 *    1..65535, nothing after; compared case-insensitively, as browsers
 *    send scheme and host in lower case;
 *  - a location without the directive (or with off) answers as before:
 *    no CORS header, OPTIONS not answered here;
 *  - the filter adds each header once per request, whatever path the
 *    answer took (a rewritten error page passes the filter once more);
 *  - a request's Origin is echoed only when it is in the list; "*"
 *    answers "*" (no credentials are involved: an API key travels in
 *    Authorization, which preflight allows by echoing what is asked).
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_request.h"


#define NGX_HTTP_KVSERVE_CORS_MAX_AGE  "7200"   /* Chrome's ceiling */


static ngx_http_output_header_filter_pt  ngx_http_kvserve_cors_next;


/* scheme://host[:port], nothing else; NULL when good, else why not */
static const char *
ngx_http_kvserve_cors_check(ngx_str_t *o)
{
    u_char      *p, *last, *host;
    ngx_uint_t   port, digits;

    p = o->data;
    last = o->data + o->len;

    if (o->len > 7 && ngx_strncasecmp(p, (u_char *) "http://", 7) == 0) {
        p += 7;

    } else if (o->len > 8
               && ngx_strncasecmp(p, (u_char *) "https://", 8) == 0)
    {
        p += 8;

    } else {
        return "an origin is \"*\" or http://host[:port] or "
               "https://host[:port]";
    }

    host = p;

    if (p < last && *p == '[') {
        /* an IPv6 literal */
        while (p < last && *p != ']') {
            if (!(ngx_strchr("0123456789abcdefABCDEF:.[", *p))) {
                return "the IPv6 address holds a character it cannot";
            }
            p++;
        }

        if (p == last) {
            return "the IPv6 address has no closing \"]\"";
        }

        p++;

    } else {
        while (p < last && *p != ':') {
            if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')
                  || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.'))
            {
                return "an origin has no path, query or user, and its host "
                       "is letters, digits, \"-\" and \".\"";
            }
            p++;
        }
    }

    if (p == host) {
        return "the origin has no host";
    }

    if (p == last) {
        return NULL;
    }

    /* *p == ':' */
    p++;
    port = 0;
    digits = 0;

    while (p < last && *p >= '0' && *p <= '9' && digits < 6) {
        port = port * 10 + (*p++ - '0');
        digits++;
    }

    if (p != last || digits == 0 || port == 0 || port > 65535) {
        return "the port must be 1..65535, and nothing may follow it";
    }

    return NULL;
}


char *
ngx_http_kvserve_cors_origins(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_kvserve_loc_conf_t  *klcf = conf;

    const char  *why;
    ngx_str_t   *value, *o;
    ngx_uint_t   i;

    if (klcf->cors != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (cf->args->nelts == 2
        && ngx_strcmp(value[1].data, "off") == 0)
    {
        klcf->cors = NULL;
        return NGX_CONF_OK;
    }

    klcf->cors = ngx_array_create(cf->pool, cf->args->nelts - 1,
                                  sizeof(ngx_str_t));
    if (klcf->cors == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 1; i < cf->args->nelts; i++) {
        if (value[i].len == 1 && value[i].data[0] == '*') {
            if (cf->args->nelts != 2) {
                return ngx_http_kvserve_conf_invalid(cf, cmd, &value[i],
                                                     "\"*\" stands alone");
            }

        } else if (ngx_strcmp(value[i].data, "off") == 0) {
            return ngx_http_kvserve_conf_invalid(cf, cmd, &value[i],
                                                 "\"off\" stands alone");

        } else {
            why = ngx_http_kvserve_cors_check(&value[i]);
            if (why != NULL) {
                return ngx_http_kvserve_conf_invalid(cf, cmd, &value[i],
                                                     why);
            }
        }

        o = ngx_array_push(klcf->cors);
        if (o == NULL) {
            return NGX_CONF_ERROR;
        }

        *o = value[i];
    }

    return NGX_CONF_OK;
}


/* r's request header name, or NULL. */
static ngx_table_elt_t *
ngx_http_kvserve_cors_header(ngx_http_request_t *r, const char *name,
    size_t len)
{
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {
        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NULL;
            }
            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len == len
            && ngx_strncasecmp(h[i].key.data, (u_char *) name, len) == 0)
        {
            return &h[i];
        }
    }
}


/* The origins of r's location when it is one of the module's, else
 * NULL. */
static ngx_array_t *
ngx_http_kvserve_cors_conf(ngx_http_request_t *r)
{
    ngx_http_kvserve_loc_conf_t  *klcf;

    klcf = ngx_http_get_module_loc_conf(r, ngx_http_kvserve_module);

    if (klcf == NULL || klcf->cors == NULL
        || klcf->cors == NGX_CONF_UNSET_PTR
        || !(klcf->enable == 1 || klcf->health == 1 || klcf->metrics == 1
             || klcf->status == 1))
    {
        return NULL;
    }

    return klcf->cors;
}


/* "*", the request's Origin (allowed), or NULL. */
static ngx_str_t *
ngx_http_kvserve_cors_allowed(ngx_http_request_t *r, ngx_array_t *cors)
{
    ngx_str_t        *o;
    ngx_uint_t        i;
    ngx_table_elt_t  *origin;

    origin = ngx_http_kvserve_cors_header(r, "Origin", 6);
    if (origin == NULL) {
        return NULL;
    }

    o = cors->elts;

    for (i = 0; i < cors->nelts; i++) {
        if (o[i].len == 1 && o[i].data[0] == '*') {
            return &o[i];
        }

        if (o[i].len == origin->value.len
            && ngx_strncasecmp(o[i].data, origin->value.data, o[i].len)
               == 0)
        {
            return &origin->value;
        }
    }

    return NULL;
}


static ngx_int_t
ngx_http_kvserve_cors_add(ngx_http_request_t *r, const char *key,
    ngx_str_t *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key.data = (u_char *) key;
    h->key.len = ngx_strlen(key);
    h->value = *value;

    return NGX_OK;
}


static ngx_int_t
ngx_http_kvserve_cors_filter(ngx_http_request_t *r)
{
    ngx_str_t        *allow, vary;
    ngx_uint_t        i, any;
    ngx_array_t      *cors;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    cors = ngx_http_kvserve_cors_conf(r);

    if (cors == NULL || r != r->main) {
        return ngx_http_kvserve_cors_next(r);
    }

    allow = ngx_http_kvserve_cors_allowed(r, cors);

    /* the answer depends on Origin unless every origin gets "*" */
    any = cors->nelts == 1 && ((ngx_str_t *) cors->elts)[0].len == 1;

    /* once: a rewritten error page comes through here again */
    part = &r->headers_out.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {
        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }
            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].hash != 0
            && h[i].key.len == sizeof("Access-Control-Allow-Origin") - 1
            && ngx_strncasecmp(h[i].key.data,
                               (u_char *) "Access-Control-Allow-Origin",
                               h[i].key.len)
               == 0)
        {
            return ngx_http_kvserve_cors_next(r);
        }
    }

    if (allow != NULL
        && ngx_http_kvserve_cors_add(r, "Access-Control-Allow-Origin",
                                     allow)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (!any) {
        ngx_str_set(&vary, "Origin");
        if (ngx_http_kvserve_cors_add(r, "Vary", &vary) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return ngx_http_kvserve_cors_next(r);
}


ngx_int_t
ngx_http_kvserve_cors_preflight(ngx_http_request_t *r)
{
    ngx_int_t         rc;
    ngx_str_t         v, *allow;
    ngx_array_t      *cors;
    ngx_table_elt_t  *method, *headers;

    if (r->method != NGX_HTTP_OPTIONS) {
        return NGX_DECLINED;
    }

    cors = ngx_http_kvserve_cors_conf(r);
    method = ngx_http_kvserve_cors_header(r, "Access-Control-Request-Method",
                                          29);

    if (cors == NULL || method == NULL) {
        return NGX_DECLINED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    allow = ngx_http_kvserve_cors_allowed(r, cors);

    if (allow == NULL) {
        return ngx_http_kvserve_error_json(r, NGX_HTTP_FORBIDDEN,
                                           "This origin is not allowed "
                                           "(kvserve_cors_origins).",
                                           NULL, "origin_not_allowed");
    }

    /* Allow-Origin comes from the filter, as for every answer */
    ngx_str_set(&v, "GET, HEAD, POST, OPTIONS");
    if (ngx_http_kvserve_cors_add(r, "Access-Control-Allow-Methods", &v)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    headers = ngx_http_kvserve_cors_header(r,
                                           "Access-Control-Request-Headers",
                                           30);
    if (headers != NULL && headers->value.len > 0
        && ngx_http_kvserve_cors_add(r, "Access-Control-Allow-Headers",
                                     &headers->value)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_str_set(&v, NGX_HTTP_KVSERVE_CORS_MAX_AGE);
    if (ngx_http_kvserve_cors_add(r, "Access-Control-Max-Age", &v)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->headers_out.status = NGX_HTTP_NO_CONTENT;
    r->headers_out.content_length_n = 0;
    r->header_only = 1;

    return ngx_http_send_header(r);
}


ngx_int_t
ngx_http_kvserve_cors_init(ngx_conf_t *cf)
{
    ngx_http_kvserve_cors_next = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_kvserve_cors_filter;

    return NGX_OK;
}
