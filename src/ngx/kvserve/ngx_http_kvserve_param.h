/*
 * ngx_http_kvserve_param: the one reader of the "name=value" parameters
 * of kvserve's directives (kvserve_kv_pool, kvserve_kv_tier,
 * kvserve_lora, kvserve_route, kvserve_fair_weights, kvserve_model,
 * kvserve_limit_zone, kvserve_limit, kvserve_guard_zone, kvserve_guard,
 * kvserve_index), and of a value that is one of a few words.
 *
 * It only splits a parameter, and never fails: each directive checks the
 * value and words its own `nginx -t` error, naming the whole parameter.
 * The value points into the parameter (the configuration's memory), so
 * it lives as long as the configuration does.
 */

#ifndef NGX_HTTP_KVSERVE_PARAM_H
#define NGX_HTTP_KVSERVE_PARAM_H

#include <ngx_config.h>
#include <ngx_core.h>


/* NGX_OK when arg is name=value (name, then '='), *v then set to value,
 * which may be empty; NGX_DECLINED, *v untouched, otherwise. */
static ngx_inline ngx_int_t
ngx_http_kvserve_param(const ngx_str_t *arg, const char *name, ngx_str_t *v)
{
    size_t  n;

    n = ngx_strlen(name);

    if (arg->len <= n || arg->data[n] != '='
        || ngx_strncmp(arg->data, name, n) != 0)
    {
        return NGX_DECLINED;
    }

    v->data = arg->data + n + 1;
    v->len = arg->len - n - 1;

    return NGX_OK;
}



/* 1 when v is word exactly (as much as a parameter's value can say:
 * "off" is not "of" nor "offline"), else 0. */
static ngx_inline ngx_uint_t
ngx_http_kvserve_param_is(const ngx_str_t *v, const char *word)
{
    size_t  n;

    n = ngx_strlen(word);

    return v->len == n && ngx_strncmp(v->data, word, n) == 0;
}


#endif /* NGX_HTTP_KVSERVE_PARAM_H */
