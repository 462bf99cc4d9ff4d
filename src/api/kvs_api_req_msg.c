/*
 * kvs_api_req_msg: the two shapes that carry the text of a request: chat
 * `messages` (checked in place, the request keeps the jansson array) and
 * completions `prompt` (copied into kvs_api_prompt_t's: a text pointing
 * into the tree, or token ids in an owned array).
 *
 * Messages are checked for OpenAI's schema: every role it has but the
 * deprecated "function"; content required except for the assistant; an
 * array of content parts non-empty and made of "text" parts only (we
 * serve text models).  Prompts take OpenAI's four forms, told apart by
 * the first element of an array; ids are checked against 0..INT32_MAX
 * only, the caller checks them against its vocabulary.
 *
 * A text part or a message may carry a cache_control breakpoint
 * (kvs_api_req_cache.c), collected into req->breaks.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_api_req_impl.h"


static const char  *kvs_api_roles[] = {
    "system", "developer", "user", "assistant", "tool"
};

#define KVS_API_ROLE_ASSISTANT  3
#define KVS_API_ROLE_TOOL       4
#define KVS_API_N_ROLES \
    (sizeof(kvs_api_roles) / sizeof(kvs_api_roles[0]))


/* A string member of obj, required or not; path is obj's. */
static int
kvs_api_opt_str(const json_t *obj, const char *path, const char *key,
    int required, kvs_api_err_t *aerr)
{
    char            p[KVS_API_PATH_LEN];
    const json_t   *v;
    kvs_api_str_t   s;

    v = kvs_api_opt(obj, key);
    kvs_api_path(p, "%s.%s", path, key);

    if (v == NULL) {
        return required ? kvs_api_missing(p, aerr) : KVS_OK;
    }

    return kvs_api_str(v, p, &s, aerr);
}


/*
 * tool_call_id answers a tool call: OpenAI's schema has it on the tool
 * message only, and refuses it elsewhere ("Additional properties are not
 * allowed").  Null is taken as absent, as everywhere; any other value is
 * refused, a wrong type first as a type error, so that a client's bug is
 * not hidden by a message we would otherwise render as if it were not
 * there.
 */
static int
kvs_api_req_no_tool_call_id(const json_t *msg, const char *path,
    size_t role, kvs_api_err_t *aerr)
{
    char           p[KVS_API_PATH_LEN];
    const json_t  *v;

    v = kvs_api_opt(msg, "tool_call_id");
    if (v == NULL) {
        return KVS_OK;
    }

    kvs_api_path(p, "%s.tool_call_id", path);

    if (!json_is_string(v)) {
        return kvs_api_type_err(p, "a string", v, aerr);
    }

    kvs_api_err_set(aerr, 400, p, "invalid_value", "Invalid parameter: "
                    "'%s' is only allowed on messages with role 'tool', "
                    "not '%s'.", p, kvs_api_roles[role]);
    return KVS_EINVAL;
}


static int
kvs_api_empty_array(const char *path, kvs_api_err_t *aerr)
{
    kvs_api_err_set(aerr, 400, path, "empty_array", "Invalid '%s': empty "
                    "array. Expected an array with minimum length 1, but "
                    "got an empty array instead.", path);

    return KVS_EINVAL;
}


