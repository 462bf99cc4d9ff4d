/*
 * test_cpu_qdot_l: the CPU products of the 32-column types (Q8_0, Q4_0,
 * Q4_1, Q5_0, Q5_1, IQ4_NL; src/backend/cpu/kvs_cpu_ql*.c) with their
 * Q8_0-style input (kvs_cpu_q8_quant).  Rows are our quantizer's on
 * Gaussian data, with all-zero blocks, a row of zeros and rows of large
 * magnitude; inputs are Gaussian, zero, large, and with zero blocks; row
 * lengths 32 .. 4096 columns, many not multiples of 256.
 *
 *  - the table holds each type with the Q8 input and both kernels;
 *  - on AVX-512 VNNI CPUs, the rows repacked by 16 (kvs_cpu_qlp_fill,
 *    Q4_0 .. Q5_1 and IQ4_NL) give the portable kernel's bits through
 *    kvs_cpu_qlp_rows_avx512 for every n of 1 .. 33 tokens, in matrices
 *    of 5 rows (one partial group) and 37 (two whole groups and a
 *    partial one), and write no output past the matrix's rows; Q8_0's
 *    packed kernel (kvs_cpu_q8p_rows_avx512, its own float order) gives
 *    every token's bits alone for every n, within 2e-6 of sum |w x|;
 *  - the portable and AVX2 kernels, and the AVX2 batched kernel on the
 *    interleaved input (kvs_cpu_q8i_fill), give the same bits (memcmp)
 *    for every n of 1 .. 33 tokens, and every token's result with n
 *    tokens is its result alone; a kernel writes y[i * ldy] and nothing
 *    between (skipped without AVX2: the portable kernel is then checked
 *    alone);
 *  - each result is the exact product: |y - ref| <= 2e-6 * mag, where
 *    ref is the double dot of the dequantized row (kvs_quant_dequantize)
 *    and the dequantized input (d * q), and mag = sum |w_j x_j| plus, for
 *    Q4_1 / Q5_1, sum |m_b| |x_j| (their mins and levels are scaled
 *    apart, so their rounding scales with both).  The kernels round two
 *    products per block and sum at most cols / 256 + 3 terms per lane and
 *    reduction, under 1.5e-6 at 4096 columns; the largest ratio seen is
 *    printed.
 */

#include "kvs_test.h"

#include <math.h>

#include "backend/cpu/kvs_cpu_qdot.h"
#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"


#define N_TOK    33
#define N_ROW    5
#define LDY      3
#define TOL      2e-6

typedef struct {
    uint32_t         type;
    uint32_t         bytes;         /* per block of 32 */
    int              affine;        /* f16 m at byte 2 */
    kvs_cpu_qdot_pt  dot;
} ltype_t;

static const ltype_t  types[] = {
    { KVS_GGML_Q8_0, 34, 0, kvs_cpu_qdot_q8_0 },
    { KVS_GGML_Q4_0, 18, 0, kvs_cpu_qdot_q4_0 },
    { KVS_GGML_Q4_1, 20, 1, kvs_cpu_qdot_q4_1 },
    { KVS_GGML_Q5_0, 22, 0, kvs_cpu_qdot_q5_0 },
    { KVS_GGML_Q5_1, 24, 1, kvs_cpu_qdot_q5_1 },
    { KVS_GGML_IQ4_NL, 18, 0, kvs_cpu_qdot_iq4_nl },
};

static const uint32_t  colss[] = {
    32, 64, 96, 160, 224, 256, 288, 544, 768, 800, 2080, 4096
};



/* Row r's floats: Gaussian, with all-zero blocks (r 1), all zero (r 2),
 * large (r 3: N(0, 1e3^2) with a block of 3e4 outliers), small (r 4). */
static void
make_row(float *w, uint32_t cols, uint32_t r, uint64_t *st)
{
    uint32_t  j;

    for (j = 0; j < cols; j++) {
        w[j] = kvs_test_gauss(st);

        switch (r) {
        case 1:
            if ((j / 32) % 3 == 1) {
                w[j] = 0.0f;
            }
            break;
        case 2:
            w[j] = 0.0f;
            break;
        case 3:
            w[j] *= (j / 32 == 0 && j % 5 == 0) ? 3e4f : 1e3f;
            break;
        case 4:
            w[j] *= 1e-3f;
            break;
        default:
            w[j] += 0.5f;      /* an offset: the _1 types' mins matter */
            break;
        }
    }
}


