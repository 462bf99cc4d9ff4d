/*
 * kvs_gram_slice: context-independent entries precomputed once per
 * vocabulary, for the sub-grammars every JSON grammar spells the same
 * way (a free string's body, each `format`'s parts, json_object's
 * values), found by any grammar's masker by the shape of what a key can
 * reach.
 *
 * Owns kvs_gram_slices_t (kvs_gram_vocab_t.slices): at most
 * KVS_GRAM_SLICES_MAX entries, each a shape (the canonical serialisation
 * of the sub-grammar a cut stack with those top positions can reach,
 * kvs_gram_shape), the caps it was built under, and the entry itself
 * (accepted bits by token id, dependent ranges of sorted positions: both
 * the vocabulary's, not a grammar's).  Built by kvs_gram_vocab_slices()
 * when the vocabulary is, from fixed reference schemas walked along
 * fixed sample texts, never from a request; immutable afterwards, so
 * any number of maskers and threads read it.  This is llguidance's
 * "slices" in our terms: token sets precomputed per tokenizer for the
 * sub-languages JSON grammars share, outside the per-token time.
 *
 * Why a hit is exact: a context-independent entry is the classification
 * of every token by the matcher run from a cut stack (key[0], key[1],
 * then the sentinel: kvs_gram_ind.c).  That run reads the grammar only
 * through the elements reachable from the key's positions (each
 * alternative from the position to its END, and every alternative of
 * every rule referenced from those, transitively; dead alternatives are
 * never entered), the rules' nullable flags and FIRST sets (functions of
 * the reachable rules, when `lazy`: the fixpoint settled) and the caps.
 * Two keys whose reachable sub-grammars are equal up to renaming the
 * rules (the shape numbers rules by first reference) have isomorphic
 * runs: the same bytes taken at every step, the same stacks up to the
 * renaming, the same node and frontier counts, so the same tokens
 * accepted, refused and dependent.  Caps: an entry whose build never
 * met a cap (kvs_gram_matcher_t.capped) is the uncapped classification,
 * so it holds for any caps at least as large.
 *
 * Counted keys (a bounded string's characters, kvs_gram_rep.c): the
 * masker names such a position by its family's member with the same
 * count, or the tier's (kvs_gram_ind_key), and that member reaches one
 * rule per copy left down to the repetition's end, so its shape holds
 * the count: `maxLength` 40 and 500 strings reach the same sub-grammar
 * with 20 copies left.  What the count adds beyond the sub-grammar is
 * which tokens the entry leaves to the real stacks (a low tier's long
 * ones), decided by the key positions' counts, so the head holds those
 * too.  The tier at max_len + 1 reaches max_len + 1 rules (129 on Llama
 * 3 and Qwen2), hence the rule cap below.
 *
 * Memory (per vocabulary, once): at most KVS_GRAM_SLICES_MAX entries of
 * (n_tokens + 31) / 32 words, at most KVS_GRAM_SLICE_RANGES range pairs
 * and KVS_GRAM_SHAPE_MAX shape words each: on Qwen2 (151,646 tokens)
 * under 512 x (19 + 32 + 32) KiB = 42 MiB; 329 slices, about 7 MiB, on
 * the references below (built in ~140 ms, most of it the bounded
 * strings' 40 characters and json_object's texts).
 */

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/kvs_hash.h"
#include "grammar/kvs_grammar.h"


/* At most this many slices per vocabulary, of at most this many
 * dependent range pairs and shape words each. */
#define KVS_GRAM_SLICES_MAX    512
#define KVS_GRAM_SLICE_RANGES  4096
#define KVS_GRAM_SHAPE_MAX     8192

typedef struct {
    uint32_t           *shape;
    uint32_t            n_shape;
    uint64_t            hash;
    uint64_t            head;         /* hash of the key positions' part */
    kvs_gram_mlimits_t  lim;          /* built under these, no cap met */
    uint32_t           *bits;
    uint32_t           *ranges;
    uint32_t            n_ranges;
    uint32_t            some;
    uint32_t           *sparse;       /* bits' nonzero words, or NULL */
    uint32_t            n_sparse;
} kvs_gram_slice_t;

