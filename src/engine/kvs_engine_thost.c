/*
 * kvs_engine_thost: the prefix cache's host memory tier inside the
 * engine (docs/prefix-cache.md, "The host tier"), between the pool and
 * the disk tier: the tree's evicted blocks are copied into it, its own
 * evictions go on to the disk tier's spill queue, and a request whose
 * cache match continues into it gets those blocks copied back into the
 * pool before the scheduler sees it.
 *
 * What it owns: the host tier (kv/kvs_tier_host.c, in memory from the
 * backend's host_alloc) and a load's scratch (held slots, new blocks).
 *
 * Invariants:
 *   - the tier's memory is the backend's host_alloc's (CUDA: pinned);
 *     a backend without one refuses the tier (the CPU's pool is host
 *     memory already: its second tier is the disk);
 *   - an evicted block is copied (block_read) straight into its slot;
 *     when the tier is full, its least recently used block that no load
 *     holds goes to the disk tier's spill queue (when there is one)
 *     before its slot is reused; a block the tier cannot take (every
 *     slot held, the copy failed) goes to the disk tier's queue as
 *     without a host tier;
 *   - with a disk tier, what a load evicts from the pool for its own
 *     room takes no block out of the host tier (a full one passes it on
 *     to the disk): the blocks of the load's run that the host tier
 *     holds stay there until the load copies them;
 *   - a load holds each slot it copies from until its block_write is
 *     done, then releases it: with copies at once no hold outlives the
 *     plan that took it; with copies off the step the holds are the
 *     queued load's (kvs_engine_hcopy.c), given back when its copies
 *     are done, whether or not its request is still there;
 *   - a load's pool blocks are its own (refcount 1, in no table) until
 *     the tree takes its references at the insert; its own go back on
 *     every path, so a failed insert frees them;
 *   - a loaded block is used only under its namespace (epoch, adapter,
 *     scope compared whole), its path name and its tokens (compared
 *     token by token by kvs_tier_host_hold), as a disk block is.
 *
 * Cost: the plan (kvs_engine_tload.c) weighs a host load with the
 * cost model from the measured time of these copies, and calls this
 * only when it is worth it.  With a backend that copies asynchronously
 * (CUDA's copy stream), spills and loads are queued and settled by
 * kvs_engine_hcopy.c, off the step; otherwise the copies run on the
 * engine thread, in the plan (a memcpy on the CPU backend with the
 * tests' hooks), between steps.
 *
 * Threads: the engine thread alone; the tier locks itself, and the
 * evict hook runs under its lock (it calls only the disk tier's queue
 * and its index note, never back into the host tier).
 */

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_clock.h"
#include "kv/kvs_tier_host.h"
#include "kvs_engine_tier.h"


struct kvs_engine_thost_s {
    kvs_tier_host_t   *host;
    const void       **data;          /* [max_blocks] a load's held bytes */
    uint32_t          *slot;          /* [max_blocks] ... and slots */
};

typedef struct {
    kvs_engine_t      *e;
    uint32_t           block;         /* the pool block to copy out */
} kvs_engine_thost_fill_t;


static void *
kvs_engine_thost_alloc(void *arg, size_t bytes, kvs_err_t *err)
{
    kvs_engine_t  *e = arg;

    return e->be->ops->host_alloc(e->be, bytes, err);
}


static void
kvs_engine_thost_mfree(void *arg, void *p)
{
    kvs_engine_t  *e = arg;

    e->be->ops->host_free(e->be, p);
}


/* A block leaves the host tier for room: on to the disk tier's queue
 * (under the host tier's lock; the disk tier locks itself). */
static void
kvs_engine_thost_evicted(void *arg, const kvs_radix_key_t *key,
    const uint8_t *id, const uint8_t *name, const int32_t *tokens,
    const void *data)
{
    kvs_err_t           err;
    kvs_engine_t       *e = arg;
    kvs_engine_tier_t  *et = e->tier;

    et->st.host_evicted++;

    /* the index: no longer the host tier's (the disk's once written) */
    kvs_engine_tier_ix_host(e, key, id, name, 0);

    if (et->tier == NULL) {
        return;
    }

    if (kvs_tier_has(et->tier, key, id)) {
        et->st.spill_kept++;
        kvs_engine_tier_ix_spilled_named(e, key, id, name, 1);
        return;
    }

    kvs_err_clear(&err);

    if (kvs_tier_spill_push_named(et->spill, key, id, name, tokens, data,
                                  &err)
        == KVS_OK)
    {
        et->st.host_to_disk++;
        kvs_engine_tier_ix_spilled_named(e, key, id, name, 0);
    }
}


