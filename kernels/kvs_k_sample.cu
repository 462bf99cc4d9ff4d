/*
 * kvs_k_sample: sampling on the device, one row of logits per block, so
 * only token ids come back per step (see kvs_kernels.h).  It follows
 * kvs_sample.c's pipeline, steps 3 to 10 without min-p, bias or
 * penalties, operation for operation where the CPU's result depends on
 * it.
 *
 * Thread layout: one block of 512 threads (16 warps) per row, grid = n;
 * nothing depends on device data but the work inside a block, so a
 * launch is graph-capturable.  Every pass over the row is a strided loop
 * (coalesced), reductions go through warp shuffles and shared memory.
 *
 * Per row, in order (every branch is uniform across the block):
 *   1. check: a NaN or +inf logit, or no logit above -inf, is what
 *      kvs_sample() refuses: ids[row] = -1 and nothing else is done;
 *   2. temperature <= 0 (or NaN): argmax, lowest id on ties; done;
 *   3. x /= temperature (F32 division), and the row's maximum;
 *   4. top-k (0 < k < n): a radix select on the order-preserving 32-bit
 *      key of x (-0 and +0 equal, as float compares) finds the k-th key
 *      K in four 8-bit histogram passes; keys below K become -inf, and of
 *      the keys equal to K only the lowest ids that fill k stay (a scan
 *      in id order, needed only when K is tied across the cut);
 *   5. softmax: x = (float) exp((double) (x - max)), the F32 sum in id
 *      order, x /= sum;
 *   6. the draw with params.coin:
 *      - nothing truncated: run.c's sample_mult, the first id whose F32
 *        running sum exceeds the coin, else the last id;
 *      - top-p < 1: candidates prob >= (1 - p) / (n - 1) compacted in id
 *        order into scratch (none: the first maximum), sorted by
 *        descending prob, ties by ascending id (a stable LSD radix sort,
 *        four 8-bit passes, a pass skipped when one digit holds all),
 *        cut after the running sum first exceeds p, then r = coin *
 *        (kept sum) walked over the kept ones;
 *      - top-k alone: r = coin * (sum of the probabilities, id order)
 *        walked in id order, else the last id with a probability > 0.
 *   Greedy and plain-temperature rows never sort.
 *
 * Why the serial sums: kvs_sample.c adds in F32 left to right (run.c's
 * order), and the token depends on those roundings, so the running sums
 * (softmax total, nucleus, walks) are made by one thread, in the CPU's
 * order, from a chunk the block stages in shared memory.  Expected cost
 * (not yet measured on a GPU): 4 to 6 cycles per element, the latency of
 * the dependent FADD, some 0.3 ms per pass over a 128k row; a row makes
 * two or three passes, all rows in parallel.  The exp is computed in
 * double and rounded once, which is the correctly rounded expf (glibc's
 * expf is within 0.502 ulp, so it can differ from it in very rare
 * cases).
 *
 * Scratch: [n][2][n_vocab] int32, two ping-pong id buffers per row for
 * the sort, touched only by top-p rows.  n_vocab <= 2^24 keeps every
 * count and index in 32 bits.
 */

#include <stdint.h>

#include "kvs_k_util.cuh"

#define KVS_K_SMP_THREADS    512
#define KVS_K_SMP_WARPS      (KVS_K_SMP_THREADS / 32)
#define KVS_K_SMP_ITEMS      8           /* per thread in a scan tile */
#define KVS_K_SMP_TILE       (KVS_K_SMP_THREADS * KVS_K_SMP_ITEMS)
#define KVS_K_SMP_STAGE      2048        /* floats a serial chunk holds */
#define KVS_K_SMP_MAX_VOCAB  (1u << 24)
#define KVS_K_SMP_FULL       0xffffffffu