struct kvs_gram_slices_s {
    kvs_gram_slice_t    s[KVS_GRAM_SLICES_MAX];
    uint64_t            heads[KVS_GRAM_SLICES_MAX];   /* s[i].head, side
                                                         by side: most
                                                         lookups read
                                                         only these */
    uint32_t            n;
    uint32_t            words;
};


/* ---- the shape ---------------------------------------------------------- */

/* At most this many rules in a shape: a bounded string's tier at
 * max_len + 1 reaches a rule per copy left (129 on Qwen2 and Llama 3),
 * and vocabularies with longer tokens only lose that tier's slice.  The
 * ranks are found through a hash of twice as many slots. */
#define KVS_GRAM_SHAPE_RULES  512
#define KVS_GRAM_SHAPE_SLOTS  1024

#define KVS_GRAM_SH_NIL    0xffffffffu    /* a key position below a stack */
#define KVS_GRAM_SH_SEG    0xfffffff0u    /* a key position's alternative */
#define KVS_GRAM_SH_RULE   0xffffffe0u    /* | nullable: a rule, then its
                                             alternatives' count */
#define KVS_GRAM_SH_DEAD   0xffffffd0u    /* an alternative never entered */

/* The slices a lookup's shape may still be (those whose head is its
 * head): the run stops once its words are a prefix of none. */
#define KVS_GRAM_SHAPE_FOLLOW  16

/* A shape run's scratch: slot[i] holds a rank + 1 while sstamp[i] is
 * the run's stamp (a new run frees them all by taking a new stamp);
 * pref[0 .. n_pref) the shapes it follows (none: it runs to the end),
 * their first `same` words checked equal to out's. */
typedef struct {
    const kvs_gram_t  *g;
    uint32_t          *out;
    uint32_t           n, cap;
    const kvs_gram_slice_t  *pref[KVS_GRAM_SHAPE_FOLLOW];
    uint32_t           n_pref, same;
    uint32_t           rules[KVS_GRAM_SHAPE_RULES];
    uint32_t           n_rules;
    uint32_t           stamp;
    uint32_t           slot[KVS_GRAM_SHAPE_SLOTS];
    uint32_t           sstamp[KVS_GRAM_SHAPE_SLOTS];
} kvs_gram_sh_t;

struct kvs_gram_shbuf_s {
    uint32_t           out[KVS_GRAM_SHAPE_MAX];
    kvs_gram_sh_t      sh;
};


static int
kvs_gram_sh_put(kvs_gram_sh_t *sh, uint32_t w)
{
    if (sh->n == sh->cap) {
        return KVS_ETOOLONG;
    }
    sh->out[sh->n++] = w;
    return KVS_OK;
}


/* A rule's number in the shape: its rank of first reference. */
static int
kvs_gram_sh_rule(kvs_gram_sh_t *sh, uint32_t r, uint32_t *ix)
{
    uint32_t  i;

    /* at most half the slots are taken, so a free one is always met */
    for (i = (r * 2654435761u) & (KVS_GRAM_SHAPE_SLOTS - 1);
         sh->sstamp[i] == sh->stamp;
         i = (i + 1) & (KVS_GRAM_SHAPE_SLOTS - 1))
    {
        if (sh->rules[sh->slot[i] - 1] == r) {
            *ix = sh->slot[i] - 1;
            return KVS_OK;
        }
    }
    if (sh->n_rules == KVS_GRAM_SHAPE_RULES) {
        return KVS_ETOOLONG;
    }
    sh->rules[sh->n_rules] = r;
    sh->slot[i] = sh->n_rules + 1;
    sh->sstamp[i] = sh->stamp;
    *ix = sh->n_rules++;
    return KVS_OK;
}


/* The elements from position p to its alternative's END, inclusive:
 * one word each, a reference by its rule's rank. */
static int
kvs_gram_sh_alt(kvs_gram_sh_t *sh, uint32_t p)
{
    uint32_t                 ix;
    const kvs_gram_elem_t   *e;

    for ( ;; p++) {
        if (p >= sh->g->n_elems) {
            return KVS_ETOOLONG;      /* not a finished grammar's */
        }
        e = &sh->g->elems[p];

        switch (e->kind) {

        case KVS_GRAM_END:
            return kvs_gram_sh_put(sh, 0);

        case KVS_GRAM_BYTES:
            if (kvs_gram_sh_put(sh, 1u | (uint32_t) e->lo << 8
                                    | (uint32_t) e->hi << 16) != KVS_OK)
            {
                return KVS_ETOOLONG;
            }
            break;

        case KVS_GRAM_RULE:
            if (kvs_gram_sh_rule(sh, e->rule, &ix) != KVS_OK
                || kvs_gram_sh_put(sh, 2u | ix << 8) != KVS_OK)
            {
                return KVS_ETOOLONG;
            }
            break;

        default:
            return KVS_ETOOLONG;      /* DEAD only starts an alternative */
        }
    }
}


