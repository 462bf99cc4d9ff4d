/*
 * test_cpu_amxb: the F16 / BF16 product on AMX-BF16 tiles
 * (src/backend/cpu/kvs_cpu_amxb_x86.c), on any x86-64 host.
 *
 * As test_cpu_amx does for Q8_0, the kernel's file is compiled a second
 * time with kvs_test_amx_emu.h's tiles (TDPBF16PS as Intel's SDM states
 * it); its packing runs as it is, so this part needs AVX-512 (skipped
 * without, saying so).  What it checks:
 *
 *  - the split: xh is x rounded to nearest even BF16 (against the
 *    rounding worked out on the bits' neighbours), xh + xl within 2^-16
 *    of x relative (2^-17 plus the last bit), infinities and NaN kept;
 *  - the emulated kernel gives kvs_cpu_amxb_ref's bits, memcmp, for F16
 *    and BF16 weights, n of 1 .. 70 tokens (one tile row, 16, 16 + 1,
 *    32 + ragged passes), 5 to 256 rows (partial group, partial pair,
 *    a whole task), 32 to 1024 columns; writes nothing past the task's
 *    rows; no emulated fault; one release per call; the number of tile
 *    products is the plan's (2 or 3 per 32 columns, token half and
 *    group);
 *  - accuracy: every output within 2^-14 of sum |x_j w_j| of the exact
 *    (double) product, while BF16 inputs alone (xl dropped) miss that
 *    bound somewhere: the low parts matter, and are there;
 *  - on a host with AMX-BF16 (kvs_cpu_amx_ready), the library's kernel
 *    on the real tiles: the SDM statement's bits for every output (the
 *    manual's pseudo-code is not a promise of the bits, but the lent
 *    H200 machine's Xeon gave them for all 19,390 outputs, 2026-12-04;
 *    a CPU that does not is named by this test), within the same bound,
 *    and a token's results the same bits in a batch of 70 and of 64 (the
 *    invariant the product keeps);
 *  - the switch: the tiles are used by default exactly where the CPU
 *    has them, never under KVSERVE_CPU_GEMM=avx2 or avx512,
 *    KVSERVE_CPU_SIMD=0/1/2 or KVSERVE_CPU_BLAS=1, and kvs_cpu_kernels
 *    says which.
 */

#include "kvs_test.h"

#include "backend/cpu/kvs_cpu.h"
#include "backend/cpu/kvs_cpu_impl.h"
#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"

#if KVS_CPU_X86
#include <immintrin.h>
#include "kvs_test_amx_emu.h"

/* the kernel again, on the emulated tiles, under its own names */
#define KVS_CPU_AMX_EMU      1
#define kvs_cpu_amxb_rows    kvs_test_amxb_rows
#define kvs_cpu_amxb_ref     kvs_test_amxb_ref
#define kvs_cpu_bf16_split   kvs_test_bf16_split
#include "backend/cpu/kvs_cpu_amxb_x86.c"
#undef kvs_cpu_amxb_rows
#undef kvs_cpu_amxb_ref
#undef kvs_cpu_bf16_split

/* the library's (the header was read above under the test's names) */
void kvs_cpu_bf16_split(const float *x, uint16_t *xh, uint16_t *xl,
    uint32_t cols);
void kvs_cpu_amxb_ref(float *y, size_t ldy, const float *x, uint32_t n,
    const kvs_cpu_mat_t *w, uint32_t r0, uint32_t nr);
void kvs_cpu_amxb_rows(float *y, size_t ldy, const uint16_t *xh,
    const uint16_t *xl, uint32_t n, const kvs_cpu_mat_t *w, uint32_t r0,
    uint32_t nr, void *scratch);
#endif


#define N_MAX  70
#define PAD    3                    /* outputs past the task's rows */


#if KVS_CPU_X86

static uint64_t
rnd(uint64_t *st)
{
    *st = *st * 6364136223846793005ULL + 1442695040888963407ULL;

    return *st >> 17;
}


/* about N(0, 1) */
static float
gauss(uint64_t *st)
{
    double  s;
    int     i;

    s = 0.0;

    for (i = 0; i < 12; i++) {
        s += (double) (rnd(st) & 0xffffff) / 16777216.0;
    }

    return (float) (s - 6.0);
}


