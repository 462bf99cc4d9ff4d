/*
 * kvs_gguf_get: typed access to metadata values of an opened GGUF file.
 *
 * Everything here reads values that kvs_gguf_open() has already checked,
 * so lengths and counts are trusted; element access still checks the
 * index against the array's count and the caller's requested type.
 */

#include <string.h>

#include "kvs_gguf.h"


static const struct {
    const char  *name;
    size_t       size;
} kvs_gguf_vtypes[KVS_GGUF_VTYPE_END] = {
    [KVS_GGUF_U8]   = { "u8",   1 },
    [KVS_GGUF_I8]   = { "i8",   1 },
    [KVS_GGUF_U16]  = { "u16",  2 },
    [KVS_GGUF_I16]  = { "i16",  2 },
    [KVS_GGUF_U32]  = { "u32",  4 },
    [KVS_GGUF_I32]  = { "i32",  4 },
    [KVS_GGUF_F32]  = { "f32",  4 },
    [KVS_GGUF_BOOL] = { "bool", 1 },
    [KVS_GGUF_STR]  = { "str",  0 },
    [KVS_GGUF_ARR]  = { "arr",  0 },
    [KVS_GGUF_U64]  = { "u64",  8 },
    [KVS_GGUF_I64]  = { "i64",  8 },
    [KVS_GGUF_F64]  = { "f64",  8 },
};


const char *
kvs_gguf_vtype_name(uint32_t type)
{
    return type < KVS_GGUF_VTYPE_END ? kvs_gguf_vtypes[type].name : "?";
}


size_t
kvs_gguf_vtype_size(uint32_t type)
{
    return type < KVS_GGUF_VTYPE_END ? kvs_gguf_vtypes[type].size : 0;
}


int
kvs_gguf_str_eq(kvs_gguf_str_t s, const char *cstr)
{
    size_t  n;

    n = strlen(cstr);

    return s.len == n && memcmp(s.ptr, cstr, n) == 0;
}


static int
kvs_gguf_lookup(const kvs_gguf_t *g, const char *key, kvs_gguf_vtype_t type,
    const kvs_gguf_kv_t **out, kvs_err_t *err)
{
    const kvs_gguf_kv_t  *kv = NULL;

    kv = kvs_gguf_find(g, key);
    if (kv == NULL) {
        return kvs_err_set(err, KVS_ENOTFOUND, "missing key '%s'", key);
    }

    if (kv->type != type) {
        return kvs_err_set(err, KVS_ETYPE, "key '%s' is %s, expected %s",
                           key, kvs_gguf_vtype_name(kv->type),
                           kvs_gguf_vtype_name(type));
    }

    *out = kv;

    return KVS_OK;
}


static int
kvs_gguf_get_fixed(const kvs_gguf_t *g, const char *key,
    kvs_gguf_vtype_t type, void *v, kvs_err_t *err)
{
    int                   rc;
    const kvs_gguf_kv_t  *kv = NULL;

    rc = kvs_gguf_lookup(g, key, type, &kv, err);
    if (rc == KVS_OK) {
        memcpy(v, kv->val, kvs_gguf_vtype_size(type));
    }

    return rc;
}


int
kvs_gguf_get_u8(const kvs_gguf_t *g, const char *key, uint8_t *v,
    kvs_err_t *err)
{
    return kvs_gguf_get_fixed(g, key, KVS_GGUF_U8, v, err);
}


int
kvs_gguf_get_i8(const kvs_gguf_t *g, const char *key, int8_t *v,
    kvs_err_t *err)
{
    return kvs_gguf_get_fixed(g, key, KVS_GGUF_I8, v, err);
}


int
kvs_gguf_get_u16(const kvs_gguf_t *g, const char *key, uint16_t *v,
    kvs_err_t *err)
{
    return kvs_gguf_get_fixed(g, key, KVS_GGUF_U16, v, err);
}


int
kvs_gguf_get_i16(const kvs_gguf_t *g, const char *key, int16_t *v,
    kvs_err_t *err)
{
    return kvs_gguf_get_fixed(g, key, KVS_GGUF_I16, v, err);
}


int
kvs_gguf_get_u32(const kvs_gguf_t *g, const char *key, uint32_t *v,
    kvs_err_t *err)
{
    return kvs_gguf_get_fixed(g, key, KVS_GGUF_U32, v, err);
}


int
kvs_gguf_get_i32(const kvs_gguf_t *g, const char *key, int32_t *v,
    kvs_err_t *err)
{
    return kvs_gguf_get_fixed(g, key, KVS_GGUF_I32, v, err);
}


int
kvs_gguf_get_u64(const kvs_gguf_t *g, const char *key, uint64_t *v,
    kvs_err_t *err)
{
    return kvs_gguf_get_fixed(g, key, KVS_GGUF_U64, v, err);
}


int
kvs_gguf_get_i64(const kvs_gguf_t *g, const char *key, int64_t *v,
    kvs_err_t *err)
{
    return kvs_gguf_get_fixed(g, key, KVS_GGUF_I64, v, err);
}


