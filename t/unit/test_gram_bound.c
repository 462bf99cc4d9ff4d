/*
 * test_gram_bound: inside bounded strings and counted repetitions the
 * context-independent entries are keyed by a canonical copy of the
 * repetition (kvs_gram_rep_at; kvs_gram_rep.c says why that is exact), and
 * the masks must stay those of a full trie walk on the real stacks.
 *
 * On a small vocabulary built here whose longest token is 48 bytes (so
 * that a count of 49 or more copies left is the "all tokens alike"
 * tier, and counts of 8 .. 48 the tier where the tokens of 8 bytes or
 * more are checked on the real stacks), seeded long walks through
 * maxLength 5, 40 and 300 strings, x{m,n} patterns (a mandatory part,
 * an optional part, a separator-like group, an exact count, an x that
 * can be empty, nested counts whose two families meet in one key), and
 * bounded strings inside bounded arrays compare at
 * every step, token by token:
 *
 *   plain    cache_entries 0: every mask a full walk on the real stacks
 *   cached   the state cache and the context-independent entries
 *   shared   the same through a table of entries shared by the walks
 *
 * and, every few steps, the brute force of every token.  The grammar's
 * families are checked too (every member named by kvs_gram_rep_at has the
 * count asked for), and the walks must have been keyed canonically (far
 * fewer entries built than masks inside the strings), so that a change
 * that stopped sharing could not pass either.
 *
 * test_small_lengths: an entry whose key has a count below the tiers
 * takes its short tokens from the entry of its family's largest count
 * (kvs_gram_ind_src); on strings of every maxLength from 1 to 60 (and
 * inside a minLength and a bounded array), the masks of maskers built
 * that way, of maskers that build every entry by a full walk (nosrc)
 * and of the full walk on the real stacks agree at every step, and
 * the source path must have been taken.
 *
 * test_verdicts: the dependent tokens' verdicts kept per canonical
 * state, against the full walk and a masker that keeps none, also under
 * tight caps;
 * test_renaming: entries walked in renaming passes (kvs_gram_memo_rename)
 * against the full walk, at several first thetas and without renaming;
 * test_byte_classes: the grammar's byte classes, from which the memo
 * fills a transition for every byte of a class.
 */

#include "kvs_test_gwalk.h"


static const char  *tb_schemas[] = {
    "{\"type\": \"string\", \"maxLength\": 5}",
    "{\"type\": \"string\", \"maxLength\": 40}",
    "{\"type\": \"string\", \"minLength\": 20, \"maxLength\": 300}",
    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", "
    "\"maxLength\": 40}, \"b\": {\"type\": \"string\", \"maxLength\": 300}}"
    ", \"required\": [\"a\", \"b\"], \"additionalProperties\": false}",
    "{\"type\": \"string\", \"pattern\": \"^[a-z ]{10,120}$\"}",
    "{\"type\": \"string\", \"pattern\": \"^(ab|c){3,70}x$\"}",
    "{\"type\": \"string\", \"pattern\": \"^[0-9a]{60}$\"}",
    "{\"type\": \"string\", \"pattern\": \"^(a?b?){0,50}$\"}",
    "{\"type\": \"string\", \"pattern\": \"^((ab){2,5}){3,40}$\"}",
    "{\"type\": \"string\", \"pattern\": \"^((a|b0){1,60}c){2,9}$\"}",
    "{\"type\": \"array\", \"items\": {\"type\": \"string\", "
    "\"maxLength\": 60}, \"minItems\": 12, \"maxItems\": 70}",
    "{\"type\": \"array\", \"items\": {\"type\": \"array\", \"items\": "
    "{\"type\": \"string\", \"maxLength\": 55}, \"maxItems\": 9}, "
    "\"maxItems\": 60}",
    "{\"type\": \"object\", \"properties\": {\"b\": {\"type\": \"string\"}, "
    "\"a\": {\"type\": \"string\", \"maxLength\": 120}}, \"required\": "
    "[\"b\", \"a\"], \"additionalProperties\": false}",
};

#define TB_N  (sizeof(tb_schemas) / sizeof(tb_schemas[0]))

enum { TB_PLAIN, TB_CACHED, TB_SHARED, TB_MK };


