/*
 * kvs_wire_lora: the LORA frame (worker -> engine, version 12): the
 * adapter files of one model in the worker's configuration, in the
 * order of its adapter ids, so that an engine kept across a reload that
 * changed the adapters maps each connection's ids onto the files that
 * connection's configuration names (docs/lora.md, "Reload";
 * docs/engine-process.md, LORA).
 *
 * Invariants: the encoder refuses (KVS_ERANGE) exactly what the decoder
 * refuses (KVS_EFORMAT): a model index past KVS_WIRE_MAX_MODELS, more
 * than KVS_ENGINE_MAX_LORAS adapters, a path empty, longer than
 * KVS_WIRE_MAX_PATH or holding a NUL byte (and the decoder an id other
 * than 0, which the encoder never writes); the decoder checks every
 * length against what is left of the frame before reading, and its
 * paths point into the frame.
 */

#include <string.h>

#include "kvs_wire_impl.h"

#define KVS_WIRE_LORA_HEAD  (4 + 4)       /* model, n */
#define KVS_WIRE_LORA_AD    (8 + 4)       /* epoch, path_len */


static int
kvs_wire_lora_check_head(uint32_t model, uint32_t n, int code,
    kvs_err_t *err)
{
    if (model >= KVS_WIRE_MAX_MODELS) {
        return kvs_err_set(err, code, "LORA: model: %u, not below %d",
                           model, KVS_WIRE_MAX_MODELS);
    }

    if (n > KVS_ENGINE_MAX_LORAS) {
        return kvs_err_set(err, code, "LORA: n: %u adapters, at most %d",
                           n, KVS_ENGINE_MAX_LORAS);
    }

    return KVS_OK;
}


static int
kvs_wire_lora_check_path(const char *path, uint32_t len, uint32_t i,
    int code, kvs_err_t *err)
{
    if (len == 0 || len > KVS_WIRE_MAX_PATH) {
        return kvs_err_set(err, code, "LORA: adapter %u: path of %u bytes, "
                           "not 1..%d", i + 1, len, KVS_WIRE_MAX_PATH);
    }

    if (memchr(path, '\0', len) != NULL) {
        return kvs_err_set(err, code, "LORA: adapter %u: path contains a "
                           "NUL byte", i + 1);
    }

    return KVS_OK;
}


int
kvs_wire_enc_lora(kvs_buf_t *b, const kvs_wire_lora_t *m, kvs_err_t *err)
{
    int       rc;
    size_t    len;
    uint8_t  *p;
    uint32_t  i;

    rc = kvs_wire_lora_check_head(m->model, m->n, KVS_ERANGE, err);
    if (rc != KVS_OK) {
        return rc;
    }

    len = KVS_WIRE_HDR + KVS_WIRE_LORA_HEAD;

    for (i = 0; i < m->n; i++) {
        rc = kvs_wire_lora_check_path(m->ad[i].path, m->ad[i].path_len, i,
                                      KVS_ERANGE, err);
        if (rc != KVS_OK) {
            return rc;
        }

        len += KVS_WIRE_LORA_AD + m->ad[i].path_len;
    }

    /* at most 256 x (12 + 4095) bytes: within a frame */
    rc = kvs_wire_begin(b, len, KVS_WIRE_LORA, 0, &p, err);
    if (rc != KVS_OK) {
        return rc;
    }

    p = kvs_le_put32(p, m->model);
    p = kvs_le_put32(p, m->n);

    for (i = 0; i < m->n; i++) {
        p = kvs_le_put64(p, m->ad[i].epoch);
        p = kvs_le_put32(p, m->ad[i].path_len);
        p = kvs_wire_putb(p, m->ad[i].path, m->ad[i].path_len);
    }

    kvs_wire_commit(b, p);

    return KVS_OK;
}


int
kvs_wire_dec_lora(const uint8_t *f, size_t f_len, kvs_wire_lora_t *m,
    kvs_err_t *err)
{
    uint32_t            i;
    kvs_wire_rd_t       rd;
    kvs_wire_lora_ad_t *ad;

    m->model = 0;
    m->n = 0;

    if (kvs_wire_start(&rd, f, f_len, KVS_WIRE_LORA, err) != KVS_OK
        || kvs_wire_u32(&rd, "model", &m->model) != KVS_OK
        || kvs_wire_u32(&rd, "n", &m->n) != KVS_OK)
    {
        m->n = 0;
        return KVS_EFORMAT;
    }

    if (kvs_le_get64(f + 8) != 0) {
        return kvs_err_set(err, KVS_EFORMAT, "LORA: id: not 0");
    }

    if (kvs_wire_lora_check_head(m->model, m->n, KVS_EFORMAT, err)
        != KVS_OK
        || kvs_wire_need_n(&rd, m->n, KVS_WIRE_LORA_AD, "adapters")
           != KVS_OK)
    {
        m->n = 0;
        return KVS_EFORMAT;
    }

    for (i = 0; i < m->n; i++) {
        ad = &m->ad[i];

        if (kvs_wire_u64(&rd, "epoch", &ad->epoch) != KVS_OK
            || kvs_wire_u32(&rd, "path_len", &ad->path_len) != KVS_OK
            || kvs_wire_need(&rd, ad->path_len, "path") != KVS_OK
            || kvs_wire_lora_check_path((const char *) rd.p, ad->path_len,
                                        i, KVS_EFORMAT, err) != KVS_OK)
        {
            m->n = 0;
            return KVS_EFORMAT;
        }

        ad->path = (const char *) kvs_wire_take(&rd, "path", ad->path_len);
    }

    if (kvs_wire_end(&rd) != KVS_OK) {
        m->n = 0;
        return KVS_EFORMAT;
    }

    return KVS_OK;
}
