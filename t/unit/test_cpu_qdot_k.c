/*
 * test_cpu_qdot_k: the CPU products of the 256-column types (Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K, IQ4_XS) with a Q8_K input (src/backend/cpu/
 * kvs_cpu_qk.c, kvs_cpu_qk_x86.c), against kvs_cpu_qdot.h's contract:
 *
 *  - the portable and the AVX2 kernel give the same bits (memcmp of the
 *    floats), for n = 1, 2, 3, 5, 8, 33 tokens and rows of 256 .. 4096
 *    columns; each token's result with n tokens is its result alone; a
 *    kernel writes y[i * ldy] for i < n and nothing else;
 *  - kvs_cpu_q8k_quant and kvs_cpu_q8k_quant_avx2 give the same bytes
 *    (ties included), and the bsums are the sums of their 16 q;
 *  - on AVX-512 VNNI CPUs, matrices of every one of these types repacked by 16
 *    rows (kvs_cpu_qkp_fill, kvs_cpu_qkp_x86.c) give the portable
 *    kernel's bits from kvs_cpu_qkp_rows_avx512 for every n of 1 .. 30
 *    tokens (Q4_K's and Q6_K's wide passes of 12 and 8 included), in
 *    matrices of 16 and 37 rows (a partial group) whose rows are every
 *    kind below, and write nothing else of y;
 *  - each result is the exact product of what it multiplies: the double
 *    dot of the row dequantized (kvs_quant_dequantize) and the input
 *    dequantized (d * q), within a bound derived from the kernels' float
 *    steps, (5 + 2 nb) 2^-24 sum (|w_e| + 2 |dmin m_e|) |x_e| for nb
 *    super-blocks (see reference(); 2.2e-6 relative to that sum at 4096
 *    columns; the largest error seen is about a fifth of the bound).
 *
 * Rows: our quantizer's on Gaussian data, on data whose sub-blocks differ
 * in magnitude by up to 2^21 (extreme sub-block scales and mins), on
 * zeros; random bytes (every scale and min value, with finite f16 d) and
 * the bytes that make |isum| largest (a worst case for int32, checked
 * exactly against the reference too).  Inputs: Gaussian, zero, large
 * (1e6) and small (1e-25) magnitudes, one outlier, constant +-1 (every q
 * +-127).  Without AVX2 (or KVSERVE_CPU_SIMD=0) the AVX2 parts are
 * skipped, saying so.
 */

#include "kvs_test.h"

#include "backend/cpu/kvs_cpu_qdot.h"
#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"
#include "model/kvs_quant_iq4.h"
#include "model/kvs_quant_k.h"

#define MAX_COLS   4096
#define MAX_N      33
#define LDY        3

#define ROW_GAUSS   0
#define ROW_SPREAD  1
#define ROW_ZERO    2
#define ROW_RANDOM  3
#define ROW_WORST   4
#define ROW_KINDS   5

#define IN_KINDS    6


typedef struct {
    uint32_t         type;
    kvs_cpu_qdot_pt  dot;
    kvs_cpu_qdot_pt  dot_avx2;
    uint32_t         d_at;            /* f16 d's offset */
    int              dmin_at;         /* f16 dmin's, or -1 */
} qk_type_t;


static const uint32_t  cols_list[] = { 256, 512, 768, 1280, 4096 };
static const uint32_t  n_list[] = { 1, 2, 3, 5, 8, 33 };

static int       have_avx2;
static uint64_t  rng = 0x51ed2701;
static double    worst_ratio[6];


static uint32_t
rnd(void)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;

    return (uint32_t) (rng >> 33);
}


