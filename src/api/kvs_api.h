/*
 * kvs_api: the OpenAI-compatible surface as pure functions on buffers:
 * routing of a request path, the JSON bodies of /v1/models and of error
 * objects.  No I/O and no nginx types, so everything here is unit-tested
 * (and fuzzed) on its own; the nginx glue maps kvs_api_status_t to HTTP.
 *
 * Output is appended to a caller-owned kvs_buf_t; on failure the buffer
 * may hold a partial body and the caller discards it.
 */

#ifndef KVS_API_H
#define KVS_API_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_buf.h"
#include "base/kvs_err.h"
#include "model/kvs_hparams.h"

typedef enum {
    KVS_ROUTE_UNKNOWN = 0,
    KVS_ROUTE_MODELS,                 /* /v1/models */
    KVS_ROUTE_MODEL                   /* /v1/models/{id} */
} kvs_route_kind_t;

typedef struct {
    kvs_route_kind_t  kind;
    const char       *id;             /* into the path; KVS_ROUTE_MODEL */
    size_t            id_len;
} kvs_route_t;

/*
 * Classifies a decoded request path: the API path starts at the first
 * "/v1/" in it (so the location may add a prefix, e.g. /api/v1/models),
 * and a model id is everything after "/v1/models/", slashes included.
 */
void kvs_api_route(const char *path, size_t len, kvs_route_t *route);

/* A model as /v1/models lists it. */
typedef struct {
    const char           *id;
    size_t                id_len;
    int64_t               created;    /* unix seconds */
    uint64_t              file_size;  /* bytes */
    const kvs_hparams_t  *hp;
    uint64_t              kv_bytes_per_token;  /* K and V of every layer,
                                                  as the serving cache
                                                  stores them */
    const char           *kv_dtype;   /* that cache's element: "f32",
                                         "bf16" */
    const char           *backend;    /* computing it ("cpu", "cuda"),
                                         or NULL: unknown yet, no
                                         "weights" object */
    uint64_t              weights_mapped;   /* its weights' bytes in */
    uint64_t              weights_owned;    /* the file's mapping, in */
    uint64_t              weights_device;   /* copies, on the device */
    int                   has_availability; /* 1: "available" and */
    int                   available;        /* "unavailable_reason" */
    const char           *reason;           /* are listed; reason */
    size_t                reason_len;       /* [reason_len] when not
                                               available */
} kvs_api_model_t;

/* {"object":"list","data":[...]} */
int kvs_api_models_json(const kvs_api_model_t *models, size_t n,
    kvs_buf_t *out, kvs_err_t *err);

/* One model object. */
int kvs_api_model_json(const kvs_api_model_t *m, kvs_buf_t *out,
    kvs_err_t *err);

/*
 * {"error":{"message":...,"type":...,"param":...,"code":...}}; param and
 * code may be NULL (JSON null).  The message is taken as bytes of UTF-8;
 * invalid sequences are replaced so the body is always valid JSON.
 */
int kvs_api_error_json(kvs_buf_t *out, const char *message,
    const char *type, const char *param, const char *code);

/* The 404 body for an unknown model id (which may be any bytes). */
int kvs_api_model_not_found_json(kvs_buf_t *out, const char *id,
    size_t id_len);

#endif /* KVS_API_H */
