/*
 * ngx_http_kvserve_completions: POST /v1/chat/completions and
 * /v1/completions, and the kvserve_status location.
 *
 * A request is read (nginx's body reader, client_max_body_size), parsed
 * (kvs_api_req_parse), rendered and tokenized (inline, or for prompt
 * text over kvserve_tokenize_threshold in a task of the
 * kvserve_tokenize_threads pool), checked against the model's vocabulary
 * and context, and sent to the engine process as one SUBMIT per prompt
 * (a part); its answers come back as events on the part
 * (ngx_http_kvserve_engine.c).
 *
 * Invariants:
 *  - the response header goes out only with the first output, so that a
 *    request the engine lost before any token can be sent again to the
 *    next engine (bounded by kvserve_engine_wait), or refused with a
 *    plain JSON error;
 *  - after the header, failures end the stream with an SSE error event
 *    and [DONE]: the status is already 200;
 *  - the per-request timer is an ordinary (non-cancelable) timer, so a
 *    gracefully exiting worker finishes its streams; it is re-armed at
 *    every output and is what notices a hung engine;
 *  - the pool cleanup forgets every part (CANCEL when still running), so
 *    a client that goes away (ngx_http_test_reading) frees its KV blocks;
 *  - while a tokenizing task runs, the request is blocked
 *    (r->main->blocked, as nginx does for aio): nginx does not free it
 *    even if the client leaves, the task only reads the request's parsed
 *    tree and the shared vocabulary and writes its job, and the task's
 *    completion (on the event loop) drops a request whose client left;
 *    each pool thread has its own tokenizer scratch (a thread key), the
 *    event loop has ngx_http_kvserve_tok;
 *  - every hop is stamped on CLOCK_MONOTONIC (ctx->t; the engine's stamps
 *    come in OUT frames, same clock, same host); a request that reached
 *    the engine side is added to the shared metrics exactly once
 *    (ctx->recorded): before its last bytes are sent when it completes,
 *    so a scrape that follows the response sees it, else at cleanup
 *    (client gone: abort; engine failure: error).
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <sys/random.h>
#if (NGX_THREADS)
#include <pthread.h>
#endif

#include "ngx_http_kvserve.h"
#include "api/kvs_api.h"
#include "api/kvs_api_req.h"
#include "api/kvs_api_resp.h"
#include "tokenizer/kvs_chat.h"
#include "tokenizer/kvs_tok.h"


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


static void ngx_http_kvserve_body(ngx_http_request_t *r);
static void ngx_http_kvserve_part_event(ngx_http_kvserve_sub_t *s,
    ngx_uint_t ev, void *msg);
static void ngx_http_kvserve_finish(ngx_http_kvserve_ctx_t *ctx,
    ngx_int_t rc);
static void ngx_http_kvserve_fail(ngx_http_kvserve_ctx_t *ctx,
    ngx_uint_t status, const char *message, const char *type,
    const char *code);


static ngx_http_output_header_filter_pt  ngx_http_kvserve_next_header;
static ngx_http_output_body_filter_pt    ngx_http_kvserve_next_body;

static kvs_tok_ctx_t  ngx_http_kvserve_tok;
static uint64_t       ngx_http_kvserve_rng;


static uint64_t
ngx_http_kvserve_random64(void)
{
    uint64_t  v;

    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t) sizeof(v)) {
        v = ((uint64_t) ngx_random() << 33) ^ ((uint64_t) ngx_random() << 11)
            ^ (uint64_t) ngx_random() ^ (uint64_t) ngx_current_msec;
    }

    return v;
}


static uint64_t
ngx_http_kvserve_now_ns(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (uint64_t) ts.tv_sec * 1000000000 + (uint64_t) ts.tv_nsec;
}


/* ---- timings and metrics ---------------------------------------------- */

/* kvs_reason_t, or -1 while the request has none (not submitted, or
 * refused by the engine, or still running) */
static ngx_int_t
ngx_http_kvserve_reason(ngx_http_kvserve_ctx_t *ctx)
{
    ngx_uint_t  i;

    if (ctx->recorded) {
        return ctx->reason;
    }

    if (!ctx->completion || ctx->t.submit_ns == 0 || ctx->refused) {
        return -1;
    }

    /* the client went away (ngx_http_test_reading, a failed write): the
     * engine may have finished since, but the response was not had */
    if (ctx->r->connection->error && !ctx->failed) {
        return KVS_REASON_ABORT;
    }

    if (ctx->n_choices > 0 && ctx->n_ended == ctx->n_choices) {
        for (i = 0; i < ctx->n_choices; i++) {
            if (ctx->choices[i].finish == KVS_FINISH_LENGTH) {
                return KVS_REASON_LENGTH;
            }
        }
        return KVS_REASON_STOP;
    }

    /* ended early: by the server, or by the client going away */
    return ctx->failed ? KVS_REASON_ERROR : KVS_REASON_ABORT;
}


static uint32_t
ngx_http_kvserve_completion_tokens(ngx_http_kvserve_ctx_t *ctx)
{
    uint32_t    n;
    ngx_uint_t  i;

    n = 0;

    for (i = 0; i < ctx->n_choices; i++) {
        n += ctx->choices[i].ended ? ctx->choices[i].n_generated
                                   : ctx->choices[i].n_seen;
    }

    return n;
}


ngx_int_t
ngx_http_kvserve_req_info(ngx_http_request_t *r,
    ngx_http_kvserve_req_info_t *info)
{
    ngx_http_kvserve_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_kvserve_module);

    if (ctx == NULL || !ctx->completion) {
        return NGX_DECLINED;
    }

    ngx_memzero(info, sizeof(ngx_http_kvserve_req_info_t));

    info->t = ctx->t;
    if (ctx->model != NULL) {
        info->model = ctx->model->name;
    }
    info->prompt_tokens = ctx->prompt_tokens;
    info->completion_tokens = ngx_http_kvserve_completion_tokens(ctx);
    info->reason = ngx_http_kvserve_reason(ctx);
    info->submitted = (ctx->t.submit_ns != 0 && !ctx->refused);

    /* the log phase of a request that has not ended its own way (a
     * client gone): its total is up to now */
    if (info->t.end_ns == 0 && info->t.start_ns != 0) {
        info->t.end_ns = ngx_http_kvserve_now_ns();
    }

    return NGX_OK;
}


/* Adds the request to the shared counters, once; it must have reached
 * the engine side and not been refused there. */
static void
ngx_http_kvserve_record(ngx_http_kvserve_ctx_t *ctx)
{
    ngx_int_t       reason;
    kvs_metrics_t  *m;

    if (ctx->recorded) {
        return;
    }

    if (ctx->t.end_ns == 0) {
        ctx->t.end_ns = ngx_http_kvserve_now_ns();
    }

    reason = ngx_http_kvserve_reason(ctx);
    if (reason < 0) {
        return;
    }

    ctx->recorded = 1;
    ctx->reason = reason;

    m = ngx_http_kvserve_metrics(ctx->r);
    if (m == NULL) {
        return;
    }

    kvs_metrics_request(m, (uint32_t) ctx->model_index, &ctx->t,
                        ctx->prompt_tokens,
                        ngx_http_kvserve_completion_tokens(ctx),
                        ctx->preempted, (kvs_reason_t) reason);
}


/* A Server-Timing field in list: the response's headers or trailers. */
static ngx_int_t
ngx_http_kvserve_server_timing(ngx_http_kvserve_ctx_t *ctx,
    ngx_list_t *list)
{
    u_char           *p;
    kvs_buf_t         v;
    kvs_err_t         err;
    ngx_table_elt_t  *h;

    ngx_memzero(&v, sizeof(v));

    if (kvs_req_times_server_timing(&ctx->t, &v, &err) != KVS_OK) {
        return NGX_ERROR;
    }

    if (v.len == 0) {
        return NGX_OK;
    }

    p = ngx_pnalloc(ctx->r->pool, v.len);
    if (p == NULL) {
        kvs_buf_free(&v);
        return NGX_ERROR;
    }

    ngx_memcpy(p, v.data, v.len);

    h = ngx_list_push(list);
    if (h == NULL) {
        kvs_buf_free(&v);
        return NGX_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Server-Timing");
    h->value.data = p;
    h->value.len = v.len;
    kvs_buf_free(&v);

    return NGX_OK;
}


/* ---- lifetime ---------------------------------------------------------- */

static void
ngx_http_kvserve_cleanup(void *data)
{
    ngx_http_kvserve_ctx_t  *ctx = data;

    ngx_uint_t  i;

    if (ctx->completion) {
        ngx_http_kvserve_record(ctx);
    }

    for (i = 0; i < ctx->n_parts; i++) {
        ngx_http_kvserve_engine_forget(&ctx->parts[i].sub);
    }

    ngx_http_kvserve_engine_forget(&ctx->stats);

    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }

    for (i = 0; i < ctx->n_choices; i++) {
        kvs_buf_free(&ctx->choices[i].text);
        free(ctx->choices[i].lp);
    }

    kvs_buf_free(&ctx->out);
    kvs_api_req_free(&ctx->req);
}


