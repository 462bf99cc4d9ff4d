/*
 * kvs_cpu_qla_x86: the 32-column 4- and 5-bit types (Q4_0, Q4_1, Q5_0,
 * Q5_1, IQ4_NL), Q8_0 and Q4_K on AMX int8 tiles, for the tokens of a
 * product in tiles of 16, to the bits of the AVX-512 VNNI kernels (for
 * all but Q8_0 the portable kernels' bits, kvs_cpu_ql.c, kvs_cpu_qk.c;
 * for Q8_0 kvs_cpu_q8p_rows_avx512's own): a token's results depend
 * neither on its batch nor on which of the two kernels ran.
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
 * Q4_K (kvs_cpu_qka_rows) with each sub-block's scale in the weights: a
 * scale is at most 63 and a level 15, too wide for a byte together, so
 * the unpacked super-block holds levels times the scale's low 3 bits and
 * levels times its high 3 bits (at most 105 each), as 4 B tiles of 64
 * columns apiece.  Per 16 tokens and super-block, 8 tile products add
 * them up across the whole super-block in two sums (no store per
 * sub-block), and isum = low + 8 high exactly in int32; one BF16 product
 * gives msum (the rows' mins against the tokens' sub-block sums), and
 * kvs_cpu_qk.c's float steps follow, super-blocks in order into one
 * accumulator a token, the previous super-block's beside the next one's
 * tiles.  So the bits are that kernel's too.
 *
 * Q8_0 (kvs_cpu_qla_rows too) as the Q4_0 family, each record's levels
 * (stored plus 128 for vpdpbusd) unpacked signed, and its float step the
 * VNNI kernel's fused one, blocks in order into one accumulator a token.
 *
 * Tokens past the last whole 16 go to kvs_cpu_qlp_rows_avx512
 * (kvs_cpu_q8p_rows_avx512 for Q8_0, kvs_cpu_qkp_rows_avx512 for Q4_K).
 * The int32 sums are exact and every float operation is that kernel's
 * in its order (no contraction in this file), so every output is its bits
 * (test_cpu_qla: memcmp, on the real tiles where the host has them and
 * on kvs_test_amx_emu.h's emulation everywhere).  The tile configuration
 * is loaded on each call and the tiles released before it returns
 * (kvs_cpu_amx.h).  Why tiles pay, and by how much: docs/performance.md,
 * "Q4_0 and Q4_K on int8 tiles" and "Q8_0 and Q4_K on int8 tiles,
 * again".
 */

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

#include <string.h>

#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "kvs_cpu_amx.h"
#include "kvs_cpu_qdot.h"
#include "kvs_cpu_impl.h"


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


void
kvs_cpu_q8ka_fill(const kvs_cpu_q8k_t *x, uint32_t i, kvs_cpu_q8ka_t *dst,
    uint32_t cols)
{
    int32_t          v;
    uint32_t         b, j, nb;
    kvs_cpu_q8ka_t  *a;

    nb = cols / 256;
    a = dst + (size_t) (i / 16) * nb;

    for (b = 0; b < nb; b++) {
        for (j = 0; j < 4; j++) {
            memcpy(a[b].q[j][i % 16], x[b].q + 64 * j, 64);
        }

        for (j = 0; j < 8; j++) {
            v = x[b].bsums[2 * j] + x[b].bsums[2 * j + 1];
            /* both parts exact in BF16: at most 8 significant bits */
            a[b].bs[i % 16][j] = kvs_f32_to_bf16((float) (v - (v & 15)));
            a[b].bs[i % 16][8 + j] = kvs_f32_to_bf16((float) (v & 15));
        }
        a[b].d[i % 16] = x[b].d;
    }
}


