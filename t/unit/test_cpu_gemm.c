/*
 * test_cpu_gemm: the CPU backend's own batched F32 product
 * (kvs_cpu_gemm_x86.c) gives, to the bit, one fmaf chain per output in
 * column order (kvs_cpu_gemm_ref), for every shape, and so does its
 * AVX-512 twin where the CPU has AVX-512: token counts around the 6- and
 * 12-token register tiles, row counts around the 16- and 32-row panels,
 * column counts around the 8-column transpose and the 128- and
 * 256-column panel depths;
 * so a token's outputs do not depend on its batch.  Both also stay
 * within float rounding of a double-precision product.
 */

#include "kvs_test.h"

#include <math.h>
#include <string.h>

#include "backend/cpu/kvs_cpu_impl.h"


static void
test_gemm_shapes(void **state)
{
#if KVS_CPU_X86
    static const uint32_t  ns[] = { 1, 5, 6, 7, 11, 12, 13, 25, 64, 70 };
    static const uint32_t  nrs[] = { 1, 15, 16, 17, 31, 32, 33, 40 };
    static const uint32_t  colss[] = { 1, 7, 8, 33, 127, 128, 129, 255,
                                       256, 257, 600 };

    int        avx512;
    float     *x, *w, *y, *yr, *y1;
    double     s, amax;
    uint32_t   a, b, c, n, nr, cols, i, r, k;
    uint64_t   seed;

    (void) state;

    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        skip();
    }

    avx512 = __builtin_cpu_supports("avx512f");
    if (!avx512) {
        print_message("no AVX-512 here: the AVX2 kernel alone\n");
    }

    x = test_malloc(70 * 600 * sizeof(float));
    w = test_malloc(40 * 600 * sizeof(float));
    y = test_malloc(70 * 48 * sizeof(float));
    yr = test_malloc(70 * 48 * sizeof(float));
    y1 = test_malloc(48 * sizeof(float));
    seed = 11;

    for (i = 0; i < 70 * 600; i++) {
        x[i] = (float) kvs_test_gauss(&seed);
    }
    for (i = 0; i < 40 * 600; i++) {
        w[i] = (float) kvs_test_gauss(&seed);
    }

    for (a = 0; a < sizeof(ns) / sizeof(ns[0]); a++) {
        for (b = 0; b < sizeof(nrs) / sizeof(nrs[0]); b++) {
            for (c = 0; c < sizeof(colss) / sizeof(colss[0]); c++) {
                n = ns[a];
                nr = nrs[b];
                cols = colss[c];

                /* ldy 48 > nr: the kernel must not write past nr */
                memset(y, 0x7f, 70 * 48 * sizeof(float));
                memset(yr, 0x7f, 70 * 48 * sizeof(float));
                kvs_cpu_gemm_ref(yr, 48, x, n, cols, w, nr);

                /* the AVX-512 twin first, into the same poisoned rows */
                if (avx512) {
                    kvs_cpu_gemm_avx512(y, 48, x, n, cols, w, nr);
                    assert_memory_equal(y, yr,
                                        (size_t) n * 48 * sizeof(float));
                    memset(y, 0x7f, 70 * 48 * sizeof(float));
                }

                kvs_cpu_gemm_avx2(y, 48, x, n, cols, w, nr);
                assert_memory_equal(y, yr, (size_t) n * 48 * sizeof(float));

                /* the last token alone */
                kvs_cpu_gemm_avx2(y1, 48, x + (size_t) (n - 1) * cols, 1,
                                  cols, w, nr);
                assert_memory_equal(y1, y + (size_t) (n - 1) * 48,
                                    nr * sizeof(float));

                for (i = 0; i < n; i++) {
                    for (r = 0; r < nr; r++) {
                        s = 0.0;
                        amax = 0.0;

                        for (k = 0; k < cols; k++) {
                            s += (double) x[i * cols + k] * w[r * cols + k];
                            amax += fabs((double) x[i * cols + k]
                                         * w[r * cols + k]);
                        }

                        assert_true(fabs(y[i * 48 + r] - s)
                                    <= 1e-6 * amax * cols + 1e-30);
                    }
                }
            }
        }
    }

    test_free(x);
    test_free(w);
    test_free(y);
    test_free(yr);
    test_free(y1);
#else
    (void) state;
    skip();
#endif
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_gemm_shapes),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
