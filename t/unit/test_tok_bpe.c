/*
 * Byte-level BPE and its pre-tokenizers: the llama.cpp test cases of five
 * real vocabularies (ids made by the models' own Hugging Face tokenizers),
 * round trips, pre-tokenizer splits worked out by hand from the regular
 * expressions, unknown pre-tokenizer names, and pathological inputs that
 * must finish (their times are printed, not asserted).
 */

#include "kvs_test_tok.h"

#include "tokenizer/kvs_tok_impl.h"


#define BIG      (1024 * 1024)

static const char  *vocabs[] = {
    "gpt-2", "mpt", "falcon", "deepseek-coder", "starcoder"
};


/* vocab/ggml-vocab-<name>.gguf, which must be byte-level BPE. */
static kvs_vocab_t *
open_vocab(const char *name)
{
    char  rel[128];

    snprintf(rel, sizeof(rel), "vocab/ggml-vocab-%s.gguf", name);

    return kvs_test_vocab(rel, KVS_VOCAB_BPE);
}


/* Encodes s into ids and checks that decoding gives s back. */
static void
encode_rt(kvs_vocab_t *v, kvs_tok_ctx_t *ctx, const char *s, size_t len,
    kvs_ids_t *ids)
{
    assert_true(kvs_test_round_trip_check(v, ctx, s, len, ids, 0,
                                          "round trip of %zu bytes", len));
}


/* --- the llama.cpp cases ------------------------------------------------ */

static void
run_cases(const char *name)
{
    char          rel[128];
    kvs_vocab_t  *v;

    snprintf(rel, sizeof(rel), "vocab/ggml-vocab-%s.gguf", name);
    v = kvs_test_vocab(rel, KVS_VOCAB_BPE);
    if (v == NULL) {
        skip();
    }

    assert_int_equal(kvs_test_cases_run(v, rel), 0);

    kvs_vocab_free(v);
}


static void test_cases_gpt2(void **state)           { run_cases("gpt-2"); }
static void test_cases_mpt(void **state)            { run_cases("mpt"); }
static void test_cases_falcon(void **state)         { run_cases("falcon"); }
static void test_cases_deepseek_coder(void **state)
{
    run_cases("deepseek-coder");
}
static void test_cases_starcoder(void **state)      { run_cases("starcoder"); }


/* The cache must not change results: encode the same text twice in one
 * context, and once more with each piece in a fresh context. */
static void
test_cache_consistent(void **state)
{
    static const char  text[] =
        "the cat sat on the mat, the cat sat on the mat; "
        "Zürich Zürich 12345 12345 !!! !!! \n\n \n\n";

    size_t         i;
    kvs_ids_t      a, b;
    kvs_vocab_t   *v;
    kvs_tok_ctx_t  ctx, ctx2;

    v = open_vocab("gpt-2");
    if (v == NULL) {
        skip();
    }

    memset(&ctx, 0, sizeof(ctx));
    memset(&ctx2, 0, sizeof(ctx2));
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));

    encode_rt(v, &ctx, text, sizeof(text) - 1, &a);
    for (i = 0; i < 3; i++) {
        encode_rt(v, &ctx, text, sizeof(text) - 1, &b);
        kvs_test_assert_ids(&a, &b);
    }

    encode_rt(v, &ctx2, text, sizeof(text) - 1, &b);
    kvs_test_assert_ids(&a, &b);

    kvs_ids_free(&a);
    kvs_ids_free(&b);
    kvs_tok_ctx_free(&ctx);
    kvs_tok_ctx_free(&ctx2);
    kvs_vocab_free(v);
}


/* Two vocabularies through one context: the cache must follow. */
static void
test_two_vocabs_one_ctx(void **state)
{
    static const char  text[] = "Hello world 12345 Hello world";

    kvs_ids_t      a1, b1, a2;
    kvs_vocab_t   *va, *vb;
    kvs_tok_ctx_t  ctx, fresh;

    va = open_vocab("gpt-2");
    vb = open_vocab("starcoder");
    if (va == NULL || vb == NULL) {
        kvs_vocab_free(va);
        kvs_vocab_free(vb);
        skip();
    }

    memset(&ctx, 0, sizeof(ctx));
    memset(&fresh, 0, sizeof(fresh));
    memset(&a1, 0, sizeof(a1));
    memset(&b1, 0, sizeof(b1));
    memset(&a2, 0, sizeof(a2));

    encode_rt(va, &ctx, text, sizeof(text) - 1, &a1);
    encode_rt(vb, &ctx, text, sizeof(text) - 1, &b1);
    encode_rt(va, &ctx, text, sizeof(text) - 1, &a2);
    kvs_test_assert_ids(&a1, &a2);

    encode_rt(vb, &fresh, text, sizeof(text) - 1, &a2);
    kvs_test_assert_ids(&b1, &a2);

    kvs_ids_free(&a1);
    kvs_ids_free(&b1);
    kvs_ids_free(&a2);
    kvs_tok_ctx_free(&ctx);
    kvs_tok_ctx_free(&fresh);
    kvs_vocab_free(va);
    kvs_vocab_free(vb);
}


