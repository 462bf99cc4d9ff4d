/*
 * test_cpu_qla: the AMX int8 tile kernels of the Q4_0 family and Q4_K
 * (src/backend/cpu/kvs_cpu_qla_x86.c), on any x86-64 host with AVX-512.
 *
 * The kernel's file is compiled a second time here with its _tile_*
 * operations replaced by kvs_test_amx_emu.h's C emulation (Intel's
 * semantics, with their configuration and shape checks); its AVX-512
 * float steps run as they are.  What it checks, for Q4_0, Q4_1, Q5_0,
 * Q5_1 and IQ4_NL:
 *
 *  - kvs_cpu_q8a_fill puts each token's blocks where the kernel reads
 *    them;
 *  - its outputs are the portable kernel's (kvs_cpu_qdot_at(e, 0)) bits,
 *    memcmp, for every n of 1 .. 35 tokens (below one tile, one tile,
 *    one and a part, two and a part), matrices of 5, 16 and 37 rows
 *    (partial, whole, two and a partial group), rows of 32 to 4096
 *    columns (1 block: seven empty classes; 3, 25: classes of unequal
 *    length; 128); weights from our quantizer with zero blocks, large
 *    scales and raw level bytes (every level, both nibbles); inputs
 *    Gaussian, zero and large; nothing written past the matrix's rows;
 *  - the emulation saw no fault, one tile product per whole 16 tokens,
 *    block and group, and every call released the tiles;
 *  - on a host with AMX-INT8 (kvs_cpu_amx_ready), the library's kernel
 *    on the real tiles gives the same bits;
 *  - Q4_K (kvs_cpu_qka_rows) the same way against kvs_cpu_qk.c's
 *    portable kernel, rows of 256 to 4096 columns, some rows with raw
 *    scale bytes, one with every level and scale at its largest, and a
 *    token whose sums with it pass 2^24 so that one float rounding too
 *    many shows (summing a super-block's eight terms one by one fails);
 *  - kvs_cpu_qla_on: on where AMX-INT8 is usable at the AVX-512 level,
 *    off under KVSERVE_CPU_SIMD=0, 1 or 2 and below AVX-512.
 */

#include "kvs_test.h"

#include "backend/cpu/kvs_cpu.h"
#include "backend/cpu/kvs_cpu_impl.h"
#include "backend/cpu/kvs_cpu_qdot.h"
#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"

#if KVS_CPU_X86
#include <immintrin.h>
#include "kvs_test_amx_emu.h"
#include "kvs_test_q8in.h"

/* the kernel again, on the emulated tiles, under its own names */
#define KVS_CPU_AMX_EMU      1
#define kvs_cpu_qla_rows     kvs_test_qla_rows
#define kvs_cpu_qla_scratch  kvs_test_qla_scratch
#define kvs_cpu_q8a_fill     kvs_test_q8a_fill
#define kvs_cpu_qka_rows     kvs_test_qka_rows
#define kvs_cpu_qka_scratch  kvs_test_qka_scratch
#define kvs_cpu_q8ka_fill    kvs_test_q8ka_fill
size_t kvs_test_qla_scratch(const kvs_cpu_mat_t *w);
size_t kvs_test_qka_scratch(const kvs_cpu_mat_t *w);
void kvs_test_q8a_fill(const kvs_cpu_q8_t *x, uint32_t i,
    kvs_cpu_q8a_t *dst, uint32_t cols);
void kvs_test_q8ka_fill(const kvs_cpu_q8k_t *x, uint32_t i,
    kvs_cpu_q8ka_t *dst, uint32_t cols);
#include "backend/cpu/kvs_cpu_qla_x86.c"
#undef kvs_cpu_qla_rows
#undef kvs_cpu_qla_scratch
#undef kvs_cpu_q8a_fill
#undef kvs_cpu_qka_rows
#undef kvs_cpu_qka_scratch
#undef kvs_cpu_q8ka_fill

