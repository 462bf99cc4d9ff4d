/*
 * kvs_cpu_amxb_x86: F16 and BF16 products of KVS_CPU_BLAS_MIN tokens or
 * more on AMX-BF16 tiles (TDPBF16PS), on hosts where kvs_cpu_amx.c found
 * AMX-BF16 (kvs_cpu_amxb_on: by default; KVSERVE_CPU_GEMM=avx2 keeps the
 * F32 kernels).
 *
 *   y[i][r] = x[i] . w[r]   for i < n tokens, r < nr rows of one task
 *
 * Numerics.  A tile product multiplies pairs of BF16 numbers and adds
 * them in FP32.  To keep the F32 product's accuracy, not BF16's, each
 * input is split once per product into two BF16 numbers, x = xh + xl
 * (xh: x rounded to nearest even; xl: the rest, rounded: 16 significant
 * bits of x), and an F16 weight into wh + wl exactly (wh: 8 of its 11
 * significant bits, wl: the remaining 3 or 4).  A BF16 weight is wh.
 * Per 32 columns (one tile product each), in this order:
 *     C += xh . wh,   C += xl . wh,   and for F16   C += xh . wl
 * (xl . wl, under 2^-17 of a product, is left out).  Each product of
 * two BF16 numbers is exact in FP32; the sums round, as in the F32
 * kernels, so a result is within a few 2^-17 relative of the F32
 * product, not bit-equal to it.
 *
 * Invariant: an output's sums stay in its tile from the first column to
 * the last, always the same sequence of tile products over its own row
 * and input, so its bits depend on neither n, nor the tile's other rows
 * or tokens, nor the thread: a token's results are the same in any batch
 * of KVS_CPU_BLAS_MIN tokens or more.  (Below that the 4-row F32 kernels
 * run; they differ from these in the last bits, as sgemm's did.)
 * kvs_cpu_amxb_ref states the same products in C after the instruction's
 * definition in Intel's SDM (per row: even and odd pair halves summed
 * apart over the 16 pairs, with denormal inputs read as zero and
 * denormal results flushed, then their sum added to C); test_cpu_amx
 * holds the emulated tiles to it bit for bit, and the real ones to a
 * bound (on the one AMX host measured, 2026-12-04, the real tiles gave
 * the statement's bits for every output).
 *
 * Layout (per task, in the thread's weight scratch): the task's rows in
 * groups of 16 (the last padded with zero rows, and an even number of
 * groups), each group a panel of [cols / 2][16] dwords, dword (k, r) =
 * row r's columns 2k and 2k + 1 as BF16 (low half first): 32 columns are
 * 16 panel rows of 64 bytes, one B tile.  For F16 the wl panels follow
 * the wh panels.  Inputs: xh and xl [n][cols] BF16, a token's 32 columns
 * one A tile row.  Tiles: C00 C01 C10 C11 (tokens 0-15 / 16-31 of a
 * pass, by groups 2p / 2p + 1), A0 A1 (the tokens' halves), B0 B1 (the
 * two groups).
 */

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

#include <float.h>
#include <math.h>
#include <string.h>

#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "kvs_cpu_amx.h"


/* kvs_dtype.c's kvs_f32_to_bf16 and kvs_bf16_to_f32, the same bits,
 * inline here: the split runs on every input of every product. */