/* Falcon has no token for byte 0x03 and no unknown token: the byte is
 * dropped, as Hugging Face's BPE and llama.cpp drop it, and the text
 * around it is tokenized as usual.  StarCoder has none for 0xF1 (the
 * lead byte of U+40000..U+7FFFF) but has an unknown token: that byte
 * becomes it. */
static void
test_missing_bytes(void **state)
{
    size_t         i, nunk;
    kvs_err_t      err;
    kvs_ids_t      ids, want;
    kvs_vocab_t   *v;
    kvs_tok_ctx_t  ctx;

    memset(&ctx, 0, sizeof(ctx));
    memset(&ids, 0, sizeof(ids));
    memset(&want, 0, sizeof(want));

    v = open_vocab("falcon");
    if (v != NULL) {
        assert_true(v->byte_token[0x03] < 0);
        assert_true(v->unk < 0);
        assert_int_equal(kvs_tok_encode(v, &ctx, "x\x03y", 3, 0, &ids, &err),
                         KVS_OK);
        assert_int_equal(kvs_tok_encode(v, &ctx, "x", 1, 0, &want, &err),
                         KVS_OK);
        assert_int_equal(kvs_tok_encode(v, &ctx, "y", 1, 0, &want, &err),
                         KVS_OK);
        kvs_test_assert_ids(&ids, &want);
        ids.n = 0;
        kvs_tok_ctx_free(&ctx);
        kvs_vocab_free(v);
    }

    v = open_vocab("starcoder");
    if (v != NULL) {
        assert_true(v->byte_token[0xF1] < 0);
        assert_true(v->unk >= 0);
        assert_int_equal(kvs_tok_encode(v, &ctx, "a\xf1\x80\x80\x80" "b",
                                        6, 0, &ids, &err), KVS_OK);
        nunk = 0;
        for (i = 0; i < ids.n; i++) {
            nunk += ids.ids[i] == v->unk;
        }
        assert_int_equal(nunk, 1);
        assert_int_equal(ids.ids[0], v->byte_token['a']);
        assert_int_equal(ids.ids[ids.n - 1], v->byte_token['b']);
        kvs_tok_ctx_free(&ctx);
        kvs_vocab_free(v);
    }

    kvs_ids_free(&ids);
    kvs_ids_free(&want);
}


/* --- pre-tokenizer splits, derived by hand from the regexes -------------- */

typedef struct {
    const char  *pre;
    const char  *text;
    const char  *pieces[12];          /* NULL-terminated */
} split_case_t;

