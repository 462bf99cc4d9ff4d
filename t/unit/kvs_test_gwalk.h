/*
 * kvs_test_gwalk: what the mask tests that walk one grammar with several
 * maskers side by side share (test_gram_memo, test_gram_count,
 * test_gram_slice, test_gram_warm): the buffers (one mask per masker, a
 * brute-force mask, a token list) and, per walk, a matcher with the
 * maskers on it, each with its own number of state-cache entries (0:
 * every mask a full walk); a small vocabulary's tokens; a schema
 * compiled and a random allowed token; one step's masks compared with
 * the full walk's and the brute force's; a walk of such steps.  Any failure to
 * allocate or initialise fails the test.  Header-only, like kvs_test.h.
 */

#ifndef KVS_TEST_GWALK_H
#define KVS_TEST_GWALK_H

#include "kvs_test_gram.h"


#define TGW_MAX  12                   /* maskers at most */

typedef struct {
    size_t               n;           /* maskers */
    uint32_t             words;       /* (n_tokens + 31) / 32 */
    uint32_t            *bits[TGW_MAX];
    uint32_t            *bf;          /* the brute force's mask */
    uint32_t            *cand;        /* [n_tokens] tokens to pick from */
    kvs_gram_matcher_t   m;
    kvs_gram_masker_t    mk[TGW_MAX];
} tgw_rig_t;


/* The buffers for n maskers over gv. */
static inline void
tgw_alloc(tgw_rig_t *r, const kvs_gram_vocab_t *gv, size_t n)
{
    size_t  k;

    assert_true(n <= TGW_MAX);
    memset(r, 0, sizeof(tgw_rig_t));
    r->n = n;
    r->words = (gv->n_tokens + 31) / 32;

    for (k = 0; k < n; k++) {
        r->bits[k] = malloc(r->words * sizeof(uint32_t));
        assert_non_null(r->bits[k]);
    }
    r->bf = malloc(r->words * sizeof(uint32_t));
    r->cand = malloc(gv->n_tokens * sizeof(uint32_t));
    assert_non_null(r->bf);
    assert_non_null(r->cand);
}


/* A walk's matcher on g and the maskers on it, masker k with
 * entries[k] state-cache entries. */
static inline void
tgw_begin(tgw_rig_t *r, const kvs_gram_t *g, const kvs_gram_vocab_t *gv,
    const uint32_t *entries)
{
    size_t     k;
    kvs_err_t  err;

    assert_int_equal(kvs_gram_matcher_init(&r->m, g, NULL, &err), KVS_OK);
    for (k = 0; k < r->n; k++) {
        assert_int_equal(kvs_gram_masker_init(&r->mk[k], gv, &r->m,
                                              entries[k], &err), KVS_OK);
    }
}


/* The end of a walk: the maskers and the matcher freed. */
static inline void
tgw_end(tgw_rig_t *r)
{
    size_t  k;

    for (k = 0; k < r->n; k++) {
        kvs_gram_masker_free(&r->mk[k]);
    }
    kvs_gram_matcher_free(&r->m);
}


static inline void
tgw_free(tgw_rig_t *r)
{
    size_t  k;

    for (k = 0; k < r->n; k++) {
        free(r->bits[k]);
    }
    free(r->bf);
    free(r->cand);
}

/* Appends a text token of l bytes to texts/lens/kinds (*n of at most
 * max - 1, one slot kept for END). */
static inline void
tgw_add(uint8_t **texts, uint32_t *lens, uint8_t *kinds, size_t *n,
    size_t max, const void *b, size_t l)
{
    assert_true(*n < max - 1);
    texts[*n] = malloc(l > 0 ? l : 1);
    assert_non_null(texts[*n]);
    memcpy(texts[*n], b, l);
    lens[*n] = (uint32_t) l;
    kinds[(*n)++] = KVS_GRAM_TOK_TEXT;
}


/* The vocabulary of the n tokens tgw_add made, an END token after
 * them; the texts are freed. */
static inline kvs_gram_vocab_t *
tgw_vocab(uint8_t **texts, uint32_t *lens, uint8_t *kinds, size_t n)
{
    size_t             i;
    kvs_err_t          err;
    kvs_gram_vocab_t  *gv;

    texts[n] = NULL;
    lens[n] = 0;
    kinds[n++] = KVS_GRAM_TOK_END;

    assert_int_equal(kvs_gram_vocab_from_bytes(&gv, (uint32_t) n,
                         (const uint8_t *const *) texts, lens, kinds, &err),
                     KVS_OK);
    for (i = 0; i < n; i++) {
        free(texts[i]);
    }

    return gv;
}


/* A vocabulary of every single byte (1 .. 255), then each of the n
 * words of two bytes or more (C strings), then END. */
#define TGW_VOCAB_MAX  1024

