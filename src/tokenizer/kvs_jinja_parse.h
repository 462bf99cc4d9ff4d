/*
 * kvs_jinja_parse: what the parser's two files share (kvs_jinja_parse.c:
 * the token cursor, errors, statements; kvs_jinja_expr.c: expressions).
 * Not for use outside them.
 */

#ifndef KVS_JINJA_PARSE_H
#define KVS_JINJA_PARSE_H

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


const kvs_jtok_t *kvs_jp_cur(kvs_jparse_t *P);
const kvs_jtok_t *kvs_jp_peek(kvs_jparse_t *P, size_t k);
void kvs_jp_next(kvs_jparse_t *P);
/* records the first error ("line N: ..."); returns NULL */
kvs_jnode_t *kvs_jp_fail(kvs_jparse_t *P, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
kvs_jnode_t *kvs_jp_unexpected(kvs_jparse_t *P, const char *want);
kvs_jnode_t *kvs_jp_node(kvs_jparse_t *P, int kind);
int kvs_jvec_push(kvs_jparse_t *P, kvs_jvec_t *v, kvs_jnode_t *n);
int kvs_jp_is_op(kvs_jparse_t *P, int op);
int kvs_jp_is_name(const kvs_jtok_t *t, const char *name);
int kvs_jp_expect_op(kvs_jparse_t *P, int op, const char *desc);
const char *kvs_jp_name(kvs_jparse_t *P, size_t *len);
const char *kvs_jp_cstr(kvs_jparse_t *P, const char *p, size_t n);

/* kvs_jinja_expr.c: an expression (condexpr: "a if b else c" allowed),
 * one or a bare tuple "a, b", a filter call after its "|" */
kvs_jnode_t *kvs_jp_expr(kvs_jparse_t *P, int condexpr);
kvs_jnode_t *kvs_jp_tuple(kvs_jparse_t *P, int condexpr);
kvs_jnode_t *kvs_jp_filter(kvs_jparse_t *P, kvs_jnode_t *arg);

#endif /* KVS_JINJA_PARSE_H */
