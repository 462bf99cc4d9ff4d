/*
 * kvs_gguf_read: parses and validates a GGUF header over a byte range.
 *
 * Layout (v2 and v3, little-endian):
 *   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x       { str key | u32 vtype | value }
 *   n_tensors x  { str name | u32 n_dims | u64 ne[n_dims] | u32 type |
 *                  u64 offset }
 *   padding to `general.alignment` (default 32) | tensor data
 * where str = u64 len | len bytes, and an array value = u32 elem type |
 * u64 n | n element encodings (arrays of strings and of arrays included).
 *
 * Every read goes through the cursor below, which refuses to step past the
 * end and records which field at which offset was being read; nothing read
 * from the file is used as a size, count or offset until it has been
 * checked against the bytes that are actually there.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "kvs_gguf.h"
#include "kvs_ggml_type.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "kvs_gguf reads little-endian GGUF by memcpy: a big-endian host"
#endif


struct kvs_gguf_s {
    const uint8_t      *base;
    uint64_t            size;
    int                 mapped;        /* base is our mmap, unmap on close */

    uint32_t            version;
    uint32_t            alignment;
    uint64_t            n_kv;
    uint64_t            n_tensors;
    uint64_t            data_offset;   /* file offset of tensor data */

    kvs_gguf_kv_t      *kv;            /* [n_kv] */
    kvs_gguf_tensor_t  *tensors;       /* [n_tensors] */
};


typedef struct {
    const uint8_t      *base;
    uint64_t            size;
    uint64_t            pos;
    char                ctx[160];      /* what is being read, for errors */
    kvs_err_t          *err;
} kvs_gguf_cur_t;


static int kvs_gguf_parse(kvs_gguf_t *g, kvs_err_t *err);
static int kvs_gguf_parse_kv(kvs_gguf_t *g, kvs_gguf_cur_t *c);
static int kvs_gguf_parse_tensors(kvs_gguf_t *g, kvs_gguf_cur_t *c);
static int kvs_gguf_skip_value(kvs_gguf_cur_t *c, uint32_t type,
    unsigned depth, kvs_gguf_arr_t *arr);
static int kvs_gguf_place_tensors(kvs_gguf_t *g, kvs_err_t *err);
static int kvs_gguf_elem_error(kvs_gguf_cur_t *c, uint32_t et,
    unsigned depth, uint64_t i, uint64_t start);
static int kvs_gguf_read_alignment(kvs_gguf_t *g, kvs_err_t *err);
static int kvs_gguf_corrupt(kvs_gguf_cur_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));


/* Cursor primitives. */

static int
kvs_gguf_need(kvs_gguf_cur_t *c, uint64_t n, const char *what)
{
    if (c->size - c->pos < n) {
        return kvs_err_set(c->err, KVS_EFORMAT,
                           "truncated: %s%s%s at byte %llu needs %llu bytes, "
                           "%llu left in the file",
                           c->ctx, c->ctx[0] ? " " : "", what,
                           (unsigned long long) c->pos,
                           (unsigned long long) n,
                           (unsigned long long) (c->size - c->pos));
    }

    return KVS_OK;
}


static int
kvs_gguf_u32(kvs_gguf_cur_t *c, const char *what, uint32_t *v)
{
    if (kvs_gguf_need(c, 4, what) != KVS_OK) {
        return KVS_EFORMAT;
    }

    memcpy(v, c->base + c->pos, 4);
    c->pos += 4;

    return KVS_OK;
}


static int
kvs_gguf_u64(kvs_gguf_cur_t *c, const char *what, uint64_t *v)
{
    if (kvs_gguf_need(c, 8, what) != KVS_OK) {
        return KVS_EFORMAT;
    }

    memcpy(v, c->base + c->pos, 8);
    c->pos += 8;

    return KVS_OK;
}


