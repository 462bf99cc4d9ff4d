/*
 * kvs_lora: a LoRA adapter in llama.cpp's GGUF layout, read and checked
 * against the base model it is meant for.
 *
 * The layout (what llama.cpp's convert_lora_to_gguf.py writes and its
 * loader accepts): general.type = "adapter", adapter.type = "lora",
 * general.architecture the base's, adapter.lora.alpha (f32; absent or 0
 * means a scale of 1), and for each adapted base matrix W
 * "<W's name>.lora_a" and "<W's name>.lora_b".  In ggml's dimension
 * order (ne[0] innermost), W is [n_in, n_out], lora_a is [n_in, rank]
 * and lora_b is [rank, n_out]: row-major, A is rank rows of n_in and B
 * is n_out rows of rank, and the adapted product is
 *     y = W x + scale * B (A x),  scale = alpha / rank.
 *
 * Invariants: kvs_lora_open*() checks every field before it trusts it
 * (the GGUF reader's checks first, then the keys' types, every tensor's
 * name, dimensions, type and pairing, ranks, and against a base: the
 * architecture and each pair's shapes against W's); a failure names the
 * adapter's tensor and both shapes.  After a successful open every pair
 * is complete, 1 <= rank <= KVS_LORA_MAX_RANK, the A and B copies hold
 * rank * n_in and n_out * rank finite f32 values (the file's, converted
 * from any type kvs_quant reads), and (with a base) n_in and n_out are
 * W's.  Matrices kvserve cannot
 * apply a LoRA to (token_embd, output, norms) are refused, never
 * silently skipped.  The adapter owns its f32 copies; the file is
 * unmapped once they are made.
 */

#ifndef KVS_LORA_H
#define KVS_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"
#include "kvs_gguf.h"
#include "kvs_hparams.h"
#include "kvs_model.h"

#define KVS_LORA_MAX_RANK  1024

/* The per-layer matrices an adapter may adapt (gen-lora's --targets). */
typedef enum {
    KVS_LORA_Q = 0,                   /* attn_q */
    KVS_LORA_K,                       /* attn_k */
    KVS_LORA_V,                       /* attn_v */
    KVS_LORA_O,                       /* attn_output */
    KVS_LORA_GATE,                    /* ffn_gate */
    KVS_LORA_UP,                      /* ffn_up */
    KVS_LORA_DOWN,                    /* ffn_down */
    KVS_LORA_QKV,                     /* attn_qkv (fused, phi3) */
    KVS_LORA_N_TARGETS
} kvs_lora_target_t;

typedef struct {
    char                name[KVS_GGUF_MAX_NAME + 1];  /* W's, NUL-ended */
    uint32_t            layer;
    kvs_lora_target_t   target;
    uint32_t            rank;
    uint64_t            n_in;         /* W's ne[0] */
    uint64_t            n_out;        /* W's ne[1] */
    uint32_t            type_a;       /* the file's types */
    uint32_t            type_b;
    float               scale;        /* alpha / rank, or 1 */
    float              *a;            /* [rank][n_in] */
    float              *b;            /* [n_out][rank] */
} kvs_lora_mat_t;

typedef struct {
    char                arch[KVS_ARCH_MAX];
    char                name[64];     /* general.name, or "" */
    float               alpha;        /* as written; 0: none */
    uint32_t            n_mat;
    kvs_lora_mat_t     *mat;          /* in the file's order */
    uint32_t            rank_max;
    uint32_t            n_layer_max;  /* highest layer + 1 */
    uint64_t            epoch;        /* xxh3-64 of the whole file */
    uint64_t            file_size;
    uint64_t            n_params;     /* elements of all A and B */
} kvs_lora_t;

/*
 * Opens an adapter; base NULL checks the file on its own (info), else
 * also against base (every pair's W must exist with matching shapes).
 */
int kvs_lora_open(kvs_lora_t **out, const char *path,
    const kvs_model_t *base, kvs_err_t *err);

/* The same over a caller's buffer (tests); epoch is its content hash. */
int kvs_lora_open_mem(kvs_lora_t **out, const void *buf, size_t len,
    const kvs_model_t *base, kvs_err_t *err);

void kvs_lora_close(kvs_lora_t *l);

/* 1 when g declares itself an adapter (general.type = "adapter"). */
int kvs_lora_is_adapter(const kvs_gguf_t *g);

/* Short name ("q", ... "qkv") and W's tensor stem ("attn_q", ...). */
const char *kvs_lora_target_name(kvs_lora_target_t t);
const char *kvs_lora_target_stem(kvs_lora_target_t t);

/* The target of a short name, or -1. */
int kvs_lora_target_parse(const char *name, size_t len);

/* The adapter's pair for (layer, target), or NULL. */
const kvs_lora_mat_t *kvs_lora_find(const kvs_lora_t *l, uint32_t layer,
    kvs_lora_target_t target);

/*
 * y[n_out] += m->scale * B (A x) for one row x[n_in]; tmp holds
 * m->rank floats.  The reference every faster path is checked against.
 */
void kvs_lora_apply_row(const kvs_lora_mat_t *m, const float *x, float *y,
    float *tmp);

#endif /* KVS_LORA_H */
