/*
 * kvs_gram: the grammar representation and its builder.
 *
 * Owns kvs_gram_t: a context-free grammar over bytes, stored flat.  Each
 * alternative is a run of elements in elems[] closed by KVS_GRAM_END;
 * alternatives are appended in any order while building (a rule may be
 * referenced before it has any, which is how recursion is written) and
 * kvs_gram_finish() sorts them by rule into rule_alt[].
 *
 * Invariants: n_elems <= lim.max_elems and n_rules <= lim.max_rules at
 * all times (an append that would pass a cap fails and changes nothing);
 * after finish, see kvs_grammar.h.  Also here: code point ranges as UTF-8
 * byte-range sequences, which every character class is built from.
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_grammar.h"


static int
kvs_gram_grow(void **p, uint32_t *cap, uint32_t need, size_t size)
{
    uint32_t  c;
    void     *q;

    if (need <= *cap) {
        return KVS_OK;
    }

    c = *cap ? *cap : 64;
    while (c < need) {
        c = c > UINT32_MAX / 2 ? need : c * 2;
    }

    q = realloc(*p, (size_t) c * size);
    if (q == NULL) {
        return KVS_ENOMEM;
    }

    *p = q;
    *cap = c;

    return KVS_OK;
}


int
kvs_gram_init(kvs_gram_t *g, const kvs_gram_limits_t *lim)
{
    memset(g, 0, sizeof(kvs_gram_t));

    if (lim != NULL) {
        g->lim = *lim;
    }
    if (g->lim.max_elems == 0) {
        g->lim.max_elems = 1u << 21;
    }
    if (g->lim.max_rules == 0) {
        g->lim.max_rules = 1u << 19;
    }

    return KVS_OK;
}


void
kvs_gram_free(kvs_gram_t *g)
{
    free(g->elems);
    free(g->alt_rule);
    free(g->alt_start);
    free(g->rule_alt);
    free(g->nullable);
    free(g->first);
    free(g->alt_first);
    free(g->unrolls);
    free(g->rep_c);
    free(g->rep_f);
    free(g->rfam);
    memset(g, 0, sizeof(kvs_gram_t));
}


int
kvs_gram_rule_new(kvs_gram_t *g, uint32_t *id, kvs_err_t *err)
{
    if (g->finished) {
        return kvs_err_set(err, KVS_EINVAL, "grammar is already finished");
    }

    if (g->n_rules >= g->lim.max_rules) {
        return kvs_err_set(err, KVS_ETOOLONG,
                           "grammar has more than %u rules",
                           g->lim.max_rules);
    }

    *id = g->n_rules++;

    return KVS_OK;
}


int
kvs_gram_add_alt(kvs_gram_t *g, uint32_t rule, const kvs_gram_seq_t *s,
    kvs_err_t *err)
{
    size_t  i;

    if (g->finished || rule >= g->n_rules) {
        return kvs_err_set(err, KVS_EINVAL, "no rule %u to add to", rule);
    }

    if (s != NULL && s->oom) {
        return kvs_err_set(err, KVS_ENOMEM, "grammar: out of memory");
    }

    if ((s != NULL ? s->n : 0) + 1 > g->lim.max_elems - g->n_elems) {
        return kvs_err_set(err, KVS_ETOOLONG,
                           "grammar has more than %u elements",
                           g->lim.max_elems);
    }

    for (i = 0; s != NULL && i < s->n; i++) {
        if (s->e[i].kind == KVS_GRAM_RULE && s->e[i].rule >= g->n_rules) {
            return kvs_err_set(err, KVS_EINVAL, "reference to no rule %u",
                               s->e[i].rule);
        }
    }

    if (kvs_gram_grow((void **) &g->elems, &g->cap_elems,
                      g->n_elems + (uint32_t) (s != NULL ? s->n : 0) + 1,
                      sizeof(kvs_gram_elem_t)) != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM, "grammar: out of memory");
    }

    if (g->n_alts == g->cap_alts) {
        uint32_t   c, *q;

        c = g->cap_alts ? g->cap_alts * 2 : 64;

        q = realloc(g->alt_rule, (size_t) c * sizeof(uint32_t));
        if (q == NULL) {
            return kvs_err_set(err, KVS_ENOMEM, "grammar: out of memory");
        }
        g->alt_rule = q;

        q = realloc(g->alt_start, (size_t) c * sizeof(uint32_t));
        if (q == NULL) {
            return kvs_err_set(err, KVS_ENOMEM, "grammar: out of memory");
        }
        g->alt_start = q;
        g->cap_alts = c;
    }

    g->alt_rule[g->n_alts] = rule;
    g->alt_start[g->n_alts] = g->n_elems;
    g->n_alts++;

    if (s != NULL && s->n > 0) {
        memcpy(g->elems + g->n_elems, s->e, s->n * sizeof(kvs_gram_elem_t));
        g->n_elems += (uint32_t) s->n;
    }

    memset(&g->elems[g->n_elems], 0, sizeof(kvs_gram_elem_t));
    g->elems[g->n_elems].kind = KVS_GRAM_END;
    g->n_elems++;

    return KVS_OK;
}


/*
 * Productive rules (those that derive some finite byte string), by a
 * worklist over reference counts, O(size): an alternative is productive
 * once none of its references is pending.  Alternatives that stay
 * unproductive are marked KVS_GRAM_DEAD so that no parse enters a branch
 * it could never finish; an unproductive root is an error.
 */
