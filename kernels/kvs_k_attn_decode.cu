/*
 * kvs_k_attn_decode: attention of decode tokens (runs of one token) over
 * the paged K/V cache, grouped-query heads, split over the K/V length;
 * kvs_k_attn_decode() and kvs_k_attn_part_floats().
 *
 * Two kernels:
 *   kvs_kd_part: one CTA per (run, K/V head x head chunk, split).  It
 *     computes up to GC query heads of one K/V head (the whole group when
 *     n_head / n_head_kv <= 8), so each K and V element of its positions
 *     is read once from global memory for all of them.  Split s covers
 *     positions [s * len, (s + 1) * len) of 0..pos, len = ceil(max_ctx /
 *     n_split); the last split also takes everything past its end up to
 *     pos, so a max_ctx too small costs speed, never positions.  In a
 *     layer with a sliding window (window != 0) a split starts no
 *     earlier than the token's first visible position, pos + 1 - window
 *     (kvs_cpu_attn_first's rule), and a split wholly before it is
 *     skipped by both kernels (the rule, with its invariant:
 *     kvs_k_split.h, checked on the host by t/unit/test_k_split.c).  With
 *     n_split == 1 it normalizes and writes out itself; otherwise it
 *     writes (max, sum, acc[hd_v]) into part and
 *   kvs_kd_combine: one CTA per (run, query head) merges the parts of the
 *     splits that hold positions (s * len <= pos) into out.
 *
 * Thread layout of kvs_kd_part (128 threads):
 *   - staging: tiles of `tile` positions (8..64, 16 KB of K+V rows per
 *     tile) are copied into shared memory with 16-byte cp.async (plain
 *     element copies when the head sizes or pointers do not allow it),
 *     double buffered: tile i + 1 is in flight while tile i is computed;
 *   - scores: R lanes (a power of two <= 32) share a K row, each taking
 *     chunks lr, lr + R, .. of V elements (16 bytes); q of the GC heads
 *     for those chunks lives in registers; a butterfly of shuffles sums
 *     the R partial dots;
 *   - scores are scaled, then soft-capped (cap tanh(s / cap)) when
 *     softcap != 0, as the CPU backend does before its softmax;
 *   - softmax: warp w updates the running max and sum of heads w, w + 4;
 *   - P.V: TV threads share a V row (chunk cv each), 128 / TV row groups
 *     accumulate every GC head in registers over their rows of every
 *     tile; the row groups are added in a fixed order at the end.
 *
 * An int8 or fp8 cache (kvs_ka_ty<DT>::scaled; head sizes multiples of
 * 8, else KVS_K_EARG) is staged as bytes, 8 a copy, and decoded in
 * registers as it is read; the thread that writes a
 * row's scores multiplies them by the row's block K scale (read from
 * ks) and leaves its V scale in vsc[row], by which P.V multiplies the
 * row's weight: no full-precision copy of the cache is made.
 *
 * Shared memory (dynamic, under 48 KB, no opt-in): stage[2][tile][hd_k +
 * hd_v] raw elements (reused as red[GC][hd_v] floats at the end),
 * rowbase[2][tile] u64, s[GC][tile], m[GC], l[GC], al[GC] floats, and in
 * int8 / fp8 vsc[tile] floats.
 *
 * Invariants: the grid depends only on the launcher's arguments; tokens
 * whose run is not of length 1, whose index, sequence or table offset is
 * out of range are skipped (padding, pos < 0, gets zero output rows);
 * a block id outside [0, n_blocks) reads zeros, never faults; every
 * index into the cache or the activations is size_t; all sums in F32.
 */

#include <math.h>
#include <stdint.h>

#include "kvs_k_attn.cuh"
#include "kvs_k_split.h"


#define KVS_KD_THREADS   128
#define KVS_KD_QREGS     64         /* floats of q (and of acc) a thread
                                       holds at most */