typedef struct {
    union {
        struct {
            uint32_t  cnt[KVS_K_SMP_WARPS][256];  /* per warp and digit */
            uint32_t  pos[KVS_K_SMP_WARPS][256];  /* their scatter base */
        } sort;
        float4    stage[KVS_K_SMP_STAGE / 4];     /* a serial chunk */
    } u;
    uint32_t  hist[4][256];
    uint32_t  off[256];
    uint32_t  wsum[KVS_K_SMP_WARPS];
    float     rv[KVS_K_SMP_WARPS];
    int32_t   ri[KVS_K_SMP_WARPS];
    uint32_t  sel_d;
    uint32_t  sel_above;
    uint32_t  sel_cnt;
    uint32_t  ser_hit;
    float     ser_cum;
} kvs_k_smp_smem_t;


/* The order-preserving key of x: keys compare as the floats do, -0 and
 * +0 included (both map to 0x80000000). */
__device__ __forceinline__ uint32_t
kvs_k_smp_key(float x)
{
    uint32_t  u;

    u = __float_as_uint(x);

    if (u == 0x80000000u) {
        u = 0;
    }

    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}


/* The block's best (value, id): larger value, then lower id; every
 * thread gets it. */
__device__ void
kvs_k_smp_argmax(float *v, int32_t *id, kvs_k_smp_smem_t *sm)
{
    float     ov;
    int32_t   oid;
    uint32_t  k, w;

    for (k = 16; k > 0; k >>= 1) {
        ov = __shfl_xor_sync(KVS_K_SMP_FULL, *v, k);
        oid = __shfl_xor_sync(KVS_K_SMP_FULL, *id, k);

        if (ov > *v || (ov == *v && oid < *id)) {
            *v = ov;
            *id = oid;
        }
    }

    if (threadIdx.x % 32 == 0) {
        sm->rv[threadIdx.x / 32] = *v;
        sm->ri[threadIdx.x / 32] = *id;
    }

    __syncthreads();

    *v = sm->rv[0];
    *id = sm->ri[0];

    for (w = 1; w < KVS_K_SMP_WARPS; w++) {
        if (sm->rv[w] > *v || (sm->rv[w] == *v && sm->ri[w] < *id)) {
            *v = sm->rv[w];
            *id = sm->ri[w];
        }
    }

    __syncthreads();
}


/* The block's largest v; every thread gets it. */
__device__ int32_t
kvs_k_smp_max_i32(int32_t v, kvs_k_smp_smem_t *sm)
{
    int32_t   o;
    uint32_t  k, w;

    for (k = 16; k > 0; k >>= 1) {
        o = __shfl_xor_sync(KVS_K_SMP_FULL, v, k);
        v = o > v ? o : v;
    }

    if (threadIdx.x % 32 == 0) {
        sm->ri[threadIdx.x / 32] = v;
    }

    __syncthreads();

    v = sm->ri[0];

    for (w = 1; w < KVS_K_SMP_WARPS; w++) {
        v = sm->ri[w] > v ? sm->ri[w] : v;
    }

    __syncthreads();

    return v;
}


/* Exclusive prefix sum of v over the block in thread order; *total is
 * the sum of all. */
__device__ uint32_t
kvs_k_smp_scan(uint32_t v, uint32_t *total, kvs_k_smp_smem_t *sm)
{
    uint32_t  lane, w, x, y, k, pre;

    lane = threadIdx.x % 32;
    w = threadIdx.x / 32;
    x = v;

    for (k = 1; k < 32; k <<= 1) {
        y = __shfl_up_sync(KVS_K_SMP_FULL, x, k);
        if (lane >= k) {
            x += y;
        }
    }

    if (lane == 31) {
        sm->wsum[w] = x;
    }

    __syncthreads();

    if (w == 0) {
        y = lane < KVS_K_SMP_WARPS ? sm->wsum[lane] : 0;

        for (k = 1; k < 32; k <<= 1) {
            pre = __shfl_up_sync(KVS_K_SMP_FULL, y, k);
            if (lane >= k) {
                y += pre;
            }
        }

        if (lane < KVS_K_SMP_WARPS) {
            sm->wsum[lane] = y;                /* inclusive, per warp */
        }
    }

    __syncthreads();

    pre = w > 0 ? sm->wsum[w - 1] : 0;
    *total = sm->wsum[KVS_K_SMP_WARPS - 1];

    __syncthreads();

    return pre + x - v;
}


