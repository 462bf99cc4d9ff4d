/*
 * kvs_gram_run: the entries of a counted run of one byte class, taken
 * from the entry of the run's largest count instead of walked.
 *
 * A pattern's [a-z0-9-]{2,30} unrolls (kvs_gram_rep.c) into a family of
 * positions, one per count of copies left, so a mask meets a new key at
 * every character of the run, and every such key's entry was a trie
 * walk over the tokens made of the class's bytes (~33k nodes for that
 * class on Qwen2, 0.3-1.9 ms each): a fresh request paid about a
 * millisecond per character of such a field.  For the keys below, the
 * entry at count c is the entry at the family's largest count cs less
 * the tokens whose first c + 1 bytes are all of the class: a DFS of the
 * trie's class paths down to depth c + 1, and a clear of those tokens.
 * The member with cs is the reference to x in R's own alternative
 * (kvs_gram_rfam_t.r_at, c_at + 1 copies left) where the repetition has
 * one, else the optional copies' first (c_at); so a run's own entries
 * cost one walk, that member's.
 *
 * The keys (kvs_gram_run_src): key[0] a reference to x in a copy of a
 * family of optional copies (kvs_gram_rfam_t.step > 0) with no
 * separator, c copies left, 1 <= c < cs, and cs under the vocabulary's
 * tiers (so neither key is renamed by kvs_gram_ind_key and both
 * entries are exact for every token); x a rule whose every alternative
 * is one byte range (the class S is their union); key[1] a byte range
 * that holds no byte of S.
 *
 * Why it is exact.  From key[0] with c copies left, every path takes the
 * token's first j bytes as copies of x (1 <= j <= c, one byte of S
 * each), then ends the token inside the repetition or leaves it for
 * key[1] (T_{c-j}'s empty alternative returns where R returns: the node
 * below).  Let r be the length of the token's leading run of bytes of
 * S.  (a) r <= c: the run from count c and the run from cs take the
 * same paths but for one: kvs_gram_rep.c's renaming makes them equal
 * until the first has taken c copies, and then (r = c) the next byte is
 * not of S, so the longer run's offer of one more copy dies on it (x is
 * lazy: not even expanded); the same classification, and the run from c
 * holds at most the stacks of the run from cs, so a source that met
 * no cap (required) means that it meets none either.  (b) r > c: every
 * path leaves the repetition at some j <= c < r, where key[1] refuses
 * byte j (of S); key[1] lies above the cut, so no path reached the
 * sentinel: refused, and not dependent.  The tokens of (b) are the
 * subtrees of the trie nodes at depth c + 1 whose paths are all of S;
 * the entry is the source's with them cleared from its bits and taken
 * out of its dependent ranges.
 *
 * Cost: the DFS (pruned by subtree height) and one clear per token of
 * (b).  On Qwen2 for [a-z0-9-]: at most ~16k nodes and ~11k tokens (c 4
 * to 6), a few hundred of each from c 12 on.  Charged to the masker's
 * work at KVS_GRAM_RUN_PER_UNIT of them a unit.
 *
 * Levels.  The DFS is a trie walk that jumps from subtree to subtree,
 * ~10-20 ns a node (8-150 us a count on Qwen2, a fresh request's most
 * common dear mask in a pattern's field), and every count of a run
 * repeats its upper part.  So the table keeps, per class, its levels
 * (kvs_gram_rlev_t): the subtrees of the class paths' nodes at each
 * depth, as merged sorted-position ranges, made by one DFS to every
 * depth on the class's first derive (the warm's, most often: it derives
 * a run's high counts).  A count c then takes depth c + 1's ranges: the
 * same tokens as its own DFS, whose nodes at that depth are exactly the
 * class paths' there.  A class with more than KVS_GRAM_RUN_LEV_MAX
 * ranges keeps none and is derived by its DFS, as is every one with
 * nolevels (the reference the tests compare with).
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_grammar.h"
#include "grammar/kvs_gram_mask_impl.h"


/* DFS nodes or cleared tokens per unit of work (a unit is about one
 * memo step of a walk: each of these is a few times cheaper) */
#define KVS_GRAM_RUN_PER_UNIT  8

/* a table keeps the levels of its first classes, this many, each of at
 * most KVS_GRAM_RUN_LEV_MAX ranges (256 KiB; [a-z0-9-] needs ~16k on
 * Qwen2 and Llama 3); the classes after them are derived by their DFS,
 * never by replacing one (a request alternating between two classes
 * would make levels at every count, 0.3 ms each) */
