/*
 * bench_amx: the Q8_0 product on AMX tiles against the AVX-512 VNNI
 * kernel, one thread, on one matrix of Llama-3-8B's width (4096 x 4096
 * by default), for a few token counts; issue 19 point 6.
 *
 * Why a bench of its own: on the first AMX host measured (the lent
 * H200 machine's Xeon, 2026-12-04) 100m Q8_0 prefill ran at 0.87x the
 * VNNI kernel's speed at one thread and 0.63x at two, so the whole
 * model cannot say where the tile kernel loses.  Four ways over the same
 * packed weights and inputs:
 *   vnni   kvs_cpu_q8p_rows_avx512 (the default kernel)
 *   amx    kvs_cpu_amx_q8_rows (the library's tile kernel)
 *   pair   the same arithmetic with two tile sets, blocks b and b + 1 in
 *          flight together, so one block's TILESTORED and float steps
 *          overlap the next one's tile product (a candidate, here only)
 *   tiles  the tile products and stores alone, no float steps: not a
 *          product, the floor of the tile part (METHOD: leave a stage
 *          out and time the rest)
 * Each is timed best of 3 over at least 0.2 s; "amx", "pair" must give
 * the portable kernel's bits (kvs_cpu_ql.c's, as kvs_cpu_amx_q8_rows
 * states; the VNNI kernel's are its own, fused): memcmp, a mismatch is
 * printed and the exit status is 1.  Without AMX (CPUID, XCR0 or Linux's permission) only
 * vnni runs and the AMX rows say why.
 *
 * Usage: bench_amx [--rows R] [--cols K] [--tokens "1 16 128 512"]
 * Prints a markdown table.
 */

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/kvs_cpu.h"
#include "backend/cpu/kvs_cpu_amx.h"
#include "backend/cpu/kvs_cpu_impl.h"
#include "backend/cpu/kvs_cpu_qdot.h"
#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"
#include "bench_rand.h"

#if KVS_CPU_X86
#include <immintrin.h>

#define BA_VEC     "avx512f,avx512bw,avx512vl,avx2,fma,f16c"
#define BA_TARGET  "amx-tile,amx-int8," BA_VEC

typedef void (*ba_fn_t)(float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8_t *xq, uint32_t n);


/* Tiles 0..5: C0 A0 B0 for even blocks, C1 A1 B1 for odd ones. */
__attribute__((target(BA_TARGET))) static void
ba_config(kvs_cpu_tilecfg_t *cfg, uint32_t mt, int pair)
{
    int  t, sets;

    memset(cfg, 0, sizeof(*cfg));
    cfg->palette = 1;
    sets = pair ? 2 : 1;

    for (t = 0; t < 3 * sets; t += 3) {
        cfg->rows[t] = (uint8_t) mt;
        cfg->colsb[t] = 16 * sizeof(int32_t);
        cfg->rows[t + 1] = (uint8_t) mt;
        cfg->colsb[t + 1] = KVS_Q8_0_BLOCK;
        cfg->rows[t + 2] = KVS_Q8_0_BLOCK / 4;
        cfg->colsb[t + 2] = KVS_CPU_Q8P_ROWS * 4;
    }

    __asm__ volatile ("" : : "m" (*cfg) : "memory");
    _tile_loadconfig(cfg);
}


/* The float steps of one block for mt tokens: the library kernel's. */
__attribute__((target(BA_TARGET))) static inline void
ba_post(float acc[16][8][16], int32_t isum[16][16], const uint16_t *wd,
    const kvs_cpu_q8_t *xq, size_t nb, uint32_t i0, uint32_t mt, size_t b)
{
    uint32_t             m;
    __m512               dw, t;
    __m512i              s;
    const kvs_cpu_q8_t  *xb;

    dw = _mm512_cvtph_ps(_mm256_loadu_si256(
             (const __m256i *) (wd + b * KVS_CPU_Q8P_ROWS)));

    for (m = 0; m < mt; m++) {
        xb = &xq[(size_t) (i0 + m) * nb + b];
        s = _mm512_add_epi32(_mm512_load_si512(isum[m]),
                             _mm512_set1_epi32(xb->c));
        t = _mm512_mul_ps(dw, _mm512_set1_ps(xb->d));
        t = _mm512_mul_ps(t, _mm512_cvtepi32_ps(s));
        _mm512_store_ps(acc[m][b & 7],
                        _mm512_add_ps(_mm512_load_ps(acc[m][b & 7]), t));
    }
}


