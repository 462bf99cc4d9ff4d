/*
 * kvs_jinja_builtin: the filters, tests, globals and methods a chat
 * template may use, with jinja2's (and Python's) meaning.
 *
 * This file holds the names (filters and tests are checked at compile
 * time), the tests, the globals and the methods; the filters are in
 * kvs_jinja_filter.c and the string operations both use in
 * kvs_jinja_str.c.
 *
 * This is the sandbox's whitelist: a name not listed here is undefined,
 * and the methods that would change a list or dict (append, update, pop,
 * ...) are undefined too, so calling one fails the render, as jinja2's
 * ImmutableSandboxedEnvironment raises SecurityError.  Filters and tests
 * are checked at compile time (kvs_jb_has_filter / kvs_jb_has_test) so
 * that an unknown one is refused by name before any render.  Case
 * mapping (upper, lower, title, capitalize) is ASCII-only.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvs_jinja_impl.h"


static const char  *kvs_jb_filters[] = {
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e",
    "escape", "first", "float", "indent", "int", "items", "join", "last",
    "length", "list", "lower", "map", "max", "min", "reject", "rejectattr",
    "replace", "reverse", "round", "safe", "select", "selectattr", "sort",
    "string", "sum", "title", "tojson", "trim", "unique", "upper", NULL
};

static const char  *kvs_jb_tests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto",
    "even", "false", "float", "ge", "greaterthan", "gt", "in", "integer",
    "iterable", "le", "lessthan", "lower", "lt", "mapping", "ne", "none",
    "number", "odd", "sameas", "sequence", "string", "true", "undefined",
    "upper", NULL
};

static const char  *kvs_jb_str_methods[] = {
    "capitalize", "count", "endswith", "find", "isalnum", "isalpha",
    "isdigit", "islower", "isspace", "isupper", "join", "lower", "lstrip",
    "replace", "rsplit", "rstrip", "split", "splitlines", "startswith",
    "strip", "title", "upper", NULL
};

static const char  *kvs_jb_dict_methods[] = {
    "copy", "get", "items", "keys", "values", NULL
};

static const char  *kvs_jb_dict_unsafe[] = {
    "clear", "pop", "popitem", "setdefault", "update", "fromkeys", NULL
};

static const char  *kvs_jb_list_methods[] = { "copy", "count", "index", NULL };

static const char  *kvs_jb_list_unsafe[] = {
    "append", "clear", "extend", "insert", "pop", "remove", "reverse",
    "sort", NULL
};


static const char *
kvs_jb_find(const char *const *names, const char *name, size_t n)
{
    for ( ; *names != NULL; names++) {
        if (strlen(*names) == n && memcmp(*names, name, n) == 0) {
            return *names;
        }
    }

    return NULL;
}


int
kvs_jb_has_filter(const char *name, size_t n)
{
    return kvs_jb_find(kvs_jb_filters, name, n) != NULL;
}


int
kvs_jb_has_test(const char *name, size_t n)
{
    return kvs_jb_find(kvs_jb_tests, name, n) != NULL;
}


const char *
kvs_jb_test_name(const char *name, size_t n)
{
    return kvs_jb_find(kvs_jb_tests, name, n);
}


const kvs_jv_t *
kvs_jargs_get(const kvs_jargs_t *a, size_t i, const char *kw)
{
    size_t  k;

    if (i < a->npos) {
        return &a->pos[i];
    }
    for (k = 0; kw != NULL && k < a->nkw; k++) {
        if (strcmp(a->kwn[k], kw) == 0) {
            return &a->kwv[k];
        }
    }

    return NULL;
}


int
kvs_jb_want_str(kvs_jctx_t *c, const kvs_jv_t *v, const char *what)
{
    if (v == NULL || v->type != KVS_JV_STR) {
        return kvs_jctx_fail(c, KVS_EINVAL, "%s expects a string, not %s",
                             what, v ? kvs_jv_type_name(v) : "nothing");
    }

    return KVS_OK;
}


static kvs_jv_t
kvs_jb_func(kvs_jctx_t *c, int kind, const char *name, const kvs_jv_t *self)
{
    kvs_jfunc_t  *f;
    kvs_jv_t      v;

    memset(&v, 0, sizeof(v));
    f = kvs_jarena_alloc(&c->arena, sizeof(*f));
    if (f == NULL) {
        kvs_jctx_nomem(c);
        return kvs_jv_undef(NULL);
    }
    f->kind = kind;
    f->name = name;
    if (self != NULL) {
        f->self = *self;
    } else {
        memset(&f->self, 0, sizeof(f->self));
    }
    v.type = KVS_JV_FUNC;
    v.u.fn = f;

    return v;
}


/* globals are static: they need no arena, and a render's lookups of
 * raise_exception and friends cost nothing */
