/*
 * kvs_gram_memo_walk: the trie walk through the transition memo.
 *
 * Owns the walk loop (kvs_gram_memo_walk), the copying of a walk's
 * short tokens from its source (kvs_gram_walk_src_t), the setting of
 * its accepted tokens from ranges, loop regions (a looping state's
 * class taken in runs of nodes, stepping only the nodes that leave
 * it), and the walk restricted to ranges of tokens
 * (kvs_gram_memo_walk_ranges: a mask's checks).  The three ways the
 * loop decides a subtree without stepping it (subtree, counted and
 * loop skipping), each with its claim, are kvs_gram_memo_skip.c's;
 * the memo itself (state names, next[], a step on a miss) is
 * kvs_gram_memo.c's; all shared through kvs_gram_memo_impl.h.
 *
 * Invariants: a walk leaves the matcher as it found it
 * (kvs_gram_memo_begin .. kvs_gram_memo_end); a subtree is taken whole
 * only where a claim of kvs_gram_memo_skip.c proves every string in it
 * accepted, and a node left unstepped in a region only where the
 * region's claim does; a node the walk steps finds the path slots
 * above it as the plain walk would have left them; bits gets exactly
 * the tokens the plain walk would accept, and dep the ranges it would
 * report, in sorted order.
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_grammar.h"
#include "grammar/kvs_gram_memo_impl.h"


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


/* ---- setting the accepted tokens ----------------------------------------
 *
 * A walk accepts subtrees, i.e. ranges of the sorted token order, but
 * bits is in id order, so every accepted token was one scattered write
 * (~140k of them for a free string's entry on Qwen2, ~0.2-0.3 ms under
 * load: half of the build).  The ranges are kept (acc, sorted, adjacent
 * ones merged: the walk's order, but for a counted subtree's tokens,
 * given before its top node's, which flush first) and set when the walk
 * ends or acc is full: one write per token as before when they cover at most half
 * of the text tokens, else the complement: the vocabulary's text_bits
 * with the ids of the positions outside the ranges cleared, OR-ed into
 * bits (one write per token left out, and two passes over the words).
 * Either way bits gets exactly the ids of the ranges' positions and
 * nothing else changes.
 */

void
kvs_gram_memo_acc_flush(kvs_gram_memo_t *mo, const kvs_gram_vocab_t *gv,
    uint32_t *bits)
{
    uint32_t       r, k, id, prev, w;
    uint64_t       cov;
    const int32_t *ids;

    ids = gv->ids;
    cov = 0;
    for (r = 0; r < mo->n_acc; r++) {
        cov += mo->acc[2 * r + 1] - mo->acc[2 * r];
    }

    if (2 * cov > gv->n_text && mo->wbits != NULL && gv->text_bits != NULL)
    {
        memcpy(mo->wbits, gv->text_bits, (size_t) mo->wwords * 4);
        prev = 0;
        for (r = 0; r <= mo->n_acc; r++) {
            w = r < mo->n_acc ? mo->acc[2 * r] : gv->n_text;
            for (k = prev; k < w; k++) {
                id = (uint32_t) ids[k];
                mo->wbits[id >> 5] &= ~(1u << (id & 31));
            }
            prev = r < mo->n_acc ? mo->acc[2 * r + 1] : gv->n_text;
        }
        for (w = 0; w < mo->wwords; w++) {
            bits[w] |= mo->wbits[w];
        }
        mo->acc_inv++;

    } else {
        for (r = 0; r < mo->n_acc; r++) {
            for (k = mo->acc[2 * r]; k < mo->acc[2 * r + 1]; k++) {
                id = (uint32_t) ids[k];
                bits[id >> 5] |= 1u << (id & 31);
            }
        }
    }

    mo->n_acc = 0;
}


uint64_t
kvs_gram_memo_inverted(const kvs_gram_memo_t *mo)
{
    return mo->acc_inv;
}


/* acc and wbits for gv, made on first use (without them the tokens are
 * set one by one as they come). */