static int
have_avx512(void)
{
    unsetenv("KVSERVE_CPU_SIMD");

    return kvs_cpu_simd() >= KVS_CPU_SIMD_AVX512;
}


/* The split against the nearest BF16 found by looking at both
 * neighbours of the truncation. */
static void
test_split(void **state)
{
    float     x[4096], lo, hi, d;
    uint16_t  xh[4096], xl[4096], t;
    uint32_t  u, j;
    uint64_t  st;

    st = 7;

    for (j = 0; j < 4096; j++) {
        x[j] = gauss(&st) * ldexpf(1.0f, (int) (rnd(&st) % 40) - 20);
    }

    x[0] = 0.0f;
    x[1] = -0.0f;
    x[2] = 1.0f + ldexpf(1.0f, -8);      /* a tie: stays even (1.0) */
    x[3] = 1.0f + 3 * ldexpf(1.0f, -8);  /* a tie: up, to even */
    x[4] = INFINITY;
    x[5] = -INFINITY;
    x[6] = NAN;
    x[7] = FLT_MAX;

    kvs_cpu_bf16_split(x, xh, xl, 4096);

    assert_int_equal(xh[2], 0x3f80);
    assert_int_equal(xh[3], 0x3f82);
    assert_true(isinf(kvs_bf16_to_f32(xh[4])) && xl[4] == 0);
    assert_true(kvs_bf16_to_f32(xh[4]) > 0);
    assert_true(isinf(kvs_bf16_to_f32(xh[5])) && xl[5] == 0);
    assert_true(kvs_bf16_to_f32(xh[5]) < 0);
    assert_true(isnan(kvs_bf16_to_f32(xh[6])));
    assert_true(isinf(kvs_bf16_to_f32(xh[7])));        /* FLT_MAX rounds up */

    for (j = 0; j < 4096; j++) {
        if (j >= 4 && j <= 7) {
            continue;
        }

        memcpy(&u, &x[j], 4);
        t = (uint16_t) (u >> 16);
        lo = kvs_bf16_to_f32(t);
        hi = kvs_bf16_to_f32((uint16_t) (t + 1));

        /* the nearer of the two (magnitudes), the even one on a tie */
        d = fabsf(x[j] - lo) - fabsf(hi - x[j]);
        if (d < 0 || (d == 0 && (t & 1) == 0)) {
            assert_int_equal(xh[j], t);
        } else {
            assert_int_equal(xh[j], (uint16_t) (t + 1));
        }

        assert_true(fabs((double) x[j] - ((double) kvs_bf16_to_f32(xh[j])
                                          + (double) kvs_bf16_to_f32(xl[j])))
                    <= fabs((double) x[j]) * ldexp(1.0, -16));
    }
}


typedef struct {
    kvs_cpu_mat_t   w;
    uint16_t       *data;
    float          *x;                /* [N_MAX][cols] */
    uint16_t       *xh, *xl;
    float          *ya, *yr;          /* [N_MAX][ldy] */
    void           *scratch;
    size_t          ldy;
} amxb_case_t;


static void
case_make(amxb_case_t *c, int type, uint32_t rows, uint32_t cols,
    uint64_t *st)
{
    float     f;
    size_t    z;
    uint32_t  i;

    memset(c, 0, sizeof(*c));
    c->data = malloc((size_t) rows * cols * 2);
    c->x = malloc((size_t) N_MAX * cols * sizeof(float));
    c->xh = malloc((size_t) N_MAX * cols * 2);
    c->xl = malloc((size_t) N_MAX * cols * 2);
    c->ldy = rows + PAD;
    c->ya = malloc(N_MAX * c->ldy * sizeof(float));
    c->yr = malloc(N_MAX * c->ldy * sizeof(float));
    c->scratch = aligned_alloc(64, (size_t) KVS_CPU_BLAS_TILE * cols * 4);
    assert_non_null(c->data);
    assert_non_null(c->x);
    assert_non_null(c->xh);
    assert_non_null(c->xl);
    assert_non_null(c->ya);
    assert_non_null(c->yr);
    assert_non_null(c->scratch);

    for (z = 0; z < (size_t) rows * cols; z++) {
        f = gauss(st) * 0.05f;

        /* some rows larger, some tiny (F16 subnormals), one zero */
        if (z / cols % 7 == 3) {
            f *= 400.0f;
        } else if (z / cols % 7 == 5) {
            f *= 1e-4f;
        } else if (z / cols == 1) {
            f = 0.0f;
        }

        c->data[z] = type == KVS_GGML_F16 ? kvs_f32_to_f16(f)
                                          : kvs_f32_to_bf16(f);
    }

    for (z = 0; z < (size_t) N_MAX * cols; z++) {
        c->x[z] = gauss(st);

        if (z / cols % 9 == 4) {
            c->x[z] *= 1e-3f;
        }
    }

    for (i = 0; i < N_MAX; i++) {
        kvs_cpu_bf16_split(c->x + (size_t) i * cols,
                           c->xh + (size_t) i * cols,
                           c->xl + (size_t) i * cols, cols);
    }

    c->w.data = c->data;
    c->w.row_bytes = (size_t) cols * 2;
    c->w.type = type;
    c->w.rows = rows;
    c->w.cols = cols;
}


