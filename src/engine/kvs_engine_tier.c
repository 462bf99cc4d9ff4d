/*
 * kvs_engine_tier: the engine's side of the prefix cache's disk tier
 * (docs/prefix-cache.md, "The second tier"): it opens the tier and its
 * spill queue, copies every block the tree evicts into the queue, and
 * loads the blocks that continue a sequence's match back into the pool
 * and the tree when the cost model says that is cheaper than computing
 * them.
 *
 * Threads: everything here runs on the engine thread (the radix tree's
 * spill function, the scheduler's tier loader, the step's prefill
 * sample, the stats); the spill queue's writer thread is the only other
 * one, and it touches only the queue and the tier.
 *
 * Invariants:
 *   - a block is read back into the pool only when the tier verified it
 *     (namespace, path name, tokens, checksum): a run stops at the first
 *     block that fails, and the request computes from there;
 *   - the blocks a load allocates are either in the tree when it
 *     returns (one tree reference each) or back in the pool: a load
 *     keeps no reference of its own;
 *   - the load is synchronous, at admission: it delays the step that
 *     admits the request by its read time (measured, in load_ns), and
 *     is bounded by the prompt's whole blocks and the pool's free and
 *     evictable blocks.
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_clock.h"
#include "kv/kvs_tier.h"
#include "kv/kvs_tier_cost.h"
#include "kv/kvs_tier_spill.h"
#include "kvs_engine_impl.h"

#define KVS_ENGINE_TIER_DEPTH      64     /* spill entries by default */
#define KVS_ENGINE_TIER_HALF_LIFE  10.0   /* s, of the cost's samples */


struct kvs_engine_tier_s {
    kvs_tier_t          *tier;
    kvs_tier_spill_t    *spill;
    kvs_tier_io_t       *io;            /* the loads' buffer */
    uint8_t             *block;         /* [block_bytes] a block's bytes */
    uint64_t             block_bytes;
    uint8_t            (*ids)[KVS_TIER_ID_LEN];  /* [max_blocks] */
    uint32_t            *load;          /* [max_blocks] allocated ids */
    uint32_t            *table;         /* [max_blocks] for the insert */
    uint32_t             max_blocks;    /* of a sequence's tokens */
    kvs_tier_cost_t      cost;
    kvs_engine_tier_stats_t  st;
};


static void kvs_engine_tier_spill(void *arg, const kvs_radix_key_t *key,
    const uint8_t *path, const int32_t *tokens, uint32_t block);
static uint32_t kvs_engine_tier_load(void *arg, kvs_seq_t *seq,
    const uint32_t *blocks, uint32_t n_tokens);


