/*
 * kvs_cuda: the C interface of the CUDA probe (kernels/kvs_cuda_probe.cu).
 * It lives in the shared objects libkvserve_cuda_probe.so and
 * libkvserve_cuda.so, never in libkvserve.a: kvs_backend.c reaches it
 * through dlopen/dlsym (KVS_CUDA_PROBE_SYM), in the engine process only.
 * Functions return 0 on success or a cudaError_t value, and never abort.
 */

#ifndef KVS_CUDA_H
#define KVS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_CUDA_PROBE_SYM        "kvs_cuda_probe_device"
#define KVS_CUDA_BACKEND_NEW_SYM  "kvs_cuda_backend_new"

/*
 * Counts devices; for device (an ordinal) fills its name and total memory
 * (bytes), makes it current and checks that a kernel runs on it.  On
 * failure, why holds the CUDA call and its error.
 */
int kvs_cuda_probe_device(int device, int *count, char *name,
    size_t name_len, uint64_t *mem, char *why, size_t why_len);

typedef int (*kvs_cuda_probe_device_pt)(int device, int *count, char *name,
    size_t name_len, uint64_t *mem, char *why, size_t why_len);

/* The same for device 0. */
int kvs_cuda_probe(int *count, char *name, size_t name_len, uint64_t *mem,
    char *why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif /* KVS_CUDA_H */
