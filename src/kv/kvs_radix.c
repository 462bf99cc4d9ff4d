/*
 * kvs_radix: the prefix cache's tree: namespaces, match, insert, split,
 * locks, least-recently-used eviction and the index names' hooks (see
 * kvs_radix.h).
 *
 * Invariants kept here, beyond the header's:
 *   - children of a node never have equal first blocks, so at most one
 *     child matches a whole block and the walk never backtracks;
 *   - the heap holds exactly the evictable leaves, ordered by used;
 *   - every mutation is planned (allocations made, capacity checked)
 *     before the first change, so a failing call leaves the tree as it
 *     was.
 */

#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "kvs_radix_impl.h"


static kvs_radix_ns_t **kvs_radix_ns_slot(kvs_radix_t *r, uint64_t h,
    const kvs_radix_key_t *key);
static uint64_t kvs_radix_key_hash(const kvs_radix_key_t *key);
static kvs_radix_node_t *kvs_radix_node_new(kvs_radix_t *r,
    uint32_t n_blocks);
static void kvs_radix_node_free(kvs_radix_node_t *node);
static void kvs_radix_child_add(kvs_radix_node_t *parent,
    kvs_radix_node_t *child);
static void kvs_radix_child_unlink(kvs_radix_node_t *child);
static uint32_t kvs_radix_common(const int32_t *a, const int32_t *b,
    uint32_t n);
static void kvs_radix_touch(kvs_radix_t *r, kvs_radix_node_t *node,
    uint64_t now);
static void kvs_radix_lock_used(kvs_radix_t *r, kvs_radix_match_t *m);
static void kvs_radix_evict_leaf(kvs_radix_t *r, kvs_radix_node_t *leaf,
    uint32_t want, uint32_t *freed);
static void kvs_radix_drop_blocks(kvs_radix_t *r, kvs_radix_node_t *node,
    uint32_t from, uint32_t *freed);
static void kvs_radix_name_new(kvs_radix_t *r, kvs_radix_node_t *leaf,
    const int32_t *tokens);
static void kvs_radix_heap_push(kvs_radix_t *r, kvs_radix_node_t *node);
static void kvs_radix_heap_remove(kvs_radix_t *r, kvs_radix_node_t *node);
static void kvs_radix_heap_up(kvs_radix_t *r, uint32_t i);
static void kvs_radix_heap_down(kvs_radix_t *r, uint32_t i);


int
kvs_radix_new(kvs_radix_t **out, kvs_kv_pool_t *pool,
    uint32_t pin_max_blocks, kvs_err_t *err)
{
    kvs_radix_t  *r;

    *out = NULL;

    r = calloc(1, sizeof(kvs_radix_t));
    if (r == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "prefix cache: out of memory");
    }

    r->pool = pool;
    r->bt = pool->block_tokens;
    r->pin_max = pin_max_blocks;
    r->next_expiry = UINT64_MAX;

    /* at most every block of the pool is a leaf of its own */
    r->heap = malloc((size_t) pool->n_blocks * sizeof(kvs_radix_node_t *));
    if (r->heap == NULL) {
        free(r);
        return kvs_err_set(err, KVS_ENOMEM, "prefix cache: out of memory "
                           "for %u blocks", pool->n_blocks);
    }

    if (kvs_radix_names_init(r, err) != KVS_OK) {
        free(r->heap);
        free(r);
        return err != NULL ? err->code : KVS_ENOMEM;
    }

    *out = r;

    return KVS_OK;
}


