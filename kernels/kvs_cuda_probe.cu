/*
 * kvs_cuda_probe: finds a usable CUDA device: counts devices, reads the
 * chosen device's properties and runs one kernel on it (so that a device
 * the driver lists but cannot run our code on, e.g. a missing SASS/PTX
 * target, is reported rather than found later in the engine).
 *
 * Built twice: into libkvserve_cuda.so with every kernel, and alone into
 * libkvserve_cuda_probe.so (cudart only), which the engine process
 * dlopens first so that a host without a device never maps cuBLAS.
 * Runtime API only: the driver is loaded by cudart at the first call.
 */

#include <stdio.h>

#include <cuda_runtime_api.h>

#include "backend/kvs_cuda.h"

#define KVS_CUDA_PROBE_N  32          /* elements of the self-test */


/* Writes 1..n into out: shape [n], one thread per element. */
__global__ void
kvs_cuda_iota(int *out, int n)
{
    int  i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n) {
        out[i] = i + 1;
    }
}


static int
kvs_cuda_fail(cudaError_t e, const char *call, char *why, size_t why_len)
{
    snprintf(why, why_len, "%s: %s: %s", call, cudaGetErrorName(e),
             cudaGetErrorString(e));
    cudaGetLastError();                          /* clear a sticky error */

    return (int) e;
}


extern "C" int
kvs_cuda_probe_device(int device, int *count, char *name, size_t name_len,
    uint64_t *mem, char *why, size_t why_len)
{
    int             n, host[KVS_CUDA_PROBE_N], i;
    int            *dev;
    cudaError_t     e, e2;
    cudaDeviceProp  prop;

    *count = 0;

    e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        return kvs_cuda_fail(e, "cudaGetDeviceCount", why, why_len);
    }

    *count = n;
    if (n == 0) {
        snprintf(why, why_len, "cudaGetDeviceCount: no devices");
        return (int) cudaErrorNoDevice;
    }

    if (device < 0 || device >= n) {
        snprintf(why, why_len, "device %d: the host has %d device%s "
                 "(0..%d)", device, n, n == 1 ? "" : "s", n - 1);
        return (int) cudaErrorInvalidDevice;
    }

    e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) {
        return kvs_cuda_fail(e, "cudaGetDeviceProperties", why, why_len);
    }

    snprintf(name, name_len, "%s (sm_%d%d)", prop.name, prop.major,
             prop.minor);
    *mem = (uint64_t) prop.totalGlobalMem;

    e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        return kvs_cuda_fail(e, "cudaSetDevice", why, why_len);
    }

    e = cudaMalloc((void **) &dev, sizeof(host));
    if (e != cudaSuccess) {
        return kvs_cuda_fail(e, "cudaMalloc", why, why_len);
    }

    kvs_cuda_iota<<<1, KVS_CUDA_PROBE_N>>>(dev, KVS_CUDA_PROBE_N);
    e = cudaGetLastError();
    if (e == cudaSuccess) {
        e = cudaMemcpy(host, dev, sizeof(host), cudaMemcpyDeviceToHost);
    }

    e2 = cudaFree(dev);
    if (e == cudaSuccess) {
        e = e2;
    }

    if (e != cudaSuccess) {
        return kvs_cuda_fail(e, "kernel self-test", why, why_len);
    }

    for (i = 0; i < KVS_CUDA_PROBE_N; i++) {
        if (host[i] != i + 1) {
            snprintf(why, why_len, "kernel self-test: element %d is %d", i,
                     host[i]);
            return (int) cudaErrorUnknown;
        }
    }

    return 0;
}


extern "C" int
kvs_cuda_probe(int *count, char *name, size_t name_len, uint64_t *mem,
    char *why, size_t why_len)
{
    return kvs_cuda_probe_device(0, count, name, name_len, mem, why,
                                 why_len);
}
