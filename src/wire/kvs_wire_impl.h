/*
 * kvs_wire_impl.h: private to src/wire: the fixed body sizes, the
 * float and byte writers (integers: base/kvs_le.h), the decoding cursor
 * and the frame reservation shared by kvs_wire.c, kvs_wire_enc.c and
 * kvs_wire_dec.c.
 *
 * Invariants: a kvs_wire_rd_t's left is the number of body bytes at p
 * not yet read, and every reader checks it before reading; a frame begun
 * with kvs_wire_begin() has its whole size reserved, so writers after it
 * need no checks, and it becomes part of the buffer only at
 * kvs_wire_commit().  Only src/base is called, so the fuzz target links
 * src/wire alone.
 */

#ifndef KVS_WIRE_IMPL_H
#define KVS_WIRE_IMPL_H

#include <string.h>

#include "base/kvs_le.h"
#include "kvs_wire.h"

#define KVS_WIRE_SUBMIT_FIXED 84
#define KVS_WIRE_OUT_FIXED    (4 + 4 + 12 + 24 + 12 + 16)
#define KVS_WIRE_LP_FIXED     (4 + 4 + 1)
#define KVS_WIRE_LP_TOP       (4 + 4)
#define KVS_WIRE_STATS_REC    (4 + 17 * 8 + 8 * 4)
#define KVS_WIRE_TENANT_REC   (8 + 8 + 4 + 4)

typedef struct {
    const uint8_t  *p;
    size_t          left;             /* body bytes not yet read */
    const char     *what;             /* message type name */
    kvs_err_t      *err;
} kvs_wire_rd_t;


/* --- little-endian primitives (integers: base/kvs_le.h) --------------- */

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


/* --- decoding cursor (kvs_wire.c) ------------------------------------- */

int kvs_wire_need(kvs_wire_rd_t *rd, size_t n, const char *field);
/* Checks that count elements of size bytes each fit in what is left. */
int kvs_wire_need_n(kvs_wire_rd_t *rd, uint64_t count, size_t size,
    const char *field);
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
/* Starts reading f[f_len], which must be one whole frame of type. */
int kvs_wire_start(kvs_wire_rd_t *rd, const uint8_t *f, size_t f_len,
    unsigned type, kvs_err_t *err);
/* KVS_EFORMAT unless the body was consumed exactly. */
int kvs_wire_end(kvs_wire_rd_t *rd);


/* --- frame reservation (kvs_wire.c) ----------------------------------- */

/* Reserves a frame of len bytes at the end of b and writes its header;
 * *pp is where the body goes.  KVS_ERANGE past the frame limit,
 * KVS_ENOMEM when b cannot grow. */
int kvs_wire_begin(kvs_buf_t *b, size_t len, unsigned type, uint64_t id,
    uint8_t **pp, kvs_err_t *err);
/* Commits the frame begun at the end of b. */
void kvs_wire_commit(kvs_buf_t *b, const uint8_t *end);

#endif /* KVS_WIRE_IMPL_H */