void
kvs_radix_free(kvs_radix_t *r)
{
    size_t             b;
    kvs_radix_ns_t    *ns;
    kvs_radix_node_t  *node, *up;

    if (r == NULL) {
        return;
    }

    while (r->pins != NULL) {
        kvs_radix_pin_release(r, r->pins);
    }

    for (b = 0; b < KVS_RADIX_NS_BUCKETS; b++) {
        while ((ns = r->buckets[b]) != NULL) {
            r->buckets[b] = ns->hnext;

            /* post-order without a stack: descend to a leaf, free it */
            node = ns->root.child;

            while (node != NULL) {
                if (node->child != NULL) {
                    node = node->child;
                    continue;
                }

                up = node->parent;
                kvs_radix_child_unlink(node);

                for (uint32_t i = 0; i < node->n_blocks; i++) {
                    (void) kvs_kv_pool_unref(r->pool, node->blocks[i],
                                             NULL);
                }

                kvs_radix_node_free(node);
                node = up == &ns->root ? up->child : up;
            }

            free(ns);
        }
    }

    kvs_radix_names_free(r);
    free(r->spill_path);
    free(r->heap);
    free(r);
}


int
kvs_radix_ns_get(kvs_radix_t *r, const kvs_radix_key_t *key,
    kvs_radix_ns_t **out, kvs_err_t *err)
{
    uint64_t         h;
    kvs_radix_ns_t  *ns, **slot;

    *out = NULL;

    if (key->scope_len > KVS_RADIX_MAX_SCOPE) {
        return kvs_err_set(err, KVS_EINVAL, "cache scope of %zu bytes, "
                           "more than %d", key->scope_len,
                           KVS_RADIX_MAX_SCOPE);
    }

    h = kvs_radix_key_hash(key);
    slot = kvs_radix_ns_slot(r, h, key);

    if (*slot == NULL) {
        ns = calloc(1, sizeof(kvs_radix_ns_t));
        if (ns == NULL) {
            return kvs_err_set(err, KVS_ENOMEM, "prefix cache: out of "
                               "memory");
        }

        ns->epoch = key->epoch;
        ns->adapter = key->adapter;
        ns->scope_len = key->scope_len;
        if (key->scope_len > 0) {
            memcpy(ns->scope, key->scope, key->scope_len);
        }
        ns->scope_hash = XXH3_64bits(ns->scope, ns->scope_len);
        ns->key_hash = h;
        ns->root.ns = ns;
        ns->root.heap_idx = KVS_RADIX_NONE_IDX;
        *slot = ns;
        r->n_ns++;
    }

    (*slot)->holds++;
    *out = *slot;

    return KVS_OK;
}


void
kvs_radix_ns_put(kvs_radix_t *r, kvs_radix_ns_t *ns)
{
    if (ns == NULL) {
        return;
    }

    ns->holds--;
    kvs_radix_ns_gc(r, ns);
}


void
kvs_radix_ns_gc(kvs_radix_t *r, kvs_radix_ns_t *ns)
{
    kvs_radix_key_t   key;
    kvs_radix_ns_t  **slot;

    if (ns->holds > 0 || ns->root.child != NULL || ns->pin_head != NULL) {
        return;
    }

    key.epoch = ns->epoch;
    key.adapter = ns->adapter;
    key.scope = ns->scope;
    key.scope_len = ns->scope_len;

    slot = kvs_radix_ns_slot(r, ns->key_hash, &key);
    *slot = ns->hnext;
    r->n_ns--;
    free(ns);
}


