/*
 * test_gram_count: counted skipping (kvs_gram_memo_skip.c).  In the
 * walk of a bounded string's entry built from a source, a subtree of
 * the class automaton's bytes is decided by its nodes' character counts
 * (kvs_gram_tnode_t's chars) against the count the memo proves for the
 * node's state, without stepping it; the masks must stay those of the
 * full walk on the real stacks, and of the brute force.
 *
 * The vocabulary built here has tokens of every UTF-8 length (2-, 3-
 * and 4-byte characters, the first and last of each lead byte's range,
 * ED's and F4's narrow second bytes), mixed with ASCII, from 1 to 20
 * characters, tokens cut inside a character, and tokens that close the
 * string or hold an escape, so that a character count and a byte count
 * differ and the class automaton's every state is met.  Seeded walks
 * through maxLength 1 .. 16 and 30 strings, a minLength, a pattern
 * whose class refuses some characters (no count there: counted
 * skipping must give up), two bounded strings in an object and bounded
 * strings in an array compare at every step:
 *
 *   plain     cache_entries 0: every mask a full walk on the real stacks
 *   counted   entries with counted skipping tried wherever it may be
 *             (kvs_gram_memo_counting: any subtree, any source count)
 *   off       entries without it (kvs_gram_memo_counting 0)
 *
 * and the brute force of every token every third step.  Counted
 * skipping must have decided subtrees in the "counted" masker and none
 * in the "off" one.
 */

#include "kvs_test_gwalk.h"


static const char  *tc_schemas[] = {
    "{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 9}",
    "{\"type\": \"string\", \"maxLength\": 30}",
    "{\"type\": \"string\", \"pattern\": \"^[a-z\\u00e9\\u65e5]{0,10}$\"}",
    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", "
    "\"maxLength\": 6}, \"b\": {\"type\": \"string\", \"maxLength\": 12}}, "
    "\"required\": [\"a\", \"b\"], \"additionalProperties\": false}",
    "{\"type\": \"array\", \"items\": {\"type\": \"string\", "
    "\"maxLength\": 4}, "
    "\"maxItems\": 6}",
};

#define TC_NS  (sizeof(tc_schemas) / sizeof(tc_schemas[0]))
#define TC_MAX 2000

enum { TC_PLAIN, TC_COUNTED, TC_OFF, TC_MK };


static kvs_gram_vocab_t *
tc_vocab(void)
{
    static const char  *chars[] = {
        "a", "\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x98\x80", "\xc2\x80",
        "\xdf\xbf", "\xe0\xa0\x80", "\xed\x9f\xbf", "\xef\xbf\xbd",
        "\xf4\x8f\xbf\xbf", "\xf0\x90\x80\x80", " ", "z",
    };
    static const char  *tails[] = { "", "\"", "\", ", "\"}", "\\n", "\"]" };
    size_t              i, k, c, t, n, l, nc;
    uint8_t            *texts[TC_MAX], kinds[TC_MAX], buf[128];
    uint32_t            lens[TC_MAX];
    uint64_t            rng;

    n = 0;
    for (i = 1; i < 256; i++) {
        buf[0] = (uint8_t) i;
        tgw_add(texts, lens, kinds, &n, TC_MAX, buf, 1);
    }

    nc = sizeof(chars) / sizeof(chars[0]);
    rng = 12345;

    /* 1 .. 20 characters of one kind, then of mixed kinds; each also
     * cut inside its last character and with a tail that closes the
     * string or escapes */
    for (c = 1; c <= 20; c++) {
        for (k = 0; k < nc + 3; k++) {
            l = 0;
            for (i = 0; i < c; i++) {
                const char  *ch;

                ch = k < nc ? chars[k] : chars[tg_rand(&rng) % nc];
                memcpy(buf + l, ch, strlen(ch));
                l += strlen(ch);
            }
            tgw_add(texts, lens, kinds, &n, TC_MAX, buf, l);
            if (buf[l - 1] >= 0x80) {
                tgw_add(texts, lens, kinds, &n, TC_MAX, buf, l - 1);
            }
            /* a tail now and then: a subtree with one is not all of
             * the class automaton's bytes, and is walked */
            if (tg_rand(&rng) % 4 == 0) {
                t = 1 + tg_rand(&rng) % (sizeof(tails) / sizeof(tails[0])
                                         - 1);
                memcpy(buf + l, tails[t], strlen(tails[t]));
                tgw_add(texts, lens, kinds, &n, TC_MAX, buf, l + strlen(tails[t]));
            }
        }
    }

    return tgw_vocab(texts, lens, kinds, n);
}


/* An allowed token: one holding '"' one time in `close` or when nothing
 * else is, else one of at most 8 bytes that keeps writing. */
