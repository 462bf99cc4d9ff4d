/*
 * kvs_cpu_qla_x86: the 32-column 4- and 5-bit types (Q4_0, Q4_1, Q5_0,
 * Q5_1, IQ4_NL) on AMX int8 tiles, for the tokens of a product in tiles
 * of 16, to the bits of kvs_cpu_ql.c's portable kernel, as the AVX-512
 * VNNI kernel of kvs_cpu_qlp_x86.c gives them: a token's results depend
 * on neither its batch nor the kernel that ran.
 *
 * Per call, one group of 16 weight rows (kvs_cpu_qlp_fill's records):
 *
 *  1. each record unpacked once into the caller's scratch
 *     (kvs_cpu_qla_scratch bytes): a B tile of signed levels, 8 rows of
 *     64 bytes, row k holding in weight row r's 4-byte lane its columns
 *     4k .. 4k + 3 (k < 4) or 16 + 4 (k - 4) .. (k >= 4), the VNNI
 *     kernel's unpacked vectors less the type's offset (q - 8 for Q4_0,
 *     q - 16 for Q5_0, the grid's value for IQ4_NL, q for the _1 types);
 *     then the 16 rows' d (and m) as floats;
 *  2. per 16 tokens and block b:
 *       C  = 0                                TILEZERO
 *       A  = the 16 tokens' q of block b      TILELOADD, 16 x 32 bytes
 *                                             (kvs_cpu_q8a_t, filled once
 *                                             per product)
 *       B  = block b's levels                 TILELOADD, 8 x 64 bytes
 *       C += A . B                            TDPBSSD: C[t][r] = sum of
 *            levels times q, exact in int32: the portable kernel's sum
 *       C  -> memory                          TILESTORED
 *     and each token's float steps (kvs_qlp_fold, lane r for row r) into
 *     its accumulator b % 8, one block behind the tile work so that one
 *     block's tile products run beside the previous block's vector work;
 *     blocks class by class (j, j + 8, ...) as the VNNI wide pass takes
 *     them, so 16 accumulators live in registers, and the same tree of
 *     the eight classes at the end.
 *
 * Tokens past the last whole 16 go to kvs_cpu_qlp_rows_avx512.  The
 * int32 sums are exact and every float operation is the portable one in
 * its order (no contraction in this file), so every output is its bits
 * (test_cpu_qla: memcmp, on the real tiles where the host has them and
 * on kvs_test_amx_emu.h's emulation everywhere).  The tile configuration
 * is loaded on each call and the tiles released before it returns
 * (kvs_cpu_amx.h).  Why tiles pay here when the Q8_0 tile kernel did not,
 * and by how much: docs/performance.md, "Q4_0 on int8 tiles".
 */

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

#include <string.h>

#include "model/kvs_ggml_type.h"
#include "kvs_cpu_amx.h"
#include "kvs_cpu_qdot.h"


void
kvs_cpu_q8a_fill(const kvs_cpu_q8_t *x, uint32_t i, kvs_cpu_q8a_t *dst,
    uint32_t cols)
{
    uint32_t        b, nb;
    kvs_cpu_q8a_t  *a;

    nb = cols / 32;
    a = dst + (size_t) (i / 16) * nb;

    for (b = 0; b < nb; b++) {
        memcpy(a[b].q[i % 16], x[b].q, 32);
        a[b].d[i % 16] = x[b].d;
        a[b].c[i % 16] = x[b].c;
    }
}


/* Bytes of one unpacked record: 512 of levels, 64 of d, 64 of m. */
static uint32_t
kvs_qla_srec(uint32_t type)
{
    return 512 + 64
           + (type == KVS_GGML_Q4_1 || type == KVS_GGML_Q5_1 ? 64 : 0);
}


size_t
kvs_cpu_qla_scratch(const kvs_cpu_mat_t *w)
{
    return (size_t) (w->cols / 32) * kvs_qla_srec(w->type);
}


#if KVS_CPU_X86

#include "kvs_cpu_qlp_x86.h"

#ifdef KVS_CPU_AMX_EMU
/* the test included its emulation of the _tile_* operations first */
#define KVS_QLA_TARGET  KVS_QLP_TARGET
#else
#define KVS_QLA_TARGET  "amx-tile,amx-int8," KVS_QLP_TARGET
#endif