void
kvs_radix_match(kvs_radix_t *r, kvs_radix_ns_t *ns, const int32_t *tokens,
    uint32_t limit, uint32_t *blocks, int lock, uint64_t now,
    kvs_radix_match_t *m)
{
    uint32_t           pos, len, best_len, edge, i, n;
    uint64_t           chain;
    kvs_radix_node_t  *x, *c, *best;

    memset(m, 0, sizeof(kvs_radix_match_t));
    m->miss = KVS_RADIX_MISS_NONE;

    x = &ns->root;
    pos = 0;
    chain = KVS_RADIX_SEED;

    while (pos < limit) {
        best = NULL;
        best_len = 0;

        for (c = x->child; c != NULL; c = c->next) {
            edge = c->n_blocks * r->bt;
            n = limit - pos < edge ? limit - pos : edge;
            len = kvs_radix_common(c->tokens, tokens + pos, n);

            if (len > best_len) {
                best = c;
                best_len = len;

                if (len >= r->bt) {
                    break;            /* only one child has this block */
                }
            }
        }

        if (best == NULL) {
            /* nothing here goes on with our tokens: say why, from the
             * next block's name; else, past the root, the cached
             * prefix goes on with others */
            m->miss = KVS_RADIX_MISS_EMPTY;
            m->miss_pos = pos;

            if (limit - pos >= r->bt) {
                m->miss = kvs_radix_names_why(r, ns,
                              kvs_radix_chain(r, chain, tokens + pos));
            }

            if (m->miss == KVS_RADIX_MISS_EMPTY && x != &ns->root
                && x->child != NULL)
            {
                m->miss = KVS_RADIX_MISS_DIVERGED;
            }

            break;
        }

        n = (best_len + r->bt - 1) / r->bt;

        for (i = 0; i < n; i++) {
            blocks[m->n_blocks++] = best->blocks[i];
        }

        pos += best_len;
        m->node = best;

        if (best_len < best->n_blocks * r->bt) {
            if (pos < limit) {
                m->miss = KVS_RADIX_MISS_DIVERGED;
                m->miss_pos = pos;
            }
            break;
        }

        chain = best->chains[best->n_blocks - 1];
        x = best;
    }

    m->n_tokens = pos;

    if (pos == limit) {
        m->miss = KVS_RADIX_MISS_NONE;
        m->miss_pos = pos;
    }

    if (m->node != NULL && lock) {
        kvs_radix_lock_used(r, m);

        if (m->node != NULL) {
            kvs_radix_touch(r, m->node, now);
        }
    }
}


/*
 * Locks what a match uses and no more: when it ends inside a node's edge
 * the node is split after the blocks used, so that a prompt sharing a
 * few tokens of a long cached one does not hold all of it out of
 * eviction (a request that needs most of the cache would otherwise wait
 * for ever behind its own lock).  Without memory for the split the path
 * above the node is locked instead: the blocks shared stay the
 * sequence's through its table either way.
 */
static void
kvs_radix_lock_used(kvs_radix_t *r, kvs_radix_match_t *m)
{
    uint32_t           used;
    kvs_radix_node_t  *x, *upper;

    x = m->node;
    used = (m->n_tokens - x->depth + r->bt - 1) / r->bt;

    if (used < x->n_blocks) {
        if (kvs_radix_split(r, x, used, &upper, NULL) == KVS_OK) {
            x = upper;

        } else {
            x = x->parent->parent != NULL ? x->parent : NULL;
        }
    }

    m->node = x;

    if (x != NULL) {
        kvs_radix_lock(r, x);
    }
}


