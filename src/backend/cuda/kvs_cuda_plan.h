/*
 * kvs_cuda_plan: the arithmetic of the CUDA backend that needs no CUDA, so
 * that it is built into libkvserve.a and unit-tested on GPU-less hosts
 * (t/unit/test_cuda_plan.c); src/backend/cuda/ is its only user.
 *
 *   - memory: device bytes of each weight under our dtype rule (matrices
 *     F32, F16 and BF16 stay as stored, Q8_0 becomes BF16; vectors are
 *     F32), the tensors a step reads (kvs_cuda_plan_globals / _layer,
 *     the one list the loader walks too) and the weights allocation they
 *     make, the step workspace carved out of one allocation, and the KV
 *     pool sized from the device memory left;
 *   - graphs: decode batch-size buckets, the split count of decode
 *     attention, the context bucket, and the key of a captured graph;
 *   - packing: a kvs_batch_t turned into the int32 image that is
 *     uploaded once per step and that kvs_k_batch_t's arrays point into.
 *
 * Invariants:
 *   - every size is size_t or uint64_t and every product and sum is
 *     checked; an overflow is KVS_ERANGE, never a wrapped number;
 *   - the packed image's offsets depend only on its padded length L
 *     (kvs_cuda_plan_layout), so a captured graph, whose kernels hold
 *     device addresses inside the image, stays valid for any later batch
 *     of the same bucket;
 *   - packing validates the whole slice before it writes a word of the
 *     image: a rejected batch leaves the image as it was;
 *   - nothing here allocates: the caller provides every array and its
 *     capacity.
 */

#ifndef KVS_CUDA_PLAN_H
#define KVS_CUDA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"
#include "backend/kvs_backend.h"
#include "kv/kvs_batch.h"

/* device element types; the same values as kvs_kernels.h's KVS_K_* */
#define KVS_CUDA_DT_F32      0
#define KVS_CUDA_DT_F16      1
#define KVS_CUDA_DT_BF16     2

