/*
 * kvs_gguf_write: builds a GGUF v2/v3 file in memory (metadata and tensor
 * infos) and streams tensor data to disk.
 *
 * Invariants: metadata is encoded as it is given, so the bytes written are
 * exactly the calls made; the writer tracks which value it expects next
 * (a key's value, or the remaining elements of each open array) and the
 * first call that breaks that sequence, or fails, is sticky: later calls
 * do nothing and kvs_gguf_writer_write() reports it without writing.  The
 * file is written to "<path>.tmp" and renamed, so a reader never sees half
 * a file under the final name.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_buf.h"
#include "kvs_gguf.h"
#include "kvs_ggml_type.h"


typedef struct {
    char               name[KVS_GGUF_MAX_NAME + 1];
    uint32_t           type;
    uint32_t           n_dims;
    uint64_t           ne[KVS_GGUF_MAX_DIMS];
    uint64_t           nbytes;
    uint64_t           offset;         /* in the data section */
    const void        *data;           /* NULL: ask the fill callback */
} kvs_gguf_wtensor_t;


struct kvs_gguf_writer_s {
    uint32_t            version;
    uint32_t            alignment;

    kvs_buf_t           meta;          /* encoded key/value pairs */
    uint64_t            n_kv;

    int                 want_value;    /* a key awaits its value */
    kvs_gguf_vtype_t    want_type;
    int                 key_is_alignment;

    struct {
        kvs_gguf_vtype_t  elem;
        uint64_t          left;
    }                   open[KVS_GGUF_MAX_DEPTH];
    int                 depth;         /* open arrays */

    kvs_gguf_wtensor_t *tensors;
    uint64_t            n_tensors;
    uint64_t            cap_tensors;

    int                 failed;
    kvs_err_t           err;
};


static int
kvs_gguf_w_fail(kvs_gguf_writer_t *w, int code, const char *what)
{
    if (!w->failed) {
        w->failed = 1;
        kvs_err_set(&w->err, code, "gguf writer: %s", what);
    }

    return w->err.code;
}


