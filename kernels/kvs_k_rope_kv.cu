/*
 * kvs_k_rope_kv: biases, RoPE on q and k, and the write of k and v into
 * the paged cache of one layer (the fused RoPE + K/V write of issue 9).
 *
 * Thread layout: one block of 256 threads per token (blockIdx.x = t).
 * The block first fills its cos/sin table in shared memory (one double
 * pair per rotated pair, computed once for all heads), then its threads
 * stride over "units": a unit is one rotated pair of one head (both
 * elements, so the in-place rotation of q never races) or one
 * pass-through dim (>= n_rot) of one head.  q is rotated in place; k is
 * rotated on its way into the cache; v is copied (plus bias).
 *
 * Invariants:
 *   - numerics are kvs_rope_apply()'s: theta = (double) pos * inv_freq[i],
 *     c = cos(theta) * mscale, s = sin(theta) * mscale, the F32 value after
 *     its bias (added in F32 first, as kvs_cpu_qkv_task() does) widened
 *     to double, y0 = x0 * c - x1 * s and y1 = x0 * s + x1 * c in double
 *     without FMA contraction (the _rn intrinsics), rounded once to F32;
 *     the cache store then rounds to its dtype (nearest even);
 *   - pairing KVS_ROPE_NORM (0) turns (2i, 2i + 1), KVS_ROPE_NEOX (1)
 *     turns (i, i + n_rot / 2); dims n_rot .. hd_k pass through;
 *   - a padding token (pos < 0) reads and writes nothing;
 *   - the cache is written only when the slot is sane: seq in [0, n_seq),
 *     table_off[seq] >= 0 and the block id in [0, n_blocks); otherwise q
 *     is still rotated but no K/V is written.  The table's length is not
 *     known here, so for an entry whose table is shorter than pos /
 *     block_tokens + 1 the read of the table itself is the host's to
 *     prevent (it packs and checks the tables);
 *   - every offset is size_t.
 *
 * An int8 or fp8 cache (scaled) is written in two kernels: the first
 * leaves the rotated K and biased V rows, F32, in k and v (in place);
 * then kvs_k_kv_quant_kernel, one warp per (sequence, K/V head, K or V),
 * walks the batch's tokens of its sequence in batch order, as the CPU
 * backend's kvs_cpu_kv_store does, and stores each row's head by
 * kvs_kv_quant.h's rule: the warp's lanes find the row's largest |x|
 * (a max: the same in any order), every lane computes the same scale,
 * and lane j codes elements j, j + 32, .. of the row, and of the
 * block's earlier slots when the scale grows, so a lane only rereads
 * bytes it wrote itself.  Elements and scales come out the CPU's bytes
 * for the same F32 rows.  Each (sequence, head, K or V) owns its
 * blocks' bytes for that head (a block being written belongs to one
 * sequence), so warps never share a byte.
 */

#include <stdint.h>

#include "kvs_k_util.cuh"
#include "kv/kvs_kv_quant.h"

#define KVS_K_ROPE_THREADS   256
#define KVS_K_ROPE_MAX_HALF  512        /* n_rot <= 1024 */


/*
 * Unit u of a [n_heads][hd] vector src (+ bias when not NULL), stored
 * through dst (dtype t, element offset o): a rotated pair, or one
 * pass-through element.  dst may be src (F32, o = 0): a unit reads only
 * the elements it writes.
 */
__device__ __forceinline__ void
kvs_k_rope_unit(void *dst, int t, size_t o, const float *src,
    const float *bias, uint32_t u, uint32_t hd, uint32_t half, int neox,
    const double *cs_c, const double *cs_s)
{
    float     f0, f1;
    double    x0, x1, c, s;
    uint32_t  h, r, a, b, base;

    h = u / (hd - half);
    r = u - h * (hd - half);
    base = h * hd;

    if (r >= half) {
        a = base + half + r;                 /* n_rot + (r - half) */
        f0 = src[a];

        if (bias != NULL) {
            f0 += bias[a];
        }

        kvs_k_store(dst, t, o + a, f0);

        return;
    }

    if (neox) {
        a = base + r;
        b = a + half;

    } else {
        a = base + 2 * r;
        b = a + 1;
    }

    f0 = src[a];
    f1 = src[b];

    if (bias != NULL) {
        f0 += bias[a];
        f1 += bias[b];
    }

    x0 = (double) f0;
    x1 = (double) f1;
    c = cs_c[r];
    s = cs_s[r];

    kvs_k_store(dst, t, o + a,
                (float) __dsub_rn(__dmul_rn(x0, c), __dmul_rn(x1, s)));
    kvs_k_store(dst, t, o + b,
                (float) __dadd_rn(__dmul_rn(x0, s), __dmul_rn(x1, c)));
}


