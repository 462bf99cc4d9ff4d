/*
 * ngx_http_kvserve_completions.h: private to the completion request's
 * files (ngx_http_kvserve_completions.c, _tokenize.c, _answers.c,
 * _timing.c, _status.c): the request's context and what they call of
 * each other.
 *
 * A request is read and prepared in _completions.c, rendered and
 * tokenized in _tokenize.c (inline, or in a thread pool task), and
 * answered from the engine's events in _answers.c; _timing.c turns its
 * stamps into metrics and Server-Timing; _status.c serves kvserve_status
 * and rewrites nginx's own 413.
 *
 * Invariants of the context (ngx_http_kvserve_ctx_t):
 *  - it lives in the request's pool and its pool cleanup forgets every
 *    part (CANCEL when still running);
 *  - ctx->t is stamped on CLOCK_MONOTONIC (kvs_now_ns());
 *  - while ctx->tok's task runs in a pool thread, the event loop touches
 *    neither the job nor the request's parsed tree.
 */

#ifndef NGX_HTTP_KVSERVE_COMPLETIONS_H
#define NGX_HTTP_KVSERVE_COMPLETIONS_H

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve.h"
#include "api/kvs_api.h"
#include "api/kvs_api_req.h"
#include "api/kvs_api_resp.h"
#include "tokenizer/kvs_chat.h"
#include "tokenizer/kvs_tok.h"
#include "base/kvs_clock.h"


typedef struct ngx_http_kvserve_ctx_s  ngx_http_kvserve_ctx_t;

typedef struct {
    kvs_buf_t                 text;        /* non-streaming: all of it */
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
    unsigned                  started:1;
    unsigned                  ended:1;
} ngx_http_kvserve_choice_t;

typedef struct {
    ngx_http_kvserve_sub_t    sub;
    ngx_http_kvserve_ctx_t   *ctx;
    ngx_uint_t                index;       /* the prompt's */
    ngx_uint_t                n_ended;     /* of its n choices */
    int32_t                  *ids;         /* [n_ids], pool */
    size_t                    n_ids;
    unsigned                  has_cache:1; /* its cache figures came */
} ngx_http_kvserve_part_t;

/*
 * Rendering and tokenizing a request's prompts, inline or as a thread
 * pool task.  The task reads req and vocab and writes the rest; the
 * event loop reads the results once the task is back.
 */
typedef struct {
    ngx_http_kvserve_ctx_t   *ctx;
    const kvs_api_req_t      *req;         /* the parsed request */
    const kvs_vocab_t        *vocab;       /* shared, read-only */
    kvs_chat_t                chat;        /* chat: the template */
    ngx_uint_t                chat_req;    /* a chat request */
    ngx_uint_t                n_parts;
    kvs_ids_t                *ids;         /* [n_parts]: their arrays are
                                              malloc'd by the job, freed
                                              on the event loop */
    size_t                    bytes;       /* prompt text to tokenize */
    ngx_int_t                 rc;
    kvs_api_err_t             aerr;        /* when rc is NGX_ERROR */
    uint64_t                  post_ns;     /* CLOCK_MONOTONIC: posted, */
    uint64_t                  start_ns;    /* run by a pool thread, */
    uint64_t                  end_ns;      /* done there */
    kvs_engine_pin_t          pins[KVS_ENGINE_MAX_PINS];  /* chat: its
                                              cache_control breakpoints */
    uint32_t                  n_pins;
    void                    (*done)(ngx_http_kvserve_ctx_t *ctx);
                                           /* back from the pool: NULL
                                              for ngx_http_kvserve_
                                              tokenized (kvserve_route
                                              sets its own) */
} ngx_http_kvserve_tok_job_t;

#define NGX_HTTP_KVSERVE_TOK_INLINE  1
#define NGX_HTTP_KVSERVE_TOK_POOL    2

struct ngx_http_kvserve_ctx_s {
    ngx_http_request_t       *r;
    kvs_api_req_t             req;
    ngx_http_kvserve_model_t *model;
    ngx_uint_t                model_index;

    kvs_api_resp_head_t       head;
    char                      id[KVS_API_RESP_ID_MAX];

    ngx_http_kvserve_part_t  *parts;       /* [n_parts] */
    ngx_uint_t                n_parts;
    ngx_http_kvserve_choice_t  *choices;   /* [n_parts * req.n] */
    ngx_uint_t                n_choices;
    ngx_uint_t                n_ended;
    uint32_t                  prompt_tokens;
    uint64_t                  preempted;   /* of the choices that ended */
    ngx_int_t                 reason;      /* kvs_reason_t, once recorded */

    kvs_req_times_t           t;           /* the hops */

    ngx_http_kvserve_tok_job_t  *tok;      /* set by prepare */
    ngx_uint_t                tok_where;   /* NGX_HTTP_KVSERVE_TOK_*, 0:
                                              not tokenized */

    ngx_http_kvserve_sub_t    stats;       /* kvserve_status */

