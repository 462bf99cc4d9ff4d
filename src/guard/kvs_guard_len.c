/*
 * kvs_guard_len: the window of a guard pattern, measured from its
 * syntax: the most bytes of UTF-8 text one match can span, counting the
 * character that an end assertion ($, \b, \B) looks at after it.
 *
 * A documented subset of PCRE2's syntax (docs/guard.md):
 *  - literals, \Q...\E, escapes of one character (\n, \xhh, \x{h..},
 *    \o{..}, \0oo, \cX, \e, punctuation), ., classes [...] with ranges,
 *    escapes and POSIX names, the types \d \w \s \h \v \R \N and their
 *    negations, \p{..} and \P{..};
 *  - groups (...), (?:...), (?|...), (?>...), named groups, option
 *    settings (?i) (?m) (?s) (?n) (?U) (?J) and (?i:...);
 *  - quantifiers ? {n} {n,m} (lazy or possessive too), and * + {n,}
 *    which make the pattern unbounded;
 *  - assertions ^ (0 bytes), $ \b \B (4 bytes: the character looked at).
 * Refused: lookarounds, backreferences, recursion, conditionals,
 * callouts, (*VERBS), \A \z \Z \G \K \X \C, and extended mode (?x).
 *
 * Widths are upper bounds in UTF mode: a literal character its UTF-8
 * length (caseless: 3 for k and s, whose case partners U+212A and U+017F
 * are longer, 4 for non-ASCII), a class of ASCII members 1 (caseless or
 * negated: 4), . and the other types 4 (\h \v \R 3).  An upper bound is
 * all exactness needs: the window only says how long to wait.
 *
 * Invariants: reads pat[0..len) only; recursion is bounded by
 * KVS_GUARD_DEPTH; counts saturate at KVS_GUARD_INF (no overflow).
 */

#include <string.h>

#include "kvs_guard.h"

#define KVS_GUARD_INF    ((uint64_t) 1 << 40)
#define KVS_GUARD_DEPTH  64

typedef struct {
    const unsigned char  *p;
    const unsigned char  *start;
    const unsigned char  *end;
    int                   window_rule;
    int                   unbounded;
    size_t                unb_off;
    int                   rc;
    size_t                off;
    kvs_err_t            *err;
} kvs_glen_t;


static uint64_t kvs_glen_alt(kvs_glen_t *st, int depth, int caseless);


static int
kvs_glen_fail(kvs_glen_t *st, const unsigned char *at, int code,
    const char *what)
{
    if (st->rc == KVS_OK) {
        st->rc = code;
        st->off = (size_t) (at - st->start);
        kvs_err_set(st->err, code, "%s at offset %zu", what, st->off);
    }

    return code;
}


static uint64_t
kvs_glen_mul(uint64_t a, uint64_t b)
{
    if (a == 0 || b == 0) {
        return 0;
    }

    if (a >= KVS_GUARD_INF || b >= KVS_GUARD_INF || a > KVS_GUARD_INF / b) {
        return KVS_GUARD_INF;
    }

    return a * b;
}


static uint64_t
kvs_glen_add(uint64_t a, uint64_t b)
{
    return a + b >= KVS_GUARD_INF ? KVS_GUARD_INF : a + b;
}


static size_t
kvs_glen_utf8_len(unsigned char c)
{
    return c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
}


static uint64_t
kvs_glen_cp_len(uint64_t cp)
{
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}


static uint64_t
kvs_glen_lit(unsigned char c, int caseless)
{
    if (!caseless) {
        return kvs_glen_utf8_len(c);
    }

    if (c == 'k' || c == 'K' || c == 's' || c == 'S') {
        return 3;
    }

    return c < 0x80 ? 1 : 4;
}


static int
kvs_glen_hex(int c)
{
    return (c >= '0' && c <= '9') ? c - '0'
           : (c >= 'a' && c <= 'f') ? c - 'a' + 10
           : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
}


/* {n}, {n,}, {n,m} at st->p: 1 with *lo and *hi (hi KVS_GUARD_INF for
 * none), 0 when it is not a quantifier (then a literal '{'). */