/* the library's, on the real tiles (kvs_cpu_amx.h declared the copy) */
void kvs_cpu_qla_rows(float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8a_t *xa, const kvs_cpu_q8_t *xq,
    uint32_t n, void *scratch);
size_t kvs_cpu_qla_scratch(const kvs_cpu_mat_t *w);
void kvs_cpu_qka_rows(float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8ka_t *xa, const kvs_cpu_q8k_t *xk,
    uint32_t n, void *scratch);
size_t kvs_cpu_qka_scratch(const kvs_cpu_mat_t *w);
#endif

#include "backend/cpu/kvs_cpu_amx.h"


#define N_TOK  35
#define PAD    3                    /* outputs past the rows, per token */


#if KVS_CPU_X86

static const uint32_t  types[] = {
    KVS_GGML_Q4_0, KVS_GGML_Q4_1, KVS_GGML_Q5_0, KVS_GGML_Q5_1,
    KVS_GGML_IQ4_NL, KVS_GGML_Q8_0
};


static uint64_t
rnd(uint64_t *st)
{
    *st = *st * 6364136223846793005ULL + 1442695040888963407ULL;

    return *st >> 17;
}


/* rows x cols of type from our quantizer; some rows with a zero block,
 * one with a large scale, some with one block's level bytes (the last
 * 16 of a block: every type's nibbles) raw */
static uint8_t *
make_w(uint32_t type, uint32_t rows, uint32_t cols, size_t rb,
    uint64_t *st)
{
    float      *x, s;
    uint8_t    *w, *blk;
    uint32_t    r, j, nb, bb;
    kvs_err_t   e;

    nb = cols / 32;
    bb = (uint32_t) (rb / nb);
    x = malloc(cols * sizeof(float));
    w = malloc((size_t) rows * rb);
    assert_non_null(x);
    assert_non_null(w);

    for (r = 0; r < rows; r++) {
        s = r == 2 ? 3000.0f : 0.01f + (float) (r % 7);

        for (j = 0; j < cols; j++) {
            x[j] = s * kvs_test_gauss(st);
        }

        if (r % 3 == 1) {
            memset(x + (r % nb) * 32, 0, 32 * sizeof(float));
        }

        assert_int_equal(kvs_quant_quantize(type, x, w + (size_t) r * rb,
                                            cols, &e), KVS_OK);

        if (r % 4 == 3) {
            blk = w + (size_t) r * rb + (size_t) (nb / 2) * bb;

            for (j = bb - 16; j < bb; j++) {
                blk[j] = (uint8_t) rnd(st);
            }
            blk[bb - 16] = 0xff;
            blk[bb - 1] = 0x00;
        }
    }

    free(x);

    return w;
}


static void
check_same(const float *ya, const float *yr, size_t ldy, uint32_t type,
    uint32_t rows, uint32_t cols, uint32_t n, const char *which)
{
    size_t  i;

    if (memcmp(ya, yr, N_TOK * ldy * sizeof(float)) == 0) {
        return;
    }

    for (i = 0; i < N_TOK * ldy; i++) {
        if (memcmp(&ya[i], &yr[i], sizeof(float)) != 0) {
            fail_msg("%s, %s, rows %u cols %u n %u: token %zu row %zu: "
                     "tiles %.9g, reference %.9g", which,
                     kvs_ggml_type_name(type), rows, cols, n, i / ldy,
                     i % ldy, ya[i], yr[i]);
        }
    }
}


/* One matrix on the tiles, against its portable kernel. */
typedef struct {
    kvs_cpu_mat_t   w;                /* packed */
    const uint8_t  *wb;               /* its rows as stored */
    const void     *x;                /* [N_TOK] tokens' kvs_cpu_q8_t or
                                         kvs_cpu_q8k_t blocks */
    size_t          xs;               /* bytes of a token's blocks */
    const void     *xa;               /* the same by 16 tokens */
    uint8_t        *scratch;          /* the kernel's, and a byte more */
    uint32_t        dps;              /* tile products per 16 tokens and
                                         group */
} tcase_t;


