/*
 * test_quant_legacy: Q4_0, Q4_1, Q5_0 and Q5_1 (src/model/kvs_quant_legacy.c)
 * against blocks worked out by hand from the layout, all-zero blocks,
 * extreme f16 scales, quantization of blocks whose bytes are worked by
 * hand (gguf's rounding: trunc(x / d + offset + 0.5), halves up, the
 * clipped top level, the first of equal |x| giving the scale), round-trip
 * error bounds on Gaussian data, and rows of several blocks.  Exactness
 * against the gguf package itself is t/unit/test_quant_python.py's.
 */

#include "kvs_test.h"

#include <math.h>

#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"


#define BLK  32

typedef void (*deq_pt)(const uint8_t *src, float *dst, size_t n);
typedef void (*quant_pt)(const float *src, uint8_t *dst, size_t n);

typedef struct {
    const char  *name;
    uint32_t     type;
    size_t       bytes;        /* per block of 32 */
    unsigned     bits;
    int          affine;       /* _1: f16 m follows d */
    deq_pt       deq;
    quant_pt     quant;
} ltype_t;

static const ltype_t  types[] = {
    { "Q4_0", KVS_GGML_Q4_0, 18, 4, 0, kvs_q4_0_dequantize,
      kvs_q4_0_quantize },
    { "Q4_1", KVS_GGML_Q4_1, 20, 4, 1, kvs_q4_1_dequantize,
      kvs_q4_1_quantize },
    { "Q5_0", KVS_GGML_Q5_0, 22, 5, 0, kvs_q5_0_dequantize,
      kvs_q5_0_quantize },
    { "Q5_1", KVS_GGML_Q5_1, 24, 5, 1, kvs_q5_1_dequantize,
      kvs_q5_1_quantize },
};

#define NTYPES  (sizeof(types) / sizeof(types[0]))


static void
put16(uint8_t *p, uint16_t h)
{
    p[0] = (uint8_t) h;
    p[1] = (uint8_t) (h >> 8);
}


static float
get16(const uint8_t *p)
{
    return kvs_f16_to_f32((uint16_t) (p[0] | p[1] << 8));
}


/* the level q[i] stored in a block of type t (0 .. 2^bits - 1) */
static unsigned
level(const ltype_t *t, const uint8_t *blk, size_t i)
{
    const uint8_t  *qs, *qh;
    unsigned        q, h;

    qh = blk + (t->affine ? 4 : 2);
    qs = t->bits == 5 ? qh + 4 : qh;

    q = i < 16 ? (qs[i] & 0x0f) : (qs[i - 16] >> 4);

    if (t->bits == 5) {
        h = (unsigned) qh[i / 8] >> (i % 8) & 1;
        q |= h << 4;
    }

    return q;
}


/* a reproducible N(0, 1) sample: an LCG through Box-Muller */
static uint64_t  rng = 0x2545f4914f6cdd1dULL;

static float
gauss(void)
{
    return kvs_test_gauss(&rng);
}


/* ---- dequantization of blocks written by hand ------------------------- */

static void
test_q4_0_by_hand(void **state)
{
    size_t   i;
    float    y[BLK];
    uint8_t  b[18];

    /* d = 0.5 (f16 0x3800); x = d * (nibble - 8) */
    memset(b, 0x88, sizeof(b));
    put16(b, 0x3800);
    b[2] = 0x0f;            /* x[0] = 0.5 * 7 = 3.5, x[16] = 0.5 * -8 */
    b[3] = 0x98;            /* x[1] = 0.5 * 0 = 0, x[17] = 0.5 * 1 */

    kvs_q4_0_dequantize(b, y, BLK);

    assert_true(y[0] == 3.5f);
    assert_true(y[16] == -4.0f);
    assert_true(y[1] == 0.0f);
    assert_true(y[17] == 0.5f);

    for (i = 2; i < 16; i++) {
        assert_true(y[i] == 0.0f && y[i + 16] == 0.0f);
    }
}


