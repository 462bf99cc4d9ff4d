/*
 * ngx_kvserve_module: the kvserve nginx module: its directives, their
 * configuration, and per-process start-up.  Request handling lives in
 * src/ngx/ngx_http_kvserve_handler.c; everything that is not nginx glue
 * lives in libkvserve (src/).
 *
 *   kvserve_model <name> <path.gguf>;   http, several allowed
 *   kvserve;                            location
 *   kvserve_chat_template <name>;       http, server, location: render
 *                                       chat messages in this format
 *                                       instead of the one recognised in
 *                                       the model's own template
 *   kvserve_kv_cache <size>|<fraction>; http: KV cache memory, shared
 *                                       equally by the models
 *   kvserve_kv_block <tokens>;          http: tokens per KV block
 *   kvserve_max_batch_tokens <n>;       http: tokens per engine step
 *   kvserve_threads <n>|auto;           http: engine compute threads
 *   kvserve_engine_dir <path>;          http: the engine's socket and
 *                                       lease file
 *   kvserve_engine_wait <time>;         http: how long a request waits
 *                                       for an engine before a 503
 *   kvserve_engine_timeout <time>;      http: no output for this long
 *                                       fails the request
 *   kvserve_engine_ping <time>;         http: watchdog PING interval,
 *                                       0: no watchdog
 *   kvserve_engine_hang_timeout <time>; http: an engine silent for this
 *                                       long is killed as hung
 *   kvserve_tokenize_threads <pool>|off;  http, server, location:
 *                                       the thread pool that renders and
 *                                       tokenizes long prompts; default
 *                                       nginx's pool "default"
 *   kvserve_tokenize_threshold <size>;  http, server, location: prompt
 *                                       text bytes over which the pool
 *                                       is used (16k)
 *   kvserve_status;                     location: the engine's stats
 *   kvserve_metrics;                    location: Prometheus metrics,
 *                                       every worker's requests and
 *                                       the engine's gauges
 *
 * Variables for log_format ($kvserve_ttft_ms, ...) are added before the
 * configuration is read (ngx_http_kvserve_metrics.c).
 *
 * The engine's numbers are fixed when the http block ends (init main
 * conf, after every kvserve_model is loaded): each model's KV cache plan
 * is computed from its hyper-parameters and logged, so `nginx -t` shows
 * what a start would allocate.
 *
 * Errors in a directive fail `nginx -t` with the directive, the value and
 * the reason, e.g. kvserve_model "tiny": cannot open "/m.gguf": ...
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "src/ngx/ngx_http_kvserve.h"
#include "backend/kvs_backend.h"
#include "kv/kvs_kv_pool.h"
#include "kv/kvs_kv_size.h"
#include "tokenizer/kvs_chat.h"

#define NGX_HTTP_KVSERVE_NAME_MAX      128
#define NGX_HTTP_KVSERVE_BATCH_TOKENS  2048
#define NGX_HTTP_KVSERVE_MAX_BATCH     (1 << 20)
#define NGX_HTTP_KVSERVE_MAX_THREADS   1024
#define NGX_HTTP_KVSERVE_TOK_THRESHOLD  16384


/* Bounds of a number directive; auto_value is stored for "auto", which
 * is refused when it is NGX_CONF_UNSET_UINT. */
typedef struct {
    ngx_uint_t  low;
    ngx_uint_t  high;
    ngx_uint_t  auto_value;
} ngx_http_kvserve_uint_bounds_t;


