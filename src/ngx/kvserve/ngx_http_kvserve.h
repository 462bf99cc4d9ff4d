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

#include "metrics/kvs_metrics.h"
#include "kv/kvs_kv_size.h"
#include "kv/kvs_kv_layout.h"
#include "model/kvs_model.h"
#include "engine/kvs_engine.h"
#include "wire/kvs_wire.h"
#include "tokenizer/kvs_chat.h"
#include "tokenizer/kvs_chat_jinja.h"
#include "tokenizer/kvs_vocab.h"
#include "api/kvs_tool_parse.h"

/* The K/V dtype of the CPU backend's pool when kvserve_kv_dtype is not
 * set: f32, as kvs_cpu computes.  The KV cache plan made at
 * configuration time (before any engine says which backend it runs)
 * uses the configured dtype, or this one; /v1/models' kv_bytes_per_token
 * and kv_rate's charges use the dtype of the backend serving the model,
 * which the engine's HELLO says (ngx_http_kvserve_kv_bpt), and the
 * configured one only until a HELLO came. */
#define NGX_HTTP_KVSERVE_KV_DTYPE      KVS_KV_F32

#define NGX_HTTP_KVSERVE_FAIR_W_MAX    1000   /* kvserve_fair_weights */
#define NGX_HTTP_KVSERVE_MAX_SEQS      16384  /* kvserve_max_sequences: the
                                                 parser's 128 prompts x
                                                 128 choices */
#define NGX_HTTP_KVSERVE_SEQS          16     /* ... its default */
#define NGX_HTTP_KVSERVE_TEMPLATE_MAX  1048576  /* a chat_template= file,
                                                   bytes */
#define NGX_HTTP_KVSERVE_QUEUE_TIMEOUT  30000  /* kvserve_queue_timeout's
                                                  default, ms */
#define NGX_HTTP_KVSERVE_REQ_KV_MAX    250    /* kvserve_request_kv_max's
                                                 default, thousandths */

/* kvserve_cache_scope: whose prefix cache a request reads and writes */
#define NGX_HTTP_KVSERVE_SCOPE_TENANT  0      /* the default: its tenant's;
                                                 without one, its
                                                 location's */
#define NGX_HTTP_KVSERVE_SCOPE_GLOBAL  1      /* one for everyone */
#define NGX_HTTP_KVSERVE_SCOPE_VALUE   2      /* a named group, the value;
                                                 empty: as SCOPE_TENANT */


/* kvserve_kv_tier disk PATH SIZE [model=NAME] or host SIZE [model=NAME]
 * (ngx_http_kvserve_tier.c) */
typedef struct {
    ngx_flag_t                host;        /* host memory, not a file */
    ngx_str_t                 path;        /* disk: absolute file name */
    off_t                     size;        /* bytes at most */
    ngx_str_t                 model;       /* model=; len 0: the one model
                                              served */
    ngx_flag_t                load_always; /* load=always: whatever the
                                              cost model says */
    u_char                   *file;        /* where it was written, for */
    ngx_uint_t                line;        /* nginx -t's messages */
} ngx_http_kvserve_tier_t;
/* A LoRA adapter of a model (kvserve_lora, ngx_http_kvserve_lora.c):
 * checked against its base when the configuration is read, opened again
 * by the base's engine process. */
typedef struct {
    ngx_str_t                 name;        /* NAME; the API's id is
                                              BASE:NAME */
    ngx_str_t                 id;          /* "BASE:NAME" */
    u_char                   *path;        /* absolute, NUL-ended */
    uint32_t                  adapter;     /* the engine's id, 1.. */
    uint32_t                  rank_max;
    uint64_t                  epoch;       /* xxh3-64 of the file */
} ngx_http_kvserve_lora_t;