static void
kvs_gram_memo_acc_init(kvs_gram_memo_t *mo, const kvs_gram_vocab_t *gv)
{
    uint32_t   words, *q;

    mo->n_acc = 0;
    words = (gv->n_tokens + 31) / 32;

    if (mo->acc == NULL) {
        mo->acc = malloc((size_t) KVS_GRAM_MEMO_ACC * 2 * sizeof(uint32_t));
    }

    if (mo->wwords != words) {
        q = realloc(mo->wbits, (size_t) words * sizeof(uint32_t));
        if (q == NULL) {
            free(mo->wbits);
            mo->wwords = 0;
        } else {
            mo->wwords = words;
        }
        mo->wbits = q;
    }
}


/* ---- loop regions -------------------------------------------------------
 *
 * Loop skipping takes a subtree whole only where every byte below it
 * loops.  A narrow state that loops on a few groups (a pattern's
 * [a-z0-9-]+) under nodes whose subtrees also hold a '.', a '"' or a
 * capital was stepped node by node: at the root of Qwen2's trie, ~19k
 * steps, ~0.5 ms, of which ~1.2k nodes leave the class.
 *
 * The claim.  Let t be the state at the top of a region (node i at depth
 * d, or the walk's start at depth 0), G byte groups on which every byte
 * is a remembered step t -> t making at most c nodes, and cum[d] + h * c
 * <= room for the region's height h.  A node below the top whose path
 * from the top is all of G's bytes is then in state t, as the plain walk
 * finds it (the loop skipping argument, step by step), with its tokens
 * accepted.  In preorder such nodes come in runs: from a node whose
 * parent is the top or in state t, the nodes after it are the run's
 * while their bytes are G's (a node's parent comes before it, and
 * every node between is G's), and a run ends at the region's end or at
 * an exit: a node whose byte is not G's, whose parent (the top or the
 * run's) is in state t.  The walk steps an exit as any node, its path
 * slots above filled as the plain walk would have left them (the bytes
 * of the exit's first token, state t, cum by the steps' calls, seen as
 * at the top or-ed with t's sentinel flag, which each step into t adds
 * and the walk's start did not; every trie node holds a token); once
 * the exit's subtree ends, the next node's parent is an ancestor of the
 * exit, so the top or the run's, and the run goes on.  A run's node
 * whose subtree is all of G's is taken with its subtree.  A clear of
 * the memo or plain steps end every region (t may name another state
 * then): the walk steps the rest node by node, on the path slots the
 * last exit filled.
 *
 * A region is begun where loop skipping and closures did not take the
 * node, on a state known to refuse, or leave, some byte that a JSON
 * string takes as itself: a free string's state loops on nearly all of
 * them, and its closures take whole subtrees that a run would scan.
 */

#define KVS_GRAM_MEMO_REGS  8             /* regions nested at most */

typedef struct {
    uint32_t  end;                        /* the node after the region */
    uint32_t  exit_end;                   /* the node after the exit being
                                             walked */
    uint32_t  depth;                      /* the top's */
    uint32_t  t;
    uint8_t   seen;                       /* a run node's seen[] */
    uint64_t  groups;
    uint64_t  clears;
} kvs_gram_memo_reg_t;


/* A region below the node at depth d (i: the node, UINT32_MAX: the
 * walk's start), if the claim above holds for it: 1 and *r filled. */
static int
kvs_gram_memo_reg_begin(kvs_gram_memo_t *mo, const kvs_gram_vocab_t *gv,
    uint32_t i, uint32_t d, int64_t room, kvs_gram_memo_reg_t *r)
{
    uint32_t  t, h;
    uint64_t  need, g;

    t = mo->sid[d];
    if (t == KVS_GRAM_MEMO_UNKNOWN || gv->t_below == NULL
        || d + 2 >= KVS_GRAM_MEMO_DEPTH(mo))
    {
        return 0;
    }

    if (i == UINT32_MAX) {
        need = mo->all_grp;
        h = gv->max_len;
    } else {
        need = gv->t_below[i];
        h = gv->t_node[i].height;
    }

    if (!kvs_gram_memo_loop_try(mo, d, need, room)) {
        return 0;
    }

    g = mo->s_loop[t] & need;
    if (g == 0 || !(mo->s_lknown[t] & ~mo->s_loop[t] & mo->text_grp)
        || (int64_t) (mo->cum[d] + (uint64_t) h * mo->s_loopc[t]) > room)
    {
        return 0;
    }

    r->end = i == UINT32_MAX ? gv->n_nodes : gv->t_node[i].end;
    r->exit_end = 0;
    r->depth = d;
    r->t = t;
    r->seen = (uint8_t) (mo->seen[d] | mo->s_flags[t] >> 1);
    r->groups = g;
    r->clears = mo->clears;
    mo->regions++;

    return 1;
}


