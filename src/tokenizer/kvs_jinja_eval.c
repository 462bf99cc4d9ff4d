/*
 * kvs_jinja_eval: running a compiled template: statements, expressions,
 * scopes, macros and the render entry point.
 *
 * Scopes follow jinja2 where chat templates can tell: the context is the
 * outermost scope; a for loop and a macro call each open one (so a set
 * inside a loop does not leak out, which is why templates use namespace
 * objects), if blocks do not.  A macro sees the scope it was defined in.
 * Break and continue travel up as positive statuses (KVS_JE_BREAK,
 * KVS_JE_CONTINUE) until a loop takes them; errors are negative KVS_E*
 * codes recorded once in the render state, and every path just returns
 * them: what was allocated belongs to the render's arena.
 */

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kvs_jinja_impl.h"

#define KVS_JE_BREAK     1
#define KVS_JE_CONTINUE  2


static int kvs_je_expr(kvs_jctx_t *c, kvs_jscope_t *sc, const kvs_jnode_t *n,
    kvs_jv_t *res);
static int kvs_je_stmts(kvs_jctx_t *c, kvs_jscope_t *sc,
    kvs_jnode_t *const *body, size_t n);


int
kvs_jctx_fail(kvs_jctx_t *c, int code, const char *fmt, ...)
{
    char     msg[KVS_ERR_MSG_LEN];
    va_list  ap;

    if (c->e.code != KVS_OK) {
        return c->e.code;
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    kvs_err_set(&c->e, code, "line %u: %s", c->line, msg);

    return code;
}


int
kvs_jctx_nomem(kvs_jctx_t *c)
{
    if (c->arena.over) {
        return kvs_jctx_fail(c, KVS_ETOOLONG, "render passes the memory "
                             "limit of %zu bytes", c->opts->max_memory);
    }

    return kvs_jctx_fail(c, KVS_ENOMEM, "out of memory");
}


int
kvs_jctx_step(kvs_jctx_t *c)
{
    if (++c->steps > c->opts->max_steps && c->opts->max_steps) {
        return kvs_jctx_fail(c, KVS_ETOOLONG, "render passes the limit of "
                             "%llu steps",
                             (unsigned long long) c->opts->max_steps);
    }

    return KVS_OK;
}


/* --- scopes --------------------------------------------------------------- */

static kvs_jscope_t *
kvs_je_scope(kvs_jctx_t *c, kvs_jscope_t *parent)
{
    kvs_jscope_t  *sc;

    sc = kvs_jarena_alloc(&c->arena, sizeof(*sc));
    if (sc == NULL) {
        kvs_jctx_nomem(c);
        return NULL;
    }
    memset(sc, 0, sizeof(*sc));
    sc->parent = parent;

    return sc;
}


static int
kvs_je_assign(kvs_jctx_t *c, kvs_jscope_t *sc, const char *name, kvs_jv_t v)
{
    return kvs_jdict_set(c, &sc->vars, kvs_jv_str(name, strlen(name)), v);
}


static kvs_jv_t
kvs_je_lookup(kvs_jscope_t *sc, const char *name, size_t n)
{
    kvs_jv_t  *v;

    for ( ; sc != NULL; sc = sc->parent) {
        if ((v = kvs_jdict_gets(&sc->vars, name, n)) != NULL) {
            return *v;
        }
    }

    v = NULL;
    {
        kvs_jv_t  g = kvs_jb_global(name, n);

        if (g.type != KVS_JV_UNDEF) {
            return g;
        }
    }

    return kvs_jv_undef(name);
}


static int
kvs_je_undefined(kvs_jctx_t *c, const kvs_jv_t *v)
{
    if (v->u.s.p != NULL) {
        return kvs_jctx_fail(c, KVS_EINVAL, "'%.*s' is undefined",
                             (int) (v->u.s.n > 60 ? 60 : v->u.s.n),
                             v->u.s.p);
    }

    return kvs_jctx_fail(c, KVS_EINVAL, "a value is undefined");
}


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


static int
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
static int
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


static int
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


static int
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


/* --- calls ---------------------------------------------------------------- */

static int
kvs_je_args(kvs_jctx_t *c, kvs_jscope_t *sc, const kvs_jnode_t *n,
    kvs_jargs_t *args, size_t extra)
{
    kvs_jv_t  *pos, *kwv;
    size_t     i;
    int        rc;

    memset(args, 0, sizeof(*args));
    pos = kvs_jarena_alloc(&c->arena, (n->nitems + 1) * sizeof(kvs_jv_t));
    kwv = kvs_jarena_alloc(&c->arena,
                           (n->nnames + extra + 1) * sizeof(kvs_jv_t));
    if (pos == NULL || kwv == NULL) {
        return kvs_jctx_nomem(c);
    }
    for (i = 0; i < n->nitems; i++) {
        if ((rc = kvs_je_expr(c, sc, n->items[i], &pos[i])) != KVS_OK) {
            return rc;
        }
    }
    for (i = 0; i < n->nnames; i++) {
        if ((rc = kvs_je_expr(c, sc, n->kwv[i], &kwv[i])) != KVS_OK) {
            return rc;
        }
    }
    args->pos = pos;
    args->npos = n->nitems;
    args->kwn = n->names;
    args->kwv = kwv;
    args->nkw = n->nnames;

    return KVS_OK;
}


static int
kvs_je_call_macro(kvs_jctx_t *c, const kvs_jmacro_t *m,
    const kvs_jargs_t *args, const kvs_jv_t *caller, kvs_jv_t *res)
{
    const kvs_jnode_t  *def = m->def;
    kvs_jscope_t       *sc;
    kvs_jsink_t         sink, *saved;
    kvs_jv_t            v;
    const kvs_jv_t     *a;
    size_t              i, k;
    uint32_t            line = c->line;
    int                 rc, found;

    if (args->npos > def->nnames) {
        return kvs_jctx_fail(c, KVS_EINVAL, "macro '%s' takes not more than "
                             "%zu argument(s)",
                             m->is_caller ? "caller" : def->s, def->nnames);
    }
    for (k = 0; k < args->nkw; k++) {
        found = 0;
        for (i = 0; i < def->nnames; i++) {
            found |= strcmp(def->names[i], args->kwn[k]) == 0;
        }
        if (!found) {
            return kvs_jctx_fail(c, KVS_EINVAL, "macro '%s' takes no keyword "
                                 "argument '%s'",
                                 m->is_caller ? "caller" : def->s,
                                 args->kwn[k]);
        }
    }

    if (++c->depth > c->opts->max_depth) {
        return kvs_jctx_fail(c, KVS_ETOOLONG, "macro calls nested deeper "
                             "than %u", c->opts->max_depth);
    }

    if ((sc = kvs_je_scope(c, m->closure)) == NULL) {
        return c->e.code;
    }
    for (i = 0; i < def->nnames; i++) {
        a = kvs_jargs_get(args, i, def->names[i]);
        if (a != NULL) {
            v = *a;
        } else if (def->items[i] != NULL) {
            if ((rc = kvs_je_expr(c, sc, def->items[i], &v)) != KVS_OK) {
                return rc;
            }
        } else {
            v = kvs_jv_undef(def->names[i]);
        }
        if ((rc = kvs_je_assign(c, sc, def->names[i], v)) != KVS_OK) {
            return rc;
        }
    }
    if (caller != NULL
        && (rc = kvs_je_assign(c, sc, "caller", *caller)) != KVS_OK)
    {
        return rc;
    }

    memset(&sink, 0, sizeof(sink));
    saved = c->out;
    c->out = &sink;
    rc = kvs_je_stmts(c, sc, def->body, def->nbody);
    c->out = saved;
    c->line = line;
    c->depth--;
    if (rc < 0) {
        return rc;
    }
    *res = kvs_jv_str(sink.p, sink.n);

    return KVS_OK;
}


static int
kvs_je_call(kvs_jctx_t *c, kvs_jscope_t *sc, const kvs_jnode_t *n,
    const kvs_jv_t *caller, kvs_jv_t *res)
{
    kvs_jv_t     fn;
    kvs_jargs_t  args;
    int          rc;

    if ((rc = kvs_je_expr(c, sc, n->a, &fn)) != KVS_OK
        || (rc = kvs_je_args(c, sc, n, &args, 0)) != KVS_OK)
    {
        return rc;
    }
    c->line = n->line;

    switch (fn.type) {
    case KVS_JV_MACRO:
        return kvs_je_call_macro(c, fn.u.macro, &args, caller, res);
    case KVS_JV_FUNC:
        if (caller != NULL) {
            return kvs_jctx_fail(c, KVS_EINVAL, "a call block needs a macro");
        }
        return kvs_jb_call(c, fn.u.fn, &args, res);
    case KVS_JV_UNDEF:
        if (fn.u.s.p == NULL) {
            return kvs_jctx_fail(c, KVS_EINVAL, "call of an undefined or "
                                 "unsafe attribute");
        }
        return kvs_je_undefined(c, &fn);
    default:
        return kvs_jctx_fail(c, KVS_EINVAL, "'%s' object is not callable",
                             kvs_jv_type_name(&fn));
    }
}


/* --- expressions ---------------------------------------------------------- */

static int
kvs_je_filter(kvs_jctx_t *c, kvs_jscope_t *sc, const kvs_jnode_t *n,
    kvs_jv_t v, kvs_jv_t *res)
{
    kvs_jargs_t  args;
    int          rc;

    if ((rc = kvs_je_args(c, sc, n, &args, 0)) != KVS_OK) {
        return rc;
    }
    c->line = n->line;

    return kvs_jb_filter(c, n->s, v, &args, res);
}


static int
kvs_je_expr(kvs_jctx_t *c, kvs_jscope_t *sc, const kvs_jnode_t *n,
    kvs_jv_t *res)
{
    kvs_jv_t      a, b, out, parts[3];
    kvs_jsink_t   s;
    kvs_jargs_t   args;
    size_t        i;
    int           rc, r, t;

    if ((rc = kvs_jctx_step(c)) != KVS_OK) {
        return rc;
    }
    c->line = n->line;

    switch (n->kind) {
    case KVS_JN_CONST:
        *res = n->val;
        return KVS_OK;

    case KVS_JN_NAME:
        *res = kvs_je_lookup(sc, n->s, n->sn);
        return KVS_OK;

    case KVS_JN_ATTR:
        if ((rc = kvs_je_expr(c, sc, n->a, &a)) != KVS_OK) {
            return rc;
        }
        c->line = n->line;
        return kvs_je_getattr(c, &a, n->s, n->sn, res);

    case KVS_JN_ITEM:
        if ((rc = kvs_je_expr(c, sc, n->a, &a)) != KVS_OK
            || (rc = kvs_je_expr(c, sc, n->b, &b)) != KVS_OK)
        {
            return rc;
        }
        c->line = n->line;
        return kvs_je_getitem(c, &a, &b, res);

    case KVS_JN_SLICE:
        if ((rc = kvs_je_expr(c, sc, n->a, &a)) != KVS_OK) {
            return rc;
        }
        for (i = 0; i < 3; i++) {
            parts[i] = kvs_jv_none();
            if (n->items[i] != NULL
                && (rc = kvs_je_expr(c, sc, n->items[i], &parts[i]))
                   != KVS_OK)
            {
                return rc;
            }
        }
        c->line = n->line;
        return kvs_je_slice(c, &a, parts, res);

    case KVS_JN_CALL:
        return kvs_je_call(c, sc, n, NULL, res);

    case KVS_JN_FILTER:
        if ((rc = kvs_je_expr(c, sc, n->a, &a)) != KVS_OK) {
            return rc;
        }
        return kvs_je_filter(c, sc, n, a, res);

    case KVS_JN_TEST:
        if ((rc = kvs_je_expr(c, sc, n->a, &a)) != KVS_OK
            || (rc = kvs_je_args(c, sc, n, &args, 0)) != KVS_OK)
        {
            return rc;
        }
        c->line = n->line;
        if ((rc = kvs_jb_test(c, n->s, a, &args, &t)) != KVS_OK) {
            return rc;
        }
        *res = kvs_jv_bool(n->op ? !t : t);
        return KVS_OK;

    case KVS_JN_BINOP:
        if ((rc = kvs_je_expr(c, sc, n->a, &a)) != KVS_OK
            || (rc = kvs_je_expr(c, sc, n->b, &b)) != KVS_OK)
        {
            return rc;
        }
        c->line = n->line;
        return kvs_je_binop(c, n->op, &a, &b, res);

    case KVS_JN_NEG:
    case KVS_JN_POS:
        if ((rc = kvs_je_expr(c, sc, n->a, &a)) != KVS_OK) {
            return rc;
        }
        if (a.type == KVS_JV_UNDEF) {
            return kvs_je_undefined(c, &a);
        }
        if (!kvs_jv_is_num(&a)) {
            return kvs_jctx_fail(c, KVS_EINVAL, "bad operand type for unary "
                                 "%c: '%s'", n->kind == KVS_JN_NEG ? '-' : '+',
                                 kvs_jv_type_name(&a));
        }
        if (n->kind == KVS_JN_POS) {
            *res = a.type == KVS_JV_BOOL ? kvs_jv_int(a.u.i) : a;
        } else if (a.type == KVS_JV_FLOAT) {
            *res = kvs_jv_float(-a.u.f);
        } else if (a.u.i == INT64_MIN) {
            return kvs_jctx_fail(c, KVS_ERANGE, "integer overflow");
        } else {
            *res = kvs_jv_int(-a.u.i);
        }
        return KVS_OK;

    case KVS_JN_NOT:
        if ((rc = kvs_je_expr(c, sc, n->a, &a)) != KVS_OK) {
            return rc;
        }
        *res = kvs_jv_bool(!kvs_jv_truthy(&a));
        return KVS_OK;

    case KVS_JN_AND:
    case KVS_JN_OR:
        if ((rc = kvs_je_expr(c, sc, n->a, &a)) != KVS_OK) {
            return rc;
        }
        if (kvs_jv_truthy(&a) == (n->kind == KVS_JN_OR)) {
            *res = a;
            return KVS_OK;
        }
        return kvs_je_expr(c, sc, n->b, res);

    case KVS_JN_CONCAT:
        memset(&s, 0, sizeof(s));
        for (i = 0; i < n->nitems; i++) {
            if ((rc = kvs_je_expr(c, sc, n->items[i], &a)) != KVS_OK
                || (rc = kvs_jv_str_put(c, &s, &a)) != KVS_OK)
            {
                return rc;
            }
        }
        *res = kvs_jv_str(s.p, s.n);
        return KVS_OK;

    case KVS_JN_COMPARE:
        if ((rc = kvs_je_expr(c, sc, n->a, &a)) != KVS_OK) {
            return rc;
        }
        for (i = 0; i < n->nitems; i++) {
            if ((rc = kvs_je_expr(c, sc, n->items[i], &b)) != KVS_OK) {
                return rc;
            }
            c->line = n->line;
            switch (n->ops[i]) {
            case KVS_JOP_EQ:
                t = kvs_jv_eq(&a, &b);
                break;
            case KVS_JOP_NE:
                t = !kvs_jv_eq(&a, &b);
                break;
            case KVS_JCMP_IN:
            case KVS_JCMP_NOTIN:
                if ((rc = kvs_je_contains(c, &a, &b, &t)) != KVS_OK) {
                    return rc;
                }
                t = n->ops[i] == KVS_JCMP_IN ? t : !t;
                break;
            default:
                if (a.type == KVS_JV_UNDEF) {
                    return kvs_je_undefined(c, &a);
                }
                if (b.type == KVS_JV_UNDEF) {
                    return kvs_je_undefined(c, &b);
                }
                if ((rc = kvs_jv_cmp(c, &a, &b, &r)) != KVS_OK) {
                    return rc;
                }
                t = n->ops[i] == '<' ? r < 0 : n->ops[i] == '>' ? r > 0
                    : n->ops[i] == KVS_JOP_LE ? r <= 0 : r >= 0;
            }
            if (!t) {
                *res = kvs_jv_bool(0);
                return KVS_OK;
            }
            a = b;
        }
        *res = kvs_jv_bool(1);
        return KVS_OK;

    case KVS_JN_COND:
        if ((rc = kvs_je_expr(c, sc, n->a, &a)) != KVS_OK) {
            return rc;
        }
        if (kvs_jv_truthy(&a)) {
            return kvs_je_expr(c, sc, n->b, res);
        }
        if (n->c == NULL) {
            *res = kvs_jv_undef(NULL);
            return KVS_OK;
        }
        return kvs_je_expr(c, sc, n->c, res);

    case KVS_JN_LIST:
    case KVS_JN_TUPLE:
        if ((rc = kvs_jv_list_new(c, n->nitems, &out)) != KVS_OK) {
            return rc;
        }
        out.flag = n->kind == KVS_JN_TUPLE;
        for (i = 0; i < n->nitems; i++) {
            if ((rc = kvs_je_expr(c, sc, n->items[i], &a)) != KVS_OK) {
                return rc;
            }
            out.u.list->v[out.u.list->n++] = a;
        }
        *res = out;
        return KVS_OK;

    case KVS_JN_DICT:
        if ((rc = kvs_jv_dict_new(c, &out)) != KVS_OK) {
            return rc;
        }
        for (i = 0; i < n->nitems; i++) {
            if ((rc = kvs_je_expr(c, sc, n->items[i], &a)) != KVS_OK
                || (rc = kvs_je_expr(c, sc, n->kwv[i], &b)) != KVS_OK)
            {
                return rc;
            }
            if (a.type == KVS_JV_LIST && a.flag == 0) {
                return kvs_jctx_fail(c, KVS_EINVAL, "unhashable type: "
                                     "'list'");
            }
            if (a.type == KVS_JV_DICT) {
                return kvs_jctx_fail(c, KVS_EINVAL, "unhashable type: "
                                     "'dict'");
            }
            if ((rc = kvs_jdict_set(c, out.u.dict, a, b)) != KVS_OK) {
                return rc;
            }
        }
        *res = out;
        return KVS_OK;

    default:
        return kvs_jctx_fail(c, KVS_EINVAL, "not an expression");
    }
}


/* --- statements ----------------------------------------------------------- */

static int
kvs_je_unpack(kvs_jctx_t *c, kvs_jscope_t *sc, const kvs_jnode_t *n,
    kvs_jv_t v)
{
    kvs_jv_t  items;
    size_t    i;
    int       rc;

    if (!n->op) {
        return kvs_je_assign(c, sc, n->names[0], v);
    }
    if (v.type == KVS_JV_UNDEF) {
        return kvs_je_undefined(c, &v);
    }
    if ((rc = kvs_je_iter(c, &v, &items)) != KVS_OK) {
        return rc;
    }
    if (items.u.list->n != n->nnames) {
        return kvs_jctx_fail(c, KVS_EINVAL, "cannot unpack %zu values into "
                             "%zu names", items.u.list->n, n->nnames);
    }
    for (i = 0; i < n->nnames; i++) {
        if ((rc = kvs_je_assign(c, sc, n->names[i], items.u.list->v[i]))
            != KVS_OK)
        {
            return rc;
        }
    }

    return KVS_OK;
}


static int
kvs_je_for(kvs_jctx_t *c, kvs_jscope_t *sc, const kvs_jnode_t *n)
{
    kvs_jv_t       seq, items, kept, lv;
    kvs_jscope_t  *ls;
    kvs_jloop_t   *loop;
    size_t         i;
    int            rc;

    if ((rc = kvs_je_expr(c, sc, n->a, &seq)) != KVS_OK) {
        return rc;
    }
    c->line = n->line;
    if ((rc = kvs_je_iter(c, &seq, &items)) != KVS_OK) {
        return rc;
    }
    if ((ls = kvs_je_scope(c, sc)) == NULL) {
        return c->e.code;
    }

    if (n->b != NULL) {
        /* "for x in xs if cond": the loop sees only what passes */
        if ((rc = kvs_jv_list_new(c, 0, &kept)) != KVS_OK) {
            return rc;
        }
        for (i = 0; i < items.u.list->n; i++) {
            if ((rc = kvs_jctx_step(c)) != KVS_OK
                || (rc = kvs_je_unpack(c, ls, n, items.u.list->v[i]))
                   != KVS_OK
                || (rc = kvs_je_expr(c, ls, n->b, &lv)) != KVS_OK)
            {
                return rc;
            }
            if (kvs_jv_truthy(&lv)
                && (rc = kvs_jlist_push(c, kept.u.list, items.u.list->v[i]))
                   != KVS_OK)
            {
                return rc;
            }
        }
        items = kept;
    }

    if (items.u.list->n == 0) {
        return kvs_je_stmts(c, ls, n->else_, n->nelse);
    }

    if ((loop = kvs_jarena_alloc(&c->arena, sizeof(*loop))) == NULL) {
        return kvs_jctx_nomem(c);
    }
    loop->items = items.u.list->v;
    loop->length = (int64_t) items.u.list->n;
    memset(&lv, 0, sizeof(lv));
    lv.type = KVS_JV_LOOP;
    lv.u.loop = loop;

    for (i = 0; i < items.u.list->n; i++) {
        if ((rc = kvs_jctx_step(c)) != KVS_OK) {
            return rc;
        }
        loop->index0 = (int64_t) i;
        c->line = n->line;
        if ((rc = kvs_je_unpack(c, ls, n, items.u.list->v[i])) != KVS_OK
            || (rc = kvs_je_assign(c, ls, "loop", lv)) != KVS_OK)
        {
            return rc;
        }
        rc = kvs_je_stmts(c, ls, n->body, n->nbody);
        if (rc == KVS_JE_BREAK) {
            break;
        }
        if (rc < 0) {
            return rc;
        }
    }

    return KVS_OK;
}


/* the body rendered into a string, then the filters of n->items */
static int
kvs_je_capture(kvs_jctx_t *c, kvs_jscope_t *sc, const kvs_jnode_t *n,
    kvs_jv_t *res)
{
    kvs_jsink_t   sink, *saved;
    kvs_jv_t      v;
    size_t        i;
    int           rc;

    memset(&sink, 0, sizeof(sink));
    saved = c->out;
    c->out = &sink;
    rc = kvs_je_stmts(c, sc, n->body, n->nbody);
    c->out = saved;
    if (rc < 0) {
        return rc;
    }
    v = kvs_jv_str(sink.p, sink.n);
    for (i = 0; i < n->nitems; i++) {
        if ((rc = kvs_je_filter(c, sc, n->items[i], v, &v)) != KVS_OK) {
            return rc;
        }
    }
    *res = v;

    return KVS_OK;
}


static int
kvs_je_stmt(kvs_jctx_t *c, kvs_jscope_t *sc, const kvs_jnode_t *n)
{
    kvs_jv_t       v, *slot;
    kvs_jmacro_t  *m;
    int            rc;

    if ((rc = kvs_jctx_step(c)) != KVS_OK) {
        return rc;
    }
    c->line = n->line;

    switch (n->kind) {
    case KVS_JN_TEXT:
        return kvs_jsink_put(c, c->out, n->s, n->sn);

    case KVS_JN_OUTPUT:
        if ((rc = kvs_je_expr(c, sc, n->a, &v)) != KVS_OK) {
            return rc;
        }
        return kvs_jv_str_put(c, c->out, &v);

    case KVS_JN_IF:
        if ((rc = kvs_je_expr(c, sc, n->a, &v)) != KVS_OK) {
            return rc;
        }
        if (kvs_jv_truthy(&v)) {
            return kvs_je_stmts(c, sc, n->body, n->nbody);
        }
        return kvs_je_stmts(c, sc, n->else_, n->nelse);

    case KVS_JN_FOR:
        return kvs_je_for(c, sc, n);

    case KVS_JN_SET:
        if ((rc = kvs_je_expr(c, sc, n->a, &v)) != KVS_OK) {
            return rc;
        }
        c->line = n->line;
        return kvs_je_unpack(c, sc, n, v);

    case KVS_JN_SET_ATTR:
        if ((rc = kvs_je_expr(c, sc, n->a, &v)) != KVS_OK) {
            return rc;
        }
        c->line = n->line;
        {
            kvs_jv_t  ns = kvs_je_lookup(sc, n->s, n->sn);

            if (ns.type != KVS_JV_NS) {
                return kvs_jctx_fail(c, KVS_EINVAL, "cannot assign attribute "
                                     "on non-namespace object");
            }
            slot = kvs_jdict_gets(ns.u.dict, n->s2, strlen(n->s2));
            if (slot != NULL) {
                *slot = v;
                return KVS_OK;
            }
            return kvs_jdict_set(c, ns.u.dict,
                                 kvs_jv_str(n->s2, strlen(n->s2)), v);
        }

    case KVS_JN_SET_BLOCK:
        if ((rc = kvs_je_capture(c, sc, n, &v)) != KVS_OK) {
            return rc;
        }
        return kvs_je_assign(c, sc, n->s, v);

    case KVS_JN_FILTERBLOCK:
        if ((rc = kvs_je_capture(c, sc, n, &v)) != KVS_OK) {
            return rc;
        }
        return kvs_jv_str_put(c, c->out, &v);

    case KVS_JN_MACRO:
    case KVS_JN_CALLBLOCK:
        if ((m = kvs_jarena_alloc(&c->arena, sizeof(*m))) == NULL) {
            return kvs_jctx_nomem(c);
        }
        m->def = n;
        m->closure = sc;
        m->is_caller = n->kind == KVS_JN_CALLBLOCK;
        memset(&v, 0, sizeof(v));
        v.type = KVS_JV_MACRO;
        v.u.macro = m;
        if (n->kind == KVS_JN_MACRO) {
            return kvs_je_assign(c, sc, n->s, v);
        }
        {
            kvs_jv_t  out;

            if ((rc = kvs_je_call(c, sc, n->a, &v, &out)) != KVS_OK) {
                return rc;
            }
            return kvs_jv_str_put(c, c->out, &out);
        }

    case KVS_JN_BLOCK:
        return kvs_je_stmts(c, sc, n->body, n->nbody);

    case KVS_JN_BREAK:
        return KVS_JE_BREAK;

    case KVS_JN_CONTINUE:
        return KVS_JE_CONTINUE;

    default:
        return kvs_jctx_fail(c, KVS_EINVAL, "not a statement");
    }
}


static int
kvs_je_stmts(kvs_jctx_t *c, kvs_jscope_t *sc, kvs_jnode_t *const *body,
    size_t n)
{
    size_t  i;
    int     rc;

    for (i = 0; i < n; i++) {
        if ((rc = kvs_je_stmt(c, sc, body[i])) != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}


int
kvs_jinja_render(const kvs_jinja_t *tpl, const json_t *ctx,
    const kvs_jinja_opts_t *opts, kvs_buf_t *out, kvs_err_t *err)
{
    kvs_jctx_t         c;
    kvs_jscope_t      *root;
    kvs_jsink_t        sink;
    kvs_jv_t           v;
    const char        *key;
    json_t            *val;
    kvs_jinja_opts_t   def;
    int                rc = KVS_OK;

    if (tpl == NULL || out == NULL) {
        return kvs_err_set(err, KVS_EINVAL, "no template or output");
    }
    if (opts == NULL) {
        kvs_jinja_opts_default(&def);
        opts = &def;
    }
    if (ctx != NULL && !json_is_object(ctx)) {
        return kvs_err_set(err, KVS_EINVAL, "the context must be a JSON "
                           "object");
    }

    memset(&c, 0, sizeof(c));
    memset(&sink, 0, sizeof(sink));
    c.arena.limit = opts->max_memory;
    c.opts = opts;
    c.out = &sink;
    c.line = 1;

    root = kvs_je_scope(&c, NULL);
    if (root == NULL) {
        rc = c.e.code;
    }
    if (rc == KVS_OK && ctx != NULL) {
        json_object_foreach((json_t *) ctx, key, val) {
            if ((rc = kvs_jv_from_json(&c, val, &v)) != KVS_OK
                || (rc = kvs_jdict_set(&c, &root->vars,
                                       kvs_jv_str(key, strlen(key)), v))
                   != KVS_OK)
            {
                break;
            }
        }
    }
    if (rc == KVS_OK) {
        rc = kvs_je_stmts(&c, root, tpl->body, tpl->nbody);
        if (rc > 0) {
            rc = KVS_OK;              /* a break outside a loop ends it */
        }
    }
    if (rc == KVS_OK && kvs_buf_append(out, sink.p, sink.n) != KVS_OK) {
        rc = kvs_err_set(&c.e, KVS_ENOMEM, "out of memory");
    }

    kvs_jarena_free(&c.arena);
    if (rc != KVS_OK) {
        if (c.e.code == KVS_OK) {
            kvs_err_set(&c.e, rc, "render failed");
        }
        if (err != NULL) {
            *err = c.e;
        }
        return c.e.code;
    }

    return KVS_OK;
}