/*
 * The first j < len at which the F32 running sum of v(j) = x[idx ? idx[j]
 * : j], added left to right, exceeds t (len when none); *cum is the sum
 * through j (through len - 1 when none; 0 when len is 0).  The block
 * stages chunks; thread 0 adds.  Padding the last chunk with +0 changes
 * neither the sum nor the first crossing (v >= 0).
 */
__device__ uint32_t
kvs_k_smp_serial(const float *x, const int32_t *idx, uint32_t len, float t,
    float *cum, kvs_k_smp_smem_t *sm)
{
    float    *st, c, v[16];
    float4    a4;
    uint32_t  base, cnt, pad, i, j, hit;

    st = (float *) sm->u.stage;
    hit = len;
    c = 0.0f;

    for (base = 0; base < len; base += KVS_K_SMP_STAGE) {
        cnt = len - base < KVS_K_SMP_STAGE ? len - base : KVS_K_SMP_STAGE;
        pad = (cnt + 15) & ~15u;

        for (i = threadIdx.x; i < pad; i += blockDim.x) {
            if (i >= cnt) {
                st[i] = 0.0f;

            } else {
                st[i] = idx != NULL ? x[idx[base + i]] : x[base + i];
            }
        }

        __syncthreads();

        if (threadIdx.x == 0) {
            /* loads of a group first, then its dependent adds */
            for (i = 0; i < pad; i += 16) {
                for (j = 0; j < 4; j++) {
                    a4 = sm->u.stage[i / 4 + j];
                    v[4 * j] = a4.x;
                    v[4 * j + 1] = a4.y;
                    v[4 * j + 2] = a4.z;
                    v[4 * j + 3] = a4.w;
                }

#pragma unroll
                for (j = 0; j < 16; j++) {
                    c += v[j];

                    if (c > t) {
                        hit = base + i + j;
                        break;
                    }
                }

                if (hit != len) {
                    break;
                }
            }

            sm->ser_hit = hit;
            sm->ser_cum = c;
        }

        __syncthreads();

        hit = sm->ser_hit;
        c = sm->ser_cum;

        if (hit != len) {
            break;
        }
    }

    *cum = c;

    return hit;
}


/*
 * Top-k on x [n] (0 < k < n): the k largest stay, ties at the k-th place
 * keep the lower ids, the rest become -inf.
 */
__device__ void
kvs_k_smp_top_k(float *x, uint32_t n, uint32_t k, kvs_k_smp_smem_t *sm)
{
    uint32_t  prefix, mask, want, eq, shift, i, j, key, lane, s, incl;
    uint32_t  acc, c, b, base, r, tot;

    prefix = 0;
    mask = 0;
    want = k;                  /* rank still to find among the matching */
    eq = 0;
    lane = threadIdx.x % 32;

    for (shift = 32; shift > 0; /* void */) {
        shift -= 8;

        for (i = threadIdx.x; i < 256; i += blockDim.x) {
            sm->hist[0][i] = 0;
        }

        if (threadIdx.x == 0) {
            sm->sel_d = 0;
            sm->sel_above = 0;
            sm->sel_cnt = 0;
        }

        __syncthreads();

        for (i = threadIdx.x; i < n; i += blockDim.x) {
            key = kvs_k_smp_key(x[i]);

            if ((key & mask) == prefix) {
                atomicAdd(&sm->hist[0][(key >> shift) & 255], 1u);
            }
        }

        __syncthreads();

        /* warp 0: lane l sums digits 255 - 8l down to 248 - 8l; the lane
         * whose range holds the want-th largest walks it */
        if (threadIdx.x < 32) {
            s = 0;

            for (j = 0; j < 8; j++) {
                s += sm->hist[0][255 - 8 * lane - j];
            }

            incl = s;

            for (j = 1; j < 32; j <<= 1) {
                c = __shfl_up_sync(KVS_K_SMP_FULL, incl, j);
                if (lane >= j) {
                    incl += c;
                }
            }

            acc = incl - s;

            if (acc < want && want <= incl) {
                for (j = 0; j < 8; j++) {
                    b = 255 - 8 * lane - j;
                    c = sm->hist[0][b];

                    if (acc + c >= want) {
                        sm->sel_d = b;
                        sm->sel_above = acc;
                        sm->sel_cnt = c;
                        break;
                    }

                    acc += c;
                }
            }
        }

        __syncthreads();

        prefix |= sm->sel_d << shift;
        mask |= 255u << shift;
        want -= sm->sel_above;
        eq = sm->sel_cnt;

        __syncthreads();           /* all have read sel_* before reset */
    }

    /* prefix is K; want (1..eq) of the eq keys equal to K stay */

    if (want >= eq) {
        for (i = threadIdx.x; i < n; i += blockDim.x) {
            if (kvs_k_smp_key(x[i]) < prefix) {
                x[i] = -INFINITY;
            }
        }

        __syncthreads();

        return;
    }

    /* K is tied across the cut: rank the equal keys in id order */
    r = 0;

    for (base = 0; base < n; base += KVS_K_SMP_TILE) {
        i = base + threadIdx.x * KVS_K_SMP_ITEMS;
        c = 0;

        for (j = 0; j < KVS_K_SMP_ITEMS && i + j < n; j++) {
            c += kvs_k_smp_key(x[i + j]) == prefix;
        }

        acc = r + kvs_k_smp_scan(c, &tot, sm);

        for (j = 0; j < KVS_K_SMP_ITEMS && i + j < n; j++) {
            key = kvs_k_smp_key(x[i + j]);

            if (key < prefix) {
                x[i + j] = -INFINITY;

            } else if (key == prefix) {
                if (acc >= want) {
                    x[i + j] = -INFINITY;
                }

                acc++;
            }
        }

        r += tot;
    }

    __syncthreads();
}


