/*
 * kvs_tok_spm: SentencePiece BPE encoding (Llama 1/2, Mistral, TinyLlama,
 * Phi-3), as llama.cpp's SPM tokenizer and the Hugging Face tokenizers
 * that the test fixtures come from do it:
 *
 *   1. escape: the fragment, after a dummy "▁" when prefix is set, with
 *      every space (0x20) replaced by U+2581 "▁";
 *   2. one symbol per UTF-8 character;
 *   3. while some pair of adjacent symbols concatenates to a token, merge
 *      the pair whose token has the highest score (ties: the leftmost);
 *   4. each final symbol is emitted as its token; a character that is no
 *      token is emitted as the byte-fallback tokens <0xNN> of its bytes,
 *      or as the unknown token when the vocabulary has no byte tokens.
 *
 * Cost: O(n log n) time and O(n) memory in the escaped fragment length n,
 * whatever the text (1 MB of one character included).  The symbols form a
 * doubly linked list over an array; the candidate pairs sit in a binary
 * max-heap.  A merge adds at most two candidates, so at most 3n are ever
 * pushed; candidates made stale by a merge stay in the heap and are
 * dropped when they surface (a symbol only ever grows, so a stale pair is
 * recognised by its recorded byte length).
 *
 * Words: when no token has "▁" after another character (Llama, Phi-3),
 * nothing merges across the start of a "▁" run, and a long fragment is
 * merged one such word at a time.  Same result, same bound, but small
 * heaps that stay in cache: about 3x faster on prose.
 *
 * Which tokens take part: NORMAL, USER_DEFINED, UNUSED and UNDEFINED ones.
 * CONTROL ("<s>"), UNKNOWN ("<unk>") and BYTE ("<0x41>") tokens are never
 * produced from text, as in SentencePiece, which matches only normal,
 * user-defined and unused pieces (llama.cpp would match any; no fixture
 * text tells the two apart).  SentencePiece re-splits a merged UNUSED
 * piece into its two halves; llama.cpp and Hugging Face emit it as is,
 * and so do we (the fixture vocabularies have no UNUSED tokens).
 * llama.cpp's "resegment" step is otherwise a no-op here: every merged
 * symbol is a token by construction, and a lone character either is a
 * token or falls back to bytes.
 *
 * Scratch (the escaped text, the symbols, the heap) lives in ctx->spm,
 * grows geometrically and is kept for the next call on the same context.
 */

#include <stdlib.h>
#include <string.h>

#include "base/kvs_buf.h"
#include "kvs_tok_impl.h"


#define KVS_SPM_NONE       UINT32_MAX

/* One symbol: bytes [off, off + n) of the escaped text; n == 0: merged
 * away into its left neighbour. */
typedef struct {
    uint32_t  off;
    uint32_t  n;
    uint32_t  prev;                   /* index, or KVS_SPM_NONE */
    uint32_t  next;                   /* index, or KVS_SPM_NONE */
    int32_t   id;                     /* its token, or -1 (a character
                                         that is no token) */
} kvs_spm_sym_t;

/* A candidate merge of symbol left and its right neighbour into token id
 * (of n bytes).  key orders the heap: the score's bits made monotonic in
 * the high half, the complement of left in the low half, so that the
 * largest key is the best score, then the leftmost pair.  The candidate
 * is still valid while left is alive and left plus its neighbour are n
 * bytes: symbols only grow, so any merge that touched either one since
 * shows in that sum. */
typedef struct {
    uint64_t  key;
    int32_t   id;
    uint32_t  n;
} kvs_spm_pair_t;

typedef struct {
    uint8_t         *text;            /* [text_cap] escaped fragment */
    size_t           text_cap;
    kvs_spm_sym_t   *sym;             /* [sym_cap] */
    size_t           sym_cap;
    kvs_spm_pair_t  *heap;            /* [heap_cap], heap[0] the best */
    size_t           heap_cap;
    size_t           heap_n;
} kvs_spm_scratch_t;


static int kvs_spm_span(const kvs_vocab_t *v, kvs_spm_scratch_t *s,
    uint32_t off, uint32_t end, kvs_ids_t *out, kvs_err_t *err);
static int32_t kvs_spm_token(const kvs_vocab_t *v, const uint8_t *s,
    size_t n);
static void kvs_spm_sift_down(kvs_spm_pair_t *h, size_t n, size_t i);
static void kvs_spm_sift_up(kvs_spm_pair_t *h, size_t i);
static int kvs_spm_candidate(const kvs_vocab_t *v, kvs_spm_scratch_t *s,
    uint32_t left, kvs_spm_pair_t *pair);