/* x as BF16, rounded to nearest even (NaN stays a NaN) */
static uint16_t
kvs_amxb_round(float x)
{
    uint32_t  u;

    memcpy(&u, &x, 4);

    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t) ((u >> 16) | 0x40);
    }

    return (uint16_t) ((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}


static float
kvs_amxb_f32(uint16_t h)
{
    float     f;
    uint32_t  u;

    u = (uint32_t) h << 16;
    memcpy(&f, &u, 4);

    return f;
}


void
kvs_cpu_bf16_split(const float *x, uint16_t *xh, uint16_t *xl,
    uint32_t cols)
{
    float     r;
    uint32_t  j;

    for (j = 0; j < cols; j++) {
        xh[j] = kvs_amxb_round(x[j]);
        r = x[j] - kvs_amxb_f32(xh[j]);

        /* an infinity's rest is a NaN: it has none */
        xl[j] = isfinite(r) ? kvs_amxb_round(r) : 0;
    }
}


/* The instruction's rules: a denormal input reads as zero, a denormal
 * result is flushed (sign kept). */
static float
kvs_amxb_daz(uint16_t h)
{
    return (h & 0x7f80u) == 0 ? 0.0f : kvs_amxb_f32(h);
}


static float
kvs_amxb_ftz(float f)
{
    return fabsf(f) < FLT_MIN ? copysignf(0.0f, f) : f;
}


/* Weight (row r, column c) of an F16 / BF16 matrix, split: *lo is 0 for
 * BF16. */
static uint16_t
kvs_amxb_weight(const kvs_cpu_mat_t *w, uint32_t r, uint32_t c,
    uint16_t *lo)
{
    float            f;
    uint16_t         h, hi;
    const uint16_t  *row;

    row = (const uint16_t *) ((const uint8_t *) w->data
                              + (size_t) r * w->row_bytes);
    h = row[c];

    if (w->type == KVS_GGML_BF16) {
        *lo = 0;
        return h;
    }

    f = kvs_f16_to_f32(h);
    hi = kvs_amxb_round(f);
    *lo = kvs_amxb_round(f - kvs_amxb_f32(hi));

    return hi;
}


/* The portable statement of the tile kernel's product, to the bit (on
 * the emulated tiles; the real ones are held to a bound): rows r0 ..
 * r0 + nr of w (F16 or BF16, cols a multiple of 32) for n tokens of
 * x [n][cols]. */
void
kvs_cpu_amxb_ref(float *y, size_t ldy, const float *x, uint32_t n,
    const kvs_cpu_mat_t *w, uint32_t r0, uint32_t nr)
{
    int       pass, passes;
    float     acc, te, to, a0, a1, b0, b1;
    uint16_t  wh[32], wl[32], xh[32], xl[32], ah, al;
    uint32_t  i, r, s, k, c;

    passes = w->type == KVS_GGML_F16 ? 3 : 2;

    for (i = 0; i < n; i++) {
        for (r = r0; r < r0 + nr; r++) {
            acc = 0.0f;

            for (s = 0; s < w->cols; s += 32) {
                kvs_cpu_bf16_split(x + (size_t) i * w->cols + s, xh, xl, 32);

                for (c = 0; c < 32; c++) {
                    wh[c] = kvs_amxb_weight(w, r, s + c, &wl[c]);
                }

                for (pass = 0; pass < passes; pass++) {
                    te = 0.0f;
                    to = 0.0f;

                    for (k = 0; k < 16; k++) {
                        ah = pass == 1 ? xl[2 * k] : xh[2 * k];
                        al = pass == 1 ? xl[2 * k + 1] : xh[2 * k + 1];
                        a0 = kvs_amxb_daz(ah);
                        a1 = kvs_amxb_daz(al);
                        b0 = kvs_amxb_daz(pass == 2 ? wl[2 * k] : wh[2 * k]);
                        b1 = kvs_amxb_daz(pass == 2 ? wl[2 * k + 1]
                                                    : wh[2 * k + 1]);
                        te = kvs_amxb_ftz(fmaf(a0, b0, te));
                        to = kvs_amxb_ftz(fmaf(a1, b1, to));
                    }

                    acc = kvs_amxb_ftz(acc + kvs_amxb_ftz(te + to));
                }
            }

            y[(size_t) i * ldy + (r - r0)] = acc;
        }
    }
}


#if KVS_CPU_X86

#include <immintrin.h>

#define KVS_AMXB_VEC  "avx512f,avx512bw,avx512vl,avx2,fma,f16c"

#ifdef KVS_CPU_AMX_EMU
#define KVS_AMXB_TARGET  KVS_AMXB_VEC
#else
#define KVS_AMXB_TARGET  "amx-tile,amx-bf16," KVS_AMXB_VEC
#endif

#define KVS_AMXB_C00  0
#define KVS_AMXB_C01  1
#define KVS_AMXB_C10  2
#define KVS_AMXB_C11  3
#define KVS_AMXB_A0   4
#define KVS_AMXB_A1   5
#define KVS_AMXB_B0   6
#define KVS_AMXB_B1   7


/* 16 lanes of BF16 (the low half of each dword) rounded from f, to
 * nearest even, kvs_amxb_round's bits (a NaN stays a NaN) */
__attribute__((target(KVS_AMXB_VEC))) static __m512i
kvs_amxb_round16(__m512 f)
{
    __m512i    u, lsb, r;
    __mmask16  nan;

    u = _mm512_castps_si512(f);
    lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb,
                              _mm512_set1_epi32(0x7fff))), 16);
    nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);

    return _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16),
                                _mm512_set1_epi32(0x40));
}


