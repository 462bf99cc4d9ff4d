/*
 * test_tok_wpm: WordPiece encoding (kvs_tok_wpm.c) through the public
 * API, on the bge-small-en-v1.5 vocabulary (uncased BERT):
 *
 *   - the 46 llama.cpp cases (vocab/ggml-vocab-bert-bge.gguf.inp and
 *     .out, from Hugging Face's BertTokenizerFast without [CLS]/[SEP]);
 *   - cases worked out by hand from BERT's rules, written as the token
 *     texts they must give (looked up in the vocabulary, so the test
 *     holds no ids of its own making): accents stripped, lowercase, CJK
 *     and punctuation set apart, controls dropped, unknown words;
 *   - random words against greedy longest match written out naively
 *     here;
 *   - decode(encode(x)) is x lowercased and unaccented for words of
 *     letters between single spaces (BERT cannot round-trip case);
 *   - 1 MB inputs finish, and the time is printed.
 */

#include "kvs_test_tok.h"


#define BGE  "vocab/ggml-vocab-bert-bge.gguf"


typedef struct {
    const char  *text;
    const char  *tokens;              /* GGUF token texts, space-separated */
} wpm_case_t;


static const wpm_case_t  hand_cases[] = {
    /* lowercase, NFD and nonspacing marks dropped */
    { "Caf\xc3\xa9", "\xe2\x96\x81" "cafe" },
    { "na\xc3\xafve r\xc3\xa9sum\xc3\xa9",
      "\xe2\x96\x81" "naive \xe2\x96\x81" "resume" },
    { "\xc4\xb0stanbul", "\xe2\x96\x81" "istanbul" },      /* U+0130 */
    /* a continuation has no "▁"; "ω" then "##me" "##ga" */
    { "\xce\xa9MEGA", "\xe2\x96\x81\xcf\x89 me ga" },
    { "ied", "\xe2\x96\x81" "ie d" },
    { "Stra\xc3\x9f" "e", "\xe2\x96\x81" "st ra\xc3\x9f" "e" },
    /* punctuation is a word of its own */
    { "HELLO, World!",
      "\xe2\x96\x81hello \xe2\x96\x81, \xe2\x96\x81world \xe2\x96\x81!" },
    { "don't", "\xe2\x96\x81" "don \xe2\x96\x81' \xe2\x96\x81t" },
    { "[CLS]", "\xe2\x96\x81[ \xe2\x96\x81" "cl s \xe2\x96\x81]" },
    /* CJK ideographs too, spaces or not */
    { "\xe4\xb8\xad\xe6\x96\x87",
      "\xe2\x96\x81\xe4\xb8\xad \xe2\x96\x81\xe6\x96\x87" },
    { "a\xe4\xb8\xad" "b",
      "\xe2\x96\x81" "a \xe2\x96\x81\xe4\xb8\xad \xe2\x96\x81" "b" },
    /* controls, U+200B (Cf) and U+FFFD vanish; whitespace splits */
    { "a\x01" "b\xe2\x80\x8b" "c\xef\xbf\xbd", "\xe2\x96\x81" "abc" },
    { "a\xc2\xa0" "b\te\nf\r\ng",
      "\xe2\x96\x81" "a \xe2\x96\x81" "b \xe2\x96\x81" "e \xe2\x96\x81" "f "
      "\xe2\x96\x81" "g" },
    /* no compatibility decomposition: the ligature is its own token */
    { "\xef\xac\x81", "\xe2\x96\x81\xef\xac\x81" },
    /* words that cannot be spelled: the emoji, and "▁" inside a word
     * (a continuation "▁..." would be read as a word start) */
    { "\xf0\x9f\x98\x80", "[UNK]" },
    { "x\xe2\x96\x81", "[UNK]" },
    { "ok \xe2\x96\x81x ok",
      "\xe2\x96\x81ok [UNK] \xe2\x96\x81ok" },
    { "", "" },
    { " \t\n", "" },
};