/* Drops the followed shapes that out's words since the last check do
 * not continue; KVS_ENOTFOUND when none is left. */
static int
kvs_gram_sh_follow(kvs_gram_sh_t *sh)
{
    uint32_t                 i;
    const kvs_gram_slice_t  *s;

    for (i = 0; i < sh->n_pref; /* void */) {
        s = sh->pref[i];
        if (s->n_shape < sh->n
            || memcmp(s->shape + sh->same, sh->out + sh->same,
                      (size_t) (sh->n - sh->same) * sizeof(uint32_t)) != 0)
        {
            sh->pref[i] = sh->pref[--sh->n_pref];
            continue;
        }
        i++;
    }
    sh->same = sh->n;

    return sh->n_pref > 0 ? KVS_OK : KVS_ENOTFOUND;
}


static uint64_t
kvs_gram_shape_hash(const uint32_t *w, uint32_t n)
{
    return kvs_fnv1a64(KVS_FNV1A64_INIT, w, (size_t) n * sizeof(uint32_t));
}


/*
 * The shape of key (KVS_GRAM_CUT positions, top first): the grammar's
 * lazy flag, each key position's alternative from it (the head: *head,
 * its hash, when head is not NULL), then every rule reached, in rank
 * order, with its nullable flag and its alternatives (a dead one as one
 * word: the matcher never enters it).  KVS_OK and *n words in out, or
 * KVS_ETOOLONG past cap words or KVS_GRAM_SHAPE_RULES rules (no shape:
 * no slice).  With only_head, stops after the head (*n its words).  sh
 * is scratch.
 */
static int
kvs_gram_shape_run(const kvs_gram_t *g, const uint32_t *key, uint32_t *out,
    uint32_t cap, uint32_t *n, uint64_t *head, int only_head,
    kvs_gram_sh_t *sh)
{
    uint32_t  k, i, a, r;

    sh->g = g;
    sh->out = out;
    sh->n = 0;
    sh->cap = cap;
    sh->n_rules = 0;
    if (++sh->stamp == 0) {
        /* wrapped: no slot may look taken */
        memset(sh->sstamp, 0, sizeof(sh->sstamp));
        sh->stamp = 1;
    }

    if (!g->finished || kvs_gram_sh_put(sh, (uint32_t) g->lazy) != KVS_OK) {
        return KVS_ETOOLONG;
    }

    for (k = 0; k < KVS_GRAM_CUT; k++) {
        if (key[k] == KVS_GRAM_NIL) {
            if (kvs_gram_sh_put(sh, KVS_GRAM_SH_NIL) != KVS_OK) {
                return KVS_ETOOLONG;
            }
            continue;
        }
        if (kvs_gram_sh_put(sh, KVS_GRAM_SH_SEG) != KVS_OK
            || kvs_gram_sh_alt(sh, key[k]) != KVS_OK)
        {
            return KVS_ETOOLONG;
        }
    }

    /* the key positions' counts: with the sub-grammar they decide which
     * tokens the entry leaves to the real stacks (a low tier's long
     * ones, kvs_gram_ind_key), and a grammar may index a repetition
     * that another spells alike but does not */
    for (k = 0; k < KVS_GRAM_CUT; k++) {
        if (kvs_gram_sh_put(sh, kvs_gram_rep_count(g, key[k])) != KVS_OK) {
            return KVS_ETOOLONG;
        }
    }

    if (head != NULL) {
        *head = kvs_gram_shape_hash(sh->out, sh->n);
    }
    if (only_head) {
        *n = sh->n;
        return KVS_OK;
    }

    /* rules are appended to sh->rules while this runs */
    for (i = 0; i < sh->n_rules; i++) {
        r = sh->rules[i];
        if (kvs_gram_sh_put(sh, KVS_GRAM_SH_RULE
                                 | (g->nullable != NULL && g->nullable[r]))
                != KVS_OK
            || kvs_gram_sh_put(sh, g->rule_alt[r + 1] - g->rule_alt[r])
                != KVS_OK)
        {
            return KVS_ETOOLONG;
        }

        for (a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
            if (g->elems[g->alt_start[a]].kind == KVS_GRAM_DEAD) {
                if (kvs_gram_sh_put(sh, KVS_GRAM_SH_DEAD) != KVS_OK) {
                    return KVS_ETOOLONG;
                }
                continue;
            }
            if (kvs_gram_sh_alt(sh, g->alt_start[a]) != KVS_OK) {
                return KVS_ETOOLONG;
            }
        }

        if (sh->n_pref > 0 && kvs_gram_sh_follow(sh) != KVS_OK) {
            return KVS_ENOTFOUND;
        }
    }

    *n = sh->n;

    return KVS_OK;
}