static const split_case_t  split_cases[] = {
    /* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+
     * |\s+(?!\S)|\s+ ; a space run before a word leaves its last space to
     * the word. */
    { "gpt-2", "Hello  world", { "Hello", " ", " world" } },
    { "gpt-2", "I'm 3333 ok!!", { "I", "'m", " 3333", " ok", "!!" } },
    { "gpt-2", "a\n\nb", { "a", "\n", "\n", "b" } },
    { "gpt-2", "  x", { " ", " x" } },
    { "gpt-2", "x  ", { "x", "  " } },
    { "gpt-2", "FOO'S", { "FOO", "'", "S" } },     /* case-sensitive */
    { "gpt-2", "a\xe1\xa0\x8e" "b", { "a", "\xe1\xa0\x8e", "b" } },
                                      /* U+180E is not \s: own piece */
    { "default", " (x)", { " (", "x", ")" } },
    { "mpt", "foo's bar", { "foo", "'s", " bar" } },

    /* Llama 3: (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
     * | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
    { "llama-bpe", "3333", { "333", "3" } },
    { "llama-bpe", "12345", { "123", "45" } },
    { "llama-bpe", " Hello", { " Hello" } },
    { "llama-bpe", "Hello  world", { "Hello", " ", " world" } },
    { "llama-bpe", "x\n\n  y", { "x", "\n\n", " ", " y" } },
    { "llama-bpe", "a,\n", { "a", ",\n" } },
    { "llama-bpe", "FOO'S", { "FOO", "'S" } },      /* case-insensitive */
    { "llama-bpe", "(x", { "(x" } },
    { "llama3", "3333", { "333", "3" } },

    /* Qwen2: as Llama 3 with \p{N} one digit at a time */
    { "qwen2", "3333", { "3", "3", "3", "3" } },
    { "qwen2", " Hello", { " Hello" } },
    { "deepseek-r1-qwen", "a12", { "a", "1", "2" } },

    /* StarCoder: \p{N} isolated, then the GPT-2 regex per piece */
    { "starcoder", "a 123b", { "a", " ", "1", "2", "3", "b" } },
    { "starcoder", "Hello world", { "Hello", " world" } },
    { "refact", "x1", { "x", "1" } },

    /* Falcon: [\p{P}$+<=>^`|~]+ isolated, GPT-2 regex, then numeric runs
     * of the byte-level text and [0-9]{3}: "½" is C2 BD and BD shows as
     * "½", numeric; "²" is C2 B2 likewise. */
    { "falcon", "Hello, world!!", { "Hello", ",", " world", "!!" } },
    { "falcon", "a 12345", { "a", " ", "123", "45" } },
    { "falcon", "x=1+2", { "x", "=", "1", "+", "2" } },
    { "falcon", " \xc2\xbd", { " \xc2", "\xbd" } },
    { "falcon", "1\xc2\xb2" "3", { "1", "\xc2", "\xb2" "3" } },

    /* DeepSeek Coder: [\r\n], \s?\p{L}+, \s?\p{P}+, CJK, \p{N} */
    { "deepseek-coder", "Hello world\n123",
      { "Hello", " world", "\n", "1", "2", "3" } },
    { "deepseek-coder", "a, b.", { "a", ",", " b", "." } },
    { "deepseek-coder", "  x", { " ", " x" } },

    /* DeepSeek LLM: [\r\n], \s?[cased letters]+, \s?[ASCII and fullwidth
     * punctuation]+, \s+$, CJK, \p{N}+ */
    { "deepseek-llm", "Hello world 42  ",
      { "Hello", " world", " ", "42", "  " } },
    { "deepseek-llm", "\xe4\xbd\xa0\xe5\xa5\xbd" "123",
      { "\xe4\xbd\xa0\xe5\xa5\xbd", "123" } },
    { "deepseek-llm", "a\r\nb", { "a", "\r", "\n", "b" } },

    { NULL, NULL, { NULL } }
};


/* Checks that pieces are non-empty and cover text[0..len) in order. */
static void
check_cover(const kvs_piece_t *pieces, size_t n, size_t len)
{
    size_t  i, pos;

    pos = 0;
    for (i = 0; i < n; i++) {
        assert_int_equal(pieces[i].off, pos);
        assert_true(pieces[i].len > 0);
        pos += pieces[i].len;
    }

    assert_int_equal(pos, len);
}


static void
test_pretok_split(void **state)
{
    int                 failed;
    size_t              n, i, k, len;
    kvs_err_t           err;
    kvs_pretok_t       *p;
    kvs_tok_ctx_t       ctx;
    const kvs_piece_t  *pieces;
    const split_case_t *c;

    memset(&ctx, 0, sizeof(ctx));
    failed = 0;

    for (c = split_cases; c->pre != NULL; c++) {
        assert_true(kvs_pretok_known(c->pre));
        if (kvs_pretok_new(&p, c->pre, &err) != KVS_OK) {
            fail_msg("%s: %s", c->pre, err.msg);
        }

        len = strlen(c->text);
        assert_int_equal(kvs_pretok_split(p, &ctx, c->text, len, &pieces,
                                          &n, &err), KVS_OK);

        for (k = 0; c->pieces[k] != NULL; k++) {
            /* void */
        }

        check_cover(pieces, n, len);

        for (i = 0; i < n && i < k; i++) {
            if (strlen(c->pieces[i]) != pieces[i].len
                || memcmp(c->pieces[i], c->text + pieces[i].off,
                          pieces[i].len) != 0)
            {
                break;
            }
        }

        if (i != n || n != k) {
            print_message("%s \"", c->pre);
            kvs_test_print_escaped(c->text, len);
            print_message("\": got");
            for (i = 0; i < n; i++) {
                print_message(" \"");
                kvs_test_print_escaped(c->text + pieces[i].off, pieces[i].len);
                print_message("\"");
            }
            print_message("\n");
            failed++;
        }

        /* the empty text has no pieces */
        assert_int_equal(kvs_pretok_split(p, &ctx, "", 0, &pieces, &n,
                                          &err), KVS_OK);
        assert_int_equal(n, 0);

        kvs_pretok_free(p);
    }

    assert_int_equal(failed, 0);

    kvs_tok_ctx_free(&ctx);
}


