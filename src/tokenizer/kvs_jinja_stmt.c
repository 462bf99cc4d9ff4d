/*
 * kvs_jinja_stmt: running a compiled template's statements (output, if,
 * for with loop variables, set and namespace attributes, macro and call
 * blocks, filter blocks, break and continue) and the render entry point.
 *
 * Break and continue travel up as positive statuses (KVS_JE_BREAK,
 * KVS_JE_CONTINUE) until a loop takes them; errors are negative KVS_E*
 * codes recorded once in the render state.  The render's arena holds
 * everything it allocates and is freed once, failed or not; the output
 * goes straight to the caller's buffer, cut back on failure.
 */

#include <string.h>

#include "kvs_jinja_impl.h"

#define KVS_JE_BREAK     1
#define KVS_JE_CONTINUE  2

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


int
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
    size_t             start;
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
    sink.buf = out;
    start = out->len;
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

    kvs_jarena_free(&c.arena);
    if (rc != KVS_OK) {
        out->len = start;
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