/*
 * kvs_k_attn_prefill: attention of prefill chunks (runs of more than one
 * token) over the paged K/V cache: causal within the chunk (the token at
 * pos attends 0..pos), every earlier cached block included, grouped-query
 * heads; kvs_k_attn_prefill().  Runs of one token are left to
 * kvs_k_attn_decode.
 *
 * One CTA (128 threads) per (query tile, K/V head x head chunk).  A query
 * tile is up to QR = 16 * TMR query rows, a row being (token, query head):
 * QT = QR / HG consecutive tokens of one run times the HG = min(group, QR)
 * query heads of a K/V head (a group larger than QR is cut into chunks).
 * The grid's x is an upper bound on the tiles of all runs, ceil(n_tok /
 * QT) + n_run, so it depends on the arguments only; warp 0 finds its
 * CTA's (run, tile) by a prefix sum over run_len and CTAs past the last
 * tile return.  TMR is 4 (QR 64) for head sizes up to 128, 2 (QR 32) up
 * to 256.
 *
 * The CTA's Q rows are copied into shared memory as F32 once; K/V rows of
 * positions 0..(the tile's largest pos) pass through shared memory in
 * tiles of `tile` (8..32) positions, double buffered with 16-byte cp.async
 * (plain copies when head sizes or pointers do not allow 16 bytes), each
 * read from global memory once per CTA.  Per tile:
 *   - scores: thread (ty = tid / 8, tx = tid % 8) computes rows ty + 16 i
 *     (i < TMR) x positions tx + 8 j (j < 4), q and K from shared memory
 *     (K rows padded to an odd number of 16-byte units: the 8 lanes that
 *     read one chunk of 8 rows hit 8 different bank groups); masked
 *     (position past the row's pos, or past the tile) to -inf;
 *     with a sliding window (window != 0) positions at or before pos -
 *     window are masked too (kvs_cpu_attn_first's rule), and the tiles
 *     start at the tile's smallest first visible position; scores are
 *     scaled, then soft-capped (cap tanh(s / cap)) when softcap != 0;
 *   - online softmax per row (warp w takes rows w, w + 4, ..), F32;
 *   - P.V: the same thread keeps rows ty + 16 i x V-chunks tx + 8 k in
 *     registers (at most 64 floats), rescaled by the rows' factor.
 *
 * An int8 or fp8 cache (kvs_ka_ty<DT>::scaled; head sizes multiples of
 * 8, else KVS_K_EARG) is staged as bytes, 8 a copy, and decoded in
 * registers; each tile's rows' block scales are
 * read once into ksc / vsc[tile] (one more barrier), scores are
 * multiplied by their position's K scale and P.V weights by its V
 * scale: no full-precision copy of the cache is made.
 *
 * Shared memory (dynamic; over 48 KB it is opted into at launch, at most
 * about 82 KB): q[QR][hd_k] F32, kst[2][tile][ks], vst[2][tile][vs] raw,
 * rowbase[2][tile] u64, s[QR][tile + 1], m, l, al[QR] F32, qpos[QR] i32,
 * info[4] i32, and in int8 / fp8 ksc[tile], vsc[tile] F32.
 *
 * Invariants: a padding token (pos < 0), or one whose sequence or table
 * offset is out of range, gets a zero output row and reads nothing; a
 * block id outside [0, n_blocks) reads zeros, never faults; every index
 * into the cache or the activations is size_t; sums in F32.
 */

#include <math.h>
#include <stdint.h>

#include "kvs_k_attn.cuh"


#define KVS_KP_THREADS   128
#define KVS_KP_ACC       64         /* floats of acc a thread holds */
#define KVS_KP_STAGE     40960      /* bytes of both K/V stages at most */
#define KVS_KP_TILE_MAX  32         /* softmax: a position per lane */
#define KVS_KP_HD_MAX    256
#define KVS_KP_GRID_MAX  65535u     /* grid y */
#define KVS_KP_SMEM_MAX  (227 * 1024)