int
kvs_gguf_writer_new(kvs_gguf_writer_t **out, uint32_t version,
    kvs_err_t *err)
{
    kvs_gguf_writer_t  *w;

    *out = NULL;

    if (version != 2 && version != 3) {
        return kvs_err_set(err, KVS_EINVAL,
                           "gguf writer: version %u (only 2 and 3)", version);
    }

    w = calloc(1, sizeof(kvs_gguf_writer_t));
    if (w == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    w->version = version;
    w->alignment = KVS_GGUF_DEFAULT_ALIGNMENT;
    *out = w;

    return KVS_OK;
}


void
kvs_gguf_writer_free(kvs_gguf_writer_t *w)
{
    if (w != NULL) {
        kvs_buf_free(&w->meta);
        free(w->tensors);
        free(w);
    }
}


static int
kvs_gguf_w_bytes(kvs_gguf_writer_t *w, const void *p, size_t n)
{
    if (kvs_buf_append(&w->meta, p, n) != KVS_OK) {
        return kvs_gguf_w_fail(w, KVS_ENOMEM, "out of memory");
    }

    return KVS_OK;
}


/* Accounts for one value of `type` about to be encoded. */
static int
kvs_gguf_w_take(kvs_gguf_writer_t *w, kvs_gguf_vtype_t type, uint64_t n)
{
    if (w->failed) {
        return w->err.code;
    }

    if (w->depth > 0) {
        if (w->open[w->depth - 1].elem != type) {
            return kvs_gguf_w_fail(w, KVS_EINVAL,
                                   "array element of the wrong type");
        }
        if (w->open[w->depth - 1].left < n) {
            return kvs_gguf_w_fail(w, KVS_EINVAL,
                                   "more array elements than declared");
        }
        w->open[w->depth - 1].left -= n;

    } else if (!w->want_value || w->want_type != type || n != 1) {
        return kvs_gguf_w_fail(w, KVS_EINVAL,
                               "value without a key, or of another type "
                               "than the key declared");
    } else {
        w->want_value = 0;
    }

    return KVS_OK;
}


/* Closes every array whose elements are all written. */
static void
kvs_gguf_w_close_arrays(kvs_gguf_writer_t *w)
{
    while (w->depth > 0 && w->open[w->depth - 1].left == 0) {
        w->depth--;
    }
}


int
kvs_gguf_w_key(kvs_gguf_writer_t *w, const char *key, kvs_gguf_vtype_t type)
{
    uint64_t  len;
    uint32_t  t;

    if (w->failed) {
        return w->err.code;
    }

    if (w->want_value || w->depth > 0) {
        return kvs_gguf_w_fail(w, KVS_EINVAL,
                               "key before the previous value is complete");
    }

    len = strlen(key);
    if (len == 0 || type >= KVS_GGUF_VTYPE_END) {
        return kvs_gguf_w_fail(w, KVS_EINVAL, "empty key or bad type");
    }

    t = type;
    if (kvs_gguf_w_bytes(w, &len, 8) != KVS_OK
        || kvs_gguf_w_bytes(w, key, len) != KVS_OK
        || kvs_gguf_w_bytes(w, &t, 4) != KVS_OK)
    {
        return w->err.code;
    }

    w->n_kv++;
    w->want_value = 1;
    w->want_type = type;
    w->key_is_alignment = strcmp(key, "general.alignment") == 0;

    return KVS_OK;
}


int
kvs_gguf_w_scalar(kvs_gguf_writer_t *w, kvs_gguf_vtype_t type, const void *v)
{
    int       top;
    size_t    size;
    uint32_t  a;

    size = kvs_gguf_vtype_size(type);
    if (size == 0) {
        return kvs_gguf_w_fail(w, KVS_EINVAL, "scalar of a non-scalar type");
    }

    top = w->depth == 0;

    if (kvs_gguf_w_take(w, type, 1) != KVS_OK) {
        return w->err.code;
    }

    if (type == KVS_GGUF_BOOL && *(const uint8_t *) v > 1) {
        return kvs_gguf_w_fail(w, KVS_EINVAL, "bool value not 0 or 1");
    }

    if (top && w->key_is_alignment) {
        if (type != KVS_GGUF_U32) {
            return kvs_gguf_w_fail(w, KVS_EINVAL,
                                   "general.alignment must be u32");
        }
        memcpy(&a, v, 4);
        if (a == 0 || (a & (a - 1)) != 0) {
            return kvs_gguf_w_fail(w, KVS_EINVAL,
                                   "general.alignment not a power of two");
        }
        w->alignment = a;
    }

    if (kvs_gguf_w_bytes(w, v, size) != KVS_OK) {
        return w->err.code;
    }

    kvs_gguf_w_close_arrays(w);

    return KVS_OK;
}


int
kvs_gguf_w_str(kvs_gguf_writer_t *w, const char *s, size_t len)
{
    uint64_t  n;

    if (kvs_gguf_w_take(w, KVS_GGUF_STR, 1) != KVS_OK) {
        return w->err.code;
    }

    n = len;
    if (kvs_gguf_w_bytes(w, &n, 8) != KVS_OK
        || kvs_gguf_w_bytes(w, s, len) != KVS_OK)
    {
        return w->err.code;
    }

    kvs_gguf_w_close_arrays(w);

    return KVS_OK;
}


int
kvs_gguf_w_arr(kvs_gguf_writer_t *w, kvs_gguf_vtype_t elem, uint64_t n)
{
    uint32_t  t;

    if (elem >= KVS_GGUF_VTYPE_END) {
        return kvs_gguf_w_fail(w, KVS_EINVAL, "bad array element type");
    }

    if (kvs_gguf_w_take(w, KVS_GGUF_ARR, 1) != KVS_OK) {
        return w->err.code;
    }

    if (w->depth == KVS_GGUF_MAX_DEPTH) {
        return kvs_gguf_w_fail(w, KVS_EINVAL, "arrays nested too deep");
    }

    t = elem;
    if (kvs_gguf_w_bytes(w, &t, 4) != KVS_OK
        || kvs_gguf_w_bytes(w, &n, 8) != KVS_OK)
    {
        return w->err.code;
    }

    w->open[w->depth].elem = elem;
    w->open[w->depth].left = n;
    w->depth++;

    kvs_gguf_w_close_arrays(w);

    return KVS_OK;
}


int
kvs_gguf_w_elems(kvs_gguf_writer_t *w, const void *v, uint64_t n)
{
    size_t            size;
    const uint8_t    *b;
    uint64_t          i;
    kvs_gguf_vtype_t  elem;

    if (w->failed) {
        return w->err.code;
    }

    if (w->depth == 0) {
        return kvs_gguf_w_fail(w, KVS_EINVAL, "elements outside an array");
    }

    elem = w->open[w->depth - 1].elem;
    size = kvs_gguf_vtype_size(elem);
    if (size == 0 || n > SIZE_MAX / size) {
        return kvs_gguf_w_fail(w, KVS_EINVAL,
                               "bulk elements must be fixed-size");
    }

    if (elem == KVS_GGUF_BOOL) {
        for (b = v, i = 0; i < n; i++) {
            if (b[i] > 1) {
                return kvs_gguf_w_fail(w, KVS_EINVAL,
                                       "bool value not 0 or 1");
            }
        }
    }

    if (kvs_gguf_w_take(w, elem, n) != KVS_OK
        || kvs_gguf_w_bytes(w, v, n * size) != KVS_OK)
    {
        return w->err.code;
    }

    kvs_gguf_w_close_arrays(w);

    return KVS_OK;
}


/* Conveniences. */

static int
kvs_gguf_set_scalar(kvs_gguf_writer_t *w, const char *key,
    kvs_gguf_vtype_t type, const void *v)
{
    if (kvs_gguf_w_key(w, key, type) != KVS_OK) {
        return w->err.code;
    }

    return kvs_gguf_w_scalar(w, type, v);
}


int
kvs_gguf_set_u32(kvs_gguf_writer_t *w, const char *key, uint32_t v)
{
    return kvs_gguf_set_scalar(w, key, KVS_GGUF_U32, &v);
}


int
kvs_gguf_set_i32(kvs_gguf_writer_t *w, const char *key, int32_t v)
{
    return kvs_gguf_set_scalar(w, key, KVS_GGUF_I32, &v);
}


int
kvs_gguf_set_f32(kvs_gguf_writer_t *w, const char *key, float v)
{
    return kvs_gguf_set_scalar(w, key, KVS_GGUF_F32, &v);
}


int
kvs_gguf_set_bool(kvs_gguf_writer_t *w, const char *key, int v)
{
    uint8_t  b;

    b = v ? 1 : 0;

    return kvs_gguf_set_scalar(w, key, KVS_GGUF_BOOL, &b);
}


int
kvs_gguf_set_str(kvs_gguf_writer_t *w, const char *key, const char *s)
{
    if (kvs_gguf_w_key(w, key, KVS_GGUF_STR) != KVS_OK) {
        return w->err.code;
    }

    return kvs_gguf_w_str(w, s, strlen(s));
}


/* Tensors. */

/* One metadata value (an array's elements recursively) re-encoded. */
static int
kvs_gguf_w_copy_arr(kvs_gguf_writer_t *w, const kvs_gguf_arr_t *a)
{
    int              rc;
    kvs_gguf_arr_t   sub;
    kvs_gguf_str_t   s;
    kvs_gguf_iter_t  it;

    rc = kvs_gguf_w_arr(w, a->type, a->n);
    if (rc != KVS_OK) {
        return rc;
    }

    if (a->type == KVS_GGUF_STR) {
        kvs_gguf_iter_init(&it, a);
        while (rc == KVS_OK && kvs_gguf_iter_str(&it, &s)) {
            rc = kvs_gguf_w_str(w, s.ptr, s.len);
        }
        return rc;
    }

    if (a->type == KVS_GGUF_ARR) {
        kvs_gguf_iter_init(&it, a);
        while (rc == KVS_OK && kvs_gguf_iter_arr(&it, &sub)) {
            rc = kvs_gguf_w_copy_arr(w, &sub);
        }
        return rc;
    }

    return a->n == 0 ? KVS_OK : kvs_gguf_w_elems(w, a->data, a->n);
}


int
kvs_gguf_w_copy(kvs_gguf_writer_t *w, const kvs_gguf_kv_t *kv)
{
    int       rc;
    char      key[256];
    uint64_t  len;

    if (kv->key.len >= sizeof(key)) {
        return kvs_gguf_w_fail(w, KVS_EINVAL, "key too long");
    }

    memcpy(key, kv->key.ptr, kv->key.len);
    key[kv->key.len] = '\0';

    rc = kvs_gguf_w_key(w, key, kv->type);
    if (rc != KVS_OK) {
        return rc;
    }

    switch (kv->type) {
    case KVS_GGUF_STR:
        memcpy(&len, kv->val, 8);
        return kvs_gguf_w_str(w, (const char *) kv->val + 8, len);
    case KVS_GGUF_ARR:
        return kvs_gguf_w_copy_arr(w, &kv->arr);
    default:
        return kvs_gguf_w_scalar(w, kv->type, kv->val);
    }
}


int
kvs_gguf_w_tensor(kvs_gguf_writer_t *w, const char *name, uint32_t type,
    uint32_t n_dims, const uint64_t *ne, const void *data)
{
    size_t               len;
    uint32_t             d;
    uint64_t             nelem, i;
    kvs_err_t            e;
    kvs_gguf_wtensor_t  *t, *grown;

    if (w->failed) {
        return w->err.code;
    }

    len = strlen(name);
    if (len == 0 || len > KVS_GGUF_MAX_NAME) {
        return kvs_gguf_w_fail(w, KVS_EINVAL, "tensor name length");
    }

    if (n_dims == 0 || n_dims > KVS_GGUF_MAX_DIMS) {
        return kvs_gguf_w_fail(w, KVS_EINVAL, "tensor n_dims not in 1..4");
    }

    for (i = 0; i < w->n_tensors; i++) {
        if (strcmp(w->tensors[i].name, name) == 0) {
            return kvs_gguf_w_fail(w, KVS_EINVAL, "duplicate tensor name");
        }
    }

    nelem = 1;
    for (d = 0; d < n_dims; d++) {
        if (ne[d] != 0 && nelem > (uint64_t) INT64_MAX / ne[d]) {
            return kvs_gguf_w_fail(w, KVS_ERANGE, "tensor too large");
        }
        nelem *= ne[d];
    }

    if (w->n_tensors == w->cap_tensors) {
        grown = realloc(w->tensors, (w->cap_tensors ? w->cap_tensors * 2 : 16)
                                    * sizeof(kvs_gguf_wtensor_t));
        if (grown == NULL) {
            return kvs_gguf_w_fail(w, KVS_ENOMEM, "out of memory");
        }
        w->tensors = grown;
        w->cap_tensors = w->cap_tensors ? w->cap_tensors * 2 : 16;
    }

    t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof(*t));

    if (kvs_ggml_nbytes(type, ne[0], nelem, &t->nbytes, &e) != KVS_OK) {
        return kvs_gguf_w_fail(w, e.code, e.msg);
    }

    memcpy(t->name, name, len + 1);
    t->type = type;
    t->n_dims = n_dims;
    for (d = 0; d < KVS_GGUF_MAX_DIMS; d++) {
        t->ne[d] = d < n_dims ? ne[d] : 1;
    }
    t->data = data;

    w->n_tensors++;

    return KVS_OK;
}


