/*
 * gpu_check_kern: the element-wise kernels of kernels/kvs_kernels.h
 * against CPU references on fresh seeded inputs: embed, rmsnorm (plain,
 * fused residual, row gather; every output dtype), convert, q8_0_to,
 * swiglu, sample (against the engine's own kvs_sample() with the coin
 * its RNG would draw), and the launchers' refusal of bad arguments.  The
 * kernels over the paged K/V are in gpu_check_attn.c.
 *
 * References: exact where the operation is a conversion or a lookup
 * (bits compared), double-precision loops otherwise; tolerances are
 * norm-wise relative errors by output dtype (gc_dtype_tol).  Outputs are
 * poisoned (NaN) before each launch.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_check.h"
#include "sample/kvs_sample.h"
#include "model/kvs_dtype.h"

#define GC_DTS  3                     /* F32, F16, BF16 */

static const int  gc_dts[GC_DTS] = { KVS_K_F32, KVS_K_F16, KVS_K_BF16 };

static int gc_k_embed(gc_ctx_t *c, gc_rng_t *rng);
static int gc_k_rmsnorm(gc_ctx_t *c, gc_rng_t *rng);
static int gc_k_convert(gc_ctx_t *c, gc_rng_t *rng);
static int gc_k_q8_0(gc_ctx_t *c, gc_rng_t *rng);
static int gc_k_swiglu(gc_ctx_t *c, gc_rng_t *rng);
static int gc_k_sample(gc_ctx_t *c, gc_rng_t *rng);
static int gc_k_refusals(gc_ctx_t *c);


int
gc_kern_run(gc_ctx_t *c)
{
    gc_rng_t  rng;

    rng.s = c->seed ^ 0x6b65726eull;

    if (gc_k_refusals(c) || gc_k_embed(c, &rng) || gc_k_rmsnorm(c, &rng)
        || gc_k_convert(c, &rng) || gc_k_q8_0(c, &rng)
        || gc_k_swiglu(c, &rng) || gc_k_sample(c, &rng)
        || gc_attn_run(c))
    {
        return -1;
    }

    return 0;
}


/* after a launch that failed: -1 when the device is gone, else 0 */
static int
gc_k_failed(gc_ctx_t *c, const char *name, gc_bufs_t *b)
{
    gc_fail(c, "kern", name, "launch refused or failed");
    gc_bufs_free(b);

    return c->dead ? -1 : 0;
}


