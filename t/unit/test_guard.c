/*
 * test_guard: the guard's rule set and streaming matcher
 * (src/guard/kvs_guard.h).  Hand cases: errors naming file and line
 * (syntax, PCRE2's message and offset, unbounded, outside the subset),
 * windows measured, window= accepted, redact and stop written out, the
 * hold flushed at the end, invalid UTF-8.  Then the property: for random
 * texts, every split into two chunks and random chunkings give exactly
 * the output and hits of the naive definition (kvs_guard_ref.h) over the
 * whole text, and never hold back W_max bytes or more.
 */

#include "kvs_test.h"

#include "guard/kvs_guard.h"
#include "kvs_guard_ref.h"


static kvs_guard_t *
compile_ok(const char *text)
{
    kvs_err_t     err;
    kvs_guard_t  *g;

    memset(&err, 0, sizeof(err));
    if (kvs_guard_compile(&g, "t.rules", text, strlen(text), &err)
        != KVS_OK)
    {
        print_message("unexpected: %s\n", err.msg);
        fail();
    }

    return g;
}


static void
compile_bad(const char *text, const char *want)
{
    kvs_err_t     err;
    kvs_guard_t  *g;

    memset(&err, 0, sizeof(err));
    assert_int_not_equal(kvs_guard_compile(&g, "t.rules", text,
                                           strlen(text), &err), KVS_OK);
    assert_null(g);
    if (strstr(err.msg, want) == NULL) {
        print_message("got \"%s\", want \"%s\"\n", err.msg, want);
        fail();
    }
}


static void
test_errors(void **state)
{
    /* PCRE2's message and offset, on the right line */
    compile_bad("# c\n\npii \\d{3}\nsecret (abc\n",
                "t.rules:4: the pattern does not compile: missing closing "
                "parenthesis at offset 4");
    compile_bad("pii \\d+\n", "t.rules:1: the match length is unbounded "
                "(the quantifier at offset 2)");
    compile_bad("a x\nb .*\n", "t.rules:2: the match length is unbounded");
    compile_bad("a x{2,}\n", "t.rules:1: the match length is unbounded");
    compile_bad("a (?=x)y\n", "t.rules:1: a lookahead at offset 0");
    compile_bad("a (x)\\1\n", "t.rules:1: a backreference at offset 3");
    compile_bad("a x{20000}\n", "over the 16384 the guard holds back");
    compile_bad("Pii x\n", "t.rules:1: a rule starts with its class");
    compile_bad("pii\n", "t.rules:1: the rule \"pii:1\" has no pattern");
    compile_bad("pii window=0 .*\n", "t.rules:1: invalid \"window=0\"");
    compile_bad("pii window=9 a.*\\b\n", "t.rules:1: \\b or \\B with "
                "window=");
    compile_bad("pii window=9 a.*+\n", "possessive quantifier with window=");
    compile_bad("pii ^\n", "t.rules:1: the pattern matches only the empty");
    compile_bad("# nothing\n\n", "t.rules: no rules");
    compile_bad("pii (?x) a b\n", "extended mode");
    compile_bad("pii:Bad x\n", "a rule's name after \"pii:\"");
}


static void
test_windows(void **state)
{
    size_t       off;
    uint32_t     w;
    kvs_err_t    err;
    kvs_guard_t  *g;

#define W(p, want)                                                          \
    assert_int_equal(kvs_guard_measure(p, strlen(p), 0, &w, &off, &err),  \
                     KVS_OK);                                             \
    assert_int_equal(w, want)

    W("abc", 3);
    W("\\d{3}-\\d{2}-\\d{4}", 11);
    W("ab|abcd|a", 4);
    W("x(?:ab){2,3}y?", 8);
    W("[a-z]{2}", 2);
    W("[^a]", 4);
    W("(?i)[a-z]", 4);
    W("é", 2);
    W("€{2}", 6);
    W(".", 4);
    W("foo\\b", 7);
    W("end$", 7);
    W("\\Qa.b*\\E", 4);
    W("(?i)ks", 6);
    W("(?<n>a)(?:b)", 2);
    W("\\x{20AC}", 3);
    W("a{,3}", 5);       /* PCRE2 10.42: a literal "{,3}" */
#undef W

    assert_int_equal(kvs_guard_measure("a+?", 3, 0, &w, &off, &err),
                     KVS_ERANGE);
    assert_int_equal(kvs_guard_measure("ab.*", 4, 1, &w, &off, &err),
                     KVS_OK);

    g = compile_ok("pii:ssn \\d{3}-\\d{2}-\\d{4}\n"
                   "secret window=40 key=.*\n");
    assert_int_equal(kvs_guard_n_rules(g), 2);
    assert_string_equal(kvs_guard_rule(g, 0)->name, "pii:ssn");
    assert_string_equal(kvs_guard_rule(g, 1)->name, "secret:2");
    assert_int_equal(kvs_guard_rule(g, 0)->window, 11);
    assert_int_equal(kvs_guard_rule(g, 1)->window, 40);
    assert_int_equal(kvs_guard_window(g), 40);
    kvs_guard_free(g);
}


