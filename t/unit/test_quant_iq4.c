/*
 * test_quant_iq4: IQ4_NL and IQ4_XS (src/model/kvs_quant_iq4.c) against
 * blocks worked out by hand from the layout, all-zero blocks, extreme f16
 * scales, and our quantizer's promises: every stored index is the
 * nearest level under the scale dequantization reads, the error is
 * below that of the plain scale amax / 127 and of Q4_0 on the same
 * Gaussian data, and rows of several blocks are blocks side by side.
 * Exactness against the gguf package is t/unit/test_quant_python.py's.
 */

#include "kvs_test.h"

#include <math.h>

#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"


/* the format's 16 levels */
static const int  kv[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113
};


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


static uint64_t  rng = 1;

static float
gauss(void)
{
    return kvs_test_gauss(&rng);
}


/* IQ4_XS sub-block s's scale as stored: d * (ls - 32) */
static float
xs_scale(const uint8_t *blk, size_t s)
{
    unsigned  ls, sh;

    sh = blk[2] | blk[3] << 8;
    ls = ((blk[4 + s / 2] >> 4 * (s & 1)) & 15) | ((sh >> 2 * s) & 3) << 4;

    return get16(blk) * (float) ((int) ls - 32);
}


/* the index stored for element i (0..31) of 16 bytes qs */
static unsigned
nib(const uint8_t *qs, size_t i)
{
    return i < 16 ? (qs[i] & 15u) : (qs[i - 16] >> 4);
}


/* ---- dequantization of blocks written by hand ------------------------- */

static void
test_nl_by_hand(void **state)
{
    size_t   i;
    float    y[32];
    uint8_t  b[18];

    /* d = 0.5 (0x3800); x = d * kv[index] */
    memset(b, 0x99, sizeof(b));             /* kv[9] = 13: 6.5 */
    put16(b, 0x3800);
    b[2] = 0x80;                /* x[0] = 0.5 * -127, x[16] = 0.5 * 1 */
    b[3] = 0xf7;                /* x[1] = 0.5 * -10, x[17] = 0.5 * 113 */

    kvs_iq4_nl_dequantize(b, y, 32);

    assert_true(y[0] == -63.5f);
    assert_true(y[16] == 0.5f);
    assert_true(y[1] == -5.0f);
    assert_true(y[17] == 56.5f);

    for (i = 2; i < 16; i++) {
        assert_true(y[i] == 6.5f && y[i + 16] == 6.5f);
    }
}


static void
test_xs_by_hand(void **state)
{
    size_t   i;
    float    y[256];
    uint8_t  b[136];

    /*
     * d = 1 (0x3c00); 6-bit scales ls (low 4 bits in scales_l, nibble
     * s & 1 of byte s / 2; high 2 bits at bits 2s of scales_h), minus 32:
     *   s0: ls 0  -> -32   (l 0,  h 0)
     *   s1: ls 63 ->  31   (l 15, h 3)
     *   s2: ls 33 ->   1   (l 1,  h 2)
     *   s3..s7: ls 32 -> 0 (l 0,  h 2)
     * scales_l = f0 01 00 00; scales_h = 0b10101010 10 10 11 00 = 0xaaac
     */
    memset(b, 0x88, sizeof(b));             /* kv[8] = 1 everywhere */
    put16(b, 0x3c00);
    put16(b + 2, 0xaaac);
    b[4] = 0xf0;
    b[5] = 0x01;
    b[6] = 0x00;
    b[7] = 0x00;
    b[8] = 0x80;            /* s0: x[0] = -32 * -127, x[16] = -32 * 1 */
    b[8 + 16] = 0x0f;       /* s1: x[32] = 31 * 113, x[48] = 31 * -127 */
    b[8 + 32] = 0x5a;       /* s2: x[64] = 1 * 25, x[80] = 1 * -35 */

    kvs_iq4_xs_dequantize(b, y, 256);

    assert_true(y[0] == 4064.0f);
    assert_true(y[16] == -32.0f);
    assert_true(y[1] == -32.0f && y[31] == -32.0f);
    assert_true(y[32] == 3503.0f);
    assert_true(y[48] == -3937.0f);
    assert_true(y[33] == 31.0f && y[63] == 31.0f);
    assert_true(y[64] == 25.0f);
    assert_true(y[80] == -35.0f);
    assert_true(y[65] == 1.0f && y[95] == 1.0f);

    for (i = 96; i < 256; i++) {
        assert_true(y[i] == 0.0f);
    }
}


