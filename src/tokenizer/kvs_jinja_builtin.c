/*
 * kvs_jinja_builtin: the filters, tests, globals and methods a chat
 * template may use, with jinja2's (and Python's) meaning.
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


static int
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


/* --- string helpers------------------------------------------------------- */

static int
kvs_jb_case(kvs_jctx_t *c, const kvs_jv_t *v, int how, kvs_jv_t *res)
{
    char    *p;
    size_t   i;
    int      start = 1, first = 1;

    p = kvs_jarena_dup(&c->arena, v->u.s.p, v->u.s.n);
    if (p == NULL && v->u.s.n > 0) {
        return kvs_jctx_nomem(c);
    }
    for (i = 0; i < v->u.s.n; i++) {
        char  ch = p[i];
        int   alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');

        switch (how) {
        case 'u':
            if (ch >= 'a' && ch <= 'z') {
                p[i] = (char) (ch - 32);
            }
            break;
        case 'l':
            if (ch >= 'A' && ch <= 'Z') {
                p[i] = (char) (ch + 32);
            }
            break;
        case 'c':                     /* str.capitalize */
            if (first && ch >= 'a' && ch <= 'z') {
                p[i] = (char) (ch - 32);
            } else if (!first && ch >= 'A' && ch <= 'Z') {
                p[i] = (char) (ch + 32);
            }
            break;
        case 't':                     /* str.title */
            if (start && ch >= 'a' && ch <= 'z') {
                p[i] = (char) (ch - 32);
            } else if (!start && ch >= 'A' && ch <= 'Z') {
                p[i] = (char) (ch + 32);
            }
            start = !alpha && ((uint8_t) ch < 0x80);
            break;
        }
        if (((uint8_t) ch & 0xc0) != 0x80) {
            first = 0;
        }
    }
    *res = kvs_jv_str(p, v->u.s.n);

    return KVS_OK;
}


/* jinja2's title filter: words begin after "-", whitespace, or ([{< */
static int
kvs_jb_title_filter(kvs_jctx_t *c, const kvs_jv_t *v, kvs_jv_t *res)
{
    char    *p;
    size_t   i;
    int      start = 1;

    p = kvs_jarena_dup(&c->arena, v->u.s.p, v->u.s.n);
    if (p == NULL && v->u.s.n > 0) {
        return kvs_jctx_nomem(c);
    }
    for (i = 0; i < v->u.s.n; i++) {
        char  ch = p[i];
        int   sep = ch == '-' || ch == ' ' || ch == '\t' || ch == '\n'
                    || ch == '\r' || ch == '\f' || ch == '\v' || ch == '('
                    || ch == '{' || ch == '[' || ch == '<';

        if (start && !sep && ch >= 'a' && ch <= 'z') {
            p[i] = (char) (ch - 32);
        } else if (!start && ch >= 'A' && ch <= 'Z') {
            p[i] = (char) (ch + 32);
        }
        if (sep) {
            start = 1;
        } else if (((uint8_t) ch & 0xc0) != 0x80 || start) {
            start = 0;
        }
    }
    *res = kvs_jv_str(p, v->u.s.n);

    return KVS_OK;
}


static int
kvs_jb_strip(kvs_jctx_t *c, const kvs_jv_t *v, const kvs_jv_t *chars,
    int left, int right, kvs_jv_t *res)
{
    const char  *cp = NULL;
    size_t       cn = 0, a = 0, b;
    int          rc;

    if (chars != NULL && chars->type != KVS_JV_NONE) {
        if ((rc = kvs_jb_want_str(c, chars, "strip")) != KVS_OK) {
            return rc;
        }
        cp = chars->u.s.p;
        cn = chars->u.s.n;
    }
    b = v->u.s.n;
    if (left) {
        a = kvs_jstr_lspan(v->u.s.p, b, cp, cn);
    }
    if (right && a < b) {
        b -= kvs_jstr_rspan(v->u.s.p + a, b - a, cp, cn);
    }
    *res = kvs_jv_str(v->u.s.p + a, b - a);

    return KVS_OK;
}


static int
kvs_jb_replace(kvs_jctx_t *c, const kvs_jv_t *s, const kvs_jv_t *old,
    const kvs_jv_t *new, int64_t count, kvs_jv_t *res)
{
    kvs_jsink_t   out;
    const char   *p = s->u.s.p, *hit;
    size_t        n = s->u.s.n, i = 0, k;
    int           rc;

    memset(&out, 0, sizeof(out));
    if (old->u.s.n == 0) {
        /* Python inserts new between every character */
        for (i = 0; i <= n; i += k) {
            if (count >= 0 && count-- == 0) {
                rc = kvs_jsink_put(c, &out, p + i, n - i);
                if (rc != KVS_OK) {
                    return rc;
                }
                break;
            }
            if ((rc = kvs_jctx_step(c)) != KVS_OK
                || (rc = kvs_jsink_put(c, &out, new->u.s.p, new->u.s.n))
                   != KVS_OK)
            {
                return rc;
            }
            if (i == n) {
                break;
            }
            k = kvs_jstr_off(p + i, n - i, 1);
            if ((rc = kvs_jsink_put(c, &out, p + i, k)) != KVS_OK) {
                return rc;
            }
        }
        *res = kvs_jv_str(out.p, out.n);
        return KVS_OK;
    }

    while (i <= n && count != 0
           && (hit = memmem(p + i, n - i, old->u.s.p, old->u.s.n)) != NULL)
    {
        k = (size_t) (hit - (p + i));
        if ((rc = kvs_jctx_step(c)) != KVS_OK
            || (rc = kvs_jsink_put(c, &out, p + i, k)) != KVS_OK
            || (rc = kvs_jsink_put(c, &out, new->u.s.p, new->u.s.n))
               != KVS_OK)
        {
            return rc;
        }
        i += k + old->u.s.n;
        if (count > 0) {
            count--;
        }
    }
    if ((rc = kvs_jsink_put(c, &out, p + i, n - i)) != KVS_OK) {
        return rc;
    }
    *res = kvs_jv_str(out.p, out.n);

    return KVS_OK;
}


