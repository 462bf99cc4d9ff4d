/*
 * kvs_engine_tier_ix: the lower tiers' blocks in the prefix index, the
 * disk tier's and the host tier's (docs/prefix-index.md, "Lower tiers";
 * issue 26 point 4).
 *
 * The index names a block by content (kvs_engine_index.c); the disk tier
 * files it by namespace hash and path id (kvs_tier.h).  When the tree
 * spills a named block, this file notes (namespace hash, path id) ->
 * index name in a table of its own.  The tier's watch reports each slot
 * that becomes ready (written) or leaves the index (reclaimed, corrupt)
 * by (namespace hash, path id), from the thread that wrote or read; the
 * reports queue here under a mutex of their own, and the engine thread
 * drains them in its step: a written block becomes a disk add of its
 * name, a dropped one a disk delete, and leaves the table.
 *
 * Blocks kept in the tier's file across a restart carry the name they
 * were spilled with (kvs_tier_put_named()): after the open, each step
 * walks KVS_TIER_IX_WALK more slots (kvs_tier_names()) and enters every
 * named ready one as written, a disk add, until the walk has seen every
 * slot.  The step stays busy meanwhile, so an idle engine finishes the
 * walk too, a bounded batch of adds per step (per INDEX frame).
 *
 * The host tier (kvs_engine_thost.c) tells this file on the engine
 * thread when a named block enters it (a spill: stored or refreshed) and
 * when one leaves it (evicted for room, whether on to the disk tier or
 * dropped); the entry then keeps a host flag beside the disk's state.
 * What an entry publishes is its fastest lower tier: the host tier while
 * the block is there, else the disk tier once written, else nothing;
 * each change is a delete under the old tier and an add under the new,
 * recorded at once in the step's events.  A block copied back into the
 * pool stays in the host tier's slot (kvs_tier_host keeps it), so it
 * stays published there too, as a disk block loaded back does; the pool
 * publishes it itself (kvs_engine_index.c).
 *
 * Threads: the table is the engine thread's alone (spill function,
 * host tier's hooks, drain, listing); the queue is shared with the
 * watch, which runs under the tier's lock and takes only the queue's
 * (lock order: tier, then queue; the engine thread never holds the
 * queue's lock while calling the tier).  The watch cannot take e->lock
 * to wake an idle engine (the publisher calls the tier under it): the
 * engine thread instead asks kvs_engine_tier_ix_pending() before it
 * sleeps, under e->lock (e->lock, then the spill queue's or this
 * queue's lock, each a leaf here), and steps again a tick later while
 * spills are unwritten or news undrained.  The host tier's evict hook
 * calls in under the host tier's lock, on the engine thread.
 *
 * Invariants:
 *   - a name is published as the disk tier's only after its slot was
 *     written, and unpublished when that slot leaves the tier's index:
 *     a reader never hears of a disk block that was not on disk, save a
 *     block the tier held at spill time and reclaims before the drain
 *     (then the delete follows in the same step's drain);
 *   - a name is published as the host tier's only while the host tier
 *     holds its block, and in at most one lower tier: the host tier's
 *     when both hold it;
 *   - the table holds at most cap entries (slots + queue depth, twice,
 *     plus the host tier's slots, twice): an entry goes when its block
 *     is in neither lower tier (its disk slot dropped, or its spill not
 *     queued, and not in the host tier); a spill that finds the table
 *     full is not published;
 *   - when the queue cannot grow (memory), every published lower-tier
 *     name is deleted and the table emptied: the index then says less
 *     than the tiers hold, never more.
 */

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "index/kvs_index_lookup.h"
#include "kvs_engine_tier.h"

#define KVS_TIER_IX_NONE  UINT32_MAX
#define KVS_TIER_IX_WALK  256         /* slots walked per step */

typedef struct {
    uint64_t  ns;
    uint8_t   id[KVS_TIER_ID_LEN];
    uint8_t   ready;
} kvs_tier_ix_ev_t;

/* an entry's published tier: none, or the record's tier numbers */
#define KVS_TIER_IX_PUB_NONE  0
#define KVS_TIER_IX_PUB_DISK  KVS_INDEX_TIER_DISK
#define KVS_TIER_IX_PUB_HOST  KVS_INDEX_TIER_HOST