static kvs_jfunc_t  kvs_jb_globals[] = {
    { KVS_JF_RAISE, "raise_exception", { 0, 0, { 0 } } },
    { KVS_JF_STRFTIME, "strftime_now", { 0, 0, { 0 } } },
    { KVS_JF_RANGE, "range", { 0, 0, { 0 } } },
    { KVS_JF_NAMESPACE, "namespace", { 0, 0, { 0 } } },
    { KVS_JF_DICT, "dict", { 0, 0, { 0 } } },
};


kvs_jv_t
kvs_jb_global(const char *name, size_t n)
{
    kvs_jv_t  v;
    size_t    i;

    memset(&v, 0, sizeof(v));
    for (i = 0; i < sizeof(kvs_jb_globals) / sizeof(kvs_jb_globals[0]); i++)
    {
        if (strlen(kvs_jb_globals[i].name) == n
            && memcmp(kvs_jb_globals[i].name, name, n) == 0)
        {
            v.type = KVS_JV_FUNC;
            v.u.fn = &kvs_jb_globals[i];
            return v;
        }
    }

    return kvs_jv_undef(NULL);
}


int
kvs_jb_method(kvs_jctx_t *c, const kvs_jv_t *obj, const char *name,
    size_t n, kvs_jv_t *res)
{
    const char  *m = NULL;

    switch (obj->type) {
    case KVS_JV_STR:
        m = kvs_jb_find(kvs_jb_str_methods, name, n);
        break;
    case KVS_JV_DICT:
        m = kvs_jb_find(kvs_jb_dict_methods, name, n);
        if (m == NULL && kvs_jb_find(kvs_jb_dict_unsafe, name, n)) {
            *res = kvs_jv_undef(NULL);
            return 1;
        }
        break;
    case KVS_JV_LIST:
        m = kvs_jb_find(kvs_jb_list_methods, name, n);
        if (m == NULL && kvs_jb_find(kvs_jb_list_unsafe, name, n)) {
            *res = kvs_jv_undef(NULL);
            return 1;
        }
        break;
    default:
        break;
    }
    if (m == NULL) {
        return 0;
    }
    *res = kvs_jb_func(c, KVS_JF_METHOD, m, obj);

    return 1;
}


/* --- tests ---------------------------------------------------------------- */

static int
kvs_jb_test_is(const char *name, const char *what)
{
    return strcmp(name, what) == 0;
}


