/*
 * kvs_engine_tload: the disk tier's loader, off the step loop
 * (docs/prefix-cache.md, "Loads off the step").
 *
 * A request whose cache match continues into the disk tier does not go
 * to the scheduler at once.  Its load is planned on the engine thread:
 * the path names of its whole blocks after the match, as far as the
 * tier holds them, the cost model's choice, then pool blocks reserved
 * for the run (free ones, else evicted; capacity is checked before
 * anything changes) and the match's path locked.  The request then
 * waits outside the scheduler, as a LoRA adapter's does, while a loader
 * thread reads the run block by block (each verified by kvs_tier_get:
 * namespace, path name, tokens, checksum) into a bounded staging ring.
 * Each step, before its plan, the engine thread copies the staged
 * blocks into the reserved pool blocks (backend calls stay on the
 * engine thread; kvs_engine_tload_end.c, the state shared in
 * kvs_engine_tload.h); once the loader is through with the run, the
 * blocks that came in are inserted into the tree under the request's
 * namespace and the request goes to the scheduler, whose lookup finds
 * them.  Other sequences keep stepping all along.
 *
 * On a backend with the asynchronous copies (e->tier->hc; CUDA) those
 * writes are queued (kvs_engine_hcopy_write) instead of made, so no
 * step waits on a host-to-device copy, and the run is done only when
 * its last write's ticket is.  The ring is then the backend's host
 * memory (pinned on CUDA), written from in place: a copy through the
 * hcopy's own staging would cost a memcpy per block on the engine
 * thread, the very time saved, and a second ring.  A slot whose write
 * is in flight stays taken (the loader does not refill it) until its
 * ticket is settled, in ring order; a write refused or failed ends its
 * run at that block, as a bad read does (what follows is computed, or
 * loaded again by the plan at the request's admission).
 *
 * The same plan runs again when the request comes to be admitted
 * (kvs_sched_set_lower(): a request that waited in the queue, or was
 * preempted, may have lost blocks to eviction meanwhile, and the tier
 * has them).  It then leaves the waiting queue while they load and goes
 * back to its place.  A block evicted just before is still in the spill
 * queue: it counts as the tier's, and the loader waits for its write
 * before it reads the run.
 *
 * Invariants:
 *   - a loaded block enters the tree only after the tier verified it,
 *     and only the run's first `written` blocks do: the first block that
 *     fails (corrupt, gone, unreadable) ends the run there, and the
 *     request computes from that block;
 *   - a load's blocks are reserved before it starts and are its alone
 *     (refcount 1, in no table and not in the tree) until it ends: then
 *     the tree takes its own reference on what it inserts and the
 *     load's references go back, on every path (done, failed, the
 *     request cancelled while loading, the engine freed);
 *   - a staged slot is refilled only once its write, if queued, is
 *     settled, and a load's pool blocks go back (its request closed)
 *     only once none of its writes is in flight (owed until then);
 *   - memory is bounded: the blocks all loads reserve, at most half the
 *     pool (a load that needs more than what is left waits for loads
 *     under way, or takes what is left when none is), and the staging
 *     ring's slots (KVS_ENGINE_TLOAD_STAGE_BYTES, 4..256 blocks);
 *   - a run that a load under way already covers is not loaded twice:
 *     its request waits for that load, then plans again;
 *   - a loaded run's path stays locked for its request until its next
 *     admission's lookup (the lower tier's hook comes just before it,
 *     and lets go of the lock there), its end, or the end of the first
 *     plan after the load (a lock held longer could keep out the
 *     request at the queue's head forever); a request is planned at
 *     admission at most KVS_ENGINE_TLOAD_TRIES times, and not after the
 *     cost model chose to compute its run or a load of it came back
 *     empty.
 *
 * Threads and locks: the loader thread reads jobs and fills the ring
 * under ld->lk, and takes e->lock alone (never both) to wake the engine
 * thread (e->tier_ready); the engine thread takes ld->lk alone.  A job
 * is freed by the engine thread only once the loader is through with
 * it (done) and every block it staged was taken from the ring.
 */

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_clock.h"
#include "kvs_engine_tload.h"

