/*
 * kvs_gram_memo: the trie walk's transition memo.
 *
 * Owns kvs_gram_memo_t.  A mask is a depth-first walk of the vocabulary
 * trie with the matcher (kvs_gram_mask.c); each trie node is the byte
 * step of the matcher from the state its parent left.  Inside a string
 * nearly all those steps lead back to a few dozen states, so the memo
 * keeps, for the one walk under way, next[state][byte] and feeds the
 * matcher only on a miss: it then rolls the matcher back to the common
 * prefix of the bytes it holds and the walk's path, feeds the rest of
 * the path, and takes the byte.
 *
 * What names a state.  The nodes that existed when the walk began (ids
 * below nbase) stay alive and unchanged all walk; the walk makes and
 * drops the others, and reuses their ids.  The matcher hash-conses
 * (pos, parent), so a stack is one id while it lives, and a node made in
 * the walk never equals an older one.  A stack is therefore named
 * exactly by its positions from the top down to its first node below
 * nbase (or NIL, or SENT), which the memo hash-conses in its own node
 * table ("canonical" ids: an id below nbase is itself, a memo node k is
 * nbase + k).  A state is the sorted canonical ids of its frontier plus
 * accept and sent, compared word for word (a hash only finds the
 * candidates).  A byte step's result depends on nothing else but the
 * caps, so a transition seen once is the transition everywhere in the
 * walk.
 *
 * The caps, kept exact.  max_front depends on the state alone; a step
 * that breaches it (or runs out of memory) is refused on that path and
 * never remembered.  The node cap depends on the path (how many nodes
 * the path's levels made), so a remembered step is used only where it
 * cannot have reached the cap: a step makes at most as many nodes as it
 * calls kvs_gram_intern (the matcher's interns count, a function of the
 * state and the byte), cum[d] bounds the nodes the path to depth d made
 * (exact where the matcher was really fed, plus the steps' counts where
 * not), and a hit is taken only if nbase + cum[d - 1] + calls is within
 * max_nodes; otherwise it is a miss, computed on the real matcher.
 *
 * Invariants: the matcher holds mpath[0 .. fed) past the walk's start;
 * map[0 .. map_n) are the canonical ids of matcher nodes nbase ..
 * nbase + map_n - 1, all alive; sid[d] is the state at path depth d or
 * UNKNOWN; a row of next[] exists for every state; at most max_states
 * states, 64 * max_states key words and canonical nodes, past which
 * everything is cleared (every sid UNKNOWN) and the walk goes on.
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_grammar.h"


#define KVS_GRAM_MEMO_UNKNOWN  UINT32_MAX
#define KVS_GRAM_MEMO_REFUSED  1          /* next[]: 0 unknown, 1 refused,
                                             s + 2 state s */
#define KVS_GRAM_MEMO_PER      64         /* key words, nodes per state */
#define KVS_GRAM_MEMO_MAX      65536      /* max_states at most */


struct kvs_gram_memo_s {
    uint32_t             max_states;
    kvs_gram_matcher_t  *m;
    uint32_t             nbase;           /* m's nodes when the walk began */
    uint32_t             fed;
    uint32_t             max_depth;
    int                  off;             /* plain steps for this walk */

    uint8_t             *path;            /* [max_depth] the walk's path */
    uint8_t             *mpath;           /* [max_depth] bytes m holds */
    uint32_t            *sid;             /* [max_depth + 1] */
    uint64_t            *cum;             /* [max_depth + 1] */

    /* states: rows of next[] and calls[], keys in one pool */
    uint32_t            *next;            /* [max_states * 256] */
    uint16_t            *calls;           /* [max_states * 256] */
    uint32_t            *key_off;         /* [max_states + 1] */
    uint64_t            *s_hash;
    uint32_t            *s_slot;          /* where each state sits */
    uint8_t             *s_flags;         /* 1 accept, 2 sent */
    uint32_t             n_states;
    uint32_t            *keys;
    uint32_t             n_keys, cap_keys;
    uint32_t            *s_slots;         /* hash -> state + 1 */
    uint32_t             s_mask;

    /* canonical nodes above nbase: (pos, canonical parent) */
    kvs_gram_node_t     *cn;
    uint32_t            *cn_slot;
    uint32_t             n_cn, cap_cn;
    uint32_t            *cn_slots;        /* hash -> node + 1 */
    uint32_t             cn_mask;

