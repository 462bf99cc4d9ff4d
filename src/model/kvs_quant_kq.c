/*
 * kvs_quant_kq: f32 rows quantized to the K-quant super-blocks
 * (kvs_quant_k.h): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
 *
 * Every type goes through the same three steps, per super-block of 256:
 *
 *   1. fit each sub-block (16 or 32 elements) on its own: the scale (and,
 *      for the types with a min, the offset) minimising the squared error
 *      of its elements once rounded to the type's integer range.  The
 *      search tries a range of candidate scales around the obvious one
 *      (the sub-block's range over the number of steps), rounds the
 *      elements with each, then solves the least-squares scale (and
 *      offset) for those integers and keeps the best; a few alternations
 *      of rounding and solving refine the winner.  The fit works on the
 *      super-block divided by its largest |x|, so its sums never
 *      overflow whatever the data.
 *   2. quantize the sub-block scales (and mins) to the type's integers
 *      against one f16 d (and dmin) per super-block: the largest scale
 *      takes the largest integer, then each integer is nudged by one
 *      either way when that lowers the sub-block's error as the reader
 *      will compute it (and where d or dmin is an f16 subnormal, whose
 *      own rounding is coarse, its neighbouring f16 values are tried).
 *   3. round every element with the scale (and min) exactly as the reader
 *      will compute them in f32, and pack the bits.
 *
 * Invariants: whatever the input (zeros, constants, one sign, huge
 * outliers, inf, NaN), the output is a valid block whose dequantization
 * is finite: NaN is read as 0, +-inf as +-FLT_MAX, and d and dmin are
 * clamped to the largest finite f16 (values past what the type can hold
 * saturate).  An all-zero super-block gives all-zero bytes.
 */

#include <float.h>
#include <math.h>
#include <string.h>

#include "kvs_dtype.h"
#include "kvs_quant.h"
#include "kvs_quant_k.h"


/* candidate scales: range / (steps + KVS_QK_DELTA0 + k * KVS_QK_DELTA),
 * k = 0..KVS_QK_CANDIDATES - 1 (steps - 1 .. steps + 1); the signed types
 * split them between the two ends of their range, in steps of 0.2 */
#define KVS_QK_CANDIDATES  21
#define KVS_QK_DELTA0      -1.0f
#define KVS_QK_DELTA       0.1f
#define KVS_QK_REFINE      4

#define KVS_QK_F16_MAX     65504.0f


/* A super-block's plan: the integers the reader will see.  q[] is each
 * element's integer in the type's qlo..qhi (kvs_qk_shape_t), sc[]/m[]
 * one per sub-block, d/dmin the f16 bits. */
typedef struct {
    uint16_t  d;
    uint16_t  dmin;
    int       sc[16];
    int       m[16];
    int       q[KVS_QK_K];
} kvs_qk_plan_t;


/* The sub-block geometry and integer ranges of a type. */
typedef struct {
    int  sub;        /* elements per sub-block: 16 or 32 */
    int  qlo;        /* element integers: qlo..qhi */
    int  qhi;
    int  sclo;       /* sub-block scale integers: sclo..schi */
    int  schi;
    int  mhi;        /* min integers 0..mhi; 0: the type has no min */
} kvs_qk_shape_t;


static const kvs_qk_shape_t  kvs_q2k_shape = { 16, 0, 3, 0, 15, 15 };
static const kvs_qk_shape_t  kvs_q3k_shape = { 16, -4, 3, -32, 31, 0 };
static const kvs_qk_shape_t  kvs_q4k_shape = { 32, 0, 15, 0, 63, 63 };
static const kvs_qk_shape_t  kvs_q5k_shape = { 32, 0, 31, 0, 63, 63 };
static const kvs_qk_shape_t  kvs_q6k_shape = { 16, -32, 31, -128, 127, 0 };


/* 1.5 * 2^23: adding it to a float of magnitude below 2^22 leaves the
 * integer part alone and rounds the rest away, to nearest, ties to even
 * (the default rounding mode), exactly as lrintf() does */
