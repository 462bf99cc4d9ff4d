/*
 * kvs_gram_regex: the regex subset of JSON Schema's "pattern" (and of the
 * "format" patterns) compiled to grammar rules over the bytes of a JSON
 * string body.
 *
 * Owns the translation only; the rules go into the caller's kvs_gram_t.
 * The regex is matched by the decoded text, and each code point is
 * written in one canonical way: itself in UTF-8 when JSON allows it raw,
 * else its short escape (\" \\ \b \f \n \r \t) or \u00XX.  So the string
 * the model writes decodes to a match, and the mask never has to choose
 * between encodings.
 *
 * Supported: literals, escapes (\d \D \w \W \s \S \n \r \t \f \v \xHH
 * \uHHHH and escaped punctuation), ".", classes with ranges and
 * negation, groups "(...)", "(?:...)", "(?<name>...)", "|", quantifiers
 * "*", "+", "?", "{n}", "{n,}", "{n,m}" (lazy forms too: a full match
 * does not depend on laziness), "^" first and "$" last.  Anything else is
 * KVS_EUNSUPPORTED naming the construct: lookaround, backreferences,
 * word boundaries, \p classes, possessive quantifiers, anchors inside.
 * A pattern without "^" may be preceded, one without "$" followed, by
 * any text (JSON Schema patterns are not anchored).
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_gram_schema_impl.h"

#define KVS_RE_MAX_REPEAT  1000
#define KVS_RE_MAX_DEPTH   64


typedef struct {
    uint32_t  lo, hi;
} kvs_re_range_t;

typedef struct {
    kvs_re_range_t  *r;
    size_t           n, cap;
} kvs_re_set_t;

typedef struct {
    kvs_gram_t      *g;
    const uint8_t   *p;
    size_t           i, n;
    unsigned         depth;
    unsigned         flags;           /* KVS_GRAM_*: JANSSON, no U+0000 */
    kvs_err_t       *err;
} kvs_re_t;


static int
kvs_re_set_add(kvs_re_set_t *s, uint32_t lo, uint32_t hi)
{
    size_t           c;
    kvs_re_range_t  *q;

    if (s->n == s->cap) {
        c = s->cap ? s->cap * 2 : 8;
        q = realloc(s->r, c * sizeof(kvs_re_range_t));
        if (q == NULL) {
            return KVS_ENOMEM;
        }
        s->r = q;
        s->cap = c;
    }

    s->r[s->n].lo = lo;
    s->r[s->n].hi = hi;
    s->n++;

    return KVS_OK;
}


static int
kvs_re_range_cmp(const void *a, const void *b)
{
    const kvs_re_range_t  *x = a, *y = b;

    return x->lo < y->lo ? -1 : x->lo > y->lo;
}


/* sorts and merges overlapping or touching ranges */
static void
kvs_re_set_norm(kvs_re_set_t *s)
{
    size_t  i, j;

    if (s->n == 0) {
        return;
    }

    qsort(s->r, s->n, sizeof(kvs_re_range_t), kvs_re_range_cmp);

    for (i = 1, j = 0; i < s->n; i++) {
        if (s->r[i].lo <= s->r[j].hi + 1) {
            if (s->r[i].hi > s->r[j].hi) {
                s->r[j].hi = s->r[i].hi;
            }
        } else {
            s->r[++j] = s->r[i];
        }
    }

    s->n = j + 1;
}


static int
kvs_re_set_negate(kvs_re_set_t *s)
{
    size_t        i;
    uint32_t      next;
    kvs_re_set_t  t;

    kvs_re_set_norm(s);
    memset(&t, 0, sizeof(t));
    next = 0;

    for (i = 0; i < s->n; i++) {
        if (s->r[i].lo > next && kvs_re_set_add(&t, next, s->r[i].lo - 1)) {
            free(t.r);
            return KVS_ENOMEM;
        }
        next = s->r[i].hi + 1;
    }

    if (next <= 0x10FFFF && kvs_re_set_add(&t, next, 0x10FFFF) != KVS_OK) {
        free(t.r);
        return KVS_ENOMEM;
    }

    free(s->r);
    *s = t;

    return KVS_OK;
}


