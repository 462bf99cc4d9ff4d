/*
 * kvs_gram_schema: JSON Schema -> grammar, and json_object mode.
 *
 * Owns the translation of a schema (a jansson value) into rules of a
 * kvs_gram_t whose sentences are exactly JSON texts, written the one way
 * this file chooses, that are instances of the schema:
 *
 *   - whitespace: none, except one space after "," and ":" (", " and
 *     ": ", or no space at all with KVS_GRAM_COMPACT), never before or
 *     after the value: a canonical layout, so the model cannot spend
 *     tokens on whitespace and masks stay few;
 *   - properties in the order the schema lists them, each at most once;
 *     extra properties only for an object without "properties" (a map);
 *   - strings: any valid UTF-8 and JSON escapes (no lone-surrogate \u);
 *     under "pattern" or "format", each character in its one canonical
 *     encoding (kvs_gram_regex.c);
 *   - const and enum values written as this file serialises them.
 *
 * So every output is valid, but not every valid instance is an output
 * (documented in docs/grammar.md).  A keyword outside the supported set,
 * or a value of it that is not supported, is KVS_EUNSUPPORTED with the
 * keyword's path in the message; nothing is silently ignored (annotation
 * keywords such as "title" constrain nothing and are accepted).
 *
 * Invariants: every rule made here gets at least one alternative before
 * kvs_gram_finish(), except a $ref rule while its target compiles (the
 * recursion); schema nesting is capped (opts.max_depth); every size goes
 * through the grammar's caps.
 */

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "grammar/kvs_grammar.h"

#define KVS_SC_NONE     UINT32_MAX
#define KVS_SC_PATH     256
#define KVS_SC_MAX_INT  1000000000000000000.0   /* |bound| <= 1e18 */

#define KVS_T_NULL    0x01
#define KVS_T_BOOL    0x02
#define KVS_T_OBJECT  0x04
#define KVS_T_ARRAY   0x08
#define KVS_T_STRING  0x10
#define KVS_T_NUMBER  0x20
#define KVS_T_INTEGER 0x40
#define KVS_T_ALL     0x7f


typedef struct {
    const json_t  *target;
    uint32_t       rule;
} kvs_sc_ref_t;

typedef struct {
    kvs_gram_t     *g;
    const json_t   *root;
    unsigned        flags;
    uint32_t        max_depth, depth;
    kvs_err_t      *err;
    char            path[KVS_SC_PATH];
    size_t          plen;
    const char     *comma, *colon;

    /* shared rules, made on first use */
    uint32_t        r_value, r_string, r_char, r_body, r_int, r_number;
    uint32_t        r_uint;

    kvs_sc_ref_t   *refs;
    size_t          n_refs, cap_refs;
} kvs_sc_t;


static int kvs_sc_schema(kvs_sc_t *sc, const json_t *s, uint32_t *rule);


/* ---- errors and paths -------------------------------------------------- */

static size_t
kvs_sc_push(kvs_sc_t *sc, const char *name)
{
    size_t  old;
    int     n;

    old = sc->plen;

    if (sc->plen < sizeof(sc->path)) {
        n = snprintf(sc->path + sc->plen, sizeof(sc->path) - sc->plen,
                     "%s%s", sc->plen > 0 ? "." : "", name);
        if (n > 0) {
            sc->plen += (size_t) n;
            if (sc->plen >= sizeof(sc->path)) {
                sc->plen = sizeof(sc->path) - 1;
            }
        }
    }

    return old;
}


static size_t
kvs_sc_push_index(kvs_sc_t *sc, size_t i)
{
    char  buf[32];

    snprintf(buf, sizeof(buf), "%zu", i);

    return kvs_sc_push(sc, buf);
}


static void
kvs_sc_pop(kvs_sc_t *sc, size_t old)
{
    sc->plen = old;
    sc->path[old] = '\0';
}


/* "path.kw: message"; kw NULL: "path: message" */
static int
kvs_sc_fail(kvs_sc_t *sc, int code, const char *kw, const char *fmt, ...)
{
    char     msg[KVS_ERR_MSG_LEN];
    va_list  ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    if (kw == NULL) {
        return kvs_err_set(sc->err, code, "%s%s%s",
                           sc->plen > 0 ? sc->path : "",
                           sc->plen > 0 ? ": " : "", msg);
    }

    return kvs_err_set(sc->err, code, "%s%s%s: %s",
                       sc->path, sc->plen > 0 ? "." : "", kw, msg);
}


/* ---- small builders ---------------------------------------------------- */

static int
kvs_sc_rule(kvs_sc_t *sc, uint32_t *rule)
{
    return kvs_gram_rule_new(sc->g, rule, sc->err);
}


/* rule -> seq, as a new rule */
static int
kvs_sc_rule_of(kvs_sc_t *sc, const kvs_gram_seq_t *q, uint32_t *rule)
{
    int  rc;

    rc = kvs_sc_rule(sc, rule);
    if (rc == KVS_OK) {
        rc = kvs_gram_add_alt(sc->g, *rule, q, sc->err);
    }

    return rc;
}


static int
kvs_sc_lit_rule(kvs_sc_t *sc, const char *lit, uint32_t *rule)
{
    int             rc;
    kvs_gram_seq_t  q;

    memset(&q, 0, sizeof(q));
    kvs_gram_seq_lit(&q, lit, strlen(lit));
    rc = kvs_sc_rule_of(sc, &q, rule);
    kvs_gram_seq_free(&q);

    return rc;
}


/* adds the alternative [open, x, close] with literal open/close */
static int
kvs_sc_wrap(kvs_sc_t *sc, uint32_t rule, const char *open, uint32_t x,
    const char *close)
{
    int             rc;
    kvs_gram_seq_t  q;

    memset(&q, 0, sizeof(q));
    kvs_gram_seq_lit(&q, open, strlen(open));
    kvs_gram_seq_ref(&q, x);
    kvs_gram_seq_lit(&q, close, strlen(close));
    rc = kvs_gram_add_alt(sc->g, rule, &q, sc->err);
    kvs_gram_seq_free(&q);

    return rc;
}


/* ---- JSON's lexical rules ---------------------------------------------- */

/* One character of a string body: raw UTF-8 or an escape; \u escapes
 * of surrogates are left out so that a character is a code point (what
 * minLength and maxLength count). */
static int
kvs_sc_char(kvs_sc_t *sc, uint32_t *rule)
{
    int              rc;
    unsigned         k;
    uint32_t         r, hex;
    kvs_gram_seq_t   q;
    static const char  *short_esc[] = { "\\\"", "\\\\", "\\/", "\\b",
                                        "\\f", "\\n", "\\r", "\\t" };

    if (sc->r_char != KVS_SC_NONE) {
        *rule = sc->r_char;
        return KVS_OK;
    }

    memset(&q, 0, sizeof(q));

    rc = kvs_sc_rule(sc, &r);
    if (rc == KVS_OK) {
        rc = kvs_gram_add_cp_range(sc->g, r, 0x20, 0x21, NULL, sc->err);
    }
    if (rc == KVS_OK) {
        rc = kvs_gram_add_cp_range(sc->g, r, 0x23, 0x5B, NULL, sc->err);
    }
    if (rc == KVS_OK) {
        rc = kvs_gram_add_cp_range(sc->g, r, 0x5D, 0x10FFFF, NULL, sc->err);
    }

    for (k = 0; rc == KVS_OK && k < 8; k++) {
        kvs_gram_seq_reset(&q);
        kvs_gram_seq_lit(&q, short_esc[k], 2);
        rc = kvs_gram_add_alt(sc->g, r, &q, sc->err);
    }

    /* hex digit */
    if (rc == KVS_OK) {
        rc = kvs_sc_rule(sc, &hex);
    }
    if (rc == KVS_OK) {
        const char  *ranges = "09afAF";

        for (k = 0; rc == KVS_OK && k < 3; k++) {
            kvs_gram_seq_reset(&q);
            kvs_gram_seq_range(&q, (uint8_t) ranges[2 * k],
                               (uint8_t) ranges[2 * k + 1]);
            rc = kvs_gram_add_alt(sc->g, hex, &q, sc->err);
        }
    }

    /* \u and four hex digits, D800-DFFF left out */
    for (k = 0; rc == KVS_OK && k < 7; k++) {
        static const char  lo[] = "0aAeEdD", hi[] = "9cCfFdD";

        kvs_gram_seq_reset(&q);
        kvs_gram_seq_lit(&q, "\\u", 2);
        kvs_gram_seq_range(&q, (uint8_t) lo[k], (uint8_t) hi[k]);
        if (k >= 5) {
            kvs_gram_seq_range(&q, '0', '7');
        } else {
            kvs_gram_seq_ref(&q, hex);
        }
        kvs_gram_seq_ref(&q, hex);
        kvs_gram_seq_ref(&q, hex);
        rc = kvs_gram_add_alt(sc->g, r, &q, sc->err);
    }

    kvs_gram_seq_free(&q);

    if (rc == KVS_OK) {
        sc->r_char = r;
        *rule = r;
    }

    return rc;
}