/* Long runs of string characters, keys, closers, escapes, UTF-8. */
static kvs_gram_vocab_t *
tb_vocab(void)
{
    static const char  *pieces[] = {
        "\"", "\", \"", "\"]", "\"}", "\", ", "\"], [\"", "[\"", "[[\"",
        "\": \"", "\\n", "\\\"", "\\u00e9", "\xc3\xa9", "\xe6\x97\xa5",
        "ab", "abab", "cab", "ababab", "x\"", "ax", "0a", "a0a0",
        "\"a\": \"", "\", \"b\": \"", "\"}", "]]", "\"]]",
        "a b", "hello world", "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9",
        "abcdefghij\", \"b\": \"",
    };
    static const char   fill[] = "ab c";
    size_t              i, n, k, l, np;
    uint8_t            *texts[600], kinds[600];
    uint32_t            lens[600];
    kvs_gram_vocab_t   *gv;

    n = 0;
    for (i = 1; i < 256; i++) {
        texts[n] = malloc(1);
        texts[n][0] = (uint8_t) i;
        lens[n] = 1;
        kinds[n++] = KVS_GRAM_TOK_TEXT;
    }

    np = sizeof(pieces) / sizeof(pieces[0]);
    for (i = 0; i < np; i++) {
        lens[n] = (uint32_t) strlen(pieces[i]);
        texts[n] = (uint8_t *) strdup(pieces[i]);
        kinds[n++] = KVS_GRAM_TOK_TEXT;
    }

    /* runs of 2 .. 48 bytes of a few shapes: plain, digits, "ab"s,
     * spaces, and ones that close the string in their last bytes */
    for (l = 2; l <= 48; l++) {
        for (k = 0; k < 5; k++) {
            texts[n] = malloc(l);
            for (i = 0; i < l; i++) {
                texts[n][i] = (uint8_t) (k == 0 ? 'a'
                                         : k == 1 ? "0a"[i % 2]
                                         : k == 2 ? "ab"[i % 2]
                                         : k == 3 ? ' ' : fill[i % 4]);
            }
            if (k == 4 && l >= 4) {
                memcpy(texts[n] + l - 3, "\", ", 3);
            }
            lens[n] = (uint32_t) l;
            kinds[n++] = KVS_GRAM_TOK_TEXT;
        }
    }

    /* and, every 5 bytes from 8 (so that few enough are long to keep
     * rep_low at 8), runs whose characters are fewer than their bytes
     * (2-byte ones; 3-byte ones, the last cut short) and runs that end
     * on a control byte, an escape, or a lead byte whose next byte does
     * not go on (kvs_gram_long_direct's cases) */
    for (l = 8; l <= 48; l += 5) {
        for (k = 0; k < 5; k++) {
            texts[n] = malloc(l);
            for (i = 0; i < l; i++) {
                texts[n][i] = (uint8_t) (k == 0 ? "\xc3\xa9"[i % 2]
                                         : k == 1 ? "\xe6\x97\xa5"[i % 3]
                                         : 'a');
            }
            if (k == 2) {
                texts[n][l - 1] = '\n';
            } else if (k == 3) {
                memcpy(texts[n] + l - 2, "\\n", 2);
            } else if (k == 4) {
                memcpy(texts[n] + l - 2, "\xc3(", 2);
            }
            lens[n] = (uint32_t) l;
            kinds[n++] = KVS_GRAM_TOK_TEXT;
        }
    }

    gv = tgw_vocab(texts, lens, kinds, n);
    assert_int_equal(gv->max_len, 48);
    assert_int_equal(gv->rep_low, 8);

    return gv;
}


static void
tb_first_diff(const kvs_gram_vocab_t *gv, const uint32_t *a,
    const uint32_t *b, const char *what, size_t schema, size_t step)
{
    uint32_t  id;

    for (id = 0; id < gv->n_tokens; id++) {
        if ((a[id >> 5] ^ b[id >> 5]) >> (id & 31) & 1) {
            fail_msg("schema %zu step %zu: %s differs at token %u "
                     "(\"%.*s\"): %s by the full walk", schema, step, what,
                     id, (int) gv->len[id], gv->bytes + gv->off[id],
                     a[id >> 5] >> (id & 31) & 1 ? "allowed" : "refused");
        }
    }
}


/* Every member a family names has the count asked for and is of the
 * same family; returns the positions that have a count. */
static size_t
tb_families(const kvs_gram_t *g)
{
    size_t    n;
    uint32_t  p, c, q;

    n = 0;
    for (p = 0; p < g->n_elems; p++) {
        if (kvs_gram_rep_count(g, p) < 2) {
            continue;
        }
        n++;
        for (c = 2; c < kvs_gram_rep_count(g, p); c++) {
            q = kvs_gram_rep_at(g, p, c);
            assert_true(q < g->n_elems);
            assert_int_equal(kvs_gram_rep_count(g, q), c);
            assert_int_equal(g->rep_f[q], g->rep_f[p]);
            assert_int_equal(g->elems[q].kind, g->elems[p].kind);
        }
    }

    return n;
}


/* 1 if some stack's two key positions both have counts. */
static int
tb_two_families(const kvs_gram_matcher_t *m)
{
    uint32_t                 i, id;
    const kvs_gram_level_t  *lv;

    lv = &m->lv[m->n_lv - 1];
    for (i = 0; i < lv->n_front; i++) {
        id = m->front[lv->front + i];
        if (m->nodes[id].parent != KVS_GRAM_NIL
            && kvs_gram_rep_count(m->g, m->nodes[id].pos) > 0
            && kvs_gram_rep_count(m->g,
                   m->nodes[m->nodes[id].parent].pos) > 0)
        {
            return 1;
        }
    }

    return 0;
}


/* n masks' bits, one for the brute force, room for candidates; the
 * words of a mask. */
static uint32_t
tb_buffers(const kvs_gram_vocab_t *gv, size_t n, uint32_t **bits,
    uint32_t **bf, uint32_t **cand)
{
    size_t    k;
    uint32_t  words;

    words = (gv->n_tokens + 31) / 32;
    for (k = 0; k < n; k++) {
        bits[k] = malloc(words * sizeof(uint32_t));
        assert_non_null(bits[k]);
    }
    *bf = malloc(words * sizeof(uint32_t));
    *cand = malloc(gv->n_tokens * sizeof(uint32_t));
    assert_non_null(*bf);
    assert_non_null(*cand);

    return words;
}


static void
tb_buffers_free(uint32_t **bits, size_t n, uint32_t *bf, uint32_t *cand)
{
    size_t  k;

    for (k = 0; k < n; k++) {
        free(bits[k]);
    }
    free(bf);
    free(cand);
}


/* A matcher of g and n maskers on it: the first with no cache (the
 * full walk on the real stacks), the others with a state cache of 16. */
static void
tb_maskers(const kvs_gram_t *g, const kvs_gram_vocab_t *gv,
    kvs_gram_matcher_t *m, kvs_gram_masker_t *mk, size_t n)
{
    size_t     k;
    kvs_err_t  err;

    assert_int_equal(kvs_gram_matcher_init(m, g, NULL, &err), KVS_OK);
    for (k = 0; k < n; k++) {
        assert_int_equal(kvs_gram_masker_init(&mk[k], gv, m,
                                              k == 0 ? 0 : 16, &err),
                         KVS_OK);
        /* the entries are built, not copied from the vocabulary's
         * slices, which hold most bounded strings' counts: the builds
         * are what these tests are about (test_gram_slice has slices) */
        mk[k].noslices = 1;
    }
}


