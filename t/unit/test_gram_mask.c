/*
 * test_gram_mask: the token mask against a brute-force check of every
 * token (a text token is allowed iff the matcher takes all its bytes from
 * the current state; an END token iff the grammar is complete; others
 * never), on a small vocabulary built here (every byte, JSON pieces,
 * pieces that span two JSON tokens, partial and whole UTF-8, an EOS, a
 * control token, an empty one) and on real vocabularies (GPT-2 BPE and
 * Llama SPM fixtures, skipped with a note when absent).  Random walks
 * through several schemas pick random allowed tokens until EOS; every
 * step's mask must equal the brute force, the cached mask must equal a
 * fresh walk, and the finished text must be valid per the schema (the
 * independent validator in kvs_test_gram.h).
 */

#include "kvs_test_gram.h"


static const char  *tm_schemas[] = {
    "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\","
    " \"maxLength\": 6}, \"n\": {\"type\": \"integer\", \"minimum\": -3, "
    "\"maximum\": 250}, \"ok\": {\"type\": \"boolean\"}, \"x\": {\"type\": "
    "\"number\", \"minimum\": -1, \"maximum\": 20}}, \"required\": "
    "[\"name\", \"n\"], \"additionalProperties\": false}",
    "{\"type\": \"array\", \"items\": {\"enum\": [\"red\", \"green\", "
    "\"blue\", 1, null]}, \"minItems\": 1, \"maxItems\": 4}",
    "{\"$defs\": {\"t\": {\"type\": \"object\", \"properties\": {\"v\": "
    "{\"type\": \"number\"}, \"c\": {\"type\": \"array\", \"items\": "
    "{\"$ref\": \"#/$defs/t\"}, \"maxItems\": 2}}, \"required\": [\"v\"], "
    "\"additionalProperties\": false}}, \"$ref\": \"#/$defs/t\"}",
    "{\"type\": \"object\", \"properties\": {\"id\": {\"type\": \"string\", "
    "\"format\": \"uuid\"}, \"s\": {\"type\": \"string\", \"pattern\": "
    "\"^[\\u00e9a-z ]{1,8}$\"}}, \"required\": [\"id\", \"s\"]}",
    "{\"anyOf\": [{\"type\": \"string\", \"maxLength\": 3}, "
    "{\"type\": \"null\"}, {\"type\": \"array\", \"maxItems\": 1}]}",
    NULL                              /* json_object mode */
};

#define TM_N_SCHEMAS  (sizeof(tm_schemas) / sizeof(tm_schemas[0]))


static int
tm_gram(kvs_gram_t *g, size_t i)
{
    kvs_err_t  err;
    int        rc;

    rc = tm_schemas[i] != NULL ? tg_compile(g, tm_schemas[i], 0, &err)
                               : kvs_gram_json_object(g, NULL, &err);
    if (rc != KVS_OK) {
        fail_msg("schema %zu: %s", i, err.msg);
    }

    return rc;
}


static void
tm_diff(const kvs_gram_vocab_t *gv, const uint32_t *a, const uint32_t *b,
    const char *text, size_t len)
{
    uint32_t  id;

    for (id = 0; id < gv->n_tokens; id++) {
        if ((a[id >> 5] >> (id & 31) & 1) != (b[id >> 5] >> (id & 31) & 1)) {
            fail_msg("after \"%.*s\": token %u \"%.*s\": mask %u, brute %u",
                     (int) len, text, id, (int) gv->len[id],
                     (const char *) gv->bytes + gv->off[id],
                     a[id >> 5] >> (id & 31) & 1,
                     b[id >> 5] >> (id & 31) & 1);
        }
    }
}


/*
 * Random walks with masks checked at every step.  Returns the number of
 * walks that reached EOS.
 */
