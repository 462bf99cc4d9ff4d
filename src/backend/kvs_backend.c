/*
 * kvs_backend: chooses and makes the backend (see kvs_backend.h): the
 * CPU one is linked in; the CUDA one is reached through dlopen.
 *
 * Invariants: each shared object is dlopened at most once per process
 * and never closed (cudart keeps process-wide state and registered
 * kernels that a dlclose would pull from under it), under kvs_be_lock;
 * a probe that finds no device has loaded only libkvserve_cuda_probe.so
 * (cudart), never libkvserve_cuda.so (cuBLAS); nothing here is called
 * by nginx's master or workers, only by the engine process and the CLI.
 */

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_backend.h"
#include "kvs_cuda.h"

#define KVS_BACKEND_PROBE_SO  "libkvserve_cuda_probe.so"

typedef int (*kvs_backend_new_pt)(kvs_backend_t **out,
    const kvs_model_t *m, const kvs_backend_conf_t *conf, kvs_err_t *err);


static pthread_mutex_t  kvs_be_lock = PTHREAD_MUTEX_INITIALIZER;
static void            *kvs_be_probe_so;   /* the probe's object */
static void            *kvs_be_cuda_so;    /* libkvserve_cuda.so */


/* The CUDA backend's shared object: the environment's, else the one this
 * library was built beside; NULL when built without CUDA. */
static const char *
kvs_backend_so_path(void)
{
    const char  *p;

    p = getenv("KVSERVE_CUDA_SO");
    if (p != NULL && p[0] != '\0') {
        return p;
    }

#if KVS_HAVE_CUDA && defined(KVS_CUDA_SO)
    return KVS_CUDA_SO;
#else
    return NULL;
#endif
}


/* dlopen, with the reason in why on failure (dlerror's own leading
 * "path: " dropped: the message names the path once). */
static void *
kvs_backend_dlopen(const char *path, char *why, size_t why_len)
{
    size_t       n;
    void        *h;
    const char  *msg;

    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h != NULL) {
        return h;
    }

    msg = dlerror();
    if (msg == NULL) {
        msg = "unknown error";
    }

    n = strlen(path);
    if (strncmp(msg, path, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ') {
        msg += n + 2;
    }

    snprintf(why, why_len, "cannot load %s: %s", path, msg);

    return NULL;
}


/* The probe function: from libkvserve_cuda_probe.so beside path when it
 * is there (cudart alone), else from path itself.  Under kvs_be_lock. */
static kvs_cuda_probe_device_pt
kvs_backend_probe_fn(const char *path, char *why, size_t why_len)
{
    char                      probe[4096];
    const char               *slash;
    kvs_cuda_probe_device_pt  fn;

    if (kvs_be_probe_so == NULL) {
        slash = strrchr(path, '/');

        if (slash != NULL
            && snprintf(probe, sizeof(probe), "%.*s/%s",
                        (int) (slash - path), path, KVS_BACKEND_PROBE_SO)
               < (int) sizeof(probe))
        {
            kvs_be_probe_so = dlopen(probe, RTLD_NOW | RTLD_LOCAL);
        }

        if (kvs_be_probe_so == NULL) {
            /* a custom KVSERVE_CUDA_SO without its probe beside it */
            if (kvs_be_cuda_so == NULL) {
                kvs_be_cuda_so = kvs_backend_dlopen(path, why, why_len);
                if (kvs_be_cuda_so == NULL) {
                    return NULL;
                }
            }

            kvs_be_probe_so = kvs_be_cuda_so;
        }
    }

    fn = (kvs_cuda_probe_device_pt) dlsym(kvs_be_probe_so,
                                          KVS_CUDA_PROBE_SYM);
    if (fn == NULL) {
        snprintf(why, why_len, "%s has no " KVS_CUDA_PROBE_SYM, path);
    }

    return fn;
}


void
kvs_backend_probe(kvs_backend_info_t *info, int device)
{
    int                       rc;
    const char               *path;
    kvs_cuda_probe_device_pt  probe;

    memset(info, 0, sizeof(*info));
    info->kind = KVS_BACKEND_CPU;
    info->ordinal = device;

    path = kvs_backend_so_path();
    if (path == NULL) {
        snprintf(info->reason, sizeof(info->reason),
                 "built without CUDA (KVSERVE_CUDA=0)");
        return;
    }

    info->cuda_built = 1;

    pthread_mutex_lock(&kvs_be_lock);

    probe = kvs_backend_probe_fn(path, info->reason, sizeof(info->reason));

    if (probe != NULL) {
        rc = probe(device, &info->n_devices, info->device,
                   sizeof(info->device), &info->device_mem, info->reason,
                   sizeof(info->reason));
        if (rc == 0) {
            info->kind = KVS_BACKEND_CUDA;
            snprintf(info->reason, sizeof(info->reason),
                     "device %d answered", device);
        }
    }

    pthread_mutex_unlock(&kvs_be_lock);
}


