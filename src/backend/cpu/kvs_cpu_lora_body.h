/*
 * kvs_cpu_lora_body.h: the one body of the CPU backend's x86 LoRA group
 * kernels (kvs_cpu_lora.h), included by kvs_cpu_lora_x86.c once per
 * kernel level with that level's vector width and primitives defined:
 *
 *   KVS_LX(name)        the level's name for a function (name_avx2, ...)
 *   KVS_LX_TARGET       its target attribute
 *   KVS_LX_V            its F32 vector type, KVS_LX_L lanes
 *   KVS_LX_NR           ranks of A per pass of the shrink (its widest)
 *   KVS_LX_NV           vectors of outputs per pass of the expand
 *   KVS_LX_ZERO()       a vector of zeros
 *   KVS_LX_FMA(a, b, c) a * b + c, fused
 *   KVS_LX_SET1(f)      f in every lane
 *   KVS_LX_LDH(p, n)    the first n (1..L) halves at p as floats, the
 *                       other lanes zero; never reads past p + n
 *   KVS_LX_LDF(p, n)    the same of floats
 *   KVS_LX_STF(p, v, n) v's first n lanes to p, nothing past p + n
 *   KVS_LX_HSUM(v)      the sum of v's lanes, in a fixed order
 *
 * It defines the level's group kernels, KVS_LX(kvs_cpu_lora_rows) and
 * its two halves KVS_LX(kvs_cpu_lora_shrink) (T) and
 * KVS_LX(kvs_cpu_lora_expand) (a range of the outputs from T), and
 * undefines the names above at its end.  Each
 * call that covers whole vectors passes n = L as a constant, so the
 * primitives' tail cases fold away in the loops that matter.
 *
 * Invariants (the group kernels' of kvs_cpu_lora.h): T[r] is one vector
 * sum over x in column order (whole vectors, then the tail's, zero
 * padded), then the fixed reduction; y[o] is y[o] + T[0] B[o][0] + T[1]
 * B[o][1] + ... in rank order, whatever the block shape, so a row's
 * result depends on neither the other rows of its group nor its place
 * in it.  Nothing here allocates.
 */

#if !defined(KVS_LX) || !defined(KVS_LX_NR) || !defined(KVS_LX_NV)
#error "kvs_cpu_lora_body.h is included by kvs_cpu_lora_x86.c only"
#endif


/* The shrink's pass over c .. c + n (n <= L): NR rows of A against NX
 * inputs. */
__attribute__((target(KVS_LX_TARGET), always_inline)) static inline void
KVS_LX(kvs_cpu_lora_a_step)(const uint16_t *a, size_t lda,
    const float *const *xs, uint32_t c, uint32_t n,
    KVS_LX_V acc[KVS_CPU_LORA_NX][KVS_LX_NR], const uint32_t NX,
    const uint32_t NR)
{
    uint32_t  i, k;
    KVS_LX_V  av[KVS_LX_NR], xv;

#pragma GCC unroll 4
    for (k = 0; k < NR; k++) {
        av[k] = KVS_LX_LDH(a + (size_t) k * lda + c, n);
    }
#pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
        xv = KVS_LX_LDF(xs[i] + c, n);
#pragma GCC unroll 4
        for (k = 0; k < NR; k++) {
            acc[i][k] = KVS_LX_FMA(xv, av[k], acc[i][k]);
        }
    }
}


