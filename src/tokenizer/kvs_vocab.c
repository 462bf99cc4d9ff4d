/*
 * kvs_vocab: loads a tokenizer vocabulary from GGUF metadata (see
 * kvs_vocab.h for what it owns and the text conventions).
 *
 * Every array element is checked before it is used: token types must be
 * known, special-token ids in range, byte tokens well formed, merges must
 * name tokens that exist.  Loading either returns a complete vocabulary
 * or frees everything it built.
 */

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/kvs_utf8.h"
#include "model/kvs_gguf.h"
#include "kvs_bytelevel.h"
#include "kvs_tok_impl.h"


#define KVS_VOCAB_MAX_TOKENS   (1u << 24)      /* ids fit an int32 with room */
#define KVS_VOCAB_MAX_TOKLEN   (1u << 16)      /* bytes in one token */


static uint64_t  kvs_vocab_serial;               /* last serial given out */


static int kvs_vocab_read_tokens(kvs_vocab_t *v, const kvs_gguf_t *g,
    kvs_err_t *err);
static int kvs_vocab_read_ids(kvs_vocab_t *v, const kvs_gguf_t *g,
    kvs_err_t *err);
static int kvs_vocab_read_merges(kvs_vocab_t *v, const kvs_gguf_t *g,
    kvs_err_t *err);
static int kvs_vocab_index_tokens(kvs_vocab_t *v, kvs_err_t *err);
static int kvs_vocab_index_special(kvs_vocab_t *v, kvs_err_t *err);
static int kvs_vocab_byte_tokens(kvs_vocab_t *v, kvs_err_t *err);
static uint32_t kvs_pow2_at_least(uint64_t n);


/* --- loading ------------------------------------------------------------ */