#define KVS_ENGINE_TLOAD_STAGE_BYTES  (16u << 20)
#define KVS_ENGINE_TLOAD_STAGE_MIN    4
#define KVS_ENGINE_TLOAD_STAGE_MAX    256
#define KVS_ENGINE_TLOAD_TRIES        4   /* loads planned at admission */



static void *kvs_engine_tload_main(void *arg);
static int kvs_engine_tload_lower(void *arg, kvs_seq_t *seq);


int
kvs_engine_tload_new(kvs_engine_t *e, kvs_err_t *err)
{
    int                  rc;
    uint64_t             n;
    kvs_engine_tier_t   *et = e->tier;
    kvs_engine_tload_t  *ld;

    ld = calloc(1, sizeof(kvs_engine_tload_t));
    if (ld == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "kv tier: out of memory for "
                           "the loader");
    }

    et->ld = ld;

    n = KVS_ENGINE_TLOAD_STAGE_BYTES / et->block_bytes;
    n = n < KVS_ENGINE_TLOAD_STAGE_MIN ? KVS_ENGINE_TLOAD_STAGE_MIN : n;
    n = n > KVS_ENGINE_TLOAD_STAGE_MAX ? KVS_ENGINE_TLOAD_STAGE_MAX : n;
    ld->n_stage = (uint32_t) n;
    ld->max_reserved = e->conf.n_blocks / 2 > 0 ? e->conf.n_blocks / 2 : 1;

    /* with the asynchronous copies the ring is read by them in place:
     * the backend's host memory (pinned on CUDA), as the copies ask */
    ld->async = et->hc != NULL && et->tier != NULL;
    ld->stage_host = ld->async && e->be->ops->host_alloc != NULL;
    ld->stage = ld->stage_host
                ? e->be->ops->host_alloc(e->be, n * et->block_bytes, err)
                : malloc(n * et->block_bytes);
    ld->ent = calloc(n, sizeof(kvs_engine_tstage_t));
    et->st.load_async = ld->async;
    if (ld->stage == NULL || ld->ent == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "kv tier: out of memory for "
                           "%" PRIu64 " staged blocks", n);
    }

    pthread_mutex_init(&ld->lk, NULL);
    pthread_cond_init(&ld->cv, NULL);
    ld->lk_on = 1;

    /* a host tier alone loads on the engine thread: no reader */
    if (et->tier == NULL) {
        return KVS_OK;
    }

    rc = kvs_tier_io_new(et->tier, &ld->io, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = pthread_create(&ld->thread, NULL, kvs_engine_tload_main, e);
    if (rc != 0) {
        return kvs_err_set(err, KVS_ENOMEM, "kv tier: the loader thread: "
                           "%s", strerror(rc));
    }

    ld->thread_on = 1;
    kvs_sched_set_lower(&e->sched, kvs_engine_tload_lower, e);

    return KVS_OK;
}


void
kvs_engine_tload_free(kvs_engine_t *e)
{
    kvs_engine_tjob_t   *j, *next;
    kvs_engine_tload_t  *ld;

    ld = e->tier != NULL ? e->tier->ld : NULL;
    if (ld == NULL) {
        return;
    }

    kvs_sched_set_lower(&e->sched, NULL, NULL);

    if (ld->thread_on) {
        pthread_mutex_lock(&ld->lk);
        ld->quit = 1;
        pthread_cond_signal(&ld->cv);
        pthread_mutex_unlock(&ld->lk);
        pthread_join(ld->thread, NULL);
    }

    /* the writes in flight read the ring and write the jobs' blocks:
     * all done (or failed) first (the loader is gone: ld->lk is free) */
    if (ld->taken > 0) {
        kvs_engine_hcopy_wait(e);
        kvs_engine_tload_settle(e);
    }

    if (ld->lk_on) {
        pthread_mutex_destroy(&ld->lk);
        pthread_cond_destroy(&ld->cv);
    }

    /* every request ended first (kvs_engine_tier_end_all): what is
     * left are cancelled jobs, their blocks and locks given back, but
     * for those whose writes were in flight then */
    for (j = ld->jobs; j != NULL; j = next) {
        next = j->next;
        if (j->owed) {
            kvs_engine_tload_give_back(e, j);
        }
        free(j);
    }

    kvs_tier_io_free(ld->io);

    if (ld->stage_host) {
        if (ld->stage != NULL && e->be->ops->host_free != NULL) {
            e->be->ops->host_free(e->be, ld->stage);
        }
    } else {
        free(ld->stage);
    }

    free(ld->ent);
    free(ld);
    e->tier->ld = NULL;
}