static void
test_pretok_unknown(void **state)
{
    kvs_err_t      err;
    kvs_pretok_t  *p;

    p = (kvs_pretok_t *) &err;         /* must be reset to NULL */
    assert_int_equal(kvs_pretok_new(&p, "no-such-pre", &err),
                     KVS_EUNSUPPORTED);
    assert_null(p);
    assert_non_null(strstr(err.msg, "\"no-such-pre\""));
    assert_non_null(strstr(err.msg, "llama-bpe"));     /* lists known */
    assert_false(kvs_pretok_known("no-such-pre"));
    assert_false(kvs_pretok_known(""));
    assert_false(kvs_pretok_known("GPT-2"));

    assert_true(kvs_pretok_known("default"));
    assert_true(kvs_pretok_known("gpt-2"));
    assert_true(kvs_pretok_known("llama-bpe"));
    assert_true(kvs_pretok_known("llama3"));
    assert_true(kvs_pretok_known("qwen2"));
    assert_true(kvs_pretok_known("deepseek-r1-qwen"));
    assert_true(kvs_pretok_known("deepseek-llm"));
    assert_true(kvs_pretok_known("deepseek-coder"));
    assert_true(kvs_pretok_known("falcon"));
    assert_true(kvs_pretok_known("mpt"));
    assert_true(kvs_pretok_known("starcoder"));
    assert_true(kvs_pretok_known("refact"));
}


/* --- pathological inputs ------------------------------------------------ */

/* Fills buf[0..BIG) (whole characters; returns the length) by repeating
 * unit, or with random letters when unit is NULL. */
static size_t
fill(char *buf, const char *unit)
{
    size_t    i, u;
    uint32_t  x;

    if (unit == NULL) {
        x = 12345;
        for (i = 0; i < BIG; i++) {
            x = x * 1103515245 + 12345;
            buf[i] = (char) ((x >> 16) % 52 < 26 ? 'a' + (x >> 16) % 26
                                                  : 'A' + (x >> 16) % 26);
        }
        return BIG;
    }

    u = strlen(unit);
    for (i = 0; i + u <= BIG; i += u) {
        memcpy(buf + i, unit, u);
    }

    return i;
}


static const char  *big_units[] = {
    "a", " ", "1", "!", "\n", "\xe4\xb8\xad", "\xf0\x9f\xa6\x99",
    NULL                              /* random letters, no spaces */
};

static const char  *big_names[] = {
    "a", "space", "1", "!", "\\n", "CJK", "emoji", "random letters"
};


static void
test_big_inputs(void **state)
{
    char           *buf;
    size_t          i, u, len;
    double          t0;
    kvs_ids_t       ids;
    kvs_vocab_t    *v;
    kvs_tok_ctx_t   ctx;

    buf = malloc(BIG);
    assert_non_null(buf);
    memset(&ids, 0, sizeof(ids));

    for (i = 0; i < sizeof(vocabs) / sizeof(vocabs[0]); i++) {
        v = open_vocab(vocabs[i]);
        if (v == NULL) {
            continue;
        }

        memset(&ctx, 0, sizeof(ctx));

        for (u = 0; u < sizeof(big_names) / sizeof(big_names[0]); u++) {
            len = fill(buf, big_units[u]);
            t0 = kvs_test_now_ms();
            encode_rt(v, &ctx, buf, len, &ids);
            print_message("  %-14s 1 MB of %-14s %8.1f ms  %zu ids\n",
                          vocabs[i], big_names[u], kvs_test_now_ms() - t0,
                          ids.n);
            assert_true(ids.n > 0);
        }

        kvs_tok_ctx_free(&ctx);
        kvs_vocab_free(v);
    }

    kvs_ids_free(&ids);
    free(buf);
}


