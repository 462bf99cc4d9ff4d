/*
 * kvs_gram_warm: a grammar's context-independent entries built ahead of
 * its first mask, at compile time, into the table its maskers share.
 *
 * A mask's cost is mostly its first meeting with a key (the top
 * KVS_GRAM_CUT positions of a stack): a key's entry is a walk of the
 * vocabulary trie (~20 us median on a 150K vocabulary), after which the
 * key is a lookup.  The keys a grammar can ever show are known from the
 * grammar alone: a stack's top is a byte range (or, when lazy, a
 * reference to a rule that cannot be empty) of some rule R, and the
 * node below is where R returns, the element after a reference to R
 * that is not its alternative's last (a reference that is, a tail call,
 * pushes nothing, so R returns where its caller returns), or nothing at
 * the root.  kvs_gram_masker_warm() first takes the keys of 64 sample
 * texts of the grammar (the structure every output passes through, and
 * the optional members and branches outputs take), then enumerates
 * those pairs, rules in breadth-first order from the root, the keys
 * with a bounded string's low counts after all others, and builds each
 * key's entry through kvs_gram_ind_get(), as a mask would, until a
 * work bound, a fill of the table, or the end of the keys.  Before all
 * that, a first pass over the same pairs lends
 * each one a vocabulary slice gives (kvs_gram_slice.c): no walk, and
 * slots of their own (kvs_gram_masker_init_table), at most `fill` of
 * them.
 *
 * A class run's source (kvs_gram_run.c: the entry of a run's largest
 * count, which every other count of the run is taken from) is a dear
 * key (~35k units: a walk of every token of the class's bytes) that
 * serves some thirty keys, one per character of the run; the share rule
 * would leave it to the first mask inside the run.  It (and the counts
 * taken from it, which would build it first) is built on an allowance
 * of its own, as large again as the bound, which the rest of the warm
 * does not spend.
 *
 * Its builds step the table's memo (kvs_gram_ind.c), which it leaves to
 * the masks: a request's first builds begin from the warm's states.
 *
 * kvs_gram_masker_warm_until() also bounds its time: no build begins
 * past it.  On a loaded host the same units take half as long again,
 * and the warm stalls the engine's step for its length; what it leaves
 * out the masks build, so only which keys were built depends on the
 * clock, never a mask.
 *
 * Invariants: the entries are exactly those a mask would build for the
 * same keys (the same kvs_gram_ind_get, on a masker of the grammar); a
 * key no parse reaches costs its walk and nothing else; the table is
 * never filled past `fill`, so the masks keep room for what the bound
 * left out; every array here is sized from the grammar, checked against
 * the caps below first, and freed before returning.
 */

#include <stdlib.h>
#include <string.h>

#include "base/kvs_clock.h"
#include "grammar/kvs_grammar.h"
#include "grammar/kvs_gram_mask_impl.h"


/* a grammar larger than this is not warmed (its keys are built by the
 * masks as they meet them, as before): the enumeration's arrays are
 * sized by it */
#define KVS_GRAM_WARM_MAX_ELEMS  (1u << 16)

/* one key's build may take at most this share of the bound: a dear key
 * (a pattern's class, ~1 ms) is left to the masks, the cheaper keys
 * after it are still built */
#define KVS_GRAM_WARM_SHARE      16

/* the pairs tried at most, whatever the work bound (new ones: a key
 * the table holds is not tried again); the sample texts stop at a
 * quarter of them, so the enumeration has its turn */
#define KVS_GRAM_WARM_MAX_KEYS   16384

/* the pairs looked up in the vocabulary's slices at most, before the
 * rest (a lookup that no slice's head matches costs ~0.3 us) */
#define KVS_GRAM_WARM_MAX_LOOKS  4096

/* the rules and edges the enumeration's returns may visit in all: a
 * rule's returns follow its tail callers, so a long chain of tail calls
 * would cost its length squared (~2 ms at this bound) */
#define KVS_GRAM_WARM_MAX_STEPS  (1u << 20)

/* a sample text stops where more stacks than this are open (anyOf
 * branches that begin alike: each byte would close them all) */
#define KVS_GRAM_WARM_FRONT      64

/* sample texts walked first, of at most this many bytes each (64
 * rather than 4 took weather_tool's and log_record's own p99 to
 * 0.59-0.81x and the largest warm from 3.6 to 4.7 ms: docs/grammar.md,
 * "A string's closing tokens decided by their tails") */
