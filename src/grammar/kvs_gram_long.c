/*
 * kvs_gram_long: a low-tier key's long tokens classified at the key's
 * own counts.
 *
 * Owns the table's cache of those classifications (kvs_gram_masker_t.lc)
 * and the cut walk that makes one.
 *
 * Why.  A bounded string with rep_low .. max_len characters left is
 * keyed by its family's member at rep_low (kvs_gram_ind_key), whose
 * entry is exact only for the tokens shorter than rep_low: the long
 * ones (gv->long_x, ~250 on Llama 3 and Qwen2, 32 to 128 bytes) are
 * left to the real stacks.  The verdicts of the real checks are kept
 * per canonical state for the tokens shorter than the state's count
 * (kvs_gram_verdict.c), so near rep_low most long tokens were fed to
 * the real matcher again at every mask, byte by byte, each step a new
 * stack node (up to ~2k steps, 100-250 us on Qwen2).
 *
 * What.  The stack's key with its own counts (a count above max_len + 1
 * named by the member at max_len + 1, kvs_gram_ind_name: the two
 * classify every token alike) is walked on the cut stack as an entry's
 * key is (kvs_gram_ind.c), but only down the trie paths to the long
 * tokens of lo bytes or more (a source walk, kvs_gram_walk_src_t, whose
 * source holds nothing: every subtree of shorter tokens is passed over).
 * Each such token comes out accepted whatever lies below, refused, or
 * dependent, by item 2's argument for any entry ("The mask",
 * docs/grammar.md): a token the cut stack takes without reaching the
 * sentinel is taken by every stack with those top positions; one
 * refused before reaching it is refused by every such stack; the rest
 * are checked on the real stacks.  The walk steps the table's memo
 * (kvs_gram_ind_memo), whose states are named by whole chains of
 * positions: the walk at count c - 1 meets the states the walk at c
 * made after one byte, so along a string each walk is mostly hits.
 * kvs_gram_verdict.c asks for the tokens its kept verdicts do not cover
 * (lo: the state's count, or the one it kept them at), so a walk goes
 * as deep as that count, and only along the string's tail.
 *
 * Where the key is a JSON string's character, the tokens' characters
 * alone classify them (kvs_gram_long_direct, below): no walk, no entry.
 *
 * Invariants: an entry classifies exactly the long tokens of lo bytes
 * or more (lo 0: a free slot); one whose walk met a matcher cap or ran
 * out of work is not kept; the cache is direct-mapped by key hash, so a
 * collision only costs a walk.
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_grammar.h"
#include "grammar/kvs_gram_mask_impl.h"


#define KVS_GRAM_LONG_SLOTS  1024     /* 88 KiB a table */

typedef struct kvs_gram_lentry_s {
    uint32_t  key[KVS_GRAM_CUT];      /* top positions, own counts */
    uint32_t  lo;                     /* 0: a free slot */
    uint64_t  hash;
    uint32_t  acc[KVS_GRAM_LONG_WORDS];   /* by index in gv->long_x */
    uint32_t  dep[KVS_GRAM_LONG_WORDS];
} kvs_gram_lentry_t;


size_t
kvs_gram_long_bytes(void)
{
    return KVS_GRAM_LONG_SLOTS * sizeof(kvs_gram_lentry_t);
}


/* What the walk reports as dependent: the long tokens of lo bytes or
 * more in sorted positions lo .. hi. */
typedef struct {
    const kvs_gram_vocab_t  *gv;
    uint32_t                 lo;
    uint32_t                *dep;
} kvs_gram_long_ctx_t;


static uint32_t
kvs_gram_long_len(const kvs_gram_vocab_t *gv, uint32_t k)
{
    uint32_t  x = gv->long_x[k];

    return gv->x_off[x + 1] - gv->x_off[x];
}


static int
kvs_gram_long_dep(void *arg, uint32_t lo, uint32_t hi)
{
    uint32_t              a, b, m;
    kvs_gram_long_ctx_t  *cx = arg;

    /* the first long token at or after lo */
    for (a = 0, b = cx->gv->n_long; a < b; ) {
        m = a + (b - a) / 2;
        if (cx->gv->long_x[m] < lo) {
            a = m + 1;
        } else {
            b = m;
        }
    }

    for ( /* void */ ; a < cx->gv->n_long && cx->gv->long_x[a] < hi; a++) {
        if (kvs_gram_long_len(cx->gv, a) >= cx->lo) {
            cx->dep[a >> 5] |= 1u << (a & 31);
        }
    }

    return KVS_OK;
}


/* The cut walk of key down the paths to the long tokens of lo bytes or
 * more into le; KVS_ERANGE if it met a matcher cap (le is not to be
 * kept). */
