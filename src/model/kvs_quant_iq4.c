/*
 * kvs_quant_iq4: the non-linear 4-bit types IQ4_NL and IQ4_XS converted
 * to and from f32 (prototypes in kvs_quant.h).
 *
 * A 4-bit index selects one of 16 fixed levels (the format's grid,
 * denser near 0, not symmetric), times a scale:
 *
 *   kv[16] = -127 -104 -83 -65 -49 -35 -22 -10 1 13 25 38 53 69 89 113
 *
 *   IQ4_NL (18 bytes, 32 elements): f16 d | u8 qs[16]
 *       x[j] = d * kv[qs[j] & 15], x[j + 16] = d * kv[qs[j] >> 4]
 *   IQ4_XS (136 bytes, 256 elements = 8 sub-blocks of 32):
 *       f16 d | u16 scales_h | u8 scales_l[4] | u8 qs[128]
 *       sub-block s (0..7) has a 6-bit scale
 *         ls = ((scales_l[s / 2] >> 4 * (s & 1)) & 15)
 *              | ((scales_h >> 2 * s) & 3) << 4,
 *         dl = d * (float) (ls - 32)
 *       and its 32 elements in qs[16 s .. 16 s + 15] as IQ4_NL's:
 *         x[32 s + j] = dl * kv[qs[16 s + j] & 15],
 *         x[32 s + j + 16] = dl * kv[qs[16 s + j] >> 4]
 *
 * Invariants: dequantization is bit for bit gguf.quants.dequantize's
 * (f32 products, IQ4_XS's as (d * ls) * kv).  The gguf package cannot
 * quantize these types; our quantizer is our own (docs/quantization.md):
 * for each block of 32 it tries a fan of scales of both signs, maps every
 * element to its nearest level, refits the scale by least squares for
 * that mapping and keeps the scale of least squared error; the stored
 * (f16 or 6-bit) scale is then rounded and the elements re-mapped to
 * their nearest level under the scale dequantization will use, so every
 * index is the best one for the stored scale.  No input fails: NaN and
 * inf give some block, without undefined behaviour.
 */

/* bit-identical to gguf's numpy, which rounds every product and sum on
 * its own: no fused multiply-add, whatever -march a build uses */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "model/kvs_dtype.h"
#include "model/kvs_quant.h"
#include "model/kvs_quant_iq4.h"

/* the f16 largest finite value: a scale beyond it would be stored inf */
#define KVS_IQ4_F16_MAX    65504.0f


/* the grid, shared with the CPU products (kvs_quant.h) */
const int8_t  kvs_iq4_kv[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10,
    1, 13, 25, 38, 53, 69, 89, 113
};


/* the midpoints between neighbouring levels (exact in f32) */
static const float  kvs_iq4_mid[15] = {
    -115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
    7.0f, 19.0f, 31.5f, 45.5f, 61.0f, 79.0f, 101.0f
};


/*
 * The index of the level nearest t (ties to the lower level) is the
 * count of midpoints below t.  The midpoints are multiples of 0.5, so
 * with u = 2t (exact) and M = 2 mid (integers, -231..202), "mid < t" is
 * "M <= ceil(u) - 1": a table indexed by c = ceil(u) - 1 answers for
 * every t at once.  u is clamped to +-262 first (beyond every M, and
 * inside int); NaN gives c = -263, index 0.  The table is built once per
 * process (pthread_once): the quantizer's hot path is this look-up.
 */
#define KVS_IQ4_LUT_HALF  263

static uint8_t         kvs_iq4_lut[2 * KVS_IQ4_LUT_HALF];
static pthread_once_t  kvs_iq4_lut_once = PTHREAD_ONCE_INIT;


static void
kvs_iq4_lut_init(void)
{
    int       c;
    unsigned  k, i;

    for (c = -KVS_IQ4_LUT_HALF; c < KVS_IQ4_LUT_HALF; c++) {
        k = 0;

        for (i = 0; i < 15; i++) {
            k += (float) c >= 2.0f * kvs_iq4_mid[i];
        }

        kvs_iq4_lut[c + KVS_IQ4_LUT_HALF] = (uint8_t) k;
    }
}


static unsigned
kvs_iq4_nearest(float t)
{
    int    f;
    float  u;

    /* clamped without libm calls (this runs per element per candidate
     * scale); NaN fails the first test and takes the low end */
    u = t > -131.0f ? t : -131.0f;
    u = 2.0f * (u < 131.0f ? u : 131.0f);
    f = (int) u;

    /* ceil(u) - 1: trunc(u) is ceil(u) unless u has a positive fraction */
    f += ((float) f < u) - 1;

    return kvs_iq4_lut[f + KVS_IQ4_LUT_HALF];
}


/*
 * Maps x[32] to indices idx[32] under scale d (nearest level of x / d);
 * returns the squared error of d * kv against x, as f32 dequantization
 * will see it.  d == 0 maps everything to level 8 (kv 1, which is 0).
 */