/* An unpacked Q4_K super-block: its levels times the low 3 bits of
 * their sub-block's scale as 4 B tiles (tile c: sub-blocks 2 c and 2 c +
 * 1, 16 rows of 64 bytes, row k holding in weight row r's 4-byte lane its
 * columns 4 k .. 4 k + 3 of the pair), the levels times the scale's high
 * 3 bits likewise (both at most 15 * 7: signed bytes), the rows' mins as
 * a BF16 B tile (row p, lane r: row r's mins of sub-blocks 2 p % 8 and
 * (2 p + 1) % 8, so that with kvs_cpu_q8ka_t's bs the product is msum),
 * d and dmin ([16] floats each). */
#define KVS_QKA_HI    4096
#define KVS_QKA_M     8192
#define KVS_QKA_D     (KVS_QKA_M + 512)
#define KVS_QKA_DMIN  (KVS_QKA_D + 64)
#define KVS_QKA_SREC  (KVS_QKA_DMIN + 64)


size_t
kvs_cpu_qka_scratch(const kvs_cpu_mat_t *w)
{
    return (size_t) (w->cols / 256) * KVS_QKA_SREC;
}


#if KVS_CPU_X86

#include "kvs_cpu_qlp_x86.h"

#ifdef KVS_CPU_AMX_EMU
/* the test included its emulation of the _tile_* operations first */
#define KVS_QLA_TARGET  KVS_QLP_TARGET
#else
#define KVS_QLA_TARGET  "amx-tile,amx-int8,amx-bf16," KVS_QLP_TARGET
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


/* Both kernels' tiles, loaded into this thread: C 16 x 16 int32, A 16
 * tokens x 32 bytes, B 8 x 64 bytes (32 columns of 16 rows). */
KVS_QLA_INLINE void
kvs_qla_config(kvs_cpu_tilecfg_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->palette = 1;
    cfg->rows[KVS_QLA_C0] = cfg->rows[KVS_QLA_C1] = 16;
    cfg->colsb[KVS_QLA_C0] = cfg->colsb[KVS_QLA_C1] = 16 * sizeof(int32_t);
    cfg->rows[KVS_QLA_A0] = cfg->rows[KVS_QLA_A1] = 16;
    cfg->colsb[KVS_QLA_A0] = cfg->colsb[KVS_QLA_A1] = 32;
    cfg->rows[KVS_QLA_B0] = cfg->rows[KVS_QLA_B1] = 8;
    cfg->colsb[KVS_QLA_B0] = cfg->colsb[KVS_QLA_B1] = 64;

    /* gcc's ldtilecfg names only the first 8 bytes as its input: the
     * rest must be in memory before it */
    __asm__ volatile ("" : : "m" (*cfg) : "memory");
    _tile_loadconfig(cfg);
}


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


/* One block's tile product on set (C, A, B): the 16 tokens' bytes at
 * pa, the levels at pb, the sums into cb. */
