/*
 * kvs_gram_mask: the token mask, from a vocabulary trie and a matcher.
 *
 * Owns kvs_gram_masker_t (per matcher: the mask and a cache of masks
 * keyed by matcher state) and the mask itself: the plain walk, or the
 * union of the frontier's context-independent entries and the dependent
 * tokens the real stacks take.  The entries and their table are
 * kvs_gram_ind.c's (shared through kvs_gram_mask_impl.h); the
 * vocabulary and its trie are kvs_gram_vocab.c's.
 *
 * The mask is a depth-first walk of the trie with the matcher: a node's
 * byte is tried on the state its parent left (a rollback to that depth,
 * then one byte), so a prefix that many tokens share is checked once,
 * and a refused byte skips its whole subtree.  A byte that no stack can
 * take is refused from the level's next-byte set without touching the
 * stacks.  END tokens are allowed exactly when the grammar is complete
 * here; REFUSED tokens never.
 *
 * The union reads an entry's list of nonzero words where it keeps one
 * (kvs_gram_ind.c's seal) rather than its whole bits; a mask that was
 * such a union alone, at most one entry read whole, is not kept in the
 * state cache (making it again costs no more than the copy).
 *
 * The cache: the matcher hash-conses its stacks, so a state that recurs
 * (inside a string, between list items) has the same frontier ids; the
 * key is the sorted frontier plus the accept flag.  Ids die only when the
 * matcher truncates its node pool below them, which it reports through
 * low_water; an entry with an id at or above that mark is dropped before
 * it could be looked up.
 *
 * Both trie walks (the plain mask and a context-independent entry's)
 * step through the masker's transition memo (kvs_gram_memo.c), which
 * feeds the matcher only for a (state, byte) the walk has not met yet.
 *
 * A mask's dependent tokens (those its entries leave to the real
 * stacks) are checked one by one on the matcher, or, from
 * KVS_GRAM_CHECK_MEMO_MIN of them, in one walk of their merged ranges
 * through the masker's check memo (cmemo, kvs_gram_ind_check_all),
 * whose verdicts are the matcher's; in a state with a counted position
 * at a tier's count, the verdicts of the shorter ones are kept per
 * canonical state (kvs_gram_verdict.c).
 *
 * Invariants: the matcher is left in the state it was given (every
 * speculative byte rolled back); bits has exactly n_tokens meaningful
 * bits, the rest zero.
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_grammar.h"
#include "grammar/kvs_gram_mask_impl.h"


struct kvs_gram_centry_s {
    uint32_t  *key;                   /* sorted frontier ids */
    uint32_t   n_key;
    uint32_t   accept;
    uint32_t   max_id;
    uint64_t   hash;
    uint32_t  *bits;                  /* [words] */
};


/* ---- the masker -------------------------------------------------------- */

int
kvs_gram_masker_init(kvs_gram_masker_t *mk, const kvs_gram_vocab_t *gv,
    kvs_gram_matcher_t *m, uint32_t cache_entries, kvs_err_t *err)
{
    memset(mk, 0, sizeof(kvs_gram_masker_t));
    mk->gv = gv;
    mk->m = m;
    mk->words = (gv->n_tokens + 31) / 32;
    mk->cap_cache = cache_entries;
    mk->work.limit = UINT64_MAX;

    if (kvs_gram_memo_new(&mk->memo, KVS_GRAM_MEMO_STATES, gv->max_len, err)
        != KVS_OK)
    {
        return KVS_ENOMEM;
    }

    kvs_gram_memo_work(mk->memo, &mk->work);

    if (cache_entries > 0) {
        /* a state has up to max_front stacks, each its own entry */
        mk->cap_ind = cache_entries * 8;
        mk->cap_built = mk->cap_ind;
        mk->cache = calloc(cache_entries, sizeof(kvs_gram_centry_t));
        mk->ind = calloc(mk->cap_ind, sizeof(kvs_gram_ientry_t));
        mk->used = calloc(m->lim.max_front + 1, sizeof(kvs_gram_ientry_t *));
        mk->kbuf = calloc(m->lim.max_front + 1, sizeof(uint32_t));
        if (mk->cache == NULL || mk->ind == NULL || mk->used == NULL
            || mk->kbuf == NULL
            || kvs_gram_ind_index(mk) != KVS_OK
            || kvs_gram_verdict_init(mk, m->lim.max_front) != KVS_OK)
        {
            free(mk->cache);
            free(mk->ind);
            free(mk->used);
            free(mk->kbuf);
            free(mk->islot);
            kvs_gram_verdict_free(mk);
            kvs_gram_memo_free(mk->memo);
            return kvs_err_set(err, KVS_ENOMEM, "masker: no memory");
        }
    }

    m->low_water = UINT32_MAX;

    return KVS_OK;
}


