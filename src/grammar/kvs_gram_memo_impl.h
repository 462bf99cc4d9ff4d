/*
 * kvs_gram_memo_impl: what the transition memo's three files share
 * (kvs_gram_memo.c: state naming, the tables, a step on a miss,
 * renaming; kvs_gram_memo_walk.c: the walk loop, sources, the accepted
 * tokens set from ranges; kvs_gram_memo_skip.c: subtree, counted and
 * loop skipping).  Internal to src/grammar.
 *
 * kvs_gram_memo_t's fields and invariants are kvs_gram_memo.c's (its
 * opening comment); the hit path of a step (kvs_gram_memo_go) and the
 * recording of an accepted range (kvs_gram_memo_acc) are here, inline,
 * so that the walk's loop takes them without a call.
 */

#ifndef KVS_GRAM_MEMO_IMPL_H
#define KVS_GRAM_MEMO_IMPL_H

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
    kvs_gram_work_t     *wk;              /* what the steps count into:
                                             own, or a masker's */
    kvs_gram_work_t      own;

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

    /* kept across walks (kvs_gram_memo_keep): with kmode on, a base
     * node (id < nbase) is named by its chain too (bmap, built in id
     * order after each clear: bmap_n), canonical ids are memo nodes
     * (cbase 0), and the states of the walks before, on the grammar and
     * caps of kept_*, stay */
    int                  keep_req;        /* the next walk may keep */
    int                  kmode;           /* this walk names full chains */
    uint32_t             cbase;           /* canonical id of memo node 0 */
    uint32_t            *bmap;            /* [nbase] base id -> canon */
    uint32_t             bmap_n, cap_bmap;
    const kvs_gram_t    *kept_g;
    kvs_gram_mlimits_t   kept_lim;
    uint64_t             kept_walks;      /* walks that began on states
                                             an earlier walk made */
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

    /* the walk's fan lists by depth (kvs_gram_vocab_t.fan_*): fz[3 d]
     * the next child of the list whose children are at depth d, fz[3 d
     * + 1] its end, fz[3 d + 2] its parent's subtree end (a node below
     * it is that parent's child: the list is stale otherwise) */
    uint32_t            *fz;              /* [3 * KVS_GRAM_MEMO_DEPTH] */
    uint64_t             fanned;          /* children passed so */
    int                  nofan;           /* every child read (the
                                             reference the tests compare
                                             with) */

    uint64_t             hits, misses, made, clears;
    uint64_t             skipped, skipped_nodes, proved, refuted;
    uint64_t             copied_nodes;    /* taken from a walk's source */

    /* counted repetitions renamed (kvs_gram_memo_rename): positions
     * with more than theta copies left are named by their family */
    uint32_t             theta;
    uint64_t             renamed;

    uint64_t             by_class;        /* transitions known from a
                                             byte of the same class */

    /* counted skipping (kvs_gram_memo_skip.c): per (state, class state)
     * 0 unknown, BND_BUSY, BND_NO, or BND_VAL + the characters every
     * string from there may start (s_bnd), and the largest step's
     * interns below (s_bndc); the bytes standing for their class in
     * both the grammar and the class automaton (bnd_rep, for bnd_g) */
    uint16_t            *s_bnd;           /* [max_states * 8] */
    uint16_t            *s_bndc;          /* [max_states * 8] */
    const kvs_gram_t    *bnd_g;
    uint8_t              bnd_rep[256];
    uint32_t             n_bnd_rep;
    uint32_t             bnd_budget;      /* pairs left this attempt */
    uint32_t             bnd_min;         /* nodes below worth a try */
    uint32_t             bnd_len;         /* source counts that try it
                                             (0: counted skipping off) */
    int                  bnd_cut;         /* the budget ran out */
    uint64_t             counted, counted_nodes;

    /* loop skipping (kvs_gram_memo_skip.c): per state the byte groups
     * tried (s_lknown) and those whose every byte is a remembered step
     * back to the state itself (s_loop), with the largest such step's
     * interns (s_loopc) */
    /* the walk's accepted subtrees as ranges of sorted positions
     * (acc, merged when adjacent), set in bits at the walk's end or
     * when full (kvs_gram_memo_walk.c, kvs_gram_memo_acc_flush); wbits
     * a scratch bitset for it */
    uint32_t            *acc;             /* [2 * KVS_GRAM_MEMO_ACC] */
    uint32_t             n_acc;
    uint32_t            *wbits;
    uint32_t             wwords;
    uint64_t             acc_inv;         /* flushes by the complement */

    uint64_t            *s_loop;          /* [max_states] */
    uint64_t            *s_lknown;        /* [max_states] */
    uint16_t            *s_loopc;         /* [max_states] */
    uint64_t             looped, looped_nodes;

    /* loop regions (kvs_gram_memo_walk.c): each byte's group, all the
     * groups, those of the bytes a JSON string takes as themselves
     * (printable ASCII but '"' and '\\'), and the regions' counts */
    uint8_t              grp[256];
    uint64_t             all_grp;
    uint64_t             text_grp;
    uint64_t             regions, region_nodes;
};

