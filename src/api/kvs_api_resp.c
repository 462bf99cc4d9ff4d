/*
 * kvs_api_resp: chat and completions response bodies and SSE events,
 * written straight into the caller's buffer by a small JSON writer (a
 * tree would cost an allocation per value for every streamed token, and
 * jansson neither escapes U+2028 nor formats floats the way we need);
 * the writer is shared with the Messages route's (kvs_api_jw.h).
 *
 * Invariants: everything written is valid JSON whatever the input bytes
 * (invalid UTF-8 is replaced, never passed); a failed call leaves the
 * buffer at its length on entry; token ids are checked against the
 * vocabulary before anything is written, so the only failure past that
 * point is memory.
 */

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_hash.h"
#include "base/kvs_utf8.h"
#include "kvs_api.h"
#include "kvs_api_jw.h"
#include "kvs_api_resp.h"


static const char  kvs_api_fffd[] = "\xef\xbf\xbd";


void
kvs_jw_put(kvs_jw_t *w, const void *p, size_t n)
{
    if (w->rc == KVS_OK && n > 0 && kvs_buf_append(w->b, p, n) != KVS_OK) {
        w->rc = KVS_ENOMEM;
    }
}


void
kvs_jw_lit(kvs_jw_t *w, const char *s)
{
    kvs_jw_put(w, s, strlen(s));
}


void
kvs_jw_u64(kvs_jw_t *w, uint64_t v)
{
    int   n;
    char  tmp[24];

    n = snprintf(tmp, sizeof(tmp), "%" PRIu64, v);
    kvs_jw_put(w, tmp, (size_t) n);
}


static void
kvs_jw_i64(kvs_jw_t *w, int64_t v)
{
    int   n;
    char  tmp[24];

    n = snprintf(tmp, sizeof(tmp), "%" PRId64, v);
    kvs_jw_put(w, tmp, (size_t) n);
}


/* The inside of a JSON string (no quotes); see the header for the rules. */
static void
kvs_jw_text(kvs_jw_t *w, const uint8_t *s, size_t len)
{
    int       k;
    size_t    i, run;
    uint8_t   c;
    uint32_t  cp;
    char      esc[6];

    static const char  hex[] = "0123456789abcdef";

    i = 0;

    while (i < len) {
        for (run = i; run < len; run++) {
            c = s[run];
            if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\') {
                break;
            }
        }

        kvs_jw_put(w, s + i, run - i);
        i = run;

        if (i == len) {
            break;
        }

        c = s[i];

        if (c < 0x80) {
            switch (c) {
            case '"':
                kvs_jw_put(w, "\\\"", 2);
                break;
            case '\\':
                kvs_jw_put(w, "\\\\", 2);
                break;
            case '\b':
                kvs_jw_put(w, "\\b", 2);
                break;
            case '\f':
                kvs_jw_put(w, "\\f", 2);
                break;
            case '\n':
                kvs_jw_put(w, "\\n", 2);
                break;
            case '\r':
                kvs_jw_put(w, "\\r", 2);
                break;
            case '\t':
                kvs_jw_put(w, "\\t", 2);
                break;
            default:
                memcpy(esc, "\\u00", 4);
                esc[4] = hex[c >> 4];
                esc[5] = hex[c & 15];
                kvs_jw_put(w, esc, 6);
                break;
            }

            i++;
            continue;
        }

        k = kvs_utf8_step(s + i, len - i, &cp);

        if (k > 0) {
            if (cp == 0x2028) {
                kvs_jw_put(w, "\\u2028", 6);
            } else if (cp == 0x2029) {
                kvs_jw_put(w, "\\u2029", 6);
            } else {
                kvs_jw_put(w, s + i, (size_t) k);
            }
            i += (size_t) k;

        } else {
            /* an invalid maximal subpart, or a character cut off by the
             * end of the string: one U+FFFD either way */
            kvs_jw_put(w, kvs_api_fffd, 3);
            i = k == 0 ? len : i + (size_t) -k;
        }
    }
}


void
kvs_jw_str(kvs_jw_t *w, const char *s, size_t len)
{
    kvs_jw_put(w, "\"", 1);
    kvs_jw_text(w, (const uint8_t *) s, len);
    kvs_jw_put(w, "\"", 1);
}


