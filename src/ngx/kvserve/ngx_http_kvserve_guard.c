/*
 * ngx_http_kvserve_guard: the safety layer's nginx side, a module of its
 * own (ngx_http_kvserve_guard.h says where the phases call it;
 * docs/guard.md what an operator and a client see).
 *
 *   kvserve_guard_zone NAME patterns=FILE;          http
 *   kvserve_guard zone=NAME [input=reject|off] [output=stop|redact|off];
 *   kvserve_max_prompt_tokens N;  kvserve_max_tokens N;   location
 *
 * Invariants:
 *  - a zone's rules are compiled (kvs_guard_load) while the
 *    configuration is read, so a bad or unbounded pattern fails nginx -t
 *    naming file and line; the set belongs to the cycle's pool (freed
 *    with it) and is only read afterwards, by workers and pool threads;
 *  - a refusal never echoes a pattern or the text it matched: the
 *    client sees the rule's class only;
 *  - each choice of a request with output guarded has one stream (its
 *    buffer fixed at creation), freed by the request's pool cleanup;
 *  - the counters live in one shared zone: 3 per rule (input reject,
 *    output stop, output redact), added to with relaxed atomics.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_guard.h"
#include "ngx_http_kvserve_param.h"
#include "ngx/route/ngx_http_kvserve_route.h"
#include "guard/kvs_guard.h"

#define NGX_HTTP_KVSERVE_GUARD_INPUT   0
#define NGX_HTTP_KVSERVE_GUARD_STOP    1
#define NGX_HTTP_KVSERVE_GUARD_REDACT  2

typedef struct {
    ngx_str_t                 name;
    ngx_str_t                 file;
    kvs_guard_t              *g;
    ngx_uint_t                base;       /* its first counter */
} ngx_http_kvserve_guard_zone_t;

typedef struct {
    ngx_array_t              *zones;      /* ngx_http_kvserve_guard_zone_t */
    ngx_uint_t                n_counters;
    ngx_shm_zone_t           *shm;
} ngx_http_kvserve_guard_main_conf_t;

typedef struct {
    ngx_http_kvserve_guard_zone_t  *zone; /* NULL: no guard */
    ngx_uint_t                input;      /* 1: reject */
    ngx_uint_t                output;     /* kvs_guard_mode_t */
    ngx_uint_t                max_prompt_tokens;  /* 0: no cap */
    ngx_uint_t                max_tokens;         /* 0: no cap */
} ngx_http_kvserve_guard_loc_conf_t;

typedef struct {
    ngx_http_kvserve_guard_zone_t  *zone;
    ngx_http_request_t       *r;
    kvs_guard_stream_t       *streams;    /* [n], output guarded */
    ngx_uint_t                n;
    kvs_buf_t                 out;
    u_char                    var[96];    /* $kvserve_guard */
    size_t                    var_len;
} ngx_http_kvserve_guard_ctx_t;


