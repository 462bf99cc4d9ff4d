/*
 * kvs_jinja_value: the interpreter's values, Python's semantics for them.
 *
 * Values mirror what a chat template sees in jinja2: JSON data become
 * None, bool, int, float, str, list and dict (keys in document order, as
 * Python's json keeps them), compared as Python compares them; printing
 * them is kvs_jinja_print.c's.  The arena that every render allocates
 * from is here too.  Strings are UTF-8 and never modified once made.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_utf8.h"
#include "kvs_jinja_impl.h"


/* --- arena ---------------------------------------------------------------- */

#define KVS_JBLK_SIZE     (64 * 1024)

/* deeper values (only a template's own loops can build them) are not
 * walked on the C stack: comparing them stops there, as not equal */
#define KVS_JV_MAX_DEPTH  4096

struct kvs_jblk_s {
    kvs_jblk_t  *next;
    size_t       used;
    size_t       cap;
    max_align_t  data[];
};


void *
kvs_jarena_alloc(kvs_jarena_t *a, size_t n)
{
    kvs_jblk_t  *b = a->head;
    size_t       need, cap;

    n = (n + 15) & ~(size_t) 15;
    if (n == 0) {
        n = 16;
    }

    if (b != NULL && b->cap - b->used >= n) {
        void  *p = (char *) b->data + b->used;

        b->used += n;
        return p;
    }

    need = n > KVS_JBLK_SIZE / 4 ? n : KVS_JBLK_SIZE;
    cap = need;
    if (n > SIZE_MAX / 2 || (a->limit && a->total + cap > a->limit)) {
        a->over = 1;
        return NULL;
    }
    b = malloc(sizeof(kvs_jblk_t) + cap);
    if (b == NULL) {
        a->over = 0;
        return NULL;
    }
    a->total += cap;
    b->cap = cap;
    b->used = n;

    /* a big one-off block goes behind the current one, which keeps its
     * free space */
    if (need != KVS_JBLK_SIZE && a->head != NULL) {
        b->next = a->head->next;
        a->head->next = b;
    } else {
        b->next = a->head;
        a->head = b;
    }

    return b->data;
}


void *
kvs_jarena_dup(kvs_jarena_t *a, const void *p, size_t n)
{
    void  *q = kvs_jarena_alloc(a, n);

    if (q != NULL && n > 0) {
        memcpy(q, p, n);
    }

    return q;
}


void
kvs_jarena_free(kvs_jarena_t *a)
{
    kvs_jblk_t  *b, *next;

    for (b = a->head; b != NULL; b = next) {
        next = b->next;
        free(b);
    }
    a->head = NULL;
    a->total = 0;
}


/* --- constructors --------------------------------------------------------- */

kvs_jv_t
kvs_jv_undef(const char *name)
{
    kvs_jv_t  v;

    memset(&v, 0, sizeof(v));
    v.type = KVS_JV_UNDEF;
    v.u.s.p = name;
    v.u.s.n = name ? strlen(name) : 0;

    return v;
}


kvs_jv_t
kvs_jv_none(void)
{
    kvs_jv_t  v;

    memset(&v, 0, sizeof(v));
    v.type = KVS_JV_NONE;

    return v;
}


kvs_jv_t
kvs_jv_bool(int b)
{
    kvs_jv_t  v;

    memset(&v, 0, sizeof(v));
    v.type = KVS_JV_BOOL;
    v.u.i = b != 0;

    return v;
}


kvs_jv_t
kvs_jv_int(int64_t i)
{
    kvs_jv_t  v;

    memset(&v, 0, sizeof(v));
    v.type = KVS_JV_INT;
    v.u.i = i;

    return v;
}


kvs_jv_t
kvs_jv_float(double f)
{
    kvs_jv_t  v;

    memset(&v, 0, sizeof(v));
    v.type = KVS_JV_FLOAT;
    v.u.f = f;

    return v;
}


kvs_jv_t
kvs_jv_str(const char *p, size_t n)
{
    kvs_jv_t  v;

    memset(&v, 0, sizeof(v));
    v.type = KVS_JV_STR;
    v.u.s.p = p ? p : "";
    v.u.s.n = n;

    return v;
}


int
kvs_jv_list_new(kvs_jctx_t *c, size_t cap, kvs_jv_t *out)
{
    kvs_jlist_t  *l;

    l = kvs_jarena_alloc(&c->arena, sizeof(*l));
    if (l == NULL) {
        return kvs_jctx_nomem(c);
    }
    memset(l, 0, sizeof(*l));
    if (cap > 0) {
        if (cap > SIZE_MAX / sizeof(kvs_jv_t)
            || (l->v = kvs_jarena_alloc(&c->arena, cap * sizeof(kvs_jv_t)))
               == NULL)
        {
            return kvs_jctx_nomem(c);
        }
        l->cap = cap;
    }
    memset(out, 0, sizeof(*out));
    out->type = KVS_JV_LIST;
    out->u.list = l;

    return KVS_OK;
}


