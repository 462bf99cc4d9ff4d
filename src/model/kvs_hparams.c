/*
 * kvs_hparams: reads "<arch>.*" hyper-parameters from GGUF metadata and
 * checks that they describe a model we can size and run (see the header
 * for the invariants that hold on success).  kvs_hp_archs[] is the one
 * place that knows what each architecture implies.
 */

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kvs_hparams.h"

/* Bounds that keep every later product of these counts far from overflow. */
#define KVS_HP_MAX_LAYERS  4096
#define KVS_HP_MAX_HEADS   4096
#define KVS_HP_MAX_WIDTH   (1u << 20)
#define KVS_HP_MAX_CTX     (1u << 26)
#define KVS_HP_MAX_VOCAB   (1u << 24)


/* What an architecture's name implies, for the fields of the same names
 * in kvs_hparams_t. */
typedef struct {
    const char          *name;
    kvs_arch_t           id;
    kvs_rope_pairing_t   rope_pairing;
    int                  qkv_bias;
    int                  qk_norm;
    int                  fused;       /* fused_qkv and fused_gate_up */
    int                  swa;         /* attention.sliding_window: 0 not
                                         read, 1 required or defaulted,
                                         2 optional (llama) */
    int                  gemma;       /* GeGLU, post-norms, scaled
                                         embeddings: kvs_hp_gemma() */
    uint32_t             swa_period;  /* kvs_hparams_t's */
} kvs_hp_arch_t;

static const kvs_hp_arch_t  kvs_hp_archs[] = {
    /* llama.cpp's converter permutes Llama's Q/K rows for adjacent pairs;
     * Qwen2 keeps Hugging Face's rotate_half halves and its biases;
     * Qwen3 drops the biases for per-head Q/K norms; Phi-3 stores Q, K,
     * V as one matrix and gate, up as another, and declares a window */
    { "llama",  KVS_ARCH_LLAMA,  KVS_ROPE_NORM, 0, 0, 0, 2, 0, 0 },
    { "qwen2",  KVS_ARCH_QWEN2,  KVS_ROPE_NEOX, 1, 0, 0, 0, 0, 0 },
    { "qwen3",  KVS_ARCH_QWEN3,  KVS_ROPE_NEOX, 0, 1, 0, 0, 0, 0 },
    { "phi3",   KVS_ARCH_PHI3,   KVS_ROPE_NEOX, 0, 0, 1, 1, 0, 0 },
    /* Gemma 2 alternates windowed and global layers, the window first;
     * Gemma 3 has five windowed layers to a global one, and Q/K norms */
    { "gemma2", KVS_ARCH_GEMMA2, KVS_ROPE_NEOX, 0, 0, 0, 1, 1, 2 },
    { "gemma3", KVS_ARCH_GEMMA3, KVS_ROPE_NEOX, 0, 1, 0, 2, 1, 6 },
};

#define KVS_HP_ARCH_NAMES  "llama, qwen2, qwen3, phi3, gemma2, gemma3"


typedef struct {
    const kvs_gguf_t  *g;
    const char        *arch;
    kvs_err_t         *err;
    char               key[128];
} kvs_hp_ctx_t;


static const char *
kvs_hp_key(kvs_hp_ctx_t *c, const char *name)
{
    snprintf(c->key, sizeof(c->key), "%s.%s", c->arch, name);

    return c->key;
}


/*
 * An unsigned count in 1..max.  Missing: KVS_ENOTFOUND with *v = def when
 * def != 0 (optional key), an error naming the key otherwise.
 */
static int
kvs_hp_u32(kvs_hp_ctx_t *c, const char *name, uint32_t def, uint32_t max,
    uint32_t *v)
{
    int          rc;
    uint64_t     u;
    const char  *key;

    key = kvs_hp_key(c, name);

    rc = kvs_gguf_get_uint(c->g, key, &u, c->err);
    if (rc == KVS_ENOTFOUND) {
        if (def != 0) {
            *v = def;
            kvs_err_clear(c->err);
            return KVS_OK;
        }
        return kvs_err_set(c->err, KVS_ENOTFOUND,
                           "missing required key '%s'", key);
    }

    if (rc != KVS_OK) {
        return rc;
    }

    if (u == 0 || u > max) {
        return kvs_err_set(c->err, KVS_ERANGE,
                           "key '%s' = %llu is out of range 1..%u",
                           key, (unsigned long long) u, max);
    }

    *v = (uint32_t) u;

    return KVS_OK;
}