/* Shortest round-trip float, always typed real; -inf and NaN: floor. */
static void
kvs_jw_logprob(kvs_jw_t *w, float f)
{
    int   n, prec;
    char  tmp[40];

    if (!isfinite(f)) {
        n = snprintf(tmp, sizeof(tmp), "%.1f", KVS_API_LOGPROB_FLOOR);
        kvs_jw_put(w, tmp, (size_t) n);
        return;
    }

    /* no fewer digits than the integer part has, so that -20 is not
     * written -2e+01; nine significant digits always round-trip a float */
    prec = 1;

    if (fabsf(f) >= 10.0f) {
        prec = (int) floor(log10(fabs((double) f))) + 1;
        prec = prec < 9 ? prec : 9;
    }

    for ( /* void */ ; prec <= 9; prec++) {
        n = snprintf(tmp, sizeof(tmp), "%.*g", prec, (double) f);
        if (strtof(tmp, NULL) == f) {
            break;
        }
    }

    if (strchr(tmp, '.') == NULL && strchr(tmp, 'e') == NULL) {
        memcpy(tmp + n, ".0", 3);
        n += 2;
    }

    kvs_jw_put(w, tmp, (size_t) n);
}


/* --- logprob tokens ------------------------------------------------------ */

/* SentencePiece and WordPiece text where "▁" stands for a space; control
 * and unknown tokens are raw text (kvs_detok_push decides alike). */
static int
kvs_api_tok_spaced(const kvs_vocab_t *v, const kvs_token_t *t)
{
    return (v->kind == KVS_VOCAB_SPM || v->kind == KVS_VOCAB_WPM)
           && t->type != KVS_TOKT_CONTROL && t->type != KVS_TOKT_UNKNOWN;
}


/* SPM <0xNN>: the byte, else -1. */
static int
kvs_api_tok_byte(const kvs_vocab_t *v, int32_t id)
{
    if (v->tokens[id].type == KVS_TOKT_BYTE && v->byte_of != NULL) {
        return v->byte_of[id];
    }

    return -1;
}


static void
kvs_api_tok_str(kvs_jw_t *w, const kvs_vocab_t *v, int32_t id)
{
    int                 byte;
    size_t              i, start;
    uint8_t             b;
    const uint8_t      *p;
    const kvs_token_t  *t;

    t = &v->tokens[id];
    p = (const uint8_t *) t->text;
    byte = kvs_api_tok_byte(v, id);

    kvs_jw_put(w, "\"", 1);

    if (byte >= 0) {
        b = (uint8_t) byte;
        kvs_jw_text(w, &b, 1);

    } else if (kvs_api_tok_spaced(v, t)) {
        /* "▁" is a whole character, so escaping the runs between them
         * apart decodes as the mapped string would */
        for (i = 0, start = 0; i < t->len; ) {
            if (i + 3 <= t->len && memcmp(p + i, "\xe2\x96\x81", 3) == 0) {
                kvs_jw_text(w, p + start, i - start);
                kvs_jw_put(w, " ", 1);
                i += 3;
                start = i;
            } else {
                i++;
            }
        }

        kvs_jw_text(w, p + start, t->len - start);

    } else {
        kvs_jw_text(w, p, t->len);
    }

    kvs_jw_put(w, "\"", 1);
}


static void
kvs_jw_byte(kvs_jw_t *w, uint8_t b, int first)
{
    size_t  n;
    char    tmp[4];

    n = 0;

    if (!first) {
        tmp[n++] = ',';
    }

    if (b >= 100) {
        tmp[n++] = (char) ('0' + b / 100);
    }

    if (b >= 10) {
        tmp[n++] = (char) ('0' + b / 10 % 10);
    }

    tmp[n++] = (char) ('0' + b % 10);

    kvs_jw_put(w, tmp, n);
}


static void
kvs_api_tok_bytes(kvs_jw_t *w, const kvs_vocab_t *v, int32_t id)
{
    int                 byte, spaced;
    size_t              i, n;
    const uint8_t      *p;
    const kvs_token_t  *t;

    t = &v->tokens[id];
    p = (const uint8_t *) t->text;
    byte = kvs_api_tok_byte(v, id);
    spaced = kvs_api_tok_spaced(v, t);

    kvs_jw_put(w, "[", 1);

    if (byte >= 0) {
        kvs_jw_byte(w, (uint8_t) byte, 1);

    } else {
        for (i = 0, n = 0; i < t->len; n++) {
            if (spaced && i + 3 <= t->len
                && memcmp(p + i, "\xe2\x96\x81", 3) == 0)
            {
                kvs_jw_byte(w, ' ', n == 0);
                i += 3;
            } else {
                kvs_jw_byte(w, p[i], n == 0);
                i++;
            }
        }
    }

    kvs_jw_put(w, "]", 1);
}