typedef struct {
    float           *out;         /* [n_tok][n_head * hd_v] */
    const float     *q;           /* [n_tok][n_head * hd_k] */
    const void      *k;           /* layer's [n_blocks][bt][k_width] */
    const void      *v;           /* layer's [n_blocks][bt][v_width] */
    const float     *kscale;      /* int8, fp8: layer's [n_blocks][n_kv] */
    const float     *vscale;
    const int32_t   *pos;
    const int32_t   *seq;
    const int32_t   *table_off;
    const int32_t   *table;
    const int32_t   *run_tok0;
    const int32_t   *run_len;
    uint32_t         n_tok;
    uint32_t         n_seq;
    uint32_t         n_run;
    uint32_t         n_blocks;
    uint32_t         bt;          /* block_tokens */
    uint32_t         n_head;
    uint32_t         n_head_kv;
    uint32_t         group;       /* n_head / n_head_kv */
    uint32_t         hg;          /* query heads per CTA */
    uint32_t         n_hc;        /* head chunks per K/V head */
    uint32_t         qt;          /* tokens per query tile */
    uint32_t         hd_k;
    uint32_t         hd_v;
    uint32_t         ks;          /* K row stride in stage, elements */
    uint32_t         vs;          /* V row stride */
    uint32_t         tile;        /* positions per stage, 8..32 */
    uint32_t         window;      /* positions a query sees; 0: all */
    float            scale;
    float            softcap;     /* 0: none */
} kvs_kp_args_t;




/* V consecutive floats of q at p (shared memory, 16-byte aligned when V
 * is 4 or 8). */
template <int V>
__device__ __forceinline__ void
kvs_kp_ldq(const float *p, float *f)
{
    if constexpr (V % 4 == 0) {
#pragma unroll
        for (int i = 0; i < V; i += 4) {
            float4  u = *(const float4 *) (p + i);

            f[i] = u.x;
            f[i + 1] = u.y;
            f[i + 2] = u.z;
            f[i + 3] = u.w;
        }

    } else {
#pragma unroll
        for (int i = 0; i < V; i++) {
            f[i] = p[i];
        }
    }
}


/*
 * Warp 0 finds the (run, tile) of query tile number `target`, counting
 * ceil(run_len / qt) tiles for each run longer than one token, in run
 * order; info[0] = run or -1, info[1] = tile.
 */
__device__ __forceinline__ void
kvs_kp_find(const kvs_kp_args_t &a, uint32_t target, int32_t *info)
{
    int32_t   len, run, tile;
    uint32_t  lane, r0, r, nt, incl, y, base, total, o, hit, src;

    lane = threadIdx.x & 31;
    base = 0;
    run = -1;
    tile = 0;

    for (r0 = 0; r0 < a.n_run; r0 += 32) {
        r = r0 + lane;
        nt = 0;

        if (r < a.n_run) {
            len = a.run_len[r];
            if (len > 1) {
                nt = ((uint32_t) len + a.qt - 1) / a.qt;
            }
        }

        incl = nt;

        for (o = 1; o < 32; o <<= 1) {
            y = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) {
                incl += y;
            }
        }

        total = __shfl_sync(0xffffffffu, incl, 31);

        if (target < base + total) {
            hit = __ballot_sync(0xffffffffu,
                                nt > 0 && target >= base + incl - nt
                                && target < base + incl);
            src = hit != 0 ? (uint32_t) (__ffs(hit) - 1) : 0;
            r = __shfl_sync(0xffffffffu, r, src);
            y = __shfl_sync(0xffffffffu, base + incl - nt, src);

            if (hit != 0) {
                run = (int32_t) r;
                tile = (int32_t) (target - y);
            }

            break;
        }

        base += total;
    }

    /* one writer; the caller's barrier publishes it */
    if (lane == 0) {
        info[0] = run;
        info[1] = tile;
    }
}


/* One (query tile, K/V head x head chunk): see the file's comment.  DT
 * the cache's dtype, V the elements per copy (16 bytes' worth, or 1),
 * TMR the query rows per thread (QR = 16 TMR). */