/* xd[cols] = the dequantized Q8_0-style input xq (d * q per column). */
static void
input_floats(float *xd, const kvs_cpu_q8_t *xq, uint32_t cols)
{
    uint32_t  j;

    for (j = 0; j < cols; j++) {
        xd[j] = xq[j / 32].d * (float) xq[j / 32].q[j % 32];
    }
}


#if KVS_CPU_X86
/* *w: nrows rows of type at rows, rb bytes each, cols columns, no pack
 * yet (the packed kernels' checks). */
static void
set_mat(kvs_cpu_mat_t *w, uint32_t type, uint8_t *rows, size_t rb,
    uint32_t nrows, uint32_t cols)
{
    memset(w, 0, sizeof(*w));
    w->data = rows;
    w->row_bytes = rb;
    w->type = type;
    w->rows = nrows;
    w->cols = cols;
}
#endif


/* Token i's floats: Gaussian of varying scale, zero (i 1), large (i 2),
 * with zero blocks (i 3). */
static void
make_input(float *x, uint32_t cols, uint32_t i, uint64_t *st)
{
    uint32_t  j;
    float     s;

    s = 0.1f + (float) (i % 7);

    for (j = 0; j < cols; j++) {
        x[j] = kvs_test_gauss(st) * s;

        if (i == 1 || (i == 3 && (j / 32) % 2 == 0)) {
            x[j] = 0.0f;

        } else if (i == 2) {
            x[j] *= 1e4f;
        }
    }
}


