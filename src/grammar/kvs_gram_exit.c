/*
 * kvs_gram_exit: the tokens that leave a JSON string, decided by what
 * follows their closing quote.
 *
 * Owns the vocabulary's exit groups (kvs_gram_vocab_t.exits) and the
 * check that uses them in a mask (kvs_gram_exit_check).
 *
 * Why.  The first mask inside a free string at a new place (a new
 * object member, a fresh request's first string) misses the state
 * cache, and its entries leave ~1,150 tokens to the real stacks (Llama
 * 3): those of the form u '"' w, some characters, the closing quote and
 * more.  Checked one by one they cost ~30-45 us, each token's u fed
 * again, and set the per-schema p99 of a fresh request; a bounded
 * string's fill of kept verdicts (kvs_gram_verdict.c) checked the same
 * ones.  Yet their verdicts depend on '"' w alone: 1,301 tokens in 576
 * tails on Llama 3.
 *
 * When.  The mask's state is two stacks, s = (p, n1) and n1 itself,
 * where p is a reference to the JSON character rule x (which a quote
 * does not begin) followed by a tail reference to a loop T (T's
 * alternatives: empty, and x T: an unbounded string body,
 * kvs_gram_repeat; c unbounded), or in a copy of a repetition's
 * optional copies (kvs_gram_run_copies: c copies left), and n1's top is
 * a byte range that begins no character (the closing quote).  That is
 * the state inside a string, where the empty alternative returns to
 * n1.
 *
 * Exactness.  Let t = u '"' w, u r >= 1 characters the class automaton
 * (kvs_gram_memo_class) takes whole, with no quote, backslash or
 * control.  From s each such character is one copy of x and no more
 * (kvs_gram_long.c's argument for kvs_gram_long_direct), after which
 * the loop closes to {(x in T, n1), n1} (the copies to the next copy
 * and n1; past c characters to n1 alone, which refuses the next one);
 * n1 refuses u's first byte, which begins a character.  At u's end, for
 * r <= c, the quote is taken by n1 alone, as it is from the state
 * itself (x refuses it from s the same way).  So the real stacks take t
 * iff r <= c and they take '"' w, as stacks: the node ids differ, and
 * the path to t made more nodes.  A token '"' w (r = 0) is its own
 * tail.  The tails are fed on the real matcher from the state, sorted
 * so that shared prefixes are fed once, and each group's tokens take
 * the tail's verdict; those tokens are then left out of the check of
 * the rest (kvs_gram_masker_t.decided).
 *
 * Caps.  Along u a byte makes at most KVS_GRAM_LONG_STEP stacks and
 * intern calls (kvs_gram_long.c); after it the frontiers are the ones
 * the tail's own run meets, stack for stack, so the frontier cap acts
 * alike.  The node cap: the tails' runs record the most intern calls
 * along one path (I), and their verdicts are used only where n_nodes +
 * max_len * KVS_GRAM_LONG_STEP + I stays within max_nodes, so no
 * token's run could meet it; elsewhere, or where a tail's run met a
 * cap, the tokens are checked as before.  A fill of kept verdicts that
 * takes them records those bounds as what its paths met.
 *
 * Invariants: the groups are immutable once built; the matcher is left
 * as it was found; bits only gains tokens the real stacks take.
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_grammar.h"
#include "grammar/kvs_gram_mask_impl.h"


struct kvs_gram_exits_s {
    uint32_t   n_tails, n_ids;
    uint32_t  *t_off;                 /* [n_tails] the tail's bytes in
                                         gv->bytes, its quote first */
    uint32_t  *t_len;                 /* [n_tails] */
    uint32_t  *t_lcp;                 /* [n_tails] bytes shared with the
                                         tail before (0 for the first) */
    uint32_t  *t_at;                  /* [n_tails + 1] the group's tokens:
                                         ids[t_at[i] .. t_at[i + 1]) */
    uint32_t  *ids;
    uint32_t  *chars;                 /* [as ids] the whole characters
                                         before the token's quote */
    uint32_t  *bits;                  /* [words] every grouped token */
};