/* Every pre-tokenizer on the 1 MB inputs above and on inputs that are
 * hard for regex engines: long whitespace runs that end in something
 * else (quadratic for "\s+$" searched naively). */
static void
test_big_pretok(void **state)
{
    static const char  *names[] = {
        "gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder",
        "falcon", "starcoder"
    };
    static const char  *tails[] = { "1", "x", "!", "\n", "" };

    char               *buf;
    size_t              i, t, n, len, k, u;
    double              t0;
    kvs_err_t           err;
    kvs_pretok_t       *p;
    kvs_tok_ctx_t       ctx;
    const char         *lab;
    const kvs_piece_t  *pieces;

    buf = malloc(BIG + 8);
    assert_non_null(buf);
    memset(&ctx, 0, sizeof(ctx));

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        assert_int_equal(kvs_pretok_new(&p, names[i], &err), KVS_OK);

        for (u = 0; u < sizeof(big_names) / sizeof(big_names[0]); u++) {
            len = fill(buf, big_units[u]);
            t0 = kvs_test_now_ms();
            assert_int_equal(kvs_pretok_split(p, &ctx, buf, len, &pieces,
                                              &n, &err), KVS_OK);
            print_message("  %-14s 1 MB of %-24s %7.1f ms  %zu pieces\n",
                          names[i], big_names[u], kvs_test_now_ms() - t0, n);
            check_cover(pieces, n, len);
        }

        for (t = 0; t < sizeof(tails) / sizeof(tails[0]); t++) {
            for (k = 0; k < 2; k++) {
                /* k = 0: spaces; k = 1: spaces and tabs */
                for (len = 0; len < BIG; len++) {
                    buf[len] = k == 1 && len % 3 == 0 ? '\t' : ' ';
                }
                memcpy(buf + len, tails[t], strlen(tails[t]));
                len += strlen(tails[t]);

                t0 = kvs_test_now_ms();
                assert_int_equal(kvs_pretok_split(p, &ctx, buf, len,
                                                  &pieces, &n, &err),
                                 KVS_OK);
                lab = t == 3 ? "\\n" : tails[t];
                print_message("  %-14s 1 MB of %-11s + \"%s\"%*s %7.1f ms  "
                              "%zu pieces\n", names[i],
                              k ? "spaces/tabs" : "spaces", lab,
                              (int) (8 - strlen(lab)), "",
                              kvs_test_now_ms() - t0, n);
                check_cover(pieces, n, len);
            }
        }

        kvs_pretok_free(p);
    }

    kvs_tok_ctx_free(&ctx);
    free(buf);
}


/* --- batches, the limit and the scratch bound --------------------------- */

/* A mixed text of about len bytes: words, digits, punctuation, runs of
 * spaces and newlines, CJK and an emoji, so that every pattern's
 * alternatives meet a batch's end somewhere. */
static size_t
fill_mixed(char *buf, size_t len)
{
    static const char  *units[] = {
        "once ", "upon ", "a ", "time ", "12345 ", "x=3.14; ", "  ",
        "\n\n", "   \t", "don't ", "\xe4\xb8\xad\xe6\x96\x87 ",
        "\xf0\x9f\xa6\x99", "HELLO ", "?! ", "         "
    };

    size_t    n, u, k;
    uint32_t  x;

    n = 0;
    x = 7;
    for ( ;; ) {
        x = x * 1103515245 + 12345;
        u = (x >> 16) % (sizeof(units) / sizeof(units[0]));
        k = strlen(units[u]);
        if (n + k > len) {
            return n;
        }
        memcpy(buf + n, units[u], k);
        n += k;
    }
}


/* kvs_pretok_split_from() in batches of 1, 3, 64 and 1024 pieces gives
 * the pieces of one kvs_pretok_split(), for every pre-tokenizer. */