#define KVS_GRAM_WARM_WALKS      64
#define KVS_GRAM_WARM_BYTES      384


typedef struct {
    const kvs_gram_t  *g;
    uint32_t          *order;     /* [n_rules] reached rules, BFS order */
    uint32_t           n_order;
    uint32_t          *seen;      /* [n_rules] stamp */
    uint32_t           stamp;
    /* tail edges, by callee: tail[tail_at[r] .. tail_at[r + 1]) are the
     * rules whose alternatives end in a reference to r */
    uint32_t          *tail_at;   /* [n_rules + 1] */
    uint32_t          *tail;
    /* direct returns by callee, the same layout */
    uint32_t          *ret_at;    /* [n_rules + 1] */
    uint32_t          *ret;
    uint32_t          *stack;     /* [n_rules] */
    uint32_t          *rets;      /* [n_elems + 1] one rule's returns */
    uint32_t           n_rets;
    uint32_t          *rseen;     /* [n_elems + 1] stamp per return */
    uint64_t           steps;     /* rules and edges the returns visited */
} kvs_gram_warm_t;


/* One warm's bounds and what it did: mk shares t; the keys skipped as
 * dearer than their share, not tried again (each spent a share, so
 * there are at most KVS_GRAM_WARM_SHARE). */
typedef struct {
    kvs_gram_masker_t      *mk, *t;
    uint64_t                units, per_key;
    uint32_t                fill;
    kvs_gram_warm_stats_t   s;
    uint32_t                skip[KVS_GRAM_WARM_SHARE][KVS_GRAM_CUT];
    uint32_t                n_skip;
    uint64_t                run_left;     /* the runs' allowance left */
    uint64_t                until;        /* kvs_now_ns() bound, 0: none */
    int                     looks;        /* the first pass: slices only */
    uint32_t                n_looks;
} kvs_gram_warm_run_t;


static void
kvs_gram_warm_free(kvs_gram_warm_t *w)
{
    free(w->order);
    free(w->seen);
    free(w->tail_at);
    free(w->tail);
    free(w->ret_at);
    free(w->ret);
    free(w->stack);
    free(w->rets);
    free(w->rseen);
}


/* The reached rules in breadth-first order, and the call graph's edges
 * by callee (counted, then placed). */
static int
kvs_gram_warm_graph(kvs_gram_warm_t *w)
{
    uint32_t                 r, a, i, head, s, n_tail, n_ret;
    const kvs_gram_t        *g;
    const kvs_gram_elem_t   *e;

    g = w->g;

    w->order = malloc((size_t) g->n_rules * sizeof(uint32_t));
    w->seen = calloc(g->n_rules, sizeof(uint32_t));
    w->tail_at = calloc((size_t) g->n_rules + 1, sizeof(uint32_t));
    w->ret_at = calloc((size_t) g->n_rules + 1, sizeof(uint32_t));
    w->stack = malloc((size_t) g->n_rules * sizeof(uint32_t));
    w->rets = malloc(((size_t) g->n_elems + 1) * sizeof(uint32_t));
    w->rseen = calloc((size_t) g->n_elems + 1, sizeof(uint32_t));
    if (w->order == NULL || w->seen == NULL
        || w->tail_at == NULL || w->ret_at == NULL || w->stack == NULL
        || w->rets == NULL || w->rseen == NULL)
    {
        return KVS_ENOMEM;
    }

    /* count the edges */
    n_tail = n_ret = 0;
    for (r = 0; r < g->n_rules; r++) {
        for (a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
            for (i = g->alt_start[a]; ; i++) {
                e = &g->elems[i];
                if (e->kind == KVS_GRAM_END) {
                    break;
                }
                if (e->kind != KVS_GRAM_RULE) {
                    continue;
                }
                if (g->elems[i + 1].kind == KVS_GRAM_END) {
                    w->tail_at[e->rule + 1]++;
                    n_tail++;
                } else {
                    w->ret_at[e->rule + 1]++;
                    n_ret++;
                }
            }
        }
    }

    for (r = 0; r < g->n_rules; r++) {
        w->tail_at[r + 1] += w->tail_at[r];
        w->ret_at[r + 1] += w->ret_at[r];
    }

    w->tail = malloc(((size_t) n_tail + 1) * sizeof(uint32_t));
    w->ret = malloc(((size_t) n_ret + 1) * sizeof(uint32_t));
    if (w->tail == NULL || w->ret == NULL) {
        return KVS_ENOMEM;
    }

    /* place them: the tail edges first (stack[] counts what each
     * callee has so far), then the returns */
    memset(w->stack, 0, (size_t) g->n_rules * sizeof(uint32_t));
    for (r = 0; r < g->n_rules; r++) {
        for (a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
            for (i = g->alt_start[a]; g->elems[i].kind != KVS_GRAM_END; i++) {
                e = &g->elems[i];
                if (e->kind != KVS_GRAM_RULE) {
                    continue;
                }
                if (g->elems[i + 1].kind == KVS_GRAM_END) {
                    w->tail[w->tail_at[e->rule] + w->stack[e->rule]++] = r;
                }
            }
        }
    }

    memset(w->stack, 0, (size_t) g->n_rules * sizeof(uint32_t));
    for (r = 0; r < g->n_rules; r++) {
        for (a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
            for (i = g->alt_start[a]; g->elems[i].kind != KVS_GRAM_END; i++) {
                e = &g->elems[i];
                if (e->kind == KVS_GRAM_RULE
                    && g->elems[i + 1].kind != KVS_GRAM_END)
                {
                    w->ret[w->ret_at[e->rule] + w->stack[e->rule]++] = i + 1;
                }
            }
        }
    }

    /* the rules the root reaches, nearest first; an alternative that
     * derives no finite text is never entered */
    w->stamp = 1;
    w->order[0] = g->root;
    w->seen[g->root] = w->stamp;
    w->n_order = 1;

    for (head = 0; head < w->n_order; head++) {
        r = w->order[head];
        for (a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
            i = g->alt_start[a];
            if (g->elems[i].kind == KVS_GRAM_DEAD) {
                continue;
            }
            for ( /* void */ ; g->elems[i].kind != KVS_GRAM_END; i++) {
                if (g->elems[i].kind != KVS_GRAM_RULE) {
                    continue;
                }
                s = g->elems[i].rule;
                if (w->seen[s] != w->stamp) {
                    w->seen[s] = w->stamp;
                    w->order[w->n_order++] = s;
                }
            }
        }
    }

    return KVS_OK;
}


