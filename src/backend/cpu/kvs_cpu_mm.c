/*
 * kvs_cpu_mm: the CPU backend's matrix products y = x . w^T: the kernel
 * level chosen at run time, the portable kernels, the split into tasks
 * of output rows, sgemm for prefill chunks, and Q8_0 (activation
 * quantization, weight packing for the AVX-512 VNNI kernel).
 *
 * Products: each output of our kernels is one fixed-order sum over the
 * row (8- or 16-lane FMA sums then a fixed horizontal sum on AVX2 /
 * AVX-512, a plain sum in the portable kernel); that order does not
 * depend on the batch, the thread or the tile, so a token's results are
 * the same alone or batched (stories260K's texts stay byte exact with
 * it).  Non-F32 rows are converted four at a time into the thread's
 * scratch (exact conversions; types other than F16 / BF16 / Q8_0 and
 * those below through kvs_quant's table), reused by every token of the
 * step.  From KVS_CPU_BLAS_MIN tokens on, F32 / F16 / BF16 (and those
 * converted types) go to the batched kernel instead, on tiles of up to
 * KVS_CPU_BLAS_TILE rows: kvs_cpu_gemm_avx2 (one FMA chain per output,
 * independent of the tile and the batch) from AVX2 on (its AVX-512
 * twin kvs_cpu_gemm_avx512, the same bits, when KVSERVE_CPU_GEMM=avx512
 * asks for it), else the BLAS
 * library's sgemm, whose sums depend on the tiles' bounds, which depend
 * only on the matrix, never on the threads; either differs from the
 * 4-row kernels in the last bits (~2e-7 relative).  On a CPU with
 * AMX-BF16, F16 and BF16 take the BF16 tiles instead, in tasks of
 * KVS_CPU_AMXB_TILE rows (kvs_cpu_amxb_x86.c: the inputs split into two
 * BF16 parts once per product, ~1e-5 relative from the F32 kernels).
 *
 * The types of kvs_cpu_qdot's table (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
 * IQ4_NL with a Q8_0-style input; Q2_K .. Q6_K and IQ4_XS with the input
 * quantized per 256 columns, kvs_cpu_q8k_t) stay quantized for every
 * batch size, so that batching still changes nothing: the input is
 * quantized once per product into int8 blocks (float scales, the same
 * bits on every CPU) and each output is built from exact int32 sums per
 * block, scaled and summed in a float order fixed by the row length
 * (kvs_cpu_qdot.h), the same for the portable and AVX2 kernels.  A task
 * runs its rows over chunks of tokens whose inputs stay in cache, each
 * row's blocks unpacked once for the chunk's tokens; from
 * KVS_CPU_BLAS_MIN tokens on a task is KVS_CPU_QTILE rows (the product
 * never depends on the tile), and from KVS_CPU_QLI_MIN tokens the
 * 32-column types' AVX2 kernels take the input interleaved by groups of
 * 8 blocks too (kvs_cpu_q8i_t, filled once per product).  With AVX-512 VNNI,
 * Q8_0's weights were packed at load (kvs_cpu_q8p_fill) and its kernel
 * takes 16 rows by up to 8 tokens per pass instead (its own float order);
 * Q4_0, Q4_1, Q5_0, Q5_1 and IQ4_NL likewise (kvs_cpu_qlp_fill, 16 rows
 * by 2 tokens per pass, the portable kernel's bits), and the 256-column
 * types, Q2_K .. Q6_K and IQ4_XS (kvs_cpu_qkp_fill, 16 rows by 4 tokens,
 * the portable kernel's bits).  With AMX tiles (KVS_CPU_SIMD_AMX), Q8_0
 * takes the same packed weights through kvs_cpu_amx_q8_rows instead (16
 * rows by 16 tokens per tile product, for every n: the portable
 * kernel's bits, so a token's results still do not depend on its
 * batch).  Where the CPU has AMX-INT8 (kvs_cpu_qla_on, by default),
 * Q8_0's, the Q4_0 family's and Q4_K's products of KVS_CPU_BLAS_MIN
 * tokens or more take kvs_cpu_qla_rows / kvs_cpu_qka_rows (int8 tiles,
 * the VNNI kernels' bits), their input also filled by 16 tokens
 * (kvs_cpu_q8a_t, kvs_cpu_q8ka_t) with the quantization.  Below
 * KVS_CPU_BLAS_MIN tokens a quantized product's tasks go to the threads
 * as contiguous ranges (kvs_threads_run_ranges), so each thread streams
 * one stretch of the weights; which thread computes a row never changes
 * its bits.
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "kvs_cpu_amx.h"
#include "kvs_cpu_impl.h"
#include "kvs_cpu_qdot.h"

#if KVS_CPU_X86
#include <cpuid.h>
#endif


/* Input bytes of the tokens a quantized product takes per pass over a
 * tile's rows: those tokens' blocks stay in L2 while every row reads
 * them (a 512-token prefill's whole input would not). */
