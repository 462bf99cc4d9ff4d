/*
 * kvs_gram_ind: a masker's context-independent entries.
 *
 * Owns kvs_gram_ientry_t (its fields: kvs_gram_mask_impl.h) and the
 * table of them that a masker holds, or shares with the other maskers
 * of one grammar and vocabulary (ind_owner): one entry per key, the top
 * KVS_GRAM_CUT positions of a stack, found by hash and evicted round
 * robin; the entries' builds (a trie walk on the cut stack, whose
 * bottom is a sentinel); and the merged check of a mask's dependent
 * tokens (kvs_gram_ind_check_all).  The mask that is the union of the
 * entries is kvs_gram_mask.c's.
 *
 * An entry's walk steps through the table's transition memo, shared
 * by the warm and every masker of the table (kvs_gram_ind_memo), or
 * the masker's own (kvs_gram_memo.c).  A new entry is copied from a
 * vocabulary slice (kvs_gram_slice.c) when its shape is there, else, at
 * a count of a run of one byte class, is the entry of the run's largest
 * count less the tokens that run too far (kvs_gram_run.c), else takes
 * its short tokens from a source entry (kvs_gram_ind_src), else is
 * walked from wkey (kvs_gram_ind_wkey), in renaming passes where a
 * count is far from its bound (kvs_gram_ind_passes).
 *
 * A context-independent key names a counted repetition's position by a
 * canonical copy (kvs_gram_ind_key), so that the characters of a
 * bounded string share entries as those of a free string do; the
 * entries stay exact (kvs_gram_rep.c).
 *
 * Invariants: an entry is in the table whole or not at all (a build
 * that fails, or that the work bound cut short, leaves a free slot);
 * its ranges are sorted and disjoint; an entry the current mask holds
 * (stamp equal to the table's serial) is never evicted; the masker's
 * matcher is left in the state it was given (a build walks a cut
 * matcher of its own).
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_grammar.h"
#include "grammar/kvs_gram_mask_impl.h"


uint64_t
kvs_gram_tuple_hash(const uint32_t *t)
{
    unsigned  k;
    uint64_t  h;

    h = 0x84222325cbf29ce4ULL;
    for (k = 0; k < KVS_GRAM_CUT; k++) {
        h = (h ^ t[k]) * 0x100000001b3ULL;
    }

    return h;
}


static int
kvs_gram_ind_range(kvs_gram_ientry_t *e, uint32_t lo, uint32_t hi)
{
    uint32_t   c, *q;

    if (lo == hi) {
        return KVS_OK;
    }

    if (e->n_ranges > 0 && e->ranges[2 * e->n_ranges - 1] == lo) {
        e->ranges[2 * e->n_ranges - 1] = hi;
        return KVS_OK;
    }

    if (e->n_ranges == e->cap_ranges) {
        c = e->cap_ranges ? e->cap_ranges * 2 : 32;
        q = realloc(e->ranges, (size_t) c * 2 * sizeof(uint32_t));
        if (q == NULL) {
            return KVS_ENOMEM;
        }
        e->ranges = q;
        e->cap_ranges = c;
    }

    e->ranges[2 * e->n_ranges] = lo;
    e->ranges[2 * e->n_ranges + 1] = hi;
    e->n_ranges++;

    return KVS_OK;
}


/* The walk's report of a range of tokens refused after a prefix reached
 * the sentinel: they depend on the stack below. */
static int
kvs_gram_ind_dep(void *arg, uint32_t lo, uint32_t hi)
{
    return kvs_gram_ind_range(arg, lo, hi);
}


/*
 * The memo an entry's build steps through: the table's when mk shares
 * one (its steps counted into mk's work), so that a request's builds
 * start from what the warm's and every earlier request's learnt; else
 * mk's own.  A masker whose memo has no states (the tests' reference)
 * builds with none.  Sharing the kept states across maskers is as exact
 * as across one masker's builds: a cut walk's states are named by whole
 * chains of positions, the same in every cut walk of the grammar
 * (kvs_gram_memo.c), and kvs_gram_memo_begin() forgets them when the
 * grammar or the matcher's caps are not the ones they were made under.
 */
kvs_gram_memo_t *
kvs_gram_ind_memo(kvs_gram_masker_t *mk)
{
    kvs_gram_masker_t  *o = mk->ind_owner;

    if (o == NULL || o->memo == NULL
        || kvs_gram_memo_states(mk->memo) == 0)
    {
        return mk->memo;
    }

    kvs_gram_memo_work(o->memo, &mk->work);

    return o->memo;
}


