/*
 * kvs_jinja_impl: what the Jinja interpreter's files share: the arena
 * every compile and render allocates from, the tokens, the syntax tree,
 * the values and the render state.  Not for use outside kvs_jinja*.c.
 *
 * Everything of one compile (tokens, tree) or one render (values, output
 * buffers, scopes) lives in one arena that is freed as a whole, so an
 * error anywhere can simply return: nothing is owned elsewhere.  Values
 * are passed by copy; lists, dicts and namespaces are shared by pointer
 * and only namespaces (and lists and dicts under construction) change.
 */

#ifndef KVS_JINJA_IMPL_H
#define KVS_JINJA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_jinja.h"

/* parse nesting (expressions and blocks together) */
#define KVS_JINJA_MAX_NEST  200


/* --- arena ---------------------------------------------------------------- */

typedef struct kvs_jblk_s  kvs_jblk_t;

typedef struct {
    kvs_jblk_t  *head;
    size_t       total;               /* bytes malloc'd */
    size_t       limit;               /* 0: none */
    int          over;                /* the last failure was the limit */
} kvs_jarena_t;

/* n bytes, aligned for any value; NULL past the limit or out of memory */
void *kvs_jarena_alloc(kvs_jarena_t *a, size_t n);
void *kvs_jarena_dup(kvs_jarena_t *a, const void *p, size_t n);
void kvs_jarena_free(kvs_jarena_t *a);


/* --- tokens --------------------------------------------------------------- */

typedef enum {
    KVS_JT_TEXT = 0,
    KVS_JT_VAR_BEGIN,
    KVS_JT_VAR_END,
    KVS_JT_BLOCK_BEGIN,
    KVS_JT_BLOCK_END,
    KVS_JT_NAME,
    KVS_JT_STRING,
    KVS_JT_INT,
    KVS_JT_FLOAT,
    KVS_JT_OP,
    KVS_JT_EOF
} kvs_jtok_type_t;

/* two-character operators, as the op of a KVS_JT_OP token */
#define KVS_JOP_EQ    'E'             /* == */
#define KVS_JOP_NE    'N'             /* != */
#define KVS_JOP_LE    'L'             /* <= */
#define KVS_JOP_GE    'G'             /* >= */
#define KVS_JOP_FDIV  'D'             /* // */
#define KVS_JOP_POW   'P'             /* ** */

typedef struct {
    uint8_t      type;
    uint8_t      op;
    uint32_t     line;
    const char  *p;                   /* text, name, decoded string */
    size_t       n;
    int64_t      i;
    double       f;
} kvs_jtok_t;

/* Splits src (newlines already normalised) into tokens, applying the
 * whitespace control; *toks ends with KVS_JT_EOF. */
int kvs_jinja_lex(kvs_jarena_t *a, const char *src, size_t len,
    kvs_jtok_t **toks, size_t *n, kvs_err_t *err);


/* --- values --------------------------------------------------------------- */

typedef enum {
    KVS_JV_UNDEF = 0,                 /* u.s: the name, for messages */
    KVS_JV_NONE,
    KVS_JV_BOOL,
    KVS_JV_INT,
    KVS_JV_FLOAT,
    KVS_JV_STR,                       /* flag 1: Markup (from |safe) */
    KVS_JV_LIST,                      /* flag: KVS_JL_* */
    KVS_JV_DICT,
    KVS_JV_NS,                        /* namespace(): a mutable dict */
    KVS_JV_LOOP,
    KVS_JV_MACRO,
    KVS_JV_FUNC
} kvs_jv_type_t;

/* what a KVS_JV_LIST stands for in Python */
#define KVS_JL_LIST   0
#define KVS_JL_TUPLE  1
#define KVS_JL_GEN    2               /* a generator (select, map, ...):
                                         always true, no len(), printed
                                         as an object */

