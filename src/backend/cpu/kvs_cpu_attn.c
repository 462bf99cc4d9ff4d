/*
 * kvs_cpu_attn: the CPU backend's attention over the paged cache:
 * portable (run.c's order, libm's expf); AVX2 + FMA (head sizes
 * multiples of 8; kvs_cpu_exp8, within ~1 ulp of expf, stories260K's
 * texts stay byte exact); AVX-512 (head sizes multiples of 16) where one
 * task takes all the query heads of a K/V head, so each K and V row is
 * read once for all of them.
 *
 * Attention runs as tasks (query block, head group) of the step's pool;
 * a task reads the K/V rows of positions 0..pos of its sequence (t0..pos
 * in a layer with a sliding window: kvs_cpu_attn_first) through its
 * block table and writes its heads' slices of fw->att.  A query block
 * is one token, or, where the AVX-512 kernel reads an f32 cache, up to
 * KVS_CPU_ATTN_QB consecutive positions of one sequence
 * (kvs_cpu_attn_blocks: a prefill chunk's tokens): the task scores each
 * group of 8 K rows against every (token, head) of the block while the
 * rows are in L1, and adds each V row into all their sums at once, so a
 * prompt's rows come from L2 once per block, not once per token.  A
 * block whose window no longer starts at 0 goes token by token.
 *
 * Invariant: the order of every sum (a score's q.k, the softmax's sum,
 * each output's sum over positions) depends only on pos and the head
 * sizes, never on the batch, the grouping or the thread, so a token
 * attends the same alone or batched.  In a query block a (token,
 * position) score is the same 16-lane FMA chain over the row and the
 * same reduction tree as alone, its softmax the same, each output the
 * same sum in position order with the same accumulators (a head alone
 * in its pass alternating even and odd positions): a block shares loads,
 * never arithmetic, and its outputs are the bits of its tokens alone.
 * Gemma 2's soft-capping (fw->softcap) applies to the scaled scores
 * before the softmax, in every kernel alike.
 *
 * A cache in f16, bf16, int8 or fp8 (kvs_cpu_kv.c) is read one query
 * head per task, each K or V row converted in registers as it is read (8
 * elements at a time with AVX2 + F16C, fp8's by integer steps equal to
 * kvs_kv_fp8_to_f32's; one at a time by the portable kernel, which reads
 * every dtype, f32's as is), an int8 or fp8 head's scale applied once
 * per score and once per V weight; no full-precision copy of the cache
 * is ever made.
 */

#include <math.h>
#include <string.h>

#include "kvs_cpu_exp.h"
#include "kvs_cpu_impl.h"
#include "kv/kvs_kv_quant.h"
#include "model/kvs_dtype.h"

#if KVS_CPU_X86
#include <immintrin.h>
#endif


/* Units (token, head) scored against each group of 8 K rows while it
 * is in L1: a bound on the pointers kvs_cpu_attn_scores512 keeps (8
 * passes of kvs_cpu_attn_qk512) and on a query block's units. */
#define KVS_CPU_ATTN_UNITS  24


static void kvs_cpu_attn_ref(const kvs_cpu_fw_t *fw,
    const kvs_batch_tok_t *tk, const float *qh, float *ah, float *sc,
    uint32_t kvh);
#if KVS_CPU_X86
static void kvs_cpu_attn_qavx2(const kvs_cpu_fw_t *fw,
    const kvs_batch_tok_t *tk, const float *qh, float *ah, float *sc,
    uint32_t kvh);
static void kvs_cpu_attn_avx2(const kvs_cpu_fw_t *fw,
    const kvs_batch_tok_t *tk, const float *qh, float *ah, float *sc,
    uint32_t kvh);
static void kvs_cpu_attn_blk512(const kvs_cpu_fw_t *fw, uint32_t i0,
    uint32_t nb, uint32_t h, uint32_t kvh, float *sc);
#endif


/* The first position token tk attends: pos + 1 - window in a layer
 * with a sliding window (fw->win) that the position has outgrown, else
 * 0.  The kernels read positions t0..pos only, into sc[0 .. pos - t0]. */
static inline uint32_t
kvs_cpu_attn_first(const kvs_cpu_fw_t *fw, const kvs_batch_tok_t *tk)
{
    return fw->win != 0 && tk->pos >= fw->win ? tk->pos + 1 - fw->win : 0;
}


/* Gemma 2's soft-capping of n scaled scores, s := c tanh(s / c), as the
 * portable kernel rounds it. */
static inline void
kvs_cpu_attn_cap(const kvs_cpu_fw_t *fw, float *sc, uint32_t n)
{
    uint32_t  t;

    for (t = 0; fw->softcap != 0.0f && t < n; t++) {
        sc[t] = fw->softcap * tanhf(sc[t] / fw->softcap);
    }
}


uint32_t
kvs_cpu_attn_group(const kvs_hparams_t *hp, int simd)
{
#if KVS_CPU_X86
    if (simd >= KVS_CPU_SIMD_AVX512 && hp->head_dim_k % 16 == 0
        && hp->head_dim_v % 16 == 0)
    {
        return hp->n_head / hp->n_head_kv;
    }
#endif

    return 1;
}


/* Whether the cache is read by the AVX-512 kernel (f32, head sizes
 * multiples of 16), the one that takes query blocks. */
static int
kvs_cpu_attn_wide(const kvs_cpu_fw_t *fw)
{
#if KVS_CPU_X86
    const kvs_hparams_t  *hp;

    hp = &fw->cm->hp;

    return fw->kv->lo.dtype == KVS_KV_F32
           && (fw->attn_group > 1
               || (fw->simd >= KVS_CPU_SIMD_AVX512
                   && hp->head_dim_k % 16 == 0
                   && hp->head_dim_v % 16 == 0));
#else
    (void) fw;

    return 0;
#endif
}


uint32_t
kvs_cpu_attn_qb(const kvs_cpu_fw_t *fw)
{
    uint32_t  qb;

    if (!kvs_cpu_attn_wide(fw)) {
        return 1;
    }

    /* a block's units (token, head) within one pass of
     * kvs_cpu_attn_scores512, and its scores within that many rows */
    qb = KVS_CPU_ATTN_UNITS / fw->attn_group;

    return qb < 1 ? 1 : qb > KVS_CPU_ATTN_QB ? KVS_CPU_ATTN_QB : qb;
}


