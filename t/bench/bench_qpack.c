/*
 * bench_qpack: the AVX-512 VNNI kernels of the packed quantized types
 * (kvs_cpu_q8p_rows_avx512 for Q8_0, kvs_cpu_qlp_rows_avx512 for the
 * other 32-column types, kvs_cpu_qkp_rows_avx512 for the 256-column
 * ones), one thread, on one matrix of the 100m preset's shapes by
 * default (the feed-forward's 2048 x 768), at prefill token counts.
 *
 * Why: a prefill's time is mostly these products, and their speed per
 * type says which kernel is short of the machine's int8 rate (one
 * vpdpbusd, 64 multiply-adds, per cycle at best).  Q8_0's kernel is the
 * yardstick: its blocks need no unpacking.  Each type's results are also
 * compared with its portable kernel's (kvs_cpu_qdot_at(e, 0): memcmp), so
 * the bench checks the invariant it times (not Q8_0's: its packed kernel
 * fuses the float steps, and its bits are its own, decode's included).
 *
 * Where the host has AMX int8 tiles (kvs_cpu_amx_ready), Q8_0, the
 * 32-column 4- and 5-bit types and Q4_K get a second row, "tiles":
 * kvs_cpu_qla_rows and kvs_cpu_qka_rows, the kernels their prefill takes
 * there (the input by 16 tokens filled once, outside the timing, as a
 * prefill fills it once per product), checked against the portable
 * kernel the same way (Q8_0's against its VNNI kernel).
 *
 * Usage: bench_qpack [--types "q8_0 q4_0 q4_k q6_k"] [--rows R]
 *                    [--cols K] [--tokens "64 512"]
 * Prints a markdown table: microseconds per product (best of 3 rounds of
 * at least 0.2 s), G multiply-adds per second, the rate against Q8_0's
 * at the same token count, and whether the bits equal the portable
 * kernel's.  The exit status is 1 when any differ.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/kvs_cpu.h"
#include "backend/cpu/kvs_cpu_impl.h"
#include "backend/cpu/kvs_cpu_amx.h"
#include "backend/cpu/kvs_cpu_qdot.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"
#include "bench_rand.h"

#if KVS_CPU_X86

typedef struct {
    uint32_t        type;
    kvs_cpu_mat_t   w;
    uint8_t        *data;           /* rows x row_bytes, as stored */
    uint8_t        *pack;           /* the packed copy (64-byte aligned) */
    const kvs_cpu_qdot_t  *qd;      /* NULL for Q8_0 */
    uint8_t        *scratch;        /* the tile kernel's, or NULL: VNNI */
} bq_mat_t;


static kvs_cpu_q8a_t   *bq_xa;      /* the inputs by 16 tokens */
static kvs_cpu_q8ka_t  *bq_xka;     /* the same per 256 columns */


/* Every group of m for n tokens: one product. */
static void
bq_product(bq_mat_t *m, float *y, size_t ldy, const kvs_cpu_q8_t *xq,
    const kvs_cpu_q8k_t *xk, uint32_t n)
{
    uint32_t  g, groups;

    groups = (m->w.rows + KVS_CPU_Q8P_ROWS - 1) / KVS_CPU_Q8P_ROWS;

    for (g = 0; g < groups; g++) {
        if (m->scratch != NULL && m->type == KVS_GGML_Q4_K) {
            kvs_cpu_qka_rows(y, ldy, &m->w, g, bq_xka, xk, n, m->scratch);
        } else if (m->scratch != NULL) {
            kvs_cpu_qla_rows(y, ldy, &m->w, g, bq_xa, xq, n, m->scratch);
        } else if (m->type == KVS_GGML_Q8_0) {
            kvs_cpu_q8p_rows_avx512(y, ldy, &m->w, g, xq, n);
        } else if (m->qd->act == KVS_CPU_ACT_Q8K) {
            kvs_cpu_qkp_rows_avx512(y, ldy, &m->w, g, xk, n);
        } else {
            kvs_cpu_qlp_rows_avx512(y, ldy, &m->w, g, xq, n);
        }
    }
}