#define KVS_GRAM_RUN_SLOTS     2
#define KVS_GRAM_RUN_LEV_MAX   (1u << 15)

/* the depths kept (a run's counts are under the vocabulary's tiers,
 * kvs_gram_run_src, far below this); a deeper count's DFS as before */
#define KVS_GRAM_RUN_DEPTH     256


struct kvs_gram_rlev_s {
    uint64_t   set[4];                /* the class */
    int        over;                  /* more than the bound: none kept */
    uint32_t   n_lev;                 /* depths 0 .. n_lev - 1 */
    int        full;                  /* n_lev passes the longest token */
    uint32_t  *at;                    /* [n_lev + 1] depth d's ranges are
                                         r[2 * at[d] .. 2 * at[d + 1]) */
    uint32_t  *r;                     /* [2 * at[n_lev]] lo, hi pairs,
                                         sorted and disjoint per depth */
};


static int
kvs_gram_run_has(const uint64_t *set, uint32_t b)
{
    return (int) (set[b >> 6] >> (b & 63) & 1);
}


/* 1 if position q is a member of p's family that references p's x, then
 * a T, then ends its alternative (a copy's layout with x last). */
static int
kvs_gram_run_copy(const kvs_gram_t *g, uint32_t p, uint32_t q)
{
    const kvs_gram_elem_t  *e;

    e = g->elems;

    return (uint64_t) q + 2 < g->n_elems && g->rep_f[q] == g->rep_f[p]
           && e[q].kind == KVS_GRAM_RULE && e[q].rule == e[p].rule
           && e[q + 1].kind == KVS_GRAM_RULE && e[q + 2].kind == KVS_GRAM_END;
}


int
kvs_gram_run_copies(const kvs_gram_t *g, uint32_t p, uint32_t *at)
{
    const kvs_gram_elem_t   *e;
    const kvs_gram_rfam_t   *f;

    if (p >= g->n_elems || kvs_gram_rep_count(g, p) == 0) {
        return 0;
    }

    f = &g->rfam[g->rep_f[p]];
    *at = f->at;
    if (f->step <= 0 || f->at == 0) {
        return 0;
    }

    /* p and the member with c_at: a reference to x, one to T, the END;
     * before the member's copy the END of T's empty alternative, so
     * the copies have no separator */
    e = g->elems;

    return kvs_gram_run_copy(g, p, p) && kvs_gram_run_copy(g, p, f->at)
           && e[f->at - 1].kind == KVS_GRAM_END
           && kvs_gram_rep_count(g, f->at) == f->c_at;
}


/* 1 if p is a reference to x in a copy of optional copies with no
 * separator, x's every alternative one byte range (their union in
 * set); the family's member with c_at in *at. */
static int
kvs_gram_run_class(const kvs_gram_t *g, uint32_t p, uint32_t *at,
    uint64_t *set)
{
    uint32_t                 x, a, s, b;
    const kvs_gram_elem_t   *e;

    if (!kvs_gram_run_copies(g, p, at)) {
        return 0;
    }

    /* x: one byte range per alternative */
    e = g->elems;
    x = e[p].rule;
    memset(set, 0, 4 * sizeof(uint64_t));
    for (a = g->rule_alt[x]; a < g->rule_alt[x + 1]; a++) {
        s = g->alt_start[a];
        if ((uint64_t) s + 1 >= g->n_elems || e[s].kind != KVS_GRAM_BYTES
            || e[s + 1].kind != KVS_GRAM_END)
        {
            return 0;
        }
        for (b = e[s].lo; b <= e[s].hi; b++) {
            set[b >> 6] |= 1ULL << (b & 63);
        }
    }

    return 1;
}