/* Where rule r can return to: the direct returns of every rule that
 * reaches r through tail calls only (r included), and NIL (index
 * n_elems in rseen) if the root is one of them. */
static void
kvs_gram_warm_rets(kvs_gram_warm_t *w, uint32_t r)
{
    uint32_t           sp, s, k, q, slot;
    const kvs_gram_t  *g;

    g = w->g;
    w->stamp++;
    w->n_rets = 0;
    sp = 0;
    w->stack[sp++] = r;
    w->seen[r] = w->stamp;

    while (sp > 0) {
        s = w->stack[--sp];
        w->steps += 1 + (w->ret_at[s + 1] - w->ret_at[s])
                    + (w->tail_at[s + 1] - w->tail_at[s]);

        if (s == g->root) {
            slot = g->n_elems;
            if (w->rseen[slot] != w->stamp) {
                w->rseen[slot] = w->stamp;
                w->rets[w->n_rets++] = KVS_GRAM_NIL;
            }
        }

        for (k = w->ret_at[s]; k < w->ret_at[s + 1]; k++) {
            q = w->ret[k];
            if (w->rseen[q] != w->stamp) {
                w->rseen[q] = w->stamp;
                w->rets[w->n_rets++] = q;
            }
        }

        for (k = w->tail_at[s]; k < w->tail_at[s + 1]; k++) {
            q = w->tail[k];
            if (w->seen[q] != w->stamp) {
                w->seen[q] = w->stamp;
                w->stack[sp++] = q;
            }
        }
    }
}


/* 1 if a stack's top can be element i: a byte range, or a reference the
 * lazy matcher keeps as a top until a byte of its FIRST set comes. */
static int
kvs_gram_warm_top(const kvs_gram_t *g, uint32_t i)
{
    const kvs_gram_elem_t  *e;

    e = &g->elems[i];

    return e->kind == KVS_GRAM_BYTES
           || (e->kind == KVS_GRAM_RULE && g->lazy && !g->nullable[e->rule]);
}


/* 1 if a position of the key is a count keyed by itself: above 0 and
 * under the vocabulary's tiers (kvs_gram_ind_key). */
static int
kvs_gram_warm_low(const kvs_gram_masker_t *mk, const uint32_t *key)
{
    uint32_t  k, c, all, lo;

    all = mk->gv->max_len + 1 > 2 ? mk->gv->max_len + 1 : 2;
    lo = mk->gv->rep_low;

    for (k = 0; k < KVS_GRAM_CUT; k++) {
        c = kvs_gram_rep_count(mk->m->g, key[k]);
        if (c > 0 && c <= all && (lo == 0 || c < lo)) {
            return 1;
        }
    }

    return 0;
}


