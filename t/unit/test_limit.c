/*
 * test_limit: the token bucket of kvserve_limit (src/limit/kvs_limit.c)
 * and kv_rate's arithmetic beside it (src/limit/kvs_limit_kv.c).
 *
 * Expected values are worked out by hand from the definitions (a bucket
 * of `burst` tokens draining at the rate, a request passing iff the
 * bucket can take its whole cost, limit_req's delay rule, Go's duration
 * format), and the long run is checked against a model written here from
 * the definition in exact rational arithmetic: the bucket's amount as an
 * integer count of 1/60000 token, which both t/s and t/m rates drain by
 * a whole number per millisecond.
 */

#include "kvs_test.h"

#include "limit/kvs_limit.h"
#include "limit/kvs_limit_kv.h"


static kvs_limit_conf_t
conf(uint64_t rate, uint64_t period_ms, uint64_t burst, uint64_t delay)
{
    kvs_err_t         err;
    kvs_limit_conf_t  c;

    assert_int_equal(kvs_limit_conf_init(&c, rate, period_ms, burst, delay,
                                         &err), KVS_OK);
    return c;
}


static kvs_limit_verdict_t
take(const kvs_limit_conf_t *c, kvs_limit_state_t *s, uint64_t now,
    uint64_t cost, kvs_limit_decision_t *d)
{
    kvs_err_t             err;
    kvs_limit_resv_t      resv;
    kvs_limit_decision_t  dd;

    if (d == NULL) {
        d = &dd;
    }

    assert_int_equal(kvs_limit_reserve(c, s, now, cost, 0, &resv, d, &err),
                     KVS_OK);
    return d->verdict;
}