static void
types_init(qk_type_t *t)
{
    memset(t, 0, 6 * sizeof(qk_type_t));

    t[0] = (qk_type_t) { KVS_GGML_Q2_K, kvs_cpu_qdot_q2_k, NULL,
                         KVS_Q2_K_D, KVS_Q2_K_DMIN };
    t[1] = (qk_type_t) { KVS_GGML_Q3_K, kvs_cpu_qdot_q3_k, NULL,
                         KVS_Q3_K_D, -1 };
    t[2] = (qk_type_t) { KVS_GGML_Q4_K, kvs_cpu_qdot_q4_k, NULL,
                         KVS_Q4_K_D, KVS_Q4_K_DMIN };
    t[3] = (qk_type_t) { KVS_GGML_Q5_K, kvs_cpu_qdot_q5_k, NULL,
                         KVS_Q5_K_D, KVS_Q5_K_DMIN };
    t[4] = (qk_type_t) { KVS_GGML_Q6_K, kvs_cpu_qdot_q6_k, NULL,
                         KVS_Q6_K_D, -1 };
    t[5] = (qk_type_t) { KVS_GGML_IQ4_XS, kvs_cpu_qdot_iq4_xs, NULL,
                         KVS_IQ4_XS_D, -1 };
#if KVS_CPU_X86
    t[0].dot_avx2 = kvs_cpu_qdot_q2_k_avx2;
    t[1].dot_avx2 = kvs_cpu_qdot_q3_k_avx2;
    t[2].dot_avx2 = kvs_cpu_qdot_q4_k_avx2;
    t[3].dot_avx2 = kvs_cpu_qdot_q5_k_avx2;
    t[4].dot_avx2 = kvs_cpu_qdot_q6_k_avx2;
    t[5].dot_avx2 = kvs_cpu_qdot_iq4_xs_avx2;
#endif
}


static size_t
block_bytes(uint32_t type)
{
    return kvs_ggml_type_info(type)->size;
}


/*
 * One super-block of the largest |isum| with inputs of +127 (and the
 * largest scales, mins and d = dmin = 1): Q2_K q 3, sc 15, m 15; Q3_K
 * q -4 (bits and third bit clear), scale -32 (stored 0); Q4_K / Q5_K q
 * 15 / 31, sc = m = 63; Q6_K q -32, scale -128; IQ4_XS level -127, scale
 * -32 (ls 0).
 */
static void
worst_block(uint32_t type, uint8_t *p)
{
    size_t  bytes;

    bytes = block_bytes(type);

    switch (type) {
    case KVS_GGML_Q2_K:
        memset(p, 0xff, bytes);
        kvs_f16_store(p + KVS_Q2_K_D, 1.0f);
        kvs_f16_store(p + KVS_Q2_K_DMIN, 1.0f);
        break;

    case KVS_GGML_Q3_K:
        memset(p, 0, bytes);
        kvs_f16_store(p + KVS_Q3_K_D, 1.0f);
        break;

    case KVS_GGML_Q4_K:
    case KVS_GGML_Q5_K:
        memset(p, 0xff, bytes);
        kvs_f16_store(p, 1.0f);
        kvs_f16_store(p + 2, 1.0f);
        break;

    case KVS_GGML_Q6_K:
        memset(p, 0, bytes);
        memset(p + KVS_Q6_K_SCALES, 0x80, 16);
        kvs_f16_store(p + KVS_Q6_K_D, 1.0f);
        break;

    default: /* IQ4_XS */
        memset(p, 0, bytes);
        kvs_f16_store(p + KVS_IQ4_XS_D, 1.0f);
        break;
    }
}