static int
kvs_gram_prune(kvs_gram_t *g, uint32_t root, kvs_err_t *err)
{
    int        rc;
    uint32_t   r, a, i, n, *pending, *occ_start, *occ, *queue, *rule_of;
    uint8_t   *prod;

    pending = calloc((size_t) g->n_alts + 1, sizeof(uint32_t));
    occ_start = calloc((size_t) g->n_rules + 2, sizeof(uint32_t));
    occ = malloc(((size_t) g->n_elems + 1) * sizeof(uint32_t));
    queue = malloc(((size_t) g->n_rules + 1) * sizeof(uint32_t));
    rule_of = malloc(((size_t) g->n_alts + 1) * sizeof(uint32_t));
    prod = calloc((size_t) g->n_rules + 1, 1);

    rc = KVS_OK;

    if (pending == NULL || occ_start == NULL || occ == NULL || queue == NULL
        || rule_of == NULL || prod == NULL)
    {
        rc = kvs_err_set(err, KVS_ENOMEM, "grammar: out of memory");
        goto done;
    }

    for (r = 0; r < g->n_rules; r++) {
        for (a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
            rule_of[a] = r;
            for (i = g->alt_start[a]; g->elems[i].kind != KVS_GRAM_END;
                 i++)
            {
                if (g->elems[i].kind == KVS_GRAM_RULE) {
                    pending[a]++;
                    occ_start[g->elems[i].rule + 2]++;
                }
            }
        }
    }

    for (r = 0; r < g->n_rules; r++) {
        occ_start[r + 2] += occ_start[r + 1];
    }

    for (a = 0; a < g->n_alts; a++) {
        for (i = g->alt_start[a]; g->elems[i].kind != KVS_GRAM_END; i++) {
            if (g->elems[i].kind == KVS_GRAM_RULE) {
                occ[occ_start[g->elems[i].rule + 1]++] = a;
            }
        }
    }

    /* now occ_start[r] .. occ_start[r + 1] are the occurrences of r */
    n = 0;
    for (a = 0; a < g->n_alts; a++) {
        if (pending[a] == 0 && !prod[rule_of[a]]) {
            prod[rule_of[a]] = 1;
            queue[n++] = rule_of[a];
        }
    }

    while (n > 0) {
        r = queue[--n];
        for (i = occ_start[r]; i < occ_start[r + 1]; i++) {
            a = occ[i];
            if (--pending[a] == 0 && !prod[rule_of[a]]) {
                prod[rule_of[a]] = 1;
                queue[n++] = rule_of[a];
            }
        }
    }

    if (!prod[root]) {
        rc = kvs_err_set(err, KVS_EINVAL,
                         "the grammar derives no finite text (a recursion "
                         "that every sentence must follow forever)");
        goto done;
    }

    for (a = 0; a < g->n_alts; a++) {
        if (pending[a] != 0) {
            g->elems[g->alt_start[a]].kind = KVS_GRAM_DEAD;
        }
    }

done:

    free(pending);
    free(occ_start);
    free(occ);
    free(queue);
    free(rule_of);
    free(prod);

    return rc;
}