/* "..." with any body */
static int
kvs_sc_string(kvs_sc_t *sc, uint32_t *rule)
{
    int       rc;
    uint32_t  c, body, r;

    if (sc->r_string != KVS_SC_NONE) {
        *rule = sc->r_string;
        return KVS_OK;
    }

    rc = kvs_sc_char(sc, &c);
    if (rc == KVS_OK) {
        rc = kvs_gram_repeat(sc->g, c, NULL, 0, UINT32_MAX, &body, sc->err);
    }
    if (rc == KVS_OK) {
        rc = kvs_sc_rule(sc, &r);
    }
    if (rc == KVS_OK) {
        rc = kvs_sc_wrap(sc, r, "\"", body, "\"");
    }
    if (rc == KVS_OK) {
        sc->r_body = body;
        sc->r_string = r;
        *rule = r;
    }

    return rc;
}


/* [0-9]* as a rule */
static int
kvs_sc_digits(kvs_sc_t *sc, uint32_t min, uint32_t *rule)
{
    int             rc;
    uint32_t        d;
    kvs_gram_seq_t  q;

    memset(&q, 0, sizeof(q));
    kvs_gram_seq_range(&q, '0', '9');
    rc = kvs_sc_rule_of(sc, &q, &d);
    kvs_gram_seq_free(&q);

    if (rc == KVS_OK) {
        rc = kvs_gram_repeat(sc->g, d, NULL, min, UINT32_MAX, rule, sc->err);
    }

    return rc;
}


/* -?(0|[1-9][0-9]*) and the non-negative part alone */
static int
kvs_sc_integer(kvs_sc_t *sc, uint32_t *rule)
{
    int             rc;
    uint32_t        digits, r, u;
    kvs_gram_seq_t  q;

    if (sc->r_int != KVS_SC_NONE) {
        *rule = sc->r_int;
        return KVS_OK;
    }

    memset(&q, 0, sizeof(q));

    rc = kvs_sc_digits(sc, 0, &digits);
    if (rc == KVS_OK) {
        rc = kvs_sc_lit_rule(sc, "0", &u);
    }
    if (rc == KVS_OK) {
        kvs_gram_seq_range(&q, '1', '9');
        kvs_gram_seq_ref(&q, digits);
        rc = kvs_gram_add_alt(sc->g, u, &q, sc->err);
    }
    if (rc == KVS_OK) {
        rc = kvs_sc_rule(sc, &r);
    }
    if (rc == KVS_OK) {
        kvs_gram_seq_reset(&q);
        kvs_gram_seq_ref(&q, u);
        rc = kvs_gram_add_alt(sc->g, r, &q, sc->err);
    }
    if (rc == KVS_OK) {
        kvs_gram_seq_reset(&q);
        kvs_gram_seq_lit(&q, "-", 1);
        kvs_gram_seq_ref(&q, u);
        rc = kvs_gram_add_alt(sc->g, r, &q, sc->err);
    }

    kvs_gram_seq_free(&q);

    if (rc == KVS_OK) {
        sc->r_uint = u;
        sc->r_int = r;
        *rule = r;
    }

    return rc;
}


/* int ("." [0-9]+)? ([eE] [+-]? [0-9]+)? */
static int
kvs_sc_number(kvs_sc_t *sc, uint32_t *rule)
{
    int             rc;
    uint32_t        i, d1, frac, ex, sign, r;
    kvs_gram_seq_t  q;

    if (sc->r_number != KVS_SC_NONE) {
        *rule = sc->r_number;
        return KVS_OK;
    }

    memset(&q, 0, sizeof(q));

    rc = kvs_sc_integer(sc, &i);
    if (rc == KVS_OK) {
        rc = kvs_sc_digits(sc, 1, &d1);
    }

    if (rc == KVS_OK) {
        rc = kvs_sc_rule(sc, &frac);
    }
    if (rc == KVS_OK) {
        rc = kvs_gram_add_alt(sc->g, frac, NULL, sc->err);
    }
    if (rc == KVS_OK) {
        kvs_gram_seq_lit(&q, ".", 1);
        kvs_gram_seq_ref(&q, d1);
        rc = kvs_gram_add_alt(sc->g, frac, &q, sc->err);
    }

    if (rc == KVS_OK) {
        rc = kvs_sc_rule(sc, &sign);
    }
    if (rc == KVS_OK) {
        rc = kvs_gram_add_alt(sc->g, sign, NULL, sc->err);
    }
    if (rc == KVS_OK) {
        kvs_gram_seq_reset(&q);
        kvs_gram_seq_range(&q, '+', '+');
        rc = kvs_gram_add_alt(sc->g, sign, &q, sc->err);
    }
    if (rc == KVS_OK) {
        kvs_gram_seq_reset(&q);
        kvs_gram_seq_range(&q, '-', '-');
        rc = kvs_gram_add_alt(sc->g, sign, &q, sc->err);
    }

    if (rc == KVS_OK) {
        rc = kvs_sc_rule(sc, &ex);
    }
    if (rc == KVS_OK) {
        rc = kvs_gram_add_alt(sc->g, ex, NULL, sc->err);
    }
    if (rc == KVS_OK) {
        kvs_gram_seq_reset(&q);
        kvs_gram_seq_range(&q, 'e', 'e');
        kvs_gram_seq_ref(&q, sign);
        kvs_gram_seq_ref(&q, d1);
        rc = kvs_gram_add_alt(sc->g, ex, &q, sc->err);
    }
    if (rc == KVS_OK) {
        kvs_gram_seq_reset(&q);
        kvs_gram_seq_range(&q, 'E', 'E');
        kvs_gram_seq_ref(&q, sign);
        kvs_gram_seq_ref(&q, d1);
        rc = kvs_gram_add_alt(sc->g, ex, &q, sc->err);
    }

    if (rc == KVS_OK) {
        kvs_gram_seq_reset(&q);
        kvs_gram_seq_ref(&q, i);
        kvs_gram_seq_ref(&q, frac);
        kvs_gram_seq_ref(&q, ex);
        rc = kvs_sc_rule_of(sc, &q, &r);
    }

    kvs_gram_seq_free(&q);

    if (rc == KVS_OK) {
        sc->r_number = r;
        *rule = r;
    }

    return rc;
}


/* Any JSON value; the object and array rules with it. */
static int
kvs_sc_value(kvs_sc_t *sc, uint32_t *rule)
{
    int             rc;
    uint32_t        v, str, num, member, members, obj, arr, items;
    kvs_gram_seq_t  q, sep;

    if (sc->r_value != KVS_SC_NONE) {
        *rule = sc->r_value;
        return KVS_OK;
    }

    memset(&q, 0, sizeof(q));
    memset(&sep, 0, sizeof(sep));
    kvs_gram_seq_lit(&sep, sc->comma, strlen(sc->comma));

    rc = kvs_sc_rule(sc, &v);
    if (rc == KVS_OK) {
        sc->r_value = v;
        rc = kvs_sc_string(sc, &str);
    }
    if (rc == KVS_OK) {
        rc = kvs_sc_number(sc, &num);
    }

    /* member: string ": " value */
    if (rc == KVS_OK) {
        kvs_gram_seq_ref(&q, str);
        kvs_gram_seq_lit(&q, sc->colon, strlen(sc->colon));
        kvs_gram_seq_ref(&q, v);
        rc = kvs_sc_rule_of(sc, &q, &member);
    }
    if (rc == KVS_OK) {
        rc = kvs_gram_repeat(sc->g, member, &sep, 0, UINT32_MAX, &members,
                             sc->err);
    }
    if (rc == KVS_OK) {
        rc = kvs_sc_rule(sc, &obj);
    }
    if (rc == KVS_OK) {
        rc = kvs_sc_wrap(sc, obj, "{", members, "}");
    }

    if (rc == KVS_OK) {
        rc = kvs_gram_repeat(sc->g, v, &sep, 0, UINT32_MAX, &items,
                             sc->err);
    }
    if (rc == KVS_OK) {
        rc = kvs_sc_rule(sc, &arr);
    }
    if (rc == KVS_OK) {
        rc = kvs_sc_wrap(sc, arr, "[", items, "]");
    }

    if (rc == KVS_OK) {
        uint32_t     alts[4];
        unsigned     k;
        const char  *lits[] = { "true", "false", "null" };

        alts[0] = obj;
        alts[1] = arr;
        alts[2] = str;
        alts[3] = num;

        for (k = 0; rc == KVS_OK && k < 4; k++) {
            kvs_gram_seq_reset(&q);
            kvs_gram_seq_ref(&q, alts[k]);
            rc = kvs_gram_add_alt(sc->g, v, &q, sc->err);
        }
        for (k = 0; rc == KVS_OK && k < 3; k++) {
            kvs_gram_seq_reset(&q);
            kvs_gram_seq_lit(&q, lits[k], strlen(lits[k]));
            rc = kvs_gram_add_alt(sc->g, v, &q, sc->err);
        }
    }

    kvs_gram_seq_free(&q);
    kvs_gram_seq_free(&sep);

    if (rc == KVS_OK) {
        *rule = v;
    }

    return rc;
}


