/*
 * test_rope: the RoPE table and rotation against their definitions,
 * written out again here (never by calling kvs_rope's helpers): llama2.c's
 * unscaled loop (../shared/fixtures/models/README.md, "RoPE"), position
 * interpolation, Llama 3.1's wavelength bands with its published
 * parameters, YaRN's ramp and mscale, the two pairing conventions, and
 * the errors for hyper-parameters that describe no valid rotation.
 */

#include <math.h>

#include "kvs_test.h"

#include "backend/kvs_rope.h"


/* hparams holding only what RoPE reads */
static void
hp_plain(kvs_hparams_t *hp, uint32_t n_rot, uint32_t head_dim, double base)
{
    memset(hp, 0, sizeof(*hp));
    hp->n_rot = n_rot;
    hp->head_dim_k = head_dim;
    hp->head_dim_v = head_dim;
    hp->rope_freq_base = base;
    hp->rope_scaling = KVS_ROPE_SCALING_NONE;
    hp->rope_factor = 1.0;
    hp->n_ctx_train = 4096;
}


/* deterministic values in [-2, 2) (a 32-bit LCG) */
static void
fill(float *v, size_t n, uint32_t seed)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = (float) ((seed >> 8) / 16777216.0 * 4.0 - 2.0);
    }
}


static void
assert_rel(double got, double want, double tol, const char *what, int i)
{
    double  d;

    d = fabs(got - want);
    if (d > tol * fabs(want)) {
        fail_msg("%s[%d]: got %.17g want %.17g (rel %.3g > %.3g)", what, i,
                 got, want, d / fabs(want), tol);
    }
}


/*
 * llama2.c run.c's loop, in double: for i = 0, 2, .. dim - 2,
 * head_dim = i % head_size, freq = 1 / 10000^(head_dim / head_size),
 * rotate (v[i], v[i+1]) by pos * freq.
 */
static void
llama2c_rope(double *v, int dim, int head_size, double base, double pos)
{
    int     i, hd;
    double  freq, val, fcr, fci, v0, v1;

    for (i = 0; i < dim; i += 2) {
        hd = i % head_size;
        freq = 1.0 / pow(base, hd / (double) head_size);
        val = pos * freq;
        fcr = cos(val);
        fci = sin(val);
        v0 = v[i];
        v1 = v[i + 1];
        v[i] = v0 * fcr - v1 * fci;
        v[i + 1] = v0 * fci + v1 * fcr;
    }
}


/*
 * got and want agree to tol relative to each pair's length (an element of
 * a rotated pair can be near 0 while its pair is not).
 */
static void
assert_pairs(const float *got, const double *want, int n, double tol)
{
    int     i;
    double  len;

    for (i = 0; i < n; i += 2) {
        len = hypot(want[i], want[i + 1]);
        if (fabs(got[i] - want[i]) > tol * len
            || fabs(got[i + 1] - want[i + 1]) > tol * len)
        {
            fail_msg("pair %d: got (%.9g, %.9g) want (%.9g, %.9g)", i,
                     (double) got[i], (double) got[i + 1], want[i],
                     want[i + 1]);
        }
    }
}


static void
test_unscaled_llama2c(void **state)
{
    static const int32_t  pos[] = { 0, 1, 2, 7, 511, 4096, 65535, 100000 };
    static const struct { int head, heads; double base; } shape[] = {
        { 8, 8, 10000.0 },            /* stories260K's q */
        { 8, 4, 10000.0 },            /* and its k */
        { 64, 3, 10000.0 },
        { 128, 2, 500000.0 },
    };
    int            s, p, i, n;
    float          v[512];
    double         want[512];
    kvs_err_t      err;
    kvs_rope_t     rope;
    kvs_hparams_t  hp;

    for (s = 0; s < (int) (sizeof(shape) / sizeof(shape[0])); s++) {
        hp_plain(&hp, shape[s].head, shape[s].head, shape[s].base);
        assert_int_equal(kvs_rope_init(&rope, &hp, &err), KVS_OK);
        assert_true(rope.mscale == 1.0);

        n = shape[s].head * shape[s].heads;

        for (p = 0; p < (int) (sizeof(pos) / sizeof(pos[0])); p++) {
            fill(v, n, 77 + s * 13 + p);
            for (i = 0; i < n; i++) {
                want[i] = v[i];
            }

            llama2c_rope(want, n, shape[s].head, shape[s].base, pos[p]);
            assert_int_equal(kvs_rope_apply(&rope, v, shape[s].heads,
                                            shape[s].head, pos[p],
                                            KVS_ROPE_NORM), KVS_OK);
            assert_pairs(v, want, n, 1e-6);
        }

        kvs_rope_free(&rope);
        assert_null(rope.inv_freq);
    }
}