static int
gc_k_embed(gc_ctx_t *c, gc_rng_t *rng)
{
    static const struct {
        uint32_t  d;
        uint32_t  v;
        int       dt;
    } cs[] = {
        { 64, 512, KVS_K_F32 },            /* stories260K */
        { 896, 1000, KVS_K_F16 },
        { 128, 128256, KVS_K_BF16 },       /* Llama 3's vocabulary */
        { 4096, 2048, KVS_K_BF16 },        /* Llama 3's width */
    };

    char       name[96];
    float     *out, ref;
    void      *tbl, *dtbl, *dout;
    size_t     ci, i, j, es;
    int32_t    tok[13], *dtok;
    uint32_t   n, d, v;
    gc_err_t   e;
    gc_bufs_t  b;

    n = 13;
    memset(&b, 0, sizeof(b));

    for (ci = 0; ci < sizeof(cs) / sizeof(cs[0]); ci++) {
        d = cs[ci].d;
        v = cs[ci].v;
        es = gc_dtype_size(cs[ci].dt);

        snprintf(name, sizeof(name), "embed n_embd=%u vocab=%u %s", d, v,
                 gc_dtype_name(cs[ci].dt));

        tbl = gc_alloc((size_t) d * v * es);
        out = gc_alloc((size_t) n * d * sizeof(float));
        if (tbl == NULL || out == NULL) {
            free(tbl);
            free(out);
            return -1;
        }

        gc_fill(tbl, cs[ci].dt, (size_t) d * v, rng, -1.0f, 1.0f);

        for (i = 0; i < n; i++) {
            tok[i] = (int32_t) gc_rng_below(rng, v);
        }
        tok[0] = 0;
        tok[3] = -1;                  /* outside the vocabulary: zeros */
        tok[7] = (int32_t) v;
        tok[9] = (int32_t) v - 1;

        dtbl = gc_buf_upload(c, &b, tbl, (size_t) d * v * es);
        dtok = gc_buf_upload(c, &b, tok, sizeof(tok));
        dout = gc_buf_poisoned(c, &b, (size_t) n * d * sizeof(float));

        if (dtbl == NULL || dtok == NULL || dout == NULL
            || gc_launched(c, kvs_k_embed(dout, dtbl, cs[ci].dt, dtok, n, d,
                                          v, 0), name)
            || gc_download(c, out, dout, (size_t) n * d * sizeof(float)))
        {
            free(tbl);
            free(out);
            if (gc_k_failed(c, name, &b)) {
                return -1;
            }
            continue;
        }

        memset(&e, 0, sizeof(e));
        for (i = 0; i < n; i++) {
            for (j = 0; j < d; j++) {
                ref = tok[i] >= 0 && (uint32_t) tok[i] < v
                      ? gc_load(tbl, cs[ci].dt, (size_t) tok[i] * d + j)
                      : 0.0f;
                gc_err_add(&e, out[i * d + j], ref);
            }
        }

        gc_check(c, "kern", name, gc_err_rel(&e), e.maxabs, 0.0);

        free(tbl);
        free(out);
        gc_bufs_free(&b);
    }

    return 0;
}