static void
test_q4_1_by_hand(void **state)
{
    size_t   i;
    float    y[BLK];
    uint8_t  b[20];

    /* d = 0.25 (0x3400), m = -1 (0xbc00); x = d * nibble + m */
    memset(b, 0, sizeof(b));
    put16(b, 0x3400);
    put16(b + 2, 0xbc00);
    b[4] = 0xf0;            /* x[0] = -1, x[16] = 0.25 * 15 - 1 = 2.75 */
    b[5] = 0x43;            /* x[1] = 0.75 - 1 = -0.25, x[17] = 1 - 1 */

    kvs_q4_1_dequantize(b, y, BLK);

    assert_true(y[0] == -1.0f);
    assert_true(y[16] == 2.75f);
    assert_true(y[1] == -0.25f);
    assert_true(y[17] == 0.0f);

    for (i = 2; i < 16; i++) {
        assert_true(y[i] == -1.0f && y[i + 16] == -1.0f);
    }
}


static void
test_q5_0_by_hand(void **state)
{
    size_t   i;
    float    y[BLK];
    uint8_t  b[22];

    /* d = 1 (0x3c00); qh = 0x00010002 little-endian: bit 1 gives
     * element 1 its fifth bit, bit 16 element 16; x = d * (q - 16) */
    memset(b, 0, sizeof(b));
    put16(b, 0x3c00);
    b[2] = 0x02;
    b[4] = 0x01;
    b[6] = 0x3f;            /* x[0] = 15 - 16 = -1, x[16] = 19 - 16 = 3 */
    b[7] = 0x05;            /* x[1] = 21 - 16 = 5, x[17] = 0 - 16 */

    kvs_q5_0_dequantize(b, y, BLK);

    assert_true(y[0] == -1.0f);
    assert_true(y[16] == 3.0f);
    assert_true(y[1] == 5.0f);
    assert_true(y[17] == -16.0f);

    for (i = 2; i < 16; i++) {
        assert_true(y[i] == -16.0f && y[i + 16] == -16.0f);
    }
}


static void
test_q5_1_by_hand(void **state)
{
    size_t   i;
    float    y[BLK];
    uint8_t  b[24];

    /* d = 0.5 (0x3800), m = 2 (0x4000); qh bit 31 gives element 31 its
     * fifth bit; x = d * q + m */
    memset(b, 0, sizeof(b));
    put16(b, 0x3800);
    put16(b + 2, 0x4000);
    b[7] = 0x80;
    b[8 + 15] = 0xf1;       /* x[15] = 0.5 + 2, x[31] = 0.5 * 31 + 2 */

    kvs_q5_1_dequantize(b, y, BLK);

    assert_true(y[15] == 2.5f);
    assert_true(y[31] == 17.5f);

    for (i = 0; i < 15; i++) {
        assert_true(y[i] == 2.0f && y[i + 16] == 2.0f);
    }
}


/* ---- zero blocks, extreme scales ---------------------------------------- */

static void
test_zero(void **state)
{
    size_t   k, i;
    float    x[BLK], y[BLK];
    uint8_t  b[24], want[24];

    memset(x, 0, sizeof(x));

    for (k = 0; k < NTYPES; k++) {
        memset(b, 0, sizeof(b));
        types[k].deq(b, y, BLK);

        for (i = 0; i < BLK; i++) {
            assert_true(y[i] == 0.0f);
        }

        /* d = 0, id = 0: every q is trunc(offset + 0.5), the middle
         * level for _0 (8: 0x88 bytes; 16: all fifth bits set, low
         * nibbles 0), 0 for _1 (m = 0).  A _0 block's d is 0 / -8, which
         * is -0 (f16 0x8000), as numpy stores it */
        memset(want, 0, sizeof(want));

        switch (types[k].type) {
        case KVS_GGML_Q4_0:
            put16(want, 0x8000);
            memset(want + 2, 0x88, 16);
            break;
        case KVS_GGML_Q5_0:
            put16(want, 0x8000);
            memset(want + 2, 0xff, 4);
            break;
        default:
            break;
        }

        memset(b, 0xa5, sizeof(b));
        types[k].quant(x, b, BLK);
        assert_memory_equal(b, want, types[k].bytes);
    }
}


