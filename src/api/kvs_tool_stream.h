/*
 * kvs_tool_stream: a tool-call output read while it grows, so that a
 * stream can send each call's name as soon as it is complete and its
 * arguments in pieces as they are generated (OpenAI's delta.tool_calls).
 * Pure functions on the caller's buffers; no nginx.
 *
 * It reads the layout the tool grammar writes (src/grammar/
 * kvs_gram_tools.c): after the syntax's marker (LLAMA3: at the first
 * non-space, a "{" or <|python_tag|>), each call is a JSON object whose
 * "name" string comes before its "arguments" (LLAMA3 "parameters")
 * object; FUNCTIONARY writes <function=NAME> then the object, DEEPSEEK
 * <｜tool▁sep｜>NAME, a newline, "```json" and the object, FUNCTIONARY32
 * NAME, a newline and the object, at the start or after ">>>" (after
 * "all\n" and text); COMMANDR and COMMANDR7B name a call with
 * "tool_name", LLAMA4 is read as LLAMA3; MINICPM3's calls N(k=V, ...)
 * are given as the JSON object {"k":V,...} as they come.  Text between
 * calls is skipped.  The arguments are given compacted: white
 * space outside strings dropped, everything else byte for byte, so the
 * pieces of one call join into its arguments' JSON text.
 *
 * The grammar makes every output take that layout; the reader needs no
 * more than that and checks no more (kvs_tool_parse() is the judge of a
 * whole output).  What it cannot read (text after a LLAMA3 "<" that is
 * not the tag) is KVS_TS_FAIL: nothing more comes from it.
 *
 * Invariants: the text given to each call is the text of the previous
 * call plus more (the same bytes first); the reader never reads past
 * text[len]; its state is a few integers (no allocation but the pieces
 * appended to the caller's buffer).
 */

#ifndef KVS_TOOL_STREAM_H
#define KVS_TOOL_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_buf.h"
#include "base/kvs_err.h"
#include "kvs_tool_parse.h"

#define KVS_TS_EV_NONE  0             /* nothing more until more text */
#define KVS_TS_EV_HEAD  1             /* a call's name is complete */
#define KVS_TS_EV_ARGS  2             /* a piece of its arguments */
#define KVS_TS_EV_FAIL  3             /* the output is not calls after
                                         all: nothing more comes */

typedef struct {
    kvs_tool_syntax_t  syn;
    int                state;         /* KVS_TS_* in kvs_tool_stream.c */
    size_t             pos;           /* text read */
    size_t             content;       /* where the calls begin (once
                                         n_calls > 0) */
    size_t             name_at;       /* the name being read */
    uint32_t           n_calls;       /* calls whose head was given */
    uint32_t           depth;         /* arguments: brackets open */
    unsigned           in_str:1;      /* arguments: inside a string */
    unsigned           esc:1;         /* ... after its backslash */
    unsigned           kw:2;          /* MINICPM3's keyword arguments:
                                         0 before a key, 1 in it, 2 in
                                         its value */
    unsigned           opened:1;      /* ... "{" given */
} kvs_tool_stream_t;

typedef struct {
    uint32_t           index;         /* the call's, from 0 */
    const char        *name;          /* HEAD: into the text */
    size_t             name_len;
} kvs_tool_delta_t;

void kvs_tool_stream_init(kvs_tool_stream_t *ts, kvs_tool_syntax_t syn);

/*
 * Reads on in text[len] and returns the next event (KVS_TS_EV_*), with
 * *d filled for HEAD and ARGS; an ARGS piece is appended to *args (the
 * caller empties it when it has sent it).  Call it again until it
 * returns NONE or FAIL.  KVS_ENOMEM (negative) when args cannot grow.
 */
int kvs_tool_stream_next(kvs_tool_stream_t *ts, const char *text,
    size_t len, kvs_tool_delta_t *d, kvs_buf_t *args);

#endif /* KVS_TOOL_STREAM_H */