/* The run of region r from node i: its tokens accepted.  Returns the
 * exit that ends it, its path slots above filled, or r's end. */
static uint32_t
kvs_gram_memo_reg_run(kvs_gram_memo_t *mo, const kvs_gram_vocab_t *gv,
    const kvs_gram_memo_reg_t *r, uint32_t i, uint32_t *bits)
{
    uint32_t                 j, k, dj;
    const uint8_t           *tb, *w;
    const uint64_t          *below;
    const kvs_gram_tnode_t  *nd;

    nd = gv->t_node;
    tb = gv->t_byte;
    below = gv->t_below;

    j = i;
    while (j < r->end && (r->groups >> mo->grp[tb[j]] & 1)) {
        j = (below[j] & ~r->groups) == 0 ? nd[j].end : j + 1;
    }

    kvs_gram_memo_acc(mo, gv, bits, nd[i].cum, nd[j].cum);
    mo->region_nodes += j - i;

    if (j == r->end) {
        return j;
    }

    dj = nd[j].depth;
    w = gv->bytes + gv->x_off[nd[j].cum];

    for (k = r->depth + 1; k < dj; k++) {
        mo->path[k - 1] = w[k - 1];
        mo->sid[k] = r->t;
        mo->cum[k] = mo->cum[k - 1]
                     + mo->calls[(size_t) r->t * 256 + w[k - 1]];
        mo->seen[k] = r->seen;
    }

    return j;
}


int
kvs_gram_memo_fans(kvs_gram_memo_t *mo, int on)
{
    int  was = !mo->nofan;

    mo->nofan = !on;

    return was;
}


uint64_t
kvs_gram_memo_fanned(const kvs_gram_memo_t *mo)
{
    return mo != NULL ? mo->fanned : 0;
}


/*
 * Node i (depth d) and the siblings after it that the state at depth
 * d - 1 is known to refuse, passed by their bytes in the parent's fan
 * list without reading their nodes: *next the first one it does not
 * (or the parent's subtree end), 1 if node i was one.  Each is charged
 * as kvs_gram_memo_go charges a refusal (a hit and a unit of work).
 */
static int
kvs_gram_memo_fan(kvs_gram_memo_t *mo, const kvs_gram_vocab_t *gv,
    uint32_t i, uint32_t d, uint32_t *next)
{
    uint32_t  k, end, s, *fz;

    fz = mo->fz + 3 * (size_t) d;
    s = mo->sid[d - 1];
    if (i >= fz[2] || mo->off || s == KVS_GRAM_MEMO_UNKNOWN) {
        return 0;
    }

    end = fz[1];
    for (k = fz[0]; k < end && gv->fan_node[k] < i; k++) {
        /* the siblings the walk went into */
    }
    fz[0] = k;
    if (k == end || gv->fan_node[k] != i) {
        return 0;
    }

    for ( /* void */ ;
         k < end
         && mo->next[(size_t) s * 256 + gv->fan_byte[k]]
            == KVS_GRAM_MEMO_REFUSED;
         k++)
    {
        /* refused */
    }
    if (k == fz[0]) {
        return 0;
    }

    mo->hits += k - fz[0];
    mo->wk->used += k - fz[0];
    mo->fanned += k - fz[0];
    fz[0] = k;
    *next = k < end ? gv->fan_node[k] : fz[2];

    return 1;
}


/* Node i (depth d), just taken, lists its children: their depth's
 * fan list is its own. */
static void
kvs_gram_memo_fan_set(kvs_gram_memo_t *mo, const kvs_gram_vocab_t *gv,
    uint32_t i, uint32_t d)
{
    uint32_t  lo, hi, k, *fz;

    lo = 1;
    hi = gv->n_fan + 1;
    while (lo < hi) {
        k = lo + (hi - lo) / 2;
        if (gv->fan_id[k] < i) {
            lo = k + 1;
        } else {
            hi = k;
        }
    }
    if (lo > gv->n_fan || gv->fan_id[lo] != i) {
        return;
    }

    fz = mo->fz + 3 * ((size_t) d + 1);
    fz[0] = gv->fan_at[lo];
    fz[1] = gv->fan_at[lo + 1];
    fz[2] = gv->t_node[i].end;
}