static void
case_free(amxb_case_t *c)
{
    free(c->data);
    free(c->x);
    free(c->xh);
    free(c->xl);
    free(c->ya);
    free(c->yr);
    free(c->scratch);
}


/* The emulated kernel against the statement, every n, as one task of
 * rows [r0, r0 + nr). */
static void
check_emu(amxb_case_t *c, uint32_t r0, uint32_t nr)
{
    size_t    i, bytes;
    uint32_t  n, passes, pairs;
    uint64_t  dps;

    static const uint32_t  ns[] = { 1, 2, 15, 16, 17, 31, 32, 33, 64, 70 };

    bytes = N_MAX * c->ldy * sizeof(float);
    passes = c->w.type == KVS_GGML_F16 ? 3 : 2;
    pairs = (nr + 31) / 32;

    kvs_cpu_amxb_ref(c->yr, c->ldy, c->x, N_MAX, &c->w, r0, nr);

    for (i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
        n = ns[i];
        memset(c->ya, 0xff, bytes);
        memset(&kvs_amx_emu, 0, sizeof(kvs_amx_emu));

        kvs_test_amxb_rows(c->ya, c->ldy, c->xh, c->xl, n, &c->w, r0, nr,
                           c->scratch);

        assert_string_equal(kvs_amx_emu.fault, "");
        assert_int_equal(kvs_amx_emu.configured, 0);
        assert_int_equal(kvs_amx_emu.releases, 1);

        /* per pass of 32 tokens, pair of groups and 32 columns: two
         * products per token half present, per split part */
        dps = (uint64_t) pairs * (c->w.cols / 32) * passes
              * (2 * (n / 32) * 2 + (n % 32 == 0 ? 0
                                     : n % 32 > 16 ? 4 : 2));
        assert_int_equal(kvs_amx_emu.dps, dps);

        for (size_t t = 0; t < n; t++) {
            if (memcmp(c->ya + t * c->ldy, c->yr + t * c->ldy,
                       nr * sizeof(float)) != 0)
            {
                for (size_t r = 0; r < nr; r++) {
                    if (memcmp(&c->ya[t * c->ldy + r],
                               &c->yr[t * c->ldy + r], 4) != 0)
                    {
                        fail_msg("%s rows %u+%u cols %u n %u: token %zu "
                                 "row %zu: tiles %.9g, statement %.9g",
                                 c->w.type == KVS_GGML_F16 ? "F16" : "BF16",
                                 r0, nr, c->w.cols, n, t, r,
                                 c->ya[t * c->ldy + r],
                                 c->yr[t * c->ldy + r]);
                    }
                }
            }

            /* nothing past the task's rows, nothing past n tokens */
            for (size_t r = nr; r < c->ldy; r++) {
                uint32_t  u;

                memcpy(&u, &c->ya[t * c->ldy + r], 4);
                assert_int_equal(u, 0xffffffffu);
            }
        }

        for (size_t z = n * c->ldy; z < N_MAX * c->ldy; z++) {
            uint32_t  u;

            memcpy(&u, &c->ya[z], 4);
            assert_int_equal(u, 0xffffffffu);
        }
    }
}


/* |y - exact| <= 2^-14 sum |x w| for every output (returns the worst
 * ratio of error to that bound) */
