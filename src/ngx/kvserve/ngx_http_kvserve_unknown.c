/*
 * ngx_http_kvserve_unknown: the request fields the parser does not read
 * (kvs_api_req_unknown()), logged at notice level once per field name
 * per worker, so that an operator sees what clients send that has no
 * effect (the request is served: unknown fields pass, as OpenAI lets
 * them).
 *
 * Invariants: the memory is fixed, whatever clients send: at most
 * NGX_HTTP_KVSERVE_UNKNOWN_MAX names of at most
 * NGX_HTTP_KVSERVE_UNKNOWN_LEN bytes each (a longer name is logged and
 * remembered cut, with its length); past that, one line says that no
 * more are logged.  A request logs at most NGX_HTTP_KVSERVE_UNKNOWN_REQ
 * new names, so a body of many keys costs a bounded scan of the table
 * per name.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_completions.h"


#define NGX_HTTP_KVSERVE_UNKNOWN_MAX  64    /* names remembered */
#define NGX_HTTP_KVSERVE_UNKNOWN_LEN  64    /* bytes of each */
#define NGX_HTTP_KVSERVE_UNKNOWN_REQ  16    /* names looked at per request */


typedef struct {
    u_char   name[NGX_HTTP_KVSERVE_UNKNOWN_LEN];
    size_t   len;                          /* the name's own length */
} ngx_http_kvserve_unknown_t;


static ngx_http_kvserve_unknown_t
    ngx_http_kvserve_unknown[NGX_HTTP_KVSERVE_UNKNOWN_MAX];
static ngx_uint_t  ngx_http_kvserve_n_unknown;
static ngx_uint_t  ngx_http_kvserve_unknown_full;


static ngx_uint_t
ngx_http_kvserve_unknown_seen(const u_char *name, size_t len)
{
    size_t      n;
    ngx_uint_t  i;

    n = ngx_min(len, NGX_HTTP_KVSERVE_UNKNOWN_LEN);

    for (i = 0; i < ngx_http_kvserve_n_unknown; i++) {
        if (ngx_http_kvserve_unknown[i].len == len
            && ngx_memcmp(ngx_http_kvserve_unknown[i].name, name, n) == 0)
        {
            return 1;
        }
    }

    return 0;
}


void
ngx_http_kvserve_log_unknown(ngx_http_request_t *r, const kvs_api_req_t *req)
{
    u_char                       c, buf[NGX_HTTP_KVSERVE_UNKNOWN_LEN];
    size_t                       len, n, j;
    ngx_uint_t                   i, k;
    const char                  *names[NGX_HTTP_KVSERVE_UNKNOWN_REQ];
    ngx_http_kvserve_unknown_t  *u;

    if (ngx_http_kvserve_unknown_full) {
        return;
    }

    k = kvs_api_req_unknown(req, names, NGX_HTTP_KVSERVE_UNKNOWN_REQ);
    k = ngx_min(k, NGX_HTTP_KVSERVE_UNKNOWN_REQ);

    for (i = 0; i < k; i++) {
        len = ngx_strlen(names[i]);
        n = ngx_min(len, NGX_HTTP_KVSERVE_UNKNOWN_LEN);

        /* the name is the client's: no control bytes reach the log */
        for (j = 0; j < n; j++) {
            c = (u_char) names[i][j];
            buf[j] = (c < 0x20 || c == 0x7f || c == '"') ? '?' : c;
        }

        if (ngx_http_kvserve_unknown_seen(buf, len)) {
            continue;
        }

        if (ngx_http_kvserve_n_unknown == NGX_HTTP_KVSERVE_UNKNOWN_MAX) {
            ngx_http_kvserve_unknown_full = 1;
            ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0,
                          "kvserve: %ui request fields that are not "
                          "read were logged; no more will be",
                          (ngx_uint_t) NGX_HTTP_KVSERVE_UNKNOWN_MAX);
            return;
        }

        u = &ngx_http_kvserve_unknown[ngx_http_kvserve_n_unknown++];
        ngx_memcpy(u->name, buf, n);
        u->len = len;

        ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0,
                      "kvserve: request field \"%*s\"%s in %V is not read "
                      "by this server and has no effect (logged once per "
                      "field name)", n, u->name,
                      len > n ? "..." : "", &r->uri);
    }
}