/* The ids of space-separated token texts; each must be a token. */
static void
texts_to_ids(const kvs_vocab_t *v, const char *texts, kvs_ids_t *ids)
{
    int32_t      id;
    const char  *p, *q;

    ids->n = 0;

    for (p = texts; *p != '\0'; p = *q == ' ' ? q + 1 : q) {
        q = strchr(p, ' ');
        if (q == NULL) {
            q = p + strlen(p);
        }

        id = kvs_vocab_find(v, p, (size_t) (q - p));
        if (id < 0) {
            fail_msg("'%.*s' is not a token", (int) (q - p), p);
        }

        assert_int_equal(kvs_ids_push(ids, id), KVS_OK);
    }
}


static void
test_vocab(void **state)
{
    kvs_vocab_t  *v;

    v = kvs_test_vocab(BGE, KVS_VOCAB_WPM);
    if (v == NULL) {
        skip();
    }

    assert_string_equal(kvs_vocab_kind_name(v->kind), "bert");
    assert_int_equal(v->unk, kvs_vocab_find(v, "[UNK]", 5));
    assert_int_equal(v->add_bos, 0);
    assert_int_equal(v->add_space_prefix, 0);
    assert_null(v->pre);

    kvs_vocab_free(v);
}


static void
test_bge_cases(void **state)
{
    size_t             i, pass;
    kvs_vocab_t       *v;
    kvs_tok_ctx_t      ctx = { 0 };
    kvs_test_cases_t   c;

    v = kvs_test_vocab(BGE, KVS_VOCAB_WPM);
    if (v == NULL) {
        skip();
    }

    kvs_test_cases_load(BGE, &c);
    pass = 0;

    for (i = 0; i < c.n; i++) {
        pass += kvs_test_encode_check(v, &ctx, c.text[i], c.len[i], 0,
                                      &c.want[i], "%s case %zu", BGE, i);
    }

    print_message("%s: %zu/%zu cases give the expected ids\n", BGE, pass,
                  c.n);

    assert_int_equal(pass, c.n);

    kvs_test_cases_free(&c);
    kvs_tok_ctx_free(&ctx);
    kvs_vocab_free(v);
}


static void
test_hand_cases(void **state)
{
    size_t          i, n, pass;
    kvs_ids_t       want = { 0 };
    kvs_vocab_t    *v;
    kvs_tok_ctx_t   ctx = { 0 };

    v = kvs_test_vocab(BGE, KVS_VOCAB_WPM);
    if (v == NULL) {
        skip();
    }

    n = sizeof(hand_cases) / sizeof(hand_cases[0]);
    pass = 0;

    for (i = 0; i < n; i++) {
        texts_to_ids(v, hand_cases[i].tokens, &want);
        pass += kvs_test_encode_check(v, &ctx, hand_cases[i].text,
                                      strlen(hand_cases[i].text), 0, &want,
                                      "hand case %zu", i);
    }

    print_message("%zu/%zu hand-derived cases\n", pass, n);
    assert_int_equal(pass, n);

    /* special-token text is a control token only when asked for */
    texts_to_ids(v, "[CLS] \xe2\x96\x81hi [SEP]", &want);
    assert_true(kvs_test_encode_check(v, &ctx, "[CLS]hi[SEP]", 12,
                                      KVS_TOK_SPECIAL, &want, "[CLS]"));

    kvs_ids_free(&want);
    kvs_tok_ctx_free(&ctx);
    kvs_vocab_free(v);
}


/*
 * WordPiece of one word of lowercase ASCII letters, by definition and
 * without shortcuts: at each position the longest token that follows
 * ("▁" + piece first, then bare pieces), every length tried; a word of
 * more than 100 characters, or one that gets stuck, is [UNK].
 */
static void
naive_word(const kvs_vocab_t *v, const char *w, size_t n, kvs_ids_t *out)
{
    char     key[512];
    size_t   start, end, k, n0;
    int32_t  id;

    n0 = out->n;

    if (n > 100) {
        goto unknown;
    }

    for (start = 0; start < n; start = end) {
        id = -1;

        for (end = n; end > start; end--) {
            k = 0;
            if (start == 0) {
                memcpy(key, "\xe2\x96\x81", 3);
                k = 3;
            }
            memcpy(key + k, w + start, end - start);

            id = kvs_vocab_find(v, key, k + end - start);
            if (id >= 0 && v->tokens[id].type == KVS_TOKT_NORMAL) {
                break;
            }
            id = -1;
        }

        if (id < 0) {
            out->n = n0;
            goto unknown;
        }

        assert_int_equal(kvs_ids_push(out, id), KVS_OK);
    }

    return;

unknown:

    assert_int_equal(kvs_ids_push(out, v->unk), KVS_OK);
}