/* One trie walk on the cut stack into e (cleared first), the tokens
 * shorter than len bytes taken from src when it is not NULL. */
static int
kvs_gram_ind_pass(kvs_gram_masker_t *mk, kvs_gram_memo_t *mo,
    kvs_gram_matcher_t *cm, kvs_gram_ientry_t *e,
    const kvs_gram_ientry_t *src, uint32_t len)
{
    kvs_gram_walk_src_t  ws;

    memset(e->bits, 0, (size_t) mk->words * sizeof(uint32_t));
    e->n_ranges = 0;

    if (src != NULL) {
        ws.len = len;
        ws.bits = src->bits;
        ws.ranges = src->ranges;
        ws.n_ranges = src->n_ranges;
    }

    if (mo != NULL) {
        /* a cut walk: named by whole chains, its states are every other
         * cut walk's of this grammar (kvs_gram_memo.c) */
        kvs_gram_memo_keep(mo, !mk->nokeep);
    }

    return kvs_gram_memo_walk(mo, cm, mk->gv, e->bits, kvs_gram_ind_dep, e,
                              src != NULL ? &ws : NULL);
}


/*
 * The walk of an entry with no source, in passes with counted
 * repetitions renamed (kvs_gram_memo_rename): the first names every
 * position with more than theta0 copies left by its family, so that
 * inside a bounded string far from its bound the states recur and
 * subtree skipping closes as in a free string, and is exact for the
 * tokens of at most theta0 bytes; each next pass doubles theta, takes
 * the tokens shorter than the last theta + 1 from the pass before and
 * steps only the paths to longer ones; the last has theta = need - 1
 * (the entry must be exact for the tokens shorter than need).  After a
 * pass that renamed nothing, the last pass comes next.
 */
static int
kvs_gram_ind_passes(kvs_gram_masker_t *mk, kvs_gram_memo_t *mo,
    kvs_gram_matcher_t *cm, kvs_gram_ientry_t *e, uint32_t need)
{
    int                  rc;
    uint32_t             i, theta, plen;
    uint64_t             before;
    kvs_gram_ientry_t    t[2], *cur, *prev;

    memset(t, 0, sizeof(t));
    t[0].bits = malloc((size_t) mk->words * sizeof(uint32_t));
    t[1].bits = malloc((size_t) mk->words * sizeof(uint32_t));
    rc = t[0].bits != NULL && t[1].bits != NULL ? KVS_OK : KVS_ENOMEM;

    prev = NULL;
    plen = 0;
    theta = mk->theta0 != 0 ? mk->theta0 : KVS_GRAM_THETA0;

    for (i = 0; rc == KVS_OK; i++) {
        if (theta >= need - 1) {
            theta = need - 1;
        }
        cur = theta == need - 1 ? e : &t[i & 1];

        before = kvs_gram_memo_renamed(mo);
        kvs_gram_memo_rename(mo, theta);
        rc = kvs_gram_ind_pass(mk, mo, cm, cur, prev, plen);

        if (rc != KVS_OK || cur == e) {
            break;
        }

        prev = cur;
        plen = theta + 1;

        /* a pass that renamed nothing met no count above its theta:
         * the last pass next */
        theta = kvs_gram_memo_renamed(mo) == before ? need - 1
                                                    : 2 * theta + 1;
    }

    kvs_gram_memo_rename(mo, 0);

    for (i = 0; i < 2; i++) {
        free(t[i].bits);
        free(t[i].ranges);
    }

    return rc;
}


/*
 * The trie walk on the cut stack: a token taken without reaching the
 * sentinel is accepted whatever lies below; one refused before any
 * prefix of it reached the sentinel is refused whatever lies below; the
 * rest (a prefix reached it, then the cut stack refused) depend on it.
 * With a source entry (src not NULL), the tokens shorter than len bytes
 * take its classification instead (kvs_gram_ind_src says why that is
 * exact).  Without one, the walk starts from wkey (kvs_gram_ind_wkey:
 * alike for the tokens shorter than need), in renaming passes
 * (kvs_gram_ind_passes) when a position of wkey has more than theta0
 * copies left and the masker's norename does not say otherwise.
 */
