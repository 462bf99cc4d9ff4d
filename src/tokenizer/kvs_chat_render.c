/*
 * kvs_chat_render: rendering OpenAI messages in a chat template: the
 * eight built-in families (the formats are described in kvs_chat.h), or
 * the template's Jinja (kvs_chat_jinja.c) after the same message checks
 * (kvs_chat.c).
 *
 * Rendering is two passes over the messages: the first checks every
 * message (role, content shape, the family's ordering rules) and renders
 * nothing, so that errors name the first bad field in message order; the
 * second appends, and can then fail only for memory, after which out->len
 * is put back.  Trimming is done in place on what was just appended, so
 * content is copied once and nothing is allocated beyond out's growth.
 *
 * Content spans (when asked for) are recorded as each content is
 * finished, so they are born sorted and apart (every family writes
 * template text between two contents); a later trim that reaches back
 * over recorded spans (Llama 2 strips a whole turn) clips and shifts
 * them with the bytes, so a span always covers exactly the content bytes
 * that are in out.
 */

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/kvs_utf8.h"
#include "kvs_chat.h"
#include "kvs_chat_impl.h"
#include "kvs_chat_jinja.h"

#define KVS_CHAT_DEFAULT_DATE  "26 Jul 2024"   /* Llama 3.1 and 3.3 */


typedef enum {
    KVS_CHAT_TRIM_NONE = 0,
    KVS_CHAT_TRIM_ALL,                /* strip the content as a whole */
    KVS_CHAT_TRIM_PARTS               /* strip each text part (Gemma) */
} kvs_chat_trim_t;


/* Rendering. */

/*
 * Appends with a sticky status: after the first failure nothing more is
 * appended and the family code need not test every call; render() looks
 * at w->rc once at the end.
 */
typedef struct {
    kvs_buf_t  *out;
    kvs_buf_t  *spans;                /* kvs_span_t[], or NULL */
    size_t      base;                 /* out->len at the call: span
                                         offsets count from here */
    size_t      first;                /* spans->len at the call (bytes):
                                         the spans of this call follow */
    int         rc;                   /* KVS_OK or the first failure */
} kvs_chat_w_t;


static void
kvs_chat_w(kvs_chat_w_t *w, const void *p, size_t n)
{
    if (w->rc == KVS_OK && n > 0) {
        w->rc = kvs_buf_append(w->out, p, n);
    }
}


#define kvs_chat_lit(w, s)  kvs_chat_w(w, s, sizeof(s) - 1)


static void
kvs_chat_str(kvs_chat_w_t *w, const char *s)
{
    kvs_chat_w(w, s, strlen(s));
}


/* Python's str.isspace(), which Jinja's trim and str.strip() use. */
static int
kvs_chat_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20)
           || cp == 0x85 || cp == 0xa0 || cp == 0x1680
           || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028
           || cp == 0x2029 || cp == 0x202f || cp == 0x205f
           || cp == 0x3000;
}


/* Marks out[start..len) as content; nothing when it is empty. */
static void
kvs_chat_mark(kvs_chat_w_t *w, size_t start)
{
    kvs_span_t  span;

    if (w->rc != KVS_OK || w->spans == NULL || w->out->len == start) {
        return;
    }

    span.off = start - w->base;
    span.len = w->out->len - start;
    w->rc = kvs_buf_append(w->spans, &span, sizeof(kvs_span_t));
}


/* Where a boundary at x in out goes when out[a..b), a >= start, moves to
 * start and the rest of out from start on is dropped. */
static size_t
kvs_chat_moved(size_t x, size_t start, size_t a, size_t b)
{
    if (x <= start) {
        return x;
    }

    if (x <= a) {
        return start;
    }

    return start + ((x < b ? x : b) - a);
}