/* ---- literals: const and enum ------------------------------------------ */

typedef struct {
    char    *p;
    size_t   n, cap;
    int      oom;
} kvs_sc_buf_t;


static void
kvs_sc_put(kvs_sc_buf_t *b, const void *p, size_t n)
{
    size_t   c;
    char    *q;

    if (b->oom) {
        return;
    }

    if (b->n + n > b->cap) {
        c = b->cap ? b->cap : 64;
        while (c < b->n + n) {
            c *= 2;
        }
        q = realloc(b->p, c);
        if (q == NULL) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = c;
    }

    memcpy(b->p + b->n, p, n);
    b->n += n;
}


static void
kvs_sc_put_str(kvs_sc_buf_t *b, const char *s, size_t n)
{
    size_t          i;
    char            esc[8];
    const uint8_t  *u;

    u = (const uint8_t *) s;
    kvs_sc_put(b, "\"", 1);

    for (i = 0; i < n; i++) {
        switch (u[i]) {
        case '"':  kvs_sc_put(b, "\\\"", 2); break;
        case '\\': kvs_sc_put(b, "\\\\", 2); break;
        case '\b': kvs_sc_put(b, "\\b", 2); break;
        case '\f': kvs_sc_put(b, "\\f", 2); break;
        case '\n': kvs_sc_put(b, "\\n", 2); break;
        case '\r': kvs_sc_put(b, "\\r", 2); break;
        case '\t': kvs_sc_put(b, "\\t", 2); break;
        default:
            if (u[i] < 0x20) {
                snprintf(esc, sizeof(esc), "\\u%04x", u[i]);
                kvs_sc_put(b, esc, 6);
            } else {
                kvs_sc_put(b, &u[i], 1);
            }
            break;
        }
    }

    kvs_sc_put(b, "\"", 1);
}


/* A value the one way outputs write it (jansson has checked its UTF-8). */
static void
kvs_sc_put_value(kvs_sc_t *sc, kvs_sc_buf_t *b, const json_t *v)
{
    int          k;
    char         num[64];
    size_t       i;
    double       d;
    const char  *key;
    json_t      *x;

    switch (json_typeof(v)) {

    case JSON_OBJECT:
        kvs_sc_put(b, "{", 1);
        i = 0;
        json_object_foreach((json_t *) v, key, x) {
            if (i++ > 0) {
                kvs_sc_put(b, sc->comma, strlen(sc->comma));
            }
            kvs_sc_put_str(b, key, strlen(key));
            kvs_sc_put(b, sc->colon, strlen(sc->colon));
            kvs_sc_put_value(sc, b, x);
        }
        kvs_sc_put(b, "}", 1);
        break;

    case JSON_ARRAY:
        kvs_sc_put(b, "[", 1);
        for (i = 0; i < json_array_size(v); i++) {
            if (i > 0) {
                kvs_sc_put(b, sc->comma, strlen(sc->comma));
            }
            kvs_sc_put_value(sc, b, json_array_get(v, i));
        }
        kvs_sc_put(b, "]", 1);
        break;

    case JSON_STRING:
        kvs_sc_put_str(b, json_string_value(v), json_string_length(v));
        break;

    case JSON_INTEGER:
        snprintf(num, sizeof(num), "%lld",
                 (long long) json_integer_value(v));
        kvs_sc_put(b, num, strlen(num));
        break;

    case JSON_REAL:
        /* the shortest %g that reads back as the same double */
        d = json_real_value(v);
        for (k = 15; k <= 17; k++) {
            snprintf(num, sizeof(num), "%.*g", k, d);
            if (strtod(num, NULL) == d) {
                break;
            }
        }
        kvs_sc_put(b, num, strlen(num));
        break;

    case JSON_TRUE:
        kvs_sc_put(b, "true", 4);
        break;

    case JSON_FALSE:
        kvs_sc_put(b, "false", 5);
        break;

    default:
        kvs_sc_put(b, "null", 4);
        break;
    }
}


typedef struct {
    const char  *p;
    size_t       n;
} kvs_sc_lit_t;


static int
kvs_sc_lit_cmp(const void *a, const void *b)
{
    const kvs_sc_lit_t  *x = a, *y = b;
    size_t               n;
    int                  c;

    n = x->n < y->n ? x->n : y->n;
    c = memcmp(x->p, y->p, n);

    return c != 0 ? c : x->n < y->n ? -1 : x->n > y->n;
}


/*
 * lits[lo .. hi), sorted, sharing their first `depth` bytes, as a trie of
 * rules: one alternative per distinct next byte, so a prefix common to
 * many values is one parse, not one per value.
 */
static int
kvs_sc_trie(kvs_sc_t *sc, const kvs_sc_lit_t *lits, size_t lo, size_t hi,
    size_t depth, uint32_t *rule)
{
    int             rc;
    size_t          i, j;
    uint32_t        child;
    kvs_gram_seq_t  q;

    rc = kvs_sc_rule(sc, rule);
    if (rc != KVS_OK) {
        return rc;
    }

    memset(&q, 0, sizeof(q));
    i = lo;

    while (i < hi && rc == KVS_OK) {
        if (lits[i].n == depth) {
            /* this value ends here; equal values once */
            rc = kvs_gram_add_alt(sc->g, *rule, NULL, sc->err);
            while (i < hi && lits[i].n == depth) {
                i++;
            }
            continue;
        }

        for (j = i + 1; j < hi && lits[j].n > depth
             && lits[j].p[depth] == lits[i].p[depth]; j++)
        {
            /* the group of values with the same next byte */
        }

        kvs_gram_seq_reset(&q);

        if (j == i + 1) {
            kvs_gram_seq_lit(&q, lits[i].p + depth, lits[i].n - depth);
        } else {
            kvs_gram_seq_lit(&q, lits[i].p + depth, 1);
            rc = kvs_sc_trie(sc, lits, i, j, depth + 1, &child);
            kvs_gram_seq_ref(&q, child);
        }

        if (rc == KVS_OK) {
            rc = kvs_gram_add_alt(sc->g, *rule, &q, sc->err);
        }

        i = j;
    }

    kvs_gram_seq_free(&q);

    return rc;
}


static unsigned
kvs_sc_type_of(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:  return KVS_T_OBJECT;
    case JSON_ARRAY:   return KVS_T_ARRAY;
    case JSON_STRING:  return KVS_T_STRING;
    case JSON_INTEGER: return KVS_T_INTEGER | KVS_T_NUMBER;
    case JSON_REAL:
        return json_real_value(v) == floor(json_real_value(v))
               ? KVS_T_INTEGER | KVS_T_NUMBER : KVS_T_NUMBER;
    case JSON_TRUE:
    case JSON_FALSE:   return KVS_T_BOOL;
    default:           return KVS_T_NULL;
    }
}