static void
check_type(const ltype_t *lt, int avx2, double *worst)
{
    float                 *wf, *xf, *wd, *xd, *ya, *yb, *yc, *y1;
    double                 ref, mag, err, m;
    uint8_t               *rows;
    uint32_t               cols, nb, ng, r, i, j, ci, n, b;
    uint64_t               st;
    size_t                 rb, xs, is;
    kvs_err_t              e;
    kvs_cpu_q8_t          *xq;
    kvs_cpu_q8i_t         *xi;
    kvs_cpu_qdot_pt        port, simd, simdi;
    const kvs_cpu_qdot_t  *q;

    q = kvs_cpu_qdot_find(lt->type);
    assert_non_null(q);
    assert_int_equal(q->act, KVS_CPU_ACT_Q8);
    assert_ptr_equal(q->dot, lt->dot);
    port = kvs_cpu_qdot_at(q, KVS_CPU_SIMD_NONE);
    assert_ptr_equal(port, lt->dot);
#if KVS_CPU_X86
    assert_non_null(q->dot_avx2);
    simd = kvs_cpu_qdot_at(q, KVS_CPU_SIMD_AVX2);
    assert_ptr_equal(simd, q->dot_avx2);
    assert_non_null(q->dot_avx2i);
    simdi = q->dot_avx2i;
#else
    simd = port;
    simdi = port;
#endif

    st = 0x51ed + lt->type;

    for (ci = 0; ci < sizeof(colss) / sizeof(colss[0]); ci++) {
        cols = colss[ci];
        nb = cols / 32;
        rb = (size_t) nb * lt->bytes;
        xs = (size_t) nb * sizeof(kvs_cpu_q8_t);
        ng = (nb + 7) / 8;
        is = (size_t) ng * sizeof(kvs_cpu_q8i_t);

        wf = malloc(cols * sizeof(float));
        wd = malloc((size_t) N_ROW * cols * sizeof(float));
        xf = malloc(cols * sizeof(float));
        xd = malloc((size_t) N_TOK * cols * sizeof(float));
        rows = malloc(N_ROW * rb);
        xq = malloc(N_TOK * xs);
        ya = malloc(N_TOK * LDY * sizeof(float));
        yb = malloc(N_TOK * LDY * sizeof(float));
        yc = malloc(N_TOK * LDY * sizeof(float));
        y1 = malloc(N_TOK * sizeof(float));
        xi = malloc(N_TOK * is);
        assert_true(wf && wd && xf && xd && rows && xq && ya && yb && yc
                    && y1 && xi);

        for (r = 0; r < N_ROW; r++) {
            make_row(wf, cols, r, &st);
            assert_int_equal(kvs_quant_quantize(lt->type, wf, rows + r * rb,
                                                cols, &e), KVS_OK);
            assert_int_equal(kvs_quant_dequantize(lt->type, rows + r * rb,
                                                  wd + (size_t) r * cols,
                                                  cols, &e), KVS_OK);
        }

        for (i = 0; i < N_TOK; i++) {
            make_input(xf, cols, i, &st);
            kvs_cpu_q8_quant(xf, xq + (size_t) i * nb, cols);
            kvs_cpu_q8i_fill(xq + (size_t) i * nb, xi + (size_t) i * ng,
                             cols);

            input_floats(xd + (size_t) i * cols, xq + (size_t) i * nb, cols);
        }

        for (r = 0; r < N_ROW; r++) {
            /* every token alone (portable), the reference for the rest */
            for (i = 0; i < N_TOK; i++) {
                port(&y1[i], 1, rows + r * rb, xq + (size_t) i * nb, xs, 1,
                     cols);

                ref = 0.0;
                mag = 0.0;

                for (j = 0; j < cols; j++) {
                    ref += (double) wd[(size_t) r * cols + j]
                           * xd[(size_t) i * cols + j];
                    mag += fabs((double) wd[(size_t) r * cols + j]
                                * xd[(size_t) i * cols + j]);

                    if (lt->affine) {
                        b = j / 32;
                        m = kvs_f16_load(rows + r * rb + b * lt->bytes + 2);
                        mag += fabs(m * xd[(size_t) i * cols + j]);
                    }
                }

                err = fabs((double) y1[i] - ref);

                if (err > TOL * mag) {
                    fail_msg("%s cols %u row %u token %u: %.9g, exact "
                             "%.9g (|err| %g, mag %g)",
                             kvs_ggml_type_name(lt->type), cols, r, i,
                             (double) y1[i], ref, err, mag);
                }

                if (mag > 0.0 && err / mag > *worst) {
                    *worst = err / mag;
                }
            }

            for (n = 1; n <= N_TOK; n++) {
                for (j = 0; j < N_TOK * LDY; j++) {
                    ya[j] = -7.0f;
                    yb[j] = -7.0f;
                    yc[j] = -7.0f;
                }

                /* tokens from N_TOK - n on, so each n sees others */
                port(ya, LDY, rows + r * rb,
                     xq + (size_t) (N_TOK - n) * nb, xs, n, cols);
                if (avx2) {
                    simd(yb, LDY, rows + r * rb,
                         xq + (size_t) (N_TOK - n) * nb, xs, n, cols);
                    simdi(yc, LDY, rows + r * rb,
                          xi + (size_t) (N_TOK - n) * ng, is, n, cols);
                }

                for (i = 0; i < n; i++) {
                    if (memcmp(&ya[i * LDY], &y1[N_TOK - n + i], 4) != 0) {
                        fail_msg("%s cols %u row %u: portable, token %u of "
                                 "%u: %.9g, alone %.9g",
                                 kvs_ggml_type_name(lt->type), cols, r, i,
                                 n, (double) ya[i * LDY],
                                 (double) y1[N_TOK - n + i]);
                    }

                    if (avx2 && memcmp(&yb[i * LDY], &ya[i * LDY], 4) != 0)
                    {
                        fail_msg("%s cols %u row %u: AVX2, token %u of %u: "
                                 "%.9g, portable %.9g",
                                 kvs_ggml_type_name(lt->type), cols, r, i,
                                 n, (double) yb[i * LDY],
                                 (double) ya[i * LDY]);
                    }

                    if (avx2 && memcmp(&yc[i * LDY], &ya[i * LDY], 4) != 0)
                    {
                        fail_msg("%s cols %u row %u: AVX2 interleaved, "
                                 "token %u of %u: %.9g, portable %.9g",
                                 kvs_ggml_type_name(lt->type), cols, r, i,
                                 n, (double) yc[i * LDY],
                                 (double) ya[i * LDY]);
                    }

                    /* nothing written between the outputs */
                    assert_true(ya[i * LDY + 1] == -7.0f
                                && ya[i * LDY + 2] == -7.0f);
                    assert_true(!avx2 || (yb[i * LDY + 1] == -7.0f
                                          && yb[i * LDY + 2] == -7.0f
                                          && yc[i * LDY + 1] == -7.0f
                                          && yc[i * LDY + 2] == -7.0f));
                }

                /* nor past the last */
                for (j = n * LDY; j < N_TOK * LDY; j++) {
                    assert_true(ya[j] == -7.0f && yb[j] == -7.0f
                                && yc[j] == -7.0f);
                }
            }
        }

        free(wf);
        free(wd);
        free(xf);
        free(xd);
        free(rows);
        free(xq);
        free(ya);
        free(yb);
        free(yc);
        free(y1);
        free(xi);
    }
}