/*
 * The task's panels: group g (rows r0 + 16 g ..), pair k: one gather of
 * the 16 rows' dword k (masked: rows past nr are zero).  F16 pairs are
 * split here into wh and wl, each exact.
 */
__attribute__((target(KVS_AMXB_VEC))) static void
kvs_amxb_pack(uint32_t *ph, uint32_t *pl, const kvs_cpu_mat_t *w,
    uint32_t r0, uint32_t nr, uint32_t groups)
{
    size_t          half;
    uint32_t        g, k, live;
    __m512i         idx, d, eh, oh, el, ol;
    __m512          e, o;
    __mmask16       mask;
    const uint8_t  *base;

    half = w->cols / 2;
    idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8,
                                               9, 10, 11, 12, 13, 14, 15),
                             _mm512_set1_epi32((int) w->row_bytes));

    for (g = 0; g < groups; g++) {
        live = nr > 16 * g ? nr - 16 * g : 0;
        live = live > 16 ? 16 : live;
        mask = (__mmask16) ((1u << live) - 1);
        base = (const uint8_t *) w->data
               + (size_t) (r0 + 16 * g) * w->row_bytes;

        for (k = 0; k < half; k++) {
            d = live == 0 ? _mm512_setzero_si512()
                : _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask,
                                              idx, base + 4 * k, 1);

            if (w->type == KVS_GGML_BF16) {
                _mm512_storeu_si512(ph + ((size_t) g * half + k) * 16, d);
                continue;
            }

            e = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d));
            o = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(
                    _mm512_srli_epi32(d, 16)));
            eh = kvs_amxb_round16(e);
            oh = kvs_amxb_round16(o);
            el = kvs_amxb_round16(_mm512_sub_ps(e, _mm512_castsi512_ps(
                     _mm512_slli_epi32(eh, 16))));
            ol = kvs_amxb_round16(_mm512_sub_ps(o, _mm512_castsi512_ps(
                     _mm512_slli_epi32(oh, 16))));
            _mm512_storeu_si512(ph + ((size_t) g * half + k) * 16,
                                _mm512_or_si512(eh,
                                                _mm512_slli_epi32(oh, 16)));
            _mm512_storeu_si512(pl + ((size_t) g * half + k) * 16,
                                _mm512_or_si512(el,
                                                _mm512_slli_epi32(ol, 16)));
        }
    }
}


/* The configuration for m0 (1..16) and m1 (0..16) tokens, loaded into
 * this thread; with m1 = 0 the second half's tiles stay unconfigured. */