int
kvs_jb_test(kvs_jctx_t *c, const char *name, kvs_jv_t v,
    const kvs_jargs_t *args, int *res)
{
    const kvs_jv_t  *a = kvs_jargs_get(args, 0, NULL);
    int              r, rc;
    size_t           i;
    int              t = v.type;

    if (kvs_jb_test_is(name, "defined")) {
        *res = t != KVS_JV_UNDEF;
    } else if (kvs_jb_test_is(name, "undefined")) {
        *res = t == KVS_JV_UNDEF;
    } else if (kvs_jb_test_is(name, "none")) {
        *res = t == KVS_JV_NONE;
    } else if (kvs_jb_test_is(name, "string")) {
        *res = t == KVS_JV_STR;
    } else if (kvs_jb_test_is(name, "mapping")) {
        *res = t == KVS_JV_DICT;
    } else if (kvs_jb_test_is(name, "iterable")) {
        *res = t == KVS_JV_STR || t == KVS_JV_LIST || t == KVS_JV_DICT
               || t == KVS_JV_UNDEF || t == KVS_JV_LOOP;
    } else if (kvs_jb_test_is(name, "sequence")) {
        *res = t == KVS_JV_STR || t == KVS_JV_DICT || t == KVS_JV_UNDEF
               || (t == KVS_JV_LIST && v.flag != KVS_JL_GEN);
    } else if (kvs_jb_test_is(name, "number")) {
        *res = kvs_jv_is_num(&v);
    } else if (kvs_jb_test_is(name, "integer")) {
        *res = t == KVS_JV_INT;
    } else if (kvs_jb_test_is(name, "float")) {
        *res = t == KVS_JV_FLOAT;
    } else if (kvs_jb_test_is(name, "boolean")) {
        *res = t == KVS_JV_BOOL;
    } else if (kvs_jb_test_is(name, "true")) {
        *res = t == KVS_JV_BOOL && v.u.i;
    } else if (kvs_jb_test_is(name, "false")) {
        *res = t == KVS_JV_BOOL && !v.u.i;
    } else if (kvs_jb_test_is(name, "callable")) {
        *res = t == KVS_JV_MACRO || t == KVS_JV_FUNC;
    } else if (kvs_jb_test_is(name, "lower") || kvs_jb_test_is(name, "upper"))
    {
        int  lower = name[0] == 'l', cased = 0, ok = 1;

        if (t != KVS_JV_STR) {
            kvs_jv_t  s;

            if ((rc = kvs_jv_to_str(c, &v, &s)) != KVS_OK) {
                return rc;
            }
            v = s;
        }
        for (i = 0; i < v.u.s.n; i++) {
            char  ch = v.u.s.p[i];

            if (ch >= 'a' && ch <= 'z') {
                cased = 1;
                ok &= lower;
            } else if (ch >= 'A' && ch <= 'Z') {
                cased = 1;
                ok &= !lower;
            }
        }
        *res = cased && ok;
    } else if (kvs_jb_test_is(name, "odd") || kvs_jb_test_is(name, "even")
               || kvs_jb_test_is(name, "divisibleby"))
    {
        int64_t  d = 2, rem;

        if (t == KVS_JV_FLOAT && name[0] != 'd') {
            /* Python: value % 2, a float */
            double  m = fmod(v.u.f, 2.0);

            *res = name[0] == 'o' ? m != 0 : m == 0;
            return KVS_OK;
        }
        if (t != KVS_JV_INT && t != KVS_JV_BOOL) {
            return kvs_jctx_fail(c, KVS_EINVAL, "test '%s' needs an int",
                                 name);
        }
        if (name[0] == 'd') {
            if (a == NULL || (a->type != KVS_JV_INT && a->type != KVS_JV_BOOL)
                || a->u.i == 0)
            {
                return kvs_jctx_fail(c, KVS_EINVAL, "divisibleby needs a "
                                     "non-zero int");
            }
            d = a->u.i;
            if (d == -1) {
                *res = 1;
                return KVS_OK;
            }
        }
        rem = v.u.i % d;
        *res = name[0] == 'o' ? rem != 0 : rem == 0;
    } else if (kvs_jb_test_is(name, "sameas")) {
        if (a == NULL) {
            return kvs_jctx_fail(c, KVS_EINVAL, "sameas needs an argument");
        }
        *res = (t == KVS_JV_NONE && a->type == KVS_JV_NONE)
               || (t == KVS_JV_BOOL && a->type == KVS_JV_BOOL
                   && v.u.i == a->u.i)
               || ((t == KVS_JV_LIST || t == KVS_JV_DICT || t == KVS_JV_NS)
                   && a->type == t && a->u.list == v.u.list);
    } else if (kvs_jb_test_is(name, "in")) {
        if (a == NULL) {
            return kvs_jctx_fail(c, KVS_EINVAL, "in needs an argument");
        }
        if (a->type == KVS_JV_STR && t == KVS_JV_STR) {
            *res = v.u.s.n == 0
                   || memmem(a->u.s.p, a->u.s.n, v.u.s.p, v.u.s.n) != NULL;
        } else if (a->type == KVS_JV_LIST) {
            *res = 0;
            for (i = 0; i < a->u.list->n; i++) {
                *res |= kvs_jv_eq(&v, &a->u.list->v[i]);
            }
        } else if (a->type == KVS_JV_DICT) {
            *res = kvs_jdict_get(a->u.dict, v) != NULL;
        } else if (a->type == KVS_JV_UNDEF) {
            *res = 0;
        } else {
            return kvs_jctx_fail(c, KVS_EINVAL, "argument of type '%s' is "
                                 "not iterable", kvs_jv_type_name(a));
        }
    } else {
        /* comparisons */
        if (a == NULL) {
            return kvs_jctx_fail(c, KVS_EINVAL, "test '%s' needs an argument",
                                 name);
        }
        if (kvs_jb_test_is(name, "eq") || kvs_jb_test_is(name, "equalto")) {
            *res = kvs_jv_eq(&v, a);
            return KVS_OK;
        }
        if (kvs_jb_test_is(name, "ne")) {
            *res = !kvs_jv_eq(&v, a);
            return KVS_OK;
        }
        if ((rc = kvs_jv_cmp(c, &v, a, &r)) != KVS_OK) {
            return rc;
        }
        if (kvs_jb_test_is(name, "lt") || kvs_jb_test_is(name, "lessthan")) {
            *res = r < 0;
        } else if (kvs_jb_test_is(name, "le")) {
            *res = r <= 0;
        } else if (kvs_jb_test_is(name, "gt")
                   || kvs_jb_test_is(name, "greaterthan"))
        {
            *res = r > 0;
        } else {
            *res = r >= 0;
        }
    }

    return KVS_OK;
}


