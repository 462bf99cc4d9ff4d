/*
 * kvs_grammar: grammar-constrained decoding, as library code.
 *
 * Four objects, one file each (docs/grammar.md has the design):
 *
 *   kvs_gram_t          a context-free grammar over bytes: rules of
 *                       alternatives, an alternative a sequence of byte
 *                       ranges and rule references (kvs_gram.c), built
 *                       with a small builder API and then frozen;
 *   kvs_gram_schema     JSON Schema (a jansson value) or "any JSON
 *                       object" -> kvs_gram_t (kvs_gram_schema.c, with
 *                       the regex subset of "pattern" and "format" in
 *                       kvs_gram_regex.c); a tool-call spec -> the
 *                       grammar of text and calls (kvs_gram_tools.c);
 *   kvs_gram_matcher_t  what the grammar still accepts after the bytes
 *                       so far: a set of parse stacks (a pushdown
 *                       automaton run on every branch at once), advanced
 *                       a byte at a time and rolled back a byte at a
 *                       time (kvs_gram_match.c);
 *   kvs_gram_vocab_t    a vocabulary's tokens as output bytes in a trie,
 *   kvs_gram_masker_t   and the token mask computed by walking that trie
 *                       with the matcher, with a cache of masks keyed by
 *                       matcher state (kvs_gram_mask.c; its context-
 *                       independent entries: kvs_gram_ind.c).
 *
 * Every call returns KVS_OK or a negative KVS_E* code and fills a
 * kvs_err_t; nothing here exits or aborts on bad input, and every size a
 * hostile schema or grammar could drive (rules, elements, stacks, stack
 * nodes) has a cap whose breach is an error (KVS_ETOOLONG).
 */

#ifndef KVS_GRAMMAR_H
#define KVS_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"
#include "tokenizer/kvs_vocab.h"


/* ---- the grammar ------------------------------------------------------ */

#define KVS_GRAM_END    0             /* closes an alternative */
#define KVS_GRAM_BYTES  1             /* one byte in [lo, hi] */
#define KVS_GRAM_RULE   2             /* a reference to rule `rule` */
#define KVS_GRAM_DEAD   3             /* first element of an alternative
                                         that derives no finite text
                                         (kvs_gram_finish marks them) */

typedef struct {
    uint8_t   kind;                   /* KVS_GRAM_* */
    uint8_t   lo, hi;                 /* KVS_GRAM_BYTES */
    uint8_t   pad;
    uint32_t  rule;                   /* KVS_GRAM_RULE */
} kvs_gram_elem_t;

/* A sequence under construction (one alternative's elements). */
typedef struct {
    kvs_gram_elem_t  *e;
    size_t            n, cap;
    int               oom;            /* an append failed: add_alt fails */
} kvs_gram_seq_t;

/* A counted repetition kvs_gram_repeat() unrolled (kvs_gram.c): x, the
 * separator's length, the first element of T_1's copy, the optional
 * copies, the first element of the rule's own alternative, the minimum. */
typedef struct {
    uint32_t  x, s, t1, extra, ralt, min;
} kvs_gram_unroll_t;

/* A family of positions that differ only in the copies of a repetition
 * still to come: the member with c copies left is at - (c_at - c) *
 * step.  grp: the first family of its block (one repetition's optional
 * copies, or its mandatory ones), whose members all move together when
 * a copy is taken (kvs_gram_memo.c's renaming needs the same count
 * throughout a group).  r_at: for the optional copies' references to x,
 * 1 + the one in R's own alternative, the member with c_at + 1 left
 * that no stride reaches (0: none). */
typedef struct {
    uint32_t  at, c_at;
    int32_t   step;
    uint32_t  grp;
    uint32_t  r_at;
} kvs_gram_rfam_t;

typedef struct {
    uint32_t  max_elems;              /* 0: 1 << 21 */
    uint32_t  max_rules;              /* 0: 1 << 19 */
} kvs_gram_limits_t;

/*
 * Invariants once kvs_gram_finish() returned KVS_OK: every alternative's
 * elements end with KVS_GRAM_END; every KVS_GRAM_RULE names a rule that
 * has at least one alternative; the alternatives of rule r are
 * alt_start[rule_alt[r] .. rule_alt[r + 1]); the grammar is immutable and
 * may be shared by any number of matchers and threads.
 */
typedef struct {
    kvs_gram_elem_t  *elems;
    uint32_t          n_elems, cap_elems;
    uint32_t         *alt_rule;       /* [n_alts] building order */
    uint32_t         *alt_start;      /* [n_alts] first element */
    uint32_t          n_alts, cap_alts;
    uint32_t         *rule_alt;       /* [n_rules + 1], after finish */
    /* after finish: rules that derive no empty text and the bytes their
     * texts (and each alternative's) can start with; when `lazy`, the
     * matcher expands such a rule only when a byte of its FIRST set
     * comes, and only the alternatives that can take it */
    uint8_t          *nullable;       /* [n_rules] */
    uint64_t         *first;          /* [n_rules * 4] */
    uint64_t         *alt_first;      /* [n_alts * 4] */
    int               lazy;
    uint32_t          n_rules;
    uint32_t          root;
    int               finished;
    kvs_gram_limits_t lim;
    /* counted repetitions: while building, one record per unrolled
     * repeat; after finish (when any was exact to share, see
     * kvs_gram_rep_at), per position the copies of x it can still start
     * (rep_c, 0: not one) and its family (rep_f into rfam) */
    kvs_gram_unroll_t *unrolls;
    uint32_t          n_unrolls, cap_unrolls;
    uint32_t         *rep_c, *rep_f;
    kvs_gram_rfam_t  *rfam;
    uint32_t          n_rfam;
    /* after finish: byte classes, the bytes every byte range of the
     * grammar holds alike (so FIRST and next sets too, and a matcher
     * step takes them alike); bnext[b] is the next byte of b's class,
     * round to its first (b itself when b is alone) */
    uint8_t           bnext[256];
    /* 1 + the rule of one character of a JSON string (kvs_sc_char:
     * each character the class automaton takes is one copy of it); 0
     * if the grammar has none */
    uint32_t          char_rule;
} kvs_gram_t;

int kvs_gram_init(kvs_gram_t *g, const kvs_gram_limits_t *lim);
void kvs_gram_free(kvs_gram_t *g);

/* A new rule with no alternatives yet (a rule may be referenced before
 * its alternatives are added: recursion). */
int kvs_gram_rule_new(kvs_gram_t *g, uint32_t *id, kvs_err_t *err);

/* Appends a copy of seq (KVS_GRAM_END is added) as an alternative of
 * rule.  An empty seq is the empty string. */
int kvs_gram_add_alt(kvs_gram_t *g, uint32_t rule, const kvs_gram_seq_t *s,
    kvs_err_t *err);

/* Freezes the grammar with `root` as its start rule. */
int kvs_gram_finish(kvs_gram_t *g, uint32_t root, kvs_err_t *err);

void kvs_gram_seq_reset(kvs_gram_seq_t *s);
void kvs_gram_seq_free(kvs_gram_seq_t *s);
void kvs_gram_seq_range(kvs_gram_seq_t *s, uint8_t lo, uint8_t hi);
void kvs_gram_seq_lit(kvs_gram_seq_t *s, const void *p, size_t n);
void kvs_gram_seq_ref(kvs_gram_seq_t *s, uint32_t rule);