/*
 * The spans follow their bytes through a trim; those left empty go.
 *
 * Spans are written in text order and never overlap, and a trim moves
 * only bytes at or after start, so a span that ends by start stays as it
 * is.  Only the tail that reaches past start is visited: a turn's trim
 * costs its own spans, not every span written before it (visiting them
 * all made a chat of n messages cost n^2: 80k messages took 5 s).
 */
static void
kvs_chat_clip(kvs_chat_w_t *w, size_t start, size_t a, size_t b)
{
    size_t       i, n, kept, lo, hi;
    kvs_span_t  *s;

    if (w->spans == NULL || w->spans->len == w->first) {
        return;                       /* (data may be NULL then) */
    }

    s = (kvs_span_t *) (w->spans->data + w->first);
    n = (w->spans->len - w->first) / sizeof(kvs_span_t);

    for (kept = n; kept > 0; kept--) {
        if (w->base + s[kept - 1].off + s[kept - 1].len <= start) {
            break;
        }
    }

    for (i = kept; i < n; i++) {
        lo = kvs_chat_moved(w->base + s[i].off, start, a, b);
        hi = kvs_chat_moved(w->base + s[i].off + s[i].len, start, a, b);

        if (hi > lo) {
            s[kept].off = lo - w->base;
            s[kept].len = hi - lo;
            kept++;
        }
    }

    w->spans->len = w->first + kept * sizeof(kvs_span_t);
}


/* Strips out[start..len) in place, as Python's str.strip() would. */
static void
kvs_chat_trim(kvs_chat_w_t *w, size_t start)
{
    size_t      pos, k, a, b;
    uint32_t    cp;
    kvs_buf_t  *out;

    out = w->out;
    if (w->rc != KVS_OK || start > out->len) {
        return;
    }

    a = out->len;                     /* first byte not stripped */
    b = start;                        /* one past the last one */

    for (pos = start; pos < out->len; pos += k) {
        k = kvs_utf8_next(out->data + pos, out->len - pos, &cp);

        if (k == 0) {                 /* not text: never whitespace */
            k = 1;
            cp = 0xfffd;
        }

        if (!kvs_chat_space(cp)) {
            if (a == out->len) {
                a = pos;
            }
            b = pos + k;
        }
    }

    if (a == out->len) {              /* all whitespace: all goes */
        a = start;
        b = start;
    }

    kvs_chat_clip(w, start, a, b);
    memmove(out->data + start, out->data + a, b - a);
    out->len = start + (b - a);
}


static void
kvs_chat_json_str(kvs_chat_w_t *w, const json_t *s)
{
    kvs_chat_w(w, json_string_value(s), json_string_length(s));
}


/* A message's content (checked already), trimmed as the family does, and
 * marked: the parts are joined with nothing, so it is one span. */
static void
kvs_chat_content(kvs_chat_w_t *w, const json_t *msg, kvs_chat_trim_t trim)
{
    size_t         j, start, part;
    const json_t  *c, *p;

    c = json_object_get(msg, "content");
    start = w->out->len;

    if (json_is_string(c)) {
        kvs_chat_json_str(w, c);

    } else if (json_is_array(c)) {
        json_array_foreach(c, j, p) {
            part = w->out->len;
            kvs_chat_json_str(w, json_object_get(p, "text"));

            if (trim == KVS_CHAT_TRIM_PARTS) {
                kvs_chat_trim(w, part);
            }
        }
    }

    if (trim == KVS_CHAT_TRIM_ALL
        || (trim == KVS_CHAT_TRIM_PARTS && json_is_string(c)))
    {
        kvs_chat_trim(w, start);
    }

    kvs_chat_mark(w, start);
}


static kvs_chat_role_t
kvs_chat_role_of(const json_t *msg)
{
    kvs_chat_role_t  role;

    role = KVS_CHAT_USER;
    (void) kvs_chat_role(msg, 0, &role, NULL);     /* checked already */

    return role;
}