int
kvs_jv_dict_new(kvs_jctx_t *c, kvs_jv_t *out)
{
    kvs_jdict_t  *d;

    d = kvs_jarena_alloc(&c->arena, sizeof(*d));
    if (d == NULL) {
        return kvs_jctx_nomem(c);
    }
    memset(d, 0, sizeof(*d));
    memset(out, 0, sizeof(*out));
    out->type = KVS_JV_DICT;
    out->u.dict = d;

    return KVS_OK;
}


int
kvs_jlist_push(kvs_jctx_t *c, kvs_jlist_t *l, kvs_jv_t v)
{
    kvs_jv_t  *nv;
    size_t     cap;

    if (l->n == l->cap) {
        cap = l->cap ? l->cap * 2 : 8;
        nv = kvs_jarena_alloc(&c->arena, cap * sizeof(kvs_jv_t));
        if (nv == NULL) {
            return kvs_jctx_nomem(c);
        }
        if (l->n) {
            memcpy(nv, l->v, l->n * sizeof(kvs_jv_t));
        }
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;

    return KVS_OK;
}


kvs_jv_t *
kvs_jdict_get(const kvs_jdict_t *d, kvs_jv_t k)
{
    size_t  i;

    for (i = 0; i < d->n; i++) {
        if (kvs_jv_eq(&d->k[i], &k)) {
            return &d->v[i];
        }
    }

    return NULL;
}


kvs_jv_t *
kvs_jdict_gets(const kvs_jdict_t *d, const char *p, size_t n)
{
    size_t  i;

    for (i = 0; i < d->n; i++) {
        if (d->k[i].type == KVS_JV_STR && d->k[i].u.s.n == n
            && memcmp(d->k[i].u.s.p, p, n) == 0)
        {
            return &d->v[i];
        }
    }

    return NULL;
}


int
kvs_jdict_set(kvs_jctx_t *c, kvs_jdict_t *d, kvs_jv_t k, kvs_jv_t v)
{
    kvs_jv_t  *slot, *nk, *nv;
    size_t     cap;

    if ((slot = kvs_jdict_get(d, k)) != NULL) {
        *slot = v;
        return KVS_OK;
    }
    if (d->n == d->cap) {
        cap = d->cap ? d->cap * 2 : 8;
        nk = kvs_jarena_alloc(&c->arena, cap * sizeof(kvs_jv_t));
        nv = nk ? kvs_jarena_alloc(&c->arena, cap * sizeof(kvs_jv_t)) : NULL;
        if (nv == NULL) {
            return kvs_jctx_nomem(c);
        }
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(kvs_jv_t));
            memcpy(nv, d->v, d->n * sizeof(kvs_jv_t));
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;

    return KVS_OK;
}


static int
kvs_jv_from_json_d(kvs_jctx_t *c, const json_t *j, kvs_jv_t *out,
    unsigned depth);


int
kvs_jv_from_json(kvs_jctx_t *c, const json_t *j, kvs_jv_t *out)
{
    return kvs_jv_from_json_d(c, j, out, 0);
}


static int
kvs_jv_from_json_d(kvs_jctx_t *c, const json_t *j, kvs_jv_t *out,
    unsigned depth)
{
    kvs_jv_t     k, v;
    const char  *key;
    json_t      *val;
    size_t       i;
    int          rc;

    if ((rc = kvs_jctx_step(c)) != KVS_OK) {
        return rc;
    }
    if (depth > KVS_JV_MAX_DEPTH) {
        return kvs_jctx_fail(c, KVS_ETOOLONG, "context nested too deeply");
    }

    switch (json_typeof(j)) {
    case JSON_OBJECT:
        if ((rc = kvs_jv_dict_new(c, out)) != KVS_OK) {
            return rc;
        }
        json_object_foreach((json_t *) j, key, val) {
            k = kvs_jv_str(key, strlen(key));
            if ((rc = kvs_jv_from_json_d(c, val, &v, depth + 1))
                != KVS_OK
                || (rc = kvs_jdict_set(c, out->u.dict, k, v)) != KVS_OK)
            {
                return rc;
            }
        }
        return KVS_OK;

    case JSON_ARRAY:
        if ((rc = kvs_jv_list_new(c, json_array_size(j), out)) != KVS_OK) {
            return rc;
        }
        for (i = 0; i < json_array_size(j); i++) {
            if ((rc = kvs_jv_from_json_d(c, json_array_get(j, i), &v,
                                           depth + 1)) != KVS_OK
                || (rc = kvs_jlist_push(c, out->u.list, v)) != KVS_OK)
            {
                return rc;
            }
        }
        return KVS_OK;

    case JSON_STRING:
        *out = kvs_jv_str(json_string_value(j), json_string_length(j));
        return KVS_OK;

    case JSON_INTEGER:
        *out = kvs_jv_int(json_integer_value(j));
        return KVS_OK;

    case JSON_REAL:
        *out = kvs_jv_float(json_real_value(j));
        return KVS_OK;

    case JSON_TRUE:
        *out = kvs_jv_bool(1);
        return KVS_OK;

    case JSON_FALSE:
        *out = kvs_jv_bool(0);
        return KVS_OK;

    default:
        *out = kvs_jv_none();
        return KVS_OK;
    }
}


/* --- Python semantics ----------------------------------------------------- */

int
kvs_jv_truthy(const kvs_jv_t *v)
{
    switch (v->type) {
    case KVS_JV_UNDEF:
    case KVS_JV_NONE:
        return 0;
    case KVS_JV_BOOL:
    case KVS_JV_INT:
        return v->u.i != 0;
    case KVS_JV_FLOAT:
        return v->u.f != 0.0;
    case KVS_JV_STR:
        return v->u.s.n != 0;
    case KVS_JV_LIST:
        return v->flag == KVS_JL_GEN || v->u.list->n != 0;
    case KVS_JV_DICT:
        return v->u.dict->n != 0;
    default:
        return 1;
    }
}


int
kvs_jv_is_num(const kvs_jv_t *v)
{
    return v->type == KVS_JV_INT || v->type == KVS_JV_FLOAT
           || v->type == KVS_JV_BOOL;
}


double
kvs_jv_num(const kvs_jv_t *v)
{
    return v->type == KVS_JV_FLOAT ? v->u.f : (double) v->u.i;
}


static int
kvs_jv_eq_d(const kvs_jv_t *a, const kvs_jv_t *b, unsigned depth)
{
    size_t  i;

    if (depth > KVS_JV_MAX_DEPTH) {
        return 0;
    }

    if (kvs_jv_is_num(a) && kvs_jv_is_num(b)) {
        if (a->type != KVS_JV_FLOAT && b->type != KVS_JV_FLOAT) {
            return a->u.i == b->u.i;
        }
        return kvs_jv_num(a) == kvs_jv_num(b);
    }
    if (a->type != b->type) {
        return 0;
    }

    switch (a->type) {
    case KVS_JV_UNDEF:
    case KVS_JV_NONE:
        return 1;
    case KVS_JV_STR:
        return a->u.s.n == b->u.s.n
               && memcmp(a->u.s.p, b->u.s.p, a->u.s.n) == 0;
    case KVS_JV_LIST:
        if (a->flag != b->flag || a->u.list->n != b->u.list->n) {
            return 0;
        }
        for (i = 0; i < a->u.list->n; i++) {
            if (!kvs_jv_eq_d(&a->u.list->v[i], &b->u.list->v[i],
                             depth + 1))
            {
                return 0;
            }
        }
        return 1;
    case KVS_JV_DICT:
        if (a->u.dict->n != b->u.dict->n) {
            return 0;
        }
        for (i = 0; i < a->u.dict->n; i++) {
            kvs_jv_t  *o = kvs_jdict_get(b->u.dict, a->u.dict->k[i]);

            if (o == NULL || !kvs_jv_eq_d(&a->u.dict->v[i], o, depth + 1)) {
                return 0;
            }
        }
        return 1;
    case KVS_JV_NS:
        return a->u.dict == b->u.dict;
    case KVS_JV_LOOP:
        return a->u.loop == b->u.loop;
    case KVS_JV_MACRO:
        return a->u.macro == b->u.macro;
    default:
        return a->u.fn == b->u.fn;
    }
}


int
kvs_jv_eq(const kvs_jv_t *a, const kvs_jv_t *b)
{
    return kvs_jv_eq_d(a, b, 0);
}


static int
kvs_jv_cmp_d(kvs_jctx_t *c, const kvs_jv_t *a, const kvs_jv_t *b, int *r,
    unsigned depth)
{
    size_t  i, n;
    int     rc;

    if (kvs_jv_is_num(a) && kvs_jv_is_num(b)) {
        if (a->type != KVS_JV_FLOAT && b->type != KVS_JV_FLOAT) {
            *r = (a->u.i > b->u.i) - (a->u.i < b->u.i);
        } else {
            double  x = kvs_jv_num(a), y = kvs_jv_num(b);

            *r = (x > y) - (x < y);
        }
        return KVS_OK;
    }
    if (a->type == KVS_JV_STR && b->type == KVS_JV_STR) {
        n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
        rc = memcmp(a->u.s.p, b->u.s.p, n);
        *r = rc != 0 ? (rc > 0) - (rc < 0)
                     : (a->u.s.n > b->u.s.n) - (a->u.s.n < b->u.s.n);
        return KVS_OK;
    }
    if (a->type == KVS_JV_LIST && b->type == KVS_JV_LIST
        && a->flag == b->flag && a->flag != KVS_JL_GEN)
    {
        n = a->u.list->n < b->u.list->n ? a->u.list->n : b->u.list->n;
        for (i = 0; i < n; i++) {
            if (kvs_jv_eq(&a->u.list->v[i], &b->u.list->v[i])) {
                continue;
            }
            if (depth > KVS_JV_MAX_DEPTH) {
                return kvs_jctx_fail(c, KVS_ETOOLONG, "value nested too "
                                     "deeply");
            }
            return kvs_jv_cmp_d(c, &a->u.list->v[i], &b->u.list->v[i], r,
                                depth + 1);
        }
        *r = (a->u.list->n > b->u.list->n) - (a->u.list->n < b->u.list->n);
        return KVS_OK;
    }

    return kvs_jctx_fail(c, KVS_EINVAL, "cannot order %s and %s",
                         kvs_jv_type_name(a), kvs_jv_type_name(b));
}


int
kvs_jv_cmp(kvs_jctx_t *c, const kvs_jv_t *a, const kvs_jv_t *b, int *r)
{
    return kvs_jv_cmp_d(c, a, b, r, 0);
}


const char *
kvs_jv_type_name(const kvs_jv_t *v)
{
    switch (v->type) {
    case KVS_JV_UNDEF: return "undefined";
    case KVS_JV_NONE: return "NoneType";
    case KVS_JV_BOOL: return "bool";
    case KVS_JV_INT: return "int";
    case KVS_JV_FLOAT: return "float";
    case KVS_JV_STR: return "str";
    case KVS_JV_LIST:
        return v->flag == KVS_JL_TUPLE ? "tuple"
               : v->flag == KVS_JL_GEN ? "generator" : "list";
    case KVS_JV_DICT: return "dict";
    case KVS_JV_NS: return "Namespace";
    case KVS_JV_LOOP: return "LoopContext";
    case KVS_JV_MACRO: return "Macro";
    default: return "builtin_function_or_method";
    }
}


/* --- strings -------------------------------------------------------------- */

size_t
kvs_jstr_next(const char *p, size_t n, uint32_t *cp)
{
    size_t  k = kvs_utf8_next((const uint8_t *) p, n, cp);

    if (k == 0) {
        *cp = (uint8_t) p[0];
        k = 1;
    }

    return k;
}


size_t
kvs_jstr_len(const char *p, size_t n)
{
    size_t  i, k = 0;

    for (i = 0; i < n; i++) {
        k += ((uint8_t) p[i] & 0xc0) != 0x80;
    }

    return k;
}


size_t
kvs_jstr_off(const char *p, size_t n, size_t i)
{
    size_t  off = 0;

    while (i > 0 && off < n) {
        off++;
        while (off < n && ((uint8_t) p[off] & 0xc0) == 0x80) {
            off++;
        }
        i--;
    }

    return off;
}


int
kvs_jstr_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20)
           || cp == 0x85 || cp == 0xa0 || cp == 0x1680
           || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028
           || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}


