/*
 * kvs_gen_vocab: a byte-level BPE vocabulary for generated models.
 *
 * Tokens 0..255 are the bytes, written with GPT-2's byte-to-unicode map
 * (kvs_bytelevel: printable Latin-1 bytes stand for themselves, the others
 * for U+0100 and up).  Merges are learned from kvs_gen_corpus by standard
 * BPE training (most frequent adjacent pair first, ties to the smaller
 * ids) until the corpus has no pair seen twice; if the vocabulary is
 * still short, seeded filler merges of existing tokens make up the count.
 * Five Llama 3 control tokens close the vocabulary.  Invariants: token
 * strings are unique; every merge "a b" names two earlier tokens whose
 * concatenation is a later token.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_hash.h"
#include "tokenizer/kvs_bytelevel.h"
#include "kvs_gen.h"

#define KVS_GV_MAX_TOKEN  48          /* bytes of a filler token's string */


typedef struct {
    char      **keys;                 /* [cap] NULL = empty slot */
    uint32_t   *vals;
    size_t      cap;                  /* power of two */
    size_t      n;
} kvs_gv_map_t;

typedef struct {
    uint32_t   *ids;                  /* token ids of the word */
    uint32_t    len;
    uint32_t    count;                /* occurrences in the corpus */
} kvs_gv_word_t;

typedef struct {
    uint64_t   *keys;                 /* (a << 32 | b) + 1, 0 = empty */
    uint64_t   *counts;
    size_t      cap;
} kvs_gv_pairs_t;


static uint64_t
kvs_gv_hash(const char *s)
{
    return kvs_fnv1a64(KVS_FNV1A64_INIT, s, strlen(s));
}


static int
kvs_gv_map_grow(kvs_gv_map_t *m)
{
    size_t      i, j, cap;
    char      **keys;
    uint32_t   *vals;

    cap = m->cap ? m->cap * 2 : 1024;
    keys = calloc(cap, sizeof(char *));
    vals = calloc(cap, sizeof(uint32_t));
    if (keys == NULL || vals == NULL) {
        free(keys);
        free(vals);
        return KVS_ENOMEM;
    }

    for (i = 0; i < m->cap; i++) {
        if (m->keys[i] == NULL) {
            continue;
        }
        j = kvs_gv_hash(m->keys[i]) & (cap - 1);
        while (keys[j] != NULL) {
            j = (j + 1) & (cap - 1);
        }
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }

    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;

    return KVS_OK;
}


/* Slot of key, or of the empty slot where it would go. */
static size_t
kvs_gv_map_slot(const kvs_gv_map_t *m, const char *key)
{
    size_t  j;

    j = kvs_gv_hash(key) & (m->cap - 1);
    while (m->keys[j] != NULL && strcmp(m->keys[j], key) != 0) {
        j = (j + 1) & (m->cap - 1);
    }

    return j;
}


/*
 * Inserts key with val.  When the key is already there, *found gets its
 * value and KVS_EINVAL is returned; the map never frees keys it did not
 * insert, and kvs_gv_map_free() frees them only if asked.
 */
static int
kvs_gv_map_put(kvs_gv_map_t *m, char *key, uint32_t val, uint32_t *found)
{
    size_t  j;

    if (m->n * 2 >= m->cap && kvs_gv_map_grow(m) != KVS_OK) {
        return KVS_ENOMEM;
    }

    j = kvs_gv_map_slot(m, key);
    if (m->keys[j] != NULL) {
        *found = m->vals[j];
        return KVS_EINVAL;
    }

    m->keys[j] = key;
    m->vals[j] = val;
    m->n++;

    return KVS_OK;
}


static void
kvs_gv_map_free(kvs_gv_map_t *m, int free_keys)
{
    size_t  j;

    for (j = 0; free_keys && j < m->cap; j++) {
        free(m->keys[j]);
    }

    free(m->keys);
    free(m->vals);
}


/* Adds a token string (taking ownership); fails if present or no memory. */
static int
kvs_gv_add_token(kvs_gen_vocab_t *v, kvs_gv_map_t *m, char *s, int32_t type)
{
    int       rc;
    uint32_t  found;

    rc = kvs_gv_map_put(m, s, v->n_tokens, &found);
    if (rc != KVS_OK) {
        free(s);
        return rc;
    }

    v->tokens[v->n_tokens] = s;
    v->types[v->n_tokens] = type;
    v->n_tokens++;

    return KVS_OK;
}


static char *
kvs_gv_strdup2(const char *a, const char *sep, const char *b)
{
    char    *s;
    size_t   la, ls, lb;

    la = strlen(a);
    ls = strlen(sep);
    lb = strlen(b);

    s = malloc(la + ls + lb + 1);
    if (s != NULL) {
        memcpy(s, a, la);
        memcpy(s + la, sep, ls);
        memcpy(s + la + ls, b, lb + 1);
    }

    return s;
}


static int
kvs_gv_class(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) {
        return 1;
    }
    if (c >= '0' && c <= '9') {
        return 2;
    }
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
        return 3;
    }
    return 4;
}