#define KVS_QK_ROUNDER  12582912.0f


/*
 * Nearest integer in lo..hi; NaN gives lo (never undefined).  Clamped
 * first and rounded by KVS_QK_ROUNDER, with no branch or libm call, so
 * that the error loops that call it per element (most of a K-quant's
 * time) vectorise; the integers are lrintf()'s.
 */
static inline int
kvs_qk_round(float v, int lo, int hi)
{
    float  c;

    c = v > (float) lo ? v : (float) lo;
    c = c < (float) hi ? c : (float) hi;

    return (int) ((c + KVS_QK_ROUNDER) - KVS_QK_ROUNDER);
}


static float
kvs_qk_clean(float v)
{
    if (isnan(v)) {
        return 0.0f;
    }

    return fmaxf(-FLT_MAX, fminf(FLT_MAX, v));
}


/* f32 to the f16 the reader gets back, finite (clamped) */
static uint16_t
kvs_qk_f16(float v)
{
    return kvs_f32_to_f16(fmaxf(-KVS_QK_F16_MAX, fminf(KVS_QK_F16_MAX, v)));
}


/* the 8 lanes of kvs_qk_error and kvs_qk_sub_error, summed pairwise */
static inline float
kvs_qk_lanes(const float *lane)
{
    return ((lane[0] + lane[1]) + (lane[2] + lane[3]))
           + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}


/* ---- step 1: one sub-block's real scale (and offset) ------------------- */

/*
 * Squared error of x[n] ~ s * q + l, each q the nearest in qlo..qhi
 * (s != 0); q[n] receives them.  n is a multiple of 8 (sub-blocks are 16
 * or 32): the squares are summed in 8 lanes, element i in lane i % 8,
 * then pairwise, so that the loop vectorises and its result is the same
 * whether it does or not.
 */
static float
kvs_qk_error(const float *x, int n, int qlo, int qhi, float s, float l,
    int *q)
{
    int    i, j;
    float  is, r, lane[8];

    is = 1.0f / s;

    for (j = 0; j < 8; j++) {
        lane[j] = 0.0f;
    }

    for (i = 0; i < n; i += 8) {
        for (j = 0; j < 8; j++) {
            q[i + j] = kvs_qk_round((x[i + j] - l) * is, qlo, qhi);
            r = s * (float) q[i + j] + l - x[i + j];
            lane[j] += r * r;
        }
    }

    return kvs_qk_lanes(lane);
}


/*
 * Least squares of x ~ s * q + l over the integers q[n]; with_offset 0
 * fixes l = 0, else l <= 0 (the formats store -l as an unsigned min).
 * Returns 0 when the integers give no scale (all zero).
 */
static int
kvs_qk_solve(const float *x, const int *q, int n, int with_offset,
    float *s, float *l)
{
    int    i;
    float  sq, sqq, sx, sqx, det;

    sq = sqq = sx = sqx = 0.0f;

    for (i = 0; i < n; i++) {
        sq += (float) q[i];
        sqq += (float) q[i] * (float) q[i];
        sx += x[i];
        sqx += (float) q[i] * x[i];
    }

    if (sqq <= 0.0f) {
        return 0;
    }

    if (with_offset) {
        det = (float) n * sqq - sq * sq;

        if (det > 0.0f) {
            *s = ((float) n * sqx - sq * sx) / det;
            *l = (sqq * sx - sq * sqx) / det;

            if (*l <= 0.0f && *s > 0.0f) {
                return 1;
            }
        }
    }

    *s = sqx / sqq;
    *l = 0.0f;

    return *s != 0.0f && (with_offset == 0 || *s > 0.0f);
}


/*
 * The best (s, l) for sub-block x[n] (|x| <= 1) in the shape's element
 * range: candidates around range / steps, each rounded then solved; the
 * winner refined by alternating rounding and solving.  *s = 0 when the
 * sub-block is constant (then l holds it, for the types with a min).
 */
