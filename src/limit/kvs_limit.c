/*
 * kvs_limit: token bucket arithmetic for token-weighted rate limits
 * (kvs_limit.h has the model and its invariants).  Every function drains
 * the bucket to the given time first; amounts are milli-tokens; nothing
 * here allocates, locks or reads a clock.
 */

#include <stdio.h>

#include "kvs_limit.h"


/* (a + b - 1) / b for b > 0, without overflow for the ranges used here
 * (a < 2^57). */
static uint64_t
kvs_limit_div_up(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}


int
kvs_limit_conf_init(kvs_limit_conf_t *c, uint64_t rate, uint64_t period_ms,
    uint64_t burst, uint64_t delay, kvs_err_t *err)
{
    if (period_ms != 1000 && period_ms != 60000) {
        return kvs_err_set(err, KVS_EINVAL, "rate period must be 1000 or "
                           "60000 ms, not %llu", (unsigned long long)
                           period_ms);
    }

    if (rate < 1 || rate > KVS_LIMIT_TOKENS_MAX) {
        return kvs_err_set(err, KVS_EINVAL, "rate must be 1..%llu tokens, "
                           "not %llu", KVS_LIMIT_TOKENS_MAX,
                           (unsigned long long) rate);
    }

    if (burst < 1 || burst > KVS_LIMIT_TOKENS_MAX) {
        return kvs_err_set(err, KVS_EINVAL, "burst must be 1..%llu tokens, "
                           "not %llu", KVS_LIMIT_TOKENS_MAX,
                           (unsigned long long) burst);
    }

    if (delay != KVS_LIMIT_NODELAY && delay > burst) {
        return kvs_err_set(err, KVS_EINVAL, "delay %llu is over the burst "
                           "%llu", (unsigned long long) delay,
                           (unsigned long long) burst);
    }

    /* tokens per period -> milli-tokens per ms, times KVS_LIMIT_DEN:
     * rate * 1000 * 60 / period_ms, an integer for both periods */
    c->num = rate * KVS_LIMIT_MILLI * KVS_LIMIT_DEN / period_ms;
    c->burst = burst * KVS_LIMIT_MILLI;
    c->delay = delay == KVS_LIMIT_NODELAY ? c->burst
                                          : delay * KVS_LIMIT_MILLI;
    c->rate = rate;
    c->period_ms = period_ms;

    return KVS_OK;
}


void
kvs_limit_state_init(kvs_limit_state_t *s, uint64_t now_ms)
{
    s->used = 0;
    s->frac = 0;
    s->last_ms = now_ms;
}


void
kvs_limit_drain(const kvs_limit_conf_t *c, kvs_limit_state_t *s,
    uint64_t now_ms)
{
    uint64_t  dt, d, q;

    if (now_ms <= s->last_ms) {
        /* no time passed, or a clock behind one seen before: keeping
         * the later time means no interval is counted twice */
        return;
    }

    dt = now_ms - s->last_ms;
    s->last_ms = now_ms;

    if (s->frac >= KVS_LIMIT_DEN) {
        /* a state written by something else: repair, never trust */
        s->frac = 0;
    }

    /* used <= burst + debt < 2^51: a drain of 2^57 empties any bucket, and
     * num * dt stays below 2^64 up to there */
    if (s->used == 0 || dt >= (1ULL << 57) / c->num) {
        s->used = 0;
        s->frac = 0;
        return;
    }

    d = c->num * dt + s->frac;
    q = d / KVS_LIMIT_DEN;

    if (q >= s->used) {
        s->used = 0;
        s->frac = 0;
        return;
    }

    s->used -= q;
    s->frac = d % KVS_LIMIT_DEN;
}


/* ms until the bucket holds at most `level` milli-tokens (0 if it does):
 * the exact amount is used - frac / DEN. */
static uint64_t
kvs_limit_wait_ms(const kvs_limit_conf_t *c, const kvs_limit_state_t *s,
    uint64_t level)
{
    if (s->used <= level) {
        return 0;
    }

    /* (used - level) * DEN - frac > 0 since frac < DEN */
    return kvs_limit_div_up((s->used - level) * KVS_LIMIT_DEN - s->frac,
                            c->num);
}


int
kvs_limit_reserve(const kvs_limit_conf_t *c, kvs_limit_state_t *s,
    uint64_t now_ms, uint64_t cost, uint64_t refundable,
    kvs_limit_resv_t *resv, kvs_limit_decision_t *d, kvs_err_t *err)
{
    uint64_t  mc;

    if (cost > KVS_LIMIT_TOKENS_MAX || refundable > cost) {
        return kvs_err_set(err, KVS_EINVAL, "cost %llu tokens (%llu "
                           "refundable) is out of range",
                           (unsigned long long) cost,
                           (unsigned long long) refundable);
    }

    kvs_limit_drain(c, s, now_ms);

    mc = cost * KVS_LIMIT_MILLI;

    d->delay_ms = 0;
    d->retry_ms = 0;

    resv->cost = 0;
    resv->refundable = 0;
    resv->settled = 1;

    if (mc > c->burst) {
        d->verdict = KVS_LIMIT_NEVER;

    } else if (s->used + mc > c->burst) {
        d->verdict = KVS_LIMIT_REJECTED;
        d->retry_ms = kvs_limit_wait_ms(c, s, c->burst - mc);

    } else {
        /* limit_req's rule: wait for what was charged before this one
         * to drain to the delay; the charge itself is taken now */
        d->delay_ms = kvs_limit_wait_ms(c, s, c->delay);
        d->verdict = d->delay_ms ? KVS_LIMIT_DELAYED : KVS_LIMIT_PASSED;

        s->used += mc;

        resv->cost = cost;
        resv->refundable = refundable;
        resv->settled = 0;
    }

    d->used = s->used;
    d->reset_ms = kvs_limit_reset_ms(c, s);

    return KVS_OK;
}