/* "26 Jul 2024": strftime's "%d %b %Y", but not the locale's month. */
static const char *
kvs_chat_today(char *buf, size_t size)
{
    time_t     now;
    struct tm  tm;

    static const char  *months[] = {
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep",
        "Oct", "Nov", "Dec"
    };

    now = time(NULL);
    if (localtime_r(&now, &tm) == NULL || tm.tm_mon < 0 || tm.tm_mon > 11) {
        return KVS_CHAT_DEFAULT_DATE;
    }

    snprintf(buf, size, "%02d %s %d", tm.tm_mday, months[tm.tm_mon],
             tm.tm_year + 1900);

    return buf;
}


static void
kvs_chat_bos(kvs_chat_w_t *w, const kvs_chat_t *chat,
    const kvs_chat_args_t *args)
{
    if (chat->bos && args->bos != NULL) {
        kvs_chat_w(w, args->bos, args->bos_len);
    }
}


static void
kvs_chat_eos(kvs_chat_w_t *w, const kvs_chat_args_t *args)
{
    if (args->eos != NULL) {
        kvs_chat_w(w, args->eos, args->eos_len);
    }
}


/*
 * The families whose turns are all alike, "pre role post content end",
 * for messages[from..], and when asked the assistant's opening, "pre
 * assistant post": Llama 3, ChatML, Zephyr and Phi-3.  end NULL is the
 * EOS (Zephyr); sep follows end.
 */
static void
kvs_chat_turns(kvs_chat_w_t *w, const json_t *messages, size_t from,
    const char *pre, const char *post, const char *end, const char *sep,
    kvs_chat_trim_t trim, const kvs_chat_args_t *args)
{
    size_t         i;
    const json_t  *msg;

    for (i = from; i < json_array_size(messages); i++) {
        msg = json_array_get(messages, i);

        kvs_chat_str(w, pre);
        kvs_chat_str(w, kvs_chat_role_names[kvs_chat_role_of(msg)]);
        kvs_chat_str(w, post);
        kvs_chat_content(w, msg, trim);

        if (end != NULL) {
            kvs_chat_str(w, end);

        } else {
            kvs_chat_eos(w, args);
        }

        kvs_chat_str(w, sep);
    }

    if (args->add_generation_prompt) {
        kvs_chat_str(w, pre);
        kvs_chat_str(w, kvs_chat_role_names[KVS_CHAT_ASSISTANT]);
        kvs_chat_str(w, post);
    }
}


static void
kvs_chat_llama3(kvs_chat_w_t *w, const kvs_chat_t *chat,
    const json_t *messages, size_t first, const kvs_chat_args_t *args)
{
    char         today[32];
    const char  *date;

    kvs_chat_bos(w, chat, args);

    if (chat->kind == KVS_CHAT_LLAMA31) {
        date = args->date;
        if (date == NULL) {
            date = chat->today ? kvs_chat_today(today, sizeof(today))
                               : KVS_CHAT_DEFAULT_DATE;
        }

        kvs_chat_lit(w, "<|start_header_id|>system<|end_header_id|>\n\n"
                        "Cutting Knowledge Date: December 2023\n"
                        "Today Date: ");
        kvs_chat_str(w, date);
        kvs_chat_lit(w, "\n\n");

        if (first == 1) {
            kvs_chat_content(w, json_array_get(messages, 0),
                             KVS_CHAT_TRIM_ALL);
        }

        kvs_chat_lit(w, "<|eot_id|>");

    } else {
        first = 0;                    /* llama3 keeps system in place */
    }

    kvs_chat_turns(w, messages, first, "<|start_header_id|>",
                   "<|end_header_id|>\n\n", "<|eot_id|>", "",
                   KVS_CHAT_TRIM_ALL, args);
}


/* Llama 2, Mistral and Gemma fold the system message (when there is
 * one) into the first turn after it, messages[first]: open, the content
 * as written, close. */