#ifndef KVS_CPU_QDOT_CHUNK
#define KVS_CPU_QDOT_CHUNK  (64 * 1024)
#endif


/* Up to three products of one input, split into row tiles. */
typedef struct {
    const float            *x;        /* [n][cols] */
    const kvs_cpu_mat_t    *w[3];     /* NULL when unused */
    float                  *y[3];     /* [n][w->rows] */
    uint32_t                first[5]; /* first task of w[m]; [3] is the
                                         count, [4] a sentinel */
    uint32_t                n;
    uint32_t                tile;     /* rows per task */
    int                     simd;
    int                     blas;     /* kvs_cpu_blas_forced() */
    int                     gemm512;  /* kvs_cpu_gemm512_asked() */
    float                  *scratch;  /* [n_threads][scratch_stride] */
    size_t                  scratch_stride;
    kvs_cpu_q8_t           *xq;       /* [n][cols / 32] or NULL */
    kvs_cpu_q8k_t          *xk;       /* [n][cols / 256] or NULL */
    kvs_cpu_q8i_t          *xi;       /* [n][(cols + 255) / 256] xq
                                         interleaved, or NULL */
    kvs_cpu_q8a_t          *xa;       /* [n / 16][cols / 32] xq by 16
                                         tokens for the tiles, or NULL */
    kvs_cpu_q8ka_t         *xka;      /* [n / 16][cols / 256] xk by 16
                                         tokens for the tiles, or NULL */
    uint16_t               *xbh;      /* [n][cols] the inputs' BF16 high
                                         parts, for the tiles, or NULL */
    uint16_t               *xbl;      /* [n][cols] their low parts */
    uint32_t                cols;     /* the input's */
    kvs_cpu_lora_mm_t      *lm;       /* adapters riding along, or NULL */
} kvs_cpu_mm_job_t;


/* a task's rows start on a packed Q8_0 group; a tile task's rows fit
 * the thread's weight scratch */
_Static_assert(KVS_CPU_AMXB_TILE <= KVS_CPU_BLAS_TILE
               && KVS_CPU_AMXB_TILE % 32 == 0,
               "a tile task must fit the weight scratch");
_Static_assert(KVS_CPU_TILE % KVS_CPU_Q8P_ROWS == 0
               && KVS_CPU_BLAS_TILE % KVS_CPU_Q8P_ROWS == 0
               && KVS_CPU_QTILE % KVS_CPU_Q8P_ROWS == 0,
               "product tiles must hold whole packed Q8_0 row groups");


static void kvs_cpu_mm_rows(float *y, size_t ldy, const float *x,
    uint32_t n, uint32_t cols, const float *const *w, uint32_t nr);
static void kvs_cpu_mm_task(void *arg, uint32_t task, uint32_t thread);
static void kvs_cpu_mm_quant_task(void *arg, uint32_t i, uint32_t thread);


#if KVS_CPU_X86

/* From CPUID itself: clang's __builtin_cpu_supports() knows no "f16c". */
static int
kvs_cpu_has_f16c(void)
{
    unsigned  a, b, c, d;

    if (__get_cpuid(1, &a, &b, &c, &d) == 0) {
        return 0;
    }

    return (c & bit_F16C) != 0;
}

#endif


/* The kernel level of this CPU; KVSERVE_CPU_SIMD=0 in the environment
 * selects the portable kernels (to compare them, or to rule the others
 * out), KVSERVE_CPU_SIMD=1 caps the level at AVX2, 2 at AVX-512.  AMX
 * tiles only when asked for, KVSERVE_CPU_SIMD=3: on the one AMX host
 * measured (2026-12-04) the tile kernel ran 100m Q8_0 prefill at 0.87x
 * the VNNI kernel's speed at one thread and 0.63x at two
 * (docs/performance.md, "AMX tiles for Q8_0"). */
int
kvs_cpu_simd(void)
{
#if KVS_CPU_X86
    int          level;
    const char  *env;

    env = getenv("KVSERVE_CPU_SIMD");
    if (env != NULL && strcmp(env, "0") == 0) {
        return KVS_CPU_SIMD_NONE;
    }

    __builtin_cpu_init();

    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")
        || !kvs_cpu_has_f16c())
    {
        return KVS_CPU_SIMD_NONE;
    }

    level = KVS_CPU_SIMD_AVX2;

    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512vl")
        && __builtin_cpu_supports("avx512vnni")
        && (env == NULL || strcmp(env, "1") != 0))
    {
        level = KVS_CPU_SIMD_AVX512;

        /* the tiles: asked of Linux once per process, only when wanted */
        if (env != NULL && strcmp(env, "3") == 0
            && (kvs_cpu_amx_ready(NULL) & KVS_CPU_AMX_INT8))
        {
            level = KVS_CPU_SIMD_AMX;
        }
    }

    return level;