static void
kvs_qk_fit(const float *x, int n, const kvs_qk_shape_t *t, float *s,
    float *l)
{
    int    i, k, q[32], steps;
    float  lo, hi, xm, err, best, cs, cl, inv;

    steps = t->qhi - t->qlo;
    lo = t->mhi > 0 ? 0.0f : x[0];
    hi = x[0];
    xm = 0.0f;

    for (i = 0; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
        if (fabsf(x[i]) > fabsf(xm)) {
            xm = x[i];
        }
    }

    *s = 0.0f;
    *l = t->mhi > 0 ? lo : 0.0f;

    if (t->mhi > 0 && hi <= lo) {
        return;                              /* constant, <= 0: the min */
    }

    if (t->mhi == 0 && xm == 0.0f) {
        return;
    }

    best = FLT_MAX;

    for (k = 0; k < KVS_QK_CANDIDATES; k++) {
        if (t->mhi > 0) {
            /* lo at integer 0, hi near integer steps */
            inv = ((float) steps + KVS_QK_DELTA0 + KVS_QK_DELTA * k)
                  / (hi - lo);
            if (inv <= 0.0f) {
                continue;
            }
            cs = 1.0f / inv;
            cl = lo;

        } else {
            /* the largest |x| at one end of the range: the wider
             * (negative) end on even k, the other on odd */
            inv = (float) (k % 2 ? t->qhi : -t->qlo)
                  + KVS_QK_DELTA0 + KVS_QK_DELTA * (k / 2) * 2.0f;
            if (inv <= 0.0f) {
                continue;
            }
            cs = (k % 2 ? xm : -xm) / inv;
            cl = 0.0f;
        }

        (void) kvs_qk_error(x, n, t->qlo, t->qhi, cs, cl, q);

        if (!kvs_qk_solve(x, q, n, t->mhi > 0, &cs, &cl)) {
            continue;
        }

        err = kvs_qk_error(x, n, t->qlo, t->qhi, cs, cl, q);
        if (err < best) {
            best = err;
            *s = cs;
            *l = cl;
        }
    }

    if (*s == 0.0f) {
        /* no candidate solved (cannot happen with a non-constant
         * sub-block, kept for safety): the plain range */
        *s = t->mhi > 0 ? (hi - lo) / (float) steps : -xm / (float) -t->qlo;
        return;
    }

    for (k = 0; k < KVS_QK_REFINE; k++) {
        (void) kvs_qk_error(x, n, t->qlo, t->qhi, *s, *l, q);

        if (!kvs_qk_solve(x, q, n, t->mhi > 0, &cs, &cl)) {
            break;
        }

        err = kvs_qk_error(x, n, t->qlo, t->qhi, cs, cl, q);
        if (!(err < best)) {
            break;
        }

        best = err;
        *s = cs;
        *l = cl;
    }
}


/* ---- steps 2 and 3: the integers the reader sees ----------------------- */

/*
 * Squared error of sub-block x[n] (real values) read back with integer
 * scale sc and min m, computed as the reader does: (d * sc) * q - (dmin *
 * m); q[n] receives the element integers.  Lanes as kvs_qk_error's.
 */
static float
kvs_qk_sub_error(const float *x, int n, const kvs_qk_shape_t *t, float d,
    float dmin, int sc, int m, int *q)
{
    int    i, j;
    float  ds, dm, r, lane[8];

    ds = d * (float) sc;
    dm = dmin * (float) m;

    for (j = 0; j < 8; j++) {
        lane[j] = 0.0f;
    }

    if (ds == 0.0f) {
        /* every element reads -dm, whatever its integer */
        for (i = 0; i < n; i += 8) {
            for (j = 0; j < 8; j++) {
                q[i + j] = 0;
                r = -dm - x[i + j];
                lane[j] += r * r;
            }
        }

        return kvs_qk_lanes(lane);
    }

    for (i = 0; i < n; i += 8) {
        for (j = 0; j < 8; j++) {
            q[i + j] = kvs_qk_round((x[i + j] + dm) / ds, t->qlo, t->qhi);
            r = ds * (float) q[i + j] - dm - x[i + j];
            lane[j] += r * r;
        }
    }

    return kvs_qk_lanes(lane);
}


