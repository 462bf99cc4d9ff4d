/*
 * kvs_gram_match: the matcher, a pushdown automaton over a kvs_gram_t run
 * on every parse at once.
 *
 * Owns kvs_gram_matcher_t.  A parse is a stack of grammar positions
 * (element indices): the top is the element to match next, each node
 * below is where to return when the rule above it ends.  Stacks are
 * persistent linked lists in one node pool, hash-consed on (pos, parent)
 * so that equal stacks are one id: the frontier after a byte is a set of
 * ids, and a state that recurs (the body of a string, the next item of a
 * list) recurs with the same ids, which is what the masker's cache keys
 * on.  A reference whose next element ends its alternative does not push
 * a return node (tail call), so right-recursive lists run in constant
 * stack depth.  A reference to a rule that cannot be empty stays a top
 * until a byte of its FIRST set comes, and then only the alternatives
 * that can take that byte are expanded (kvs_gram_predict): a string's
 * character is one stack, not one per UTF-8 lead-byte range and escape.
 *
 * Invariants: levels[k] is the state after k bytes (kvs_grammar.h); nodes
 * are only ever removed newest first, and the hash table is open
 * addressing with linear probing, which is exactly what makes removing
 * the newest entry restore the table to its state before that insertion
 * (no tombstones).  Caps: lim.max_nodes nodes alive, lim.max_front stacks
 * in a frontier; breaching either while taking a byte undoes the byte
 * and is KVS_ETOOLONG.  A left-recursive or epsilon-cyclic grammar makes
 * ever-deeper stacks and so ends at a cap, never in a loop.
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_grammar.h"


static uint32_t
kvs_gram_hash(uint32_t pos, uint32_t parent)
{
    uint64_t  h;

    h = ((uint64_t) pos << 32 | parent) * 0x9E3779B97F4A7C15ULL;

    return (uint32_t) (h >> 32);
}


static int
kvs_gram_rehash(kvs_gram_matcher_t *m, uint32_t size)
{
    uint32_t   i, j, *slots;

    slots = calloc(size, sizeof(uint32_t));
    if (slots == NULL) {
        return KVS_ENOMEM;
    }

    free(m->slots);
    m->slots = slots;
    m->slot_mask = size - 1;

    /* in id order, so the table is as if built by inserting oldest first
     * (removal newest first stays exact) */
    for (i = 0; i < m->n_nodes; i++) {
        j = kvs_gram_hash(m->nodes[i].pos, m->nodes[i].parent) & m->slot_mask;
        while (m->slots[j] != 0) {
            j = (j + 1) & m->slot_mask;
        }
        m->slots[j] = i + 1;
    }

    return KVS_OK;
}


/* The id of stack (pos, parent), made if new; KVS_GRAM_NIL at a cap or
 * out of memory (*rc says which). */
static uint32_t
kvs_gram_intern(kvs_gram_matcher_t *m, uint32_t pos, uint32_t parent,
    int *rc)
{
    uint32_t          j, id, c;
    kvs_gram_node_t  *nodes;
    uint32_t         *marks;

    m->interns++;
    j = kvs_gram_hash(pos, parent) & m->slot_mask;

    while (m->slots[j] != 0) {
        id = m->slots[j] - 1;
        if (m->nodes[id].pos == pos && m->nodes[id].parent == parent) {
            return id;
        }
        j = (j + 1) & m->slot_mask;
    }

    if (m->n_nodes >= m->lim.max_nodes) {
        m->capped++;
        *rc = KVS_ETOOLONG;
        return KVS_GRAM_NIL;
    }

    if (m->n_nodes == m->cap_nodes) {
        c = m->cap_nodes * 2;
        nodes = realloc(m->nodes, (size_t) c * sizeof(kvs_gram_node_t));
        if (nodes == NULL) {
            *rc = KVS_ENOMEM;
            return KVS_GRAM_NIL;
        }
        m->nodes = nodes;
        marks = realloc(m->marks, (size_t) c * sizeof(uint32_t));
        if (marks == NULL) {
            *rc = KVS_ENOMEM;
            return KVS_GRAM_NIL;
        }
        memset(marks + m->cap_nodes, 0,
               (size_t) (c - m->cap_nodes) * sizeof(uint32_t));
        m->marks = marks;
        m->cap_nodes = c;
    }

    id = m->n_nodes++;
    m->nodes[id].pos = pos;
    m->nodes[id].parent = parent;
    m->marks[id] = 0;
    m->slots[j] = id + 1;

    /* keep the load at most 1/2 */
    if (m->n_nodes * 2 > m->slot_mask + 1) {
        if (kvs_gram_rehash(m, (m->slot_mask + 1) * 2) != KVS_OK) {
            m->n_nodes--;
            m->slots[j] = 0;
            *rc = KVS_ENOMEM;
            return KVS_GRAM_NIL;
        }
    }

    return id;
}


