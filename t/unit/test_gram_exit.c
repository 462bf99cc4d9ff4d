/*
 * test_gram_exit: a free string's closing tokens decided by what follows
 * their quote (kvs_gram_exit.c).
 *
 * The vocabulary has every single byte and tokens that close a string
 * after characters of every UTF-8 length and go on (into a separator, a
 * key, a bracket, another string, or into bytes no grammar takes after
 * a string), tokens that only look like that (an escape before the
 * quote, a control character, a character cut short before it, an
 * escaped quote then a real one) and tokens that begin with the quote.
 * Seeded walks through free strings in every place a value can be
 * (json_object, object members required and optional, arrays, anyOf,
 * minLength), bounded strings (a fill of kept verdicts,
 * kvs_gram_verdict.c, takes them too) and strings where the exits do
 * not apply (patterns, formats) compare at every step
 *
 *   plain    cache_entries 0: every mask a full walk on the real stacks
 *   exits    the masker as it runs
 *   off      noexits: every closing token checked on the real stacks
 *
 * and the brute force every third step; the "exits" maskers must have
 * decided masks so, the "off" ones none.  Under tight caps (the node cap
 * just above and below what the check's guard asks, a frontier cap
 * under KVS_GRAM_LONG_STEP) fresh maskers of both kinds must agree,
 * and give the full walk's mask where the caps leave a token's path its
 * room.  And the groups: a token is grouped by its tail
 * exactly when it is whole characters, then a quote.
 */

#include "kvs_test_gwalk.h"


/* kvs_gram_mask_impl.h's KVS_GRAM_LONG_STEP, internal to src/grammar:
 * what one byte of a string's character makes at most, per stack */
#define TE_STEP  32

static const char  *te_schemas[] = {
    NULL,                                             /* json_object */
    "{\"type\": \"string\"}",
    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\"}, "
    "\"b\": {\"type\": \"string\"}, \"n\": {\"type\": \"integer\"}}, "
    "\"required\": [\"a\"], \"additionalProperties\": false}",
    "{\"type\": \"array\", \"items\": {\"type\": \"string\"}}",
    "{\"type\": \"object\", \"additionalProperties\": {\"type\": "
    "\"string\"}}",
    "{\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"integer\"}, "
    "{\"type\": \"array\", \"items\": {\"type\": \"string\"}}]}",
    "{\"type\": \"string\", \"minLength\": 2}",
    "{\"type\": \"string\", \"maxLength\": 6}",
    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", "
    "\"maxLength\": 3}, \"b\": {\"type\": \"string\", \"minLength\": 1, "
    "\"maxLength\": 30}, \"c\": {\"type\": \"string\", \"maxLength\": 300}}, "
    "\"required\": [\"a\", \"b\", \"c\"], \"additionalProperties\": false}",
    "{\"type\": \"string\", \"pattern\": \"^[a-z]*$\"}",
    "{\"type\": \"object\", \"properties\": {\"e\": {\"type\": \"string\", "
    "\"format\": \"email\"}, \"s\": {\"type\": \"array\", \"items\": "
    "{\"type\": \"object\", \"properties\": {\"t\": {\"type\": "
    "\"string\"}}, \"required\": [\"t\"]}}}, \"required\": [\"e\", "
    "\"s\"], \"additionalProperties\": false}",
};

#define TE_NS  (sizeof(te_schemas) / sizeof(te_schemas[0]))

enum { TE_PLAIN, TE_EXITS, TE_OFF, TE_MK };


static const char  *te_words[] = {
    "a", "ab", "abc", " b", "a\"", "ab\",", "x\", \"", "a\"}", "ab\"]",
    "a\"}}", "a\"]}", "a\"b", "a\";", "a\")", "a\"\n", "a\":", "a\": ",
    "a\": \"", "a\":{", "a\"}]", "a\"},", "a\"}, {\"",
    "\xc3\xa9\"", "\xc3\xa9\",", "\xe6\x97\xa5\xe6\x9c\xac\"}",
    "\xf0\x9f\x98\x80\"]", "\xc3\"", "\xe6\x97\",", "\x01\",",
    "\\n\",", "\\\"\",", "a\\\"b\"}", "\\\"", "\\n", "\\u00e9",
    "\"", "\",", "\", \"", "\"}", "\"]", "\"}}", "\"]}", "\"\n", "\":",
    "\": ", "\": \"", "\"a\"", "\"a", "\"}, {\"", "\"],", "a\"a\"",
    "{\"", "}", "]", "[", "[\"", ", ", ",", "{", "12", "1,", "null",
    "@ex.com\"", "a.b\"}",
};

#define TE_NW  (sizeof(te_words) / sizeof(te_words[0]))


/* Walks through one schema under three maskers; the masks the "exits"
 * ones decided by tails added to *ex (those at a kept verdict's state
 * to *kept), the "off" ones' to *off. */