/* const or enum (values of the allowed types only) */
static int
kvs_sc_enum(kvs_sc_t *sc, const json_t *vals, const char *kw,
    unsigned types, uint32_t *rule)
{
    int            rc;
    size_t         i, n, off;
    kvs_sc_buf_t   b;
    kvs_sc_lit_t  *lits;
    size_t        *offs;

    n = json_is_array(vals) ? json_array_size(vals) : 1;

    if (n == 0) {
        return kvs_sc_fail(sc, KVS_EINVAL, kw, "no value to choose");
    }

    memset(&b, 0, sizeof(b));
    lits = calloc(n, sizeof(kvs_sc_lit_t));
    offs = calloc(n + 1, sizeof(size_t));

    if (lits == NULL || offs == NULL) {
        free(lits);
        free(offs);
        return kvs_err_set(sc->err, KVS_ENOMEM, "schema: out of memory");
    }

    for (i = 0, off = 0; i < n; i++) {
        const json_t  *v;

        v = json_is_array(vals) ? json_array_get(vals, i) : vals;
        if (!(kvs_sc_type_of(v) & types)) {
            continue;                 /* "type" refuses this value */
        }
        offs[off] = b.n;
        kvs_sc_put_value(sc, &b, v);
        lits[off].n = b.n - offs[off];
        off++;
        if (b.n > (size_t) sc->g->lim.max_elems) {
            free(lits);
            free(offs);
            free(b.p);
            return kvs_sc_fail(sc, KVS_ETOOLONG, kw,
                               "values longer than the grammar cap (%u)",
                               sc->g->lim.max_elems);
        }
    }

    if (b.oom) {
        rc = kvs_err_set(sc->err, KVS_ENOMEM, "schema: out of memory");
    } else if (off == 0) {
        rc = kvs_sc_fail(sc, KVS_EINVAL, kw, "no value of the schema's type");
    } else {
        for (i = 0; i < off; i++) {
            lits[i].p = b.p + offs[i];
        }
        qsort(lits, off, sizeof(kvs_sc_lit_t), kvs_sc_lit_cmp);
        rc = kvs_sc_trie(sc, lits, 0, off, 0, rule);
    }

    free(lits);
    free(offs);
    free(b.p);

    return rc;
}


/* ---- integers in a range ----------------------------------------------- */

/*
 * Adds to rule the n-digit strings from lo to hi (n-digit, lo <= hi),
 * each after the bytes in pre: equal leading digits are fixed, a range
 * of middle first digits leaves the rest free, and the two edges recurse
 * with one side open.
 */
static int
kvs_sc_digit_range(kvs_sc_t *sc, uint32_t rule, kvs_gram_seq_t *pre,
    const char *lo, const char *hi, size_t n)
{
    int     rc;
    size_t  i, mark;
    char    nines[24], zeros[24];

    mark = pre->n;

    for (i = 0; i < n && lo[i] == '0' && hi[i] == '9'; i++) {
        /* a free tail */
    }

    if (i == n) {
        for (i = 0; i < n; i++) {
            kvs_gram_seq_range(pre, '0', '9');
        }
        rc = kvs_gram_add_alt(sc->g, rule, pre, sc->err);
        pre->n = mark;
        return rc;
    }

    if (lo[0] == hi[0]) {
        kvs_gram_seq_range(pre, (uint8_t) lo[0], (uint8_t) lo[0]);
        rc = kvs_sc_digit_range(sc, rule, pre, lo + 1, hi + 1, n - 1);
        pre->n = mark;
        return rc;
    }

    memset(nines, '9', sizeof(nines));
    memset(zeros, '0', sizeof(zeros));

    kvs_gram_seq_range(pre, (uint8_t) lo[0], (uint8_t) lo[0]);
    rc = kvs_sc_digit_range(sc, rule, pre, lo + 1, nines, n - 1);
    pre->n = mark;

    if (rc == KVS_OK && hi[0] - lo[0] >= 2) {
        kvs_gram_seq_range(pre, (uint8_t) (lo[0] + 1), (uint8_t) (hi[0] - 1));
        for (i = 1; i < n; i++) {
            kvs_gram_seq_range(pre, '0', '9');
        }
        rc = kvs_gram_add_alt(sc->g, rule, pre, sc->err);
        pre->n = mark;
    }

    if (rc == KVS_OK) {
        kvs_gram_seq_range(pre, (uint8_t) hi[0], (uint8_t) hi[0]);
        rc = kvs_sc_digit_range(sc, rule, pre, zeros, hi + 1, n - 1);
        pre->n = mark;
    }

    return rc;
}


/* Canonical decimals of [a, b] (b UINT64_MAX: no bound), after pre. */
static int
kvs_sc_uint_range(kvs_sc_t *sc, uint32_t rule, kvs_gram_seq_t *pre,
    uint64_t a, uint64_t b)
{
    int       rc;
    char      sa[24], sb[24], lo[24], hi[24];
    size_t    la, lb, len, i, mark;
    uint32_t  d;

    snprintf(sa, sizeof(sa), "%llu", (unsigned long long) a);
    la = strlen(sa);
    rc = KVS_OK;
    mark = pre->n;

    if (b == UINT64_MAX) {
        /* a's length up to 9..9, then every longer canonical number */
        memset(hi, '9', la);
        rc = kvs_sc_digit_range(sc, rule, pre, sa, hi, la);
        if (rc == KVS_OK) {
            rc = kvs_sc_digits(sc, (uint32_t) la, &d);
        }
        if (rc == KVS_OK) {
            kvs_gram_seq_range(pre, '1', '9');
            kvs_gram_seq_ref(pre, d);
            rc = kvs_gram_add_alt(sc->g, rule, pre, sc->err);
            pre->n = mark;
        }
        return rc;
    }

    snprintf(sb, sizeof(sb), "%llu", (unsigned long long) b);
    lb = strlen(sb);

    for (len = la; len <= lb && rc == KVS_OK; len++) {
        if (len == la) {
            memcpy(lo, sa, len);
        } else {
            lo[0] = '1';
            for (i = 1; i < len; i++) {
                lo[i] = '0';
            }
        }
        if (len == lb) {
            memcpy(hi, sb, len);
        } else {
            memset(hi, '9', len);
        }
        rc = kvs_sc_digit_range(sc, rule, pre, lo, hi, len);
    }

    return rc;
}


/* A bound as an int64 after rounding towards the inside of the range. */
static int
kvs_sc_bound(kvs_sc_t *sc, const json_t *s, const char *kw, int upper,
    int exclusive, int64_t *out, int *have)
{
    double         d, r;
    const json_t  *v;

    v = json_object_get(s, kw);
    if (v == NULL) {
        return KVS_OK;
    }

    if (json_is_boolean(v)) {
        return kvs_sc_fail(sc, KVS_EUNSUPPORTED, kw,
                           "boolean form (draft 4) is not supported; give "
                           "the bound as a number");
    }

    if (!json_is_number(v)) {
        return kvs_sc_fail(sc, KVS_EINVAL, kw, "must be a number");
    }

    d = json_number_value(v);

    if (!(fabs(d) <= KVS_SC_MAX_INT)) {
        return kvs_sc_fail(sc, KVS_EUNSUPPORTED, kw,
                           "integer bounds beyond 1e18 are not supported");
    }

    if (upper) {
        r = floor(d);
        if (exclusive && r == d) {
            r -= 1;
        }
        if (!*have || (int64_t) r < *out) {
            *out = (int64_t) r;
        }
    } else {
        r = ceil(d);
        if (exclusive && r == d) {
            r += 1;
        }
        if (!*have || (int64_t) r > *out) {
            *out = (int64_t) r;
        }
    }

    *have = 1;

    return KVS_OK;
}


static int
kvs_sc_int_bounded(kvs_sc_t *sc, const json_t *s, uint32_t *rule)
{
    int             rc, hlo, hhi;
    int64_t         lo, hi;
    kvs_gram_seq_t  pre;

    hlo = hhi = 0;
    lo = hi = 0;

    rc = kvs_sc_bound(sc, s, "minimum", 0, 0, &lo, &hlo);
    if (rc == KVS_OK) {
        rc = kvs_sc_bound(sc, s, "exclusiveMinimum", 0, 1, &lo, &hlo);
    }
    if (rc == KVS_OK) {
        rc = kvs_sc_bound(sc, s, "maximum", 1, 0, &hi, &hhi);
    }
    if (rc == KVS_OK) {
        rc = kvs_sc_bound(sc, s, "exclusiveMaximum", 1, 1, &hi, &hhi);
    }
    if (rc != KVS_OK) {
        return rc;
    }

    if (!hlo && !hhi) {
        return kvs_sc_integer(sc, rule);
    }

    if (hlo && hhi && lo > hi) {
        return kvs_sc_fail(sc, KVS_EINVAL, hlo ? "minimum" : "maximum",
                           "no integer in [%lld, %lld]", (long long) lo,
                           (long long) hi);
    }

    rc = kvs_sc_rule(sc, rule);
    if (rc != KVS_OK) {
        return rc;
    }

    memset(&pre, 0, sizeof(pre));

    /* the non-negative part: [max(lo, 0), hi] */
    if (!hhi || hi >= 0) {
        rc = kvs_sc_uint_range(sc, *rule, &pre,
                               hlo && lo > 0 ? (uint64_t) lo : 0,
                               hhi ? (uint64_t) hi : UINT64_MAX);
    }

    /* the negative part: "-" then [max(-hi, 1), -lo] */
    if (rc == KVS_OK && (!hlo || lo < 0)) {
        kvs_gram_seq_lit(&pre, "-", 1);
        rc = kvs_sc_uint_range(sc, *rule, &pre,
                               hhi && hi < -1 ? (uint64_t) -hi : 1,
                               hlo ? (uint64_t) -lo : UINT64_MAX);
    }

    kvs_gram_seq_free(&pre);

    return rc;
}