int
kvs_gram_shape(const kvs_gram_t *g, const uint32_t *key, uint32_t *out,
    uint32_t cap, uint32_t *n)
{
    int             rc;
    kvs_gram_sh_t  *sh;

    sh = calloc(1, sizeof(kvs_gram_sh_t));
    if (sh == NULL) {
        return KVS_ENOMEM;
    }
    rc = kvs_gram_shape_run(g, key, out, cap, n, NULL, 0, sh);
    free(sh);

    return rc;
}


/* ---- lookup ------------------------------------------------------------- */

int
kvs_gram_slice_find(const kvs_gram_vocab_t *gv, const kvs_gram_t *g,
    const uint32_t *key, const kvs_gram_mlimits_t *lim,
    kvs_gram_slice_ent_t *out, kvs_gram_shbuf_t **scratch)
{
    int                       found, rc;
    uint32_t                  i, n;
    uint64_t                  h, hd;
    kvs_gram_shbuf_t         *sb;
    const kvs_gram_slice_t   *s;
    const kvs_gram_slices_t  *ss;

    ss = gv->slices;
    if (ss == NULL || ss->n == 0) {
        return 0;
    }

    /* not on the stack: a shape is up to 32 KiB, its rule table 10 KiB;
     * the caller's, kept, where it gives a place for it */
    sb = scratch != NULL ? *scratch : NULL;
    if (sb == NULL) {
        sb = calloc(1, sizeof(kvs_gram_shbuf_t));
        if (sb == NULL) {
            return 0;                 /* no slice: the entry is built */
        }
        if (scratch != NULL) {
            *scratch = sb;
        }
    }
    found = 0;

    if (kvs_gram_shape_run(g, key, sb->out, KVS_GRAM_SHAPE_MAX, &n, &hd, 1,
                           &sb->sh)
        != KVS_OK)
    {
        goto done;
    }

    /* the key positions' own alternatives first: most keys stop here;
     * the rest follow the shapes of that head, and stop where they
     * leave the last of them */
    sb->sh.n_pref = 0;
    sb->sh.same = 0;
    for (i = 0; i < ss->n; i++) {
        s = &ss->s[i];
        if (ss->heads[i] == hd && lim->max_nodes >= s->lim.max_nodes
            && lim->max_front >= s->lim.max_front)
        {
            if (sb->sh.n_pref == KVS_GRAM_SHAPE_FOLLOW) {
                sb->sh.n_pref = 0;    /* too many: no stop, hash them */
                break;
            }
            sb->sh.pref[sb->sh.n_pref++] = s;
        }
    }
    if (i == ss->n && sb->sh.n_pref == 0) {
        goto done;
    }

    rc = kvs_gram_shape_run(g, key, sb->out, KVS_GRAM_SHAPE_MAX, &n, NULL, 0,
                            &sb->sh);
    if (rc != KVS_OK) {
        goto done;
    }
    h = kvs_gram_shape_hash(sb->out, n);

    for (i = 0; i < ss->n; i++) {
        s = &ss->s[i];
        if (s->hash == h && s->n_shape == n
            && lim->max_nodes >= s->lim.max_nodes
            && lim->max_front >= s->lim.max_front
            && memcmp(s->shape, sb->out, (size_t) n * sizeof(uint32_t)) == 0)
        {
            out->bits = s->bits;
            out->ranges = s->ranges;
            out->n_ranges = s->n_ranges;
            out->some = s->some;
            out->sparse = s->sparse;
            out->n_sparse = s->n_sparse;
            found = 1;
            break;
        }
    }

done:

    sb->sh.n_pref = 0;

    if (scratch == NULL) {
        free(sb);
    }

    return found;
}


