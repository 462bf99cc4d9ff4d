/*
 * kvs_gram_vocab: a vocabulary as the mask sees it.
 *
 * Owns kvs_gram_vocab_t, built once per vocabulary and immutable after:
 * each token's kind (text, END, refused) and the bytes it writes into
 * the output (as kvs_tok_decode() writes them), the text tokens sorted
 * by those bytes, and their trie in preorder, twice: the arrays of
 * kvs_grammar.h and the packed records the walks read (kvs_gram_tnode_t,
 * with each node's subtree height, its class state and the characters
 * its bytes start, for the memo's subtree and counted skipping,
 * kvs_gram_memo_skip.c).
 *
 * The bytes are laid out in the sorted order (text tokens first, then
 * the others by id), and x_off gives them by sorted position: a mask's
 * dependent tokens are checked by ranges of sorted positions
 * (kvs_gram_check_ranges), and reading each one's length and bytes by
 * id made every token two or three cache misses (a check of 728 tokens
 * on Qwen2 took up to 140 us where its data was out of the cache, 30-60
 * where it was in; by sorted position at most 61).
 *
 * Invariants: node i's subtree is i .. t_end[i] - 1 and holds the sorted
 * tokens ids[t_cum[i] .. t_cum[t_end[i]]); tokens with equal bytes are
 * adjacent and end at one node; t_node[n_nodes] is a sentinel; for every
 * sorted position x, off[ids[x]] == x_off[x] and len[ids[x]] ==
 * x_off[x + 1] - x_off[x].
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_grammar.h"


/* qsort_r (glibc; the build defines _GNU_SOURCE): vocabularies may be
 * built on several threads at once */
static int
kvs_gram_tok_cmp(const void *a, const void *b, void *arg)
{
    int32_t                  x, y;
    uint32_t                 lx, ly;
    int                      c;
    const kvs_gram_vocab_t  *gv;

    gv = arg;
    x = *(const int32_t *) a;
    y = *(const int32_t *) b;
    lx = gv->len[x];
    ly = gv->len[y];

    c = memcmp(gv->bytes + gv->off[x], gv->bytes + gv->off[y],
               lx < ly ? lx : ly);
    if (c != 0) {
        return c;
    }
    if (lx != ly) {
        return lx < ly ? -1 : 1;
    }

    return x < y ? -1 : x > y;
}


void
kvs_gram_vocab_free(kvs_gram_vocab_t *gv)
{
    if (gv == NULL) {
        return;
    }

    free(gv->kind);
    free(gv->off);
    free(gv->len);
    free(gv->bytes);
    free(gv->t_byte);
    free(gv->t_depth);
    free(gv->t_end);
    free(gv->t_tok);
    free(gv->t_ntok);
    free(gv->t_cum);
    free(gv->fan_id);
    free(gv->fan_at);
    free(gv->fan_byte);
    free(gv->fan_node);
    free(gv->t_node);
    free(gv->t_below);
    free(gv->ids);
    free(gv->x_off);
    free(gv->long_x);
    free(gv->long_cls);
    free(gv->text_bits);
    kvs_gram_slices_free(gv->slices);
    kvs_gram_exits_free(gv->exits);
    free(gv);
}


/* Each node's height (the longest path below it); every node is a
 * child of one parent, so the pass is linear. */
static void
kvs_gram_vocab_heights(kvs_gram_tnode_t *nd, uint32_t n)
{
    uint32_t  i, k;

    /* backward: a node's height is the largest (child height + 1) over
     * its children, which lie in i + 1 .. end - 1, each found by
     * jumping over the one before's subtree */
    for (i = n; i-- > 0; ) {
        nd[i].height = 0;
        for (k = i + 1; k < nd[i].end; k = nd[k].end) {
            if (nd[k].height + 1u > nd[i].height) {
                nd[i].height = (uint16_t) (nd[k].height + 1);
            }
        }
    }
}


