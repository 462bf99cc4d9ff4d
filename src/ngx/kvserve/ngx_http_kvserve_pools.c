/*
 * ngx_http_kvserve_pools: the KV pools' directives (kvserve_kv_pool,
 * kvserve_queue_timeout) and the answer to a request the engine did not
 * admit within the queue timeout (503 with Retry-After); docs/pools.md.
 *
 * Invariants: each directive is parsed once (a second is "is
 * duplicate"), every bad value is refused by `nginx -t` naming it, and
 * what is kept is what the engine's scheduler takes as it is
 * (kvs_sched_conf_t's pool_* fields), checked here against the same
 * bounds kvs_sched_init() checks, so the engine never refuses it later.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve.h"
#include "ngx_http_kvserve_param.h"
#include "ngx_http_kvserve_request.h"


#define NGX_HTTP_KVSERVE_POOL_MAX_TOKENS  0x7fffffff


static char *ngx_http_kvserve_pool_num(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *arg, ngx_str_t *v, ngx_uint_t min, ngx_uint_t *out,
    const char *must);


/*
 * kvserve_kv_pool long min_tokens=<N> share=<fraction> max_prefill=<K>
 * [chunk=<T>]: requests whose prompt plus max_tokens reach N tokens are
 * long; long ones hold at most the fraction of the KV cache, at most K
 * of them prefill at once, and their prefills take at most T tokens an
 * engine step (default: the whole step budget).
 */
char *
ngx_http_kvserve_kv_pool(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_kvserve_main_conf_t  *kmcf = conf;

    ngx_str_t   *value, v;
    ngx_uint_t   i, share, min_tokens, max_prefill, chunk;

    if (kmcf->pool_min_tokens != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "long") != 0) {
        return ngx_http_kvserve_conf_invalid(cf, cmd, &value[1],
                                             "the pool must be \"long\" "
                                             "(short requests use the "
                                             "rest)");
    }

    share = NGX_CONF_UNSET_UINT;
    min_tokens = NGX_CONF_UNSET_UINT;
    max_prefill = NGX_CONF_UNSET_UINT;
    chunk = 0;

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_http_kvserve_param(&value[i], "min_tokens", &v) == NGX_OK) {
            if (ngx_http_kvserve_pool_num(cf, cmd, &value[i], &v, 1,
                                          &min_tokens, "min_tokens must be "
                                          "a number of tokens of at least "
                                          "1") != NGX_CONF_OK)
            {
                return NGX_CONF_ERROR;
            }

        } else if (ngx_http_kvserve_param(&value[i], "max_prefill", &v)
                   == NGX_OK)
        {
            if (ngx_http_kvserve_pool_num(cf, cmd, &value[i], &v, 1,
                                          &max_prefill, "max_prefill must "
                                          "be a number of requests of at "
                                          "least 1") != NGX_CONF_OK)
            {
                return NGX_CONF_ERROR;
            }

        } else if (ngx_http_kvserve_param(&value[i], "chunk", &v) == NGX_OK) {
            if (ngx_http_kvserve_pool_num(cf, cmd, &value[i], &v, 1, &chunk,
                                          "chunk must be a number of "
                                          "tokens of at least 1")
                != NGX_CONF_OK)
            {
                return NGX_CONF_ERROR;
            }

        } else if (ngx_http_kvserve_param(&value[i], "share", &v) == NGX_OK) {
            if (ngx_http_kvserve_parse_milli(&v, &share) != NGX_OK) {
                return ngx_http_kvserve_conf_invalid(cf, cmd, &value[i],
                                                     "share must be a "
                                                     "fraction of the KV "
                                                     "cache over 0 and at "
                                                     "most 1, such as "
                                                     "0.5");
            }

        } else {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid parameter \"%V\" in \"%V\" "
                               "directive, it must be min_tokens=<N>, "
                               "share=<fraction>, max_prefill=<K> or "
                               "chunk=<T>", &value[i], &cmd->name);
            return NGX_CONF_ERROR;
        }
    }

    if (min_tokens == NGX_CONF_UNSET_UINT || share == NGX_CONF_UNSET_UINT
        || max_prefill == NGX_CONF_UNSET_UINT)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" directive needs min_tokens=<N>, "
                           "share=<fraction> and max_prefill=<K>",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    kmcf->pool_min_tokens = min_tokens;
    kmcf->pool_share_milli = share;
    kmcf->pool_max_prefill = max_prefill;
    kmcf->pool_chunk = chunk;

    return NGX_CONF_OK;
}


