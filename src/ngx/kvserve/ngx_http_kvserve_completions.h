/*
 * ngx_http_kvserve_completions.h: the phases of a completion request
 * (ngx_http_kvserve_request.h draws the layers), and the prefix cache
 * helpers below them; for the request's own files only: the handler,
 * the phases (kvserve_limit's admission among them), kvserve_status and
 * kvserve_route.
 *
 * A request is read and prepared in _completions.c, rendered and
 * tokenized in _tokenize.c (inline, or in a thread pool task), admitted
 * by kvserve_limit (src/ngx/limit), submitted from _completions.c and
 * answered from the engine's events in _answers.c.  A phase calls the
 * phases after it and the core, never one before it: what comes back
 * (tokenized, admitted after a delay, an engine's event) comes back
 * through a function pointer its caller gave.
 */

#ifndef NGX_HTTP_KVSERVE_COMPLETIONS_H
#define NGX_HTTP_KVSERVE_COMPLETIONS_H

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_request.h"
#include "api/kvs_api.h"
#include "api/kvs_api_req.h"
#include "tokenizer/kvs_chat.h"
#include "tokenizer/kvs_tok.h"
#include "guard/kvs_guard.h"


/* What tokenizing calls when it is done, on the event loop. */
typedef void (*ngx_http_kvserve_tok_done_pt)(ngx_http_kvserve_ctx_t *ctx);

/*
 * Rendering and tokenizing a request's prompts, inline or as a thread
 * pool task.  The task reads req and vocab and writes the rest; the
 * event loop reads the results once the task is back.
 */
struct ngx_http_kvserve_tok_job_s {
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
    size_t                    max_ids;     /* the model's context: a part
                                              past it is refused before
                                              all of it is tokenized */
    ngx_int_t                 rc;
    kvs_api_err_t             aerr;        /* when rc is NGX_ERROR */
    uint64_t                  post_ns;     /* CLOCK_MONOTONIC: posted, */
    uint64_t                  start_ns;    /* run by a pool thread, */
    uint64_t                  end_ns;      /* done there */
    kvs_engine_pin_t          pins[KVS_ENGINE_MAX_PINS];  /* chat: its
                                              cache_control breakpoints */
    uint32_t                  n_pins;
    ngx_http_kvserve_tok_done_pt  done;    /* tokenized, on the event
                                              loop */
    ngx_uint_t                tokenize;    /* for POST /tokenize, 1 + the
                                              answer's KVS_API_TOK_*
                                              shape (0: a completion): text
                                              with tok_flags, chat with
                                              add_gen, no context limit,
                                              an empty result allowed */
    unsigned                  tok_flags;   /* KVS_TOK_ADD_BOS, _SPECIAL */
    unsigned                  add_gen;     /* add_generation_prompt */
    /* kvserve_guard input=reject (ngx_http_kvserve_guard.c) */
    const kvs_guard_t        *guard;       /* the rendered text's rules */
    int32_t                   guard_rule;  /* the one that refused it, or
                                              -1 */
};

/* ---- reading and preparing (ngx_http_kvserve_completions.c) ---------- */

/* The handler's entry for the POST endpoints: kind is
 * NGX_HTTP_KVSERVE_POST_* (chat, completions, and Anthropic's Messages
 * and count_tokens, which are chat requests). */
ngx_int_t ngx_http_kvserve_completions(ngx_http_request_t *r,
    ngx_uint_t kind);
/* ctx's kind flags (chat, anthropic, count_only) for kind. */
void ngx_http_kvserve_set_kind(ngx_http_kvserve_ctx_t *ctx, ngx_uint_t kind);
/* The body parsed into ctx->req as ctx's kind says. */
ngx_int_t ngx_http_kvserve_parse(ngx_http_kvserve_ctx_t *ctx, u_char *data,
    size_t len, kvs_api_err_t *aerr);
/* The body in one piece (a pool copy when in several buffers or a
 * file); kvserve_route reads it too. */
ngx_int_t ngx_http_kvserve_body_bytes(ngx_http_request_t *r, u_char **data,
    size_t *len);
/* The parsed request's model, parts and tokenizing job (ctx->tok), its
 * cache scope and tenant; NGX_ERROR with *aerr for a request refused
 * outright.  kvserve_route prepares the same way. */
ngx_int_t ngx_http_kvserve_prepare(ngx_http_kvserve_ctx_t *ctx,
    kvs_api_err_t *aerr);

/* Logs, once per worker for each name, the top-level fields of a parsed
 * request that the parser does not read (ngx_http_kvserve_unknown.c). */
void ngx_http_kvserve_log_unknown(ngx_http_request_t *r,
    const kvs_api_req_t *req);

/* ---- POST /tokenize and /detokenize (ngx_http_kvserve_tokens.c) ------- */

/* POST /tokenize or /detokenize, as route_tokens() says. */
ngx_int_t ngx_http_kvserve_tokens(ngx_http_request_t *r);

/* The template of ctx's chat request on ctx->model: the model's
 * chat_template=, else the location's kvserve_chat_template, else the
 * model's own; 400 for a model without one.  /tokenize resolves it the
 * same way. */
