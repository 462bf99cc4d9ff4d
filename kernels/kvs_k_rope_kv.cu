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
 */

#include <stdint.h>

#include "kvs_k_util.cuh"

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


/* q [n_tok][qd] in place; k [n_tok][kd], v [n_tok][vd] into the cache */
__global__ void __launch_bounds__(KVS_K_ROPE_THREADS)
kvs_k_rope_kv_kernel(kvs_k_kv_t kv, uint32_t layer, kvs_k_batch_t b,
    float *q, const float *k, const float *v, const float *bq,
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

    for (i = threadIdx.x; i < nu; i += blockDim.x) {
        kvs_k_rope_unit(kv.k, kv.dtype, slot * kd, k, bk, i, kv.hd_k, half,
                        neox, cs_c, cs_s);
    }

    v += (size_t) blockIdx.x * vd;

    for (i = threadIdx.x; i < vd; i += blockDim.x) {
        kvs_k_store(kv.v, kv.dtype, slot * vd + i,
                    bv != NULL ? v[i] + bv[i] : v[i]);
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
    float *q, const float *k, const float *v, const float *bq,
    const float *bk, const float *bv, const double *inv_freq,
    uint32_t n_rot, double mscale, int pairing, cudaStream_t st)
{
    size_t  slots;

    if (kv == NULL || b == NULL || q == NULL || k == NULL || v == NULL
        || inv_freq == NULL || kv->k == NULL || kv->v == NULL
        || !kvs_k_dtype_ok(kv->dtype) || (pairing != 0 && pairing != 1))
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

    kvs_k_rope_kv_kernel<<<b->n_tok, KVS_K_ROPE_THREADS, 0, st>>>(
        *kv, layer, *b, q, k, v, bq, bk, bv, inv_freq, n_rot, mscale,
        pairing == 1);

    return kvs_k_launched();
}
