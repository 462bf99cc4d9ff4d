/*
 * kvs_cpu: the CPU backend: a model's weights resolved for compute, the
 * K/V storage behind the KV pool's block ids, and one forward step over a
 * batch that mixes prefill chunks and decode tokens of many sequences.
 *
 * This is the reference every other backend is checked against, so the
 * math follows llama2.c run.c step for step (see the fixtures' models
 * README): RMSNorm, q/k/v, RoPE, grouped-query attention over the paged
 * cache, wo, residual, RMSNorm, SwiGLU FFN, residual, final norm, output.
 *
 * Fused tensors (phi3's attn_qkv, its gate/up ffn_up) are split into
 * views: wq, wk and wv (w1 and w3) point at consecutive row ranges of
 * the one tensor, so every kernel sees three (two) ordinary matrices.
 *
 * Weights: matrices stay as stored in the mapping, of any type in
 * kvs_quant's table.  Products (measured on a 2-core AVX-512 Xeon,
 * kvs_cpu_mm.c):
 * F32 / F16 / BF16 rows are converted (if needed) into a small scratch
 * and run through our AVX2 or AVX-512 kernel for batches under 64
 * tokens, through OpenBLAS sgemm on tiles of up to 256 rows for larger
 * ones (prefill chunks); Q8_0 stays quantized: the input rows are
 * quantized to int8 blocks and dotted in int8, for every batch size.  On
 * AVX-512 VNNI CPUs Q8_0 matrices are repacked once at load (the same
 * bytes, interleaved by 16 rows; products then no longer read those
 * pages of the mapping), the one copy of weights this backend makes.
 * Every other table type (the 4- to 6-bit quantizations) is converted a
 * row at a time through the table's dequantize into the same scratch as
 * F16 / BF16 and computed like them: exact conversions, so its logits
 * equal those of the model dequantized to F32 up front (not yet a
 * quantized kernel: issue 19's point 4).
 * Vectors (norms, biases, RoPE frequency factors) are F32 in real GGUFs;
 * F16 and BF16 ones are converted to owned float copies at load.
 * kvs_cpu_model_mem() says what all this takes, mapped and owned, from
 * the same rules, so the engine reports what it holds.
 *
 * Invariants:
 *   - a kvs_cpu_model_t borrows the kvs_model_t's mapping (weights are
 *     pointers into it); the model must outlive it;
 *   - K/V bytes of pool block b are block b of kv->mem, one run of
 *     lo.block_bytes laid out by kvs_kv_layout in the cache's dtype
 *     (kvserve_kv_dtype: f32, f16, bf16, int8, fp8); the pool and tables
 *     decide ownership, this object only stores;
 *   - kvs_cpu_forward() validates its whole batch before touching the
 *     cache, so a rejected batch changes nothing.
 *
 * Threads: a model and a kv object may be read by many threads, but one
 * forward call at a time writes a given kv (the engine thread's).  A kv
 * owns a kvs_threads pool (kvs_cpu_kv_set_threads, default the caller
 * alone) that splits a step's products by output rows and its attention
 * by (token, head); the split never changes a result.  OpenBLAS is held
 * to one thread of its own (set when a kv is made).
 */

#ifndef KVS_CPU_H
#define KVS_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"
#include "base/kvs_threads.h"
#include "backend/kvs_rope.h"
#include "kv/kvs_kv_layout.h"
#include "kv/kvs_kv_table.h"
#include "kv/kvs_batch.h"
#include "model/kvs_lora.h"
#include "model/kvs_model.h"
#include "model/kvs_quant.h"

/* Adapters a kv holds at once (kvs_cpu_kv_set_lora), slots 1..N. */
#define KVS_CPU_LORA_SLOTS  64

/* A slot's image of one adapter (kvs_cpu_lora_image builds it, on any
 * thread; kvs_cpu_kv_lora_install puts it into a slot). */
