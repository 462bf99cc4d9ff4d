/*
 * test_gram_run: a class run's entries (kvs_gram_run.c).  At a count c
 * of a repetition of one byte class (a pattern's [a-z0-9-]{2,30}), the
 * entry is the entry of the family's largest count less the tokens
 * whose first c + 1 bytes are all of the class; the masks must stay
 * those of the full walk on the real stacks, and of the brute force.
 *
 * The vocabulary has every single byte, runs of class bytes of 1 to 36
 * bytes (one class and mixed, past every bound below), runs followed
 * by a byte outside the class (a closing quote and what may follow it,
 * an upper-case letter, a dot, a space), and tokens that open with a
 * quote.  Seeded walks through patterns whose runs qualify (a bounded
 * class after a first character, digits, two classes in an object, an
 * array of runs) and through ones that must not (the class followed by
 * another repetition of bytes it holds, a two-byte copy, a literal of
 * the class after the run, and a grammar built by hand whose copies have
 * a separator) compare at every step:
 *
 *   plain    cache_entries 0: every mask a full walk on the real stacks
 *   run      entries, a run's counts taken from its largest count's,
 *            through the class's trie levels (a table shared by the
 *            schema's walks; past its first classes, by DFS)
 *   dfs      the same, each count by its own DFS (nolevels)
 *   tight    the same, levels bounded below what the class needs
 *            (rlev_max), so none are kept and the DFS takes over
 *   norun    entries, every one walked (kvs_gram_masker_t's noruns)
 *
 * and the brute force of every token every third step.  The "run"
 * maskers must have made entries so on the first patterns, none on
 * the others, and the "norun" ones none at all; after each walk the
 * entries of "run", "dfs" and "tight" are compared with the walked
 * ones key by key, and only "run" may have taken counts from levels.
 */

#include "kvs_test_gwalk.h"


typedef struct {
    const char  *schema;
    int          runs;                /* 1: its runs qualify; 2: and has
                                         more classes than a table keeps
                                         levels of (the rest by DFS) */
} tr_case_t;

static const tr_case_t  tr_cases[] = {
    { "{\"type\": \"string\", \"pattern\": \"^[a-z][a-z0-9-]{2,30}$\"}", 1 },
    { "{\"type\": \"string\", \"pattern\": \"^[0-9]{1,12}$\"}", 1 },
    { "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", "
      "\"pattern\": \"^[a-z_]{0,8}$\"}, \"b\": {\"type\": \"string\", "
      "\"pattern\": \"^[A-Z]{3,25}$\"}}, \"required\": [\"a\", \"b\"], "
      "\"additionalProperties\": false}", 1 },
    { "{\"type\": \"array\", \"items\": {\"type\": \"string\", "
      "\"pattern\": \"^[a-f0-9]{4,20}$\"}, \"maxItems\": 4}", 1 },
    { "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": "
      "\"string\", \"pattern\": \"^[a-z]{2,20}$\"}, \"b\": {\"type\": "
      "\"string\", \"pattern\": \"^[A-Z]{3,25}$\"}, \"c\": {\"type\": "
      "\"string\", \"pattern\": \"^[0-9]{1,12}$\"}}, \"required\": "
      "[\"a\", \"b\", \"c\"], \"additionalProperties\": false}", 2 },
    { "{\"type\": \"string\", \"pattern\": \"^[a-z]{0,9}[a-z0-9]*$\"}", 0 },
    { "{\"type\": \"string\", \"pattern\": \"^(ab){1,9}$\"}", 0 },
    { "{\"type\": \"string\", \"pattern\": \"^[a-z]{2,12}x$\"}", 0 },
};

#define TR_NC   (sizeof(tr_cases) / sizeof(tr_cases[0]))
#define TR_MAX  3000

enum { TR_PLAIN, TR_RUN, TR_DFS, TR_TIGHT, TR_NORUN, TR_MK };


