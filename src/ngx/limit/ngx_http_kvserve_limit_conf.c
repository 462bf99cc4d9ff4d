/*
 * ngx_http_kvserve_limit_conf: the token rate limit module
 * (ngx_http_kvserve_limit_module, in the kvserve .so) and its
 * configuration: the directives kvserve_limit_zone, kvserve_limit,
 * kvserve_limit_status, kvserve_limit_log_level and kvserve_limit_dry_run
 * (docs/limits.md).
 *
 * Invariants:
 *  - every value is checked here, so nginx -t refuses a bad one with the
 *    value quoted, and the request side never meets one;
 *  - a zone is bound to one key expression, "$kvserve_tenant" (the
 *    request's tenant, hashed) where it names none; every zone is
 *    listed in the main conf for the metrics;
 *  - kvserve_limit lists are inherited only where a level sets none, as
 *    limit_req's are;
 *  - a zone keyed by a request's header, cookie or argument as the
 *    client sent it is accepted with a warning: the client chooses that
 *    value, so it may leave it out or spell it anew (docs/limits.md,
 *    "Safe keys").
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_limit_int.h"
#include "ngx/kvserve/ngx_http_kvserve_param.h"


static void *ngx_http_kvserve_limit_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_kvserve_limit_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_kvserve_limit_merge_loc_conf(ngx_conf_t *cf,
    void *parent, void *child);
static char *ngx_http_kvserve_limit_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_kvserve_limit_zone_name(ngx_conf_t *cf,
    ngx_str_t *value, ngx_str_t *v, ngx_str_t *name, ssize_t *size);
static ngx_int_t ngx_http_kvserve_limit_zone_rate(ngx_conf_t *cf,
    ngx_str_t *value, ngx_str_t *v, ngx_http_kvserve_limit_zone_t *zone);
static ngx_int_t ngx_http_kvserve_limit_zone_kv_rate(ngx_conf_t *cf,
    ngx_str_t *value, ngx_str_t *v, ngx_http_kvserve_limit_zone_t *zone);
static void ngx_http_kvserve_limit_zone_warn(ngx_conf_t *cf,
    ngx_http_kvserve_limit_zone_t *zone);
static char *ngx_http_kvserve_limit_zone_add(ngx_conf_t *cf,
    ngx_command_t *cmd, ngx_http_kvserve_limit_zone_t *zone, ssize_t size);
static char *ngx_http_kvserve_limit(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_kvserve_limit_empty(ngx_conf_t *cf,
    ngx_str_t *value, ngx_str_t *v, ngx_uint_t *empty);
static char *ngx_http_kvserve_limit_status_code(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);


/* a zone's key where it names none: the request's tenant */
static ngx_str_t  ngx_http_kvserve_limit_tenant_key =
    ngx_string("$kvserve_tenant");


static ngx_conf_enum_t  ngx_http_kvserve_limit_log_levels[] = {
    { ngx_string("info"), NGX_LOG_INFO },
    { ngx_string("notice"), NGX_LOG_NOTICE },
    { ngx_string("warn"), NGX_LOG_WARN },
    { ngx_string("error"), NGX_LOG_ERR },
    { ngx_null_string, 0 }
};


