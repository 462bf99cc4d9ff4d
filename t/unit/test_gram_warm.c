/*
 * test_gram_warm: a grammar's table warmed at compile time
 * (kvs_gram_masker_warm, kvs_gram_warm.c) and the table's index by key
 * hash (kvs_gram_ind.c).
 *
 * The warm builds the entries of every key the grammar's stacks can
 * show, before any mask.  Those entries must be the ones a mask would
 * have built: seeded walks through objects, arrays, enums, anyOf,
 * $ref recursion, bounded strings and patterns compare at every step
 *
 *   plain    cache_entries 0: every mask a full walk on the real stacks
 *   warm     a masker sharing a table warmed with no bound
 *   part     a masker sharing a table warmed under a small work bound
 *   cold     a masker with a table of its own, built as masks meet keys
 *   tiny     a masker sharing a warmed table of 6 entries, so that
 *            masks evict and rebuild (the index's deletions)
 *
 * and the brute force every third step.  The entries are of both forms
 * (their nonzero words listed, or whole: the mask ORs them apart), and
 * masks that were such a union alone are left out of the state cache.
 * The warmed maskers must meet
 * fewer new keys than the cold one (the warm did the work), the bounds
 * must hold (work units, fill), and a grammar over the warm's size cap,
 * or a table already shared, is left alone.
 *
 * The entries a sharing masker builds step through the table's memo,
 * where the warm left its transitions (kvs_gram_ind.c): the masker's
 * own memo takes no step, the table's meets the warm's states; a
 * masker with no memo builds with none and leaves the table's alone.
 */

#include "kvs_test_gwalk.h"


static const char  *tw_schemas[] = {
    NULL,                                             /* json_object */
    "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": "
    "\"string\"}, \"age\": {\"type\": \"integer\", \"minimum\": 0, "
    "\"maximum\": 150}, \"tags\": {\"type\": \"array\", \"items\": "
    "{\"enum\": [\"red\", \"green\", \"blue\"]}, \"maxItems\": 4}}, "
    "\"required\": [\"name\", \"age\"], \"additionalProperties\": false}",
    "{\"anyOf\": [{\"type\": \"object\", \"properties\": {\"kind\": "
    "{\"const\": \"circle\"}, \"r\": {\"type\": \"number\"}}, "
    "\"required\": [\"kind\", \"r\"], \"additionalProperties\": false}, "
    "{\"type\": \"object\", \"properties\": {\"kind\": {\"const\": "
    "\"box\"}, \"w\": {\"type\": \"integer\"}}, \"required\": [\"kind\", "
    "\"w\"], \"additionalProperties\": false}]}",
    "{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": "
    "{\"v\": {\"type\": \"boolean\"}, \"kids\": {\"type\": \"array\", "
    "\"items\": {\"$ref\": \"#/$defs/node\"}}}, \"required\": [\"v\"], "
    "\"additionalProperties\": false}}, \"$ref\": \"#/$defs/node\"}",
    "{\"type\": \"object\", \"properties\": {\"id\": {\"type\": "
    "\"string\", \"maxLength\": 12}, \"code\": {\"type\": \"string\", "
    "\"pattern\": \"^[a-z]{2,6}-[0-9]+$\"}, \"note\": {\"type\": "
    "[\"string\", \"null\"]}}, \"required\": [\"id\", \"code\"], "
    "\"additionalProperties\": false}",
    "{\"type\": \"array\", \"items\": {\"type\": \"object\", "
    "\"additionalProperties\": {\"type\": \"integer\"}}, \"minItems\": 1}",
};

#define TW_NS   (sizeof(tw_schemas) / sizeof(tw_schemas[0]))

enum { TW_PLAIN, TW_WARM, TW_PART, TW_COLD, TW_TINY, TW_MK };


static kvs_gram_vocab_t *
tw_vocab(void)
{
    static const char  *words[] = {
        "{\"", "\":", "\": ", "\", \"", "\"}", "\"]", "\",", ", \"", "},",
        "}]", "[{", "[\"", "name", "age", "tags", "red", "green", "blue",
        "\"red\"", "kind", "circle", "\"box\"", "\"r\": ", "w", "kids",
        "\"v\": ", "true", "false", "null", "id", "code", "note", "ab-",
        "-12", "123", "0.5", "-3", "e7", "1.", "{}", "[]", "\"\"", "\\n",
        "\\\"", "\\u00", "xyz", " ", "\xc3\xa9", "\": {\"", "\": [",
    };
    return tgw_vocab_words(words, sizeof(words) / sizeof(words[0]));
}