static int kvs_spm_push(kvs_spm_scratch_t *s, const kvs_spm_pair_t *pair);
static void kvs_spm_pop(kvs_spm_scratch_t *s, kvs_spm_pair_t *top);
static int kvs_spm_emit(const kvs_vocab_t *v, const kvs_spm_scratch_t *s,
    const kvs_spm_sym_t *sym, kvs_ids_t *out, kvs_err_t *err);


int
kvs_tok_spm_encode(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, int prefix, kvs_ids_t *out,
    kvs_err_t *err)
{
    int                 rc;
    size_t              i, n, spaces, out_n0, start;
    uint8_t            *t;
    kvs_spm_scratch_t  *s;

    /* The reference tokenizers drop an empty fragment entirely: no dummy
     * prefix for "" (so "" encodes to nothing, or to BOS alone). */
    if (len == 0) {
        return KVS_OK;
    }

    if (ctx->spm == NULL) {
        ctx->spm = calloc(1, sizeof(kvs_spm_scratch_t));
        if (ctx->spm == NULL) {
            return kvs_err_set(err, KVS_ENOMEM, "spm: out of memory");
        }
    }

    s = ctx->spm;
    out_n0 = out->n;

    /* Escaped length: each space becomes 3 bytes; symbol indexes and
     * offsets are uint32, with UINT32_MAX kept for "none". */
    spaces = 0;
    for (i = 0; i < len; i++) {
        spaces += (text[i] == ' ');
    }

    if (len >= UINT32_MAX || len + 2 * spaces + 3 >= UINT32_MAX) {
        return kvs_err_set(err, KVS_ERANGE,
                           "spm: a fragment of %zu bytes (%zu spaces) is "
                           "too long to tokenize (limit about 4 GiB once "
                           "spaces are escaped)", len, spaces);
    }

    n = len + 2 * spaces + (prefix ? 3 : 0);

    if (kvs_grow((void **) &s->text, &s->text_cap, n, 1) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM,
                           "spm: out of memory (%zu bytes of text)", n);
    }

    t = s->text;
    if (prefix) {
        memcpy(t, "\xe2\x96\x81", 3);
        t += 3;
    }

    for (i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(t, "\xe2\x96\x81", 3);
            t += 3;
        } else {
            *t++ = (uint8_t) text[i];
        }
    }

    if (!v->spm_words) {
        rc = kvs_spm_span(v, s, 0, (uint32_t) n, out, err);
        goto done;
    }

    /* A word starts at each "▁" that follows a character other than "▁"
     * (the bytes E2 96 81 cannot end any other character). */
    rc = KVS_OK;
    start = 0;

    for (i = 1; i + 3 <= n; i++) {
        if (s->text[i] == 0xe2 && s->text[i + 1] == 0x96
            && s->text[i + 2] == 0x81
            && !(i >= 3 && s->text[i - 3] == 0xe2
                 && s->text[i - 2] == 0x96 && s->text[i - 1] == 0x81))
        {
            rc = kvs_spm_span(v, s, (uint32_t) start, (uint32_t) i, out,
                              err);
            if (rc != KVS_OK) {
                goto done;
            }
            start = i;
        }
    }

    rc = kvs_spm_span(v, s, (uint32_t) start, (uint32_t) n, out, err);

done:

    if (rc != KVS_OK) {
        out->n = out_n0;
    }

    return rc;
}


/*
 * Merges and emits text[off, end) on its own.  Any part of the text may
 * be merged on its own when no pair of symbols ever straddles its edges,
 * which kvs_tok_spm_words_ok() guarantees for the words kvs_tok_spm_encode()
 * cuts: a pair that straddled would make a token.
 */
