/*
 * ngx_http_kvserve_tenant: who a request is for.  The directive
 * kvserve_tenant, the variable $kvserve_tenant, the hashes that stand
 * for a tenant outside the worker, and a request's identities made from
 * them: the fair share's tenant here, the cache scope in
 * ngx_http_kvserve_cache.c (which defaults to the tenant), the token
 * limits' default key (a kvserve_limit_zone without a key is keyed by
 * $kvserve_tenant, ngx_http_kvserve_limit_conf.c).
 *
 * Invariants:
 *  - a tenant's name (an API key, often) stays in the worker: what the
 *    engine, the metrics, the limit zones and the logs see is its id,
 *    the 32 hex digits of the XXH3-128 of "tenant\n" and the name;
 *  - every hashed identity is tagged with what it names ("tenant\n",
 *    "scope\n", "location\n": no tag is a prefix of another), so no
 *    value of one kind hashes as a value of another: a client that
 *    sends a crafted key cannot land in a named cache group, and a
 *    location's scope is no tenant's;
 *  - a request without a tenant (kvserve_tenant not set, or its value
 *    empty) has an empty id; the fair share then takes the key of its
 *    first kvserve_limit zone, else its client address, as before
 *    kvserve_tenant existed.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <xxhash.h>

#include "ngx_http_kvserve_completions.h"
#include "ngx/limit/ngx_http_kvserve_limit.h"


static ngx_int_t ngx_http_kvserve_tenant_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


static ngx_http_variable_t  ngx_http_kvserve_tenant_vars[] = {

    { ngx_string("kvserve_tenant"), NULL,
      ngx_http_kvserve_tenant_variable, 0, 0, 0 },

      ngx_http_null_variable
};


/* ---- the directive ---------------------------------------------------- */

/* kvserve_tenant <value>: a string with variables, such as $tenant */
char *
ngx_http_kvserve_tenant_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_loc_conf_t  *klcf = conf;

    ngx_str_t  *value;

    if (klcf->tenant != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    return ngx_http_kvserve_conf_complex(cf, cmd, &value[1],
                                         "it must be a string with "
                                         "variables, such as $tenant or "
                                         "$http_x_api_key", &klcf->tenant);
}


/* ---- hashes ------------------------------------------------------------ */

/*
 * out: the 32 hex digits of the XXH3-128 of tag and v, in pool (tag may
 * be empty).  A key that names someone (a tenant, a cache scope, a rate
 * limit's key: API keys) leaves the worker only this way, at a fixed
 * length.
 */
ngx_int_t
ngx_http_kvserve_hash_tagged(ngx_pool_t *pool, const char *tag, ngx_str_t *v,
    ngx_str_t *out)
{
    u_char         *p, *in;
    size_t          tl;
    ngx_uint_t      i;
    XXH128_hash_t   h;

    static const u_char  hex[] = "0123456789abcdef";

    tl = ngx_strlen(tag);
    in = v->data;

    if (tl > 0) {
        in = ngx_pnalloc(pool, tl + v->len);
        if (in == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(in, tag, tl);
        ngx_memcpy(in + tl, v->data, v->len);
    }

    h = XXH3_128bits(in, tl + v->len);

    p = ngx_pnalloc(pool, 32);
    if (p == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < 16; i++) {
        p[i] = hex[(h.high64 >> (60 - 4 * i)) & 0xf];
        p[16 + i] = hex[(h.low64 >> (60 - 4 * i)) & 0xf];
    }

    out->data = p;
    out->len = 32;

    return NGX_OK;
}


ngx_int_t
ngx_http_kvserve_hash_hex(ngx_pool_t *pool, ngx_str_t *v, ngx_str_t *out)
{
    return ngx_http_kvserve_hash_tagged(pool, "", v, out);
}


/* ---- a request's tenant ------------------------------------------------ */

/*
 * id: the tenant's id, len 0 when the request has none.  A value that
 * refers to $kvserve_tenant, itself or through a map, would evaluate
 * itself for ever: it is an error instead (variables are evaluated on
 * the worker's one event loop, so one flag tells).
 */
ngx_int_t
ngx_http_kvserve_tenant_id(ngx_http_request_t *r, ngx_str_t *id)
{
    ngx_int_t                     rc;
    ngx_str_t                     name;
    ngx_http_kvserve_loc_conf_t  *klcf;

    static ngx_uint_t  evaluating, looped;

    ngx_str_null(id);

    klcf = ngx_http_get_module_loc_conf(r, ngx_http_kvserve_module);

    if (klcf->tenant == NULL || klcf->tenant == NGX_CONF_UNSET_PTR) {
        return NGX_OK;
    }

    if (evaluating) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "kvserve_tenant \"%V\" refers to $kvserve_tenant",
                      &klcf->tenant->value);
        looped = 1;
        return NGX_ERROR;
    }

    /* the inner call's error is an empty variable to nginx: the outer
     * one fails instead of naming the request with what is left */
    evaluating = 1;
    looped = 0;
    rc = ngx_http_complex_value(r, klcf->tenant, &name);
    evaluating = 0;

    if (rc != NGX_OK || looped) {
        looped = 0;
        return NGX_ERROR;
    }

    if (name.len == 0) {
        return NGX_OK;
    }

    return ngx_http_kvserve_hash_tagged(r->pool, "tenant\n", &name, id);
}