typedef struct {
    uint64_t  ns;
    uint8_t   id[KVS_TIER_ID_LEN];
    uint8_t   name[KVS_RADIX_NAME_LEN];
    uint8_t   disk;                   /* noted for the disk: queued or
                                         written */
    uint8_t   ready;                  /* written to the disk */
    uint8_t   host;                   /* in the host tier */
    uint8_t   pub;                    /* KVS_TIER_IX_PUB_*: published */
    uint32_t  next;                   /* bucket chain or free list */
} kvs_tier_ix_ent_t;

struct kvs_engine_tier_ix_s {
    pthread_mutex_t      mu;          /* guards q, q_n, q_cap, q_lost */
    kvs_tier_ix_ev_t    *q;
    size_t               q_n;
    size_t               q_cap;
    int                  q_lost;
    kvs_tier_ix_ev_t    *taken;       /* the drain's, swapped with q */
    size_t               taken_cap;

    kvs_tier_ix_ent_t   *ent;         /* [cap] engine thread's */
    uint32_t            *buckets;     /* [mask + 1] */
    uint32_t             mask;
    uint32_t             cap;
    uint32_t             free_head;
    uint32_t             n;

    kvs_tier_t          *tier;
    uint32_t             walk;        /* the kept slots' walk: next */
    uint32_t             walk_end;    /* slots; walk == walk_end: done */
};


static void kvs_engine_tier_ix_watch(void *arg, uint64_t ns,
    const uint8_t *id, int ready);
static uint32_t *kvs_engine_tier_ix_find(kvs_engine_tier_ix_t *tx,
    uint64_t ns, const uint8_t *id);
static kvs_tier_ix_ent_t *kvs_engine_tier_ix_enter(kvs_engine_tier_ix_t *tx,
    uint64_t ns, const uint8_t *id);
static void kvs_engine_tier_ix_sync(kvs_engine_t *e, kvs_tier_ix_ent_t *en);
static void kvs_engine_tier_ix_kept_one(void *arg, uint64_t ns,
    const uint8_t *id, const uint8_t *name);
static void kvs_engine_tier_ix_each(kvs_engine_t *e, int del);
static void kvs_engine_tier_ix_empty(kvs_engine_tier_ix_t *tx);


int
kvs_engine_tier_ix_new(kvs_engine_t *e, kvs_tier_t *tier, uint64_t slots,
    uint32_t depth, kvs_err_t *err)
{
    uint32_t                 nb;
    uint64_t                 cap;
    kvs_tier_stats_t         ts;
    kvs_engine_tier_ix_t    *tx;
    kvs_engine_tier_stats_t  hs;

    if (!e->ix.naming) {
        return KVS_OK;
    }

    cap = tier != NULL ? 2 * (slots + depth) : 0;

    /* the host tier's blocks, when it has them, apart from the disk's */
    if (e->tier != NULL && e->tier->th != NULL) {
        memset(&hs, 0, sizeof(hs));
        kvs_engine_thost_live(e, &hs);
        cap += 2 * hs.host_slots;
    }

    if (cap > KVS_TIER_MAX_SLOTS) {
        cap = KVS_TIER_MAX_SLOTS;
    }

    tx = calloc(1, sizeof(kvs_engine_tier_ix_t));
    if (tx == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "kv tier: out of memory for "
                           "its index names");
    }

    for (nb = 16; nb < cap; nb *= 2) { /* void */ }

    tx->cap = (uint32_t) cap;
    tx->mask = nb - 1;
    tx->ent = malloc((size_t) cap * sizeof(kvs_tier_ix_ent_t));
    tx->buckets = malloc((size_t) nb * sizeof(uint32_t));

    if (tx->ent == NULL || tx->buckets == NULL
        || pthread_mutex_init(&tx->mu, NULL) != 0)
    {
        free(tx->ent);
        free(tx->buckets);
        free(tx);
        return kvs_err_set(err, KVS_ENOMEM, "kv tier: out of memory for "
                           "the index names of %u blocks", (unsigned) cap);
    }

    kvs_engine_tier_ix_empty(tx);

    e->tier_ix = tx;
    tx->tier = tier;

    if (tier == NULL) {
        return KVS_OK;                /* the host tier alone */
    }

    /* the blocks the file kept: walked from the first step on */
    kvs_tier_stats(tier, &ts);
    tx->walk_end = (uint32_t) ts.slots;
    tx->walk = ts.kept > 0 ? 0 : tx->walk_end;

    kvs_tier_set_watch(tier, kvs_engine_tier_ix_watch, tx);

    return KVS_OK;
}