static kvs_gram_vocab_t *
tr_vocab(void)
{
    static const char  *alpha[] = {
        "abcdefghijklmnopqrstuvwxyz", "0123456789", "-", "_",
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdef0123456789",
        "abcdefghijklmnopqrstuvwxyz0123456789-",
    };
    static const char  *tails[] = {
        "\"", "\",", "\"}", "\", \"", "\"]", "X", ".", " ", "x", "_", "1",
    };
    size_t              i, k, c, t, n, l, na;
    uint8_t            *texts[TR_MAX], kinds[TR_MAX], buf[64];
    uint32_t            lens[TR_MAX];
    uint64_t            rng;
    const char         *a;

    n = 0;
    for (i = 1; i < 256; i++) {
        buf[0] = (uint8_t) i;
        tgw_add(texts, lens, kinds, &n, TR_MAX, buf, 1);
    }

    na = sizeof(alpha) / sizeof(alpha[0]);
    rng = 4242;

    for (c = 2; c <= 36; c++) {
        for (k = 0; k < na; k++) {
            a = alpha[k];
            for (t = 0; t < 3; t++) {
                for (l = 0; l < c; l++) {
                    buf[l] = (uint8_t) a[tg_rand(&rng) % strlen(a)];
                }
                tgw_add(texts, lens, kinds, &n, TR_MAX, buf, c);
                if (tg_rand(&rng) % 2 == 0) {
                    i = tg_rand(&rng) % (sizeof(tails) / sizeof(tails[0]));
                    memcpy(buf + c, tails[i], strlen(tails[i]));
                    tgw_add(texts, lens, kinds, &n, TR_MAX, buf,
                            c + strlen(tails[i]));
                }
            }
        }
    }

    /* a quote, then a run */
    for (c = 1; c <= 6; c++) {
        buf[0] = '"';
        for (l = 0; l < c; l++) {
            buf[1 + l] = (uint8_t) ('a' + tg_rand(&rng) % 26);
        }
        tgw_add(texts, lens, kinds, &n, TR_MAX, buf, c + 1);
    }

    return tgw_vocab(texts, lens, kinds, n);
}


/* An allowed token: a closing one (holding '"', ']' or '}') one time in
 * `close`, or
 * when nothing else is allowed, else one of at most 3 bytes, so that a
 * run's counts are met one by one. */
static uint32_t
tr_pick(const kvs_gram_vocab_t *gv, const uint32_t *bits, uint32_t *cand,
    uint64_t *rng, uint32_t close)
{
    size_t    n, ch;
    uint32_t  id;

    for (id = 0, n = 0, ch = 0; id < gv->n_tokens; id++) {
        if (!(bits[id >> 5] >> (id & 31) & 1)) {
            continue;
        }
        if (gv->kind[id] == KVS_GRAM_TOK_TEXT
            && memchr(gv->bytes + gv->off[id], '"', gv->len[id]) == NULL
            && memchr(gv->bytes + gv->off[id], ']', gv->len[id]) == NULL
            && memchr(gv->bytes + gv->off[id], '}', gv->len[id]) == NULL)
        {
            if (gv->len[id] <= 3) {
                cand[n++] = id;
            }
        } else {
            cand[gv->n_tokens - 1 - ch++] = id;
        }
    }

    if (ch > 0 && (n == 0 || tg_rand(rng) % close == 0)) {
        return cand[gv->n_tokens - 1 - tg_rand(rng) % ch];
    }

    return n > 0 ? cand[tg_rand(rng) % n] : UINT32_MAX;
}


/* One entry of the "run" masker against the entry of the same key in
 * the "norun" one, when it holds that key: the same bits, the same
 * dependent tokens. */
typedef struct {
    const kvs_gram_vocab_t    *gv;
    const kvs_gram_masker_t   *other;
    const uint32_t            *key, *bits, *ranges;
    uint32_t                   n_ranges;
    int                        found;
    uint8_t                   *pa, *pb;  /* [n_tokens] dependent or not */
    uint64_t                   compared;
} tr_cmp_t;


static void
tr_positions(uint8_t *out, size_t n, const uint32_t *ranges, uint32_t nr)
{
    uint32_t  r, u;

    memset(out, 0, n);
    for (r = 0; r < nr; r++) {
        assert_true(ranges[2 * r] < ranges[2 * r + 1]);
        assert_true(r == 0 || ranges[2 * r - 1] <= ranges[2 * r]);
        for (u = ranges[2 * r]; u < ranges[2 * r + 1]; u++) {
            out[u] = 1;
        }
    }
}


