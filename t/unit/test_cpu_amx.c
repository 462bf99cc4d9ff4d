/*
 * test_cpu_amx: the AMX tile kernel (src/backend/cpu/kvs_cpu_amx_x86.c)
 * and AMX detection (kvs_cpu_amx.c), on any x86-64 host.
 *
 * The kernel's file is compiled a second time here, its _tile_*
 * operations replaced by kvs_test_amx_emu.h's C emulation (Intel's
 * semantics, with their configuration and shape checks); its AVX-512
 * float steps run as they are, so this part needs AVX-512 (skipped
 * without, saying so).  What it checks:
 *
 *  - the emulation: TDPBSUD and TDPBSSD against a plain sum on random
 *    tiles of several shapes, and each configuration or shape error
 *    faults (so a kernel breaking a rule is seen);
 *  - the Q8_0 kernel on the packed weights (kvs_cpu_q8p_fill) gives the
 *    portable kernel's (kvs_cpu_qdot_q8_0) bits, memcmp, for every n of
 *    1 .. 35 tokens (one tile of 16, 16 + 1, 32 + 3), matrices of 5, 16
 *    and 37 rows (partial, whole and 2 + partial groups), rows of 32 to
 *    4096 columns (odd block counts: K not a multiple of 64); weights
 *    from our quantizer, with raw bytes (-128 included), zero blocks and
 *    large scales; inputs Gaussian, zero and large; writes nothing past
 *    the matrix's rows or between tokens; no emulated fault; one tile
 *    product per 16 tokens, block and group, one release per call;
 *  - on a host with AMX (kvs_cpu_amx_ready), the library's kernel on
 *    the real tiles gives the same bits as well (run on the lent H200
 *    machine's Xeon, 2026-12-04: passed);
 *  - the data tells the float orders apart: one accumulator instead of
 *    the kernel's eight changes some output at 4096 columns;
 *  - detection: kvs_cpu_amx_check on made-up CPUID / XCR0 words (each
 *    missing condition named), this host's answer agrees with its
 *    CPUID, the tiles are used only under KVSERVE_CPU_SIMD=3 (the
 *    default and KVSERVE_CPU_SIMD=2 keep the level at AVX-512), and
 *    kvs_cpu_kernels says which.
 */

#include "kvs_test.h"

#include "backend/cpu/kvs_cpu.h"
#include "backend/cpu/kvs_cpu_impl.h"
#include "backend/cpu/kvs_cpu_qdot.h"
#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"

#if KVS_CPU_X86
#include <cpuid.h>
#include <immintrin.h>
#include "kvs_test_amx_emu.h"
#include "kvs_test_q8in.h"

/* the kernel again, on the emulated tiles, under its own name */
#define KVS_CPU_AMX_EMU      1
#define kvs_cpu_amx_q8_rows  kvs_test_amx_q8_rows
#include "backend/cpu/kvs_cpu_amx_x86.c"
#undef kvs_cpu_amx_q8_rows

/* the library's, on the real tiles (kvs_cpu_amx.h declared the copy) */
void kvs_cpu_amx_q8_rows(float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8_t *xq, uint32_t n);
#endif

#include "backend/cpu/kvs_cpu_amx.h"


#define N_TOK  35
#define PAD    3                    /* outputs past the rows, per token */


#if KVS_CPU_X86

static uint64_t
rnd(uint64_t *st)
{
    *st = *st * 6364136223846793005ULL + 1442695040888963407ULL;

    return *st >> 17;
}


/* AVX-512 F/BW/VL (and VNNI, FMA, F16C: kvs_cpu_simd's own test, as
 * clang's __builtin_cpu_supports knows no "f16c") */
static int
have_avx512(void)
{
    unsetenv("KVSERVE_CPU_SIMD");

    return kvs_cpu_simd() >= KVS_CPU_SIMD_AVX512;
}


static void
emu_cfg(uint8_t cfg[64], const uint8_t *rows, const uint16_t *colsb, int n)
{
    int  i;

    memset(cfg, 0, 64);
    cfg[0] = 1;

    for (i = 0; i < n; i++) {
        memcpy(cfg + 16 + 2 * i, &colsb[i], 2);
        cfg[48 + i] = rows[i];
    }
}