int
kvs_radix_insert(kvs_radix_t *r, kvs_radix_ns_t *ns, const int32_t *tokens,
    uint32_t n_tokens, const uint32_t *blocks, int lock, uint64_t now,
    kvs_radix_node_t **out, kvs_err_t *err)
{
    uint32_t           nb, b, j, i;
    uint64_t           chain;
    kvs_radix_node_t  *x, *c, *leaf, *upper;

    *out = NULL;
    nb = n_tokens / r->bt;

    if (nb == 0) {
        return KVS_OK;
    }

    /* plan: walk the whole blocks already cached */

    b = kvs_radix_walk(r, ns, tokens, nb, &x, &c, &j, &chain);

    /* a windowed sequence's holes: what the tree lacks is cached only up
     * to the first of them, so that a path never skips a block */
    for (i = b; i < nb && blocks[i] != KVS_KV_NONE; i++) {
        /* void */
    }

    if (i < nb) {
        nb = i;

        if (nb == 0) {
            return KVS_OK;
        }

        b = kvs_radix_walk(r, ns, tokens, nb, &x, &c, &j, &chain);
    }

    /* here: b blocks are cached; c (if set) must be split after j */

    leaf = NULL;

    if (b < nb) {
        for (i = b; i < nb; i++) {
            if (kvs_kv_pool_refcount(r->pool, blocks[i]) == 0
                || kvs_kv_pool_refcount(r->pool, blocks[i]) == UINT32_MAX)
            {
                return kvs_err_set(err, KVS_EINVAL, "prefix cache: block "
                                   "%u is not held", blocks[i]);
            }
        }

        leaf = kvs_radix_node_new(r, nb - b);
        if (leaf == NULL) {
            return kvs_err_set(err, KVS_ENOMEM, "prefix cache: out of "
                               "memory");
        }
    }

    if (c != NULL) {
        if (kvs_radix_split(r, c, j, &upper, err) != KVS_OK) {
            kvs_radix_node_free(leaf);
            return err != NULL ? err->code : KVS_ENOMEM;
        }

        x = upper;
    }

    /* commit */

    if (leaf != NULL) {
        leaf->ns = ns;
        leaf->depth = b * r->bt;
        memcpy(leaf->tokens, tokens + (size_t) b * r->bt,
               (size_t) (nb - b) * r->bt * sizeof(int32_t));

        for (i = 0; i < nb - b; i++) {
            leaf->blocks[i] = blocks[b + i];
            (void) kvs_kv_pool_ref(r->pool, blocks[b + i], NULL);
            chain = kvs_radix_chain(r, chain,
                                    tokens + (size_t) (b + i) * r->bt);
            leaf->chains[i] = chain;
            kvs_radix_names_add(r, ns, chain, 1);
        }

        kvs_radix_child_add(x, leaf);
        kvs_radix_name_new(r, leaf, tokens + (size_t) b * r->bt);
        r->n_blocks += leaf->n_blocks;
        r->n_nodes++;
        x = leaf;
        kvs_radix_update(r, x->parent);
    }

    /* x ends exactly after block nb */

    if (lock) {
        kvs_radix_lock(r, x);
    }

    kvs_radix_touch(r, x, now);
    kvs_radix_update(r, x);
    *out = x;

    return KVS_OK;
}


uint32_t
kvs_radix_walk(const kvs_radix_t *r, kvs_radix_ns_t *ns,
    const int32_t *tokens, uint32_t nb, kvs_radix_node_t **x,
    kvs_radix_node_t **c, uint32_t *j, uint64_t *chain)
{
    uint32_t           b, k;
    kvs_radix_node_t  *at, *ch;

    at = &ns->root;
    b = 0;
    k = 0;
    ch = NULL;
    *chain = KVS_RADIX_SEED;

    while (b < nb) {
        for (ch = at->child; ch != NULL; ch = ch->next) {
            if (memcmp(ch->tokens, tokens + (size_t) b * r->bt,
                       r->bt * sizeof(int32_t)) == 0)
            {
                break;
            }
        }

        if (ch == NULL) {
            break;
        }

        /* whole blocks of ch's edge that are ours too */
        for (k = 1; k < ch->n_blocks && b + k < nb; k++) {
            if (memcmp(ch->tokens + (size_t) k * r->bt,
                       tokens + (size_t) (b + k) * r->bt,
                       r->bt * sizeof(int32_t)) != 0)
            {
                break;
            }
        }

        *chain = ch->chains[k - 1];
        b += k;

        if (k < ch->n_blocks) {
            break;                    /* ends or diverges inside ch */
        }

        at = ch;
        ch = NULL;
    }

    *x = at;
    *c = ch;
    *j = k;

    return b;
}