static int
kvs_gguf_str(kvs_gguf_cur_t *c, const char *what, kvs_gguf_str_t *s)
{
    char      lw[64];
    uint64_t  len;

    snprintf(lw, sizeof(lw), "%s length", what);
    if (kvs_gguf_u64(c, lw, &len) != KVS_OK) {
        return KVS_EFORMAT;
    }

    if (len > c->size - c->pos) {
        c->pos -= 8;
        return kvs_gguf_corrupt(c, "%s length %llu exceeds the %llu bytes "
                                "left in the file", what,
                                (unsigned long long) len,
                                (unsigned long long) (c->size - c->pos - 8));
    }

    s->ptr = (const char *) c->base + c->pos;
    s->len = len;
    c->pos += len;

    return KVS_OK;
}


static int
kvs_gguf_corrupt(kvs_gguf_cur_t *c, const char *fmt, ...)
{
    char     msg[KVS_ERR_MSG_LEN];
    va_list  ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    return kvs_err_set(c->err, KVS_EFORMAT, "corrupt: %s%s%s at byte %llu",
                       c->ctx, c->ctx[0] ? " " : "", msg,
                       (unsigned long long) c->pos);
}


static void
kvs_gguf_set_ctx(kvs_gguf_cur_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
kvs_gguf_set_ctx(kvs_gguf_cur_t *c, const char *fmt, ...)
{
    va_list  ap;

    va_start(ap, fmt);
    vsnprintf(c->ctx, sizeof(c->ctx), fmt, ap);
    va_end(ap);
}


/* Opening and closing. */

int
kvs_gguf_open(kvs_gguf_t **out, const char *path, kvs_err_t *err)
{
    int          fd, rc;
    void        *p;
    struct stat  st;
    kvs_gguf_t  *g;

    *out = NULL;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd == -1) {
        return kvs_err_set(err, KVS_EIO, "cannot open \"%s\": %s",
                           path, strerror(errno));
    }

    if (fstat(fd, &st) == -1) {
        rc = kvs_err_set(err, KVS_EIO, "cannot stat \"%s\": %s",
                         path, strerror(errno));
        close(fd);
        return rc;
    }

    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return kvs_err_set(err, KVS_EIO, "\"%s\" is not a regular file",
                           path);
    }

    if (st.st_size < 24) {
        close(fd);
        return kvs_err_set(err, KVS_EFORMAT,
                           "\"%s\" is %lld bytes, too short for a GGUF "
                           "header (24 bytes)", path,
                           (long long) st.st_size);
    }

    p = mmap(NULL, (size_t) st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);

    if (p == MAP_FAILED) {
        return kvs_err_set(err, KVS_EIO, "cannot mmap \"%s\": %s",
                           path, strerror(errno));
    }

    g = calloc(1, sizeof(kvs_gguf_t));
    if (g == NULL) {
        munmap(p, (size_t) st.st_size);
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    g->base = p;
    g->size = (uint64_t) st.st_size;
    g->mapped = 1;

    rc = kvs_gguf_parse(g, err);
    if (rc != KVS_OK) {
        kvs_err_prefix(err, "\"%s\"", path);
        kvs_gguf_close(g);
        return rc;
    }

    *out = g;

    return KVS_OK;
}


