/*
 * ngx_http_kvserve_tier: the prefix cache's second tier in nginx's
 * configuration (docs/prefix-cache.md, "The second tier"):
 *
 *     kvserve_kv_tier disk PATH SIZE [model=NAME] [load=cost|always];
 *     kvserve_kv_tier host SIZE [model=NAME];
 *
 * at http level, once per model and kind (without model=: the one model
 * served for disk, every model for host, each its own SIZE).  The
 * directive is parsed here; ngx_http_kvserve_kv_tier_check(), once the
 * models, their KV blocks and the backend are known, gives each model
 * its tiers and refuses what the engine would refuse at start: an
 * unknown model, a file two models would share, a size that holds no
 * block, a missing directory, a tier without the prefix cache, and
 * `host` unless `kvserve_backend cuda` (the CPU's pool is host memory
 * already; with `auto` the backend is known only when the engine
 * starts, so nginx -t refuses it too).
 *
 * Invariants: each model has at most one tier of each kind and each
 * tier file serves exactly one model; the engine gets its tiers from
 * m->tier and m->thost at spawn.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <xxhash.h>

#include "ngx_http_kvserve.h"
#include "ngx_http_kvserve_param.h"
#include "backend/kvs_backend.h"
#include "kv/kvs_tier.h"


/* Bytes of file one block takes (kvs_tier.c's slot: a 512-byte header,
 * the tokens, the KV bytes, aligned), for the size check. */
#define NGX_HTTP_KVSERVE_TIER_SLOT_HDR  512


/* A new tier of its kind for model (len 0: every model), where it was
 * written; NULL (logged) for a second one. */
static ngx_http_kvserve_tier_t *
ngx_http_kvserve_tier_push(ngx_conf_t *cf, ngx_http_kvserve_main_conf_t *kmcf,
    ngx_flag_t host, ngx_str_t *model)
{
    ngx_uint_t                i;
    ngx_http_kvserve_tier_t  *t;

    if (kmcf->tiers == NULL) {
        kmcf->tiers = ngx_array_create(cf->pool, 2,
                                       sizeof(ngx_http_kvserve_tier_t));
        if (kmcf->tiers == NULL) {
            return NULL;
        }
    }

    t = kmcf->tiers->elts;

    for (i = 0; i < kmcf->tiers->nelts; i++) {
        if (t[i].host == host && t[i].model.len == model->len
            && ngx_strncmp(t[i].model.data, model->data, model->len) == 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"kvserve_kv_tier%s\" is duplicate for %s%V",
                               host ? " host" : "",
                               model->len ? "model " : "every model", model);
            return NULL;
        }
    }

    t = ngx_array_push(kmcf->tiers);
    if (t == NULL) {
        return NULL;
    }

    ngx_memzero(t, sizeof(ngx_http_kvserve_tier_t));
    t->host = host;
    t->model = *model;
    t->file = cf->conf_file->file.name.data;
    t->line = cf->conf_file->line;

    return t;
}


/* kvserve_kv_tier host SIZE [model=NAME]: the backend is checked once
 * it is known (ngx_http_kvserve_kv_tier_check). */
static char *
ngx_http_kvserve_kv_tier_host(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_http_kvserve_main_conf_t *kmcf)
{
    off_t                     size;
    ngx_str_t                *value, model, v;
    ngx_uint_t                i, n;
    ngx_http_kvserve_tier_t  *t;

    value = cf->args->elts;
    n = cf->args->nelts;

    size = ngx_parse_offset(&value[2]);
    if (size <= 0) {
        return ngx_http_kvserve_conf_invalid(cf, cmd, &value[2],
                                             "it must be a size such as "
                                             "512m or 4g");
    }

    ngx_str_null(&model);

    for (i = 3; i < n; i++) {
        if (model.len == 0
            && ngx_http_kvserve_param(&value[i], "model", &v) == NGX_OK
            && v.len > 0)
        {
            model = v;
            continue;
        }

        return ngx_http_kvserve_conf_invalid(cf, cmd, &value[i],
                                             "it must be one "
                                             "\"model=NAME\"");
    }

    t = ngx_http_kvserve_tier_push(cf, kmcf, 1, &model);
    if (t == NULL) {
        return NGX_CONF_ERROR;
    }

    t->size = size;

    return NGX_CONF_OK;
}