typedef struct kvs_cpu_lora_slot_s {
    struct kvs_cpu_lora_pair_s
                            *pairs;   /* [n_layer][KVS_LORA_N_TARGETS]:
                                         each pair packed, F16
                                         (kvs_cpu_lora.h) */
    uint16_t                *pk;      /* the packed values */
    uint32_t                 n_layer; /* pairs' layers */
    uint32_t                 rank_max; /* the adapter's largest rank */
} kvs_cpu_lora_slot_t;

/* A weight matrix [rows][cols] as the GGUF stores it (row r: the weights
 * of output r); cols is a multiple of 32 for Q8_0. */
typedef struct {
    const void  *data;                /* [rows][row_bytes], in the mapping */
    size_t       row_bytes;
    uint32_t     type;                /* a kvs_quant table type */
    uint32_t     rows;
    uint32_t     cols;
    const void  *pack;                /* Q8_0 repacked for the AVX-512
                                         VNNI kernel (kvs_cpu_impl.h),
                                         or NULL */
    kvs_quant_dequantize_pt  deq;     /* the table's row conversion,
                                         fetched once at load */
    const struct kvs_cpu_qdot_s *qd;  /* its quantized product
                                         (kvs_cpu_qdot.h), or NULL */
} kvs_cpu_mat_t;

typedef struct {
    const float    *attn_norm;        /* [n_embd] */
    kvs_cpu_mat_t   wq;               /* [n_head * hd_k][n_embd] */
    kvs_cpu_mat_t   wk;               /* [n_head_kv * hd_k][n_embd] */
    kvs_cpu_mat_t   wv;               /* [n_head_kv * hd_v][n_embd] */
    const float    *bq;               /* [n_head * hd_k] or NULL */
    const float    *bk;               /* [n_head_kv * hd_k] or NULL */
    const float    *bv;               /* [n_head_kv * hd_v] or NULL */
    const float    *q_norm;           /* [hd_k] per-head norm, or NULL */
    const float    *k_norm;           /* [hd_k] per-head norm, or NULL */
    kvs_cpu_mat_t   wo;               /* [n_embd][n_head * hd_v] */
    const float    *post_attn_norm;   /* [n_embd] or NULL (gemma) */
    const float    *ffn_norm;         /* [n_embd] */
    const float    *post_ffn_norm;    /* [n_embd] or NULL (gemma) */
    kvs_cpu_mat_t   w1;               /* gate [n_ff][n_embd] */
    kvs_cpu_mat_t   w2;               /* down [n_embd][n_ff] */
    kvs_cpu_mat_t   w3;               /* up [n_ff][n_embd] */
} kvs_cpu_layer_t;

typedef struct {
    const kvs_model_t  *model;
    kvs_hparams_t       hp;           /* copy of model->hp */
    kvs_cpu_mat_t       tok_embd;     /* [n_vocab][n_embd] */
    const float        *out_norm;     /* [n_embd] */
    kvs_cpu_mat_t       output;       /* [n_vocab][n_embd]; tok_embd when
                                         the model ties them */
    kvs_cpu_layer_t    *layers;       /* [n_layer] */
    float             **owned;        /* [n_owned] converted vectors */
    uint32_t            n_owned;
    void               *pack_mem;     /* every mat's pack, or NULL */
    uint64_t            vec_mapped;   /* bytes of F32 vectors read in the
                                         mapping */
    uint64_t            vec_owned;    /* bytes of the converted copies */
    kvs_rope_t          rope;         /* paired as hp.rope_pairing */
    kvs_rope_t          rope_swa;     /* windowed layers' (gemma3), used
                                         when has_rope_swa */
    int                 has_rope_swa;
} kvs_cpu_model_t;

