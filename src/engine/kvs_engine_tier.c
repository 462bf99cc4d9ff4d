/*
 * kvs_engine_tier: the engine's side of the prefix cache's lower tiers
 * (docs/prefix-cache.md, "The second tier"): it opens the disk tier,
 * its spill queue, the host tier (kvs_engine_thost.c) and the loader
 * (kvs_engine_tload.c), copies every block the tree evicts into the
 * host tier, else the disk tier's queue, feeds the cost model its
 * prefill samples and publishes the figures.
 *
 * Threads: everything here runs on the engine thread (the radix tree's
 * spill function, the step's prefill sample, the stats); the spill
 * queue's writer and the loader are the only other threads, and they
 * touch only the queue, the tier and the loader's own locked state.
 *
 * Invariants:
 *   - an evicted block is copied out of the pool before the tree drops
 *     it, unless the tier holds it already (with asynchronous copies, the
 *     backend takes the block as the steps left it: the copy out is
 *     queued, and the bytes reach the spill queue when it is done); the
 *     eviction never waits on the disk nor on a copy (a full queue or
 *     staging ring drops the block, counted);
 *   - loads (kvs_engine_tload.c) never run on the step loop.
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_engine_tier.h"

#define KVS_ENGINE_TIER_DEPTH      64     /* spill entries by default */
#define KVS_ENGINE_TIER_HALF_LIFE  10.0   /* s, of the cost's samples */


static void kvs_engine_tier_spill(void *arg, const kvs_radix_key_t *key,
    const uint8_t *path, const int32_t *tokens, uint32_t block);


