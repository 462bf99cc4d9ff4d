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


/* Byte classes: cut 0 .. 255 at every range's ends; the bytes between
 * two cuts are in every range alike, and each such run is a class. */
static void
kvs_gram_classes(kvs_gram_t *g)
{
    uint8_t   cut[257];
    uint32_t  i, b, a;

    memset(cut, 0, sizeof(cut));
    cut[0] = 1;
    cut[256] = 1;

    for (i = 0; i < g->n_elems; i++) {
        if (g->elems[i].kind == KVS_GRAM_BYTES) {
            cut[g->elems[i].lo] = 1;
            cut[g->elems[i].hi + 1] = 1;
        }
    }

    for (a = 0, b = 0; b < 256; b++) {
        if (cut[b]) {
            a = b;
        }
        g->bnext[b] = (uint8_t) (cut[b + 1] ? a : b + 1);
    }
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

    kvs_gram_classes(g);

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
