/*
 * kvs_tool_stream: the streaming reader of tool calls (kvs_tool_stream.h).
 *
 * A state machine over the growing text: START (looking for where the
 * calls begin), SEEK (the next call's name), NAME, KEY (its arguments'
 * key), FENCE (DeepSeek's "```json" before them), OPEN (the arguments'
 * "{"), ARGS (inside them), FAIL.  Searches that find nothing move pos
 * to where a match could still begin, so each byte is looked at a
 * bounded number of times however the text is cut.  FUNCTIONARY32
 * decides at START from its first line: "all\n" (text, then maybe
 * ">>>" and calls) or a name (calls at once).  MINICPM3's keyword
 * arguments are turned into JSON as they come: "{" (or ",") and the key
 * quoted, ":" for "=", the value compacted, "}" for the ")".
 */

#include <string.h>

#include "kvs_tool_stream.h"

#define KVS_TS_START  0
#define KVS_TS_SEEK   1
#define KVS_TS_NAME   2
#define KVS_TS_KEY    3
#define KVS_TS_OPEN   4
#define KVS_TS_ARGS   5
#define KVS_TS_FAIL   6
#define KVS_TS_FENCE  7
#define KVS_TS_PYFENCE  8             /* MINICPM3: "```python" */
#define KVS_TS_PYSEEK   9             /* ... the next call, or the end */
#define KVS_TS_KWARGS  10             /* ... key=V, ... ) as JSON */
#define KVS_TS_DONE    11             /* nothing more to read */

/* DeepSeek's name follows this (kvs_tool_parse.c has its delimiters) */
#define KVS_TS_DS_SEP  "<｜tool▁sep｜>"

/* a name longer than this is not one the grammar wrote */
#define KVS_TS_MAX_NAME  256


void
kvs_tool_stream_init(kvs_tool_stream_t *ts, kvs_tool_syntax_t syn)
{
    memset(ts, 0, sizeof(*ts));
    ts->syn = syn;
    ts->state = (unsigned) syn < KVS_TOOL_SYN_N && syn != KVS_TOOL_SYN_NONE
                ? KVS_TS_START : KVS_TS_FAIL;
}


/* needle in text[from, len): its offset, or -1 with *from moved to where
 * a match could still begin once more text comes */
static long
kvs_ts_find(const char *text, size_t len, size_t *from, const char *needle)
{
    size_t       n;
    const char  *m;

    n = strlen(needle);

    if (*from < len) {
        m = memmem(text + *from, len - *from, needle, n);
        if (m != NULL) {
            return m - text;
        }
    }

    if (len >= n && len - n + 1 > *from) {
        *from = len - n + 1;
    }

    return -1;
}


static int
kvs_ts_space(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}


/* LLAMA3 (and LLAMA4) has no marker: the calls are the output from its
 * first non-space on, a "{" or the tag. */
static int
kvs_ts_start_llama3(kvs_tool_stream_t *ts, const char *text, size_t len)
{
    size_t       i, n, k;
    const char  *tag;

    for (i = 0; i < len && kvs_ts_space(text[i]); i++) {
        /* void */
    }

    if (i == len) {
        return KVS_TS_EV_NONE;
    }

    ts->content = i;

    if (text[i] == '{') {
        ts->pos = i;
        ts->state = KVS_TS_SEEK;
        return -1;
    }

    tag = kvs_tool_marker(KVS_TOOL_SYN_LLAMA3);
    n = strlen(tag);
    k = len - i < n ? len - i : n;

    if (memcmp(text + i, tag, k) != 0) {
        ts->state = KVS_TS_FAIL;
        return KVS_TS_EV_FAIL;
    }

    if (k < n) {
        return KVS_TS_EV_NONE;
    }

    ts->pos = i + n;
    ts->state = KVS_TS_SEEK;

    return -1;
}


/* ARGS: the bytes up to len or the object's end, compacted into args */
static int
kvs_ts_args(kvs_tool_stream_t *ts, const char *text, size_t len,
    kvs_buf_t *args)
{
    char    c;
    size_t  i, len0;

    len0 = args->len;

    for (i = ts->pos; i < len; i++) {
        c = text[i];

        if (ts->in_str) {
            if (ts->esc) {
                ts->esc = 0;
            } else if (c == '\\') {
                ts->esc = 1;
            } else if (c == '"') {
                ts->in_str = 0;
            }

        } else if (kvs_ts_space(c)) {
            continue;

        } else if (c == '"') {
            ts->in_str = 1;

        } else if (c == '{' || c == '[') {
            ts->depth++;

        } else if ((c == '}' || c == ']') && ts->depth > 0) {
            ts->depth--;
        }

        if (kvs_buf_append(args, &c, 1) != KVS_OK) {
            args->len = len0;
            return KVS_ENOMEM;
        }

        if (ts->depth == 0) {
            i++;
            ts->state = KVS_TS_SEEK;
            break;
        }
    }

    ts->pos = i;

    return args->len > len0 ? KVS_TS_EV_ARGS : KVS_TS_EV_NONE;
}


