/*
 * kvs_wire_impl.h: private to src/wire: the decoding cursor, the frame
 * reservation, the byte writers (integers: base/kvs_le.h), and the
 * bodies' fixed fields described as data (kvs_wire_layout.c), shared by
 * kvs_wire.c, kvs_wire_enc.c and kvs_wire_dec.c.
 *
 * Invariants: a kvs_wire_rd_t's left is the number of body bytes at p
 * not yet read, and every reader checks it before reading; a frame begun
 * with kvs_wire_begin() has its whole size reserved, so writers after it
 * need no checks, and it becomes part of the buffer only at
 * kvs_wire_commit().  A field table is the one place a body's fixed
 * fields are laid out: the encoder writes through it, the decoder reads
 * through it.  Only src/base is called, so the fuzz target links
 * src/wire alone.
 */

#ifndef KVS_WIRE_IMPL_H
#define KVS_WIRE_IMPL_H

#include <stddef.h>
#include <string.h>

#include "base/kvs_le.h"
#include "kvs_wire.h"

#define KVS_WIRE_SUBMIT_HEAD  (4 + 8)     /* model, submit_ns: the
                                             message's, not the request's */
#define KVS_WIRE_OUT_FIXED    (4 + 4 + 12 + 24 + 12 + 16 + 8 + 4 + 4)
#define KVS_WIRE_LP_FIXED     (4 + 4 + 1)
#define KVS_WIRE_LP_TOP       (4 + 4)

typedef struct {
    const uint8_t  *p;
    size_t          left;             /* body bytes not yet read */
    const char     *what;             /* message type name */
    kvs_err_t      *err;
} kvs_wire_rd_t;

/* How a field travels and what its decoder checks. */
typedef enum {
    KVS_WIRE_INT = 0,                 /* unsigned integer: the bits as
                                         they are (i32 too); at most max
                                         when max is not 0 */
    KVS_WIRE_FLAG,                    /* an int, sent as 0 or 1 */
    KVS_WIRE_FINITE,                  /* a float, finite */
    KVS_WIRE_ZERO                     /* reserved: sent as 0, must be 0;
                                         nothing in memory */
} kvs_wire_kind_t;

/* One fixed field of a body: wire bytes 1, 2, 4 or 8 (FLAG 1, FINITE
 * 4), held at off in the struct in mem bytes (4 or 8; FLAG an int,
 * FINITE a float), named as the decoder's errors name it. */
typedef struct {
    const char  *name;
    uint8_t      kind;                /* kvs_wire_kind_t */
    uint8_t      wire;
    uint32_t     max;                 /* INT: the largest value; 0: any */
    uint8_t      mem;
    size_t       off;
} kvs_wire_field_t;

/* mem and off of a member of type, to end a kvs_wire_field_t. */
#define KVS_WIRE_AT(type, member)                                             \
    sizeof(((type *) 0)->member), offsetof(type, member)

typedef struct {
    const kvs_wire_field_t  *f;
    size_t                   n;
} kvs_wire_fields_t;

/* The layouts, each in wire order (kvs_wire_layout.c). */
extern const kvs_wire_fields_t  kvs_wire_hello_model;   /* but the name */
extern const kvs_wire_fields_t  kvs_wire_submit_req;    /* after the head */
extern const kvs_wire_fields_t  kvs_wire_submit_bias;   /* one entry */
extern const kvs_wire_fields_t  kvs_wire_submit_pin;    /* one pin */
extern const kvs_wire_fields_t  kvs_wire_stats_model;   /* but the tenants */
extern const kvs_wire_fields_t  kvs_wire_stats_tenant;  /* after the key */
extern const kvs_wire_fields_t  kvs_wire_index_head;    /* but the names */


/* --- byte writers (integers: base/kvs_le.h) ------------------------------ */

static inline uint8_t *
kvs_wire_putf(uint8_t *p, float f)
{
    uint32_t  v;

    memcpy(&v, &f, sizeof(v));

    return kvs_le_put32(p, v);
}


static inline uint8_t *
kvs_wire_putb(uint8_t *p, const void *s, size_t n)
{
    if (n > 0) {
        memcpy(p, s, n);
    }

    return p + n;
}


static inline uint8_t *
kvs_wire_put_ids(uint8_t *p, const int32_t *ids, size_t n)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        p = kvs_le_put32(p, (uint32_t) ids[i]);
    }

    return p;
}