/* every group of c for n tokens into y: the emulated kernel, or the
 * library's on the real tiles */
static void
tiles_run(const tcase_t *c, float *y, size_t ldy, uint32_t n, int real)
{
    uint32_t  g;

    for (g = 0; g < (c->w.rows + 15) / 16; g++) {
        if (c->w.type == KVS_GGML_Q4_K && real) {
            kvs_cpu_qka_rows(y, ldy, &c->w, g, c->xa, c->x, n, c->scratch);
        } else if (c->w.type == KVS_GGML_Q4_K) {
            kvs_test_qka_rows(y, ldy, &c->w, g, c->xa, c->x, n,
                              c->scratch + 1);
        } else if (real) {
            kvs_cpu_qla_rows(y, ldy, &c->w, g, c->xa, c->x, n, c->scratch);
        } else {
            kvs_test_qla_rows(y, ldy, &c->w, g, c->xa, c->x, n,
                              c->scratch + 1);
        }

        if (!real) {
            assert_string_equal(kvs_amx_emu.fault, "");
            assert_int_equal(kvs_amx_emu.configured, 0);
        }
    }
}


/* c's bits against the portable kernel's (Q8_0: the VNNI kernel's, its
 * own), for every n of 1 .. N_TOK:
 * nothing written past the rows; per call that has a tile, one
 * configuration and one release, c->dps tile products per 16 tokens */
static void
check_ns(const tcase_t *c, int amx)
{
    float            *ya, *yr;
    size_t            ldy;
    uint32_t          n, r, groups;
    kvs_cpu_qdot_pt   dot;

    dot = c->w.type != KVS_GGML_Q8_0 ? kvs_cpu_qdot_at(c->w.qd, 0) : NULL;
    groups = (c->w.rows + 15) / 16;
    ldy = c->w.rows + PAD;
    ya = malloc(N_TOK * ldy * sizeof(float));
    yr = malloc(N_TOK * ldy * sizeof(float));
    assert_non_null(ya);
    assert_non_null(yr);

    for (n = 1; n <= N_TOK; n++) {
        memset(ya, 0xff, N_TOK * ldy * sizeof(float));
        memset(yr, 0xff, N_TOK * ldy * sizeof(float));
        memset(&kvs_amx_emu, 0, sizeof(kvs_amx_emu));

        tiles_run(c, ya, ldy, n, 0);

        for (r = 0; dot != NULL && r < c->w.rows; r++) {
            dot(yr + r, ldy, c->wb + (size_t) r * c->w.row_bytes, c->x,
                c->xs, n, c->w.cols);
        }

        for (r = 0; dot == NULL && r < groups; r++) {
            kvs_cpu_q8p_rows_avx512(yr, ldy, &c->w, r, c->x, n);
        }

        check_same(ya, yr, ldy, c->w.type, c->w.rows, c->w.cols, n,
                   "emulated");

        assert_int_equal(kvs_amx_emu.dps, (uint64_t) groups * c->dps
                                          * (n / 16));
        assert_int_equal(kvs_amx_emu.configs, n >= 16 ? groups : 0);
        assert_int_equal(kvs_amx_emu.releases, n >= 16 ? groups : 0);

        if (amx) {
            memset(ya, 0xff, N_TOK * ldy * sizeof(float));
            tiles_run(c, ya, ldy, n, 1);
            check_same(ya, yr, ldy, c->w.type, c->w.rows, c->w.cols, n,
                       "real tiles");
        }
    }

    free(ya);
    free(yr);
}


