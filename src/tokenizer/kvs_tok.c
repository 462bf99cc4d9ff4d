/*
 * kvs_tok: the front of encoding and all of decoding (see kvs_tok.h).
 *
 * Encoding: validate UTF-8, cut the text at special tokens (leftmost,
 * longest first, as Hugging Face's added-token matcher does), normalise
 * plain fragments to NFC where the vocabulary asks, and hand them to the
 * vocabulary's algorithm (kvs_tok_impl.h).  Control and unknown tokens
 * are matched only with KVS_TOK_SPECIAL, so text a user typed can never
 * become a control token; user-defined tokens always match.
 *
 * Decoding is the streaming detokenizer run over the whole sequence, so
 * the two always agree.
 */

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/kvs_utf8.h"
#include "kvs_tok_impl.h"


static int kvs_tok_nfc(kvs_tok_ctx_t *ctx, const char **text, size_t *len,
    kvs_err_t *err);
static int kvs_tok_encode_run(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, unsigned flags, const kvs_span_t *guard,
    size_t nguard, size_t limit, kvs_ids_t *out, kvs_err_t *err);
static int kvs_tok_fragment(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, size_t limit, kvs_ids_t *out,
    kvs_err_t *err);
static int kvs_tok_over(const kvs_vocab_t *v, size_t len, size_t limit,
    kvs_ids_t *out, kvs_err_t *err);
static int kvs_tok_special_at(const kvs_vocab_t *v, const char *p,
    size_t left, unsigned flags, size_t room);


/* --- id arrays ---------------------------------------------------------- */

int
kvs_ids_reserve(kvs_ids_t *a, size_t extra)
{
    size_t    cap;
    int32_t  *ids;

    if (extra <= a->cap - a->n) {
        return KVS_OK;
    }

    if (extra > SIZE_MAX / sizeof(int32_t) - a->n) {
        return KVS_ENOMEM;
    }

    cap = a->cap ? a->cap : 64;
    while (cap - a->n < extra) {
        cap = cap > SIZE_MAX / 2 / sizeof(int32_t) ? a->n + extra : cap * 2;
    }

    ids = realloc(a->ids, cap * sizeof(int32_t));
    if (ids == NULL) {
        return KVS_ENOMEM;
    }

    a->ids = ids;
    a->cap = cap;

    return KVS_OK;
}


int
kvs_ids_push(kvs_ids_t *a, int32_t id)
{
    if (a->n == a->cap && kvs_ids_reserve(a, 1) != KVS_OK) {
        return KVS_ENOMEM;
    }

    a->ids[a->n++] = id;

    return KVS_OK;
}


void
kvs_ids_free(kvs_ids_t *a)
{
    free(a->ids);
    a->ids = NULL;
    a->n = a->cap = 0;
}


void
kvs_tok_ctx_free(kvs_tok_ctx_t *ctx)
{
    kvs_pretok_scratch_free(ctx);
    kvs_tok_bpe_scratch_free(ctx);
    kvs_tok_spm_scratch_free(ctx);
    kvs_tok_wpm_scratch_free(ctx);
    free(ctx->norm);
    ctx->norm = NULL;
    ctx->norm_cap = 0;
}


size_t
kvs_tok_ctx_scratch_bytes(const kvs_tok_ctx_t *ctx)
{
    return kvs_pretok_scratch_bytes(ctx) + kvs_tok_bpe_scratch_bytes(ctx)
           + kvs_tok_spm_scratch_bytes(ctx) + kvs_tok_wpm_scratch_bytes(ctx)
           + ctx->norm_cap * sizeof(utf8proc_int32_t);
}


void
kvs_tok_ctx_trim(kvs_tok_ctx_t *ctx)
{
    /* all or nothing: what a big input grew is most of it, and the rest
     * (the BPE cache, the regex stack) is cheap to make again */
    if (kvs_tok_ctx_scratch_bytes(ctx) > KVS_TOK_SCRATCH_KEEP) {
        kvs_tok_ctx_free(ctx);
    }
}


/* --- encoding ----------------------------------------------------------- */

int
kvs_tok_encode(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx, const char *text,
    size_t len, unsigned flags, kvs_ids_t *out, kvs_err_t *err)
{
    return kvs_tok_encode_guarded(v, ctx, text, len, flags, NULL, 0, out,
                                  err);
}


