/*
 * kvs_radix_check: verifies the prefix cache's invariants (kvs_radix.h,
 * kvs_radix_impl.h) in O(nodes + blocks), for tests.  It allocates one
 * bit per pool block and walks without recursion.
 */

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_radix_impl.h"


static int kvs_radix_check_node(const kvs_radix_t *r,
    const kvs_radix_node_t *x, uint8_t *seen, uint64_t *blocks,
    uint64_t *held, uint64_t *nodes, kvs_err_t *err);


int
kvs_radix_check(const kvs_radix_t *r, kvs_err_t *err)
{
    int                      rc;
    size_t                   b;
    uint32_t                 i;
    uint64_t                 blocks, held, nodes, pinned, n_ns, n_pins;
    uint8_t                 *seen;
    const kvs_radix_ns_t    *ns;
    const kvs_radix_pin_t   *pin;
    const kvs_radix_node_t  *x;

    seen = calloc((r->pool->n_blocks + 7) / 8, 1);
    if (seen == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "check: out of memory");
    }

    rc = KVS_OK;
    blocks = 0;
    held = 0;
    nodes = 0;
    n_ns = 0;

    for (b = 0; b < KVS_RADIX_NS_BUCKETS && rc == KVS_OK; b++) {
        for (ns = r->buckets[b]; ns != NULL && rc == KVS_OK;
             ns = ns->hnext)
        {
            n_ns++;
            pinned = 0;

            if (ns->holds == 0 && ns->root.child == NULL
                && ns->pin_head == NULL)
            {
                rc = kvs_err_set(err, KVS_EFORMAT, "an empty namespace "
                                 "nobody holds was kept");
                break;
            }

            /* pre-order walk */
            x = ns->root.child;

            while (x != NULL && rc == KVS_OK) {
                rc = kvs_radix_check_node(r, x, seen, &blocks, &held,
                                          &nodes, err);
                if (x->pins > 0) {
                    pinned += x->n_blocks;
                }

                x = kvs_radix_preorder_next(ns, x);
            }

            if (rc == KVS_OK && pinned != ns->pinned_blocks) {
                rc = kvs_err_set(err, KVS_EFORMAT, "namespace pins %"
                                 PRIu64 " blocks, counts %" PRIu32,
                                 pinned, ns->pinned_blocks);
            }
        }
    }

    free(seen);

    if (rc != KVS_OK) {
        return rc;
    }

    if (blocks != r->n_blocks || held != r->held_blocks
        || nodes != r->n_nodes || n_ns != r->n_ns)
    {
        return kvs_err_set(err, KVS_EFORMAT, "counts: blocks %" PRIu64
                           "/%" PRIu64 ", held %" PRIu64 "/%" PRIu64
                           ", nodes %" PRIu64 "/%" PRIu64 ", namespaces %"
                           PRIu64 "/%" PRIu64, blocks, r->n_blocks, held,
                           r->held_blocks, nodes, r->n_nodes, n_ns,
                           r->n_ns);
    }

    for (i = 0; i < r->heap_n; i++) {
        x = r->heap[i];

        if (x->heap_idx != i || x->child != NULL || x->lock != 0
            || x->pins != 0 || x->parent == NULL)
        {
            return kvs_err_set(err, KVS_EFORMAT, "heap entry %" PRIu32
                               " is not an evictable leaf", i);
        }

        if (i > 0 && r->heap[(i - 1) / 2]->used > x->used) {
            return kvs_err_set(err, KVS_EFORMAT, "heap order broken at %"
                               PRIu32, i);
        }
    }

    n_pins = 0;

    for (pin = r->pins; pin != NULL; pin = pin->gnext) {
        n_pins++;

        if (pin->node->pin != pin || pin->until < r->next_expiry) {
            return kvs_err_set(err, KVS_EFORMAT, "a pin is not its node's, "
                               "or ends before next_expiry");
        }
    }

    if (n_pins != r->n_pins) {
        return kvs_err_set(err, KVS_EFORMAT, "%" PRIu64 " pins listed, %"
                           PRIu64 " counted", n_pins, r->n_pins);
    }

    return KVS_OK;
}