/* Removes nodes newest first down to n. */
static void
kvs_gram_truncate(kvs_gram_matcher_t *m, uint32_t n)
{
    uint32_t  id, j;

    if (n < m->low_water) {
        m->low_water = n;
    }

    while (m->n_nodes > n) {
        id = m->n_nodes - 1;
        j = kvs_gram_hash(m->nodes[id].pos, m->nodes[id].parent)
            & m->slot_mask;
        while (m->slots[j] != id + 1) {
            j = (j + 1) & m->slot_mask;
        }
        m->slots[j] = 0;
        m->n_nodes--;
    }
}


static int
kvs_gram_work_push(kvs_gram_matcher_t *m, uint32_t *n, uint32_t id)
{
    uint32_t  c, *q;

    if (*n == m->cap_work) {
        c = m->cap_work * 2;
        q = realloc(m->work, (size_t) c * sizeof(uint32_t));
        if (q == NULL) {
            return KVS_ENOMEM;
        }
        m->work = q;
        m->cap_work = c;
    }

    m->work[(*n)++] = id;

    return KVS_OK;
}


static int
kvs_gram_front_push(kvs_gram_matcher_t *m, uint32_t id)
{
    uint32_t  c, *q;

    if (m->n_front == m->cap_front) {
        c = m->cap_front * 2;
        q = realloc(m->front, (size_t) c * sizeof(uint32_t));
        if (q == NULL) {
            return KVS_ENOMEM;
        }
        m->front = q;
        m->cap_front = c;
    }

    m->front[m->n_front++] = id;

    return KVS_OK;
}


/* bits lo .. hi of a 256-bit set, a word at a time */
static inline void
kvs_gram_set_range(uint64_t *set, unsigned lo, unsigned hi)
{
    unsigned  w, a, b;

    for (w = lo >> 6; w <= hi >> 6; w++) {
        a = w == lo >> 6 ? (lo & 63) : 0;
        b = w == hi >> 6 ? (hi & 63) : 63;
        set[w] |= (b == 63 ? ~0ULL : (1ULL << (b + 1)) - 1)
                  & ~((1ULL << a) - 1);
    }
}


/*
 * Closes the seeds in work[0 .. nw) into a new level: expands rule
 * references and pops finished rules until every stack's top is a byte
 * range.  The level is already pushed (lv[n_lv - 1]) with its front and
 * nodes_before set.
 */