uint32_t
kvs_cpu_attn_blocks(const kvs_cpu_fw_t *fw, uint32_t *qb)
{
    uint32_t                i, nqb, max;
    const kvs_batch_tok_t  *tk;

    max = kvs_cpu_attn_qb(fw);
    tk = fw->b->toks;
    nqb = 0;

    for (i = 0; i < fw->b->n; i++) {
        if (i == 0 || i - qb[nqb - 1] == max
            || tk[i].table != tk[i - 1].table
            || tk[i].pos != tk[i - 1].pos + 1)
        {
            qb[nqb++] = i;
        }
    }

    qb[nqb] = fw->b->n;

    return nqb;
}


/* Task u * n_qb + j: heads u * group .. + group of query block j's
 * tokens attend over positions 0..pos of their sequence; scores in the
 * thread's scratch.  Head-major, so that the tasks running one after
 * another read one K/V head's rows (a 512-token prompt's: 256 KiB) from
 * L2, where token-major walked all the K/V heads' (1 MiB at 4 heads)
 * through L3 for every token. */
void
kvs_cpu_attn_task(void *arg, uint32_t task, uint32_t thread)
{
    float                  *qh, *ah, *sc;
    uint32_t                i, i0, nb, j, h, kvh;
    kvs_cpu_fw_t           *fw;
    const kvs_hparams_t    *hp;
    const kvs_batch_tok_t  *tk;

    fw = arg;
    hp = &fw->cm->hp;
    j = task % fw->n_qb;
    i0 = fw->qb[j];
    nb = fw->qb[j + 1] - i0;
    h = task / fw->n_qb * fw->attn_group;
    kvh = h / (hp->n_head / hp->n_head_kv);
    sc = fw->sc + (size_t) thread * fw->sc_stride;

#if KVS_CPU_X86
    if (kvs_cpu_attn_wide(fw)) {
        /* a block whose last window starts past 0: its tokens' windows
         * start at different positions, so one token at a time */
        if (nb > 1 && kvs_cpu_attn_first(fw, &fw->b->toks[i0 + nb - 1])
                      != 0)
        {
            for (i = i0; i < i0 + nb; i++) {
                kvs_cpu_attn_blk512(fw, i, 1, h, kvh, sc);
            }

            return;
        }

        kvs_cpu_attn_blk512(fw, i0, nb, h, kvh, sc);
        return;
    }
#endif

    for (i = i0; i < i0 + nb; i++) {
        tk = &fw->b->toks[i];
        qh = fw->q + (size_t) i * fw->qd + (size_t) h * hp->head_dim_k;
        ah = fw->att + (size_t) i * fw->od + (size_t) h * hp->head_dim_v;

#if KVS_CPU_X86
        if (fw->simd >= KVS_CPU_SIMD_AVX2 && hp->head_dim_k % 8 == 0
            && hp->head_dim_v % 8 == 0)
        {
            if (fw->kv->lo.dtype != KVS_KV_F32) {
                kvs_cpu_attn_qavx2(fw, tk, qh, ah, sc, kvh);
            } else {
                kvs_cpu_attn_avx2(fw, tk, qh, ah, sc, kvh);
            }

            continue;
        }
#endif

        kvs_cpu_attn_ref(fw, tk, qh, ah, sc, kvh);
    }
}


/* Element j of a stored row p of dtype dt as a float; int8 and fp8
 * unscaled. */
static inline float
kvs_cpu_kv_elem(const uint8_t *p, uint32_t dt, uint32_t j)
{
    float     f;
    uint16_t  h;

    switch (dt) {
    case KVS_KV_F32:
        memcpy(&f, p + 4 * (size_t) j, 4);
        return f;
    case KVS_KV_F16:
        memcpy(&h, p + 2 * (size_t) j, 2);
        return kvs_f16_to_f32(h);
    case KVS_KV_BF16:
        memcpy(&h, p + 2 * (size_t) j, 2);
        return kvs_bf16_to_f32(h);
    case KVS_KV_FP8:
        return kvs_kv_fp8_to_f32(p[j]);
    default:
        return (float) ((const int8_t *) p)[j];
    }
}


/* Head kvh's stored row of position t (K when v == 0) and, in int8 and
 * fp8, the scale it is read with (else 1). */
static inline const uint8_t *
kvs_cpu_kv_row(const kvs_cpu_fw_t *fw, const kvs_batch_tok_t *tk,
    uint32_t t, uint32_t kvh, int v, float *scale)
{
    size_t                  blk;
    const kvs_kv_layout_t  *lo;

    lo = &fw->kv->lo;
    blk = (size_t) tk->table->blocks[t / lo->block_tokens] * lo->block_bytes;
    *scale = lo->scaled ? ((const float *) (const void *)
                           ((v ? fw->vsb : fw->ksb) + blk))[kvh]
                        : 1.0f;

    return (v ? fw->vcb : fw->kcb) + blk
           + (size_t) (t % lo->block_tokens) * (v ? lo->v_row : lo->k_row)
           + (size_t) kvh * (v ? lo->hd_v : lo->hd_k) * lo->elem;
}


/* The portable attention, in run.c's order, over a cache of any dtype,
 * each element converted as it is read (an f32 one as is: a scale of 1
 * changes no bit). */