int
kvs_gram_masker_init_table(kvs_gram_masker_t *t, const kvs_gram_vocab_t *gv,
    uint32_t entries, kvs_err_t *err)
{
    memset(t, 0, sizeof(kvs_gram_masker_t));
    t->gv = gv;
    t->words = (gv->n_tokens + 31) / 32;
    /* lent entries hold no bits of their own: as many slots again for
     * them, so that a grammar's slices do not crowd out its builds */
    t->cap_built = entries > 0 ? entries : 1;
    t->cap_ind = 2 * t->cap_built;
    t->ind = calloc(t->cap_ind, sizeof(kvs_gram_ientry_t));

    if (t->ind == NULL || kvs_gram_ind_index(t) != KVS_OK) {
        free(t->ind);
        t->ind = NULL;
        return kvs_err_set(err, KVS_ENOMEM, "masker: no memory");
    }

    /* the builds' memo, every sharing masker's (its tables made at the
     * first build) */
    if (kvs_gram_memo_new(&t->memo, KVS_GRAM_TABLE_MEMO_STATES, gv->max_len,
                          err)
        != KVS_OK)
    {
        kvs_gram_masker_free(t);
        return KVS_ENOMEM;
    }

    return KVS_OK;
}


void
kvs_gram_masker_share(kvs_gram_masker_t *mk, kvs_gram_masker_t *t)
{
    uint32_t  i;

    for (i = 0; i < mk->n_ind; i++) {
        kvs_gram_ind_free(&mk->ind[i]);
    }

    kvs_gram_ind_unindex_all(mk);
    mk->n_ind = 0;
    mk->n_built = 0;
    mk->n_lent = 0;
    mk->ind_owner = t;
}


void
kvs_gram_masker_free(kvs_gram_masker_t *mk)
{
    uint32_t  i;

    for (i = 0; i < mk->n_cache; i++) {
        free(mk->cache[i].key);
        free(mk->cache[i].bits);
    }

    for (i = 0; i < mk->n_ind; i++) {
        kvs_gram_ind_free(&mk->ind[i]);
    }

    free(mk->cache);
    free(mk->ind);
    free(mk->islot);
    free(mk->used);
    free(mk->kbuf);
    kvs_gram_verdict_free(mk);
    free(mk->lc);
    kvs_gram_run_free(mk);
    free(mk->mr);
    free(mk->shbuf);
    free(mk->xacc);
    free(mk->xpath);
    kvs_gram_memo_free(mk->memo);
    kvs_gram_memo_free(mk->cmemo);
    memset(mk, 0, sizeof(kvs_gram_masker_t));
}


int
kvs_gram_masker_memo(kvs_gram_masker_t *mk, uint32_t max_states,
    kvs_err_t *err)
{
    int               rc;
    kvs_gram_memo_t  *mo;

    rc = kvs_gram_memo_new(&mo, max_states, mk->gv->max_len, err);
    if (rc != KVS_OK) {
        return rc;
    }

    kvs_gram_memo_free(mk->memo);
    mk->memo = mo;
    kvs_gram_memo_work(mo, &mk->work);

    /* no memo: the checks too token by token */
    mk->nocheckmemo = max_states == 0;

    return KVS_OK;
}


static int
kvs_gram_u32_cmp(const void *a, const void *b)
{
    uint32_t  x = *(const uint32_t *) a, y = *(const uint32_t *) b;

    return x < y ? -1 : x > y;
}


/* The walk itself: bits cleared and filled.  The memo feeds the matcher
 * (kvs_gram_memo.c); without one it is a byte step per trie node. */