/*
 * The packed trie the walks read (kvs_gram_tnode_t), with each node's
 * class state (the class automaton run over the node's bytes from the
 * root), the characters those bytes start (the bytes the automaton
 * takes from its state 0) and KVS_GRAM_CLS_ALL where no node of its
 * subtree is dead: the automaton's dead state absorbs, so a subtree is
 * all alive iff no node in i + 1 .. end - 1 is dead, found with one
 * backward pass.
 */
/* a node with this many children or more gets a fan list: below it a
 * list's scan costs about what reading the nodes did */
#define KVS_GRAM_FAN_MIN  16

/* The children of node i: the nodes from i + 1 to its subtree's end,
 * each subtree passed whole. */
static uint32_t
kvs_gram_vocab_kids(const kvs_gram_tnode_t *nd, uint32_t i)
{
    uint32_t  c, k;

    for (c = 0, k = i + 1; k < nd[i].end; k = nd[k].end) {
        c++;
    }

    return c;
}


/*
 * The fan lists (kvs_gram_vocab_t.fan_*): a walk from a narrow state
 * (after a closing bracket, in a key) refuses nearly every child of the
 * root and of nodes such as Llama 3's space, ~400 nodes a walk, each a
 * cache miss in a trie of 5 MB: ~30-60 us of a ~400-step entry build.
 * The lists put those children's bytes side by side: the root's first
 * (the nodes at depth 1), then those of each node with
 * KVS_GRAM_FAN_MIN children or more.  Counted, then filled in the same
 * order.
 */
static int
kvs_gram_vocab_fans(kvs_gram_vocab_t *gv, kvs_err_t *err)
{
    uint32_t            i, c, k, n, nf, tot;
    kvs_gram_tnode_t   *nd;

    nd = gv->t_node;
    n = gv->n_nodes;
    nf = 0;
    tot = 0;

    for (i = 0; i < n; i = nd[i].end) {
        tot++;
    }
    for (i = 0; i < n; i++) {
        c = kvs_gram_vocab_kids(nd, i);
        if (c >= KVS_GRAM_FAN_MIN) {
            nf++;
            tot += c;
        }
    }

    gv->fan_id = malloc(((size_t) nf + 1) * sizeof(uint32_t));
    gv->fan_at = malloc(((size_t) nf + 2) * sizeof(uint32_t));
    gv->fan_byte = malloc((size_t) tot + 1);
    gv->fan_node = malloc(((size_t) tot + 1) * sizeof(uint32_t));
    if (gv->fan_id == NULL || gv->fan_at == NULL || gv->fan_byte == NULL
        || gv->fan_node == NULL)
    {
        return kvs_err_set(err, KVS_ENOMEM, "vocabulary trie: no memory");
    }
    gv->fan_id[0] = UINT32_MAX;
    gv->n_fan = nf;

    tot = 0;
    for (i = 0; i < n; i = nd[i].end) {
        gv->fan_byte[tot] = nd[i].byte;
        gv->fan_node[tot] = i;
        tot++;
    }
    gv->fan_at[0] = 0;
    gv->fan_at[1] = tot;

    nf = 0;
    for (i = 0; i < n; i++) {
        if (kvs_gram_vocab_kids(nd, i) < KVS_GRAM_FAN_MIN) {
            continue;
        }
        nf++;
        gv->fan_id[nf] = i;
        nd[i].cls |= KVS_GRAM_CLS_FAN;
        for (k = i + 1; k < nd[i].end; k = nd[k].end) {
            gv->fan_byte[tot] = nd[k].byte;
            gv->fan_node[tot] = k;
            tot++;
        }
        gv->fan_at[nf + 1] = tot;
    }

    return KVS_OK;
}


