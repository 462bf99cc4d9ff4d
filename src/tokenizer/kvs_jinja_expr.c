/*
 * kvs_jinja_expr: Jinja expressions to syntax trees, by recursive descent
 * with jinja2's grammar and precedence (conditional < or < and < not <
 * comparison < + - < ~ < * / // % < ** < unary - < postfix, filters and
 * tests).  A filter or test outside the supported subset is refused here
 * by name; nesting is bounded (KVS_JINJA_MAX_NEST) so that neither this
 * recursion nor the evaluator's can exhaust the stack.
 */

#include <stdio.h>
#include <string.h>

#include "kvs_jinja_parse.h"


static kvs_jnode_t *kvs_jp_or(kvs_jparse_t *P);
static kvs_jnode_t *kvs_jp_unary(kvs_jparse_t *P, int with_filter);
static kvs_jnode_t *kvs_jp_primary(kvs_jparse_t *P);
static kvs_jnode_t *kvs_jp_postfix(kvs_jparse_t *P, kvs_jnode_t *node);


/* --- expressions ---------------------------------------------------------- */

/* "(" args ")" after a call or filter: positional, then name=value */
static int
kvs_jp_args(kvs_jparse_t *P, kvs_jnode_t *node)
{
    kvs_jvec_t    pos, kwv;
    const char  **names = NULL, **nn;
    size_t        nnames = 0, cap = 0;
    kvs_jnode_t  *e;

    memset(&pos, 0, sizeof(pos));
    memset(&kwv, 0, sizeof(kwv));

    if (kvs_jp_expect_op(P, '(', "'('") != 0) {
        return -1;
    }

    while (!kvs_jp_is_op(P, ')')) {
        if (pos.n + kwv.n > 0 && kvs_jp_expect_op(P, ',', "',' or ')'") != 0)
        {
            return -1;
        }
        if (kvs_jp_is_op(P, ')')) {
            break;
        }
        if (kvs_jp_is_op(P, '*')) {
            kvs_jp_fail(P, KVS_EUNSUPPORTED, "unsupported *args in a call");
            return -1;
        }
        if (kvs_jp_is_op(P, KVS_JOP_POW)) {
            kvs_jp_fail(P, KVS_EUNSUPPORTED, "unsupported **kwargs in a "
                        "call");
            return -1;
        }

        if (kvs_jp_cur(P)->type == KVS_JT_NAME
            && kvs_jp_peek(P, 1)->type == KVS_JT_OP
            && kvs_jp_peek(P, 1)->op == '=')
        {
            const kvs_jtok_t  *t = kvs_jp_cur(P);

            if (nnames == cap) {
                cap = cap ? cap * 2 : 4;
                nn = kvs_jarena_alloc(P->a, cap * sizeof(*nn));
                if (nn == NULL) {
                    kvs_jp_fail(P, KVS_ENOMEM, "out of memory");
                    return -1;
                }
                if (nnames) {
                    memcpy(nn, names, nnames * sizeof(*nn));
                }
                names = nn;
            }
            if ((names[nnames] = kvs_jp_cstr(P, t->p, t->n)) == NULL) {
                return -1;
            }
            nnames++;
            kvs_jp_next(P);
            kvs_jp_next(P);
            if ((e = kvs_jp_expr(P, 1)) == NULL
                || kvs_jvec_push(P, &kwv, e) != KVS_OK)
            {
                return -1;
            }
            continue;
        }

        if (kwv.n > 0) {
            kvs_jp_fail(P, KVS_EFORMAT, "positional argument after a keyword "
                        "argument");
            return -1;
        }
        if ((e = kvs_jp_expr(P, 1)) == NULL
            || kvs_jvec_push(P, &pos, e) != KVS_OK)
        {
            return -1;
        }
    }
    kvs_jp_next(P);

    node->items = pos.v;
    node->nitems = pos.n;
    node->names = names;
    node->nnames = nnames;
    node->kwv = kwv.v;

    return 0;
}


kvs_jnode_t *
kvs_jp_filter(kvs_jparse_t *P, kvs_jnode_t *arg)
{
    kvs_jnode_t  *f;
    const char   *name;
    size_t        n;

    if ((f = kvs_jp_node(P, KVS_JN_FILTER)) == NULL) {
        return NULL;
    }
    if ((name = kvs_jp_name(P, &n)) == NULL) {
        return NULL;
    }
    if (!kvs_jb_has_filter(name, n)) {
        P->i--;
        return kvs_jp_fail(P, KVS_EUNSUPPORTED, "unsupported filter '%.*s'",
                           (int) (n > 40 ? 40 : n), name);
    }
    if ((f->s = kvs_jp_cstr(P, name, n)) == NULL) {
        return NULL;
    }
    f->sn = n;
    f->a = arg;
    if (kvs_jp_is_op(P, '(') && kvs_jp_args(P, f) != 0) {
        return NULL;
    }

    return f;
}


