/*
 * kvs_api_resp: the JSON bodies of chat and completions responses, whole
 * (non-streaming) and as server-sent events (streaming), with usage and
 * logprobs.  Pure functions on buffers: no I/O, no nginx types.
 *
 * Output is appended to a caller-owned kvs_buf_t and written directly
 * (no JSON tree), so a warm buffer makes a chunk without allocating.  On
 * failure the buffer is cut back to its length at the call: it never
 * holds half a body.
 *
 * Strings are JSON-escaped as RFC 8259 requires (quote, backslash, every
 * control character) and U+2028/U+2029 as well, which JavaScript before
 * ES2019 cannot take raw in a string literal; other non-ASCII stays
 * UTF-8.  Bytes that are not valid UTF-8 become U+FFFD, one per maximal
 * subpart (the rule kvs_detok and Python's errors="replace" apply).
 *
 * Numbers: logprobs are the shortest decimal that reads back as the same
 * float, always with a '.' or an exponent (so every JSON parser types it
 * as a real: -0.5, 0.0, -1.25e-05).  A -inf (or NaN) logprob, a token the
 * request's logit_bias or truncation made impossible, is written as
 * KVS_API_LOGPROB_FLOOR: JSON has no infinity, and OpenAI itself reports
 * such tokens as -9999.0.
 *
 * Logprob tokens: `token` is the token's text on its own, its bytes
 * decoded lossily, so a token holding part of a multi-byte character
 * renders as U+FFFD; chat's `bytes` lists the exact bytes, which
 * concatenated over the tokens give the text.  Control tokens render as
 * their stored text ("<|endoftext|>") although they add nothing to the
 * text.  SentencePiece and WordPiece "▁" is a space and never stripped.
 */

#ifndef KVS_API_RESP_H
#define KVS_API_RESP_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_buf.h"
#include "base/kvs_err.h"
#include "sample/kvs_finish.h"
#include "sample/kvs_sample.h"
#include "tokenizer/kvs_tok.h"
#include "tokenizer/kvs_vocab.h"
#include "kvs_api_req.h"

#define KVS_API_LOGPROB_FLOOR  -9999.0

/* "chatcmpl-", "cmpl-" or "msg_" (Messages), then KVS_API_RESP_ID_RAND
 * base-62 characters. */
#define KVS_API_RESP_ID_RAND   24
#define KVS_API_RESP_ID_MAX    (9 + KVS_API_RESP_ID_RAND + 1)

/* "call_", then KVS_API_RESP_ID_RAND base-62 characters. */
#define KVS_API_CALL_ID_MAX    (5 + KVS_API_RESP_ID_RAND + 1)

/* What every body and chunk of one response repeats. */
typedef struct {
    kvs_api_kind_t   kind;
    const char      *id;              /* kvs_api_resp_id() */
    size_t           id_len;
    const char      *model;           /* as the request named it */
    size_t           model_len;
    int64_t          created;         /* unix seconds, the same in every
                                         chunk */
    int              logprobs;        /* the request asked for logprobs:
                                         a choice's logprobs is then an
                                         object (maybe empty), not null */
} kvs_api_resp_head_t;

/*
 * Where a completions choice's text stands, for logprobs' text_offset:
 * the offset of each token in the choice's text, in code points (what a
 * Python client indexes), as the engine's detokenizer places it (a
 * character split over tokens counts at its first token; control tokens
 * add nothing).  Kept by the caller across the chunks of a stream.
 */
typedef struct {
    kvs_detok_t  detok;
    uint64_t     chars;               /* code points of text so far */
} kvs_api_textpos_t;

/*
 * Places pos after the prompt (as the engine's detokenizer is: a
 * SentencePiece text after a prompt keeps its first space) with base
 * code points of text before the first generated token (the prompt's
 * length with echo, else 0).
 */
void kvs_api_textpos_init(kvs_api_textpos_t *pos, const kvs_vocab_t *v,
    const int32_t *prompt, size_t n_prompt, uint64_t base);

/* One tool call of a chat message, or a piece of one in a stream. */
typedef struct {
    uint32_t     index;               /* among the choice's calls */
    const char  *id;                  /* "call_..." (kvs_api_resp_call_id);
                                         NULL in a stream's later pieces
                                         of the call */
    const char  *name;                /* the function's, with id */
    const char  *args;                /* the arguments' JSON text, or the
                                         piece of it this chunk adds */
    size_t       args_len;            /* bytes */
} kvs_api_tool_call_t;