/* q [n_tok][qd] in place; k [n_tok][kd], v [n_tok][vd] into the cache
 * (a scaled cache: rotated / biased in place, for kvs_k_kv_quant_kernel) */
__global__ void __launch_bounds__(KVS_K_ROPE_THREADS)
kvs_k_rope_kv_kernel(kvs_k_kv_t kv, uint32_t layer, kvs_k_batch_t b,
    float *q, float *k, float *v, const float *bq,
    const float *bk, const float *bv, const double *inv_freq,
    uint32_t n_rot, double mscale, int neox)
{
    int       valid;
    int32_t   pos, sq, off, blk;
    size_t    slot, kd, vd, qd;
    double    theta;
    uint32_t  i, half, nu;

    __shared__ double  cs_c[KVS_K_ROPE_MAX_HALF];
    __shared__ double  cs_s[KVS_K_ROPE_MAX_HALF];

    pos = b.pos[blockIdx.x];

    if (pos < 0) {
        return;                              /* padding: the whole block */
    }

    half = n_rot / 2;

    for (i = threadIdx.x; i < half; i += blockDim.x) {
        theta = (double) pos * inv_freq[i];
        cs_c[i] = cos(theta) * mscale;
        cs_s[i] = sin(theta) * mscale;
    }

    /* every thread finds the slot itself: the same few loads, broadcast */
    valid = 0;
    slot = 0;
    sq = b.seq[blockIdx.x];

    if (sq >= 0 && (uint32_t) sq < b.n_seq) {
        off = b.table_off[sq];

        if (off >= 0) {
            blk = b.table[(size_t) off + (uint32_t) pos / kv.block_tokens];

            if (blk >= 0 && (uint32_t) blk < kv.n_blocks) {
                valid = 1;
                slot = ((size_t) layer * kv.n_blocks + (uint32_t) blk)
                       * kv.block_tokens + (uint32_t) pos % kv.block_tokens;
            }
        }
    }

    __syncthreads();

    qd = (size_t) kv.n_head * kv.hd_k;
    kd = (size_t) kv.n_head_kv * kv.hd_k;
    vd = (size_t) kv.n_head_kv * kv.hd_v;

    /* units per head: half pairs, then hd_k - n_rot pass-through dims */
    nu = kv.n_head * (kv.hd_k - half);
    q += (size_t) blockIdx.x * qd;

    for (i = threadIdx.x; i < nu; i += blockDim.x) {
        kvs_k_rope_unit(q, KVS_K_F32, 0, q, bq, i, kv.hd_k, half, neox,
                        cs_c, cs_s);
    }

    if (!valid) {
        return;
    }

    nu = kv.n_head_kv * (kv.hd_k - half);
    k += (size_t) blockIdx.x * kd;
    v += (size_t) blockIdx.x * vd;

    if (kvs_k_kv_scaled(kv.dtype)) {
        for (i = threadIdx.x; i < nu; i += blockDim.x) {
            kvs_k_rope_unit(k, KVS_K_F32, 0, k, bk, i, kv.hd_k, half, neox,
                            cs_c, cs_s);
        }

        for (i = threadIdx.x; i < vd && bv != NULL; i += blockDim.x) {
            v[i] += bv[i];
        }

        return;
    }

    for (i = threadIdx.x; i < nu; i += blockDim.x) {
        kvs_k_rope_unit(kv.k, kv.dtype, slot * kd, k, bk, i, kv.hd_k, half,
                        neox, cs_c, cs_s);
    }

    for (i = threadIdx.x; i < vd; i += blockDim.x) {
        kvs_k_store(kv.v, kv.dtype, slot * vd + i,
                    bv != NULL ? v[i] + bv[i] : v[i]);
    }
}