static void
kvs_cpu_attn_ref(const kvs_cpu_fw_t *fw, const kvs_batch_tok_t *tk,
    const float *qh, float *ah, float *sc, uint32_t kvh)
{
    float                  mx, sum, z, s;
    uint32_t               t, t0, j, dt, hdk, hdv;
    const uint8_t         *r;
    const kvs_hparams_t   *hp;

    hp = &fw->cm->hp;
    dt = fw->kv->lo.dtype;
    hdk = hp->head_dim_k;
    hdv = hp->head_dim_v;
    mx = -INFINITY;
    t0 = kvs_cpu_attn_first(fw, tk);

    for (t = t0; t <= tk->pos; t++) {
        r = kvs_cpu_kv_row(fw, tk, t, kvh, 0, &s);
        z = 0.0f;

        for (j = 0; j < hdk; j++) {
            z += qh[j] * kvs_cpu_kv_elem(r, dt, j);
        }

        z *= s * fw->scale;
        sc[t - t0] = fw->softcap != 0.0f
                     ? fw->softcap * tanhf(z / fw->softcap) : z;

        if (sc[t - t0] > mx) {
            mx = sc[t - t0];
        }
    }

    sum = 0.0f;

    for (t = t0; t <= tk->pos; t++) {
        sc[t - t0] = expf(sc[t - t0] - mx);
        sum += sc[t - t0];
    }

    memset(ah, 0, hdv * sizeof(float));

    for (t = t0; t <= tk->pos; t++) {
        r = kvs_cpu_kv_row(fw, tk, t, kvh, 1, &s);
        z = sc[t - t0] / sum * s;

        for (j = 0; j < hdv; j++) {
            ah[j] += z * kvs_cpu_kv_elem(r, dt, j);
        }
    }
}


#if KVS_CPU_X86

/* Lanes summed in a fixed order: (0+4, 1+5, 2+6, 3+7), then pairs. */
__attribute__((target("avx2,fma"))) static inline float
kvs_cpu_attn_hsum(__m256 a)
{
    __m128  s;

    s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));

    return _mm_cvtss_f32(s);
}


/* Lane p of the result: the sum of a[p]'s lanes, every one in the same
 * tree ((0+1)+(2+3)) + ((4+5)+(6+7)). */
__attribute__((target("avx2,fma"))) static inline __m256
kvs_cpu_attn_hsum8(const __m256 *a)
{
    __m256  h01, h23, h45, h67, lo, hi;

    h01 = _mm256_hadd_ps(a[0], a[1]);
    h23 = _mm256_hadd_ps(a[2], a[3]);
    h45 = _mm256_hadd_ps(a[4], a[5]);
    h67 = _mm256_hadd_ps(a[6], a[7]);
    lo = _mm256_hadd_ps(h01, h23);
    hi = _mm256_hadd_ps(h45, h67);

    return _mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20),
                         _mm256_permute2f128_ps(lo, hi, 0x31));
}


/* Walks a sequence's rows of one layer's K or V through its block
 * table, position by position. */
typedef struct {
    const float     *base;            /* the cache + the head's offset */
    const float     *row;             /* the current position's row */
    const uint32_t  *blocks;
    size_t           width;           /* floats per slot */
    size_t           bstride;         /* floats per block */
    uint32_t         bt;
    uint32_t         u;               /* position within its block */
    uint32_t         blk;
    uint32_t         last;            /* the last block to visit */
} kvs_cpu_rows_t;


/* From position t0 (the window's first) on. */
static inline void
kvs_cpu_rows_init(kvs_cpu_rows_t *it, const kvs_cpu_fw_t *fw,
    const float *cache, size_t off, size_t width, const kvs_batch_tok_t *tk,
    uint32_t bt, uint32_t t0)
{
    it->base = cache + off;
    it->blocks = tk->table->blocks;
    it->width = width;
    it->bstride = fw->bstride;
    it->bt = bt;
    it->u = t0 % bt;
    it->blk = t0 / bt;
    it->last = tk->pos / bt;
    it->row = it->base + (size_t) it->blocks[it->blk] * it->bstride
              + (size_t) it->u * width;
}


/* The current row, then a step to the next position. */
static inline const float *
kvs_cpu_rows_next(kvs_cpu_rows_t *it)
{
    const float  *r;

    r = it->row;
    it->row += it->width;

    if (++it->u == it->bt) {
        it->u = 0;

        if (it->blk < it->last) {
            it->blk++;
            it->row = it->base
                      + (size_t) it->blocks[it->blk] * it->bstride;
        }
    }

    return r;
}


/*
 * ah[c .. c + 8 NC) = sum over t < n of sc[t] * v_t[c ..]: NC (1 or 4,
 * constant once inlined) 8-float chunks, positions alternating between
 * two accumulators (even t, odd t) to halve the FMA chain, added last.
 */
__attribute__((target("avx2,fma"), always_inline)) static inline void
kvs_cpu_attn_v(float *ah, const float *sc, uint32_t n, kvs_cpu_rows_t *it,
    uint32_t c, const uint32_t NC)
{
    uint32_t      t, k;
    __m256        a[4], b[4], z0, z1;
    const float  *r0, *r1;

#pragma GCC unroll 4
    for (k = 0; k < NC; k++) {
        a[k] = _mm256_setzero_ps();
        b[k] = _mm256_setzero_ps();
    }

    for (t = 0; t + 1 < n; t += 2) {
        r0 = kvs_cpu_rows_next(it) + c;
        r1 = kvs_cpu_rows_next(it) + c;
        z0 = _mm256_broadcast_ss(sc + t);
        z1 = _mm256_broadcast_ss(sc + t + 1);

#pragma GCC unroll 4
        for (k = 0; k < NC; k++) {
            a[k] = _mm256_fmadd_ps(z0, _mm256_loadu_ps(r0 + 8 * k), a[k]);
            b[k] = _mm256_fmadd_ps(z1, _mm256_loadu_ps(r1 + 8 * k), b[k]);
        }
    }

    if (t < n) {
        r0 = kvs_cpu_rows_next(it) + c;
        z0 = _mm256_broadcast_ss(sc + t);

#pragma GCC unroll 4
        for (k = 0; k < NC; k++) {
            a[k] = _mm256_fmadd_ps(z0, _mm256_loadu_ps(r0 + 8 * k), a[k]);
        }
    }

#pragma GCC unroll 4
    for (k = 0; k < NC; k++) {
        _mm256_storeu_ps(ah + c + 8 * k, _mm256_add_ps(a[k], b[k]));
    }
}


/*
 * The softmaxes' first pass: the max of sc[0 .. n rounded up to 8) in
 * 8 lanes (the padding holds copies of real scores, so the max is the
 * real one; with NaNs this order decides which ones count), then the
 * padding set to -inf for the passes after it.
 */
