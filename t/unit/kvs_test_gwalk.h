/*
 * kvs_test_gwalk: what the mask tests that walk one grammar with several
 * maskers side by side share (test_gram_memo, test_gram_count): the
 * buffers (one mask per masker, a brute-force mask, a token list) and,
 * per walk, a matcher with the maskers on it, each with its own number
 * of state-cache entries (0: every mask a full walk).  Any failure to
 * allocate or initialise fails the test.  Header-only, like kvs_test.h.
 */

#ifndef KVS_TEST_GWALK_H
#define KVS_TEST_GWALK_H

#include "kvs_test_gram.h"


#define TGW_MAX  10                   /* maskers at most */

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

#endif /* KVS_TEST_GWALK_H */
