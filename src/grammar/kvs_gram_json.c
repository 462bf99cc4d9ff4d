/*
 * kvs_gram_json: JSON's lexical rules as grammar rules, for the schema
 * compiler, and its path-naming errors.
 *
 * Owns the shared rules of one compilation (made on first use, kept in
 * kvs_sc_t): a string character (valid UTF-8 without controls, or an
 * escape; \u escapes of surrogates are left out, so a character is one
 * code point), strings, digit runs, integers, numbers (JSON's grammar
 * exactly) and "any JSON value" in the output layout (", " and ": ", or
 * "," and ":" compact).  Also the keyword path kept while compiling, and
 * kvs_sc_fail(), which starts every message with it.
 *
 * Invariants: a shared rule id is KVS_SC_NONE or a rule with all its
 * alternatives (r_value is recorded before its alternatives exist, since
 * a value contains values); path[plen] is always NUL.
 */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_gram_schema_impl.h"


/* ---- errors and paths -------------------------------------------------- */

size_t
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


size_t
kvs_sc_push_index(kvs_sc_t *sc, size_t i)
{
    char  buf[32];

    snprintf(buf, sizeof(buf), "%zu", i);

    return kvs_sc_push(sc, buf);
}


void
kvs_sc_pop(kvs_sc_t *sc, size_t old)
{
    sc->plen = old;
    sc->path[old] = '\0';
}


/* "path.kw: message"; kw NULL: "path: message" */
int
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

int
kvs_sc_rule(kvs_sc_t *sc, uint32_t *rule)
{
    return kvs_gram_rule_new(sc->g, rule, sc->err);
}


/* rule -> seq, as a new rule */
int
kvs_sc_rule_of(kvs_sc_t *sc, const kvs_gram_seq_t *q, uint32_t *rule)
{
    int  rc;

    rc = kvs_sc_rule(sc, rule);
    if (rc == KVS_OK) {
        rc = kvs_gram_add_alt(sc->g, *rule, q, sc->err);
    }

    return rc;
}


int
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
int
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
int
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

    /* \u and four hex digits, D800-DFFF left out; under JANSSON \u0000
     * too (jansson refuses NUL in strings): "\u" [1-9] or "\u0" [1-9a-f]
     * or "\u00" [1-9a-f] or "\u000" [1-9a-f], then hex digits */
    for (k = 0; rc == KVS_OK && (sc->flags & KVS_GRAM_JANSSON) && k < 10;
         k++)
    {
        static const char  nz[] = "19afAF";
        unsigned           zeros, c, j;

        zeros = k == 0 ? 0 : (k - 1) / 3 + 1;
        c = k == 0 ? 0 : (k - 1) % 3;

        kvs_gram_seq_reset(&q);
        kvs_gram_seq_lit(&q, "\\u000", 2 + zeros);
        kvs_gram_seq_range(&q, (uint8_t) nz[2 * c], (uint8_t) nz[2 * c + 1]);
        for (j = zeros + 1; j < 4; j++) {
            kvs_gram_seq_ref(&q, hex);
        }
        rc = kvs_gram_add_alt(sc->g, r, &q, sc->err);
    }

    for (k = 0; rc == KVS_OK && k < 7; k++) {
        static const char  lo[] = "0aAeEdD", hi[] = "9cCfFdD";

        if (k == 0 && (sc->flags & KVS_GRAM_JANSSON)) {
            continue;                 /* the 0... escapes are above */
        }

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
        sc->g->char_rule = r + 1;     /* its characters counted directly
                                         (kvs_gram_long.c) */
        *rule = r;
    }

    return rc;
}


/* "..." with any body */
int
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


/* [0-9]{min,max} as a rule */
static int
kvs_sc_digit_rep(kvs_sc_t *sc, uint32_t min, uint32_t max, uint32_t *rule)
{
    int             rc;
    uint32_t        d;
    kvs_gram_seq_t  q;

    memset(&q, 0, sizeof(q));
    kvs_gram_seq_range(&q, '0', '9');
    rc = kvs_sc_rule_of(sc, &q, &d);
    kvs_gram_seq_free(&q);

    if (rc == KVS_OK) {
        rc = kvs_gram_repeat(sc->g, d, NULL, min, max, rule, sc->err);
    }

    return rc;
}


/* [0-9]{min,} as a rule */
int
kvs_sc_digits(kvs_sc_t *sc, uint32_t min, uint32_t *rule)
{
    return kvs_sc_digit_rep(sc, min, UINT32_MAX, rule);
}


/* -?(0|[1-9][0-9]*) and the non-negative part alone */
int
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

    /* under JANSSON [1-9][0-9]{0,17}: below 2^63, jansson's "too big
     * integer" */
    rc = sc->flags & KVS_GRAM_JANSSON ? kvs_sc_digit_rep(sc, 0, 17, &digits)
                                      : kvs_sc_digits(sc, 0, &digits);
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
int
kvs_sc_number(kvs_sc_t *sc, uint32_t *rule)
{
    int             rc;
    uint32_t        i, d1, frac, ex, sign, r;
    uint32_t        de = KVS_SC_NONE;
    kvs_gram_seq_t  q;

    if (sc->r_number != KVS_SC_NONE) {
        *rule = sc->r_number;
        return KVS_OK;
    }

    memset(&q, 0, sizeof(q));

    rc = kvs_sc_integer(sc, &i);
    if (rc == KVS_OK) {
        rc = kvs_sc_digits(sc, 1, &d1);
        de = d1;
    }
    if (rc == KVS_OK && (sc->flags & KVS_GRAM_JANSSON)) {
        /* two exponent digits: 1e99 at most with 18 integer digits stays
         * far from a double's overflow (jansson refuses "1e999") */
        rc = kvs_sc_digit_rep(sc, 1, 2, &de);
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
        kvs_gram_seq_ref(&q, de);
        rc = kvs_gram_add_alt(sc->g, ex, &q, sc->err);
    }
    if (rc == KVS_OK) {
        kvs_gram_seq_reset(&q);
        kvs_gram_seq_range(&q, 'E', 'E');
        kvs_gram_seq_ref(&q, sign);
        kvs_gram_seq_ref(&q, de);
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
int
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
