/*
 * ngx_http_kvserve_lora: LoRA adapters in the configuration
 * (docs/lora.md).
 *
 *   kvserve_lora NAME PATH [base=MODEL];   http: an adapter of MODEL
 *                                          (default: the kvserve_model
 *                                          declared last before it),
 *                                          served as model id
 *                                          "MODEL:NAME"
 *   kvserve_lora_slots N;                  http: adapters resident at
 *                                          once per model's engine
 *                                          (1..64; default: all, and
 *                                          then at most 64)
 *   kvserve_lora_map <value>;              http, server, location: the
 *                                          adapter NAME a request is
 *                                          served under (a value with
 *                                          variables, e.g. a map of
 *                                          $kvserve_tenant); empty: the
 *                                          base
 *
 * Invariants: an adapter is opened against its base while the
 * configuration is read (kvs_lora_open: architecture, every pair's
 * shapes against the base's matrix), so a file that does not fit fails
 * `nginx -t` with the reader's message naming the adapter's tensor and
 * both shapes; only its identity is kept (the f32 copies are freed: the
 * engine process opens the file again, kvs_engine_lora.c).  Adapter ids
 * are the order of the base's kvserve_lora lines, 1..256.  The base's
 * engine key is its name alone: a reload that changes only adapters
 * keeps the engine and its cache; after each HELLO the worker sends
 * its adapter files (LORA, ngx_http_kvserve_lora_frame) and the engine
 * maps this connection's ids onto them, so the ids never mean another
 * configuration's files.  With kvserve_lora_map set, a
 * request is served under the mapped adapter whatever it asks for, and
 * a request naming another adapter is refused as a model that does not
 * exist for it (404).
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve.h"
#include "ngx_http_kvserve_param.h"
#include "ngx_http_kvserve_request.h"
#include "engine/kvs_engine.h"
#include "model/kvs_lora.h"
#include "wire/kvs_wire.h"

#define NGX_HTTP_KVSERVE_LORA_NAME_MAX  64


/* NAME: 1..64 letters, digits and . _ - (no ':', which joins it to the
 * base's name in the model id) */
