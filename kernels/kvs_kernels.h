/*
 * kvs_kernels: the C interface of our CUDA kernels (kernels/kvs_k_*.cu, one
 * operation per file).  Each operation is a kernel plus one launcher,
 * declared here; the host side of the CUDA backend
 * (src/backend/cuda/) is their only caller.
 *
 * Conventions every launcher keeps:
 *   - it checks shapes and dtypes before launching: a bad argument
 *     returns KVS_K_EARG and launches nothing; otherwise it returns the
 *     cudaError_t of the launch (cudaGetLastError(), 0 when fine).  It
 *     never synchronizes, allocates or prints;
 *   - every pointer is device memory; activations are F32, row-major,
 *     [n_tok][width]; weights keep the GGUF's row-major [rows][cols];
 *   - work goes on the stream given (one per engine), so a launcher can
 *     be captured into a CUDA graph: grid sizes depend only on launcher
 *     arguments, never on device data;
 *   - a token whose pos is negative is padding (a decode graph's bucket
 *     is larger than the batch): kernels read nothing through its table,
 *     write no K/V for it and leave its output rows zero or unspecified,
 *     but never fault.
 *
 * Paged K/V: layer l, block b, slot s of K is at k + ((l * n_blocks + b)
 * * block_tokens + s) * k_width elements of the cache's dtype; token at
 * position p of a sequence lives in block table[p / block_tokens], slot
 * p % block_tokens.  In int8 and fp8 (KVS_K_I8, KVS_K_FP8) head h of
 * that block and layer has the float scale ks[(l * n_blocks + b) *
 * n_head_kv + h] (vs for V), and its elements and scales are the CPU
 * backend's bytes for the same rows (kvs_kv_quant.h's codes and scale
 * rule), kept in these arrays rather than in kvs_kv_layout's one run
 * per block.
 */

#ifndef KVS_KERNELS_H
#define KVS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_K_EARG  (-1)            /* shape or dtype refused, no launch */

typedef enum {
    KVS_K_F32 = 0,
    KVS_K_F16 = 1,
    KVS_K_BF16 = 2,
    KVS_K_I8 = 3,               /* the K/V cache only, with scales */
    KVS_K_FP8 = 4               /* e4m3, the K/V cache only, with scales */
} kvs_k_dtype_t;

/* Bytes of one element of dtype t; 0 for an unknown one. */
size_t kvs_k_dtype_size(int t);

/* The whole K/V cache of an engine (owned by the host side). */
typedef struct {
    void      *k;              /* [n_layer][n_blocks][block_tokens][k_width] */
    void      *v;              /* [n_layer][n_blocks][block_tokens][v_width] */
    float     *ks;             /* I8, FP8: [n_layer][n_blocks][n_head_kv]
                                  K scales; else unused (NULL) */
    float     *vs;             /* ... V scales */
    int        dtype;          /* KVS_K_F32, F16, BF16, I8 or FP8 */
    uint32_t   n_layer;
    uint32_t   n_blocks;
    uint32_t   block_tokens;
    uint32_t   n_head;         /* query heads */
    uint32_t   n_head_kv;      /* K/V heads; n_head % n_head_kv == 0 */
    uint32_t   hd_k;           /* K (and Q) head width */
    uint32_t   hd_v;           /* V head width */
} kvs_k_kv_t;

/*
 * A step's batch as the kernels see it, packed and uploaded by the host
 * once per step (src/backend/cuda/ owns the buffers).
 *
 * Tokens of one sequence are consecutive and in position order; a run
 * is such a stretch (a prefill chunk, or a decode's single token).
 */
typedef struct {
    uint32_t        n_tok;
    uint32_t        n_seq;
    uint32_t        n_run;
    const int32_t  *tok;          /* [n_tok] token ids */
    const int32_t  *pos;          /* [n_tok] position; < 0: padding */
    const int32_t  *seq;          /* [n_tok] sequence index, [0, n_seq) */
    const int32_t  *table_off;    /* [n_seq] where seq's block ids start */
    const int32_t  *table;        /* [sum of tables] block ids */
    const int32_t  *run_tok0;     /* [n_run] first token of run r */
    const int32_t  *run_len;      /* [n_run] its token count, >= 1 */
    uint32_t        max_ctx;      /* bound on pos + 1 over the batch (the
                                     grid of split attention is sized
                                     from it, not from pos) */
} kvs_k_batch_t;

/* out[i] = table[tok[i]] as F32: out [n][n_embd], table [n_vocab][n_embd]
 * of dtype; an id outside [0, n_vocab) writes zeros. */