static void
ngx_http_kvserve_timer_arm(ngx_http_kvserve_ctx_t *ctx, ngx_msec_t ms)
{
    ngx_add_timer(&ctx->timer, ms);
}


static ngx_http_kvserve_ctx_t *
ngx_http_kvserve_ctx_new(ngx_http_request_t *r, ngx_event_handler_pt timer)
{
    ngx_pool_cleanup_t      *cln;
    ngx_http_kvserve_ctx_t  *ctx;

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_kvserve_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    ctx->r = r;
    ctx->timer.handler = timer;
    ctx->timer.data = r->connection;     /* the debug log reads its fd */
    ctx->timer.log = r->connection->log;

    cln->handler = ngx_http_kvserve_cleanup;
    cln->data = ctx;

    ngx_http_set_ctx(r, ctx, ngx_http_kvserve_module);

    return ctx;
}


static ngx_http_kvserve_ctx_t *
ngx_http_kvserve_timer_ctx(ngx_event_t *ev)
{
    return (ngx_http_kvserve_ctx_t *)
           ((u_char *) ev - offsetof(ngx_http_kvserve_ctx_t, timer));
}


/* ---- sending ----------------------------------------------------------- */

ngx_int_t
ngx_http_kvserve_error_json(ngx_http_request_t *r, ngx_uint_t status,
    const char *message, const char *param, const char *code)
{
    kvs_buf_t  body;

    ngx_memzero(&body, sizeof(kvs_buf_t));

    if (kvs_api_error_json(&body, message,
                           status >= 500 ? "server_error"
                                         : "invalid_request_error",
                           param, code)
        != KVS_OK)
    {
        kvs_buf_free(&body);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_kvserve_send_json(r, status, &body);
}


static ngx_int_t
ngx_http_kvserve_api_error(ngx_http_request_t *r, kvs_api_err_t *aerr)
{
    kvs_buf_t  body;

    ngx_memzero(&body, sizeof(kvs_buf_t));

    if (kvs_api_err_json(aerr, &body) != KVS_OK) {
        kvs_buf_free(&body);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_kvserve_send_json(r, aerr->status, &body);
}


static ngx_int_t
ngx_http_kvserve_stream_header(ngx_http_kvserve_ctx_t *ctx)
{
    ngx_int_t            rc;
    ngx_table_elt_t     *h;
    ngx_http_request_t  *r;

    r = ctx->r;

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = -1;
    ngx_str_set(&r->headers_out.content_type, "text/event-stream");
    r->headers_out.content_type_len = r->headers_out.content_type.len;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }
    h->hash = 1;
    ngx_str_set(&h->key, "Cache-Control");
    ngx_str_set(&h->value, "no-cache");

    /* a proxy in front must not hold events back */
    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }
    h->hash = 1;
    ngx_str_set(&h->key, "X-Accel-Buffering");
    ngx_str_set(&h->value, "no");

    /* the hops are known at the end: a trailer, for a client that says
     * it takes them (chunked: HTTP/1.1) */
    if (r->headers_in.te != NULL && r->http_version >= NGX_HTTP_VERSION_11
        && ngx_strlcasestrn(r->headers_in.te->value.data,
                            r->headers_in.te->value.data
                            + r->headers_in.te->value.len,
                            (u_char *) "trailers", 8 - 1)
           != NULL)
    {
        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_ERROR;
        }
        h->hash = 1;
        ngx_str_set(&h->key, "Trailer");
        ngx_str_set(&h->value, "Server-Timing");

        r->expect_trailers = 1;
        ctx->trailers = 1;
    }

    ctx->header_sent = 1;

    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* Sends ctx->out (emptied) as one flushed buffer; buffers are reused. */
static ngx_int_t
ngx_http_kvserve_stream_send(ngx_http_kvserve_ctx_t *ctx, ngx_uint_t last)
{
    size_t        size;
    u_char       *p;
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    cl = ngx_chain_get_free_buf(ctx->r->pool, &ctx->free);
    if (cl == NULL) {
        return NGX_ERROR;
    }

    b = cl->buf;

    if (ctx->out.len > 0
        && (b->start == NULL || (size_t) (b->end - b->start) < ctx->out.len))
    {
        size = ngx_max(ctx->out.len, 1024);
        p = ngx_palloc(ctx->r->pool, size);
        if (p == NULL) {
            return NGX_ERROR;
        }
        b->start = p;
        b->end = p + size;
    }

    b->pos = b->start;
    b->last = b->start;
    if (ctx->out.len > 0) {
        b->last = ngx_cpymem(b->start, ctx->out.data, ctx->out.len);
    }

    b->temporary = (ctx->out.len > 0);
    b->memory = 0;
    b->flush = 1;
    b->last_buf = last;
    b->last_in_chain = 1;
    b->tag = (ngx_buf_tag_t) &ngx_http_kvserve_module;

    ctx->out.len = 0;

    rc = ngx_http_output_filter(ctx->r, cl);

    ngx_chain_update_chains(ctx->r->pool, &ctx->free, &ctx->busy, &cl,
                            (ngx_buf_tag_t) &ngx_http_kvserve_module);

    return rc == NGX_ERROR ? NGX_ERROR : NGX_OK;
}


/* After the header: an error event, [DONE], the end. */
static void
ngx_http_kvserve_stream_abort(ngx_http_kvserve_ctx_t *ctx,
    const char *message, const char *type, const char *code)
{
    ctx->failed = 1;
    ctx->out.len = 0;
    ctx->t.end_ns = ngx_http_kvserve_now_ns();

    if (ctx->trailers
        && ngx_http_kvserve_server_timing(ctx, &ctx->r->headers_out.trailers)
           != NGX_OK)
    {
        ngx_http_kvserve_finish(ctx, NGX_ERROR);
        return;
    }

    if (kvs_api_resp_error_event(&ctx->out, message, type, code) != KVS_OK
        || kvs_api_resp_done(&ctx->out) != KVS_OK
        || ngx_http_kvserve_stream_send(ctx, 1) != NGX_OK)
    {
        ngx_http_kvserve_finish(ctx, NGX_ERROR);
        return;
    }

    ngx_http_kvserve_finish(ctx, NGX_OK);
}


/* A failure, as a JSON error before the header or an event after it. */
static void
ngx_http_kvserve_fail(ngx_http_kvserve_ctx_t *ctx, ngx_uint_t status,
    const char *message, const char *type, const char *code)
{
    ngx_int_t  rc;

    ctx->failed = 1;

    if (ctx->header_sent) {
        ngx_http_kvserve_stream_abort(ctx, message, type, code);
        return;
    }

    rc = ngx_http_kvserve_error_json(ctx->r, status, message, NULL, code);
    ngx_http_kvserve_finish(ctx, rc);
}


/* Ends the request: every part forgotten, the timer gone. */
static void
ngx_http_kvserve_finish(ngx_http_kvserve_ctx_t *ctx, ngx_int_t rc)
{
    ngx_uint_t  i;

    if (ctx->finished) {
        return;
    }

    ctx->finished = 1;

    for (i = 0; i < ctx->n_parts; i++) {
        ngx_http_kvserve_engine_forget(&ctx->parts[i].sub);
    }

    ngx_http_kvserve_engine_forget(&ctx->stats);

    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }

    ngx_http_finalize_request(ctx->r, rc);
}


static void
ngx_http_kvserve_write_handler(ngx_http_request_t *r)
{
    ngx_event_t             *wev;
    ngx_http_kvserve_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_kvserve_module);
    wev = r->connection->write;

    if (wev->timedout) {
        r->connection->timedout = 1;
        if (ctx != NULL && !ctx->finished) {
            ngx_http_kvserve_finish(ctx, NGX_HTTP_REQUEST_TIME_OUT);
        }
        return;
    }

    if (ngx_http_output_filter(r, NULL) == NGX_ERROR) {
        if (ctx != NULL && !ctx->finished) {
            ngx_http_kvserve_finish(ctx, NGX_ERROR);
        }
    }
}


/* ---- the request ------------------------------------------------------- */