/* --- calls ---------------------------------------------------------------- */

static int
kvs_jb_call_method(kvs_jctx_t *c, const kvs_jfunc_t *fn,
    const kvs_jargs_t *args, kvs_jv_t *res)
{
    const char      *m = fn->name;
    kvs_jv_t         self = fn->self, items, out, x;
    const kvs_jv_t  *a0 = kvs_jargs_get(args, 0, NULL);
    const kvs_jv_t  *a1 = kvs_jargs_get(args, 1, NULL);
    size_t           i;
    int              rc, r;

    if (self.type == KVS_JV_DICT) {
        const kvs_jdict_t  *d = self.u.dict;

        if (strcmp(m, "get") == 0) {
            kvs_jv_t  *v;

            if (a0 == NULL) {
                return kvs_jctx_fail(c, KVS_EINVAL, "get expected at least 1 "
                                     "argument");
            }
            v = kvs_jdict_get(d, *a0);
            *res = v ? *v : a1 ? *a1 : kvs_jv_none();
            return KVS_OK;
        }
        if (strcmp(m, "copy") == 0) {
            if ((rc = kvs_jv_dict_new(c, &out)) != KVS_OK) {
                return rc;
            }
            for (i = 0; i < d->n; i++) {
                if ((rc = kvs_jdict_set(c, out.u.dict, d->k[i], d->v[i]))
                    != KVS_OK)
                {
                    return rc;
                }
            }
            *res = out;
            return KVS_OK;
        }
        if (strcmp(m, "items") == 0) {
            kvs_jargs_t  none;

            memset(&none, 0, sizeof(none));
            rc = kvs_jb_filter(c, "items", self, &none, res);
            res->flag = KVS_JL_LIST;      /* a dict_items view has len() */
            return rc;
        }
        /* keys, values */
        if ((rc = kvs_jv_list_new(c, d->n, &out)) != KVS_OK) {
            return rc;
        }
        for (i = 0; i < d->n; i++) {
            out.u.list->v[i] = m[0] == 'k' ? d->k[i] : d->v[i];
        }
        out.u.list->n = d->n;
        *res = out;
        return KVS_OK;
    }

    if (self.type == KVS_JV_LIST) {
        if (strcmp(m, "copy") == 0) {
            kvs_jargs_t  none;

            memset(&none, 0, sizeof(none));
            return kvs_jb_filter(c, "list", self, &none, res);
        }
        if (a0 == NULL) {
            return kvs_jctx_fail(c, KVS_EINVAL, "%s needs an argument", m);
        }
        r = 0;
        for (i = 0; i < self.u.list->n; i++) {
            if (kvs_jv_eq(&self.u.list->v[i], a0)) {
                if (m[0] == 'i') {
                    *res = kvs_jv_int((int64_t) i);
                    return KVS_OK;
                }
                r++;
            }
        }
        if (m[0] == 'i') {
            return kvs_jctx_fail(c, KVS_EINVAL, "value is not in list");
        }
        *res = kvs_jv_int(r);
        return KVS_OK;
    }

    /* string methods */
    if (strcmp(m, "strip") == 0 || strcmp(m, "lstrip") == 0
        || strcmp(m, "rstrip") == 0)
    {
        return kvs_jb_strip(c, &self, a0, m[0] != 'r', m[0] != 'l', res);
    }
    if (strcmp(m, "upper") == 0 || strcmp(m, "lower") == 0
        || strcmp(m, "title") == 0 || strcmp(m, "capitalize") == 0)
    {
        return kvs_jb_case(c, &self, m[0], res);
    }
    if (strcmp(m, "startswith") == 0 || strcmp(m, "endswith") == 0) {
        const kvs_jv_t  *opts;
        size_t           n;

        if (a0 == NULL) {
            return kvs_jctx_fail(c, KVS_EINVAL, "%s needs an argument", m);
        }
        opts = a0;
        n = 1;
        if (a0->type == KVS_JV_LIST && a0->flag) {
            opts = a0->u.list->v;
            n = a0->u.list->n;
        }
        *res = kvs_jv_bool(0);
        for (i = 0; i < n; i++) {
            const kvs_jv_t  *o = &opts[i];

            if ((rc = kvs_jb_want_str(c, o, m)) != KVS_OK) {
                return rc;
            }
            if (o->u.s.n <= self.u.s.n
                && memcmp(m[0] == 's' ? self.u.s.p
                                      : self.u.s.p + self.u.s.n - o->u.s.n,
                          o->u.s.p, o->u.s.n) == 0)
            {
                *res = kvs_jv_bool(1);
            }
        }
        return KVS_OK;
    }
    if (strcmp(m, "split") == 0 || strcmp(m, "rsplit") == 0) {
        const kvs_jv_t  *sep = kvs_jargs_get(args, 0, "sep");
        const kvs_jv_t  *mx = kvs_jargs_get(args, 1, "maxsplit");

        return kvs_jb_split(c, &self, sep,
                            mx && mx->type == KVS_JV_INT ? mx->u.i : -1,
                            m[0] == 'r', res);
    }
    if (strcmp(m, "splitlines") == 0) {
        return kvs_jb_splitlines(c, self.u.s.p, self.u.s.n, res);
    }
    if (strcmp(m, "replace") == 0) {
        const kvs_jv_t  *cnt = kvs_jargs_get(args, 2, "count");

        if ((rc = kvs_jb_want_str(c, a0, m)) != KVS_OK
            || (rc = kvs_jb_want_str(c, a1, m)) != KVS_OK)
        {
            return rc;
        }
        return kvs_jb_replace(c, &self, a0, a1,
                              cnt && cnt->type == KVS_JV_INT ? cnt->u.i : -1,
                              res);
    }
    if (strcmp(m, "join") == 0) {
        if (a0 == NULL) {
            return kvs_jctx_fail(c, KVS_EINVAL, "join needs an argument");
        }
        if ((rc = kvs_je_iter(c, a0, &items)) != KVS_OK) {
            return rc;
        }
        {
            kvs_jsink_t  s;

            memset(&s, 0, sizeof(s));
            for (i = 0; i < items.u.list->n; i++) {
                x = items.u.list->v[i];
                if ((rc = kvs_jb_want_str(c, &x, "join")) != KVS_OK
                    || (i > 0 && (rc = kvs_jsink_put(c, &s, self.u.s.p,
                                                     self.u.s.n)) != KVS_OK)
                    || (rc = kvs_jsink_put(c, &s, x.u.s.p, x.u.s.n))
                       != KVS_OK)
                {
                    return rc;
                }
            }
            *res = kvs_jv_str(s.p, s.n);
        }
        return KVS_OK;
    }
    if (strcmp(m, "find") == 0 || strcmp(m, "count") == 0) {
        const char  *hit;
        size_t       off = 0;
        int64_t      k = 0;

        if ((rc = kvs_jb_want_str(c, a0, m)) != KVS_OK) {
            return rc;
        }
        if (m[0] == 'f') {
            hit = a0->u.s.n == 0 ? self.u.s.p
                  : memmem(self.u.s.p, self.u.s.n, a0->u.s.p, a0->u.s.n);
            *res = kvs_jv_int(hit == NULL ? -1
                              : (int64_t) kvs_jstr_len(self.u.s.p,
                                          (size_t) (hit - self.u.s.p)));
            return KVS_OK;
        }
        if (a0->u.s.n == 0) {
            *res = kvs_jv_int((int64_t) kvs_jstr_len(self.u.s.p, self.u.s.n)
                              + 1);
            return KVS_OK;
        }
        while ((hit = memmem(self.u.s.p + off, self.u.s.n - off, a0->u.s.p,
                             a0->u.s.n)) != NULL)
        {
            k++;
            off = (size_t) (hit - self.u.s.p) + a0->u.s.n;
        }
        *res = kvs_jv_int(k);
        return KVS_OK;
    }
    if (strncmp(m, "is", 2) == 0) {
        int  ok = self.u.s.n > 0, cased = 0;

        for (i = 0; i < self.u.s.n; i++) {
            unsigned char  ch = (unsigned char) self.u.s.p[i];
            int            lo = ch >= 'a' && ch <= 'z';
            int            up = ch >= 'A' && ch <= 'Z';
            int            dg = ch >= '0' && ch <= '9';

            cased |= lo || up;
            if (strcmp(m, "isdigit") == 0) {
                ok &= dg;
            } else if (strcmp(m, "isalpha") == 0) {
                ok &= lo || up;
            } else if (strcmp(m, "isalnum") == 0) {
                ok &= lo || up || dg;
            } else if (strcmp(m, "isspace") == 0) {
                ok &= kvs_jstr_space(ch);
            } else if (strcmp(m, "islower") == 0) {
                ok &= !up;
            } else {
                ok &= !lo;
            }
        }
        if (strcmp(m, "islower") == 0 || strcmp(m, "isupper") == 0) {
            ok = ok && cased;
        }
        *res = kvs_jv_bool(ok);
        return KVS_OK;
    }

    return kvs_jctx_fail(c, KVS_EUNSUPPORTED, "unsupported method '%s'", m);
}