static int
kvs_gram_close(kvs_gram_matcher_t *m, uint32_t nw)
{
    int                     rc;
    uint32_t                id, pos, parent, cont, a, c, r;
    kvs_gram_level_t       *lv;
    const kvs_gram_t       *g;
    const kvs_gram_elem_t  *e;

    g = m->g;
    lv = &m->lv[m->n_lv - 1];

    if (++m->epoch == 0) {
        memset(m->marks, 0, (size_t) m->cap_nodes * sizeof(uint32_t));
        m->epoch = 1;
    }

    while (nw > 0) {
        id = m->work[--nw];

        if (id == KVS_GRAM_NIL) {
            lv->accept = 1;
            continue;
        }

        if (id == KVS_GRAM_SENT) {
            lv->sent = 1;
            continue;
        }

        if (m->marks[id] == m->epoch) {
            continue;
        }
        m->marks[id] = m->epoch;

        pos = m->nodes[id].pos;
        parent = m->nodes[id].parent;
        e = &g->elems[pos];

        switch (e->kind) {

        case KVS_GRAM_BYTES:
            if (lv->n_front >= m->lim.max_front) {
                m->capped++;
                return KVS_ETOOLONG;
            }
            if (kvs_gram_front_push(m, id) != KVS_OK) {
                return KVS_ENOMEM;
            }
            lv->n_front++;
            kvs_gram_set_range(lv->next, e->lo, e->hi);
            break;

        case KVS_GRAM_RULE:
            r = e->rule;
            if (g->lazy && !g->nullable[r]) {
                /* stays a top until a byte of FIRST(r) comes */
                if (lv->n_front >= m->lim.max_front) {
                    m->capped++;
                    return KVS_ETOOLONG;
                }
                if (kvs_gram_front_push(m, id) != KVS_OK) {
                    return KVS_ENOMEM;
                }
                lv->n_front++;
                for (c = 0; c < 4; c++) {
                    lv->next[c] |= g->first[(size_t) r * 4 + c];
                }
                break;
            }

            rc = KVS_OK;
            if (g->elems[pos + 1].kind == KVS_GRAM_END) {
                cont = parent;
            } else {
                cont = kvs_gram_intern(m, pos + 1, parent, &rc);
                if (cont == KVS_GRAM_NIL) {
                    return rc;
                }
            }

            for (a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
                if (g->elems[g->alt_start[a]].kind == KVS_GRAM_DEAD) {
                    continue;
                }
                if (g->elems[g->alt_start[a]].kind == KVS_GRAM_END) {
                    /* an empty alternative returns at once */
                    if (kvs_gram_work_push(m, &nw, cont) != KVS_OK) {
                        return KVS_ENOMEM;
                    }
                    continue;
                }
                c = kvs_gram_intern(m, g->alt_start[a], cont, &rc);
                if (c == KVS_GRAM_NIL) {
                    return rc;
                }
                if (kvs_gram_work_push(m, &nw, c) != KVS_OK) {
                    return KVS_ENOMEM;
                }
            }
            break;

        default:
            if (kvs_gram_work_push(m, &nw, parent) != KVS_OK) {
                return KVS_ENOMEM;
            }
            break;
        }
    }

    return KVS_OK;
}


static int
kvs_gram_level_push(kvs_gram_matcher_t *m)
{
    uint32_t           c;
    kvs_gram_level_t  *q, *lv;

    if (m->n_lv == m->cap_lv) {
        c = m->cap_lv * 2;
        q = realloc(m->lv, (size_t) c * sizeof(kvs_gram_level_t));
        if (q == NULL) {
            return KVS_ENOMEM;
        }
        m->lv = q;
        m->cap_lv = c;
    }

    lv = &m->lv[m->n_lv++];
    memset(lv, 0, sizeof(kvs_gram_level_t));
    lv->front = m->n_front;
    lv->nodes_before = m->n_nodes;

    return KVS_OK;
}


/* Drops the newest level with everything it made. */
static void
kvs_gram_level_pop(kvs_gram_matcher_t *m)
{
    kvs_gram_level_t  *lv;

    lv = &m->lv[--m->n_lv];
    m->n_front = lv->front;
    kvs_gram_truncate(m, lv->nodes_before);
}


static int
kvs_gram_matcher_alloc(kvs_gram_matcher_t *m, const kvs_gram_t *g,
    const kvs_gram_mlimits_t *lim, kvs_err_t *err)
{
    memset(m, 0, sizeof(kvs_gram_matcher_t));

    if (!g->finished) {
        return kvs_err_set(err, KVS_EINVAL, "grammar is not finished");
    }

    m->g = g;
    if (lim != NULL) {
        m->lim = *lim;
    }
    if (m->lim.max_nodes == 0) {
        m->lim.max_nodes = 1u << 22;
    }
    if (m->lim.max_front == 0) {
        m->lim.max_front = 4096;
    }
    m->low_water = UINT32_MAX;

    m->cap_nodes = 256;
    m->cap_work = 256;
    m->cap_front = 256;
    m->cap_lv = 64;
    m->nodes = malloc(m->cap_nodes * sizeof(kvs_gram_node_t));
    m->marks = calloc(m->cap_nodes, sizeof(uint32_t));
    m->work = malloc(m->cap_work * sizeof(uint32_t));
    m->front = malloc(m->cap_front * sizeof(uint32_t));
    m->lv = malloc(m->cap_lv * sizeof(kvs_gram_level_t));
    m->slots = calloc(1024, sizeof(uint32_t));
    m->slot_mask = 1023;

    if (m->nodes == NULL || m->marks == NULL || m->work == NULL
        || m->front == NULL || m->lv == NULL || m->slots == NULL)
    {
        kvs_gram_matcher_free(m);
        return kvs_err_set(err, KVS_ENOMEM, "matcher: out of memory");
    }

    (void) kvs_gram_level_push(m);

    return KVS_OK;
}