/* ---- strings ------------------------------------------------------------ */

static const struct {
    const char  *name;
    const char  *re;
} kvs_sc_formats[] = {
    /* RFC 3339 full-date; February stops at 28 (29 needs the year) */
    { "date",
      "^[0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])"
      "|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))$" },
    /* full-time without leap seconds (60 needs the date) */
    { "time",
      "^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?"
      "(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$" },
    { "date-time",
      "^[0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])"
      "|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))"
      "T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?"
      "(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$" },
    { "uuid",
      "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
      "[0-9a-fA-F]{12}$" },
    /* dot-atom local part, LDH labels: a subset of RFC 5321 */
    { "email",
      "^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
      "@[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
      "(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$" },
};


static int
kvs_sc_count(kvs_sc_t *sc, const json_t *s, const char *kw, uint32_t *out,
    int *have)
{
    const json_t  *v;

    v = json_object_get(s, kw);
    if (v == NULL) {
        return KVS_OK;
    }

    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v))
        && json_real_value(v) >= 0 && json_real_value(v) < 4e9)
    {
        *out = (uint32_t) json_real_value(v);
    } else if (json_is_integer(v) && json_integer_value(v) >= 0
               && json_integer_value(v) < 4000000000LL)
    {
        *out = (uint32_t) json_integer_value(v);
    } else {
        return kvs_sc_fail(sc, KVS_EINVAL, kw,
                           "must be a non-negative integer");
    }

    *have = 1;

    return KVS_OK;
}


static int
kvs_sc_str(kvs_sc_t *sc, const json_t *s, uint32_t *rule)
{
    int            rc, hmin, hmax;
    size_t         k;
    uint32_t       body, c, minl, maxl;
    const char    *re, *kw;
    const json_t  *pat, *fmt;

    pat = json_object_get(s, "pattern");
    fmt = json_object_get(s, "format");
    hmin = hmax = 0;
    minl = 0;
    maxl = UINT32_MAX;

    rc = kvs_sc_count(sc, s, "minLength", &minl, &hmin);
    if (rc == KVS_OK) {
        rc = kvs_sc_count(sc, s, "maxLength", &maxl, &hmax);
    }
    if (rc != KVS_OK) {
        return rc;
    }

    if (hmin && hmax && minl > maxl) {
        return kvs_sc_fail(sc, KVS_EINVAL, "minLength",
                           "%u is over maxLength %u", minl, maxl);
    }

    if (pat != NULL || fmt != NULL) {
        if (pat != NULL && fmt != NULL) {
            return kvs_sc_fail(sc, KVS_EUNSUPPORTED, "format",
                               "together with pattern is not supported");
        }
        if (hmin || hmax) {
            return kvs_sc_fail(sc, KVS_EUNSUPPORTED,
                               hmin ? "minLength" : "maxLength",
                               "together with %s is not supported",
                               pat != NULL ? "pattern" : "format");
        }

        if (pat != NULL) {
            kw = "pattern";
            if (!json_is_string(pat)) {
                return kvs_sc_fail(sc, KVS_EINVAL, kw, "must be a string");
            }
            re = json_string_value(pat);
            k = json_string_length(pat);

        } else {
            kw = "format";
            if (!json_is_string(fmt)) {
                return kvs_sc_fail(sc, KVS_EINVAL, kw, "must be a string");
            }
            re = NULL;
            for (k = 0; k < sizeof(kvs_sc_formats)
                            / sizeof(kvs_sc_formats[0]); k++)
            {
                if (strcmp(json_string_value(fmt), kvs_sc_formats[k].name)
                    == 0)
                {
                    re = kvs_sc_formats[k].re;
                    break;
                }
            }
            if (re == NULL) {
                return kvs_sc_fail(sc, KVS_EUNSUPPORTED, kw,
                                   "'%.64s' is not supported (date, time, "
                                   "date-time, uuid, email are)",
                                   json_string_value(fmt));
            }
            k = strlen(re);
        }

        rc = kvs_gram_regex(sc->g, re, k, &body, sc->err);
        if (rc != KVS_OK) {
            size_t  old;

            old = kvs_sc_push(sc, kw);
            (void) kvs_err_prefix(sc->err, "%s", sc->path);
            kvs_sc_pop(sc, old);
            return rc;
        }

    } else if (hmin || hmax) {
        rc = kvs_sc_char(sc, &c);
        if (rc == KVS_OK) {
            rc = kvs_gram_repeat(sc->g, c, NULL, minl, maxl, &body, sc->err);
        }
        if (rc != KVS_OK) {
            (void) kvs_err_prefix(sc->err, "%s%s%s", sc->path,
                                  sc->plen > 0 ? "." : "",
                                  hmax ? "maxLength" : "minLength");
            return rc;
        }

    } else {
        return kvs_sc_string(sc, rule);
    }

    rc = kvs_sc_rule(sc, rule);
    if (rc == KVS_OK) {
        rc = kvs_sc_wrap(sc, *rule, "\"", body, "\"");
    }

    return rc;
}


/* ---- objects and arrays ------------------------------------------------- */

typedef struct {
    const char    *name;
    const json_t  *schema;
    int            required;
    uint32_t       member;            /* "name": value */
} kvs_sc_prop_t;