static int
tr_inner(void *arg, const uint32_t *key, const uint32_t *bits,
    const uint32_t *ranges, uint32_t n_ranges, uint32_t some, int capped)
{
    size_t     words;
    tr_cmp_t  *c;

    (void) some;
    (void) capped;
    c = arg;
    if (memcmp(key, c->key, KVS_GRAM_CUT * sizeof(uint32_t)) != 0) {
        return KVS_OK;
    }

    c->found = 1;
    words = (c->gv->n_tokens + 31) / 32;
    assert_memory_equal(bits, c->bits, words * sizeof(uint32_t));
    tr_positions(c->pa, c->gv->n_tokens, c->ranges, c->n_ranges);
    tr_positions(c->pb, c->gv->n_tokens, ranges, n_ranges);
    assert_memory_equal(c->pa, c->pb, c->gv->n_tokens);

    return KVS_OK;
}


static int
tr_outer(void *arg, const uint32_t *key, const uint32_t *bits,
    const uint32_t *ranges, uint32_t n_ranges, uint32_t some, int capped)
{
    tr_cmp_t  *c;

    (void) some;
    (void) capped;
    c = arg;
    c->key = key;
    c->bits = bits;
    c->ranges = ranges;
    c->n_ranges = n_ranges;
    c->found = 0;
    assert_int_equal(kvs_gram_masker_entries(c->other, tr_inner, c), KVS_OK);
    c->compared += (uint64_t) c->found;

    return KVS_OK;
}


/* Walks through one schema; the entries the "dfs" and "norun" maskers
 * made from a run's largest count added to runs[0] and runs[1], those
 * "run" made so to runs[3] (runs[2] of them from levels), and after
 * each walk the entries of "run", "dfs" and "tight" compared with the
 * walked ones (cmp). */
static void
tr_walks(const kvs_gram_vocab_t *gv, const kvs_gram_t *g, const char *schema,
    size_t walks, uint64_t *runs, tr_cmp_t *cmp)
{
    size_t              w, step, k;
    uint32_t            id;
    uint64_t            rng;
    kvs_err_t           err;
    tgw_rig_t           r;
    kvs_gram_masker_t   tab;
    static const uint32_t  entries[TR_MK] = { 0, 16, 16, 16, 16 };
    static const char  *names[TR_MK] = { "plain", "run", "dfs", "tight",
                                         "norun" };

    tgw_alloc(&r, gv, TR_MK);

    /* "run" shares one table across the walks, as a grammar's requests
     * do: its levels are made once per class, for the first classes */
    assert_int_equal(kvs_gram_masker_init_table(&tab, gv, 64, &err),
                     KVS_OK);

    for (w = 0; w < walks; w++) {
        rng = 77 + w * 7919 + strlen(schema);
        tgw_begin(&r, g, gv, entries);
        kvs_gram_masker_share(&r.mk[TR_RUN], &tab);
        r.mk[TR_DFS].nolevels = 1;
        r.mk[TR_TIGHT].rlev_max = 4;
        r.mk[TR_NORUN].noruns = 1;

        for (step = 0; step < 80; step++) {
            tgw_step(&r, gv, names, schema, step);

            id = tr_pick(gv, r.bits[TR_PLAIN], r.cand, &rng,
                         (uint32_t) (4 + w % 12));
            assert_true(id != UINT32_MAX);
            if (gv->kind[id] == KVS_GRAM_TOK_END) {
                break;
            }
            assert_int_equal(kvs_gram_accept_token(&r.m, gv, (int32_t) id,
                                                   &err), KVS_OK);
        }

        runs[0] += r.mk[TR_DFS].ind_runs;
        runs[1] += r.mk[TR_NORUN].ind_runs;
        runs[2] += r.mk[TR_RUN].ind_levels;
        runs[3] += r.mk[TR_RUN].ind_runs;
        assert_int_equal(r.mk[TR_TIGHT].ind_runs, r.mk[TR_DFS].ind_runs);
        assert_int_equal(r.mk[TR_DFS].ind_levels, 0);
        assert_int_equal(r.mk[TR_TIGHT].ind_levels, 0);

        /* the entries themselves, key by key */
        cmp->other = &r.mk[TR_NORUN];
        for (k = TR_RUN; k <= TR_TIGHT; k++) {
            assert_int_equal(kvs_gram_masker_entries(&r.mk[k], tr_outer,
                                                     cmp), KVS_OK);
        }

        tgw_end(&r);
    }

    kvs_gram_masker_free(&tab);
    tgw_free(&r);
}


