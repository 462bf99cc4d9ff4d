/*
 * test_gram_slice: the vocabulary's slices (kvs_gram_slice.c), entries
 * precomputed once per vocabulary for the sub-grammars JSON grammars
 * share and found by any grammar's masker by the shape of what a key
 * reaches.  A mask that takes an entry from a slice must be the mask of
 * the full walk on the real stacks, and of the brute force.
 *
 * The vocabulary has every single byte and tokens that cross the parts
 * of each format (an email's dots, '@' and hyphens, a date-time's
 * separators and offsets, a uuid's groups), close a string and go on,
 * hold escapes, and spell JSON values.  Seeded walks through a free
 * string, each format, json_object, objects and arrays of them, anyOf,
 * and patterns whose keys look like a slice's at the top (a character
 * loop before the closing quote) but reach other rules, compare at
 * every step:
 *
 *   plain     cache_entries 0: every mask a full walk on the real stacks
 *   slices    the masker as it runs (slices on)
 *   off       noslices: every entry built by its own walk
 *
 * and the brute force every third step.  The "slices" maskers must have
 * taken entries from slices, the "off" ones none.  Also: a key's shape
 * is the same in two grammars that spell a string alike and differs for
 * a pattern's; a slice is not found under smaller caps than it was
 * built with.
 */

#include "kvs_test_gwalk.h"


static const char  *ts_schemas[] = {
    NULL,                                             /* json_object */
    "{\"type\": \"string\"}",
    "{\"type\": \"string\", \"format\": \"email\"}",
    "{\"type\": \"string\", \"format\": \"date-time\"}",
    "{\"type\": \"string\", \"format\": \"date\"}",
    "{\"type\": \"string\", \"format\": \"time\"}",
    "{\"type\": \"string\", \"format\": \"uuid\"}",
    "{\"type\": \"string\", \"pattern\": \"^[a-z]*$\"}",
    "{\"type\": \"string\", \"pattern\": \"^[a-z.]+@[a-z]+$\"}",
    "{\"type\": \"string\", \"pattern\": \"^[ -~]*$\"}",
    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\"}, "
    "\"m\": {\"type\": \"string\", \"format\": \"email\"}, "
    "\"t\": {\"type\": \"array\", \"items\": {\"type\": \"string\", "
    "\"format\": \"date-time\"}}}, \"required\": [\"a\", \"m\", \"t\"], "
    "\"additionalProperties\": false}",
    "{\"anyOf\": [{\"type\": \"string\", \"format\": \"email\"}, "
    "{\"type\": \"integer\"}, {\"type\": \"string\", \"pattern\": "
    "\"^[a-f0-9-]+$\"}]}",
    "{\"type\": \"array\", \"items\": {\"type\": \"object\"}}",
    "{\"type\": \"string\", \"maxLength\": 5}",
    "{\"type\": \"string\", \"maxLength\": 40}",
    "{\"type\": \"string\", \"minLength\": 1, \"maxLength\": 30}",
    "{\"type\": \"string\", \"minLength\": 3, \"maxLength\": 300}",
    "{\"type\": \"string\", \"pattern\": \"^[a-z]{2,30}$\"}",
    "{\"type\": \"object\", \"properties\": {\"n\": {\"type\": "
    "\"string\", \"maxLength\": 20}, \"d\": {\"type\": \"string\", "
    "\"minLength\": 1, \"maxLength\": 500}}, \"required\": [\"n\", "
    "\"d\"], \"additionalProperties\": false}",
};

#define TS_NS  (sizeof(ts_schemas) / sizeof(ts_schemas[0]))

enum { TS_PLAIN, TS_SLICES, TS_OFF, TS_MK };


/* The words; the first, 45 bytes, only in ts_vocab_long(), so that a
 * string's lower tier (rep_low 8 .. max_len) holds the references'
 * lower counts (39, 40). */