/* The rule matching one code point of the set, canonically encoded. */
static int
kvs_re_set_rule(kvs_re_t *re, kvs_re_set_t *s, uint32_t *rule)
{
    int             rc;
    size_t          i;
    uint32_t        c, lo, hi;
    char            esc[8];
    kvs_gram_seq_t  q;

    kvs_re_set_norm(s);

    rc = kvs_gram_rule_new(re->g, rule, re->err);
    if (rc != KVS_OK) {
        return rc;
    }

    memset(&q, 0, sizeof(q));

    for (i = 0; i < s->n && rc == KVS_OK; i++) {
        /* the characters JSON must escape, one alternative each */
        for (c = s->r[i].lo; c <= s->r[i].hi && c < 0x20; c++) {
            if (c == 0 && (re->flags & KVS_GRAM_JANSSON)) {
                continue;
            }

            switch (c) {
            case '\b': memcpy(esc, "\\b", 3); break;
            case '\f': memcpy(esc, "\\f", 3); break;
            case '\n': memcpy(esc, "\\n", 3); break;
            case '\r': memcpy(esc, "\\r", 3); break;
            case '\t': memcpy(esc, "\\t", 3); break;
            default:
                esc[0] = '\\';
                esc[1] = 'u';
                esc[2] = '0';
                esc[3] = '0';
                esc[4] = "0123456789abcdef"[c >> 4];
                esc[5] = "0123456789abcdef"[c & 15];
                esc[6] = '\0';
                break;
            }
            kvs_gram_seq_reset(&q);
            kvs_gram_seq_lit(&q, esc, strlen(esc));
            rc = kvs_gram_add_alt(re->g, *rule, &q, re->err);
            if (rc != KVS_OK) {
                break;
            }
        }

        /* the rest raw, around '"' and '\\' */
        lo = s->r[i].lo < 0x20 ? 0x20 : s->r[i].lo;
        hi = s->r[i].hi;

        while (rc == KVS_OK && lo <= hi) {
            c = lo <= '"' && hi >= '"' ? '"'
                : lo <= '\\' && hi >= '\\' ? '\\' : UINT32_MAX;

            if (c == UINT32_MAX) {
                rc = kvs_gram_add_cp_range(re->g, *rule, lo, hi, NULL,
                                           re->err);
                break;
            }

            if (c > lo) {
                rc = kvs_gram_add_cp_range(re->g, *rule, lo, c - 1, NULL,
                                           re->err);
            }
            if (rc == KVS_OK) {
                kvs_gram_seq_reset(&q);
                kvs_gram_seq_lit(&q, c == '"' ? "\\\"" : "\\\\", 2);
                rc = kvs_gram_add_alt(re->g, *rule, &q, re->err);
            }
            lo = c + 1;
        }
    }

    kvs_gram_seq_free(&q);

    if (rc == KVS_OK && s->n == 0) {
        return kvs_err_set(re->err, KVS_EUNSUPPORTED,
                           "regex class matches no character");
    }

    return rc;
}


static int
kvs_re_unsupported(kvs_re_t *re, size_t at, size_t len)
{
    if (at + len > re->n) {
        len = re->n - at;
    }

    return kvs_err_set(re->err, KVS_EUNSUPPORTED,
                       "unsupported regex construct '%.*s'", (int) len,
                       (const char *) re->p + at);
}