int
kvs_vocab_open(kvs_vocab_t **out, const char *path, kvs_err_t *err)
{
    int          rc;
    kvs_gguf_t  *g;

    *out = NULL;

    rc = kvs_gguf_open(&g, path, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_vocab_load(out, g, err);
    if (rc != KVS_OK) {
        kvs_err_prefix(err, "%s", path);
    }

    kvs_gguf_close(g);

    return rc;
}


int
kvs_vocab_load(kvs_vocab_t **out, const kvs_gguf_t *g, kvs_err_t *err)
{
    int             rc;
    kvs_vocab_t    *v;
    kvs_gguf_str_t  s;

    *out = NULL;

    v = calloc(1, sizeof(kvs_vocab_t));
    if (v == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "vocab: out of memory");
    }

    v->serial = __atomic_add_fetch(&kvs_vocab_serial, 1, __ATOMIC_RELAXED);
    v->bos = v->eos = v->eot = v->eom = v->unk = v->pad = -1;

    rc = kvs_gguf_get_str(g, "tokenizer.ggml.model", &s, err);
    if (rc != KVS_OK) {
        goto failed;
    }

    if (kvs_gguf_str_eq(s, "llama")) {
        v->kind = KVS_VOCAB_SPM;
    } else if (kvs_gguf_str_eq(s, "gpt2")) {
        v->kind = KVS_VOCAB_BPE;
    } else if (kvs_gguf_str_eq(s, "bert")) {
        v->kind = KVS_VOCAB_WPM;
    } else {
        rc = kvs_err_set(err, KVS_EUNSUPPORTED,
                         "tokenizer.ggml.model \"%.*s\" is not supported "
                         "(supported: \"llama\" (SentencePiece), \"gpt2\" "
                         "(byte-level BPE), \"bert\" (WordPiece))",
                         (int) (s.len > 64 ? 64 : s.len), s.ptr);
        goto failed;
    }

    rc = kvs_gguf_get_str(g, "tokenizer.ggml.pre", &s, err);
    if (rc == KVS_ENOTFOUND) {
        strcpy(v->pre_name, "default");

    } else if (rc != KVS_OK) {
        goto failed;

    } else {
        if (s.len == 0 || s.len >= sizeof(v->pre_name)
            || memchr(s.ptr, '\0', s.len) != NULL)
        {
            rc = kvs_err_set(err, KVS_EFORMAT,
                             "tokenizer.ggml.pre: bad name of %llu bytes",
                             (unsigned long long) s.len);
            goto failed;
        }
        memcpy(v->pre_name, s.ptr, s.len);
        v->pre_name[s.len] = '\0';
    }

    kvs_err_clear(err);

    rc = kvs_vocab_read_tokens(v, g, err);
    if (rc != KVS_OK) {
        goto failed;
    }

    rc = kvs_vocab_index_tokens(v, err);
    if (rc != KVS_OK) {
        goto failed;
    }

    rc = kvs_vocab_read_ids(v, g, err);
    if (rc != KVS_OK) {
        goto failed;
    }

    rc = kvs_vocab_byte_tokens(v, err);
    if (rc != KVS_OK) {
        goto failed;
    }

    if (v->kind == KVS_VOCAB_BPE) {
        rc = kvs_pretok_new(&v->pre, v->pre_name, err);
        if (rc != KVS_OK) {
            goto failed;
        }

        rc = kvs_vocab_read_merges(v, g, err);
        if (rc != KVS_OK) {
            goto failed;
        }

        /* Llama 3's tokenizer.json sets ignore_merges; Qwen2's has an NFC
         * normalizer.  Neither is recorded in GGUF but in the name. */
        v->ignore_merges = strcmp(v->pre_name, "llama-bpe") == 0
                           || strcmp(v->pre_name, "llama3") == 0
                           || strcmp(v->pre_name, "llama-v3") == 0;
        v->nfc = strcmp(v->pre_name, "qwen2") == 0
                 || strcmp(v->pre_name, "deepseek-r1-qwen") == 0;

        /* Some vocabularies lack a few byte tokens (Falcon has none for
         * 0x03 and other controls): kvs_tok_bpe.c then does what the
         * reference tokenizers do, see there. */
    }

    if (v->kind == KVS_VOCAB_SPM) {
        v->spm_words = kvs_tok_spm_words_ok(v);
    }

    rc = kvs_vocab_index_special(v, err);
    if (rc != KVS_OK) {
        goto failed;
    }

    *out = v;

    return KVS_OK;

failed:

    kvs_vocab_free(v);

    return rc;
}


void
kvs_vocab_free(kvs_vocab_t *v)
{
    if (v == NULL) {
        return;
    }

    kvs_pretok_free(v->pre);
    free(v->tokens);
    free(v->byte_of);
    free(v->special);
    free(v->tok_slots);
    free(v->merge_keys);
    free(v->merge_vals);
    free(v->pool);
    free(v);
}


const char *
kvs_vocab_kind_name(kvs_vocab_kind_t kind)
{
    return kind == KVS_VOCAB_SPM ? "llama"
           : kind == KVS_VOCAB_WPM ? "bert" : "gpt2";
}


/*
 * Tokens, scores and types.  Texts are copied into one pool; for BPE the
 * byte-level alphabet of ordinary tokens is undone on the way.
 */