static int
kvs_sc_object(kvs_sc_t *sc, const json_t *s, uint32_t *rule)
{
    int             rc;
    size_t          n, n_decl, i, k, old;
    uint32_t        val, first, after, nfirst, nafter, key, members;
    const char     *name;
    const json_t   *props, *req, *addl, *x;
    kvs_sc_buf_t    b;
    kvs_sc_prop_t  *p;
    kvs_gram_seq_t  q, sep;

    props = json_object_get(s, "properties");
    req = json_object_get(s, "required");
    addl = json_object_get(s, "additionalProperties");

    if (props != NULL && !json_is_object(props)) {
        return kvs_sc_fail(sc, KVS_EINVAL, "properties",
                           "must be an object");
    }
    if (req != NULL && !json_is_array(req)) {
        return kvs_sc_fail(sc, KVS_EINVAL, "required", "must be an array");
    }
    if (addl != NULL && !json_is_object(addl) && !json_is_boolean(addl)) {
        return kvs_sc_fail(sc, KVS_EINVAL, "additionalProperties",
                           "must be a schema");
    }

    memset(&q, 0, sizeof(q));
    memset(&sep, 0, sizeof(sep));
    kvs_gram_seq_lit(&sep, sc->comma, strlen(sc->comma));

    /* a map: no properties, extra ones allowed */
    if ((props == NULL || json_object_size(props) == 0)
        && (req == NULL || json_array_size(req) == 0)
        && (addl == NULL || !json_is_false(addl)))
    {
        old = kvs_sc_push(sc, "additionalProperties");
        if (addl == NULL || json_is_true(addl)) {
            rc = kvs_sc_value(sc, &val);
        } else {
            rc = kvs_sc_schema(sc, addl, &val);
        }
        kvs_sc_pop(sc, old);

        if (rc == KVS_OK) {
            rc = kvs_sc_string(sc, &key);
        }
        if (rc == KVS_OK) {
            kvs_gram_seq_ref(&q, key);
            kvs_gram_seq_lit(&q, sc->colon, strlen(sc->colon));
            kvs_gram_seq_ref(&q, val);
            rc = kvs_sc_rule_of(sc, &q, &first);
        }
        if (rc == KVS_OK) {
            rc = kvs_gram_repeat(sc->g, first, &sep, 0, UINT32_MAX,
                                 &members, sc->err);
        }
        if (rc == KVS_OK) {
            rc = kvs_sc_rule(sc, rule);
        }
        if (rc == KVS_OK) {
            rc = kvs_sc_wrap(sc, *rule, "{", members, "}");
        }
        kvs_gram_seq_free(&q);
        kvs_gram_seq_free(&sep);
        return rc;
    }

    n = (props != NULL ? json_object_size(props) : 0)
        + (req != NULL ? json_array_size(req) : 0);
    p = calloc(n + 1, sizeof(kvs_sc_prop_t));
    if (p == NULL) {
        kvs_gram_seq_free(&sep);
        return kvs_err_set(sc->err, KVS_ENOMEM, "schema: out of memory");
    }

    n = 0;
    if (props != NULL) {
        json_object_foreach((json_t *) props, name, x) {
            p[n].name = name;
            p[n].schema = x;
            n++;
        }
    }
    n_decl = n;

    rc = KVS_OK;

    /* required: mark declared ones; an undeclared one is a property with
     * the additionalProperties schema */
    for (i = 0; req != NULL && i < json_array_size(req) && rc == KVS_OK;
         i++)
    {
        x = json_array_get(req, i);
        if (!json_is_string(x)) {
            rc = kvs_sc_fail(sc, KVS_EINVAL, "required",
                             "must list strings");
            break;
        }
        for (k = 0; k < n; k++) {
            if (strcmp(p[k].name, json_string_value(x)) == 0) {
                break;
            }
        }
        if (k == n) {
            if (addl != NULL && json_is_false(addl)) {
                rc = kvs_sc_fail(sc, KVS_EINVAL, "required",
                                 "'%.64s' is neither in properties nor "
                                 "allowed by additionalProperties",
                                 json_string_value(x));
                break;
            }
            p[n].name = json_string_value(x);
            p[n].schema = addl;       /* NULL or true: any value */
            n++;
        }
        p[k].required = 1;
    }

    /* the members, "name": value */
    memset(&b, 0, sizeof(b));

    for (k = 0; k < n && rc == KVS_OK; k++) {
        old = kvs_sc_push(sc, k < n_decl ? "properties"
                                         : "additionalProperties");
        if (k < n_decl) {
            (void) kvs_sc_push(sc, p[k].name);
        }

        if (p[k].schema == NULL || json_is_true(p[k].schema)) {
            rc = kvs_sc_value(sc, &val);
        } else {
            rc = kvs_sc_schema(sc, p[k].schema, &val);
        }
        kvs_sc_pop(sc, old);

        if (rc != KVS_OK) {
            break;
        }

        b.n = 0;
        kvs_sc_put_str(&b, p[k].name, strlen(p[k].name));
        kvs_sc_put(&b, sc->colon, strlen(sc->colon));
        if (b.oom) {
            rc = kvs_err_set(sc->err, KVS_ENOMEM, "schema: out of memory");
            break;
        }
        kvs_gram_seq_reset(&q);
        kvs_gram_seq_lit(&q, b.p, b.n);
        kvs_gram_seq_ref(&q, val);
        rc = kvs_sc_rule_of(sc, &q, &p[k].member);
    }

    free(b.p);

    /*
     * From the last property back: first = the rest when nothing was
     * written yet, after = the rest after something was; an optional
     * property may be skipped, a required one may not.
     */
    nfirst = nafter = KVS_SC_NONE;

    if (rc == KVS_OK) {
        rc = kvs_sc_rule(sc, &nfirst);
    }
    if (rc == KVS_OK) {
        rc = kvs_gram_add_alt(sc->g, nfirst, NULL, sc->err);
    }
    nafter = nfirst;

    for (k = n; k > 0 && rc == KVS_OK; k--) {
        rc = kvs_sc_rule(sc, &first);
        if (rc == KVS_OK) {
            rc = kvs_sc_rule(sc, &after);
        }
        if (rc != KVS_OK) {
            break;
        }

        kvs_gram_seq_reset(&q);
        kvs_gram_seq_ref(&q, p[k - 1].member);
        kvs_gram_seq_ref(&q, nafter);
        rc = kvs_gram_add_alt(sc->g, first, &q, sc->err);

        if (rc == KVS_OK) {
            kvs_gram_seq_reset(&q);
            kvs_gram_seq_lit(&q, sc->comma, strlen(sc->comma));
            kvs_gram_seq_ref(&q, p[k - 1].member);
            kvs_gram_seq_ref(&q, nafter);
            rc = kvs_gram_add_alt(sc->g, after, &q, sc->err);
        }

        if (rc == KVS_OK && !p[k - 1].required) {
            kvs_gram_seq_reset(&q);
            kvs_gram_seq_ref(&q, nfirst);
            rc = kvs_gram_add_alt(sc->g, first, &q, sc->err);
            if (rc == KVS_OK) {
                kvs_gram_seq_reset(&q);
                kvs_gram_seq_ref(&q, nafter);
                rc = kvs_gram_add_alt(sc->g, after, &q, sc->err);
            }
        }

        nfirst = first;
        nafter = after;
    }

    if (rc == KVS_OK) {
        rc = kvs_sc_rule(sc, rule);
    }
    if (rc == KVS_OK) {
        rc = kvs_sc_wrap(sc, *rule, "{", nfirst, "}");
    }

    free(p);
    kvs_gram_seq_free(&q);
    kvs_gram_seq_free(&sep);

    return rc;
}


static int
kvs_sc_array(kvs_sc_t *sc, const json_t *s, uint32_t *rule)
{
    int             rc, hmin, hmax;
    size_t          old;
    uint32_t        item, items, minn, maxn;
    const json_t   *it, *u;
    kvs_gram_seq_t  sep;

    it = json_object_get(s, "items");
    u = json_object_get(s, "uniqueItems");
    hmin = hmax = 0;
    minn = 0;
    maxn = UINT32_MAX;

    if (u != NULL && !json_is_false(u)) {
        return kvs_sc_fail(sc, KVS_EUNSUPPORTED, "uniqueItems",
                           "true is not supported");
    }

    rc = kvs_sc_count(sc, s, "minItems", &minn, &hmin);
    if (rc == KVS_OK) {
        rc = kvs_sc_count(sc, s, "maxItems", &maxn, &hmax);
    }
    if (rc != KVS_OK) {
        return rc;
    }

    if (hmin && hmax && minn > maxn) {
        return kvs_sc_fail(sc, KVS_EINVAL, "minItems",
                           "%u is over maxItems %u", minn, maxn);
    }

    if (it != NULL && json_is_array(it)) {
        return kvs_sc_fail(sc, KVS_EUNSUPPORTED, "items",
                           "an array of schemas (tuple form) is not "
                           "supported");
    }

    old = kvs_sc_push(sc, "items");
    if (it == NULL || json_is_true(it)) {
        rc = kvs_sc_value(sc, &item);
    } else if (json_is_false(it)) {
        rc = KVS_OK;
        maxn = 0;
        item = 0;
        if (minn > 0) {
            rc = kvs_sc_fail(sc, KVS_EINVAL, NULL,
                             "false with minItems %u", minn);
        }
    } else {
        rc = kvs_sc_schema(sc, it, &item);
    }
    kvs_sc_pop(sc, old);

    if (rc != KVS_OK) {
        return rc;
    }

    if (maxn == 0) {
        return kvs_sc_lit_rule(sc, "[]", rule);
    }

    memset(&sep, 0, sizeof(sep));
    kvs_gram_seq_lit(&sep, sc->comma, strlen(sc->comma));

    rc = kvs_gram_repeat(sc->g, item, &sep, minn, maxn, &items, sc->err);
    if (rc != KVS_OK) {
        (void) kvs_err_prefix(sc->err, "%s%s%s", sc->path,
                              sc->plen > 0 ? "." : "",
                              hmax ? "maxItems" : "minItems");
    }
    if (rc == KVS_OK) {
        rc = kvs_sc_rule(sc, rule);
    }
    if (rc == KVS_OK) {
        rc = kvs_sc_wrap(sc, *rule, "[", items, "]");
    }

    kvs_gram_seq_free(&sep);

    return rc;
}


/* ---- $ref, combinators and the dispatch --------------------------------- */