int
kvs_engine_tier_new(kvs_engine_t *e, kvs_err_t *err)
{
    int                rc;
    char               why[160];
    uint32_t           depth;
    kvs_tier_conf_t    tc;
    kvs_engine_tier_t *et;

    if (e->conf.tier_path == NULL && e->conf.tier_host_size == 0) {
        return KVS_OK;
    }

    depth = 0;

    if (e->radix == NULL) {
        return kvs_err_set(err, KVS_EINVAL, "kv tier: the prefix cache is "
                           "off, so there is nothing to spill");
    }

    if (e->be->ops->block_read == NULL || e->be->ops->block_write == NULL) {
        return kvs_err_set(err, KVS_EUNSUPPORTED, "kv tier: the %s backend "
                           "cannot copy blocks out and back yet",
                           kvs_backend_name(e->be->kind));
    }

    et = calloc(1, sizeof(kvs_engine_tier_t));
    if (et == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "kv tier: out of memory");
    }

    e->tier = et;
    et->block_bytes = e->be->kv_bytes / e->conf.n_blocks;
    et->max_blocks = e->sched.conf.n_ctx / e->conf.block_tokens + 1;

    et->block = malloc(et->block_bytes);
    et->ids = malloc((size_t) et->max_blocks * KVS_TIER_ID_LEN);
    et->table = malloc((size_t) et->max_blocks * sizeof(uint32_t));
    et->host = calloc(et->max_blocks, 1);

    if (et->block == NULL || et->ids == NULL || et->table == NULL
        || et->host == NULL)
    {
        return kvs_err_set(err, KVS_ENOMEM, "kv tier: out of memory for "
                           "%" PRIu32 " blocks", et->max_blocks);
    }

    kvs_tier_cost_init(&et->cost, KVS_ENGINE_TIER_HALF_LIFE);
    kvs_tier_cost_init(&et->cost_host, KVS_ENGINE_TIER_HALF_LIFE);

    if (e->conf.tier_host_size > 0) {
        rc = kvs_engine_thost_new(e, err);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    if (e->conf.tier_path == NULL) {
        goto loader;
    }

    memset(&tc, 0, sizeof(tc));
    tc.path = e->conf.tier_path;
    tc.size = e->conf.tier_size;
    tc.block_bytes = et->block_bytes;
    tc.block_tokens = e->conf.block_tokens;
    tc.epoch = e->epoch;
    /* a slot's bytes are in the backend's own layout and K/V dtype: a
     * file of another backend or dtype is another model's (the CPU's
     * f32, kind and dtype 0, keeps the tag as it was) */
    tc.model = e->conf.tier_model
               ^ (((uint64_t) e->be->kind << 8 | e->be->mem.kv_dtype)
                  * 0x9e3779b97f4a7c15ull);
    tc.direct = 1;
    tc.write_delay_us = e->conf.tier_write_delay_us;
    tc.read_delay_us = e->conf.tier_read_delay_us;
    why[0] = '\0';

    /* O_DIRECT where the file system takes it, else buffered */
    rc = kvs_tier_open(&et->tier, &tc, why, sizeof(why), err);
    if (rc == KVS_EUNSUPPORTED) {
        tc.direct = 0;
        rc = kvs_tier_open(&et->tier, &tc, why, sizeof(why), err);
    }

    if (rc != KVS_OK) {
        return rc;
    }

    et->st.on = 1;
    et->st.direct = (uint32_t) tc.direct;
    snprintf(et->st.discarded, sizeof(et->st.discarded), "%s", why);

    depth = e->conf.tier_depth > 0 ? e->conf.tier_depth
                                   : KVS_ENGINE_TIER_DEPTH;

    rc = kvs_tier_spill_new(&et->spill, et->tier, depth, err);
    if (rc != KVS_OK) {
        return rc;
    }

    et->slot_bytes = kvs_tier_slot_bytes(et->tier);

loader:

    /* the backend's asynchronous copies, all four, when it has them: the
     * tiers' copies off the step (kvs_engine_hcopy.c) */
    if (e->be->ops->block_read_async != NULL
        && e->be->ops->block_write_async != NULL
        && e->be->ops->copy_poll != NULL && e->be->ops->copy_wait != NULL)
    {
        rc = kvs_engine_hcopy_new(e, depth, err);
        if (rc != KVS_OK) {
            return rc;
        }

        et->st.host_async = et->th != NULL;
        et->st.spill_async = et->tier != NULL;
    }

    /* the lower tiers' blocks in the prefix index (kvs_engine_tier_ix.c) */
    rc = kvs_engine_tier_ix_new(e, et->tier,
                                et->tier != NULL
                                ? e->conf.tier_size / et->slot_bytes : 0,
                                et->tier != NULL ? depth : 0, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_engine_tload_new(e, err);
    if (rc != KVS_OK) {
        return rc;
    }

    kvs_radix_set_spill(e->radix, kvs_engine_tier_spill, e);

    return KVS_OK;
}


void
kvs_engine_tier_free(kvs_engine_t *e)
{
    kvs_engine_tier_t  *et = e->tier;

    if (et == NULL) {
        return;
    }

    if (e->radix != NULL) {
        kvs_radix_set_spill(e->radix, NULL, NULL);
    }

    kvs_engine_tload_free(e);

    /* the copies in flight first: they read and write the host tier's
     * memory, and a disk spill settled goes into the queue */
    kvs_engine_hcopy_free(e);

    /* the host tier's blocks go (not on to the disk: a restart of the
     * engine keeps only what the disk tier holds) */
    kvs_engine_thost_free(e);

    /* what is queued is written first: it is the tier's to keep */
    if (et->spill != NULL) {
        kvs_tier_spill_wait(et->spill);
    }

    kvs_tier_spill_free(et->spill);
    kvs_engine_tier_ix_free(e, et->tier);
    kvs_tier_close(et->tier);
    free(et->block);
    free(et->ids);
    free(et->table);
    free(et->host);
    free(et);
    e->tier = NULL;
}


/* The tree evicts a block: its bytes into the spill queue, unless the
 * tier has it already.  A full queue drops it (counted there).  With the
 * backend's asynchronous copies the copy out is queued instead, and the
 * block joins the spill queue when it is done (kvs_engine_hcopy.c). */
static void
kvs_engine_tier_spill(void *arg, const kvs_radix_key_t *key,
    const uint8_t *path, const int32_t *tokens, uint32_t block)
{
    kvs_err_t           err;
    kvs_engine_t       *e = arg;
    kvs_engine_tier_t  *et = e->tier;

    /* the host tier first: the disk gets what it evicts */
    if (et->th != NULL
        && kvs_engine_thost_spill(e, key, path, tokens, block))
    {
        return;
    }

    if (et->tier == NULL) {
        return;
    }

    if (kvs_tier_has(et->tier, key, path)) {
        et->st.spill_kept++;
        kvs_engine_tier_ix_spilled(e, key, path, 1);
        return;
    }

    if (et->hc != NULL) {
        /* off the step: into the queue once its copy is done */
        kvs_engine_hcopy_spill_disk(e, key, path, tokens, block);
        return;
    }

    kvs_err_clear(&err);

    if (e->be->ops->block_read(e->be, block, et->block, &err) != KVS_OK) {
        et->st.spill_failed++;
        return;
    }

    if (kvs_tier_spill_push_named(et->spill, key, path,
                                  kvs_radix_spill_name(e->radix), tokens,
                                  et->block, &err)
        == KVS_OK)
    {
        kvs_engine_tier_ix_spilled(e, key, path, 0);
    }
}


void
kvs_engine_tier_prefill(kvs_engine_t *e, uint32_t tokens, uint64_t ns)
{
    if (e->tier != NULL && tokens > 0) {
        kvs_tier_cost_prefill(&e->tier->cost, tokens, ns);
        kvs_tier_cost_prefill(&e->tier->cost_host, tokens, ns);
    }
}


void
kvs_engine_tier_publish(kvs_engine_t *e)
{
    if (e->tier == NULL) {
        return;
    }

    e->stats.tier = e->tier->st;
    e->stats.tier.load_bps = e->tier->cost.load_bps;
    e->stats.tier.load_bps_seen = e->tier->cost.load_bps_seen;
    e->stats.tier.prefill_tps = e->tier->cost.prefill_tps;
    e->stats.tier.probes = e->tier->cost.probes;
    kvs_engine_tier_live(e, &e->stats.tier);
}


void
kvs_engine_tier_live(kvs_engine_t *e, kvs_engine_tier_stats_t *st)
{
    kvs_tier_stats_t         ts;
    kvs_tier_spill_stats_t   ss;
    kvs_engine_tier_t       *et = e->tier;

    if (et == NULL) {
        return;
    }

    if (et->th != NULL) {
        kvs_engine_thost_live(e, st);
    }

    if (et->tier == NULL) {
        return;
    }

    kvs_tier_stats(et->tier, &ts);
    kvs_tier_spill_stats(et->spill, &ss);

    st->slots = ts.slots;
    st->used = ts.used;
    st->slot_bytes = ts.slot_bytes;
    st->kept = ts.kept;
    st->corrupt = ts.corrupt;
    st->bytes_written = ts.bytes_written;
    st->bytes_read = ts.bytes_read;
    st->spilled = ss.pushed;
    /* st's own spill_copy_full (published by the engine thread) */
    st->spill_dropped = ss.dropped + st->spill_copy_full;
    st->spill_written = ss.written;
}


void
kvs_engine_tier_wait(kvs_engine_t *e)
{
    kvs_engine_hcopy_wait(e);

    if (e->tier != NULL && e->tier->spill != NULL) {
        kvs_tier_spill_wait(e->tier->spill);
    }
}