/* A finite float; missing: *v = def when optional, an error otherwise. */
static int
kvs_hp_float(kvs_hp_ctx_t *c, const char *name, int required, double def,
    double *v)
{
    int          rc;
    const char  *key;

    key = kvs_hp_key(c, name);

    rc = kvs_gguf_get_float(c->g, key, v, c->err);
    if (rc == KVS_ENOTFOUND && !required) {
        *v = def;
        kvs_err_clear(c->err);
        return KVS_OK;
    }

    if (rc == KVS_ENOTFOUND) {
        return kvs_err_set(c->err, KVS_ENOTFOUND,
                           "missing required key '%s'", key);
    }

    if (rc != KVS_OK) {
        return rc;
    }

    if (!isfinite(*v)) {
        return kvs_err_set(c->err, KVS_ERANGE, "key '%s' is not finite",
                           key);
    }

    return KVS_OK;
}


static int
kvs_hp_rope_scaling(kvs_hp_ctx_t *c, kvs_hparams_t *hp)
{
    int             rc;
    double          lin;
    kvs_gguf_str_t  s;

    hp->rope_scaling = KVS_ROPE_SCALING_NONE;
    hp->rope_factor = 1.0;

    rc = kvs_gguf_get_str(c->g, kvs_hp_key(c, "rope.scaling.type"), &s,
                          c->err);

    if (rc == KVS_ENOTFOUND) {
        kvs_err_clear(c->err);

        /* older converters: "<arch>.rope.scale_linear" alone */
        if (kvs_hp_float(c, "rope.scale_linear", 0, 1.0, &lin) != KVS_OK) {
            return c->err->code;
        }
        if (lin != 1.0) {
            hp->rope_scaling = KVS_ROPE_SCALING_LINEAR;
            hp->rope_factor = lin;
        }

    } else if (rc != KVS_OK) {
        return rc;

    } else if (kvs_gguf_str_eq(s, "none")) {
        hp->rope_scaling = KVS_ROPE_SCALING_NONE;
    } else if (kvs_gguf_str_eq(s, "linear")) {
        hp->rope_scaling = KVS_ROPE_SCALING_LINEAR;
    } else if (kvs_gguf_str_eq(s, "yarn")) {
        hp->rope_scaling = KVS_ROPE_SCALING_YARN;
    } else if (kvs_gguf_str_eq(s, "llama3")) {
        hp->rope_scaling = KVS_ROPE_SCALING_LLAMA3;
    } else if (kvs_gguf_str_eq(s, "longrope")) {
        hp->rope_scaling = KVS_ROPE_SCALING_LONGROPE;
    } else {
        return kvs_err_set(c->err, KVS_EUNSUPPORTED,
                           "key '%s' = '%.*s' is not a known RoPE scaling "
                           "type (none, linear, yarn, llama3, longrope)",
                           kvs_hp_key(c, "rope.scaling.type"),
                           (int) (s.len > 40 ? 40 : s.len), s.ptr);
    }

    if (hp->rope_scaling == KVS_ROPE_SCALING_NONE) {
        return KVS_OK;
    }

    if (rc == KVS_OK
        && kvs_hp_float(c, "rope.scaling.factor", 1, 0, &hp->rope_factor)
           != KVS_OK)
    {
        return c->err->code;
    }

    if (hp->rope_factor <= 0.0) {
        return kvs_err_set(c->err, KVS_ERANGE, "RoPE scaling factor %g is "
                           "not positive", hp->rope_factor);
    }

    /* required for llama3's bands; 0 (unknown) is fine for the others */
    rc = kvs_hp_u32(c, "rope.scaling.original_context_length", 0,
                    KVS_HP_MAX_CTX, &hp->rope_orig_ctx);
    if (rc == KVS_ENOTFOUND
        && hp->rope_scaling != KVS_ROPE_SCALING_LLAMA3)
    {
        kvs_err_clear(c->err);
        hp->rope_orig_ctx = 0;
        rc = KVS_OK;
    }

    if (rc != KVS_OK) {
        return rc;
    }

    if (hp->rope_scaling == KVS_ROPE_SCALING_YARN) {
        if (kvs_hp_float(c, "rope.scaling.attn_factor", 0, 1.0,
                         &hp->rope_attn_factor) != KVS_OK
            || kvs_hp_float(c, "rope.scaling.yarn_beta_fast", 0, 32.0,
                            &hp->rope_beta_fast) != KVS_OK
            || kvs_hp_float(c, "rope.scaling.yarn_beta_slow", 0, 1.0,
                            &hp->rope_beta_slow) != KVS_OK)
        {
            return c->err->code;
        }
    }

    if (hp->rope_scaling == KVS_ROPE_SCALING_LLAMA3) {
        if (kvs_hp_float(c, "rope.scaling.low_freq_factor", 1, 0,
                         &hp->rope_low_freq_factor) != KVS_OK
            || kvs_hp_float(c, "rope.scaling.high_freq_factor", 1, 0,
                            &hp->rope_high_freq_factor) != KVS_OK)
        {
            return c->err->code;
        }

        if (hp->rope_high_freq_factor <= hp->rope_low_freq_factor) {
            return kvs_err_set(c->err, KVS_ERANGE,
                               "RoPE high_freq_factor %g must exceed "
                               "low_freq_factor %g",
                               hp->rope_high_freq_factor,
                               hp->rope_low_freq_factor);
        }
    }

    return KVS_OK;
}