static void
te_walks(const kvs_gram_vocab_t *gv, const char *schema, size_t walks,
    uint64_t *ex, uint64_t *kept, uint64_t *off)
{
    size_t              w;
    uint64_t            rng;
    kvs_gram_t          g;
    tgw_rig_t           r;
    static const uint32_t  entries[TE_MK] = { 0, 16, 16 };
    static const char  *names[TE_MK] = { "plain", "exits", "off" };

    tgw_alloc(&r, gv, TE_MK);
    tgw_compile(&g, schema);

    for (w = 0; w < walks; w++) {
        rng = 977 + w * 7919 + (schema != NULL ? strlen(schema) : 0);
        tgw_begin(&r, &g, gv, entries);
        r.mk[TE_OFF].noexits = 1;

        tgw_run(&r, gv, names, schema != NULL ? schema : "json_object", 60, &rng);

        *ex += r.mk[TE_EXITS].exits;
        *kept += r.mk[TE_EXITS].exits_kept;
        *off += r.mk[TE_OFF].exits + r.mk[TE_OFF].exits_kept;

        tgw_end(&r);
    }

    kvs_gram_free(&g);
    tgw_free(&r);
}


static void
test_exit_walks(void **state)
{
    size_t             i;
    uint64_t           ex, off, kept, before, kbefore;
    kvs_gram_vocab_t  *gv;

    (void) state;
    gv = tgw_vocab_words(te_words, TE_NW);
    print_message("%u tails\n", kvs_gram_vocab_n_exits(gv));

    ex = 0;
    off = 0;
    kept = 0;
    for (i = 0; i < TE_NS; i++) {
        before = ex;
        kbefore = kept;
        te_walks(gv, te_schemas[i], 8, &ex, &kept, &off);
        print_message("%s: %llu masks decided by tails, %llu at a kept "
                      "verdict's state\n",
                      te_schemas[i] != NULL ? te_schemas[i] : "json_object",
                      (unsigned long long) (ex - before),
                      (unsigned long long) (kept - kbefore));
        if (i != TE_NS - 2) {
            /* a string whose closing tokens the exits decide in each
             * but the pattern's */
            assert_true(ex > before);
        }
        if (te_schemas[i] != NULL && strstr(te_schemas[i], "maxLength")) {
            /* a bounded string's later characters: kept verdicts, and
             * the longer closing tokens by their tails */
            assert_true(kept > kbefore);
        }
    }

    assert_int_equal(off, 0);

    kvs_gram_vocab_free(gv);
}


/* The mask of a fresh masker (noexits or not) at the matcher's state
 * into bits; its return code. */
static int
te_fresh(const kvs_gram_vocab_t *gv, kvs_gram_matcher_t *m, int noexits,
    uint32_t *bits, uint64_t *exits)
{
    int                rc;
    kvs_err_t          err;
    kvs_gram_masker_t  mk;

    assert_int_equal(kvs_gram_masker_init(&mk, gv, m, 16, &err), KVS_OK);
    mk.noexits = noexits;
    rc = kvs_gram_mask(&mk, bits, &err);
    *exits += mk.exits;
    kvs_gram_masker_free(&mk);

    return rc;
}


/* Inside strings of json_object and of an object's members, the node
 * cap a few nodes past the real ones and around the guard (n_nodes +
 * max_len * KVS_GRAM_LONG_STEP, plus 0 .. 40), and the frontier cap
 * under and at KVS_GRAM_LONG_STEP:
 * fresh maskers with and without exits give the full walk's mask. */