static int
kvs_gram_mask_walk(kvs_gram_masker_t *mk, uint32_t *bits)
{
    uint32_t                   k, w, id;
    const kvs_gram_vocab_t    *gv;

    gv = mk->gv;

    memset(bits, 0, (size_t) mk->words * sizeof(uint32_t));

    (void) kvs_gram_memo_walk(mk->memo, mk->m, gv, bits, NULL, NULL, NULL);

    if (kvs_gram_matcher_can_end(mk->m)) {
        for (k = 0; k < gv->n_end; k++) {
            id = (uint32_t) gv->ids[gv->n_text + k];
            bits[id >> 5] |= 1u << (id & 31);
        }
    }

    for (w = 0; w < mk->words && bits[w] == 0; w++) {
        /* void */
    }

    return w < mk->words ? KVS_OK : KVS_EFORMAT;
}


/* The union of the entries mk->used[0 .. n_used) into bits: the first
 * whole one copied, the other whole ones OR-ed (a pass over the bits
 * each), then the sparse ones' listed words OR-ed in. */
static void
kvs_gram_mask_union(kvs_gram_masker_t *mk, uint32_t n_used, uint32_t *bits)
{
    uint32_t                  j, w, first;
    const uint32_t           *q;
    const kvs_gram_ientry_t  *e;

    first = 1;
    mk->cheap = 1;
    for (j = 0; j < n_used; j++) {
        e = mk->used[j];
        if (e->sparse != NULL) {
            continue;
        }
        if (first) {
            memcpy(bits, e->bits, (size_t) mk->words * sizeof(uint32_t));
            first = 0;
            continue;
        }
        for (w = 0; w < mk->words; w++) {
            bits[w] |= e->bits[w];
        }
        mk->cheap = 0;
    }

    if (first) {
        memset(bits, 0, (size_t) mk->words * sizeof(uint32_t));
    }

    for (j = 0; j < n_used; j++) {
        e = mk->used[j];
        if (e->sparse == NULL) {
            continue;
        }
        q = e->sparse;
        for (w = 0; w < e->n_sparse; w++) {
            bits[q[2 * w]] |= q[2 * w + 1];
        }
    }
}


/*
 * The mask through the context-independent entries: a token is allowed
 * iff some stack allows it, so the mask is the union over the frontier's
 * stacks of each one's accepted tokens, plus those of its dependent ones
 * that the real stacks take.
 */