typedef struct {
    uint32_t   n_layer;
    uint32_t   n_blocks;
    uint32_t   block_tokens;
    uint32_t   k_width;               /* elements per token per layer, K:
                                         hp.k_width */
    uint32_t   v_width;               /* same for V: hp.v_width */
    kvs_kv_layout_t
               lo;                    /* a block's bytes (kvs_kv_layout.h),
                                         its dtype */
    uint8_t   *mem;                   /* [n_blocks][lo.block_bytes], block
                                         b at b x block_bytes */
    float     *act;                   /* [act_cap] activations of the
                                         last step, grown as batches grow
                                         and reused, so a steady step
                                         loop allocates nothing */
    size_t     act_cap;               /* floats */
    kvs_threads_t
              *threads;               /* NULL: the caller's thread only */
    kvs_cpu_lora_slot_t
              *lora[KVS_CPU_LORA_SLOTS];  /* slot s at [s - 1], owned;
                                             NULL: empty */
    uint32_t  *lora_rows;             /* a step's adapted rows, grouped */
    size_t     lora_rows_cap;
    float     *lora_tmp;              /* [n_threads][group][rank] */
    size_t     lora_tmp_cap;
} kvs_cpu_kv_t;

/*
 * Resolves every tensor of m (matrices F32, F16, BF16 or Q8_0, vectors
 * F32, F16 or BF16: another type is KVS_EUNSUPPORTED naming the tensor)
 * and builds the RoPE table.
 * *out is NULL on failure.
 */
int kvs_cpu_model_new(kvs_cpu_model_t **out, const kvs_model_t *m,
    kvs_err_t *err);
void kvs_cpu_model_free(kvs_cpu_model_t *cm);

/*
 * What cm's weights take, bytes: *mapped, in the model's mapping as
 * stored (every matrix but those repacked, F32 vectors); *owned, in
 * copies cm holds (vectors converted to F32, matrices repacked).  A
 * matrix shared by two roles (tied embeddings) counts once.
 */
void kvs_cpu_model_mem(const kvs_cpu_model_t *cm, uint64_t *mapped,
    uint64_t *owned);

/* The same figures for model m without keeping a model: resolved and
 * converted, never repacked (only sized).  Fails as kvs_cpu_model_new. */
int kvs_cpu_model_footprint(const kvs_model_t *m, uint64_t *mapped,
    uint64_t *owned, kvs_err_t *err);

/* The product kernels this process computes with, in words, into buf
 * (returned): the level (portable C, avx2, avx512 (vnni), avx512 (vnni)
 * + amx) and whether AMX tiles are used, or why not (kvs_cpu_amx.c).
 * The first call may ask Linux for the tile state (once per process). */
const char *kvs_cpu_kernels(char *buf, size_t len);

/* K/V storage for a pool of n_blocks blocks of block_tokens tokens, zeroed,
 * in f32.  KVS_EINVAL for zero sizes, KVS_ERANGE if the byte count
 * overflows, KVS_ENOMEM. */
int kvs_cpu_kv_new(kvs_cpu_kv_t **out, const kvs_cpu_model_t *cm,
    uint32_t n_blocks, uint32_t block_tokens, kvs_err_t *err);

/* The same in dtype (a kvs_kv_dtype_t): f32, f16, bf16, int8 or fp8;
 * another is KVS_EUNSUPPORTED naming it. */
int kvs_cpu_kv_new_dtype(kvs_cpu_kv_t **out, const kvs_cpu_model_t *cm,
    uint32_t n_blocks, uint32_t block_tokens, uint32_t dtype,
    kvs_err_t *err);

/* Bytes of block b, or NULL for b >= n_blocks: lo.block_bytes opaque
 * bytes (copied whole, e.g. to another block or a lower tier). */
uint8_t *kvs_cpu_kv_block(const kvs_cpu_kv_t *kv, uint32_t b);

/*
 * Stores row (K when v == 0, V else: k_width / v_width floats) at slot u
 * of block b, layer l, in kv's dtype.  In int8 and fp8 a head's scale is
 * its block's largest |x| so far over the dtype's largest code
 * (kvs_kv_quant.h): writing slot 0 starts the block afresh (slots are
 * written in order from 0: a sequence writes from its n_computed on),
 * and a row larger than the scale grows it and requantizes the block's
 * slots 0..u-1 of that head to the new scale.  Callers keep writes to
 * one block in one thread, in slot order.
 */
void kvs_cpu_kv_write(kvs_cpu_kv_t *kv, uint32_t b, uint32_t l, uint32_t u,
    int v, const float *row);

