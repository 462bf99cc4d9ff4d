/*
 * kvs_cpu_gemm_x86: the CPU backend's own batched F32 product for
 * prefill chunks and large decode batches (KVS_CPU_BLAS_MIN tokens on),
 * AVX2 + FMA, so that the speed of a prefill does not depend on whether
 * the BLAS library recognises this CPU.
 *
 *   y[i][r] = x[i] . w[r]   for i < n tokens, r < nr rows of one tile
 *
 * The weights' tile is packed a panel of 16 rows by KVS_CPU_GEMM_KC
 * columns at a time into a [kc][16] block on the stack (L1), transposed
 * 8 x 8 with shuffles; each panel then meets the tokens 6 at a time in a
 * 6 x 16 register tile: per column k, two weight vectors, six broadcast
 * inputs, twelve FMAs.  kvs_cpu_gemm_avx512 runs the same loop nest on
 * panels of 32 rows and a 12 x 32 tile of 512-bit vectors (opt-in:
 * KVSERVE_CPU_GEMM=avx512, kvs_cpu_mm.c).
 *
 * Invariant: every output is one FMA chain over k = 0 .. cols - 1 in
 * order (the tile's accumulators are reloaded from y between column
 * blocks, and nothing else adds to them), so its bits depend only on
 * its own row and input: not on n, the tile, the block sizes or the
 * thread.  A token's results are therefore the same alone or batched,
 * and equal to kvs_cpu_gemm_ref()'s fmaf chain.
 */

#include <math.h>
#include <string.h>

#include "kvs_cpu_impl.h"

#define KVS_CPU_GEMM_KC  256          /* columns per packed panel: 16 KiB */
#define KVS_CPU_GEMM_MR  6            /* tokens per register tile */
#define KVS_CPU_GEMM_NR  16           /* rows per panel */
#define KVS_CPU_GEMM_MC  96           /* tokens per pass over the panels:
                                         their kc columns (96 KiB) stay
                                         in L2 */


/* The portable statement of the product the AVX2 kernel computes, to
 * the bit: one fmaf chain per output (tests compare the two). */
void
kvs_cpu_gemm_ref(float *y, size_t ldy, const float *x, uint32_t n,
    uint32_t cols, const float *w, uint32_t nr)
{
    float     acc;
    uint32_t  i, r, k;

    for (i = 0; i < n; i++) {
        for (r = 0; r < nr; r++) {
            acc = 0.0f;

            for (k = 0; k < cols; k++) {
                acc = fmaf(x[(size_t) i * cols + k],
                           w[(size_t) r * cols + k], acc);
            }

            y[(size_t) i * ldy + r] = acc;
        }
    }
}


#if KVS_CPU_X86

#include <immintrin.h>


/*
 * bp[kc][width] := columns [k0, k0 + kc) of rows w[0 .. rows) (rows <=
 * width, 16 or 32; the rest zero), each row cols long.  Eight rows by
 * eight columns at a time through an 8 x 8 transpose; a ragged end of
 * kc % 8 columns goes one value at a time.
 */