/* TDPBSUD / TDPBSSD on random tiles against the plain sum. */
static void
test_emu_dp(void **state)
{
    int8_t     a[16][64];
    uint8_t    b[16][64], cfg[64];
    int32_t    c[16][16], c0[16][16], want;
    uint16_t   colsb[3];
    uint8_t    rows[3];
    uint64_t   st;
    uint32_t   m, n, k, i, kk, nn, mm, sg;

    st = 11;

    for (sg = 0; sg < 2; sg++) {
        for (mm = 1; mm <= 16; mm += 5) {
            for (kk = 4; kk <= 64; kk += 12) {
                for (nn = 1; nn <= 16; nn += 3) {
                    for (m = 0; m < 16; m++) {
                        for (i = 0; i < 64; i++) {
                            a[m][i] = (int8_t) rnd(&st);
                            b[m][i] = (uint8_t) rnd(&st);
                        }
                        for (n = 0; n < 16; n++) {
                            c0[m][n] = (int32_t) rnd(&st);
                        }
                    }

                    rows[0] = (uint8_t) mm;
                    colsb[0] = (uint16_t) (4 * nn);
                    rows[1] = (uint8_t) mm;
                    colsb[1] = (uint16_t) kk;
                    rows[2] = (uint8_t) (kk / 4);
                    colsb[2] = (uint16_t) (4 * nn);
                    emu_cfg(cfg, rows, colsb, 3);

                    memset(&kvs_amx_emu, 0, sizeof(kvs_amx_emu));
                    _tile_loadconfig(cfg);
                    _tile_loadd(0, c0, 64);
                    _tile_loadd(1, a, 64);
                    _tile_loadd(2, b, 64);
                    if (sg) {
                        _tile_dpbssd(0, 1, 2);
                    } else {
                        _tile_dpbsud(0, 1, 2);
                    }
                    memset(c, 0x5a, sizeof(c));
                    _tile_stored(0, c, 64);
                    _tile_release();
                    assert_string_equal(kvs_amx_emu.fault, "");
                    assert_int_equal(kvs_amx_emu.dps, 1);

                    for (m = 0; m < 16; m++) {
                        for (n = 0; n < 16; n++) {
                            if (m >= mm || n >= nn) {
                                /* not stored: the fill stays */
                                assert_int_equal(c[m][n], 0x5a5a5a5a);
                                continue;
                            }

                            want = c0[m][n];
                            for (k = 0; k < kk; k++) {
                                want = (int32_t) ((uint32_t) want
                                    + (uint32_t) (a[m][k]
                                       * (sg ? (int8_t) b[k / 4][4 * n
                                                                 + k % 4]
                                             : b[k / 4][4 * n + k % 4])));
                            }
                            assert_int_equal(c[m][n], want);
                        }
                    }
                }
            }
        }
    }
}


/* Every rule the emulation enforces faults when broken. */
static void
test_emu_faults(void **state)
{
    uint8_t    cfg[64], buf[16 * 64];
    uint8_t    rows[3] = { 16, 16, 8 };
    uint16_t   colsb[3] = { 64, 32, 64 };
    size_t     i;

    static const struct {
        int         at;             /* byte of the config changed */
        uint8_t     v;
        const char *fault;
    } bad[] = {
        { 0, 2, "ldtilecfg: palette not 0 or 1" },
        { 1, 1, "ldtilecfg: start_row or reserved byte set" },
        { 9, 1, "ldtilecfg: start_row or reserved byte set" },
        { 48, 17, "ldtilecfg: tile shape out of palette 1" },
        { 16, 65, "ldtilecfg: tile shape out of palette 1" },
        { 51, 1, "ldtilecfg: tile shape out of palette 1" },
        { 60, 1, "ldtilecfg: tile 8..15 configured" },
    };

    memset(buf, 0, sizeof(buf));

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&kvs_amx_emu, 0, sizeof(kvs_amx_emu));
        emu_cfg(cfg, rows, colsb, 3);
        cfg[bad[i].at] = bad[i].v;
        _tile_loadconfig(cfg);
        assert_string_equal(kvs_amx_emu.fault, bad[i].fault);
        assert_int_equal(kvs_amx_emu.configured, 0);
    }

    /* unconfigured: every tile operation faults */
    memset(&kvs_amx_emu, 0, sizeof(kvs_amx_emu));
    _tile_loadd(1, buf, 64);
    assert_string_equal(kvs_amx_emu.fault,
                        "tileloadd: tiles not configured");
    assert_int_equal(kvs_amx_emu.loads, 0);

    /* after a release too */
    memset(&kvs_amx_emu, 0, sizeof(kvs_amx_emu));
    emu_cfg(cfg, rows, colsb, 3);
    _tile_loadconfig(cfg);
    _tile_release();
    _tile_dpbsud(0, 1, 2);
    assert_string_equal(kvs_amx_emu.fault,
                        "tdpb*d: tiles not configured");

    /* shapes: K of A against B's rows, M of C against A's, N of C
     * against B's, a tile twice */
    for (i = 0; i < 4; i++) {
        uint8_t   r[3] = { 16, 16, 8 };
        uint16_t  cb[3] = { 64, 32, 64 };

        switch (i) {
        case 0:
            r[2] = 16;
            break;
        case 1:
            r[1] = 8;
            break;
        case 2:
            cb[2] = 32;
            break;
        default:
            break;
        }

        memset(&kvs_amx_emu, 0, sizeof(kvs_amx_emu));
        emu_cfg(cfg, r, cb, 3);
        _tile_loadconfig(cfg);
        assert_string_equal(kvs_amx_emu.fault, "");

        if (i == 3) {
            _tile_dpbsud(0, 1, 1);
            assert_string_equal(kvs_amx_emu.fault,
                                "tdpb*d: a tile named twice");
        } else {
            _tile_dpbsud(0, 1, 2);
            assert_string_equal(kvs_amx_emu.fault,
                                "tdpb*d: tile shapes do not fit");
        }

        assert_int_equal(kvs_amx_emu.dps, 0);
    }

    memset(&kvs_amx_emu, 0, sizeof(kvs_amx_emu));
}


