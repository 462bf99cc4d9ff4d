/*
 * kvs_cpu_impl: what the CPU backend's files share (private to
 * src/backend/cpu/): the forward step's state, the product job, the
 * kernel levels and the kernels' entry points.
 *
 *   kvs_cpu.c        weights, K/V storage, the forward's orchestration
 *   kvs_cpu_mm.c     matrix products: dispatch, portable kernels, BLAS,
 *                    Q8_0 activation quantization and weight packing
 *   kvs_cpu_x86.c    the AVX2 / AVX-512 product kernels
 *   kvs_cpu_amx*.c   AMX: detection, the Q8_0 tile kernel
 *   kvs_cpu_attn.c   attention
 *   kvs_cpu_ffn.c    the FFN activation (SwiGLU)
 *   kvs_cpu_exp.h    the vectorized exp both of them use
 *
 * Invariant shared by every kernel: a product output's (or an attention
 * score's) summation order depends only on that output's own shapes,
 * never on the batch, the tile or the thread, so a token's results are
 * the same alone or batched (below KVS_CPU_BLAS_MIN tokens).  Kernel
 * levels may differ from one another in the last bits (not the quantized
 * products of kvs_cpu_qdot's table: kvs_cpu_qdot.h); a process uses one
 * level for every step.
 */

#ifndef KVS_CPU_IMPL_H
#define KVS_CPU_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/kvs_threads.h"
#include "kvs_cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define KVS_CPU_X86  1
#else
#define KVS_CPU_X86  0
#endif

/* Kernel levels, chosen at run time (the build stays generic x86-64). */
#define KVS_CPU_SIMD_NONE    0        /* portable C */
#define KVS_CPU_SIMD_AVX2    1        /* AVX2 + FMA + F16C */
#define KVS_CPU_SIMD_AVX512  2        /* and AVX-512 F/BW/VL + VNNI */
#define KVS_CPU_SIMD_AMX     3        /* and AMX-TILE + AMX-INT8, usable
                                         (kvs_cpu_amx.h) */

/* Output rows per task of a product: small enough that two threads share
 * even stories260K's 64-row matrices, large enough that claiming a task
 * costs nothing next to it.  A multiple of KVS_CPU_Q8P_ROWS. */
#define KVS_CPU_TILE       16

/* Work (multiply-adds, roughly) below which a step's part runs on the
 * caller alone: waking a worker costs more than it saves (stories260K's
 * products), and a worker whose core is taken would hold the caller. */
#define KVS_CPU_PAR_MIN    (1u << 16)

/* From this many tokens on, F32 / F16 / BF16 products go to a batched
 * kernel on tiles of KVS_CPU_BLAS_TILE rows (converted to F32 first
 * unless F32): ours (kvs_cpu_gemm_x86.c) from AVX2 on, whose outputs are
 * each one FMA chain in column order whatever the tile or the batch; the
 * BLAS library's sgemm at the portable level or with KVSERVE_CPU_BLAS=1,
 * whose sum for an output depends on where its tile starts and ends
 * (OpenBLAS's Zen kernels block the rows unevenly), which is why the tile
 * is the same whatever the thread count.  256 rows let two threads share
 * a 512-row matrix.  Below KVS_CPU_BLAS_MIN (decode batches) the 4-row
 * kernels are as fast; their sums (8-lane) differ from the batched
 * kernel's in the last bits, so a prompt's logits may differ in the last
 * bits between a prefill of 64 tokens or more and one of fewer. */
#define KVS_CPU_BLAS_MIN   64
#define KVS_CPU_BLAS_TILE  256

/* Output rows per task of a quantized product from KVS_CPU_BLAS_MIN
 * tokens on: a 768-row matrix makes 12 tasks, which two threads share
 * evenly (256-row tiles made 3, one thread doing two); a multiple of
 * KVS_CPU_Q8P_ROWS.  Each task still reads the whole input, from L2. */
#ifndef KVS_CPU_QTILE
#define KVS_CPU_QTILE      64
#endif

