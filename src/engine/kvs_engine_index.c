/*
 * kvs_engine_index: the engine's side of the prefix index (see
 * kvs_engine.h and docs/prefix-index.md): naming the blocks the prefix
 * cache takes in, recording the names added and evicted while a
 * consumer subscribes, and handing them over netted.
 *
 * Threads: the cache's hooks run on the engine thread inside a step and
 * append to ix.step_ev; kvs_engine_step() wraps each step with
 * kvs_engine_index_begin() (the consumer's wishes: on, off, a resync
 * listing) and kvs_engine_index_end() (the step's events appended to
 * ix.ev under e->lock).  The consumer takes ix.ev by swapping buffers
 * under the lock and nets it outside.
 *
 * Invariants:
 *   - every block in the cache is named when naming is on (the hooks
 *     are set before the first insert), so a listing is the whole cache;
 *   - while subscribed, the record (a listing, then every event after
 *     it, in order) says exactly what the cache holds; when an event
 *     cannot be kept (memory, or ev_max events not taken) the record is
 *     dropped and a resync asked for, never left with a hole;
 *   - a netted take holds each (name, tier) at most once: as added when
 *     its last event added it, as deleted when its last event evicted
 *     it.  The pool's names come first, then the disk tier's, then
 *     the host tier's (kvs_engine_tier_ix.c), each adds then dels.
 *     Since a name is in the cache at most once, its events alternate
 *     (but for a listing, which re-adds what the cache holds after the
 *     untaken events), and ordering by the last event keeps parents
 *     before children among the adds and children before parents among
 *     the dels.
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "index/kvs_index_lookup.h"
#include "index/kvs_index_name.h"
#include "index/kvs_index_lora.h"
#include "kvs_engine_impl.h"

#define KVS_ENGINE_IX_MIN_MAX  65536  /* events kept untaken, at least */


static void kvs_engine_index_added(void *arg, const kvs_radix_key_t *key,
    const uint8_t *parent, const int32_t *tokens, uint32_t n,
    uint8_t (*names)[KVS_RADIX_NAME_LEN]);
static void kvs_engine_index_evicted(void *arg, const uint8_t *name);
static int kvs_engine_index_net(kvs_engine_index_t *out, size_t n,
    kvs_err_t *err);


void
kvs_engine_index_init(kvs_engine_t *e)
{
    kvs_radix_hooks_t  hooks;

    if (e->conf.index_model == NULL || e->radix == NULL) {
        return;
    }

    e->ix.naming = 1;
    e->ix.model_len = strlen(e->conf.index_model);
    e->ix.ev_max = 4 * (size_t) e->conf.n_blocks + KVS_ENGINE_IX_MIN_MAX;

    hooks.added = kvs_engine_index_added;
    hooks.evicted = kvs_engine_index_evicted;
    hooks.arg = e;
    kvs_radix_set_hooks(e->radix, &hooks);
}


void
kvs_engine_index_done(kvs_engine_t *e)
{
    free(e->ix.step_ev);
    free(e->ix.ev);
    e->ix.step_ev = NULL;
    e->ix.ev = NULL;
}


int
kvs_engine_step(kvs_engine_t *e)
{
    int  busy;

    kvs_engine_index_begin(e);
    busy = kvs_engine_step_run(e);

    if (e->tier_ix != NULL) {
        kvs_engine_tier_ix_drain(e);
        busy |= kvs_engine_tier_ix_kept(e);
    }

    kvs_engine_index_end(e);

    return busy;
}


void
kvs_engine_index_subscribe(kvs_engine_t *e, int on)
{
    pthread_mutex_lock(&e->lock);

    e->ix.want_on = on != 0;
    e->ix.want_resync = on != 0 && e->ix.naming;

    if (!on) {
        e->ix.ev_n = 0;
        e->ix.resync = 0;
    }

    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
}


