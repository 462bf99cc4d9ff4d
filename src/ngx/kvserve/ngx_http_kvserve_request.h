/*
 * ngx_http_kvserve_request.h: a kvserve request's context (a completion,
 * or a kvserve_status request) and the request core that every phase of
 * it calls, below them all.
 *
 * The files of a request, each calling only files below it:
 *
 *   ngx_http_kvserve_handler.c      the content handler: routes to the
 *                                   endpoints (ngx_http_kvserve.h);
 *   ngx_http_kvserve_completions.c  the phases of a completion
 *   ngx_http_kvserve_tokenize.c     (ngx_http_kvserve_completions.h):
 *   ngx_http_kvserve_limit_admit.c  read and prepare, render and
 *   ngx_http_kvserve_answers.c      tokenize, admit (kvserve_limit),
 *                                   submit, answer the engine's events;
 *                                   kvserve_status (_status.c) and
 *                                   kvserve_route (src/ngx/route) use
 *                                   the same context;
 *   ngx_http_kvserve_request.c      the core (here): the context's
 *                                   lifetime and timer, sending JSON and
 *                                   SSE, failing and finishing;
 *
 * and below them all what the core and the phases use: timings and
 * metrics (ngx_http_kvserve_timing.c, _metrics.c), the engine process
 * (_engine.c), the request's tenant (_tenant.c) and the prefix cache
 * (_cache.c).
 *
 * Invariants of the context (ngx_http_kvserve_ctx_t):
 *  - it lives in the request's pool and its pool cleanup forgets every
 *    part (CANCEL when still running) and the stats message, and records
 *    a completion that reached the engine side;
 *  - ctx->t is stamped on CLOCK_MONOTONIC (kvs_now_ns());
 *  - while ctx->tok's task runs in a pool thread, the event loop touches
 *    neither the job nor the request's parsed tree;
 *  - once ctx->finished is set nothing more is sent: finish() runs once.
 */

#ifndef NGX_HTTP_KVSERVE_REQUEST_H
#define NGX_HTTP_KVSERVE_REQUEST_H

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve.h"
#include "api/kvs_api.h"
#include "api/kvs_api_msg.h"
#include "api/kvs_api_req.h"
#include "api/kvs_api_resp.h"
#include "api/kvs_tool_stream.h"
#include "base/kvs_clock.h"


typedef struct ngx_http_kvserve_ctx_s     ngx_http_kvserve_ctx_t;
typedef struct ngx_http_kvserve_tok_job_s ngx_http_kvserve_tok_job_t;

typedef struct {
    kvs_buf_t                 text;        /* non-streaming, or streaming
                                              with tool calls possible:
                                              all of it */
    size_t                    sent;        /* streaming with tool calls:
                                              text's bytes sent as
                                              content */
    kvs_tool_stream_t         ts;          /* ... and the calls read so
                                              far (ts_on) */
    kvs_sample_logprobs_t    *lp;          /* [n_lp], non-streaming */
    size_t                    n_lp;
    size_t                    lp_cap;
    kvs_api_textpos_t         pos;         /* completions logprobs */
    kvs_finish_t              finish;
    uint32_t                  n_generated;
    uint32_t                  n_seen;      /* n_generated so far: tokens
                                              sampled, an end token
                                              included */
    uint64_t                  last_ns;     /* its last token came */
    uint64_t                  kv_block_us; /* the engine's count of the
                                              KV it held (OUT's, the
                                              latest) */
    kvs_buf_t                 msg_full;    /* anthropic with stop
                                              sequences: its tokens' text
                                              (stops not cut) */
    size_t                    msg_out;     /* ... and its output's bytes */
    unsigned                  started:1;
    unsigned                  ended:1;
    unsigned                  ts_on:1;
} ngx_http_kvserve_choice_t;

typedef struct {
    ngx_http_kvserve_sub_t    sub;
    ngx_http_kvserve_ctx_t   *ctx;
    ngx_uint_t                index;       /* the prompt's */
    ngx_uint_t                n_ended;     /* of its n choices */
    int32_t                  *ids;         /* [n_ids], pool */
    size_t                    n_ids;
    uint64_t                  reserved;    /* output tokens its n choices
                                              may generate (its budget,
                                              kvs_api_budget), which
                                              kvserve_limit reserves */
    unsigned                  has_cache:1; /* its cache figures came */
    unsigned                  filtered:1;  /* a guard stopped a choice:
                                              CANCEL when its last ends */
} ngx_http_kvserve_part_t;

#define NGX_HTTP_KVSERVE_TOK_INLINE  1
#define NGX_HTTP_KVSERVE_TOK_POOL    2

