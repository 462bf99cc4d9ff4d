/*
 * kvs_cuda_backend: the entry point of the CUDA backend's shared object,
 * libkvserve_cuda.so.  The engine process dlopen()s that object only when
 * it selects CUDA and finds this function with dlsym(), by the name in
 * KVS_CUDA_BACKEND_SYM, so that nginx workers and GPU-less hosts never
 * map cudart or cuBLAS.  Its type is kvs_cuda_backend_new_pt.
 *
 * conf->device picks the device; with conf->n_blocks == 0 the KV pool is
 * sized from the device memory free after weights and workspace, times
 * conf->kv_fraction, and the count is left in (*out)->n_blocks for the
 * engine to size its pool from.  On failure *out is NULL, everything is
 * freed, and err names the CUDA or cuBLAS call and its error string (an
 * out-of-memory at load quotes the byte counts).
 */

#ifndef KVS_CUDA_BACKEND_H
#define KVS_CUDA_BACKEND_H

#include "backend/kvs_backend.h"

#define KVS_CUDA_BACKEND_SYM  "kvs_cuda_backend_new"

typedef int (*kvs_cuda_backend_new_pt)(kvs_backend_t **out,
    const kvs_model_t *m, const kvs_backend_conf_t *conf, kvs_err_t *err);

int kvs_cuda_backend_new(kvs_backend_t **out, const kvs_model_t *m,
    const kvs_backend_conf_t *conf, kvs_err_t *err);

#endif /* KVS_CUDA_BACKEND_H */