/*
 * A request no kvserve_limit key names is the fair share's tenant of its
 * client address (the sockaddr's address bytes, without the port, as
 * the realip module may have set them), hashed as a key is: so keyless
 * clients share the engine between them, not in one nameless queue.  A
 * unix-socket client has no address and stays nameless.
 */
static ngx_int_t
ngx_http_kvserve_addr_tenant(ngx_http_kvserve_ctx_t *ctx)
{
    ngx_str_t             a;
    struct sockaddr      *sa;
#if (NGX_HAVE_INET6)
    struct sockaddr_in6  *sin6;
#endif

    sa = ctx->r->connection->sockaddr;

    switch (sa->sa_family) {

    case AF_INET:
        a.data = (u_char *) &((struct sockaddr_in *) sa)->sin_addr;
        a.len = sizeof(struct in_addr);
        break;

#if (NGX_HAVE_INET6)
    case AF_INET6:
        sin6 = (struct sockaddr_in6 *) sa;
        a.data = sin6->sin6_addr.s6_addr;
        a.len = sizeof(struct in6_addr);
        break;
#endif

    default:
        return NGX_OK;
    }

    return ngx_http_kvserve_hash_hex(ctx->r->pool, &a, &ctx->tenant);
}


/*
 * ctx->tenant_id from kvserve_tenant, and the fair share's tenant
 * (ctx->tenant): the tenant's id, else the first kvserve_limit zone's
 * key, else the client address.
 */
ngx_int_t
ngx_http_kvserve_tenant(ngx_http_kvserve_ctx_t *ctx)
{
    if (ngx_http_kvserve_tenant_id(ctx->r, &ctx->tenant_id) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ctx->tenant_id.len > 0) {
        ctx->tenant = ctx->tenant_id;
        return NGX_OK;
    }

    if (ngx_http_kvserve_limit_tenant(ctx) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ctx->tenant.len > 0) {
        return NGX_OK;
    }

    return ngx_http_kvserve_addr_tenant(ctx);
}


/* ---- $kvserve_tenant ---------------------------------------------------- */

/* The tenant's id (never its name); not found without a tenant. */
static ngx_int_t
ngx_http_kvserve_tenant_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_str_t  id;

    if (ngx_http_kvserve_tenant_id(r, &id) != NGX_OK) {
        return NGX_ERROR;
    }

    if (id.len == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    v->len = id.len;
    v->data = id.data;

    return NGX_OK;
}


ngx_int_t
ngx_http_kvserve_tenant_add_variables(ngx_conf_t *cf)
{
    return ngx_http_kvserve_add_vars(cf, ngx_http_kvserve_tenant_vars);
}