static int
kvs_vocab_read_tokens(kvs_vocab_t *v, const kvs_gguf_t *g, kvs_err_t *err)
{
    int               rc, has_scores, has_types;
    size_t            len;
    int64_t           t;
    double            f;
    uint64_t          i, n, pool;
    kvs_token_t      *tok;
    kvs_gguf_arr_t    toks, scores, types;
    kvs_gguf_str_t    s;
    kvs_gguf_iter_t   it;

    rc = kvs_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks, err);
    if (rc != KVS_OK) {
        return rc;
    }

    n = toks.n;

    if (toks.type != KVS_GGUF_STR || n == 0 || n > KVS_VOCAB_MAX_TOKENS) {
        return kvs_err_set(err, KVS_EFORMAT,
                           "tokenizer.ggml.tokens: need 1..%u strings, "
                           "have %llu of type %s", KVS_VOCAB_MAX_TOKENS,
                           (unsigned long long) n,
                           kvs_gguf_vtype_name(toks.type));
    }

    has_scores = kvs_gguf_get_arr(g, "tokenizer.ggml.scores", &scores,
                                  err) == KVS_OK;
    has_types = kvs_gguf_get_arr(g, "tokenizer.ggml.token_type", &types,
                                 err) == KVS_OK;
    kvs_err_clear(err);

    if (has_scores && (scores.n != n || (scores.type != KVS_GGUF_F32
                                         && scores.type != KVS_GGUF_F64)))
    {
        return kvs_err_set(err, KVS_EFORMAT,
                           "tokenizer.ggml.scores: %llu values of type %s "
                           "for %llu tokens",
                           (unsigned long long) scores.n,
                           kvs_gguf_vtype_name(scores.type),
                           (unsigned long long) n);
    }

    if (has_types && types.n != n) {
        return kvs_err_set(err, KVS_EFORMAT,
                           "tokenizer.ggml.token_type: %llu values for "
                           "%llu tokens", (unsigned long long) types.n,
                           (unsigned long long) n);
    }

    v->n_tokens = (uint32_t) n;
    v->tokens = calloc(n, sizeof(kvs_token_t));
    if (v->tokens == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "vocab: out of memory");
    }

    /* the strings' total length, to size the pool once */
    pool = 0;
    kvs_gguf_iter_init(&it, &toks);

    for (i = 0; i < n; i++) {
        if (kvs_gguf_iter_str(&it, &s) != 1) {
            return kvs_err_set(err, KVS_EFORMAT,
                               "tokenizer.ggml.tokens[%llu]: unreadable",
                               (unsigned long long) i);
        }

        if (s.len > KVS_VOCAB_MAX_TOKLEN) {
            return kvs_err_set(err, KVS_EFORMAT,
                               "tokenizer.ggml.tokens[%llu]: %llu bytes "
                               "(at most %u)", (unsigned long long) i,
                               (unsigned long long) s.len,
                               KVS_VOCAB_MAX_TOKLEN);
        }

        pool += s.len + 1;
    }

    v->pool = malloc(pool);
    if (v->pool == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "vocab: out of memory");
    }

    kvs_gguf_iter_init(&it, &toks);

    for (i = 0; i < n; i++) {
        tok = &v->tokens[i];
        (void) kvs_gguf_iter_str(&it, &s);

        tok->type = KVS_TOKT_NORMAL;

        if (has_types) {
            if (kvs_gguf_arr_int(&types, i, &t) != KVS_OK
                || t < KVS_TOKT_UNDEFINED || t > KVS_TOKT_BYTE)
            {
                return kvs_err_set(err, KVS_EFORMAT,
                                   "tokenizer.ggml.token_type[%llu]: not "
                                   "a token type (0..6)",
                                   (unsigned long long) i);
            }
            tok->type = (uint8_t) t;
        }

        if (has_scores) {
            (void) kvs_gguf_arr_float(&scores, i, &f);
            tok->score = (float) f;
        }

        tok->text = v->pool + v->pool_len;
        len = (size_t) -1;

        if (v->kind == KVS_VOCAB_BPE && tok->type != KVS_TOKT_CONTROL
            && tok->type != KVS_TOKT_USER_DEFINED)
        {
            len = kvs_bytelevel_decode(s.ptr, s.len,
                                       (uint8_t *) v->pool + v->pool_len,
                                       NULL);
        }

        if (len == (size_t) -1) {
            memcpy(v->pool + v->pool_len, s.ptr, s.len);
            len = s.len;
        }

        tok->len = (uint32_t) len;
        if (tok->len > v->max_token_len) {
            v->max_token_len = tok->len;
        }
        v->pool[v->pool_len + len] = '\0';
        v->pool_len += len + 1;
    }

    return KVS_OK;
}