static int
kvs_gram_ind_build(kvs_gram_masker_t *mk, kvs_gram_ientry_t *e,
    const kvs_gram_ientry_t *src, uint32_t len, const uint32_t *wkey,
    uint32_t need, kvs_err_t *err)
{
    int                      rc;
    uint32_t                 k, theta;
    kvs_gram_memo_t         *mo;
    kvs_gram_matcher_t       cm;

    rc = kvs_gram_matcher_init_cut(&cm, mk->m->g,
                                   src == NULL ? wkey : e->key,
                                   KVS_GRAM_CUT, &mk->m->lim, err);
    if (rc != KVS_OK) {
        return rc;
    }

    e->n_ranges = 0;

    /* renaming pays where the key itself is far from a bound; a key
     * with no such count takes one walk (most keys: a narrow one's walk
     * costs less than a second pass's copy) */
    theta = mk->theta0 != 0 ? mk->theta0 : KVS_GRAM_THETA0;
    for (k = 0; k < KVS_GRAM_CUT
                && kvs_gram_rep_count(mk->m->g, wkey[k]) <= theta; k++)
    {
        /* void */
    }

    mo = kvs_gram_ind_memo(mk);

    if (src != NULL || mk->norename || k == KVS_GRAM_CUT || need < 2) {
        rc = kvs_gram_ind_pass(mk, mo, &cm, e, src, len);

    } else {
        rc = kvs_gram_ind_passes(mk, mo, &cm, e, need);
    }

    if (mo != mk->memo) {
        kvs_gram_memo_work(mo, NULL);     /* mk's work is not the table's */
    }

    e->capped = cm.capped != 0 || (src != NULL && src->capped);
    kvs_gram_matcher_free(&cm);

    /* looked at once here, so that a mask knows it is not empty
     * without a pass over its bits */
    for (k = 0; k < mk->words && e->bits[k] == 0; k++) {
        /* void */
    }
    e->some = k < mk->words;

    if (rc != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "masker: no memory");
    }

    return KVS_OK;
}


void
kvs_gram_ientry_ranges(const kvs_gram_ientry_t *e, const uint32_t **ranges,
    uint32_t *n_ranges)
{
    *ranges = e->ranges;
    *n_ranges = e->n_ranges;
}


/* Dependent tokens below which a mask checks them token by token: a
 * memo pays where thousands share prefixes whose states recur (a
 * bounded string's long tokens, ~29k), not for a few hundred or a
 * couple of thousand (its states named and rows made, on a fresh
 * masker's new tables, cost more than the steps it saves).  It was
 * 1000 while the one-by-one check read each token by id
 * (kvs_gram_vocab.c's layout: docs/grammar.md, "The mask", item 11). */
#define KVS_GRAM_CHECK_MEMO_MIN  4000

/* Room for n more merged range pairs in mk->mr. */
static int
kvs_gram_mr_room(kvs_gram_masker_t *mk, uint32_t n)
{
    uint32_t  c, *q;

    if (n <= mk->cap_mr) {
        return KVS_OK;
    }

    c = mk->cap_mr ? mk->cap_mr : 256;
    while (c < n) {
        c *= 2;
    }

    q = realloc(mk->mr, (size_t) c * 2 * sizeof(uint32_t));
    if (q == NULL) {
        return KVS_ENOMEM;
    }
    mk->mr = q;
    mk->cap_mr = c;

    return KVS_OK;
}


/*
 * The dependent tokens of this mask's entries (used[0 .. n_used)), all
 * at once: their ranges merged (each entry's are sorted and disjoint;
 * the merge is, one entry at a time) and walked on the real stacks
 * through the check memo (kvs_gram_memo_walk_ranges: the plain walk's
 * verdict on every token of them, as kvs_gram_ind_check's).  -1 if the
 * memo or the merge has no memory (the caller checks token by token),
 * else 1 if it allowed one.
 */
