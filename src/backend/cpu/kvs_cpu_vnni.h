/*
 * kvs_cpu_vnni: what the AVX-512 VNNI kernels of the packed quantized
 * types (kvs_cpu_x86.c's Q8_0, kvs_cpu_qlp_x86.c, kvs_cpu_qkp_x86.c)
 * share.  x86 builds only;
 * include inside #if KVS_CPU_X86.
 */

#ifndef KVS_CPU_VNNI_H
#define KVS_CPU_VNNI_H

#include <stdint.h>
#include <immintrin.h>


/* acc + vpdpbusd(u, the 4 int8 at p in every lane), the 4 bytes read by
 * the instruction's own broadcast ({1to16}): GCC 12 emits a separate
 * vpbroadcastd, one more instruction per product, and the wide passes
 * ran up to 10% slower so, Q8_0's 8-token passes 8-15% (bench_qpack,
 * 2026-12-06). */
static inline __attribute__((always_inline, target("avx512f,avx512vnni")))
__m512i
kvs_cpu_dpbusd_m(__m512i acc, __m512i u, const void *p)
{
    __asm__ ("vpdpbusd %2%{1to16%}, %1, %0"
             : "+v" (acc) : "v" (u), "m" (*(const int32_t *) p));

    return acc;
}

#endif /* KVS_CPU_VNNI_H */