#define KVS_QLA_TILE(C, A, B, pa, pb, cb)                                   \
    do {                                                                    \
        _tile_zero(C);                                                      \
        _tile_loadd(A, pa, 32);                                             \
        _tile_loadd(B, pb, 64);                                             \
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
                KVS_QLA_TILE(KVS_QLA_C0, KVS_QLA_A0, KVS_QLA_B0, xa[b].q,
                             s + (size_t) b * sr, cbuf[0]);
            }

            if (q >= 1) {
                b = j + 8 * (q - 1);
                kvs_qla_fold16(type, acc, cbuf[1], s + (size_t) b * sr,
                               xa + b);
            }

            if (q + 1 < nq) {
                b = j + 8 * (q + 1);
                KVS_QLA_TILE(KVS_QLA_C1, KVS_QLA_A1, KVS_QLA_B1, xa[b].q,
                             s + (size_t) b * sr, cbuf[1]);
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
    kvs_qla_config(&cfg);

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


/* Q8_0 group g of w (kvs_cpu_q8p_fill's records, levels plus 128) into
 * s: per block, the B tile of signed levels, then the 16 rows' d as
 * floats. */
KVS_QLA_INLINE void
kvs_q8a_unpack(const kvs_cpu_mat_t *w, uint32_t g, uint32_t nb, uint8_t *s)
{
    uint8_t         *o;
    uint32_t         b, k;
    __m512i          sg;
    const uint8_t   *wq;
    const uint16_t  *wd;

    wq = kvs_cpu_q8p_group(w, g, &wd);
    sg = _mm512_set1_epi8((char) 0x80);

    for (b = 0; b < nb; b++) {
        o = s + (size_t) b * kvs_qla_srec(KVS_GGML_Q8_0);

        /* level + 128 as a byte, its top bit flipped: the level */
#pragma GCC unroll 8
        for (k = 0; k < 8; k++) {
            _mm512_storeu_si512((void *) (o + 64 * k), _mm512_xor_si512(
                _mm512_loadu_si512((const void *) (wq + 512 * (size_t) b
                                                   + 64 * k)), sg));
        }

        _mm512_storeu_ps(o + 512, _mm512_cvtph_ps(_mm256_loadu_si256(
            (const __m256i *) (wd + (size_t) b * KVS_CPU_Q8P_ROWS))));
    }
}


/*
 * Q8_0: 16 tokens (xa) by the group unpacked in s: y[t * ldy + r] for
 * the rows in mask.  Each block's tile sum is the VNNI kernel's exact
 * int32 (which that kernel reaches from the stored levels plus 128 and
 * the token's c), and its float step (kvs_cpu_q8p_tile's fused one,
 * blocks in order into one accumulator a token) follows one block behind
 * the tile work.
 */
KVS_QLA_INLINE void
kvs_q8a_tile16(float *y, size_t ldy, const uint8_t *s,
    const kvs_cpu_q8a_t *xa, uint32_t nb, __mmask16 mask)
{
    uint32_t               b, t, sr;
    __m512                 acc[16], dw;
    int32_t                cbuf[2][16][16] __attribute__((aligned(64)));
    const uint8_t         *o;
    const kvs_cpu_q8a_t   *xb;

    sr = kvs_qla_srec(KVS_GGML_Q8_0);

#pragma GCC unroll 16
    for (t = 0; t < 16; t++) {
        acc[t] = _mm512_setzero_ps();
    }

    for (b = 0; b <= nb; b++) {
        if (b < nb) {
            o = s + (size_t) b * sr;

            if (b & 1) {
                KVS_QLA_TILE(KVS_QLA_C1, KVS_QLA_A1, KVS_QLA_B1, xa[b].q, o,
                             cbuf[1]);
            } else {
                KVS_QLA_TILE(KVS_QLA_C0, KVS_QLA_A0, KVS_QLA_B0, xa[b].q, o,
                             cbuf[0]);
            }
        }

        if (b >= 1) {
            xb = xa + b - 1;
            dw = _mm512_loadu_ps(s + (size_t) (b - 1) * sr + 512);

#pragma GCC unroll 16
            for (t = 0; t < 16; t++) {
                acc[t] = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(_mm512_load_si512(
                        (const void *) cbuf[(b - 1) & 1][t])),
                    _mm512_mul_ps(dw, _mm512_set1_ps(xb->d[t])), acc[t]);
            }
        }
    }

#pragma GCC unroll 16
    for (t = 0; t < 16; t++) {
        _mm512_mask_storeu_ps(y + t * ldy, mask, acc[t]);
    }
}


/* kvs_cpu_qla_rows for Q8_0: the tokens of each whole 16 on the tiles,
 * the rest (and every token when n < 16) by kvs_cpu_q8p_rows_avx512. */
