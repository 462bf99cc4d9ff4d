/*
 * kvs_api_msg: an Anthropic Messages body parsed into the kvs_api_req_t
 * of the chat route (kvs_api_msg.h says how it is translated).
 *
 *   model            required string
 *   max_tokens       required integer >= 1 (not for count_tokens)
 *   system           a string, or text blocks [{"type":"text","text",
 *                    "cache_control"}]: the first message, "system"
 *   messages         [{"role":"user"|"assistant","content": a string or
 *                    blocks}]: text (both), tool_use (assistant: id,
 *                    name, input object), tool_result (user, before its
 *                    other blocks: tool_use_id, content a string or text
 *                    blocks, is_error); image and document are refused;
 *                    a last assistant message (a prefill) is refused
 *   stop_sequences   up to KVS_API_MAX_STOP strings of 1..256 bytes
 *   temperature      0..1; top_p 0..1; top_k >= 1
 *   metadata         {"user_id": string}: the request's user
 *   stream           boolean
 *   tools            [{"name","description","input_schema","type":
 *                    "custom"}]; server tools are refused
 *   tool_choice      {"type":"auto"|"any"|"tool"|"none","name",
 *                    "disable_parallel_tool_use"}
 *   cache_control    top-level: a breakpoint after the last message
 *   thinking         only {"type":"disabled"}; mcp_servers and
 *                    container only null
 *
 * Invariants: every key of a block, tool, tool_choice and metadata that
 * is not listed above is a 400 naming it (never ignored); the
 * translation keeps the client's order, so a breakpoint on the n-th
 * block lands on the translated n-th part; on failure the request owns
 * nothing.  The translated chat body then goes through the chat route's
 * own checkers (messages, cache_control, tools), whose errors name the
 * translated field; paths of tools are given back their Anthropic names.
 * The tool blocks, tools and tool_choice are kvs_api_msg_tools.c's.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_api_msg_impl.h"


int
kvs_api_msg_nomem(kvs_api_err_t *aerr)
{
    kvs_api_err_set(aerr, 500, NULL, NULL, "Out of memory for the "
                    "request.");
    if (aerr != NULL) {
        snprintf(aerr->type, sizeof(aerr->type), "server_error");
    }

    return KVS_ENOMEM;
}


int
kvs_api_msg_unsupported(const char *path, const char *why,
    kvs_api_err_t *aerr)
{
    kvs_api_err_set(aerr, 400, path, "unsupported_value", "%s: %s", path,
                    why);
    return KVS_EINVAL;
}


/* obj[key] as a string, required or not; out->ptr NULL when absent. */
int
kvs_api_msg_str(const json_t *obj, const char *path, const char *key,
    int required, kvs_api_str_t *out, kvs_api_err_t *aerr)
{
    char           p[KVS_API_PATH_LEN];
    const json_t  *v;

    out->ptr = NULL;
    out->len = 0;
    v = kvs_api_opt(obj, key);
    kvs_api_path(p, "%s.%s", path, key);

    if (v == NULL) {
        return required ? kvs_api_missing(p, aerr) : KVS_OK;
    }

    return kvs_api_str(v, p, out, aerr);
}


/* dst[key] = v (a new reference taken); 0 or KVS_ENOMEM. */
int
kvs_api_msg_set(json_t *dst, const char *key, json_t *v,
    kvs_api_err_t *aerr)
{
    if (v == NULL || json_object_set_new(dst, key, v) != 0) {
        return kvs_api_msg_nomem(aerr);
    }

    return KVS_OK;
}


int
kvs_api_msg_append(json_t *arr, json_t *v, kvs_api_err_t *aerr)
{
    if (v == NULL || json_array_append_new(arr, v) != 0) {
        return kvs_api_msg_nomem(aerr);
    }

    return KVS_OK;
}


/* The block's cache_control, copied as it is onto dst (the chat
 * checker reads it there). */