static int
kvs_vocab_get_id(kvs_vocab_t *v, const kvs_gguf_t *g, const char *key,
    int32_t *id, kvs_err_t *err)
{
    int       rc;
    uint64_t  u;

    rc = kvs_gguf_get_uint(g, key, &u, err);
    if (rc == KVS_ENOTFOUND) {
        kvs_err_clear(err);
        return KVS_OK;
    }

    if (rc != KVS_OK) {
        return rc;
    }

    /* llama.cpp writes 0xFFFFFFFF (and -1) for "none" */
    if (u == UINT32_MAX || u == UINT64_MAX) {
        *id = -1;
        return KVS_OK;
    }

    if (u >= v->n_tokens) {
        return kvs_err_set(err, KVS_EFORMAT,
                           "%s: %llu is not a token id (vocabulary of %u)",
                           key, (unsigned long long) u, v->n_tokens);
    }

    *id = (int32_t) u;

    return KVS_OK;
}


static int
kvs_vocab_get_flag(const kvs_gguf_t *g, const char *key, int *flag,
    kvs_err_t *err)
{
    int  rc, b;

    rc = kvs_gguf_get_bool(g, key, &b, err);
    if (rc == KVS_ENOTFOUND) {
        kvs_err_clear(err);
        return KVS_OK;
    }

    if (rc == KVS_OK) {
        *flag = b;
    }

    return rc;
}


static int
kvs_vocab_read_ids(kvs_vocab_t *v, const kvs_gguf_t *g, kvs_err_t *err)
{
    static const char  *eot_texts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
        "<|end_of_turn|>", NULL
    };

    int      rc, i;
    int32_t  id;

    if ((rc = kvs_vocab_get_id(v, g, "tokenizer.ggml.bos_token_id", &v->bos,
                               err)) != KVS_OK
        || (rc = kvs_vocab_get_id(v, g, "tokenizer.ggml.eos_token_id",
                                  &v->eos, err)) != KVS_OK
        || (rc = kvs_vocab_get_id(v, g, "tokenizer.ggml.eot_token_id",
                                  &v->eot, err)) != KVS_OK
        || (rc = kvs_vocab_get_id(v, g, "tokenizer.ggml.eom_token_id",
                                  &v->eom, err)) != KVS_OK
        || (rc = kvs_vocab_get_id(v, g, "tokenizer.ggml.unknown_token_id",
                                  &v->unk, err)) != KVS_OK
        || (rc = kvs_vocab_get_id(v, g, "tokenizer.ggml.padding_token_id",
                                  &v->pad, err)) != KVS_OK)
    {
        return rc;
    }

    /* Defaults as the reference tokenizers have them: SentencePiece adds
     * BOS and the dummy space prefix, byte-level BPE neither, nor does
     * WordPiece here (BERT wraps text in [CLS] ... [SEP], which is for
     * the embedding model's caller to add). */
    v->add_bos = v->kind == KVS_VOCAB_SPM;
    v->add_eos = 0;
    v->add_space_prefix = v->kind == KVS_VOCAB_SPM;

    if ((rc = kvs_vocab_get_flag(g, "tokenizer.ggml.add_bos_token",
                                 &v->add_bos, err)) != KVS_OK
        || (rc = kvs_vocab_get_flag(g, "tokenizer.ggml.add_eos_token",
                                    &v->add_eos, err)) != KVS_OK
        || (rc = kvs_vocab_get_flag(g, "tokenizer.ggml.add_space_prefix",
                                    &v->add_space_prefix, err)) != KVS_OK)
    {
        return rc;
    }

    /* A word-initial WordPiece token is stored with "▁" as if by a
     * dummy prefix, which the first token's decoding drops. */
    v->strip_first_space = v->kind == KVS_VOCAB_WPM
                           || (v->kind == KVS_VOCAB_SPM
                               && v->add_space_prefix);

    /* WordPiece has no byte fallback: a word it cannot spell is the
     * unknown token, so it must have one. */
    if (v->kind == KVS_VOCAB_WPM && v->unk < 0) {
        return kvs_err_set(err, KVS_EFORMAT,
                           "tokenizer.ggml.unknown_token_id: a WordPiece "
                           "(\"bert\") vocabulary needs one");
    }

    /* Older GGUFs do not name the end-of-turn token; chat models need it
     * to stop, so recognise the usual control tokens. */
    for (i = 0; v->eot < 0 && eot_texts[i] != NULL; i++) {
        id = kvs_vocab_find(v, eot_texts[i], strlen(eot_texts[i]));
        if (id >= 0 && v->tokens[id].type == KVS_TOKT_CONTROL) {
            v->eot = id;
        }
    }

    return KVS_OK;
}