static int
kvs_glen_braces(kvs_glen_t *st, uint64_t *lo, uint64_t *hi)
{
    const unsigned char  *q;
    uint64_t              a, b;
    int                   digits;

    q = st->p + 1;
    a = 0;
    digits = 0;

    while (q < st->end && *q >= '0' && *q <= '9') {
        a = a < KVS_GUARD_INF ? a * 10 + (uint64_t) (*q - '0') : a;
        q++;
        digits++;
    }

    if (digits == 0 || q >= st->end) {
        return 0;
    }

    if (*q == '}') {
        *lo = a;
        *hi = a;
        st->p = q + 1;
        return 1;
    }

    if (*q != ',') {
        return 0;
    }

    q++;
    b = 0;
    digits = 0;

    while (q < st->end && *q >= '0' && *q <= '9') {
        b = b < KVS_GUARD_INF ? b * 10 + (uint64_t) (*q - '0') : b;
        q++;
        digits++;
    }

    if (q >= st->end || *q != '}') {
        return 0;
    }

    *lo = a;
    *hi = digits ? b : KVS_GUARD_INF;
    st->p = q + 1;

    return 1;
}


/* An escape at st->p ('\\'); *width its bytes.  in_class: inside [...]
 * (\b is a backspace there). */
static int
kvs_glen_escape(kvs_glen_t *st, int caseless, int in_class,
    uint64_t *width)
{
    int                   c, h;
    uint64_t              cp;
    const unsigned char  *at;

    at = st->p;
    st->p++;

    if (st->p >= st->end) {
        return kvs_glen_fail(st, at, KVS_EUNSUPPORTED,
                             "a lone \\ ends the pattern");
    }

    c = *st->p++;

    switch (c) {

    case 'd': case 'w': case 's':
        *width = 1;
        return KVS_OK;

    case 'D': case 'W': case 'S': case 'N': case 'H': case 'V':
        *width = 4;
        return KVS_OK;

    case 'h': case 'v': case 'R':
        *width = 3;
        return KVS_OK;

    case 'b': case 'B':
        if (in_class && c == 'b') {
            *width = 1;
            return KVS_OK;
        }

        if (st->window_rule) {
            return kvs_glen_fail(st, at, KVS_EUNSUPPORTED,
                                 "\\b or \\B with window= (the window's "
                                 "edge would decide it)");
        }

        *width = 4;
        return KVS_OK;

    case 'p': case 'P':
        if (st->p < st->end && *st->p == '{') {
            while (st->p < st->end && *st->p != '}') {
                st->p++;
            }
            if (st->p >= st->end) {
                return kvs_glen_fail(st, at, KVS_EUNSUPPORTED,
                                     "an unterminated \\p{");
            }
        }
        st->p++;
        *width = 4;
        return KVS_OK;

    case 'x':
        cp = 0;
        if (st->p < st->end && *st->p == '{') {
            st->p++;
            while (st->p < st->end && (h = kvs_glen_hex(*st->p)) >= 0) {
                cp = cp < 0x110000 ? cp * 16 + (uint64_t) h : cp;
                st->p++;
            }
            if (st->p >= st->end || *st->p != '}') {
                return kvs_glen_fail(st, at, KVS_EUNSUPPORTED,
                                     "an unterminated \\x{");
            }
            st->p++;

        } else {
            for (h = 0; h < 2 && st->p < st->end
                        && kvs_glen_hex(*st->p) >= 0; h++)
            {
                cp = cp * 16 + (uint64_t) kvs_glen_hex(*st->p++);
            }
        }
        *width = caseless && cp >= 0x80 ? 4 : kvs_glen_cp_len(cp);
        return KVS_OK;

    case 'o':
        cp = 0;
        if (st->p >= st->end || *st->p != '{') {
            return kvs_glen_fail(st, at, KVS_EUNSUPPORTED,
                                 "\\o without {");
        }
        st->p++;
        while (st->p < st->end && *st->p >= '0' && *st->p <= '7') {
            cp = cp < 0x110000 ? cp * 8 + (uint64_t) (*st->p - '0') : cp;
            st->p++;
        }
        if (st->p >= st->end || *st->p != '}') {
            return kvs_glen_fail(st, at, KVS_EUNSUPPORTED,
                                 "an unterminated \\o{");
        }
        st->p++;
        *width = caseless && cp >= 0x80 ? 4 : kvs_glen_cp_len(cp);
        return KVS_OK;

    case '0':
        /* \0 and up to two more octal digits: at most \077, one byte */
        for (h = 0; h < 2 && st->p < st->end
                    && *st->p >= '0' && *st->p <= '7'; h++)
        {
            st->p++;
        }
        *width = 1;
        return KVS_OK;

    case 'c':
        if (st->p >= st->end) {
            return kvs_glen_fail(st, at, KVS_EUNSUPPORTED,
                                 "\\c ends the pattern");
        }
        st->p++;
        *width = 1;
        return KVS_OK;

    case 'a': case 'e': case 'f': case 'n': case 'r': case 't':
        *width = 1;
        return KVS_OK;

    case 'X':
        return kvs_glen_fail(st, at, KVS_EUNSUPPORTED,
                             "\\X (an unbounded grapheme)");

    case 'A': case 'z': case 'Z': case 'G': case 'K': case 'C':
        return kvs_glen_fail(st, at, KVS_EUNSUPPORTED,
                             "\\A, \\z, \\Z, \\G, \\K and \\C are not "
                             "supported");

    default:
        if ((c >= '1' && c <= '9') || c == 'g' || c == 'k') {
            return kvs_glen_fail(st, at, KVS_EUNSUPPORTED,
                                 "a backreference");
        }

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
            || (c >= '0' && c <= '9') || c >= 0x80)
        {
            return kvs_glen_fail(st, at, KVS_EUNSUPPORTED,
                                 "an unsupported escape");
        }

        /* escaped punctuation: itself */
        *width = 1;
        return KVS_OK;
    }
}