/* --- decoding cursor (kvs_wire.c) ---------------------------------------- */

int kvs_wire_need(kvs_wire_rd_t *rd, size_t n, const char *field);
/* Checks that count elements of size bytes each fit in what is left. */
int kvs_wire_need_n(kvs_wire_rd_t *rd, uint64_t count, size_t size,
    const char *field);
/* The next n bytes, consumed; NULL (error set) when fewer are left. */
const uint8_t *kvs_wire_take(kvs_wire_rd_t *rd, const char *field,
    size_t n);
/* Copies the next n bytes, as they are, to s. */
int kvs_wire_bytes(kvs_wire_rd_t *rd, const char *field, size_t n,
    void *s);
/* Reads an integer of wire bytes into one of mem bytes at v (both 1, 2,
 * 4 or 8; a narrower mem keeps the low bytes). */
int kvs_wire_int(kvs_wire_rd_t *rd, const char *field, size_t wire,
    void *v, size_t mem);
/* An integer of mem bytes (1, 2, 4 or 8) at at, whatever its type. */
void kvs_wire_store(void *at, size_t mem, uint64_t v);
uint64_t kvs_wire_load(const void *at, size_t mem);
int kvs_wire_u8(kvs_wire_rd_t *rd, const char *field, uint8_t *v);
int kvs_wire_u16(kvs_wire_rd_t *rd, const char *field, uint16_t *v);
int kvs_wire_u32(kvs_wire_rd_t *rd, const char *field, uint32_t *v);
int kvs_wire_i32(kvs_wire_rd_t *rd, const char *field, int32_t *v);
int kvs_wire_u64(kvs_wire_rd_t *rd, const char *field, uint64_t *v);
/* A float any value of (logprobs: -inf is a real answer). */
int kvs_wire_f32(kvs_wire_rd_t *rd, const char *field, float *v);
int kvs_wire_finite(kvs_wire_rd_t *rd, const char *field, float *v);
int kvs_wire_flag(kvs_wire_rd_t *rd, const char *field, int *v);
/* Copies len bytes into s[len + 1] and NUL-terminates. */
int kvs_wire_str(kvs_wire_rd_t *rd, const char *field, size_t len,
    char *s);
/* n token ids, already checked to fit (kvs_wire_need_n). */
void kvs_wire_ids(kvs_wire_rd_t *rd, size_t n, int32_t *ids);
/* Starts reading f[f_len], which must be one whole frame of type. */
int kvs_wire_start(kvs_wire_rd_t *rd, const uint8_t *f, size_t f_len,
    unsigned type, kvs_err_t *err);
/* KVS_EFORMAT unless the body was consumed exactly. */
int kvs_wire_end(kvs_wire_rd_t *rd);


/* --- frame reservation (kvs_wire.c) -------------------------------------- */

/* Reserves a frame of len bytes at the end of b and writes its header;
 * *pp is where the body goes.  KVS_ERANGE past the frame limit,
 * KVS_ENOMEM when b cannot grow. */
int kvs_wire_begin(kvs_buf_t *b, size_t len, unsigned type, uint64_t id,
    uint8_t **pp, kvs_err_t *err);
/* Commits the frame begun at the end of b. */
void kvs_wire_commit(kvs_buf_t *b, const uint8_t *end);


/* --- layouts (kvs_wire_layout.c) ----------------------------------------- */

/* Bytes the fields take on the wire. */
size_t kvs_wire_fields_size(const kvs_wire_fields_t *fs);
/* Writes the fields of the struct at base; the encoder has checked them. */
uint8_t *kvs_wire_put_fields(uint8_t *p, const kvs_wire_fields_t *fs,
    const void *base);
/* Reads and checks them into the struct at base, in wire order. */
int kvs_wire_get_fields(kvs_wire_rd_t *rd, const kvs_wire_fields_t *fs,
    void *base);
/* SUBMIT's stop string i and pin i, as both sides check them; code is
 * KVS_ERANGE for the encoder, KVS_EFORMAT for the decoder. */
int kvs_wire_stop_check(size_t i, size_t len, int code, kvs_err_t *err);
int kvs_wire_pin_check(const kvs_engine_pin_t *pin, size_t i,
    uint32_t n_prompt, int code, kvs_err_t *err);

#endif /* KVS_WIRE_IMPL_H */