/* One step's masks: maskers 1 .. n - 1 against masker 0 (the full walk
 * on the real stacks), and that against the brute force when `brute`;
 * every one KVS_OK. */
static void
tb_step(const kvs_gram_vocab_t *gv, kvs_gram_matcher_t *m,
    kvs_gram_masker_t *mk, size_t n, uint32_t **bits, uint32_t *bf,
    uint32_t words, const char *const *names, size_t i, size_t step,
    int brute)
{
    size_t     k;
    kvs_err_t  err;

    for (k = 0; k < n; k++) {
        assert_int_equal(kvs_gram_mask(&mk[k], bits[k], &err), KVS_OK);
        if (memcmp(bits[k], bits[0], words * sizeof(uint32_t)) != 0) {
            tb_first_diff(gv, bits[0], bits[k], names[k], i, step);
        }
    }

    if (brute) {
        tg_brute(m, gv, bf, words);
        if (memcmp(bf, bits[0], words * sizeof(uint32_t)) != 0) {
            tb_first_diff(gv, bf, bits[0], "brute force", i, step);
        }
    }
}


/* An allowed token: one that closes something (holds '"' or ']', or
 * is END) one time in `close` or when nothing else is allowed, else one
 * that keeps writing, of at most maxl bytes once such a one was found;
 * UINT32_MAX when none. */
static uint32_t
tb_pick(const kvs_gram_vocab_t *gv, const uint32_t *bits, uint32_t *cand,
    uint32_t maxl, uint32_t close, uint64_t *rng)
{
    size_t    n, ch;
    uint32_t  id;

    for (id = 0, n = 0, ch = 0; id < gv->n_tokens; id++) {
        if (!(bits[id >> 5] >> (id & 31) & 1) || (gv->len[id] > maxl && n > 0))
        {
            continue;
        }
        if (gv->kind[id] == KVS_GRAM_TOK_TEXT
            && memchr(gv->bytes + gv->off[id], '"', gv->len[id]) == NULL
            && memchr(gv->bytes + gv->off[id], ']', gv->len[id]) == NULL)
        {
            cand[n++] = id;
        } else {
            cand[gv->n_tokens - 1 - ch++] = id;
        }
    }

    if (ch > 0 && (n == 0 || tg_rand(rng) % close == 0)) {
        return cand[gv->n_tokens - 1 - tg_rand(rng) % ch];
    }

    return n > 0 ? cand[tg_rand(rng) % n] : UINT32_MAX;
}


static void
tb_walks(const kvs_gram_vocab_t *gv, size_t walks, size_t steps,
    uint64_t seed)
{
    int                 rc[TB_MK], sh;
    size_t              i, w, step, k, masks, both;
    uint32_t            words, id, *bits[TB_MK], *bf, *cand;
    uint64_t            rng, built;
    kvs_err_t           err;
    kvs_gram_t          g;
    kvs_gram_matcher_t  m;
    kvs_gram_masker_t   mk[TB_MK], table;
    static const char  *names[TB_MK] = { "plain", "cached", "shared" };

    words = tb_buffers(gv, TB_MK, bits, &bf, &cand);

    for (i = 0; i < TB_N; i++) {
        if (tg_compile(&g, tb_schemas[i], KVS_GRAM_AMBIGUOUS, &err) != KVS_OK) {
            fail_msg("schema %zu: %s", i, err.msg);
        }

        /* the x of (a?b?) can be empty: no family there */
        if (strstr(tb_schemas[i], "a?b?") != NULL) {
            assert_int_equal(tb_families(&g), 0);
        } else if (strstr(tb_schemas[i], "\"maxLength\": 5}") == NULL) {
            assert_true(tb_families(&g) > 0);
        }

        assert_int_equal(kvs_gram_masker_init_table(&table, gv, 64, &err),
                         KVS_OK);
        masks = 0;
        built = 0;
        both = 0;

        for (w = 0; w < walks; w++) {
            rng = seed + i * 1000003 + w * 7919;
            assert_int_equal(kvs_gram_matcher_init(&m, &g, NULL, &err),
                             KVS_OK);
            for (k = 0; k < TB_MK; k++) {
                assert_int_equal(kvs_gram_masker_init(&mk[k], gv, &m,
                                     k == TB_PLAIN ? 0 : 16, &err),
                                 KVS_OK);
            }
            kvs_gram_masker_share(&mk[TB_SHARED], &table);

            for (step = 0; step < steps; step++) {
                for (k = 0; k < TB_MK; k++) {
                    rc[k] = kvs_gram_mask(&mk[k], bits[k], &err);
                    assert_true(rc[k] == KVS_OK || rc[k] == KVS_EFORMAT);
                    assert_int_equal(rc[k], rc[TB_PLAIN]);
                    if (k != TB_PLAIN && rc[k] == KVS_OK
                        && memcmp(bits[k], bits[TB_PLAIN],
                                  words * sizeof(uint32_t)) != 0)
                    {
                        tb_first_diff(gv, bits[TB_PLAIN], bits[k], names[k],
                                      i, step);
                    }
                }
                assert_int_equal(rc[TB_PLAIN], KVS_OK);
                masks++;
                both += tb_two_families(&m);

                if (step % 5 == 0) {
                    tg_brute(&m, gv, bf, words);
                    if (memcmp(bf, bits[TB_PLAIN], words * sizeof(uint32_t))
                        != 0)
                    {
                        tb_first_diff(gv, bf, bits[TB_PLAIN],
                                      "the full walk against brute force",
                                      i, step);
                    }
                }

                /* long walks: a token that closes something one time in
                 * forty, else one that keeps writing, mostly short ones
                 * (three times in four only tokens of 1 or 2 bytes) */
                sh = tg_rand(&rng) % 4 != 0;
                id = tb_pick(gv, bits[TB_PLAIN], cand, sh ? 2 : UINT32_MAX,
                             40, &rng);
                assert_true(id != UINT32_MAX);
                if (gv->kind[id] == KVS_GRAM_TOK_END) {
                    break;
                }
                assert_int_equal(kvs_gram_accept_token(&m, gv, (int32_t) id,
                                                       &err), KVS_OK);
            }

            built += mk[TB_CACHED].ind_misses;
            for (k = 0; k < TB_MK; k++) {
                kvs_gram_masker_free(&mk[k]);
            }
            kvs_gram_matcher_free(&m);
        }

        print_message("schema %zu: %zu masks, %llu entries built, %zu "
                      "with two counts in a key\n", i, masks,
                      (unsigned long long) built, both);

        /* the nested counts do put two families in one key */
        if (strstr(tb_schemas[i], "((ab){2,5}){3,40}") != NULL) {
            assert_true(both > 0);
        }

        kvs_gram_masker_free(&table);
        kvs_gram_free(&g);
    }

    tb_buffers_free(bits, TB_MK, bf, cand);
}