static int
kvs_spm_span(const kvs_vocab_t *v, kvs_spm_scratch_t *s, uint32_t off,
    uint32_t end, kvs_ids_t *out, kvs_err_t *err)
{
    int              rc;
    size_t           i, nsym;
    uint8_t          c;
    uint32_t         k, l, r, cl;
    kvs_spm_pair_t   pair;
    kvs_spm_sym_t   *sym;

    /* Count the characters, then make one symbol of each.  The text was
     * validated by kvs_tok_encode(); a lead byte's length is clamped
     * anyway so that a bad caller cannot read past the end. */
    nsym = 0;
    for (i = off; i < end; i += cl) {
        c = s->text[i];
        cl = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
        if (cl > end - i) {
            cl = (uint32_t) (end - i);
        }
        nsym++;
    }

    if (kvs_grow((void **) &s->sym, &s->sym_cap, nsym,
                     sizeof(kvs_spm_sym_t))
        != KVS_OK
        || kvs_grow((void **) &s->heap, &s->heap_cap, nsym,
                        sizeof(kvs_spm_pair_t))
           != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM,
                           "spm: out of memory (%zu symbols)", nsym);
    }

    sym = s->sym;
    k = 0;
    for (i = off; i < end; i += cl) {
        c = s->text[i];
        cl = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
        if (cl > end - i) {
            cl = (uint32_t) (end - i);
        }

        sym[k].off = (uint32_t) i;
        sym[k].n = cl;
        sym[k].prev = k == 0 ? KVS_SPM_NONE : k - 1;
        sym[k].next = k + 1 == nsym ? KVS_SPM_NONE : k + 1;
        sym[k].id = kvs_spm_token(v, s->text + i, cl);
        k++;
    }

    /* Every adjacent pair that makes a token, heapified in one go. */
    s->heap_n = 0;
    for (k = 0; k + 1 < nsym; k++) {
        if (kvs_spm_candidate(v, s, k, &pair)) {
            s->heap[s->heap_n++] = pair;
        }
    }

    for (i = s->heap_n / 2; i-- > 0; /* void */) {
        kvs_spm_sift_down(s->heap, s->heap_n, i);
    }

    while (s->heap_n > 0) {
        kvs_spm_pop(s, &pair);

        l = UINT32_MAX - (uint32_t) pair.key;
        r = sym[l].next;

        if (sym[l].n == 0 || r == KVS_SPM_NONE
            || sym[l].n + sym[r].n != pair.n)
        {
            continue;                 /* stale: a neighbour has merged */
        }

        sym[l].n = pair.n;
        sym[l].id = pair.id;
        sym[l].next = sym[r].next;
        if (sym[r].next != KVS_SPM_NONE) {
            sym[sym[r].next].prev = l;
        }
        sym[r].n = 0;

        if (sym[l].prev != KVS_SPM_NONE
            && kvs_spm_candidate(v, s, sym[l].prev, &pair))
        {
            if (kvs_spm_push(s, &pair) != KVS_OK) {
                goto nomem;
            }
        }

        if (sym[l].next != KVS_SPM_NONE
            && kvs_spm_candidate(v, s, l, &pair))
        {
            if (kvs_spm_push(s, &pair) != KVS_OK) {
                goto nomem;
            }
        }
    }

    for (k = 0; k != KVS_SPM_NONE; k = sym[k].next) {
        rc = kvs_spm_emit(v, s, &sym[k], out, err);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;

nomem:

    return kvs_err_set(err, KVS_ENOMEM,
                       "spm: out of memory (%zu merge candidates)",
                       s->heap_n);
}


/*
 * 1 if no token that text can become has "▁" right after another
 * character than "▁".  Then no merge ever joins "x" and "▁" (x not "▁"),
 * and the places between them cut the text into words that can be merged
 * one at a time, each with a small heap that stays in cache.  True of the
 * Llama and Phi-3 vocabularies (SentencePiece's default
 * split_by_whitespace keeps "▁" at the start of pieces).
 */
int
kvs_tok_spm_words_ok(const kvs_vocab_t *v)
{
    uint32_t            id, i;
    const uint8_t      *p;
    const kvs_token_t  *tok;

    for (id = 0; id < v->n_tokens; id++) {
        tok = &v->tokens[id];

        if (tok->type == KVS_TOKT_CONTROL || tok->type == KVS_TOKT_UNKNOWN
            || tok->type == KVS_TOKT_BYTE)
        {
            continue;
        }

        p = (const uint8_t *) tok->text;

        for (i = 1; i + 3 <= tok->len; i++) {
            if (p[i] == 0xe2 && p[i + 1] == 0x96 && p[i + 2] == 0x81
                && !(i >= 3 && p[i - 3] == 0xe2 && p[i - 2] == 0x96
                     && p[i - 1] == 0x81))
            {
                return 0;
            }
        }
    }

    return 1;
}


void
kvs_tok_spm_scratch_free(kvs_tok_ctx_t *ctx)
{
    kvs_spm_scratch_t  *s;

    s = ctx->spm;
    if (s == NULL) {
        return;
    }

    free(s->text);
    free(s->sym);
    free(s->heap);
    free(s);
    ctx->spm = NULL;
}


size_t
kvs_tok_spm_scratch_bytes(const kvs_tok_ctx_t *ctx)
{
    const kvs_spm_scratch_t  *s;

    s = ctx->spm;
    if (s == NULL) {
        return 0;
    }

    return sizeof(*s) + s->text_cap + s->sym_cap * sizeof(kvs_spm_sym_t)
           + s->heap_cap * sizeof(kvs_spm_pair_t);
}


/* The token that text s[0..n) may become, or -1: control, unknown and
 * byte tokens are spelt in the vocabulary but are not pieces of text. */
static int32_t
kvs_spm_token(const kvs_vocab_t *v, const uint8_t *s, size_t n)
{
    int32_t  id;

    id = kvs_vocab_find(v, s, n);
    if (id < 0) {
        return -1;
    }

    switch (v->tokens[id].type) {
    case KVS_TOKT_CONTROL:
    case KVS_TOKT_UNKNOWN:
    case KVS_TOKT_BYTE:
        return -1;
    default:
        return id;
    }
}