static ngx_command_t  ngx_http_kvserve_limit_commands[] = {

    { ngx_string("kvserve_limit_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2|NGX_CONF_TAKE3|NGX_CONF_TAKE4,
      ngx_http_kvserve_limit_zone,
      0,
      0,
      NULL },

    { ngx_string("kvserve_limit"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1234,
      ngx_http_kvserve_limit,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_limit_status"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_limit_status_code,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_kvserve_limit_loc_conf_t, status_code),
      NULL },

    { ngx_string("kvserve_limit_log_level"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_kvserve_limit_loc_conf_t, limit_log_level),
      &ngx_http_kvserve_limit_log_levels },

    { ngx_string("kvserve_limit_dry_run"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_kvserve_limit_loc_conf_t, dry_run),
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_kvserve_limit_module_ctx = {
    ngx_http_kvserve_limit_add_variables,  /* preconfiguration */
    ngx_http_kvserve_limit_filter_init,    /* postconfiguration */

    ngx_http_kvserve_limit_create_main_conf,  /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_kvserve_limit_create_loc_conf,   /* create location conf */
    ngx_http_kvserve_limit_merge_loc_conf     /* merge location conf */
};


ngx_module_t  ngx_http_kvserve_limit_module = {
    NGX_MODULE_V1,
    &ngx_http_kvserve_limit_module_ctx,    /* module context */
    ngx_http_kvserve_limit_commands,       /* module directives */
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
ngx_http_kvserve_limit_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_kvserve_limit_main_conf_t  *lmcf;

    lmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_kvserve_limit_main_conf_t));
    if (lmcf == NULL) {
        return NULL;
    }

    if (ngx_array_init(&lmcf->zones, cf->pool, 4, sizeof(ngx_shm_zone_t *))
        != NGX_OK)
    {
        return NULL;
    }

    return lmcf;
}


static void *
ngx_http_kvserve_limit_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_kvserve_limit_loc_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_http_kvserve_limit_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    /* set by ngx_pcalloc(): conf->limits = NULL */

    conf->limit_log_level = NGX_CONF_UNSET_UINT;
    conf->status_code = NGX_CONF_UNSET_UINT;
    conf->dry_run = NGX_CONF_UNSET;

    return conf;
}


static char *
ngx_http_kvserve_limit_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child)
{
    ngx_http_kvserve_limit_loc_conf_t  *prev = parent;
    ngx_http_kvserve_limit_loc_conf_t  *conf = child;

    /* as limit_req: inherited only where a level sets none */
    if (conf->limits == NULL) {
        conf->limits = prev->limits;
    }

    ngx_conf_merge_uint_value(conf->limit_log_level, prev->limit_log_level,
                              NGX_LOG_ERR);

    conf->delay_log_level = (conf->limit_log_level == NGX_LOG_INFO)
                            ? NGX_LOG_INFO : conf->limit_log_level + 1;

    ngx_conf_merge_uint_value(conf->status_code, prev->status_code,
                              NGX_HTTP_TOO_MANY_REQUESTS);

    ngx_conf_merge_value(conf->dry_run, prev->dry_run, 0);

    return NGX_CONF_OK;
}


/* "<N>" followed by suffix: N in 1..KVS_LIMIT_TOKENS_MAX, or
 * NGX_ERROR. */
static int64_t
ngx_http_kvserve_limit_number(u_char *p, size_t len)
{
    int64_t  n;

    n = ngx_atoof(p, len);

    if (n == NGX_ERROR || n < 1 || (uint64_t) n > KVS_LIMIT_TOKENS_MAX) {
        return NGX_ERROR;
    }

    return n;
}


/* kvserve_limit_zone [<key>] zone=<name>:<size> rate=<N>t/s|t/m
 *     [kv_rate=<size>/s]; without a key, the request's tenant
 *     ($kvserve_tenant: kvserve_tenant's hash) */