/* A row of cols columns of type t, of the given kind, into row. */
static void
make_row(const qk_type_t *t, int kind, uint32_t cols, uint8_t *row,
    float *tmp)
{
    uint32_t   j, b;
    size_t     bytes;
    kvs_err_t  err;

    bytes = block_bytes(t->type);

    switch (kind) {
    case ROW_RANDOM:
        for (j = 0; j < cols / 256 * bytes; j++) {
            row[j] = (uint8_t) rnd();
        }

        for (b = 0; b < cols / 256; b++) {
            kvs_f16_store(row + b * bytes + t->d_at,
                          kvs_test_gauss(&rng) * 0.01f);
            if (t->dmin_at >= 0) {
                kvs_f16_store(row + b * bytes + (uint32_t) t->dmin_at,
                              kvs_test_gauss(&rng) * 0.01f);
            }
        }
        return;

    case ROW_WORST:
        for (b = 0; b < cols / 256; b++) {
            worst_block(t->type, row + b * bytes);
        }
        return;

    default:
        break;
    }

    for (j = 0; j < cols; j++) {
        switch (kind) {
        case ROW_GAUSS:
            tmp[j] = kvs_test_gauss(&rng) * 0.05f;
            break;

        case ROW_SPREAD:
            /* 16-column groups from 2^-10 to 2^11 times each other, and
             * an offset in some 32-column groups (large mins) */
            tmp[j] = ldexpf(kvs_test_gauss(&rng), (int) ((j / 16) * 7 % 22)
                                                  - 10)
                     + ((j / 32) % 3 == 0 ? 3.0f : 0.0f);
            break;

        default: /* ROW_ZERO */
            tmp[j] = 0.0f;
            break;
        }
    }

    assert_int_equal(kvs_quant_quantize(t->type, tmp, row, cols, &err),
                     KVS_OK);
}


/* Token i's input of the given kind (i selects among several). */
static void
make_input(int kind, uint32_t cols, float *x)
{
    uint32_t  j;

    for (j = 0; j < cols; j++) {
        switch (kind) {
        case 0:
            x[j] = kvs_test_gauss(&rng);
            break;
        case 1:
            x[j] = 0.0f;
            break;
        case 2:
            x[j] = kvs_test_gauss(&rng) * 1e6f;
            break;
        case 3:
            x[j] = kvs_test_gauss(&rng) * 1e-25f;
            break;
        case 4:
            /* one outlier per 256: the rest quantize to few levels */
            x[j] = j % 256 == 77 ? 500.0f : kvs_test_gauss(&rng);
            break;
        default:
            x[j] = (j / 256) % 2 ? -1.0f : 1.0f;
            break;
        }
    }
}


/*
 * The double dot of the dequantized row and the dequantized input, and
 * the bound on the kernel's error against it:
 *
 *   |kernel - dot| <= (5 + 2 nb) 2^-24 sum (|w_e| + 2 |mn_e|) |x_e|
 *
 * nb super-blocks, mn_e = dmin * m of e's sub-block (0 without mins).
 * Per super-block the kernel rounds d * dx, (float) isum and their
 * product (3u of the term, u = 2^-24), the same for the min term, and its
 * 2 nb additions add at most 2 nb u of the terms' sum; the terms are at
 * most sum (|d sc q| + |dmin m|) |x| <= sum (|w| + 2 |mn|) |x| (as
 * w = d sc q - dmin m); the dequantized w_e are rounded too (2u of the
 * same).  mn_e is the row dequantized with its q bits cleared, which
 * leaves x = -(dmin * m).
 */
static double
reference(uint32_t type, const uint8_t *row, const kvs_cpu_q8k_t *xq,
    uint32_t cols, float *w, float *mn, double *dot)
{
    double     xe, s, m;
    size_t     bytes, at, len;
    uint32_t   j, b;
    uint8_t   *z;
    kvs_err_t  err;

    assert_int_equal(kvs_quant_dequantize(type, row, w, cols, &err), KVS_OK);

    switch (type) {
    case KVS_GGML_Q2_K:
        at = KVS_Q2_K_QS;
        len = 64;
        break;
    case KVS_GGML_Q4_K:
        at = KVS_Q4_K_QS;
        len = 128;
        break;
    case KVS_GGML_Q5_K:
        at = KVS_Q5_K_QH;
        len = 160;
        break;
    default:
        at = 0;
        len = 0;
        break;
    }

    memset(mn, 0, cols * sizeof(float));

    if (len != 0) {
        bytes = block_bytes(type);
        z = malloc(cols / 256 * bytes);
        assert_non_null(z);
        memcpy(z, row, cols / 256 * bytes);

        for (b = 0; b < cols / 256; b++) {
            memset(z + b * bytes + at, 0, len);
        }

        assert_int_equal(kvs_quant_dequantize(type, z, mn, cols, &err),
                         KVS_OK);
        free(z);
    }

    s = 0.0;
    m = 0.0;

    for (j = 0; j < cols; j++) {
        xe = (double) xq[j / 256].d * xq[j / 256].q[j % 256];
        s += (double) w[j] * xe;
        m += (fabs((double) w[j]) + 2.0 * fabs((double) mn[j])) * fabs(xe);
    }

    *dot = s;

    return (5.0 + 2.0 * (cols / 256)) * ldexp(1.0, -24) * m * 1.0001;
}