/* ---- building ----------------------------------------------------------- */

/*
 * The references: a schema (NULL: json_object mode) and valid outputs
 * of it, each fed byte by byte with a mask at every byte, so that the
 * masker builds the entry of every key met on the way.  The texts pass
 * through each part of each format (both date-time offsets, a time's
 * fraction, an email's dots and hyphens, escapes in a free string),
 * and through every count of a bounded string below the tiers (40
 * characters) and its tiers, with and without a mandatory first
 * character (`minLength` 1; other minimums spell another sub-grammar),
 * with an escape at each tier (after a backslash each of the 15 escape
 * alternatives is a key of its own), and the maps and arrays of strings
 * and arrays of integers that tools' parameters hold (their insides:
 * where they return is the schema's).  json_object's texts are made from
 * kvs_gram_slice_kinds (below), in the engine's layout (", " and ": ":
 * a key's shape holds the separators, so a compact reference would
 * serve no request).
 */
static const struct {
    const char  *schema;
    const char  *texts[3];
} kvs_gram_slice_refs[] = {
    { "{\"type\": \"string\"}",
      { "\"ab c\\n\\\"\\u00e9x\\\\y\"", NULL, NULL } },
    { "{\"type\": \"string\", \"format\": \"email\"}",
      { "\"a.b-c_d+e@f-g.h-i.jk\"", "\"x@y.zz\"", NULL } },
    { "{\"type\": \"string\", \"format\": \"date-time\"}",
      { "\"2024-01-31T03:04:05.678Z\"", "\"2024-02-28T23:59:59+01:30\"",
        "\"2024-11-30T10:00:00-05:00\"" } },
    { "{\"type\": \"string\", \"format\": \"date\"}",
      { "\"2024-01-31\"", "\"2024-04-30\"", "\"2024-02-28\"" } },
    { "{\"type\": \"string\", \"format\": \"time\"}",
      { "\"03:04:05.6Z\"", "\"23:59:59+01:30\"", NULL } },
    { "{\"type\": \"string\", \"format\": \"uuid\"}",
      { "\"0123abcd-4567-89ef-ABCD-0123456789ef\"", NULL, NULL } },
    { "{\"type\": \"string\", \"maxLength\": 40}",
      { "\"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN\"",
        "\"a\\tb\\u00e9c\"", NULL } },
    { "{\"type\": \"string\", \"maxLength\": 300}",
      { "\"abc\"", "\"a\\tb\\u00e9c\"", NULL } },
    { "{\"type\": \"string\", \"minLength\": 1, \"maxLength\": 40}",
      { "\"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN\"",
        "\"a\\tb\\u00e9c\"", NULL } },
    { "{\"type\": \"string\", \"minLength\": 1, \"maxLength\": 300}",
      { "\"abc\"", "\"a\\tb\\u00e9c\"", NULL } },
    { "{\"type\": \"object\", \"additionalProperties\": "
      "{\"type\": \"string\"}}",
      { "{\"a\": \"x\", \"b\\\"c\": \"y\\n\\u00e9\", \"\": \"\"}",
        "{}", "{\"k\": \"v\"}" } },
    { "{\"type\": \"array\", \"items\": {\"type\": \"string\"}}",
      { "[\"a\", \"b\\\"c\\u00e9\", \"\"]", "[]", "[\"x\"]" } },
    { "{\"type\": \"array\", \"items\": {\"type\": \"integer\"}}",
      { "[1, -20, 0, 345]", "[]", "[7]" } },
    { NULL, { NULL, NULL, NULL } },
};

/*
 * json_object's keys are (a value's last position, where it returns):
 * every way a value can end (each kind, and a number after each of its
 * parts) meets each of the six places a value returns to (a top-level,
 * nested-object or array first value, or a later one), and each place
 * meets each kind's first position.  The texts put every kind in every
 * place: one object whose members are all the kinds (the top's later
 * members), an object and an array of all of them (nested later ones),
 * one-member objects and one-item arrays (nested first ones), and a
 * top-level object per kind (the top's first member).
 */