static ngx_int_t
ngx_http_kvserve_lora_valid(ngx_str_t *name)
{
    u_char      c;
    ngx_uint_t  i;

    if (name->len == 0 || name->len > NGX_HTTP_KVSERVE_LORA_NAME_MAX) {
        return NGX_ERROR;
    }

    for (i = 0; i < name->len; i++) {
        c = name->data[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
              || (c >= '0' && c <= '9') || c == '.' || c == '_'
              || c == '-'))
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* The model named base (len 0: the last declared), or NULL. */
static ngx_http_kvserve_model_t *
ngx_http_kvserve_lora_base(ngx_http_kvserve_main_conf_t *kmcf,
    ngx_str_t *base)
{
    ngx_uint_t                 i;
    ngx_http_kvserve_model_t  *m;

    m = kmcf->models->elts;

    if (base->len == 0) {
        return kmcf->models->nelts > 0 ? &m[kmcf->models->nelts - 1] : NULL;
    }

    for (i = 0; i < kmcf->models->nelts; i++) {
        if (m[i].name.len == base->len
            && ngx_strncmp(m[i].name.data, base->data, base->len) == 0)
        {
            return &m[i];
        }
    }

    return NULL;
}


char *
ngx_http_kvserve_lora_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_main_conf_t  *kmcf = conf;

    u_char                    *p;
    kvs_err_t                  err;
    ngx_str_t                 *value, base, path, v;
    ngx_uint_t                 i, n;
    kvs_lora_t                *l;
    ngx_http_kvserve_lora_t   *a;
    ngx_http_kvserve_model_t  *m;

    value = cf->args->elts;

    if (ngx_http_kvserve_lora_valid(&value[1]) != NGX_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid adapter name \"%V\": use 1..%d letters, "
                           "digits and . _ -", &value[1],
                           NGX_HTTP_KVSERVE_LORA_NAME_MAX);
        return NGX_CONF_ERROR;
    }

    ngx_str_null(&base);

    for (i = 3; i < cf->args->nelts; i++) {
        if (base.len == 0
            && ngx_http_kvserve_param(&value[i], "base", &v) == NGX_OK
            && v.len > 0)
        {
            base = v;
            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "kvserve_lora \"%V\": invalid parameter \"%V\"; "
                           "it takes base=MODEL once", &value[1], &value[i]);
        return NGX_CONF_ERROR;
    }

    m = ngx_http_kvserve_lora_base(kmcf, &base);
    if (m == NULL) {
        if (base.len == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "kvserve_lora \"%V\": no kvserve_model before "
                               "it; declare its base first or name it with "
                               "base=", &value[1]);
        } else {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "kvserve_lora \"%V\": base=\"%V\" is no "
                               "kvserve_model declared before it",
                               &value[1], &base);
        }
        return NGX_CONF_ERROR;
    }

    if (m->loras == NULL) {
        m->loras = ngx_array_create(cf->pool, 4,
                                    sizeof(ngx_http_kvserve_lora_t));
        if (m->loras == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    a = m->loras->elts;
    n = m->loras->nelts;

    for (i = 0; i < n; i++) {
        if (a[i].name.len == value[1].len
            && ngx_strncmp(a[i].name.data, value[1].data, value[1].len) == 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "duplicate adapter \"%V\" of model \"%V\"",
                               &value[1], &m->name);
            return NGX_CONF_ERROR;
        }
    }

    if (n >= KVS_ENGINE_MAX_LORAS) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "kvserve_lora \"%V\": model \"%V\" has %d "
                           "adapters already, the most an engine serves",
                           &value[1], &m->name, KVS_ENGINE_MAX_LORAS);
        return NGX_CONF_ERROR;
    }

    path = value[2];
    if (ngx_conf_full_name(cf->cycle, &path, 0) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    a = ngx_array_push(m->loras);
    if (a == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(a, sizeof(ngx_http_kvserve_lora_t));
    a->name = value[1];
    a->adapter = (uint32_t) n + 1;

    a->path = ngx_pnalloc(cf->pool, path.len + 1);
    a->id.len = m->name.len + 1 + value[1].len;
    a->id.data = ngx_pnalloc(cf->pool, a->id.len + 1);
    if (a->path == NULL || a->id.data == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_cpystrn(a->path, path.data, path.len + 1);
    p = ngx_sprintf(a->id.data, "%V:%V", &m->name, &value[1]);
    *p = '\0';

    /* the engine refuses what does not fit its base: refuse it here */
    if (kvs_lora_open(&l, (char *) a->path, m->model, &err) != KVS_OK) {
        m->loras->nelts--;
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "kvserve_lora \"%V\" for model \"%V\": %s",
                           &value[1], &m->name, err.msg);
        return NGX_CONF_ERROR;
    }

    a->rank_max = l->rank_max;
    a->epoch = l->epoch;

    ngx_conf_log_error(NGX_LOG_INFO, cf, 0,
                       "kvserve_lora \"%V\": model id \"%V\", %uD pairs, "
                       "rank up to %uD, epoch %016uxL", &value[1], &a->id,
                       l->n_mat, l->rank_max, l->epoch);

    kvs_lora_close(l);

    return NGX_CONF_OK;
}


char *
ngx_http_kvserve_lora_map_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_loc_conf_t  *klcf = conf;

    ngx_str_t  *value;

    if (klcf->lora_map != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    return ngx_http_kvserve_conf_complex(cf, cmd, &value[1],
                                         "it must be a string with "
                                         "variables, such as $lora",
                                         &klcf->lora_map);
}


ngx_http_kvserve_lora_t *
ngx_http_kvserve_lora_find(ngx_http_kvserve_main_conf_t *kmcf,
    const char *id, size_t len, ngx_uint_t *base)
{
    ngx_uint_t                 i, k;
    ngx_http_kvserve_lora_t   *a;
    ngx_http_kvserve_model_t  *m;

    m = kmcf->models->elts;

    for (i = 0; i < kmcf->models->nelts; i++) {
        if (m[i].loras == NULL || len <= m[i].name.len + 1
            || id[m[i].name.len] != ':'
            || ngx_strncmp(m[i].name.data, id, m[i].name.len) != 0)
        {
            continue;
        }

        a = m[i].loras->elts;

        for (k = 0; k < m[i].loras->nelts; k++) {
            if (a[k].id.len == len
                && ngx_strncmp(a[k].id.data, id, len) == 0)
            {
                *base = i;
                return &a[k];
            }
        }
    }

    return NULL;
}


/* The 404 of a model id the request may not use. */
static ngx_int_t
ngx_http_kvserve_lora_no(ngx_http_kvserve_ctx_t *ctx, kvs_api_err_t *aerr)
{
    kvs_api_err_set(aerr, 404, "model", "model_not_found",
                    "The model `%s` does not exist or you do not have "
                    "access to it.", ctx->req.model.ptr);
    return NGX_ERROR;
}


ngx_int_t
ngx_http_kvserve_lora_select(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_lora_t *asked, kvs_api_err_t *aerr)
{
    ngx_str_t                     v;
    ngx_uint_t                    k;
    ngx_http_kvserve_lora_t      *a;
    ngx_http_kvserve_loc_conf_t  *klcf;

    klcf = ngx_http_get_module_loc_conf(ctx->r, ngx_http_kvserve_module);

    ctx->lora = asked;

    if (klcf->lora_map == NULL) {
        return NGX_OK;
    }

    if (ngx_http_complex_value(ctx->r, klcf->lora_map, &v) != NGX_OK) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "The adapter map could not "
                        "be evaluated.");
        return NGX_ERROR;
    }

    /* mapped to the base: no adapter may be asked for */
    if (v.len == 0) {
        return asked == NULL ? NGX_OK : ngx_http_kvserve_lora_no(ctx, aerr);
    }

    a = ctx->model->loras != NULL ? ctx->model->loras->elts : NULL;

    for (k = 0; a != NULL && k < ctx->model->loras->nelts; k++) {
        if (a[k].name.len == v.len
            && ngx_strncmp(a[k].name.data, v.data, v.len) == 0)
        {
            break;
        }
    }

    /* an adapter the base does not have, or not the one mapped */
    if (a == NULL || k == ctx->model->loras->nelts
        || (asked != NULL && asked != &a[k]))
    {
        if (a == NULL || k == ctx->model->loras->nelts) {
            ngx_log_error(NGX_LOG_WARN, ctx->r->connection->log, 0,
                          "kvserve: kvserve_lora_map gave \"%V\", no "
                          "adapter of model \"%V\"", &v, &ctx->model->name);
        }
        return ngx_http_kvserve_lora_no(ctx, aerr);
    }

    ctx->lora = &a[k];

    return NGX_OK;
}