static void
check_type(uint32_t type, uint32_t rows, uint32_t cols, int amx,
    uint64_t *st)
{
    size_t          rb, asize;
    uint8_t        *wb, *pack;
    uint64_t        nbytes;
    uint32_t        n, nb;
    tcase_t         c;
    kvs_err_t       e;
    kvs_cpu_q8_t   *xq;
    kvs_cpu_q8a_t  *xa, *xb;

    nb = cols / 32;
    assert_int_equal(kvs_ggml_nbytes(type, cols, cols, &nbytes, &e), 0);
    rb = (size_t) nbytes;

    wb = make_w(type, rows, cols, rb, st);
    xq = kvs_test_q8_input(N_TOK, cols, st);

    /* the tiles' input, by the library and by the copy (the same bytes);
     * the bytes of tokens past the last 16 are never filled or read */
    asize = (size_t) (N_TOK / 16) * nb * sizeof(kvs_cpu_q8a_t);
    xa = malloc(asize);
    xb = malloc(asize);
    assert_non_null(xa);
    assert_non_null(xb);
    memset(xa, 0x5a, asize);
    memset(xb, 0x5a, asize);
    for (n = 0; n < N_TOK / 16 * 16; n++) {
        kvs_cpu_q8a_fill(xq + (size_t) n * nb, n, xa, cols);
        kvs_test_q8a_fill(xq + (size_t) n * nb, n, xb, cols);
    }
    assert_memory_equal(xa, xb, asize);
    assert_int_equal(xa[nb - 1].c[15], xq[(size_t) 15 * nb + nb - 1].c);
    assert_memory_equal(xa[2 * nb - 1].q[3], xq[(size_t) 20 * nb - 1].q, 32);

    memset(&c, 0, sizeof(c));
    c.w.data = wb;
    c.w.row_bytes = rb;
    c.w.type = type;
    c.w.rows = rows;
    c.w.cols = cols;
    c.w.qd = kvs_cpu_qdot_find(type);
    assert_non_null(c.w.qd);

    if (type == KVS_GGML_Q8_0) {
        pack = aligned_alloc(64, (kvs_cpu_q8p_size(&c.w) + 63)
                                 & ~(size_t) 63);
        assert_non_null(pack);
        kvs_cpu_q8p_fill(&c.w, pack);
    } else {
        pack = aligned_alloc(64, (kvs_cpu_qlp_size(&c.w) + 63)
                                 & ~(size_t) 63);
        assert_non_null(pack);
        kvs_cpu_qlp_fill(&c.w, pack);
    }
    c.w.pack = pack;

    /* any alignment: the emulated kernel's one byte past a line */
    assert_int_equal(kvs_test_qla_scratch(&c.w), kvs_cpu_qla_scratch(&c.w));
    c.scratch = malloc(kvs_cpu_qla_scratch(&c.w) + 1);
    assert_non_null(c.scratch);

    c.wb = wb;
    c.x = xq;
    c.xs = (size_t) nb * sizeof(kvs_cpu_q8_t);
    c.xa = xa;
    c.dps = nb;                       /* one a block */
    check_ns(&c, amx);

    free(c.scratch);
    free(xa);
    free(xb);
    free(pack);
    free(xq);
    free(wb);
}


/* n Q8_K inputs of cols columns: kvs_test_q8_input's pattern, and token
 * 5 at its largest: q 127, or 126 for the first ones[k] of sub-block k,
 * so that with row 1 a super-block's isum passes 2^24, its halves do not,
 * and summing its eight terms one by one in floats would round twice
 * (30690762 where (float) isum is 30690764) */