int
kvs_api_msg_cc(const json_t *block, json_t *dst, kvs_api_err_t *aerr)
{
    const json_t  *cc;

    cc = kvs_api_opt(block, "cache_control");
    if (cc == NULL) {
        return KVS_OK;
    }

    return kvs_api_msg_set(dst, "cache_control", json_deep_copy(cc), aerr);
}


/* A block's "type", checked to be a string. */
static int
kvs_api_msg_type(const json_t *block, const char *path, const char **type,
    kvs_api_err_t *aerr)
{
    char           p[KVS_API_PATH_LEN];
    kvs_api_str_t  s;

    if (!json_is_object(block)) {
        return kvs_api_type_err(path, "an object", block, aerr);
    }

    if (kvs_api_msg_str(block, path, "type", 1, &s, aerr) != KVS_OK) {
        return KVS_EINVAL;
    }

    *type = s.ptr;

    if (strcmp(s.ptr, "image") == 0 || strcmp(s.ptr, "document") == 0) {
        kvs_api_path(p, "%s.type", path);
        kvs_api_err_set(aerr, 400, p, "unsupported_value", "%s: '%s' "
                        "content blocks are not supported: this server "
                        "serves text models; send the content as 'text' "
                        "blocks.", p, s.ptr);
        return KVS_EINVAL;
    }

    return KVS_OK;
}


/* {"type":"text","text":text}, or NULL when out of memory. */
json_t *
kvs_api_msg_part(const char *text, size_t len)
{
    json_t  *p;

    p = json_object();
    if (p == NULL
        || json_object_set_new(p, "type", json_string("text")) != 0
        || json_object_set_new(p, "text", json_stringn(text, len)) != 0)
    {
        json_decref(p);
        return NULL;
    }

    return p;
}


/* A text block at path into a chat text part appended to parts. */
static int
kvs_api_msg_text(const json_t *block, const char *path, json_t *parts,
    kvs_api_err_t *aerr)
{
    json_t         *part;
    kvs_api_str_t   text;

    static const char *const  keys[] = {
        "type", "text", "cache_control", NULL
    };

    if (kvs_api_keys(block, path, keys, aerr) != KVS_OK
        || kvs_api_msg_str(block, path, "text", 1, &text, aerr) != KVS_OK)
    {
        return KVS_EINVAL;
    }

    part = kvs_api_msg_part(text.ptr, text.len);
    if (kvs_api_msg_append(parts, part, aerr) != KVS_OK) {
        return KVS_ENOMEM;
    }

    return kvs_api_msg_cc(block, part, aerr);
}


/* Text blocks only (system, a tool_result's content), at path; parts
 * gets their translation. */
