/*
 * kvs_jinja_ops: what expressions apply to values: attribute and item
 * access (dict keys, list and string items, loop attributes), slices,
 * iteration, arithmetic, comparison operators and membership, each with
 * Python's semantics where chat templates can tell (negative indexes,
 * floor division and modulo signs, string and list repetition).
 *
 * The sandbox holds here: an attribute is a dict key, a loop attribute
 * or a whitelisted method (kvs_jb_method); nothing else is reachable.
 */

#include <math.h>
#include <string.h>

#include "kvs_jinja_impl.h"

/* --- attribute and item access -------------------------------------------- */

static int
kvs_je_loop_attr(kvs_jctx_t *c, const kvs_jloop_t *l, const char *name,
    kvs_jv_t *res)
{
    int64_t  i = l->index0, n = l->length;

    (void) c;
    if (strcmp(name, "index") == 0) {
        *res = kvs_jv_int(i + 1);
    } else if (strcmp(name, "index0") == 0) {
        *res = kvs_jv_int(i);
    } else if (strcmp(name, "revindex") == 0) {
        *res = kvs_jv_int(n - i);
    } else if (strcmp(name, "revindex0") == 0) {
        *res = kvs_jv_int(n - i - 1);
    } else if (strcmp(name, "first") == 0) {
        *res = kvs_jv_bool(i == 0);
    } else if (strcmp(name, "last") == 0) {
        *res = kvs_jv_bool(i == n - 1);
    } else if (strcmp(name, "length") == 0) {
        *res = kvs_jv_int(n);
    } else if (strcmp(name, "depth") == 0) {
        *res = kvs_jv_int(1);
    } else if (strcmp(name, "depth0") == 0) {
        *res = kvs_jv_int(0);
    } else if (strcmp(name, "previtem") == 0) {
        *res = i > 0 ? l->items[i - 1] : kvs_jv_undef("previtem");
    } else if (strcmp(name, "nextitem") == 0) {
        *res = i + 1 < n ? l->items[i + 1] : kvs_jv_undef("nextitem");
    } else {
        *res = kvs_jv_undef(NULL);
    }

    return KVS_OK;
}


int
kvs_je_getattr(kvs_jctx_t *c, const kvs_jv_t *obj, const char *name,
    size_t n, kvs_jv_t *res)
{
    kvs_jv_t  *v;

    switch (obj->type) {
    case KVS_JV_UNDEF:
        return kvs_je_undefined(c, obj);

    case KVS_JV_DICT:
        if (kvs_jb_method(c, obj, name, n, res)) {
            return c->e.code;
        }
        v = kvs_jdict_gets(obj->u.dict, name, n);
        *res = v ? *v : kvs_jv_undef(NULL);
        return KVS_OK;

    case KVS_JV_NS:
        v = kvs_jdict_gets(obj->u.dict, name, n);
        *res = v ? *v : kvs_jv_undef(NULL);
        return KVS_OK;

    case KVS_JV_LOOP:
        return kvs_je_loop_attr(c, obj->u.loop, name, res);

    default:
        if (kvs_jb_method(c, obj, name, n, res)) {
            return c->e.code;
        }
        *res = kvs_jv_undef(NULL);
        return KVS_OK;
    }
}


int
kvs_je_getitem(kvs_jctx_t *c, const kvs_jv_t *obj, const kvs_jv_t *key,
    kvs_jv_t *res)
{
    kvs_jv_t  *v;
    int64_t    i, len;
    size_t     a, b;

    switch (obj->type) {
    case KVS_JV_UNDEF:
        return kvs_je_undefined(c, obj);

    case KVS_JV_DICT:
        if ((v = kvs_jdict_get(obj->u.dict, *key)) != NULL) {
            *res = *v;
            return KVS_OK;
        }
        break;

    case KVS_JV_LIST:
    case KVS_JV_STR:
        if ((key->type != KVS_JV_INT && key->type != KVS_JV_BOOL)
            || (obj->type == KVS_JV_LIST && obj->flag == KVS_JL_GEN))
        {
            break;
        }
        i = key->u.i;
        len = obj->type == KVS_JV_LIST
              ? (int64_t) obj->u.list->n
              : (int64_t) kvs_jstr_len(obj->u.s.p, obj->u.s.n);
        if (i < 0) {
            i += len;
        }
        if (i < 0 || i >= len) {
            *res = kvs_jv_undef(NULL);
            return KVS_OK;
        }
        if (obj->type == KVS_JV_LIST) {
            *res = obj->u.list->v[i];
        } else {
            a = kvs_jstr_off(obj->u.s.p, obj->u.s.n, (size_t) i);
            b = kvs_jstr_off(obj->u.s.p, obj->u.s.n, (size_t) i + 1);
            *res = kvs_jv_str(obj->u.s.p + a, b - a);
        }
        return KVS_OK;

    default:
        break;
    }

    if (key->type == KVS_JV_STR) {
        return kvs_je_getattr(c, obj, key->u.s.p, key->u.s.n, res);
    }
    *res = kvs_jv_undef(NULL);

    return KVS_OK;
}


