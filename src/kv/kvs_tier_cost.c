/*
 * kvs_tier_cost: the two measured rates and the load-or-recompute
 * choice (see kvs_tier_cost.h).  A sample of duration d seconds and rate
 * x moves a rate r to r + (x - r) * (1 - 2^(-d / half_life)): a sample
 * as long as the half-life counts for half, a short one for little.
 */

#include <math.h>

#include "kvs_tier_cost.h"


void
kvs_tier_cost_init(kvs_tier_cost_t *c, double half_life_s)
{
    c->load_bps = 0;
    c->prefill_tps = 0;
    c->half_life_s = half_life_s > 0 && isfinite(half_life_s)
                     ? half_life_s : 10;
    c->load_samples = 0;
    c->prefill_samples = 0;
}


static void
kvs_tier_cost_add(const kvs_tier_cost_t *c, double *rate, uint64_t *n,
    uint64_t amount, uint64_t ns)
{
    double  d, x, w;

    if (amount == 0 || ns == 0) {
        return;
    }

    d = ns / 1e9;
    x = amount / d;

    if (*n == 0 || *rate <= 0) {
        *rate = x;

    } else {
        w = 1 - exp2(-d / c->half_life_s);
        *rate += (x - *rate) * w;
    }

    (*n)++;
}


void
kvs_tier_cost_load(kvs_tier_cost_t *c, uint64_t bytes, uint64_t ns)
{
    kvs_tier_cost_add(c, &c->load_bps, &c->load_samples, bytes, ns);
}


void
kvs_tier_cost_prefill(kvs_tier_cost_t *c, uint64_t tokens, uint64_t ns)
{
    kvs_tier_cost_add(c, &c->prefill_tps, &c->prefill_samples, tokens, ns);
}


int
kvs_tier_cost_worth(const kvs_tier_cost_t *c, uint64_t tokens,
    uint64_t bytes)
{
    if (tokens == 0) {
        return 0;
    }

    if (c->load_bps <= 0 || c->prefill_tps <= 0) {
        return 1;
    }

    /* b / L < t / P, without dividing by a rate */
    return (double) bytes * c->prefill_tps < (double) tokens * c->load_bps;
}