/*
 * Adds to `rule` one alternative per UTF-8 byte-range sequence of the
 * code points [lo, hi] (surrogates D800-DFFF left out; hi <= 10FFFF),
 * each followed by `tail` (NULL: nothing).
 */
int kvs_gram_add_cp_range(kvs_gram_t *g, uint32_t rule, uint32_t lo,
    uint32_t hi, const kvs_gram_seq_t *tail, kvs_err_t *err);

/*
 * A new rule: x repeated min .. max times (max UINT32_MAX: no bound),
 * with sep (NULL: nothing) between two of them.  The count is exact:
 * x{min} then nested optionals (bounded) or a right-recursive star, so
 * the size is O(max) elements and the matcher's stack stays flat.
 */
int kvs_gram_repeat(kvs_gram_t *g, uint32_t x, const kvs_gram_seq_t *sep,
    uint32_t min, uint32_t max, uint32_t *rule, kvs_err_t *err);


/* kvs_gram_rep.c: kvs_gram_repeat notes a bounded count's layout (x, the
 * separator's length, T_1's copy, the optional copies, R's alternative,
 * the minimum); kvs_gram_finish indexes the notes and frees them. */
int kvs_gram_rep_note(kvs_gram_t *g, uint32_t x, uint32_t s, uint32_t t1,
    uint32_t extra, uint32_t ralt, uint32_t min, kvs_err_t *err);
int kvs_gram_rep_index(kvs_gram_t *g, kvs_err_t *err);

/*
 * The copies of x a position of an unrolled repetition can still start
 * (0: not such a position, or one whose x can be empty).  Two positions
 * of one family with c and c' copies left take the same bytes up to the
 * first min(c, c') of them (kvs_gram_rep.c says why), so a mask that looks
 * no further than max_len bytes may key both by one of them.
 */
static inline uint32_t
kvs_gram_rep_count(const kvs_gram_t *g, uint32_t pos)
{
    return g->rep_c != NULL && pos < g->n_elems ? g->rep_c[pos] : 0;
}

/* The member of pos's family with c copies left, 2 <= c < pos's own
 * count (a position of R itself has no member of its own count). */
static inline uint32_t
kvs_gram_rep_at(const kvs_gram_t *g, uint32_t pos, uint32_t c)
{
    const kvs_gram_rfam_t  *f = &g->rfam[g->rep_f[pos]];

    return (uint32_t) ((int64_t) f->at
                       - ((int64_t) f->c_at - (int64_t) c) * f->step);
}


/* ---- JSON Schema -> grammar ------------------------------------------ */

#define KVS_GRAM_COMPACT  0x1         /* "," and ":" with no space after */
#define KVS_GRAM_JANSSON  0x2         /* only JSON jansson reads back: no
                                         \u0000 in strings, integer parts
                                         of at most 18 digits, exponents
                                         of at most 2 (tool arguments,
                                         which kvs_tool_parse reads) */
#define KVS_GRAM_AMBIGUOUS 0x4        /* take "pattern" repeats that keep
                                         many parses open at once, which
                                         requests never may (kvs_gram_
                                         reamb.c): the matcher's tests */

typedef struct {
    unsigned           flags;         /* KVS_GRAM_* */
    uint32_t           max_depth;     /* schema nesting; 0: 64 */
    kvs_gram_limits_t  lim;
} kvs_gram_opts_t;

struct json_t;

/*
 * Compiles a JSON Schema into g (initialised here; kvs_gram_free() it,
 * also after an error).  A keyword or value the compiler does not
 * support is KVS_EUNSUPPORTED with a message that starts with the path
 * of the keyword inside the schema ("properties.a.pattern: unsupported
 * regex construct '(?='"), which the caller prefixes with its own
 * ("response_format.json_schema.schema"); never silently ignored.
 */
int kvs_gram_from_schema(kvs_gram_t *g, const struct json_t *schema,
    const kvs_gram_opts_t *opts, kvs_err_t *err);

/* json_object mode: any JSON object. */
int kvs_gram_json_object(kvs_gram_t *g, const kvs_gram_opts_t *opts,
    kvs_err_t *err);

/*
 * Compiles a tool-call spec (the format and the grammar per syntax and
 * tool_choice are in kvs_gram_tools.c and docs/grammar.md, "Tool
 * calls"):
 *
 *   {"choice": "auto"|"required"|"none", "parallel": true|false,
 *    "syntax": "hermes"|"llama3"|"mistral"|"granite"|"firefunction"|
 *              "functionary",
 *    "tools": [{"name": NAME, "parameters": SCHEMA}, ...]}
 *
 * into g (initialised here; kvs_gram_free() it, also after an error).
 * A bad field is KVS_EINVAL naming it ("tools[1].name: ..."); a schema
 * the compiler refuses keeps its message, prefixed with
 * "tools[i].parameters.".
 */
int kvs_gram_from_tools(kvs_gram_t *g, const struct json_t *spec,
    const kvs_gram_opts_t *opts, kvs_err_t *err);

/* A regex (the subset in docs/grammar.md) matched by the whole of the
 * *decoded* text of a JSON string body, as a rule of g over the string's
 * bytes between its quotes; anchored as JSON Schema's "pattern" is not
 * (a pattern without ^ matches anywhere).  Used by the schema compiler
 * for "pattern" and "format". */
int kvs_gram_regex(kvs_gram_t *g, const char *re, size_t len,
    uint32_t *rule, kvs_err_t *err);


/* ---- the matcher ------------------------------------------------------- */

#define KVS_GRAM_NIL   UINT32_MAX     /* below the bottom of a stack */
#define KVS_GRAM_SENT  (UINT32_MAX - 1)   /* a cut stack's unknown rest */

typedef struct {
    uint32_t  pos;                    /* element to match next */
    uint32_t  parent;                 /* the stack below; NIL: none */
} kvs_gram_node_t;

typedef struct {
    uint32_t  front;                  /* first frontier entry */
    uint32_t  n_front;
    uint32_t  nodes_before;           /* n_nodes when this level began */
    uint32_t  accept;                 /* an empty stack: may end here */
    uint32_t  sent;                   /* a cut stack popped into its
                                         sentinel (the rest decides) */
    uint64_t  next[4];                /* bytes some stack accepts next */
} kvs_gram_level_t;

typedef struct {
    uint32_t  max_nodes;              /* stack nodes alive; 0: 1 << 22 */
    uint32_t  max_front;              /* stacks after a byte; 0: 4096 */
} kvs_gram_mlimits_t;

/*
 * Invariants: level k (k = 0 .. n_lv - 1) is the state after k bytes:
 * its frontier holds the distinct stacks (node ids, hash-consed, so
 * equal stacks have equal ids) whose top element is a byte range or,
 * when the grammar is lazy, a reference to a rule that cannot be empty
 * (expanded when a byte of its FIRST set comes); next[] is the union of
 * the tops' byte sets, so a byte outside it is refused at once;
 * nodes are append-only between rollbacks, so an id in a level's
 * frontier is < the next level's nodes_before.
 */