    uint32_t            *map;             /* matcher id - nbase -> canon */
    uint32_t             map_n, cap_map;
    uint32_t            *scratch;         /* a key being made */
    uint32_t             cap_scratch;

    uint64_t             hits, misses, made, clears;
};


int
kvs_gram_memo_new(kvs_gram_memo_t **out, uint32_t max_states,
    uint32_t max_depth, kvs_err_t *err)
{
    kvs_gram_memo_t  *mo;

    *out = NULL;

    mo = calloc(1, sizeof(kvs_gram_memo_t));
    if (mo == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "memo: no memory");
    }

    mo->max_states = max_states < KVS_GRAM_MEMO_MAX ? max_states
                                                    : KVS_GRAM_MEMO_MAX;
    mo->max_depth = max_depth;
    mo->path = malloc((size_t) max_depth + 1);
    mo->mpath = malloc((size_t) max_depth + 1);
    mo->sid = malloc(((size_t) max_depth + 1) * sizeof(uint32_t));
    mo->cum = malloc(((size_t) max_depth + 1) * sizeof(uint64_t));

    if (mo->path == NULL || mo->mpath == NULL || mo->sid == NULL
        || mo->cum == NULL)
    {
        kvs_gram_memo_free(mo);
        return kvs_err_set(err, KVS_ENOMEM, "memo: no memory");
    }

    *out = mo;

    return KVS_OK;
}


static void
kvs_gram_memo_tables_free(kvs_gram_memo_t *mo)
{
    free(mo->next);
    free(mo->calls);
    free(mo->key_off);
    free(mo->s_hash);
    free(mo->s_slot);
    free(mo->s_flags);
    free(mo->keys);
    free(mo->s_slots);
    free(mo->cn);
    free(mo->cn_slot);
    free(mo->cn_slots);
    mo->next = NULL;
    mo->calls = NULL;
    mo->key_off = NULL;
    mo->s_hash = NULL;
    mo->s_slot = NULL;
    mo->s_flags = NULL;
    mo->keys = NULL;
    mo->s_slots = NULL;
    mo->cn = NULL;
    mo->cn_slot = NULL;
    mo->cn_slots = NULL;
}


void
kvs_gram_memo_free(kvs_gram_memo_t *mo)
{
    if (mo == NULL) {
        return;
    }

    kvs_gram_memo_tables_free(mo);
    free(mo->path);
    free(mo->mpath);
    free(mo->sid);
    free(mo->cum);
    free(mo->map);
    free(mo->scratch);
    free(mo);
}


/* The tables, at their full (bounded) size: pages a walk never touches
 * are never mapped. */
static int
kvs_gram_memo_tables(kvs_gram_memo_t *mo)
{
    size_t    s;
    uint32_t  slots;

    if (mo->next != NULL) {
        return KVS_OK;
    }

    s = mo->max_states;
    mo->cap_keys = (uint32_t) s * KVS_GRAM_MEMO_PER;
    mo->cap_cn = (uint32_t) s * KVS_GRAM_MEMO_PER;

    for (slots = 1; slots < 2 * s; slots <<= 1) { /* void */ }
    mo->s_mask = slots - 1;
    for (slots = 1; slots < 2 * (size_t) mo->cap_cn; slots <<= 1) {
        /* void */
    }
    mo->cn_mask = slots - 1;

    mo->next = malloc(s * 256 * sizeof(uint32_t));
    mo->calls = malloc(s * 256 * sizeof(uint16_t));
    mo->key_off = malloc((s + 1) * sizeof(uint32_t));
    mo->s_hash = malloc(s * sizeof(uint64_t));
    mo->s_slot = malloc(s * sizeof(uint32_t));
    mo->s_flags = malloc(s);
    mo->keys = malloc((size_t) mo->cap_keys * sizeof(uint32_t));
    mo->s_slots = calloc((size_t) mo->s_mask + 1, sizeof(uint32_t));
    mo->cn = malloc((size_t) mo->cap_cn * sizeof(kvs_gram_node_t));
    mo->cn_slot = malloc((size_t) mo->cap_cn * sizeof(uint32_t));
    mo->cn_slots = calloc((size_t) mo->cn_mask + 1, sizeof(uint32_t));

    if (mo->next == NULL || mo->calls == NULL || mo->key_off == NULL
        || mo->s_hash == NULL || mo->s_slot == NULL || mo->s_flags == NULL
        || mo->keys == NULL || mo->s_slots == NULL || mo->cn == NULL
        || mo->cn_slot == NULL || mo->cn_slots == NULL)
    {
        kvs_gram_memo_tables_free(mo);
        return KVS_ENOMEM;
    }

    mo->key_off[0] = 0;

    return KVS_OK;
}