static void
test_pretok_batches(void **state)
{
    static const char  *names[] = {
        "gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder",
        "falcon", "starcoder", "mpt"
    };
    static const size_t  maxes[] = { 1, 3, 64, 1024 };

    char               *buf;
    size_t              i, m, n, len, from, got, k, u, nwhole;
    kvs_err_t           err;
    kvs_piece_t        *whole;
    kvs_pretok_t       *p;
    kvs_tok_ctx_t       ctx;
    const kvs_piece_t  *pieces;

    /* fill() writes up to BIG bytes */
    buf = malloc(BIG + 8);
    assert_non_null(buf);
    memset(&ctx, 0, sizeof(ctx));

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        assert_int_equal(kvs_pretok_new(&p, names[i], &err), KVS_OK);

        for (u = 0; u < 2; u++) {
            /* mixed text; a run of 4000 spaces before a word, where
             * "\s+(?!\S)" backs off one space */
            if (u == 0) {
                len = fill_mixed(buf, 64 * 1024);
            } else {
                memset(buf, ' ', 4000);
                memcpy(buf + 4000, "end", 3);
                len = 4003;
            }

            assert_int_equal(kvs_pretok_split(p, &ctx, buf, len, &pieces,
                                              &n, &err), KVS_OK);
            nwhole = n;
            assert_true(n > 0);
            whole = malloc(n * sizeof(kvs_piece_t));
            assert_non_null(whole);
            memcpy(whole, pieces, n * sizeof(kvs_piece_t));

            for (m = 0; m < sizeof(maxes) / sizeof(maxes[0]); m++) {
                got = 0;
                for (from = 0; from < len; /* void */) {
                    k = from;
                    assert_int_equal(kvs_pretok_split_from(p, &ctx, buf, len,
                                         from, maxes[m], &pieces, &n, &from,
                                         &err), KVS_OK);
                    assert_true(from > k);
                    assert_true(got + n <= nwhole);

                    for (k = 0; k < n; k++, got++) {
                        if (pieces[k].off != whole[got].off
                            || pieces[k].len != whole[got].len)
                        {
                            fail_msg("%s, batches of %zu: piece %zu is "
                                     "[%u, +%u), one call made [%u, +%u)",
                                     names[i], maxes[m], got, pieces[k].off,
                                     pieces[k].len, whole[got].off,
                                     whole[got].len);
                        }
                    }
                }

                assert_int_equal(got, nwhole);
            }

            free(whole);
        }

        kvs_pretok_free(p);
    }

    kvs_tok_ctx_free(&ctx);
    free(buf);
}


/* Encoding with a limit: under it, the ids of no limit; over it,
 * KVS_ETOOLONG with at most limit + 1 ids, the first ids of the whole
 * encoding, and a prompt of 1 MB stops early (its time is printed). */
static void
test_encode_limit(void **state)
{
    static const size_t  limits[] = { 0, 1, 2, 7, 100, 511, 512, 4096 };

    int             rc;
    char           *buf;
    size_t          i, t, len;
    double          t0, t_all, t_cut;
    kvs_err_t       err;
    kvs_ids_t       all, cut;
    kvs_vocab_t    *v;
    kvs_tok_ctx_t   ctx;

    v = open_vocab("gpt-2");
    if (v == NULL) {
        skip();
    }

    buf = malloc(BIG + 8);
    assert_non_null(buf);
    memset(&ctx, 0, sizeof(ctx));
    memset(&all, 0, sizeof(all));
    memset(&cut, 0, sizeof(cut));

    for (t = 0; t < 3; t++) {
        /* mixed text, one piece of 1 MB, a short text */
        len = t == 0 ? fill_mixed(buf, BIG)
              : t == 1 ? fill(buf, big_units[0])
              : (size_t) snprintf(buf, 64, "Hello world, once upon a time");

        all.n = 0;
        t0 = kvs_test_now_ms();
        assert_int_equal(kvs_tok_encode(v, &ctx, buf, len, KVS_TOK_ADD_BOS,
                                        &all, &err), KVS_OK);
        t_all = kvs_test_now_ms() - t0;

        for (i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
            cut.n = 0;
            t0 = kvs_test_now_ms();
            rc = kvs_tok_encode_limit(v, &ctx, buf, len, KVS_TOK_ADD_BOS,
                                      NULL, 0, limits[i], &cut, &err);
            t_cut = kvs_test_now_ms() - t0;

            if (all.n <= limits[i]) {
                assert_int_equal(rc, KVS_OK);
                kvs_test_assert_ids(&cut, &all);
                continue;
            }

            assert_int_equal(rc, KVS_ETOOLONG);
            assert_true(cut.n <= limits[i] + 1);
            assert_true(cut.n <= all.n);
            assert_memory_equal(cut.ids, all.ids, cut.n * sizeof(int32_t));

            if (len >= BIG / 2 && limits[i] <= 512) {
                print_message("  %zu bytes: all %zu ids in %.1f ms; over "
                              "%zu in %.3f ms (%zu ids kept)\n", len, all.n,
                              t_all, limits[i], t_cut, cut.n);
                /* a 512-token cut of a 1 MB text is far cheaper than the
                 * whole; a third leaves room for a loaded machine */
                assert_true(t_cut < t_all / 3 + 5);
            }
        }

        /* the bound is on out->n: ids held before the call count */
        if (all.n > 3) {
            cut.n = 0;
            assert_int_equal(kvs_ids_push(&cut, 1), KVS_OK);
            assert_int_equal(kvs_ids_push(&cut, 2), KVS_OK);
            assert_int_equal(kvs_tok_encode_limit(v, &ctx, buf, len,
                                 KVS_TOK_ADD_BOS, NULL, 0, all.n, &cut,
                                 &err), KVS_ETOOLONG);
            assert_true(cut.n <= all.n + 1);
            assert_int_equal(cut.ids[0], 1);
            assert_int_equal(cut.ids[1], 2);
        }
    }

    kvs_ids_free(&all);
    kvs_ids_free(&cut);
    kvs_tok_ctx_free(&ctx);
    kvs_vocab_free(v);
    free(buf);
}