#define KVS_GRAM_MEMO_ACC       4096       /* accepted ranges kept */

#define KVS_GRAM_MEMO_BND_BUSY  1
#define KVS_GRAM_MEMO_BND_NO    2
#define KVS_GRAM_MEMO_BND_VAL   3
#define KVS_GRAM_MEMO_BND_PAIRS 160        /* pairs one attempt explores
                                              at most */
#define KVS_GRAM_MEMO_BND_MIN   256        /* bnd_min's default */
#define KVS_GRAM_MEMO_BND_LEN   12         /* bnd_len's default */

#define KVS_GRAM_MEMO_LOOP_MIN  16        /* nodes below worth a loop
                                             skipping try */


/* The byte on the real matcher (kvs_gram_memo.c), remembered when both
 * ends are named: 1 taken (sid[depth] set), 0 refused. */
int kvs_gram_memo_miss(kvs_gram_memo_t *mo, uint32_t depth, uint8_t b,
    uint32_t *sent);

/* The accepted ranges kept in acc set in bits, and acc emptied
 * (kvs_gram_memo_walk.c). */
void kvs_gram_memo_acc_flush(kvs_gram_memo_t *mo, const kvs_gram_vocab_t *gv,
    uint32_t *bits);

/* Subtree skipping (kvs_gram_memo_skip.c): 1 if the subtree below the
 * node just taken at depth (class state q, height h) is accepted whole,
 * 0 if it must be walked. */
int kvs_gram_memo_closed(kvs_gram_memo_t *mo, uint32_t depth, uint8_t q,
    uint32_t h, int64_t room);

/* Counted skipping (kvs_gram_memo_skip.c): 1 if the subtree below node i
 * (just taken) was decided, the tokens of its nodes that pass recorded
 * (kvs_gram_memo_acc), 0 if it must be walked. */
int kvs_gram_memo_counted_skip(kvs_gram_memo_t *mo,
    const kvs_gram_vocab_t *gv, uint32_t i, uint32_t *bits, int64_t room);

/* Loop skipping (kvs_gram_memo_skip.c): the groups of need not tried
 * yet on the state at path depth d tried (s_loop, s_lknown); 0 if a
 * clear or plain steps cut the try short, 1 otherwise. */
int kvs_gram_memo_loop_try(kvs_gram_memo_t *mo, uint32_t d, uint64_t need,
    int64_t room);

/* Loop skipping (kvs_gram_memo_skip.c): 1 if the subtree below node i
 * (just taken) is accepted whole, 0 if it must be walked. */
int kvs_gram_memo_looped(kvs_gram_memo_t *mo, const kvs_gram_vocab_t *gv,
    uint32_t i, int64_t room);


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

    /* past the mask's bound every step is refused, so the walk ends in
     * a few more; nothing refused so is remembered */
    if (++mo->wk->used > mo->wk->limit) {
        return 0;
    }

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


/* The tokens at sorted positions lo .. hi - 1 are accepted. */
static inline void
kvs_gram_memo_acc(kvs_gram_memo_t *mo, const kvs_gram_vocab_t *gv,
    uint32_t *bits, uint32_t lo, uint32_t hi)
{
    uint32_t  k, id;

    if (lo == hi) {
        return;
    }

    if (mo->acc == NULL) {
        for (k = lo; k < hi; k++) {
            id = (uint32_t) gv->ids[k];
            bits[id >> 5] |= 1u << (id & 31);
        }
        return;
    }

    if (mo->n_acc > 0 && mo->acc[2 * mo->n_acc - 1] == lo) {
        mo->acc[2 * mo->n_acc - 1] = hi;
        return;
    }

    if (mo->n_acc == KVS_GRAM_MEMO_ACC
        || (mo->n_acc > 0 && lo < mo->acc[2 * mo->n_acc - 1]))
    {
        /* full, or out of order (a counted subtree's tokens come before
         * its top node's own): acc stays sorted */
        kvs_gram_memo_acc_flush(mo, gv, bits);
    }

    mo->acc[2 * mo->n_acc] = lo;
    mo->acc[2 * mo->n_acc + 1] = hi;
    mo->n_acc++;
}


#endif /* KVS_GRAM_MEMO_IMPL_H */