static char *ngx_http_kvserve_guard_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_kvserve_guard(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_kvserve_guard_preconf(ngx_conf_t *cf);
static ngx_int_t ngx_http_kvserve_guard_postconf(ngx_conf_t *cf);
static void *ngx_http_kvserve_guard_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_kvserve_guard_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_kvserve_guard_merge_loc_conf(ngx_conf_t *cf,
    void *parent, void *child);


/* the caps: "invalid value "V" in "D" directive, it must be ..." */
static ngx_http_kvserve_uint_bounds_t  ngx_http_kvserve_guard_cap = {
    1, 0x7fffffff, NGX_CONF_UNSET_UINT
};


static ngx_command_t  ngx_http_kvserve_guard_commands[] = {

    { ngx_string("kvserve_guard_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_kvserve_guard_zone,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_guard"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF
      |NGX_CONF_1MORE,
      ngx_http_kvserve_guard,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_max_prompt_tokens"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_set_uint,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_kvserve_guard_loc_conf_t, max_prompt_tokens),
      &ngx_http_kvserve_guard_cap },

    { ngx_string("kvserve_max_tokens"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_set_uint,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_kvserve_guard_loc_conf_t, max_tokens),
      &ngx_http_kvserve_guard_cap },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_kvserve_guard_module_ctx = {
    ngx_http_kvserve_guard_preconf,        /* preconfiguration */
    ngx_http_kvserve_guard_postconf,       /* postconfiguration */

    ngx_http_kvserve_guard_create_main_conf,  /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_kvserve_guard_create_loc_conf,   /* create location conf */
    ngx_http_kvserve_guard_merge_loc_conf     /* merge location conf */
};


ngx_module_t  ngx_http_kvserve_guard_module = {
    NGX_MODULE_V1,
    &ngx_http_kvserve_guard_module_ctx,    /* module context */
    ngx_http_kvserve_guard_commands,       /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/* ---- configuration ------------------------------------------------------ */

static void *
ngx_http_kvserve_guard_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_kvserve_guard_main_conf_t  *gmcf;

    gmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_kvserve_guard_main_conf_t));
    if (gmcf == NULL) {
        return NULL;
    }

    gmcf->zones = ngx_array_create(cf->pool, 2,
                                   sizeof(ngx_http_kvserve_guard_zone_t));
    if (gmcf->zones == NULL) {
        return NULL;
    }

    return gmcf;
}


static void *
ngx_http_kvserve_guard_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_kvserve_guard_loc_conf_t  *glcf;

    glcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_kvserve_guard_loc_conf_t));
    if (glcf == NULL) {
        return NULL;
    }

    glcf->zone = NGX_CONF_UNSET_PTR;
    glcf->input = NGX_CONF_UNSET_UINT;
    glcf->output = NGX_CONF_UNSET_UINT;
    glcf->max_prompt_tokens = NGX_CONF_UNSET_UINT;
    glcf->max_tokens = NGX_CONF_UNSET_UINT;

    return glcf;
}


static char *
ngx_http_kvserve_guard_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child)
{
    ngx_http_kvserve_guard_loc_conf_t  *prev = parent;
    ngx_http_kvserve_guard_loc_conf_t  *conf = child;

    ngx_http_kvserve_route_loc_conf_t  *rlcf;

    ngx_conf_merge_ptr_value(conf->zone, prev->zone, NULL);
    ngx_conf_merge_uint_value(conf->input, prev->input, 0);
    ngx_conf_merge_uint_value(conf->output, prev->output, KVS_GUARD_OFF);
    ngx_conf_merge_uint_value(conf->max_prompt_tokens,
                              prev->max_prompt_tokens, 0);
    ngx_conf_merge_uint_value(conf->max_tokens, prev->max_tokens, 0);

    /* a gateway passes what it cannot prepare to its hosts as it is:
     * the guard and the caps would be skipped there, silently */
    rlcf = ngx_http_conf_get_module_loc_conf(cf,
                                             ngx_http_kvserve_route_module);
    if (rlcf != NULL && rlcf->enable == 1
        && ((conf->zone != NULL && (conf->input || conf->output))
            || conf->max_prompt_tokens > 0 || conf->max_tokens > 0))
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "kvserve_guard, "
                           "kvserve_max_prompt_tokens and kvserve_max_tokens "
                           "apply where kvserve serves, not in a "
                           "kvserve_route location: set them on the engine "
                           "hosts");
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static void
ngx_http_kvserve_guard_free_set(void *data)
{
    kvs_guard_free(data);
}


