/*
 * kvs_cpu_qdot: which quantized product each weight type uses, and at
 * which kernel level.  A type absent here is computed from its rows
 * dequantized to floats (kvs_cpu_row); F32 / F16 / BF16 always are.
 */

#include "model/kvs_ggml_type.h"
#include "kvs_cpu_qdot.h"


static const kvs_cpu_qdot_t  kvs_cpu_qdots[] = {
#if KVS_CPU_X86
#define KVS_CPU_QDOT(t, a, f)   { t, a, f, f##_avx2, NULL }
#define KVS_CPU_QDOTI(t, a, f)  { t, a, f, f##_avx2, f##_avx2i }
#else
#define KVS_CPU_QDOT(t, a, f)   { t, a, f, NULL, NULL }
#define KVS_CPU_QDOTI(t, a, f)  { t, a, f, NULL, NULL }
#endif
    /* the 32-column types (kvs_cpu_ql.c) */
    KVS_CPU_QDOTI(KVS_GGML_Q8_0, KVS_CPU_ACT_Q8, kvs_cpu_qdot_q8_0),
    KVS_CPU_QDOTI(KVS_GGML_Q4_0, KVS_CPU_ACT_Q8, kvs_cpu_qdot_q4_0),
    KVS_CPU_QDOTI(KVS_GGML_Q4_1, KVS_CPU_ACT_Q8, kvs_cpu_qdot_q4_1),
    KVS_CPU_QDOTI(KVS_GGML_Q5_0, KVS_CPU_ACT_Q8, kvs_cpu_qdot_q5_0),
    KVS_CPU_QDOTI(KVS_GGML_Q5_1, KVS_CPU_ACT_Q8, kvs_cpu_qdot_q5_1),
    KVS_CPU_QDOTI(KVS_GGML_IQ4_NL, KVS_CPU_ACT_Q8, kvs_cpu_qdot_iq4_nl),

    /* the 256-column types (kvs_cpu_qk.c) */
    KVS_CPU_QDOT(KVS_GGML_Q2_K, KVS_CPU_ACT_Q8K, kvs_cpu_qdot_q2_k),
    KVS_CPU_QDOT(KVS_GGML_Q3_K, KVS_CPU_ACT_Q8K, kvs_cpu_qdot_q3_k),
    KVS_CPU_QDOT(KVS_GGML_Q4_K, KVS_CPU_ACT_Q8K, kvs_cpu_qdot_q4_k),
    KVS_CPU_QDOT(KVS_GGML_Q5_K, KVS_CPU_ACT_Q8K, kvs_cpu_qdot_q5_k),
    KVS_CPU_QDOT(KVS_GGML_Q6_K, KVS_CPU_ACT_Q8K, kvs_cpu_qdot_q6_k),
    KVS_CPU_QDOT(KVS_GGML_IQ4_XS, KVS_CPU_ACT_Q8K, kvs_cpu_qdot_iq4_xs),

#undef KVS_CPU_QDOT
#undef KVS_CPU_QDOTI
    { 0, 0, NULL, NULL, NULL }
};


const kvs_cpu_qdot_t *
kvs_cpu_qdot_find(uint32_t type)
{
    const kvs_cpu_qdot_t  *e;

    for (e = kvs_cpu_qdots; e->dot != NULL; e++) {
        if (e->type == type) {
            return e;
        }
    }

    return NULL;
}


kvs_cpu_qdot_pt
kvs_cpu_qdot_at(const kvs_cpu_qdot_t *e, int simd)
{
    if (simd >= KVS_CPU_SIMD_AVX2 && e->dot_avx2 != NULL) {
        return e->dot_avx2;
    }

    return e->dot;
}