static void
test_pos0_identity(void **state)
{
    int            i;
    float          v[128], w[128];
    kvs_err_t      err;
    kvs_rope_t     rope;
    kvs_hparams_t  hp;

    hp_plain(&hp, 64, 64, 10000.0);
    assert_int_equal(kvs_rope_init(&rope, &hp, &err), KVS_OK);

    fill(v, 128, 5);
    memcpy(w, v, sizeof(v));
    assert_int_equal(kvs_rope_apply(&rope, v, 2, 64, 0, KVS_ROPE_NEOX),
                     KVS_OK);
    for (i = 0; i < 128; i++) {
        assert_true(v[i] == w[i]);
    }

    kvs_rope_free(&rope);
}


/* linear: theta = (pos / factor) * base^(-2i/d) */
static void
test_linear(void **state)
{
    static const int32_t  pos[] = { 3, 1000, 4001, 100000 };
    int            p, i;
    float          v[128], u[128];
    double         want[128];
    kvs_err_t      err;
    kvs_rope_t     lin, plain;
    kvs_hparams_t  hp;

    hp_plain(&hp, 64, 64, 10000.0);
    assert_int_equal(kvs_rope_init(&plain, &hp, &err), KVS_OK);

    hp.rope_scaling = KVS_ROPE_SCALING_LINEAR;
    hp.rope_factor = 4.0;
    assert_int_equal(kvs_rope_init(&lin, &hp, &err), KVS_OK);
    assert_true(lin.mscale == 1.0);

    for (i = 0; i < 32; i++) {
        assert_rel(lin.inv_freq[i], pow(10000.0, -2.0 * i / 64) / 4.0,
                   1e-13, "linear inv_freq", i);
    }

    for (p = 0; p < 4; p++) {
        fill(v, 128, 100 + p);
        for (i = 0; i < 128; i++) {
            want[i] = v[i];
        }

        llama2c_rope(want, 128, 64, 10000.0, pos[p] / 4.0);
        assert_int_equal(kvs_rope_apply(&lin, v, 2, 64, pos[p],
                                        KVS_ROPE_NORM), KVS_OK);
        assert_pairs(v, want, 128, 1e-6);

        /* at a multiple of the factor, equal to unscaled at pos / 4 */
        if (pos[p] % 4 == 0) {
            fill(u, 128, 100 + p);
            kvs_rope_apply(&plain, u, 2, 64, pos[p] / 4, KVS_ROPE_NORM);
            for (i = 0; i < 128; i++) {
                assert_true(fabsf(u[i] - v[i]) <= 1e-6f);
            }
        }
    }

    kvs_rope_free(&lin);
    kvs_rope_free(&plain);
}


/*
 * Llama 3.1 (factor 8, low 1, high 4, original context 8192, base 500000,
 * head 128).  By hand: wavelength_i = 2 pi 500000^(i/64) is below
 * 8192/4 = 2048 for i <= 28 (kept), above 8192/1 for i >= 35 (divided
 * by 8) and between for i = 29..34 (mixed).
 */