static int
gc_k_rmsnorm(gc_ctx_t *c, gc_rng_t *rng)
{
    static const uint32_t  ds[] = { 64, 896, 4096 };
    static const int32_t   rows[6] = { 8, 0, 3, 3, 5, 1 };
    static const char     *modes[3] = { "plain", "fused residual",
                                        "row gather" };

    char       name[96];
    void      *out, *dout;
    float     *x, *r, *w, *xs, *xg, *dx, *dr, *dw;
    double     ss, inv;
    size_t     di, ti, i, j, row;
    int32_t   *drows;
    uint32_t   d, n, n_x;
    uint64_t   x_bad;
    gc_err_t   e;
    gc_bufs_t  b;
    int        mode, dt;

    n_x = 9;
    memset(&b, 0, sizeof(b));

    for (di = 0; di < sizeof(ds) / sizeof(ds[0]); di++) {
        d = ds[di];

        /* x, r, xs, xg, out [n_x][d]; w [d]: one allocation */
        x = gc_alloc((size_t) (5 * n_x + 1) * d * 4);
        if (x == NULL) {
            return -1;
        }

        r = x + (size_t) n_x * d;
        xs = r + (size_t) n_x * d;
        xg = xs + (size_t) n_x * d;
        out = xg + (size_t) n_x * d;
        w = (float *) out + (size_t) n_x * d;

        for (mode = 0; mode < 3; mode++) {
            for (ti = 0; ti < GC_DTS; ti++) {
                dt = gc_dts[ti];
                n = mode == 2 ? 6 : n_x;

                snprintf(name, sizeof(name), "rmsnorm d=%u %s out=%s", d,
                         modes[mode], gc_dtype_name(dt));

                gc_fill(x, KVS_K_F32, (size_t) n_x * d, rng, -2.0f, 2.0f);
                gc_fill(r, KVS_K_F32, (size_t) n_x * d, rng, -1.0f, 1.0f);
                gc_fill(w, KVS_K_F32, d, rng, 0.5f, 1.5f);

                /* a row of another scale: the norm must follow it */
                for (j = 0; j < d; j++) {
                    x[2 * d + j] *= 50.0f;
                }

                for (i = 0; i < (size_t) n_x * d; i++) {
                    xs[i] = mode == 1 ? x[i] + r[i] : x[i];
                }

                dx = gc_buf_upload(c, &b, x, (size_t) n_x * d * 4);
                dr = mode == 1 ? gc_buf_upload(c, &b, r, (size_t) n_x * d * 4)
                               : NULL;
                dw = gc_buf_upload(c, &b, w, (size_t) d * 4);
                drows = mode == 2 ? gc_buf_upload(c, &b, rows, sizeof(rows))
                                  : NULL;
                dout = gc_buf_poisoned(c, &b, (size_t) n * d
                                              * gc_dtype_size(dt));

                if (dx == NULL || dw == NULL || dout == NULL
                    || (mode == 1 && dr == NULL)
                    || (mode == 2 && drows == NULL)
                    || gc_launched(c, kvs_k_rmsnorm(dout, dt, dx, dr, dw,
                                                    drows, n, d, 1e-5f, 0),
                                   name)
                    || gc_download(c, out, dout, (size_t) n * d
                                                 * gc_dtype_size(dt))
                    || gc_download(c, xg, dx, (size_t) n_x * d * 4))
                {
                    if (gc_k_failed(c, name, &b)) {
                        free(x);
                        return -1;
                    }
                    continue;
                }

                memset(&e, 0, sizeof(e));
                for (i = 0; i < n; i++) {
                    row = mode == 2 ? (size_t) rows[i] : i;
                    ss = 0.0;
                    for (j = 0; j < d; j++) {
                        ss += (double) xs[row * d + j] * xs[row * d + j];
                    }
                    inv = 1.0 / sqrt(ss / d + 1e-5);
                    for (j = 0; j < d; j++) {
                        gc_err_add(&e, gc_load(out, dt, i * d + j),
                                   (double) w[j] * xs[row * d + j] * inv);
                    }
                }

                /* x: the residual sum in place (fused), else untouched */
                x_bad = 0;
                for (i = 0; i < (size_t) n_x * d; i++) {
                    x_bad += memcmp(&xg[i], &xs[i], 4) != 0;
                }

                if (x_bad != 0) {
                    printf("  %s: %llu elements of x wrong after the call\n",
                           name, (unsigned long long) x_bad);
                }

                gc_check(c, "kern", name, x_bad ? INFINITY : gc_err_rel(&e),
                         e.maxabs, gc_dtype_tol(dt));
                gc_bufs_free(&b);
            }
        }

        free(x);
    }

    return 0;
}


/* values of every magnitude, and the cases rounding gets wrong */
static void
gc_k_convert_src(float *s, size_t n, gc_rng_t *rng)
{
    size_t              i;
    static const float  sp[] = {
        0.0f, -0.0f, 65504.0f, 65520.0f, 1e-7f, 2.98e-8f, INFINITY,
        -INFINITY, 3.4e38f, 1.00390625f, 1.01171875f, 1.00048828125f,
        -1.00146484375f, 1e-40f
    };

    for (i = 0; i < n; i++) {
        s[i] = ldexpf(gc_rng_range(rng, -1.0f, 1.0f),
                      (int) gc_rng_below(rng, 50) - 30);
    }

    for (i = 0; i < sizeof(sp) / sizeof(sp[0]) && i + 1 < n; i++) {
        s[i + 1] = sp[i];
    }
}


