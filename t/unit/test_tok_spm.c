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

#include <time.h>

#include "kvs_test.h"

#include "tokenizer/kvs_tok.h"
#include "tokenizer/kvs_vocab.h"


#define SEP  "\n__ggml_vocab_test__\n"


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


static kvs_vocab_t *
open_vocab(const char *rel)
{
    const char   *path;
    kvs_err_t     err;
    kvs_vocab_t  *v;

    path = kvs_test_fixture(rel);
    if (path == NULL) {
        return NULL;
    }

    if (kvs_vocab_open(&v, path, &err) != KVS_OK) {
        fail_msg("%s: %s", path, err.msg);
    }

    assert_int_equal(v->kind, KVS_VOCAB_SPM);

    return v;
}


/* Parses space-separated ids into a (zeroed) array. */
static void
parse_ids(const char *s, size_t len, kvs_ids_t *a)
{
    char        *end;
    long         id;
    const char  *p, *e;

    p = s;
    e = s + len;

    while (p < e) {
        if (*p == ' ') {
            p++;
            continue;
        }

        id = strtol(p, &end, 10);
        assert_true(end > p && end <= e);
        assert_int_equal(kvs_ids_push(a, (int32_t) id), KVS_OK);
        p = end;
    }
}


static void
print_text(const char *what, const char *s, size_t len)
{
    char    buf[4096];
    size_t  i, j;

    for (i = 0, j = 0; i < len && j + 8 < sizeof(buf); i++) {
        unsigned char c = (unsigned char) s[i];

        if (c == '\n') {
            j += (size_t) snprintf(buf + j, sizeof(buf) - j, "\\n");
        } else if (c == '\t') {
            j += (size_t) snprintf(buf + j, sizeof(buf) - j, "\\t");
        } else if (c < 0x20 || c == 0x7f) {
            j += (size_t) snprintf(buf + j, sizeof(buf) - j, "\\x%02x", c);
        } else {
            buf[j++] = (char) c;
        }
    }
    buf[j] = '\0';

    print_message("  %s: '%s'\n", what, buf);
}


static void
print_ids(const char *what, const int32_t *ids, size_t n)
{
    size_t  i;

    print_message("  %s:", what);
    for (i = 0; i < n; i++) {
        print_message(" %d", ids[i]);
    }
    print_message("\n");
}


/* 1 if text encodes to want (printing the difference if not). */
static int
check_encode(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx, const char *label,
    size_t idx, const char *text, size_t len, unsigned flags,
    const kvs_ids_t *want)
{
    int        ok;
    size_t     i, from;
    kvs_err_t  err;
    kvs_ids_t  got = { 0 };

    if (kvs_tok_encode(v, ctx, text, len, flags, &got, &err) != KVS_OK) {
        print_message("%s case %zu: encode failed: %s\n", label, idx,
                      err.msg);
        print_text("input", text, len);
        kvs_ids_free(&got);
        return 0;
    }

    ok = got.n == want->n
         && (got.n == 0
             || memcmp(got.ids, want->ids, got.n * sizeof(int32_t)) == 0);

    if (!ok) {
        /* long texts: only the ids around the first difference */
        for (i = 0; i < got.n && i < want->n; i++) {
            if (got.ids[i] != want->ids[i]) {
                break;
            }
        }

        from = i > 8 ? i - 8 : 0;

        print_message("%s case %zu: ids differ from id %zu on (%zu ids "
                      "expected, %zu got)\n", label, idx, i, want->n,
                      got.n);
        print_text("input", text, len < 400 ? len : 400);
        print_ids("expected", want->ids + from,
                  want->n - from < 40 ? want->n - from : 40);
        print_ids("got     ", got.ids + from,
                  got.n - from < 40 ? got.n - from : 40);
    }

    kvs_ids_free(&got);

    return ok;
}


/* 1 if decode(encode(text)) == text (printing the difference if not). */
static int
check_round_trip(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *label, size_t idx, const char *text, size_t len,
    int quiet)
{
    int        ok;
    kvs_buf_t  dec = { 0 };
    kvs_err_t  err;
    kvs_ids_t  ids = { 0 };

    ok = kvs_tok_encode(v, ctx, text, len, 0, &ids, &err) == KVS_OK
         && kvs_tok_decode(v, ids.ids, ids.n, 0, &dec, &err) == KVS_OK;

    if (!ok) {
        print_message("%s case %zu: round trip failed: %s\n", label, idx,
                      err.msg);

    } else if (dec.len != len || (len > 0 && memcmp(dec.data, text, len))) {
        ok = 0;
        if (!quiet) {
            print_message("%s case %zu: decode(encode(x)) != x\n", label,
                          idx);
            print_text("input  ", text, len);
            print_ids("ids    ", ids.ids, ids.n);
            print_text("decoded", (const char *) dec.data, dec.len);
        }
    }

    kvs_ids_free(&ids);
    kvs_buf_free(&dec);

    return ok;
}


/* The llama.cpp test-tokenizer-0 cases of one vocabulary: pointers into
 * the .inp text and the .out ids. */
typedef struct {
    char        *inp;
    char        *outf;
    size_t       n;
    const char  *text[64];
    size_t       len[64];
    kvs_ids_t    want[64];
} vocab_cases_t;


