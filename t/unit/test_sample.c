/*
 * test_sample: the sampler against definitions written out here: argmax
 * with its tie rule, nucleus / min-p / top-k sets on hand-made
 * distributions, the OpenAI penalty formula and logit bias on exact
 * values, draw frequencies against the softmax, log-softmax sums, and
 * llama2.c run.c's sampler re-implemented below from the description in
 * ../shared/fixtures/models/README.md (section 3), compared token by
 * token over 10,000 random steps.
 */

#include <math.h>

#include "kvs_test.h"

#include "sample/kvs_sample.h"


/* ---- test data: a 64-bit LCG, values unrelated to the sampler's RNG */

static uint64_t
lcg(uint64_t *st)
{
    *st = *st * 6364136223846793005ULL + 1442695040888963407ULL;
    return *st >> 33;
}


/* n logits in [-scale, scale); quant > 0 rounds to multiples of it, so
 * that equal probabilities (sort ties) are common */
static void
fill(float *x, uint32_t n, uint64_t *st, float scale, float quant)
{
    uint32_t  i;
    float     v;

    for (i = 0; i < n; i++) {
        v = (float) ((double) lcg(st) / 2147483648.0 * 2.0 - 1.0) * scale;
        if (quant > 0.0f) {
            v = roundf(v / quant) * quant;
        }
        x[i] = v;
    }
}


static kvs_sample_params_t
params(float temp, float top_p, uint64_t seed)
{
    kvs_sample_params_t  p;

    memset(&p, 0, sizeof(p));
    p.temperature = temp;
    p.top_p = top_p;
    p.seed = seed;

    return p;
}


/* ---- llama2.c run.c's sampler, re-implemented from the README ------- */

typedef struct {
    float  prob;
    int    index;
} ref_pi_t;


static uint32_t
ref_u32(uint64_t *st)
{
    *st ^= *st >> 12;
    *st ^= *st << 25;
    *st ^= *st >> 27;
    return (uint32_t) ((*st * 0x2545F4914F6CDD1DULL) >> 32);
}


static float
ref_f32(uint64_t *st)
{
    return (ref_u32(st) >> 8) / 16777216.0f;
}


static void
ref_softmax(float *x, int n)
{
    int    i;
    float  max, sum;

    max = x[0];
    for (i = 1; i < n; i++) {
        if (x[i] > max) {
            max = x[i];
        }
    }

    sum = 0.0f;
    for (i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }

    for (i = 0; i < n; i++) {
        x[i] /= sum;
    }
}


static int
ref_mult(const float *prob, int n, float coin)
{
    int    i;
    float  cdf;

    cdf = 0.0f;
    for (i = 0; i < n; i++) {
        cdf += prob[i];
        if (coin < cdf) {
            return i;
        }
    }

    return n - 1;
}


/* run.c's comparator: descending, equal is 0 (qsort decides) */
static int
ref_cmp(const void *a, const void *b)
{
    const ref_pi_t  *x = a, *y = b;

    if (x->prob > y->prob) {
        return -1;
    }
    if (x->prob < y->prob) {
        return 1;
    }
    return 0;
}


static int
ref_topp(const float *prob, int n, float topp, ref_pi_t *pi, float coin)
{
    int    i, n0, last;
    float  cutoff, cum, r, cdf;

    cutoff = (1.0f - topp) / (n - 1);
    n0 = 0;

    for (i = 0; i < n; i++) {
        if (prob[i] >= cutoff) {
            pi[n0].index = i;
            pi[n0].prob = prob[i];
            n0++;
        }
    }

    qsort(pi, n0, sizeof(ref_pi_t), ref_cmp);

    cum = 0.0f;
    last = n0 - 1;
    for (i = 0; i < n0; i++) {
        cum += pi[i].prob;
        if (cum > topp) {
            last = i;
            break;
        }
    }

    r = coin * cum;
    cdf = 0.0f;
    for (i = 0; i <= last; i++) {
        cdf += pi[i].prob;
        if (r < cdf) {
            return pi[i].index;
        }
    }

    return pi[last].index;
}


static int
ref_sample(float *x, int n, float temp, float topp, uint64_t *st,
    ref_pi_t *pi)
{
    int    i;
    float  coin;

    for (i = 0; i < n; i++) {
        x[i] /= temp;
    }

    ref_softmax(x, n);
    coin = ref_f32(st);

    if (topp <= 0.0f || topp >= 1.0f) {
        return ref_mult(x, n, coin);
    }

    return ref_topp(x, n, topp, pi, coin);
}