/* str.split / rsplit (sep NULL: runs of whitespace) */
static int
kvs_jb_split(kvs_jctx_t *c, const kvs_jv_t *s, const kvs_jv_t *sep,
    int64_t maxsplit, int from_right, kvs_jv_t *res)
{
    const char  *p = s->u.s.p, *hit;
    size_t       n = s->u.s.n, i, j, w;
    kvs_jv_t     out, tmp;
    int          rc;

    if ((rc = kvs_jv_list_new(c, 0, &out)) != KVS_OK) {
        return rc;
    }

    if (sep == NULL || sep->type == KVS_JV_NONE) {
        if (from_right && maxsplit >= 0) {
            /* rare: split all, then join the head back */
            return kvs_jctx_fail(c, KVS_EUNSUPPORTED, "rsplit() with a limit "
                                 "and no separator is not supported");
        }
        i = 0;
        for ( ;; ) {
            i += kvs_jstr_lspan(p + i, n - i, NULL, 0);
            if (i >= n) {
                break;
            }
            if (maxsplit == 0) {
                w = kvs_jstr_rspan(p + i, n - i, NULL, 0);
                rc = kvs_jlist_push(c, out.u.list,
                                    kvs_jv_str(p + i, n - i - w));
                if (rc != KVS_OK) {
                    return rc;
                }
                break;
            }
            for (j = i; j < n; j += kvs_jstr_off(p + j, n - j, 1)) {
                if (kvs_jstr_lspan(p + j, n - j, NULL, 0) > 0) {
                    break;
                }
            }
            if ((rc = kvs_jctx_step(c)) != KVS_OK
                || (rc = kvs_jlist_push(c, out.u.list,
                                        kvs_jv_str(p + i, j - i))) != KVS_OK)
            {
                return rc;
            }
            if (maxsplit > 0) {
                maxsplit--;
            }
            i = j;
        }
        *res = out;
        return KVS_OK;
    }

    if ((rc = kvs_jb_want_str(c, sep, "split")) != KVS_OK) {
        return rc;
    }
    if (sep->u.s.n == 0) {
        return kvs_jctx_fail(c, KVS_EINVAL, "empty separator");
    }

    if (from_right) {
        /* collect from the end, then reverse */
        size_t  end = n;

        while (maxsplit != 0) {
            const char  *last = NULL;
            size_t       k = 0;

            while (k + sep->u.s.n <= end
                   && (hit = memmem(p + k, end - k, sep->u.s.p, sep->u.s.n))
                      != NULL)
            {
                last = hit;
                k = (size_t) (hit - p) + 1;
                if ((rc = kvs_jctx_step(c)) != KVS_OK) {
                    return rc;
                }
            }
            if (last == NULL || (size_t) (last - p) + sep->u.s.n > end) {
                break;
            }
            j = (size_t) (last - p);
            if ((rc = kvs_jlist_push(c, out.u.list,
                                     kvs_jv_str(p + j + sep->u.s.n,
                                                end - j - sep->u.s.n)))
                != KVS_OK)
            {
                return rc;
            }
            end = j;
            if (maxsplit > 0) {
                maxsplit--;
            }
        }
        if ((rc = kvs_jlist_push(c, out.u.list, kvs_jv_str(p, end)))
            != KVS_OK)
        {
            return rc;
        }
        for (i = 0, j = out.u.list->n - 1; i < j; i++, j--) {
            tmp = out.u.list->v[i];
            out.u.list->v[i] = out.u.list->v[j];
            out.u.list->v[j] = tmp;
        }
        *res = out;
        return KVS_OK;
    }

    i = 0;
    while (maxsplit != 0
           && (hit = memmem(p + i, n - i, sep->u.s.p, sep->u.s.n)) != NULL)
    {
        j = (size_t) (hit - p);
        if ((rc = kvs_jctx_step(c)) != KVS_OK
            || (rc = kvs_jlist_push(c, out.u.list, kvs_jv_str(p + i, j - i)))
               != KVS_OK)
        {
            return rc;
        }
        i = j + sep->u.s.n;
        if (maxsplit > 0) {
            maxsplit--;
        }
    }
    if ((rc = kvs_jlist_push(c, out.u.list, kvs_jv_str(p + i, n - i)))
        != KVS_OK)
    {
        return rc;
    }
    *res = out;

    return KVS_OK;
}


/* the line breaks of str.splitlines(): bytes of the break at p, or 0 */
static size_t
kvs_jb_linebreak(const char *p, size_t n)
{
    uint8_t  b = (uint8_t) p[0];

    if (b == '\r') {
        return n > 1 && p[1] == '\n' ? 2 : 1;
    }
    if (b == '\n' || b == 0x0b || b == 0x0c || (b >= 0x1c && b <= 0x1e)) {
        return 1;
    }
    if (b == 0xc2 && n > 1 && (uint8_t) p[1] == 0x85) {
        return 2;
    }
    if (b == 0xe2 && n > 2 && (uint8_t) p[1] == 0x80
        && ((uint8_t) p[2] == 0xa8 || (uint8_t) p[2] == 0xa9))
    {
        return 3;
    }

    return 0;
}


