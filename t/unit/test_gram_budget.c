/*
 * test_gram_budget: the masker's work budget (kvs_gram_masker_budget) at
 * the engine's bound (kvs_gram_work_budget: KVS_GRAM_WORK_WALKS walks of
 * a trie of at least KVS_GRAM_WORK_MIN_NODES nodes a mask), on a real
 * vocabulary (the GPT-2 fixture; skipped when absent).
 *
 * An anyOf of 32 strings of another minLength each keeps 32 free strings
 * open after its quote: that mask passes the budget and fails with
 * KVS_ETOOLONG; a try again is bounded alike (only the whole entries a
 * cut mask built are kept: no step does more than the budget), and the
 * shared table it leaves masks as a masker with no caches does.  Wide schemas a client may
 * legitimately send (200 optional properties, an anyOf of 100 objects,
 * branches whose free strings share a top) stay under the budget at every
 * step of random walks and mask exactly as that reference does.
 */

#include "kvs_test_gram.h"


/* the schemas, built here: n branches or properties */
static char *
tb_schema(int kind, int n)
{
    int     i;
    char   *s;
    size_t  cap;

    cap = (size_t) n * 128 + 64;
    s = malloc(cap);
    assert_non_null(s);

    if (kind == 0) {                  /* anyOf of strings, minLength i */
        strcpy(s, "{\"anyOf\":[");
        for (i = 0; i < n; i++) {
            sprintf(s + strlen(s), "%s{\"type\":\"string\","
                    "\"minLength\":%d}", i ? "," : "", i);
        }
        strcat(s, "]}");

    } else if (kind == 1) {           /* optional properties */
        strcpy(s, "{\"type\":\"object\",\"properties\":{");
        for (i = 0; i < n; i++) {
            sprintf(s + strlen(s), "%s\"p%d\":{\"type\":\"string\"}",
                    i ? "," : "", i);
        }
        strcat(s, "}}");

    } else if (kind == 2) {           /* anyOf of objects, distinct keys */
        strcpy(s, "{\"anyOf\":[");
        for (i = 0; i < n; i++) {
            sprintf(s + strlen(s), "%s{\"type\":\"object\",\"properties\":"
                    "{\"k%d\":{\"type\":\"integer\"}},\"required\":"
                    "[\"k%d\"]}", i ? "," : "", i, i);
        }
        strcat(s, "]}");

    } else {                          /* the same free string first */
        strcpy(s, "{\"anyOf\":[");
        for (i = 0; i < n; i++) {
            sprintf(s + strlen(s), "%s{\"type\":\"object\",\"properties\":"
                    "{\"text\":{\"type\":\"string\"},\"k%d\":{\"type\":"
                    "\"integer\"}},\"required\":[\"text\",\"k%d\"]}",
                    i ? "," : "", i, i);
        }
        strcat(s, "]}");
    }

    return s;
}


static kvs_gram_vocab_t *
tb_vocab(kvs_vocab_t **v)
{
    const char        *path;
    kvs_err_t          err;
    kvs_gram_vocab_t  *gv;

    path = kvs_test_fixture("vocab/ggml-vocab-gpt-2.gguf");
    if (path == NULL) {
        return NULL;
    }

    if (kvs_vocab_open(v, path, &err) != KVS_OK) {
        fail_msg("%s: %s", path, err.msg);
    }
    assert_int_equal(kvs_gram_vocab_from_vocab(&gv, *v, &err), KVS_OK);

    return gv;
}


static void
test_over(void **state)
{
    int                  i, rc;
    char                *schema;
    uint32_t            *bits, *ref, words;
    uint64_t             budget;
    kvs_err_t            err;
    kvs_vocab_t         *v;
    kvs_gram_t           g;
    kvs_gram_vocab_t    *gv;
    kvs_gram_matcher_t   m;
    kvs_gram_masker_t    mk, other, alone, plain, table;

    (void) state;

    gv = tb_vocab(&v);
    if (gv == NULL) {
        skip();
        return;
    }

    words = (gv->n_tokens + 31) / 32;
    bits = calloc(words, sizeof(uint32_t));
    ref = calloc(words, sizeof(uint32_t));
    budget = kvs_gram_work_budget(gv);

    schema = tb_schema(0, 32);
    assert_int_equal(tg_compile(&g, schema, 0, &err), KVS_OK);
    assert_int_equal(kvs_gram_matcher_init(&m, &g, NULL, &err), KVS_OK);
    assert_int_equal(kvs_gram_masker_init_table(&table, gv, 256, &err),
                     KVS_OK);
    assert_int_equal(kvs_gram_masker_init(&mk, gv, &m, 16, &err), KVS_OK);
    assert_int_equal(kvs_gram_masker_init(&other, gv, &m, 16, &err),
                     KVS_OK);
    assert_int_equal(kvs_gram_masker_init(&alone, gv, &m, 16, &err),
                     KVS_OK);
    assert_int_equal(kvs_gram_masker_init(&plain, gv, &m, 0, &err), KVS_OK);
    kvs_gram_masker_share(&mk, &table);
    kvs_gram_masker_share(&other, &table);
    kvs_gram_masker_budget(&mk, budget);

    /* before the quote: one open parse, well under the bound */
    assert_int_equal(kvs_gram_mask(&mk, bits, &err), KVS_OK);
    assert_true(mk.work.used < budget);

    /* after it: 32 free strings, every try */
    assert_int_equal(kvs_gram_matcher_byte(&m, '"', NULL), KVS_OK);
    assert_int_equal(kvs_gram_mask(&mk, bits, &err), KVS_ETOOLONG);
    assert_true(kvs_gram_work_over(&mk.work));
    assert_non_null(strstr(err.msg, "units of work"));
    /* the walk in progress winds down in a few steps past the bound */
    assert_true(mk.work.used < budget + budget / 100);

    /* a try again (another request of the same schema: the engine ends
     * this one) is bounded alike; it keeps only the whole entries the
     * cut ones built, so it may get further, never past the bound */
    for (i = 0; i < 8; i++) {
        rc = kvs_gram_mask(&mk, bits, &err);
        assert_true(mk.work.used < budget + budget / 100);
        if (rc == KVS_OK) {
            break;
        }
        assert_int_equal(rc, KVS_ETOOLONG);
    }
    assert_int_equal(rc, KVS_OK);

    /* unbounded, with entries of its own, the same mask takes more than
     * the budget: the bound is what ended it */
    assert_int_equal(kvs_gram_mask(&alone, bits, &err), KVS_OK);
    assert_true(alone.work.used > budget);

    /* what the cut masks left in the shared table is exact: a masker
     * with no bound sharing it masks as the reference does */
    assert_int_equal(kvs_gram_mask(&other, bits, &err), KVS_OK);
    assert_int_equal(kvs_gram_mask(&plain, ref, &err), KVS_OK);
    assert_memory_equal(bits, ref, words * sizeof(uint32_t));

    /* the mask it got to at last is exact */
    assert_int_equal(kvs_gram_mask(&mk, bits, &err), KVS_OK);
    assert_memory_equal(bits, ref, words * sizeof(uint32_t));

    kvs_gram_masker_free(&mk);
    kvs_gram_masker_free(&other);
    kvs_gram_masker_free(&alone);
    kvs_gram_masker_free(&plain);
    kvs_gram_masker_free(&table);
    kvs_gram_matcher_free(&m);
    kvs_gram_free(&g);
    free(schema);
    free(bits);
    free(ref);
    kvs_gram_vocab_free(gv);
    kvs_vocab_free(v);
}