/* A class [...] at st->p. */
static uint64_t
kvs_glen_class(kvs_glen_t *st, int caseless)
{
    int                   wide;
    uint64_t              w;
    const unsigned char  *at;

    at = st->p;
    st->p++;
    wide = caseless;

    if (st->p < st->end && *st->p == '^') {
        wide = 1;
        st->p++;
    }

    /* a ] first is a member */
    if (st->p < st->end && *st->p == ']') {
        st->p++;
    }

    while (st->p < st->end && *st->p != ']') {

        if (*st->p == '[' && st->p + 1 < st->end && st->p[1] == ':') {
            /* [:name:] or [:^name:] */
            if (st->p + 2 < st->end && st->p[2] == '^') {
                wide = 1;
            }
            st->p += 2;
            while (st->p + 1 < st->end
                   && !(st->p[0] == ':' && st->p[1] == ']'))
            {
                st->p++;
            }
            if (st->p + 1 >= st->end) {
                kvs_glen_fail(st, at, KVS_EUNSUPPORTED,
                              "an unterminated [:class:]");
                return 0;
            }
            st->p += 2;
            continue;
        }

        if (*st->p == '\\') {
            if (st->p + 1 < st->end && st->p[1] == 'Q') {
                kvs_glen_fail(st, st->p, KVS_EUNSUPPORTED,
                              "\\Q inside a class");
                return 0;
            }
            if (kvs_glen_escape(st, caseless, 1, &w) != KVS_OK) {
                return 0;
            }
            if (w > 1) {
                wide = 1;
            }
            continue;
        }

        if (*st->p >= 0x80) {
            wide = 1;
        }

        st->p++;
    }

    if (st->p >= st->end) {
        kvs_glen_fail(st, at, KVS_EUNSUPPORTED, "an unterminated class");
        return 0;
    }

    st->p++;

    return wide ? 4 : 1;
}


/* (?flags) or (?flags: at st->p (after "(?"); *caseless updated, *colon
 * set for a group.  0 when it is not an option setting. */
static int
kvs_glen_flags(kvs_glen_t *st, int *caseless, int *colon)
{
    int                   on, ci;
    const unsigned char  *q;

    q = st->p;
    on = 1;
    ci = *caseless;

    while (q < st->end) {
        switch (*q) {
        case '-':
            on = 0;
            break;
        case 'i':
            ci = on;
            break;
        case 'm': case 's': case 'n': case 'U': case 'J':
            break;
        case 'x':
            kvs_glen_fail(st, q, KVS_EUNSUPPORTED,
                          "extended mode (?x) is not supported");
            return 1;
        case ')':
        case ':':
            *colon = (*q == ':');
            *caseless = ci;
            st->p = q + 1;
            return 1;
        default:
            return 0;
        }
        q++;
    }

    return 0;
}