/* The loader tells the engine thread that it has work. */
static void
kvs_engine_tload_wake(kvs_engine_t *e)
{
    pthread_mutex_lock(&e->lock);
    e->tier_ready = 1;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
}


/* The loader: reads the oldest job's blocks, one at a time, into the
 * ring's free slots. */
static void *
kvs_engine_tload_main(void *arg)
{
    int                  rc;
    uint32_t             slot, k, bt;
    uint64_t             t0;
    kvs_err_t            err;
    kvs_engine_t        *e = arg;
    kvs_engine_tier_t   *et = e->tier;
    kvs_engine_tjob_t   *j;
    kvs_engine_tload_t  *ld = et->ld;

    bt = e->conf.block_tokens;

    pthread_mutex_lock(&ld->lk);

    for ( ;; ) {
        for (j = ld->jobs; j != NULL && j->done; j = j->next) {
            /* void */
        }

        if (ld->quit) {
            break;
        }

        if (j == NULL
            || (ld->count == ld->n_stage && !j->stop && !j->failed
                && j->read < j->n))
        {
            pthread_cond_wait(&ld->cv, &ld->lk);
            continue;
        }

        if (j->stop || j->failed || j->read == j->n) {
            j->done = 1;
            pthread_mutex_unlock(&ld->lk);
            kvs_engine_tload_wake(e);
            pthread_mutex_lock(&ld->lk);
            continue;
        }

        /* the one slot past the staged ones: the engine thread reads
         * only staged slots, so it is this thread's until counted */
        slot = (ld->head + ld->count) % ld->n_stage;
        k = j->read;
        pthread_mutex_unlock(&ld->lk);

        /* blocks evicted just before the plan: written first */
        if (j->ticket > 0) {
            kvs_tier_spill_wait_for(et->spill, j->ticket);
        }

        kvs_err_clear(&err);
        t0 = kvs_now_ns();

        if (j->host[k]) {
            /* a host block inside a disk run: a copy (gone since the
             * plan: the run ends here) */
            rc = kvs_engine_thost_get(e, &j->key, j->ids[k],
                                      j->tokens + (size_t) k * bt,
                                      ld->stage
                                      + (size_t) slot * et->block_bytes,
                                      &err);
        } else {
            rc = kvs_tier_get(et->tier, ld->io, &j->key, j->ids[k],
                              j->tokens + (size_t) k * bt,
                              ld->stage + (size_t) slot * et->block_bytes,
                              &err);
        }

        t0 = kvs_now_ns() - t0;

        pthread_mutex_lock(&ld->lk);

        if (j->host[k]) {
            j->host_ns += t0;
        } else {
            j->read_ns += t0;
        }

        if (rc == KVS_OK) {
            ld->ent[slot].job = j;
            ld->ent[slot].k = k;
            ld->count++;
            j->read++;

        } else {
            j->failed = 1;
        }

        pthread_mutex_unlock(&ld->lk);
        kvs_engine_tload_wake(e);
        pthread_mutex_lock(&ld->lk);
    }

    pthread_mutex_unlock(&ld->lk);

    return NULL;
}


static void
kvs_engine_tload_park(kvs_engine_tload_t *ld, kvs_engine_seq_t *h)
{
    h->tier_next = NULL;
    h->tier_prev = ld->park_tail;

    if (ld->park_tail != NULL) {
        ld->park_tail->tier_next = h;
    } else {
        ld->park_head = h;
    }

    ld->park_tail = h;
}