static int
kvs_hex_digit(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }

    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }

    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }

    return -1;
}


/*
 * Byte tokens: SPM vocabularies spell them "<0xNN>" (type BYTE); in BPE
 * vocabularies every byte is an ordinary one-byte token; WordPiece has
 * none.
 */
static int
kvs_vocab_byte_tokens(kvs_vocab_t *v, kvs_err_t *err)
{
    int           b, hi, lo;
    char          c;
    uint32_t      i;
    unsigned      x;
    kvs_token_t  *tok;

    for (b = 0; b < 256; b++) {
        v->byte_token[b] = -1;
    }

    if (v->kind == KVS_VOCAB_BPE) {
        for (b = 0; b < 256; b++) {
            c = (char) b;
            v->byte_token[b] = kvs_vocab_find(v, &c, 1);
        }
        return KVS_OK;
    }

    if (v->kind == KVS_VOCAB_WPM) {
        return KVS_OK;
    }

    v->byte_of = malloc(v->n_tokens * sizeof(int16_t));
    if (v->byte_of == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "vocab: out of memory");
    }

    for (i = 0; i < v->n_tokens; i++) {
        tok = &v->tokens[i];
        v->byte_of[i] = -1;

        if (tok->type != KVS_TOKT_BYTE) {
            continue;
        }

        if (tok->len != 6 || memcmp(tok->text, "<0x", 3) != 0
            || tok->text[5] != '>'
            || (hi = kvs_hex_digit(tok->text[3])) < 0
            || (lo = kvs_hex_digit(tok->text[4])) < 0)
        {
            return kvs_err_set(err, KVS_EFORMAT,
                               "tokenizer.ggml.tokens[%u]: a byte token "
                               "must be spelled <0xNN>", i);
        }

        x = (unsigned) (hi << 4 | lo);

        if (v->byte_token[x] < 0) {
            v->byte_token[x] = (int32_t) i;
        }
        v->byte_of[i] = (int16_t) x;
    }

    return KVS_OK;
}


/* --- the text -> id hash ------------------------------------------------ */

static uint32_t
kvs_pow2_at_least(uint64_t n)
{
    uint32_t  p;

    for (p = 16; p < n; p <<= 1) { /* void */ }

    return p;
}


static int
kvs_vocab_index_tokens(kvs_vocab_t *v, kvs_err_t *err)
{
    uint32_t      id, i, slots, old;
    kvs_token_t  *tok;

    slots = kvs_pow2_at_least((uint64_t) v->n_tokens * 2);

    v->tok_slots = calloc(slots, sizeof(uint32_t));
    if (v->tok_slots == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "vocab: out of memory");
    }

    v->tok_mask = slots - 1;

    for (id = 0; id < v->n_tokens; id++) {
        tok = &v->tokens[id];
        i = (uint32_t) XXH3_64bits(tok->text, tok->len) & v->tok_mask;

        for ( ;; ) {
            if (v->tok_slots[i] == 0) {
                v->tok_slots[i] = id + 1;
                break;
            }

            old = v->tok_slots[i] - 1;

            if (v->tokens[old].len == tok->len
                && memcmp(v->tokens[old].text, tok->text, tok->len) == 0)
            {
                /* Duplicate text: an ordinary token wins over a special
                 * one, else the lower id (the first the tokenizer knows). */
                if (v->tokens[old].type != KVS_TOKT_NORMAL
                    && tok->type == KVS_TOKT_NORMAL)
                {
                    v->tok_slots[i] = id + 1;
                }
                break;
            }

            i = (i + 1) & v->tok_mask;
        }
    }

    return KVS_OK;
}


