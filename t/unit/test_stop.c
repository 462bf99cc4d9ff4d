/*
 * test_stop: the stop-string matcher against its definition.  Hand cases
 * with outputs written out (stops inside a chunk, across 2 and 5 chunks,
 * false partial matches, overlapping stops, UTF-8, flush, errors), then a
 * randomized property check against a naive model written here from the
 * definition in kvs_stop.h: the output is the text cut at the earliest
 * start P of any stop string's occurrence (memmem), the reported string
 * is the shortest one occurring at P, the match is decided at the first
 * byte where no partial match starts before P, and before that the
 * output is everything before the earliest suffix that is a proper
 * prefix of a stop string, identically for every chunking.
 */

#include "kvs_test.h"

#include "sample/kvs_stop.h"


/* ---- hand cases ------------------------------------------------------ */

typedef struct {
    kvs_stop_t  s;
    kvs_buf_t   out;
    kvs_err_t   err;
} fx_t;


static void
fx_init(fx_t *f, const char *const *stops, unsigned n)
{
    memset(f, 0, sizeof(*f));
    assert_int_equal(kvs_stop_init(&f->s, stops, NULL, n, &f->err), KVS_OK);
}


/* feeds one chunk and checks the whole output so far and the match */
static void
fx_feed(fx_t *f, const char *chunk, const char *want_out, int want_idx)
{
    assert_int_equal(kvs_stop_feed(&f->s, chunk, strlen(chunk), &f->out,
                                   &f->err), KVS_OK);

    if (f->out.len != strlen(want_out)
        || (f->out.len > 0
            && memcmp(f->out.data, want_out, f->out.len) != 0))
    {
        fail_msg("after \"%s\": out \"%.*s\", want \"%s\"", chunk,
                 (int) f->out.len, (char *) f->out.data, want_out);
    }

    assert_int_equal(f->s.matched, want_idx);
}


static void
fx_flush(fx_t *f, const char *want_out, int want_idx, uint64_t want_at)
{
    assert_int_equal(kvs_stop_flush(&f->s, &f->out, &f->err), KVS_OK);

    if (f->out.len != strlen(want_out)
        || (f->out.len > 0
            && memcmp(f->out.data, want_out, f->out.len) != 0))
    {
        fail_msg("after flush: out \"%.*s\", want \"%s\"",
                 (int) f->out.len, (char *) f->out.data, want_out);
    }

    assert_int_equal(f->s.matched, want_idx);
    if (want_idx >= 0) {
        assert_int_equal(f->s.match_at, want_at);
    }
}


static void
fx_free(fx_t *f)
{
    kvs_stop_free(&f->s);
    kvs_buf_free(&f->out);
}


static void
test_one_chunk(void **state)
{
    static const char *const  stops[] = { "END" };
    fx_t                      f;

    fx_init(&f, stops, 1);
    fx_feed(&f, "hello END world", "hello ", 0);
    assert_int_equal(f.s.match_at, 6);
    /* later feeds and the flush are no-ops */
    fx_feed(&f, "more", "hello ", 0);
    fx_flush(&f, "hello ", 0, 6);
    fx_free(&f);

    /* two stops in one chunk: the earlier one, whatever its index */
    {
        static const char *const  two[] = { "zz", "yy" };

        fx_init(&f, two, 2);
        fx_feed(&f, "ayy zz", "a", 1);
        assert_int_equal(f.s.match_at, 1);
        fx_free(&f);
    }
}


static void
test_two_chunks(void **state)
{
    static const char *const  stops[] = { "END" };
    fx_t                      f;

    fx_init(&f, stops, 1);
    fx_feed(&f, "hello E", "hello ", -1);
    fx_feed(&f, "ND world", "hello ", 0);
    assert_int_equal(f.s.match_at, 6);
    fx_free(&f);
}