template <int DT, int V, int TMR>
__global__ void __launch_bounds__(KVS_KP_THREADS)
kvs_kp_attn(kvs_kp_args_t a)
{
    typedef typename kvs_ka_ty<DT>::raw  raw;

    constexpr int  QR = 16 * TMR;
    constexpr int  KC = KVS_KP_ACC / (TMR * V);  /* V chunks a thread
                                                    keeps per row */

    extern __shared__ __align__(16) unsigned char  kvs_kp_smem[];

    float               sc[TMR][4], acc[TMR][KC][V], kf[4][V], qf[V];
    float               w[TMR], x, mt, mo, mn, e, sum, al;
    int32_t             run, tok0, len, sq, tbase, pv, *qpos, *info;
    uint32_t            tid, lane, warp, tx, ty, kvh, hc, h0, ng, ntok;
    uint32_t            ck, cv, ckv, cpr, rstep, ntiles, it, nrows, i, j;
    uint32_t            c, p, qr, tq, hh, d, o;
    uint64_t            p0, start, end;
    size_t              kw, vw, off;
    float              *qs, *s, *sm, *sl, *sal, *ksc, *vsc;
    raw                *kst, *vst, *kr;
    uint64_t           *rowbase;
    const raw          *kg, *vg;

    tid = threadIdx.x;
    lane = tid & 31;
    warp = tid >> 5;
    tx = tid % 8;
    ty = tid / 8;
    kvh = blockIdx.y / a.n_hc;
    hc = blockIdx.y % a.n_hc;

    /* shared memory, laid out as the launcher sized it */
    qs = (float *) kvs_kp_smem;                              /* [QR][hd_k] */
    kst = (raw *) (qs + (size_t) QR * a.hd_k);
    vst = kst + (size_t) 2 * a.tile * a.ks;
    off = (((size_t) QR * a.hd_k * sizeof(float)
            + (size_t) 2 * a.tile * (a.ks + a.vs) * sizeof(raw)) + 15)
          & ~(size_t) 15;
    rowbase = (uint64_t *) (kvs_kp_smem + off);
    s = (float *) (rowbase + 2 * a.tile);                /* [QR][tile + 1] */
    sm = s + (size_t) QR * (a.tile + 1);
    sl = sm + QR;
    sal = sl + QR;
    qpos = (int32_t *) (sal + QR);
    info = qpos + QR;
    ksc = (float *) (info + 4);                        /* [tile], scaled */
    vsc = ksc + a.tile;

    if (warp == 0) {
        kvs_kp_find(a, blockIdx.x, info);
    }

    if (tid == 0) {
        info[2] = -1;                                   /* largest pos */
        info[3] = INT32_MAX;                            /* smallest */
    }

    __syncthreads();

    run = info[0];
    if (run < 0) {
        return;
    }

    tok0 = a.run_tok0[run] + info[1] * (int32_t) a.qt;
    len = a.run_len[run] - info[1] * (int32_t) a.qt;
    ntok = (uint32_t) len < a.qt ? (uint32_t) len : a.qt;
    h0 = kvh * a.group + hc * a.hg;
    ng = a.group - hc * a.hg;
    ng = ng < a.hg ? ng : a.hg;

    sq = -1;
    tbase = -1;

    if (a.run_tok0[run] >= 0 && (uint32_t) a.run_tok0[run] < a.n_tok) {
        sq = a.seq[a.run_tok0[run]];
        if (sq >= 0 && (uint32_t) sq < a.n_seq) {
            tbase = a.table_off[sq];
        }
    }

    /* each row's token position, -1 for rows that attend nothing */
    if (tid < QR) {
        qr = tid;
        tq = qr / a.hg;
        hh = qr % a.hg;
        pv = -1;

        if (tbase >= 0 && tok0 >= 0 && tq < ntok && hh < ng
            && (uint32_t) tok0 + tq < a.n_tok
            && a.seq[tok0 + tq] == sq)
        {
            pv = a.pos[tok0 + tq];
            pv = pv < 0 ? -1 : pv;
        }

        qpos[qr] = pv;
        sm[qr] = -INFINITY;
        sl[qr] = 0.0f;

        if (pv >= 0) {
            atomicMax(&info[2], pv);
            atomicMin(&info[3], pv);
        }
    }

    __syncthreads();

    /* q rows as F32, zeros for rows that attend nothing */
    for (o = tid; o < QR * a.hd_k; o += KVS_KP_THREADS) {
        qr = o / a.hd_k;
        d = o % a.hd_k;
        qs[o] = qpos[qr] >= 0
                ? a.q[((size_t) (tok0 + qr / a.hg) * a.n_head + h0
                       + qr % a.hg) * a.hd_k + d]
                : 0.0f;
    }

    kw = (size_t) a.n_head_kv * a.hd_k;
    vw = (size_t) a.n_head_kv * a.hd_v;
    kg = (const raw *) a.k + (size_t) kvh * a.hd_k;
    vg = (const raw *) a.v + (size_t) kvh * a.hd_v;
    ck = a.hd_k / V;
    cv = a.hd_v / V;
    ckv = ck + cv;
    cpr = ckv < KVS_KP_THREADS ? ckv : KVS_KP_THREADS;
    rstep = KVS_KP_THREADS / cpr;
    end = (uint64_t) (info[2] + 1);               /* 0 when none attends */

    /* the first position any row sees: its smallest pos's window start */
    start = end != 0 && a.window != 0 && (uint32_t) info[3] >= a.window
            ? (uint64_t) info[3] + 1 - a.window : 0;
    ntiles = (uint32_t) ((end - start + a.tile - 1) / a.tile);

#pragma unroll
    for (i = 0; i < TMR; i++) {
#pragma unroll
        for (int k = 0; k < KC; k++) {
#pragma unroll
            for (int y = 0; y < V; y++) {
                acc[i][k][y] = 0.0f;
            }
        }
    }

    /* copies of the K and V rows of positions pb.. into stage b */
    auto rows_issue = [&](uint32_t b, uint64_t pb) {
        uint32_t   n, rw, cc;
        uint64_t   rbase;
        bool       have;

        n = (uint32_t) (end - pb < a.tile ? end - pb : a.tile);

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
                        kst + ((size_t) b * a.tile + rw) * a.ks + cc * V,
                        kg + rbase * kw + cc * V, have);
                } else {
                    kvs_ka_copy<DT, V>(
                        vst + ((size_t) b * a.tile + rw) * a.vs
                        + (cc - ck) * V,
                        vg + rbase * vw + (cc - ck) * V, have);
                }
            }
        }
    };

    if (ntiles > 0) {
        kvs_ka_tiles_first(a, rowbase, start, end, tbase, tid,
                           rows_issue);
    }

    for (it = 0; it < ntiles; it++) {
        p0 = start + (uint64_t) it * a.tile;
        nrows = (uint32_t) (end - p0 < a.tile ? end - p0 : a.tile);

        /* the next tile flies while this one is computed */
        kvs_ka_tiles_next(a, rowbase, it, ntiles, p0 + a.tile, end, tbase,
                          tid, rows_issue);

        /* the tile's rows' block scales (a missing block's: 0) */
        if constexpr (kvs_ka_ty<DT>::scaled) {
            if (tid < nrows) {
                off = rowbase[(it & 1) * a.tile + tid];
                off = off != ~(size_t) 0
                      ? off / a.bt * a.n_head_kv + kvh : off;
                ksc[tid] = off != ~(size_t) 0 ? a.kscale[off] : 0.0f;
                vsc[tid] = off != ~(size_t) 0 ? a.vscale[off] : 0.0f;
            }

            __syncthreads();
        }

        /* scores of rows ty + 16 i x positions tx + 8 j; positions past
         * the tile read its last row and are masked below */
#pragma unroll
        for (i = 0; i < TMR; i++) {
#pragma unroll
            for (j = 0; j < 4; j++) {
                sc[i][j] = 0.0f;
            }
        }

        kr = kst + (size_t) (it & 1) * a.tile * a.ks;

        for (c = 0; c < ck; c++) {
#pragma unroll
            for (j = 0; j < 4; j++) {
                p = tx + 8 * j;
                p = p < nrows ? p : nrows - 1;
                kvs_ka_ld<DT, V>(kr + (size_t) p * a.ks + c * V, kf[j]);
            }

#pragma unroll
            for (i = 0; i < TMR; i++) {
                kvs_kp_ldq<V>(qs + (size_t) (ty + 16 * i) * a.hd_k + c * V,
                              qf);
#pragma unroll
                for (j = 0; j < 4; j++) {
#pragma unroll
                    for (int y = 0; y < V; y++) {
                        sc[i][j] = fmaf(qf[y], kf[j][y], sc[i][j]);
                    }
                }
            }
        }

#pragma unroll
        for (i = 0; i < TMR; i++) {
            qr = ty + 16 * i;
#pragma unroll
            for (j = 0; j < 4; j++) {
                p = tx + 8 * j;
                if (p < a.tile) {
                    x = sc[i][j] * a.scale;
                    if constexpr (kvs_ka_ty<DT>::scaled) {
                        x *= p < nrows ? ksc[p] : 0.0f;
                    }
                    x = a.softcap != 0.0f ? a.softcap * tanhf(x / a.softcap)
                                          : x;
                    s[qr * (a.tile + 1) + p] =
                        p < nrows && qpos[qr] >= 0
                        && p0 + p <= (uint64_t) qpos[qr]
                        && (a.window == 0
                            || p0 + p + a.window > (uint64_t) qpos[qr])
                        ? x : -INFINITY;
                }
            }
        }

        __syncthreads();

        /* online softmax, a position per lane: warp w takes rows w,
         * w + 4, .. */
        for (qr = warp; qr < QR; qr += KVS_KP_THREADS / 32) {
            x = lane < a.tile ? s[qr * (a.tile + 1) + lane] : -INFINITY;
            mt = x;

            for (o = 16; o > 0; o >>= 1) {
                mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
            }

            mo = sm[qr];
            mn = fmaxf(mo, mt);
            e = mn == -INFINITY ? 0.0f : expf(x - mn);
            sum = e;

            for (o = 16; o > 0; o >>= 1) {
                sum += __shfl_xor_sync(0xffffffffu, sum, o);
            }

            if (lane < a.tile) {
                s[qr * (a.tile + 1) + lane] = e;
            }

            /* every lane read the old running max (mo) before lane 0
             * rewrites it: the shuffles keep the lanes together but
             * order no shared-memory access (racecheck, on the H200,
             * 2026-12-04) */
            __syncwarp();

            if (lane == 0) {
                al = mn == -INFINITY ? 1.0f
                     : mo == -INFINITY ? 0.0f : expf(mo - mn);
                sal[qr] = al;
                sl[qr] = sl[qr] * al + sum;
                sm[qr] = mn;
            }
        }

        __syncthreads();

        /* P.V for rows ty + 16 i, V chunks tx + 8 k */
#pragma unroll
        for (i = 0; i < TMR; i++) {
            al = sal[ty + 16 * i];

            if (al != 1.0f) {
#pragma unroll
                for (int k = 0; k < KC; k++) {
#pragma unroll
                    for (int y = 0; y < V; y++) {
                        acc[i][k][y] *= al;
                    }
                }
            }
        }

        kr = vst + (size_t) (it & 1) * a.tile * a.vs;

        for (p = 0; p < nrows; p++) {
#pragma unroll
            for (i = 0; i < TMR; i++) {
                w[i] = s[(ty + 16 * i) * (a.tile + 1) + p];
                if constexpr (kvs_ka_ty<DT>::scaled) {
                    w[i] *= vsc[p];
                }
            }

#pragma unroll
            for (int k = 0; k < KC; k++) {
                c = tx + 8 * k;
                if (c < cv) {
                    kvs_ka_ld<DT, V>(kr + (size_t) p * a.vs + c * V, qf);
#pragma unroll
                    for (i = 0; i < TMR; i++) {
#pragma unroll
                        for (int y = 0; y < V; y++) {
                            acc[i][k][y] = fmaf(w[i], qf[y], acc[i][k][y]);
                        }
                    }
                }
            }
        }

        __syncthreads();
    }

    kvs_ka_wait_all();

    /* rows that attend something: acc / l; the others of existing
     * (token, head) pairs: zeros */