/* kvserve_guard_zone NAME patterns=FILE */
static char *
ngx_http_kvserve_guard_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_kvserve_guard_main_conf_t  *gmcf = conf;

    ngx_str_t                       *value, file;
    kvs_err_t                        err;
    ngx_uint_t                       i;
    ngx_pool_cleanup_t              *cln;
    ngx_http_kvserve_guard_zone_t   *z;

    value = cf->args->elts;
    z = gmcf->zones->elts;

    for (i = 0; i < gmcf->zones->nelts; i++) {
        if (z[i].name.len == value[1].len
            && ngx_strncmp(z[i].name.data, value[1].data, value[1].len) == 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "duplicate guard zone "
                               "\"%V\"", &value[1]);
            return NGX_CONF_ERROR;
        }
    }

    if (ngx_http_kvserve_param(&value[2], "patterns", &file) != NGX_OK
        || file.len == 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid parameter \"%V\" "
                           "in \"kvserve_guard_zone\": it takes "
                           "patterns=FILE", &value[2]);
        return NGX_CONF_ERROR;
    }

    if (ngx_conf_full_name(cf->cycle, &file, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    z = ngx_array_push(gmcf->zones);
    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (z == NULL || cln == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(z, sizeof(*z));
    z->name = value[1];
    z->file = file;

    /* file.data is NUL-terminated by ngx_conf_full_name */
    if (kvs_guard_load(&z->g, (const char *) file.data, &err) != KVS_OK) {
        gmcf->zones->nelts--;
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "kvserve_guard_zone "
                           "\"%V\": %s", &value[1], err.msg);
        return NGX_CONF_ERROR;
    }

    cln->handler = ngx_http_kvserve_guard_free_set;
    cln->data = z->g;

    z->base = gmcf->n_counters;
    gmcf->n_counters += 3 * kvs_guard_n_rules(z->g);

    return NGX_CONF_OK;
}


/* kvserve_guard zone=NAME [input=reject|off] [output=stop|redact|off] */
static char *
ngx_http_kvserve_guard(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_kvserve_guard_loc_conf_t  *glcf = conf;

    ngx_str_t                           *value, v;
    ngx_uint_t                           i, k;
    ngx_http_kvserve_guard_zone_t       *z;
    ngx_http_kvserve_guard_main_conf_t  *gmcf;

    if (glcf->zone != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    gmcf = ngx_http_conf_get_module_main_conf(cf,
                                              ngx_http_kvserve_guard_module);
    value = cf->args->elts;
    glcf->zone = NULL;
    glcf->input = 0;
    glcf->output = KVS_GUARD_OFF;

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_http_kvserve_param(&value[i], "zone", &v) == NGX_OK) {
            z = gmcf->zones->elts;

            for (k = 0; k < gmcf->zones->nelts; k++) {
                if (z[k].name.len == v.len
                    && ngx_strncmp(z[k].name.data, v.data, v.len) == 0)
                {
                    glcf->zone = &z[k];
                }
            }

            if (glcf->zone == NULL) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "unknown guard "
                                   "zone \"%V\" in \"kvserve_guard\" (a "
                                   "kvserve_guard_zone before it names it)",
                                   &v);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_http_kvserve_param(&value[i], "input", &v) == NGX_OK) {
            if (ngx_http_kvserve_param_is(&v, "reject")) {
                glcf->input = 1;
                continue;
            }

            if (ngx_http_kvserve_param_is(&v, "off")) {
                glcf->input = 0;
                continue;
            }
        }

        if (ngx_http_kvserve_param(&value[i], "output", &v) == NGX_OK) {
            if (ngx_http_kvserve_param_is(&v, "stop")) {
                glcf->output = KVS_GUARD_STOP;
                continue;
            }

            if (ngx_http_kvserve_param_is(&v, "redact")) {
                glcf->output = KVS_GUARD_REDACT;
                continue;
            }

            if (ngx_http_kvserve_param_is(&v, "off")) {
                glcf->output = KVS_GUARD_OFF;
                continue;
            }
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid parameter \"%V\" "
                           "in \"kvserve_guard\": it takes zone=NAME, "
                           "input=reject|off, output=stop|redact|off",
                           &value[i]);
        return NGX_CONF_ERROR;
    }

    if (glcf->zone == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "\"kvserve_guard\" needs "
                           "zone=NAME");
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* ---- the counters ------------------------------------------------------- */