/* A table of `entries` over gv warmed for g; its stats in *st. */
static void
tw_table(kvs_gram_masker_t *t, const kvs_gram_vocab_t *gv,
    const kvs_gram_t *g, uint32_t entries, uint64_t units, uint32_t fill,
    kvs_gram_warm_stats_t *st)
{
    kvs_err_t  err;

    assert_int_equal(kvs_gram_masker_init_table(t, gv, entries, &err),
                     KVS_OK);
    assert_int_equal(kvs_gram_masker_warm(t, g, NULL, units, fill, st,
                                          &err), KVS_OK);
    assert_int_equal(st->entries, t->n_ind);
    assert_true(t->n_built <= fill);
    assert_true(t->n_ind <= t->cap_ind);
    assert_true(t->n_built + t->n_lent <= t->n_ind);
    assert_true(t->n_lent <= st->slices);
}


/* Seeded walks of schema; what the masks' builds found in the table's
 * memo (its hits). */
static uint64_t
tw_walks(const kvs_gram_vocab_t *gv, const char *schema, size_t walks)
{
    size_t                  w;
    uint64_t                rng, miss[TW_MK], sparse, whole, unkept;
    uint64_t                st0[4], st1[4], own[4], thits;
    kvs_gram_t              g;
    tgw_rig_t               r;
    kvs_gram_masker_t       warm, part, tiny;
    kvs_gram_warm_stats_t   sw, sp, st;
    const char             *name;
    static const uint32_t   entries[TW_MK] = { 0, 16, 16, 16, 16 };
    static const char      *names[TW_MK] = { "plain", "warm", "part",
                                             "cold", "tiny" };

    name = schema != NULL ? schema : "json_object";
    tgw_alloc(&r, gv, TW_MK);
    tgw_compile(&g, schema);
    memset(miss, 0, sizeof(miss));
    sparse = 0;
    whole = 0;
    unkept = 0;
    thits = 0;

    for (w = 0; w < walks; w++) {
        /* fresh tables per walk: a first request after the compile */
        tw_table(&warm, gv, &g, 256, 0, 192, &sw);
        tw_table(&part, gv, &g, 256, 3000, 192, &sp);
        tw_table(&tiny, gv, &g, 8, 0, 6, &st);

        assert_true(sw.entries > 0);
        assert_true(sw.keys >= sw.built);
        /* json_object's values are slices, lent before the builds, in
         * slots of their own (their masks compared below) */
        assert_true(sw.lent <= sw.slices);
        assert_true(schema != NULL || sw.lent > 0);
        assert_true(st.lent <= 6);
        /* the build that meets the bound is cut short at its next
         * check and not kept, and the warm stops there */
        assert_true(sp.units < 2 * 3000);
        assert_true(sp.units <= 3000 || !sp.done);
        assert_true(sp.entries <= sw.entries);

        rng = 7001 + w * 104729 + (schema != NULL ? strlen(schema) : 0);
        tgw_begin(&r, &g, gv, entries);
        kvs_gram_masker_share(&r.mk[TW_WARM], &warm);
        kvs_gram_masker_share(&r.mk[TW_PART], &part);
        kvs_gram_masker_share(&r.mk[TW_TINY], &tiny);
        kvs_gram_memo_stats(warm.memo, st0);

        tgw_run(&r, gv, names, name, 60, &rng);

        /* the warm masker's builds stepped the table's memo, not its
         * own, and met there what the warm had made */
        kvs_gram_memo_stats(warm.memo, st1);
        kvs_gram_memo_stats(r.mk[TW_WARM].memo, own);
        assert_int_equal(own[0] + own[1], 0);
        thits += st1[0] - st0[0];

        miss[TW_WARM] += r.mk[TW_WARM].ind_misses;
        miss[TW_COLD] += r.mk[TW_COLD].ind_misses;
        /* entries of both forms met (their union is checked at every
         * step above), and masks left out of the state cache */
        sparse += warm.ind_sparse;
        whole += warm.n_ind > warm.ind_sparse
                 ? warm.n_ind - warm.ind_sparse : 0;
        unkept += r.mk[TW_WARM].unkept + r.mk[TW_COLD].unkept;

        tgw_end(&r);
        kvs_gram_masker_free(&warm);
        kvs_gram_masker_free(&part);
        kvs_gram_masker_free(&tiny);
    }

    print_message("%s: %u keys, %u entries warmed (%u lent first); "
                  "misses warm %llu, "
                  "cold %llu; entries listing their words %llu, whole "
                  "%llu; masks not kept %llu; the table memo's hits in "
                  "the masks' builds %llu\n", name, sw.keys, sw.entries,
                  sw.lent,
                  (unsigned long long) miss[TW_WARM],
                  (unsigned long long) miss[TW_COLD],
                  (unsigned long long) sparse, (unsigned long long) whole,
                  (unsigned long long) unkept, (unsigned long long) thits);

    /* what the warm built, the masks did not build again */
    assert_true(miss[TW_WARM] < miss[TW_COLD]);
    assert_true(sparse > 0);
    assert_true(whole > 0);
    assert_true(unkept > 0);

    kvs_gram_free(&g);
    tgw_free(&r);

    return thits;
}