static int
kvs_api_lp_check(const kvs_api_choice_t *c, const kvs_vocab_t *v,
    kvs_err_t *err)
{
    size_t                        i;
    int32_t                       j, id;
    const kvs_sample_logprobs_t  *r;

    if (c->n_lp > 0 && (v == NULL || c->lp == NULL)) {
        return kvs_err_set(err, KVS_EINVAL,
                           "choice %u: logprobs without a vocabulary",
                           c->index);
    }

    for (i = 0; i < c->n_lp; i++) {
        r = &c->lp[i];

        if (r->n_top < 0 || r->n_top > KVS_SAMPLE_MAX_TOP_LOGPROBS) {
            return kvs_err_set(err, KVS_EINVAL,
                               "choice %u: logprobs[%zu]: %d top tokens",
                               c->index, i, r->n_top);
        }

        for (j = -1; j < r->n_top; j++) {
            id = j < 0 ? r->token : r->top_token[j];

            if (id < 0 || (uint32_t) id >= v->n_tokens) {
                return kvs_err_set(err, KVS_EINVAL,
                                   "choice %u: logprobs[%zu]: token id %d "
                                   "is out of range (vocabulary of %u)",
                                   c->index, i, id, v->n_tokens);
            }
        }
    }

    return KVS_OK;
}


/* chat: {"content":[{token, logprob, bytes, top_logprobs}], "refusal"} */
static void
kvs_api_chat_lp(kvs_jw_t *w, const kvs_api_choice_t *c,
    const kvs_vocab_t *v)
{
    size_t                        i;
    int32_t                       j;
    const kvs_sample_logprobs_t  *r;

    kvs_jw_lit(w, "{\"content\":[");

    for (i = 0; i < c->n_lp; i++) {
        r = &c->lp[i];

        kvs_jw_lit(w, i ? ",{\"token\":" : "{\"token\":");
        kvs_api_tok_str(w, v, r->token);
        kvs_jw_lit(w, ",\"logprob\":");
        kvs_jw_logprob(w, r->logprob);
        kvs_jw_lit(w, ",\"bytes\":");
        kvs_api_tok_bytes(w, v, r->token);
        kvs_jw_lit(w, ",\"top_logprobs\":[");

        for (j = 0; j < r->n_top; j++) {
            kvs_jw_lit(w, j ? ",{\"token\":" : "{\"token\":");
            kvs_api_tok_str(w, v, r->top_token[j]);
            kvs_jw_lit(w, ",\"logprob\":");
            kvs_jw_logprob(w, r->top_logprob[j]);
            kvs_jw_lit(w, ",\"bytes\":");
            kvs_api_tok_bytes(w, v, r->top_token[j]);
            kvs_jw_put(w, "}", 1);
        }

        kvs_jw_put(w, "]}", 2);
    }

    kvs_jw_lit(w, "],\"refusal\":null}");
}


/*
 * completions' {token: logprob}: the top tokens, then the sampled one if
 * it is not among them (OpenAI: up to logprobs + 1 entries).  Two tokens
 * can render alike (pieces of one character both show U+FFFD); a JSON
 * object must not repeat a key, so the likelier keeps it.
 */