int
kvs_gguf_open_mem(kvs_gguf_t **out, const void *buf, size_t len,
    kvs_err_t *err)
{
    int          rc;
    kvs_gguf_t  *g;

    *out = NULL;

    g = calloc(1, sizeof(kvs_gguf_t));
    if (g == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    g->base = buf;
    g->size = len;

    rc = kvs_gguf_parse(g, err);
    if (rc != KVS_OK) {
        kvs_gguf_close(g);
        return rc;
    }

    *out = g;

    return KVS_OK;
}


void
kvs_gguf_close(kvs_gguf_t *g)
{
    if (g == NULL) {
        return;
    }

    if (g->mapped) {
        munmap((void *) g->base, (size_t) g->size);
    }

    free(g->kv);
    free(g->tensors);
    free(g);
}


/* Parsing. */

static int
kvs_gguf_parse(kvs_gguf_t *g, kvs_err_t *err)
{
    int             rc;
    uint64_t        pad;
    kvs_gguf_cur_t  c;

    memset(&c, 0, sizeof(c));
    c.base = g->base;
    c.size = g->size;
    c.err = err;

    if (g->size < 4 || memcmp(g->base, KVS_GGUF_MAGIC, 4) != 0) {
        return kvs_err_set(err, KVS_EFORMAT,
                           "not a GGUF file: bad magic at byte 0");
    }

    c.pos = 4;

    if (kvs_gguf_u32(&c, "header version", &g->version) != KVS_OK) {
        return KVS_EFORMAT;
    }

    if (g->version == 1) {
        return kvs_err_set(err, KVS_EUNSUPPORTED,
                           "GGUF version 1 is not supported (only 2 and 3), "
                           "at byte 4");
    }

    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffff) == 0 && (g->version >> 24) <= 3) {
            return kvs_err_set(err, KVS_EUNSUPPORTED,
                               "big-endian GGUF is not supported "
                               "(version field 0x%08x at byte 4)",
                               g->version);
        }
        return kvs_err_set(err, KVS_EUNSUPPORTED,
                           "unsupported GGUF version %u at byte 4",
                           g->version);
    }

    if (kvs_gguf_u64(&c, "header n_tensors", &g->n_tensors) != KVS_OK
        || kvs_gguf_u64(&c, "header n_kv", &g->n_kv) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    rc = kvs_gguf_parse_kv(g, &c);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_gguf_read_alignment(g, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_gguf_parse_tensors(g, &c);
    if (rc != KVS_OK) {
        return rc;
    }

    pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    g->data_offset = c.pos + pad;

    if (g->n_tensors == 0) {
        /* vocab-only files end right after the metadata, unpadded */
        return KVS_OK;
    }

    c.ctx[0] = '\0';
    if (kvs_gguf_need(&c, pad, "padding before tensor data") != KVS_OK) {
        return KVS_EFORMAT;
    }

    return kvs_gguf_place_tensors(g, err);
}


static int
kvs_gguf_parse_kv(kvs_gguf_t *g, kvs_gguf_cur_t *c)
{
    int             rc;
    uint32_t        type;
    uint64_t        i, j;
    kvs_gguf_kv_t  *kv;

    /* the smallest key/value pair takes 8 + 1 + 4 + 1 bytes */
    if (g->n_kv > (c->size - c->pos) / 14) {
        return kvs_err_set(c->err, KVS_EFORMAT,
                           "corrupt: header n_kv %llu at byte 16 cannot fit "
                           "in the %llu bytes that follow",
                           (unsigned long long) g->n_kv,
                           (unsigned long long) (c->size - c->pos));
    }

    g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof(kvs_gguf_kv_t));
    if (g->kv == NULL) {
        return kvs_err_set(c->err, KVS_ENOMEM, "out of memory for %llu "
                           "metadata entries",
                           (unsigned long long) g->n_kv);
    }

    for (i = 0; i < g->n_kv; i++) {
        kv = &g->kv[i];

        kvs_gguf_set_ctx(c, "kv[%llu]", (unsigned long long) i);

        if (kvs_gguf_str(c, "key", &kv->key) != KVS_OK) {
            return KVS_EFORMAT;
        }

        if (kv->key.len == 0) {
            return kvs_gguf_corrupt(c, "has an empty key");
        }

        kvs_gguf_set_ctx(c, "kv[%llu] '%.*s'", (unsigned long long) i,
                         (int) (kv->key.len > 80 ? 80 : kv->key.len),
                         kv->key.ptr);

        for (j = 0; j < i; j++) {
            if (g->kv[j].key.len == kv->key.len
                && memcmp(g->kv[j].key.ptr, kv->key.ptr, kv->key.len) == 0)
            {
                return kvs_gguf_corrupt(c, "duplicates the key of kv[%llu]",
                                        (unsigned long long) j);
            }
        }

        if (kvs_gguf_u32(c, "value type", &type) != KVS_OK) {
            return KVS_EFORMAT;
        }

        if (type >= KVS_GGUF_VTYPE_END) {
            c->pos -= 4;
            return kvs_gguf_corrupt(c, "has unknown value type %u", type);
        }

        kv->type = type;
        kv->offset = c->pos;
        kv->val = c->base + c->pos;

        rc = kvs_gguf_skip_value(c, type, 0, &kv->arr);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}


/*
 * Element i of an array failed: reads it again with " element i" added to
 * the context, so that the message names it (outermost index first).
 */
static int
kvs_gguf_elem_error(kvs_gguf_cur_t *c, uint32_t et, unsigned depth,
    uint64_t i, uint64_t start)
{
    size_t          len;
    kvs_gguf_arr_t  sub;

    len = strlen(c->ctx);
    snprintf(c->ctx + len, sizeof(c->ctx) - len, " element %llu",
             (unsigned long long) i);

    c->pos = start;
    (void) kvs_gguf_skip_value(c, et, depth + 1, &sub);

    c->ctx[len] = '\0';

    return KVS_EFORMAT;
}


/*
 * Checks one value of `type` at the cursor and steps over it.  For an
 * array, fills *arr with its header; nested arrays recurse at most
 * KVS_GGUF_MAX_DEPTH deep.
 */
static int
kvs_gguf_skip_value(kvs_gguf_cur_t *c, uint32_t type, unsigned depth,
    kvs_gguf_arr_t *arr)
{
    uint8_t         b;
    uint32_t        et;
    uint64_t        n, i, esize, start;
    kvs_gguf_str_t  s;
    kvs_gguf_arr_t  sub;

    esize = kvs_gguf_vtype_size(type);

    if (esize != 0) {
        if (kvs_gguf_need(c, esize, "value") != KVS_OK) {
            return KVS_EFORMAT;
        }

        if (type == KVS_GGUF_BOOL) {
            b = c->base[c->pos];
            if (b > 1) {
                return kvs_gguf_corrupt(c, "bool value %u is not 0 or 1", b);
            }
        }

        c->pos += esize;
        return KVS_OK;
    }

    if (type == KVS_GGUF_STR) {
        return kvs_gguf_str(c, "string", &s);
    }

    /* KVS_GGUF_ARR */

    if (depth >= KVS_GGUF_MAX_DEPTH) {
        return kvs_gguf_corrupt(c, "nests arrays deeper than %d",
                                KVS_GGUF_MAX_DEPTH);
    }

    if (kvs_gguf_u32(c, "array element type", &et) != KVS_OK) {
        return KVS_EFORMAT;
    }

    if (et >= KVS_GGUF_VTYPE_END) {
        c->pos -= 4;
        return kvs_gguf_corrupt(c, "has unknown array element type %u", et);
    }

    if (kvs_gguf_u64(c, "array length", &n) != KVS_OK) {
        return KVS_EFORMAT;
    }

    esize = kvs_gguf_vtype_size(et);

    /* every element takes at least 1 byte (a string at least 8) */
    if (n > (c->size - c->pos) / (esize ? esize : (et == KVS_GGUF_STR ? 8 : 12)))
    {
        c->pos -= 8;
        return kvs_gguf_corrupt(c, "array length %llu of %s exceeds what "
                                "the %llu bytes left can hold",
                                (unsigned long long) n,
                                kvs_gguf_vtype_name(et),
                                (unsigned long long) (c->size - c->pos - 8));
    }

    if (arr != NULL) {
        arr->type = et;
        arr->n = n;
        arr->data = c->base + c->pos;
    }

    if (esize != 0 && et != KVS_GGUF_BOOL) {
        c->pos += n * esize;

    } else {
        for (i = 0; i < n; i++) {
            start = c->pos;
            if (kvs_gguf_skip_value(c, et, depth + 1, &sub) != KVS_OK) {
                return kvs_gguf_elem_error(c, et, depth, i, start);
            }
        }
    }

    if (arr != NULL) {
        arr->end = c->base + c->pos;
    }

    return KVS_OK;
}


static int
kvs_gguf_read_alignment(kvs_gguf_t *g, kvs_err_t *err)
{
    int       rc;
    uint32_t  a;

    g->alignment = KVS_GGUF_DEFAULT_ALIGNMENT;

    rc = kvs_gguf_get_u32(g, "general.alignment", &a, err);
    if (rc == KVS_ENOTFOUND) {
        kvs_err_clear(err);
        return KVS_OK;
    }

    if (rc != KVS_OK) {
        return kvs_err_set(err, KVS_EFORMAT,
                           "corrupt: general.alignment must be u32, is %s",
                           kvs_gguf_vtype_name(kvs_gguf_find(g,
                               "general.alignment")->type));
    }

    if (a == 0 || (a & (a - 1)) != 0) {
        return kvs_err_set(err, KVS_EFORMAT,
                           "corrupt: general.alignment %u at byte %llu is "
                           "not a power of two", a,
                           (unsigned long long)
                               kvs_gguf_find(g, "general.alignment")->offset);
    }

    g->alignment = a;

    return KVS_OK;
}


/* Reads and checks every tensor info at the cursor. */
static int
kvs_gguf_parse_tensors(kvs_gguf_t *g, kvs_gguf_cur_t *c)
{
    char                dw[32];
    uint32_t            d;
    uint64_t            i, j, nelem;
    kvs_err_t           terr;
    kvs_gguf_tensor_t  *t;

    /* the smallest tensor info takes 8 + 1 + 4 + 8 + 4 + 8 bytes */
    if (g->n_tensors > (c->size - c->pos) / 33) {
        return kvs_err_set(c->err, KVS_EFORMAT,
                           "corrupt: header n_tensors %llu at byte 8 cannot "
                           "fit in the %llu bytes left after the metadata",
                           (unsigned long long) g->n_tensors,
                           (unsigned long long) (c->size - c->pos));
    }

    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1,
                        sizeof(kvs_gguf_tensor_t));
    if (g->tensors == NULL) {
        return kvs_err_set(c->err, KVS_ENOMEM, "out of memory for %llu "
                           "tensor infos",
                           (unsigned long long) g->n_tensors);
    }

    for (i = 0; i < g->n_tensors; i++) {
        t = &g->tensors[i];

        kvs_gguf_set_ctx(c, "tensor_info[%llu]", (unsigned long long) i);

        if (kvs_gguf_str(c, "name", &t->name) != KVS_OK) {
            return KVS_EFORMAT;
        }

        if (t->name.len == 0 || t->name.len > KVS_GGUF_MAX_NAME) {
            return kvs_gguf_corrupt(c, "name length %llu is not in 1..%d",
                                    (unsigned long long) t->name.len,
                                    KVS_GGUF_MAX_NAME);
        }

        kvs_gguf_set_ctx(c, "tensor_info[%llu] '%.*s'",
                         (unsigned long long) i, (int) t->name.len,
                         t->name.ptr);

        for (j = 0; j < i; j++) {
            if (g->tensors[j].name.len == t->name.len
                && memcmp(g->tensors[j].name.ptr, t->name.ptr,
                          t->name.len) == 0)
            {
                return kvs_gguf_corrupt(c, "duplicates the name of "
                                        "tensor_info[%llu]",
                                        (unsigned long long) j);
            }
        }

        if (kvs_gguf_u32(c, "n_dims", &t->n_dims) != KVS_OK) {
            return KVS_EFORMAT;
        }

        if (t->n_dims == 0 || t->n_dims > KVS_GGUF_MAX_DIMS) {
            c->pos -= 4;
            return kvs_gguf_corrupt(c, "n_dims %u is not in 1..%d",
                                    t->n_dims, KVS_GGUF_MAX_DIMS);
        }

        nelem = 1;

        for (d = 0; d < KVS_GGUF_MAX_DIMS; d++) {
            t->ne[d] = 1;

            if (d >= t->n_dims) {
                continue;
            }

            snprintf(dw, sizeof(dw), "ne[%u]", d);
            if (kvs_gguf_u64(c, dw, &t->ne[d]) != KVS_OK) {
                return KVS_EFORMAT;
            }

            /* ggml keeps dimensions in int64_t: stay below 2^63 */
            if (t->ne[d] > (uint64_t) INT64_MAX
                || (t->ne[d] != 0 && nelem > (uint64_t) INT64_MAX / t->ne[d]))
            {
                c->pos -= 8;
                return kvs_gguf_corrupt(c, "%s = %llu overflows the element "
                                        "count", dw,
                                        (unsigned long long) t->ne[d]);
            }

            nelem *= t->ne[d];
        }

        t->nelem = nelem;

        if (kvs_gguf_u32(c, "type", &t->type) != KVS_OK) {
            return KVS_EFORMAT;
        }

        if (kvs_ggml_nbytes(t->type, t->ne[0], nelem, &t->nbytes, &terr)
            != KVS_OK)
        {
            c->pos -= 4;
            return kvs_gguf_corrupt(c, "type %u (%s): %s", t->type,
                                    kvs_ggml_type_name(t->type), terr.msg);
        }

        t->offset_at = c->pos;
        if (kvs_gguf_u64(c, "offset", &t->offset) != KVS_OK) {
            return KVS_EFORMAT;
        }

        if (t->offset % g->alignment != 0) {
            c->pos = t->offset_at;
            return kvs_gguf_corrupt(c, "data offset %llu is not a multiple "
                                    "of the alignment %u",
                                    (unsigned long long) t->offset,
                                    g->alignment);
        }

        if (t->offset > c->size || t->nbytes > c->size - t->offset) {
            c->pos = t->offset_at;
            return kvs_gguf_corrupt(c, "data offset %llu + %llu bytes lies "
                                    "past the end of the %llu-byte file",
                                    (unsigned long long) t->offset,
                                    (unsigned long long) t->nbytes,
                                    (unsigned long long) c->size);
        }
    }

    return KVS_OK;
}