KVS_QLA_INLINE void
kvs_q8a_rows(float *y, size_t ldy, const kvs_cpu_mat_t *w, uint32_t g,
    const kvs_cpu_q8a_t *xa, const kvs_cpu_q8_t *xq, uint32_t n,
    void *scratch)
{
    uint32_t           i, nb;
    __mmask16          mask;
    kvs_cpu_tilecfg_t  cfg;

    nb = w->cols / 32;
    i = 0;

    if (n >= 16) {
        mask = kvs_cpu_pack_mask(w, g);
        kvs_q8a_unpack(w, g, nb, scratch);
        kvs_qla_config(&cfg);

        for ( /* void */ ; i + 16 <= n; i += 16) {
            kvs_q8a_tile16(y + (size_t) g * KVS_CPU_Q8P_ROWS + i * ldy, ldy,
                           scratch, xa + (size_t) (i / 16) * nb, nb, mask);
        }

        _tile_release();
    }

    if (i < n) {
        kvs_cpu_q8p_rows_avx512(y + i * ldy, ldy, w, g, xq + (size_t) i * nb,
                                n - i);
    }
}


__attribute__((target(KVS_QLA_TARGET))) void
kvs_cpu_qla_rows(float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8a_t *xa, const kvs_cpu_q8_t *xq, uint32_t n,
    void *scratch)
{
    if (w->type == KVS_GGML_Q8_0) {
        kvs_q8a_rows(y, ldy, w, g, xa, xq, n, scratch);
        return;
    }

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


/* Q4_K's tiles: the sums of the low and high scale parts (C 16 x 16
 * int32), the tokens' bytes (A 16 x 64), the two parts' levels (B 16 x
 * 64), and for the mins a float C, a BF16 A (16 x 32 bytes) and B (8 x
 * 64). */
#define KVS_QKA_CL  0
#define KVS_QKA_CH  1
#define KVS_QKA_CM  2
#define KVS_QKA_A   3
#define KVS_QKA_BL  4
#define KVS_QKA_BH  5
#define KVS_QKA_AM  6
#define KVS_QKA_BM  7


KVS_QLA_INLINE void
kvs_qka_config(kvs_cpu_tilecfg_t *cfg)
{
    uint32_t  t;

    memset(cfg, 0, sizeof(*cfg));
    cfg->palette = 1;
    for (t = 0; t < 8; t++) {
        cfg->rows[t] = 16;
        cfg->colsb[t] = 64;
    }
    cfg->rows[KVS_QKA_BM] = 8;
    cfg->colsb[KVS_QKA_AM] = 32;

    __asm__ volatile ("" : : "m" (*cfg) : "memory");
    _tile_loadconfig(cfg);
}


/* Q4_K group g of w unpacked into s (kvs_cpu_qkp_fill's records). */
KVS_QLA_INLINE void
kvs_qka_unpack(const kvs_cpu_mat_t *w, uint32_t g, uint32_t nsb,
    uint8_t *s)
{
    uint8_t        *o;
    uint16_t        mb[32];
    uint32_t        b, c, k, j, rec;
    __m512i         v, m4, sc, lo[8], hi[8];
    const uint8_t  *r;

    rec = kvs_cpu_qkp_rec(KVS_GGML_Q4_K);
    m4 = _mm512_set1_epi8(0x0f);

    for (b = 0; b < nsb; b++) {
        r = (const uint8_t *) w->pack + ((size_t) g * nsb + b) * rec;
        o = s + (size_t) b * KVS_QKA_SREC;

        /* sub-block j's scale parts, row r's in both 16-bit words of lane
         * r: a word of two levels times it keeps each byte's product
         * (at most 105) in its byte */
        for (j = 0; j < 8; j++) {
            sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)
                                                      (r + 16 * j)));
            lo[j] = _mm512_and_si512(sc, _mm512_set1_epi32(7));
            hi[j] = _mm512_srli_epi32(sc, 3);
            lo[j] = _mm512_or_si512(lo[j], _mm512_slli_epi32(lo[j], 16));
            hi[j] = _mm512_or_si512(hi[j], _mm512_slli_epi32(hi[j], 16));
        }

        /* vector (c, k): low nibbles are row k of tile c, high nibbles
         * its row 8 + k */
        for (c = 0; c < 4; c++) {
#pragma GCC unroll 8
            for (k = 0; k < 8; k++) {
                v = _mm512_loadu_si512((const void *)
                        (r + KVS_CPU_QKP_HEAD + 64 * (8 * c + k)));
                _mm512_storeu_si512((void *) (o + 1024 * c + 64 * k),
                    _mm512_mullo_epi16(_mm512_and_si512(v, m4),
                                       lo[2 * c]));
                _mm512_storeu_si512((void *) (o + KVS_QKA_HI + 1024 * c
                                              + 64 * k),
                    _mm512_mullo_epi16(_mm512_and_si512(v, m4),
                                       hi[2 * c]));
                v = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                _mm512_storeu_si512((void *) (o + 1024 * c + 512 + 64 * k),
                    _mm512_mullo_epi16(v, lo[2 * c + 1]));
                _mm512_storeu_si512((void *) (o + KVS_QKA_HI + 1024 * c
                                              + 512 + 64 * k),
                    _mm512_mullo_epi16(v, hi[2 * c + 1]));
            }
        }

        /* the mins, as BF16 (at most 63: exact): pair row k holds, for
         * each weight row, the mins of sub-blocks 2 k % 8 and (2 k + 1)
         * % 8, as A's columns 2 k and 2 k + 1 hold those sub-blocks'
         * sums (their high parts for k < 4, their low parts after) */
        for (k = 0; k < 8; k++) {
            for (c = 0; c < 16; c++) {
                mb[2 * c] = kvs_f32_to_bf16(r[KVS_CPU_QKP_Q45_M
                                              + 16 * (2 * k % 8) + c]);
                mb[2 * c + 1] = kvs_f32_to_bf16(r[KVS_CPU_QKP_Q45_M
                                                  + 16 * ((2 * k + 1) % 8)
                                                  + c]);
            }
            memcpy(o + KVS_QKA_M + 64 * k, mb, 64);
        }

        _mm512_storeu_ps(o + KVS_QKA_D, _mm512_cvtph_ps(_mm256_loadu_si256(
            (const __m256i *) (r + KVS_CPU_QKP_D))));
        _mm512_storeu_ps(o + KVS_QKA_DMIN, _mm512_cvtph_ps(
            _mm256_loadu_si256((const __m256i *) (r + KVS_CPU_QKP_DMIN))));
    }
}