int kvs_k_embed(float *out, const void *table, int dtype,
    const int32_t *tok, uint32_t n, uint32_t n_embd, uint32_t n_vocab,
    cudaStream_t st);

/*
 * RMSNorm, optionally fused with the residual add, writing the next
 * product's input in its dtype:
 *   if r != NULL: x[row] += r[row]            (x updated in place)
 *   out[i] = w * x[row] / sqrt(mean(x[row]^2) + eps), row = rows ? rows[i]
 *   : i
 * x, r [n_x][d] F32; w [d] F32; out [n][d] of out_dtype; rows [n] or NULL
 * (with rows, r must be NULL).  Sums in F32 as the CPU backend does.
 */
int kvs_k_rmsnorm(void *out, int out_dtype, float *x, const float *r,
    const float *w, const int32_t *rows, uint32_t n, uint32_t d, float eps,
    cudaStream_t st);

/* RMSNorm of each of the n_rows rows of d floats of x, in place, with
 * one weight vector w [d] for every row: a per-head norm of q or k
 * (rows = tokens x heads).  Same formula as kvs_k_rmsnorm. */
int kvs_k_headnorm(float *x, const float *w, uint32_t n_rows, uint32_t d,
    float eps, cudaStream_t st);

/* dst[i] = src[i] converted to dtype (round to nearest even); n elements. */
int kvs_k_convert(void *dst, int dtype, const float *src, size_t n,
    cudaStream_t st);

/* Dequantizes n elements of GGUF Q8_0 blocks (34 bytes: F16 scale, 32
 * int8) into dst of dtype; n % 32 == 0.  Used at load only. */
int kvs_k_q8_0_to(void *dst, int dtype, const void *src, size_t n,
    cudaStream_t st);

/*
 * Adds the optional biases, rotates q and k by RoPE at each token's
 * position and writes k and v into the cache's layer `layer`:
 *   q [n_tok][n_head * hd_k] (rotated in place), k [n_tok][n_head_kv *
 *   hd_k], v [n_tok][n_head_kv * hd_v]; bq/bk/bv of those widths or NULL;
 *   inv_freq [n_rot / 2] doubles (kvs_rope_t's table), mscale its factor,
 *   pairing KVS_ROPE_NORM (0) or KVS_ROPE_NEOX (1).
 * Angles, cos and sin in double, as kvs_rope.c does.  In an int8 or fp8
 * cache k and v are left holding the rotated and biased F32 rows, which
 * a second kernel then quantizes into the cache in batch order, per
 * (sequence, K/V head, K or V), by kvs_kv_quant.h's rule (so a block
 * filled over several steps gets the CPU backend's bytes); b's runs are
 * not needed.
 */
int kvs_k_rope_kv(const kvs_k_kv_t *kv, uint32_t layer,
    const kvs_k_batch_t *b, float *q, float *k, float *v,
    const float *bq, const float *bk, const float *bv,
    const double *inv_freq, uint32_t n_rot, double mscale, int pairing,
    cudaStream_t st);

/* out[t][j] = silu(g[t][j]) * u[t][j] in out_dtype: g and u rows of n_ff
 * floats at row stride ld (floats; they may be two halves of one fused
 * gate/up product), out [n][n_ff]. */
int kvs_k_swiglu(void *out, int out_dtype, const float *g, const float *u,
    size_t ld, uint32_t n, uint32_t n_ff, cudaStream_t st);

/* out[t][j] = gelu(g[t][j]) * u[t][j], gelu's tanh approximation as
 * kvs_cpu_geglu_task computes it (gemma); shapes as kvs_k_swiglu. */
int kvs_k_geglu(void *out, int out_dtype, const float *g, const float *u,
    size_t ld, uint32_t n, uint32_t n_ff, cudaStream_t st);

/* x[i] *= s for n floats (gemma's embedding scale); s finite. */
int kvs_k_scale(float *x, size_t n, float s, cudaStream_t st);

/* x[i] = cap tanh(x[i] / cap) for n floats (gemma2's final logits);
 * cap finite and > 0. */
int kvs_k_softcap(float *x, size_t n, float cap, cudaStream_t st);

