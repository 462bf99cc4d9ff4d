/*
 * kvs_test_gram: helpers for the grammar tests: compiling a schema from
 * text, matching a whole text, and an independent JSON Schema validator
 * written here from the specification (jansson parses, PCRE2 runs
 * "pattern"), which the grammar's outputs are held to.  Header-only so
 * each test stays one .c file.
 */

#ifndef KVS_TEST_GRAM_H
#define KVS_TEST_GRAM_H

#define PCRE2_CODE_UNIT_WIDTH 8

#include <jansson.h>
#include <pcre2.h>

#include "kvs_test.h"

#include "grammar/kvs_grammar.h"


/* Compiles schema text (fails the test on a JSON error). */
static inline int
tg_compile(kvs_gram_t *g, const char *schema, unsigned flags,
    kvs_err_t *err)
{
    int              rc;
    json_t          *s;
    json_error_t     je;
    kvs_gram_opts_t  o;

    s = json_loads(schema, JSON_DECODE_ANY, &je);
    if (s == NULL) {
        fail_msg("bad test schema %s: %s", schema, je.text);
    }

    memset(&o, 0, sizeof(o));
    o.flags = flags;
    rc = kvs_gram_from_schema(g, s, &o, err);
    json_decref(s);

    return rc;
}


/* 1 if the grammar accepts exactly the whole text. */
static inline int
tg_match(const kvs_gram_t *g, const void *text, size_t len)
{
    int                 ok;
    kvs_gram_matcher_t  m;

    if (kvs_gram_matcher_init(&m, g, NULL, NULL) != KVS_OK) {
        return 0;
    }

    ok = kvs_gram_matcher_feed(&m, text, len, NULL) == KVS_OK
         && kvs_gram_matcher_can_end(&m);
    kvs_gram_matcher_free(&m);

    return ok;
}


/* ---- the validator ------------------------------------------------------ */

static inline size_t
tg_utf8_len(const char *s, size_t n)
{
    size_t  i, c;

    for (i = 0, c = 0; i < n; i++) {
        if (((unsigned char) s[i] & 0xC0) != 0x80) {
            c++;
        }
    }

    return c;
}