static void
kvs_api_cmpl_top(kvs_jw_t *w, const kvs_sample_logprobs_t *r,
    const kvs_vocab_t *v)
{
    float    lp;
    size_t   mark, start, nk, k;
    int32_t  j, id, n;
    size_t   key_off[KVS_SAMPLE_MAX_TOP_LOGPROBS + 1];
    size_t   key_len[KVS_SAMPLE_MAX_TOP_LOGPROBS + 1];

    n = r->n_top;

    for (j = 0; j < r->n_top; j++) {
        if (r->top_token[j] == r->token) {
            break;
        }
    }

    if (j == r->n_top) {
        n++;
    }

    nk = 0;
    kvs_jw_put(w, "{", 1);

    for (j = 0; j < n; j++) {
        id = j < r->n_top ? r->top_token[j] : r->token;
        lp = j < r->n_top ? r->top_logprob[j] : r->logprob;

        mark = w->b->len;

        if (nk > 0) {
            kvs_jw_put(w, ",", 1);
        }

        start = w->b->len;
        kvs_api_tok_str(w, v, id);

        if (w->rc != KVS_OK) {
            return;
        }

        for (k = 0; k < nk; k++) {
            if (key_len[k] == w->b->len - start
                && memcmp(w->b->data + key_off[k], w->b->data + start,
                          key_len[k]) == 0)
            {
                break;
            }
        }

        if (k < nk) {
            w->b->len = mark;
            continue;
        }

        key_off[nk] = start;
        key_len[nk] = w->b->len - start;
        nk++;

        kvs_jw_put(w, ":", 1);
        kvs_jw_logprob(w, lp);
    }

    kvs_jw_put(w, "}", 1);
}


/* Code points the detokenizer emits for id, pos advanced past it. */
static void
kvs_api_textpos_push(kvs_jw_t *w, kvs_api_textpos_t *pos, int32_t id)
{
    size_t  len0, i;

    if (w->rc != KVS_OK) {
        return;
    }

    /* the text goes to the end of the output, is counted, and is cut
     * off again: no scratch buffer of our own */
    len0 = w->b->len;

    if (kvs_detok_push(&pos->detok, id, w->b, NULL) != KVS_OK) {
        w->b->len = len0;
        w->rc = KVS_ENOMEM;
        return;
    }

    for (i = len0; i < w->b->len; i++) {
        pos->chars += (w->b->data[i] & 0xc0) != 0x80;
    }

    w->b->len = len0;
}


/* completions: {tokens, token_logprobs, top_logprobs, text_offset} */
static void
kvs_api_cmpl_lp(kvs_jw_t *w, const kvs_api_choice_t *c,
    const kvs_vocab_t *v)
{
    size_t              i;
    kvs_api_textpos_t   fresh, *pos;

    kvs_jw_lit(w, "{\"tokens\":[");

    for (i = 0; i < c->n_lp; i++) {
        if (i) {
            kvs_jw_put(w, ",", 1);
        }
        kvs_api_tok_str(w, v, c->lp[i].token);
    }

    kvs_jw_lit(w, "],\"token_logprobs\":[");

    for (i = 0; i < c->n_lp; i++) {
        if (i) {
            kvs_jw_put(w, ",", 1);
        }
        kvs_jw_logprob(w, c->lp[i].logprob);
    }

    kvs_jw_lit(w, "],\"top_logprobs\":[");

    for (i = 0; i < c->n_lp; i++) {
        if (i) {
            kvs_jw_put(w, ",", 1);
        }
        kvs_api_cmpl_top(w, &c->lp[i], v);
    }

    kvs_jw_lit(w, "],\"text_offset\":[");

    pos = c->pos;

    if (pos == NULL && c->n_lp > 0) {
        kvs_api_textpos_init(&fresh, v, NULL, 0, 0);
        pos = &fresh;
    }

    for (i = 0; i < c->n_lp; i++) {
        if (i) {
            kvs_jw_put(w, ",", 1);
        }
        kvs_jw_u64(w, pos->chars);
        kvs_api_textpos_push(w, pos, c->lp[i].token);
    }

    kvs_jw_lit(w, "]}");
}


/* --- bodies -------------------------------------------------------------- */

static const char *
kvs_api_finish_str(const kvs_api_choice_t *c)
{
    switch (c->finish) {
    case KVS_FINISH_STOP:
        return c->tool_finish ? "\"tool_calls\"" : "\"stop\"";
    case KVS_FINISH_LENGTH:
        return "\"length\"";
    case KVS_FINISH_CONTENT_FILTER:
        return "\"content_filter\"";
    default:
        return "null";
    }
}


static int
kvs_api_choices_check(const kvs_api_resp_head_t *h,
    const kvs_api_choice_t *c, size_t n, int whole, const kvs_vocab_t *v,
    kvs_err_t *err)
{
    int     rc;
    size_t  i;

    for (i = 0; i < n; i++) {
        if (!kvs_finish_answered(c[i].finish)
            && (whole || c[i].finish != KVS_FINISH_NONE))
        {
            return kvs_err_set(err, KVS_EINVAL,
                               "choice %u: finish \"%s\" has no "
                               "finish_reason", c[i].index,
                               kvs_finish_name(c[i].finish));
        }

        /* records the request did not ask for are not written */
        if (h->logprobs) {
            rc = kvs_api_lp_check(&c[i], v, err);
            if (rc != KVS_OK) {
                return rc;
            }
        }
    }

    return KVS_OK;
}


