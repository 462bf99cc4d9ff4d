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
 * This file has the keywords and the dispatch; objects and arrays are
 * kvs_gram_schema_obj.c, JSON's lexical rules are in kvs_gram_json.c,
 * const/enum values and integer ranges in kvs_gram_values.c
 * (kvs_gram_schema_impl.h is what they share).
 *
 * Invariants: every rule made here gets at least one alternative before
 * kvs_gram_finish(), except a $ref rule while its target compiles (the
 * recursion); schema nesting is capped (opts.max_depth); every size goes
 * through the grammar's caps.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_gram_schema_impl.h"


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


int
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

        rc = kvs_sc_regex(sc->g, re, k, sc->flags, &body, sc->err);
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
            rc = kvs_sc_num_bounded(sc, s, &x);
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


int
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


void
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