static void
run_c_compare(float temp, float topp, uint64_t seed, float quant)
{
    enum { N = 512, STEPS = 10000 };
    kvs_sample_params_t  p;
    kvs_sampler_t        s;
    kvs_err_t            err;
    uint64_t             data, ref_state;
    float                a[N], b[N];
    ref_pi_t             pi[N];
    int                  step, want, seen[N], distinct;
    int32_t              got;

    p = params(temp, topp, seed);
    assert_int_equal(kvs_sampler_init(&s, &p, N, &err), KVS_OK);

    data = 42;
    ref_state = seed;
    memset(seen, 0, sizeof(seen));
    distinct = 0;

    for (step = 0; step < STEPS; step++) {
        /* a peaked scale now and then, so the nucleus is sometimes tiny */
        fill(a, N, &data, step % 7 == 0 ? 12.0f : 4.0f, quant);
        memcpy(b, a, sizeof(a));

        want = ref_sample(a, N, temp, topp, &ref_state, pi);
        assert_int_equal(kvs_sample(&s, b, &got, &err), KVS_OK);

        if (got != want) {
            fail_msg("T=%g P=%g quant=%g step %d: run.c draws %d, we %d",
                     (double) temp, (double) topp, (double) quant, step,
                     want, (int) got);
        }

        /* both leave the probabilities: the same floats, bit for bit */
        if (memcmp(a, b, sizeof(a)) != 0) {
            fail_msg("T=%g P=%g step %d: probabilities differ from run.c",
                     (double) temp, (double) topp, step);
        }

        distinct += seen[got]++ == 0;
    }

    /* the comparison is only worth something if the draws vary */
    assert_true(distinct > 100);
    assert_true(s.rng == ref_state);

    kvs_sampler_free(&s);
}


static void
test_run_c_topp(void **state)
{
    run_c_compare(1.0f, 0.9f, 133742, 0.0f);
    run_c_compare(0.8f, 0.5f, 7, 0.0f);
    /* many equal probabilities: relies on a stable qsort in run.c */
    run_c_compare(1.0f, 0.9f, 133742, 0.5f);
}


static void
test_run_c_multinomial(void **state)
{
    run_c_compare(1.0f, 1.0f, 133742, 0.0f);
    run_c_compare(1.3f, 1.0f, 99, 0.25f);
}


/* ---- greedy -------------------------------------------------------- */

static int32_t
argmax(const float *x, uint32_t n)
{
    uint32_t  i, best;

    best = 0;
    for (i = 1; i < n; i++) {
        if (x[i] > x[best]) {
            best = i;
        }
    }

    return (int32_t) best;
}


static void
test_greedy(void **state)
{
    kvs_sample_params_t  p;
    kvs_sampler_t        s1, s2;
    kvs_err_t            err;
    float                x[6] = { 1.0f, 3.0f, -2.0f, 3.0f, 2.5f, 3.0f };
    float                y[300], z[300];
    int32_t              t1, t2;
    uint64_t             data, rng;
    int                  i;

    p = params(0.0f, 1.0f, 1);
    assert_int_equal(kvs_sampler_init(&s1, &p, 6, &err), KVS_OK);
    assert_null(s1.cand);
    assert_int_equal(kvs_sample(&s1, x, &t1, &err), KVS_OK);
    assert_int_equal(t1, 1);                     /* lowest of three ties */

    x[0] = -INFINITY;
    x[1] = 2.0f;
    assert_int_equal(kvs_sample(&s1, x, &t1, &err), KVS_OK);
    assert_int_equal(t1, 3);
    kvs_sampler_free(&s1);

    /* temperature 0 ignores the seed and draws no coin */
    p = params(0.0f, 0.5f, 1);
    p.top_k = 3;
    assert_int_equal(kvs_sampler_init(&s1, &p, 300, &err), KVS_OK);
    p.seed = 987654321;
    assert_int_equal(kvs_sampler_init(&s2, &p, 300, &err), KVS_OK);
    rng = s1.rng;
    data = 5;

    for (i = 0; i < 200; i++) {
        fill(y, 300, &data, 3.0f, i % 2 ? 0.5f : 0.0f);
        memcpy(z, y, sizeof(y));
        assert_int_equal(kvs_sample(&s1, y, &t1, &err), KVS_OK);
        assert_int_equal(kvs_sample(&s2, z, &t2, &err), KVS_OK);
        assert_int_equal(t1, t2);
        assert_int_equal(t1, argmax(y, 300));
    }

    assert_true(s1.rng == rng);
    kvs_sampler_free(&s1);
    kvs_sampler_free(&s2);
}


