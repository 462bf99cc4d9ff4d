/*
 * kvs_api_req_impl: helpers shared by the request parsers
 * (kvs_api_req.c: the body, typed checkers and errors;
 * kvs_api_req_fields.c: the scalar fields; kvs_api_req_msg.c: chat
 * messages and completions prompts; kvs_api_req_cache.c: their
 * cache_control breakpoints).  Not part of the API.
 *
 * Every checker takes the value itself (never NULL: callers treat an
 * absent field and JSON null alike, through kvs_api_opt()) and the JSON
 * path the client sees in param; on failure it fills *aerr with a 400
 * in OpenAI's wording and returns KVS_EINVAL.
 */

#ifndef KVS_API_REQ_IMPL_H
#define KVS_API_REQ_IMPL_H

#include "kvs_api_req.h"

#define KVS_API_PATH_LEN  64          /* sizeof(kvs_api_err_t.param) */

/* Writes a field path into path[KVS_API_PATH_LEN], cut if longer (only
 * absurd array indices make it so). */
void kvs_api_path(char *path, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* obj[key], or NULL when absent or null. */
const json_t *kvs_api_opt(const json_t *obj, const char *key);

/* "a string", "an integer", ... for "but got %s instead". */
const char *kvs_api_json_what(const json_t *v);

int kvs_api_type_err(const char *path, const char *expected,
    const json_t *v, kvs_api_err_t *aerr);
int kvs_api_missing(const char *path, kvs_api_err_t *aerr);
/* any key of obj (at path) not in keys[] (NULL-ended) is a 400 naming it */
int kvs_api_keys(const json_t *obj, const char *path,
    const char *const *keys, kvs_api_err_t *aerr);
/* OpenAI's "array too long" for an array at path of n > max elements */
int kvs_api_array_too_long(const char *path, size_t max, size_t n,
    kvs_api_err_t *aerr);

int kvs_api_num(const json_t *v, const char *path, double lo, double hi,
    double *out, kvs_api_err_t *aerr);
int kvs_api_int(const json_t *v, const char *path, int64_t lo, int64_t hi,
    int64_t *out, kvs_api_err_t *aerr);
int kvs_api_bool(const json_t *v, const char *path, int *out,
    kvs_api_err_t *aerr);
int kvs_api_str(const json_t *v, const char *path, kvs_api_str_t *out,
    kvs_api_err_t *aerr);

/* A number as the client wrote it, near enough, for messages. */
void kvs_api_num_text(const json_t *v, char *buf, size_t size);

/* req emptied, of kind, with the defaults every kind shares (n 1,
 * temperature and top_p 1). */
void kvs_api_req_init(kvs_api_req_t *req, kvs_api_kind_t kind);

/* body[len] into req->root: the size limit (413), strict JSON (no NUL,
 * no duplicate keys, valid UTF-8) and an object, with the parser's
 * errors; the tokenize endpoints' bodies load the same way. */
int kvs_api_req_load(kvs_api_req_t *req, const char *body, size_t len,
    size_t max_body, kvs_api_err_t *aerr);

/* The fields both endpoints have, then each endpoint's own. */
int kvs_api_req_common(kvs_api_req_t *req, kvs_api_err_t *aerr);
int kvs_api_req_chat(kvs_api_req_t *req, kvs_api_err_t *aerr);
int kvs_api_req_cmpl(kvs_api_req_t *req, kvs_api_err_t *aerr);

/* Both: req->rf_* from root.response_format (kvs_api_req_rf.c); after
 * the other fields (it checks stop against it). */
int kvs_api_req_response_format(kvs_api_req_t *req, kvs_api_err_t *aerr);

/* Chat: req->tools, tool_choice, parallel_tool_calls, and the tool
 * messages' answers (kvs_api_req_tools.c); after the messages. */
int kvs_api_req_tools(kvs_api_req_t *req, kvs_api_err_t *aerr);

/* Chat: msg's tool_calls (at path msg's), allowed on the assistant's. */
int kvs_api_req_tool_calls(const json_t *msg, const char *path,
    int assistant, kvs_api_err_t *aerr);

/* Chat: req->messages from root.messages. */
int kvs_api_req_messages(kvs_api_req_t *req, kvs_api_err_t *aerr);

/* Chat: obj's cache_control (obj is a message, part -1, or its content
 * part), at path obj's, appended to req->breaks when given. */
int kvs_api_req_cache_control(kvs_api_req_t *req, const json_t *obj,
    const char *path, uint32_t message, int32_t part, kvs_api_err_t *aerr);

/* Completions: req->prompts from root.prompt. */
int kvs_api_req_prompts(kvs_api_req_t *req, kvs_api_err_t *aerr);

#endif /* KVS_API_REQ_IMPL_H */
