/*
 * kvs_jinja_parse: tokens to a syntax tree, by recursive descent with
 * jinja2's grammar and precedence (conditional < or < and < not <
 * comparison < + - < ~ < * / // % < ** < unary - < postfix, filters and
 * tests).  Every error names the construct and its line, and a statement,
 * filter or test outside the supported subset is refused here, so that a
 * template that compiles can only fail at render time on its data.
 * Nesting is bounded (KVS_JINJA_MAX_NEST) so that the recursion here and
 * in the evaluator cannot exhaust the stack.
 */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/kvs_utf8.h"
#include "kvs_jinja_impl.h"


typedef struct {
    kvs_jarena_t      *a;
    const kvs_jtok_t  *t;
    size_t             n;
    size_t             i;
    unsigned           nest;
    kvs_err_t         *err;
} kvs_jparse_t;

/* a growing array of node pointers (in the arena) */
typedef struct {
    kvs_jnode_t  **v;
    size_t         n;
    size_t         cap;
} kvs_jvec_t;


static kvs_jnode_t *kvs_jp_expr(kvs_jparse_t *P, int condexpr);
static kvs_jnode_t *kvs_jp_or(kvs_jparse_t *P);
static kvs_jnode_t *kvs_jp_unary(kvs_jparse_t *P, int with_filter);
static kvs_jnode_t *kvs_jp_primary(kvs_jparse_t *P);
static kvs_jnode_t *kvs_jp_postfix(kvs_jparse_t *P, kvs_jnode_t *node);
static int kvs_jp_body(kvs_jparse_t *P, const char *const *stop,
    kvs_jvec_t *out);


static const kvs_jtok_t *
kvs_jp_cur(kvs_jparse_t *P)
{
    return &P->t[P->i];
}


static const kvs_jtok_t *
kvs_jp_peek(kvs_jparse_t *P, size_t k)
{
    return &P->t[P->i + k < P->n ? P->i + k : P->n - 1];
}


static void
kvs_jp_next(kvs_jparse_t *P)
{
    if (P->i + 1 < P->n) {
        P->i++;
    }
}


static const char *
kvs_jp_desc(const kvs_jtok_t *t, char *buf, size_t len)
{
    switch (t->type) {
    case KVS_JT_TEXT: return "text";
    case KVS_JT_VAR_BEGIN: return "'{{'";
    case KVS_JT_VAR_END: return "'}}'";
    case KVS_JT_BLOCK_BEGIN: return "'{%'";
    case KVS_JT_BLOCK_END: return "'%}'";
    case KVS_JT_NAME:
        snprintf(buf, len, "'%.*s'", (int) (t->n > 40 ? 40 : t->n), t->p);
        return buf;
    case KVS_JT_STRING: return "a string";
    case KVS_JT_INT: case KVS_JT_FLOAT: return "a number";
    case KVS_JT_EOF: return "the end of the template";
    default:
        switch (t->op) {
        case KVS_JOP_EQ: return "'=='";
        case KVS_JOP_NE: return "'!='";
        case KVS_JOP_LE: return "'<='";
        case KVS_JOP_GE: return "'>='";
        case KVS_JOP_FDIV: return "'//'";
        case KVS_JOP_POW: return "'**'";
        }
        snprintf(buf, len, "'%c'", t->op);
        return buf;
    }
}