/*
 * Nullable rules and FIRST sets, by passes to a fixpoint (rules usually
 * refer to later ones, so passes run from the last rule back and a
 * schema's grammar settles in a few).  A grammar that has not settled
 * after KVS_GRAM_PASSES passes is matched eagerly (lazy = 0): only
 * exact sets may prune alternatives.
 */
#define KVS_GRAM_PASSES  64

static int
kvs_gram_first(kvs_gram_t *g, kvs_err_t *err)
{
    int                     changed;
    unsigned                pass, w;
    uint32_t                r, a, i;
    uint64_t                set[4], *f;
    const kvs_gram_elem_t  *e;

    g->nullable = calloc((size_t) g->n_rules + 1, 1);
    g->first = calloc(((size_t) g->n_rules + 1) * 4, sizeof(uint64_t));
    g->alt_first = calloc(((size_t) g->n_alts + 1) * 4, sizeof(uint64_t));

    if (g->nullable == NULL || g->first == NULL || g->alt_first == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "grammar: out of memory");
    }

    changed = 1;

    for (pass = 0; pass < KVS_GRAM_PASSES && changed; pass++) {
        changed = 0;

        for (r = g->n_rules; r-- > 0; ) {
            for (a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
                i = g->alt_start[a];
                if (g->elems[i].kind == KVS_GRAM_DEAD) {
                    continue;
                }

                memset(set, 0, sizeof(set));

                for ( ; ; i++) {
                    e = &g->elems[i];
                    if (e->kind == KVS_GRAM_BYTES) {
                        unsigned  c;

                        for (c = e->lo; c <= e->hi; c++) {
                            set[c >> 6] |= 1ULL << (c & 63);
                        }
                        break;
                    }
                    if (e->kind == KVS_GRAM_RULE) {
                        f = &g->first[(size_t) e->rule * 4];
                        for (w = 0; w < 4; w++) {
                            set[w] |= f[w];
                        }
                        if (g->nullable[e->rule]) {
                            continue;
                        }
                        break;
                    }
                    /* END: the alternative can be empty */
                    if (!g->nullable[r]) {
                        g->nullable[r] = 1;
                        changed = 1;
                    }
                    break;
                }

                f = &g->alt_first[(size_t) a * 4];
                for (w = 0; w < 4; w++) {
                    if ((f[w] | set[w]) != f[w]) {
                        f[w] |= set[w];
                        changed = 1;
                    }
                    if ((g->first[(size_t) r * 4 + w] | set[w])
                        != g->first[(size_t) r * 4 + w])
                    {
                        g->first[(size_t) r * 4 + w] |= set[w];
                        changed = 1;
                    }
                }
            }
        }
    }

    g->lazy = !changed;

    return KVS_OK;
}


/* ---- counted repetitions: positions no token tells apart --------------- */

/*
 * kvs_gram_repeat() writes x{min,max} as
 *
 *     R   = x (sep x){min - 1} T_e    (min > 0)     R = "" | x T_e  (min 0)
 *     T_j = "" | sep x T_{j-1}        (j = 1 .. e)  T_0 = ""
 *
 * (e = max - max(min, 1) optional copies), so every copy is a distinct
 * position and a mask keyed by positions (kvs_gram_mask.c's context-
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
 * may lie in two families (a bounded string inside a bounded array),
 * each renamed on its own frame; what lies below the cut (the sentinel)
 * is untouched, and the tokens that reach it are checked on the real
 * stacks as before.  A free count (max unbounded) needs none of this:
 * it is one position already.
 */
