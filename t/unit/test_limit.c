/*
 * test_limit: the token bucket of kvserve_limit (src/limit/kvs_limit.c).
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
 * held, more or less than its reservation, never over full, once. */
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

    /* 2 s later (2 drained) a hold of 5000 fills the bucket, no further */
    assert_int_equal(kvs_limit_reserve(&c, &s, 2000, 10, 10, &r1, &d, &err),
                     KVS_OK);
    assert_int_equal(kvs_limit_remaining(&c, &s, 2000), 712);
    assert_int_equal(kvs_limit_settle_actual(&c, &s, 2000, &r1, 5000,
                                             &more), 0);
    assert_int_equal(more, 712);
    assert_int_equal(kvs_limit_remaining(&c, &s, 2000), 0);
    assert_int_equal(s.used, c.burst);

    /* and the next request waits for what it took */
    assert_int_equal(kvs_limit_reserve(&c, &s, 2000, 1, 1, &r1, &d, &err),
                     KVS_OK);
    assert_int_equal(d.verdict, KVS_LIMIT_REJECTED);
    assert_int_equal(d.retry_ms, 1000);
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
        cmocka_unit_test(test_million_no_drift),
        cmocka_unit_test(test_fmt_duration),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