static int
kvs_gram_vocab_pack(kvs_gram_vocab_t *gv, kvs_err_t *err)
{
    uint8_t            *q;
    uint16_t           *ch;
    uint32_t            i, n, d, dead;
    kvs_gram_tnode_t   *nd;

    n = gv->n_nodes;
    gv->t_node = malloc(((size_t) n + 1) * sizeof(kvs_gram_tnode_t));
    q = malloc((size_t) gv->max_len + 1);
    ch = malloc(((size_t) gv->max_len + 1) * sizeof(uint16_t));
    if (gv->t_node == NULL || q == NULL || ch == NULL) {
        free(q);
        free(ch);
        return kvs_err_set(err, KVS_ENOMEM, "vocabulary trie: no memory");
    }

    nd = gv->t_node;
    q[0] = 0;                               /* the root: between chars */
    ch[0] = 0;

    for (i = 0; i < n; i++) {
        nd[i].end = gv->t_end[i];
        nd[i].cum = gv->t_cum[i];
        nd[i].depth = gv->t_depth[i];
        nd[i].byte = gv->t_byte[i];
        d = nd[i].depth;
        q[d] = kvs_gram_memo_class(q[d - 1], nd[i].byte);
        nd[i].cls = q[d];
        /* a byte the automaton takes from state 0 starts a character
         * (counted while alive; a dead node's count is not read) */
        ch[d] = (uint16_t) (ch[d - 1] + (q[d - 1] == 0 && ch[d - 1]
                                         < UINT16_MAX));
        nd[i].chars = ch[d];
    }

    nd[n].end = n;
    nd[n].cum = gv->t_cum[n];
    nd[n].depth = 0;
    nd[n].byte = 0;
    nd[n].cls = KVS_GRAM_CLS_DEAD;
    nd[n].height = 0;
    nd[n].chars = 0;

    for (i = n, dead = n; i-- > 0; ) {
        if (nd[i].cls == KVS_GRAM_CLS_DEAD) {
            dead = i;
        } else if (dead >= nd[i].end) {
            nd[i].cls |= KVS_GRAM_CLS_ALL;
        }
    }

    kvs_gram_vocab_heights(nd, n);

    free(q);
    free(ch);

    /* the byte groups below each node, backward over its children */
    gv->t_below = calloc((size_t) n + 1, sizeof(uint64_t));
    if (gv->t_below == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "vocabulary trie: no memory");
    }
    for (i = n; i-- > 0; ) {
        for (d = i + 1; d < nd[i].end; d = nd[d].end) {
            gv->t_below[i] |= gv->t_below[d]
                              | 1ULL << kvs_gram_byte_group(nd[d].byte);
        }
    }

    return kvs_gram_vocab_fans(gv, err);
}


/*
 * The counts of a repetition that the context-independent keys tell
 * apart (kvs_gram_ind_key; why it is exact: kvs_gram_rep.c).  Above
 * max_len copies left no token can see the end, so every such count is
 * keyed as max_len + 1.  Below that, positions with at least rep_low
 * left take the same tokens of fewer than rep_low bytes, so they share
 * one entry in which the few longer tokens are left to the real stacks:
 * rep_low is the shortest length (at least KVS_GRAM_LONG_MIN) that at most
 * KVS_GRAM_LONG_MAX text tokens reach (Llama 3, Qwen2: 32 bytes, ~250
 * tokens).  Once per vocabulary, after the trie; and text_bits, the ids
 * of the text tokens as a bitset (a walk that accepts most of the trie
 * starts from it, kvs_gram_memo_walk.c).
 */
#define KVS_GRAM_LONG_MIN  8

uint32_t
kvs_gram_vocab_run(const kvs_gram_vocab_t *gv, uint32_t x, uint32_t *at)
{
    uint8_t         q, r;
    uint32_t        i, n, chars;
    const uint8_t  *t;

    t = gv->bytes + gv->x_off[x];
    n = gv->x_off[x + 1] - gv->x_off[x];
    q = 0;
    chars = 0;

    *at = n;
    for (i = 0; i < n; i++) {
        r = kvs_gram_memo_class(q, t[i]);
        if (r == KVS_GRAM_CLS_DEAD) {
            *at = i;
            return q == 0 ? chars | (uint32_t) t[i] << 16
                            | (uint32_t) KVS_GRAM_RUN_STOP << 24
                          : (chars - 1) | (uint32_t) KVS_GRAM_RUN_CUT << 24;
        }
        chars += q == 0;
        q = r;
    }

    return chars | (uint32_t) KVS_GRAM_RUN_ALL << 24;
}


