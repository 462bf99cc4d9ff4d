/*
 * kvs_jinja_eval: evaluating expressions of a compiled template: the
 * render state's errors and step count, scopes, calls of macros, built-ins
 * and methods, filters and tests; statements are in kvs_jinja_stmt.c,
 * item access and operators in kvs_jinja_ops.c.
 *
 * Scopes follow jinja2 where chat templates can tell: the context is the
 * outermost scope; a for loop and a macro call each open one (so a set
 * inside a loop does not leak out, which is why templates use namespace
 * objects), if blocks do not.  A macro sees the scope it was defined in.
 * Errors are negative KVS_E* codes recorded once in the render state, and
 * every path just returns them: what was allocated belongs to the
 * render's arena.
 */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kvs_jinja_impl.h"


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

kvs_jscope_t *
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


int
kvs_je_assign(kvs_jctx_t *c, kvs_jscope_t *sc, const char *name, kvs_jv_t v)
{
    return kvs_jdict_set(c, &sc->vars, kvs_jv_str(name, strlen(name)), v);
}


kvs_jv_t
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


int
kvs_je_undefined(kvs_jctx_t *c, const kvs_jv_t *v)
{
    if (v->u.s.p != NULL) {
        return kvs_jctx_fail(c, KVS_EINVAL, "'%.*s' is undefined",
                             (int) (v->u.s.n > 60 ? 60 : v->u.s.n),
                             v->u.s.p);
    }

    return kvs_jctx_fail(c, KVS_EINVAL, "a value is undefined");
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


int
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

int
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


int
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