/* Forgets every state and canonical node: O(what was made). */
static void
kvs_gram_memo_clear(kvs_gram_memo_t *mo)
{
    uint32_t  i;

    for (i = 0; i < mo->n_states; i++) {
        mo->s_slots[mo->s_slot[i]] = 0;
    }
    for (i = 0; i < mo->n_cn; i++) {
        mo->cn_slots[mo->cn_slot[i]] = 0;
    }

    mo->n_states = 0;
    mo->n_keys = 0;
    mo->n_cn = 0;
    mo->map_n = 0;

    for (i = 0; i <= mo->max_depth; i++) {
        mo->sid[i] = KVS_GRAM_MEMO_UNKNOWN;
    }
}


static uint64_t
kvs_gram_memo_mix(uint64_t h, uint32_t x)
{
    return (h ^ x) * 0x100000001b3ULL;
}


/* The canonical id of (pos, canonical parent), made if new;
 * KVS_GRAM_MEMO_UNKNOWN if the node table is full. */
static uint32_t
kvs_gram_memo_cnode(kvs_gram_memo_t *mo, uint32_t pos, uint32_t parent)
{
    uint32_t  j, k;

    j = (uint32_t) ((((uint64_t) pos << 32 | parent)
                     * 0x9E3779B97F4A7C15ULL) >> 32) & mo->cn_mask;

    while (mo->cn_slots[j] != 0) {
        k = mo->cn_slots[j] - 1;
        if (mo->cn[k].pos == pos && mo->cn[k].parent == parent) {
            return mo->nbase + k;
        }
        j = (j + 1) & mo->cn_mask;
    }

    if (mo->n_cn == mo->cap_cn) {
        return KVS_GRAM_MEMO_UNKNOWN;
    }

    k = mo->n_cn++;
    mo->cn[k].pos = pos;
    mo->cn[k].parent = parent;
    mo->cn_slot[k] = j;
    mo->cn_slots[j] = k + 1;

    return mo->nbase + k;
}


static inline uint32_t
kvs_gram_memo_canon(const kvs_gram_memo_t *mo, uint32_t id)
{
    if (id == KVS_GRAM_NIL || id == KVS_GRAM_SENT || id < mo->nbase) {
        return id;
    }

    return mo->map[id - mo->nbase];
}


/* Canonical ids for every matcher node above nbase: KVS_OK, or
 * KVS_ETOOLONG (the node table is full), KVS_ENOMEM. */
static int
kvs_gram_memo_map(kvs_gram_memo_t *mo)
{
    uint32_t                 n, c, *q, id, cid;
    const kvs_gram_node_t   *nd;
    kvs_gram_matcher_t      *m;

    m = mo->m;
    n = m->n_nodes - mo->nbase;

    if (n > mo->cap_map) {
        c = mo->cap_map ? mo->cap_map : 256;
        while (c < n) {
            c *= 2;
        }
        q = realloc(mo->map, (size_t) c * sizeof(uint32_t));
        if (q == NULL) {
            return KVS_ENOMEM;
        }
        mo->map = q;
        mo->cap_map = c;
    }

    /* in id order: a parent is older than its children */
    for ( /* void */ ; mo->map_n < n; mo->map_n++) {
        id = mo->nbase + mo->map_n;
        nd = &m->nodes[id];
        cid = kvs_gram_memo_cnode(mo, nd->pos,
                                  kvs_gram_memo_canon(mo, nd->parent));
        if (cid == KVS_GRAM_MEMO_UNKNOWN) {
            return KVS_ETOOLONG;
        }
        mo->map[mo->map_n] = cid;
    }

    return KVS_OK;
}


static int
kvs_gram_memo_u32_cmp(const void *a, const void *b)
{
    uint32_t  x = *(const uint32_t *) a, y = *(const uint32_t *) b;

    return x < y ? -1 : x > y;
}


/* The state of the matcher's newest level, made if new; UNKNOWN when
 * it cannot be named (the caps even after a clear, memory).  May clear
 * the memo (every sid UNKNOWN): the caller checks mo->clears. */