static const char  *ts_words[] = {
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "a", "ab", "abc", "hello", " world", "A", "Zz", "x-y", "a.b", ".",
    "@", "@ex", "ex.", ".com", "-x", "x-", "a@b", "@a.b\"", "b.c\"",
    "\"", "\",", "\"}", "\"]", "\", \"", "\\", "\\n", "\\\"", "\\u00",
    "e9", "\\u00e9", "\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac",
    "2024", "-01", "-02-", "28", "31T", "T0", "03:", ":04", ":00",
    "05.", ".6", "78Z", "Z\"", "+01", ":30\"", "-05", "12", "0",
    "abcd", "ef-", "-4567", "89ef", "ABCD", "-0123", "0123456789ef",
    "{", "}", "[", "]", "{\"", "\":", "\": ", ", ", ",", "[1", "1,",
    "null", "true", "false", "-2.5", "e+3", "E-", "{}", "[]", "\"a\"",
    "\"x", "tr", "ue", "nu", "ll}", "1}", "\"}}", "\"]}", " \"",
};

#define TS_NW  (sizeof(ts_words) / sizeof(ts_words[0]))


static kvs_gram_vocab_t *
ts_vocab(void)
{
    return tgw_vocab_words(ts_words + 1, TS_NW - 1);
}


static kvs_gram_vocab_t *
ts_vocab_long(void)
{
    return tgw_vocab_words(ts_words, TS_NW);
}


/* Walks through one schema; the entries the "slices" maskers took from
 * slices added to *taken, the "off" ones' to *off. */
static void
ts_walks(const kvs_gram_vocab_t *gv, const char *schema, size_t walks,
    uint64_t *taken, uint64_t *off)
{
    size_t              w;
    uint64_t            rng;
    kvs_gram_t          g;
    tgw_rig_t           r;
    static const uint32_t  entries[TS_MK] = { 0, 16, 16 };
    static const char  *names[TS_MK] = { "plain", "slices", "off" };

    tgw_alloc(&r, gv, TS_MK);
    tgw_compile(&g, schema);

    for (w = 0; w < walks; w++) {
        rng = 4241 + w * 7919 + (schema != NULL ? strlen(schema) : 0);
        tgw_begin(&r, &g, gv, entries);
        r.mk[TS_OFF].noslices = 1;

        tgw_run(&r, gv, names, schema != NULL ? schema : "json_object", 50, &rng);

        *taken += r.mk[TS_SLICES].ind_slices;
        *off += r.mk[TS_OFF].ind_slices;

        tgw_end(&r);
    }

    kvs_gram_free(&g);
    tgw_free(&r);
}


static void
test_slice_walks(void **state)
{
    size_t             i;
    uint64_t           taken, off, before;
    kvs_gram_vocab_t  *gv;

    (void) state;
    gv = ts_vocab();
    print_message("%u slices\n", kvs_gram_vocab_n_slices(gv));
    assert_true(kvs_gram_vocab_n_slices(gv) > 8);

    taken = 0;
    off = 0;
    for (i = 0; i < TS_NS; i++) {
        before = taken;
        ts_walks(gv, ts_schemas[i], 6, &taken, &off);
        print_message("%s: %llu entries from slices\n",
                      ts_schemas[i] != NULL ? ts_schemas[i] : "json_object",
                      (unsigned long long) (taken - before));
    }

    assert_true(taken > 50);
    assert_int_equal(off, 0);

    kvs_gram_vocab_free(gv);
}


/* The key of the top stack after text (its top two positions). */
static void
ts_key(const kvs_gram_t *g, const char *text, uint32_t *key)
{
    uint32_t             id, k;
    kvs_err_t            err;
    kvs_gram_matcher_t   m;
    kvs_gram_level_t    *lv;

    assert_int_equal(kvs_gram_matcher_init(&m, g, NULL, &err), KVS_OK);
    assert_int_equal(kvs_gram_matcher_feed(&m, text, strlen(text), &err),
                     KVS_OK);
    lv = &m.lv[m.n_lv - 1];
    assert_true(lv->n_front >= 1);
    id = m.front[lv->front];
    for (k = 0; k < KVS_GRAM_CUT; k++) {
        key[k] = id != KVS_GRAM_NIL ? m.nodes[id].pos : KVS_GRAM_NIL;
        id = id != KVS_GRAM_NIL ? m.nodes[id].parent : KVS_GRAM_NIL;
    }
    kvs_gram_matcher_free(&m);
}