typedef struct kvs_jlist_s   kvs_jlist_t;
typedef struct kvs_jdict_s   kvs_jdict_t;
typedef struct kvs_jloop_s   kvs_jloop_t;
typedef struct kvs_jmacro_s  kvs_jmacro_t;
typedef struct kvs_jfunc_s   kvs_jfunc_t;

typedef struct {
    uint8_t    type;
    uint8_t    flag;
    union {
        int64_t        i;             /* int, bool */
        double         f;
        struct {
            const char  *p;
            size_t       n;
        }              s;
        kvs_jlist_t   *list;
        kvs_jdict_t   *dict;
        kvs_jloop_t   *loop;
        kvs_jmacro_t  *macro;
        kvs_jfunc_t   *fn;
    } u;
} kvs_jv_t;

struct kvs_jlist_s {
    kvs_jv_t  *v;
    size_t     n;
    size_t     cap;
};

struct kvs_jdict_s {
    kvs_jv_t  *k;
    kvs_jv_t  *v;
    size_t     n;
    size_t     cap;
};

struct kvs_jloop_s {
    const kvs_jv_t  *items;
    int64_t          index0;
    int64_t          length;
};

typedef struct kvs_jnode_s   kvs_jnode_t;
typedef struct kvs_jscope_s  kvs_jscope_t;

struct kvs_jmacro_s {
    const kvs_jnode_t  *def;          /* a MACRO node, or a CALLBLOCK's */
    kvs_jscope_t       *closure;      /* where it was defined */
    int                 is_caller;
};

/* built-in functions: globals and bound methods */
typedef enum {
    KVS_JF_RAISE = 0,
    KVS_JF_STRFTIME,
    KVS_JF_RANGE,
    KVS_JF_NAMESPACE,
    KVS_JF_DICT,
    KVS_JF_METHOD                     /* name: the method, self: receiver */
} kvs_jfunc_kind_t;

struct kvs_jfunc_s {
    int          kind;
    const char  *name;
    kvs_jv_t     self;
};

typedef struct {
    const kvs_jv_t   *pos;
    size_t            npos;
    const char      **kwn;
    const kvs_jv_t   *kwv;
    size_t            nkw;
} kvs_jargs_t;


/* --- syntax tree ---------------------------------------------------------- */

typedef enum {
    /* statements */
    KVS_JN_TEXT = 0,                  /* s */
    KVS_JN_OUTPUT,                    /* a */
    KVS_JN_IF,                        /* a cond, body, else_ */
    KVS_JN_FOR,                       /* names targets, a iter, b filter,
                                         body, else_ */
    KVS_JN_SET,                       /* names targets, a value */
    KVS_JN_SET_ATTR,                  /* s var, s2 attr, a value */
    KVS_JN_SET_BLOCK,                 /* s var, body, filters (items) */
    KVS_JN_MACRO,                     /* s name, names params, items
                                         defaults (NULL: none), body */
    KVS_JN_CALLBLOCK,                 /* a call, names params, items
                                         defaults, body */
    KVS_JN_FILTERBLOCK,               /* items filters, body */
    KVS_JN_BREAK,
    KVS_JN_CONTINUE,
    KVS_JN_BLOCK,                     /* body (generation) */
    /* expressions */
    KVS_JN_CONST,                     /* val */
    KVS_JN_NAME,                      /* s */
    KVS_JN_ATTR,                      /* a obj, s name */
    KVS_JN_ITEM,                      /* a obj, b key */
    KVS_JN_SLICE,                     /* a obj, items[3] start stop step */
    KVS_JN_CALL,                      /* a fn, items pos, names kw + kwv */
    KVS_JN_FILTER,                    /* a arg (NULL in a filter block),
                                         s name, items pos, names + kwv */
    KVS_JN_TEST,                      /* a arg, s name, items pos, op: not */
    KVS_JN_BINOP,                     /* op, a, b */
    KVS_JN_NEG,                       /* a */
    KVS_JN_POS,                       /* a */
    KVS_JN_NOT,                       /* a */
    KVS_JN_AND,                       /* a, b */
    KVS_JN_OR,                        /* a, b */
    KVS_JN_CONCAT,                    /* items */
    KVS_JN_COMPARE,                   /* a first, items operands, ops */
    KVS_JN_COND,                      /* a cond, b then, c else (NULL) */
    KVS_JN_LIST,                      /* items */
    KVS_JN_TUPLE,                     /* items */
    KVS_JN_DICT                       /* items keys, kwv values */
} kvs_jnode_kind_t;

