/*
 * kvs_gram_values: const and enum values, and integer ranges, as
 * grammar rules for the schema compiler.
 *
 * Owns the one serialisation of a JSON value that outputs use (the
 * layout's separators, strings with the short escapes and \u00XX for
 * other controls, numbers as jansson holds them, the shortest %g that
 * reads back for reals), the byte trie that makes an enum one parse per
 * shared prefix, the canonical decimals of an integer interval [lo, hi]
 * (either side open) as digit-range alternatives, and numbers between
 * integer bounds (without exponent).
 *
 * Invariants: an enum's rules derive exactly its values' serialisations
 * (of the allowed types), each once; an integer range's rules derive
 * exactly the canonical decimals in it ("-0" never, no leading zeros).
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_gram_schema_impl.h"


/* ---- literals: const and enum ------------------------------------------ */

void
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


void
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
int
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


int
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


/* ---- numbers between integer bounds ------------------------------------- */

/* A new rule: the canonical decimals of [a, b] (b UINT64_MAX: open). */
static int
kvs_sc_uint_rule(kvs_sc_t *sc, uint64_t a, uint64_t b, uint32_t *rule)
{
    int             rc;
    kvs_gram_seq_t  pre;

    rc = kvs_sc_rule(sc, rule);
    if (rc != KVS_OK) {
        return rc;
    }

    memset(&pre, 0, sizeof(pre));
    rc = kvs_sc_uint_range(sc, *rule, &pre, a, b);
    kvs_gram_seq_free(&pre);

    return rc;
}


/* rule -> [sign] int frac */
static int
kvs_sc_num_alt(kvs_sc_t *sc, uint32_t rule, int neg, uint64_t a, uint64_t b,
    uint32_t frac)
{
    int             rc;
    uint32_t        i;
    kvs_gram_seq_t  q;

    rc = kvs_sc_uint_rule(sc, a, b, &i);
    if (rc != KVS_OK) {
        return rc;
    }

    memset(&q, 0, sizeof(q));
    if (neg) {
        kvs_gram_seq_lit(&q, "-", 1);
    }
    kvs_gram_seq_ref(&q, i);
    kvs_gram_seq_ref(&q, frac);
    rc = kvs_gram_add_alt(sc->g, rule, &q, sc->err);
    kvs_gram_seq_free(&q);

    return rc;
}


/* ("." digit+)? when any, ("." "0"+)? when zero */
static int
kvs_sc_frac(kvs_sc_t *sc, int zero, uint32_t *rule)
{
    int             rc;
    uint32_t        d, ds;
    kvs_gram_seq_t  q;

    memset(&q, 0, sizeof(q));
    kvs_gram_seq_range(&q, '0', zero ? '0' : '9');
    rc = kvs_sc_rule_of(sc, &q, &d);
    if (rc == KVS_OK) {
        rc = kvs_gram_repeat(sc->g, d, NULL, 1, UINT32_MAX, &ds, sc->err);
    }
    if (rc == KVS_OK) {
        rc = kvs_sc_rule(sc, rule);
    }
    if (rc == KVS_OK) {
        rc = kvs_gram_add_alt(sc->g, *rule, NULL, sc->err);
    }
    if (rc == KVS_OK) {
        kvs_gram_seq_reset(&q);
        kvs_gram_seq_lit(&q, ".", 1);
        kvs_gram_seq_ref(&q, ds);
        rc = kvs_gram_add_alt(sc->g, *rule, &q, sc->err);
    }
    kvs_gram_seq_free(&q);

    return rc;
}


/* An integer-valued bound of a number; *have stays 0 when absent. */
static int
kvs_sc_num_bound(kvs_sc_t *sc, const json_t *s, const char *kw,
    int64_t *out, int *have)
{
    double         d;
    const json_t  *v;

    v = json_object_get(s, kw);
    if (v == NULL) {
        return KVS_OK;
    }

    if (!json_is_number(v)) {
        return kvs_sc_fail(sc, KVS_EINVAL, kw, "must be a number");
    }

    d = json_number_value(v);

    if (d != floor(d) || !(fabs(d) <= KVS_SC_MAX_INT)) {
        return kvs_sc_fail(sc, KVS_EUNSUPPORTED, kw,
                           "on type number only integer values within "
                           "1e18 are supported");
    }

    *out = (int64_t) d;
    *have = 1;

    return KVS_OK;
}


/*
 * A number in [lo, hi] with integer bounds, written without exponent
 * (a subset: every output is in range).  With x = I.F: x >= 0 is in
 * range iff I in [max(lo, 0), hi - 1] with any F, or I = hi with F all
 * zeros; x = -(I.F) iff I.F in [max(-hi, 0), -lo], the same way round.
 */
int
kvs_sc_num_bounded(kvs_sc_t *sc, const json_t *s, uint32_t *rule)
{
    int       rc, hlo, hhi;
    int64_t   lo, hi;
    uint64_t  a, j;
    uint32_t  any, zero;

    if (json_object_get(s, "exclusiveMinimum") != NULL
        || json_object_get(s, "exclusiveMaximum") != NULL)
    {
        return kvs_sc_fail(sc, KVS_EUNSUPPORTED,
                           json_object_get(s, "exclusiveMinimum") != NULL
                           ? "exclusiveMinimum" : "exclusiveMaximum",
                           "on type number is not supported (minimum and "
                           "maximum with integer values are)");
    }

    hlo = hhi = 0;
    lo = hi = 0;

    rc = kvs_sc_num_bound(sc, s, "minimum", &lo, &hlo);
    if (rc == KVS_OK) {
        rc = kvs_sc_num_bound(sc, s, "maximum", &hi, &hhi);
    }
    if (rc != KVS_OK) {
        return rc;
    }

    if (!hlo && !hhi) {
        return kvs_sc_number(sc, rule);
    }

    if (hlo && hhi && lo > hi) {
        return kvs_sc_fail(sc, KVS_EINVAL, "minimum",
                           "%lld is over maximum %lld", (long long) lo,
                           (long long) hi);
    }

    rc = kvs_sc_frac(sc, 0, &any);
    if (rc == KVS_OK) {
        rc = kvs_sc_frac(sc, 1, &zero);
    }
    if (rc == KVS_OK) {
        rc = kvs_sc_rule(sc, rule);
    }

    /* x >= 0 */
    if (rc == KVS_OK && (!hhi || hi >= 0)) {
        a = hlo && lo > 0 ? (uint64_t) lo : 0;
        if (!hhi) {
            rc = kvs_sc_num_alt(sc, *rule, 0, a, UINT64_MAX, any);
        } else {
            if ((uint64_t) hi >= a + 1) {
                rc = kvs_sc_num_alt(sc, *rule, 0, a, (uint64_t) hi - 1, any);
            }
            if (rc == KVS_OK) {
                rc = kvs_sc_num_alt(sc, *rule, 0, (uint64_t) hi,
                                    (uint64_t) hi, zero);
            }
        }
    }

    /* x < 0: magnitude in [max(-hi, 0), -lo] */
    if (rc == KVS_OK && (!hlo || lo < 0)) {
        a = hhi && hi < 0 ? (uint64_t) -hi : 0;
        if (!hlo) {
            rc = kvs_sc_num_alt(sc, *rule, 1, a, UINT64_MAX, any);
        } else {
            j = (uint64_t) -lo;
            if (j >= a + 1) {
                rc = kvs_sc_num_alt(sc, *rule, 1, a, j - 1, any);
            }
            if (rc == KVS_OK) {
                rc = kvs_sc_num_alt(sc, *rule, 1, j, j, zero);
            }
        }
    }

    return rc;
}