typedef struct {
    const kvs_gram_t    *g;
    kvs_gram_node_t     *nodes;
    uint32_t            *marks;       /* [cap_nodes] closure visit stamp */
    uint32_t             n_nodes, cap_nodes;
    uint32_t            *slots;       /* hash (pos, parent) -> id + 1 */
    uint32_t             slot_mask;
    uint32_t            *front;
    uint32_t             n_front, cap_front;
    kvs_gram_level_t    *lv;
    uint32_t             n_lv, cap_lv;
    uint32_t            *work;
    uint32_t             cap_work;
    uint32_t            *pwork;       /* kvs_gram_predict's worklist */
    uint32_t             cap_pwork;
    uint32_t             epoch;
    uint32_t             low_water;   /* lowest n_nodes truncated to since
                                         the masker last looked */
    uint64_t             interns;     /* kvs_gram_intern calls ever: a
                                         byte step makes at most as many
                                         nodes as it calls it (the memo's
                                         bound on the node cap) */
    uint64_t             capped;      /* steps refused by a cap, ever */
    kvs_gram_mlimits_t   lim;
} kvs_gram_matcher_t;

int kvs_gram_matcher_init(kvs_gram_matcher_t *m, const kvs_gram_t *g,
    const kvs_gram_mlimits_t *lim, kvs_err_t *err);
void kvs_gram_matcher_free(kvs_gram_matcher_t *m);

/*
 * A matcher whose start is one stack cut below its top `depth` nodes:
 * pos[0 .. depth) are their positions, top first, KVS_GRAM_NIL after the
 * bottom of a stack shorter than that.  Below a cut stack is a sentinel;
 * a parse that pops into it sets the level's `sent` instead of going on.
 * What such a matcher accepts without reaching the sentinel, the whole
 * stack accepts too, whatever lies below (kvs_gram_ind.c).
 */
int kvs_gram_matcher_init_cut(kvs_gram_matcher_t *m, const kvs_gram_t *g,
    const uint32_t *pos, uint32_t depth, const kvs_gram_mlimits_t *lim,
    kvs_err_t *err);

/* Advances by one byte: KVS_OK; KVS_EFORMAT if the grammar refuses it
 * (state unchanged); KVS_ETOOLONG if a cap was hit (state unchanged). */
int kvs_gram_matcher_byte(kvs_gram_matcher_t *m, uint8_t b,
    kvs_err_t *err);

/* Advances by n bytes, all or none (an error names the offset). */
int kvs_gram_matcher_feed(kvs_gram_matcher_t *m, const void *p, size_t n,
    kvs_err_t *err);

/* Bytes accepted so far. */
static inline size_t
kvs_gram_matcher_len(const kvs_gram_matcher_t *m)
{
    return m->n_lv - 1;
}

/* Forgets the last n bytes (n <= len). */
void kvs_gram_matcher_rollback(kvs_gram_matcher_t *m, size_t n);

/* 1 if the text so far is a complete sentence of the grammar. */
int kvs_gram_matcher_can_end(const kvs_gram_matcher_t *m);

/* 1 if complete and no byte can follow. */
int kvs_gram_matcher_must_end(const kvs_gram_matcher_t *m);

/* The set of bytes that may come next (bit b of set[b >> 6]). */
void kvs_gram_matcher_next(const kvs_gram_matcher_t *m, uint64_t set[4]);

/* How many distinct tops the stacks open now have among those that take
 * at least min_bytes distinct bytes next, counted up to most + 1 (most
 * at most KVS_GRAM_BROAD_MAX): each such top is a walk of most of the
 * vocabulary in a mask, so their count, not the frontier's, is what a
 * mask costs (the engine's bound, docs/grammar.md "Ambiguous schemas
 * and patterns"). */
#define KVS_GRAM_BROAD_MAX  256

uint32_t kvs_gram_matcher_broad(const kvs_gram_matcher_t *m,
    uint32_t min_bytes, uint32_t most);


/* ---- the vocabulary and the mask --------------------------------------- */

#define KVS_GRAM_TOK_TEXT    0        /* output bytes, masked by grammar */
#define KVS_GRAM_TOK_END     1        /* ends the output: allowed iff the
                                         grammar is complete */
#define KVS_GRAM_TOK_REFUSED 2        /* never allowed (control, unused,
                                         unknown, empty) */

/*
 * A trie node as the walks read it (one 16-byte record, so a node is one
 * read): its subtree is i .. end - 1; the text tokens before it in the
 * sorted order are cum (t_cum[i]), so the tokens ending at it are
 * ids[cum .. next node's cum) and its subtree's ids[cum .. t_node[end]
 * .cum); height: the longest path below it; cls is the class
 * automaton's state after its bytes (bits 0-3, kvs_gram_memo_class())
 * and KVS_GRAM_CLS_ALL when every string below it keeps that automaton
 * alive (the memo's subtree skipping); chars: while the automaton is
 * alive, the characters its bytes start (those it takes from state 0),
 * the count a bounded string's subtree skipping reads.
 */
typedef struct {
    uint32_t  end;
    uint32_t  cum;
    uint16_t  depth;
    uint16_t  height;
    uint8_t   byte;
    uint8_t   cls;
    uint16_t  chars;
} kvs_gram_tnode_t;

#define KVS_GRAM_CLS_STATE  0x0f
#define KVS_GRAM_CLS_ALL    0x10
#define KVS_GRAM_CLS_FAN    0x20      /* its children are listed in the
                                         vocabulary's fan lists */

/* A vocabulary's long tokens (rep_low bytes or more) are at most this
 * many, a bitset of KVS_GRAM_LONG_WORDS words by their index. */
#define KVS_GRAM_LONG_MAX    256
#define KVS_GRAM_LONG_WORDS  (KVS_GRAM_LONG_MAX / 32)

/*
 * A vocabulary's tokens as the bytes they put into the output, and a
 * trie of them in preorder: node i (depth >= 1) has byte[i], its subtree
 * is i .. end[i] - 1, and the tokens whose bytes end at it are
 * ids[tok[i] .. tok[i] + n_tok[i]).  t_node holds the same trie packed
 * (n_nodes + 1 records, the last one a sentinel: end n_nodes, cum
 * n_text).  Immutable once built.
 */
