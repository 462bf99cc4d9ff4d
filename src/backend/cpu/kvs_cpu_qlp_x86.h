/*
 * kvs_cpu_qlp_x86: the packed 32-column 4- and 5-bit types' vector steps
 * (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL; the record layout of
 * kvs_cpu_qlp_x86.c), shared by the AVX-512 VNNI kernel there and the
 * AMX tile kernel of kvs_cpu_qla_x86.c, so that both take each block's
 * levels and float steps from one statement and give kvs_cpu_ql.c's
 * portable bits.  Private to src/backend/cpu/; x86-64 only.
 *
 * Invariant: kvs_qlp_fold and kvs_qlp_tree are the portable kernel's
 * float operations, lane for lane, in its order (the including files
 * build with contraction off).
 */

#ifndef KVS_CPU_QLP_X86_H
#define KVS_CPU_QLP_X86_H

#include <stdint.h>

#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"
#include "kvs_cpu_qdot.h"

#include <immintrin.h>

#include "kvs_cpu_vnni.h"

#define KVS_QLP_TARGET  "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"

#define KVS_QLP_INLINE                                                      \
    static inline __attribute__((always_inline, target(KVS_QLP_TARGET)))


/* The 8 unsigned level vectors of one record: u[k] columns 4k .., u[4 +
 * k] columns 16 + 4k .. (k 0..3), as vpdpbusd's unsigned operand. */
KVS_QLP_INLINE void
kvs_qlp_unpack(uint32_t type, const uint8_t *p, __m512i *u)
{
    uint32_t  k;
    __m512i   v, lo, hi, h, m4, b4, tbl;

    m4 = _mm512_set1_epi8(0x0f);
    b4 = _mm512_set1_epi8(0x10);

#pragma GCC unroll 4
    for (k = 0; k < 4; k++) {
        v = _mm512_loadu_si512((const void *) (p + 64 * k));
        lo = _mm512_and_si512(v, m4);
        hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        u[k] = lo;
        u[4 + k] = hi;
    }

    if (type == KVS_GGML_Q5_0 || type == KVS_GGML_Q5_1) {
        h = _mm512_loadu_si512((const void *) (p + 256));

        /* bit k of each byte to bit 4: u | (h shifted & 0x10) */
#pragma GCC unroll 8
        for (k = 0; k < 8; k++) {
            v = k < 4 ? _mm512_slli_epi16(h, 4 - k)
                      : k == 4 ? h : _mm512_srli_epi16(h, k - 4);
            u[k] = _mm512_ternarylogic_epi32(u[k], v, b4, 0xf8);
        }
    }

    if (type == KVS_GGML_IQ4_NL) {
        /* the grid's values + 128 (1 .. 241) */
        tbl = _mm512_broadcast_i32x4(_mm_xor_si128(
                  _mm_loadu_si128((const __m128i *) kvs_iq4_kv),
                  _mm_set1_epi8((char) 0x80)));

#pragma GCC unroll 8
        for (k = 0; k < 8; k++) {
            u[k] = _mm512_shuffle_epi8(tbl, u[k]);
        }
    }
}


/* A block sum's start for input block xb: minus the levels' offset
 * times sum(q_x), exactly (xb->c = -128 sum(q_x)). */
KVS_QLP_INLINE __m512i
kvs_qlp_init(uint32_t type, const kvs_cpu_q8_t *xb)
{
    switch (type) {
    case KVS_GGML_Q4_0:
        return _mm512_set1_epi32(xb->c >> 4);    /* - 8 sum(q_x) */
    case KVS_GGML_Q5_0:
        return _mm512_set1_epi32(xb->c >> 3);    /* - 16 sum(q_x) */
    case KVS_GGML_IQ4_NL:
        return _mm512_set1_epi32(xb->c);         /* - 128 sum(q_x) */
    default:
        return _mm512_setzero_si512();
    }
}


/* acc + the float steps of one block of 16 rows for an input block of
 * scale dx and correction c, from its exact int32 sums isum: the
 * portable kernel's, lane for lane */
KVS_QLP_INLINE __m512
kvs_qlp_fold_dc(uint32_t type, __m512i isum, __m512 d, __m512 m, float dx,
    int32_t c, __m512 acc)
{
    __m512  vx, t, mt;

    vx = _mm512_set1_ps(dx);
    t = _mm512_mul_ps(d, vx);
    t = _mm512_mul_ps(t, _mm512_cvtepi32_ps(isum));

    if (type == KVS_GGML_Q4_1 || type == KVS_GGML_Q5_1) {
        mt = _mm512_mul_ps(m, vx);
        mt = _mm512_mul_ps(mt, _mm512_set1_ps((float) (-(c / 128))));
        t = _mm512_add_ps(t, mt);
    }

    return _mm512_add_ps(acc, t);
}


/* the same for input block xb */
KVS_QLP_INLINE __m512
kvs_qlp_fold(uint32_t type, __m512i isum, __m512 d, __m512 m,
    const kvs_cpu_q8_t *xb, __m512 acc)
{
    return kvs_qlp_fold_dc(type, isum, d, m, xb->d, xb->c, acc);
}


/* Record r's levels (kvs_qlp_unpack) and its 16 rows' d and m (zero for
 * the types without m). */
KVS_QLP_INLINE void
kvs_qlp_record(uint32_t type, const uint8_t *r, __m512i *u, __m512 *d,
    __m512 *m)
{
    uint32_t  doff;

    doff = 256 + (type == KVS_GGML_Q5_0 || type == KVS_GGML_Q5_1 ? 64 : 0);

    kvs_qlp_unpack(type, r, u);
    *d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (r + doff)));
    *m = _mm512_setzero_ps();

    if (type == KVS_GGML_Q4_1 || type == KVS_GGML_Q5_1) {
        *m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)
                                                (r + doff + 32)));
    }
}


/* The portable kernel's tree of a token's eight accumulators. */
KVS_QLP_INLINE __m512
kvs_qlp_tree(const __m512 *a)
{
    __m512  s;

    s = _mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6]));

    return _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a[1], a[5]),
                                          _mm512_add_ps(a[3], a[7])));
}

#endif /* KVS_CPU_QLP_X86_H */