char *
ngx_http_kvserve_kv_tier_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_main_conf_t  *kmcf = conf;

    off_t                     size;
    ngx_str_t                *value, model, v;
    ngx_int_t                 always;
    ngx_uint_t                i, n;
    ngx_http_kvserve_tier_t  *t;

    value = cf->args->elts;
    n = cf->args->nelts;

    if (value[1].len == 4 && ngx_strncmp(value[1].data, "host", 4) == 0) {
        return ngx_http_kvserve_kv_tier_host(cf, cmd, kmcf);
    }

    if (value[1].len != 4 || ngx_strncmp(value[1].data, "disk", 4) != 0) {
        return ngx_http_kvserve_conf_invalid(cf, cmd, &value[1],
                                             "it must be \"disk\" or "
                                             "\"host\"");
    }

    if (n < 4) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"kvserve_kv_tier disk\" needs a PATH and a "
                           "SIZE");
        return NGX_CONF_ERROR;
    }

    size = ngx_parse_offset(&value[3]);
    if (size <= 0) {
        return ngx_http_kvserve_conf_invalid(cf, cmd, &value[3],
                                             "it must be a size such as "
                                             "512m or 4g");
    }

    ngx_str_null(&model);
    always = -1;

    for (i = 4; i < n; i++) {
        if (model.len == 0
            && ngx_http_kvserve_param(&value[i], "model", &v) == NGX_OK
            && v.len > 0)
        {
            model = v;
            continue;
        }

        if (always == -1 && value[i].len == 9
            && ngx_strncmp(value[i].data, "load=cost", 9) == 0)
        {
            always = 0;
            continue;
        }

        if (always == -1 && value[i].len == 11
            && ngx_strncmp(value[i].data, "load=always", 11) == 0)
        {
            always = 1;
            continue;
        }

        return ngx_http_kvserve_conf_invalid(cf, cmd, &value[i],
                                             "it must be one "
                                             "\"model=NAME\" and one "
                                             "\"load=cost\" or "
                                             "\"load=always\"");
    }

    if (value[2].len == 0) {
        return ngx_http_kvserve_conf_invalid(cf, cmd, &value[2],
                                             "it must be a file name");
    }

    t = ngx_http_kvserve_tier_push(cf, kmcf, 0, &model);
    if (t == NULL) {
        return NGX_CONF_ERROR;
    }

    t->path = value[2];
    t->size = size;
    t->load_always = always == 1;

    if (ngx_conf_full_name(cf->cycle, &t->path, 0) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* A tier's own fault, with where it was written. */
static ngx_int_t
ngx_http_kvserve_tier_fail(ngx_conf_t *cf, ngx_http_kvserve_tier_t *t,
    const char *msg)
{
    ngx_log_error(NGX_LOG_EMERG, cf->log, 0, "\"kvserve_kv_tier %s%V\" in "
                  "%s:%ui: %s", t->host ? "host" : "disk ", &t->path,
                  t->file, t->line, msg);

    return NGX_ERROR;
}


ngx_int_t
ngx_http_kvserve_kv_tier_check(ngx_conf_t *cf,
    ngx_http_kvserve_main_conf_t *kmcf)
{
    u_char                    *dir;
    uint64_t                   slot, need;
    ngx_uint_t                 i, j, k, n;
    ngx_file_info_t            fi;
    ngx_http_kvserve_tier_t   *t;
    ngx_http_kvserve_model_t  *m;

    if (kmcf->tiers == NULL) {
        return NGX_OK;
    }

    t = kmcf->tiers->elts;
    m = kmcf->models->elts;
    n = kmcf->models->nelts;

    for (i = 0; i < kmcf->tiers->nelts; i++) {
        if (!kmcf->prefix_cache) {
            return ngx_http_kvserve_tier_fail(cf, &t[i], "the prefix cache "
                                              "is off (kvserve_prefix_cache"
                                              ")");
        }

        if (t[i].host) {
            if (kmcf->backend != KVS_BACKEND_CUDA) {
                ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                              "\"kvserve_kv_tier host\" is not supported: "
                              "on the CPU backend the KV pool is host "
                              "memory already (use \"kvserve_kv_tier disk "
                              "PATH SIZE\"); it needs \"kvserve_backend "
                              "cuda\" (with \"auto\" the backend is known "
                              "only when the engine starts), in %s:%ui",
                              t[i].file, t[i].line);
                return NGX_ERROR;
            }

            continue;
        }

        for (j = 0; j < i; j++) {
            if (!t[j].host && t[j].path.len == t[i].path.len
                && ngx_strncmp(t[j].path.data, t[i].path.data,
                               t[i].path.len) == 0)
            {
                return ngx_http_kvserve_tier_fail(cf, &t[i], "the file "
                                                  "serves another model "
                                                  "already");
            }
        }

        if (t[i].model.len == 0 && n > 1) {
            return ngx_http_kvserve_tier_fail(cf, &t[i], "several models "
                                              "are served: give each its "
                                              "own file with model=NAME");
        }

        /* the directory must be there: the engine creates the file */
        dir = ngx_pnalloc(cf->pool, t[i].path.len + 1);
        if (dir == NULL) {
            return NGX_ERROR;
        }

        ngx_cpystrn(dir, t[i].path.data, t[i].path.len + 1);

        for (k = t[i].path.len; k > 0 && dir[k - 1] != '/'; k--) {
            /* void */
        }

        /* the full name is absolute: k > 0; "/f" is in "/" */
        dir[k > 1 ? k - 1 : k] = '\0';

        if (ngx_file_info(dir, &fi) == NGX_FILE_ERROR || !ngx_is_dir(&fi)) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, ngx_errno,
                          "\"kvserve_kv_tier disk %V\" in %s:%ui: no "
                          "directory \"%s\"", &t[i].path, t[i].file,
                          t[i].line, dir);
            return NGX_ERROR;
        }
    }

    for (k = 0; k < n; k++) {
        m[k].tier = NULL;
        m[k].thost = NULL;

        for (i = 0; i < kmcf->tiers->nelts; i++) {
            if (t[i].model.len == 0
                || (t[i].model.len == m[k].name.len
                    && ngx_strncmp(t[i].model.data, m[k].name.data,
                                   m[k].name.len) == 0))
            {
                /* a named tier wins over the unnamed one */
                if (t[i].host) {
                    if (m[k].thost == NULL || t[i].model.len != 0) {
                        m[k].thost = &t[i];
                    }

                } else if (m[k].tier == NULL || t[i].model.len != 0) {
                    m[k].tier = &t[i];
                }
            }
        }

        /* a host tier holds at least one block (of the dtype the pool
         * is sized in; the device's may be smaller) */
        need = ngx_http_kvserve_kv_bpt(&m[k]) * m[k].kv_block;

        if (m[k].thost != NULL && (uint64_t) m[k].thost->size < need) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "\"kvserve_kv_tier host\" in %s:%ui: size %O "
                          "holds no block of model \"%V\" (%uL bytes a "
                          "block)", m[k].thost->file, m[k].thost->line,
                          m[k].thost->size, &m[k].name, need);
            return NGX_ERROR;
        }

        if (m[k].tier == NULL) {
            continue;
        }

        slot = NGX_HTTP_KVSERVE_TIER_SLOT_HDR + 4 * (uint64_t) m[k].kv_block
               + ngx_http_kvserve_kv_bpt(&m[k]) * m[k].kv_block;
        slot = (slot + KVS_TIER_ALIGN - 1) / KVS_TIER_ALIGN * KVS_TIER_ALIGN;
        need = KVS_TIER_ALIGN + slot;

        if ((uint64_t) m[k].tier->size < need) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "\"kvserve_kv_tier disk %V\" in %s:%ui: size %O "
                          "holds no block of model \"%V\" (%uL bytes a "
                          "block, at least %uL)", &m[k].tier->path,
                          m[k].tier->file, m[k].tier->line,
                          m[k].tier->size, &m[k].name, slot, need);
            return NGX_ERROR;
        }

        m[k].tier_tag = XXH3_64bits(m[k].name.data, m[k].name.len);
    }

    for (i = 0; i < kmcf->tiers->nelts; i++) {
        if (t[i].model.len == 0) {
            continue;
        }

        for (k = 0; k < n; k++) {
            if (m[k].tier == &t[i] || m[k].thost == &t[i]) {
                break;
            }
        }

        if (k == n) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0, "\"kvserve_kv_tier "
                          "%s%V\" in %s:%ui: no model \"%V\" is served",
                          t[i].host ? "host" : "disk ", &t[i].path,
                          t[i].file, t[i].line, &t[i].model);
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}