/* The next code point of the pattern itself (it is UTF-8). */
static int
kvs_re_cp(kvs_re_t *re, uint32_t *cp)
{
    uint32_t  c;
    size_t    k, n;

    c = re->p[re->i];
    n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;

    if (n == 0 || re->i + n > re->n) {
        return kvs_err_set(re->err, KVS_EFORMAT, "regex is not UTF-8");
    }

    if (n > 1) {
        c &= 0xFF >> (n + 1);
        for (k = 1; k < n; k++) {
            if ((re->p[re->i + k] & 0xC0) != 0x80) {
                return kvs_err_set(re->err, KVS_EFORMAT,
                                   "regex is not UTF-8");
            }
            c = c << 6 | (re->p[re->i + k] & 0x3F);
        }
    }

    if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
        return kvs_err_set(re->err, KVS_EFORMAT, "regex is not UTF-8");
    }

    re->i += n;
    *cp = c;

    return KVS_OK;
}


static int
kvs_re_hex(kvs_re_t *re, unsigned digits, uint32_t *v)
{
    unsigned  k;
    int       c, d;

    *v = 0;

    for (k = 0; k < digits; k++) {
        if (re->i >= re->n) {
            return kvs_re_unsupported(re, re->i - 2, 2 + k);
        }
        c = re->p[re->i];
        d = c >= '0' && c <= '9' ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) {
            return kvs_re_unsupported(re, re->i - 2 - k, 3 + k);
        }
        *v = *v << 4 | (uint32_t) d;
        re->i++;
    }

    return KVS_OK;
}


/*
 * An escape after '\' (re->i at the letter), its code points added to s.
 */
static int
kvs_re_escape(kvs_re_t *re, kvs_re_set_t *s)
{
    int           rc, neg;
    size_t        at, k;
    uint32_t      c;
    kvs_re_set_t  t;

    at = re->i - 1;

    if (re->i >= re->n) {
        return kvs_re_unsupported(re, at, 1);
    }

    c = re->p[re->i++];
    neg = 0;
    memset(&t, 0, sizeof(t));

    switch (c) {

    case 'D':
        neg = 1;
        /* fall through */
    case 'd':
        rc = kvs_re_set_add(&t, '0', '9');
        break;

    case 'W':
        neg = 1;
        /* fall through */
    case 'w':
        rc = kvs_re_set_add(&t, '0', '9') | kvs_re_set_add(&t, 'A', 'Z')
             | kvs_re_set_add(&t, 'a', 'z') | kvs_re_set_add(&t, '_', '_');
        break;

    case 'S':
        neg = 1;
        /* fall through */
    case 's':
        rc = kvs_re_set_add(&t, '\t', '\r') | kvs_re_set_add(&t, ' ', ' ')
             | kvs_re_set_add(&t, 0xA0, 0xA0)
             | kvs_re_set_add(&t, 0x1680, 0x1680)
             | kvs_re_set_add(&t, 0x2000, 0x200A)
             | kvs_re_set_add(&t, 0x2028, 0x2029)
             | kvs_re_set_add(&t, 0x202F, 0x202F)
             | kvs_re_set_add(&t, 0x205F, 0x205F)
             | kvs_re_set_add(&t, 0x3000, 0x3000)
             | kvs_re_set_add(&t, 0xFEFF, 0xFEFF);
        break;

    case 'n': c = '\n'; goto one;
    case 'r': c = '\r'; goto one;
    case 't': c = '\t'; goto one;
    case 'f': c = '\f'; goto one;
    case 'v': c = '\v'; goto one;

    case 'x':
        rc = kvs_re_hex(re, 2, &c);
        if (rc != KVS_OK) {
            return rc;
        }
        goto one;

    case 'u':
        rc = kvs_re_hex(re, 4, &c);
        if (rc != KVS_OK) {
            return rc;
        }
        if (c >= 0xD800 && c <= 0xDFFF) {
            return kvs_re_unsupported(re, at, 6);
        }
        goto one;

    default:
        if (c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')
                          || (c >= 'A' && c <= 'Z')))
        {
            goto one;
        }
        /* \b \B \1 \p{..} \k<..> \c and the rest */
        return kvs_re_unsupported(re, at, 2);
    }

    if (rc == KVS_OK && neg) {
        rc = kvs_re_set_negate(&t);
    }

    for (k = 0; rc == KVS_OK && k < t.n; k++) {
        rc = kvs_re_set_add(s, t.r[k].lo, t.r[k].hi);
    }

    free(t.r);

    return rc == KVS_OK
           ? KVS_OK : kvs_err_set(re->err, KVS_ENOMEM, "regex: no memory");