/* comparison operators of COMPARE; BINOP uses the token's op chars */
#define KVS_JCMP_IN     'i'
#define KVS_JCMP_NOTIN  'n'

struct kvs_jnode_s {
    uint8_t             kind;
    uint8_t             op;
    uint32_t            line;
    const char         *s;
    size_t              sn;
    const char         *s2;
    const kvs_jnode_t  *a;
    const kvs_jnode_t  *b;
    const kvs_jnode_t  *c;
    kvs_jnode_t       **items;
    size_t              nitems;
    kvs_jnode_t       **kwv;          /* keyword values, dict values */
    const char        **names;        /* keyword names, targets, params */
    size_t              nnames;
    uint8_t            *ops;          /* COMPARE, one per item */
    kvs_jnode_t       **body;
    size_t              nbody;
    kvs_jnode_t       **else_;
    size_t              nelse;
    kvs_jv_t            val;
};

struct kvs_jinja_s {
    kvs_jarena_t   arena;
    kvs_jnode_t  **body;
    size_t         nbody;
};

int kvs_jinja_parse(kvs_jarena_t *a, const kvs_jtok_t *toks, size_t n,
    kvs_jnode_t ***body, size_t *nbody, kvs_err_t *err);


/* --- render state --------------------------------------------------------- */

typedef struct {
    char       *p;
    size_t      n;
    size_t      cap;
    kvs_buf_t  *buf;                  /* the render's own output: bytes go
                                         straight to the caller's buffer
                                         (p and cap unused), so a big
                                         prompt is neither grown in the
                                         arena nor copied out of it */
} kvs_jsink_t;

struct kvs_jscope_s {
    kvs_jscope_t  *parent;
    kvs_jdict_t    vars;
};

typedef struct {
    kvs_jarena_t             arena;
    const kvs_jinja_opts_t  *opts;
    kvs_err_t                e;        /* the first error stands */
    uint64_t                 steps;
    unsigned                 depth;
    kvs_jsink_t             *out;
    uint32_t                 line;     /* of the node being evaluated */
} kvs_jctx_t;

/* records the render's error (the first stands), the line prefixed;
 * returns code */