/*
 * Head `head` of the K or V row x (F32) of a token at pos into block blk
 * of layer `layer` (cache bytes, scales sc), by the whole warp: the
 * row's largest |x|, the scale (*s: the one this warp last left in
 * block *cur), a growth's requantization of the block's earlier slots,
 * the row's codes; lane j codes elements j, j + 32, ..
 */
__device__ __forceinline__ void
kvs_k_kv_quant_row(const kvs_k_kv_t &kv, uint32_t layer, int32_t blk,
    uint32_t pos, uint32_t head, uint32_t hd, size_t width, int fp8,
    uint8_t *cache, float *sc, const float *x, uint32_t lane, int32_t *cur,
    float *s)
{
    int       grow;
    float     amax, ns, r, id;
    size_t    at;
    uint8_t  *row;
    uint32_t  j, u, w, o;

    u = pos % kv.block_tokens;
    at = (size_t) layer * kv.n_blocks + (uint32_t) blk;
    row = cache + (at * kv.block_tokens + u) * width
          + (size_t) head * hd;                     /* slot u's head */
    at = at * kv.n_head_kv + head;

    amax = 0.0f;

    for (j = lane; j < hd; j += 32) {
        amax = fmaxf(amax, fabsf(x[j]));
    }

    for (o = 16; o > 0; o >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    }

    /* the scale before this row: this warp's own, or the cache's */
    if (u != 0 && blk != *cur) {
        *s = sc[at];
    }

    *cur = blk;
    ns = kvs_kvq_scale(*s, amax, u, fp8 ? KVS_KVQ_FP8_MAX : KVS_KVQ_I8_MAX,
                       &grow);

    if (grow) {
        r = *s / ns;

        for (w = 1; w <= u; w++) {
            for (j = lane; j < hd; j += 32) {
                (row - w * width)[j] = kvs_kvq_enc(fp8, kvs_kvq_dec(
                    fp8, (row - w * width)[j]) * r);
            }
        }
    }

    *s = ns;
    id = kvs_kvq_inv(ns);

    for (j = lane; j < hd; j += 32) {
        row[j] = kvs_kvq_enc(fp8, x[j] * id);
    }

    if (lane == 0) {
        sc[at] = ns;
    }
}


/*
 * An int8 or fp8 cache: one warp per (sequence blockIdx.x, K/V head
 * blockIdx.y, K or V blockIdx.z) stores its head of every row of its
 * sequence's tokens, in batch order (see the file's comment).  The
 * block's scale lives in a register while the warp stays in a block
 * and is read back from the cache when a token starts mid-block.
 */
__global__ void __launch_bounds__(32)
kvs_k_kv_quant_kernel(kvs_k_kv_t kv, uint32_t layer, kvs_k_batch_t b,
    const float *k, const float *v)
{
    int            fp8;
    float          s, *sc;
    int32_t        pos, off, blk, cur;
    size_t         width;
    uint8_t       *cache;
    uint32_t       lane, t, t0, hd, head, mine;
    const float   *src;

    lane = threadIdx.x;
    head = blockIdx.y;
    fp8 = kv.dtype == KVS_K_FP8;
    hd = blockIdx.z ? kv.hd_v : kv.hd_k;
    width = (size_t) kv.n_head_kv * hd;
    src = blockIdx.z ? v : k;
    cache = (uint8_t *) (blockIdx.z ? kv.v : kv.k);
    sc = blockIdx.z ? kv.vs : kv.ks;

    off = b.table_off[blockIdx.x];
    if (off < 0) {
        return;
    }

    cur = -1;
    s = 0.0f;

    /* 32 tokens a turn: the lanes find the sequence's, in batch order */
    for (t0 = 0; t0 < b.n_tok; t0 += 32) {
        t = t0 + lane;
        mine = __ballot_sync(0xffffffffu, t < b.n_tok
                             && b.seq[t < b.n_tok ? t : 0]
                                == (int32_t) blockIdx.x
                             && b.pos[t < b.n_tok ? t : 0] >= 0);

        for ( /* void */ ; mine != 0; mine &= mine - 1) {
            t = t0 + (uint32_t) __ffs(mine) - 1;
            pos = b.pos[t];
            blk = b.table[(size_t) off + (uint32_t) pos / kv.block_tokens];

            if (blk < 0 || (uint32_t) blk >= kv.n_blocks) {
                continue;
            }

            kvs_k_kv_quant_row(kv, layer, blk, (uint32_t) pos, head, hd,
                               width, fp8, cache, sc,
                               src + (size_t) t * width + (size_t) head * hd,
                               lane, &cur, &s);
        }
    }
}