__attribute__((target(BA_TARGET))) static void
ba_finish(float acc[16][8][16], float *y, size_t ldy, __mmask16 mask,
    uint32_t i0, uint32_t mt)
{
    uint32_t  m, b;
    __m512    a[8], t;

    for (m = 0; m < mt; m++) {
        for (b = 0; b < 8; b++) {
            a[b] = _mm512_load_ps(acc[m][b]);
        }

        t = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[4]),
                                        _mm512_add_ps(a[2], a[6])),
                          _mm512_add_ps(_mm512_add_ps(a[1], a[5]),
                                        _mm512_add_ps(a[3], a[7])));
        _mm512_mask_storeu_ps(y + (size_t) (i0 + m) * ldy, mask, t);
    }
}


/* The library kernel's arithmetic, blocks in pairs on two tile sets;
 * post == 0 leaves the float steps out (the "tiles" row). */
__attribute__((target(BA_TARGET))) static void
ba_pair_rows(float *y, size_t ldy, const kvs_cpu_mat_t *w, uint32_t g,
    const kvs_cpu_q8_t *xq, uint32_t n, int post)
{
    size_t              nb, b, xs;
    uint32_t            i0, mt, cur, m, k;
    __mmask16           mask;
    const uint8_t      *wq;
    const uint16_t     *wd;
    kvs_cpu_tilecfg_t   cfg;
    int32_t             is0[16][16] __attribute__((aligned(64)));
    int32_t             is1[16][16] __attribute__((aligned(64)));
    float               acc[16][8][16] __attribute__((aligned(64)));

    nb = w->cols / KVS_Q8_0_BLOCK;
    wq = kvs_cpu_q8p_group(w, g, &wd);
    mask = kvs_cpu_pack_mask(w, g);
    y += (size_t) g * KVS_CPU_Q8P_ROWS;
    xs = nb * sizeof(kvs_cpu_q8_t);
    cur = 0;

    for (i0 = 0; i0 < n; i0 += mt) {
        mt = n - i0 < 16 ? n - i0 : 16;

        if (mt != cur) {
            ba_config(&cfg, mt, 1);
            cur = mt;
        }

        for (m = 0; m < mt; m++) {
            for (k = 0; k < 8; k++) {
                _mm512_store_ps(acc[m][k], _mm512_setzero_ps());
            }
        }

        for (b = 0; b + 1 < nb; b += 2) {
            _tile_zero(0);
            _tile_zero(3);
            _tile_loadd(1, xq[(size_t) i0 * nb + b].q, xs);
            _tile_loadd(2, wq + b * KVS_CPU_Q8P_BYTES,
                        KVS_CPU_Q8P_ROWS * 4);
            _tile_loadd(4, xq[(size_t) i0 * nb + b + 1].q, xs);
            _tile_loadd(5, wq + (b + 1) * KVS_CPU_Q8P_BYTES,
                        KVS_CPU_Q8P_ROWS * 4);
            _tile_dpbsud(0, 1, 2);
            _tile_dpbsud(3, 4, 5);
            _tile_stored(0, is0, 16 * sizeof(int32_t));
            _tile_stored(3, is1, 16 * sizeof(int32_t));

            if (post) {
                ba_post(acc, is0, wd, xq, nb, i0, mt, b);
                ba_post(acc, is1, wd, xq, nb, i0, mt, b + 1);
            }
        }

        if (b < nb) {
            _tile_zero(0);
            _tile_loadd(1, xq[(size_t) i0 * nb + b].q, xs);
            _tile_loadd(2, wq + b * KVS_CPU_Q8P_BYTES,
                        KVS_CPU_Q8P_ROWS * 4);
            _tile_dpbsud(0, 1, 2);
            _tile_stored(0, is0, 16 * sizeof(int32_t));

            if (post) {
                ba_post(acc, is0, wd, xq, nb, i0, mt, b);
            }
        }

        if (post) {
            ba_finish(acc, y, ldy, mask, i0, mt);
        } else {
            /* keep the stores observable */
            y[(size_t) i0 * ldy] = (float) is0[0][0] + (float) is1[0][0];
        }
    }

    _tile_release();
}