uint32_t
kvs_gram_run_src(const kvs_gram_masker_t *mk, const uint32_t *key,
    uint32_t *src, uint64_t *set)
{
    uint32_t                 c, b, at, lo, cs;
    const kvs_gram_t        *g;
    const kvs_gram_elem_t   *e;
    const kvs_gram_rfam_t   *f;

    g = mk->m->g;
    e = g->elems;
    c = kvs_gram_rep_count(g, key[0]);

    if (c == 0 || key[1] >= g->n_elems || kvs_gram_rep_count(g, key[1]) != 0
        || !kvs_gram_run_class(g, key[0], &at, set))
    {
        return 0;
    }

    /* the source: R's own member (c_at + 1, so c_at too is taken from
     * it), else the member with c_at; under the tiers either way */
    f = &g->rfam[g->rep_f[key[0]]];
    cs = f->c_at;
    if (f->r_at != 0 && kvs_gram_run_copy(g, key[0], f->r_at - 1)
        && kvs_gram_rep_count(g, f->r_at - 1) == f->c_at + 1)
    {
        at = f->r_at - 1;
        cs = f->c_at + 1;
    }
    lo = mk->gv->rep_low;
    if (c >= cs || (lo != 0 && cs >= lo) || cs > mk->gv->max_len) {
        return 0;
    }

    /* key[1]: a byte range outside the class */
    if (e[key[1]].kind != KVS_GRAM_BYTES) {
        return 0;
    }
    for (b = e[key[1]].lo; b <= e[key[1]].hi; b++) {
        if (kvs_gram_run_has(set, b)) {
            return 0;
        }
    }

    src[0] = at;
    src[1] = key[1];

    return c;
}


/* The sorted-position range [lo, hi) appended to the list q of *n pairs
 * (room for *cap), grown by doubling. */
static int
kvs_gram_run_push(uint32_t **q, uint32_t *n, uint32_t *cap, uint32_t lo,
    uint32_t hi)
{
    uint32_t   c, *r;

    if (*n == *cap) {
        c = *cap ? *cap * 2 : 64;
        r = realloc(*q, (size_t) c * 2 * sizeof(uint32_t));
        if (r == NULL) {
            return KVS_ENOMEM;
        }
        *q = r;
        *cap = c;
    }

    (*q)[2 * *n] = lo;
    (*q)[2 * *n + 1] = hi;
    (*n)++;

    return KVS_OK;
}


size_t
kvs_gram_run_bytes(void)
{
    return KVS_GRAM_RUN_SLOTS
           * (sizeof(kvs_gram_rlev_t)
              + (size_t) KVS_GRAM_RUN_LEV_MAX * 2 * sizeof(uint32_t)
              + (KVS_GRAM_RUN_DEPTH + 1) * sizeof(uint32_t));
}


void
kvs_gram_run_free(kvs_gram_masker_t *mk)
{
    uint32_t  i;

    for (i = 0; mk->rlev != NULL && i < KVS_GRAM_RUN_SLOTS; i++) {
        free(mk->rlev[i].at);
        free(mk->rlev[i].r);
    }
    free(mk->rlev);
    mk->rlev = NULL;
    mk->n_rlev = 0;
}


/* The class paths' subtrees at depth c + 1 (the tokens of (b)) by a DFS
 * of the trie: cut[2 * nc] their ranges, sorted; *cost the nodes and
 * tokens it read. */
static int
kvs_gram_run_dfs(const kvs_gram_vocab_t *gv, uint32_t c, const uint64_t *set,
    uint32_t **cut, uint32_t *nc, uint64_t *cost)
{
    uint32_t                 i, n, d, cap;
    const kvs_gram_tnode_t  *nd;

    nd = gv->t_node;
    n = gv->n_nodes;
    *cut = NULL;
    *nc = 0;
    cap = 0;

    for (i = 0; i < n; ) {
        (*cost)++;
        d = nd[i].depth;

        if (!kvs_gram_run_has(set, nd[i].byte)
            || (uint64_t) d + nd[i].height < (uint64_t) c + 1)
        {
            i = nd[i].end;            /* no token of (b) below */
            continue;
        }

        if (d <= c) {
            i++;
            continue;
        }

        if (kvs_gram_run_push(cut, nc, &cap, nd[i].cum,
                              nd[nd[i].end].cum)
            != KVS_OK)
        {
            free(*cut);
            *cut = NULL;
            return KVS_ENOMEM;
        }
        i = nd[i].end;
    }

    return KVS_OK;
}


/* Fill lv (its set given, the rest empty) with the class's levels: one
 * DFS down every class path, each node's subtree appended to its depth
 * (merged with that depth's last range when they touch), then the
 * ranges grouped by depth.  KVS_OK with lv->over set when the bound is
 * passed. */