static int
gc_k_convert(gc_ctx_t *c, gc_rng_t *rng)
{
    static const size_t  ns[] = { 1, 1001, (1u << 20) + 3 };

    int        dt;
    char       name[96];
    void      *got, *dst;
    float     *src, *dsrc;
    size_t     ni, ti, i, n, bad, first;
    uint16_t   h;
    gc_bufs_t  b;

    memset(&b, 0, sizeof(b));

    for (ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
        n = ns[ni];

        src = gc_alloc(n * 4);
        got = gc_alloc(n * 4);
        if (src == NULL || got == NULL) {
            free(src);
            free(got);
            return -1;
        }

        for (ti = 0; ti < GC_DTS; ti++) {
            dt = gc_dts[ti];
            snprintf(name, sizeof(name), "convert n=%zu f32->%s", n,
                     gc_dtype_name(dt));

            gc_k_convert_src(src, n, rng);

            dsrc = gc_buf_upload(c, &b, src, n * 4);
            dst = gc_buf_poisoned(c, &b, n * gc_dtype_size(dt));

            if (dsrc == NULL || dst == NULL
                || gc_launched(c, kvs_k_convert(dst, dt, dsrc, n, 0), name)
                || gc_download(c, got, dst, n * gc_dtype_size(dt)))
            {
                if (gc_k_failed(c, name, &b)) {
                    free(src);
                    free(got);
                    return -1;
                }
                continue;
            }

            bad = 0;
            first = n;
            for (i = 0; i < n; i++) {
                if (dt == KVS_K_F32) {
                    if (memcmp((float *) got + i, src + i, 4) == 0) {
                        continue;
                    }
                } else {
                    h = dt == KVS_K_BF16 ? kvs_f32_to_bf16(src[i])
                                         : kvs_f32_to_f16(src[i]);
                    if (((uint16_t *) got)[i] == h) {
                        continue;
                    }
                }
                if (bad++ == 0) {
                    first = i;
                }
            }

            if (bad != 0) {
                printf("  %s: %zu elements differ from round-to-nearest-"
                       "even, the first at %zu (%.9g)\n", name, bad, first,
                       src[first]);
            }

            gc_check(c, "kern", name, (double) bad / n, 0.0, 0.0);
            gc_bufs_free(&b);
        }

        free(src);
        free(got);
    }

    return 0;
}


static int
gc_k_q8_0(gc_ctx_t *c, gc_rng_t *rng)
{
    static const size_t  ns[] = { 32, 32 * 129, 32 * 40001 };

    int        dt;
    char       name[96];
    void      *got, *dst;
    float     *ref;
    size_t     ni, ti, i, n, nb, bad;
    uint8_t   *q, *dq;
    uint16_t   h, sc;
    gc_bufs_t  b;

    memset(&b, 0, sizeof(b));

    for (ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
        n = ns[ni];
        nb = n / 32;

        q = gc_alloc(nb * 34);
        ref = gc_alloc(n * 4);
        got = gc_alloc(n * 4);
        if (q == NULL || ref == NULL || got == NULL) {
            free(q);
            free(ref);
            free(got);
            return -1;
        }

        for (ti = 0; ti < GC_DTS; ti++) {
            dt = gc_dts[ti];
            snprintf(name, sizeof(name), "q8_0_to n=%zu ->%s", n,
                     gc_dtype_name(dt));

            /* blocks: F16 scale, then 32 int8 of the whole range */
            for (i = 0; i < nb; i++) {
                sc = kvs_f32_to_f16(gc_rng_range(rng, 1e-4f, 0.05f));
                memcpy(q + i * 34, &sc, 2);
            }
            for (i = 0; i < nb * 34; i++) {
                if (i % 34 >= 2) {
                    q[i] = (uint8_t) gc_rng_u64(rng);
                }
            }

            kvs_q8_0_dequantize(q, ref, n);

            dq = gc_buf_upload(c, &b, q, nb * 34);
            dst = gc_buf_poisoned(c, &b, n * gc_dtype_size(dt));

            if (dq == NULL || dst == NULL
                || gc_launched(c, kvs_k_q8_0_to(dst, dt, dq, n, 0), name)
                || gc_download(c, got, dst, n * gc_dtype_size(dt)))
            {
                if (gc_k_failed(c, name, &b)) {
                    free(q);
                    free(ref);
                    free(got);
                    return -1;
                }
                continue;
            }

            /* d * q is exact in F32, so every dtype's bits are known */
            bad = 0;
            for (i = 0; i < n; i++) {
                if (dt == KVS_K_F32) {
                    bad += memcmp((float *) got + i, ref + i, 4) != 0;
                } else {
                    h = dt == KVS_K_BF16 ? kvs_f32_to_bf16(ref[i])
                                         : kvs_f32_to_f16(ref[i]);
                    bad += ((uint16_t *) got)[i] != h;
                }
            }

            gc_check(c, "kern", name, (double) bad / n, 0.0, 0.0);
            gc_bufs_free(&b);
        }

        free(q);
        free(ref);
        free(got);
    }

    return 0;
}