int
kvs_gram_ind_check_all(kvs_gram_masker_t *mk, uint32_t n_used,
    uint32_t *bits, kvs_err_t *err)
{
    uint32_t                 j, a, b, na, nb, n, tot, lo, hi, *out;
    const uint32_t          *ra, *rb;
    const kvs_gram_ientry_t *e;

    tot = 0;
    for (j = 0; j < n_used; j++) {
        tot += mk->used[j]->n_ranges;
    }

    /* the merged list in the first half of mr, each merge's output in
     * the second, copied back */
    if (kvs_gram_mr_room(mk, 2 * tot) != KVS_OK) {
        return -1;
    }

    n = 0;
    for (j = 0; j < n_used; j++) {
        e = mk->used[j];
        if (e->n_ranges == 0) {
            continue;
        }

        ra = mk->mr;
        na = n;
        rb = e->ranges;
        nb = e->n_ranges;
        out = mk->mr + 2 * (size_t) tot;
        n = 0;

        for (a = 0, b = 0; a < na || b < nb; ) {
            if (b == nb || (a < na && ra[2 * a] <= rb[2 * b])) {
                lo = ra[2 * a];
                hi = ra[2 * a + 1];
                a++;
            } else {
                lo = rb[2 * b];
                hi = rb[2 * b + 1];
                b++;
            }

            if (n > 0 && lo <= out[2 * n - 1]) {
                if (hi > out[2 * n - 1]) {
                    out[2 * n - 1] = hi;
                }
                continue;
            }
            out[2 * n] = lo;
            out[2 * n + 1] = hi;
            n++;
        }

        memcpy(mk->mr, out, (size_t) n * 2 * sizeof(uint32_t));
    }

    for (j = 0, tot = 0; j < n; j++) {
        tot += mk->mr[2 * j + 1] - mk->mr[2 * j];
    }
    if (tot < (mk->check_memo_min != 0 ? mk->check_memo_min
                                        : KVS_GRAM_CHECK_MEMO_MIN))
    {
        return -1;
    }

    if (mk->cmemo == NULL
        && kvs_gram_memo_new(&mk->cmemo, KVS_GRAM_CMEMO_STATES,
                             mk->gv->max_len, err) != KVS_OK)
    {
        return -1;
    }

    kvs_gram_memo_work(mk->cmemo, &mk->work);
    mk->checked += tot;
    mk->checks_memo++;

    return kvs_gram_memo_walk_ranges(mk->cmemo, mk->m, mk->gv, bits, mk->mr,
                                     n);
}


int
kvs_gram_ind_index(kvs_gram_masker_t *mk)
{
    uint32_t  n;

    for (n = 2; n < 2 * mk->cap_ind; n *= 2) {
        /* void */
    }

    mk->islot = calloc(n, sizeof(uint32_t));
    if (mk->islot == NULL) {
        return KVS_ENOMEM;
    }
    mk->islot_mask = n - 1;

    return KVS_OK;
}


void
kvs_gram_ind_unindex_all(kvs_gram_masker_t *mk)
{
    if (mk->islot != NULL) {
        memset(mk->islot, 0, ((size_t) mk->islot_mask + 1) * sizeof(uint32_t));
    }
}


/* Entry o->ind[i] (used) into the index. */
static void
kvs_gram_ind_slot_add(kvs_gram_masker_t *o, uint32_t i)
{
    uint32_t  j;

    j = (uint32_t) o->ind[i].hash & o->islot_mask;
    while (o->islot[j] != 0) {
        j = (j + 1) & o->islot_mask;
    }
    o->islot[j] = i + 1;
}


/* Entry o->ind[i] out of the index, the probe runs behind it shifted
 * back so that no lookup stops early (no tombstones). */
static void
kvs_gram_ind_slot_del(kvs_gram_masker_t *o, uint32_t i)
{
    uint32_t  j, k, home;

    j = (uint32_t) o->ind[i].hash & o->islot_mask;
    while (o->islot[j] != i + 1) {
        if (o->islot[j] == 0) {
            return;                   /* not indexed */
        }
        j = (j + 1) & o->islot_mask;
    }
    o->islot[j] = 0;

    for (k = (j + 1) & o->islot_mask; o->islot[k] != 0;
         k = (k + 1) & o->islot_mask)
    {
        home = (uint32_t) o->ind[o->islot[k] - 1].hash & o->islot_mask;
        /* stays when its home lies cyclically in (j, k] */
        if (j <= k ? (home > j && home <= k) : (home > j || home <= k)) {
            continue;
        }
        o->islot[j] = o->islot[k];
        o->islot[k] = 0;
        j = k;
    }
}


void
kvs_gram_ind_free(kvs_gram_ientry_t *e)
{
    if (!e->lent) {
        free(e->bits);
        free(e->ranges);
        free(e->sparse);
    }
    free(e->rest);
    memset(e, 0, sizeof(kvs_gram_ientry_t));
}


/*
 * The key of a stack's top positions t: a position of a counted
 * repetition with more copies left than any token can cross (all =
 * max_len + 1) is named by its family's member with `all` left; with
 * low_tier, one with rep_low .. all - 1 left by the member with rep_low
 * (kvs_gram_rep.c: the two take the same tokens of fewer than rep_low
 * bytes).  1 if the key has a position at a low tier's count: its entry
 * leaves the long tokens to the real stacks.
 */
int
kvs_gram_ind_key(const kvs_gram_masker_t *mk, const uint32_t *t,
    uint32_t *key)
{
    return kvs_gram_ind_name(mk, t, key, 1);
}