typedef struct {
    const uint8_t  *p;                /* the tail */
    uint32_t        len, off, id, chars;
} kvs_gram_xtok_t;


static int
kvs_gram_xtok_cmp(const void *a, const void *b)
{
    int                     c;
    const kvs_gram_xtok_t  *x = a, *y = b;

    c = memcmp(x->p, y->p, x->len < y->len ? x->len : y->len);
    if (c != 0) {
        return c;
    }

    return x->len < y->len ? -1 : x->len > y->len;
}


void
kvs_gram_exits_free(kvs_gram_exits_t *ex)
{
    if (ex == NULL) {
        return;
    }

    free(ex->t_off);
    free(ex->t_len);
    free(ex->t_lcp);
    free(ex->t_at);
    free(ex->ids);
    free(ex->chars);
    free(ex->bits);
    free(ex);
}


int
kvs_gram_vocab_exits(kvs_gram_vocab_t *gv, kvs_err_t *err)
{
    uint32_t          x, n, i, j, t, k, run;
    kvs_gram_xtok_t  *xt;
    kvs_gram_exits_t *ex;

    xt = malloc(((size_t) gv->n_text + 1) * sizeof(kvs_gram_xtok_t));
    ex = calloc(1, sizeof(kvs_gram_exits_t));
    if (xt == NULL || ex == NULL) {
        free(xt);
        free(ex);
        return kvs_err_set(err, KVS_ENOMEM, "vocabulary: out of memory");
    }

    /* the run of whole characters ends on a quote (none: a token that
     * begins with one); a character count must fit its 16 bits */
    n = 0;
    for (x = 0; x < gv->n_text && gv->max_len < 0xffff; x++) {
        run = kvs_gram_vocab_run(gv, x, &k);
        if (run >> 24 != KVS_GRAM_RUN_STOP || (run >> 16 & 0xff) != '"') {
            continue;
        }
        xt[n].off = gv->x_off[x] + k;
        xt[n].p = gv->bytes + xt[n].off;
        xt[n].len = gv->x_off[x + 1] - xt[n].off;
        xt[n].chars = run & 0xffff;
        xt[n].id = (uint32_t) gv->ids[x];
        n++;
    }

    qsort(xt, n, sizeof(kvs_gram_xtok_t), kvs_gram_xtok_cmp);

    /* at most as many tails as tokens */
    ex->t_off = malloc(((size_t) n + 1) * sizeof(uint32_t));
    ex->t_len = malloc(((size_t) n + 1) * sizeof(uint32_t));
    ex->t_lcp = malloc(((size_t) n + 1) * sizeof(uint32_t));
    ex->t_at = malloc(((size_t) n + 1) * sizeof(uint32_t));
    ex->ids = malloc(((size_t) n + 1) * sizeof(uint32_t));
    ex->chars = malloc(((size_t) n + 1) * sizeof(uint32_t));
    ex->bits = calloc(((size_t) gv->n_tokens + 31) / 32, sizeof(uint32_t));
    if (ex->t_off == NULL || ex->t_len == NULL || ex->t_lcp == NULL
        || ex->t_at == NULL || ex->ids == NULL || ex->chars == NULL
        || ex->bits == NULL)
    {
        free(xt);
        kvs_gram_exits_free(ex);
        return kvs_err_set(err, KVS_ENOMEM, "vocabulary: out of memory");
    }

    for (i = 0, t = 0; i < n; i++) {
        if (i == 0 || kvs_gram_xtok_cmp(&xt[i - 1], &xt[i]) != 0) {
            ex->t_off[t] = xt[i].off;
            ex->t_len[t] = xt[i].len;
            ex->t_at[t] = i;
            for (j = 0; t > 0 && j < xt[i].len && j < xt[i - 1].len
                        && xt[i].p[j] == xt[i - 1].p[j]; j++)
            {
                /* the prefix shared with the tail before */
            }
            ex->t_lcp[t] = t > 0 ? j : 0;
            t++;
        }
        ex->ids[i] = xt[i].id;
        ex->chars[i] = xt[i].chars;
        ex->bits[xt[i].id >> 5] |= 1u << (xt[i].id & 31);
    }
    ex->t_at[t] = n;
    ex->n_tails = t;
    ex->n_ids = n;

    free(xt);
    gv->exits = ex;

    return KVS_OK;
}