static void
kvs_spm_sift_down(kvs_spm_pair_t *h, size_t n, size_t i)
{
    size_t          c;
    kvs_spm_pair_t  x;

    x = h[i];

    for ( ;; ) {
        c = 2 * i + 1;
        if (c >= n) {
            break;
        }

        if (c + 1 < n && h[c + 1].key > h[c].key) {
            c++;
        }

        if (h[c].key <= x.key) {
            break;
        }

        h[i] = h[c];
        i = c;
    }

    h[i] = x;
}


static void
kvs_spm_sift_up(kvs_spm_pair_t *h, size_t i)
{
    size_t          p;
    kvs_spm_pair_t  x;

    x = h[i];

    while (i > 0) {
        p = (i - 1) / 2;
        if (x.key <= h[p].key) {
            break;
        }

        h[i] = h[p];
        i = p;
    }

    h[i] = x;
}


/* Fills *pair with the merge of symbol left and its right neighbour;
 * 0 if their concatenation is not a token. */
static int
kvs_spm_candidate(const kvs_vocab_t *v, kvs_spm_scratch_t *s,
    uint32_t left, kvs_spm_pair_t *pair)
{
    float           f;
    int32_t         id;
    uint32_t        right, bits;
    kvs_spm_sym_t  *sym;

    sym = s->sym;
    right = sym[left].next;

    /* Neighbours are contiguous in the text, so the pair is one span. */
    id = kvs_spm_token(v, s->text + sym[left].off,
                       sym[left].n + sym[right].n);
    if (id < 0) {
        return 0;
    }

    /* IEEE-754 bits compare as sign-magnitude: flip the negatives to
     * make them monotonic.  -0 is made +0 first, as the two compare equal
     * (stories260K's best merge scores -0); a NaN sorts last. */
    f = v->tokens[id].score + 0.0f;
    memcpy(&bits, &f, sizeof(bits));
    bits = f != f ? 0 : (bits & 0x80000000) ? ~bits : bits | 0x80000000;

    pair->key = (uint64_t) bits << 32 | (UINT32_MAX - left);
    pair->id = id;
    pair->n = sym[left].n + sym[right].n;

    return 1;
}


static int
kvs_spm_push(kvs_spm_scratch_t *s, const kvs_spm_pair_t *pair)
{
    if (kvs_grow((void **) &s->heap, &s->heap_cap, s->heap_n + 1,
                     sizeof(kvs_spm_pair_t))
        != KVS_OK)
    {
        return KVS_ENOMEM;
    }

    s->heap[s->heap_n] = *pair;
    kvs_spm_sift_up(s->heap, s->heap_n);
    s->heap_n++;

    return KVS_OK;
}


static void
kvs_spm_pop(kvs_spm_scratch_t *s, kvs_spm_pair_t *top)
{
    *top = s->heap[0];

    s->heap_n--;
    if (s->heap_n > 0) {
        s->heap[0] = s->heap[s->heap_n];
        kvs_spm_sift_down(s->heap, s->heap_n, 0);
    }
}


/* Appends the ids of one final symbol. */
static int
kvs_spm_emit(const kvs_vocab_t *v, const kvs_spm_scratch_t *s,
    const kvs_spm_sym_t *sym, kvs_ids_t *out, kvs_err_t *err)
{
    uint32_t        i;
    const uint8_t  *p;

    if (sym->id >= 0) {
        if (kvs_ids_push(out, sym->id) != KVS_OK) {
            goto nomem;
        }

        return KVS_OK;
    }

    /* A character that is no token: its bytes, when the vocabulary has
     * byte tokens for all of them; else one unknown token, as
     * SentencePiece without byte fallback does. */
    p = s->text + sym->off;

    for (i = 0; i < sym->n; i++) {
        if (v->byte_token[p[i]] < 0) {
            break;
        }
    }

    if (i == sym->n) {
        if (kvs_ids_reserve(out, sym->n) != KVS_OK) {
            goto nomem;
        }

        for (i = 0; i < sym->n; i++) {
            out->ids[out->n++] = v->byte_token[p[i]];
        }

        return KVS_OK;
    }

    if (v->unk < 0) {
        return kvs_err_set(err, KVS_EUNSUPPORTED,
                           "spm: the character at byte %u of the escaped "
                           "fragment is no token, the vocabulary has no "
                           "byte token <0x%02X> and no unknown token",
                           (unsigned) sym->off, (unsigned) p[i]);
    }

    if (kvs_ids_push(out, v->unk) != KVS_OK) {
        goto nomem;
    }

    return KVS_OK;

nomem:

    return kvs_err_set(err, KVS_ENOMEM, "spm: out of memory (%zu ids)",
                       out->n);
}