/* What a context keeps after a call is bounded: a 1 MB piece grows the
 * BPE arrays to tens of MB while it is merged, and they are released when
 * the call returns; a short text's scratch is kept, warm. */
static void
test_scratch_bound(void **state)
{
    char           *buf;
    size_t          len, u, kept;
    kvs_err_t       err;
    kvs_ids_t       ids, fresh;
    kvs_vocab_t    *v;
    kvs_tok_ctx_t   ctx;

    v = open_vocab("gpt-2");
    if (v == NULL) {
        skip();
    }

    buf = malloc(BIG + 8);
    assert_non_null(buf);
    memset(&ctx, 0, sizeof(ctx));
    memset(&ids, 0, sizeof(ids));

    assert_int_equal(kvs_tok_ctx_scratch_bytes(&ctx), 0);

    len = (size_t) snprintf(buf, 64, "Hello world, once upon a time");
    assert_int_equal(kvs_tok_encode(v, &ctx, buf, len, 0, &ids, &err),
                     KVS_OK);
    kept = kvs_tok_ctx_scratch_bytes(&ctx);
    print_message("  a short text: %zu bytes of scratch kept\n", kept);
    assert_true(kept > 0);
    assert_true(kept <= KVS_TOK_SCRATCH_KEEP);

    for (u = 0; u < sizeof(big_units) / sizeof(big_units[0]); u++) {
        len = fill(buf, big_units[u]);
        ids.n = 0;
        assert_int_equal(kvs_tok_encode(v, &ctx, buf, len, 0, &ids, &err),
                         KVS_OK);
        print_message("  1 MB of %-16s %8zu ids, %zu bytes of scratch "
                      "kept\n", big_names[u], ids.n,
                      kvs_tok_ctx_scratch_bytes(&ctx));
        assert_true(kvs_tok_ctx_scratch_bytes(&ctx) <= KVS_TOK_SCRATCH_KEEP);
    }

    /* still correct after a release: the same ids as a fresh context */
    len = fill_mixed(buf, 4096);
    ids.n = 0;
    assert_int_equal(kvs_tok_encode(v, &ctx, buf, len, 0, &ids, &err),
                     KVS_OK);
    memset(&fresh, 0, sizeof(fresh));
    kvs_test_encode(v, buf, len, 0, &fresh);
    kvs_test_assert_ids(&ids, &fresh);

    kvs_ids_free(&fresh);
    kvs_ids_free(&ids);
    kvs_tok_ctx_free(&ctx);
    kvs_vocab_free(v);
    free(buf);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pretok_unknown),
        cmocka_unit_test(test_pretok_split),
        cmocka_unit_test(test_cases_gpt2),
        cmocka_unit_test(test_cases_mpt),
        cmocka_unit_test(test_cases_falcon),
        cmocka_unit_test(test_cases_deepseek_coder),
        cmocka_unit_test(test_cases_starcoder),
        cmocka_unit_test(test_cache_consistent),
        cmocka_unit_test(test_two_vocabs_one_ctx),
        cmocka_unit_test(test_missing_bytes),
        cmocka_unit_test(test_big_inputs),
        cmocka_unit_test(test_big_pretok),
        cmocka_unit_test(test_pretok_batches),
        cmocka_unit_test(test_encode_limit),
        cmocka_unit_test(test_scratch_bound),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
