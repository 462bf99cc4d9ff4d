/*
 * kvs_api_cache: cache breakpoints -> byte offsets in the rendered chat
 * prompt -> prompt token counts (kvs_api_cache.h says why these are
 * sound).
 *
 * Invariants: a cut conversation shares every unchanged value with the
 * request's tree (references, never copies of the text) and is released
 * before returning; an offset never exceeds the prompt's length and is
 * at a UTF-8 character start; a token count never exceeds n_ids.
 */

#include <stdlib.h>
#include <string.h>

#include "kvs_api_cache.h"


/* messages cut after breaks b: see kvs_api_cache.h; NULL when out of
 * memory. */
static json_t *
kvs_api_cache_cut(const json_t *messages, const kvs_api_break_t *b)
{
    int            rc;
    size_t         k, j;
    json_t        *a, *m, *c, *parts;
    const json_t  *content;

    a = json_array();
    if (a == NULL) {
        return NULL;
    }

    rc = 0;

    for (k = 0; k < json_array_size(messages) && rc == 0; k++) {
        /* jansson's getters take no const; nothing here writes to m */
        m = json_array_get(messages, k);

        if (k < b->message || (k == b->message && b->part < 0)) {
            rc = json_array_append(a, m);
            continue;
        }

        c = json_copy(m);             /* shallow: the values are shared */
        if (c == NULL) {
            rc = -1;
            break;
        }

        if (k == b->message) {
            content = json_object_get(m, "content");
            parts = json_array();

            for (j = 0; parts != NULL && j <= (size_t) b->part
                        && j < json_array_size(content); j++)
            {
                if (json_array_append(parts,
                                      json_array_get(content, j)) != 0)
                {
                    json_decref(parts);
                    parts = NULL;
                }
            }

        } else {
            parts = json_string("");
        }

        rc = json_object_set_new(c, "content", parts);
        if (rc == 0) {
            rc = json_array_append_new(a, c);

        } else {
            json_decref(c);
        }
    }

    if (rc != 0) {
        json_decref(a);
        return NULL;
    }

    return a;
}


int
kvs_api_cache_offsets(const kvs_chat_t *chat, const json_t *messages,
    const kvs_chat_args_t *args, const char *text, size_t len,
    const kvs_api_break_t *breaks, uint32_t n, size_t *off, kvs_err_t *err)
{
    int               rc;
    size_t            x, same, ns;
    json_t           *cut;
    uint32_t          k;
    kvs_buf_t         out, spans;
    kvs_span_t       *s;
    kvs_chat_args_t   a;

    a = *args;
    a.spans = &spans;
    memset(&out, 0, sizeof(out));
    memset(&spans, 0, sizeof(spans));
    rc = KVS_OK;

    for (k = 0; k < n && rc == KVS_OK; k++) {
        if (breaks[k].message >= json_array_size(messages)) {
            rc = kvs_err_set(err, KVS_EINVAL, "cache breakpoint %u: message "
                             "%u out of %zu", k, breaks[k].message,
                             json_array_size(messages));
            break;
        }

        cut = kvs_api_cache_cut(messages, &breaks[k]);
        if (cut == NULL) {
            rc = kvs_err_set(err, KVS_ENOMEM, "cache breakpoints: out of "
                             "memory");
            break;
        }

        out.len = 0;
        spans.len = 0;

        rc = kvs_chat_render(chat, cut, &a, &out, err);
        json_decref(cut);

        if (rc != KVS_OK) {
            break;
        }

        ns = spans.len / sizeof(kvs_span_t);
        s = (kvs_span_t *) spans.data;
        x = ns > 0 ? s[ns - 1].off + s[ns - 1].len : 0;

        if (chat->jinja != NULL) {
            /* a template run as written reports no spans: the whole cut
             * rendering, as far as it agrees with the prompt (which may
             * take in the next turn's header too) */
            x = out.len;
        }

        /* a prefix of the prompt only as far as the two agree */
        for (same = 0; same < x && same < len && same < out.len; same++) {
            if (out.data[same] != (uint8_t) text[same]) {
                break;
            }
        }

        x = same;

        while (x > 0 && x < len && ((uint8_t) text[x] & 0xc0) == 0x80) {
            x--;
        }

        off[k] = x;
    }

    kvs_buf_free(&out);
    kvs_buf_free(&spans);

    return rc;
}


int
kvs_api_cache_tokens(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, unsigned flags, const kvs_span_t *spans,
    size_t n_spans, const int32_t *ids, size_t n_ids, const size_t *off,
    uint32_t n, uint32_t *n_tokens, kvs_err_t *err)
{
    int          rc;
    size_t       g, i, x;
    uint32_t     k;
    kvs_ids_t    pre;
    kvs_span_t  *cut;

    if (n_spans > 0) {
        cut = malloc(n_spans * sizeof(kvs_span_t));
        if (cut == NULL) {
            return kvs_err_set(err, KVS_ENOMEM, "cache breakpoints: out of "
                               "memory");
        }

    } else {
        cut = NULL;
    }

    memset(&pre, 0, sizeof(pre));
    rc = KVS_OK;

    for (k = 0; k < n; k++) {
        n_tokens[k] = 0;
    }

    for (k = 0; k < n; k++) {
        x = off[k];

        if (x == 0 || x > len) {
            continue;
        }

        /* the guard spans as they are in text[0..x) */
        for (g = 0; g < n_spans && spans[g].off < x; g++) {
            cut[g] = spans[g];
            if (cut[g].len > x - cut[g].off) {
                cut[g].len = x - cut[g].off;
            }
        }

        pre.n = 0;

        rc = kvs_tok_encode_guarded(v, ctx, text, x, flags, cut, g, &pre,
                                    err);
        if (rc != KVS_OK) {
            break;
        }

        for (i = 0; i < pre.n && i < n_ids; i++) {
            if (pre.ids[i] != ids[i]) {
                break;
            }
        }

        n_tokens[k] = (uint32_t) i;
    }

    if (rc != KVS_OK) {
        for (k = 0; k < n; k++) {
            n_tokens[k] = 0;
        }
    }

    kvs_ids_free(&pre);
    free(cut);

    return rc;
}