/* Tokens per pass of a quantized product (kvs_cpu_qdot.h) over a task's
 * rows: their int8 inputs stay in L1 / L2 while the rows stream past. */
#ifndef KVS_CPU_QCHUNK
#define KVS_CPU_QCHUNK     16
#endif

/* Query tokens per attention task at most (a query block: one
 * sequence's consecutive positions) where the AVX-512 kernel reads an
 * f32 cache: each K and V row is read from L2 once for all of them, not
 * once per token (kvs_cpu_attn_qb). */
#ifndef KVS_CPU_ATTN_QB
#define KVS_CPU_ATTN_QB    8
#endif

/* Packed Q8_0 (AVX-512 VNNI): rows in groups of 16; per group and block
 * of 32 columns, 8 vectors of [16 rows][4 bytes] (weights + 128, as
 * unsigned bytes) then, in a second array, the 16 rows' f16 scales. */
#define KVS_CPU_Q8P_ROWS   16
#define KVS_CPU_Q8P_BYTES  512        /* weight bytes per group and block */


/* An activation block quantized for the int8 product: d = max|x| / 127,
 * q = lrintf(x / d); c = -128 * sum(q), the packed kernel's correction
 * for its unsigned weights. */
typedef struct {
    float    d;
    int32_t  c;
    int8_t   q[32];
} kvs_cpu_q8_t;


/* One forward step's shapes and buffers, shared by its tasks. */
typedef struct {
    const kvs_cpu_model_t  *cm;
    kvs_cpu_kv_t           *kv;
    const kvs_batch_t      *b;
    const kvs_cpu_layer_t  *ly;       /* the current layer */
    float                  *x;        /* [n][e] residual stream */
    float                  *xb;       /* [n][e] normed / projected */
    float                  *q;        /* [n][qd] */
    float                  *k;        /* [n][kd] */
    float                  *v;        /* [n][vd] */
    float                  *att;      /* [n][od] */
    float                  *h1;       /* [n][f] */
    float                  *h3;       /* [n][f] */
    float                  *kc;       /* f32: the layer's K in block 0,
                                         [bt][kd] per block */
    float                  *vc;       /* ... V [bt][vd] */
    size_t                  bstride;  /* f32: floats from a block to the
                                         next (kv->lo.block_bytes / 4) */
    const uint8_t          *kcb;      /* the layer's K in block 0, bytes
                                         (every dtype) */
    const uint8_t          *vcb;      /* ... V */
    const uint8_t          *ksb;      /* int8, fp8: the layer's K scales in
                                         block 0 [n_head_kv] floats */
    const uint8_t          *vsb;      /* ... V's */
    uint32_t                l;        /* the current layer */
    float                  *sc;       /* [n_threads][sc_stride] scores */
    float                  *wscratch; /* [n_threads][wscratch_stride]
                                         dequantized weight rows */
    size_t                  sc_len;   /* max_ctx rounded up to 16 */
    size_t                  sc_stride; /* kvs_cpu_attn_qb() *
                                          attn_group * sc_len */
    uint32_t               *qb;       /* [n_qb + 1] each query block's
                                         first token, then n
                                         (kvs_cpu_attn_blocks) */
    uint32_t                n_qb;
    size_t                  wscratch_stride;
    const float            *norm;     /* kvs_cpu_tok_task: weights or NULL */
    int                     resid;    /* kvs_cpu_tok_task: add xb first */
    int                     simd;     /* KVS_CPU_SIMD_* */
    kvs_cpu_q8_t           *xq;       /* [n][wrow / 32] Q8_0 inputs */
    struct kvs_cpu_q8k_s   *xk;       /* [n][wrow / 256] Q8_K inputs */
    struct kvs_cpu_q8i_s   *xi;       /* [n][(wrow + 255) / 256] xq's
                                         blocks interleaved (prefill) */
    struct kvs_cpu_q8a_s   *xa;       /* [n / 16][wrow / 32] xq by 16
                                         tokens for the int8 tiles, or
                                         NULL (kvs_cpu_qla_on) */
    struct kvs_cpu_q8ka_s  *xka;      /* [n / 16][wrow / 256] xk by 16
                                         tokens for the int8 tiles, or
                                         NULL (kvs_cpu_qla_on) */
    uint16_t               *xbf;      /* [2][n][wrow] the inputs split
                                         into BF16 pairs for the tiles,
                                         or NULL (kvs_cpu_amxb_on) */
    uint32_t                attn_group; /* query heads per attention
                                          task: those of one K/V head
                                          (kvs_cpu_attn_group), or 1 */
    uint32_t                win;      /* the layer's sliding window, or
                                          0 (kvs_hparams_swa) */
    const kvs_rope_t       *rope;     /* the layer's RoPE table */
    double                 *rope_cs;  /* [n][rope_w] each token's cos and
                                         sin (kvs_rope_angles) */
    uint32_t                rope_w;   /* doubles per token in rope_cs */
    const kvs_rope_t       *rope_of;  /* the table rope_cs holds, NULL
                                         before the first layer */
    int                     rope_fill; /* this layer's tasks fill rope_cs
                                          (its table is not rope_of's) */
    const float            *post;     /* kvs_cpu_tok_task: xb's own norm
                                         before the residual, or NULL */
    float                   softcap;  /* attention scores' cap, 0: none */
    uint32_t                e, f, qd, kd, vd, od;
    float                   eps, scale;
    const uint32_t         *lora_slots; /* [n] adapter slots, or NULL */
    uint32_t                lora_n;   /* rows with an adapter */
    uint32_t                lora_rank; /* their adapters' largest rank */
    uint32_t                lora_tasks; /* groups of one adapter's rows */
    size_t                  lora_stride; /* T of one output: floats */
} kvs_cpu_fw_t;


