/*
 * kvs_sample: per-request token sampling from one step's logits.
 *
 * kvs_sample_params_t is what a request asks for (OpenAI's sampling
 * fields); kvs_sampler_t is the state one sequence carries across steps:
 * a copy of the params, the RNG, the counts of the tokens generated so
 * far (for the penalties) and scratch for sorting candidates.
 *
 * Pipeline of kvs_sample(), in this order (the order changes results):
 *   1. logit bias: logit[id] += bias for every (id, bias) entry;
 *   2. penalties: logit[t] -= presence * (count[t] > 0)
 *                             + frequency * count[t]
 *      over the tokens accepted so far in this sequence;
 *      (optional: the logprobs record is taken here, see below)
 *   3. temperature == 0: greedy, argmax, lowest id on ties; no coin drawn;
 *   4. otherwise logit /= temperature (a float division, as run.c does);
 *   5. top-k: all but the k largest logits become -inf (ties at the k-th
 *      place keep the lower ids);
 *   6. softmax (run.c's: max, expf(x - max), float sum, divide by sum);
 *   7. one coin drawn from the RNG (exactly one per non-greedy step);
 *   8. top-p: run.c's nucleus (pre-filter prob >= (1 - p) / (n - 1), sort
 *      descending, cut after the cumulative first exceeds p);
 *   9. min-p: drop candidates with prob < min_p * (largest prob);
 *  10. the draw: with nothing truncated (top-k, top-p and min-p all off)
 *      run.c's sample_mult over the whole vocabulary in id order;
 *      otherwise r = coin * (kept mass) walked over the kept candidates
 *      (sorted when top-p is on, else in id order).
 *
 * llama2.c run.c equivalence: with temperature T > 0, top_p P, seed S and
 * every other option off, kvs_sample() makes run.c's float operations in
 * run.c's order, draws the same coin sequence (xorshift64*, state = seed)
 * and so returns the same token as run.c's sample().  run.c's qsort is
 * not a stable sort by contract; we order equal probabilities by
 * ascending id, which is what glibc's qsort does (a merge sort for
 * arrays this size; the candidates enter in id order).
 *
 * Memory: counts live in a small open-addressing hash of (token, count)
 * allocated on the first accept and only when a penalty is non-zero:
 * 8 bytes per slot, at most 2 slots per distinct generated token.  The
 * candidate scratch is 8 bytes per vocabulary entry (1 MiB for 128K
 * vocabularies), allocated at init only for non-greedy samplers, plus
 * 4 bytes per entry for a copy of the logits when a non-greedy sampler
 * also reports logprobs.
 *
 * Logprobs (OpenAI logprobs / top_logprobs): the log-softmax of the
 * logits after bias and penalties but before temperature and truncation,
 * i.e. the model's distribution as the request shaped it, not the
 * sampler's; computed in double.  -inf logits give -inf logprobs.
 *
 * Threads: a sampler belongs to one sequence and is used by one thread at
 * a time; nothing here locks.
 */

#ifndef KVS_SAMPLE_H
#define KVS_SAMPLE_H

#include <stdint.h>

#include "base/kvs_err.h"

#define KVS_SAMPLE_MAX_TOP_LOGPROBS  20      /* OpenAI's limit */
#define KVS_SAMPLE_MAX_BIAS          100.0f  /* |bias| limit */

typedef struct {
    int32_t  token;
    float    bias;                       /* [-100, 100], added to logit */
} kvs_logit_bias_t;

typedef struct {
    float                    temperature;  /* [0, 2]; 0: greedy */
    int32_t                  top_k;        /* >= 0; 0 or >= n_vocab: off */
    float                    top_p;        /* [0, 1]; 1: off */
    float                    min_p;        /* [0, 1]; 0: off */
    uint64_t                 seed;         /* RNG state; 0 is replaced by
                                              a fixed constant (xorshift
                                              stays at 0 forever) */
    float                    presence_penalty;   /* [-2, 2] */
    float                    frequency_penalty;  /* [-2, 2] */
    const kvs_logit_bias_t  *logit_bias;   /* [n_logit_bias]; duplicates
                                              add up; copied at init */
    uint32_t                 n_logit_bias;
    int                      logprobs;     /* 1: fill kvs_sampler_t.lp */
    int32_t                  top_logprobs; /* [0, 20]; needs logprobs */
} kvs_sample_params_t;

typedef struct {
    int32_t  token;
    float    logprob;                    /* log-softmax of the token */
    int32_t  n_top;
    int32_t  top_token[KVS_SAMPLE_MAX_TOP_LOGPROBS];    /* most likely
                                                           first */
    float    top_logprob[KVS_SAMPLE_MAX_TOP_LOGPROBS];
} kvs_sample_logprobs_t;

typedef struct {
    int32_t  id;
    float    p;                          /* logit or probability */
} kvs_sample_cand_t;