/* t[i][r0 .. r0 + NR) = A[r0 .. r0 + NR) . x_i for NX rows */
__attribute__((target(KVS_LX_TARGET), always_inline)) static inline void
KVS_LX(kvs_cpu_lora_a)(const kvs_cpu_lora_pair_t *p, const float *const *xs,
    float *const *ts, uint32_t r0, const uint32_t NX, const uint32_t NR)
{
    uint32_t        c, i, k, n;
    KVS_LX_V        acc[KVS_CPU_LORA_NX][KVS_LX_NR];
    const uint16_t *a;

    n = p->n_in;
    a = p->a + (size_t) r0 * n;

#pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
#pragma GCC unroll 4
        for (k = 0; k < NR; k++) {
            acc[i][k] = KVS_LX_ZERO();
        }
    }

    for (c = 0; c + KVS_LX_L <= n; c += KVS_LX_L) {
        KVS_LX(kvs_cpu_lora_a_step)(a, n, xs, c, KVS_LX_L, acc, NX, NR);
    }

    if (c < n) {
        KVS_LX(kvs_cpu_lora_a_step)(a, n, xs, c, n - c, acc, NX, NR);
    }

#pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
#pragma GCC unroll 4
        for (k = 0; k < NR; k++) {
            ts[i][r0 + k] = KVS_LX_HSUM(acc[i][k]) * p->scale;
        }
    }
}


/* y_i[o .. o + L NV) += sum over r of t_i[r] B^T[r][...] for NX rows,
 * the last vector's first `last` (1..L) lanes only */
__attribute__((target(KVS_LX_TARGET), always_inline)) static inline void
KVS_LX(kvs_cpu_lora_b)(const kvs_cpu_lora_pair_t *p, float *const *ys,
    const float *const *ts, uint32_t o, const uint32_t NX, const uint32_t NV,
    uint32_t last)
{
    uint32_t        i, r, v, cnt[KVS_LX_NV];
    KVS_LX_V        acc[KVS_CPU_LORA_NX][KVS_LX_NV], bv[KVS_LX_NV], tb;
    const uint16_t *b;

#pragma GCC unroll 4
    for (v = 0; v < NV; v++) {
        cnt[v] = v + 1 == NV ? last : KVS_LX_L;
    }

#pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
#pragma GCC unroll 4
        for (v = 0; v < NV; v++) {
            acc[i][v] = KVS_LX_LDF(ys[i] + o + KVS_LX_L * v, cnt[v]);
        }
    }

    /* o is a multiple of L or the start of a run within a block (the
     * expand's head), so no vector spans two blocks of B^T */
    for (r = 0; r < p->rank; r++) {
#pragma GCC unroll 4
        for (v = 0; v < NV; v++) {
            b = kvs_cpu_lora_bt(p, r, o + KVS_LX_L * v);
            bv[v] = KVS_LX_LDH(b, cnt[v]);
        }
#pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            tb = KVS_LX_SET1(ts[i][r]);
#pragma GCC unroll 4
            for (v = 0; v < NV; v++) {
                acc[i][v] = KVS_LX_FMA(tb, bv[v], acc[i][v]);
            }
        }
    }

#pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
#pragma GCC unroll 4
        for (v = 0; v < NV; v++) {
            KVS_LX_STF(ys[i] + o + KVS_LX_L * v, acc[i][v], cnt[v]);
        }
    }
}


/* A block of NX rows: T for all of them. */
__attribute__((target(KVS_LX_TARGET), always_inline)) static inline void
KVS_LX(kvs_cpu_lora_blk_a)(const kvs_cpu_lora_pair_t *p,
    const float *const *xs, float *const *ts, const uint32_t NX)
{
    uint32_t  r;

    for (r = 0; r + KVS_LX_NR <= p->rank; r += KVS_LX_NR) {
        KVS_LX(kvs_cpu_lora_a)(p, xs, ts, r, NX, KVS_LX_NR);
    }
    for ( /* void */ ; r < p->rank; r++) {
        KVS_LX(kvs_cpu_lora_a)(p, xs, ts, r, NX, 1);
    }
}


/* ... and their outputs o0 .. o1: each output's sum is the same whatever
 * the range it is in (one lane of one vector, in rank order) */
