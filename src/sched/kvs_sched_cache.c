/*
 * kvs_sched_cache: a sequence's blocks against the prefix tree and the
 * pool: the cached prefix a sequence is admitted with (lookup), its
 * computed prompt shared after a commit, what it leaves in the tree when
 * it gives its blocks back (end, preemption, an admission undone), the
 * window's trim, and room made by evicting cached blocks.
 *
 * Invariants:
 *   - a sequence's first lookup whose admission went through is its
 *     answer for usage and metrics (n_cached, the miss): one undone
 *     because the sequence must wait counts nothing; a preempted one
 *     looks up again and changes neither;
 *   - a sequence holds at most one lock on the tree, its cache_node;
 *     giving its blocks back gives the lock back too;
 *   - with a window, a running sequence's table has no block wholly
 *     before n_computed + 1 - window once a commit or a lookup is done
 *     (kvs_sched_trim), and, with a cache, the tree held every whole
 *     block it gave back at the time it gave it (inserted first); such a
 *     sequence has no cache_node (no lock on the tree);
 *   - room evicts cached blocks only when that reaches the need.
 */

#include "kvs_sched_impl.h"


static void kvs_sched_trim(kvs_sched_t *s, kvs_seq_t *seq);


/* seq's n_cached split by tier: [tier_from, tier_to) is the disk's but
 * for its host blocks (the tail the lookup did not reuse is the last
 * block's), [host_from, host_to) the host tier's. */
static void
kvs_sched_cache_tiers(kvs_seq_t *seq, uint32_t bt)
{
    uint32_t  last, run, hb, lost;

    last = seq->n_cached < seq->tier_to ? seq->n_cached : seq->tier_to;
    run = last > seq->tier_from ? last - seq->tier_from : 0;
    lost = seq->tier_to > seq->tier_from
           ? seq->tier_to - seq->tier_from - run : 0;
    hb = seq->tier_host_blocks * bt;
    hb = seq->tier_last_host ? (hb > lost ? hb - lost : 0) : hb;
    hb = hb < run ? hb : run;

    seq->n_cached_tier = run - hb;

    last = seq->n_cached < seq->host_to ? seq->n_cached : seq->host_to;
    seq->n_cached_host = (last > seq->host_from ? last - seq->host_from : 0)
                         + hb;
}


/*
 * Gives a sequence about to be admitted the longest cached prefix of its
 * tokens (all but the last, whose logits are wanted): the table shares
 * the cached blocks, the path is locked.  The first lookup of a sequence
 * is its answer for usage and metrics; a preempted one looks up again.
 */
void
kvs_sched_lookup(kvs_sched_t *s, kvs_seq_t *seq)
{
    kvs_radix_match_t  m;

    if (seq->n_computed > 0) {
        return;
    }

    if (seq->ns == NULL) {
        if (!seq->looked_up) {
            seq->looked_up = 1;
            seq->miss = KVS_RADIX_MISS_OFF;
        }
        return;
    }

    kvs_radix_match(s->radix, seq->ns, seq->tokens, seq->n_tokens - 1,
                    s->match, 1, s->now, &m);

    if (m.n_tokens > 0
        && kvs_kv_table_share(&seq->table, s->pool, s->match, m.n_tokens,
                              NULL) != KVS_OK)
    {
        kvs_radix_unlock(s->radix, m.node);
        m.n_tokens = 0;
        m.node = NULL;
    }

    seq->n_computed = m.n_tokens;
    seq->cache_node = m.node;

    /* a windowed sequence locks nothing: the match's lock only split
     * and refreshed the path, its table keeps what its window reads */
    if (s->conf.window != 0) {
        kvs_radix_unlock(s->radix, seq->cache_node);
        seq->cache_node = NULL;
        kvs_sched_trim(s, seq);
    }

    if (!seq->looked_up) {
        seq->looked_up = 1;
        seq->n_cached = m.n_tokens < seq->n_prompt ? m.n_tokens
                                                   : seq->n_prompt - 1;
        /* what of it a lower tier loaded for this sequence */
        kvs_sched_cache_tiers(seq, s->pool->block_tokens);
        seq->miss = m.miss;
        seq->miss_pos = m.miss_pos;
        s->n_query_tokens += seq->n_prompt;
        s->n_hit_tokens += seq->n_cached;
        s->n_tier_hit_tokens += seq->n_cached_tier;
        s->n_host_hit_tokens += seq->n_cached_host;
    }
}