static int
kvs_api_msg_texts(const json_t *arr, const char *path, json_t *parts,
    kvs_api_err_t *aerr)
{
    int            rc;
    char           p[KVS_API_PATH_LEN], tp[KVS_API_PATH_LEN];
    size_t         j;
    const char    *type;
    const json_t  *b;

    for (j = 0; j < json_array_size(arr); j++) {
        b = json_array_get(arr, j);
        kvs_api_path(p, "%s[%zu]", path, j);

        if (kvs_api_msg_type(b, p, &type, aerr) != KVS_OK) {
            return KVS_EINVAL;
        }

        if (strcmp(type, "text") != 0) {
            kvs_api_path(tp, "%s.type", p);
            kvs_api_err_set(aerr, 400, tp, "invalid_value", "Invalid value: "
                            "'%.64s'. Supported values are: 'text'.", type);
            return KVS_EINVAL;
        }

        rc = kvs_api_msg_text(b, p, parts, aerr);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}


/* A string or text blocks (non-empty) at path: *out a new string or an
 * array of chat text parts. */
int
kvs_api_msg_content(const json_t *c, const char *path, json_t **out,
    kvs_api_err_t *aerr)
{
    int  rc;

    if (json_is_string(c)) {
        *out = json_stringn(json_string_value(c), json_string_length(c));
        return *out != NULL ? KVS_OK : kvs_api_msg_nomem(aerr);
    }

    if (!json_is_array(c)) {
        return kvs_api_type_err(path, "a string or an array of content "
                                "blocks", c, aerr);
    }

    if (json_array_size(c) == 0) {
        kvs_api_err_set(aerr, 400, path, "empty_array", "%s: empty array; "
                        "at least one content block is required.", path);
        return KVS_EINVAL;
    }

    *out = json_array();
    if (*out == NULL) {
        return kvs_api_msg_nomem(aerr);
    }

    rc = kvs_api_msg_texts(c, path, *out, aerr);
    if (rc != KVS_OK) {
        json_decref(*out);
        *out = NULL;
    }

    return rc;
}


/* The blocks of messages[i] (role user: 0, assistant: 1) into chat
 * messages appended to msgs: a user's tool results first, each a tool
 * message, then its other blocks as one message. */
static int
kvs_api_msg_blocks(const json_t *blocks, const char *path, int assistant,
    json_t *msgs, kvs_api_err_t *aerr)
{
    int            rc;
    char           p[KVS_API_PATH_LEN];
    size_t         j;
    json_t        *m, *parts, *calls;
    const char    *type;
    const json_t  *b, *cc;

    parts = json_array();
    calls = json_array();
    m = json_object();
    cc = NULL;

    if (parts == NULL || calls == NULL || m == NULL) {
        json_decref(parts);
        json_decref(calls);
        json_decref(m);
        return kvs_api_msg_nomem(aerr);
    }

    rc = KVS_OK;

    for (j = 0; j < json_array_size(blocks) && rc == KVS_OK; j++) {
        b = json_array_get(blocks, j);
        kvs_api_path(p, "%s[%zu]", path, j);

        rc = kvs_api_msg_type(b, p, &type, aerr);
        if (rc != KVS_OK) {
            break;
        }

        if (strcmp(type, "text") == 0) {
            rc = kvs_api_msg_text(b, p, parts, aerr);

        } else if (strcmp(type, "tool_use") == 0 && assistant) {
            rc = kvs_api_msg_tool_use(b, p, calls, &cc, aerr);

        } else if (strcmp(type, "tool_result") == 0 && !assistant) {
            if (json_array_size(parts) > 0) {
                rc = kvs_api_msg_unsupported(p, "tool_result blocks must "
                                             "come before the message's "
                                             "other blocks.", aerr);
            } else {
                rc = kvs_api_msg_tool_result(b, p, msgs, aerr);
            }

        } else if (strcmp(type, "tool_use") == 0
                   || strcmp(type, "tool_result") == 0)
        {
            kvs_api_path(p, "%s[%zu].type", path, j);
            kvs_api_err_set(aerr, 400, p, "invalid_value", "%s: '%s' "
                            "blocks are only allowed in %s messages.", p,
                            type, assistant ? "user" : "assistant");
            rc = KVS_EINVAL;

        } else {
            kvs_api_path(p, "%s[%zu].type", path, j);
            kvs_api_err_set(aerr, 400, p, "invalid_value", "Invalid value: "
                            "'%.64s'. Supported values are: 'text', "
                            "'tool_use' and 'tool_result'.", type);
            rc = KVS_EINVAL;
        }
    }

    if (rc != KVS_OK || (json_array_size(parts) == 0
                         && json_array_size(calls) == 0))
    {
        /* only tool results: no user message after them */
        json_decref(parts);
        json_decref(calls);
        json_decref(m);
        return rc;
    }

    if (kvs_api_msg_append(msgs, m, aerr) != KVS_OK) {
        json_decref(parts);
        json_decref(calls);
        return KVS_ENOMEM;
    }

    if (kvs_api_msg_set(m, "role", json_string(assistant ? "assistant"
                                                         : "user"), aerr)
        != KVS_OK)
    {
        json_decref(parts);
        json_decref(calls);
        return KVS_ENOMEM;
    }

    if (json_array_size(parts) > 0) {
        rc = kvs_api_msg_set(m, "content", parts, aerr);
    } else {
        json_decref(parts);
    }

    if (json_array_size(calls) > 0) {
        if (kvs_api_msg_set(m, "tool_calls", calls, aerr) != KVS_OK) {
            return KVS_ENOMEM;
        }
    } else {
        json_decref(calls);
    }

    if (rc == KVS_OK && cc != NULL) {
        rc = kvs_api_msg_cc(cc, m, aerr);
    }

    return rc;
}


static int
kvs_api_msg_message(const json_t *msg, size_t i, size_t n, json_t *msgs,
    kvs_api_err_t *aerr)
{
    int             assistant;
    char            path[KVS_API_PATH_LEN], p[KVS_API_PATH_LEN];
    json_t         *m, *content;
    const json_t   *c;
    kvs_api_str_t   role;

    static const char *const  keys[] = { "role", "content", NULL };

    kvs_api_path(path, "messages[%zu]", i);

    if (!json_is_object(msg)) {
        return kvs_api_type_err(path, "an object", msg, aerr);
    }

    if (kvs_api_keys(msg, path, keys, aerr) != KVS_OK
        || kvs_api_msg_str(msg, path, "role", 1, &role, aerr) != KVS_OK)
    {
        return KVS_EINVAL;
    }

    kvs_api_path(p, "%s.role", path);

    if (strcmp(role.ptr, "user") == 0) {
        assistant = 0;

    } else if (strcmp(role.ptr, "assistant") == 0) {
        assistant = 1;

    } else {
        kvs_api_err_set(aerr, 400, p, "invalid_value", "Invalid value: "
                        "'%.64s'. Supported values are: 'user' and "
                        "'assistant'.", role.ptr);
        return KVS_EINVAL;
    }

    if (assistant && i + 1 == n) {
        return kvs_api_msg_unsupported(path, "a last assistant message "
                                       "(a prefill for the answer to "
                                       "continue) is not supported; end "
                                       "with a user message.", aerr);
    }

    c = kvs_api_opt(msg, "content");
    kvs_api_path(p, "%s.content", path);

    if (c == NULL) {
        return kvs_api_missing(p, aerr);
    }

    if (json_is_array(c) && json_array_size(c) > 0) {
        return kvs_api_msg_blocks(c, p, assistant, msgs, aerr);
    }

    if (kvs_api_msg_content(c, p, &content, aerr) != KVS_OK) {
        return KVS_EINVAL;
    }

    m = json_object();
    if (kvs_api_msg_append(msgs, m, aerr) != KVS_OK
        || kvs_api_msg_set(m, "role", json_string(role.ptr), aerr) != KVS_OK)
    {
        json_decref(content);
        return KVS_ENOMEM;
    }

    return kvs_api_msg_set(m, "content", content, aerr);
}


static int
kvs_api_msg_system(const json_t *root, json_t *msgs, kvs_api_err_t *aerr)
{
    json_t        *m, *content;
    const json_t  *s;

    s = kvs_api_opt(root, "system");
    if (s == NULL) {
        return KVS_OK;
    }

    if (json_is_array(s) && json_array_size(s) == 0) {
        return KVS_OK;
    }

    if (kvs_api_msg_content(s, "system", &content, aerr) != KVS_OK) {
        return aerr != NULL && aerr->status == 500 ? KVS_ENOMEM : KVS_EINVAL;
    }

    m = json_object();
    if (kvs_api_msg_append(msgs, m, aerr) != KVS_OK
        || kvs_api_msg_set(m, "role", json_string("system"), aerr) != KVS_OK)
    {
        json_decref(content);
        return KVS_ENOMEM;
    }

    return kvs_api_msg_set(m, "content", content, aerr);
}


static int
kvs_api_msg_messages(kvs_api_req_t *req, kvs_api_err_t *aerr)
{
    int            rc;
    size_t         i, n;
    json_t        *msgs, *last;
    const json_t  *m;

    msgs = json_array();
    if (kvs_api_msg_set(req->root, "messages", msgs, aerr) != KVS_OK) {
        return KVS_ENOMEM;
    }

    rc = kvs_api_msg_system(req->msg_root, msgs, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    m = kvs_api_opt(req->msg_root, "messages");

    if (m == NULL) {
        return kvs_api_missing("messages", aerr);
    }

    if (!json_is_array(m)) {
        return kvs_api_type_err("messages", "an array", m, aerr);
    }

    n = json_array_size(m);

    if (n == 0) {
        kvs_api_err_set(aerr, 400, "messages", "empty_array", "messages: "
                        "at least one message is required.");
        return KVS_EINVAL;
    }

    for (i = 0; i < n; i++) {
        rc = kvs_api_msg_message(json_array_get(m, i), i, n, msgs, aerr);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    /* the top-level cache_control: a breakpoint after the last message
     * (unless that message has its own) */
    last = json_array_get(msgs, json_array_size(msgs) - 1);

    if (kvs_api_opt(req->msg_root, "cache_control") == NULL
        || kvs_api_opt(last, "cache_control") != NULL)
    {
        return KVS_OK;
    }

    return kvs_api_msg_cc(req->msg_root, last, aerr);
}


/* The sampling and output fields, stored into req as the chat route's. */
static int
kvs_api_msg_scalars(kvs_api_req_t *req, unsigned flags, kvs_api_err_t *aerr)
{
    char            p[KVS_API_PATH_LEN];
    double          d;
    size_t          i, n;
    int64_t         k;
    const json_t   *root, *v, *s;
    kvs_api_str_t   str;

    static const char *const  meta_keys[] = { "user_id", NULL };

    root = req->msg_root;

    v = kvs_api_opt(root, "max_tokens");

    if (v == NULL && !(flags & KVS_API_MSG_COUNT)) {
        return kvs_api_missing("max_tokens", aerr);
    }

    req->max_tokens = -1;

    if (v != NULL
        && kvs_api_int(v, "max_tokens", 1, INT32_MAX, &req->max_tokens, aerr)
           != KVS_OK)
    {
        return KVS_EINVAL;
    }

    v = kvs_api_opt(root, "temperature");
    if (v != NULL) {
        if (kvs_api_num(v, "temperature", 0, 1, &d, aerr) != KVS_OK) {
            return KVS_EINVAL;
        }
        req->sample.temperature = (float) d;
    }

    v = kvs_api_opt(root, "top_p");
    if (v != NULL) {
        if (kvs_api_num(v, "top_p", 0, 1, &d, aerr) != KVS_OK) {
            return KVS_EINVAL;
        }
        req->sample.top_p = (float) d;
    }

    v = kvs_api_opt(root, "top_k");
    if (v != NULL) {
        if (kvs_api_int(v, "top_k", 1, INT32_MAX, &k, aerr) != KVS_OK) {
            return KVS_EINVAL;
        }
        req->sample.top_k = (int32_t) k;
    }

    v = kvs_api_opt(root, "stream");
    if (v != NULL && kvs_api_bool(v, "stream", &req->stream, aerr) != KVS_OK)
    {
        return KVS_EINVAL;
    }

    v = kvs_api_opt(root, "metadata");
    if (v != NULL) {
        if (!json_is_object(v)) {
            return kvs_api_type_err("metadata", "an object", v, aerr);
        }

        if (kvs_api_keys(v, "metadata", meta_keys, aerr) != KVS_OK
            || kvs_api_msg_str(v, "metadata", "user_id", 0, &req->user, aerr)
               != KVS_OK)
        {
            return KVS_EINVAL;
        }
    }

    v = kvs_api_opt(root, "stop_sequences");
    if (v == NULL) {
        return KVS_OK;
    }

    if (!json_is_array(v)) {
        return kvs_api_type_err("stop_sequences", "an array of strings", v,
                                aerr);
    }

    n = json_array_size(v);

    if (n > KVS_API_MAX_STOP) {
        return kvs_api_array_too_long("stop_sequences", KVS_API_MAX_STOP, n,
                                      aerr);
    }

    for (i = 0; i < n; i++) {
        s = json_array_get(v, i);
        kvs_api_path(p, "stop_sequences[%zu]", i);

        if (kvs_api_str(s, p, &str, aerr) != KVS_OK) {
            return KVS_EINVAL;
        }

        if (str.len == 0 || str.len > KVS_API_MAX_STOP_LEN) {
            kvs_api_err_set(aerr, 400, p, "invalid_value", "%s: a stop "
                            "sequence has 1 to %d bytes, not %zu.", p,
                            KVS_API_MAX_STOP_LEN, str.len);
            return KVS_EINVAL;
        }

        req->stop[req->n_stop++] = str;
    }

    return KVS_OK;
}


/* Anthropic fields that change what is generated, which we do not do. */
static int
kvs_api_msg_refused(const json_t *root, kvs_api_err_t *aerr)
{
    const json_t  *v, *t;

    v = kvs_api_opt(root, "thinking");

    if (v != NULL) {
        t = json_is_object(v) ? kvs_api_opt(v, "type") : NULL;

        if (!json_is_string(t)
            || strcmp(json_string_value(t), "disabled") != 0)
        {
            return kvs_api_msg_unsupported("thinking", "extended thinking "
                                           "is not supported; only "
                                           "{\"type\": \"disabled\"}.",
                                           aerr);
        }
    }

    if (kvs_api_opt(root, "mcp_servers") != NULL) {
        return kvs_api_msg_unsupported("mcp_servers", "MCP servers are not "
                                       "supported.", aerr);
    }

    if (kvs_api_opt(root, "container") != NULL) {
        return kvs_api_msg_unsupported("container", "containers are not "
                                       "supported.", aerr);
    }

    return KVS_OK;
}


int
kvs_api_msg_parse(kvs_api_req_t *req, const char *body, size_t len,
    size_t max_body, unsigned flags, kvs_api_err_t *aerr)
{
    int            rc;
    const json_t  *v;

    kvs_api_req_init(req, KVS_API_MESSAGES);

    rc = kvs_api_req_load(req, body, len, max_body, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    req->msg_root = req->root;
    req->root = json_object();

    rc = req->root != NULL ? KVS_OK : kvs_api_msg_nomem(aerr);

    if (rc == KVS_OK) {
        v = kvs_api_opt(req->msg_root, "model");
        rc = v == NULL ? kvs_api_missing("model", aerr)
                       : kvs_api_str(v, "model", &req->model, aerr);
    }

    if (rc == KVS_OK) {
        rc = kvs_api_msg_refused(req->msg_root, aerr);
    }

    if (rc == KVS_OK) {
        rc = kvs_api_msg_scalars(req, flags, aerr);
    }

    if (rc == KVS_OK) {
        rc = kvs_api_msg_messages(req, aerr);
    }

    if (rc == KVS_OK) {
        rc = kvs_api_msg_tools(req, aerr);
    }

    if (rc == KVS_OK) {
        rc = kvs_api_msg_tool_choice(req, aerr);
    }

    /* the translation, through the chat route's checkers */
    if (rc == KVS_OK) {
        rc = kvs_api_req_messages(req, aerr);
    }

    if (rc == KVS_OK) {
        rc = kvs_api_req_tools(req, aerr);
        kvs_api_msg_tool_paths(aerr);
    }

    if (rc != KVS_OK) {
        kvs_api_req_free(req);
        req->kind = KVS_API_MESSAGES;
    }

    return rc;
}


int
kvs_api_msg_version(const char *v, size_t len, kvs_api_err_t *aerr)
{
    size_t  i;

    static const char *const  versions[] = { "2023-06-01", "2026-10-21" };

    if (v == NULL) {
        kvs_api_err_set(aerr, 400, "anthropic-version", NULL,
                        "anthropic-version: header is required (this "
                        "server accepts %s).", KVS_API_MSG_VERSIONS);
        return KVS_EINVAL;
    }

    for (i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
        if (len == strlen(versions[i]) && memcmp(v, versions[i], len) == 0) {
            return KVS_OK;
        }
    }

    kvs_api_err_set(aerr, 400, "anthropic-version", NULL,
                    "anthropic-version: \"%.*s\" is not a version this "
                    "server accepts (%s).", (int) (len > 64 ? 64 : len), v,
                    KVS_API_MSG_VERSIONS);
    return KVS_EINVAL;
}