typedef struct {
    ngx_str_t                 name;        /* the API's model id */
    ngx_str_t                 path;        /* absolute file name */
    kvs_model_t              *model;
    ngx_array_t              *loras;       /* ngx_http_kvserve_lora_t,
                                              adapter i + 1 at [i];
                                              NULL: none */
    kvs_vocab_t              *vocab;       /* its tokenizer */
    kvs_chat_t                chat;        /* its chat template, if */
    ngx_flag_t                has_chat;    /* it has one: chat_template=,
                                              or its own (Jinja) */
    ngx_flag_t                chat_fixed;  /* chat_template= chose it:
                                              kvserve_chat_template does
                                              not override it */
    kvs_chat_jinja_t         *jinja;       /* the compiled template chat
                                              points to, if any (freed
                                              with the cycle's pool) */
    uint64_t                  key;         /* FNV-1a 64 of the name: its
                                              engine's socket and lock are
                                              m-<key hex>; unique among
                                              the models (checked) */
    kvs_tool_syntax_t         tool_syntax; /* the tool-call syntax that
                                              template teaches
                                              (kvs_tool_syntax_detect) */
    uint32_t                  kv_dtype;    /* kvserve_kv_dtype, or
                                              NGX_HTTP_KVSERVE_KV_DTYPE:
                                              what kv_plan is sized in */
    uint32_t                  kv_dtype_set;  /* kvserve_kv_dtype was
                                                set: an engine caching
                                                in another dtype is
                                                drained (a reload) */
    uint32_t                  kv_block;    /* kvserve_kv_block */
    kvs_kv_cache_plan_t       kv_plan;     /* its KV cache: n_blocks of
                                              kvserve_kv_block tokens,
                                              sized at init_main_conf */
    ngx_str_t                 kv_cache;    /* kv_cache= as written; len
                                              0: a share of
                                              kvserve_kv_cache */
    kvs_kv_cache_spec_t       kv_spec;     /* ... parsed */
    ngx_http_kvserve_tier_t  *tier;        /* its disk tier; NULL: none */
    ngx_http_kvserve_tier_t  *thost;       /* its host tier; NULL: none */
    uint64_t                  tier_tag;    /* xxh3-64 of its name: a tier
                                              file of another model is
                                              discarded */
    double                    kv_fraction; /* of the device's memory on
                                              CUDA: this model's part of
                                              a fraction budget, 0 for a
                                              size */
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
    ngx_uint_t                kv_dtype;    /* kvserve_kv_dtype: a
                                              kvs_kv_dtype_t, or unset:
                                              each backend's own */
    ngx_uint_t                max_batch_tokens;  /* per engine step */
    ngx_uint_t                threads;     /* as set; 0: auto */
    ngx_uint_t                n_threads;   /* resolved: >= 1 */
    ngx_flag_t                prefix_cache;    /* kvserve_prefix_cache */
    off_t                     pin_max;     /* kvserve_cache_pin_max: KV
                                              bytes each cache scope may
                                              pin; 0: the engine's
                                              default */
    ngx_uint_t                fair_w_prefill;  /* kvserve_fair_weights: */
    ngx_uint_t                fair_w_decode;   /* 1..1000 per token */
    ngx_uint_t                fair_kv_max_milli;   /* kvserve_fair_kv_max
                                                  in thousandths of the
                                                  KV cache; 0: off */
    ngx_uint_t                req_kv_max_milli;    /* kvserve_request_
                                                  kv_max, likewise */
    ngx_uint_t                pool_min_tokens;     /* kvserve_kv_pool long
                                                  min_tokens=; 0: no
                                                  pools */
    ngx_uint_t                pool_share_milli;    /* share=, thousandths */
    ngx_uint_t                pool_max_prefill;    /* max_prefill= */
    ngx_uint_t                pool_chunk;          /* chunk=; 0: a step */
    ngx_msec_t                queue_timeout;       /* kvserve_queue_
                                                  timeout; 0: off */
    ngx_uint_t                backend;     /* kvserve_backend: a
                                              kvs_backend_kind_t, chosen
                                              in the engine process */
    ngx_uint_t                device;      /* kvserve_device: CUDA
                                              ordinal */
    ngx_array_t              *tiers;       /* ngx_http_kvserve_tier_t;
                                              NULL: none */
    ngx_uint_t                lora_slots;  /* kvserve_lora_slots: LoRA
                                              adapters resident at once
                                              per model; 0: all */

    /* the engine process (ngx_http_kvserve_engine.c) */
    ngx_path_t               *engine_dir;  /* kvserve_engine_dir: socket
                                              and lease file */
    ngx_msec_t                engine_wait; /* a request waits this long
                                              for an engine, then 503 */
    ngx_msec_t                engine_timeout;  /* no output from the
                                                  engine for this long:
                                                  the request fails */
    ngx_msec_t                engine_ping; /* watchdog PING interval; 0:
                                              no watchdog */
    ngx_msec_t                engine_hang_timeout;  /* nothing from the
                                                       engine for this
                                                       long: SIGKILL */

    /* kvserve_metrics (ngx_http_kvserve_metrics.c) */
    ngx_shm_zone_t           *metrics_zone;  /* kvs_metrics_t, every
                                                worker's requests */
    const char              **metrics_names; /* [models], NUL-ended */
    uint32_t                 *metrics_lens;  /* [models]: contexts, for
                                                the token buckets */
} ngx_http_kvserve_main_conf_t;