static kvs_jnode_t *
kvs_jp_test(kvs_jparse_t *P, kvs_jnode_t *arg)
{
    kvs_jnode_t        *t, *e;
    const kvs_jtok_t   *c;
    const char         *name;
    size_t              n;

    if ((t = kvs_jp_node(P, KVS_JN_TEST)) == NULL) {
        return NULL;
    }
    if (kvs_jp_is_name(kvs_jp_cur(P), "not")) {
        t->op = 1;
        kvs_jp_next(P);
    }
    if ((name = kvs_jp_name(P, &n)) == NULL) {
        return NULL;
    }
    if (!kvs_jb_has_test(name, n)) {
        P->i--;
        return kvs_jp_fail(P, KVS_EUNSUPPORTED, "unsupported test '%.*s'",
                           (int) (n > 40 ? 40 : n), name);
    }
    if ((t->s = kvs_jp_cstr(P, name, n)) == NULL) {
        return NULL;
    }
    t->sn = n;
    t->a = arg;

    c = kvs_jp_cur(P);
    if (c->type == KVS_JT_OP && c->op == '(') {
        if (kvs_jp_args(P, t) != 0) {
            return NULL;
        }

    } else if ((c->type == KVS_JT_NAME || c->type == KVS_JT_STRING
                || c->type == KVS_JT_INT || c->type == KVS_JT_FLOAT
                || (c->type == KVS_JT_OP && (c->op == '[' || c->op == '{')))
               && !kvs_jp_is_name(c, "else") && !kvs_jp_is_name(c, "or")
               && !kvs_jp_is_name(c, "and"))
    {
        /* one argument without parentheses: "is sameas false" */
        if ((e = kvs_jp_primary(P)) == NULL
            || (e = kvs_jp_postfix(P, e)) == NULL)
        {
            return NULL;
        }
        t->items = kvs_jarena_alloc(P->a, sizeof(kvs_jnode_t *));
        if (t->items == NULL) {
            return kvs_jp_fail(P, KVS_ENOMEM, "out of memory");
        }
        t->items[0] = e;
        t->nitems = 1;
    }

    return t;
}


/* [a:b:c] or [a] after obj; the "[" is current */
static kvs_jnode_t *
kvs_jp_subscript(kvs_jparse_t *P, kvs_jnode_t *obj)
{
    kvs_jnode_t  *n, *parts[3] = { NULL, NULL, NULL };
    int           k = 0, is_slice = 0;

    kvs_jp_next(P);
    for ( ;; ) {
        if (kvs_jp_is_op(P, ':')) {
            is_slice = 1;
            if (++k > 2) {
                return kvs_jp_unexpected(P, "']'");
            }
            kvs_jp_next(P);
            continue;
        }
        if (kvs_jp_is_op(P, ']')) {
            break;
        }
        if (parts[k] != NULL) {
            return kvs_jp_unexpected(P, "':' or ']'");
        }
        if ((parts[k] = kvs_jp_expr(P, 1)) == NULL) {
            return NULL;
        }
    }
    kvs_jp_next(P);

    if (!is_slice) {
        if (parts[0] == NULL) {
            return kvs_jp_fail(P, KVS_EFORMAT, "empty subscript");
        }
        if ((n = kvs_jp_node(P, KVS_JN_ITEM)) == NULL) {
            return NULL;
        }
        n->a = obj;
        n->b = parts[0];
        return n;
    }

    if ((n = kvs_jp_node(P, KVS_JN_SLICE)) == NULL) {
        return NULL;
    }
    n->a = obj;
    n->items = kvs_jarena_alloc(P->a, 3 * sizeof(kvs_jnode_t *));
    if (n->items == NULL) {
        return kvs_jp_fail(P, KVS_ENOMEM, "out of memory");
    }
    memcpy(n->items, parts, sizeof(parts));
    n->nitems = 3;

    return n;
}