static double
bound_ratio(const amxb_case_t *c, const float *y, uint32_t n, uint32_t r0,
    uint32_t nr, int hi_only)
{
    float            wf;
    double           ex, mag, worst, xv;
    uint32_t         i, r, j;
    const uint16_t  *row;

    worst = 0.0;

    for (i = 0; i < n; i++) {
        for (r = 0; r < nr; r++) {
            row = c->data + (size_t) (r0 + r) * c->w.cols;
            ex = 0.0;
            mag = 0.0;

            for (j = 0; j < c->w.cols; j++) {
                wf = c->w.type == KVS_GGML_F16 ? kvs_f16_to_f32(row[j])
                                               : kvs_bf16_to_f32(row[j]);
                xv = c->x[(size_t) i * c->w.cols + j];
                ex += (double) wf * xv;
                mag += fabs((double) wf * xv);
            }

            if (hi_only) {
                /* the same product with the inputs rounded to BF16 */
                double  s = 0.0;

                for (j = 0; j < c->w.cols; j++) {
                    wf = c->w.type == KVS_GGML_F16
                         ? kvs_f16_to_f32(row[j]) : kvs_bf16_to_f32(row[j]);
                    s += (double) wf
                         * kvs_bf16_to_f32(c->xh[(size_t) i * c->w.cols + j]);
                }

                if (mag > 0 && fabs(s - ex) / (mag * ldexp(1.0, -14))
                               > worst)
                {
                    worst = fabs(s - ex) / (mag * ldexp(1.0, -14));
                }
                continue;
            }

            if (mag == 0) {
                assert_true(y[(size_t) i * c->ldy + r] == 0.0f);
                continue;
            }

            xv = fabs((double) y[(size_t) i * c->ldy + r] - ex)
                 / (mag * ldexp(1.0, -14));
            worst = xv > worst ? xv : worst;
        }
    }

    return worst;
}


static void
test_emulated(void **state)
{
    int          t;
    size_t       ci, ri;
    double       worst, hi_worst;
    uint64_t     st;
    amxb_case_t  c;

    static const int       types[] = { KVS_GGML_BF16, KVS_GGML_F16 };
    static const uint32_t  colss[] = { 32, 96, 1024 };
    static const uint32_t  rowss[] = { 5, 16, 17, 33, 64 };

    if (!have_avx512()) {
        print_message("SKIP: no AVX-512 here: the tile kernel's packing "
                      "cannot run\n");
        return;
    }

    st = 0xb16;

    for (t = 0; t < 2; t++) {
        for (ci = 0; ci < sizeof(colss) / sizeof(colss[0]); ci++) {
            for (ri = 0; ri < sizeof(rowss) / sizeof(rowss[0]); ri++) {
                case_make(&c, types[t], rowss[ri] + 3, colss[ci], &st);

                /* a task that starts past row 0: rows 3 .. */
                check_emu(&c, 3, rowss[ri]);

                worst = bound_ratio(&c, c.yr, N_MAX, 3, rowss[ri], 0);
                assert_true(worst <= 1.0);
                case_free(&c);
            }
        }

        /* a whole task of 256 rows, 256 columns: the low parts matter */
        case_make(&c, types[t], KVS_CPU_BLAS_TILE, 256, &st);
        check_emu(&c, 0, KVS_CPU_BLAS_TILE);
        worst = bound_ratio(&c, c.yr, N_MAX, 0, KVS_CPU_BLAS_TILE, 0);
        hi_worst = bound_ratio(&c, c.yr, N_MAX, 0, KVS_CPU_BLAS_TILE, 1);
        print_message("%s: worst error %.3f of the bound; BF16 inputs "
                      "alone %.1f\n", types[t] == KVS_GGML_F16 ? "F16"
                      : "BF16", worst, hi_worst);
        assert_true(worst <= 1.0);
        assert_true(hi_worst > 1.0);
        case_free(&c);
    }
}