static uint32_t
kvs_gram_memo_state(kvs_gram_memo_t *mo)
{
    int                       rc, tries;
    uint32_t                  i, n, s, j, k, c, *q, flags;
    uint64_t                  h;
    const kvs_gram_level_t   *lv;
    kvs_gram_matcher_t       *m;

    m = mo->m;
    lv = &m->lv[m->n_lv - 1];
    n = lv->n_front;
    flags = (lv->accept ? 1 : 0) | (lv->sent ? 2 : 0);

    if (n > mo->cap_scratch) {
        c = mo->cap_scratch ? mo->cap_scratch : 64;
        while (c < n) {
            c *= 2;
        }
        q = realloc(mo->scratch, (size_t) c * sizeof(uint32_t));
        if (q == NULL) {
            return KVS_GRAM_MEMO_UNKNOWN;
        }
        mo->scratch = q;
        mo->cap_scratch = c;
    }

    h = 0;
    j = 0;

    for (tries = 0; tries < 2; tries++) {
        if (tries > 0) {
            /* past a cap: start over, this state first */
            kvs_gram_memo_clear(mo);
            mo->clears++;
        }

        rc = kvs_gram_memo_map(mo);
        if (rc == KVS_ETOOLONG) {
            continue;
        }
        if (rc != KVS_OK) {
            return KVS_GRAM_MEMO_UNKNOWN;
        }

        for (i = 0; i < n; i++) {
            mo->scratch[i] = kvs_gram_memo_canon(mo,
                                                 m->front[lv->front + i]);
        }
        qsort(mo->scratch, n, sizeof(uint32_t), kvs_gram_memo_u32_cmp);

        h = 0xcbf29ce484222325ULL ^ flags;
        for (i = 0; i < n; i++) {
            h = kvs_gram_memo_mix(h, mo->scratch[i]);
        }
        h = kvs_gram_memo_mix(h, n);

        j = (uint32_t) (h >> 20) & mo->s_mask;
        while (mo->s_slots[j] != 0) {
            s = mo->s_slots[j] - 1;
            if (mo->s_hash[s] == h && mo->s_flags[s] == flags
                && mo->key_off[s + 1] - mo->key_off[s] == n
                && memcmp(mo->keys + mo->key_off[s], mo->scratch,
                          (size_t) n * sizeof(uint32_t)) == 0)
            {
                return s;
            }
            j = (j + 1) & mo->s_mask;
        }

        if (mo->n_states < mo->max_states
            && n <= mo->cap_keys - mo->n_keys)
        {
            break;
        }
    }

    if (tries == 2) {
        return KVS_GRAM_MEMO_UNKNOWN;
    }

    s = mo->n_states++;
    k = mo->key_off[s];
    memcpy(mo->keys + k, mo->scratch, (size_t) n * sizeof(uint32_t));
    mo->n_keys = k + n;
    mo->key_off[s + 1] = k + n;
    mo->s_hash[s] = h;
    mo->s_flags[s] = (uint8_t) flags;
    mo->s_slot[s] = j;
    mo->s_slots[j] = s + 1;
    memset(mo->next + (size_t) s * 256, 0, 256 * sizeof(uint32_t));
    mo->made++;

    return s;
}


/* Rolls m back to the common prefix of what it holds and path[0 ..
 * depth), then feeds the rest of the path. */
static int
kvs_gram_memo_position(kvs_gram_memo_t *mo, uint32_t depth)
{
    int                  rc;
    uint32_t             c, lim, fed;
    kvs_gram_matcher_t  *m;

    m = mo->m;
    fed = mo->fed;
    lim = fed < depth ? fed : depth;

    for (c = 0; c < lim && mo->mpath[c] == mo->path[c]; c++) {
        /* the part m holds already */
    }

    if (fed > c) {
        kvs_gram_matcher_rollback(m, fed - c);
        fed = c;
        if (mo->map_n > m->n_nodes - mo->nbase) {
            mo->map_n = m->n_nodes - mo->nbase;
        }
    }

    while (fed < depth) {
        rc = kvs_gram_matcher_byte(m, mo->path[fed], NULL);
        if (rc != KVS_OK) {
            mo->fed = fed;
            return rc;
        }
        mo->mpath[fed] = mo->path[fed];
        fed++;
        mo->cum[fed] = m->n_nodes - mo->nbase;
    }

    mo->fed = fed;

    return KVS_OK;
}


