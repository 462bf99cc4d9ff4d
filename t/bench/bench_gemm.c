/*
 * bench_gemm: the CPU backend's own batched F32 product (AVX2 and, where
 * the CPU has it, AVX-512: kvs_cpu_gemm_x86.c) against the BLAS
 * library's cblas_sgemm on the same
 * shapes, in the same run, one thread (OPENBLAS_NUM_THREADS=1 is set
 * before the library starts).  Shapes: a prefill tile of the 100M model
 * (n tokens x 256 rows of a tile x cols of 768 or 2048) and of an 8B
 * model (4096 columns).  Prints GFLOP/s (best of N runs), AVX2 / BLAS
 * and AVX-512 / AVX2.
 *
 *   bench_gemm [-n RUNS]
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "base/kvs_clock.h"
#include "backend/cpu/kvs_cpu_impl.h"

void openblas_set_num_threads(int n);


static double
bench_best(int ours, float *y, const float *x, const float *w, uint32_t n,
    uint32_t cols, uint32_t nr, int runs)
{
    int       i;
    double    best, t;
    uint64_t  t0;

    best = 1e30;

    for (i = 0; i < runs; i++) {
        t0 = kvs_now_ns();

        if (ours == 2) {
#if KVS_CPU_X86
            kvs_cpu_gemm_avx512(y, nr, x, n, cols, w, nr);
#endif
        } else if (ours) {
#if KVS_CPU_X86
            kvs_cpu_gemm_avx2(y, nr, x, n, cols, w, nr);
#endif
        } else {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int) n,
                        (int) nr, (int) cols, 1.0f, x, (int) cols, w,
                        (int) cols, 0.0f, y, (int) nr);
        }

        t = (double) (kvs_now_ns() - t0) / 1e9;
        best = t < best ? t : best;
    }

    return 2.0 * n * cols * nr / best / 1e9;
}


int
main(int argc, char **argv)
{
    static const uint32_t  shapes[][3] = {
        { 64, 768, 256 }, { 512, 768, 256 }, { 512, 2048, 256 },
        { 512, 4096, 256 }, { 128, 4096, 256 }
    };

    int       runs;
    float    *x, *w, *y;
    size_t    i, s;
    int       avx512;
    double    g0, g1, g2;

    runs = argc == 3 && strcmp(argv[1], "-n") == 0 ? atoi(argv[2]) : 5;
    openblas_set_num_threads(1);

#if KVS_CPU_X86
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        printf("SKIP: bench_gemm: this CPU has no AVX2 + FMA\n");
        return 0;
    }
#else
    printf("SKIP: bench_gemm: not x86-64\n");
    return 0;
#endif

    x = malloc(512 * 4096 * sizeof(float));
    w = malloc(256 * 4096 * sizeof(float));
    y = malloc(512 * 256 * sizeof(float));
    if (x == NULL || w == NULL || y == NULL) {
        return 1;
    }

    for (i = 0; i < 512 * 4096; i++) {
        x[i] = (float) ((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    }
    for (i = 0; i < 256 * 4096; i++) {
        w[i] = (float) ((i * 40503u) % 1000) / 1000.0f - 0.5f;
    }

    avx512 = __builtin_cpu_supports("avx512f");
    printf("%-6s %-6s %-5s %12s %12s %12s %7s %7s\n", "n", "cols", "rows",
           "avx2 GF/s", "avx512 GF/s", "blas GF/s", "2/blas", "512/2");

    for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        g0 = bench_best(1, y, x, w, shapes[s][0], shapes[s][1],
                        shapes[s][2], runs);
        g2 = avx512 ? bench_best(2, y, x, w, shapes[s][0], shapes[s][1],
                                 shapes[s][2], runs) : 0.0;
        g1 = bench_best(0, y, x, w, shapes[s][0], shapes[s][1],
                        shapes[s][2], runs);
        printf("%-6u %-6u %-5u %12.1f %12.1f %12.1f %6.2fx %6.2fx\n",
               shapes[s][0], shapes[s][1], shapes[s][2], g0, g2, g1,
               g0 / g1, g2 / g0);
    }

    free(x);
    free(w);
    free(y);

    return 0;
}