static size_t
tm_walks(const kvs_gram_vocab_t *gv, size_t walks, size_t max_steps,
    uint64_t seed)
{
    size_t              i, w, step, len, n, nc, ended;
    char               *text;
    uint32_t            words, *bits, *brute, *fresh, *cand, id;
    uint64_t            rng;
    kvs_err_t           err;
    kvs_gram_t          g;
    kvs_gram_matcher_t  m;
    kvs_gram_masker_t   mk, plain;

    rng = seed;
    words = (gv->n_tokens + 31) / 32;
    bits = malloc(words * sizeof(uint32_t));
    brute = malloc(words * sizeof(uint32_t));
    fresh = malloc(words * sizeof(uint32_t));
    cand = malloc(gv->n_tokens * sizeof(uint32_t));
    text = malloc(max_steps * (gv->max_len + 1) + 1);
    ended = 0;

    for (i = 0; i < TM_N_SCHEMAS; i++) {
        tm_gram(&g, i);

        for (w = 0; w < walks; w++) {
            assert_int_equal(kvs_gram_matcher_init(&m, &g, NULL, &err),
                             KVS_OK);
            assert_int_equal(kvs_gram_masker_init(&mk, gv, &m, 16, &err),
                             KVS_OK);
            assert_int_equal(kvs_gram_masker_init(&plain, gv, &m, 0, &err),
                             KVS_OK);
            len = 0;

            for (step = 0; step < max_steps; step++) {
                if (kvs_gram_mask(&mk, bits, &err) != KVS_OK) {
                    fail_msg("schema %zu after \"%.*s\": %s", i, (int) len,
                             text, err.msg);
                }
                tg_brute(&m, gv, brute, words);
                if (memcmp(bits, brute, words * sizeof(uint32_t)) != 0) {
                    tm_diff(gv, bits, brute, text, len);
                }
                /* the cache gives what a fresh walk gives */
                assert_int_equal(kvs_gram_mask(&plain, fresh, &err),
                                 KVS_OK);
                assert_memory_equal(bits, fresh, words * sizeof(uint32_t));

                /* closers (tokens with '"', '}' or ']') from the top of
                 * cand down, the rest from the bottom up */
                for (id = 0, n = 0, nc = 0; id < gv->n_tokens; id++) {
                    if (bits[id >> 5] >> (id & 31) & 1) {
                        if (gv->kind[id] == KVS_GRAM_TOK_TEXT
                            && (memchr(gv->bytes + gv->off[id], '"',
                                       gv->len[id]) != NULL
                                || memchr(gv->bytes + gv->off[id], '}',
                                          gv->len[id]) != NULL
                                || memchr(gv->bytes + gv->off[id], ']',
                                          gv->len[id]) != NULL))
                        {
                            cand[gv->n_tokens - 1 - nc++] = id;
                        } else {
                            cand[n++] = id;
                        }
                    }
                }
                assert_true(n + nc > 0);

                /* lean towards closing and EOS, so that walks finish */
                if (nc > 0 && (n == 0 || tg_rand(&rng) % 2 == 0)) {
                    id = cand[gv->n_tokens - 1 - tg_rand(&rng) % nc];
                } else {
                    id = cand[tg_rand(&rng) % n];
                }
                if (kvs_gram_matcher_can_end(&m) && tg_rand(&rng) % 3 == 0) {
                    id = (uint32_t) gv->ids[gv->n_text];
                }

                assert_int_equal(kvs_gram_accept_token(&m, gv, (int32_t) id,
                                                       &err), KVS_OK);
                if (gv->kind[id] == KVS_GRAM_TOK_END) {
                    break;
                }
                memcpy(text + len, gv->bytes + gv->off[id], gv->len[id]);
                len += gv->len[id];
            }

            if (step < max_steps) {
                ended++;
                assert_true(kvs_gram_matcher_can_end(&m));
                if (tm_schemas[i] != NULL
                    && tg_valid_text(tm_schemas[i], text, len) == 0)
                {
                    fail_msg("schema %zu: output \"%.*s\" is not valid", i,
                             (int) len, text);
                }
                if (tm_schemas[i] == NULL) {
                    assert_true(len >= 2 && text[0] == '{'
                                && text[len - 1] == '}');
                }
            }

            kvs_gram_masker_free(&mk);
            kvs_gram_masker_free(&plain);
            kvs_gram_matcher_free(&m);
        }

        kvs_gram_free(&g);
    }

    free(bits);
    free(brute);
    free(fresh);
    free(cand);
    free(text);

    return ended;
}


/* ---- a small vocabulary ----------------------------------------------- */