typedef struct {
    uint32_t   n_tokens;
    uint8_t   *kind;                  /* [n_tokens] KVS_GRAM_TOK_* */
    uint32_t  *off, *len;             /* [n_tokens] into bytes */
    uint8_t   *bytes;
    uint32_t   n_nodes;
    uint8_t   *t_byte;                /* [n_nodes] */
    uint16_t  *t_depth;
    uint32_t  *t_end;
    uint32_t  *t_tok;
    uint32_t  *t_ntok;
    uint32_t  *t_cum;                 /* [n_nodes + 1] text tokens at nodes
                                         before i: node i's subtree holds
                                         ids[t_cum[i] .. t_cum[t_end[i]]) */
    kvs_gram_tnode_t *t_node;         /* [n_nodes + 1] */
    uint64_t  *t_below;               /* [n_nodes + 1] the byte groups
                                         (kvs_gram_byte_group) of the
                                         nodes strictly below node i */
    /* the children of the root and of each node with 16 or more
     * (kvs_gram_vocab.c: KVS_GRAM_FAN_MIN; flagged KVS_GRAM_CLS_FAN), their bytes side by side, so that
     * a walk passes the ones its state refuses without reading their
     * nodes (kvs_gram_memo_walk): list 0 the root's, list k (1 ..
     * n_fan) node fan_id[k]'s, in fan_byte and fan_node [fan_at[k],
     * fan_at[k + 1]), in trie order */
    uint32_t   n_fan;
    uint32_t  *fan_id;                /* [n_fan + 1], ascending from 1 */
    uint32_t  *fan_at;                /* [n_fan + 2] */
    uint8_t   *fan_byte;              /* [fan_at[n_fan + 1]] */
    uint32_t  *fan_node;              /* [fan_at[n_fan + 1]] */
    int32_t   *ids;                   /* [n_text] text token ids sorted by
                                         bytes, then [n_end] END ids */
    uint32_t  *x_off;                 /* [n_text + 1] where the bytes of
                                         ids[x] begin: bytes holds the text
                                         tokens in sorted order, so token
                                         x is x_off[x] .. x_off[x + 1] */
    uint32_t   n_text, n_end;
    uint32_t   max_len;
    /* counted repetitions' second key tier (kvs_gram_ind.c): the
     * shortest length >= 8 that at most 256 text tokens reach (0: none
     * below max_len + 1), and those tokens' sorted positions in ids */
    uint32_t   rep_low;
    uint32_t  *long_x;
    uint32_t   n_long;                /* at most KVS_GRAM_LONG_MAX */
    /* [n_long] each long token read as a JSON string's characters by
     * the class automaton (kvs_gram_memo_class): the characters it
     * begins (bits 0-15: of its plain run, a last one cut short
     * included), and how the run ends (bits 24-25: KVS_GRAM_RUN_*;
     * bits 16-23 the byte that ends it at a character's boundary) */
    uint32_t  *long_cls;
    uint32_t  *text_bits;             /* [(n_tokens + 31) / 32] the text
                                         tokens' ids */
    /* context-independent entries precomputed for the sub-grammars all
     * JSON grammars share (kvs_gram_slice.c), NULL: none */
    struct kvs_gram_slices_s *slices;
    /* the tokens that close a free string, grouped by their tails
     * (kvs_gram_exit.c), NULL: none */
    struct kvs_gram_exits_s *exits;
} kvs_gram_vocab_t;

/* From a loaded vocabulary: each token's output bytes as
 * kvs_tok_decode() writes them (SPM "\xe2\x96\x81" is a space, <0xNN>
 * its byte); EOS, EOT and EOM are END; control (but the tool-call
 * markers, kvs_gram_vocab_marker()), unknown and unused tokens are
 * REFUSED. */
int kvs_gram_vocab_from_vocab(kvs_gram_vocab_t **out, const kvs_vocab_t *v,
    kvs_err_t *err);

/* 1 if a control token of this text is a tool-call marker, which
 * kvs_gram_vocab_from_vocab() makes a TEXT token of its text verbatim
 * (and the engine writes into a constrained output). */
int kvs_gram_vocab_marker(const char *text, size_t len);

/* From bytes: texts[i] of lens[i] bytes, kinds[i] a KVS_GRAM_TOK_*. */
int kvs_gram_vocab_from_bytes(kvs_gram_vocab_t **out, uint32_t n,
    const uint8_t *const *texts, const uint32_t *lens, const uint8_t *kinds,
    kvs_err_t *err);
void kvs_gram_vocab_free(kvs_gram_vocab_t *gv);

/* ---- exits (kvs_gram_exit.c) --------------------------------------- */

/* The vocabulary's tokens that hold a quote after whole JSON string
 * characters (none included), grouped by what follows those characters,
 * the quote first: a free string's closing tokens, decided by their
 * group's tail (kvs_gram_exit.c).  Built by kvs_gram_vocab_from_vocab()
 * and kvs_gram_vocab_from_bytes(). */
typedef struct kvs_gram_exits_s kvs_gram_exits_t;

int kvs_gram_vocab_exits(kvs_gram_vocab_t *gv, kvs_err_t *err);
void kvs_gram_exits_free(kvs_gram_exits_t *ex);
uint32_t kvs_gram_vocab_n_exits(const kvs_gram_vocab_t *gv);
/* The grouped tokens: how many, and their ids as a bitset (NULL: no
 * groups). */
uint32_t kvs_gram_exits_tokens(const kvs_gram_vocab_t *gv);
const uint32_t *kvs_gram_exits_bits(const kvs_gram_vocab_t *gv);

/* ---- slices (kvs_gram_slice.c) ------------------------------------- */

typedef struct kvs_gram_slices_s kvs_gram_slices_t;

/* Builds gv's slices (replacing any): the context-independent entries of
 * fixed reference schemas (a free string, each format, json_object)
 * met along fixed sample texts, kept by their keys' shapes.  Called by
 * kvs_gram_vocab_from_vocab() and kvs_gram_vocab_from_bytes(). */
int kvs_gram_vocab_slices(kvs_gram_vocab_t *gv, kvs_err_t *err);
void kvs_gram_slices_free(kvs_gram_slices_t *ss);
uint32_t kvs_gram_vocab_n_slices(const kvs_gram_vocab_t *gv);

/* The canonical serialisation of what a cut stack with top positions
 * key[0 .. KVS_GRAM_CUT) can reach in g, with their repetition counts
 * (kvs_gram_slice.c); KVS_ETOOLONG past cap words or 512 rules,
 * KVS_ENOMEM without memory for its scratch.  Two keys of one shape (in
 * one grammar or two) have the same context-independent entry. */
int kvs_gram_shape(const kvs_gram_t *g, const uint32_t *key, uint32_t *out,
    uint32_t cap, uint32_t *n);

/* A slice's entry, the vocabulary's (read only, for as long as gv):
 * accepted bits by token id, dependent ranges of sorted positions, and
 * its bits' nonzero words as (index, word) pairs when they are few
 * (kvs_gram_sparse), else sparse NULL. */
typedef struct {
    const uint32_t  *bits;
    const uint32_t  *ranges;
    const uint32_t  *sparse;
    uint32_t         n_ranges, some, n_sparse;
} kvs_gram_slice_ent_t;

/* A lookup's scratch (42 KiB: a shape and its rule table), kept by the
 * caller between lookups; freed with free(). */
typedef struct kvs_gram_shbuf_s kvs_gram_shbuf_t;

/* 1 and *out the slice's entry if gv has one for key's shape in g,
 * built under caps no larger than lim; else 0.  scratch: where the
 * lookup's scratch is kept (made on first use), or NULL (made and
 * freed each call). */
int kvs_gram_slice_find(const kvs_gram_vocab_t *gv, const kvs_gram_t *g,
    const uint32_t *key, const kvs_gram_mlimits_t *lim,
    kvs_gram_slice_ent_t *out, kvs_gram_shbuf_t **scratch);

/* The nonzero words of b[0 .. words) as (index, word) pairs in *out
 * (the caller's to free) where they are at most words /
 * KVS_GRAM_SPARSE_DIV, else *out NULL (kvs_gram_ind.c); KVS_ENOMEM
 * without memory. */
int kvs_gram_sparse(const uint32_t *b, uint32_t words, uint32_t **out,
    uint32_t *n);

/* Advances the matcher by a text token's bytes (an END token is checked
 * with kvs_gram_matcher_can_end() and leaves the state as it is). */
int kvs_gram_accept_token(kvs_gram_matcher_t *m, const kvs_gram_vocab_t *gv,
    int32_t id, kvs_err_t *err);