void
kvs_engine_tload_unpark(kvs_engine_tload_t *ld, kvs_engine_seq_t *h)
{
    if (h->tier_prev != NULL) {
        h->tier_prev->tier_next = h->tier_next;
    } else {
        ld->park_head = h->tier_next;
    }

    if (h->tier_next != NULL) {
        h->tier_next->tier_prev = h->tier_prev;
    } else {
        ld->park_tail = h->tier_prev;
    }

    h->tier_prev = NULL;
    h->tier_next = NULL;
    h->tier_state = KVS_ENGINE_TIER_NONE;
}


static int
kvs_engine_tload_same_ns(const kvs_radix_key_t *a, const kvs_radix_key_t *b)
{
    return a->epoch == b->epoch && a->adapter == b->adapter
           && a->scope_len == b->scope_len
           && (a->scope_len == 0
               || memcmp(a->scope, b->scope, a->scope_len) == 0);
}


/* 1 when a load under way reads the block named id under key. */
static int
kvs_engine_tload_busy(kvs_engine_tload_t *ld, const kvs_radix_key_t *key,
    const uint8_t *id)
{
    uint32_t            k;
    kvs_engine_tjob_t  *j;

    /* the engine thread alone links and unlinks jobs */
    for (j = ld->jobs; j != NULL; j = j->next) {
        if (j->h == NULL || !kvs_engine_tload_same_ns(&j->key, key)) {
            continue;
        }

        for (k = 0; k < j->n; k++) {
            if (memcmp(j->ids[k], id, KVS_TIER_ID_LEN) == 0) {
                return 1;
            }
        }
    }

    return 0;
}


/* h to the scheduler: back to its place when it was taken out of the
 * waiting queue at its admission, else at the back. */
void
kvs_engine_tload_sched(kvs_engine_t *e, kvs_engine_seq_t *h)
{
    if (h->tier_requeue) {
        h->tier_requeue = 0;
        kvs_sched_return(&e->sched, &h->seq);
        return;
    }

    kvs_sched_add(&e->sched, &h->seq);
}


/* h is to wait for a load (WAIT or LOADING next): parked, counted, out
 * of the waiting queue if it was in it, and a lock it held from an
 * earlier load let go (the new plan's match locks that path too). */
static void
kvs_engine_tload_hold(kvs_engine_t *e, kvs_engine_seq_t *h)
{
    kvs_engine_tload_t  *ld = e->tier->ld;

    if (h->seq.state == KVS_SEQ_WAITING) {
        kvs_sched_remove(&e->sched, &h->seq);
        h->tier_requeue = 1;
    }

    switch (h->tier_state) {

    case KVS_ENGINE_TIER_NONE:
        kvs_engine_tload_park(ld, h);
        break;

    case KVS_ENGINE_TIER_HOLD:
        kvs_radix_unlock(e->radix, h->tier_node);
        h->tier_node = NULL;
        break;

    default:
        return;                       /* WAIT: parked and counted */
    }

    ld->n_parked++;
    h->tier_since = kvs_now_ns();
}


/* 1 when the tier holds the block named id under key, or the spill
 * queue is writing it there (*ticket raised to its ticket). */
static int
kvs_engine_tload_has(kvs_engine_tier_t *et, const kvs_radix_key_t *key,
    const uint8_t *id, uint64_t *ticket)
{
    uint64_t  t;

    if (kvs_tier_has(et->tier, key, id)) {
        return 1;
    }

    t = kvs_tier_spill_find(et->spill, key, id);
    *ticket = t > *ticket ? t : *ticket;

    return t > 0;
}


/*
 * Plans h's load: 1 when h waits (a load started, a load of the same
 * blocks is under way, or the loads' room is short while others run),
 * with h->tier_state set; 0 when it goes to the scheduler now (nothing
 * in the tier, the cost model chose to compute, or no pool room).
 */
