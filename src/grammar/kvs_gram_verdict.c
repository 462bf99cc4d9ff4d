/*
 * kvs_gram_verdict: a mask's dependent tokens checked on the real
 * stacks, and their verdicts kept per canonical state.
 *
 * Owns the masker's verdict cache (kvs_gram_masker_t.vc) and the
 * token-by-token check (kvs_gram_check_ranges) that fills it.
 *
 * Why verdicts can be kept.  Inside a bounded string with 32 to
 * max_len characters left, every character is a new stack (its count is
 * in the top position), so the state cache never hits, yet the context-
 * independent entries are the same (kvs_gram_ind_key names the position
 * by its tier member) and so are the ~1,000 dependent tokens they leave
 * to the real stacks, mostly the ones that close the string and go on
 * into the stack below it.  Name a stack by (its key, the id of the
 * node below its top KVS_GRAM_CUT ones), and a state by the sorted
 * names of its frontier's stacks (its canonical state).  Two stacks of
 * one name differ only in positions at a tier's count (rep_low or more,
 * or above max_len + 1), one family each, over the same node below;
 * renaming each such frame to the other's member (kvs_gram_rep.c: the
 * argument that makes the entries exact; below the cut nothing is
 * renamed), their runs agree on every string shorter than the smaller
 * of the two counts, with the same intern calls and frontier sizes.
 * Without caps, the matcher accepts a token from a state iff it does
 * from one of its stacks (a frontier is the union of its stacks' runs).
 * So two states of one name, whose smallest tier counts are L and
 * L_now, take alike every token shorter than min(L, L_now): a kept
 * entry holds the dependents accepted among those shorter than its L,
 * and a later mask of the name takes them below min(L, L_now) and
 * checks the dependents of that many bytes or more (at 60 characters
 * left, the few tokens of 60 bytes or more).  Below the tiers (a
 * bounded string's last characters, each count a key of its own) a
 * counted position is named by its family's keyed member
 * (kvs_gram_ind_src) and its count bounds what the name's verdicts hold
 * the same way; a kept entry of a smaller count than a state's gives
 * way to that state's, which holds more.
 *
 * Caps.  A verdict is kept only from a check that met no cap, with the
 * largest frontier it saw (front) and the most kvs_gram_intern calls
 * along one token's path (nodes).  In another state of the same name
 * with k stacks, each level's frontier is the union of its stacks' runs,
 * each the renaming of that stack's run in the first state, whose levels
 * are subsets of the first run's: at most k * front stacks, and at most
 * k * nodes intern calls (so new nodes) along a path.  The verdicts are
 * taken only where those stay within the matcher's caps, so the check
 * there would meet none either on a byte the first run took (a byte it
 * refused is refused there too: alike without caps, and a cap only
 * refuses).
 *
 * Long tokens.  A low tier's entry leaves every long token (rep_low bytes
 * or more) to the real stacks, so near rep_low a mask whose kept
 * verdicts cover the tokens shorter than its count checked most of the
 * rest again.  There, where every low-tier stack's long tokens of that
 * many bytes or more can be classified at its own counts
 * (kvs_gram_long.c: taken, refused or dependent, as an entry's tokens
 * are), those take the place of the low-tier entries' long ones: the
 * taken ones are set and the dependent ones checked.  The filling check
 * takes them so only where every low-tier stack's key is a JSON
 * string's character, whose long tokens are classified by their
 * characters without a walk (kvs_gram_long_direct), and the caps are
 * far; else it checks them all on the real stacks: a walk from its
 * count (up to max_len characters left) meets every state of the
 * string's tail for the first time, and cost more than the check
 * (docs/grammar.md, "The mask", items 18 and 21).
 *
 * Invariants: an entry's below ids are alive and unchanged since it was
 * filled (kvs_gram_verdict_purge drops those the matcher truncated, as
 * the state cache's); the matcher is left as it was found.
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_grammar.h"
#include "grammar/kvs_gram_mask_impl.h"


struct kvs_gram_ventry_s {
    uint32_t  *key;                   /* [3 * n_key] sorted names */
    uint32_t   n_key;
    uint32_t   max_below;             /* the largest below id, or 0 */
    uint64_t   hash;
    uint32_t  *ids;                   /* the dependents accepted, of fewer
                                         than len bytes */
    uint32_t   n_ids, len;
    uint32_t   front, nodes;          /* what the filling check met */
};