static const char *kvs_gram_slice_kinds[] = {
    "\"s\"", "\"\"", "\"a\\\"b\\u00e9\"", "0", "12", "-3", "1.5",
    "-0.25", "2e3", "1.25E-2", "6e+1", "true", "false", "null", "{}", "[]",
    "{\"x\": 1}", "[1, \"y\"]",
};

#define KVS_GRAM_SLICE_KINDS                                                 \
    (sizeof(kvs_gram_slice_kinds) / sizeof(kvs_gram_slice_kinds[0]))

/* json_object's texts: 0 to 3 the mixed ones, then one per kind */
#define KVS_GRAM_SLICE_JSON_TEXTS  (4 + KVS_GRAM_SLICE_KINDS)

/* Appends str to out (cap bytes, NUL kept) at *n; 0 when it does not
 * fit. */
static int
kvs_gram_slice_put(char *out, size_t cap, size_t *n, const char *str)
{
    size_t  len;

    len = strlen(str);
    if (*n + len >= cap) {
        return 0;
    }
    memcpy(out + *n, str, len + 1);
    *n += len;

    return 1;
}


/* json_object's text j (< KVS_GRAM_SLICE_JSON_TEXTS) into out; its
 * length, 0 when cap is too small. */
static size_t
kvs_gram_slice_json_text(uint32_t j, char *out, size_t cap)
{
    int         ok;
    size_t      n;
    uint32_t    k;
    char        key[8];
    const char  *open, *sep, *close;

    n = 0;
    out[0] = '\0';

    if (j >= 4) {
        ok = kvs_gram_slice_put(out, cap, &n, "{\"a\": ")
             && kvs_gram_slice_put(out, cap, &n, kvs_gram_slice_kinds[j - 4])
             && kvs_gram_slice_put(out, cap, &n, "}");
        return ok ? n : 0;
    }

    /* 0: the top's members; 1: a nested object's, then an array's;
     * 2: one-member objects; 3: one-item arrays */
    ok = kvs_gram_slice_put(out, cap, &n, j == 0 ? "{" : "{\"a\": ");
    if (j == 1) {
        ok = ok && kvs_gram_slice_put(out, cap, &n, "{");
    } else if (j >= 2) {
        ok = ok && kvs_gram_slice_put(out, cap, &n, "[");
    }

    open = j == 2 ? "{\"b\": " : j == 3 ? "[" : "";
    close = j == 2 ? "}" : j == 3 ? "]" : "";

    for (k = 0; ok && k < KVS_GRAM_SLICE_KINDS; k++) {
        sep = k > 0 ? ", " : "";
        ok = kvs_gram_slice_put(out, cap, &n, sep)
             && kvs_gram_slice_put(out, cap, &n, open);
        if (ok && j <= 1) {
            key[0] = '"';
            key[1] = (char) ('a' + k);
            memcpy(key + 2, "\": ", 4);
            ok = kvs_gram_slice_put(out, cap, &n, key);
        }
        ok = ok && kvs_gram_slice_put(out, cap, &n, kvs_gram_slice_kinds[k])
             && kvs_gram_slice_put(out, cap, &n, close);
    }

    if (j == 1) {
        ok = ok && kvs_gram_slice_put(out, cap, &n, "}, \"b\": [");
        for (k = 0; ok && k < KVS_GRAM_SLICE_KINDS; k++) {
            ok = kvs_gram_slice_put(out, cap, &n, k > 0 ? ", " : "")
                 && kvs_gram_slice_put(out, cap, &n,
                                       kvs_gram_slice_kinds[k]);
        }
        ok = ok && kvs_gram_slice_put(out, cap, &n, "]");
    } else if (j >= 2) {
        ok = ok && kvs_gram_slice_put(out, cap, &n, "]");
    }
    ok = ok && kvs_gram_slice_put(out, cap, &n, "}");

    return ok ? n : 0;
}


/* The caps the references are built under: the engine's node cap (the
 * smaller of the engine's and the default) and the default frontier
 * cap, so that the entries hold for both (kvs_gram_slice_find). */
#define KVS_GRAM_SLICE_NODES  (1u << 20)

/* a reference masker's state cache (its table holds 8 entries a slot:
 * every key of the longest text, so that none is evicted before the
 * harvest), and the longest text made */
#define KVS_GRAM_SLICE_CACHE  128
#define KVS_GRAM_SLICE_TEXT   1024
#define KVS_GRAM_SLICE_FRONT  4096