static int
kvs_jb_strftime(kvs_jctx_t *c, const kvs_jargs_t *args, kvs_jv_t *res)
{
    const kvs_jv_t  *fmt = kvs_jargs_get(args, 0, NULL);
    char             f[256], buf[1024], *p;
    struct tm        tm;
    time_t           t = (time_t) c->opts->now;
    size_t           n;
    int              rc;

    if ((rc = kvs_jb_want_str(c, fmt, "strftime_now")) != KVS_OK) {
        return rc;
    }
    if (fmt->u.s.n >= sizeof(f) || memchr(fmt->u.s.p, 0, fmt->u.s.n)) {
        return kvs_jctx_fail(c, KVS_EUNSUPPORTED, "strftime_now format too "
                             "long");
    }
    memcpy(f, fmt->u.s.p, fmt->u.s.n);
    f[fmt->u.s.n] = '\0';
    if (gmtime_r(&t, &tm) == NULL) {
        return kvs_jctx_fail(c, KVS_EINVAL, "strftime_now: bad clock");
    }
    n = f[0] ? strftime(buf, sizeof(buf), f, &tm) : 0;
    if (n == 0 && f[0]) {
        return kvs_jctx_fail(c, KVS_ETOOLONG, "strftime_now output too long");
    }
    if ((p = kvs_jarena_dup(&c->arena, buf, n)) == NULL && n > 0) {
        return kvs_jctx_nomem(c);
    }
    *res = kvs_jv_str(p, n);

    return KVS_OK;
}