static void
test_exit_caps(void **state)
{
    static const char  *pre[] = {
        "{\"ab\": \"x", "{\"ab\": [\"", "{\"ab\": {\"c", "{\"a\": \"ab",
        "{\"a\": \"x", "{\"a\": \"x\", \"b\": \"ab",
    };
    static const int    json[] = { 1, 1, 1, 0, 2, 2 };
    static const uint32_t  extra[] = { 0, 1, 2, 3, 5, 8, 13, 40 };
    int                 ra, rb, rc;
    size_t              i, k;
    uint32_t            words, *x, *y, *z;
    uint64_t            dec, off, before;
    kvs_err_t           err;
    kvs_gram_t          g;
    kvs_gram_matcher_t  m;
    kvs_gram_masker_t   plain;
    kvs_gram_mlimits_t  keep;
    kvs_gram_vocab_t   *gv;

    (void) state;
    gv = tgw_vocab_words(te_words, TE_NW);
    words = (gv->n_tokens + 31) / 32;
    x = malloc(words * sizeof(uint32_t));
    y = malloc(words * sizeof(uint32_t));
    z = malloc(words * sizeof(uint32_t));
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(z);
    dec = 0;
    off = 0;

    for (i = 0; i < sizeof(pre) / sizeof(pre[0]); i++) {
        tgw_compile(&g, json[i] == 1 ? NULL
                        : te_schemas[json[i] == 0 ? 2 : TE_NS - 3]);
        assert_int_equal(kvs_gram_matcher_init(&m, &g, NULL, &err), KVS_OK);
        assert_int_equal(kvs_gram_masker_init(&plain, gv, &m, 0, &err),
                         KVS_OK);
        assert_int_equal(kvs_gram_matcher_feed(&m, pre[i], strlen(pre[i]),
                                               &err), KVS_OK);
        keep = m.lim;

        for (k = 0; k < 2 * sizeof(extra) / sizeof(extra[0]) + 2; k++) {
            m.lim = keep;
            if (k < 2 * sizeof(extra) / sizeof(extra[0])) {
                /* even k: a few nodes past the real ones, where a
                 * token's path may meet the cap; odd: around the
                 * guard */
                m.lim.max_nodes = m.n_nodes + extra[k / 2]
                                  + (k % 2) * gv->max_len * TE_STEP;
            } else {
                m.lim.max_front = k % 2 == 0 ? TE_STEP - 1
                                             : TE_STEP;
            }

            before = dec;
            ra = kvs_gram_mask(&plain, x, &err);
            rb = te_fresh(gv, &m, 0, y, &dec);
            rc = te_fresh(gv, &m, 1, z, &off);
            assert_int_equal(rc, rb);
            if (rc == KVS_OK && memcmp(z, y, words * sizeof(uint32_t)) != 0)
            {
                tgw_first_diff(gv, z, y, "exits under caps", pre[i], k);
            }
            /* a fresh masker's entries, built on cut stacks of their
             * own, may take tokens whose real paths need a few more
             * nodes than the tightest caps leave (the full walk refuses
             * those): the full walk is compared where the cap is that
             * of the guard or looser */
            if (k % 2 == 1) {
                assert_int_equal(ra, rb);
                if (ra == KVS_OK
                    && memcmp(x, y, words * sizeof(uint32_t)) != 0)
                {
                    tgw_first_diff(gv, x, y, "exits under caps (full "
                                   "walk)", pre[i], k);
                }
            }
            if (k == 2 * sizeof(extra) / sizeof(extra[0])) {
                assert_int_equal(dec, before);  /* a frontier cap under 32 */
            }
        }

        m.lim = keep;
        kvs_gram_masker_free(&plain);
        kvs_gram_matcher_free(&m);
        kvs_gram_free(&g);
    }

    /* decided so where the guard allowed (the most intern calls of a
     * tail's path: some of the caps tried are under it, some over),
     * never by the noexits maskers */
    print_message("masks decided by tails under caps: %llu\n",
                  (unsigned long long) dec);
    assert_true(dec > 0);
    assert_int_equal(off, 0);

    free(x);
    free(y);
    free(z);
    kvs_gram_vocab_free(gv);
}


/* Which tokens are grouped: whole characters and then a quote. */
static void
test_exit_groups(void **state)
{
    static const struct {
        const char  *w;
        int          grouped;
    } cases[] = {
        { "a\"", 1 }, { "ab\",", 1 }, { "\xc3\xa9\",", 1 },
        { "\xe6\x97\xa5\xe6\x9c\xac\"}", 1 }, { "\xf0\x9f\x98\x80\"]", 1 },
        { "\"", 1 }, { "\", \"", 1 }, { "\"a\"", 1 }, { "a\"a\"", 1 },
        { "\xc3\"", 0 }, { "\xe6\x97\",", 0 }, { "\x01\",", 0 },
        { "\\n\",", 0 }, { "\\\"\",", 0 }, { "a\\\"b\"}", 0 },
        { "{\"", 1 }, { "abc", 0 }, { "12", 0 }, { "\\n", 0 },
    };
    size_t             i;
    uint32_t           id, found;
    kvs_gram_vocab_t  *gv;
    const uint32_t    *bits;

    (void) state;
    gv = tgw_vocab_words(te_words, TE_NW);
    assert_non_null(gv->exits);
    assert_true(kvs_gram_vocab_n_exits(gv) > 10);
    bits = kvs_gram_exits_bits(gv);

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        found = UINT32_MAX;
        for (id = 0; id < gv->n_tokens; id++) {
            if (gv->len[id] == strlen(cases[i].w)
                && memcmp(gv->bytes + gv->off[id], cases[i].w, gv->len[id])
                   == 0)
            {
                found = id;
            }
        }
        assert_true(found != UINT32_MAX);
        if ((int) (bits[found >> 5] >> (found & 31) & 1) != cases[i].grouped)
        {
            fail_msg("'%s' %s", cases[i].w,
                     cases[i].grouped ? "not grouped" : "grouped");
        }
    }

    kvs_gram_vocab_free(gv);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exit_groups),
        cmocka_unit_test(test_exit_walks),
        cmocka_unit_test(test_exit_caps),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