int
kvs_radix_split(kvs_radix_t *r, kvs_radix_node_t *node, uint32_t k,
    kvs_radix_node_t **upper, kvs_err_t *err)
{
    uint32_t           rest;
    kvs_radix_node_t  *p, *low;

    p = kvs_radix_node_new(r, k);
    low = kvs_radix_node_new(r, node->n_blocks - k);

    if (p == NULL || low == NULL) {
        kvs_radix_node_free(p);
        kvs_radix_node_free(low);
        return kvs_err_set(err, KVS_ENOMEM, "prefix cache: out of memory");
    }

    rest = node->n_blocks - k;

    memcpy(p->tokens, node->tokens, (size_t) k * r->bt * sizeof(int32_t));
    memcpy(p->blocks, node->blocks, k * sizeof(uint32_t));
    memcpy(p->chains, node->chains, k * sizeof(uint64_t));
    memcpy(p->inames, node->inames, (size_t) k * KVS_RADIX_NAME_LEN);

    /* node keeps its struct (and so its locks and pin) as the lower
     * half: swap in the shorter arrays */
    memcpy(low->tokens, node->tokens + (size_t) k * r->bt,
           (size_t) rest * r->bt * sizeof(int32_t));
    memcpy(low->blocks, node->blocks + k, rest * sizeof(uint32_t));
    memcpy(low->chains, node->chains + k, rest * sizeof(uint64_t));
    memcpy(low->inames, node->inames + k,
           (size_t) rest * KVS_RADIX_NAME_LEN);

    free(node->chains);               /* the allocation's start */
    node->tokens = low->tokens;
    node->blocks = low->blocks;
    node->chains = low->chains;
    node->inames = low->inames;
    free(low);

    p->ns = node->ns;
    p->depth = node->depth;
    p->lock = node->lock;
    p->pins = node->pins;
    p->used = node->used;

    /* p takes node's place among its siblings, node goes under p */
    p->parent = node->parent;
    p->prev = node->prev;
    p->next = node->next;

    if (p->prev != NULL) {
        p->prev->next = p;
    } else {
        p->parent->child = p;
    }

    if (p->next != NULL) {
        p->next->prev = p;
    }

    node->parent = p;
    node->prev = NULL;
    node->next = NULL;
    node->n_blocks = rest;
    node->depth += k * r->bt;
    p->child = node;

    r->n_nodes++;
    *upper = p;

    return KVS_OK;
}


void
kvs_radix_lock(kvs_radix_t *r, kvs_radix_node_t *node)
{
    kvs_radix_node_t  *x;

    node->lock_here++;

    for (x = node; x->parent != NULL; x = x->parent) {
        if (x->lock++ == 0 && x->pins == 0) {
            r->held_blocks += x->n_blocks;
            kvs_radix_update(r, x);
        }
    }
}


void
kvs_radix_unlock(kvs_radix_t *r, kvs_radix_node_t *node)
{
    kvs_radix_node_t  *x;

    if (node == NULL) {
        return;
    }

    node->lock_here--;

    for (x = node; x->parent != NULL; x = x->parent) {
        if (--x->lock == 0 && x->pins == 0) {
            r->held_blocks -= x->n_blocks;
            kvs_radix_update(r, x);
        }
    }
}


void
kvs_radix_pins_add(kvs_radix_t *r, kvs_radix_node_t *node, int d)
{
    kvs_radix_node_t  *x;

    for (x = node; x->parent != NULL; x = x->parent) {
        if (d > 0 && x->pins++ == 0) {
            x->ns->pinned_blocks += x->n_blocks;
            if (x->lock == 0) {
                r->held_blocks += x->n_blocks;
            }
            kvs_radix_update(r, x);

        } else if (d < 0 && --x->pins == 0) {
            x->ns->pinned_blocks -= x->n_blocks;
            if (x->lock == 0) {
                r->held_blocks -= x->n_blocks;
            }
            kvs_radix_update(r, x);
        }
    }
}


uint32_t
kvs_radix_evict(kvs_radix_t *r, uint32_t want)
{
    uint32_t  freed;

    freed = 0;

    while (freed < want && r->heap_n > 0) {
        kvs_radix_evict_leaf(r, r->heap[0], want - freed, &freed);
    }

    return freed;
}


uint32_t
kvs_radix_evictable(const kvs_radix_t *r)
{
    return (uint32_t) (r->n_blocks - r->held_blocks);
}