#else
    return KVS_CPU_SIMD_NONE;
#endif
}


int
kvs_cpu_blas_forced(void)
{
    const char  *env;

    env = getenv("KVSERVE_CPU_BLAS");

    return env != NULL && strcmp(env, "1") == 0;
}


/*
 * KVSERVE_CPU_GEMM=avx512: prefill products on kvs_cpu_gemm_avx512 (the
 * AVX2 kernel's bits) where the level is AVX-512.  Asked for, not by
 * default: on this project's AMD host (Zen 4, whose 512-bit FMAs take
 * two 256-bit passes) it measured no faster than AVX2, and no CPU with
 * two 512-bit FMA units, where it should be, has measured it yet
 * (docs/performance.md, "An AVX-512 batched product").
 */
static int
kvs_cpu_gemm512_asked(void)
{
    const char  *env;

    env = getenv("KVSERVE_CPU_GEMM");

    return env != NULL && strcmp(env, "avx512") == 0;
}


/*
 * F16 and BF16 products of KVS_CPU_BLAS_MIN tokens or more go to the
 * AMX-BF16 tiles (kvs_cpu_amxb_x86.c) where the CPU has them, unless
 * KVSERVE_CPU_GEMM names another kernel (avx2, avx512) or
 * KVSERVE_CPU_SIMD caps the level (0, 1, 2).  On the one AMX
 * host measured (2026-12-04) they ran 100m prefill 2.6x (F16) and 3.0x
 * (BF16) as fast as the F32 kernel at one thread, the logits within
 * 7.2e-6 of the largest (docs/performance.md, "BF16 tiles").  Their
 * sums differ from the F32 kernels' in the last bits: the inputs are
 * carried as two BF16 numbers (16 significant bits).
 */
int
kvs_cpu_amxb_on(int simd)
{
    const char  *env;

    env = getenv("KVSERVE_CPU_GEMM");

    if (env != NULL && env[0] != '\0' && strcmp(env, "amx") != 0) {
        return 0;
    }

    /* KVSERVE_CPU_SIMD=0, 1 or 2 caps the kernels below the tiles and
     * leaves AMX unasked */
    env = getenv("KVSERVE_CPU_SIMD");

    if (env != NULL && (strcmp(env, "0") == 0 || strcmp(env, "1") == 0
                        || strcmp(env, "2") == 0))
    {
        return 0;
    }

    return simd >= KVS_CPU_SIMD_AVX512 && !kvs_cpu_blas_forced()
           && (kvs_cpu_amx_ready(NULL) & KVS_CPU_AMX_BF16) != 0;
}


/*
 * Packed Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and Q4_K products of
 * KVS_CPU_BLAS_MIN tokens or more go to the AMX int8 tiles
 * (kvs_cpu_qla_x86.c) where the CPU has them, unless KVSERVE_CPU_SIMD
 * caps the level (0, 1, 2).  Their bits are the VNNI kernels', so nothing
 * but the time depends on it: on the AMX host measured (2026-12-06) the
 * products ran 1.2-1.8x as fast (docs/performance.md, "Q4_0 and Q4_K on
 * int8 tiles" and "Q8_0 and Q4_K on int8 tiles, again").
 */
int
kvs_cpu_qla_on(int simd)
{
    const char  *env;

    env = getenv("KVSERVE_CPU_SIMD");

    if (env != NULL && (strcmp(env, "0") == 0 || strcmp(env, "1") == 0
                        || strcmp(env, "2") == 0))
    {
        return 0;
    }

    return simd >= KVS_CPU_SIMD_AVX512
           && (kvs_cpu_amx_ready(NULL) & KVS_CPU_AMX_INT8) != 0;
}


/* w's products go to the tiles when the job has the split inputs */
static int
kvs_cpu_amxb_takes(const kvs_cpu_mat_t *w)
{
    return (w->type == KVS_GGML_F16 || w->type == KVS_GGML_BF16)
           && w->cols % 32 == 0;
}


/* kv's pool when work is worth splitting, else NULL: the caller alone. */
kvs_threads_t *
kvs_cpu_pool(const kvs_cpu_fw_t *fw, double work)
{
    return work < KVS_CPU_PAR_MIN ? NULL : fw->kv->threads;
}


/* The AVX2 twin converts the same values (every conversion here is
 * exact, or one float product for Q8_0), so which one runs never changes
 * a result.  Every other table type goes through the table's own row
 * conversion (w->deq, fetched at load: no switch on its type per row),
 * exact too, so its products are those of its weights dequantized to F32
 * up front. */
