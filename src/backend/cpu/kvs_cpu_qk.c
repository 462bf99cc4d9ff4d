/*
 * kvs_cpu_qk: the products of the 256-column types (Q2_K .. Q6_K,
 * IQ4_XS) with a Q8_K input, portable C, and that input's quantization.
 * Their AVX2 twins (kvs_cpu_qk_x86.c) give the same bits
 * (kvs_cpu_qdot.h).
 */

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

#include <math.h>
#include <string.h>

#include "model/kvs_dtype.h"
#include "kvs_cpu_qdot.h"


/* kvs_cpu_q8_quant()'s rule over 256 columns, plus the 16-column sums. */
void
kvs_cpu_q8k_quant(const float *x, kvs_cpu_q8k_t *dst, uint32_t cols)
{
    float     amax, d, id;
    int32_t   sum;
    uint32_t  b, j, k;

    for (b = 0; b < cols / 256; b++) {
        amax = 0.0f;

        for (j = 0; j < 256; j++) {
            amax = fmaxf(amax, fabsf(x[j]));
        }

        d = amax / 127.0f;
        id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[b].d = d;

        for (k = 0; k < 16; k++) {
            sum = 0;

            for (j = 16 * k; j < 16 * k + 16; j++) {
                dst[b].q[j] = (int8_t) lrintf(x[j] * id);
                sum += dst[b].q[j];
            }

            dst[b].bsums[k] = (int16_t) sum;
        }

        x += 256;
    }
}
