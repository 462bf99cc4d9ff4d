/*
 * kvs_test_tok: helpers shared by the tokenizer and chat tests: opening
 * a fixture vocabulary (the test skips when it is absent), reading the
 * llama.cpp test cases that come with one (vocab/<name>.gguf.inp texts
 * and .out ids), and encode, round-trip and id comparisons that print
 * the input and the ids around the first difference when they fail, so
 * that a failure shows what went wrong and not only where.
 * Header-only, like kvs_test.h.
 */

#ifndef KVS_TEST_TOK_H
#define KVS_TEST_TOK_H

#include <time.h>

#include "kvs_test.h"

#include "tokenizer/kvs_tok.h"
#include "tokenizer/kvs_vocab.h"

/* the .inp separator: it follows every case, the last one included */
#define KVS_TEST_SEP     "\n__ggml_vocab_test__\n"
#define KVS_TEST_NCASES  46             /* cases in every .inp/.out pair */
#define KVS_TEST_SHOW    400            /* input bytes shown on failure */


/*
 * The fixture vocabulary rel, or NULL (a SKIP line printed) when it is
 * absent: the caller then skip()s.  One that does not load fails the
 * test, and so does one of another kind than kind (0: any kind).
 */
static inline kvs_vocab_t *
kvs_test_vocab(const char *rel, int kind)
{
    const char   *path;
    kvs_err_t     err;
    kvs_vocab_t  *v;

    path = kvs_test_fixture(rel);
    if (path == NULL) {
        return NULL;
    }

    if (kvs_vocab_open(&v, path, &err) != KVS_OK) {
        fail_msg("%s: %s", rel, err.msg);
    }

    if (kind != 0 && (int) v->kind != kind) {
        fail_msg("%s: a %s vocabulary, expected %s", rel,
                 kvs_vocab_kind_name(v->kind),
                 kvs_vocab_kind_name((kvs_vocab_kind_t) kind));
    }

    return v;
}


static inline double
kvs_test_now_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}


/* Writes cp (not checked: tests choose it) as UTF-8; returns the length,
 * 1 to 4 bytes. */
static inline size_t
kvs_test_utf8_put(char *s, uint32_t cp)
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


/* Prints s[0..len) on the current line, control bytes and backslashes
 * escaped, at most KVS_TEST_SHOW bytes of it. */
static inline void
kvs_test_print_escaped(const char *s, size_t len)
{
    size_t         i;
    unsigned char  c;

    for (i = 0; i < len && i < KVS_TEST_SHOW; i++) {
        c = (unsigned char) s[i];

        if (c == '\n') {
            print_message("\\n");

        } else if (c == '\t') {
            print_message("\\t");

        } else if (c < 0x20 || c == 0x7f || c == '\\') {
            print_message("\\x%02x", c);

        } else {
            print_message("%c", c);
        }
    }

    if (len > KVS_TEST_SHOW) {
        print_message("... (%zu bytes)", len);
    }
}


static inline void
kvs_test_print_text(const char *what, const char *s, size_t len)
{
    print_message("  %s: '", what);
    kvs_test_print_escaped(s, len);
    print_message("'\n");
}


static inline void
kvs_test_print_ids(const char *what, const int32_t *ids, size_t n)
{
    size_t  i;

    print_message("  %s:", what);
    for (i = 0; i < n; i++) {
        print_message(" %d", ids[i]);
    }
    print_message("\n");
}


/* Appends the space-separated ids in s[0..len) to a. */
static inline void
kvs_test_parse_ids(const char *s, size_t len, kvs_ids_t *a)
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


/* The va_list form of kvs_test_ids_check(). */
static inline int
kvs_test_ids_vcheck(const kvs_ids_t *got, const kvs_ids_t *want,
    const char *text, size_t len, const char *fmt, va_list ap)
{
    size_t  i, from;

    if (got->n == want->n
        && (got->n == 0
            || memcmp(got->ids, want->ids, got->n * sizeof(int32_t)) == 0))
    {
        return 1;
    }

    /* long texts: only the ids around the first difference */
    for (i = 0; i < got->n && i < want->n; i++) {
        if (got->ids[i] != want->ids[i]) {
            break;
        }
    }

    from = i > 8 ? i - 8 : 0;

    vprint_message(fmt, ap);
    print_message(": ids differ from id %zu on (%zu ids expected, %zu "
                  "got)\n", i, want->n, got->n);

    if (text != NULL) {
        kvs_test_print_text("input", text, len);
    }

    kvs_test_print_ids("expected", want->ids + from,
                       want->n - from < 40 ? want->n - from : 40);
    kvs_test_print_ids("got     ", got->ids + from,
                       got->n - from < 40 ? got->n - from : 40);

    return 0;
}