/* Once the data section's offset is known: every tensor lies inside it. */
static int
kvs_gguf_place_tensors(kvs_gguf_t *g, kvs_err_t *err)
{
    uint64_t            i, avail;
    kvs_gguf_tensor_t  *t;

    avail = g->size - g->data_offset;

    for (i = 0; i < g->n_tensors; i++) {
        t = &g->tensors[i];

        if (t->offset > avail || t->nbytes > avail - t->offset) {
            return kvs_err_set(err, KVS_EFORMAT,
                               "corrupt: tensor_info[%llu] '%.*s' data "
                               "offset %llu (field at byte %llu) + %llu "
                               "bytes lies past the end of the data "
                               "section (%llu bytes from byte %llu)",
                               (unsigned long long) i, (int) t->name.len,
                               t->name.ptr, (unsigned long long) t->offset,
                               (unsigned long long) t->offset_at,
                               (unsigned long long) t->nbytes,
                               (unsigned long long) avail,
                               (unsigned long long) g->data_offset);
        }

        t->data = g->base + g->data_offset + t->offset;
    }

    return KVS_OK;
}


/* Accessors. */

uint32_t
kvs_gguf_version(const kvs_gguf_t *g)
{
    return g->version;
}


uint64_t
kvs_gguf_file_size(const kvs_gguf_t *g)
{
    return g->size;
}