static void
test_llama3_bands(void **state)
{
    int            i, n_keep, n_div, n_mix;
    double         f, wl, smooth, want;
    kvs_err_t      err;
    kvs_rope_t     rope;
    kvs_hparams_t  hp;

    hp_plain(&hp, 128, 128, 500000.0);
    hp.rope_scaling = KVS_ROPE_SCALING_LLAMA3;
    hp.rope_factor = 8.0;
    hp.rope_low_freq_factor = 1.0;
    hp.rope_high_freq_factor = 4.0;
    hp.rope_orig_ctx = 8192;
    hp.n_ctx_train = 131072;

    assert_int_equal(kvs_rope_init(&rope, &hp, &err), KVS_OK);
    assert_true(rope.mscale == 1.0);

    n_keep = n_div = n_mix = 0;

    for (i = 0; i < 64; i++) {
        f = pow(500000.0, -(double) i / 64.0);
        wl = 2.0 * M_PI / f;

        if (wl < 2048.0) {
            want = f;
            n_keep++;
            assert_true(i <= 28);
        } else if (wl > 8192.0) {
            want = f / 8.0;
            n_div++;
            assert_true(i >= 35);
        } else {
            smooth = (8192.0 / wl - 1.0) / (4.0 - 1.0);
            assert_true(smooth >= 0.0 && smooth <= 1.0);
            want = (1.0 - smooth) * f / 8.0 + smooth * f;
            n_mix++;
            assert_true(i >= 29 && i <= 34);
        }

        assert_rel(rope.inv_freq[i], want, 1e-12, "llama3 inv_freq", i);
    }

    assert_int_equal(n_keep, 29);
    assert_int_equal(n_mix, 6);
    assert_int_equal(n_div, 29);

    /* the ends, exactly as the definition states them */
    assert_rel(rope.inv_freq[0], 1.0, 1e-15, "llama3 inv_freq", 0);
    assert_rel(rope.inv_freq[63], pow(500000.0, -63.0 / 64.0) / 8.0, 1e-13,
               "llama3 inv_freq", 63);
    assert_rel(rope.inv_freq[28], pow(500000.0, -28.0 / 64.0), 1e-13,
               "llama3 inv_freq", 28);
    assert_rel(rope.inv_freq[35], pow(500000.0, -35.0 / 64.0) / 8.0, 1e-13,
               "llama3 inv_freq", 35);

    /* mixed pairs lie strictly between their two bounds */
    for (i = 29; i <= 34; i++) {
        f = pow(500000.0, -(double) i / 64.0);
        assert_true(rope.inv_freq[i] > f / 8.0 && rope.inv_freq[i] < f);
    }

    kvs_rope_free(&rope);
}


/*
 * llama.cpp's converter stores Llama 3.1 scaling as rope_freqs.weight:
 * 1 for kept, factor for divided, 1 / ((1 - smooth) / factor + smooth)
 * for mixed pairs.  Those factors on an unscaled table must give the
 * llama3 table.
 */