static void
test_extreme_scales(void **state)
{
    float    y[BLK];
    uint8_t  b[24];

    /* Q4_0, d = f16 max 65504: nibbles 0 and 15 */
    memset(b, 0xf0, 18);
    put16(b, 0x7bff);
    kvs_q4_0_dequantize(b, y, BLK);
    assert_true(y[0] == -524032.0f);          /* 65504 * -8 */
    assert_true(y[16] == 458528.0f);          /* 65504 * 7 */

    /* the smallest subnormal, 2^-24: -8 * 2^-24 = -2^-21 */
    put16(b, 0x0001);
    kvs_q4_0_dequantize(b, y, BLK);
    assert_true(y[0] == ldexpf(-1.0f, -21));
    assert_true(y[16] == ldexpf(7.0f, -24));

    /* a negative d, -2: nibble 0 is +16, nibble 15 is -14 */
    put16(b, 0xc000);
    kvs_q4_0_dequantize(b, y, BLK);
    assert_true(y[0] == 16.0f);
    assert_true(y[16] == -14.0f);

    /* Q4_1, d = m = 65504, nibble 15: 65504 * 15 + 65504 = 1048064 */
    memset(b, 0xff, 20);
    put16(b, 0x7bff);
    put16(b + 2, 0x7bff);
    kvs_q4_1_dequantize(b, y, BLK);
    assert_true(y[0] == 1048064.0f);

    /* m = -65504 absorbs 15 * 2^-24 in f32: the sum is taken after the
     * product, not the other way round */
    put16(b, 0x0001);
    put16(b + 2, 0xfbff);
    kvs_q4_1_dequantize(b, y, BLK);
    assert_true(y[31] == -65504.0f);

    /* Q5_0, d = 65504, all fifth bits and nibbles set: 65504 * 15 */
    memset(b, 0xff, 22);
    put16(b, 0x7bff);
    kvs_q5_0_dequantize(b, y, BLK);
    assert_true(y[5] == 982560.0f);

    /* Q5_1, d = -0.5, m = 0: level 31 is -15.5 */
    memset(b, 0xff, 24);
    put16(b, 0xb800);
    put16(b + 2, 0x0000);
    kvs_q5_1_dequantize(b, y, BLK);
    assert_true(y[20] == -15.5f);
}


/* ---- quantization of blocks worked by hand ------------------------------ */