static void
hit_count(void *data, uint32_t rule)
{
    ((uint32_t *) data)[rule]++;
}


/* Streams the chunks (NULL-ended) in mode; returns the output. */
static char *
run(kvs_guard_t *g, kvs_guard_mode_t mode, const char *const *chunks,
    uint32_t *hits, int32_t *stopped)
{
    char                *s;
    size_t               i;
    kvs_buf_t            out;
    kvs_err_t            err;
    kvs_guard_stream_t   st;

    memset(&out, 0, sizeof(out));
    assert_int_equal(kvs_guard_stream_init(&st, g, mode, hit_count, hits,
                                           &err), KVS_OK);

    for (i = 0; chunks[i] != NULL; i++) {
        assert_int_equal(kvs_guard_feed(&st, chunks[i], strlen(chunks[i]),
                                        &out, &err), KVS_OK);
        assert_true(kvs_guard_held(&st)
                    < kvs_guard_window(g) + KVS_GUARD_CUT);
    }

    assert_int_equal(kvs_guard_end(&st, &out, &err), KVS_OK);
    assert_int_equal(kvs_guard_held(&st), 0);
    *stopped = st.stopped;
    kvs_guard_stream_free(&st);

    s = strndup(out.len ? (const char *) out.data : "", out.len);
    kvs_buf_free(&out);

    return s;
}


static void
test_redact_stop(void **state)
{
    char         *o;
    int32_t       stopped;
    uint32_t      hits[2];
    kvs_guard_t  *g;

    g = compile_ok("pii:ssn \\d{3}-\\d{2}-\\d{4}\n"
                   "secret:key sk-[a-z0-9]{6}\n");

    /* split across two tokens, and across 5 */
    memset(hits, 0, sizeof(hits));
    o = run(g, KVS_GUARD_REDACT, (const char *[]) {
                "my ssn is 123-4", "5-6789, key sk-abc", "def ok", NULL },
            hits, &stopped);
    assert_string_equal(o, "my ssn is [redacted], key [redacted] ok");
    assert_int_equal(hits[0], 1);
    assert_int_equal(hits[1], 1);
    assert_int_equal(stopped, -1);
    free(o);

    memset(hits, 0, sizeof(hits));
    o = run(g, KVS_GUARD_STOP, (const char *[]) {
                "a ", "sk", "-", "abc1", "23 and more", NULL },
            hits, &stopped);
    assert_string_equal(o, "a ");
    assert_int_equal(stopped, 1);
    assert_int_equal(hits[1], 1);
    free(o);

    /* a partial match that fails is emitted whole; one at the end too */
    memset(hits, 0, sizeof(hits));
    o = run(g, KVS_GUARD_REDACT, (const char *[]) {
                "123-45-67", "x sk-ab", NULL }, hits, &stopped);
    assert_string_equal(o, "123-45-67x sk-ab");
    assert_int_equal(hits[0] + hits[1], 0);
    free(o);

    kvs_guard_free(g);
}


static void
test_hold_flush(void **state)
{
    kvs_buf_t            out;
    kvs_err_t            err;
    kvs_guard_t         *g;
    kvs_guard_stream_t   st;

    g = compile_ok("pii \\d{3}-\\d{2}-\\d{4}\n");

    memset(&out, 0, sizeof(out));
    assert_int_equal(kvs_guard_stream_init(&st, g, KVS_GUARD_REDACT, NULL,
                                           NULL, &err), KVS_OK);
    assert_int_equal(kvs_guard_feed(&st, "call 555-12-", 12, &out, &err),
                     KVS_OK);
    /* "555-12-" may begin a match: held */
    assert_int_equal(out.len, 5);
    assert_int_equal(kvs_guard_held(&st), 7);
    assert_int_equal(kvs_guard_end(&st, &out, &err), KVS_OK);
    assert_int_equal(out.len, 12);
    assert_memory_equal(out.data, "call 555-12-", 12);
    kvs_guard_stream_free(&st);
    kvs_buf_free(&out);
    kvs_guard_free(g);
}