/* y[i * LDY] for i < n from kernel f; the gaps keep a sentinel. */
static void
run_kernel(kvs_cpu_qdot_pt f, const uint8_t *row, const kvs_cpu_q8k_t *xq,
    uint32_t n, uint32_t cols, float *y)
{
    uint32_t  i, k;

    for (k = 0; k < MAX_N * LDY; k++) {
        y[k] = -12345.0f;
    }

    f(y, LDY, row, xq, (cols / 256) * sizeof(kvs_cpu_q8k_t), n, cols);

    for (i = 0; i < n; i++) {
        for (k = 1; k < LDY; k++) {
            assert_true(y[i * LDY + k] == -12345.0f);
        }
    }

    for (k = n * LDY; k < MAX_N * LDY; k++) {
        assert_true(y[k] == -12345.0f);
    }
}


static void
test_q8k_quant(void **state)
{
    float          *x;
    int32_t         s;
    uint32_t        j, k, b, r, cols;
    kvs_cpu_q8k_t  *a, *c;

    (void) state;

    x = malloc(MAX_COLS * sizeof(float));
    a = malloc(MAX_COLS / 256 * sizeof(kvs_cpu_q8k_t));
    c = malloc(MAX_COLS / 256 * sizeof(kvs_cpu_q8k_t));
    assert_non_null(x);
    assert_non_null(a);
    assert_non_null(c);

    for (r = 0; r < 40; r++) {
        cols = 256 * (1 + r % 16);

        if (r < IN_KINDS) {
            make_input((int) r, cols, x);

        } else if (r < IN_KINDS + 2) {
            /* amax 127, so d = 1 and every x / d a tie: 2.5 -> 2,
             * -3.5 -> -4 (round to even) */
            for (j = 0; j < cols; j++) {
                x[j] = j % 256 == 0 ? 127.0f
                       : (float) ((int) (j % 254) - 127) + 0.5f;
            }

        } else {
            for (j = 0; j < cols; j++) {
                x[j] = kvs_test_gauss(&rng) * ldexpf(1.0f,
                                                     (int) (rnd() % 40) - 20);
            }
        }

        memset(a, 0x5a, cols / 256 * sizeof(kvs_cpu_q8k_t));
        kvs_cpu_q8k_quant(x, a, cols);

        for (b = 0; b < cols / 256; b++) {
            for (k = 0; k < 16; k++) {
                s = 0;
                for (j = 0; j < 16; j++) {
                    s += a[b].q[16 * k + j];
                }
                assert_int_equal(a[b].bsums[k], s);
            }

            for (j = 0; j < 256; j++) {
                assert_true(a[b].q[j] >= -127);
                assert_true(a[b].q[j] == (int8_t) lrintf(x[256 * b + j]
                                            * (a[b].d != 0.0f
                                               ? 1.0f / a[b].d : 0.0f)));
            }
        }

        if (r == IN_KINDS) {
            assert_true(a[0].d == 1.0f);
            /* x[1] = -125.5 -> -126, x[2] = -124.5 -> -124 */
            assert_int_equal(a[0].q[1], -126);
            assert_int_equal(a[0].q[2], -124);
        }

#if KVS_CPU_X86
        if (have_avx2) {
            memset(c, 0xa5, cols / 256 * sizeof(kvs_cpu_q8k_t));
            kvs_cpu_q8k_quant_avx2(x, c, cols);

            if (memcmp(a, c, cols / 256 * sizeof(kvs_cpu_q8k_t)) != 0) {
                for (b = 0; b < cols / 256; b++) {
                    for (k = 0; k < 16; k++) {
                        if (a[b].bsums[k] != c[b].bsums[k]) {
                            print_message("block %u bsums[%u]: %d, AVX2 "
                                          "%d\n", b, k, a[b].bsums[k],
                                          c[b].bsums[k]);
                        }
                    }
                }
                fail_msg("input %u (%u columns): kvs_cpu_q8k_quant_avx2 "
                         "differs", r, cols);
            }
        }
#endif
    }

    free(x);
    free(a);
    free(c);
}