const float *
kvs_cpu_row(const kvs_cpu_mat_t *w, uint32_t r, float *scratch, int simd)
{
    uint32_t         j;
    const uint8_t   *p;
    const uint16_t  *h;

    p = (const uint8_t *) w->data + (size_t) r * w->row_bytes;

    switch (w->type) {
    case KVS_GGML_F32:
        return (const float *) p;

    case KVS_GGML_F16:
    case KVS_GGML_BF16:
    case KVS_GGML_Q8_0:
        break;

    default:
        w->deq(p, scratch, w->cols);
        return scratch;
    }

#if KVS_CPU_X86
    if (simd >= KVS_CPU_SIMD_AVX2) {
        kvs_cpu_row_avx2(w, p, scratch);
        return scratch;
    }
#else
    (void) simd;
#endif

    switch (w->type) {
    case KVS_GGML_F16:
        h = (const uint16_t *) p;
        for (j = 0; j < w->cols; j++) {
            scratch[j] = kvs_f16_to_f32(h[j]);
        }
        break;

    case KVS_GGML_BF16:
        h = (const uint16_t *) p;
        for (j = 0; j < w->cols; j++) {
            scratch[j] = kvs_bf16_to_f32(h[j]);
        }
        break;

    default: /* Q8_0 */
        kvs_q8_0_dequantize(p, scratch, w->cols);
        break;
    }

    return scratch;
}


/*
 * y[i][r] = x[i] . w[r] for the nr (1..4) rows w[0..nr) and every token
 * i < n, in run.c's order: one float sum from j = 0 up.  The portable
 * path, for CPUs without AVX2/FMA.
 */
static void
kvs_cpu_mm_rows(float *y, size_t ldy, const float *x, uint32_t n,
    uint32_t cols, const float *const *w, uint32_t nr)
{
    uint32_t      i, r, j;
    float         s;
    const float  *xr, *wr;

    for (r = 0; r < nr; r++) {
        wr = w[r];

        for (i = 0; i < n; i++) {
            xr = x + (size_t) i * cols;
            s = 0.0f;

            for (j = 0; j < cols; j++) {
                s += wr[j] * xr[j];
            }

            y[(size_t) i * ldy + r] = s;
        }
    }
}


/* x[cols] as Q8_0-like blocks with a float scale: dst[cols / 32].  The
 * same on every CPU, so a Q8_0 model's inputs do not depend on the
 * kernel level. */
void
kvs_cpu_q8_quant(const float *x, kvs_cpu_q8_t *dst, uint32_t cols)
{
    float     amax, d, id;
    int32_t   sum;
    uint32_t  b, j;

    for (b = 0; b < cols / KVS_Q8_0_BLOCK; b++) {
        amax = 0.0f;

        for (j = 0; j < KVS_Q8_0_BLOCK; j++) {
            amax = fmaxf(amax, fabsf(x[j]));
        }

        d = amax / 127.0f;
        id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[b].d = d;
        sum = 0;

        for (j = 0; j < KVS_Q8_0_BLOCK; j++) {
            dst[b].q[j] = (int8_t) lrintf(x[j] * id);
            sum += dst[b].q[j];
        }

        dst[b].c = -128 * sum;
        x += KVS_Q8_0_BLOCK;
    }
}


size_t
kvs_cpu_q8p_size(const kvs_cpu_mat_t *w)
{
    size_t  groups, blocks;

    if (w->data == NULL || w->type != KVS_GGML_Q8_0) {
        return 0;
    }

    groups = (w->rows + KVS_CPU_Q8P_ROWS - 1) / KVS_CPU_Q8P_ROWS;
    blocks = w->cols / KVS_Q8_0_BLOCK;

    /* weights, then the f16 scales; a multiple of 64 bytes */
    return (groups * blocks * (KVS_CPU_Q8P_BYTES + 2 * KVS_CPU_Q8P_ROWS)
            + 63) & ~(size_t) 63;
}


/* Bytes of w's packed copy at load on AVX-512 VNNI CPUs: Q8_0's
 * (below), the 32-column 4- and 5-bit types' (kvs_cpu_qlp_x86.c), or
 * the 256-column types' (kvs_cpu_qkp_x86.c); 0 for every other type. */
size_t
kvs_cpu_wpack_size(const kvs_cpu_mat_t *w)
{
    if (w->type == KVS_GGML_Q8_0) {
        return kvs_cpu_q8p_size(w);
    }

    return kvs_cpu_qkp_rec(w->type) != 0 ? kvs_cpu_qkp_size(w)
                                         : kvs_cpu_qlp_size(w);
}


void
kvs_cpu_wpack_fill(const kvs_cpu_mat_t *w, uint8_t *dst)
{
    if (w->type == KVS_GGML_Q8_0) {
        kvs_cpu_q8p_fill(w, dst);

    } else if (kvs_cpu_qkp_rec(w->type) != 0) {
        kvs_cpu_qkp_fill(w, dst);

    } else {
        kvs_cpu_qlp_fill(w, dst);
    }
}