int
kvs_engine_tload_plan(kvs_engine_t *e, kvs_engine_seq_t *h)
{
    size_t               sz;
    int                  host_ok;
    uint32_t             bt, k0, kmax, k, n, room, free_n, nd, others;
    uint64_t             ticket, ns0, got0;
    kvs_err_t            err;
    kvs_seq_t           *seq = &h->seq;
    kvs_radix_key_t      key;
    kvs_radix_match_t    m;
    kvs_engine_tjob_t   *j;
    kvs_engine_tier_t   *et = e->tier;
    kvs_engine_tload_t  *ld = et->ld;

    if (seq->ns == NULL || e->sched.conf.window != 0 || seq->n_computed > 0
        || seq->n_tokens < 2)
    {
        return 0;
    }

    bt = e->conf.block_tokens;

    /* the match, locked: its path stays while the run loads */
    kvs_radix_match(e->radix, seq->ns, seq->tokens, seq->n_tokens - 1,
                    et->table, 1, e->sched.now, &m);

    /* its host run's copies off the step still in flight
     * (kvs_engine_hcopy.c): it waits for them */
    if (et->th != NULL && kvs_engine_hcopy_busy(e, h)) {
        goto wait;
    }

    k0 = m.n_tokens / bt;
    kmax = seq->n_tokens / bt;
    kmax = kmax < et->max_blocks ? kmax : et->max_blocks;

    /* a match up to the lookup's cap (all but the last token) gains
     * nothing from a load: its last block is the tree's already */
    if (k0 >= kmax || m.n_tokens + 1 >= seq->n_tokens) {
        goto none;
    }

    kvs_radix_ns_key(seq->ns, &key);

    /* the host tier's run first, copied in now (the match grows); the
     * disk tier's run, if any, continues after it.  Copied on the
     * engine thread, they are weighed against the prefill with no
     * batch (kvs_tier_cost.h), from their own measured rate; a host
     * tier whose copies cost more than the prefill is passed over, in
     * a disk run too.  Copied off the step (kvs_engine_hcopy.c), they
     * cost no one else a step and this request one DMA a block: they
     * always load, as the cost model's unmeasured rate would say */
    host_ok = et->th != NULL
              && (e->conf.tier_load_always || et->st.host_async
                  || kvs_tier_cost_decide(&et->cost_host, bt,
                                          et->block_bytes, 0, 0));

    if (host_ok) {
        ns0 = et->st.host_load_ns;
        got0 = et->st.host_loaded_blocks;

        (void) kvs_engine_thost_load(e, h, &key, &m, kmax,
                                     ld->max_reserved - ld->reserved);

        /* its copies now queued: h waits for them, then plans again */
        if (kvs_engine_hcopy_busy(e, h)) {
            goto wait;
        }

        k0 = m.n_tokens / bt;

        kvs_tier_cost_load(&et->cost_host,
                           (et->st.host_loaded_blocks - got0)
                           * et->block_bytes,
                           et->st.host_load_ns - ns0);

        if (k0 >= kmax || m.n_tokens + 1 >= seq->n_tokens) {
            goto none;
        }
    }

    if (et->tier == NULL) {
        goto none;
    }

    /* the path names of the blocks before the run, then the run's as
     * far as the tiers (or the disk's spill queue) have them: the
     * disk's, or the host's between */
    ticket = 0;
    nd = 0;

    for (k = 0; k < kmax; k++) {
        kvs_tier_path_id(k > 0 ? et->ids[k - 1] : NULL,
                         seq->tokens + (size_t) k * bt, bt, et->ids[k]);

        if (k < k0) {
            continue;
        }

        et->host[k - k0] = 0;

        if (kvs_engine_tload_has(et, &key, et->ids[k], &ticket)) {
            nd++;

        } else if (host_ok && kvs_engine_thost_has(e, &key, et->ids[k]))
        {
            et->host[k - k0] = 1;

        } else {
            break;
        }
    }

    n = k - k0;

    if (n == 0) {
        goto none;
    }

    if (h->tier_state == KVS_ENGINE_TIER_NONE) {
        et->st.lookups++;
    }

    if (kvs_engine_tload_busy(ld, &key, et->ids[k0])) {
        goto wait;
    }

    room = ld->max_reserved - ld->reserved;

    if (room < n && ld->jobs != NULL) {
        goto wait;
    }

    /* the cost model weighs the disk's blocks (the host's were weighed
     * above): read behind the loads under way, off the step, against a
     * prefill that every other sequence would wait for: running, queued
     * or parked for a load (h itself is in the queue at its admission,
     * parked when planned again from WAIT) */
    others = e->sched.running.n + e->sched.waiting.n + ld->n_parked
             - (h->seq.state == KVS_SEQ_WAITING)
             - (h->tier_state == KVS_ENGINE_TIER_WAIT
                || h->tier_state == KVS_ENGINE_TIER_LOADING);

    if (!e->conf.tier_load_always && nd > 0
        && !kvs_tier_cost_decide(&et->cost, (uint64_t) nd * bt,
                                 (uint64_t) nd * et->slot_bytes,
                                 (uint64_t) ld->reserved * et->slot_bytes,
                                 others))
    {
        et->st.recomputed_blocks += nd;
        h->tier_done = 1;
        goto none;
    }

    n = n < room ? n : room;

    /* the run's slots first in the tiers' LRU, before the evictions
     * below spill into them */
    for (k = k0; k < k0 + n; k++) {
        if (et->host[k - k0]) {
            (void) kvs_engine_thost_has(e, &key, et->ids[k]);
        } else {
            (void) kvs_tier_touch(et->tier, &key, et->ids[k]);
        }
    }

    /* room in the pool: free blocks, then what the tree can give up
     * (the match's path is locked, so it stays) */
    free_n = kvs_kv_pool_free_count(e->pool);

    if (free_n < n) {
        et->load_room = 1;            /* not at the run's host blocks */
        (void) kvs_radix_evict(e->radix, n - free_n);
        et->load_room = 0;
        free_n = kvs_kv_pool_free_count(e->pool);
        n = n < free_n ? n : free_n;
    }

    if (n == 0) {
        goto none;
    }

    sz = sizeof(kvs_engine_tjob_t)
         + (size_t) (k0 + n) * sizeof(uint32_t)
         + (size_t) n * bt * sizeof(int32_t)
         + (size_t) n * KVS_TIER_ID_LEN + n;

    j = calloc(1, sz);
    if (j == NULL) {
        goto none;
    }

    j->blocks = (uint32_t *) (j + 1);
    j->tokens = (int32_t *) (j->blocks + k0 + n);
    j->ids = (uint8_t (*)[KVS_TIER_ID_LEN]) (j->tokens + (size_t) n * bt);
    j->host = (uint8_t *) (j->ids + n);

    kvs_err_clear(&err);

    if (kvs_kv_pool_alloc(e->pool, n, j->blocks + k0, &err) != KVS_OK) {
        free(j);
        goto none;
    }

    memcpy(j->blocks, et->table, (size_t) k0 * sizeof(uint32_t));
    memcpy(j->tokens, seq->tokens + (size_t) k0 * bt,
           (size_t) n * bt * sizeof(int32_t));
    memcpy(j->ids, et->ids[k0], (size_t) n * KVS_TIER_ID_LEN);
    memcpy(j->host, et->host, n);

    j->h = h;
    j->node = m.node;
    j->k0 = k0;
    j->n = n;
    j->key = key;
    memcpy(j->scope, key.scope, key.scope_len);
    j->key.scope = j->scope;
    j->ticket = ticket;

    /* the run's blocks that only the spill queue has yet */
    for (k = k0; ticket > 0 && k < k0 + n; k++) {
        et->st.queued_blocks += !kvs_tier_has(et->tier, &key, et->ids[k]);
    }

    ld->reserved += n;
    et->st.admit_loads += h->seq.state == KVS_SEQ_WAITING
                          || h->tier_requeue;
    kvs_engine_tload_hold(e, h);

    h->tier_state = KVS_ENGINE_TIER_LOADING;
    h->tier_job = j;

    pthread_mutex_lock(&ld->lk);

    if (ld->jobs_tail != NULL) {
        ld->jobs_tail->next = j;
    } else {
        ld->jobs = j;
    }

    ld->jobs_tail = j;
    pthread_cond_signal(&ld->cv);
    pthread_mutex_unlock(&ld->lk);

    return 1;

wait:

    /* a host run stays in the tree meanwhile, unlocked */
    kvs_radix_unlock(e->radix, m.node);
    kvs_engine_tload_hold(e, h);

    h->tier_state = KVS_ENGINE_TIER_WAIT;

    return 1;

none:

    /* a host run copied in stays in the tree, unlocked: the lookup
     * that admits h (at once from the scheduler's hook, or at a later
     * plan) finds it there or, evicted again, in the host tier */
    kvs_radix_unlock(e->radix, m.node);

    return 0;
}


