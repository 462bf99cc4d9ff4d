/*
 * kvs_engine_hcopy: the lower tiers' copies off the step loop
 * (docs/prefix-cache.md, "Copies off the step"), for a backend with the
 * asynchronous block copies (kvs_backend.h: block_read_async,
 * block_write_async, copy_poll, copy_wait; CUDA: a copy stream).
 *
 * A spill into the host tier reserves its slot (pending: no load sees
 * it) and queues the block's copy out; the pool block is free at once
 * (the backend took it as the steps left it).  The slot becomes a
 * stored block when its ticket is done, and only then is it published
 * to the prefix index as the host tier's.  A host load holds its slots,
 * reserves its pool blocks and queues the copies in; its request waits
 * parked (the loader's WAIT) until the last ticket is done, then the
 * run enters the tree and the request plans again, as after a disk
 * load.  A spill into the disk tier (no host tier, or one that could not
 * take the block) copies the block into a staging ring of the backend's
 * host memory (CUDA: pinned) and joins the disk tier's spill queue when
 * its ticket is done, as the synchronous spill joins it at once.  A
 * disk load's blocks (kvs_engine_tload_end.c) are written into the pool
 * from the loader's staging, host_alloc's, by copies queued here and
 * counted (ld_copies), the loader settling each by its ticket
 * (kvs_engine_hcopy_settled): the ticket order, the poll and the wait at
 * free are the same as the host tier's.
 *
 * What it owns: the spills in flight (a ring, ticket order: the host
 * tier's and the disk tier's), the disk spills' staging ring (its
 * blocks, keys and tokens; taken and given back in ticket order) and
 * the loads in flight (a list, ticket order), with the pool blocks,
 * host slots and tree lock each holds.
 *
 * Invariants:
 *   - a pending slot is held and found by no load until its ticket is
 *     done (kvs_tier_host_reserve); a failed copy forgets it;
 *   - a staging block is read by no one until its ticket is done, then
 *     copied into the spill queue (kvs_tier_spill_push_named copies)
 *     and reused; a full ring, a copy refused or failed drops the spill,
 *     counted, as a full spill queue does;
 *   - a load's pool blocks are its own (refcount 1, in no table) and its
 *     host slots held until its last ticket is done, even when its
 *     request ended meanwhile: only then do they go back, so no step
 *     reads a block still being written and no slot is reused while a
 *     copy reads it; a finished load's run enters the tree only when
 *     its request is still there, under its path's lock (taken at the
 *     plan, so the blocks before the run stay);
 *   - at free every copy is waited for before the host memory goes
 *     (kvs_engine_hcopy_free runs before the host tier's free and the
 *     spill queue's: a disk spill done is queued, to be written), and
 *     every hold, block, staging block and lock goes back once;
 *   - a step never waits on a copy: the engine thread only polls, and
 *     waits only at free and in kvs_engine_tier_wait (tests).
 *
 * Threads: the engine thread alone (backend ops, tree, pool).
 */

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_clock.h"
#include "kv/kvs_tier_host.h"
#include "kvs_engine_tier.h"


typedef struct {
    uint64_t             ticket;
    uint32_t             slot;      /* disk: its staging block */
    uint8_t              disk;      /* 1: into the disk tier's queue */
    uint8_t              named;     /* 0: unnamed, never published */
    uint64_t             ns;        /* kvs_tier_ns_hash() of its key */
    uint8_t              path[KVS_TIER_ID_LEN];
    uint8_t              name[KVS_RADIX_NAME_LEN];   /* index name */
} kvs_engine_hspill_t;

typedef struct {
    kvs_radix_key_t      key;       /* key.scope points at scope */
    char                 scope[KVS_RADIX_MAX_SCOPE];
} kvs_engine_dkey_t;

typedef struct kvs_engine_hjob_s  kvs_engine_hjob_t;

struct kvs_engine_hjob_s {
    kvs_engine_seq_t    *h;             /* NULL: its request ended */
    kvs_radix_node_t    *node;          /* the match's lock */
    uint64_t             ticket;        /* its last copy */
    uint64_t             since;         /* queued at, ns */
    uint32_t             k0;            /* the run's first block */
    uint32_t             n;             /* blocks in the run */
    uint32_t            *blocks;        /* [k0 + n] the match's, then the
                                           run's own */
    uint32_t            *slots;         /* [n] held host slots */
    kvs_engine_hjob_t   *next;
};

