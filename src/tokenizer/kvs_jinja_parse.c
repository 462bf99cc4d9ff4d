/*
 * kvs_jinja_parse: tokens to a syntax tree (statements here, expressions
 * in kvs_jinja_expr.c), and kvs_jinja_compile.  Every error names the
 * construct and its line, and a statement, filter or test outside the
 * supported subset is refused here, so that a template that compiles can
 * only fail at render time on its data.  Block nesting is bounded
 * (KVS_JINJA_MAX_NEST), as expressions are, so that neither this
 * recursion nor the evaluator's can exhaust the stack.
 */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/kvs_utf8.h"
#include "kvs_jinja_parse.h"


static int kvs_jp_body(kvs_jparse_t *P, const char *const *stop,
    kvs_jvec_t *out);


const kvs_jtok_t *
kvs_jp_cur(kvs_jparse_t *P)
{
    return &P->t[P->i];
}


const kvs_jtok_t *
kvs_jp_peek(kvs_jparse_t *P, size_t k)
{
    return &P->t[P->i + k < P->n ? P->i + k : P->n - 1];
}


void
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


kvs_jnode_t *
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


kvs_jnode_t *
kvs_jp_unexpected(kvs_jparse_t *P, const char *want)
{
    char  buf[64];

    return kvs_jp_fail(P, KVS_EFORMAT, "expected %s, got %s", want,
                       kvs_jp_desc(kvs_jp_cur(P), buf, sizeof(buf)));
}


kvs_jnode_t *
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


int
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


int
kvs_jp_is_op(kvs_jparse_t *P, int op)
{
    const kvs_jtok_t  *t = kvs_jp_cur(P);

    return t->type == KVS_JT_OP && t->op == op;
}


int
kvs_jp_is_name(const kvs_jtok_t *t, const char *name)
{
    return t->type == KVS_JT_NAME && t->n == strlen(name)
           && memcmp(t->p, name, t->n) == 0;
}


int
kvs_jp_expect_op(kvs_jparse_t *P, int op, const char *desc)
{
    if (!kvs_jp_is_op(P, op)) {
        kvs_jp_unexpected(P, desc);
        return -1;
    }
    kvs_jp_next(P);

    return 0;
}


const char *
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


const char *
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


/*
 * An if's or for's end, at its "else" or end name: "{% else %} ...
 * {% END %}" into n's else branch, or "{% END %}"; n, or NULL.
 */
static kvs_jnode_t *
kvs_jp_else(kvs_jparse_t *P, kvs_jnode_t *n, const char *end)
{
    kvs_jvec_t  els;

    if (kvs_jp_is_name(kvs_jp_cur(P), "else")) {
        memset(&els, 0, sizeof(els));
        kvs_jp_next(P);
        if (kvs_jp_block_end(P) != 0 || kvs_jp_end(P, end, &els) != 0) {
            return NULL;
        }
        n->else_ = els.v;
        n->nelse = els.n;
        return n;
    }
    kvs_jp_next(P);

    return kvs_jp_block_end(P) == 0 ? n : NULL;
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
        return kvs_jp_else(P, n, "endif");
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
        return kvs_jp_else(P, n, "endfor");
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