/* top_k = 1 and top_p = 0 leave only the argmax, whatever the coin */
static void
test_topk1_topp0_greedy(void **state)
{
    kvs_sample_params_t  p;
    kvs_sampler_t        sk, sp;
    kvs_err_t            err;
    float                x[257], y[257], z[257];
    int32_t              tk, tp;
    uint64_t             data;
    int                  i;

    p = params(1.5f, 1.0f, 3);
    p.top_k = 1;
    assert_int_equal(kvs_sampler_init(&sk, &p, 257, &err), KVS_OK);
    p = params(1.5f, 0.0f, 3);
    assert_int_equal(kvs_sampler_init(&sp, &p, 257, &err), KVS_OK);
    data = 11;

    for (i = 0; i < 500; i++) {
        fill(x, 257, &data, 2.0f, i % 3 ? 0.0f : 0.25f);
        memcpy(y, x, sizeof(x));
        memcpy(z, x, sizeof(x));
        assert_int_equal(kvs_sample(&sk, y, &tk, &err), KVS_OK);
        assert_int_equal(kvs_sample(&sp, z, &tp, &err), KVS_OK);
        assert_int_equal(tk, argmax(x, 257));
        assert_int_equal(tp, argmax(x, 257));
    }

    kvs_sampler_free(&sk);
    kvs_sampler_free(&sp);
}


/* ---- truncation sets on a hand-made distribution -------------------- */

/*
 * Draws `draws` times from probs[0..n) (logits = log p, temperature 1)
 * and returns the bit set of the tokens seen; freq gets the frequencies.
 */
static unsigned
draw_set(const double *probs, int n, kvs_sample_params_t *p, int draws,
    double *freq)
{
    kvs_sampler_t  s;
    kvs_err_t      err;
    float          x[16];
    int32_t        t;
    int            i, j, cnt[16];
    unsigned       set;

    assert_int_equal(kvs_sampler_init(&s, p, (uint32_t) n, &err), KVS_OK);
    memset(cnt, 0, sizeof(cnt));

    for (i = 0; i < draws; i++) {
        for (j = 0; j < n; j++) {
            x[j] = probs[j] > 0.0 ? (float) log(probs[j]) : -INFINITY;
        }
        assert_int_equal(kvs_sample(&s, x, &t, &err), KVS_OK);
        assert_true(t >= 0 && t < n);
        cnt[t]++;
    }

    set = 0;
    for (j = 0; j < n; j++) {
        if (cnt[j] > 0) {
            set |= 1u << j;
        }
        if (freq != NULL) {
            freq[j] = (double) cnt[j] / draws;
        }
    }

    kvs_sampler_free(&s);

    return set;
}


static void
test_truncation_sets(void **state)
{
    /* shuffled, so that sorting matters: sorted 0.5 0.3 0.15 0.05 */
    static const double  pr[4] = { 0.15, 0.5, 0.05, 0.3 };
    kvs_sample_params_t  p;
    double               f[16];

    /* top-p 0.75: cumulative 0.5, 0.8 > 0.75: {1, 3} */
    p = params(1.0f, 0.75f, 1);
    assert_int_equal(draw_set(pr, 4, &p, 20000, f), 0x2 | 0x8);
    assert_true(fabs(f[1] - 0.5 / 0.8) < 0.02);

    /* top-p 0.85: 0.5, 0.8, 0.95 > 0.85: {1, 3, 0} */
    p = params(1.0f, 0.85f, 2);
    assert_int_equal(draw_set(pr, 4, &p, 20000, f), 0x2 | 0x8 | 0x1);
    assert_true(fabs(f[0] - 0.15 / 0.95) < 0.02);

    /* top-p 0.4: the first alone exceeds it */
    p = params(1.0f, 0.4f, 3);
    assert_int_equal(draw_set(pr, 4, &p, 2000, NULL), 0x2);

    /* min-p 0.25: >= 0.125: {1, 3, 0}; min-p 0.5: >= 0.25: {1, 3} */
    p = params(1.0f, 1.0f, 4);
    p.min_p = 0.25f;
    assert_int_equal(draw_set(pr, 4, &p, 20000, f), 0x2 | 0x8 | 0x1);
    assert_true(fabs(f[3] - 0.3 / 0.95) < 0.02);
    p.min_p = 0.5f;
    assert_int_equal(draw_set(pr, 4, &p, 20000, NULL), 0x2 | 0x8);
    p.min_p = 1.0f;
    assert_int_equal(draw_set(pr, 4, &p, 2000, NULL), 0x2);

    /* top-p 0.9 keeps {1, 3, 0}, then min-p 0.5 drops 0 */
    p = params(1.0f, 0.9f, 5);
    p.min_p = 0.5f;
    assert_int_equal(draw_set(pr, 4, &p, 20000, NULL), 0x2 | 0x8);

    /* top-k 2 and 3 */
    p = params(1.0f, 1.0f, 6);
    p.top_k = 2;
    assert_int_equal(draw_set(pr, 4, &p, 20000, f), 0x2 | 0x8);
    assert_true(fabs(f[3] - 0.3 / 0.8) < 0.02);
    p.top_k = 3;
    assert_int_equal(draw_set(pr, 4, &p, 20000, NULL), 0x2 | 0x8 | 0x1);
    p.top_k = 4;
    assert_int_equal(draw_set(pr, 4, &p, 20000, NULL), 0xf);

    /* top-k 3 on ties at the cut keeps the lower ids: {0, 1, 2} */
    {
        static const double  eq[5] = { 0.2, 0.2, 0.2, 0.2, 0.2 };
        static const double  q4[4] = { 0.25, 0.25, 0.25, 0.25 };

        /* exact quarters: 0.5 is reached, not exceeded, at the second */
        p = params(1.0f, 0.5f, 9);
        assert_int_equal(draw_set(q4, 4, &p, 5000, NULL), 0x7);

        p = params(1.0f, 1.0f, 7);
        p.top_k = 3;
        assert_int_equal(draw_set(eq, 5, &p, 5000, NULL), 0x7);
    }

    /* masked (-inf) tokens are never drawn, on every path */
    {
        static const double  mk[5] = { 0.0, 0.5, 0.0, 0.5, 0.0 };

        p = params(1.0f, 1.0f, 8);
        assert_int_equal(draw_set(mk, 5, &p, 5000, NULL), 0xa);
        p.top_p = 0.99f;
        assert_int_equal(draw_set(mk, 5, &p, 5000, NULL), 0xa);
        p.top_p = 1.0f;
        p.top_k = 4;
        assert_int_equal(draw_set(mk, 5, &p, 5000, NULL), 0xa);
    }
}


