/*
 * ngx_http_kvserve_answers: the last phase of a completion request: the
 * engine's answers on its parts (OUT frames, refusals, a lost engine)
 * turned into SSE events, the stream's header sent with the first, or
 * into one collected JSON body (in Anthropic's shapes for a Messages
 * request: ngx_http_kvserve_messages.c).  Sending, failing and
 * finishing are the request core's (ngx_http_kvserve_request.c).
 *
 * Invariants:
 *  - the response header goes out only with the first output, so that a
 *    request the engine lost before any token can be sent again to the
 *    next engine (bounded by kvserve_engine_wait), or refused with a
 *    plain JSON error;
 *  - after the header, failures end the stream with an SSE error event
 *    and [DONE]: the status is already 200;
 *  - a request that completes is recorded in the shared metrics before
 *    its last bytes are sent, so a scrape that follows the response
 *    sees it.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_completions.h"
#include "ngx_http_kvserve_guard.h"


/* The stream's header, with the first output: SSE, never buffered, and
 * Server-Timing as a trailer where the client takes trailers. */
static ngx_int_t
ngx_http_kvserve_stream_header(ngx_http_kvserve_ctx_t *ctx)
{
    ngx_int_t            rc;
    ngx_http_request_t  *r;

    r = ctx->r;

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = -1;
    ngx_str_set(&r->headers_out.content_type, "text/event-stream");
    r->headers_out.content_type_len = r->headers_out.content_type.len;

    /* a proxy in front must not hold events back */
    if (ngx_http_kvserve_add_header(r, "Cache-Control", "no-cache")
        != NGX_OK
        || ngx_http_kvserve_add_header(r, "X-Accel-Buffering", "no")
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* the hops are known at the end: a trailer, for a client that says
     * it takes them (chunked: HTTP/1.1) */
    if (r->headers_in.te != NULL && r->http_version >= NGX_HTTP_VERSION_11
        && ngx_strlcasestrn(r->headers_in.te->value.data,
                            r->headers_in.te->value.data
                            + r->headers_in.te->value.len,
                            (u_char *) "trailers", 8 - 1)
           != NULL)
    {
        if (ngx_http_kvserve_add_header(r, "Trailer", "Server-Timing")
            != NGX_OK)
        {
            return NGX_ERROR;
        }

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


/* ---- the engine's answers ---------------------------------------------- */

static ngx_int_t
ngx_http_kvserve_stream_out(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_choice_t *ch, uint32_t index, kvs_engine_out_t *o,
    kvs_err_t *err)
{
    int                 rc;
    kvs_api_choice_t    c;

    if (ctx->req.tool_syntax != KVS_TOOL_SYN_NONE) {
        return ngx_http_kvserve_tools_stream(ctx, ch, index, o, err);
    }

    ngx_memzero(&c, sizeof(c));
    c.index = index;

    if (ctx->chat) {
        if (!ch->started) {
            c.role = 1;
            c.text = "";
            rc = ngx_http_kvserve_chunk(ctx, &c, err);
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
            rc = ngx_http_kvserve_chunk(ctx, &c, err);
            if (rc != KVS_OK) {
                return NGX_ERROR;
            }
        }

        if (kvs_finish_answered(o->finish)) {
            c.text = NULL;
            c.len = 0;
            c.lp = NULL;
            c.n_lp = 0;
            c.finish = o->finish;
            rc = ngx_http_kvserve_chunk(ctx, &c, err);
            if (rc != KVS_OK) {
                return NGX_ERROR;
            }
        }

        ch->started = 1;

        return NGX_OK;
    }

    ch->started = 1;

    if (o->text.len == 0 && o->n_lp == 0
        && !kvs_finish_answered(o->finish))
    {
        return NGX_OK;
    }

    c.text = o->text.len ? (const char *) o->text.data : "";
    c.len = o->text.len;
    c.lp = o->lp;
    c.n_lp = o->n_lp;
    c.pos = &ch->pos;
    if (kvs_finish_answered(o->finish)) {
        c.finish = o->finish;
    }

    rc = ngx_http_kvserve_chunk(ctx, &c, err);

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
    u.cached_tokens = ctx->cached_tokens;
    u.cached_tier = ctx->cached_tier;
    u.cached_host = ctx->cached_host;
    u.tiered = ctx->model == NULL ? 0
               : (ctx->model->tier != NULL ? KVS_API_TIER_DISK : 0)
                 | (ctx->model->thost != NULL ? KVS_API_TIER_HOST : 0);
    u.cache_creation_tokens = ctx->cache_created;
    u.breakpoints = ctx->req.n_breaks > 0;
    for (i = 0; i < ctx->n_choices; i++) {
        u.completion_tokens += ctx->choices[i].n_generated;
    }

    /* counted before the last bytes go: a scrape that follows the
     * response sees this request */
    ctx->t.end_ns = kvs_now_ns();
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

        if (ctx->anthropic) {
            (void) ngx_http_kvserve_msg_complete(ctx, NULL, &u);
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

        if (ctx->req.tool_syntax != KVS_TOOL_SYN_NONE
            && ngx_http_kvserve_tools_body(ctx, ch->text.data, ch->text.len,
                                           &c[i])
               != NGX_OK)
        {
            ngx_http_kvserve_finish(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }
    }

    if (ctx->anthropic) {
        (void) ngx_http_kvserve_msg_complete(ctx, &c[0], &u);
        return;
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

    now = kvs_now_ns();
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


/* The engine's count of the KV the choice held (cumulative in each of
 * its frames): the request's sum moves by what it grew, and a frame with
 * the finish makes the choice's count whole. */
static void
ngx_http_kvserve_on_kv(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_choice_t *ch, kvs_wire_out_t *wo)
{
    uint64_t  add;

    if (wo->out.kv_block_us > ch->kv_block_us) {
        add = wo->out.kv_block_us - ch->kv_block_us;
        ctx->kv_block_us = add > UINT64_MAX - ctx->kv_block_us
                           ? UINT64_MAX : ctx->kv_block_us + add;
        ch->kv_block_us = wo->out.kv_block_us;
    }

    if (wo->t.now_ns > ctx->kv_ns) {
        ctx->kv_ns = wo->t.now_ns;
    }

    if (wo->out.finish != KVS_FINISH_NONE) {
        ctx->kv_done++;
    }
}


static void
ngx_http_kvserve_on_out(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_part_t *part, kvs_wire_out_t *wo)
{
    uint32_t                        index;
    kvs_err_t                       err;
    ngx_uint_t                      fault;
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

    ngx_http_kvserve_on_kv(ctx, ch, wo);
    ngx_http_kvserve_on_times(ctx, ch, wo);
    ngx_http_kvserve_cache_out(ctx, part, o);
    ngx_http_kvserve_msg_collect(ctx, ch, o);

    kmcf = ngx_http_get_module_main_conf(ctx->r, ngx_http_kvserve_module);
    ngx_http_kvserve_timer_arm(ctx, kmcf->engine_timeout);

    if (o->finish == KVS_FINISH_ERROR && o->retry_after != 0) {
        ngx_http_kvserve_fail_busy(ctx, o);
        return;
    }

    /* the request's own fault, found while generating (its grammar
     * passed a run-time bound): a 400, or that error event in a stream
     * (Anthropic's shape on /v1/messages: ngx_http_kvserve_fail).  A
     * stream first sends the tokens that came with the fault: the engine
     * hands over every token made since the worker's last read, and what
     * a stream shows must not hang on when that read came */
    fault = 0;

    if (o->finish == KVS_FINISH_ERROR && o->client_fault) {
        ngx_log_error(NGX_LOG_INFO, ctx->r->connection->log, 0,
                      "kvserve: the engine ended choice %uD for the "
                      "request's fault: %s", index, o->error);

        if (!ctx->stream || o->n_tokens == 0) {
            ngx_http_kvserve_fail(ctx, NGX_HTTP_BAD_REQUEST, o->error,
                                  "invalid_request_error", NULL);
            return;
        }

        fault = 1;
        o->finish = KVS_FINISH_NONE;
    }

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

    /* kvserve_guard output=: the text the guard lets out, or a stop */
    if (ngx_http_kvserve_guard_out(ctx, index, o) != NGX_OK) {
        ngx_http_kvserve_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR,
                              "The output could not be checked against "
                              "this server's content policy.",
                              "server_error", NULL);
        return;
    }

    if (o->finish == KVS_FINISH_CONTENT_FILTER) {
        part->filtered = 1;
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

    if (fault) {
        if (ctx->out.len > 0 && ngx_http_kvserve_stream_send(ctx, 0) != NGX_OK)
        {
            ngx_http_kvserve_finish(ctx, NGX_ERROR);
            return;
        }

        ngx_http_kvserve_fail(ctx, NGX_HTTP_BAD_REQUEST, o->error,
                              "invalid_request_error", NULL);
        return;
    }

    if (o->finish != KVS_FINISH_NONE) {
        ch->ended = 1;
        ch->finish = o->finish;
        ch->n_generated = o->n_generated;
        ctx->preempted += o->n_preempted;
        ctx->n_ended++;

        if (++part->n_ended == ctx->req.n) {
            if (part->filtered) {
                /* the engine still generates a stopped choice: CANCEL */
                ngx_http_kvserve_engine_forget(&part->sub);
            } else {
                part->sub.done = 1;
            }
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


void
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
                ngx_http_kvserve_fail_unavailable(ctx);
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
