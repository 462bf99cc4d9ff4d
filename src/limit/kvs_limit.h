/*
 * kvs_limit: the token bucket of a rate limit that counts tokens, as pure
 * functions over a small state struct that the caller keeps (nginx keeps
 * one per key in a shared memory zone, under the zone's mutex).
 *
 * The bucket is limit_req's "excess" generalised to costs: `used` is what
 * was charged and has not drained yet; it drains at the rate; a charge
 * that would take it over the burst is rejected; a request whose cost is
 * over the burst can never pass.  Delay follows limit_req too: a request
 * waits until what was charged before it has drained to `delay` tokens
 * (nodelay: delay = burst), its own charge being taken at once so that
 * concurrent requests see it.  A request is charged its whole possible
 * cost first (prompt plus reserved output) and the output it did not use
 * is refunded when it ends, once: the reservation handle records that it
 * was settled.
 *
 * Invariants:
 *  - integer arithmetic only: amounts in milli-tokens, the rate as
 *    num / KVS_LIMIT_DEN milli-tokens per millisecond (exact for both
 *    t/s and t/m), the part of a milli-token drained but not yet taken
 *    off `used` kept in frac (< KVS_LIMIT_DEN), so that no amount is ever
 *    lost or made up by rounding: after any sequence of operations the
 *    bucket holds exactly used - frac / KVS_LIMIT_DEN milli-tokens;
 *  - 0 <= used <= burst + KVS_LIMIT_DEBT_MAX milli-tokens: a refund or
 *    a drain never takes used below 0 (no credit is banked); an
 *    admission never takes it over burst; only kvs_limit_settle_actual()
 *    takes it past burst, as debt (what a request really took beyond
 *    the room left), which drains like any charge and keeps the key's
 *    next requests out until it has;
 *  - a clock earlier than the last one seen counts as no time passed,
 *    and last_ms keeps the latest time seen, so no interval is counted
 *    twice when workers' cached clocks differ slightly;
 *  - decisions compare the exact amount: a request passes iff the exact
 *    amount plus its cost is at most the burst.
 *
 * kv_rate's bucket (KiB x s of KV cache held) is such a bucket too; its
 * size, a request's reservation and what it held are kvs_limit_kv.h.
 */

#ifndef KVS_LIMIT_H
#define KVS_LIMIT_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"

#define KVS_LIMIT_DEN         60          /* rate denominator (t/m exact) */
#define KVS_LIMIT_MILLI       1000        /* milli-tokens per token */
#define KVS_LIMIT_TOKENS_MAX  (1ULL << 40)  /* rate, burst, cost bound */
#define KVS_LIMIT_NODELAY     UINT64_MAX  /* delay: as much as the burst */
#define KVS_LIMIT_DEBT_MAX    (KVS_LIMIT_TOKENS_MAX * KVS_LIMIT_MILLI)
                                          /* milli-tokens a bucket may be
                                             charged past its burst */
#define KVS_LIMIT_DUR_LEN     32          /* kvs_limit_fmt_duration() */

typedef struct {
    uint64_t  num;          /* rate: num / KVS_LIMIT_DEN milli-tokens/ms */
    uint64_t  burst;        /* the bucket's size, milli-tokens */
    uint64_t  delay;        /* charges before a request up to this many
                               milli-tokens do not delay it */
    uint64_t  rate;         /* as configured: tokens per period_ms */
    uint64_t  period_ms;    /* 1000 or 60000 */
} kvs_limit_conf_t;

/* One key's bucket.  All zero is a new, empty key (kvs_limit_state_init
 * sets the time). */
typedef struct {
    uint64_t  used;         /* milli-tokens charged, not drained; the
                               exact amount rounded up */
    uint64_t  frac;         /* drained but not taken off used, in
                               1/KVS_LIMIT_DEN milli-tokens */
    uint64_t  last_ms;      /* the latest time seen */
} kvs_limit_state_t;

typedef enum {
    KVS_LIMIT_PASSED = 0,   /* admitted now */
    KVS_LIMIT_DELAYED,      /* admitted (charged) after delay_ms */
    KVS_LIMIT_REJECTED,     /* not charged; may pass after retry_ms */
    KVS_LIMIT_NEVER         /* its cost is over the burst: not charged,
                               can never pass */
} kvs_limit_verdict_t;

typedef struct {
    kvs_limit_verdict_t  verdict;
    uint64_t             delay_ms;    /* DELAYED: wait this long */
    uint64_t             retry_ms;    /* REJECTED: until the bucket can
                                         take the cost */
    uint64_t             used;        /* milli-tokens in the bucket after
                                         the decision (rounded up) */
    uint64_t             reset_ms;    /* until the bucket is empty */
} kvs_limit_decision_t;