static int
kvs_gram_mask_ind(kvs_gram_masker_t *mk, uint32_t *bits, kvs_err_t *err)
{
    int                      rc, any;
    uint32_t                 i, j, k, id, n_used, t[KVS_GRAM_CUT];
    uint32_t                 src[KVS_GRAM_CUT];
    uint32_t                 n_front, len, c, all, capped, *nm, nr;
    const uint32_t          *rg;
    kvs_gram_ientry_t       *e;
    const kvs_gram_matcher_t  *m;
    const kvs_gram_level_t  *lv;

    m = mk->m;
    lv = &m->lv[m->n_lv - 1];
    n_used = 0;
    any = 0;
    (mk->ind_owner != NULL ? mk->ind_owner : mk)->serial++;

    n_front = lv->n_front;
    len = UINT32_MAX;
    all = mk->gv->max_len + 1 > 2 ? mk->gv->max_len + 1 : 2;
    capped = 0;

    for (i = 0; i < n_front; i++) {
        id = m->front[lv->front + i];
        for (k = 0; k < KVS_GRAM_CUT; k++) {
            t[k] = id != KVS_GRAM_NIL ? m->nodes[id].pos : KVS_GRAM_NIL;
            id = id != KVS_GRAM_NIL ? m->nodes[id].parent : KVS_GRAM_NIL;
        }

        /* the stack's name (kvs_gram_verdict.c): its key and the node
         * below the cut; len the smallest count of a position that the
         * key may rename (a tier's); a count below its family's keyed
         * one (a bounded string's last characters, each a key of its
         * own) is named by that member too, and bounds len alike */
        nm = mk->vname + 3 * (size_t) i;
        mk->vtop[3 * (size_t) i] = t[0];
        mk->vtop[3 * (size_t) i + 1] = t[1];
        mk->vtop[3 * (size_t) i + 2] = (uint32_t) kvs_gram_ind_key(mk, t, nm);
        c = kvs_gram_ind_src(mk, nm, mk->gv->rep_low != 0
                                     ? mk->gv->rep_low : all, src);
        if (c > 0) {
            nm[0] = src[0];
            nm[1] = src[1];
            if (c < len) {
                len = c;
            }
        }
        nm[2] = id;
        for (k = 0; k < KVS_GRAM_CUT; k++) {
            c = kvs_gram_rep_count(m->g, t[k]);
            if ((c > all || (mk->gv->rep_low != 0 && c >= mk->gv->rep_low))
                && c < len)
            {
                len = c;
            }
        }

        rc = kvs_gram_ind_get(mk, t, &e, err);
        if (rc == KVS_ETOOLONG && kvs_gram_work_over(&mk->work)) {
            return rc;
        }
        if (rc == KVS_ETOOLONG) {
            return kvs_gram_mask_walk(mk, bits);
        }
        if (rc != KVS_OK) {
            return rc;
        }

        /* stacks that differ only below the cut share an entry */
        for (j = 0; j < n_used && mk->used[j] != e; j++) {
            /* seen already? */
        }
        if (j < n_used) {
            continue;
        }
        mk->used[n_used++] = e;
        any |= (int) e->some;
        capped |= e->capped;
    }

    kvs_gram_mask_union(mk, n_used, bits);

    /* m->lv may move while checking: lv is not used below */
    rc = -1;
    for (j = 0; j < n_used && mk->used[j]->n_ranges == 0; j++) {
        /* any to check? */
    }
    /* a position at a tier's count: the verdicts of the tokens shorter
     * than len may be kept (the entries' bits, and so what is checked,
     * are their keys' alone, unless a build met a cap) */
    if (j < n_used) {
        mk->cheap = 0;
    }
    if (j < n_used && len != UINT32_MAX && !capped && !mk->noverdicts) {
        rc = kvs_gram_verdict_check(mk, n_front, len, n_used, bits);
        any |= rc > 0;
    }
    /* inside a free string: its closing tokens by their tails, the
     * rest checked token by token without them */
    if (j < n_used && len == UINT32_MAX && !capped) {
        rc = kvs_gram_exit_check(mk, bits, NULL, 0);
        any |= rc > 0;
    }
    if (j < n_used && rc < 0 && !mk->nocheckmemo) {
        rc = kvs_gram_ind_check_all(mk, n_used, bits, err);
        any |= rc > 0;
    }
    for (j = 0; j < n_used && (rc < 0 || mk->decided != NULL); j++) {
        kvs_gram_exit_rest(mk, mk->used[j], &rg, &nr);
        if (nr > 0) {
            any |= kvs_gram_check_ranges(mk, rg, nr, 0, UINT32_MAX, bits,
                                         NULL);
        }
    }
    mk->decided = NULL;

    if (kvs_gram_matcher_can_end(mk->m)) {
        for (k = 0; k < mk->gv->n_end; k++) {
            id = (uint32_t) mk->gv->ids[mk->gv->n_text + k];
            bits[id >> 5] |= 1u << (id & 31);
            any = 1;
        }
    }

    return any ? KVS_OK : KVS_EFORMAT;
}