static void
test_bound_walks(void **state)
{
    kvs_gram_vocab_t  *gv;

    (void) state;
    gv = tb_vocab();
    tb_walks(gv, 4, 400, 5);
    kvs_gram_vocab_free(gv);
}


/*
 * 292 characters into a maxLength 300 string, one "a" at a time: every
 * count from 300 down to 8 is keyed by one of two members (49 and 8),
 * so a handful of entries are built for ~290 masks (one a mask without
 * the canonical keys); the masks are those of the full walk.
 */
static void
test_sharing(void **state)
{
    int32_t             a;
    uint32_t            k, words, *x, *y;
    kvs_err_t           err;
    kvs_gram_t          g;
    kvs_gram_matcher_t  m;
    kvs_gram_masker_t   plain, mk;
    kvs_gram_vocab_t   *gv;

    (void) state;
    gv = tb_vocab();
    words = (gv->n_tokens + 31) / 32;
    x = malloc(words * sizeof(uint32_t));
    y = malloc(words * sizeof(uint32_t));
    assert_non_null(x);
    assert_non_null(y);

    assert_int_equal(tg_compile(&g, "{\"type\": \"string\", "
                                "\"maxLength\": 300}", 0, &err), KVS_OK);
    assert_int_equal(kvs_gram_matcher_init(&m, &g, NULL, &err), KVS_OK);
    assert_int_equal(kvs_gram_masker_init(&plain, gv, &m, 0, &err), KVS_OK);
    assert_int_equal(kvs_gram_masker_init(&mk, gv, &m, 16, &err), KVS_OK);
    assert_int_equal(kvs_gram_matcher_feed(&m, "\"", 1, &err), KVS_OK);

    a = 'a' - 1;                      /* the byte tokens start at 1 */
    assert_int_equal(gv->len[a], 1);
    assert_int_equal(gv->bytes[gv->off[a]], 'a');

    for (k = 0; k <= 292; k++) {
        assert_int_equal(kvs_gram_mask(&plain, x, &err), KVS_OK);
        assert_int_equal(kvs_gram_mask(&mk, y, &err), KVS_OK);
        if (memcmp(x, y, words * sizeof(uint32_t)) != 0) {
            tb_first_diff(gv, x, y, "cached", 2, k);
        }
        if (k < 292) {
            assert_int_equal(kvs_gram_accept_token(&m, gv, a, &err),
                             KVS_OK);
        }
    }

    print_message("293 masks: %llu entries built, %llu hits\n",
                  (unsigned long long) mk.ind_misses,
                  (unsigned long long) mk.ind_hits);
    assert_true(mk.ind_misses <= 6);

    kvs_gram_masker_free(&mk);
    kvs_gram_masker_free(&plain);
    kvs_gram_matcher_free(&m);
    kvs_gram_free(&g);
    kvs_gram_vocab_free(gv);
    free(x);
    free(y);
}


/* The tier of tokens checked on the real stacks: its bound, its count. */
static void
test_tiers(void **state)
{
    uint32_t           x, n;
    kvs_gram_vocab_t  *gv;

    (void) state;
    gv = tb_vocab();

    for (x = 0, n = 0; x < gv->n_text; x++) {
        n += gv->len[gv->ids[x]] >= gv->rep_low;
    }
    assert_int_equal(gv->n_long, n);
    assert_true(n > 0 && n <= 256);
    for (x = 1; x < gv->n_long; x++) {
        assert_true(gv->long_x[x - 1] < gv->long_x[x]);
    }

    kvs_gram_vocab_free(gv);
}


/*
 * Every small bounded length: walks of short tokens (ASCII, a 2-byte and
 * a 3-byte character, escapes) through each string until it closes,
 * three walks per length; at every step the masks of the default masker
 * (entries from a source), one with nosrc, one sharing a table, and the
 * full walk on the real stacks are equal, and every fourth step the
 * brute force agrees too.
 */