static void
kvs_api_head(kvs_jw_t *w, const kvs_api_resp_head_t *h, int chunk)
{
    kvs_jw_lit(w, "{\"id\":");
    kvs_jw_str(w, h->id, h->id_len);
    kvs_jw_lit(w, h->kind != KVS_API_CHAT ? ",\"object\":\"text_completion\""
                  : chunk ? ",\"object\":\"chat.completion.chunk\""
                  : ",\"object\":\"chat.completion\"");
    kvs_jw_lit(w, ",\"created\":");
    kvs_jw_i64(w, h->created);
    kvs_jw_lit(w, ",\"model\":");
    kvs_jw_str(w, h->model, h->model_len);
    kvs_jw_lit(w, ",\"choices\":[");
}


static void
kvs_api_logprobs(kvs_jw_t *w, const kvs_api_resp_head_t *h,
    const kvs_api_choice_t *c, int chunk, const kvs_vocab_t *v)
{
    kvs_jw_lit(w, ",\"logprobs\":");

    /* a chunk without tokens (chat's role and finish chunks) has none,
     * as vLLM and OpenAI send it */
    if (!h->logprobs || (chunk && c->n_lp == 0)) {
        kvs_jw_lit(w, "null");

    } else if (h->kind == KVS_API_CHAT) {
        kvs_api_chat_lp(w, c, v);

    } else {
        kvs_api_cmpl_lp(w, c, v);
    }
}


/* ,"tool_calls":[...]: whole calls in a message; in a chunk, a call's
 * first piece has its id, type and name, the later ones only their index
 * and arguments, as OpenAI streams them. */
static void
kvs_api_tool_calls(kvs_jw_t *w, const kvs_api_choice_t *c, int chunk,
    int first)
{
    size_t                      i;
    const kvs_api_tool_call_t  *t;

    kvs_jw_lit(w, first ? "\"tool_calls\":[" : ",\"tool_calls\":[");

    for (i = 0; i < c->n_calls; i++) {
        t = &c->calls[i];
        kvs_jw_lit(w, i ? ",{" : "{");

        if (chunk) {
            kvs_jw_lit(w, "\"index\":");
            kvs_jw_u64(w, t->index);
            kvs_jw_lit(w, t->id != NULL ? "," : "");
        }

        if (t->id != NULL) {
            kvs_jw_lit(w, "\"id\":");
            kvs_jw_str(w, t->id, strlen(t->id));
            kvs_jw_lit(w, ",\"type\":\"function\"");
        }

        kvs_jw_lit(w, ",\"function\":{");
        if (t->id != NULL) {
            kvs_jw_lit(w, "\"name\":");
            kvs_jw_str(w, t->name, strlen(t->name));
            kvs_jw_lit(w, ",");
        }
        kvs_jw_lit(w, "\"arguments\":");
        kvs_jw_str(w, t->args != NULL ? t->args : "", t->args_len);
        kvs_jw_lit(w, "}}");
    }

    kvs_jw_lit(w, "]");
}