static void
test_five_chunks(void **state)
{
    static const char *const  stops[] = { "<|end|>" };
    fx_t                      f;

    fx_init(&f, stops, 1);
    fx_feed(&f, "x<", "x", -1);
    fx_feed(&f, "|e", "x", -1);
    fx_feed(&f, "n", "x", -1);
    fx_feed(&f, "d|", "x", -1);
    fx_feed(&f, ">tail", "x", 0);
    assert_int_equal(f.s.match_at, 1);
    fx_free(&f);
}


static void
test_false_partial(void **state)
{
    static const char *const  ab[] = { "ab" };
    static const char *const  aab[] = { "aab" };
    static const char *const  nested[] = { "xabcy", "abcz", "c" };
    fx_t                      f;

    /* the first "a" is not the start of the match */
    fx_init(&f, ab, 1);
    fx_feed(&f, "a", "", -1);
    fx_feed(&f, "a", "a", -1);
    fx_feed(&f, "b", "a", 0);
    assert_int_equal(f.s.match_at, 1);
    fx_free(&f);

    /* "aaab": the match restarts inside the held tail (KMP's case) */
    fx_init(&f, aab, 1);
    fx_feed(&f, "a", "", -1);
    fx_feed(&f, "a", "", -1);
    fx_feed(&f, "a", "a", -1);
    fx_feed(&f, "b", "a", 0);
    assert_int_equal(f.s.match_at, 1);
    fx_free(&f);

    /* "c" ends inside two partial matches that both fail: it is a
     * suffix of a suffix of the longest partial ("xabc" > "abc" > "c") */
    fx_init(&f, nested, 3);
    fx_feed(&f, "x", "", -1);
    fx_feed(&f, "a", "", -1);
    fx_feed(&f, "b", "", -1);
    fx_feed(&f, "c", "", -1);
    fx_feed(&f, "q", "xab", 2);
    assert_int_equal(f.s.match_at, 3);
    fx_free(&f);
}


static void
test_overlap(void **state)
{
    static const char *const  st[] = { "bc", "abcd" };
    static const char *const  chat[] = { "User", "\nUser:" };
    static const char *const  same[] = { "abc", "ab" };
    fx_t                      f;

    /* "bc" completes first but "abcd" starts earlier and completes */
    fx_init(&f, st, 2);
    fx_feed(&f, "a", "", -1);
    fx_feed(&f, "b", "", -1);
    fx_feed(&f, "c", "", -1);
    fx_feed(&f, "d", "", 1);
    assert_int_equal(f.s.match_at, 0);
    fx_free(&f);

    /* ... and when "abcd" does not complete, "bc" stands */
    fx_init(&f, st, 2);
    fx_feed(&f, "abc", "", -1);
    fx_feed(&f, "x", "a", 0);
    assert_int_equal(f.s.match_at, 1);
    fx_free(&f);

    /* ... also when the generation ends first */
    fx_init(&f, st, 2);
    fx_feed(&f, "zab", "z", -1);
    fx_feed(&f, "c", "z", -1);
    fx_flush(&f, "za", 0, 2);
    fx_free(&f);

    fx_init(&f, chat, 2);
    fx_feed(&f, "Hi!\nUs", "Hi!", -1);
    fx_feed(&f, "er", "Hi!", -1);
    fx_feed(&f, ": more", "Hi!", 1);
    assert_int_equal(f.s.match_at, 3);
    fx_free(&f);

    fx_init(&f, chat, 2);
    fx_feed(&f, "Hi!\nUser", "Hi!", -1);
    fx_feed(&f, "name", "Hi!\n", 0);
    assert_int_equal(f.s.match_at, 4);
    fx_free(&f);

    /* same start: the shorter is decided first and reported */
    fx_init(&f, same, 2);
    fx_feed(&f, "xa", "x", -1);
    fx_feed(&f, "bc", "x", 1);
    assert_int_equal(f.s.match_at, 1);
    fx_free(&f);
}