static int
kvs_jb_splitlines(kvs_jctx_t *c, const char *p, size_t n, kvs_jv_t *res)
{
    kvs_jv_t  out;
    size_t    i = 0, start = 0, k;
    int       rc;

    if ((rc = kvs_jv_list_new(c, 0, &out)) != KVS_OK) {
        return rc;
    }
    while (i < n) {
        k = kvs_jb_linebreak(p + i, n - i);
        if (k == 0) {
            i++;
            continue;
        }
        if ((rc = kvs_jctx_step(c)) != KVS_OK
            || (rc = kvs_jlist_push(c, out.u.list,
                                    kvs_jv_str(p + start, i - start)))
               != KVS_OK)
        {
            return rc;
        }
        i += k;
        start = i;
    }
    if (start < n
        && (rc = kvs_jlist_push(c, out.u.list,
                                kvs_jv_str(p + start, n - start))) != KVS_OK)
    {
        return rc;
    }
    *res = out;

    return KVS_OK;
}


/* jinja2's indent filter */
static int
kvs_jb_indent(kvs_jctx_t *c, const kvs_jv_t *s, const kvs_jargs_t *args,
    kvs_jv_t *res)
{
    const kvs_jv_t  *w = kvs_jargs_get(args, 0, "width");
    const kvs_jv_t  *first = kvs_jargs_get(args, 1, "first");
    const kvs_jv_t  *blank = kvs_jargs_get(args, 2, "blank");
    kvs_jsink_t      ind, out;
    kvs_jv_t         lines, text;
    size_t           i;
    int64_t          k, width = 4;
    int              rc;

    memset(&ind, 0, sizeof(ind));
    memset(&out, 0, sizeof(out));
    if (w != NULL && w->type == KVS_JV_STR) {
        if ((rc = kvs_jsink_put(c, &ind, w->u.s.p, w->u.s.n)) != KVS_OK) {
            return rc;
        }
    } else {
        if (w != NULL) {
            if (w->type != KVS_JV_INT && w->type != KVS_JV_BOOL) {
                return kvs_jctx_fail(c, KVS_EINVAL, "indent width must be an "
                                     "int or a string");
            }
            width = w->u.i;
        }
        if (width > 4096) {
            return kvs_jctx_fail(c, KVS_ETOOLONG, "indent width too large");
        }
        for (k = 0; k < width; k++) {
            if ((rc = kvs_jsink_put(c, &ind, " ", 1)) != KVS_OK) {
                return rc;
            }
        }
    }

    /* s += "\n" first, as jinja2 does, for splitlines */
    if ((rc = kvs_jsink_put(c, &out, s->u.s.p, s->u.s.n)) != KVS_OK
        || (rc = kvs_jsink_put(c, &out, "\n", 1)) != KVS_OK
        || (rc = kvs_jb_splitlines(c, out.p, out.n, &lines)) != KVS_OK)
    {
        return rc;
    }
    memset(&out, 0, sizeof(out));

    if (first != NULL && kvs_jv_truthy(first)
        && (rc = kvs_jsink_put(c, &out, ind.p, ind.n)) != KVS_OK)
    {
        return rc;
    }
    for (i = 0; i < lines.u.list->n; i++) {
        text = lines.u.list->v[i];
        if ((rc = kvs_jctx_step(c)) != KVS_OK) {
            return rc;
        }
        if (i > 0) {
            if ((rc = kvs_jsink_put(c, &out, "\n", 1)) != KVS_OK) {
                return rc;
            }
            if ((text.u.s.n > 0 || (blank != NULL && kvs_jv_truthy(blank)))
                && (rc = kvs_jsink_put(c, &out, ind.p, ind.n)) != KVS_OK)
            {
                return rc;
            }
        }
        if ((rc = kvs_jsink_put(c, &out, text.u.s.p, text.u.s.n)) != KVS_OK)
        {
            return rc;
        }
    }
    *res = kvs_jv_str(out.p, out.n);

    return KVS_OK;
}


static int
kvs_jb_escape(kvs_jctx_t *c, const kvs_jv_t *s, kvs_jv_t *res)
{
    kvs_jsink_t  out;
    int          rc;

    if (s->flag) {
        *res = *s;
        return KVS_OK;
    }
    memset(&out, 0, sizeof(out));
    if ((rc = kvs_jv_html_put(c, &out, s->u.s.p, s->u.s.n)) != KVS_OK) {
        return rc;
    }
    *res = kvs_jv_str(out.p, out.n);
    res->flag = 1;

    return KVS_OK;
}


/* --- tests---------------------------------------------------------------- */

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


/* --- filters-------------------------------------------------------------- */

/* item.attr for selectattr, map and friends: "a.b" and "0" walk down */
static int
kvs_jb_attr_path(kvs_jctx_t *c, const kvs_jv_t *item, const kvs_jv_t *path,
    kvs_jv_t *res)
{
    const char  *p, *dot, *end;
    kvs_jv_t     cur = *item, next, key;
    int          rc;

    if (path->type == KVS_JV_INT) {
        if (cur.type == KVS_JV_LIST && path->u.i >= 0
            && (size_t) path->u.i < cur.u.list->n)
        {
            *res = cur.u.list->v[path->u.i];
        } else {
            *res = kvs_jv_undef(NULL);
        }
        return KVS_OK;
    }
    if ((rc = kvs_jb_want_str(c, path, "attribute")) != KVS_OK) {
        return rc;
    }
    p = path->u.s.p;
    end = p + path->u.s.n;
    for ( ;; ) {
        dot = memchr(p, '.', (size_t) (end - p));
        if (dot == NULL) {
            dot = end;
        }
        key = kvs_jv_str(p, (size_t) (dot - p));
        if (cur.type == KVS_JV_LIST && dot > p && p[0] >= '0' && p[0] <= '9')
        {
            key = kvs_jv_int(strtoll(p, NULL, 10));
            if (key.u.i < (int64_t) cur.u.list->n) {
                next = cur.u.list->v[key.u.i];
            } else {
                next = kvs_jv_undef(NULL);
            }
        } else if (cur.type == KVS_JV_DICT) {
            kvs_jv_t  *v = kvs_jdict_get(cur.u.dict, key);

            next = v ? *v : kvs_jv_undef(NULL);
        } else if ((rc = kvs_je_getattr(c, &cur, key.u.s.p, key.u.s.n,
                                        &next)) != KVS_OK)
        {
            return rc;
        }
        cur = next;
        if (dot == end) {
            break;
        }
        p = dot + 1;
    }
    *res = cur;

    return KVS_OK;
}