typedef struct {
    ngx_flag_t                enable;      /* this location serves the API */
    ngx_int_t                 chat_template;  /* kvs_chat_kind_t, or
                                                 NGX_CONF_UNSET: the one
                                                 recognised in the model */
    ngx_flag_t                status;      /* kvserve_status: the engine's
                                              stats as JSON */
    ngx_flag_t                metrics;     /* kvserve_metrics: Prometheus
                                              text */
    void                     *tokenize_pool;  /* kvserve_tokenize_threads:
                                                 an ngx_thread_pool_t, NULL
                                                 for off; NGX_CONF_UNSET_PTR
                                                 outside kvserve locations
                                                 that set nothing */
    size_t                    tokenize_threshold;  /* prompt text bytes
                                                      over which it is
                                                      tokenized in the
                                                      pool */
    ngx_uint_t                cache_share; /* kvserve_cache_scope:
                                              NGX_HTTP_KVSERVE_SCOPE_* */
    ngx_http_complex_value_t *cache_scope; /* its value (SCOPE_VALUE) */
    ngx_http_complex_value_t *tenant;      /* kvserve_tenant; NULL: none */
    ngx_http_complex_value_t *lora_map;    /* kvserve_lora_map: the
                                              adapter NAME a request is
                                              served under; NULL: none */
    ngx_uint_t                max_messages;  /* kvserve_max_messages: a
                                                chat request's messages */
    ngx_flag_t                json_errors; /* server level only: a
                                              location of this server
                                              serves the API, so nginx's
                                              own error pages answered
                                              before any location is
                                              chosen are JSON; not
                                              merged */
    ngx_uint_t                max_sequences;  /* kvserve_max_sequences:
                                                 prompts x n a request
                                                 may ask for */
    ngx_flag_t                health;      /* kvserve_health: 200 when
                                              every model's engine is
                                              ready, else 503 and why */
    ngx_array_t              *cors;        /* kvserve_cors_origins:
                                              ngx_str_t origins ("*":
                                              any); NULL: off;
                                              NGX_CONF_UNSET_PTR until
                                              merged */
} ngx_http_kvserve_loc_conf_t;


/* A completion request's figures, for the variables. */
typedef struct {
    kvs_req_times_t           t;
    ngx_str_t                 model;       /* len 0: not known */
    uint32_t                  prompt_tokens;
    uint32_t                  completion_tokens;
    uint32_t                  cached_tokens;   /* from the prefix cache */
    ngx_int_t                 cache_miss;  /* kvs_radix_miss_t, -1: not
                                              known */
    uint32_t                  cache_miss_pos;
    ngx_int_t                 reason;      /* kvs_reason_t, or -1 while
                                              it has none */
    uint64_t                  kv_block_us; /* the engine's count of the
                                              KV held, all choices */
    unsigned                  kv_counted:1;   /* a count came */
    unsigned                  submitted:1; /* reached the engine side */
} ngx_http_kvserve_req_info_t;


/*
 * A message to the engine, and whoever waits for its answers: one SUBMIT
 * (a completion's prompt) or one STATS.  The engine side owns id and
 * queue; the owner sets the rest and keeps the struct alive until it
 * calls ngx_http_kvserve_engine_forget().
 */
typedef struct ngx_http_kvserve_sub_s  ngx_http_kvserve_sub_t;

/* a STATS for every model's engine: one answer, the replies merged */
#define NGX_HTTP_KVSERVE_ALL           ((ngx_uint_t) -1)

typedef enum {
    NGX_HTTP_KVSERVE_EV_OUT = 0,           /* msg: kvs_wire_out_t */
    NGX_HTTP_KVSERVE_EV_REFUSED,           /* msg: kvs_wire_refused_t */
    NGX_HTTP_KVSERVE_EV_STATS,             /* msg: kvs_wire_stats_t */
    NGX_HTTP_KVSERVE_EV_LOST               /* msg: NULL; the engine went
                                              away with it: no answer will
                                              come; send it again or give
                                              up */
} ngx_http_kvserve_ev_e;

typedef void (*ngx_http_kvserve_sub_handler_pt)(ngx_http_kvserve_sub_t *s,
    ngx_uint_t ev, void *msg);

struct ngx_http_kvserve_sub_s {
    uint64_t                  id;          /* 0: not with the engine */
    ngx_queue_t               queue;       /* waiting for an engine */
    unsigned                  waiting:1;
    unsigned                  done:1;      /* set by the owner: every
                                              choice ended, forget() sends
                                              no CANCEL */