void
kvs_radix_stats(const kvs_radix_t *r, kvs_radix_stats_t *st)
{
    uint64_t         pinned;
    size_t           b;
    kvs_radix_ns_t  *ns;

    pinned = 0;

    for (b = 0; b < KVS_RADIX_NS_BUCKETS; b++) {
        for (ns = r->buckets[b]; ns != NULL; ns = ns->hnext) {
            pinned += ns->pinned_blocks;
        }
    }

    st->blocks = r->n_blocks;
    st->pinned_blocks = pinned;
    st->nodes = r->n_nodes;
    st->namespaces = r->n_ns;
    st->pins = r->n_pins;
    st->evicted_blocks = r->evicted;
    st->spilled_blocks = r->spilled;
    st->spill_lost = r->spill_lost;
    st->expired_pins = r->expired;
    st->released_pins = r->released;
}


const char *
kvs_radix_miss_name(kvs_radix_miss_t miss)
{
    static const char  *names[] = {
        "none", "no_entry", "evicted", "epoch", "adapter", "scope",
        "diverged", "off"
    };

    if ((unsigned) miss >= sizeof(names) / sizeof(names[0])) {
        return "unknown";
    }

    return names[miss];
}


uint64_t
kvs_radix_chain(const kvs_radix_t *r, uint64_t chain, const int32_t *tokens)
{
    return XXH3_64bits_withSeed(tokens, r->bt * sizeof(int32_t), chain);
}


void
kvs_radix_update(kvs_radix_t *r, kvs_radix_node_t *node)
{
    int  want;

    want = node->parent != NULL && node->child == NULL && node->lock == 0
           && node->pins == 0;

    if (want && node->heap_idx == KVS_RADIX_NONE_IDX) {
        kvs_radix_heap_push(r, node);

    } else if (!want && node->heap_idx != KVS_RADIX_NONE_IDX) {
        kvs_radix_heap_remove(r, node);
    }
}


/*
 * Takes want blocks off the end of leaf, or all of it: a returning
 * conversation then recomputes only its tail, and what is evicted is
 * what a reuse would reach last.
 */
static void
kvs_radix_evict_leaf(kvs_radix_t *r, kvs_radix_node_t *leaf, uint32_t want,
    uint32_t *freed)
{
    kvs_radix_node_t  *parent;

    if (want < leaf->n_blocks) {
        kvs_radix_drop_blocks(r, leaf, leaf->n_blocks - want, freed);
        return;
    }

    kvs_radix_heap_remove(r, leaf);
    parent = leaf->parent;
    kvs_radix_child_unlink(leaf);
    kvs_radix_drop_blocks(r, leaf, 0, freed);
    r->n_nodes--;
    kvs_radix_node_free(leaf);

    if (parent->parent != NULL) {
        kvs_radix_update(r, parent);
    } else {
        kvs_radix_ns_gc(r, parent->ns);
    }
}


/* Drops the tree's hold on node's blocks [from, n_blocks), counting in
 * *freed those that went back to the pool. */
static void
kvs_radix_drop_blocks(kvs_radix_t *r, kvs_radix_node_t *node, uint32_t from,
    uint32_t *freed)
{
    uint32_t  i;

    if (r->spill != NULL && from < node->n_blocks) {
        kvs_radix_spill_blocks(r, node, from);
    }

    for (i = from; i < node->n_blocks; i++) {
        if (kvs_kv_pool_refcount(r->pool, node->blocks[i]) == 1) {
            (*freed)++;
        }

        (void) kvs_kv_pool_unref(r->pool, node->blocks[i], NULL);
        kvs_radix_names_add(r, node->ns, node->chains[i], -1);
    }

    /* the deepest first: a reader of the index never sees a block
     * whose parent is already gone */
    if (r->hooks.evicted != NULL) {
        for (i = node->n_blocks; i > from; i--) {
            if (kvs_radix_named(node->inames[i - 1])) {
                r->hooks.evicted(r->hooks.arg, node->inames[i - 1]);
            }
        }
    }

    r->n_blocks -= node->n_blocks - from;
    r->evicted += node->n_blocks - from;
    node->n_blocks = from;
}


/*
 * Asks the index hook for the names of leaf's blocks, all new to the
 * tree (tokens are theirs), continuing from the name of the block before
 * them.  An unnamed parent block leaves them unnamed: their names would
 * have to chain from it.
 */
