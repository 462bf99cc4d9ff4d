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
 * Byte classes.  The matcher looks at a byte only through the
 * grammar's byte ranges (and the FIRST and next sets made of them), so
 * two bytes that every range holds alike (kvs_gram_t's bnext) step a
 * state alike, intern calls included: a transition learnt on a miss is
 * the transition of every byte of its class, and is filled in for them
 * (a string's body: ~15 classes instead of ~200 bytes to learn).
 *
 * The walk itself (kvs_gram_memo_walk) is a loop here over the packed
 * trie, the hit path inline; a new state's row starts with the bytes
 * outside its next set refused; subtrees the memo proves accepted are
 * taken whole ("subtree skipping" below says when that is exact).
 *
 * Invariants: the matcher holds mpath[0 .. fed) past the walk's start;
 * map[0 .. map_n) are the canonical ids of matcher nodes nbase ..
 * nbase + map_n - 1, all alive; sid[d] is the state at path depth d or
 * UNKNOWN; a row of next[] exists for every state, and a verdict of
 * s_sim[] is YES only for a pair of a proved closure; at most max_states
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
#define KVS_GRAM_MEMO_PAIRS    32         /* a closure's pairs at most */
#define KVS_GRAM_MEMO_DEPTH(mo) ((mo)->max_depth + KVS_GRAM_MEMO_PAIRS + 2)
                                          /* path slots: a walk's, then
                                             an exploration's below it */
#define KVS_GRAM_MEMO_SIM_YES  1
#define KVS_GRAM_MEMO_SIM_NO   2
#define KVS_GRAM_CLS_N         8          /* live class states */
#define KVS_GRAM_MEMO_FAM      0x80000000u /* a renamed position's name:
                                             this bit and its family */
#define KVS_GRAM_MEMO_GRPS     16         /* groups a renamed state holds
                                             at most */


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

    /* subtree skipping: per (state, class state) a verdict
     * (KVS_GRAM_MEMO_SIM_*) and the closure's bound on the nodes a step
     * makes; the pairs of the closure being explored; seen[d]: a prefix
     * of the path to depth d reached a cut stack's sentinel */
    int                  noskip;
    int                  nosim;           /* this walk: no more tries */
    uint8_t             *s_sim;           /* [max_states * 8] */
    uint16_t            *s_simc;          /* [max_states * 8] */
    uint32_t             pairs[KVS_GRAM_MEMO_PAIRS];
    uint32_t             n_pairs;
    uint8_t             *seen;            /* [KVS_GRAM_MEMO_DEPTH] */

    uint64_t             hits, misses, made, clears;
    uint64_t             skipped, skipped_nodes, proved, refuted;
    uint64_t             copied_nodes;    /* taken from a walk's source */

    /* counted repetitions renamed (kvs_gram_memo_rename): positions
     * with more than theta copies left are named by their family */
    uint32_t             theta;
    uint64_t             renamed;

    uint64_t             by_class;        /* transitions known from a
                                             byte of the same class */
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
    mo->path = malloc(KVS_GRAM_MEMO_DEPTH(mo));
    mo->mpath = malloc(KVS_GRAM_MEMO_DEPTH(mo));
    mo->seen = calloc(KVS_GRAM_MEMO_DEPTH(mo), 1);
    mo->sid = malloc(KVS_GRAM_MEMO_DEPTH(mo) * sizeof(uint32_t));
    mo->cum = malloc(KVS_GRAM_MEMO_DEPTH(mo) * sizeof(uint64_t));

    if (mo->path == NULL || mo->mpath == NULL || mo->sid == NULL
        || mo->cum == NULL || mo->seen == NULL)
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
    free(mo->s_sim);
    free(mo->s_simc);
    mo->s_sim = NULL;
    mo->s_simc = NULL;
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
    free(mo->seen);
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
    mo->s_sim = malloc(s * KVS_GRAM_CLS_N);
    mo->s_simc = malloc(s * KVS_GRAM_CLS_N * sizeof(uint16_t));

    if (mo->next == NULL || mo->calls == NULL || mo->key_off == NULL
        || mo->s_hash == NULL || mo->s_slot == NULL || mo->s_flags == NULL
        || mo->keys == NULL || mo->s_slots == NULL || mo->cn == NULL
        || mo->cn_slot == NULL || mo->cn_slots == NULL || mo->s_sim == NULL
        || mo->s_simc == NULL)
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

    for (i = 0; i < KVS_GRAM_MEMO_DEPTH(mo); i++) {
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


/* The name of a position in a state: itself, or with renaming on and
 * more than theta copies left, its family (kvs_gram_memo_rename says why
 * that is exact). */
static inline uint32_t
kvs_gram_memo_rpos(kvs_gram_memo_t *mo, uint32_t pos)
{
    const kvs_gram_t  *g;

    if (mo->theta == 0 || pos >= KVS_GRAM_MEMO_FAM) {
        return pos;
    }

    g = mo->m->g;
    if (kvs_gram_rep_count(g, pos) <= mo->theta) {
        return pos;
    }

    mo->renamed++;

    return KVS_GRAM_MEMO_FAM | g->rep_f[pos];
}


/* With renaming on: 1 if every position of the state's stacks with more
 * than theta copies left has the same count as the others of its group
 * (so that two states of one name differ by one shift per group), 0 if
 * not (the state is then left unnamed: its steps go to the matcher). */
static int
kvs_gram_memo_uniform(const kvs_gram_memo_t *mo,
    const kvs_gram_level_t *lv)
{
    uint32_t                  i, k, n, id, c, grp;
    uint32_t                  gs[KVS_GRAM_MEMO_GRPS], cs[KVS_GRAM_MEMO_GRPS];
    const kvs_gram_t         *g;
    const kvs_gram_matcher_t *m;

    m = mo->m;
    g = m->g;
    n = 0;

    for (i = 0; i < lv->n_front; i++) {
        for (id = m->front[lv->front + i];
             id != KVS_GRAM_NIL && id != KVS_GRAM_SENT;
             id = m->nodes[id].parent)
        {
            c = kvs_gram_rep_count(g, m->nodes[id].pos);
            if (c <= mo->theta) {
                continue;
            }
            grp = g->rfam[g->rep_f[m->nodes[id].pos]].grp;
            for (k = 0; k < n && gs[k] != grp; k++) {
                /* seen? */
            }
            if (k < n) {
                if (cs[k] != c) {
                    return 0;
                }
                continue;
            }
            if (n == KVS_GRAM_MEMO_GRPS) {
                return 0;
            }
            gs[n] = grp;
            cs[n++] = c;
        }
    }

    return 1;
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
        cid = kvs_gram_memo_cnode(mo, kvs_gram_memo_rpos(mo, nd->pos),
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
    uint32_t                  i, n, s, j, k, c, *q, flags, *row;
    uint64_t                  h;
    const kvs_gram_level_t   *lv;
    kvs_gram_matcher_t       *m;

    m = mo->m;
    lv = &m->lv[m->n_lv - 1];
    n = lv->n_front;
    flags = (lv->accept ? 1 : 0) | (lv->sent ? 2 : 0);

    if (mo->theta != 0 && !kvs_gram_memo_uniform(mo, lv)) {
        return KVS_GRAM_MEMO_UNKNOWN;
    }

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
    memset(mo->s_sim + (size_t) s * KVS_GRAM_CLS_N, 0, KVS_GRAM_CLS_N);

    /* a byte outside the level's next set is refused by the matcher's
     * first test, with nothing changed (kvs_gram_matcher_byte): known
     * now, so that most of a narrow state's row is hits from the start */
    row = mo->next + (size_t) s * 256;
    for (i = 0; i < 256; i++) {
        row[i] = lv->next[i >> 6] >> (i & 63) & 1 ? 0
                                                  : KVS_GRAM_MEMO_REFUSED;
    }
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
    mo->nosim = 0;

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
    uint8_t              c;
    uint16_t            *crow;
    uint32_t             s, t, *row;
    uint64_t             before, calls, clears;
    kvs_gram_matcher_t  *m;

    m = mo->m;

    if (kvs_gram_memo_position(mo, depth - 1) != KVS_OK) {
        /* the path was taken before, so only memory can fail here; or,
         * with renaming, a path longer than theta that the memo took
         * and the matcher does not: its tokens are not this walk's to
         * get right (kvs_gram_memo_rename), refusing is enough */
        mo->off = mo->theta == 0;
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
        /* and for every byte of b's class, which the step takes alike
         * (kvs_gram_t's bnext), where not known yet */
        row = mo->next + (size_t) s * 256;
        crow = mo->calls + (size_t) s * 256;
        c = b;
        do {
            if (c == b || row[c] == 0) {
                row[c] = t + 2;
                crow[c] = (uint16_t) calls;
                mo->by_class += c != b;
            }
            c = m->g->bnext[c];
        } while (c != b);
    }

    return 1;
}


/* Room for nodes the walk may make: a hit needs cum + calls <= room
 * (the matcher's node cap less the nodes alive when the walk began). */
static inline int64_t
kvs_gram_memo_room(const kvs_gram_memo_t *mo)
{
    return (int64_t) mo->m->lim.max_nodes - (int64_t) mo->nbase;
}


/* kvs_gram_memo_step() with the room given: the walk's loop inlines the
 * hit path. */
static inline int
kvs_gram_memo_go(kvs_gram_memo_t *mo, uint32_t depth, uint8_t b,
    int64_t room, uint32_t *sent)
{
    uint32_t  s, x;
    uint64_t  c;

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
                c = mo->cum[depth - 1] + mo->calls[(size_t) s * 256 + b];
                if ((int64_t) c <= room) {
                    mo->hits++;
                    mo->sid[depth] = x - 2;
                    mo->cum[depth] = c;
                    *sent = mo->s_flags[x - 2] >> 1;
                    return 1;
                }
            }
        }
    }

    return kvs_gram_memo_miss(mo, depth, b, sent);
}


int
kvs_gram_memo_step(kvs_gram_memo_t *mo, uint32_t depth, uint8_t b,
    uint32_t *sent)
{
    return kvs_gram_memo_go(mo, depth, b, kvs_gram_memo_room(mo), sent);
}


/* ---- subtree skipping ---------------------------------------------------
 *
 * Inside a JSON string nearly every trie node is accepted: a full walk
 * there steps ~270k nodes to refuse a few hundred.  The class automaton
 * below accepts the bytes of valid UTF-8 text without controls (< 0x20),
 * '"' and '\\', prefixes of a character included (its states: 0 between
 * characters, 1-7 inside one, by what the next byte may be; DEAD once
 * the bytes leave the class).  The trie records per node the
 * automaton's state q after the node's bytes from the root and whether
 * every node below it is alive (KVS_GRAM_CLS_ALL).
 *
 * The claim.  Let P be a set of pairs (memo state t, class state q) such
 * that for every pair and every byte b the automaton takes from q, the
 * memo holds a remembered transition t --b--> t' with (t', q after b)
 * in P, each of them making at most c nodes (its kvs_gram_intern calls).
 * Then from any point of the walk where the matcher is in state t with
 * (t, q) in P and the path's node bound is cum, every byte string w that
 * the automaton takes from q with cum + |w| * c <= room is accepted,
 * and the plain walk takes every prefix of it: by induction on |w|, the
 * first byte's transition is remembered, so it is exactly the matcher's
 * step there (the memo's argument above), its hit rule cum + calls <=
 * room holds, the bound grows by at most c, and the rest starts from a
 * pair of P again.  A node i at depth d with KVS_GRAM_CLS_ALL, whose
 * state t (after its byte) has (t, q_i) in such a P with cum[d] +
 * height_i * c <= room, therefore has its whole subtree accepted (every
 * string below it is at most height_i bytes long and the automaton takes
 * it from q_i): the walk sets all its tokens,
 * ids[cum_i .. cum_end), and goes on at its end without stepping them.
 * Nothing is skipped in a cut stack's walk that it would have to see: a
 * skipped subtree holds no refusal, and the sentinel marks (seen[]) are
 * read only at refusals below the node, never beside it.
 *
 * Finding P: a depth-first exploration from (t, q) that takes every
 * byte of q's class through the memo (kvs_gram_memo_go: hits, or the
 * matcher on a miss, along a path below the node's; the path arrays
 * have KVS_GRAM_MEMO_PAIRS spare slots for it) and stops at the first
 * refusal, unremembered step, clear of the memo, or pair past
 * KVS_GRAM_MEMO_PAIRS: it proves P or gives up.  Its verdicts are kept
 * per (state, q) for the walk (a state's are reset when it is made, so
 * a clear forgets them): YES for every pair of a proved P, with its c;
 * NO for the pairs on the way to a failure.  NO is only ever a reason
 * not to skip, so a budget's failure costs time, not bits.  A bounded
 * string (x{0,n}) never closes: its state changes with every character,
 * so it is refuted within 32 pairs and walked node by node.
 */

uint8_t
kvs_gram_memo_class(uint8_t q, uint8_t b)
{
    switch (q) {

    case 0:
        if (b >= 0x20 && b < 0x80) {
            return b == '"' || b == '\\' ? KVS_GRAM_CLS_DEAD : 0;
        }
        if (b >= 0xc2 && b <= 0xdf) {
            return 1;
        }
        if (b == 0xe0) {
            return 2;
        }
        if (b == 0xed) {
            return 4;
        }
        if (b >= 0xe1 && b <= 0xef) {
            return 3;
        }
        if (b == 0xf0) {
            return 5;
        }
        if (b >= 0xf1 && b <= 0xf3) {
            return 6;
        }
        return b == 0xf4 ? 7 : KVS_GRAM_CLS_DEAD;

    case 1:                                 /* one more: 80-BF */
        return b >= 0x80 && b <= 0xbf ? 0 : KVS_GRAM_CLS_DEAD;
    case 2:                                 /* E0: A0-BF, then one */
        return b >= 0xa0 && b <= 0xbf ? 1 : KVS_GRAM_CLS_DEAD;
    case 3:                                 /* two more */
        return b >= 0x80 && b <= 0xbf ? 1 : KVS_GRAM_CLS_DEAD;
    case 4:                                 /* ED: 80-9F (no surrogates) */
        return b >= 0x80 && b <= 0x9f ? 1 : KVS_GRAM_CLS_DEAD;
    case 5:                                 /* F0: 90-BF, then two */
        return b >= 0x90 && b <= 0xbf ? 3 : KVS_GRAM_CLS_DEAD;
    case 6:                                 /* three more */
        return b >= 0x80 && b <= 0xbf ? 3 : KVS_GRAM_CLS_DEAD;
    case 7:                                 /* F4: 80-8F, then two */
        return b >= 0x80 && b <= 0x8f ? 3 : KVS_GRAM_CLS_DEAD;
    default:
        return KVS_GRAM_CLS_DEAD;
    }
}


void
kvs_gram_memo_skip(kvs_gram_memo_t *mo, int on)
{
    mo->noskip = !on;
}


/* The pair (sid[depth], q), already in pairs[]: every byte of q's class
 * taken, each new pair explored in turn.  1: all closed so far (*c the
 * largest step), 0: given up (the pairs on the way to it marked NO). */
static int
kvs_gram_memo_explore(kvs_gram_memo_t *mo, uint32_t depth, uint8_t q,
    int64_t room, uint64_t clears, uint32_t *c)
{
    uint8_t   q2, v;
    uint32_t  t, t2, b, j, sent, x;

    t = mo->sid[depth];

    for (b = 0; b < 256; b++) {
        q2 = kvs_gram_memo_class(q, (uint8_t) b);
        if (q2 == KVS_GRAM_CLS_DEAD) {
            continue;
        }

        if (!kvs_gram_memo_go(mo, depth + 1, (uint8_t) b, room, &sent)
            || mo->clears != clears || mo->off)
        {
            return 0;
        }

        t2 = mo->sid[depth + 1];
        x = mo->next[(size_t) t * 256 + b];
        if (t2 == KVS_GRAM_MEMO_UNKNOWN || x != t2 + 2) {
            return 0;                       /* not remembered */
        }
        if (mo->calls[(size_t) t * 256 + b] > *c) {
            *c = mo->calls[(size_t) t * 256 + b];
        }

        for (j = 0; j < mo->n_pairs && mo->pairs[j] != (t2 << 4 | q2); j++) {
            /* in this closure already? */
        }
        if (j < mo->n_pairs) {
            continue;
        }

        v = mo->s_sim[(size_t) t2 * KVS_GRAM_CLS_N + q2];
        if (v == KVS_GRAM_MEMO_SIM_YES) {
            /* a closure proved before: this one's bound covers it */
            if (mo->s_simc[(size_t) t2 * KVS_GRAM_CLS_N + q2] > *c) {
                *c = mo->s_simc[(size_t) t2 * KVS_GRAM_CLS_N + q2];
            }
            continue;
        }
        if (v == KVS_GRAM_MEMO_SIM_NO || mo->n_pairs == KVS_GRAM_MEMO_PAIRS
            || depth + 2 >= KVS_GRAM_MEMO_DEPTH(mo))
        {
            return 0;
        }

        mo->pairs[mo->n_pairs++] = t2 << 4 | q2;

        if (!kvs_gram_memo_explore(mo, depth + 1, q2, room, clears, c)) {
            if (mo->clears == clears) {
                mo->s_sim[(size_t) t2 * KVS_GRAM_CLS_N + q2] =
                    KVS_GRAM_MEMO_SIM_NO;
            }
            return 0;
        }
    }

    return 1;
}


/* 1 if the subtree below the node just taken at depth (class state q,
 * subtree height h) is accepted whole (the claim above), 0 if it must
 * be walked. */
static int
kvs_gram_memo_closed(kvs_gram_memo_t *mo, uint32_t depth, uint8_t q,
    uint32_t h, int64_t room)
{
    uint8_t   v;
    uint32_t  t, j, c;
    uint64_t  clears;
    size_t    k;

    t = mo->sid[depth];
    if (mo->off || mo->nosim || t == KVS_GRAM_MEMO_UNKNOWN) {
        return 0;
    }

    k = (size_t) t * KVS_GRAM_CLS_N + q;
    v = mo->s_sim[k];

    if (v == 0) {
        if (mo->n_states + KVS_GRAM_MEMO_PAIRS > mo->max_states) {
            /* a closure could clear the memo: not worth it here */
            return 0;
        }

        clears = mo->clears;
        c = 0;
        mo->pairs[0] = t << 4 | q;
        mo->n_pairs = 1;

        if (kvs_gram_memo_explore(mo, depth, q, room, clears, &c)) {
            for (j = 0; j < mo->n_pairs; j++) {
                k = (size_t) (mo->pairs[j] >> 4) * KVS_GRAM_CLS_N
                    + (mo->pairs[j] & 15);
                mo->s_sim[k] = KVS_GRAM_MEMO_SIM_YES;
                mo->s_simc[k] = (uint16_t) c;
            }
            mo->proved++;

        } else if (mo->clears == clears) {
            mo->s_sim[(size_t) t * KVS_GRAM_CLS_N + q] = KVS_GRAM_MEMO_SIM_NO;
            mo->refuted++;

        } else {
            /* the states were renamed under it: nothing to remember, and
             * a memo that fills up is no place for closures this walk */
            mo->nosim = 1;
            return 0;
        }

        k = (size_t) t * KVS_GRAM_CLS_N + q;
        v = mo->s_sim[k];
    }

    /* every string below is at most h bytes long */
    return v == KVS_GRAM_MEMO_SIM_YES
           && (int64_t) (mo->cum[depth] + (uint64_t) h * mo->s_simc[k])
              <= room;
}


/* The subtree of node i taken from the source (its tokens are all
 * shorter than src->len): its dependent ranges reported (its accepted
 * bits are taken at the end of the walk, kvs_gram_memo_short); *r is
 * the first source range that may still meet a later subtree (the walk
 * goes in sorted order). */
static int
kvs_gram_memo_copy(const kvs_gram_walk_src_t *src, uint32_t lo, uint32_t hi,
    kvs_gram_walk_dep_pt dep, void *arg, uint32_t *r)
{
    int        rc;
    uint32_t   k, a, b;

    if (dep == NULL) {
        return KVS_OK;
    }

    while (*r < src->n_ranges && src->ranges[2 * *r + 1] <= lo) {
        (*r)++;
    }

    for (k = *r; k < src->n_ranges && src->ranges[2 * k] < hi; k++) {
        a = src->ranges[2 * k] > lo ? src->ranges[2 * k] : lo;
        b = src->ranges[2 * k + 1] < hi ? src->ranges[2 * k + 1] : hi;
        rc = dep(arg, a, b);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}


/*
 * The source's accepted tokens shorter than src->len, in id order, one
 * word at a time.  Those of the subtrees the walk copied are what it
 * would have set; any other is on a node the walk stepped (and set
 * already) or below a refusal or a skipped subtree, where both
 * classifications are exact for it and so agree (set, or left clear).
 */
static void
kvs_gram_memo_short(const kvs_gram_walk_src_t *src,
    const kvs_gram_vocab_t *gv, uint32_t *bits)
{
    uint32_t  w, x, y, j, words;

    words = (gv->n_tokens + 31) / 32;

    for (w = 0; w < words; w++) {
        x = src->bits[w] & ~bits[w];
        for (y = 0; x != 0; x &= x - 1) {
            j = (uint32_t) __builtin_ctz(x);
            if (gv->len[w * 32 + j] < src->len) {
                y |= 1u << j;
            }
        }
        bits[w] |= y;
    }
}


int
kvs_gram_memo_walk(kvs_gram_memo_t *mo, kvs_gram_matcher_t *m,
    const kvs_gram_vocab_t *gv, uint32_t *bits, kvs_gram_walk_dep_pt dep,
    void *arg, const kvs_gram_walk_src_t *src)
{
    int                      rc;
    uint32_t                 i, n, d, k, hi, next, id, sent, r;
    int64_t                  room;
    const int32_t           *ids;
    const kvs_gram_tnode_t  *nd;

    kvs_gram_memo_begin(mo, m);

    nd = gv->t_node;
    ids = gv->ids;
    n = gv->n_nodes;
    room = kvs_gram_memo_room(mo);
    rc = KVS_OK;
    mo->seen[0] = 0;

    r = 0;

    for (i = 0; i < n; i = next) {
        d = nd[i].depth;

        if (mo->theta != 0 && d > mo->theta) {
            /* tokens longer than theta: not this walk's to get right */
            next = nd[i].end;
            continue;
        }

        if (src != NULL && (uint32_t) d + nd[i].height < src->len) {
            /* every token below is shorter than len bytes */
            next = nd[i].end;
            rc = kvs_gram_memo_copy(src, nd[i].cum, nd[next].cum, dep, arg,
                                    &r);
            if (rc != KVS_OK) {
                break;
            }
            mo->copied_nodes += next - i;
            continue;
        }

        if (!kvs_gram_memo_go(mo, d, nd[i].byte, room, &sent)) {
            /* refused, or a cap on this branch: refusing a token is
             * always safe for the output's validity */
            if (dep != NULL && mo->seen[d - 1]) {
                rc = dep(arg, nd[i].cum, nd[nd[i].end].cum);
                if (rc != KVS_OK) {
                    break;
                }
            }
            next = nd[i].end;
            continue;
        }

        if (dep != NULL) {
            mo->seen[d] = (uint8_t) (mo->seen[d - 1] | (sent != 0));
        }

        next = i + 1;
        hi = nd[next].cum;

        if ((nd[i].cls & KVS_GRAM_CLS_ALL) && nd[i].end > next
            && !mo->noskip
            && kvs_gram_memo_closed(mo, d, nd[i].cls & KVS_GRAM_CLS_STATE,
                                    nd[i].height, room))
        {
            mo->skipped++;
            mo->skipped_nodes += nd[i].end - next;
            next = nd[i].end;
            hi = nd[next].cum;
        }

        for (k = nd[i].cum; k < hi; k++) {
            id = (uint32_t) ids[k];
            bits[id >> 5] |= 1u << (id & 31);
        }
    }

    kvs_gram_memo_end(mo);

    if (src != NULL && rc == KVS_OK) {
        kvs_gram_memo_short(src, gv, bits);
    }

    return rc;
}


/*
 * Renaming counted repetitions.  Inside a bounded string (x{0,n},
 * kvs_gram_rep.c) every character takes the count down by one, so the
 * memo's states never recur and subtree skipping finds no closure: a
 * cut walk from a bounded string's key steps the whole trie (~300k
 * nodes) where a free string's steps ~9k.  With theta set, a state's
 * stacks name each position with more than theta copies left by its
 * family alone (KVS_GRAM_MEMO_FAM | family), so the states of a string
 * far from its bound recur as a free string's do.
 *
 * Why the walk stays exact for every token of at most theta bytes.
 * Call two states of one name mates.  A state is named only if, in
 * each group (kvs_gram_rfam_t), its positions with more than theta
 * copies left all have one count (kvs_gram_memo_uniform), so mates
 * differ by one shift per group applied to those positions only: by
 * kvs_gram_rep.c's argument (each frame renamed on its own; a shift is
 * one-to-one and never maps a renamed position onto a kept one, so
 * stacks that meet in one run meet in the other) their runs over any
 * string of at most theta bytes have the same verdicts, `sent` flags,
 * frontier sizes and kvs_gram_intern calls (the caps act alike),
 * since each such count needs more than theta bytes to run out.  Now
 * let S be a state the memo named N and w a string of at most theta
 * bytes; by induction on |w|, the memo's verdict for w from N is the
 * matcher's from S: N's transition on w's first byte b was taken from
 * some mate S' (refused iff S' refuses b, as S does), to the name N' of
 * S' after b, and the induction gives the memo's verdict on the rest
 * from N' as the matcher's from S' after b, which is S's after b since
 * bw is at most theta bytes.  The walk names its first state, and
 * every state it meets on a miss, so every token of at most theta bytes
 * gets the matcher's verdict; the closures of subtree skipping are
 * proved through the same transitions.  Longer tokens may not, and the
 * walk does not go below depth theta for them: kvs_gram_mask.c walks
 * again with a larger theta, taking the short ones from this walk
 * (kvs_gram_walk_src_t).  kvs_gram_memo_renamed tells whether a walk
 * renamed anything at all.
 */
void
kvs_gram_memo_rename(kvs_gram_memo_t *mo, uint32_t theta)
{
    mo->theta = theta;
}


uint64_t
kvs_gram_memo_renamed(const kvs_gram_memo_t *mo)
{
    return mo->renamed;
}


void
kvs_gram_memo_skips(const kvs_gram_memo_t *mo, uint64_t st[4])
{
    st[0] = mo->skipped;
    st[1] = mo->skipped_nodes;
    st[2] = mo->proved;
    st[3] = mo->refuted;
}


uint64_t
kvs_gram_memo_by_class(const kvs_gram_memo_t *mo)
{
    return mo->by_class;
}


uint64_t
kvs_gram_memo_copied(const kvs_gram_memo_t *mo)
{
    return mo->copied_nodes;
}


void
kvs_gram_memo_stats(const kvs_gram_memo_t *mo, uint64_t st[4])
{
    st[0] = mo->hits;
    st[1] = mo->misses;
    st[2] = mo->made;
    st[3] = mo->clears;
}