/* Fields are read-only outside kvs_sample.c, lp excepted (the caller
 * reads it after each kvs_sample() when params.logprobs is set). */
typedef struct {
    kvs_sample_params_t     params;      /* logit_bias points to bias */
    kvs_logit_bias_t       *bias;        /* [params.n_logit_bias], owned */
    uint32_t                n_vocab;
    uint64_t                rng;         /* xorshift64* state, never 0 */

    int32_t                *count_id;    /* [count_cap], -1: empty slot */
    uint32_t               *count_n;     /* [count_cap] */
    uint32_t                count_cap;   /* 0 or a power of two */
    uint32_t                count_used;  /* distinct tokens counted */

    kvs_sample_cand_t      *cand;        /* [n_vocab] scratch, or NULL
                                            when greedy */
    float                  *saved;       /* [n_vocab] logits before
                                            temperature, for logprobs;
                                            NULL when greedy or unasked */
    kvs_sample_logprobs_t   lp;          /* last step's, if requested */
} kvs_sampler_t;


/*
 * Checks every field against its range for a vocabulary of n_vocab
 * tokens; KVS_EINVAL names the first bad field OpenAI-style
 * ("top_p: must be between 0 and 1 (got 1.5)").
 */
int kvs_sample_params_check(const kvs_sample_params_t *p, uint32_t n_vocab,
    kvs_err_t *err);

/* Checks p, then sets up s; on failure s owns nothing. */
int kvs_sampler_init(kvs_sampler_t *s, const kvs_sample_params_t *p,
    uint32_t n_vocab, kvs_err_t *err);

void kvs_sampler_free(kvs_sampler_t *s);

/*
 * Records a generated token for the penalties (a no-op when both are 0).
 * Prompt tokens are not passed here: OpenAI penalises only what the
 * completion has produced.  KVS_EINVAL for an id out of range, KVS_ENOMEM
 * when the counts cannot grow (they are then unchanged).
 */
int kvs_sampler_accept(kvs_sampler_t *s, int32_t token, kvs_err_t *err);

/*
 * Picks the next token from logits[n_vocab] (modified in place: they
 * end as the post-softmax probabilities or, when greedy, the biased and
 * penalised logits).  KVS_EINVAL when a logit is NaN or +inf or none is
 * finite.  Does not call kvs_sampler_accept(): the caller does, once it
 * keeps the token.
 */
int kvs_sample(kvs_sampler_t *s, float *logits, int32_t *token,
    kvs_err_t *err);

/*
 * kvs_sample() over a row where only ids[m] (strictly increasing, each <
 * n_vocab) may be drawn, as a grammar's mask leaves it: the work is
 * O(m) after the bias and penalties, not O(n_vocab).  logits[n_vocab]
 * holds the whole row (the other ids' values are ignored, as if -inf);
 * it is modified: logits[0 .. m) end as the candidates' probabilities.
 * The token and the coins drawn are kvs_sample()'s on the row with every
 * other id at -inf, but for a draw past the rounded total of an
 * untruncated distribution, where kvs_sample() returns n_vocab - 1 and
 * this the last candidate (a token always in ids).  With logprobs, or m
 * 0 or the whole vocabulary, it is kvs_sample() itself.  Errors as
 * kvs_sample()'s, for the candidates' logits.
 */
int kvs_sample_sparse(kvs_sampler_t *s, float *logits, const int32_t *ids,
    uint32_t m, int32_t *token, kvs_err_t *err);

/*
 * For backends that sample on the device (kvs_backend_sample_t): 1 when
 * s needs nothing but temperature, top-k and top-p (steps 3 to 8 and
 * 10 above: no logit bias, penalties, min-p or logprobs), so the device
 * can pick the token kvs_sample() would pick from the same logits.
 */
int kvs_sampler_device_ok(const kvs_sampler_t *s);

/*
 * Draws the coin kvs_sample() would draw at step 7 (advancing the RNG
 * the same way), for a device that samples this step instead: call it
 * exactly once per step of a non-greedy sampler (temperature > 0) and
 * never for a greedy one, so a seed means the same on every backend.
 * The token the device returns is then handled as kvs_sample()'s would
 * be (kvs_sampler_accept() once it is kept).
 */
float kvs_sampler_coin(kvs_sampler_t *s);

/*
 * The log-softmax of logits[n_vocab] at token and the top_n (0..20) most
 * likely tokens, most likely first, ties by lower id.  KVS_EINVAL for a
 * bad token, top_n, NaN or +inf logits, or no finite logit.
 */
int kvs_sample_logprobs(const float *logits, uint32_t n_vocab, int32_t token,
    int32_t top_n, kvs_sample_logprobs_t *out, kvs_err_t *err);

#endif /* KVS_SAMPLE_H */