/* Splits the corpus into words (a leading space joins the next run). */
static int
kvs_gv_words(kvs_gv_word_t **out, uint32_t *n_out)
{
    int             cls, rc;
    char           *key;
    size_t          i, start, len, n, cap, w;
    uint32_t        w32;
    kvs_gv_map_t    seen;             /* word text -> index in words */
    kvs_gv_word_t  *words, *grown;
    const char     *t;

    t = kvs_gen_corpus;
    len = strlen(t);
    words = NULL;
    n = 0;
    cap = 0;
    memset(&seen, 0, sizeof(seen));

    for (i = 0; i < len; /* void */) {
        start = i;
        if (t[i] == ' ' && i + 1 < len && kvs_gv_class(t[i + 1]) != 3) {
            i++;
        }
        cls = kvs_gv_class((unsigned char) t[i]);
        while (i < len && kvs_gv_class((unsigned char) t[i]) == cls
               && (cls != 3 || t[i] == t[start]))
        {
            i++;
        }

        key = strndup(t + start, i - start);
        if (key == NULL) {
            goto nomem;
        }

        rc = kvs_gv_map_put(&seen, key, (uint32_t) n, &w32);
        if (rc == KVS_EINVAL) {
            free(key);
            words[w32].count++;
            continue;
        }
        if (rc != KVS_OK) {
            free(key);
            goto nomem;
        }

        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            grown = realloc(words, cap * sizeof(kvs_gv_word_t));
            if (grown == NULL) {
                goto nomem;
            }
            words = grown;
        }

        words[n].len = (uint32_t) (i - start);
        words[n].count = 1;
        words[n].ids = malloc(words[n].len * sizeof(uint32_t));
        if (words[n].ids == NULL) {
            goto nomem;
        }
        for (w = 0; w < words[n].len; w++) {
            words[n].ids[w] = (unsigned char) t[start + w];
        }
        n++;
    }

    kvs_gv_map_free(&seen, 1);
    *out = words;
    *n_out = (uint32_t) n;

    return KVS_OK;

nomem:

    kvs_gv_map_free(&seen, 1);
    for (w = 0; w < n; w++) {
        free(words[w].ids);
    }
    free(words);

    return KVS_ENOMEM;
}


/* Counts adjacent pairs; returns the best (count >= 2) or 0 for none. */
static uint64_t
kvs_gv_best_pair(kvs_gv_pairs_t *p, const kvs_gv_word_t *words, uint32_t n)
{
    size_t    j;
    uint32_t  w, k;
    uint64_t  key, best, best_count;

    memset(p->keys, 0, p->cap * sizeof(uint64_t));

    best = 0;
    best_count = 1;

    for (w = 0; w < n; w++) {
        for (k = 0; k + 1 < words[w].len; k++) {
            key = ((uint64_t) words[w].ids[k] << 32 | words[w].ids[k + 1])
                  + 1;
            j = (key * 0x9E3779B97F4A7C15ULL >> 20) & (p->cap - 1);
            while (p->keys[j] != 0 && p->keys[j] != key) {
                j = (j + 1) & (p->cap - 1);
            }
            if (p->keys[j] == 0) {
                p->keys[j] = key;
                p->counts[j] = 0;
            }
            p->counts[j] += words[w].count;

            if (p->counts[j] > best_count
                || (p->counts[j] == best_count && best != 0 && key < best))
            {
                best = key;
                best_count = p->counts[j];
            }
        }
    }

    return best;
}


static void
kvs_gv_apply(kvs_gv_word_t *words, uint32_t n, uint32_t a, uint32_t b,
    uint32_t id)
{
    uint32_t  w, k, o;

    for (w = 0; w < n; w++) {
        for (k = 0, o = 0; k < words[w].len; k++, o++) {
            if (k + 1 < words[w].len && words[w].ids[k] == a
                && words[w].ids[k + 1] == b)
            {
                words[w].ids[o] = id;
                k++;
            } else {
                words[w].ids[o] = words[w].ids[k];
            }
        }
        words[w].len = o;
    }
}


static int
kvs_gv_add_merge(kvs_gen_vocab_t *v, kvs_gv_map_t *m, uint32_t a,
    uint32_t b)
{
    int    rc;
    char  *tok, *merge;

    tok = kvs_gv_strdup2(v->tokens[a], "", v->tokens[b]);
    merge = kvs_gv_strdup2(v->tokens[a], " ", v->tokens[b]);
    if (tok == NULL || merge == NULL) {
        free(tok);
        free(merge);
        return KVS_ENOMEM;
    }

    rc = kvs_gv_add_token(v, m, tok, 1);
    if (rc != KVS_OK) {
        free(merge);
        return rc;
    }

    v->merges[v->n_merges++] = merge;

    return KVS_OK;
}