__attribute__((target("avx2,fma"))) static void
kvs_cpu_gemm_pack(float *bp, const float *w, uint32_t rows, size_t cols,
    uint32_t k0, uint32_t kc, uint32_t width)
{
    uint32_t      h, r, k, k8, j;
    __m256        v[8], t[8];
    const float  *src[8];

    k8 = kc & ~7u;

    for (h = 0; h < width / 8; h++) {
        for (r = 0; r < 8; r++) {
            /* a missing row reads row 0 and is zeroed below */
            src[r] = w + (size_t) (h * 8 + r < rows ? h * 8 + r : 0) * cols
                     + k0;
        }

        for (k = 0; k < k8; k += 8) {
            for (r = 0; r < 8; r++) {
                v[r] = h * 8 + r < rows ? _mm256_loadu_ps(src[r] + k)
                                        : _mm256_setzero_ps();
            }

            t[0] = _mm256_unpacklo_ps(v[0], v[1]);
            t[1] = _mm256_unpackhi_ps(v[0], v[1]);
            t[2] = _mm256_unpacklo_ps(v[2], v[3]);
            t[3] = _mm256_unpackhi_ps(v[2], v[3]);
            t[4] = _mm256_unpacklo_ps(v[4], v[5]);
            t[5] = _mm256_unpackhi_ps(v[4], v[5]);
            t[6] = _mm256_unpacklo_ps(v[6], v[7]);
            t[7] = _mm256_unpackhi_ps(v[6], v[7]);

            v[0] = _mm256_shuffle_ps(t[0], t[2], 0x44);
            v[1] = _mm256_shuffle_ps(t[0], t[2], 0xee);
            v[2] = _mm256_shuffle_ps(t[1], t[3], 0x44);
            v[3] = _mm256_shuffle_ps(t[1], t[3], 0xee);
            v[4] = _mm256_shuffle_ps(t[4], t[6], 0x44);
            v[5] = _mm256_shuffle_ps(t[4], t[6], 0xee);
            v[6] = _mm256_shuffle_ps(t[5], t[7], 0x44);
            v[7] = _mm256_shuffle_ps(t[5], t[7], 0xee);

            /* v[c] holds column c (low half) and c + 4 (high half) of
             * rows 0..3 | 4..7, in that order */
            for (j = 0; j < 4; j++) {
                _mm256_storeu_ps(bp + (size_t) (k + j) * width + h * 8,
                    _mm256_permute2f128_ps(v[j], v[j + 4], 0x20));
                _mm256_storeu_ps(bp + (size_t) (k + j + 4) * width + h * 8,
                    _mm256_permute2f128_ps(v[j], v[j + 4], 0x31));
            }
        }

        for (k = k8; k < kc; k++) {
            for (r = 0; r < 8; r++) {
                bp[(size_t) k * width + h * 8 + r] =
                    h * 8 + r < rows ? src[r][k] : 0.0f;
            }
        }
    }
}


/* Token i's accumulators from y (or zero), and back; the twelve are
 * named, not an array, so that they live in registers. */
#define KVS_CPU_GEMM_LOAD(i, c0, c1)                                        \
    if (first || (i) >= m) {                                               \
        c0 = _mm256_setzero_ps();                                          \
        c1 = _mm256_setzero_ps();                                          \
    } else if (nr == 16) {                                                 \
        c0 = _mm256_loadu_ps(y + (size_t) (i) * ldy);                      \
        c1 = _mm256_loadu_ps(y + (size_t) (i) * ldy + 8);                  \
    } else {                                                               \
        memset(tmp, 0, sizeof(tmp));                                       \
        memcpy(tmp, y + (size_t) (i) * ldy, nr * sizeof(float));           \
        c0 = _mm256_loadu_ps(tmp);                                         \
        c1 = _mm256_loadu_ps(tmp + 8);                                     \
    }

#define KVS_CPU_GEMM_STORE(i, c0, c1)                                       \
    if ((i) < m && nr == 16) {                                             \
        _mm256_storeu_ps(y + (size_t) (i) * ldy, c0);                      \
        _mm256_storeu_ps(y + (size_t) (i) * ldy + 8, c1);                  \
    } else if ((i) < m) {                                                  \
        _mm256_storeu_ps(tmp, c0);                                         \
        _mm256_storeu_ps(tmp + 8, c1);                                     \
        memcpy(y + (size_t) (i) * ldy, tmp, nr * sizeof(float));           \
    }