/* frequencies within 0.01 of the softmax over 100,000 draws (six
 * standard deviations) on the plain, the sorted and the collected path */
static void
test_frequencies(void **state)
{
    static const double  pr[4] = { 0.1, 0.2, 0.3, 0.4 };
    kvs_sample_params_t  p;
    double               f[16], w[4], z;
    int                  j, k;

    for (k = 0; k < 4; k++) {
        p = params(1.0f, 1.0f, 1000 + k);
        if (k == 1) {
            p.top_p = 0.99f;               /* 0.4 .. 1.0: keeps all four */
        }
        if (k == 2) {
            p.top_k = 4;
            p.min_p = 0.2f;                /* 0.08: keeps all four */
        }
        if (k == 3) {
            p.temperature = 2.0f;          /* p^(1/2), renormalised */
        }

        assert_int_equal(draw_set(pr, 4, &p, 100000, f), 0xf);

        z = 0.0;
        for (j = 0; j < 4; j++) {
            w[j] = k == 3 ? sqrt(pr[j]) : pr[j];
            z += w[j];
        }

        for (j = 0; j < 4; j++) {
            if (fabs(f[j] - w[j] / z) > 0.01) {
                fail_msg("case %d token %d: frequency %.4f, probability "
                         "%.4f", k, j, f[j], w[j] / z);
            }
        }
    }
}


/* ---- penalties and bias -------------------------------------------- */

static void
test_penalties_bias(void **state)
{
    static const kvs_logit_bias_t  bias[3] = {
        { 3, 2.0f }, { 5, -1.5f }, { 3, 0.5f }
    };
    kvs_sample_params_t  p;
    kvs_sampler_t        s;
    kvs_err_t            err;
    float                x[8], want[8];
    int32_t              t;
    int                  i;

    p = params(0.0f, 1.0f, 1);
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.logit_bias = bias;
    p.n_logit_bias = 3;
    assert_int_equal(kvs_sampler_init(&s, &p, 8, &err), KVS_OK);

    assert_int_equal(kvs_sampler_accept(&s, 1, &err), KVS_OK);
    assert_int_equal(kvs_sampler_accept(&s, 1, &err), KVS_OK);
    assert_int_equal(kvs_sampler_accept(&s, 2, &err), KVS_OK);
    assert_int_equal(kvs_sampler_accept(&s, 1, &err), KVS_OK);
    assert_int_equal(kvs_sampler_accept(&s, 5, &err), KVS_OK);
    assert_int_equal(kvs_sampler_accept(&s, 8, &err), KVS_EINVAL);
    assert_int_equal(kvs_sampler_accept(&s, -1, &err), KVS_EINVAL);

    /* logit - presence * (count > 0) - frequency * count + biases */
    for (i = 0; i < 8; i++) {
        x[i] = 0.0f;
        want[i] = 0.0f;
    }
    want[1] = -0.5f - 0.25f * 3;
    want[2] = -0.5f - 0.25f;
    want[3] = 2.0f + 0.5f;
    want[5] = -1.5f - 0.5f - 0.25f;

    assert_int_equal(kvs_sample(&s, x, &t, &err), KVS_OK);
    assert_int_equal(t, 3);

    for (i = 0; i < 8; i++) {
        if (x[i] != want[i]) {
            fail_msg("logit %d: %g, want %g", i, (double) x[i],
                     (double) want[i]);
        }
    }

    kvs_sampler_free(&s);

    /* no penalty: accept keeps nothing */
    p = params(0.0f, 1.0f, 1);
    assert_int_equal(kvs_sampler_init(&s, &p, 8, &err), KVS_OK);
    assert_int_equal(kvs_sampler_accept(&s, 1, &err), KVS_OK);
    assert_int_equal(s.count_cap, 0);
    kvs_sampler_free(&s);
}