static int
gc_k_swiglu(gc_ctx_t *c, gc_rng_t *rng)
{
    static const uint32_t  ffs[] = { 172, 192, 14336 };

    int        dt, fused, gg;
    char       name[96];
    void      *out, *dout;
    float     *h, *dh, *g, *u;
    double     gv, act;
    size_t     fi, ti, ld, t, j;
    uint32_t   n, ff;
    gc_err_t   e;
    gc_bufs_t  b;

    n = 5;
    memset(&b, 0, sizeof(b));

    for (fi = 0; fi < sizeof(ffs) / sizeof(ffs[0]); fi++) {
        ff = ffs[fi];

        h = gc_alloc((size_t) n * 2 * ff * 4);
        out = gc_alloc((size_t) n * ff * 4);
        if (h == NULL || out == NULL) {
            free(h);
            free(out);
            return -1;
        }

        /* fused bit 0: gate|up rows; bit 1: gemma's GeGLU, not SwiGLU */
        for (fused = 0; fused < 4; fused++) {
            gg = fused >> 1;
            for (ti = 0; ti < GC_DTS; ti++) {
                dt = gc_dts[ti];
                snprintf(name, sizeof(name), "%s n_ff=%u %s out=%s",
                         gg ? "geglu" : "swiglu", ff,
                         fused & 1 ? "gate|up rows" : "separate",
                         gc_dtype_name(dt));

                /* fused: rows [gate | up] of 2 n_ff; else gate rows, then
                 * up rows, each n_ff wide */
                gc_fill(h, KVS_K_F32, (size_t) n * 2 * ff, rng, -8.0f, 8.0f);
                ld = fused & 1 ? 2 * (size_t) ff : ff;
                g = h;
                u = fused & 1 ? h + ff : h + (size_t) n * ff;

                dh = gc_buf_upload(c, &b, h, (size_t) n * 2 * ff * 4);
                dout = gc_buf_poisoned(c, &b, (size_t) n * ff
                                              * gc_dtype_size(dt));

                if (dh == NULL || dout == NULL
                    || gc_launched(c, gg ? kvs_k_geglu(dout, dt, dh,
                                                       dh + (u - h), ld, n,
                                                       ff, 0)
                                         : kvs_k_swiglu(dout, dt, dh,
                                                        dh + (u - h), ld, n,
                                                        ff, 0), name)
                    || gc_download(c, out, dout, (size_t) n * ff
                                                 * gc_dtype_size(dt)))
                {
                    if (gc_k_failed(c, name, &b)) {
                        free(h);
                        free(out);
                        return -1;
                    }
                    continue;
                }

                memset(&e, 0, sizeof(e));
                for (t = 0; t < n; t++) {
                    for (j = 0; j < ff; j++) {
                        gv = g[t * ld + j];
                        /* gelu's tanh form, in double */
                        act = gg ? 0.5 * gv * (1.0 + tanh(
                                       0.7978845608028654
                                       * (gv + 0.044715 * gv * gv * gv)))
                                 : gv / (1.0 + exp(-gv));
                        gc_err_add(&e, gc_load(out, dt, t * ff + j),
                                   act * u[t * ld + j]);
                    }
                }

                gc_check(c, "kern", name, gc_err_rel(&e), e.maxabs,
                         gc_dtype_tol(dt));
                gc_bufs_free(&b);
            }
        }

        free(h);
        free(out);
    }

    return 0;
}