#define KVS_KD_STAGE     32768      /* bytes of both K/V stages */
#define KVS_KD_TILE_MAX  64         /* softmax takes 2 positions a lane */
#define KVS_KD_HD_MAX    256
#define KVS_KD_GRID_MAX  65535u     /* grid y and z */


/* Arguments of both kernels, by value. */
typedef struct {
    float           *out;         /* [n_tok][n_head * hd_v] */
    float           *part;        /* [n_tok][n_head][n_split][hd_v + 2] */
    const float     *q;           /* [n_tok][n_head * hd_k] */
    const void      *k;           /* layer's [n_blocks][bt][k_width] */
    const void      *v;           /* layer's [n_blocks][bt][v_width] */
    const float     *ks;          /* int8, fp8: layer's [n_blocks][n_kv] */
    const float     *vs;
    const int32_t   *pos;
    const int32_t   *seq;
    const int32_t   *table_off;
    const int32_t   *table;
    const int32_t   *run_tok0;
    const int32_t   *run_len;
    uint32_t         n_tok;
    uint32_t         n_seq;
    uint32_t         n_blocks;
    uint32_t         bt;          /* block_tokens */
    uint32_t         n_head;
    uint32_t         group;       /* n_head / n_head_kv */
    uint32_t         n_hc;        /* head chunks per K/V head */
    uint32_t         hd_k;
    uint32_t         hd_v;
    uint32_t         n_split;
    uint32_t         split_len;   /* >= 1 */
    uint32_t         tile;        /* positions per stage, 8..64 */
    uint32_t         r;           /* lanes per K row, power of 2 <= 32 */
    uint32_t         tv;          /* threads per V row, <= 128 */
    uint32_t         window;      /* positions a query sees; 0: all */
    float            scale;
    float            softcap;     /* 0: none */
} kvs_kd_args_t;




/*
 * The token of run r if the run is a decode (length 1) with a token
 * index in range, else -1; *pos is its position, or -1 when it must be
 * written as zeros (padding, or a sequence or table offset out of
 * range); *base its table's first index.
 */
__device__ __forceinline__ int32_t
kvs_kd_token(const kvs_kd_args_t &a, uint32_t r, int32_t *pos,
    int32_t *base)
{
    int32_t  t, p, s, off;

    if (a.run_len[r] != 1) {
        return -1;
    }

    t = a.run_tok0[r];
    if (t < 0 || (uint32_t) t >= a.n_tok) {
        return -1;
    }

    p = a.pos[t];
    s = a.seq[t];
    *pos = -1;
    *base = 0;

    if (p < 0 || s < 0 || (uint32_t) s >= a.n_seq) {
        return t;
    }

    off = a.table_off[s];
    if (off < 0) {
        return t;
    }

    *pos = p;
    *base = off;

    return t;
}


/* The split rules (kvs_k_split.h, shared with a C unit test) on the
 * kernels' arguments. */
__device__ __forceinline__ uint32_t
kvs_kd_active(const kvs_kd_args_t &a, int32_t pos)
{
    return kvs_ks_active(a.n_split, a.split_len, pos);
}


__device__ __forceinline__ uint32_t
kvs_kd_split0(const kvs_kd_args_t &a, int32_t pos)
{
    return kvs_ks_split0(a.n_split, a.split_len, a.window, pos);
}


/*
 * One (run, K/V head x head chunk, split): see the file's comment.
 * DT the cache's dtype, GC the query heads per CTA (1, 2, 4, 8), V the
 * elements per copy (16 bytes' worth, or 1).
 */