static int
kvs_gram_run_fill(const kvs_gram_vocab_t *gv, kvs_gram_rlev_t *lv,
    uint32_t max, uint64_t *cost)
{
    int                      rc;
    uint32_t                 i, n, d, k, lo, hi, nt, cap, nl, *last, *cnt;
    uint32_t                *tr;      /* [3 * nt] depth, lo, hi */
    const kvs_gram_tnode_t  *nd;

    nd = gv->t_node;
    n = gv->n_nodes;
    nl = gv->max_len + 1 < KVS_GRAM_RUN_DEPTH ? gv->max_len + 1
                                              : KVS_GRAM_RUN_DEPTH;
    cap = 1024;
    nt = 0;

    last = malloc((size_t) nl * sizeof(uint32_t));
    cnt = calloc((size_t) nl + 1, sizeof(uint32_t));
    tr = malloc((size_t) cap * 3 * sizeof(uint32_t));
    if (last == NULL || cnt == NULL || tr == NULL) {
        rc = KVS_ENOMEM;
        goto done;
    }
    for (d = 0; d < nl; d++) {
        last[d] = UINT32_MAX;
    }

    for (i = 0; i < n; ) {
        (*cost)++;
        d = nd[i].depth;
        if (!kvs_gram_run_has(lv->set, nd[i].byte) || d >= nl) {
            i = nd[i].end;
            continue;
        }

        lo = nd[i].cum;
        hi = nd[nd[i].end].cum;
        i++;

        if (last[d] != UINT32_MAX && tr[3 * last[d] + 2] == lo) {
            tr[3 * last[d] + 2] = hi;
            continue;
        }
        if (nt == max) {
            lv->over = 1;
            rc = KVS_OK;
            goto done;
        }
        if (nt == cap) {
            uint32_t  *g;

            g = realloc(tr, (size_t) cap * 2 * 3 * sizeof(uint32_t));
            if (g == NULL) {
                rc = KVS_ENOMEM;
                goto done;
            }
            tr = g;
            cap *= 2;
        }
        tr[3 * nt] = d;
        tr[3 * nt + 1] = lo;
        tr[3 * nt + 2] = hi;
        last[d] = nt++;
        cnt[d + 1]++;
    }

    /* grouped by depth, each depth's in the DFS's (sorted) order */
    lv->n_lev = nl;
    lv->full = nl == gv->max_len + 1;
    lv->at = malloc(((size_t) nl + 1) * sizeof(uint32_t));
    lv->r = malloc(((size_t) nt + 1) * 2 * sizeof(uint32_t));
    if (lv->at == NULL || lv->r == NULL) {
        rc = KVS_ENOMEM;
        goto done;
    }
    for (d = 0; d < nl; d++) {
        cnt[d + 1] += cnt[d];
        lv->at[d] = cnt[d];
    }
    lv->at[nl] = cnt[nl];
    for (k = 0; k < nt; k++) {
        d = tr[3 * k];
        lv->r[2 * cnt[d]] = tr[3 * k + 1];
        lv->r[2 * cnt[d] + 1] = tr[3 * k + 2];
        cnt[d]++;
    }
    *cost += nt;
    rc = KVS_OK;

done:

    free(last);
    free(cnt);
    free(tr);
    if (rc != KVS_OK || lv->over) {
        free(lv->at);
        free(lv->r);
        lv->at = NULL;
        lv->r = NULL;
        lv->n_lev = 0;
    }

    return rc;
}


/* The table's levels of the class (made now if it has none and a slot
 * is free), or NULL when the class passes the bound, the slots are
 * taken or memory is short: the caller's DFS then. */
static const kvs_gram_rlev_t *
kvs_gram_run_levels(kvs_gram_masker_t *mk, const uint64_t *set,
    uint64_t *cost)
{
    uint32_t           i, max;
    kvs_gram_rlev_t   *lv;
    kvs_gram_masker_t *o;

    o = mk->ind_owner != NULL ? mk->ind_owner : mk;   /* the table */
    if (o->rlev == NULL) {
        o->rlev = calloc(KVS_GRAM_RUN_SLOTS, sizeof(kvs_gram_rlev_t));
        if (o->rlev == NULL) {
            return NULL;
        }
    }

    for (i = 0; i < o->n_rlev; i++) {
        lv = &o->rlev[i];
        if (memcmp(lv->set, set, sizeof(lv->set)) == 0) {
            return lv->over ? NULL : lv;
        }
    }

    if (o->n_rlev == KVS_GRAM_RUN_SLOTS) {
        return NULL;
    }
    lv = &o->rlev[o->n_rlev];

    max = o->rlev_max != 0 && o->rlev_max < KVS_GRAM_RUN_LEV_MAX
          ? o->rlev_max : KVS_GRAM_RUN_LEV_MAX;
    memcpy(lv->set, set, sizeof(lv->set));
    if (kvs_gram_run_fill(mk->gv, lv, max, cost) != KVS_OK) {
        memset(lv->set, 0, sizeof(lv->set));   /* the slot stays free */
        return NULL;
    }
    o->n_rlev++;                      /* kept, over the bound or not */

    return lv->over ? NULL : lv;
}