void
kvs_engine_tier_add(kvs_engine_t *e, kvs_engine_seq_t *h)
{
    if (e->tier == NULL || e->tier->ld == NULL
        || !kvs_engine_tload_plan(e, h))
    {
        kvs_sched_add(&e->sched, &h->seq);
    }
}


/*
 * The scheduler's lower-tier hook: seq, waiting and holding no blocks,
 * is about to look up the tree at its admission.  Blocks of its prompt
 * evicted since it was planned (at its arrival, or before it was
 * preempted) are in the tier or on their way there: the same plan as at
 * its arrival loads them first, out of the queue (1).  0: it looks up
 * now; a lock held from an earlier load is let go just before that
 * lookup, which takes its own (nothing is evicted in between).
 */
static int
kvs_engine_tload_lower(void *arg, kvs_seq_t *seq)
{
    kvs_engine_t      *e = arg;
    kvs_engine_seq_t  *h = (kvs_engine_seq_t *) seq;

    if (!h->tier_done && h->tier_loads < KVS_ENGINE_TLOAD_TRIES
        && kvs_engine_tload_plan(e, h))
    {
        h->tier_loads++;
        kvs_engine_tload_pub(e, 0);
        return 1;
    }

    if (h->tier_state == KVS_ENGINE_TIER_HOLD) {
        kvs_radix_unlock(e->radix, h->tier_node);
        h->tier_node = NULL;
        kvs_engine_tload_unpark(e->tier->ld, h);
    }

    return 0;
}


