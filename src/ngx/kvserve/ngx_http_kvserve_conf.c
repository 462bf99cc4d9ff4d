/*
 * ngx_http_kvserve_conf: the handlers of the kvserve directives (the
 * table is in ngx_kvserve_module.c): each checks its value and sets the
 * configuration; kvserve_model opens the model and loads its tokenizer.
 *
 * Invariants:
 *  - models and their tokenizers are opened while the configuration is
 *    read, in the master, and freed by the cycle pool's cleanup;
 *  - errors fail `nginx -t` with the directive, the value and the
 *    reason, e.g. kvserve_model "tiny": cannot open "/m.gguf": ...
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve.h"
#include "backend/kvs_backend.h"
#include "kv/kvs_kv_size.h"
#include "tokenizer/kvs_chat.h"

#define NGX_HTTP_KVSERVE_NAME_MAX      128


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


static void
ngx_http_kvserve_jinja_cleanup(void *data)
{
    kvs_chat_jinja_free(data);
}


/* Compiles text[len] as m's chat template, kept until the cycle ends. */
static ngx_int_t
ngx_http_kvserve_model_jinja(ngx_conf_t *cf, ngx_http_kvserve_model_t *m,
    const char *text, size_t len, kvs_err_t *err)
{
    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        kvs_err_set(err, KVS_ENOMEM, "out of memory");
        return NGX_ERROR;
    }

    if (kvs_chat_jinja_compile(&m->jinja, text, len, NULL, err) != KVS_OK) {
        return NGX_ERROR;
    }

    cln->handler = ngx_http_kvserve_jinja_cleanup;
    cln->data = m->jinja;

    ngx_memzero(&m->chat, sizeof(kvs_chat_t));
    m->chat.jinja = m->jinja;
    m->has_chat = 1;

    return NGX_OK;
}


/*
 * The model's own chat template, run as written, unless chat_template=
 * chose one: compiled now, so a construct the interpreter cannot run
 * fails `nginx -t` naming it.  A base model without a template is not an
 * error, but chat needs kvserve_chat_template then, so say so.
 */
static ngx_int_t
ngx_http_kvserve_model_chat(ngx_conf_t *cf, ngx_http_kvserve_model_t *m)
{
    kvs_err_t       err;
    kvs_gguf_str_t  text;

    if (m->chat_fixed) {
        return NGX_OK;
    }

    if (kvs_gguf_get_str(m->model->gguf, "tokenizer.chat_template", &text,
                         &err) != KVS_OK)
    {
        ngx_conf_log_error(NGX_LOG_NOTICE, cf, 0,
                           "kvserve_model \"%V\": no chat template in the "
                           "model; chat requests need kvserve_chat_template",
                           &m->name);
        return NGX_OK;
    }

    if (ngx_http_kvserve_model_jinja(cf, m, text.ptr, text.len, &err)
        != NGX_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "kvserve_model \"%V\": the model's chat "
                           "template: %s; name a format or a template file "
                           "with chat_template=", &m->name, err.msg);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* Reads a template file whole into the configuration's temporary pool. */
static ngx_int_t
ngx_http_kvserve_read_template(ngx_conf_t *cf, ngx_str_t *path,
    ngx_str_t *text, const char **why)
{
    ssize_t          n;
    ngx_fd_t         fd;
    ngx_file_info_t  fi;

    fd = ngx_open_file(path->data, NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);
    if (fd == NGX_INVALID_FILE) {
        *why = strerror(ngx_errno);
        return NGX_ERROR;
    }

    *why = NULL;

    if (ngx_fd_info(fd, &fi) == NGX_FILE_ERROR) {
        *why = strerror(ngx_errno);

    } else if (!ngx_is_file(&fi)) {
        *why = "not a regular file";

    } else if (ngx_file_size(&fi) > NGX_HTTP_KVSERVE_TEMPLATE_MAX) {
        *why = "larger than 1 MiB";

    } else {
        text->len = (size_t) ngx_file_size(&fi);
        text->data = ngx_pnalloc(cf->temp_pool, text->len + 1);

        if (text->data == NULL) {
            *why = "out of memory";

        } else {
            n = ngx_read_fd(fd, text->data, text->len);
            if (n < 0 || (size_t) n != text->len) {
                *why = n < 0 ? strerror(ngx_errno) : "short read";
            }
        }
    }

    ngx_close_file(fd);

    return *why == NULL ? NGX_OK : NGX_ERROR;
}


/*
 * kvserve_model's chat_template=NAME|FILE: one of the named formats,
 * else a Jinja template file (a relative name is from the configuration
 * prefix, as include's), compiled now.  NGX_DECLINED: arg is another
 * parameter.
 */
static ngx_int_t
ngx_http_kvserve_model_chat_param(ngx_conf_t *cf,
    ngx_http_kvserve_model_t *m, ngx_str_t *arg)
{
    kvs_err_t    err;
    ngx_str_t    v, path, text;
    const char  *why;

    static const char  key[] = "chat_template=";

    if (arg->len < sizeof(key) - 1
        || ngx_strncmp(arg->data, key, sizeof(key) - 1) != 0)
    {
        return NGX_DECLINED;
    }

    if (m->chat_fixed) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "kvserve_model \"%V\": duplicate "
                           "\"chat_template\" parameter", &m->name);
        return NGX_ERROR;
    }

    ngx_str_null(&text);
    why = "";

    v.data = arg->data + sizeof(key) - 1;
    v.len = arg->len - (sizeof(key) - 1);

    if (kvs_chat_by_name((const char *) v.data, v.len, &m->chat, &err)
        == KVS_OK)
    {
        m->has_chat = 1;
        m->chat_fixed = 1;
        return NGX_OK;
    }

    /* NUL-terminated for open(), which an absolute name is used as */
    path.len = v.len;
    path.data = ngx_pnalloc(cf->temp_pool, v.len + 1);
    if (path.data == NULL) {
        return NGX_ERROR;
    }

    ngx_cpystrn(path.data, v.data, v.len + 1);

    if (ngx_conf_full_name(cf->cycle, &path, 1) != NGX_OK) {
        return NGX_ERROR;
    }

    if (v.len == 0
        || ngx_http_kvserve_read_template(cf, &path, &text, &why) != NGX_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "kvserve_model \"%V\": invalid value \"%V\" in "
                           "\"chat_template=\": it must be one of "
                           KVS_CHAT_NAMES " or a Jinja template file%s%s",
                           &m->name, &v, v.len ? ": " : "",
                           v.len ? why : "");
        return NGX_ERROR;
    }

    if (ngx_http_kvserve_model_jinja(cf, m, (const char *) text.data,
                                     text.len, &err) != NGX_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "kvserve_model \"%V\": chat_template=\"%V\": "
                           "%s", &m->name, &path, err.msg);
        return NGX_ERROR;
    }

    m->chat_fixed = 1;

    return NGX_OK;
}