__attribute__((target("avx2,fma"), always_inline)) static inline float
kvs_cpu_softmax_max(float *sc, uint32_t n)
{
    float     mx;
    uint32_t  t, n8;
    __m256    mv;
    __m128    m4;

    n8 = (n + 7) & ~7u;
    mv = _mm256_set1_ps(-INFINITY);

    for (t = 0; t < n8; t += 8) {
        mv = _mm256_max_ps(mv, _mm256_loadu_ps(sc + t));
    }

    m4 = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    mx = _mm_cvtss_f32(m4);

    for (t = n; t < n8; t++) {
        sc[t] = -INFINITY;
    }

    return mx;
}


/*
 * sc[0..n) = softmax(sc[0..n)) in vectors: sc holds n scores and, up to
 * the next multiple of 8, copies of real ones (so the max is the real
 * one), replaced by -inf here; e^(s - max) by kvs_cpu_exp8, their sum in
 * 8 lanes then kvs_cpu_attn_hsum, each divided by it.
 */
__attribute__((target("avx2,fma"))) static void
kvs_cpu_softmax_avx2(float *sc, uint32_t n)
{
    float     mx, sum;
    uint32_t  t, n8;
    __m256    mv, sv, e;

    n8 = (n + 7) & ~7u;
    mx = kvs_cpu_softmax_max(sc, n);

    sv = _mm256_setzero_ps();
    mv = _mm256_set1_ps(mx);

    for (t = 0; t < n8; t += 8) {
        e = kvs_cpu_exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + t), mv));
        _mm256_storeu_ps(sc + t, e);
        sv = _mm256_add_ps(sv, e);
    }

    sum = kvs_cpu_attn_hsum(sv);
    sv = _mm256_set1_ps(sum);

    for (t = 0; t < n8; t += 8) {
        _mm256_storeu_ps(sc + t, _mm256_div_ps(_mm256_loadu_ps(sc + t), sv));
    }
}


/*
 * The attention of one (token, head), 8 positions at a time: 8 q.k sums
 * in 8-lane FMAs reduced together (kvs_cpu_attn_hsum8), a last partial
 * group padded with its last position's row (fw->sc_len allows it);
 * kvs_cpu_softmax_avx2(); the weighted sum of V rows by
 * kvs_cpu_attn_v().
 */
__attribute__((target("avx2,fma"))) static void
kvs_cpu_attn_avx2(const kvs_cpu_fw_t *fw, const kvs_batch_tok_t *tk,
    const float *qh, float *ah, float *sc, uint32_t kvh)
{
    uint32_t              n, t, t0, p, j, c, hdk, hdv, bt;
    __m256                acc[8], qv;
    const float          *kp[8];
    kvs_cpu_rows_t        it;
    const kvs_hparams_t  *hp;

    hp = &fw->cm->hp;
    bt = fw->kv->block_tokens;
    hdk = hp->head_dim_k;
    hdv = hp->head_dim_v;
    t0 = kvs_cpu_attn_first(fw, tk);
    n = tk->pos + 1 - t0;

    kvs_cpu_rows_init(&it, fw, fw->kc, (size_t) kvh * hdk, fw->kd, tk, bt,
                      t0);

    for (t = 0; t < n; t += 8) {
        for (p = 0; p < 8; p++) {
            kp[p] = t + p < n ? kvs_cpu_rows_next(&it) : kp[p - 1];
        }

#pragma GCC unroll 8
        for (p = 0; p < 8; p++) {
            acc[p] = _mm256_setzero_ps();
        }

        for (j = 0; j < hdk; j += 8) {
            qv = _mm256_loadu_ps(qh + j);

#pragma GCC unroll 8
            for (p = 0; p < 8; p++) {
                acc[p] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp[p] + j),
                                         acc[p]);
            }
        }

        _mm256_storeu_ps(sc + t, _mm256_mul_ps(kvs_cpu_attn_hsum8(acc),
                                               _mm256_set1_ps(fw->scale)));
    }

    kvs_cpu_attn_cap(fw, sc, n);
    kvs_cpu_softmax_avx2(sc, n);

    for (c = 0; c + 32 <= hdv; c += 32) {
        kvs_cpu_rows_init(&it, fw, fw->vc, (size_t) kvh * hdv, fw->vd, tk,
                          bt, t0);
        kvs_cpu_attn_v(ah, sc, n, &it, c, 4);
    }

    for ( /* void */ ; c < hdv; c += 8) {
        kvs_cpu_rows_init(&it, fw, fw->vc, (size_t) kvh * hdv, fw->vd, tk,
                          bt, t0);
        kvs_cpu_attn_v(ah, sc, n, &it, c, 1);
    }
}


/* 8 stored elements at p of dtype DT (constant once inlined) as floats;
 * int8 and fp8 unscaled.  fp8 as kvs_kv_fp8_to_f32: a normal code's
 * bits placed into a float's ((em << 20) + (120 << 23)), a subnormal's
 * m x 2^-9, 0x7f a NaN, the sign set last. */
__attribute__((target("avx2,fma,f16c"), always_inline)) static inline __m256
kvs_cpu_kv_load8(const uint8_t *p, const uint32_t DT)
{
    __m128i  h;
    __m256i  c, em, sg;
    __m256   nrm, sub;

    switch (DT) {
    case KVS_KV_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) p));
    case KVS_KV_BF16:
        h = _mm_loadu_si128((const __m128i *) p);
        return _mm256_castsi256_ps(_mm256_slli_epi32(
                   _mm256_cvtepu16_epi32(h), 16));
    case KVS_KV_FP8:
        c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *) p));
        em = _mm256_and_si256(c, _mm256_set1_epi32(0x7f));
        sg = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)),
                               24);
        nrm = _mm256_castsi256_ps(_mm256_add_epi32(
                  _mm256_slli_epi32(em, 20), _mm256_set1_epi32(120 << 23)));
        sub = _mm256_mul_ps(_mm256_cvtepi32_ps(em),
                            _mm256_set1_ps(0.001953125f));
        nrm = _mm256_blendv_ps(nrm, sub, _mm256_castsi256_ps(
                  _mm256_cmpgt_epi32(_mm256_set1_epi32(8), em)));
        nrm = _mm256_blendv_ps(nrm, _mm256_castsi256_ps(
                                   _mm256_set1_epi32(0x7fc00000)),
                               _mm256_castsi256_ps(_mm256_cmpeq_epi32(
                                   em, _mm256_set1_epi32(0x7f))));
        return _mm256_or_ps(nrm, _mm256_castsi256_ps(sg));
    default:
        h = _mm_loadl_epi64((const __m128i *) p);
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(h));
    }
}


