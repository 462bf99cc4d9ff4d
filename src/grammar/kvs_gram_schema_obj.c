/*
 * kvs_gram_schema_obj: JSON Schema objects and arrays -> grammar rules:
 * "properties" (in the order the schema lists them, each at most once),
 * "required", "additionalProperties" (maps), "items", minItems and
 * maxItems ("uniqueItems" is refused).  The other keywords and the
 * dispatch are kvs_gram_schema.c, which calls these for "object" and
 * "array"; each member's or item's own schema goes back through
 * kvs_sc_schema().
 *
 * Invariants: those of kvs_gram_schema.c (the one canonical layout, a
 * keyword or value outside the supported set is KVS_EUNSUPPORTED with
 * its path, every rule made gets an alternative, every size goes through
 * the grammar's caps); the path pushed for a member or an item is popped
 * before returning, on errors too.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_gram_schema_impl.h"


/* ---- objects and arrays ------------------------------------------------- */

typedef struct {
    const char    *name;
    const json_t  *schema;
    int            required;
    uint32_t       member;            /* "name": value */
} kvs_sc_prop_t;


/* [A-Za-z_][A-Za-z0-9_]*: a keyword argument's name */
static int
kvs_sc_ident(const char *s)
{
    size_t  i;

    for (i = 0; s[i] != '\0'; i++) {
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')
              || s[i] == '_' || (i > 0 && s[i] >= '0' && s[i] <= '9')))
        {
            return 0;
        }
    }

    return i > 0;
}


int
kvs_sc_object(kvs_sc_t *sc, const json_t *s, uint32_t *rule)
{
    int             rc, kw;
    size_t          n, n_decl, i, k, old;
    uint32_t        val, first, after, nfirst, nafter, key, members;
    const char     *name, *open, *close, *comma;
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

    kw = sc->kwargs;
    sc->kwargs = 0;
    open = kw ? "" : "{";
    close = kw ? "" : "}";
    comma = kw ? "," : sc->comma;

    memset(&q, 0, sizeof(q));
    memset(&sep, 0, sizeof(sep));
    kvs_gram_seq_lit(&sep, comma, strlen(comma));

    /* a map: no properties, extra ones allowed; as keyword arguments,
     * none (free keys would need a Python identifier's grammar and
     * could repeat) */
    if ((props == NULL || json_object_size(props) == 0)
        && (req == NULL || json_array_size(req) == 0)
        && (addl == NULL || !json_is_false(addl)))
    {
        if (kw) {
            kvs_gram_seq_free(&sep);
            rc = kvs_sc_rule(sc, rule);
            return rc == KVS_OK ? kvs_gram_add_alt(sc->g, *rule, NULL,
                                                   sc->err)
                                : rc;
        }

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
        if (kw) {
            if (!kvs_sc_ident(p[k].name)) {
                rc = kvs_sc_fail(sc, KVS_EINVAL, "properties", "'%.64s' "
                                 "is not a Python identifier (the call "
                                 "writes it as a keyword argument)",
                                 p[k].name);
                break;
            }
            kvs_sc_put(&b, p[k].name, strlen(p[k].name));
            kvs_sc_put(&b, "=", 1);
        } else {
            kvs_sc_put_str(&b, p[k].name, strlen(p[k].name));
            kvs_sc_put(&b, sc->colon, strlen(sc->colon));
        }
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
            kvs_gram_seq_lit(&q, comma, strlen(comma));
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
        rc = kvs_sc_wrap(sc, *rule, open, nfirst, close);
    }

    free(p);
    kvs_gram_seq_free(&q);
    kvs_gram_seq_free(&sep);

    return rc;
}


int
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
