/*
 * kvs_tier_cost: the two measured rates and the load-or-recompute
 * choice (see kvs_tier_cost.h).  The load bandwidth is the median of a
 * ring of the last loads' rates.  A prefill sample of duration d
 * seconds and rate x moves the prefill rate r to
 * r + (x - r) * (1 - 2^(-d / half_life)): a sample as long as the
 * half-life counts for half, a short one for little.  The rule,
 * (a + b) / L <= (1 + r) * t / P, is evaluated as
 * (a + b) * P <= (1 + r) * t * L, without dividing by a rate.
 */

#include <math.h>

#include "kvs_tier_cost.h"


void
kvs_tier_cost_init(kvs_tier_cost_t *c, double half_life_s)
{
    uint32_t  i;

    c->load_bps = 0;
    c->load_bps_seen = 0;
    c->prefill_tps = 0;
    c->half_life_s = half_life_s > 0 && isfinite(half_life_s)
                     ? half_life_s : 10;

    for (i = 0; i < KVS_TIER_COST_WINDOW; i++) {
        c->win[i] = 0;
    }

    c->win_n = 0;
    c->win_pos = 0;
    c->declined = 0;
    c->load_samples = 0;
    c->prefill_samples = 0;
    c->probes = 0;
}


/* The median of the window (the mean of the middle two for an even
 * count), by insertion sort of a copy: the window is 8 long. */
static double
kvs_tier_cost_median(const kvs_tier_cost_t *c)
{
    double    v[KVS_TIER_COST_WINDOW], x;
    uint32_t  i, j, n;

    n = c->win_n;

    for (i = 0; i < n; i++) {
        x = c->win[i];

        for (j = i; j > 0 && v[j - 1] > x; j--) {
            v[j] = v[j - 1];
        }

        v[j] = x;
    }

    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}


void
kvs_tier_cost_load(kvs_tier_cost_t *c, uint64_t bytes, uint64_t ns)
{
    if (bytes == 0 || ns == 0) {
        return;
    }

    c->win[c->win_pos] = bytes / (ns / 1e9);
    c->win_pos = (c->win_pos + 1) % KVS_TIER_COST_WINDOW;
    c->win_n += c->win_n < KVS_TIER_COST_WINDOW;
    c->load_samples++;
    c->declined = 0;

    c->load_bps_seen = kvs_tier_cost_median(c);
    c->load_bps = c->win_n >= KVS_TIER_COST_MIN ? c->load_bps_seen : 0;
}


void
kvs_tier_cost_prefill(kvs_tier_cost_t *c, uint64_t tokens, uint64_t ns)
{
    double  d, x, w;

    if (tokens == 0 || ns == 0) {
        return;
    }

    d = ns / 1e9;
    x = tokens / d;

    if (c->prefill_samples == 0 || c->prefill_tps <= 0) {
        c->prefill_tps = x;

    } else {
        w = 1 - exp2(-d / c->half_life_s);
        c->prefill_tps += (x - c->prefill_tps) * w;
    }

    c->prefill_samples++;
}


int
kvs_tier_cost_worth(const kvs_tier_cost_t *c, uint64_t tokens,
    uint64_t bytes, uint64_t ahead, uint32_t others)
{
    if (tokens == 0) {
        return 0;
    }

    if (c->load_bps <= 0 || c->prefill_tps <= 0) {
        return 1;
    }

    return ((double) ahead + (double) bytes) * c->prefill_tps
           <= (1.0 + others) * (double) tokens * c->load_bps;
}


int
kvs_tier_cost_decide(kvs_tier_cost_t *c, uint64_t tokens, uint64_t bytes,
    uint64_t ahead, uint32_t others)
{
    if (tokens == 0) {
        return 0;
    }

    if (kvs_tier_cost_worth(c, tokens, bytes, ahead, others)) {
        return 1;
    }

    if (++c->declined >= KVS_TIER_COST_PROBE) {
        c->probes++;
        c->declined = 0;
        return 1;
    }

    return 0;
}