/* A group after its '(' (st->p past it): its width. */
static uint64_t
kvs_glen_group(kvs_glen_t *st, int depth, int *caseless, int *setting)
{
    int                   colon, ci;
    uint64_t              w;
    const unsigned char  *at;

    at = st->p - 1;
    *setting = 0;
    ci = *caseless;

    if (depth >= KVS_GUARD_DEPTH) {
        kvs_glen_fail(st, at, KVS_EUNSUPPORTED, "groups nested too deep");
        return 0;
    }

    if (st->p < st->end && *st->p == '*') {
        kvs_glen_fail(st, at, KVS_EUNSUPPORTED, "a (*VERB)");
        return 0;
    }

    if (st->p < st->end && *st->p == '?') {
        st->p++;

        if (st->p >= st->end) {
            kvs_glen_fail(st, at, KVS_EUNSUPPORTED, "an unterminated group");
            return 0;
        }

        switch (*st->p) {

        case '#':
            while (st->p < st->end && *st->p != ')') {
                st->p++;
            }
            if (st->p >= st->end) {
                kvs_glen_fail(st, at, KVS_EUNSUPPORTED,
                              "an unterminated comment");
                return 0;
            }
            st->p++;
            *setting = 1;
            return 0;

        case ':': case '|':
            st->p++;
            break;

        case '>':
            if (st->window_rule) {
                kvs_glen_fail(st, at, KVS_EUNSUPPORTED,
                              "an atomic group with window=");
                return 0;
            }
            st->p++;
            break;

        case '=': case '!':
            kvs_glen_fail(st, at, KVS_EUNSUPPORTED, "a lookahead");
            return 0;

        case '<':
            if (st->p + 1 < st->end
                && (st->p[1] == '=' || st->p[1] == '!'))
            {
                kvs_glen_fail(st, at, KVS_EUNSUPPORTED, "a lookbehind");
                return 0;
            }
            /* (?<name> */
            /* fall through */
        case '\'':
        case 'P':
            if (*st->p == 'P') {
                st->p++;
                if (st->p >= st->end || *st->p != '<') {
                    kvs_glen_fail(st, at, KVS_EUNSUPPORTED,
                                  "a backreference or recursion");
                    return 0;
                }
            }
            st->p++;
            while (st->p < st->end && *st->p != '>' && *st->p != '\'') {
                st->p++;
            }
            if (st->p >= st->end) {
                kvs_glen_fail(st, at, KVS_EUNSUPPORTED,
                              "an unterminated group name");
                return 0;
            }
            st->p++;
            break;

        default:
            colon = 0;
            if (!kvs_glen_flags(st, &ci, &colon)) {
                kvs_glen_fail(st, at, KVS_EUNSUPPORTED,
                              "a recursion, conditional or callout");
                return 0;
            }
            if (st->rc != KVS_OK) {
                return 0;
            }
            if (!colon) {
                /* (?i): the rest of the enclosing group */
                *caseless = ci;
                *setting = 1;
                return 0;
            }
            break;
        }
    }

    w = kvs_glen_alt(st, depth + 1, ci);

    if (st->rc != KVS_OK) {
        return 0;
    }

    if (st->p >= st->end || *st->p != ')') {
        kvs_glen_fail(st, at, KVS_EUNSUPPORTED, "an unterminated group");
        return 0;
    }

    st->p++;

    return w;
}