static void
test_not_a_match(void **state)
{
    static const char *const  stops[] = { "END", "STOP" };
    fx_t                      f;

    fx_init(&f, stops, 2);
    fx_feed(&f, "the EN", "the ", -1);
    fx_feed(&f, "TRY S", "the ENTRY ", -1);
    fx_feed(&f, "T", "the ENTRY ", -1);
    fx_feed(&f, "ART", "the ENTRY START", -1);
    fx_flush(&f, "the ENTRY START", -1, 0);
    fx_free(&f);
}


static void
test_flush(void **state)
{
    static const char *const  stops[] = { "END" };
    fx_t                      f;

    fx_init(&f, stops, 1);
    fx_feed(&f, "abc E", "abc ", -1);
    fx_feed(&f, "N", "abc ", -1);
    fx_flush(&f, "abc EN", -1, 0);
    /* done: input is ignored, a second flush adds nothing */
    fx_feed(&f, "END", "abc EN", -1);
    fx_flush(&f, "abc EN", -1, 0);

    /* reset: the same stops on a new stream */
    kvs_stop_reset(&f.s);
    f.out.len = 0;
    fx_feed(&f, "xEN", "x", -1);
    fx_feed(&f, "D", "x", 0);
    assert_int_equal(f.s.match_at, 1);
    fx_free(&f);
}


static void
test_no_stops(void **state)
{
    fx_t  f;

    fx_init(&f, NULL, 0);
    fx_feed(&f, "hello", "hello", -1);
    fx_feed(&f, "", "hello", -1);
    fx_feed(&f, " world", "hello world", -1);
    fx_flush(&f, "hello world", -1, 0);
    fx_free(&f);
}


static void
test_utf8(void **state)
{
    static const char *const  euro[] = { "\xc3\xa9\xe2\x82\xac" };  /* é€ */
    static const char *const  emoji[] = { "\xf0\x9f\x98\x80!" };    /* 😀! */
    static const char *const  e_acute[] = { "\xc3\xa9" };           /* é */
    fx_t                      f;

    fx_init(&f, euro, 1);
    fx_feed(&f, "caf\xc3\xa9", "caf", -1);
    fx_feed(&f, "\xe2\x82\xac more", "caf", 0);
    assert_int_equal(f.s.match_at, 3);
    fx_free(&f);

    /* "é" then "è" (c3 a8): the shared lead byte is not a match */
    fx_init(&f, euro, 1);
    fx_feed(&f, "\xc3\xa9", "", -1);
    fx_feed(&f, "\xc3\xa8", "\xc3\xa9\xc3\xa8", -1);
    fx_free(&f);

    fx_init(&f, emoji, 1);
    fx_feed(&f, "x\xf0\x9f\x98\x80", "x", -1);
    fx_feed(&f, "\xf0\x9f\x98\x80", "x\xf0\x9f\x98\x80", -1);
    fx_feed(&f, "!", "x\xf0\x9f\x98\x80", 0);
    assert_int_equal(f.s.match_at, 5);
    fx_free(&f);

    /* "ã" (c3 a3) shares é's first byte: emitted at once, whole */
    fx_init(&f, e_acute, 1);
    fx_feed(&f, "\xc3\xa3", "\xc3\xa3", -1);
    fx_feed(&f, "\xc3\xa9", "\xc3\xa3", 0);
    assert_int_equal(f.s.match_at, 2);
    fx_free(&f);
}


static void
expect_einval(const char *const *stops, const size_t *lens, unsigned n,
    const char *want)
{
    kvs_stop_t  s;
    kvs_err_t   err;

    memset(&err, 0, sizeof(err));
    assert_int_equal(kvs_stop_init(&s, stops, lens, n, &err), KVS_EINVAL);

    if (strstr(err.msg, want) == NULL) {
        fail_msg("error \"%s\" does not say \"%s\"", err.msg, want);
    }

    kvs_stop_free(&s);                /* safe after a failed init */
}


