/*
 * test_quant_k: the K-quants (src/model/kvs_quant_k.c, kvs_quant_kq.c).
 *
 * Dequantization: one super-block per type written byte by byte, with a
 * different scale (and min) in every sub-block, checked against values
 * worked out by hand (in the comments) and against the layout's formula
 * for all 256 elements; every element's bit position probed on its own;
 * all-zero blocks; extreme f16 d (largest, subnormal, inf); several
 * super-blocks in one row.  Bit-exactness against the gguf package is
 * t/unit/test_quant_python.py's (make interop).
 *
 * Quantization: the round-trip error on Gaussian data, bounded per type
 * from its bit width (see quant_bound()), on data with outliers, and
 * zero, constant, negative-only and huge or non-finite rows.
 */

#include <math.h>

#include "kvs_test.h"

#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"
#include "model/kvs_quant_k.h"


#define F16_ONE_EIGHTH  0x3000
#define F16_QUARTER     0x3400
#define F16_HALF        0x3800
#define F16_ONE         0x3c00
#define F16_MAX         0x7bff          /* 65504 */
#define F16_TINY        0x0001          /* 2^-24, the least subnormal */
#define F16_INF         0x7c00


static void
put_f16(uint8_t *p, uint16_t h)
{
    p[0] = (uint8_t) (h & 0xff);
    p[1] = (uint8_t) (h >> 8);
}


/* ---- Q2_K --------------------------------------------------------------- */

/*
 * d = 0.5, dmin = 0.25; sub-block j (16 elements) has scale j and min
 * 15 - j (byte j = j | (15 - j) << 4); every qs byte is 0xe4 = 11 10 01 00,
 * so element e = 128 h + 32 k + l has q = k = (e / 32) % 4:
 * x = (0.5 * j) * k - 0.25 * (15 - j).
 */
static void
q2k_block(uint8_t *b)
{
    int  j;

    memset(b, 0, KVS_Q2_K_BYTES);

    for (j = 0; j < 16; j++) {
        b[KVS_Q2_K_SCALES + j] = (uint8_t) (j | ((15 - j) << 4));
    }

    memset(b + KVS_Q2_K_QS, 0xe4, 64);
    put_f16(b + KVS_Q2_K_D, F16_HALF);
    put_f16(b + KVS_Q2_K_DMIN, F16_QUARTER);
}


static void
test_q2k_block(void **state)
{
    int      e, j, k;
    float    x[KVS_QK_K];
    uint8_t  b[KVS_Q2_K_BYTES];

    q2k_block(b);
    kvs_q2_k_dequantize(b, x, KVS_QK_K);

    assert_true(x[0] == -3.75f);     /* j 0, k 0: 0 - 0.25 * 15 */
    assert_true(x[100] == 6.75f);    /* j 6, k 3: 3 * 3 - 0.25 * 9 */
    assert_true(x[170] == 3.75f);    /* j 10, k 1: 5 * 1 - 0.25 * 5 */
    assert_true(x[255] == 22.5f);    /* j 15, k 3: 7.5 * 3 - 0 */

    for (e = 0; e < KVS_QK_K; e++) {
        j = e / 16;
        k = (e / 32) % 4;
        assert_true(x[e] == 0.5f * (float) (j * k) - 0.25f * (float) (15 - j));
    }
}


/* ---- Q3_K --------------------------------------------------------------- */

/*
 * d = 0.25; scale j = j - 8, stored u = j + 24: low nibbles 8..15 then
 * 0..7, high 2 bits 1 for j < 8 and 2 for j >= 8, so bytes 0..7 are
 * 0x08 0x19 .. 0x7f and bytes 8..11 are 1 | 1 << 2 | 2 << 4 | 2 << 6 =
 * 0xa5.  qs bytes 0xe4 give low bits k = (e / 32) % 4; hmask bytes 0x55
 * set the third bit of groups g = e / 32 even, so odd groups subtract 4:
 * q by group 0, -3, 2, -1, 0, -3, 2, -1.
 */
static const uint8_t  q3k_scales[12] = {
    0x08, 0x19, 0x2a, 0x3b, 0x4c, 0x5d, 0x6e, 0x7f, 0xa5, 0xa5, 0xa5, 0xa5
};