static int
kvs_hp_vocab(kvs_hp_ctx_t *c, kvs_hparams_t *hp)
{
    int                       rc;
    kvs_gguf_arr_t            tokens;
    const kvs_gguf_tensor_t  *embd;

    rc = kvs_hp_u32(c, "vocab_size", 0, KVS_HP_MAX_VOCAB, &hp->n_vocab);
    if (rc != KVS_ENOTFOUND) {
        return rc;
    }

    kvs_err_clear(c->err);

    if (kvs_gguf_get_arr(c->g, "tokenizer.ggml.tokens", &tokens, NULL)
        == KVS_OK)
    {
        if (tokens.n == 0 || tokens.n > KVS_HP_MAX_VOCAB) {
            return kvs_err_set(c->err, KVS_ERANGE, "'tokenizer.ggml.tokens' "
                               "has %llu entries",
                               (unsigned long long) tokens.n);
        }
        hp->n_vocab = (uint32_t) tokens.n;
        return KVS_OK;
    }

    embd = kvs_gguf_find_tensor(c->g, "token_embd.weight");
    if (embd != NULL && embd->n_dims == 2 && embd->ne[1] > 0
        && embd->ne[1] <= KVS_HP_MAX_VOCAB)
    {
        hp->n_vocab = (uint32_t) embd->ne[1];
        return KVS_OK;
    }

    return kvs_err_set(c->err, KVS_ENOTFOUND, "missing required key "
                       "'tokenizer.ggml.tokens' (or '%s.vocab_size')",
                       c->arch);
}


/* The widths of the four attention projections; each product is at most
 * KVS_HP_MAX_HEADS x KVS_HP_MAX_WIDTH, which can reach 2^32. */
static int
kvs_hp_widths(kvs_hparams_t *hp, kvs_err_t *err)
{
    uint64_t  q, k, v, o;

    q = (uint64_t) hp->n_head * hp->head_dim_k;
    k = (uint64_t) hp->n_head_kv * hp->head_dim_k;
    v = (uint64_t) hp->n_head_kv * hp->head_dim_v;
    o = (uint64_t) hp->n_head * hp->head_dim_v;

    if (q > UINT32_MAX || o > UINT32_MAX) {
        return kvs_err_set(err, KVS_ERANGE, "%s: %u heads of %u (key) and "
                           "%u (value) elements are too wide", hp->arch,
                           hp->n_head, hp->head_dim_k, hp->head_dim_v);
    }

    /* n_head_kv <= n_head, so k <= q and v <= o */
    hp->q_width = (uint32_t) q;
    hp->k_width = (uint32_t) k;
    hp->v_width = (uint32_t) v;
    hp->o_width = (uint32_t) o;

    return KVS_OK;
}