static void
test_freq_factors(void **state)
{
    int            i;
    float          ff[64];
    double         f, wl, smooth;
    kvs_err_t      err;
    kvs_rope_t     l3, plain;
    kvs_hparams_t  hp;

    hp_plain(&hp, 128, 128, 500000.0);
    assert_int_equal(kvs_rope_init(&plain, &hp, &err), KVS_OK);

    hp.rope_scaling = KVS_ROPE_SCALING_LLAMA3;
    hp.rope_factor = 8.0;
    hp.rope_low_freq_factor = 1.0;
    hp.rope_high_freq_factor = 4.0;
    hp.rope_orig_ctx = 8192;
    assert_int_equal(kvs_rope_init(&l3, &hp, &err), KVS_OK);

    for (i = 0; i < 64; i++) {
        f = pow(500000.0, -(double) i / 64.0);
        wl = 2.0 * M_PI / f;
        if (wl < 2048.0) {
            ff[i] = 1.0f;
        } else if (wl > 8192.0) {
            ff[i] = 8.0f;
        } else {
            smooth = (8192.0 / wl - 1.0) / 3.0;
            ff[i] = (float) (1.0 / ((1.0 - smooth) / 8.0 + smooth));
        }
    }

    assert_int_equal(kvs_rope_set_freq_factors(&l3, ff, 64, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_rope_set_freq_factors(&plain, ff, 63, &err),
                     KVS_EINVAL);
    ff[5] = 0.0f;
    assert_int_equal(kvs_rope_set_freq_factors(&plain, ff, 64, &err),
                     KVS_EINVAL);
    assert_rel(plain.inv_freq[5], pow(500000.0, -5.0 / 64.0), 1e-13,
               "unchanged after refusal", 5);
    ff[5] = 1.0f;

    assert_int_equal(kvs_rope_set_freq_factors(&plain, ff, 64, &err),
                     KVS_OK);

    for (i = 0; i < 64; i++) {
        /* the factors went through float: 1e-7 */
        assert_rel(plain.inv_freq[i], l3.inv_freq[i], 1e-7,
                   "freq factors vs llama3", i);
    }

    kvs_rope_free(&l3);
    kvs_rope_free(&plain);
}


/*
 * YaRN with Qwen2.5's published settings (factor 4, original context
 * 32768, base 1e6, head 128, beta_fast 32, beta_slow 1).  By hand: the
 * correction dimension 128 ln(32768 / (2 pi beta)) / (2 ln 1e6) is 23.6
 * for beta 32 (floor 23) and 39.65 for beta 1 (ceil 40): pairs 0..23
 * keep their frequency, 40..63 are divided by 4, and pair i between has
 * ramp (i - 23) / 17 of interpolation.  mscale = 1 + 0.1 ln 4.
 */
static void
test_yarn(void **state)
{
    int            i;
    float          v[256], w[256];
    double         f, lo, hi, ramp, want, len0, len1;
    kvs_err_t      err;
    kvs_rope_t     rope;
    kvs_hparams_t  hp;

    hp_plain(&hp, 128, 128, 1000000.0);
    hp.rope_scaling = KVS_ROPE_SCALING_YARN;
    hp.rope_factor = 4.0;
    hp.rope_orig_ctx = 32768;
    hp.rope_beta_fast = 32.0;
    hp.rope_beta_slow = 1.0;
    hp.rope_attn_factor = 1.0;

    lo = floor(128.0 * log(32768.0 / (32.0 * 2.0 * M_PI))
               / (2.0 * log(1e6)));
    hi = ceil(128.0 * log(32768.0 / (1.0 * 2.0 * M_PI)) / (2.0 * log(1e6)));
    assert_true(lo == 23.0);
    assert_true(hi == 40.0);

    assert_int_equal(kvs_rope_init(&rope, &hp, &err), KVS_OK);
    assert_rel(rope.mscale, 1.0 + 0.1 * log(4.0), 1e-15, "mscale", 0);
    assert_rel(rope.mscale, 1.1386294361119891, 1e-15, "mscale", 1);

    for (i = 0; i < 64; i++) {
        f = pow(1e6, -(double) i / 64.0);
        if (i <= 23) {
            want = f;
        } else if (i >= 40) {
            want = f / 4.0;
        } else {
            ramp = (i - 23.0) / 17.0;
            want = f / 4.0 * ramp + f * (1.0 - ramp);
        }
        assert_rel(rope.inv_freq[i], want, 1e-12, "yarn inv_freq", i);
    }

    /* every pair's length is multiplied by mscale */
    fill(v, 256, 9);
    memcpy(w, v, sizeof(v));
    assert_int_equal(kvs_rope_apply(&rope, v, 2, 128, 54321, KVS_ROPE_NEOX),
                     KVS_OK);
    for (i = 0; i < 64; i++) {
        len0 = hypot(w[i], w[i + 64]);
        len1 = hypot(v[i], v[i + 64]);
        assert_rel(len1, len0 * (1.0 + 0.1 * log(4.0)), 1e-6,
                   "yarn pair length", i);
    }

    kvs_rope_free(&rope);

    /* a GGUF attn_factor multiplies the log term; no original context
     * length falls back to the training context */
    hp.rope_attn_factor = 0.5;
    hp.rope_orig_ctx = 0;
    hp.n_ctx_train = 32768;
    assert_int_equal(kvs_rope_init(&rope, &hp, &err), KVS_OK);
    assert_rel(rope.mscale, 0.5 * (1.0 + 0.1 * log(4.0)), 1e-15,
               "mscale", 2);
    assert_rel(rope.inv_freq[30], pow(1e6, -30.0 / 64.0)
               * (1.0 - 7.0 / 17.0 + 7.0 / 17.0 / 4.0), 1e-12,
               "yarn inv_freq", 30);
    kvs_rope_free(&rope);

    /* factor <= 1 adds no magnitude scaling */
    hp.rope_attn_factor = 1.0;
    hp.rope_factor = 1.0;
    assert_int_equal(kvs_rope_init(&rope, &hp, &err), KVS_OK);
    assert_true(rope.mscale == 1.0);
    kvs_rope_free(&rope);
}


/*
 * NeoX pairs (i, i + d/2) are llama pairs (2i, 2i+1) after moving dim 2i
 * to i and 2i+1 to i + d/2.
 */
static void
test_neox_is_permuted_norm(void **state)
{
    int            h, i;
    float          x[3 * 64], y[3 * 64];
    kvs_err_t      err;
    kvs_rope_t     rope;
    kvs_hparams_t  hp;

    hp_plain(&hp, 48, 64, 10000.0);
    assert_int_equal(kvs_rope_init(&rope, &hp, &err), KVS_OK);

    fill(x, 3 * 64, 21);
    memcpy(y, x, sizeof(y));
    for (h = 0; h < 3; h++) {
        for (i = 0; i < 24; i++) {
            y[h * 64 + i] = x[h * 64 + 2 * i];
            y[h * 64 + i + 24] = x[h * 64 + 2 * i + 1];
        }
    }

    assert_int_equal(kvs_rope_apply(&rope, x, 3, 64, 777, KVS_ROPE_NORM),
                     KVS_OK);
    assert_int_equal(kvs_rope_apply(&rope, y, 3, 64, 777, KVS_ROPE_NEOX),
                     KVS_OK);

    for (h = 0; h < 3; h++) {
        for (i = 0; i < 24; i++) {
            assert_true(y[h * 64 + i] == x[h * 64 + 2 * i]);
            assert_true(y[h * 64 + i + 24] == x[h * 64 + 2 * i + 1]);
        }
        for (i = 48; i < 64; i++) {
            assert_true(y[h * 64 + i] == x[h * 64 + i]);
        }
    }

    kvs_rope_free(&rope);
}


/* rotations keep each pair's length; heads are rotated alike */
static void
test_norm_and_heads(void **state)
{
    static const int32_t  pos[] = { 1, 100, 8191, 100000, 2000000000 };
    int            p, i, h, mode;
    float          v[4 * 32], w[4 * 32];
    double         a, b;
    kvs_err_t      err;
    kvs_rope_t     rope;
    kvs_hparams_t  hp;

    hp_plain(&hp, 32, 32, 10000.0);
    assert_int_equal(kvs_rope_init(&rope, &hp, &err), KVS_OK);

    for (mode = 0; mode < 2; mode++) {
        for (p = 0; p < 5; p++) {
            fill(v, 32, 300 + p);
            for (h = 1; h < 4; h++) {
                memcpy(v + h * 32, v, 32 * sizeof(float));
            }
            memcpy(w, v, sizeof(v));

            assert_int_equal(kvs_rope_apply(&rope, v, 4, 32, pos[p], mode),
                             KVS_OK);

            for (i = 0; i < 16; i++) {
                if (mode == KVS_ROPE_NORM) {
                    a = hypot(w[2 * i], w[2 * i + 1]);
                    b = hypot(v[2 * i], v[2 * i + 1]);
                } else {
                    a = hypot(w[i], w[i + 16]);
                    b = hypot(v[i], v[i + 16]);
                }
                assert_rel(b, a, 1e-6, "pair length", i);
            }

            for (h = 1; h < 4; h++) {
                assert_memory_equal(v + h * 32, v, 32 * sizeof(float));
            }
        }
    }

    kvs_rope_free(&rope);
}


/* rot_dims < head_dim: the tail of every head passes through */
static void
test_partial_rotation(void **state)
{
    int            h, i;
    float          v[5 * 40], w[5 * 40];
    double         want[16];
    kvs_err_t      err;
    kvs_rope_t     rope;
    kvs_hparams_t  hp;

    hp_plain(&hp, 16, 40, 10000.0);
    assert_int_equal(kvs_rope_init(&rope, &hp, &err), KVS_OK);

    fill(v, 5 * 40, 44);
    memcpy(w, v, sizeof(v));
    assert_int_equal(kvs_rope_apply(&rope, v, 5, 40, 1234, KVS_ROPE_NORM),
                     KVS_OK);

    for (h = 0; h < 5; h++) {
        /* the rotated part: base^(-2i/16), not base^(-2i/40) */
        for (i = 0; i < 16; i++) {
            want[i] = w[h * 40 + i];
        }
        llama2c_rope(want, 16, 16, 10000.0, 1234.0);
        assert_pairs(v + h * 40, want, 16, 1e-6);

        for (i = 16; i < 40; i++) {
            assert_true(v[h * 40 + i] == w[h * 40 + i]);
        }
    }

    kvs_rope_free(&rope);
}


static void
expect_init_error(const kvs_hparams_t *hp, int code, const char *word)
{
    kvs_err_t   err;
    kvs_rope_t  rope;

    memset(&err, 0, sizeof(err));
    assert_int_equal(kvs_rope_init(&rope, hp, &err), code);
    assert_int_equal(err.code, code);
    if (strstr(err.msg, word) == NULL) {
        fail_msg("error '%s' does not mention '%s'", err.msg, word);
    }
    assert_null(rope.inv_freq);
    kvs_rope_free(&rope);
}


static void
test_bad_hparams(void **state)
{
    float          v[64];
    kvs_err_t      err;
    kvs_rope_t     rope;
    kvs_hparams_t  hp;

    hp_plain(&hp, 7, 8, 10000.0);
    expect_init_error(&hp, KVS_EINVAL, "even");
    hp_plain(&hp, 0, 8, 10000.0);
    expect_init_error(&hp, KVS_EINVAL, "even");
    hp_plain(&hp, 16, 8, 10000.0);
    expect_init_error(&hp, KVS_EINVAL, "head size");
    hp_plain(&hp, 8, 8, 0.0);
    expect_init_error(&hp, KVS_EINVAL, "freq_base");
    hp_plain(&hp, 8, 8, NAN);
    expect_init_error(&hp, KVS_EINVAL, "freq_base");

    hp_plain(&hp, 8, 8, 10000.0);
    hp.rope_scaling = KVS_ROPE_SCALING_LINEAR;
    hp.rope_factor = 0.0;
    expect_init_error(&hp, KVS_EINVAL, "factor");
    hp.rope_factor = -2.0;
    expect_init_error(&hp, KVS_EINVAL, "factor");
    hp.rope_factor = INFINITY;
    expect_init_error(&hp, KVS_EINVAL, "factor");

    hp.rope_scaling = KVS_ROPE_SCALING_YARN;
    hp.rope_factor = -1.0;
    expect_init_error(&hp, KVS_EINVAL, "factor");
    hp.rope_factor = 4.0;
    hp.rope_beta_fast = 32.0;
    hp.rope_beta_slow = 0.0;
    hp.rope_attn_factor = 1.0;
    expect_init_error(&hp, KVS_EINVAL, "beta_slow");
    hp.rope_beta_slow = 1.0;
    hp.rope_orig_ctx = 0;
    hp.n_ctx_train = 0;
    expect_init_error(&hp, KVS_EINVAL, "context");

    hp_plain(&hp, 8, 8, 10000.0);
    hp.rope_scaling = KVS_ROPE_SCALING_LLAMA3;
    hp.rope_factor = 8.0;
    hp.rope_low_freq_factor = 4.0;
    hp.rope_high_freq_factor = 4.0;
    hp.rope_orig_ctx = 8192;
    expect_init_error(&hp, KVS_EINVAL, "high_freq_factor");
    hp.rope_low_freq_factor = 1.0;
    hp.rope_orig_ctx = 0;
    expect_init_error(&hp, KVS_EINVAL, "original context");
    hp.rope_orig_ctx = 8192;
    hp.rope_factor = 0.0;
    expect_init_error(&hp, KVS_EINVAL, "factor");

    hp.rope_scaling = KVS_ROPE_SCALING_LONGROPE;
    hp.rope_factor = 8.0;
    expect_init_error(&hp, KVS_EUNSUPPORTED, "longrope");

    /* a caller's misuse of apply is refused before any write */
    hp_plain(&hp, 16, 16, 10000.0);
    assert_int_equal(kvs_rope_init(&rope, &hp, &err), KVS_OK);
    fill(v, 64, 1);
    assert_int_equal(kvs_rope_apply(&rope, v, 4, 8, 3, KVS_ROPE_NORM),
                     KVS_EINVAL);
    assert_int_equal(kvs_rope_apply(&rope, v, -1, 16, 3, KVS_ROPE_NORM),
                     KVS_EINVAL);
    assert_int_equal(kvs_rope_apply(&rope, v, 4, 16, 3, 2), KVS_EINVAL);
    kvs_rope_free(&rope);
}


/*
 * test_rope --dump KIND N_ROT BASE FACTOR ORIG A B [C]: prints mscale and
 * then the inv_freq table, one %.17g per line, for test_rope_python.py to
 * compare with its numpy transcription of HF's definitions.  KIND is
 * llama3 (A, B = low, high freq factor) or yarn (A, B, C = beta_fast,
 * beta_slow, attn_factor).
 */
static int
dump(int argc, char **argv)
{
    uint32_t       i;
    kvs_err_t      err;
    kvs_rope_t     rope;
    kvs_hparams_t  hp;

    if (argc < 9) {
        fprintf(stderr, "usage: test_rope --dump KIND N_ROT BASE FACTOR "
                "ORIG A B [C]\n");
        return 2;
    }

    hp_plain(&hp, (uint32_t) atoi(argv[3]), (uint32_t) atoi(argv[3]),
             atof(argv[4]));
    hp.rope_factor = atof(argv[5]);
    hp.rope_orig_ctx = (uint32_t) atoi(argv[6]);

    if (strcmp(argv[2], "llama3") == 0) {
        hp.rope_scaling = KVS_ROPE_SCALING_LLAMA3;
        hp.rope_low_freq_factor = atof(argv[7]);
        hp.rope_high_freq_factor = atof(argv[8]);
    } else {
        hp.rope_scaling = KVS_ROPE_SCALING_YARN;
        hp.rope_beta_fast = atof(argv[7]);
        hp.rope_beta_slow = atof(argv[8]);
        hp.rope_attn_factor = argc > 9 ? atof(argv[9]) : 1.0;
    }

    if (kvs_rope_init(&rope, &hp, &err) != KVS_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }

    printf("%.17g\n", rope.mscale);
    for (i = 0; i < rope.n_rot / 2; i++) {
        printf("%.17g\n", rope.inv_freq[i]);
    }

    kvs_rope_free(&rope);

    return 0;
}


int
main(int argc, char **argv)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_unscaled_llama2c),
        cmocka_unit_test(test_pos0_identity),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_llama3_bands),
        cmocka_unit_test(test_freq_factors),
        cmocka_unit_test(test_yarn),
        cmocka_unit_test(test_neox_is_permuted_norm),
        cmocka_unit_test(test_norm_and_heads),
        cmocka_unit_test(test_partial_rotation),
        cmocka_unit_test(test_bad_hparams),
    };

    if (argc > 1 && strcmp(argv[1], "--dump") == 0) {
        return dump(argc, argv);
    }

    return cmocka_run_group_tests(tests, NULL, NULL);
}