int
kvs_tok_encode_guarded(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, unsigned flags, const kvs_span_t *guard,
    size_t nguard, kvs_ids_t *out, kvs_err_t *err)
{
    return kvs_tok_encode_limit(v, ctx, text, len, flags, guard, nguard,
                                KVS_TOK_NO_LIMIT, out, err);
}


int
kvs_tok_encode_limit(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, unsigned flags, const kvs_span_t *guard,
    size_t nguard, size_t limit, kvs_ids_t *out, kvs_err_t *err)
{
    int  rc;

    rc = kvs_tok_encode_run(v, ctx, text, len, flags, guard, nguard, limit,
                            out, err);

    /* whatever the text was, the context keeps a bounded scratch */
    kvs_tok_ctx_trim(ctx);

    return rc;
}


static int
kvs_tok_encode_run(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, unsigned flags, const kvs_span_t *guard,
    size_t nguard, size_t limit, kvs_ids_t *out, kvs_err_t *err)
{
    int     rc, id;
    size_t  bad, i, start, n0, g, room;

    n0 = out->n;

    if (len > UINT32_MAX) {
        return kvs_err_set(err, KVS_EINVAL,
                           "text of %zu bytes is too long to tokenize "
                           "(at most 4 GiB)", len);
    }

    bad = kvs_utf8_invalid_at((const uint8_t *) text, len);
    if (bad != len) {
        return kvs_err_set(err, KVS_EINVAL,
                           "text is not valid UTF-8: byte 0x%02x at offset "
                           "%zu", (uint8_t) text[bad], bad);
    }

    for (g = 0; g < nguard; g++) {
        if (guard[g].off > len || guard[g].len > len - guard[g].off
            || (g > 0 && guard[g].off < guard[g - 1].off + guard[g - 1].len))
        {
            return kvs_err_set(err, KVS_EINVAL,
                               "guard span %zu is out of order or outside "
                               "the text", g);
        }
    }

    if ((flags & KVS_TOK_ADD_BOS) && v->bos >= 0) {
        if (kvs_ids_push(out, v->bos) != KVS_OK) {
            goto nomem;
        }
    }

    if (out->n > limit) {
        return kvs_tok_over(v, 0, limit, out, err);
    }

    /* SentencePiece prefixes a space to the text and to what follows each
     * special token (as llama.cpp and the legacy Llama tokenizer do); as
     * fragments lie between special tokens, every fragment gets it. */
    start = 0;
    g = 0;

    for (i = 0; i < len; i++) {
        if (v->special_start[(uint8_t) text[i]]
            == v->special_start[(uint8_t) text[i] + 1])
        {
            continue;
        }

        /* the first guard span that ends after i */
        while (g < nguard && guard[g].off + guard[g].len <= i) {
            g++;
        }

        room = g == nguard ? len - i
               : guard[g].off > i ? guard[g].off - i : 0;

        id = kvs_tok_special_at(v, text + i, len - i, flags, room);
        if (id < 0) {
            continue;
        }

        if (i > start) {
            rc = kvs_tok_fragment(v, ctx, text + start, i - start, limit,
                                  out, err);
            if (rc != KVS_OK) {
                goto failed;
            }
        }

        if (kvs_ids_push(out, id) != KVS_OK) {
            goto nomem;
        }

        if (out->n > limit) {
            return kvs_tok_over(v, 0, limit, out, err);
        }

        i += v->tokens[id].len - 1;
        start = i + 1;
    }

    if (len > start) {
        rc = kvs_tok_fragment(v, ctx, text + start, len - start, limit, out,
                              err);
        if (rc != KVS_OK) {
            goto failed;
        }
    }

    if ((flags & KVS_TOK_ADD_EOS) && v->eos >= 0) {
        if (kvs_ids_push(out, v->eos) != KVS_OK) {
            goto nomem;
        }

        if (out->n > limit) {
            return kvs_tok_over(v, 0, limit, out, err);
        }
    }

    return KVS_OK;

nomem:

    rc = kvs_err_set(err, KVS_ENOMEM, "tokenize: out of memory");

failed:

    /* a text too long keeps the prefix it made (kvs_tok.h) */
    if (rc != KVS_ETOOLONG) {
        out->n = n0;
    }

    return rc;
}


/*
 * KVS_ETOOLONG if out already passed the limit (cut to limit + 1 ids) or
 * if len more bytes would: no token covers more than max_token_len bytes
 * of text (SentencePiece's escaped spaces and byte-level BPE's characters
 * are only longer than the bytes they stand for), so they make at least
 * len / max_token_len tokens.  KVS_OK otherwise.
 */