static int
kvs_radix_check_node(const kvs_radix_t *r, const kvs_radix_node_t *x,
    uint8_t *seen, uint64_t *blocks, uint64_t *held, uint64_t *nodes,
    kvs_err_t *err)
{
    int                      evictable;
    uint32_t                 i, id, lock, pins;
    const kvs_radix_node_t  *c, *d;

    (*nodes)++;

    if (x->n_blocks == 0 || x->ns != x->parent->ns) {
        return kvs_err_set(err, KVS_EFORMAT, "node at depth %" PRIu32
                           " is empty or in another namespace", x->depth);
    }

    if (x->depth != x->parent->depth + x->parent->n_blocks * r->bt) {
        return kvs_err_set(err, KVS_EFORMAT, "node depth %" PRIu32
                           " does not follow its parent's", x->depth);
    }

    for (i = 0; i < x->n_blocks; i++) {
        id = x->blocks[i];

        if (id >= r->pool->n_blocks
            || kvs_kv_pool_refcount(r->pool, id) == 0)
        {
            return kvs_err_set(err, KVS_EFORMAT, "cached block %" PRIu32
                               " is not held in the pool", id);
        }

        if (seen[id / 8] & (1u << (id % 8))) {
            return kvs_err_set(err, KVS_EFORMAT, "block %" PRIu32 " is "
                               "cached twice", id);
        }

        seen[id / 8] |= 1u << (id % 8);

        /* a named block's parent block is named too (its name chains
         * from the parent's) */
        if (kvs_radix_named(x->inames[i])
            && (i > 0 ? !kvs_radix_named(x->inames[i - 1])
                      : x->parent->parent != NULL
                        && !kvs_radix_named(x->parent->inames[
                                                x->parent->n_blocks - 1])))
        {
            return kvs_err_set(err, KVS_EFORMAT, "block %" PRIu32 " is "
                               "named under an unnamed block", id);
        }

        if (kvs_radix_chain(r, i == 0 ? (x->parent->parent == NULL
                                          ? KVS_RADIX_SEED
                                          : x->parent->chains[
                                                x->parent->n_blocks - 1])
                                      : x->chains[i - 1],
                            x->tokens + (size_t) i * r->bt)
            != x->chains[i])
        {
            return kvs_err_set(err, KVS_EFORMAT, "block %" PRIu32 " has "
                               "a wrong name", id);
        }
    }

    *blocks += x->n_blocks;

    if (x->lock > 0 || x->pins > 0) {
        *held += x->n_blocks;
    }

    lock = x->lock_here;
    pins = x->pin != NULL;

    for (c = x->child; c != NULL; c = c->next) {
        if (c->parent != x || (c->next != NULL && c->next->prev != c)) {
            return kvs_err_set(err, KVS_EFORMAT, "broken child links at "
                               "depth %" PRIu32, x->depth);
        }

        lock += c->lock;
        pins += c->pins;

        for (d = c->next; d != NULL; d = d->next) {
            if (memcmp(c->tokens, d->tokens, r->bt * sizeof(int32_t))
                == 0)
            {
                return kvs_err_set(err, KVS_EFORMAT, "two children share "
                                   "a first block at depth %" PRIu32,
                                   c->depth);
            }
        }
    }

    if (lock != x->lock || pins != x->pins) {
        return kvs_err_set(err, KVS_EFORMAT, "node at depth %" PRIu32
                           ": lock %" PRIu32 " (sum %" PRIu32 "), pins %"
                           PRIu32 " (sum %" PRIu32 ")", x->depth, x->lock,
                           lock, x->pins, pins);
    }

    evictable = x->child == NULL && x->lock == 0 && x->pins == 0;

    if (evictable != (x->heap_idx != KVS_RADIX_NONE_IDX)) {
        return kvs_err_set(err, KVS_EFORMAT, "node at depth %" PRIu32
                           " is %sin the heap", x->depth,
                           evictable ? "not " : "");
    }

    return KVS_OK;
}