/* A Q8_0 matrix of rows x cols: our quantizer's rows of N(0, s) with s
 * varying by row, a block of zeros, a block of raw bytes (-128 among
 * them), a large-scale row. */
static uint8_t *
make_q8(uint32_t rows, uint32_t cols, uint64_t *st)
{
    float      *x, s;
    uint8_t    *w, *blk;
    uint32_t    r, j, nb;
    kvs_err_t   e;

    nb = cols / 32;
    x = malloc(cols * sizeof(float));
    w = malloc((size_t) rows * nb * 34);
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

        assert_int_equal(kvs_quant_quantize(KVS_GGML_Q8_0, x,
                                            w + (size_t) r * nb * 34, cols,
                                            &e), KVS_OK);

        if (r % 4 == 3) {
            blk = w + (size_t) r * nb * 34 + (size_t) (nb / 2) * 34;

            for (j = 0; j < 32; j++) {
                blk[2 + j] = (uint8_t) rnd(st);
            }
            blk[2] = 0x80;
        }
    }

    free(x);

    return w;
}


static void
check_q8(uint32_t rows, uint32_t cols, int amx, uint64_t *st)
{
    float          *ya, *yr;
    size_t          ldy, psize;
    uint8_t        *wb, *pack;
    uint32_t        n, g, groups, r, i, nb;
    uint64_t        dps, cfgs;
    kvs_cpu_mat_t   w;
    kvs_cpu_q8_t   *xq;

    nb = cols / 32;
    wb = make_q8(rows, cols, st);
    xq = kvs_test_q8_input(N_TOK, cols, st);

    memset(&w, 0, sizeof(w));
    w.data = wb;
    w.row_bytes = (size_t) nb * 34;
    w.type = KVS_GGML_Q8_0;
    w.rows = rows;
    w.cols = cols;

    psize = kvs_cpu_q8p_size(&w);
    pack = aligned_alloc(64, psize);
    assert_non_null(pack);
    kvs_cpu_q8p_fill(&w, pack);
    w.pack = pack;

    groups = (rows + 15) / 16;
    ldy = rows + PAD;
    ya = malloc(N_TOK * ldy * sizeof(float));
    yr = malloc(N_TOK * ldy * sizeof(float));
    assert_non_null(ya);
    assert_non_null(yr);

    for (n = 1; n <= N_TOK; n++) {
        memset(ya, 0xff, N_TOK * ldy * sizeof(float));
        memset(yr, 0xff, N_TOK * ldy * sizeof(float));
        memset(&kvs_amx_emu, 0, sizeof(kvs_amx_emu));

        for (g = 0; g < groups; g++) {
            kvs_test_amx_q8_rows(ya, ldy, &w, g, xq, n);
            assert_string_equal(kvs_amx_emu.fault, "");
            assert_int_equal(kvs_amx_emu.configured, 0);
        }

        for (r = 0; r < rows; r++) {
            kvs_cpu_qdot_q8_0(yr + r, ldy, wb + (size_t) r * w.row_bytes,
                              xq, (size_t) nb * sizeof(kvs_cpu_q8_t), n,
                              cols);
        }

        if (memcmp(ya, yr, N_TOK * ldy * sizeof(float)) != 0) {
            for (i = 0; i < n * ldy; i++) {
                if (memcmp(&ya[i], &yr[i], sizeof(float)) != 0) {
                    fail_msg("rows %u cols %u n %u: token %zu row %zu: "
                             "amx %.9g, portable %.9g", rows, cols, n,
                             i / ldy, i % ldy, ya[i], yr[i]);
                }
            }
        }

        /* one tile product per 16 tokens, block and group; one or two
         * configurations per call (16 rows, then the rest) */
        dps = (uint64_t) groups * nb * ((n + 15) / 16);
        cfgs = (uint64_t) groups * (n > 16 && n % 16 ? 2 : 1);
        assert_int_equal(kvs_amx_emu.dps, dps);
        assert_int_equal(kvs_amx_emu.configs, cfgs);
        assert_int_equal(kvs_amx_emu.releases, groups);

        /* on an AMX host, the library's kernel on the real tiles too */
        if (amx) {
            memset(ya, 0xff, N_TOK * ldy * sizeof(float));

            for (g = 0; g < groups; g++) {
                kvs_cpu_amx_q8_rows(ya, ldy, &w, g, xq, n);
            }

            if (memcmp(ya, yr, N_TOK * ldy * sizeof(float)) != 0) {
                fail_msg("rows %u cols %u n %u: the AMX kernel differs "
                         "from the portable one", rows, cols, n);
            }
        }
    }

    free(ya);
    free(yr);
    free(pack);
    free(xq);
    free(wb);
}