/* "[a-z]{1,14}" with a '-' between two copies, in quotes, built by hand
 * (no schema spells a separator in a run of one byte class): a copy is
 * two bytes, so its counts must not be taken from the largest's. */
static void
tr_sep_grammar(kvs_gram_t *g)
{
    uint32_t        x, r, root;
    kvs_err_t       err;
    kvs_gram_seq_t  s, sep;

    memset(&s, 0, sizeof(s));
    memset(&sep, 0, sizeof(sep));
    assert_int_equal(kvs_gram_init(g, NULL), KVS_OK);

    assert_int_equal(kvs_gram_rule_new(g, &x, &err), KVS_OK);
    kvs_gram_seq_range(&s, 'a', 'z');
    assert_int_equal(kvs_gram_add_alt(g, x, &s, &err), KVS_OK);

    kvs_gram_seq_lit(&sep, "-", 1);
    assert_int_equal(kvs_gram_repeat(g, x, &sep, 1, 14, &r, &err), KVS_OK);

    assert_int_equal(kvs_gram_rule_new(g, &root, &err), KVS_OK);
    kvs_gram_seq_reset(&s);
    kvs_gram_seq_lit(&s, "\"", 1);
    kvs_gram_seq_ref(&s, r);
    kvs_gram_seq_lit(&s, "\"", 1);
    assert_int_equal(kvs_gram_add_alt(g, root, &s, &err), KVS_OK);
    assert_int_equal(kvs_gram_finish(g, root, &err), KVS_OK);
    assert_true(g->lazy && g->rep_c != NULL);

    kvs_gram_seq_free(&s);
    kvs_gram_seq_free(&sep);
}


static void
test_run_walks(void **state)
{
    size_t             i;
    uint64_t           runs[4], before, lev, made;
    tr_cmp_t           cmp;
    kvs_gram_t         g;
    kvs_gram_vocab_t  *gv;

    (void) state;
    gv = tr_vocab();
    memset(runs, 0, sizeof(runs));
    memset(&cmp, 0, sizeof(cmp));
    cmp.gv = gv;
    cmp.pa = malloc(gv->n_tokens);
    cmp.pb = malloc(gv->n_tokens);
    assert_non_null(cmp.pa);
    assert_non_null(cmp.pb);

    for (i = 0; i < TR_NC; i++) {
        before = runs[0];
        lev = runs[2];
        made = runs[3];
        tgw_compile(&g, tr_cases[i].schema);
        tr_walks(gv, &g, tr_cases[i].schema, 12, runs, &cmp);
        kvs_gram_free(&g);
        print_message("%s: %llu entries from a run's largest count; on a "
                      "shared table %llu, %llu through levels\n",
                      tr_cases[i].schema,
                      (unsigned long long) (runs[0] - before),
                      (unsigned long long) (runs[3] - made),
                      (unsigned long long) (runs[2] - lev));
        if (tr_cases[i].runs == 1) {
            assert_true(runs[0] - before > 10);
            assert_true(runs[3] - made > 0);
            assert_int_equal(runs[2] - lev, runs[3] - made);
        } else if (tr_cases[i].runs == 2) {
            assert_true(runs[0] - before > 10);
            assert_true(runs[2] - lev > 0);
            assert_true(runs[2] - lev < runs[3] - made);
        } else {
            assert_int_equal(runs[0] - before, 0);
            assert_int_equal(runs[3] - made, 0);
        }
    }

    before = runs[0];
    tr_sep_grammar(&g);
    tr_walks(gv, &g, "\"[a-z](-[a-z]){0,13}\"", 12, runs, &cmp);
    kvs_gram_free(&g);
    assert_int_equal(runs[0] - before, 0);

    assert_int_equal(runs[1], 0);
    print_message("%llu entries equal to the walked ones of their keys\n",
                  (unsigned long long) cmp.compared);
    assert_true(cmp.compared > 100);

    free(cmp.pa);
    free(cmp.pb);
    kvs_gram_vocab_free(gv);
}