static char *ngx_http_kvserve_model(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_kvserve(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_kvserve_chat_template(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_kvserve_kv_cache(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_kvserve_set_uint(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_kvserve_kv_size(ngx_conf_t *cf,
    ngx_http_kvserve_main_conf_t *kmcf);
static void *ngx_http_kvserve_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_kvserve_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_kvserve_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_kvserve_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_kvserve_init_process(ngx_cycle_t *cycle);
static void ngx_http_kvserve_exit_process(ngx_cycle_t *cycle);
static char *ngx_http_kvserve_metrics_directive(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_kvserve_status(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_kvserve_tokenize_threads(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_kvserve_tokenize_threshold(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);


static ngx_http_kvserve_uint_bounds_t  ngx_http_kvserve_kv_block_bounds = {
    1, KVS_KV_MAX_BLOCK_TOKENS, NGX_CONF_UNSET_UINT
};

static ngx_http_kvserve_uint_bounds_t  ngx_http_kvserve_batch_bounds = {
    1, NGX_HTTP_KVSERVE_MAX_BATCH, NGX_CONF_UNSET_UINT
};

/* 0 stands for auto: resolved to the online CPUs at init main conf */
static ngx_http_kvserve_uint_bounds_t  ngx_http_kvserve_threads_bounds = {
    1, NGX_HTTP_KVSERVE_MAX_THREADS, 0
};


static ngx_command_t  ngx_http_kvserve_commands[] = {

    { ngx_string("kvserve_model"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_kvserve_model,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_kvserve,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_chat_template"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_chat_template,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_kv_cache"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_kv_cache,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_kv_block"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_set_uint,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_kvserve_main_conf_t, kv_block),
      &ngx_http_kvserve_kv_block_bounds },

    { ngx_string("kvserve_max_batch_tokens"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_set_uint,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_kvserve_main_conf_t, max_batch_tokens),
      &ngx_http_kvserve_batch_bounds },

    { ngx_string("kvserve_threads"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_set_uint,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_kvserve_main_conf_t, threads),
      &ngx_http_kvserve_threads_bounds },

    { ngx_string("kvserve_engine_dir"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_path_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_kvserve_main_conf_t, engine_dir),
      NULL },

    { ngx_string("kvserve_engine_wait"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_kvserve_main_conf_t, engine_wait),
      NULL },

    { ngx_string("kvserve_engine_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_kvserve_main_conf_t, engine_timeout),
      NULL },

    { ngx_string("kvserve_engine_ping"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_kvserve_main_conf_t, engine_ping),
      NULL },

    { ngx_string("kvserve_engine_hang_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_kvserve_main_conf_t, engine_hang_timeout),
      NULL },

    { ngx_string("kvserve_metrics"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_kvserve_metrics_directive,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_tokenize_threads"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_tokenize_threads,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_tokenize_threshold"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_tokenize_threshold,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_status"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_kvserve_status,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_kvserve_module_ctx = {
    ngx_http_kvserve_add_variables,        /* preconfiguration */
    ngx_http_kvserve_filter_init,          /* postconfiguration */

    ngx_http_kvserve_create_main_conf,     /* create main configuration */
    ngx_http_kvserve_init_main_conf,       /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_kvserve_create_loc_conf,      /* create location configuration */
    ngx_http_kvserve_merge_loc_conf        /* merge location configuration */
};


ngx_module_t  ngx_http_kvserve_module = {
    NGX_MODULE_V1,
    &ngx_http_kvserve_module_ctx,          /* module context */
    ngx_http_kvserve_commands,             /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_kvserve_init_process,         /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_kvserve_exit_process,         /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static void
ngx_http_kvserve_model_cleanup(void *data)
{
    kvs_model_close(data);
}


static void
ngx_http_kvserve_vocab_cleanup(void *data)
{
    kvs_vocab_free(data);
}


/* Model ids: printable, no spaces or quotes, as OpenAI's ids are. */
static ngx_int_t
ngx_http_kvserve_valid_name(ngx_str_t *name)
{
    u_char      c;
    ngx_uint_t  i;

    if (name->len == 0 || name->len > NGX_HTTP_KVSERVE_NAME_MAX) {
        return NGX_ERROR;
    }

    for (i = 0; i < name->len; i++) {
        c = name->data[i];

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
            || (c >= '0' && c <= '9')
            || (c != '\0' && ngx_strchr("._-:/@+", c) != NULL))
        {
            continue;
        }

        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * A chat template the model carries and we recognise is used for chat
 * requests; a base model without one, or an unrecognised one, is not an
 * error, but chat needs kvserve_chat_template then, so say so.
 */
static void
ngx_http_kvserve_model_chat(ngx_conf_t *cf, ngx_http_kvserve_model_t *m)
{
    kvs_err_t       err;
    kvs_gguf_str_t  text;

    if (kvs_gguf_get_str(m->model->gguf, "tokenizer.chat_template", &text,
                         &err) != KVS_OK)
    {
        ngx_conf_log_error(NGX_LOG_NOTICE, cf, 0,
                           "kvserve_model \"%V\": no chat template in the "
                           "model; chat requests need kvserve_chat_template",
                           &m->name);
        return;
    }

    if (kvs_chat_detect(text.ptr, text.len, &m->chat, &err) != KVS_OK) {
        ngx_conf_log_error(NGX_LOG_NOTICE, cf, 0,
                           "kvserve_model \"%V\": %s; chat requests need "
                           "kvserve_chat_template", &m->name, err.msg);
        return;
    }

    m->has_chat = 1;
}


static char *
ngx_http_kvserve_model(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_kvserve_main_conf_t  *kmcf = conf;

    u_char                    *path;
    kvs_err_t                  err;
    ngx_str_t                 *value;
    ngx_uint_t                 i;
    ngx_pool_cleanup_t        *cln;
    ngx_http_kvserve_model_t  *m;

    value = cf->args->elts;

    if (ngx_http_kvserve_valid_name(&value[1]) != NGX_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid model name \"%V\": use 1..%d letters, "
                           "digits and . _ - : / @ +", &value[1],
                           NGX_HTTP_KVSERVE_NAME_MAX);
        return NGX_CONF_ERROR;
    }

    m = kmcf->models->elts;
    for (i = 0; i < kmcf->models->nelts; i++) {
        if (m[i].name.len == value[1].len
            && ngx_strncmp(m[i].name.data, value[1].data, value[1].len) == 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "duplicate model name \"%V\"", &value[1]);
            return NGX_CONF_ERROR;
        }
    }

    m = ngx_array_push(kmcf->models);
    if (m == NULL) {
        return NGX_CONF_ERROR;
    }

    m->name = value[1];
    m->path = value[2];
    m->model = NULL;
    m->vocab = NULL;
    m->has_chat = 0;

    if (ngx_conf_full_name(cf->cycle, &m->path, 0) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    /* ngx_str_t is not NUL-terminated; the library wants a C string */
    path = ngx_pnalloc(cf->pool, m->path.len + 1);
    if (path == NULL) {
        return NGX_CONF_ERROR;
    }
    ngx_cpystrn(path, m->path.data, m->path.len + 1);

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        return NGX_CONF_ERROR;
    }

    if (kvs_model_open(&m->model, (char *) path, &err) != KVS_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "kvserve_model \"%V\": %s",
                           &value[1], err.msg);
        return NGX_CONF_ERROR;
    }

    cln->handler = ngx_http_kvserve_model_cleanup;
    cln->data = m->model;

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        return NGX_CONF_ERROR;
    }

    /* the tokenizer is part of the model: a vocabulary we cannot load
     * (an unknown pre-tokenizer, say) stops nginx here, not at the first
     * request */
    if (kvs_vocab_load(&m->vocab, m->model->gguf, &err) != KVS_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "kvserve_model \"%V\": \"%V\": tokenizer: %s",
                           &value[1], &m->path, err.msg);
        return NGX_CONF_ERROR;
    }

    cln->handler = ngx_http_kvserve_vocab_cleanup;
    cln->data = m->vocab;

    ngx_http_kvserve_model_chat(cf, m);

    ngx_conf_log_error(NGX_LOG_INFO, cf, 0,
                       "kvserve_model \"%V\": %s, %uD layers, context %uD, "
                       "%uL parameters, %s tokenizer of %uD tokens "
                       "(pre-tokenizer %s), chat template %s",
                       &value[1], m->model->hp.arch,
                       m->model->hp.n_layer, m->model->hp.n_ctx_train,
                       (unsigned long long) m->model->hp.n_params,
                       kvs_vocab_kind_name(m->vocab->kind),
                       m->vocab->n_tokens, m->vocab->pre_name,
                       m->has_chat ? kvs_chat_name(m->chat.kind) : "none");

    return NGX_CONF_OK;
}


static char *
ngx_http_kvserve(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_kvserve_loc_conf_t  *klcf = conf;

    ngx_http_core_loc_conf_t      *clcf;
    ngx_http_kvserve_main_conf_t  *kmcf;

    if (klcf->enable != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    klcf->enable = 1;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_kvserve_handler;

    kmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_kvserve_module);
    kmcf->used = 1;

    return NGX_CONF_OK;
}


/* Checked here, so that a typo fails `nginx -t`, not the first request. */
static char *
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
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be one of " KVS_CHAT_NAMES,
                           &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    klcf->chat_template = chat.kind;

    return NGX_CONF_OK;
}


/*
 * The library's message quotes the value first ("\"1.5\": fraction ...");
 * nginx's own form quotes it already, so only the reason is kept.
 */
static char *
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

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, %s",
                           &value[1], &cmd->name, reason);
        return NGX_CONF_ERROR;
    }

    kmcf->kv_cache = value[1];

    return NGX_CONF_OK;
}


/* A number in [low, high] (or "auto" where allowed) at cmd->offset. */
static char *
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


static void *
ngx_http_kvserve_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_kvserve_main_conf_t  *kmcf;

    kmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_kvserve_main_conf_t));
    if (kmcf == NULL) {
        return NULL;
    }

    kmcf->models = ngx_array_create(cf->pool, 2,
                                    sizeof(ngx_http_kvserve_model_t));
    if (kmcf->models == NULL) {
        return NULL;
    }

    /* kv_cache: { 0, NULL }, kv_spec zeroed: unset */
    kmcf->kv_block = NGX_CONF_UNSET_UINT;
    kmcf->max_batch_tokens = NGX_CONF_UNSET_UINT;
    kmcf->threads = NGX_CONF_UNSET_UINT;
    /* engine_dir: NULL, as ngx_conf_set_path_slot() wants it */
    kmcf->engine_wait = NGX_CONF_UNSET_MSEC;
    kmcf->engine_timeout = NGX_CONF_UNSET_MSEC;
    kmcf->engine_ping = NGX_CONF_UNSET_MSEC;
    kmcf->engine_hang_timeout = NGX_CONF_UNSET_MSEC;

    return kmcf;
}


static char *
ngx_http_kvserve_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_kvserve_main_conf_t  *kmcf = conf;

    kvs_err_t  err;

    if (kmcf->used && kmcf->models->nelts == 0) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "the \"kvserve\" directive needs at least one "
                      "\"kvserve_model\" in the http block");
        return NGX_CONF_ERROR;
    }

    ngx_conf_init_uint_value(kmcf->kv_block, KVS_KV_BLOCK_TOKENS);
    ngx_conf_init_uint_value(kmcf->max_batch_tokens,
                             NGX_HTTP_KVSERVE_BATCH_TOKENS);
    ngx_conf_init_uint_value(kmcf->threads, 0);
    ngx_conf_init_msec_value(kmcf->engine_wait, 30000);
    ngx_conf_init_msec_value(kmcf->engine_timeout, 60000);
    ngx_conf_init_msec_value(kmcf->engine_ping, 1000);
    ngx_conf_init_msec_value(kmcf->engine_hang_timeout, 10000);

    if (kmcf->engine_ping != 0
        && kmcf->engine_hang_timeout <= kmcf->engine_ping)
    {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "\"kvserve_engine_hang_timeout\" must be longer "
                      "than \"kvserve_engine_ping\"");
        return NGX_CONF_ERROR;
    }

    if (kmcf->engine_dir == NULL) {
        kmcf->engine_dir = ngx_pcalloc(cf->pool, sizeof(ngx_path_t));
        if (kmcf->engine_dir == NULL) {
            return NGX_CONF_ERROR;
        }

        ngx_str_set(&kmcf->engine_dir->name, "kvserve_temp");

        if (ngx_conf_full_name(cf->cycle, &kmcf->engine_dir->name, 0)
            != NGX_OK)
        {
            return NGX_CONF_ERROR;
        }

        kmcf->engine_dir->conf_file = NULL;
        kmcf->engine_dir->line = 0;

        /* nginx creates it (0700) and gives it to the worker user */
        if (kmcf->used && ngx_add_path(cf, &kmcf->engine_dir) != NGX_OK) {
            return NGX_CONF_ERROR;
        }
    }

    kmcf->n_threads = kmcf->threads;
    if (kmcf->n_threads == 0) {
        kmcf->n_threads = ngx_ncpu > 0 ? (ngx_uint_t) ngx_ncpu : 1;
    }

    if (kmcf->kv_cache.data == NULL) {
        ngx_str_set(&kmcf->kv_cache, KVS_KV_CACHE_DEFAULT);

        if (kvs_kv_cache_parse(&kmcf->kv_spec,
                               (const char *) kmcf->kv_cache.data,
                               kmcf->kv_cache.len, &err)
            != KVS_OK)
        {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "kvserve: default kvserve_kv_cache: %s", err.msg);
            return NGX_CONF_ERROR;
        }
    }

    if (kmcf->models->nelts == 0) {
        return NGX_CONF_OK;
    }

    ngx_log_error(NGX_LOG_NOTICE, cf->log, 0,
                  "kvserve: engine: %ui compute threads%s, steps of up to "
                  "%ui tokens, KV blocks of %ui tokens",
                  kmcf->n_threads,
                  kmcf->threads == 0 ? " (auto: online CPUs)" : "",
                  kmcf->max_batch_tokens, kmcf->kv_block);

    /* the counters every worker adds to, whether or not a location
     * shows them: a kvserve_metrics added by a reload sees the past */
    if (ngx_http_kvserve_metrics_zone(cf, kmcf) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    return ngx_http_kvserve_kv_size(cf, kmcf);
}