int
kvs_engine_thost_new(kvs_engine_t *e, kvs_err_t *err)
{
    kvs_engine_tier_t     *et = e->tier;
    kvs_engine_thost_t    *th;
    kvs_tier_host_conf_t   hc;

    if (e->be->ops->host_alloc == NULL || e->be->ops->host_free == NULL) {
        return kvs_err_set(err, KVS_EUNSUPPORTED, "kv tier host: the %s "
                           "backend gives no host memory apart from its "
                           "pool (its KV pool is host memory already: use "
                           "a disk tier)", kvs_backend_name(e->be->kind));
    }

    /* block_read and block_write: checked by kvs_engine_tier_new */

    th = calloc(1, sizeof(kvs_engine_thost_t));
    if (th == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "kv tier host: out of memory");
    }

    et->th = th;

    th->data = calloc(et->max_blocks, sizeof(const void *));
    th->slot = calloc(et->max_blocks, sizeof(uint32_t));
    if (th->data == NULL || th->slot == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "kv tier host: out of memory "
                           "for %" PRIu32 " blocks", et->max_blocks);
    }

    memset(&hc, 0, sizeof(hc));
    hc.size = e->conf.tier_host_size;
    hc.block_bytes = et->block_bytes;
    hc.block_tokens = e->conf.block_tokens;
    hc.epoch = e->epoch;
    hc.alloc = kvs_engine_thost_alloc;
    hc.free = kvs_engine_thost_mfree;
    hc.mem_arg = e;
    hc.evict = kvs_engine_thost_evicted;
    hc.evict_arg = e;

    if (kvs_tier_host_new(&th->host, &hc, err) != KVS_OK) {
        return err->code;
    }

    et->st.host_on = 1;
    et->st.host_block_bytes = et->block_bytes;

    return KVS_OK;
}


void
kvs_engine_thost_free(kvs_engine_t *e)
{
    kvs_engine_thost_t  *th = e->tier != NULL ? e->tier->th : NULL;

    if (th == NULL) {
        return;
    }

    /* copies in flight read and write the tier's memory: done first
     * (kvs_engine_tier_free frees the copies before this) */
    kvs_tier_host_free(th->host);
    free(th->data);
    free(th->slot);
    free(th);
    e->tier->th = NULL;
}


/* The pool block's bytes straight into the new slot. */
static int
kvs_engine_thost_fill(void *arg, void *dst, kvs_err_t *err)
{
    kvs_engine_thost_fill_t  *f = arg;

    return f->e->be->ops->block_read(f->e->be, f->block, dst, err);
}


int
kvs_engine_thost_spill(kvs_engine_t *e, const kvs_radix_key_t *key,
    const uint8_t *path, const int32_t *tokens, uint32_t block)
{
    int                       stored;
    kvs_err_t                 err;
    kvs_engine_tier_t        *et = e->tier;
    kvs_engine_thost_fill_t   f;

    if (et->hc != NULL) {
        return kvs_engine_hcopy_spill(e, key, path, tokens, block);
    }

    f.e = e;
    f.block = block;
    kvs_err_clear(&err);

    if (kvs_tier_host_put_with(et->th->host, key, path,
                               kvs_radix_spill_name(e->radix), tokens,
                               kvs_engine_thost_fill, &f, et->load_room,
                               &stored, &err)
        != KVS_OK)
    {
        et->st.host_spill_failed++;
        return 0;
    }

    /* the index: the host tier's now */
    kvs_engine_tier_ix_host(e, key, path, kvs_radix_spill_name(e->radix), 1);

    if (stored) {
        et->st.host_spilled++;
        et->st.host_bytes_in += et->block_bytes;

    } else {
        et->st.host_spill_kept++;
    }

    return 1;
}