static void
kvs_radix_name_new(kvs_radix_t *r, kvs_radix_node_t *leaf,
    const int32_t *tokens)
{
    const uint8_t     *parent;
    kvs_radix_key_t    key;
    kvs_radix_node_t  *up;

    if (r->hooks.added == NULL) {
        return;
    }

    up = leaf->parent;
    parent = NULL;

    if (up->parent != NULL) {
        parent = up->inames[up->n_blocks - 1];

        if (!kvs_radix_named(parent)) {
            return;
        }
    }

    key.epoch = leaf->ns->epoch;
    key.adapter = leaf->ns->adapter;
    key.scope = leaf->ns->scope;
    key.scope_len = leaf->ns->scope_len;

    r->hooks.added(r->hooks.arg, &key, parent, tokens, leaf->n_blocks,
                   leaf->inames);
}


void
kvs_radix_set_hooks(kvs_radix_t *r, const kvs_radix_hooks_t *hooks)
{
    if (hooks == NULL) {
        memset(&r->hooks, 0, sizeof(kvs_radix_hooks_t));
        return;
    }

    r->hooks = *hooks;
}


uint64_t
kvs_radix_list_names(const kvs_radix_t *r, kvs_radix_name_pt fn, void *arg)
{
    size_t                   b;
    uint32_t                 i;
    uint64_t                 n;
    const kvs_radix_ns_t    *ns;
    const kvs_radix_node_t  *x;

    n = 0;

    for (b = 0; b < KVS_RADIX_NS_BUCKETS; b++) {
        for (ns = r->buckets[b]; ns != NULL; ns = ns->hnext) {
            /* parents before children */
            x = ns->root.child;

            while (x != NULL) {
                for (i = 0; i < x->n_blocks; i++) {
                    if (kvs_radix_named(x->inames[i])) {
                        fn(arg, x->inames[i]);
                        n++;
                    }
                }

                x = kvs_radix_preorder_next(ns, x);
            }
        }
    }

    return n;
}


int
kvs_radix_named(const uint8_t *name)
{
    size_t  i;

    for (i = 0; i < KVS_RADIX_NAME_LEN; i++) {
        if (name[i] != 0) {
            return 1;
        }
    }

    return 0;
}


/* Marks node's path used now (LRU), and refreshes the pins on it. */
static void
kvs_radix_touch(kvs_radix_t *r, kvs_radix_node_t *node, uint64_t now)
{
    uint64_t           t;
    kvs_radix_node_t  *x;

    t = ++r->clock;

    for (x = node; x->parent != NULL; x = x->parent) {
        x->used = t;

        if (x->heap_idx != KVS_RADIX_NONE_IDX) {
            kvs_radix_heap_down(r, x->heap_idx);
        }

        if (x->pin != NULL) {
            kvs_radix_pin_touch(r, x->pin, now);
        }
    }
}


static uint64_t
kvs_radix_key_hash(const kvs_radix_key_t *key)
{
    uint64_t  h;

    h = XXH3_64bits_withSeed(key->scope, key->scope_len, key->epoch);

    return h ^ (key->adapter * 0x9e3779b97f4a7c15ULL);
}


static kvs_radix_ns_t **
kvs_radix_ns_slot(kvs_radix_t *r, uint64_t h, const kvs_radix_key_t *key)
{
    kvs_radix_ns_t  **slot;

    for (slot = &r->buckets[h % KVS_RADIX_NS_BUCKETS]; *slot != NULL;
         slot = &(*slot)->hnext)
    {
        if ((*slot)->epoch == key->epoch
            && (*slot)->adapter == key->adapter
            && (*slot)->scope_len == key->scope_len
            && (key->scope_len == 0
                || memcmp((*slot)->scope, key->scope, key->scope_len) == 0))
        {
            break;
        }
    }

    return slot;
}


