/*
 * ngx_http_kvserve_conf: the handlers of the kvserve directives (the
 * table is in ngx_kvserve_module.c): each checks its value and sets the
 * configuration.  kvserve_model, which opens the model and loads its
 * tokenizer, is ngx_http_kvserve_conf_model.c.
 *
 * Invariants:
 *  - a directive only parses and checks: nothing here opens a file or
 *    loads a library (the engine process chooses and loads the backend);
 *  - errors fail `nginx -t` with the directive, the value and the
 *    reason, in nginx's own form (ngx_http_kvserve_conf_invalid).
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve.h"
#include "ngx_http_kvserve_param.h"
#include "backend/kvs_backend.h"
#include "kv/kvs_kv_size.h"
#include "tokenizer/kvs_chat.h"


/*
 * The location directives without arguments (kvserve, kvserve_status,
 * kvserve_metrics): each sets its flag once and makes handler the
 * location's content handler; uses_engine marks that some location needs
 * the engine process.
 */
static char *
ngx_http_kvserve_location(ngx_conf_t *cf, ngx_flag_t *flag,
    ngx_http_handler_pt handler, ngx_uint_t uses_engine)
{
    ngx_http_core_loc_conf_t      *clcf;
    ngx_http_kvserve_main_conf_t  *kmcf;

    if (*flag != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    *flag = 1;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = handler;

    if (uses_engine) {
        kmcf = ngx_http_conf_get_module_main_conf(cf,
                                                  ngx_http_kvserve_module);
        kmcf->used = 1;
    }

    return NGX_CONF_OK;
}


char *
ngx_http_kvserve_enable(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_kvserve_loc_conf_t  *klcf = conf;

    ngx_http_conf_ctx_t          *ctx;
    ngx_http_core_srv_conf_t     *cscf;
    ngx_http_kvserve_loc_conf_t  *sklcf;

    /* the server's own location configuration, which requests use until
     * a location is found: framing errors nginx answers there become
     * JSON too (ngx_http_kvserve_status.c) */
    ctx = cf->ctx;
    cscf = ctx->srv_conf[ngx_http_core_module.ctx_index];
    sklcf = cscf->ctx->loc_conf[ngx_http_kvserve_module.ctx_index];
    sklcf->json_errors = 1;

    return ngx_http_kvserve_location(cf, &klcf->enable,
                                     ngx_http_kvserve_handler, 1);
}


/* Checked here, so that a typo fails `nginx -t`, not the first request. */
char *
ngx_http_kvserve_chat_template(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_loc_conf_t  *klcf = conf;

    kvs_err_t    err;
    ngx_str_t   *value;
    kvs_chat_t   chat;

    if (klcf->chat_template != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (kvs_chat_by_name((const char *) value[1].data, value[1].len, &chat,
                         &err)
        != KVS_OK)
    {
        return ngx_http_kvserve_conf_invalid(cf, cmd, &value[1],
                                             "it must be one of "
                                             KVS_CHAT_NAMES);
    }

    klcf->chat_template = chat.kind;

    return NGX_CONF_OK;
}


/*
 * The library's message quotes the value first ("\"1.5\": fraction ...");
 * nginx's own form quotes it already, so only the reason is kept.
 */
char *
ngx_http_kvserve_kv_cache(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_kvserve_main_conf_t  *kmcf = conf;

    char       *reason;
    size_t      n;
    kvs_err_t   err;
    ngx_str_t  *value;

    if (kmcf->kv_cache.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (kvs_kv_cache_parse(&kmcf->kv_spec, (const char *) value[1].data,
                           value[1].len, &err)
        != KVS_OK)
    {
        reason = err.msg;
        n = value[1].len;

        if (ngx_strlen(err.msg) > n + 4 && err.msg[0] == '"'
            && ngx_strncmp(err.msg + 1, value[1].data, n) == 0
            && ngx_strncmp(err.msg + 1 + n, "\": ", 3) == 0)
        {
            reason = err.msg + n + 4;
        }

        return ngx_http_kvserve_conf_invalid(cf, cmd, &value[1], reason);
    }

    kmcf->kv_cache = value[1];

    return NGX_CONF_OK;
}


/*
 * kvserve_kv_dtype f32 | f16 | bf16 | int8 | fp8: parsed here; whether
 * the backend can store it is checked once kvserve_backend is known
 * (ngx_http_kvserve_kv_dtype_check).
 */
char *
ngx_http_kvserve_kv_dtype_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_main_conf_t  *kmcf = conf;

    uint32_t    dt;
    ngx_str_t  *value;

    if (kmcf->kv_dtype != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (kvs_kv_dtype_parse((const char *) value[1].data, value[1].len, &dt)
        != KVS_OK)
    {
        return ngx_http_kvserve_conf_invalid(cf, cmd, &value[1],
                                             "it must be \"f32\", \"f16\", "
                                             "\"bf16\", \"int8\" or "
                                             "\"fp8\"");
    }

    kmcf->kv_dtype = dt;

    return NGX_CONF_OK;
}


/*
 * The CPU backend stores every dtype; the CUDA one too, int8 and fp8
 * for heads of a multiple of 8 elements only (its attention kernels copy
 * 8 bytes at a time), so with "kvserve_backend cuda" a model with other
 * heads is refused here as its engine would refuse it.  With "auto" a
 * dtype the device cannot store runs on the CPU (kvs_backend_new), so
 * only the CPU's set is required.
 */
ngx_int_t
ngx_http_kvserve_kv_dtype_check(ngx_conf_t *cf,
    ngx_http_kvserve_main_conf_t *kmcf)
{
    uint32_t                   dt;
    ngx_uint_t                 i;
    const kvs_hparams_t       *hp;
    ngx_http_kvserve_model_t  *m;

    if (kmcf->kv_dtype == NGX_CONF_UNSET_UINT
        || kmcf->backend != KVS_BACKEND_CUDA)
    {
        return NGX_OK;
    }

    dt = (uint32_t) kmcf->kv_dtype;

    if (dt != KVS_KV_INT8 && dt != KVS_KV_FP8) {
        return NGX_OK;
    }

    m = kmcf->models->elts;

    for (i = 0; i < kmcf->models->nelts; i++) {
        hp = &m[i].model->hp;

        if (hp->head_dim_k % 8 != 0 || hp->head_dim_v % 8 != 0) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "kvserve_kv_dtype \"%s\": model \"%V\" has "
                          "heads of %uD/%uD elements; the CUDA backend "
                          "stores it for heads of a multiple of 8 "
                          "(\"kvserve_backend cpu\" or \"auto\" stores it "
                          "on the CPU)", kvs_kv_dtype_name(dt), &m[i].name,
                          hp->head_dim_k, hp->head_dim_v);
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * kvserve_backend cuda | cpu | auto: only parsed here; the engine process
 * chooses and loads (nginx's master and workers never touch CUDA).
 */
char *
ngx_http_kvserve_backend(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_kvserve_main_conf_t  *kmcf = conf;

    ngx_str_t           *value;
    kvs_backend_kind_t   kind;

    if (kmcf->backend != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (kvs_backend_parse((const char *) value[1].data, value[1].len, &kind)
        != KVS_OK)
    {
        return ngx_http_kvserve_conf_invalid(cf, cmd, &value[1],
                                             "it must be \"cuda\", \"cpu\" "
                                             "or \"auto\"");
    }

    kmcf->backend = (ngx_uint_t) kind;

    return NGX_CONF_OK;
}


/* A number in [low, high] (or "auto" where allowed) at cmd->offset. */
char *
ngx_http_kvserve_set_uint(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    ngx_int_t                        n;
    ngx_str_t                       *value;
    ngx_uint_t                      *field;
    ngx_http_kvserve_uint_bounds_t  *b;

    field = (ngx_uint_t *) (p + cmd->offset);
    b = cmd->post;

    if (*field != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (b->auto_value != NGX_CONF_UNSET_UINT
        && value[1].len == 4
        && ngx_strncmp(value[1].data, "auto", 4) == 0)
    {
        *field = b->auto_value;
        return NGX_CONF_OK;
    }

    n = ngx_atoi(value[1].data, value[1].len);

    if (n == NGX_ERROR || (ngx_uint_t) n < b->low
        || (ngx_uint_t) n > b->high)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be a number from %ui to %ui%s",
                           &value[1], &cmd->name, b->low, b->high,
                           b->auto_value != NGX_CONF_UNSET_UINT
                           ? " or \"auto\"" : "");
        return NGX_CONF_ERROR;
    }

    *field = (ngx_uint_t) n;

    return NGX_CONF_OK;
}


char *
ngx_http_kvserve_status(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_kvserve_loc_conf_t  *klcf = conf;

    return ngx_http_kvserve_location(cf, &klcf->status,
                                     ngx_http_kvserve_status_handler, 1);
}


char *
ngx_http_kvserve_metrics_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_loc_conf_t  *klcf = conf;

    return ngx_http_kvserve_location(cf, &klcf->metrics,
                                     ngx_http_kvserve_metrics_handler, 0);
}


/*
 * A pool name is looked up when the configuration is complete: nginx
 * fails an undeclared one (other than "default") with
 * unknown thread pool "NAME" in FILE:LINE.
 */
char *
ngx_http_kvserve_tokenize_threads(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_loc_conf_t  *klcf = conf;

    ngx_str_t  *value;

    if (klcf->tokenize_pool != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 3 && ngx_strncmp(value[1].data, "off", 3) == 0) {
        klcf->tokenize_pool = NULL;
        return NGX_CONF_OK;
    }

#if (NGX_THREADS)

    if (value[1].len == 0) {
        return ngx_http_kvserve_conf_invalid(cf, cmd, &value[1],
                                             "it must be a thread pool "
                                             "name or \"off\"");
    }

    klcf->tokenize_pool = ngx_thread_pool_add(cf, &value[1]);
    if (klcf->tokenize_pool == NULL) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;

#else

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"%V %V\" needs thread pools, and this nginx was "
                       "built without them (--with-threads); use \"%V "
                       "off\"", &cmd->name, &value[1], &cmd->name);
    return NGX_CONF_ERROR;

#endif
}


/*
 * The pool of a location that tokenizes (kvserve, kvserve_route) and set
 * no kvserve_tokenize_threads, even at a level above: nginx's "default"
 * (nginx sizes it, 32 threads, unless a thread_pool line does); none
 * without thread support.
 */
char *
ngx_http_kvserve_tokenize_pool_default(ngx_conf_t *cf,
    ngx_http_kvserve_loc_conf_t *klcf)
{
    if (klcf->tokenize_pool != NGX_CONF_UNSET_PTR) {
        return NGX_CONF_OK;
    }

#if (NGX_THREADS)
    klcf->tokenize_pool = ngx_thread_pool_add(cf, NULL);
    if (klcf->tokenize_pool == NULL) {
        return NGX_CONF_ERROR;
    }
#else
    klcf->tokenize_pool = NULL;
#endif

    return NGX_CONF_OK;
}


char *
ngx_http_kvserve_tokenize_threshold(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_loc_conf_t  *klcf = conf;

    ssize_t     n;
    ngx_str_t  *value;

    if (klcf->tokenize_threshold != NGX_CONF_UNSET_SIZE) {
        return "is duplicate";
    }

    value = cf->args->elts;

    n = ngx_parse_size(&value[1]);

    if (n == NGX_ERROR) {
        return ngx_http_kvserve_conf_invalid(cf, cmd, &value[1],
                                             "it must be a size in bytes, "
                                             "such as 16k or 1m");
    }

    klcf->tokenize_threshold = (size_t) n;

    return NGX_CONF_OK;
}


/* kvserve_fair_weights prefill=<N> decode=<N>: counter units per token
 * computed, each 1..1000 (a larger ratio buys nothing a user can see) */
char *
ngx_http_kvserve_fair_weights(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_main_conf_t  *kmcf = conf;

    ngx_int_t    n;
    ngx_str_t   *value, v;
    ngx_uint_t   i, *w;

    if (kmcf->fair_w_prefill != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_http_kvserve_param(&value[i], "prefill", &v) == NGX_OK) {
            w = &kmcf->fair_w_prefill;

        } else if (ngx_http_kvserve_param(&value[i], "decode", &v)
                   == NGX_OK)
        {
            w = &kmcf->fair_w_decode;

        } else {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid parameter \"%V\" in \"%V\" "
                               "directive, it must be prefill=<N> or "
                               "decode=<N>", &value[i], &cmd->name);
            return NGX_CONF_ERROR;
        }

        n = ngx_atoi(v.data, v.len);

        if (n == NGX_ERROR || n < 1 || n > NGX_HTTP_KVSERVE_FAIR_W_MAX) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid value \"%V\" in \"%V\" directive, "
                               "the weight must be a whole number from 1 "
                               "to %d", &value[i], &cmd->name,
                               NGX_HTTP_KVSERVE_FAIR_W_MAX);
            return NGX_CONF_ERROR;
        }

        if (*w != NGX_CONF_UNSET_UINT && *w != 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "duplicate parameter \"%V\" in \"%V\" "
                               "directive", &value[i], &cmd->name);
            return NGX_CONF_ERROR;
        }

        *w = (ngx_uint_t) n;
    }

    /* set: the one not given keeps its default */
    if (kmcf->fair_w_prefill == NGX_CONF_UNSET_UINT) {
        kmcf->fair_w_prefill = 0;
    }

    return NGX_CONF_OK;
}