/*
 * The dependent tokens in ranges (sorted token positions) whose length
 * is at least lo and below hi, checked on the real matcher in trie order
 * so that a shared prefix is fed once; those already set in bits are
 * skipped.  With rec, the accepted ones are appended to rec->ids and the
 * check's largest frontier and path intern calls kept (rec->ids has room
 * for every token of the ranges).  1 if it allowed one.
 */
int
kvs_gram_check_ranges(kvs_gram_masker_t *mk, const uint32_t *ranges,
    uint32_t n_ranges, uint32_t lo, uint32_t hi, uint32_t *bits,
    kvs_gram_vrec_t *rec)
{
    int                      any;
    uint32_t                 r, x, id, l, cur, lcp;
    uint64_t                 i0;
    const uint8_t           *t, *prev;
    kvs_gram_matcher_t      *m;
    const kvs_gram_vocab_t  *gv;

    m = mk->m;
    gv = mk->gv;
    cur = 0;
    prev = NULL;
    any = 0;

    for (r = 0; r < n_ranges; r++) {
        for (x = ranges[2 * r]; x < ranges[2 * r + 1]; x++) {
            /* by sorted position: the ranges' tokens lie side by side
             * (kvs_gram_vocab.c's layout) */
            id = (uint32_t) gv->ids[x];
            l = gv->x_off[x + 1] - gv->x_off[x];
            if (l < lo || l >= hi || bits[id >> 5] >> (id & 31) & 1
                || (mk->decided != NULL
                    && mk->decided[id >> 5] >> (id & 31) & 1))
            {
                continue;
            }

            t = gv->bytes + gv->x_off[x];

            for (lcp = 0; lcp < cur && lcp < l && prev[lcp] == t[lcp];
                 lcp++)
            {
                /* the part already fed */
            }

            kvs_gram_matcher_rollback(m, cur - lcp);
            cur = lcp;
            prev = t;

            while (cur < l) {
                i0 = m->interns;
                if (++mk->work.used > mk->work.limit
                    || kvs_gram_matcher_byte(m, t[cur], NULL) != KVS_OK)
                {
                    break;
                }
                mk->work.used += m->interns - i0;
                cur++;
                if (rec != NULL) {
                    /* path[d]: intern calls along the path's d bytes */
                    rec->path[cur] = rec->path[cur - 1]
                                     + (uint32_t) (m->interns - i0);
                    if (rec->path[cur] > rec->nodes) {
                        rec->nodes = rec->path[cur];
                    }
                    if (m->lv[m->n_lv - 1].n_front > rec->front) {
                        rec->front = m->lv[m->n_lv - 1].n_front;
                    }
                }
            }

            if (cur == l) {
                bits[id >> 5] |= 1u << (id & 31);
                any = 1;
                if (rec != NULL) {
                    rec->ids[rec->n_ids++] = id;
                }
            }

            mk->checked++;
        }
    }

    kvs_gram_matcher_rollback(m, cur);

    return any;
}


static void
kvs_gram_ventry_free(kvs_gram_ventry_t *v)
{
    free(v->key);
    free(v->ids);
    memset(v, 0, sizeof(kvs_gram_ventry_t));
}


int
kvs_gram_verdict_init(kvs_gram_masker_t *mk, uint32_t max_front)
{
    mk->cap_vc = KVS_GRAM_VERDICTS;
    mk->vc = calloc(mk->cap_vc, sizeof(kvs_gram_ventry_t));
    mk->vname = calloc((size_t) max_front + 1, 3 * sizeof(uint32_t));
    mk->vtop = calloc((size_t) max_front + 1, 3 * sizeof(uint32_t));

    return mk->vc != NULL && mk->vname != NULL && mk->vtop != NULL
           ? KVS_OK : KVS_ENOMEM;
}


