/*
 * kvs_tool_parse_py: tool calls written as Python calls with keyword
 * arguments whose values are JSON (MiniCPM3: its template writes each
 * value with tojson), read into OpenAI's {name, arguments}: the
 * arguments object is {"key": value, ...} in the order written.
 *
 * Invariants: kvs_tool_parse.c's (never past text[len], all or
 * nothing); a value is delimited by kvs_tool_json_end() and read by
 * jansson; a key given twice is malformed, as in a JSON object.
 */

#include <string.h>

#include <jansson.h>

#include "kvs_tool_parse_impl.h"

#define KVS_TOOL_MC3_END  "<|tool_call_end|>"
#define KVS_TOOL_MC3_KEY  64              /* a longer key: malformed */


static int
kvs_tool_ident(char c, int first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'
           || (!first && c >= '0' && c <= '9');
}


/* key=V, ... ) from text[*i] (after the "("): into args. */
static int
kvs_tool_kwargs(const char *text, size_t len, size_t *i, json_t *args)
{
    int      rc;
    char     key[KVS_TOOL_MC3_KEY + 1];
    size_t   at, n;
    json_t  *v;

    *i = kvs_tool_skip_ws(text, len, *i);

    if (kvs_tool_lit(text, len, i, ")")) {
        return KVS_OK;
    }

    for ( ;; ) {
        at = *i;

        while (*i < len && kvs_tool_ident(text[*i], *i == at)) {
            (*i)++;
        }

        n = *i - at;

        if (n == 0 || n > KVS_TOOL_MC3_KEY) {
            return KVS_EFORMAT;
        }

        memcpy(key, text + at, n);
        key[n] = '\0';

        *i = kvs_tool_skip_ws(text, len, *i);

        if (!kvs_tool_lit(text, len, i, "=")
            || json_object_get(args, key) != NULL)
        {
            return KVS_EFORMAT;
        }

        *i = kvs_tool_skip_ws(text, len, *i);

        rc = kvs_tool_json_at(text, len, i, &v);
        if (rc != KVS_OK) {
            return rc;
        }

        if (json_object_set_new(args, key, v) != 0) {
            return KVS_ENOMEM;
        }

        *i = kvs_tool_skip_ws(text, len, *i);

        if (kvs_tool_lit(text, len, i, ")")) {
            return KVS_OK;
        }

        if (!kvs_tool_lit(text, len, i, ",")) {
            return KVS_EFORMAT;
        }

        *i = kvs_tool_skip_ws(text, len, *i);
    }
}


int
kvs_tool_parse_mc3(const char *text, size_t len, size_t i,
    kvs_tool_parsed_t *out)
{
    int          rc, fence;
    size_t       name_at, n;
    json_t      *args;
    const char  *q;

    if (!kvs_tool_lit(text, len, &i, kvs_tool_marker(KVS_TOOL_SYN_MINICPM3)))
    {
        return KVS_EFORMAT;
    }

    i = kvs_tool_skip_ws(text, len, i);

    /* the template fences the calls as python; a model may not */
    fence = kvs_tool_lit(text, len, &i, "```");
    if (fence) {
        (void) kvs_tool_lit(text, len, &i, "python");
    }

    for ( ;; ) {
        i = kvs_tool_skip_ws(text, len, i);

        if (fence ? kvs_tool_lit(text, len, &i, "```")
                  : kvs_tool_lit(text, len, &i, KVS_TOOL_MC3_END))
        {
            break;
        }

        name_at = i;
        q = memchr(text + i, '(', len - i);

        if (q == NULL) {
            return KVS_EFORMAT;
        }

        n = (size_t) (q - (text + name_at));
        i = (size_t) (q - text) + 1;

        if (!kvs_tool_name_ok(text + name_at, n, 1)) {
            return KVS_EFORMAT;
        }

        args = json_object();
        if (args == NULL) {
            return KVS_ENOMEM;
        }

        rc = kvs_tool_kwargs(text, len, &i, args);

        if (rc == KVS_OK) {
            rc = kvs_tool_add(out, args, text + name_at, n, 0);
        }

        json_decref(args);

        if (rc != KVS_OK) {
            return rc;
        }
    }

    if (fence) {
        i = kvs_tool_skip_ws(text, len, i);

        if (!kvs_tool_lit(text, len, &i, KVS_TOOL_MC3_END)) {
            return KVS_EFORMAT;
        }
    }

    return kvs_tool_skip_ws(text, len, i) == len ? KVS_OK : KVS_EFORMAT;
}