int kvs_jctx_fail(kvs_jctx_t *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int kvs_jctx_nomem(kvs_jctx_t *c);
int kvs_jctx_step(kvs_jctx_t *c);
int kvs_jsink_put(kvs_jctx_t *c, kvs_jsink_t *s, const char *p, size_t n);


/* --- values (kvs_jinja_value.c, printing in kvs_jinja_print.c) ------------ */

kvs_jv_t kvs_jv_undef(const char *name);
kvs_jv_t kvs_jv_none(void);
kvs_jv_t kvs_jv_bool(int b);
kvs_jv_t kvs_jv_int(int64_t i);
kvs_jv_t kvs_jv_float(double f);
kvs_jv_t kvs_jv_str(const char *p, size_t n);
int kvs_jv_list_new(kvs_jctx_t *c, size_t cap, kvs_jv_t *out);
int kvs_jv_dict_new(kvs_jctx_t *c, kvs_jv_t *out);
int kvs_jlist_push(kvs_jctx_t *c, kvs_jlist_t *l, kvs_jv_t v);
int kvs_jdict_set(kvs_jctx_t *c, kvs_jdict_t *d, kvs_jv_t k, kvs_jv_t v);
/* the value at key k, or NULL */
kvs_jv_t *kvs_jdict_get(const kvs_jdict_t *d, kvs_jv_t k);
kvs_jv_t *kvs_jdict_gets(const kvs_jdict_t *d, const char *p, size_t n);

int kvs_jv_from_json(kvs_jctx_t *c, const json_t *j, kvs_jv_t *out);

int kvs_jv_truthy(const kvs_jv_t *v);
int kvs_jv_is_num(const kvs_jv_t *v);   /* int, float or bool */
double kvs_jv_num(const kvs_jv_t *v);
int kvs_jv_eq(const kvs_jv_t *a, const kvs_jv_t *b);
/* <0, 0, >0 into *r; an error for types Python does not order */
int kvs_jv_cmp(kvs_jctx_t *c, const kvs_jv_t *a, const kvs_jv_t *b, int *r);
const char *kvs_jv_type_name(const kvs_jv_t *v);

/* str(v) appended to s (Python's str: repr inside containers) */
int kvs_jv_str_put(kvs_jctx_t *c, kvs_jsink_t *s, const kvs_jv_t *v);
int kvs_jv_repr_put(kvs_jctx_t *c, kvs_jsink_t *s, const kvs_jv_t *v);
/* str(v) as a string value (strings as they are) */
int kvs_jv_to_str(kvs_jctx_t *c, const kvs_jv_t *v, kvs_jv_t *out);
/* json.dumps(v, ensure_ascii=False, indent=indent (NULL: none),
 * separators, sort_keys) */
int kvs_jv_json_put(kvs_jctx_t *c, kvs_jsink_t *s, const kvs_jv_t *v,
    const char *indent, size_t nindent, const char *item_sep,
    const char *key_sep, int sort_keys, unsigned level);
void kvs_jv_float_fmt(double f, char *buf, size_t len);
/* p[0..n) HTML-escaped as markupsafe's escape() does */
int kvs_jv_html_put(kvs_jctx_t *c, kvs_jsink_t *s, const char *p, size_t n);

/* one code point (an invalid byte stands for itself); its bytes */
size_t kvs_jstr_next(const char *p, size_t n, uint32_t *cp);
/* code points of a UTF-8 string; the byte offset of code point i */
size_t kvs_jstr_len(const char *p, size_t n);
size_t kvs_jstr_off(const char *p, size_t n, size_t i);
/* Python's str.isspace() for one code point */
int kvs_jstr_space(uint32_t cp);
/* bytes of the (whitespace, or any of chars) run at the start / end */
size_t kvs_jstr_lspan(const char *p, size_t n, const char *chars,
    size_t nchars);
size_t kvs_jstr_rspan(const char *p, size_t n, const char *chars,
    size_t nchars);


/* --- built-ins (kvs_jinja_builtin.c) -------------------------------------- */

int kvs_jb_has_filter(const char *name, size_t n);
int kvs_jb_has_test(const char *name, size_t n);
int kvs_jb_filter(kvs_jctx_t *c, const char *name, kvs_jv_t v,
    const kvs_jargs_t *args, kvs_jv_t *res);
int kvs_jb_test(kvs_jctx_t *c, const char *name, kvs_jv_t v,
    const kvs_jargs_t *args, int *res);
/* a global function, or undefined */
kvs_jv_t kvs_jb_global(const char *name, size_t n);
/* obj.name as jinja2's sandboxed getattr sees it: a method, or 0 when
 * obj has no such (safe) method */
int kvs_jb_method(kvs_jctx_t *c, const kvs_jv_t *obj, const char *name,
    size_t n, kvs_jv_t *res);
int kvs_jb_call(kvs_jctx_t *c, const kvs_jfunc_t *fn,
    const kvs_jargs_t *args, kvs_jv_t *res);

/* the test's name as interned in the list, or NULL */
const char *kvs_jb_test_name(const char *name, size_t n);
/* KVS_OK if v is a string, else an error naming what wanted one */
int kvs_jb_want_str(kvs_jctx_t *c, const kvs_jv_t *v, const char *what);
/* v as str() (undefined: ""), in place (kvs_jinja_filter.c) */
int kvs_jb_str_arg(kvs_jctx_t *c, kvs_jv_t *v);

/* string operations (kvs_jinja_str.c); how: 'u'pper, 'l'ower,
 * 'c'apitalize, 't'itle (str methods) */
int kvs_jb_case(kvs_jctx_t *c, const kvs_jv_t *v, int how, kvs_jv_t *res);
int kvs_jb_title_filter(kvs_jctx_t *c, const kvs_jv_t *v, kvs_jv_t *res);
int kvs_jb_strip(kvs_jctx_t *c, const kvs_jv_t *v, const kvs_jv_t *chars,
    int left, int right, kvs_jv_t *res);
int kvs_jb_replace(kvs_jctx_t *c, const kvs_jv_t *s, const kvs_jv_t *old,
    const kvs_jv_t *new, int64_t count, kvs_jv_t *res);
int kvs_jb_split(kvs_jctx_t *c, const kvs_jv_t *s, const kvs_jv_t *sep,
    int64_t maxsplit, int from_right, kvs_jv_t *res);
int kvs_jb_splitlines(kvs_jctx_t *c, const char *p, size_t n, kvs_jv_t *res);
int kvs_jb_indent(kvs_jctx_t *c, const kvs_jv_t *s, const kvs_jargs_t *args,
    kvs_jv_t *res);
int kvs_jb_escape(kvs_jctx_t *c, const kvs_jv_t *s, kvs_jv_t *res);

/* the argument at position i or keyword kw, or NULL */
const kvs_jv_t *kvs_jargs_get(const kvs_jargs_t *a, size_t i,
    const char *kw);


/* --- evaluation (kvs_jinja_eval.c, kvs_jinja_ops.c, kvs_jinja_stmt.c) ---- */

/* scopes and expressions (kvs_jinja_eval.c) */
kvs_jscope_t *kvs_je_scope(kvs_jctx_t *c, kvs_jscope_t *parent);
int kvs_je_assign(kvs_jctx_t *c, kvs_jscope_t *sc, const char *name,
    kvs_jv_t v);
kvs_jv_t kvs_je_lookup(kvs_jscope_t *sc, const char *name, size_t n);
/* fails the render naming the undefined value v */
int kvs_je_undefined(kvs_jctx_t *c, const kvs_jv_t *v);
int kvs_je_expr(kvs_jctx_t *c, kvs_jscope_t *sc, const kvs_jnode_t *n,
    kvs_jv_t *res);
int kvs_je_call(kvs_jctx_t *c, kvs_jscope_t *sc, const kvs_jnode_t *n,
    const kvs_jv_t *caller, kvs_jv_t *res);
int kvs_je_filter(kvs_jctx_t *c, kvs_jscope_t *sc, const kvs_jnode_t *n,
    kvs_jv_t v, kvs_jv_t *res);

/* access and operators (kvs_jinja_ops.c) */
int kvs_je_getattr(kvs_jctx_t *c, const kvs_jv_t *obj, const char *name,
    size_t n, kvs_jv_t *res);
int kvs_je_getitem(kvs_jctx_t *c, const kvs_jv_t *obj, const kvs_jv_t *key,
    kvs_jv_t *res);
int kvs_je_iter(kvs_jctx_t *c, const kvs_jv_t *v, kvs_jv_t *list);
int kvs_je_slice(kvs_jctx_t *c, const kvs_jv_t *obj, const kvs_jv_t *parts,
    kvs_jv_t *res);
int kvs_je_binop(kvs_jctx_t *c, int op, const kvs_jv_t *a, const kvs_jv_t *b,
    kvs_jv_t *res);
int kvs_je_contains(kvs_jctx_t *c, const kvs_jv_t *item, const kvs_jv_t *seq,
    int *res);

/* statements (kvs_jinja_stmt.c): KVS_OK, a break/continue status (> 0) or
 * the render's error */
int kvs_je_stmts(kvs_jctx_t *c, kvs_jscope_t *sc, kvs_jnode_t *const *body,
    size_t n);

#endif /* KVS_JINJA_IMPL_H */