/*
 * w's Q8_0 bytes in the packed layout (kvs_cpu_impl.h): for row group g
 * and block b, vector k (0..7) holds for each of the 16 rows r its bytes
 * 4k..4k+3 plus 128 (as unsigned: the VNNI product takes one unsigned
 * operand; the input's sum corrects it exactly); the rows past the
 * matrix's are zero weights.  Scales follow as [g][b][16] f16.  Moved
 * 4 bytes at a time (adding 128 to each byte is flipping its top bit):
 * this runs once per load over every Q8_0 weight.
 */
void
kvs_cpu_q8p_fill(const kvs_cpu_mat_t *w, uint8_t *dst)
{
    size_t          groups, blocks, g, b, k, r, row;
    uint8_t        *qd;
    uint16_t       *dd;
    uint32_t        word;
    const uint8_t  *src;

    groups = (w->rows + KVS_CPU_Q8P_ROWS - 1) / KVS_CPU_Q8P_ROWS;
    blocks = w->cols / KVS_Q8_0_BLOCK;
    dd = (uint16_t *) (dst + groups * blocks * KVS_CPU_Q8P_BYTES);

    for (g = 0; g < groups; g++) {
        for (r = 0; r < KVS_CPU_Q8P_ROWS; r++) {
            row = g * KVS_CPU_Q8P_ROWS + r;
            src = (const uint8_t *) w->data + row * w->row_bytes;

            for (b = 0; b < blocks; b++) {
                qd = dst + (g * blocks + b) * KVS_CPU_Q8P_BYTES + r * 4;

                if (row >= w->rows) {
                    dd[(g * blocks + b) * KVS_CPU_Q8P_ROWS + r] = 0;

                    for (k = 0; k < 8; k++) {
                        memset(qd + k * 64, 128, 4);
                    }

                    continue;
                }

                memcpy(&dd[(g * blocks + b) * KVS_CPU_Q8P_ROWS + r], src, 2);

                for (k = 0; k < 8; k++) {
                    memcpy(&word, src + 2 + 4 * k, 4);
                    word ^= 0x80808080u;
                    memcpy(qd + k * 64, &word, 4);
                }

                src += KVS_Q8_0_BYTES;
            }
        }
    }
}


/* Token i's quantized inputs: the Q8_K blocks, or the Q8_0-style ones
 * and their interleaved copy, as the job's matrices take them. */
static void
kvs_cpu_mm_quant_task(void *arg, uint32_t i, uint32_t thread)
{
    const float       *x;
    kvs_cpu_q8_t      *xq;
    kvs_cpu_mm_job_t  *job;

    job = arg;
    x = job->x + (size_t) i * job->cols;

    if (job->xbh != NULL) {
        kvs_cpu_bf16_split(x, job->xbh + (size_t) i * job->cols,
                           job->xbl + (size_t) i * job->cols, job->cols);
    }

    if (job->xk != NULL) {
#if KVS_CPU_X86
        if (job->simd >= KVS_CPU_SIMD_AVX2) {
            kvs_cpu_q8k_quant_avx2(x, job->xk + (size_t) i * (job->cols / 256),
                                   job->cols);
        } else
#endif
        {
            kvs_cpu_q8k_quant(x, job->xk + (size_t) i * (job->cols / 256),
                              job->cols);
        }

        if (job->xka != NULL && i < job->n / 16 * 16) {
            kvs_cpu_q8ka_fill(job->xk + (size_t) i * (job->cols / 256), i,
                              job->xka, job->cols);
        }
    }

    if (job->xq == NULL) {
        return;
    }

    xq = job->xq + (size_t) i * (job->cols / KVS_Q8_0_BLOCK);

#if KVS_CPU_X86
    if (job->simd >= KVS_CPU_SIMD_AVX2) {
        kvs_cpu_q8_quant_avx2(x, xq, job->cols);
    } else
#endif
    {
        kvs_cpu_q8_quant(x, xq, job->cols);
    }

    if (job->xi != NULL) {
        kvs_cpu_q8i_fill(xq, job->xi + (size_t) i * ((job->cols + 255) / 256),
                         job->cols);
    }

    if (job->xa != NULL && i < job->n / 16 * 16) {
        kvs_cpu_q8a_fill(xq, i, job->xa, job->cols);
    }
}


/*
 * One task of a product: rows [r0, r0 + tile) of one of the job's
 * matrices, for every token: packed Q8_0 by groups of 16 rows, the
 * table's quantized kernel row by row over chunks of tokens, the batched
 * kernel (ours or sgemm) on the tile, or four rows at a time converted
 * (if not F32) into the thread's scratch.
 */