static void
load_cases(const char *rel, vocab_cases_t *c)
{
    char    path[1200];
    char   *p, *e, *q, *line, *nl;
    size_t  inp_len = 0, out_len = 0;

    memset(c, 0, sizeof(*c));

    snprintf(path, sizeof(path), "%s.inp", kvs_test_fixture(rel));
    c->inp = (char *) kvs_test_slurp(path, &inp_len);
    snprintf(path, sizeof(path), "%s.out", kvs_test_fixture(rel));
    c->outf = (char *) kvs_test_slurp(path, &out_len);
    assert_non_null(c->inp);
    assert_non_null(c->outf);
    assert_true(inp_len > 0 && out_len > 0);

    p = c->inp;
    e = c->inp + inp_len;
    line = c->outf;

    while (p < e) {
        assert_true(c->n < 64);

        q = memmem(p, (size_t) (e - p), SEP, sizeof(SEP) - 1);
        assert_non_null(q);

        nl = memchr(line, '\n', (size_t) (c->outf + out_len - line));
        assert_non_null(nl);

        c->text[c->n] = p;
        c->len[c->n] = (size_t) (q - p);
        parse_ids(line, (size_t) (nl - line), &c->want[c->n]);
        c->n++;

        p = q + sizeof(SEP) - 1;
        line = nl + 1;
    }

    assert_int_equal(c->n, 46);
    assert_int_equal(line, c->outf + out_len);
}


static void
free_cases(vocab_cases_t *c)
{
    size_t  i;

    for (i = 0; i < c->n; i++) {
        kvs_ids_free(&c->want[i]);
    }

    free(c->inp);
    free(c->outf);
}


static void
run_vocab_cases(const char *rel)
{
    size_t          i, pass, rt;
    kvs_vocab_t    *v;
    kvs_tok_ctx_t   ctx = { 0 };
    vocab_cases_t   c;

    v = open_vocab(rel);
    if (v == NULL) {
        skip();
    }

    load_cases(rel, &c);

    pass = 0;
    rt = 0;

    for (i = 0; i < c.n; i++) {
        pass += check_encode(v, &ctx, rel, i, c.text[i], c.len[i], 0,
                             &c.want[i]);
        rt += check_round_trip(v, &ctx, rel, i, c.text[i], c.len[i], 0);
    }

    print_message("%s: %zu/%zu cases give the expected ids, %zu/%zu round "
                  "trip\n", rel, pass, c.n, rt, c.n);

    assert_int_equal(pass, c.n);
    assert_int_equal(rt, c.n);

    free_cases(&c);
    kvs_tok_ctx_free(&ctx);
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
    size_t          i, pass;
    kvs_buf_t       text = { 0 };
    kvs_ids_t       want = { 0 };
    kvs_vocab_t    *v;
    kvs_tok_ctx_t   ctx = { 0 };
    vocab_cases_t   c;

    v = open_vocab(rel);
    if (v == NULL) {
        skip();
    }

    load_cases(rel, &c);

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

    assert_true(check_encode(v, &ctx, rel, 0, (const char *) text.data,
                             text.len, 0, &want));
    assert_true(check_round_trip(v, &ctx, rel, 0, (const char *) text.data,
                                 text.len, 0));

    kvs_buf_free(&text);
    kvs_ids_free(&want);
    free_cases(&c);
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

    v = open_vocab(rel);
    if (v == NULL) {
        skip();
    }

    pass = 0;
    rt = 0;

    for (i = 0; i < n; i++) {
        want.n = 0;
        parse_ids(cases[i].ids, strlen(cases[i].ids), &want);

        pass += check_encode(v, &ctx, rel, i, cases[i].text,
                             strlen(cases[i].text), KVS_TOK_ADD_BOS, &want);
        rt += check_round_trip(v, &ctx, rel, i, cases[i].text,
                               strlen(cases[i].text), 0);
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


/* Writes cp as UTF-8; returns the length. */
static size_t
put_utf8(char *s, uint32_t cp)
{
    if (cp < 0x80) {
        s[0] = (char) cp;
        return 1;
    }

    if (cp < 0x800) {
        s[0] = (char) (0xc0 | cp >> 6);
        s[1] = (char) (0x80 | (cp & 0x3f));
        return 2;
    }

    if (cp < 0x10000) {
        s[0] = (char) (0xe0 | cp >> 12);
        s[1] = (char) (0x80 | (cp >> 6 & 0x3f));
        s[2] = (char) (0x80 | (cp & 0x3f));
        return 3;
    }

    s[0] = (char) (0xf0 | cp >> 18);
    s[1] = (char) (0x80 | (cp >> 12 & 0x3f));
    s[2] = (char) (0x80 | (cp >> 6 & 0x3f));
    s[3] = (char) (0x80 | (cp & 0x3f));
    return 4;
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

    v = open_vocab("vocab/ggml-vocab-llama-spm.gguf");
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

        n = put_utf8(s, cp);
        tried++;

        if (!check_round_trip(v, &ctx, "code point", cp, s, n, bad >= 10)) {
            bad++;
        }
    }

    print_message("code points: %zu/%zu round trip\n", tried - bad, tried);

    assert_int_equal(bad, 0);

    kvs_tok_ctx_free(&ctx);
    kvs_vocab_free(v);
}


static double
now_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
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

    t0 = now_ms();
    if (kvs_tok_encode(v, ctx, text, len, 0, &ids, &err) != KVS_OK) {
        fail_msg("%s: %s", name, err.msg);
    }
    t1 = now_ms();

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

    v = open_vocab("vocab/ggml-vocab-llama-spm.gguf");
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


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_llama_spm_cases),
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