static void
ngx_http_kvserve_timeout(ngx_event_t *ev)
{
    ngx_uint_t               i, waiting;
    ngx_http_kvserve_ctx_t  *ctx;

    ctx = ngx_http_kvserve_timer_ctx(ev);
    waiting = 0;

    for (i = 0; i < ctx->n_parts; i++) {
        if (ctx->parts[i].sub.waiting) {
            waiting = 1;
        }
    }

    if (waiting || ctx->stats.waiting) {
        ngx_log_error(NGX_LOG_ERR, ctx->r->connection->log, 0,
                      "kvserve: no engine within kvserve_engine_wait");
        ngx_http_kvserve_fail(ctx, NGX_HTTP_SERVICE_UNAVAILABLE,
                              "No engine is available to serve the "
                              "request; retry later.", "server_error",
                              NULL);
        return;
    }

    ngx_log_error(NGX_LOG_ERR, ctx->r->connection->log, 0,
                  "kvserve: no output from the engine within "
                  "kvserve_engine_timeout");
    ngx_http_kvserve_fail(ctx, NGX_HTTP_GATEWAY_TIME_OUT,
                          "The engine did not answer in time.",
                          "server_error", "timeout");
}


ngx_int_t
ngx_http_kvserve_completions(ngx_http_request_t *r, ngx_uint_t chat)
{
    ngx_int_t                  rc;
    kvs_api_err_t              aerr;
    ngx_http_kvserve_ctx_t    *ctx;
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    /* nginx's own 413 is an HTML page: answer in OpenAI's shape first */
    if (clcf->client_max_body_size
        && r->headers_in.content_length_n > clcf->client_max_body_size)
    {
        kvs_api_err_set(&aerr, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE, NULL,
                        NULL, "The request body is larger than the %lld "
                        "bytes allowed.",
                        (long long) clcf->client_max_body_size);
        r->keepalive = 0;
        rc = ngx_http_discard_request_body(r);
        if (rc != NGX_OK) {
            return rc;
        }
        return ngx_http_kvserve_api_error(r, &aerr);
    }

    ctx = ngx_http_kvserve_ctx_new(r, ngx_http_kvserve_timeout);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the header is in: the body is read from here */
    ctx->t.start_ns = ngx_http_kvserve_now_ns();
    ctx->completion = 1;
    ctx->chat = chat ? 1 : 0;

    r->request_body_in_single_buf = 1;

    rc = ngx_http_read_client_request_body(r, ngx_http_kvserve_body);
    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


/* The body in one piece: a pool copy when it is in several buffers or
 * in a file. */
static ngx_int_t
ngx_http_kvserve_body_bytes(ngx_http_request_t *r, u_char **data,
    size_t *len)
{
    u_char       *p;
    off_t         size;
    ssize_t       n;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    *data = (u_char *) "";
    *len = 0;

    if (r->request_body == NULL || r->request_body->bufs == NULL) {
        return NGX_OK;
    }

    cl = r->request_body->bufs;

    if (cl->next == NULL && !cl->buf->in_file) {
        *data = cl->buf->pos;
        *len = cl->buf->last - cl->buf->pos;
        return NGX_OK;
    }

    size = 0;
    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        size += ngx_buf_size(cl->buf);
    }

    p = ngx_pnalloc(r->pool, (size_t) size + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    *data = p;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;

        if (b->in_file) {
            n = ngx_read_file(b->file, p, (size_t) (b->file_last
                                                   - b->file_pos),
                              b->file_pos);
            if (n != b->file_last - b->file_pos) {
                return NGX_ERROR;
            }
            p += n;

        } else {
            p = ngx_cpymem(p, b->pos, b->last - b->pos);
        }
    }

    *len = p - *data;

    return NGX_OK;
}


/*
 * ---- rendering and tokenizing ------------------------------------------
 *
 * What follows down to ngx_http_kvserve_tokenize() runs in a thread-pool
 * thread for long prompts, so it touches no nginx pool, log, event or
 * configuration: its inputs were resolved on the event loop (the job),
 * its outputs are malloc'd ids and an error in the job.  The request's
 * JSON tree and the vocabulary are only read, and nothing on the event
 * loop touches this request's tree while the task runs (the request is
 * blocked).
 */

/* Chat: render with the template resolved on the event loop, tokenize
 * with control tokens only where the template wrote them. */
static ngx_int_t
ngx_http_kvserve_chat_ids(ngx_http_kvserve_tok_job_t *job,
    kvs_tok_ctx_t *tok, kvs_ids_t *ids, kvs_api_err_t *aerr)
{
    int                 rc;
    kvs_buf_t           text, spans;
    kvs_err_t           err;
    kvs_chat_args_t     args;
    const kvs_vocab_t  *v;

    v = job->vocab;

    ngx_memzero(&args, sizeof(args));
    ngx_memzero(&text, sizeof(text));
    ngx_memzero(&spans, sizeof(spans));

    if (v->bos >= 0) {
        args.bos = v->tokens[v->bos].text;
        args.bos_len = v->tokens[v->bos].len;
    }

    if (v->eos >= 0) {
        args.eos = v->tokens[v->eos].text;
        args.eos_len = v->tokens[v->eos].len;
    }

    args.add_generation_prompt = 1;
    args.spans = &spans;

    rc = kvs_chat_render(&job->chat, job->req->messages, &args, &text, &err);

    if (rc == KVS_OK) {
        rc = kvs_tok_encode_guarded(v, tok, (const char *) text.data,
                                    text.len, KVS_TOK_SPECIAL,
                                    (const kvs_span_t *) spans.data,
                                    spans.len / sizeof(kvs_span_t), ids,
                                    &err);
    }

    kvs_buf_free(&text);
    kvs_buf_free(&spans);

    if (rc == KVS_EINVAL) {
        kvs_api_err_from_msg(aerr, 400, NULL, err.msg);
        return NGX_ERROR;
    }

    if (rc != KVS_OK) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "%s", err.msg);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* Completions: text with the vocabulary's BOS rule, or ids checked
 * against the vocabulary. */
