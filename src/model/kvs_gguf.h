/*
 * kvs_gguf: GGUF v2/v3 files (little-endian), read through mmap, and written.
 *
 * Reader invariants: kvs_gguf_open() walks the whole header once and checks
 * every count, length, type and offset against the file size before any of
 * it is trusted; after a successful open every pointer handed out points
 * inside the mapping and every array and string can be walked without
 * further bounds checks.  A failure names the field and its byte offset.
 *
 * Ownership: a kvs_gguf_t owns its mapping (or borrows the caller's buffer
 * for kvs_gguf_open_mem) and its index arrays.  Strings, arrays and tensor
 * data returned by getters point into the mapping and live as long as the
 * kvs_gguf_t; strings are NOT NUL-terminated.
 *
 * The host must be little-endian (checked at compile time).
 */

#ifndef KVS_GGUF_H
#define KVS_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"

#define KVS_GGUF_MAGIC              "GGUF"
#define KVS_GGUF_DEFAULT_ALIGNMENT  32
#define KVS_GGUF_MAX_DIMS           4
#define KVS_GGUF_MAX_NAME           255   /* tensor name bytes */
#define KVS_GGUF_MAX_DEPTH          8     /* nested arrays */

typedef enum {
    KVS_GGUF_U8   = 0,
    KVS_GGUF_I8   = 1,
    KVS_GGUF_U16  = 2,
    KVS_GGUF_I16  = 3,
    KVS_GGUF_U32  = 4,
    KVS_GGUF_I32  = 5,
    KVS_GGUF_F32  = 6,
    KVS_GGUF_BOOL = 7,
    KVS_GGUF_STR  = 8,
    KVS_GGUF_ARR  = 9,
    KVS_GGUF_U64  = 10,
    KVS_GGUF_I64  = 11,
    KVS_GGUF_F64  = 12,
    KVS_GGUF_VTYPE_END
} kvs_gguf_vtype_t;

typedef struct {
    const char      *ptr;             /* into the mapping; not NUL-ended */
    uint64_t         len;             /* bytes */
} kvs_gguf_str_t;

typedef struct {
    kvs_gguf_vtype_t  type;           /* element type */
    uint64_t          n;              /* element count */
    const uint8_t    *data;           /* first element's encoding */
    const uint8_t    *end;            /* one past the last element's bytes */
} kvs_gguf_arr_t;

typedef struct {
    kvs_gguf_str_t    key;
    kvs_gguf_vtype_t  type;
    uint64_t          offset;         /* file offset of the value */
    const uint8_t    *val;            /* value encoding, in the mapping */
    kvs_gguf_arr_t    arr;            /* valid when type == KVS_GGUF_ARR */
} kvs_gguf_kv_t;

typedef struct {
    kvs_gguf_str_t    name;
    uint32_t          n_dims;         /* 1..KVS_GGUF_MAX_DIMS */
    uint64_t          ne[KVS_GGUF_MAX_DIMS];  /* ne[0] innermost; 1 past n_dims */
    uint32_t          type;           /* kvs_ggml_type_t */
    uint64_t          offset;         /* relative to the data section */
    uint64_t          offset_at;      /* file offset of that offset field */
    uint64_t          nelem;
    uint64_t          nbytes;
    const void       *data;           /* in the mapping */
} kvs_gguf_tensor_t;

typedef struct kvs_gguf_s  kvs_gguf_t;

/* Reader. */

int kvs_gguf_open(kvs_gguf_t **out, const char *path, kvs_err_t *err);

/* Parses a caller-owned buffer in place; buf must outlive the result. */
int kvs_gguf_open_mem(kvs_gguf_t **out, const void *buf, size_t len,
    kvs_err_t *err);

void kvs_gguf_close(kvs_gguf_t *g);

uint32_t kvs_gguf_version(const kvs_gguf_t *g);
uint64_t kvs_gguf_file_size(const kvs_gguf_t *g);

/* xxh3-64 of the whole file: the identity of its weights (reads every
 * page of the mapping). */
uint64_t kvs_gguf_content_hash(const kvs_gguf_t *g);
uint32_t kvs_gguf_alignment(const kvs_gguf_t *g);
uint64_t kvs_gguf_data_offset(const kvs_gguf_t *g);
uint64_t kvs_gguf_n_kv(const kvs_gguf_t *g);
uint64_t kvs_gguf_n_tensors(const kvs_gguf_t *g);

const kvs_gguf_kv_t *kvs_gguf_kv_at(const kvs_gguf_t *g, uint64_t i);
const kvs_gguf_kv_t *kvs_gguf_find(const kvs_gguf_t *g, const char *key);
const kvs_gguf_tensor_t *kvs_gguf_tensor_at(const kvs_gguf_t *g, uint64_t i);
const kvs_gguf_tensor_t *kvs_gguf_find_tensor(const kvs_gguf_t *g,
    const char *name);

/*
 * Typed getters: KVS_OK, KVS_ENOTFOUND (no such key) or KVS_ETYPE (the key
 * holds another type); the message names the key and both types.
 */
int kvs_gguf_get_u8(const kvs_gguf_t *g, const char *key, uint8_t *v,
    kvs_err_t *err);
int kvs_gguf_get_i8(const kvs_gguf_t *g, const char *key, int8_t *v,
    kvs_err_t *err);
int kvs_gguf_get_u16(const kvs_gguf_t *g, const char *key, uint16_t *v,
    kvs_err_t *err);
int kvs_gguf_get_i16(const kvs_gguf_t *g, const char *key, int16_t *v,
    kvs_err_t *err);
int kvs_gguf_get_u32(const kvs_gguf_t *g, const char *key, uint32_t *v,
    kvs_err_t *err);