/*
 * Each model's KV cache plan.  A fraction is of what is available once
 * the weights are resident: MemAvailable counts the page cache, where
 * the mapped model files live (or will, once read), so their sizes are
 * taken off first.  The budget is shared equally by the models; the
 * cache is F32 on the CPU backend.
 */
static char *
ngx_http_kvserve_kv_size(ngx_conf_t *cf, ngx_http_kvserve_main_conf_t *kmcf)
{
    u_char                     detail[256], *last;
    uint64_t                   weights, avail, bpt;
    kvs_err_t                  err;
    ngx_uint_t                 i, n;
    const kvs_hparams_t       *hp;
    kvs_kv_cache_spec_t        share;
    ngx_http_kvserve_model_t  *m;
    char                       s_bytes[KVS_SIZE_FORMAT_LEN];
    char                       s_bpt[KVS_SIZE_FORMAT_LEN];
    char                       s_avail[KVS_SIZE_FORMAT_LEN];
    char                       s_mem[KVS_SIZE_FORMAT_LEN];
    char                       s_weights[KVS_SIZE_FORMAT_LEN];

    m = kmcf->models->elts;
    n = kmcf->models->nelts;
    weights = 0;
    avail = 0;
    share = kmcf->kv_spec;

    for (i = 0; i < n; i++) {
        weights += m[i].model->file_size;
    }

    if (share.fraction != 0) {
        if (kvs_mem_available(&kmcf->mem_avail, &err) != KVS_OK) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "kvserve_kv_cache \"%V\": %s; set a size such as "
                          "2g instead", &kmcf->kv_cache, err.msg);
            return NGX_CONF_ERROR;
        }

        avail = kmcf->mem_avail > weights ? kmcf->mem_avail - weights : 0;

        last = ngx_snprintf(detail, sizeof(detail) - 1,
                            " of %s available (MemAvailable %s less %s of "
                            "model files)",
                            kvs_size_format(s_avail, sizeof(s_avail), avail),
                            kvs_size_format(s_mem, sizeof(s_mem),
                                            kmcf->mem_avail),
                            kvs_size_format(s_weights, sizeof(s_weights),
                                            weights));
        avail /= n;

    } else {
        share.bytes /= n;
        last = detail;

        if (share.bytes == 0) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "kvserve_kv_cache \"%V\" is too small for %ui "
                          "models", &kmcf->kv_cache, n);
            return NGX_CONF_ERROR;
        }
    }

    if (n > 1) {
        last = ngx_snprintf(last, detail + sizeof(detail) - 1 - last,
                            ", shared by %ui models", n);
    }

    *last = '\0';

    for (i = 0; i < n; i++) {
        hp = &m[i].model->hp;
        bpt = kvs_hparams_kv_bytes_per_token(hp, sizeof(float));

        if (kvs_kv_cache_plan(&m[i].kv_plan, &share, avail, bpt,
                              (uint32_t) kmcf->kv_block, hp->n_ctx_train,
                              &err)
            != KVS_OK)
        {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "kvserve_kv_cache \"%V\"%s is too small for model "
                          "\"%V\": %s", &kmcf->kv_cache, detail,
                          &m[i].name, err.msg);
            return NGX_CONF_ERROR;
        }

        ngx_log_error(NGX_LOG_NOTICE, cf->log, 0,
                      "kvserve: model \"%V\": KV cache %s = %uD blocks x %uD "
                      "tokens (%uL tokens, %s/token), from kvserve_kv_cache "
                      "%V%s", &m[i].name,
                      kvs_size_format(s_bytes, sizeof(s_bytes),
                                      m[i].kv_plan.bytes),
                      m[i].kv_plan.n_blocks, m[i].kv_plan.block_tokens,
                      m[i].kv_plan.tokens,
                      kvs_size_format(s_bpt, sizeof(s_bpt), bpt),
                      &kmcf->kv_cache, detail);

        if (!m[i].kv_plan.full_ctx_fits) {
            ngx_log_error(NGX_LOG_WARN, cf->log, 0,
                          "kvserve: model \"%V\": the KV cache holds %uL "
                          "tokens, less than one sequence of the model's "
                          "context of %uD tokens (%uD blocks); requests that "
                          "need more are rejected", &m[i].name,
                          m[i].kv_plan.tokens, hp->n_ctx_train,
                          m[i].kv_plan.full_ctx_blocks);
        }
    }

    return NGX_CONF_OK;
}