/*
 * Steps 2 and 3 with d and dmin given (f16): the integer scales (mins)
 * rounded from s[] (l[]), each pair nudged by one either way when that
 * lowers its sub-block's error as the reader computes it, then the
 * element integers.  Returns the super-block's squared error.
 */
static float
kvs_qk_plan_ints(const float *x, const kvs_qk_shape_t *t, const float *s,
    const float *l, uint16_t d16, uint16_t dmin16, kvs_qk_plan_t *p)
{
    int    j, nsub, a, b, sc, m, best_sc, best_m;
    float  d, dmin, err, best, total;

    nsub = KVS_QK_K / t->sub;
    p->d = d16;
    p->dmin = dmin16;
    d = kvs_f16_to_f32(d16);
    dmin = kvs_f16_to_f32(dmin16);
    total = 0.0f;

    for (j = 0; j < nsub; j++) {
        sc = d != 0.0f ? kvs_qk_round(s[j] / d, t->sclo, t->schi) : 0;
        m = dmin != 0.0f ? kvs_qk_round(l[j] / dmin, 0, t->mhi) : 0;

        best = FLT_MAX;
        best_sc = sc;
        best_m = m;

        for (a = sc - 1; a <= sc + 1; a++) {
            if (a < t->sclo || a > t->schi) {
                continue;
            }

            for (b = m - 1; b <= m + 1; b++) {
                if (b < 0 || b > t->mhi) {
                    continue;
                }

                err = kvs_qk_sub_error(x + j * t->sub, t->sub, t, d, dmin,
                                       a, b, p->q + j * t->sub);
                if (err < best) {
                    best = err;
                    best_sc = a;
                    best_m = b;
                }
            }
        }

        p->sc[j] = best_sc;
        p->m[j] = best_m;

        total += kvs_qk_sub_error(x + j * t->sub, t->sub, t, d, dmin,
                                  best_sc, best_m, p->q + j * t->sub);
    }

    return total;
}


/*
 * Where d (dmin) is an f16 subnormal its own rounding costs up to a few
 * percent (its step is 2^-24), which no sub-block integer makes up for
 * when the largest is at the end of its range: then the neighbouring
 * f16 values are tried too, whole super-block against whole super-block.
 * which: 0 for d, 1 for dmin.
 */
static void
kvs_qk_plan_tiny(const float *x, const kvs_qk_shape_t *t, const float *s,
    const float *l, int which, kvs_qk_plan_t *p, float *err)
{
    int            k;
    uint16_t       h, mag;
    float          e;
    kvs_qk_plan_t  c;

    h = which ? p->dmin : p->d;
    mag = h & 0x7fff;

    if (mag == 0 || mag >= 0x0400) {
        return;                              /* zero, or normal */
    }

    for (k = -2; k <= 2; k++) {
        if (k == 0 || (int) mag + k <= 0) {
            continue;
        }

        h = (uint16_t) (((which ? p->dmin : p->d) & 0x8000) | (mag + k));
        e = kvs_qk_plan_ints(x, t, s, l, which ? p->d : h,
                             which ? h : p->dmin, &c);
        if (e < *err) {
            *err = e;
            *p = c;
        }
    }
}


/*
 * The plan of super-block src[256] for shape t: fits, d (dmin), integer
 * scales (mins), element integers.
 */
