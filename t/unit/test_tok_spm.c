/*
 * test_tok_spm: SentencePiece BPE encoding (kvs_tok_spm.c) through the
 * public API, against ids that real tokenizers produced:
 *
 *   - the 46 llama.cpp cases (vocab/<name>.gguf.inp and .out, from Hugging
 *     Face) on the Llama 1/2 and Phi-3 vocabularies: no BOS, no special
 *     parsing; and the same cases joined into one 64 KiB text, which is
 *     merged word by word;
 *   - llama2.c test.c's Llama 2 encodings (models/README.md section 4)
 *     and the stories260K prompt encodings ("Derived values" there, from
 *     llama2.c run.c), both with BOS;
 *   - round trips decode(encode(x)) == x for all of those, and for every
 *     code point (llama.cpp's test-tokenizer-1-spm);
 *   - 1 MB inputs that would be quadratic in a naive merge loop: they
 *     finish, and the time is printed.
 */

#include "kvs_test_tok.h"


typedef struct {
    const char  *text;
    const char  *ids;                 /* expected, space-separated */
} spm_case_t;


/* llama2.c test.c (Llama 2 tokenizer, BOS, dummy prefix). */
static const spm_case_t  llama2_cases[] = {
    { "", "1" },
    { "I believe the meaning of life is",
      "1 306 4658 278 6593 310 2834 338" },
    { "Simply put, the theory of relativity states that ",
      "1 3439 17632 1925 29892 278 6368 310 14215 537 5922 393 29871" },
    { "A brief message congratulating the team on the launch:\n\n"
      "        Hi everyone,\n\n        I just ",
      "1 319 11473 2643 378 629 271 18099 278 3815 373 278 6826 29901 13 13 "
      "4706 6324 14332 29892 13 13 4706 306 925 29871" },
    { "Translate English to French:\n\n"
      "        sea otter => loutre de mer\n"
      "        peppermint => menthe poivr\xc3\xa9" "e\n"
      "        plush girafe => girafe peluche\n"
      "        cheese =>",
      "1 4103 9632 4223 304 5176 29901 13 13 4706 7205 4932 357 1149 301 449 "
      "276 316 2778 13 4706 1236 407 837 524 1149 6042 354 772 440 29878 "
      "1318 13 4706 715 1878 330 3055 1725 1149 330 3055 1725 4639 28754 13 "
      "4706 923 968 1149" },
};

/* llama2.c run.c encode() with tok512 (stories260K), BOS added. */
static const spm_case_t  stories_cases[] = {
    { "", "1" },
    { "Once upon a time", "1 403 407 261 378" },
    { "Hello world", "1 346 306 414 263 304 341" },
    { "One day, Lily met a Shoggoth",
      "1 385 328 432 317 284 316 261 301 415 414 428 428 309 415" },
    { "Lily", "1 317" },
    { " Lily", "1 410 317" },
    { "\xc3\xa1", "1 410 198 164" },
};


static void
run_vocab_cases(const char *rel)
{
    kvs_vocab_t  *v;

    v = kvs_test_vocab(rel, KVS_VOCAB_SPM);
    if (v == NULL) {
        skip();
    }

    assert_int_equal(kvs_test_cases_run(v, rel), 0);

    kvs_vocab_free(v);
}


/*
 * The cases joined by spaces into one text of over 64 KiB, long enough
 * to be merged word by word.  In these vocabularies no token holds "▁"
 * after another character, so nothing merges across the start of a word
 * and the text must give the cases' own ids one after the other: case
 * k's dummy prefix is the space before it.  Cases that are empty or end
 * in a space are left out (their space would join the next one's).
 */
static void
run_long_text(const char *rel)
{
    size_t             i, pass;
    kvs_buf_t          text = { 0 };
    kvs_ids_t          want = { 0 };
    kvs_vocab_t       *v;
    kvs_tok_ctx_t      ctx = { 0 };
    kvs_test_cases_t   c;

    v = kvs_test_vocab(rel, KVS_VOCAB_SPM);
    if (v == NULL) {
        skip();
    }

    kvs_test_cases_load(rel, &c);

    for (pass = 0; text.len < 65536; pass++) {
        for (i = 0; i < c.n; i++) {
            if (c.len[i] == 0 || c.text[i][c.len[i] - 1] == ' ') {
                continue;
            }

            if (text.len > 0) {
                assert_int_equal(kvs_buf_append(&text, " ", 1), KVS_OK);
            }

            assert_int_equal(kvs_buf_append(&text, c.text[i], c.len[i]),
                             KVS_OK);
            assert_int_equal(kvs_ids_reserve(&want, c.want[i].n), KVS_OK);
            memcpy(want.ids + want.n, c.want[i].ids,
                   c.want[i].n * sizeof(int32_t));
            want.n += c.want[i].n;
        }
    }

    print_message("%s: %zu bytes of joined cases, %zu ids expected\n",
                  rel, text.len, want.n);

    assert_true(kvs_test_encode_check(v, &ctx, (const char *) text.data,
                                      text.len, 0, &want, "%s joined",
                                      rel));
    assert_true(kvs_test_round_trip_check(v, &ctx,
                                          (const char *) text.data,
                                          text.len, NULL, 0, "%s joined",
                                          rel));

    kvs_buf_free(&text);
    kvs_ids_free(&want);
    kvs_test_cases_free(&c);
    kvs_tok_ctx_free(&ctx);
    kvs_vocab_free(v);
}