one:

    if (kvs_re_set_add(s, c, c) != KVS_OK) {
        return kvs_err_set(re->err, KVS_ENOMEM, "regex: no memory");
    }

    return KVS_OK;
}


/* A class after '[' up to and including ']'. */
static int
kvs_re_class(kvs_re_t *re, kvs_re_set_t *s)
{
    int       rc, neg, first;
    size_t    at, n0;
    uint32_t  lo, hi;

    at = re->i - 1;
    neg = 0;
    first = 1;

    if (re->i < re->n && re->p[re->i] == '^') {
        neg = 1;
        re->i++;
    }

    for ( ;; ) {
        if (re->i >= re->n) {
            return kvs_re_unsupported(re, at, re->n - at);
        }

        if (re->p[re->i] == ']' && !first) {
            re->i++;
            break;
        }
        first = 0;

        if (re->p[re->i] == '[' && re->i + 1 < re->n
            && (re->p[re->i + 1] == ':' || re->p[re->i + 1] == '='
                || re->p[re->i + 1] == '.'))
        {
            return kvs_re_unsupported(re, re->i, 2);
        }

        n0 = s->n;

        if (re->p[re->i] == '\\') {
            re->i++;
            rc = kvs_re_escape(re, s);
            if (rc != KVS_OK) {
                return rc;
            }
            if (s->n != n0 + 1 || s->r[n0].lo != s->r[n0].hi) {
                continue;               /* a shorthand: no range from it */
            }
            lo = s->r[n0].lo;
            s->n = n0;
        } else {
            rc = kvs_re_cp(re, &lo);
            if (rc != KVS_OK) {
                return rc;
            }
        }

        hi = lo;

        if (re->i + 1 < re->n && re->p[re->i] == '-'
            && re->p[re->i + 1] != ']')
        {
            re->i++;
            if (re->p[re->i] == '\\') {
                re->i++;
                rc = kvs_re_escape(re, s);
                if (rc != KVS_OK) {
                    return rc;
                }
                if (s->n != n0 + 1 || s->r[n0].lo != s->r[n0].hi) {
                    return kvs_re_unsupported(re, at, re->i - at);
                }
                hi = s->r[n0].lo;
                s->n = n0;
            } else {
                rc = kvs_re_cp(re, &hi);
                if (rc != KVS_OK) {
                    return rc;
                }
            }
            if (hi < lo) {
                return kvs_err_set(re->err, KVS_EFORMAT,
                                   "regex class range out of order");
            }
        }

        if (kvs_re_set_add(s, lo, hi) != KVS_OK) {
            return kvs_err_set(re->err, KVS_ENOMEM, "regex: no memory");
        }
    }

    if (neg && kvs_re_set_negate(s) != KVS_OK) {
        return kvs_err_set(re->err, KVS_ENOMEM, "regex: no memory");
    }

    return KVS_OK;
}


static int kvs_re_alt(kvs_re_t *re, uint32_t *rule, kvs_re_info_t *info);