/* What one admitted request was charged in one bucket.  Settling it
 * (refund of the unused part, or cancel) happens at most once. */
typedef struct {
    uint64_t  cost;         /* tokens charged; 0: nothing */
    uint64_t  refundable;   /* of which come back if not used */
    int       settled;      /* 1: settled, or nothing was charged */
} kvs_limit_resv_t;

/*
 * rate tokens per period_ms (1000: t/s, 60000: t/m), a bucket of burst
 * tokens, delay tokens (or KVS_LIMIT_NODELAY) of earlier charges let
 * through without delay.  KVS_EINVAL when a value is out of range
 * (1 <= rate, burst <= KVS_LIMIT_TOKENS_MAX).
 */
int kvs_limit_conf_init(kvs_limit_conf_t *c, uint64_t rate,
    uint64_t period_ms, uint64_t burst, uint64_t delay, kvs_err_t *err);

/* A new key's empty bucket at now_ms. */
void kvs_limit_state_init(kvs_limit_state_t *s, uint64_t now_ms);

/* Drains the bucket to now_ms (what every other call does first). */
void kvs_limit_drain(const kvs_limit_conf_t *c, kvs_limit_state_t *s,
    uint64_t now_ms);

/*
 * Decides on a request costing cost tokens, refundable of them reserved
 * for output it may not use, at now_ms: fills *d, and when admitted
 * (PASSED or DELAYED) charges the bucket and fills *resv with what to
 * settle later; otherwise *resv is settled with nothing charged.
 * KVS_EINVAL (nothing changed) when refundable > cost or cost is over
 * KVS_LIMIT_TOKENS_MAX.
 */
int kvs_limit_reserve(const kvs_limit_conf_t *c, kvs_limit_state_t *s,
    uint64_t now_ms, uint64_t cost, uint64_t refundable,
    kvs_limit_resv_t *resv, kvs_limit_decision_t *d, kvs_err_t *err);

/*
 * The request ended having used used_tokens of its refundable ones: the
 * rest goes back into the bucket (as far as the bucket is not already
 * empty).  Returns the tokens refunded; 0, with nothing changed, when
 * resv was settled before.
 */
uint64_t kvs_limit_settle(const kvs_limit_conf_t *c, kvs_limit_state_t *s,
    uint64_t now_ms, kvs_limit_resv_t *resv, uint64_t used_tokens);

/*
 * Settles a reservation whose true cost is known only when the request
 * ends (kv_rate: KV held x seconds): the bucket ends up charged actual
 * instead of resv->cost.  Less: the difference is refunded (returned).
 * More: the difference is charged now (*more), past the burst if need
 * be (debt: the bucket is over full, and the key's next requests are
 * refused until it has drained below full less their cost), at most
 * KVS_LIMIT_DEBT_MAX past it; a request cannot be refused after the
 * fact.  Settles at most once, like kvs_limit_settle().
 */
uint64_t kvs_limit_settle_actual(const kvs_limit_conf_t *c,
    kvs_limit_state_t *s, uint64_t now_ms, kvs_limit_resv_t *resv,
    uint64_t actual, uint64_t *more);

/* The request did not run after all (another bucket rejected it): its
 * whole charge goes back.  Returns the tokens refunded, 0 when resv was
 * settled before. */
uint64_t kvs_limit_cancel(const kvs_limit_conf_t *c, kvs_limit_state_t *s,
    uint64_t now_ms, kvs_limit_resv_t *resv);

/* Whole tokens the bucket can still take after drain to now_ms (0 while
 * it is in debt). */
uint64_t kvs_limit_remaining(const kvs_limit_conf_t *c,
    kvs_limit_state_t *s, uint64_t now_ms);

/* Milliseconds until the bucket is empty (0 when it is). */
uint64_t kvs_limit_reset_ms(const kvs_limit_conf_t *c,
    const kvs_limit_state_t *s);

/*
 * ms as a Go duration (OpenAI's x-ratelimit-reset-* format): "0s",
 * "250ms", "1.5s", "6m0s", "1h2m3.004s".  buf holds KVS_LIMIT_DUR_LEN
 * bytes; returns the length.
 */
size_t kvs_limit_fmt_duration(char *buf, uint64_t ms);

/* Seconds for retry-after: ms rounded up (a client that waits that long
 * finds room). */
uint64_t kvs_limit_retry_after_s(uint64_t ms);

const char *kvs_limit_verdict_name(kvs_limit_verdict_t v);

#endif /* KVS_LIMIT_H */