static kvs_jnode_t *
kvs_jp_postfix(kvs_jparse_t *P, kvs_jnode_t *node)
{
    kvs_jnode_t  *n;
    const char   *name;
    size_t        len;

    for ( ;; ) {
        if (node == NULL) {
            return NULL;
        }
        if (kvs_jp_is_op(P, '.')) {
            kvs_jp_next(P);
            if (kvs_jp_cur(P)->type == KVS_JT_INT) {
                if ((n = kvs_jp_node(P, KVS_JN_ITEM)) == NULL
                    || (n->b = kvs_jp_primary(P)) == NULL)
                {
                    return NULL;
                }
                n->a = node;
                node = n;
                continue;
            }
            if ((n = kvs_jp_node(P, KVS_JN_ATTR)) == NULL
                || (name = kvs_jp_name(P, &len)) == NULL
                || (n->s = kvs_jp_cstr(P, name, len)) == NULL)
            {
                return NULL;
            }
            n->sn = len;
            n->a = node;
            node = n;

        } else if (kvs_jp_is_op(P, '[')) {
            node = kvs_jp_subscript(P, node);

        } else if (kvs_jp_is_op(P, '(')) {
            if ((n = kvs_jp_node(P, KVS_JN_CALL)) == NULL
                || kvs_jp_args(P, n) != 0)
            {
                return NULL;
            }
            n->a = node;
            node = n;

        } else {
            return node;
        }
    }
}


static kvs_jnode_t *
kvs_jp_filter_expr(kvs_jparse_t *P, kvs_jnode_t *node)
{
    kvs_jnode_t  *n;

    for ( ;; ) {
        if (node == NULL) {
            return NULL;
        }
        if (kvs_jp_is_op(P, '|')) {
            kvs_jp_next(P);
            node = kvs_jp_filter(P, node);

        } else if (kvs_jp_is_name(kvs_jp_cur(P), "is")) {
            kvs_jp_next(P);
            node = kvs_jp_test(P, node);

        } else if (kvs_jp_is_op(P, '(')) {
            if ((n = kvs_jp_node(P, KVS_JN_CALL)) == NULL
                || kvs_jp_args(P, n) != 0)
            {
                return NULL;
            }
            n->a = node;
            node = n;

        } else {
            return node;
        }
    }
}


/* items up to the closing op; "(" "[" or "{" is current */
static int
kvs_jp_seq(kvs_jparse_t *P, int close, kvs_jvec_t *keys, kvs_jvec_t *vals,
    int *trailing_comma)
{
    kvs_jnode_t  *e;

    kvs_jp_next(P);
    *trailing_comma = 0;
    while (!kvs_jp_is_op(P, close)) {
        if (keys->n > 0) {
            if (kvs_jp_expect_op(P, ',', "','") != 0) {
                return -1;
            }
            *trailing_comma = 1;
            if (kvs_jp_is_op(P, close)) {
                break;
            }
        }
        *trailing_comma = 0;
        if ((e = kvs_jp_expr(P, 1)) == NULL
            || kvs_jvec_push(P, keys, e) != KVS_OK)
        {
            return -1;
        }
        if (vals != NULL) {
            if (kvs_jp_expect_op(P, ':', "':'") != 0
                || (e = kvs_jp_expr(P, 1)) == NULL
                || kvs_jvec_push(P, vals, e) != KVS_OK)
            {
                return -1;
            }
        }
    }
    kvs_jp_next(P);

    return 0;
}


