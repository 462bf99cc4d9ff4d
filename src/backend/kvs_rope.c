/*
 * kvs_rope: the rotary table (inverse frequency per pair after scaling,
 * and the cos/sin multiplier) and the in-place rotation.  Invariant: a
 * table that kvs_rope_init() returned has n_rot even and non-zero, and
 * n_rot / 2 finite positive inverse frequencies.
 *
 * Sources for the formulas (definitions, not code):
 *   - unscaled and pairing: llama2.c run.c (adjacent pairs,
 *     freq = base^(-j/head_size) for even j), llama.cpp's rope modes
 *     NORM (arch llama) and NEOX (arch qwen2);
 *   - linear: position interpolation, theta = (pos / factor) * inv_freq;
 *   - llama3: HF transformers _compute_llama3_parameters (wavelength
 *     bands against original_context / {low,high}_freq_factor);
 *   - yarn: the YaRN paper (arXiv 2309.00071) as HF _compute_yarn_parameters
 *     and ggml's rope_yarn implement it: correction range from
 *     beta_fast / beta_slow, floor/ceil and clamped to [0, n_rot - 1], a
 *     linear ramp over pair index, and mscale = attn_factor *
 *     (1 + 0.1 ln factor) for factor > 1.  The GGUF attn_factor (default
 *     1) multiplies the logarithmic term as ggml does, so with the
 *     default the result is HF's default attention_factor;
 *   - longrope (Phi-3): per-pair divisors of the frequency (the long or
 *     short factor tensor, chosen once by the hyper-parameters) and
 *     mscale = the GGUF attn_factor, sqrt(1 + ln(s) / ln(orig_ctx)) as
 *     llama.cpp's converter computes it from HF's config.
 *
 * Precision: inv_freq and the angle pos * inv_freq are doubles, and cos,
 * sin and the rotation are done in double before rounding to float, so
 * the result is the exact rotation rounded once; llama.cpp and llama2.c
 * form the angle in float, which at position 1e5 is already ~1e-2 rad
 * off.  kvs_rope_angles / kvs_rope_turn split a rotation so that a
 * caller can compute a position's cos and sin once for many vectors
 * (the CPU backend: once per token and step, for q and k of every
 * layer).
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_rope.h"


/* pairs kvs_rope_apply keeps on its stack */
#define KVS_ROPE_CS_MAX  256


static int
kvs_rope_check(const kvs_hparams_t *hp, kvs_err_t *err)
{
    if (hp->n_rot == 0 || hp->n_rot % 2 != 0) {
        return kvs_err_set(err, KVS_EINVAL, "RoPE dimension count %u must "
                           "be even and non-zero", hp->n_rot);
    }

    if (hp->n_rot > hp->head_dim_k) {
        return kvs_err_set(err, KVS_EINVAL, "RoPE dimension count %u "
                           "exceeds the head size %u", hp->n_rot,
                           hp->head_dim_k);
    }

    if (!isfinite(hp->rope_freq_base) || hp->rope_freq_base <= 1.0) {
        /* base <= 1 would make every frequency >= 1: not a RoPE model */
        return kvs_err_set(err, KVS_EINVAL, "RoPE freq_base %g must be "
                           "finite and above 1", hp->rope_freq_base);
    }

    if (hp->rope_scaling == KVS_ROPE_SCALING_NONE) {
        return KVS_OK;
    }

    /* longrope is its factor tensors (kvs_rope_set_freq_factors) and
     * attn_factor; the hyper-parameters insist on the tensors */
    if (hp->rope_scaling == KVS_ROPE_SCALING_LONGROPE
        && hp->rope_longrope == 0)
    {
        return kvs_err_set(err, KVS_EUNSUPPORTED, "RoPE scaling 'longrope' "
                           "needs its factor tensors");
    }

    if (hp->rope_scaling == KVS_ROPE_SCALING_LONGROPE) {
        return KVS_OK;
    }

    if (hp->rope_scaling != KVS_ROPE_SCALING_LINEAR
        && hp->rope_scaling != KVS_ROPE_SCALING_YARN
        && hp->rope_scaling != KVS_ROPE_SCALING_LLAMA3)
    {
        return kvs_err_set(err, KVS_EINVAL, "unknown RoPE scaling kind %d",
                           (int) hp->rope_scaling);
    }

    if (!isfinite(hp->rope_factor) || hp->rope_factor <= 0.0) {
        return kvs_err_set(err, KVS_EINVAL, "RoPE %s scaling factor %g must "
                           "be finite and positive",
                           kvs_rope_scaling_name(hp->rope_scaling),
                           hp->rope_factor);
    }

    if (hp->rope_scaling == KVS_ROPE_SCALING_LLAMA3) {
        if (hp->rope_orig_ctx == 0) {
            return kvs_err_set(err, KVS_EINVAL, "RoPE llama3 scaling needs "
                               "the original context length");
        }

        if (!isfinite(hp->rope_low_freq_factor)
            || !isfinite(hp->rope_high_freq_factor)
            || hp->rope_low_freq_factor <= 0.0
            || hp->rope_high_freq_factor <= hp->rope_low_freq_factor)
        {
            return kvs_err_set(err, KVS_EINVAL, "RoPE llama3 needs "
                               "0 < low_freq_factor (%g) < high_freq_factor "
                               "(%g)", hp->rope_low_freq_factor,
                               hp->rope_high_freq_factor);
        }
    }

    if (hp->rope_scaling == KVS_ROPE_SCALING_YARN) {
        if (hp->rope_orig_ctx == 0 && hp->n_ctx_train == 0) {
            return kvs_err_set(err, KVS_EINVAL, "RoPE yarn scaling needs "
                               "the original context length");
        }

        if (!isfinite(hp->rope_beta_fast) || !isfinite(hp->rope_beta_slow)
            || hp->rope_beta_fast <= 0.0 || hp->rope_beta_slow <= 0.0
            || !isfinite(hp->rope_attn_factor)
            || hp->rope_attn_factor <= 0.0)
        {
            return kvs_err_set(err, KVS_EINVAL, "RoPE yarn needs positive "
                               "beta_fast (%g), beta_slow (%g) and "
                               "attn_factor (%g)", hp->rope_beta_fast,
                               hp->rope_beta_slow, hp->rope_attn_factor);
        }
    }

    return KVS_OK;
}