/*
 * kvs_cpu_attn_ref in 8-lane vectors for head sizes multiples of 8,
 * a block at a time (its rows' base and the head's scale found once):
 * each score one FMA chain over the row, summed by kvs_cpu_attn_hsum;
 * kvs_cpu_softmax_avx2(); each V row's weight (times its scale) added
 * into ah 8 floats at a time.
 */
__attribute__((target("avx2,fma,f16c"), always_inline)) static inline void
kvs_cpu_attn_qavx2_dt(const kvs_cpu_fw_t *fw, const kvs_batch_tok_t *tk,
    const float *qh, float *ah, float *sc, uint32_t kvh, const uint32_t DT)
{
    float                   s;
    size_t                  krow, vrow;
    uint32_t                n, t, t0, end, j, hdk, hdv, elem, bt;
    __m256                  acc, w;
    const uint8_t          *r, *base;
    const kvs_kv_layout_t  *lo;

    lo = &fw->kv->lo;
    hdk = lo->hd_k;
    hdv = lo->hd_v;
    elem = lo->elem;
    bt = lo->block_tokens;
    krow = (size_t) lo->k_row;
    vrow = (size_t) lo->v_row;
    t0 = kvs_cpu_attn_first(fw, tk);
    n = tk->pos + 1 - t0;

    for (t = t0; t <= tk->pos; /* void */ ) {
        base = kvs_cpu_kv_row(fw, tk, t, kvh, 0, &s) - (size_t) (t % bt)
               * krow;
        s *= fw->scale;
        end = (t / bt + 1) * bt;
        end = end > tk->pos + 1 ? tk->pos + 1 : end;

        for ( /* void */ ; t < end; t++) {
            r = base + (size_t) (t % bt) * krow;
            acc = _mm256_setzero_ps();

            for (j = 0; j < hdk; j += 8) {
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(qh + j),
                                      kvs_cpu_kv_load8(r + (size_t) j * elem,
                                                       DT),
                                      acc);
            }

            sc[t - t0] = kvs_cpu_attn_hsum(acc) * s;
        }
    }

    kvs_cpu_attn_cap(fw, sc, n);

    /* the vector softmax reads up to the next multiple of 8: copies of
     * a real score there, never what an earlier task left */
    for (t = n; t % 8 != 0; t++) {
        sc[t] = sc[n - 1];
    }

    kvs_cpu_softmax_avx2(sc, n);

    memset(ah, 0, hdv * sizeof(float));

    for (t = t0; t <= tk->pos; /* void */ ) {
        base = kvs_cpu_kv_row(fw, tk, t, kvh, 1, &s) - (size_t) (t % bt)
               * vrow;
        end = (t / bt + 1) * bt;
        end = end > tk->pos + 1 ? tk->pos + 1 : end;

        for ( /* void */ ; t < end; t++) {
            r = base + (size_t) (t % bt) * vrow;
            w = _mm256_set1_ps(sc[t - t0] * s);

            for (j = 0; j < hdv; j += 8) {
                _mm256_storeu_ps(ah + j, _mm256_fmadd_ps(
                    w, kvs_cpu_kv_load8(r + (size_t) j * elem, DT),
                    _mm256_loadu_ps(ah + j)));
            }
        }
    }
}


__attribute__((target("avx2,fma,f16c"))) static void
kvs_cpu_attn_qavx2(const kvs_cpu_fw_t *fw, const kvs_batch_tok_t *tk,
    const float *qh, float *ah, float *sc, uint32_t kvh)
{
    switch (fw->kv->lo.dtype) {
    case KVS_KV_F16:
        kvs_cpu_attn_qavx2_dt(fw, tk, qh, ah, sc, kvh, KVS_KV_F16);
        break;
    case KVS_KV_BF16:
        kvs_cpu_attn_qavx2_dt(fw, tk, qh, ah, sc, kvh, KVS_KV_BF16);
        break;
    case KVS_KV_FP8:
        kvs_cpu_attn_qavx2_dt(fw, tk, qh, ah, sc, kvh, KVS_KV_FP8);
        break;
    default:
        kvs_cpu_attn_qavx2_dt(fw, tk, qh, ah, sc, kvh, KVS_KV_INT8);
        break;
    }
}


#define KVS_CPU_AVX512  "avx512f,avx512bw,avx512vl,avx2,fma"

/* Lane l + lane l + 8 of a (the lower 8 lanes of the result) and of b
 * (the upper 8): a blend and a lane swap, then one add. */
__attribute__((target(KVS_CPU_AVX512), always_inline)) static inline __m512
kvs_cpu_attn_halves(__m512 a, __m512 b)
{
    return _mm512_add_ps(_mm512_mask_blend_ps(0xff00, a, b),
                         _mm512_shuffle_f32x4(a, b, 0x4e));
}


/* kvs_cpu_attn_hsum8 in 512-bit lanes: per 128-bit lane, the pairwise
 * sums of x's four lanes, then of y's (vhaddps's order). */
__attribute__((target(KVS_CPU_AVX512), always_inline)) static inline __m512
kvs_cpu_attn_hadd512(__m512 x, __m512 y)
{
    return _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x88),
                         _mm512_shuffle_ps(x, y, 0xdd));
}


/*
 * Lane p of the result: the sum of a[p]'s 16 lanes, as the 16-lane
 * score kernels always summed them: halves first (h_l = lane l +
 * lane l + 8), then kvs_cpu_attn_hsum8's tree ((h0+h1)+(h2+h3)) +
 * ((h4+h5)+(h6+h7)).  Done on pairs: x_i holds a[i]'s halves' sums and
 * a[i + 4]'s, so each step does the work of two 256-bit ones, about
 * half the shuffles.
 */