static void *
ngx_http_kvserve_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_kvserve_loc_conf_t  *klcf;

    klcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_kvserve_loc_conf_t));
    if (klcf == NULL) {
        return NULL;
    }

    klcf->enable = NGX_CONF_UNSET;
    klcf->chat_template = NGX_CONF_UNSET;
    klcf->status = NGX_CONF_UNSET;
    klcf->metrics = NGX_CONF_UNSET;
    klcf->tokenize_pool = NGX_CONF_UNSET_PTR;
    klcf->tokenize_threshold = NGX_CONF_UNSET_SIZE;

    return klcf;
}


static char *
ngx_http_kvserve_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_kvserve_loc_conf_t  *prev = parent;
    ngx_http_kvserve_loc_conf_t  *conf = child;

    ngx_conf_merge_value(conf->enable, prev->enable, 0);
    ngx_conf_merge_value(conf->status, prev->status, 0);
    ngx_conf_merge_value(conf->metrics, prev->metrics, 0);
    ngx_conf_merge_value(conf->chat_template, prev->chat_template,
                         NGX_CONF_UNSET);
    ngx_conf_merge_size_value(conf->tokenize_threshold,
                              prev->tokenize_threshold,
                              NGX_HTTP_KVSERVE_TOK_THRESHOLD);
    ngx_conf_merge_ptr_value(conf->tokenize_pool, prev->tokenize_pool,
                             NGX_CONF_UNSET_PTR);

    /* resolved only where kvserve serves: a server or http level left
     * unset must not turn the default off for the locations below it.
     * nginx sizes "default" (32 threads) unless a thread_pool line
     * does. */
    if (conf->tokenize_pool == NGX_CONF_UNSET_PTR && conf->enable == 1) {
#if (NGX_THREADS)
        conf->tokenize_pool = ngx_thread_pool_add(cf, NULL);
        if (conf->tokenize_pool == NULL) {
            return NGX_CONF_ERROR;
        }
#else
        conf->tokenize_pool = NULL;
#endif
    }

    return NGX_CONF_OK;
}