static const int  q3k_q[8] = { 0, -3, 2, -1, 0, -3, 2, -1 };


static void
q3k_block(uint8_t *b)
{
    memset(b + KVS_Q3_K_HMASK, 0x55, 32);
    memset(b + KVS_Q3_K_QS, 0xe4, 64);
    memcpy(b + KVS_Q3_K_SCALES, q3k_scales, 12);
    put_f16(b + KVS_Q3_K_D, F16_QUARTER);
}


static void
test_q3k_block(void **state)
{
    int      e, j;
    float    x[KVS_QK_K];
    uint8_t  b[KVS_Q3_K_BYTES];

    q3k_block(b);

    for (j = 0; j < 16; j++) {
        assert_int_equal(kvs_q3k_scale_unpack(b + KVS_Q3_K_SCALES, j), j - 8);
    }

    kvs_q3_k_dequantize(b, x, KVS_QK_K);

    assert_true(x[0] == 0.0f);       /* j 0, q 0 */
    assert_true(x[40] == 4.5f);      /* j 2: 0.25 * -6 = -1.5, q -3 */
    assert_true(x[70] == -2.0f);     /* j 4: -1, q 2 */
    assert_true(x[200] == 2.0f);     /* j 12: 1, q 2 */
    assert_true(x[255] == -1.75f);   /* j 15: 1.75, q -1 */

    for (e = 0; e < KVS_QK_K; e++) {
        j = e / 16;
        assert_true(x[e] == (0.25f * (float) (j - 8)) * (float) q3k_q[e / 32]);
    }
}


/* ---- Q4_K and Q5_K ------------------------------------------------------ */

/*
 * d = 0.5, dmin = 1; 6-bit scales and mins, high bits used in j >= 4:
 *
 *   j    0  1  2   3   4   5   6   7
 *   sc   1  2  3  63  17  33  48  62
 *   m    0  5 10  20  40  50  60  63
 *
 * bytes 0..3: sc_j | (sc_j+4 >> 4) << 6 = 0x41 0x82 0xc3 0xff
 * bytes 4..7: m_j | (m_j+4 >> 4) << 6   = 0x80 0xc5 0xca 0xd4
 * bytes 8..11: (sc_j+4 & 15) | (m_j+4 & 15) << 4 = 0x81 0x21 0xc0 0xfe
 *
 * qs[32 c + l] = (l & 15) | (15 - (l & 15)) << 4: q = l % 16 in even
 * sub-blocks (low nibbles), 15 - l % 16 in odd ones.
 */
static const uint8_t  qk_scales[12] = {
    0x41, 0x82, 0xc3, 0xff, 0x80, 0xc5, 0xca, 0xd4, 0x81, 0x21, 0xc0, 0xfe
};

static const uint8_t  qk_sc[8] = { 1, 2, 3, 63, 17, 33, 48, 62 };
static const uint8_t  qk_m[8] = { 0, 5, 10, 20, 40, 50, 60, 63 };


static void
q4k_block(uint8_t *b, size_t qs_off)
{
    int  i;

    put_f16(b, F16_HALF);
    put_f16(b + 2, F16_ONE);
    memcpy(b + 4, qk_scales, 12);

    for (i = 0; i < 128; i++) {
        b[qs_off + i] = (uint8_t) ((i & 15) | ((15 - (i & 15)) << 4));
    }
}


static int
q4k_q(int e)
{
    return (e / 32) % 2 == 0 ? e % 16 : 15 - e % 16;
}