uint32_t
kvs_engine_thost_load(kvs_engine_t *e, kvs_engine_seq_t *h,
    const kvs_radix_key_t *key, kvs_radix_match_t *m, uint32_t kmax,
    uint32_t room)
{
    uint32_t             bt, k0, k, i, n, got, free_n;
    uint64_t             t0;
    kvs_err_t            err;
    kvs_seq_t           *seq = &h->seq;
    kvs_radix_node_t    *node;
    kvs_engine_tier_t   *et = e->tier;
    kvs_engine_thost_t  *th = et->th;

    bt = e->conf.block_tokens;
    k0 = m->n_tokens / bt;

    if (k0 >= kmax || room == 0) {
        return 0;
    }

    /* copies off the step: the spills done so far are stored blocks;
     * a run of h's in flight already is waited for (the plan parks h) */
    if (et->hc != NULL) {
        kvs_engine_hcopy_poll(e, 0);

        if (kvs_engine_hcopy_busy(e, h)) {
            return 0;
        }

        /* the loads' bound counts the blocks loads in flight hold */
        k = kvs_engine_hcopy_reserved(e);
        room = room > k ? room - k : 0;

        if (room == 0) {
            return 0;
        }
    }

    /* the path names up to the run, then the run's blocks held as far
     * as the tier has them (tokens compared): the evictions below
     * cannot take a held slot */
    for (k = 0; k < kmax; k++) {
        kvs_tier_path_id(k > 0 ? et->ids[k - 1] : NULL,
                         seq->tokens + (size_t) k * bt, bt, et->ids[k]);

        if (k < k0) {
            continue;
        }

        if (k - k0 == room
            || kvs_tier_host_hold(th->host, key, et->ids[k],
                                  seq->tokens + (size_t) k * bt,
                                  &th->data[k - k0], &th->slot[k - k0],
                                  &err)
               != KVS_OK)
        {
            break;
        }
    }

    n = k - k0;

    if (n == 0) {
        return 0;
    }

    /* room in the pool: free blocks, then what the tree can give up
     * (the match's path is locked; what it evicts spills into the tier,
     * around the held slots) */
    free_n = kvs_kv_pool_free_count(e->pool);

    if (free_n < n) {
        et->load_room = et->tier != NULL;
        (void) kvs_radix_evict(e->radix, n - free_n);
        et->load_room = 0;
        free_n = kvs_kv_pool_free_count(e->pool);
    }

    got = 0;
    kvs_err_clear(&err);

    if (free_n > 0
        && kvs_kv_pool_alloc(e->pool, n < free_n ? n : free_n,
                             et->table + k0, &err)
           == KVS_OK)
    {
        got = n < free_n ? n : free_n;
    }

    if (et->hc != NULL) {
        /* queued: into the tree once done (h waits parked) */
        return kvs_engine_hcopy_load(e, h, m, k0, n, got, th->slot,
                                     th->data);
    }

    t0 = kvs_now_ns();

    /* the copies in, run order; the first that fails ends the run */
    for (k = 0; k < got; k++) {
        if (e->be->ops->block_write(e->be, et->table[k0 + k], th->data[k],
                                    &err)
            != KVS_OK)
        {
            break;
        }
    }

    et->st.host_load_ns += kvs_now_ns() - t0;

    for (i = k; i < got; i++) {
        (void) kvs_kv_pool_unref(e->pool, et->table[k0 + i], NULL);
    }

    got = k;

    /* every hold back: the bytes are in the pool */
    for (k = 0; k < n; k++) {
        kvs_tier_host_release(th->host, th->slot[k]);
    }

    if (got == 0) {
        return 0;
    }

    /* into the tree (its own references), then the load's back; the
     * longer match replaces the old one, locked */
    node = NULL;

    if (kvs_radix_insert(e->radix, seq->ns, seq->tokens, (k0 + got) * bt,
                         et->table, 1, e->sched.now, &node, &err)
        != KVS_OK)
    {
        node = NULL;
    }

    for (k = 0; k < got; k++) {
        (void) kvs_kv_pool_unref(e->pool, et->table[k0 + k], NULL);
    }

    if (node == NULL) {
        return 0;
    }

    kvs_radix_unlock(e->radix, m->node);
    kvs_radix_match(e->radix, seq->ns, seq->tokens, seq->n_tokens - 1,
                    et->table, 1, e->sched.now, m);
    kvs_radix_unlock(e->radix, node);

    seq->host_from = k0 * bt;
    seq->host_to = (k0 + got) * bt;

    et->st.host_loads++;
    et->st.host_loaded_blocks += got;
    et->st.host_bytes_out += (uint64_t) got * et->block_bytes;

    return got;
}


int
kvs_engine_thost_has(kvs_engine_t *e, const kvs_radix_key_t *key,
    const uint8_t *id)
{
    return kvs_tier_host_touch(e->tier->th->host, key, id);
}


int
kvs_engine_thost_get(kvs_engine_t *e, const kvs_radix_key_t *key,
    const uint8_t *id, const int32_t *tokens, void *dst, kvs_err_t *err)
{
    return kvs_tier_host_get(e->tier->th->host, key, id, tokens, dst, err);
}


void
kvs_engine_thost_live(kvs_engine_t *e, kvs_engine_tier_stats_t *st)
{
    kvs_tier_host_stats_t  hs;

    kvs_tier_host_stats(e->tier->th->host, &hs);

    st->host_slots = hs.slots;
    st->host_used = hs.used;
    st->host_hits = hs.hits;
}


kvs_tier_host_t *
kvs_engine_thost_tier(kvs_engine_t *e)
{
    return e->tier->th->host;
}