static kvs_cpu_q8k_t *
make_input_k(uint32_t n, uint32_t cols, uint64_t *st)
{
    float          *x;
    uint32_t        i, j;
    kvs_cpu_q8k_t  *xk;

    static const uint32_t  ones[8] = { 2, 1, 4, 1, 7, 7, 7, 6 };

    x = malloc(cols * sizeof(float));
    xk = malloc((size_t) n * (cols / 256) * sizeof(kvs_cpu_q8k_t));
    assert_non_null(x);
    assert_non_null(xk);

    for (i = 0; i < n; i++) {
        for (j = 0; j < cols; j++) {
            x[j] = i == 5 ? (j % 32 < ones[j / 32 % 8] ? 2.49f : 2.5f)
                   : i % 9 == 4 ? 0.0f
                   : (i % 9 == 7 ? 1e4f : 1.0f) * kvs_test_gauss(st);
        }

        if (i % 5 == 2) {
            memset(x, 0, 32 * sizeof(float));
        }

        kvs_cpu_q8k_quant(x, xk + (size_t) i * (cols / 256), cols);
    }

    free(x);

    return xk;
}


/* Q4_K on the tiles: the same checks as check_type, its weights with
 * raw scale bytes in some rows and one row of every level and scale at
 * its largest (15, 63): with token 5, the largest integer sums */
static void
check_q4_k(uint32_t rows, uint32_t cols, int amx, uint64_t *st)
{
    size_t           rb, asize;
    uint8_t         *wb, *pack, *blk;
    uint32_t         n, r, nsb, j;
    tcase_t          c;
    kvs_cpu_q8k_t   *xk;
    kvs_cpu_q8ka_t  *xa, *xb;

    nsb = cols / 256;
    rb = (size_t) nsb * 144;

    wb = make_w(KVS_GGML_Q4_K, rows, cols, rb, st);

    for (r = 0; r < rows; r++) {
        blk = wb + (size_t) r * rb + (size_t) (r % nsb) * 144;

        if (r == 1) {
            memset(blk + 4, 0xff, 140);
        } else if (r % 3 == 0) {
            for (j = 4; j < 16; j++) {
                blk[j] = (uint8_t) rnd(st);
            }
        }
    }

    xk = make_input_k(N_TOK, cols, st);
    assert_int_equal(xk[(size_t) 5 * nsb].q[65], 126);
    assert_int_equal(xk[(size_t) 5 * nsb].q[69], 127);

    asize = (size_t) (N_TOK / 16) * nsb * sizeof(kvs_cpu_q8ka_t);
    xa = malloc(asize);
    xb = malloc(asize);
    assert_non_null(xa);
    assert_non_null(xb);
    memset(xa, 0x5a, asize);
    memset(xb, 0x5a, asize);
    for (n = 0; n < N_TOK / 16 * 16; n++) {
        kvs_cpu_q8ka_fill(xk + (size_t) n * nsb, n, xa, cols);
        kvs_test_q8ka_fill(xk + (size_t) n * nsb, n, xb, cols);
    }
    assert_memory_equal(xa, xb, asize);
    assert_true(xa[nsb - 1].d[15] == xk[(size_t) 16 * nsb - 1].d);
    assert_memory_equal(xa[2 * nsb - 1].q[3][3],
                        xk[(size_t) 20 * nsb - 1].q + 192, 64);
    for (n = 0; n < N_TOK / 16 * 16; n++) {
        for (j = 0; j < 8; j++) {
            assert_int_equal((int32_t) kvs_bf16_to_f32(
                                 xa[n / 16 * nsb].bs[n % 16][j])
                             + (int32_t) kvs_bf16_to_f32(
                                 xa[n / 16 * nsb].bs[n % 16][8 + j]),
                             xk[(size_t) n * nsb].bsums[2 * j]
                             + xk[(size_t) n * nsb].bsums[2 * j + 1]);
        }
    }

    memset(&c, 0, sizeof(c));
    c.w.data = wb;
    c.w.row_bytes = rb;
    c.w.type = KVS_GGML_Q4_K;
    c.w.rows = rows;
    c.w.cols = cols;
    c.w.qd = kvs_cpu_qdot_find(KVS_GGML_Q4_K);
    assert_non_null(c.w.qd);

    pack = aligned_alloc(64, (kvs_cpu_qkp_size(&c.w) + 63) & ~(size_t) 63);
    assert_non_null(pack);
    kvs_cpu_qkp_fill(&c.w, pack);
    c.w.pack = pack;

    assert_int_equal(kvs_test_qka_scratch(&c.w), kvs_cpu_qka_scratch(&c.w));
    c.scratch = malloc(kvs_cpu_qka_scratch(&c.w) + 1);
    assert_non_null(c.scratch);

    /* per super-block, one int8 product a sub-block and one BF16 product
     * for the mins */
    c.wb = wb;
    c.x = xk;
    c.xs = (size_t) nsb * sizeof(kvs_cpu_q8k_t);
    c.xa = xa;
    c.dps = nsb * 9;
    check_ns(&c, amx);

    free(c.scratch);
    free(xa);
    free(xb);
    free(pack);
    free(xk);
    free(wb);
}