void
kvs_gram_verdict_free(kvs_gram_masker_t *mk)
{
    uint32_t  i;

    for (i = 0; i < mk->n_vc; i++) {
        kvs_gram_ventry_free(&mk->vc[i]);
    }
    free(mk->vc);
    free(mk->vname);
    free(mk->vtop);
    mk->vc = NULL;
    mk->vname = NULL;
    mk->vtop = NULL;
    mk->n_vc = 0;
}


void
kvs_gram_verdict_purge(kvs_gram_masker_t *mk, uint32_t low_water)
{
    uint32_t  i;

    for (i = 0; i < mk->n_vc; ) {
        if (mk->vc[i].n_key > 0 && mk->vc[i].max_below >= low_water) {
            kvs_gram_ventry_free(&mk->vc[i]);
            mk->vc[i] = mk->vc[--mk->n_vc];
            memset(&mk->vc[mk->n_vc], 0, sizeof(kvs_gram_ventry_t));
            continue;
        }
        i++;
    }
}


static int
kvs_gram_name_cmp(const void *a, const void *b)
{
    const uint32_t  *x = a, *y = b;
    uint32_t         k;

    for (k = 0; k < 3; k++) {
        if (x[k] != y[k]) {
            return x[k] < y[k] ? -1 : 1;
        }
    }

    return 0;
}


/*
 * The long tokens of lo bytes or more that the mask's low-tier stacks
 * (mk->vtop) take, refuse or leave to the real stacks, classified at
 * their own counts (kvs_gram_long.c) into ls; 0 where none of the used
 * entries is a low tier's, or a stack's could not be classified (a cap,
 * no memory, the work bound; with direct, one whose key is not a JSON
 * string's character, kvs_gram_long_direct: no walk then): its long
 * tokens are then checked on the real stacks as any dependent one.
 */
static int
kvs_gram_verdict_long(kvs_gram_masker_t *mk, uint32_t n, uint32_t n_used,
    uint32_t lo, kvs_gram_lset_t *ls, int direct)
{
    uint32_t   i, j;
    kvs_err_t  err;

    if (mk->nolong || mk->gv->n_long == 0) {
        return 0;
    }
    for (j = 0; j < n_used && !mk->used[j]->low; j++) {
        /* a low tier's entry? */
    }
    if (j == n_used) {
        return 0;
    }

    memset(ls, 0, sizeof(kvs_gram_lset_t));
    if (lo > mk->gv->max_len) {
        return 1;                     /* no token that long */
    }
    for (i = 0; i < n; i++) {
        if (!mk->vtop[3 * i + 2]) {
            continue;
        }
        if (direct ? !kvs_gram_long_direct(mk, mk->vtop + 3 * i, lo, ls)
                   : kvs_gram_long_get(mk, mk->vtop + 3 * i, lo, ls, &err)
                     != KVS_OK)
        {
            return 0;
        }
    }

    return 1;
}


/* The used entries' dependent tokens of lo <= length < hi checked on
 * the real stacks; with lm, a low tier's entry's only below rep_low
 * (its long ones are the mask's long set's). */
static int
kvs_gram_verdict_ranges(kvs_gram_masker_t *mk, uint32_t n_used, int lm,
    uint32_t lo, uint32_t hi, uint32_t *bits, kvs_gram_vrec_t *rec)
{
    int              any;
    uint32_t         j, h, nr;
    const uint32_t  *rg;

    any = 0;
    for (j = 0; j < n_used; j++) {
        h = hi;
        if (lm && mk->used[j]->low && h > mk->gv->rep_low) {
            h = mk->gv->rep_low;
        }
        if (lo >= h) {
            continue;
        }
        kvs_gram_exit_rest(mk, mk->used[j], &rg, &nr);
        any |= kvs_gram_check_ranges(mk, rg, nr, lo, h, bits, rec);
    }

    return any;
}


/* The long set's dependent tokens of lo <= length < hi checked on the
 * real stacks. */
