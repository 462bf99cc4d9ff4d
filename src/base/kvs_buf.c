/*
 * kvs_buf: growable byte buffer (see kvs_buf.h for the invariants).
 */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_buf.h"
#include "kvs_err.h"


int
kvs_buf_reserve(kvs_buf_t *b, size_t extra)
{
    size_t   cap;
    uint8_t  *p;

    if (extra > SIZE_MAX - b->len) {
        return KVS_ENOMEM;
    }

    if (b->len + extra <= b->cap) {
        return KVS_OK;
    }

    cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) {
        cap = cap > SIZE_MAX / 2 ? b->len + extra : cap * 2;
    }

    p = realloc(b->data, cap);
    if (p == NULL) {
        return KVS_ENOMEM;
    }

    b->data = p;
    b->cap = cap;

    return KVS_OK;
}


int
kvs_buf_append(kvs_buf_t *b, const void *p, size_t n)
{
    if (kvs_buf_reserve(b, n) != KVS_OK) {
        return KVS_ENOMEM;
    }

    if (n) {
        memcpy(b->data + b->len, p, n);
        b->len += n;
    }

    return KVS_OK;
}


int
kvs_buf_printf(kvs_buf_t *b, const char *fmt, ...)
{
    int      n;
    va_list  ap;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);

    if (n < 0 || kvs_buf_reserve(b, (size_t) n + 1) != KVS_OK) {
        return KVS_ENOMEM;
    }

    va_start(ap, fmt);
    vsnprintf((char *) b->data + b->len, (size_t) n + 1, fmt, ap);
    va_end(ap);

    b->len += (size_t) n;

    return KVS_OK;
}


void
kvs_buf_free(kvs_buf_t *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}


int
kvs_grow(void **p, size_t *cap, size_t need, size_t size)
{
    size_t   c;
    void    *q;

    if (need <= *cap) {
        return KVS_OK;
    }

    c = *cap ? *cap : 64;
    while (c < need) {
        c = c > SIZE_MAX / 4 ? need : c * 2;
    }

    if (size == 0 || c > SIZE_MAX / size) {
        return KVS_ENOMEM;
    }

    q = realloc(*p, c * size);
    if (q == NULL) {
        return KVS_ENOMEM;
    }

    *p = q;
    *cap = c;

    return KVS_OK;
}