static void
test_small_lengths(void **state)
{
    char                schema[256];
    size_t              n, w, step, k;
    uint32_t            words, id, *bits[4], *bf, *cand;
    uint64_t            rng, src, masks;
    kvs_err_t           err;
    kvs_gram_t          g;
    kvs_gram_matcher_t  m;
    kvs_gram_masker_t   mk[4], table;
    kvs_gram_vocab_t   *gv;
    static const char  *names[4] = { "plain", "from a source", "nosrc",
                                     "shared" };

    (void) state;
    gv = tb_vocab();
    words = tb_buffers(gv, 4, bits, &bf, &cand);
    src = 0;
    masks = 0;

    for (n = 1; n <= 62; n++) {
        if (n <= 60) {
            snprintf(schema, sizeof(schema), "{\"type\": \"string\", "
                     "\"maxLength\": %zu}", n);
        } else if (n == 61) {
            snprintf(schema, sizeof(schema), "{\"type\": \"string\", "
                     "\"minLength\": 3, \"maxLength\": 20}");
        } else {
            snprintf(schema, sizeof(schema), "{\"type\": \"array\", "
                     "\"items\": {\"type\": \"string\", "
                     "\"maxLength\": 12}, \"maxItems\": 10}");
        }
        if (tg_compile(&g, schema, KVS_GRAM_AMBIGUOUS, &err) != KVS_OK) {
            fail_msg("%s: %s", schema, err.msg);
        }
        assert_int_equal(kvs_gram_masker_init_table(&table, gv, 64, &err),
                         KVS_OK);

        for (w = 0; w < 3; w++) {
            rng = 77 + n * 131 + w;
            tb_maskers(&g, gv, &m, mk, 4);
            mk[2].nosrc = 1;
            kvs_gram_masker_share(&mk[3], &table);
            mk[3].noslices = 0;       /* the engine's arrangement */

            for (step = 0; step < 120; step++) {
                tb_step(gv, &m, mk, 4, bits, bf, words, names, n, step,
                        step % 4 == 0);
                masks++;

                /* tokens of 1 to 6 bytes that write characters; one
                 * that closes something one time in twelve */
                id = tb_pick(gv, bits[0], cand, 6, 12, &rng);
                if (id == UINT32_MAX || gv->kind[id] == KVS_GRAM_TOK_END) {
                    break;
                }
                assert_int_equal(kvs_gram_accept_token(&m, gv, (int32_t) id,
                                                       &err), KVS_OK);
            }

            src += mk[1].ind_src + mk[3].ind_src;
            assert_int_equal(mk[2].ind_src, 0);
            for (k = 0; k < 4; k++) {
                kvs_gram_masker_free(&mk[k]);
            }
            kvs_gram_matcher_free(&m);
        }

        kvs_gram_masker_free(&table);
        kvs_gram_free(&g);
    }

    print_message("%llu masks, %llu entries built from a source\n",
                  (unsigned long long) masks, (unsigned long long) src);
    assert_true(src > 100);

    tb_buffers_free(bits, 4, bf, cand);
    kvs_gram_vocab_free(gv);
}


/*
 * Renaming passes (kvs_gram_ind_passes, kvs_gram_memo_rename): walks
 * through a maxLength 300 string, a bounded string after a free one, a
 * pattern's count, bounded strings in a bounded array and a count of an
 * x that two parses can take (so that one state holds stacks at two
 * counts of one group, kvs_gram_memo_uniform); at every step
 * the masks of maskers whose first pass renames above theta0 = 1, 3 and
 * 15 (the default) and of one with norename equal the full walk's on
 * the real stacks, and every fifth step the brute force's.  Renaming
 * must have happened, and must have let subtree skipping close inside
 * the bounded strings, where norename's walks close less.
 */
static void
test_renaming(void **state)
{
    int                 sh;
    size_t              i, w, step, k;
    uint32_t            words, id, *bits[5], *bf, *cand;
    uint64_t            rng, renamed, sk[4], skip[5];
    kvs_err_t           err;
    kvs_gram_t          g;
    kvs_gram_matcher_t  m;
    kvs_gram_masker_t   mk[5];
    kvs_gram_vocab_t   *gv;
    static const char  *names[5] = { "plain", "theta0 1", "theta0 3",
                                     "theta0 15", "norename" };
    static const char  *schemas[] = {
        "{\"type\": \"string\", \"maxLength\": 300}",
        ("{\"type\": \"object\", \"properties\": {\"b\": {\"type\": "
         "\"string\"}, \"a\": {\"type\": \"string\", \"maxLength\": "
         "120}}, \"required\": [\"b\", \"a\"], \"additionalProperties\": "
         "false}"),
        "{\"type\": \"string\", \"pattern\": \"^[a-z ]{10,120}$\"}",
        ("{\"type\": \"array\", \"items\": {\"type\": \"string\", "
         "\"maxLength\": 60}, \"maxItems\": 70}"),
        "{\"type\": \"string\", \"pattern\": \"^(a|aa| ){0,90}b$\"}",
    };

    (void) state;
    gv = tb_vocab();
    words = tb_buffers(gv, 5, bits, &bf, &cand);
    renamed = 0;
    memset(skip, 0, sizeof(skip));

    for (i = 0; i < sizeof(schemas) / sizeof(schemas[0]); i++) {
        if (tg_compile(&g, schemas[i], KVS_GRAM_AMBIGUOUS, &err) != KVS_OK) {
            fail_msg("%s: %s", schemas[i], err.msg);
        }

        for (w = 0; w < 3; w++) {
            rng = 901 + i * 7717 + w;
            tb_maskers(&g, gv, &m, mk, 5);
            mk[1].theta0 = 1;
            mk[2].theta0 = 3;
            mk[4].norename = 1;

            for (step = 0; step < 300; step++) {
                tb_step(gv, &m, mk, 5, bits, bf, words, names, i, step,
                        step % 5 == 0);

                /* mostly tokens of 1 or 2 bytes; a closing one one time
                 * in sixty */
                sh = tg_rand(&rng) % 4 != 0;
                id = tb_pick(gv, bits[0], cand, sh ? 2 : UINT32_MAX, 60,
                             &rng);
                if (id == UINT32_MAX || gv->kind[id] == KVS_GRAM_TOK_END) {
                    break;
                }
                assert_int_equal(kvs_gram_accept_token(&m, gv, (int32_t) id,
                                                       &err), KVS_OK);
            }

            for (k = 1; k < 5; k++) {
                kvs_gram_memo_skips(mk[k].memo, sk);
                skip[k] += sk[0];
                if (k < 4) {
                    renamed += kvs_gram_memo_renamed(mk[k].memo);
                } else {
                    assert_int_equal(kvs_gram_memo_renamed(mk[k].memo), 0);
                }
            }
            for (k = 0; k < 5; k++) {
                kvs_gram_masker_free(&mk[k]);
            }
            kvs_gram_matcher_free(&m);
        }

        kvs_gram_free(&g);
    }

    print_message("renamed %llu positions; subtrees skipped: theta0 1 "
                  "%llu, 3 %llu, 15 %llu, norename %llu\n",
                  (unsigned long long) renamed, (unsigned long long) skip[1],
                  (unsigned long long) skip[2], (unsigned long long) skip[3],
                  (unsigned long long) skip[4]);
    assert_true(renamed > 0);
    for (k = 1; k < 4; k++) {
        assert_true(skip[k] > skip[4]);
    }

    tb_buffers_free(bits, 5, bf, cand);
    kvs_gram_vocab_free(gv);
}