static void
test_invalid(void **state)
{
    static char                long_s[KVS_STOP_MAX_LEN + 2];
    static const char *const   empty[] = { "a", "b", "" };
    static const char *const   bad_byte[] = { "ok", "a\xff" };
    static const char *const   overlong[] = { "\xc0\xaf" };
    static const char *const   surrogate[] = { "x\xed\xa0\x80" };
    static const char *const   cut[] = { "ab\xe2\x82" };
    const char                *many[KVS_STOP_MAX + 1];
    const char                *longs[2];
    size_t                     lens[2];
    unsigned                   i;
    kvs_stop_t                 s;
    kvs_err_t                  err;

    expect_einval(empty, NULL, 3, "stop[2]: empty");
    expect_einval(bad_byte, NULL, 2, "stop[1]: invalid UTF-8 at byte 1");
    expect_einval(overlong, NULL, 1, "stop[0]: invalid UTF-8 at byte 0");
    expect_einval(surrogate, NULL, 1, "stop[0]: invalid UTF-8 at byte 1");
    expect_einval(cut, NULL, 1, "stop[0]: invalid UTF-8 at byte 2");

    /* with lengths: an embedded NUL is a character, the length counts */
    lens[0] = 1;
    lens[1] = 0;
    longs[0] = "a";
    longs[1] = "b";
    expect_einval(longs, lens, 2, "stop[1]: empty");

    memset(long_s, 'x', KVS_STOP_MAX_LEN + 1);
    longs[1] = long_s;
    expect_einval(longs, NULL, 2, "stop[1]: longer than 256 bytes");
    lens[1] = KVS_STOP_MAX_LEN + 1;
    expect_einval(longs, lens, 2, "stop[1]: 257 bytes, at most 256");

    for (i = 0; i < KVS_STOP_MAX + 1; i++) {
        many[i] = "s";
    }
    expect_einval(many, NULL, KVS_STOP_MAX + 1, "17 strings, at most 16");

    /* the limits themselves are accepted */
    lens[1] = KVS_STOP_MAX_LEN;
    assert_int_equal(kvs_stop_init(&s, longs, lens, 2, &err), KVS_OK);
    kvs_stop_free(&s);
    assert_int_equal(kvs_stop_init(&s, many, NULL, KVS_STOP_MAX, &err),
                     KVS_OK);
    kvs_stop_free(&s);
}


/* the longest stop strings: a 255-byte held tail, then the match */
static void
test_long_stop(void **state)
{
    char        stop[KVS_STOP_MAX_LEN + 1];
    const char *stops[1];
    size_t      i;
    fx_t        f;

    for (i = 0; i < KVS_STOP_MAX_LEN; i++) {
        stop[i] = (char) ('a' + i % 7);
    }
    stop[KVS_STOP_MAX_LEN] = '\0';
    stops[0] = stop;

    fx_init(&f, stops, 1);
    assert_int_equal(kvs_stop_feed(&f.s, "#", 1, &f.out, &f.err), KVS_OK);
    for (i = 0; i + 1 < KVS_STOP_MAX_LEN; i++) {
        assert_int_equal(kvs_stop_feed(&f.s, stop + i, 1, &f.out, &f.err),
                         KVS_OK);
    }
    assert_int_equal(f.out.len, 1);
    assert_int_equal(f.s.n_hold, KVS_STOP_MAX_LEN - 1);
    assert_int_equal(kvs_stop_feed(&f.s, stop + i, 1, &f.out, &f.err),
                     KVS_OK);
    assert_int_equal(f.s.matched, 0);
    assert_int_equal(f.s.match_at, 1);
    assert_int_equal(f.out.len, 1);
    fx_free(&f);
}


/* ---- randomized property check --------------------------------------- */

#define R_MAX_TEXT   160                 /* bytes */

/* a small alphabet, mixing 1-, 2- and 4-byte characters */
static const char *const  r_alpha[] = { "a", "b", "\xc3\xa9",
                                        "\xf0\x9f\x98\x80" };

static uint64_t  r_state;


static uint32_t
r_next(uint32_t n)
{
    r_state ^= r_state << 13;
    r_state ^= r_state >> 7;
    r_state ^= r_state << 17;

    return (uint32_t) (r_state % n);
}