int
kvs_gram_ind_name(const kvs_gram_masker_t *mk, const uint32_t *t,
    uint32_t *key, int low_tier)
{
    int                 low;
    uint32_t            k, c, all, lo;
    const kvs_gram_t   *g;

    g = mk->m->g;
    all = mk->gv->max_len + 1 > 2 ? mk->gv->max_len + 1 : 2;
    lo = mk->gv->rep_low;
    low = 0;

    for (k = 0; k < KVS_GRAM_CUT; k++) {
        key[k] = t[k];
        c = kvs_gram_rep_count(g, t[k]);

        if (c > all) {
            key[k] = kvs_gram_rep_at(g, t[k], all);

        } else if (lo != 0 && c >= lo && c < all) {
            if (c > lo && low_tier) {
                key[k] = kvs_gram_rep_at(g, t[k], lo);
            }
            low = 1;
        }
    }

    return low;
}


/*
 * The source of a new entry's short tokens.  A key position of a counted
 * repetition with c copies left is named by its family's member with
 * the most copies left, keyed as kvs_gram_ind_key keys it (count cs:
 * max_len + 1, rep_low, or the family's largest), when cs > c; the
 * other positions stay.  By kvs_gram_rep.c's argument (each position
 * renamed on its own frame), the cut walks from the two keys classify
 * alike every token shorter than the smallest such c, which is returned
 * (0: no position renamed, no source).  So the new entry's walk takes
 * those tokens from the source entry and steps only the trie paths to
 * longer tokens: in the last characters of a bounded string, where
 * every count is a key of its own, a few thousand nodes instead of the
 * whole trie.  A source key's positions are at a tier or at their
 * family's largest count, so its own source, if any, is a tier's: the
 * chain is at most three entries long.
 */
uint32_t
kvs_gram_ind_src(const kvs_gram_masker_t *mk, const uint32_t *key,
    uint32_t below, uint32_t *src)
{
    uint32_t                 k, c, cs, p, len, all, lo;
    const kvs_gram_t        *g;
    const kvs_gram_rfam_t   *f;

    g = mk->m->g;
    all = mk->gv->max_len + 1 > 2 ? mk->gv->max_len + 1 : 2;
    lo = mk->gv->rep_low;
    len = UINT32_MAX;

    for (k = 0; k < KVS_GRAM_CUT; k++) {
        src[k] = key[k];
        c = kvs_gram_rep_count(g, key[k]);
        if (c == 0 || c >= below) {
            continue;
        }

        f = &g->rfam[g->rep_f[key[k]]];
        cs = f->c_at;
        if (cs > all) {
            cs = all;
        } else if (lo != 0 && cs >= lo && cs < all) {
            cs = lo;
        }
        if (cs <= c) {
            continue;
        }

        /* the member named must be of the family and have that count */
        p = kvs_gram_rep_at(g, key[k], cs);
        if (p >= g->n_elems || kvs_gram_rep_count(g, p) != cs
            || g->rep_f[p] != g->rep_f[key[k]]
            || g->elems[p].kind != g->elems[key[k]].kind)
        {
            continue;
        }

        src[k] = p;
        if (c < len) {
            len = c;
        }
    }

    return len == UINT32_MAX ? 0 : len;
}


/*
 * The key a new entry's walk starts from when it has no source: each
 * position of a counted repetition with need or more copies left
 * replaced by its family's member with the most copies left (when that
 * is more).  By kvs_gram_rep.c's argument the two keys' cut walks
 * classify alike every token shorter than need bytes, which is all the
 * entry must get right (need: max_len + 1, or rep_low for a low-tier
 * entry, whose longer tokens are checked on the real stacks); and from
 * the larger count more of the walk stays above the renaming passes'
 * theta (kvs_gram_ind_passes), where its states recur.
 */
static void
kvs_gram_ind_wkey(const kvs_gram_masker_t *mk, const uint32_t *key,
    uint32_t need, uint32_t *wkey)
{
    uint32_t                 k, c, cs, p;
    const kvs_gram_t        *g;

    g = mk->m->g;

    for (k = 0; k < KVS_GRAM_CUT; k++) {
        wkey[k] = key[k];
        c = kvs_gram_rep_count(g, key[k]);
        if (c == 0 || c < need || mk->norename) {
            continue;
        }

        cs = g->rfam[g->rep_f[key[k]]].c_at;
        if (cs <= c) {
            continue;
        }

        /* the member named must be of the family and have that count */
        p = kvs_gram_rep_at(g, key[k], cs);
        if (p < g->n_elems && kvs_gram_rep_count(g, p) == cs
            && g->rep_f[p] == g->rep_f[key[k]]
            && g->elems[p].kind == g->elems[key[k]].kind)
        {
            wkey[k] = p;
        }
    }
}


