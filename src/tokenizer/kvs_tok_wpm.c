/*
 * kvs_tok_wpm: WordPiece encoding (BERT and the embedding models built
 * on it: bge, e5, MiniLM), as Hugging Face's BertTokenizerFast does it
 * for an uncased vocabulary; the test fixtures come from that tokenizer.
 *
 *   1. normalise (BertNormalizer, lowercase on):
 *      a. clean: U+0000, U+FFFD and other characters (Cc, Cf, Co) are
 *         dropped, except \t \n \r, which are whitespace; whitespace (those
 *         and Zs, Zl, Zp) becomes a space;
 *      b. a space on each side of a CJK ideograph;
 *      c. NFD, then nonspacing marks (Mn) dropped: accents go;
 *      d. lowercase, one code point to one (the only code point whose
 *         full lowercase is longer, U+0130, is gone to "I" in c);
 *   2. words (BertPreTokenizer): split at spaces, and every punctuation
 *      character (ASCII 33-47, 58-64, 91-96, 123-126, or category P*) is
 *      a word of its own;
 *   3. each word, greedy longest match first: the first piece must be a
 *      token "▁piece", each following one a token "piece" (the GGUF form
 *      of "##piece", kvs_vocab.h); when some position has no match, or
 *      the word has more than 100 characters, the whole word is the
 *      unknown token.  Only NORMAL tokens match: text never becomes
 *      [CLS], [UNK] and the like.  A continuation that begins with "▁"
 *      matches nothing: in GGUF form it would read as a word-initial
 *      token (and BERT vocabularies have no "##▁").
 *
 * Cost: O(n * L) token lookups (hashes of at most L bytes), n the
 * normalised length, L the vocabulary's longest token in bytes (21 for
 * bge): at each position at most L candidate lengths are tried, longest
 * first, and a word of more than 100 characters costs one scan.  Memory
 * O(n).  Normalisation is linear: ASCII byte by byte through a table;
 * each stretch of other characters goes through utf8proc's NFD on its
 * own, which is exact because the kept ASCII characters that end it are
 * starters (canonical combining class 0) that reordering never crosses.
 *
 * Known difference: categories come from utf8proc (Unicode 15), whose
 * tables Hugging Face's Rust crates predate, so a few recent format
 * characters (U+0890, U+0891, U+08E2, U+110CD, U+13430..U+1343F) are
 * dropped here and kept there.  The CJK ranges are Hugging Face's,
 * which skip U+2B820..U+2B91F (Google's BERT pads those too).
 *
 * Scratch (the normalised text, one non-ASCII stretch in UTF-8 and as
 * code points, the lookup key) lives in ctx->wpm, grows geometrically
 * and is kept for the next call on the same context.
 */

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/kvs_utf8.h"
#include "base/kvs_buf.h"
#include "kvs_tok_impl.h"


#define KVS_WPM_MAX_WORD_CHARS  100   /* a longer word is unknown */

/* What an ASCII byte becomes in normalisation. */
#define KVS_WPM_DROP   0
#define KVS_WPM_SPACE  1              /* a word boundary */
#define KVS_WPM_PUNCT  2              /* a word of its own */
#define KVS_WPM_UPPER  3              /* lowercased */
#define KVS_WPM_PLAIN  4              /* kept as it is */

#define D  KVS_WPM_DROP
#define S  KVS_WPM_SPACE
#define P  KVS_WPM_PUNCT
#define U  KVS_WPM_UPPER
#define L  KVS_WPM_PLAIN

static const uint8_t  kvs_wpm_ascii[128] = {
    D, D, D, D, D, D, D, D, D, S, S, D, D, S, D, D,     /* 0x00 \t \n \r */
    D, D, D, D, D, D, D, D, D, D, D, D, D, D, D, D,     /* 0x10 */
    S, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P,     /* 0x20 ! .. / */
    L, L, L, L, L, L, L, L, L, L, P, P, P, P, P, P,     /* 0x30 0-9 : .. ? */
    P, U, U, U, U, U, U, U, U, U, U, U, U, U, U, U,     /* 0x40 @ A .. */
    U, U, U, U, U, U, U, U, U, U, U, P, P, P, P, P,     /* 0x50 .. Z [ .. _ */
    P, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L,     /* 0x60 ` a .. */
    L, L, L, L, L, L, L, L, L, L, L, P, P, P, P, D      /* 0x70 .. z { ~ */
};

