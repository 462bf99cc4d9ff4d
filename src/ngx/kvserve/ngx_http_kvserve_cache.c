/*
 * ngx_http_kvserve_cache: the prefix cache from the worker's side: the
 * directives kvserve_cache_scope, kvserve_cache_pin_max (and the flag
 * kvserve_prefix_cache, a plain slot), a request's cache scope, the pins
 * of its cache_control breakpoints, and what the engine says back (usage,
 * variables, metrics).
 *
 * Invariants:
 *  - a request's scope is, by default, its tenant's (kvserve_tenant), and
 *    without a tenant its location's: a prefix is shared across tenants
 *    only where kvserve_cache_scope says so ("global", or a group's
 *    value); the global scope (empty) is never had by default;
 *  - a scope reaches the engine only as a 32-hex-digit XXH3-128, tagged
 *    by its kind (ngx_http_kvserve_hash_tagged: the tenant's id, a
 *    group's value, a location's names): fixed length (within
 *    KVS_RADIX_MAX_SCOPE whatever the value), never the value itself (an
 *    API key stays in the worker), distinct values collide with
 *    probability 2^-128, and no value of one kind is another kind's;
 *  - kvserve_route names a prompt's blocks under ctx->cache_scope, made
 *    here by the same call, so a gateway looks up the namespace that its
 *    engine hosts cache under when both are configured alike;
 *  - ngx_http_kvserve_cache_pins() runs in the tokenizing job (maybe a
 *    pool thread): it touches only the job and libkvserve;
 *  - a part's cache figures are taken from the first OUT frame that
 *    carries them (the engine sends them once per choice, all alike)
 *    and added to the request's once.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_completions.h"
#include "api/kvs_api_cache.h"

#if (KVS_API_MAX_BREAKS > KVS_ENGINE_MAX_PINS)
#error "a request's breakpoints must fit the engine's pins"
#endif


/* ---- directives ------------------------------------------------------- */

/* kvserve_cache_scope global | tenant | <value> */
char *
ngx_http_kvserve_cache_scope_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_loc_conf_t  *klcf = conf;

    ngx_str_t  *value;

    if (klcf->cache_share != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 6 && ngx_strncmp(value[1].data, "global", 6) == 0) {
        klcf->cache_share = NGX_HTTP_KVSERVE_SCOPE_GLOBAL;
        return NGX_CONF_OK;
    }

    if (value[1].len == 6 && ngx_strncmp(value[1].data, "tenant", 6) == 0) {
        klcf->cache_share = NGX_HTTP_KVSERVE_SCOPE_TENANT;
        return NGX_CONF_OK;
    }

    klcf->cache_share = NGX_HTTP_KVSERVE_SCOPE_VALUE;

    return ngx_http_kvserve_conf_complex(cf, cmd, &value[1],
                                         "it must be \"global\", "
                                         "\"tenant\" or a string with "
                                         "variables, such as "
                                         "$http_authorization or a "
                                         "group's name",
                                         &klcf->cache_scope);
}


