/*
 * kvs_gram_rep: which positions of an unrolled counted repetition no
 * token can tell apart.
 *
 * Owns kvs_gram_t's unrolls (noted by kvs_gram_repeat while building)
 * and, after kvs_gram_finish, rep_c, rep_f and rfam: per position the
 * copies of x it can still start and its family.  Invariants: an
 * unroll is indexed only if its x derives no empty text, the nullable
 * sets settled (lazy), and its layout is checked element by element;
 * every family member kvs_gram_rep_at() names for a count between 2 and
 * the position's own (exclusive) exists and has that count.
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_grammar.h"


/*
 * kvs_gram_repeat() writes x{min,max} as
 *
 *     R   = x (sep x){min - 1} T_e    (min > 0)     R = "" | x T_e  (min 0)
 *     T_j = "" | sep x T_{j-1}        (j = 1 .. e)  T_0 = ""
 *
 * (e = max - max(min, 1) optional copies), so every copy is a distinct
 * position and a mask keyed by positions (kvs_gram_ind.c's context-
 * independent entries) would see a new key at every character of a
 * bounded string.  Here each position of R and of the T_j gets a count
 * c, the copies of x it can still start before the structure changes:
 * j in T_j's copy; e + 1 in R's own alternative when min is 0, and in R's
 * last mandatory copy and its final reference to T_e (their suffixes are
 * those of a T_{e+1}); min - i + 1 in the mandatory copy i < min, and a
 * family per offset in a copy (tail copies, mandatory copies), whose
 * members sit at a fixed element stride.
 *
 * Why two members p (count c) and p' (count c' < c) of one family take
 * the same tokens of fewer than c' bytes, exactly: rename, in a matcher
 * run started from a stack holding p, every position of p's frame (the
 * frame that executes R's or the T_j's alternatives, and only that
 * frame) to the member c - c' copies further on; this is the run started
 * from p' as long as that run has not met the end of its family (T_0, or
 * the reference to T_e after the mandatory copies), where the two
 * structures differ (T_0 has no copy; in the longer one another copy
 * is still offered).  Meeting it takes c' complete copies of x, each at
 * least one byte since x derives no empty text (kvs_gram_rep_index only
 * counts such x; with an empty x the runs need not be the same size);
 * a stack top is a byte range or a lazy non-empty rule, so even a
 * frame in the middle of x (p a return node) needs a byte to get back.
 * So for n < c' bytes both runs have the same stacks but for the
 * renaming, the same `sent` flags, the same frontier and node counts
 * (the caps act alike), and every classification of a trie walk from
 * them (taken, refused, reached the sentinel) of a token of at most n
 * bytes is the same.  Frames pushed later (x, or a fresh R inside x)
 * are not renamed and are the same in both; a cut stack's two positions
 * may lie in two families (nested counts, ((ab){2,5}){3,40}: the inner
 * copy on top, the outer one as its return node), each renamed on its
 * own frame; what lies below the cut (the sentinel)
 * is untouched, and the tokens that reach it are checked on the real
 * stacks as before.  A free count (max unbounded) needs none of this:
 * it is one position already.
 */
int
kvs_gram_rep_note(kvs_gram_t *g, uint32_t x, uint32_t s, uint32_t t1,
    uint32_t extra, uint32_t ralt, uint32_t min, kvs_err_t *err)
{
    uint32_t            c;
    kvs_gram_unroll_t  *u;

    if (g->n_unrolls == g->cap_unrolls) {
        c = g->cap_unrolls ? g->cap_unrolls * 2 : 16;
        u = realloc(g->unrolls, (size_t) c * sizeof(kvs_gram_unroll_t));
        if (u == NULL) {
            return kvs_err_set(err, KVS_ENOMEM, "grammar: out of memory");
        }
        g->unrolls = u;
        g->cap_unrolls = c;
    }

    u = &g->unrolls[g->n_unrolls++];
    u->x = x;
    u->s = s;
    u->t1 = t1;
    u->extra = extra;
    u->ralt = ralt;
    u->min = min;

    return KVS_OK;
}


static int
kvs_gram_rep_is(const kvs_gram_t *g, uint64_t pos, uint8_t kind,
    uint32_t rule)
{
    return pos < g->n_elems && g->elems[pos].kind == kind
           && (kind != KVS_GRAM_RULE || g->elems[pos].rule == rule);
}


/* The layout kvs_gram_repeat wrote, checked element by element (so that
 * a change there cannot make this index name the wrong positions). */