int
kvs_jb_call(kvs_jctx_t *c, const kvs_jfunc_t *fn, const kvs_jargs_t *args,
    kvs_jv_t *res)
{
    const kvs_jv_t  *a0 = kvs_jargs_get(args, 0, NULL);
    kvs_jv_t         out, msg;
    int64_t          start = 0, stop, step = 1, i;
    size_t           k;
    int              rc;

    switch (fn->kind) {
    case KVS_JF_RAISE:
        msg = a0 ? *a0 : kvs_jv_str("", 0);
        if ((rc = kvs_jb_str_arg(c, &msg)) != KVS_OK) {
            return rc;
        }
        if (c->e.code == KVS_OK) {
            /* the template's own words, as jinja2's TemplateError has */
            kvs_err_set(&c->e, KVS_EINVAL, "%.*s",
                        (int) (msg.u.s.n > KVS_ERR_MSG_LEN
                               ? KVS_ERR_MSG_LEN : msg.u.s.n), msg.u.s.p);
        }
        return KVS_EINVAL;

    case KVS_JF_STRFTIME:
        return kvs_jb_strftime(c, args, res);

    case KVS_JF_RANGE:
        for (k = 0; k < args->npos; k++) {
            if (args->pos[k].type != KVS_JV_INT
                && args->pos[k].type != KVS_JV_BOOL)
            {
                return kvs_jctx_fail(c, KVS_EINVAL, "range() needs ints");
            }
        }
        if (args->npos == 1) {
            stop = args->pos[0].u.i;
        } else if (args->npos == 2 || args->npos == 3) {
            start = args->pos[0].u.i;
            stop = args->pos[1].u.i;
            if (args->npos == 3) {
                step = args->pos[2].u.i;
            }
        } else {
            return kvs_jctx_fail(c, KVS_EINVAL, "range() takes 1 to 3 "
                                 "arguments");
        }
        if (step == 0) {
            return kvs_jctx_fail(c, KVS_EINVAL, "range() arg 3 must not be "
                                 "zero");
        }
        if ((rc = kvs_jv_list_new(c, 0, &out)) != KVS_OK) {
            return rc;
        }
        for (i = start; step > 0 ? i < stop : i > stop; ) {
            if ((rc = kvs_jctx_step(c)) != KVS_OK
                || (rc = kvs_jlist_push(c, out.u.list, kvs_jv_int(i)))
                   != KVS_OK)
            {
                return rc;
            }
            if (__builtin_add_overflow(i, step, &i)) {
                break;
            }
        }
        *res = out;
        return KVS_OK;

    case KVS_JF_NAMESPACE:
    case KVS_JF_DICT:
        if ((rc = kvs_jv_dict_new(c, &out)) != KVS_OK) {
            return rc;
        }
        if (a0 != NULL) {
            if (a0->type != KVS_JV_DICT || args->npos > 1) {
                return kvs_jctx_fail(c, KVS_EINVAL, "%s() takes a mapping and "
                                     "keywords", fn->name);
            }
            for (k = 0; k < a0->u.dict->n; k++) {
                rc = kvs_jdict_set(c, out.u.dict, a0->u.dict->k[k],
                                   a0->u.dict->v[k]);
                if (rc != KVS_OK) {
                    return rc;
                }
            }
        }
        for (k = 0; k < args->nkw; k++) {
            rc = kvs_jdict_set(c, out.u.dict,
                               kvs_jv_str(args->kwn[k], strlen(args->kwn[k])),
                               args->kwv[k]);
            if (rc != KVS_OK) {
                return rc;
            }
        }
        if (fn->kind == KVS_JF_NAMESPACE) {
            out.type = KVS_JV_NS;
        }
        *res = out;
        return KVS_OK;

    default:
        return kvs_jb_call_method(c, fn, args, res);
    }
}