/* The library's kernel on real tiles, where the host has them. */
static void
test_real(void **state)
{
    int          t;
    size_t       equal, total, i;
    double       worst;
    uint64_t     st;
    amxb_case_t  c;

    static const int  types[] = { KVS_GGML_BF16, KVS_GGML_F16 };

    if (!have_avx512()
        || (kvs_cpu_amx_ready(NULL) & KVS_CPU_AMX_BF16) == 0)
    {
        print_message("SKIP: no AMX-BF16 here: the real tiles are checked "
                      "on an AMX host (t/gpu/remote.sh's amx job)\n");
        return;
    }

    st = 0x5a;

    for (t = 0; t < 2; t++) {
        case_make(&c, types[t], 256 + 21, 1024, &st);

        kvs_cpu_amxb_ref(c.yr, c.ldy, c.x, N_MAX, &c.w, 0, 256 + 21);
        memset(c.ya, 0xff, N_MAX * c.ldy * sizeof(float));
        kvs_cpu_amxb_rows(c.ya, c.ldy, c.xh, c.xl, N_MAX, &c.w, 0, 256,
                          c.scratch);
        kvs_cpu_amxb_rows(c.ya + 256, c.ldy, c.xh, c.xl, N_MAX, &c.w, 256,
                          21, c.scratch);

        worst = bound_ratio(&c, c.ya, N_MAX, 0, 256 + 21, 0);
        assert_true(worst <= 1.0);

        equal = 0;
        total = 0;

        for (i = 0; i < N_MAX * c.ldy; i++) {
            if (i % c.ldy < 256 + 21) {
                equal += memcmp(&c.ya[i], &c.yr[i], 4) == 0;
                total++;
            }
        }

        /* the same tokens in a batch of 64: the same bits */
        memcpy(c.yr, c.ya, N_MAX * c.ldy * sizeof(float));
        kvs_cpu_amxb_rows(c.ya, c.ldy, c.xh, c.xl, 64, &c.w, 0, 256,
                          c.scratch);
        kvs_cpu_amxb_rows(c.ya + 256, c.ldy, c.xh, c.xl, 64, &c.w, 256, 21,
                          c.scratch);
        assert_memory_equal(c.ya, c.yr, 64 * c.ldy * sizeof(float));

        print_message("real tiles, %s: worst error %.3f of the bound; "
                      "%zu of %zu outputs equal the SDM statement's bits\n",
                      types[t] == KVS_GGML_F16 ? "F16" : "BF16", worst,
                      equal, total);
        assert_int_equal(equal, total);
        case_free(&c);
    }
}

static void
test_switch(void **state)
{
    int    amx;
    char   buf[512];

    static const char  *off[][2] = {
        { "KVSERVE_CPU_GEMM", "avx2" },
        { "KVSERVE_CPU_GEMM", "avx512" },
        { "KVSERVE_CPU_SIMD", "0" },
        { "KVSERVE_CPU_SIMD", "1" },
        { "KVSERVE_CPU_SIMD", "2" },
        { "KVSERVE_CPU_BLAS", "1" },
    };

    unsetenv("KVSERVE_CPU_GEMM");
    unsetenv("KVSERVE_CPU_BLAS");
    amx = have_avx512() && (kvs_cpu_amx_ready(NULL) & KVS_CPU_AMX_BF16);

    assert_int_equal(kvs_cpu_amxb_on(kvs_cpu_simd()), amx);
    assert_int_equal(kvs_cpu_amxb_on(KVS_CPU_SIMD_AVX2), 0);
    kvs_cpu_kernels(buf, sizeof(buf));
    print_message("cpu kernels: %s\n", buf);
    assert_int_equal(strstr(buf, "bf16 tiles for F16/BF16 prefill: on")
                     != NULL, amx);

    setenv("KVSERVE_CPU_GEMM", "amx", 1);
    assert_int_equal(kvs_cpu_amxb_on(kvs_cpu_simd()), amx);
    unsetenv("KVSERVE_CPU_GEMM");

    for (size_t i = 0; i < sizeof(off) / sizeof(off[0]); i++) {
        setenv(off[i][0], off[i][1], 1);
        assert_int_equal(kvs_cpu_amxb_on(KVS_CPU_SIMD_AVX512), 0);

        if (amx) {
            kvs_cpu_kernels(buf, sizeof(buf));
            assert_null(strstr(buf, "bf16 tiles for F16/BF16 prefill: on"));
        }

        unsetenv(off[i][0]);
    }
}

#else

static void
test_switch(void **state)
{
}

static void
test_split(void **state)
{
    print_message("SKIP: not x86-64\n");
}

static void
test_emulated(void **state)
{
}

static void
test_real(void **state)
{
}

#endif


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_emulated),
        cmocka_unit_test(test_real),
        cmocka_unit_test(test_switch),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