char *
ngx_http_kvserve_cache_pin_max(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_main_conf_t  *kmcf = conf;

    off_t       n;
    ngx_str_t  *value;

    if (kmcf->pin_max != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;
    n = ngx_parse_offset(&value[1]);

    if (n == NGX_ERROR || n == 0) {
        return ngx_http_kvserve_conf_invalid(cf, cmd, &value[1],
                                             "it must be a size in bytes "
                                             "greater than 0, such as 512m "
                                             "or 2g");
    }

    kmcf->pin_max = n;

    return NGX_CONF_OK;
}


/* ---- a request: its scope and pins ------------------------------------ */

/*
 * The scope of a request without a tenant: its location's, the hash of
 * its server's name and its location's name (so a gateway and its
 * engine hosts, configured alike, name it alike).
 */
static ngx_int_t
ngx_http_kvserve_location_scope(ngx_http_request_t *r, ngx_str_t *out)
{
    u_char                    *p;
    ngx_str_t                  v;
    ngx_http_core_srv_conf_t  *cscf;
    ngx_http_core_loc_conf_t  *clcf;

    cscf = ngx_http_get_module_srv_conf(r, ngx_http_core_module);
    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    v.len = cscf->server_name.len + 1 + clcf->name.len;
    v.data = ngx_pnalloc(r->pool, v.len);
    if (v.data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(v.data, cscf->server_name.data, cscf->server_name.len);
    *p++ = '\n';
    ngx_memcpy(p, clcf->name.data, clcf->name.len);

    return ngx_http_kvserve_hash_tagged(r->pool, "location\n", &v, out);
}


/*
 * The request's scope, from the location's kvserve_cache_scope: a
 * group's value, else (and by default) its tenant's id, else its
 * location's; empty (global) only where "global" is configured.  After
 * ngx_http_kvserve_tenant().
 */
ngx_int_t
ngx_http_kvserve_cache_scope(ngx_http_kvserve_ctx_t *ctx)
{
    ngx_str_t                     v;
    ngx_http_kvserve_loc_conf_t  *klcf;

    ngx_str_null(&ctx->cache_scope);
    ctx->cache_miss = -1;

    klcf = ngx_http_get_module_loc_conf(ctx->r, ngx_http_kvserve_module);

    if (klcf->cache_share == NGX_HTTP_KVSERVE_SCOPE_GLOBAL) {
        return NGX_OK;
    }

    if (klcf->cache_share == NGX_HTTP_KVSERVE_SCOPE_VALUE) {
        if (ngx_http_complex_value(ctx->r, klcf->cache_scope, &v) != NGX_OK) {
            return NGX_ERROR;
        }

        if (v.len > 0) {
            return ngx_http_kvserve_hash_tagged(ctx->r->pool, "scope\n", &v,
                                                &ctx->cache_scope);
        }
    }

    if (ctx->tenant_id.len > 0) {
        ctx->cache_scope = ctx->tenant_id;
        return NGX_OK;
    }

    return ngx_http_kvserve_location_scope(ctx->r, &ctx->cache_scope);
}


/*
 * The job's pins from the request's breakpoints: text[len] the rendered
 * prompt (args as rendered, spans its content spans), ids its tokens.
 * A breakpoint that covers no whole token pins nothing; two at the same
 * token are one pin with the longer TTL.  In the tokenizing job.
 */
int
ngx_http_kvserve_cache_pins(ngx_http_kvserve_tok_job_t *job,
    kvs_tok_ctx_t *tok, const kvs_chat_args_t *args, const char *text,
    size_t len, const kvs_span_t *spans, size_t n_spans,
    const kvs_ids_t *ids, kvs_err_t *err)
{
    int                     rc;
    size_t                  off[KVS_API_MAX_BREAKS];
    uint32_t                k, j, nt[KVS_API_MAX_BREAKS];
    kvs_engine_pin_t       *pin;
    const kvs_api_req_t    *req;

    req = job->req;
    job->n_pins = 0;

    if (req->n_breaks == 0) {
        return KVS_OK;
    }

    rc = kvs_api_cache_offsets(&job->chat, req->messages, args, text, len,
                               req->breaks, req->n_breaks, off, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_api_cache_tokens(job->vocab, tok, text, len, KVS_TOK_SPECIAL,
                              spans, n_spans, ids->ids, ids->n, off,
                              req->n_breaks, nt, err);
    if (rc != KVS_OK) {
        return rc;
    }

    for (k = 0; k < req->n_breaks; k++) {
        if (nt[k] == 0) {
            continue;
        }

        for (j = 0; j < job->n_pins; j++) {
            if (job->pins[j].n_tokens == nt[k]) {
                break;
            }
        }

        pin = &job->pins[j];

        if (j == job->n_pins) {
            pin->n_tokens = nt[k];
            pin->ttl_ms = 0;
            job->n_pins++;
        }

        if (req->breaks[k].ttl_ms > pin->ttl_ms) {
            pin->ttl_ms = req->breaks[k].ttl_ms;
        }
    }

    return KVS_OK;
}


/* The SUBMIT of part i: the request's scope, and the chat's pins. */
void
ngx_http_kvserve_cache_req(ngx_http_kvserve_ctx_t *ctx, ngx_uint_t i,
    kvs_engine_req_t *ereq)
{
    uint32_t  k;

    ereq->scope = (const char *) ctx->cache_scope.data;
    ereq->scope_len = ctx->cache_scope.len;
    ereq->adapter = ctx->lora != NULL ? ctx->lora->adapter : 0;
    ereq->n_pins = 0;

    if (!ctx->chat || i != 0) {
        return;
    }

    for (k = 0; k < ctx->tok->n_pins; k++) {
        /* a pin ends within the prompt the SUBMIT carries */
        if (ctx->tok->pins[k].n_tokens <= ereq->n_prompt) {
            ereq->pins[ereq->n_pins++] = ctx->tok->pins[k];
        }
    }
}


/* ---- what the engine says --------------------------------------------- */

void
ngx_http_kvserve_cache_out(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_part_t *part, const kvs_engine_out_t *o)
{
    if (!o->has_cache || part->has_cache) {
        return;
    }

    part->has_cache = 1;
    ctx->cached_tokens += o->n_cached;
    ctx->cached_tier += o->n_cached_tier;
    ctx->cached_host += o->n_cached_host;
    ctx->cache_created += o->n_cache_created;

    if (o->miss != KVS_RADIX_MISS_OFF) {
        ctx->cache_queried += o->n_prompt;
    }

    /* the first prompt's reason: one value for the variable */
    if (part->index == 0) {
        ctx->cache_miss = (ngx_int_t) o->miss;
        ctx->cache_miss_pos = o->miss_pos;
    }
}


/* $kvserve_cache_miss_reason's value: the reason's name, and the token
 * where the cached tokens differ ("diverged:812"). */
ngx_int_t
ngx_http_kvserve_cache_miss_text(ngx_http_request_t *r, ngx_int_t miss,
    uint32_t pos, ngx_str_t *s)
{
    u_char      *p;
    const char  *name;

    name = kvs_radix_miss_name((kvs_radix_miss_t) miss);

    p = ngx_pnalloc(r->pool, ngx_strlen(name) + 1 + NGX_INT32_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    s->data = p;
    p = ngx_cpymem(p, name, ngx_strlen(name));

    if (miss == KVS_RADIX_MISS_DIVERGED) {
        p = ngx_sprintf(p, ":%uD", pos);
    }

    s->len = p - s->data;

    return NGX_OK;
}