template <int DT, int GC, int V>
__global__ void __launch_bounds__(KVS_KD_THREADS)
kvs_kd_part(kvs_kd_args_t a)
{
    typedef typename kvs_ka_ty<DT>::raw  raw;

    /* q chunks a lane holds per head; acc chunks a thread holds */
    constexpr int  CPL = KVS_KD_QREGS / (GC * V) > 0
                         ? KVS_KD_QREGS / (GC * V) : 1;
    constexpr int  CPT = V == 1 ? 2 : 1;

    extern __shared__ __align__(16) unsigned char  kvs_kd_smem[];

    float               qr[GC][CPL][V], acc[GC][CPT][V], kf[V], d[GC];
    float               x0, x1, mt, mo, mn, e0, e1, sum, al, p, ksc;
    int32_t             t, pos, tbase;
    uint32_t            tid, lane, warp, kvh, hc, h0, ng, split, ck, cv;
    uint32_t            ckv, cpr, rstep, nrg, rg, cvt, lr, rp, row, c;
    uint32_t            ntiles, i, nrows, o, j, g, e;
    uint64_t            start, end, p0;
    size_t              kw, vw, rb, orow;
    raw                *stage, *st, *kr;
    uint64_t           *rowbase;
    float              *s, *sm, *sl, *sal, *red, *vsc;
    const raw          *kg, *vg;
    bool                ok;

    tid = threadIdx.x;
    lane = tid & 31;
    warp = tid >> 5;
    kvh = blockIdx.y / a.n_hc;
    hc = blockIdx.y % a.n_hc;
    split = blockIdx.z;

    t = kvs_kd_token(a, blockIdx.x, &pos, &tbase);
    if (t < 0) {
        return;
    }

    h0 = kvh * a.group + hc * GC;
    ng = a.group - hc * GC;
    ng = ng < GC ? ng : GC;

    if (pos < 0) {
        /* padding: zero rows, written here only when there is no
         * combine kernel to do it */
        if (a.n_split == 1) {
            for (e = tid; e < ng * a.hd_v; e += KVS_KD_THREADS) {
                a.out[((size_t) t * a.n_head + h0) * a.hd_v + e] = 0.0f;
            }
        }

        return;
    }

    if (!kvs_ks_range(a.n_split, a.split_len, a.window, pos, split, &start,
                      &end))
    {
        return;
    }

    /* shared memory, laid out as the launcher sized it */
    ck = a.hd_k / V;
    cv = a.hd_v / V;
    ckv = ck + cv;
    stage = (raw *) kvs_kd_smem;
    rb = ((size_t) 2 * a.tile * (a.hd_k + a.hd_v) * sizeof(raw) + 15)
         & ~(size_t) 15;
    if (rb < (size_t) GC * a.hd_v * sizeof(float)) {
        rb = (size_t) GC * a.hd_v * sizeof(float);
    }
    rowbase = (uint64_t *) (kvs_kd_smem + rb);
    s = (float *) (rowbase + 2 * a.tile);            /* [GC][tile] */
    sm = s + GC * a.tile;
    sl = sm + GC;
    sal = sl + GC;
    vsc = sal + GC;                                  /* [tile], scaled */
    red = (float *) kvs_kd_smem;                     /* [GC][hd_v] */

    kw = (size_t) (a.n_head / a.group) * a.hd_k;
    vw = (size_t) (a.n_head / a.group) * a.hd_v;
    kg = (const raw *) a.k + (size_t) kvh * a.hd_k;
    vg = (const raw *) a.v + (size_t) kvh * a.hd_v;

    /* q of the GC heads for this lane's chunks */
    lr = tid % a.r;
    orow = (size_t) t * a.n_head + h0;

#pragma unroll
    for (g = 0; g < GC; g++) {
#pragma unroll
        for (int k = 0; k < CPL; k++) {
            c = lr + k * a.r;
#pragma unroll
            for (int x = 0; x < V; x++) {
                qr[g][k][x] = g < ng && c < ck
                              ? a.q[(orow + g) * a.hd_k + c * V + x] : 0.0f;
            }
        }
    }

#pragma unroll
    for (g = 0; g < GC; g++) {
#pragma unroll
        for (int k = 0; k < CPT; k++) {
#pragma unroll
            for (int x = 0; x < V; x++) {
                acc[g][k][x] = 0.0f;
            }
        }
    }

    if (tid < GC) {
        sm[tid] = -INFINITY;
        sl[tid] = 0.0f;
    }

    /* staging: thread copies chunk (tid % cpr) + n cpr of rows tid / cpr
     * + n rstep */
    cpr = ckv < KVS_KD_THREADS ? ckv : KVS_KD_THREADS;
    rstep = KVS_KD_THREADS / cpr;

    /* P.V: row group rg, chunk cvt (+ tv) */
    nrg = KVS_KD_THREADS / a.tv;
    rg = tid / a.tv;
    cvt = tid % a.tv;
    rp = KVS_KD_THREADS / a.r;

    ntiles = (uint32_t) ((end - start + a.tile - 1) / a.tile);

    /* copies of the rows of positions p0.. into stage b */
    auto rows_issue = [&](uint32_t b, uint64_t p0) {
        uint32_t   n, rw, cc;
        uint64_t   rbase;
        raw       *dst;
        bool       have;

        n = (uint32_t) (end - p0 < a.tile ? end - p0 : a.tile);
        dst = stage + (size_t) b * a.tile * (a.hd_k + a.hd_v);

        if (tid >= rstep * cpr) {
            return;
        }

        for (rw = tid / cpr; rw < n; rw += rstep) {
            rbase = rowbase[b * a.tile + rw];
            have = rbase != ~(uint64_t) 0;
            rbase = have ? rbase : 0;

            for (cc = tid % cpr; cc < ckv; cc += cpr) {
                if (cc < ck) {
                    kvs_ka_copy<DT, V>(
                        dst + (size_t) rw * (a.hd_k + a.hd_v) + cc * V,
                        kg + rbase * kw + cc * V, have);
                } else {
                    kvs_ka_copy<DT, V>(
                        dst + (size_t) rw * (a.hd_k + a.hd_v) + a.hd_k
                        + (cc - ck) * V,
                        vg + rbase * vw + (cc - ck) * V, have);
                }
            }
        }
    };

    kvs_ka_tiles_first(a, rowbase, start, end, tbase, tid, rows_issue);

    for (i = 0; i < ntiles; i++) {
        p0 = start + (uint64_t) i * a.tile;
        nrows = (uint32_t) (end - p0 < a.tile ? end - p0 : a.tile);

        /* the next tile's copies fly while this one is computed */
        kvs_ka_tiles_next(a, rowbase, i, ntiles, p0 + a.tile, end, tbase,
                          tid, rows_issue);

        st = stage + (size_t) (i & 1) * a.tile * (a.hd_k + a.hd_v);

        /* scores: every thread runs the same passes (full-warp
         * shuffles) */
        for (o = 0; o < nrows; o += rp) {
            row = o + tid / a.r;
            ok = row < nrows;

#pragma unroll
            for (g = 0; g < GC; g++) {
                d[g] = 0.0f;
            }

            if (ok) {
                kr = st + (size_t) row * (a.hd_k + a.hd_v);

#pragma unroll
                for (int k = 0; k < CPL; k++) {
                    c = lr + k * a.r;
                    if (c < ck) {
                        kvs_ka_ld<DT, V>(kr + c * V, kf);
#pragma unroll
                        for (g = 0; g < GC; g++) {
#pragma unroll
                            for (int x = 0; x < V; x++) {
                                d[g] = fmaf(qr[g][k][x], kf[x], d[g]);
                            }
                        }
                    }
                }
            }

            for (j = a.r >> 1; j > 0; j >>= 1) {
#pragma unroll
                for (g = 0; g < GC; g++) {
                    d[g] += __shfl_xor_sync(0xffffffffu, d[g], j);
                }
            }

            if (ok && lr == 0) {
                ksc = a.scale;

                if constexpr (kvs_ka_ty<DT>::scaled) {
                    rb = rowbase[(i & 1) * a.tile + row];
                    rb = rb != ~(uint64_t) 0
                         ? rb / a.bt * (a.n_head / a.group) + kvh : rb;
                    ksc *= rb != ~(uint64_t) 0 ? a.ks[rb] : 0.0f;
                    vsc[row] = rb != ~(uint64_t) 0 ? a.vs[rb] : 0.0f;
                }

#pragma unroll
                for (g = 0; g < GC; g++) {
                    x0 = d[g] * ksc;
                    s[g * a.tile + row] = a.softcap != 0.0f
                                          ? a.softcap
                                            * tanhf(x0 / a.softcap)
                                          : x0;
                }
            }
        }

        __syncthreads();

        /* online softmax: warp w takes heads w, w + 4 */
        for (g = warp; g < ng; g += KVS_KD_THREADS / 32) {
            x0 = lane < nrows ? s[g * a.tile + lane] : -INFINITY;
            x1 = lane + 32 < nrows ? s[g * a.tile + lane + 32] : -INFINITY;
            mt = fmaxf(x0, x1);

            for (j = 16; j > 0; j >>= 1) {
                mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, j));
            }

            mo = sm[g];
            mn = fmaxf(mo, mt);
            e0 = lane < nrows ? expf(x0 - mn) : 0.0f;
            e1 = lane + 32 < nrows ? expf(x1 - mn) : 0.0f;
            sum = e0 + e1;

            for (j = 16; j > 0; j >>= 1) {
                sum += __shfl_xor_sync(0xffffffffu, sum, j);
            }

            if (lane < nrows) {
                s[g * a.tile + lane] = e0;
            }

            if (lane + 32 < nrows) {
                s[g * a.tile + lane + 32] = e1;
            }

            /* every lane read the old running max (mo) before lane 0
             * rewrites it: the shuffles keep the lanes together but
             * order no shared-memory access (racecheck, on the H200,
             * 2026-12-04) */
            __syncwarp();

            if (lane == 0) {
                al = mo == -INFINITY ? 0.0f : expf(mo - mn);
                sal[g] = al;
                sl[g] = sl[g] * al + sum;
                sm[g] = mn;
            }
        }

        __syncthreads();

        /* P.V into this thread's row group's accumulators */
        if (rg < nrg) {
#pragma unroll
            for (g = 0; g < GC; g++) {
                if (g < ng) {
                    al = sal[g];

                    if (al != 1.0f) {
#pragma unroll
                        for (int k = 0; k < CPT; k++) {
#pragma unroll
                            for (int x = 0; x < V; x++) {
                                acc[g][k][x] *= al;
                            }
                        }
                    }
                }
            }

            for (row = rg; row < nrows; row += nrg) {
                kr = st + (size_t) row * (a.hd_k + a.hd_v) + a.hd_k;

#pragma unroll
                for (int k = 0; k < CPT; k++) {
                    c = cvt + k * a.tv;
                    if (c < cv) {
                        kvs_ka_ld<DT, V>(kr + c * V, kf);
#pragma unroll
                        for (g = 0; g < GC; g++) {
                            if (g < ng) {
                                p = s[g * a.tile + row];
                                if constexpr (kvs_ka_ty<DT>::scaled) {
                                    p *= vsc[row];
                                }
#pragma unroll
                                for (int x = 0; x < V; x++) {
                                    acc[g][k][x] = fmaf(p, kf[x],
                                                        acc[g][k][x]);
                                }
                            }
                        }
                    }
                }
            }
        }

        __syncthreads();
    }

    /* row groups added in order into red (the stages are free: the
     * loop's last barrier passed and no copy is pending but empty
     * groups) */
    kvs_ka_wait_all();

    for (o = 0; o < nrg; o++) {
        if (rg == o) {
#pragma unroll
            for (g = 0; g < GC; g++) {
#pragma unroll
                for (int k = 0; k < CPT; k++) {
                    c = cvt + k * a.tv;
                    if (g < ng && c < cv) {
#pragma unroll
                        for (int x = 0; x < V; x++) {
                            j = g * a.hd_v + c * V + x;
                            red[j] = o == 0 ? acc[g][k][x]
                                            : red[j] + acc[g][k][x];
                        }
                    }
                }
            }
        }

        __syncthreads();
    }

    if (a.n_split == 1) {
        for (e = tid; e < ng * a.hd_v; e += KVS_KD_THREADS) {
            g = e / a.hd_v;
            a.out[orow * a.hd_v + e] = red[e] / sl[g];
        }

        return;
    }

    for (e = tid; e < ng * (a.hd_v + 2); e += KVS_KD_THREADS) {
        g = e / (a.hd_v + 2);
        j = e % (a.hd_v + 2);
        a.part[((orow + g) * a.n_split + split) * (a.hd_v + 2) + j] =
            j == 0 ? sm[g] : j == 1 ? sl[g] : red[g * a.hd_v + j - 2];
    }
}