static void
test_q8(void **state)
{
    int       amx;
    size_t    ci, ri;
    uint64_t  st;

    static const uint32_t  colss[] = { 32, 96, 288, 1024, 4096 };
    static const uint32_t  rowss[] = { 5, 16, 37 };

    if (!have_avx512()) {
        print_message("SKIP: no AVX-512 VNNI here: the emulated tile "
                      "kernel's float steps cannot run\n");
        return;
    }

    unsetenv("KVSERVE_CPU_SIMD");
    amx = (kvs_cpu_amx_ready(NULL) & KVS_CPU_AMX_INT8) != 0;
    print_message("%s\n", amx ? "AMX here: the real tile kernel is checked "
                  "too" : "no AMX here: the emulated tile kernel alone");
    st = 0x51ab;

    for (ci = 0; ci < sizeof(colss) / sizeof(colss[0]); ci++) {
        for (ri = 0; ri < sizeof(rowss) / sizeof(rowss[0]); ri++) {
            check_q8(rowss[ri], colss[ci], amx, &st);
        }
    }
}


/* The portable order's eight accumulators against one: the data of
 * test_q8 must tell them apart, or its memcmp would prove little. */
static void
test_order_matters(void **state)
{
    float          one, y;
    uint8_t       *wb;
    uint32_t       r, i, b, j, nb, cols, differ;
    int32_t        isum;
    kvs_cpu_q8_t  *xq;
    const uint8_t *p;
    uint64_t       st;

    cols = 4096;
    nb = cols / 32;
    st = 0x51ab;
    wb = make_q8(16, cols, &st);
    xq = kvs_test_q8_input(8, cols, &st);
    differ = 0;

    for (r = 0; r < 16; r++) {
        for (i = 0; i < 8; i++) {
            kvs_cpu_qdot_q8_0(&y, 1, wb + (size_t) r * nb * 34,
                              xq + (size_t) i * nb, 0, 1, cols);
            one = 0.0f;

            for (b = 0; b < nb; b++) {
                p = wb + (size_t) r * nb * 34 + (size_t) b * 34;
                isum = 0;

                for (j = 0; j < 32; j++) {
                    isum += (int8_t) p[2 + j] * xq[i * nb + b].q[j];
                }

                one = one + (kvs_f16_load(p) * xq[i * nb + b].d)
                            * (float) isum;
            }

            differ += memcmp(&one, &y, sizeof(float)) != 0;
        }
    }

    print_message("one accumulator differs from eight in %u of 128 "
                  "outputs\n", differ);
    assert_true(differ > 0);

    free(xq);
    free(wb);
}