static int
kvs_tok_over(const kvs_vocab_t *v, size_t len, size_t limit, kvs_ids_t *out,
    kvs_err_t *err)
{
    size_t  least;

    if (limit == KVS_TOK_NO_LIMIT) {
        return KVS_OK;
    }

    least = v->max_token_len ? len / v->max_token_len : 0;

    if (out->n <= limit && least <= limit - out->n) {
        return KVS_OK;
    }

    if (out->n > limit) {
        out->n = limit + 1;
    }

    return kvs_err_set(err, KVS_ETOOLONG,
                       "the text is more than %zu tokens long", limit);
}


/*
 * The longest special token that starts at p and may match, or -1.  A
 * control token must end within the first free bytes (those before the
 * next guard span; 0 when p is inside one).
 */
static int
kvs_tok_special_at(const kvs_vocab_t *v, const char *p, size_t left,
    unsigned flags, size_t room)
{
    uint32_t            i, end;
    const kvs_token_t  *tok;

    i = v->special_start[(uint8_t) p[0]];
    end = v->special_start[(uint8_t) p[0] + 1];

    for ( ; i < end; i++) {
        tok = &v->tokens[v->special[i]];

        if (tok->len > left || memcmp(tok->text, p, tok->len) != 0) {
            continue;
        }

        if (tok->type == KVS_TOKT_USER_DEFINED
            || ((flags & KVS_TOK_SPECIAL) && tok->len <= room))
        {
            return v->special[i];
        }
    }

    return -1;
}


/*
 * NFC of *text into the context's reused buffer (decomposed code points,
 * then composed and re-encoded to UTF-8 in place), so a warm context does
 * not allocate; *text and *len then point at the result.
 */
static int
kvs_tok_nfc(kvs_tok_ctx_t *ctx, const char **text, size_t *len,
    kvs_err_t *err)
{
    utf8proc_ssize_t   n;
    utf8proc_option_t  opt;

    opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;

    for ( ;; ) {
        n = utf8proc_decompose((const utf8proc_uint8_t *) *text,
                               (utf8proc_ssize_t) *len, ctx->norm,
                               (utf8proc_ssize_t) ctx->norm_cap, opt);
        if (n < 0) {
            return kvs_err_set(err, KVS_EINVAL, "NFC: %s",
                               utf8proc_errmsg(n));
        }

        /* re-encoding in place needs one spare code point's room */
        if ((size_t) n < ctx->norm_cap) {
            break;
        }

        if (kvs_grow(&ctx->norm, &ctx->norm_cap, (size_t) n + 1,
                     sizeof(utf8proc_int32_t)) != KVS_OK)
        {
            return kvs_err_set(err, KVS_ENOMEM, "NFC: out of memory");
        }
    }

    n = utf8proc_reencode(ctx->norm, n, opt);
    if (n < 0) {
        return kvs_err_set(err, KVS_EINVAL, "NFC: %s", utf8proc_errmsg(n));
    }

    *text = (const char *) ctx->norm;
    *len = (size_t) n;

    return KVS_OK;
}


/* Pieces a BPE fragment is cut into at a time (a batch is 8 KiB of
 * kvs_piece_t): the pre-tokenizer's scratch does not grow with the
 * text, and a limit stops the cutting soon after it is passed. */
#define KVS_TOK_PIECE_BATCH  1024