/* A low-tier entry: the long tokens (gv->long_x, sorted positions) are
 * taken out of the accepted bits and merged into the dependent ranges,
 * which stay sorted and disjoint. */
static int
kvs_gram_ind_long(kvs_gram_masker_t *mk, kvs_gram_ientry_t *e)
{
    uint32_t                 r, i, lo, hi, id, n, *old, *q;
    const kvs_gram_vocab_t  *gv;

    gv = mk->gv;

    old = e->ranges;
    n = e->n_ranges;
    q = malloc(((size_t) n + gv->n_long + 1) * 2 * sizeof(uint32_t));
    if (q == NULL) {
        return KVS_ENOMEM;
    }

    e->ranges = q;
    e->n_ranges = 0;
    e->cap_ranges = n + gv->n_long + 1;

    for (r = 0, i = 0; r < n || i < gv->n_long; ) {
        if (i == gv->n_long || (r < n && old[2 * r] <= gv->long_x[i])) {
            lo = old[2 * r];
            hi = old[2 * r + 1];
            r++;
        } else {
            lo = gv->long_x[i++];
            hi = lo + 1;
            id = (uint32_t) gv->ids[lo];
            e->bits[id >> 5] &= ~(1u << (id & 31));
        }

        if (e->n_ranges > 0 && lo <= q[2 * e->n_ranges - 1]) {
            if (hi > q[2 * e->n_ranges - 1]) {
                q[2 * e->n_ranges - 1] = hi;
            }
            continue;
        }
        q[2 * e->n_ranges] = lo;
        q[2 * e->n_ranges + 1] = hi;
        e->n_ranges++;
    }

    free(old);

    return KVS_OK;
}


/*
 * An entry's bits are final: their nonzero words listed too when they
 * are at most KVS_GRAM_SPARSE_DIV-th of the words.  A mask that ORs
 * such an entry touches a few hundred bytes instead of the whole
 * vocabulary's bits, which after a forward pass are no longer in the
 * cache.  No memory for the list: the mask reads the bits.
 */
int
kvs_gram_sparse(const uint32_t *b, uint32_t words, uint32_t **out,
    uint32_t *n_out)
{
    uint32_t  w, n, max, *q, *r;

    *out = NULL;
    *n_out = 0;
    max = words / KVS_GRAM_SPARSE_DIV;
    q = malloc(((size_t) max + 1) * 2 * sizeof(uint32_t));
    if (q == NULL) {
        return KVS_ENOMEM;
    }

    /* one pass, eight zero words skipped at a time, given up as soon
     * as the nonzero ones are too many */
    for (w = 0, n = 0; w < words; w++) {
        if ((w & 7) == 0 && w + 8 <= words
            && (b[w] | b[w + 1] | b[w + 2] | b[w + 3] | b[w + 4] | b[w + 5]
                | b[w + 6] | b[w + 7]) == 0)
        {
            w += 7;
            continue;
        }
        if (b[w] == 0) {
            continue;
        }
        if (n == max) {
            free(q);
            return KVS_OK;
        }
        q[2 * n] = w;
        q[2 * n + 1] = b[w];
        n++;
    }

    r = realloc(q, ((size_t) n + 1) * 2 * sizeof(uint32_t));
    *out = r != NULL ? r : q;
    *n_out = n;

    return KVS_OK;
}


static void
kvs_gram_ind_seal(kvs_gram_masker_t *mk, kvs_gram_ientry_t *e)
{
    if (kvs_gram_sparse(e->bits, mk->words, &e->sparse, &e->n_sparse)
        == KVS_OK && e->sparse != NULL)
    {
        (mk->ind_owner != NULL ? mk->ind_owner : mk)->ind_sparse++;
    }
}


/* The table's entry of canonical key t (hash h), or NULL. */
static kvs_gram_ientry_t *
kvs_gram_ind_find(kvs_gram_masker_t *o, const uint32_t *t, uint64_t h)
{
    uint32_t            i;
    kvs_gram_ientry_t  *e;

    for (i = (uint32_t) h & o->islot_mask; o->islot[i] != 0;
         i = (i + 1) & o->islot_mask)
    {
        e = &o->ind[o->islot[i] - 1];
        if (e->hash == h && memcmp(e->key, t, sizeof(e->key)) == 0) {
            return e;
        }
    }

    return NULL;
}