static void
kvs_cpu_mm_task(void *arg, uint32_t task, uint32_t thread)
{
    float                *s;
    uint32_t              m, r0, r, nr, k;
    const float          *w[4], *wt;
    kvs_cpu_mm_job_t     *job;
    const kvs_cpu_mat_t  *mat;

    job = arg;

    for (m = 0; task >= job->first[m + 1]; m++) {
        /* find the matrix this task's rows belong to */
    }

    mat = job->w[m];
    r0 = (task - job->first[m]) * job->tile;
    s = job->scratch + (size_t) thread * job->scratch_stride;

#if KVS_CPU_X86
    if (mat->pack != NULL && job->simd >= KVS_CPU_SIMD_AVX512) {
        for (r = r0; r < r0 + job->tile && r < mat->rows;
             r += KVS_CPU_Q8P_ROWS)
        {
            if (mat->type == KVS_GGML_Q8_0
                && job->simd >= KVS_CPU_SIMD_AMX)
            {
                kvs_cpu_amx_q8_rows(job->y[m], mat->rows, mat,
                                    r / KVS_CPU_Q8P_ROWS, job->xq, job->n);
            } else if (job->xa != NULL && kvs_cpu_qla_type(mat->type)
                       && kvs_cpu_qla_scratch(mat)
                          <= job->scratch_stride * sizeof(float))
            {
                kvs_cpu_qla_rows(job->y[m], mat->rows, mat,
                                 r / KVS_CPU_Q8P_ROWS, job->xa, job->xq,
                                 job->n, s);
            } else if (mat->type == KVS_GGML_Q8_0) {
                kvs_cpu_q8p_rows_avx512(job->y[m], mat->rows, mat,
                                        r / KVS_CPU_Q8P_ROWS, job->xq,
                                        job->n);
            } else if (job->xka != NULL && mat->type == KVS_GGML_Q4_K
                       && kvs_cpu_qka_scratch(mat)
                          <= job->scratch_stride * sizeof(float))
            {
                kvs_cpu_qka_rows(job->y[m], mat->rows, mat,
                                 r / KVS_CPU_Q8P_ROWS, job->xka, job->xk,
                                 job->n, s);
            } else if (mat->qd->act == KVS_CPU_ACT_Q8K) {
                kvs_cpu_qkp_rows_avx512(job->y[m], mat->rows, mat,
                                        r / KVS_CPU_Q8P_ROWS, job->xk,
                                        job->n);
            } else {
                kvs_cpu_qlp_rows_avx512(job->y[m], mat->rows, mat,
                                        r / KVS_CPU_Q8P_ROWS, job->xq,
                                        job->n);
            }
        }
        return;
    }
#endif

    if (mat->qd != NULL) {
        size_t           xstride;
        uint32_t         i0, ni, chunk;
        const void      *xin;
        kvs_cpu_qdot_pt  dot;

        dot = kvs_cpu_qdot_at(mat->qd, job->simd);

        /* the tile's rows for a chunk of tokens whose inputs stay in
         * the cache, then the next chunk (a token's results do not
         * depend on the tokens it shares a call with); the sizes are the
         * ones measured best for each input's kernels */
        if (mat->qd->act == KVS_CPU_ACT_Q8K) {
            xin = job->xk;
            xstride = (mat->cols / 256) * sizeof(kvs_cpu_q8k_t);
            chunk = KVS_CPU_QCHUNK;

        } else if (job->xi != NULL && mat->qd->dot_avx2i != NULL) {
            dot = mat->qd->dot_avx2i;
            xin = job->xi;
            xstride = (mat->cols + 255) / 256 * sizeof(kvs_cpu_q8i_t);
            chunk = (uint32_t) (KVS_CPU_QDOT_CHUNK / xstride) & ~7u;
            chunk = chunk < 8 ? 8 : chunk;

        } else {
            xin = job->xq;
            xstride = (mat->cols / KVS_Q8_0_BLOCK) * sizeof(kvs_cpu_q8_t);
            chunk = (uint32_t) (KVS_CPU_QDOT_CHUNK / xstride) & ~3u;
            chunk = chunk < 4 ? 4 : chunk;
        }

        for (i0 = 0; i0 < job->n; i0 += ni) {
            ni = job->n - i0 < chunk ? job->n - i0 : chunk;

            for (r = r0; r < r0 + job->tile && r < mat->rows; r++) {
                dot(job->y[m] + (size_t) i0 * mat->rows + r, mat->rows,
                    (const uint8_t *) mat->data + (size_t) r * mat->row_bytes,
                    (const uint8_t *) xin + i0 * xstride, xstride, ni,
                    mat->cols);
            }
        }
        return;
    }

    if (job->n >= KVS_CPU_BLAS_MIN) {
        nr = mat->rows - r0 < job->tile ? mat->rows - r0 : job->tile;

#if KVS_CPU_X86
        if (job->xbh != NULL && kvs_cpu_amxb_takes(mat)) {
            kvs_cpu_amxb_rows(job->y[m] + r0, mat->rows, job->xbh, job->xbl,
                              job->n, mat, r0, nr, s);
            return;
        }
#endif

        if (mat->type == KVS_GGML_F32) {
            wt = (const float *) ((const uint8_t *) mat->data
                                  + (size_t) r0 * mat->row_bytes);
        } else {
            for (k = 0; k < nr; k++) {
                (void) kvs_cpu_row(mat, r0 + k, s + (size_t) k * mat->cols,
                                   job->simd);
            }
            wt = s;
        }

#if KVS_CPU_X86
        if (job->simd >= KVS_CPU_SIMD_AVX512 && job->gemm512
            && !job->blas)
        {
            kvs_cpu_gemm_avx512(job->y[m] + r0, mat->rows, job->x, job->n,
                                mat->cols, wt, nr);
            return;
        }

        if (job->simd >= KVS_CPU_SIMD_AVX2 && !job->blas) {
            kvs_cpu_gemm_avx2(job->y[m] + r0, mat->rows, job->x, job->n,
                              mat->cols, wt, nr);
            return;
        }
#endif

        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int) job->n,
                    (int) nr, (int) mat->cols, 1.0f, job->x, (int) mat->cols,
                    wt, (int) mat->cols, 0.0f, job->y[m] + r0,
                    (int) mat->rows);
        return;
    }

    for (r = r0; r < r0 + job->tile && r < mat->rows; r += 4) {
        nr = mat->rows - r < 4 ? mat->rows - r : 4;

        for (k = 0; k < nr; k++) {
            w[k] = kvs_cpu_row(mat, r + k, s + (size_t) k * mat->cols,
                               job->simd);
        }

#if KVS_CPU_X86
        if (job->simd >= KVS_CPU_SIMD_AVX512) {
            kvs_cpu_mm_rows_avx512(job->y[m] + r, mat->rows, job->x, job->n,
                                   mat->cols, w, nr);
            continue;
        }

        if (job->simd >= KVS_CPU_SIMD_AVX2) {
            kvs_cpu_mm_rows_avx2(job->y[m] + r, mat->rows, job->x, job->n,
                                 mat->cols, w, nr);
            continue;
        }
#endif

        kvs_cpu_mm_rows(job->y[m] + r, mat->rows, job->x, job->n, mat->cols,
                        w, nr);
    }
}