void
kvs_engine_index_resync(kvs_engine_t *e)
{
    pthread_mutex_lock(&e->lock);

    if (e->ix.want_on && e->ix.naming) {
        e->ix.want_resync = 1;
        pthread_cond_signal(&e->wake);
    }

    pthread_mutex_unlock(&e->lock);
}


int
kvs_engine_index_pending(const kvs_engine_t *e)
{
    return e->ix.want_resync;
}


static void
kvs_engine_index_listed(void *arg, const uint8_t *name)
{
    kvs_engine_index_record(arg, name, 0, 0);
}


void
kvs_engine_index_begin(kvs_engine_t *e)
{
    int  on, resync;

    if (!e->ix.naming) {
        return;
    }

    pthread_mutex_lock(&e->lock);
    on = e->ix.want_on;
    resync = e->ix.want_resync;
    e->ix.want_resync = 0;
    pthread_mutex_unlock(&e->lock);

    e->ix.on = on;
    e->ix.step_n = 0;

    if (!on) {
        e->ix.lost = 0;
        return;
    }

    if (resync || e->ix.lost) {
        /* the listing: what the cache holds now, parents first; the
         * step's events follow it */
        e->ix.lost = 0;
        e->ix.listing = 1;
        (void) kvs_radix_list_names(e->radix, kvs_engine_index_listed, e);

        if (e->tier_ix != NULL) {
            kvs_engine_tier_ix_list(e);
        }
    }
}


void
kvs_engine_index_end(kvs_engine_t *e)
{
    int       wake, listing;
    size_t    was;
    uint64_t  one;

    if (!e->ix.naming || !e->ix.on
        || (e->ix.step_n == 0 && !e->ix.listing && !e->ix.lost))
    {
        return;
    }

    listing = e->ix.listing;
    e->ix.listing = 0;
    wake = 0;

    pthread_mutex_lock(&e->lock);

    if (!e->ix.want_on) {
        /* unsubscribed during the step: nobody wants these */
        pthread_mutex_unlock(&e->lock);
        e->ix.step_n = 0;
        return;
    }

    if (listing) {
        /* untaken events stay before the listing: an eviction not yet
         * handed over still goes out as a delete (netting keeps each
         * name's last event, and the listing adds what the cache holds
         * now), so a resync never leaves a stale entry behind */
        e->ix.resync = 1;
        wake = 1;
    }

    was = e->ix.ev_n;

    if (e->ix.lost
        || e->ix.ev_n + e->ix.step_n > e->ix.ev_max
        || kvs_grow((void **) &e->ix.ev, &e->ix.ev_cap,
                    e->ix.ev_n + e->ix.step_n, sizeof(kvs_engine_ix_ev_t))
           != KVS_OK)
    {
        /* a record with a hole would lie for ever: start again */
        e->ix.ev_n = 0;
        e->ix.resync = 0;
        e->ix.want_resync = 1;
        e->ix.lost = 0;

    } else if (e->ix.step_n > 0) {
        memcpy(e->ix.ev + e->ix.ev_n, e->ix.step_ev,
               e->ix.step_n * sizeof(kvs_engine_ix_ev_t));
        e->ix.ev_n += e->ix.step_n;
        wake |= was == 0;
    }

    pthread_mutex_unlock(&e->lock);
    e->ix.step_n = 0;

    if (wake) {
        one = 1;
        if (write(e->efd, &one, sizeof(one)) < 0) {
            /* the counter is already non-zero */
        }
    }
}