void
kvs_engine_tier_ix_free(kvs_engine_t *e, kvs_tier_t *tier)
{
    kvs_engine_tier_ix_t  *tx = e->tier_ix;

    if (tx == NULL) {
        return;
    }

    if (tier != NULL) {
        kvs_tier_set_watch(tier, NULL, NULL);
    }

    pthread_mutex_destroy(&tx->mu);
    free(tx->q);
    free(tx->taken);
    free(tx->ent);
    free(tx->buckets);
    free(tx);
    e->tier_ix = NULL;
}


/* The tier's watch: under the tier's lock, any thread.  Queues only. */
static void
kvs_engine_tier_ix_watch(void *arg, uint64_t ns, const uint8_t *id,
    int ready)
{
    kvs_tier_ix_ev_t      *ev;
    kvs_engine_tier_ix_t  *tx = arg;

    pthread_mutex_lock(&tx->mu);

    if (!tx->q_lost
        && kvs_grow((void **) &tx->q, &tx->q_cap, tx->q_n + 1,
                    sizeof(kvs_tier_ix_ev_t)) == KVS_OK)
    {
        ev = &tx->q[tx->q_n++];
        ev->ns = ns;
        memcpy(ev->id, id, KVS_TIER_ID_LEN);
        ev->ready = (uint8_t) (ready != 0);

    } else {
        tx->q_lost = 1;
    }

    pthread_mutex_unlock(&tx->mu);
}


/* The link that holds (ns, id)'s entry, or the chain's end. */
static uint32_t *
kvs_engine_tier_ix_find(kvs_engine_tier_ix_t *tx, uint64_t ns,
    const uint8_t *id)
{
    uint32_t  *p;
    uint64_t   h;

    memcpy(&h, id, sizeof(h));
    p = &tx->buckets[(h ^ ns) & tx->mask];

    while (*p != KVS_TIER_IX_NONE
           && (tx->ent[*p].ns != ns
               || memcmp(tx->ent[*p].id, id, KVS_TIER_ID_LEN) != 0))
    {
        p = &tx->ent[*p].next;
    }

    return p;
}


/* (ns, id)'s entry, entered unpublished when new; NULL when the table
 * is full. */
static kvs_tier_ix_ent_t *
kvs_engine_tier_ix_enter(kvs_engine_tier_ix_t *tx, uint64_t ns,
    const uint8_t *id)
{
    uint32_t           *p, i;
    kvs_tier_ix_ent_t  *en;

    p = kvs_engine_tier_ix_find(tx, ns, id);

    if (*p != KVS_TIER_IX_NONE) {
        return &tx->ent[*p];
    }

    if (tx->free_head == KVS_TIER_IX_NONE) {
        return NULL;
    }

    i = tx->free_head;
    tx->free_head = tx->ent[i].next;
    en = &tx->ent[i];
    en->ns = ns;
    memcpy(en->id, id, KVS_TIER_ID_LEN);
    en->disk = 0;
    en->ready = 0;
    en->host = 0;
    en->pub = KVS_TIER_IX_PUB_NONE;
    en->next = KVS_TIER_IX_NONE;
    *p = i;
    tx->n++;

    return en;
}


void
kvs_engine_tier_ix_spilled(kvs_engine_t *e, const kvs_radix_key_t *key,
    const uint8_t *path, int stored)
{
    kvs_engine_tier_ix_spilled_named(e, key, path,
                                     kvs_radix_spill_name(e->radix),
                                     stored);
}


void
kvs_engine_tier_ix_spilled_named(kvs_engine_t *e,
    const kvs_radix_key_t *key, const uint8_t *path, const uint8_t *name,
    int stored)
{
    kvs_tier_ix_ent_t     *en;
    kvs_engine_tier_ix_t  *tx = e->tier_ix;

    if (tx == NULL || name == NULL) {
        return;                       /* unnamed: never published */
    }

    en = kvs_engine_tier_ix_enter(tx, kvs_tier_ns_hash(key), path);
    if (en == NULL) {
        return;                       /* full: not published */
    }

    if (en->pub == KVS_TIER_IX_PUB_NONE) {
        memcpy(en->name, name, KVS_RADIX_NAME_LEN);
    }

    en->disk = 1;
    en->ready |= (uint8_t) (stored != 0);
    kvs_engine_tier_ix_sync(e, en);
}