uint64_t
kvs_gguf_content_hash(const kvs_gguf_t *g)
{
    return XXH3_64bits(g->base, g->size);
}


uint32_t
kvs_gguf_alignment(const kvs_gguf_t *g)
{
    return g->alignment;
}


uint64_t
kvs_gguf_data_offset(const kvs_gguf_t *g)
{
    return g->data_offset;
}


uint64_t
kvs_gguf_n_kv(const kvs_gguf_t *g)
{
    return g->n_kv;
}


uint64_t
kvs_gguf_n_tensors(const kvs_gguf_t *g)
{
    return g->n_tensors;
}


const kvs_gguf_kv_t *
kvs_gguf_kv_at(const kvs_gguf_t *g, uint64_t i)
{
    return i < g->n_kv ? &g->kv[i] : NULL;
}


const kvs_gguf_kv_t *
kvs_gguf_find(const kvs_gguf_t *g, const char *key)
{
    uint64_t  i;

    for (i = 0; i < g->n_kv; i++) {
        if (kvs_gguf_str_eq(g->kv[i].key, key)) {
            return &g->kv[i];
        }
    }

    return NULL;
}


const kvs_gguf_tensor_t *
kvs_gguf_tensor_at(const kvs_gguf_t *g, uint64_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}


const kvs_gguf_tensor_t *
kvs_gguf_find_tensor(const kvs_gguf_t *g, const char *name)
{
    uint64_t  i;

    for (i = 0; i < g->n_tensors; i++) {
        if (kvs_gguf_str_eq(g->tensors[i].name, name)) {
            return &g->tensors[i];
        }
    }

    return NULL;
}