/* A free entry of the table for key t (hash h), to be built (lent 0)
 * or lent a slice: a new one while the table has room (for a built
 * one, while it holds fewer than cap_built built ones), else the next
 * in round robin that this mask does not hold (a built one where a
 * built one must make room), emptied; KVS_ETOOLONG when there is none. */
static int
kvs_gram_ind_take(kvs_gram_masker_t *o, const uint32_t *t, uint64_t h,
    int low, int lent, kvs_gram_ientry_t **out)
{
    int                 built;
    uint32_t            i;
    kvs_gram_ientry_t  *e;

    built = !lent && o->n_built >= o->cap_built;

    if (!built && o->n_ind < o->cap_ind) {
        e = &o->ind[o->n_ind++];
    } else {
        for (i = 0; i < o->n_ind; i++) {
            e = &o->ind[o->next_ind];
            o->next_ind = (o->next_ind + 1) % o->n_ind;
            if (e->stamp != o->serial
                && (!built || (e->used && !e->lent)))
            {
                break;
            }
        }
        if (i == o->n_ind) {
            return KVS_ETOOLONG;      /* more stacks than entries */
        }
        if (e->used) {
            kvs_gram_ind_slot_del(o, (uint32_t) (e - o->ind));
            if (e->lent) {
                o->n_lent--;
            } else {
                o->n_built--;
            }
        }
        kvs_gram_ind_free(e);
    }

    memcpy(e->key, t, sizeof(e->key));
    e->hash = h;
    e->low = (uint32_t) low;
    *out = e;

    return KVS_OK;
}


/* Entry e (taken) lends slice sl's parts: never written, since an
 * entry's bits, ranges and word list change only while it is built, and
 * this one is not. */
static void
kvs_gram_ind_lend(kvs_gram_masker_t *mk, kvs_gram_masker_t *o,
    kvs_gram_ientry_t *e, const kvs_gram_slice_ent_t *sl)
{
    e->bits = (uint32_t *) sl->bits;
    e->ranges = (uint32_t *) sl->ranges;
    e->sparse = (uint32_t *) sl->sparse;
    e->n_sparse = sl->n_sparse;
    e->lent = 1;
    e->n_ranges = sl->n_ranges;
    e->cap_ranges = sl->n_ranges;
    e->some = sl->some;
    e->used = 1;
    e->stamp = o->serial;
    o->n_lent++;
    if (sl->sparse != NULL) {
        o->ind_sparse++;
    }
    kvs_gram_ind_slot_add(o, (uint32_t) (e - o->ind));
    mk->ind_slices++;
}


kvs_gram_ientry_t *
kvs_gram_ind_held(kvs_gram_masker_t *mk, const uint32_t *t)
{
    kvs_gram_ientry_t    *e;
    kvs_gram_masker_t    *o;

    o = mk->ind_owner != NULL ? mk->ind_owner : mk;

    e = kvs_gram_ind_find(o, t, kvs_gram_tuple_hash(t));
    if (e != NULL) {
        mk->ind_hits++;
        e->stamp = o->serial;
    }

    return e;
}


/* The table's entry of key t0 if it has one or a slice gives it (then
 * lent, as kvs_gram_ind_get would), else KVS_ENOTFOUND with nothing
 * changed; KVS_ETOOLONG when no entry is free.  No walk. */
int
kvs_gram_ind_get_slice(kvs_gram_masker_t *mk, const uint32_t *t0,
    kvs_gram_ientry_t **out)
{
    int                   low, rc;
    uint32_t              t[KVS_GRAM_CUT];
    uint64_t              h;
    kvs_gram_ientry_t    *e;
    kvs_gram_masker_t    *o;
    kvs_gram_slice_ent_t  sl;

    low = kvs_gram_ind_key(mk, t0, t);

    e = kvs_gram_ind_held(mk, t);
    if (e != NULL) {
        *out = e;
        return KVS_OK;
    }

    mk->ind_misses++;

    if (mk->noslices || mk->gv->slices == NULL) {
        return KVS_ENOTFOUND;
    }

    if (!kvs_gram_slice_find(mk->gv, mk->m->g, t, &mk->m->lim, &sl,
                             &mk->shbuf))
    {
        return KVS_ENOTFOUND;
    }

    h = kvs_gram_tuple_hash(t);
    o = mk->ind_owner != NULL ? mk->ind_owner : mk;

    rc = kvs_gram_ind_take(o, t, h, low, 1, &e);
    if (rc != KVS_OK) {
        return rc;
    }
    kvs_gram_ind_lend(mk, o, e, &sl);
    *out = e;

    return KVS_OK;
}


