/*
 * kvs_tool_parse: a model's generated text -> content text and OpenAI
 * tool calls {name, arguments}, for the tool-call syntax its chat
 * template teaches it.  Pure functions on buffers; no model, no ids (the
 * caller gives each call its "call_..." id), no nginx.
 *
 * Syntaxes (kvs_tool_syntax_detect() tells them from the template text;
 * the fixture corpus' families in brackets):
 *
 *   HERMES    <tool_call>{"name": N, "arguments": A}</tool_call>, one
 *             block per call, whitespace between blocks [Hermes 2 Pro and
 *             3, Qwen 2.5, Qwen 3, QwQ, Falcon 3]
 *   LLAMA3    the whole output is {"name": N, "parameters": A}, maybe
 *             after <|python_tag|>; several calls separated by ";" [Llama
 *             3.1, 3.2, 3.3]
 *   MISTRAL   [TOOL_CALLS][{"name": N, "arguments": A}, ...] [Mistral
 *             v0.3, Nemo]
 *   GRANITE   <|tool_call|>[{"name": N, "arguments": A}, ...] [Granite 3.x]
 *   FIREFUNC  functools[{"name": N, "arguments": A}, ...] [FireFunction v2]
 *   FUNCTIONARY <function=N>A</function>, one per call [Functionary v3.1]
 *   DEEPSEEK  <｜tool▁calls▁begin｜> then per call
 *             <｜tool▁call▁begin｜>function<｜tool▁sep｜>N "\n```json\n" A
 *             "\n```" <｜tool▁call▁end｜>, calls separated by whitespace,
 *             then <｜tool▁calls▁end｜> [DeepSeek V2.5, V3, R1 and its
 *             distills]; the fence around A may be left out
 *   FUNCTIONARY32  the output follows the prompt's ">>>" (a recipient
 *             line): "all\n" then text, maybe then ">>>" and calls; or
 *             calls at once.  Calls are N "\n" A, joined by ">>>"
 *             [Functionary v3.2].  "all\n" is not content (content_at).
 *   LLAMA4    as LLAMA3, and several calls may also follow each other
 *             with only whitespace between them, as the template writes
 *             them back [Llama 4: its template teaches JSON calls, not
 *             the pythonic ones of Meta's other prompts]
 *   COMMANDR  Action: then a JSON array [{"tool_name": N, "parameters":
 *             A}, ...], maybe fenced in ```json ... ``` [Command R v01 /
 *             R+ tool_use]
 *   COMMANDR7B  <|START_ACTION|>[{"tool_call_id": "0", "tool_name": N,
 *             "parameters": A}, ...]<|END_ACTION|> [Command R7B]; text
 *             before it may be a plan in <|START_THINKING|> ...
 *             <|END_THINKING|>, text without calls an answer in
 *             <|START_RESPONSE|> ... <|END_RESPONSE|>: those tags, at the
 *             very start and end of the content, are not content.
 *   MINICPM3  <|tool_call_start|>, a ```python fence (may be left out),
 *             calls N(key=V, ...) one a line, each V a JSON value, the
 *             fence's end, <|tool_call_end|> [MiniCPM3]; the arguments
 *             become the object {"key": V, ...} (a key twice: malformed)
 *
 * Not covered (output returned as text): Llama 4's pythonic calls
 * ([f(a=1)], Python literals), which no template of the corpus
 * teaches.
 *
 * Rules, the same for every syntax:
 *  - content is the text before the first call marker (for LLAMA3: empty;
 *    its calls are the whole output), less trailing whitespace when calls
 *    follow it.
 *  - From the first marker on, the output must be nothing but calls in
 *    the syntax, with whitespace around them (HERMES, FUNCTIONARY between
 *    blocks too).  Anything else after the marker (text, a second marker
 *    of another kind, malformed or truncated JSON, a call without a
 *    string name, unknown keys, arguments that are not an object) makes
 *    the WHOLE output plain content with no calls: all or nothing, so a
 *    client never gets half of what the model meant as calls, and never
 *    a crash.  A marker inside a JSON string (an argument holding
 *    "</tool_call>") is part of the string: JSON is scanned, not searched.
 *  - A call is an object with "name" (a non-empty string) and the
 *    arguments ("arguments", LLAMA3 "parameters"; either accepted) as an
 *    object or as a string holding a JSON object (models do both);
 *    absent arguments are {}.  "id" (Mistral's) is allowed and dropped.
 *    COMMANDR and COMMANDR7B name the call with "tool_name" (and only
 *    that) and allow "tool_call_id" (dropped).
 *    The arguments are returned as compact JSON text (jansson, key order
 *    kept), which is what OpenAI's arguments string holds.  FUNCTIONARY
 *    and DEEPSEEK write the name outside the JSON (FUNCTIONARY: without
 *    '"' or '<'; DEEPSEEK, FUNCTIONARY32: nor white space, '`' or
 *    control bytes; FUNCTIONARY32: not "all"), and
 *    the JSON is the arguments object itself.
 *  - parallel_tool_calls and tool_choice are not the parser's business:
 *    it returns every call; the caller (and, later, the grammar) decides.
 *
 * Streaming: kvs_tool_parse_hold() says how many leading bytes of the
 * text so far are surely content (no marker can start in them), so a
 * stream sends those as content deltas at once and holds the rest; once
 * a marker is seen, the calls are parsed when the output ends (or,
 * later, piecewise from the scanner's positions: the JSON scanner here
 * stops at a truncation with KVS_ETOOLONG, which is how a streaming
 * caller will tell "not yet" from "malformed").
 */