static int
kvs_gram_vocab_long(kvs_gram_vocab_t *gv, kvs_err_t *err)
{
    uint32_t   x, l, n, at, *hist;

    hist = calloc((size_t) gv->max_len + 2, sizeof(uint32_t));
    gv->text_bits = calloc(((size_t) gv->n_tokens + 31) / 32,
                           sizeof(uint32_t));
    if (hist == NULL || gv->text_bits == NULL) {
        free(hist);
        return kvs_err_set(err, KVS_ENOMEM, "vocabulary: out of memory");
    }
    for (x = 0; x < gv->n_text; x++) {
        hist[gv->len[gv->ids[x]]]++;
        gv->text_bits[gv->ids[x] >> 5] |= 1u << (gv->ids[x] & 31);
    }

    /* down from the longest while few enough tokens are that long */
    n = 0;
    for (l = gv->max_len; l >= KVS_GRAM_LONG_MIN; l--) {
        if (n + hist[l] > KVS_GRAM_LONG_MAX) {
            break;
        }
        n += hist[l];
    }
    free(hist);
    l++;                              /* the last length taken */

    if (l > gv->max_len) {
        return KVS_OK;                /* no tier below max_len + 1 */
    }

    gv->long_x = malloc(((size_t) n + 1) * sizeof(uint32_t));
    gv->long_cls = malloc(((size_t) n + 1) * sizeof(uint32_t));
    if (gv->long_x == NULL || gv->long_cls == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "vocabulary: out of memory");
    }
    for (x = 0; x < gv->n_text; x++) {
        if (gv->len[gv->ids[x]] >= l) {
            gv->long_cls[gv->n_long] = kvs_gram_vocab_run(gv, x, &at);
            gv->long_x[gv->n_long++] = x;
        }
    }
    gv->rep_low = l;

    return KVS_OK;
}


/* The bytes again, the text tokens' in the sorted order of ids[0 ..
 * n_text) and then the others' by id; off follows, x_off is made. */
static int
kvs_gram_vocab_relay(kvs_gram_vocab_t *gv, kvs_err_t *err)
{
    size_t     all, o;
    uint32_t   i, x;
    uint8_t   *nb;
    int32_t    id;

    for (i = 0, all = 0; i < gv->n_tokens; i++) {
        all += gv->len[i];
    }
    if (all > UINT32_MAX) {
        return kvs_err_set(err, KVS_EUNSUPPORTED,
                           "vocabulary: %zu bytes of tokens", all);
    }

    nb = malloc(all + 1);
    gv->x_off = malloc(((size_t) gv->n_text + 1) * sizeof(uint32_t));
    if (nb == NULL || gv->x_off == NULL) {
        free(nb);
        return kvs_err_set(err, KVS_ENOMEM, "vocabulary: no memory");
    }

    o = 0;
    for (x = 0; x < gv->n_text; x++) {
        id = gv->ids[x];
        memcpy(nb + o, gv->bytes + gv->off[id], gv->len[id]);
        gv->x_off[x] = (uint32_t) o;
        o += gv->len[id];
    }
    gv->x_off[gv->n_text] = (uint32_t) o;

    for (i = 0; i < gv->n_tokens; i++) {
        if (gv->kind[i] != KVS_GRAM_TOK_TEXT) {
            memcpy(nb + o, gv->bytes + gv->off[i], gv->len[i]);
            gv->off[i] = (uint32_t) o;
            o += gv->len[i];
        }
    }
    for (x = 0; x < gv->n_text; x++) {
        gv->off[gv->ids[x]] = gv->x_off[x];
    }

    free(gv->bytes);
    gv->bytes = nb;

    return KVS_OK;
}