/*
 * Attention over the paged cache for runs of one token (decodes), many
 * sequences, grouped-query heads; each token attends positions 0..pos of
 * its sequence.  Split over the K/V length: n_split parts of
 * ceil(max_ctx / n_split) positions each, combined by a second kernel;
 * part [n_tok][n_head][n_split][hd_v + 2] F32 is the scratch for the
 * partial results (kvs_k_attn_part_floats()).  Only tokens of runs with
 * run_len == 1 are computed; q [n_tok][n_head * hd_k], out [n_tok][n_head
 * * hd_v], scale the hparams' attn_scale (usually 1/sqrt(hd_k)).
 * window != 0: a token at pos attends only positions > pos - window
 * (the layer's sliding window, kvs_hparams_swa); softcap != 0 (finite,
 * positive): scaled scores become softcap tanh(s / softcap) before the
 * softmax (gemma2).  Both as the CPU backend computes them.
 */
int kvs_k_attn_decode(float *out, const float *q, const kvs_k_kv_t *kv,
    uint32_t layer, const kvs_k_batch_t *b, float scale, uint32_t window,
    float softcap, uint32_t n_split, float *part, cudaStream_t st);

size_t kvs_k_attn_part_floats(uint32_t n_tok, uint32_t n_head,
    uint32_t n_split, uint32_t hd_v);

/*
 * Attention for runs of more than one token (prefill chunks): a tile of
 * the run's queries shares each K/V block it reads; causal within the
 * chunk (token at pos attends 0..pos), all earlier cached blocks
 * included.  Tokens of runs with run_len == 1 are left to
 * kvs_k_attn_decode.  Shapes, window and softcap as there.
 */
int kvs_k_attn_prefill(float *out, const float *q, const kvs_k_kv_t *kv,
    uint32_t layer, const kvs_k_batch_t *b, float scale, uint32_t window,
    float softcap, cudaStream_t st);

/*
 * Per-row sampling on the device, so only token ids come back: logits
 * [n][n_vocab] F32 (overwritten), params [n], ids [n].  Follows
 * kvs_sample.h's pipeline steps 3 to 10 without min-p: temperature 0 is
 * argmax (lowest id on ties); otherwise divide by temperature, top-k,
 * softmax, top-p, and the draw with the row's coin (drawn on the host
 * from the request's RNG, so the RNG's sequence is the CPU's).  scratch
 * holds kvs_k_sample_scratch_bytes(n, n_vocab) bytes (8 x n x n_vocab:
 * candidates of top-p rows); n_vocab < 2^24.  A row kvs_sample() would
 * refuse (a NaN or +inf logit, all -inf, or overflow after the
 * temperature) gets id -1: the caller fails that request.  A temperature
 * <= 0 or NaN is greedy.
 */
typedef struct {
    float     temperature;     /* 0: greedy */
    int32_t   top_k;           /* 0 or >= n_vocab: off */
    float     top_p;           /* 1: off */
    float     coin;            /* [0, 1) */
} kvs_k_sample_param_t;

int kvs_k_sample(int32_t *ids, float *logits,
    const kvs_k_sample_param_t *params, uint32_t n, uint32_t n_vocab,
    void *scratch, cudaStream_t st);

size_t kvs_k_sample_scratch_bytes(uint32_t n, uint32_t n_vocab);

/*
 * The grouped LoRA product of one adapted matrix (kvs_k_lora.cu): for
 * each task k of the grouping image `words` (kvs_cuda_lora_plan.h's
 * layout for capacity cap: rows [cap], task0 [cap + 1], task_slot
 * [cap]), its rows j in [task0[k], task0[k + 1]), at most 8, all of
 * slot s = task_slot[k], with m = mats[s]:
 *   y[rows[j]][0..n_out) += m.scale * BT^T (A x[rows[j]][0..n_in))
 * A BF16 [m.rank][n_in], BT BF16 [m.rank][n_out] (B transposed); x of
 * x_dtype at row stride ldx, y F32 at row stride ldy.  A slot whose
 * m.rank is 0 changes nothing; rows in no task are not touched.  rank
 * bounds every used m.rank (1..1024) and is T's row stride; t is
 * scratch of cap x rank floats.  n_task 0 launches nothing.
 */
typedef struct {
    const void  *a;            /* BF16 [rank][n_in], device */
    const void  *bt;           /* BF16 [rank][n_out], device */
    uint32_t     rank;         /* 0: no product */
    float        scale;        /* alpha / rank */
} kvs_k_lora_mat_t;

int kvs_k_lora(float *y, size_t ldy, const void *x, int x_dtype, size_t ldx,
    uint32_t n_in, uint32_t n_out, const kvs_k_lora_mat_t *mats,
    const int32_t *words, uint32_t cap, uint32_t n_task, uint32_t rank,
    float *t, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif /* KVS_KERNELS_H */