static int
kvs_sc_ref(kvs_sc_t *sc, const json_t *ref, uint32_t *rule)
{
    int            rc;
    char           tok[256], path[KVS_SC_PATH];
    size_t         i, j, n, k, plen;
    uint32_t       body;
    const char    *p;
    const json_t  *t;
    kvs_gram_seq_t q;

    if (!json_is_string(ref)) {
        return kvs_sc_fail(sc, KVS_EINVAL, "$ref", "must be a string");
    }

    p = json_string_value(ref);
    n = json_string_length(ref);

    if (n == 0 || p[0] != '#' || memchr(p, '%', n) != NULL
        || (n > 1 && p[1] != '/'))
    {
        return kvs_sc_fail(sc, KVS_EUNSUPPORTED, "$ref",
                           "'%.64s': only local JSON pointers (\"#\", "
                           "\"#/$defs/name\") are supported", p);
    }

    /* walk the pointer from the root */
    t = sc->root;
    for (i = 1; i < n && t != NULL; ) {
        i++;                          /* the '/' */
        for (j = 0; i < n && p[i] != '/'; i++) {
            if (j + 1 >= sizeof(tok)) {
                return kvs_sc_fail(sc, KVS_EUNSUPPORTED, "$ref",
                                   "pointer segment too long");
            }
            if (p[i] == '~' && i + 1 < n && (p[i + 1] == '0'
                                             || p[i + 1] == '1'))
            {
                tok[j++] = p[i + 1] == '0' ? '~' : '/';
                i++;
            } else {
                tok[j++] = p[i];
            }
        }
        tok[j] = '\0';

        if (json_is_object(t)) {
            t = json_object_get(t, tok);
        } else if (json_is_array(t)) {
            char  *end;

            k = strtoul(tok, &end, 10);
            t = *end == '\0' && j > 0 ? json_array_get(t, k) : NULL;
        } else {
            t = NULL;
        }
    }

    if (t == NULL) {
        return kvs_sc_fail(sc, KVS_EINVAL, "$ref", "'%.64s' names nothing",
                           p);
    }

    for (k = 0; k < sc->n_refs; k++) {
        if (sc->refs[k].target == t) {
            *rule = sc->refs[k].rule;
            return KVS_OK;
        }
    }

    if (sc->n_refs == sc->cap_refs) {
        size_t         c;
        kvs_sc_ref_t  *r;

        c = sc->cap_refs ? sc->cap_refs * 2 : 16;
        r = realloc(sc->refs, c * sizeof(kvs_sc_ref_t));
        if (r == NULL) {
            return kvs_err_set(sc->err, KVS_ENOMEM, "schema: no memory");
        }
        sc->refs = r;
        sc->cap_refs = c;
    }

    /* the rule exists before its body, so the body may refer to it */
    rc = kvs_sc_rule(sc, rule);
    if (rc != KVS_OK) {
        return rc;
    }
    sc->refs[sc->n_refs].target = t;
    sc->refs[sc->n_refs].rule = *rule;
    sc->n_refs++;

    /* errors inside say where the definition is: "$defs.node.type" */
    memcpy(path, sc->path, sc->plen + 1);
    plen = sc->plen;
    sc->plen = 0;
    sc->path[0] = '\0';
    for (i = 2; i < n && sc->plen + 1 < sizeof(sc->path); i++) {
        sc->path[sc->plen++] = p[i] == '/' ? '.' : p[i];
    }
    sc->path[sc->plen] = '\0';

    rc = kvs_sc_schema(sc, t, &body);

    memcpy(sc->path, path, plen + 1);
    sc->plen = plen;

    if (rc == KVS_OK) {
        memset(&q, 0, sizeof(q));
        kvs_gram_seq_ref(&q, body);
        rc = kvs_gram_add_alt(sc->g, *rule, &q, sc->err);
        kvs_gram_seq_free(&q);
    }

    return rc;
}


static int
kvs_sc_any_of(kvs_sc_t *sc, const json_t *list, const char *kw,
    uint32_t *rule)
{
    int             rc;
    size_t          i, old, old2;
    uint32_t        x;
    kvs_gram_seq_t  q;

    if (!json_is_array(list) || json_array_size(list) == 0) {
        return kvs_sc_fail(sc, KVS_EINVAL, kw,
                           "must be a non-empty array of schemas");
    }

    if (strcmp(kw, "allOf") == 0) {
        if (json_array_size(list) != 1) {
            return kvs_sc_fail(sc, KVS_EUNSUPPORTED, kw,
                               "more than one schema is not supported");
        }
        old = kvs_sc_push(sc, kw);
        (void) kvs_sc_push_index(sc, 0);
        rc = kvs_sc_schema(sc, json_array_get(list, 0), rule);
        kvs_sc_pop(sc, old);
        return rc;
    }

    rc = kvs_sc_rule(sc, rule);
    memset(&q, 0, sizeof(q));

    for (i = 0; i < json_array_size(list) && rc == KVS_OK; i++) {
        old = kvs_sc_push(sc, kw);
        old2 = kvs_sc_push_index(sc, i);
        (void) old2;
        rc = kvs_sc_schema(sc, json_array_get(list, i), &x);
        kvs_sc_pop(sc, old);
        if (rc == KVS_OK) {
            kvs_gram_seq_reset(&q);
            kvs_gram_seq_ref(&q, x);
            rc = kvs_gram_add_alt(sc->g, *rule, &q, sc->err);
        }
    }

    kvs_gram_seq_free(&q);

    return rc;
}


static const char *const  kvs_sc_annotations[] = {
    "title", "description", "default", "examples", "$comment",
    "deprecated", "readOnly", "writeOnly", "$schema", "$defs",
    "definitions", NULL
};

static const struct {
    const char  *name;
    unsigned     types;               /* the types it applies to; 0: any */
} kvs_sc_keywords[] = {
    { "type", 0 }, { "enum", 0 }, { "const", 0 }, { "$ref", 0 },
    { "anyOf", 0 }, { "oneOf", 0 }, { "allOf", 0 },
    { "properties", KVS_T_OBJECT }, { "required", KVS_T_OBJECT },
    { "additionalProperties", KVS_T_OBJECT },
    { "items", KVS_T_ARRAY }, { "minItems", KVS_T_ARRAY },
    { "maxItems", KVS_T_ARRAY }, { "uniqueItems", KVS_T_ARRAY },
    { "pattern", KVS_T_STRING }, { "format", KVS_T_STRING },
    { "minLength", KVS_T_STRING }, { "maxLength", KVS_T_STRING },
    { "minimum", KVS_T_INTEGER | KVS_T_NUMBER },
    { "maximum", KVS_T_INTEGER | KVS_T_NUMBER },
    { "exclusiveMinimum", KVS_T_INTEGER | KVS_T_NUMBER },
    { "exclusiveMaximum", KVS_T_INTEGER | KVS_T_NUMBER },
    { NULL, 0 }
};

static const struct {
    const char  *name;
    unsigned     bit;
} kvs_sc_types[] = {
    { "null", KVS_T_NULL }, { "boolean", KVS_T_BOOL },
    { "integer", KVS_T_INTEGER }, { "number", KVS_T_NUMBER },
    { "string", KVS_T_STRING }, { "array", KVS_T_ARRAY },
    { "object", KVS_T_OBJECT }, { NULL, 0 }
};


static int
kvs_sc_type_bit(kvs_sc_t *sc, const json_t *v, unsigned *bits)
{
    unsigned  k;

    if (json_is_string(v)) {
        for (k = 0; kvs_sc_types[k].name != NULL; k++) {
            if (strcmp(json_string_value(v), kvs_sc_types[k].name) == 0) {
                *bits |= kvs_sc_types[k].bit;
                return KVS_OK;
            }
        }
    }

    return kvs_sc_fail(sc, KVS_EINVAL, "type",
                       "must be null, boolean, integer, number, string, "
                       "array or object");
}


