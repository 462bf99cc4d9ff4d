/*
 * kvs_backend: which compute backend this host can use.
 *
 * kvs_backend_probe() never fails: when the library was built without
 * CUDA, or no usable CUDA device answers, it reports the CPU backend and
 * says why, so the caller can log one clear line and keep serving.  It
 * touches the CUDA runtime, so it must run in the process that will use
 * the device (a worker or the engine), never in nginx's master before
 * fork.
 */

#ifndef KVS_BACKEND_H
#define KVS_BACKEND_H

#include <stdint.h>

typedef enum {
    KVS_BACKEND_CPU = 0,
    KVS_BACKEND_CUDA
} kvs_backend_kind_t;

typedef struct {
    kvs_backend_kind_t  kind;
    int                 cuda_built;    /* compiled with the CUDA sources */
    int                 n_devices;
    char                device[128];   /* device 0's name, when CUDA */
    uint64_t            device_mem;    /* its total memory, bytes */
    char                reason[256];   /* why the CPU, when it is */
} kvs_backend_info_t;

void kvs_backend_probe(kvs_backend_info_t *info);

const char *kvs_backend_name(kvs_backend_kind_t kind);

#endif /* KVS_BACKEND_H */