/*
 * "<arch>.attention.sliding_window" where the architecture declares one
 * (phi3): required there, as llama.cpp requires it (gemma2's default is
 * 4096).  For llama it is optional: Mistral 7B v0.1 has a window of
 * 4096, which llama.cpp's converter does not write (and llama.cpp does
 * not apply), so such files run unwindowed as there; a file that carries
 * the key gets its window.  gemma3's is optional too: the converter
 * leaves it out for a model whose every layer is global
 * (sliding_window_pattern 1), and llama.cpp then runs none.  A window at
 * least the trained context is no window (but see kvs_hp_gemma).
 */
static int
kvs_hp_window(kvs_hp_ctx_t *c, kvs_hparams_t *hp, int swa)
{
    int  rc;

    hp->n_swa = 0;

    if (!swa) {
        return KVS_OK;
    }

    /* gemma2's default is llama.cpp's (4096); phi3 needs it */
    rc = kvs_hp_u32(c, "attention.sliding_window",
                    hp->arch_id == KVS_ARCH_GEMMA2 ? 4096 : 0, UINT32_MAX,
                    &hp->n_swa);
    if (rc == KVS_ENOTFOUND && swa == 2) {
        kvs_err_clear(c->err);
        hp->n_swa = 0;
        return KVS_OK;
    }

    if (rc != KVS_OK) {
        return rc;
    }

    if (hp->n_swa >= hp->n_ctx_train) {
        hp->n_swa = 0;
    }

    return KVS_OK;
}


/*
 * Phi-3's LongRoPE as llama.cpp's converter writes it: no scaling type,
 * but rope_factors_long / rope_factors_short tensors (n_rot / 2 each),
 * "<arch>.rope.scaling.attn_factor" and the original context.  The set
 * is llama.cpp's choice for a context of n_ctx_train: the long factors
 * once it exceeds the original context.  It is fixed at load, so a
 * cached block's keys never change meaning (Hugging Face switches per
 * sequence length instead, which no KV cache survives).
 */
static int
kvs_hp_longrope(kvs_hp_ctx_t *c, kvs_hparams_t *hp)
{
    int  rc, has_long, has_short;

    has_long = kvs_gguf_find_tensor(c->g, "rope_factors_long.weight")
               != NULL;
    has_short = kvs_gguf_find_tensor(c->g, "rope_factors_short.weight")
                != NULL;

    hp->rope_longrope = 0;

    if (!has_long && !has_short) {
        if (hp->rope_scaling == KVS_ROPE_SCALING_LONGROPE) {
            return kvs_err_set(c->err, KVS_EFORMAT, "%s: RoPE scaling "
                               "'longrope' without rope_factors_long and "
                               "rope_factors_short tensors", hp->arch);
        }
        return KVS_OK;
    }

    if (!has_long || !has_short || hp->has_rope_freqs) {
        return kvs_err_set(c->err, KVS_EFORMAT, "%s: tensors "
                           "rope_factors_long and rope_factors_short go "
                           "together, without rope_freqs", hp->arch);
    }

    if (hp->rope_scaling != KVS_ROPE_SCALING_NONE
        && hp->rope_scaling != KVS_ROPE_SCALING_LONGROPE)
    {
        return kvs_err_set(c->err, KVS_EFORMAT, "%s: LongRoPE factor "
                           "tensors with RoPE scaling '%s'", hp->arch,
                           kvs_rope_scaling_name(hp->rope_scaling));
    }

    rc = kvs_hp_u32(c, "rope.scaling.original_context_length", 0,
                    KVS_HP_MAX_CTX, &hp->rope_orig_ctx);
    if (rc != KVS_OK) {
        return rc;
    }

    if (kvs_hp_float(c, "rope.scaling.attn_factor", 0, 1.0,
                     &hp->rope_attn_factor) != KVS_OK)
    {
        return c->err->code;
    }

    if (hp->rope_attn_factor <= 0.0) {
        return kvs_err_set(c->err, KVS_ERANGE, "%s.rope.scaling.attn_factor "
                           "%g is not positive", hp->arch,
                           hp->rope_attn_factor);
    }

    hp->rope_longrope = hp->n_ctx_train > hp->rope_orig_ctx ? 2 : 1;

    return KVS_OK;
}


/*
 * "<arch>.attention.sliding_window_pattern", as llama.cpp reads it for
 * gemma2 and gemma3 (when absent: the architecture's period): 0 makes
 * every layer windowed, p every p-th layer global, the same rule as
 * kvs_hparams_swa().  Converters write a per-layer array for other
 * architectures; here it is refused, naming the key.
 */
