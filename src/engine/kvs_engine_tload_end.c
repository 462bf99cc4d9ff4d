/*
 * kvs_engine_tload_end: the disk tier's loads on the engine thread,
 * each step before its plan (docs/prefix-cache.md, "Loads off the step"
 * and "Copies off the step"): the blocks the loader staged written into
 * their reserved pool blocks, at once or, on a backend with the
 * asynchronous copies, queued from the staging in place (host_alloc's
 * memory) and settled by ticket; the loads the loader is through with
 * ended (their runs into the tree, their requests to the scheduler);
 * the parked requests planned again.
 *
 * Invariants (with kvs_engine_tload.c's): a staged slot goes back to
 * the loader only once its write, if queued, is settled, in ring order;
 * a run's blocks enter the tree only once every write of it is settled,
 * and only its first `written` blocks (a write refused or failed ends
 * the run there, as a bad read does); a load's pool blocks and lock go
 * back once, when it ends or (cancelled with writes in flight, owed)
 * once those are settled.
 *
 * Threads: the engine thread; ld->lk taken alone for the ring's head
 * and count and the job list.
 */

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_clock.h"
#include "kvs_engine_tload.h"


/* The loads' gauges into the stats; published (for a step that runs
 * nothing publishes nothing) when they changed, or when force. */
void
kvs_engine_tload_pub(kvs_engine_t *e, int force)
{
    kvs_engine_tload_t  *ld = e->tier->ld;

    e->tier->st.loading = ld->n_parked;
    e->tier->st.load_reserved = ld->reserved;

    if (ld->n_parked != ld->pub_parked || ld->reserved != ld->pub_reserved
        || e->tier->st.load_copies != ld->pub_copies || force)
    {
        ld->pub_parked = ld->n_parked;
        ld->pub_reserved = ld->reserved;
        ld->pub_copies = e->tier->st.load_copies;
        pthread_mutex_lock(&e->lock);
        kvs_engine_publish(e);
        pthread_mutex_unlock(&e->lock);
    }
}


/* A load's blocks and lock back: the request ended, or the run is in
 * the tree (which took its own references). */
void
kvs_engine_tload_give_back(kvs_engine_t *e, kvs_engine_tjob_t *j)
{
    uint32_t             k;
    kvs_engine_tload_t  *ld = e->tier->ld;

    for (k = 0; k < j->n; k++) {
        (void) kvs_kv_pool_unref(e->pool, j->blocks[j->k0 + k], NULL);
    }

    kvs_radix_unlock(e->radix, j->node);
    j->node = NULL;
    ld->reserved -= j->n;
}


/* A job the loader is through with: its run into the tree and its
 * request into the scheduler (unless it was cancelled). */