#pragma unroll
    for (i = 0; i < TMR; i++) {
        qr = ty + 16 * i;
        tq = qr / a.hg;
        hh = qr % a.hg;

        if (tq >= ntok || hh >= ng || tok0 < 0
            || (uint32_t) tok0 + tq >= a.n_tok)
        {
            continue;
        }

        off = ((size_t) (tok0 + tq) * a.n_head + h0 + hh) * a.hd_v;
        al = qpos[qr] >= 0 ? 1.0f / sl[qr] : 0.0f;

#pragma unroll
        for (int k = 0; k < KC; k++) {
            c = tx + 8 * k;
            if (c < cv) {
#pragma unroll
                for (int y = 0; y < V; y++) {
                    a.out[off + c * V + y] = qpos[qr] >= 0
                                             ? acc[i][k][y] * al : 0.0f;
                }
            }
        }
    }
}


/* Row stride in stage of a head of hd elements: 16-byte copies get an
 * odd number of 16-byte units (no bank conflicts across 8 rows). */
static uint32_t
kvs_kp_stride(uint32_t hd, uint32_t vsz, bool vec)
{
    if (!vec) {
        return hd;
    }

    return ((hd / vsz) | 1) * vsz;
}


/* Bytes of dynamic shared memory of kvs_kp_attn with QR rows. */
static size_t
kvs_kp_smem_bytes(const kvs_kp_args_t *a, size_t esize, uint32_t qrows,
    bool scaled)
{
    size_t  n;

    n = (((size_t) qrows * a->hd_k * sizeof(float)
          + (size_t) 2 * a->tile * (a->ks + a->vs) * esize) + 15)
        & ~(size_t) 15;

    return n + (size_t) 2 * a->tile * sizeof(uint64_t)
           + (size_t) qrows * (a->tile + 1) * sizeof(float)
           + (size_t) 3 * qrows * sizeof(float)
           + ((size_t) qrows + 4) * sizeof(int32_t)
           + (scaled ? (size_t) 2 * a->tile * sizeof(float) : 0);
}