static void
kvs_api_choice(kvs_jw_t *w, const kvs_api_resp_head_t *h,
    const kvs_api_choice_t *c, int chunk, const kvs_vocab_t *v)
{
    if (h->kind != KVS_API_CHAT) {
        kvs_jw_lit(w, "{\"text\":");
        kvs_jw_str(w, c->text != NULL ? c->text : "", c->len);
        kvs_jw_lit(w, ",\"index\":");
        kvs_jw_u64(w, c->index);

    } else if (!chunk) {
        kvs_jw_lit(w, "{\"index\":");
        kvs_jw_u64(w, c->index);
        kvs_jw_lit(w, ",\"message\":{\"role\":\"assistant\",\"content\":");
        if (c->text != NULL) {
            kvs_jw_str(w, c->text, c->len);
        } else {
            kvs_jw_lit(w, "null");
        }
        kvs_jw_lit(w, ",\"refusal\":null");
        if (c->n_calls > 0) {
            kvs_api_tool_calls(w, c, 0, 0);
        }
        kvs_jw_put(w, "}", 1);

    } else {
        kvs_jw_lit(w, "{\"index\":");
        kvs_jw_u64(w, c->index);
        kvs_jw_lit(w, ",\"delta\":{");
        if (c->role) {
            kvs_jw_lit(w, "\"role\":\"assistant\"");
        }
        if (c->text != NULL) {
            kvs_jw_lit(w, c->role ? ",\"content\":" : "\"content\":");
            kvs_jw_str(w, c->text, c->len);
        }
        if (c->n_calls > 0) {
            kvs_api_tool_calls(w, c, 1, !c->role && c->text == NULL);
        }
        kvs_jw_put(w, "}", 1);
    }

    kvs_api_logprobs(w, h, c, chunk, v);

    kvs_jw_lit(w, ",\"finish_reason\":");
    kvs_jw_lit(w, kvs_api_finish_str(c));
    kvs_jw_put(w, "}", 1);
}


static void
kvs_api_usage(kvs_jw_t *w, const kvs_api_usage_t *u)
{
    uint64_t  lower;

    kvs_jw_lit(w, "\"usage\":{\"prompt_tokens\":");
    kvs_jw_u64(w, u->prompt_tokens);
    kvs_jw_lit(w, ",\"completion_tokens\":");
    kvs_jw_u64(w, u->completion_tokens);
    kvs_jw_lit(w, ",\"total_tokens\":");
    kvs_jw_u64(w, (uint64_t) u->prompt_tokens + u->completion_tokens);
    kvs_jw_lit(w, ",\"prompt_tokens_details\":{\"cached_tokens\":");
    kvs_jw_u64(w, u->cached_tokens);

    /* the extension: the same split by where the K/V came from */
    if (u->tiered) {
        lower = (uint64_t) u->cached_tier + u->cached_host;
        kvs_jw_lit(w, ",\"cached_tokens_by_tier\":{\"pool\":");
        kvs_jw_u64(w, u->cached_tokens >= lower
                      ? (uint64_t) u->cached_tokens - lower : 0);

        if (u->tiered & KVS_API_TIER_HOST) {
            kvs_jw_lit(w, ",\"host\":");
            kvs_jw_u64(w, u->cached_host);
        }

        if (u->tiered & KVS_API_TIER_DISK) {
            kvs_jw_lit(w, ",\"disk\":");
            kvs_jw_u64(w, u->cached_tier);
        }

        kvs_jw_lit(w, "}");
    }

    kvs_jw_lit(w, "},\"completion_tokens_details\":"
                  "{\"reasoning_tokens\":0}");

    if (u->breakpoints) {
        kvs_jw_lit(w, ",\"cache_read_input_tokens\":");
        kvs_jw_u64(w, u->cached_tokens);
        kvs_jw_lit(w, ",\"cache_creation_input_tokens\":");
        kvs_jw_u64(w, u->cache_creation_tokens);
    }

    kvs_jw_lit(w, "}");
}


int
kvs_jw_end(kvs_jw_t *w, size_t len0)
{
    if (w->rc != KVS_OK) {
        w->b->len = len0;
    }

    return w->rc;
}


int
kvs_api_resp_body(kvs_buf_t *out, const kvs_api_resp_head_t *h,
    const kvs_api_choice_t *c, size_t n, const kvs_api_usage_t *u,
    const kvs_vocab_t *v, kvs_err_t *err)
{
    int       rc;
    size_t    i, len0;
    kvs_jw_t  w;

    rc = kvs_api_choices_check(h, c, n, 1, v, err);
    if (rc != KVS_OK) {
        return rc;
    }

    len0 = out->len;
    w.b = out;
    w.rc = KVS_OK;

    kvs_api_head(&w, h, 0);

    for (i = 0; i < n; i++) {
        if (i) {
            kvs_jw_put(&w, ",", 1);
        }
        kvs_api_choice(&w, h, &c[i], 0, v);
    }

    kvs_jw_put(&w, "]", 1);

    if (u != NULL) {
        kvs_jw_put(&w, ",", 1);
        kvs_api_usage(&w, u);
    }

    kvs_jw_put(&w, "}", 1);

    if (kvs_jw_end(&w, len0) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "response: out of memory");
    }

    return KVS_OK;
}