int kvs_gguf_get_i32(const kvs_gguf_t *g, const char *key, int32_t *v,
    kvs_err_t *err);
int kvs_gguf_get_u64(const kvs_gguf_t *g, const char *key, uint64_t *v,
    kvs_err_t *err);
int kvs_gguf_get_i64(const kvs_gguf_t *g, const char *key, int64_t *v,
    kvs_err_t *err);
int kvs_gguf_get_f32(const kvs_gguf_t *g, const char *key, float *v,
    kvs_err_t *err);
int kvs_gguf_get_f64(const kvs_gguf_t *g, const char *key, double *v,
    kvs_err_t *err);
int kvs_gguf_get_bool(const kvs_gguf_t *g, const char *key, int *v,
    kvs_err_t *err);
int kvs_gguf_get_str(const kvs_gguf_t *g, const char *key,
    kvs_gguf_str_t *v, kvs_err_t *err);
int kvs_gguf_get_arr(const kvs_gguf_t *g, const char *key,
    kvs_gguf_arr_t *v, kvs_err_t *err);

/*
 * Lenient getters for hyper-parameters, which converters store with
 * varying widths: any integer type (KVS_ERANGE if negative), and f32 or
 * f64 for floats.
 */
int kvs_gguf_get_uint(const kvs_gguf_t *g, const char *key, uint64_t *v,
    kvs_err_t *err);
int kvs_gguf_get_float(const kvs_gguf_t *g, const char *key, double *v,
    kvs_err_t *err);

/* Values and arrays. */

const char *kvs_gguf_vtype_name(uint32_t type);   /* "u32", ...; "?" */
size_t kvs_gguf_vtype_size(uint32_t type);        /* 0: str, arr, unknown */

/* Element i of an array of integers / bools (as 0/1), or of floats. */
int kvs_gguf_arr_int(const kvs_gguf_arr_t *a, uint64_t i, int64_t *v);
int kvs_gguf_arr_uint(const kvs_gguf_arr_t *a, uint64_t i, uint64_t *v);
int kvs_gguf_arr_float(const kvs_gguf_arr_t *a, uint64_t i, double *v);

/* Walks an array of strings or of arrays in order. */
typedef struct {
    const kvs_gguf_arr_t  *arr;
    const uint8_t         *p;
    uint64_t               i;
} kvs_gguf_iter_t;

void kvs_gguf_iter_init(kvs_gguf_iter_t *it, const kvs_gguf_arr_t *arr);
/* 1 with the next element, 0 at the end (or on a type mismatch). */
int kvs_gguf_iter_str(kvs_gguf_iter_t *it, kvs_gguf_str_t *s);
int kvs_gguf_iter_arr(kvs_gguf_iter_t *it, kvs_gguf_arr_t *sub);

/* 1 if s equals the NUL-terminated cstr. */
int kvs_gguf_str_eq(kvs_gguf_str_t s, const char *cstr);

/* Writer: see kvs_gguf_write.c. */

typedef struct kvs_gguf_writer_s  kvs_gguf_writer_t;

/* Fills the tensor's bytes; returns KVS_OK or an error. */
typedef int (*kvs_gguf_fill_pt)(void *ctx, const char *name, void *dst,
    uint64_t nbytes, kvs_err_t *err);

int kvs_gguf_writer_new(kvs_gguf_writer_t **out, uint32_t version,
    kvs_err_t *err);
void kvs_gguf_writer_free(kvs_gguf_writer_t *w);

/*
 * Metadata.  A key is written with kvs_gguf_w_key() and then exactly one
 * value; an array value is kvs_gguf_w_arr() followed by n elements, each
 * an encoding of the declared element type (arrays nest).  The writer
 * checks that sequence and refuses to write a file that breaks it.
 * Setting "general.alignment" (u32, a power of two) also sets the
 * alignment used for tensor data.
 */
int kvs_gguf_w_key(kvs_gguf_writer_t *w, const char *key,
    kvs_gguf_vtype_t type);
int kvs_gguf_w_scalar(kvs_gguf_writer_t *w, kvs_gguf_vtype_t type,
    const void *v);
int kvs_gguf_w_str(kvs_gguf_writer_t *w, const char *s, size_t len);
int kvs_gguf_w_arr(kvs_gguf_writer_t *w, kvs_gguf_vtype_t elem,
    uint64_t n);
/* n fixed-size elements at once (little-endian native layout). */
int kvs_gguf_w_elems(kvs_gguf_writer_t *w, const void *v, uint64_t n);

/* kv (another file's key and value, arrays nested) written as it is. */
int kvs_gguf_w_copy(kvs_gguf_writer_t *w, const kvs_gguf_kv_t *kv);

/* Conveniences: key plus one value. */
int kvs_gguf_set_u32(kvs_gguf_writer_t *w, const char *key, uint32_t v);
int kvs_gguf_set_i32(kvs_gguf_writer_t *w, const char *key, int32_t v);
int kvs_gguf_set_f32(kvs_gguf_writer_t *w, const char *key, float v);
int kvs_gguf_set_bool(kvs_gguf_writer_t *w, const char *key, int v);
int kvs_gguf_set_str(kvs_gguf_writer_t *w, const char *key, const char *s);

/* Declares a tensor; its bytes come from data, or from fill() if NULL. */
int kvs_gguf_w_tensor(kvs_gguf_writer_t *w, const char *name,
    uint32_t type, uint32_t n_dims, const uint64_t *ne, const void *data);

/* Writes the file (to path.tmp, then renamed). */
int kvs_gguf_writer_write(kvs_gguf_writer_t *w, const char *path,
    kvs_gguf_fill_pt fill, void *ctx, kvs_err_t *err);

#endif /* KVS_GGUF_H */