/* Ids i with x[i] >= cutoff, in id order, into out; returns how many. */
__device__ uint32_t
kvs_k_smp_compact(const float *x, uint32_t n, float cutoff, int32_t *out,
    kvs_k_smp_smem_t *sm)
{
    uint32_t  base, i, j, c, at, run, tot;

    run = 0;

    for (base = 0; base < n; base += KVS_K_SMP_TILE) {
        i = base + threadIdx.x * KVS_K_SMP_ITEMS;
        c = 0;

        for (j = 0; j < KVS_K_SMP_ITEMS && i + j < n; j++) {
            c += x[i + j] >= cutoff;
        }

        at = run + kvs_k_smp_scan(c, &tot, sm);

        for (j = 0; j < KVS_K_SMP_ITEMS && i + j < n; j++) {
            if (x[i + j] >= cutoff) {
                out[at++] = (int32_t) (i + j);
            }
        }

        run += tot;
    }

    __syncthreads();

    return run;
}


/* The sort key of candidate id: ascending key = descending probability */
__device__ __forceinline__ uint32_t
kvs_k_smp_pkey(const float *x, int32_t id)
{
    return ~kvs_k_smp_key(x[id]);
}


/*
 * Sorts the ids a[0..n0) by descending x[id], equal ones keeping their
 * order (ascending id, as compacted): a stable LSD radix sort over b.
 * Returns the buffer that holds the result (a or b).
 */