#define KVS_CPU_GEMM_STEP(i, c0, c1)                                        \
    a = _mm256_broadcast_ss(x##i + k);                                     \
    c0 = _mm256_fmadd_ps(a, b0, c0);                                       \
    c1 = _mm256_fmadd_ps(a, b1, c1);


/*
 * The 6 x 16 tile: y[i][0 .. 16) for tokens i < m (1..6) of x (rows of
 * ldx floats, starting at column k0), over bp's kc columns, continuing
 * y's sums unless first.  Tokens past m repeat token m - 1's input (their
 * sums are computed and dropped); rows past nr are stored nowhere.
 */
__attribute__((target("avx2,fma"))) static void
kvs_cpu_gemm_tile(float *y, size_t ldy, const float *x, size_t ldx,
    const float *bp, uint32_t kc, uint32_t m, uint32_t nr, int first)
{
    float         tmp[16];
    uint32_t      k;
    __m256        c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50,
                  c51, b0, b1, a;
    const float  *x0, *x1, *x2, *x3, *x4, *x5;

    x0 = x;
    x1 = x + (size_t) (1 < m ? 1 : m - 1) * ldx;
    x2 = x + (size_t) (2 < m ? 2 : m - 1) * ldx;
    x3 = x + (size_t) (3 < m ? 3 : m - 1) * ldx;
    x4 = x + (size_t) (4 < m ? 4 : m - 1) * ldx;
    x5 = x + (size_t) (5 < m ? 5 : m - 1) * ldx;

    KVS_CPU_GEMM_LOAD(0, c00, c01)
    KVS_CPU_GEMM_LOAD(1, c10, c11)
    KVS_CPU_GEMM_LOAD(2, c20, c21)
    KVS_CPU_GEMM_LOAD(3, c30, c31)
    KVS_CPU_GEMM_LOAD(4, c40, c41)
    KVS_CPU_GEMM_LOAD(5, c50, c51)

    for (k = 0; k < kc; k++) {
        b0 = _mm256_load_ps(bp);
        b1 = _mm256_load_ps(bp + 8);
        bp += 16;

        KVS_CPU_GEMM_STEP(0, c00, c01)
        KVS_CPU_GEMM_STEP(1, c10, c11)
        KVS_CPU_GEMM_STEP(2, c20, c21)
        KVS_CPU_GEMM_STEP(3, c30, c31)
        KVS_CPU_GEMM_STEP(4, c40, c41)
        KVS_CPU_GEMM_STEP(5, c50, c51)
    }

    KVS_CPU_GEMM_STORE(0, c00, c01)
    KVS_CPU_GEMM_STORE(1, c10, c11)
    KVS_CPU_GEMM_STORE(2, c20, c21)
    KVS_CPU_GEMM_STORE(3, c30, c31)
    KVS_CPU_GEMM_STORE(4, c40, c41)
    KVS_CPU_GEMM_STORE(5, c50, c51)
}

#undef KVS_CPU_GEMM_LOAD
#undef KVS_CPU_GEMM_STORE
#undef KVS_CPU_GEMM_STEP


/* A register tile: y[0 .. m) x [0 .. nr) of tokens at x (rows ldx
 * apart) over a packed panel bp of kc columns, continuing y unless
 * first. */
typedef void (*kvs_cpu_gemm_tile_fn)(float *y, size_t ldy, const float *x,
    size_t ldx, const float *bp, uint32_t kc, uint32_t m, uint32_t nr,
    int first);

/* The loop nest both levels share: panels of `width` rows by up to kcm
 * columns, packed into bp, meet the tokens mr at a time through tile;
 * with xp, each pass's tokens' columns are copied there first ([bn][kc]).
 * The order of the k panels is the FMA chains' order, so the bits do
 * not depend on anything but kc's sequence, which is the same for all
 * rows and tokens. */
static void
kvs_cpu_gemm_nest(float *y, size_t ldy, const float *x, uint32_t n,
    uint32_t cols, const float *w, uint32_t nr, float *bp, float *xp,
    uint32_t kcm, uint32_t width, uint32_t mr, kvs_cpu_gemm_tile_fn tile)
{
    size_t        ldx;
    uint32_t      k0, kc, r0, rows, b0, bn, i0, m, i;
    const float  *xs;

    for (k0 = 0; k0 < cols; k0 += kcm) {
        kc = cols - k0 < kcm ? cols - k0 : kcm;

        for (b0 = 0; b0 < n; b0 += KVS_CPU_GEMM_MC) {
            bn = n - b0 < KVS_CPU_GEMM_MC ? n - b0 : KVS_CPU_GEMM_MC;
            xs = x + (size_t) b0 * cols + k0;
            ldx = cols;

            if (xp != NULL) {
                for (i = 0; i < bn; i++) {
                    memcpy(xp + (size_t) i * kc, xs + (size_t) i * cols,
                           kc * sizeof(float));
                }

                xs = xp;
                ldx = kc;
            }

            for (r0 = 0; r0 < nr; r0 += width) {
                rows = nr - r0 < width ? nr - r0 : width;
                kvs_cpu_gemm_pack(bp, w + (size_t) r0 * cols, rows, cols,
                                  k0, kc, width);

                for (i0 = 0; i0 < bn; i0 += mr) {
                    m = bn - i0 < mr ? bn - i0 : mr;
                    tile(y + (size_t) (b0 + i0) * ldy + r0, ldy,
                         xs + (size_t) i0 * ldx, ldx, bp, kc, m, rows,
                         k0 == 0);
                }
            }
        }
    }
}


/* y[i * ldy + r] = x[i] . w[r] for i < n, r < nr; w is nr rows of cols
 * floats (contiguous), x n rows of cols floats. */
__attribute__((target("avx2,fma"))) void
kvs_cpu_gemm_avx2(float *y, size_t ldy, const float *x, uint32_t n,
    uint32_t cols, const float *w, uint32_t nr)
{
    float  bp[KVS_CPU_GEMM_KC * KVS_CPU_GEMM_NR]
               __attribute__((aligned(64)));  /* [kc][16] */

    kvs_cpu_gemm_nest(y, ldy, x, n, cols, w, nr, bp, NULL, KVS_CPU_GEMM_KC,
                      KVS_CPU_GEMM_NR, KVS_CPU_GEMM_MR, kvs_cpu_gemm_tile);
}


/*
 * AVX-512: the same product on panels of 32 rows (two 16-lane vectors)
 * by KVS_CPU_GEMM_KC5 columns ([kc][32], 16 KiB: L1), meeting the tokens
 * 12 at a time in a 12 x 32 register tile (24 accumulators, two weight
 * vectors, a broadcast: 27 of the 32 registers).  Twice the lanes of the
 * AVX2 tile per instruction, and twice the FMAs per broadcast, for CPUs
 * with two 512-bit FMA units.  The invariant is the AVX2 kernel's: each
 * output one FMA chain over k in order, its accumulator reloaded from y
 * between column panels, so the bits are kvs_cpu_gemm_ref()'s (and the
 * AVX2 kernel's) whatever the level, the batch or the tile.
 */
#define KVS_CPU_GEMM_KC5  128
#define KVS_CPU_GEMM_MR5  12
#define KVS_CPU_GEMM_NR5  32

#define KVS_CPU_GEMM5_LOAD(i, c0, c1)                                       \
    if (first || (i) >= m) {                                               \
        c0 = _mm512_setzero_ps();                                          \
        c1 = _mm512_setzero_ps();                                          \
    } else {                                                               \
        c0 = _mm512_maskz_loadu_ps(m0, y + (size_t) (i) * ldy);            \
        c1 = _mm512_maskz_loadu_ps(m1, y + (size_t) (i) * ldy + 16);       \
    }

#define KVS_CPU_GEMM5_STORE(i, c0, c1)                                      \
    if ((i) < m) {                                                         \
        _mm512_mask_storeu_ps(y + (size_t) (i) * ldy, m0, c0);             \
        _mm512_mask_storeu_ps(y + (size_t) (i) * ldy + 16, m1, c1);        \
    }

#define KVS_CPU_GEMM5_STEP(i, c0, c1)                                       \
    a = _mm512_set1_ps(x##i[k]);                                           \
    c0 = _mm512_fmadd_ps(a, b0, c0);                                       \
    c1 = _mm512_fmadd_ps(a, b1, c1);


/* The 12 x 32 tile, as kvs_cpu_gemm_tile's 6 x 16 one: tokens past m
 * repeat token m - 1's input and are dropped; rows past nr are neither
 * read from y nor written. */
__attribute__((target("avx512f,fma"))) static void
kvs_cpu_gemm_tile5(float *y, size_t ldy, const float *x, size_t ldx,
    const float *bp, uint32_t kc, uint32_t m, uint32_t nr, int first)
{
    uint32_t      k;
    __mmask16     m0, m1;
    __m512        c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50,
                  c51, c60, c61, c70, c71, c80, c81, c90, c91, ca0, ca1,
                  cb0, cb1, b0, b1, a;
    const float  *x0, *x1, *x2, *x3, *x4, *x5, *x6, *x7, *x8, *x9, *xa,
                 *xb;

    m0 = nr >= 16 ? (__mmask16) 0xffff : (__mmask16) ((1u << nr) - 1);
    m1 = nr >= 32 ? (__mmask16) 0xffff
         : nr > 16 ? (__mmask16) ((1u << (nr - 16)) - 1) : (__mmask16) 0;

    x0 = x;
    x1 = x + (size_t) (1 < m ? 1 : m - 1) * ldx;
    x2 = x + (size_t) (2 < m ? 2 : m - 1) * ldx;
    x3 = x + (size_t) (3 < m ? 3 : m - 1) * ldx;
    x4 = x + (size_t) (4 < m ? 4 : m - 1) * ldx;
    x5 = x + (size_t) (5 < m ? 5 : m - 1) * ldx;
    x6 = x + (size_t) (6 < m ? 6 : m - 1) * ldx;
    x7 = x + (size_t) (7 < m ? 7 : m - 1) * ldx;
    x8 = x + (size_t) (8 < m ? 8 : m - 1) * ldx;
    x9 = x + (size_t) (9 < m ? 9 : m - 1) * ldx;
    xa = x + (size_t) (10 < m ? 10 : m - 1) * ldx;
    xb = x + (size_t) (11 < m ? 11 : m - 1) * ldx;

    KVS_CPU_GEMM5_LOAD(0, c00, c01)
    KVS_CPU_GEMM5_LOAD(1, c10, c11)
    KVS_CPU_GEMM5_LOAD(2, c20, c21)
    KVS_CPU_GEMM5_LOAD(3, c30, c31)
    KVS_CPU_GEMM5_LOAD(4, c40, c41)
    KVS_CPU_GEMM5_LOAD(5, c50, c51)
    KVS_CPU_GEMM5_LOAD(6, c60, c61)
    KVS_CPU_GEMM5_LOAD(7, c70, c71)
    KVS_CPU_GEMM5_LOAD(8, c80, c81)
    KVS_CPU_GEMM5_LOAD(9, c90, c91)
    KVS_CPU_GEMM5_LOAD(10, ca0, ca1)
    KVS_CPU_GEMM5_LOAD(11, cb0, cb1)

    for (k = 0; k < kc; k++) {
        b0 = _mm512_load_ps(bp);
        b1 = _mm512_load_ps(bp + 16);
        bp += 32;

        KVS_CPU_GEMM5_STEP(0, c00, c01)
        KVS_CPU_GEMM5_STEP(1, c10, c11)
        KVS_CPU_GEMM5_STEP(2, c20, c21)
        KVS_CPU_GEMM5_STEP(3, c30, c31)
        KVS_CPU_GEMM5_STEP(4, c40, c41)
        KVS_CPU_GEMM5_STEP(5, c50, c51)
        KVS_CPU_GEMM5_STEP(6, c60, c61)
        KVS_CPU_GEMM5_STEP(7, c70, c71)
        KVS_CPU_GEMM5_STEP(8, c80, c81)
        KVS_CPU_GEMM5_STEP(9, c90, c91)
        KVS_CPU_GEMM5_STEP(a, ca0, ca1)
        KVS_CPU_GEMM5_STEP(b, cb0, cb1)
    }

    KVS_CPU_GEMM5_STORE(0, c00, c01)
    KVS_CPU_GEMM5_STORE(1, c10, c11)
    KVS_CPU_GEMM5_STORE(2, c20, c21)
    KVS_CPU_GEMM5_STORE(3, c30, c31)
    KVS_CPU_GEMM5_STORE(4, c40, c41)
    KVS_CPU_GEMM5_STORE(5, c50, c51)
    KVS_CPU_GEMM5_STORE(6, c60, c61)
    KVS_CPU_GEMM5_STORE(7, c70, c71)
    KVS_CPU_GEMM5_STORE(8, c80, c81)
    KVS_CPU_GEMM5_STORE(9, c90, c91)
    KVS_CPU_GEMM5_STORE(10, ca0, ca1)
    KVS_CPU_GEMM5_STORE(11, cb0, cb1)
}

#undef KVS_CPU_GEMM5_LOAD
#undef KVS_CPU_GEMM5_STORE
#undef KVS_CPU_GEMM5_STEP


/*
 * kvs_cpu_gemm_avx2's product, to its bits, on the 12 x 32 tile.  The
 * tokens' columns of a panel are copied together first ([bn][kc], rows
 * 512 bytes apart): read in place, twelve rows a power-of-two number of
 * columns apart (2048, 4096) share L1 sets and evict each other.
 */
__attribute__((target("avx512f,avx2,fma"))) void
kvs_cpu_gemm_avx512(float *y, size_t ldy, const float *x, uint32_t n,
    uint32_t cols, const float *w, uint32_t nr)
{
    float  bp[KVS_CPU_GEMM_KC5 * KVS_CPU_GEMM_NR5]
               __attribute__((aligned(64)));  /* [kc][32] */
    float  xp[KVS_CPU_GEMM_MC * KVS_CPU_GEMM_KC5]
               __attribute__((aligned(64)));  /* [bn][kc] */

    kvs_cpu_gemm_nest(y, ldy, x, n, cols, w, nr, bp, xp, KVS_CPU_GEMM_KC5,
                      KVS_CPU_GEMM_NR5, KVS_CPU_GEMM_MR5,
                      kvs_cpu_gemm_tile5);
}

#endif /* KVS_CPU_X86 */