static void
test_legit(void **state)
{
    int                  kind, n;
    char                *schema;
    size_t               w, step, k, na;
    uint32_t            *bits, *ref, *cand, words, id;
    uint64_t             budget, rng, most;
    kvs_err_t            err;
    kvs_vocab_t         *v;
    kvs_gram_t           g;
    kvs_gram_vocab_t    *gv;
    kvs_gram_matcher_t   m;
    kvs_gram_masker_t    mk, plain, table;

    static const int     cases[][2] = {
        { 1, 200 }, { 2, 100 }, { 3, 10 }, { 3, 40 }, { 0, 4 }
    };

    (void) state;

    gv = tb_vocab(&v);
    if (gv == NULL) {
        skip();
        return;
    }

    words = (gv->n_tokens + 31) / 32;
    bits = calloc(words, sizeof(uint32_t));
    ref = calloc(words, sizeof(uint32_t));
    cand = calloc(gv->n_tokens, sizeof(uint32_t));
    budget = kvs_gram_work_budget(gv);
    rng = 4242;

    for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        kind = cases[k][0];
        n = cases[k][1];
        schema = tb_schema(kind, n);
        assert_int_equal(tg_compile(&g, schema, 0, &err), KVS_OK);
        assert_int_equal(kvs_gram_masker_init_table(&table, gv, 256, &err),
                         KVS_OK);
        most = 0;

        for (w = 0; w < 2; w++) {
            assert_int_equal(kvs_gram_matcher_init(&m, &g, NULL, &err),
                             KVS_OK);
            assert_int_equal(kvs_gram_masker_init(&mk, gv, &m, 16, &err),
                             KVS_OK);
            assert_int_equal(kvs_gram_masker_init(&plain, gv, &m, 0, &err),
                             KVS_OK);
            kvs_gram_masker_share(&mk, &table);
            kvs_gram_masker_budget(&mk, budget);

            for (step = 0; step < 40; step++) {
                if (kvs_gram_mask(&mk, bits, &err) != KVS_OK) {
                    fail_msg("kind %d n %d step %zu: %s (%llu units, "
                             "budget %llu)", kind, n, step, err.msg,
                             (unsigned long long) mk.work.used,
                             (unsigned long long) budget);
                }
                most = mk.work.used > most ? mk.work.used : most;
                assert_int_equal(kvs_gram_mask(&plain, ref, &err), KVS_OK);
                assert_memory_equal(bits, ref, words * sizeof(uint32_t));

                for (id = 0, na = 0; id < gv->n_tokens; id++) {
                    if (bits[id >> 5] >> (id & 31) & 1) {
                        cand[na++] = id;
                    }
                }
                assert_true(na > 0);
                id = cand[tg_rand(&rng) % na];
                assert_int_equal(kvs_gram_accept_token(&m, gv, (int32_t) id,
                                                       &err), KVS_OK);
                if (gv->kind[id] == KVS_GRAM_TOK_END) {
                    break;
                }
            }

            kvs_gram_masker_free(&mk);
            kvs_gram_masker_free(&plain);
            kvs_gram_matcher_free(&m);
        }

        print_message("kind %d n %d: one mask at most %llu units (budget "
                      "%llu)\n", kind, n, (unsigned long long) most,
                      (unsigned long long) budget);
        kvs_gram_masker_free(&table);
        kvs_gram_free(&g);
        free(schema);
    }

    free(bits);
    free(ref);
    free(cand);
    kvs_gram_vocab_free(gv);
    kvs_vocab_free(v);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_over),
        cmocka_unit_test(test_legit),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