/*
 * Sampling: every row's id must be the one kvs_sample() picks from the
 * same logits with a sampler seeded alike; the kernel gets the coin that
 * sampler's RNG draws first (kvs_sampler_coin on a twin), as the engine
 * hands it over.
 */
static int
gc_k_sample(gc_ctx_t *c, gc_rng_t *rng)
{
    static const uint32_t  vs[] = { 512, 1000, 128256 };
    static const struct {
        float    t;
        int32_t  k;                   /* -1: the vocabulary size */
        float    p;
    } ps[] = {
        { 0.0f, 0, 1.0f }, { 0.0f, 0, 1.0f }, { 0.8f, 0, 1.0f },
        { 1.0f, 40, 1.0f }, { 0.7f, 0, 0.9f }, { 1.3f, 50, 0.95f },
        { 1.0f, 1, 1.0f }, { 0.5f, 0, 0.05f }, { 1.0f, -1, 1.0f },
        { 2.0f, 0, 0.5f },
    };

    enum { GC_NP = sizeof(ps) / sizeof(ps[0]), GC_REP = 3,
           GC_NR = GC_NP * GC_REP };

    int                    rc;
    char                   name[96];
    void                  *dscr;
    float                 *lg, *row, *dlg, mx;
    size_t                 vi, i, j, bad;
    int32_t                ids[GC_NR], ref[GC_NR], *dids;
    uint32_t               v;
    kvs_err_t              err;
    gc_bufs_t              b;
    kvs_sampler_t          s1, s2;
    kvs_sample_params_t    sp;
    kvs_k_sample_param_t   kp[GC_NR], *dkp;

    memset(&b, 0, sizeof(b));

    for (vi = 0; vi < sizeof(vs) / sizeof(vs[0]); vi++) {
        v = vs[vi];
        snprintf(name, sizeof(name), "sample vocab=%u (%d rows: greedy, "
                 "temperature, top-k, top-p)", v, GC_NR);

        lg = gc_alloc((size_t) GC_NR * v * 4);
        row = gc_alloc((size_t) v * 4);
        if (lg == NULL || row == NULL) {
            free(lg);
            free(row);
            return -1;
        }

        gc_fill(lg, KVS_K_F32, (size_t) GC_NR * v, rng, -8.0f, 8.0f);

        for (i = 0; i < GC_NR; i++) {
            memset(&sp, 0, sizeof(sp));
            sp.temperature = ps[i % GC_NP].t;
            sp.top_k = ps[i % GC_NP].k < 0 ? (int32_t) v : ps[i % GC_NP].k;
            sp.top_p = ps[i % GC_NP].p;
            sp.seed = gc_rng_u64(rng) | 1;

            if (i % GC_NP == 1) {
                /* a tie for the maximum: the lower id wins */
                mx = 0.0f;
                for (j = 0; j < v; j++) {
                    mx = fmaxf(mx, lg[i * v + j]);
                }
                lg[i * v + 7] = mx + 1.0f;
                lg[i * v + 300] = mx + 1.0f;
            }

            if (kvs_sampler_init(&s1, &sp, v, &err) != KVS_OK
                || kvs_sampler_init(&s2, &sp, v, &err) != KVS_OK)
            {
                printf("  sample: kvs_sampler_init: %s\n", err.msg);
                free(lg);
                free(row);
                return -1;
            }

            kp[i].temperature = sp.temperature;
            kp[i].top_k = sp.top_k;
            kp[i].top_p = sp.top_p;
            kp[i].coin = sp.temperature > 0.0f ? kvs_sampler_coin(&s1) : 0.0f;

            memcpy(row, lg + i * v, (size_t) v * 4);
            rc = kvs_sample(&s2, row, &ref[i], &err);

            kvs_sampler_free(&s1);
            kvs_sampler_free(&s2);

            if (rc != KVS_OK) {
                printf("  sample: kvs_sample: %s\n", err.msg);
                free(lg);
                free(row);
                return -1;
            }
        }

        dlg = gc_buf_upload(c, &b, lg, (size_t) GC_NR * v * 4);
        dkp = gc_buf_upload(c, &b, kp, sizeof(kp));
        dids = gc_buf_poisoned(c, &b, sizeof(ids));
        dscr = gc_buf_poisoned(c, &b, kvs_k_sample_scratch_bytes(GC_NR, v));

        if (dlg == NULL || dkp == NULL || dids == NULL || dscr == NULL
            || gc_launched(c, kvs_k_sample(dids, dlg, dkp, GC_NR, v, dscr, 0),
                           name)
            || gc_download(c, ids, dids, sizeof(ids)))
        {
            free(lg);
            free(row);
            if (gc_k_failed(c, name, &b)) {
                return -1;
            }
            continue;
        }

        bad = 0;
        for (i = 0; i < GC_NR; i++) {
            if (ids[i] != ref[i]) {
                bad++;
                printf("  %s: row %zu (t %.2f k %d p %.2f coin %.6f): "
                       "device %d, kvs_sample %d\n", name, i,
                       kp[i].temperature, kp[i].top_k, kp[i].top_p,
                       kp[i].coin, ids[i], ref[i]);
            }
        }

        gc_check(c, "kern", name, (double) bad / GC_NR, (double) bad, 0.0);

        free(lg);
        free(row);
        gc_bufs_free(&b);
    }

    return 0;
}