int32_t
kvs_vocab_find(const kvs_vocab_t *v, const void *text, size_t len)
{
    uint32_t            i, id;
    const kvs_token_t  *tok;

    i = (uint32_t) XXH3_64bits(text, len) & v->tok_mask;

    for ( ;; ) {
        id = v->tok_slots[i];
        if (id == 0) {
            return -1;
        }

        tok = &v->tokens[id - 1];
        if (tok->len == len && memcmp(tok->text, text, len) == 0) {
            return (int32_t) (id - 1);
        }

        i = (i + 1) & v->tok_mask;
    }
}


/* --- merges ------------------------------------------------------------- */

/*
 * Each merge "left right" (byte-level text, one space between) becomes
 * (left id, right id) -> (rank, id of left+right).  The first merge of a
 * pair wins, as in the reference implementations.
 */
static int
kvs_vocab_read_merges(kvs_vocab_t *v, const kvs_gguf_t *g, kvs_err_t *err)
{
    int              rc;
    char            *buf;
    size_t           ll, rl, cap;
    int32_t          l, r, m;
    uint32_t         slots, i;
    uint64_t         k, key, h;
    const char      *sp;
    kvs_gguf_arr_t   merges;
    kvs_gguf_str_t   s;
    kvs_gguf_iter_t  it;

    rc = kvs_gguf_get_arr(g, "tokenizer.ggml.merges", &merges, err);
    if (rc == KVS_ENOTFOUND) {
        /* a vocabulary of single bytes and specials only */
        kvs_err_clear(err);
        return KVS_OK;
    }

    if (rc != KVS_OK) {
        return rc;
    }

    if (merges.type != KVS_GGUF_STR || merges.n >= (1ull << 31)) {
        return kvs_err_set(err, KVS_EFORMAT,
                           "tokenizer.ggml.merges: need an array of "
                           "strings, have %llu of type %s",
                           (unsigned long long) merges.n,
                           kvs_gguf_vtype_name(merges.type));
    }

    slots = kvs_pow2_at_least(merges.n * 2 + 1);
    v->merge_keys = malloc((size_t) slots * sizeof(uint64_t));
    v->merge_vals = malloc((size_t) slots * sizeof(uint64_t));
    cap = 2 * KVS_VOCAB_MAX_TOKLEN + 2;
    buf = malloc(cap);

    if (v->merge_keys == NULL || v->merge_vals == NULL || buf == NULL) {
        free(buf);
        return kvs_err_set(err, KVS_ENOMEM, "vocab: out of memory");
    }

    memset(v->merge_keys, 0xff, (size_t) slots * sizeof(uint64_t));
    v->merge_mask = slots - 1;

    kvs_gguf_iter_init(&it, &merges);
    rc = KVS_OK;

    for (k = 0; k < merges.n; k++) {
        if (kvs_gguf_iter_str(&it, &s) != 1) {
            rc = kvs_err_set(err, KVS_EFORMAT,
                             "tokenizer.ggml.merges[%llu]: unreadable",
                             (unsigned long long) k);
            break;
        }

        /* The separator is the first space after the first character:
         * a byte-level token never holds a raw space. */
        sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;

        if (sp == NULL || s.len > 2 * KVS_VOCAB_MAX_TOKLEN) {
            rc = kvs_err_set(err, KVS_EFORMAT,
                             "tokenizer.ggml.merges[%llu]: \"%.*s\" is "
                             "not \"left right\"", (unsigned long long) k,
                             (int) (s.len > 64 ? 64 : s.len), s.ptr);
            break;
        }

        ll = kvs_bytelevel_decode(s.ptr, sp - s.ptr, (uint8_t *) buf, NULL);
        rl = kvs_bytelevel_decode(sp + 1, s.ptr + s.len - sp - 1,
                                  (uint8_t *) buf
                                  + (ll == (size_t) -1 ? 0 : ll), NULL);

        l = r = m = -1;

        if (ll != (size_t) -1 && rl != (size_t) -1) {
            l = kvs_vocab_find(v, buf, ll);
            r = kvs_vocab_find(v, buf + ll, rl);
            m = kvs_vocab_find(v, buf, ll + rl);
        }

        if (l < 0 || r < 0 || m < 0) {
            rc = kvs_err_set(err, KVS_EFORMAT,
                             "tokenizer.ggml.merges[%llu]: \"%.*s\" names "
                             "a %s that is not a token",
                             (unsigned long long) k,
                             (int) (s.len > 64 ? 64 : s.len), s.ptr,
                             l < 0 ? "left part" : r < 0 ? "right part"
                                                     : "merged text");
            break;
        }

        key = (uint64_t) (uint32_t) l << 32 | (uint32_t) r;
        h = key * 0x9E3779B97F4A7C15ULL;
        i = (uint32_t) (h >> 32) & v->merge_mask;

        while (v->merge_keys[i] != UINT64_MAX && v->merge_keys[i] != key) {
            i = (i + 1) & v->merge_mask;
        }

        if (v->merge_keys[i] == UINT64_MAX) {
            v->merge_keys[i] = key;
            v->merge_vals[i] = k << 32 | (uint32_t) m;
            v->n_merges++;
        }
    }

    free(buf);

    return rc;
}