/* select, reject, selectattr, rejectattr */
static int
kvs_jb_select(kvs_jctx_t *c, kvs_jv_t v, const kvs_jargs_t *args,
    int attr, int keep, kvs_jv_t *res)
{
    kvs_jv_t      items, out, x;
    kvs_jargs_t   targs;
    size_t        i, first = attr ? 1 : 0;
    const char   *test = NULL;
    int           rc, t;

    if (attr && args->npos < 1) {
        return kvs_jctx_fail(c, KVS_EINVAL, "selectattr needs an attribute");
    }
    if (args->npos > first) {
        if ((rc = kvs_jb_want_str(c, &args->pos[first], "test name"))
            != KVS_OK)
        {
            return rc;
        }
        test = kvs_jb_find(kvs_jb_tests, args->pos[first].u.s.p,
                           args->pos[first].u.s.n);
        if (test == NULL) {
            return kvs_jctx_fail(c, KVS_EUNSUPPORTED, "no test named '%.*s'",
                                 (int) (args->pos[first].u.s.n > 40
                                        ? 40 : args->pos[first].u.s.n),
                                 args->pos[first].u.s.p);
        }
    }
    memset(&targs, 0, sizeof(targs));
    if (args->npos > first + 1) {
        targs.pos = args->pos + first + 1;
        targs.npos = args->npos - first - 1;
    }

    /* jinja2 skips a false sequence (None too) without iterating it */
    if (!kvs_jv_truthy(&v)) {
        rc = kvs_jv_list_new(c, 0, res);
        res->flag = KVS_JL_GEN;
        return rc;
    }
    if ((rc = kvs_je_iter(c, &v, &items)) != KVS_OK
        || (rc = kvs_jv_list_new(c, 0, &out)) != KVS_OK)
    {
        return rc;
    }
    for (i = 0; i < items.u.list->n; i++) {
        if ((rc = kvs_jctx_step(c)) != KVS_OK) {
            return rc;
        }
        x = items.u.list->v[i];
        if (attr && (rc = kvs_jb_attr_path(c, &x, &args->pos[0], &x))
                    != KVS_OK)
        {
            return rc;
        }
        if (test != NULL) {
            if ((rc = kvs_jb_test(c, test, x, &targs, &t)) != KVS_OK) {
                return rc;
            }
        } else {
            t = kvs_jv_truthy(&x);
        }
        if (t == keep
            && (rc = kvs_jlist_push(c, out.u.list, items.u.list->v[i]))
               != KVS_OK)
        {
            return rc;
        }
    }
    *res = out;
    res->flag = KVS_JL_GEN;

    return KVS_OK;
}


static int
kvs_jb_sort_cmp(kvs_jctx_t *c, const kvs_jv_t *a, const kvs_jv_t *b,
    int *r)
{
    kvs_jv_t  la, lb;
    int       rc;

    if (a->type == KVS_JV_STR && b->type == KVS_JV_STR) {
        /* case-insensitive, as jinja2's sort and unique by default */
        if ((rc = kvs_jb_case(c, a, 'l', &la)) != KVS_OK
            || (rc = kvs_jb_case(c, b, 'l', &lb)) != KVS_OK)
        {
            return rc;
        }
        return kvs_jv_cmp(c, &la, &lb, r);
    }

    return kvs_jv_cmp(c, a, b, r);
}


static int
kvs_jb_tojson(kvs_jctx_t *c, kvs_jv_t v, const kvs_jargs_t *args,
    kvs_jv_t *res)
{
    const kvs_jv_t  *ea = kvs_jargs_get(args, 0, "ensure_ascii");
    const kvs_jv_t  *ind = kvs_jargs_get(args, 1, "indent");
    const kvs_jv_t  *sep = kvs_jargs_get(args, 2, "separators");
    const kvs_jv_t  *sk = kvs_jargs_get(args, 3, "sort_keys");
    const char      *item_sep = ", ", *key_sep = ": ", *indent = NULL;
    size_t           nindent = 0;
    kvs_jsink_t      s, is;
    char            *sp;
    int64_t          k;
    int              rc;

    if (ea != NULL && kvs_jv_truthy(ea)) {
        return kvs_jctx_fail(c, KVS_EUNSUPPORTED, "tojson(ensure_ascii=True) "
                             "is not supported");
    }
    memset(&is, 0, sizeof(is));
    if (ind != NULL && ind->type != KVS_JV_NONE) {
        if (ind->type == KVS_JV_STR) {
            indent = ind->u.s.p;
            nindent = ind->u.s.n;
        } else if (ind->type == KVS_JV_INT || ind->type == KVS_JV_BOOL) {
            if (ind->u.i > 4096) {
                return kvs_jctx_fail(c, KVS_ETOOLONG, "indent too large");
            }
            for (k = 0; k < ind->u.i; k++) {
                if ((rc = kvs_jsink_put(c, &is, " ", 1)) != KVS_OK) {
                    return rc;
                }
            }
            indent = is.p ? is.p : "";
            nindent = is.n;
        } else {
            return kvs_jctx_fail(c, KVS_EINVAL, "indent must be an int or a "
                                 "string");
        }
        item_sep = ",";
    }
    if (sep != NULL && sep->type != KVS_JV_NONE) {
        if (sep->type != KVS_JV_LIST || sep->u.list->n != 2
            || sep->u.list->v[0].type != KVS_JV_STR
            || sep->u.list->v[1].type != KVS_JV_STR)
        {
            return kvs_jctx_fail(c, KVS_EINVAL, "separators must be two "
                                 "strings");
        }
        /* NUL-terminated copies */
        sp = kvs_jarena_alloc(&c->arena, sep->u.list->v[0].u.s.n
                                         + sep->u.list->v[1].u.s.n + 2);
        if (sp == NULL) {
            return kvs_jctx_nomem(c);
        }
        memcpy(sp, sep->u.list->v[0].u.s.p, sep->u.list->v[0].u.s.n);
        sp[sep->u.list->v[0].u.s.n] = '\0';
        item_sep = sp;
        sp += sep->u.list->v[0].u.s.n + 1;
        memcpy(sp, sep->u.list->v[1].u.s.p, sep->u.list->v[1].u.s.n);
        sp[sep->u.list->v[1].u.s.n] = '\0';
        key_sep = sp;
    }

    memset(&s, 0, sizeof(s));
    rc = kvs_jv_json_put(c, &s, &v, indent, nindent, item_sep, key_sep,
                         sk != NULL && kvs_jv_truthy(sk), 0);
    if (rc != KVS_OK) {
        return rc;
    }
    *res = kvs_jv_str(s.p, s.n);

    return KVS_OK;
}