static char *
ngx_http_kvserve_limit_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ssize_t                             size;
    ngx_int_t                           rc;
    ngx_str_t                          *value, name, v;
    ngx_uint_t                          i, first;
    ngx_http_kvserve_limit_zone_t      *zone;
    ngx_http_compile_complex_value_t    ccv;

    value = cf->args->elts;

    zone = ngx_pcalloc(cf->pool, sizeof(ngx_http_kvserve_limit_zone_t));
    if (zone == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

    first = 2;
    ccv.cf = cf;
    ccv.value = &value[1];
    ccv.complex_value = &zone->key;

    if (ngx_http_kvserve_param(&value[1], "zone", &v) == NGX_OK) {
        first = 1;
        ccv.value = &ngx_http_kvserve_limit_tenant_key;
    }

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    size = 0;
    name.len = 0;

    for (i = first; i < cf->args->nelts; i++) {

        if (ngx_http_kvserve_param(&value[i], "zone", &v) == NGX_OK) {
            rc = ngx_http_kvserve_limit_zone_name(cf, &value[i], &v, &name,
                                                  &size);

        } else if (ngx_http_kvserve_param(&value[i], "rate", &v) == NGX_OK) {
            rc = ngx_http_kvserve_limit_zone_rate(cf, &value[i], &v, zone);

        } else if (ngx_http_kvserve_param(&value[i], "kv_rate", &v)
                   == NGX_OK)
        {
            rc = ngx_http_kvserve_limit_zone_kv_rate(cf, &value[i], &v,
                                                     zone);

        } else {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid parameter \"%V\"", &value[i]);
            return NGX_CONF_ERROR;
        }

        if (rc != NGX_OK) {
            return NGX_CONF_ERROR;
        }
    }

    if (name.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" must have \"zone\" parameter",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    if (zone->rate == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" must have \"rate\" parameter",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    zone->name = name;

    ngx_http_kvserve_limit_zone_warn(cf, zone);

    return ngx_http_kvserve_limit_zone_add(cf, cmd, zone, size);
}


/*
 * A key that is one variable holding what the client sent as it sent it
 * ($http_*, $cookie_*, $arg_*) lets the client leave it out (every such
 * request then meets the keyless rule), send it under a name nginx drops
 * (an underscore in a header's name), or re-spell it ("Bearer abc" and
 * "bearer  abc" are two keys, two budgets).  It still works, so it is a
 * warning, with the way out.
 */
static void
ngx_http_kvserve_limit_zone_warn(ngx_conf_t *cf,
    ngx_http_kvserve_limit_zone_t *zone)
{
    u_char     *p, *last;
    ngx_str_t  *v;
    ngx_uint_t  braced;

    v = &zone->key.value;

    if (v->len < 2 || v->data[0] != '$') {
        return;
    }

    p = v->data + 1;
    last = v->data + v->len;
    braced = (*p == '{');

    if (braced) {
        if (last[-1] != '}') {
            return;
        }

        p++;
        last--;
    }

    if (!((last - p > 5 && ngx_strncmp(p, "http_", 5) == 0)
          || (last - p > 7 && ngx_strncmp(p, "cookie_", 7) == 0)
          || (last - p > 4 && ngx_strncmp(p, "arg_", 4) == 0)))
    {
        return;
    }

    /* one variable, nothing after its name */
    for ( /* void */ ; p < last; p++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')
              || (*p >= '0' && *p <= '9') || *p == '_'))
        {
            return;
        }
    }

    ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                       "kvserve_limit_zone \"%V\" is keyed by \"%V\" as "
                       "the client sends it: a client that leaves it out, "
                       "or re-spells it, escapes its own budget; normalise "
                       "the key with a map that falls back to "
                       "$binary_remote_addr (docs/limits.md, \"Safe keys\")",
                       &zone->name, v);
}


/* zone=<name>:<size> (value, v its value): a name, and a size of at
 * least 8 pages */
static ngx_int_t
ngx_http_kvserve_limit_zone_name(ngx_conf_t *cf, ngx_str_t *value,
    ngx_str_t *v, ngx_str_t *name, ssize_t *size)
{
    u_char     *p;
    ngx_str_t   s;

    name->data = v->data;

    p = ngx_strlchr(v->data, v->data + v->len, ':');

    if (p == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid zone size \"%V\"", value);
        return NGX_ERROR;
    }

    name->len = p - name->data;

    s.data = p + 1;
    s.len = v->data + v->len - s.data;

    *size = ngx_parse_size(&s);

    if (*size == NGX_ERROR || name->len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid zone size \"%V\"", value);
        return NGX_ERROR;
    }

    if (*size < (ssize_t) (8 * ngx_pagesize)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "zone \"%V\" is too small", value);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * rate=<N>t/s|t/m (value, v its value): zone->rate tokens per
 * zone->period_ms.  A unit that is neither leaves the period of an
 * earlier rate= as it was, as this parser always has.
 */
static ngx_int_t
ngx_http_kvserve_limit_zone_rate(ngx_conf_t *cf, ngx_str_t *value,
    ngx_str_t *v, ngx_http_kvserve_limit_zone_t *zone)
{
    u_char   *p;
    int64_t   rate;

    p = v->data + v->len - 3;

    if (v->len > 3 && ngx_strncmp(p, "t/s", 3) == 0) {
        zone->period_ms = 1000;
    } else if (v->len > 3 && ngx_strncmp(p, "t/m", 3) == 0) {
        zone->period_ms = 60000;
    }

    rate = zone->period_ms && v->len > 3
           ? ngx_http_kvserve_limit_number(v->data, v->len - 3)
           : NGX_ERROR;

    if (rate == NGX_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid rate \"%V\": a whole number of "
                           "tokens per second or minute, as "
                           "1000t/s or 50000t/m", value);
        return NGX_ERROR;
    }

    zone->rate = (uint64_t) rate;

    return NGX_OK;
}


