/*
 * kvs_sample: parameter checks, the sampler's state (RNG, penalty
 * counts, scratch) and the sampling pipeline described in kvs_sample.h.
 *
 * Invariants: a sampler that kvs_sampler_init() returned has params that
 * passed kvs_sample_params_check(), a non-zero RNG state, cand != NULL
 * iff temperature > 0, and a counts table that is empty (count_cap 0) or
 * at most half full, so every probe finds an empty slot.
 *
 * Reproducing llama2.c run.c (definitions from
 * ../shared/fixtures/models/README.md, section 3): the RNG is xorshift64*
 * with state = seed; random_u32 = (state * 0x2545F4914F6CDD1D) >> 32 after
 * the 12/25/27 shifts; random_f32 = (u32 >> 8) / 16777216.0f.  The float
 * operations below (division by the temperature, run.c's softmax, the
 * nucleus pre-filter, the cumulative sums and the CDF walk) are kept in
 * run.c's order and precision on purpose: do not turn the divisions into
 * multiplications by a reciprocal or the sums into double, or the tokens
 * stop matching.
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_sample.h"

/* replaces seed 0: xorshift's zero state is a fixed point */
#define KVS_SAMPLE_SEED0  0x9E3779B97F4A7C15ULL


static uint32_t
kvs_sample_u32(uint64_t *state)
{
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;

    return (uint32_t) ((*state * 0x2545F4914F6CDD1DULL) >> 32);
}


/* in [0, 1) with 24 random bits */
static float
kvs_sample_f32(uint64_t *state)
{
    return (kvs_sample_u32(state) >> 8) / 16777216.0f;
}


int
kvs_sample_params_check(const kvs_sample_params_t *p, uint32_t n_vocab,
    kvs_err_t *err)
{
    uint32_t                 i;
    const kvs_logit_bias_t  *b;

    if (n_vocab == 0 || n_vocab > INT32_MAX) {
        return kvs_err_set(err, KVS_EINVAL, "n_vocab: must be between 1 "
                           "and %d (got %u)", INT32_MAX, n_vocab);
    }

    /* written as !(in range) so that NaN fails too */

    if (!(p->temperature >= 0.0f && p->temperature <= 2.0f)) {
        return kvs_err_set(err, KVS_EINVAL, "temperature: must be between "
                           "0 and 2 (got %g)", (double) p->temperature);
    }

    if (p->top_k < 0) {
        return kvs_err_set(err, KVS_EINVAL, "top_k: must be 0 (off) or "
                           "positive (got %d)", (int) p->top_k);
    }

    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f)) {
        return kvs_err_set(err, KVS_EINVAL, "top_p: must be between 0 and "
                           "1 (got %g)", (double) p->top_p);
    }

    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) {
        return kvs_err_set(err, KVS_EINVAL, "min_p: must be between 0 and "
                           "1 (got %g)", (double) p->min_p);
    }

    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f)) {
        return kvs_err_set(err, KVS_EINVAL, "presence_penalty: must be "
                           "between -2 and 2 (got %g)",
                           (double) p->presence_penalty);
    }

    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f)) {
        return kvs_err_set(err, KVS_EINVAL, "frequency_penalty: must be "
                           "between -2 and 2 (got %g)",
                           (double) p->frequency_penalty);
    }

    if (p->n_logit_bias > 0 && p->logit_bias == NULL) {
        return kvs_err_set(err, KVS_EINVAL, "logit_bias: %u entries "
                           "announced but no array", p->n_logit_bias);
    }

    for (i = 0; i < p->n_logit_bias; i++) {
        b = &p->logit_bias[i];

        if (b->token < 0 || (uint32_t) b->token >= n_vocab) {
            return kvs_err_set(err, KVS_EINVAL, "logit_bias: token id %d "
                               "is out of range (vocabulary of %u)",
                               (int) b->token, n_vocab);
        }

        if (!(b->bias >= -KVS_SAMPLE_MAX_BIAS
              && b->bias <= KVS_SAMPLE_MAX_BIAS))
        {
            return kvs_err_set(err, KVS_EINVAL, "logit_bias: bias for "
                               "token id %d must be between -100 and 100 "
                               "(got %g)", (int) b->token, (double) b->bias);
        }
    }

    if (p->logprobs != 0 && p->logprobs != 1) {
        return kvs_err_set(err, KVS_EINVAL, "logprobs: must be 0 or 1 "
                           "(got %d)", p->logprobs);
    }

    if (p->top_logprobs < 0
        || p->top_logprobs > KVS_SAMPLE_MAX_TOP_LOGPROBS)
    {
        return kvs_err_set(err, KVS_EINVAL, "top_logprobs: must be between "
                           "0 and %d (got %d)", KVS_SAMPLE_MAX_TOP_LOGPROBS,
                           (int) p->top_logprobs);
    }

    if (p->top_logprobs > 0 && !p->logprobs) {
        return kvs_err_set(err, KVS_EINVAL, "top_logprobs: requires "
                           "logprobs to be set");
    }

    return KVS_OK;
}