static const char  *tm_pieces[] = {
    "{\"", "\":", "\": ", "\", \"", ", \"", "\"}", "\"]", "}]", "]}",
    "true", "false", "null", "nu", "ll", "123", "0.", ".5", "e+", "-1",
    "\\n", "\\u00", "\\\"", "\"},{\"", "\": [", "\": {\"", "name", "\"name",
    "\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac", "\xe6\x97", "\xa5", "\xf0\x9f",
    "\x98\x80", "red", "\"red\"", "gre", "en\"", "blue\", ", "ok\": true}",
    "  ", "\"n\": 2", "1, ", "[\"", "\"]}", "aa", "-", "ab", "0000",
    "123e4567", "-e89b", "\", \"s\": \"", "\"id\": \"",
};


/* The bytes laid out by sorted position (kvs_gram_vocab.c): each text
 * token's bytes at x_off of its position, adjacent to the next one's,
 * in sorted order; texts (when not NULL) every token's own bytes. */
static void
tm_layout(const kvs_gram_vocab_t *gv, const uint8_t **texts,
    const uint32_t *lens)
{
    uint32_t   i, x, id, l, pl, o;
    int        c;

    for (x = 0, o = 0; x < gv->n_text; x++) {
        id = (uint32_t) gv->ids[x];
        assert_int_equal(gv->x_off[x], o);
        assert_int_equal(gv->off[id], gv->x_off[x]);
        l = gv->x_off[x + 1] - gv->x_off[x];
        assert_int_equal(l, gv->len[id]);
        o += l;

        if (x > 0) {
            pl = gv->x_off[x] - gv->x_off[x - 1];
            c = memcmp(gv->bytes + gv->x_off[x - 1],
                       gv->bytes + gv->x_off[x], pl < l ? pl : l);
            assert_true(c < 0 || (c == 0 && pl <= l));
        }
    }

    for (i = 0; texts != NULL && i < gv->n_tokens; i++) {
        assert_int_equal(gv->len[i], lens[i]);
        assert_memory_equal(gv->bytes + gv->off[i], texts[i], lens[i]);
    }
}


static void
test_small_vocab(void **state)
{
    size_t             i, n, np, ended;
    uint8_t           *kinds;
    uint32_t          *lens;
    const uint8_t    **texts;
    uint8_t            bytes[256];
    kvs_err_t          err;
    kvs_gram_vocab_t  *gv;

    (void) state;

    np = sizeof(tm_pieces) / sizeof(tm_pieces[0]);
    n = 256 + np + 4;
    kinds = calloc(n, 1);
    lens = calloc(n, sizeof(uint32_t));
    texts = calloc(n, sizeof(uint8_t *));

    for (i = 0; i < 256; i++) {
        bytes[i] = (uint8_t) i;
        texts[i] = &bytes[i];
        lens[i] = 1;
    }
    for (i = 0; i < np; i++) {
        texts[256 + i] = (const uint8_t *) tm_pieces[i];
        lens[256 + i] = (uint32_t) strlen(tm_pieces[i]);
    }

    /* an EOS, a control token with text, an empty token, a duplicate */
    texts[256 + np] = (const uint8_t *) "</s>";
    lens[256 + np] = 4;
    kinds[256 + np] = KVS_GRAM_TOK_END;
    texts[257 + np] = (const uint8_t *) "{";
    lens[257 + np] = 1;
    kinds[257 + np] = KVS_GRAM_TOK_REFUSED;
    texts[258 + np] = (const uint8_t *) "";
    lens[258 + np] = 0;
    texts[259 + np] = (const uint8_t *) "{\"";
    lens[259 + np] = 2;

    assert_int_equal(kvs_gram_vocab_from_bytes(&gv, (uint32_t) n, texts,
                                               lens, kinds, &err), KVS_OK);
    assert_int_equal(gv->kind[258 + np], KVS_GRAM_TOK_REFUSED);
    assert_int_equal(gv->n_end, 1);
    tm_layout(gv, texts, lens);

    ended = tm_walks(gv, 40, 300, 12345);
    assert_true(ended > TM_N_SCHEMAS * 40 / 2);

    kvs_gram_vocab_free(gv);
    free(kinds);
    free(lens);
    free(texts);
}