/* One (run, query head): out = sum over active splits (from split0 on:
 * the ones before it wrote nothing) of acc e^(m - M) / sum of l e^(m -
 * M), M their largest max; zeros for padding. */
__global__ void __launch_bounds__(KVS_KD_THREADS)
kvs_kd_combine(kvs_kd_args_t a)
{
    float         mx, l, z, w;
    int32_t       t, pos, tbase;
    uint32_t      h, na, s0, sp, j, width;
    size_t        row;
    const float  *pp;

    h = blockIdx.y;
    t = kvs_kd_token(a, blockIdx.x, &pos, &tbase);
    if (t < 0) {
        return;
    }

    row = (size_t) t * a.n_head + h;

    if (pos < 0) {
        for (j = threadIdx.x; j < a.hd_v; j += blockDim.x) {
            a.out[row * a.hd_v + j] = 0.0f;
        }

        return;
    }

    width = a.hd_v + 2;
    na = kvs_kd_active(a, pos);
    s0 = kvs_kd_split0(a, pos);
    pp = a.part + row * a.n_split * width;
    mx = -INFINITY;

    for (sp = s0; sp < na; sp++) {
        mx = fmaxf(mx, pp[(size_t) sp * width]);
    }

    l = 0.0f;

    for (sp = s0; sp < na; sp++) {
        l += pp[(size_t) sp * width + 1] * expf(pp[(size_t) sp * width] - mx);
    }

    for (j = threadIdx.x; j < a.hd_v; j += blockDim.x) {
        z = 0.0f;

        for (sp = s0; sp < na; sp++) {
            w = expf(pp[(size_t) sp * width] - mx);
            z = fmaf(pp[(size_t) sp * width + 2 + j], w, z);
        }

        a.out[row * a.hd_v + j] = z / l;
    }
}


