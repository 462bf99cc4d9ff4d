/*
 * kvs_rope: rotary position embedding as the models we serve use it.
 *
 * kvs_rope_init() turns a model's hyper-parameters into one table, once:
 * the inverse frequency of every rotated pair after the declared scaling
 * (none, linear, YaRN, Llama 3.1 bands) and the factor that multiplies
 * cos and sin.  kvs_rope_apply() then rotates query or key vectors in
 * place for one position.  The table never changes after init, so one
 * kvs_rope_t is shared read-only by every thread.
 *
 * Conventions (see kvs_rope.c for the sources):
 *   - pair i (0 <= i < n_rot/2) turns by theta_i = pos * inv_freq[i]
 *     radians, with inv_freq[i] = freq_base^(-2i/n_rot) before scaling;
 *   - pairing (kvs_rope_pairing_t, model/kvs_hparams.h, which decides it
 *     per architecture): KVS_ROPE_NORM rotates adjacent dims (2i, 2i+1):
 *     llama.cpp arch "llama" (its converter permutes Q/K so this holds)
 *     and llama2.c run.c; KVS_ROPE_NEOX rotates (i, i + n_rot/2): HF
 *     rotate_half, llama.cpp arch "qwen2";
 *   - only the first n_rot dims of each head turn; the rest pass through;
 *   - mscale multiplies cos and sin, so it scales q and k each (the
 *     attention logits by mscale^2), as HF and ggml apply YaRN's factor.
 */

#ifndef KVS_ROPE_H
#define KVS_ROPE_H

#include <stdint.h>

#include "base/kvs_err.h"
#include "model/kvs_hparams.h"

typedef struct {
    kvs_rope_scaling_t  kind;
    uint32_t            n_rot;         /* rotated dims per head, even */
    uint32_t            head_dim;      /* head width it was checked for */
    double              freq_base;
    double              mscale;        /* multiplies cos and sin; 1 unless
                                          YaRN */
    double             *inv_freq;      /* [n_rot / 2] radians per position
                                          step, after scaling */
} kvs_rope_t;

/*
 * Builds the table from hp: n_rot, head_dim_k, rope_freq_base,
 * rope_scaling and its parameters (rope_orig_ctx falls back to
 * n_ctx_train for YaRN).  Longrope is KVS_EUNSUPPORTED; odd or zero n_rot,
 * n_rot > head_dim_k, non-positive base or factor and inconsistent band
 * parameters are KVS_EINVAL.  On failure rope owns nothing.
 */
int kvs_rope_init(kvs_rope_t *rope, const kvs_hparams_t *hp, kvs_err_t *err);

/*
 * Divides inv_freq[i] by factors[i] (ggml's "freq_factors", a GGUF's
 * rope_freqs.weight, n_rot/2 floats): how llama.cpp's converter stores
 * Llama 3.1 scaling instead of a "llama3" scaling type.  Refused on a
 * "llama3" table (the bands would be applied twice) and for factors that
 * are not finite and positive; the table is unchanged on failure.
 */
int kvs_rope_set_freq_factors(kvs_rope_t *rope, const float *factors,
    uint32_t n, kvs_err_t *err);

void kvs_rope_free(kvs_rope_t *rope);

/*
 * Rotates vec in place for position pos.  vec: [n_heads][head_dim] floats,
 * heads contiguous; of each head the first n_rot dims turn, paired as
 * `pairing` (KVS_ROPE_NORM or KVS_ROPE_NEOX) says.  Returns KVS_EINVAL,
 * touching nothing, when head_dim < n_rot or n_heads < 0 or pairing is
 * unknown: a caller's bug, checked because it is cheap.
 */
int kvs_rope_apply(const kvs_rope_t *rope, float *vec, int n_heads,
    int head_dim, int32_t pos, kvs_rope_pairing_t pairing);

/*
 * The same in two steps, for callers that turn several vectors at one
 * position (q and k, every layer of a step): kvs_rope_angles() fills
 * cs[2 i] and cs[2 i + 1] with pair i's cos and sin times mscale
 * (cs: [n_rot] doubles), kvs_rope_turn() rotates vec with them, as
 * kvs_rope_apply() checks and with its bits.
 */
void kvs_rope_angles(const kvs_rope_t *rope, int32_t pos, double *cs);
int kvs_rope_turn(const kvs_rope_t *rope, const double *cs, float *vec,
    int n_heads, int head_dim, kvs_rope_pairing_t pairing);

#endif /* KVS_ROPE_H */