static void
ba_pair(float *y, size_t ldy, const kvs_cpu_mat_t *w, uint32_t g,
    const kvs_cpu_q8_t *xq, uint32_t n)
{
    ba_pair_rows(y, ldy, w, g, xq, n, 1);
}


static void
ba_tiles(float *y, size_t ldy, const kvs_cpu_mat_t *w, uint32_t g,
    const kvs_cpu_q8_t *xq, uint32_t n)
{
    ba_pair_rows(y, ldy, w, g, xq, n, 0);
}


/* Seconds of one product of every group, best of 3 runs of >= 0.2 s. */
static double
ba_time(ba_fn_t fn, float *y, size_t ldy, const kvs_cpu_mat_t *w,
    const kvs_cpu_q8_t *xq, uint32_t n)
{
    double    t0, t, best;
    uint32_t  g, groups, reps, it, r;

    groups = (w->rows + KVS_CPU_Q8P_ROWS - 1) / KVS_CPU_Q8P_ROWS;
    best = 1e30;

    for (g = 0; g < groups; g++) {              /* warm-up */
        fn(y, ldy, w, g, xq, n);
    }

    for (r = 0; r < 3; r++) {
        reps = 0;
        t0 = bench_now();

        do {
            for (it = 0; it < 4; it++, reps++) {
                for (g = 0; g < groups; g++) {
                    fn(y, ldy, w, g, xq, n);
                }
            }

            t = bench_now() - t0;
        } while (t < 0.2);

        if (t / reps < best) {
            best = t / reps;
        }
    }

    return best;
}