/* kvs_sample_sparse() over a mask's candidates against kvs_sample() on
 * the row with every other id at -inf: the same token at every step,
 * for every combination of temperature, top-k, top-p, min-p, bias and
 * penalties, over masks from 1 candidate to most of the vocabulary
 * (ties common), and the same coins drawn (the samplers stay in step) */
static void
test_sparse(void **state)
{
    enum { N = 700, STEPS = 300 };
    static const kvs_logit_bias_t  bias[2] = { { 5, 3.0f }, { 600, -2.0f } };
    static const float   temps[] = { 0.0f, 0.7f, 1.0f, 1.6f };
    static const float   tops[] = { 1.0f, 0.9f, 0.3f };
    static const int     topk[] = { 0, 1, 5, 40 };
    static const float   minp[] = { 0.0f, 0.05f };
    kvs_sample_params_t  p;
    kvs_sampler_t        a, b;
    kvs_err_t            err;
    float                row[N], dense[N], sparse[N];
    int32_t              ids[N], ta, tb;
    uint64_t             st;
    uint32_t             ti, pi, ki, mi, step, i, m, keep, diff;

    st = 99;
    diff = 0;

    for (ti = 0; ti < 4; ti++)
    for (pi = 0; pi < 3; pi++)
    for (ki = 0; ki < 4; ki++)
    for (mi = 0; mi < 2; mi++) {
        p = params(temps[ti], tops[pi], 1000 + ti * 100 + pi * 10 + ki);
        p.top_k = topk[ki];
        p.min_p = minp[mi];
        if (ki == 2) {
            p.logit_bias = bias;
            p.n_logit_bias = 2;
            p.presence_penalty = 0.3f;
            p.frequency_penalty = 0.2f;
        }
        assert_int_equal(kvs_sampler_init(&a, &p, N, &err), KVS_OK);
        assert_int_equal(kvs_sampler_init(&b, &p, N, &err), KVS_OK);

        for (step = 0; step < STEPS; step++) {
            fill(row, N, &st, 6.0f, step % 2 ? 0.5f : 0.0f);

            /* 1 in 2^k of the ids kept, k = 0 .. 9; one at least */
            keep = 1u << (lcg(&st) % 10);
            m = 0;
            for (i = 0; i < N; i++) {
                if (lcg(&st) % keep == 0) {
                    ids[m++] = (int32_t) i;
                }
            }
            if (m == 0) {
                ids[m++] = (int32_t) (lcg(&st) % N);
            }

            for (i = 0; i < N; i++) {
                dense[i] = -INFINITY;
                sparse[i] = row[i];
            }
            for (i = 0; i < m; i++) {
                dense[ids[i]] = row[ids[i]];
            }

            assert_int_equal(kvs_sample(&a, dense, &ta, &err), KVS_OK);
            assert_int_equal(kvs_sample_sparse(&b, sparse, ids, m, &tb,
                                               &err), KVS_OK);

            /* the dense draw past its rounded total is the last id */
            if (ta == N - 1 && dense[N - 1] == 0.0f) {
                ta = ids[m - 1];
            }
            if (ta != tb) {
                diff++;
                fail_msg("T %g top_p %g top_k %d min_p %g step %u (%u "
                         "candidates): dense %d, sparse %d",
                         (double) p.temperature, (double) p.top_p,
                         p.top_k, (double) p.min_p, step, m, ta, tb);
            }

            assert_int_equal(kvs_sampler_accept(&a, ta, &err), KVS_OK);
            assert_int_equal(kvs_sampler_accept(&b, tb, &err), KVS_OK);
        }

        /* in step: the next coin is the same */
        assert_true(kvs_sampler_coin(&a) == kvs_sampler_coin(&b));

        kvs_sampler_free(&a);
        kvs_sampler_free(&b);
    }

    assert_int_equal(diff, 0);

    /* a NaN among the candidates is the error kvs_sample() gives; one
     * outside them is not looked at */
    p = params(1.0f, 1.0f, 3);
    assert_int_equal(kvs_sampler_init(&a, &p, N, &err), KVS_OK);
    fill(row, N, &st, 1.0f, 0.0f);
    row[10] = NAN;
    ids[0] = 3;
    ids[1] = 10;
    assert_int_equal(kvs_sample_sparse(&a, row, ids, 2, &tb, &err),
                     KVS_EINVAL);
    row[10] = NAN;
    ids[1] = 11;
    assert_int_equal(kvs_sample_sparse(&a, row, ids, 2, &tb, &err), KVS_OK);
    assert_true(tb == 3 || tb == 11);
    kvs_sampler_free(&a);
}