    ngx_uint_t                model;       /* the engine: its model's
                                              index in kvserve_model's
                                              order; STATS may name
                                              NGX_HTTP_KVSERVE_ALL */
    ngx_uint_t                type;        /* KVS_WIRE_SUBMIT, _STATS */
    u_char                   *frame;       /* SUBMIT: the whole frame, its
                                              id patched at each send */
    size_t                    frame_len;
    ngx_http_kvserve_sub_handler_pt  handler;
    void                     *data;
};


/* Bounds of a number directive; auto_value is stored for "auto", which
 * is refused when it is NGX_CONF_UNSET_UINT. */
typedef struct {
    ngx_uint_t  low;
    ngx_uint_t  high;
    ngx_uint_t  auto_value;
} ngx_http_kvserve_uint_bounds_t;


extern ngx_module_t  ngx_http_kvserve_module;

/* the directives' handlers (ngx_http_kvserve_conf.c) */
char *ngx_http_kvserve_model(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_kvserve_enable(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_kvserve_chat_template(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_kvserve_kv_tier_directive(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
/* Gives each model its tier, and refuses what its engine would refuse
 * (once the models' KV blocks are known). */
ngx_int_t ngx_http_kvserve_kv_tier_check(ngx_conf_t *cf,
    ngx_http_kvserve_main_conf_t *kmcf);
char *ngx_http_kvserve_kv_dtype_directive(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
ngx_int_t ngx_http_kvserve_kv_dtype_check(ngx_conf_t *cf,
    ngx_http_kvserve_main_conf_t *kmcf);
char *ngx_http_kvserve_kv_cache(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
/* kvserve_lora, kvserve_lora_map (ngx_http_kvserve_lora.c) */
char *ngx_http_kvserve_lora_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_kvserve_lora_map_directive(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
/* The adapter of model id "BASE:NAME" (id[len]), its base's index in
 * *base; NULL when no adapter has that id. */
ngx_http_kvserve_lora_t *ngx_http_kvserve_lora_find(
    ngx_http_kvserve_main_conf_t *kmcf, const char *id, size_t len,
    ngx_uint_t *base);
/* The engine process's adapter files of m, into conf (malloc'ed: the
 * engine process's own, it exits with them). */
ngx_int_t ngx_http_kvserve_lora_paths(ngx_http_kvserve_model_t *m,
    kvs_engine_conf_t *conf);
/* After a HELLO this worker accepted: the LORA frame naming m's adapter
 * files in the order of their ids, appended to b (nothing when m has
 * none), so a kept engine maps this connection's ids to these files. */
ngx_int_t ngx_http_kvserve_lora_frame(ngx_http_kvserve_model_t *m,
    kvs_buf_t *b, kvs_err_t *err);
/* init main conf: a model with more adapters than an engine holds at
 * once needs kvserve_lora_slots */
ngx_int_t ngx_http_kvserve_lora_check(ngx_conf_t *cf,
    ngx_http_kvserve_main_conf_t *kmcf);
/* "invalid value "V" in "D" directive, <must>": NGX_CONF_ERROR */
char *ngx_http_kvserve_conf_invalid(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *value, const char *must);
/* *cvp: value compiled as a string with variables; an empty value is
 * refused with must */
char *ngx_http_kvserve_conf_complex(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *value, const char *must, ngx_http_complex_value_t **cvp);
/* cmd->post: an ngx_http_kvserve_uint_bounds_t */
char *ngx_http_kvserve_set_uint(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_kvserve_status(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_kvserve_metrics_directive(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
char *ngx_http_kvserve_tokenize_threads(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_kvserve_tokenize_threshold(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
/* merge: nginx's "default" pool where a location that tokenizes set
 * none */
char *ngx_http_kvserve_tokenize_pool_default(ngx_conf_t *cf,
    ngx_http_kvserve_loc_conf_t *klcf);
char *ngx_http_kvserve_fair_weights(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_kvserve_set_kv_fraction(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_kvserve_parse_milli(ngx_str_t *v, ngx_uint_t *milli);
char *ngx_http_kvserve_kv_pool(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_kvserve_queue_timeout(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_kvserve_pools_init(ngx_conf_t *cf,
    ngx_http_kvserve_main_conf_t *kmcf);
char *ngx_http_kvserve_max_sequences(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_kvserve_backend(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
/* (ngx_http_kvserve_tenant.c) */
char *ngx_http_kvserve_tenant_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
/* preconfiguration: $kvserve_tenant */
ngx_int_t ngx_http_kvserve_tenant_add_variables(ngx_conf_t *cf);
/* (ngx_http_kvserve_cache.c) */
char *ngx_http_kvserve_cache_scope_directive(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
char *ngx_http_kvserve_cache_pin_max(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
/* "diverged:812": the miss reason's name, and its position if any */
ngx_int_t ngx_http_kvserve_cache_miss_text(ngx_http_request_t *r,
    ngx_int_t miss, uint32_t pos, ngx_str_t *s);

/* kvserve_health, and /health in kvserve locations
 * (ngx_http_kvserve_health.c) */
char *ngx_http_kvserve_health_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_kvserve_health_handler(ngx_http_request_t *r);

/* kvserve_cors_origins: the directive, the header filter that adds
 * Access-Control-Allow-Origin, and the preflight answer: NGX_DECLINED
 * when r is not a CORS preflight of a location with origins set, else
 * the handler's return (ngx_http_kvserve_cors.c) */
char *ngx_http_kvserve_cors_origins(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_kvserve_cors_init(ngx_conf_t *cf);
ngx_int_t ngx_http_kvserve_cors_preflight(ngx_http_request_t *r);

/* the content handler of kvserve locations (ngx_http_kvserve_handler.c;
 * the requests' own files are ngx_http_kvserve_request.h's) */
ngx_int_t ngx_http_kvserve_handler(ngx_http_request_t *r);

/* kvserve_status and the 413 filter (ngx_http_kvserve_status.c) */
ngx_int_t ngx_http_kvserve_status_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_kvserve_filter_init(ngx_conf_t *cf);

/* NGX_OK with *info filled for a completion request, else
 * NGX_DECLINED */
ngx_int_t ngx_http_kvserve_req_info(ngx_http_request_t *r,
    ngx_http_kvserve_req_info_t *info);

/* timing and metrics (ngx_http_kvserve_metrics.c) */
ngx_int_t ngx_http_kvserve_add_variables(ngx_conf_t *cf);
/* Adds every variable of vars (ended by ngx_http_null_variable): name,
 * flags, get_handler and data as given. */
ngx_int_t ngx_http_kvserve_add_vars(ngx_conf_t *cf, ngx_http_variable_t *vars);
char *ngx_http_kvserve_metrics_zone(ngx_conf_t *cf,
    ngx_http_kvserve_main_conf_t *kmcf);
/* The zone's counters, or NULL when there is none (no model). */
kvs_metrics_t *ngx_http_kvserve_metrics(ngx_http_request_t *r);
ngx_int_t ngx_http_kvserve_metrics_handler(ngx_http_request_t *r);

/* the engine process, from the worker's side
 * (ngx_http_kvserve_engine.c, ngx_http_kvserve_spawn.c) */
ngx_int_t ngx_http_kvserve_engine_init_process(ngx_cycle_t *cycle);
void ngx_http_kvserve_engine_exit_process(ngx_cycle_t *cycle);
/* Sends s now, or queues it until an engine is there. */
ngx_int_t ngx_http_kvserve_engine_send(ngx_http_kvserve_sub_t *s);
/* The owner is done with s: CANCEL if the engine has it, unqueued. */
void ngx_http_kvserve_engine_forget(ngx_http_kvserve_sub_t *s);
/* Some model's engine, ready (the first model's when it is), or NULL
 * while none is. */
const kvs_wire_hello_t *ngx_http_kvserve_engine_hello(void);
/* Model i's engine (i in kvserve_model's order), or NULL while it is not
 * ready. */
const kvs_wire_hello_t *ngx_http_kvserve_engine_hello_of(ngx_uint_t i);
/* NGX_OK when model i's engine is ready, else NGX_DECLINED with *why
 * set to the reason (the worker's memory, valid until its next event). */
ngx_int_t ngx_http_kvserve_engine_available(ngx_uint_t i, ngx_str_t *why);
/* That engine's HELLO entry of model m (backend, K/V element, weights'
 * bytes), or NULL while none is connected. */
const kvs_wire_model_t *ngx_http_kvserve_engine_model(
    const ngx_http_kvserve_model_t *m);
/* The dtype of m's serving K/V cache: the engine's answer, else the
 * configured one (m->kv_dtype). */
uint32_t ngx_http_kvserve_kv_dtype(const ngx_http_kvserve_model_t *m);
/* Bytes one token of m takes in that cache, scales included
 * (kvs_kv_bytes_per_token). */
uint64_t ngx_http_kvserve_kv_bpt(const ngx_http_kvserve_model_t *m);

#endif /* NGX_HTTP_KVSERVE_H */