#define KVS_QLA_INLINE                                                      \
    static inline __attribute__((always_inline, target(KVS_QLA_TARGET)))

/* two sets of tiles, block q of a class on set q % 2: C (sums), A (the
 * tokens' bytes), B (the levels) */
#define KVS_QLA_C0  0
#define KVS_QLA_C1  1
#define KVS_QLA_A0  2
#define KVS_QLA_A1  3
#define KVS_QLA_B0  4
#define KVS_QLA_B1  5


/* Group g of w unpacked into s: its nb records. */
KVS_QLA_INLINE void
kvs_qla_unpack(uint32_t type, const kvs_cpu_mat_t *w, uint32_t g,
    uint32_t nb, uint8_t *s)
{
    char            off;
    uint8_t        *o;
    uint32_t        b, k, rec;
    __m512i         u[8], ov;
    __m512          d, m;
    const uint8_t  *p;

    rec = kvs_cpu_qlp_rec(type);
    p = (const uint8_t *) w->pack + (size_t) g * nb * rec;

    off = type == KVS_GGML_Q4_0 ? 8 : type == KVS_GGML_Q5_0 ? 16
          : type == KVS_GGML_IQ4_NL ? (char) 0x80 : 0;
    ov = _mm512_set1_epi8(off);

    for (b = 0; b < nb; b++) {
        o = s + (size_t) b * kvs_qla_srec(type);
        kvs_qlp_record(type, p + (size_t) b * rec, u, &d, &m);

#pragma GCC unroll 8
        for (k = 0; k < 8; k++) {
            _mm512_storeu_si512((void *) (o + 64 * k),
                                _mm512_sub_epi8(u[k], ov));
        }

        _mm512_storeu_ps(o + 512, d);
        if (type == KVS_GGML_Q4_1 || type == KVS_GGML_Q5_1) {
            _mm512_storeu_ps(o + 576, m);
        }
    }
}


/* acc[t] + the float steps of one block for the 16 tokens of xa, from
 * their sums cb[t] and the unpacked record o */
KVS_QLA_INLINE void
kvs_qla_fold16(uint32_t type, __m512 *acc, const int32_t (*cb)[16],
    const uint8_t *o, const kvs_cpu_q8a_t *xa)
{
    uint32_t  t;
    __m512    d, m;

    d = _mm512_loadu_ps(o + 512);
    m = _mm512_setzero_ps();
    if (type == KVS_GGML_Q4_1 || type == KVS_GGML_Q5_1) {
        m = _mm512_loadu_ps(o + 576);
    }

#pragma GCC unroll 16
    for (t = 0; t < 16; t++) {
        acc[t] = kvs_qlp_fold_dc(type,
                                 _mm512_load_si512((const void *) cb[t]),
                                 d, m, xa->d[t], xa->c[t], acc[t]);
    }
}


/* Block bb's tile products on set (C, A, B), its sums into cb. */
#define KVS_QLA_TILE(C, A, B, bb, cb)                                       \
    do {                                                                    \
        _tile_zero(C);                                                      \
        _tile_loadd(A, xa[bb].q, 32);                                       \
        _tile_loadd(B, s + (size_t) (bb) * sr, 64);                         \
        _tile_dpbssd(C, A, B);                                              \
        _tile_stored(C, cb, 16 * sizeof(int32_t));                          \
    } while (0)


/*
 * 16 tokens (xa: their nb blocks) by the group's 16 rows, unpacked in s:
 * y[t * ldy + r] for the rows in mask.
 */
