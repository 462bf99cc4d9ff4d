/*
 * kvs_tier_cost: whether loading a run of blocks from a lower tier is
 * cheaper than computing their prefill again.
 *
 * Two rates are measured while serving, per model and backend: the
 * tier's load bandwidth (bytes read and verified per second) and the
 * prefill speed (prompt tokens computed per second).  Each is an
 * exponentially weighted mean of the samples given, weighted by the
 * samples' own durations, so that one tiny sample moves it little.  A
 * run of t tokens held in b bytes is worth loading when b / load_bps <
 * t / prefill_tps.  Until both rates have a sample, loading is chosen:
 * that is how the first load gets measured, and a disk read of a block
 * is far cheaper than its prefill for every model this project serves.
 *
 * A first-order model: the prefill rate is a mean over the prompts
 * served, and attention makes a block deep in a long prompt dearer than
 * that mean, so for such blocks the choice leans towards recomputing.
 *
 * Invariants: rates are 0 (unmeasured) or finite and positive; bad
 * samples (zero duration or size) change nothing.  Not locked: one
 * thread (the engine's) updates and reads it.
 */

#ifndef KVS_TIER_COST_H
#define KVS_TIER_COST_H

#include <stdint.h>

typedef struct {
    double    load_bps;               /* bytes/s; 0: unmeasured */
    double    prefill_tps;            /* tokens/s; 0: unmeasured */
    double    half_life_s;            /* of the weighting, in sample time */
    uint64_t  load_samples;
    uint64_t  prefill_samples;
} kvs_tier_cost_t;


/* Unmeasured rates; half_life_s (> 0, else 10) is how much measured
 * time halves an old sample's weight. */
void kvs_tier_cost_init(kvs_tier_cost_t *c, double half_life_s);

/* A load of bytes that took ns, read and verified. */
void kvs_tier_cost_load(kvs_tier_cost_t *c, uint64_t bytes, uint64_t ns);

/* A prefill of tokens that took ns. */
void kvs_tier_cost_prefill(kvs_tier_cost_t *c, uint64_t tokens,
    uint64_t ns);

/* 1 when loading tokens held in bytes is expected to be faster than
 * computing them; 0 when not (or for an empty run). */
int kvs_tier_cost_worth(const kvs_tier_cost_t *c, uint64_t tokens,
    uint64_t bytes);

#endif /* KVS_TIER_COST_H */
