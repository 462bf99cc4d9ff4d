/*
 * kvs_gram_memo_walk: the trie walk through the transition memo.
 *
 * Owns the walk loop (kvs_gram_memo_walk), the copying of a walk's
 * short tokens from its source (kvs_gram_walk_src_t), the setting of
 * its accepted tokens from ranges, and the walk restricted to ranges
 * of tokens (kvs_gram_memo_walk_ranges: a mask's checks).  The three
 * ways the loop decides a subtree without stepping it (subtree, counted
 * and loop skipping), each with its claim, are kvs_gram_memo_skip.c's;
 * the memo itself (state names, next[], a step on a miss) is
 * kvs_gram_memo.c's; all shared through kvs_gram_memo_impl.h.
 *
 * Invariants: a walk leaves the matcher as it found it
 * (kvs_gram_memo_begin .. kvs_gram_memo_end); a subtree is taken whole
 * only where a claim of kvs_gram_memo_skip.c proves every string in it
 * accepted; bits gets exactly the tokens the plain walk would accept,
 * and dep the ranges it would report, in sorted order.
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


int
kvs_gram_memo_walk(kvs_gram_memo_t *mo, kvs_gram_matcher_t *m,
    const kvs_gram_vocab_t *gv, uint32_t *bits, kvs_gram_walk_dep_pt dep,
    void *arg, const kvs_gram_walk_src_t *src)
{
    int                      rc;
    uint32_t                 i, n, d, hi, next, sent, r;
    int64_t                  room;
    const kvs_gram_tnode_t  *nd;

    kvs_gram_memo_begin(mo, m);
    kvs_gram_memo_acc_init(mo, gv);

    nd = gv->t_node;
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
