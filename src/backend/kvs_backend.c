/*
 * kvs_backend: chooses CUDA when it was built in and a device answers,
 * the CPU otherwise (see kvs_backend.h).
 */

#include <stdio.h>
#include <string.h>

#include "kvs_backend.h"

#if KVS_HAVE_CUDA
#include "kvs_cuda.h"
#endif


void
kvs_backend_probe(kvs_backend_info_t *info)
{
    memset(info, 0, sizeof(*info));
    info->kind = KVS_BACKEND_CPU;

#if KVS_HAVE_CUDA
    info->cuda_built = 1;

    if (kvs_cuda_probe(&info->n_devices, info->device, sizeof(info->device),
                       &info->device_mem, info->reason,
                       sizeof(info->reason)) == 0)
    {
        info->kind = KVS_BACKEND_CUDA;
    }
#else
    snprintf(info->reason, sizeof(info->reason),
             "built without CUDA (KVSERVE_CUDA=0)");
#endif
}


const char *
kvs_backend_name(kvs_backend_kind_t kind)
{
    return kind == KVS_BACKEND_CUDA ? "CUDA" : "CPU";
}