static void
kvs_chat_fold_system(kvs_chat_w_t *w, const json_t *messages, size_t i,
    size_t first, const char *open, const char *close)
{
    if (i == first && first == 1) {
        kvs_chat_str(w, open);
        kvs_chat_content(w, json_array_get(messages, 0), KVS_CHAT_TRIM_NONE);
        kvs_chat_str(w, close);
    }
}


/*
 * Llama 2 strips each turn as a whole, the folded system block included:
 * the block starts with "<<SYS>>", so only trailing whitespace can go, but
 * a blank user message lets the strip eat the block's "\n\n" as well.
 */
static void
kvs_chat_llama2(kvs_chat_w_t *w, const kvs_chat_t *chat,
    const json_t *messages, size_t first, const kvs_chat_args_t *args)
{
    size_t         i, start;
    const json_t  *msg;

    for (i = first; i < json_array_size(messages); i++) {
        msg = json_array_get(messages, i);

        if (kvs_chat_role_of(msg) == KVS_CHAT_USER) {
            kvs_chat_bos(w, chat, args);
            kvs_chat_lit(w, "[INST] ");
            start = w->out->len;

            kvs_chat_fold_system(w, messages, i, first, "<<SYS>>\n",
                                 "\n<</SYS>>\n\n");
            kvs_chat_content(w, msg, KVS_CHAT_TRIM_NONE);
            kvs_chat_trim(w, start);
            kvs_chat_lit(w, " [/INST]");

        } else {
            kvs_chat_lit(w, " ");
            kvs_chat_content(w, msg, KVS_CHAT_TRIM_ALL);
            kvs_chat_lit(w, " ");
            kvs_chat_eos(w, args);
        }
    }
}


static void
kvs_chat_mistral(kvs_chat_w_t *w, const kvs_chat_t *chat,
    const json_t *messages, size_t first, const kvs_chat_args_t *args)
{
    size_t         i;
    const json_t  *msg;

    kvs_chat_bos(w, chat, args);

    for (i = first; i < json_array_size(messages); i++) {
        msg = json_array_get(messages, i);

        if (kvs_chat_role_of(msg) == KVS_CHAT_USER) {
            kvs_chat_lit(w, " [INST] ");
            kvs_chat_fold_system(w, messages, i, first, "", "\n\n");
            kvs_chat_content(w, msg, KVS_CHAT_TRIM_NONE);
            kvs_chat_lit(w, " [/INST]");

        } else {
            kvs_chat_lit(w, " ");
            kvs_chat_content(w, msg, KVS_CHAT_TRIM_NONE);
            kvs_chat_eos(w, args);
        }
    }
}


static void
kvs_chat_chatml(kvs_chat_w_t *w, const kvs_chat_t *chat,
    const json_t *messages, size_t first, const kvs_chat_args_t *args)
{
    kvs_chat_bos(w, chat, args);

    if (chat->system != NULL && first == 0) {
        kvs_chat_lit(w, "<|im_start|>system\n");
        kvs_chat_w(w, chat->system, chat->system_len);
        kvs_chat_lit(w, "<|im_end|>\n");
    }

    kvs_chat_turns(w, messages, 0, "<|im_start|>", "\n", "<|im_end|>", "\n",
                   KVS_CHAT_TRIM_NONE, args);
}


/* Zephyr and Phi-3: "<|role|>\n" content, and an end marker. */
static void
kvs_chat_pipes(kvs_chat_w_t *w, const kvs_chat_t *chat,
    const json_t *messages, const kvs_chat_args_t *args)
{
    kvs_chat_bos(w, chat, args);
    kvs_chat_turns(w, messages, 0, "<|", "|>\n",
                   chat->kind == KVS_CHAT_PHI3 ? "<|end|>" : NULL, "\n",
                   KVS_CHAT_TRIM_NONE, args);
}