/* n_chars random characters from the first n_alpha of the alphabet
 * into buf; character starts in at[], their count in *n_at */
static size_t
r_text(char *buf, size_t n_chars, uint32_t n_alpha, size_t *at,
    size_t *n_at)
{
    size_t       len, i, k;
    const char  *c;

    len = 0;
    *n_at = 0;

    for (i = 0; i < n_chars; i++) {
        c = r_alpha[r_next(n_alpha)];
        k = strlen(c);
        at[(*n_at)++] = len;
        memcpy(buf + len, c, k);
        len += k;
    }

    return len;
}


typedef struct {
    const char  *text;
    size_t       len;
    const char  *stop[KVS_STOP_MAX];
    size_t       slen[KVS_STOP_MAX];
    unsigned     n;
} ref_t;


/* is text[p..f) a proper prefix of some stop string */
static int
ref_partial(const ref_t *r, size_t p, size_t f)
{
    unsigned  i;

    for (i = 0; i < r->n; i++) {
        if (f - p < r->slen[i]
            && memcmp(r->text + p, r->stop[i], f - p) == 0)
        {
            return 1;
        }
    }

    return 0;
}


/*
 * The first f bytes fed: *best is the earliest start of an occurrence of
 * any stop (memmem; SIZE_MAX if none) and *idx the shortest stop there
 * (lowest index on ties, -1 if none); *bound is the earliest start of a
 * proper-prefix partial match before *best, or *best.  Returns 1 when
 * the match is decided: it exists and no partial starts before it.
 */
static int
ref_state(const ref_t *r, size_t f, size_t *best, int *idx, size_t *bound)
{
    size_t       p;
    unsigned     i;
    const char  *m;

    *best = SIZE_MAX;
    *idx = -1;

    for (i = 0; i < r->n; i++) {
        m = memmem(r->text, f, r->stop[i], r->slen[i]);
        if (m == NULL) {
            continue;
        }

        p = (size_t) (m - r->text);
        if (p < *best || (p == *best && r->slen[i] < r->slen[*idx])) {
            *best = p;
            *idx = (int) i;
        }
    }

    *bound = *best;
    for (p = 0; p <= f && p < *best; p++) {
        if (ref_partial(r, p, f)) {
            *bound = p;
            return 0;
        }
    }

    return *idx >= 0;
}


/* one chunking (cuts[] ascending, ending at len) against the model */
static void
r_check(const ref_t *r, const size_t *cuts, size_t n_cuts,
    const char *what)
{
    int         idx, done_at, ridx;
    size_t      c, from, q, f, rq, b;
    kvs_stop_t  s;
    kvs_buf_t   out;
    kvs_err_t   err;

    memset(&out, 0, sizeof(out));
    assert_int_equal(kvs_stop_init(&s, r->stop, r->slen, r->n, &err),
                     KVS_OK);

    /* the final answer: the whole text cut at the earliest match */
    ref_state(r, r->len, &rq, &ridx, &q);
    if (ridx < 0) {
        rq = r->len;
    }

    /* the byte where the model decides, if it does before the end */
    done_at = -1;
    for (f = 0; f <= r->len && ridx >= 0; f++) {
        if (ref_state(r, f, &q, &idx, &b)) {
            done_at = (int) f;
            break;
        }
    }

    from = 0;
    for (c = 0; c < n_cuts && s.matched < 0; c++) {
        assert_int_equal(kvs_stop_feed(&s, r->text + from, cuts[c] - from,
                                       &out, &err), KVS_OK);
        from = cuts[c];

        if (s.matched >= 0) {
            break;
        }

        /* undecided after from bytes: emitted exactly up to the earliest
         * partial start, held tail bounded */
        if (ref_state(r, from, &q, &idx, &b)) {
            fail_msg("%s: model decided at %zu bytes, matcher did not",
                     what, from);
        }
        if (out.len != b || (b > 0 && memcmp(out.data, r->text, b) != 0)) {
            fail_msg("%s: after %zu bytes emitted %zu, want %zu", what,
                     from, out.len, b);
        }
        assert_true(s.n_hold + 1 <= s.max_len || s.n == 0);
    }

    if (s.matched >= 0) {
        /* decided at the first byte the model decides */
        assert_int_equal((int) s.fed, done_at);
    } else {
        assert_int_equal(done_at, -1);
        assert_int_equal(kvs_stop_flush(&s, &out, &err), KVS_OK);
    }

    if (ridx < 0) {
        assert_int_equal(s.matched, -1);
    } else {
        if (s.matched != ridx || s.match_at != rq) {
            fail_msg("%s: matched %d at %llu, want %d at %zu", what,
                     s.matched, (unsigned long long) s.match_at, ridx, rq);
        }
    }

    if (out.len != rq || (rq > 0 && memcmp(out.data, r->text, rq) != 0)) {
        fail_msg("%s: output %zu bytes, want %zu", what, out.len, rq);
    }

    kvs_stop_free(&s);
    kvs_buf_free(&out);
}


