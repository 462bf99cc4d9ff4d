/*
 * kvs_hparams: a model's hyper-parameters, read from GGUF metadata, and the
 * KV-cache arithmetic that follows from them.
 *
 * Architectures: "llama" (Llama 1/2/3, Mistral, TinyLlama,
 * stories260K), "qwen2", "qwen3" (per-head Q/K RMSNorm), "phi3"
 * (fused QKV and gate/up tensors, LongRoPE factors, a sliding window),
 * "gemma2" and "gemma3" (GeGLU, scaled embeddings, post-norms,
 * soft-capping, sliding-window layers between global ones).
 * Keys are "<arch>.<name>" as llama.cpp's converters write them.  A
 * missing required key is an error naming the key; optional keys
 * take llama.cpp's defaults.  After kvs_hparams_read() succeeds, every
 * count is non-zero and the head arithmetic is consistent (heads divide
 * evenly into KV heads, head_dim * heads fits the embedding or is given).
 *
 * What an architecture implies (its RoPE pairing, whether Q, K and V
 * carry biases) and the projection widths that follow from the head
 * counts are decided here, once, by kvs_hparams_read(); the model's
 * tensor checks and the backends read these fields and never compare
 * the architecture's name themselves.
 *
 * Units: counts and widths are plain numbers (floats per token);
 * kv_bytes_* are bytes.
 */

#ifndef KVS_HPARAMS_H
#define KVS_HPARAMS_H

#include <stdint.h>

#include "base/kvs_err.h"
#include "kvs_gguf.h"

#define KVS_ARCH_MAX  32

typedef enum {
    KVS_ROPE_SCALING_NONE = 0,
    KVS_ROPE_SCALING_LINEAR,
    KVS_ROPE_SCALING_YARN,
    KVS_ROPE_SCALING_LLAMA3,           /* per-frequency-band (Llama 3.1) */
    KVS_ROPE_SCALING_LONGROPE
} kvs_rope_scaling_t;

/* The architectures kvs_hparams_read() accepts. */
typedef enum {
    KVS_ARCH_LLAMA = 0,                /* "llama" */
    KVS_ARCH_QWEN2,                    /* "qwen2" */
    KVS_ARCH_QWEN3,                    /* "qwen3" */
    KVS_ARCH_PHI3,                     /* "phi3" */
    KVS_ARCH_GEMMA2,                   /* "gemma2" */
    KVS_ARCH_GEMMA3                    /* "gemma3" (text) */
} kvs_arch_t;

/* Which dimensions of a head RoPE turns together (src/backend/kvs_rope.h
 * applies it): an architecture's fact, so it is decided here. */
typedef enum {
    KVS_ROPE_NORM = 0,                 /* adjacent pairs (2i, 2i+1) */
    KVS_ROPE_NEOX = 1                  /* split halves (i, i + n_rot/2) */
} kvs_rope_pairing_t;

