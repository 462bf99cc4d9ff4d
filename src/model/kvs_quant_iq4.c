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

#include <math.h>
#include <string.h>

#include "model/kvs_dtype.h"
#include "model/kvs_quant.h"


#define KVS_IQ4_BLOCK      32
#define KVS_IQ4_NL_BYTES   18
#define KVS_IQ4_XS_BLOCK   256
#define KVS_IQ4_XS_BYTES   136
#define KVS_IQ4_XS_SUBS    8

/* the f16 largest finite value: a scale beyond it would be stored inf */
#define KVS_IQ4_F16_MAX    65504.0f


static const int8_t  kvs_iq4_kv[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10,
    1, 13, 25, 38, 53, 69, 89, 113
};


static float
kvs_iq4_f16(const uint8_t *p)
{
    uint16_t  h;

    memcpy(&h, p, 2);

    return kvs_f16_to_f32(h);
}


/*
 * The index of the level nearest t (ties to the lower level); by
 * comparisons only, so NaN gives index 0 and no float is converted.
 */
static unsigned
kvs_iq4_nearest(float t)
{
    unsigned  lo, hi, mid;

    /* the answer is in [lo, hi]: the count of midpoints below t */
    lo = 0;
    hi = 15;

    while (lo < hi) {
        mid = (lo + hi) / 2;

        if (t > 0.5f * (float) (kvs_iq4_kv[mid] + kvs_iq4_kv[mid + 1])) {
            lo = mid + 1;

        } else {
            hi = mid;
        }
    }

    return lo;
}


/*
 * Maps x[32] to indices idx[32] under scale d (nearest level of x / d);
 * returns the squared error of d * kv against x, as f32 dequantization
 * will see it.  d == 0 maps everything to level 8 (kv 1, which is 0).
 */
static float
kvs_iq4_map(const float *x, float d, uint8_t *idx)
{
    size_t  i;
    float   id, e, err;

    id = d == 0.0f ? 0.0f : 1.0f / d;
    err = 0.0f;

    for (i = 0; i < KVS_IQ4_BLOCK; i++) {
        idx[i] = d == 0.0f ? 8 : (uint8_t) kvs_iq4_nearest(x[i] * id);
        e = x[i] - d * (float) kvs_iq4_kv[idx[i]];
        err += e * e;
    }

    return err;
}


/*
 * The f32 scale of least squared error we find for x[32] (see the top of
 * the file).  Candidates: |d| = amax / m for m in 96..136 (the largest
 * element lands near the grid's ends, -127 and 113) and both signs;
 * each is refitted by least squares, d = sum(x kv) / sum(kv^2), for the
 * mapping it gave (kv has no 0, so the sum of squares is never 0).
 */
static float
kvs_iq4_fit(const float *x)
{
    int      m, s;
    size_t   i;
    float    amax, d, best, best_err, err, sxk, skk, k;
    uint8_t  idx[KVS_IQ4_BLOCK];

    amax = 0.0f;

    for (i = 0; i < KVS_IQ4_BLOCK; i++) {
        amax = fmaxf(amax, fabsf(x[i]));
    }

    if (amax == 0.0f || !isfinite(amax)) {
        return amax == 0.0f ? 0.0f : KVS_IQ4_F16_MAX;
    }

    best = amax / 127.0f;
    best_err = kvs_iq4_map(x, best, idx);

    for (s = -1; s <= 1; s += 2) {
        for (m = 96; m <= 136; m += 2) {
            d = (float) s * amax / (float) m;
            (void) kvs_iq4_map(x, d, idx);

            sxk = 0.0f;
            skk = 0.0f;

            for (i = 0; i < KVS_IQ4_BLOCK; i++) {
                k = (float) kvs_iq4_kv[idx[i]];
                sxk += x[i] * k;
                skk += k * k;
            }

            d = sxk / skk;
            err = kvs_iq4_map(x, d, idx);

            if (err < best_err) {
                best_err = err;
                best = d;
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
        kvs_iq4_unpack(src + 2, kvs_iq4_f16(src), dst);

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
    size_t    b, s;
    float     d;
    unsigned  ls;
    uint16_t  sh;

    for (b = 0; b < n / KVS_IQ4_XS_BLOCK; b++) {
        d = kvs_iq4_f16(src);
        sh = (uint16_t) (src[2] | src[3] << 8);

        for (s = 0; s < KVS_IQ4_XS_SUBS; s++) {
            ls = ((src[4 + s / 2] >> 4 * (s & 1)) & 0x0f)
                 | ((sh >> 2 * s) & 3) << 4;
            kvs_iq4_unpack(src + 8 + 16 * s, d * (float) ((int) ls - 32),
                           dst + 32 * s);
        }

        src += KVS_IQ4_XS_BYTES;
        dst += KVS_IQ4_XS_BLOCK;
    }
}


void
kvs_iq4_xs_quantize(const float *src, uint8_t *dst, size_t n)
{
    int       l, l0, best_l;
    size_t    b, s;
    float     sub[KVS_IQ4_XS_SUBS], smax, d, v, err, best_err;
    unsigned  ls;
    uint8_t   idx[KVS_IQ4_BLOCK], best_idx[KVS_IQ4_BLOCK];
    uint16_t  h, sh;

    for (b = 0; b < n / KVS_IQ4_XS_BLOCK; b++) {

        /* each sub-block's own best scale; the largest in magnitude is
         * given the 6-bit level -32 (the only end with room: 31 < 32) */
        smax = 0.0f;

        for (s = 0; s < KVS_IQ4_XS_SUBS; s++) {
            sub[s] = kvs_iq4_fit(src + 32 * s);

            if (fabsf(sub[s]) > fabsf(smax)) {
                smax = sub[s];
            }
        }

        d = fminf(fmaxf(smax / -32.0f, -KVS_IQ4_F16_MAX), KVS_IQ4_F16_MAX);
        h = kvs_f32_to_f16(d);
        d = kvs_f16_to_f32(h);
        memcpy(dst, &h, 2);

        sh = 0;
        memset(dst + 4, 0, 4);

        for (s = 0; s < KVS_IQ4_XS_SUBS; s++) {

            /* the rounded level and its neighbours, under the f32 scale
             * dequantization will compute, d * (float) level */
            v = d == 0.0f ? 0.0f : sub[s] / d;
            v = v == v ? fminf(fmaxf(v, -32.0f), 31.0f) : 0.0f;
            l0 = (int) lrintf(v);

            best_l = -33;           /* none yet */
            best_err = 0.0f;

            for (l = l0 - 1; l <= l0 + 1; l++) {
                if (l < -32 || l > 31) {
                    continue;
                }

                err = kvs_iq4_map(src + 32 * s, d * (float) l, idx);

                if (best_l == -33 || err < best_err) {
                    best_err = err;
                    best_l = l;
                    memcpy(best_idx, idx, sizeof(idx));
                }
            }

            ls = (unsigned) (best_l + 32);
            dst[4 + s / 2] |= (uint8_t) ((ls & 0x0f) << 4 * (s & 1));
            sh |= (uint16_t) ((ls >> 4) << 2 * s);
            kvs_iq4_pack(best_idx, dst + 8 + 16 * s);
        }

        dst[2] = (uint8_t) sh;
        dst[3] = (uint8_t) (sh >> 8);

        src += KVS_IQ4_XS_BLOCK;
        dst += KVS_IQ4_XS_BYTES;
    }
}