static void
test_llama_spm_cases(void **state)
{
    run_vocab_cases("vocab/ggml-vocab-llama-spm.gguf");
}


static void
test_phi3_cases(void **state)
{
    run_vocab_cases("vocab/ggml-vocab-phi-3.gguf");
}


static void
test_llama_spm_long(void **state)
{
    run_long_text("vocab/ggml-vocab-llama-spm.gguf");
}


static void
test_phi3_long(void **state)
{
    run_long_text("vocab/ggml-vocab-phi-3.gguf");
}


static void
run_bos_cases(const char *rel, const spm_case_t *cases, size_t n)
{
    size_t         i, pass, rt;
    kvs_ids_t      want = { 0 };
    kvs_vocab_t   *v;
    kvs_tok_ctx_t  ctx = { 0 };

    v = kvs_test_vocab(rel, KVS_VOCAB_SPM);
    if (v == NULL) {
        skip();
    }

    pass = 0;
    rt = 0;

    for (i = 0; i < n; i++) {
        want.n = 0;
        kvs_test_parse_ids(cases[i].ids, strlen(cases[i].ids), &want);

        pass += kvs_test_encode_check(v, &ctx, cases[i].text,
                                      strlen(cases[i].text),
                                      KVS_TOK_ADD_BOS, &want,
                                      "%s case %zu", rel, i);
        rt += kvs_test_round_trip_check(v, &ctx, cases[i].text,
                                        strlen(cases[i].text), NULL, 0,
                                        "%s case %zu", rel, i);
    }

    print_message("%s: %zu/%zu cases with BOS give the expected ids, "
                  "%zu/%zu round trip\n", rel, pass, n, rt, n);

    assert_int_equal(pass, n);
    assert_int_equal(rt, n);

    kvs_ids_free(&want);
    kvs_tok_ctx_free(&ctx);
    kvs_vocab_free(v);
}


static void
test_llama2_bos(void **state)
{
    run_bos_cases("vocab/ggml-vocab-llama-spm.gguf", llama2_cases,
                  sizeof(llama2_cases) / sizeof(llama2_cases[0]));
}


static void
test_stories260k_bos(void **state)
{
    run_bos_cases("models/stories260K-f32.gguf", stories_cases,
                  sizeof(stories_cases) / sizeof(stories_cases[0]));
}


/* llama.cpp test-tokenizer-1-spm: every code point but the surrogates,
 * U+2581 (it decodes to a space) and 0x40000..0xE0000 round-trips. */
static void
test_code_points(void **state)
{
    char           s[4];
    size_t         n, tried, bad;
    uint32_t       cp;
    kvs_vocab_t   *v;
    kvs_tok_ctx_t  ctx = { 0 };

    v = kvs_test_vocab("vocab/ggml-vocab-llama-spm.gguf", KVS_VOCAB_SPM);
    if (v == NULL) {
        skip();
    }

    tried = 0;
    bad = 0;

    for (cp = 1; cp <= 0x10ffff; cp++) {
        if ((cp >= 0xd800 && cp <= 0xdfff) || cp == 0x2581
            || (cp >= 0x40000 && cp < 0xe0000))
        {
            continue;
        }

        n = kvs_test_utf8_put(s, cp);
        tried++;

        if (!kvs_test_round_trip_check(v, &ctx, s, n, NULL, bad >= 10,
                                       "code point U+%04X", cp))
        {
            bad++;
        }
    }

    print_message("code points: %zu/%zu round trip\n", tried - bad, tried);

    assert_int_equal(bad, 0);

    kvs_tok_ctx_free(&ctx);
    kvs_vocab_free(v);
}