static ngx_int_t
ngx_http_kvserve_prompt_ids(ngx_http_kvserve_tok_job_t *job, ngx_uint_t i,
    kvs_tok_ctx_t *tok, kvs_ids_t *ids, kvs_api_err_t *aerr)
{
    int                 rc;
    char                param[32];
    size_t              k;
    kvs_err_t           err;
    kvs_api_prompt_t   *p;
    const kvs_vocab_t  *v;

    v = job->vocab;
    p = &job->req->prompts[i];

    if (job->req->n_prompts > 1) {
        ngx_sprintf((u_char *) param, "prompt[%ui]%Z", i);
    } else {
        ngx_sprintf((u_char *) param, "prompt%Z");
    }

    if (p->text.ptr != NULL) {
        rc = kvs_tok_encode(v, tok, p->text.ptr, p->text.len,
                            v->add_bos ? KVS_TOK_ADD_BOS : 0, ids, &err);
        if (rc != KVS_OK) {
            kvs_api_err_set(aerr, rc == KVS_EINVAL ? 400 : 500, param, NULL,
                            "%s", err.msg);
            return NGX_ERROR;
        }

    } else {
        for (k = 0; k < p->n_ids; k++) {
            if (p->ids[k] < 0 || (uint32_t) p->ids[k] >= v->n_tokens) {
                kvs_api_err_set(aerr, 400, param, NULL,
                                "Token id %d is out of the vocabulary of "
                                "%u tokens.", (int) p->ids[k],
                                (unsigned) v->n_tokens);
                return NGX_ERROR;
            }
        }

        if (kvs_ids_reserve(ids, p->n_ids) != KVS_OK) {
            kvs_api_err_set(aerr, 500, NULL, NULL, "out of memory");
            return NGX_ERROR;
        }

        ngx_memcpy(ids->ids + ids->n, p->ids, p->n_ids * sizeof(int32_t));
        ids->n += p->n_ids;
    }

    if (ids->n == 0) {
        kvs_api_err_set(aerr, 400, param, NULL,
                        "The prompt is empty and the model has no "
                        "beginning-of-text token to start from.");
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* Every part's ids into job->ids[]; stops at the first error (in
 * job->aerr), as the inline order did. */
static ngx_int_t
ngx_http_kvserve_tokenize(ngx_http_kvserve_tok_job_t *job,
    kvs_tok_ctx_t *tok)
{
    ngx_int_t   rc;
    ngx_uint_t  i;

    rc = NGX_OK;

    for (i = 0; i < job->n_parts && rc == NGX_OK; i++) {
        rc = job->chat_req
             ? ngx_http_kvserve_chat_ids(job, tok, &job->ids[i], &job->aerr)
             : ngx_http_kvserve_prompt_ids(job, i, tok, &job->ids[i],
                                           &job->aerr);
    }

    return rc;
}


#if (NGX_THREADS)

/*
 * Each pool thread's tokenizer scratch, kept warm between tasks and
 * freed when the thread exits (nginx ends its pool threads with
 * pthread_exit(), which runs the key's destructor).
 */
static pthread_key_t   ngx_http_kvserve_tok_key;
static pthread_once_t  ngx_http_kvserve_tok_once = PTHREAD_ONCE_INIT;
static int             ngx_http_kvserve_tok_key_ok;


static void
ngx_http_kvserve_tok_key_free(void *data)
{
    kvs_tok_ctx_free(data);
    free(data);
}


static void
ngx_http_kvserve_tok_key_init(void)
{
    ngx_http_kvserve_tok_key_ok =
        (pthread_key_create(&ngx_http_kvserve_tok_key,
                            ngx_http_kvserve_tok_key_free) == 0);
}


/* This thread's context, or NULL (the caller then uses one of its own
 * for the task). */
static kvs_tok_ctx_t *
ngx_http_kvserve_thread_tok(void)
{
    kvs_tok_ctx_t  *tok;

    if (pthread_once(&ngx_http_kvserve_tok_once,
                     ngx_http_kvserve_tok_key_init)
        != 0
        || !ngx_http_kvserve_tok_key_ok)
    {
        return NULL;
    }

    tok = pthread_getspecific(ngx_http_kvserve_tok_key);
    if (tok != NULL) {
        return tok;
    }

    tok = calloc(1, sizeof(kvs_tok_ctx_t));
    if (tok == NULL) {
        return NULL;
    }

    if (pthread_setspecific(ngx_http_kvserve_tok_key, tok) != 0) {
        free(tok);
        return NULL;
    }

    return tok;
}


/* The task, in a pool thread. */
static void
ngx_http_kvserve_tok_thread(void *data, ngx_log_t *log)
{
    ngx_http_kvserve_tok_job_t  *job = data;

    kvs_tok_ctx_t   own, *tok;

    job->start_ns = ngx_http_kvserve_now_ns();

    tok = ngx_http_kvserve_thread_tok();
    if (tok == NULL) {
        ngx_memzero(&own, sizeof(own));
        tok = &own;
    }

    job->rc = ngx_http_kvserve_tokenize(job, tok);

    if (tok == &own) {
        kvs_tok_ctx_free(&own);
    }

    job->end_ns = ngx_http_kvserve_now_ns();
}

#endif


/* ---- on the event loop -------------------------------------------------- */

/* Bytes of prompt text to tokenize: chat, the messages' contents (string
 * or text parts); completions, the text prompts (id prompts need none). */
static size_t
ngx_http_kvserve_prompt_bytes(ngx_http_kvserve_ctx_t *ctx)
{
    size_t         n, i, k;
    const json_t  *m, *content, *part, *text;

    n = 0;

    if (!ctx->chat) {
        for (i = 0; i < ctx->req.n_prompts; i++) {
            if (ctx->req.prompts[i].text.ptr != NULL) {
                n += ctx->req.prompts[i].text.len;
            }
        }

        return n;
    }

    for (i = 0; i < json_array_size(ctx->req.messages); i++) {
        m = json_array_get(ctx->req.messages, i);
        content = json_object_get(m, "content");

        if (json_is_string(content)) {
            n += json_string_length(content);
            continue;
        }

        for (k = 0; k < json_array_size(content); k++) {
            part = json_array_get(content, k);
            text = json_object_get(part, "text");

            if (json_is_string(text)) {
                n += json_string_length(text);
            }
        }
    }

    return n;
}


/* The template for a chat request: the location's, else the model's. */
static ngx_int_t
ngx_http_kvserve_chat_resolve(ngx_http_kvserve_ctx_t *ctx, kvs_chat_t *chat,
    kvs_api_err_t *aerr)
{
    const char                   *name;
    kvs_err_t                     err;
    ngx_http_kvserve_loc_conf_t  *klcf;

    klcf = ngx_http_get_module_loc_conf(ctx->r, ngx_http_kvserve_module);

    if (klcf->chat_template != NGX_CONF_UNSET) {
        name = kvs_chat_name((kvs_chat_kind_t) klcf->chat_template);
        if (kvs_chat_by_name(name, ngx_strlen(name), chat, &err) != KVS_OK) {
            kvs_api_err_set(aerr, 500, NULL, NULL, "%s", err.msg);
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    if (ctx->model->has_chat) {
        *chat = ctx->model->chat;
        return NGX_OK;
    }

    kvs_api_err_set(aerr, 400, "model", NULL,
                    "The model `%.*s` has no chat template: use "
                    "/v1/completions.", (int) ctx->req.model.len,
                    ctx->req.model.ptr);
    return NGX_ERROR;
}


/* One part per prompt: its SUBMIT frame built once, sent by the engine
 * side (again, if the engine is lost before any output). */
static ngx_int_t
ngx_http_kvserve_part_init(ngx_http_kvserve_ctx_t *ctx, ngx_uint_t i,
    kvs_ids_t *ids, uint32_t n_ctx, kvs_api_err_t *aerr)
{
    int                       rc;
    int64_t                   max_tokens;
    uint32_t                  k;
    kvs_buf_t                 frame;
    kvs_err_t                 err;
    const char               *stop[KVS_API_MAX_STOP];
    size_t                    stop_len[KVS_API_MAX_STOP];
    kvs_engine_req_t          ereq;
    ngx_http_kvserve_part_t  *part;

    part = &ctx->parts[i];
    part->ctx = ctx;
    part->index = i;

    max_tokens = ctx->req.max_tokens;
    if (max_tokens < 0) {
        max_tokens = (int64_t) n_ctx - (int64_t) ids->n;
    }

    if (max_tokens < 1 || (int64_t) ids->n + max_tokens > (int64_t) n_ctx) {
        kvs_api_err_set(aerr, 400, ctx->chat ? "messages" : "prompt",
                        "context_length_exceeded",
                        "This model's maximum context length is %u tokens. "
                        "However, you requested %lld tokens (%zu in the "
                        "%s, %lld for the completion). Please reduce the "
                        "length of the %s or completion.",
                        (unsigned) n_ctx,
                        (long long) ((int64_t) ids->n
                                     + (max_tokens > 0 ? max_tokens : 1)),
                        ids->n, ctx->chat ? "messages" : "prompt",
                        (long long) (max_tokens > 0 ? max_tokens : 1),
                        ctx->chat ? "messages" : "prompt");
        return NGX_ERROR;
    }

    part->ids = ngx_palloc(ctx->r->pool, ids->n * sizeof(int32_t));
    if (part->ids == NULL) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "out of memory");
        return NGX_ERROR;
    }
    ngx_memcpy(part->ids, ids->ids, ids->n * sizeof(int32_t));
    part->n_ids = ids->n;

    for (k = 0; k < ctx->req.n_stop; k++) {
        stop[k] = ctx->req.stop[k].ptr;
        stop_len[k] = ctx->req.stop[k].len;
    }

    ngx_memzero(&ereq, sizeof(ereq));
    ereq.prompt = part->ids;
    ereq.n_prompt = (uint32_t) part->n_ids;
    ereq.max_tokens = (uint32_t) max_tokens;
    ereq.n = ctx->req.n;
    ereq.sample = ctx->req.sample;
    ereq.stop = stop;
    ereq.stop_len = stop_len;
    ereq.n_stop = ctx->req.n_stop;

    ngx_memzero(&frame, sizeof(frame));

    rc = kvs_wire_enc_submit(&frame, 0, (uint32_t) ctx->model_index, &ereq,
                             ngx_http_kvserve_now_ns(), &err);
    if (rc != KVS_OK) {
        kvs_buf_free(&frame);
        kvs_api_err_from_msg(aerr, rc == KVS_ENOMEM ? 500 : 400, NULL,
                             err.msg);
        return NGX_ERROR;
    }

    part->sub.type = KVS_WIRE_SUBMIT;
    part->sub.frame = ngx_pnalloc(ctx->r->pool, frame.len);
    if (part->sub.frame == NULL) {
        kvs_buf_free(&frame);
        kvs_api_err_set(aerr, 500, NULL, NULL, "out of memory");
        return NGX_ERROR;
    }

    ngx_memcpy(part->sub.frame, frame.data, frame.len);
    part->sub.frame_len = frame.len;
    part->sub.handler = ngx_http_kvserve_part_event;
    part->sub.data = part;
    kvs_buf_free(&frame);

    ctx->prompt_tokens += (uint32_t) part->n_ids;

    return NGX_OK;
}


/*
 * Before tokenizing: the model, what is refused outright, the seed, the
 * parts and choices, and everything the tokenizing job reads (so that it
 * need not look at the configuration).
 */
static ngx_int_t
ngx_http_kvserve_prepare(ngx_http_kvserve_ctx_t *ctx, kvs_api_err_t *aerr)
{
    ngx_uint_t                     i, n;
    ngx_http_kvserve_model_t      *m;
    ngx_http_kvserve_tok_job_t    *job;
    ngx_http_kvserve_main_conf_t  *kmcf;

    kmcf = ngx_http_get_module_main_conf(ctx->r, ngx_http_kvserve_module);
    m = kmcf->models->elts;
    n = kmcf->models->nelts;

    for (i = 0; i < n; i++) {
        if (m[i].name.len == ctx->req.model.len
            && ngx_strncmp(m[i].name.data, ctx->req.model.ptr,
                           m[i].name.len) == 0)
        {
            break;
        }
    }

    if (i == n) {
        kvs_api_err_set(aerr, 404, "model", "model_not_found",
                        "The model `%s` does not exist or you do not have "
                        "access to it.", ctx->req.model.ptr);
        return NGX_ERROR;
    }

    ctx->model = &m[i];
    ctx->model_index = i;

    if (ctx->req.echo) {
        kvs_api_err_set(aerr, 400, "echo", NULL,
                        "echo is not supported yet.");
        return NGX_ERROR;
    }

    if (!ctx->req.has_seed) {
        ctx->req.sample.seed = ngx_http_kvserve_random64();
    }

    ctx->n_parts = ctx->chat ? 1 : ctx->req.n_prompts;
    ctx->parts = ngx_pcalloc(ctx->r->pool,
                             ctx->n_parts * sizeof(ngx_http_kvserve_part_t));
    ctx->n_choices = ctx->n_parts * ctx->req.n;
    ctx->choices = ngx_pcalloc(ctx->r->pool, ctx->n_choices
                                        * sizeof(ngx_http_kvserve_choice_t));
    job = ngx_pcalloc(ctx->r->pool, sizeof(ngx_http_kvserve_tok_job_t));
    if (ctx->parts == NULL || ctx->choices == NULL || job == NULL) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "out of memory");
        return NGX_ERROR;
    }

    job->ids = ngx_pcalloc(ctx->r->pool, ctx->n_parts * sizeof(kvs_ids_t));
    if (job->ids == NULL) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "out of memory");
        return NGX_ERROR;
    }

    job->ctx = ctx;
    job->req = &ctx->req;
    job->vocab = ctx->model->vocab;
    job->n_parts = ctx->n_parts;
    job->chat_req = ctx->chat;
    ctx->tok = job;

    if (ctx->chat
        && ngx_http_kvserve_chat_resolve(ctx, &job->chat, aerr) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* The ids go into the parts (and are freed); then the response's head. */
static ngx_int_t
ngx_http_kvserve_parts_init(ngx_http_kvserve_ctx_t *ctx,
    kvs_api_err_t *aerr)
{
    uint32_t                     n_ctx;
    ngx_int_t                    rc;
    ngx_uint_t                   i;
    ngx_http_kvserve_tok_job_t  *job;

    job = ctx->tok;
    n_ctx = ctx->model->model->hp.n_ctx_train;
    rc = job->rc;

    if (rc != NGX_OK) {
        *aerr = job->aerr;
    }

    for (i = 0; i < ctx->n_parts && rc == NGX_OK; i++) {
        rc = ngx_http_kvserve_part_init(ctx, i, &job->ids[i], n_ctx, aerr);
    }

    for (i = 0; i < job->n_parts; i++) {
        kvs_ids_free(&job->ids[i]);
    }

    if (rc != NGX_OK) {
        return NGX_ERROR;
    }

    for (i = 0; i < ctx->n_choices; i++) {
        kvs_api_textpos_init(&ctx->choices[i].pos, ctx->model->vocab,
                             ctx->parts[i / ctx->req.n].ids,
                             ctx->parts[i / ctx->req.n].n_ids, 0);
    }

    ctx->head.kind = ctx->chat ? KVS_API_CHAT : KVS_API_COMPLETIONS;
    ctx->head.id_len = kvs_api_resp_id(ctx->id, ctx->head.kind,
                                       &ngx_http_kvserve_rng);
    ctx->head.id = ctx->id;
    ctx->head.model = ctx->req.model.ptr;
    ctx->head.model_len = ctx->req.model.len;
    ctx->head.created = (int64_t) ngx_time();
    ctx->head.logprobs = ctx->req.sample.logprobs;
    ctx->stream = ctx->req.stream ? 1 : 0;

    return NGX_OK;
}


/* The request goes to the engine: one SUBMIT per part. */
static void
ngx_http_kvserve_submit(ngx_http_kvserve_ctx_t *ctx)
{
    ngx_uint_t                     i;
    ngx_http_request_t            *r;
    ngx_http_kvserve_main_conf_t  *kmcf;

    r = ctx->r;
    kmcf = ngx_http_get_module_main_conf(r, ngx_http_kvserve_module);

    /* a client that goes away cancels its sequences (pool cleanup) */
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_kvserve_write_handler;

    ngx_http_kvserve_timer_arm(ctx, ngx_http_kvserve_engine_hello() != NULL
                                    ? kmcf->engine_timeout
                                    : kmcf->engine_wait);

    ctx->t.submit_ns = ngx_http_kvserve_now_ns();

    for (i = 0; i < ctx->n_parts; i++) {
        if (ngx_http_kvserve_engine_send(&ctx->parts[i].sub) != NGX_OK) {
            ngx_http_kvserve_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                  "The request could not be sent to the "
                                  "engine.", "server_error", NULL);
            return;
        }

        if (ctx->finished) {
            return;
        }
    }
}


