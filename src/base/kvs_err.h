/*
 * kvs_err: the error value every library call fills.
 *
 * Library functions return a status (KVS_OK or a negative KVS_E* code) and,
 * on failure, write a one-line human message into a caller-owned kvs_err_t,
 * in the style of hiredis' err/errstr.  The message names what was wrong
 * (the field, the byte offset, the key) so that it can be shown to an
 * operator as is.  Nothing here allocates; a NULL err is allowed and means
 * "the caller only wants the status".
 */

#ifndef KVS_ERR_H
#define KVS_ERR_H

#include <stddef.h>

#define KVS_OK            0
#define KVS_EIO          -1    /* open/read/mmap/write failed (errno in msg) */
#define KVS_EFORMAT      -2    /* input is malformed or corrupt */
#define KVS_ENOMEM       -3    /* allocation failed */
#define KVS_ENOTFOUND    -4    /* key or object does not exist */
#define KVS_ETYPE        -5    /* exists, but has another type */
#define KVS_EINVAL       -6    /* bad argument from the caller */
#define KVS_EUNSUPPORTED -7    /* valid, but not something we handle */
#define KVS_ERANGE       -8    /* value does not fit the requested type */
#define KVS_ETOOLONG     -9    /* output would pass the caller's limit */

#define KVS_ERR_MSG_LEN  320

typedef struct {
    int   code;                       /* last KVS_E* code, KVS_OK if none */
    char  msg[KVS_ERR_MSG_LEN];       /* NUL-terminated, may be truncated */
} kvs_err_t;

/* Records code and a printf-style message; returns code for tail calls. */
int kvs_err_set(kvs_err_t *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to an already set message (context from callers). */
int kvs_err_prefix(kvs_err_t *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void kvs_err_clear(kvs_err_t *err);

/* Short name of a status code, e.g. "format" for KVS_EFORMAT. */
const char *kvs_err_name(int code);

#endif /* KVS_ERR_H */