struct kvs_engine_hcopy_s {
    kvs_engine_hspill_t *spill;         /* [cap] ring */
    uint32_t             cap;
    uint32_t             head;
    uint32_t             count;         /* both tiers' */
    uint8_t             *d_mem;         /* [d_cap][block_bytes] staging,
                                           host_alloc's */
    int32_t             *d_tokens;      /* [d_cap][block_tokens] */
    kvs_engine_dkey_t   *d_key;         /* [d_cap] */
    uint32_t             d_cap;         /* 0: no disk tier */
    uint32_t             d_head;
    uint32_t             d_count;       /* the disk's spills in flight */
    kvs_engine_hjob_t   *jobs;          /* oldest first */
    kvs_engine_hjob_t  **tail;
    uint32_t             n_jobs;
    uint32_t             in_jobs;       /* their blocks */
    uint32_t             ld_copies;     /* a disk load's writes in flight
                                           (kvs_engine_tload_end.c) */
    uint64_t             done;          /* the last ticket done */
    uint64_t             last;          /* the last ticket queued */
    uint64_t             bad_to;        /* every ticket up to it failed
                                           (or is taken for failed: a
                                           copy done but settled after a
                                           failure is only recomputed) */
};


/* The copies in flight into the stats (the engine thread's). */
static void
kvs_engine_hcopy_count(kvs_engine_t *e, kvs_engine_hcopy_t *hc)
{
    e->tier->st.host_copies = hc->count - hc->d_count + hc->in_jobs;
    e->tier->st.spill_copies = hc->d_count;
    e->tier->st.load_copies = hc->ld_copies;
}


int
kvs_engine_hcopy_new(kvs_engine_t *e, uint32_t depth, kvs_err_t *err)
{
    size_t                  bytes;
    kvs_engine_tier_t      *et = e->tier;
    kvs_engine_hcopy_t     *hc;
    kvs_tier_host_stats_t   hs;

    hc = calloc(1, sizeof(kvs_engine_hcopy_t));
    if (hc == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "kv tier: out of memory");
    }

    et->hc = hc;
    hc->tail = &hc->jobs;

    /* a host spill in flight holds a slot, a disk spill a staging block:
     * never more than the two */
    if (et->th != NULL) {
        kvs_tier_host_stats(kvs_engine_thost_tier(e), &hs);
        hc->cap = (uint32_t) hs.slots;
    }

    hc->d_cap = et->tier != NULL ? depth : 0;
    hc->cap += hc->d_cap;
    hc->spill = calloc(hc->cap > 0 ? hc->cap : 1,
                       sizeof(kvs_engine_hspill_t));

    if (hc->spill == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "kv tier: out of memory for "
                           "%" PRIu32 " copies", hc->cap);
    }

    if (hc->d_cap == 0) {
        return KVS_OK;
    }

    bytes = (size_t) hc->d_cap * et->block_bytes;
    hc->d_mem = e->be->ops->host_alloc != NULL
                ? e->be->ops->host_alloc(e->be, bytes, err)
                : malloc(bytes);
    hc->d_tokens = calloc((size_t) hc->d_cap * e->conf.block_tokens,
                          sizeof(int32_t));
    hc->d_key = calloc(hc->d_cap, sizeof(kvs_engine_dkey_t));

    if (hc->d_mem == NULL || hc->d_tokens == NULL || hc->d_key == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "kv tier: no host memory for "
                           "%" PRIu32 " staged spills of %" PRIu64
                           " bytes", hc->d_cap, et->block_bytes);
    }

    return KVS_OK;
}


static kvs_engine_hcopy_t *
kvs_engine_hcopy_of(kvs_engine_t *e)
{
    return e->tier != NULL ? e->tier->hc : NULL;
}


/* A load's copies are done (ok) or failed: its run into the tree when
 * its request is still there, then its blocks, slots and lock back. */