static void
test_shapes(void **state)
{
    uint32_t             ka[KVS_GRAM_CUT], kb[KVS_GRAM_CUT];
    uint32_t             kc[KVS_GRAM_CUT], na, nb, nc;
    uint32_t             sa[2048], sb[2048], sc[2048];
    kvs_gram_t           ga, gb, gc;
    kvs_gram_vocab_t    *gv;
    kvs_gram_mlimits_t   lim;
    kvs_gram_slice_ent_t  se;

    (void) state;
    gv = ts_vocab();

    tgw_compile(&ga, "{\"type\": \"string\"}");
    tgw_compile(&gb, "{\"type\": \"object\", \"properties\": {\"a\": "
                    "{\"type\": \"integer\"}, \"b\": {\"type\": "
                    "\"string\"}}, \"required\": [\"a\", \"b\"]}");
    tgw_compile(&gc, "{\"type\": \"string\", \"pattern\": \"^[a-z]*$\"}");

    ts_key(&ga, "\"ab", ka);
    ts_key(&gb, "{\"a\": 1, \"b\": \"ab", kb);
    ts_key(&gc, "\"ab", kc);

    /* the same string at other positions of another grammar: one shape */
    assert_int_equal(kvs_gram_shape(&ga, ka, sa, 2048, &na), KVS_OK);
    assert_int_equal(kvs_gram_shape(&gb, kb, sb, 2048, &nb), KVS_OK);
    assert_true(ka[0] != kb[0] || ka[1] != kb[1]);
    assert_int_equal(na, nb);
    assert_memory_equal(sa, sb, na * sizeof(uint32_t));

    /* a pattern's character class: another shape */
    assert_int_equal(kvs_gram_shape(&gc, kc, sc, 2048, &nc), KVS_OK);
    assert_true(nc != na || memcmp(sa, sc, na * sizeof(uint32_t)) != 0);

    /* a shape too long for the buffer: none */
    assert_int_equal(kvs_gram_shape(&ga, ka, sa, 3, &na), KVS_ETOOLONG);

    /* the free string's slice, under the default caps; not under caps
     * smaller than the references were built with */
    memset(&lim, 0, sizeof(lim));
    lim.max_nodes = 1u << 22;
    lim.max_front = 4096;
    assert_int_equal(kvs_gram_slice_find(gv, &gb, kb, &lim, &se, NULL), 1);
    assert_int_equal(kvs_gram_slice_find(gv, &gc, kc, &lim, &se, NULL), 0);
    lim.max_nodes = 1000;
    assert_int_equal(kvs_gram_slice_find(gv, &gb, kb, &lim, &se, NULL), 0);

    kvs_gram_free(&ga);
    kvs_gram_free(&gb);
    kvs_gram_free(&gc);
    kvs_gram_vocab_free(gv);
}


/*
 * Bounded strings: the member of a repetition with c copies left reaches
 * the same sub-grammar in any grammar whose string has at least c copies
 * left there, so a slice built from the references' maxLength 40 string
 * serves another grammar's maxLength 20 property at the same count, and
 * not at another count nor for a pattern's counted class.  Counts below
 * the test vocabulary's lower tier (rep_low 8) are keys as they are.
 */