void
kvs_engine_tier_release(kvs_engine_t *e, kvs_engine_seq_t *h)
{
    kvs_engine_tjob_t   *j;
    kvs_engine_tload_t  *ld;

    kvs_engine_hcopy_release(e, h);

    if (h->tier_state == KVS_ENGINE_TIER_NONE) {
        return;
    }

    ld = e->tier->ld;

    switch (h->tier_state) {

    case KVS_ENGINE_TIER_LOADING:
        /* the loader may still stage its blocks: they are dropped when
         * taken (j->h is NULL), and the job is freed once it is done */
        j = h->tier_job;
        j->h = NULL;
        pthread_mutex_lock(&ld->lk);
        j->stop = 1;
        pthread_cond_signal(&ld->cv);
        pthread_mutex_unlock(&ld->lk);

        /* writes in flight still write its blocks: they go back once
         * those are settled (kvs_engine_tload_finish) */
        if (j->flight > 0) {
            j->owed = 1;
        } else {
            kvs_engine_tload_give_back(e, j);
        }

        h->tier_job = NULL;
        ld->n_parked--;
        break;

    case KVS_ENGINE_TIER_WAIT:
        ld->n_parked--;
        break;

    default:
        kvs_radix_unlock(e->radix, h->tier_node);
        h->tier_node = NULL;
        break;
    }

    kvs_engine_tload_unpark(ld, h);
    e->tier->st.loading = ld->n_parked;
    e->tier->st.load_reserved = ld->reserved;
}


void
kvs_engine_tier_end_all(kvs_engine_t *e)
{
    kvs_engine_seq_t    *h, *next;
    kvs_engine_tload_t  *ld;

    if (e->tier == NULL || e->tier->ld == NULL) {
        return;
    }

    ld = e->tier->ld;

    /* the held ones are in the scheduler: they end there */
    for (h = ld->park_head; h != NULL; h = next) {
        next = h->tier_next;

        if (h->tier_state != KVS_ENGINE_TIER_HOLD) {
            kvs_engine_end(e, h, KVS_FINISH_CANCELLED, NULL, 0);
        }
    }
}