/* The stored row back in floats (dequantized), for tests and checks. */
void kvs_cpu_kv_read(const kvs_cpu_kv_t *kv, uint32_t b, uint32_t l,
    uint32_t u, int v, float *row);

/* The same two on one block's bytes blk laid out by lo, with no kv
 * object: what gpu_check compares the CUDA cache's bytes with. */
void kvs_cpu_block_write(const kvs_kv_layout_t *lo, uint8_t *blk,
    uint32_t l, uint32_t u, int v, const float *row);
void kvs_cpu_block_read(const kvs_kv_layout_t *lo, const uint8_t *blk,
    uint32_t l, uint32_t u, int v, float *row);
void kvs_cpu_kv_free(kvs_cpu_kv_t *kv);

/*
 * Runs kv's forward steps on n threads counting the caller (default 1:
 * the caller alone); n - 1 workers are created here, never at load time,
 * and joined by kvs_cpu_kv_free() or a later call.  Results do not depend
 * on n.  KVS_EINVAL for n == 0 or above KVS_THREADS_MAX, KVS_EIO if a
 * thread cannot be created (the old setting is kept).  Not while a
 * forward call on kv runs.
 */
int kvs_cpu_kv_set_threads(kvs_cpu_kv_t *kv, unsigned n, kvs_err_t *err);

/*
 * One forward step: writes every token's K/V into its slot and, for the
 * entries with want_logits, their logits in batch order into
 * logits[n_want][n_vocab] (NULL allowed when n_want is 0).  KVS_EINVAL
 * for a bad entry (token, position not covered by its table, table of
 * another block size or with ids beyond the kv's blocks), nothing
 * written; KVS_ENOMEM for scratch.
 */
int kvs_cpu_forward(const kvs_cpu_model_t *cm, kvs_cpu_kv_t *kv,
    const kvs_batch_t *b, float *logits, kvs_err_t *err);

/*
 * LoRA (kvs_cpu_lora.c).  kvs_cpu_kv_set_lora() puts adapter l (checked
 * against cm: every pair must be a matrix the forward multiplies; NULL
 * empties the slot) into slot 1..KVS_CPU_LORA_SLOTS of kv, packed into
 * an image of the slot's own (l is not read again).  It is the two
 * halves below in one:
 *
 *   kvs_cpu_lora_image()      checks l against cm and packs it into a
 *                             new image *img, the caller's: reads only
 *                             cm (never changed after kvs_cpu_model_new)
 *                             and l, so any thread may run it while
 *                             another steps kv;
 *   kvs_cpu_kv_lora_install() puts img (NULL: none) into the slot, a
 *                             pointer swap (the thread that steps kv,
 *                             between steps); *spent := the slot's last
 *                             image, the caller's to free;
 *   kvs_cpu_lora_image_free() frees an image (NULL: nothing), any thread.
 *
 * kvs_cpu_forward_lora() is kvs_cpu_forward() with slots[b->n]
 * naming each entry's adapter (0: none; NULL: none for all): the base
 * products once for the whole batch, then each adapted row's own
 * low-rank product.  An entry naming an empty slot is KVS_EINVAL before
 * anything is written.
 */
int kvs_cpu_kv_set_lora(kvs_cpu_kv_t *kv, const kvs_cpu_model_t *cm,
    uint32_t slot, const kvs_lora_t *l, kvs_err_t *err);
int kvs_cpu_lora_image(const kvs_cpu_model_t *cm, const kvs_lora_t *l,
    kvs_cpu_lora_slot_t **img, kvs_err_t *err);
int kvs_cpu_kv_lora_install(kvs_cpu_kv_t *kv, uint32_t slot,
    kvs_cpu_lora_slot_t *img, kvs_cpu_lora_slot_t **spent, kvs_err_t *err);
void kvs_cpu_lora_image_free(kvs_cpu_lora_slot_t *img);
int kvs_cpu_forward_lora(const kvs_cpu_model_t *cm, kvs_cpu_kv_t *kv,
    const kvs_batch_t *b, const uint32_t *slots, float *logits,
    kvs_err_t *err);

#endif /* KVS_CPU_H */