/*
 * kv_cache=SIZE|FRACTION: the model's own KV budget, out of the share of
 * kvserve_kv_cache (ngx_kvserve_module.c sizes it).
 */
static char *
ngx_http_kvserve_model_kv_cache(ngx_conf_t *cf, ngx_http_kvserve_model_t *m,
    ngx_str_t *arg)
{
    ngx_str_t  v;
    kvs_err_t  err;

    if (m->kv_cache.len != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "kvserve_model \"%V\": duplicate parameter "
                           "\"%V\"", &m->name, arg);
        return NGX_CONF_ERROR;
    }

    v.data = arg->data + sizeof("kv_cache=") - 1;
    v.len = arg->len - (sizeof("kv_cache=") - 1);

    if (kvs_kv_cache_parse(&m->kv_spec, (const char *) v.data, v.len, &err)
        != KVS_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "kvserve_model \"%V\": invalid parameter "
                           "\"%V\": %s", &m->name, arg, err.msg);
        return NGX_CONF_ERROR;
    }

    m->kv_cache = v;

    return NGX_CONF_OK;
}


/*
 * The parameters after NAME PATH, each NAME=VALUE; one that is not known
 * stops nginx naming it.
 */
static char *
ngx_http_kvserve_model_params(ngx_conf_t *cf, ngx_http_kvserve_model_t *m,
    ngx_str_t *args, ngx_uint_t n)
{
    ngx_int_t   rc;
    ngx_uint_t  i;

    for (i = 0; i < n; i++) {
        rc = ngx_http_kvserve_model_chat_param(cf, m, &args[i]);

        if (rc == NGX_OK) {
            continue;
        }

        if (rc != NGX_DECLINED) {
            return NGX_CONF_ERROR;
        }

        if (args[i].len > sizeof("kv_cache=") - 1
            && ngx_strncmp(args[i].data, "kv_cache=",
                           sizeof("kv_cache=") - 1) == 0)
        {
            if (ngx_http_kvserve_model_kv_cache(cf, m, &args[i])
                != NGX_CONF_OK)
            {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "kvserve_model \"%V\": unknown parameter "
                           "\"%V\" (known: kv_cache=SIZE|FRACTION, "
                           "chat_template=NAME|FILE)",
                           &m->name, &args[i]);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* What the model's chat requests are rendered with, for the log. */
static const char *
ngx_http_kvserve_chat_desc(ngx_http_kvserve_model_t *m)
{
    if (!m->has_chat) {
        return "none";
    }

    if (m->chat.jinja == NULL) {
        return kvs_chat_name(m->chat.kind);
    }

    return m->chat_fixed ? "from chat_template= (Jinja)"
                         : "the model's own (Jinja)";
}


char *
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

    ngx_memzero(m, sizeof(ngx_http_kvserve_model_t));
    m->name = value[1];
    m->path = value[2];

    /* parameters first: a typo costs no model load */
    if (ngx_http_kvserve_model_params(cf, m, &value[3], cf->args->nelts - 3)
        != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

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

    /* the engine refuses this at load (kvs_engine_new): refuse it here,
     * so that such a file never reaches an engine process */
    if (m->vocab->n_tokens != m->model->hp.n_vocab) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "kvserve_model \"%V\": \"%V\": the tokenizer has "
                           "%uD tokens, the model's vocabulary %uD",
                           &value[1], &m->path, m->vocab->n_tokens,
                           m->model->hp.n_vocab);
        return NGX_CONF_ERROR;
    }

    if (ngx_http_kvserve_model_chat(cf, m) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    ngx_conf_log_error(NGX_LOG_INFO, cf, 0,
                       "kvserve_model \"%V\": %s, %uD layers, context %uD, "
                       "%uL parameters, %s tokenizer of %uD tokens "
                       "(pre-tokenizer %s), chat template %s",
                       &value[1], m->model->hp.arch,
                       m->model->hp.n_layer, m->model->hp.n_ctx_train,
                       (unsigned long long) m->model->hp.n_params,
                       kvs_vocab_kind_name(m->vocab->kind),
                       m->vocab->n_tokens, m->vocab->pre_name,
                       ngx_http_kvserve_chat_desc(m));

    return NGX_CONF_OK;
}


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

    size_t       skip;
    ngx_int_t    n;
    ngx_str_t   *value;
    ngx_uint_t   i, *w;

    if (kmcf->fair_w_prefill != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "prefill=", 8) == 0) {
            w = &kmcf->fair_w_prefill;
            skip = 8;

        } else if (ngx_strncmp(value[i].data, "decode=", 7) == 0) {
            w = &kmcf->fair_w_decode;
            skip = 7;

        } else {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid parameter \"%V\" in \"%V\" "
                               "directive, it must be prefill=<N> or "
                               "decode=<N>", &value[i], &cmd->name);
            return NGX_CONF_ERROR;
        }

        n = ngx_atoi(value[i].data + skip, value[i].len - skip);

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
static ngx_int_t
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
 * kvserve_fair_kv_max <fraction> | off: the KV blocks a tenant may hold
 * while others wait, 0 < fraction <= 1 of the cache, in thousandths;
 * off: no cap (0).
 */