ngx_int_t
ngx_http_kvserve_lora_paths(ngx_http_kvserve_model_t *m,
    kvs_engine_conf_t *conf)
{
    ngx_uint_t                k;
    const char              **paths;
    ngx_http_kvserve_lora_t  *a;

    conf->lora_paths = NULL;
    conf->n_loras = 0;

    if (m->loras == NULL || m->loras->nelts == 0) {
        return NGX_OK;
    }

    paths = calloc(m->loras->nelts, sizeof(char *));
    if (paths == NULL) {
        return NGX_ERROR;
    }

    a = m->loras->elts;

    for (k = 0; k < m->loras->nelts; k++) {
        paths[k] = (const char *) a[k].path;
    }

    conf->lora_paths = paths;
    conf->n_loras = (uint32_t) m->loras->nelts;

    return NGX_OK;
}


ngx_int_t
ngx_http_kvserve_lora_frame(ngx_http_kvserve_model_t *m, kvs_buf_t *b,
    kvs_err_t *err)
{
    ngx_uint_t                k;
    ngx_http_kvserve_lora_t  *a;

    static kvs_wire_lora_t    f;      /* 6 KiB: a worker is one thread */

    if (m->loras == NULL || m->loras->nelts == 0) {
        return NGX_OK;
    }

    a = m->loras->elts;
    f.model = 0;                      /* the engine's only model */
    f.n = (uint32_t) m->loras->nelts;

    for (k = 0; k < m->loras->nelts; k++) {
        f.ad[k].epoch = a[k].epoch;
        f.ad[k].path = (const char *) a[k].path;
        f.ad[k].path_len = (uint32_t) ngx_strlen(a[k].path);
    }

    return kvs_wire_enc_lora(b, &f, err) == KVS_OK ? NGX_OK : NGX_ERROR;
}


ngx_int_t
ngx_http_kvserve_lora_check(ngx_conf_t *cf,
    ngx_http_kvserve_main_conf_t *kmcf)
{
    ngx_uint_t                 i;
    ngx_http_kvserve_model_t  *m;

    m = kmcf->models->elts;

    for (i = 0; i < kmcf->models->nelts; i++) {
        if (kmcf->lora_slots == 0 && m[i].loras != NULL
            && m[i].loras->nelts > KVS_ENGINE_LORA_SLOTS)
        {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "model \"%V\" has %ui LoRA adapters, more than "
                          "an engine holds at once (%d): set "
                          "kvserve_lora_slots", &m[i].name,
                          m[i].loras->nelts, KVS_ENGINE_LORA_SLOTS);
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}