static float
kvs_iq4_map(const float *x, float d, uint8_t *idx)
{
    size_t  i, j;
    float   id, e, lane[8];

    /* the squares summed in 8 lanes (element i in lane i % 8), then
     * pairwise: 8 chains of additions instead of one */
    for (j = 0; j < 8; j++) {
        lane[j] = 0.0f;
    }

    id = d == 0.0f ? 0.0f : 1.0f / d;

    for (i = 0; i < KVS_IQ4_BLOCK; i += 8) {
        for (j = 0; j < 8; j++) {
            idx[i + j] = d == 0.0f
                         ? 8 : (uint8_t) kvs_iq4_nearest(x[i + j] * id);
            e = x[i + j] - d * (float) kvs_iq4_kv[idx[i + j]];
            lane[j] += e * e;
        }
    }

    return ((lane[0] + lane[1]) + (lane[2] + lane[3]))
           + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}


/*
 * The f32 scale of least squared error we find for x[32] (see the top of
 * the file).  Candidates: |d| = amax / m for m = 96, 100, .., 136 (the
 * largest element lands near the grid's ends, -127 and 113) and both signs.
 * Each maps the elements to their nearest levels, and is refitted by
 * least squares for that mapping, d = sum(x kv) / sum(kv^2) (kv has no 0,
 * so the sum of squares is never 0), whose error is then
 * sum(x^2) - sum(x kv)^2 / sum(kv^2) without mapping again.  Sums in
 * double: the difference cancels.
 */
static float
kvs_iq4_fit(const float *x)
{
    int      m, s;
    size_t   i;
    float    amax, d, best;
    double   sxx, sxk, skk, k, err, best_err;
    uint8_t  idx[KVS_IQ4_BLOCK];

    amax = 0.0f;
    sxx = 0.0;

    for (i = 0; i < KVS_IQ4_BLOCK; i++) {
        amax = fmaxf(amax, fabsf(x[i]));
        sxx += (double) x[i] * x[i];
    }

    if (amax == 0.0f || !isfinite(amax)) {
        return amax == 0.0f ? 0.0f : KVS_IQ4_F16_MAX;
    }

    best = amax / 127.0f;
    best_err = kvs_iq4_map(x, best, idx);

    for (s = -1; s <= 1; s += 2) {
        for (m = 96; m <= 136; m += 4) {
            d = (float) s * amax / (float) m;
            (void) kvs_iq4_map(x, d, idx);

            sxk = 0.0;
            skk = 0.0;

            for (i = 0; i < KVS_IQ4_BLOCK; i++) {
                k = kvs_iq4_kv[idx[i]];
                sxk += x[i] * k;
                skk += k * k;
            }

            err = sxx - sxk * sxk / skk;

            if (err < best_err) {
                best_err = err;
                best = (float) (sxk / skk);
            }
        }
    }

    return best;
}


/* 32 indices -> 16 bytes, element j low nibble, j + 16 high */
static void
kvs_iq4_pack(const uint8_t *idx, uint8_t *qs)
{
    size_t  j;

    for (j = 0; j < KVS_IQ4_BLOCK / 2; j++) {
        qs[j] = (uint8_t) (idx[j] | idx[j + 16] << 4);
    }
}


static void
kvs_iq4_unpack(const uint8_t *qs, float d, float *dst)
{
    size_t  j;

    for (j = 0; j < KVS_IQ4_BLOCK / 2; j++) {
        dst[j] = d * (float) kvs_iq4_kv[qs[j] & 0x0f];
        dst[j + 16] = d * (float) kvs_iq4_kv[qs[j] >> 4];
    }
}


/* ---- IQ4_NL ------------------------------------------------------------- */

void
kvs_iq4_nl_dequantize(const uint8_t *src, float *dst, size_t n)
{
    size_t  b;

    for (b = 0; b < n / KVS_IQ4_BLOCK; b++) {
        kvs_iq4_unpack(src + 2, kvs_f16_load(src), dst);

        src += KVS_IQ4_NL_BYTES;
        dst += KVS_IQ4_BLOCK;
    }
}


void
kvs_iq4_nl_quantize(const float *src, uint8_t *dst, size_t n)
{
    size_t    b;
    float     d;
    uint8_t   idx[KVS_IQ4_BLOCK];
    uint16_t  h;

    (void) pthread_once(&kvs_iq4_lut_once, kvs_iq4_lut_init);

    for (b = 0; b < n / KVS_IQ4_BLOCK; b++) {
        d = kvs_iq4_fit(src);
        d = fminf(fmaxf(d, -KVS_IQ4_F16_MAX), KVS_IQ4_F16_MAX);

        /* map under the scale dequantization will read */
        h = kvs_f32_to_f16(d);
        memcpy(dst, &h, 2);
        (void) kvs_iq4_map(src, kvs_f16_to_f32(h), idx);
        kvs_iq4_pack(idx, dst + 2);

        src += KVS_IQ4_BLOCK;
        dst += KVS_IQ4_NL_BYTES;
    }
}


/* ---- IQ4_XS ------------------------------------------------------------- */