/* Tokenized (here or in the pool): an error answered, or submitted. */
static void
ngx_http_kvserve_tokenized(ngx_http_kvserve_ctx_t *ctx)
{
    ngx_int_t      rc;
    kvs_api_err_t  aerr;

    rc = ngx_http_kvserve_parts_init(ctx, &aerr);
    ctx->t.tokenize_ns = ngx_http_kvserve_now_ns();

    if (rc != NGX_OK) {
        rc = ngx_http_kvserve_api_error(ctx->r, &aerr);
        ctx->finished = 1;
        ngx_http_finalize_request(ctx->r, rc);
        return;
    }

    ngx_http_kvserve_submit(ctx);
}


#if (NGX_THREADS)

/*
 * Back on the event loop.  The request was blocked (r->main->blocked),
 * as nginx blocks it for aio, so it is still here even if the client
 * left: then nginx has already terminated it as far as it could
 * (c->error) and finalizing it again frees it.
 */
static void
ngx_http_kvserve_tok_done(ngx_event_t *ev)
{
    uint64_t                     now;
    ngx_uint_t                   i;
    ngx_connection_t            *c;
    ngx_http_request_t          *r;
    ngx_http_kvserve_ctx_t      *ctx;
    ngx_http_kvserve_tok_job_t  *job;

    job = ev->data;
    ctx = job->ctx;
    r = ctx->r;
    c = r->connection;

    ngx_http_set_log_request(c->log, r);

    r->main->blocked--;
    r->aio = 0;

    now = ngx_http_kvserve_now_ns();

    ngx_log_debug6(NGX_LOG_DEBUG_HTTP, c->log, 0,
                   "kvserve: tokenized %uz bytes in the thread pool: "
                   "queued %uL ns, ran %uL ns, back %uL ns, hop %uL ns, "
                   "rc %i", job->bytes, job->start_ns - job->post_ns,
                   job->end_ns - job->start_ns, now - job->end_ns,
                   (now - job->post_ns) - (job->end_ns - job->start_ns),
                   job->rc);

    /* a client that closed just after its body gave no event of its
     * own (it came with the body's last bytes): epoll's RDHUP left
     * pending_eof, which ngx_http_test_reading() treats as gone too */
    if (!c->error && (c->read->eof || c->read->pending_eof)) {
        c->error = 1;
    }

    if (c->error) {
        /* already terminated by nginx (blocked) or not: finalizing it
         * once here frees it */
        ngx_log_error(NGX_LOG_INFO, c->log, 0,
                      "kvserve: the client left while its prompt was "
                      "tokenized; the request is dropped");

        for (i = 0; i < job->n_parts; i++) {
            kvs_ids_free(&job->ids[i]);
        }

        ctx->finished = 1;
        ngx_http_finalize_request(r, NGX_HTTP_CLIENT_CLOSED_REQUEST);
        ngx_http_run_posted_requests(c);
        return;
    }

    ngx_http_kvserve_tokenized(ctx);
    ngx_http_run_posted_requests(c);
}


/* NGX_OK: the task is posted and the request blocked until it is back;
 * NGX_DECLINED: tokenize inline instead (the pool's queue is full). */
