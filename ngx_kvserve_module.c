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
 *
 * Errors in a directive fail `nginx -t` with the directive, the value and
 * the reason, e.g. kvserve_model "tiny": cannot open "/m.gguf": ...
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "src/ngx/ngx_http_kvserve.h"
#include "backend/kvs_backend.h"
#include "tokenizer/kvs_chat.h"

#define NGX_HTTP_KVSERVE_NAME_MAX  128


static char *ngx_http_kvserve_model(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_kvserve(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_kvserve_chat_template(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static void *ngx_http_kvserve_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_kvserve_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_kvserve_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_kvserve_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_kvserve_init_process(ngx_cycle_t *cycle);


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

      ngx_null_command
};


static ngx_http_module_t  ngx_http_kvserve_module_ctx = {
    NULL,                                  /* preconfiguration */
    NULL,                                  /* postconfiguration */

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
    NULL,                                  /* exit process */
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

    return kmcf;
}


static char *
ngx_http_kvserve_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_kvserve_main_conf_t  *kmcf = conf;

    if (kmcf->used && kmcf->models->nelts == 0) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "the \"kvserve\" directive needs at least one "
                      "\"kvserve_model\" in the http block");
        return NGX_CONF_ERROR;
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

    return klcf;
}


static char *
ngx_http_kvserve_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_kvserve_loc_conf_t  *prev = parent;
    ngx_http_kvserve_loc_conf_t  *conf = child;

    ngx_conf_merge_value(conf->enable, prev->enable, 0);
    ngx_conf_merge_value(conf->chat_template, prev->chat_template,
                         NGX_CONF_UNSET);

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

    if (kmcf == NULL || kmcf->models->nelts == 0 || ngx_worker != 0) {
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