__device__ int32_t *
kvs_k_smp_sort(const float *x, int32_t *a, int32_t *b, uint32_t n0,
    kvs_k_smp_smem_t *sm)
{
    int       one;
    int32_t  *src, *dst, *t, id;
    uint32_t  p, i, j, key, dig, peers, lane, w, rank, run, c, tot, base;

    lane = threadIdx.x % 32;
    w = threadIdx.x / 32;

    for (i = threadIdx.x; i < 4 * 256; i += blockDim.x) {
        sm->hist[i / 256][i % 256] = 0;
    }

    __syncthreads();

    for (i = threadIdx.x; i < n0; i += blockDim.x) {
        key = kvs_k_smp_pkey(x, a[i]);

        for (p = 0; p < 4; p++) {
            atomicAdd(&sm->hist[p][(key >> (8 * p)) & 255], 1u);
        }
    }

    __syncthreads();

    src = a;
    dst = b;

    for (p = 0; p < 4; p++) {
        /* a digit that every key shares would leave the order as is */
        one = __syncthreads_or(threadIdx.x < 256
                               && sm->hist[p][threadIdx.x] == n0);
        if (one) {
            continue;
        }

        c = threadIdx.x < 256 ? sm->hist[p][threadIdx.x] : 0;
        run = kvs_k_smp_scan(c, &tot, sm);

        if (threadIdx.x < 256) {
            sm->off[threadIdx.x] = run;
        }

        for (i = threadIdx.x; i < KVS_K_SMP_WARPS * 256; i += blockDim.x) {
            sm->u.sort.cnt[i / 256][i % 256] = 0;
        }

        __syncthreads();

        for (base = 0; base < n0; base += blockDim.x) {
            i = base + threadIdx.x;
            id = 0;
            dig = 256;                       /* no element: its own group */

            if (i < n0) {
                id = src[i];
                dig = (kvs_k_smp_pkey(x, id) >> (8 * p)) & 255;
            }

            /* rank among the lanes before this one with the same digit */
            peers = __match_any_sync(KVS_K_SMP_FULL, dig);
            rank = __popc(peers & ((1u << lane) - 1));

            if (dig < 256 && rank == 0) {
                sm->u.sort.cnt[w][dig] = __popc(peers);
            }

            __syncthreads();

            /* digit threads: this tile's base per warp, in warp order */
            if (threadIdx.x < 256) {
                run = sm->off[threadIdx.x];

                for (j = 0; j < KVS_K_SMP_WARPS; j++) {
                    c = sm->u.sort.cnt[j][threadIdx.x];
                    sm->u.sort.pos[j][threadIdx.x] = run;
                    run += c;
                }

                sm->off[threadIdx.x] = run;
            }

            __syncthreads();

            if (dig < 256) {
                dst[sm->u.sort.pos[w][dig] + rank] = id;

                if (rank == 0) {
                    sm->u.sort.cnt[w][dig] = 0;  /* clean for the next */
                }
            }

            __syncwarp();
        }

        __syncthreads();

        t = src;
        src = dst;
        dst = t;
    }

    return src;
}