#undef D
#undef S
#undef P
#undef U
#undef L

typedef struct {
    uint8_t           *norm;          /* [norm_cap] the normalised
                                         fragment: words between spaces */
    size_t             norm_cap;
    uint8_t           *run;           /* [run_cap] one non-ASCII stretch,
                                         cleaned, UTF-8 */
    size_t             run_cap;
    utf8proc_int32_t  *cps;           /* [cps_cap] that stretch in NFD,
                                         code points */
    size_t             cps_cap;
    uint8_t           *key;           /* [key_cap] "▁" + a first piece */
    size_t             key_cap;
} kvs_wpm_scratch_t;


static int kvs_wpm_stretch(kvs_wpm_scratch_t *s, const uint8_t *text,
    size_t len, size_t *o, kvs_err_t *err);
static int kvs_wpm_is_cjk(uint32_t cp);
static int kvs_wpm_word(const kvs_vocab_t *v, kvs_wpm_scratch_t *s,
    const uint8_t *w, size_t n, kvs_ids_t *out, kvs_err_t *err);
static int32_t kvs_wpm_token(const kvs_vocab_t *v, kvs_wpm_scratch_t *s,
    int first, const uint8_t *p, size_t n);


int
kvs_tok_wpm_encode(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, kvs_ids_t *out, kvs_err_t *err)
{
    int                 rc;
    size_t              i, j, o;
    uint8_t             c, *t;
    const uint8_t      *in, *p, *e, *q;
    kvs_wpm_scratch_t  *s;

    if (ctx->wpm == NULL) {
        ctx->wpm = calloc(1, sizeof(kvs_wpm_scratch_t));
        if (ctx->wpm == NULL) {
            return kvs_err_set(err, KVS_ENOMEM, "wpm: out of memory");
        }
    }

    s = ctx->wpm;
    in = (const uint8_t *) text;

    if (len > SIZE_MAX / 4
        || kvs_grow((void **) &s->key, &s->key_cap,
                        (size_t) v->max_token_len + 3, 1) != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM, "wpm: out of memory");
    }

    /* 1. normalise into s->norm[0 .. o): an ASCII byte becomes at most 3
     * (" , "), so 3 per byte left is room enough until the next
     * non-ASCII stretch, which makes room for itself */
    o = 0;

    for (i = 0; i < len; ) {
        if (kvs_grow((void **) &s->norm, &s->norm_cap,
                         o + 3 * (len - i), 1) != KVS_OK)
        {
            return kvs_err_set(err, KVS_ENOMEM,
                               "wpm: out of memory (%zu bytes of text)",
                               len);
        }

        t = s->norm;

        for ( ; i < len && in[i] < 0x80; i++) {
            c = in[i];

            switch (kvs_wpm_ascii[c]) {

            case KVS_WPM_DROP:
                break;

            case KVS_WPM_SPACE:
                t[o++] = ' ';
                break;

            case KVS_WPM_PUNCT:
                t[o++] = ' ';
                t[o++] = c;
                t[o++] = ' ';
                break;

            case KVS_WPM_UPPER:
                t[o++] = (uint8_t) (c + ('a' - 'A'));
                break;

            default:
                t[o++] = c;
            }
        }

        if (i == len) {
            break;
        }

        /* the stretch runs to the next ASCII byte that is kept */
        for (j = i; j < len && (in[j] >= 0x80
                                || kvs_wpm_ascii[in[j]] == KVS_WPM_DROP);
             j++)
        {
            /* void */
        }

        rc = kvs_wpm_stretch(s, in + i, j - i, &o, err);
        if (rc != KVS_OK) {
            return rc;
        }

        i = j;
    }

    /* 2. words, 3. pieces */
    p = s->norm;
    e = s->norm + o;

    while (p < e) {
        if (*p == ' ') {
            p++;
            continue;
        }

        q = memchr(p, ' ', (size_t) (e - p));
        if (q == NULL) {
            q = e;
        }

        rc = kvs_wpm_word(v, s, p, (size_t) (q - p), out, err);
        if (rc != KVS_OK) {
            return rc;
        }

        p = q;
    }

    return KVS_OK;
}