void
kvs_engine_tier_ix_host(kvs_engine_t *e, const kvs_radix_key_t *key,
    const uint8_t *path, const uint8_t *name, int in)
{
    if (e->tier_ix != NULL) {
        kvs_engine_tier_ix_host_ns(e, kvs_tier_ns_hash(key), path, name,
                                   in);
    }
}


void
kvs_engine_tier_ix_host_ns(kvs_engine_t *e, uint64_t ns,
    const uint8_t *path, const uint8_t *name, int in)
{
    uint32_t              *p;
    kvs_tier_ix_ent_t     *en;
    kvs_engine_tier_ix_t  *tx = e->tier_ix;

    if (tx == NULL) {
        return;
    }

    if (!in) {
        p = kvs_engine_tier_ix_find(tx, ns, path);
        if (*p != KVS_TIER_IX_NONE && tx->ent[*p].host) {
            tx->ent[*p].host = 0;
            kvs_engine_tier_ix_sync(e, &tx->ent[*p]);
        }

        return;
    }

    if (name == NULL) {
        return;                       /* unnamed: never published */
    }

    en = kvs_engine_tier_ix_enter(tx, ns, path);
    if (en == NULL) {
        return;                       /* full: not published */
    }

    if (en->pub == KVS_TIER_IX_PUB_NONE) {
        memcpy(en->name, name, KVS_RADIX_NAME_LEN);
    }

    en->host = 1;
    kvs_engine_tier_ix_sync(e, en);
}


/*
 * The entry's fastest lower tier published, as a delete under the one
 * it was published under and an add under the new one; an entry in
 * neither tier leaves the table (en is then free).
 */
static void
kvs_engine_tier_ix_sync(kvs_engine_t *e, kvs_tier_ix_ent_t *en)
{
    uint8_t                want;
    uint32_t              *p, i;
    kvs_engine_tier_ix_t  *tx = e->tier_ix;

    want = en->host ? KVS_TIER_IX_PUB_HOST
           : en->ready ? KVS_TIER_IX_PUB_DISK : KVS_TIER_IX_PUB_NONE;

    if (want != en->pub) {
        if (en->pub != KVS_TIER_IX_PUB_NONE) {
            kvs_engine_index_record(e, en->name, 1, en->pub);
        }

        if (want != KVS_TIER_IX_PUB_NONE) {
            kvs_engine_index_record(e, en->name, 0, want);
        }

        en->pub = want;
    }

    if (en->host || en->disk) {
        return;
    }

    p = kvs_engine_tier_ix_find(tx, en->ns, en->id);
    i = *p;
    *p = en->next;
    en->next = tx->free_head;
    tx->free_head = i;
    tx->n--;
}


void
kvs_engine_tier_ix_drain(kvs_engine_t *e)
{
    int                    lost;
    size_t                 k, n;
    uint32_t              *p;
    kvs_tier_ix_ev_t      *q;
    kvs_tier_ix_ent_t     *en;
    kvs_engine_tier_ix_t  *tx = e->tier_ix;

    pthread_mutex_lock(&tx->mu);

    q = tx->q;
    n = tx->q_n;
    k = tx->q_cap;
    tx->q = tx->taken;
    tx->q_cap = tx->taken_cap;
    tx->q_n = 0;
    tx->taken = q;
    tx->taken_cap = k;
    lost = tx->q_lost;
    tx->q_lost = 0;

    pthread_mutex_unlock(&tx->mu);

    if (lost) {
        /* the watch's news were lost: unpublish every disk name and
         * forget them all (the index then says less than the disk
         * holds, never more) */
        kvs_engine_tier_ix_each(e, 1);
        kvs_engine_tier_ix_empty(tx);
        return;
    }

    for (k = 0; k < n; k++) {
        p = kvs_engine_tier_ix_find(tx, q[k].ns, q[k].id);

        if (*p == KVS_TIER_IX_NONE) {
            continue;                 /* not ours: kept at open, unnamed */
        }

        en = &tx->ent[*p];

        if (q[k].ready) {
            en->disk = 1;
            en->ready = 1;

        } else {
            en->disk = 0;             /* its slot is gone */
            en->ready = 0;
        }

        kvs_engine_tier_ix_sync(e, en);
    }
}