/*
 * Byte classes (kvs_gram_t's bnext, which the memo fills transitions
 * from): for every schema here, every byte's class is a cycle through
 * bnext, and every byte range of the grammar holds all of a class or
 * none of it; the classes are not all single bytes (or the memo would
 * gain nothing), and a walk's memo did fill transitions from them.
 */
static void
test_byte_classes(void **state)
{
    size_t              i;
    uint32_t            b, c, n, k, words, *bits;
    uint64_t            filled;
    kvs_err_t           err;
    kvs_gram_t          g;
    kvs_gram_matcher_t  m;
    kvs_gram_masker_t   mk;
    kvs_gram_vocab_t   *gv;
    const kvs_gram_elem_t  *e;

    (void) state;
    gv = tb_vocab();
    words = (gv->n_tokens + 31) / 32;
    bits = malloc(words * sizeof(uint32_t));
    assert_non_null(bits);
    filled = 0;

    for (i = 0; i < TB_N; i++) {
        if (tg_compile(&g, tb_schemas[i], KVS_GRAM_AMBIGUOUS, &err) != KVS_OK) {
            fail_msg("schema %zu: %s", i, err.msg);
        }

        for (b = 0, n = 0; b < 256; b++) {
            for (c = g.bnext[b], k = 1; c != b && k <= 256;
                 c = g.bnext[c], k++)
            {
                /* round the class */
            }
            assert_int_equal(c, b);
            n += k > 1;

            for (k = 0; k < g.n_elems; k++) {
                e = &g.elems[k];
                if (e->kind == KVS_GRAM_BYTES) {
                    assert_int_equal(b >= e->lo && b <= e->hi,
                                     g.bnext[b] >= e->lo
                                     && g.bnext[b] <= e->hi);
                }
            }
        }
        assert_true(n > 100);

        assert_int_equal(kvs_gram_matcher_init(&m, &g, NULL, &err), KVS_OK);
        assert_int_equal(kvs_gram_masker_init(&mk, gv, &m, 16, &err),
                         KVS_OK);
        assert_int_equal(kvs_gram_mask(&mk, bits, &err), KVS_OK);
        filled += kvs_gram_memo_by_class(mk.memo);
        kvs_gram_masker_free(&mk);
        kvs_gram_matcher_free(&m);
        kvs_gram_free(&g);
    }

    assert_true(filled > 0);
    free(bits);
    kvs_gram_vocab_free(gv);
}

/* The verdict tests' three mask buffers of gv's words. */
static uint32_t
tb_vbufs(const kvs_gram_vocab_t *gv, uint32_t **x, uint32_t **y,
    uint32_t **z)
{
    uint32_t  words;

    words = (gv->n_tokens + 31) / 32;
    *x = malloc(words * sizeof(uint32_t));
    *y = malloc(words * sizeof(uint32_t));
    *z = malloc(words * sizeof(uint32_t));
    assert_non_null(*x);
    assert_non_null(*y);
    assert_non_null(*z);

    return words;
}


/* schema compiled into g, a matcher on it, and the full walk (plain),
 * the default masker (mk) and one that keeps no verdicts (ref). */
static void
tb_vmaskers(const char *schema, const kvs_gram_vocab_t *gv, kvs_gram_t *g,
    kvs_gram_matcher_t *m, kvs_gram_masker_t *plain, kvs_gram_masker_t *mk,
    kvs_gram_masker_t *ref)
{
    kvs_err_t  err;

    assert_int_equal(tg_compile(g, schema, 0, &err), KVS_OK);
    assert_int_equal(kvs_gram_matcher_init(m, g, NULL, &err), KVS_OK);
    assert_int_equal(kvs_gram_masker_init(plain, gv, m, 0, &err), KVS_OK);
    assert_int_equal(kvs_gram_masker_init(mk, gv, m, 16, &err), KVS_OK);
    assert_int_equal(kvs_gram_masker_init(ref, gv, m, 16, &err), KVS_OK);
    ref->noverdicts = 1;
}


/* One step of the verdict tests: the three maskers' masks into x, y, z,
 * the default's and the noverdicts one's equal to the full walk's. */