__attribute__((target(KVS_CPU_AVX512), always_inline)) static inline __m256
kvs_cpu_attn_hsum16x8(const __m512 *a)
{
    __m512  x0, x1, x2, x3, z;

    x0 = kvs_cpu_attn_halves(a[0], a[4]);
    x1 = kvs_cpu_attn_halves(a[1], a[5]);
    x2 = kvs_cpu_attn_halves(a[2], a[6]);
    x3 = kvs_cpu_attn_halves(a[3], a[7]);

    /* 128-bit lanes: (h0+h1)+(h2+h3) of a[0..3], (h4+h5)+(h6+h7) of
     * a[0..3], then the same of a[4..7] */
    z = kvs_cpu_attn_hadd512(kvs_cpu_attn_hadd512(x0, x1),
                             kvs_cpu_attn_hadd512(x2, x3));

    return _mm256_add_ps(_mm512_castps512_ps256(
                             _mm512_shuffle_f32x4(z, z, 0x08)),
                         _mm512_castps512_ps256(
                             _mm512_shuffle_f32x4(z, z, 0x0d)));
}


/*
 * Scores of GP (1..3, constant once inlined) query rows q[g] over the 8
 * positions whose K rows are kp[0..8): each K row loaded once for the GP
 * rows; 16-lane FMA sums over the row, reduced by
 * kvs_cpu_attn_hsum16x8, times scale, into s[g][t .. t + 8).
 */
__attribute__((target(KVS_CPU_AVX512), always_inline)) static inline void
kvs_cpu_attn_qk512(const float *const *q, float *const *s, uint32_t t,
    uint32_t hdk, const float *const *kp, float scale, const uint32_t GP)
{
    uint32_t  p, j, g;
    __m512    acc[3][8], kv;

#pragma GCC unroll 3
    for (g = 0; g < GP; g++) {
#pragma GCC unroll 8
        for (p = 0; p < 8; p++) {
            acc[g][p] = _mm512_setzero_ps();
        }
    }

    for (j = 0; j < hdk; j += 16) {
#pragma GCC unroll 8
        for (p = 0; p < 8; p++) {
            kv = _mm512_loadu_ps(kp[p] + j);

            /* in a register, for the GP products: GCC would otherwise
             * fold the load into each, loading the row GP times and
             * leaving the loop bound by loads, not FMAs */
            __asm__ ("" : "+v" (kv));

#pragma GCC unroll 3
            for (g = 0; g < GP; g++) {
                acc[g][p] = _mm512_fmadd_ps(_mm512_loadu_ps(q[g] + j), kv,
                                            acc[g][p]);
            }
        }
    }

#pragma GCC unroll 3
    for (g = 0; g < GP; g++) {
        _mm256_storeu_ps(s[g] + t,
                         _mm256_mul_ps(kvs_cpu_attn_hsum16x8(acc[g]),
                                       _mm256_set1_ps(scale)));
    }
}


/*
 * kvs_cpu_softmax_avx2's bits with e^x 16 lanes at a time
 * (kvs_cpu_exp16, the same operations lane for lane) and 16-lane
 * divisions; the max and the sum are still taken 8 lanes at a time in
 * the same order (the max's, with NaNs, decides which ones count).  sc
 * is read and written up to n rounded up to 8, as there.
 */
__attribute__((target(KVS_CPU_AVX512))) static void
kvs_cpu_softmax_avx512(float *sc, uint32_t n)
{
    float     mx, sum;
    uint32_t  t, n8;
    __m256    sv, e8;
    __m512    m16, e;

    n8 = (n + 7) & ~7u;
    mx = kvs_cpu_softmax_max(sc, n);

    sv = _mm256_setzero_ps();
    m16 = _mm512_set1_ps(mx);

    for (t = 0; t + 16 <= n8; t += 16) {
        e = kvs_cpu_exp16(_mm512_sub_ps(_mm512_loadu_ps(sc + t), m16));
        _mm512_storeu_ps(sc + t, e);
        sv = _mm256_add_ps(sv, _mm512_castps512_ps256(e));
        sv = _mm256_add_ps(sv, _mm256_castpd_ps(_mm512_extractf64x4_pd(
                                   _mm512_castps_pd(e), 1)));
    }

    if (t < n8) {
        e8 = kvs_cpu_exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + t),
                                        _mm256_set1_ps(mx)));
        _mm256_storeu_ps(sc + t, e8);
        sv = _mm256_add_ps(sv, e8);
    }

    sum = kvs_cpu_attn_hsum(sv);
    m16 = _mm512_set1_ps(sum);

    for (t = 0; t + 16 <= n8; t += 16) {
        _mm512_storeu_ps(sc + t, _mm512_div_ps(_mm512_loadu_ps(sc + t), m16));
    }

    if (t < n8) {
        _mm256_storeu_ps(sc + t, _mm256_div_ps(_mm256_loadu_ps(sc + t),
                                               _mm256_set1_ps(sum)));
    }
}


/* The rows from the iterator's position to the end of its block, at
 * most max: their count, the first one in *r (the others follow it,
 * it->width floats apart); the iterator steps past them. */
static inline uint32_t
kvs_cpu_rows_span(kvs_cpu_rows_t *it, uint32_t max, const float **r)
{
    uint32_t  m;

    m = it->bt - it->u < max ? it->bt - it->u : max;
    *r = it->row;
    it->row += (size_t) m * it->width;
    it->u += m;

    if (it->u == it->bt) {
        it->u = 0;

        if (it->blk < it->last) {
            it->blk++;
            it->row = it->base
                      + (size_t) it->blocks[it->blk] * it->bstride;
        }
    }

    return m;
}


/*
 * Rows r, r + width, .. of positions t .. e - 1 (columns c ..) into
 * kvs_cpu_attn_v512's accumulators (its TB, GP, CN): token b takes a
 * row only below n[b], which CHECK (a constant) tests; without it
 * every token takes every row.
 */