/* Output. */

static int
kvs_gguf_w_pad(FILE *f, uint64_t pos, uint32_t alignment)
{
    static const uint8_t  zeros[256];
    uint64_t              pad, n;

    pad = (alignment - pos % alignment) % alignment;

    while (pad > 0) {
        n = pad < sizeof(zeros) ? pad : sizeof(zeros);
        if (fwrite(zeros, 1, n, f) != n) {
            return KVS_EIO;
        }
        pad -= n;
    }

    return KVS_OK;
}


static int
kvs_gguf_w_infos(kvs_gguf_writer_t *w, kvs_buf_t *hdr)
{
    uint64_t             i, len, off;
    kvs_gguf_wtensor_t  *t;

    off = 0;

    for (i = 0; i < w->n_tensors; i++) {
        t = &w->tensors[i];
        t->offset = off;

        len = strlen(t->name);
        if (kvs_buf_append(hdr, &len, 8) != KVS_OK
            || kvs_buf_append(hdr, t->name, len) != KVS_OK
            || kvs_buf_append(hdr, &t->n_dims, 4) != KVS_OK
            || kvs_buf_append(hdr, t->ne, 8 * t->n_dims) != KVS_OK
            || kvs_buf_append(hdr, &t->type, 4) != KVS_OK
            || kvs_buf_append(hdr, &t->offset, 8) != KVS_OK)
        {
            return KVS_ENOMEM;
        }

        off += t->nbytes + (w->alignment - t->nbytes % w->alignment)
                           % w->alignment;
    }

    return KVS_OK;
}


