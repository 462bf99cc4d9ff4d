/*
 * kvs_stop: the stop-string matcher described in kvs_stop.h.
 *
 * The automaton is Aho-Corasick over bytes: a trie of the stop strings
 * (children as sibling lists: a node has at most one child per stop
 * string, so at most 16), failure links to the longest proper suffix
 * that is also a trie node, and per node a dict link to the longest
 * proper suffix that ends a stop string, so the longest stop ending at
 * a position (the earliest-starting one) is found in O(1) instead of
 * walking an output set.
 *
 * The state after byte pos is the longest suffix of the stream that is
 * a trie node; every shorter partial match is a suffix of it, so no
 * byte before pos - depth can start a stop string any more: that is the
 * emission boundary.  A node without children ends a stop string, which
 * is then recorded and decided at once (nothing can start earlier), so
 * an undecided state has a child and the held-back tail is its depth,
 * at most max_len - 1 bytes.
 *
 * Invariants between calls (done == 0):
 *   - hold[0..n_hold) is the stream's bytes [fed - n_hold, fed), and
 *     fed - n_hold bytes have been emitted;
 *   - n_hold == node[state].depth and node[state] has a child;
 *   - no stop string ends before fed unless pending, and then pend_at is
 *     the earliest start of any completed one, pend_at >= fed - n_hold,
 *     and a partial match starts before it.
 */

#include <stdlib.h>
#include <string.h>

#include "base/kvs_utf8.h"
#include "kvs_stop.h"


struct kvs_stop_node_s {
    uint16_t  child;      /* first child, 0: none (root is nobody's) */
    uint16_t  next;       /* next sibling, 0: none */
    uint16_t  fail;       /* longest proper suffix in the trie */
    uint16_t  dict;       /* longest proper suffix ending a stop, 0: none */
    uint16_t  depth;      /* bytes from the root */
    int16_t   out;        /* stop string ending exactly here, -1: none */
    uint8_t   byte;       /* edge label from the parent */
    uint8_t   pad[3];
};


static int
kvs_stop_check(const char *const *strs, const size_t *lens, unsigned n,
    size_t *total, size_t *max_len, kvs_err_t *err)
{
    size_t    len, bad;
    unsigned  i;

    *total = 0;
    *max_len = 0;

    if (n > KVS_STOP_MAX) {
        return kvs_err_set(err, KVS_EINVAL, "stop: %u strings, at most %d "
                           "allowed", n, KVS_STOP_MAX);
    }

    if (n > 0 && strs == NULL) {
        return kvs_err_set(err, KVS_EINVAL, "stop: no strings given");
    }

    for (i = 0; i < n; i++) {
        if (strs[i] == NULL) {
            return kvs_err_set(err, KVS_EINVAL, "stop[%u]: NULL string", i);
        }

        /* strnlen: an unterminated over-long string is still rejected */
        len = lens != NULL ? lens[i]
                           : strnlen(strs[i], KVS_STOP_MAX_LEN + 1);

        if (len == 0) {
            return kvs_err_set(err, KVS_EINVAL, "stop[%u]: empty string", i);
        }

        if (len > KVS_STOP_MAX_LEN && lens == NULL) {
            return kvs_err_set(err, KVS_EINVAL, "stop[%u]: longer than %d "
                               "bytes", i, KVS_STOP_MAX_LEN);
        }

        if (len > KVS_STOP_MAX_LEN) {
            return kvs_err_set(err, KVS_EINVAL, "stop[%u]: %zu bytes, at "
                               "most %d allowed", i, len, KVS_STOP_MAX_LEN);
        }

        bad = kvs_utf8_invalid_at((const uint8_t *) strs[i], len);
        if (bad != len) {
            return kvs_err_set(err, KVS_EINVAL, "stop[%u]: invalid UTF-8 "
                               "at byte %zu", i, bad);
        }

        *total += len;
        if (len > *max_len) {
            *max_len = len;
        }
    }

    return KVS_OK;
}


/* the child of u labelled c, or 0 */
static unsigned
kvs_stop_child(const kvs_stop_node_t *node, unsigned u, uint8_t c)
{
    unsigned  v;

    for (v = node[u].child; v != 0; v = node[v].next) {
        if (node[v].byte == c) {
            return v;
        }
    }

    return 0;
}


/* the automaton's transition: follows failure links, O(1) amortized */
static unsigned
kvs_stop_step(const kvs_stop_node_t *node, unsigned u, uint8_t c)
{
    unsigned  v;

    for ( ;; ) {
        v = kvs_stop_child(node, u, c);
        if (v != 0) {
            return v;
        }

        if (u == 0) {
            return 0;
        }

        u = node[u].fail;
    }
}


/* failure and dict links in breadth-first order, so that every
 * node's failure target (shallower) is complete before the node */
static void
kvs_stop_link(kvs_stop_node_t *node, uint16_t *queue)
{
    unsigned  head, tail, u, v, f;

    node[0].fail = 0;
    node[0].dict = 0;

    head = 0;
    tail = 0;
    queue[tail++] = 0;

    while (head < tail) {
        u = queue[head++];

        for (v = node[u].child; v != 0; v = node[v].next) {
            f = u == 0 ? 0 : kvs_stop_step(node, node[u].fail, node[v].byte);

            node[v].fail = (uint16_t) f;
            node[v].dict = node[f].out >= 0 ? (uint16_t) f : node[f].dict;

            queue[tail++] = (uint16_t) v;
        }
    }
}