/* many distinct tokens (the counts table grows) against dense counts */
static void
test_penalties_many(void **state)
{
    enum { N = 5000 };
    kvs_sample_params_t  p;
    kvs_sampler_t        s;
    kvs_err_t            err;
    static float         x[N];
    static uint32_t      cnt[N];
    uint64_t             data;
    int32_t              t;
    int                  i;
    float                w;

    p = params(0.0f, 1.0f, 1);
    p.presence_penalty = -1.0f;            /* negative: encourages */
    p.frequency_penalty = 0.125f;
    assert_int_equal(kvs_sampler_init(&s, &p, N, &err), KVS_OK);

    memset(cnt, 0, sizeof(cnt));
    data = 77;
    for (i = 0; i < 6000; i++) {
        t = (int32_t) (lcg(&data) % (i < 3000 ? N : 64));
        cnt[t]++;
        assert_int_equal(kvs_sampler_accept(&s, t, &err), KVS_OK);
    }

    for (i = 0; i < N; i++) {
        x[i] = (float) (i % 13);
    }

    assert_int_equal(kvs_sample(&s, x, &t, &err), KVS_OK);

    for (i = 0; i < N; i++) {
        w = (float) (i % 13);
        if (cnt[i] > 0) {
            w -= -1.0f + 0.125f * (float) cnt[i];
        }
        if (x[i] != w) {
            fail_msg("logit %d (count %u): %g, want %g", i, cnt[i],
                     (double) x[i], (double) w);
        }
    }

    kvs_sampler_free(&s);
}


/* ---- reproducibility ------------------------------------------------ */

static void
sequence(uint64_t seed, int32_t *out, int n)
{
    kvs_sample_params_t  p;
    kvs_sampler_t        s;
    kvs_err_t            err;
    float                x[100];
    uint64_t             data;
    int                  i;

    p = params(1.0f, 0.95f, seed);
    p.top_k = 50;
    p.min_p = 0.01f;
    p.presence_penalty = 0.3f;
    assert_int_equal(kvs_sampler_init(&s, &p, 100, &err), KVS_OK);
    data = 1;

    for (i = 0; i < n; i++) {
        fill(x, 100, &data, 2.0f, 0.0f);
        assert_int_equal(kvs_sample(&s, x, &out[i], &err), KVS_OK);
        assert_int_equal(kvs_sampler_accept(&s, out[i], &err), KVS_OK);
    }

    kvs_sampler_free(&s);
}


static void
test_reproducible(void **state)
{
    int32_t  a[1000], b[1000], c[1000], z[1000];
    int      i, diff, zdiff;

    sequence(133742, a, 1000);
    sequence(133742, b, 1000);
    sequence(133743, c, 1000);
    sequence(0, z, 1000);

    diff = 0;
    zdiff = 0;
    for (i = 0; i < 1000; i++) {
        assert_int_equal(a[i], b[i]);
        diff += a[i] != c[i];
        zdiff += z[i] != z[0];
    }

    assert_true(diff > 500);
    assert_true(zdiff > 500);              /* seed 0 does not stick */
}


/* ---- parameter checks ----------------------------------------------- */