static void
test_warm_walks(void **state)
{
    size_t             i;
    uint64_t           thits;
    kvs_gram_vocab_t  *gv;

    (void) state;
    gv = tw_vocab();
    thits = 0;

    for (i = 0; i < TW_NS; i++) {
        thits += tw_walks(gv, tw_schemas[i], 5);
    }

    /* the masks' builds met transitions the warm had made */
    assert_true(thits > 0);

    kvs_gram_vocab_free(gv);
}


/* Masks of g by a masker with a memo of `states` (0: none) sharing t,
 * which the warm left short: the entries they build, and whose memo
 * those builds stepped (t's, or none). */
static void
tw_memo_builds(kvs_gram_masker_t *t, const kvs_gram_t *g,
    const kvs_gram_vocab_t *gv, uint32_t states)
{
    uint32_t             words, *bits;
    uint64_t             st0[4], st1[4], own[4];
    kvs_err_t            err;
    kvs_gram_matcher_t   m;
    kvs_gram_masker_t    mk;

    words = (gv->n_tokens + 31) / 32;
    bits = calloc(words, sizeof(uint32_t));
    assert_non_null(bits);

    assert_int_equal(kvs_gram_matcher_init(&m, g, NULL, &err), KVS_OK);
    assert_int_equal(kvs_gram_masker_init(&mk, gv, &m, 16, &err), KVS_OK);
    assert_int_equal(kvs_gram_masker_memo(&mk, states, &err), KVS_OK);
    kvs_gram_masker_share(&mk, t);
    kvs_gram_memo_stats(t->memo, st0);

    assert_int_equal(kvs_gram_mask(&mk, bits, &err), KVS_OK);
    assert_int_equal(kvs_gram_matcher_feed(&m, "\"gr", 3, &err), KVS_OK);
    assert_int_equal(kvs_gram_mask(&mk, bits, &err), KVS_OK);

    kvs_gram_memo_stats(t->memo, st1);
    kvs_gram_memo_stats(mk.memo, own);
    print_message("memo of %u states: %llu entries built, the table "
                  "memo's steps %llu\n", states,
                  (unsigned long long) mk.ind_misses,
                  (unsigned long long) (st1[0] + st1[1] - st0[0] - st0[1]));
    assert_true(mk.ind_misses > 0);
    assert_int_equal(own[0] + own[1], 0);
    if (states == 0) {
        assert_memory_equal(st0, st1, sizeof(st0));
    } else {
        assert_true(st1[0] + st1[1] > st0[0] + st0[1]);
    }

    kvs_gram_masker_free(&mk);
    kvs_gram_matcher_free(&m);
    free(bits);
}