typedef struct {
    kvs_gram_slices_t  *ss;
    const kvs_gram_t   *g;
    kvs_gram_mlimits_t  lim;
    kvs_gram_shbuf_t   *sb;
} kvs_gram_harvest_t;


/* One entry of a reference masker: kept if its build met no cap, its
 * shape is new and it fits. */
static int
kvs_gram_slice_take(void *arg, const uint32_t *key, const uint32_t *bits,
    const uint32_t *ranges, uint32_t n_ranges, uint32_t some, int capped)
{
    uint32_t             i, n;
    uint64_t             h, hd;
    kvs_gram_slice_t    *s;
    kvs_gram_harvest_t  *hv;

    hv = arg;

    if (capped || n_ranges > KVS_GRAM_SLICE_RANGES
        || hv->ss->n == KVS_GRAM_SLICES_MAX)
    {
        return KVS_OK;
    }
    if (kvs_gram_shape_run(hv->g, key, hv->sb->out, KVS_GRAM_SHAPE_MAX, &n,
                           &hd, 0, &hv->sb->sh)
        != KVS_OK)
    {
        return KVS_OK;
    }
    h = kvs_gram_shape_hash(hv->sb->out, n);
    for (i = 0; i < hv->ss->n; i++) {
        s = &hv->ss->s[i];
        if (s->hash == h && s->n_shape == n
            && memcmp(s->shape, hv->sb->out, (size_t) n * sizeof(uint32_t)) == 0)
        {
            return KVS_OK;
        }
    }

    s = &hv->ss->s[hv->ss->n];
    s->shape = malloc((size_t) n * sizeof(uint32_t));
    s->bits = malloc((size_t) hv->ss->words * sizeof(uint32_t));
    s->ranges = malloc(((size_t) n_ranges + 1) * 2 * sizeof(uint32_t));
    if (s->shape == NULL || s->bits == NULL || s->ranges == NULL) {
        free(s->shape);
        free(s->bits);
        free(s->ranges);
        memset(s, 0, sizeof(*s));
        return KVS_ENOMEM;
    }

    memcpy(s->shape, hv->sb->out, (size_t) n * sizeof(uint32_t));
    memcpy(s->bits, bits, (size_t) hv->ss->words * sizeof(uint32_t));
    if (n_ranges > 0) {
        memcpy(s->ranges, ranges, (size_t) n_ranges * 2 * sizeof(uint32_t));
    }
    s->n_shape = n;
    s->hash = h;
    s->head = hd;
    hv->ss->heads[hv->ss->n] = hd;
    s->lim = hv->lim;
    s->n_ranges = n_ranges;
    s->some = some;
    /* the word list a masker's entry would make (kvs_gram_ind_seal),
     * made once here and lent with the rest; none without memory */
    (void) kvs_gram_sparse(s->bits, hv->ss->words, &s->sparse,
                           &s->n_sparse);
    hv->ss->n++;

    return KVS_OK;
}


/* One reference: its grammar compiled, each text walked with a mask at
 * every byte, the masker's entries harvested.  A text the grammar
 * refuses stops its walk (a reference that no longer matches the
 * compiler's output costs its slices, never a wrong one). */