static void
test_table(void **state)
{
    int                    k;
    qk_type_t              t[6];
    const kvs_cpu_qdot_t  *e;

    (void) state;

    types_init(t);

    for (k = 0; k < 6; k++) {
        e = kvs_cpu_qdot_find(t[k].type);
        assert_non_null(e);
        assert_int_equal(e->act, KVS_CPU_ACT_Q8K);
        assert_ptr_equal(e->dot, t[k].dot);
        assert_ptr_equal(kvs_cpu_qdot_at(e, KVS_CPU_SIMD_NONE), t[k].dot);
#if KVS_CPU_X86
        assert_ptr_equal(e->dot_avx2, t[k].dot_avx2);
        assert_ptr_equal(kvs_cpu_qdot_at(e, KVS_CPU_SIMD_AVX2),
                         t[k].dot_avx2);
        assert_ptr_equal(kvs_cpu_qdot_at(e, KVS_CPU_SIMD_AVX512),
                         t[k].dot_avx2);
#endif
        assert_int_equal(kvs_ggml_type_info(t[k].type)->block, 256);
    }
}


/* Every check of the top of the file for one type. */
static void
check_type(const qk_type_t *t, int ti)
{
    int             kind;
    float          *tmp, *w, *mn, *x, *yp, *ya, *y1;
    double          ref[MAX_N], bound[MAX_N], ratio;
    size_t          xstride;
    uint32_t        c, cols, i, ni, n;
    uint8_t        *row;
    kvs_cpu_q8k_t  *xq;

    tmp = malloc(MAX_COLS * sizeof(float));
    w = malloc(MAX_COLS * sizeof(float));
    mn = malloc(MAX_COLS * sizeof(float));
    x = malloc(MAX_COLS * sizeof(float));
    yp = malloc(MAX_N * LDY * sizeof(float));
    ya = malloc(MAX_N * LDY * sizeof(float));
    y1 = malloc(MAX_N * LDY * sizeof(float));
    row = malloc(MAX_COLS / 256 * block_bytes(t->type));
    xq = malloc((size_t) MAX_N * (MAX_COLS / 256) * sizeof(kvs_cpu_q8k_t));
    assert_true(tmp && w && mn && x && yp && ya && y1 && row && xq);

    for (c = 0; c < sizeof(cols_list) / sizeof(cols_list[0]); c++) {
        cols = cols_list[c];
        xstride = cols / 256;

        for (kind = 0; kind < ROW_KINDS; kind++) {
            make_row(t, kind, cols, row, tmp);

            for (i = 0; i < MAX_N; i++) {
                make_input((int) (i % IN_KINDS), cols, x);

                /* the worst row's worst input: every q = 127 */
                for (ni = 0; kind == ROW_WORST && i % 2 == 0 && ni < cols;
                     ni++)
                {
                    x[ni] = 1.0f;
                }
                kvs_cpu_q8k_quant(x, xq + i * xstride, cols);
                bound[i] = reference(t->type, row, xq + i * xstride, cols,
                                     w, mn, &ref[i]);
            }

            for (ni = 0; ni < sizeof(n_list) / sizeof(n_list[0]); ni++) {
                n = n_list[ni];
                run_kernel(t->dot, row, xq, n, cols, yp);

                /* (c) the exact product, within the bound */
                for (i = 0; i < n; i++) {
                    ratio = bound[i] == 0.0 ? 0.0
                            : fabs(yp[i * LDY] - ref[i]) / bound[i];
                    worst_ratio[ti] = ratio > worst_ratio[ti]
                                      ? ratio : worst_ratio[ti];
                    if (bound[i] == 0.0 ? yp[i * LDY] != 0.0f : ratio > 1.0)
                    {
                        fail_msg("%s, %u columns, row kind %d, token %u: "
                                 "%.9g, exactly %.9g (bound %.3g)",
                                 kvs_ggml_type_name(t->type), cols, kind,
                                 i, yp[i * LDY], ref[i], bound[i]);
                    }
                }

                /* a token's result alone is its result in the batch */
                for (i = 0; i < n; i++) {
                    run_kernel(t->dot, row, xq + i * xstride, 1, cols, y1);
                    if (memcmp(&y1[0], &yp[i * LDY], sizeof(float)) != 0) {
                        fail_msg("%s, %u columns, row kind %d: token %u of "
                                 "%u: %.9g, alone %.9g",
                                 kvs_ggml_type_name(t->type), cols, kind, i,
                                 n, yp[i * LDY], y1[0]);
                    }
                }

                if (!have_avx2 || t->dot_avx2 == NULL) {
                    continue;
                }

                /* the AVX2 twin gives the same bits, alone too */
                run_kernel(t->dot_avx2, row, xq, n, cols, ya);

                for (i = 0; i < n; i++) {
                    if (memcmp(&ya[i * LDY], &yp[i * LDY], sizeof(float))
                        != 0)
                    {
                        fail_msg("%s, %u columns, row kind %d: token %u of "
                                 "%u: %.9g, AVX2 %.9g",
                                 kvs_ggml_type_name(t->type), cols, kind, i,
                                 n, yp[i * LDY], ya[i * LDY]);
                    }

                    run_kernel(t->dot_avx2, row, xq + i * xstride, 1, cols,
                               y1);
                    assert_memory_equal(&y1[0], &yp[i * LDY], sizeof(float));
                }
            }
        }
    }

    free(tmp);
    free(w);
    free(mn);
    free(x);
    free(yp);
    free(ya);
    free(y1);
    free(row);
    free(xq);
}


