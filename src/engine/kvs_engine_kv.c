/*
 * kvs_engine_kv: each sequence's count of the KV cache it held, in KV
 * blocks x microseconds (kv_block_us), which the engine hands over with
 * its output (kvs_engine_out_t.kv_block_us, OUT's kv_block_us) so that
 * kv_rate charges what a request really held (docs/limits.md).
 *
 * Invariants (engine thread only):
 *  - only running sequences count: a sequence holds blocks from the plan
 *    that admits it until its end or a preemption, and none while it
 *    waits in the queue; between two counts its blocks do not change
 *    (tables grow in plans), so blocks x the time since its stamp is
 *    exact up to the truncation of each count to whole microseconds,
 *    but for a sliding window's blocks dropped after a step, which
 *    count until the next one;
 *  - a stamp is the time of the latest count (or admission) of that
 *    sequence; a running sequence whose stamp is not the current step's
 *    was admitted by its plan (or preempted and admitted again) and
 *    counts from the plan;
 *  - the count saturates at UINT64_MAX instead of wrapping.
 */

#include "base/kvs_clock.h"
#include "kvs_engine_impl.h"


/* a += blocks x dt_ns / 1000, saturating */
static void
kvs_engine_kv_add(uint64_t *a, uint64_t blocks, uint64_t dt_ns)
{
    uint64_t  us;

    us = dt_ns / 1000;

    if (blocks != 0 && us > UINT64_MAX / blocks) {
        *a = UINT64_MAX;
        return;
    }

    us *= blocks;
    *a = us > UINT64_MAX - *a ? UINT64_MAX : *a + us;
}


static void
kvs_engine_kv_seq(kvs_engine_seq_t *h, uint64_t now_ns)
{
    if (h->kv_stamp_ns != 0 && now_ns > h->kv_stamp_ns) {
        kvs_engine_kv_add(&h->kv_block_us,
                          kvs_kv_table_held(&h->seq.table),
                          now_ns - h->kv_stamp_ns);
    }

    h->kv_stamp_ns = now_ns;
}


void
kvs_engine_kv_count(kvs_engine_t *e, uint64_t now_ns)
{
    kvs_seq_t  *seq;

    for (seq = e->sched.running.head; seq != NULL; seq = seq->next) {
        kvs_engine_kv_seq((kvs_engine_seq_t *) seq, now_ns);
    }
}


void
kvs_engine_kv_admitted(kvs_engine_t *e, uint64_t now_ns)
{
    kvs_seq_t  *seq;

    /* those counted at the step's start are stamped now_ns already;
     * the others were waiting then and count from the plan */
    for (seq = e->sched.running.head; seq != NULL; seq = seq->next) {
        ((kvs_engine_seq_t *) seq)->kv_stamp_ns = now_ns;
    }
}


void
kvs_engine_kv_end(kvs_engine_seq_t *h)
{
    if (h->seq.state == KVS_SEQ_RUNNING) {
        kvs_engine_kv_seq(h, kvs_now_ns());
    }
}