int
kvs_engine_tier_new(kvs_engine_t *e, kvs_err_t *err)
{
    int                rc;
    char               why[160];
    uint32_t           depth;
    kvs_tier_conf_t    tc;
    kvs_engine_tier_t *et;

    if (e->conf.tier_path == NULL) {
        return KVS_OK;
    }

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

    memset(&tc, 0, sizeof(tc));
    tc.path = e->conf.tier_path;
    tc.size = e->conf.tier_size;
    tc.block_bytes = et->block_bytes;
    tc.block_tokens = e->conf.block_tokens;
    tc.epoch = e->epoch;
    tc.model = e->conf.tier_model;
    tc.direct = 1;
    tc.write_delay_us = e->conf.tier_write_delay_us;
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

    /* the disk tier's blocks in the prefix index (kvs_engine_tier_ix.c) */
    rc = kvs_engine_tier_ix_new(e, et->tier,
                                e->conf.tier_size
                                / kvs_tier_slot_bytes(et->tier),
                                depth, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_tier_io_new(et->tier, &et->io, err);
    if (rc != KVS_OK) {
        return rc;
    }

    et->block = malloc(et->block_bytes);
    et->ids = malloc((size_t) et->max_blocks * KVS_TIER_ID_LEN);
    et->load = malloc((size_t) et->max_blocks * sizeof(uint32_t));
    et->table = malloc((size_t) et->max_blocks * sizeof(uint32_t));

    if (et->block == NULL || et->ids == NULL || et->load == NULL
        || et->table == NULL)
    {
        return kvs_err_set(err, KVS_ENOMEM, "kv tier: out of memory for "
                           "%" PRIu32 " blocks", et->max_blocks);
    }

    kvs_tier_cost_init(&et->cost, KVS_ENGINE_TIER_HALF_LIFE);
    kvs_radix_set_spill(e->radix, kvs_engine_tier_spill, e);
    kvs_sched_set_tier(&e->sched, kvs_engine_tier_load, e);

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

    kvs_sched_set_tier(&e->sched, NULL, NULL);

    /* what is queued is written first: it is the tier's to keep */
    if (et->spill != NULL) {
        kvs_tier_spill_wait(et->spill);
    }

    kvs_tier_spill_free(et->spill);
    kvs_engine_tier_ix_free(e, et->tier);
    kvs_tier_io_free(et->io);
    kvs_tier_close(et->tier);
    free(et->block);
    free(et->ids);
    free(et->load);
    free(et->table);
    free(et);
    e->tier = NULL;
}


/* The tree evicts a block: its bytes into the spill queue, unless the
 * tier has it already.  A full queue drops it (counted there). */
static void
kvs_engine_tier_spill(void *arg, const kvs_radix_key_t *key,
    const uint8_t *path, const int32_t *tokens, uint32_t block)
{
    kvs_err_t           err;
    kvs_engine_t       *e = arg;
    kvs_engine_tier_t  *et = e->tier;

    if (kvs_tier_has(et->tier, key, path)) {
        et->st.spill_kept++;
        kvs_engine_tier_ix_spilled(e, key, path, 1);
        return;
    }

    kvs_err_clear(&err);

    if (e->be->ops->block_read(e->be, block, et->block, &err) != KVS_OK) {
        et->st.spill_failed++;
        return;
    }

    if (kvs_tier_spill_push(et->spill, key, path, tokens, et->block, &err)
        == KVS_OK)
    {
        kvs_engine_tier_ix_spilled(e, key, path, 0);
    }
}


/*
 * The scheduler's loader: the whole blocks of seq's tokens after the
 * match's n_tokens that the tier holds, read back into new pool blocks
 * and inserted into the tree under seq's namespace, when the cost model
 * says loading them beats computing them.  Returns the blocks inserted.
 */
static uint32_t
kvs_engine_tier_load(void *arg, kvs_seq_t *seq, const uint32_t *blocks,
    uint32_t n_tokens)
{
    int                 rc;
    uint32_t            bt, k0, kmax, k, n, got, free_n;
    uint64_t            t0;
    kvs_err_t           err;
    kvs_radix_key_t     key;
    kvs_engine_t       *e = arg;
    kvs_engine_tier_t  *et = e->tier;
    kvs_radix_node_t   *node;

    bt = e->conf.block_tokens;
    k0 = n_tokens / bt;
    kmax = seq->n_tokens / bt;
    kmax = kmax < et->max_blocks ? kmax : et->max_blocks;

    if (k0 >= kmax) {
        return 0;
    }

    kvs_radix_ns_key(seq->ns, &key);

    /* the path names of the blocks before the run, then the run's as
     * far as the tier has them */
    for (k = 0; k < kmax; k++) {
        kvs_tier_path_id(k > 0 ? et->ids[k - 1] : NULL, seq->tokens + k * bt,
                         bt, et->ids[k]);

        if (k >= k0 && !kvs_tier_has(et->tier, &key, et->ids[k])) {
            break;
        }
    }

    n = k - k0;

    if (n == 0) {
        return 0;
    }

    et->st.lookups++;

    if (!e->conf.tier_load_always
        && !kvs_tier_cost_worth(&et->cost, (uint64_t) n * bt,
                                (uint64_t) n * kvs_tier_slot_bytes(et->tier)))
    {
        et->st.recomputed_blocks += n;
        return 0;
    }

    /* room: free blocks, then what the tree can give up (the match's
     * path is locked, so it stays) */
    free_n = kvs_kv_pool_free_count(e->pool);

    if (free_n < n) {
        (void) kvs_radix_evict(e->radix, n - free_n);
        free_n = kvs_kv_pool_free_count(e->pool);
        n = n < free_n ? n : free_n;
    }

    kvs_err_clear(&err);

    if (n == 0 || kvs_kv_pool_alloc(e->pool, n, et->load, &err) != KVS_OK) {
        return 0;
    }

    t0 = kvs_now_ns();

    for (got = 0; got < n; got++) {
        k = k0 + got;
        rc = kvs_tier_get(et->tier, et->io, &key, et->ids[k],
                          seq->tokens + k * bt, et->block, &err);

        if (rc == KVS_OK) {
            rc = e->be->ops->block_write(e->be, et->load[got], et->block,
                                         &err);
        }

        if (rc != KVS_OK) {
            /* corrupt, gone or unreadable: computed from here */
            et->st.load_failed++;
            break;
        }
    }

    t0 = kvs_now_ns() - t0;
    et->st.load_ns += t0;

    if (got > 0) {
        kvs_tier_cost_load(&et->cost,
                           (uint64_t) got * kvs_tier_slot_bytes(et->tier),
                           t0);
    }

    for (k = 0; k < k0; k++) {
        et->table[k] = blocks[k];
    }

    for (k = 0; k < got; k++) {
        et->table[k0 + k] = et->load[k];
    }

    if (got > 0
        && kvs_radix_insert(e->radix, seq->ns, seq->tokens, (k0 + got) * bt,
                            et->table, 0, e->sched.now, &node, &err)
           != KVS_OK)
    {
        got = 0;
    }

    /* the tree took its own reference on what it inserted */
    for (k = 0; k < n; k++) {
        (void) kvs_kv_pool_unref(e->pool, et->load[k], NULL);
    }

    et->st.loaded_blocks += got;
    et->st.loads += got > 0;

    return got;
}


void
kvs_engine_tier_prefill(kvs_engine_t *e, uint32_t tokens, uint64_t ns)
{
    if (e->tier != NULL && tokens > 0) {
        kvs_tier_cost_prefill(&e->tier->cost, tokens, ns);
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
    e->stats.tier.prefill_tps = e->tier->cost.prefill_tps;
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
    st->spill_dropped = ss.dropped;
    st->spill_written = ss.written;
}


void
kvs_engine_tier_wait(kvs_engine_t *e)
{
    if (e->tier != NULL) {
        kvs_tier_spill_wait(e->tier->spill);
    }
}