/*
 * Tiles of KVS_CPU_TILE output rows are the tasks (KVS_CPU_BLAS_TILE
 * for sgemm), so the threads split the weights and each weight row is
 * read (and converted) once per step whatever n is.
 */
/* With adapters (kvs_cpu_lora_mm_t): the base tiles first, each
 * telling lm its outputs are written, then the adapters' tasks. */
static void
kvs_cpu_mm_lora_task(void *arg, uint32_t task, uint32_t thread)
{
    uint32_t           m, r0, r1;
    kvs_cpu_mm_job_t  *job;

    job = arg;

    if (task >= job->first[3]) {
        kvs_cpu_lora_mm_task(job->lm, task - job->first[3]);
        return;
    }

    kvs_cpu_mm_task(arg, task, thread);

    for (m = 0; task >= job->first[m + 1]; m++) {
        /* the tile's matrix, as kvs_cpu_mm_task finds it */
    }

    r0 = (task - job->first[m]) * job->tile;
    r1 = r0 + job->tile < job->w[m]->rows ? r0 + job->tile
                                          : job->w[m]->rows;
    kvs_cpu_lora_mm_done(job->lm, m, r0, r1);
}


void
kvs_cpu_matmul(kvs_cpu_fw_t *fw, const float *x, uint32_t n,
    const kvs_cpu_mat_t *w0, float *y0, const kvs_cpu_mat_t *w1, float *y1,
    const kvs_cpu_mat_t *w2, float *y2)
{
    kvs_cpu_matmul_lora(fw, x, n, w0, y0, w1, y1, w2, y2, NULL);
}