template <int DT, int V, int TMR>
static int
kvs_kp_launch(kvs_kp_args_t *a, bool vec, cudaStream_t st)
{
    size_t       esize, smem;
    uint32_t     vsz;
    cudaError_t  rc;

    esize = sizeof(typename kvs_ka_ty<DT>::raw);
    vsz = (uint32_t) kvs_ka_ty<DT>::vec;
    a->ks = kvs_kp_stride(a->hd_k, vsz, vec);
    a->vs = kvs_kp_stride(a->hd_v, vsz, vec);

    for (a->tile = KVS_KP_TILE_MAX;
         a->tile > 8
         && (size_t) 2 * a->tile * (a->ks + a->vs) * esize > KVS_KP_STAGE;
         a->tile /= 2)
    {
        /* void */
    }

    a->hg = a->group < 16 * TMR ? a->group : 16 * TMR;
    a->n_hc = (a->group + a->hg - 1) / a->hg;
    a->qt = 16 * TMR / a->hg;

    if ((uint64_t) a->n_head_kv * a->n_hc > KVS_KP_GRID_MAX) {
        return KVS_K_EARG;
    }

    smem = kvs_kp_smem_bytes(a, esize, 16 * TMR, kvs_ka_ty<DT>::scaled);
    if (smem > KVS_KP_SMEM_MAX) {
        return KVS_K_EARG;
    }

    if (smem > 48 * 1024) {
        rc = cudaFuncSetAttribute(kvs_kp_attn<DT, V, TMR>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int) smem);
        if (rc != cudaSuccess) {
            return (int) rc;
        }
    }

    dim3  grid((a->n_tok + a->qt - 1) / a->qt + a->n_run,
               a->n_head_kv * a->n_hc);

    kvs_kp_attn<DT, V, TMR><<<grid, KVS_KP_THREADS, smem, st>>>(*a);

    return 0;
}