static void
test_counted_shapes(void **state)
{
    uint32_t             ka[KVS_GRAM_CUT], kb[KVS_GRAM_CUT];
    uint32_t             kc[KVS_GRAM_CUT], kd[KVS_GRAM_CUT], na, nb, nc;
    uint32_t            *sa, *sb, *sc;
    kvs_gram_t           ga, gb, gc;
    kvs_gram_vocab_t    *gv;
    kvs_gram_mlimits_t   lim;
    kvs_gram_slice_ent_t  se;

    (void) state;
    gv = ts_vocab();
    assert_int_equal(gv->rep_low, 8);

    sa = malloc(3 * 8192 * sizeof(uint32_t));
    assert_non_null(sa);
    sb = sa + 8192;
    sc = sb + 8192;

    tgw_compile(&ga, "{\"type\": \"string\", \"maxLength\": 40}");
    tgw_compile(&gb, "{\"type\": \"object\", \"properties\": {\"a\": "
                    "{\"type\": \"integer\"}, \"n\": {\"type\": "
                    "\"string\", \"maxLength\": 20}}, \"required\": "
                    "[\"a\", \"n\"]}");
    tgw_compile(&gc, "{\"type\": \"string\", \"pattern\": "
                    "\"^[a-z]{2,40}$\"}");

    /* 5 copies left in each */
    ts_key(&ga, "\"abcdefghijklmnopqrstuvwxyzabcdefghi", ka);
    ts_key(&gb, "{\"a\": 1, \"n\": \"abcdefghijklmno", kb);
    ts_key(&gc, "\"abcdefghijklmnopqrstuvwxyzabcdefghi", kc);
    ts_key(&ga, "\"abcdefghijklmnopqrstuvwxyzabcdefgh", kd);
    assert_int_equal(kvs_gram_rep_count(&ga, ka[0]), 5);
    assert_int_equal(kvs_gram_rep_count(&gb, kb[0]), 5);
    assert_int_equal(kvs_gram_rep_count(&ga, kd[0]), 6);

    assert_int_equal(kvs_gram_shape(&ga, ka, sa, 8192, &na), KVS_OK);
    assert_int_equal(kvs_gram_shape(&gb, kb, sb, 8192, &nb), KVS_OK);
    assert_int_equal(na, nb);
    assert_memory_equal(sa, sb, na * sizeof(uint32_t));

    /* one copy more: another shape; a pattern's class: another */
    assert_int_equal(kvs_gram_shape(&ga, kd, sc, 8192, &nc), KVS_OK);
    assert_true(nc != na || memcmp(sa, sc, na * sizeof(uint32_t)) != 0);
    assert_int_equal(kvs_gram_shape(&gc, kc, sc, 8192, &nc), KVS_OK);
    assert_true(nc != na || memcmp(sa, sc, na * sizeof(uint32_t)) != 0);

    memset(&lim, 0, sizeof(lim));
    lim.max_nodes = 1u << 22;
    lim.max_front = 4096;
    assert_int_equal(kvs_gram_slice_find(gv, &gb, kb, &lim, &se, NULL), 1);
    assert_int_equal(kvs_gram_slice_find(gv, &ga, kd, &lim, &se, NULL), 1);
    assert_int_equal(kvs_gram_slice_find(gv, &gc, kc, &lim, &se, NULL), 0);

    free(sa);
    kvs_gram_free(&ga);
    kvs_gram_free(&gb);
    kvs_gram_free(&gc);
    kvs_gram_vocab_free(gv);
}


/*
 * An escape in a bounded string: after the backslash each escape
 * alternative is a stack of its own (15), each a new key.  At a count in
 * the lower tier (rep_low .. max_len, named by the member at rep_low)
 * and above the upper one (named by the member at max_len + 1), every
 * such key must come from a slice (the references' bounded strings
 * hold an escape at both tiers), in a grammar whose strings have other
 * bounds, with and without a mandatory first character, and the mask
 * must be the full walk's and the brute force's.  Their entries are
 * narrow, so they take the slices' lists of nonzero words too (made
 * once, lent), which must be what kvs_gram_sparse makes of the bits.
 */