static void
test_quantize_by_hand(void **state)
{
    size_t   i;
    float    x[BLK];
    uint8_t  b[24], want[24];

    /* Q4_0: x = i - 8 in both halves; the first largest |x| is x[0] =
     * -8, so d = -8 / -8 = 1 and q = trunc(x + 8.5) = i */
    for (i = 0; i < 16; i++) {
        x[i] = (float) i - 8.0f;
        x[i + 16] = (float) i - 8.0f;
        want[2 + i] = (uint8_t) (i | i << 4);
    }

    put16(want, 0x3c00);
    kvs_q4_0_quantize(x, b, BLK);
    assert_memory_equal(b, want, 18);

    /* Q4_0 rounding, d = 1: 0.5 -> trunc(9.0) = 9 (halves go up), -0.5
     * -> 8 (so to 0, up again), 7.6 -> 16 clipped to 15, 2.49 -> 10,
     * -2.5 -> 6; zeros -> 8 */
    memset(x, 0, sizeof(x));
    x[0] = -8.0f;
    x[1] = 0.5f;
    x[2] = -0.5f;
    x[3] = 7.6f;
    x[4] = 2.49f;
    x[5] = -2.5f;
    memset(want, 0x88, 18);
    put16(want, 0x3c00);
    want[2] = 0x80;
    want[3] = 0x89;
    want[4] = 0x88;
    want[5] = 0x8f;
    want[6] = 0x8a;
    want[7] = 0x86;
    kvs_q4_0_quantize(x, b, BLK);
    assert_memory_equal(b, want, 18);

    /* Q4_0, equal |x| of both signs: the first, +4, sets d = 4 / -8 =
     * -0.5 (0xb800); then -4 * -2 + 8.5 = 16.5 -> 16, clipped to 15, so
     * -4 comes back as -0.5 * 7 = -3.5 */
    memset(x, 0, sizeof(x));
    x[0] = 4.0f;
    x[1] = -4.0f;
    memset(want, 0x88, 18);
    put16(want, 0xb800);
    want[2] = 0x80;
    want[3] = 0x8f;
    kvs_q4_0_quantize(x, b, BLK);
    assert_memory_equal(b, want, 18);

    /* Q4_1: x = i, then 15 - i: min 0, max 15, d = 15 / 15 = 1, m = 0,
     * q = trunc(x + 0.5) = x; one half-way value, 2.5 -> 3 */
    for (i = 0; i < 16; i++) {
        x[i] = (float) i;
        x[i + 16] = 15.0f - (float) i;
        want[4 + i] = (uint8_t) (i | (15 - i) << 4);
    }

    x[18] = 2.5f;                           /* was 13 */
    want[4 + 2] = (uint8_t) (2 | 3 << 4);
    put16(want, 0x3c00);
    put16(want + 2, 0x0000);
    kvs_q4_1_quantize(x, b, BLK);
    assert_memory_equal(b, want, 20);

    /* Q5_0: x = i - 16; x[0] = -16 gives d = 1, q = trunc(x + 16.5) = i:
     * low nibbles j | j << 4, fifth bits those of 16..31 (qh 0xffff0000) */
    for (i = 0; i < BLK; i++) {
        x[i] = (float) i - 16.0f;
    }

    put16(want, 0x3c00);
    want[2] = 0x00;
    want[3] = 0x00;
    want[4] = 0xff;
    want[5] = 0xff;

    for (i = 0; i < 16; i++) {
        want[6 + i] = (uint8_t) (i | i << 4);
    }

    kvs_q5_0_quantize(x, b, BLK);
    assert_memory_equal(b, want, 22);

    /* Q5_1: x = i, min 0, max 31: d = 1, m = 0, q = i: the same levels */
    for (i = 0; i < BLK; i++) {
        x[i] = (float) i;
    }

    put16(want, 0x3c00);
    put16(want + 2, 0x0000);
    want[4] = 0x00;
    want[5] = 0x00;
    want[6] = 0xff;
    want[7] = 0xff;

    for (i = 0; i < 16; i++) {
        want[8 + i] = (uint8_t) (i | i << 4);
    }

    kvs_q5_1_quantize(x, b, BLK);
    assert_memory_equal(b, want, 24);
}


/* ---- round trips, rows of blocks ---------------------------------------- */

#define NB  64                      /* blocks per round trip */

static void
test_round_trip(void **state)
{
    size_t          k, b, i, s;
    float           x[NB * BLK], y[NB * BLK], d, m, e, bound, scale, se;
    float           rmse[NTYPES];
    unsigned        q, top, off;
    uint8_t         buf[NB * 24];
    const uint8_t  *blk;
    const ltype_t  *t;

    static const float  scales[] = { 1.0f, 1e-3f, 300.0f };

    for (k = 0; k < NTYPES; k++) {
        t = &types[k];
        top = (1u << t->bits) - 1;
        off = t->affine ? 0 : 1u << (t->bits - 1);

        for (s = 0; s < sizeof(scales) / sizeof(scales[0]); s++) {
            scale = scales[s];
            rng = 0x9e3779b97f4a7c15ULL + s;
            se = 0.0f;

            for (i = 0; i < NB * BLK; i++) {
                x[i] = gauss() * scale + (s == 2 ? 100.0f : 0.0f);
            }

            t->quant(x, buf, NB * BLK);
            t->deq(buf, y, NB * BLK);

            for (b = 0; b < NB; b++) {
                blk = buf + b * t->bytes;
                d = fabsf(get16(blk));
                m = t->affine ? fabsf(get16(blk + 2)) : 0.0f;
                assert_true(d > 0.0f);

                for (i = 0; i < BLK; i++) {
                    q = level(t, blk, i);
                    e = fabsf(y[b * BLK + i] - x[b * BLK + i]);
                    se += e * e;

                    /* half a step, plus what rounding d (and m) to f16
                     * moved the level (2^-11 relative each); a _0
                     * block's top level also holds what is clipped to
                     * it (up to a whole step) */
                    bound = 0.5f * d + ldexpf(m + (float) top * d, -10);

                    if (!t->affine && q == top) {
                        bound += 0.5f * d;
                    }

                    assert_true(e <= bound);

                    /* y is d * (q - off) [+ m], q read from the bytes */
                    assert_true(y[b * BLK + i]
                                == get16(blk) * (float) ((int) q - (int) off)
                                   + (t->affine ? get16(blk + 2) : 0.0f));
                }
            }

            if (s == 0) {
                rmse[k] = sqrtf(se / (NB * BLK));
            }
        }
    }

    /* on N(0, 1): a step is about 2.2 sigma / (levels / 2); its error
     * RMS is step / sqrt(12): ~0.08 for 4 bits, half that for 5 bits */
    for (k = 0; k < NTYPES; k++) {
        print_message("%s round-trip RMSE on N(0,1): %.4f\n", types[k].name,
                      rmse[k]);
    }

    assert_true(rmse[0] < 0.1f && rmse[1] < 0.1f);
    assert_true(rmse[2] < 0.05f && rmse[3] < 0.05f);
    assert_true(rmse[2] < 0.6f * rmse[0] && rmse[3] < 0.6f * rmse[1]);
    assert_true(rmse[1] < rmse[0] && rmse[3] < rmse[2]);
}