static void
tb_vstep(const kvs_gram_vocab_t *gv, kvs_gram_masker_t *plain,
    kvs_gram_masker_t *mk, kvs_gram_masker_t *ref, uint32_t *x, uint32_t *y,
    uint32_t *z, size_t i, size_t k)
{
    uint32_t   words;
    kvs_err_t  err;

    words = (gv->n_tokens + 31) / 32;
    assert_int_equal(kvs_gram_mask(plain, x, &err), KVS_OK);
    assert_int_equal(kvs_gram_mask(mk, y, &err), KVS_OK);
    assert_int_equal(kvs_gram_mask(ref, z, &err), KVS_OK);
    if (memcmp(x, y, words * sizeof(uint32_t)) != 0) {
        tb_first_diff(gv, x, y, "verdicts", i, k);
    }
    if (memcmp(x, z, words * sizeof(uint32_t)) != 0) {
        tb_first_diff(gv, x, z, "noverdicts", i, k);
    }
}


/*
 * The dependents' verdicts kept per canonical state (kvs_gram_verdict.c):
 * through a maxLength 300 string alone and inside an object (the closing
 * tokens go on into the object), one "a" at a time, the masks of the
 * default masker, of one that checks every dependent token at every mask
 * (noverdicts), of one that checks the low tier's long tokens on the
 * real stacks (nolong, kvs_gram_long.c), of one that walks them at the
 * keys' own counts instead of counting their characters (nodirect) and
 * of the full walk agree at every step; the verdicts must have been
 * taken at most characters, the long tokens classified by their
 * characters (the fills too) or, with nodirect, walked at the keys' own
 * counts from rep_low (8 here) to 48 characters left, and fewer tokens
 * checked.
 * Every third step is masked under tight caps instead (the node cap a
 * few nodes above what is alive, the frontier cap 1 or 2), where the
 * verdicts may be taken only if the check could not meet a cap: the
 * default masker and the noverdicts one must refuse alike there.
 */
static void
test_verdicts(void **state)
{
    static const char  *pre[] = { "\"", "{\"a\": \"ab\", \"b\": \"" };
    static const char  *sch[] = {
        "{\"type\": \"string\", \"maxLength\": 300}",
        "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": "
        "\"string\", \"maxLength\": 40}, \"b\": {\"type\": \"string\", "
        "\"maxLength\": 300}}, \"required\": [\"a\", \"b\"], "
        "\"additionalProperties\": false}",
    };
    static const uint32_t  extra[] = { 1, 2, 4, 8, 30 };
    int                 ra, rb;
    int32_t             a;
    size_t              i, k;
    uint32_t            words, *x, *y, *z;
    kvs_err_t           err;
    kvs_gram_t          g;
    kvs_gram_matcher_t  m;
    kvs_gram_masker_t   plain, mk, ref, nl, nd;
    kvs_gram_mlimits_t  keep;
    kvs_gram_vocab_t   *gv;

    (void) state;
    gv = tb_vocab();
    words = tb_vbufs(gv, &x, &y, &z);
    a = 'a' - 1;                      /* the byte tokens start at 1 */

    for (i = 0; i < 2; i++) {
        tb_vmaskers(sch[i], gv, &g, &m, &plain, &mk, &ref);
        assert_int_equal(kvs_gram_masker_init(&nl, gv, &m, 16, &err),
                         KVS_OK);
        nl.nolong = 1;
        assert_int_equal(kvs_gram_masker_init(&nd, gv, &m, 16, &err),
                         KVS_OK);
        nd.nodirect = 1;
        assert_int_equal(kvs_gram_matcher_feed(&m, pre[i], strlen(pre[i]),
                                               &err), KVS_OK);
        keep = m.lim;

        for (k = 0; k <= 292; k++) {
            if (k % 3 == 2) {
                m.lim.max_nodes = m.n_nodes + extra[k / 3 % 5];
                m.lim.max_front = k % 2 + 1;
                ra = kvs_gram_mask(&ref, x, &err);
                rb = kvs_gram_mask(&mk, y, &err);
                assert_int_equal(ra, rb);
                if (ra == KVS_OK
                    && memcmp(x, y, words * sizeof(uint32_t)) != 0)
                {
                    tb_first_diff(gv, x, y, "verdicts under caps", i, k);
                }
                rb = kvs_gram_mask(&nl, y, &err);
                assert_int_equal(ra, rb);
                if (ra == KVS_OK
                    && memcmp(x, y, words * sizeof(uint32_t)) != 0)
                {
                    tb_first_diff(gv, x, y, "nolong under caps", i, k);
                }
                rb = kvs_gram_mask(&nd, y, &err);
                m.lim = keep;
                assert_int_equal(ra, rb);
                if (ra == KVS_OK
                    && memcmp(x, y, words * sizeof(uint32_t)) != 0)
                {
                    tb_first_diff(gv, x, y, "nodirect under caps", i, k);
                }

            } else {
                tb_vstep(gv, &plain, &mk, &ref, x, y, z, i, k);
                assert_int_equal(kvs_gram_mask(&nl, z, &err), KVS_OK);
                if (memcmp(x, z, words * sizeof(uint32_t)) != 0) {
                    tb_first_diff(gv, x, z, "nolong", i, k);
                }
                assert_int_equal(kvs_gram_mask(&nd, z, &err), KVS_OK);
                if (memcmp(x, z, words * sizeof(uint32_t)) != 0) {
                    tb_first_diff(gv, x, z, "nodirect", i, k);
                }
            }

            if (k < 292) {
                assert_int_equal(kvs_gram_accept_token(&m, gv, a, &err),
                                 KVS_OK);
            }
        }

        print_message("schema %zu: verdicts kept %llu times (%llu with "
                      "long tokens counted), taken %llu; %llu tokens "
                      "checked (%llu without, %llu with the long ones, "
                      "%llu walking them); long tokens counted %llu times, "
                      "walked %llu times, found %llu\n", i,
                      (unsigned long long) mk.verdict_fills,
                      (unsigned long long) mk.fills_direct,
                      (unsigned long long) mk.verdict_hits,
                      (unsigned long long) mk.checked,
                      (unsigned long long) ref.checked,
                      (unsigned long long) nl.checked,
                      (unsigned long long) nd.checked,
                      (unsigned long long) mk.long_direct,
                      (unsigned long long) nd.long_builds,
                      (unsigned long long) nd.long_hits);
        assert_true(mk.verdict_hits > 100);
        assert_int_equal(ref.verdict_hits + ref.verdict_fills, 0);
        assert_true(mk.checked < ref.checked);
        assert_true(mk.long_direct >= 20);
        assert_true(mk.fills_direct >= 1);
        assert_int_equal(mk.long_builds, 0);
        assert_true(nd.long_builds >= 20);
        assert_int_equal(nd.long_direct + nd.fills_direct, 0);
        assert_int_equal(nl.long_builds + nl.long_hits + nl.long_direct, 0);
        assert_int_equal(ref.long_builds + ref.long_hits + ref.long_direct,
                         0);
        assert_true(mk.checked < nl.checked);
        assert_true(mk.checked < nd.checked);

        kvs_gram_masker_free(&nd);
        kvs_gram_masker_free(&nl);

        kvs_gram_masker_free(&ref);
        kvs_gram_masker_free(&mk);
        kvs_gram_masker_free(&plain);
        kvs_gram_matcher_free(&m);
        kvs_gram_free(&g);
    }

    kvs_gram_vocab_free(gv);
    free(x);
    free(y);
    free(z);
}