__attribute__((target(KVS_CPU_AVX512), always_inline)) static inline void
kvs_cpu_attn_vrows(__m512 (*acc)[3][4], __m512 (*odd)[4], const float *r,
    size_t width, uint32_t t, uint32_t e, const float *w, size_t ws,
    size_t sc_len, const uint32_t *n, uint32_t c, const uint32_t TB,
    const uint32_t GP, const uint32_t CN, const int CHECK)
{
    uint32_t  k, g, b;
    __m512    vv[4], z;

    for ( /* void */ ; t < e; t++, r += width) {
#pragma GCC unroll 4
        for (k = 0; k < CN; k++) {
            vv[k] = _mm512_loadu_ps(r + c + 16 * k);
        }

#pragma GCC unroll 4
        for (b = 0; b < TB; b++) {
            if (CHECK && t >= n[b]) {
                continue;
            }

            if (GP == 1 && (t & 1)) {
                z = _mm512_set1_ps(w[b * ws + t]);

#pragma GCC unroll 4
                for (k = 0; k < CN; k++) {
                    odd[b][k] = _mm512_fmadd_ps(z, vv[k], odd[b][k]);
                }

                continue;
            }

#pragma GCC unroll 3
            for (g = 0; g < GP; g++) {
                z = _mm512_set1_ps(w[b * ws + g * sc_len + t]);

#pragma GCC unroll 4
                for (k = 0; k < CN; k++) {
                    acc[b][g][k] = _mm512_fmadd_ps(z, vv[k], acc[b][g][k]);
                }
            }
        }
    }
}


/*
 * Output columns c .. c + 16 CN of TB tokens x GP heads (TB 1, 2 or 4,
 * GP 1..3, CN 1, 2 or 4, constants once inlined) sharing the V head:
 * a[b * as + g * hdv + c ..] = the sum over t < n[b] of
 * w[b * ws + g * sc_len + t] * v_t[c ..], in position order, each V row
 * loaded once for all of them; a head alone (GP 1) alternates two
 * accumulators (even t, odd t; added last) to cover the FMA latency.
 * The rows are walked a block's span at a time; n[] ascends (a query
 * block's tokens), and below n[0] every token takes the row untested.
 */
__attribute__((target(KVS_CPU_AVX512), always_inline)) static inline void
kvs_cpu_attn_v512(float *a, size_t as, uint32_t hdv, const float *w,
    size_t ws, size_t sc_len, const uint32_t *n, kvs_cpu_rows_t it,
    uint32_t c, const uint32_t TB, const uint32_t GP, const uint32_t CN)
{
    uint32_t      t, e, end, k, g, b;
    __m512        acc[4][3][4], odd[4][4];
    const float  *r;

#pragma GCC unroll 4
    for (b = 0; b < TB; b++) {
#pragma GCC unroll 4
        for (k = 0; k < CN; k++) {
            odd[b][k] = _mm512_setzero_ps();

#pragma GCC unroll 3
            for (g = 0; g < GP; g++) {
                acc[b][g][k] = _mm512_setzero_ps();
            }
        }
    }

    for (t = 0; t < n[TB - 1]; t = end) {
        end = t + kvs_cpu_rows_span(&it, n[TB - 1] - t, &r);
        e = end < n[0] ? end : n[0];
        e = e > t ? e : t;

        kvs_cpu_attn_vrows(acc, odd, r, it.width, t, e, w, ws, sc_len, n, c,
                           TB, GP, CN, 0);

        if (e < end) {
            kvs_cpu_attn_vrows(acc, odd, r + (e - t) * it.width, it.width,
                               e, end, w, ws, sc_len, n, c, TB, GP, CN, 1);
        }
    }

#pragma GCC unroll 4
    for (b = 0; b < TB; b++) {
#pragma GCC unroll 3
        for (g = 0; g < GP; g++) {
#pragma GCC unroll 4
            for (k = 0; k < CN; k++) {
                if (GP == 1) {
                    acc[b][g][k] = _mm512_add_ps(acc[b][g][k], odd[b][k]);
                }

                _mm512_storeu_ps(a + b * as + (size_t) g * hdv + c + 16 * k,
                                 acc[b][g][k]);
            }
        }
    }
}


/* kvs_cpu_attn_v512 with its shape as constants: TB x GP x CN
 * accumulators (twice as many at GP 1) fit in 24 registers. */
__attribute__((target(KVS_CPU_AVX512))) static void
kvs_cpu_attn_vpass(float *a, size_t as, uint32_t hdv, const float *w,
    size_t ws, size_t sc_len, const uint32_t *n, const kvs_cpu_rows_t *it,
    uint32_t c, uint32_t tb, uint32_t gp, uint32_t cn)
{
#define KVS_CPU_ATTN_V(TB, GP, CN)                                            \
    case (TB) * 100 + (GP) * 10 + (CN):                                       \
        kvs_cpu_attn_v512(a, as, hdv, w, ws, sc_len, n, *it, c, TB, GP, CN); \
        break

    switch (tb * 100 + gp * 10 + cn) {
    KVS_CPU_ATTN_V(1, 1, 4);
    KVS_CPU_ATTN_V(1, 2, 4);
    KVS_CPU_ATTN_V(1, 3, 4);
    KVS_CPU_ATTN_V(2, 1, 4);
    KVS_CPU_ATTN_V(2, 2, 4);
    KVS_CPU_ATTN_V(2, 3, 4);
    KVS_CPU_ATTN_V(4, 1, 2);
    KVS_CPU_ATTN_V(4, 2, 2);
    KVS_CPU_ATTN_V(4, 3, 2);
    KVS_CPU_ATTN_V(1, 1, 1);
    KVS_CPU_ATTN_V(1, 2, 1);
    KVS_CPU_ATTN_V(1, 3, 1);
    KVS_CPU_ATTN_V(2, 1, 1);
    KVS_CPU_ATTN_V(2, 2, 1);
    KVS_CPU_ATTN_V(2, 3, 1);
    KVS_CPU_ATTN_V(4, 1, 1);
    KVS_CPU_ATTN_V(4, 2, 1);
    default:
        kvs_cpu_attn_v512(a, as, hdv, w, ws, sc_len, n, *it, c, 4, 3, 1);
        break;
    }

#undef KVS_CPU_ATTN_V
}