static void
kvs_engine_hcopy_finish(kvs_engine_t *e, kvs_engine_hjob_t *j, int ok)
{
    uint32_t             bt, k;
    uint64_t             now;
    kvs_err_t            err;
    kvs_seq_t           *seq;
    kvs_radix_node_t    *node;
    kvs_engine_tier_t   *et = e->tier;
    kvs_tier_host_t     *host = kvs_engine_thost_tier(e);

    bt = e->conf.block_tokens;
    node = NULL;

    if (j->h != NULL && ok) {
        seq = &j->h->seq;
        kvs_err_clear(&err);

        if (kvs_radix_insert(e->radix, seq->ns, seq->tokens,
                             (j->k0 + j->n) * bt, j->blocks, 1,
                             e->sched.now, &node, &err)
            != KVS_OK)
        {
            node = NULL;
        }
    }

    for (k = 0; k < j->n; k++) {
        (void) kvs_kv_pool_unref(e->pool, j->blocks[j->k0 + k], NULL);
        kvs_tier_host_release(host, j->slots[k]);
    }

    if (j->node != NULL) {
        kvs_radix_unlock(e->radix, j->node);
    }

    if (node != NULL) {
        kvs_radix_unlock(e->radix, node);
        seq = &j->h->seq;

        /* a run that carries on the last one adds to its range */
        if (seq->host_to <= seq->host_from
            || seq->host_to != j->k0 * bt)
        {
            seq->host_from = j->k0 * bt;
        }

        seq->host_to = (j->k0 + j->n) * bt;

        et->st.host_loads++;
        et->st.host_loaded_blocks += j->n;
        et->st.host_bytes_out += (uint64_t) j->n * et->block_bytes;
    }

    if (!ok) {
        et->st.host_copy_failed += j->n;
    }

    now = kvs_now_ns();
    et->st.host_copy_waits++;
    et->st.host_copy_wait_ns += now > j->since ? now - j->since : 0;

    free(j);
}


/* A disk spill's copy done (or failed): its staged block into the
 * spill queue, which copies it, and the staging block back. */
static void
kvs_engine_hcopy_queue_disk(kvs_engine_t *e, kvs_engine_hcopy_t *hc,
    const kvs_engine_hspill_t *s, int failed)
{
    kvs_err_t            err;
    const uint8_t       *name;
    kvs_engine_dkey_t   *dk = &hc->d_key[s->slot];
    kvs_engine_tier_t   *et = e->tier;

    name = s->named ? s->name : NULL;
    kvs_err_clear(&err);

    if (failed) {
        et->st.spill_failed++;

    } else if (kvs_tier_spill_push_named(et->spill, &dk->key, s->path, name,
                                         hc->d_tokens + (size_t) s->slot
                                                    * e->conf.block_tokens,
                                         hc->d_mem + (size_t) s->slot
                                                     * et->block_bytes,
                                         &err)
               == KVS_OK)
    {
        kvs_engine_tier_ix_spilled_named(e, &dk->key, s->path, name, 0);
    }

    /* staged and settled in ticket order: s->slot is the ring's head */
    hc->d_head = (hc->d_head + 1) % hc->d_cap;
    hc->d_count--;
}


/* Everything up to hc->done settled: spills stored, loads finished;
 * failed: every copy in flight failed (the backend said so). */
static void
kvs_engine_hcopy_settle(kvs_engine_t *e, kvs_engine_hcopy_t *hc,
    int loads, int failed)
{
    kvs_engine_hspill_t  *s;
    kvs_engine_hjob_t    *j;
    kvs_tier_host_t      *host;

    host = e->tier->th != NULL ? kvs_engine_thost_tier(e) : NULL;

    if (failed) {
        hc->bad_to = hc->last;        /* the disk loads' too */
    }

    while (hc->count > 0) {
        s = &hc->spill[hc->head];

        if (!failed && s->ticket > hc->done) {
            break;
        }

        if (s->disk) {
            kvs_engine_hcopy_queue_disk(e, hc, s, failed);

        } else if (failed) {
            kvs_tier_host_cancel(host, s->slot);
            e->tier->st.host_copy_failed++;
        } else {
            kvs_tier_host_ready(host, s->slot);

            /* the index: the host tier's now its bytes are there */
            kvs_engine_tier_ix_host_ns(e, s->ns, s->path,
                                       s->named ? s->name : NULL, 1);
        }

        hc->head = (hc->head + 1) % hc->cap;
        hc->count--;
    }

    while (loads && (j = hc->jobs) != NULL
           && (failed || j->ticket <= hc->done))
    {
        hc->jobs = j->next;
        if (hc->jobs == NULL) {
            hc->tail = &hc->jobs;
        }

        hc->n_jobs--;
        hc->in_jobs -= j->n;
        kvs_engine_hcopy_finish(e, j, !failed);
    }

    kvs_engine_hcopy_count(e, hc);
}


