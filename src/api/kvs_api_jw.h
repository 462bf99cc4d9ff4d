/*
 * kvs_api_jw: the small JSON writer of the response bodies, shared by
 * the chat route's (kvs_api_resp.c, where it is defined) and the
 * Messages route's (kvs_api_msg_resp.c).  Not part of the API.
 *
 * Once an append fails every later one is a no-op and rc keeps the
 * failure, so a body is written as straight-line code and checked once
 * by kvs_jw_end(), which cuts the buffer back to len0 on failure.
 * Strings are escaped as kvs_api_resp.h says (invalid UTF-8 becomes
 * U+FFFD, U+2028/2029 escaped): the output is valid JSON whatever the
 * bytes.
 */

#ifndef KVS_API_JW_H
#define KVS_API_JW_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_buf.h"

typedef struct {
    kvs_buf_t  *b;
    int         rc;
} kvs_jw_t;

void kvs_jw_put(kvs_jw_t *w, const void *p, size_t n);
void kvs_jw_lit(kvs_jw_t *w, const char *s);
void kvs_jw_u64(kvs_jw_t *w, uint64_t v);
void kvs_jw_str(kvs_jw_t *w, const char *s, size_t len);
int kvs_jw_end(kvs_jw_t *w, size_t len0);

#endif /* KVS_API_JW_H */