static ngx_int_t
ngx_http_kvserve_guard_init_shm(ngx_shm_zone_t *zone, void *data)
{
    size_t                               size;
    uint64_t                            *c;
    ngx_slab_pool_t                     *shpool;
    ngx_http_kvserve_guard_main_conf_t  *gmcf;

    gmcf = zone->data;
    size = (gmcf->n_counters + 1) * sizeof(uint64_t);
    shpool = (ngx_slab_pool_t *) zone->shm.addr;

    if (zone->shm.exists) {
        zone->data = shpool->data;
        return NGX_OK;
    }

    /* a reload: the same counts keep counting; other rules start at 0 */
    if (data != NULL && ((uint64_t *) data)[0] == gmcf->n_counters) {
        zone->data = data;
        return NGX_OK;
    }

    c = ngx_slab_alloc(shpool, size);
    if (c == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(c, size);
    c[0] = gmcf->n_counters;
    shpool->data = c;
    zone->data = c;

    return NGX_OK;
}


static void
ngx_http_kvserve_guard_count(ngx_http_kvserve_guard_zone_t *z,
    uint32_t rule, ngx_uint_t what)
{
    uint64_t                            *c;
    ngx_http_kvserve_guard_main_conf_t  *gmcf;

    gmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_kvserve_guard_module);
    if (gmcf == NULL || gmcf->shm == NULL || gmcf->shm->data == NULL) {
        return;
    }

    c = gmcf->shm->data;
    (void) __atomic_fetch_add(&c[1 + z->base + 3 * rule + what], 1,
                              __ATOMIC_RELAXED);
}