static int
kvs_gram_slice_ref(kvs_gram_slices_t *ss, const kvs_gram_vocab_t *gv,
    uint32_t ri, uint32_t *bits, kvs_gram_shbuf_t *sb, kvs_err_t *err)
{
    int                  rc;
    size_t               i, j, len, ntexts;
    char                 text[KVS_GRAM_SLICE_TEXT];
    json_t              *js;
    json_error_t         jerr;
    kvs_gram_t           g;
    kvs_gram_opts_t      o;
    kvs_gram_matcher_t   m;
    kvs_gram_masker_t    mk;
    kvs_gram_harvest_t   hv;
    kvs_gram_mlimits_t   ml;
    const char          *t;

    /* the engine's layout (", " and ": "): a key's shape holds it */
    memset(&o, 0, sizeof(o));
    o.flags = 0;

    if (kvs_gram_slice_refs[ri].schema == NULL) {
        rc = kvs_gram_json_object(&g, &o, err);
    } else {
        js = json_loads(kvs_gram_slice_refs[ri].schema, 0, &jerr);
        if (js == NULL) {
            return kvs_err_set(err, KVS_ENOMEM, "grammar slices: no memory");
        }
        rc = kvs_gram_from_schema(&g, js, &o, err);
        json_decref(js);
    }
    if (rc != KVS_OK) {
        kvs_gram_free(&g);
        return rc;
    }

    memset(&ml, 0, sizeof(ml));
    ml.max_nodes = KVS_GRAM_SLICE_NODES;
    ml.max_front = KVS_GRAM_SLICE_FRONT;

    hv.ss = ss;
    hv.g = &g;
    hv.lim = ml;
    hv.sb = sb;

    ntexts = kvs_gram_slice_refs[ri].schema == NULL
             ? KVS_GRAM_SLICE_JSON_TEXTS : 3;

    for (j = 0; j < ntexts && rc == KVS_OK; j++) {
        if (kvs_gram_slice_refs[ri].schema == NULL) {
            len = kvs_gram_slice_json_text((uint32_t) j, text,
                                           sizeof(text));
            t = text;
        } else {
            t = kvs_gram_slice_refs[ri].texts[j];
            len = t != NULL ? strlen(t) : 0;
        }
        if (len == 0) {
            break;
        }

        rc = kvs_gram_matcher_init(&m, &g, &ml, err);
        if (rc != KVS_OK) {
            break;
        }
        rc = kvs_gram_masker_init(&mk, gv, &m, KVS_GRAM_SLICE_CACHE, err);
        if (rc != KVS_OK) {
            kvs_gram_matcher_free(&m);
            break;
        }
        mk.noslices = 1;

        for (i = 0; i <= len; i++) {
            rc = kvs_gram_mask(&mk, bits, err);
            if (rc != KVS_OK || i == len
                || kvs_gram_matcher_byte(&m, (uint8_t) t[i], NULL) != KVS_OK)
            {
                break;
            }
        }
        if (rc == KVS_EFORMAT) {
            rc = KVS_OK;              /* a vocabulary that cannot spell it */
        }
        if (rc == KVS_OK) {
            rc = kvs_gram_masker_entries(&mk, kvs_gram_slice_take, &hv);
            if (rc != KVS_OK) {
                kvs_err_set(err, rc, "grammar slices: no memory");
            }
        }

        kvs_gram_masker_free(&mk);
        kvs_gram_matcher_free(&m);
    }

    kvs_gram_free(&g);

    return rc;
}


void
kvs_gram_slices_free(kvs_gram_slices_t *ss)
{
    uint32_t  i;

    if (ss == NULL) {
        return;
    }
    for (i = 0; i < ss->n; i++) {
        free(ss->s[i].shape);
        free(ss->s[i].bits);
        free(ss->s[i].ranges);
        free(ss->s[i].sparse);
    }
    free(ss);
}


int
kvs_gram_vocab_slices(kvs_gram_vocab_t *gv, kvs_err_t *err)
{
    int                 rc;
    uint32_t            ri, *bits;
    kvs_gram_shbuf_t   *sb;
    kvs_gram_slices_t  *ss;

    kvs_gram_slices_free(gv->slices);
    gv->slices = NULL;

    ss = calloc(1, sizeof(kvs_gram_slices_t));
    bits = malloc(((size_t) gv->n_tokens + 32) / 32 * sizeof(uint32_t));
    sb = calloc(1, sizeof(kvs_gram_shbuf_t));
    if (ss == NULL || bits == NULL || sb == NULL) {
        free(ss);
        free(bits);
        free(sb);
        return kvs_err_set(err, KVS_ENOMEM, "grammar slices: no memory");
    }
    ss->words = (gv->n_tokens + 31) / 32;

    rc = KVS_OK;
    for (ri = 0; ri < sizeof(kvs_gram_slice_refs)
                      / sizeof(kvs_gram_slice_refs[0]) && rc == KVS_OK; ri++)
    {
        rc = kvs_gram_slice_ref(ss, gv, ri, bits, sb, err);
    }

    free(bits);
    free(sb);

    if (rc != KVS_OK) {
        kvs_gram_slices_free(ss);
        return rc;
    }

    gv->slices = ss;

    return KVS_OK;
}


uint32_t
kvs_gram_vocab_n_slices(const kvs_gram_vocab_t *gv)
{
    return gv->slices != NULL ? gv->slices->n : 0;
}
