/*
 * kvs_gram_memo_walk: the trie walk through the transition memo.
 *
 * Owns the walk loop (kvs_gram_memo_walk), subtree skipping (the class
 * automaton, closures proved through the memo) and the copying of a
 * walk's short tokens from its source (kvs_gram_walk_src_t); the memo
 * itself (state names, next[], a step on a miss) is kvs_gram_memo.c's,
 * shared through kvs_gram_memo_impl.h.
 *
 * Invariants: a walk leaves the matcher as it found it
 * (kvs_gram_memo_begin .. kvs_gram_memo_end); a subtree is taken whole
 * only where the claim below proves every string in it accepted; bits
 * gets exactly the tokens the plain walk would accept, and dep the
 * ranges it would report, in sorted order.
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_grammar.h"
#include "grammar/kvs_gram_memo_impl.h"


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
