/*
 * kvs_api_msg_impl: helpers shared by the Messages parser's files
 * (kvs_api_msg.c: the body, messages and scalar fields;
 * kvs_api_msg_tools.c: tool blocks, tools and tool_choice).  Not part of
 * the API.  Every function fills *aerr (a 400 naming the field as the
 * client wrote it, or a 500 out of memory) when it fails.
 */

#ifndef KVS_API_MSG_IMPL_H
#define KVS_API_MSG_IMPL_H

#include "kvs_api_msg.h"
#include "kvs_api_req_impl.h"

int kvs_api_msg_nomem(kvs_api_err_t *aerr);
/* "path: why" as a 400 unsupported_value */
int kvs_api_msg_unsupported(const char *path, const char *why,
    kvs_api_err_t *aerr);
/* obj[key] (at path obj's) as a string; out->ptr NULL when absent */
int kvs_api_msg_str(const json_t *obj, const char *path, const char *key,
    int required, kvs_api_str_t *out, kvs_api_err_t *aerr);
/* dst[key] = v, arr += v (v's reference taken, NULL is out of memory) */
int kvs_api_msg_set(json_t *dst, const char *key, json_t *v,
    kvs_api_err_t *aerr);
int kvs_api_msg_append(json_t *arr, json_t *v, kvs_api_err_t *aerr);
/* block's cache_control copied onto dst */
int kvs_api_msg_cc(const json_t *block, json_t *dst, kvs_api_err_t *aerr);
/* a string or non-empty text blocks at path: *out a string or parts */
int kvs_api_msg_content(const json_t *c, const char *path, json_t **out,
    kvs_api_err_t *aerr);
/* {"type":"text","text":text}, NULL when out of memory */
json_t *kvs_api_msg_part(const char *text, size_t len);

/* kvs_api_msg_tools.c */
int kvs_api_msg_tool_result(const json_t *block, const char *path,
    json_t *msgs, kvs_api_err_t *aerr);
int kvs_api_msg_tool_use(const json_t *block, const char *path,
    json_t *calls, const json_t **cc, kvs_api_err_t *aerr);
int kvs_api_msg_tools(kvs_api_req_t *req, kvs_api_err_t *aerr);
int kvs_api_msg_tool_choice(kvs_api_req_t *req, kvs_api_err_t *aerr);
void kvs_api_msg_tool_paths(kvs_api_err_t *aerr);

#endif /* KVS_API_MSG_IMPL_H */
