/*
 * ngx_kvserve_module: the kvserve nginx module: its directives, their
 * configuration, and per-process start-up.  The directives' handlers
 * live in src/ngx/kvserve/ngx_http_kvserve_conf.c, request handling in
 * src/ngx/kvserve/ (ngx_http_kvserve_request.h draws its files' layers,
 * from the content handler, ngx_http_kvserve_handler.c, down to the
 * request core); everything that is not nginx glue lives in libkvserve
 * (src/).  The token rate limits (kvserve_limit_zone, kvserve_limit,
 * ...) are a module of their own in the same .so,
 * ngx_http_kvserve_limit_module: src/ngx/limit/ngx_http_kvserve_limit_conf.c
 * (directives), _zone.c (shared zones) and _admit.c (requests).  So are
 * the gateway's prefix-aware routing (kvserve_route,
 * ngx_http_kvserve_route_module in src/ngx/route/) and the prefix index's
 * publisher on engine hosts (kvserve_index, ngx_http_kvserve_index_module
 * in src/ngx/index/ngx_http_kvserve_index.c), which also closes the
 * Redis connections (_redis.c) at exit.
 *
 *   kvserve_model <name> <path.gguf> [chat_template=<name>|<file>];
 *                                       http, several allowed; chat
 *                                       requests to the model use this
 *                                       format or Jinja template file,
 *                                       whatever the location says
 *   kvserve;                            location
 *   kvserve_chat_template <name>;       http, server, location: render
 *                                       chat messages in this format
 *                                       instead of the model's own
 *                                       template (run as written by the
 *                                       Jinja interpreter), for models
 *                                       without chat_template=
 *   kvserve_kv_cache <size>|<fraction>; http: KV cache memory, shared
 *                                       equally by the models
 *   kvserve_kv_block <tokens>;          http: tokens per KV block
 *   kvserve_max_batch_tokens <n>;       http: tokens per engine step
 *   kvserve_threads <n>|auto;           http: engine compute threads
 *   kvserve_backend cuda|cpu|auto;      http: the engine's backend;
 *                                       auto: CUDA when a device answers
 *   kvserve_device <n>;                 http: the CUDA device ordinal
 *   kvserve_engine_dir <path>;          http: the engine's socket and
 *                                       lease file; default the build's
 *                                       NGX_HTTP_KVSERVE_ENGINE_DIR
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
 *   kvserve_max_messages <n>;           http, server, location: the
 *                                       messages a chat request may
 *                                       carry (2048)
 *   kvserve_prefix_cache on|off;        http: the engines' prefix cache
 *   kvserve_cache_pin_max <size>;       http: KV bytes each cache scope
 *                                       may pin with cache_control
 *   kvserve_tenant <value>;             http, server, location: the
 *                                       request's tenant (a value with
 *                                       variables; empty: none)
 *   kvserve_lora NAME PATH [base=MODEL];  http: a LoRA adapter of MODEL
 *                                       (default: the last kvserve_model
 *                                       before it), model id MODEL:NAME
 *   kvserve_lora_slots <n>;             http: adapters resident at once
 *                                       per model (1..64; default: all)
 *   kvserve_lora_map <value>;           http, server, location: the
 *                                       adapter NAME a request is served
 *                                       under; empty: the base
 *   kvserve_cache_scope global|tenant|<value>;  http, server, location:
 *                                       whose prefix cache a request
 *                                       uses: everyone's, its tenant's
 *                                       (default; without a tenant its
 *                                       location's) or a named group's
 *   kvserve_fair_weights prefill=<N> decode=<N>;  http: the fair
 *                                       share's counter units per token
 *                                       computed (1 and 2)
 *   kvserve_fair_kv_max <fraction>|off; http: the KV cache a tenant may
 *                                       hold while others wait (0.5)
 *   kvserve_max_sequences <n>;          http, server, location: the
 *                                       sequences (prompts x n) one
 *                                       request may ask for (16)
 *   kvserve_request_kv_max <fraction>|off;  http: the KV cache one
 *                                       request (a prompt and its n
 *                                       choices) may hold while others
 *                                       wait (0.25)
 *   kvserve_kv_pool long min_tokens=<N> share=<fraction>
 *       max_prefill=<K> [chunk=<T>];    http: a pool for long requests
 *                                       (docs/pools.md): their KV share,
 *                                       prefills at once, prefill
 *                                       tokens a step
 *   kvserve_queue_timeout <time>|off;   http: how long a request waits
 *                                       to be admitted before 503 with
 *                                       Retry-After (30s)
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

#include "ngx/kvserve/ngx_http_kvserve.h"
#include "backend/kvs_backend.h"
#include "kv/kvs_kv_pool.h"
#include "kv/kvs_kv_size.h"
#include "kv/kvs_kv_share.h"
#include "tokenizer/kvs_chat.h"

#define NGX_HTTP_KVSERVE_BATCH_TOKENS  2048
#define NGX_HTTP_KVSERVE_KV_SEQS       4      /* concurrent sequences of
                                                 full context a model's
                                                 KV need counts */
