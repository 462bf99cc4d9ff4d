/*
 * kvs_test_q8in: the quantized inputs the tile kernels' tests share
 * (test_cpu_amx, test_cpu_qla): n tokens of cols columns as the
 * products take them (kvs_cpu_q8_quant), Gaussian with every ninth token
 * zero and every ninth (another phase) scaled by 1e4, and every fifth
 * token's first block zero, so that zero and large blocks and whole
 * zero tokens all reach the kernels.  Needs kvs_test.h and
 * backend/cpu/kvs_cpu_impl.h first; the caller frees the result.
 */

#ifndef KVS_TEST_Q8IN_H
#define KVS_TEST_Q8IN_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>


static kvs_cpu_q8_t *
kvs_test_q8_input(uint32_t n, uint32_t cols, uint64_t *st)
{
    float         *x;
    uint32_t       i, j;
    kvs_cpu_q8_t  *xq;

    x = malloc(cols * sizeof(float));
    xq = malloc((size_t) n * (cols / 32) * sizeof(kvs_cpu_q8_t));
    assert_non_null(x);
    assert_non_null(xq);

    for (i = 0; i < n; i++) {
        for (j = 0; j < cols; j++) {
            x[j] = i % 9 == 4 ? 0.0f
                   : (i % 9 == 7 ? 1e4f : 1.0f) * kvs_test_gauss(st);
        }

        if (i % 5 == 2) {
            memset(x, 0, 32 * sizeof(float));
        }

        kvs_cpu_q8_quant(x, xq + (size_t) i * (cols / 32), cols);
    }

    free(x);

    return xq;
}

#endif /* KVS_TEST_Q8IN_H */