/*
 * acc[t] + one super-block's float steps for the 16 tokens of xa, from
 * the sums of its two scale parts cl[t], ch[t] and the unpacked
 * super-block o: kvs_cpu_qk_acc_min's, lane for lane.  isum = cl + 8 ch
 * exactly in int32 (at most 256 * 15 * 63 * 127 < 2^25), converted once
 * as the portable kernel converts it.  msum came whole from a BF16 tile
 * product (cm[t]): its terms are integers below 2^18 and their sums below
 * 2^21, so every step of it is exact too.
 */
KVS_QLA_INLINE void
kvs_qka_fold16(__m512 *acc, const int32_t (*cl)[16],
    const int32_t (*ch)[16], const float (*cm)[16], const uint8_t *o,
    const kvs_cpu_q8ka_t *xa)
{
    uint32_t  t;
    __m512    d, dm, dx, h;

    d = _mm512_loadu_ps(o + KVS_QKA_D);
    dm = _mm512_loadu_ps(o + KVS_QKA_DMIN);

#pragma GCC unroll 16
    for (t = 0; t < 16; t++) {
        h = _mm512_cvtepi32_ps(_mm512_add_epi32(
                _mm512_load_si512((const void *) cl[t]),
                _mm512_slli_epi32(_mm512_load_si512((const void *) ch[t]),
                                  3)));
        dx = _mm512_set1_ps(xa->d[t]);
        acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_mul_ps(d, dx),
                                                     h));
        acc[t] = _mm512_sub_ps(acc[t], _mm512_mul_ps(_mm512_mul_ps(dm, dx),
                                                     _mm512_load_ps(cm[t])));
    }
}