static int
kvs_hp_swa_pattern(kvs_hp_ctx_t *c, kvs_hparams_t *hp)
{
    int          rc;
    uint64_t     p;
    const char  *key;

    key = kvs_hp_key(c, "attention.sliding_window_pattern");

    rc = kvs_gguf_get_uint(c->g, key, &p, c->err);
    if (rc == KVS_ENOTFOUND) {
        kvs_err_clear(c->err);
        return KVS_OK;
    }

    if (rc != KVS_OK) {
        return rc;
    }

    if (p > KVS_HP_MAX_LAYERS) {
        return kvs_err_set(c->err, KVS_ERANGE, "key '%s' = %llu is out of "
                           "range 0..%u", key, (unsigned long long) p,
                           (unsigned) KVS_HP_MAX_LAYERS);
    }

    hp->swa_period = (uint32_t) p;

    return KVS_OK;
}


/*
 * The Gemma 2 / Gemma 3 facts, as llama.cpp's converter writes and its
 * loader reads them.  The norm weights need nothing here: the converter
 * stores Gemma's (1 + w) already added.  The query scale: the model's
 * "<arch>.attention.scale" when present, else llama.cpp's rule, which
 * the converter leaves to the loader: 1/sqrt(n_embd / n_head) for the
 * 27B models (46 layers for gemma2, 62 for gemma3; their
 * query_pre_attn_scalar), 1/sqrt(head size) for the others.
 * Soft-capping: gemma2's attn_logit_softcapping and
 * final_logit_softcapping (llama.cpp's defaults 50 and 30 when absent);
 * gemma3 has no attention cap and a final one only when the file says
 * so.  When a gemma3 file declares a window, its local layers (five of
 * six) rotate with rope.freq_base_swa (default 10000), unscaled, even
 * when the window covers the whole context and masks nothing: llama.cpp
 * picks the table by the layer pattern, not by the window's width.
 * gemma2's local layers share the global table unless the file gives
 * them a base of their own, and then keep the model's scaling.  Both
 * may say how often a global layer comes (kvs_hp_swa_pattern).
 */
static int
kvs_hp_gemma(kvs_hp_ctx_t *c, kvs_hparams_t *hp)
{
    int       rc;
    uint32_t  big;
    uint64_t  declared;

    hp->geglu = 1;
    hp->post_norms = 1;
    hp->embd_scale = sqrt((double) hp->n_embd);

    big = hp->arch_id == KVS_ARCH_GEMMA2 ? 46 : 62;
    /* in float, as llama.cpp forms it */
    hp->attn_scale = hp->n_layer == big
                     ? 1.0f / sqrtf((float) (hp->n_embd / hp->n_head))
                     : 1.0f / sqrtf((float) hp->head_dim_k);

    if (kvs_hp_float(c, "attention.scale", 0, hp->attn_scale,
                     &hp->attn_scale) != KVS_OK)
    {
        return c->err->code;
    }

    if (hp->arch_id == KVS_ARCH_GEMMA2) {
        if (kvs_hp_float(c, "attn_logit_softcapping", 0, 50.0,
                         &hp->attn_softcap) != KVS_OK
            || kvs_hp_float(c, "final_logit_softcapping", 0, 30.0,
                            &hp->final_softcap) != KVS_OK
            || kvs_hp_float(c, "rope.freq_base_swa", 0, hp->rope_freq_base,
                            &hp->rope_base_swa) != KVS_OK)
        {
            return c->err->code;
        }

        if (hp->rope_base_swa <= 0.0) {
            return kvs_err_set(c->err, KVS_ERANGE, "%s.rope.freq_base_swa "
                               "(%g) must be positive", hp->arch,
                               hp->rope_base_swa);
        }

        /* the same base, scaled alike: the global table itself */
        hp->rope_swa_scaled = 1;
        if (hp->rope_base_swa == hp->rope_freq_base) {
            hp->rope_base_swa = 0.0;
        }

        rc = kvs_hp_swa_pattern(c, hp);
        if (rc != KVS_OK) {
            return rc;
        }

    } else {
        if (kvs_hp_float(c, "final_logit_softcapping", 0, 0.0,
                         &hp->final_softcap) != KVS_OK)
        {
            return c->err->code;
        }

        /* kvs_hp_window() read it already; an absent one is no window */
        rc = kvs_gguf_get_uint(c->g, kvs_hp_key(c, "attention.sliding_window"),
                               &declared, c->err);
        if (rc == KVS_ENOTFOUND) {
            kvs_err_clear(c->err);
            declared = 0;

        } else if (rc != KVS_OK) {
            return rc;
        }

        if (declared != 0
            && kvs_hp_float(c, "rope.freq_base_swa", 0, 10000.0,
                            &hp->rope_base_swa) != KVS_OK)
        {
            return c->err->code;
        }

        if (declared != 0 && hp->rope_base_swa <= 0.0) {
            return kvs_err_set(c->err, KVS_ERANGE, "%s.rope.freq_base_swa "
                               "(%g) must be positive", hp->arch,
                               hp->rope_base_swa);
        }

        rc = declared != 0 ? kvs_hp_swa_pattern(c, hp) : KVS_OK;
        if (rc != KVS_OK) {
            return rc;
        }
    }

    if (hp->attn_scale <= 0.0 || hp->attn_softcap < 0.0
        || hp->final_softcap < 0.0)
    {
        return kvs_err_set(c->err, KVS_ERANGE, "%s: attention scale %g "
                           "must be positive, soft-caps %g and %g not "
                           "negative", hp->arch, hp->attn_scale,
                           hp->attn_softcap, hp->final_softcap);
    }

    return KVS_OK;
}


