/*
 * kvs_k_embed: the embedding lookup, out[i] = table[tok[i]] as F32.
 *
 * Thread layout: one block of 256 threads per token (blockIdx.x = i),
 * striding over the n_embd columns, so a row is read and written
 * coalesced.
 *
 * Invariants: an id outside [0, n_vocab) (padding included) reads
 * nothing and writes a zero row; row offsets are size_t (tok * n_embd
 * passes 2^32 for large vocabularies).
 */

#include <stdint.h>

#include "kvs_k_util.cuh"

#define KVS_K_EMBED_THREADS  256


/* out [n][n_embd] F32 <- table [n_vocab][n_embd] of dtype t */
__global__ void
kvs_k_embed_kernel(float *out, const void *table, int t, const int32_t *tok,
    uint32_t n_embd, uint32_t n_vocab)
{
    int32_t   id;
    size_t    src;
    float    *o;
    uint32_t  j;

    id = tok[blockIdx.x];
    o = out + (size_t) blockIdx.x * n_embd;

    if (id < 0 || (uint32_t) id >= n_vocab) {
        for (j = threadIdx.x; j < n_embd; j += blockDim.x) {
            o[j] = 0.0f;
        }

        return;
    }

    src = (size_t) id * n_embd;

    for (j = threadIdx.x; j < n_embd; j += blockDim.x) {
        o[j] = kvs_k_load(table, t, src + j);
    }
}


extern "C" int
kvs_k_embed(float *out, const void *table, int dtype, const int32_t *tok,
    uint32_t n, uint32_t n_embd, uint32_t n_vocab, cudaStream_t st)
{
    if (out == NULL || table == NULL || tok == NULL || n == 0
        || n > INT32_MAX || n_embd == 0 || n_embd > INT32_MAX
        || n_vocab == 0 || !kvs_k_dtype_ok(dtype))
    {
        return KVS_K_EARG;
    }

    kvs_k_embed_kernel<<<n, KVS_K_EMBED_THREADS, 0, st>>>(out, table, dtype,
                                                          tok, n_embd,
                                                          n_vocab);

    return kvs_k_launched();
}
