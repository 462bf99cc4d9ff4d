/*
 * kvs_jinja_filter: jinja2's filters as Hugging Face templates use them,
 * with Python's results: default, length, tojson (json.dumps as Hugging
 * Face sets it), items, list, join, select/reject(attr), map, unique,
 * first/last, reverse, sort, sum, attr, int/float/abs/round and the
 * string filters.  Like jinja2, select, reject, map, unique, items and
 * reverse give generators (KVS_JL_GEN): always true, without len().
 * Every filter name here is also in kvs_jinja_builtin.c's list, which
 * the parser checks.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_jinja_impl.h"


/* --- filters -------------------------------------------------------------- */

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
        test = kvs_jb_test_name(args->pos[first].u.s.p,
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


int
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