void
kvs_gram_memo_begin(kvs_gram_memo_t *mo, kvs_gram_matcher_t *m)
{
    mo->m = m;
    mo->fed = 0;
    mo->nbase = m->n_nodes;
    mo->cum[0] = 0;
    mo->off = mo->max_states == 0;

    if (!mo->off
        && (kvs_gram_memo_tables(mo) != KVS_OK
            || (uint64_t) mo->nbase + mo->cap_cn >= KVS_GRAM_SENT))
    {
        mo->off = 1;
    }

    if (!mo->off) {
        kvs_gram_memo_clear(mo);
        mo->sid[0] = kvs_gram_memo_state(mo);
    }
}


void
kvs_gram_memo_end(kvs_gram_memo_t *mo)
{
    kvs_gram_matcher_rollback(mo->m, mo->fed);
    mo->fed = 0;
    mo->map_n = 0;
}


/* The byte on the real matcher, remembered when both ends are named. */
static int
kvs_gram_memo_miss(kvs_gram_memo_t *mo, uint32_t depth, uint8_t b,
    uint32_t *sent)
{
    int                  rc;
    uint32_t             s, t;
    uint64_t             before, calls, clears;
    kvs_gram_matcher_t  *m;

    m = mo->m;

    if (kvs_gram_memo_position(mo, depth - 1) != KVS_OK) {
        /* the path was taken before, so only memory can fail here */
        mo->off = 1;
        return 0;
    }

    if (mo->off) {
        rc = kvs_gram_matcher_byte(m, b, NULL);
        if (rc != KVS_OK) {
            return 0;
        }
        mo->mpath[mo->fed++] = b;
        *sent = m->lv[m->n_lv - 1].sent != 0;
        return 1;
    }

    mo->misses++;

    if (mo->sid[depth - 1] == KVS_GRAM_MEMO_UNKNOWN) {
        /* after a clear: name the parent from the matcher */
        mo->sid[depth - 1] = kvs_gram_memo_state(mo);
    }
    clears = mo->clears;

    before = m->interns;
    rc = kvs_gram_matcher_byte(m, b, NULL);
    calls = m->interns - before;

    s = mo->sid[depth - 1];

    if (rc != KVS_OK) {
        if (rc == KVS_EFORMAT && s != KVS_GRAM_MEMO_UNKNOWN) {
            /* a byte outside the state's next set: the state's own */
            mo->next[(size_t) s * 256 + b] = KVS_GRAM_MEMO_REFUSED;
        }
        return 0;
    }

    mo->mpath[mo->fed++] = b;
    mo->cum[depth] = m->n_nodes - mo->nbase;
    *sent = m->lv[m->n_lv - 1].sent != 0;

    t = kvs_gram_memo_state(mo);
    mo->sid[depth] = t;

    if (s != KVS_GRAM_MEMO_UNKNOWN && t != KVS_GRAM_MEMO_UNKNOWN
        && mo->clears == clears && calls < UINT16_MAX)
    {
        mo->next[(size_t) s * 256 + b] = t + 2;
        mo->calls[(size_t) s * 256 + b] = (uint16_t) calls;
    }

    return 1;
}


int
kvs_gram_memo_step(kvs_gram_memo_t *mo, uint32_t depth, uint8_t b,
    uint32_t *sent)
{
    uint32_t  s, x, c;

    mo->path[depth - 1] = b;

    if (!mo->off) {
        s = mo->sid[depth - 1];
        if (s != KVS_GRAM_MEMO_UNKNOWN) {
            x = mo->next[(size_t) s * 256 + b];
            if (x == KVS_GRAM_MEMO_REFUSED) {
                mo->hits++;
                return 0;
            }
            if (x != 0) {
                c = mo->calls[(size_t) s * 256 + b];
                if (mo->nbase + mo->cum[depth - 1] + c
                    <= mo->m->lim.max_nodes)
                {
                    mo->hits++;
                    mo->sid[depth] = x - 2;
                    mo->cum[depth] = mo->cum[depth - 1] + c;
                    *sent = mo->s_flags[x - 2] >> 1;
                    return 1;
                }
            }
        }
    }

    return kvs_gram_memo_miss(mo, depth, b, sent);
}


void
kvs_gram_memo_stats(const kvs_gram_memo_t *mo, uint64_t st[4])
{
    st[0] = mo->hits;
    st[1] = mo->misses;
    st[2] = mo->made;
    st[3] = mo->clears;
}