#define NGX_HTTP_KVSERVE_MAX_BATCH     (1 << 20)
#define NGX_HTTP_KVSERVE_MAX_THREADS   1024
#define NGX_HTTP_KVSERVE_TOK_THRESHOLD  16384
#define NGX_HTTP_KVSERVE_MAX_DEVICE    1023
/* Far above a long agent session (hundreds of turns with tool calls),
 * low enough that one request's parse, render and tokenization stay in
 * milliseconds (t/bench/chat_messages.sh) */
#define NGX_HTTP_KVSERVE_MAX_MESSAGES  2048
#define NGX_HTTP_KVSERVE_MESSAGES_HIGH 1000000

/* kvserve_engine_dir's default, relative to nginx's prefix unless
 * absolute: `config` defines it from KVSERVE_ENGINE_DIR (the Debian
 * package's is /var/lib/nginx/kvserve) */
#ifndef NGX_HTTP_KVSERVE_ENGINE_DIR
#define NGX_HTTP_KVSERVE_ENGINE_DIR    "kvserve_temp"
#endif


static char *ngx_http_kvserve_kv_size(ngx_conf_t *cf,
    ngx_http_kvserve_main_conf_t *kmcf);
static void *ngx_http_kvserve_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_kvserve_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_kvserve_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_kvserve_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_kvserve_init_process(ngx_cycle_t *cycle);
static void ngx_http_kvserve_exit_process(ngx_cycle_t *cycle);


static ngx_http_kvserve_uint_bounds_t  ngx_http_kvserve_kv_block_bounds = {
    1, KVS_KV_MAX_BLOCK_TOKENS, NGX_CONF_UNSET_UINT
};

static ngx_http_kvserve_uint_bounds_t  ngx_http_kvserve_lora_slot_bounds = {
    1, KVS_ENGINE_LORA_SLOTS, NGX_CONF_UNSET_UINT
};

static ngx_http_kvserve_uint_bounds_t  ngx_http_kvserve_batch_bounds = {
    1, NGX_HTTP_KVSERVE_MAX_BATCH, NGX_CONF_UNSET_UINT
};

/* 0 stands for auto: resolved to the online CPUs at init main conf */
static ngx_http_kvserve_uint_bounds_t  ngx_http_kvserve_threads_bounds = {
    1, NGX_HTTP_KVSERVE_MAX_THREADS, 0
};

static ngx_http_kvserve_uint_bounds_t  ngx_http_kvserve_device_bounds = {
    0, NGX_HTTP_KVSERVE_MAX_DEVICE, NGX_CONF_UNSET_UINT
};

static ngx_http_kvserve_uint_bounds_t  ngx_http_kvserve_messages_bounds = {
    1, NGX_HTTP_KVSERVE_MESSAGES_HIGH, NGX_CONF_UNSET_UINT
};