static int
kvs_gram_long_walk(kvs_gram_masker_t *mk, kvs_gram_lentry_t *le,
    const uint32_t *key, uint32_t lo, kvs_err_t *err)
{
    int                      rc, capped, skip;
    uint32_t                 k, id, *bits;
    kvs_gram_memo_t         *mo;
    kvs_gram_matcher_t       cm;
    kvs_gram_walk_src_t      ws;
    kvs_gram_long_ctx_t      cx;
    const kvs_gram_vocab_t  *gv;

    gv = mk->gv;

    /* [words] the walk's accepted tokens, short ones on the paths too */
    bits = calloc(mk->words, sizeof(uint32_t));
    if (bits == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "masker: no memory");
    }

    rc = kvs_gram_matcher_init_cut(&cm, mk->m->g, key, KVS_GRAM_CUT,
                                   &mk->m->lim, err);
    if (rc != KVS_OK) {
        free(bits);
        return rc;
    }

    memset(le, 0, sizeof(kvs_gram_lentry_t));
    memset(&ws, 0, sizeof(ws));
    ws.len = lo;                      /* a source of nothing */
    cx.gv = gv;
    cx.lo = lo;
    cx.dep = le->dep;

    mo = kvs_gram_ind_memo(mk);
    kvs_gram_memo_keep(mo, !mk->nokeep);
    /* no subtree skipping: every character is a new count, so closures
     * never close and each try costs up to 32 pairs (a walk 2-3x dearer
     * with them) */
    skip = kvs_gram_memo_skip(mo, 0);
    rc = kvs_gram_memo_walk(mo, &cm, gv, bits, kvs_gram_long_dep, &cx, &ws);
    kvs_gram_memo_skip(mo, skip);
    if (mo != mk->memo) {
        kvs_gram_memo_work(mo, NULL);
    }

    capped = cm.capped != 0;
    kvs_gram_matcher_free(&cm);

    for (k = 0; k < gv->n_long; k++) {
        id = (uint32_t) gv->ids[gv->long_x[k]];
        if (kvs_gram_long_len(gv, k) >= lo
            && (bits[id >> 5] >> (id & 31) & 1))
        {
            le->acc[k >> 5] |= 1u << (k & 31);
        }
    }
    free(bits);

    if (rc != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "masker: no memory");
    }

    memcpy(le->key, key, sizeof(le->key));
    le->lo = lo;

    return capped ? KVS_ERANGE : KVS_OK;
}


/*
 * By the characters alone.  Where the key's top position is a reference
 * to the JSON string character x (kvs_gram_t's char_rule) in a copy of
 * a repetition's optional copies with no separator, at its own count c,
 * and key[1] a byte range that begins no character, the cut stack takes
 * a token's characters as copies of x while copies are left and then
 * leaves for key[1] (kvs_gram_run.c's argument, with x's characters in
 * place of a byte class: each character the class automaton takes is
 * one copy of x, kvs_sc_char, and no more than one).  So, by how the
 * token's run of characters ends (kvs_gram_vocab_t's long_cls):
 *
 *   the whole token, r characters begun: r <= c, it ends inside the
 *     repetition without reaching the sentinel: accepted whatever lies
 *     below; r > c: character c + 1 begins where only key[1] is left,
 *     which refuses its first byte: refused;
 *   at a boundary on byte b after r characters: r > c is refused as
 *     above; else b goes to x (b in FIRST(x): an escape) or to key[1]
 *     (a closing quote): dependent; neither: refused above the cut;
 *   inside a character after r whole ones: r >= c is refused as
 *     above; else dependent (x may hold more than the automaton).
 *
 * Caps.  A byte of a character makes at most KVS_GRAM_LONG_STEP stacks
 * and intern calls per stack (x's alternatives that take it, the copy's
 * return and key[1]: a few), so a cut walk, one stack, within
 * max_len * KVS_GRAM_LONG_STEP nodes and KVS_GRAM_LONG_STEP stacks of the
 * caps would have met none; elsewhere the walk decides.
 */
