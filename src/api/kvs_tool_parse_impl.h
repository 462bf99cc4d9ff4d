/*
 * kvs_tool_parse_impl: what kvs_tool_parse.c and the files that parse
 * one family's output (kvs_tool_parse_cohere.c) share.  Internal to
 * src/api; the same contracts as kvs_tool_parse.h: never past
 * text[len], all or nothing.
 */

#ifndef KVS_TOOL_PARSE_IMPL_H
#define KVS_TOOL_PARSE_IMPL_H

#include <jansson.h>

#include "kvs_tool_parse.h"

/* needle in s[len], or NULL */
const char *kvs_tool_find(const char *s, size_t len, const char *needle);

int kvs_tool_is_ws(char c);

/* the first index from i that is not JSON white space */
size_t kvs_tool_skip_ws(const char *s, size_t len, size_t i);

/* text[*i..) starts with lit: *i moves past it, 1; else 0 */
int kvs_tool_lit(const char *text, size_t len, size_t *i, const char *lit);

/* text[len] is a proper beginning of lit */
int kvs_tool_prefix(const char *text, size_t len, const char *lit);

/* The JSON value at text[*i..len), parsed; *i moves past it.
 * KVS_EFORMAT when it is none (or is cut). */
int kvs_tool_json_at(const char *text, size_t len, size_t *i, json_t **out);

/* The calls in v (an array of calls, or one), appended to out; cohere:
 * named by "tool_name", with "tool_call_id" allowed.  KVS_EFORMAT,
 * KVS_ENOMEM. */
int kvs_tool_add_value(kvs_tool_parsed_t *out, json_t *v, int cohere);

/* The bytes of text[len] before open, or before a tail that may become
 * open when more comes. */
size_t kvs_tool_hold_marker(const char *open, const char *text,
    size_t len);

/* Appends the call in obj to out: name_given NULL, obj is the call
 * ({"name", "arguments"}, cohere: {"tool_name", "parameters"}); else
 * obj is its arguments.  KVS_EFORMAT, KVS_ENOMEM. */
int kvs_tool_add(kvs_tool_parsed_t *out, json_t *obj, const char *name_given,
    size_t name_len, int cohere);

/* A name written outside JSON; strict: nor white space, '`' or control
 * bytes. */
int kvs_tool_name_ok(const char *s, size_t n, int strict);

/* MiniCPM3 (kvs_tool_parse_py.c), from its marker at text[i]. */
int kvs_tool_parse_mc3(const char *text, size_t len, size_t i,
    kvs_tool_parsed_t *out);

/* Command R (kvs_tool_parse_cohere.c). */
int kvs_tool_parse_cohere(kvs_tool_syntax_t syn, const char *text,
    size_t len, size_t i, kvs_tool_parsed_t *out);
void kvs_tool_r7_trim(const char *text, kvs_tool_parsed_t *out);
int kvs_tool_r7_opening(const char *text, size_t len);
size_t kvs_tool_r7_skip(const char *text, size_t len);
size_t kvs_tool_r7_hold(const char *text, size_t len);

#endif /* KVS_TOOL_PARSE_IMPL_H */