/* a * b elements of the cache fit a size_t of bytes; a, b > 0 */
static int
kvs_k_rope_fits(size_t a, size_t b)
{
    return a <= SIZE_MAX / sizeof(float) / b;
}


extern "C" int
kvs_k_rope_kv(const kvs_k_kv_t *kv, uint32_t layer, const kvs_k_batch_t *b,
    float *q, float *k, float *v, const float *bq,
    const float *bk, const float *bv, const double *inv_freq,
    uint32_t n_rot, double mscale, int pairing, cudaStream_t st)
{
    size_t  slots;

    if (kv == NULL || b == NULL || q == NULL || k == NULL || v == NULL
        || inv_freq == NULL || kv->k == NULL || kv->v == NULL
        || !kvs_k_kv_dtype_ok(kv->dtype) || (pairing != 0 && pairing != 1)
        || (kvs_k_kv_scaled(kv->dtype) && (kv->ks == NULL || kv->vs == NULL)))
    {
        return KVS_K_EARG;
    }

    if (kv->n_layer == 0 || layer >= kv->n_layer || kv->n_blocks == 0
        || kv->block_tokens == 0 || kv->n_head == 0 || kv->n_head_kv == 0
        || kv->n_head % kv->n_head_kv != 0 || kv->hd_k == 0
        || kv->hd_v == 0 || n_rot == 0 || n_rot % 2 != 0
        || n_rot > kv->hd_k || n_rot / 2 > KVS_K_ROPE_MAX_HALF)
    {
        return KVS_K_EARG;
    }

    /* widths (units and elements of a row) within the 32-bit loops */
    if ((uint64_t) kv->n_head * kv->hd_k > INT32_MAX
        || (uint64_t) kv->n_head_kv * kv->hd_k > INT32_MAX
        || (uint64_t) kv->n_head_kv * kv->hd_v > INT32_MAX)
    {
        return KVS_K_EARG;
    }

    /* the cache's extent (the kernel's slot arithmetic) fits a size_t */
    slots = (size_t) kv->n_blocks * kv->block_tokens;

    if (!kvs_k_rope_fits(slots, kv->n_layer)
        || !kvs_k_rope_fits(slots * kv->n_layer,
                            (size_t) kv->n_head_kv * kv->hd_k)
        || !kvs_k_rope_fits(slots * kv->n_layer,
                            (size_t) kv->n_head_kv * kv->hd_v))
    {
        return KVS_K_EARG;
    }

    if (b->n_tok == 0 || b->n_tok > INT32_MAX || b->n_seq == 0
        || b->pos == NULL || b->seq == NULL || b->table_off == NULL
        || b->table == NULL)
    {
        return KVS_K_EARG;
    }

    if (kvs_k_kv_scaled(kv->dtype)
        && (b->n_seq > 65535u || kv->n_head_kv > 65535u))
    {
        return KVS_K_EARG;                   /* grid x and y */
    }

    kvs_k_rope_kv_kernel<<<b->n_tok, KVS_K_ROPE_THREADS, 0, st>>>(
        *kv, layer, *b, q, k, v, bq, bk, bv, inv_freq, n_rot, mscale,
        pairing == 1);

    if (kvs_k_kv_scaled(kv->dtype)) {
        kvs_k_kv_quant_kernel<<<dim3(b->n_seq, kv->n_head_kv, 2), 32, 0,
                                st>>>(*kv, layer, *b, k, v);
    }

    return kvs_k_launched();
}