int
kvs_gram_matcher_init(kvs_gram_matcher_t *m, const kvs_gram_t *g,
    const kvs_gram_mlimits_t *lim, kvs_err_t *err)
{
    int       rc;
    uint32_t  a, id, nw, r;

    rc = kvs_gram_matcher_alloc(m, g, lim, err);
    if (rc != KVS_OK) {
        return rc;
    }

    /* the root's alternatives, each a stack of one node over nothing */
    nw = 0;
    r = g->root;
    for (a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
        if (g->elems[g->alt_start[a]].kind == KVS_GRAM_DEAD) {
            continue;
        }
        id = kvs_gram_intern(m, g->alt_start[a], KVS_GRAM_NIL, &rc);
        if (id == KVS_GRAM_NIL || kvs_gram_work_push(m, &nw, id) != KVS_OK) {
            rc = rc != KVS_OK ? rc : KVS_ENOMEM;
            break;
        }
    }

    if (rc == KVS_OK) {
        rc = kvs_gram_close(m, nw);
    }

    if (rc != KVS_OK) {
        kvs_gram_matcher_free(m);
        return kvs_err_set(err, rc, "matcher: the grammar's start %s",
                           rc == KVS_ETOOLONG ? "passes the stack caps"
                                              : "is out of memory");
    }

    return KVS_OK;
}


int
kvs_gram_matcher_init_cut(kvs_gram_matcher_t *m, const kvs_gram_t *g,
    const uint32_t *pos, uint32_t depth, const kvs_gram_mlimits_t *lim,
    kvs_err_t *err)
{
    int       rc;
    uint32_t  k, n, parent, nw;

    rc = kvs_gram_matcher_alloc(m, g, lim, err);
    if (rc != KVS_OK) {
        return rc;
    }

    for (n = 0; n < depth && pos[n] != KVS_GRAM_NIL; n++) {
        if (pos[n] >= g->n_elems) {
            kvs_gram_matcher_free(m);
            return kvs_err_set(err, KVS_EINVAL, "no position %u", pos[n]);
        }
    }

    if (n == 0) {
        kvs_gram_matcher_free(m);
        return kvs_err_set(err, KVS_EINVAL, "an empty stack to cut");
    }

    parent = n == depth ? KVS_GRAM_SENT : KVS_GRAM_NIL;
    for (k = n; k > 0 && rc == KVS_OK; k--) {
        parent = kvs_gram_intern(m, pos[k - 1], parent, &rc);
    }

    nw = 0;
    if (rc == KVS_OK) {
        rc = kvs_gram_work_push(m, &nw, parent) == KVS_OK ? KVS_OK
                                                           : KVS_ENOMEM;
    }
    if (rc == KVS_OK) {
        rc = kvs_gram_close(m, nw);
    }

    if (rc != KVS_OK) {
        kvs_gram_matcher_free(m);
        return kvs_err_set(err, rc, "matcher: cutting a stack: %s",
                           rc == KVS_ETOOLONG ? "past the caps"
                                              : "out of memory");
    }

    return KVS_OK;
}


void
kvs_gram_matcher_free(kvs_gram_matcher_t *m)
{
    free(m->nodes);
    free(m->marks);
    free(m->slots);
    free(m->front);
    free(m->lv);
    free(m->work);
    free(m->pwork);
    memset(m, 0, sizeof(kvs_gram_matcher_t));
}


static int
kvs_gram_pwork_push(kvs_gram_matcher_t *m, uint32_t *n, uint32_t id)
{
    uint32_t  c, *q;

    if (*n == m->cap_pwork) {
        c = m->cap_pwork ? m->cap_pwork * 2 : 64;
        q = realloc(m->pwork, (size_t) c * sizeof(uint32_t));
        if (q == NULL) {
            return KVS_ENOMEM;
        }
        m->pwork = q;
        m->cap_pwork = c;
    }

    m->pwork[(*n)++] = id;

    return KVS_OK;
}


/* The stack after its top took b: the next element, or the parent. */
static uint32_t
kvs_gram_advance(kvs_gram_matcher_t *m, uint32_t id, int *rc)
{
    uint32_t  pos, parent;

    pos = m->nodes[id].pos;
    parent = m->nodes[id].parent;

    if (m->g->elems[pos + 1].kind == KVS_GRAM_END) {
        return parent;
    }

    return kvs_gram_intern(m, pos + 1, parent, rc);
}