static void
test_invalid_utf8(void **state)
{
    char         *o;
    int32_t       stopped, rule;
    uint32_t      hits[2];
    kvs_err_t     err;
    kvs_guard_t  *g;

    g = compile_ok("pii é\\d{2}\nx .b\n");

    memset(hits, 0, sizeof(hits));
    o = run(g, KVS_GUARD_REDACT, (const char *[]) {
                "\xff\xc3", "\xa9" "12\xc3", "(\xe2\x82", "b\x80", NULL },
            hits, &stopped);
    assert_string_equal(o, "\xff[redacted]\xc3(\xe2\x82" "b\x80");
    assert_int_equal(hits[0], 1);
    free(o);

    assert_int_equal(kvs_guard_check(g, "\xc3\xa9" "1", 3, &rule, &err),
                     KVS_OK);
    assert_int_equal(rule, -1);
    assert_int_equal(kvs_guard_check(g, "zz\xc3\xa9" "12", 6, &rule, &err),
                     KVS_OK);
    assert_int_equal(rule, 0);
    assert_int_equal(kvs_guard_check(g, "\xc3\xa9" "b", 3, &rule, &err),
                     KVS_OK);
    assert_int_equal(rule, 1);
    kvs_guard_free(g);
}


/* ---- the property ------------------------------------------------------ */

static const char *const  pats[] = {
    "\\d{3}-\\d{2}-\\d{4}",
    "sk-[a-z0-9]{4}",
    "\\bab\\b",
    "abc|ab",
    "b(?:cd|c)e?",
    "q.*z",
    "é{1,2}",
    "end$",
    "(?i)kq",
    "(?m)^dd",
};

static const char  rules_text[] =
    "a \\d{3}-\\d{2}-\\d{4}\n"
    "b sk-[a-z0-9]{4}\n"
    "c \\bab\\b\n"
    "d abc|ab\n"
    "e b(?:cd|c)e?\n"
    "f window=6 q.*z\n"
    "g é{1,2}\n"
    "h end$\n"
    "i (?i)kq\n"
    "j (?m)^dd\n";


static uint64_t  rng = 88172645463325252ull;

static uint32_t
rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t) (rng % n);
}


static size_t
rand_text(char *t, size_t max)
{
    static const char *const  atoms[] = {
        "a", "b", "c", "d", "e", "k", "K", "q", "z", "s", "-", " ", "\n",
        "0", "1", "7", "12", "345", "sk-", "end", "é", "\xc3", "\xa9",
        "\xff", "€", "dd", "ab",
    };

    size_t       n, k;
    const char  *a;

    n = 0;
    k = rnd(24);

    while (k-- > 0) {
        a = atoms[rnd(sizeof(atoms) / sizeof(atoms[0]))];
        if (n + strlen(a) > max) {
            break;
        }
        memcpy(t + n, a, strlen(a));
        n += strlen(a);
    }

    return n;
}


/* Streams text cut at cuts[0..n_cuts) and compares with want. */
static void
check_chunked(kvs_guard_t *g, kvs_guard_mode_t mode, const char *text,
    size_t len, const size_t *cuts, size_t n_cuts, const kvs_buf_t *want,
    const uint32_t *want_hits, size_t n_want)
{
    size_t               i, from, to;
    uint32_t             got[64];
    kvs_buf_t            out;
    kvs_err_t            err;
    kvs_guard_stream_t   st;

    memset(&out, 0, sizeof(out));
    memset(got, 0, sizeof(got));
    assert_int_equal(kvs_guard_stream_init(&st, g, mode, hit_count, got,
                                           &err), KVS_OK);

    for (from = 0, i = 0; i <= n_cuts; i++, from = to) {
        to = i < n_cuts ? cuts[i] : len;
        assert_int_equal(kvs_guard_feed(&st, text + from, to - from, &out,
                                        &err), KVS_OK);
        assert_true(kvs_guard_held(&st)
                    < kvs_guard_window(g) + KVS_GUARD_CUT);
    }

    assert_int_equal(kvs_guard_end(&st, &out, &err), KVS_OK);

    if (out.len != want->len
        || (out.len && memcmp(out.data, want->data, out.len) != 0))
    {
        print_message("text \"%.*s\" mode %d cuts %zu: got \"%.*s\" want "
                      "\"%.*s\"\n", (int) len, text, (int) mode, n_cuts,
                      (int) out.len, (char *) out.data, (int) want->len,
                      (char *) want->data);
        for (i = 0; i < len; i++) {
            print_message("%02x ", (unsigned char) text[i]);
        }
        print_message("\n");
        fail();
    }

    for (i = 0; i < n_want; i++) {
        got[want_hits[i]]--;
    }
    for (i = 0; i < 64; i++) {
        assert_int_equal(got[i], 0);
    }

    kvs_guard_stream_free(&st);
    kvs_buf_free(&out);
}