/*
 * 1 if got holds want's ids; if not, prints the case (fmt, ...), the
 * input text (when not NULL) and the ids around the first difference,
 * and returns 0: loops count failures and assert at the end, so that one
 * run shows them all.
 */
static inline int
kvs_test_ids_check(const kvs_ids_t *got, const kvs_ids_t *want,
    const char *text, size_t len, const char *fmt, ...)
    CMOCKA_PRINTF_ATTRIBUTE(5, 6);

static inline int
kvs_test_ids_check(const kvs_ids_t *got, const kvs_ids_t *want,
    const char *text, size_t len, const char *fmt, ...)
{
    int      ok;
    va_list  ap;

    va_start(ap, fmt);
    ok = kvs_test_ids_vcheck(got, want, text, len, fmt, ap);
    va_end(ap);

    return ok;
}


/* Fails the test unless two kvs_ids_t hold the same ids, showing where
 * they differ. */
#define kvs_test_assert_ids(got, want)                                    \
    assert_true(kvs_test_ids_check(got, want, NULL, 0, "%s vs %s",        \
                                   #got, #want))


/* Encodes text into ids (emptied first) in a context of its own; fails
 * the test if it cannot. */
static inline void
kvs_test_encode(const kvs_vocab_t *v, const char *text, size_t len,
    unsigned flags, kvs_ids_t *ids)
{
    kvs_err_t      err;
    kvs_tok_ctx_t  ctx;

    memset(&ctx, 0, sizeof(ctx));
    ids->n = 0;

    if (kvs_tok_encode(v, &ctx, text, len, flags, ids, &err) != KVS_OK) {
        kvs_tok_ctx_free(&ctx);
        fail_msg("encode (%zu bytes): %s", len, err.msg);
    }

    kvs_tok_ctx_free(&ctx);
}


/* 1 if text encodes to want; if not, prints why (see
 * kvs_test_ids_check()) and returns 0. */
static inline int
kvs_test_encode_check(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, unsigned flags, const kvs_ids_t *want,
    const char *fmt, ...)
    CMOCKA_PRINTF_ATTRIBUTE(7, 8);

static inline int
kvs_test_encode_check(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, unsigned flags, const kvs_ids_t *want,
    const char *fmt, ...)
{
    int        ok;
    va_list    ap;
    kvs_err_t  err;
    kvs_ids_t  got;

    memset(&got, 0, sizeof(got));
    va_start(ap, fmt);

    if (kvs_tok_encode(v, ctx, text, len, flags, &got, &err) != KVS_OK) {
        vprint_message(fmt, ap);
        print_message(": encode failed: %s\n", err.msg);
        kvs_test_print_text("input", text, len);
        ok = 0;

    } else {
        ok = kvs_test_ids_vcheck(&got, want, text, len, fmt, ap);
    }

    va_end(ap);
    kvs_ids_free(&got);

    return ok;
}


/*
 * 1 if decode(encode(text)) == text (no flags either way); if not,
 * prints the case (fmt, ...), unless quiet, and returns 0.  The ids are
 * left in *ids (emptied first) when it is not NULL.
 */
static inline int
kvs_test_round_trip_check(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, kvs_ids_t *ids, int quiet,
    const char *fmt, ...)
    CMOCKA_PRINTF_ATTRIBUTE(7, 8);

static inline int
kvs_test_round_trip_check(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, kvs_ids_t *ids, int quiet,
    const char *fmt, ...)
{
    int        ok;
    va_list    ap;
    kvs_buf_t  dec;
    kvs_err_t  err;
    kvs_ids_t  own, *a;

    memset(&dec, 0, sizeof(dec));
    memset(&own, 0, sizeof(own));
    a = ids != NULL ? ids : &own;
    a->n = 0;

    ok = kvs_tok_encode(v, ctx, text, len, 0, a, &err) == KVS_OK
         && kvs_tok_decode(v, a->ids, a->n, 0, &dec, &err) == KVS_OK;

    va_start(ap, fmt);

    if (!ok) {
        vprint_message(fmt, ap);
        print_message(": round trip failed: %s\n", err.msg);

    } else if (dec.len != len
               || (len > 0 && memcmp(dec.data, text, len) != 0))
    {
        ok = 0;
        if (!quiet) {
            vprint_message(fmt, ap);
            print_message(": decode(encode(x)) != x\n");
            kvs_test_print_text("input  ", text, len);
            kvs_test_print_ids("ids    ", a->ids,
                               a->n < 40 ? a->n : 40);
            kvs_test_print_text("decoded", (const char *) dec.data,
                                dec.len);
        }
    }

    va_end(ap);
    kvs_ids_free(&own);
    kvs_buf_free(&dec);

    return ok;
}


/* The llama.cpp test-tokenizer-0 cases of one vocabulary: pointers into
 * the .inp text (text[i], len[i] bytes, not NUL-terminated) and the ids
 * of the .out line. */
typedef struct {
    char        *inp;
    char        *outf;
    size_t       n;
    const char  *text[64];
    size_t       len[64];
    kvs_ids_t    want[64];
} kvs_test_cases_t;


static inline char *
kvs_test_cases_file(const char *rel, const char *ext, size_t *len)
{
    char         name[256];
    char        *buf;
    const char  *path;

    snprintf(name, sizeof(name), "%s.%s", rel, ext);
    path = kvs_test_fixture(name);
    if (path == NULL) {
        fail_msg("the test cases %s.%s are absent", rel, ext);
    }

    buf = (char *) kvs_test_slurp(path, len);
    assert_non_null(buf);
    assert_true(*len > 0);

    return buf;
}


/* Reads the cases of the fixture vocabulary rel (rel.inp and rel.out):
 * exactly KVS_TEST_NCASES of each, or the test fails. */
static inline void
kvs_test_cases_load(const char *rel, kvs_test_cases_t *c)
{
    char    *p, *e, *q, *line, *nl;
    size_t   inp_len, out_len;

    memset(c, 0, sizeof(kvs_test_cases_t));

    c->inp = kvs_test_cases_file(rel, "inp", &inp_len);
    c->outf = kvs_test_cases_file(rel, "out", &out_len);

    p = c->inp;
    e = c->inp + inp_len;
    line = c->outf;

    while (p < e) {
        assert_true(c->n < KVS_TEST_NCASES);

        q = memmem(p, (size_t) (e - p), KVS_TEST_SEP,
                   sizeof(KVS_TEST_SEP) - 1);
        assert_non_null(q);

        nl = memchr(line, '\n', (size_t) (c->outf + out_len - line));
        assert_non_null(nl);

        c->text[c->n] = p;
        c->len[c->n] = (size_t) (q - p);
        kvs_test_parse_ids(line, (size_t) (nl - line), &c->want[c->n]);
        c->n++;

        p = q + sizeof(KVS_TEST_SEP) - 1;
        line = nl + 1;
    }

    assert_int_equal(c->n, KVS_TEST_NCASES);
    assert_int_equal(line, c->outf + out_len);
}


static inline void
kvs_test_cases_free(kvs_test_cases_t *c)
{
    size_t  i;

    for (i = 0; i < c->n; i++) {
        kvs_ids_free(&c->want[i]);
    }

    free(c->inp);
    free(c->outf);
}


/*
 * Runs the cases of the fixture vocabulary rel through v (one context
 * for all, no flags): each must give its ids and round-trip.  Prints a
 * summary line and each failure; returns the number of failures.
 */
static inline size_t
kvs_test_cases_run(const kvs_vocab_t *v, const char *rel)
{
    size_t             i, pass, rt, bad;
    kvs_tok_ctx_t      ctx;
    kvs_test_cases_t   c;

    kvs_test_cases_load(rel, &c);
    memset(&ctx, 0, sizeof(ctx));
    pass = 0;
    rt = 0;

    for (i = 0; i < c.n; i++) {
        pass += kvs_test_encode_check(v, &ctx, c.text[i], c.len[i], 0,
                                      &c.want[i], "%s case %zu", rel, i);
        rt += kvs_test_round_trip_check(v, &ctx, c.text[i], c.len[i], NULL,
                                        0, "%s case %zu", rel, i);
    }

    print_message("%s: %zu/%zu cases give the expected ids, %zu/%zu round "
                  "trip\n", rel, pass, c.n, rt, c.n);

    bad = (c.n - pass) + (c.n - rt);

    kvs_tok_ctx_free(&ctx);
    kvs_test_cases_free(&c);

    return bad;
}

#endif /* KVS_TEST_TOK_H */