int
kvs_gguf_get_f32(const kvs_gguf_t *g, const char *key, float *v,
    kvs_err_t *err)
{
    return kvs_gguf_get_fixed(g, key, KVS_GGUF_F32, v, err);
}


int
kvs_gguf_get_f64(const kvs_gguf_t *g, const char *key, double *v,
    kvs_err_t *err)
{
    return kvs_gguf_get_fixed(g, key, KVS_GGUF_F64, v, err);
}


int
kvs_gguf_get_bool(const kvs_gguf_t *g, const char *key, int *v,
    kvs_err_t *err)
{
    uint8_t  b;
    int      rc;

    rc = kvs_gguf_get_fixed(g, key, KVS_GGUF_BOOL, &b, err);
    if (rc == KVS_OK) {
        *v = b;
    }

    return rc;
}


int
kvs_gguf_get_str(const kvs_gguf_t *g, const char *key, kvs_gguf_str_t *v,
    kvs_err_t *err)
{
    int                   rc;
    const kvs_gguf_kv_t  *kv = NULL;

    rc = kvs_gguf_lookup(g, key, KVS_GGUF_STR, &kv, err);
    if (rc != KVS_OK) {
        return rc;
    }

    memcpy(&v->len, kv->val, 8);
    v->ptr = (const char *) kv->val + 8;

    return KVS_OK;
}


int
kvs_gguf_get_arr(const kvs_gguf_t *g, const char *key, kvs_gguf_arr_t *v,
    kvs_err_t *err)
{
    int                   rc;
    const kvs_gguf_kv_t  *kv = NULL;

    rc = kvs_gguf_lookup(g, key, KVS_GGUF_ARR, &kv, err);
    if (rc != KVS_OK) {
        return rc;
    }

    *v = kv->arr;

    return KVS_OK;
}


/*
 * Decodes one scalar of `type` at p: integers (and bools) into *i and
 * *u (u only when non-negative), floats into *f.  Returns 1 for an
 * integer, 2 for a float, 0 for strings and arrays.
 */
static int
kvs_gguf_decode(const uint8_t *p, uint32_t type, int64_t *i, uint64_t *u,
    double *f)
{
    union {
        uint8_t   u8;   int8_t   i8;
        uint16_t  u16;  int16_t  i16;
        uint32_t  u32;  int32_t  i32;
        uint64_t  u64;  int64_t  i64;
        float     f32;  double   f64;
    } v;

    memcpy(&v, p, kvs_gguf_vtype_size(type));

    *u = 0;
    *i = 0;

    switch (type) {
    case KVS_GGUF_U8:
    case KVS_GGUF_BOOL: *u = v.u8;  *i = v.u8;  return 1;
    case KVS_GGUF_U16:  *u = v.u16; *i = v.u16; return 1;
    case KVS_GGUF_U32:  *u = v.u32; *i = v.u32; return 1;
    case KVS_GGUF_I8:   *i = v.i8;  break;
    case KVS_GGUF_I16:  *i = v.i16; break;
    case KVS_GGUF_I32:  *i = v.i32; break;
    case KVS_GGUF_I64:  *i = v.i64; break;
    case KVS_GGUF_U64:
        *u = v.u64;
        *i = v.u64 > (uint64_t) INT64_MAX ? INT64_MAX : (int64_t) v.u64;
        return 1;
    case KVS_GGUF_F32:  *f = v.f32; return 2;
    case KVS_GGUF_F64:  *f = v.f64; return 2;
    default:            return 0;
    }

    *u = *i < 0 ? 0 : (uint64_t) *i;

    return 1;
}


int
kvs_gguf_get_uint(const kvs_gguf_t *g, const char *key, uint64_t *v,
    kvs_err_t *err)
{
    double                f;
    int64_t               i;
    const kvs_gguf_kv_t  *kv = NULL;

    kv = kvs_gguf_find(g, key);
    if (kv == NULL) {
        return kvs_err_set(err, KVS_ENOTFOUND, "missing key '%s'", key);
    }

    if (kv->type == KVS_GGUF_BOOL
        || kvs_gguf_decode(kv->val, kv->type, &i, v, &f) != 1)
    {
        return kvs_err_set(err, KVS_ETYPE, "key '%s' is %s, expected an "
                           "integer", key, kvs_gguf_vtype_name(kv->type));
    }

    if (i < 0) {
        return kvs_err_set(err, KVS_ERANGE, "key '%s' is negative (%lld)",
                           key, (long long) i);
    }

    return KVS_OK;
}