    ngx_str_t                 cache_scope; /* hashed; len 0: global */
    ngx_str_t                 tenant;      /* hashed key of the first
                                              kvserve_limit zone; len 0:
                                              none */
    uint32_t                  cached_tokens;   /* over the parts: prompt
                                                  tokens from the prefix
                                                  cache, */
    uint32_t                  cache_created;   /* cached for the pins, */
    uint32_t                  cache_queried;   /* looked up */
    ngx_int_t                 cache_miss;  /* kvs_radix_miss_t of the
                                              first prompt, -1: none */
    uint32_t                  cache_miss_pos;

    kvs_buf_t                 out;         /* the next event or body */
    ngx_chain_t              *free;
    ngx_chain_t              *busy;

    ngx_event_t               timer;       /* data: r->connection */

    unsigned                  chat:1;
    unsigned                  stream:1;
    unsigned                  header_sent:1;
    unsigned                  got_output:1;
    unsigned                  finished:1;
    unsigned                  json_413:1;   /* nginx's own 413, rewritten */
    unsigned                  json_413_sent:1;
    unsigned                  completion:1; /* a completions request */
    unsigned                  failed:1;     /* ended by a server error */
    unsigned                  refused:1;    /* the engine refused it */
    unsigned                  recorded:1;   /* in the shared metrics */
    unsigned                  trailers:1;   /* Server-Timing trailer */
};


/* the request (ngx_http_kvserve_completions.c) */
ngx_http_kvserve_ctx_t *ngx_http_kvserve_ctx_new(ngx_http_request_t *r,
    ngx_event_handler_pt timer);
/* The body in one piece (a pool copy when in several buffers or a
 * file); kvserve_route reads it too. */
ngx_int_t ngx_http_kvserve_body_bytes(ngx_http_request_t *r, u_char **data,
    size_t *len);
/* The parsed request's model, parts and tokenizing job (ctx->tok), its
 * cache scope and tenant; NGX_ERROR with *aerr for a request refused
 * outright.  kvserve_route prepares the same way. */
ngx_int_t ngx_http_kvserve_prepare(ngx_http_kvserve_ctx_t *ctx,
    kvs_api_err_t *aerr);
void ngx_http_kvserve_timer_arm(ngx_http_kvserve_ctx_t *ctx, ngx_msec_t ms);
void ngx_http_kvserve_timeout(ngx_event_t *ev);
/* Tokenized (here or in the pool): an error answered, or submitted. */
void ngx_http_kvserve_tokenized(ngx_http_kvserve_ctx_t *ctx);

/* rendering and tokenizing (ngx_http_kvserve_tokenize.c) */
size_t ngx_http_kvserve_prompt_bytes(ngx_http_kvserve_ctx_t *ctx);
ngx_int_t ngx_http_kvserve_tokenize(ngx_http_kvserve_tok_job_t *job,
    kvs_tok_ctx_t *tok);
#if (NGX_THREADS)
ngx_int_t ngx_http_kvserve_tok_post(ngx_http_kvserve_ctx_t *ctx,
    ngx_thread_pool_t *tp);
#endif

/* sending, and the engine's answers (ngx_http_kvserve_answers.c) */
ngx_int_t ngx_http_kvserve_api_error(ngx_http_request_t *r,
    kvs_api_err_t *aerr);
void ngx_http_kvserve_fail(ngx_http_kvserve_ctx_t *ctx, ngx_uint_t status,
    const char *message, const char *type, const char *code);
void ngx_http_kvserve_finish(ngx_http_kvserve_ctx_t *ctx, ngx_int_t rc);
void ngx_http_kvserve_write_handler(ngx_http_request_t *r);
void ngx_http_kvserve_part_event(ngx_http_kvserve_sub_t *s, ngx_uint_t ev,
    void *msg);

/* the prefix cache (ngx_http_kvserve_cache.c) */
ngx_int_t ngx_http_kvserve_hash_hex(ngx_pool_t *pool, ngx_str_t *v,
    ngx_str_t *out);
ngx_int_t ngx_http_kvserve_cache_scope(ngx_http_kvserve_ctx_t *ctx);
int ngx_http_kvserve_cache_pins(ngx_http_kvserve_tok_job_t *job,
    kvs_tok_ctx_t *tok, const kvs_chat_args_t *args, const char *text,
    size_t len, const kvs_span_t *spans, size_t n_spans,
    const kvs_ids_t *ids, kvs_err_t *err);
void ngx_http_kvserve_cache_req(ngx_http_kvserve_ctx_t *ctx, ngx_uint_t i,
    kvs_engine_req_t *ereq);
void ngx_http_kvserve_cache_out(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_part_t *part, const kvs_engine_out_t *o);

/* timings and metrics (ngx_http_kvserve_timing.c) */
void ngx_http_kvserve_record(ngx_http_kvserve_ctx_t *ctx);

/* Output tokens the request's choices generated so far (an end token
 * counts: it was computed). */
uint32_t ngx_http_kvserve_completion_tokens(ngx_http_kvserve_ctx_t *ctx);
ngx_int_t ngx_http_kvserve_server_timing(ngx_http_kvserve_ctx_t *ctx,
    ngx_list_t *list);

#endif /* NGX_HTTP_KVSERVE_COMPLETIONS_H */