/*
 * The warm builds a run's source on an allowance of its own: under a
 * bound whose share per key (TR_UNITS / 16) is less than the source's
 * walk (over 8,000 units on this vocabulary), the source, and every
 * count that would build it, were skipped before; now they are built
 * and charged to the allowance, the bound is kept, and a masker on the
 * table takes the counts it meets from the source, its masks still the
 * full walk's.
 */
#define TR_UNITS  30000

static void
test_run_warm(void **state)
{
    size_t                  w, step;
    uint32_t                id, *bits, *plain, *cand;
    uint64_t                rng, taken;
    kvs_err_t               err;
    kvs_gram_t              g;
    kvs_gram_matcher_t      m;
    kvs_gram_masker_t       t, mk, pl;
    kvs_gram_vocab_t       *gv;
    kvs_gram_warm_stats_t   st;
    const char             *schema;

    (void) state;
    gv = tr_vocab();
    schema = tr_cases[0].schema;
    tgw_compile(&g, schema);
    bits = malloc(((gv->n_tokens + 31) / 32) * sizeof(uint32_t));
    plain = malloc(((gv->n_tokens + 31) / 32) * sizeof(uint32_t));
    cand = malloc(gv->n_tokens * sizeof(uint32_t));
    assert_non_null(bits);
    assert_non_null(plain);
    assert_non_null(cand);

    assert_int_equal(kvs_gram_masker_init_table(&t, gv, 256, &err), KVS_OK);
    assert_int_equal(kvs_gram_masker_warm(&t, &g, NULL, TR_UNITS, 256, &st,
                                          &err), KVS_OK);
    print_message("warm: %u built, %u skipped, %u on the runs' allowance "
                  "(%llu units), %llu units\n", st.built, st.skipped,
                  st.runs, (unsigned long long) st.run_units,
                  (unsigned long long) st.units);
    assert_true(st.runs >= 1 && st.run_units > TR_UNITS / 16);
    assert_true(st.units <= TR_UNITS + TR_UNITS / 16);

    taken = 0;
    for (w = 0; w < 6; w++) {
        rng = 5 + w;
        assert_int_equal(kvs_gram_matcher_init(&m, &g, NULL, &err), KVS_OK);
        assert_int_equal(kvs_gram_masker_init(&mk, gv, &m, 16, &err),
                         KVS_OK);
        assert_int_equal(kvs_gram_masker_init(&pl, gv, &m, 0, &err),
                         KVS_OK);
        kvs_gram_masker_share(&mk, &t);

        for (step = 0; step < 60; step++) {
            assert_int_equal(kvs_gram_mask(&pl, plain, &err), KVS_OK);
            assert_int_equal(kvs_gram_mask(&mk, bits, &err), KVS_OK);
            if (memcmp(bits, plain, ((gv->n_tokens + 31) / 32)
                                    * sizeof(uint32_t)) != 0)
            {
                tgw_first_diff(gv, plain, bits, "warmed run", schema, step);
            }
            id = tr_pick(gv, plain, cand, &rng, 12);
            assert_true(id != UINT32_MAX);
            if (gv->kind[id] == KVS_GRAM_TOK_END) {
                break;
            }
            assert_int_equal(kvs_gram_accept_token(&m, gv, (int32_t) id,
                                                   &err), KVS_OK);
        }


        taken += mk.ind_runs;
        kvs_gram_masker_free(&mk);
        kvs_gram_masker_free(&pl);
        kvs_gram_matcher_free(&m);
    }

    print_message("%llu counts taken from the warmed source\n",
                  (unsigned long long) taken);
    assert_true(taken > 0);

    kvs_gram_masker_free(&t);
    kvs_gram_free(&g);
    free(bits);
    free(plain);
    free(cand);
    kvs_gram_vocab_free(gv);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_run_walks),
        cmocka_unit_test(test_run_warm),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
