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
 * Kept across walks (kvs_gram_memo_keep, kmode).  A cut walk without
 * renaming may begin on the states of the walks before it: then a base
 * node is named by its chain of positions too (bmap, made in id order,
 * a parent being older, and again after every clear), and canonical
 * ids are the memo's own nodes (cbase 0), so a state's name is its
 * stacks' whole position chains down to SENT or NIL plus accept and
 * sent, which is all a byte step depends on besides the grammar and
 * the caps: a transition learnt in one walk is the matcher's step in
 * any walk on the same grammar and caps (kept_g, kept_lim; else the
 * memo is cleared, as for every other walk).
 *
 * Byte classes.  The matcher looks at a byte only through the
 * grammar's byte ranges (and the FIRST and next sets made of them), so
 * two bytes that every range holds alike (kvs_gram_t's bnext) step a
 * state alike, intern calls included: a transition learnt on a miss is
 * the transition of every byte of its class, and is filled in for them
 * (a string's body: ~15 classes instead of ~200 bytes to learn).
 *
 * The walk itself (kvs_gram_memo_walk) is a loop over the packed trie in
 * kvs_gram_memo_walk.c, the hit path inline (kvs_gram_memo_impl.h); a
 * new state's row starts with the bytes outside its next set refused;
 * subtrees the memo proves accepted are taken whole ("subtree skipping"
 * in kvs_gram_memo_skip.c says when that is exact).
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
#include "grammar/kvs_gram_memo_impl.h"


int
kvs_gram_memo_new(kvs_gram_memo_t **out, uint32_t max_states,
    uint32_t max_depth, kvs_err_t *err)
{
    uint32_t          b;
    kvs_gram_memo_t  *mo;

    *out = NULL;

    mo = calloc(1, sizeof(kvs_gram_memo_t));
    if (mo == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "memo: no memory");
    }

    mo->max_states = max_states < KVS_GRAM_MEMO_MAX ? max_states
                                                    : KVS_GRAM_MEMO_MAX;
    mo->max_depth = max_depth;
    mo->own.limit = UINT64_MAX;
    mo->wk = &mo->own;
    mo->bnd_min = KVS_GRAM_MEMO_BND_MIN;
    mo->bnd_len = KVS_GRAM_MEMO_BND_LEN;
    for (b = 0; b < 256; b++) {
        mo->grp[b] = kvs_gram_byte_group((uint8_t) b);
        mo->all_grp |= 1ULL << mo->grp[b];
        if (b >= 0x20 && b < 0x7f && b != '"' && b != '\\') {
            mo->text_grp |= 1ULL << mo->grp[b];
        }
    }

    mo->path = malloc(KVS_GRAM_MEMO_DEPTH(mo));
    mo->mpath = malloc(KVS_GRAM_MEMO_DEPTH(mo));
    mo->seen = calloc(KVS_GRAM_MEMO_DEPTH(mo), 1);
    mo->sid = malloc(KVS_GRAM_MEMO_DEPTH(mo) * sizeof(uint32_t));
    mo->cum = malloc(KVS_GRAM_MEMO_DEPTH(mo) * sizeof(uint64_t));
    mo->fz = calloc(KVS_GRAM_MEMO_DEPTH(mo), 3 * sizeof(uint32_t));

    if (mo->path == NULL || mo->mpath == NULL || mo->sid == NULL
        || mo->cum == NULL || mo->seen == NULL || mo->fz == NULL)
    {
        kvs_gram_memo_free(mo);
        return kvs_err_set(err, KVS_ENOMEM, "memo: no memory");
    }

    *out = mo;

    return KVS_OK;
}


uint32_t
kvs_gram_memo_states(const kvs_gram_memo_t *mo)
{
    return mo != NULL ? mo->max_states : 0;
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
    free(mo->s_bnd);
    free(mo->s_bndc);
    free(mo->s_loop);
    free(mo->s_lknown);
    free(mo->s_loopc);
    mo->s_loop = NULL;
    mo->s_lknown = NULL;
    mo->s_loopc = NULL;
    mo->s_sim = NULL;
    mo->s_simc = NULL;
    mo->s_bnd = NULL;
    mo->s_bndc = NULL;
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
    free(mo->fz);
    free(mo->sid);
    free(mo->cum);
    free(mo->map);
    free(mo->bmap);
    free(mo->scratch);
    free(mo->acc);
    free(mo->wbits);
    free(mo);
}


/* The hash slots for n entries: a power of two, at least 2n. */
static uint32_t
kvs_gram_memo_slots(size_t n)
{
    uint32_t  slots;

    for (slots = 1; slots < 2 * n; slots <<= 1) { /* void */ }

    return slots;
}


/* The tables' arrays, in the order of kvs_gram_memo_sizes(). */
enum {
    MT_NEXT, MT_CALLS, MT_KEY_OFF, MT_S_HASH, MT_S_SLOT, MT_S_FLAGS,
    MT_KEYS, MT_S_SLOTS, MT_CN, MT_CN_SLOT, MT_CN_SLOTS, MT_S_SIM,
    MT_S_SIMC, MT_S_BND, MT_S_BNDC, MT_S_LOOP, MT_S_LKNOWN, MT_S_LOOPC,
    MT_N
};


/* The bytes of each array of the tables for s states: the one place
 * their sizes are written (the allocation and kvs_gram_memo_bytes). */
static void
kvs_gram_memo_sizes(size_t s, size_t *z)
{
    size_t  per = s * KVS_GRAM_MEMO_PER;

    z[MT_NEXT] = s * 256 * sizeof(uint32_t);
    z[MT_CALLS] = s * 256 * sizeof(uint16_t);
    z[MT_KEY_OFF] = (s + 1) * sizeof(uint32_t);
    z[MT_S_HASH] = s * sizeof(uint64_t);
    z[MT_S_SLOT] = s * sizeof(uint32_t);
    z[MT_S_FLAGS] = s;
    z[MT_KEYS] = per * sizeof(uint32_t);
    z[MT_S_SLOTS] = (size_t) kvs_gram_memo_slots(s) * sizeof(uint32_t);
    z[MT_CN] = per * sizeof(kvs_gram_node_t);
    z[MT_CN_SLOT] = per * sizeof(uint32_t);
    z[MT_CN_SLOTS] = (size_t) kvs_gram_memo_slots(per) * sizeof(uint32_t);
    z[MT_S_SIM] = s * KVS_GRAM_CLS_N;
    z[MT_S_SIMC] = s * KVS_GRAM_CLS_N * sizeof(uint16_t);
    z[MT_S_BND] = s * KVS_GRAM_CLS_N * sizeof(uint16_t);
    z[MT_S_BNDC] = s * KVS_GRAM_CLS_N * sizeof(uint16_t);
    z[MT_S_LOOP] = s * sizeof(uint64_t);
    z[MT_S_LKNOWN] = s * sizeof(uint64_t);
    z[MT_S_LOOPC] = s * sizeof(uint16_t);
}


size_t
kvs_gram_memo_bytes(uint32_t max_states)
{
    size_t    z[MT_N], sum;
    unsigned  i;

    kvs_gram_memo_sizes(max_states < KVS_GRAM_MEMO_MAX ? max_states
                                                       : KVS_GRAM_MEMO_MAX,
                        z);
    for (i = 0, sum = 0; i < MT_N; i++) {
        sum += z[i];
    }

    return sum;
}


/* The tables, at their full (bounded) size: pages a walk never touches
 * are never mapped.  The hash slots start empty (zeroed). */
static int
kvs_gram_memo_tables(kvs_gram_memo_t *mo)
{
    size_t     s, z[MT_N];
    void      *p[MT_N];
    unsigned   i, ok;

    if (mo->next != NULL) {
        return KVS_OK;
    }

    s = mo->max_states;
    mo->cap_keys = (uint32_t) s * KVS_GRAM_MEMO_PER;
    mo->cap_cn = (uint32_t) s * KVS_GRAM_MEMO_PER;
    mo->s_mask = kvs_gram_memo_slots(s) - 1;
    mo->cn_mask = kvs_gram_memo_slots(mo->cap_cn) - 1;

    kvs_gram_memo_sizes(s, z);
    for (i = 0, ok = 1; i < MT_N; i++) {
        p[i] = i == MT_S_SLOTS || i == MT_CN_SLOTS ? calloc(z[i], 1)
                                                   : malloc(z[i]);
        ok &= p[i] != NULL;
    }

    mo->next = p[MT_NEXT];
    mo->calls = p[MT_CALLS];
    mo->key_off = p[MT_KEY_OFF];
    mo->s_hash = p[MT_S_HASH];
    mo->s_slot = p[MT_S_SLOT];
    mo->s_flags = p[MT_S_FLAGS];
    mo->keys = p[MT_KEYS];
    mo->s_slots = p[MT_S_SLOTS];
    mo->cn = p[MT_CN];
    mo->cn_slot = p[MT_CN_SLOT];
    mo->cn_slots = p[MT_CN_SLOTS];
    mo->s_sim = p[MT_S_SIM];
    mo->s_simc = p[MT_S_SIMC];
    mo->s_bnd = p[MT_S_BND];
    mo->s_bndc = p[MT_S_BNDC];
    mo->s_loop = p[MT_S_LOOP];
    mo->s_lknown = p[MT_S_LKNOWN];
    mo->s_loopc = p[MT_S_LOOPC];

    if (!ok) {
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
    mo->bmap_n = 0;

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
            return mo->cbase + k;
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

    return mo->cbase + k;
}


static inline uint32_t
kvs_gram_memo_canon(const kvs_gram_memo_t *mo, uint32_t id)
{
    if (id == KVS_GRAM_NIL || id == KVS_GRAM_SENT) {
        return id;
    }
    if (id < mo->nbase) {
        return mo->kmode ? mo->bmap[id] : id;
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

    if (mo->kmode && mo->bmap_n < mo->nbase) {
        /* the base nodes by their chains, in id order (a parent is
         * older), after a clear or at the walk's start */
        if (mo->nbase > mo->cap_bmap) {
            q = realloc(mo->bmap, (size_t) mo->nbase * sizeof(uint32_t));
            if (q == NULL) {
                return KVS_ENOMEM;
            }
            mo->bmap = q;
            mo->cap_bmap = mo->nbase;
        }
        for ( /* void */ ; mo->bmap_n < mo->nbase; mo->bmap_n++) {
            nd = &m->nodes[mo->bmap_n];
            cid = kvs_gram_memo_cnode(mo, nd->pos,
                                      kvs_gram_memo_canon(mo, nd->parent));
            if (cid == KVS_GRAM_MEMO_UNKNOWN) {
                return KVS_ETOOLONG;
            }
            mo->bmap[mo->bmap_n] = cid;
        }
    }

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
    memset(mo->s_bnd + (size_t) s * KVS_GRAM_CLS_N, 0,
           KVS_GRAM_CLS_N * sizeof(uint16_t));
    mo->s_loop[s] = 0;
    mo->s_lknown[s] = 0;
    mo->s_loopc[s] = 0;

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


/* A walk that begins on the states of the walks before: its path
 * forgotten, and the verdicts that a budget or a clear may have cut
 * short (NO) tried again; proved ones (closures, counts) and every
 * transition stay. */
static void
kvs_gram_memo_rewalk(kvs_gram_memo_t *mo)
{
    uint32_t  i;
    size_t    k;

    for (i = 0; i < KVS_GRAM_MEMO_DEPTH(mo); i++) {
        mo->sid[i] = KVS_GRAM_MEMO_UNKNOWN;
    }
    mo->map_n = 0;
    mo->bmap_n = 0;

    for (k = 0; k < (size_t) mo->n_states * KVS_GRAM_CLS_N; k++) {
        if (mo->s_sim[k] == KVS_GRAM_MEMO_SIM_NO) {
            mo->s_sim[k] = 0;
        }
        if (mo->s_bnd[k] < KVS_GRAM_MEMO_BND_VAL) {
            mo->s_bnd[k] = 0;
        }
    }

    mo->kept_walks++;
}


void
kvs_gram_memo_begin(kvs_gram_memo_t *mo, kvs_gram_matcher_t *m)
{
    int  kmode;

    kmode = mo->keep_req && mo->theta == 0;
    mo->keep_req = 0;

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

    if (mo->off) {
        mo->kmode = 0;
        mo->kept_g = NULL;
        return;
    }

    if (kmode && mo->kmode && mo->kept_g == m->g
        && mo->kept_lim.max_nodes == m->lim.max_nodes
        && mo->kept_lim.max_front == m->lim.max_front)
    {
        kvs_gram_memo_rewalk(mo);

    } else {
        mo->kmode = kmode;
        kvs_gram_memo_clear(mo);
    }

    mo->cbase = kmode ? 0 : mo->nbase;
    mo->kept_g = kmode ? m->g : NULL;
    mo->kept_lim = m->lim;
    mo->sid[0] = kvs_gram_memo_state(mo);
}


void
kvs_gram_memo_keep(kvs_gram_memo_t *mo, int on)
{
    mo->keep_req = on;
}


uint64_t
kvs_gram_memo_kept(const kvs_gram_memo_t *mo)
{
    return mo->kept_walks;
}


void
kvs_gram_memo_end(kvs_gram_memo_t *mo)
{
    kvs_gram_matcher_rollback(mo->m, mo->fed);
    mo->fed = 0;
    mo->map_n = 0;
}


void
kvs_gram_memo_work(kvs_gram_memo_t *mo, kvs_gram_work_t *wk)
{
    mo->wk = wk != NULL ? wk : &mo->own;
}


/* The byte on the real matcher, remembered when both ends are named. */
static int
kvs_gram_memo_miss_step(kvs_gram_memo_t *mo, uint32_t depth, uint8_t b,
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


/* A miss counts the stack nodes its steps made (the replay of the path
 * to the parent's state included) into the mask's work. */
int
kvs_gram_memo_miss(kvs_gram_memo_t *mo, uint32_t depth, uint8_t b,
    uint32_t *sent)
{
    int       rc;
    uint64_t  before;

    before = mo->m->interns;
    rc = kvs_gram_memo_miss_step(mo, depth, b, sent);
    mo->wk->used += mo->m->interns - before;

    return rc;
}


int
kvs_gram_memo_step(kvs_gram_memo_t *mo, uint32_t depth, uint8_t b,
    uint32_t *sent)
{
    return kvs_gram_memo_go(mo, depth, b, kvs_gram_memo_room(mo), sent);
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
 * walk does not go below depth theta for them: kvs_gram_ind.c walks
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