/* Builds the trie over the text tokens; bytes, off, len, kind are set. */
static int
kvs_gram_vocab_trie(kvs_gram_vocab_t *gv, kvs_err_t *err)
{
    int        rc;
    uint32_t   i, n, d, lcp, pl, l, nodes;
    uint32_t  *path_big;
    int32_t    id, prev;
    size_t     total;

    /* only text tokens go in the trie */
    n = 0;
    total = 0;
    for (i = 0; i < gv->n_tokens; i++) {
        if (gv->kind[i] == KVS_GRAM_TOK_TEXT) {
            gv->ids[n++] = (int32_t) i;
            total += gv->len[i];
            if (gv->len[i] > gv->max_len) {
                gv->max_len = gv->len[i];
            }
        }
    }

    /* END tokens after the text ones, for the mask's last step */
    gv->n_text = n;
    for (i = 0; i < gv->n_tokens; i++) {
        if (gv->kind[i] == KVS_GRAM_TOK_END) {
            gv->ids[n + gv->n_end++] = (int32_t) i;
        }
    }

    if (gv->max_len > 65535) {
        return kvs_err_set(err, KVS_EUNSUPPORTED,
                           "a token of %u bytes (the trie takes 65535)",
                           gv->max_len);
    }

    qsort_r(gv->ids, n, sizeof(int32_t), kvs_gram_tok_cmp, gv);

    rc = kvs_gram_vocab_relay(gv, err);
    if (rc != KVS_OK) {
        return rc;
    }

    gv->t_byte = malloc(total + 1);
    gv->t_depth = malloc((total + 1) * sizeof(uint16_t));
    gv->t_end = malloc((total + 1) * sizeof(uint32_t));
    gv->t_tok = malloc((total + 1) * sizeof(uint32_t));
    gv->t_ntok = calloc(total + 1, sizeof(uint32_t));
    path_big = malloc(((size_t) gv->max_len + 1) * sizeof(uint32_t));

    if (gv->t_byte == NULL || gv->t_depth == NULL || gv->t_end == NULL
        || gv->t_tok == NULL || gv->t_ntok == NULL || path_big == NULL)
    {
        free(path_big);
        return kvs_err_set(err, KVS_ENOMEM, "vocabulary trie: no memory");
    }

    /* path_big[d] is the open node at depth d + 1 */
    nodes = 0;
    pl = 0;
    prev = -1;

    for (i = 0; i < n; i++) {
        id = gv->ids[i];
        l = gv->len[id];

        lcp = 0;
        if (prev >= 0) {
            while (lcp < l && lcp < gv->len[prev]
                   && gv->bytes[gv->off[id] + lcp]
                      == gv->bytes[gv->off[prev] + lcp])
            {
                lcp++;
            }
        }

        while (pl > lcp) {
            gv->t_end[path_big[--pl]] = nodes;
        }

        for (d = lcp; d < l; d++) {
            gv->t_byte[nodes] = gv->bytes[gv->off[id] + d];
            gv->t_depth[nodes] = (uint16_t) (d + 1);
            gv->t_ntok[nodes] = 0;
            gv->t_tok[nodes] = 0;
            path_big[pl++] = nodes;
            nodes++;
        }

        /* tokens with equal bytes are adjacent in the sorted order */
        if (gv->t_ntok[path_big[l - 1]]++ == 0) {
            gv->t_tok[path_big[l - 1]] = i;
        }

        prev = id;
    }

    while (pl > 0) {
        gv->t_end[path_big[--pl]] = nodes;
    }

    free(path_big);
    gv->n_nodes = nodes;

    gv->t_cum = malloc(((size_t) nodes + 1) * sizeof(uint32_t));
    if (gv->t_cum == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "vocabulary trie: no memory");
    }
    for (i = 0, d = 0; i < nodes; i++) {
        gv->t_cum[i] = d;
        d += gv->t_ntok[i];
    }
    gv->t_cum[nodes] = d;

    return kvs_gram_vocab_pack(gv, err);
}