/* One key's entry found or built in the table, its build bounded by a
 * share of the units and by what is left of them: KVS_OK (built, found,
 * or skipped as dearer than its share, which the masks build if a parse
 * meets it; a skipped key is not tried again), KVS_ETOOLONG when the
 * units are spent or the table holds `fill` built entries (in the first
 * pass: lent ones, no walk, no units). */
static int
kvs_gram_warm_key(kvs_gram_warm_run_t *wr, const uint32_t *key,
    kvs_err_t *err)
{
    int                  rc;
    uint32_t             i, ck[KVS_GRAM_CUT];
    uint64_t             before, left, used, spent;
    kvs_gram_masker_t   *mk;
    kvs_gram_ientry_t   *e;

    mk = wr->mk;

    if (wr->looks) {
        /* a lent slice costs no walk: no units, no share */
        if (wr->n_looks == KVS_GRAM_WARM_MAX_LOOKS
            || wr->t->n_lent >= wr->fill)
        {
            return KVS_ETOOLONG;
        }
        wr->n_looks++;
        wr->t->serial++;
        before = mk->ind_slices;
        rc = kvs_gram_ind_get_slice(mk, key, &e);
        wr->s.lent += mk->ind_slices != before;
        return rc == KVS_ENOTFOUND ? KVS_OK : rc;
    }

    if (wr->s.keys == KVS_GRAM_WARM_MAX_KEYS
        || wr->t->n_built >= wr->fill)
    {
        return KVS_ETOOLONG;
    }

    /* a key the table holds (a sample text meets its keys again and
     * again) is not one tried, nor one skipped; the slices are left to
     * kvs_gram_ind_get (a lookup is dear beside the table's: ~0.3 us) */
    (void) kvs_gram_ind_key(mk, key, ck);
    if (kvs_gram_ind_held(mk, ck) != NULL) {
        return KVS_OK;
    }

    for (i = 0; i < wr->n_skip; i++) {
        if (memcmp(wr->skip[i], ck, sizeof(ck)) == 0) {
            return KVS_OK;
        }
    }
    if (wr->until != 0 && kvs_now_ns() >= wr->until) {
        wr->s.late = 1;
        return KVS_ETOOLONG;
    }
    wr->s.keys++;

    /* a new mask for the table's eviction stamps: the entries built so
     * far are not this one's */
    wr->t->serial++;
    left = wr->units - mk->work.used;
    mk->work.limit = mk->work.used + (left < wr->per_key ? left
                                                         : wr->per_key);
    before = mk->ind_misses - mk->ind_slices;

    if (wr->run_left > 0 && kvs_gram_run_in(mk, ck)) {
        /* on the runs' allowance, not charged to the bound */
        used = mk->work.used;
        mk->work.limit = used + wr->run_left;
        rc = kvs_gram_ind_get(mk, key, &e, err);
        spent = mk->work.used - used;
        wr->run_left -= spent < wr->run_left ? spent : wr->run_left;
        wr->s.run_units += spent;
        mk->work.used = used;
        if (rc == KVS_OK) {
            wr->s.runs += mk->ind_misses - mk->ind_slices != before;
            wr->s.built += mk->ind_misses - mk->ind_slices != before;
            return KVS_OK;
        }
        if (rc != KVS_ETOOLONG) {
            return rc;
        }
        /* the allowance is spent: a key as any other, skipped below */
        mk->work.limit = used;
    } else {
        rc = kvs_gram_ind_get(mk, key, &e, err);
    }

    if (rc == KVS_ETOOLONG && mk->work.used < wr->units) {
        if (wr->n_skip < KVS_GRAM_WARM_SHARE) {
            memcpy(wr->skip[wr->n_skip++], ck, sizeof(ck));
        }
        wr->s.skipped++;
        mk->work.used = mk->work.limit;
        return KVS_OK;
    }
    if (rc != KVS_OK) {
        return rc;
    }

    wr->s.built += mk->ind_misses - mk->ind_slices != before;

    return KVS_OK;
}


/* The byte of the n-th bit set in next[4], counted from byte 0 (n under
 * the bits set): the sample texts' pick, without listing the bytes at
 * every step. */