void
kvs_iq4_xs_dequantize(const uint8_t *src, float *dst, size_t n)
{
    size_t    b;
    float     d;
    unsigned  s, ls;

    for (b = 0; b < n / KVS_IQ4_XS_BLOCK; b++) {
        d = kvs_f16_load(src + KVS_IQ4_XS_D);

        for (s = 0; s < KVS_IQ4_XS_SUBS; s++) {
            ls = kvs_iq4_xs_ls(src, s);
            kvs_iq4_unpack(src + KVS_IQ4_XS_QS + 16 * s,
                           d * (float) ((int) ls - 32), dst + 32 * s);
        }

        src += KVS_IQ4_XS_BYTES;
        dst += KVS_IQ4_XS_BLOCK;
    }
}


/*
 * Under the super-block scale d (as stored, f16), each sub-block's 6-bit
 * level: the one nearest sub[s] / d and its two neighbours are tried,
 * with the elements mapped under the f32 scale dequantization computes,
 * d * (float) level, and the least squared error kept.  Fills ls[8]
 * (level + 32, 0..63) and idx[256]; returns the super-block's error.
 */
static float
kvs_iq4_xs_levels(const float *x, const float *sub, float d, uint8_t *ls,
    uint8_t *idx)
{
    int      l, l0, best_l;
    size_t   s;
    float    v, err, best_err, total;
    uint8_t  try_idx[KVS_IQ4_BLOCK];

    total = 0.0f;

    for (s = 0; s < KVS_IQ4_XS_SUBS; s++) {
        v = d == 0.0f ? 0.0f : sub[s] / d;
        v = v == v ? fminf(fmaxf(v, -32.0f), 31.0f) : 0.0f;
        l0 = (int) lrintf(v);

        best_l = -33;                           /* none yet */
        best_err = 0.0f;

        for (l = l0 - 1; l <= l0 + 1; l++) {
            if (l < -32 || l > 31) {
                continue;
            }

            err = kvs_iq4_map(x + 32 * s, d * (float) l, try_idx);

            if (best_l == -33 || err < best_err) {
                best_err = err;
                best_l = l;
                memcpy(idx + 32 * s, try_idx, sizeof(try_idx));
            }
        }

        ls[s] = (uint8_t) (best_l + 32);
        total += best_err;
    }

    return total;
}


/*
 * The super-block scale: the sub-block scale of largest magnitude, smax,
 * is put on one of the 6-bit levels -32..-30 or 30..31 (each candidate
 * d = smax / level, rounded to f16), the sub-blocks' levels are chosen
 * under it, and the candidate of least total squared error is stored.
 * Level -32 alone uses the whole range for smax; the others let the
 * smaller sub-block scales fall nearer their 6-bit levels.
 */
static const float  kvs_iq4_xs_tops[] = {
    -32.0f, -31.0f, -30.0f, 31.0f, 30.0f
};

void
kvs_iq4_xs_quantize(const float *src, uint8_t *dst, size_t n)
{
    size_t    b, s, c;
    float     sub[KVS_IQ4_XS_SUBS], smax, d, err, best_err;
    uint8_t   ls[KVS_IQ4_XS_SUBS], best_ls[KVS_IQ4_XS_SUBS];
    uint8_t   idx[KVS_IQ4_XS_BLOCK], best_idx[KVS_IQ4_XS_BLOCK];
    uint16_t  h, best_h, sh;

    (void) pthread_once(&kvs_iq4_lut_once, kvs_iq4_lut_init);

    for (b = 0; b < n / KVS_IQ4_XS_BLOCK; b++) {

        /* each sub-block's own best f32 scale */
        smax = 0.0f;

        for (s = 0; s < KVS_IQ4_XS_SUBS; s++) {
            sub[s] = kvs_iq4_fit(src + 32 * s);

            if (fabsf(sub[s]) > fabsf(smax)) {
                smax = sub[s];
            }
        }

        best_err = 0.0f;
        best_h = 0;

        for (c = 0; c < sizeof(kvs_iq4_xs_tops) / sizeof(float); c++) {
            d = smax / kvs_iq4_xs_tops[c];
            d = fminf(fmaxf(d, -KVS_IQ4_F16_MAX), KVS_IQ4_F16_MAX);
            h = kvs_f32_to_f16(d);
            err = kvs_iq4_xs_levels(src, sub, kvs_f16_to_f32(h), ls, idx);

            if (c == 0 || err < best_err) {
                best_err = err;
                best_h = h;
                memcpy(best_ls, ls, sizeof(ls));
                memcpy(best_idx, idx, sizeof(idx));
            }
        }

        memcpy(dst, &best_h, 2);
        sh = 0;
        memset(dst + 4, 0, 4);

        for (s = 0; s < KVS_IQ4_XS_SUBS; s++) {
            dst[4 + s / 2] |= (uint8_t) ((best_ls[s] & 0x0f) << 4 * (s & 1));
            sh |= (uint16_t) ((best_ls[s] >> 4) << 2 * s);
            kvs_iq4_pack(best_idx + 32 * s, dst + 8 + 16 * s);
        }

        dst[2] = (uint8_t) sh;
        dst[3] = (uint8_t) (sh >> 8);

        src += KVS_IQ4_XS_BLOCK;
        dst += KVS_IQ4_XS_BYTES;
    }
}