static void
test_q4k_block(void **state)
{
    int      e, j;
    float    x[KVS_QK_K];
    uint8_t  b[KVS_Q4_K_BYTES], sc, m, packed[12];

    q4k_block(b, KVS_Q4_K_QS);

    for (j = 0; j < 8; j++) {
        kvs_qk_scales_unpack(b + KVS_Q4_K_SCALES, j, &sc, &m);
        assert_int_equal(sc, qk_sc[j]);
        assert_int_equal(m, qk_m[j]);
    }

    kvs_qk_scales_pack(packed, qk_sc, qk_m);
    assert_memory_equal(packed, qk_scales, 12);

    kvs_q4_k_dequantize(b, x, KVS_QK_K);

    assert_true(x[0] == 0.0f);       /* j 0: 0.5 * 0 - 0 */
    assert_true(x[33] == 9.0f);      /* j 1, q 14: 1 * 14 - 5 */
    assert_true(x[100] == 326.5f);   /* j 3, q 11: 31.5 * 11 - 20 */
    assert_true(x[140] == 62.0f);    /* j 4, q 12: 8.5 * 12 - 40 */
    assert_true(x[170] == 32.5f);    /* j 5, q 5: 16.5 * 5 - 50 */
    assert_true(x[200] == 132.0f);   /* j 6, q 8: 24 * 8 - 60 */
    assert_true(x[255] == -63.0f);   /* j 7, q 0: 0 - 63 */

    for (e = 0; e < KVS_QK_K; e++) {
        j = e / 32;
        assert_true(x[e] == (0.5f * (float) qk_sc[j]) * (float) q4k_q(e)
                           - (float) qk_m[j]);
    }
}


/* Q5_K: the same, and qh bytes 0xaa: the fifth bit (16) in odd
 * sub-blocks */
static void
test_q5k_block(void **state)
{
    int      e, j, q;
    float    x[KVS_QK_K];
    uint8_t  b[KVS_Q5_K_BYTES];

    q4k_block(b, KVS_Q5_K_QS);
    memset(b + KVS_Q5_K_QH, 0xaa, 32);

    kvs_q5_k_dequantize(b, x, KVS_QK_K);

    assert_true(x[33] == 25.0f);     /* j 1, q 30: 1 * 30 - 5 */
    assert_true(x[100] == 830.5f);   /* j 3, q 27: 31.5 * 27 - 20 */
    assert_true(x[140] == 62.0f);    /* j 4, q 12, as in Q4_K */
    assert_true(x[170] == 296.5f);   /* j 5, q 21: 16.5 * 21 - 50 */
    assert_true(x[255] == 433.0f);   /* j 7, q 16: 31 * 16 - 63 */

    for (e = 0; e < KVS_QK_K; e++) {
        j = e / 32;
        q = q4k_q(e) + (j % 2 ? 16 : 0);
        assert_true(x[e] == (0.5f * (float) qk_sc[j]) * (float) q
                           - (float) qk_m[j]);
    }
}


/* ---- Q6_K --------------------------------------------------------------- */

/*
 * d = 0.125; int8 scales below; ql bytes 0x1f (low nibble 15, high 1),
 * qh bytes 0xe4 (2-bit fields 0, 1, 2, 3): element e = 128 h + r has
 * q = (r < 64 ? 15 : 1) | (r / 32) << 4, minus 32, by r / 32:
 * -17, -1, 1, 17.
 */
static const int8_t  q6k_sc[16] = {
    -128, -100, -64, -1, 0, 1, 2, 3, 10, 20, 40, 60, 80, 100, 120, 127
};

static const int  q6k_q[4] = { -17, -1, 1, 17 };


static void
q6k_block(uint8_t *b)
{
    memset(b + KVS_Q6_K_QL, 0x1f, 128);
    memset(b + KVS_Q6_K_QH, 0xe4, 64);
    memcpy(b + KVS_Q6_K_SCALES, q6k_sc, 16);
    put_f16(b + KVS_Q6_K_D, F16_ONE_EIGHTH);
}


static void
test_q6k_block(void **state)
{
    int      e;
    float    x[KVS_QK_K];
    uint8_t  b[KVS_Q6_K_BYTES];

    q6k_block(b);
    kvs_q6_k_dequantize(b, x, KVS_QK_K);

    assert_true(x[0] == 272.0f);     /* j 0: -16, q -17 */
    assert_true(x[40] == 8.0f);      /* j 2: -8, q -1 */
    assert_true(x[70] == 0.0f);      /* j 4: scale 0 */
    assert_true(x[100] == 4.25f);    /* j 6: 0.25, q 17 */
    assert_true(x[130] == -21.25f);  /* j 8: 1.25, q -17 */
    assert_true(x[200] == 10.0f);    /* j 12: 10, q 1 */
    assert_true(x[255] == 269.875f); /* j 15: 15.875, q 17 */

    for (e = 0; e < KVS_QK_K; e++) {
        assert_true(x[e] == (0.125f * (float) q6k_sc[e / 16])
                           * (float) q6k_q[(e % 128) / 32]);
    }
}