int
main(int argc, char **argv)
{
    int            i, rc, amx;
    char          *tok_list, *p, *end;
    float         *x, *yv, *ya, *yp;
    double         tv, t;
    size_t         ldy, nb, psize, ysize;
    uint8_t       *wb, *pack;
    uint32_t       rows, cols, n, j, r, maxn, g, groups;
    uint64_t       st;
    kvs_err_t      e;
    const char    *line, *bits;
    kvs_cpu_mat_t  w;
    kvs_cpu_q8_t  *xq;

    static const struct {
        const char  *name;
        ba_fn_t      fn;
        int          exact;
    } ways[] = {
        { "amx", kvs_cpu_amx_q8_rows, 1 },
        { "pair", ba_pair, 1 },
        { "tiles", ba_tiles, 0 },
    };

    rows = 4096;
    cols = 4096;
    tok_list = strdup("1 16 128 512");

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--rows") == 0) {
            rows = (uint32_t) strtoul(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--cols") == 0) {
            cols = (uint32_t) strtoul(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--tokens") == 0) {
            free(tok_list);
            tok_list = strdup(argv[i + 1]);
        } else {
            fprintf(stderr, "bench_amx: unknown option %s\n", argv[i]);
            return 2;
        }
    }

    if (rows == 0 || cols == 0 || cols % 32 != 0 || tok_list == NULL) {
        fprintf(stderr, "bench_amx: --rows > 0, --cols a multiple of 32\n");
        return 2;
    }

    if (kvs_cpu_simd() < KVS_CPU_SIMD_AVX512) {
        printf("bench_amx: SKIP: no AVX-512 VNNI here (%s)\n",
               kvs_cpu_kernels((char[160]) { 0 }, 160));
        return 0;
    }

    amx = (kvs_cpu_amx_ready(&line) & KVS_CPU_AMX_INT8) != 0;

    maxn = 0;
    for (p = tok_list; *p; p = end) {
        n = (uint32_t) strtoul(p, &end, 10);
        if (end == p) {
            break;
        }
        maxn = n > maxn ? n : maxn;
    }

    /* weights: Gaussian rows, quantized by the library, then packed */
    nb = cols / 32;
    st = 0x5eed;
    wb = malloc((size_t) rows * nb * 34);
    x = malloc((size_t) cols * sizeof(float));
    xq = malloc((size_t) maxn * nb * sizeof(kvs_cpu_q8_t));
    if (wb == NULL || x == NULL || xq == NULL || maxn == 0) {
        fprintf(stderr, "bench_amx: out of memory or no token counts\n");
        return 1;
    }

    for (r = 0; r < rows; r++) {
        for (j = 0; j < cols; j++) {
            x[j] = bench_gauss(&st);
        }
        if (kvs_quant_quantize(KVS_GGML_Q8_0, x, wb + (size_t) r * nb * 34,
                               cols, &e) != KVS_OK)
        {
            fprintf(stderr, "bench_amx: %s\n", e.msg);
            return 1;
        }
    }

    for (n = 0; n < maxn; n++) {
        for (j = 0; j < cols; j++) {
            x[j] = bench_gauss(&st);
        }
        kvs_cpu_q8_quant(x, xq + (size_t) n * nb, cols);
    }

    memset(&w, 0, sizeof(w));
    w.data = wb;
    w.row_bytes = nb * 34;
    w.type = KVS_GGML_Q8_0;
    w.rows = rows;
    w.cols = cols;
    psize = kvs_cpu_q8p_size(&w);
    pack = aligned_alloc(64, (psize + 63) & ~(size_t) 63);
    ldy = rows;
    ysize = (size_t) maxn * ldy * sizeof(float);
    yv = malloc(ysize);
    ya = malloc(ysize);
    yp = malloc(ysize);
    if (pack == NULL || yv == NULL || ya == NULL || yp == NULL) {
        fprintf(stderr, "bench_amx: out of memory\n");
        return 1;
    }
    kvs_cpu_q8p_fill(&w, pack);
    w.pack = pack;
    groups = (rows + KVS_CPU_Q8P_ROWS - 1) / KVS_CPU_Q8P_ROWS;

    printf("bench_amx: Q8_0 %u x %u, one thread; %s\n", rows, cols, line);
    printf("\n| tokens | way | us per product | GOP/s | vs vnni | bits |\n");
    printf("| ---: | --- | ---: | ---: | ---: | --- |\n");

    rc = 0;

    for (p = tok_list; *p; p = end) {
        n = (uint32_t) strtoul(p, &end, 10);
        if (end == p) {
            break;
        }
        if (n == 0) {
            continue;
        }

        tv = ba_time(kvs_cpu_q8p_rows_avx512, yv, ldy, &w, xq, n);
        memset(yv, 0xff, ysize);
        for (g = 0; g < groups; g++) {
            kvs_cpu_q8p_rows_avx512(yv, ldy, &w, g, xq, n);
        }
        printf("| %u | vnni | %.1f | %.1f | 1.00 | - |\n", n, tv * 1e6,
               2.0 * rows * cols * n / tv * 1e-9);

        /* the bits the tile kernels must give: the portable kernel's */
        memset(yp, 0xff, ysize);
        for (r = 0; r < rows; r++) {
            kvs_cpu_qdot_q8_0(yp + r, ldy, wb + (size_t) r * nb * 34, xq,
                              nb * sizeof(kvs_cpu_q8_t), n, cols);
        }

        for (i = 0; i < (int) (sizeof(ways) / sizeof(ways[0])); i++) {
            if (!amx) {
                printf("| %u | %s | - | - | - | SKIP: %s |\n", n,
                       ways[i].name, line);
                continue;
            }

            t = ba_time(ways[i].fn, ya, ldy, &w, xq, n);
            memset(ya, 0xff, ysize);
            for (g = 0; g < groups; g++) {
                ways[i].fn(ya, ldy, &w, g, xq, n);
            }

            bits = "-";
            if (ways[i].exact) {
                bits = memcmp(ya, yp, (size_t) n * ldy * sizeof(float))
                       == 0 ? "= portable" : "DIFFER";
                if (bits[0] == 'D') {
                    rc = 1;
                }
            }

            printf("| %u | %s | %.1f | %.1f | %.2f | %s |\n", n,
                   ways[i].name, t * 1e6, 2.0 * rows * cols * n / t * 1e-9,
                   tv / t, bits);
        }
    }

    free(tok_list);
    free(x);
    free(xq);
    free(wb);
    free(pack);
    free(yv);
    free(ya);
    free(yp);

    return rc;
}

#else

int
main(void)
{
    printf("bench_amx: SKIP: not x86-64\n");
    return 0;
}

#endif