static void
test_detect(void **state)
{
    char              why[128], buf[256];
    unsigned          a, b, c, d, bits;
    const char       *line;
    kvs_cpu_amx_id_t  id;

    /* a Sapphire Rapids-like CPU under Linux 5.16+ */
    id.max_leaf = 0x20;
    id.l1_ecx = 1u << 27;
    id.l7_edx = (1u << 22) | (1u << 24) | (1u << 25);
    id.xcr0 = 0x602e7;
    assert_int_equal(kvs_cpu_amx_check(&id, why, sizeof(why)),
                     KVS_CPU_AMX_INT8 | KVS_CPU_AMX_BF16);
    assert_string_equal(why, "");

    id.l7_edx &= ~(1u << 22);
    assert_int_equal(kvs_cpu_amx_check(&id, why, sizeof(why)),
                     KVS_CPU_AMX_INT8);

    id.xcr0 &= ~(1ull << 18);
    assert_int_equal(kvs_cpu_amx_check(&id, why, sizeof(why)), 0);
    assert_non_null(strstr(why, "XCR0"));
    id.xcr0 |= 1ull << 18;

    id.l1_ecx = 0;
    assert_int_equal(kvs_cpu_amx_check(&id, why, sizeof(why)), 0);
    assert_string_equal(why, "CPUID: no OSXSAVE, XCR0 unreadable");
    id.l1_ecx = 1u << 27;

    id.l7_edx = 1u << 24;
    assert_int_equal(kvs_cpu_amx_check(&id, why, sizeof(why)), 0);
    assert_string_equal(why, "CPUID: AMX-TILE without AMX-INT8");

    id.l7_edx = (1u << 25) | (1u << 22);
    assert_int_equal(kvs_cpu_amx_check(&id, why, sizeof(why)), 0);
    assert_string_equal(why, "CPUID: no AMX-TILE");

    id.max_leaf = 6;
    assert_int_equal(kvs_cpu_amx_check(&id, why, sizeof(why)), 0);
    assert_string_equal(why, "CPUID has no leaf 7");

    /* this host: no AMX-TILE in CPUID, no AMX (and the line says why) */
    unsetenv("KVSERVE_CPU_SIMD");
    bits = kvs_cpu_amx_ready(&line);
    print_message("%s\n", line);
    print_message("cpu kernels: %s\n", kvs_cpu_kernels(buf, sizeof(buf)));

    d = 0;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
    }

    if ((d & (1u << 24)) == 0 || (d & (1u << 25)) == 0) {
        assert_int_equal(bits, 0);
        assert_true(strncmp(line, "amx: no (", 9) == 0);
        assert_true(kvs_cpu_simd() <= KVS_CPU_SIMD_AVX512);
    }

    /* tiles present: the level stays AVX-512 unless asked for
     * (KVSERVE_CPU_SIMD=3), and the line says which take the tiles */
    if (bits != 0) {
        assert_int_equal(kvs_cpu_simd(), KVS_CPU_SIMD_AVX512);
        assert_non_null(strstr(buf, "amx: int8 tiles for Q8_0/Q4_0/Q4_1/"
                               "Q5_0/Q5_1/IQ4_NL/Q4_K prefill: on"));
        setenv("KVSERVE_CPU_SIMD", "3", 1);
        assert_int_equal(kvs_cpu_simd(), KVS_CPU_SIMD_AMX);
        assert_non_null(strstr(kvs_cpu_kernels(buf, sizeof(buf)),
                               "+ amx; amx: int8 tiles"));
        unsetenv("KVSERVE_CPU_SIMD");
    }

    /* asked for where there are none: never above AVX-512 */
    setenv("KVSERVE_CPU_SIMD", "3", 1);
    if (bits == 0) {
        assert_true(kvs_cpu_simd() <= KVS_CPU_SIMD_AVX512);
        assert_non_null(strstr(kvs_cpu_kernels(buf, sizeof(buf)),
                               "amx: no ("));
    }

    /* forced off: never above AVX-512, and said */
    setenv("KVSERVE_CPU_SIMD", "2", 1);
    assert_true(kvs_cpu_simd() <= KVS_CPU_SIMD_AVX512);
    assert_non_null(strstr(kvs_cpu_kernels(buf, sizeof(buf)),
                           "amx: off (KVSERVE_CPU_SIMD=2)"));
    if (have_avx512()) {
        setenv("KVSERVE_CPU_SIMD", "2", 1);
        assert_int_equal(kvs_cpu_simd(), KVS_CPU_SIMD_AVX512);
        assert_true(strncmp(buf, "avx512 (vnni); ", 15) == 0);
    }
    unsetenv("KVSERVE_CPU_SIMD");
}

#endif /* KVS_CPU_X86 */


int
main(void)
{
#if KVS_CPU_X86
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_emu_dp),
        cmocka_unit_test(test_emu_faults),
        cmocka_unit_test(test_q8),
        cmocka_unit_test(test_order_matters),
        cmocka_unit_test(test_detect),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
#else
    print_message("SKIP: AMX is x86-64 only\n");
    return 0;
#endif
}