static ngx_int_t
ngx_http_kvserve_tok_post(ngx_http_kvserve_ctx_t *ctx, ngx_thread_pool_t *tp)
{
    ngx_thread_task_t           *task;
    ngx_http_request_t          *r;
    ngx_http_kvserve_tok_job_t  *job;

    r = ctx->r;
    job = ctx->tok;

    task = ngx_thread_task_alloc(r->pool, 0);
    if (task == NULL) {
        return NGX_DECLINED;
    }

    task->ctx = job;
    task->handler = ngx_http_kvserve_tok_thread;
    task->event.data = job;
    task->event.handler = ngx_http_kvserve_tok_done;

    job->post_ns = ngx_http_kvserve_now_ns();

    if (ngx_thread_task_post(tp, task) != NGX_OK) {
        return NGX_DECLINED;
    }

    r->main->blocked++;
    r->aio = 1;

    /* a client that leaves now is seen (c->error) when the task is back */
    r->read_event_handler = ngx_http_test_reading;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "kvserve: %uz bytes of prompt to the thread pool",
                   job->bytes);

    return NGX_OK;
}

#endif


static void
ngx_http_kvserve_body(ngx_http_request_t *r)
{
    u_char                        *data;
    size_t                         len;
    ngx_int_t                      rc;
    kvs_api_err_t                  aerr;
    ngx_http_kvserve_ctx_t        *ctx;
    ngx_http_core_loc_conf_t      *clcf;
#if (NGX_THREADS)
    ngx_http_kvserve_loc_conf_t   *klcf;
#endif

    ctx = ngx_http_get_module_ctx(r, ngx_http_kvserve_module);
    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    ctx->t.body_ns = ngx_http_kvserve_now_ns();

    if (ngx_http_kvserve_body_bytes(r, &data, &len) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (ngx_http_kvserve_rng == 0) {
        ngx_http_kvserve_rng = ngx_http_kvserve_random64() | 1;
    }

    rc = kvs_api_req_parse(&ctx->req, ctx->chat ? KVS_API_CHAT
                                                : KVS_API_COMPLETIONS,
                           (const char *) data, len,
                           (size_t) clcf->client_max_body_size, &aerr)
         == KVS_OK ? NGX_OK : NGX_ERROR;

    ctx->t.parse_ns = ngx_http_kvserve_now_ns();

    if (rc == NGX_OK) {
        rc = ngx_http_kvserve_prepare(ctx, &aerr);
    }

    if (rc != NGX_OK) {
        ctx->t.tokenize_ns = ngx_http_kvserve_now_ns();
        rc = ngx_http_kvserve_api_error(r, &aerr);
        ctx->finished = 1;
        ngx_http_finalize_request(r, rc);
        return;
    }

    /* a hop to a pool thread costs more than tokenizing a short prompt
     * here; a long one would hold every other request of the worker */
    ctx->tok->bytes = ngx_http_kvserve_prompt_bytes(ctx);

#if (NGX_THREADS)

    klcf = ngx_http_get_module_loc_conf(r, ngx_http_kvserve_module);

    if (klcf->tokenize_pool != NULL
        && klcf->tokenize_pool != NGX_CONF_UNSET_PTR
        && ctx->tok->bytes > klcf->tokenize_threshold)
    {
        ctx->tok_where = NGX_HTTP_KVSERVE_TOK_POOL;

        if (ngx_http_kvserve_tok_post(ctx, klcf->tokenize_pool) == NGX_OK) {
            return;
        }
    }

#endif

    ctx->tok_where = NGX_HTTP_KVSERVE_TOK_INLINE;
    ctx->tok->rc = ngx_http_kvserve_tokenize(ctx->tok,
                                             &ngx_http_kvserve_tok);

    ngx_http_kvserve_tokenized(ctx);
}


/* ---- the engine's answers ---------------------------------------------- */

static ngx_int_t
ngx_http_kvserve_stream_out(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_choice_t *ch, uint32_t index, kvs_engine_out_t *o,
    kvs_err_t *err)
{
    int                 rc;
    kvs_api_choice_t    c;
    const kvs_vocab_t  *v;

    v = ctx->model->vocab;

    ngx_memzero(&c, sizeof(c));
    c.index = index;

    if (ctx->chat) {
        if (!ch->started) {
            c.role = 1;
            c.text = "";
            rc = kvs_api_resp_chunk(&ctx->out, &ctx->head, &c, 1,
                                    ctx->req.include_usage, v, err);
            if (rc != KVS_OK) {
                return NGX_ERROR;
            }
            c.role = 0;
        }

        if (o->text.len > 0 || o->n_lp > 0) {
            c.text = (const char *) o->text.data;
            c.len = o->text.len;
            c.lp = o->lp;
            c.n_lp = o->n_lp;
            if (c.text == NULL) {
                c.text = "";
            }
            rc = kvs_api_resp_chunk(&ctx->out, &ctx->head, &c, 1,
                                    ctx->req.include_usage, v, err);
            if (rc != KVS_OK) {
                return NGX_ERROR;
            }
        }

        if (o->finish == KVS_FINISH_STOP || o->finish == KVS_FINISH_LENGTH) {
            c.text = NULL;
            c.len = 0;
            c.lp = NULL;
            c.n_lp = 0;
            c.finish = o->finish;
            rc = kvs_api_resp_chunk(&ctx->out, &ctx->head, &c, 1,
                                    ctx->req.include_usage, v, err);
            if (rc != KVS_OK) {
                return NGX_ERROR;
            }
        }

        ch->started = 1;

        return NGX_OK;
    }

    ch->started = 1;

    if (o->text.len == 0 && o->n_lp == 0
        && o->finish != KVS_FINISH_STOP && o->finish != KVS_FINISH_LENGTH)
    {
        return NGX_OK;
    }

    c.text = o->text.len ? (const char *) o->text.data : "";
    c.len = o->text.len;
    c.lp = o->lp;
    c.n_lp = o->n_lp;
    c.pos = &ch->pos;
    if (o->finish == KVS_FINISH_STOP || o->finish == KVS_FINISH_LENGTH) {
        c.finish = o->finish;
    }

    rc = kvs_api_resp_chunk(&ctx->out, &ctx->head, &c, 1,
                            ctx->req.include_usage, v, err);

    return rc == KVS_OK ? NGX_OK : NGX_ERROR;
}


static ngx_int_t
ngx_http_kvserve_collect(ngx_http_kvserve_choice_t *ch, kvs_engine_out_t *o)
{
    if (o->text.len > 0
        && kvs_buf_append(&ch->text, o->text.data, o->text.len) != KVS_OK)
    {
        return NGX_ERROR;
    }

    if (o->n_lp > 0) {
        if (kvs_grow((void **) &ch->lp, &ch->lp_cap, ch->n_lp + o->n_lp,
                     sizeof(kvs_sample_logprobs_t))
            != KVS_OK)
        {
            return NGX_ERROR;
        }

        ngx_memcpy(ch->lp + ch->n_lp, o->lp,
                   o->n_lp * sizeof(kvs_sample_logprobs_t));
        ch->n_lp += o->n_lp;
    }

    return NGX_OK;
}


/* Every choice ended: the usage event and [DONE], or the whole body. */
static void
ngx_http_kvserve_complete(ngx_http_kvserve_ctx_t *ctx)
{
    ngx_int_t                   rc;
    kvs_err_t                   err;
    ngx_uint_t                  i;
    kvs_api_usage_t             u;
    kvs_api_choice_t           *c;
    ngx_http_kvserve_choice_t  *ch;

    ngx_memzero(&u, sizeof(u));
    u.prompt_tokens = ctx->prompt_tokens;
    for (i = 0; i < ctx->n_choices; i++) {
        u.completion_tokens += ctx->choices[i].n_generated;
    }

    /* counted before the last bytes go: a scrape that follows the
     * response sees this request */
    ctx->t.end_ns = ngx_http_kvserve_now_ns();
    ngx_http_kvserve_record(ctx);

    if (ctx->stream) {
        if (ctx->trailers
            && ngx_http_kvserve_server_timing(ctx,
                                              &ctx->r->headers_out.trailers)
               != NGX_OK)
        {
            ngx_http_kvserve_finish(ctx, NGX_ERROR);
            return;
        }

        if ((ctx->req.include_usage
             && kvs_api_resp_usage_chunk(&ctx->out, &ctx->head, &u)
                != KVS_OK)
            || kvs_api_resp_done(&ctx->out) != KVS_OK
            || ngx_http_kvserve_stream_send(ctx, 1) != NGX_OK)
        {
            ngx_http_kvserve_finish(ctx, NGX_ERROR);
            return;
        }

        ngx_http_kvserve_finish(ctx, NGX_OK);
        return;
    }

    c = ngx_pcalloc(ctx->r->pool, ctx->n_choices * sizeof(kvs_api_choice_t));
    if (c == NULL) {
        ngx_http_kvserve_finish(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    for (i = 0; i < ctx->n_choices; i++) {
        ch = &ctx->choices[i];
        c[i].index = (uint32_t) i;
        c[i].text = ch->text.len ? (const char *) ch->text.data : "";
        c[i].len = ch->text.len;
        c[i].finish = ch->finish;
        c[i].lp = ch->lp;
        c[i].n_lp = ch->n_lp;
        c[i].pos = &ch->pos;
    }

    ctx->out.len = 0;

    if (kvs_api_resp_body(&ctx->out, &ctx->head, c, ctx->n_choices, &u,
                          ctx->model->vocab, &err)
        != KVS_OK)
    {
        ngx_log_error(NGX_LOG_ERR, ctx->r->connection->log, 0,
                      "kvserve: %s", err.msg);
        ngx_http_kvserve_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR,
                              "The server could not build the response.",
                              "server_error", NULL);
        return;
    }

    if (ngx_http_kvserve_server_timing(ctx, &ctx->r->headers_out.headers)
        != NGX_OK)
    {
        ngx_http_kvserve_finish(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    /* send_json takes the buffer over */
    rc = ngx_http_kvserve_send_json(ctx->r, NGX_HTTP_OK, &ctx->out);
    ngx_memzero(&ctx->out, sizeof(kvs_buf_t));
    ngx_http_kvserve_finish(ctx, rc);
}


/* The hops an OUT frame tells: the engine's stamps (the first frame
 * of the request), the first token's arrival (TTFT), and the gap since
 * this choice's previous tokens (ITL, one observation per token after
 * the first, so that their mean is decode / (tokens - 1)).  Tokens are
 * counted by n_generated, not by the ids in the frame: an end token is
 * sampled (and counted in usage) but not sent as output, and a choice
 * may end on one before any other token. */
static void
ngx_http_kvserve_on_times(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_choice_t *ch, kvs_wire_out_t *wo)
{
    uint64_t        now, gap, n;
    kvs_metrics_t  *m;

    if (ctx->t.recv_ns == 0) {
        ctx->t.recv_ns = wo->t.recv_ns;
    }

    n = wo->out.n_generated > ch->n_seen ? wo->out.n_generated - ch->n_seen
                                         : 0;
    if (n == 0) {
        return;
    }

    if (ctx->t.engine_first_ns == 0) {
        /* first_ns is stamped for output ids only: an end token alone
         * was read when this frame was made */
        ctx->t.engine_first_ns = wo->t.first_ns ? wo->t.first_ns
                                                : wo->t.now_ns;
    }

    now = ngx_http_kvserve_now_ns();
    m = ngx_http_kvserve_metrics(ctx->r);

    if (ctx->t.first_ns == 0) {
        ctx->t.first_ns = now;
        kvs_metrics_observe(m, (uint32_t) ctx->model_index, KVS_HIST_TTFT,
                            now - ctx->t.start_ns, 1);
    }

    if (ch->last_ns == 0) {
        /* tokens that came with the choice's first reached the client
         * with it: no time between them */
        gap = 0;
        n--;

    } else {
        gap = now >= ch->last_ns ? now - ch->last_ns : 0;
    }

    if (n > 0) {
        ctx->t.itl_sum_ns += gap;
        ctx->t.itl_n += n;
        kvs_metrics_observe(m, (uint32_t) ctx->model_index, KVS_HIST_ITL,
                            gap / n, n);
    }

    ch->last_ns = now;
    ch->n_seen = wo->out.n_generated;
    ctx->t.last_ns = now;
}


static void
ngx_http_kvserve_on_out(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_part_t *part, kvs_wire_out_t *wo)
{
    uint32_t                        index;
    kvs_err_t                       err;
    kvs_engine_out_t               *o;
    ngx_http_kvserve_choice_t      *ch;
    ngx_http_kvserve_main_conf_t   *kmcf;

    o = &wo->out;

    if (wo->choice >= ctx->req.n) {
        ngx_http_kvserve_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR,
                              "The engine answered for a choice that was "
                              "not asked for.", "server_error", NULL);
        return;
    }

    index = (uint32_t) (part->index * ctx->req.n + wo->choice);
    ch = &ctx->choices[index];

    if (ch->ended) {
        return;
    }

    ctx->got_output = 1;

    ngx_http_kvserve_on_times(ctx, ch, wo);

    kmcf = ngx_http_get_module_main_conf(ctx->r, ngx_http_kvserve_module);
    ngx_http_kvserve_timer_arm(ctx, kmcf->engine_timeout);

    if (o->finish == KVS_FINISH_ERROR || o->finish == KVS_FINISH_CANCELLED) {
        ngx_log_error(NGX_LOG_ERR, ctx->r->connection->log, 0,
                      "kvserve: the engine ended choice %uD: %s", index,
                      o->finish == KVS_FINISH_ERROR ? o->error
                                                    : "cancelled");
        ngx_http_kvserve_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR,
                              o->finish == KVS_FINISH_ERROR && o->error[0]
                              ? o->error : "The generation failed.",
                              "server_error", NULL);
        return;
    }

    if (ctx->stream) {
        if (!ctx->header_sent
            && ngx_http_kvserve_stream_header(ctx) != NGX_OK)
        {
            ngx_http_kvserve_finish(ctx, NGX_ERROR);
            return;
        }

        ctx->out.len = 0;

        if (ngx_http_kvserve_stream_out(ctx, ch, index, o, &err) != NGX_OK) {
            ngx_log_error(NGX_LOG_ERR, ctx->r->connection->log, 0,
                          "kvserve: %s", err.msg);
            ngx_http_kvserve_stream_abort(ctx, "The server could not "
                                          "build the event.",
                                          "server_error", NULL);
            return;
        }

    } else if (ngx_http_kvserve_collect(ch, o) != NGX_OK) {
        ngx_http_kvserve_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR,
                              "Out of memory.", "server_error", NULL);
        return;
    }

    if (o->finish != KVS_FINISH_NONE) {
        ch->ended = 1;
        ch->finish = o->finish;
        ch->n_generated = o->n_generated;
        ctx->preempted += o->n_preempted;
        ctx->n_ended++;

        if (++part->n_ended == ctx->req.n) {
            part->sub.done = 1;
        }
    }

    if (ctx->n_ended == ctx->n_choices) {
        ngx_http_kvserve_complete(ctx);
        return;
    }

    if (ctx->stream && ctx->out.len > 0
        && ngx_http_kvserve_stream_send(ctx, 0) != NGX_OK)
    {
        ngx_http_kvserve_finish(ctx, NGX_ERROR);
    }
}


static void
ngx_http_kvserve_part_event(ngx_http_kvserve_sub_t *s, ngx_uint_t ev,
    void *msg)
{
    kvs_api_err_t                  aerr;
    ngx_int_t                      rc;
    kvs_wire_refused_t            *refused;
    ngx_http_kvserve_ctx_t        *ctx;
    ngx_http_kvserve_part_t       *part;
    ngx_http_kvserve_main_conf_t  *kmcf;

    part = s->data;
    ctx = part->ctx;

    if (ctx->finished) {
        return;
    }

    switch (ev) {

    case NGX_HTTP_KVSERVE_EV_OUT:
        ngx_http_kvserve_on_out(ctx, part, msg);
        return;

    case NGX_HTTP_KVSERVE_EV_REFUSED:
        refused = msg;
        ctx->refused = 1;

        if (ctx->header_sent) {
            ngx_http_kvserve_stream_abort(ctx, refused->msg,
                                          "invalid_request_error", NULL);
            return;
        }

        kvs_api_err_from_msg(&aerr, 400,
                             refused->code == KVS_ERANGE
                             ? "context_length_exceeded" : NULL,
                             refused->msg);
        rc = ngx_http_kvserve_api_error(ctx->r, &aerr);
        ngx_http_kvserve_finish(ctx, rc);
        return;

    case NGX_HTTP_KVSERVE_EV_LOST:
        if (!ctx->got_output) {
            /* no token yet: the next engine serves it */
            ngx_log_error(NGX_LOG_INFO, ctx->r->connection->log, 0,
                          "kvserve: engine lost before the first token: "
                          "the request waits for the next one");
            kmcf = ngx_http_get_module_main_conf(ctx->r,
                                                 ngx_http_kvserve_module);
            ngx_http_kvserve_timer_arm(ctx, kmcf->engine_wait);

            if (ngx_http_kvserve_engine_send(s) != NGX_OK) {
                ngx_http_kvserve_fail(ctx, NGX_HTTP_SERVICE_UNAVAILABLE,
                                      "The engine was lost.",
                                      "server_error", NULL);
            }
            return;
        }

        ngx_log_error(NGX_LOG_ERR, ctx->r->connection->log, 0,
                      "kvserve: engine lost during generation");
        ngx_http_kvserve_fail(ctx, NGX_HTTP_SERVICE_UNAVAILABLE,
                              "The engine was lost during generation.",
                              "server_error", "engine_lost");
        return;

    default:
        return;
    }
}


/* ---- kvserve_status ---------------------------------------------------- */

static void
ngx_http_kvserve_status_event(ngx_http_kvserve_sub_t *s, ngx_uint_t ev,
    void *msg)
{
    ngx_int_t                rc;
    uint32_t                 i;
    kvs_buf_t                body;
    kvs_wire_stats_t        *st;
    kvs_engine_stats_t      *e;
    const kvs_wire_hello_t  *hello;
    ngx_http_kvserve_ctx_t  *ctx;

    ctx = s->data;

    if (ctx->finished) {
        return;
    }

    if (ev == NGX_HTTP_KVSERVE_EV_LOST) {
        if (ngx_http_kvserve_engine_send(s) != NGX_OK) {
            ngx_http_kvserve_fail(ctx, NGX_HTTP_SERVICE_UNAVAILABLE,
                                  "The engine was lost.", "server_error",
                                  NULL);
        }
        return;
    }

    if (ev != NGX_HTTP_KVSERVE_EV_STATS) {
        return;
    }

    st = msg;
    hello = ngx_http_kvserve_engine_hello();

    ngx_memzero(&body, sizeof(body));

    rc = kvs_buf_printf(&body, "{\"engine\":{\"pid\":%u,\"incarnation\":"
                        "\"%016llx\",\"clients\":%u,\"requests\":%u},"
                        "\"worker\":{\"pid\":%d},\"models\":[",
                        hello ? (unsigned) hello->pid : 0,
                        hello ? (unsigned long long) hello->incarnation : 0,
                        (unsigned) st->clients, (unsigned) st->requests,
                        (int) ngx_pid);

    for (i = 0; rc == KVS_OK && i < st->n_models; i++) {
        e = &st->models[i].st;
        rc = kvs_buf_printf(&body, "%s{\"name\":\"%s\",\"kv_blocks\":%u,"
                            "\"kv_used\":%u,\"kv_used_max\":%u,"
                            "\"block_tokens\":%u,\"running\":%u,"
                            "\"waiting\":%u,\"requests\":%llu,"
                            "\"finished\":%llu,\"steps\":%llu,"
                            "\"prefill_tokens\":%llu,"
                            "\"decode_tokens\":%llu,\"preemptions\":%llu}",
                            i ? "," : "",
                            hello && st->models[i].index < hello->n_models
                            ? hello->models[st->models[i].index].name : "",
                            e->kv_blocks, e->kv_used, e->kv_used_max,
                            e->block_tokens, e->running, e->waiting,
                            (unsigned long long) e->requests,
                            (unsigned long long) e->finished,
                            (unsigned long long) e->steps,
                            (unsigned long long) e->prefill_tokens,
                            (unsigned long long) e->decode_tokens,
                            (unsigned long long) e->preemptions);
    }

    if (rc == KVS_OK) {
        rc = kvs_buf_append(&body, "]}", 2);
    }

    if (rc != KVS_OK) {
        kvs_buf_free(&body);
        ngx_http_kvserve_finish(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    rc = ngx_http_kvserve_send_json(ctx->r, NGX_HTTP_OK, &body);
    ngx_http_kvserve_finish(ctx, rc);
}


ngx_int_t
ngx_http_kvserve_status_handler(ngx_http_request_t *r)
{
    ngx_int_t                      rc;
    ngx_http_kvserve_ctx_t        *ctx;
    ngx_http_kvserve_main_conf_t  *kmcf;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    kmcf = ngx_http_get_module_main_conf(r, ngx_http_kvserve_module);

    if (kmcf->models->nelts == 0) {
        return ngx_http_kvserve_error_json(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                                           "No model is configured.", NULL,
                                           NULL);
    }

    ctx = ngx_http_kvserve_ctx_new(r, ngx_http_kvserve_timeout);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->stats.type = KVS_WIRE_STATS;
    ctx->stats.handler = ngx_http_kvserve_status_event;
    ctx->stats.data = ctx;

    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_kvserve_write_handler;

    ngx_http_kvserve_timer_arm(ctx, kmcf->engine_wait);

    if (ngx_http_kvserve_engine_send(&ctx->stats) != NGX_OK) {
        return ngx_http_kvserve_error_json(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                                           "No engine in this process.",
                                           NULL, NULL);
    }

    r->main->count++;

    return NGX_DONE;
}


/* ---- nginx's own 413 in OpenAI's shape ---------------------------------- */

/*
 * nginx refuses a Content-Length over client_max_body_size before the
 * content handler runs, and a chunked body while reading it, with an HTML
 * page; in kvserve locations the page becomes an OpenAI error object, and
 * nginx keeps enforcing the limit itself.
 */
static ngx_int_t
ngx_http_kvserve_header_filter(ngx_http_request_t *r)
{
    kvs_buf_t                     body;
    kvs_api_err_t                 aerr;
    ngx_http_kvserve_ctx_t       *ctx;
    ngx_http_kvserve_loc_conf_t  *klcf;

    if (r->headers_out.status != NGX_HTTP_REQUEST_ENTITY_TOO_LARGE
        || r != r->main
        || (r->headers_out.content_type.len == sizeof("application/json") - 1
            && ngx_strncmp(r->headers_out.content_type.data,
                           "application/json", 16) == 0))
    {
        return ngx_http_kvserve_next_header(r);
    }

    klcf = ngx_http_get_module_loc_conf(r, ngx_http_kvserve_module);
    if (klcf == NULL || !klcf->enable) {
        return ngx_http_kvserve_next_header(r);
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_kvserve_module);
    if (ctx == NULL) {
        ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_kvserve_ctx_t));
        if (ctx == NULL) {
            return NGX_ERROR;
        }
        ctx->r = r;
        ngx_http_set_ctx(r, ctx, ngx_http_kvserve_module);
    }

    kvs_api_err_set(&aerr, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE, NULL, NULL,
                    "The request body is larger than the server accepts.");
    ngx_memzero(&body, sizeof(body));

    if (kvs_api_err_json(&aerr, &body) != KVS_OK
        || kvs_buf_append(&body, "\n", 1) != KVS_OK)
    {
        kvs_buf_free(&body);
        return ngx_http_kvserve_next_header(r);
    }

    /* the body filter sends it: out is free in a request that never
     * reached the handler, or one that failed before any output */
    kvs_buf_free(&ctx->out);
    ctx->out = body;
    ctx->json_413 = 1;

    r->headers_out.content_length_n = body.len;
    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    return ngx_http_kvserve_next_header(r);
}


static ngx_int_t
ngx_http_kvserve_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_buf_t               *b;
    ngx_chain_t              out;
    ngx_http_kvserve_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_kvserve_module);

    if (ctx == NULL || !ctx->json_413) {
        return ngx_http_kvserve_next_body(r, in);
    }

    if (ctx->json_413_sent || in == NULL) {
        return ngx_http_kvserve_next_body(r, NULL);
    }

    ctx->json_413_sent = 1;

    b = ngx_create_temp_buf(r->pool, ctx->out.len);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->last = ngx_cpymem(b->last, ctx->out.data, ctx->out.len);
    b->last_buf = 1;
    b->last_in_chain = 1;
    kvs_buf_free(&ctx->out);

    out.buf = b;
    out.next = NULL;

    return ngx_http_kvserve_next_body(r, &out);
}