/* Branches up to an unmatched ')' or the end: the widest. */
static uint64_t
kvs_glen_alt(kvs_glen_t *st, int depth, int caseless)
{
    int                   c, setting, quoted;
    uint64_t              best, sum, w, lo, hi;
    const unsigned char  *q;

    best = 0;
    sum = 0;
    quoted = 0;

    while (st->p < st->end && st->rc == KVS_OK) {
        c = *st->p;

        if (quoted) {
            if (c == '\\' && st->p + 1 < st->end && st->p[1] == 'E') {
                st->p += 2;
                quoted = 0;
                continue;
            }
            w = kvs_glen_lit((unsigned char) c, caseless);
            st->p += kvs_glen_utf8_len((unsigned char) c);
            sum = kvs_glen_add(sum, w);
            continue;
        }

        if (c == ')') {
            break;
        }

        if (c == '|') {
            best = sum > best ? sum : best;
            sum = 0;
            st->p++;
            continue;
        }

        setting = 0;

        switch (c) {

        case '(':
            st->p++;
            w = kvs_glen_group(st, depth, &caseless, &setting);
            break;

        case '[':
            w = kvs_glen_class(st, caseless);
            break;

        case '\\':
            if (st->p + 1 < st->end && st->p[1] == 'Q') {
                st->p += 2;
                quoted = 1;
                continue;
            }
            if (st->p + 1 < st->end && st->p[1] == 'E') {
                st->p += 2;
                continue;
            }
            w = 0;
            (void) kvs_glen_escape(st, caseless, 0, &w);
            break;

        case '.':
            st->p++;
            w = 4;
            break;

        case '^':
            st->p++;
            w = 0;
            break;

        case '$':
            if (st->window_rule) {
                kvs_glen_fail(st, st->p, KVS_EUNSUPPORTED,
                              "$ with window= (the window's edge would "
                              "decide it)");
                return 0;
            }
            st->p++;
            w = 4;
            break;

        case '*': case '+': case '?':
            kvs_glen_fail(st, st->p, KVS_EUNSUPPORTED,
                          "a quantifier with nothing before it");
            return 0;

        default:
            w = kvs_glen_lit((unsigned char) c, caseless);
            st->p += kvs_glen_utf8_len((unsigned char) c);
            if (st->p > st->end) {
                st->p = st->end;
            }
            break;
        }

        if (st->rc != KVS_OK) {
            return 0;
        }

        if (setting) {
            continue;
        }

        /* a quantifier on the item */
        if (st->p < st->end) {
            q = st->p;
            c = *st->p;
            lo = 1;
            hi = 1;

            if (c == '?') {
                st->p++;
                lo = 0;

            } else if (c == '*' || c == '+') {
                st->p++;
                hi = KVS_GUARD_INF;

            } else if (c == '{' && kvs_glen_braces(st, &lo, &hi)) {
                /* read */
            }

            if (hi >= KVS_GUARD_INF && w > 0 && !st->unbounded) {
                st->unbounded = 1;
                st->unb_off = (size_t) (q - st->start);
            }

            w = kvs_glen_mul(w, hi);

            if (st->p != q && st->p < st->end
                && (*st->p == '?' || *st->p == '+'))
            {
                if (*st->p == '+' && st->window_rule) {
                    kvs_glen_fail(st, st->p, KVS_EUNSUPPORTED,
                                  "a possessive quantifier with window=");
                    return 0;
                }
                st->p++;
            }
        }

        sum = kvs_glen_add(sum, w);
    }

    return sum > best ? sum : best;
}


int
kvs_guard_measure(const char *pat, size_t len, int window_rule,
    uint32_t *w, size_t *off, kvs_err_t *err)
{
    uint64_t    n;
    kvs_glen_t  st;

    memset(&st, 0, sizeof(st));
    st.start = (const unsigned char *) pat;
    st.p = st.start;
    st.end = st.start + len;
    st.window_rule = window_rule;
    st.err = err;
    *w = 0;
    *off = 0;

    n = kvs_glen_alt(&st, 0, 0);

    if (st.rc == KVS_OK && st.p < st.end) {
        kvs_glen_fail(&st, st.p, KVS_EUNSUPPORTED, "an unmatched )");
    }

    if (st.rc != KVS_OK) {
        *off = st.off;
        return st.rc;
    }

    if (window_rule) {
        return KVS_OK;
    }

    if (st.unbounded) {
        *off = st.unb_off;
        return kvs_err_set(err, KVS_ERANGE, "the match length is unbounded "
                           "(the quantifier at offset %zu): bound it, or "
                           "give the rule window=N", st.unb_off);
    }

    if (n > KVS_GUARD_WINDOW_MAX) {
        return kvs_err_set(err, KVS_ERANGE, "a match may span %llu bytes, "
                           "over the %d the guard holds back",
                           (unsigned long long) n, KVS_GUARD_WINDOW_MAX);
    }

    if (n == 0) {
        return kvs_err_set(err, KVS_EINVAL, "the pattern matches only the "
                           "empty string");
    }

    *w = (uint32_t) n;

    return KVS_OK;
}
