/*
 * kvs_radix_names: names of cached and recently evicted blocks, kept only
 * to explain a miss (evicted, other weights, adapter or scope).
 *
 * A name is (chain hash of the block's tokens from the root, namespace
 * key) and lives in an open-addressing table, probed linearly from the
 * chain's home slot, so every namespace's record of one chain sits in
 * one run and a lookup by chain alone finds them all.  Evicted names
 * stay as ghosts (live == 0) until a ring of ghosts_cap entries wraps.
 * The table never grows: past three quarters full new names are not
 * recorded, and misses degrade to "no_entry".  Nothing here decides a
 * reuse: a hash collision can only mislabel a miss.
 */

#include <stdlib.h>
#include <string.h>

#include "kvs_radix_impl.h"

#define KVS_RADIX_NAMES_MAX   (1u << 21)
#define KVS_RADIX_GHOSTS_MAX  65536u
#define KVS_RADIX_GHOSTS_MIN  1024u


static kvs_radix_name_t *kvs_radix_names_find(kvs_radix_t *r,
    const kvs_radix_name_t *key);
static void kvs_radix_names_delete(kvs_radix_t *r, kvs_radix_name_t *at);
static int kvs_radix_names_same(const kvs_radix_name_t *a,
    const kvs_radix_name_t *b);


int
kvs_radix_names_init(kvs_radix_t *r, kvs_err_t *err)
{
    uint64_t  want;
    uint32_t  cap;

    /* several cache-fulls of history, for small caches too */
    r->ghosts_cap = r->pool->n_blocks < KVS_RADIX_GHOSTS_MAX / 4
                    ? 4 * r->pool->n_blocks : KVS_RADIX_GHOSTS_MAX;
    if (r->ghosts_cap < KVS_RADIX_GHOSTS_MIN) {
        r->ghosts_cap = KVS_RADIX_GHOSTS_MIN;
    }
    want = 2 * ((uint64_t) r->pool->n_blocks + r->ghosts_cap);

    for (cap = 64; cap < want && cap < KVS_RADIX_NAMES_MAX; cap *= 2) {
        /* void */
    }

    r->names = calloc(cap, sizeof(kvs_radix_name_t));
    r->ghosts = malloc(r->ghosts_cap * sizeof(kvs_radix_name_t));

    if (r->names == NULL || r->ghosts == NULL) {
        free(r->names);
        free(r->ghosts);
        r->names = NULL;
        r->ghosts = NULL;
        return kvs_err_set(err, KVS_ENOMEM, "prefix cache: out of memory "
                           "for %u block names", cap);
    }

    r->names_cap = cap;

    return KVS_OK;
}


void
kvs_radix_names_free(kvs_radix_t *r)
{
    free(r->names);
    free(r->ghosts);
}


void
kvs_radix_names_add(kvs_radix_t *r, const kvs_radix_ns_t *ns,
    uint64_t chain, int d)
{
    uint32_t           i;
    kvs_radix_name_t   key, *at, *old;

    memset(&key, 0, sizeof(key));
    key.chain = chain;
    key.epoch = ns->epoch;
    key.scope_hash = ns->scope_hash;
    key.adapter = ns->adapter;

    at = kvs_radix_names_find(r, &key);

    if (d > 0) {
        if (at->used) {
            at->live++;
            return;
        }

        if (r->names_n >= r->names_cap / 4 * 3) {
            return;
        }

        *at = key;
        at->used = 1;
        at->live = 1;
        r->names_n++;
        return;
    }

    if (!at->used || at->live == 0 || --at->live > 0) {
        return;
    }

    /* a ghost now: remember it, forgetting the oldest when full */

    if (r->ghosts_n == r->ghosts_cap) {
        i = r->ghosts_head;
        old = kvs_radix_names_find(r, &r->ghosts[i]);

        if (old->used && old->live == 0) {
            kvs_radix_names_delete(r, old);
        }

        r->ghosts_head = (i + 1) % r->ghosts_cap;
        r->ghosts_n--;
    }

    /* the delete may have moved our record */
    at = kvs_radix_names_find(r, &key);
    if (!at->used) {
        return;
    }

    r->ghosts[(r->ghosts_head + r->ghosts_n) % r->ghosts_cap] = key;
    r->ghosts_n++;
}


kvs_radix_miss_t
kvs_radix_names_why(const kvs_radix_t *r, const kvs_radix_ns_t *ns,
    uint64_t chain)
{
    uint32_t                 i, mask;
    kvs_radix_miss_t         why, w;
    const kvs_radix_name_t  *n;

    mask = r->names_cap - 1;
    why = KVS_RADIX_MISS_EMPTY;

    for (i = (uint32_t) chain & mask; r->names[i].used; i = (i + 1) & mask) {
        n = &r->names[i];

        if (n->chain != chain) {
            continue;
        }

        if (n->epoch == ns->epoch && n->adapter == ns->adapter
            && n->scope_hash == ns->scope_hash)
        {
            if (n->live == 0) {
                return KVS_RADIX_MISS_EVICTED;
            }

            continue;                 /* a collision: say nothing */
        }

        if (n->live == 0) {
            continue;
        }

        w = n->epoch != ns->epoch ? KVS_RADIX_MISS_EPOCH
            : n->adapter != ns->adapter ? KVS_RADIX_MISS_ADAPTER
            : KVS_RADIX_MISS_SCOPE;

        /* one answer when several differ: epoch, then adapter, then
         * scope */
        if (why == KVS_RADIX_MISS_EMPTY || w < why) {
            why = w;
        }
    }

    return why;
}


/* The slot holding key, or the empty slot where it would go. */
static kvs_radix_name_t *
kvs_radix_names_find(kvs_radix_t *r, const kvs_radix_name_t *key)
{
    uint32_t  i, mask;

    mask = r->names_cap - 1;

    for (i = (uint32_t) key->chain & mask; r->names[i].used;
         i = (i + 1) & mask)
    {
        if (kvs_radix_names_same(&r->names[i], key)) {
            break;
        }
    }

    return &r->names[i];
}


/* Removes a record, shifting later ones of the run back so that every
 * record stays reachable from its home slot. */
static void
kvs_radix_names_delete(kvs_radix_t *r, kvs_radix_name_t *at)
{
    uint32_t  i, j, k, mask;

    mask = r->names_cap - 1;
    i = (uint32_t) (at - r->names);
    j = i;

    for ( ;; ) {
        j = (j + 1) & mask;

        if (!r->names[j].used) {
            break;
        }

        k = (uint32_t) r->names[j].chain & mask;

        /* j may move to i only if its home is not in (i, j] */
        if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) {
            continue;
        }

        r->names[i] = r->names[j];
        i = j;
    }

    memset(&r->names[i], 0, sizeof(kvs_radix_name_t));
    r->names_n--;
}


static int
kvs_radix_names_same(const kvs_radix_name_t *a, const kvs_radix_name_t *b)
{
    return a->chain == b->chain && a->epoch == b->epoch
           && a->scope_hash == b->scope_hash && a->adapter == b->adapter;
}
