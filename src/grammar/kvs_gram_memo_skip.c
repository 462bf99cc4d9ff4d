/*
 * kvs_gram_memo_skip: where the trie walk may decide a subtree without
 * stepping its nodes.
 *
 * Owns subtree skipping (the class automaton, closures proved through
 * the memo: kvs_gram_memo_closed), counted skipping (a bounded string's
 * count proved through the memo: kvs_gram_memo_counted_skip) and loop
 * skipping (a state that steps back to itself on a subtree's byte
 * groups: kvs_gram_memo_looped), and the verdicts each keeps per memo
 * state (s_sim, s_bnd, s_loop: kvs_gram_memo_impl.h).  The walk loop
 * that asks them is kvs_gram_memo_walk.c's.  Each section opens with
 * its claim and why it holds.
 *
 * Invariants: a subtree is said decided only where its section's claim
 * gives the plain walk's verdict on every token in it; an exploration
 * steps only on the path slots below the node's, so the walk's own
 * path is left as it was; a verdict is kept only from an exploration
 * that no clear of the memo interrupted.
 */

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


int
kvs_gram_memo_skip(kvs_gram_memo_t *mo, int on)
{
    int  was = !mo->noskip;

    mo->noskip = !on;

    return was;
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
int
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


/* ---- counted skipping ----------------------------------------------------
 *
 * Inside a bounded string (x{0,n}) every character takes the count down,
 * so the memo's states never recur and the closures above never close:
 * a walk from a state with c characters left steps every trie node on
 * the paths to tokens longer than a few bytes (~30k-190k nodes on
 * Qwen2), though the answer there is simple: a token of the class
 * automaton's bytes is accepted iff it starts at most c characters.
 *
 * The claim.  Call starts(w) the bytes of w the class automaton takes
 * from its state 0 (the characters w starts; kvs_gram_tnode_t's chars
 * counts them from the root).  Let B give pairs (memo state t, class
 * state q) a number such that for every byte b the automaton takes
 * from q (to q'), with inc = 1 if q is 0, else 0: either t refuses b
 * (a refusal the memo holds, which depends on the state alone), inc is
 * 1 and B(t, q) = 0; or the memo holds a remembered transition t --b-->
 * t', making at most c nodes, the state t' has no sentinel mark
 * (`sent`), and B(t', q') = B(t, q) - inc.  Then from a point of the
 * walk where the matcher is in state t with the path's node bound cum,
 * every byte string w the automaton takes from q with cum + |w| * c <=
 * room is accepted iff starts(w) <= B(t, q), and no prefix of it
 * reaches the sentinel: by induction on |w|, the first byte b is
 * refused where B(t, q) = 0 < starts(w), or taken exactly as the
 * matcher takes it (the memo's argument; the hit rule holds within
 * room), and the rest is accepted iff starts(rest) <= B(t, q) - inc,
 * i.e. starts(w) <= B(t, q).  So at a node i of depth d with
 * KVS_GRAM_CLS_ALL whose state t has (t, q_i) in B, cum[d] + height_i *
 * c <= room and no sentinel mark on its path (seen[d] clear), a node j
 * below it is accepted iff chars_j - chars_i <= B(t, q_i), and a
 * refused one is not dependent (no prefix reached the sentinel): the
 * walk sets the tokens of the nodes that pass, jumps over the subtrees
 * of those that do not (chars only grows downwards), and steps none of
 * them.  The claim does not need the states to form a count: a state
 * that recurs on the way (a free string) has no B and is the closures'
 * case.
 *
 * Finding B: a depth-first exploration through the memo
 * (kvs_gram_memo_go: hits, or the matcher on a miss, on the path slots
 * below the node's), one byte per class (bnd_rep: a class of the
 * grammar's bytes, kvs_gram_t's bnext, cut where the class automaton
 * tells bytes apart; the matcher and the automaton take every byte of
 * it alike, so its transition, refusal and interns are its class's).
 * A pair under exploration met again (a cycle), a refusal the memo
 * does not hold, an unremembered step, two bytes implying different B,
 * a clear, or more than KVS_GRAM_MEMO_BND_PAIRS pairs give up; a pair's
 * value (or BND_NO) is kept for the walk and reset when its state is
 * made.  Only walks without renaming (theta 0) use it.
 */

/* bnd_rep for g: the first byte of every run of bytes that the grammar
 * and the class automaton (from each of its states) take alike. */
static void
kvs_gram_memo_bnd_reps(kvs_gram_memo_t *mo, const kvs_gram_t *g)
{
    uint8_t   gid[256], q;
    uint32_t  b, c, cut;

    for (b = 0; b < 256; b++) {
        gid[b] = (uint8_t) b;
    }
    for (b = 0; b < 256; b++) {
        /* the class's smallest byte names it: b is the smallest unless
         * an earlier byte's cycle set it already */
        if (gid[b] != b) {
            continue;
        }
        for (c = g->bnext[b]; c != b; c = g->bnext[c]) {
            gid[c] = (uint8_t) b;
        }
    }

    mo->n_bnd_rep = 0;
    for (b = 0; b < 256; b++) {
        cut = b == 0 || gid[b] != gid[b - 1];
        for (q = 0; !cut && q < KVS_GRAM_CLS_N; q++) {
            cut = kvs_gram_memo_class(q, (uint8_t) b)
                  != kvs_gram_memo_class(q, (uint8_t) (b - 1));
        }
        if (cut) {
            mo->bnd_rep[mo->n_bnd_rep++] = (uint8_t) b;
        }
    }

    mo->bnd_g = g;
}


/* B of the pair (sid[depth], q) (the claim above), *c the largest
 * interns of a step below it; -1: none. */
static int32_t
kvs_gram_memo_bnd(kvs_gram_memo_t *mo, uint32_t depth, uint8_t q,
    int64_t room, uint64_t clears, uint32_t *c)
{
    uint8_t   b, q2;
    int32_t   beta, r, sub;
    uint32_t  t, t2, x, j, inc, cc, csub, sent;
    size_t    k;

    t = mo->sid[depth];
    k = (size_t) t * KVS_GRAM_CLS_N + q;

    if (mo->s_bnd[k] >= KVS_GRAM_MEMO_BND_VAL) {
        *c = mo->s_bndc[k];
        return mo->s_bnd[k] - KVS_GRAM_MEMO_BND_VAL;
    }
    if (mo->s_bnd[k] != 0 || (mo->s_flags[t] & 2)
        || depth + 2 >= KVS_GRAM_MEMO_DEPTH(mo))
    {
        return -1;                          /* busy (a cycle), no, sent */
    }
    if (mo->bnd_budget == 0) {
        mo->bnd_cut = 1;                    /* not known: a time limit */
        return -1;
    }

    mo->bnd_budget--;
    mo->s_bnd[k] = KVS_GRAM_MEMO_BND_BUSY;
    inc = q == 0;
    beta = -1;
    cc = 0;

    for (j = 0; j < mo->n_bnd_rep; j++) {
        b = mo->bnd_rep[j];
        q2 = kvs_gram_memo_class(q, b);
        if (q2 == KVS_GRAM_CLS_DEAD) {
            continue;
        }

        if (beta == 0 && inc && mo->next[(size_t) t * 256 + b] >= 2) {
            goto no;                        /* taken where others refuse */
        }

        if (!kvs_gram_memo_go(mo, depth + 1, b, room, &sent)) {
            if (mo->clears != clears || mo->off
                || mo->next[(size_t) t * 256 + b] != KVS_GRAM_MEMO_REFUSED
                || !inc)
            {
                goto no;                    /* not the state's own */
            }
            r = 0;

        } else {
            if (mo->clears != clears || mo->off) {
                goto no;
            }
            t2 = mo->sid[depth + 1];
            x = mo->next[(size_t) t * 256 + b];
            if (t2 == KVS_GRAM_MEMO_UNKNOWN || x != t2 + 2) {
                goto no;                    /* not remembered */
            }
            if (mo->calls[(size_t) t * 256 + b] > cc) {
                cc = mo->calls[(size_t) t * 256 + b];
            }
            csub = 0;
            sub = kvs_gram_memo_bnd(mo, depth + 1, q2, room, clears, &csub);
            if (sub < 0 || mo->clears != clears) {
                goto no;
            }
            if (csub > cc) {
                cc = csub;
            }
            r = sub + (int32_t) inc;
        }

        if (beta >= 0 && r != beta) {
            goto no;
        }
        beta = r;
    }

    if (beta < 0 || beta > UINT16_MAX - KVS_GRAM_MEMO_BND_VAL) {
        goto no;
    }

    mo->s_bnd[k] = (uint16_t) (beta + KVS_GRAM_MEMO_BND_VAL);
    mo->s_bndc[k] = (uint16_t) cc;
    *c = cc;

    return beta;

no:

    if (mo->clears == clears) {
        /* cut short by the budget, the pair is unknown still (a later
         * try from deeper down may settle it) */
        mo->s_bnd[k] = mo->bnd_cut ? 0 : KVS_GRAM_MEMO_BND_NO;
    }

    return -1;
}


/* Node i (depth d, just taken) by counted skipping: 1 if its subtree
 * below it was decided (the tokens of the nodes that pass set in bits),
 * 0 if it must be walked. */
int
kvs_gram_memo_counted_skip(kvs_gram_memo_t *mo, const kvs_gram_vocab_t *gv,
    uint32_t i, uint32_t *bits, int64_t room)
{
    uint8_t                  q;
    int32_t                  beta;
    uint32_t                 j, d, lim, c;
    uint64_t                 clears;
    const kvs_gram_tnode_t  *nd;

    nd = gv->t_node;
    d = nd[i].depth;

    if (mo->sid[d] == KVS_GRAM_MEMO_UNKNOWN
        || nd[i].end - i < mo->bnd_min
        || (uint32_t) nd[i].chars + nd[i].height >= UINT16_MAX)
    {
        return 0;
    }

    if (mo->bnd_g != mo->m->g) {
        kvs_gram_memo_bnd_reps(mo, mo->m->g);
    }

    clears = mo->clears;
    mo->bnd_budget = KVS_GRAM_MEMO_BND_PAIRS;
    mo->bnd_cut = 0;
    c = 0;
    q = nd[i].cls & KVS_GRAM_CLS_STATE;
    beta = kvs_gram_memo_bnd(mo, d, q, room, clears, &c);

    if (beta < 0 && mo->bnd_cut && mo->clears == clears) {
        /* too far from the count's end here: not tried again from this
         * pair in this walk (the nodes below try their own) */
        mo->s_bnd[(size_t) mo->sid[d] * KVS_GRAM_CLS_N + q] =
            KVS_GRAM_MEMO_BND_NO;
    }

    if (beta < 0 || mo->clears != clears
        || (int64_t) (mo->cum[d] + (uint64_t) nd[i].height * c) > room)
    {
        return 0;
    }

    lim = (uint32_t) nd[i].chars + (uint32_t) beta;

    for (j = i + 1; j < nd[i].end; ) {
        if (nd[j].chars > lim) {
            j = nd[j].end;                  /* refused, and all below */
            continue;
        }
        kvs_gram_memo_acc(mo, gv, bits, nd[j].cum, nd[j + 1].cum);
        j++;
    }

    mo->counted++;
    mo->counted_nodes += nd[i].end - i - 1;

    return 1;
}


/* ---- loop skipping -------------------------------------------------------
 *
 * A narrow state that loops on its own bytes (an email's atext, a
 * pattern's [a-z]+, a run of hex digits) accepts a trie subtree of
 * those bytes whole, but the class automaton above is a JSON string's
 * and does not apply: such a subtree (~78k nodes of letters on Qwen2)
 * was stepped node by node.
 *
 * The claim.  Let G be byte groups (kvs_gram_byte_group) such that for
 * every byte b of every group of G the memo holds a remembered
 * transition t --b--> t, making at most c nodes.  Then from a point of
 * the walk where the matcher is in state t with the path's node bound
 * cum, every string w of bytes of G's groups with cum + |w| * c <= room
 * is accepted, and so is every prefix of it: by induction on |w|, the
 * first byte's step is remembered, hence exactly the matcher's (the
 * memo's argument; the hit rule holds within room), the bound grows by
 * at most c, and the state is t again.  So at a node i of depth d just
 * taken, in state t = sid[d], whose subtree's groups (t_below[i]) are
 * all in G and with cum[d] + height_i * c <= room, every node below is
 * accepted: the walk sets the subtree's tokens as one range and goes on
 * at its end, as for a closure (nothing refused below, so no dependent
 * range and no sentinel mark is missed).  Only walks without renaming
 * (theta 0) try it.  A group is tried once per state (every byte of it
 * through the memo: hits, or a matcher step on a path slot below the
 * node's) and its verdict kept with the state; a clear on the way
 * leaves it untried.
 */

uint8_t
kvs_gram_byte_group(uint8_t b)
{
    if (b >= '0' && b <= '9') {
        return 0;
    }
    if (b >= 'a' && b <= 'f') {
        return 1;
    }
    if (b >= 'g' && b <= 'z') {
        return 2;
    }
    if (b >= 'A' && b <= 'F') {
        return 3;
    }
    if (b >= 'G' && b <= 'Z') {
        return 4;
    }
    if (b < 0x20) {
        return 5;
    }
    if (b == 0x7f) {
        return 6;
    }
    if (b < 0x30) {
        return (uint8_t) (7 + (b - 0x20));          /* 7 .. 22 */
    }
    if (b <= 0x40) {
        return (uint8_t) (23 + (b - 0x3a));         /* 23 .. 29 */
    }
    if (b <= 0x60) {
        return (uint8_t) (30 + (b - 0x5b));         /* 30 .. 35 */
    }
    if (b < 0x80) {
        return (uint8_t) (36 + (b - 0x7b));         /* 36 .. 39 */
    }
    if (b < 0xc0) {
        return 40;
    }
    return b < 0xe0 ? 41 : b < 0xf0 ? 42 : 43;
}


/* The groups of need tried on state t (at depth d of the path) where
 * not known yet: s_loop[t] and s_lknown[t] updated; 0 where a clear of
 * the memo or a switch to plain steps cut the try short (nothing kept),
 * 1 otherwise. */
int
kvs_gram_memo_loop_try(kvs_gram_memo_t *mo, uint32_t d, uint64_t need,
    int64_t room)
{
    uint8_t   g;
    uint32_t  t, b, x, sent, c;
    uint64_t  test, bad, clears;

    t = mo->sid[d];
    test = need & ~mo->s_lknown[t];
    if (test == 0) {
        return 1;
    }

    clears = mo->clears;
    bad = 0;
    c = mo->s_loopc[t];

    for (b = 0; b < 256; b++) {
        g = mo->grp[b];
        if (!(test >> g & 1) || (bad >> g & 1)) {
            continue;
        }

        x = mo->next[(size_t) t * 256 + b];
        if (x == 0) {
            (void) kvs_gram_memo_go(mo, d + 1, (uint8_t) b, room, &sent);
            if (mo->clears != clears || mo->off) {
                return 0;                   /* nothing to keep */
            }
            x = mo->next[(size_t) t * 256 + b];
        }

        if (x != t + 2) {
            bad |= 1ULL << g;               /* refused, elsewhere, or not
                                               remembered */
            continue;
        }
        if (mo->calls[(size_t) t * 256 + b] > c) {
            c = mo->calls[(size_t) t * 256 + b];
        }
    }

    mo->s_lknown[t] |= test;
    mo->s_loop[t] |= test & ~bad;
    mo->s_loopc[t] = (uint16_t) c;

    return 1;
}


/* 1 if the subtree below node i (just taken) is accepted whole by the
 * claim above, 0 if it must be walked. */
int
kvs_gram_memo_looped(kvs_gram_memo_t *mo, const kvs_gram_vocab_t *gv,
    uint32_t i, int64_t room)
{
    uint32_t                 d, t;
    uint64_t                 need;
    const kvs_gram_tnode_t  *nd;

    nd = gv->t_node;
    d = nd[i].depth;
    t = mo->sid[d];

    if (t == KVS_GRAM_MEMO_UNKNOWN || gv->t_below == NULL
        || d + 2 >= KVS_GRAM_MEMO_DEPTH(mo))
    {
        return 0;
    }

    need = gv->t_below[i];
    if (need & mo->s_lknown[t] & ~mo->s_loop[t]) {
        return 0;                           /* a group known not to loop */
    }

    if (!kvs_gram_memo_loop_try(mo, d, need, room)
        || (need & ~mo->s_loop[t]) != 0)
    {
        return 0;
    }

    return (int64_t) (mo->cum[d] + (uint64_t) nd[i].height * mo->s_loopc[t])
           <= room;
}


void
kvs_gram_memo_loops(const kvs_gram_memo_t *mo, uint64_t st[2])
{
    st[0] = mo->looped;
    st[1] = mo->looped_nodes;
}


void
kvs_gram_memo_counting(kvs_gram_memo_t *mo, uint32_t min_nodes,
    uint32_t max_count)
{
    mo->bnd_min = min_nodes;
    mo->bnd_len = max_count;
}


void
kvs_gram_memo_counted(const kvs_gram_memo_t *mo, uint64_t st[2])
{
    st[0] = mo->counted;
    st[1] = mo->counted_nodes;
}