static kvs_jnode_t *
kvs_jp_fail(kvs_jparse_t *P, int code, const char *fmt, ...)
{
    char     msg[KVS_ERR_MSG_LEN];
    va_list  ap;

    if (P->err != NULL && P->err->code != KVS_OK) {
        return NULL;                  /* the first error stands */
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    kvs_err_set(P->err, code, "line %u: %s", kvs_jp_cur(P)->line, msg);

    return NULL;
}


static kvs_jnode_t *
kvs_jp_unexpected(kvs_jparse_t *P, const char *want)
{
    char  buf[64];

    return kvs_jp_fail(P, KVS_EFORMAT, "expected %s, got %s", want,
                       kvs_jp_desc(kvs_jp_cur(P), buf, sizeof(buf)));
}


static kvs_jnode_t *
kvs_jp_node(kvs_jparse_t *P, int kind)
{
    kvs_jnode_t  *n;

    n = kvs_jarena_alloc(P->a, sizeof(kvs_jnode_t));
    if (n == NULL) {
        kvs_jp_fail(P, KVS_ENOMEM, "out of memory");
        return NULL;
    }
    memset(n, 0, sizeof(*n));
    n->kind = (uint8_t) kind;
    n->line = kvs_jp_cur(P)->line;

    return n;
}


static int
kvs_jvec_push(kvs_jparse_t *P, kvs_jvec_t *v, kvs_jnode_t *n)
{
    kvs_jnode_t  **nv;
    size_t         cap;

    if (v->n == v->cap) {
        cap = v->cap ? v->cap * 2 : 4;
        nv = kvs_jarena_alloc(P->a, cap * sizeof(*nv));
        if (nv == NULL) {
            kvs_jp_fail(P, KVS_ENOMEM, "out of memory");
            return KVS_ENOMEM;
        }
        if (v->n) {
            memcpy(nv, v->v, v->n * sizeof(*nv));
        }
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = n;

    return KVS_OK;
}


static int
kvs_jp_is_op(kvs_jparse_t *P, int op)
{
    const kvs_jtok_t  *t = kvs_jp_cur(P);

    return t->type == KVS_JT_OP && t->op == op;
}


static int
kvs_jp_is_name(const kvs_jtok_t *t, const char *name)
{
    return t->type == KVS_JT_NAME && t->n == strlen(name)
           && memcmp(t->p, name, t->n) == 0;
}


static int
kvs_jp_expect_op(kvs_jparse_t *P, int op, const char *desc)
{
    if (!kvs_jp_is_op(P, op)) {
        kvs_jp_unexpected(P, desc);
        return -1;
    }
    kvs_jp_next(P);

    return 0;
}


static const char *
kvs_jp_name(kvs_jparse_t *P, size_t *len)
{
    const kvs_jtok_t  *t = kvs_jp_cur(P);

    if (t->type != KVS_JT_NAME) {
        kvs_jp_unexpected(P, "a name");
        return NULL;
    }
    kvs_jp_next(P);
    *len = t->n;

    return t->p;
}


static const char *
kvs_jp_cstr(kvs_jparse_t *P, const char *p, size_t n)
{
    char  *s;

    s = kvs_jarena_alloc(P->a, n + 1);
    if (s == NULL) {
        kvs_jp_fail(P, KVS_ENOMEM, "out of memory");
        return NULL;
    }
    memcpy(s, p, n);
    s[n] = '\0';

    return s;
}


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


static kvs_jnode_t *
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


static kvs_jnode_t *
kvs_jp_and(kvs_jparse_t *P)
{
    kvs_jnode_t  *l = kvs_jp_not(P), *n;

    while (l != NULL && kvs_jp_is_name(kvs_jp_cur(P), "and")) {
        kvs_jp_next(P);
        if ((n = kvs_jp_node(P, KVS_JN_AND)) == NULL) {
            return NULL;
        }
        n->a = l;
        if ((n->b = kvs_jp_not(P)) == NULL) {
            return NULL;
        }
        l = n;
    }

    return l;
}


static kvs_jnode_t *
kvs_jp_or(kvs_jparse_t *P)
{
    kvs_jnode_t  *l = kvs_jp_and(P), *n;

    while (l != NULL && kvs_jp_is_name(kvs_jp_cur(P), "or")) {
        kvs_jp_next(P);
        if ((n = kvs_jp_node(P, KVS_JN_OR)) == NULL) {
            return NULL;
        }
        n->a = l;
        if ((n->b = kvs_jp_and(P)) == NULL) {
            return NULL;
        }
        l = n;
    }

    return l;
}


static kvs_jnode_t *
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
static kvs_jnode_t *
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


/* --- statements ----------------------------------------------------------- */

static int
kvs_jp_block_end(kvs_jparse_t *P)
{
    if (kvs_jp_cur(P)->type != KVS_JT_BLOCK_END) {
        kvs_jp_unexpected(P, "'%}'");
        return -1;
    }
    kvs_jp_next(P);

    return 0;
}


/* names "a" or "a, b" or "(a, b)" */
static int
kvs_jp_targets(kvs_jparse_t *P, kvs_jnode_t *n)
{
    const char   *names[16], *name;
    size_t        k = 0, len;
    int           paren = 0;

    if (kvs_jp_is_op(P, '(')) {
        paren = 1;
        kvs_jp_next(P);
    }
    for ( ;; ) {
        if ((name = kvs_jp_name(P, &len)) == NULL) {
            return -1;
        }
        if (k == 16) {
            kvs_jp_fail(P, KVS_EUNSUPPORTED, "too many targets");
            return -1;
        }
        if ((names[k++] = kvs_jp_cstr(P, name, len)) == NULL) {
            return -1;
        }
        if (!kvs_jp_is_op(P, ',')) {
            break;
        }
        kvs_jp_next(P);
    }
    if (paren && kvs_jp_expect_op(P, ')', "')'") != 0) {
        return -1;
    }
    n->names = kvs_jarena_dup(P->a, names, k * sizeof(names[0]));
    if (n->names == NULL) {
        kvs_jp_fail(P, KVS_ENOMEM, "out of memory");
        return -1;
    }
    n->nnames = k;
    if (paren || k > 1) {
        n->op = 1;                    /* unpack even one */
    }

    return 0;
}


/* the body up to {% end... %}, consuming it */
static int
kvs_jp_end(kvs_jparse_t *P, const char *end, kvs_jvec_t *body)
{
    const char  *stop[2] = { end, NULL };

    if (kvs_jp_body(P, stop, body) != 0) {
        return -1;
    }
    kvs_jp_next(P);                   /* the end name */

    return kvs_jp_block_end(P);
}


/* macro and call parameters: "(a, b=1)" */
static int
kvs_jp_params(kvs_jparse_t *P, kvs_jnode_t *n)
{
    kvs_jvec_t    names, defs;
    const char   *name;
    size_t        len;
    kvs_jnode_t  *e;
    int           any_default = 0;

    memset(&names, 0, sizeof(names));
    memset(&defs, 0, sizeof(defs));
    if (kvs_jp_expect_op(P, '(', "'('") != 0) {
        return -1;
    }
    while (!kvs_jp_is_op(P, ')')) {
        if (names.n > 0 && kvs_jp_expect_op(P, ',', "',' or ')'") != 0) {
            return -1;
        }
        if (kvs_jp_is_op(P, ')')) {
            break;
        }
        if ((name = kvs_jp_name(P, &len)) == NULL) {
            return -1;
        }
        e = NULL;
        if (kvs_jp_is_op(P, '=')) {
            kvs_jp_next(P);
            if ((e = kvs_jp_expr(P, 1)) == NULL) {
                return -1;
            }
            any_default = 1;
        } else if (any_default) {
            kvs_jp_fail(P, KVS_EFORMAT, "parameter without a default after "
                        "one with a default");
            return -1;
        }
        if (kvs_jvec_push(P, &names, (kvs_jnode_t *) kvs_jp_cstr(P, name, len))
            != KVS_OK
            || names.v[names.n - 1] == NULL
            || kvs_jvec_push(P, &defs, e) != KVS_OK)
        {
            return -1;
        }
    }
    kvs_jp_next(P);

    n->names = (const char **) names.v;
    n->nnames = names.n;
    n->items = defs.v;
    n->nitems = defs.n;

    return 0;
}


static kvs_jnode_t *
kvs_jp_stmt(kvs_jparse_t *P)
{
    const kvs_jtok_t  *t = kvs_jp_cur(P);
    kvs_jnode_t       *n, *f;
    kvs_jvec_t         body, els, filters;
    uint32_t           line = t->line;
    const char        *elif_stop[] = { "elif", "else", "endif", NULL };
    const char        *for_stop[] = { "else", "endfor", NULL };
    const char        *name;
    size_t             len;

    memset(&body, 0, sizeof(body));
    memset(&els, 0, sizeof(els));
    memset(&filters, 0, sizeof(filters));

    if (t->type != KVS_JT_NAME) {
        return kvs_jp_unexpected(P, "a statement name");
    }

    if (kvs_jp_is_name(t, "if") || kvs_jp_is_name(t, "elif")) {
        if ((n = kvs_jp_node(P, KVS_JN_IF)) == NULL) {
            return NULL;
        }
        kvs_jp_next(P);
        if ((n->a = kvs_jp_tuple(P, 1)) == NULL || kvs_jp_block_end(P) != 0
            || kvs_jp_body(P, elif_stop, &body) != 0)
        {
            return NULL;
        }
        n->body = body.v;
        n->nbody = body.n;
        t = kvs_jp_cur(P);
        if (kvs_jp_is_name(t, "elif")) {
            if ((f = kvs_jp_stmt(P)) == NULL
                || kvs_jvec_push(P, &els, f) != KVS_OK)
            {
                return NULL;
            }
            /* the nested if consumed the endif */
            n->else_ = els.v;
            n->nelse = els.n;
            return n;
        }
        if (kvs_jp_is_name(t, "else")) {
            kvs_jp_next(P);
            if (kvs_jp_block_end(P) != 0
                || kvs_jp_end(P, "endif", &els) != 0)
            {
                return NULL;
            }
            n->else_ = els.v;
            n->nelse = els.n;
            return n;
        }
        kvs_jp_next(P);
        return kvs_jp_block_end(P) == 0 ? n : NULL;
    }

    if (kvs_jp_is_name(t, "for")) {
        if ((n = kvs_jp_node(P, KVS_JN_FOR)) == NULL) {
            return NULL;
        }
        kvs_jp_next(P);
        if (kvs_jp_targets(P, n) != 0) {
            return NULL;
        }
        if (!kvs_jp_is_name(kvs_jp_cur(P), "in")) {
            return kvs_jp_unexpected(P, "'in'");
        }
        kvs_jp_next(P);
        if ((n->a = kvs_jp_tuple(P, 0)) == NULL) {
            return NULL;
        }
        if (kvs_jp_is_name(kvs_jp_cur(P), "if")) {
            kvs_jp_next(P);
            if ((n->b = kvs_jp_expr(P, 1)) == NULL) {
                return NULL;
            }
        }
        if (kvs_jp_is_name(kvs_jp_cur(P), "recursive")) {
            return kvs_jp_fail(P, KVS_EUNSUPPORTED, "unsupported recursive "
                               "for loop");
        }
        if (kvs_jp_block_end(P) != 0 || kvs_jp_body(P, for_stop, &body) != 0)
        {
            return NULL;
        }
        n->body = body.v;
        n->nbody = body.n;
        if (kvs_jp_is_name(kvs_jp_cur(P), "else")) {
            kvs_jp_next(P);
            if (kvs_jp_block_end(P) != 0
                || kvs_jp_end(P, "endfor", &els) != 0)
            {
                return NULL;
            }
            n->else_ = els.v;
            n->nelse = els.n;
            return n;
        }
        kvs_jp_next(P);
        return kvs_jp_block_end(P) == 0 ? n : NULL;
    }

    if (kvs_jp_is_name(t, "set")) {
        kvs_jp_next(P);
        if (kvs_jp_cur(P)->type == KVS_JT_NAME
            && kvs_jp_peek(P, 1)->type == KVS_JT_OP
            && kvs_jp_peek(P, 1)->op == '.')
        {
            if ((n = kvs_jp_node(P, KVS_JN_SET_ATTR)) == NULL
                || (name = kvs_jp_name(P, &len)) == NULL
                || (n->s = kvs_jp_cstr(P, name, len)) == NULL)
            {
                return NULL;
            }
            n->sn = len;
            kvs_jp_next(P);
            if ((name = kvs_jp_name(P, &len)) == NULL
                || (n->s2 = kvs_jp_cstr(P, name, len)) == NULL)
            {
                return NULL;
            }
            if (kvs_jp_expect_op(P, '=', "'='") != 0
                || (n->a = kvs_jp_tuple(P, 1)) == NULL
                || kvs_jp_block_end(P) != 0)
            {
                return NULL;
            }
            return n;
        }
        if ((n = kvs_jp_node(P, KVS_JN_SET)) == NULL
            || kvs_jp_targets(P, n) != 0)
        {
            return NULL;
        }
        if (kvs_jp_is_op(P, '=')) {
            kvs_jp_next(P);
            if ((n->a = kvs_jp_tuple(P, 1)) == NULL
                || kvs_jp_block_end(P) != 0)
            {
                return NULL;
            }
            return n;
        }
        if (n->nnames != 1 || n->op) {
            return kvs_jp_unexpected(P, "'='");
        }
        /* a block set, with optional filters */
        n->kind = KVS_JN_SET_BLOCK;
        n->s = n->names[0];
        while (kvs_jp_is_op(P, '|')) {
            kvs_jp_next(P);
            if ((f = kvs_jp_filter(P, NULL)) == NULL
                || kvs_jvec_push(P, &filters, f) != KVS_OK)
            {
                return NULL;
            }
        }
        if (kvs_jp_block_end(P) != 0 || kvs_jp_end(P, "endset", &body) != 0)
        {
            return NULL;
        }
        n->items = filters.v;
        n->nitems = filters.n;
        n->body = body.v;
        n->nbody = body.n;
        return n;
    }

    if (kvs_jp_is_name(t, "macro")) {
        if ((n = kvs_jp_node(P, KVS_JN_MACRO)) == NULL) {
            return NULL;
        }
        kvs_jp_next(P);
        if ((name = kvs_jp_name(P, &len)) == NULL
            || (n->s = kvs_jp_cstr(P, name, len)) == NULL)
        {
            return NULL;
        }
        n->sn = len;
        if (kvs_jp_params(P, n) != 0 || kvs_jp_block_end(P) != 0
            || kvs_jp_end(P, "endmacro", &body) != 0)
        {
            return NULL;
        }
        n->body = body.v;
        n->nbody = body.n;
        return n;
    }

    if (kvs_jp_is_name(t, "call")) {
        if ((n = kvs_jp_node(P, KVS_JN_CALLBLOCK)) == NULL) {
            return NULL;
        }
        kvs_jp_next(P);
        if (kvs_jp_is_op(P, '(') && kvs_jp_params(P, n) != 0) {
            return NULL;
        }
        if ((n->a = kvs_jp_expr(P, 1)) == NULL) {
            return NULL;
        }
        if (n->a->kind != KVS_JN_CALL) {
            return kvs_jp_fail(P, KVS_EFORMAT, "expected a call after "
                               "'call'");
        }
        if (kvs_jp_block_end(P) != 0 || kvs_jp_end(P, "endcall", &body) != 0)
        {
            return NULL;
        }
        n->body = body.v;
        n->nbody = body.n;
        return n;
    }

    if (kvs_jp_is_name(t, "filter")) {
        if ((n = kvs_jp_node(P, KVS_JN_FILTERBLOCK)) == NULL) {
            return NULL;
        }
        kvs_jp_next(P);
        do {
            if (filters.n > 0) {
                kvs_jp_next(P);
            }
            if ((f = kvs_jp_filter(P, NULL)) == NULL
                || kvs_jvec_push(P, &filters, f) != KVS_OK)
            {
                return NULL;
            }
        } while (kvs_jp_is_op(P, '|'));
        if (kvs_jp_block_end(P) != 0
            || kvs_jp_end(P, "endfilter", &body) != 0)
        {
            return NULL;
        }
        n->items = filters.v;
        n->nitems = filters.n;
        n->body = body.v;
        n->nbody = body.n;
        return n;
    }

    if (kvs_jp_is_name(t, "generation")) {
        if ((n = kvs_jp_node(P, KVS_JN_BLOCK)) == NULL) {
            return NULL;
        }
        kvs_jp_next(P);
        if (kvs_jp_block_end(P) != 0
            || kvs_jp_end(P, "endgeneration", &body) != 0)
        {
            return NULL;
        }
        n->body = body.v;
        n->nbody = body.n;
        return n;
    }

    if (kvs_jp_is_name(t, "break") || kvs_jp_is_name(t, "continue")) {
        n = kvs_jp_node(P, kvs_jp_is_name(t, "break") ? KVS_JN_BREAK
                                                      : KVS_JN_CONTINUE);
        if (n == NULL) {
            return NULL;
        }
        kvs_jp_next(P);
        return kvs_jp_block_end(P) == 0 ? n : NULL;
    }

    (void) line;
    if (t->n >= 3 && (memcmp(t->p, "end", 3) == 0 || kvs_jp_is_name(t, "else")
                      || kvs_jp_is_name(t, "elif")))
    {
        return kvs_jp_fail(P, KVS_EFORMAT, "unexpected '%.*s'",
                           (int) (t->n > 40 ? 40 : t->n), t->p);
    }

    return kvs_jp_fail(P, KVS_EUNSUPPORTED, "unsupported statement '%.*s'",
                       (int) (t->n > 40 ? 40 : t->n), t->p);
}


static int
kvs_jp_is_stop(const kvs_jtok_t *t, const char *const *stop)
{
    for ( ; stop != NULL && *stop != NULL; stop++) {
        if (kvs_jp_is_name(t, *stop)) {
            return 1;
        }
    }

    return 0;
}


/* statements until a {% name %} with name in stop (left current, after
 * its "{%"), or the end of the template when stop is NULL */
static int
kvs_jp_body(kvs_jparse_t *P, const char *const *stop, kvs_jvec_t *out)
{
    const kvs_jtok_t  *t;
    kvs_jnode_t       *n;
    uint32_t           opened = P->i > 0 ? P->t[P->i - 1].line : 1;

    if (++P->nest > KVS_JINJA_MAX_NEST) {
        kvs_jp_fail(P, KVS_EUNSUPPORTED, "blocks nested too deeply");
        return -1;
    }

    for ( ;; ) {
        t = kvs_jp_cur(P);
        switch (t->type) {
        case KVS_JT_EOF:
            if (stop != NULL) {
                const char *const  *last = stop;

                while (last[1] != NULL) {
                    last++;
                }
                kvs_jp_fail(P, KVS_EFORMAT, "unexpected end of template: "
                            "missing '%s' for the block of line %u", *last,
                            opened);
                return -1;
            }
            P->nest--;
            return 0;

        case KVS_JT_TEXT:
            if ((n = kvs_jp_node(P, KVS_JN_TEXT)) == NULL) {
                return -1;
            }
            n->s = t->p;
            n->sn = t->n;
            kvs_jp_next(P);
            break;

        case KVS_JT_VAR_BEGIN:
            kvs_jp_next(P);
            if ((n = kvs_jp_node(P, KVS_JN_OUTPUT)) == NULL
                || (n->a = kvs_jp_tuple(P, 1)) == NULL)
            {
                return -1;
            }
            if (kvs_jp_cur(P)->type != KVS_JT_VAR_END) {
                kvs_jp_unexpected(P, "'}}'");
                return -1;
            }
            kvs_jp_next(P);
            break;

        case KVS_JT_BLOCK_BEGIN:
            kvs_jp_next(P);
            if (kvs_jp_is_stop(kvs_jp_cur(P), stop)) {
                P->nest--;
                return 0;
            }
            if ((n = kvs_jp_stmt(P)) == NULL) {
                return -1;
            }
            break;

        default:
            kvs_jp_unexpected(P, "text or a tag");
            return -1;
        }

        if (kvs_jvec_push(P, out, n) != KVS_OK) {
            return -1;
        }
    }
}


int
kvs_jinja_parse(kvs_jarena_t *a, const kvs_jtok_t *toks, size_t n,
    kvs_jnode_t ***body, size_t *nbody, kvs_err_t *err)
{
    kvs_jparse_t  P;
    kvs_jvec_t    v;

    memset(&P, 0, sizeof(P));
    memset(&v, 0, sizeof(v));
    P.a = a;
    P.t = toks;
    P.n = n;
    P.err = err;

    if (err != NULL) {
        err->code = KVS_OK;
    }
    if (kvs_jp_body(&P, NULL, &v) != 0) {
        return err != NULL && err->code != KVS_OK ? err->code : KVS_EFORMAT;
    }
    *body = v.v;
    *nbody = v.n;

    return KVS_OK;
}


/* --- compile -------------------------------------------------------------- */

void
kvs_jinja_opts_default(kvs_jinja_opts_t *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->max_steps = 2000000;
    opts->max_output = 4u << 20;
    opts->max_depth = 64;
    opts->max_memory = 64u << 20;
}


int
kvs_jinja_compile(kvs_jinja_t **out, const char *src, size_t len,
    kvs_err_t *err)
{
    kvs_jinja_t   *tpl;
    kvs_jarena_t   a;
    kvs_jtok_t    *toks;
    char          *s;
    size_t         i, n, ntoks, bad;
    int            rc;

    *out = NULL;
    if (src == NULL && len > 0) {
        return kvs_err_set(err, KVS_EINVAL, "no template text");
    }
    bad = kvs_utf8_invalid_at((const uint8_t *) src, len);
    if (bad < len) {
        return kvs_err_set(err, KVS_EFORMAT, "template is not UTF-8 (byte "
                           "%zu)", bad);
    }
    if (memchr(src, '\0', len) != NULL) {
        return kvs_err_set(err, KVS_EFORMAT, "template contains a NUL byte");
    }

    memset(&a, 0, sizeof(a));
    tpl = kvs_jarena_alloc(&a, sizeof(*tpl));
    s = kvs_jarena_alloc(&a, len + 1);
    if (tpl == NULL || s == NULL) {
        kvs_jarena_free(&a);
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    /* jinja2 reads "\r\n" and "\r" as "\n" (in string literals too) and
     * drops one newline at the very end (keep_trailing_newline=False) */
    for (i = 0, n = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') {
                i++;
            }
        } else {
            s[n++] = src[i];
        }
    }
    if (n > 0 && s[n - 1] == '\n') {
        n--;
    }
    s[n] = '\0';

    rc = kvs_jinja_lex(&a, s, n, &toks, &ntoks, err);
    if (rc == KVS_OK) {
        memset(tpl, 0, sizeof(*tpl));
        rc = kvs_jinja_parse(&a, toks, ntoks, &tpl->body, &tpl->nbody, err);
    }
    if (rc != KVS_OK) {
        kvs_jarena_free(&a);
        return rc;
    }

    tpl->arena = a;
    *out = tpl;

    return KVS_OK;
}


void
kvs_jinja_free(kvs_jinja_t *tpl)
{
    kvs_jarena_t  a;

    if (tpl == NULL) {
        return;
    }
    a = tpl->arena;                   /* tpl itself lives in the arena */
    kvs_jarena_free(&a);
}
