/*
 * kvs_cpu_amx_x86: the Q8_0 product on AMX tiles, to the bits of
 * kvs_cpu_ql.c's portable kernel.  Runs only at KVS_CPU_SIMD_AMX
 * (kvs_cpu_amx.c decided the CPU, the OS and Linux's permission).
 *
 * Weights: Q8_0 matrices packed at load by kvs_cpu_q8p_fill (the
 * AVX-512 VNNI kernel's layout, which is already AMX's B-tile layout):
 * per group of 16 rows and block of 32 columns, 512 bytes = 8 rows of 64
 * bytes, row k holding bytes 4k .. 4k + 3 of each of the 16 weight rows
 * plus 128 (unsigned), then elsewhere the 16 rows' f16 scales.  Input:
 * the kvs_cpu_q8_t blocks as quantized, read in place (a token's block b
 * is 32 bytes at a stride of the token's blocks).
 *
 * Per 16 tokens (tile rows; fewer for the last ones) and block b:
 *   C  = 0                                   TILEZERO
 *   A  = the tokens' q of block b            TILELOADD, mt x 32 bytes
 *   B  = the group's packed block b          TILELOADD, 8 x 64 bytes
 *   C += A . B                               TDPBSUD (signed A,
 *                                            unsigned B): C[m][r] =
 *        sum q_x (q_w + 128) = isum - c, exact in int32
 *   C  -> memory                             TILESTORED
 * then, per token m, the portable kernel's float steps in 16 lanes (lane
 * r = weight row r): isum = C[m] + c_m, t = (d_w * d_x) * (float) isum,
 * acc[m][b % 8] += t; after the last block the same tree of the eight
 * accumulators.  The int32 sums are exact and each float operation is
 * the portable one (no contraction in this file), so the output is its
 * bits for every row, token and batch, whatever the K (any multiple of
 * 32 columns: one block per tile product) and the row or token count
 * (rows past the matrix are zero weights, never stored; the last tokens
 * take a tile configuration of fewer rows).
 *
 * The tile operations are the _tile_* intrinsics.  t/unit/test_cpu_amx.c
 * compiles this file a second time, with KVS_CPU_AMX_EMU defined after
 * its header that replaces them by a C emulation, and checks the result
 * against the portable kernel bit for bit on hosts without AMX; this
 * build has never run on AMX hardware (docs/quantization.md).
 */

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

#include <string.h>

#include "model/kvs_dtype.h"
#include "kvs_cpu_amx.h"
#include "kvs_cpu_qdot.h"

#if KVS_CPU_X86

#include <immintrin.h>

#define KVS_AMX_VEC  "avx512f,avx512bw,avx512vl,avx2,fma,f16c"

#ifdef KVS_CPU_AMX_EMU
/* the test included its emulation of the _tile_* operations first */
#define KVS_AMX_TARGET  KVS_AMX_VEC
#else
#define KVS_AMX_TARGET  "amx-tile,amx-int8," KVS_AMX_VEC
#endif

/* the tiles: C (int32 sums), A (the tokens' bytes), B (the weights') */
#define KVS_AMX_TC  0
#define KVS_AMX_TA  1
#define KVS_AMX_TB  2


/* The configuration for mt (1..16) tokens, loaded into this thread. */
__attribute__((target(KVS_AMX_TARGET))) static void
kvs_cpu_amx_config(kvs_cpu_tilecfg_t *cfg, uint32_t mt)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->palette = 1;
    cfg->rows[KVS_AMX_TC] = (uint8_t) mt;
    cfg->colsb[KVS_AMX_TC] = 16 * sizeof(int32_t);
    cfg->rows[KVS_AMX_TA] = (uint8_t) mt;
    cfg->colsb[KVS_AMX_TA] = KVS_Q8_0_BLOCK;
    cfg->rows[KVS_AMX_TB] = KVS_Q8_0_BLOCK / 4;
    cfg->colsb[KVS_AMX_TB] = KVS_CPU_Q8P_ROWS * 4;

    /* gcc's ldtilecfg names only the first 8 bytes as its input: the
     * rest must be in memory before it */
    __asm__ volatile ("" : : "m" (*cfg) : "memory");
    _tile_loadconfig(cfg);
}


__attribute__((target(KVS_AMX_TARGET))) void
kvs_cpu_amx_q8_rows(float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8_t *xq, uint32_t n)
{
    size_t               nb, b, xs;
    uint32_t             i0, mt, cur, m;
    __m512               dw, t, a[8];
    __m512i              s;
    __mmask16            mask;
    const uint8_t       *wq;
    const uint16_t      *wd;
    kvs_cpu_tilecfg_t    cfg;
    const kvs_cpu_q8_t  *xb;
    int32_t              isum[16][16] __attribute__((aligned(64)));
    float                acc[16][8][16] __attribute__((aligned(64)));

    nb = w->cols / KVS_Q8_0_BLOCK;
    wq = kvs_cpu_q8p_group(w, g, &wd);
    mask = kvs_cpu_pack_mask(w, g);
    y += (size_t) g * KVS_CPU_Q8P_ROWS;
    xs = nb * sizeof(kvs_cpu_q8_t);
    cur = 0;

    for (i0 = 0; i0 < n; i0 += mt) {
        mt = n - i0 < 16 ? n - i0 : 16;

        if (mt != cur) {
            kvs_cpu_amx_config(&cfg, mt);
            cur = mt;
        }

        for (m = 0; m < mt; m++) {
            for (b = 0; b < 8; b++) {
                _mm512_store_ps(acc[m][b], _mm512_setzero_ps());
            }
        }

        for (b = 0; b < nb; b++) {
            _tile_zero(KVS_AMX_TC);
            _tile_loadd(KVS_AMX_TA, xq[(size_t) i0 * nb + b].q, xs);
            _tile_loadd(KVS_AMX_TB, wq + b * KVS_CPU_Q8P_BYTES,
                        KVS_CPU_Q8P_ROWS * 4);
            _tile_dpbsud(KVS_AMX_TC, KVS_AMX_TA, KVS_AMX_TB);
            _tile_stored(KVS_AMX_TC, isum, 16 * sizeof(int32_t));

            dw = _mm512_cvtph_ps(_mm256_loadu_si256(
                     (const __m256i *) (wd + b * KVS_CPU_Q8P_ROWS)));

            for (m = 0; m < mt; m++) {
                xb = &xq[(size_t) (i0 + m) * nb + b];
                s = _mm512_add_epi32(_mm512_load_si512(isum[m]),
                                     _mm512_set1_epi32(xb->c));
                t = _mm512_mul_ps(dw, _mm512_set1_ps(xb->d));
                t = _mm512_mul_ps(t, _mm512_cvtepi32_ps(s));
                _mm512_store_ps(acc[m][b & 7],
                                _mm512_add_ps(_mm512_load_ps(acc[m][b & 7]),
                                              t));
            }
        }

        for (m = 0; m < mt; m++) {
            for (b = 0; b < 8; b++) {
                a[b] = _mm512_load_ps(acc[m][b]);
            }

            t = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[4]),
                                            _mm512_add_ps(a[2], a[6])),
                              _mm512_add_ps(_mm512_add_ps(a[1], a[5]),
                                            _mm512_add_ps(a[3], a[7])));
            _mm512_mask_storeu_ps(y + (size_t) (i0 + m) * ldy, mask, t);
        }
    }

    _tile_release();
}

#endif /* KVS_CPU_X86 */
