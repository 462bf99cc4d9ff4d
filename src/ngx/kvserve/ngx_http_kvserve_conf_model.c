/*
 * ngx_http_kvserve_conf_model: the kvserve_model directive, NAME PATH
 * [chat_template=NAME|FILE] [kv_cache=SIZE|FRACTION]: it checks the name,
 * opens the model and loads its tokenizer, and chooses what its chat
 * requests are rendered with (a built-in family, a Jinja file, or the
 * model's own template).  The other directives are
 * ngx_http_kvserve_conf.c.
 *
 * Invariants:
 *  - models, their tokenizers and compiled templates are opened while
 *    the configuration is read, in the master, and freed by the cycle
 *    pool's cleanup;
 *  - errors fail `nginx -t` naming the model, the parameter and the
 *    reason, e.g. kvserve_model "tiny": cannot open "/m.gguf": ...
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve.h"
#include "ngx_http_kvserve_param.h"
#include "base/kvs_hash.h"
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
    m->tool_syntax = kvs_tool_syntax_detect(text, len);
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

    if (ngx_http_kvserve_param(arg, "chat_template", &v) != NGX_OK) {
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
 * kv_cache=SIZE|FRACTION (arg, v its value): the model's own KV budget,
 * out of the share of kvserve_kv_cache (ngx_kvserve_module.c sizes it).
 */
static char *
ngx_http_kvserve_model_kv_cache(ngx_conf_t *cf, ngx_http_kvserve_model_t *m,
    ngx_str_t *arg, ngx_str_t *v)
{
    kvs_err_t  err;

    if (m->kv_cache.len != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "kvserve_model \"%V\": duplicate parameter "
                           "\"%V\"", &m->name, arg);
        return NGX_CONF_ERROR;
    }

    if (kvs_kv_cache_parse(&m->kv_spec, (const char *) v->data, v->len,
                           &err)
        != KVS_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "kvserve_model \"%V\": invalid parameter "
                           "\"%V\": %s", &m->name, arg, err.msg);
        return NGX_CONF_ERROR;
    }

    m->kv_cache = *v;

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
    ngx_str_t   v;
    ngx_uint_t  i;

    for (i = 0; i < n; i++) {
        rc = ngx_http_kvserve_model_chat_param(cf, m, &args[i]);

        if (rc == NGX_OK) {
            continue;
        }

        if (rc != NGX_DECLINED) {
            return NGX_CONF_ERROR;
        }

        if (ngx_http_kvserve_param(&args[i], "kv_cache", &v) == NGX_OK
            && v.len != 0)
        {
            if (ngx_http_kvserve_model_kv_cache(cf, m, &args[i], &v)
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
    uint64_t                   key;
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

    key = kvs_fnv1a64(KVS_FNV1A64_INIT, value[1].data, value[1].len);

    m = kmcf->models->elts;
    for (i = 0; i < kmcf->models->nelts; i++) {
        if (m[i].name.len == value[1].len
            && ngx_strncmp(m[i].name.data, value[1].data, value[1].len) == 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "duplicate model name \"%V\"", &value[1]);
            return NGX_CONF_ERROR;
        }

        /* two names, one engine socket: refused rather than shared */
        if (m[i].key == key) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "model name \"%V\" has the engine key "
                               "%016uxL of model \"%V\" (FNV-1a of the "
                               "name); rename one of them", &value[1], key,
                               &m[i].name);
            return NGX_CONF_ERROR;
        }
    }

    m = ngx_array_push(kmcf->models);
    if (m == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(m, sizeof(ngx_http_kvserve_model_t));
    m->name = value[1];
    m->key = key;
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
                       "(pre-tokenizer %s), chat template %s, tool calls "
                       "%s",
                       &value[1], m->model->hp.arch,
                       m->model->hp.n_layer, m->model->hp.n_ctx_train,
                       (unsigned long long) m->model->hp.n_params,
                       kvs_vocab_kind_name(m->vocab->kind),
                       m->vocab->n_tokens, m->vocab->pre_name,
                       ngx_http_kvserve_chat_desc(m),
                       m->chat.jinja != NULL
                       ? kvs_tool_syntax_name(m->tool_syntax) : "none");

    return NGX_CONF_OK;
}