/* ids [n]; logits [n][n_vocab]; params [n]; scratch [n][2][n_vocab] */
__global__ void __launch_bounds__(KVS_K_SMP_THREADS)
kvs_k_sample_kernel(int32_t *ids, float *logits,
    const kvs_k_sample_param_t *params, uint32_t n_vocab, int32_t *scratch)
{
    int                   bad, fin;
    float                *x, v, best, temp, top_p, cutoff, cum, r;
    int32_t               bid, k, tok, last, *sorted, *a;
    uint32_t              n, i, j, m, n0;
    kvs_k_sample_param_t  par;

    __shared__ kvs_k_smp_smem_t  sm;

    n = n_vocab;
    x = logits + (size_t) blockIdx.x * n;
    par = params[blockIdx.x];
    temp = par.temperature;
    top_p = par.top_p;
    k = par.top_k;

    /* 1, 2: check, and the greedy answer on the way */
    bad = 0;
    fin = 0;
    best = -INFINITY;
    bid = INT32_MAX;

    for (i = threadIdx.x; i < n; i += blockDim.x) {
        v = x[i];
        bad |= isnan(v) || v == INFINITY;
        fin |= v != -INFINITY;

        if (v > best) {
            best = v;
            bid = (int32_t) i;
        }
    }

    bad = __syncthreads_or(bad);
    fin = __syncthreads_or(fin);

    if (bad || !fin) {
        if (threadIdx.x == 0) {
            ids[blockIdx.x] = -1;
        }

        return;
    }

    if (!(temp > 0.0f)) {
        kvs_k_smp_argmax(&best, &bid, &sm);

        if (threadIdx.x == 0) {
            ids[blockIdx.x] = bid;
        }

        return;
    }

    /* 3: temperature, and the maximum (top-k keeps it) */
    best = -INFINITY;
    bid = 0;

    for (i = threadIdx.x; i < n; i += blockDim.x) {
        v = x[i] / temp;
        x[i] = v;
        best = v > best ? v : best;
    }

    kvs_k_smp_argmax(&best, &bid, &sm);

    /* 4 */
    if (k > 0 && (uint32_t) k < n) {
        kvs_k_smp_top_k(x, n, (uint32_t) k, &sm);
    }

    /* 5: softmax */
    for (i = threadIdx.x; i < n; i += blockDim.x) {
        x[i] = (float) exp((double) (x[i] - best));
    }

    __syncthreads();

    (void) kvs_k_smp_serial(x, NULL, n, INFINITY, &cum, &sm);

    last = -1;

    for (i = threadIdx.x; i < n; i += blockDim.x) {
        v = x[i] / cum;
        x[i] = v;

        if (v > 0.0f) {
            last = (int32_t) i;
        }
    }

    __syncthreads();

    /* 6: the draw */
    if ((k <= 0 || (uint32_t) k >= n) && top_p >= 1.0f) {
        j = kvs_k_smp_serial(x, NULL, n, par.coin, &cum, &sm);
        tok = j < n ? (int32_t) j : (int32_t) n - 1;

    } else if (top_p < 1.0f) {
        cutoff = n > 1 ? (1.0f - top_p) / (float) (n - 1) : 0.0f;
        a = scratch + (size_t) blockIdx.x * 2 * n;
        n0 = kvs_k_smp_compact(x, n, cutoff, a, &sm);

        if (n0 == 0) {
            /* the cutoff is above every probability: the first maximum */
            best = -INFINITY;
            bid = INT32_MAX;

            for (i = threadIdx.x; i < n; i += blockDim.x) {
                if (x[i] > best) {
                    best = x[i];
                    bid = (int32_t) i;
                }
            }

            kvs_k_smp_argmax(&best, &bid, &sm);
            tok = bid;

        } else {
            sorted = kvs_k_smp_sort(x, a, a + n, n0, &sm);

            j = kvs_k_smp_serial(x, sorted, n0, top_p, &cum, &sm);
            m = j < n0 ? j + 1 : n0;
            r = par.coin * cum;

            j = kvs_k_smp_serial(x, sorted, m, r, &cum, &sm);
            tok = sorted[j < m ? j : m - 1];
        }

    } else {
        last = kvs_k_smp_max_i32(last, &sm);

        (void) kvs_k_smp_serial(x, NULL, n, INFINITY, &cum, &sm);
        r = par.coin * cum;

        j = kvs_k_smp_serial(x, NULL, n, r, &cum, &sm);
        tok = j < n ? (int32_t) j : last;
    }

    if (threadIdx.x == 0) {
        /* only a row that overflowed (x / temperature = inf, NaN
         * probabilities) can end without a candidate */
        ids[blockIdx.x] = tok >= 0 && (uint32_t) tok < n ? tok : -1;
    }
}


extern "C" size_t
kvs_k_sample_scratch_bytes(uint32_t n, uint32_t n_vocab)
{
    if (n == 0 || n_vocab == 0 || n_vocab > KVS_K_SMP_MAX_VOCAB
        || n > SIZE_MAX / 2 / sizeof(int32_t) / n_vocab)
    {
        return 0;
    }

    return (size_t) n * 2 * n_vocab * sizeof(int32_t);
}


extern "C" int
kvs_k_sample(int32_t *ids, float *logits, const kvs_k_sample_param_t *params,
    uint32_t n, uint32_t n_vocab, void *scratch, cudaStream_t st)
{
    if (ids == NULL || logits == NULL || params == NULL || scratch == NULL
        || n == 0 || n > INT32_MAX || n_vocab == 0
        || n_vocab > KVS_K_SMP_MAX_VOCAB
        || kvs_k_sample_scratch_bytes(n, n_vocab) == 0
        || ((uintptr_t) scratch & 3) != 0 || ((uintptr_t) logits & 3) != 0)
    {
        return KVS_K_EARG;
    }

    kvs_k_sample_kernel<<<n, KVS_K_SMP_THREADS, 0, st>>>(
        ids, logits, params, n_vocab, (int32_t *) scratch);

    return kvs_k_launched();
}