int
kvs_api_resp_chunk(kvs_buf_t *out, const kvs_api_resp_head_t *h,
    const kvs_api_choice_t *c, size_t n, int include_usage,
    const kvs_vocab_t *v, kvs_err_t *err)
{
    int       rc;
    size_t    i, len0;
    kvs_jw_t  w;

    rc = kvs_api_choices_check(h, c, n, 0, v, err);
    if (rc != KVS_OK) {
        return rc;
    }

    len0 = out->len;
    w.b = out;
    w.rc = KVS_OK;

    kvs_jw_put(&w, "data: ", 6);
    kvs_api_head(&w, h, 1);

    for (i = 0; i < n; i++) {
        if (i) {
            kvs_jw_put(&w, ",", 1);
        }
        kvs_api_choice(&w, h, &c[i], 1, v);
    }

    kvs_jw_lit(&w, include_usage ? "],\"usage\":null}\n\n" : "]}\n\n");

    if (kvs_jw_end(&w, len0) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "response: out of memory");
    }

    return KVS_OK;
}


int
kvs_api_resp_usage_chunk(kvs_buf_t *out, const kvs_api_resp_head_t *h,
    const kvs_api_usage_t *u)
{
    size_t    len0;
    kvs_jw_t  w;

    len0 = out->len;
    w.b = out;
    w.rc = KVS_OK;

    kvs_jw_put(&w, "data: ", 6);
    kvs_api_head(&w, h, 1);
    kvs_jw_put(&w, "],", 2);
    kvs_api_usage(&w, u);
    kvs_jw_put(&w, "}\n\n", 3);

    return kvs_jw_end(&w, len0);
}


int
kvs_api_resp_done(kvs_buf_t *out)
{
    static const char  done[] = "data: [DONE]\n\n";

    return kvs_buf_append(out, done, sizeof(done) - 1);
}


int
kvs_api_resp_error_event(kvs_buf_t *out, const char *message,
    const char *type, const char *code)
{
    size_t  len0;

    len0 = out->len;

    if (kvs_buf_append(out, "data: ", 6) != KVS_OK
        || kvs_api_error_json(out, message != NULL ? message : "",
                              type != NULL ? type : "server_error", NULL,
                              code) != KVS_OK
        || kvs_buf_append(out, "\n\n", 2) != KVS_OK)
    {
        out->len = len0;
        return KVS_ENOMEM;
    }

    return KVS_OK;
}


/* prefix[n] then KVS_API_RESP_ID_RAND random base-62 characters */
static size_t
kvs_api_rand_id(char *buf, const char *prefix, size_t n, uint64_t *rng)
{
    size_t    i;
    uint64_t  r;

    static const char  b62[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                               "abcdefghijklmnopqrstuvwxyz";

    memcpy(buf, prefix, n);

    /* 8 characters per draw: 62^8 is far below 2^64, so the modulo
     * bias is negligible */
    r = 0;

    for (i = 0; i < KVS_API_RESP_ID_RAND; i++) {
        if (i % 8 == 0) {
            r = kvs_splitmix64(rng);
        }

        buf[n++] = b62[r % 62];
        r /= 62;
    }

    buf[n] = '\0';

    return n;
}


size_t
kvs_api_resp_id(char buf[KVS_API_RESP_ID_MAX], kvs_api_kind_t kind,
    uint64_t *rng)
{
    switch (kind) {
    case KVS_API_CHAT:
        return kvs_api_rand_id(buf, "chatcmpl-", 9, rng);
    case KVS_API_MESSAGES:
        return kvs_api_rand_id(buf, "msg_", 4, rng);
    default:
        return kvs_api_rand_id(buf, "cmpl-", 5, rng);
    }
}


size_t
kvs_api_resp_call_id(char buf[KVS_API_CALL_ID_MAX], uint64_t *rng)
{
    return kvs_api_rand_id(buf, "call_", 5, rng);
}


void
kvs_api_textpos_init(kvs_api_textpos_t *pos, const kvs_vocab_t *v,
    const int32_t *prompt, size_t n_prompt, uint64_t base)
{
    kvs_detok_init(&pos->detok, v, 0);

    if (n_prompt > 0) {
        kvs_detok_skip(&pos->detok, prompt, n_prompt);
    }

    pos->chars = base;
}