/* kv_rate=<size>/s (value, v its value): bytes of KV cache held, per
 * second, kept as zone->kv_rate KiB/s */
static ngx_int_t
ngx_http_kvserve_limit_zone_kv_rate(ngx_conf_t *cf, ngx_str_t *value,
    ngx_str_t *v, ngx_http_kvserve_limit_zone_t *zone)
{
    off_t       kv;
    ngx_str_t   s;

    s.data = v->data;
    s.len = v->len > 2 ? v->len - 2 : 0;

    kv = NGX_ERROR;
    if (v->len > 2
        && ngx_strncmp(v->data + v->len - 2, "/s", 2) == 0
        && s.data[0] >= '0' && s.data[0] <= '9')
    {
        kv = ngx_parse_offset(&s);
    }

    if (kv == NGX_ERROR || kv < 1024
        || (uint64_t) kv / 1024 > KVS_LIMIT_TOKENS_MAX)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid kv_rate \"%V\": bytes of KV "
                           "cache per second, at least 1k, as "
                           "64m/s or 2g/s", value);
        return NGX_ERROR;
    }

    zone->kv_rate = (uint64_t) kv / 1024;

    return NGX_OK;
}


/* The parsed zone's buckets for expiring, and its shared memory, bound
 * to its key and listed for the metrics. */
static char *
ngx_http_kvserve_limit_zone_add(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_http_kvserve_limit_zone_t *zone, ssize_t size)
{
    kvs_err_t                            err;
    ngx_shm_zone_t                      *shm_zone, **zp;
    ngx_http_kvserve_limit_zone_t       *bound;
    ngx_http_kvserve_limit_main_conf_t  *lmcf;

    if (kvs_limit_conf_init(&zone->drain, zone->rate, zone->period_ms,
                            zone->rate, KVS_LIMIT_NODELAY, &err) != KVS_OK
        || (zone->kv_rate
            && kvs_limit_conf_init(&zone->kv_drain, zone->kv_rate, 1000,
                                   zone->kv_rate, KVS_LIMIT_NODELAY, &err)
               != KVS_OK))
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "kvserve_limit_zone "
                           "\"%V\": %s", &zone->name, err.msg);
        return NGX_CONF_ERROR;
    }

    shm_zone = ngx_shared_memory_add(cf, &zone->name, size,
                                     &ngx_http_kvserve_limit_module);
    if (shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    if (shm_zone->data) {
        bound = shm_zone->data;

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "%V \"%V\" is already bound to key \"%V\"",
                           &cmd->name, &zone->name, &bound->key.value);
        return NGX_CONF_ERROR;
    }

    shm_zone->init = ngx_http_kvserve_limit_init_zone;
    shm_zone->data = zone;

    lmcf = ngx_http_conf_get_module_main_conf(cf,
                                              ngx_http_kvserve_limit_module);

    zp = ngx_array_push(&lmcf->zones);
    if (zp == NULL) {
        return NGX_CONF_ERROR;
    }

    *zp = shm_zone;

    return NGX_CONF_OK;
}


/* kvserve_limit zone=<name> [burst=<N>] [nodelay | delay=<N>]
 *     [empty=shared|reject|unlimited] */