/* The entry of one stack's top positions, built if new. */
int
kvs_gram_ind_get(kvs_gram_masker_t *mk, const uint32_t *t0,
    kvs_gram_ientry_t **out, kvs_err_t *err)
{
    int                   rc, low;
    uint32_t              len, need, t[KVS_GRAM_CUT], s[KVS_GRAM_CUT];
    uint32_t              w[KVS_GRAM_CUT], rn;
    uint64_t              set[4];
    uint64_t              h;
    kvs_gram_ientry_t    *e, *se;
    kvs_gram_masker_t    *o;

    /* found, or the key is a vocabulary slice's shape (kvs_gram_slice.c),
     * counted positions too: then its entry is the slice's, lent (a
     * copy cost ~10 us a key, 15 keys after a backslash in a string) */
    rc = kvs_gram_ind_get_slice(mk, t0, out);
    if (rc != KVS_ENOTFOUND) {
        return rc;
    }

    low = kvs_gram_ind_key(mk, t0, t);
    h = kvs_gram_tuple_hash(t);
    o = mk->ind_owner != NULL ? mk->ind_owner : mk;   /* the table */

    /* the source first (found or built, and held for this mask), so
     * that taking a slot below cannot evict it: for a count of a class
     * run, the entry of its family's largest count (kvs_gram_run.c) */
    se = NULL;
    rn = low || mk->noruns ? 0 : kvs_gram_run_src(mk, t, s, set);
    if (rn > 0) {
        rc = kvs_gram_ind_get(mk, s, &se, err);
        if (rc == KVS_ETOOLONG && !kvs_gram_work_over(&mk->work)) {
            se = NULL;                /* no room: a walk then */
        } else if (rc != KVS_OK) {
            return rc;
        }
        if (se == NULL || se->capped) {
            se = NULL;
            rn = 0;
        }
    }

    len = mk->nosrc || rn > 0 ? 0 : kvs_gram_ind_src(mk, t, UINT32_MAX, s);
    if (len > 1) {
        rc = kvs_gram_ind_get(mk, s, &se, err);
        if (rc == KVS_ETOOLONG && !kvs_gram_work_over(&mk->work)) {
            se = NULL;                /* no room: a full walk then */
        } else if (rc != KVS_OK) {
            return rc;
        }
    }

    rc = kvs_gram_ind_take(o, t, h, low, 0, &e);
    if (rc != KVS_OK) {
        return rc;
    }

    if (rn > 0) {
        rc = kvs_gram_run_derive(mk, e, se, rn, set) == KVS_OK
             ? KVS_OK : kvs_err_set(err, KVS_ENOMEM, "masker: no memory");

    } else {
        need = low ? mk->gv->rep_low : mk->gv->max_len + 1;
        kvs_gram_ind_wkey(mk, t, need, w);
        e->bits = malloc((size_t) mk->words * sizeof(uint32_t));
        rc = e->bits != NULL
             ? kvs_gram_ind_build(mk, e, se, len, w, need, err)
             : kvs_err_set(err, KVS_ENOMEM, "masker: no memory");

        if (rc == KVS_OK && low && kvs_gram_ind_long(mk, e) != KVS_OK) {
            rc = kvs_err_set(err, KVS_ENOMEM, "masker: no memory");
        }
    }

    if (rc != KVS_OK) {
        kvs_gram_ind_free(e);         /* no half-built entry */
        return rc;
    }

    if (kvs_gram_work_over(&mk->work)) {
        /* its walk was cut short: not an entry, and the table is
         * other requests' too */
        kvs_gram_ind_free(e);
        return KVS_ETOOLONG;
    }

    e->used = 1;
    e->stamp = o->serial;
    o->n_built++;
    kvs_gram_ind_seal(mk, e);
    kvs_gram_ind_slot_add(o, (uint32_t) (e - o->ind));
    mk->ind_src += se != NULL && rn == 0;
    mk->ind_runs += rn > 0;
    *out = e;

    return KVS_OK;
}


int
kvs_gram_masker_entries(const kvs_gram_masker_t *mk, kvs_gram_entry_pt cb,
    void *arg)
{
    int                       rc;
    uint32_t                  i;
    const kvs_gram_ientry_t  *e;

    for (i = 0; i < mk->n_ind; i++) {
        e = &mk->ind[i];
        if (!e->used) {
            continue;
        }
        rc = cb(arg, e->key, e->bits, e->ranges, e->n_ranges, e->some,
                (int) e->capped);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}