/* One 1 MB input: encodes, every id is in range, and it round-trips. */
static void
run_big(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx, const char *name,
    const char *text, size_t len)
{
    double     t0, t1;
    size_t     i;
    kvs_buf_t  dec = { 0 };
    kvs_err_t  err;
    kvs_ids_t  ids = { 0 };

    t0 = kvs_test_now_ms();
    if (kvs_tok_encode(v, ctx, text, len, 0, &ids, &err) != KVS_OK) {
        fail_msg("%s: %s", name, err.msg);
    }
    t1 = kvs_test_now_ms();

    print_message("1 MB of %s: %zu bytes -> %zu tokens in %.1f ms\n",
                  name, len, ids.n, t1 - t0);

    assert_true(ids.n > 0);
    for (i = 0; i < ids.n; i++) {
        assert_true(ids.ids[i] >= 0 && (uint32_t) ids.ids[i] < v->n_tokens);
    }

    assert_int_equal(kvs_tok_decode(v, ids.ids, ids.n, 0, &dec, &err),
                     KVS_OK);
    assert_int_equal(dec.len, len);
    assert_memory_equal(dec.data, text, len);

    kvs_ids_free(&ids);
    kvs_buf_free(&dec);
}


static void
test_big_inputs(void **state)
{
    char           *buf;
    size_t          i, len;
    uint32_t        x;
    kvs_vocab_t    *v;
    kvs_tok_ctx_t   ctx = { 0 };

    v = kvs_test_vocab("vocab/ggml-vocab-llama-spm.gguf", KVS_VOCAB_SPM);
    if (v == NULL) {
        skip();
    }

    len = 1 << 20;
    buf = malloc(len);
    assert_non_null(buf);

    memset(buf, 'a', len);
    run_big(v, &ctx, "'a'", buf, len);

    memset(buf, ' ', len);
    run_big(v, &ctx, "' '", buf, len);

    /* U+4E2D, 3 bytes each */
    for (i = 0; i + 3 <= len; i += 3) {
        memcpy(buf + i, "\xe4\xb8\xad", 3);
    }
    run_big(v, &ctx, "U+4E2D", buf, i);

    /* letters without spaces, from a fixed LCG */
    x = 1;
    for (i = 0; i < len; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (char) ('a' + (x >> 16) % 26);
    }
    run_big(v, &ctx, "random letters", buf, len);

    free(buf);
    kvs_tok_ctx_free(&ctx);
    kvs_vocab_free(v);
}


/* A limit with SentencePiece: under it, the ids of no limit; over it,
 * KVS_ETOOLONG and a prefix of at most limit + 1 ids; a fragment that
 * cannot fit is refused before it is merged; and the scratch a long text
 * grew is released. */
static void
test_limit(void **state)
{
    static const size_t  limits[] = { 0, 1, 5, 64, 511, 512, 100000 };

    int             rc;
    char           *buf;
    size_t          i, t, len;
    kvs_err_t       err;
    kvs_ids_t       all = { 0 }, cut = { 0 };
    kvs_vocab_t    *v;
    kvs_tok_ctx_t   ctx = { 0 };

    v = kvs_test_vocab("vocab/ggml-vocab-llama-spm.gguf", KVS_VOCAB_SPM);
    if (v == NULL) {
        skip();
    }

    buf = malloc(64 * 1024);
    assert_non_null(buf);

    for (t = 0; t < 2; t++) {
        if (t == 0) {
            len = (size_t) snprintf(buf, 64, "Hello world, it was a day");
        } else {
            for (len = 0; len + 10 <= 64 * 1024; len += 10) {
                memcpy(buf + len, "once upon ", 10);
            }
        }

        all.n = 0;
        assert_int_equal(kvs_tok_encode(v, &ctx, buf, len, KVS_TOK_ADD_BOS,
                                        &all, &err), KVS_OK);

        for (i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
            cut.n = 0;
            rc = kvs_tok_encode_limit(v, &ctx, buf, len, KVS_TOK_ADD_BOS,
                                      NULL, 0, limits[i], &cut, &err);

            if (all.n <= limits[i]) {
                assert_int_equal(rc, KVS_OK);
                kvs_test_assert_ids(&cut, &all);
                continue;
            }

            assert_int_equal(rc, KVS_ETOOLONG);
            assert_true(cut.n <= limits[i] + 1);
            assert_memory_equal(cut.ids, all.ids, cut.n * sizeof(int32_t));

            /* 64 KB is more than 512 tokens can cover: not merged */
            if (t == 1 && limits[i] <= 512) {
                assert_true(cut.n <= 1);
            }
        }

        assert_true(kvs_tok_ctx_scratch_bytes(&ctx) <= KVS_TOK_SCRATCH_KEEP);
    }

    kvs_ids_free(&all);
    kvs_ids_free(&cut);
    free(buf);
    kvs_tok_ctx_free(&ctx);
    kvs_vocab_free(v);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_llama_spm_cases),
        cmocka_unit_test(test_limit),
        cmocka_unit_test(test_phi3_cases),
        cmocka_unit_test(test_llama_spm_long),
        cmocka_unit_test(test_phi3_long),
        cmocka_unit_test(test_llama2_bos),
        cmocka_unit_test(test_stories260k_bos),
        cmocka_unit_test(test_code_points),
        cmocka_unit_test(test_big_inputs),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