int
kvs_gram_memo_walk(kvs_gram_memo_t *mo, kvs_gram_matcher_t *m,
    const kvs_gram_vocab_t *gv, uint32_t *bits, kvs_gram_walk_dep_pt dep,
    void *arg, const kvs_gram_walk_src_t *src)
{
    int                      rc, regs, fans;
    uint32_t                 i, n, d, hi, next, sent, r, nr;
    int64_t                  room;
    kvs_gram_memo_reg_t      reg[KVS_GRAM_MEMO_REGS], *top;
    const kvs_gram_tnode_t  *nd;

    kvs_gram_memo_begin(mo, m);
    kvs_gram_memo_acc_init(mo, gv);

    nd = gv->t_node;
    n = gv->n_nodes;
    room = kvs_gram_memo_room(mo);
    rc = KVS_OK;
    mo->seen[0] = 0;

    r = 0;
    regs = src == NULL && !mo->noskip && mo->theta == 0 && !mo->off;
    nr = regs && kvs_gram_memo_reg_begin(mo, gv, UINT32_MAX, 0, room, reg);

    /* no list is this walk's yet but the root's (a stale one would
     * begin past a sibling this walk has not passed) */
    fans = src == NULL && gv->fan_at != NULL && !mo->nofan;
    if (fans) {
        memset(mo->fz, 0, KVS_GRAM_MEMO_DEPTH(mo) * 3 * sizeof(uint32_t));
        mo->fz[3] = 0;
        mo->fz[4] = gv->fan_at[1];
        mo->fz[5] = n;
    }

    for (i = 0; i < n; i = next) {
        if (nr > 0) {
            if (mo->clears != reg[0].clears || mo->off) {
                nr = 0;                     /* t may name another state */
            }
            while (nr > 0 && i >= reg[nr - 1].end) {
                nr--;
            }
            top = nr > 0 ? &reg[nr - 1] : NULL;
            if (top != NULL && i >= top->exit_end) {
                next = kvs_gram_memo_reg_run(mo, gv, top, i, bits);
                if (next == top->end) {
                    continue;
                }
                top->exit_end = nd[next].end;
                i = next;
            }
        }

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

        if (fans && kvs_gram_memo_fan(mo, gv, i, d, &next)) {
            /* node i and the siblings after it the state refuses: as
             * below, their subtrees one range */
            if (dep != NULL && mo->seen[d - 1]) {
                rc = dep(arg, nd[i].cum, nd[next].cum);
                if (rc != KVS_OK) {
                    break;
                }
            }
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
        if (fans && (nd[i].cls & KVS_GRAM_CLS_FAN)) {
            kvs_gram_memo_fan_set(mo, gv, i, d);
        }

        next = i + 1;
        hi = nd[next].cum;

        if ((nd[i].cls & KVS_GRAM_CLS_ALL) && nd[i].end > next
            && !mo->noskip)
        {
            if (kvs_gram_memo_closed(mo, d, nd[i].cls & KVS_GRAM_CLS_STATE,
                                     nd[i].height, room))
            {
                mo->skipped++;
                mo->skipped_nodes += nd[i].end - next;
                next = nd[i].end;
                hi = nd[next].cum;

            } else if (src != NULL && src->len <= mo->bnd_len
                       && mo->theta == 0 && !mo->off
                       && (dep == NULL || !mo->seen[d])
                       && kvs_gram_memo_counted_skip(mo, gv, i, bits, room))
            {
                next = nd[i].end;           /* its own tokens below */
            }
        }

        if (next == i + 1 && !mo->noskip && mo->theta == 0 && !mo->off
            && nd[i].end - next >= KVS_GRAM_MEMO_LOOP_MIN
            && kvs_gram_memo_looped(mo, gv, i, room))
        {
            mo->looped++;
            mo->looped_nodes += nd[i].end - next;
            next = nd[i].end;
            hi = nd[next].cum;

        } else if (next == i + 1 && regs && nr < KVS_GRAM_MEMO_REGS
                   && !mo->off && nd[i].end - next >= KVS_GRAM_MEMO_LOOP_MIN
                   && kvs_gram_memo_reg_begin(mo, gv, i, d, room, &reg[nr]))
        {
            nr++;                           /* its runs from node i + 1 */
        }

        kvs_gram_memo_acc(mo, gv, bits, nd[i].cum, hi);
    }

    kvs_gram_memo_end(mo);
    kvs_gram_memo_acc_flush(mo, gv, bits);

    if (src != NULL && src->bits != NULL && rc == KVS_OK) {
        kvs_gram_memo_short(src, gv, bits);
    }

    return rc;
}


void
kvs_gram_memo_regions(const kvs_gram_memo_t *mo, uint64_t st[2])
{
    st[0] = mo->regions;
    st[1] = mo->region_nodes;
}


/*
 * The tokens of the sorted positions in ranges (sorted, disjoint) that
 * the matcher takes from its state, through the memo: the walk of
 * kvs_gram_memo_walk restricted to the trie nodes whose subtrees hold
 * such a position (a node's subtree is the sorted positions cum ..
 * t_node[end].cum), with no subtree skipping, so each node is a memo
 * step exactly as the plain walk's (a refusal or a cap refuses its
 * subtree, as there).  The dependent tokens of a mask's entries are
 * checked so (kvs_gram_mask.c): they share long prefixes (a string's
 * tail, a closing quote, a separator) whose transitions recur, where a
 * token-by-token check fed the matcher every byte of every token.
 */
#define KVS_GRAM_MEMO_RANGE_TRY  64    /* misses before judging the memo */

/* The first sorted position at or after u in ranges (from *r on) whose
 * token bits does not hold yet; UINT32_MAX if none. */
static uint32_t
kvs_gram_memo_pending(const kvs_gram_vocab_t *gv, const uint32_t *bits,
    const uint32_t *ranges, uint32_t n_ranges, uint32_t *r, uint32_t u)
{
    uint32_t  id;

    for ( /* void */ ; *r < n_ranges; (*r)++) {
        if (u < ranges[2 * *r]) {
            u = ranges[2 * *r];
        }
        for ( /* void */ ; u < ranges[2 * *r + 1]; u++) {
            id = (uint32_t) gv->ids[u];
            if (!(bits[id >> 5] >> (id & 31) & 1)) {
                return u;
            }
        }
    }

    return UINT32_MAX;
}


int
kvs_gram_memo_walk_ranges(kvs_gram_memo_t *mo, kvs_gram_matcher_t *m,
    const kvs_gram_vocab_t *gv, uint32_t *bits, const uint32_t *ranges,
    uint32_t n_ranges)
{
    int                      any;
    uint32_t                 i, n, r, q, k, u, id, sent;
    uint64_t                 h0, m0;
    int64_t                  room;
    const kvs_gram_tnode_t  *nd;

    kvs_gram_memo_begin(mo, m);

    nd = gv->t_node;
    n = gv->n_nodes;
    room = kvs_gram_memo_room(mo);
    any = 0;
    h0 = mo->hits;
    m0 = mo->misses;
    r = 0;
    i = 0;
    u = kvs_gram_memo_pending(gv, bits, ranges, n_ranges, &r, 0);

    while (i < n && u != UINT32_MAX) {
        if (u < nd[i].cum) {
            /* the tokens before node i are decided */
            u = kvs_gram_memo_pending(gv, bits, ranges, n_ranges, &r,
                                      nd[i].cum);
            continue;
        }

        if (!mo->off && mo->misses - m0 >= KVS_GRAM_MEMO_RANGE_TRY
            && mo->hits - h0 < 4 * (mo->misses - m0))
        {
            /* the states do not recur (a bounded string's long tokens):
             * naming them costs more than it saves, plain steps on */
            mo->off = 1;
        }

        if (u >= nd[nd[i].end].cum
            || !kvs_gram_memo_go(mo, nd[i].depth, nd[i].byte, room, &sent))
        {
            i = nd[i].end;                  /* none below, or refused */
            continue;
        }

        /* the tokens ending at node i that lie in a range */
        for (k = u, q = r; k < nd[i + 1].cum; k++) {
            while (q < n_ranges && ranges[2 * q + 1] <= k) {
                q++;
            }
            if (q < n_ranges && ranges[2 * q] <= k) {
                id = (uint32_t) gv->ids[k];
                bits[id >> 5] |= 1u << (id & 31);
                any = 1;
            }
        }

        i++;
    }

    kvs_gram_memo_end(mo);

    return any;
}