static int
kvs_gram_rep_note(kvs_gram_t *g, uint32_t x, uint32_t s, uint32_t t1,
    uint32_t extra, uint32_t ralt, uint32_t min, kvs_err_t *err)
{
    kvs_gram_unroll_t  *u;

    if (kvs_gram_grow((void **) &g->unrolls, &g->cap_unrolls,
                      g->n_unrolls + 1, sizeof(kvs_gram_unroll_t))
        != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM, "grammar: out of memory");
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
static int
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
            continue;
        }

        /* mandatory copies 1 .. min - 1: x first, then sep x */
        fm = g->n_rfam;
        if (u->min >= 2) {
            for (o = 0; o <= s; o++) {
                g->rfam[fm + o].at = o < s ? u->ralt + 1 + o : u->ralt;
                g->rfam[fm + o].c_at = o < s ? u->min - 1 : u->min;
                g->rfam[fm + o].step = -(int32_t) (s + 1);
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


int
kvs_gram_finish(kvs_gram_t *g, uint32_t root, kvs_err_t *err)
{
    int        rc;
    uint32_t   r, a, i, *start, *fill;

    if (g->finished) {
        return kvs_err_set(err, KVS_EINVAL, "grammar is already finished");
    }

    if (root >= g->n_rules) {
        return kvs_err_set(err, KVS_EINVAL, "no root rule %u", root);
    }

    g->rule_alt = calloc((size_t) g->n_rules + 1, sizeof(uint32_t));
    start = malloc(((size_t) g->n_alts + 1) * sizeof(uint32_t));
    fill = calloc((size_t) g->n_rules + 1, sizeof(uint32_t));

    if (g->rule_alt == NULL || start == NULL || fill == NULL) {
        free(start);
        free(fill);
        return kvs_err_set(err, KVS_ENOMEM, "grammar: out of memory");
    }

    /* counting sort by rule, stable, so alternatives keep their order */
    for (a = 0; a < g->n_alts; a++) {
        g->rule_alt[g->alt_rule[a] + 1]++;
    }
    for (r = 0; r < g->n_rules; r++) {
        g->rule_alt[r + 1] += g->rule_alt[r];
    }
    for (a = 0; a < g->n_alts; a++) {
        r = g->alt_rule[a];
        start[g->rule_alt[r] + fill[r]++] = g->alt_start[a];
    }

    free(fill);
    free(g->alt_start);
    g->alt_start = start;

    for (r = 0; r < g->n_rules; r++) {
        if (g->rule_alt[r] == g->rule_alt[r + 1]) {
            return kvs_err_set(err, KVS_EINVAL,
                               "grammar rule %u has no alternative", r);
        }
    }

    for (i = 0; i < g->n_elems; i++) {
        if (g->elems[i].kind == KVS_GRAM_BYTES
            && g->elems[i].lo > g->elems[i].hi)
        {
            return kvs_err_set(err, KVS_EINVAL,
                               "grammar element %u: empty byte range", i);
        }
    }

    rc = kvs_gram_prune(g, root, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_gram_first(g, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_gram_rep_index(g, err);
    if (rc != KVS_OK) {
        return rc;
    }

    g->root = root;
    g->finished = 1;

    return KVS_OK;
}


/* ---- sequences -------------------------------------------------------- */

static kvs_gram_elem_t *
kvs_gram_seq_push(kvs_gram_seq_t *s)
{
    size_t            c;
    kvs_gram_elem_t  *q;

    if (s->oom) {
        return NULL;
    }

    if (s->n == s->cap) {
        c = s->cap ? s->cap * 2 : 16;
        q = realloc(s->e, c * sizeof(kvs_gram_elem_t));
        if (q == NULL) {
            s->oom = 1;
            return NULL;
        }
        s->e = q;
        s->cap = c;
    }

    q = &s->e[s->n++];
    memset(q, 0, sizeof(kvs_gram_elem_t));

    return q;
}


void
kvs_gram_seq_reset(kvs_gram_seq_t *s)
{
    s->n = 0;
    s->oom = 0;
}


void
kvs_gram_seq_free(kvs_gram_seq_t *s)
{
    free(s->e);
    memset(s, 0, sizeof(kvs_gram_seq_t));
}


void
kvs_gram_seq_range(kvs_gram_seq_t *s, uint8_t lo, uint8_t hi)
{
    kvs_gram_elem_t  *e;

    e = kvs_gram_seq_push(s);
    if (e != NULL) {
        e->kind = KVS_GRAM_BYTES;
        e->lo = lo;
        e->hi = hi;
    }
}


void
kvs_gram_seq_lit(kvs_gram_seq_t *s, const void *p, size_t n)
{
    size_t          i;
    const uint8_t  *b;

    b = p;
    for (i = 0; i < n; i++) {
        kvs_gram_seq_range(s, b[i], b[i]);
    }
}


void
kvs_gram_seq_ref(kvs_gram_seq_t *s, uint32_t rule)
{
    kvs_gram_elem_t  *e;

    e = kvs_gram_seq_push(s);
    if (e != NULL) {
        e->kind = KVS_GRAM_RULE;
        e->rule = rule;
    }
}


/* ---- code point ranges as UTF-8 ---------------------------------------- */

static int
kvs_gram_utf8_len(uint32_t cp)
{
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}


static void
kvs_gram_utf8_enc(uint32_t cp, int n, uint8_t *b)
{
    switch (n) {
    case 1:
        b[0] = (uint8_t) cp;
        break;
    case 2:
        b[0] = (uint8_t) (0xC0 | cp >> 6);
        b[1] = (uint8_t) (0x80 | (cp & 0x3F));
        break;
    case 3:
        b[0] = (uint8_t) (0xE0 | cp >> 12);
        b[1] = (uint8_t) (0x80 | (cp >> 6 & 0x3F));
        b[2] = (uint8_t) (0x80 | (cp & 0x3F));
        break;
    default:
        b[0] = (uint8_t) (0xF0 | cp >> 18);
        b[1] = (uint8_t) (0x80 | (cp >> 12 & 0x3F));
        b[2] = (uint8_t) (0x80 | (cp >> 6 & 0x3F));
        b[3] = (uint8_t) (0x80 | (cp & 0x3F));
        break;
    }
}


/*
 * [lo, hi] within one encoded length.  Split until the range is a
 * product of per-byte ranges: where lo and hi differ above a 6-bit
 * boundary, lo must start and hi must end a full block below it.
 */
static int
kvs_gram_cp_split(kvs_gram_t *g, uint32_t rule, uint32_t lo, uint32_t hi,
    const kvs_gram_seq_t *tail, kvs_gram_seq_t *s, kvs_err_t *err)
{
    int       n, i, rc;
    uint32_t  m;
    uint8_t   a[4], b[4];

    n = kvs_gram_utf8_len(lo);

    for (i = 1; i < n; i++) {
        m = (1u << (6 * i)) - 1;

        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                rc = kvs_gram_cp_split(g, rule, lo, lo | m, tail, s, err);
                if (rc != KVS_OK) {
                    return rc;
                }
                return kvs_gram_cp_split(g, rule, (lo | m) + 1, hi, tail, s,
                                         err);
            }

            if ((hi & m) != m) {
                rc = kvs_gram_cp_split(g, rule, lo, (hi & ~m) - 1, tail, s,
                                       err);
                if (rc != KVS_OK) {
                    return rc;
                }
                return kvs_gram_cp_split(g, rule, hi & ~m, hi, tail, s, err);
            }
        }
    }

    kvs_gram_utf8_enc(lo, n, a);
    kvs_gram_utf8_enc(hi, n, b);

    kvs_gram_seq_reset(s);
    for (i = 0; i < n; i++) {
        kvs_gram_seq_range(s, a[i], b[i]);
    }
    for (i = 0; tail != NULL && (size_t) i < tail->n; i++) {
        if (kvs_gram_seq_push(s) != NULL) {
            s->e[s->n - 1] = tail->e[i];
        }
    }

    return kvs_gram_add_alt(g, rule, s, err);
}


int
kvs_gram_add_cp_range(kvs_gram_t *g, uint32_t rule, uint32_t lo,
    uint32_t hi, const kvs_gram_seq_t *tail, kvs_err_t *err)
{
    static const uint32_t  bound[] = { 0x7F, 0x7FF, 0xD7FF, 0xDFFF, 0xFFFF,
                                       0x10FFFF };
    int             rc;
    unsigned        i;
    uint32_t        a, b;
    kvs_gram_seq_t  s;

    if (lo > hi || hi > 0x10FFFF) {
        return kvs_err_set(err, KVS_EINVAL, "bad code point range");
    }

    memset(&s, 0, sizeof(s));
    rc = KVS_OK;

    for (i = 0, a = 0; i < sizeof(bound) / sizeof(bound[0]); i++) {
        b = bound[i];

        if (b != 0xDFFF && lo <= b && hi >= a) {
            rc = kvs_gram_cp_split(g, rule, lo > a ? lo : a, hi < b ? hi : b,
                                   tail, &s, err);
            if (rc != KVS_OK) {
                break;
            }
        }

        a = b + 1;
    }

    kvs_gram_seq_free(&s);

    return rc;
}


/* sep then x, appended to q */
static void
kvs_gram_seq_item(kvs_gram_seq_t *q, const kvs_gram_seq_t *sep, uint32_t x)
{
    size_t  i;

    for (i = 0; sep != NULL && i < sep->n; i++) {
        if (kvs_gram_seq_push(q) != NULL) {
            q->e[q->n - 1] = sep->e[i];
        }
    }
    kvs_gram_seq_ref(q, x);
}


int
kvs_gram_repeat(kvs_gram_t *g, uint32_t x, const kvs_gram_seq_t *sep,
    uint32_t min, uint32_t max, uint32_t *rule, kvs_err_t *err)
{
    int             rc;
    uint32_t        k, tail, t, extra, t1, ralt;
    kvs_gram_seq_t  q;

    extra = 0;
    t1 = 0;

    if (min > max) {
        return kvs_err_set(err, KVS_EINVAL, "repeat %u > %u", min, max);
    }

    memset(&q, 0, sizeof(q));

    /* tail: (sep x) up to `extra` more times after the first */
    rc = kvs_gram_rule_new(g, &tail, err);
    if (rc != KVS_OK) {
        return rc;
    }
    rc = kvs_gram_add_alt(g, tail, NULL, err);

    if (max == UINT32_MAX) {
        kvs_gram_seq_item(&q, sep, x);
        kvs_gram_seq_ref(&q, tail);
        if (rc == KVS_OK) {
            rc = kvs_gram_add_alt(g, tail, &q, err);
        }

    } else {
        extra = max == 0 ? 0 : max - (min > 0 ? min : 1);
        t1 = g->n_elems + 1;          /* T_1's copy, after its empty alt */

        for (k = 0; k < extra && rc == KVS_OK; k++) {
            rc = kvs_gram_rule_new(g, &t, err);
            if (rc != KVS_OK) {
                break;
            }
            kvs_gram_seq_reset(&q);
            kvs_gram_seq_item(&q, sep, x);
            kvs_gram_seq_ref(&q, tail);
            rc = kvs_gram_add_alt(g, t, NULL, err);
            if (rc == KVS_OK) {
                rc = kvs_gram_add_alt(g, t, &q, err);
            }
            tail = t;
        }
    }

    if (rc == KVS_OK) {
        rc = kvs_gram_rule_new(g, rule, err);
    }

    if (rc == KVS_OK) {
        kvs_gram_seq_reset(&q);

        if (min == 0) {
            rc = kvs_gram_add_alt(g, *rule, NULL, err);
            if (max > 0) {
                kvs_gram_seq_ref(&q, x);
                kvs_gram_seq_ref(&q, tail);
            }
        } else {
            kvs_gram_seq_ref(&q, x);
            for (k = 1; k < min && !q.oom; k++) {
                if (q.n > g->lim.max_elems) {
                    rc = kvs_err_set(err, KVS_ETOOLONG,
                                     "grammar has more than %u elements",
                                     g->lim.max_elems);
                    break;
                }
                kvs_gram_seq_item(&q, sep, x);
            }
            kvs_gram_seq_ref(&q, tail);
        }

        ralt = g->n_elems;
        if (rc == KVS_OK && q.n > 0) {
            rc = kvs_gram_add_alt(g, *rule, &q, err);
        }

        /* a bounded count: remember its layout (kvs_gram_rep_index) */
        if (rc == KVS_OK && max != UINT32_MAX && max > 1) {
            rc = kvs_gram_rep_note(g, x, sep != NULL ? (uint32_t) sep->n : 0,
                                   t1, extra, ralt, min, err);
        }
    }

    kvs_gram_seq_free(&q);

    return rc;
}