int
kvs_je_iter(kvs_jctx_t *c, const kvs_jv_t *v, kvs_jv_t *list)
{
    size_t  i, n, a, b;
    int     rc;

    switch (v->type) {
    case KVS_JV_UNDEF:
        return kvs_jv_list_new(c, 0, list);

    case KVS_JV_LIST:
        *list = *v;
        list->flag = 0;
        return KVS_OK;

    case KVS_JV_DICT:
        if ((rc = kvs_jv_list_new(c, v->u.dict->n, list)) != KVS_OK) {
            return rc;
        }
        for (i = 0; i < v->u.dict->n; i++) {
            list->u.list->v[i] = v->u.dict->k[i];
        }
        list->u.list->n = v->u.dict->n;
        return KVS_OK;

    case KVS_JV_STR:
        n = kvs_jstr_len(v->u.s.p, v->u.s.n);
        if ((rc = kvs_jv_list_new(c, n, list)) != KVS_OK) {
            return rc;
        }
        for (i = 0, a = 0; i < n; i++, a = b) {
            b = kvs_jstr_off(v->u.s.p + a, v->u.s.n - a, 1) + a;
            list->u.list->v[i] = kvs_jv_str(v->u.s.p + a, b - a);
        }
        list->u.list->n = n;
        return KVS_OK;

    default:
        return kvs_jctx_fail(c, KVS_EINVAL, "'%s' object is not iterable",
                             kvs_jv_type_name(v));
    }
}


/* Python's slice of a list or string (by code points) */
int
kvs_je_slice(kvs_jctx_t *c, const kvs_jv_t *obj, const kvs_jv_t *parts,
    kvs_jv_t *res)
{
    int64_t      len, start, stop, step, i, k;
    kvs_jv_t     items, out;
    kvs_jsink_t  s;
    int          rc, j;
    int64_t      v[3];

    if (obj->type == KVS_JV_UNDEF) {
        return kvs_je_undefined(c, obj);
    }
    if ((obj->type != KVS_JV_LIST && obj->type != KVS_JV_STR)
        || (obj->type == KVS_JV_LIST && obj->flag == KVS_JL_GEN))
    {
        *res = kvs_jv_undef(NULL);
        return KVS_OK;
    }
    for (j = 0; j < 3; j++) {
        if (parts[j].type == KVS_JV_NONE) {
            continue;
        }
        if (parts[j].type != KVS_JV_INT && parts[j].type != KVS_JV_BOOL) {
            return kvs_jctx_fail(c, KVS_EINVAL, "slice indices must be "
                                 "integers or None");
        }
        v[j] = parts[j].u.i;
    }

    if ((rc = kvs_je_iter(c, obj, &items)) != KVS_OK) {
        return rc;
    }
    len = (int64_t) items.u.list->n;
    step = parts[2].type == KVS_JV_NONE ? 1 : v[2];
    if (step == 0) {
        return kvs_jctx_fail(c, KVS_EINVAL, "slice step cannot be zero");
    }
    if (parts[0].type == KVS_JV_NONE) {
        start = step > 0 ? 0 : len - 1;
    } else {
        start = v[0] < 0 ? v[0] + len : v[0];
        if (start < 0) {
            start = step > 0 ? 0 : -1;
        } else if (start >= len) {
            start = step > 0 ? len : len - 1;
        }
    }
    if (parts[1].type == KVS_JV_NONE) {
        stop = step > 0 ? len : -1;
    } else {
        stop = v[1] < 0 ? v[1] + len : v[1];
        if (stop < 0) {
            stop = step > 0 ? 0 : -1;
        } else if (stop >= len) {
            stop = step > 0 ? len : len - 1;
        }
    }

    if (obj->type == KVS_JV_LIST) {
        if ((rc = kvs_jv_list_new(c, 0, &out)) != KVS_OK) {
            return rc;
        }
        out.flag = obj->flag;
    } else {
        memset(&s, 0, sizeof(s));
    }
    for (i = start, k = 0; step > 0 ? i < stop : i > stop; i += step, k++) {
        if ((rc = kvs_jctx_step(c)) != KVS_OK) {
            return rc;
        }
        if (obj->type == KVS_JV_LIST) {
            rc = kvs_jlist_push(c, out.u.list, items.u.list->v[i]);
        } else {
            rc = kvs_jsink_put(c, &s, items.u.list->v[i].u.s.p,
                               items.u.list->v[i].u.s.n);
        }
        if (rc != KVS_OK) {
            return rc;
        }
    }
    *res = obj->type == KVS_JV_LIST ? out : kvs_jv_str(s.p, s.n);

    return KVS_OK;
}