/* LoRA (kvs_cpu_lora.c): slots checked against kv's; the step's adapted
 * rows grouped by slot (fw->lora_slots, fw->b, fw->kv set); kv's slot
 * indexes and buffers freed. */
int kvs_cpu_lora_check(const kvs_cpu_kv_t *kv, const kvs_batch_t *b,
    const uint32_t *slots, kvs_err_t *err);
int kvs_cpu_lora_prepare(kvs_cpu_fw_t *fw, kvs_err_t *err);

/* An adapted product's output: the base product's y (ldy floats a row)
 * and the adapter's target for it. */
typedef struct {
    kvs_lora_target_t  target;
    float             *y;
    uint32_t           ldy;
} kvs_cpu_lora_out_t;

/* The adapters' products riding on one kvs_cpu_matmul_lora dispatch
 * (kvs_cpu_lora.c): outs[m] is matrix m's output.  The dispatch runs
 * the base product's tiles first, each telling lm when its outputs are
 * written (kvs_cpu_lora_mm_done), then n_tasks adapter tasks, output by
 * output: a group of one adapter's rows under one output, which waits
 * until that output's base values are all written, then reads the
 * adapter's pair once, in order (T = scale A x, then y += B T over all
 * the outputs).  So the adapters cost no dispatch of their own, and each
 * row gets exactly the bits a separate pass would give it (each output's
 * sum is y, then its rank terms in order). */
typedef struct {
    const kvs_cpu_fw_t        *fw;
    size_t                     k;     /* the layer's first pair */
    const float               *x;
    uint32_t                   ldx;
    kvs_cpu_lora_out_t         outs[3];
    uint32_t                   n_outs;
    uint32_t                   n_tasks; /* adapter tasks, 0: no adapted
                                           row */
    _Atomic uint32_t           rows[3]; /* outs[m]'s base rows written */
} kvs_cpu_lora_mm_t;

/* lm for the adapted rows of layer's n_outs (1..3) products of x. */
void kvs_cpu_lora_mm_init(kvs_cpu_lora_mm_t *lm, const kvs_cpu_fw_t *fw,
    uint32_t layer, const float *x, uint32_t ldx,
    const kvs_cpu_lora_out_t *outs, uint32_t n_outs);