KVS_QLA_INLINE void
kvs_qla_tile16(uint32_t type, float *y, size_t ldy, const uint8_t *s,
    const kvs_cpu_q8a_t *xa, uint32_t nb, __mmask16 mask)
{
    uint32_t  j, q, nq, t, sr, b;
    __m512    acc[16], a[8];
    int32_t   cbuf[2][16][16] __attribute__((aligned(64)));
    float     part[16][8][16] __attribute__((aligned(64)));

    sr = kvs_qla_srec(type);

    for (j = 0; j < 8; j++) {
#pragma GCC unroll 16
        for (t = 0; t < 16; t++) {
            acc[t] = _mm512_setzero_ps();
        }

        nq = j < nb ? (nb - j + 7) / 8 : 0;     /* blocks of class j */

        /* block q's tiles, then block q - 1's float steps */
        for (q = 0; q <= nq; q += 2) {
            if (q < nq) {
                b = j + 8 * q;
                KVS_QLA_TILE(KVS_QLA_C0, KVS_QLA_A0, KVS_QLA_B0, b, cbuf[0]);
            }

            if (q >= 1) {
                b = j + 8 * (q - 1);
                kvs_qla_fold16(type, acc, cbuf[1], s + (size_t) b * sr,
                               xa + b);
            }

            if (q + 1 < nq) {
                b = j + 8 * (q + 1);
                KVS_QLA_TILE(KVS_QLA_C1, KVS_QLA_A1, KVS_QLA_B1, b, cbuf[1]);
            }

            if (q < nq) {
                b = j + 8 * q;
                kvs_qla_fold16(type, acc, cbuf[0], s + (size_t) b * sr,
                               xa + b);
            }
        }

#pragma GCC unroll 16
        for (t = 0; t < 16; t++) {
            _mm512_store_ps(part[t][j], acc[t]);
        }
    }

    for (t = 0; t < 16; t++) {
#pragma GCC unroll 8
        for (j = 0; j < 8; j++) {
            a[j] = _mm512_load_ps(part[t][j]);
        }
        _mm512_mask_storeu_ps(y + t * ldy, mask, kvs_qlp_tree(a));
    }
}


KVS_QLA_INLINE void
kvs_qla_rows(uint32_t type, float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8a_t *xa, const kvs_cpu_q8_t *xq, uint32_t n,
    uint8_t *s)
{
    uint32_t           i, nb;
    __mmask16          mask;
    kvs_cpu_tilecfg_t  cfg;

    nb = w->cols / 32;
    mask = kvs_cpu_pack_mask(w, g);

    kvs_qla_unpack(type, w, g, nb, s);

    memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    cfg.rows[KVS_QLA_C0] = cfg.rows[KVS_QLA_C1] = 16;
    cfg.colsb[KVS_QLA_C0] = cfg.colsb[KVS_QLA_C1] = 16 * sizeof(int32_t);
    cfg.rows[KVS_QLA_A0] = cfg.rows[KVS_QLA_A1] = 16;
    cfg.colsb[KVS_QLA_A0] = cfg.colsb[KVS_QLA_A1] = 32;
    cfg.rows[KVS_QLA_B0] = cfg.rows[KVS_QLA_B1] = 8;
    cfg.colsb[KVS_QLA_B0] = cfg.colsb[KVS_QLA_B1] = 64;

    /* gcc's ldtilecfg names only the first 8 bytes as its input: the
     * rest must be in memory before it */
    __asm__ volatile ("" : : "m" (cfg) : "memory");
    _tile_loadconfig(&cfg);

    for (i = 0; i + 16 <= n; i += 16) {
        kvs_qla_tile16(type, y + (size_t) g * KVS_CPU_Q8P_ROWS + i * ldy,
                       ldy, s, xa + (size_t) (i / 16) * nb, nb, mask);
    }

    _tile_release();

    if (i < n) {
        kvs_cpu_qlp_rows_avx512(y + i * ldy, ldy, w, g,
                                xq + (size_t) i * nb, n - i);
    }
}


__attribute__((target(KVS_QLA_TARGET))) void
kvs_cpu_qla_rows(float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8a_t *xa, const kvs_cpu_q8_t *xq, uint32_t n,
    void *scratch)
{
    if (n < 16) {
        kvs_cpu_qlp_rows_avx512(y, ldy, w, g, xq, n);
        return;
    }

    /* one specialization per type (a constant inside) */
    switch (w->type) {
#define KVS_QLA_TYPE(t)                                                     \
    case t:                                                                 \
        kvs_qla_rows(t, y, ldy, w, g, xa, xq, n, scratch);                  \
        break;
    KVS_QLA_TYPE(KVS_GGML_Q4_0)
    KVS_QLA_TYPE(KVS_GGML_Q4_1)
    KVS_QLA_TYPE(KVS_GGML_Q5_0)
    KVS_QLA_TYPE(KVS_GGML_Q5_1)
#undef KVS_QLA_TYPE
    default: /* IQ4_NL */
        kvs_qla_rows(KVS_GGML_IQ4_NL, y, ldy, w, g, xa, xq, n, scratch);
        break;
    }
}

#endif /* KVS_CPU_X86 */