/* One fragment of plain text, after NFC where the vocabulary wants it. */
static int
kvs_tok_fragment(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx, const char *text,
    size_t len, size_t limit, kvs_ids_t *out, kvs_err_t *err)
{
    int                 rc;
    size_t              i, n, from;
    const kvs_piece_t  *pieces;

    if (v->nfc) {
        /* Code points below U+0300 are NFC-stable and never combine with
         * what precedes them; U+0300 and above start with byte >= 0xCC. */
        for (i = 0; i < len && (uint8_t) text[i] < 0xcc; i++) {
            /* void */
        }

        if (i < len) {
            rc = kvs_tok_nfc(ctx, &text, &len, err);
            if (rc != KVS_OK) {
                return rc;
            }
        }
    }

    if (v->kind == KVS_VOCAB_SPM) {
        /* the whole fragment at once, so only the bound before and the
         * count after; WordPiece drops spaces and controls, so not even
         * the bound holds for it */
        rc = kvs_tok_over(v, len, limit, out, err);
        if (rc == KVS_OK) {
            rc = kvs_tok_spm_encode(v, ctx, text, len, v->add_space_prefix,
                                    out, err);
        }

        return rc == KVS_OK ? kvs_tok_over(v, 0, limit, out, err) : rc;
    }

    if (v->kind == KVS_VOCAB_WPM) {
        rc = kvs_tok_wpm_encode(v, ctx, text, len, out, err);
        return rc == KVS_OK ? kvs_tok_over(v, 0, limit, out, err) : rc;
    }

    for (from = 0; from < len; /* void */) {
        rc = kvs_pretok_split_from(v->pre, ctx, text, len, from,
                                   KVS_TOK_PIECE_BATCH, &pieces, &n, &from,
                                   err);
        if (rc != KVS_OK) {
            return rc;
        }

        for (i = 0; i < n; i++) {
            /* a piece too long for what is left is not merged at all */
            rc = kvs_tok_over(v, pieces[i].len, limit, out, err);
            if (rc != KVS_OK) {
                return rc;
            }

            rc = kvs_tok_bpe_piece(v, ctx, text + pieces[i].off,
                                   pieces[i].len, out, err);
            if (rc != KVS_OK) {
                return rc;
            }
        }

        rc = kvs_tok_over(v, 0, limit, out, err);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}


/* --- decoding ----------------------------------------------------------- */

int
kvs_tok_decode(const kvs_vocab_t *v, const int32_t *ids, size_t n,
    unsigned flags, kvs_buf_t *out, kvs_err_t *err)
{
    int          rc;
    size_t       i, len0;
    kvs_detok_t  d;

    len0 = out->len;
    kvs_detok_init(&d, v, flags);

    for (i = 0; i < n; i++) {
        rc = kvs_detok_push(&d, ids[i], out, err);
        if (rc != KVS_OK) {
            out->len = len0;
            return rc;
        }
    }

    if (kvs_detok_finish(&d, out) != KVS_OK) {
        out->len = len0;
        return kvs_err_set(err, KVS_ENOMEM, "detokenize: out of memory");
    }

    return KVS_OK;
}


void
kvs_detok_init(kvs_detok_t *d, const kvs_vocab_t *v, unsigned flags)
{
    memset(d, 0, sizeof(kvs_detok_t));
    d->v = v;
    d->flags = flags;
}


/*
 * Appends bytes, passing complete characters through, replacing invalid
 * ones with U+FFFD and keeping an unfinished one in d->pend.
 */
static int
kvs_detok_bytes(kvs_detok_t *d, const uint8_t *p, size_t n, kvs_buf_t *out)
{
    int       k;
    size_t    i, take;
    uint32_t  cp;
    uint8_t   rest[4];

    /* finish a held character first, a byte at a time: each added byte
     * completes it, leaves it unfinished, or shows it invalid */
    while (d->npend > 0 && n > 0) {
        d->pend[d->npend++] = *p++;
        n--;

        k = kvs_utf8_step(d->pend, d->npend, &cp);

        if (k == 0) {
            continue;
        }

        if (k > 0) {
            d->npend = 0;
            if (kvs_buf_append(out, d->pend, (size_t) k) != KVS_OK) {
                return KVS_ENOMEM;
            }
            break;
        }

        /* one U+FFFD for the maximal subpart; what follows it is scanned
         * afresh */
        if (kvs_buf_append(out, "\xef\xbf\xbd", 3) != KVS_OK) {
            return KVS_ENOMEM;
        }

        take = d->npend - (size_t) -k;
        memcpy(rest, d->pend - k, take);
        d->npend = 0;

        if (kvs_detok_bytes(d, rest, take, out) != KVS_OK) {
            return KVS_ENOMEM;
        }
    }

    for (i = 0; i < n; ) {
        if (p[i] < 0x80) {
            take = i;
            while (take < n && p[take] < 0x80) {
                take++;
            }
            if (kvs_buf_append(out, p + i, take - i) != KVS_OK) {
                return KVS_ENOMEM;
            }
            i = take;
            continue;
        }

        k = kvs_utf8_step(p + i, n - i, &cp);

        if (k > 0) {
            if (kvs_buf_append(out, p + i, (size_t) k) != KVS_OK) {
                return KVS_ENOMEM;
            }
            i += k;

        } else if (k == 0) {
            memcpy(d->pend, p + i, n - i);
            d->npend = (uint8_t) (n - i);
            break;

        } else {
            if (kvs_buf_append(out, "\xef\xbf\xbd", 3) != KVS_OK) {
                return KVS_ENOMEM;
            }
            i += -k;
        }
    }

    return KVS_OK;
}


void
kvs_detok_skip(kvs_detok_t *d, const int32_t *ids, size_t n)
{
    size_t              i;
    const kvs_token_t  *tok;

    /* only "has text been seen" matters to what follows, so stop at the
     * first token that would have shown text */
    for (i = 0; i < n && d->ntok == 0; i++) {
        if (ids[i] < 0 || (uint32_t) ids[i] >= d->v->n_tokens) {
            continue;
        }

        tok = &d->v->tokens[ids[i]];

        if ((tok->type != KVS_TOKT_CONTROL && tok->type != KVS_TOKT_UNKNOWN
             && tok->type != KVS_TOKT_UNUSED)
            || (d->flags & KVS_DETOK_SPECIAL))
        {
            d->ntok++;
        }
    }
}


int
kvs_detok_push(kvs_detok_t *d, int32_t id, kvs_buf_t *out, kvs_err_t *err)
{
    int                 strip;
    size_t              len, i, j;
    uint8_t             b, buf[256];
    const char         *text;
    const kvs_vocab_t  *v;
    const kvs_token_t  *tok;

    v = d->v;

    if (id < 0 || (uint32_t) id >= v->n_tokens) {
        return kvs_err_set(err, KVS_EINVAL,
                           "token id %d is out of range (vocabulary of %u)",
                           id, v->n_tokens);
    }

    tok = &v->tokens[id];

    switch (tok->type) {

    case KVS_TOKT_CONTROL:
    case KVS_TOKT_UNKNOWN:
    case KVS_TOKT_UNUSED:
        if (!(d->flags & KVS_DETOK_SPECIAL)) {
            return KVS_OK;
        }
        break;

    case KVS_TOKT_BYTE:
        if (v->byte_of != NULL && v->byte_of[id] >= 0) {
            b = (uint8_t) v->byte_of[id];
            d->ntok++;
            return kvs_detok_bytes(d, &b, 1, out) == KVS_OK
                   ? KVS_OK
                   : kvs_err_set(err, KVS_ENOMEM, "detokenize: no memory");
        }
        break;

    default:
        break;
    }

    text = tok->text;
    len = tok->len;

    if ((v->kind == KVS_VOCAB_SPM || v->kind == KVS_VOCAB_WPM)
        && tok->type != KVS_TOKT_CONTROL && tok->type != KVS_TOKT_UNKNOWN)
    {
        /* "▁" (E2 96 81) is a space; the dummy prefix of the first piece
         * of text is dropped, as the Metaspace decoder does, and so is
         * the space before WordPiece's first word */
        strip = d->ntok == 0 && v->strip_first_space;
        d->ntok++;

        for (i = 0, j = 0; i < len; ) {
            if (i + 3 <= len && memcmp(text + i, "\xe2\x96\x81", 3) == 0) {
                if (!(i == 0 && strip)) {
                    buf[j++] = ' ';
                }
                i += 3;
            } else {
                buf[j++] = (uint8_t) text[i++];
            }

            if (j == sizeof(buf) || i == len) {
                if (kvs_detok_bytes(d, buf, j, out) != KVS_OK) {
                    return kvs_err_set(err, KVS_ENOMEM,
                                       "detokenize: out of memory");
                }
                j = 0;
            }
        }

        return KVS_OK;
    }

    d->ntok++;

    if (kvs_detok_bytes(d, (const uint8_t *) text, len, out) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "detokenize: out of memory");
    }

    return KVS_OK;
}


int
kvs_detok_finish(kvs_detok_t *d, kvs_buf_t *out)
{
    int       k;
    uint32_t  cp;

    /* what is held can no longer finish: U+FFFD per maximal subpart */
    while (d->npend > 0) {
        if (kvs_buf_append(out, "\xef\xbf\xbd", 3) != KVS_OK) {
            return KVS_ENOMEM;
        }

        k = kvs_utf8_step(d->pend, d->npend, &cp);
        k = k < 0 ? -k : d->npend;
        memmove(d->pend, d->pend + k, d->npend - k);
        d->npend = (uint8_t) (d->npend - k);
    }

    return KVS_OK;
}