/* Bytes of dynamic shared memory kvs_kd_part<DT, GC, V> uses. */
static size_t
kvs_kd_smem_bytes(const kvs_kd_args_t *a, size_t esize, uint32_t gc,
    bool scaled)
{
    size_t  st;

    st = ((size_t) 2 * a->tile * (a->hd_k + a->hd_v) * esize + 15)
         & ~(size_t) 15;
    if (st < (size_t) gc * a->hd_v * sizeof(float)) {
        st = (size_t) gc * a->hd_v * sizeof(float);
    }

    return st + (size_t) 2 * a->tile * sizeof(uint64_t)
           + ((size_t) gc * a->tile + 3 * gc
              + (scaled ? a->tile : 0)) * sizeof(float);
}


template <int DT, int GC, int V>
static void
kvs_kd_launch(kvs_kd_args_t *a, dim3 grid, cudaStream_t st)
{
    size_t  esize, qchunks;
    uint32_t  ck, cv, cpt;

    esize = sizeof(typename kvs_ka_ty<DT>::raw);
    qchunks = KVS_KD_QREGS / (GC * V) > 0 ? KVS_KD_QREGS / (GC * V) : 1;
    cpt = V == 1 ? 2 : 1;

    /* R: the fewest lanes (a power of two) whose chunks fit in
     * qchunks each; TV: the fewest threads whose chunks fit in cpt */
    ck = a->hd_k / V;
    cv = a->hd_v / V;

    for (a->r = 1; a->r < 32 && (size_t) a->r * qchunks < ck; a->r *= 2) {
        /* void */
    }

    a->tv = (cv + cpt - 1) / cpt;

    /* tiles of 64 positions, halved until both stages fit 32 KB */
    for (a->tile = KVS_KD_TILE_MAX;
         a->tile > 8
         && (size_t) 2 * a->tile * (a->hd_k + a->hd_v) * esize
            > KVS_KD_STAGE;
         a->tile /= 2)
    {
        /* void */
    }

    kvs_kd_part<DT, GC, V><<<grid, KVS_KD_THREADS,
                             kvs_kd_smem_bytes(a, esize, GC,
                                               kvs_ka_ty<DT>::scaled),
                             st>>>(*a);
}