static void
test_rows(void **state)
{
    size_t          k, b, i;
    float           x[8 * BLK], y[8 * BLK], z[BLK];
    uint8_t         row[8 * 24], one[24];
    kvs_err_t       err;
    const ltype_t  *t;

    rng = 7;

    for (i = 0; i < 8 * BLK; i++) {
        x[i] = gauss() * (float) (1 + i / BLK);
    }

    for (k = 0; k < NTYPES; k++) {
        t = &types[k];

        /* a row of 8 blocks is 8 blocks side by side, both ways */
        assert_int_equal(kvs_quant_quantize(t->type, x, row, 8 * BLK, &err),
                         KVS_OK);
        assert_int_equal(kvs_quant_dequantize(t->type, row, y, 8 * BLK,
                                              &err), KVS_OK);

        for (b = 0; b < 8; b++) {
            t->quant(x + b * BLK, one, BLK);
            assert_memory_equal(row + b * t->bytes, one, t->bytes);
            t->deq(one, z, BLK);
            assert_memory_equal(y + b * BLK, z, sizeof(z));
        }

        assert_int_equal(kvs_ggml_type_info(t->type)->size, t->bytes);
        assert_int_equal(kvs_ggml_type_info(t->type)->block, BLK);
    }
}


/* NaN and inf give some block, without UB (the asan build checks) */
static void
test_not_finite(void **state)
{
    size_t   k, i;
    float    x[BLK], y[BLK];
    uint8_t  b[24], want[24];

    for (i = 0; i < BLK; i++) {
        x[i] = (float) i;
    }

    x[3] = NAN;
    x[9] = INFINITY;
    x[10] = -INFINITY;

    for (k = 0; k < NTYPES; k++) {
        types[k].quant(x, b, BLK);
        types[k].deq(b, y, BLK);
    }

    /* x = i * 2^-140: d is subnormal in f32 (_0: -31 * 2^-140 / 8 or
     * 16; _1: 31 * 2^-140 / 15 or 31), 1 / d overflows to inf, so x * id
     * is +-inf (0 * inf NaN for x[0]), which numpy's float -> uint8 cast
     * makes 0 on x86-64: every level 0; d itself rounds to f16 -0 for
     * _0, +0 for _1, and m (x[0] = 0) to 0 */
    for (i = 0; i < BLK; i++) {
        x[i] = ldexpf((float) i, -140);
    }

    for (k = 0; k < NTYPES; k++) {
        memset(want, 0, sizeof(want));
        want[1] = types[k].affine ? 0x00 : 0x80;
        memset(b, 0xa5, sizeof(b));
        types[k].quant(x, b, BLK);
        assert_memory_equal(b, want, types[k].bytes);
    }
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_q4_0_by_hand),
        cmocka_unit_test(test_q4_1_by_hand),
        cmocka_unit_test(test_q5_0_by_hand),
        cmocka_unit_test(test_q5_1_by_hand),
        cmocka_unit_test(test_zero),
        cmocka_unit_test(test_extreme_scales),
        cmocka_unit_test(test_quantize_by_hand),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_not_finite),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