void
kvs_engine_hcopy_poll(kvs_engine_t *e, int loads)
{
    int                  rc;
    uint64_t             done;
    kvs_err_t            err;
    kvs_engine_hcopy_t  *hc = kvs_engine_hcopy_of(e);

    if (hc == NULL
        || (hc->count == 0 && hc->jobs == NULL && hc->ld_copies == 0))
    {
        return;
    }

    kvs_err_clear(&err);
    done = hc->done;
    rc = e->be->ops->copy_poll(e->be, &done, &err);

    if (rc == KVS_OK) {
        hc->done = done > hc->done ? done : hc->done;
    }

    kvs_engine_hcopy_settle(e, hc, loads, rc != KVS_OK);
}


/* Waits for every copy in flight and settles them all. */
static void
kvs_engine_hcopy_drain(kvs_engine_t *e, kvs_engine_hcopy_t *hc)
{
    int        rc;
    kvs_err_t  err;

    if (hc->count == 0 && hc->jobs == NULL && hc->ld_copies == 0) {
        return;
    }

    kvs_err_clear(&err);
    rc = e->be->ops->copy_wait(e->be, hc->last, &err);

    if (rc == KVS_OK) {
        hc->done = hc->last;
    }

    kvs_engine_hcopy_settle(e, hc, 1, rc != KVS_OK);
}


void
kvs_engine_hcopy_wait(kvs_engine_t *e)
{
    kvs_engine_hcopy_t  *hc = kvs_engine_hcopy_of(e);

    if (hc != NULL) {
        kvs_engine_hcopy_drain(e, hc);

        pthread_mutex_lock(&e->lock);
        kvs_engine_publish(e);
        pthread_mutex_unlock(&e->lock);
    }
}


void
kvs_engine_hcopy_free(kvs_engine_t *e)
{
    kvs_engine_hcopy_t  *hc = kvs_engine_hcopy_of(e);

    if (hc == NULL) {
        return;
    }

    /* the copies read and write the host tier's memory and the staging
     * ring: all done (or failed) before they go */
    kvs_engine_hcopy_drain(e, hc);

    if (hc->d_mem != NULL) {
        if (e->be->ops->host_free != NULL) {
            e->be->ops->host_free(e->be, hc->d_mem);

        } else {
            free(hc->d_mem);
        }
    }

    free(hc->d_tokens);
    free(hc->d_key);
    free(hc->spill);
    free(hc);
    e->tier->hc = NULL;
}


/* A spill's copy queued under ticket: its entry at the ring's tail. */
static void
kvs_engine_hcopy_push(kvs_engine_t *e, kvs_engine_hcopy_t *hc,
    const kvs_radix_key_t *key, const uint8_t *path, uint64_t ticket,
    uint32_t slot, int disk)
{
    const uint8_t        *name;
    kvs_engine_hspill_t  *s;

    s = &hc->spill[(hc->head + hc->count) % hc->cap];
    s->ticket = ticket;
    s->slot = slot;
    s->disk = (uint8_t) disk;
    s->ns = kvs_tier_ns_hash(key);
    memcpy(s->path, path, KVS_TIER_ID_LEN);
    name = kvs_radix_spill_name(e->radix);
    s->named = name != NULL;
    if (name != NULL) {
        memcpy(s->name, name, KVS_RADIX_NAME_LEN);
    }

    hc->count++;
    hc->d_count += disk != 0;
    hc->last = ticket > hc->last ? ticket : hc->last;
    kvs_engine_hcopy_count(e, hc);
}