char *
ngx_http_kvserve_fair_kv_max(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_main_conf_t  *kmcf = conf;

    ngx_str_t  *value;

    if (kmcf->fair_kv_max_milli != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        kmcf->fair_kv_max_milli = 0;
        return NGX_CONF_OK;
    }

    if (ngx_http_kvserve_parse_milli(&value[1], &kmcf->fair_kv_max_milli)
        != NGX_OK)
    {
        return ngx_http_kvserve_conf_invalid(cf, cmd, &value[1],
                                             "it must be a fraction of the "
                                             "KV cache over 0 and at most "
                                             "1, such as 0.5, or \"off\"");
    }

    return NGX_CONF_OK;
}


/*
 * kvserve_request_kv_max <fraction> | off: the KV blocks one request (a
 * prompt and its n choices) may hold while others wait, as
 * kvserve_fair_kv_max is for a tenant; off: no cap (0).
 */
char *
ngx_http_kvserve_request_kv_max(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_main_conf_t  *kmcf = conf;

    ngx_str_t  *value;

    if (kmcf->req_kv_max_milli != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        kmcf->req_kv_max_milli = 0;
        return NGX_CONF_OK;
    }

    if (ngx_http_kvserve_parse_milli(&value[1], &kmcf->req_kv_max_milli)
        != NGX_OK)
    {
        return ngx_http_kvserve_conf_invalid(cf, cmd, &value[1],
                                             "it must be a fraction of the "
                                             "KV cache over 0 and at most "
                                             "1, such as 0.25, or \"off\"");
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