/*
 * A fraction of the KV cache, 0 < f <= 1, in thousandths (rounded half
 * up, at least 1), into *milli; NGX_ERROR for anything else.  Parsed by
 * hand as a decimal so that 0.1 is exactly 100.
 */
ngx_int_t
ngx_http_kvserve_parse_milli(ngx_str_t *v, ngx_uint_t *milli)
{
    u_char      *p, *last;
    ngx_uint_t   whole, frac, digits, nonzero, fnonzero, dot;

    p = v->data;
    last = p + v->len;
    whole = 0;
    frac = 0;          /* the first four decimals, as ten-thousandths */
    digits = 0;
    nonzero = 0;
    fnonzero = 0;
    dot = 0;

    for ( /* void */ ; p < last; p++) {

        if (*p == '.' && !dot) {
            dot = 1;
            continue;
        }

        if (*p < '0' || *p > '9' || (!dot && whole > 1)) {
            return NGX_ERROR;
        }

        nonzero |= (*p != '0');

        if (!dot) {
            whole = whole * 10 + (*p - '0');
            continue;
        }

        fnonzero |= (*p != '0');

        if (digits < 4) {
            frac = frac * 10 + (*p - '0');
            digits++;
        }
    }

    if (v->len == dot || !nonzero || whole > 1) {
        return NGX_ERROR;
    }

    while (digits < 4) {
        frac *= 10;
        digits++;
    }

    if (whole == 1 && fnonzero) {
        return NGX_ERROR;
    }

    /* 1 is 1000; else round the ten-thousandths half up */
    *milli = whole ? 1000 : (frac + 5) / 10;

    if (*milli == 0) {
        *milli = 1;
    }

    return NGX_OK;
}