static void
test_zero_and_extremes(void **state)
{
    size_t   i;
    float    x[256], y[256];
    uint8_t  b[136];

    /* all-zero bytes: d = 0 (and for XS every ls - 32 = -32, times 0) */
    memset(b, 0, sizeof(b));
    kvs_iq4_nl_dequantize(b, y, 32);

    for (i = 0; i < 32; i++) {
        assert_true(y[i] == 0.0f);
    }

    kvs_iq4_xs_dequantize(b, y, 256);

    for (i = 0; i < 256; i++) {
        assert_true(y[i] == 0.0f);
    }

    /* zeros quantize to a zero scale, and back to zeros */
    memset(x, 0, sizeof(x));
    memset(b, 0xa5, sizeof(b));
    kvs_iq4_nl_quantize(x, b, 32);
    assert_true(get16(b) == 0.0f);
    kvs_iq4_nl_dequantize(b, y, 32);

    for (i = 0; i < 32; i++) {
        assert_true(y[i] == 0.0f);
    }

    memset(b, 0xa5, sizeof(b));
    kvs_iq4_xs_quantize(x, b, 256);
    assert_true(get16(b) == 0.0f);
    kvs_iq4_xs_dequantize(b, y, 256);

    for (i = 0; i < 256; i++) {
        assert_true(y[i] == 0.0f);
    }

    /* d = f16 max: 65504 * -127 and 65504 * 113, exact in f32 */
    memset(b, 0xf0, 18);
    put16(b, 0x7bff);
    kvs_iq4_nl_dequantize(b, y, 32);
    assert_true(y[0] == -8319008.0f);
    assert_true(y[16] == 7401952.0f);

    /* d = -2: the grid's ends swap sides */
    put16(b, 0xc000);
    kvs_iq4_nl_dequantize(b, y, 32);
    assert_true(y[0] == 254.0f);
    assert_true(y[16] == -226.0f);

    /* d = 2^-24, the smallest subnormal */
    put16(b, 0x0001);
    kvs_iq4_nl_dequantize(b, y, 32);
    assert_true(y[16] == ldexpf(113.0f, -24));

    /* XS: d = 65504, every ls 63 (31), every index 15 (113): dl =
     * 65504 * 31 = 2030624 (exact), times 113 = 229460512, which needs
     * 26 significant bits: f32 rounds it, as the product below does */
    memset(b, 0xff, 136);
    put16(b, 0x7bff);
    kvs_iq4_xs_dequantize(b, y, 256);
    assert_true(y[0] == 2030624.0f * 113.0f);
    assert_true(y[255] == y[0]);
}


/* ---- the quantizer's promises ----------------------------------------- */

/* squared error of the block under scale d, each element at its nearest
 * level (the best any index choice can do for d) */
static double
best_err(const float *x, float d)
{
    int     k;
    size_t  i;
    double  err, e, m;

    err = 0.0;

    for (i = 0; i < 32; i++) {
        m = INFINITY;

        for (k = 0; k < 16; k++) {
            e = (double) x[i] - (double) (d * (float) kv[k]);
            m = fmin(m, e * e);
        }

        err += m;
    }

    return err;
}


#define NSB  64                             /* IQ4_XS super-blocks */

static void
test_quantize(void **state)
{
    size_t          s, b, i, j;
    float           x[NSB * 256], y[NSB * 256], d, xm, sc;
    double          se, e, naive, q4;
    uint8_t         nl[NSB * 8 * 18], xs[NSB * 136], q40[NSB * 8 * 18];
    const float    *xb, *yb;
    const uint8_t  *blk;

    static const float  scales[] = { 1.0f, 1e-3f, 40.0f };

    for (s = 0; s < sizeof(scales) / sizeof(scales[0]); s++) {
        rng = 11 + s;

        for (i = 0; i < NSB * 256; i++) {
            x[i] = gauss() * scales[s];
        }

        /* IQ4_NL: each index is the nearest level for the stored d */
        kvs_iq4_nl_quantize(x, nl, NSB * 256);
        kvs_iq4_nl_dequantize(nl, y, NSB * 256);

        se = 0.0;
        naive = 0.0;

        for (b = 0; b < NSB * 8; b++) {
            d = get16(nl + b * 18);
            e = 0.0;

            for (i = 0; i < 32; i++) {
                assert_true(y[b * 32 + i]
                            == d * (float) kv[nib(nl + b * 18 + 2, i)]);
                e += ((double) y[b * 32 + i] - x[b * 32 + i])
                     * ((double) y[b * 32 + i] - x[b * 32 + i]);
            }

            assert_true(e <= best_err(x + b * 32, d) * (1 + 1e-6) + 1e-30);
            se += e;

            /* the plain scale: the largest |x| on level -127 */
            xm = 0.0f;

            for (i = 0; i < 32; i++) {
                xm = fabsf(x[b * 32 + i]) > fabsf(xm) ? x[b * 32 + i] : xm;
            }

            naive += best_err(x + b * 32,
                              kvs_f16_to_f32(kvs_f32_to_f16(xm / -127.0f)));
        }

        /* the search beats the plain scale, and Q4_0 (same 4.5 bits) */
        kvs_q4_0_quantize(x, q40, NSB * 256);
        kvs_q4_0_dequantize(q40, y, NSB * 256);
        q4 = 0.0;

        for (i = 0; i < NSB * 256; i++) {
            q4 += ((double) y[i] - x[i]) * ((double) y[i] - x[i]);
        }

        sc = scales[s];

        if (s == 0) {
            print_message("IQ4_NL round-trip RMSE on N(0,1): %.4f (plain "
                          "scale %.4f, Q4_0 %.4f)\n",
                          sqrt(se / (NSB * 256)), sqrt(naive / (NSB * 256)),
                          sqrt(q4 / (NSB * 256)));
            assert_true(sqrt(se / (NSB * 256)) < 0.08);
        }

        assert_true(se < naive);
        assert_true(se < 0.8 * q4);

        /* IQ4_XS: the same, per sub-block under d * (ls - 32) */
        kvs_iq4_xs_quantize(x, xs, NSB * 256);
        kvs_iq4_xs_dequantize(xs, y, NSB * 256);

        se = 0.0;

        for (b = 0; b < NSB; b++) {
            for (i = 0; i < 8; i++) {
                blk = xs + b * 136;
                xb = x + b * 256 + 32 * i;
                yb = y + b * 256 + 32 * i;
                d = xs_scale(blk, i);
                e = 0.0;

                for (j = 0; j < 32; j++) {
                    assert_true(yb[j]
                                == d * (float) kv[nib(blk + 8 + 16 * i, j)]);
                    e += ((double) yb[j] - xb[j]) * ((double) yb[j] - xb[j]);
                }

                assert_true(e <= best_err(xb, d) * (1 + 1e-6) + 1e-30);
                se += e;
            }
        }

        if (s == 0) {
            print_message("IQ4_XS round-trip RMSE on N(0,1): %.4f\n",
                          sqrt(se / (NSB * 256)));
            assert_true(sqrt(se / (NSB * 256)) < 0.08);
        }

        assert_true(se < 0.8 * q4);
        assert_true(sqrt(se / (NSB * 256)) < 0.08 * sc);
    }
}