uint32_t
kvs_gram_vocab_n_exits(const kvs_gram_vocab_t *gv)
{
    return gv->exits != NULL ? gv->exits->n_tails : 0;
}


const uint32_t *
kvs_gram_exits_bits(const kvs_gram_vocab_t *gv)
{
    return gv->exits != NULL ? gv->exits->bits : NULL;
}


/* 1 if p is a reference to the JSON character rule x that a quote
 * does not begin, followed by a tail reference to a loop T (T's
 * alternatives: empty and x T, dead ones aside; *c UINT32_MAX), or in a
 * copy of a repetition's optional copies (kvs_gram_run_copies: each
 * copy x then the rest, the copies left in *c). */
static int
kvs_gram_exit_key(const kvs_gram_t *g, uint32_t p, uint32_t *c)
{
    uint32_t                 x, r, a, s, at, loops, empties;
    const kvs_gram_elem_t   *e;

    e = g->elems;
    if (g->char_rule == 0 || p >= g->n_elems
        || e[p].kind != KVS_GRAM_RULE || e[p].rule != g->char_rule - 1
        || (g->first[(size_t) e[p].rule * 4 + ('"' >> 6)] >> ('"' & 63) & 1))
    {
        return 0;
    }

    if (kvs_gram_run_copies(g, p, &at)) {
        *c = kvs_gram_rep_count(g, p);
        return 1;
    }

    if (p + 2 >= g->n_elems || e[p + 1].kind != KVS_GRAM_RULE
        || e[p + 2].kind != KVS_GRAM_END)
    {
        return 0;
    }

    x = e[p].rule;
    r = e[p + 1].rule;
    loops = 0;
    empties = 0;

    for (a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
        s = g->alt_start[a];
        if (e[s].kind == KVS_GRAM_DEAD) {
            continue;
        }
        if (e[s].kind == KVS_GRAM_END) {
            empties++;
            continue;
        }
        if (s + 2 < g->n_elems
            && e[s].kind == KVS_GRAM_RULE && e[s].rule == x
            && e[s + 1].kind == KVS_GRAM_RULE && e[s + 1].rule == r
            && e[s + 2].kind == KVS_GRAM_END)
        {
            loops++;
            continue;
        }
        return 0;
    }

    *c = UINT32_MAX;

    return loops == 1 && empties == 1;
}


/* The state's s and n1 (see the top) and the characters s may take
 * (*c), or 0. */
static int
kvs_gram_exit_state(const kvs_gram_matcher_t *m, uint32_t *n1, uint32_t *c)
{
    uint32_t                 a, b, s, q, k;
    const kvs_gram_elem_t   *e;
    const kvs_gram_level_t  *lv;

    lv = &m->lv[m->n_lv - 1];
    if (lv->n_front != 2) {
        return 0;
    }

    a = m->front[lv->front];
    b = m->front[lv->front + 1];
    if (m->nodes[a].parent == b) {
        s = a;
        *n1 = b;
    } else if (m->nodes[b].parent == a) {
        s = b;
        *n1 = a;
    } else {
        return 0;
    }

    q = m->nodes[*n1].pos;
    e = &m->g->elems[q];
    if (e->kind != KVS_GRAM_BYTES
        || !kvs_gram_exit_key(m->g, m->nodes[s].pos, c))
    {
        return 0;
    }
    for (k = e->lo; k <= e->hi; k++) {
        if (kvs_gram_memo_class(0, (uint8_t) k) != KVS_GRAM_CLS_DEAD) {
            return 0;                 /* n1 may begin a character */
        }
    }

    return 1;
}


