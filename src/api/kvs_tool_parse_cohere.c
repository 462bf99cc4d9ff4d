/*
 * kvs_tool_parse_cohere: the Command R family's tool-call output
 * (kvs_tool_parse.h: COMMANDR's "Action:" list, COMMANDR7B's
 * <|START_ACTION|> list), and the tags of Command R7B's text that are
 * not content: an opening <|START_RESPONSE|> or <|START_THINKING|>
 * (skipped, streamed or not), a closing <|END_RESPONSE|> or
 * <|END_THINKING|> (trimmed; a stream holds from any "<|END_" on until
 * the end decides).
 *
 * Invariants: kvs_tool_parse.c's (never past text[len], all or nothing);
 * the list is one JSON value, delimited by kvs_tool_json_end() and read
 * by jansson.
 */

#include <string.h>

#include <jansson.h>

#include "kvs_tool_parse_impl.h"

#define KVS_TOOL_R7_ACTION   "<|START_ACTION|>"
#define KVS_TOOL_R7_END      "<|END_ACTION|>"
#define KVS_TOOL_R7_THINK    "<|START_THINKING|>"
#define KVS_TOOL_R7_THINKED  "<|END_THINKING|>"
#define KVS_TOOL_R7_RESP     "<|START_RESPONSE|>"
#define KVS_TOOL_R7_RESPED   "<|END_RESPONSE|>"


/* Command R, from its marker at text[i]: COMMANDR "Action:" then the
 * array, maybe fenced in ```json ... ```; COMMANDR7B <|START_ACTION|>,
 * the array, <|END_ACTION|>.  Nothing but whitespace after. */
int
kvs_tool_parse_cohere(kvs_tool_syntax_t syn, const char *text, size_t len,
    size_t i, kvs_tool_parsed_t *out)
{
    int      rc, fence;
    json_t  *v;

    fence = 0;

    if (!kvs_tool_lit(text, len, &i, kvs_tool_marker(syn))) {
        return KVS_EFORMAT;
    }

    i = kvs_tool_skip_ws(text, len, i);

    if (syn == KVS_TOOL_SYN_COMMANDR) {
        fence = kvs_tool_lit(text, len, &i, "```");
        if (fence) {
            (void) kvs_tool_lit(text, len, &i, "json");
            i = kvs_tool_skip_ws(text, len, i);
        }
    }

    if (i == len || text[i] != '[') {
        return KVS_EFORMAT;
    }

    rc = kvs_tool_json_at(text, len, &i, &v);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_tool_add_value(out, v, 1);
    json_decref(v);

    if (rc != KVS_OK) {
        return rc;
    }

    i = kvs_tool_skip_ws(text, len, i);

    if ((fence && !kvs_tool_lit(text, len, &i, "```"))
        || (syn == KVS_TOOL_SYN_COMMANDR7B
            && !kvs_tool_lit(text, len, &i, KVS_TOOL_R7_END)))
    {
        return KVS_EFORMAT;
    }

    return kvs_tool_skip_ws(text, len, i) == len ? KVS_OK : KVS_EFORMAT;
}


/* text[len] ends with lit, after trailing whitespace: where lit begins
 * (len when it does not). */
static size_t
kvs_tool_tail(const char *text, size_t len, size_t from, const char *lit)
{
    size_t  n, e;

    n = strlen(lit);
    e = len;

    while (e > from && kvs_tool_is_ws(text[e - 1])) {
        e--;
    }

    if (e - from >= n && memcmp(text + e - n, lit, n) == 0) {
        return e - n;
    }

    return len;
}


/* Command R7B's content, text[out->content_at..out->content_len): less
 * a closing <|END_RESPONSE|> or <|END_THINKING|> (the opening ones are
 * kvs_tool_parse_skip()'s). */
void
kvs_tool_r7_trim(const char *text, kvs_tool_parsed_t *out)
{
    size_t  e;

    e = kvs_tool_tail(text, out->content_len, out->content_at,
                      KVS_TOOL_R7_RESPED);

    if (e == out->content_len) {
        e = kvs_tool_tail(text, out->content_len, out->content_at,
                          KVS_TOOL_R7_THINKED);
    }

    if (e == out->content_len) {
        return;
    }

    while (e > out->content_at && kvs_tool_is_ws(text[e - 1])) {
        e--;
    }

    out->content_len = e;
}


int
kvs_tool_r7_opening(const char *text, size_t len)
{
    return kvs_tool_prefix(text, len, KVS_TOOL_R7_RESP)
           || kvs_tool_prefix(text, len, KVS_TOOL_R7_THINK);
}


size_t
kvs_tool_r7_skip(const char *text, size_t len)
{
    size_t  i;

    i = 0;

    if (kvs_tool_lit(text, len, &i, KVS_TOOL_R7_RESP)
        || kvs_tool_lit(text, len, &i, KVS_TOOL_R7_THINK))
    {
        return i;
    }

    return 0;
}


size_t
kvs_tool_r7_hold(const char *text, size_t len)
{
    size_t  i, end;

    /* an opening tag not yet whole is not yet skipped; a closing one
     * may end the content (kvs_tool_r7_trim) */
    if (kvs_tool_r7_opening(text, len)) {
        return 0;
    }

    i = kvs_tool_hold_marker(KVS_TOOL_R7_ACTION, text, len);
    end = kvs_tool_hold_marker("<|END_", text, len);

    return i < end ? i : end;
}