/*
 * Scores of units u0 .. u1 - 1 (at most KVS_CPU_ATTN_UNITS) of
 * kvs_cpu_attn_blk512's block (tokens i0 .., n[] positions each, query
 * heads h ..), the K rows from *rows on: 8 positions at a time, each
 * group's rows loaded from L2 once and, while in L1, scored against
 * every unit by passes of up to 3 units.  A pass whose units all end
 * before the group is skipped; one that straddles scores later rows for
 * some of its units, lanes kvs_cpu_attn_blk512 then overwrites.
 */
__attribute__((target(KVS_CPU_AVX512))) static void
kvs_cpu_attn_scores512(const kvs_cpu_fw_t *fw, uint32_t i0, uint32_t h,
    const uint32_t *n, uint32_t u0, uint32_t u1, const kvs_cpu_rows_t *rows,
    float *sc)
{
    float           *s[KVS_CPU_ATTN_UNITS];
    uint32_t         un[KVS_CPU_ATTN_UNITS], m, u, t, p, gp, b, group,
                     hdk, nmax;
    const float     *q[KVS_CPU_ATTN_UNITS], *kp[8];
    kvs_cpu_rows_t   it;

    group = fw->attn_group;
    hdk = fw->cm->hp.head_dim_k;
    m = u1 - u0;

    for (u = 0; u < m; u++) {
        b = (u0 + u) / group;
        q[u] = fw->q + (size_t) (i0 + b) * fw->qd
               + (size_t) (h + (u0 + u) % group) * hdk;
        s[u] = sc + (size_t) (u0 + u) * fw->sc_len;
        un[u] = n[b];
    }

    nmax = un[m - 1];
    it = *rows;

    for (t = 0; t < nmax; t += 8) {
        for (p = 0; p < 8; p++) {
            kp[p] = t + p < nmax ? kvs_cpu_rows_next(&it) : kp[p - 1];
        }

        for (u = 0; u < m; u += gp) {
            gp = m - u < 3 ? m - u : 3;

            if (t >= un[u + gp - 1]) {
                continue;
            }

            switch (gp) {
            case 3:
                kvs_cpu_attn_qk512(q + u, s + u, t, hdk, kp, fw->scale, 3);
                break;
            case 2:
                kvs_cpu_attn_qk512(q + u, s + u, t, hdk, kp, fw->scale, 2);
                break;
            default:
                kvs_cpu_attn_qk512(q + u, s + u, t, hdk, kp, fw->scale, 1);
                break;
            }
        }
    }
}


/*
 * The attention of the nb tokens i0 .. (one token, or a query block
 * whose windows all start at 0) for their fw->attn_group query heads
 * h .. sharing K/V head kvh.  Units (token b, head g), u = b * group +
 * g, score into sc[u * sc_len ..] (kvs_cpu_attn_scores512, at most
 * KVS_CPU_ATTN_UNITS units per walk over the K rows).  A unit's lanes
 * from n[b] to the next multiple of 8, which the vector softmax reads,
 * are set to its last score as the one-token kernel's repeated last row
 * gave them (uncapped: the cap comes after).  Each unit's cap and
 * softmax, then the V sums, the heads by passes of up to 3 as one token
 * alone takes them, each pass by up to 4 tokens.
 */
__attribute__((target(KVS_CPU_AVX512))) static void
kvs_cpu_attn_blk512(const kvs_cpu_fw_t *fw, uint32_t i0, uint32_t nb,
    uint32_t h, uint32_t kvh, float *sc)
{
    float                  *w;
    uint32_t                n[KVS_CPU_ATTN_QB], t, t0, u, g, gp, b, tb, c,
                            cn, hdk, hdv, bt, group, nu;
    kvs_cpu_rows_t          it;
    const kvs_hparams_t    *hp;
    const kvs_batch_tok_t  *tk;

    hp = &fw->cm->hp;
    bt = fw->kv->block_tokens;
    hdk = hp->head_dim_k;
    hdv = hp->head_dim_v;
    group = fw->attn_group;
    tk = &fw->b->toks[i0 + nb - 1];
    t0 = kvs_cpu_attn_first(fw, tk);
    nu = nb * group;

    for (b = 0; b < nb; b++) {
        n[b] = fw->b->toks[i0 + b].pos + 1 - t0;
    }

    kvs_cpu_rows_init(&it, fw, fw->kc, (size_t) kvh * hdk, fw->kd, tk, bt,
                      t0);

    for (u = 0; u < nu; u += KVS_CPU_ATTN_UNITS) {
        kvs_cpu_attn_scores512(fw, i0, h, n, u,
                               nu - u < KVS_CPU_ATTN_UNITS
                               ? nu : u + KVS_CPU_ATTN_UNITS, &it, sc);
    }

    for (u = 0; u < nu; u++) {
        w = sc + (size_t) u * fw->sc_len;
        b = u / group;

        /* the lanes the softmax reads past n: the last score, uncapped,
         * as the repeated row gave it */
        for (t = n[b]; t % 8 != 0; t++) {
            w[t] = w[n[b] - 1];
        }

        kvs_cpu_attn_cap(fw, w, n[b]);
        kvs_cpu_softmax_avx512(w, n[b]);
    }

    kvs_cpu_rows_init(&it, fw, fw->vc, (size_t) kvh * hdv, fw->vd, tk, bt,
                      t0);

    for (g = 0; g < group; g += gp) {
        gp = group - g < 3 ? group - g : 3;

        for (b = 0; b < nb; b += tb) {
            tb = nb - b >= 4 ? 4 : nb - b >= 2 ? 2 : 1;

            for (c = 0; c < hdv; c += 16 * cn) {
                cn = tb > 2 ? 2 : 4;
                cn = c + 16 * cn <= hdv ? cn : 1;
                kvs_cpu_attn_vpass(fw->att + (size_t) (i0 + b) * fw->od
                                   + (size_t) (h + g) * hdv,
                                   fw->od, hdv,
                                   sc + ((size_t) b * group + g)
                                        * fw->sc_len,
                                   group * fw->sc_len, fw->sc_len, n + b,
                                   &it, c, tb, gp, cn);
            }
        }
    }
}

#endif /* KVS_CPU_X86 */