static uint32_t
tc_pick(const kvs_gram_vocab_t *gv, const uint32_t *bits, uint32_t *cand,
    uint64_t *rng)
{
    size_t    n, ch;
    uint32_t  id;

    for (id = 0, n = 0, ch = 0; id < gv->n_tokens; id++) {
        if (!(bits[id >> 5] >> (id & 31) & 1)) {
            continue;
        }
        if (gv->kind[id] == KVS_GRAM_TOK_TEXT
            && memchr(gv->bytes + gv->off[id], '"', gv->len[id]) == NULL)
        {
            if (gv->len[id] <= 8) {
                cand[n++] = id;
            }
        } else {
            cand[gv->n_tokens - 1 - ch++] = id;
        }
    }

    if (ch > 0 && (n == 0 || tg_rand(rng) % 6 == 0)) {
        return cand[gv->n_tokens - 1 - tg_rand(rng) % ch];
    }

    return n > 0 ? cand[tg_rand(rng) % n] : UINT32_MAX;
}


/* Walks through one schema; the subtrees counted skipping decided in
 * the "counted" maskers added to *counted, in the "off" ones to *off. */
static void
tc_walks(const kvs_gram_vocab_t *gv, const char *schema, size_t walks,
    uint64_t *counted, uint64_t *off)
{
    size_t              w, step;
    uint32_t            id;
    uint64_t            rng, st[2];
    kvs_err_t           err;
    kvs_gram_t          g;
    tgw_rig_t           r;
    static const uint32_t  entries[TC_MK] = { 0, 16, 16 };
    static const char  *names[TC_MK] = { "plain", "counted", "off" };

    tgw_alloc(&r, gv, TC_MK);

    if (tg_compile(&g, schema, 0, &err) != KVS_OK) {
        fail_msg("%s: %s", schema, err.msg);
    }

    for (w = 0; w < walks; w++) {
        rng = 991 + w * 7919 + strlen(schema);
        tgw_begin(&r, &g, gv, entries);
        /* built, not copied from the vocabulary's slices, which hold
         * most bounded strings' counts */
        r.mk[TC_COUNTED].noslices = 1;
        r.mk[TC_OFF].noslices = 1;
        kvs_gram_memo_counting(r.mk[TC_COUNTED].memo, 1, UINT32_MAX);
        kvs_gram_memo_counting(r.mk[TC_OFF].memo, 1, 0);

        for (step = 0; step < 60; step++) {
            tgw_step(&r, gv, names, schema, step);

            id = tc_pick(gv, r.bits[TC_PLAIN], r.cand, &rng);
            assert_true(id != UINT32_MAX);
            if (gv->kind[id] == KVS_GRAM_TOK_END) {
                break;
            }
            assert_int_equal(kvs_gram_accept_token(&r.m, gv, (int32_t) id,
                                                   &err), KVS_OK);
        }

        kvs_gram_memo_counted(r.mk[TC_COUNTED].memo, st);
        *counted += st[0];
        kvs_gram_memo_counted(r.mk[TC_OFF].memo, st);
        *off += st[0];

        tgw_end(&r);
    }

    kvs_gram_free(&g);
    tgw_free(&r);
}


static void
test_counted_walks(void **state)
{
    char               schema[96];
    size_t             i;
    uint64_t           counted, off, before;
    kvs_gram_vocab_t  *gv;

    (void) state;
    gv = tc_vocab();
    counted = 0;
    off = 0;

    for (i = 1; i <= 16; i++) {
        snprintf(schema, sizeof(schema),
                 "{\"type\": \"string\", \"maxLength\": %zu}", i);
        tc_walks(gv, schema, 3, &counted, &off);
    }

    for (i = 0; i < TC_NS; i++) {
        before = counted;
        tc_walks(gv, tc_schemas[i], 3, &counted, &off);
        print_message("%s: %llu subtrees counted\n", tc_schemas[i],
                      (unsigned long long) (counted - before));
    }

    print_message("%llu subtrees decided by their character counts\n",
                  (unsigned long long) counted);
    assert_true(counted > 100);
    assert_int_equal(off, 0);

    kvs_gram_vocab_free(gv);
}


/* The character counts the trie records: the bytes the class automaton
 * takes from its state 0, along every live path. */
static void
test_trie_chars(void **state)
{
    uint8_t                  q[256];
    uint16_t                 ch[256];
    uint32_t                 i, d;
    kvs_gram_vocab_t        *gv;
    const kvs_gram_tnode_t  *nd;

    (void) state;
    gv = tc_vocab();
    nd = gv->t_node;
    q[0] = 0;
    ch[0] = 0;

    for (i = 0; i < gv->n_nodes; i++) {
        d = nd[i].depth;
        assert_true(d >= 1 && d < 256);
        q[d] = kvs_gram_memo_class(q[d - 1], nd[i].byte);
        ch[d] = (uint16_t) (ch[d - 1] + (q[d - 1] == 0));
        if (q[d] != KVS_GRAM_CLS_DEAD) {
            assert_int_equal(nd[i].chars, ch[d]);
            assert_true(nd[i].chars >= 1 && nd[i].chars <= d);
        }
    }

    kvs_gram_vocab_free(gv);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_trie_chars),
        cmocka_unit_test(test_counted_walks),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