/* One atom into a rule. */
static int
kvs_re_atom(kvs_re_t *re, uint32_t *rule, kvs_re_info_t *info)
{
    int           rc;
    size_t        at, k;
    uint32_t      c;
    kvs_re_set_t  s;

    at = re->i;
    c = re->p[re->i];

    if (c == '(') {
        re->i++;
        if (re->i < re->n && re->p[re->i] == '?') {
            if (re->i + 1 < re->n && re->p[re->i + 1] == ':') {
                re->i += 2;
            } else if (re->i + 2 < re->n && re->p[re->i + 1] == '<'
                       && re->p[re->i + 2] != '=' && re->p[re->i + 2] != '!')
            {
                /* a named group is a group */
                while (re->i < re->n && re->p[re->i] != '>') {
                    re->i++;
                }
                if (re->i >= re->n) {
                    return kvs_re_unsupported(re, at, 3);
                }
                re->i++;
            } else {
                return kvs_re_unsupported(re, at,
                                          re->i + 2 < re->n
                                          && re->p[re->i + 1] == '<' ? 4 : 3);
            }
        }

        if (++re->depth > KVS_RE_MAX_DEPTH) {
            return kvs_err_set(re->err, KVS_EUNSUPPORTED,
                               "regex nests more than %d groups",
                               KVS_RE_MAX_DEPTH);
        }

        rc = kvs_re_alt(re, rule, info);
        re->depth--;
        if (rc != KVS_OK) {
            return rc;
        }
        if (re->i >= re->n || re->p[re->i] != ')') {
            return kvs_err_set(re->err, KVS_EFORMAT,
                               "regex: '(' at %zu is not closed", at);
        }
        re->i++;
        return KVS_OK;
    }

    if (c == ')' || c == '*' || c == '+' || c == '?' || c == '{'
        || c == '|')
    {
        return kvs_re_unsupported(re, at, 1);
    }

    if (c == '^' || c == '$') {
        return kvs_err_set(re->err, KVS_EUNSUPPORTED,
                           "unsupported regex construct '%c' other than "
                           "first or last", (int) c);
    }

    memset(&s, 0, sizeof(s));

    if (c == '[') {
        re->i++;
        rc = kvs_re_class(re, &s);
    } else if (c == '\\') {
        re->i++;
        rc = kvs_re_escape(re, &s);
    } else if (c == '.') {
        re->i++;
        rc = kvs_re_set_add(&s, '\n', '\n') | kvs_re_set_add(&s, '\r', '\r')
             | kvs_re_set_add(&s, 0x2028, 0x2029);
        rc = rc == KVS_OK ? kvs_re_set_negate(&s) : rc;
        if (rc != KVS_OK) {
            rc = kvs_err_set(re->err, KVS_ENOMEM, "regex: no memory");
        }
    } else {
        rc = kvs_re_cp(re, &c);
        if (rc == KVS_OK && kvs_re_set_add(&s, c, c) != KVS_OK) {
            rc = kvs_err_set(re->err, KVS_ENOMEM, "regex: no memory");
        }
    }

    if (rc == KVS_OK) {
        kvs_re_info_empty(info);
        for (k = 0; k < s.n; k++) {
            kvs_re_info_cps(info, s.r[k].lo, s.r[k].hi);
        }
        kvs_re_info_atom(info);
        rc = kvs_re_set_rule(re, &s, rule);
    }

    free(s.r);

    return rc;
}


static int
kvs_re_num(kvs_re_t *re, uint32_t *v)
{
    size_t  at;

    at = re->i;
    *v = 0;

    while (re->i < re->n && re->p[re->i] >= '0' && re->p[re->i] <= '9') {
        if (*v > KVS_RE_MAX_REPEAT) {
            return kvs_err_set(re->err, KVS_EUNSUPPORTED,
                               "regex repeat count over %d",
                               KVS_RE_MAX_REPEAT);
        }
        *v = *v * 10 + (uint32_t) (re->p[re->i++] - '0');
    }

    if (*v > KVS_RE_MAX_REPEAT) {
        return kvs_err_set(re->err, KVS_EUNSUPPORTED,
                           "regex repeat count over %d", KVS_RE_MAX_REPEAT);
    }

    return re->i > at ? KVS_OK : KVS_EFORMAT;
}