int
kvs_hparams_read(kvs_hparams_t *hp, const kvs_gguf_t *g, kvs_err_t *err)
{
    int                    rc;
    size_t                 a;
    uint64_t               i;
    kvs_err_t              local;
    kvs_hp_ctx_t           c;
    kvs_gguf_str_t         arch;
    const kvs_hp_arch_t   *known;

    memset(hp, 0, sizeof(*hp));

    if (err == NULL) {
        err = &local;
    }

    rc = kvs_gguf_get_str(g, "general.architecture", &arch, err);
    if (rc == KVS_ENOTFOUND) {
        return kvs_err_set(err, rc, "missing required key "
                           "'general.architecture'");
    }
    if (rc != KVS_OK) {
        return rc;
    }

    known = NULL;

    for (a = 0;
         known == NULL && a < sizeof(kvs_hp_archs) / sizeof(kvs_hp_archs[0]);
         a++)
    {
        if (kvs_gguf_str_eq(arch, kvs_hp_archs[a].name)) {
            known = &kvs_hp_archs[a];
        }
    }

    if (known == NULL) {
        return kvs_err_set(err, KVS_EUNSUPPORTED, "architecture '%.*s' is "
                           "not supported (" KVS_HP_ARCH_NAMES ")",
                           (int) (arch.len > 40 ? 40 : arch.len), arch.ptr);
    }

    memcpy(hp->arch, arch.ptr, arch.len);
    hp->arch[arch.len] = '\0';
    hp->arch_id = known->id;
    hp->rope_pairing = known->rope_pairing;
    hp->qkv_bias = known->qkv_bias;
    hp->qk_norm = known->qk_norm;
    hp->fused_qkv = known->fused;
    hp->fused_gate_up = known->fused;
    hp->swa_period = known->swa_period;

    c.g = g;
    c.arch = hp->arch;
    c.err = err;

    if (kvs_hp_u32(&c, "block_count", 0, KVS_HP_MAX_LAYERS, &hp->n_layer)
        || kvs_hp_u32(&c, "embedding_length", 0, KVS_HP_MAX_WIDTH,
                      &hp->n_embd)
        || kvs_hp_u32(&c, "feed_forward_length", 0, KVS_HP_MAX_WIDTH,
                      &hp->n_ff)
        || kvs_hp_u32(&c, "attention.head_count", 0, KVS_HP_MAX_HEADS,
                      &hp->n_head)
        || kvs_hp_u32(&c, "context_length", 0, KVS_HP_MAX_CTX,
                      &hp->n_ctx_train)
        || kvs_hp_u32(&c, "attention.head_count_kv", hp->n_head,
                      KVS_HP_MAX_HEADS, &hp->n_head_kv))
    {
        return err->code;
    }

    if (hp->n_head % hp->n_head_kv != 0) {
        return kvs_err_set(err, KVS_EFORMAT, "%s.attention.head_count %u is "
                           "not a multiple of head_count_kv %u", hp->arch,
                           hp->n_head, hp->n_head_kv);
    }

    if (kvs_gguf_find(g, kvs_hp_key(&c, "attention.key_length")) == NULL
        && hp->n_embd % hp->n_head != 0)
    {
        return kvs_err_set(err, KVS_EFORMAT, "%s.embedding_length %u is not "
                           "a multiple of head_count %u", hp->arch,
                           hp->n_embd, hp->n_head);
    }

    if (kvs_hp_u32(&c, "attention.key_length", hp->n_embd / hp->n_head,
                   KVS_HP_MAX_WIDTH, &hp->head_dim_k)
        || kvs_hp_u32(&c, "attention.value_length", hp->head_dim_k,
                      KVS_HP_MAX_WIDTH, &hp->head_dim_v)
        || kvs_hp_u32(&c, "rope.dimension_count", hp->head_dim_k,
                      KVS_HP_MAX_WIDTH, &hp->n_rot))
    {
        return err->code;
    }

    if (hp->n_rot > hp->head_dim_k || hp->n_rot % 2 != 0) {
        return kvs_err_set(err, KVS_EFORMAT, "%s.rope.dimension_count %u "
                           "must be even and at most the head size %u",
                           hp->arch, hp->n_rot, hp->head_dim_k);
    }

    if (kvs_hp_widths(hp, err) != KVS_OK) {
        return err->code;
    }

    if (kvs_hp_float(&c, "rope.freq_base", 0, 10000.0, &hp->rope_freq_base)
        || kvs_hp_float(&c, "attention.layer_norm_rms_epsilon", 1, 0,
                        &hp->norm_eps))
    {
        return err->code;
    }

    if (hp->rope_freq_base <= 0.0 || hp->norm_eps <= 0.0) {
        return kvs_err_set(err, KVS_ERANGE, "%s.rope.freq_base (%g) and "
                           "layer_norm_rms_epsilon (%g) must be positive",
                           hp->arch, hp->rope_freq_base, hp->norm_eps);
    }

    if (kvs_hp_rope_scaling(&c, hp) != KVS_OK
        || kvs_hp_vocab(&c, hp) != KVS_OK)
    {
        return err->code;
    }

    if (kvs_hp_window(&c, hp, known->swa) != KVS_OK) {
        return err->code;
    }

    /* the float every backend has always used: 1.0f / sqrtf(hd) */
    hp->embd_scale = 1.0;
    hp->attn_scale = 1.0f / sqrtf((float) hp->head_dim_k);

    if (known->gemma && kvs_hp_gemma(&c, hp) != KVS_OK) {
        return err->code;
    }

    hp->has_rope_freqs =
        kvs_gguf_find_tensor(g, "rope_freqs.weight") != NULL;

    if (kvs_hp_longrope(&c, hp) != KVS_OK) {
        return err->code;
    }
    hp->tied_embeddings =
        kvs_gguf_find_tensor(g, "output.weight") == NULL;

    for (i = 0; i < kvs_gguf_n_tensors(g); i++) {
        hp->n_params += kvs_gguf_tensor_at(g, i)->nelem;
    }

    return KVS_OK;
}


const char *
kvs_hparams_rope_factors(const kvs_hparams_t *hp)
{
    if (hp->has_rope_freqs) {
        return "rope_freqs.weight";
    }

    if (hp->rope_longrope != 0) {
        return hp->rope_longrope == 2 ? "rope_factors_long.weight"
                                      : "rope_factors_short.weight";
    }

    return NULL;
}


const char *
kvs_rope_scaling_name(kvs_rope_scaling_t s)
{
    switch (s) {
    case KVS_ROPE_SCALING_NONE:     return "none";
    case KVS_ROPE_SCALING_LINEAR:   return "linear";
    case KVS_ROPE_SCALING_YARN:     return "yarn";
    case KVS_ROPE_SCALING_LLAMA3:   return "llama3";
    case KVS_ROPE_SCALING_LONGROPE: return "longrope";
    }

    return "?";
}


uint64_t
kvs_hparams_kv_bytes_per_token(const kvs_hparams_t *hp,
    uint32_t bytes_per_elem)
{
    return (uint64_t) hp->n_layer * hp->n_head_kv
           * (hp->head_dim_k + hp->head_dim_v) * bytes_per_elem;
}