static unsigned
kvs_gram_warm_nth(const uint64_t *next, unsigned n)
{
    unsigned  k, c;
    uint64_t  w;

    for (k = 0; k < 3; k++) {
        c = (unsigned) __builtin_popcountll(next[k]);
        if (n < c) {
            break;
        }
        n -= c;
    }

    for (w = next[k]; n > 0; n--) {
        w &= w - 1;
    }

    return k * 64 + (unsigned) __builtin_ctzll(w);
}


/*
 * One sample text of the grammar, a byte at a time from the bytes some
 * stack takes (one time in two a closing quote or bracket where one is
 * taken, so that strings and containers end), and the entries of the
 * keys its states show.  These are the structure every output passes
 * through (an object's keys, colons and separators, each branch's
 * start), which the enumeration may reach only after many keys no
 * output meets.  m is left at the empty text.
 */
static int
kvs_gram_warm_walk(kvs_gram_warm_run_t *wr, uint64_t *rng, kvs_err_t *err)
{
    int                      rc;
    unsigned                 b, n_set, n_close, pick;
    uint32_t                 i, n, id, key[KVS_GRAM_CUT];
    uint8_t                  close[3];
    kvs_gram_matcher_t      *m;
    const kvs_gram_level_t  *lv;
    static const uint8_t     closers[3] = { '"', '}', ']' };

    m = wr->mk->m;
    rc = KVS_OK;

    for (n = 0; n < KVS_GRAM_WARM_BYTES && rc == KVS_OK; n++) {
        lv = &m->lv[m->n_lv - 1];
        if (lv->n_front > KVS_GRAM_WARM_FRONT) {
            break;
        }

        for (i = 0; i < lv->n_front; i++) {
            id = m->front[lv->front + i];
            key[0] = m->nodes[id].pos;
            id = m->nodes[id].parent;
            key[1] = id != KVS_GRAM_NIL ? m->nodes[id].pos : KVS_GRAM_NIL;

            rc = kvs_gram_warm_key(wr, key, err);
            if (rc != KVS_OK) {
                break;
            }
            lv = &m->lv[m->n_lv - 1];
        }

        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;

        if (rc != KVS_OK
            || (kvs_gram_matcher_can_end(m) && (*rng >> 40) % 4 == 0))
        {
            break;
        }

        n_set = 0;
        for (b = 0; b < 4; b++) {
            n_set += (unsigned) __builtin_popcountll(lv->next[b]);
        }
        n_close = 0;
        for (b = 0; b < 3; b++) {
            if (lv->next[closers[b] >> 6] >> (closers[b] & 63) & 1) {
                close[n_close++] = closers[b];
            }
        }
        if (n_set == 0) {
            break;
        }

        pick = (unsigned) (*rng >> 33);
        b = n_close > 0 && pick % 2 == 0
            ? close[(pick >> 1) % n_close]
            : kvs_gram_warm_nth(lv->next, (pick >> 1) % n_set);

        if (kvs_gram_matcher_byte(m, (uint8_t) b, NULL) != KVS_OK) {
            break;                    /* a cap: this text ends here */
        }
    }

    kvs_gram_matcher_rollback(m, kvs_gram_matcher_len(m));

    return rc;
}


/* Every key the grammar can show, rules breadth-first from the root,
 * those of uncounted positions (and of counts keyed by a tier) first: a
 * bounded string's low counts are a key each, and a parse meets only
 * the few of them its own string's length passes. */
static int
kvs_gram_warm_enum(kvs_gram_warm_run_t *wr, kvs_gram_warm_t *w,
    kvs_err_t *err)
{
    int                rc, pass;
    uint32_t           o, r, a, i, k, key[KVS_GRAM_CUT];
    const kvs_gram_t  *g;

    g = w->g;
    rc = KVS_OK;

    for (pass = 0; pass < 2 && rc == KVS_OK; pass++) {
        for (o = 0; o < w->n_order && rc == KVS_OK; o++) {
            r = w->order[o];
            kvs_gram_warm_rets(w, r);
            if (w->steps > KVS_GRAM_WARM_MAX_STEPS) {
                rc = KVS_ETOOLONG;
                break;
            }

            for (a = g->rule_alt[r]; a < g->rule_alt[r + 1] && rc == KVS_OK;
                 a++)
            {
                i = g->alt_start[a];
                if (g->elems[i].kind == KVS_GRAM_DEAD) {
                    continue;
                }

                for ( /* void */ ; g->elems[i].kind != KVS_GRAM_END
                                   && rc == KVS_OK; i++)
                {
                    if (!kvs_gram_warm_top(g, i)) {
                        continue;
                    }

                    for (k = 0; k < w->n_rets && rc == KVS_OK; k++) {
                        key[0] = i;
                        key[1] = w->rets[k];
                        if (kvs_gram_warm_low(wr->mk, key) == pass) {
                            rc = kvs_gram_warm_key(wr, key, err);
                        }
                    }
                }
            }
        }
    }

    return rc;
}