/* $kvserve_tokenize_where: inline, pool, or - (not tokenized) */
static ngx_int_t
ngx_http_kvserve_where_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_kvserve_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_kvserve_module);

    if (ctx == NULL || !ctx->completion || ctx->tok_where == 0) {
        v->data = (u_char *) "-";
        v->len = 1;

    } else if (ctx->tok_where == NGX_HTTP_KVSERVE_TOK_POOL) {
        v->data = (u_char *) "pool";
        v->len = 4;

    } else {
        v->data = (u_char *) "inline";
        v->len = 6;
    }

    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


/* Also adds $kvserve_tokenize_where: a postconfiguration variable is
 * known to the configuration (nginx resolves names at the end of the
 * http block). */
ngx_int_t
ngx_http_kvserve_filter_init(ngx_conf_t *cf)
{
    ngx_str_t             name = ngx_string("kvserve_tokenize_where");
    ngx_http_variable_t  *var;

    var = ngx_http_add_variable(cf, &name, NGX_HTTP_VAR_NOCACHEABLE);
    if (var == NULL) {
        return NGX_ERROR;
    }

    var->get_handler = ngx_http_kvserve_where_variable;

    ngx_http_kvserve_next_header = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_kvserve_header_filter;

    ngx_http_kvserve_next_body = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_kvserve_body_filter;

    return NGX_OK;
}
