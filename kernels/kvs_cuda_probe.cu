/*
 * kvs_cuda_probe: finds a usable CUDA device: counts devices, reads device
 * 0's properties and runs one kernel on it (so that a device the driver
 * lists but cannot run our code on, e.g. a missing SASS/PTX target, is
 * reported rather than found later in the engine).
 */

#include <stdio.h>

#include <cuda_runtime_api.h>

#include "../src/backend/kvs_cuda.h"


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
kvs_cuda_probe(int *count, char *name, size_t name_len, uint64_t *mem,
    char *why, size_t why_len)
{
    int             n, host[32], i;
    int            *dev;
    cudaError_t     e;
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

    e = cudaGetDeviceProperties(&prop, 0);
    if (e != cudaSuccess) {
        return kvs_cuda_fail(e, "cudaGetDeviceProperties", why, why_len);
    }

    snprintf(name, name_len, "%s (sm_%d%d)", prop.name, prop.major,
             prop.minor);
    *mem = (uint64_t) prop.totalGlobalMem;

    e = cudaMalloc((void **) &dev, sizeof(host));
    if (e != cudaSuccess) {
        return kvs_cuda_fail(e, "cudaMalloc", why, why_len);
    }

    kvs_cuda_iota<<<1, 32>>>(dev, 32);
    e = cudaGetLastError();
    if (e == cudaSuccess) {
        e = cudaMemcpy(host, dev, sizeof(host), cudaMemcpyDeviceToHost);
    }
    cudaFree(dev);

    if (e != cudaSuccess) {
        return kvs_cuda_fail(e, "kernel launch", why, why_len);
    }

    for (i = 0; i < 32; i++) {
        if (host[i] != i + 1) {
            snprintf(why, why_len, "kernel self-test: element %d is %d", i,
                     host[i]);
            return (int) cudaErrorUnknown;
        }
    }

    return 0;
}