/* One choice, whole (kvs_api_resp_body) or what a chunk adds. */
typedef struct {
    uint32_t                      index;
    const char                   *text;    /* NULL: chat delta without
                                              content, null message
                                              content; "" for completions */
    size_t                        len;
    kvs_finish_t                  finish;  /* KVS_FINISH_NONE in chunks
                                              before the last; STOP or
                                              LENGTH otherwise */
    const kvs_sample_logprobs_t  *lp;      /* [n_lp], one per generated
                                              token of this text */
    size_t                        n_lp;
    kvs_api_textpos_t            *pos;     /* completions with logprobs:
                                              advanced past lp (left
                                              unspecified by a failure:
                                              end the stream then);
                                              NULL: a fresh one at 0 */
    int                           role;    /* chat chunk: delta.role
                                              "assistant" (first chunk) */
    const kvs_api_tool_call_t    *calls;   /* chat: [n_calls], the
                                              message's tool_calls, or
                                              what a chunk's
                                              delta.tool_calls adds */
    size_t                        n_calls;
    int                           tool_finish;  /* finish STOP is written
                                              "tool_calls": the output was
                                              calls */
} kvs_api_choice_t;

#define KVS_API_TIER_DISK  1        /* kvs_api_usage_t's tiered */
#define KVS_API_TIER_HOST  2

typedef struct {
    uint32_t  prompt_tokens;
    uint32_t  completion_tokens;      /* over all choices */
    uint32_t  cached_tokens;          /* prompt tokens whose KV was
                                         reused */
    uint32_t  cached_tier;            /* of cached_tokens, loaded from
                                         the disk tier */
    uint32_t  cached_host;            /* ... copied in from the host
                                         tier */
    int       tiered;                 /* the model's lower tiers,
                                         KVS_API_TIER_* bits (0: none):
                                         prompt_tokens_details also has
                                         cached_tokens_by_tier, with
                                         "pool", "host" for a host tier,
                                         "disk" for a disk tier */
    uint32_t  cache_creation_tokens;  /* prompt tokens cached for the
                                         request's breakpoints, not read */
    int       breakpoints;            /* the request gave cache_control:
                                         usage also has Anthropic's
                                         cache_read_input_tokens (=
                                         cached_tokens) and
                                         cache_creation_input_tokens */
} kvs_api_usage_t;


/*
 * Writes a new response id ("chatcmpl-" or "cmpl-" and random base-62)
 * into buf, NUL-terminated; returns its length.  *rng is a splitmix64
 * state the caller seeds once (e.g. from getrandom) and keeps.
 */
size_t kvs_api_resp_id(char buf[KVS_API_RESP_ID_MAX], kvs_api_kind_t kind,
    uint64_t *rng);

/* Writes a new tool call id ("call_" and random base-62) into buf,
 * NUL-terminated; returns its length.  rng as kvs_api_resp_id()'s. */
size_t kvs_api_resp_call_id(char buf[KVS_API_CALL_ID_MAX], uint64_t *rng);

/*
 * The whole non-streaming response: choices c[n] (each finished) and
 * usage u (NULL: omitted).  v renders logprob tokens; it may be NULL
 * when h->logprobs is 0 (lp is then ignored).  KVS_EINVAL, nothing
 * written: a choice not finished (or cancelled, failed), a logprob token
 * id outside v, logprobs without v.
 */
int kvs_api_resp_body(kvs_buf_t *out, const kvs_api_resp_head_t *h,
    const kvs_api_choice_t *c, size_t n, const kvs_api_usage_t *u,
    const kvs_vocab_t *v, kvs_err_t *err);

/*
 * One SSE event "data: {...}\n\n" carrying choices c[n] (usually one).
 * Chat: delta holds "role" when c->role, "content" when c->text is not
 * NULL; the usual stream is role with content "", content deltas, then
 * text NULL with the finish reason (delta {}).  Completions: text and
 * finish_reason as the non-streaming choice.  include_usage adds
 * "usage": null, as OpenAI does in every chunk but the usage one.
 */
int kvs_api_resp_chunk(kvs_buf_t *out, const kvs_api_resp_head_t *h,
    const kvs_api_choice_t *c, size_t n, int include_usage,
    const kvs_vocab_t *v, kvs_err_t *err);

/* The event before [DONE] with include_usage: "choices": [] and usage. */
int kvs_api_resp_usage_chunk(kvs_buf_t *out, const kvs_api_resp_head_t *h,
    const kvs_api_usage_t *u);

/* "data: [DONE]\n\n" */
int kvs_api_resp_done(kvs_buf_t *out);

/*
 * A failure mid-stream as an event the OpenAI SDKs raise as an API error:
 * "data: {"error":{"message","type","param":null,"code"}}\n\n"; code may
 * be NULL.
 */
int kvs_api_resp_error_event(kvs_buf_t *out, const char *message,
    const char *type, const char *code);

#endif /* KVS_API_RESP_H */