/* ---- every element's bits, one at a time ------------------------------- */

/*
 * A block whose every sub-block has scale 1 (and min 0), d = 1: all
 * elements dequantize to q's offset (0, or -4 / -32 for the signed
 * types).  Setting the bits of element e alone, as the layout says they
 * lie, must change x[e] alone.
 */
static void
probe_block(uint32_t type, uint8_t *b)
{
    uint8_t  one[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
    uint8_t  zero[8] = { 0 };
    int8_t   s3[16];

    memset(b, 0, KVS_Q6_K_BYTES);

    switch (type) {
    case KVS_GGML_Q2_K:
        memset(b + KVS_Q2_K_SCALES, 0x01, 16);
        put_f16(b + KVS_Q2_K_D, F16_ONE);
        break;
    case KVS_GGML_Q3_K:
        memset(s3, 1, sizeof(s3));
        kvs_q3k_scales_pack(b + KVS_Q3_K_SCALES, s3);
        put_f16(b + KVS_Q3_K_D, F16_ONE);
        break;
    case KVS_GGML_Q4_K:
    case KVS_GGML_Q5_K:
        kvs_qk_scales_pack(b + KVS_Q4_K_SCALES, one, zero);
        put_f16(b + KVS_Q4_K_D, F16_ONE);
        break;
    default:
        memset(b + KVS_Q6_K_SCALES, 1, 16);
        put_f16(b + KVS_Q6_K_D, F16_ONE);
    }
}


/* set element e's bits to their largest code; returns x[e] expected */
static float
probe_set(uint32_t type, uint8_t *b, int e)
{
    int  h, r;

    switch (type) {
    case KVS_GGML_Q2_K:
        b[KVS_Q2_K_QS + 32 * (e / 128) + e % 32] |= 3 << (2 * ((e / 32) % 4));
        return 3.0f;
    case KVS_GGML_Q3_K:
        b[KVS_Q3_K_QS + 32 * (e / 128) + e % 32] |= 3 << (2 * ((e / 32) % 4));
        b[KVS_Q3_K_HMASK + e % 32] |= 1 << (e / 32);
        return 3.0f;
    case KVS_GGML_Q4_K:
        b[KVS_Q4_K_QS + 32 * (e / 64) + e % 32] |= 15 << (4 * ((e / 32) % 2));
        return 15.0f;
    case KVS_GGML_Q5_K:
        b[KVS_Q5_K_QS + 32 * (e / 64) + e % 32] |= 15 << (4 * ((e / 32) % 2));
        b[KVS_Q5_K_QH + e % 32] |= 1 << (e / 32);
        return 31.0f;
    default:
        h = e / 128;
        r = e % 128;
        b[KVS_Q6_K_QL + 64 * h + r % 64] |= 15 << (4 * (r / 64));
        b[KVS_Q6_K_QH + 32 * h + r % 32] |= 3 << (2 * (r / 32));
        return 31.0f;
    }
}


static void
test_positions(void **state)
{
    int        t, e, i;
    float      x[KVS_QK_K], base, want;
    uint8_t    b[KVS_Q6_K_BYTES];
    kvs_err_t  err;

    static const uint32_t  types[] = {
        KVS_GGML_Q2_K, KVS_GGML_Q3_K, KVS_GGML_Q4_K, KVS_GGML_Q5_K,
        KVS_GGML_Q6_K
    };

    for (t = 0; t < 5; t++) {
        base = types[t] == KVS_GGML_Q3_K ? -4.0f
               : types[t] == KVS_GGML_Q6_K ? -32.0f : 0.0f;

        for (e = 0; e < KVS_QK_K; e++) {
            probe_block(types[t], b);
            want = probe_set(types[t], b, e);
            assert_int_equal(kvs_quant_dequantize(types[t], b, x, KVS_QK_K,
                                                  &err), KVS_OK);

            for (i = 0; i < KVS_QK_K; i++) {
                if (x[i] != (i == e ? want : base)) {
                    fail_msg("%s: element %d set, x[%d] = %g",
                             kvs_ggml_type_name(types[t]), e, i, x[i]);
                }
            }
        }
    }
}


/* ---- zero blocks, extreme d, several super-blocks ---------------------- */

static const struct {
    uint32_t  type;
    size_t    bytes;
} k_types[] = {
    { KVS_GGML_Q2_K, KVS_Q2_K_BYTES },
    { KVS_GGML_Q3_K, KVS_Q3_K_BYTES },
    { KVS_GGML_Q4_K, KVS_Q4_K_BYTES },
    { KVS_GGML_Q5_K, KVS_Q5_K_BYTES },
    { KVS_GGML_Q6_K, KVS_Q6_K_BYTES },
};

#define K_TYPES  (sizeof(k_types) / sizeof(k_types[0]))


static void
test_zero_blocks(void **state)
{
    int        e;
    size_t     t;
    float      x[KVS_QK_K];
    uint8_t    b[KVS_Q6_K_BYTES];
    kvs_err_t  err;

    for (t = 0; t < K_TYPES; t++) {
        memset(b, 0, sizeof(b));
        memset(x, 0x7f, sizeof(x));
        assert_int_equal(kvs_quant_dequantize(k_types[t].type, b, x,
                                              KVS_QK_K, &err), KVS_OK);
        for (e = 0; e < KVS_QK_K; e++) {
            assert_true(x[e] == 0.0f);
        }
    }
}


static void
test_extreme_d(void **state)
{
    float    x[KVS_QK_K];
    uint8_t  b[KVS_Q6_K_BYTES];
    uint8_t  sc[8] = { 63, 63, 63, 63, 63, 63, 63, 63 }, m[8] = { 0 };

    /* Q4_K, d = 65504, scale 63, q 15: 65504 * 63 * 15 = 61901280, exact
     * in f32 (65504 * 63 = 4126752 = 128961 * 32) */
    memset(b, 0, sizeof(b));
    put_f16(b + KVS_Q4_K_D, F16_MAX);
    kvs_qk_scales_pack(b + KVS_Q4_K_SCALES, sc, m);
    memset(b + KVS_Q4_K_QS, 0xff, 128);
    kvs_q4_k_dequantize(b, x, KVS_QK_K);
    assert_true(x[0] == 61901280.0f);
    assert_true(x[255] == 61901280.0f);

    /* d = 2^-24 (subnormal): 63 * 15 * 2^-24, exact */
    put_f16(b + KVS_Q4_K_D, F16_TINY);
    kvs_q4_k_dequantize(b, x, KVS_QK_K);
    assert_true(x[7] == ldexpf(945.0f, -24));

    /* dmin = 65504, min 63, q 0: -4126752 */
    memset(b + KVS_Q4_K_QS, 0, 128);
    put_f16(b + KVS_Q4_K_DMIN, F16_MAX);
    kvs_qk_scales_pack(b + KVS_Q4_K_SCALES, m, sc);
    kvs_q4_k_dequantize(b, x, KVS_QK_K);
    assert_true(x[3] == -4126752.0f);

    /* Q6_K, d = 65504, scale -128, q -32: 65504 * 128 * 32, exact */
    memset(b, 0, sizeof(b));
    memset(b + KVS_Q6_K_SCALES, 0x80, 16);
    put_f16(b + KVS_Q6_K_D, F16_MAX);
    kvs_q6_k_dequantize(b, x, KVS_QK_K);
    assert_true(x[0] == 65504.0f * 4096.0f);

    /* d = inf: inf * scale 0 is NaN, inf * -128 * -32 is inf (what
     * gguf gives; a file with such a d is broken, not us) */
    put_f16(b + KVS_Q6_K_D, F16_INF);
    b[KVS_Q6_K_SCALES + 1] = 0;
    kvs_q6_k_dequantize(b, x, KVS_QK_K);
    assert_true(isinf(x[0]) && x[0] > 0.0f);
    assert_true(isnan(x[16]));

    /* Q2_K with d = 65504, scale 15, q 3 and dmin = 65504, min 15 */
    memset(b, 0, sizeof(b));
    memset(b + KVS_Q2_K_SCALES, 0xff, 16);
    memset(b + KVS_Q2_K_QS, 0xff, 64);
    put_f16(b + KVS_Q2_K_D, F16_MAX);
    put_f16(b + KVS_Q2_K_DMIN, F16_MAX);
    kvs_q2_k_dequantize(b, x, KVS_QK_K);
    assert_true(x[200] == 65504.0f * 15.0f * 3.0f - 65504.0f * 15.0f);
}


/* two different super-blocks in a row convert as each on its own */
static void
test_super_blocks(void **state)
{
    size_t     t;
    float      x[3 * KVS_QK_K], y[KVS_QK_K];
    uint8_t    b[3 * KVS_Q6_K_BYTES];
    kvs_err_t  err;

    for (t = 0; t < K_TYPES; t++) {
        memset(b, 0, sizeof(b));

        switch (k_types[t].type) {
        case KVS_GGML_Q2_K:
            q2k_block(b);
            break;
        case KVS_GGML_Q3_K:
            q3k_block(b);
            break;
        case KVS_GGML_Q4_K:
            q4k_block(b, KVS_Q4_K_QS);
            break;
        case KVS_GGML_Q5_K:
            q4k_block(b, KVS_Q5_K_QS);
            memset(b + KVS_Q5_K_QH, 0x5a, 32);
            break;
        default:
            q6k_block(b);
        }

        /* the second: a probe block with element 77 set; the third:
         * zero */
        probe_block(k_types[t].type, b + k_types[t].bytes);
        (void) probe_set(k_types[t].type, b + k_types[t].bytes, 77);

        assert_int_equal(kvs_quant_dequantize(k_types[t].type, b, x,
                                              3 * KVS_QK_K, &err), KVS_OK);

        assert_int_equal(kvs_quant_dequantize(k_types[t].type, b, y,
                                              KVS_QK_K, &err), KVS_OK);
        assert_memory_equal(x, y, sizeof(y));
        assert_int_equal(kvs_quant_dequantize(k_types[t].type,
                                              b + k_types[t].bytes, y,
                                              KVS_QK_K, &err), KVS_OK);
        assert_memory_equal(x + KVS_QK_K, y, sizeof(y));
        assert_false(x[KVS_QK_K + 77] == x[KVS_QK_K + 78]);
        assert_true(x[2 * KVS_QK_K] == 0.0f);
        assert_true(x[3 * KVS_QK_K - 1] == 0.0f);

        /* not whole super-blocks */
        assert_int_equal(kvs_quant_dequantize(k_types[t].type, b, x,
                                              KVS_QK_K + 32, &err),
                         KVS_EINVAL);
    }
}


/* ---- quantization ------------------------------------------------------- */

#define ROWS  (32 * KVS_QK_K)            /* 32 super-blocks per check */

static float    qx[ROWS], qy[ROWS];
static uint8_t  qb[ROWS / KVS_QK_K * KVS_Q6_K_BYTES];


/* deterministic N(0, 1) (xorshift64 and Box-Muller) */
static uint64_t  rng_state;

static double
rng_u01(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;

    return ((double) (rng_state >> 11) + 0.5) / 9007199254740992.0;
}


static float
rng_gauss(void)
{
    double  u, v;

    u = rng_u01();
    v = rng_u01();

    return (float) (sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}


/* bits per element's integer, the type's q range */
static int
k_bits(uint32_t type)
{
    switch (type) {
    case KVS_GGML_Q2_K:
        return 2;
    case KVS_GGML_Q3_K:
        return 3;
    case KVS_GGML_Q4_K:
        return 4;
    case KVS_GGML_Q5_K:
        return 5;
    default:
        return 6;
    }
}


/* elements per sub-block */
static int
k_sub(uint32_t type)
{
    return type == KVS_GGML_Q4_K || type == KVS_GGML_Q5_K ? 32 : 16;
}


/*
 * The bound on RMSE / std for N(0, 1) data: a plain uniform quantizer
 * with 2^b levels over a sub-block's range has an error of step / sqrt(12),
 * step = range / (2^b - 1); the range of 16 or 32 Gaussian samples is
 * 3.5 to 4.1 std on average (the signed types span 2 max|x|, about the
 * same), so 4.5 std bounds it with margin.  A quantizer choosing its
 * scales well stays below (measured: 0.60 to 0.83 of this bound, see
 * docs/quantization.md).
 */
static double
quant_bound(uint32_t type)
{
    return 4.5 / (((1 << k_bits(type)) - 1) * sqrt(12.0));
}


/* quantize qx[n] through the table, dequantize into qy; RMSE */
static double
round_trip(uint32_t type, size_t n)
{
    size_t     i;
    double     s, r;
    kvs_err_t  err;

    memset(qb, 0xa5, sizeof(qb));
    assert_int_equal(kvs_quant_quantize(type, qx, qb, n, &err), KVS_OK);
    assert_int_equal(kvs_quant_dequantize(type, qb, qy, n, &err), KVS_OK);

    s = 0.0;
    for (i = 0; i < n; i++) {
        assert_true(isfinite(qy[i]));
        r = (double) qy[i] - (double) qx[i];
        s += r * r;
    }

    return sqrt(s / (double) n);
}


static void
test_quant_gauss(void **state)
{
    size_t  t, i, k;
    double  e, scale, unit[K_TYPES];

    static const double  scales[] = { 1.0, 1e-3, 300.0 };

    for (t = 0; t < K_TYPES; t++) {
        for (k = 0; k < 3; k++) {
            scale = scales[k];
            rng_state = 0x9e3779b97f4a7c15ULL + t;

            for (i = 0; i < ROWS; i++) {
                qx[i] = (float) (rng_gauss() * scale);
            }

            /* the data's std is scale, give or take 1% over 8192 */
            e = round_trip(k_types[t].type, ROWS) / scale;
            print_message("%s N(0, %g): RMSE / std %.4f (bound %.4f)\n",
                          kvs_ggml_type_name(k_types[t].type), scale, e,
                          quant_bound(k_types[t].type));
            assert_true(e < quant_bound(k_types[t].type));

            if (k == 0) {
                unit[t] = e;
            }
        }
    }

    /* one more bit per element about halves the error (the types are in
     * order of bits in k_types) */
    for (t = 0; t + 1 < K_TYPES; t++) {
        assert_true(unit[t + 1] < 0.65 * unit[t]);
    }
}


/*
 * Gaussian data with one outlier of +-20 std every 1000 elements.  The
 * elements sharing a sub-block with an outlier (sub / 1000 of them) get
 * its scale: the plain quantizer's step over a range of at most 2 * 20,
 * an error of 40 / ((2^b - 1) sqrt(12)); the others keep quant_bound():
 *
 *   bound^2 = quant_bound^2 + sub / 1000 * (40 / ((2^b - 1) sqrt(12)))^2
 *
 * Each outlier itself comes back within 5%.
 */
static void
test_quant_outliers(void **state)
{
    size_t  t, i;
    double  e, b, o;

    for (t = 0; t < K_TYPES; t++) {
        rng_state = 0x2545f4914f6cdd1dULL + t;

        for (i = 0; i < ROWS; i++) {
            qx[i] = i % 1000 == 7 ? (i % 2000 == 7 ? 20.0f : -20.0f)
                                  : rng_gauss();
        }

        o = 40.0 / (((1 << k_bits(k_types[t].type)) - 1) * sqrt(12.0));
        b = quant_bound(k_types[t].type);
        b = sqrt(b * b + k_sub(k_types[t].type) / 1000.0 * o * o);

        e = round_trip(k_types[t].type, ROWS);
        print_message("%s N(0, 1) + outliers: RMSE %.4f (bound %.4f)\n",
                      kvs_ggml_type_name(k_types[t].type), e, b);
        assert_true(e < b);

        for (i = 7; i < ROWS; i += 1000) {
            assert_true(fabsf(qy[i] - qx[i]) < 0.05f * 20.0f);
        }
    }
}


/* zeros, constants, one sign, as the quantizers meet them */
static void
test_quant_shapes(void **state)
{
    size_t     t, i, k;
    double     e;
    uint8_t    one[KVS_Q6_K_BYTES];

    static const float  consts[] = { 0.75f, -2.5f, 1e-3f, -7e4f };

    for (t = 0; t < K_TYPES; t++) {
        /* all zero: all-zero bytes, all-zero values */
        memset(qx, 0, sizeof(qx));
        e = round_trip(k_types[t].type, ROWS);
        assert_true(e == 0.0);
        for (i = 0; i < ROWS / KVS_QK_K * k_types[t].bytes; i++) {
            assert_int_equal(qb[i], 0);
        }

        /* constant rows: the f16 d (and dmin) rounding only: 2^-11
         * relative, a few times that where d is an f16 subnormal (1e-3:
         * d about 2.4e-7 in Q6_K, steps of 2^-24), with margin */
        for (k = 0; k < sizeof(consts) / sizeof(consts[0]); k++) {
            for (i = 0; i < ROWS; i++) {
                qx[i] = consts[k];
            }
            (void) round_trip(k_types[t].type, ROWS);
            for (i = 0; i < ROWS; i++) {
                assert_true(fabsf(qy[i] - consts[k])
                            <= 4e-3f * fabsf(consts[k]));
            }
        }

        /* negative only (-|N(0, 1)|): the bound of N(0, 1) holds, the
         * range being half as wide */
        rng_state = 0x853c49e6748fea9bULL + t;
        for (i = 0; i < ROWS; i++) {
            qx[i] = -fabsf(rng_gauss());
        }
        e = round_trip(k_types[t].type, ROWS);
        assert_true(e < quant_bound(k_types[t].type));
        for (i = 0; i < ROWS; i++) {
            assert_true(qy[i] <= 0.5f);
        }

        /* the table's entry is the type's own function */
        kvs_quant_type(k_types[t].type)->quantize(qx, one, KVS_QK_K);
        assert_memory_equal(one, qb, k_types[t].bytes);
    }
}


/* values no type can hold, inf, NaN: finite output, in range */
static void
test_quant_huge(void **state)
{
    size_t  t, i;

    for (t = 0; t < K_TYPES; t++) {
        rng_state = 0xda942042e4dd58b5ULL + t;

        for (i = 0; i < ROWS; i++) {
            qx[i] = rng_gauss();
        }

        qx[3] = 1e30f;                       /* past any f16 d */
        qx[300] = -1e30f;
        qx[600] = INFINITY;
        qx[900] = -INFINITY;
        qx[1200] = NAN;
        qx[1500] = 1e-40f;                   /* f32 subnormal */
        qx[2000] = 5e4f;                     /* large, representable */

        for (i = 4096; i < 4096 + KVS_QK_K; i++) {
            qx[i] = NAN;                     /* a whole NaN super-block */
        }

        (void) round_trip(k_types[t].type, ROWS);   /* asserts finite */

        /* the saturated values keep their sign; NaN reads as 0 */
        assert_true(qy[3] > 1e5f && qy[600] > 1e5f);
        assert_true(qy[300] < -1e5f && qy[900] < -1e5f);
        assert_true(qy[4096] == 0.0f && qy[4096 + 255] == 0.0f);
        assert_true(fabsf(qy[2000] - 5e4f) < 0.05f * 5e4f);

        /* the super-blocks without such values are as good as ever */
        for (i = 5 * KVS_QK_K; i < 6 * KVS_QK_K; i++) {
            assert_true(fabsf(qy[i] - qx[i]) < 1.0f);
        }
    }
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_q2k_block),
        cmocka_unit_test(test_q3k_block),
        cmocka_unit_test(test_q4k_block),
        cmocka_unit_test(test_q5k_block),
        cmocka_unit_test(test_q6k_block),
        cmocka_unit_test(test_positions),
        cmocka_unit_test(test_zero_blocks),
        cmocka_unit_test(test_extreme_d),
        cmocka_unit_test(test_super_blocks),
        cmocka_unit_test(test_quant_gauss),
        cmocka_unit_test(test_quant_outliers),
        cmocka_unit_test(test_quant_shapes),
        cmocka_unit_test(test_quant_huge),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
