/*
 * kvs_tier_cost: whether loading a run of blocks from a lower tier is
 * cheaper than computing their prefill again.
 *
 * Two rates are measured while serving, per model and backend: the
 * tier's load bandwidth L (bytes read and verified per second, in the
 * I/O mode the tier was opened with: O_DIRECT or buffered) and the
 * prefill speed P (prompt tokens computed per second).
 *
 * The rule weighs what each choice costs everyone, not only the
 * request (docs/prefix-cache.md, "When to load").  A prefill of t
 * tokens takes t / P of the step loop's time, and every other sequence
 * in the engine waits for it; a disk load runs on the loader thread,
 * off the step loop, and costs only this request's wait: the bytes of
 * the loads queued before it (a) and its own (b), at L.  A run is
 * loaded when
 *
 *     (a + b) / L <= (1 + r) * t / P
 *
 * where r is the number of other sequences a prefill would delay and
 * the load would not (for a load off the step, those running, queued
 * or parked for a load; 0 for a copy on the step loop, the host
 * tier's).  At equal cost it is loaded: the step loop's time is what
 * all requests share.
 *
 * The load bandwidth is the median of the last KVS_TIER_COST_WINDOW
 * loads' own rates, and it is trusted only once KVS_TIER_COST_MIN loads
 * were measured: until then every run is loaded (that is how they get
 * measured).  One slow load (a cold read of a busy disk) thus moves the
 * estimate not at all, and a disk that became slow for good shows in it
 * once it is over half of the window.  The prefill speed is a mean of
 * its samples weighted by their durations, with a half-life of measured
 * time, so that one tiny step moves it little.
 *
 * Since a run computed gives no load sample, the estimate could stay
 * wrong forever once it says "compute".  kvs_tier_cost_decide() thus
 * loads a run anyway after KVS_TIER_COST_PROBE runs in a row were
 * computed (a probe), so the window keeps up with the disk.
 *
 * A first-order model: the prefill rate is a mean over the prompts
 * served, and attention makes a block deep in a long prompt dearer than
 * that mean, so for such blocks the choice leans towards recomputing.
 * Not weighed: a load's pool blocks are reserved while it reads (a
 * computed run holds as many while it computes), and a finished load
 * enters the tree at the next step (up to one step more of waiting).
 *
 * Invariants: rates are 0 (unmeasured) or finite and positive; bad
 * samples (zero duration or size) change nothing.  Not locked: one
 * thread (the engine's) updates and reads it.
 */

#ifndef KVS_TIER_COST_H
#define KVS_TIER_COST_H

#include <stdint.h>

#define KVS_TIER_COST_WINDOW  8       /* load samples whose median is L */
#define KVS_TIER_COST_MIN     3       /* load samples before L is used */
#define KVS_TIER_COST_PROBE   16      /* computed runs in a row, then a
                                         load anyway */

typedef struct {
    double    load_bps;               /* bytes/s, the window's median;
                                         0: fewer than _MIN samples */
    double    load_bps_seen;          /* the median of what the window
                                         has, from the first load: the
                                         index's weight, a hint where
                                         one sample beats none */
    double    prefill_tps;            /* tokens/s; 0: unmeasured */
    double    half_life_s;            /* of the prefill's weighting, in
                                         sample time */
    double    win[KVS_TIER_COST_WINDOW];  /* the last loads' rates, a
                                             ring */
    uint32_t  win_n;                  /* in win, at most _WINDOW */
    uint32_t  win_pos;                /* the next to overwrite */
    uint32_t  declined;               /* runs computed since the last
                                         load */
    uint64_t  load_samples;
    uint64_t  prefill_samples;
    uint64_t  probes;                 /* runs loaded against the rule */
} kvs_tier_cost_t;


/* Unmeasured rates; half_life_s (> 0, else 10) is how much measured
 * time halves an old prefill sample's weight. */
void kvs_tier_cost_init(kvs_tier_cost_t *c, double half_life_s);

/* A load of bytes that took ns, read and verified. */
void kvs_tier_cost_load(kvs_tier_cost_t *c, uint64_t bytes, uint64_t ns);

/* A prefill of tokens that took ns. */
void kvs_tier_cost_prefill(kvs_tier_cost_t *c, uint64_t tokens,
    uint64_t ns);

/* The rule alone, for a run of tokens held in bytes, with ahead bytes
 * of loads before it and others sequences that its prefill would
 * delay and its load would not: 1 when the load costs no more (above),
 * or a rate is not yet trusted; 0 when it costs more (or for an empty
 * run). */
int kvs_tier_cost_worth(const kvs_tier_cost_t *c, uint64_t tokens,
    uint64_t bytes, uint64_t ahead, uint32_t others);

/* The choice for one run: the rule, but a load after _PROBE computed
 * runs in a row (counted in probes).  1: load. */
int kvs_tier_cost_decide(kvs_tier_cost_t *c, uint64_t tokens,
    uint64_t bytes, uint64_t ahead, uint32_t others);

#endif /* KVS_TIER_COST_H */