/* the EOS only when complete, and the mask of a finished object */
static void
test_end(void **state)
{
    uint32_t            bits[1];
    kvs_err_t           err;
    kvs_gram_t          g;
    kvs_gram_matcher_t  m;
    kvs_gram_masker_t   mk;
    kvs_gram_vocab_t   *gv;
    static const uint8_t  *texts[] = {
        (const uint8_t *) "{", (const uint8_t *) "}",
        (const uint8_t *) "EOS", (const uint8_t *) "1",
        (const uint8_t *) "{}", (const uint8_t *) "}1"
    };
    static const uint32_t  lens[] = { 1, 1, 3, 1, 2, 2 };
    static const uint8_t   kinds[] = { 0, 0, 1, 0, 0, 0 };

    (void) state;

    assert_int_equal(kvs_gram_vocab_from_bytes(&gv, 6, texts, lens, kinds,
                                               &err), KVS_OK);
    assert_int_equal(tg_compile(&g, "{\"type\": \"object\"}", 0, &err),
                     KVS_OK);
    assert_int_equal(kvs_gram_matcher_init(&m, &g, NULL, &err), KVS_OK);
    assert_int_equal(kvs_gram_masker_init(&mk, gv, &m, 4, &err), KVS_OK);
    mk.keepall = 1;

    assert_int_equal(kvs_gram_mask(&mk, bits, &err), KVS_OK);
    assert_int_equal(bits[0], (1u << 0) | (1u << 4));
    assert_int_equal(kvs_gram_accept_token(&m, gv, 2, &err), KVS_EFORMAT);

    assert_int_equal(kvs_gram_accept_token(&m, gv, 0, &err), KVS_OK);
    assert_int_equal(kvs_gram_mask(&mk, bits, &err), KVS_OK);
    assert_int_equal(bits[0], 1u << 1);
    assert_int_equal(kvs_gram_accept_token(&m, gv, 1, &err), KVS_OK);
    assert_true(kvs_gram_matcher_must_end(&m));
    assert_int_equal(kvs_gram_mask(&mk, bits, &err), KVS_OK);
    assert_int_equal(bits[0], 1u << 2);
    assert_int_equal(kvs_gram_accept_token(&m, gv, 3, &err), KVS_EFORMAT);
    assert_int_equal(kvs_gram_accept_token(&m, gv, 2, &err), KVS_OK);

    /* back to the start: the cached first mask again, EOS refused */
    kvs_gram_matcher_rollback(&m, 2);
    assert_int_equal(kvs_gram_mask(&mk, bits, &err), KVS_OK);
    assert_int_equal(bits[0], (1u << 0) | (1u << 4));
    assert_true(mk.hits >= 1);

    kvs_gram_masker_free(&mk);
    kvs_gram_matcher_free(&m);
    kvs_gram_free(&g);
    kvs_gram_vocab_free(gv);
}


/* ---- real vocabularies -------------------------------------------------- */

static void
tm_fixture(const char *rel, size_t walks, size_t steps)
{
    const char        *path;
    size_t             ended;
    uint32_t           i, spaces;
    kvs_err_t          err;
    kvs_vocab_t       *v;
    kvs_gram_vocab_t  *gv;

    path = kvs_test_fixture(rel);
    if (path == NULL) {
        skip();
        return;
    }

    if (kvs_vocab_open(&v, path, &err) != KVS_OK) {
        fail_msg("%s: %s", path, err.msg);
    }
    assert_int_equal(kvs_gram_vocab_from_vocab(&gv, v, &err), KVS_OK);
    assert_true(gv->n_end >= 1);

    /* SPM texts become output bytes: no U+2581 is left, spaces are */
    spaces = 0;
    for (i = 0; i < gv->n_tokens; i++) {
        if (gv->kind[i] == KVS_GRAM_TOK_TEXT) {
            assert_null(memmem(gv->bytes + gv->off[i], gv->len[i],
                               "\xe2\x96\x81", 3));
            spaces += memchr(gv->bytes + gv->off[i], ' ', gv->len[i])
                      != NULL;
        }
    }
    assert_true(spaces > 1000);
    tm_layout(gv, NULL, NULL);

    ended = tm_walks(gv, walks, steps, 777);
    assert_true(ended > 0);

    kvs_gram_vocab_free(gv);
    kvs_vocab_free(v);
}


static void
test_gpt2(void **state)
{
    (void) state;
    tm_fixture("vocab/ggml-vocab-gpt-2.gguf", 3, 40);
}


static void
test_llama_spm(void **state)
{
    (void) state;
    tm_fixture("vocab/ggml-vocab-llama-spm.gguf", 3, 40);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_end),
        cmocka_unit_test(test_small_vocab),
        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_llama_spm),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