int
kvs_engine_tier_ix_pending(kvs_engine_t *e)
{
    int                     n;
    kvs_tier_spill_stats_t  ss;
    kvs_engine_tier_ix_t   *tx = e->tier_ix;

    if (tx == NULL || tx->tier == NULL) {
        return 0;
    }

    pthread_mutex_lock(&tx->mu);
    n = tx->q_n > 0 || tx->q_lost;
    pthread_mutex_unlock(&tx->mu);

    if (!n && e->tier != NULL && e->tier->spill != NULL) {
        kvs_tier_spill_stats(e->tier->spill, &ss);
        n = ss.pushed > ss.written + ss.failed;
    }

    /* spills whose copy out of the pool is still in flight: not queued
     * yet (kvs_engine_hcopy.c) */
    n = n || kvs_engine_hcopy_disk(e) > 0;

    return n;
}


int
kvs_engine_tier_ix_kept(kvs_engine_t *e)
{
    kvs_engine_tier_ix_t  *tx = e->tier_ix;

    if (tx == NULL || tx->walk == tx->walk_end) {
        return 0;
    }

    tx->walk = kvs_tier_names(tx->tier, tx->walk, KVS_TIER_IX_WALK,
                              kvs_engine_tier_ix_kept_one, e);

    return tx->walk != tx->walk_end;
}


/* The walk found a named ready slot (under the tier's lock, on the
 * engine thread): written, so published unless it is already.  Its
 * drop, if it comes, is the watch's news after this. */
static void
kvs_engine_tier_ix_kept_one(void *arg, uint64_t ns, const uint8_t *id,
    const uint8_t *name)
{
    kvs_engine_t          *e = arg;
    kvs_tier_ix_ent_t     *en;

    en = kvs_engine_tier_ix_enter(e->tier_ix, ns, id);
    if (en == NULL || en->ready) {
        return;                       /* full, or published already */
    }

    if (en->pub == KVS_TIER_IX_PUB_NONE) {
        memcpy(en->name, name, KVS_RADIX_NAME_LEN);
    }

    en->disk = 1;
    en->ready = 1;
    kvs_engine_tier_ix_sync(e, en);
}


void
kvs_engine_tier_ix_list(kvs_engine_t *e)
{
    kvs_engine_tier_ix_each(e, 0);
}


/* Records every published lower-tier name, under its tier: as an add
 * (a listing) or a delete (del). */
static void
kvs_engine_tier_ix_each(kvs_engine_t *e, int del)
{
    uint32_t               b, i;
    kvs_engine_tier_ix_t  *tx = e->tier_ix;

    for (b = 0; b <= tx->mask; b++) {
        for (i = tx->buckets[b]; i != KVS_TIER_IX_NONE; i = tx->ent[i].next) {
            if (tx->ent[i].pub != KVS_TIER_IX_PUB_NONE) {
                kvs_engine_index_record(e, tx->ent[i].name, del,
                                        tx->ent[i].pub);
            }
        }
    }
}


void
kvs_engine_tier_ix_weights(kvs_engine_t *e, uint32_t *tw, uint32_t *hw)
{
    double                          bps;
    const kvs_engine_tier_stats_t  *st = &e->shown.tier;

    *tw = 0;
    *hw = 0;

    if (e->tier_ix == NULL) {
        return;
    }

    if (st->on) {
        *tw = kvs_index_tier_weight(e->conf.block_tokens, st->slot_bytes,
                                    st->load_bps_seen, st->prefill_tps);
    }

    /* the host tier's rate: the bytes copied out of it into the pool
     * over the time those copies took */
    if (st->host_on && st->host_load_ns > 0 && st->host_bytes_out > 0) {
        bps = (double) st->host_bytes_out * 1e9 / (double) st->host_load_ns;
        *hw = kvs_index_tier_weight(e->conf.block_tokens,
                                    st->host_block_bytes, bps,
                                    st->prefill_tps);
    }
}


/* No entry: every bucket empty, every entry free. */
static void
kvs_engine_tier_ix_empty(kvs_engine_tier_ix_t *tx)
{
    uint32_t  i;

    memset(tx->buckets, 0xff, ((size_t) tx->mask + 1) * sizeof(uint32_t));

    for (i = 0; i < tx->cap; i++) {
        tx->ent[i].next = i + 1 < tx->cap ? i + 1 : KVS_TIER_IX_NONE;
    }

    tx->free_head = 0;
    tx->n = 0;
}
