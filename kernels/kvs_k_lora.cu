/*
 * kvs_k_lora: the grouped (SGMV-style) LoRA product of one adapted
 * matrix, y[row] += scale[s] * B[s] (A[s] x[row]) for every row with an
 * adapter s, in two kernels (see kvs_kernels.h for the arguments):
 *
 *   shrink: T[j][r] = scale * sum_i A[r][i] x[rows[j]][i].  One block of
 *     8 warps per (task, 8 ranks); warp w takes rank r = 8 blockIdx.y +
 *     w and reads A's row r once for the task's (up to
 *     KVS_K_LORA_GROUP) rows, which all have the same adapter: the
 *     "grouped" part, A streamed once per task rather than once per
 *     row.  Lanes stride over n_in, each keeps one F32 sum per row, and
 *     the sums are reduced with shuffles;
 *   expand: y[rows[j]][o] += T[j][0] BT[0][o] + T[j][1] BT[1][o] + ...,
 *     one F32 fma per rank in rank order, starting from y: the order of
 *     the CPU's AVX-512 axpys (kvs_cpu_lora.c).  One block of 256
 *     threads per (task, 256 outputs); the task's T rows are staged in
 *     shared memory (KVS_K_LORA_GROUP x rank floats, at most 32 KiB),
 *     each thread reads BT[r][o] once for every row of the task, and
 *     consecutive threads read consecutive o (B is uploaded transposed
 *     for this).
 *
 * A and BT are BF16 (kvs_cuda_lora_plan.h says why), x is the base
 * product's input in its own dtype (F32, F16 or BF16), y and T are F32.
 * A task whose slot has rank 0 for this matrix (the adapter leaves it
 * alone) returns at once; rows without an adapter are in no task, so
 * their y is never touched.  Rows of different tasks are distinct, so
 * no two threads write one y element.  Grids depend on the launcher's
 * arguments only.
 */

#include <stdint.h>

#include "kvs_k_util.cuh"

#define KVS_K_LORA_WARPS    8
#define KVS_K_LORA_THREADS  (KVS_K_LORA_WARPS * 32)
#define KVS_K_LORA_GROUP    8           /* KVS_CUDA_LORA_GROUP */
#define KVS_K_LORA_RANK_MAX 1024        /* KVS_CUDA_LORA_RANK_MAX */


__device__ __forceinline__ float
kvs_k_lora_ld(const float *p, size_t i)
{
    return p[i];
}

__device__ __forceinline__ float
kvs_k_lora_ld(const __half *p, size_t i)
{
    return __half2float(p[i]);
}

__device__ __forceinline__ float
kvs_k_lora_ld(const __nv_bfloat16 *p, size_t i)
{
    return __bfloat162float(p[i]);
}


/* t [cap][ld_t]: row j of the task list, rank r */
template <typename X>
__global__ void __launch_bounds__(KVS_K_LORA_THREADS)
kvs_k_lora_shrink_kernel(float *t, uint32_t ld_t, const X *x, size_t ldx,
    uint32_t n_in, const kvs_k_lora_mat_t *mats, const int32_t *rows,
    const int32_t *task0, const int32_t *task_slot)
{
    float                  acc[KVS_K_LORA_GROUP], w;
    size_t                 xo[KVS_K_LORA_GROUP];
    int32_t                j0, cnt;
    uint32_t               r, lane, i, g, d;
    kvs_k_lora_mat_t       m;
    const __nv_bfloat16   *a;

    lane = threadIdx.x % 32;
    r = blockIdx.y * KVS_K_LORA_WARPS + threadIdx.x / 32;
    m = mats[task_slot[blockIdx.x]];

    if (r >= m.rank) {
        return;
    }

    j0 = task0[blockIdx.x];
    cnt = task0[blockIdx.x + 1] - j0;
    a = (const __nv_bfloat16 *) m.a + (size_t) r * n_in;

#pragma unroll
    for (g = 0; g < KVS_K_LORA_GROUP; g++) {
        acc[g] = 0.0f;
        xo[g] = (size_t) rows[j0 + ((int32_t) g < cnt ? (int32_t) g : 0)]
                * ldx;
    }

    for (i = lane; i < n_in; i += 32) {
        w = __bfloat162float(a[i]);

#pragma unroll
        for (g = 0; g < KVS_K_LORA_GROUP; g++) {
            if ((int32_t) g < cnt) {
                acc[g] = fmaf(w, kvs_k_lora_ld(x, xo[g] + i), acc[g]);
            }
        }
    }

#pragma unroll
    for (g = 0; g < KVS_K_LORA_GROUP; g++) {
        for (d = 16; d > 0; d >>= 1) {
            acc[g] += __shfl_xor_sync(0xffffffffu, acc[g], d);
        }
    }

    if (lane == 0) {
#pragma unroll
        for (g = 0; g < KVS_K_LORA_GROUP; g++) {
            if ((int32_t) g < cnt) {
                t[(size_t) (j0 + (int32_t) g) * ld_t + r] = m.scale * acc[g];
            }
        }
    }
}