__attribute__((target(KVS_AMXB_TARGET))) static void
kvs_amxb_config(kvs_cpu_tilecfg_t *cfg, uint32_t m0, uint32_t m1)
{
    int  t;

    memset(cfg, 0, sizeof(*cfg));
    cfg->palette = 1;

    for (t = 0; t < 8; t++) {
        cfg->colsb[t] = 64;
    }

    cfg->rows[KVS_AMXB_C00] = (uint8_t) m0;
    cfg->rows[KVS_AMXB_C01] = (uint8_t) m0;
    cfg->rows[KVS_AMXB_A0] = (uint8_t) m0;
    cfg->rows[KVS_AMXB_B0] = 16;
    cfg->rows[KVS_AMXB_B1] = 16;

    if (m1 != 0) {
        cfg->rows[KVS_AMXB_C10] = (uint8_t) m1;
        cfg->rows[KVS_AMXB_C11] = (uint8_t) m1;
        cfg->rows[KVS_AMXB_A1] = (uint8_t) m1;
    } else {
        cfg->colsb[KVS_AMXB_C10] = 0;
        cfg->colsb[KVS_AMXB_C11] = 0;
        cfg->colsb[KVS_AMXB_A1] = 0;
    }

    __asm__ volatile ("" : : "m" (*cfg) : "memory");
    _tile_loadconfig(cfg);
}


/* One C tile (mt tokens x 16 rows) to y: in place when its 16 rows are
 * the task's, else through tmp and only the live rows. */
__attribute__((target(KVS_AMXB_TARGET))) static void
kvs_amxb_store(int tile, float *y, size_t ldy, uint32_t mt, uint32_t live,
    float (*tmp)[16])
{
    uint32_t  m;

    if (live == 0) {
        return;
    }

    if (live == 16) {
        switch (tile) {
        case KVS_AMXB_C00:
            _tile_stored(KVS_AMXB_C00, y, ldy * sizeof(float));
            break;
        case KVS_AMXB_C01:
            _tile_stored(KVS_AMXB_C01, y, ldy * sizeof(float));
            break;
        case KVS_AMXB_C10:
            _tile_stored(KVS_AMXB_C10, y, ldy * sizeof(float));
            break;
        default:
            _tile_stored(KVS_AMXB_C11, y, ldy * sizeof(float));
            break;
        }
        return;
    }

    switch (tile) {
    case KVS_AMXB_C00:
        _tile_stored(KVS_AMXB_C00, tmp, 16 * sizeof(float));
        break;
    case KVS_AMXB_C01:
        _tile_stored(KVS_AMXB_C01, tmp, 16 * sizeof(float));
        break;
    case KVS_AMXB_C10:
        _tile_stored(KVS_AMXB_C10, tmp, 16 * sizeof(float));
        break;
    default:
        _tile_stored(KVS_AMXB_C11, tmp, 16 * sizeof(float));
        break;
    }

    for (m = 0; m < mt; m++) {
        memcpy(y + (size_t) m * ldy, tmp[m], live * sizeof(float));
    }
}


/* C0x += the first m0 tokens' A . B0 / B1, and C1x the next m1's (a:
 * their 32 columns, one token every xs bytes, the second half next rows
 * on); B0 and B1 are loaded. */
__attribute__((target(KVS_AMXB_TARGET))) static inline void
kvs_amxb_dp(const uint16_t *a, size_t xs, size_t next, uint32_t m1)
{
    _tile_loadd(KVS_AMXB_A0, a, xs);
    _tile_dpbf16ps(KVS_AMXB_C00, KVS_AMXB_A0, KVS_AMXB_B0);
    _tile_dpbf16ps(KVS_AMXB_C01, KVS_AMXB_A0, KVS_AMXB_B1);

    if (m1 != 0) {
        _tile_loadd(KVS_AMXB_A1, a + next, xs);
        _tile_dpbf16ps(KVS_AMXB_C10, KVS_AMXB_A1, KVS_AMXB_B0);
        _tile_dpbf16ps(KVS_AMXB_C11, KVS_AMXB_A1, KVS_AMXB_B1);
    }
}