/*
 * The packed AVX-512 VNNI kernel against the portable one: a matrix of
 * nrows rows (the first N_ROW made as check_type's, the others Gaussian)
 * and n tokens, every output compared bit for bit; the outputs' row
 * stride leaves 3 floats after each token's rows, which must stay put.
 */
static void
check_packed(const ltype_t *lt, uint32_t cols, uint32_t nrows, uint64_t *st)
{
#if KVS_CPU_X86
    float           *wf, *xf, *yp, *yr;
    size_t           rb, xs, ldy, psize;
    uint8_t         *rows, *pack;
    uint32_t         nb, r, i, n, g;
    kvs_err_t        e;
    kvs_cpu_q8_t    *xq;
    kvs_cpu_mat_t    w;

    nb = cols / 32;
    rb = (size_t) nb * lt->bytes;
    xs = (size_t) nb * sizeof(kvs_cpu_q8_t);
    ldy = nrows + 3;

    wf = malloc(cols * sizeof(float));
    xf = malloc(cols * sizeof(float));
    rows = malloc(nrows * rb);
    xq = malloc(N_TOK * xs);
    yp = malloc(N_TOK * ldy * sizeof(float));
    yr = malloc(N_TOK * ldy * sizeof(float));
    assert_true(wf && xf && rows && xq && yp && yr);

    for (r = 0; r < nrows; r++) {
        make_row(wf, cols, r < N_ROW ? r : 0, st);
        assert_int_equal(kvs_quant_quantize(lt->type, wf, rows + r * rb,
                                            cols, &e), KVS_OK);
    }

    for (i = 0; i < N_TOK; i++) {
        make_input(xf, cols, i, st);
        kvs_cpu_q8_quant(xf, xq + (size_t) i * nb, cols);
    }

    set_mat(&w, lt->type, rows, rb, nrows, cols);

    psize = kvs_cpu_qlp_size(&w);
    assert_true(psize >= (size_t) (nrows + 15) / 16 * nb
                         * kvs_cpu_qlp_rec(lt->type));
    assert_true(psize % 64 == 0);
    pack = aligned_alloc(64, psize);
    assert_non_null(pack);
    kvs_cpu_qlp_fill(&w, pack);
    w.pack = pack;

    for (n = 1; n <= N_TOK; n++) {
        for (i = 0; i < N_TOK * ldy; i++) {
            yp[i] = -7.0f;
            yr[i] = -7.0f;
        }

        for (r = 0; r < nrows; r++) {
            lt->dot(yr + r, ldy, rows + r * rb,
                    xq + (size_t) (N_TOK - n) * nb, xs, n, cols);
        }

        for (g = 0; g < (nrows + 15) / 16; g++) {
            kvs_cpu_qlp_rows_avx512(yp, ldy, &w, g,
                                    xq + (size_t) (N_TOK - n) * nb, n);
        }

        if (memcmp(yp, yr, N_TOK * ldy * sizeof(float)) != 0) {
            for (i = 0; i < N_TOK * ldy; i++) {
                if (memcmp(&yp[i], &yr[i], 4) != 0) {
                    fail_msg("%s cols %u rows %u: packed AVX-512, token "
                             "%zu of %u, row %zu: %.9g, portable %.9g",
                             kvs_ggml_type_name(lt->type), cols, nrows,
                             i / ldy, n, i % ldy, (double) yp[i],
                             (double) yr[i]);
                }
            }
        }
    }

    free(pack);
    free(wf);
    free(xf);
    free(rows);
    free(xq);
    free(yp);
    free(yr);
#else
    (void) lt;
    (void) cols;
    (void) nrows;
    (void) st;
#endif
}