static void
test_random(void **state)
{
    char        text[R_MAX_TEXT * 4], sbuf[KVS_STOP_MAX][32];
    size_t      at[R_MAX_TEXT], n_at, cuts[R_MAX_TEXT * 4], n_cuts, i;
    size_t      n_chars, sat[8], n_sat;
    unsigned    j, iter, kind, n_matched, n_alpha;
    ref_t       r;

    r_state = 0x5eed1234abcdULL;
    n_matched = 0;

    for (iter = 0; iter < 4000; iter++) {
        memset(&r, 0, sizeof(r));

        /* every fourth case over {a, b} only: dense partial matches */
        n_alpha = iter % 4 == 1 ? 2 : 4;

        /* mostly 1..4 stops as the API allows, sometimes up to 16 */
        r.n = iter % 10 == 0 ? 1 + r_next(KVS_STOP_MAX) : 1 + r_next(4);
        for (j = 0; j < r.n; j++) {
            r.slen[j] = r_text(sbuf[j], 1 + r_next(iter % 3 == 0 ? 7 : 4),
                               n_alpha, sat, &n_sat);
            r.stop[j] = sbuf[j];
        }

        n_chars = r_next(iter % 2 == 0 ? 40 : R_MAX_TEXT);
        r.len = r_text(text, n_chars, n_alpha, at, &n_at);
        r.text = text;

        for (kind = 0; kind < 5; kind++) {
            n_cuts = 0;

            switch (kind) {
            case 0:                   /* one chunk */
                break;
            case 1:                   /* a character per chunk */
                for (i = 1; i < n_at; i++) {
                    cuts[n_cuts++] = at[i];
                }
                break;
            case 2:                   /* a byte per chunk (not whole
                                         characters: matching is on bytes) */
                for (i = 1; i < r.len; i++) {
                    cuts[n_cuts++] = i;
                }
                break;
            default:                  /* random runs of 1..6 characters */
                for (i = r_next(6) + 1; i < n_at; i += r_next(6) + 1) {
                    cuts[n_cuts++] = at[i];
                }
                break;
            }

            cuts[n_cuts++] = r.len;
            r_check(&r, cuts, n_cuts, kind == 0 ? "one chunk"
                                      : kind == 1 ? "per character"
                                      : kind == 2 ? "per byte"
                                      : "random chunks");
        }

        n_matched += memmem(text, r.len, r.stop[0], r.slen[0]) != NULL;
    }

    /* the alphabet is small enough that both outcomes are exercised */
    print_message("random: %u of 4000 texts contain stop[0]\n", n_matched);
    assert_true(n_matched > 400 && n_matched < 3600);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_one_chunk),
        cmocka_unit_test(test_two_chunks),
        cmocka_unit_test(test_five_chunks),
        cmocka_unit_test(test_false_partial),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_not_a_match),
        cmocka_unit_test(test_flush),
        cmocka_unit_test(test_no_stops),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_long_stop),
        cmocka_unit_test(test_random),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
