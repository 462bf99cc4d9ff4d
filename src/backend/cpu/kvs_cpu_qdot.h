/*
 * kvs_cpu_qdot: the CPU products that keep weights quantized (private to
 * src/backend/cpu/).  The input is quantized once per product into int8
 * blocks (kvs_cpu_q8_t per 32 columns for the 32-block types, kvs_cpu_q8k_t
 * per 256 for the K-quants and IQ4_XS), and every output is built from
 * exact integer sums per weight block, scaled and accumulated in floats in
 * an order fixed by the row length alone.
 *
 *   kvs_cpu_qdot.c       the table: a type's activation and its kernels
 *   kvs_cpu_ql.c         Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL (portable)
 *   kvs_cpu_ql_x86.c     the same, AVX2
 *   kvs_cpu_qk.c         Q2_K .. Q6_K, IQ4_XS, the Q8_K input (portable)
 *   kvs_cpu_qk_x86.c     the same, AVX2
 *   kvs_cpu_qkp_x86.c    Q4_K, Q5_K, Q6_K repacked by 16 rows, AVX-512
 *                        VNNI
 *   kvs_cpu_amx_x86.c    Q8_0 on AMX tiles (kvs_cpu_amx.h)
 *
 * Invariants every kernel keeps:
 *  - a kernel's result for (row, token) is bit-identical at every kernel
 *    level that implements it (portable C, AVX2) and for every n: the
 *    float operations and their order are part of the kernel's contract,
 *    and no multiply-add is contracted (the files build with contraction
 *    off);
 *  - the input's quantization is bit-identical at every level too, so
 *    these products' results do not depend on the kernel level below
 *    AVX-512 (the float products' sums still do: kvs_cpu_mm.c);
 *  - a kernel reads only its row (row_bytes of it) and the n inputs.
 */

#ifndef KVS_CPU_QDOT_H
#define KVS_CPU_QDOT_H

#include <stddef.h>
#include <stdint.h>

#include "model/kvs_ggml_type.h"
#include "kvs_cpu_impl.h"

/* A product input quantized per 256 columns: d = max|x| / 127 over the
 * 256, q = round-to-nearest-even(x * (1 / d)) (as kvs_cpu_q8_t), bsums[k]
 * = the sum of q[16k .. 16k + 15] (the K-quants' minimums use them). */
typedef struct kvs_cpu_q8k_s {
    float    d;
    int16_t  bsums[16];
    int8_t   q[256];
} kvs_cpu_q8k_t;

/*
 * Eight kvs_cpu_q8_t blocks (256 columns) interleaved for the AVX2
 * batched kernels of the 32-column types (kvs_cpu_qli_x86.c): q[k]
 * holds, in its 4-byte lane b, bytes 4k .. 4k + 3 of block b, so one
 * int8 product of q[k] with the weights interleaved alike leaves each
 * block's partial sums in its own lane, and adding the eight gives every
 * block's exact sum with no horizontal step.  d[b], c[b]: block b's.
 * Blocks past a row's end (cols not a multiple of 256) are all zero.
 */
typedef struct kvs_cpu_q8i_s {
    int8_t   q[8][32];
    float    d[8];
    int32_t  c[8];
} kvs_cpu_q8i_t;

/*
 * Sixteen tokens' kvs_cpu_q8_t of one block, for the int8 tiles
 * (kvs_cpu_qla_x86.c): q[t] = token t's q (with the other 15, one A tile
 * of 16 rows of 32 bytes, 512 contiguous bytes), d[t] and c[t] its d and
 * c.  A product's are [n / 16][cols / 32]: tokens 16 T .. 16 T + 15's
 * block b at [T * cols / 32 + b] (tokens past the last 16 are not
 * there).  Filled once per product (kvs_cpu_q8a_fill), so that a tile
 * kernel reads each block's inputs from 10 cache lines, not from 16
 * tokens' rows.
 */
typedef struct kvs_cpu_q8a_s {
    int8_t   q[16][32];
    float    d[16];
    int32_t  c[16];
} kvs_cpu_q8a_t;

/*
 * Sixteen tokens' kvs_cpu_q8k_t of one super-block, for the tiles
 * (kvs_cpu_qla_x86.c): q[j][t] = token t's q of sub-blocks 2 j and
 * 2 j + 1 (columns 64 j .. 64 j + 63; with the other 15, one A tile),
 * d[t] its d, bs[t] its sums of q over the 8 sub-blocks (bsums[2 j] +
 * bsums[2 j + 1], at most 32 * 127) split exactly into BF16 numbers,
 * bs[t][j] = the sum less its low 4 bits (8 significant bits),
 * bs[t][8 + j] = those 4 bits: one BF16 A tile.  A product's are [n /
 * 16][cols / 256], as kvs_cpu_q8a_t's.
 */
typedef struct kvs_cpu_q8ka_s {
    int8_t    q[4][16][64];
    float     d[16];
    uint16_t  bs[16][16];
} kvs_cpu_q8ka_t;