/* Undoes the accounting of seq's first lookup when its admission did
 * not go through: the lookup of the admission that does is reported. */
void
kvs_sched_unlook(kvs_sched_t *s, kvs_seq_t *seq)
{
    if (!seq->looked_up || seq->ns == NULL) {
        return;
    }

    s->n_query_tokens -= seq->n_prompt;
    s->n_hit_tokens -= seq->n_cached;
    s->n_tier_hit_tokens -= seq->n_cached_tier;
    s->n_host_hit_tokens -= seq->n_cached_host;
    seq->looked_up = 0;
    seq->n_cached = 0;
    seq->n_cached_tier = 0;
    seq->n_cached_host = 0;
    seq->miss = KVS_RADIX_MISS_NONE;
    seq->miss_pos = 0;
}


/*
 * After a commit of seq's step: a computed prompt is shared at once with
 * those that follow (other requests with its prefix); a failure only
 * costs reuse.  A windowed sequence takes no lock (kvs_sched.h), and
 * gives back the blocks its window has left behind.
 */
void
kvs_sched_computed(kvs_sched_t *s, kvs_seq_t *seq)
{
    int                err;
    kvs_radix_node_t  *node;

    if (seq->ns != NULL && !seq->prompt_cached
        && seq->n_computed >= seq->n_prompt)
    {
        err = kvs_radix_insert(s->radix, seq->ns, seq->tokens,
                               seq->n_computed, seq->table.blocks,
                               s->conf.window == 0, s->now, &node, NULL);
        if (err == KVS_OK) {
            kvs_radix_unlock(s->radix, seq->cache_node);
            seq->cache_node = s->conf.window == 0 ? node : NULL;
            seq->prompt_cached = 1;
        }
    }

    kvs_sched_trim(s, seq);
}


/*
 * A sequence gives its blocks back (end, preemption, or a lookup undone):
 * what it computed is cached first, so that the next turn of its
 * conversation, or its own recompute, finds it; then its lock goes.
 */
void
kvs_sched_let_go(kvs_sched_t *s, kvs_seq_t *seq)
{
    kvs_radix_node_t  *node;

    if (seq->ns != NULL) {
        /* out of memory, the blocks are simply not kept */
        if (seq->n_computed >= s->pool->block_tokens) {
            (void) kvs_radix_insert(s->radix, seq->ns, seq->tokens,
                                    seq->n_computed, seq->table.blocks, 0,
                                    s->now, &node, NULL);
        }

        kvs_radix_unlock(s->radix, seq->cache_node);
        seq->cache_node = NULL;
    }

    /* the table was built on this pool, so release cannot fail */
    (void) kvs_kv_table_release(&seq->table, s->pool, NULL);
    seq->n_computed = 0;
}


/*
 * With a window: gives back seq's blocks that hold only positions no
 * layer reads again (before the window of n_computed, the next position
 * to compute), the tree taking them first when there is one (what it
 * cannot take, out of memory, is simply not cached).
 */
static void
kvs_sched_trim(kvs_sched_t *s, kvs_seq_t *seq)
{
    uint32_t           first, end, dropped;
    kvs_radix_node_t  *node;

    if (s->conf.window == 0 || seq->n_computed + 1 <= s->conf.window) {
        return;
    }

    first = seq->n_computed + 1 - s->conf.window;
    end = first / s->pool->block_tokens;

    if (end <= seq->table.n_dropped) {
        return;
    }

    if (seq->ns != NULL) {
        (void) kvs_radix_insert(s->radix, seq->ns, seq->tokens,
                                end * s->pool->block_tokens,
                                seq->table.blocks, 0, s->now, &node, NULL);
    }

    kvs_kv_table_drop(&seq->table, s->pool, first, &dropped);
}


/* 1 when the pool has need free blocks, after evicting cached ones
 * if that is enough to get there (preempting is the caller's). */
int
kvs_sched_room(kvs_sched_t *s, uint32_t need)
{
    uint32_t  free;

    free = kvs_kv_pool_free_count(s->pool);

    if (need <= free) {
        return 1;
    }

    if (s->radix == NULL
        || (uint64_t) free + kvs_radix_evictable(s->radix) < need)
    {
        return 0;
    }

    (void) kvs_radix_evict(s->radix, need - free);

    return kvs_kv_pool_free_count(s->pool) >= need;
}