static void
test_rows(void **state)
{
    size_t     b, i;
    float      x[4 * 256], y[4 * 256], z[256];
    uint8_t    row[4 * 136], one[136];
    kvs_err_t  err;

    rng = 5;

    for (i = 0; i < 4 * 256; i++) {
        x[i] = gauss() * (float) (1 + i / 256);
    }

    assert_int_equal(kvs_quant_quantize(KVS_GGML_IQ4_XS, x, row, 4 * 256,
                                        &err), KVS_OK);
    assert_int_equal(kvs_quant_dequantize(KVS_GGML_IQ4_XS, row, y, 4 * 256,
                                          &err), KVS_OK);

    for (b = 0; b < 4; b++) {
        kvs_iq4_xs_quantize(x + b * 256, one, 256);
        assert_memory_equal(row + b * 136, one, 136);
        kvs_iq4_xs_dequantize(one, z, 256);
        assert_memory_equal(y + b * 256, z, sizeof(z));
    }

    assert_int_equal(kvs_quant_quantize(KVS_GGML_IQ4_NL, x, row, 8 * 32,
                                        &err), KVS_OK);
    assert_int_equal(kvs_quant_dequantize(KVS_GGML_IQ4_NL, row, y, 8 * 32,
                                          &err), KVS_OK);

    for (b = 0; b < 8; b++) {
        kvs_iq4_nl_quantize(x + b * 32, one, 32);
        assert_memory_equal(row + b * 18, one, 18);
        kvs_iq4_nl_dequantize(one, z, 32);
        assert_memory_equal(y + b * 32, z, 32 * sizeof(float));
    }

    assert_int_equal(kvs_ggml_type_info(KVS_GGML_IQ4_NL)->size, 18);
    assert_int_equal(kvs_ggml_type_info(KVS_GGML_IQ4_XS)->size, 136);
    assert_int_equal(kvs_ggml_type_info(KVS_GGML_IQ4_XS)->block, 256);

    /* XS needs whole super-blocks */
    assert_int_equal(kvs_quant_quantize(KVS_GGML_IQ4_XS, x, row, 32, &err),
                     KVS_EINVAL);
}


/* NaN and inf give some block, without UB (the asan build checks), and
 * a finite scale */
static void
test_not_finite(void **state)
{
    size_t   i;
    float    x[256], y[256];
    uint8_t  b[136];

    for (i = 0; i < 256; i++) {
        x[i] = (float) i - 100.0f;
    }

    x[3] = NAN;
    x[40] = INFINITY;
    x[41] = -INFINITY;
    x[200] = 1e30f;

    kvs_iq4_nl_quantize(x, b, 32);
    assert_true(isfinite(get16(b)));
    kvs_iq4_nl_quantize(x + 32, b, 32);
    assert_true(isfinite(get16(b)));
    kvs_iq4_nl_dequantize(b, y, 32);

    kvs_iq4_xs_quantize(x, b, 256);
    assert_true(isfinite(get16(b)));
    kvs_iq4_xs_dequantize(b, y, 256);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_nl_by_hand),
        cmocka_unit_test(test_xs_by_hand),
        cmocka_unit_test(test_zero_and_extremes),
        cmocka_unit_test(test_quantize),
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_not_finite),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