typedef struct kvs_gram_centry_s  kvs_gram_centry_t;
typedef struct kvs_gram_ientry_s  kvs_gram_ientry_t;
typedef struct kvs_gram_ventry_s  kvs_gram_ventry_t;


/* ---- the walk's transition memo (kvs_gram_memo.c) ---------------------- */

/*
 * A trie walk visits ~100k-270k nodes, each a matcher byte step, but
 * inside a string they lead to a few dozen distinct matcher states: the
 * memo names each state reached during one walk canonically (its stacks
 * as positions down to the nodes that existed when the walk began, plus
 * accept and sent; compared exactly, never by hash alone) and keeps
 * next[state][byte], so a transition already seen in this walk is a
 * table lookup and the matcher is fed only on a miss.  The masks are
 * bit for bit those of the plain walk (kvs_gram_memo.c says why, caps
 * included).
 *
 * Memory: at most max_states states per walk (KVS_GRAM_MEMO_STATES by
 * default, at most 65536), each a 256-entry row of 6 bytes, plus 64 key
 * words and 64 canonical stack nodes per state: about 3.6 KiB per state,
 * 3.6 MiB at 1024, allocated on the first walk that uses it and kept by
 * the masker.  Past any of those caps the memo is cleared and the walk
 * goes on (slower, still exact).  max_states 0: no memo, every trie node
 * a matcher step (the reference the tests compare with).
 */
typedef struct kvs_gram_memo_s  kvs_gram_memo_t;

/*
 * A mask's work, counted so that one mask can be bounded (the engine's
 * masks run on the thread every request shares): a unit is a trie node
 * stepped through a memo (a hit, or a miss and the matcher's step), a
 * byte a dependent token's check feeds the matcher, and each stack node
 * the matcher makes on those steps (kvs_gram_intern).  Once used passes
 * limit every further step is refused, so the walk in progress winds
 * down in a few steps; its result is not a mask (kvs_gram_mask says so).
 */
typedef struct {
    uint64_t  used;
    uint64_t  limit;                  /* UINT64_MAX: none */
} kvs_gram_work_t;

#define kvs_gram_work_over(wk)  ((wk)->used > (wk)->limit)

#define KVS_GRAM_MEMO_STATES  1024
/* a table's memo (kvs_gram_masker_init_table): a grammar's warm and
 * first requests make 200-550 states; 1,024 warmed no faster (its
 * larger tables' first touches cost the warm more) */
#define KVS_GRAM_TABLE_MEMO_STATES  512

/* max_depth: the longest path a walk will take (the vocabulary's
 * max_len). */
int kvs_gram_memo_new(kvs_gram_memo_t **out, uint32_t max_states,
    uint32_t max_depth, kvs_err_t *err);
void kvs_gram_memo_free(kvs_gram_memo_t *mo);

/* Its states at most (0: none, or mo NULL), and the bytes its tables
 * take at their full size (mapped as walks touch them). */
uint32_t kvs_gram_memo_states(const kvs_gram_memo_t *mo);
size_t kvs_gram_memo_bytes(uint32_t max_states);

/* The counter mo's steps add to (NULL: its own, never bounded). */
void kvs_gram_memo_work(kvs_gram_memo_t *mo, kvs_gram_work_t *wk);

/* A walk from m's current state (m is only ever moved by the memo until
 * kvs_gram_memo_end(), which puts it back). */
void kvs_gram_memo_begin(kvs_gram_memo_t *mo, kvs_gram_matcher_t *m);

/*
 * The trie node at depth (1 .. max_depth) with byte b, whose parent (the
 * last node taken at depth - 1; depth 1: the walk's start) was taken:
 * 1 if the grammar takes it (*sent: a cut stack popped into its
 * sentinel there), 0 if not (refused, or a cap on this path: refusing is
 * always safe).
 */
int kvs_gram_memo_step(kvs_gram_memo_t *mo, uint32_t depth, uint8_t b,
    uint32_t *sent);

void kvs_gram_memo_end(kvs_gram_memo_t *mo);

/*
 * A whole trie walk from m's state through the memo, its hits taken
 * inline: bits (zeroed by the caller) get every text token the grammar
 * takes; dep, when not NULL, is called with each range of sorted tokens
 * ids[lo .. hi) refused after a prefix of theirs reached a cut stack's
 * sentinel (kvs_gram_ind.c's context-independent entries), and its
 * error ends the walk.  Subtrees whose every string the memo proves
 * accepted are taken whole without stepping their nodes
 * (kvs_gram_memo_skip.c says when that is exact).
 */
typedef int (*kvs_gram_walk_dep_pt)(void *arg, uint32_t lo, uint32_t hi);

/*
 * A walk's source for its short tokens (kvs_gram_ind.c: an entry whose
 * key differs from src's only in the copies a counted repetition has
 * left, len the fewest of them): every trie subtree whose tokens are all
 * shorter than len bytes takes src's classification (accepted: bits,
 * NULL for none; dependent: the sorted disjoint ranges of sorted token
 * positions) without being stepped.  NULL: every node is walked.
 */
typedef struct {
    uint32_t         len;
    const uint32_t  *bits;
    const uint32_t  *ranges;
    uint32_t         n_ranges;
} kvs_gram_walk_src_t;

int kvs_gram_memo_walk(kvs_gram_memo_t *mo, kvs_gram_matcher_t *m,
    const kvs_gram_vocab_t *gv, uint32_t *bits, kvs_gram_walk_dep_pt dep,
    void *arg, const kvs_gram_walk_src_t *src);

/* The text tokens at the sorted positions of ranges (ranges[2 r] ..
 * ranges[2 r + 1], sorted and disjoint) that m's state takes, set in
 * bits (others left as they are), through the memo's steps: exactly
 * the plain walk's verdicts on them.  1 if it set one. */
int kvs_gram_memo_walk_ranges(kvs_gram_memo_t *mo, kvs_gram_matcher_t *m,
    const kvs_gram_vocab_t *gv, uint32_t *bits, const uint32_t *ranges,
    uint32_t n_ranges);

/* Walks whose accepted tokens were set by the complement (the
 * vocabulary's text tokens less those outside the accepted ranges,
 * kvs_gram_memo_walk.c), since kvs_gram_memo_new(). */
uint64_t kvs_gram_memo_inverted(const kvs_gram_memo_t *mo);

/* Subtree skipping on (the default) or off (every node stepped: the
 * reference the tests compare with); the setting it had returned. */
int kvs_gram_memo_skip(kvs_gram_memo_t *mo, int on);

/* The class automaton (kvs_gram_memo_skip.c): its state after byte b from
 * state q (0: between characters), KVS_GRAM_CLS_DEAD once the bytes
 * leave the class; the vocabulary trie records it per node. */
#define KVS_GRAM_CLS_DEAD  15
/* How a long token's run of characters ends (kvs_gram_vocab_t's
 * long_cls): it does not (the whole token), at a character's boundary
 * on a byte that begins none, or inside a character. */
#define KVS_GRAM_RUN_ALL   0
#define KVS_GRAM_RUN_STOP  1
#define KVS_GRAM_RUN_CUT   2

/* Text token x (sorted position) read as a JSON string's characters by
 * the class automaton: its long_cls word (kvs_gram_vocab_t; the
 * characters it begins in bits 0-15), and in *at the offset where the
 * run ends (the token's length if it does not) (kvs_gram_vocab.c). */