/* kvs_cuda_backend_new from libkvserve_cuda.so, loading it once. */
static kvs_backend_new_pt
kvs_backend_cuda_fn(char *why, size_t why_len)
{
    void               *sym;
    const char         *path;
    kvs_backend_new_pt  fn;

    path = kvs_backend_so_path();
    if (path == NULL) {
        snprintf(why, why_len, "built without CUDA (KVSERVE_CUDA=0)");
        return NULL;
    }

    pthread_mutex_lock(&kvs_be_lock);

    if (kvs_be_cuda_so == NULL) {
        kvs_be_cuda_so = kvs_backend_dlopen(path, why, why_len);
    }

    fn = NULL;

    if (kvs_be_cuda_so != NULL) {
        sym = dlsym(kvs_be_cuda_so, KVS_CUDA_BACKEND_NEW_SYM);
        if (sym == NULL) {
            snprintf(why, why_len, "%s has no " KVS_CUDA_BACKEND_NEW_SYM,
                     path);
        }

        fn = (kvs_backend_new_pt) sym;
    }

    pthread_mutex_unlock(&kvs_be_lock);

    return fn;
}


int
kvs_backend_new(kvs_backend_t **out, const kvs_model_t *m,
    const kvs_backend_conf_t *conf, kvs_backend_info_t *info,
    kvs_err_t *err)
{
    int                 rc;
    char                why[256];
    kvs_backend_conf_t  cc;
    kvs_backend_info_t  local;
    kvs_backend_new_pt  fn;

    *out = NULL;

    if (info == NULL) {
        info = &local;
    }

    switch (conf->kind) {

    case KVS_BACKEND_CPU:
        memset(info, 0, sizeof(*info));
        info->kind = KVS_BACKEND_CPU;
        snprintf(info->reason, sizeof(info->reason), "asked for");
        return kvs_backend_cpu_new(out, m, conf, err);

    case KVS_BACKEND_CUDA:
    case KVS_BACKEND_AUTO:
        break;

    default:
        return kvs_err_set(err, KVS_EINVAL, "backend: unknown kind %d",
                           (int) conf->kind);
    }

    kvs_backend_probe(info, conf->device);

    if (info->kind == KVS_BACKEND_CUDA) {
        fn = kvs_backend_cuda_fn(why, sizeof(why));

        if (fn != NULL) {
            /* a fraction of the device's memory replaces the CPU's
             * count of blocks: the backend sizes the pool */
            cc = *conf;
            if (cc.kv_fraction > 0.0) {
                cc.n_blocks = 0;
            }

            rc = fn(out, m, &cc, err);
            if (rc == KVS_OK) {
                snprintf(info->reason, sizeof(info->reason), "%s",
                         conf->kind == KVS_BACKEND_AUTO
                         ? "auto: a device answered" : "asked for");
                return KVS_OK;
            }

            *out = NULL;

            if (rc != KVS_EUNSUPPORTED || conf->kind != KVS_BACKEND_AUTO) {
                kvs_err_prefix(err, "backend cuda (device %d)",
                               conf->device);
                return rc;
            }

            /* a model the device does not compute (a phi3 window):
             * auto takes the CPU, saying why */
            snprintf(why, sizeof(why), "%.200s", err->msg);
            kvs_err_clear(err);
        }

        /* a device, but no backend to drive it (or this model) */
        info->kind = KVS_BACKEND_CPU;
        snprintf(info->reason, sizeof(info->reason), "%s", why);
    }

    if (conf->kind == KVS_BACKEND_CUDA) {
        return kvs_err_set(err, KVS_EIO, "backend cuda (device %d): %s",
                           conf->device, info->reason);
    }

    memmove(info->reason + 6, info->reason, sizeof(info->reason) - 6);
    memcpy(info->reason, "auto: ", 6);
    info->reason[sizeof(info->reason) - 1] = '\0';

    return kvs_backend_cpu_new(out, m, conf, err);
}


int
kvs_backend_parse(const char *s, size_t len, kvs_backend_kind_t *kind)
{
    if (len == 3 && memcmp(s, "cpu", 3) == 0) {
        *kind = KVS_BACKEND_CPU;

    } else if (len == 4 && memcmp(s, "cuda", 4) == 0) {
        *kind = KVS_BACKEND_CUDA;

    } else if (len == 4 && memcmp(s, "auto", 4) == 0) {
        *kind = KVS_BACKEND_AUTO;

    } else {
        return KVS_EINVAL;
    }

    return KVS_OK;
}


const char *
kvs_backend_name(kvs_backend_kind_t kind)
{
    switch (kind) {
    case KVS_BACKEND_CUDA:
        return "CUDA";
    case KVS_BACKEND_AUTO:
        return "auto";
    default:
        return "CPU";
    }
}


const char *
kvs_backend_kv_name(uint32_t dtype)
{
    return kvs_kv_dtype_name(dtype);
}


uint32_t
kvs_backend_kv_size(uint32_t dtype)
{
    return kvs_kv_dtype_elem(dtype);
}