ngx_int_t ngx_http_kvserve_chat_resolve(ngx_http_kvserve_ctx_t *ctx,
    kvs_chat_t *chat, kvs_api_err_t *aerr);

/* ---- rendering and tokenizing (ngx_http_kvserve_tokenize.c) ----------- */

/* Tokenizes a prepared request's prompts, inline or, for prompt text
 * over kvserve_tokenize_threshold, in the kvserve_tokenize_threads pool;
 * then done(ctx), on the event loop.  Called by _completions.c and
 * kvserve_route. */
void ngx_http_kvserve_tok_start(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_tok_done_pt done);

/* ---- the engine's answers (ngx_http_kvserve_answers.c) ---------------- */

/* The handler of a part's messages to the engine (set by
 * _completions.c). */
void ngx_http_kvserve_part_event(ngx_http_kvserve_sub_t *s, ngx_uint_t ev,
    void *msg);

/* ---- the tenant (ngx_http_kvserve_tenant.c) -------------------------- */

/* out: the 32 hex digits of the XXH3-128 of tag and v (tag "": of v) */
ngx_int_t ngx_http_kvserve_hash_tagged(ngx_pool_t *pool, const char *tag,
    ngx_str_t *v, ngx_str_t *out);
ngx_int_t ngx_http_kvserve_hash_hex(ngx_pool_t *pool, ngx_str_t *v,
    ngx_str_t *out);
/* id: the hash of the request's kvserve_tenant; len 0: it has none */
ngx_int_t ngx_http_kvserve_tenant_id(ngx_http_request_t *r, ngx_str_t *id);
/* ctx->tenant_id, and ctx->tenant: the fair share's (the tenant's id,
 * else kvserve_limit's key, else the client address) */
ngx_int_t ngx_http_kvserve_tenant(ngx_http_kvserve_ctx_t *ctx);

/* ---- Anthropic's Messages (ngx_http_kvserve_messages.c) --------------
 *
 * Beside the phases: the chat route's output written in Anthropic's
 * shapes when ctx->anthropic. */
/* NGX_OK, or NGX_ERROR with the 400 naming the header in *aerr */
ngx_int_t ngx_http_kvserve_msg_version(ngx_http_request_t *r,
    kvs_api_err_t *aerr);
/* A chat delta as the stream's events: the chat route's chunk, or the
 * Messages events; KVS_OK or a kvs_err_t code. */
int ngx_http_kvserve_chunk(ngx_http_kvserve_ctx_t *ctx,
    const kvs_api_choice_t *c, kvs_err_t *err);
/* An OUT frame of choice ch: what tells the stop sequence that ended it */
void ngx_http_kvserve_msg_collect(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_choice_t *ch, const kvs_engine_out_t *o);
/* Every choice ended: the stream's last events, or the whole message
 * (c: the one choice, u: the chat route's usage); the request ends. */
ngx_int_t ngx_http_kvserve_msg_complete(ngx_http_kvserve_ctx_t *ctx,
    const kvs_api_choice_t *c, const kvs_api_usage_t *u);
/* count_tokens: {"input_tokens": N} once tokenized; the request ends. */
void ngx_http_kvserve_msg_count(ngx_http_kvserve_ctx_t *ctx);

/* ---- the prefix cache (ngx_http_kvserve_cache.c) ---------------------
 *
 * Below the phases: cache scopes (after the tenant), pins and figures. */
/* 64 bits from getrandom(), or from nginx's clock and ngx_random(). */
uint64_t ngx_http_kvserve_random64(void);

/* Chat output in a tool-call syntax (req.tool_syntax set):
 * ngx_http_kvserve_tools_body() fills a finished choice's content and
 * tool_calls from text[len] (allocated from the request's pool);
 * ngx_http_kvserve_tools_stream() sends what an OUT frame makes sure
 * (ngx_http_kvserve_tools.c). */
ngx_int_t ngx_http_kvserve_tools_body(ngx_http_kvserve_ctx_t *ctx,
    const u_char *text, size_t len, kvs_api_choice_t *c);
ngx_int_t ngx_http_kvserve_tools_stream(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_choice_t *ch, uint32_t index, kvs_engine_out_t *o,
    kvs_err_t *err);

ngx_int_t ngx_http_kvserve_cache_scope(ngx_http_kvserve_ctx_t *ctx);
int ngx_http_kvserve_cache_pins(ngx_http_kvserve_tok_job_t *job,
    kvs_tok_ctx_t *tok, const kvs_chat_args_t *args, const char *text,
    size_t len, const kvs_span_t *spans, size_t n_spans,
    const kvs_ids_t *ids, kvs_err_t *err);
void ngx_http_kvserve_cache_req(ngx_http_kvserve_ctx_t *ctx, ngx_uint_t i,
    kvs_engine_req_t *ereq);
void ngx_http_kvserve_cache_out(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_part_t *part, const kvs_engine_out_t *o);

#endif /* NGX_HTTP_KVSERVE_COMPLETIONS_H */