static void
test_conf_ranges(void **state)
{
    kvs_err_t         err;
    kvs_limit_conf_t  c;

    (void) state;

    assert_int_equal(kvs_limit_conf_init(&c, 0, 1000, 10, 0, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_limit_conf_init(&c, 10, 1000, 0, 0, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_limit_conf_init(&c, 10, 3600000, 10, 0, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_limit_conf_init(&c, 10, 1000, 10, 11, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_limit_conf_init(&c, KVS_LIMIT_TOKENS_MAX + 1, 1000,
                                         10, 0, &err), KVS_EINVAL);
    assert_int_equal(kvs_limit_conf_init(&c, 10, 1000,
                                         KVS_LIMIT_TOKENS_MAX + 1, 0, &err),
                     KVS_EINVAL);

    /* 10 t/s: 10 milli-tokens per ms = 600/60; 10 t/m: 10/60 */
    c = conf(10, 1000, 50, KVS_LIMIT_NODELAY);
    assert_int_equal(c.num, 600);
    assert_int_equal(c.burst, 50000);
    assert_int_equal(c.delay, 50000);
    c = conf(10, 60000, 50, 20);
    assert_int_equal(c.num, 10);
    assert_int_equal(c.delay, 20000);
}


/* 100 t/s, a bucket of 1000: ten requests of 100 at once, the eleventh
 * waits a second for room; half a second later (50 tokens), five of 10. */
static void
test_admission_counts(void **state)
{
    int                   i, n;
    kvs_limit_conf_t      c;
    kvs_limit_state_t     s;
    kvs_limit_decision_t  d;

    (void) state;

    c = conf(100, 1000, 1000, KVS_LIMIT_NODELAY);
    kvs_limit_state_init(&s, 5000);

    for (i = 0, n = 0; i < 20; i++) {
        n += take(&c, &s, 5000, 100, NULL) == KVS_LIMIT_PASSED;
    }
    assert_int_equal(n, 10);

    assert_int_equal(take(&c, &s, 5000, 100, &d), KVS_LIMIT_REJECTED);
    assert_int_equal(d.retry_ms, 1000);
    assert_int_equal(d.used, 1000000);
    assert_int_equal(d.reset_ms, 10000);

    for (i = 0, n = 0; i < 20; i++) {
        n += take(&c, &s, 5500, 10, NULL) == KVS_LIMIT_PASSED;
    }
    assert_int_equal(n, 5);

    /* 1 t/s written as 60 t/m: room for one token comes at 1000 ms, not
     * at 999 */
    c = conf(60, 60000, 10, KVS_LIMIT_NODELAY);
    kvs_limit_state_init(&s, 0);
    for (i = 0, n = 0; i < 20; i++) {
        n += take(&c, &s, 0, 1, NULL) == KVS_LIMIT_PASSED;
    }
    assert_int_equal(n, 10);
    assert_int_equal(take(&c, &s, 999, 1, &d), KVS_LIMIT_REJECTED);
    assert_int_equal(d.retry_ms, 1);
    assert_int_equal(take(&c, &s, 1000, 1, NULL), KVS_LIMIT_PASSED);
    assert_int_equal(take(&c, &s, 1000, 1, NULL), KVS_LIMIT_REJECTED);
}


/* 7 t/m does not divide a millisecond: one token takes 60000/7 =
 * 8571.43 ms, so the second request of a bucket of one passes at 8572 */
static void
test_rate_per_minute_fraction(void **state)
{
    int                   n;
    uint64_t              t;
    kvs_limit_conf_t      c;
    kvs_limit_state_t     s;
    kvs_limit_decision_t  d;

    (void) state;

    c = conf(7, 60000, 1, KVS_LIMIT_NODELAY);
    kvs_limit_state_init(&s, 0);

    assert_int_equal(take(&c, &s, 0, 1, &d), KVS_LIMIT_PASSED);
    assert_int_equal(d.reset_ms, 8572);
    assert_int_equal(take(&c, &s, 1, 1, &d), KVS_LIMIT_REJECTED);
    assert_int_equal(d.retry_ms, 8571);
    assert_int_equal(take(&c, &s, 8571, 1, &d), KVS_LIMIT_REJECTED);
    assert_int_equal(d.retry_ms, 1);
    assert_int_equal(take(&c, &s, 8572, 1, NULL), KVS_LIMIT_PASSED);

    /* a full bucket of 100 kept full by a client asking every ms: 7
     * tokens a minute, exactly, whatever the rounding of each ms; in ten
     * minutes floor(7 * 600000 / 60000) = 70 after the first 100 */
    c = conf(7, 60000, 100, KVS_LIMIT_NODELAY);
    kvs_limit_state_init(&s, 0);
    n = 0;
    for (t = 0; t <= 600000; t++) {
        while (take(&c, &s, t, 1, NULL) == KVS_LIMIT_PASSED) {
            n++;
        }
    }
    assert_int_equal(n, 170);
}


/* limit_req's delay: wait until what was charged before has drained to
 * the delay; the request's own charge is taken at once. */
static void
test_delay(void **state)
{
    kvs_limit_conf_t      c;
    kvs_limit_state_t     s;
    kvs_limit_decision_t  d;

    (void) state;

    c = conf(10, 1000, 100, 0);
    kvs_limit_state_init(&s, 0);

    assert_int_equal(take(&c, &s, 0, 10, &d), KVS_LIMIT_PASSED);
    assert_int_equal(d.delay_ms, 0);
    assert_int_equal(take(&c, &s, 0, 10, &d), KVS_LIMIT_DELAYED);
    assert_int_equal(d.delay_ms, 1000);
    assert_int_equal(take(&c, &s, 0, 30, &d), KVS_LIMIT_DELAYED);
    assert_int_equal(d.delay_ms, 2000);
    assert_int_equal(d.used, 50000);
    /* 250 ms later 47.5 are left: wait for 47.5 to drain */
    assert_int_equal(take(&c, &s, 250, 10, &d), KVS_LIMIT_DELAYED);
    assert_int_equal(d.delay_ms, 4750);

    c = conf(10, 1000, 100, 20);
    kvs_limit_state_init(&s, 0);
    assert_int_equal(take(&c, &s, 0, 10, NULL), KVS_LIMIT_PASSED);
    assert_int_equal(take(&c, &s, 0, 10, NULL), KVS_LIMIT_PASSED);
    assert_int_equal(take(&c, &s, 0, 10, NULL), KVS_LIMIT_PASSED);
    assert_int_equal(take(&c, &s, 0, 10, &d), KVS_LIMIT_DELAYED);
    assert_int_equal(d.delay_ms, 1000);

    /* nodelay: the whole burst at once, then rejections */
    c = conf(10, 1000, 100, KVS_LIMIT_NODELAY);
    kvs_limit_state_init(&s, 0);
    assert_int_equal(take(&c, &s, 0, 60, NULL), KVS_LIMIT_PASSED);
    assert_int_equal(take(&c, &s, 0, 40, NULL), KVS_LIMIT_PASSED);
    assert_int_equal(take(&c, &s, 0, 1, NULL), KVS_LIMIT_REJECTED);
}


/* A cost over the burst never passes, even into an empty bucket, and
 * says so: no retry time, nothing charged. */
static void
test_never(void **state)
{
    kvs_limit_conf_t      c;
    kvs_limit_state_t     s;
    kvs_limit_decision_t  d;

    (void) state;

    c = conf(1000, 1000, 100, KVS_LIMIT_NODELAY);
    kvs_limit_state_init(&s, 0);

    assert_int_equal(take(&c, &s, 0, 101, &d), KVS_LIMIT_NEVER);
    assert_int_equal(d.retry_ms, 0);
    assert_int_equal(d.used, 0);
    assert_int_equal(take(&c, &s, 1000000, 101, NULL), KVS_LIMIT_NEVER);
    assert_int_equal(take(&c, &s, 1000000, 100, NULL), KVS_LIMIT_PASSED);
}


/* retry_ms: until the bucket can take the cost; the header's seconds are
 * rounded up. */
static void
test_retry_after(void **state)
{
    kvs_limit_conf_t      c;
    kvs_limit_state_t     s;
    kvs_limit_decision_t  d;

    (void) state;

    c = conf(10, 1000, 100, KVS_LIMIT_NODELAY);
    kvs_limit_state_init(&s, 0);
    assert_int_equal(take(&c, &s, 0, 100, NULL), KVS_LIMIT_PASSED);

    assert_int_equal(take(&c, &s, 0, 30, &d), KVS_LIMIT_REJECTED);
    assert_int_equal(d.retry_ms, 3000);
    assert_int_equal(kvs_limit_retry_after_s(d.retry_ms), 3);
    assert_int_equal(take(&c, &s, 1, 30, &d), KVS_LIMIT_REJECTED);
    assert_int_equal(d.retry_ms, 2999);
    assert_int_equal(kvs_limit_retry_after_s(d.retry_ms), 3);
    assert_int_equal(take(&c, &s, 2001, 30, &d), KVS_LIMIT_REJECTED);
    assert_int_equal(d.retry_ms, 999);
    assert_int_equal(kvs_limit_retry_after_s(d.retry_ms), 1);
    assert_int_equal(take(&c, &s, 3000, 30, &d), KVS_LIMIT_PASSED);
    assert_int_equal(kvs_limit_retry_after_s(0), 0);
}


/* A clock behind the last one seen is no time passed, and the interval
 * up to the last one is not counted again when the clock catches up. */
static void
test_clock_backwards(void **state)
{
    kvs_limit_conf_t      c;
    kvs_limit_state_t     s;
    kvs_limit_decision_t  d;

    (void) state;

    c = conf(10, 1000, 100, KVS_LIMIT_NODELAY);
    kvs_limit_state_init(&s, 10000);
    assert_int_equal(take(&c, &s, 10000, 100, NULL), KVS_LIMIT_PASSED);

    assert_int_equal(take(&c, &s, 5000, 10, &d), KVS_LIMIT_REJECTED);
    assert_int_equal(d.used, 100000);
    assert_int_equal(s.last_ms, 10000);

    /* 500 ms after the latest time: 5 tokens, not the 5.5 s since 5000 */
    assert_int_equal(kvs_limit_remaining(&c, &s, 10500), 5);
    assert_int_equal(take(&c, &s, 0, 10, &d), KVS_LIMIT_REJECTED);
    assert_int_equal(d.used, 95000);

    /* a step of almost 2^64 ms empties the bucket without overflow */
    c = conf(KVS_LIMIT_TOKENS_MAX, 1000, KVS_LIMIT_TOKENS_MAX,
             KVS_LIMIT_NODELAY);
    kvs_limit_state_init(&s, 0);
    assert_int_equal(take(&c, &s, 0, KVS_LIMIT_TOKENS_MAX, NULL),
                     KVS_LIMIT_PASSED);
    assert_int_equal(kvs_limit_remaining(&c, &s, UINT64_MAX),
                     KVS_LIMIT_TOKENS_MAX);
    c = conf(1, 60000, KVS_LIMIT_TOKENS_MAX, KVS_LIMIT_NODELAY);
    kvs_limit_state_init(&s, 0);
    assert_int_equal(take(&c, &s, 0, KVS_LIMIT_TOKENS_MAX, NULL),
                     KVS_LIMIT_PASSED);
    /* 1 t/m for 2^63 ms is far more than 2^40 tokens */
    assert_int_equal(kvs_limit_remaining(&c, &s, 1ULL << 63),
                     KVS_LIMIT_TOKENS_MAX);
    c = conf(10, 1000, 100, KVS_LIMIT_NODELAY);

    /* from 0 (a new state's time) to now is fine too */
    kvs_limit_state_init(&s, UINT64_MAX - 5);
    assert_int_equal(take(&c, &s, 3, 100, NULL), KVS_LIMIT_PASSED);
    assert_int_equal(kvs_limit_remaining(&c, &s, UINT64_MAX), 0);
}


/* kv_rate's settle: the bucket ends charged what the request really
 * held, more or less than its reservation, past full as debt, once. */
static void
test_settle_actual(void **state)
{
    uint64_t              more;
    kvs_err_t             err;
    kvs_limit_conf_t      c;
    kvs_limit_resv_t      r1;
    kvs_limit_state_t     s;
    kvs_limit_decision_t  d;

    (void) state;

    c = conf(1, 1000, 1000, KVS_LIMIT_NODELAY);
    kvs_limit_state_init(&s, 0);

    /* reserved 100, held 30: 70 back */
    assert_int_equal(kvs_limit_reserve(&c, &s, 0, 100, 100, &r1, &d, &err),
                     KVS_OK);
    assert_int_equal(kvs_limit_remaining(&c, &s, 0), 900);
    assert_int_equal(kvs_limit_settle_actual(&c, &s, 0, &r1, 30, &more), 70);
    assert_int_equal(more, 0);
    assert_int_equal(kvs_limit_remaining(&c, &s, 0), 970);

    /* a second settle changes nothing, whatever it says */
    assert_int_equal(kvs_limit_settle_actual(&c, &s, 0, &r1, 900, &more), 0);
    assert_int_equal(more, 0);
    assert_int_equal(kvs_limit_cancel(&c, &s, 0, &r1), 0);
    assert_int_equal(kvs_limit_remaining(&c, &s, 0), 970);

    /* reserved 100, held 250: 150 more charged at once */
    assert_int_equal(kvs_limit_reserve(&c, &s, 0, 100, 100, &r1, &d, &err),
                     KVS_OK);
    assert_int_equal(kvs_limit_settle_actual(&c, &s, 0, &r1, 250, &more), 0);
    assert_int_equal(more, 150);
    assert_int_equal(kvs_limit_remaining(&c, &s, 0), 720);

    /* 2 s later (2 drained) a hold of 5000 on a reservation of 10: all
     * 4990 charged, 4278 of them past the full bucket (debt) */
    assert_int_equal(kvs_limit_reserve(&c, &s, 2000, 10, 10, &r1, &d, &err),
                     KVS_OK);
    assert_int_equal(kvs_limit_remaining(&c, &s, 2000), 712);
    assert_int_equal(kvs_limit_settle_actual(&c, &s, 2000, &r1, 5000,
                                             &more), 0);
    assert_int_equal(more, 4990);
    assert_int_equal(kvs_limit_remaining(&c, &s, 2000), 0);
    assert_int_equal(s.used, c.burst + 4278 * KVS_LIMIT_MILLI);
    assert_int_equal(kvs_limit_reset_ms(&c, &s), 5278 * 1000);

    /* the next request waits until the debt is paid and its own cost
     * fits: 5278 - 999 tokens at 1 t/s; refused, it changes nothing */
    assert_int_equal(kvs_limit_reserve(&c, &s, 2000, 1, 1, &r1, &d, &err),
                     KVS_OK);
    assert_int_equal(d.verdict, KVS_LIMIT_REJECTED);
    assert_int_equal(d.retry_ms, 4279 * 1000);
    assert_int_equal(d.used, c.burst + 4278 * KVS_LIMIT_MILLI);

    /* still in debt 4000 s later (remaining 0, not a wrapped count) */
    assert_int_equal(kvs_limit_remaining(&c, &s, 4002000), 0);
    assert_int_equal(kvs_limit_reserve(&c, &s, 4002000, 1, 1, &r1, &d,
                                       &err), KVS_OK);
    assert_int_equal(d.verdict, KVS_LIMIT_REJECTED);
    assert_int_equal(d.retry_ms, 279 * 1000);

    /* and passes once it has drained that far */
    assert_int_equal(kvs_limit_reserve(&c, &s, 4281000, 1, 1, &r1, &d,
                                       &err), KVS_OK);
    assert_int_equal(d.verdict, KVS_LIMIT_PASSED);
    assert_int_equal(kvs_limit_remaining(&c, &s, 4281000), 0);
    assert_int_equal(kvs_limit_settle_actual(&c, &s, 4281000, &r1, 0,
                                             &more), 1);
    assert_int_equal(kvs_limit_remaining(&c, &s, 4281000), 1);
}


/* A request of cost that passes at 0 ms and held actual: what came back,
 * and in *more what was charged on top. */
static uint64_t
settled(const kvs_limit_conf_t *c, kvs_limit_state_t *s, uint64_t cost,
    uint64_t actual, uint64_t *more)
{
    kvs_err_t             err;
    kvs_limit_resv_t      r;
    kvs_limit_decision_t  d;

    assert_int_equal(kvs_limit_reserve(c, s, 0, cost, cost, &r, &d, &err),
                     KVS_OK);
    assert_int_equal(d.verdict, KVS_LIMIT_PASSED);

    return kvs_limit_settle_actual(c, s, 0, &r, actual, more);
}


/* Debt's bounds: a hold over KVS_LIMIT_TOKENS_MAX is charged as that
 * much, and a bucket never goes past burst + KVS_LIMIT_DEBT_MAX, so that
 * the arithmetic stays exact at the largest rates and buckets. */
static void
test_settle_debt_bounds(void **state)
{
    uint64_t              more, back, burst;
    kvs_err_t             err;
    kvs_limit_conf_t      c;
    kvs_limit_resv_t      r1;
    kvs_limit_state_t     s;
    kvs_limit_decision_t  d;

    (void) state;

    /* the largest bucket at the largest rate */
    c = conf(KVS_LIMIT_TOKENS_MAX, 1000, KVS_LIMIT_TOKENS_MAX,
             KVS_LIMIT_NODELAY);
    burst = c.burst;
    kvs_limit_state_init(&s, 0);

    /* a hold of UINT64_MAX: the excess is capped at 2^40 tokens */
    assert_int_equal(settled(&c, &s, 1, UINT64_MAX, &more), 0);
    assert_int_equal(more, KVS_LIMIT_TOKENS_MAX);
    assert_int_equal(s.used, (1 + KVS_LIMIT_TOKENS_MAX) * KVS_LIMIT_MILLI);
    assert_int_equal(take(&c, &s, 0, 1, NULL), KVS_LIMIT_REJECTED);

    /* from one token short of full, another huge hold: at most
     * DEBT_MAX past full */
    s.used = burst - KVS_LIMIT_MILLI;
    assert_int_equal(settled(&c, &s, 1, UINT64_MAX, &more), 0);
    assert_int_equal(more, KVS_LIMIT_TOKENS_MAX);
    assert_int_equal(s.used, burst + KVS_LIMIT_DEBT_MAX);

    /* another one at the cap charges nothing more */
    r1.cost = 1;
    r1.refundable = 1;
    r1.settled = 0;
    assert_int_equal(kvs_limit_settle_actual(&c, &s, 0, &r1, 1000, &more),
                     0);
    assert_int_equal(more, 0);
    assert_int_equal(s.used, burst + KVS_LIMIT_DEBT_MAX);

    /* waits stay exact: (burst + debt - (burst - 1 token)) at the rate,
     * 2^40 + 1 tokens at 2^40 a second: just over 1 s */
    assert_int_equal(kvs_limit_reserve(&c, &s, 0, 1, 1, &r1, &d, &err),
                     KVS_OK);
    assert_int_equal(d.verdict, KVS_LIMIT_REJECTED);
    assert_int_equal(d.retry_ms, 1001);
    assert_int_equal(kvs_limit_reset_ms(&c, &s), 2000);

    /* a long time drains it all, with no overflow */
    assert_int_equal(kvs_limit_remaining(&c, &s, UINT64_MAX / 2),
                     KVS_LIMIT_TOKENS_MAX);

    /* a refund in debt takes it down, never below empty */
    s.used = burst + 5 * KVS_LIMIT_MILLI;
    s.last_ms = 0;
    r1.cost = 10;
    r1.refundable = 10;
    r1.settled = 0;
    back = kvs_limit_settle_actual(&c, &s, 0, &r1, 3, &more);
    assert_int_equal(back, 7);
    assert_int_equal(more, 0);
    assert_int_equal(s.used, burst - 2 * KVS_LIMIT_MILLI);
}


/* The unused output comes back once; a second settle, or a cancel after
 * it, changes nothing; a refund never fills the bucket over full. */
static void
test_settle_once(void **state)
{
    kvs_err_t             err;
    kvs_limit_conf_t      c;
    kvs_limit_resv_t      r1, r2;
    kvs_limit_state_t     s;
    kvs_limit_decision_t  d;

    (void) state;

    c = conf(1, 1000, 1000, KVS_LIMIT_NODELAY);
    kvs_limit_state_init(&s, 0);

    /* 10 prompt + 500 reserved output, 20 used: 480 back */
    assert_int_equal(kvs_limit_reserve(&c, &s, 0, 510, 500, &r1, &d, &err),
                     KVS_OK);
    assert_int_equal(d.verdict, KVS_LIMIT_PASSED);
    assert_int_equal(kvs_limit_remaining(&c, &s, 0), 490);
    assert_int_equal(kvs_limit_settle(&c, &s, 0, &r1, 20), 480);
    assert_int_equal(kvs_limit_remaining(&c, &s, 0), 970);
    assert_int_equal(kvs_limit_settle(&c, &s, 0, &r1, 20), 0);
    assert_int_equal(kvs_limit_settle(&c, &s, 0, &r1, 0), 0);
    assert_int_equal(kvs_limit_cancel(&c, &s, 0, &r1), 0);
    assert_int_equal(kvs_limit_remaining(&c, &s, 0), 970);

    /* more output than reserved (cannot happen, but): nothing back */
    assert_int_equal(kvs_limit_reserve(&c, &s, 0, 10, 5, &r2, &d, &err),
                     KVS_OK);
    assert_int_equal(kvs_limit_settle(&c, &s, 0, &r2, 9), 0);
    assert_int_equal(kvs_limit_remaining(&c, &s, 0), 960);

    /* drained meanwhile: the refund stops at full */
    assert_int_equal(kvs_limit_reserve(&c, &s, 0, 300, 300, &r2, &d, &err),
                     KVS_OK);
    assert_int_equal(kvs_limit_remaining(&c, &s, 0), 660);
    assert_int_equal(kvs_limit_settle(&c, &s, 200000, &r2, 0), 300);
    assert_int_equal(kvs_limit_remaining(&c, &s, 200000), 1000);
    assert_int_equal(s.used, 0);

    /* cancel: the whole charge, once */
    assert_int_equal(kvs_limit_reserve(&c, &s, 200000, 400, 100, &r2, &d,
                                       &err), KVS_OK);
    assert_int_equal(kvs_limit_cancel(&c, &s, 200000, &r2), 400);
    assert_int_equal(kvs_limit_cancel(&c, &s, 200000, &r2), 0);
    assert_int_equal(kvs_limit_settle(&c, &s, 200000, &r2, 0), 0);
    assert_int_equal(kvs_limit_remaining(&c, &s, 200000), 1000);

    /* a rejected request has nothing to settle */
    assert_int_equal(kvs_limit_reserve(&c, &s, 200000, 1000, 0, &r2, &d,
                                       &err), KVS_OK);
    assert_int_equal(kvs_limit_reserve(&c, &s, 200000, 1, 1, &r1, &d,
                                       &err), KVS_OK);
    assert_int_equal(d.verdict, KVS_LIMIT_REJECTED);
    assert_int_equal(kvs_limit_settle(&c, &s, 200000, &r1, 0), 0);
    assert_int_equal(kvs_limit_remaining(&c, &s, 200000), 0);

    /* bad arguments change nothing */
    assert_int_equal(kvs_limit_reserve(&c, &s, 200000, 1, 2, &r1, &d,
                                       &err), KVS_EINVAL);
    assert_int_equal(kvs_limit_reserve(&c, &s, 200000,
                                       KVS_LIMIT_TOKENS_MAX + 1, 0, &r1, &d,
                                       &err), KVS_EINVAL);
}


/* ---- a million operations against the exact model ---------------------- */

typedef struct {
    uint64_t  per_ms;     /* units of 1/60000 token drained per ms */
    uint64_t  burst;      /* ... the bucket's size */
    uint64_t  delay;
    uint64_t  a;          /* in the bucket */
    uint64_t  last;
} model_t;

#define UNIT  60000ULL    /* units per token */


static void
model_drain(model_t *m, uint64_t now)
{
    uint64_t  d;

    if (now <= m->last) {
        return;
    }

    d = (now - m->last) * m->per_ms;
    m->last = now;
    m->a = d >= m->a ? 0 : m->a - d;
}


static uint64_t
model_wait(const model_t *m, uint64_t level)
{
    return m->a <= level ? 0 : (m->a - level + m->per_ms - 1) / m->per_ms;
}


static uint64_t
rnd(uint64_t *x)
{
    /* xorshift64* */
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * 0x2545f4914f6cdd1dULL;
}


typedef struct {
    kvs_limit_resv_t  resv;
    uint64_t          refundable;
} open_t;


static void
test_million_no_drift(void **state)
{
    int                   k;
    size_t                i, j, n_open;
    uint64_t              x, now, rate, period, burst, delay, cost, refund;
    uint64_t              used, back, passed, rejected, delayed;
    kvs_err_t             err;
    model_t               m;
    open_t                open[64];
    kvs_limit_resv_t      spare;
    kvs_limit_conf_t      c;
    kvs_limit_state_t     s;
    kvs_limit_decision_t  d;

    (void) state;

    x = 0x9e3779b97f4a7c15ULL;
    passed = rejected = delayed = 0;

    for (k = 0; k < 10; k++) {
        /* odd rates in t/m do not divide a millisecond */
        period = (k & 1) ? 60000 : 1000;
        rate = 1 + rnd(&x) % ((k & 1) ? 100000 : 5000);
        burst = 1 + rnd(&x) % 20000;
        delay = (k % 3 == 0) ? KVS_LIMIT_NODELAY : rnd(&x) % (burst + 1);

        c = conf(rate, period, burst, delay);
        m.per_ms = rate * (UNIT / period);
        m.burst = burst * UNIT;
        m.delay = (delay == KVS_LIMIT_NODELAY ? burst : delay) * UNIT;
        m.a = 0;
        now = 1000000 + rnd(&x) % 1000;
        m.last = now;
        kvs_limit_state_init(&s, now);
        n_open = 0;

        for (i = 0; i < 100000; i++) {
            switch (rnd(&x) % 8) {

            case 0:
            case 1:
                /* time: mostly small steps, sometimes back */
                if (rnd(&x) % 10 == 0) {
                    now -= rnd(&x) % 50;
                } else {
                    now += rnd(&x) % 30;
                }
                break;

            case 2:
                /* a settle of one open reservation */
                if (n_open == 0) {
                    break;
                }
                j = rnd(&x) % n_open;
                used = rnd(&x) % (open[j].refundable + 2);
                back = kvs_limit_settle(&c, &s, now, &open[j].resv, used);
                refund = used < open[j].refundable
                         ? open[j].refundable - used : 0;
                assert_int_equal(back, refund);
                model_drain(&m, now);
                m.a = refund * UNIT >= m.a ? 0 : m.a - refund * UNIT;
                /* again: nothing */
                assert_int_equal(kvs_limit_settle(&c, &s, now,
                                                  &open[j].resv, 0), 0);
                open[j] = open[--n_open];
                break;

            default:
                cost = rnd(&x) % (burst / 4 + 2);
                refund = cost ? rnd(&x) % (cost + 1) : 0;
                /* a full table: the reservation is never settled */
                assert_int_equal(kvs_limit_reserve(&c, &s, now, cost,
                                                   refund,
                                                   n_open < 64
                                                   ? &open[n_open].resv
                                                   : &spare, &d,
                                                   &err), KVS_OK);
                model_drain(&m, now);

                if (m.a + cost * UNIT > m.burst) {
                    assert_int_equal(d.verdict, KVS_LIMIT_REJECTED);
                    assert_int_equal(d.retry_ms,
                                     model_wait(&m, m.burst - cost * UNIT));
                    rejected++;
                    break;
                }

                assert_int_equal(d.delay_ms, model_wait(&m, m.delay));
                assert_int_equal(d.verdict, d.delay_ms ? KVS_LIMIT_DELAYED
                                                       : KVS_LIMIT_PASSED);
                delayed += d.delay_ms != 0;
                passed++;
                m.a += cost * UNIT;
                assert_int_equal(d.reset_ms, model_wait(&m, 0));

                if (n_open < 64) {
                    open[n_open].refundable = refund;
                    n_open++;
                }
                break;
            }

            /* the bucket holds exactly the model's amount */
            assert_true(s.frac < KVS_LIMIT_DEN);
            assert_true(s.used <= c.burst);
            kvs_limit_drain(&c, &s, now);
            model_drain(&m, now);
            assert_int_equal(s.used * KVS_LIMIT_DEN - s.frac, m.a);
        }
    }

    /* the run went through every branch */
    print_message("passed %llu (delayed %llu), rejected %llu\n",
                  (unsigned long long) passed, (unsigned long long) delayed,
                  (unsigned long long) rejected);
    assert_true(passed > 50000);
    assert_true(rejected > 10000);
    assert_true(delayed > 10000);
}


static void
test_fmt_duration(void **state)
{
    char  b[KVS_LIMIT_DUR_LEN];

    (void) state;

    kvs_limit_fmt_duration(b, 0);
    assert_string_equal(b, "0s");
    kvs_limit_fmt_duration(b, 250);
    assert_string_equal(b, "250ms");
    kvs_limit_fmt_duration(b, 1000);
    assert_string_equal(b, "1s");
    kvs_limit_fmt_duration(b, 1500);
    assert_string_equal(b, "1.5s");
    kvs_limit_fmt_duration(b, 1020);
    assert_string_equal(b, "1.02s");
    kvs_limit_fmt_duration(b, 60000);
    assert_string_equal(b, "1m0s");
    assert_int_equal(kvs_limit_fmt_duration(b, 360000), 4);
    assert_string_equal(b, "6m0s");
    kvs_limit_fmt_duration(b, 3600000);
    assert_string_equal(b, "1h0m0s");
    kvs_limit_fmt_duration(b, 3723004);
    assert_string_equal(b, "1h2m3.004s");
}


/* ---- kv_rate ------------------------------------------------------------ */

/* The KV bucket of a token bucket t at kv_rate KiB/s: kv_rate x t's
 * window in whole seconds (at least one), at most KVS_LIMIT_TOKENS_MAX,
 * never delaying. */
static uint64_t
kv_burst(uint64_t rate, uint64_t period_ms, uint64_t burst,
    uint64_t kv_rate)
{
    kvs_err_t         err;
    kvs_limit_conf_t  t, kc;

    t = conf(rate, period_ms, burst, KVS_LIMIT_NODELAY);

    assert_int_equal(kvs_limit_kv_conf_init(&kc, &t, kv_rate, &err),
                     KVS_OK);
    assert_int_equal(kc.rate, kv_rate);
    assert_int_equal(kc.period_ms, 1000);
    assert_int_equal(kc.delay, kc.burst);
    assert_int_equal(kc.burst % KVS_LIMIT_MILLI, 0);

    return kc.burst / KVS_LIMIT_MILLI;
}


static void
test_kv_conf(void **state)
{
    kvs_err_t         err;
    kvs_limit_conf_t  t, kc;

    (void) state;

    /* docs/limits.md: rate=1000t/s burst=10000 kv_rate=1g/s, a 10 s
     * window, 10 GiB x s */
    assert_int_equal(kv_burst(1000, 1000, 10000, 1048576), 10485760);

    /* burst = rate: one period, 1 s */
    assert_int_equal(kv_burst(1000, 1000, 1000, 1048576), 1048576);

    /* a minute's rate: 6000 t/m, burst 6000: 60 s */
    assert_int_equal(kv_burst(6000, 60000, 6000, 100), 6000);

    /* under a second: 500 ms is held as one second */
    assert_int_equal(kv_burst(1000, 1000, 500, 100), 100);

    /* whole seconds: 10 tokens at 3 t/s is 3333 ms, 3 s */
    assert_int_equal(kv_burst(3, 1000, 10, 7), 21);

    /* 1 token at 60 t/m: 1000 ms exactly */
    assert_int_equal(kv_burst(60, 60000, 1, 5), 5);

    /* the largest values: the window (2^40 minutes) and the product
     * stop at KVS_LIMIT_TOKENS_MAX */
    assert_int_equal(kv_burst(1, 60000, KVS_LIMIT_TOKENS_MAX, 1),
                     KVS_LIMIT_TOKENS_MAX);
    assert_int_equal(kv_burst(1000, 1000, 1000, KVS_LIMIT_TOKENS_MAX),
                     KVS_LIMIT_TOKENS_MAX);
    assert_int_equal(kv_burst(1000, 1000, 2000, KVS_LIMIT_TOKENS_MAX),
                     KVS_LIMIT_TOKENS_MAX);
    assert_int_equal(kv_burst(1000, 1000, 2000, KVS_LIMIT_TOKENS_MAX / 2),
                     KVS_LIMIT_TOKENS_MAX);
    assert_int_equal(kv_burst(1000, 1000, 3000, KVS_LIMIT_TOKENS_MAX / 2),
                     KVS_LIMIT_TOKENS_MAX);

    /* kv_rate out of range */
    t = conf(1000, 1000, 1000, KVS_LIMIT_NODELAY);
    assert_int_equal(kvs_limit_kv_conf_init(&kc, &t, 0, &err), KVS_EINVAL);
    assert_int_equal(kvs_limit_kv_conf_init(&kc, &t,
                                            KVS_LIMIT_TOKENS_MAX + 1, &err),
                     KVS_EINVAL);
}


/* The reservation: tokens x bytes per token, in KiB, rounded up; over
 * any bucket: KVS_LIMIT_TOKENS_MAX + 1. */
static void
test_kv_cost(void **state)
{
    (void) state;

    assert_int_equal(kvs_limit_kv_cost(0, 256), 0);
    assert_int_equal(kvs_limit_kv_cost(1000, 0), 0);
    assert_int_equal(kvs_limit_kv_cost(1, 1024), 1);
    assert_int_equal(kvs_limit_kv_cost(1, 256), 1);         /* 0.25 */
    assert_int_equal(kvs_limit_kv_cost(4, 256), 1);         /* 1 */
    assert_int_equal(kvs_limit_kv_cost(5, 256), 2);         /* 1.25 */
    assert_int_equal(kvs_limit_kv_cost(3, 1000), 3);        /* 2.93 */

    /* Llama-3-70B in bf16: 320 KiB a token, 200k tokens */
    assert_int_equal(kvs_limit_kv_cost(200000, 327680), 64000000);

    /* the largest bucket exactly, and one byte over it */
    assert_int_equal(kvs_limit_kv_cost(KVS_LIMIT_TOKENS_MAX, 1024),
                     KVS_LIMIT_TOKENS_MAX);
    assert_int_equal(kvs_limit_kv_cost(KVS_LIMIT_TOKENS_MAX + 1, 1024),
                     KVS_LIMIT_TOKENS_MAX + 1);

    /* 3 x 375299968947541 = 2^50 - 1 bytes: 2^40 KiB rounded up; one
     * token more is over */
    assert_int_equal(kvs_limit_kv_cost(375299968947541ULL, 3),
                     KVS_LIMIT_TOKENS_MAX);
    assert_int_equal(kvs_limit_kv_cost(375299968947542ULL, 3),
                     KVS_LIMIT_TOKENS_MAX + 1);

    /* a product past 2^64 is still over, not wrapped */
    assert_int_equal(kvs_limit_kv_cost(UINT64_MAX, 327680),
                     KVS_LIMIT_TOKENS_MAX + 1);
    assert_int_equal(kvs_limit_kv_cost(UINT64_MAX, 0), 0);
}


#define S  1000000000ULL     /* ns */

static uint64_t
held(uint64_t prompt, uint64_t generated, uint64_t bpt, uint64_t submit,
    uint64_t first, uint64_t now)
{
    kvs_limit_kv_hold_t  h;

    memset(&h, 0, sizeof(h));
    h.prompt_tokens = prompt;
    h.generated = generated;
    h.bytes_per_token = bpt;
    h.submit_ns = submit;
    h.first_ns = first;

    return kvs_limit_kv_held(&h, now);
}


/* What a request held: half its prompt until the first token, then the
 * prompt and half its output, KiB x s rounded up. */
static void
test_kv_held(void **state)
{
    (void) state;

    /* never reached the engine */
    assert_int_equal(held(100, 0, 1024, 0, 0, 5 * S), 0);

    /* zero-length holds */
    assert_int_equal(held(100, 0, 1024, S, 0, S), 0);
    assert_int_equal(held(100, 10, 1024, S, S, S), 0);

    /* no first token yet: 2 s filling, 50 KiB held on average */
    assert_int_equal(held(100, 0, 1024, S, 0, 3 * S), 100);

    /* 1 s filling (50 KiB x s), then 2 s of 100 + 10 / 2 KiB (210) */
    assert_int_equal(held(100, 10, 1024, S, 2 * S, 4 * S), 260);

    /* at 1000 bytes a token: 260 x 1000 / 1024 = 253.9 */
    assert_int_equal(held(100, 10, 1000, S, 2 * S, 4 * S), 254);

    /* any hold at all is at least 1: 0.5 token for 1 ns */
    assert_int_equal(held(1, 0, 256, S, 0, S + 1), 1);

    /* a first token stamped before the submit: no filling */
    assert_int_equal(held(100, 10, 1024, 2 * S, S, 3 * S), 210);

    /* now behind the first token: only the filling */
    assert_int_equal(held(100, 10, 1024, S, 3 * S, 2 * S), 100);

    /* 2^40 tokens of 1 MiB for 1000 s: KVS_LIMIT_TOKENS_MAX */
    assert_int_equal(held(KVS_LIMIT_TOKENS_MAX, 0, 1 << 20, S, S,
                          1001 * S), KVS_LIMIT_TOKENS_MAX);
}


/* What a request held by the engine's count: blocks x us x a block's
 * bytes; cut short, plus its tokens from the latest count to now. */
static void
test_kv_held_engine(void **state)
{
    kvs_limit_kv_hold_t  h;

    (void) state;

    memset(&h, 0, sizeof(h));
    h.prompt_tokens = 100;
    h.generated = 20;
    h.bytes_per_token = 512;
    h.block_tokens = 16;                 /* 8 KiB a block */
    h.submit_ns = S;                     /* the estimate would be 0.. */
    h.first_ns = 50 * S;                 /* ..huge: 49 s of filling */

    /* 10 blocks for 2.5 s: 25,000,000 block-us = 200 KiB x s, whatever
     * the timings say (the 49 s in the queue count nothing) */
    h.engine_block_us = 25000000;
    h.engine_ns = 60 * S;
    h.engine_done = 1;
    assert_int_equal(kvs_limit_kv_held(&h, 61 * S), 200);
    assert_int_equal(kvs_limit_kv_held(&h, 600 * S), 200);

    /* rounded up: one block for 1 us is 8 KiB x 1e-6 s */
    h.engine_block_us = 1;
    assert_int_equal(kvs_limit_kv_held(&h, 61 * S), 1);

    /* nothing held: nothing charged */
    h.engine_block_us = 0;
    assert_int_equal(kvs_limit_kv_held(&h, 61 * S), 0);

    /* cut short (the client left): the count, plus its 120 tokens
     * (60 KiB) from the latest count to now, 2 s: 200 + 120 */
    h.engine_block_us = 25000000;
    h.engine_done = 0;
    assert_int_equal(kvs_limit_kv_held(&h, 62 * S), 320);

    /* a now behind the count adds nothing */
    assert_int_equal(kvs_limit_kv_held(&h, 59 * S), 200);

    /* the largest count: capped, no overflow */
    h.engine_block_us = UINT64_MAX;
    h.engine_done = 1;
    assert_int_equal(kvs_limit_kv_held(&h, 61 * S), KVS_LIMIT_TOKENS_MAX);

    /* without a count (engine_ns 0) the estimate stays: 49 s of half
     * the prompt (50 x 0.5 KiB) and 1 s of 110 x 0.5 KiB */
    h.engine_block_us = 25000000;
    h.engine_ns = 0;
    assert_int_equal(kvs_limit_kv_held(&h, 51 * S), 1225 + 55);
}


/* A request reserving kv_cost in the KV bucket at 0 ms that held
 * `held`: it passes, takes kv_cost of the room, and settles with back
 * refunded and more charged on top, leaving room. */
static void
kv_request(const kvs_limit_conf_t *kc, kvs_limit_state_t *s,
    uint64_t kv_cost, uint64_t held_kib_s, uint64_t back, uint64_t more,
    uint64_t room)
{
    uint64_t              before, got_more;
    kvs_err_t             err;
    kvs_limit_resv_t      r;
    kvs_limit_decision_t  d;

    before = kvs_limit_remaining(kc, s, 0);

    assert_int_equal(kvs_limit_reserve(kc, s, 0, kv_cost, kv_cost, &r, &d,
                                       &err), KVS_OK);
    assert_int_equal(d.verdict, KVS_LIMIT_PASSED);
    assert_int_equal(kvs_limit_remaining(kc, s, 0), before - kv_cost);

    assert_int_equal(kvs_limit_settle_actual(kc, s, 0, &r, held_kib_s,
                                             &got_more), back);
    assert_int_equal(got_more, more);
    assert_int_equal(kvs_limit_remaining(kc, s, 0), room);
}


/* A request's KV reservation settled to what it held: less comes back,
 * more is charged on top. */
static void
test_kv_settle(void **state)
{
    uint64_t              kv_cost;
    kvs_err_t             err;
    kvs_limit_conf_t      t, kc;
    kvs_limit_resv_t      r1;
    kvs_limit_state_t     s;
    kvs_limit_decision_t  d;

    (void) state;

    /* rate=1000t/s burst=10000 kv_rate=1m/s: 10240 KiB x s */
    t = conf(1000, 1000, 10000, KVS_LIMIT_NODELAY);
    assert_int_equal(kvs_limit_kv_conf_init(&kc, &t, 1024, &err), KVS_OK);
    kvs_limit_state_init(&s, 0);

    /* 100 prompt + 400 reserved output at 1 KiB a token: 500 */
    kv_cost = kvs_limit_kv_cost(500, 1024);
    assert_int_equal(kv_cost, 500);

    /* below: 0.5 s filling (25) and 2 s of 100 + 40 / 2 (240): 265
     * held, 235 back */
    kv_request(&kc, &s, kv_cost, held(100, 40, 1024, S, S + S / 2,
                                      3 * S + S / 2),
               235, 0, 10240 - 265);

    /* above: 20 s of the whole prompt, 2000 held, 1500 more */
    kv_request(&kc, &s, kv_cost, held(100, 0, 1024, S, S, 21 * S),
               0, 1500, 9975 - 2000);

    /* never reached the engine: the whole reservation back */
    kv_request(&kc, &s, kv_cost, held(100, 0, 1024, 0, 0, S),
               500, 0, 7975);

    /* above the room left: 9000 held, 8500 more, 1025 of them past the
     * full bucket: in debt, the next reservation waits for it */
    kv_request(&kc, &s, kv_cost, 9000, 0, 8500, 0);
    assert_int_equal(s.used, (10240 + 1025) * KVS_LIMIT_MILLI);
    assert_int_equal(kvs_limit_reserve(&kc, &s, 0, kv_cost, kv_cost, &r1,
                                       &d, &err), KVS_OK);
    assert_int_equal(d.verdict, KVS_LIMIT_REJECTED);
    /* (1025 + 500) KiB x s at 1024 KiB/s */
    assert_int_equal(d.retry_ms, 1490);

    /* a reservation over any bucket can never pass */
    assert_int_equal(kvs_limit_reserve(&kc, &s, 0,
                                       kvs_limit_kv_cost(UINT64_MAX, 1024),
                                       0, &r1, &d, &err), KVS_EINVAL);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_conf_ranges),
        cmocka_unit_test(test_admission_counts),
        cmocka_unit_test(test_rate_per_minute_fraction),
        cmocka_unit_test(test_delay),
        cmocka_unit_test(test_never),
        cmocka_unit_test(test_retry_after),
        cmocka_unit_test(test_clock_backwards),
        cmocka_unit_test(test_settle_once),
        cmocka_unit_test(test_settle_actual),
        cmocka_unit_test(test_settle_debt_bounds),
        cmocka_unit_test(test_million_no_drift),
        cmocka_unit_test(test_fmt_duration),
        cmocka_unit_test(test_kv_conf),
        cmocka_unit_test(test_kv_cost),
        cmocka_unit_test(test_kv_held),
        cmocka_unit_test(test_kv_held_engine),
        cmocka_unit_test(test_kv_settle),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