/* the base values of outputs o0 .. o1 of matrix m are written */
void kvs_cpu_lora_mm_done(kvs_cpu_lora_mm_t *lm, uint32_t m, uint32_t o0,
    uint32_t o1);
/* adapter task `task` (< n_tasks), after every base tile was claimed */
void kvs_cpu_lora_mm_task(kvs_cpu_lora_mm_t *lm, uint32_t task);
void kvs_cpu_kv_lora_free(kvs_cpu_kv_t *kv);

int kvs_cpu_simd(void);
kvs_threads_t *kvs_cpu_pool(const kvs_cpu_fw_t *fw, double work);

/* Row r of w as floats: in place for F32, else converted into
 * scratch[w->cols] (exact conversions; one product for Q8_0). */
const float *kvs_cpu_row(const kvs_cpu_mat_t *w, uint32_t r,
    float *scratch, int simd);

/* y_m[n][rows_m] = x[n][cols] . w_m^T for up to three matrices of one
 * input, split over kv's pool by tiles of output rows. */
void kvs_cpu_matmul(kvs_cpu_fw_t *fw, const float *x, uint32_t n,
    const kvs_cpu_mat_t *w0, float *y0, const kvs_cpu_mat_t *w1, float *y1,
    const kvs_cpu_mat_t *w2, float *y2);

/* The same, each y_m then adding its adapted rows' low-rank products
 * (lm: its outs in the matrices' order; NULL or no adapted row: none),
 * in the same dispatch to the threads. */
void kvs_cpu_matmul_lora(kvs_cpu_fw_t *fw, const float *x, uint32_t n,
    const kvs_cpu_mat_t *w0, float *y0, const kvs_cpu_mat_t *w1, float *y1,
    const kvs_cpu_mat_t *w2, float *y2, kvs_cpu_lora_mm_t *lm);

void kvs_cpu_q8_quant(const float *x, kvs_cpu_q8_t *dst, uint32_t cols);

/* 1 when KVSERVE_CPU_BLAS=1 asks for the BLAS library's sgemm on prefill
 * tiles (to measure it against ours), else 0; the portable level always
 * uses it. */
int kvs_cpu_blas_forced(void);

/* Whether F16 / BF16 products of KVS_CPU_BLAS_MIN tokens or more go to
 * the AMX-BF16 tiles (kvs_cpu_amxb_rows): simd at AVX-512, the tiles
 * usable, and neither KVSERVE_CPU_GEMM naming another kernel nor
 * KVSERVE_CPU_SIMD capping the level. */
int kvs_cpu_amxb_on(int simd);

/* Whether packed Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and Q4_K products of
 * KVS_CPU_BLAS_MIN tokens or more go to the AMX int8 tiles
 * (kvs_cpu_qla_rows, kvs_cpu_qka_rows: the VNNI kernels' bits): simd at
 * AVX-512, AMX-INT8 usable, and KVSERVE_CPU_SIMD not capping the level
 * (0, 1, 2). */
int kvs_cpu_qla_on(int simd);

/* y[i * ldy + r] = x[i] . w[r] for i < n, r < nr (w: nr contiguous rows
 * of cols floats): one fmaf chain per output, k = 0 .. cols - 1
 * (kvs_cpu_gemm_x86.c; the AVX2 kernel gives the same bits). */
void kvs_cpu_gemm_ref(float *y, size_t ldy, const float *x, uint32_t n,
    uint32_t cols, const float *w, uint32_t nr);

/* Packed Q8_0 (w->pack) row group g: its cols / 32 weight records of
 * KVS_CPU_Q8P_BYTES, returned, and in *wd its [cols / 32][16] f16
 * scales. */