int
kvs_gram_run_derive(kvs_gram_masker_t *mk, kvs_gram_ientry_t *e,
    const kvs_gram_ientry_t *se, uint32_t c, const uint64_t *set)
{
    uint32_t                 u, id, k, j, r, lo, hi, nc, m;
    uint32_t                *own, *q;
    uint64_t                 cost;
    const uint32_t          *cut;
    const kvs_gram_rlev_t   *lv;
    const kvs_gram_vocab_t  *gv;

    gv = mk->gv;
    cost = 0;
    own = NULL;

    e->bits = malloc((size_t) mk->words * sizeof(uint32_t));
    if (e->bits == NULL) {
        return KVS_ENOMEM;
    }
    memcpy(e->bits, se->bits, (size_t) mk->words * sizeof(uint32_t));

    /* the class paths' subtrees at depth c + 1: the tokens of (b), in
     * sorted order; cut[2 * nc] their ranges */
    lv = mk->nolevels
         || (mk->ind_owner != NULL && mk->ind_owner->nolevels)
         ? NULL : kvs_gram_run_levels(mk, set, &cost);
    if (lv != NULL && c + 1 >= lv->n_lev && !lv->full) {
        lv = NULL;                    /* deeper than kept */
    }
    if (lv != NULL) {
        cut = lv->r;
        nc = 0;
        if (c + 1 < lv->n_lev) {
            cut = lv->r + 2 * (size_t) lv->at[c + 1];
            nc = lv->at[c + 2] - lv->at[c + 1];
        }
        cost += nc;
        mk->ind_levels++;
    } else {
        if (kvs_gram_run_dfs(gv, c, set, &own, &nc, &cost) != KVS_OK) {
            return KVS_ENOMEM;
        }
        cut = own;
    }

    for (k = 0; k < nc; k++) {
        for (u = cut[2 * k]; u < cut[2 * k + 1]; u++) {
            id = (uint32_t) gv->ids[u];
            e->bits[id >> 5] &= ~(1u << (id & 31));
        }
        cost += cut[2 * k + 1] - cut[2 * k];
    }

    /* the source's dependent ranges less the cut ones (both sorted and
     * disjoint): each cut splits at most one range in two */
    q = malloc(((size_t) se->n_ranges + nc + 1) * 2 * sizeof(uint32_t));
    if (q == NULL) {
        free(own);
        return KVS_ENOMEM;
    }
    m = 0;
    k = 0;
    for (r = 0; r < se->n_ranges; r++) {
        lo = se->ranges[2 * r];
        hi = se->ranges[2 * r + 1];

        while (k < nc && cut[2 * k + 1] <= lo) {
            k++;
        }

        for (j = k; lo < hi; j++) {
            u = j < nc && cut[2 * j] < hi ? cut[2 * j] : hi;
            if (u > lo) {
                if (m > 0 && q[2 * m - 1] == lo) {
                    q[2 * m - 1] = u;
                } else {
                    q[2 * m] = lo;
                    q[2 * m + 1] = u;
                    m++;
                }
            }
            if (u == hi) {
                break;
            }
            lo = cut[2 * j + 1] > lo ? cut[2 * j + 1] : lo;
        }
    }

    free(own);

    e->ranges = q;
    e->n_ranges = m;
    e->cap_ranges = se->n_ranges + nc + 1;
    e->capped = 0;

    for (k = 0; k < mk->words && e->bits[k] == 0; k++) {
        /* void */
    }
    e->some = k < mk->words;

    mk->work.used += cost / KVS_GRAM_RUN_PER_UNIT + 1;

    return KVS_OK;
}


int
kvs_gram_run_in(const kvs_gram_masker_t *mk, const uint32_t *key)
{
    uint32_t            at, src[KVS_GRAM_CUT], one[KVS_GRAM_CUT];
    uint64_t            set[4];
    const kvs_gram_t   *g;

    if (kvs_gram_run_src(mk, key, src, set) > 0) {
        return 1;
    }

    /* the source itself: the count 1 of its family names it */
    g = mk->m->g;
    if (!kvs_gram_run_class(g, key[0], &at, set)) {
        return 0;
    }
    one[0] = kvs_gram_rep_at(g, at, 1);
    one[1] = key[1];

    return kvs_gram_run_src(mk, one, src, set) > 0 && src[0] == key[0]
           && src[1] == key[1];
}