static int
kvs_gguf_w_data(kvs_gguf_writer_t *w, FILE *f, kvs_gguf_fill_pt fill,
    void *ctx, kvs_err_t *err)
{
    int                  rc;
    void                *buf;
    uint64_t             i, cap;
    const void          *src;
    kvs_gguf_wtensor_t  *t;

    buf = NULL;
    cap = 0;
    rc = KVS_OK;

    for (i = 0; i < w->n_tensors && rc == KVS_OK; i++) {
        t = &w->tensors[i];
        src = t->data;

        if (src == NULL) {
            if (fill == NULL) {
                rc = kvs_err_set(err, KVS_EINVAL, "gguf writer: tensor '%s' "
                                 "has no data and no fill callback",
                                 t->name);
                break;
            }

            if (t->nbytes > cap) {
                free(buf);
                cap = t->nbytes;
                buf = malloc(cap ? cap : 1);
                if (buf == NULL) {
                    rc = kvs_err_set(err, KVS_ENOMEM, "out of memory for "
                                     "tensor '%s'", t->name);
                    break;
                }
            }

            rc = fill(ctx, t->name, buf, t->nbytes, err);
            src = buf;
        }

        if (rc == KVS_OK
            && (fwrite(src, 1, t->nbytes, f) != t->nbytes
                || kvs_gguf_w_pad(f, t->nbytes, w->alignment) != KVS_OK))
        {
            rc = kvs_err_set(err, KVS_EIO, "write failed: %s",
                             strerror(errno));
        }
    }

    free(buf);

    return rc;
}