/* Every key of a small grammar is warmed, and again is all hits. */
static void
test_warm_all(void **state)
{
    kvs_err_t              err;
    kvs_gram_t             g;
    kvs_gram_masker_t      t;
    kvs_gram_vocab_t      *gv;
    kvs_gram_warm_stats_t  st, again;

    (void) state;
    gv = tw_vocab();
    tgw_compile(&g, "{\"enum\": [\"red\", \"green\", 7]}");

    tw_table(&t, gv, &g, 256, 0, 256, &st);
    assert_true(st.done);
    assert_true(st.built > 0);

    /* a table already warmed: every key found, so none tried again
     * and nothing built */
    assert_int_equal(kvs_gram_masker_warm(&t, &g, NULL, 0, 256, &again,
                                          &err), KVS_OK);
    assert_true(again.done);
    assert_int_equal(again.built, 0);
    assert_true(st.keys > 0);
    assert_int_equal(again.keys, 0);
    assert_int_equal(again.entries, st.entries);

    kvs_gram_masker_free(&t);

    /* fill 2: two built entries at most (and two lent in the first
     * pass), and the warm says it stopped */
    tw_table(&t, gv, &g, 256, 0, 2, &st);
    assert_true(t.n_built <= 2);
    assert_true(st.lent <= 2);
    assert_false(st.done);

    /* the rest built by masks: with no memo, the table's untouched;
     * with one, through the table's */
    tw_memo_builds(&t, &g, gv, 0);
    kvs_gram_masker_free(&t);
    tw_table(&t, gv, &g, 256, 0, 2, &st);
    tw_memo_builds(&t, &g, gv, KVS_GRAM_MEMO_STATES);
    kvs_gram_masker_free(&t);

    kvs_gram_free(&g);
    kvs_gram_vocab_free(gv);
}


/* A time bound already passed when the warm begins: no build begins
 * (the first pass still lends the slices, which cost no walk), the warm
 * says the time ended it, and a request's masks over that table are
 * those over a table warmed whole, at every step of a text.  A bound
 * far off changes nothing. */
static void
test_warm_late(void **state)
{
    size_t                 i, n;
    uint32_t               words, *a, *b;
    kvs_err_t              err;
    kvs_gram_t             g;
    kvs_gram_matcher_t     m;
    kvs_gram_masker_t      t, whole, mk, mw;
    kvs_gram_vocab_t      *gv;
    kvs_gram_warm_stats_t  st, sw;
    static const char      text[] = "{\"name\": \"ab-\", \"tags\": [\"red\"]}";

    (void) state;
    gv = tw_vocab();
    tgw_compile(&g, "{\"type\": \"object\", \"properties\": "
                "{\"name\": {\"type\": \"string\"}, \"tags\": "
                "{\"type\": \"array\", \"items\": {\"enum\": "
                "[\"red\", \"green\"]}}}, \"required\": [\"name\"]}");

    assert_int_equal(kvs_gram_masker_init_table(&t, gv, 256, &err), KVS_OK);
    assert_int_equal(kvs_gram_masker_warm_until(&t, &g, NULL, 0, 1, 192,
                                                &st, &err), KVS_OK);
    assert_true(st.late);
    assert_false(st.done);
    assert_int_equal(st.built, 0);
    assert_int_equal(st.keys, 0);
    assert_int_equal(t.n_built, 0);

    assert_int_equal(kvs_gram_masker_init_table(&whole, gv, 256, &err),
                     KVS_OK);
    assert_int_equal(kvs_gram_masker_warm_until(&whole, &g, NULL, 0,
                                                60000000000ULL, 192, &sw,
                                                &err), KVS_OK);
    assert_false(sw.late);
    assert_true(sw.built > 0);
    assert_int_equal(sw.lent, st.lent);

    words = (gv->n_tokens + 31) / 32;
    a = calloc(words, sizeof(uint32_t));
    b = calloc(words, sizeof(uint32_t));
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(kvs_gram_matcher_init(&m, &g, NULL, &err), KVS_OK);
    assert_int_equal(kvs_gram_masker_init(&mk, gv, &m, 16, &err), KVS_OK);
    assert_int_equal(kvs_gram_masker_init(&mw, gv, &m, 16, &err), KVS_OK);
    kvs_gram_masker_share(&mk, &t);
    kvs_gram_masker_share(&mw, &whole);

    n = sizeof(text) - 1;
    for (i = 0; i <= n; i++) {
        assert_int_equal(kvs_gram_mask(&mk, a, &err), KVS_OK);
        assert_int_equal(kvs_gram_mask(&mw, b, &err), KVS_OK);
        assert_memory_equal(a, b, words * sizeof(uint32_t));
        if (i < n) {
            assert_int_equal(kvs_gram_matcher_feed(&m, text + i, 1, &err),
                             KVS_OK);
        }
    }
    assert_true(kvs_gram_matcher_can_end(&m));
    /* the late table's masks built what the warm left */
    assert_true(t.n_built > 0);

    kvs_gram_masker_free(&mk);
    kvs_gram_masker_free(&mw);
    kvs_gram_matcher_free(&m);
    kvs_gram_masker_free(&t);
    kvs_gram_masker_free(&whole);
    kvs_gram_free(&g);
    kvs_gram_vocab_free(gv);
    free(a);
    free(b);
}