/* Takes n milli-tokens out of the bucket, never below empty. */
static void
kvs_limit_refund(kvs_limit_state_t *s, uint64_t n)
{
    if (n == 0) {
        return;
    }

    if (n >= s->used) {
        s->used = 0;
        s->frac = 0;
        return;
    }

    /* used - n >= 1 > frac / DEN: the exact amount stays positive */
    s->used -= n;
}


uint64_t
kvs_limit_settle(const kvs_limit_conf_t *c, kvs_limit_state_t *s,
    uint64_t now_ms, kvs_limit_resv_t *resv, uint64_t used_tokens)
{
    uint64_t  back;

    if (resv->settled) {
        return 0;
    }

    resv->settled = 1;

    back = used_tokens < resv->refundable ? resv->refundable - used_tokens
                                          : 0;

    kvs_limit_drain(c, s, now_ms);
    kvs_limit_refund(s, back * KVS_LIMIT_MILLI);

    return back;
}


uint64_t
kvs_limit_settle_actual(const kvs_limit_conf_t *c, kvs_limit_state_t *s,
    uint64_t now_ms, kvs_limit_resv_t *resv, uint64_t actual, uint64_t *more)
{
    uint64_t  extra, room;

    *more = 0;

    if (resv->settled) {
        return 0;
    }

    resv->settled = 1;

    kvs_limit_drain(c, s, now_ms);

    if (actual <= resv->cost) {
        kvs_limit_refund(s, (resv->cost - actual) * KVS_LIMIT_MILLI);
        return resv->cost - actual;
    }

    /* it passed on its reservation: what it took beyond that is charged
     * now, past a full bucket if need be (debt), and later requests wait
     * for it; used <= burst + KVS_LIMIT_DEBT_MAX < 2^51 keeps drain's
     * and wait's arithmetic in range */
    extra = actual - resv->cost;
    if (extra > KVS_LIMIT_TOKENS_MAX) {
        extra = KVS_LIMIT_TOKENS_MAX;
    }

    extra *= KVS_LIMIT_MILLI;
    room = c->burst + KVS_LIMIT_DEBT_MAX - s->used;
    if (extra > room) {
        extra = room;
    }

    s->used += extra;
    *more = extra / KVS_LIMIT_MILLI;

    return 0;
}


uint64_t
kvs_limit_cancel(const kvs_limit_conf_t *c, kvs_limit_state_t *s,
    uint64_t now_ms, kvs_limit_resv_t *resv)
{
    if (resv->settled) {
        return 0;
    }

    resv->settled = 1;

    kvs_limit_drain(c, s, now_ms);
    kvs_limit_refund(s, resv->cost * KVS_LIMIT_MILLI);

    return resv->cost;
}


uint64_t
kvs_limit_remaining(const kvs_limit_conf_t *c, kvs_limit_state_t *s,
    uint64_t now_ms)
{
    kvs_limit_drain(c, s, now_ms);

    return s->used < c->burst ? (c->burst - s->used) / KVS_LIMIT_MILLI : 0;
}


uint64_t
kvs_limit_reset_ms(const kvs_limit_conf_t *c, const kvs_limit_state_t *s)
{
    return kvs_limit_wait_ms(c, s, 0);
}


size_t
kvs_limit_fmt_duration(char *buf, uint64_t ms)
{
    int       n;
    uint64_t  h, m, sec, milli;
    char      frac[8];

    if (ms == 0) {
        return (size_t) snprintf(buf, KVS_LIMIT_DUR_LEN, "0s");
    }

    if (ms < 1000) {
        return (size_t) snprintf(buf, KVS_LIMIT_DUR_LEN, "%llums",
                                 (unsigned long long) ms);
    }

    h = ms / 3600000;
    m = ms / 60000 % 60;
    sec = ms / 1000 % 60;
    milli = ms % 1000;

    /* Go drops the fraction's trailing zeros, and the point with them */
    frac[0] = '\0';
    if (milli) {
        snprintf(frac, sizeof(frac), ".%03u", (unsigned) milli);
        for (n = 3; frac[n] == '0'; n--) {
            frac[n] = '\0';
        }
    }

    if (h) {
        n = snprintf(buf, KVS_LIMIT_DUR_LEN, "%lluh%llum%llu%ss",
                     (unsigned long long) h, (unsigned long long) m,
                     (unsigned long long) sec, frac);
    } else if (m) {
        n = snprintf(buf, KVS_LIMIT_DUR_LEN, "%llum%llu%ss",
                     (unsigned long long) m, (unsigned long long) sec, frac);
    } else {
        n = snprintf(buf, KVS_LIMIT_DUR_LEN, "%llu%ss",
                     (unsigned long long) sec, frac);
    }

    return n < KVS_LIMIT_DUR_LEN ? (size_t) n : KVS_LIMIT_DUR_LEN - 1;
}


uint64_t
kvs_limit_retry_after_s(uint64_t ms)
{
    return kvs_limit_div_up(ms, 1000);
}


const char *
kvs_limit_verdict_name(kvs_limit_verdict_t v)
{
    switch (v) {
    case KVS_LIMIT_PASSED:
        return "passed";
    case KVS_LIMIT_DELAYED:
        return "delayed";
    case KVS_LIMIT_REJECTED:
        return "rejected";
    case KVS_LIMIT_NEVER:
        return "never";
    }

    return "unknown";
}