static int
kvs_jb_str_arg(kvs_jctx_t *c, kvs_jv_t *v)
{
    if (v->type == KVS_JV_STR) {
        return KVS_OK;
    }
    if (v->type == KVS_JV_UNDEF) {
        *v = kvs_jv_str("", 0);
        return KVS_OK;
    }

    return kvs_jv_to_str(c, v, v);
}


int
kvs_jb_filter(kvs_jctx_t *c, const char *name, kvs_jv_t v,
    const kvs_jargs_t *args, kvs_jv_t *res)
{
    const kvs_jv_t  *a0 = kvs_jargs_get(args, 0, NULL);
    kvs_jv_t         items, out, x, pair, orig;
    kvs_jsink_t      s;
    size_t           i, j;
    int              rc, r, was_str;

    if (strcmp(name, "safe") == 0) {
        /* Markup(value): str(value), marked */
        if ((rc = kvs_jb_str_arg(c, &v)) != KVS_OK) {
            return rc;
        }
        *res = v;
        res->flag = 1;
        return KVS_OK;
    }

    if (strcmp(name, "default") == 0 || strcmp(name, "d") == 0) {
        const kvs_jv_t  *dv = kvs_jargs_get(args, 0, "default_value");
        const kvs_jv_t  *bo = kvs_jargs_get(args, 1, "boolean");

        if (v.type == KVS_JV_UNDEF
            || (bo != NULL && kvs_jv_truthy(bo) && !kvs_jv_truthy(&v)))
        {
            *res = dv ? *dv : kvs_jv_str("", 0);
        } else {
            *res = v;
        }
        return KVS_OK;
    }

    if (strcmp(name, "length") == 0 || strcmp(name, "count") == 0) {
        switch (v.type) {
        case KVS_JV_UNDEF:
            *res = kvs_jv_int(0);
            return KVS_OK;
        case KVS_JV_STR:
            *res = kvs_jv_int((int64_t) kvs_jstr_len(v.u.s.p, v.u.s.n));
            return KVS_OK;
        case KVS_JV_LIST:
            if (v.flag == KVS_JL_GEN) {
                break;
            }
            *res = kvs_jv_int((int64_t) v.u.list->n);
            return KVS_OK;
        case KVS_JV_DICT:
            *res = kvs_jv_int((int64_t) v.u.dict->n);
            return KVS_OK;
        case KVS_JV_LOOP:
            *res = kvs_jv_int(v.u.loop->length);
            return KVS_OK;
        default:
            break;
        }
        return kvs_jctx_fail(c, KVS_EINVAL, "object of type '%s' has no "
                             "len()", kvs_jv_type_name(&v));
    }

    if (strcmp(name, "tojson") == 0) {
        return kvs_jb_tojson(c, v, args, res);
    }

    if (strcmp(name, "items") == 0) {
        if (v.type == KVS_JV_UNDEF) {
            rc = kvs_jv_list_new(c, 0, res);
            res->flag = KVS_JL_GEN;
            return rc;
        }
        if (v.type != KVS_JV_DICT) {
            return kvs_jctx_fail(c, KVS_EINVAL, "Can only get item pairs "
                                 "from a mapping.");
        }
        goto items;
    }

    if (strcmp(name, "list") == 0) {
        if ((rc = kvs_je_iter(c, &v, &items)) != KVS_OK
            || (rc = kvs_jv_list_new(c, items.u.list->n, &out)) != KVS_OK)
        {
            return rc;
        }
        if (items.u.list->n > 0) {
            memcpy(out.u.list->v, items.u.list->v,
                   items.u.list->n * sizeof(kvs_jv_t));
        }
        out.u.list->n = items.u.list->n;
        *res = out;
        return KVS_OK;
    }

    if (strcmp(name, "join") == 0) {
        const kvs_jv_t  *sep = kvs_jargs_get(args, 0, "d");
        const kvs_jv_t  *attr = kvs_jargs_get(args, 1, "attribute");

        if (sep != NULL && (rc = kvs_jb_want_str(c, sep, "join")) != KVS_OK) {
            return rc;
        }
        if ((rc = kvs_je_iter(c, &v, &items)) != KVS_OK) {
            return rc;
        }
        memset(&s, 0, sizeof(s));
        for (i = 0; i < items.u.list->n; i++) {
            x = items.u.list->v[i];
            if (attr != NULL
                && (rc = kvs_jb_attr_path(c, &x, attr, &x)) != KVS_OK)
            {
                return rc;
            }
            if ((i > 0 && sep != NULL
                 && (rc = kvs_jsink_put(c, &s, sep->u.s.p, sep->u.s.n))
                    != KVS_OK)
                || (rc = kvs_jv_str_put(c, &s, &x)) != KVS_OK)
            {
                return rc;
            }
        }
        *res = kvs_jv_str(s.p, s.n);
        return KVS_OK;
    }

    if (strcmp(name, "select") == 0 || strcmp(name, "reject") == 0) {
        return kvs_jb_select(c, v, args, 0, name[0] == 's', res);
    }
    if (strcmp(name, "selectattr") == 0 || strcmp(name, "rejectattr") == 0) {
        return kvs_jb_select(c, v, args, 1, name[0] == 's', res);
    }

    if (strcmp(name, "map") == 0) {
        const kvs_jv_t  *attr = kvs_jargs_get(args, 99, "attribute");
        const kvs_jv_t  *dflt = kvs_jargs_get(args, 99, "default");
        kvs_jargs_t      fargs;

        if (!kvs_jv_truthy(&v)) {
            rc = kvs_jv_list_new(c, 0, res);
            res->flag = KVS_JL_GEN;
            return rc;
        }
        if ((rc = kvs_je_iter(c, &v, &items)) != KVS_OK
            || (rc = kvs_jv_list_new(c, 0, &out)) != KVS_OK)
        {
            return rc;
        }
        memset(&fargs, 0, sizeof(fargs));
        if (attr == NULL) {
            if (a0 == NULL || a0->type != KVS_JV_STR
                || !kvs_jb_has_filter(a0->u.s.p, a0->u.s.n))
            {
                return kvs_jctx_fail(c, KVS_EUNSUPPORTED, "map needs "
                                     "attribute= or a known filter name");
            }
            fargs.pos = args->pos + 1;
            fargs.npos = args->npos - 1;
        }
        for (i = 0; i < items.u.list->n; i++) {
            x = items.u.list->v[i];
            if ((rc = kvs_jctx_step(c)) != KVS_OK) {
                return rc;
            }
            if (attr != NULL) {
                if ((rc = kvs_jb_attr_path(c, &x, attr, &x)) != KVS_OK) {
                    return rc;
                }
                if (x.type == KVS_JV_UNDEF && dflt != NULL) {
                    x = *dflt;
                }
            } else {
                char  fname[32];

                snprintf(fname, sizeof(fname), "%.*s", (int) a0->u.s.n,
                         a0->u.s.p);
                if ((rc = kvs_jb_filter(c, fname, x, &fargs, &x)) != KVS_OK) {
                    return rc;
                }
            }
            if ((rc = kvs_jlist_push(c, out.u.list, x)) != KVS_OK) {
                return rc;
            }
        }
        *res = out;
        res->flag = KVS_JL_GEN;
        return KVS_OK;
    }

    if (strcmp(name, "unique") == 0) {
        if ((rc = kvs_je_iter(c, &v, &items)) != KVS_OK
            || (rc = kvs_jv_list_new(c, 0, &out)) != KVS_OK)
        {
            return rc;
        }
        for (i = 0; i < items.u.list->n; i++) {
            int  seen = 0;

            for (j = 0; j < out.u.list->n && !seen; j++) {
                if ((rc = kvs_jctx_step(c)) != KVS_OK) {
                    return rc;
                }
                if (items.u.list->v[i].type == KVS_JV_STR
                    && out.u.list->v[j].type == KVS_JV_STR)
                {
                    if ((rc = kvs_jb_sort_cmp(c, &items.u.list->v[i],
                                              &out.u.list->v[j], &r))
                        != KVS_OK)
                    {
                        return rc;
                    }
                    seen = r == 0;
                } else {
                    seen = kvs_jv_eq(&items.u.list->v[i], &out.u.list->v[j]);
                }
            }
            if (!seen
                && (rc = kvs_jlist_push(c, out.u.list, items.u.list->v[i]))
                   != KVS_OK)
            {
                return rc;
            }
        }
        *res = out;
        res->flag = KVS_JL_GEN;
        return KVS_OK;
    }

    if (strcmp(name, "first") == 0 || strcmp(name, "last") == 0) {
        if (name[0] == 'l' && v.type == KVS_JV_LIST && v.flag == KVS_JL_GEN)
        {
            return kvs_jctx_fail(c, KVS_EINVAL, "'generator' object is not "
                                 "reversible");
        }
        if ((rc = kvs_je_iter(c, &v, &items)) != KVS_OK) {
            return rc;
        }
        if (items.u.list->n == 0) {
            *res = kvs_jv_undef(NULL);
        } else {
            *res = items.u.list->v[name[0] == 'f' ? 0
                                                  : items.u.list->n - 1];
        }
        return KVS_OK;
    }

    if (strcmp(name, "reverse") == 0) {
        if (v.type == KVS_JV_STR) {
            if ((rc = kvs_je_iter(c, &v, &items)) != KVS_OK) {
                return rc;
            }
            memset(&s, 0, sizeof(s));
            for (i = items.u.list->n; i > 0; i--) {
                rc = kvs_jsink_put(c, &s, items.u.list->v[i - 1].u.s.p,
                                   items.u.list->v[i - 1].u.s.n);
                if (rc != KVS_OK) {
                    return rc;
                }
            }
            *res = kvs_jv_str(s.p, s.n);
            return KVS_OK;
        }
        if ((rc = kvs_je_iter(c, &v, &items)) != KVS_OK
            || (rc = kvs_jv_list_new(c, items.u.list->n, &out)) != KVS_OK)
        {
            return rc;
        }
        for (i = items.u.list->n; i > 0; i--) {
            out.u.list->v[out.u.list->n++] = items.u.list->v[i - 1];
        }
        *res = out;
        res->flag = KVS_JL_GEN;           /* reversed(): an iterator */
        return KVS_OK;
    }

    if (strcmp(name, "sort") == 0 || strcmp(name, "dictsort") == 0
        || strcmp(name, "max") == 0 || strcmp(name, "min") == 0)
    {
        int              dict = name[0] == 'd';
        const kvs_jv_t  *rev = kvs_jargs_get(args, dict ? 2 : 0, "reverse");
        const kvs_jv_t  *attr = kvs_jargs_get(args, dict ? 99 : 2,
                                              "attribute");
        kvs_jv_t         ka, kb;

        if (dict) {
            if (v.type != KVS_JV_DICT) {
                return kvs_jctx_fail(c, KVS_EINVAL, "dictsort needs a dict");
            }
            goto items;
        }
        if ((rc = kvs_je_iter(c, &v, &items)) != KVS_OK
            || (rc = kvs_jv_list_new(c, items.u.list->n, &out)) != KVS_OK)
        {
            return rc;
        }
        /* insertion sort (stable, as Python's) */
        for (i = 0; i < items.u.list->n; i++) {
            x = items.u.list->v[i];
            for (j = out.u.list->n; j > 0; j--) {
                ka = out.u.list->v[j - 1];
                kb = x;
                if (attr != NULL
                    && ((rc = kvs_jb_attr_path(c, &ka, attr, &ka)) != KVS_OK
                        || (rc = kvs_jb_attr_path(c, &kb, attr, &kb))
                           != KVS_OK))
                {
                    return rc;
                }
                if ((rc = kvs_jctx_step(c)) != KVS_OK
                    || (rc = kvs_jb_sort_cmp(c, &ka, &kb, &r)) != KVS_OK)
                {
                    return rc;
                }
                if (rev != NULL && kvs_jv_truthy(rev) ? r >= 0 : r <= 0) {
                    break;
                }
                out.u.list->v[j] = out.u.list->v[j - 1];
            }
            out.u.list->v[j] = x;
            out.u.list->n++;
        }
        if (name[0] == 'm') {
            if (out.u.list->n == 0) {
                *res = kvs_jv_undef(NULL);
            } else {
                *res = out.u.list->v[name[1] == 'i' ? 0 : out.u.list->n - 1];
            }
            return KVS_OK;
        }
        *res = out;
        return KVS_OK;
    }

    if (strcmp(name, "sum") == 0) {
        const kvs_jv_t  *attr = kvs_jargs_get(args, 0, "attribute");
        const kvs_jv_t  *start = kvs_jargs_get(args, 1, "start");
        kvs_jv_t         acc = start ? *start : kvs_jv_int(0);

        if ((rc = kvs_je_iter(c, &v, &items)) != KVS_OK) {
            return rc;
        }
        for (i = 0; i < items.u.list->n; i++) {
            x = items.u.list->v[i];
            if (attr != NULL
                && (rc = kvs_jb_attr_path(c, &x, attr, &x)) != KVS_OK)
            {
                return rc;
            }
            if (!kvs_jv_is_num(&x) || !kvs_jv_is_num(&acc)) {
                return kvs_jctx_fail(c, KVS_EINVAL, "sum of non-numbers");
            }
            if (x.type == KVS_JV_FLOAT || acc.type == KVS_JV_FLOAT) {
                acc = kvs_jv_float(kvs_jv_num(&acc) + kvs_jv_num(&x));
            } else if (__builtin_add_overflow(acc.u.i, x.u.i, &acc.u.i)) {
                return kvs_jctx_fail(c, KVS_ERANGE, "integer overflow");
            } else {
                acc.type = KVS_JV_INT;
            }
        }
        *res = acc;
        return KVS_OK;
    }

    if (strcmp(name, "attr") == 0) {
        if (a0 == NULL || a0->type != KVS_JV_STR) {
            return kvs_jctx_fail(c, KVS_EINVAL, "attr needs a name");
        }
        if (v.type == KVS_JV_UNDEF) {
            return kvs_je_getattr(c, &v, a0->u.s.p, a0->u.s.n, res);
        }
        if (v.type == KVS_JV_NS || v.type == KVS_JV_LOOP) {
            return kvs_je_getattr(c, &v, a0->u.s.p, a0->u.s.n, res);
        }
        /* attr() reaches attributes only, never dict keys */
        if (!kvs_jb_method(c, &v, a0->u.s.p, a0->u.s.n, res)) {
            *res = kvs_jv_undef(NULL);
        }
        return c->e.code;
    }

    if (strcmp(name, "int") == 0 || strcmp(name, "float") == 0
        || strcmp(name, "abs") == 0 || strcmp(name, "round") == 0)
    {
        const kvs_jv_t  *dflt = kvs_jargs_get(args, 0, "default");

        if (name[0] == 'a') {
            if (!kvs_jv_is_num(&v)) {
                return kvs_jctx_fail(c, KVS_EINVAL, "bad operand type for "
                                     "abs(): '%s'", kvs_jv_type_name(&v));
            }
            if (v.type == KVS_JV_FLOAT) {
                *res = kvs_jv_float(fabs(v.u.f));
            } else if (v.u.i == INT64_MIN) {
                return kvs_jctx_fail(c, KVS_ERANGE, "integer overflow");
            } else {
                *res = kvs_jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
            }
            return KVS_OK;
        }
        if (name[0] == 'r') {
            const kvs_jv_t  *prec = kvs_jargs_get(args, 0, "precision");
            double           m = 1, f;
            int64_t          p = prec ? prec->u.i : 0;

            if (!kvs_jv_is_num(&v) || p < 0 || p > 15) {
                return kvs_jctx_fail(c, KVS_EUNSUPPORTED, "round of this "
                                     "value is not supported");
            }
            while (p-- > 0) {
                m *= 10;
            }
            f = kvs_jv_num(&v) * m;
            f = (f < 0 ? -floor(-f + 0.5) : floor(f + 0.5)) / m;
            *res = kvs_jv_float(f);
            return KVS_OK;
        }
        if (name[0] == 'i') {
            if (v.type == KVS_JV_INT || v.type == KVS_JV_BOOL) {
                *res = kvs_jv_int(v.u.i);
                return KVS_OK;
            }
            if (v.type == KVS_JV_FLOAT && isfinite(v.u.f)
                && fabs(v.u.f) < 9.2e18)
            {
                *res = kvs_jv_int((int64_t) v.u.f);
                return KVS_OK;
            }
            if (v.type == KVS_JV_STR && v.u.s.n > 0 && v.u.s.n < 40) {
                char  buf[48], *end;
                long long  n;

                snprintf(buf, sizeof(buf), "%.*s", (int) v.u.s.n, v.u.s.p);
                n = strtoll(buf, &end, 10);
                if (*end == '\0') {
                    *res = kvs_jv_int(n);
                    return KVS_OK;
                }
            }
            *res = dflt ? *dflt : kvs_jv_int(0);
            return KVS_OK;
        }
        if (kvs_jv_is_num(&v)) {
            *res = kvs_jv_float(kvs_jv_num(&v));
            return KVS_OK;
        }
        if (v.type == KVS_JV_STR && v.u.s.n > 0 && v.u.s.n < 60) {
            char  buf[64], *end;
            double  f;

            snprintf(buf, sizeof(buf), "%.*s", (int) v.u.s.n, v.u.s.p);
            f = strtod(buf, &end);
            if (*end == '\0') {
                *res = kvs_jv_float(f);
                return KVS_OK;
            }
        }
        *res = dflt ? *dflt : kvs_jv_float(0);
        return KVS_OK;
    }

    /* the rest work on str(value) */
    orig = v;
    was_str = v.type == KVS_JV_STR;
    if ((rc = kvs_jb_str_arg(c, &v)) != KVS_OK) {
        return rc;
    }
    if (strcmp(name, "string") == 0) {
        *res = v;
        return KVS_OK;
    }
    if (strcmp(name, "trim") == 0) {
        return kvs_jb_strip(c, &v, kvs_jargs_get(args, 0, "chars"), 1, 1,
                            res);
    }
    if (strcmp(name, "upper") == 0) {
        return kvs_jb_case(c, &v, 'u', res);
    }
    if (strcmp(name, "lower") == 0) {
        return kvs_jb_case(c, &v, 'l', res);
    }
    if (strcmp(name, "capitalize") == 0) {
        return kvs_jb_case(c, &v, 'c', res);
    }
    if (strcmp(name, "title") == 0) {
        return kvs_jb_title_filter(c, &v, res);
    }
    if (strcmp(name, "indent") == 0) {
        if (!was_str) {
            /* jinja2 appends "\n" to the value itself: only str can */
            return kvs_jctx_fail(c, KVS_EINVAL, "indent needs a string, not "
                                 "%s", kvs_jv_type_name(&orig));
        }
        return kvs_jb_indent(c, &v, args, res);
    }
    if (strcmp(name, "e") == 0 || strcmp(name, "escape") == 0) {
        return kvs_jb_escape(c, &v, res);
    }
    if (strcmp(name, "replace") == 0) {
        const kvs_jv_t  *o = kvs_jargs_get(args, 0, "old");
        const kvs_jv_t  *nw = kvs_jargs_get(args, 1, "new");
        const kvs_jv_t  *cnt = kvs_jargs_get(args, 2, "count");
        kvs_jv_t         os, ns;

        if (o == NULL || nw == NULL) {
            return kvs_jctx_fail(c, KVS_EINVAL, "replace needs two "
                                 "arguments");
        }
        os = *o;
        ns = *nw;
        if ((rc = kvs_jb_str_arg(c, &os)) != KVS_OK
            || (rc = kvs_jb_str_arg(c, &ns)) != KVS_OK)
        {
            return rc;
        }
        return kvs_jb_replace(c, &v, &os, &ns,
                              cnt && cnt->type == KVS_JV_INT ? cnt->u.i : -1,
                              res);
    }

    return kvs_jctx_fail(c, KVS_EUNSUPPORTED, "unsupported filter '%s'",
                         name);

items:
    if ((rc = kvs_jv_list_new(c, v.u.dict->n, &out)) != KVS_OK) {
        return rc;
    }
    for (i = 0; i < v.u.dict->n; i++) {
        if ((rc = kvs_jv_list_new(c, 2, &pair)) != KVS_OK) {
            return rc;
        }
        pair.flag = 1;
        pair.u.list->v[0] = v.u.dict->k[i];
        pair.u.list->v[1] = v.u.dict->v[i];
        pair.u.list->n = 2;
        out.u.list->v[out.u.list->n++] = pair;
    }
    if (name[0] == 'i') {
        out.flag = KVS_JL_GEN;            /* do_items is a generator */
    }
    if (strcmp(name, "dictsort") == 0) {
        /* by key, case-insensitively */
        for (i = 1; i < out.u.list->n; i++) {
            x = out.u.list->v[i];
            for (j = i; j > 0; j--) {
                if ((rc = kvs_jctx_step(c)) != KVS_OK
                    || (rc = kvs_jb_sort_cmp(c,
                                             &out.u.list->v[j - 1].u.list->v[0],
                                             &x.u.list->v[0], &r)) != KVS_OK)
                {
                    return rc;
                }
                if (r <= 0) {
                    break;
                }
                out.u.list->v[j] = out.u.list->v[j - 1];
            }
            out.u.list->v[j] = x;
        }
    }
    *res = out;

    return KVS_OK;
}


/* --- calls---------------------------------------------------------------- */

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