void
kvs_tok_wpm_scratch_free(kvs_tok_ctx_t *ctx)
{
    kvs_wpm_scratch_t  *s;

    s = ctx->wpm;
    if (s == NULL) {
        return;
    }

    free(s->norm);
    free(s->run);
    free(s->cps);
    free(s->key);
    free(s);
    ctx->wpm = NULL;
}


size_t
kvs_tok_wpm_scratch_bytes(const kvs_tok_ctx_t *ctx)
{
    const kvs_wpm_scratch_t  *s;

    s = ctx->wpm;
    if (s == NULL) {
        return 0;
    }

    return sizeof(*s) + s->norm_cap + s->run_cap
           + s->cps_cap * sizeof(utf8proc_int32_t) + s->key_cap;
}


/*
 * Normalises a stretch of text (valid UTF-8: characters from U+0080 up
 * and dropped ASCII controls) and appends it to s->norm at *o: clean and
 * pad CJK into s->run, NFD that into s->cps, then drop marks, lowercase
 * and set punctuation apart on the way into s->norm.
 */
static int
kvs_wpm_stretch(kvs_wpm_scratch_t *s, const uint8_t *text, size_t len,
    size_t *o, kvs_err_t *err)
{
    int                  cat;
    size_t               i, k, r, n, o2;
    uint32_t             cp;
    utf8proc_int32_t     c;
    utf8proc_ssize_t     nc;

    /* a character of k bytes becomes at most k + 2 (" 中 "), and k >= 3
     * there, so 2 bytes per byte are enough */
    if (kvs_grow((void **) &s->run, &s->run_cap, 2 * len, 1)
        != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM, "wpm: out of memory");
    }

    r = 0;

    for (i = 0; i < len; i += k) {
        k = kvs_utf8_next(text + i, len - i, &cp);
        if (k == 0) {
            return kvs_err_set(err, KVS_EINVAL,
                               "wpm: invalid UTF-8 at byte %zu", i);
        }

        if (cp < 0x80 || cp == 0xfffd) {
            continue;
        }

        cat = utf8proc_category((utf8proc_int32_t) cp);

        switch (cat) {

        case UTF8PROC_CATEGORY_CC:
        case UTF8PROC_CATEGORY_CF:
        case UTF8PROC_CATEGORY_CO:
        case UTF8PROC_CATEGORY_CS:
            continue;

        case UTF8PROC_CATEGORY_ZS:
        case UTF8PROC_CATEGORY_ZL:
        case UTF8PROC_CATEGORY_ZP:
            s->run[r++] = ' ';
            continue;

        default:
            break;
        }

        if (kvs_wpm_is_cjk(cp)) {
            s->run[r++] = ' ';
            memcpy(s->run + r, text + i, k);
            r += k;
            s->run[r++] = ' ';

        } else {
            memcpy(s->run + r, text + i, k);
            r += k;
        }
    }

    if (r == 0) {
        return KVS_OK;
    }

    /* NFD often keeps the count of code points, which is at most r */
    if (kvs_grow((void **) &s->cps, &s->cps_cap, r,
                     sizeof(utf8proc_int32_t)) != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM, "wpm: out of memory");
    }

    for ( ;; ) {
        nc = utf8proc_decompose(s->run, (utf8proc_ssize_t) r, s->cps,
                                (utf8proc_ssize_t) s->cps_cap,
                                UTF8PROC_DECOMPOSE | UTF8PROC_STABLE);
        if (nc < 0) {
            return kvs_err_set(err, KVS_EINVAL, "wpm: NFD: %s",
                               utf8proc_errmsg(nc));
        }

        if ((size_t) nc <= s->cps_cap) {
            break;
        }

        if (kvs_grow((void **) &s->cps, &s->cps_cap, (size_t) nc,
                         sizeof(utf8proc_int32_t)) != KVS_OK)
        {
            return kvs_err_set(err, KVS_ENOMEM, "wpm: out of memory");
        }
    }

    /* each code point becomes at most 4 bytes and 2 spaces */
    n = (size_t) nc;
    if (kvs_grow((void **) &s->norm, &s->norm_cap, *o + 6 * n, 1)
        != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM, "wpm: out of memory");
    }

    o2 = *o;

    for (i = 0; i < n; i++) {
        c = s->cps[i];

        if (c < 0x80) {
            /* spaces from cleaning, letters from NFD ("Å" is "A" and a
             * ring), and the punctuation ";" and "`" that U+037E and
             * U+1FEF are in NFD */
            if (kvs_wpm_ascii[c] == KVS_WPM_PUNCT) {
                s->norm[o2++] = ' ';
                s->norm[o2++] = (uint8_t) c;
                s->norm[o2++] = ' ';

            } else if (kvs_wpm_ascii[c] == KVS_WPM_UPPER) {
                s->norm[o2++] = (uint8_t) (c + ('a' - 'A'));

            } else {
                s->norm[o2++] = (uint8_t) c;
            }

            continue;
        }

        cat = utf8proc_category(c);

        if (cat == UTF8PROC_CATEGORY_MN) {
            continue;
        }

        if (cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO) {
            s->norm[o2++] = ' ';
            o2 += (size_t) utf8proc_encode_char(c, s->norm + o2);
            s->norm[o2++] = ' ';
            continue;
        }

        o2 += (size_t) utf8proc_encode_char(utf8proc_tolower(c),
                                            s->norm + o2);
    }

    *o = o2;

    return KVS_OK;
}