__attribute__((target(KVS_LX_TARGET), always_inline)) static inline void
KVS_LX(kvs_cpu_lora_blk_b)(const kvs_cpu_lora_pair_t *p, float *const *ys,
    float *const *ts, uint32_t o0, uint32_t o1, const uint32_t NX)
{
    uint32_t  o, h;

    /* a start inside a vector: the run to the vector's end first */
    o = o0;
    h = o % KVS_LX_L;
    if (h != 0 && o < o1) {
        h = KVS_LX_L - h < o1 - o ? KVS_LX_L - h : o1 - o;
        KVS_LX(kvs_cpu_lora_b)(p, ys, (const float *const *) ts, o, NX, 1,
                               h);
        o += h;
    }

    for ( /* void */ ; o + KVS_LX_NV * KVS_LX_L <= o1;
         o += KVS_LX_NV * KVS_LX_L)
    {
        KVS_LX(kvs_cpu_lora_b)(p, ys, (const float *const *) ts, o, NX,
                               KVS_LX_NV, KVS_LX_L);
    }
    for ( /* void */ ; o + KVS_LX_L <= o1; o += KVS_LX_L) {
        KVS_LX(kvs_cpu_lora_b)(p, ys, (const float *const *) ts, o, NX, 1,
                               KVS_LX_L);
    }
    if (o < o1) {
        KVS_LX(kvs_cpu_lora_b)(p, ys, (const float *const *) ts, o, NX, 1,
                               o1 - o);
    }
}


__attribute__((target(KVS_LX_TARGET))) void
KVS_LX(kvs_cpu_lora_shrink)(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g)
{
    float        *ys[KVS_CPU_LORA_NX], *ts[KVS_CPU_LORA_NX];
    uint32_t      i, nx;
    const float  *xs[KVS_CPU_LORA_NX];

    kvs_cpu_lora_prefetch(p);

    for (i = 0; i < g->cnt; i += nx) {
        nx = kvs_cpu_lora_block(p, g, i, xs, ys, ts);

        if (nx == 4) {
            KVS_LX(kvs_cpu_lora_blk_a)(p, xs, ts, 4);
        } else if (nx == 2) {
            KVS_LX(kvs_cpu_lora_blk_a)(p, xs, ts, 2);
        } else {
            KVS_LX(kvs_cpu_lora_blk_a)(p, xs, ts, 1);
        }
    }
}


__attribute__((target(KVS_LX_TARGET))) void
KVS_LX(kvs_cpu_lora_expand)(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g, uint32_t o0, uint32_t o1)
{
    float        *ys[KVS_CPU_LORA_NX], *ts[KVS_CPU_LORA_NX];
    uint32_t      i, nx;
    const float  *xs[KVS_CPU_LORA_NX];

    for (i = 0; i < g->cnt; i += nx) {
        nx = kvs_cpu_lora_block(p, g, i, xs, ys, ts);

        if (nx == 4) {
            KVS_LX(kvs_cpu_lora_blk_b)(p, ys, ts, o0, o1, 4);
        } else if (nx == 2) {
            KVS_LX(kvs_cpu_lora_blk_b)(p, ys, ts, o0, o1, 2);
        } else {
            KVS_LX(kvs_cpu_lora_blk_b)(p, ys, ts, o0, o1, 1);
        }
    }
}


/* the whole product: T for every row, then their outputs (each row's
 * the same bits as in one pass: rows never mix) */
__attribute__((target(KVS_LX_TARGET))) void
KVS_LX(kvs_cpu_lora_rows)(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g)
{
    KVS_LX(kvs_cpu_lora_shrink)(p, g);
    KVS_LX(kvs_cpu_lora_expand)(p, g, 0, p->n_out);
}


/* the level's names go: the next level defines its own */
#undef KVS_LX
#undef KVS_LX_TARGET
#undef KVS_LX_V
#undef KVS_LX_L
#undef KVS_LX_NR
#undef KVS_LX_NV
#undef KVS_LX_ZERO
#undef KVS_LX_FMA
#undef KVS_LX_SET1
#undef KVS_LX_LDH
#undef KVS_LX_LDF
#undef KVS_LX_STF
#undef KVS_LX_HSUM