/* --- arithmetic ----------------------------------------------------------- */

static int
kvs_je_repeat(kvs_jctx_t *c, const kvs_jv_t *seq, int64_t times,
    kvs_jv_t *res)
{
    kvs_jsink_t  s;
    kvs_jv_t     out;
    int64_t      t;
    size_t       i;
    int          rc;

    if (times < 0) {
        times = 0;
    }
    if (seq->type == KVS_JV_STR) {
        if (seq->u.s.n > 0 && (uint64_t) times > c->opts->max_memory
                                                 / seq->u.s.n)
        {
            return kvs_jctx_fail(c, KVS_ETOOLONG, "string repetition passes "
                                 "the memory limit");
        }
        memset(&s, 0, sizeof(s));
        for (t = 0; t < times; t++) {
            if ((rc = kvs_jctx_step(c)) != KVS_OK
                || (rc = kvs_jsink_put(c, &s, seq->u.s.p, seq->u.s.n))
                   != KVS_OK)
            {
                return rc;
            }
        }
        *res = kvs_jv_str(s.p, s.n);
        return KVS_OK;
    }

    if ((rc = kvs_jv_list_new(c, 0, &out)) != KVS_OK) {
        return rc;
    }
    out.flag = seq->flag;
    for (t = 0; t < times; t++) {
        for (i = 0; i < seq->u.list->n; i++) {
            if ((rc = kvs_jctx_step(c)) != KVS_OK
                || (rc = kvs_jlist_push(c, out.u.list, seq->u.list->v[i]))
                   != KVS_OK)
            {
                return rc;
            }
        }
    }
    *res = out;

    return KVS_OK;
}


