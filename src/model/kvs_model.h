/*
 * kvs_model: one model file opened for serving: its GGUF mapping, its
 * hyper-parameters, and the identity of the file it came from.
 *
 * kvs_model_open() succeeds only for a file whose header is valid, whose
 * architecture we support, and whose tensors are all present with the
 * shapes the hyper-parameters imply and of types kvs_quant's table
 * computes with; so a model that opens can be sized, listed and loaded
 * by any backend without further checks.  The model owns the mapping; it is
 * read-only, so processes forked after the open share its pages.
 */

#ifndef KVS_MODEL_H
#define KVS_MODEL_H

#include <stdint.h>

#include "base/kvs_err.h"
#include "kvs_gguf.h"
#include "kvs_hparams.h"

typedef struct {
    kvs_gguf_t     *gguf;
    kvs_hparams_t   hp;
    uint64_t        file_size;        /* bytes */
    int64_t         mtime;            /* unix seconds */
    int64_t         mtime_ns;         /* unix nanoseconds */
    uint64_t        dev;              /* st_dev, st_ino: file identity */
    uint64_t        ino;
} kvs_model_t;

int kvs_model_open(kvs_model_t **out, const char *path, kvs_err_t *err);
void kvs_model_close(kvs_model_t *m);

/*
 * m's tensor name, checked against the [ne0, ne1] shape a backend
 * computes with (ne1 == 0: a vector); who ("cpu backend") opens the
 * errors: KVS_ENOTFOUND for a missing one, KVS_EFORMAT for another
 * shape.  A missing optional tensor is KVS_OK with *out NULL.
 */
int kvs_model_tensor(const kvs_model_t *m, const char *who, const char *name,
    uint64_t ne0, uint64_t ne1, int optional, const kvs_gguf_tensor_t **out,
    kvs_err_t *err);

/* Checks tensor presence and shapes against hp (used by kvs_model_open). */
int kvs_model_check_tensors(const kvs_gguf_t *g, const kvs_hparams_t *hp,
    kvs_err_t *err);

#endif /* KVS_MODEL_H */
