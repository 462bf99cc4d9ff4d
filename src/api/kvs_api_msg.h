/*
 * kvs_api_msg: Anthropic's Messages API (POST /v1/messages and
 * /v1/messages/count_tokens) as pure functions on buffers: the request
 * parsed into the kvs_api_req_t the chat route uses (kvs_api_msg.c), and
 * the response bodies, server-sent events and error objects
 * (kvs_api_msg_resp.c).  No nginx types; the glue picks the dialect by
 * the route and calls these where the chat route calls kvs_api_resp.h.
 *
 * The request is translated, not served by a second pipeline: system
 * becomes a system message, text blocks content parts, tool_use blocks
 * an assistant's tool_calls, tool_result blocks tool messages, tools
 * OpenAI's function tools and tool_choice its values; cache_control is
 * kept on the translated part or message, so the chat route's
 * breakpoints, template rendering, tool constraint and tool-call parsing
 * apply unchanged.  Errors name the field as the client wrote it
 * ("messages[1].content[0].source").
 *
 * A stream is written from the chat route's deltas (kvs_api_choice_t:
 * role, text, a tool call's head or a piece of its arguments, the
 * finish) by a small state machine that opens and closes Anthropic's
 * content blocks around them.
 */

#ifndef KVS_API_MSG_H
#define KVS_API_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_buf.h"
#include "base/kvs_err.h"
#include "kvs_api_req.h"
#include "kvs_api_resp.h"

/* the anthropic-version values served (the header is required): the
 * API's first version, and the one anthropic-python 2.16 sends; both
 * are served alike (docs/api.md) */
#define KVS_API_MSG_VERSIONS  "\"2023-06-01\" or \"2026-10-21\""

/* kvs_api_msg_parse() flags */
#define KVS_API_MSG_COUNT    1        /* count_tokens: no max_tokens */

/*
 * Parses body[len] as a Messages request into req (kind
 * KVS_API_MESSAGES, msg_root the body, root its chat translation).  On
 * failure *aerr is filled (400, 413 over max_body, 500 out of memory)
 * and req owns nothing, as kvs_api_req_parse().
 */
int kvs_api_msg_parse(kvs_api_req_t *req, const char *body, size_t len,
    size_t max_body, unsigned flags, kvs_api_err_t *aerr);

/* 0 when the anthropic-version header value v[len] is served; else a
 * 400 naming the header in *aerr (v NULL: the header is missing). */
int kvs_api_msg_version(const char *v, size_t len, kvs_api_err_t *aerr);

/* Anthropic's stop_reason */
typedef enum {
    KVS_API_MSG_END_TURN = 0,
    KVS_API_MSG_MAX_TOKENS,
    KVS_API_MSG_STOP_SEQUENCE,
    KVS_API_MSG_TOOL_USE,
    KVS_API_MSG_REFUSAL
} kvs_api_msg_stop_t;

typedef struct {
    uint32_t  input_tokens;           /* the prompt, less the two below */
    uint32_t  output_tokens;
    uint32_t  cache_read;             /* prompt tokens from the cache */
    uint32_t  cache_creation;         /* cached for the breakpoints */
} kvs_api_msg_usage_t;

/* The stop_reason of a finished choice (c->finish STOP or LENGTH, with
 * c->tool_finish); stop_seq >= 0: the index of the stop sequence that
 * ended it. */
kvs_api_msg_stop_t kvs_api_msg_stop_reason(const kvs_api_choice_t *c,
    int stop_seq);

/* The usage of a chat route's figures (prompt_tokens holds all). */
void kvs_api_msg_usage(kvs_api_msg_usage_t *mu, const kvs_api_usage_t *u);

/*
 * The whole response: choice c (finished, its text and tool calls),
 * usage; stop_seq as kvs_api_msg_stop_reason()'s, req the request (its
 * stop sequences).  KVS_EINVAL for a choice not finished.
 */
int kvs_api_msg_body(kvs_buf_t *out, const kvs_api_resp_head_t *h,
    const kvs_api_choice_t *c, const kvs_api_msg_usage_t *u,
    const kvs_api_req_t *req, int stop_seq, kvs_err_t *err);

/* {"input_tokens":N} */
int kvs_api_msg_count_json(kvs_buf_t *out, uint32_t n);

/* A stream's state: the content block open, and what the start says. */
typedef struct {
    kvs_api_msg_usage_t   usage;      /* for message_start: set before
                                         the first delta */
    uint32_t              index;      /* the open or next block's */
    unsigned              started:1;  /* message_start written */
    unsigned              open:1;     /* a block is open */
    unsigned              tool:1;     /* ... a tool_use block */
    unsigned              pinged:1;
    unsigned              ended:1;    /* the finish came */
    unsigned              tool_finish:1;
    kvs_finish_t          finish;
} kvs_api_msg_stream_t;

/*
 * The events of one chat delta c: message_start (with the first),
 * content_block_start/stop around text and each tool_use, ping after
 * the first block's start, content_block_delta (text_delta,
 * input_json_delta); a finish closes the open block and is kept for
 * kvs_api_msg_sse_end().
 */
int kvs_api_msg_sse(kvs_api_msg_stream_t *st, kvs_buf_t *out,
    const kvs_api_resp_head_t *h, const kvs_api_choice_t *c,
    kvs_err_t *err);

/* message_delta (stop_reason, stop_sequence, usage.output_tokens) and
 * message_stop; message_start first if nothing was written. */
int kvs_api_msg_sse_end(kvs_api_msg_stream_t *st, kvs_buf_t *out,
    const kvs_api_resp_head_t *h, uint32_t output_tokens,
    const kvs_api_req_t *req, int stop_seq, kvs_err_t *err);

/* Anthropic's status for the chat route's (503 is 529, overloaded) and
 * its error type for that status. */
int kvs_api_msg_status(int status);
const char *kvs_api_msg_error_type(int status);

/* {"type":"error","error":{"type":...,"message":...}} for the chat
 * route's status (its Anthropic type), and the same as an SSE event
 * "event: error". */
int kvs_api_msg_error_json(kvs_buf_t *out, int status, const char *message);
int kvs_api_msg_error_event(kvs_buf_t *out, int status, const char *message);

/* The index of req's stop sequence that the generated text tail[len]
 * (what follows the output the stop cut) starts with, the shortest when
 * several do; -1 when none. */
int kvs_api_msg_stop_which(const kvs_api_req_t *req, const char *tail,
    size_t len);

#endif /* KVS_API_MSG_H */