static void
test_random_words(void **state)
{
    static const char  *syl[] = {
        "a", "e", "i", "o", "u", "y", "th", "ing", "ion", "tion", "ly",
        "un", "re", "pre", "str", "q", "x", "z", "kv", "serve", "token",
        "ization", "believ", "able", "ness", "w", "gh", "ck", "j", "mm"
    };

    char           word[256];
    size_t         i, k, n, words;
    uint32_t       x;
    kvs_buf_t      text = { 0 };
    kvs_ids_t      want = { 0 };
    kvs_vocab_t   *v;
    kvs_tok_ctx_t  ctx = { 0 };

    v = kvs_test_vocab(BGE, KVS_VOCAB_WPM);
    if (v == NULL) {
        skip();
    }

    x = 7;
    words = 20000;

    for (i = 0; i < words; i++) {
        n = 0;
        x = x * 1103515245u + 12345u;
        k = 1 + (x >> 16) % 8;

        /* now and then a word of 99..102 letters, around the limit */
        if ((x >> 8) % 50 == 0) {
            n = 99 + (x >> 4) % 4;
            memset(word, 'a' + (int) ((x >> 12) % 26), n);
            k = 0;
        }

        while (k-- > 0) {
            x = x * 1103515245u + 12345u;
            n += (size_t) snprintf(word + n, sizeof(word) - n, "%s",
                                   syl[(x >> 16) % (sizeof(syl)
                                                     / sizeof(syl[0]))]);
        }

        naive_word(v, word, n, &want);

        /* uppercase half of them: the same ids */
        if (x & 0x100) {
            for (k = 0; k < n; k++) {
                word[k] = (char) (word[k] - 'a' + 'A');
            }
        }

        assert_int_equal(kvs_buf_append(&text, word, n), KVS_OK);
        assert_int_equal(kvs_buf_append(&text, " ", 1), KVS_OK);
    }

    print_message("%zu random words, %zu bytes, %zu ids expected\n", words,
                  text.len, want.n);

    assert_true(kvs_test_encode_check(v, &ctx, (const char *) text.data,
                                      text.len, 0, &want, "random words"));

    kvs_buf_free(&text);
    kvs_ids_free(&want);
    kvs_tok_ctx_free(&ctx);
    kvs_vocab_free(v);
}


/* decode(encode(x)) for words between single spaces: the lowercased,
 * unaccented text, with no leading space. */
static void
test_decode(void **state)
{
    static const struct {
        const char  *text;
        const char  *decoded;
    } cases[] = {
        { "Hello World", "hello world" },
        { "Tokenization is UNBELIEVABLY fast",
          "tokenization is unbelievably fast" },
        { "Caf\xc3\xa9 Cr\xc3\xa8me Br\xc3\xbbl\xc3\xa9" "e",
          "cafe creme brulee" },
        { "kvserve serves WordPiece vocabularies",
          "kvserve serves wordpiece vocabularies" },
    };

    size_t          i;
    kvs_buf_t       dec = { 0 };
    kvs_err_t       err;
    kvs_ids_t       ids = { 0 };
    kvs_vocab_t    *v;
    kvs_tok_ctx_t   ctx = { 0 };

    v = kvs_test_vocab(BGE, KVS_VOCAB_WPM);
    if (v == NULL) {
        skip();
    }

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ids.n = 0;
        dec.len = 0;

        assert_int_equal(kvs_tok_encode(v, &ctx, cases[i].text,
                                        strlen(cases[i].text), 0, &ids,
                                        &err), KVS_OK);
        assert_int_equal(kvs_tok_decode(v, ids.ids, ids.n, 0, &dec, &err),
                         KVS_OK);

        if (dec.len != strlen(cases[i].decoded)
            || memcmp(dec.data, cases[i].decoded, dec.len) != 0)
        {
            kvs_test_print_text("input  ", cases[i].text,
                                strlen(cases[i].text));
            kvs_test_print_ids("ids    ", ids.ids, ids.n);
            kvs_test_print_text("decoded", (const char *) dec.data,
                                dec.len);
            fail_msg("decode case %zu", i);
        }
    }

    kvs_ids_free(&ids);
    kvs_buf_free(&dec);
    kvs_tok_ctx_free(&ctx);
    kvs_vocab_free(v);
}