int
kvs_engine_index_take(kvs_engine_t *e, kvs_engine_index_t *out,
    kvs_err_t *err)
{
    void    *ev;
    size_t   n, cap;

    out->n_add = 0;
    out->n_del = 0;
    out->n_dadd = 0;
    out->n_ddel = 0;
    out->n_hadd = 0;
    out->n_hdel = 0;

    pthread_mutex_lock(&e->lock);

    /* swap buffers: nothing is copied under the lock */
    ev = e->ix.ev;
    cap = e->ix.ev_cap;
    n = e->ix.ev_n;
    e->ix.ev = out->ev;
    e->ix.ev_cap = out->ev_cap;
    e->ix.ev_n = 0;
    out->ev = ev;
    out->ev_cap = cap;

    out->resync = e->ix.resync;
    e->ix.resync = 0;
    out->running = e->shown.running;
    out->waiting = e->shown.waiting;
    out->free_blocks = e->shown.kv_blocks >= e->shown.kv_used
                       ? e->shown.kv_blocks - e->shown.kv_used : 0;
    out->block_tokens = e->conf.block_tokens;
    out->epoch = e->epoch;
    out->long_min = e->shown.pools ? e->shown.pool_min_tokens : 0;
    out->long_room = e->shown.pools ? e->shown.long_room : 0;
    out->long_slots = e->shown.pools ? e->shown.long_slots : 0;
    kvs_engine_tier_ix_weights(e, &out->tier_weight, &out->host_weight);

    pthread_mutex_unlock(&e->lock);

    if (kvs_engine_index_net(out, n, err) != KVS_OK) {
        /* the events are gone: the subscriber gets the whole cache
         * again rather than a hole */
        out->n_add = 0;
        out->n_del = 0;
        out->n_dadd = 0;
        out->n_ddel = 0;
        out->n_hadd = 0;
        out->n_hdel = 0;
        out->resync = 0;
        kvs_engine_index_resync(e);
        return KVS_ENOMEM;
    }

    return KVS_OK;
}


void
kvs_engine_index_free(kvs_engine_index_t *out)
{
    free(out->names);
    free(out->ev);
    free(out->slots);
    memset(out, 0, sizeof(kvs_engine_index_t));
}


/* --- engine thread ------------------------------------------------------- */

/*
 * Names the n new blocks from their parent's name (the namespace's root
 * for the first blocks of a prompt).  A namespace field too long for the
 * scheme leaves them unnamed: they are then never published.
 */
static void
kvs_engine_index_added(void *arg, const kvs_radix_key_t *key,
    const uint8_t *parent, const int32_t *tokens, uint32_t n,
    uint8_t (*names)[KVS_RADIX_NAME_LEN])
{
    uint32_t           i;
    kvs_engine_t      *e = arg;
    kvs_index_ns_t     ns;
    kvs_index_name_t   prev, cur;
    char               adapter[KVS_INDEX_LORA_FIELD_LEN + 1];

    if (parent == NULL) {
        /* an adapter's blocks: its file's epoch, not the engine's id for
         * it, so a gateway can name them (kvs_index_lora.h) */
        adapter[0] = '\0';
        if (key->adapter != 0) {
            kvs_index_lora_field(kvs_engine_lora_file_epoch(e,
                                                            key->adapter),
                                 adapter);
        }

        ns.model = e->conf.index_model;
        ns.model_len = e->ix.model_len;
        ns.epoch = key->epoch;
        ns.adapter = adapter;
        ns.adapter_len = strlen(adapter);
        ns.scope = key->scope;
        ns.scope_len = key->scope_len;

        if (kvs_index_name_root(&ns, &prev, NULL) != KVS_OK) {
            return;
        }

    } else {
        memcpy(prev.b, parent, KVS_INDEX_NAME_LEN);
    }

    for (i = 0; i < n; i++) {
        kvs_index_name_next(&prev, tokens + (size_t) i * e->conf.block_tokens,
                            e->conf.block_tokens, &cur);
        memcpy(names[i], cur.b, KVS_INDEX_NAME_LEN);
        prev = cur;

        if (e->ix.on) {
            kvs_engine_index_record(e, cur.b, 0, 0);
        }
    }
}


static void
kvs_engine_index_evicted(void *arg, const uint8_t *name)
{
    kvs_engine_t  *e = arg;

    if (e->ix.on) {
        kvs_engine_index_record(e, name, 1, 0);
    }
}


