/*
 * kvs_k_softcap: gemma's element-wise maps of F32 activations, in place:
 * kvs_k_scale (x := x * s, the embeddings times sqrt(n_embd)) and
 * kvs_k_softcap (x := cap tanh(x / cap), the final logits' soft cap).
 * Both are one operation over a flat array, so they share a file and a
 * grid rule.
 *
 * Thread layout: blocks of 256 threads, a grid-stride loop over n
 * elements; the grid is min(ceil(n / 256), 65535) blocks, a function of
 * n only (capturable).
 *
 * Invariants: each element is computed as the CPU backend's loops do
 * (kvs_cpu_forward: x[z] *= escale; cap * tanhf(x[z] / cap)), in F32;
 * offsets are size_t.
 */

#include <math.h>
#include <stdint.h>

#include "kvs_k_util.cuh"

#define KVS_K_MAP_THREADS  256
#define KVS_K_MAP_GRID     65535u


/* x [n] := x * s */
__global__ void
kvs_k_scale_kernel(float *x, size_t n, float s)
{
    size_t  i;

    for (i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t) gridDim.x * blockDim.x)
    {
        x[i] *= s;
    }
}


/* x [n] := cap tanh(x / cap) */
__global__ void
kvs_k_softcap_kernel(float *x, size_t n, float cap)
{
    size_t  i;

    for (i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t) gridDim.x * blockDim.x)
    {
        x[i] = cap * tanhf(x[i] / cap);
    }
}


static unsigned
kvs_k_map_grid(size_t n)
{
    size_t  g;

    g = (n + KVS_K_MAP_THREADS - 1) / KVS_K_MAP_THREADS;

    return g < KVS_K_MAP_GRID ? (unsigned) g : KVS_K_MAP_GRID;
}


extern "C" int
kvs_k_scale(float *x, size_t n, float s, cudaStream_t st)
{
    if (x == NULL || n == 0 || !isfinite(s)) {
        return KVS_K_EARG;
    }

    kvs_k_scale_kernel<<<kvs_k_map_grid(n), KVS_K_MAP_THREADS, 0, st>>>(
        x, n, s);

    return kvs_k_launched();
}


extern "C" int
kvs_k_softcap(float *x, size_t n, float cap, cudaStream_t st)
{
    if (x == NULL || n == 0 || !(cap > 0.0f) || isinf(cap)) {
        return KVS_K_EARG;
    }

    kvs_k_softcap_kernel<<<kvs_k_map_grid(n), KVS_K_MAP_THREADS, 0, st>>>(
        x, n, cap);

    return kvs_k_launched();
}
