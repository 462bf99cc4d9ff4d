/*
 * kvs_buf: a growable byte buffer owned by whoever holds the struct.
 * A zeroed kvs_buf_t is empty and valid; kvs_buf_free() returns it to that
 * state.  Growth is geometric; on allocation failure the buffer is left
 * as it was and KVS_ENOMEM is returned.
 */

#ifndef KVS_BUF_H
#define KVS_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t  *data;
    size_t    len;                    /* bytes used */
    size_t    cap;                    /* bytes allocated */
} kvs_buf_t;

int kvs_buf_reserve(kvs_buf_t *b, size_t extra);
int kvs_buf_append(kvs_buf_t *b, const void *p, size_t n);
int kvs_buf_printf(kvs_buf_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void kvs_buf_free(kvs_buf_t *b);

/* Ensures the array *p of *cap elements, size bytes each, holds at least
 * need elements, doubling (from 64); on failure (KVS_ENOMEM) *p and *cap
 * are unchanged. */
int kvs_grow(void **p, size_t *cap, size_t need, size_t size);

#endif /* KVS_BUF_H */