int
kvs_gram_masker_warm(kvs_gram_masker_t *t, const kvs_gram_t *g,
    const kvs_gram_mlimits_t *lim, uint64_t units, uint32_t fill,
    kvs_gram_warm_stats_t *st, kvs_err_t *err)
{
    return kvs_gram_masker_warm_until(t, g, lim, units, 0, fill, st, err);
}


int
kvs_gram_masker_warm_until(kvs_gram_masker_t *t, const kvs_gram_t *g,
    const kvs_gram_mlimits_t *lim, uint64_t units, uint64_t ns,
    uint32_t fill, kvs_gram_warm_stats_t *st, kvs_err_t *err)
{
    int                   rc;
    uint32_t              n;
    uint64_t              rng;
    kvs_gram_warm_t       w;
    kvs_gram_matcher_t    m;
    kvs_gram_masker_t     mk;
    kvs_gram_warm_run_t   wr;

    memset(&wr, 0, sizeof(wr));
    wr.until = ns != 0 ? kvs_now_ns() + ns : 0;
    if (st != NULL) {
        *st = wr.s;
    }

    if (!g->finished || g->n_elems > KVS_GRAM_WARM_MAX_ELEMS
        || t->ind_owner != NULL || t->ind == NULL)
    {
        return KVS_OK;                /* nothing warmed: masks build */
    }

    memset(&w, 0, sizeof(w));
    w.g = g;

    rc = kvs_gram_warm_graph(&w);
    if (rc != KVS_OK) {
        kvs_gram_warm_free(&w);
        return kvs_err_set(err, rc, "grammar warm: no memory");
    }

    rc = kvs_gram_matcher_init(&m, g, lim, err);
    if (rc != KVS_OK) {
        kvs_gram_warm_free(&w);
        return rc;
    }

    rc = kvs_gram_masker_init(&mk, t->gv, &m, 1, err);
    if (rc != KVS_OK) {
        kvs_gram_matcher_free(&m);
        kvs_gram_warm_free(&w);
        return rc;
    }

    kvs_gram_masker_share(&mk, t);
    mk.work.used = 0;

    wr.mk = &mk;
    wr.t = t;
    wr.units = units != 0 ? units : UINT64_MAX / 2;
    wr.per_key = wr.units / KVS_GRAM_WARM_SHARE > 0
                 ? wr.units / KVS_GRAM_WARM_SHARE : 1;
    wr.fill = fill < t->cap_built ? fill : t->cap_built;
    wr.run_left = wr.units;

    /* every key a vocabulary slice gives, lent: no walk, no units, and
     * slots of their own (after a backslash in a string, 15 keys at
     * once); a bound met ends this pass alone */
    if (t->gv->slices != NULL && kvs_gram_vocab_n_slices(t->gv) > 0) {
        wr.looks = 1;
        rc = kvs_gram_warm_enum(&wr, &w, err);
        wr.looks = 0;
        w.steps = 0;
        if (rc == KVS_ETOOLONG) {
            rc = KVS_OK;
        }
    }

    /* sample texts first: the structure every output passes through;
     * the seed is the grammar's, so a warm is the same every time */
    rng = 0x9E3779B97F4A7C15ULL ^ g->n_elems;
    for (n = 0; n < KVS_GRAM_WARM_WALKS && rc == KVS_OK
                && wr.s.keys < KVS_GRAM_WARM_MAX_KEYS / 4; n++)
    {
        rc = kvs_gram_warm_walk(&wr, &rng, err);
    }

    if (rc == KVS_OK) {
        rc = kvs_gram_warm_enum(&wr, &w, err);
    }

    wr.s.units = mk.work.used;
    wr.s.entries = t->n_ind;
    wr.s.done = rc == KVS_OK;
    wr.s.slices = mk.ind_slices;

    kvs_gram_masker_free(&mk);
    kvs_gram_matcher_free(&m);
    kvs_gram_warm_free(&w);

    if (st != NULL) {
        *st = wr.s;
    }

    /* a bound met is not a failure: the masks build the rest */
    return rc == KVS_ETOOLONG ? KVS_OK : rc;
}