/* The masker's scratch for a check: the accepted tails and a path's
 * intern calls, made on first use. */
static int
kvs_gram_exit_scratch(kvs_gram_masker_t *mk)
{
    if (mk->xacc != NULL) {
        return KVS_OK;
    }

    mk->xacc = malloc(((size_t) mk->gv->exits->n_tails + 1)
                      * sizeof(uint32_t));
    mk->xpath = malloc(((size_t) mk->gv->max_len + 2) * sizeof(uint32_t));
    if (mk->xacc == NULL || mk->xpath == NULL) {
        free(mk->xacc);
        free(mk->xpath);
        mk->xacc = NULL;
        mk->xpath = NULL;
        return KVS_ENOMEM;
    }

    return KVS_OK;
}


int
kvs_gram_exit_check(kvs_gram_masker_t *mk, uint32_t *bits,
    kvs_gram_vrec_t *rec, uint32_t len)
{
    int                       any;
    uint32_t                  i, j, l, cur, lcp, n1, c, n_acc, most, front;
    uint32_t                  dead;
    uint32_t                  id;
    uint64_t                  i0, capped, nodes0;
    const uint8_t            *p;
    kvs_gram_matcher_t       *m;
    const kvs_gram_exits_t   *ex;

    m = mk->m;
    ex = mk->gv->exits;

    if (mk->noexits || ex == NULL || ex->n_tails == 0
        || KVS_GRAM_LONG_STEP > m->lim.max_front
        || (uint64_t) m->n_nodes
           + (uint64_t) mk->gv->max_len * KVS_GRAM_LONG_STEP
           > m->lim.max_nodes
        || !kvs_gram_exit_state(m, &n1, &c)
        || kvs_gram_exit_scratch(mk) != KVS_OK)
    {
        return -1;
    }

    capped = m->capped;
    nodes0 = m->n_nodes;
    cur = 0;
    n_acc = 0;
    most = 0;
    front = 0;
    mk->xpath[0] = 0;
    dead = UINT32_MAX;

    for (i = 0; i < ex->n_tails; i++) {
        /* a tail that shares the byte its predecessor died on dies
         * there too: most tails end after the quote's next byte */
        if (ex->t_lcp[i] > dead) {
            continue;
        }
        dead = UINT32_MAX;
        lcp = ex->t_lcp[i] < cur ? ex->t_lcp[i] : cur;
        kvs_gram_matcher_rollback(m, cur - lcp);
        cur = lcp;
        p = mk->gv->bytes + ex->t_off[i];
        l = ex->t_len[i];

        while (cur < l) {
            i0 = m->interns;
            if (++mk->work.used > mk->work.limit
                || kvs_gram_matcher_byte(m, p[cur], NULL) != KVS_OK)
            {
                break;
            }
            mk->work.used += m->interns - i0;
            mk->xpath[cur + 1] = mk->xpath[cur]
                                 + (uint32_t) (m->interns - i0);
            if (mk->xpath[cur + 1] > most) {
                most = mk->xpath[cur + 1];
            }
            if (m->lv[m->n_lv - 1].n_front > front) {
                front = m->lv[m->n_lv - 1].n_front;
            }
            cur++;
        }

        if (cur == l) {
            mk->xacc[n_acc++] = i;
        } else {
            dead = cur;
        }
        mk->exit_tails++;
    }

    kvs_gram_matcher_rollback(m, cur);

    /* a cap met on the way, the work bound, or a path whose nodes with
     * a token's characters before it could meet the node cap: the
     * tokens are checked as before */
    if (m->capped != capped || kvs_gram_work_over(&mk->work)
        || nodes0 + (uint64_t) mk->gv->max_len * KVS_GRAM_LONG_STEP + most
           > m->lim.max_nodes)
    {
        return -1;
    }

    /* a token of more characters than s may take is refused; a fill of
     * kept verdicts (kvs_gram_verdict.c) records the accepted ones
     * shorter than len, and what their paths could meet */
    any = 0;
    for (i = 0; i < n_acc; i++) {
        for (j = ex->t_at[mk->xacc[i]]; j < ex->t_at[mk->xacc[i] + 1]; j++) {
            id = ex->ids[j];
            if (ex->chars[j] > c || bits[id >> 5] >> (id & 31) & 1) {
                continue;
            }
            bits[id >> 5] |= 1u << (id & 31);
            any = 1;
            if (rec != NULL && mk->gv->len[id] < len) {
                rec->ids[rec->n_ids++] = id;
            }
        }
    }
    if (rec != NULL) {
        if (rec->nodes < mk->gv->max_len * KVS_GRAM_LONG_STEP + most) {
            rec->nodes = mk->gv->max_len * KVS_GRAM_LONG_STEP + most;
        }
        if (rec->front < KVS_GRAM_LONG_STEP) {
            rec->front = KVS_GRAM_LONG_STEP;
        }
        if (rec->front < front) {
            rec->front = front;
        }
    }
    mk->exits++;
    mk->decided = ex->bits;

    return any;
}