int
kvs_engine_hcopy_spill(kvs_engine_t *e, const kvs_radix_key_t *key,
    const uint8_t *path, const int32_t *tokens, uint32_t block)
{
    int                  rc, stored;
    void                *dst;
    uint32_t             slot;
    uint64_t             ticket;
    kvs_err_t            err;
    kvs_engine_tier_t   *et = e->tier;
    kvs_engine_hcopy_t  *hc = kvs_engine_hcopy_of(e);
    kvs_tier_host_t     *host = kvs_engine_thost_tier(e);

    kvs_err_clear(&err);

    if (hc->count == hc->cap
        || kvs_tier_host_reserve(host, key, path,
                                 kvs_radix_spill_name(e->radix), tokens,
                                 et->load_room, &stored, &slot, &dst, &err)
           != KVS_OK)
    {
        et->st.host_spill_failed++;
        return 0;
    }

    if (!stored) {
        /* refreshed: published (again) as the host tier's, as the
         * synchronous spill does */
        kvs_engine_tier_ix_host(e, key, path, kvs_radix_spill_name(e->radix),
                                1);
        et->st.host_spill_kept++;
        return 1;
    }

    rc = e->be->ops->block_read_async(e->be, block, dst, &ticket, &err);

    if (rc != KVS_OK) {
        /* the backend's copies are at their limit (or it failed): the
         * block goes to the disk tier as one the host tier cannot take */
        kvs_tier_host_cancel(host, slot);
        et->st.host_spill_failed++;
        et->st.host_copy_full += rc == KVS_KV_EFULL;
        return 0;
    }

    kvs_engine_hcopy_push(e, hc, key, path, ticket, slot, 0);

    et->st.host_spilled++;
    et->st.host_bytes_in += et->block_bytes;

    return 1;
}


void
kvs_engine_hcopy_spill_disk(kvs_engine_t *e, const kvs_radix_key_t *key,
    const uint8_t *path, const int32_t *tokens, uint32_t block)
{
    int                  rc;
    uint32_t             d;
    uint64_t             ticket;
    kvs_err_t            err;
    kvs_engine_dkey_t   *dk;
    kvs_engine_tier_t   *et = e->tier;
    kvs_engine_hcopy_t  *hc = kvs_engine_hcopy_of(e);

    if (key->scope_len > KVS_RADIX_MAX_SCOPE) {
        et->st.spill_failed++;        /* the tree holds no such key */
        return;
    }

    if (hc->d_count == hc->d_cap || hc->count == hc->cap) {
        et->st.spill_copy_full++;
        return;
    }

    /* the staging ring's next block (settled in ticket order) */
    d = (hc->d_head + hc->d_count) % hc->d_cap;
    kvs_err_clear(&err);

    rc = e->be->ops->block_read_async(e->be, block,
                                      hc->d_mem + (size_t) d
                                                  * et->block_bytes,
                                      &ticket, &err);
    if (rc != KVS_OK) {
        /* at the backend's limit: dropped, as by a full queue */
        et->st.spill_copy_full += rc == KVS_KV_EFULL;
        et->st.spill_failed += rc != KVS_KV_EFULL;
        return;
    }

    dk = &hc->d_key[d];
    dk->key = *key;
    dk->key.scope = dk->scope;
    if (key->scope_len > 0) {
        memcpy(dk->scope, key->scope, key->scope_len);
    }

    memcpy(hc->d_tokens + (size_t) d * e->conf.block_tokens, tokens,
           (size_t) e->conf.block_tokens * sizeof(int32_t));

    kvs_engine_hcopy_push(e, hc, key, path, ticket, d, 1);
}