static int
kvs_gram_vocab_alloc(kvs_gram_vocab_t **out, uint32_t n, size_t bytes,
    kvs_err_t *err)
{
    kvs_gram_vocab_t  *gv;

    gv = calloc(1, sizeof(kvs_gram_vocab_t));
    if (gv == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "vocabulary: no memory");
    }

    gv->n_tokens = n;
    gv->kind = calloc((size_t) n + 1, 1);
    gv->off = calloc((size_t) n + 1, sizeof(uint32_t));
    gv->len = calloc((size_t) n + 1, sizeof(uint32_t));
    gv->ids = calloc((size_t) n + 1, sizeof(int32_t));
    gv->bytes = malloc(bytes + 1);

    if (gv->kind == NULL || gv->off == NULL || gv->len == NULL
        || gv->ids == NULL || gv->bytes == NULL)
    {
        kvs_gram_vocab_free(gv);
        return kvs_err_set(err, KVS_ENOMEM, "vocabulary: no memory");
    }

    *out = gv;

    return KVS_OK;
}


int
kvs_gram_vocab_from_bytes(kvs_gram_vocab_t **out, uint32_t n,
    const uint8_t *const *texts, const uint32_t *lens, const uint8_t *kinds,
    kvs_err_t *err)
{
    int                rc;
    size_t             total;
    uint32_t           i, o;
    kvs_gram_vocab_t  *gv;

    *out = NULL;

    for (i = 0, total = 0; i < n; i++) {
        total += lens[i];
        if (total > UINT32_MAX / 2) {
            return kvs_err_set(err, KVS_ETOOLONG, "vocabulary too large");
        }
    }

    rc = kvs_gram_vocab_alloc(&gv, n, total, err);
    if (rc != KVS_OK) {
        return rc;
    }

    for (i = 0, o = 0; i < n; i++) {
        gv->kind[i] = kinds[i] <= KVS_GRAM_TOK_REFUSED
                      ? kinds[i] : KVS_GRAM_TOK_REFUSED;
        if (gv->kind[i] == KVS_GRAM_TOK_TEXT && lens[i] == 0) {
            gv->kind[i] = KVS_GRAM_TOK_REFUSED;
        }
        gv->off[i] = o;
        gv->len[i] = lens[i];
        if (lens[i] > 0) {
            memcpy(gv->bytes + o, texts[i], lens[i]);
        }
        o += lens[i];
    }

    rc = kvs_gram_vocab_trie(gv, err);
    if (rc == KVS_OK) {
        rc = kvs_gram_vocab_long(gv, err);
    }
    if (rc == KVS_OK) {
        rc = kvs_gram_vocab_exits(gv, err);
    }
    if (rc == KVS_OK) {
        rc = kvs_gram_vocab_slices(gv, err);
    }
    if (rc != KVS_OK) {
        kvs_gram_vocab_free(gv);
        return rc;
    }

    *out = gv;

    return KVS_OK;
}


/* Control tokens that are text to a grammar: the tool-call markers a
 * model writes as one token ([TOOL_CALLS] in Mistral v0.3,
 * <|python_tag|> in Llama 3.1, DeepSeek's and Command R7B's delimiters;
 * Qwen's <tool_call> is user-defined, text already).  A model must be able to write them
 * as it was trained to; the engine writes their text into the output of
 * a constrained sequence (kvs_engine_seq.c), so mask and output agree. */
static const char  *kvs_gram_markers[] = {
    "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|python_tag|>",
    "<|tool_call|>", "<function=", "</function>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
    /* Command R7B's: its actions, and the plan and answer tags that
     * frame its text (kvs_tool_parse drops those from content) */
    "<|START_ACTION|>", "<|END_ACTION|>", "<|START_THINKING|>",
    "<|END_THINKING|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>",
    /* MiniCPM3's */
    "<|tool_call_start|>", "<|tool_call_end|>", "<|thought_start|>",
    "<|thought_end|>"
};


int
kvs_gram_vocab_marker(const char *text, size_t len)
{
    size_t  i;

    for (i = 0; i < sizeof(kvs_gram_markers) / sizeof(char *); i++) {
        if (len == strlen(kvs_gram_markers[i])
            && memcmp(text, kvs_gram_markers[i], len) == 0)
        {
            return 1;
        }
    }

    return 0;
}