static int
kvs_gv_train(kvs_gen_vocab_t *v, kvs_gv_map_t *m, uint32_t target)
{
    int             rc;
    uint32_t        n, w;
    uint64_t        best;
    kvs_gv_word_t  *words;
    kvs_gv_pairs_t  p;

    rc = kvs_gv_words(&words, &n);
    if (rc != KVS_OK) {
        return rc;
    }

    p.cap = 1 << 16;
    p.keys = malloc(p.cap * sizeof(uint64_t));
    p.counts = malloc(p.cap * sizeof(uint64_t));
    if (p.keys == NULL || p.counts == NULL) {
        rc = KVS_ENOMEM;
        goto done;
    }

    while (v->n_tokens < target) {
        best = kvs_gv_best_pair(&p, words, n);
        if (best == 0) {
            break;
        }
        best--;

        rc = kvs_gv_add_merge(v, m, (uint32_t) (best >> 32),
                              (uint32_t) best);
        if (rc != KVS_OK) {
            break;
        }

        kvs_gv_apply(words, n, (uint32_t) (best >> 32), (uint32_t) best,
                     v->n_tokens - 1);
    }

done:

    free(p.keys);
    free(p.counts);
    for (w = 0; w < n; w++) {
        free(words[w].ids);
    }
    free(words);

    return rc;
}


static int
kvs_gv_fill(kvs_gen_vocab_t *v, kvs_gv_map_t *m, uint32_t target,
    uint64_t seed)
{
    int       rc;
    uint32_t  a, b;
    char     *cat;

    while (v->n_tokens < target) {
        a = (uint32_t) (kvs_splitmix64(&seed) % v->n_tokens);
        b = (uint32_t) (kvs_splitmix64(&seed) % v->n_tokens);

        if (strlen(v->tokens[a]) + strlen(v->tokens[b]) > KVS_GV_MAX_TOKEN) {
            continue;
        }

        cat = kvs_gv_strdup2(v->tokens[a], "", v->tokens[b]);
        if (cat == NULL) {
            return KVS_ENOMEM;
        }
        if (m->keys[kvs_gv_map_slot(m, cat)] != NULL) {
            free(cat);
            continue;
        }
        free(cat);

        rc = kvs_gv_add_merge(v, m, a, b);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}


int
kvs_gen_vocab_build(kvs_gen_vocab_t *v, uint32_t n_vocab, uint64_t seed,
    kvs_err_t *err)
{
    int                 rc;
    char                ch[3], *s;    /* ch: a byte spelt, NUL */
    uint8_t             byte;
    unsigned            b;
    uint32_t            i;
    kvs_gv_map_t        m;
    static const char  *specials[KVS_GEN_N_SPECIAL] = {
        "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
        "<|end_header_id|>", "<|eot_id|>"
    };

    memset(v, 0, sizeof(*v));
    memset(&m, 0, sizeof(m));

    if (n_vocab < 256 + KVS_GEN_N_SPECIAL) {
        return kvs_err_set(err, KVS_EINVAL, "vocabulary of %u tokens is "
                           "too small (at least %d: 256 bytes and %d "
                           "specials)", n_vocab, 256 + KVS_GEN_N_SPECIAL,
                           KVS_GEN_N_SPECIAL);
    }

    v->tokens = calloc(n_vocab, sizeof(char *));
    v->types = calloc(n_vocab, sizeof(int32_t));
    v->merges = calloc(n_vocab, sizeof(char *));
    if (v->tokens == NULL || v->types == NULL || v->merges == NULL) {
        rc = KVS_ENOMEM;
        goto failed;
    }

    rc = KVS_OK;

    for (b = 0; b < 256 && rc == KVS_OK; b++) {
        byte = (uint8_t) b;
        ch[kvs_bytelevel_encode(&byte, 1, ch)] = '\0';
        s = strdup(ch);
        rc = s ? kvs_gv_add_token(v, &m, s, 1) : KVS_ENOMEM;
    }

    if (rc == KVS_OK) {
        rc = kvs_gv_train(v, &m, n_vocab - KVS_GEN_N_SPECIAL);
    }

    if (rc == KVS_OK) {
        rc = kvs_gv_fill(v, &m, n_vocab - KVS_GEN_N_SPECIAL, seed);
    }

    for (i = 0; i < KVS_GEN_N_SPECIAL && rc == KVS_OK; i++) {
        s = strdup(specials[i]);
        rc = s ? kvs_gv_add_token(v, &m, s, 3) : KVS_ENOMEM;
    }

    if (rc != KVS_OK) {
        goto failed;
    }

    v->bos = n_vocab - KVS_GEN_N_SPECIAL;
    v->eos = v->bos + 1;
    v->eot = v->bos + 4;

    kvs_gv_map_free(&m, 0);

    return KVS_OK;

failed:

    kvs_gv_map_free(&m, 0);
    kvs_gen_vocab_free(v);

    return kvs_err_set(err, rc, "building the vocabulary failed (%s)",
                       kvs_err_name(rc));
}


void
kvs_gen_vocab_free(kvs_gen_vocab_t *v)
{
    uint32_t  i;

    for (i = 0; i < v->n_tokens; i++) {
        free(v->tokens[i]);
    }
    for (i = 0; i < v->n_merges; i++) {
        free(v->merges[i]);
    }

    free(v->tokens);
    free(v->types);
    free(v->merges);
    memset(v, 0, sizeof(*v));
}