/*
 * The rest of an entry's dependent ranges once the exit tokens are
 * decided: a check skipping them one by one still read each (~1,150 in
 * a free string's first mask, ~5 ns apiece, a third of that mask), and
 * the entries of those states are few and shared.  A list longer than
 * its ranges by KVS_GRAM_REST_SLACK pairs (exit tokens scattered among
 * the rest) is not kept: the entry's ranges are read then.
 */
#define KVS_GRAM_REST_SLACK  256

void
kvs_gram_exit_rest(kvs_gram_masker_t *mk, kvs_gram_ientry_t *e,
    const uint32_t **ranges, uint32_t *n_ranges)
{
    int              in;
    uint32_t         r, x, id, n, cap, *q;
    const uint32_t  *dec;

    *ranges = e->ranges;
    *n_ranges = e->n_ranges;
    dec = mk->decided;
    if (dec == NULL || mk->gv->exits == NULL || dec != mk->gv->exits->bits
        || e->n_ranges == 0 || e->rest_made == 2)
    {
        return;
    }

    if (e->rest_made == 0) {
        /* one pass over the ranges (a fresh request's table meets each
         * list once: no dearer than the check it replaces) */
        cap = e->n_ranges + KVS_GRAM_REST_SLACK;
        q = malloc((size_t) cap * 2 * sizeof(uint32_t));
        if (q == NULL) {
            return;                   /* the ranges, this time */
        }
        n = 0;
        for (r = 0; r < e->n_ranges; r++) {
            in = 0;
            for (x = e->ranges[2 * r]; x < e->ranges[2 * r + 1]; x++) {
                id = (uint32_t) mk->gv->ids[x];
                if (dec[id >> 5] >> (id & 31) & 1) {
                    in = 0;
                    continue;
                }
                if (!in) {
                    if (n == cap) {
                        free(q);
                        e->rest_made = 2;
                        return;
                    }
                    q[2 * n] = x;
                    n++;
                    in = 1;
                }
                q[2 * n - 1] = x + 1;
            }
        }
        e->rest = q;
        e->n_rest = n;
        e->rest_made = 1;
    }

    *ranges = e->rest;
    *n_ranges = e->n_rest;
}


uint32_t
kvs_gram_exits_tokens(const kvs_gram_vocab_t *gv)
{
    return gv->exits != NULL ? gv->exits->n_ids : 0;
}