/* AVX-512 F/BW/VL and VNNI: the kernel's float steps and its tail */
static int
have_avx512(void)
{
    unsetenv("KVSERVE_CPU_SIMD");

    return kvs_cpu_simd() >= KVS_CPU_SIMD_AVX512;
}


static void
test_bits(void **state)
{
    int       amx;
    size_t    ti, ci, ri;
    uint64_t  st;

    static const uint32_t  colss[] = { 32, 96, 800, 4096 };
    static const uint32_t  colks[] = { 256, 768, 4096 };
    static const uint32_t  rowss[] = { 5, 16, 37 };

    if (!have_avx512()) {
        print_message("SKIP: no AVX-512 VNNI here: the tile kernel's "
                      "float steps cannot run\n");
        return;
    }

    amx = (kvs_cpu_amx_ready(NULL) & KVS_CPU_AMX_INT8) != 0;
    print_message("%s\n", amx ? "AMX here: the real tile kernel is checked "
                  "too" : "no AMX here: the emulated tile kernel alone");
    st = 0x9a1a;

    for (ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        for (ci = 0; ci < sizeof(colss) / sizeof(colss[0]); ci++) {
            for (ri = 0; ri < sizeof(rowss) / sizeof(rowss[0]); ri++) {
                check_type(types[ti], rowss[ri], colss[ci], amx, &st);
            }
        }
    }

    for (ci = 0; ci < sizeof(colks) / sizeof(colks[0]); ci++) {
        for (ri = 0; ri < sizeof(rowss) / sizeof(rowss[0]); ri++) {
            check_q4_k(rowss[ri], colks[ci], amx, &st);
        }
    }
}


static void
test_on(void **state)
{
    int  simd, amx;

    unsetenv("KVSERVE_CPU_SIMD");
    simd = kvs_cpu_simd();
    amx = simd >= KVS_CPU_SIMD_AVX512
          && (kvs_cpu_amx_ready(NULL) & KVS_CPU_AMX_INT8) != 0;

    assert_int_equal(kvs_cpu_qla_on(simd), amx);
    assert_int_equal(kvs_cpu_qla_on(KVS_CPU_SIMD_AVX2), 0);

    setenv("KVSERVE_CPU_SIMD", "2", 1);
    assert_int_equal(kvs_cpu_qla_on(KVS_CPU_SIMD_AVX512), 0);
    setenv("KVSERVE_CPU_SIMD", "0", 1);
    assert_int_equal(kvs_cpu_qla_on(KVS_CPU_SIMD_AVX512), 0);

    /* 3 asks for every tile kernel: no less than the default */
    setenv("KVSERVE_CPU_SIMD", "3", 1);
    assert_int_equal(kvs_cpu_qla_on(simd), amx);
    unsetenv("KVSERVE_CPU_SIMD");
}

#endif


int
main(void)
{
#if KVS_CPU_X86
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_bits),
        cmocka_unit_test(test_on),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
#else
    printf("test_cpu_qla: SKIP: not an x86 build\n");
    return 0;
#endif
}