int
kvs_stop_init(kvs_stop_t *s, const char *const *strs, const size_t *lens,
    unsigned n, kvs_err_t *err)
{
    int               rc;
    size_t            total, max_len, len, j, sz;
    unsigned          i, u, v, n_node;
    uint16_t         *queue;
    kvs_stop_node_t  *node;

    memset(s, 0, sizeof(*s));
    s->matched = -1;

    rc = kvs_stop_check(strs, lens, n, &total, &max_len, err);
    if (rc != KVS_OK) {
        return rc;
    }

    if (n == 0) {
        return KVS_OK;
    }

    /* [total + 1] nodes, then [total + 1] queue, then [max_len] hold;
     * total + 1 <= 4097 fits the uint16_t links */
    sz = (total + 1) * (sizeof(kvs_stop_node_t) + sizeof(uint16_t))
         + max_len;

    node = calloc(1, sz);
    if (node == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "stop: %zu bytes", sz);
    }

    queue = (uint16_t *) (node + total + 1);

    node[0].out = -1;
    n_node = 1;

    for (i = 0; i < n; i++) {
        len = lens != NULL ? lens[i] : strlen(strs[i]);
        u = 0;

        for (j = 0; j < len; j++) {
            v = kvs_stop_child(node, u, (uint8_t) strs[i][j]);

            if (v == 0) {
                v = n_node++;
                node[v].byte = (uint8_t) strs[i][j];
                node[v].depth = (uint16_t) (node[u].depth + 1);
                node[v].out = -1;
                node[v].next = node[u].child;
                node[u].child = (uint16_t) v;
            }

            u = v;
        }

        /* duplicates: the lowest index reports */
        if (node[u].out < 0) {
            node[u].out = (int16_t) i;
        }
    }

    kvs_stop_link(node, queue);

    s->node = node;
    s->hold = (uint8_t *) (queue + total + 1);
    s->n = n;
    s->n_node = n_node;
    s->max_len = max_len;

    return KVS_OK;
}


int
kvs_stop_feed(kvs_stop_t *s, const char *text, size_t len,
    kvs_buf_t *out, kvs_err_t *err)
{
    int                     pending, pend_idx, decided;
    size_t                  i, from_hold, keep;
    unsigned                st, m;
    uint64_t                pos, pend_at, base, cut;
    const uint8_t          *p;
    const kvs_stop_node_t  *node;

    if (s->done || len == 0) {
        return KVS_OK;
    }

    if (s->n == 0) {
        if (kvs_buf_append(out, text, len) != KVS_OK) {
            return kvs_err_set(err, KVS_ENOMEM, "stop: output of %zu bytes",
                               len);
        }

        s->fed += len;
        return KVS_OK;
    }

    /* run the automaton on copies: nothing changes until out has room */
    node = s->node;
    p = (const uint8_t *) text;
    st = s->state;
    pos = s->fed;
    pending = s->pending;
    pend_idx = s->pend_idx;
    pend_at = s->pend_at;
    decided = 0;

    for (i = 0; i < len; i++) {
        st = kvs_stop_step(node, st, p[i]);
        pos++;

        /* the longest stop ending here is the earliest-starting one */
        m = node[st].out >= 0 ? st : node[st].dict;

        if (m != 0 && (!pending || pos - node[m].depth < pend_at)) {
            pending = 1;
            pend_idx = node[m].out;
            pend_at = pos - node[m].depth;
        }

        /* decided once no partial match starts before it */
        if (pending && pos - node[st].depth >= pend_at) {
            decided = 1;
            break;
        }
    }

    base = s->fed - s->n_hold;
    cut = decided ? pend_at : pos - node[st].depth;

    if (kvs_buf_reserve(out, (size_t) (cut - base)) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "stop: output of %zu bytes",
                           (size_t) (cut - base));
    }

    /* the appends cannot fail now: the room is reserved */
    from_hold = cut - base < s->n_hold ? (size_t) (cut - base) : s->n_hold;
    kvs_buf_append(out, s->hold, from_hold);
    if (cut > s->fed) {
        kvs_buf_append(out, text, (size_t) (cut - s->fed));
    }

    if (decided) {
        s->done = 1;
        s->matched = pend_idx;
        s->match_at = pend_at;
        s->n_hold = 0;
        s->fed = pos;
        s->pending = 0;
        return KVS_OK;
    }

    /* the new tail [cut, pos): what is left of hold, then of text */
    keep = s->n_hold - from_hold;
    if (keep > 0 && from_hold > 0) {
        memmove(s->hold, s->hold + from_hold, keep);
    }

    i = cut > s->fed ? (size_t) (cut - s->fed) : 0;
    memcpy(s->hold + keep, text + i, len - i);

    s->n_hold = keep + (len - i);
    s->fed = pos;
    s->state = st;
    s->pending = pending;
    s->pend_idx = pend_idx;
    s->pend_at = pend_at;

    return KVS_OK;
}


int
kvs_stop_flush(kvs_stop_t *s, kvs_buf_t *out, kvs_err_t *err)
{
    size_t  n;

    if (s->done) {
        return KVS_OK;
    }

    /* a waiting match cuts the tail where it starts */
    n = s->pending ? (size_t) (s->pend_at - (s->fed - s->n_hold))
                   : s->n_hold;

    if (kvs_buf_append(out, s->hold, n) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "stop: output of %zu bytes", n);
    }

    if (s->pending) {
        s->matched = s->pend_idx;
        s->match_at = s->pend_at;
        s->pending = 0;
    }

    s->n_hold = 0;
    s->done = 1;

    return KVS_OK;
}


void
kvs_stop_reset(kvs_stop_t *s)
{
    s->state = 0;
    s->n_hold = 0;
    s->fed = 0;
    s->pending = 0;
    s->pend_idx = 0;
    s->pend_at = 0;
    s->done = 0;
    s->matched = -1;
    s->match_at = 0;
}


void
kvs_stop_free(kvs_stop_t *s)
{
    free(s->node);
    memset(s, 0, sizeof(*s));
    s->matched = -1;
}