/*
 * Llama 3.1: wavelengths shorter than orig/high keep their frequency,
 * longer than orig/low are divided by factor, and in between the two are
 * mixed linearly in orig/wavelen.
 */
static void
kvs_rope_llama3(kvs_rope_t *rope, const kvs_hparams_t *hp)
{
    uint32_t  i;
    double    orig, lo, hi, wavelen, smooth, inv;

    orig = (double) hp->rope_orig_ctx;
    lo = hp->rope_low_freq_factor;
    hi = hp->rope_high_freq_factor;

    for (i = 0; i < rope->n_rot / 2; i++) {
        inv = rope->inv_freq[i];
        wavelen = 2.0 * M_PI / inv;

        if (wavelen < orig / hi) {
            continue;
        }

        if (wavelen > orig / lo) {
            rope->inv_freq[i] = inv / hp->rope_factor;
            continue;
        }

        smooth = (orig / wavelen - lo) / (hi - lo);
        rope->inv_freq[i] = (1.0 - smooth) * inv / hp->rope_factor
                            + smooth * inv;
    }
}


/* Pair dimension (in 0..n_rot) that turns n_turns times over orig. */
static double
kvs_rope_yarn_dim(double n_turns, double n_rot, double base, double orig)
{
    return n_rot * log(orig / (n_turns * 2.0 * M_PI)) / (2.0 * log(base));
}


static void
kvs_rope_yarn(kvs_rope_t *rope, const kvs_hparams_t *hp)
{
    uint32_t  i;
    double    orig, lo, hi, ramp, extrap, s;

    s = hp->rope_factor;
    orig = hp->rope_orig_ctx != 0 ? hp->rope_orig_ctx : hp->n_ctx_train;

    /* fast-turning pairs (index <= lo) keep their frequency, slow ones
     * (index >= hi) are interpolated by s, and the ramp joins them */
    lo = floor(kvs_rope_yarn_dim(hp->rope_beta_fast, rope->n_rot,
                                 rope->freq_base, orig));
    hi = ceil(kvs_rope_yarn_dim(hp->rope_beta_slow, rope->n_rot,
                                rope->freq_base, orig));
    lo = fmax(lo, 0.0);
    hi = fmin(hi, (double) rope->n_rot - 1.0);

    for (i = 0; i < rope->n_rot / 2; i++) {
        ramp = ((double) i - lo) / fmax(0.001, hi - lo);
        ramp = fmin(1.0, fmax(0.0, ramp));
        extrap = 1.0 - ramp;

        rope->inv_freq[i] = rope->inv_freq[i] / s * (1.0 - extrap)
                            + rope->inv_freq[i] * extrap;
    }

    rope->mscale = hp->rope_attn_factor;
    if (s > 1.0) {
        rope->mscale *= 1.0 + 0.1 * log(s);
    }
}