/* Tokens from which a product takes the interleaved input when its type
 * has such a kernel: below, the 8 blocks' interleaving costs more than
 * the per-token sums save. */
#ifndef KVS_CPU_QLI_MIN
#define KVS_CPU_QLI_MIN  8
#endif

#define KVS_CPU_ACT_Q8   0            /* kvs_cpu_q8_t per 32 columns */
#define KVS_CPU_ACT_Q8K  1            /* kvs_cpu_q8k_t per 256 columns */

/*
 * y[i * ldy] = row . input_i for i < n, where row is one stored row of
 * cols columns (a multiple of the type's block) and input_i starts at
 * (const uint8_t *) x + i * xstride (cols / 32 kvs_cpu_q8_t or cols / 256
 * kvs_cpu_q8k_t).  Kernels take several tokens so that a row is unpacked
 * once for all of them.
 */
typedef void (*kvs_cpu_qdot_pt)(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);

/* x[cols] (a multiple of 256) as cols / 256 blocks */
typedef void (*kvs_cpu_q8k_quant_pt)(const float *x, kvs_cpu_q8k_t *dst,
    uint32_t cols);

typedef struct kvs_cpu_qdot_s {
    uint32_t          type;           /* KVS_GGML_* */
    uint32_t          act;            /* KVS_CPU_ACT_* */
    kvs_cpu_qdot_pt   dot;            /* portable */
    kvs_cpu_qdot_pt   dot_avx2;       /* or NULL: the portable one */
    kvs_cpu_qdot_pt   dot_avx2i;      /* or NULL: dot_avx2's product on
                                         kvs_cpu_q8i_t inputs, the same
                                         bits (x: (cols + 255) / 256 of
                                         them per token) */
} kvs_cpu_qdot_t;

/*
 * The float part of the 256-column products, the same at every level: per
 * super-block b and token, the exact int32 sums isum (sum over the
 * sub-blocks of scale * sum(q_w * q_x)) and, for the types with minimums
 * (Q2_K, Q4_K, Q5_K), msum (sum of min * bsum) are folded into the
 * token's float accumulator, from 0, b ascending:
 *
 *   acc = acc + (d_w * d_x) * (float) isum
 *   acc = acc - (dmin_w * d_x) * (float) msum      (with minimums only)
 *
 * each operation rounded on its own (the kernels' files build with
 * contraction off; these inline into them).
 */
static inline float
kvs_cpu_qk_acc(float acc, float d, float dx, int32_t isum)
{
    return acc + (d * dx) * (float) isum;
}


static inline float
kvs_cpu_qk_acc_min(float acc, float d, float dmin, float dx, int32_t isum,
    int32_t msum)
{
    acc = acc + (d * dx) * (float) isum;

    return acc - (dmin * dx) * (float) msum;
}


/* Bytes of one 32-column block of the Q8_0-input types. */
static inline uint32_t
kvs_cpu_ql_bytes(uint32_t type)
{
    switch (type) {
    case KVS_GGML_Q8_0:
        return 34;
    case KVS_GGML_Q4_1:
        return 20;
    case KVS_GGML_Q5_0:
        return 22;
    case KVS_GGML_Q5_1:
        return 24;
    default: /* Q4_0, IQ4_NL */
        return 18;
    }
}

/* Bytes of w's packed copy in records of rec bytes per 16 rows and block
 * columns, rounded up to 64; 0 when rec is (the type is not packed so)
 * or w has no data. */
static inline size_t
kvs_cpu_pack_bytes(const kvs_cpu_mat_t *w, uint32_t block, uint32_t rec)
{
    size_t  groups;

    if (w->data == NULL || rec == 0) {
        return 0;
    }

    groups = (w->rows + KVS_CPU_Q8P_ROWS - 1) / KVS_CPU_Q8P_ROWS;

    return (groups * (w->cols / block) * rec + 63) & ~(size_t) 63;
}

/* The packed kernels' output mask of w's row group g: bit r for each of
 * its rows g * 16 + r inside the matrix. */
static inline uint16_t
kvs_cpu_pack_mask(const kvs_cpu_mat_t *w, uint32_t g)
{
    uint32_t  left;

    left = w->rows - g * KVS_CPU_Q8P_ROWS;

    return left >= 16 ? 0xffff : (uint16_t) ((1u << left) - 1);
}

/* The entry of type, or NULL: F32 / F16 / BF16 (float products). */
const kvs_cpu_qdot_t *kvs_cpu_qdot_find(uint32_t type);

/* The kernel of e at this level (KVS_CPU_SIMD_*). */
kvs_cpu_qdot_pt kvs_cpu_qdot_at(const kvs_cpu_qdot_t *e, int simd);

void kvs_cpu_q8k_quant(const float *x, kvs_cpu_q8k_t *dst, uint32_t cols);