int
kvs_sampler_init(kvs_sampler_t *s, const kvs_sample_params_t *p,
    uint32_t n_vocab, kvs_err_t *err)
{
    int  rc;

    memset(s, 0, sizeof(*s));

    rc = kvs_sample_params_check(p, n_vocab, err);
    if (rc != KVS_OK) {
        return rc;
    }

    s->params = *p;
    s->params.logit_bias = NULL;
    s->n_vocab = n_vocab;
    s->rng = p->seed != 0 ? p->seed : KVS_SAMPLE_SEED0;

    if (p->n_logit_bias > 0) {
        s->bias = malloc(p->n_logit_bias * sizeof(kvs_logit_bias_t));
        if (s->bias == NULL) {
            goto nomem;
        }

        memcpy(s->bias, p->logit_bias,
               p->n_logit_bias * sizeof(kvs_logit_bias_t));
        s->params.logit_bias = s->bias;
    }

    if (p->temperature > 0.0f) {
        s->cand = malloc((size_t) n_vocab * sizeof(kvs_sample_cand_t));
        if (s->cand == NULL) {
            goto nomem;
        }

        if (p->logprobs) {
            s->saved = malloc((size_t) n_vocab * sizeof(float));
            if (s->saved == NULL) {
                goto nomem;
            }
        }
    }

    return KVS_OK;

nomem:

    kvs_sampler_free(s);

    return kvs_err_set(err, KVS_ENOMEM, "sampler: out of memory for a "
                       "vocabulary of %u", n_vocab);
}


void
kvs_sampler_free(kvs_sampler_t *s)
{
    free(s->bias);
    free(s->count_id);
    free(s->count_n);
    free(s->cand);
    free(s->saved);
    memset(s, 0, sizeof(*s));
}


/* cap is a power of two; consecutive ids land in distinct slots */
static uint32_t
kvs_sample_slot(const int32_t *ids, uint32_t cap, int32_t token)
{
    uint32_t  i;

    i = ((uint32_t) token * 2654435761u) & (cap - 1);

    while (ids[i] != -1 && ids[i] != token) {
        i = (i + 1) & (cap - 1);
    }

    return i;
}


static int
kvs_sample_counts_grow(kvs_sampler_t *s, kvs_err_t *err)
{
    uint32_t   cap, i, j;
    int32_t   *ids;
    uint32_t  *n;

    cap = s->count_cap == 0 ? 16 : s->count_cap * 2;
    if (cap < s->count_cap) {
        return kvs_err_set(err, KVS_ENOMEM, "sampler: penalty counts "
                           "cannot grow past %u slots", s->count_cap);
    }

    ids = malloc((size_t) cap * sizeof(int32_t));
    n = malloc((size_t) cap * sizeof(uint32_t));
    if (ids == NULL || n == NULL) {
        free(ids);
        free(n);
        return kvs_err_set(err, KVS_ENOMEM, "sampler: out of memory for "
                           "%u penalty counts", cap);
    }

    memset(ids, 0xff, (size_t) cap * sizeof(int32_t));    /* all -1 */

    for (i = 0; i < s->count_cap; i++) {
        if (s->count_id[i] != -1) {
            j = kvs_sample_slot(ids, cap, s->count_id[i]);
            ids[j] = s->count_id[i];
            n[j] = s->count_n[i];
        }
    }

    free(s->count_id);
    free(s->count_n);
    s->count_id = ids;
    s->count_n = n;
    s->count_cap = cap;

    return KVS_OK;
}