static void
test_escapes(void **state)
{
    static const char  *texts[] = {
        "{\"n\": \"ab\\",                       /* 18 left: lower */
        "{\"n\": \"abcdefghijkl\\",             /* 8: rep_low's own */
        "{\"n\": \"ab\", \"d\": \"abcd\\",       /* 496 left: upper */
    };
    size_t              i;
    uint32_t            key[KVS_GRAM_CUT], nq, *q;
    uint64_t            misses, slices, sparse;
    kvs_err_t           err;
    kvs_gram_t          g;
    tgw_rig_t           r;
    kvs_gram_vocab_t   *gv;
    kvs_gram_slice_ent_t  se;
    kvs_gram_shbuf_t   *sb;
    static const uint32_t  entries[2] = { 0, 16 };
    static const char  *names[2] = { "plain", "slices" };

    (void) state;
    gv = ts_vocab_long();
    sb = NULL;
    assert_int_equal(gv->max_len, 45);         /* the upper tier 46 */
    assert_int_equal(gv->rep_low, 8);

    tgw_alloc(&r, gv, 2);
    tgw_compile(&g, "{\"type\": \"object\", \"properties\": {\"n\": "
                    "{\"type\": \"string\", \"minLength\": 1, "
                    "\"maxLength\": 20}, \"d\": {\"type\": \"string\", "
                    "\"maxLength\": 500}}, \"required\": [\"n\", \"d\"], "
                    "\"additionalProperties\": false}");

    for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        tgw_begin(&r, &g, gv, entries);
        assert_int_equal(kvs_gram_matcher_feed(&r.m, texts[i],
                                               strlen(texts[i]), &err),
                         KVS_OK);
        assert_true(r.m.lv[r.m.n_lv - 1].n_front >= 15);

        misses = r.mk[1].ind_misses;
        slices = r.mk[1].ind_slices;
        sparse = r.mk[1].ind_sparse;
        tgw_step(&r, gv, names, texts[i], 0);
        assert_true(r.mk[1].ind_sparse > sparse);

        print_message("%s: %llu keys, %llu from slices\n", texts[i],
                      (unsigned long long) (r.mk[1].ind_misses - misses),
                      (unsigned long long) (r.mk[1].ind_slices - slices));
        assert_true(r.mk[1].ind_misses - misses >= 15);
        assert_int_equal(r.mk[1].ind_slices - slices,
                         r.mk[1].ind_misses - misses);

        /* at rep_low's own count the top stack's positions are its key
         * as they are: its slice's list is its bits' */
        if (i == 1) {
            ts_key(&g, texts[i], key);
            assert_int_equal(kvs_gram_slice_find(gv, &g, key, &r.m.lim,
                                                 &se, &sb), 1);
            assert_int_equal(kvs_gram_sparse(se.bits, r.words, &q, &nq),
                             KVS_OK);
            assert_int_equal(se.sparse == NULL, q == NULL);
            if (q != NULL) {
                assert_int_equal(se.n_sparse, nq);
                assert_memory_equal(se.sparse, q, (size_t) nq * 2
                                           * sizeof(uint32_t));
            }
            free(q);
        }
        tgw_end(&r);
    }

    free(sb);
    kvs_gram_free(&g);
    tgw_free(&r);
    kvs_gram_vocab_free(gv);
}


/*
 * json_object's values in the engine's layout: a text unlike the
 * references (other keys, numbers and nesting) fed a byte at a time,
 * each mask equal to the full walk's (and the brute force's every third
 * byte), and every key it meets taken from a slice: each kind of value
 * ends in each place a value returns to in the references.  With the
 * references in the compact layout no key is.
 */
static void
test_json_values(void **state)
{
    size_t             i, len;
    kvs_err_t          err;
    kvs_gram_t         g;
    tgw_rig_t          r;
    kvs_gram_vocab_t  *gv;
    static const uint32_t  entries[2] = { 0, 16 };
    static const char  *names[2] = { "plain", "slices" };
    static const char   text[] =
        "{\"id\": 7, \"tags\": [\"x\", 3.25, {\"k\": null, \"v\": "
        "[false, -1e2, {}]}, [[]], 0], \"meta\": {\"ok\": true, "
        "\"n\": 0, \"s\": \"q\\n\", \"e\": 4E+1, \"t\": [7]}, "
        "\"z\": -0.5}";

    (void) state;
    gv = ts_vocab();
    tgw_alloc(&r, gv, 2);
    tgw_compile(&g, NULL);
    tgw_begin(&r, &g, gv, entries);

    len = strlen(text);
    for (i = 0; i <= len; i++) {
        tgw_step(&r, gv, names, text, i);
        if (i < len) {
            assert_int_equal(kvs_gram_matcher_byte(&r.m, (uint8_t) text[i],
                                                   &err), KVS_OK);
        }
    }
    assert_true(kvs_gram_matcher_can_end(&r.m));

    print_message("json_object: %llu keys, %llu from slices\n",
                  (unsigned long long) r.mk[1].ind_misses,
                  (unsigned long long) r.mk[1].ind_slices);
    assert_true(r.mk[1].ind_misses > 40);
    assert_int_equal(r.mk[1].ind_slices, r.mk[1].ind_misses);

    tgw_end(&r);
    kvs_gram_free(&g);
    tgw_free(&r);
    kvs_gram_vocab_free(gv);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_counted_shapes),
        cmocka_unit_test(test_slice_walks),
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_json_values),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