int
kvs_je_binop(kvs_jctx_t *c, int op, const kvs_jv_t *a, const kvs_jv_t *b,
    kvs_jv_t *res)
{
    kvs_jsink_t  s;
    kvs_jv_t     out;
    int64_t      x, y, r;
    double       fx, fy;
    size_t       i;
    int          rc, ints;

    if (a->type == KVS_JV_UNDEF) {
        return kvs_je_undefined(c, a);
    }
    if (b->type == KVS_JV_UNDEF) {
        return kvs_je_undefined(c, b);
    }

    if (op == '+' && a->type == KVS_JV_STR && b->type == KVS_JV_STR) {
        /* Markup + str escapes the str (markupsafe), even with
         * autoescape off: templates that write "..."|safe + x get it */
        int  markup = a->flag || b->flag;

        memset(&s, 0, sizeof(s));
        rc = markup && !a->flag
             ? kvs_jv_html_put(c, &s, a->u.s.p, a->u.s.n)
             : kvs_jsink_put(c, &s, a->u.s.p, a->u.s.n);
        if (rc == KVS_OK) {
            rc = markup && !b->flag
                 ? kvs_jv_html_put(c, &s, b->u.s.p, b->u.s.n)
                 : kvs_jsink_put(c, &s, b->u.s.p, b->u.s.n);
        }
        if (rc != KVS_OK) {
            return rc;
        }
        *res = kvs_jv_str(s.p, s.n);
        res->flag = (uint8_t) markup;
        return KVS_OK;
    }
    if (op == '+' && a->type == KVS_JV_LIST && b->type == KVS_JV_LIST
        && a->flag == b->flag && a->flag != KVS_JL_GEN)
    {
        if ((rc = kvs_jv_list_new(c, a->u.list->n + b->u.list->n, &out))
            != KVS_OK)
        {
            return rc;
        }
        out.flag = a->flag;
        for (i = 0; i < a->u.list->n; i++) {
            out.u.list->v[out.u.list->n++] = a->u.list->v[i];
        }
        for (i = 0; i < b->u.list->n; i++) {
            out.u.list->v[out.u.list->n++] = b->u.list->v[i];
        }
        *res = out;
        return KVS_OK;
    }
    if (op == '*' && (a->type == KVS_JV_STR
                      || (a->type == KVS_JV_LIST && a->flag != KVS_JL_GEN))
        && (b->type == KVS_JV_INT || b->type == KVS_JV_BOOL))
    {
        return kvs_je_repeat(c, a, b->u.i, res);
    }
    if (op == '*' && (b->type == KVS_JV_STR
                      || (b->type == KVS_JV_LIST && b->flag != KVS_JL_GEN))
        && (a->type == KVS_JV_INT || a->type == KVS_JV_BOOL))
    {
        return kvs_je_repeat(c, b, a->u.i, res);
    }

    if (!kvs_jv_is_num(a) || !kvs_jv_is_num(b)) {
        return kvs_jctx_fail(c, KVS_EINVAL, "unsupported operand types for "
                             "%c: '%s' and '%s'",
                             op == KVS_JOP_FDIV ? '/' : op == KVS_JOP_POW
                             ? '*' : op, kvs_jv_type_name(a),
                             kvs_jv_type_name(b));
    }

    ints = a->type != KVS_JV_FLOAT && b->type != KVS_JV_FLOAT;
    x = a->u.i;
    y = b->u.i;
    fx = kvs_jv_num(a);
    fy = kvs_jv_num(b);

    switch (op) {
    case '+':
    case '-':
    case '*':
        if (ints) {
            int  over = op == '+' ? __builtin_add_overflow(x, y, &r)
                        : op == '-' ? __builtin_sub_overflow(x, y, &r)
                        : __builtin_mul_overflow(x, y, &r);
            if (over) {
                return kvs_jctx_fail(c, KVS_ERANGE, "integer overflow");
            }
            *res = kvs_jv_int(r);
        } else {
            *res = kvs_jv_float(op == '+' ? fx + fy : op == '-' ? fx - fy
                                                                : fx * fy);
        }
        return KVS_OK;

    case '/':
        if (fy == 0) {
            return kvs_jctx_fail(c, KVS_EINVAL, "division by zero");
        }
        *res = kvs_jv_float(fx / fy);
        return KVS_OK;

    case KVS_JOP_FDIV:
    case '%':
        if (ints) {
            if (y == 0) {
                return kvs_jctx_fail(c, KVS_EINVAL, "integer division or "
                                     "modulo by zero");
            }
            if (x == INT64_MIN && y == -1) {
                return kvs_jctx_fail(c, KVS_ERANGE, "integer overflow");
            }
            r = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0))) {
                r--;
            }
            *res = kvs_jv_int(op == '%' ? x - r * y : r);
            return KVS_OK;
        }
        if (fy == 0) {
            return kvs_jctx_fail(c, KVS_EINVAL, "float division by zero");
        }
        if (op == '%') {
            double  m = fmod(fx, fy);

            if (m != 0 && ((m < 0) != (fy < 0))) {
                m += fy;
            }
            *res = kvs_jv_float(m);
        } else {
            *res = kvs_jv_float(floor(fx / fy));
        }
        return KVS_OK;

    default:                          /* ** */
        if (ints && y >= 0) {
            r = 1;
            while (y-- > 0) {
                if (__builtin_mul_overflow(r, x, &r)) {
                    return kvs_jctx_fail(c, KVS_ERANGE, "integer overflow");
                }
                if ((rc = kvs_jctx_step(c)) != KVS_OK) {
                    return rc;
                }
                if (r == 0 || r == 1) {
                    break;
                }
            }
            *res = kvs_jv_int(r);
            return KVS_OK;
        }
        *res = kvs_jv_float(pow(fx, fy));
        return KVS_OK;
    }
}


int
kvs_je_contains(kvs_jctx_t *c, const kvs_jv_t *item, const kvs_jv_t *seq,
    int *res)
{
    size_t  i;

    switch (seq->type) {
    case KVS_JV_UNDEF:
        *res = 0;
        return KVS_OK;
    case KVS_JV_STR:
        if (item->type != KVS_JV_STR) {
            return kvs_jctx_fail(c, KVS_EINVAL, "'in <string>' requires "
                                 "string as left operand, not %s",
                                 kvs_jv_type_name(item));
        }
        *res = item->u.s.n == 0
               || memmem(seq->u.s.p, seq->u.s.n, item->u.s.p, item->u.s.n)
                  != NULL;
        return KVS_OK;
    case KVS_JV_LIST:
        for (i = 0; i < seq->u.list->n; i++) {
            if (kvs_jv_eq(item, &seq->u.list->v[i])) {
                *res = 1;
                return KVS_OK;
            }
        }
        *res = 0;
        return KVS_OK;
    case KVS_JV_DICT:
        *res = kvs_jdict_get(seq->u.dict, *item) != NULL;
        return KVS_OK;
    default:
        return kvs_jctx_fail(c, KVS_EINVAL, "argument of type '%s' is not "
                             "iterable", kvs_jv_type_name(seq));
    }
}