uint32_t kvs_gram_vocab_run(const kvs_gram_vocab_t *gv, uint32_t x,
    uint32_t *at);

uint8_t kvs_gram_memo_class(uint8_t q, uint8_t b);

/* A byte's group for loop skipping (kvs_gram_memo_skip.c): 0-9, a-f,
 * g-z, A-F, G-Z, space, each other printable ASCII byte on its own, the
 * controls, DEL, and the UTF-8 continuation and lead byte ranges; fewer
 * than 64, so a set of them is one word. */
uint8_t kvs_gram_byte_group(uint8_t b);

/* The main walk's fan lists (kvs_gram_vocab_t.fan_*: a node's children
 * the state refuses passed by their bytes, their nodes not read) on or
 * off from the next walk (on by default); the former setting
 * (kvs_gram_memo_walk.c). */
int kvs_gram_memo_fans(kvs_gram_memo_t *mo, int on);

/* Trie nodes passed so since kvs_gram_memo_new(). */
uint64_t kvs_gram_memo_fanned(const kvs_gram_memo_t *mo);

/* Subtrees taken whole by loop skipping so far, and their nodes. */
void kvs_gram_memo_loops(const kvs_gram_memo_t *mo, uint64_t st[2]);

/* Loop regions begun so far, and the nodes their runs took
 * (kvs_gram_memo_walk.c). */
void kvs_gram_memo_regions(const kvs_gram_memo_t *mo, uint64_t st[2]);

/* From the next walk on: positions of counted repetitions with more
 * than theta copies left named by their family (0: off, the default);
 * exact for every token of at most theta bytes (kvs_gram_memo.c). */
void kvs_gram_memo_rename(kvs_gram_memo_t *mo, uint32_t theta);

/* For the next walk only (and only without renaming): begin on the
 * states, transitions and proved verdicts of the walks before, when
 * they were on the same grammar and caps, naming every stack by its
 * whole chain of positions (kvs_gram_memo.c, "Kept across walks");
 * else from an empty memo, as every walk without it does. */
void kvs_gram_memo_keep(kvs_gram_memo_t *mo, int on);

/* Walks that began on an earlier walk's states. */
uint64_t kvs_gram_memo_kept(const kvs_gram_memo_t *mo);

/* Positions renamed so, since kvs_gram_memo_new(): a walk that left it
 * unchanged named every state exactly. */
uint64_t kvs_gram_memo_renamed(const kvs_gram_memo_t *mo);

/* Counters since kvs_gram_memo_new(): st[0] hits, st[1] misses (matcher
 * byte steps), st[2] states made, st[3] clears past a cap. */
void kvs_gram_memo_stats(const kvs_gram_memo_t *mo, uint64_t st[4]);

/* Subtree skipping since kvs_gram_memo_new(): st[0] subtrees taken
 * whole, st[1] trie nodes they held, st[2] closures proved, st[3]
 * refuted. */
void kvs_gram_memo_skips(const kvs_gram_memo_t *mo, uint64_t st[4]);

/* Transitions the memo filled in from another byte of the same class
 * (kvs_gram_t's bnext), since kvs_gram_memo_new(). */
uint64_t kvs_gram_memo_by_class(const kvs_gram_memo_t *mo);

/* Trie nodes walks took from their source (kvs_gram_walk_src_t) without
 * stepping them, since kvs_gram_memo_new(). */
uint64_t kvs_gram_memo_copied(const kvs_gram_memo_t *mo);

/* Subtrees taken by counted skipping (kvs_gram_memo_skip.c: a bounded
 * string's subtree decided by its tokens' character counts) and the
 * trie nodes below them not stepped, since kvs_gram_memo_new(). */
void kvs_gram_memo_counted(const kvs_gram_memo_t *mo, uint64_t st[2]);

/* Where counted skipping is tried: walks from a source whose count is
 * at most max_count (0: nowhere, the reference the tests compare with),
 * at nodes with at least min_nodes below them (defaults 12 and 256:
 * below those an attempt's exploration costs more than the nodes it
 * saves). */
void kvs_gram_memo_counting(kvs_gram_memo_t *mo, uint32_t min_nodes,
    uint32_t max_count);