static void
kvs_chat_gemma(kvs_chat_w_t *w, const kvs_chat_t *chat,
    const json_t *messages, size_t first, const kvs_chat_args_t *args)
{
    size_t         i;
    const json_t  *msg;

    kvs_chat_bos(w, chat, args);

    for (i = first; i < json_array_size(messages); i++) {
        msg = json_array_get(messages, i);

        if (kvs_chat_role_of(msg) == KVS_CHAT_USER) {
            kvs_chat_lit(w, "<start_of_turn>user\n");

        } else {
            kvs_chat_lit(w, "<start_of_turn>model\n");
        }

        kvs_chat_fold_system(w, messages, i, first, "", "\n\n");
        kvs_chat_content(w, msg, KVS_CHAT_TRIM_PARTS);
        kvs_chat_lit(w, "<end_of_turn>\n");
    }

    if (args->add_generation_prompt) {
        kvs_chat_lit(w, "<start_of_turn>model\n");
    }
}


int
kvs_chat_render(const kvs_chat_t *chat, const json_t *messages,
    const kvs_chat_args_t *args, kvs_buf_t *out, kvs_err_t *err)
{
    int           rc;
    size_t        first, start;
    kvs_chat_w_t  w;

    if (chat->jinja != NULL) {
        rc = kvs_chat_check_messages(messages, err);
        if (rc != KVS_OK) {
            return rc;
        }

        rc = kvs_chat_check_tools(args->tools, err);
        if (rc != KVS_OK) {
            return rc;
        }

        return kvs_chat_jinja_render(chat->jinja, messages, args, out, err);
    }

    if ((unsigned) chat->kind >= KVS_CHAT_N) {
        return kvs_err_set(err, KVS_EINVAL, "chat template kind %d is not "
                           "one we know", (int) chat->kind);
    }

    /* the spans are read back in place (a trim moves them) */
    if (args->spans != NULL && args->spans->len % sizeof(kvs_span_t) != 0) {
        return kvs_err_set(err, KVS_EINVAL, "chat spans: the buffer holds "
                           "%zu bytes, not whole spans", args->spans->len);
    }

    if (args->tools != NULL && !json_is_null(args->tools)) {
        return kvs_err_set(err, KVS_EUNSUPPORTED, "tools: tools are not "
                           "supported by the built-in %s chat template: "
                           "tool calling needs the model's own (Jinja) "
                           "chat template", kvs_chat_name(chat->kind));
    }

    first = 0;

    rc = kvs_chat_check(chat, messages, &first, err);
    if (rc != KVS_OK) {
        return rc;
    }

    start = out->len;
    w.out = out;
    w.spans = args->spans;
    w.base = start;
    w.first = w.spans != NULL ? w.spans->len : 0;
    w.rc = KVS_OK;

    switch (chat->kind) {

    case KVS_CHAT_LLAMA3:
    case KVS_CHAT_LLAMA31:
        kvs_chat_llama3(&w, chat, messages, first, args);
        break;

    case KVS_CHAT_LLAMA2:
        kvs_chat_llama2(&w, chat, messages, first, args);
        break;

    case KVS_CHAT_CHATML:
        kvs_chat_chatml(&w, chat, messages, first, args);
        break;

    case KVS_CHAT_MISTRAL:
        kvs_chat_mistral(&w, chat, messages, first, args);
        break;

    case KVS_CHAT_ZEPHYR:
    case KVS_CHAT_PHI3:
        kvs_chat_pipes(&w, chat, messages, args);
        break;

    default: /* KVS_CHAT_GEMMA */
        kvs_chat_gemma(&w, chat, messages, first, args);
        break;
    }

    if (w.rc != KVS_OK) {
        out->len = start;

        if (w.spans != NULL) {
            w.spans->len = w.first;
        }

        return kvs_err_set(err, w.rc, "rendering the %s chat template: "
                           "out of memory", kvs_chat_name(chat->kind));
    }

    return KVS_OK;
}