static int
kvs_jstr_in(uint32_t cp, const char *chars, size_t nchars)
{
    size_t    i, k;
    uint32_t  c;

    if (chars == NULL) {
        return kvs_jstr_space(cp);
    }
    for (i = 0; i < nchars; i += k) {
        k = kvs_jstr_next(chars + i, nchars - i, &c);
        if (c == cp) {
            return 1;
        }
    }

    return 0;
}


size_t
kvs_jstr_lspan(const char *p, size_t n, const char *chars, size_t nchars)
{
    size_t    i = 0, k;
    uint32_t  cp;

    while (i < n) {
        k = kvs_jstr_next(p + i, n - i, &cp);
        if (!kvs_jstr_in(cp, chars, nchars)) {
            break;
        }
        i += k;
    }

    return i;
}


size_t
kvs_jstr_rspan(const char *p, size_t n, const char *chars, size_t nchars)
{
    size_t    end = n, start;
    uint32_t  cp;

    while (end > 0) {
        start = end - 1;
        while (start > 0 && ((uint8_t) p[start] & 0xc0) == 0x80
               && end - start < 4)
        {
            start--;
        }
        if (kvs_jstr_next(p + start, end - start, &cp) != end - start) {
            start = end - 1;
            cp = (uint8_t) p[start];
        }
        if (!kvs_jstr_in(cp, chars, nchars)) {
            break;
        }
        end = start;
    }

    return n - end;
}