/* One 1 MB input: encodes to n ids, all id (id -1: any ids in range). */
static void
run_big(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx, const char *name,
    const char *text, size_t len, int32_t id, size_t n)
{
    double     t0, t1;
    size_t     i;
    kvs_err_t  err;
    kvs_ids_t  ids = { 0 };

    t0 = kvs_test_now_ms();
    if (kvs_tok_encode(v, ctx, text, len, 0, &ids, &err) != KVS_OK) {
        fail_msg("%s: %s", name, err.msg);
    }
    t1 = kvs_test_now_ms();

    print_message("1 MB of %s: %zu bytes -> %zu tokens in %.1f ms\n",
                  name, len, ids.n, t1 - t0);

    for (i = 0; i < ids.n; i++) {
        assert_true(ids.ids[i] >= 0 && (uint32_t) ids.ids[i] < v->n_tokens);
    }

    if (id >= 0) {
        assert_int_equal(ids.n, n);
        for (i = 0; i < ids.n; i++) {
            assert_int_equal(ids.ids[i], id);
        }
    }

    kvs_ids_free(&ids);
}


static void
test_big_inputs(void **state)
{
    char           *buf;
    size_t          i, len;
    int32_t         a, zh, bang;
    uint32_t        x;
    kvs_vocab_t    *v;
    kvs_tok_ctx_t   ctx = { 0 };

    v = kvs_test_vocab(BGE, KVS_VOCAB_WPM);
    if (v == NULL) {
        skip();
    }

    a = kvs_vocab_find(v, "\xe2\x96\x81" "a", 4);
    zh = kvs_vocab_find(v, "\xe2\x96\x81\xe4\xb8\xad", 6);
    bang = kvs_vocab_find(v, "\xe2\x96\x81!", 4);
    assert_true(a >= 0 && zh >= 0 && bang >= 0);

    len = 1 << 20;
    buf = malloc(len);
    assert_non_null(buf);

    /* one word of a million characters: [UNK] */
    memset(buf, 'A', len);
    run_big(v, &ctx, "'A'", buf, len, v->unk, 1);

    x = 1;
    for (i = 0; i < len; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (char) ('a' + (x >> 16) % 26);
    }
    run_big(v, &ctx, "random letters", buf, len, v->unk, 1);

    /* the same letters as words of 100, the most a word may have: the
     * longest-match search at its longest */
    for (i = 100; i < len; i += 101) {
        buf[i] = ' ';
    }
    run_big(v, &ctx, "100-letter words", buf, len, -1, 0);

    for (i = 0; i < len; i += 2) {
        buf[i] = 'a';
        buf[i + 1] = ' ';
    }
    run_big(v, &ctx, "'a '", buf, len, a, len / 2);

    memset(buf, '!', len);
    run_big(v, &ctx, "'!'", buf, len, bang, len);

    memset(buf, '\x01', len);
    run_big(v, &ctx, "\\x01", buf, len, v->unk, 0);

    for (i = 0; i + 3 <= len; i += 3) {
        memcpy(buf + i, "\xe4\xb8\xad", 3);
    }
    run_big(v, &ctx, "U+4E2D", buf, i, zh, i / 3);

    /* "é" as e + U+0301: one long word once the marks go */
    for (i = 0; i + 3 <= len; i += 3) {
        memcpy(buf + i, "e\xcc\x81", 3);
    }
    run_big(v, &ctx, "e U+0301", buf, i, v->unk, 1);

    free(buf);
    kvs_tok_ctx_free(&ctx);
    kvs_vocab_free(v);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_vocab),
        cmocka_unit_test(test_bge_cases),
        cmocka_unit_test(test_hand_cases),
        cmocka_unit_test(test_random_words),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_big_inputs),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