static kvs_jnode_t *
kvs_jp_primary(kvs_jparse_t *P)
{
    const kvs_jtok_t  *t = kvs_jp_cur(P);
    kvs_jnode_t       *n;
    kvs_jvec_t         k, v;
    char              *s;
    size_t             len, total;
    int                trailing;

    memset(&k, 0, sizeof(k));
    memset(&v, 0, sizeof(v));

    switch (t->type) {
    case KVS_JT_NAME:
        if ((n = kvs_jp_node(P, KVS_JN_CONST)) == NULL) {
            return NULL;
        }
        if (kvs_jp_is_name(t, "true") || kvs_jp_is_name(t, "True")) {
            n->val = kvs_jv_bool(1);
        } else if (kvs_jp_is_name(t, "false") || kvs_jp_is_name(t, "False"))
        {
            n->val = kvs_jv_bool(0);
        } else if (kvs_jp_is_name(t, "none") || kvs_jp_is_name(t, "None")) {
            n->val = kvs_jv_none();
        } else {
            n->kind = KVS_JN_NAME;
            if ((n->s = kvs_jp_cstr(P, t->p, t->n)) == NULL) {
                return NULL;
            }
            n->sn = t->n;
        }
        kvs_jp_next(P);
        return n;

    case KVS_JT_STRING:
        /* adjacent literals are one string, as in Python */
        len = 0;
        total = 0;
        while (kvs_jp_peek(P, len)->type == KVS_JT_STRING) {
            total += kvs_jp_peek(P, len)->n;
            len++;
        }
        s = (char *) t->p;
        if (len > 1) {
            size_t  j, off = 0;

            if ((s = kvs_jarena_alloc(P->a, total + 1)) == NULL) {
                return kvs_jp_fail(P, KVS_ENOMEM, "out of memory");
            }
            for (j = 0; j < len; j++) {
                memcpy(s + off, kvs_jp_peek(P, j)->p, kvs_jp_peek(P, j)->n);
                off += kvs_jp_peek(P, j)->n;
            }
        }
        if ((n = kvs_jp_node(P, KVS_JN_CONST)) == NULL) {
            return NULL;
        }
        n->val = kvs_jv_str(s, total);
        while (len--) {
            kvs_jp_next(P);
        }
        return n;

    case KVS_JT_INT:
        if ((n = kvs_jp_node(P, KVS_JN_CONST)) == NULL) {
            return NULL;
        }
        n->val = kvs_jv_int(t->i);
        kvs_jp_next(P);
        return n;

    case KVS_JT_FLOAT:
        if ((n = kvs_jp_node(P, KVS_JN_CONST)) == NULL) {
            return NULL;
        }
        n->val = kvs_jv_float(t->f);
        kvs_jp_next(P);
        return n;

    case KVS_JT_OP:
        if (t->op == '(') {
            if (kvs_jp_peek(P, 1)->type == KVS_JT_OP
                && kvs_jp_peek(P, 1)->op == ')')
            {
                kvs_jp_next(P);
                kvs_jp_next(P);
                return kvs_jp_node(P, KVS_JN_TUPLE);
            }
            kvs_jp_next(P);
            if ((n = kvs_jp_expr(P, 1)) == NULL) {
                return NULL;
            }
            if (kvs_jp_is_op(P, ')')) {
                kvs_jp_next(P);
                return n;
            }
            if (!kvs_jp_is_op(P, ',')) {
                return kvs_jp_unexpected(P, "')'");
            }
            if (kvs_jvec_push(P, &k, n) != KVS_OK) {
                return NULL;
            }
            P->i--;               /* kvs_jp_seq skips the opening token */
            if (kvs_jp_seq(P, ')', &k, NULL, &trailing) != 0
                || (n = kvs_jp_node(P, KVS_JN_TUPLE)) == NULL)
            {
                return NULL;
            }
            n->items = k.v;
            n->nitems = k.n;
            return n;
        }
        if (t->op == '[') {
            if (kvs_jp_seq(P, ']', &k, NULL, &trailing) != 0
                || (n = kvs_jp_node(P, KVS_JN_LIST)) == NULL)
            {
                return NULL;
            }
            n->items = k.v;
            n->nitems = k.n;
            return n;
        }
        if (t->op == '{') {
            if (kvs_jp_seq(P, '}', &k, &v, &trailing) != 0
                || (n = kvs_jp_node(P, KVS_JN_DICT)) == NULL)
            {
                return NULL;
            }
            n->items = k.v;
            n->nitems = k.n;
            n->kwv = v.v;
            return n;
        }
        break;

    default:
        break;
    }

    return kvs_jp_unexpected(P, "an expression");
}


static kvs_jnode_t *
kvs_jp_unary(kvs_jparse_t *P, int with_filter)
{
    kvs_jnode_t  *n, *e;

    if (++P->nest > KVS_JINJA_MAX_NEST) {
        return kvs_jp_fail(P, KVS_EUNSUPPORTED, "expression nested too "
                           "deeply");
    }

    if (kvs_jp_is_op(P, '-') || kvs_jp_is_op(P, '+')) {
        int  neg = kvs_jp_is_op(P, '-');

        if ((n = kvs_jp_node(P, neg ? KVS_JN_NEG : KVS_JN_POS)) == NULL) {
            return NULL;
        }
        kvs_jp_next(P);
        if ((e = kvs_jp_unary(P, 0)) == NULL) {
            return NULL;
        }
        n->a = e;
    } else {
        n = kvs_jp_primary(P);
    }

    n = kvs_jp_postfix(P, n);
    if (with_filter) {
        n = kvs_jp_filter_expr(P, n);
    }
    P->nest--;

    return n;
}