struct ngx_http_kvserve_ctx_s {
    ngx_http_request_t       *r;
    kvs_api_req_t             req;
    ngx_http_kvserve_model_t *model;
    ngx_uint_t                model_index;
    ngx_http_kvserve_lora_t  *lora;        /* the adapter it is served
                                              under; NULL: the base */

    kvs_api_resp_head_t       head;
    char                      id[KVS_API_RESP_ID_MAX];

    ngx_http_kvserve_part_t  *parts;       /* [n_parts] */
    ngx_uint_t                n_parts;
    ngx_http_kvserve_choice_t  *choices;   /* [n_parts * req.n] */
    ngx_uint_t                n_choices;
    ngx_uint_t                n_ended;
    uint32_t                  prompt_tokens;
    uint64_t                  preempted;   /* of the choices that ended */
    uint64_t                  kv_block_us; /* over the choices: the KV
                                              they held, as the engine
                                              counted (kv_rate) */
    uint64_t                  kv_ns;       /* the engine's stamp of the
                                              latest frame counting it;
                                              0: none came */
    ngx_uint_t                kv_done;     /* choices whose last frame
                                              (with a finish) came */
    ngx_int_t                 reason;      /* kvs_reason_t, once recorded */

    kvs_req_times_t           t;           /* the hops */

    ngx_http_kvserve_tok_job_t  *tok;      /* set by prepare */
    ngx_uint_t                tok_where;   /* NGX_HTTP_KVSERVE_TOK_*, 0:
                                              not tokenized */

    ngx_http_kvserve_sub_t    stats;       /* kvserve_status */

    ngx_str_t                 cache_scope; /* hashed; len 0: global */
    ngx_str_t                 tenant_id;   /* kvserve_tenant's, hashed;
                                              len 0: none */
    ngx_str_t                 tenant;      /* the fair share's: tenant_id,
                                              else the hashed key of the
                                              first kvserve_limit zone,
                                              else of the client address;
                                              len 0: none */
    uint32_t                  cached_tokens;   /* over the parts: prompt
                                                  tokens from the prefix
                                                  cache, */
    uint32_t                  cached_tier;     /* of those, loaded from
                                                  the disk tier, */
    uint32_t                  cached_host;     /* ... copied in from the
                                                  host tier, */
    uint32_t                  cache_created;   /* cached for the pins, */
    uint32_t                  cache_queried;   /* looked up */
    ngx_int_t                 cache_miss;  /* kvs_radix_miss_t of the
                                              first prompt, -1: none */
    uint32_t                  cache_miss_pos;

    kvs_buf_t                 out;         /* the next event or body */
    ngx_str_t                 error_body;  /* json_error: in r->pool */
    ngx_chain_t              *free;
    ngx_chain_t              *busy;

    ngx_event_t               timer;       /* data: r->connection */

    kvs_api_msg_stream_t      msg;         /* anthropic, streaming: the
                                              events' state */
    int                       msg_stop;    /* anthropic: the stop
                                              sequence that ended the
                                              output, -1 none */

    unsigned                  chat:1;
    unsigned                  stream:1;
    unsigned                  header_sent:1;
    unsigned                  got_output:1;
    unsigned                  finished:1;
    unsigned                  json_error:1;  /* nginx's own error page,
                                                rewritten as JSON */
    unsigned                  json_error_sent:1;
    unsigned                  completion:1; /* a completions request */
    unsigned                  failed:1;     /* ended by a server error */
    unsigned                  refused:1;    /* the engine refused it */
    unsigned                  recorded:1;   /* in the shared metrics */
    unsigned                  trailers:1;   /* Server-Timing trailer */
    unsigned                  anthropic:1;  /* /v1/messages: Anthropic's
                                               shapes (kvs_api_msg.h) */
    unsigned                  count_only:1; /* .../count_tokens: the
                                               prompt's tokens, no
                                               generation */
};



/*
 * ---- the core (ngx_http_kvserve_request.c) --------------------------------
 *
 * Called by every file above it; calls none of them.
 */

/* A request's context, its pool cleanup and its timer (handler: the
 * timeout below, or kvserve_route's own). */
ngx_http_kvserve_ctx_t *ngx_http_kvserve_ctx_new(ngx_http_request_t *r,
    ngx_event_handler_pt timer);
void ngx_http_kvserve_timer_arm(ngx_http_kvserve_ctx_t *ctx, ngx_msec_t ms);
/* The request timer: no engine within kvserve_engine_wait (503), or no
 * output within kvserve_engine_timeout (504). */
void ngx_http_kvserve_timeout(ngx_event_t *ev);

/* A failure, as a JSON error before the header or an SSE error event
 * after it; the request ends. */