/*
 * One line per host on which backend serves: the first worker probes
 * (CUDA must not be touched in the master before fork).
 */
static ngx_int_t
ngx_http_kvserve_init_process(ngx_cycle_t *cycle)
{
    kvs_backend_info_t             info;
    ngx_http_kvserve_main_conf_t  *kmcf;

    kmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_kvserve_module);

    if (kmcf == NULL || kmcf->models->nelts == 0) {
        return NGX_OK;
    }

    if (ngx_http_kvserve_engine_init_process(cycle) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ngx_worker != 0) {
        return NGX_OK;
    }

    kvs_backend_probe(&info);

    if (info.kind == KVS_BACKEND_CUDA) {
        ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
                      "kvserve: CUDA device found: %s, %uL MiB, %d "
                      "device(s); the engine computes on the CPU backend "
                      "until the CUDA backend is built",
                      info.device, (unsigned long long)
                      (info.device_mem >> 20), info.n_devices);
    } else {
        ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
                      "kvserve: using the CPU backend: %s", info.reason);
    }

    return NGX_OK;
}


static void
ngx_http_kvserve_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_kvserve_engine_exit_process(cycle);
}


static char *
ngx_http_kvserve_status(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_kvserve_loc_conf_t  *klcf = conf;

    ngx_http_core_loc_conf_t      *clcf;
    ngx_http_kvserve_main_conf_t  *kmcf;

    if (klcf->status != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    klcf->status = 1;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_kvserve_status_handler;

    kmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_kvserve_module);
    kmcf->used = 1;

    return NGX_CONF_OK;
}


static char *
ngx_http_kvserve_metrics_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_loc_conf_t  *klcf = conf;

    ngx_http_core_loc_conf_t  *clcf;

    if (klcf->metrics != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    klcf->metrics = 1;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_kvserve_metrics_handler;

    return NGX_CONF_OK;
}


/*
 * A pool name is looked up when the configuration is complete: nginx
 * fails an undeclared one (other than "default") with
 * unknown thread pool "NAME" in FILE:LINE.
 */
static char *
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
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be a thread pool name or \"off\"",
                           &value[1], &cmd->name);
        return NGX_CONF_ERROR;
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


static char *
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
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be a size in bytes, such as 16k or 1m",
                           &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    klcf->tokenize_threshold = (size_t) n;

    return NGX_CONF_OK;
}