static kvs_jnode_t *
kvs_jp_binop(kvs_jparse_t *P, int op, kvs_jnode_t *l, kvs_jnode_t *r)
{
    kvs_jnode_t  *n;

    if (l == NULL || r == NULL || (n = kvs_jp_node(P, KVS_JN_BINOP)) == NULL)
    {
        return NULL;
    }
    n->op = (uint8_t) op;
    n->a = l;
    n->b = r;
    n->line = l->line;

    return n;
}


static kvs_jnode_t *
kvs_jp_pow(kvs_jparse_t *P)
{
    kvs_jnode_t  *l = kvs_jp_unary(P, 1);

    while (l != NULL && kvs_jp_is_op(P, KVS_JOP_POW)) {
        kvs_jp_next(P);
        l = kvs_jp_binop(P, KVS_JOP_POW, l, kvs_jp_unary(P, 1));
    }

    return l;
}


static kvs_jnode_t *
kvs_jp_math2(kvs_jparse_t *P)
{
    kvs_jnode_t  *l = kvs_jp_pow(P);
    int           op;

    while (l != NULL
           && (kvs_jp_is_op(P, '*') || kvs_jp_is_op(P, '/')
               || kvs_jp_is_op(P, KVS_JOP_FDIV) || kvs_jp_is_op(P, '%')))
    {
        op = kvs_jp_cur(P)->op;
        kvs_jp_next(P);
        l = kvs_jp_binop(P, op, l, kvs_jp_pow(P));
    }

    return l;
}


static kvs_jnode_t *
kvs_jp_concat(kvs_jparse_t *P)
{
    kvs_jnode_t  *l = kvs_jp_math2(P), *n, *e;
    kvs_jvec_t    v;

    if (l == NULL || !kvs_jp_is_op(P, '~')) {
        return l;
    }
    memset(&v, 0, sizeof(v));
    if (kvs_jvec_push(P, &v, l) != KVS_OK) {
        return NULL;
    }
    while (kvs_jp_is_op(P, '~')) {
        kvs_jp_next(P);
        if ((e = kvs_jp_math2(P)) == NULL || kvs_jvec_push(P, &v, e) != KVS_OK)
        {
            return NULL;
        }
    }
    if ((n = kvs_jp_node(P, KVS_JN_CONCAT)) == NULL) {
        return NULL;
    }
    n->items = v.v;
    n->nitems = v.n;

    return n;
}


static kvs_jnode_t *
kvs_jp_math1(kvs_jparse_t *P)
{
    kvs_jnode_t  *l = kvs_jp_concat(P);
    int           op;

    while (l != NULL && (kvs_jp_is_op(P, '+') || kvs_jp_is_op(P, '-'))) {
        op = kvs_jp_cur(P)->op;
        kvs_jp_next(P);
        l = kvs_jp_binop(P, op, l, kvs_jp_concat(P));
    }

    return l;
}


static kvs_jnode_t *
kvs_jp_compare(kvs_jparse_t *P)
{
    kvs_jnode_t        *l = kvs_jp_math1(P), *n, *e;
    kvs_jvec_t          v;
    uint8_t             ops[64];
    const kvs_jtok_t   *t;
    int                 op;

    memset(&v, 0, sizeof(v));
    while (l != NULL) {
        t = kvs_jp_cur(P);
        op = 0;
        if (t->type == KVS_JT_OP
            && (t->op == KVS_JOP_EQ || t->op == KVS_JOP_NE || t->op == '<'
                || t->op == '>' || t->op == KVS_JOP_LE || t->op == KVS_JOP_GE))
        {
            op = t->op;
            kvs_jp_next(P);
        } else if (kvs_jp_is_name(t, "in")) {
            op = KVS_JCMP_IN;
            kvs_jp_next(P);
        } else if (kvs_jp_is_name(t, "not")
                   && kvs_jp_is_name(kvs_jp_peek(P, 1), "in"))
        {
            op = KVS_JCMP_NOTIN;
            kvs_jp_next(P);
            kvs_jp_next(P);
        }
        if (op == 0) {
            break;
        }
        if (v.n == sizeof(ops)) {
            return kvs_jp_fail(P, KVS_EUNSUPPORTED, "comparison chain too "
                               "long");
        }
        ops[v.n] = (uint8_t) op;
        if ((e = kvs_jp_math1(P)) == NULL || kvs_jvec_push(P, &v, e) != KVS_OK)
        {
            return NULL;
        }
    }
    if (l == NULL || v.n == 0) {
        return l;
    }

    if ((n = kvs_jp_node(P, KVS_JN_COMPARE)) == NULL
        || (n->ops = kvs_jarena_dup(P->a, ops, v.n)) == NULL)
    {
        return kvs_jp_fail(P, KVS_ENOMEM, "out of memory");
    }
    n->a = l;
    n->items = v.v;
    n->nitems = v.n;
    n->line = l->line;

    return n;
}


