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
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_grammar.h"
#include "grammar/kvs_gram_mask_impl.h"


/* DFS nodes or cleared tokens per unit of work (a unit is about one
 * memo step of a walk: each of these is a few times cheaper) */
#define KVS_GRAM_RUN_PER_UNIT  8


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


int
kvs_gram_run_derive(kvs_gram_masker_t *mk, kvs_gram_ientry_t *e,
    const kvs_gram_ientry_t *se, uint32_t c, const uint64_t *set)
{
    uint32_t                 i, n, d, u, id, k, j, r, lo, hi, nc, cap, m;
    uint32_t                *cut, *q;
    uint64_t                 cost;
    const kvs_gram_tnode_t  *nd;
    const kvs_gram_vocab_t  *gv;

    gv = mk->gv;
    nd = gv->t_node;
    n = gv->n_nodes;

    e->bits = malloc((size_t) mk->words * sizeof(uint32_t));
    if (e->bits == NULL) {
        return KVS_ENOMEM;
    }
    memcpy(e->bits, se->bits, (size_t) mk->words * sizeof(uint32_t));

    /* the class paths down to depth c + 1: the subtrees there are the
     * tokens of (b), in sorted order; cut[2 * nc] their ranges */
    cut = NULL;
    nc = 0;
    cap = 0;
    cost = 0;

    for (i = 0; i < n; ) {
        cost++;
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

        lo = nd[i].cum;
        hi = nd[nd[i].end].cum;
        if (kvs_gram_run_push(&cut, &nc, &cap, lo, hi) != KVS_OK) {
            free(cut);
            return KVS_ENOMEM;
        }
        for (u = lo; u < hi; u++) {
            id = (uint32_t) gv->ids[u];
            e->bits[id >> 5] &= ~(1u << (id & 31));
        }
        cost += hi - lo;
        i = nd[i].end;
    }

    /* the source's dependent ranges less the cut ones (both sorted and
     * disjoint): each cut splits at most one range in two */
    q = malloc(((size_t) se->n_ranges + nc + 1) * 2 * sizeof(uint32_t));
    if (q == NULL) {
        free(cut);
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

    free(cut);

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