/* Per matcher: the mask and its cache of masks by matcher state. */
typedef struct kvs_gram_masker_s {
    const kvs_gram_vocab_t  *gv;
    kvs_gram_matcher_t      *m;
    uint32_t                 words;   /* (n_tokens + 31) / 32 */
    kvs_gram_centry_t       *cache;
    uint32_t                 n_cache, cap_cache, next_evict;
    uint64_t                 hits, misses;

    /* a mask that was its entries' union alone, at most one of them
     * read whole (cheap), is as fast to make again as to copy, and is
     * not kept, so that the slots stay with the masks that checked
     * tokens (unkept counts those); keepall: every mask kept (the
     * tests of the cache's keys) */
    uint32_t                 cheap;
    int                      keepall;
    uint64_t                 unkept;

    /* context-independent masks by the top KVS_GRAM_CUT positions of a
     * stack (kvs_gram_ind.c) */
    kvs_gram_ientry_t       *ind;
    kvs_gram_ientry_t      **used;    /* [max_front] this mask's entries */
    uint32_t                *kbuf;    /* [max_front + 1] a mask's sorted
                                         frontier, its state cache key */
    uint32_t                 n_ind, cap_ind, next_ind;
    /* entries held that were built (at most cap_built: their bits are
     * theirs) and that lend a slice's (kvs_gram_ind.c); a table has as
     * many slots again for the latter, a masker's own table none */
    uint32_t                 n_built, n_lent, cap_built;
    /* the used entries by key hash: open addressing, linear probing,
     * slot = index in ind + 1 (0: empty), at most half full */
    uint32_t                *islot;   /* [islot_mask + 1] */
    uint32_t                 islot_mask;
    uint64_t                 ind_hits, ind_misses, checked, serial;
    uint64_t                 ind_sparse;      /* entries of this table
                                                 made that list their
                                                 words (kvs_gram_ind.c's
                                                 seal) */

    /* entries built from a source entry (kvs_gram_walk_src_t); nosrc:
     * build every entry by a full walk (the reference the tests
     * compare with) */
    uint64_t                 ind_src;
    int                      nosrc;

    /* entries of a class run's counts taken from the entry of the
     * family's largest count (kvs_gram_run.c); noruns: walked as any
     * other (the reference the tests compare with) */
    uint64_t                 ind_runs;
    int                      noruns;

    /* a table's trie levels of its runs' first classes (kvs_gram_run.c),
     * n_rlev of them, made on a class's first derive; rlev_max the
     * ranges a class's may hold (0: KVS_GRAM_RUN_LEV_MAX; more: none
     * kept, the counts' DFS); nolevels: each derive walks the trie (the
     * reference the tests compare with); ind_levels the entries derived
     * from levels */
    struct kvs_gram_rlev_s  *rlev;
    uint32_t                 n_rlev, rlev_max;
    int                      nolevels;
    uint64_t                 ind_levels;

    /* an entry with no source is walked in passes with counted
     * repetitions renamed (kvs_gram_ind.c, kvs_gram_ind_passes), the
     * first with theta0 (0: KVS_GRAM_THETA0); norename: one walk with
     * none (the reference the tests compare with) */
    uint32_t                 theta0;
    int                      norename;

    /* the memo keeps what one entry's walk learnt for the next ones
     * (kvs_gram_memo_keep: the cut walks without renaming); nokeep:
     * every walk starts from an empty memo (the reference the tests
     * compare with) */
    int                      nokeep;

    /* not NULL: the context-independent entries are this table's (shared
     * by the maskers of one grammar and vocabulary), not ours */
    struct kvs_gram_masker_s *ind_owner;

    /* the trie walks' transition memo (KVS_GRAM_MEMO_STATES states
     * unless kvs_gram_masker_memo() said otherwise).  A table's serves
     * the entry builds of every masker sharing it (the warm's too), so
     * a request's first builds step the transitions the warm and the
     * requests before it learnt (kvs_gram_ind.c); a sharing masker's
     * own then serves its plain walks alone, and one with no states
     * builds without a memo, as the tests' reference */
    kvs_gram_memo_t         *memo;

    /* the dependent tokens of a mask's entries are checked on the real
     * stacks in one walk of their merged ranges through a memo of their
     * own (KVS_GRAM_CMEMO_STATES states, made on first use; the kept
     * memo above is not disturbed), mr the merged ranges;
     * nocheckmemo: token by token on the matcher (the reference the
     * tests compare with) */
    kvs_gram_memo_t         *cmemo;
    uint32_t                *mr;
    uint32_t                 cap_mr;
    int                      nocheckmemo;
    uint32_t                 check_memo_min;  /* fewer dependent tokens
                                                 are checked one by one
                                                 (0: 4000) */
    uint64_t                 checks_memo;     /* masks checked so */

    /* a new entry whose key has no counted position is taken from the
     * vocabulary's slices when its shape is there (kvs_gram_slice.c);
     * noslices: never (the reference the tests compare with) */
    int                      noslices;
    uint64_t                 ind_slices;      /* entries taken so */
    kvs_gram_shbuf_t        *shbuf;           /* the lookups' scratch,
                                                 made on first use */

    /* the verdicts of the dependent tokens shorter than the state's
     * smallest tier count, kept per canonical state (kvs_gram_verdict.c:
     * a bounded string's closing tokens, the same at each of its
     * characters);
     * vname the names of a mask's stacks; noverdicts: every dependent
     * token checked at every mask (the reference the tests compare
     * with) */
    kvs_gram_ventry_t       *vc;
    uint32_t                 n_vc, cap_vc, next_vc;
    uint32_t                *vname;           /* [3 * max_front] */
    int                      noverdicts;
    uint64_t                 verdict_hits, verdict_fills;

    /* a low-tier key's long tokens (gv->long_x) classified by the cut
     * walk from the key's own counts (kvs_gram_long.c), so that in a
     * bounded string near rep_low they are not checked on the real
     * stacks at every mask: the table's cache of those classifications
     * (KVS_GRAM_LONG_SLOTS, made on first use); vtop a mask's stacks'
     * top positions and whether their key is a low tier's; nolong: the
     * long tokens checked as any dependent one (the reference the
     * tests compare with) */
    struct kvs_gram_lentry_s *lc;
    uint32_t                *vtop;            /* [3 * max_front] */
    int                      nolong;
    uint64_t                 long_builds, long_hits;
    /* ... or by the tokens' characters (kvs_gram_long_direct), where
     * nodirect does not say otherwise; and the fills that took those */
    int                      nodirect;
    uint64_t                 long_direct, fills_direct;

    /* inside a free string, the tokens that close it decided by what
     * follows their quote (kvs_gram_exit.c), unless noexits (the
     * reference the tests compare with); exits the masks decided so
     * (exits_kept of them at a state whose shorter tokens' verdicts
     * were kept, kvs_gram_verdict.c), exit_tails the tails fed; decided, while a mask checks the rest,
     * the tokens it decided (the check skips them, NULL: none); xacc,
     * xpath its scratch, made on first use */
    int                      noexits;
    uint64_t                 exits, exits_kept, exit_tails;
    const uint32_t          *decided;
    uint32_t                *xacc;            /* [n_tails] */
    uint32_t                *xpath;           /* [max_len + 2] */

    /* this mask's work (zeroed as each mask begins) and its bound
     * (kvs_gram_masker_budget); work_max the most one mask took */
    kvs_gram_work_t          work;
    uint64_t                 work_max;
} kvs_gram_masker_t;

/* What a check that fills the verdict cache saw: the tokens it accepted
 * (ids, room for every token checked), the largest frontier, the most
 * kvs_gram_intern calls along one token's path (path[d]: along the
 * current path's first d bytes, [max_len + 1]). */
typedef struct {
    uint32_t  *ids;
    uint32_t   n_ids;
    uint32_t  *path;
    uint32_t   front, nodes;
} kvs_gram_vrec_t;

/* Verdict cache entries per masker (a handful of strings' states). */
#define KVS_GRAM_VERDICTS  8

/* kvs_gram_verdict.c, for kvs_gram_mask.c: the dependent tokens of
 * ranges with lo <= length < hi checked on the real stacks (1 if one was
 * allowed); the mask's used entries' dependent tokens through the cache
 * for the canonical state of mk->vname's n names (1 if one was allowed,
 * -1 out of memory); its entries whose below ids the matcher truncated
 * (low_water) dropped; the cache made (KVS_ENOMEM: none), and freed. */
int kvs_gram_check_ranges(kvs_gram_masker_t *mk, const uint32_t *ranges,
    uint32_t n_ranges, uint32_t lo, uint32_t hi, uint32_t *bits,
    kvs_gram_vrec_t *rec);
int kvs_gram_verdict_check(kvs_gram_masker_t *mk, uint32_t n, uint32_t len,
    uint32_t n_used, uint32_t *bits);
void kvs_gram_verdict_purge(kvs_gram_masker_t *mk, uint32_t low_water);
int kvs_gram_verdict_init(kvs_gram_masker_t *mk, uint32_t max_front);
void kvs_gram_verdict_free(kvs_gram_masker_t *mk);

/* An entry's dependent ranges (kvs_gram_ind.c). */
void kvs_gram_ientry_ranges(const kvs_gram_ientry_t *e,
    const uint32_t **ranges, uint32_t *n_ranges);

/* The check memo's states (kvs_gram_masker_t.cmemo): at most ~0.9 MiB
 * a masker, touched as used. */
#define KVS_GRAM_CMEMO_STATES  256

/* The first renaming pass's theta: tokens of at most 15 bytes are most
 * of a vocabulary's trie, and a bounded string more than 15 characters
 * from its bound keeps recurring states through them. */
#define KVS_GRAM_THETA0  15

/* An entry whose nonzero words are at most 1/8 of its bits keeps them
 * listed too (kvs_gram_ind.c's seal): a quarter of the bits' bytes at
 * most, read instead of all of them. */
#define KVS_GRAM_SPARSE_DIV  8

/* How many top stack nodes a context-independent mask looks at: inside a
 * string, the character, the loop and the closing quote. */
#define KVS_GRAM_CUT  2

/* cache_entries 0: no caches at all, every mask a full trie walk (the
 * reference the tests compare with). */
int kvs_gram_masker_init(kvs_gram_masker_t *mk, const kvs_gram_vocab_t *gv,
    kvs_gram_matcher_t *m, uint32_t cache_entries, kvs_err_t *err);