/* A repeat: an atom and its quantifier. */
static int
kvs_re_repeat(kvs_re_t *re, uint32_t *rule, kvs_re_info_t *info)
{
    int       rc;
    char      why[256];
    size_t    at, save;
    uint32_t  x, min, max;

    rc = kvs_re_atom(re, &x, info);
    if (rc != KVS_OK) {
        return rc;
    }

    if (re->i >= re->n) {
        *rule = x;
        return KVS_OK;
    }

    at = re->i;

    switch (re->p[re->i]) {
    case '*': min = 0; max = UINT32_MAX; re->i++; break;
    case '+': min = 1; max = UINT32_MAX; re->i++; break;
    case '?': min = 0; max = 1; re->i++; break;

    case '{':
        save = re->i++;
        rc = kvs_re_num(re, &min);
        if (rc == KVS_EUNSUPPORTED) {
            return rc;                /* the count's message is set */
        }
        if (rc != KVS_OK) {
            return kvs_re_unsupported(re, save, 2);
        }
        max = min;
        if (re->i < re->n && re->p[re->i] == ',') {
            re->i++;
            max = UINT32_MAX;
            if (re->i < re->n && re->p[re->i] != '}') {
                rc = kvs_re_num(re, &max);
                if (rc != KVS_OK) {
                    return rc == KVS_EUNSUPPORTED
                           ? rc : kvs_re_unsupported(re, save, re->i - save);
                }
            }
        }
        if (re->i >= re->n || re->p[re->i] != '}' || max < min) {
            return kvs_re_unsupported(re, save, re->i - save + 1);
        }
        re->i++;
        break;

    default:
        *rule = x;
        return KVS_OK;
    }

    if (re->i < re->n && re->p[re->i] == '?') {
        re->i++;                        /* lazy: the same language */
    } else if (re->i < re->n && re->p[re->i] == '+') {
        return kvs_re_unsupported(re, at, re->i - at + 1);
    }

    if (re->i < re->n && (re->p[re->i] == '*' || re->p[re->i] == '+'
                          || re->p[re->i] == '{'))
    {
        return kvs_re_unsupported(re, at, re->i - at + 1);
    }

    /* before any rule is made: a repeat the matcher would follow in
     * thousands of parses at once is refused (kvs_gram_reamb.c) */
    if (kvs_re_info_repeat(info, min, max,
                           re->flags & KVS_GRAM_AMBIGUOUS
                           ? UINT64_MAX : KVS_RE_MAX_PARSES, why,
                           sizeof(why))
        != KVS_OK)
    {
        return kvs_err_set(re->err, KVS_EUNSUPPORTED, "regex: the repeat "
                           "ending at %zu %s", re->i, why);
    }

    return kvs_gram_repeat(re->g, x, NULL, min, max, rule, re->err);
}


/* A concatenation up to '|', ')' or the end. */
static int
kvs_re_concat(kvs_re_t *re, uint32_t *rule, kvs_re_info_t *info)
{
    int             rc;
    uint32_t        x;
    kvs_re_info_t   xi;
    kvs_gram_seq_t  q;

    memset(&q, 0, sizeof(q));
    kvs_re_info_empty(info);
    rc = KVS_OK;

    while (re->i < re->n && re->p[re->i] != '|' && re->p[re->i] != ')') {
        rc = kvs_re_repeat(re, &x, &xi);
        if (rc != KVS_OK) {
            break;
        }
        kvs_re_info_concat(info, &xi);
        kvs_gram_seq_ref(&q, x);
    }

    if (rc == KVS_OK) {
        rc = kvs_gram_rule_new(re->g, rule, re->err);
    }
    if (rc == KVS_OK) {
        rc = kvs_gram_add_alt(re->g, *rule, &q, re->err);
    }

    kvs_gram_seq_free(&q);

    return rc;
}