__attribute__((target(KVS_AMXB_TARGET))) void
kvs_cpu_amxb_rows(float *y, size_t ldy, const uint16_t *xh,
    const uint16_t *xl, uint32_t n, const kvs_cpu_mat_t *w, uint32_t r0,
    uint32_t nr, void *scratch)
{
    int                 f16;
    size_t              half, xs, ps;
    uint32_t            groups, p, s, i0, mt, m0, m1, cur, live0, live1;
    uint32_t           *ph, *pl;
    const uint8_t      *b0;
    const uint16_t     *ah, *al;
    kvs_cpu_tilecfg_t   cfg;
    float               tmp[16][16] __attribute__((aligned(64)));

    f16 = w->type == KVS_GGML_F16;
    half = w->cols / 2;
    groups = ((nr + 31) / 32) * 2;
    ph = scratch;
    pl = ph + (size_t) groups * half * 16;
    kvs_amxb_pack(ph, pl, w, r0, nr, groups);

    xs = (size_t) w->cols * sizeof(uint16_t);   /* an A tile's stride */
    ps = half * 64;                             /* a panel's bytes */
    cur = 0;

    for (i0 = 0; i0 < n; i0 += 32) {
        mt = n - i0 < 32 ? n - i0 : 32;
        m0 = mt < 16 ? mt : 16;
        m1 = mt - m0;

        if ((m0 | m1 << 8) != cur) {
            kvs_amxb_config(&cfg, m0, m1);
            cur = m0 | m1 << 8;
        }

        for (p = 0; p < groups / 2; p++) {
            _tile_zero(KVS_AMXB_C00);
            _tile_zero(KVS_AMXB_C01);

            if (m1 != 0) {
                _tile_zero(KVS_AMXB_C10);
                _tile_zero(KVS_AMXB_C11);
            }

            for (s = 0; s < w->cols / 32; s++) {
                ah = xh + (size_t) i0 * w->cols + 32 * s;
                al = xl + (size_t) i0 * w->cols + 32 * s;
                b0 = (const uint8_t *) ph + 2 * p * ps + s * 1024;

                /* C += xh . wh, then xl . wh */
                _tile_loadd(KVS_AMXB_B0, b0, 64);
                _tile_loadd(KVS_AMXB_B1, b0 + ps, 64);
                kvs_amxb_dp(ah, xs, 16 * (size_t) w->cols, m1);
                kvs_amxb_dp(al, xs, 16 * (size_t) w->cols, m1);

                if (f16) {
                    /* C += xh . wl */
                    b0 = (const uint8_t *) pl + 2 * p * ps + s * 1024;
                    _tile_loadd(KVS_AMXB_B0, b0, 64);
                    _tile_loadd(KVS_AMXB_B1, b0 + ps, 64);
                    kvs_amxb_dp(ah, xs, 16 * (size_t) w->cols, m1);
                }
            }

            live0 = nr > 32 * p ? nr - 32 * p : 0;
            live0 = live0 > 16 ? 16 : live0;
            live1 = nr > 32 * p + 16 ? nr - 32 * p - 16 : 0;
            live1 = live1 > 16 ? 16 : live1;

            kvs_amxb_store(KVS_AMXB_C00, y + (size_t) i0 * ldy + 32 * p,
                           ldy, m0, live0, tmp);
            kvs_amxb_store(KVS_AMXB_C01, y + (size_t) i0 * ldy + 32 * p + 16,
                           ldy, m0, live1, tmp);

            if (m1 != 0) {
                kvs_amxb_store(KVS_AMXB_C10,
                               y + (size_t) (i0 + 16) * ldy + 32 * p, ldy,
                               m1, live0, tmp);
                kvs_amxb_store(KVS_AMXB_C11,
                               y + (size_t) (i0 + 16) * ldy + 32 * p + 16,
                               ldy, m1, live1, tmp);
            }
        }
    }

    _tile_release();
}

#endif /* KVS_CPU_X86 */
