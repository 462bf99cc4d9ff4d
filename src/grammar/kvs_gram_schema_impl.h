/*
 * kvs_gram_schema_impl: what the schema compiler's three files share
 * (kvs_gram_json.c: JSON's lexical rules and the path-naming errors;
 * kvs_gram_values.c: const/enum literals and integer ranges;
 * kvs_gram_schema.c: the keywords).  Internal to src/grammar.
 *
 * kvs_sc_t is one compilation: the grammar being built, the schema's
 * root (for $ref), the keyword path of what is being compiled (errors
 * name it), the layout's separators, the shared rules made on first use
 * (KVS_SC_NONE until then) and the $ref targets compiled so far.
 */

#ifndef KVS_GRAM_SCHEMA_IMPL_H
#define KVS_GRAM_SCHEMA_IMPL_H

#include <jansson.h>

#include "grammar/kvs_grammar.h"

#define KVS_SC_NONE     UINT32_MAX
#define KVS_SC_PATH     256
#define KVS_SC_MAX_INT  1000000000000000000.0   /* |bound| <= 1e18 */

#define KVS_T_NULL    0x01
#define KVS_T_BOOL    0x02
#define KVS_T_OBJECT  0x04
#define KVS_T_ARRAY   0x08
#define KVS_T_STRING  0x10
#define KVS_T_NUMBER  0x20
#define KVS_T_INTEGER 0x40
#define KVS_T_ALL     0x7f


typedef struct {
    const json_t  *target;
    uint32_t       rule;
} kvs_sc_ref_t;

typedef struct {
    kvs_gram_t     *g;
    const json_t   *root;
    unsigned        flags;
    uint32_t        max_depth, depth;
    kvs_err_t      *err;
    char            path[KVS_SC_PATH];
    size_t          plen;
    const char     *comma, *colon;
    int             kwargs;           /* the next object is written as
                                         Python keyword arguments,
                                         key=value joined by ",", no
                                         braces (MiniCPM3's calls); its
                                         members' objects are JSON */

    /* shared rules, made on first use */
    uint32_t        r_value, r_string, r_char, r_body, r_int, r_number;
    uint32_t        r_uint;

    kvs_sc_ref_t   *refs;
    size_t          n_refs, cap_refs;
} kvs_sc_t;


typedef struct {
    char    *p;
    size_t   n, cap;
    int      oom;
} kvs_sc_buf_t;


/* kvs_gram_json.c */
size_t kvs_sc_push(kvs_sc_t *sc, const char *name);
size_t kvs_sc_push_index(kvs_sc_t *sc, size_t i);
void kvs_sc_pop(kvs_sc_t *sc, size_t old);
int kvs_sc_fail(kvs_sc_t *sc, int code, const char *kw, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int kvs_sc_rule(kvs_sc_t *sc, uint32_t *rule);
int kvs_sc_rule_of(kvs_sc_t *sc, const kvs_gram_seq_t *q, uint32_t *rule);
int kvs_sc_lit_rule(kvs_sc_t *sc, const char *lit, uint32_t *rule);
int kvs_sc_wrap(kvs_sc_t *sc, uint32_t rule, const char *open, uint32_t x,
    const char *close);
int kvs_sc_char(kvs_sc_t *sc, uint32_t *rule);
int kvs_sc_string(kvs_sc_t *sc, uint32_t *rule);
int kvs_sc_digits(kvs_sc_t *sc, uint32_t min, uint32_t *rule);
int kvs_sc_integer(kvs_sc_t *sc, uint32_t *rule);
int kvs_sc_number(kvs_sc_t *sc, uint32_t *rule);
int kvs_sc_value(kvs_sc_t *sc, uint32_t *rule);

/* kvs_gram_schema.c */
/* A compilation into g (already initialised) of schemas under root. */
void kvs_sc_init(kvs_sc_t *sc, kvs_gram_t *g, const json_t *root,
    const kvs_gram_opts_t *opts, kvs_err_t *err);
/* s's rule, through the dispatch (each nested schema comes back here). */
int kvs_sc_schema(kvs_sc_t *sc, const json_t *s, uint32_t *rule);
/* s[kw] as a count into *out; *have: whether s has kw. */
int kvs_sc_count(kvs_sc_t *sc, const json_t *s, const char *kw,
    uint32_t *out, int *have);

/* kvs_gram_schema_obj.c */
int kvs_sc_object(kvs_sc_t *sc, const json_t *s, uint32_t *rule);
int kvs_sc_array(kvs_sc_t *sc, const json_t *s, uint32_t *rule);

/* kvs_gram_regex.c: kvs_gram_regex() with the KVS_GRAM_* flags (JANSSON
 * leaves U+0000 out of every character set) */
int kvs_sc_regex(kvs_gram_t *g, const char *re, size_t len, unsigned flags,
    uint32_t *rule, kvs_err_t *err);

/* kvs_gram_reamb.c: what a regex's parse can keep open at once.  Sets
 * are of code points 0-127 (bits 0-127) and any other (bit 128): the
 * code points that may begin a match (first), come after its first
 * (inner), or go on from a point where a match may end (cont). */
#define KVS_RE_MAX_PARSES  16

typedef struct {
    uint64_t  first[3], inner[3], cont[3];
    uint64_t  minl, maxl;             /* code points, saturating */
    uint64_t  positions;              /* the copies' atoms, all told */
    uint64_t  parses;                 /* stacks open at once, estimated */
} kvs_re_info_t;

void kvs_re_info_empty(kvs_re_info_t *x);
void kvs_re_info_cps(kvs_re_info_t *x, uint32_t lo, uint32_t hi);
void kvs_re_info_atom(kvs_re_info_t *x);
void kvs_re_info_concat(kvs_re_info_t *acc, const kvs_re_info_t *b);
void kvs_re_info_alt(kvs_re_info_t *acc, const kvs_re_info_t *b,
    int first);
int kvs_re_info_repeat(kvs_re_info_t *x, uint32_t min, uint32_t max,
    uint64_t max_parses, char *why, size_t why_len);

/* kvs_gram_values.c */
void kvs_sc_put(kvs_sc_buf_t *b, const void *p, size_t n);
void kvs_sc_put_str(kvs_sc_buf_t *b, const char *s, size_t n);
int kvs_sc_enum(kvs_sc_t *sc, const json_t *vals, const char *kw,
    unsigned types, uint32_t *rule);
int kvs_sc_int_bounded(kvs_sc_t *sc, const json_t *s, uint32_t *rule);
int kvs_sc_num_bounded(kvs_sc_t *sc, const json_t *s, uint32_t *rule);

#endif /* KVS_GRAM_SCHEMA_IMPL_H */