static void
kvs_engine_tload_finish(kvs_engine_t *e, kvs_engine_tjob_t *j)
{
    uint32_t             got, bt, k, hgot;
    uint64_t             now;
    kvs_err_t            err;
    kvs_engine_seq_t    *h;
    kvs_radix_node_t    *node;
    kvs_engine_tier_t   *et = e->tier;
    kvs_engine_tload_t  *ld = et->ld;

    et->st.load_ns += j->read_ns;
    et->st.host_load_ns += j->host_ns;
    et->st.load_failed += j->failed || j->wfailed;

    h = j->h;
    if (h == NULL) {
        /* given back at the cancel, or owed until its writes were */
        if (j->owed) {
            kvs_engine_tload_give_back(e, j);
        }
        return;
    }

    bt = e->conf.block_tokens;
    got = j->written;
    node = NULL;

    /* the host tier's blocks of the run: not the disk's bandwidth */
    hgot = 0;
    for (k = 0; k < got; k++) {
        hgot += j->host[k];
    }

    if (got > hgot) {
        kvs_tier_cost_load(&et->cost,
                           (uint64_t) (got - hgot) * et->slot_bytes,
                           j->read_ns);
    }

    if (got > 0) {
        kvs_err_clear(&err);

        if (kvs_radix_insert(e->radix, h->seq.ns, h->seq.tokens,
                             (j->k0 + got) * bt, j->blocks, 1,
                             e->sched.now, &node, &err) != KVS_OK)
        {
            got = 0;
            hgot = 0;
            node = NULL;
        }
    }

    kvs_engine_tload_give_back(e, j);

    now = kvs_now_ns();
    et->st.loaded_blocks += got - hgot;
    et->st.host_loaded_blocks += hgot;
    et->st.host_bytes_out += (uint64_t) hgot * et->block_bytes;
    et->st.loads += got > 0;
    et->st.load_waits++;
    et->st.load_wait_ns += now > h->tier_since ? now - h->tier_since : 0;

    h->tier_job = NULL;

    /* a load that carries on an earlier one's run (at arrival, then at
     * admission) adds to its range: both are the tier's tokens */
    if (h->seq.tier_to <= h->seq.tier_from
        || h->seq.tier_to != j->k0 * bt)
    {
        h->seq.tier_from = j->k0 * bt;
        h->seq.tier_host_blocks = 0;
    }

    h->seq.tier_to = (j->k0 + got) * bt;
    h->seq.tier_host_blocks += hgot;
    h->seq.tier_last_host = got > 0 && j->host[got - 1];
    ld->n_parked--;

    if (node != NULL) {
        h->tier_node = node;
        h->tier_held = 0;
        h->tier_state = KVS_ENGINE_TIER_HOLD;

    } else {
        h->tier_done = 1;
        kvs_engine_tload_unpark(ld, h);
    }

    kvs_engine_tload_sched(e, h);
}


/* The staged block in slot into its pool block: written now, or its
 * write queued (ent->ticket); skipped when its request is gone, its run
 * ended or a block before it is missing. */
static void
kvs_engine_tload_write(kvs_engine_t *e, uint32_t slot)
{
    int                  rc;
    uint8_t             *src;
    uint64_t             ticket;
    kvs_err_t            err;
    kvs_engine_tier_t   *et = e->tier;
    kvs_engine_tload_t  *ld = et->ld;
    kvs_engine_tstage_t *ent = &ld->ent[slot];
    kvs_engine_tjob_t   *j = ent->job;

    ent->ticket = 0;
    j->drained++;

    if (j->h == NULL || j->wfailed || ent->k != j->queued) {
        return;
    }

    src = ld->stage + (size_t) slot * et->block_bytes;
    kvs_err_clear(&err);

    if (!ld->async) {
        if (e->be->ops->block_write(e->be, j->blocks[j->k0 + ent->k], src,
                                    &err) != KVS_OK)
        {
            j->wfailed = 1;
            return;
        }

        j->queued++;
        j->written++;
        return;
    }

    rc = kvs_engine_hcopy_write(e, j->blocks[j->k0 + ent->k], src, &ticket,
                                &err);
    if (rc != KVS_OK) {
        /* the run ends at this block: computed, as after a bad read */
        et->st.load_copy_full += rc == KVS_KV_EFULL;
        et->st.load_copy_failed += rc != KVS_KV_EFULL;
        j->wfailed = 1;
        return;
    }

    ent->ticket = ticket;
    j->queued++;
    j->flight++;
}


/* The taken entries from head whose writes are settled (or that had
 * none), in ring order: their jobs told, their slots back to the
 * loader.  Stops at the first write still in flight. */
void
kvs_engine_tload_settle(kvs_engine_t *e)
{
    int                  rc;
    uint32_t             g, head;
    kvs_engine_tjob_t   *j;
    kvs_engine_tstage_t *ent;
    kvs_engine_tload_t  *ld = e->tier->ld;

    pthread_mutex_lock(&ld->lk);
    head = ld->head;
    pthread_mutex_unlock(&ld->lk);

    for (g = 0; g < ld->taken; g++) {
        ent = &ld->ent[(head + g) % ld->n_stage];

        if (ent->ticket == 0) {
            continue;
        }

        rc = kvs_engine_hcopy_settled(e, ent->ticket);
        if (rc == 0) {
            break;
        }

        j = ent->job;
        j->flight--;
        ent->ticket = 0;

        /* written in run order: after a failed one none counts (a
         * refused one queued none after it, the ones before count) */
        if (rc > 0 && ent->k == j->written) {
            j->written++;

        } else if (j->h != NULL) {
            e->tier->st.load_copy_failed += rc < 0;
            j->wfailed = 1;
        }
    }

    if (g == 0) {
        return;
    }

    ld->taken -= g;

    pthread_mutex_lock(&ld->lk);
    ld->head = (head + g) % ld->n_stage;
    ld->count -= g;
    pthread_cond_signal(&ld->cv);
    pthread_mutex_unlock(&ld->lk);
}