/*
 * Q4_K: 16 tokens (xa: their nsb super-blocks) by the group's 16 rows,
 * unpacked in s: y[t * ldy + r] for the rows in mask.  A super-block's 8
 * int8 tile products into two sums and one BF16 product for the mins,
 * then the previous one's float steps.
 */
KVS_QLA_INLINE void
kvs_qka_tile16(float *y, size_t ldy, const uint8_t *s,
    const kvs_cpu_q8ka_t *xa, uint32_t nsb, __mmask16 mask)
{
    uint32_t        b, c, t;
    __m512          acc[16];
    const uint8_t  *o;
    int32_t         cbuf[2][2][16][16] __attribute__((aligned(64)));
    float           mbuf[2][16][16] __attribute__((aligned(64)));

#pragma GCC unroll 16
    for (t = 0; t < 16; t++) {
        acc[t] = _mm512_setzero_ps();
    }

    for (b = 0; b <= nsb; b++) {
        if (b < nsb) {
            o = s + (size_t) b * KVS_QKA_SREC;


            _tile_zero(KVS_QKA_CL);
            _tile_zero(KVS_QKA_CH);
            _tile_zero(KVS_QKA_CM);

#pragma GCC unroll 4
            for (c = 0; c < 4; c++) {
                _tile_loadd(KVS_QKA_A, xa[b].q[c], 64);
                _tile_loadd(KVS_QKA_BL, o + 1024 * c, 64);
                _tile_loadd(KVS_QKA_BH, o + KVS_QKA_HI + 1024 * c, 64);
                _tile_dpbssd(KVS_QKA_CL, KVS_QKA_A, KVS_QKA_BL);
                _tile_dpbssd(KVS_QKA_CH, KVS_QKA_A, KVS_QKA_BH);
            }

            /* msum, in floats: the tokens' sums by the rows' mins */
            _tile_loadd(KVS_QKA_AM, xa[b].bs, 32);
            _tile_loadd(KVS_QKA_BM, o + KVS_QKA_M, 64);
            _tile_dpbf16ps(KVS_QKA_CM, KVS_QKA_AM, KVS_QKA_BM);

            _tile_stored(KVS_QKA_CL, cbuf[b & 1][0], 16 * sizeof(int32_t));
            _tile_stored(KVS_QKA_CH, cbuf[b & 1][1], 16 * sizeof(int32_t));
            _tile_stored(KVS_QKA_CM, mbuf[b & 1], 16 * sizeof(float));
        }

        if (b >= 1) {
            kvs_qka_fold16(acc, cbuf[(b - 1) & 1][0], cbuf[(b - 1) & 1][1],
                           mbuf[(b - 1) & 1],
                           s + (size_t) (b - 1) * KVS_QKA_SREC, xa + b - 1);
        }
    }

    for (t = 0; t < 16; t++) {
        _mm512_mask_storeu_ps(y + t * ldy, mask, acc[t]);
    }
}


__attribute__((target(KVS_QLA_TARGET))) void
kvs_cpu_qka_rows(float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8ka_t *xa, const kvs_cpu_q8k_t *xk,
    uint32_t n, void *scratch)
{
    uint32_t           i, nsb;
    __mmask16          mask;
    kvs_cpu_tilecfg_t  cfg;

    nsb = w->cols / 256;
    i = 0;

    if (n >= 16) {
        mask = kvs_cpu_pack_mask(w, g);
        kvs_qka_unpack(w, g, nsb, scratch);
        kvs_qka_config(&cfg);

        for ( /* void */ ; i + 16 <= n; i += 16) {
            kvs_qka_tile16(y + (size_t) g * KVS_CPU_Q8P_ROWS + i * ldy, ldy,
                           scratch, xa + (size_t) (i / 16) * nsb, nsb, mask);
        }

        _tile_release();
    }

    if (i < n) {
        kvs_cpu_qkp_rows_avx512(y + i * ldy, ldy, w, g,
                                xk + (size_t) i * nsb, n - i);
    }
}

#endif /* KVS_CPU_X86 */