int
kvs_rope_init(kvs_rope_t *rope, const kvs_hparams_t *hp, kvs_err_t *err)
{
    int       rc;
    uint32_t  i;

    memset(rope, 0, sizeof(*rope));

    rc = kvs_rope_check(hp, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rope->inv_freq = malloc(hp->n_rot / 2 * sizeof(double));
    if (rope->inv_freq == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "RoPE table of %u pairs",
                           hp->n_rot / 2);
    }

    rope->kind = hp->rope_scaling;
    rope->n_rot = hp->n_rot;
    rope->head_dim = hp->head_dim_k;
    rope->freq_base = hp->rope_freq_base;
    rope->mscale = 1.0;

    for (i = 0; i < rope->n_rot / 2; i++) {
        rope->inv_freq[i] = pow(rope->freq_base,
                                -(2.0 * i) / (double) rope->n_rot);
    }

    switch (rope->kind) {
    case KVS_ROPE_SCALING_LINEAR:
        for (i = 0; i < rope->n_rot / 2; i++) {
            rope->inv_freq[i] /= hp->rope_factor;
        }
        break;

    case KVS_ROPE_SCALING_LLAMA3:
        kvs_rope_llama3(rope, hp);
        break;

    case KVS_ROPE_SCALING_YARN:
        kvs_rope_yarn(rope, hp);
        break;

    default:
        break;
    }

    /* phi3's LongRoPE: the factors come as a tensor; its attn_factor
     * multiplies cos and sin as ggml's rope does without YaRN ramps */
    if (hp->rope_longrope != 0) {
        rope->mscale = hp->rope_attn_factor;
    }

    return KVS_OK;
}


int
kvs_rope_set_freq_factors(kvs_rope_t *rope, const float *factors,
    uint32_t n, kvs_err_t *err)
{
    uint32_t  i;

    if (rope->kind == KVS_ROPE_SCALING_LLAMA3) {
        return kvs_err_set(err, KVS_EINVAL, "RoPE frequency factors on top "
                           "of llama3 scaling would scale twice");
    }

    if (n != rope->n_rot / 2) {
        return kvs_err_set(err, KVS_EINVAL, "RoPE frequency factors: %u "
                           "values for %u pairs", n, rope->n_rot / 2);
    }

    for (i = 0; i < n; i++) {
        if (!isfinite(factors[i]) || factors[i] <= 0.0f) {
            return kvs_err_set(err, KVS_EINVAL, "RoPE frequency factor %u "
                               "is %g, not finite and positive", i,
                               (double) factors[i]);
        }
    }

    for (i = 0; i < n; i++) {
        rope->inv_freq[i] /= (double) factors[i];
    }

    return KVS_OK;
}


void
kvs_rope_free(kvs_rope_t *rope)
{
    free(rope->inv_freq);
    memset(rope, 0, sizeof(*rope));
}


void
kvs_rope_angles(const kvs_rope_t *rope, int32_t pos, double *cs)
{
    double    theta;
    uint32_t  i;

    for (i = 0; i < rope->n_rot / 2; i++) {
        theta = (double) pos * rope->inv_freq[i];
        cs[2 * i] = cos(theta) * rope->mscale;
        cs[2 * i + 1] = sin(theta) * rope->mscale;
    }
}


int
kvs_rope_turn(const kvs_rope_t *rope, const double *cs, float *vec,
    int n_heads, int head_dim, kvs_rope_pairing_t pairing)
{
    int       h;
    size_t    a, b, half, step;
    double    c, s, x0, x1;
    uint32_t  i;

    if (n_heads < 0 || head_dim < 0 || (uint32_t) head_dim < rope->n_rot
        || (pairing != KVS_ROPE_NORM && pairing != KVS_ROPE_NEOX))
    {
        return KVS_EINVAL;
    }

    half = rope->n_rot / 2;
    step = (size_t) head_dim;

    /* pairs outer, heads inner: one cos/sin per pair for all heads */
    for (i = 0; i < half; i++) {
        c = cs[2 * i];
        s = cs[2 * i + 1];

        if (pairing == KVS_ROPE_NORM) {
            a = 2 * (size_t) i;
            b = a + 1;
        } else {
            a = i;
            b = i + half;
        }

        for (h = 0; h < n_heads; h++) {
            x0 = vec[a];
            x1 = vec[b];
            vec[a] = (float) (x0 * c - x1 * s);
            vec[b] = (float) (x0 * s + x1 * c);
            a += step;
            b += step;
        }
    }

    return KVS_OK;
}


/* cs on the stack: n_rot is at most a head's width, which
 * kvs_hparams bounds (KVS_ROPE_CS_MAX pairs here; wider ones, never met,
 * take the heap) */
int
kvs_rope_apply(const kvs_rope_t *rope, float *vec, int n_heads,
    int head_dim, int32_t pos, kvs_rope_pairing_t pairing)
{
    int      rc;
    double   buf[2 * KVS_ROPE_CS_MAX], *cs;

    if (head_dim < 0 || (uint32_t) head_dim < rope->n_rot) {
        return KVS_EINVAL;
    }

    cs = rope->n_rot <= 2 * KVS_ROPE_CS_MAX ? buf
         : malloc((size_t) rope->n_rot * sizeof(double));
    if (cs == NULL) {
        return KVS_ENOMEM;
    }

    kvs_rope_angles(rope, pos, cs);
    rc = kvs_rope_turn(rope, cs, vec, n_heads, head_dim, pairing);

    if (cs != buf) {
        free(cs);
    }

    return rc;
}
