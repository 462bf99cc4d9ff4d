/*
 * ngx_http_kvserve_tools: a chat choice whose output may be tool calls
 * (the request had tools and the model's template teaches a syntax:
 * req.tool_syntax), turned into OpenAI's message content and tool_calls,
 * whole or streamed.
 *
 * A whole body: the output is parsed by kvs_tool_parse() once it is
 * complete: all or nothing, so a client never gets half of what the
 * model meant as calls (a call cut by max_tokens is text, finish
 * "length").  A stream: the bytes that are content whatever follows
 * (kvs_tool_parse_hold) go out as content deltas at once, and the calls
 * as kvs_tool_stream reads them in the grammar's layout: a delta with a
 * call's index, id and name as soon as the name is complete, then its
 * arguments in pieces, compacted, as they are generated (a call that
 * max_tokens cuts is then sent as far as it got, finish "length", as
 * OpenAI streams do).  Should the reader fail on an output (it cannot
 * under the grammar), the end falls back to the whole output's parse,
 * sending its calls at once or the held text as content.
 *
 * Functionary v3.2's "all\n" recipient line is never content, whatever
 * the finish (kvs_tool_parse_skip), and a request without tools (or
 * tool_choice "none") to such a model comes here too, as text whose
 * recipient line is dropped (req.tool_text_only); so do Command R7B's
 * <|START_RESPONSE|> and <|END_RESPONSE|> around its content.
 *
 * Each call gets a fresh id "call_" + 24 base-62 characters.  Names and
 * arguments are copied into the request's pool.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_completions.h"
#include "api/kvs_tool_parse.h"


static uint64_t  ngx_http_kvserve_tools_rng;


/* A fresh call id in the request's pool; NULL when out of memory. */
static char *
ngx_http_kvserve_tools_id(ngx_http_kvserve_ctx_t *ctx)
{
    char  *id;

    id = ngx_pnalloc(ctx->r->pool, KVS_API_CALL_ID_MAX);
    if (id == NULL) {
        return NULL;
    }

    if (ngx_http_kvserve_tools_rng == 0) {
        ngx_http_kvserve_tools_rng = ngx_http_kvserve_random64() | 1;
    }

    kvs_api_resp_call_id(id, &ngx_http_kvserve_tools_rng);

    return id;
}


/* The calls parsed out of text[len] into the pool: *calls NULL and *n 0
 * when the output is not calls; the content is text[*content_at..
 * *content_len) either way (Functionary v3.2's "all\n" is not). */
static ngx_int_t
ngx_http_kvserve_tools_parse(ngx_http_kvserve_ctx_t *ctx, const u_char *text,
    size_t len, kvs_api_tool_call_t **calls, size_t *n, size_t *content_at,
    size_t *content_len)
{
    char                 *id, *p;
    size_t                i, nl;
    kvs_err_t             err;
    kvs_tool_parsed_t     parsed;
    kvs_api_tool_call_t  *t;

    *calls = NULL;
    *n = 0;
    *content_at = 0;
    *content_len = len;

    if (ctx->req.tool_text_only) {
        *content_at = kvs_tool_parse_skip(
                          (kvs_tool_syntax_t) ctx->req.tool_syntax,
                          (const char *) text, len);
        return NGX_OK;
    }

    if (kvs_tool_parse((kvs_tool_syntax_t) ctx->req.tool_syntax,
                       (const char *) text, len, &parsed, &err)
        != KVS_OK)
    {
        ngx_log_error(NGX_LOG_ERR, ctx->r->connection->log, 0,
                      "kvserve: tool calls: %s", err.msg);
        return NGX_ERROR;
    }

    *content_at = parsed.content_at;
    *content_len = parsed.content_len;

    if (parsed.n_calls == 0) {
        kvs_tool_parsed_free(&parsed);
        return NGX_OK;
    }

    t = ngx_pcalloc(ctx->r->pool, parsed.n_calls * sizeof(*t));
    if (t == NULL) {
        kvs_tool_parsed_free(&parsed);
        return NGX_ERROR;
    }

    for (i = 0; i < parsed.n_calls; i++) {
        nl = ngx_strlen(parsed.calls[i].name);
        id = ngx_http_kvserve_tools_id(ctx);
        p = ngx_pnalloc(ctx->r->pool, nl + 1
                                      + parsed.calls[i].arguments_len + 1);
        if (id == NULL || p == NULL) {
            kvs_tool_parsed_free(&parsed);
            return NGX_ERROR;
        }

        t[i].index = (uint32_t) i;
        t[i].id = id;
        t[i].name = p;
        ngx_memcpy(p, parsed.calls[i].name, nl + 1);
        p += nl + 1;
        ngx_memcpy(p, parsed.calls[i].arguments,
                   parsed.calls[i].arguments_len);
        p[parsed.calls[i].arguments_len] = '\0';
        t[i].args = p;
        t[i].args_len = parsed.calls[i].arguments_len;
    }

    *calls = t;
    *n = parsed.n_calls;
    *content_len = parsed.content_len;
    kvs_tool_parsed_free(&parsed);

    return NGX_OK;
}