static void
test_random(void **state)
{
    int               m;
    char              text[128];
    int32_t           first;
    kvs_err_t         err;
    size_t            len, cut, k, n_hits, n_cuts, cuts[32], matched;
    uint32_t          hits[64];
    kvs_buf_t         want;
    kvs_guard_t      *g;
    kvs_guard_ref_t   ref;
    kvs_guard_mode_t  modes[2] = { KVS_GUARD_REDACT, KVS_GUARD_STOP };

    g = compile_ok(rules_text);
    assert_int_equal(kvs_guard_ref_init(&ref, g, pats,
                                        sizeof(pats) / sizeof(pats[0])), 0);
    matched = 0;

    for (k = 0; k < 1500; k++) {
        len = rand_text(text, sizeof(text));

        for (m = 0; m < 2; m++) {
            memset(&want, 0, sizeof(want));
            kvs_guard_ref_run(&ref, modes[m], text, len, &want, hits, 64,
                              &n_hits);
            matched += (m == 0 && n_hits > 0);

            /* the whole-text search finds the same first rule */
            assert_int_equal(kvs_guard_check(g, text, len, &first, &err),
                             KVS_OK);
            assert_int_equal(first, n_hits > 0 ? (int32_t) hits[0] : -1);

            /* whole, every split in two, and random chunkings */
            check_chunked(g, modes[m], text, len, NULL, 0, &want, hits,
                          n_hits);

            for (cut = 1; cut < len; cut++) {
                check_chunked(g, modes[m], text, len, &cut, 1, &want, hits,
                              n_hits);
            }

            for (n_cuts = 0, cut = 0; n_cuts < 32 && len > 0; n_cuts++) {
                cut += 1 + rnd(4);
                if (cut >= len) {
                    break;
                }
                cuts[n_cuts] = cut;
            }
            check_chunked(g, modes[m], text, len, cuts, n_cuts, &want,
                          hits, n_hits);

            kvs_buf_free(&want);
        }
    }

    print_message("random: %zu of 1500 texts matched\n", matched);
    assert_true(matched > 300 && matched < 1400);

    kvs_guard_ref_free(&ref);
    kvs_guard_free(g);
}


/* the buffer never grows: a long text in one feed */
static void
test_long_feed(void **state)
{
    char                *t;
    size_t               i, n;
    kvs_buf_t            out;
    kvs_err_t            err;
    kvs_guard_t         *g;
    kvs_guard_stream_t   st;

    g = compile_ok("pii \\d{3}-\\d{2}-\\d{4}\n");
    n = 100000;
    t = malloc(n);
    for (i = 0; i < n; i++) {
        t[i] = "0123456789- x"[i % 13];
    }

    memset(&out, 0, sizeof(out));
    assert_int_equal(kvs_guard_stream_init(&st, g, KVS_GUARD_REDACT, NULL,
                                           NULL, &err), KVS_OK);
    assert_int_equal(kvs_guard_feed(&st, t, n, &out, &err), KVS_OK);
    assert_int_equal(kvs_guard_end(&st, &out, &err), KVS_OK);
    assert_int_equal(st.cap, KVS_GUARD_CTX + 11 - 1 + KVS_GUARD_SLICE);
    assert_true(st.max_hold <= 10);
    assert_int_equal(out.len, n);
    kvs_guard_stream_free(&st);
    kvs_buf_free(&out);
    free(t);
    kvs_guard_free(g);
}


static void
test_load_file(void **state)
{
    FILE         *f;
    kvs_err_t     err;
    kvs_guard_t  *g;
    const char   *path;

    path = kvs_test_tmp("guard.rules");
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("# rules\r\npii:email [a-z]{1,20}@[a-z]{1,20}\\.com   \r\n", f);
    fputs("secret:aws AKIA[0-9A-Z]{16}\n", f);
    fclose(f);

    assert_int_equal(kvs_guard_load(&g, path, &err), KVS_OK);
    assert_int_equal(kvs_guard_n_rules(g), 2);
    assert_int_equal(kvs_guard_rule(g, 0)->line, 2);
    assert_int_equal(kvs_guard_rule(g, 0)->window, 45);
    kvs_guard_free(g);

    assert_int_equal(kvs_guard_load(&g, "/nonexistent/x.rules", &err),
                     KVS_EIO);
    assert_non_null(strstr(err.msg, "/nonexistent/x.rules"));
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_redact_stop),
        cmocka_unit_test(test_hold_flush),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_long_feed),
        cmocka_unit_test(test_load_file),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
