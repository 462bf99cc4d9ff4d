/*
 * ngx_http_kvserve_messages: what the Messages endpoints (POST
 * /v1/messages and /v1/messages/count_tokens, ctx->anthropic) do
 * differently from a chat completion, beside its phases: the
 * anthropic-version header, the stream's events and the whole body in
 * Anthropic's shapes (kvs_api_msg.h), the stop sequence that ended an
 * output, and count_tokens' answer.  Everything else (parsing into the
 * chat request, rendering, kvserve_limit, the engine, metrics, timing
 * variables, kvserve_route) is the chat route's own pipeline; errors
 * take Anthropic's shape in the request core, by the route.
 *
 * Invariants: a chat or completions request never comes here but
 * through ngx_http_kvserve_chunk(), which writes the chat route's chunk
 * for it unchanged; the stop sequence is looked for only when the
 * request has some and its choice ended on STOP, from the text the
 * generated tokens make past the output (the engine cuts the stop off).
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_completions.h"


ngx_int_t
ngx_http_kvserve_msg_version(ngx_http_request_t *r, kvs_api_err_t *aerr)
{
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len == sizeof("anthropic-version") - 1
            && ngx_strncasecmp(h[i].key.data, (u_char *) "anthropic-version",
                               h[i].key.len) == 0)
        {
            return kvs_api_msg_version((const char *) h[i].value.data,
                                       h[i].value.len, aerr) == KVS_OK
                   ? NGX_OK : NGX_ERROR;
        }
    }

    kvs_api_msg_version(NULL, 0, aerr);

    return NGX_ERROR;
}


int
ngx_http_kvserve_chunk(ngx_http_kvserve_ctx_t *ctx, const kvs_api_choice_t *c,
    kvs_err_t *err)
{
    kvs_api_usage_t  u;

    if (!ctx->anthropic) {
        return kvs_api_resp_chunk(&ctx->out, &ctx->head, c, 1,
                                  ctx->req.include_usage, ctx->model->vocab,
                                  err);
    }

    /* message_start tells the prompt's figures: known by the first
     * output, whose frame brought the cache's */
    if (!ctx->msg.started) {
        ngx_memzero(&u, sizeof(u));
        u.prompt_tokens = ctx->prompt_tokens;
        u.cached_tokens = ctx->cached_tokens;
        u.cache_creation_tokens = ctx->cache_created;
        kvs_api_msg_usage(&ctx->msg.usage, &u);
    }

    return kvs_api_msg_sse(&ctx->msg, &ctx->out, &ctx->head, c, err);
}


/*
 * Which stop sequence ended choice ch: its generated tokens (o's, once
 * the choice is over) detokenized past the prompt, from where its
 * output ends.  Only the choice's own tokens are read: a request with
 * stop sequences collects them (ngx_http_kvserve_msg_collect).
 */
void
ngx_http_kvserve_msg_collect(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_choice_t *ch, const kvs_engine_out_t *o)
{
    size_t     i;
    kvs_err_t  err;

    if (!ctx->anthropic || ctx->req.n_stop == 0) {
        return;
    }

    ch->msg_out += o->text.len;

    /* the choice's text past the prompt, as the engine's detokenizer
     * writes it before the stop strings are cut (ch->pos is unused on
     * this route: it has no logprobs) */
    for (i = 0; i < o->n_tokens; i++) {
        if (kvs_detok_push(&ch->pos.detok, o->tokens[i], &ch->msg_full,
                           &err) != KVS_OK)
        {
            ch->msg_full.len = 0;
            ch->msg_out = 0;
            return;
        }
    }

    if (o->finish == KVS_FINISH_STOP && ch->msg_full.len > ch->msg_out) {
        ctx->msg_stop = kvs_api_msg_stop_which(
                            &ctx->req,
                            (const char *) ch->msg_full.data + ch->msg_out,
                            ch->msg_full.len - ch->msg_out);
    }
}


ngx_int_t
ngx_http_kvserve_msg_complete(ngx_http_kvserve_ctx_t *ctx,
    const kvs_api_choice_t *c, const kvs_api_usage_t *u)
{
    ngx_int_t            rc;
    kvs_err_t            err;
    kvs_api_msg_usage_t  mu;

    if (ctx->stream) {
        if (kvs_api_msg_sse_end(&ctx->msg, &ctx->out, &ctx->head,
                                u->completion_tokens, &ctx->req,
                                ctx->msg_stop, &err) != KVS_OK
            || ngx_http_kvserve_stream_send(ctx, 1) != NGX_OK)
        {
            ngx_http_kvserve_finish(ctx, NGX_ERROR);
            return NGX_ERROR;
        }

        ngx_http_kvserve_finish(ctx, NGX_OK);
        return NGX_OK;
    }

    kvs_api_msg_usage(&mu, u);
    ctx->out.len = 0;

    if (kvs_api_msg_body(&ctx->out, &ctx->head, c, &mu, &ctx->req,
                         ctx->msg_stop, &err) != KVS_OK)
    {
        ngx_log_error(NGX_LOG_ERR, ctx->r->connection->log, 0,
                      "kvserve: %s", err.msg);
        ngx_http_kvserve_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR,
                              "The server could not build the response.",
                              "server_error", NULL);
        return NGX_ERROR;
    }

    if (ngx_http_kvserve_server_timing(ctx, &ctx->r->headers_out.headers)
        != NGX_OK)
    {
        ngx_http_kvserve_finish(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return NGX_ERROR;
    }

    /* send_json takes the buffer over */
    rc = ngx_http_kvserve_send_json(ctx->r, NGX_HTTP_OK, &ctx->out);
    ngx_memzero(&ctx->out, sizeof(kvs_buf_t));
    ngx_http_kvserve_finish(ctx, rc);

    return NGX_OK;
}


/* count_tokens: the prompt's tokens, as a request would be rendered;
 * nothing is admitted nor generated. */
void
ngx_http_kvserve_msg_count(ngx_http_kvserve_ctx_t *ctx)
{
    ngx_int_t  rc;
    kvs_buf_t  body;

    ngx_memzero(&body, sizeof(body));

    if (kvs_api_msg_count_json(&body, ctx->prompt_tokens) != KVS_OK) {
        kvs_buf_free(&body);
        ngx_http_kvserve_finish(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    rc = ngx_http_kvserve_send_json(ctx->r, NGX_HTTP_OK, &body);
    ngx_http_kvserve_finish(ctx, rc);
}
