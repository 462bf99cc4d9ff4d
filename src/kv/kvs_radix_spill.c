/*
 * kvs_radix_spill: what eviction tells the disk tier (see "Spilling" in
 * kvs_radix.h): each block leaving the tree, with its namespace, its
 * path name, its tokens and its pool id, before its pool reference goes.
 *
 * A block's path name chains over every block from the namespace's
 * root (kvs_tier_path_id()), so it is computed walking down the evicted
 * node's path: the nodes are gathered into a scratch array owned by the
 * tree, grown when a deeper path comes and never shrunk (no allocation
 * per eviction once it is big enough).  Nothing here changes the tree.
 * During each call the block's index name, if it has one, is at hand
 * (kvs_radix_spill_name()), so that the prefix index can say the block
 * moved to the disk tier.
 */

#include <stdlib.h>

#include "kvs_radix_impl.h"
#include "kvs_tier.h"


void
kvs_radix_set_spill(kvs_radix_t *r, kvs_radix_spill_pt fn, void *arg)
{
    r->spill = fn;
    r->spill_arg = fn != NULL ? arg : NULL;
}


const uint8_t *
kvs_radix_spill_name(const kvs_radix_t *r)
{
    return r->spill_name;
}


void
kvs_radix_ns_key(const kvs_radix_ns_t *ns, kvs_radix_key_t *key)
{
    key->epoch = ns->epoch;
    key->adapter = ns->adapter;
    key->scope = ns->scope;
    key->scope_len = ns->scope_len;
}


void
kvs_radix_spill_blocks(kvs_radix_t *r, kvs_radix_node_t *node,
    uint32_t from)
{
    uint8_t             id[KVS_TIER_ID_LEN];
    uint32_t            m, k, i, cap;
    const uint8_t      *prev;
    kvs_radix_key_t     key;
    kvs_radix_node_t   *p, **path;

    m = 0;

    for (p = node; p->parent != NULL; p = p->parent) {
        m++;
    }

    if (m > r->spill_cap) {
        cap = m < 16 ? 16 : m + m / 2;
        path = realloc(r->spill_path, (size_t) cap * sizeof(*path));

        if (path == NULL) {
            r->spill_lost += node->n_blocks - from;
            return;
        }

        r->spill_path = path;
        r->spill_cap = cap;
    }

    k = m;

    for (p = node; p->parent != NULL; p = p->parent) {
        r->spill_path[--k] = p;
    }

    kvs_radix_ns_key(node->ns, &key);

    prev = NULL;

    for (k = 0; k < m; k++) {
        p = r->spill_path[k];

        for (i = 0; i < p->n_blocks; i++) {
            kvs_tier_path_id(prev, p->tokens + (size_t) i * r->bt, r->bt,
                             id);
            prev = id;

            if (p == node && i >= from) {
                r->spill_name = kvs_radix_named(p->inames[i])
                                ? p->inames[i] : NULL;
                r->spill(r->spill_arg, &key, id,
                         p->tokens + (size_t) i * r->bt, p->blocks[i]);
                r->spill_name = NULL;
                r->spilled++;
            }
        }
    }
}