static kvs_jnode_t *
kvs_jp_not(kvs_jparse_t *P)
{
    kvs_jnode_t  *n;

    if (kvs_jp_is_name(kvs_jp_cur(P), "not")) {
        if (++P->nest > KVS_JINJA_MAX_NEST) {
            return kvs_jp_fail(P, KVS_EUNSUPPORTED, "expression nested too "
                               "deeply");
        }
        if ((n = kvs_jp_node(P, KVS_JN_NOT)) == NULL) {
            return NULL;
        }
        kvs_jp_next(P);
        if ((n->a = kvs_jp_not(P)) == NULL) {
            return NULL;
        }
        P->nest--;
        return n;
    }

    return kvs_jp_compare(P);
}


/* a left-associative chain of the keyword operator `word` (kind) over
 * operands parsed by `operand`: `and` over `not`, `or` over `and` */
static kvs_jnode_t *
kvs_jp_chain(kvs_jparse_t *P, const char *word, int kind,
    kvs_jnode_t *(*operand)(kvs_jparse_t *))
{
    kvs_jnode_t  *l = operand(P), *n;

    while (l != NULL && kvs_jp_is_name(kvs_jp_cur(P), word)) {
        kvs_jp_next(P);
        if ((n = kvs_jp_node(P, kind)) == NULL) {
            return NULL;
        }
        n->a = l;
        if ((n->b = operand(P)) == NULL) {
            return NULL;
        }
        l = n;
    }

    return l;
}


static kvs_jnode_t *
kvs_jp_and(kvs_jparse_t *P)
{
    return kvs_jp_chain(P, "and", KVS_JN_AND, kvs_jp_not);
}


static kvs_jnode_t *
kvs_jp_or(kvs_jparse_t *P)
{
    return kvs_jp_chain(P, "or", KVS_JN_OR, kvs_jp_and);
}


kvs_jnode_t *
kvs_jp_expr(kvs_jparse_t *P, int condexpr)
{
    kvs_jnode_t  *e, *n;

    if (++P->nest > KVS_JINJA_MAX_NEST) {
        return kvs_jp_fail(P, KVS_EUNSUPPORTED, "expression nested too "
                           "deeply");
    }

    e = kvs_jp_or(P);
    while (condexpr && e != NULL && kvs_jp_is_name(kvs_jp_cur(P), "if")) {
        kvs_jp_next(P);
        if ((n = kvs_jp_node(P, KVS_JN_COND)) == NULL) {
            return NULL;
        }
        n->b = e;
        if ((n->a = kvs_jp_or(P)) == NULL) {
            return NULL;
        }
        if (kvs_jp_is_name(kvs_jp_cur(P), "else")) {
            kvs_jp_next(P);
            if ((n->c = kvs_jp_expr(P, 1)) == NULL) {
                return NULL;
            }
        }
        e = n;
    }
    P->nest--;

    return e;
}


/* expr or a bare tuple "a, b" (set's value, for's iterable) */
kvs_jnode_t *
kvs_jp_tuple(kvs_jparse_t *P, int condexpr)
{
    kvs_jnode_t  *e, *n;
    kvs_jvec_t    v;

    if ((e = kvs_jp_expr(P, condexpr)) == NULL || !kvs_jp_is_op(P, ',')) {
        return e;
    }
    memset(&v, 0, sizeof(v));
    if (kvs_jvec_push(P, &v, e) != KVS_OK) {
        return NULL;
    }
    while (kvs_jp_is_op(P, ',')) {
        kvs_jp_next(P);
        if (kvs_jp_cur(P)->type == KVS_JT_BLOCK_END) {
            break;
        }
        if ((e = kvs_jp_expr(P, condexpr)) == NULL
            || kvs_jvec_push(P, &v, e) != KVS_OK)
        {
            return NULL;
        }
    }
    if ((n = kvs_jp_node(P, KVS_JN_TUPLE)) == NULL) {
        return NULL;
    }
    n->items = v.v;
    n->nitems = v.n;

    return n;
}