static ngx_command_t  ngx_http_kvserve_commands[] = {

    { ngx_string("kvserve_model"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_2MORE,
      ngx_http_kvserve_model,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_kvserve_enable,
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

    { ngx_string("kvserve_kv_dtype"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_kv_dtype_directive,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_kv_tier"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_2MORE,
      ngx_http_kvserve_kv_tier_directive,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_backend"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_backend,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_device"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_set_uint,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_kvserve_main_conf_t, device),
      &ngx_http_kvserve_device_bounds },

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

    { ngx_string("kvserve_max_messages"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_set_uint,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_kvserve_loc_conf_t, max_messages),
      &ngx_http_kvserve_messages_bounds },

    { ngx_string("kvserve_prefix_cache"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_kvserve_main_conf_t, prefix_cache),
      NULL },

    { ngx_string("kvserve_cache_pin_max"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_cache_pin_max,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_cache_scope"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_cache_scope_directive,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_lora"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE23,
      ngx_http_kvserve_lora_directive,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_lora_slots"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_set_uint,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_kvserve_main_conf_t, lora_slots),
      &ngx_http_kvserve_lora_slot_bounds },

    { ngx_string("kvserve_lora_map"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_lora_map_directive,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_tenant"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_tenant_directive,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_fair_weights"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE12,
      ngx_http_kvserve_fair_weights,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_fair_kv_max"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_set_kv_fraction,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_kvserve_main_conf_t, fair_kv_max_milli),
      NULL },

    { ngx_string("kvserve_max_sequences"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_max_sequences,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_request_kv_max"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_set_kv_fraction,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_kvserve_main_conf_t, req_kv_max_milli),
      NULL },

    { ngx_string("kvserve_kv_pool"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_2MORE,
      ngx_http_kvserve_kv_pool,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_queue_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_queue_timeout,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_status"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_kvserve_status,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_health"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_kvserve_health_directive,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_cors_origins"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_kvserve_cors_origins,
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
    kmcf->prefix_cache = NGX_CONF_UNSET;
    kmcf->pin_max = NGX_CONF_UNSET;
    kmcf->fair_w_prefill = NGX_CONF_UNSET_UINT;
    kmcf->fair_w_decode = NGX_CONF_UNSET_UINT;
    kmcf->fair_kv_max_milli = NGX_CONF_UNSET_UINT;
    kmcf->req_kv_max_milli = NGX_CONF_UNSET_UINT;
    kmcf->pool_min_tokens = NGX_CONF_UNSET_UINT;
    kmcf->queue_timeout = NGX_CONF_UNSET_MSEC;
    kmcf->backend = NGX_CONF_UNSET_UINT;
    kmcf->kv_dtype = NGX_CONF_UNSET_UINT;
    kmcf->device = NGX_CONF_UNSET_UINT;
    kmcf->lora_slots = NGX_CONF_UNSET_UINT;
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
    ngx_conf_init_uint_value(kmcf->backend, KVS_BACKEND_AUTO);
    ngx_conf_init_uint_value(kmcf->device, 0);

    if (ngx_http_kvserve_kv_dtype_check(cf, kmcf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    ngx_conf_init_uint_value(kmcf->lora_slots, 0);

    if (ngx_http_kvserve_lora_check(cf, kmcf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }
    ngx_conf_init_value(kmcf->prefix_cache, 1);
    ngx_conf_init_value(kmcf->pin_max, 0);

    /* kvserve_fair_weights with decode= only leaves prefill 0 */
    if (kmcf->fair_w_prefill == NGX_CONF_UNSET_UINT
        || kmcf->fair_w_prefill == 0)
    {
        kmcf->fair_w_prefill = 1;
    }

    ngx_conf_init_uint_value(kmcf->fair_w_decode, 2);
    ngx_conf_init_uint_value(kmcf->fair_kv_max_milli, 500);
    ngx_conf_init_uint_value(kmcf->req_kv_max_milli,
                             NGX_HTTP_KVSERVE_REQ_KV_MAX);
    ngx_conf_init_msec_value(kmcf->engine_wait, 30000);
    ngx_conf_init_msec_value(kmcf->engine_timeout, 60000);
    ngx_conf_init_msec_value(kmcf->engine_ping, 1000);
    ngx_conf_init_msec_value(kmcf->engine_hang_timeout, 10000);

    if (ngx_http_kvserve_pools_init(cf, kmcf) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

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

        ngx_str_set(&kmcf->engine_dir->name, NGX_HTTP_KVSERVE_ENGINE_DIR);

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

    if (ngx_http_kvserve_kv_size(cf, kmcf) != NGX_CONF_OK
        || ngx_http_kvserve_kv_tier_check(cf, kmcf) != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * Each model's KV cache plan.  A fraction is of what is available once
 * the weights are resident: MemAvailable counts the page cache, where
 * the mapped model files live (or will, once read), so their sizes are
 * taken off first.  A model with kv_cache= has that budget; the others
 * share kvserve_kv_cache's in proportion to their need (bytes per token
 * x context x NGX_HTTP_KVSERVE_KV_SEQS sequences), and with a fraction,
 * a share that cannot hold one full context is raised to one while the
 * available memory holds every budget.  Bytes per token are those of
 * kvserve_kv_dtype's blocks (kvs_kv_layout), f32 (the CPU backend's)
 * when it is not set.
 */
static char *
ngx_http_kvserve_kv_size(ngx_conf_t *cf, ngx_http_kvserve_main_conf_t *kmcf)
{
    char                      *d;
    u_char                     detail[256], how[256], *last;
    uint64_t                   weights, avail, pool, bpt;
    kvs_err_t                  err;
    ngx_uint_t                 i, n, n_shared, need_mem;
    kvs_kv_share_t            *sh;
    const kvs_hparams_t       *hp;
    kvs_kv_cache_spec_t        spec;
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
    need_mem = kmcf->kv_spec.fraction != 0;
    n_shared = 0;

    sh = ngx_pcalloc(cf->pool, n * sizeof(kvs_kv_share_t));
    if (sh == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 0; i < n; i++) {
        hp = &m[i].model->hp;
        weights += m[i].model->file_size;
        need_mem |= m[i].kv_spec.fraction != 0;
        sh[i].own = m[i].kv_cache.len != 0;
        n_shared += !sh[i].own;

        m[i].kv_block = (uint32_t) kmcf->kv_block;
        m[i].kv_dtype_set = kmcf->kv_dtype != NGX_CONF_UNSET_UINT;
        m[i].kv_dtype = kmcf->kv_dtype != NGX_CONF_UNSET_UINT
                        ? (uint32_t) kmcf->kv_dtype
                        : NGX_HTTP_KVSERVE_KV_DTYPE;
        bpt = ngx_http_kvserve_kv_bpt(&m[i]);

        if (kvs_kv_share_need(bpt, hp->n_ctx_train, (uint32_t) kmcf->kv_block,
                              NGX_HTTP_KVSERVE_KV_SEQS, &sh[i].full,
                              &sh[i].need, &err)
            != KVS_OK)
        {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0, "kvserve: model \"%V\": "
                          "%s", &m[i].name, err.msg);
            return NGX_CONF_ERROR;
        }
    }

    last = detail;

    if (need_mem) {
        if (kvs_mem_available(&kmcf->mem_avail, &err) != KVS_OK) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "kvserve: a KV cache fraction needs the available "
                          "memory: %s; set sizes such as 2g instead",
                          err.msg);
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
    }

    *last = '\0';

    /* the models with kv_cache= have it; the others share the pool by
     * need, and with a fraction are raised to one full context while
     * every budget fits in what is available */
    for (i = 0; i < n; i++) {
        if (sh[i].own) {
            sh[i].budget = kvs_kv_cache_budget(&m[i].kv_spec, avail);
        }
    }

    pool = kvs_kv_cache_budget(&kmcf->kv_spec, avail);

    if (kvs_kv_share(sh, n, pool, avail, kmcf->kv_spec.fraction != 0, &err)
        != KVS_OK)
    {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0, "kvserve: %s", err.msg);
        return NGX_CONF_ERROR;
    }

    for (i = 0; i < n; i++) {
        /* CUDA sizes a fraction's pool from the device's memory: this
         * model's part of it */
        if (sh[i].own) {
            m[i].kv_fraction = m[i].kv_spec.fraction;

        } else if (kmcf->kv_spec.fraction != 0) {
            m[i].kv_fraction = sh[i].raised && pool != 0
                               ? ngx_min(1.0, kmcf->kv_spec.fraction
                                              * (double) sh[i].budget
                                              / (double) pool)
                               : kmcf->kv_spec.fraction * sh[i].part;
        }
    }

    for (i = 0; i < n; i++) {
        hp = &m[i].model->hp;
        bpt = ngx_http_kvserve_kv_bpt(&m[i]);

        /* how the budget was chosen, after the detail of a fraction */
        d = (m[i].kv_cache.len ? m[i].kv_spec.fraction
                               : kmcf->kv_spec.fraction) != 0
            ? (char *) detail : "";
        last = how;

        if (m[i].kv_cache.len == 0 && n_shared > 1) {
            last = ngx_snprintf(how, sizeof(how) - 1,
                                ", %.1f%% of it by need (%s/token x %uD "
                                "tokens x %d sequences)",
                                100.0 * sh[i].part,
                                kvs_size_format(s_bpt, sizeof(s_bpt), bpt),
                                hp->n_ctx_train, NGX_HTTP_KVSERVE_KV_SEQS);
        }

        if (sh[i].raised) {
            last = ngx_snprintf(last, how + sizeof(how) - 1 - last,
                                ", raised to one full context");
        }

        *last = '\0';

        spec.bytes = sh[i].budget;
        spec.fraction = 0;

        if (sh[i].budget == 0) {
            kvs_err_set(&err, KVS_ERANGE, "kv cache: a share of 0 bytes");
        }

        if (sh[i].budget == 0
            || kvs_kv_cache_plan(&m[i].kv_plan, &spec, avail, bpt,
                                 (uint32_t) kmcf->kv_block, hp->n_ctx_train,
                                 &err)
               != KVS_OK)
        {
            if (m[i].kv_cache.len != 0) {
                ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                              "kvserve_model \"%V\": kv_cache=%V%s is too "
                              "small: %s", &m[i].name, &m[i].kv_cache,
                              d, err.msg);
            } else {
                ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                              "kvserve_kv_cache \"%V\"%s%s is too small for "
                              "model \"%V\": %s", &kmcf->kv_cache, d,
                              how, &m[i].name, err.msg);
            }
            return NGX_CONF_ERROR;
        }

        ngx_log_error(NGX_LOG_NOTICE, cf->log, 0,
                      "kvserve: model \"%V\": KV cache %s = %uD blocks x %uD "
                      "tokens (%uL tokens, %s/token), from %s%V%s%s",
                      &m[i].name,
                      kvs_size_format(s_bytes, sizeof(s_bytes),
                                      m[i].kv_plan.bytes),
                      m[i].kv_plan.n_blocks, m[i].kv_plan.block_tokens,
                      m[i].kv_plan.tokens,
                      kvs_size_format(s_bpt, sizeof(s_bpt), bpt),
                      m[i].kv_cache.len ? "kv_cache=" : "kvserve_kv_cache ",
                      m[i].kv_cache.len ? &m[i].kv_cache : &kmcf->kv_cache,
                      d, how);

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
    klcf->cache_share = NGX_CONF_UNSET_UINT;
    klcf->tenant = NGX_CONF_UNSET_PTR;
    klcf->lora_map = NGX_CONF_UNSET_PTR;
    klcf->max_messages = NGX_CONF_UNSET_UINT;
    klcf->max_sequences = NGX_CONF_UNSET_UINT;
    klcf->health = NGX_CONF_UNSET;
    klcf->cors = NGX_CONF_UNSET_PTR;

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
    ngx_conf_merge_value(conf->health, prev->health, 0);
    ngx_conf_merge_ptr_value(conf->cors, prev->cors, NULL);
    ngx_conf_merge_value(conf->chat_template, prev->chat_template,
                         NGX_CONF_UNSET);
    ngx_conf_merge_size_value(conf->tokenize_threshold,
                              prev->tokenize_threshold,
                              NGX_HTTP_KVSERVE_TOK_THRESHOLD);
    ngx_conf_merge_ptr_value(conf->tokenize_pool, prev->tokenize_pool,
                             NGX_CONF_UNSET_PTR);
    if (conf->cache_share == NGX_CONF_UNSET_UINT) {
        conf->cache_share = prev->cache_share;
        conf->cache_scope = prev->cache_scope;
    }

    if (conf->cache_share == NGX_CONF_UNSET_UINT) {
        conf->cache_share = NGX_HTTP_KVSERVE_SCOPE_TENANT;
    }

    ngx_conf_merge_ptr_value(conf->tenant, prev->tenant, NULL);
    ngx_conf_merge_ptr_value(conf->lora_map, prev->lora_map, NULL);
    ngx_conf_merge_uint_value(conf->max_messages, prev->max_messages,
                              NGX_HTTP_KVSERVE_MAX_MESSAGES);
    ngx_conf_merge_uint_value(conf->max_sequences, prev->max_sequences,
                              NGX_HTTP_KVSERVE_SEQS);

    /* resolved only where kvserve serves: a server or http level left
     * unset must not turn the default off for the locations below it */
    if (conf->enable == 1) {
        return ngx_http_kvserve_tokenize_pool_default(cf, conf);
    }

    return NGX_CONF_OK;
}


/*
 * Workers never touch CUDA: the engine process chooses the backend
 * (kvserve_backend), loads it and logs which one serves and why.
 */
static ngx_int_t
ngx_http_kvserve_init_process(ngx_cycle_t *cycle)
{
    ngx_http_kvserve_main_conf_t  *kmcf;

    kmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_kvserve_module);

    if (kmcf == NULL || kmcf->models->nelts == 0) {
        return NGX_OK;
    }

    if (ngx_http_kvserve_engine_init_process(cycle) != NGX_OK) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


static void
ngx_http_kvserve_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_kvserve_engine_exit_process(cycle);
}
