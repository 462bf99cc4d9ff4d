/*
 * kvs_api_models: JSON bodies of /v1/models and of OpenAI error objects,
 * built with jansson (which escapes and validates UTF-8 for us).
 */

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_utf8.h"
#include "kvs_api.h"


static int
kvs_api_dump(json_t *root, kvs_buf_t *out, kvs_err_t *err)
{
    int    rc;
    char  *text;

    if (root == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "building JSON failed");
    }

    text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);

    if (text == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "serializing JSON failed");
    }

    rc = kvs_buf_append(out, text, strlen(text));
    free(text);

    if (rc != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    return KVS_OK;
}


/* A JSON string of arbitrary bytes: invalid UTF-8 becomes U+FFFD. */
static json_t *
kvs_api_string(const char *s, size_t len)
{
    json_t         *j;
    size_t          i, n;
    uint32_t        cp;
    kvs_buf_t       b;
    const uint8_t  *u;

    u = (const uint8_t *) s;

    if (kvs_utf8_valid(u, len)) {
        return json_stringn(s, len);
    }

    memset(&b, 0, sizeof(b));

    for (i = 0; i < len; i += n) {
        n = kvs_utf8_next(u + i, len - i, &cp);

        if ((n == 0 && kvs_buf_append(&b, "\xef\xbf\xbd", 3) != KVS_OK)
            || (n != 0 && kvs_buf_append(&b, u + i, n) != KVS_OK))
        {
            kvs_buf_free(&b);
            return NULL;
        }

        n = n ? n : 1;
    }

    j = json_stringn((const char *) b.data, b.len);
    kvs_buf_free(&b);

    return j;
}


static json_t *
kvs_api_model_obj(const kvs_api_model_t *m)
{
    json_t               *j, *w;
    const kvs_hparams_t  *hp;

    hp = m->hp;

    j = json_pack("{s:o,s:s,s:I,s:s,s:{s:s,s:i,s:I,s:I,s:s,s:i,s:i,s:i,"
                     "s:i,s:i,s:i,s:I}}",
                     "id", kvs_api_string(m->id, m->id_len),
                     "object", "model",
                     "created", (json_int_t) m->created,
                     "owned_by", "kvserve",
                     "kvserve",
                     "architecture", hp->arch,
                     "context_length", (int) hp->n_ctx_train,
                     "parameters", (json_int_t) hp->n_params,
                     "kv_bytes_per_token",
                     (json_int_t) m->kv_bytes_per_token,
                     "kv_dtype", m->kv_dtype,
                     "layers", (int) hp->n_layer,
                     "heads", (int) hp->n_head,
                     "kv_heads", (int) hp->n_head_kv,
                     "head_dim", (int) hp->head_dim_k,
                     "embedding_length", (int) hp->n_embd,
                     "vocab_size", (int) hp->n_vocab,
                     "file_bytes", (json_int_t) m->file_size);

    if (j != NULL && m->has_availability
        && (json_object_set_new(json_object_get(j, "kvserve"), "available",
                                json_boolean(m->available)) != 0
            || json_object_set_new(json_object_get(j, "kvserve"),
                                   "unavailable_reason",
                                   m->available ? json_null()
                                   : kvs_api_string(m->reason,
                                                    m->reason_len))
               != 0))
    {
        json_decref(j);
        return NULL;
    }

    if (j == NULL || m->backend == NULL) {
        return j;
    }

    w = json_pack("{s:s,s:I,s:I,s:I}", "backend", m->backend,
                  "mapped_bytes", (json_int_t) m->weights_mapped,
                  "owned_bytes", (json_int_t) m->weights_owned,
                  "device_bytes", (json_int_t) m->weights_device);

    if (json_object_set_new(json_object_get(j, "kvserve"), "weights", w)
        != 0)
    {
        json_decref(j);
        return NULL;
    }

    return j;
}


int
kvs_api_models_json(const kvs_api_model_t *models, size_t n, kvs_buf_t *out,
    kvs_err_t *err)
{
    size_t   i;
    json_t  *data;

    data = json_array();
    if (data == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "building JSON failed");
    }

    for (i = 0; i < n; i++) {
        if (json_array_append_new(data, kvs_api_model_obj(&models[i])) != 0)
        {
            json_decref(data);
            return kvs_err_set(err, KVS_ENOMEM, "building JSON failed");
        }
    }

    return kvs_api_dump(json_pack("{s:s,s:o}", "object", "list", "data",
                                  data), out, err);
}


int
kvs_api_model_json(const kvs_api_model_t *m, kvs_buf_t *out, kvs_err_t *err)
{
    return kvs_api_dump(kvs_api_model_obj(m), out, err);
}


static int
kvs_api_error_n(kvs_buf_t *out, const char *message, size_t len,
    const char *type, const char *param, const char *code)
{
    return kvs_api_dump(json_pack("{s:{s:o,s:s,s:o,s:o}}", "error",
                                  "message", kvs_api_string(message, len),
                                  "type", type,
                                  "param", param ? json_string(param)
                                                 : json_null(),
                                  "code", code ? json_string(code)
                                               : json_null()),
                        out, NULL);
}


int
kvs_api_error_json(kvs_buf_t *out, const char *message, const char *type,
    const char *param, const char *code)
{
    return kvs_api_error_n(out, message, strlen(message), type, param, code);
}


int
kvs_api_model_not_found_json(kvs_buf_t *out, const char *id, size_t id_len)
{
    int        rc;
    kvs_buf_t  msg;

    static const char  pre[] = "The model `";
    static const char  post[] = "` does not exist or you do not have "
                                "access to it.";

    memset(&msg, 0, sizeof(msg));

    rc = KVS_ENOMEM;

    if (kvs_buf_append(&msg, pre, sizeof(pre) - 1) == KVS_OK
        && kvs_buf_append(&msg, id, id_len) == KVS_OK
        && kvs_buf_append(&msg, post, sizeof(post) - 1) == KVS_OK)
    {
        rc = kvs_api_error_n(out, (const char *) msg.data, msg.len,
                             "invalid_request_error", NULL,
                             "model_not_found");
    }

    kvs_buf_free(&msg);

    return rc;
}