static int
kvs_sc_body(kvs_sc_t *sc, const json_t *s, uint32_t *rule)
{
    int             rc;
    size_t          i;
    unsigned        k, types, implied, n_kw, t;
    uint32_t        x, alts[7];
    unsigned        n_alts;
    const char     *key, *other, *comb;
    const json_t   *v, *type;
    kvs_gram_seq_t  q;

    if (json_is_true(s)) {
        return kvs_sc_value(sc, rule);
    }

    if (json_is_false(s)) {
        return kvs_sc_fail(sc, KVS_EINVAL, NULL,
                           "false schema: no value is valid");
    }

    if (!json_is_object(s)) {
        return kvs_sc_fail(sc, KVS_EINVAL, NULL,
                           "a schema must be an object or a boolean");
    }

    implied = 0;
    n_kw = 0;
    other = NULL;
    comb = NULL;

    json_object_foreach((json_t *) s, key, v) {
        for (k = 0; kvs_sc_annotations[k] != NULL; k++) {
            if (strcmp(key, kvs_sc_annotations[k]) == 0) {
                break;
            }
        }
        if (kvs_sc_annotations[k] != NULL) {
            continue;
        }
        if (strcmp(key, "$id") == 0 && s == sc->root) {
            continue;
        }

        for (k = 0; kvs_sc_keywords[k].name != NULL; k++) {
            if (strcmp(key, kvs_sc_keywords[k].name) == 0) {
                break;
            }
        }
        if (kvs_sc_keywords[k].name == NULL) {
            return kvs_sc_fail(sc, KVS_EUNSUPPORTED, key,
                               "unsupported keyword");
        }

        implied |= kvs_sc_keywords[k].types;
        n_kw++;

        if (strcmp(key, "$ref") == 0 || strcmp(key, "anyOf") == 0
            || strcmp(key, "oneOf") == 0 || strcmp(key, "allOf") == 0)
        {
            if (comb != NULL) {
                return kvs_sc_fail(sc, KVS_EUNSUPPORTED, key,
                                   "together with %s is not supported",
                                   comb);
            }
            comb = key;
        } else if (other == NULL) {
            other = key;
        }
    }

    if (comb != NULL) {
        if (other != NULL) {
            return kvs_sc_fail(sc, KVS_EUNSUPPORTED, other,
                               "together with %s is not supported", comb);
        }
        if (strcmp(comb, "$ref") == 0) {
            return kvs_sc_ref(sc, json_object_get(s, comb), rule);
        }
        return kvs_sc_any_of(sc, json_object_get(s, comb), comb, rule);
    }

    /* the types: "type", else those the keywords speak of, else any */
    type = json_object_get(s, "type");
    types = 0;

    if (type == NULL) {
        types = implied != 0 ? implied : KVS_T_ALL;
        if (types & KVS_T_NUMBER) {
            types &= ~KVS_T_INTEGER;
        }
    } else if (json_is_array(type)) {
        if (json_array_size(type) == 0) {
            return kvs_sc_fail(sc, KVS_EINVAL, "type", "lists no type");
        }
        for (i = 0; i < json_array_size(type); i++) {
            rc = kvs_sc_type_bit(sc, json_array_get(type, i), &types);
            if (rc != KVS_OK) {
                return rc;
            }
        }
    } else {
        rc = kvs_sc_type_bit(sc, type, &types);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    if (json_object_get(s, "const") != NULL) {
        if (n_kw > 1 + (type != NULL)) {
            return kvs_sc_fail(sc, KVS_EUNSUPPORTED, "const",
                               "together with keywords other than type is "
                               "not supported");
        }
        return kvs_sc_enum(sc, json_object_get(s, "const"), "const",
                           types | (types & KVS_T_NUMBER
                                    ? KVS_T_INTEGER : 0), rule);
    }

    if (json_object_get(s, "enum") != NULL) {
        v = json_object_get(s, "enum");
        if (!json_is_array(v)) {
            return kvs_sc_fail(sc, KVS_EINVAL, "enum", "must be an array");
        }
        if (n_kw > 1 + (type != NULL)) {
            return kvs_sc_fail(sc, KVS_EUNSUPPORTED, "enum",
                               "together with keywords other than type is "
                               "not supported");
        }
        return kvs_sc_enum(sc, v, "enum", types | (types & KVS_T_NUMBER
                                                   ? KVS_T_INTEGER : 0),
                           rule);
    }

    if ((types & KVS_T_NUMBER) && type != NULL) {
        types &= ~KVS_T_INTEGER;      /* number covers integer */
    }

    if (types == KVS_T_ALL && implied == 0) {
        return kvs_sc_value(sc, rule);
    }

    n_alts = 0;
    rc = KVS_OK;

    for (k = 0; kvs_sc_types[k].name != NULL && rc == KVS_OK; k++) {
        t = kvs_sc_types[k].bit;
        if (!(types & t)) {
            continue;
        }

        switch (t) {
        case KVS_T_NULL:
            rc = kvs_sc_lit_rule(sc, "null", &x);
            break;
        case KVS_T_BOOL:
            rc = kvs_sc_lit_rule(sc, "true", &x);
            if (rc == KVS_OK) {
                memset(&q, 0, sizeof(q));
                kvs_gram_seq_lit(&q, "false", 5);
                rc = kvs_gram_add_alt(sc->g, x, &q, sc->err);
                kvs_gram_seq_free(&q);
            }
            break;
        case KVS_T_INTEGER:
            rc = kvs_sc_int_bounded(sc, s, &x);
            break;
        case KVS_T_NUMBER:
            for (i = 0; i < 4; i++) {
                static const char  *b[] = { "minimum", "maximum",
                                            "exclusiveMinimum",
                                            "exclusiveMaximum" };

                if (json_object_get(s, b[i]) != NULL) {
                    return kvs_sc_fail(sc, KVS_EUNSUPPORTED, b[i],
                                       "bounds on type number are not "
                                       "supported (on integer they are)");
                }
            }
            rc = kvs_sc_number(sc, &x);
            break;
        case KVS_T_STRING:
            rc = kvs_sc_str(sc, s, &x);
            break;
        case KVS_T_ARRAY:
            rc = kvs_sc_array(sc, s, &x);
            break;
        default:
            rc = kvs_sc_object(sc, s, &x);
            break;
        }

        alts[n_alts++] = x;
    }

    if (rc != KVS_OK) {
        return rc;
    }

    if (n_alts == 1) {
        *rule = alts[0];
        return KVS_OK;
    }

    rc = kvs_sc_rule(sc, rule);
    memset(&q, 0, sizeof(q));
    for (k = 0; k < n_alts && rc == KVS_OK; k++) {
        kvs_gram_seq_reset(&q);
        kvs_gram_seq_ref(&q, alts[k]);
        rc = kvs_gram_add_alt(sc->g, *rule, &q, sc->err);
    }
    kvs_gram_seq_free(&q);

    return rc;
}


static int
kvs_sc_schema(kvs_sc_t *sc, const json_t *s, uint32_t *rule)
{
    int  rc;

    if (++sc->depth > sc->max_depth) {
        sc->depth--;
        return kvs_sc_fail(sc, KVS_EUNSUPPORTED, NULL,
                           "schema nests deeper than %u", sc->max_depth);
    }

    rc = kvs_sc_body(sc, s, rule);
    sc->depth--;

    return rc;
}


static void
kvs_sc_init(kvs_sc_t *sc, kvs_gram_t *g, const json_t *root,
    const kvs_gram_opts_t *opts, kvs_err_t *err)
{
    memset(sc, 0, sizeof(kvs_sc_t));
    sc->g = g;
    sc->root = root;
    sc->err = err;
    sc->flags = opts != NULL ? opts->flags : 0;
    sc->max_depth = opts != NULL && opts->max_depth > 0 ? opts->max_depth
                                                         : 64;
    sc->comma = sc->flags & KVS_GRAM_COMPACT ? "," : ", ";
    sc->colon = sc->flags & KVS_GRAM_COMPACT ? ":" : ": ";
    sc->r_value = sc->r_string = sc->r_char = sc->r_body = KVS_SC_NONE;
    sc->r_int = sc->r_number = sc->r_uint = KVS_SC_NONE;
}


int
kvs_gram_from_schema(kvs_gram_t *g, const json_t *schema,
    const kvs_gram_opts_t *opts, kvs_err_t *err)
{
    int       rc;
    uint32_t  root;
    kvs_sc_t  sc;

    kvs_gram_init(g, opts != NULL ? &opts->lim : NULL);

    if (schema == NULL) {
        return kvs_err_set(err, KVS_EINVAL, "no schema");
    }

    kvs_sc_init(&sc, g, schema, opts, err);

    rc = kvs_sc_schema(&sc, schema, &root);
    if (rc == KVS_OK) {
        rc = kvs_gram_finish(g, root, err);
        if (rc != KVS_OK && rc != KVS_ENOMEM) {
            (void) kvs_err_prefix(err, "$ref");
            rc = KVS_EUNSUPPORTED;
        }
    }

    free(sc.refs);

    return rc;
}


int
kvs_gram_json_object(kvs_gram_t *g, const kvs_gram_opts_t *opts,
    kvs_err_t *err)
{
    int       rc;
    uint32_t  root;
    json_t   *s;
    kvs_sc_t  sc;

    kvs_gram_init(g, opts != NULL ? &opts->lim : NULL);

    s = json_pack("{s:s}", "type", "object");
    if (s == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "schema: out of memory");
    }

    kvs_sc_init(&sc, g, s, opts, err);

    rc = kvs_sc_schema(&sc, s, &root);
    if (rc == KVS_OK) {
        rc = kvs_gram_finish(g, root, err);
    }

    free(sc.refs);
    json_decref(s);

    return rc;
}