ngx_int_t
ngx_http_kvserve_guard_metrics(ngx_http_request_t *r, kvs_buf_t *out)
{
    size_t                               i, k;
    uint64_t                            *c;
    const kvs_guard_rule_t              *rule;
    ngx_http_kvserve_guard_zone_t       *z;
    ngx_http_kvserve_guard_main_conf_t  *gmcf;

    static const char  *what[3][2] = {
        { "input", "reject" }, { "output", "stop" }, { "output", "redact" }
    };

    gmcf = ngx_http_get_module_main_conf(r, ngx_http_kvserve_guard_module);
    if (gmcf->shm == NULL || gmcf->shm->data == NULL) {
        return NGX_OK;
    }

    c = gmcf->shm->data;

    if (kvs_buf_printf(out, "# HELP kvserve_guard_matches_total Guard rule "
                       "matches, by zone, rule, where and action.\n"
                       "# TYPE kvserve_guard_matches_total counter\n")
        != KVS_OK)
    {
        return NGX_ERROR;
    }

    z = gmcf->zones->elts;

    for (i = 0; i < gmcf->zones->nelts; i++) {
        for (k = 0; k < 3 * kvs_guard_n_rules(z[i].g); k++) {
            rule = kvs_guard_rule(z[i].g, k / 3);

            /* names are [a-z0-9_:] (kvs_guard_set.c): no escaping */
            if (kvs_buf_printf(out, "kvserve_guard_matches_total{zone=\"%.*s"
                               "\",rule=\"%s\",where=\"%s\",action=\"%s\"} "
                               "%llu\n", (int) z[i].name.len,
                               (const char *) z[i].name.data, rule->name,
                               what[k % 3][0], what[k % 3][1],
                               (unsigned long long) __atomic_load_n(
                                   &c[1 + z[i].base + k], __ATOMIC_RELAXED))
                != KVS_OK)
            {
                return NGX_ERROR;
            }
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_kvserve_guard_postconf(ngx_conf_t *cf)
{
    size_t                               size;
    ngx_str_t                            name;
    ngx_http_kvserve_guard_main_conf_t  *gmcf;

    gmcf = ngx_http_conf_get_module_main_conf(cf,
                                              ngx_http_kvserve_guard_module);
    if (gmcf->n_counters == 0) {
        return NGX_OK;
    }

    /* the slab pool's own pages, then the counters */
    size = ngx_align((gmcf->n_counters + 1) * sizeof(uint64_t), ngx_pagesize)
           + 8 * ngx_pagesize;

    ngx_str_set(&name, "kvserve_guard");

    gmcf->shm = ngx_shared_memory_add(cf, &name, size,
                                      &ngx_http_kvserve_guard_module);
    if (gmcf->shm == NULL) {
        return NGX_ERROR;
    }

    gmcf->shm->init = ngx_http_kvserve_guard_init_shm;
    gmcf->shm->data = gmcf;

    return NGX_OK;
}


/* ---- $kvserve_guard ----------------------------------------------------- */

static ngx_int_t
ngx_http_kvserve_guard_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_kvserve_guard_ctx_t  *gctx;

    gctx = ngx_http_get_module_ctx(r, ngx_http_kvserve_guard_module);

    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    v->len = gctx != NULL ? gctx->var_len : 0;
    v->data = gctx != NULL ? gctx->var : (u_char *) "";

    return NGX_OK;
}


static ngx_http_variable_t  ngx_http_kvserve_guard_vars[] = {
    { ngx_string("kvserve_guard"), NULL, ngx_http_kvserve_guard_variable, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },
    ngx_http_null_variable
};


static ngx_int_t
ngx_http_kvserve_guard_preconf(ngx_conf_t *cf)
{
    return ngx_http_kvserve_add_vars(cf, ngx_http_kvserve_guard_vars);
}


/* The first rule that fired names the variable: "input:pii",
 * "output:secret:redact". */
static void
ngx_http_kvserve_guard_note(ngx_http_kvserve_guard_ctx_t *gctx,
    uint32_t rule, ngx_uint_t what)
{
    const kvs_guard_rule_t  *r;

    ngx_http_kvserve_guard_count(gctx->zone, rule, what);

    if (gctx->var_len > 0) {
        return;
    }

    r = kvs_guard_rule(gctx->zone->g, rule);

    gctx->var_len = ngx_snprintf(gctx->var, sizeof(gctx->var), "%s:%s%s",
                                 what == NGX_HTTP_KVSERVE_GUARD_INPUT
                                 ? "input" : "output", r->cls,
                                 what == NGX_HTTP_KVSERVE_GUARD_STOP
                                 ? ":stop"
                                 : what == NGX_HTTP_KVSERVE_GUARD_REDACT
                                 ? ":redact" : "")
                    - gctx->var;
}


/* ---- a request ---------------------------------------------------------- */

static void
ngx_http_kvserve_guard_cleanup(void *data)
{
    ngx_http_kvserve_guard_ctx_t  *gctx = data;

    ngx_uint_t  i;

    for (i = 0; gctx->streams != NULL && i < gctx->n; i++) {
        kvs_guard_stream_free(&gctx->streams[i]);
    }

    kvs_buf_free(&gctx->out);
}


static void
ngx_http_kvserve_guard_hit(void *data, uint32_t rule)
{
    ngx_http_kvserve_guard_ctx_t       *gctx = data;
    ngx_http_kvserve_guard_loc_conf_t  *glcf;

    glcf = ngx_http_get_module_loc_conf(gctx->r,
                                        ngx_http_kvserve_guard_module);

    ngx_http_kvserve_guard_note(gctx, rule,
                                glcf->output == KVS_GUARD_STOP
                                ? NGX_HTTP_KVSERVE_GUARD_STOP
                                : NGX_HTTP_KVSERVE_GUARD_REDACT);
}


/* The request's body has the field, not null (the parser's default
 * otherwise).  A Messages request's root is its translation into a chat
 * body, without max_tokens: its body as sent is msg_root. */
static ngx_uint_t
ngx_http_kvserve_guard_given(const kvs_api_req_t *req, const char *name)
{
    json_t  *v, *body;

    body = req->msg_root != NULL ? req->msg_root : req->root;
    v = body != NULL ? json_object_get(body, name) : NULL;

    return v != NULL && !json_is_null(v);
}


ngx_int_t
ngx_http_kvserve_guard_prepare(ngx_http_kvserve_ctx_t *ctx,
    kvs_api_err_t *aerr)
{
    ngx_uint_t                          i;
    kvs_err_t                           err;
    const char                         *field;
    ngx_pool_cleanup_t                 *cln;
    ngx_http_kvserve_guard_ctx_t       *gctx;
    ngx_http_kvserve_guard_loc_conf_t  *glcf;

    glcf = ngx_http_get_module_loc_conf(ctx->r,
                                        ngx_http_kvserve_guard_module);

    ctx->tok->guard = NULL;
    ctx->tok->guard_rule = -1;

    /* kvserve_max_tokens: what a request may ask; no ask gets the cap
     * (or completions' default of 16, when less) */
    if (glcf->max_tokens > 0) {
        /* the parser takes max_completion_tokens over max_tokens */
        field = ngx_http_kvserve_guard_given(&ctx->req,
                                             "max_completion_tokens")
                ? "max_completion_tokens"
                : ngx_http_kvserve_guard_given(&ctx->req, "max_tokens")
                ? "max_tokens" : NULL;

        if (field != NULL) {
            if (ctx->req.max_tokens > (int64_t) glcf->max_tokens) {
                kvs_api_err_set(aerr, 400, field, NULL,
                                "%s is %lld, over the %lu this server "
                                "allows.", field,
                                (long long) ctx->req.max_tokens,
                                (unsigned long) glcf->max_tokens);
                return NGX_ERROR;
            }

        } else if (ctx->req.max_tokens < 0
                   || ctx->req.max_tokens > (int64_t) glcf->max_tokens)
        {
            ctx->req.max_tokens = (int64_t) glcf->max_tokens;
        }
    }

    if (glcf->zone == NULL) {
        return NGX_OK;
    }

    if (glcf->output != KVS_GUARD_OFF && ctx->req.sample.logprobs) {
        /* the tokens' own text would show what the guard hides */
        kvs_api_err_set(aerr, 400, "logprobs", NULL,
                        "logprobs are not available where this server "
                        "guards the output.");
        return NGX_ERROR;
    }

    if (glcf->input && !ctx->chat) {
        for (i = 0; i < ctx->req.n_prompts; i++) {
            if (ctx->req.prompts[i].text.ptr == NULL) {
                kvs_api_err_set(aerr, 400, "prompt", NULL,
                                "Token-id prompts cannot be checked by "
                                "this server's content policy: send text.");
                return NGX_ERROR;
            }
        }
    }

    gctx = ngx_pcalloc(ctx->r->pool, sizeof(ngx_http_kvserve_guard_ctx_t));
    cln = ngx_pool_cleanup_add(ctx->r->pool, 0);
    if (gctx == NULL || cln == NULL) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "out of memory");
        return NGX_ERROR;
    }

    gctx->zone = glcf->zone;
    gctx->r = ctx->r;
    cln->handler = ngx_http_kvserve_guard_cleanup;
    cln->data = gctx;
    ngx_http_set_ctx(ctx->r, gctx, ngx_http_kvserve_guard_module);

    if (glcf->input) {
        ctx->tok->guard = glcf->zone->g;
    }

    if (glcf->output == KVS_GUARD_OFF) {
        return NGX_OK;
    }

    gctx->streams = ngx_pcalloc(ctx->r->pool,
                                ctx->n_choices * sizeof(kvs_guard_stream_t));
    if (gctx->streams == NULL) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "out of memory");
        return NGX_ERROR;
    }

    for (i = 0; i < ctx->n_choices; i++) {
        if (kvs_guard_stream_init(&gctx->streams[i], glcf->zone->g,
                                  (kvs_guard_mode_t) glcf->output,
                                  ngx_http_kvserve_guard_hit, gctx, &err)
            != KVS_OK)
        {
            kvs_api_err_set(aerr, 500, NULL, NULL, "%s", err.msg);
            return NGX_ERROR;
        }
        gctx->n = i + 1;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_kvserve_guard_check(ngx_http_kvserve_tok_job_t *job,
    const char *text, size_t len, kvs_api_err_t *aerr)
{
    int32_t                  rule;
    kvs_err_t                err;
    const kvs_guard_rule_t  *r;

    if (job->guard == NULL) {
        return NGX_OK;
    }

    if (kvs_guard_check(job->guard, text, len, &rule, &err) != KVS_OK) {
        kvs_api_err_set(aerr, 400, NULL, "content_policy", "The prompt "
                        "could not be checked against this server's "
                        "content policy.");
        return NGX_ERROR;
    }

    if (rule < 0) {
        return NGX_OK;
    }

    /* the class only: never the pattern nor the text */
    r = kvs_guard_rule(job->guard, (size_t) rule);
    job->guard_rule = rule;
    kvs_api_err_set(aerr, 400, NULL, NULL, "The prompt was refused by this "
                    "server's content policy (%s).", r->cls);
    snprintf(aerr->code, sizeof(aerr->code), "content_policy_%s", r->cls);

    return NGX_ERROR;
}


ngx_int_t
ngx_http_kvserve_guard_tokenized(ngx_http_kvserve_ctx_t *ctx,
    kvs_api_err_t *aerr)
{
    ngx_uint_t                          i;
    ngx_http_kvserve_tok_job_t         *job;
    ngx_http_kvserve_guard_ctx_t       *gctx;
    ngx_http_kvserve_guard_loc_conf_t  *glcf;

    job = ctx->tok;
    gctx = ngx_http_get_module_ctx(ctx->r, ngx_http_kvserve_guard_module);

    if (gctx != NULL && job->guard_rule >= 0) {
        ngx_http_kvserve_guard_note(gctx, (uint32_t) job->guard_rule,
                                    NGX_HTTP_KVSERVE_GUARD_INPUT);
    }

    if (job->rc != NGX_OK) {
        return NGX_OK;
    }

    glcf = ngx_http_get_module_loc_conf(ctx->r,
                                        ngx_http_kvserve_guard_module);

    for (i = 0; glcf->max_prompt_tokens > 0 && i < job->n_parts; i++) {
        if (job->ids[i].n > glcf->max_prompt_tokens) {
            kvs_api_err_set(aerr, 400, ctx->chat ? "messages" : "prompt",
                            NULL, "The prompt has %zu tokens, over the %lu "
                            "this server allows (kvserve_max_prompt_tokens)."
                            , job->ids[i].n,
                            (unsigned long) glcf->max_prompt_tokens);
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_kvserve_guard_out(ngx_http_kvserve_ctx_t *ctx, ngx_uint_t index,
    kvs_engine_out_t *o)
{
    int                            rc;
    kvs_buf_t                      t;
    kvs_err_t                      err;
    kvs_guard_stream_t            *s;
    ngx_http_kvserve_guard_ctx_t  *gctx;

    gctx = ngx_http_get_module_ctx(ctx->r, ngx_http_kvserve_guard_module);
    if (gctx == NULL || gctx->streams == NULL || index >= gctx->n) {
        return NGX_OK;
    }

    s = &gctx->streams[index];
    gctx->out.len = 0;

    rc = kvs_guard_feed(s, (const char *) o->text.data, o->text.len,
                        &gctx->out, &err);

    /* the end: what is held back goes now */
    if (rc == KVS_OK && s->stopped < 0 && o->finish != KVS_FINISH_NONE) {
        rc = kvs_guard_end(s, &gctx->out, &err);
    }

    if (rc != KVS_OK) {
        ngx_log_error(NGX_LOG_ERR, ctx->r->connection->log, 0,
                      "kvserve: guard: %s", err.msg);
        return NGX_ERROR;
    }

    if (s->stopped >= 0) {
        o->finish = KVS_FINISH_CONTENT_FILTER;
    }

    /* the frame's buffer and ours trade places: both are kvs_bufs */
    t = o->text;
    o->text = gctx->out;
    gctx->out = t;

    return NGX_OK;
}