/* shapes and dtypes the interface forbids: refused, nothing launched */
static int
gc_k_refusals(gc_ctx_t *c)
{
    int     bad;
    void   *p;
    float  *f;

    /* zeros: should a launcher launch after all, every id and row it
     * reads is 0 and every access stays inside the buffer */
    p = gc_dev_poisoned(c, 4096);
    if (p == NULL || GC_CU(c, cudaMemset(p, 0, 4096))) {
        cudaFree(p);
        return -1;
    }

    f = p;
    bad = 0;

    bad += kvs_k_dtype_size(KVS_K_F32) != 4;
    bad += kvs_k_dtype_size(KVS_K_BF16) != 2;
    bad += kvs_k_dtype_size(KVS_K_F16) != 2;
    bad += kvs_k_dtype_size(9) != 0;
    bad += kvs_k_convert(p, 9, f, 16, 0) != KVS_K_EARG;
    bad += kvs_k_q8_0_to(p, KVS_K_F32, p, 33, 0) != KVS_K_EARG;
    bad += kvs_k_embed(f, p, 7, (const int32_t *) p, 1, 8, 8, 0)
           != KVS_K_EARG;
    /* a row gather with a residual is not an operation */
    bad += kvs_k_rmsnorm(p, KVS_K_F32, f, f + 64, f + 128,
                         (const int32_t *) p + 256, 1, 8, 1e-5f, 0)
           != KVS_K_EARG;
    bad += kvs_k_swiglu(p, 5, f, f, 8, 1, 8, 0) != KVS_K_EARG;
    bad += kvs_k_geglu(p, 5, f, f, 8, 1, 8, 0) != KVS_K_EARG;
    bad += kvs_k_scale(f, 16, NAN, 0) != KVS_K_EARG;
    bad += kvs_k_softcap(f, 16, 0.0f, 0) != KVS_K_EARG;

    cudaFree(p);

    if (GC_CU(c, cudaDeviceSynchronize())) {
        return -1;
    }

    gc_check(c, "kern", "launchers refuse bad dtypes and shapes (12 cases)",
             bad ? INFINITY : 0.0, bad, 0.0);

    return 0;
}