void
kvs_cpu_matmul_lora(kvs_cpu_fw_t *fw, const float *x, uint32_t n,
    const kvs_cpu_mat_t *w0, float *y0, const kvs_cpu_mat_t *w1, float *y1,
    const kvs_cpu_mat_t *w2, float *y2, kvs_cpu_lora_mm_t *lm)
{
    int                quant;
    uint32_t           m, rows, post;
    kvs_threads_t     *pool;
    kvs_threads_fn_t   fn;
    kvs_cpu_mm_job_t   job;

    job.x = x;
    job.n = n;
    job.simd = fw->simd;
    job.blas = n >= KVS_CPU_BLAS_MIN && kvs_cpu_blas_forced();
    job.gemm512 = n >= KVS_CPU_BLAS_MIN && kvs_cpu_gemm512_asked();
    job.scratch = fw->wscratch;
    job.scratch_stride = fw->wscratch_stride;
    job.w[0] = w0;
    job.w[1] = w1;
    job.w[2] = w2;
    job.y[0] = y0;
    job.y[1] = y1;
    job.y[2] = y2;
    job.first[0] = 0;
    job.xq = NULL;
    job.xk = NULL;
    job.xi = NULL;
    job.xa = NULL;
    job.xka = NULL;
    job.xbh = NULL;
    job.xbl = NULL;
    job.tile = n >= KVS_CPU_BLAS_MIN ? KVS_CPU_BLAS_TILE : KVS_CPU_TILE;
    job.lm = lm != NULL && lm->n_tasks != 0 ? lm : NULL;
    fn = job.lm != NULL ? kvs_cpu_mm_lora_task : kvs_cpu_mm_task;
    post = job.lm != NULL ? job.lm->n_tasks : 0;

    /* quantized products do not need the batched kernel's fixed tile (a
     * row's sums never depend on its neighbours): about six tasks per
     * thread, of 16 to KVS_CPU_QTILE rows, keep every thread busy to the
     * end of a 768-row product, and a one-token step claims a task per
     * 64 rows, not per 16 (each claim moves the counter's cache line
     * between the cores) */
    quant = w0->qd != NULL && (w1 == NULL || w1->qd != NULL)
            && (w2 == NULL || w2->qd != NULL);

    if (quant) {
        rows = w0->rows + (w1 ? w1->rows : 0) + (w2 ? w2->rows : 0);
        rows /= 6 * kvs_threads_count(fw->kv->threads);
        rows &= ~(uint32_t) (KVS_CPU_Q8P_ROWS - 1);
        job.tile = rows < KVS_CPU_TILE ? KVS_CPU_TILE
                   : rows > KVS_CPU_QTILE ? KVS_CPU_QTILE : rows;
    }

    /* quantized weights stay quantized: the input is quantized once here,
     * in the blocks their products take, for every n, so a token's sums
     * do not depend on its batch */
    for (m = 0; m < 3; m++) {
        if (job.w[m] == NULL) {
            continue;
        }

        if (job.w[m]->qd != NULL && job.w[m]->qd->act == KVS_CPU_ACT_Q8K) {
            job.xk = fw->xk;

            /* the tiles' input, when the forward made room for it */
            if (fw->xka != NULL && job.w[m]->pack != NULL
                && job.w[m]->type == KVS_GGML_Q4_K)
            {
                job.xka = fw->xka;
            }

        } else if (job.w[m]->qd != NULL) {
            job.xq = fw->xq;

            /* the tiles' input, when the forward made room for it */
            if (fw->xa != NULL && job.w[m]->pack != NULL
                && kvs_cpu_qla_type(job.w[m]->type))
            {
                job.xa = fw->xa;
            }

            /* the batched kernels' input, from enough tokens to pay for
             * interleaving their blocks */
            if (job.w[m]->qd->dot_avx2i != NULL && n >= KVS_CPU_QLI_MIN
                && fw->simd >= KVS_CPU_SIMD_AVX2
                && (fw->simd < KVS_CPU_SIMD_AVX512
                    || job.w[m]->pack == NULL))
            {
                job.xi = fw->xi;
            }
        }
    }

    /* each token's inputs on the pool too (alone they were up to 3% of
     * a two-thread prefill, the workers waiting), each thread a stretch
     * of tokens (kvs_cpu_forward_lora says why) */
    job.cols = w0->cols;

    /* the tiles' inputs, when a matrix takes them */
    if (fw->xbf != NULL && n >= KVS_CPU_BLAS_MIN && !job.blas) {
        for (m = 0; m < 3; m++) {
            if (job.w[m] != NULL && kvs_cpu_amxb_takes(job.w[m])) {
                job.xbh = fw->xbf;
                job.xbl = fw->xbf + (size_t) n * w0->cols;

                /* a tile kernel's task packs its own rows: smaller
                 * tasks cost nothing more and keep two threads busy to
                 * the end of a 768-row product (3 tasks of 256) */
                job.tile = KVS_CPU_AMXB_TILE;
            }
        }
    }

    if (job.xk != NULL || job.xq != NULL || job.xbh != NULL) {
        kvs_threads_run_ranges(kvs_cpu_pool(fw, (double) n * w0->cols),
                               kvs_cpu_mm_quant_task, &job, n);
    }

    for (m = 0; m < 3; m++) {
        job.first[m + 1] = job.first[m]
            + (job.w[m] == NULL ? 0
               : (job.w[m]->rows + job.tile - 1) / job.tile);
    }

    /* a sentinel past the last task ends the search in kvs_cpu_mm_task */
    job.first[4] = UINT32_MAX;

    pool = kvs_cpu_pool(fw, (double) n * w0->cols
                            * (w0->rows + (w1 ? w1->rows : 0)
                               + (w2 ? w2->rows : 0)));

    /* a decode step's quantized weights stream from memory once: each
     * thread takes one stretch of the rows (the hardware prefetcher, and
     * the packed kernels' own prefetches, then run ahead of it inside
     * that stretch, not into rows another core reads) */
    if (quant && n < KVS_CPU_BLAS_MIN) {
        kvs_threads_run_ranges(pool, fn, &job, job.first[3] + post);
        return;
    }

    kvs_threads_run(pool, fn, &job, job.first[3] + post);
}