/* The number v (arg's value) into *out, at least min; else nginx's
 * "invalid value" naming arg, with must. */
static char *
ngx_http_kvserve_pool_num(ngx_conf_t *cf, ngx_command_t *cmd, ngx_str_t *arg,
    ngx_str_t *v, ngx_uint_t min, ngx_uint_t *out, const char *must)
{
    ngx_int_t  n;

    n = ngx_atoi(v->data, v->len);

    if (n == NGX_ERROR || (ngx_uint_t) n < min
        || n > NGX_HTTP_KVSERVE_POOL_MAX_TOKENS)
    {
        return ngx_http_kvserve_conf_invalid(cf, cmd, arg, must);
    }

    *out = (ngx_uint_t) n;

    return NGX_CONF_OK;
}


/*
 * kvserve_queue_timeout <time> | off: how long a request may wait for
 * the engine to admit it (its KV need to fit) before it is answered 503
 * with Retry-After; shorter than kvserve_engine_timeout (checked when
 * the http block ends).
 */
char *
ngx_http_kvserve_queue_timeout(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_main_conf_t  *kmcf = conf;

    ngx_str_t   *value;
    ngx_msec_t   ms;

    if (kmcf->queue_timeout != NGX_CONF_UNSET_MSEC) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        kmcf->queue_timeout = 0;
        return NGX_CONF_OK;
    }

    ms = ngx_parse_time(&value[1], 0);

    if (ms == (ngx_msec_t) NGX_ERROR || ms == 0 || ms > 0x7fffffff) {
        return ngx_http_kvserve_conf_invalid(cf, cmd, &value[1],
                                             "it must be a time over 0, "
                                             "such as 30s, or \"off\"");
    }

    kmcf->queue_timeout = ms;

    return NGX_CONF_OK;
}


/* The defaults, and the queue timeout against the worker's engine
 * timeout (a queued request gets no output: the worker would give up
 * first). */
char *
ngx_http_kvserve_pools_init(ngx_conf_t *cf,
    ngx_http_kvserve_main_conf_t *kmcf)
{
    if (kmcf->pool_min_tokens == NGX_CONF_UNSET_UINT) {
        kmcf->pool_min_tokens = 0;
        kmcf->pool_share_milli = 0;
        kmcf->pool_max_prefill = 0;
        kmcf->pool_chunk = 0;
    }

    ngx_conf_init_msec_value(kmcf->queue_timeout,
                             NGX_HTTP_KVSERVE_QUEUE_TIMEOUT);

    if (kmcf->queue_timeout >= kmcf->engine_timeout) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "kvserve_queue_timeout of %M ms must be shorter "
                      "than kvserve_engine_timeout (%M ms): a queued "
                      "request gets no output until it is admitted",
                      kmcf->queue_timeout, kmcf->engine_timeout);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * The engine ended the request's sequence unadmitted after the queue
 * timeout (o->retry_after set): 503, Retry-After the engine's estimate,
 * an OpenAI error object with the engine's message and code
 * "kv_pool_full".  Before the stream's header only: after it, the
 * caller's stream abort carries the message.
 */
void
ngx_http_kvserve_fail_busy(ngx_http_kvserve_ctx_t *ctx,
    const kvs_engine_out_t *o)
{
    u_char  *p, *v;

    if (!ctx->header_sent) {
        v = ngx_pnalloc(ctx->r->pool, NGX_INT_T_LEN + 1);

        if (v == NULL) {
            ngx_http_kvserve_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                  "Out of memory.", "server_error", NULL);
            return;
        }

        p = ngx_sprintf(v, "%uD", o->retry_after);
        *p = '\0';

        if (ngx_http_kvserve_add_header(ctx->r, "Retry-After",
                                        (const char *) v) != NGX_OK)
        {
            ngx_http_kvserve_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                  "Out of memory.", "server_error", NULL);
            return;
        }
    }

    ngx_log_error(NGX_LOG_WARN, ctx->r->connection->log, 0,
                  "kvserve: not admitted within kvserve_queue_timeout: %s",
                  o->error);

    ngx_http_kvserve_fail(ctx, NGX_HTTP_SERVICE_UNAVAILABLE, o->error,
                          "server_error", "kv_pool_full");
}
