/*
 * kvs_cuda: the C interface of the CUDA sources in kernels/ (compiled by
 * nvcc into libkvserve_cuda.a, linked only when KVS_HAVE_CUDA is 1).
 * Functions return 0 on success or a cudaError_t value, and never abort.
 */

#ifndef KVS_CUDA_H
#define KVS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Counts devices; for device 0 fills its name and total memory (bytes)
 * and checks that a kernel runs on it.  On failure, why holds the CUDA
 * call and its error.
 */
int kvs_cuda_probe(int *count, char *name, size_t name_len, uint64_t *mem,
    char *why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif /* KVS_CUDA_H */