/* Best of 3 rounds, each repeating the product for at least 0.2 s. */
static double
bq_time(bq_mat_t *m, float *y, size_t ldy, const kvs_cpu_q8_t *xq,
    const kvs_cpu_q8k_t *xk, uint32_t n)
{
    int     round, reps;
    double  t0, t, best;

    best = 1e30;

    for (round = 0; round < 3; round++) {
        reps = 0;
        t0 = bench_now();

        do {
            bq_product(m, y, ldy, xq, xk, n);
            reps++;
            t = bench_now() - t0;
        } while (t < 0.2);

        t /= reps;
        best = t < best ? t : best;
    }

    return best;
}


/* The portable kernel's results, row by row. */
static void
bq_portable(bq_mat_t *m, float *y, size_t ldy, const kvs_cpu_q8_t *xq,
    const kvs_cpu_q8k_t *xk, uint32_t n)
{
    size_t           xs;
    uint32_t         r;
    const void      *x;
    kvs_cpu_qdot_pt  dot;

    dot = kvs_cpu_qdot_at(m->qd, 0);
    x = m->qd->act == KVS_CPU_ACT_Q8K ? (const void *) xk : (const void *) xq;
    xs = m->qd->act == KVS_CPU_ACT_Q8K
         ? (m->w.cols / 256) * sizeof(kvs_cpu_q8k_t)
         : (m->w.cols / 32) * sizeof(kvs_cpu_q8_t);

    for (r = 0; r < m->w.rows; r++) {
        dot(y + r, ldy, m->data + (size_t) r * m->w.row_bytes, x, xs, n,
            m->w.cols);
    }
}


static int
bq_make(bq_mat_t *m, uint32_t type, uint32_t rows, uint32_t cols,
    uint64_t *st)
{
    int        rc;
    size_t     rb, psize;
    float     *x;
    uint64_t   nbytes;
    uint32_t   r, j;
    kvs_err_t  e;

    memset(m, 0, sizeof(*m));
    m->type = type;

    if (kvs_ggml_nbytes(type, cols, cols, &nbytes, &e) != 0
        || nbytes == 0)
    {
        return -1;
    }
    rb = (size_t) nbytes;

    m->qd = type == KVS_GGML_Q8_0 ? NULL : kvs_cpu_qdot_find(type);
    if (type != KVS_GGML_Q8_0
        && (m->qd == NULL || (kvs_cpu_qlp_rec(type) == 0
                              && kvs_cpu_qkp_rec(type) == 0)))
    {
        return -1;
    }

    m->data = malloc((size_t) rows * rb);
    x = malloc((size_t) cols * sizeof(float));
    if (m->data == NULL || x == NULL) {
        free(x);
        return -1;
    }

    rc = 0;
    for (r = 0; r < rows && rc == 0; r++) {
        for (j = 0; j < cols; j++) {
            x[j] = bench_gauss(st);
        }
        if (kvs_quant_quantize(type, x, m->data + (size_t) r * rb, cols, &e)
            != KVS_OK)
        {
            fprintf(stderr, "bench_qpack: %s\n", e.msg);
            rc = -1;
        }
    }
    free(x);

    m->w.data = m->data;
    m->w.row_bytes = rb;
    m->w.type = type;
    m->w.rows = rows;
    m->w.cols = cols;
    m->w.qd = m->qd;

    psize = type == KVS_GGML_Q8_0 ? kvs_cpu_q8p_size(&m->w)
            : kvs_cpu_qlp_rec(type) ? kvs_cpu_qlp_size(&m->w)
            : kvs_cpu_qkp_size(&m->w);
    m->pack = aligned_alloc(64, (psize + 63) & ~(size_t) 63);
    if (rc != 0 || m->pack == NULL) {
        return -1;
    }

    if (type == KVS_GGML_Q8_0) {
        kvs_cpu_q8p_fill(&m->w, m->pack);
    } else if (kvs_cpu_qlp_rec(type)) {
        kvs_cpu_qlp_fill(&m->w, m->pack);
    } else {
        kvs_cpu_qkp_fill(&m->w, m->pack);
    }
    m->w.pack = m->pack;

    return 0;
}