void
kvs_engine_tier_admit(kvs_engine_t *e)
{
    uint32_t             i, n, head, n_done, held;
    kvs_engine_seq_t    *h, *hnext;
    kvs_engine_tjob_t   *j, *next, **pp, *done, **dtail;
    kvs_engine_tload_t  *ld;

    if (e->tier == NULL || e->tier->ld == NULL) {
        return;
    }

    ld = e->tier->ld;

    pthread_mutex_lock(&e->lock);
    e->tier_ready = 0;
    pthread_mutex_unlock(&e->lock);

    /* the host tier's copies done so far: their loads' requests plan
     * again below; the disk loads' writes too */
    kvs_engine_hcopy_poll(e, 1);

    /* the staged blocks not yet taken into their pool blocks, in order;
     * the slots are the engine thread's until given back (settled) */
    pthread_mutex_lock(&ld->lk);
    n = ld->count;
    head = ld->head;
    pthread_mutex_unlock(&ld->lk);

    for (i = ld->taken; i < n; i++) {
        kvs_engine_tload_write(e, (head + i) % ld->n_stage);
    }

    ld->taken = n;
    kvs_engine_tload_settle(e);

    /* the jobs the loader is through with, whose every staged block was
     * taken and whose writes are all settled, out of the list */
    done = NULL;
    dtail = &done;

    pthread_mutex_lock(&ld->lk);

    ld->jobs_tail = NULL;

    for (pp = &ld->jobs; *pp != NULL; ) {
        j = *pp;

        if (j->done && j->drained == j->read && j->flight == 0) {
            *pp = j->next;
            j->next = NULL;
            *dtail = j;
            dtail = &j->next;
            continue;
        }

        ld->jobs_tail = j;
        pp = &j->next;
    }

    pthread_mutex_unlock(&ld->lk);

    n_done = 0;

    for (j = done; j != NULL; j = next) {
        next = j->next;
        kvs_engine_tload_finish(e, j);
        free(j);
        n_done++;
    }

    /* the held paths of requests that the scheduler looked up (they
     * lock their own), and the waiting requests planned again */
    held = 0;

    for (h = ld->park_head; h != NULL; h = hnext) {
        hnext = h->tier_next;

        switch (h->tier_state) {

        case KVS_ENGINE_TIER_HOLD:
            /* its admission's hook lets go of the lock; else it is let
             * go after one plan, so that the loaded path, held while
             * the request is not admitted, never keeps another request
             * out (both would wait forever); its admission's hook loads
             * again what was evicted meanwhile */
            if (h->seq.state != KVS_SEQ_WAITING || h->tier_held) {
                kvs_radix_unlock(e->radix, h->tier_node);
                h->tier_node = NULL;
                kvs_engine_tload_unpark(ld, h);

            } else {
                h->tier_held = 1;
                held++;
            }
            break;

        case KVS_ENGINE_TIER_WAIT:
            if (!kvs_engine_tload_plan(e, h)) {
                kvs_engine_tload_unpark(ld, h);
                ld->n_parked--;
                kvs_engine_tload_sched(e, h);
            }
            break;

        default:
            break;
        }
    }

    /* a held path is let go at the next step: that step must come even
     * if this one runs nothing (the engine thread would sleep) */
    if (held > 0) {
        pthread_mutex_lock(&e->lock);
        e->tier_ready = 1;
        pthread_mutex_unlock(&e->lock);
    }

    kvs_engine_tload_pub(e, n_done > 0);
}