int
kvs_sampler_accept(kvs_sampler_t *s, int32_t token, kvs_err_t *err)
{
    int       rc;
    uint32_t  i;

    if (token < 0 || (uint32_t) token >= s->n_vocab) {
        return kvs_err_set(err, KVS_EINVAL, "sampler: token id %d is out "
                           "of range (vocabulary of %u)", (int) token,
                           s->n_vocab);
    }

    if (s->params.presence_penalty == 0.0f
        && s->params.frequency_penalty == 0.0f)
    {
        return KVS_OK;
    }

    /* keep the table at most half full (counting the token to come) */
    if ((uint64_t) (s->count_used + 1) * 2 > s->count_cap) {
        rc = kvs_sample_counts_grow(s, err);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    i = kvs_sample_slot(s->count_id, s->count_cap, token);

    if (s->count_id[i] == -1) {
        s->count_id[i] = token;
        s->count_n[i] = 1;
        s->count_used++;

    } else if (s->count_n[i] != UINT32_MAX) {
        s->count_n[i]++;
    }

    return KVS_OK;
}


/* NaN and +inf are refused; at least one logit must be finite */
static int
kvs_sample_check_logits(const float *x, uint32_t n, kvs_err_t *err)
{
    uint32_t  i;
    int       finite;

    finite = 0;

    for (i = 0; i < n; i++) {
        if (isnan(x[i])) {
            return kvs_err_set(err, KVS_EINVAL, "logits: token %u is NaN",
                               i);
        }

        if (x[i] == INFINITY) {
            return kvs_err_set(err, KVS_EINVAL, "logits: token %u is "
                               "+inf", i);
        }

        finite |= x[i] != -INFINITY;
    }

    if (!finite) {
        return kvs_err_set(err, KVS_EINVAL, "logits: all %u are -inf", n);
    }

    return KVS_OK;
}


/* the sort and selection order: larger p first, then lower id */
static int
kvs_sample_before(const kvs_sample_cand_t *a, const kvs_sample_cand_t *b)
{
    return a->p > b->p || (a->p == b->p && a->id < b->id);
}


static int
kvs_sample_cmp(const void *a, const void *b)
{
    if (kvs_sample_before(a, b)) {
        return -1;
    }

    return kvs_sample_before(b, a) ? 1 : 0;
}


static void
kvs_sample_swap(kvs_sample_cand_t *a, kvs_sample_cand_t *b)
{
    kvs_sample_cand_t  t;

    t = *a;
    *a = *b;
    *b = t;
}


/*
 * Reorders c[0..n) so that c[k] is the element the full sort would put
 * there, with only elements before it in c[0..k) (quickselect; the order
 * is total because ids differ, so the kept set is deterministic).
 */
static void
kvs_sample_select(kvs_sample_cand_t *c, int64_t n, int64_t k)
{
    int64_t            lo, hi, i, j, mid;
    kvs_sample_cand_t  pivot;

    lo = 0;
    hi = n - 1;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;

        /* median of three against sorted and reversed inputs */
        if (kvs_sample_before(&c[mid], &c[lo])) {
            kvs_sample_swap(&c[mid], &c[lo]);
        }
        if (kvs_sample_before(&c[hi], &c[lo])) {
            kvs_sample_swap(&c[hi], &c[lo]);
        }
        if (kvs_sample_before(&c[hi], &c[mid])) {
            kvs_sample_swap(&c[hi], &c[mid]);
        }

        pivot = c[mid];
        i = lo;
        j = hi;

        while (i <= j) {
            while (kvs_sample_before(&c[i], &pivot)) {
                i++;
            }
            while (kvs_sample_before(&pivot, &c[j])) {
                j--;
            }
            if (i <= j) {
                kvs_sample_swap(&c[i], &c[j]);
                i++;
                j--;
            }
        }

        if (k <= j) {
            hi = j;

        } else if (k >= i) {
            lo = i;

        } else {
            return;
        }
    }
}