void
kvs_engine_index_record(kvs_engine_t *e, const uint8_t *name, int del,
    int tier)
{
    kvs_engine_ix_ev_t  *ev;

    if (!e->ix.on || e->ix.lost) {
        return;                       /* a resync is coming anyway */
    }

    if (kvs_grow((void **) &e->ix.step_ev, &e->ix.step_cap,
                 e->ix.step_n + 1, sizeof(kvs_engine_ix_ev_t)) != KVS_OK)
    {
        e->ix.lost = 1;
        return;
    }

    ev = &e->ix.step_ev[e->ix.step_n++];
    memcpy(ev->name, name, KVS_INDEX_NAME_LEN);
    ev->del = (uint8_t) del;
    ev->tier = (uint8_t) tier;
}


/* --- the consumer's side ------------------------------------------------- */

static uint64_t
kvs_engine_index_hash(const uint8_t *name, uint8_t tier)
{
    uint64_t  h;

    /* names are hashes already: their first bytes spread well */
    memcpy(&h, name, sizeof(h));

    return h + tier;
}


/* Finds the slot of e's (name, tier): the one holding an event of
 * them, or the empty one where it would go. */
static size_t
kvs_engine_index_slot(const kvs_engine_index_t *out,
    const kvs_engine_ix_ev_t *ev, size_t mask, const kvs_engine_ix_ev_t *e)
{
    size_t  i;

    for (i = kvs_engine_index_hash(e->name, e->tier) & mask;
         out->slots[i] != UINT32_MAX; i = (i + 1) & mask)
    {
        if (ev[out->slots[i]].tier == e->tier
            && memcmp(ev[out->slots[i]].name, e->name, KVS_INDEX_NAME_LEN)
               == 0)
        {
            break;
        }
    }

    return i;
}


/* out->ev[0, n) netted into out->names: each (name, tier) once, as its
 * last event says; the pool's adds, then its dels, then the disk tier's
 * adds and dels, then the host tier's, each in the order of those last
 * events. */
static int
kvs_engine_index_net(kvs_engine_index_t *out, size_t n, kvs_err_t *err)
{
    size_t               i, cap, mask, s, k, from;
    uint32_t             pass, count[6];
    kvs_engine_ix_ev_t  *ev;

    if (n == 0) {
        return KVS_OK;
    }

    ev = out->ev;

    for (cap = 16; cap < 2 * n; cap *= 2) {
        /* void */
    }

    if (kvs_grow((void **) &out->names, &out->names_cap, n,
                 KVS_INDEX_NAME_LEN) != KVS_OK
        || kvs_grow((void **) &out->slots, &out->slots_cap, cap,
                    sizeof(uint32_t)) != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM, "prefix index: out of memory "
                           "for %zu names", n);
    }

    mask = cap - 1;
    memset(out->slots, 0xff, cap * sizeof(uint32_t));

    /* each (name, tier)'s slot ends holding its last event */
    for (i = 0; i < n; i++) {
        s = kvs_engine_index_slot(out, ev, mask, &ev[i]);
        out->slots[s] = (uint32_t) i;
    }

    k = 0;

    /* the pool's adds, its dels, the disk tier's adds, its dels, the
     * host tier's (ev.tier: 0, 1, 2) */
    for (pass = 0; pass < 6; pass++) {
        from = k;

        for (i = 0; i < n; i++) {
            if (ev[i].tier == pass / 2 && ev[i].del == pass % 2
                && out->slots[kvs_engine_index_slot(out, ev, mask, &ev[i])]
                   == i)
            {
                memcpy(out->names[k++], ev[i].name, KVS_INDEX_NAME_LEN);
            }
        }

        count[pass] = (uint32_t) (k - from);
    }

    out->n_add = count[0];
    out->n_del = count[1];
    out->n_dadd = count[2];
    out->n_ddel = count[3];
    out->n_hadd = count[4];
    out->n_hdel = count[5];

    return KVS_OK;
}
