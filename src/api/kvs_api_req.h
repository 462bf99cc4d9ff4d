/*
 * kvs_api_req: OpenAI chat and completions requests parsed from their JSON
 * body, and the OpenAI error a bad one gets.  Pure functions on buffers
 * (jansson, strict UTF-8, error positions); no tokenizing, no model: the
 * caller checks what needs the model (vocabulary ids in logit_bias and
 * prompt token ids, the context length) afterwards.
 *
 * What OpenAI ignores we ignore: unknown fields and fields we do not act
 * on (metadata, store, ...) pass; response_format is acted on
 * (kvs_api_req_rf.c: text, json_object, json_schema, on both endpoints,
 * the schema compiled here so that what the grammar cannot do is a 400
 * naming the keyword's path);
 * a field we know with the wrong type or out of its range is an error
 * naming it in param ("messages[2].content", "stop[1]", "logit_bias").
 * Chat tools (tools, tool_choice, parallel_tool_calls, assistant
 * tool_calls, tool messages' answers) are checked in full
 * (kvs_api_req_tools.c, the parameters schemas compiled as
 * response_format's are); once the model's template is known,
 * kvs_api_req_tools_plan() turns them into the output constraint.
 *
 * Messages are checked for the shape OpenAI's schema gives them (roles
 * system, developer, user, assistant, tool; content a string or text
 * parts; assistant content may be null; tool needs tool_call_id), which
 * is wider than what a built-in chat format renders (no tool role, no
 * tool_calls, no tools: the model's own Jinja template takes them): the
 * renderer's KVS_EINVAL and KVS_EUNSUPPORTED messages name the field
 * ("messages[3].role: ...") and kvs_api_err_from_msg() turns them into
 * the same 400.
 *
 * Chat content parts and messages may carry Anthropic's cache_control
 * (a client cache breakpoint, at most KVS_API_MAX_BREAKS); they are
 * collected into breaks[] in message order, and kvs_api_cache.h turns
 * them into prompt token counts once the prompt is rendered.
 *
 * Ownership: a parsed request owns the JSON tree (root) and its own
 * arrays; every string and the messages array point into the tree, so
 * they live until kvs_api_req_free().
 *
 * Strings never hold NUL: the JSON is parsed without JSON_ALLOW_NUL, so
 * "\u0000" anywhere in the body is a 400, and every kvs_api_str_t is
 * also a NUL-terminated C string.  docs/api.md lists each field, its
 * range and default, and where we differ from OpenAI.
 */

#ifndef KVS_API_REQ_H
#define KVS_API_REQ_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/kvs_buf.h"
#include "grammar/kvs_gram_req.h"
#include "sample/kvs_sample.h"
#include "kvs_tool_parse.h"

#define KVS_API_MAX_STOP       4      /* OpenAI's limit */
#define KVS_API_MAX_STOP_LEN   256    /* bytes; kvs_stop's limit */
#define KVS_API_MAX_N          128
#define KVS_API_MAX_PROMPTS    128    /* completions: prompts per request */
#define KVS_API_MAX_LOGPROBS_C 5      /* completions' logprobs: 0..5 */
#define KVS_API_MAX_TOKENS_C   16     /* completions' default max_tokens */
#define KVS_API_MAX_BREAKS     4      /* cache_control breakpoints, as
                                         Anthropic's limit */
#define KVS_API_MAX_BIAS       65536  /* logit_bias entries: what one
                                         SUBMIT frame carries (the glue
                                         checks it against the wire's
                                         KVS_WIRE_MAX_BIAS) */
#define KVS_API_MAX_TOOLS      128    /* OpenAI's limit */
#define KVS_API_TTL_5M         300000     /* ms: cache_control ttl "5m" */
#define KVS_API_TTL_1H         3600000    /* ms: "1h" */

typedef enum {
    KVS_API_CHAT = 0,                 /* /v1/chat/completions */
    KVS_API_COMPLETIONS,              /* /v1/completions */
    KVS_API_MESSAGES                  /* Anthropic's /v1/messages: a chat
                                         request (kvs_api_msg.h) */
} kvs_api_kind_t;

/* tool_choice */
#define KVS_API_TOOL_NONE      0      /* no tools, or "none" */
#define KVS_API_TOOL_AUTO      1      /* text or calls */
#define KVS_API_TOOL_REQUIRED  2      /* at least one call */
#define KVS_API_TOOL_NAMED     3      /* a call of tools[tool_named] */

