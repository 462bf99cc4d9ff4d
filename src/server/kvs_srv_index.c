/*
 * kvs_srv_index: the engine process's side of the prefix index: which
 * client publishes (SUBSCRIBE), and the INDEX frames it is sent
 * (kvs_wire.h, docs/prefix-index.md).
 *
 * Invariants:
 *   - the publisher is a subscribed client not torn down; when it goes,
 *     the subscribed client with the lowest serial (the oldest
 *     connection) takes over with a resync, and with none left the
 *     engines stop recording;
 *   - every engine records while there is a publisher, and what it
 *     recorded goes to the publisher in the order taken (a listing, then
 *     changes), split into frames of at most KVS_WIRE_INDEX_MAX_NAMES
 *     names, in the order of kvs_engine_index_t (the pool's adds, its
 *     dels, the disk tier's adds and dels);
 *   - frames are appended to the publisher's output buffer like any
 *     other: nothing here blocks, and a publisher that stops reading is
 *     cut off by out_limit like any slow client (another takes over).
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kvs_srv_impl.h"

#define KVS_SRV_LOAD_NS  1000000000ULL    /* a load report at least this
                                             often */


static void kvs_srv_index_send(kvs_srv_t *srv, uint32_t m, uint64_t now);


void
kvs_srv_subscribe(kvs_srv_t *srv, kvs_srv_client_t *c)
{
    uint32_t  k;

    c->subscribed = 1;

    if (srv->publisher != NULL && srv->publisher != c) {
        return;                       /* a standby, for when it goes */
    }

    if (srv->publisher == NULL) {
        kvs_srv_log(srv, "prefix index: client %" PRIu64 " publishes",
                    c->serial);
    }

    /* new, or the publisher asking again (its Redis came back): the
     * whole cache is listed anew */
    srv->publisher = c;

    for (k = 0; k < srv->n_engines; k++) {
        kvs_engine_index_subscribe(srv->engines[k].e, 1);
        srv->engines[k].ix_sent_ns = 0;
    }
}


void
kvs_srv_unsubscribe(kvs_srv_t *srv, kvs_srv_client_t *c)
{
    uint32_t           k;
    kvs_srv_client_t  *x, *next;

    c->subscribed = 0;

    if (srv->publisher != c) {
        return;
    }

    next = NULL;

    for (x = srv->clients; x != NULL; x = x->next) {
        if (x != c && x->subscribed && !x->closing
            && (next == NULL || x->serial < next->serial))
        {
            next = x;
        }
    }

    srv->publisher = NULL;

    if (next != NULL) {
        kvs_srv_log(srv, "prefix index: client %" PRIu64 " gone, client %"
                    PRIu64 " publishes", c->serial, next->serial);
        kvs_srv_subscribe(srv, next);
        return;
    }

    kvs_srv_log(srv, "prefix index: client %" PRIu64 " gone, nobody "
                "publishes", c->serial);

    for (k = 0; k < srv->n_engines; k++) {
        kvs_engine_index_subscribe(srv->engines[k].e, 0);
    }
}


void
kvs_srv_index_tick(kvs_srv_t *srv)
{
    uint32_t  k;
    uint64_t  now;

    if (srv->publisher == NULL || srv->publisher->closing) {
        return;
    }

    now = kvs_now_ns();

    for (k = 0; k < srv->n_engines && !srv->publisher->closing; k++) {
        kvs_srv_index_send(srv, k, now);
    }
}


int
kvs_srv_index_timeout(kvs_srv_t *srv)
{
    uint32_t  k;
    uint64_t  now, due, first;

    if (srv->publisher == NULL) {
        return -1;
    }

    now = kvs_now_ns();
    first = UINT64_MAX;

    for (k = 0; k < srv->n_engines; k++) {
        due = srv->engines[k].ix_sent_ns + KVS_SRV_LOAD_NS;
        first = due < first ? due : first;
    }

    if (first <= now) {
        return 0;
    }

    /* rounded up: waking a little late is fine, spinning is not */
    return (int) ((first - now + 999999) / 1000000);
}


/* Model m's recorded changes (or, when a second has passed, its load
 * alone) to the publisher. */
static void
kvs_srv_index_send(kvs_srv_t *srv, uint32_t m, uint64_t now)
{
    size_t               total, off, take, lo, hi, end, k, n[6];
    uint32_t            *cnt[6];
    kvs_err_t            err;
    kvs_srv_client_t    *c;
    kvs_wire_index_t     w;
    kvs_engine_index_t  *ix;

    c = srv->publisher;
    ix = &srv->ix;

    if (kvs_engine_index_take(srv->engines[m].e, ix, &err) != KVS_OK) {
        /* the engine lists its cache again: nothing is lost for good */
        kvs_srv_log(srv, "prefix index: model %u: %s", m, err.msg);
        return;
    }

    n[0] = ix->n_add;
    n[1] = ix->n_del;
    n[2] = ix->n_dadd;
    n[3] = ix->n_ddel;
    n[4] = ix->n_hadd;
    n[5] = ix->n_hdel;
    total = n[0] + n[1] + n[2] + n[3] + n[4] + n[5];

    if (total == 0 && !ix->resync
        && now - srv->engines[m].ix_sent_ns < KVS_SRV_LOAD_NS)
    {
        return;
    }

    memset(&w, 0, sizeof(w));
    w.model = m;
    w.incarnation = srv->hello.incarnation;
    w.epoch = ix->epoch;
    w.block_tokens = ix->block_tokens;
    w.running = ix->running;
    w.waiting = ix->waiting;
    w.free_blocks = ix->free_blocks;
    w.long_min = ix->long_min;
    w.long_room = ix->long_room;
    w.long_slots = ix->long_slots;
    w.resync = ix->resync != 0;
    w.tier_weight = ix->tier_weight;
    w.host_weight = ix->host_weight;
    cnt[0] = &w.n_add;
    cnt[1] = &w.n_del;
    cnt[2] = &w.n_dadd;
    cnt[3] = &w.n_ddel;
    cnt[4] = &w.n_hadd;
    cnt[5] = &w.n_hdel;

    off = 0;

    do {
        /* [off, off + take) of the six lists, one after the other:
         * each frame's counts are their parts in that range */
        take = total - off < KVS_WIRE_INDEX_MAX_NAMES
               ? total - off : KVS_WIRE_INDEX_MAX_NAMES;
        end = 0;

        for (k = 0; k < 6; k++) {
            lo = end > off ? end : off;
            end += n[k];
            hi = end < off + take ? end : off + take;
            *cnt[k] = (uint32_t) (hi > lo ? hi - lo : 0);
        }

        w.names = take > 0 ? ix->names[off] : NULL;

        if (kvs_wire_enc_index(&c->out, ++c->ix_frames, &w, &err)
            != KVS_OK)
        {
            kvs_srv_close(srv, c, "%s", err.msg);
            return;
        }

        off += take;

    } while (off < total);

    srv->engines[m].ix_sent_ns = now;
    kvs_srv_mark_dirty(srv, c);
}