/*
 * Q8_0's packed AVX-512 VNNI kernel (kvs_cpu_q8p_rows_avx512), whose
 * float order is its own: with n tokens in one call every token's
 * outputs are its outputs alone (passes of 8, 4, 2 and 1 tokens), each
 * within 2e-6 of sum |w x| of the exact product, and nothing past the
 * matrix's rows is written.
 */
static void
check_packed_q8(uint32_t cols, uint32_t nrows, uint64_t *st)
{
#if KVS_CPU_X86
    float           *wf, *xf, *wd, *xd, *yp, *y1;
    double           ref, mag;
    size_t           rb, xs, ldy, psize;
    uint8_t         *rows, *pack;
    uint32_t         nb, r, i, j, n, g, t;
    kvs_err_t        e;
    kvs_cpu_q8_t    *xq;
    kvs_cpu_mat_t    w;

    nb = cols / 32;
    rb = (size_t) nb * 34;
    xs = (size_t) nb * sizeof(kvs_cpu_q8_t);
    ldy = nrows + 3;

    wf = malloc(cols * sizeof(float));
    xf = malloc(cols * sizeof(float));
    wd = malloc((size_t) nrows * cols * sizeof(float));
    xd = malloc((size_t) N_TOK * cols * sizeof(float));
    rows = malloc(nrows * rb);
    xq = malloc(N_TOK * xs);
    yp = malloc(N_TOK * ldy * sizeof(float));
    y1 = malloc(N_TOK * ldy * sizeof(float));
    assert_true(wf && xf && wd && xd && rows && xq && yp && y1);

    for (r = 0; r < nrows; r++) {
        make_row(wf, cols, r < N_ROW ? r : 0, st);
        assert_int_equal(kvs_quant_quantize(KVS_GGML_Q8_0, wf, rows + r * rb,
                                            cols, &e), KVS_OK);
        assert_int_equal(kvs_quant_dequantize(KVS_GGML_Q8_0, rows + r * rb,
                                              wd + (size_t) r * cols, cols,
                                              &e), KVS_OK);
    }

    for (i = 0; i < N_TOK; i++) {
        make_input(xf, cols, i, st);
        kvs_cpu_q8_quant(xf, xq + (size_t) i * nb, cols);
        input_floats(xd + (size_t) i * cols, xq + (size_t) i * nb, cols);
    }

    set_mat(&w, KVS_GGML_Q8_0, rows, rb, nrows, cols);

    psize = kvs_cpu_q8p_size(&w);
    pack = aligned_alloc(64, psize);
    assert_non_null(pack);
    kvs_cpu_q8p_fill(&w, pack);
    w.pack = pack;

    /* every token alone: the references */
    for (i = 0; i < N_TOK * ldy; i++) {
        y1[i] = -7.0f;
    }

    for (t = 0; t < N_TOK; t++) {
        for (g = 0; g < (nrows + 15) / 16; g++) {
            kvs_cpu_q8p_rows_avx512(y1 + t * ldy, ldy, &w, g,
                                    xq + (size_t) t * nb, 1);
        }

        for (r = 0; r < nrows; r++) {
            ref = 0.0;
            mag = 0.0;

            for (j = 0; j < cols; j++) {
                ref += (double) wd[(size_t) r * cols + j]
                       * xd[(size_t) t * cols + j];
                mag += fabs((double) wd[(size_t) r * cols + j]
                            * xd[(size_t) t * cols + j]);
            }

            if (fabs(y1[t * ldy + r] - ref) > 2e-6 * mag) {
                fail_msg("Q8_0 packed, cols %u, token %u row %u: %.9g, "
                         "exact %.9g (sum |w x| %.9g)", cols, t, r,
                         (double) y1[t * ldy + r], ref, mag);
            }
        }
    }

    for (n = 1; n <= N_TOK; n++) {
        for (i = 0; i < N_TOK * ldy; i++) {
            yp[i] = -7.0f;
        }

        for (g = 0; g < (nrows + 15) / 16; g++) {
            kvs_cpu_q8p_rows_avx512(yp, ldy, &w, g,
                                    xq + (size_t) (N_TOK - n) * nb, n);
        }

        for (i = 0; i < n * ldy; i++) {
            if (memcmp(&yp[i], &y1[(N_TOK - n) * ldy + i], 4) != 0) {
                fail_msg("Q8_0 packed, cols %u rows %u: token %zu of %u, "
                         "row %zu: %.9g, alone %.9g", cols, nrows,
                         i / ldy, n, i % ldy, (double) yp[i],
                         (double) y1[(N_TOK - n) * ldy + i]);
            }
        }

        for (i = n * ldy; i < N_TOK * ldy; i++) {
            assert_true(yp[i] == -7.0f);
        }
    }

    free(pack);
    free(wf);
    free(xf);
    free(wd);
    free(xd);
    free(rows);
    free(xq);
    free(yp);
    free(y1);
#else
    (void) cols;
    (void) nrows;
    (void) st;
#endif
}