static void
test_params_check(void **state)
{
    static const kvs_logit_bias_t  bad_id[2] = {
        { 5, 1.0f }, { 99999, 1.0f }
    };
    static const kvs_logit_bias_t  bad_bias[1] = { { 7, -100.5f } };
    static const kvs_logit_bias_t  ok_bias[2] = {
        { 0, -100.0f }, { 31999, 100.0f }
    };
    kvs_sample_params_t  p;
    kvs_sampler_t        s;
    kvs_err_t            err;
    int                  i;
    struct {
        int          field;
        float        value;
        const char  *msg;
    } cases[] = {
        { 0, 2.5f, "temperature: must be between 0 and 2" },
        { 0, -0.1f, "temperature: must be between 0 and 2" },
        { 0, NAN, "temperature: must be between 0 and 2" },
        { 1, 1.01f, "top_p: must be between 0 and 1" },
        { 1, -1.0f, "top_p: must be between 0 and 1" },
        { 2, 1.5f, "min_p: must be between 0 and 1" },
        { 3, 2.5f, "presence_penalty: must be between -2 and 2" },
        { 4, -3.0f, "frequency_penalty: must be between -2 and 2" },
        { 5, -1.0f, "top_k: must be 0 (off) or positive" },
        { 6, 21.0f, "top_logprobs: must be between 0 and 20" },
        { 7, 3.0f, "top_logprobs: requires logprobs" },
        { 8, 2.0f, "logprobs: must be 0 or 1" },
    };

    for (i = 0; i < (int) (sizeof(cases) / sizeof(cases[0])); i++) {
        p = params(1.0f, 1.0f, 1);
        p.logprobs = 1;

        switch (cases[i].field) {
        case 0: p.temperature = cases[i].value; break;
        case 1: p.top_p = cases[i].value; break;
        case 2: p.min_p = cases[i].value; break;
        case 3: p.presence_penalty = cases[i].value; break;
        case 4: p.frequency_penalty = cases[i].value; break;
        case 5: p.top_k = (int32_t) cases[i].value; break;
        case 6: p.top_logprobs = (int32_t) cases[i].value; break;
        case 7:
            p.logprobs = 0;
            p.top_logprobs = (int32_t) cases[i].value;
            break;
        default: p.logprobs = (int) cases[i].value; break;
        }

        assert_int_equal(kvs_sample_params_check(&p, 32000, &err),
                         KVS_EINVAL);
        if (strncmp(err.msg, cases[i].msg, strlen(cases[i].msg)) != 0) {
            fail_msg("case %d: \"%s\", want \"%s...\"", i, err.msg,
                     cases[i].msg);
        }

        /* init refuses the same way and owns nothing */
        assert_int_equal(kvs_sampler_init(&s, &p, 32000, &err), KVS_EINVAL);
        assert_null(s.cand);
        assert_null(s.bias);
    }

    p = params(1.0f, 1.0f, 1);
    p.logit_bias = bad_id;
    p.n_logit_bias = 2;
    assert_int_equal(kvs_sample_params_check(&p, 32000, &err), KVS_EINVAL);
    assert_string_equal(err.msg, "logit_bias: token id 99999 is out of "
                        "range (vocabulary of 32000)");

    p.logit_bias = bad_bias;
    p.n_logit_bias = 1;
    assert_int_equal(kvs_sample_params_check(&p, 32000, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "logit_bias: bias for token id 7 must "
                           "be between -100 and 100"));

    p.logit_bias = NULL;
    assert_int_equal(kvs_sample_params_check(&p, 32000, &err), KVS_EINVAL);

    /* the limits themselves are fine */
    p.logit_bias = ok_bias;
    p.n_logit_bias = 2;
    p.temperature = 2.0f;
    p.top_p = 0.0f;
    p.min_p = 1.0f;
    p.presence_penalty = -2.0f;
    p.frequency_penalty = 2.0f;
    p.logprobs = 1;
    p.top_logprobs = 20;
    assert_int_equal(kvs_sample_params_check(&p, 32000, &err), KVS_OK);
    assert_int_equal(kvs_sample_params_check(&p, 0, &err), KVS_EINVAL);

    /* bad logits */
    p = params(1.0f, 1.0f, 1);
    assert_int_equal(kvs_sampler_init(&s, &p, 3, &err), KVS_OK);
    {
        float    x[3] = { 0.0f, NAN, 1.0f };
        float    y[3] = { 0.0f, 1.0f, INFINITY };
        float    z[3] = { -INFINITY, -INFINITY, -INFINITY };
        int32_t  t;

        assert_int_equal(kvs_sample(&s, x, &t, &err), KVS_EINVAL);
        assert_non_null(strstr(err.msg, "token 1 is NaN"));
        assert_int_equal(kvs_sample(&s, y, &t, &err), KVS_EINVAL);
        assert_int_equal(kvs_sample(&s, z, &t, &err), KVS_EINVAL);
    }
    kvs_sampler_free(&s);
}


/* ---- logprobs -------------------------------------------------------- */

