/*
 * ngx_http_kvserve: configuration shared by the module's nginx glue files.
 *
 * Ownership: models are opened (and their files mapped), and their
 * tokenizers loaded, while the configuration is read, in the master
 * before workers fork, so workers share them read-only; they belong
 * to the cycle's pool, whose cleanup closes them, so a reload maps the new
 * configuration's files and the old cycle's go when it is freed.
 */

#ifndef NGX_HTTP_KVSERVE_H
#define NGX_HTTP_KVSERVE_H

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "kv/kvs_kv_size.h"
#include "model/kvs_model.h"
#include "tokenizer/kvs_chat.h"
#include "tokenizer/kvs_vocab.h"


typedef struct {
    ngx_str_t                 name;        /* the API's model id */
    ngx_str_t                 path;        /* absolute file name */
    kvs_model_t              *model;
    kvs_vocab_t              *vocab;       /* its tokenizer */
    kvs_chat_t                chat;        /* its chat template, if */
    ngx_flag_t                has_chat;    /* one was recognised */
    kvs_kv_cache_plan_t       kv_plan;     /* its KV cache: n_blocks of
                                              kvserve_kv_block tokens,
                                              sized at init_main_conf */
} ngx_http_kvserve_model_t;


typedef struct {
    ngx_array_t              *models;      /* ngx_http_kvserve_model_t */
    ngx_uint_t                used;        /* some location has kvserve */

    /* engine sizing, from the http block; read by the engine */
    ngx_str_t                 kv_cache;    /* kvserve_kv_cache as written */
    kvs_kv_cache_spec_t       kv_spec;     /* ... parsed: the whole budget,
                                              shared equally by models */
    uint64_t                  mem_avail;   /* MemAvailable when sized, 0
                                              for a size */
    ngx_uint_t                kv_block;    /* tokens per KV block */
    ngx_uint_t                max_batch_tokens;  /* per engine step */
    ngx_uint_t                threads;     /* as set; 0: auto */
    ngx_uint_t                n_threads;   /* resolved: >= 1 */
} ngx_http_kvserve_main_conf_t;


typedef struct {
    ngx_flag_t                enable;      /* this location serves the API */
    ngx_int_t                 chat_template;  /* kvs_chat_kind_t, or
                                                 NGX_CONF_UNSET: the one
                                                 recognised in the model */
} ngx_http_kvserve_loc_conf_t;


extern ngx_module_t  ngx_http_kvserve_module;

ngx_int_t ngx_http_kvserve_handler(ngx_http_request_t *r);

#endif /* NGX_HTTP_KVSERVE_H */