/*
 * A bounded string's last characters (counts below rep_low, 8 here,
 * each a key of its own): their stacks are named for the verdicts by
 * their family's keyed member (kvs_gram_verdict.c), so from the first
 * mask at rep_low or more each later one takes the kept verdicts of the
 * tokens shorter than its count and checks the rest.  Through strings
 * of maxLength 20 (low tier 8 .. 20) and 6 (no tier: named by their
 * largest count) inside an object, one "a" at a time to the end, the
 * default masker's masks must be the full walk's and those of one that
 * checks every dependent token (noverdicts), and below rep_low the
 * verdicts must have been taken.
 */
static void
test_low_verdicts(void **state)
{
    static const char  *sch[] = {
        "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": "
        "\"string\", \"maxLength\": 20}, \"b\": {\"type\": \"integer\"}}, "
        "\"required\": [\"a\", \"b\"], \"additionalProperties\": false}",
        "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": "
        "\"string\", \"maxLength\": 6}, \"b\": {\"type\": \"integer\"}}, "
        "\"required\": [\"a\", \"b\"], \"additionalProperties\": false}",
    };
    static const size_t  n_chars[] = { 20, 6 };
    int32_t             a;
    size_t              i, k;
    uint32_t            *x, *y, *z;
    uint64_t            low_hits;
    kvs_err_t           err;
    kvs_gram_t          g;
    kvs_gram_matcher_t  m;
    kvs_gram_masker_t   plain, mk, ref;
    kvs_gram_vocab_t   *gv;

    (void) state;
    gv = tb_vocab();
    assert_int_equal(gv->rep_low, 8);
    (void) tb_vbufs(gv, &x, &y, &z);
    a = 'a' - 1;                      /* the byte tokens start at 1 */

    for (i = 0; i < 2; i++) {
        tb_vmaskers(sch[i], gv, &g, &m, &plain, &mk, &ref);
        assert_int_equal(kvs_gram_matcher_feed(&m, "{\"a\": \"", 7, &err),
                         KVS_OK);

        low_hits = 0;
        for (k = 0; k <= n_chars[i]; k++) {
            uint64_t  before = mk.verdict_hits;

            tb_vstep(gv, &plain, &mk, &ref, x, y, z, i, k);
            /* n_chars - k characters left */
            if (n_chars[i] - k < 8 && n_chars[i] - k > 0) {
                low_hits += mk.verdict_hits - before;
            }
            if (k < n_chars[i]) {
                assert_int_equal(kvs_gram_accept_token(&m, gv, a, &err),
                                 KVS_OK);
            }
        }

        print_message("maxLength %zu: verdicts kept %llu times, taken "
                      "%llu (%llu below rep_low); %llu tokens checked "
                      "(%llu without)\n", n_chars[i],
                      (unsigned long long) mk.verdict_fills,
                      (unsigned long long) mk.verdict_hits,
                      (unsigned long long) low_hits,
                      (unsigned long long) mk.checked,
                      (unsigned long long) ref.checked);
        assert_true(low_hits >= (n_chars[i] > 8 ? 7 : 2));
        assert_int_equal(ref.verdict_hits + ref.verdict_fills, 0);
        assert_true(i > 0 ? mk.checked <= ref.checked
                          : mk.checked < ref.checked);

        kvs_gram_masker_free(&ref);
        kvs_gram_masker_free(&mk);
        kvs_gram_masker_free(&plain);
        kvs_gram_matcher_free(&m);
        kvs_gram_free(&g);
    }

    free(x);
    free(y);
    free(z);
    kvs_gram_vocab_free(gv);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_tiers),
        cmocka_unit_test(test_small_lengths),
        cmocka_unit_test(test_renaming),
        cmocka_unit_test(test_byte_classes),
        cmocka_unit_test(test_sharing),
        cmocka_unit_test(test_verdicts),
        cmocka_unit_test(test_low_verdicts),
        cmocka_unit_test(test_bound_walks),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