/* kvs_cpu_ql.c */
void kvs_cpu_qdot_q8_0(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q4_0(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q4_1(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q5_0(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q5_1(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_iq4_nl(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_q8i_fill(const kvs_cpu_q8_t *x, kvs_cpu_q8i_t *dst,
    uint32_t cols);

/* kvs_cpu_qla_x86.c (portable C): token i's blocks x (cols / 32 of them)
 * into its place in a product's dst (i below the last whole 16). */
void kvs_cpu_q8a_fill(const kvs_cpu_q8_t *x, uint32_t i,
    kvs_cpu_q8a_t *dst, uint32_t cols);

/* kvs_cpu_qka_x86.c (portable C): the same for token i's super-blocks x
 * (cols / 256 of them). */
void kvs_cpu_q8ka_fill(const kvs_cpu_q8k_t *x, uint32_t i,
    kvs_cpu_q8ka_t *dst, uint32_t cols);

/* kvs_cpu_qlp_x86.c: Q4_0, Q4_1, Q5_0, Q5_1 and IQ4_NL repacked by 16
 * rows for the AVX-512 VNNI kernel (the layout: that file).  Bytes of a
 * record (one block of a group) of type, 0 for other types; bytes of w's
 * packed form (0 unless of those types), and the packing into dst (64-byte
 * aligned). */
uint32_t kvs_cpu_qlp_rec(uint32_t type);
size_t kvs_cpu_qlp_size(const kvs_cpu_mat_t *w);
void kvs_cpu_qlp_fill(const kvs_cpu_mat_t *w, uint8_t *dst);

/* kvs_cpu_qkp_x86.c: the 256-column types (Q2_K .. Q6_K, IQ4_XS)
 * repacked by 16 rows for the AVX-512 VNNI kernel (the layout: that
 * file), as kvs_cpu_qlp_* above: bytes of a record (one super-block of a
 * group) of type, 0 for other types; bytes of w's packed form (a multiple
 * of 64; 0 unless of those types), and the packing into dst (64-byte
 * aligned). */
uint32_t kvs_cpu_qkp_rec(uint32_t type);
size_t kvs_cpu_qkp_size(const kvs_cpu_mat_t *w);
void kvs_cpu_qkp_fill(const kvs_cpu_mat_t *w, uint8_t *dst);

/* Offsets inside a Q4_K / Q5_K record (kvs_cpu_qkp_x86.c's layout, which
 * kvs_cpu_qka_x86.c reads too): the 8 sub-blocks' scales of the 16 rows
 * (16 bytes per sub-block), their mins likewise, the 16 f16 d, the 16
 * f16 dmin; from the head on, Q4_K's 64-byte nibble vector (c, k) at
 * KVS_CPU_QKP_HEAD + 64 (8 c + k). */
#define KVS_CPU_QKP_HEAD    320
#define KVS_CPU_QKP_Q45_M   128
#define KVS_CPU_QKP_D       256
#define KVS_CPU_QKP_DMIN    288

/* kvs_cpu_qk.c */
void kvs_cpu_qdot_q2_k(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q3_k(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q4_k(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q5_k(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q6_k(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_iq4_xs(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);

#if KVS_CPU_X86
/* kvs_cpu_ql_x86.c */
void kvs_cpu_qdot_q8_0_avx2(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q4_0_avx2(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q4_1_avx2(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q5_0_avx2(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q5_1_avx2(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_iq4_nl_avx2(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q8_0_avx2i(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q4_0_avx2i(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q4_1_avx2i(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q5_0_avx2i(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q5_1_avx2i(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_iq4_nl_avx2i(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);

/* kvs_cpu_qlp_x86.c: y[i * ldy + g * 16 + r] = row g * 16 + r of w
 * (packed: w->pack) . token i's input (xq + i * w->cols / 32) for the
 * group's rows inside the matrix and every i < n: kvs_cpu_ql.c's bits */
void kvs_cpu_qlp_rows_avx512(float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8_t *xq, uint32_t n);

/* kvs_cpu_qkp_x86.c: y[i * ldy + g * 16 + r] = row g * 16 + r of w
 * (packed: w->pack) . token i's input (xk + i * w->cols / 256) for the
 * group's rows inside the matrix and every i < n: kvs_cpu_qk.c's bits */
void kvs_cpu_qkp_rows_avx512(float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8k_t *xk, uint32_t n);

/* kvs_cpu_qk_x86.c */
void kvs_cpu_q8k_quant_avx2(const float *x, kvs_cpu_q8k_t *dst,
    uint32_t cols);
void kvs_cpu_qdot_q2_k_avx2(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q3_k_avx2(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q4_k_avx2(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q5_k_avx2(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_q6_k_avx2(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
void kvs_cpu_qdot_iq4_xs_avx2(float *y, size_t ldy, const uint8_t *row,
    const void *x, size_t xstride, uint32_t n, uint32_t cols);
#endif

#endif /* KVS_CPU_QDOT_H */