__global__ void __launch_bounds__(KVS_K_LORA_THREADS)
kvs_k_lora_expand_kernel(float *y, size_t ldy, uint32_t n_out,
    const kvs_k_lora_mat_t *mats, const int32_t *rows, const int32_t *task0,
    const int32_t *task_slot, const float *t, uint32_t ld_t)
{
    float                  acc[KVS_K_LORA_GROUP], b;
    int32_t                j0, cnt;
    uint32_t               o, r, k, g;
    kvs_k_lora_mat_t       m;
    const __nv_bfloat16   *bt;

    extern __shared__ float  ts[];    /* [KVS_K_LORA_GROUP][ld_t] */

    m = mats[task_slot[blockIdx.x]];

    /* the same for the whole block: no thread is left at the barrier */
    if (m.rank == 0) {
        return;
    }

    j0 = task0[blockIdx.x];
    cnt = task0[blockIdx.x + 1] - j0;

    for (k = threadIdx.x; k < (uint32_t) cnt * m.rank; k += blockDim.x) {
        g = k / m.rank;
        r = k % m.rank;
        ts[g * ld_t + r] = t[(size_t) (j0 + (int32_t) g) * ld_t + r];
    }

    __syncthreads();

    o = blockIdx.y * blockDim.x + threadIdx.x;
    if (o >= n_out) {
        return;
    }

#pragma unroll
    for (g = 0; g < KVS_K_LORA_GROUP; g++) {
        acc[g] = (int32_t) g < cnt
                 ? y[(size_t) rows[j0 + (int32_t) g] * ldy + o] : 0.0f;
    }

    bt = (const __nv_bfloat16 *) m.bt;

    for (r = 0; r < m.rank; r++) {
        b = __bfloat162float(bt[(size_t) r * n_out + o]);

#pragma unroll
        for (g = 0; g < KVS_K_LORA_GROUP; g++) {
            if ((int32_t) g < cnt) {
                acc[g] = fmaf(ts[g * ld_t + r], b, acc[g]);
            }
        }
    }

#pragma unroll
    for (g = 0; g < KVS_K_LORA_GROUP; g++) {
        if ((int32_t) g < cnt) {
            y[(size_t) rows[j0 + (int32_t) g] * ldy + o] = acc[g];
        }
    }
}


extern "C" int
kvs_k_lora(float *y, size_t ldy, const void *x, int x_dtype, size_t ldx,
    uint32_t n_in, uint32_t n_out, const kvs_k_lora_mat_t *mats,
    const int32_t *words, uint32_t cap, uint32_t n_task, uint32_t rank,
    float *t, cudaStream_t st)
{
    dim3            gs, ge;
    size_t          sh;
    const int32_t  *rows, *task0, *task_slot;

    if (n_task == 0) {
        return 0;
    }

    if (y == NULL || x == NULL || mats == NULL || words == NULL
        || t == NULL || !kvs_k_dtype_ok(x_dtype) || n_in == 0
        || n_out == 0 || ldx < n_in || ldy < n_out || cap == 0
        || n_task > cap || cap > INT32_MAX / 3 || rank == 0
        || rank > KVS_K_LORA_RANK_MAX
        || (n_out + KVS_K_LORA_THREADS - 1) / KVS_K_LORA_THREADS > 65535)
    {
        return KVS_K_EARG;
    }

    rows = words;
    task0 = words + cap;
    task_slot = words + 2 * (size_t) cap + 1;

    gs = dim3(n_task, (rank + KVS_K_LORA_WARPS - 1) / KVS_K_LORA_WARPS);
    ge = dim3(n_task, (n_out + KVS_K_LORA_THREADS - 1) / KVS_K_LORA_THREADS);
    sh = (size_t) KVS_K_LORA_GROUP * rank * sizeof(float);

    if (x_dtype == KVS_K_BF16) {
        kvs_k_lora_shrink_kernel<<<gs, KVS_K_LORA_THREADS, 0, st>>>(
            t, rank, (const __nv_bfloat16 *) x, ldx, n_in, mats, rows, task0,
            task_slot);

    } else if (x_dtype == KVS_K_F16) {
        kvs_k_lora_shrink_kernel<<<gs, KVS_K_LORA_THREADS, 0, st>>>(
            t, rank, (const __half *) x, ldx, n_in, mats, rows, task0,
            task_slot);

    } else {
        kvs_k_lora_shrink_kernel<<<gs, KVS_K_LORA_THREADS, 0, st>>>(
            t, rank, (const float *) x, ldx, n_in, mats, rows, task0,
            task_slot);
    }

    kvs_k_lora_expand_kernel<<<ge, KVS_K_LORA_THREADS, sh, st>>>(
        y, ldy, n_out, mats, rows, task0, task_slot, t, rank);

    return kvs_k_launched();
}