static void
kvs_qk_plan(const float *src, const kvs_qk_shape_t *t, kvs_qk_plan_t *p)
{
    int       i, j, nsub, jmax;
    float     x[KVS_QK_K], y[KVS_QK_K], amax, inv, s[16], l[16], smax;
    float     lmax, d, err;
    uint16_t  d16, dmin16;

    memset(p, 0, sizeof(*p));

    nsub = KVS_QK_K / t->sub;
    amax = 0.0f;

    for (i = 0; i < KVS_QK_K; i++) {
        x[i] = kvs_qk_clean(src[i]);
        amax = fmaxf(amax, fabsf(x[i]));
    }

    if (amax == 0.0f) {
        /* d = 0: every code reads 0; the lowest makes all-zero bytes
         * (the signed types store q + offset) */
        for (i = 0; i < KVS_QK_K; i++) {
            p->q[i] = t->qlo;
        }
        return;
    }

    /* fit on x / amax: |y| <= 1, no overflow in the sums */
    inv = 1.0f / amax;
    for (i = 0; i < KVS_QK_K; i++) {
        y[i] = x[i] * inv;
    }

    smax = lmax = 0.0f;
    jmax = 0;

    for (j = 0; j < nsub; j++) {
        kvs_qk_fit(y + j * t->sub, t->sub, t, &s[j], &l[j]);
        s[j] *= amax;
        l[j] = -l[j] * amax;                       /* the min, >= 0 */

        if (fabsf(s[j]) > smax) {
            smax = fabsf(s[j]);
            jmax = j;
        }
        lmax = fmaxf(lmax, l[j]);
    }

    /* the largest scale takes the end of the integer range with the
     * larger magnitude (schi for unsigned, sclo for signed scales) */
    d = t->sclo < 0 ? s[jmax] / (float) t->sclo : smax / (float) t->schi;
    d16 = kvs_qk_f16(d);
    dmin16 = t->mhi > 0 ? kvs_qk_f16(lmax / (float) t->mhi) : 0;

    err = kvs_qk_plan_ints(x, t, s, l, d16, dmin16, p);
    kvs_qk_plan_tiny(x, t, s, l, 0, p, &err);
    kvs_qk_plan_tiny(x, t, s, l, 1, p, &err);
}


/* ---- packing ------------------------------------------------------------ */

static void
kvs_qk_put_f16(uint8_t *p, uint16_t h)
{
    memcpy(p, &h, 2);
}


/* Q2_K: see kvs_q2_k_dequantize() for where element e's bits lie */
void
kvs_q2_k_quantize(const float *src, uint8_t *dst, size_t n)
{
    int            e, j;
    size_t         b;
    kvs_qk_plan_t  p;

    for (b = 0; b < n / KVS_QK_K; b++) {
        kvs_qk_plan(src, &kvs_q2k_shape, &p);
        memset(dst, 0, KVS_Q2_K_BYTES);

        for (j = 0; j < 16; j++) {
            dst[KVS_Q2_K_SCALES + j] = (uint8_t) (p.sc[j] | (p.m[j] << 4));
        }

        for (e = 0; e < KVS_QK_K; e++) {
            dst[KVS_Q2_K_QS + 32 * (e / 128) + e % 32] |=
                (uint8_t) (p.q[e] << (2 * ((e / 32) % 4)));
        }

        kvs_qk_put_f16(dst + KVS_Q2_K_D, p.d);
        kvs_qk_put_f16(dst + KVS_Q2_K_DMIN, p.dmin);

        src += KVS_QK_K;
        dst += KVS_Q2_K_BYTES;
    }
}


/* Q3_K: u = q + 4 (0..7), low 2 bits in qs, the third in hmask */
void
kvs_q3_k_quantize(const float *src, uint8_t *dst, size_t n)
{
    int            e, j, u;
    size_t         b;
    int8_t         sc[16];
    kvs_qk_plan_t  p;

    for (b = 0; b < n / KVS_QK_K; b++) {
        kvs_qk_plan(src, &kvs_q3k_shape, &p);
        memset(dst, 0, KVS_Q3_K_BYTES);

        for (j = 0; j < 16; j++) {
            /* with d = 0 any scale reads 0; -32 is stored as 0, so a
             * zero super-block is zero bytes as in the other types */
            sc[j] = (int8_t) ((p.d & 0x7fff) == 0 ? -32 : p.sc[j]);
        }

        kvs_q3k_scales_pack(dst + KVS_Q3_K_SCALES, sc);

        for (e = 0; e < KVS_QK_K; e++) {
            u = p.q[e] + 4;
            dst[KVS_Q3_K_QS + 32 * (e / 128) + e % 32] |=
                (uint8_t) ((u & 3) << (2 * ((e / 32) % 4)));
            dst[KVS_Q3_K_HMASK + e % 32] |= (uint8_t) ((u >> 2) << (e / 32));
        }

        kvs_qk_put_f16(dst + KVS_Q3_K_D, p.d);

        src += KVS_QK_K;
        dst += KVS_Q3_K_BYTES;
    }
}