/* KWARGS: key=V, ... ) up to len or the call's end, as JSON into args */
static int
kvs_ts_kwargs(kvs_tool_stream_t *ts, const char *text, size_t len,
    kvs_buf_t *args)
{
    int          rc;
    char         c;
    size_t       i, len0;
    const char  *put;

    len0 = args->len;
    rc = KVS_OK;

    for (i = ts->pos; i < len && rc == KVS_OK; i++) {
        c = text[i];
        put = NULL;

        if (ts->kw == 2 && ts->in_str) {
            if (ts->esc) {
                ts->esc = 0;
            } else if (c == '\\') {
                ts->esc = 1;
            } else if (c == '"') {
                ts->in_str = 0;
            }

        } else if (kvs_ts_space(c)) {
            continue;

        } else if (ts->depth == 0 && c == ')' && ts->kw != 1) {
            rc = kvs_buf_append(args, ts->opened ? "}" : "{}",
                                ts->opened ? 1 : 2);
            i++;
            ts->state = KVS_TS_PYSEEK;
            break;

        } else if (ts->kw == 0) {
            /* a key's first byte */
            put = ts->opened ? ",\"" : "{\"";
            ts->opened = 1;
            ts->kw = 1;

        } else if (ts->kw == 1) {
            if (c == '=') {
                rc = kvs_buf_append(args, "\":", 2);
                ts->kw = 2;
                continue;
            }

        } else if (ts->depth == 0 && c == ',') {
            ts->kw = 0;
            continue;

        } else if (c == '"') {
            ts->in_str = 1;

        } else if (c == '{' || c == '[') {
            ts->depth++;

        } else if ((c == '}' || c == ']') && ts->depth > 0) {
            ts->depth--;
        }

        if (put != NULL && rc == KVS_OK) {
            rc = kvs_buf_append(args, put, 2);
        }

        if (rc == KVS_OK) {
            rc = kvs_buf_append(args, &c, 1);
        }
    }

    if (rc != KVS_OK) {
        args->len = len0;
        return KVS_ENOMEM;
    }

    ts->pos = i;

    return args->len > len0 ? KVS_TS_EV_ARGS : KVS_TS_EV_NONE;
}