/* 503 naming ctx's model and why its engine is not there */
void ngx_http_kvserve_fail_unavailable(ngx_http_kvserve_ctx_t *ctx);
/* Not admitted within kvserve_queue_timeout: 503 with the engine's
 * Retry-After (ngx_http_kvserve_pools.c). */
void ngx_http_kvserve_fail_busy(ngx_http_kvserve_ctx_t *ctx,
    const kvs_engine_out_t *o);
void ngx_http_kvserve_fail(ngx_http_kvserve_ctx_t *ctx, ngx_uint_t status,
    const char *message, const char *type, const char *code);
/* Ends the request: every part forgotten, the timer gone, finalized
 * with rc; once. */
void ngx_http_kvserve_finish(ngx_http_kvserve_ctx_t *ctx, ngx_int_t rc);
/* The write handler of a request waiting for the engine. */
void ngx_http_kvserve_write_handler(ngx_http_request_t *r);

/* ctx->out (emptied) as one flushed buffer of the stream; last: the
 * stream's last. */
ngx_int_t ngx_http_kvserve_stream_send(ngx_http_kvserve_ctx_t *ctx,
    ngx_uint_t last);
/* After the header: an error event, [DONE], the end. */
void ngx_http_kvserve_stream_abort(ngx_http_kvserve_ctx_t *ctx,
    const char *message, const char *type, const char *code);

/* Whole JSON answers: body (freed) with status; an OpenAI error object
 * from its parts or from *aerr.  A 405 names the allowed methods, a 503
 * asks to retry in a second. */
ngx_int_t ngx_http_kvserve_send_json(ngx_http_request_t *r,
    ngx_uint_t status, kvs_buf_t *body);
ngx_int_t ngx_http_kvserve_error_json(ngx_http_request_t *r,
    ngx_uint_t status, const char *message, const char *param,
    const char *code);
ngx_int_t ngx_http_kvserve_api_error(ngx_http_request_t *r,
    kvs_api_err_t *aerr);
/* NGX_DECLINED when the announced body fits client_max_body_size, else
 * the 413 answered as an API error (the body discarded). */
ngx_int_t ngx_http_kvserve_body_too_large(ngx_http_request_t *r);
/* Adds a response header; key and value outlive the request's header
 * (static, or in its pool). */
ngx_int_t ngx_http_kvserve_add_header(ngx_http_request_t *r,
    const char *key, const char *value);
/* 1 when the response already has a header key (case-insensitive). */
ngx_uint_t ngx_http_kvserve_has_header(ngx_http_request_t *r,
    const char *key);

/* POST endpoints by r->uri: NGX_HTTP_KVSERVE_POST_*, NGX_DECLINED none
 * (the handler and kvserve_route route by it too); the Messages ones
 * answer errors in Anthropic's shape. */
#define NGX_HTTP_KVSERVE_POST_CMPL       0     /* /v1/completions */
#define NGX_HTTP_KVSERVE_POST_CHAT       1     /* /v1/chat/completions */
#define NGX_HTTP_KVSERVE_POST_MSG        2     /* /v1/messages */
#define NGX_HTTP_KVSERVE_POST_MSG_COUNT  3     /* .../count_tokens */
ngx_int_t ngx_http_kvserve_route_post(ngx_http_request_t *r);
/* The endpoint of r->uri's last segment: 0 tokenize, 1 detokenize, 2
 * health, NGX_DECLINED none. */
ngx_int_t ngx_http_kvserve_route_tokens(ngx_http_request_t *r);


/*
 * ---- timings and metrics (ngx_http_kvserve_timing.c) ---------------------
 *
 * Below the core: the core records a request and writes its
 * Server-Timing; the phases too.
 */

void ngx_http_kvserve_record(ngx_http_kvserve_ctx_t *ctx);
/* A worker-side hop that just ended (body, tokenize, limit) into the
 * shared histograms, for a request whose model is known. */
void ngx_http_kvserve_record_hop(ngx_http_kvserve_ctx_t *ctx,
    kvs_hop_t hop);
/* Output tokens the request's choices generated so far (an end token
 * counts: it was computed). */
uint32_t ngx_http_kvserve_completion_tokens(ngx_http_kvserve_ctx_t *ctx);
ngx_int_t ngx_http_kvserve_server_timing(ngx_http_kvserve_ctx_t *ctx,
    ngx_list_t *list);

/* The adapter ctx is served under (ctx->lora): asked (the model id's,
 * NULL for the base's id), unless kvserve_lora_map maps the request to
 * another (then a 404 naming the model id) (ngx_http_kvserve_lora.c). */
ngx_int_t ngx_http_kvserve_lora_select(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_lora_t *asked, kvs_api_err_t *aerr);


#endif /* NGX_HTTP_KVSERVE_REQUEST_H */