/* Q4_K and Q5_K share all but the fifth bit; qh_off 0: Q4_K */
static void
kvs_qk_quantize_45(const float *src, uint8_t *dst, size_t n,
    const kvs_qk_shape_t *t, size_t bytes, size_t qs_off, size_t qh_off)
{
    int            e, j;
    size_t         b;
    uint8_t        sc[8], m[8];
    kvs_qk_plan_t  p;

    for (b = 0; b < n / KVS_QK_K; b++) {
        kvs_qk_plan(src, t, &p);
        memset(dst, 0, bytes);

        for (j = 0; j < 8; j++) {
            sc[j] = (uint8_t) p.sc[j];
            m[j] = (uint8_t) p.m[j];
        }

        kvs_qk_scales_pack(dst + KVS_Q4_K_SCALES, sc, m);

        for (e = 0; e < KVS_QK_K; e++) {
            dst[qs_off + 32 * (e / 64) + e % 32] |=
                (uint8_t) ((p.q[e] & 0x0f) << (4 * ((e / 32) % 2)));
            if (qh_off != 0) {
                dst[qh_off + e % 32] |= (uint8_t) ((p.q[e] >> 4) << (e / 32));
            }
        }

        kvs_qk_put_f16(dst + KVS_Q4_K_D, p.d);
        kvs_qk_put_f16(dst + KVS_Q4_K_DMIN, p.dmin);

        src += KVS_QK_K;
        dst += bytes;
    }
}


void
kvs_q4_k_quantize(const float *src, uint8_t *dst, size_t n)
{
    kvs_qk_quantize_45(src, dst, n, &kvs_q4k_shape, KVS_Q4_K_BYTES,
                       KVS_Q4_K_QS, 0);
}


void
kvs_q5_k_quantize(const float *src, uint8_t *dst, size_t n)
{
    kvs_qk_quantize_45(src, dst, n, &kvs_q5k_shape, KVS_Q5_K_BYTES,
                       KVS_Q5_K_QS, KVS_Q5_K_QH);
}


/* Q6_K: u = q + 32 (0..63), low 4 bits in ql, high 2 in qh */
void
kvs_q6_k_quantize(const float *src, uint8_t *dst, size_t n)
{
    int            e, j, h, r, u;
    size_t         b;
    kvs_qk_plan_t  p;

    for (b = 0; b < n / KVS_QK_K; b++) {
        kvs_qk_plan(src, &kvs_q6k_shape, &p);
        memset(dst, 0, KVS_Q6_K_BYTES);

        for (j = 0; j < 16; j++) {
            dst[KVS_Q6_K_SCALES + j] = (uint8_t) (int8_t) p.sc[j];
        }

        for (e = 0; e < KVS_QK_K; e++) {
            h = e / 128;
            r = e % 128;
            u = p.q[e] + 32;
            dst[KVS_Q6_K_QL + 64 * h + r % 64] |=
                (uint8_t) ((u & 0x0f) << (4 * (r / 64)));
            dst[KVS_Q6_K_QH + 32 * h + r % 32] |=
                (uint8_t) ((u >> 4) << (2 * (r / 32)));
        }

        kvs_qk_put_f16(dst + KVS_Q6_K_D, p.d);

        src += KVS_QK_K;
        dst += KVS_Q6_K_BYTES;
    }
}