#ifndef KVS_TOOL_PARSE_H
#define KVS_TOOL_PARSE_H

#include <stddef.h>

#include "base/kvs_err.h"

typedef enum {
    KVS_TOOL_SYN_NONE = 0,            /* no tool syntax: all text */
    KVS_TOOL_SYN_HERMES,
    KVS_TOOL_SYN_LLAMA3,
    KVS_TOOL_SYN_MISTRAL,
    KVS_TOOL_SYN_GRANITE,
    KVS_TOOL_SYN_FIREFUNC,
    KVS_TOOL_SYN_FUNCTIONARY,
    KVS_TOOL_SYN_DEEPSEEK,
    KVS_TOOL_SYN_FUNCTIONARY32,
    KVS_TOOL_SYN_LLAMA4,
    KVS_TOOL_SYN_COMMANDR,
    KVS_TOOL_SYN_COMMANDR7B,
    KVS_TOOL_SYN_MINICPM3,
    KVS_TOOL_SYN_N
} kvs_tool_syntax_t;

typedef struct {
    char     *name;                   /* NUL-terminated, owned */
    char     *arguments;              /* compact JSON object, NUL-ended,
                                         owned */
    size_t    arguments_len;
} kvs_tool_call_t;

typedef struct {
    size_t            content_at;     /* content is text[content_at..  */
    size_t            content_len;    /* ..content_len): an end, not a
                                         length; content_at is 0 but for
                                         FUNCTIONARY32's "all\n" */
    kvs_tool_call_t  *calls;          /* [n_calls], owned */
    size_t            n_calls;
} kvs_tool_parsed_t;

/* The syntax a chat template's text teaches; NONE when it teaches none
 * we parse. */
kvs_tool_syntax_t kvs_tool_syntax_detect(const char *tpl, size_t len);

/* "hermes", ...; "none". */
const char *kvs_tool_syntax_name(kvs_tool_syntax_t syn);

/* The text that opens the calls ("<tool_call>"; LLAMA3: its optional
 * "<|python_tag|>"; DEEPSEEK: <｜tool▁calls▁begin｜>); NULL for NONE. */
const char *kvs_tool_marker(kvs_tool_syntax_t syn);

/*
 * Parses text[len], the whole generated output.  KVS_OK with *out
 * filled (n_calls 0 and content_len len when the output is not calls,
 * malformed calls included; content_at 4 after FUNCTIONARY32's "all\n");
 * KVS_ENOMEM (out owns nothing then); KVS_EINVAL for a bad syntax
 * value.  kvs_tool_parsed_free() after.
 */
int kvs_tool_parse(kvs_tool_syntax_t syn, const char *text, size_t len,
    kvs_tool_parsed_t *out, kvs_err_t *err);

void kvs_tool_parsed_free(kvs_tool_parsed_t *p);

/* Streaming: the number of leading bytes of text[len] (the output so
 * far) that are content whatever follows (less kvs_tool_parse_skip()'s
 * bytes before them). */
size_t kvs_tool_parse_hold(kvs_tool_syntax_t syn, const char *text,
    size_t len);

/* Streaming an output that is text whatever it holds (no tools, or
 * tool_choice "none"): as kvs_tool_parse_hold(), with no call to wait
 * for; only a beginning of kvs_tool_parse_skip()'s bytes waits. */
size_t kvs_tool_parse_hold_text(kvs_tool_syntax_t syn, const char *text,
    size_t len);

/* Streaming: the leading bytes of text[len] that are never content
 * (FUNCTIONARY32's "all\n", COMMANDR7B's <|START_RESPONSE|> or
 * <|START_THINKING|>, once it is all there; else 0). */
size_t kvs_tool_parse_skip(kvs_tool_syntax_t syn, const char *text,
    size_t len);

/*
 * The end of the JSON value starting at text[0] (after no whitespace):
 * *end is one past it.  KVS_EFORMAT when it is not a JSON value's
 * shape (strings, brackets and scalars are scanned, not fully checked:
 * jansson checks the span after), KVS_ETOOLONG when text ends inside it.
 * Depth is bounded (KVS_EFORMAT past 512).
 */
int kvs_tool_json_end(const char *text, size_t len, size_t *end);

#endif /* KVS_TOOL_PARSE_H */