static int
kvs_gram_rep_layout(const kvs_gram_t *g, const kvs_gram_unroll_t *u)
{
    uint32_t  j, i, st;
    uint64_t  b;

    st = u->s + 4;

    for (j = 1; j <= u->extra; j++) {
        b = u->t1 + (uint64_t) (j - 1) * st;
        if (!kvs_gram_rep_is(g, b - 1, KVS_GRAM_END, 0)
            || !kvs_gram_rep_is(g, b + u->s, KVS_GRAM_RULE, u->x)
            || !(b + u->s + 1 < g->n_elems
                 && g->elems[b + u->s + 1].kind == KVS_GRAM_RULE)
            || !kvs_gram_rep_is(g, b + u->s + 2, KVS_GRAM_END, 0))
        {
            return 0;
        }
    }

    if (u->min == 0) {
        return u->extra >= 1
               && kvs_gram_rep_is(g, u->ralt, KVS_GRAM_RULE, u->x)
               && u->ralt + 1 < g->n_elems
               && g->elems[u->ralt + 1].kind == KVS_GRAM_RULE
               && kvs_gram_rep_is(g, (uint64_t) u->ralt + 2, KVS_GRAM_END,
                                  0);
    }

    for (i = 1; i <= u->min; i++) {
        if (!kvs_gram_rep_is(g, u->ralt + (uint64_t) (i - 1) * (u->s + 1),
                             KVS_GRAM_RULE, u->x))
        {
            return 0;
        }
    }

    b = u->ralt + (uint64_t) (u->min - 1) * (u->s + 1) + 1;

    return b < g->n_elems && g->elems[b].kind == KVS_GRAM_RULE
           && kvs_gram_rep_is(g, b + 1, KVS_GRAM_END, 0);
}


static void
kvs_gram_rep_set(kvs_gram_t *g, uint64_t pos, uint32_t c, uint32_t f)
{
    g->rep_c[pos] = c;
    g->rep_f[pos] = f;
}


/* After the FIRST pass: counts and families (see above) of the unrolled
 * repetitions whose x cannot be empty; the build records are freed. */
int
kvs_gram_rep_index(kvs_gram_t *g, kvs_err_t *err)
{
    uint32_t            k, j, o, i, s, st, ft, fm, n;
    kvs_gram_unroll_t  *u;

    n = 0;
    for (k = 0; k < g->n_unrolls; k++) {
        n += 2 * (g->unrolls[k].s + 2);
    }

    /* nullable is exact only once the passes settled (lazy) */
    if (n == 0 || !g->lazy) {
        goto done;
    }

    g->rep_c = calloc(g->n_elems, sizeof(uint32_t));
    g->rep_f = calloc(g->n_elems, sizeof(uint32_t));
    g->rfam = calloc(n, sizeof(kvs_gram_rfam_t));
    if (g->rep_c == NULL || g->rep_f == NULL || g->rfam == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "grammar: out of memory");
    }

    for (k = 0; k < g->n_unrolls; k++) {
        u = &g->unrolls[k];
        s = u->s;
        st = s + 4;

        if (g->nullable[u->x] || !kvs_gram_rep_layout(g, u)) {
            continue;
        }

        ft = g->n_rfam;
        if (u->extra >= 1) {
            for (o = 0; o < s + 2; o++) {
                g->rfam[ft + o].at = u->t1 + (u->extra - 1) * st + o;
                g->rfam[ft + o].c_at = u->extra;
                g->rfam[ft + o].step = (int32_t) st;
                g->rfam[ft + o].grp = ft;
                for (j = 1; j <= u->extra; j++) {
                    kvs_gram_rep_set(g, u->t1 + (uint64_t) (j - 1) * st + o,
                                     j, ft + o);
                }
            }
            g->n_rfam += s + 2;
        }

        if (u->min == 0) {
            kvs_gram_rep_set(g, u->ralt, u->extra + 1, ft + s);
            kvs_gram_rep_set(g, u->ralt + 1, u->extra + 1, ft + s + 1);
            g->rfam[ft + s].r_at = u->ralt + 1;
            continue;
        }

        /* mandatory copies 1 .. min - 1: x first, then sep x */
        fm = g->n_rfam;
        if (u->min >= 2) {
            for (o = 0; o <= s; o++) {
                g->rfam[fm + o].at = o < s ? u->ralt + 1 + o : u->ralt;
                g->rfam[fm + o].c_at = o < s ? u->min - 1 : u->min;
                g->rfam[fm + o].step = -(int32_t) (s + 1);
                g->rfam[fm + o].grp = fm;
            }
            g->n_rfam += s + 1;

            for (i = 1; i < u->min; i++) {
                kvs_gram_rep_set(g, u->ralt + (uint64_t) (i - 1) * (s + 1),
                                 u->min - i + 1, fm + s);
                for (o = 0; i >= 2 && o < s; o++) {
                    kvs_gram_rep_set(g, u->ralt + 1
                                     + (uint64_t) (i - 2) * (s + 1) + o,
                                     u->min - i + 1, fm + o);
                }
            }
        }

        /* the last mandatory copy and T_e after it: a T_{e+1}'s suffix */
        if (u->extra >= 1) {
            for (o = 0; u->min >= 2 && o < s; o++) {
                kvs_gram_rep_set(g, u->ralt + 1
                                 + (uint64_t) (u->min - 2) * (s + 1) + o,
                                 u->extra + 1, ft + o);
            }
            kvs_gram_rep_set(g, u->ralt + (uint64_t) (u->min - 1) * (s + 1),
                             u->extra + 1, ft + s);
            g->rfam[ft + s].r_at = u->ralt + (u->min - 1) * (s + 1) + 1;
            kvs_gram_rep_set(g, u->ralt + (uint64_t) (u->min - 1) * (s + 1)
                             + 1, u->extra + 1, ft + s + 1);
        }
    }

done:

    free(g->unrolls);
    g->unrolls = NULL;
    g->n_unrolls = 0;
    g->cap_unrolls = 0;

    return KVS_OK;
}