int
kvs_gram_mask(kvs_gram_masker_t *mk, uint32_t *bits, kvs_err_t *err)
{
    int                      rc;
    uint32_t                 i, j, n, id, *key, max_id, accept;
    uint64_t                 h;
    kvs_gram_matcher_t      *m;
    kvs_gram_centry_t       *e;
    const kvs_gram_level_t  *lv;

    m = mk->m;
    lv = &m->lv[m->n_lv - 1];
    n = lv->n_front;
    accept = lv->accept;            /* the walk may move m->lv */
    mk->work.used = 0;              /* a cached mask costs nothing */

    if (mk->cap_cache == 0) {
        rc = kvs_gram_mask_walk(mk, bits);
        m->low_water = UINT32_MAX;
        goto done;
    }

    /* drop entries whose ids the matcher has freed (and may reuse) */
    for (i = 0; i < mk->n_cache; ) {
        if (mk->cache[i].max_id >= m->low_water) {
            free(mk->cache[i].key);
            free(mk->cache[i].bits);
            mk->cache[i] = mk->cache[--mk->n_cache];
            continue;
        }
        i++;
    }
    kvs_gram_verdict_purge(mk, m->low_water);
    m->low_water = UINT32_MAX;

    /* the key in the masker's scratch (a frontier is most often a few
     * stacks: insertion sort then); copied out only if the mask is
     * kept */
    key = mk->kbuf;
    if (n > 16) {
        memcpy(key, m->front + lv->front, (size_t) n * sizeof(uint32_t));
        qsort(key, n, sizeof(uint32_t), kvs_gram_u32_cmp);
    }
    for (i = 0; n <= 16 && i < n; i++) {
        id = m->front[lv->front + i];
        for (j = i; j > 0 && key[j - 1] > id; j--) {
            key[j] = key[j - 1];
        }
        key[j] = id;
    }

    h = 0xcbf29ce484222325ULL ^ accept;
    max_id = 0;
    for (i = 0; i < n; i++) {
        h = (h ^ key[i]) * 0x100000001b3ULL;
        if (key[i] > max_id) {
            max_id = key[i];
        }
    }

    for (i = 0; i < mk->n_cache; i++) {
        e = &mk->cache[i];
        if (e->hash == h && e->n_key == n && e->accept == accept
            && memcmp(e->key, key, (size_t) n * sizeof(uint32_t)) == 0)
        {
            memcpy(bits, e->bits, (size_t) mk->words * sizeof(uint32_t));
            mk->hits++;
            return KVS_OK;
        }
    }

    mk->misses++;
    mk->cheap = 0;
    rc = kvs_gram_mask_ind(mk, bits, err);
    if (kvs_gram_work_over(&mk->work)) {
        goto done;
    }
    if (rc != KVS_OK && rc != KVS_EFORMAT) {
        return rc;
    }
    /* the walk's own truncations are above every id in a key */
    m->low_water = UINT32_MAX;

    mk->unkept += rc == KVS_OK && mk->cheap && !mk->keepall;
    if (rc == KVS_OK && (!mk->cheap || mk->keepall)) {
        key = malloc(((size_t) n + 1) * sizeof(uint32_t));
        if (key == NULL) {
            /* no room to remember it: the mask itself is right */
            goto done;
        }
        memcpy(key, mk->kbuf, (size_t) n * sizeof(uint32_t));

        if (mk->n_cache < mk->cap_cache) {
            uint32_t  *eb;

            eb = malloc((size_t) mk->words * sizeof(uint32_t));
            if (eb == NULL) {
                free(key);
                goto done;
            }
            e = &mk->cache[mk->n_cache++];
            e->bits = eb;
        } else {
            e = &mk->cache[mk->next_evict];
            mk->next_evict = (mk->next_evict + 1) % mk->cap_cache;
            free(e->key);
        }

        e->key = key;
        e->n_key = n;
        e->accept = accept;
        e->max_id = max_id;
        e->hash = h;
        memcpy(e->bits, bits, (size_t) mk->words * sizeof(uint32_t));
    }

done:

    if (mk->work.used > mk->work_max) {
        mk->work_max = mk->work.used;
    }

    if (kvs_gram_work_over(&mk->work)) {
        /* what the cut walk left is not to be trusted: the verdicts it
         * filled go (the entries went as they were built) */
        kvs_gram_verdict_purge(mk, 0);
        m->low_water = UINT32_MAX;
        return kvs_err_set(err, KVS_ETOOLONG, "masker: one mask took more "
                           "than %llu units of work",
                           (unsigned long long) mk->work.limit);
    }

    if (rc != KVS_OK) {
        return kvs_err_set(err, KVS_EFORMAT,
                           "no token of the vocabulary can continue the "
                           "output here");
    }

    return KVS_OK;
}


void
kvs_gram_masker_budget(kvs_gram_masker_t *mk, uint64_t units)
{
    mk->work.limit = units != 0 ? units : UINT64_MAX;
}


uint64_t
kvs_gram_work_budget(const kvs_gram_vocab_t *gv)
{
    return (uint64_t) KVS_GRAM_WORK_WALKS
           * (gv->n_nodes > KVS_GRAM_WORK_MIN_NODES ? gv->n_nodes
                                                    : KVS_GRAM_WORK_MIN_NODES);
}