static void
test_packed(void **state)
{
    size_t    t, ci;
    uint64_t  st;

    if (kvs_cpu_simd() < KVS_CPU_SIMD_AVX512) {
        print_message("SKIP: no AVX-512 VNNI here: the packed kernels are "
                      "not run\n");
        return;
    }

    st = 0x9ac4;

    for (t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        if (kvs_cpu_qlp_rec(types[t].type) == 0) {
            assert_int_equal(types[t].type, KVS_GGML_Q8_0);

            for (ci = 0; ci < sizeof(colss) / sizeof(colss[0]); ci++) {
                check_packed_q8(colss[ci], N_ROW, &st);
                check_packed_q8(colss[ci], 37, &st);
            }
            continue;
        }

        for (ci = 0; ci < sizeof(colss) / sizeof(colss[0]); ci++) {
            check_packed(&types[t], colss[ci], N_ROW, &st);
            check_packed(&types[t], colss[ci], 37, &st);
        }
    }
}


static void
test_types(void **state)
{
    int       avx2;
    size_t    t;
    double    worst;

    avx2 = kvs_cpu_simd() >= KVS_CPU_SIMD_AVX2;
    if (!avx2) {
        print_message("SKIP: no AVX2 here (or KVSERVE_CPU_SIMD=0): the "
                      "portable kernels are checked alone\n");
    }

    for (t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        worst = 0.0;
        check_type(&types[t], avx2, &worst);
        print_message("%-7s largest |y - exact| / mag = %.3g\n",
                      kvs_ggml_type_name(types[t].type), worst);
    }
}


/* A zero input gives exactly +0; so does a zero row. */
static void
test_zero(void **state)
{
    float           x[256], y;
    uint8_t         row[256 / 32 * 34];
    size_t          t;
    kvs_err_t       e;
    kvs_cpu_q8_t    xq[8];
    uint64_t        st;
    uint32_t        j;
    int             lv;
    kvs_cpu_qdot_pt f;

    st = 7;

    for (t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        for (lv = 0; lv < 2; lv++) {
            if (lv == 1 && kvs_cpu_simd() < KVS_CPU_SIMD_AVX2) {
                continue;
            }

            f = kvs_cpu_qdot_at(kvs_cpu_qdot_find(types[t].type),
                                lv == 0 ? KVS_CPU_SIMD_NONE
                                        : KVS_CPU_SIMD_AVX2);

            for (j = 0; j < 256; j++) {
                x[j] = kvs_test_gauss(&st);
            }

            assert_int_equal(kvs_quant_quantize(types[t].type, x, row, 256,
                                                &e), KVS_OK);
            memset(x, 0, sizeof(x));
            kvs_cpu_q8_quant(x, xq, 256);
            y = -1.0f;
            f(&y, 1, row, xq, sizeof(xq), 1, 256);
            assert_true(y == 0.0f && !signbit(y));

            /* a zero row with a Gaussian input */
            assert_int_equal(kvs_quant_quantize(types[t].type, x, row, 256,
                                                &e), KVS_OK);
            for (j = 0; j < 256; j++) {
                x[j] = kvs_test_gauss(&st);
            }
            kvs_cpu_q8_quant(x, xq, 256);
            y = -1.0f;
            f(&y, 1, row, xq, sizeof(xq), 1, 256);
            assert_true(y == 0.0f && !signbit(y));
        }
    }
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_packed),
        cmocka_unit_test(test_zero),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