int
kvs_gram_vocab_from_vocab(kvs_gram_vocab_t **out, const kvs_vocab_t *v,
    kvs_err_t *err)
{
    int                rc;
    size_t             total;
    uint32_t           i, j, o;
    const char        *t;
    const kvs_token_t *tok;
    kvs_gram_vocab_t  *gv;

    *out = NULL;

    for (i = 0, total = 0; i < v->n_tokens; i++) {
        total += v->tokens[i].len;
    }

    rc = kvs_gram_vocab_alloc(&gv, v->n_tokens, total, err);
    if (rc != KVS_OK) {
        return rc;
    }

    for (i = 0, o = 0; i < v->n_tokens; i++) {
        tok = &v->tokens[i];
        gv->off[i] = o;

        if ((int32_t) i == v->eos || (int32_t) i == v->eot
            || (int32_t) i == v->eom)
        {
            gv->kind[i] = KVS_GRAM_TOK_END;
            continue;
        }

        switch (tok->type) {

        case KVS_TOKT_CONTROL:
            if (kvs_gram_vocab_marker(tok->text, tok->len)) {
                /* its text, verbatim, as the engine writes it */
                memcpy(gv->bytes + o, tok->text, tok->len);
                o += tok->len;
                gv->len[i] = tok->len;
                continue;
            }
            gv->kind[i] = KVS_GRAM_TOK_REFUSED;
            continue;

        case KVS_TOKT_UNKNOWN:
        case KVS_TOKT_UNUSED:
            gv->kind[i] = KVS_GRAM_TOK_REFUSED;
            continue;

        case KVS_TOKT_BYTE:
            if (v->byte_of != NULL && v->byte_of[i] >= 0) {
                gv->bytes[o++] = (uint8_t) v->byte_of[i];
                gv->len[i] = 1;
                continue;
            }
            break;

        default:
            break;
        }

        /* as kvs_detok_push writes it: SPM and WPM "▁" is a space */
        t = tok->text;
        for (j = 0; j < tok->len; ) {
            if ((v->kind == KVS_VOCAB_SPM || v->kind == KVS_VOCAB_WPM)
                && j + 3 <= tok->len && memcmp(t + j, "\xe2\x96\x81", 3) == 0)
            {
                gv->bytes[o++] = ' ';
                j += 3;
            } else {
                gv->bytes[o++] = (uint8_t) t[j++];
            }
        }

        gv->len[i] = o - gv->off[i];
        if (gv->len[i] == 0) {
            gv->kind[i] = KVS_GRAM_TOK_REFUSED;
        }
    }

    rc = kvs_gram_vocab_trie(gv, err);
    if (rc == KVS_OK) {
        rc = kvs_gram_vocab_long(gv, err);
    }
    if (rc == KVS_OK) {
        rc = kvs_gram_vocab_exits(gv, err);
    }
    if (rc == KVS_OK) {
        rc = kvs_gram_vocab_slices(gv, err);
    }
    if (rc != KVS_OK) {
        kvs_gram_vocab_free(gv);
        return rc;
    }

    *out = gv;

    return KVS_OK;
}


int
kvs_gram_accept_token(kvs_gram_matcher_t *m, const kvs_gram_vocab_t *gv,
    int32_t id, kvs_err_t *err)
{
    if (id < 0 || (uint32_t) id >= gv->n_tokens) {
        return kvs_err_set(err, KVS_EINVAL, "token %d is out of range", id);
    }

    switch (gv->kind[id]) {

    case KVS_GRAM_TOK_END:
        if (!kvs_gram_matcher_can_end(m)) {
            return kvs_err_set(err, KVS_EFORMAT,
                               "token %d ends the output before the grammar "
                               "is complete", id);
        }
        return KVS_OK;

    case KVS_GRAM_TOK_TEXT:
        return kvs_gram_matcher_feed(m, gv->bytes + gv->off[id], gv->len[id],
                                     err);

    default:
        return kvs_err_set(err, KVS_EFORMAT,
                           "token %d is a control token", id);
    }
}