template <int DT>
static int
kvs_kp_launch_dt(kvs_kp_args_t *a, bool vec, bool wide, cudaStream_t st)
{
    constexpr int  V = kvs_ka_ty<DT>::vec;

    /* int8 and fp8 only in 8-byte copies (the launcher refused others) */
    if constexpr (kvs_ka_ty<DT>::scaled) {
        return wide ? kvs_kp_launch<DT, V, 2>(a, vec, st)
                    : kvs_kp_launch<DT, V, 4>(a, vec, st);

    } else {
        if (!vec) {
            return wide ? kvs_kp_launch<DT, 1, 2>(a, vec, st)
                        : kvs_kp_launch<DT, 1, 4>(a, vec, st);
        }

        return wide ? kvs_kp_launch<DT, V, 2>(a, vec, st)
                    : kvs_kp_launch<DT, V, 4>(a, vec, st);
    }
}


extern "C" int
kvs_k_attn_prefill(float *out, const float *q, const kvs_k_kv_t *kv,
    uint32_t layer, const kvs_k_batch_t *b, float scale, uint32_t window,
    float softcap, cudaStream_t st)
{
    int            rc;
    bool           vec, wide;
    size_t         esize, vsz;
    kvs_kp_args_t  a;

    if (out == NULL || q == NULL || kv == NULL || b == NULL
        || kv->k == NULL || kv->v == NULL || !kvs_k_kv_dtype_ok(kv->dtype)
        || (kvs_k_kv_scaled(kv->dtype) && (kv->ks == NULL || kv->vs == NULL))
        || kv->n_head == 0 || kv->n_head_kv == 0
        || kv->n_head % kv->n_head_kv != 0
        || kv->hd_k == 0 || kv->hd_k > KVS_KP_HD_MAX
        || kv->hd_v == 0 || kv->hd_v > KVS_KP_HD_MAX
        || kv->n_blocks == 0 || kv->block_tokens == 0
        || layer >= kv->n_layer
        || !(softcap >= 0.0f) || isinf(softcap)
        || b->n_run > 0x3fffffffu || b->n_tok > 0x3fffffffu)
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

    esize = kvs_k_dtype_size(kv->dtype);
    vsz = esize == 1 ? 8 : 16 / esize;

    /* 16-byte copies (8 of bytes) and q loads need rows and heads on
     * such boundaries */
    vec = kv->hd_k % vsz == 0 && kv->hd_v % vsz == 0
          && (uintptr_t) kv->k % 16 == 0 && (uintptr_t) kv->v % 16 == 0;
    wide = kv->hd_k > 128 || kv->hd_v > 128;

    if (!vec && kvs_k_kv_scaled(kv->dtype)) {
        return KVS_K_EARG;            /* int8, fp8: heads of 8n bytes */
    }

    a.out = out;
    a.q = q;
    a.k = (const char *) kv->k + (size_t) layer * kv->n_blocks
          * kv->block_tokens * kv->n_head_kv * kv->hd_k * esize;
    a.v = (const char *) kv->v + (size_t) layer * kv->n_blocks
          * kv->block_tokens * kv->n_head_kv * kv->hd_v * esize;
    a.kscale = kv->ks != NULL ? kv->ks + (size_t) layer * kv->n_blocks
                                * kv->n_head_kv : NULL;
    a.vscale = kv->vs != NULL ? kv->vs + (size_t) layer * kv->n_blocks
                                * kv->n_head_kv : NULL;
    a.pos = b->pos;
    a.seq = b->seq;
    a.table_off = b->table_off;
    a.table = b->table;
    a.run_tok0 = b->run_tok0;
    a.run_len = b->run_len;
    a.n_tok = b->n_tok;
    a.n_seq = b->n_seq;
    a.n_run = b->n_run;
    a.n_blocks = kv->n_blocks;
    a.bt = kv->block_tokens;
    a.n_head = kv->n_head;
    a.n_head_kv = kv->n_head_kv;
    a.group = kv->n_head / kv->n_head_kv;
    a.hd_k = kv->hd_k;
    a.hd_v = kv->hd_v;
    a.scale = scale;
    a.window = window;
    a.softcap = softcap;
    a.hg = 1;
    a.n_hc = 1;
    a.qt = 1;
    a.ks = 0;
    a.vs = 0;
    a.tile = KVS_KP_TILE_MAX;

    switch (kv->dtype) {
    case KVS_K_F32:
        rc = kvs_kp_launch_dt<KVS_K_F32>(&a, vec, wide, st);
        break;
    case KVS_K_F16:
        rc = kvs_kp_launch_dt<KVS_K_F16>(&a, vec, wide, st);
        break;
    case KVS_K_I8:
        rc = kvs_kp_launch_dt<KVS_K_I8>(&a, vec, wide, st);
        break;
    case KVS_K_FP8:
        rc = kvs_kp_launch_dt<KVS_K_FP8>(&a, vec, wide, st);
        break;
    default:
        rc = kvs_kp_launch_dt<KVS_K_BF16>(&a, vec, wide, st);
        break;
    }

    if (rc != 0) {
        return rc;
    }

    return kvs_k_launched();
}