/* --- special tokens ----------------------------------------------------- */

static int
kvs_vocab_special_cmp(const void *a, const void *b, void *arg)
{
    const kvs_vocab_t  *v = arg;
    const kvs_token_t  *ta, *tb;
    int32_t             ia, ib;

    ia = *(const int32_t *) a;
    ib = *(const int32_t *) b;
    ta = &v->tokens[ia];
    tb = &v->tokens[ib];

    if ((uint8_t) ta->text[0] != (uint8_t) tb->text[0]) {
        return (uint8_t) ta->text[0] < (uint8_t) tb->text[0] ? -1 : 1;
    }

    if (ta->len != tb->len) {
        return ta->len > tb->len ? -1 : 1;
    }

    return ia < ib ? -1 : ia > ib;
}


static int
kvs_vocab_index_special(kvs_vocab_t *v, kvs_err_t *err)
{
    uint32_t      i, n;
    unsigned      b;
    kvs_token_t  *tok;

    for (i = 0, n = 0; i < v->n_tokens; i++) {
        tok = &v->tokens[i];
        n += tok->len > 0 && (tok->type == KVS_TOKT_CONTROL
                              || tok->type == KVS_TOKT_USER_DEFINED
                              || tok->type == KVS_TOKT_UNKNOWN);
    }

    v->special = malloc((n + 1) * sizeof(int32_t));
    if (v->special == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "vocab: out of memory");
    }

    for (i = 0, n = 0; i < v->n_tokens; i++) {
        tok = &v->tokens[i];
        if (tok->len > 0 && (tok->type == KVS_TOKT_CONTROL
                             || tok->type == KVS_TOKT_USER_DEFINED
                             || tok->type == KVS_TOKT_UNKNOWN))
        {
            v->special[n++] = (int32_t) i;
        }
    }

    v->n_special = n;
    qsort_r(v->special, n, sizeof(int32_t), kvs_vocab_special_cmp, v);

    for (b = 0, i = 0; b < 256; b++) {
        v->special_start[b] = i;
        while (i < n && (uint8_t) v->tokens[v->special[i]].text[0] == b) {
            i++;
        }
    }

    v->special_start[256] = n;

    return KVS_OK;
}