/*
 * The CJK ideographs that BERT sets apart as words, in Hugging Face's
 * ranges: Unified Ideographs and Extension A, Compatibility Ideographs,
 * Extensions B to E (less U+2B820..U+2B91F) and the Supplement.
 */
static int
kvs_wpm_is_cjk(uint32_t cp)
{
    return (cp >= 0x4e00 && cp <= 0x9fff)
           || (cp >= 0x3400 && cp <= 0x4dbf)
           || (cp >= 0xf900 && cp <= 0xfaff)
           || (cp >= 0x20000 && cp <= 0x2a6df)
           || (cp >= 0x2a700 && cp <= 0x2b81f)
           || (cp >= 0x2b920 && cp <= 0x2ceaf)
           || (cp >= 0x2f800 && cp <= 0x2fa1f);
}


/*
 * Appends the pieces of one word w[0 .. n) (normalised, no spaces), or
 * the unknown token when it cannot be spelled; see the file comment.
 */
static int
kvs_wpm_word(const kvs_vocab_t *v, kvs_wpm_scratch_t *s, const uint8_t *w,
    size_t n, kvs_ids_t *out, kvs_err_t *err)
{
    size_t   i, chars, start, end, room, n0;
    int32_t  id;

    for (i = 0, chars = 0; i < n && chars <= KVS_WPM_MAX_WORD_CHARS; i++) {
        chars += (w[i] & 0xc0) != 0x80;
    }

    if (chars > KVS_WPM_MAX_WORD_CHARS) {
        goto unknown;
    }

    n0 = out->n;

    for (start = 0; start < n; start = end) {
        /* no token is longer than max_token_len bytes, "▁" included */
        room = start > 0 ? v->max_token_len
               : v->max_token_len > 3 ? v->max_token_len - 3 : 0;

        end = n - start > room ? start + room : n;
        while (end > start && end < n && (w[end] & 0xc0) == 0x80) {
            end--;
        }

        id = -1;

        while (end > start) {
            id = kvs_wpm_token(v, s, start == 0, w + start, end - start);
            if (id >= 0) {
                break;
            }

            do {
                end--;
            } while (end > start && (w[end] & 0xc0) == 0x80);
        }

        if (id < 0) {
            out->n = n0;
            goto unknown;
        }

        if (kvs_ids_push(out, id) != KVS_OK) {
            return kvs_err_set(err, KVS_ENOMEM, "wpm: out of memory");
        }
    }

    return KVS_OK;

unknown:

    if (kvs_ids_push(out, v->unk) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "wpm: out of memory");
    }

    return KVS_OK;
}


/* The NORMAL token for a piece of n bytes (first: of a word), or -1. */
static int32_t
kvs_wpm_token(const kvs_vocab_t *v, kvs_wpm_scratch_t *s, int first,
    const uint8_t *p, size_t n)
{
    int32_t  id;

    if (first) {
        /* s->key holds 3 + max_token_len bytes, and n <= max_token_len */
        memcpy(s->key, "\xe2\x96\x81", 3);
        memcpy(s->key + 3, p, n);
        id = kvs_vocab_find(v, s->key, n + 3);

    } else if (n >= 3 && memcmp(p, "\xe2\x96\x81", 3) == 0) {
        return -1;

    } else {
        id = kvs_vocab_find(v, p, n);
    }

    return id >= 0 && v->tokens[id].type == KVS_TOKT_NORMAL ? id : -1;
}