/*
 * kvserve_fair_kv_max and kvserve_request_kv_max <fraction> | off: the
 * KV blocks a tenant (fair) or one request, a prompt and its n choices
 * (request), may hold while others wait, 0 < fraction <= 1 of the cache,
 * in thousandths at cmd->offset of the main conf; off: no cap (0).
 */
char *
ngx_http_kvserve_set_kv_fraction(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_uint_t  *milli;
    ngx_str_t   *value;

    milli = (ngx_uint_t *) ((u_char *) conf + cmd->offset);

    if (*milli != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        *milli = 0;
        return NGX_CONF_OK;
    }

    if (ngx_http_kvserve_parse_milli(&value[1], milli) != NGX_OK) {
        return ngx_http_kvserve_conf_invalid(cf, cmd, &value[1],
                                             "it must be a fraction of the "
                                             "KV cache over 0 and at most "
                                             "1, such as 0.5, or \"off\"");
    }

    return NGX_CONF_OK;
}


/*
 * kvserve_max_sequences <n>: the sequences (prompts x n) one request may
 * ask the engine for, 1..NGX_HTTP_KVSERVE_MAX_SEQS.
 */
char *
ngx_http_kvserve_max_sequences(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_loc_conf_t  *klcf = conf;

    ngx_int_t   n;
    ngx_str_t  *value;

    if (klcf->max_sequences != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;
    n = ngx_atoi(value[1].data, value[1].len);

    if (n == NGX_ERROR || n < 1 || n > NGX_HTTP_KVSERVE_MAX_SEQS) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, it "
                           "must be a number of sequences from 1 to %d",
                           &value[1], &cmd->name,
                           NGX_HTTP_KVSERVE_MAX_SEQS);
        return NGX_CONF_ERROR;
    }

    klcf->max_sequences = (ngx_uint_t) n;

    return NGX_CONF_OK;
}


/* nginx's own form for a bad value, with what it must be: "invalid value
 * "V" in "D" directive, <must>" */
char *
ngx_http_kvserve_conf_invalid(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *value, const char *must)
{
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid value \"%V\" in \"%V\" directive, %s",
                       value, &cmd->name, must);
    return NGX_CONF_ERROR;
}


/* *cvp: value compiled as a string with variables; an empty value is
 * refused with must */
char *
ngx_http_kvserve_conf_complex(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *value, const char *must, ngx_http_complex_value_t **cvp)
{
    ngx_http_complex_value_t          *cv;
    ngx_http_compile_complex_value_t   ccv;

    if (value->len == 0) {
        return ngx_http_kvserve_conf_invalid(cf, cmd, value, must);
    }

    cv = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
    if (cv == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ccv));
    ccv.cf = cf;
    ccv.value = value;
    ccv.complex_value = cv;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    *cvp = cv;

    return NGX_CONF_OK;
}