template <int DT>
static void
kvs_kd_launch_dt(kvs_kd_args_t *a, uint32_t gc, bool vec, dim3 grid,
    cudaStream_t st)
{
    constexpr int  V = kvs_ka_ty<DT>::vec;

    /* int8 and fp8 only in 8-byte copies (the launcher refused others) */
    if constexpr (!kvs_ka_ty<DT>::scaled) {
        if (!vec) {
            kvs_kd_launch<DT, 8, 1>(a, grid, st);
            return;
        }
    }

    if (gc == 1) {
        kvs_kd_launch<DT, 1, V>(a, grid, st);

    } else if (gc == 2) {
        kvs_kd_launch<DT, 2, V>(a, grid, st);

    } else if (gc == 4) {
        kvs_kd_launch<DT, 4, V>(a, grid, st);

    } else {
        kvs_kd_launch<DT, 8, V>(a, grid, st);
    }
}


extern "C" size_t
kvs_k_attn_part_floats(uint32_t n_tok, uint32_t n_head, uint32_t n_split,
    uint32_t hd_v)
{
    return (size_t) n_tok * n_head * n_split * ((size_t) hd_v + 2);
}


extern "C" int
kvs_k_attn_decode(float *out, const float *q, const kvs_k_kv_t *kv,
    uint32_t layer, const kvs_k_batch_t *b, float scale, uint32_t window,
    float softcap, uint32_t n_split, float *part, cudaStream_t st)
{
    bool           vec;
    size_t         esize, vsz;
    uint32_t       group, gc;
    kvs_kd_args_t  a;

    if (out == NULL || q == NULL || kv == NULL || b == NULL
        || kv->k == NULL || kv->v == NULL || !kvs_k_kv_dtype_ok(kv->dtype)
        || (kvs_k_kv_scaled(kv->dtype) && (kv->ks == NULL || kv->vs == NULL))
        || kv->n_head == 0 || kv->n_head_kv == 0
        || kv->n_head % kv->n_head_kv != 0
        || kv->n_head > KVS_KD_GRID_MAX
        || kv->hd_k == 0 || kv->hd_k > KVS_KD_HD_MAX
        || kv->hd_v == 0 || kv->hd_v > KVS_KD_HD_MAX
        || kv->n_blocks == 0 || kv->block_tokens == 0
        || layer >= kv->n_layer
        || n_split == 0 || n_split > KVS_KD_GRID_MAX
        || (n_split > 1 && part == NULL)
        || !(softcap >= 0.0f) || isinf(softcap)
        || b->n_run > 0x7fffffffu)
    {
        return KVS_K_EARG;
    }

    if (b->n_run == 0 || b->n_tok == 0) {
        return 0;
    }

    if (b->pos == NULL || b->seq == NULL || b->table_off == NULL
        || b->table == NULL || b->run_tok0 == NULL || b->run_len == NULL)
    {
        return KVS_K_EARG;
    }

    group = kv->n_head / kv->n_head_kv;
    gc = group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8;
    esize = kvs_k_dtype_size(kv->dtype);
    vsz = esize == 1 ? 8 : 16 / esize;

    /* 16-byte copies (8 of bytes) need rows and heads on such
     * boundaries */
    vec = kv->hd_k % vsz == 0 && kv->hd_v % vsz == 0
          && (uintptr_t) kv->k % 16 == 0 && (uintptr_t) kv->v % 16 == 0;
    if (!vec && kvs_k_kv_scaled(kv->dtype)) {
        return KVS_K_EARG;            /* int8, fp8: heads of 8n bytes */
    }

    if (!vec) {
        gc = 8;
    }

    a.n_hc = (group + gc - 1) / gc;
    if ((uint64_t) kv->n_head_kv * a.n_hc > KVS_KD_GRID_MAX) {
        return KVS_K_EARG;
    }

    a.out = out;
    a.part = part;
    a.q = q;
    a.k = (const char *) kv->k + (size_t) layer * kv->n_blocks
          * kv->block_tokens * kv->n_head_kv * kv->hd_k * esize;
    a.v = (const char *) kv->v + (size_t) layer * kv->n_blocks
          * kv->block_tokens * kv->n_head_kv * kv->hd_v * esize;
    a.ks = kv->ks != NULL ? kv->ks + (size_t) layer * kv->n_blocks
                            * kv->n_head_kv : NULL;
    a.vs = kv->vs != NULL ? kv->vs + (size_t) layer * kv->n_blocks
                            * kv->n_head_kv : NULL;
    a.pos = b->pos;
    a.seq = b->seq;
    a.table_off = b->table_off;
    a.table = b->table;
    a.run_tok0 = b->run_tok0;
    a.run_len = b->run_len;
    a.n_tok = b->n_tok;
    a.n_seq = b->n_seq;
    a.n_blocks = kv->n_blocks;
    a.bt = kv->block_tokens;
    a.n_head = kv->n_head;
    a.group = group;
    a.hd_k = kv->hd_k;
    a.hd_v = kv->hd_v;
    a.n_split = n_split;
    a.split_len = (uint32_t) (((uint64_t) b->max_ctx + n_split - 1)
                              / n_split);
    if (a.split_len == 0) {
        a.split_len = 1;
    }
    a.scale = scale;
    a.window = window;
    a.softcap = softcap;
    a.tile = KVS_KD_TILE_MAX;
    a.r = 1;
    a.tv = 1;

    dim3  grid(b->n_run, kv->n_head_kv * a.n_hc, n_split);

    switch (kv->dtype) {
    case KVS_K_F32:
        kvs_kd_launch_dt<KVS_K_F32>(&a, gc, vec, grid, st);
        break;
    case KVS_K_F16:
        kvs_kd_launch_dt<KVS_K_F16>(&a, gc, vec, grid, st);
        break;
    case KVS_K_I8:
        kvs_kd_launch_dt<KVS_K_I8>(&a, gc, vec, grid, st);
        break;
    case KVS_K_FP8:
        kvs_kd_launch_dt<KVS_K_FP8>(&a, gc, vec, grid, st);
        break;
    default:
        kvs_kd_launch_dt<KVS_K_BF16>(&a, gc, vec, grid, st);
        break;
    }

    if (n_split > 1) {
        kvs_kd_combine<<<dim3(b->n_run, kv->n_head), KVS_KD_THREADS, 0,
                         st>>>(a);
    }

    return kvs_k_launched();
}