int
kvs_gguf_writer_write(kvs_gguf_writer_t *w, const char *path,
    kvs_gguf_fill_pt fill, void *ctx, kvs_err_t *err)
{
    int        rc;
    char      *tmp;
    FILE      *f;
    size_t     n;
    kvs_buf_t  hdr;

    if (w->failed) {
        return kvs_err_set(err, w->err.code, "%s", w->err.msg);
    }

    if (w->want_value || w->depth > 0) {
        return kvs_err_set(err, KVS_EINVAL,
                           "gguf writer: the last value is incomplete");
    }

    memset(&hdr, 0, sizeof(hdr));

    if (kvs_buf_append(&hdr, KVS_GGUF_MAGIC, 4) != KVS_OK
        || kvs_buf_append(&hdr, &w->version, 4) != KVS_OK
        || kvs_buf_append(&hdr, &w->n_tensors, 8) != KVS_OK
        || kvs_buf_append(&hdr, &w->n_kv, 8) != KVS_OK
        || kvs_buf_append(&hdr, w->meta.data, w->meta.len) != KVS_OK
        || kvs_gguf_w_infos(w, &hdr) != KVS_OK)
    {
        kvs_buf_free(&hdr);
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    n = strlen(path) + 5;
    tmp = malloc(n);
    if (tmp == NULL) {
        kvs_buf_free(&hdr);
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }
    snprintf(tmp, n, "%s.tmp", path);

    f = fopen(tmp, "wb");
    if (f == NULL) {
        rc = kvs_err_set(err, KVS_EIO, "cannot create \"%s\": %s", tmp,
                         strerror(errno));
        goto done;
    }

    rc = KVS_OK;

    if (fwrite(hdr.data, 1, hdr.len, f) != hdr.len
        || (w->n_tensors > 0
            && kvs_gguf_w_pad(f, hdr.len, w->alignment) != KVS_OK))
    {
        rc = kvs_err_set(err, KVS_EIO, "write to \"%s\" failed: %s", tmp,
                         strerror(errno));
    }

    if (rc == KVS_OK) {
        rc = kvs_gguf_w_data(w, f, fill, ctx, err);
    }

    if (fclose(f) != 0 && rc == KVS_OK) {
        rc = kvs_err_set(err, KVS_EIO, "write to \"%s\" failed: %s", tmp,
                         strerror(errno));
    }

    if (rc == KVS_OK && rename(tmp, path) != 0) {
        rc = kvs_err_set(err, KVS_EIO, "cannot rename \"%s\" to \"%s\": %s",
                         tmp, path, strerror(errno));
    }

    if (rc != KVS_OK) {
        remove(tmp);
    }

done:

    free(tmp);
    kvs_buf_free(&hdr);

    return rc;
}