static inline const uint8_t *
kvs_cpu_q8p_group(const kvs_cpu_mat_t *w, uint32_t g, const uint16_t **wd)
{
    size_t          groups, nb;
    const uint8_t  *p;

    groups = (w->rows + KVS_CPU_Q8P_ROWS - 1) / KVS_CPU_Q8P_ROWS;
    nb = w->cols / 32;
    p = w->pack;
    *wd = (const uint16_t *) (p + groups * nb * KVS_CPU_Q8P_BYTES)
          + (size_t) g * nb * KVS_CPU_Q8P_ROWS;

    return p + (size_t) g * nb * KVS_CPU_Q8P_BYTES;
}

/* Bytes of w's packed form (0 unless Q8_0), and the packing into dst
 * (64-byte aligned). */
size_t kvs_cpu_q8p_size(const kvs_cpu_mat_t *w);
void kvs_cpu_q8p_fill(const kvs_cpu_mat_t *w, uint8_t *dst);

/* The same for every type packed at load on AVX-512 VNNI CPUs: Q8_0 as
 * above, Q4_0 .. Q5_1 and IQ4_NL as kvs_cpu_qlp_fill, Q2_K .. Q6_K and
 * IQ4_XS as kvs_cpu_qkp_fill (kvs_cpu_qdot.h). */
size_t kvs_cpu_wpack_size(const kvs_cpu_mat_t *w);
void kvs_cpu_wpack_fill(const kvs_cpu_mat_t *w, uint8_t *dst);

/* Query heads per attention task at this kernel level: the n_head /
 * n_head_kv sharing a K/V head where the kernel reads their K/V rows
 * once for all of them (AVX-512, head sizes multiples of 16), else 1.
 * Tasks are then n * n_head / group. */
uint32_t kvs_cpu_attn_group(const kvs_hparams_t *hp, int simd);
/* The most tokens of a query block with fw's cache and kernel level
 * (KVS_CPU_ATTN_QB, or 1: a task per token); the step's blocks into
 * qb[0 .. count] (fw->b, fw->kv, fw->attn_group, fw->simd set; qb holds
 * n + 1), their count returned.  Tasks are then n_qb * n_head / group. */
uint32_t kvs_cpu_attn_qb(const kvs_cpu_fw_t *fw);
uint32_t kvs_cpu_attn_blocks(const kvs_cpu_fw_t *fw, uint32_t *qb);
void kvs_cpu_attn_task(void *arg, uint32_t task, uint32_t thread);

/* Token i's h1 := silu(h1) * h3 (kvs_cpu_ffn.c). */
void kvs_cpu_swiglu_task(void *arg, uint32_t i, uint32_t thread);

/* Token i's h1 := gelu(h1) * h3, gelu's tanh form (kvs_cpu_ffn.c). */
void kvs_cpu_geglu_task(void *arg, uint32_t i, uint32_t thread);

#if KVS_CPU_X86
void kvs_cpu_mm_rows_avx2(float *y, size_t ldy, const float *x,
    uint32_t n, uint32_t cols, const float *const *w, uint32_t nr);
void kvs_cpu_row_avx2(const kvs_cpu_mat_t *w, const uint8_t *p,
    float *dst);
void kvs_cpu_q8_quant_avx2(const float *x, kvs_cpu_q8_t *dst,
    uint32_t cols);
void kvs_cpu_gemm_avx2(float *y, size_t ldy, const float *x, uint32_t n,
    uint32_t cols, const float *w, uint32_t nr);
void kvs_cpu_mm_rows_avx512(float *y, size_t ldy, const float *x,
    uint32_t n, uint32_t cols, const float *const *w, uint32_t nr);
/* kvs_cpu_gemm_avx2's product to its bits, on a 12 x 32 register tile */
void kvs_cpu_gemm_avx512(float *y, size_t ldy, const float *x, uint32_t n,
    uint32_t cols, const float *w, uint32_t nr);
void kvs_cpu_q8p_rows_avx512(float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8_t *xq, uint32_t n);
#endif

#endif /* KVS_CPU_IMPL_H */