/* An error for the client: HTTP status, and OpenAI's error object. */
typedef struct {
    int    status;                    /* 400, 404, 413, ... */
    char   message[320];
    char   param[64];                 /* "" for null */
    char   type[32];                  /* "invalid_request_error" */
    char   code[48];                  /* "" for null; e.g.
                                         "context_length_exceeded" */
} kvs_api_err_t;

typedef struct {
    const char  *ptr;                 /* into the tree, UTF-8 */
    size_t       len;
} kvs_api_str_t;

/*
 * A client cache breakpoint (Anthropic's cache_control): the prompt
 * prefix up to the end of messages[message].content[part] (part -1: of
 * the message's whole content) is to stay cached for ttl_ms.
 */
typedef struct {
    uint32_t              message;
    int32_t               part;       /* -1: on the message itself */
    uint32_t              ttl_ms;     /* KVS_API_TTL_5M or _1H */
} kvs_api_break_t;

/* One completions prompt: text, or token ids. */
typedef struct {
    kvs_api_str_t   text;             /* text.ptr NULL for ids */
    int32_t        *ids;              /* [n_ids], owned */
    size_t          n_ids;
} kvs_api_prompt_t;

typedef struct {
    kvs_api_kind_t        kind;
    json_t               *root;           /* owned; MESSAGES: the body's
                                             translation into a chat
                                             body (messages, tools,
                                             tool_choice) */
    json_t               *msg_root;       /* MESSAGES: the body as sent,
                                             owned; NULL otherwise */
    kvs_api_str_t         model;

    const json_t         *messages;       /* chat: the array, checked:
                                             non-empty, each an object
                                             with a known role and content
                                             of the right type */
    kvs_api_break_t       breaks[KVS_API_MAX_BREAKS];  /* chat: in
                                             message order */
    uint32_t              n_breaks;
    kvs_api_prompt_t     *prompts;        /* completions: [n_prompts] */
    size_t                n_prompts;

    int                   stream;
    int                   include_usage;  /* stream_options.include_usage */
    uint32_t              n;              /* choices, 1..128 */
    int64_t               max_tokens;     /* chat: -1 when not given (up
                                             to the context), else >= 1;
                                             max_completion_tokens wins
                                             over max_tokens.
                                             completions: 16 when not
                                             given; >= 1, or >= 0 with
                                             echo */
    kvs_api_str_t         stop[KVS_API_MAX_STOP];
    uint32_t              n_stop;
    int                   has_seed;       /* sample.seed is the client's
                                             int64 seed cast to uint64;
                                             0 when not given (the
                                             caller picks one) */
    kvs_sample_params_t   sample;         /* temperature (default 1),
                                             top_p (1), top_k (0, an
                                             extension as vLLM has),
                                             min_p (0, idem), seed,
                                             penalties, logit_bias (owned
                                             array), logprobs,
                                             top_logprobs */
    int                   echo;           /* completions */
    int                   ignore_eos;     /* extension (vLLM's and
                                             llama-server's): generate
                                             past the model's end tokens,
                                             up to max_tokens */
    unsigned              rf_kind;        /* the output constraint:
                                             response_format's
                                             KVS_GRAM_REQ_NONE (absent or
                                             "text"), _OBJECT, _SCHEMA, or
                                             the tools' _TOOLS
                                             (kvs_api_req_tools_plan) */
    char                 *rf_schema;      /* _SCHEMA: the schema's
                                             canonical JSON text (sorted
                                             keys, compact); _TOOLS: the
                                             tools spec; owned */
    size_t                rf_schema_len;  /* <= KVS_GRAM_REQ_MAX_SCHEMA */
    int                   rf_strict;      /* json_schema.strict (the
                                             output validates either
                                             way) */
    const json_t         *tools;          /* chat: the checked array (into
                                             the tree), NULL when absent or
                                             empty; each {"type":
                                             "function", "function":
                                             {"name", ...}} */
    uint32_t              n_tools;
    unsigned              tool_choice;    /* KVS_API_TOOL_*: default AUTO
                                             with tools, else NONE */
    uint32_t              tool_named;     /* _NAMED: the index in tools */
    int                   parallel_tool_calls;  /* default 1 */
    unsigned              tool_syntax;    /* kvs_tool_syntax_t the output
                                             is parsed with: set by
                                             kvs_api_req_tools_plan() when
                                             calls are possible, else
                                             KVS_TOOL_SYN_NONE (text) */
    unsigned              tool_text_only; /* the output is text whatever
                                             it holds (no tools, or
                                             tool_choice "none"), but
                                             tool_syntax still names the
                                             bytes that are never content
                                             (Functionary v3.2's "all\n":
                                             kvs_tool_parse_skip) */
    kvs_api_str_t         user;           /* ptr NULL when absent */
} kvs_api_req_t;