static void
test_logprobs(void **state)
{
    enum { N = 100 };
    static const kvs_logit_bias_t  bias[1] = { { 17, 3.0f } };
    kvs_sample_logprobs_t  lp, lp_t;
    kvs_sample_params_t    p;
    kvs_sampler_t          s;
    kvs_err_t              err;
    float                  x[N], y[N];
    double                 sum, max, lse;
    uint64_t               data;
    int32_t                t, j, k, better;
    int                    i, step;

    data = 9;
    fill(x, N, &data, 5.0f, 0.5f);             /* with ties */
    x[40] = -INFINITY;

    sum = 0.0;
    for (t = 0; t < N; t++) {
        assert_int_equal(kvs_sample_logprobs(x, N, t, 20, &lp, &err),
                         KVS_OK);
        assert_int_equal(lp.token, t);
        sum += exp((double) lp.logprob);

        /* the top list: sorted, ties by lower id, each one's rank right */
        assert_int_equal(lp.n_top, 20);
        for (j = 0; j < lp.n_top; j++) {
            k = lp.top_token[j];
            better = 0;
            for (i = 0; i < N; i++) {
                better += x[i] > x[k] || (x[i] == x[k] && i < k);
            }
            assert_int_equal(better, j);
            if (j > 0) {
                assert_true(lp.top_logprob[j] <= lp.top_logprob[j - 1]);
            }
            assert_int_equal(kvs_sample_logprobs(x, N, k, 0, &lp_t, &err),
                             KVS_OK);
            assert_true(lp_t.logprob == lp.top_logprob[j]);
            assert_int_equal(lp_t.n_top, 0);
        }
    }
    assert_true(fabs(sum - 1.0) < 1e-5);

    assert_int_equal(kvs_sample_logprobs(x, N, 40, 3, &lp, &err), KVS_OK);
    assert_true(isinf(lp.logprob) && lp.logprob < 0);
    assert_int_equal(kvs_sample_logprobs(x, N, N, 3, &lp, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_sample_logprobs(x, N, 0, 21, &lp, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_sample_logprobs(x, 3, 0, 5, &lp, &err), KVS_OK);
    assert_int_equal(lp.n_top, 3);

    /* through the sampler: after bias, before temperature */
    p = params(0.5f, 0.9f, 5);
    p.logit_bias = bias;
    p.n_logit_bias = 1;
    p.logprobs = 1;
    p.top_logprobs = 5;
    assert_int_equal(kvs_sampler_init(&s, &p, N, &err), KVS_OK);

    for (step = 0; step < 50; step++) {
        fill(x, N, &data, 3.0f, 0.0f);
        memcpy(y, x, sizeof(x));
        assert_int_equal(kvs_sample(&s, y, &t, &err), KVS_OK);

        x[17] += 3.0f;
        max = -INFINITY;
        for (i = 0; i < N; i++) {
            max = fmax(max, x[i]);
        }
        lse = 0.0;
        for (i = 0; i < N; i++) {
            lse += exp((double) x[i] - max);
        }
        lse = max + log(lse);

        assert_int_equal(s.lp.token, t);
        assert_true(fabs(s.lp.logprob - ((double) x[t] - lse)) < 1e-5);
        assert_int_equal(s.lp.n_top, 5);
        assert_int_equal(s.lp.top_token[0], argmax(x, N));
        assert_true(fabs(s.lp.top_logprob[0]
                         - ((double) x[argmax(x, N)] - lse)) < 1e-5);
    }

    kvs_sampler_free(&s);

    /* greedy reports too */
    p = params(0.0f, 1.0f, 5);
    p.logprobs = 1;
    assert_int_equal(kvs_sampler_init(&s, &p, N, &err), KVS_OK);
    fill(x, N, &data, 3.0f, 0.0f);
    memcpy(y, x, sizeof(x));
    assert_int_equal(kvs_sample(&s, y, &t, &err), KVS_OK);
    assert_int_equal(kvs_sample_logprobs(x, N, t, 0, &lp, &err), KVS_OK);
    assert_true(s.lp.logprob == lp.logprob);
    assert_int_equal(s.lp.n_top, 0);
    kvs_sampler_free(&s);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_topk1_topp0_greedy),
        cmocka_unit_test(test_truncation_sets),
        cmocka_unit_test(test_frequencies),
        cmocka_unit_test(test_penalties_bias),
        cmocka_unit_test(test_penalties_many),
        cmocka_unit_test(test_sparse),
        cmocka_unit_test(test_reproducible),
        cmocka_unit_test(test_params_check),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_run_c_topp),
        cmocka_unit_test(test_run_c_multinomial),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