static kvs_radix_node_t *
kvs_radix_node_new(kvs_radix_t *r, uint32_t n_blocks)
{
    size_t             tok;
    kvs_radix_node_t  *node;

    node = calloc(1, sizeof(kvs_radix_node_t));
    if (node == NULL) {
        return NULL;
    }

    /* one allocation: chains, index names, blocks, then tokens
     * (alignment: 8, 16, 4, 4 bytes per element) */
    tok = (size_t) n_blocks * r->bt * sizeof(int32_t);
    node->chains = malloc(n_blocks * (sizeof(uint64_t) + KVS_RADIX_NAME_LEN
                                      + sizeof(uint32_t))
                          + tok);
    if (node->chains == NULL) {
        free(node);
        return NULL;
    }

    node->inames = (uint8_t (*)[KVS_RADIX_NAME_LEN]) (node->chains
                                                      + n_blocks);
    memset(node->inames, 0, (size_t) n_blocks * KVS_RADIX_NAME_LEN);
    node->blocks = (uint32_t *) (node->inames + n_blocks);
    node->tokens = (int32_t *) (node->blocks + n_blocks);
    node->n_blocks = n_blocks;
    node->heap_idx = KVS_RADIX_NONE_IDX;

    return node;
}


static void
kvs_radix_node_free(kvs_radix_node_t *node)
{
    if (node != NULL) {
        free(node->chains);
        free(node);
    }
}


static void
kvs_radix_child_add(kvs_radix_node_t *parent, kvs_radix_node_t *child)
{
    child->parent = parent;
    child->prev = NULL;
    child->next = parent->child;

    if (parent->child != NULL) {
        parent->child->prev = child;
    }

    parent->child = child;
}


static void
kvs_radix_child_unlink(kvs_radix_node_t *child)
{
    if (child->prev != NULL) {
        child->prev->next = child->next;
    } else {
        child->parent->child = child->next;
    }

    if (child->next != NULL) {
        child->next->prev = child->prev;
    }

    child->prev = NULL;
    child->next = NULL;
}


static uint32_t
kvs_radix_common(const int32_t *a, const int32_t *b, uint32_t n)
{
    uint32_t  i;

    for (i = 0; i < n && a[i] == b[i]; i++) {
        /* void */
    }

    return i;
}


static void
kvs_radix_heap_push(kvs_radix_t *r, kvs_radix_node_t *node)
{
    node->heap_idx = r->heap_n;
    r->heap[r->heap_n++] = node;
    kvs_radix_heap_up(r, node->heap_idx);
}


static void
kvs_radix_heap_remove(kvs_radix_t *r, kvs_radix_node_t *node)
{
    uint32_t           i;
    kvs_radix_node_t  *last;

    i = node->heap_idx;
    if (i == KVS_RADIX_NONE_IDX) {
        return;
    }

    node->heap_idx = KVS_RADIX_NONE_IDX;
    last = r->heap[--r->heap_n];

    if (i == r->heap_n) {
        return;
    }

    r->heap[i] = last;
    last->heap_idx = i;
    kvs_radix_heap_up(r, i);
    kvs_radix_heap_down(r, last->heap_idx);
}


static void
kvs_radix_heap_up(kvs_radix_t *r, uint32_t i)
{
    uint32_t           up;
    kvs_radix_node_t  *x;

    x = r->heap[i];

    while (i > 0) {
        up = (i - 1) / 2;
        if (r->heap[up]->used <= x->used) {
            break;
        }

        r->heap[i] = r->heap[up];
        r->heap[i]->heap_idx = i;
        i = up;
    }

    r->heap[i] = x;
    x->heap_idx = i;
}


static void
kvs_radix_heap_down(kvs_radix_t *r, uint32_t i)
{
    uint32_t           c;
    kvs_radix_node_t  *x;

    x = r->heap[i];

    for ( ;; ) {
        c = 2 * i + 1;
        if (c >= r->heap_n) {
            break;
        }

        if (c + 1 < r->heap_n && r->heap[c + 1]->used < r->heap[c]->used) {
            c++;
        }

        if (x->used <= r->heap[c]->used) {
            break;
        }

        r->heap[i] = r->heap[c];
        r->heap[i]->heap_idx = i;
        i = c;
    }

    r->heap[i] = x;
    x->heap_idx = i;
}