/*
 * Parses body[len] as a request of kind.  On failure *aerr is filled and
 * req owns nothing (kvs_api_req_free() on it is harmless): KVS_ERANGE
 * with 413 when the body is larger than max_body (0: no limit),
 * KVS_EFORMAT with 400 for a body that is not JSON (the message names
 * the line and column; invalid UTF-8 is an error, never replaced),
 * KVS_EINVAL with 400 and param for a bad field, KVS_ENOMEM with 500.
 */
int kvs_api_req_parse(kvs_api_req_t *req, kvs_api_kind_t kind,
    const char *body, size_t len, size_t max_body, kvs_api_err_t *aerr);

void kvs_api_req_free(kvs_api_req_t *req);

/*
 * The top-level fields of a parsed request that the parser does not read
 * for its kind (they pass, as OpenAI lets them): up to max of their
 * names into names[] (pointing into the tree, valid until
 * kvs_api_req_free()), in the tree's order; returns how many there are
 * in all, which may exceed max.
 */
size_t kvs_api_req_unknown(const kvs_api_req_t *req, const char **names,
    size_t max);

/* A chat request's messages against the host's cap (kvserve_max_messages;
 * OpenAI states none): 400 "array too long" naming messages over max.
 * KVS_OK for a completions request (no messages). */
int kvs_api_req_check_messages(const kvs_api_req_t *req, size_t max,
    kvs_api_err_t *aerr);

/*
 * A chat request's tools, once the model's chat template is chosen: jinja
 * says it is the model's own (a built-in format renders no tools: 400),
 * syn the tool-call syntax it teaches (kvs_tool_syntax_detect()).  With
 * tool_choice other than "none", the output is constrained to text or
 * calls of that syntax: rf_kind becomes KVS_GRAM_REQ_TOOLS with the
 * spec of kvs_gram_from_tools() as rf_schema, compiled once here (400
 * naming tools when it cannot be), and tool_syntax is set, which tells
 * the response to parse calls out of the output.  "none" renders the
 * tools and leaves the output text, unconstrained with stop sequences,
 * constrained to text without a call otherwise.  400 with
 * response_format (not combined yet) or stop (they could cut a call).
 * KVS_OK with nothing to do when the request has no tools.
 */
int kvs_api_req_tools_plan(kvs_api_req_t *req, kvs_tool_syntax_t syn,
    int jinja, kvs_api_err_t *aerr);

/* Sets *aerr (status, message, param, type "invalid_request_error",
 * code); param and code may be NULL (JSON null).  Any invalid UTF-8 in
 * the message (client bytes quoted in it, a character that truncation
 * cut) becomes '?'. */
void kvs_api_err_set(kvs_api_err_t *aerr, int status, const char *param,
    const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/*
 * A library error message as the client's error: "messages[2].content:
 * missing" (what kvs_chat_render() and the kvs_*_check() functions
 * write) gives param "messages[2].content" and message "missing"; a
 * message that does not start with a field path keeps param null.  Only
 * a request field (model, messages, prompt, n, stop, logit_bias, ...)
 * becomes param: a leading name that is not one ("SUBMIT: ", the wire's
 * frame; "engine: ") is skipped when a field path follows it, and
 * otherwise kept in the message, so that no internal name reaches param.
 */
void kvs_api_err_from_msg(kvs_api_err_t *aerr, int status, const char *code,
    const char *msg);

/* {"error":{...}} for *aerr, appended to out; KVS_ENOMEM on failure. */
int kvs_api_err_json(const kvs_api_err_t *aerr, kvs_buf_t *out);

#endif /* KVS_API_REQ_H */
