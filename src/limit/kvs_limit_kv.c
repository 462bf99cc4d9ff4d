/*
 * kvs_limit_kv: kv_rate's bucket size, reservation and hold (see
 * kvs_limit_kv.h).  The hold is computed in floating point (the
 * engine's count times a block's bytes, or the estimate from timings),
 * rounded up once; sizes and the reservation are exact integers.
 */

#include <math.h>

#include "kvs_limit_kv.h"


static uint64_t kvs_limit_kv_round(double kib_s);


int
kvs_limit_kv_conf_init(kvs_limit_conf_t *c, const kvs_limit_conf_t *t,
    uint64_t kv_rate, kvs_err_t *err)
{
    uint64_t  burst, rate, window_s;

    if (kv_rate < 1 || kv_rate > KVS_LIMIT_TOKENS_MAX) {
        return kvs_err_set(err, KVS_EINVAL, "kv_rate must be 1..%llu KiB/s, "
                           "not %llu", KVS_LIMIT_TOKENS_MAX,
                           (unsigned long long) kv_rate);
    }

    burst = t->burst / KVS_LIMIT_MILLI;
    rate = t->rate;

    /* the token bucket's window, burst / rate periods, in ms: both are
     * at most 2^40 and a period under 2^16 ms, so it is computed in two
     * steps that stay below 2^56 */
    window_s = (burst / rate * t->period_ms
                + burst % rate * t->period_ms / rate) / 1000;

    if (window_s < 1) {
        window_s = 1;
    }

    burst = window_s > KVS_LIMIT_TOKENS_MAX / kv_rate
            ? KVS_LIMIT_TOKENS_MAX : kv_rate * window_s;

    return kvs_limit_conf_init(c, kv_rate, 1000, burst, KVS_LIMIT_NODELAY,
                               err);
}


uint64_t
kvs_limit_kv_cost(uint64_t tokens, uint64_t bytes_per_token)
{
    /* tokens x bytes over KVS_LIMIT_TOKENS_MAX KiB (2^50 bytes), tested
     * without the product */
    if (bytes_per_token != 0
        && tokens > KVS_LIMIT_TOKENS_MAX * 1024 / bytes_per_token)
    {
        return KVS_LIMIT_TOKENS_MAX + 1;
    }

    return (tokens * bytes_per_token + 1023) / 1024;
}


uint64_t
kvs_limit_kv_held(const kvs_limit_kv_hold_t *h, uint64_t now_ns)
{
    double    fill_ns, full_ns, kib_s;
    uint64_t  first;

    if (h->engine_ns != 0) {
        /* block x us x bytes per block, in KiB x s */
        kib_s = (double) h->engine_block_us * (double) h->block_tokens
                * (double) h->bytes_per_token / 1024.0 / 1e6;

        if (!h->engine_done && now_ns > h->engine_ns) {
            kib_s += ((double) h->prompt_tokens + (double) h->generated)
                     * (double) h->bytes_per_token / 1024.0
                     * (double) (now_ns - h->engine_ns) / 1e9;
        }

        return kvs_limit_kv_round(kib_s);
    }

    if (h->submit_ns == 0) {
        return 0;
    }

    first = h->first_ns ? h->first_ns : now_ns;

    fill_ns = first > h->submit_ns ? (double) (first - h->submit_ns) : 0.0;
    full_ns = now_ns > first ? (double) (now_ns - first) : 0.0;

    kib_s = ((double) h->prompt_tokens / 2.0 * fill_ns
             + ((double) h->prompt_tokens + (double) h->generated / 2.0)
               * full_ns)
            * (double) h->bytes_per_token / 1024.0 / 1e9;

    return kvs_limit_kv_round(kib_s);
}


/* KiB x s rounded up, at most KVS_LIMIT_TOKENS_MAX. */
static uint64_t
kvs_limit_kv_round(double kib_s)
{
    return kib_s >= (double) KVS_LIMIT_TOKENS_MAX ? KVS_LIMIT_TOKENS_MAX
                                                   : (uint64_t) ceil(kib_s);
}
