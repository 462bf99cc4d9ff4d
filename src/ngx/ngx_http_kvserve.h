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
} ngx_http_kvserve_model_t;


typedef struct {
    ngx_array_t              *models;      /* ngx_http_kvserve_model_t */
    ngx_uint_t                used;        /* some location has kvserve */
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