int
kvs_gguf_get_float(const kvs_gguf_t *g, const char *key, double *v,
    kvs_err_t *err)
{
    int64_t               i;
    uint64_t              u;
    const kvs_gguf_kv_t  *kv = NULL;

    kv = kvs_gguf_find(g, key);
    if (kv == NULL) {
        return kvs_err_set(err, KVS_ENOTFOUND, "missing key '%s'", key);
    }

    if (kvs_gguf_decode(kv->val, kv->type, &i, &u, v) != 2) {
        return kvs_err_set(err, KVS_ETYPE, "key '%s' is %s, expected f32 "
                           "or f64", key, kvs_gguf_vtype_name(kv->type));
    }

    return KVS_OK;
}


/* Array elements. */

static const uint8_t *
kvs_gguf_arr_elem(const kvs_gguf_arr_t *a, uint64_t i)
{
    size_t  size;

    size = kvs_gguf_vtype_size(a->type);
    if (size == 0 || i >= a->n) {
        return NULL;
    }

    return a->data + i * size;
}


int
kvs_gguf_arr_int(const kvs_gguf_arr_t *a, uint64_t i, int64_t *v)
{
    double          f;
    uint64_t        u;
    const uint8_t  *p;

    p = kvs_gguf_arr_elem(a, i);
    if (p == NULL) {
        return KVS_EINVAL;
    }

    return kvs_gguf_decode(p, a->type, v, &u, &f) == 1 ? KVS_OK : KVS_ETYPE;
}


int
kvs_gguf_arr_uint(const kvs_gguf_arr_t *a, uint64_t i, uint64_t *v)
{
    double          f;
    int64_t         s;
    const uint8_t  *p;

    p = kvs_gguf_arr_elem(a, i);
    if (p == NULL) {
        return KVS_EINVAL;
    }

    if (kvs_gguf_decode(p, a->type, &s, v, &f) != 1) {
        return KVS_ETYPE;
    }

    return s < 0 ? KVS_ERANGE : KVS_OK;
}


int
kvs_gguf_arr_float(const kvs_gguf_arr_t *a, uint64_t i, double *v)
{
    int64_t         s;
    uint64_t        u;
    const uint8_t  *p;

    p = kvs_gguf_arr_elem(a, i);
    if (p == NULL) {
        return KVS_EINVAL;
    }

    return kvs_gguf_decode(p, a->type, &s, &u, v) == 2 ? KVS_OK : KVS_ETYPE;
}


void
kvs_gguf_iter_init(kvs_gguf_iter_t *it, const kvs_gguf_arr_t *arr)
{
    it->arr = arr;
    it->p = arr->data;
    it->i = 0;
}


/* Bytes taken by one element of type `type` at p, bounded by end. */
static uint64_t
kvs_gguf_elem_len(const uint8_t *p, const uint8_t *end, uint32_t type)
{
    uint32_t  et;
    uint64_t  len, n, i, sub, total;

    if (kvs_gguf_vtype_size(type) != 0) {
        return kvs_gguf_vtype_size(type);
    }

    if (end - p < 8) {
        return UINT64_MAX;
    }

    if (type == KVS_GGUF_STR) {
        memcpy(&len, p, 8);
        return len > (uint64_t) (end - p - 8) ? UINT64_MAX : 8 + len;
    }

    if (end - p < 12) {
        return UINT64_MAX;
    }

    memcpy(&et, p, 4);
    memcpy(&n, p + 4, 8);
    total = 12;

    if (kvs_gguf_vtype_size(et) != 0) {
        if (n > (uint64_t) (end - p - 12) / kvs_gguf_vtype_size(et)) {
            return UINT64_MAX;
        }
        return total + n * kvs_gguf_vtype_size(et);
    }

    for (i = 0; i < n; i++) {
        sub = kvs_gguf_elem_len(p + total, end, et);
        if (sub == UINT64_MAX) {
            return UINT64_MAX;
        }
        total += sub;
    }

    return total;
}


int
kvs_gguf_iter_str(kvs_gguf_iter_t *it, kvs_gguf_str_t *s)
{
    uint64_t  len;

    if (it->arr->type != KVS_GGUF_STR || it->i >= it->arr->n) {
        return 0;
    }

    len = kvs_gguf_elem_len(it->p, it->arr->end, KVS_GGUF_STR);
    if (len == UINT64_MAX) {
        return 0;
    }

    s->len = len - 8;
    s->ptr = (const char *) it->p + 8;
    it->p += len;
    it->i++;

    return 1;
}


int
kvs_gguf_iter_arr(kvs_gguf_iter_t *it, kvs_gguf_arr_t *sub)
{
    uint32_t  et;
    uint64_t  len;

    if (it->arr->type != KVS_GGUF_ARR || it->i >= it->arr->n) {
        return 0;
    }

    len = kvs_gguf_elem_len(it->p, it->arr->end, KVS_GGUF_ARR);
    if (len == UINT64_MAX) {
        return 0;
    }

    memcpy(&et, it->p, 4);
    sub->type = (kvs_gguf_vtype_t) et;
    memcpy(&sub->n, it->p + 4, 8);
    sub->data = it->p + 12;
    sub->end = it->p + len;

    it->p += len;
    it->i++;

    return 1;
}