#define KVS_CUDA_ALIGN       256     /* bytes; every carved buffer */
#define KVS_CUDA_BUCKET_POW  256     /* buckets double up to here, */
#define KVS_CUDA_BUCKET_STEP 128     /* then grow by this */
#define KVS_CUDA_SPLIT_MIN   256     /* positions per attention part, at
                                        least (a part is a CTA's work) */
#define KVS_CUDA_CTX_MIN     256     /* smallest context bucket */
#define KVS_CUDA_CTA_PER_SM  2       /* decode attention CTAs aimed for */
#define KVS_CUDA_HEAD_MAX    256     /* widest K or V head the attention
                                        kernels take */

/* int32 words per packed sampling parameter (kvs_backend_sample_t and
 * kvs_k_sample_param_t are both four 4-byte fields) */
#define KVS_CUDA_PARAM_WORDS 4


/* The tensors a step reads, in slot order: the globals, then per layer
 * the layer's (named "blk.<l>.<suffix>"), w3 right after w1 so that the
 * gate and up products can run as one.  Which of the optional ones an
 * architecture must have is kvs_model_check_tensors()'s business: here
 * attn_q/k/v and ffn_gate are optional since phi3 fuses them (attn_qkv;
 * ffn_up of 2 n_ff rows, KVS_CUDA_D_UP); gemma's post-norms come last.
 * Shapes are codes into the dimensions kvs_cuda_plan_dims() fills. */
#define KVS_CUDA_GLOBALS    3
#define KVS_CUDA_PER_LAYER  17

typedef struct {
    const char  *name;                /* a layer's: the suffix */
    uint8_t      matrix;
    uint8_t      optional;
    int8_t       ne0;                 /* a KVS_CUDA_D_* code */
    int8_t       ne1;                 /* one, or -1: a vector */
} kvs_cuda_plan_name_t;

#define KVS_CUDA_D_EMBD     0
#define KVS_CUDA_D_Q        1
#define KVS_CUDA_D_K        2
#define KVS_CUDA_D_V        3
#define KVS_CUDA_D_O        4
#define KVS_CUDA_D_FF       5
#define KVS_CUDA_D_VOCAB    6
#define KVS_CUDA_D_HEAD     7         /* hd_k: per-head norms */
#define KVS_CUDA_D_QKV      8         /* q + k + v widths: attn_qkv */
#define KVS_CUDA_D_UP       9         /* n_ff, 2 n_ff when gate is fused */
#define KVS_CUDA_D_N        10

extern const kvs_cuda_plan_name_t  kvs_cuda_plan_globals[KVS_CUDA_GLOBALS];
extern const kvs_cuda_plan_name_t  kvs_cuda_plan_layer[KVS_CUDA_PER_LAYER];

/* Slot s's entry (kvs_cuda_plan_globals, then KVS_CUDA_PER_LAYER per
 * layer) and its tensor's name into name[size]. */
const kvs_cuda_plan_name_t *kvs_cuda_plan_slot(uint32_t s, char *name,
    size_t size);

/* KVS_OK when the CUDA backend computes every layer of hp's
 * architecture (every kvs_arch_t today, sliding windows, soft-capping,
 * GeGLU and post-norms included); KVS_EUNSUPPORTED naming what it lacks
 * otherwise: a head wider than the attention kernels take
 * (KVS_CUDA_HEAD_MAX). */
int kvs_cuda_plan_arch(const kvs_hparams_t *hp, kvs_err_t *err);

/* dim[KVS_CUDA_D_N] of hp, by code. */
void kvs_cuda_plan_dims(const kvs_hparams_t *hp, uint64_t *dim);

/*
 * What loading m takes on the device, as kvs_cuda_weights_place carves
 * it: *bytes, every tensor of the lists above at its device dtype, each
 * KVS_CUDA_ALIGN aligned, then the RoPE table (n_rot / 2 doubles), and
 * a second one for the windowed layers when hp.rope_base_swa != 0; and
 * *kv_dt, the K/V cache's element the backend picks: F32 when every
 * matrix is F32 (the CPU's sums), else BF16.  Reads only m's headers;
 * fails as the loader would on a tensor missing or of a shape or type it
 * cannot take (named).
 */
int kvs_cuda_plan_weights(const kvs_model_t *m, uint64_t *bytes,
    int *kv_dt, kvs_err_t *err);


/* Device dtype of a tensor stored as ggml type `type`: a matrix keeps
 * F32 / F16 / BF16 and turns Q8_0 (widened on the device) and every
 * other type of kvs_quant's table (dequantized on the host at load) into
 * BF16, so those take 2 bytes per element on the device whatever their
 * bits in the file; a vector is always F32; -1 for a type outside the
 * table (refused before, by kvs_model_open). */
int kvs_cuda_plan_dtype(uint32_t type, int matrix);

/* Bytes of one element of a KVS_CUDA_DT_* type; 0 for another value. */
size_t kvs_cuda_plan_dt_size(int dt);

/* Device bytes of a tensor of nelem elements of ggml type `type`
 * (unpadded).  KVS_EUNSUPPORTED for a type we cannot take, KVS_ERANGE on
 * overflow. */
int kvs_cuda_plan_tensor_bytes(uint32_t type, int matrix, uint64_t nelem,
    size_t *bytes, kvs_err_t *err);

/* *off = the current end *total rounded up to KVS_CUDA_ALIGN, then
 * *total = *off + bytes: carving one buffer out of an allocation.
 * KVS_ERANGE on overflow (nothing changed). */
int kvs_cuda_plan_carve(size_t *total, size_t bytes, size_t *off,
    kvs_err_t *err);


/*
 * The step workspace, one device allocation.  Widths are per token; the
 * kernels' scratch sizes come in as numbers so that this file needs no
 * CUDA: part_unit = kvs_k_attn_part_floats(1, n_head, 1, hd_v) (floats
 * per token per split), sample_bytes = kvs_k_sample_scratch_bytes(
 * max_rows, n_vocab).
 */
typedef struct {
    uint32_t  n_embd;
    uint32_t  n_ff;
    uint32_t  q_width;                /* n_head * hd_k */
    uint32_t  k_width;                /* n_head_kv * hd_k */
    uint32_t  v_width;                /* n_head_kv * hd_v */
    uint32_t  o_width;                /* n_head * hd_v */
    uint32_t  n_vocab;
    uint32_t  n_head_kv;
    uint32_t  max_tok;                /* tokens per step (a slice) */
    uint32_t  max_rows;               /* logits rows per step, and the
                                         largest decode bucket */
    uint32_t  max_table;              /* block ids per step */
    uint32_t  max_split;              /* decode attention parts, at most */
    uint32_t  max_ctx;                /* longest context sized for */
    uint32_t  n_sm;                   /* the device's multiprocessors */
    size_t    in_size;                /* bytes of an element of the
                                         widest product input dtype */
    size_t    part_unit;              /* floats */
    size_t    sample_bytes;
    size_t    blas_bytes;             /* cuBLAS workspace */
} kvs_cuda_ws_conf_t;

/* Byte offsets into the workspace, each KVS_CUDA_ALIGN aligned. */
typedef struct {
    size_t    x;          /* [max_tok][n_embd] F32 residual stream */
    size_t    r;          /* [max_tok][n_embd] F32 wo / w2 output */
    size_t    q;          /* [max_tok][q_width] F32 */
    size_t    k;          /* [max_tok][k_width] F32 */
    size_t    v;          /* [max_tok][v_width] F32 */
    size_t    att;        /* [max_tok][o_width] F32 attention output */
    size_t    h;          /* [max_tok][2 * n_ff] F32 gate | up */
    size_t    in;         /* [max_tok][max width] product input, in_size
                             bytes an element */
    size_t    logits;     /* [max_rows][n_vocab] F32 */
    size_t    part;       /* [part_floats] F32 split attention */
    size_t    sample;     /* [sample_bytes] */
    size_t    ids;        /* [max_rows] int32 sampled token ids */
    size_t    blas;       /* [blas_bytes] */
    size_t    pack;       /* [pack_words] int32: the packed batch */
    size_t    total;      /* bytes */
    size_t    part_floats;
    size_t    pack_words;
} kvs_cuda_ws_t;

int kvs_cuda_plan_workspace(kvs_cuda_ws_t *ws, const kvs_cuda_ws_conf_t *c,
    kvs_err_t *err);

/* Int32 words of a packed image of L padded tokens and n_table block ids:
 * 7 per-token arrays, the parameters, then the table. */
int kvs_cuda_plan_pack_words(uint32_t L, uint32_t n_table, size_t *words,
    kvs_err_t *err);


/* Bytes of K plus V of one block over all layers. */
int kvs_cuda_plan_block_bytes(uint32_t n_layer, uint32_t block_tokens,
    uint32_t k_width, uint32_t v_width, size_t elem, uint64_t *bytes,
    kvs_err_t *err);

typedef struct {
    uint64_t  free;                   /* device bytes free before load */
    uint64_t  weights;
    uint64_t  workspace;
    uint64_t  stage;                  /* load-time peak on top (Q8_0
                                         staging), freed before the KV */
    uint64_t  reserve;                /* left to the runtime (graphs,
                                         cuBLAS, modules) */
    uint64_t  block_bytes;
    double    fraction;               /* (0, 1]: of what is left */
    uint32_t  max_blocks;             /* a cap, e.g. INT32_MAX ids */
} kvs_cuda_mem_t;

/*
 * The KV pool: with requested == 0, *n_blocks = floor((free - weights -
 * workspace - reserve) * fraction / block_bytes), capped at max_blocks;
 * otherwise checks that `requested` blocks fit and echoes it.
 * KVS_ENOMEM, with every number in the message, when weights, workspace
 * and staging do not fit, or no block does; KVS_EINVAL for a fraction
 * outside (0, 1] or a zero block size; KVS_ERANGE on overflow.
 */
int kvs_cuda_plan_blocks(const kvs_cuda_mem_t *m, uint32_t requested,
    uint32_t *n_blocks, kvs_err_t *err);


/*
 * Decode buckets: 1, 2, 4, ... KVS_CUDA_BUCKET_POW, then multiples of
 * KVS_CUDA_BUCKET_STEP; the smallest one >= n, clamped to max.  0 when n
 * is 0 or above max (no graph: the step runs eagerly).
 */
uint32_t kvs_cuda_plan_bucket(uint32_t n, uint32_t max);

/* The context a graph is captured for: max_ctx rounded up to a power of
 * two, at least KVS_CUDA_CTX_MIN; 0 when max_ctx is above 2^31. */
uint32_t kvs_cuda_plan_ctx_bucket(uint32_t max_ctx);

/*
 * Parts of decode attention for n_tok tokens of contexts up to max_ctx:
 * enough that n_tok * n_head_kv * parts CTAs fill KVS_CUDA_CTA_PER_SM per
 * multiprocessor, no part shorter than KVS_CUDA_SPLIT_MIN positions, at
 * most max_split, and at most part_cap / (n_tok * part_unit) (the
 * scratch); at least 1.
 */
uint32_t kvs_cuda_plan_split(uint32_t n_tok, uint32_t max_ctx,
    uint32_t n_head_kv, uint32_t n_sm, uint32_t max_split, size_t part_cap,
    size_t part_unit);

/* The graph cache's key: bucket, context bucket, split count, and
 * whether the graph ends in sampling. */
uint64_t kvs_cuda_plan_key(uint32_t bucket, uint32_t ctx, uint32_t split,
    int sample);


/* The packer's fixed inputs and the caller's storage. */
typedef struct {
    uint32_t                n_vocab;
    uint32_t                n_blocks;        /* the cache's */
    uint32_t                block_tokens;
    uint32_t                swa_all;         /* kvs_hparams_swa_all():
                                                blocks before a token's
                                                window may be holes */
    int32_t                *words;           /* [cap_words] the image */
    size_t                  cap_words;
    const kvs_kv_table_t  **seq_tab;         /* [cap_seq] scratch */
    uint32_t               *seq_nb;          /* [cap_seq] scratch */
    uint32_t                cap_seq;
} kvs_cuda_packer_t;

/* One packed slice: counts, and word offsets into words[]. */
typedef struct {
    uint32_t  n_tok;                  /* tokens of the slice */
    uint32_t  n_pad;                  /* L: per-token array length */
    uint32_t  n_seq;                  /* sequences (n_pad when padded) */
    uint32_t  n_run;                  /* runs, pad tokens one each */
    uint32_t  n_want;                 /* entries with want_logits */
    uint32_t  n_rows;                 /* rows[] entries to launch over:
                                         n_want, or n_pad when padded */
    uint32_t  n_table;                /* block ids */
    uint32_t  max_ctx;                /* max pos + 1 of the slice */
    int       decode;                 /* every run is one token */
    size_t    tok, pos, seq, table_off, run_tok0, run_len, rows, params,
              table;
    size_t    n_words;                /* to upload: [0, n_words) */
} kvs_cuda_packed_t;

/*
 * Validates entries [from, from + n) of b against the packer's vocabulary,
 * block size and cache, as kvs_cpu_forward does: KVS_EINVAL naming the
 * entry for a token outside the vocabulary, no table, a position not
 * covered by its table, a table of another block size, or a block id at
 * or beyond n_blocks (a hole included) among those the token's attention
 * reads (from its window's first, with swa_all).  Reads nothing but b.
 */
int kvs_cuda_plan_check(const kvs_cuda_packer_t *pk, const kvs_batch_t *b,
    uint32_t from, uint32_t n, kvs_err_t *err);

/*
 * How many entries from `from` on make the next slice: at most max_tok
 * tokens, max_rows of them wanting logits, and (counting each run's
 * table prefix, an upper bound of what packing copies) max_table block
 * ids, but always at least one entry.  The batch must have passed
 * kvs_cuda_plan_check.
 */
uint32_t kvs_cuda_plan_slice(const kvs_batch_t *b, uint32_t from,
    uint32_t max_tok, uint32_t max_rows, uint32_t max_table,
    uint32_t block_tokens);

/* 1 when entries [from, from + n) of b are all runs of one token. */
int kvs_cuda_plan_decode_only(const kvs_batch_t *b, uint32_t from,
    uint32_t n);

/*
 * Packs entries [from, from + n) of b, padded to pad_to tokens (0 or n:
 * no padding), into pk->words: tokens, positions, sequence indices (one
 * per distinct table pointer, in order of first use), each sequence's
 * table prefix copied once, runs (a token extends the run before it when
 * it has the same table and the next position), the rows of the entries
 * wanting logits, and, when params is not NULL, params[i] for the i-th of
 * them (greedy for padding).  Padding tokens have pos -1, token 0,
 * sequence 0, a run each; padded images have n_seq = n_pad and rows
 * filled to n_pad with row 0.  Padding is only for decode-only slices.
 * KVS_EINVAL as kvs_cuda_plan_check, or for padding a slice that is not
 * decode-only or pad_to < n; KVS_ERANGE when the image or the sequence
 * scratch is too small.  Nothing is written to words on failure.
 */
int kvs_cuda_plan_pack(kvs_cuda_packer_t *pk, const kvs_batch_t *b,
    uint32_t from, uint32_t n, uint32_t pad_to,
    const kvs_backend_sample_t *params, kvs_cuda_packed_t *out,
    kvs_err_t *err);

#endif /* KVS_CUDA_PLAN_H */