static inline int
tg_re_search(const char *re, const char *s, size_t n)
{
    int                  rc, e;
    PCRE2_SIZE           off;
    pcre2_code          *code;
    pcre2_match_data    *md;

    code = pcre2_compile((PCRE2_SPTR) re, PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &e, &off, NULL);
    if (code == NULL) {
        fail_msg("PCRE2 refuses test regex %s", re);
    }

    md = pcre2_match_data_create_from_pattern(code, NULL);
    rc = pcre2_match(code, (PCRE2_SPTR) s, n, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(code);

    return rc >= 0;
}


static inline const json_t *
tg_ref(const json_t *root, const char *ref)
{
    char           tok[256];
    size_t         i, j;
    const json_t  *t;

    if (strcmp(ref, "#") == 0) {
        return root;
    }

    t = root;
    for (i = 1; ref[i] == '/' && t != NULL; ) {
        i++;
        for (j = 0; ref[i] != '\0' && ref[i] != '/' && j < 255; i++) {
            tok[j++] = ref[i];
        }
        tok[j] = '\0';
        t = json_object_get(t, tok);
    }

    return t;
}


static inline int tg_valid(const json_t *root, const json_t *s,
    const json_t *x);


static inline int
tg_type_ok(const char *t, const json_t *x)
{
    if (strcmp(t, "null") == 0) {
        return json_is_null(x);
    }
    if (strcmp(t, "boolean") == 0) {
        return json_is_boolean(x);
    }
    if (strcmp(t, "object") == 0) {
        return json_is_object(x);
    }
    if (strcmp(t, "array") == 0) {
        return json_is_array(x);
    }
    if (strcmp(t, "string") == 0) {
        return json_is_string(x);
    }
    if (strcmp(t, "number") == 0) {
        return json_is_number(x);
    }
    if (strcmp(t, "integer") == 0) {
        return json_is_integer(x)
               || (json_is_real(x)
                   && json_real_value(x) == floor(json_real_value(x)));
    }

    fail_msg("validator: unknown type %s", t);
    return 0;
}


static inline int
tg_format_ok(const char *f, const char *s, size_t n)
{
    static const char  *days = "^\\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\\d|"
                               "3[01])|(0[469]|11)-(0[1-9]|[12]\\d|30)|"
                               "02-(0[1-9]|1\\d|2[0-9]))";
    static const char  *tm = "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d+)?"
                             "([Zz]|[+-]([01]\\d|2[0-3]):[0-5]\\d)$";
    char                re[512];

    if (strcmp(f, "date") == 0) {
        snprintf(re, sizeof(re), "%s$", days);
    } else if (strcmp(f, "time") == 0) {
        snprintf(re, sizeof(re), "^%s", tm);
    } else if (strcmp(f, "date-time") == 0) {
        snprintf(re, sizeof(re), "%s[Tt]%s", days, tm);
    } else if (strcmp(f, "uuid") == 0) {
        snprintf(re, sizeof(re), "^[[:xdigit:]]{8}(-[[:xdigit:]]{4}){3}-"
                 "[[:xdigit:]]{12}$");
    } else if (strcmp(f, "email") == 0) {
        snprintf(re, sizeof(re), "^[^@\\s\"(),:;<>\\[\\]\\\\]+@"
                 "[A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)+$");
    } else {
        fail_msg("validator: unknown format %s", f);
    }

    return tg_re_search(re, s, n);
}


static inline int
tg_valid(const json_t *root, const json_t *s, const json_t *x)
{
    size_t         i, k, n;
    const char    *key;
    const json_t  *v, *t, *props, *addl;
    json_t        *xv;
    double         d;

    if (json_is_true(s)) {
        return 1;
    }
    if (json_is_false(s)) {
        return 0;
    }

    if ((v = json_object_get(s, "$ref")) != NULL) {
        t = tg_ref(root, json_string_value(v));
        if (t == NULL) {
            fail_msg("validator: $ref %s", json_string_value(v));
        }
        return tg_valid(root, t, x);
    }

    if ((v = json_object_get(s, "type")) != NULL) {
        if (json_is_string(v)) {
            if (!tg_type_ok(json_string_value(v), x)) {
                return 0;
            }
        } else {
            for (i = 0, k = 0; i < json_array_size(v); i++) {
                k |= (size_t) tg_type_ok(
                    json_string_value(json_array_get(v, i)), x);
            }
            if (!k) {
                return 0;
            }
        }
    }

    if ((v = json_object_get(s, "const")) != NULL && !json_equal(v, x)) {
        return 0;
    }

    if ((v = json_object_get(s, "enum")) != NULL) {
        for (i = 0; i < json_array_size(v); i++) {
            if (json_equal(json_array_get(v, i), x)) {
                break;
            }
        }
        if (i == json_array_size(v)) {
            return 0;
        }
    }

    if ((v = json_object_get(s, "anyOf")) != NULL) {
        for (i = 0; i < json_array_size(v); i++) {
            if (tg_valid(root, json_array_get(v, i), x)) {
                break;
            }
        }
        if (i == json_array_size(v)) {
            return 0;
        }
    }

    if ((v = json_object_get(s, "oneOf")) != NULL) {
        for (i = 0, k = 0; i < json_array_size(v); i++) {
            k += (size_t) tg_valid(root, json_array_get(v, i), x);
        }
        if (k != 1) {
            return 0;
        }
    }

    if ((v = json_object_get(s, "allOf")) != NULL) {
        for (i = 0; i < json_array_size(v); i++) {
            if (!tg_valid(root, json_array_get(v, i), x)) {
                return 0;
            }
        }
    }

    if (json_is_string(x)) {
        n = json_string_length(x);
        if ((v = json_object_get(s, "minLength")) != NULL
            && tg_utf8_len(json_string_value(x), n)
               < (size_t) json_number_value(v))
        {
            return 0;
        }
        if ((v = json_object_get(s, "maxLength")) != NULL
            && tg_utf8_len(json_string_value(x), n)
               > (size_t) json_number_value(v))
        {
            return 0;
        }
        if ((v = json_object_get(s, "pattern")) != NULL
            && !tg_re_search(json_string_value(v), json_string_value(x), n))
        {
            return 0;
        }
        if ((v = json_object_get(s, "format")) != NULL
            && !tg_format_ok(json_string_value(v), json_string_value(x), n))
        {
            return 0;
        }
    }

    if (json_is_number(x)) {
        d = json_number_value(x);
        if ((v = json_object_get(s, "minimum")) != NULL
            && d < json_number_value(v))
        {
            return 0;
        }
        if ((v = json_object_get(s, "maximum")) != NULL
            && d > json_number_value(v))
        {
            return 0;
        }
        if ((v = json_object_get(s, "exclusiveMinimum")) != NULL
            && d <= json_number_value(v))
        {
            return 0;
        }
        if ((v = json_object_get(s, "exclusiveMaximum")) != NULL
            && d >= json_number_value(v))
        {
            return 0;
        }
    }

    if (json_is_array(x)) {
        n = json_array_size(x);
        if ((v = json_object_get(s, "minItems")) != NULL
            && n < (size_t) json_number_value(v))
        {
            return 0;
        }
        if ((v = json_object_get(s, "maxItems")) != NULL
            && n > (size_t) json_number_value(v))
        {
            return 0;
        }
        if ((v = json_object_get(s, "items")) != NULL) {
            for (i = 0; i < n; i++) {
                if (!tg_valid(root, v, json_array_get(x, i))) {
                    return 0;
                }
            }
        }
    }

    if (json_is_object(x)) {
        props = json_object_get(s, "properties");
        addl = json_object_get(s, "additionalProperties");

        if ((v = json_object_get(s, "required")) != NULL) {
            for (i = 0; i < json_array_size(v); i++) {
                if (json_object_get(x, json_string_value(
                                           json_array_get(v, i))) == NULL)
                {
                    return 0;
                }
            }
        }

        json_object_foreach((json_t *) x, key, xv) {
            t = props != NULL ? json_object_get(props, key) : NULL;
            if (t != NULL) {
                if (!tg_valid(root, t, xv)) {
                    return 0;
                }
            } else if (addl != NULL && !tg_valid(root, addl, xv)) {
                return 0;
            }
        }
    }

    return 1;
}


/*
 * 1 if text is one JSON value valid per schema (a repeated key of a map
 * counts with its last value, as jansson reads it: the grammar cannot
 * make free keys unique, docs/grammar.md), 0 if
 * not, -1 if it is a number jansson cannot hold (JSON has no limit on
 * exponents; a double does: "1e999" is valid JSON that jansson refuses).
 * Numbers are read as doubles, in the schema too, so that enum and const
 * compare 1 and 1.0 as JSON Schema does.
 */
static inline int
tg_valid_text(const char *schema, const char *text, size_t len)
{
    int           ok;
    json_t       *s, *x;
    json_error_t  je;

    s = json_loads(schema, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
    x = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL,
                   &je);
    if (s == NULL) {
        fail_msg("bad test schema %s", schema);
    }

    if (x == NULL && strstr(je.text, "overflow") != NULL) {
        json_decref(s);
        return -1;
    }

    ok = x != NULL && tg_valid(s, s, x);

    json_decref(s);
    json_decref(x);

    return ok;
}


/* The brute-force mask: every token on its own (a text token iff the
 * matcher takes all its bytes; an END token iff the grammar is complete;
 * others never), what kvs_gram_mask() must equal. */
static inline void
tg_brute(kvs_gram_matcher_t *m, const kvs_gram_vocab_t *gv, uint32_t *bits,
    uint32_t words)
{
    uint32_t  id;

    memset(bits, 0, words * sizeof(uint32_t));

    for (id = 0; id < gv->n_tokens; id++) {
        if (gv->kind[id] == KVS_GRAM_TOK_END) {
            if (kvs_gram_matcher_can_end(m)) {
                bits[id >> 5] |= 1u << (id & 31);
            }
            continue;
        }
        if (gv->kind[id] != KVS_GRAM_TOK_TEXT) {
            continue;
        }
        if (kvs_gram_matcher_feed(m, gv->bytes + gv->off[id], gv->len[id],
                                  NULL) == KVS_OK)
        {
            bits[id >> 5] |= 1u << (id & 31);
            kvs_gram_matcher_rollback(m, gv->len[id]);
        }
    }
}


/* xorshift, so that runs repeat */
static inline uint64_t
tg_rand(uint64_t *st)
{
    *st ^= *st << 13;
    *st ^= *st >> 7;
    *st ^= *st << 17;

    return *st;
}

#endif /* KVS_TEST_GRAM_H */