static inline kvs_gram_vocab_t *
tgw_vocab_words(const char *const *words, size_t n_words)
{
    size_t    i, n;
    uint8_t  *texts[TGW_VOCAB_MAX], kinds[TGW_VOCAB_MAX], buf[1];
    uint32_t  lens[TGW_VOCAB_MAX];

    n = 0;
    for (i = 1; i < 256; i++) {
        buf[0] = (uint8_t) i;
        tgw_add(texts, lens, kinds, &n, TGW_VOCAB_MAX, buf, 1);
    }
    for (i = 0; i < n_words; i++) {
        if (strlen(words[i]) > 1) {
            tgw_add(texts, lens, kinds, &n, TGW_VOCAB_MAX, words[i],
                    strlen(words[i]));
        }
    }

    return tgw_vocab(texts, lens, kinds, n);
}


/* Compiles schema text, NULL for json_object mode (fails the test on
 * an error). */
static inline void
tgw_compile(kvs_gram_t *g, const char *schema)
{
    kvs_err_t        err;
    kvs_gram_opts_t  o;

    if (schema == NULL) {
        memset(&o, 0, sizeof(o));
        if (kvs_gram_json_object(g, &o, &err) != KVS_OK) {
            fail_msg("json_object: %s", err.msg);
        }
        return;
    }
    if (tg_compile(g, schema, 0, &err) != KVS_OK) {
        fail_msg("%s: %s", schema, err.msg);
    }
}


/* A token bits allows, picked at random: END one time in four when it
 * is allowed (and always when nothing else is); UINT32_MAX if none. */
static inline uint32_t
tgw_pick(const kvs_gram_vocab_t *gv, const uint32_t *bits, uint32_t *cand,
    uint64_t *rng)
{
    size_t    n;
    uint32_t  id, end;

    end = UINT32_MAX;
    for (id = 0, n = 0; id < gv->n_tokens; id++) {
        if (!(bits[id >> 5] >> (id & 31) & 1)) {
            continue;
        }
        if (gv->kind[id] == KVS_GRAM_TOK_END) {
            end = id;
            continue;
        }
        cand[n++] = id;
    }

    if (end != UINT32_MAX && (n == 0 || tg_rand(rng) % 4 == 0)) {
        return end;
    }

    return n > 0 ? cand[tg_rand(rng) % n] : UINT32_MAX;
}


/* Fails naming the first token where b differs from a (the full
 * walk's mask). */
static inline void
tgw_first_diff(const kvs_gram_vocab_t *gv, const uint32_t *a,
    const uint32_t *b, const char *what, const char *schema, size_t step)
{
    uint32_t  id;

    for (id = 0; id < gv->n_tokens; id++) {
        if ((a[id >> 5] ^ b[id >> 5]) >> (id & 31) & 1) {
            fail_msg("%s step %zu: %s differs at token %u '%.*s': %s "
                     "by the full walk", schema, step, what, id,
                     (int) gv->len[id],
                     (const char *) gv->bytes + gv->off[id],
                     a[id >> 5] >> (id & 31) & 1 ? "allowed" : "refused");
        }
    }
}


/* One step: every masker's mask (masker 0 the full walk, the one the
 * others must equal), and every third step the brute force's. */
static inline void
tgw_step(tgw_rig_t *r, const kvs_gram_vocab_t *gv,
    const char *const *names, const char *schema, size_t step)
{
    size_t     k;
    kvs_err_t  err;

    for (k = 0; k < r->n; k++) {
        assert_int_equal(kvs_gram_mask(&r->mk[k], r->bits[k], &err),
                         KVS_OK);
        if (memcmp(r->bits[k], r->bits[0], r->words * sizeof(uint32_t))
            != 0)
        {
            tgw_first_diff(gv, r->bits[0], r->bits[k], names[k], schema,
                           step);
        }
    }

    if (step % 3 == 0) {
        tg_brute(&r->m, gv, r->bf, r->words);
        if (memcmp(r->bf, r->bits[0], r->words * sizeof(uint32_t)) != 0) {
            tgw_first_diff(gv, r->bf, r->bits[0],
                           "the full walk against brute force", schema,
                           step);
        }
    }
}

/* One walk of at most `steps` tokens from the matcher's state: each
 * step compared (tgw_step), then a token the full walk allows, picked
 * with *rng (tgw_pick), accepted; an END token ends it. */
static inline void
tgw_run(tgw_rig_t *r, const kvs_gram_vocab_t *gv,
    const char *const *names, const char *schema, size_t steps,
    uint64_t *rng)
{
    size_t     step;
    uint32_t   id;
    kvs_err_t  err;

    for (step = 0; step < steps; step++) {
        tgw_step(r, gv, names, schema, step);

        id = tgw_pick(gv, r->bits[0], r->cand, rng);
        assert_true(id != UINT32_MAX);
        if (gv->kind[id] == KVS_GRAM_TOK_END) {
            break;
        }
        assert_int_equal(kvs_gram_accept_token(&r->m, gv, (int32_t) id,
                                               &err), KVS_OK);
    }
}

#endif /* KVS_TEST_GWALK_H */