/*
 * A lazy top (a rule that cannot be empty) meets byte b, which is in its
 * FIRST set: expand only the alternatives that can start with b (all of
 * a rule that can be empty, whose text may start after it), down to the
 * byte ranges that take b, and push those stacks advanced past b as
 * seeds.  No parse pops out of the lazy rule here: it cannot be empty.
 */
static int
kvs_gram_predict(kvs_gram_matcher_t *m, uint32_t top, uint8_t b,
    uint32_t *nw)
{
    int                     rc;
    uint32_t                np, x, pos, parent, cont, a, c, r;
    const kvs_gram_t       *g;
    const kvs_gram_elem_t  *e;

    g = m->g;
    rc = KVS_OK;
    np = 0;

    if (kvs_gram_pwork_push(m, &np, top) != KVS_OK) {
        return KVS_ENOMEM;
    }

    while (np > 0) {
        x = m->pwork[--np];

        if (x == KVS_GRAM_NIL || x == KVS_GRAM_SENT
            || m->marks[x] == m->epoch)
        {
            continue;
        }
        m->marks[x] = m->epoch;

        pos = m->nodes[x].pos;
        parent = m->nodes[x].parent;
        e = &g->elems[pos];

        switch (e->kind) {

        case KVS_GRAM_BYTES:
            if (b >= e->lo && b <= e->hi) {
                c = kvs_gram_advance(m, x, &rc);
                if (rc != KVS_OK) {
                    return rc;
                }
                if (kvs_gram_work_push(m, nw, c) != KVS_OK) {
                    return KVS_ENOMEM;
                }
            }
            break;

        case KVS_GRAM_RULE:
            r = e->rule;
            if (!g->nullable[r]
                && !(g->first[(size_t) r * 4 + (b >> 6)] >> (b & 63) & 1))
            {
                break;
            }

            if (g->elems[pos + 1].kind == KVS_GRAM_END) {
                cont = parent;
            } else {
                cont = kvs_gram_intern(m, pos + 1, parent, &rc);
                if (cont == KVS_GRAM_NIL) {
                    return rc;
                }
            }

            for (a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
                if (g->elems[g->alt_start[a]].kind == KVS_GRAM_DEAD) {
                    continue;
                }
                if (!g->nullable[r]
                    && !(g->alt_first[(size_t) a * 4 + (b >> 6)]
                         >> (b & 63) & 1))
                {
                    continue;
                }
                if (g->elems[g->alt_start[a]].kind == KVS_GRAM_END) {
                    c = cont;
                } else {
                    c = kvs_gram_intern(m, g->alt_start[a], cont, &rc);
                    if (c == KVS_GRAM_NIL) {
                        return rc;
                    }
                }
                if (kvs_gram_pwork_push(m, &np, c) != KVS_OK) {
                    return KVS_ENOMEM;
                }
            }
            break;

        default:
            /* a nullable rule ended: on to what follows it */
            if (kvs_gram_pwork_push(m, &np, parent) != KVS_OK) {
                return KVS_ENOMEM;
            }
            break;
        }
    }

    return KVS_OK;
}