/* One content part, messages[i].content[j], at path. */
static int
kvs_api_req_part(kvs_api_req_t *req, const json_t *part, const char *path,
    size_t i, size_t j, kvs_api_err_t *aerr)
{
    int            rc;
    char           p[KVS_API_PATH_LEN];
    const json_t  *t;

    if (!json_is_object(part)) {
        return kvs_api_type_err(path, "an object", part, aerr);
    }

    t = kvs_api_opt(part, "type");
    kvs_api_path(p, "%s.type", path);

    if (t == NULL) {
        return kvs_api_missing(p, aerr);
    }

    if (!json_is_string(t)) {
        return kvs_api_type_err(p, "a string", t, aerr);
    }

    /* image_url, input_audio, file (user) and refusal (assistant) are
     * OpenAI's; none of them means anything to a text model */
    if (strcmp(json_string_value(t), "text") != 0) {
        kvs_api_err_set(aerr, 400, p, "invalid_value", "Invalid value: "
                        "'%.64s'. This server serves text models: the only "
                        "supported content part type is 'text'.",
                        json_string_value(t));
        return KVS_EINVAL;
    }

    rc = kvs_api_opt_str(part, path, "text", 1, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    return kvs_api_req_cache_control(req, part, path, (uint32_t) i,
                                     (int32_t) j, aerr);
}


static int
kvs_api_req_content(kvs_api_req_t *req, const json_t *msg, const char *path,
    size_t i, size_t role, kvs_api_err_t *aerr)
{
    int            rc;
    char           p[KVS_API_PATH_LEN], pp[KVS_API_PATH_LEN];
    size_t         j;
    const json_t  *c;

    c = kvs_api_opt(msg, "content");
    kvs_api_path(p, "%s.content", path);

    if (c == NULL) {
        /* the assistant's turn may hold only tool calls */
        return role == KVS_API_ROLE_ASSISTANT ? KVS_OK
                                              : kvs_api_missing(p, aerr);
    }

    if (json_is_string(c)) {
        return KVS_OK;
    }

    if (!json_is_array(c)) {
        return kvs_api_type_err(p, "a string or an array of content parts",
                                c, aerr);
    }

    if (json_array_size(c) == 0) {
        return kvs_api_empty_array(p, aerr);
    }

    for (j = 0; j < json_array_size(c); j++) {
        kvs_api_path(pp, "%s[%zu]", p, j);

        rc = kvs_api_req_part(req, json_array_get(c, j), pp, i, j, aerr);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}


static int
kvs_api_req_message(kvs_api_req_t *req, const json_t *msg, size_t i,
    kvs_api_err_t *aerr)
{
    int            rc;
    char           path[KVS_API_PATH_LEN], p[KVS_API_PATH_LEN];
    size_t         role;
    const json_t  *r;

    kvs_api_path(path, "messages[%zu]", i);

    if (!json_is_object(msg)) {
        return kvs_api_type_err(path, "an object", msg, aerr);
    }

    r = kvs_api_opt(msg, "role");
    kvs_api_path(p, "%s.role", path);

    if (r == NULL) {
        return kvs_api_missing(p, aerr);
    }

    if (!json_is_string(r)) {
        return kvs_api_type_err(p, "a string", r, aerr);
    }

    for (role = 0; role < KVS_API_N_ROLES; role++) {
        if (strcmp(json_string_value(r), kvs_api_roles[role]) == 0) {
            break;
        }
    }

    if (role == KVS_API_N_ROLES) {
        kvs_api_err_set(aerr, 400, p, "invalid_value", "Invalid value: "
                        "'%.64s'. Supported values are: 'system', "
                        "'developer', 'user', 'assistant' and 'tool'.",
                        json_string_value(r));
        return KVS_EINVAL;
    }

    rc = kvs_api_req_content(req, msg, path, i, role, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_api_opt_str(msg, path, "name", 0, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_api_req_tool_calls(msg, path, role == KVS_API_ROLE_ASSISTANT,
                                aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    if (role == KVS_API_ROLE_TOOL) {
        rc = kvs_api_opt_str(msg, path, "tool_call_id", 1, aerr);
        if (rc != KVS_OK) {
            return rc;
        }

    } else {
        rc = kvs_api_req_no_tool_call_id(msg, path, role, aerr);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    return kvs_api_req_cache_control(req, msg, path, (uint32_t) i, -1,
                                     aerr);
}


int
kvs_api_req_messages(kvs_api_req_t *req, kvs_api_err_t *aerr)
{
    int            rc;
    size_t         i;
    const json_t  *m;

    m = kvs_api_opt(req->root, "messages");

    if (m == NULL) {
        return kvs_api_missing("messages", aerr);
    }

    if (!json_is_array(m)) {
        return kvs_api_type_err("messages", "an array", m, aerr);
    }

    if (json_array_size(m) == 0) {
        return kvs_api_empty_array("messages", aerr);
    }

    for (i = 0; i < json_array_size(m); i++) {
        rc = kvs_api_req_message(req, json_array_get(m, i), i, aerr);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    req->messages = m;

    return KVS_OK;
}


int
kvs_api_req_check_messages(const kvs_api_req_t *req, size_t max,
    kvs_api_err_t *aerr)
{
    size_t  n;

    n = json_array_size(req->messages);

    return n > max ? kvs_api_array_too_long("messages", max, n, aerr) : KVS_OK;
}


/* Completions prompts. */

/* Token ids from the array a, at path; p owns what it got on failure. */
static int
kvs_api_req_ids(const json_t *a, const char *path, kvs_api_prompt_t *p,
    kvs_api_err_t *aerr)
{
    int      rc;
    char     ep[KVS_API_PATH_LEN];
    size_t   j, n;
    int64_t  id;

    n = json_array_size(a);

    if (n == 0) {
        return kvs_api_empty_array(path, aerr);
    }

    p->ids = malloc(n * sizeof(int32_t));
    if (p->ids == NULL) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "Out of memory for the "
                        "prompt's token ids.");
        return KVS_ENOMEM;
    }

    for (j = 0; j < n; j++) {
        kvs_api_path(ep, "%s[%zu]", path, j);

        rc = kvs_api_int(json_array_get(a, j), ep, 0, INT32_MAX, &id, aerr);
        if (rc != KVS_OK) {
            return rc;
        }

        p->ids[j] = (int32_t) id;
        p->n_ids = j + 1;
    }

    return KVS_OK;
}


/* prompt as a list of strings or a list of lists of ids. */
static int
kvs_api_req_prompt_list(kvs_api_req_t *req, const json_t *a, int ids,
    kvs_api_err_t *aerr)
{
    int            rc;
    char           ep[KVS_API_PATH_LEN];
    size_t         j, n;
    const json_t  *e;

    n = json_array_size(a);

    if (n > KVS_API_MAX_PROMPTS) {
        return kvs_api_array_too_long("prompt", KVS_API_MAX_PROMPTS, n, aerr);
    }

    req->prompts = calloc(n, sizeof(kvs_api_prompt_t));
    if (req->prompts == NULL) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "Out of memory for the "
                        "prompts.");
        return KVS_ENOMEM;
    }

    req->n_prompts = n;

    for (j = 0; j < n; j++) {
        e = json_array_get(a, j);
        kvs_api_path(ep, "prompt[%zu]", j);

        if (ids) {
            if (!json_is_array(e)) {
                return kvs_api_type_err(ep, "an array of integers", e,
                                        aerr);
            }

            rc = kvs_api_req_ids(e, ep, &req->prompts[j], aerr);
            if (rc != KVS_OK) {
                return rc;
            }

            continue;
        }

        rc = kvs_api_str(e, ep, &req->prompts[j].text, aerr);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}


int
kvs_api_req_prompts(kvs_api_req_t *req, kvs_api_err_t *aerr)
{
    const json_t  *v, *first;

    v = kvs_api_opt(req->root, "prompt");

    if (v == NULL) {
        return kvs_api_missing("prompt", aerr);
    }

    if (!json_is_string(v) && !json_is_array(v)) {
        return kvs_api_type_err("prompt", "a string or an array", v, aerr);
    }

    if (json_is_array(v) && json_array_size(v) == 0) {
        return kvs_api_empty_array("prompt", aerr);
    }

    first = json_array_get(v, 0);

    if (json_is_string(first)) {
        return kvs_api_req_prompt_list(req, v, 0, aerr);
    }

    if (json_is_array(first)) {
        return kvs_api_req_prompt_list(req, v, 1, aerr);
    }

    if (first != NULL && !json_is_number(first)) {
        return kvs_api_type_err("prompt[0]", "a string, an integer or an "
                                "array of integers", first, aerr);
    }

    /* one prompt: a string, or an array of ids */
    req->prompts = calloc(1, sizeof(kvs_api_prompt_t));
    if (req->prompts == NULL) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "Out of memory for the "
                        "prompt.");
        return KVS_ENOMEM;
    }

    req->n_prompts = 1;

    if (first == NULL) {
        return kvs_api_str(v, "prompt", &req->prompts[0].text, aerr);
    }

    return kvs_api_req_ids(v, "prompt", &req->prompts[0], aerr);
}