uint32_t
kvs_engine_hcopy_load(kvs_engine_t *e, kvs_engine_seq_t *h,
    kvs_radix_match_t *m, uint32_t k0, uint32_t n, uint32_t got,
    const uint32_t *slots, const void *const *data)
{
    int                  rc;
    size_t               sz;
    uint32_t             k, queued;
    uint64_t             ticket;
    kvs_err_t            err;
    kvs_engine_hjob_t   *j;
    kvs_engine_tier_t   *et = e->tier;
    kvs_engine_hcopy_t  *hc = kvs_engine_hcopy_of(e);
    kvs_tier_host_t     *host = kvs_engine_thost_tier(e);

    sz = sizeof(kvs_engine_hjob_t)
         + (size_t) (k0 + got) * sizeof(uint32_t)
         + (size_t) got * sizeof(uint32_t);

    j = got > 0 ? calloc(1, sz) : NULL;

    /* the copies in, run order; the first the backend refuses ends the
     * run there */
    k = 0;

    if (j != NULL) {
        j->blocks = (uint32_t *) (j + 1);
        j->slots = j->blocks + k0 + got;
        memcpy(j->blocks, et->table, (size_t) (k0 + got) * sizeof(uint32_t));

        for ( /* void */ ; k < got; k++) {
            kvs_err_clear(&err);
            rc = e->be->ops->block_write_async(e->be, et->table[k0 + k],
                                               data[k], &ticket, &err);
            if (rc != KVS_OK) {
                et->st.host_copy_full += rc == KVS_KV_EFULL;
                break;
            }

            j->slots[k] = slots[k];
            j->ticket = ticket;
        }
    }

    /* what is not copied goes back now: its blocks and holds */
    queued = k;

    for ( /* void */ ; k < got; k++) {
        (void) kvs_kv_pool_unref(e->pool, et->table[k0 + k], NULL);
    }

    for (k = queued; k < n; k++) {
        kvs_tier_host_release(host, slots[k]);
    }

    if (queued == 0) {
        free(j);
        return 0;
    }

    got = queued;

    j->h = h;
    j->k0 = k0;
    j->n = got;
    j->since = kvs_now_ns();
    j->node = m->node;

    if (j->node != NULL) {
        kvs_radix_lock(e->radix, j->node);
    }

    hc->last = j->ticket > hc->last ? j->ticket : hc->last;
    *hc->tail = j;
    hc->tail = &j->next;
    hc->n_jobs++;
    hc->in_jobs += got;
    kvs_engine_hcopy_count(e, hc);

    return got;
}


int
kvs_engine_hcopy_busy(kvs_engine_t *e, kvs_engine_seq_t *h)
{
    kvs_engine_hjob_t   *j;
    kvs_engine_hcopy_t  *hc = kvs_engine_hcopy_of(e);

    if (hc == NULL) {
        return 0;
    }

    for (j = hc->jobs; j != NULL; j = j->next) {
        if (j->h == h) {
            return 1;
        }
    }

    return 0;
}


void
kvs_engine_hcopy_release(kvs_engine_t *e, kvs_engine_seq_t *h)
{
    kvs_engine_hjob_t   *j;
    kvs_engine_hcopy_t  *hc = kvs_engine_hcopy_of(e);

    if (hc == NULL) {
        return;
    }

    /* its copies go on: what they hold goes back when they are done */
    for (j = hc->jobs; j != NULL; j = j->next) {
        if (j->h == h) {
            j->h = NULL;
        }
    }
}


uint32_t
kvs_engine_hcopy_reserved(kvs_engine_t *e)
{
    kvs_engine_hcopy_t  *hc = kvs_engine_hcopy_of(e);

    return hc != NULL ? hc->in_jobs : 0;
}


uint32_t
kvs_engine_hcopy_flight(kvs_engine_t *e)
{
    kvs_engine_hcopy_t  *hc = kvs_engine_hcopy_of(e);

    return hc != NULL ? hc->count + hc->n_jobs + hc->ld_copies : 0;
}


uint32_t
kvs_engine_hcopy_disk(kvs_engine_t *e)
{
    kvs_engine_hcopy_t  *hc = kvs_engine_hcopy_of(e);

    return hc != NULL ? hc->d_count : 0;
}


int
kvs_engine_hcopy_write(kvs_engine_t *e, uint32_t block, const void *src,
    uint64_t *ticket, kvs_err_t *err)
{
    int                  rc;
    kvs_engine_hcopy_t  *hc = kvs_engine_hcopy_of(e);

    rc = e->be->ops->block_write_async(e->be, block, src, ticket, err);
    if (rc != KVS_OK) {
        return rc;
    }

    hc->last = *ticket > hc->last ? *ticket : hc->last;
    hc->ld_copies++;
    kvs_engine_hcopy_count(e, hc);

    return KVS_OK;
}


int
kvs_engine_hcopy_settled(kvs_engine_t *e, uint64_t ticket)
{
    kvs_engine_hcopy_t  *hc = kvs_engine_hcopy_of(e);

    if (ticket > hc->bad_to && ticket > hc->done) {
        return 0;
    }

    hc->ld_copies--;
    kvs_engine_hcopy_count(e, hc);

    return ticket > hc->bad_to ? 1 : -1;
}