static char *
ngx_http_kvserve_limit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_kvserve_limit_loc_conf_t  *llcf = conf;

    int64_t                    burst, delay;
    ngx_str_t                 *value, s;
    ngx_uint_t                 i, nodelay, empty;
    ngx_shm_zone_t            *shm_zone;
    ngx_http_kvserve_limit_t  *limit, *limits;

    value = cf->args->elts;

    shm_zone = NULL;
    burst = 0;
    delay = 0;
    nodelay = 0;
    empty = NGX_HTTP_KVSERVE_LIMIT_EMPTY_SHARED;

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_http_kvserve_param(&value[i], "zone", &s) == NGX_OK) {

            if (s.len == 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid zone \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }

            shm_zone = ngx_shared_memory_add(cf, &s, 0,
                                             &ngx_http_kvserve_limit_module);
            if (shm_zone == NULL) {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_http_kvserve_param(&value[i], "burst", &s) == NGX_OK) {

            burst = ngx_http_kvserve_limit_number(s.data, s.len);
            if (burst == NGX_ERROR) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid burst value \"%V\": tokens, "
                                   "1..%uL", &value[i],
                                   (uint64_t) KVS_LIMIT_TOKENS_MAX);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_http_kvserve_param(&value[i], "delay", &s) == NGX_OK) {

            delay = ngx_atoof(s.data, s.len);

            if (delay == NGX_ERROR
                || (uint64_t) delay > KVS_LIMIT_TOKENS_MAX)
            {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid delay value \"%V\"",
                                   &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strcmp(value[i].data, "nodelay") == 0) {
            nodelay = 1;
            continue;
        }

        if (ngx_http_kvserve_param(&value[i], "empty", &s) == NGX_OK) {

            if (ngx_http_kvserve_limit_empty(cf, &value[i], &s, &empty)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\"", &value[i]);
        return NGX_CONF_ERROR;
    }

    if (shm_zone == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" must have \"zone\" parameter",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    if (nodelay && delay) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"nodelay\" and \"delay=%L\" together",
                           delay);
        return NGX_CONF_ERROR;
    }

    if (burst && delay > burst) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"delay=%L\" is over \"burst=%L\"", delay, burst);
        return NGX_CONF_ERROR;
    }

    if (llcf->limits == NULL) {
        llcf->limits = ngx_array_create(cf->pool, 1,
                                        sizeof(ngx_http_kvserve_limit_t));
        if (llcf->limits == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    limits = llcf->limits->elts;

    for (i = 0; i < llcf->limits->nelts; i++) {
        if (shm_zone == limits[i].shm_zone) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "zone \"%V\" is duplicate",
                               &shm_zone->shm.name);
            return NGX_CONF_ERROR;
        }
    }

    limit = ngx_array_push(llcf->limits);
    if (limit == NULL) {
        return NGX_CONF_ERROR;
    }

    limit->shm_zone = shm_zone;
    limit->burst = (uint64_t) burst;
    limit->delay = nodelay ? KVS_LIMIT_NODELAY : (uint64_t) delay;
    limit->empty = empty;

    return NGX_CONF_OK;
}


/*
 * empty=shared|reject|unlimited (value, v its value): what a request
 * without a key meets.
 * The default is shared, not limit_req's "not limited": a client must
 * not escape a token budget by sending no key.
 */
static ngx_int_t
ngx_http_kvserve_limit_empty(ngx_conf_t *cf, ngx_str_t *value,
    ngx_str_t *v, ngx_uint_t *empty)
{
    if (ngx_http_kvserve_param_is(v, "shared")) {
        *empty = NGX_HTTP_KVSERVE_LIMIT_EMPTY_SHARED;

    } else if (ngx_http_kvserve_param_is(v, "reject")) {
        *empty = NGX_HTTP_KVSERVE_LIMIT_EMPTY_REJECT;

    } else if (ngx_http_kvserve_param_is(v, "unlimited")) {
        *empty = NGX_HTTP_KVSERVE_LIMIT_EMPTY_UNLIMITED;

    } else {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid empty value \"%V\": shared, reject "
                           "or unlimited", value);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* kvserve_limit_status <code>: 400..599, as limit_req_status */
static char *
ngx_http_kvserve_limit_status_code(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_limit_loc_conf_t  *llcf = conf;

    ngx_int_t   n;
    ngx_str_t  *value;

    if (llcf->status_code != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    n = ngx_atoi(value[1].data, value[1].len);

    if (n == NGX_ERROR || n < 400 || n > 599) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid status \"%V\": a code from 400 to 599",
                           &value[1]);
        return NGX_CONF_ERROR;
    }

    llcf->status_code = (ngx_uint_t) n;

    return NGX_CONF_OK;
}