int
kvs_tool_stream_next(kvs_tool_stream_t *ts, const char *text, size_t len,
    kvs_tool_delta_t *d, kvs_buf_t *args)
{
    int          rc, fn, ds, f32, py;
    long         at, at2;
    size_t       from, k;
    const char  *end, *seek;

    fn = ts->syn == KVS_TOOL_SYN_FUNCTIONARY;
    ds = ts->syn == KVS_TOOL_SYN_DEEPSEEK;
    f32 = ts->syn == KVS_TOOL_SYN_FUNCTIONARY32;
    py = ts->syn == KVS_TOOL_SYN_MINICPM3;

    /* where a name begins; it ends at '>' (FUNCTIONARY), a newline
     * (DEEPSEEK, FUNCTIONARY32) or its closing quote */
    seek = fn ? "<function=" : ds ? KVS_TS_DS_SEP : f32 ? ">>>"
           : ts->syn == KVS_TOOL_SYN_COMMANDR
             || ts->syn == KVS_TOOL_SYN_COMMANDR7B ? "\"tool_name\": \""
           : "\"name\": \"";

    for ( ;; ) {
        switch (ts->state) {

        case KVS_TS_START:
            if (ts->syn == KVS_TOOL_SYN_LLAMA3
                || ts->syn == KVS_TOOL_SYN_LLAMA4)
            {
                rc = kvs_ts_start_llama3(ts, text, len);
                if (rc >= 0) {
                    return rc;
                }
                break;
            }

            if (f32 && ts->pos == 0) {
                /* "all\n": text, calls after a ">>>"; else calls now */
                k = len < 4 ? len : 4;

                if (memcmp(text, "all\n", k) != 0) {
                    ts->content = 0;
                    ts->name_at = 0;
                    ts->state = KVS_TS_NAME;
                    break;
                }

                if (k < 4) {
                    return KVS_TS_EV_NONE;
                }

                ts->pos = 4;
            }

            at = kvs_ts_find(text, len, &ts->pos, kvs_tool_marker(ts->syn));
            if (at < 0) {
                return KVS_TS_EV_NONE;
            }

            ts->content = (size_t) at;
            ts->pos = (size_t) at + strlen(kvs_tool_marker(ts->syn));

            /* Functionary's markers are the start of a call */
            ts->name_at = ts->pos;
            ts->state = fn || f32 ? KVS_TS_NAME
                        : py ? KVS_TS_PYFENCE : KVS_TS_SEEK;
            break;

        case KVS_TS_PYFENCE:
            while (ts->pos < len && kvs_ts_space(text[ts->pos])) {
                ts->pos++;
            }

            if (ts->pos == len) {
                return KVS_TS_EV_NONE;
            }

            /* "```python" as the grammar writes it, or no fence */
            if (text[ts->pos] == '`') {
                k = len - ts->pos < 9 ? len - ts->pos : 9;

                if (memcmp(text + ts->pos, "```python", k) != 0) {
                    ts->state = KVS_TS_FAIL;
                    return KVS_TS_EV_FAIL;
                }

                if (k < 9) {
                    return KVS_TS_EV_NONE;
                }

                ts->pos += 9;
            }

            ts->state = KVS_TS_PYSEEK;
            break;

        case KVS_TS_PYSEEK:
            while (ts->pos < len && kvs_ts_space(text[ts->pos])) {
                ts->pos++;
            }

            if (ts->pos == len) {
                return KVS_TS_EV_NONE;
            }

            /* the fence's end or <|tool_call_end|>: no more calls */
            if (text[ts->pos] == '`' || text[ts->pos] == '<') {
                ts->state = KVS_TS_DONE;
                return KVS_TS_EV_NONE;
            }

            ts->name_at = ts->pos;
            ts->state = KVS_TS_NAME;
            break;

        case KVS_TS_DONE:
            return KVS_TS_EV_NONE;

        case KVS_TS_KWARGS:
            d->index = ts->n_calls - 1;
            d->name = NULL;
            d->name_len = 0;

            return kvs_ts_kwargs(ts, text, len, args);

        case KVS_TS_SEEK:
            at = kvs_ts_find(text, len, &ts->pos, seek);
            if (at < 0) {
                return KVS_TS_EV_NONE;
            }

            ts->pos = (size_t) at + strlen(seek);
            ts->name_at = ts->pos;
            ts->state = KVS_TS_NAME;
            break;

        case KVS_TS_NAME:
            end = ts->name_at < len
                  ? memchr(text + ts->name_at,
                           fn ? '>' : ds || f32 ? '\n' : py ? '(' : '"',
                           len - ts->name_at)
                  : NULL;

            if (end == NULL) {
                if (len - ts->name_at > KVS_TS_MAX_NAME) {
                    ts->state = KVS_TS_FAIL;
                    return KVS_TS_EV_FAIL;
                }
                return KVS_TS_EV_NONE;
            }

            d->index = ts->n_calls++;
            d->name = text + ts->name_at;
            d->name_len = (size_t) (end - d->name);
            ts->pos = (size_t) (end - text) + 1;
            ts->state = fn || f32 ? KVS_TS_OPEN
                        : ds ? KVS_TS_FENCE : py ? KVS_TS_KWARGS
                        : KVS_TS_KEY;
            ts->kw = 0;
            ts->opened = 0;
            ts->depth = 0;
            ts->in_str = 0;
            ts->esc = 0;

            return KVS_TS_EV_HEAD;

        case KVS_TS_FENCE:
            while (ts->pos < len && kvs_ts_space(text[ts->pos])) {
                ts->pos++;
            }

            if (ts->pos == len) {
                return KVS_TS_EV_NONE;
            }

            /* "```json" as the grammar writes it, or a bare "```", or
             * none (the parser takes all three) */
            k = len - ts->pos < 7 ? len - ts->pos : 7;

            if (text[ts->pos] == '`') {
                if (memcmp(text + ts->pos, "```json", k) == 0) {
                    if (k < 7) {
                        return KVS_TS_EV_NONE;
                    }
                    ts->pos += 7;

                } else if (k >= 3 && memcmp(text + ts->pos, "```", 3) == 0) {
                    ts->pos += 3;

                } else {
                    ts->state = KVS_TS_FAIL;
                    return KVS_TS_EV_FAIL;
                }
            }

            ts->state = KVS_TS_OPEN;
            break;

        case KVS_TS_KEY:
            from = ts->pos;
            at = kvs_ts_find(text, len, &from, "\"arguments\": ");
            from = ts->pos;
            at2 = kvs_ts_find(text, len, &from, "\"parameters\": ");

            if (at < 0 || (at2 >= 0 && at2 < at)) {
                at = at2 >= 0 ? at2 + 14 : -1;
            } else {
                at += 13;
            }

            if (at < 0) {
                return KVS_TS_EV_NONE;
            }

            ts->pos = (size_t) at;
            ts->state = KVS_TS_OPEN;
            break;

        case KVS_TS_OPEN:
            while (ts->pos < len && kvs_ts_space(text[ts->pos])) {
                ts->pos++;
            }

            if (ts->pos == len) {
                return KVS_TS_EV_NONE;
            }

            if (text[ts->pos] != '{') {
                ts->state = KVS_TS_FAIL;
                return KVS_TS_EV_FAIL;
            }

            ts->depth = 0;
            ts->in_str = 0;
            ts->esc = 0;
            ts->state = KVS_TS_ARGS;
            break;

        case KVS_TS_ARGS:
            d->index = ts->n_calls - 1;
            d->name = NULL;
            d->name_len = 0;

            return kvs_ts_args(ts, text, len, args);

        default:
            return KVS_TS_EV_FAIL;
        }
    }
}