static int
kvs_gram_verdict_deps(kvs_gram_masker_t *mk, const kvs_gram_lset_t *ls,
    uint32_t lo, uint32_t hi, uint32_t *bits, kvs_gram_vrec_t *rec)
{
    uint32_t  n, r[2 * KVS_GRAM_LONG_MAX];

    n = kvs_gram_long_deps(mk, ls, r);

    return n > 0 ? kvs_gram_check_ranges(mk, r, n, lo, hi, bits, rec) : 0;
}


/*
 * The mask's dependent tokens through the verdict cache: mk->vname
 * holds the n stacks' names (key positions, below id), unsorted; the
 * tokens shorter than len come from the cache when this canonical state
 * is there and the caps allow (see the top), else they are checked (and
 * kept, if the state was not there); the longer ones are checked.  The
 * entries mk->used[0 .. n_used) must be uncapped.  1 if a token was
 * allowed, -1 out of memory (the caller checks as before; bits holds
 * only allowed tokens then).
 */
int
kvs_gram_verdict_check(kvs_gram_masker_t *mk, uint32_t n, uint32_t len,
    uint32_t n_used, uint32_t *bits)
{
    int                  any, lm, rc;
    uint32_t             i, j, nr, tot, maxb, use, id, *key, *key2;
    uint64_t             h, capped;
    const uint32_t      *rg;
    kvs_gram_ventry_t   *v, *old;
    kvs_gram_matcher_t  *m;
    kvs_gram_vrec_t      rec;
    kvs_gram_lset_t      ls;

    m = mk->m;
    key = mk->vname;
    qsort(key, n, 3 * sizeof(uint32_t), kvs_gram_name_cmp);

    h = 0xcbf29ce484222325ULL;
    maxb = 0;
    for (i = 0; i < 3 * n; i++) {
        h = (h ^ key[i]) * 0x100000001b3ULL;
        if (i % 3 == 2 && key[i] != KVS_GRAM_NIL && key[i] > maxb) {
            maxb = key[i];
        }
    }

    any = 0;
    old = NULL;

    for (i = 0; i < mk->n_vc; i++) {
        v = &mk->vc[i];
        if (v->hash != h || v->n_key != n
            || memcmp(v->key, key, (size_t) n * 3 * sizeof(uint32_t)) != 0)
        {
            continue;
        }
        if (len > v->len) {
            /* kept at a smaller count (a bounded string's last
             * characters): this state keeps more, in its place */
            old = v;
            break;
        }
        if ((uint64_t) n * v->front > m->lim.max_front
            || (uint64_t) m->n_nodes + (uint64_t) n * v->nodes
               > m->lim.max_nodes)
        {
            /* the caps might act: check them all, keep nothing new */
            for (j = 0; j < n_used; j++) {
                kvs_gram_ientry_ranges(mk->used[j], &rg, &nr);
                any |= kvs_gram_check_ranges(mk, rg, nr, 0, UINT32_MAX,
                                             bits, NULL);
            }
            return any;
        }

        /* both states take alike the tokens shorter than use */
        use = len < v->len ? len : v->len;
        for (j = 0; j < v->n_ids; j++) {
            id = v->ids[j];
            if (mk->gv->len[id] < use) {
                bits[id >> 5] |= 1u << (id & 31);
                any = 1;
            }
        }
        mk->verdict_hits++;

        /* the longer ones that close the string by their tails, as in
         * a fill (the checks below leave them out): in a bounded string
         * those were most of a kept state's checks (~700 of them on
         * Llama 3, ~35 us) */
        rc = kvs_gram_exit_check(mk, bits, NULL, 0);
        any |= rc > 0;
        mk->exits_kept += rc >= 0;

        /* the long tokens of use bytes or more: from their walks at the
         * stacks' own counts where those can be had */
        lm = kvs_gram_verdict_long(mk, n, n_used, use, &ls, 0);
        if (lm) {
            any |= kvs_gram_long_set(mk, &ls, bits);
            any |= kvs_gram_verdict_deps(mk, &ls, 0, UINT32_MAX, bits, NULL);
        }

        any |= kvs_gram_verdict_ranges(mk, n_used, lm, use, UINT32_MAX, bits,
                                       NULL);
        mk->decided = NULL;
        return any;
    }

    /* not kept: check, and keep if no cap was met */
    for (j = 0, tot = 0; j < n_used; j++) {
        kvs_gram_ientry_ranges(mk->used[j], &rg, &nr);
        for (i = 0; i < nr; i++) {
            tot += rg[2 * i + 1] - rg[2 * i];
        }
    }

    memset(&rec, 0, sizeof(rec));
    rec.ids = malloc(((size_t) tot + mk->gv->n_long
                      + kvs_gram_exits_tokens(mk->gv) + 1)
                     * sizeof(uint32_t));
    rec.path = calloc((size_t) mk->gv->max_len + 1, sizeof(uint32_t));
    if (rec.ids == NULL || rec.path == NULL) {
        free(rec.ids);
        free(rec.path);
        return -1;
    }

    capped = m->capped;

    /* a string's closing tokens by what follows their quote
     * (kvs_gram_exit.c): the checks below leave them out */
    any |= kvs_gram_exit_check(mk, bits, &rec, len) > 0;

    /* the low-tier stacks' long tokens by their characters, where each
     * such stack's key allows it and the caps are far enough that no
     * path of a long token meets them (kvs_gram_long_direct): in a JSON
     * string those were most of a fill's checks, each of up to max_len
     * bytes that every character makes new stacks for */
    lm = m->n_nodes + (uint64_t) n * KVS_GRAM_LONG_STEP * mk->gv->max_len
         <= m->lim.max_nodes
         && (uint64_t) n * KVS_GRAM_LONG_STEP <= m->lim.max_front
         && kvs_gram_verdict_long(mk, n, n_used, 0, &ls, 1);

    if (lm) {
        for (i = 0; i < mk->gv->n_long; i++) {
            id = (uint32_t) mk->gv->ids[mk->gv->long_x[i]];
            if ((ls.acc[i >> 5] >> (i & 31) & 1)
                && !(bits[id >> 5] >> (id & 31) & 1))
            {
                bits[id >> 5] |= 1u << (id & 31);
                any = 1;
                if (mk->gv->len[id] < len) {
                    rec.ids[rec.n_ids++] = id;
                }
            }
        }
        any |= kvs_gram_verdict_deps(mk, &ls, 0, len, bits, &rec);
        any |= kvs_gram_verdict_deps(mk, &ls, len, UINT32_MAX, bits, NULL);
        mk->fills_direct++;
    }

    any |= kvs_gram_verdict_ranges(mk, n_used, lm, 0, len, bits, &rec);
    any |= kvs_gram_verdict_ranges(mk, n_used, lm, len, UINT32_MAX, bits,
                                   NULL);
    free(rec.path);
    mk->decided = NULL;

    if (lm) {
        /* a later state of the name takes the kept ids where these
         * paths, too, could meet no cap */
        if (rec.nodes < KVS_GRAM_LONG_STEP * mk->gv->max_len) {
            rec.nodes = KVS_GRAM_LONG_STEP * mk->gv->max_len;
        }
        if (rec.front < KVS_GRAM_LONG_STEP) {
            rec.front = KVS_GRAM_LONG_STEP;
        }
    }

    key2 = m->capped == capped && mk->cap_vc > 0
           ? malloc((size_t) n * 3 * sizeof(uint32_t)) : NULL;
    if (key2 == NULL) {
        free(rec.ids);                /* a cap met, or no room to keep */
        return any;
    }

    if (old != NULL) {
        v = old;
        kvs_gram_ventry_free(v);
    } else if (mk->n_vc < mk->cap_vc) {
        v = &mk->vc[mk->n_vc++];
    } else {
        v = &mk->vc[mk->next_vc];
        mk->next_vc = (mk->next_vc + 1) % mk->cap_vc;
        kvs_gram_ventry_free(v);
    }

    v->key = key2;
    memcpy(v->key, key, (size_t) n * 3 * sizeof(uint32_t));
    v->n_key = n;
    v->hash = h;
    v->max_below = maxb;
    v->ids = rec.ids;
    v->n_ids = rec.n_ids;
    v->len = len;
    v->front = rec.front;
    v->nodes = rec.nodes;
    mk->verdict_fills++;

    return any;
}