/*
 * The packed AVX-512 VNNI kernel against the portable one: a matrix of
 * nrows rows of t's type (row r of kind r % ROW_KINDS) and 1 .. PK_TOK
 * tokens of every input kind (enough for the wide kernels' passes of 12
 * and 8 tokens after the first), every output compared bit for bit; the
 * outputs' row stride leaves 3 floats after each token's rows, which
 * must stay put.
 */
#define PK_TOK  30

static void
check_packed(const qk_type_t *t, uint32_t cols, uint32_t nrows)
{
#if KVS_CPU_X86
    float          *tmp, *x, *yp, *yr;
    size_t          rb, xs, ldy, psize;
    uint8_t        *rows, *pack;
    uint32_t        nb, r, i, n, g;
    kvs_cpu_q8k_t  *xq;
    kvs_cpu_mat_t   w;

    nb = cols / 256;
    rb = (size_t) nb * block_bytes(t->type);
    xs = (size_t) nb * sizeof(kvs_cpu_q8k_t);
    ldy = nrows + 3;

    tmp = malloc(cols * sizeof(float));
    x = malloc(cols * sizeof(float));
    rows = malloc(nrows * rb);
    xq = malloc(PK_TOK * xs);
    yp = malloc(PK_TOK * ldy * sizeof(float));
    yr = malloc(PK_TOK * ldy * sizeof(float));
    assert_true(tmp && x && rows && xq && yp && yr);

    for (r = 0; r < nrows; r++) {
        make_row(t, (int) (r % ROW_KINDS), cols, rows + r * rb, tmp);
    }

    for (i = 0; i < PK_TOK; i++) {
        make_input((int) (i % IN_KINDS), cols, x);
        kvs_cpu_q8k_quant(x, xq + (size_t) i * nb, cols);
    }

    memset(&w, 0, sizeof(w));
    w.data = rows;
    w.row_bytes = rb;
    w.type = t->type;
    w.rows = nrows;
    w.cols = cols;

    psize = kvs_cpu_qkp_size(&w);
    assert_int_equal(psize, (size_t) (nrows + 15) / 16 * nb
                            * kvs_cpu_qkp_rec(t->type));
    assert_true(psize % 64 == 0);
    pack = aligned_alloc(64, psize);
    assert_non_null(pack);
    kvs_cpu_qkp_fill(&w, pack);
    w.pack = pack;

    for (n = 1; n <= PK_TOK; n++) {
        for (i = 0; i < PK_TOK * ldy; i++) {
            yp[i] = -7.0f;
            yr[i] = -7.0f;
        }

        for (r = 0; r < nrows; r++) {
            t->dot(yr + r, ldy, rows + r * rb,
                   xq + (size_t) (PK_TOK - n) * nb, xs, n, cols);
        }

        for (g = 0; g < (nrows + 15) / 16; g++) {
            kvs_cpu_qkp_rows_avx512(yp, ldy, &w, g,
                                    xq + (size_t) (PK_TOK - n) * nb, n);
        }

        for (i = 0; i < PK_TOK * ldy; i++) {
            if (memcmp(&yp[i], &yr[i], 4) != 0) {
                fail_msg("%s cols %u rows %u: packed AVX-512, token %zu of "
                         "%u, row %zu: %.9g, portable %.9g",
                         kvs_ggml_type_name(t->type), cols, nrows,
                         (size_t) i / ldy, n, (size_t) i % ldy,
                         (double) yp[i], (double) yr[i]);
            }
        }
    }

    free(pack);
    free(tmp);
    free(x);
    free(rows);
    free(xq);
    free(yp);
    free(yr);
#else
    (void) t;
    (void) cols;
    (void) nrows;
#endif
}