ngx_int_t
ngx_http_kvserve_tools_body(ngx_http_kvserve_ctx_t *ctx, const u_char *text,
    size_t len, kvs_api_choice_t *c)
{
    size_t                content_at, content_len;
    kvs_api_tool_call_t  *calls;

    if (c->finish != KVS_FINISH_STOP) {
        /* a call that max_tokens cut is text: not parsed, but a
         * recipient line is still no content */
        content_at = kvs_tool_parse_skip(
                         (kvs_tool_syntax_t) ctx->req.tool_syntax,
                         (const char *) text, len);
        c->text += content_at;
        c->len -= content_at;
        return NGX_OK;
    }

    if (ngx_http_kvserve_tools_parse(ctx, text, len, &calls, &c->n_calls,
                                     &content_at, &content_len)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (c->n_calls > 0) {
        c->calls = calls;
        c->tool_finish = 1;
        /* OpenAI's message content is null beside calls with no text */
        c->text = content_len > content_at
                  ? (const char *) text + content_at : NULL;
        c->len = content_len - content_at;

    } else if (content_at > 0 || content_len < len) {
        c->text = (const char *) text + content_at;
        c->len = content_len - content_at;
    }

    return NGX_OK;
}


/* The stream's end for a choice: what was held, as calls or content,
 * then the finish chunk. */
static ngx_int_t
ngx_http_kvserve_tools_end(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_choice_t *ch, kvs_api_choice_t *c, kvs_finish_t finish,
    kvs_err_t *err)
{
    size_t                i, n, content_at, content_len;
    kvs_api_tool_call_t   piece, *calls;

    /* a call that max_tokens cut is text, as in a whole body */
    calls = NULL;
    n = 0;
    content_len = ch->text.len;
    content_at = kvs_tool_parse_skip((kvs_tool_syntax_t) ctx->req.tool_syntax,
                                     (const char *) ch->text.data,
                                     ch->text.len);

    if (finish == KVS_FINISH_STOP
        && ngx_http_kvserve_tools_parse(ctx, ch->text.data, ch->text.len,
                                        &calls, &n, &content_at,
                                        &content_len)
           != NGX_OK)
    {
        kvs_err_set(err, KVS_ENOMEM, "tool calls: out of memory");
        return NGX_ERROR;
    }

    if (ch->sent < content_at) {
        ch->sent = content_at;
    }

    if (content_len > ch->sent) {
        c->text = (const char *) ch->text.data + ch->sent;
        c->len = content_len - ch->sent;
        if (ngx_http_kvserve_chunk(ctx, c, err) != KVS_OK) {
            return NGX_ERROR;
        }
        ch->sent = content_len;
    }

    c->text = NULL;
    c->len = 0;

    for (i = 0; i < n; i++) {
        /* the call's head (index, id, name), then its arguments */
        piece = calls[i];
        piece.args = "";
        piece.args_len = 0;
        c->calls = &piece;
        c->n_calls = 1;
        if (ngx_http_kvserve_chunk(ctx, c, err) != KVS_OK) {
            return NGX_ERROR;
        }

        piece = calls[i];
        piece.id = NULL;
        if (ngx_http_kvserve_chunk(ctx, c, err) != KVS_OK) {
            return NGX_ERROR;
        }
    }

    c->calls = NULL;
    c->n_calls = 0;
    c->finish = finish;
    c->tool_finish = n > 0;

    return ngx_http_kvserve_chunk(ctx, c, err) == KVS_OK
           ? NGX_OK : NGX_ERROR;
}


/* The calls kvs_tool_stream reads in the text so far, sent as they
 * come: a call's head (index, id, name) once its name is complete, then
 * its arguments in pieces. */
static ngx_int_t
ngx_http_kvserve_tools_pieces(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_choice_t *ch, kvs_api_choice_t *c, kvs_err_t *err)
{
    int                   ev;
    char                 *id, *name;
    kvs_buf_t             args;
    ngx_int_t             rc;
    kvs_tool_delta_t      d;
    kvs_api_tool_call_t   piece;

    ngx_memzero(&args, sizeof(args));
    rc = NGX_OK;

    for ( ;; ) {
        ev = kvs_tool_stream_next(&ch->ts, (const char *) ch->text.data,
                                  ch->text.len, &d, &args);

        if (ev < 0) {
            kvs_err_set(err, KVS_ENOMEM, "tool calls: out of memory");
            rc = NGX_ERROR;
            break;
        }

        if (ev == KVS_TS_EV_NONE || ev == KVS_TS_EV_FAIL) {
            break;
        }

        ngx_memzero(&piece, sizeof(piece));
        piece.index = d.index;
        piece.args = "";

        if (ev == KVS_TS_EV_HEAD) {
            id = ngx_http_kvserve_tools_id(ctx);
            name = ngx_pnalloc(ctx->r->pool, d.name_len + 1);
            if (id == NULL || name == NULL) {
                kvs_err_set(err, KVS_ENOMEM, "tool calls: out of memory");
                rc = NGX_ERROR;
                break;
            }

            ngx_memcpy(name, d.name, d.name_len);
            name[d.name_len] = '\0';
            piece.id = id;
            piece.name = name;

        } else {
            piece.args = (const char *) args.data;
            piece.args_len = args.len;
        }

        c->calls = &piece;
        c->n_calls = 1;

        if (ngx_http_kvserve_chunk(ctx, c, err) != KVS_OK) {
            rc = NGX_ERROR;
            break;
        }

        args.len = 0;
    }

    c->calls = NULL;
    c->n_calls = 0;
    kvs_buf_free(&args);

    return rc;
}


ngx_int_t
ngx_http_kvserve_tools_stream(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_choice_t *ch, uint32_t index, kvs_engine_out_t *o,
    kvs_err_t *err)
{
    size_t              hold, skip;
    kvs_api_choice_t    c;

    ngx_memzero(&c, sizeof(c));
    c.index = index;

    if (!ch->started) {
        c.role = 1;
        c.text = "";
        if (ngx_http_kvserve_chunk(ctx, &c, err) != KVS_OK) {
            return NGX_ERROR;
        }
        c.role = 0;
        c.text = NULL;
        ch->started = 1;
    }

    if (!ch->ts_on) {
        kvs_tool_stream_init(&ch->ts,
                             (kvs_tool_syntax_t) ctx->req.tool_syntax);
        ch->ts_on = 1;
    }

    if (o->text.len > 0
        && kvs_buf_append(&ch->text, o->text.data, o->text.len) != KVS_OK)
    {
        kvs_err_set(err, KVS_ENOMEM, "tool calls: out of memory");
        return NGX_ERROR;
    }

    hold = ctx->req.tool_text_only
           ? kvs_tool_parse_hold_text(
                 (kvs_tool_syntax_t) ctx->req.tool_syntax,
                 (const char *) ch->text.data, ch->text.len)
           : kvs_tool_parse_hold((kvs_tool_syntax_t) ctx->req.tool_syntax,
                                 (const char *) ch->text.data,
                                 ch->text.len);
    skip = kvs_tool_parse_skip((kvs_tool_syntax_t) ctx->req.tool_syntax,
                               (const char *) ch->text.data, ch->text.len);

    /* bytes that are never content (a recipient line) are never sent */
    if (ch->sent < skip) {
        ch->sent = skip;
    }

    /* content that no call can follow any more, with this frame's
     * logprobs (alone, in a delta without content, when none is sure) */
    c.lp = o->lp;
    c.n_lp = o->n_lp;
    if (hold > ch->sent) {
        c.text = (const char *) ch->text.data + ch->sent;
        c.len = hold - ch->sent;
        ch->sent = hold;
    }

    if ((c.text != NULL || c.n_lp > 0)
        && ngx_http_kvserve_chunk(ctx, &c, err) != KVS_OK)
    {
        return NGX_ERROR;
    }

    c.text = NULL;
    c.len = 0;
    c.lp = NULL;
    c.n_lp = 0;

    if (!ctx->req.tool_text_only
        && ngx_http_kvserve_tools_pieces(ctx, ch, &c, err) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (!kvs_finish_answered(o->finish)) {
        return NGX_OK;
    }

    /* calls already streamed end the stream as they are (a call that
     * max_tokens cut stays cut: "length"); else the whole output decides */
    if (ch->ts.n_calls > 0) {
        c.finish = o->finish;
        c.tool_finish = o->finish == KVS_FINISH_STOP;

        return ngx_http_kvserve_chunk(ctx, &c, err) == KVS_OK
               ? NGX_OK : NGX_ERROR;
    }

    return ngx_http_kvserve_tools_end(ctx, ch, &c, o->finish, err);
}