int
main(int argc, char **argv)
{
    int            i, rc, tt, pass, tiles;
    char          *types, *tok_list, *p, *end, *name;
    const char    *bits;
    float         *x, *yv, *yp;
    double         t, q8rate[16], rate;
    uint8_t       *tiles_s;
    size_t         ldy, ysize;
    uint32_t       rows, cols, n, maxn, j, ti;
    uint64_t       st;
    bq_mat_t       m;
    kvs_cpu_q8_t  *xq;
    kvs_cpu_q8k_t *xk;

    rows = 2048;
    cols = 768;
    types = strdup("q8_0 q4_0 q4_k q6_k");
    tok_list = strdup("64 512");

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--rows") == 0) {
            rows = (uint32_t) strtoul(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--cols") == 0) {
            cols = (uint32_t) strtoul(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--tokens") == 0) {
            free(tok_list);
            tok_list = strdup(argv[i + 1]);
        } else if (strcmp(argv[i], "--types") == 0) {
            free(types);
            types = strdup(argv[i + 1]);
        } else {
            fprintf(stderr, "bench_qpack: unknown option %s\n", argv[i]);
            return 2;
        }
    }

    if (rows == 0 || cols == 0 || cols % 256 != 0 || tok_list == NULL
        || types == NULL)
    {
        fprintf(stderr, "bench_qpack: --rows > 0, --cols a multiple of "
                "256\n");
        return 2;
    }

    if (kvs_cpu_simd() < KVS_CPU_SIMD_AVX512) {
        printf("bench_qpack: SKIP: no AVX-512 VNNI here (%s)\n",
               kvs_cpu_kernels((char[160]) { 0 }, 160));
        return 0;
    }

    maxn = 0;
    for (p = tok_list; *p; p = end) {
        n = (uint32_t) strtoul(p, &end, 10);
        if (end == p) {
            break;
        }
        maxn = n > maxn ? n : maxn;
    }

    st = 0x5eed;
    x = malloc((size_t) cols * sizeof(float));
    xq = malloc((size_t) maxn * (cols / 32) * sizeof(kvs_cpu_q8_t));
    xk = malloc((size_t) maxn * (cols / 256) * sizeof(kvs_cpu_q8k_t));
    ldy = rows;
    ysize = (size_t) maxn * ldy * sizeof(float);
    yv = malloc(ysize);
    yp = malloc(ysize);
    if (x == NULL || xq == NULL || xk == NULL || yv == NULL || yp == NULL
        || maxn == 0)
    {
        fprintf(stderr, "bench_qpack: out of memory or no token counts\n");
        return 1;
    }

    for (n = 0; n < maxn; n++) {
        for (j = 0; j < cols; j++) {
            x[j] = bench_gauss(&st);
        }
        kvs_cpu_q8_quant(x, xq + (size_t) n * (cols / 32), cols);
        kvs_cpu_q8k_quant(x, xk + (size_t) n * (cols / 256), cols);
    }

    /* sizes of both: multiples of 64 */
    bq_xa = aligned_alloc(64, (size_t) (maxn / 16 + 1) * (cols / 32)
                              * sizeof(kvs_cpu_q8a_t));
    bq_xka = aligned_alloc(64, (size_t) (maxn / 16 + 1) * (cols / 256)
                               * sizeof(kvs_cpu_q8ka_t));
    if (bq_xa == NULL || bq_xka == NULL) {
        fprintf(stderr, "bench_qpack: out of memory\n");
        return 1;
    }
    for (n = 0; n < maxn / 16 * 16; n++) {
        kvs_cpu_q8a_fill(xq + (size_t) n * (cols / 32), n, bq_xa, cols);
        kvs_cpu_q8ka_fill(xk + (size_t) n * (cols / 256), n, bq_xka, cols);
    }

    printf("bench_qpack: %u x %u, one thread\n", rows, cols);
    printf("\n| type | tokens | us per product | G mul-add/s | vs Q8_0 "
           "| bits |\n");
    printf("| --- | ---: | ---: | ---: | ---: | --- |\n");

    rc = 0;
    memset(q8rate, 0, sizeof(q8rate));

    for (name = strtok(types, " "); name != NULL; name = strtok(NULL, " ")) {
        tt = kvs_ggml_type_from_name(name);
        if (tt < 0 || bq_make(&m, (uint32_t) tt, rows, cols, &st) != 0) {
            printf("| %s | - | - | - | - | SKIP: no packed kernel |\n",
                   name);
            continue;
        }

        /* pass 1: the tile kernel, where the host and the type have it */
        tiles = (kvs_cpu_qlp_rec(m.type) != 0 || m.type == KVS_GGML_Q4_K
                 || m.type == KVS_GGML_Q8_0)
                && (kvs_cpu_amx_ready(NULL) & KVS_CPU_AMX_INT8) != 0;

        for (pass = 0; pass < 1 + tiles; pass++) {
            /* on a cache line, as the engine's */
            m.scratch = !pass ? NULL
                        : aligned_alloc(64, ((m.type == KVS_GGML_Q4_K
                                              ? kvs_cpu_qka_scratch(&m.w)
                                              : kvs_cpu_qla_scratch(&m.w))
                                             + 63) & ~(size_t) 63);
            if (pass && m.scratch == NULL) {
                break;
            }

            ti = 0;
            for (p = tok_list; *p && ti < 16; p = end, ti++) {
                n = (uint32_t) strtoul(p, &end, 10);
                if (end == p) {
                    break;
                }
                if (n == 0) {
                    continue;
                }

                t = bq_time(&m, yv, ldy, xq, xk, n);
                memset(yv, 0xff, ysize);
                memset(yp, 0xff, ysize);
                bq_product(&m, yv, ldy, xq, xk, n);
                if (m.type != KVS_GGML_Q8_0) {
                    bq_portable(&m, yp, ldy, xq, xk, n);
                } else if (pass) {
                    tiles_s = m.scratch;
                    m.scratch = NULL;
                    bq_product(&m, yp, ldy, xq, xk, n);
                    m.scratch = tiles_s;
                }

                rate = (double) rows * cols * n / t * 1e-9;
                if (m.type == KVS_GGML_Q8_0 && !pass) {
                    q8rate[ti] = rate;
                }

                /* Q8_0's packed kernel fuses its float steps (its bits
                 * are its own, decode's included): its tiles are
                 * compared with it, it with nothing */
                bits = "own";
                if (m.type != KVS_GGML_Q8_0 || pass) {
                    bits = memcmp(yv, yp, (size_t) n * ldy * sizeof(float))
                           != 0 ? "DIFFER"
                           : m.type == KVS_GGML_Q8_0 ? "= VNNI"
                           : "= portable";
                    rc |= bits[0] == 'D';
                }

                printf("| %s%s | %u | %.1f | %.1f | %.2f | %s |\n",
                       kvs_ggml_type_name(m.type), pass ? " tiles" : "", n,
                       t * 1e6, rate,
                       q8rate[ti] > 0 ? rate / q8rate[ti] : 0.0, bits);
            }

            free(m.scratch);
            m.scratch = NULL;
        }

        free(m.data);
        free(m.pack);
    }

    free(bq_xa);
    free(bq_xka);
    free(types);
    free(tok_list);
    free(x);
    free(xq);
    free(xk);
    free(yv);
    free(yp);

    return rc;
}

#else

int
main(void)
{
    printf("bench_qpack: SKIP: not an x86 build\n");
    return 0;
}

#endif