int
kvs_gram_long_direct(kvs_gram_masker_t *mk, const uint32_t *t, uint32_t lo,
    kvs_gram_lset_t *ls)
{
    uint8_t                  b;
    uint32_t                 k, c, at, r, how, x, key[KVS_GRAM_CUT];
    const kvs_gram_t        *g;
    const kvs_gram_elem_t   *e;
    const kvs_gram_vocab_t  *gv;

    g = mk->m->g;
    gv = mk->gv;
    e = g->elems;
    (void) kvs_gram_ind_name(mk, t, key, 0);

    if (mk->nodirect || g->char_rule == 0 || gv->long_cls == NULL
        || gv->max_len >= 0xffff
        || (uint64_t) gv->max_len * KVS_GRAM_LONG_STEP + KVS_GRAM_CUT
           > mk->m->lim.max_nodes
        || KVS_GRAM_LONG_STEP > mk->m->lim.max_front
        || key[0] >= g->n_elems || key[1] >= g->n_elems
        || e[key[0]].kind != KVS_GRAM_RULE
        || e[key[0]].rule != g->char_rule - 1
        || !kvs_gram_run_copies(g, key[0], &at)
        || e[key[1]].kind != KVS_GRAM_BYTES
        || kvs_gram_rep_count(g, key[1]) != 0)
    {
        return 0;
    }
    for (k = e[key[1]].lo; k <= e[key[1]].hi; k++) {
        if (kvs_gram_memo_class(0, (uint8_t) k) != KVS_GRAM_CLS_DEAD) {
            return 0;                 /* key[1] may begin a character */
        }
    }

    c = kvs_gram_rep_count(g, key[0]);
    x = g->char_rule - 1;

    for (k = 0; k < gv->n_long; k++) {
        if (kvs_gram_long_len(gv, k) < lo) {
            continue;
        }
        r = gv->long_cls[k] & 0xffff;
        b = (uint8_t) (gv->long_cls[k] >> 16);
        how = gv->long_cls[k] >> 24;

        if (how == KVS_GRAM_RUN_ALL) {
            if (r <= c) {
                ls->acc[k >> 5] |= 1u << (k & 31);
            }

        } else if (how == KVS_GRAM_RUN_STOP) {
            if (r <= c
                && ((g->first[(size_t) x * 4 + (b >> 6)] >> (b & 63) & 1)
                    || (b >= e[key[1]].lo && b <= e[key[1]].hi)))
            {
                ls->dep[k >> 5] |= 1u << (k & 31);
            }

        } else if (r < c) {
            ls->dep[k >> 5] |= 1u << (k & 31);
        }
    }

    mk->long_direct++;

    return 1;
}


int
kvs_gram_long_get(kvs_gram_masker_t *mk, const uint32_t *t, uint32_t lo,
    kvs_gram_lset_t *ls, kvs_err_t *err)
{
    int                  rc;
    uint32_t             k, key[KVS_GRAM_CUT];
    uint64_t             h;
    kvs_gram_lentry_t   *le;
    kvs_gram_masker_t   *o;

    if (kvs_gram_long_direct(mk, t, lo, ls)) {
        return KVS_OK;
    }

    o = mk->ind_owner != NULL ? mk->ind_owner : mk;   /* the table */
    (void) kvs_gram_ind_name(mk, t, key, 0);

    if (o->lc == NULL) {
        o->lc = calloc(KVS_GRAM_LONG_SLOTS, sizeof(kvs_gram_lentry_t));
        if (o->lc == NULL) {
            return kvs_err_set(err, KVS_ENOMEM, "masker: no memory");
        }
    }

    h = kvs_gram_tuple_hash(key);
    le = &o->lc[h & (KVS_GRAM_LONG_SLOTS - 1)];

    if (le->lo == 0 || le->lo > lo || le->hash != h
        || memcmp(le->key, key, sizeof(key)) != 0)
    {
        rc = kvs_gram_long_walk(mk, le, key, lo, err);
        if (rc == KVS_OK && kvs_gram_work_over(&mk->work)) {
            rc = KVS_ETOOLONG;        /* cut short: not a classification */
        }
        if (rc != KVS_OK) {
            le->lo = 0;
            return rc;
        }
        le->hash = h;
        mk->long_builds++;

    } else {
        mk->long_hits++;
    }

    for (k = 0; k < KVS_GRAM_LONG_WORDS; k++) {
        ls->acc[k] |= le->acc[k];
        ls->dep[k] |= le->dep[k];
    }

    return KVS_OK;
}


int
kvs_gram_long_set(const kvs_gram_masker_t *mk, const kvs_gram_lset_t *ls,
    uint32_t *bits)
{
    int       any;
    uint32_t  k, id;

    any = 0;
    for (k = 0; k < mk->gv->n_long; k++) {
        if (ls->acc[k >> 5] >> (k & 31) & 1) {
            id = (uint32_t) mk->gv->ids[mk->gv->long_x[k]];
            bits[id >> 5] |= 1u << (id & 31);
            any = 1;
        }
    }

    return any;
}


uint32_t
kvs_gram_long_deps(const kvs_gram_masker_t *mk, const kvs_gram_lset_t *ls,
    uint32_t *r)
{
    uint32_t  k, x, n;

    n = 0;
    for (k = 0; k < mk->gv->n_long; k++) {
        if (!(ls->dep[k >> 5] >> (k & 31) & 1)) {
            continue;
        }
        x = mk->gv->long_x[k];
        if (n > 0 && r[2 * n - 1] == x) {
            r[2 * n - 1] = x + 1;
            continue;
        }
        r[2 * n] = x;
        r[2 * n + 1] = x + 1;
        n++;
    }

    return n;
}