int
kvs_gram_matcher_byte(kvs_gram_matcher_t *m, uint8_t b, kvs_err_t *err)
{
    int                     rc;
    uint32_t                i, id, nw, start, n;
    kvs_gram_level_t       *top;
    const kvs_gram_elem_t  *e;

    top = &m->lv[m->n_lv - 1];

    if (!(top->next[b >> 6] >> (b & 63) & 1)) {
        return err != NULL
               ? kvs_err_set(err, KVS_EFORMAT,
                             "byte 0x%02x is not allowed here", b)
               : KVS_EFORMAT;
    }

    start = top->front;
    n = top->n_front;

    if (kvs_gram_level_push(m) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "matcher: out of memory");
    }

    rc = KVS_OK;
    nw = 0;

    /* a fresh stamp for kvs_gram_predict's visits */
    if (++m->epoch == 0) {
        memset(m->marks, 0, (size_t) m->cap_nodes * sizeof(uint32_t));
        m->epoch = 1;
    }

    for (i = 0; i < n; i++) {
        id = m->front[start + i];
        e = &m->g->elems[m->nodes[id].pos];

        if (e->kind == KVS_GRAM_RULE) {
            if (m->g->first[(size_t) e->rule * 4 + (b >> 6)]
                >> (b & 63) & 1)
            {
                rc = kvs_gram_predict(m, id, b, &nw);
                if (rc != KVS_OK) {
                    break;
                }
            }
            continue;
        }

        if (b < e->lo || b > e->hi) {
            continue;
        }

        if (m->g->elems[m->nodes[id].pos + 1].kind == KVS_GRAM_END) {
            /* the alternative ends with this byte: return to the parent */
            id = m->nodes[id].parent;
        } else {
            id = kvs_gram_intern(m, m->nodes[id].pos + 1,
                                 m->nodes[id].parent, &rc);
            if (id == KVS_GRAM_NIL) {
                break;
            }
        }

        if (kvs_gram_work_push(m, &nw, id) != KVS_OK) {
            rc = KVS_ENOMEM;
            break;
        }
    }

    if (rc == KVS_OK) {
        rc = kvs_gram_close(m, nw);
    }

    if (rc != KVS_OK) {
        kvs_gram_level_pop(m);
        return kvs_err_set(err, rc, "matcher: %s",
                           rc == KVS_ETOOLONG
                           ? "the parse passes the stack caps"
                           : "out of memory");
    }

    return KVS_OK;
}


int
kvs_gram_matcher_feed(kvs_gram_matcher_t *m, const void *p, size_t n,
    kvs_err_t *err)
{
    int             rc;
    size_t          i;
    const uint8_t  *b;

    b = p;

    for (i = 0; i < n; i++) {
        rc = kvs_gram_matcher_byte(m, b[i], err);
        if (rc != KVS_OK) {
            kvs_gram_matcher_rollback(m, i);
            (void) kvs_err_prefix(err, "at byte %zu", i);
            return rc;
        }
    }

    return KVS_OK;
}


void
kvs_gram_matcher_rollback(kvs_gram_matcher_t *m, size_t n)
{
    while (n-- > 0 && m->n_lv > 1) {
        kvs_gram_level_pop(m);
    }
}


uint32_t
kvs_gram_matcher_broad(const kvs_gram_matcher_t *m, uint32_t min_bytes,
    uint32_t most)
{
    uint32_t                i, j, id, n, w, pos[KVS_GRAM_BROAD_MAX + 1];
    const uint64_t         *f;
    const kvs_gram_elem_t  *e;
    const kvs_gram_level_t *lv;

    lv = &m->lv[m->n_lv - 1];
    most = most < KVS_GRAM_BROAD_MAX ? most : KVS_GRAM_BROAD_MAX;
    n = 0;

    for (i = 0; i < lv->n_front && n <= most; i++) {
        id = m->front[lv->front + i];
        e = &m->g->elems[m->nodes[id].pos];

        /* a top is a byte range or a rule waiting for its FIRST set */
        if (e->kind == KVS_GRAM_BYTES) {
            w = (uint32_t) e->hi - e->lo + 1;
        } else if (e->kind == KVS_GRAM_RULE) {
            f = &m->g->first[(size_t) e->rule * 4];
            w = (uint32_t) (__builtin_popcountll(f[0])
                            + __builtin_popcountll(f[1])
                            + __builtin_popcountll(f[2])
                            + __builtin_popcountll(f[3]));
        } else {
            continue;
        }

        if (w < min_bytes) {
            continue;
        }

        /* stacks with one top share the walk of their entries' trie */
        for (j = 0; j < n && pos[j] != m->nodes[id].pos; j++) {
            /* seen? */
        }
        if (j == n) {
            pos[n++] = m->nodes[id].pos;
        }
    }

    return n;
}


int
kvs_gram_matcher_can_end(const kvs_gram_matcher_t *m)
{
    return m->lv[m->n_lv - 1].accept != 0;
}


int
kvs_gram_matcher_must_end(const kvs_gram_matcher_t *m)
{
    const kvs_gram_level_t  *lv;

    lv = &m->lv[m->n_lv - 1];

    return lv->accept && lv->n_front == 0;
}


void
kvs_gram_matcher_next(const kvs_gram_matcher_t *m, uint64_t set[4])
{
    memcpy(set, m->lv[m->n_lv - 1].next, 4 * sizeof(uint64_t));
}