/* A grammar over the warm's size cap, and a table that is itself shared,
 * are left alone. */
static void
test_warm_refused(void **state)
{
    kvs_err_t              err;
    kvs_gram_t             g;
    kvs_gram_masker_t      t, o;
    kvs_gram_vocab_t      *gv;
    kvs_gram_warm_stats_t  st;

    (void) state;
    gv = tw_vocab();

    tgw_compile(&g, "{\"type\": \"string\", \"maxLength\": 40000}");
    assert_true(g.n_elems > (1u << 16));
    tw_table(&t, gv, &g, 64, 0, 48, &st);
    assert_int_equal(st.keys, 0);
    assert_int_equal(t.n_ind, 0);
    kvs_gram_masker_free(&t);
    kvs_gram_free(&g);

    tgw_compile(&g, "{\"type\": \"boolean\"}");
    assert_int_equal(kvs_gram_masker_init_table(&t, gv, 64, &err), KVS_OK);
    assert_int_equal(kvs_gram_masker_init_table(&o, gv, 64, &err), KVS_OK);
    t.ind_owner = &o;
    assert_int_equal(kvs_gram_masker_warm(&t, &g, NULL, 0, 48, &st, &err),
                     KVS_OK);
    assert_int_equal(st.keys, 0);
    assert_int_equal(o.n_ind, 0);
    t.ind_owner = NULL;
    kvs_gram_masker_free(&t);
    kvs_gram_masker_free(&o);
    kvs_gram_free(&g);

    kvs_gram_vocab_free(gv);
}


/* A chain of 20,000 rules, each "a" and a tail call to the next: every
 * rule's returns go back up the chain, which would cost its length
 * squared (~2 x 10^8 steps); the warm stops at its step bound, before
 * its key bound, and what it built is whole. */
static void
test_warm_chain(void **state)
{
    uint32_t               i, n, r0, r;
    kvs_err_t              err;
    kvs_gram_t             g;
    kvs_gram_seq_t         q;
    kvs_gram_masker_t      t;
    kvs_gram_vocab_t      *gv;
    kvs_gram_warm_stats_t  st;

    (void) state;
    gv = tw_vocab();
    n = 20000;

    memset(&q, 0, sizeof(q));
    kvs_gram_init(&g, NULL);
    assert_int_equal(kvs_gram_rule_new(&g, &r0, &err), KVS_OK);
    for (i = 1; i < n; i++) {
        assert_int_equal(kvs_gram_rule_new(&g, &r, &err), KVS_OK);
        assert_int_equal(r, r0 + i);
    }
    for (i = 0; i < n; i++) {
        kvs_gram_seq_reset(&q);
        kvs_gram_seq_lit(&q, "a", 1);
        if (i + 1 < n) {
            kvs_gram_seq_ref(&q, r0 + i + 1);
        }
        assert_int_equal(kvs_gram_add_alt(&g, r0 + i, &q, &err), KVS_OK);
    }
    kvs_gram_seq_free(&q);
    assert_int_equal(kvs_gram_finish(&g, r0, &err), KVS_OK);
    assert_true(g.n_elems <= (1u << 16));
    assert_true(tg_match(&g, "aaa", 3) == 0);

    tw_table(&t, gv, &g, 16384, 0, 16384, &st);
    print_message("chain: %u keys, %u entries\n", st.keys, st.entries);
    assert_false(st.done);
    assert_true(st.keys > 100);
    assert_true(st.keys < 16384);
    kvs_gram_masker_free(&t);

    kvs_gram_free(&g);
    kvs_gram_vocab_free(gv);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_warm_all),
        cmocka_unit_test(test_warm_late),
        cmocka_unit_test(test_warm_refused),
        cmocka_unit_test(test_warm_chain),
        cmocka_unit_test(test_warm_walks),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