typedef struct {
    char                arch[KVS_ARCH_MAX];  /* one of kvs_arch_t's */
    kvs_arch_t          arch_id;       /* the same, as a value */
    kvs_rope_pairing_t  rope_pairing;  /* NORM: llama; NEOX: the rest */
    int                 qkv_bias;      /* Q, K and V bias tensors are
                                          required (qwen2); refused
                                          where qk_norm or fused_qkv;
                                          elsewhere optional, applied if
                                          present */
    int                 qk_norm;       /* per-head RMSNorm of Q and K
                                          before RoPE, weights
                                          attn_q_norm / attn_k_norm of
                                          head_dim_k (qwen3) */
    int                 fused_qkv;     /* one attn_qkv [q+k+v][n_embd]
                                          matrix, rows Q then K then V
                                          (phi3) */
    int                 fused_gate_up; /* one ffn_up [2 n_ff][n_embd],
                                          gate rows first (phi3) */
    uint32_t            n_swa;         /* sliding window: a query at pos
                                          sees positions > pos - n_swa;
                                          0: no window (every layer it
                                          applies to: kvs_hparams_swa) */
    uint32_t            swa_period;    /* 0: every layer windowed; p:
                                          layer l is global when
                                          (l + 1) % p == 0 (gemma2: 2,
                                          gemma3: 6) */
    double              rope_base_swa; /* RoPE base of local layers
                                          (gemma3 declaring a window:
                                          10000 or its
                                          rope.freq_base_swa; gemma2:
                                          its rope.freq_base_swa); 0:
                                          the same table as the rest */
    int                 rope_swa_scaled; /* that table keeps the model's
                                          RoPE scaling (gemma2); else
                                          it is unscaled (gemma3) */
    int                 geglu;         /* FFN gelu(gate) * up (tanh
                                          approximation), not SwiGLU */
    int                 post_norms;    /* post_attention_norm and
                                          post_ffw_norm on the block's
                                          outputs before each residual */
    double              embd_scale;    /* embeddings times this (gemma:
                                          sqrt(n_embd)); 1 elsewhere */
    double              attn_scale;    /* the query scale: 1/sqrt(hd_k),
                                          or what the model says */
    double              attn_softcap;  /* scores := c tanh(s / c); 0: none */
    double              final_softcap; /* the same on logits; 0: none */

    uint32_t            n_layer;       /* transformer blocks */
    uint32_t            n_head;        /* query heads */
    uint32_t            n_head_kv;     /* key/value heads (GQA) */
    uint32_t            head_dim_k;    /* per-head key width */
    uint32_t            head_dim_v;    /* per-head value width */
    uint32_t            n_embd;        /* residual stream width */
    uint32_t            n_ff;          /* FFN hidden width */
    uint32_t            n_ctx_train;   /* context length trained for */
    uint32_t            n_vocab;
    uint32_t            n_rot;         /* rotary dimensions per head */

    /* projection widths per token, under 2^32 */
    uint32_t            q_width;       /* n_head * head_dim_k */
    uint32_t            k_width;       /* n_head_kv * head_dim_k */
    uint32_t            v_width;       /* n_head_kv * head_dim_v */
    uint32_t            o_width;       /* n_head * head_dim_v: attention
                                          output, wo's input */

    double              rope_freq_base;
    double              norm_eps;      /* RMSNorm epsilon */

    kvs_rope_scaling_t  rope_scaling;
    double              rope_factor;   /* context scale factor, 1 if none */
    uint32_t            rope_orig_ctx; /* original context, 0 if unknown */
    double              rope_attn_factor;    /* YaRN attention factor */
    double              rope_beta_fast;      /* YaRN ramp */
    double              rope_beta_slow;
    double              rope_low_freq_factor;   /* Llama 3.1 bands */
    double              rope_high_freq_factor;
    int                 has_rope_freqs;  /* a rope_freqs.weight tensor */
    int                 rope_longrope; /* phi3's LongRoPE factor tensors:
                                          0 none; 1 the short ones; 2 the
                                          long ones (n_ctx_train beyond
                                          rope_orig_ctx); their
                                          rope_attn_factor multiplies cos
                                          and sin */

    int                 tied_embeddings; /* no output.weight: reuse embd */
    uint64_t            n_params;        /* elements of all tensors */
} kvs_hparams_t;

int kvs_hparams_read(kvs_hparams_t *hp, const kvs_gguf_t *g, kvs_err_t *err);

const char *kvs_rope_scaling_name(kvs_rope_scaling_t s);

/* Layer l's attention window (positions a query sees, itself included),
 * 0 for full attention: every layer's for phi3, all but every
 * swa_period-th for gemma2 and gemma3. */
static inline uint32_t
kvs_hparams_swa(const kvs_hparams_t *hp, uint32_t l)
{
    if (hp->swa_period != 0 && (l + 1) % hp->swa_period == 0) {
        return 0;
    }

    return hp->n_swa;
}

/* Whether layer l rotates with the local layers' RoPE table
 * (rope_base_swa: gemma3's five of six; every layer with a period of
 * 0).  llama.cpp decides it by the
 * layer pattern once the file declares a window, even one that covers
 * the whole context (kvs_hparams_swa() then says 0), so the window and
 * the table are separate facts. */
static inline int
kvs_hparams_rope_swa(const kvs_hparams_t *hp, uint32_t l)
{
    return hp->rope_base_swa != 0.0
           && (hp->swa_period == 0 || (l + 1) % hp->swa_period != 0);
}

/* When every layer has a window, the largest (a position is read while
 * any layer's window holds it), else 0: positions older than that are
 * read by no layer again, and their KV blocks may go (llama with a
 * window, phi3; gemma only with fewer layers than its period). */
static inline uint32_t
kvs_hparams_swa_all(const kvs_hparams_t *hp)
{
    uint32_t  l, w, most;

    most = 0;

    for (l = 0; l < hp->n_layer; l++) {
        w = kvs_hparams_swa(hp, l);

        if (w == 0) {
            return 0;
        }

        most = w > most ? w : most;
    }

    return most;
}

/* The longrope factor tensor kvs_hparams_read() chose, or NULL. */
const char *kvs_hparams_rope_factors(const kvs_hparams_t *hp);

/*
 * Bytes of K and V cache one token takes across all layers, at
 * bytes_per_elem bytes per cached element (2 for f16/bf16):
 * n_layer x n_head_kv x (head_dim_k + head_dim_v) x bytes_per_elem,
 * which is 2 x layers x kv_heads x head_dim x bytes when K and V widths
 * are equal.
 */
uint64_t kvs_hparams_kv_bytes_per_token(const kvs_hparams_t *hp,
    uint32_t bytes_per_elem);

#endif /* KVS_HPARAMS_H */