void kvs_gram_masker_free(kvs_gram_masker_t *mk);

/* The trie walks' memo with at most max_states states (0: none, every
 * walk plain and every dependent token checked one by one, nocheckmemo;
 * masks are the same either way, only their time differs). */
int kvs_gram_masker_memo(kvs_gram_masker_t *mk, uint32_t max_states,
    kvs_err_t *err);

/*
 * A table of context-independent entries only (no matcher, no state
 * cache; kvs_gram_masker_free() frees it): the entries depend only on
 * the grammar and the vocabulary, so the maskers of one grammar can
 * share one table and each entry's trie walk (the expensive first mask
 * of a string, a key, a number) is paid once for all of them.  At most
 * `entries` built entries of n_tokens bits each (plus their dependent
 * ranges), as many again that lend a vocabulary slice's (a slot each,
 * ~100 bytes, no bits of their own: kvs_gram_slice.c), and a memo of KVS_GRAM_TABLE_MEMO_STATES states for their builds
 * (kvs_gram_memo_bytes(KVS_GRAM_TABLE_MEMO_STATES) more at most: 1.55
 * MiB), and once a low tier's key is met the cache of its long tokens'
 * classifications (kvs_gram_long.c: kvs_gram_long_bytes(), 88 KiB),
 * and once a class run is derived its classes' trie levels
 * (kvs_gram_run.c: kvs_gram_run_bytes() at most, 514 KiB).
 * Every masker sharing a table, and the table, must be used by one
 * thread at a time.
 */
int kvs_gram_masker_init_table(kvs_gram_masker_t *t,
    const kvs_gram_vocab_t *gv, uint32_t entries, kvs_err_t *err);
size_t kvs_gram_long_bytes(void);
size_t kvs_gram_run_bytes(void);

/* mk (initialised with cache_entries > 0, over the same vocabulary and a
 * matcher of the table's grammar) uses t's entries from now on; its own
 * are freed.  t must outlive mk's use. */
void kvs_gram_masker_share(kvs_gram_masker_t *mk, kvs_gram_masker_t *t);

/* What kvs_gram_masker_warm() did: keys tried (not in the table; a
 * slice may then give one, lent), entries it built (or copied from slices:
 * slices of them), the table's entries after, keys
 * skipped as dearer than their share, its work units, and done: every
 * key of the grammar was tried; runs: entries of class runs (a run's
 * largest count, and counts taken from it) built on their allowance
 * (kvs_gram_warm.c), run_units the work spent from it; lent: entries
 * its first pass took from slices (of slices). */
typedef struct {
    uint32_t  keys, built, slices, entries, skipped, runs, lent;
    uint64_t  units, run_units;
    int       done;
    int       late;                   /* the time bound ended it */
} kvs_gram_warm_stats_t;

/*
 * Builds into table t (kvs_gram_masker_init_table, not yet shared with
 * another table) the entries of the keys g's stacks can show
 * (kvs_gram_warm.c), nearest the root first, as masks with matcher
 * limits lim would build them, until `units` of work are spent (0: no
 * bound; a build the bound cuts short is not kept; class runs' largest
 * counts have as many again of their own), t holds `fill` built
 * entries (at most `entries`), or every key is tried; first it lends
 * every key's slice it has, at most `fill` of them.  A bound met is
 * KVS_OK: the masks build what is left as they meet it.  st may be NULL.
 * The caller's thread must be the only one using t.
 */
int kvs_gram_masker_warm(kvs_gram_masker_t *t, const kvs_gram_t *g,
    const kvs_gram_mlimits_t *lim, uint64_t units, uint32_t fill,
    kvs_gram_warm_stats_t *st, kvs_err_t *err);

/* The same, and no key's build begins once `ns` nanoseconds of the
 * monotonic clock have passed since the call (0: no bound; st->late
 * then set).  The entries are the same the units would give, less those
 * the time left out: a mask builds them when it meets them, so masks
 * are alike either way, only the first requests' slower. */
int kvs_gram_masker_warm_until(kvs_gram_masker_t *t, const kvs_gram_t *g,
    const kvs_gram_mlimits_t *lim, uint64_t units, uint64_t ns,
    uint32_t fill, kvs_gram_warm_stats_t *st, kvs_err_t *err);

/* The engine's warm of a grammar's table: units of work (a trie node
 * stepped is one; ~2-6 ms on the 128K-152K vocabularies here, measured
 * with the compile inside the 10 ms compile goal: docs/grammar.md,
 * "Warming a grammar's table at compile"; 60,000 until the 64 sample
 * texts, "A string's closing tokens decided by their tails"), and at
 * most 7/8 of the table's entries (3/4 until then), the rest kept for
 * the keys the warm did not reach. */
#define KVS_GRAM_WARM_UNITS       90000
#define KVS_GRAM_WARM_FILL(n)     ((n) / 8 * 7)

/* and at most this much time: the units take 3-7 ms on a quiet host of
 * this project's, up to half as long again on a loaded one; the warm
 * stalls the engine's step, and the compile goal is 10 ms (a build
 * begun before the bound ends: ~0.4 ms, a class run's source ~2 ms) */
#define KVS_GRAM_WARM_NS          7000000

/* Calls cb on each of mk's own context-independent entries: its key,
 * accepted bits, dependent ranges, whether its build met a cap; stops at
 * the first status other than KVS_OK and returns it. */
typedef int (*kvs_gram_entry_pt)(void *arg, const uint32_t *key,
    const uint32_t *bits, const uint32_t *ranges, uint32_t n_ranges,
    uint32_t some, int capped);
int kvs_gram_masker_entries(const kvs_gram_masker_t *mk,
    kvs_gram_entry_pt cb, void *arg);

/* bits[words]: bit i (bits[i >> 5] >> (i & 31)) set iff token i may come
 * next.  KVS_EFORMAT if no token can (a dead end the vocabulary cannot
 * spell: the caller ends the request with an error). */
int kvs_gram_mask(kvs_gram_masker_t *mk, uint32_t *bits, kvs_err_t *err);

/* The engine's bound on one mask's work (kvs_gram_work_budget): walks
 * of the vocabulary's trie, 4.5 times the most one mask of a legitimate
 * schema was measured to take (1.33 walks on Qwen2's vocabulary,
 * docs/grammar.md, "A mask's work budget"), counted on a trie of at
 * least 2^18 nodes (a 128K vocabulary's is about that): a unit costs
 * about the same on any vocabulary, and a small trie's walks are cheap
 * beside a mask's work that does not scale with it. */
#define KVS_GRAM_WORK_WALKS       6
#define KVS_GRAM_WORK_MIN_NODES   (1u << 18)

uint64_t kvs_gram_work_budget(const kvs_gram_vocab_t *gv);

/* At most units of work (kvs_gram_work_t) per mask from now on (0: no
 * bound).  A mask that would take more fails with KVS_ETOOLONG and
 * nothing it cut short is kept (the entry whose walk was cut, the
 * verdicts, the cached mask); the whole entries it built before stay,
 * so a try again may get further, never past the bound.  The engine
 * ends the request. */
void kvs_gram_masker_budget(kvs_gram_masker_t *mk, uint64_t units);

#endif /* KVS_GRAMMAR_H */