/* The id of candidate i: ids[i], or i itself for a whole row. */
#define kvs_sample_id(ids, i)  ((ids) != NULL ? (ids)[i] : (int32_t) (i))


/* keeps the k largest of x[m] (ties: lower ids), the rest become -inf */
static void
kvs_sample_top_k(kvs_sampler_t *s, float *x, const int32_t *ids, uint32_t m,
    uint32_t k)
{
    uint32_t           i;
    kvs_sample_cand_t  kth, c;

    for (i = 0; i < m; i++) {
        s->cand[i].id = kvs_sample_id(ids, i);
        s->cand[i].p = x[i];
    }

    kvs_sample_select(s->cand, m, k - 1);
    kth = s->cand[k - 1];

    for (i = 0; i < m; i++) {
        c.id = kvs_sample_id(ids, i);
        c.p = x[i];

        if (c.id != kth.id && !kvs_sample_before(&c, &kth)) {
            x[i] = -INFINITY;
        }
    }
}


/* run.c's softmax, operation for operation; x holds a finite maximum */
static void
kvs_sample_softmax(float *x, uint32_t n)
{
    uint32_t  i;
    float     max, sum;

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


/*
 * run.c's nucleus into s->cand: the candidates with prob >= (1 - p) /
 * (n - 1) (those below can never be needed: together they weigh less
 * than 1 - p), sorted, cut after the cumulative first exceeds p.  n is
 * the vocabulary's size even when prob[m] holds only some of its ids
 * (the others' probabilities are 0, below any cutoff).  Returns how many
 * are kept (>= 1).
 */
static uint32_t
kvs_sample_top_p(kvs_sampler_t *s, const float *prob, const int32_t *ids,
    uint32_t m, float top_p)
{
    uint32_t  i, n, n0, last;
    float     cutoff, cum;

    n = s->n_vocab;
    cutoff = n > 1 ? (1.0f - top_p) / (float) (n - 1) : 0.0f;
    n0 = 0;

    for (i = 0; i < m; i++) {
        if (prob[i] >= cutoff) {
            s->cand[n0].id = kvs_sample_id(ids, i);
            s->cand[n0].p = prob[i];
            n0++;
        }
    }

    if (n0 == 0) {
        /*
         * p * n < 1 can put the cutoff above every probability (run.c
         * would then read before its array); the nucleus is the top one.
         */
        for (i = 0; i < m; i++) {
            if (n0 == 0 || prob[i] > s->cand[0].p) {
                s->cand[0].id = kvs_sample_id(ids, i);
                s->cand[0].p = prob[i];
                n0 = 1;
            }
        }

        return 1;
    }

    qsort(s->cand, n0, sizeof(kvs_sample_cand_t), kvs_sample_cmp);

    cum = 0.0f;
    last = n0 - 1;

    for (i = 0; i < n0; i++) {
        cum += s->cand[i].p;
        if (cum > top_p) {
            last = i;
            break;
        }
    }

    return last + 1;
}


/* candidates with prob > 0 (top-k leaves zeros) and >= min_p * max, in
 * id order; returns how many (>= 1: the maximum passes both tests) */
static uint32_t
kvs_sample_collect(kvs_sampler_t *s, const float *prob, const int32_t *ids,
    uint32_t m, float min_p)
{
    uint32_t  i, k;
    float     max, thr;

    max = prob[0];
    for (i = 1; i < m; i++) {
        if (prob[i] > max) {
            max = prob[i];
        }
    }

    thr = min_p * max;
    k = 0;

    for (i = 0; i < m; i++) {
        if (prob[i] > 0.0f && prob[i] >= thr) {
            s->cand[k].id = kvs_sample_id(ids, i);
            s->cand[k].p = prob[i];
            k++;
        }
    }

    return k;
}


static void
kvs_sample_add_bias_penalties(kvs_sampler_t *s, float *x)
{
    uint32_t                    i, c;
    const kvs_sample_params_t  *p;

    p = &s->params;

    for (i = 0; i < p->n_logit_bias; i++) {
        x[s->bias[i].token] += s->bias[i].bias;
    }

    for (i = 0; i < s->count_cap; i++) {
        if (s->count_id[i] != -1) {
            c = s->count_n[i];
            x[s->count_id[i]] -= p->presence_penalty
                                 + p->frequency_penalty * (float) c;
        }
    }
}


/*
 * Steps 3 to 10 on x[m], the logits (biased and penalised) of the
 * candidates ids[m] in increasing id order, or of the whole vocabulary
 * (ids NULL, m = n_vocab).  Every other id's logit is -inf, so its
 * probability is exactly 0 and leaves every sum, maximum and cut as it
 * would be over the whole row: the token is the one the whole row gives
 * (but for a draw past the rounded total, see kvs_sample_sparse()).
 */
static void
kvs_sample_pick(kvs_sampler_t *s, float *x, const int32_t *ids, uint32_t m,
    int32_t *token)
{
    uint32_t                    i, k, c;
    float                       coin, sum, r, cdf, best;
    const kvs_sample_params_t  *p;

    p = &s->params;

    if (p->temperature == 0.0f) {
        *token = kvs_sample_id(ids, 0);
        best = x[0];

        for (i = 1; i < m; i++) {
            if (x[i] > best) {
                best = x[i];
                *token = kvs_sample_id(ids, i);
            }
        }

        return;
    }

    for (i = 0; i < m; i++) {
        x[i] /= p->temperature;
    }

    k = (uint32_t) p->top_k;
    if (k > 0 && k < s->n_vocab && k < m) {
        kvs_sample_top_k(s, x, ids, m, k);
    }

    kvs_sample_softmax(x, m);

    coin = kvs_sample_f32(&s->rng);

    if ((k == 0 || k >= s->n_vocab) && p->top_p >= 1.0f && p->min_p == 0.0f)
    {
        /* run.c's sample_mult: nothing was cut, so no renormalisation */
        cdf = 0.0f;
        *token = ids != NULL ? ids[m - 1] : (int32_t) m - 1;

        for (i = 0; i < m; i++) {
            cdf += x[i];
            if (coin < cdf) {
                *token = kvs_sample_id(ids, i);
                break;
            }
        }

        return;
    }

    if (p->top_p < 1.0f) {
        c = kvs_sample_top_p(s, x, ids, m, p->top_p);

        if (p->min_p > 0.0f) {
            /* sorted: min-p cuts a tail; the first one always stays */
            for (i = 1; i < c; i++) {
                if (s->cand[i].p < p->min_p * s->cand[0].p) {
                    c = i;
                    break;
                }
            }
        }

    } else {
        c = kvs_sample_collect(s, x, ids, m, p->min_p);
    }

    /* the sum in candidate order: run.c's cumulative_prob, bit for bit */
    sum = 0.0f;
    for (i = 0; i < c; i++) {
        sum += s->cand[i].p;
    }

    r = coin * sum;
    cdf = 0.0f;
    *token = s->cand[c - 1].id;

    for (i = 0; i < c; i++) {
        cdf += s->cand[i].p;
        if (r < cdf) {
            *token = s->cand[i].id;
            break;
        }
    }
}


int
kvs_sample(kvs_sampler_t *s, float *logits, int32_t *token, kvs_err_t *err)
{
    int                         rc;
    uint32_t                    n;
    const kvs_sample_params_t  *p;

    p = &s->params;
    n = s->n_vocab;

    rc = kvs_sample_check_logits(logits, n, err);
    if (rc != KVS_OK) {
        return rc;
    }

    kvs_sample_add_bias_penalties(s, logits);

    if (p->temperature != 0.0f && s->saved != NULL) {
        memcpy(s->saved, logits, (size_t) n * sizeof(float));
    }

    kvs_sample_pick(s, logits, NULL, n, token);

    if (p->logprobs) {
        return kvs_sample_logprobs(s->saved != NULL
                                   && p->temperature != 0.0f
                                   ? s->saved : logits, n,
                                   *token, p->top_logprobs, &s->lp, err);
    }

    return KVS_OK;
}


int
kvs_sample_sparse(kvs_sampler_t *s, float *logits, const int32_t *ids,
    uint32_t m, int32_t *token, kvs_err_t *err)
{
    int       rc;
    uint32_t  i;

    /* logprobs are over the whole row */
    if (s->params.logprobs || m == 0 || m >= s->n_vocab) {
        return kvs_sample(s, logits, token, err);
    }

    kvs_sample_add_bias_penalties(s, logits);

    /* ids ascend, so ids[i] >= i: compacting in place reads ahead */
    for (i = 0; i < m; i++) {
        logits[i] = logits[ids[i]];
    }

    rc = kvs_sample_check_logits(logits, m, err);
    if (rc != KVS_OK) {
        return rc;
    }

    kvs_sample_pick(s, logits, ids, m, token);

    return KVS_OK;
}


int
kvs_sampler_device_ok(const kvs_sampler_t *s)
{
    const kvs_sample_params_t  *p;

    p = &s->params;

    return p->n_logit_bias == 0 && p->presence_penalty == 0.0f
           && p->frequency_penalty == 0.0f && p->min_p == 0.0f
           && !p->logprobs;
}


float
kvs_sampler_coin(kvs_sampler_t *s)
{
    return kvs_sample_f32(&s->rng);
}


int
kvs_sample_logprobs(const float *logits, uint32_t n_vocab, int32_t token,
    int32_t top_n, kvs_sample_logprobs_t *out, kvs_err_t *err)
{
    int                rc;
    int32_t            j, used;
    uint32_t           i;
    double             max, sum, lse;
    kvs_sample_cand_t  top[KVS_SAMPLE_MAX_TOP_LOGPROBS], c;

    if (n_vocab == 0 || token < 0 || (uint32_t) token >= n_vocab) {
        return kvs_err_set(err, KVS_EINVAL, "logprobs: token id %d is out "
                           "of range (vocabulary of %u)", (int) token,
                           n_vocab);
    }

    if (top_n < 0 || top_n > KVS_SAMPLE_MAX_TOP_LOGPROBS) {
        return kvs_err_set(err, KVS_EINVAL, "top_logprobs: must be between "
                           "0 and %d (got %d)", KVS_SAMPLE_MAX_TOP_LOGPROBS,
                           (int) top_n);
    }

    rc = kvs_sample_check_logits(logits, n_vocab, err);
    if (rc != KVS_OK) {
        return rc;
    }

    if ((uint32_t) top_n > n_vocab) {
        top_n = (int32_t) n_vocab;
    }

    /* log-sum-exp in double; top[0..used) kept sorted, best first */
    max = -INFINITY;
    for (i = 0; i < n_vocab; i++) {
        if (logits[i] > max) {
            max = logits[i];
        }
    }

    sum = 0.0;
    used = 0;

    for (i = 0; i < n_vocab; i++) {
        sum += exp((double) logits[i] - max);

        c.id = (int32_t) i;
        c.p = logits[i];

        if (top_n == 0
            || (used == top_n && !kvs_sample_before(&c, &top[used - 1])))
        {
            continue;
        }

        if (used < top_n) {
            used++;
        }

        for (j = used - 1; j > 0 && kvs_sample_before(&c, &top[j - 1]); j--)
        {
            top[j] = top[j - 1];
        }

        top[j] = c;
    }

    lse = max + log(sum);

    out->token = token;
    out->logprob = (float) ((double) logits[token] - lse);
    out->n_top = used;

    for (j = 0; j < used; j++) {
        out->top_token[j] = top[j].id;
        out->top_logprob[j] = (float) ((double) top[j].p - lse);
    }

    return KVS_OK;
}