static void
test_packed(void **state)
{
    int        k;
    uint32_t   c, packed;
    qk_type_t  t[6];

    (void) state;

    types_init(t);
    packed = 0;

    for (k = 0; k < 6; k++) {
        /* every 256-column type has its packed kernel */
        assert_true(kvs_cpu_qkp_rec(t[k].type) != 0);

        assert_true(kvs_cpu_qkp_rec(t[k].type) % 64 == 0);
        packed++;

        if (kvs_cpu_simd() < KVS_CPU_SIMD_AVX512) {
            continue;
        }

        for (c = 0; c < sizeof(cols_list) / sizeof(cols_list[0]); c++) {
            check_packed(&t[k], cols_list[c], 16);
            check_packed(&t[k], cols_list[c], 37);

        }
    }

    assert_int_equal(packed, 6);

    if (kvs_cpu_simd() < KVS_CPU_SIMD_AVX512) {
        print_message("SKIP: no AVX-512 VNNI here: the packed kernels are "
                      "not run\n");
    }
}


static void
test_types(void **state)
{
    int        k;
    qk_type_t  t[6];

    (void) state;

    types_init(t);

    for (k = 0; k < 6; k++) {
        check_type(&t[k], k);
        print_message("%-7s max |kernel - exact| = %.3g of the bound%s\n",
                      kvs_ggml_type_name(t[k].type), worst_ratio[k],
                      have_avx2 && t[k].dot_avx2 != NULL
                      ? ", AVX2 = portable" : "");
    }
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_q8k_quant),
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_packed),
    };

#if KVS_CPU_X86
    have_avx2 = kvs_cpu_simd() >= KVS_CPU_SIMD_AVX2;
#endif

    if (!have_avx2) {
        print_message("SKIP: no AVX2 here (or KVSERVE_CPU_SIMD=0): the "
                      "portable kernels only\n");
    }

    return cmocka_run_group_tests(tests, NULL, NULL);
}