static int
kvs_re_alt(kvs_re_t *re, uint32_t *rule, kvs_re_info_t *info)
{
    int             rc, first;
    uint32_t        x;
    kvs_re_info_t   xi;
    kvs_gram_seq_t  q;

    rc = kvs_gram_rule_new(re->g, rule, re->err);
    if (rc != KVS_OK) {
        return rc;
    }

    memset(&q, 0, sizeof(q));
    first = 1;

    for ( ;; ) {
        rc = kvs_re_concat(re, &x, &xi);
        if (rc != KVS_OK) {
            break;
        }
        kvs_re_info_alt(info, &xi, first);
        first = 0;

        kvs_gram_seq_reset(&q);
        kvs_gram_seq_ref(&q, x);
        rc = kvs_gram_add_alt(re->g, *rule, &q, re->err);
        if (rc != KVS_OK) {
            break;
        }

        if (re->i >= re->n || re->p[re->i] != '|') {
            break;
        }
        re->i++;
    }

    kvs_gram_seq_free(&q);

    return rc;
}


int
kvs_gram_regex(kvs_gram_t *g, const char *p, size_t len, uint32_t *rule,
    kvs_err_t *err)
{
    return kvs_sc_regex(g, p, len, 0, rule, err);
}


int
kvs_sc_regex(kvs_gram_t *g, const char *p, size_t len, unsigned flags,
    uint32_t *rule, kvs_err_t *err)
{
    int             rc, start, end;
    size_t          k, bs;
    uint32_t        body, any, star;
    kvs_re_t        re;
    kvs_re_info_t   info;
    kvs_re_set_t    s;
    kvs_gram_seq_t  q;

    memset(&re, 0, sizeof(re));
    re.g = g;
    re.p = (const uint8_t *) p;
    re.n = len;
    re.flags = flags;
    re.err = err;

    start = len > 0 && p[0] == '^';
    end = 0;

    if (len > (size_t) start && p[len - 1] == '$') {
        /* a '$' escaped by an odd run of backslashes is a literal */
        for (bs = 0, k = len - 1; k > 0 && p[k - 1] == '\\'; k--) {
            bs++;
        }
        end = bs % 2 == 0;
    }

    re.i = (size_t) start;
    re.n = len - (size_t) end;

    rc = kvs_re_alt(&re, &body, &info);
    if (rc != KVS_OK) {
        return rc;
    }

    if (re.i != re.n) {
        return kvs_err_set(err, KVS_EFORMAT,
                           "regex: unmatched ')' at %zu", re.i);
    }

    if ((start || end) && memchr(p, '|', len) != NULL) {
        /* "^a|b$" anchors each side, not the whole: only the plain
         * structure "^(...)$" with '|' inside a group is taken */
        int     lvl = 0;
        size_t  j;

        for (j = (size_t) start; j < re.n; j++) {
            if (p[j] == '\\') {
                j++;
            } else if (p[j] == '[') {
                while (j + 1 < re.n && p[j + 1] != ']') {
                    j += p[j + 1] == '\\' ? 2 : 1;
                }
            } else if (p[j] == '(') {
                lvl++;
            } else if (p[j] == ')') {
                lvl--;
            } else if (p[j] == '|' && lvl == 0) {
                return kvs_err_set(err, KVS_EUNSUPPORTED,
                                   "unsupported regex construct '|' at the "
                                   "top level with '^' or '$' (write "
                                   "^(a|b)$)");
            }
        }
    }

    if (start && end) {
        *rule = body;
        return KVS_OK;
    }

    /* any text before or after: (any char)* */
    memset(&s, 0, sizeof(s));
    if (kvs_re_set_add(&s, 0, 0x10FFFF) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "regex: no memory");
    }
    rc = kvs_re_set_rule(&re, &s, &any);
    free(s.r);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_gram_repeat(g, any, NULL, 0, UINT32_MAX, &star, err);
    if (rc != KVS_OK) {
        return rc;
    }

    memset(&q, 0, sizeof(q));
    if (!start) {
        kvs_gram_seq_ref(&q, star);
    }
    kvs_gram_seq_ref(&q, body);
    if (!end) {
        kvs_gram_seq_ref(&q, star);
    }

    rc = kvs_gram_rule_new(g, rule, err);
    if (rc == KVS_OK) {
        rc = kvs_gram_add_alt(g, *rule, &q, err);
    }

    kvs_gram_seq_free(&q);

    return rc;
}
