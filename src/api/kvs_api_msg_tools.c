/*
 * kvs_api_msg_tools: the tool parts of a Messages body translated into
 * the chat request's (kvs_api_msg.c does the rest): tool_use blocks into
 * an assistant's tool_calls (input as its arguments' JSON text),
 * tool_result blocks into tool messages (is_error as a leading "Error: "
 * text part, the template having no place for it), tools into OpenAI's
 * function tools (server tools and breakpoints on tools refused),
 * tool_choice into its value ("any" is "required", "tool" names one,
 * disable_parallel_tool_use is parallel_tool_calls false); and the chat
 * checker's error paths given back their Anthropic names.
 *
 * Invariants: every key not listed in kvs_api_msg.c's table is a 400
 * naming it; on failure what was built stays in the translated tree,
 * which the caller frees with the request.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_api_msg_impl.h"


/* A tool_result block into a tool message appended to msgs. */
int
kvs_api_msg_tool_result(const json_t *block, const char *path, json_t *msgs,
    kvs_api_err_t *aerr)
{
    int             rc, is_error;
    char            p[KVS_API_PATH_LEN];
    json_t         *m, *content, *e;
    const json_t   *v;
    kvs_api_str_t   id;

    static const char *const  keys[] = {
        "type", "tool_use_id", "content", "is_error", "cache_control", NULL
    };

    if (kvs_api_keys(block, path, keys, aerr) != KVS_OK
        || kvs_api_msg_str(block, path, "tool_use_id", 1, &id, aerr)
           != KVS_OK)
    {
        return KVS_EINVAL;
    }

    is_error = 0;
    v = kvs_api_opt(block, "is_error");
    kvs_api_path(p, "%s.is_error", path);

    if (v != NULL && kvs_api_bool(v, p, &is_error, aerr) != KVS_OK) {
        return KVS_EINVAL;
    }

    /* absent content: the tool answered nothing */
    v = kvs_api_opt(block, "content");
    kvs_api_path(p, "%s.content", path);

    if (v == NULL) {
        content = json_string("");
        rc = content != NULL ? KVS_OK : kvs_api_msg_nomem(aerr);

    } else {
        rc = kvs_api_msg_content(v, p, &content, aerr);
    }

    if (rc != KVS_OK) {
        return rc;
    }

    /* is_error: the template has no place for it; the answer says so */
    if (is_error) {
        if (json_is_string(content)) {
            e = json_array();
            if (e == NULL
                || json_array_append_new(e, kvs_api_msg_part(
                       json_string_value(content),
                       json_string_length(content))) != 0)
            {
                json_decref(e);
                json_decref(content);
                return kvs_api_msg_nomem(aerr);
            }
            json_decref(content);
            content = e;
        }

        if (json_array_insert_new(content, 0, kvs_api_msg_part("Error: ", 7))
            != 0)
        {
            json_decref(content);
            return kvs_api_msg_nomem(aerr);
        }
    }

    m = json_object();
    if (kvs_api_msg_append(msgs, m, aerr) != KVS_OK
        || kvs_api_msg_set(m, "role", json_string("tool"), aerr) != KVS_OK
        || kvs_api_msg_set(m, "tool_call_id", json_stringn(id.ptr, id.len),
                           aerr) != KVS_OK
        || kvs_api_msg_set(m, "content", content, aerr) != KVS_OK)
    {
        return KVS_ENOMEM;
    }

    return kvs_api_msg_cc(block, m, aerr);
}


/* A tool_use block into a call appended to calls; *cc set when it has
 * cache_control (the breakpoint goes on the message). */
int
kvs_api_msg_tool_use(const json_t *block, const char *path, json_t *calls,
    const json_t **cc, kvs_api_err_t *aerr)
{
    char           *args;
    char            p[KVS_API_PATH_LEN];
    json_t         *c, *f;
    const json_t   *input;
    kvs_api_str_t   id, name;

    static const char *const  keys[] = {
        "type", "id", "name", "input", "cache_control", NULL
    };

    if (kvs_api_keys(block, path, keys, aerr) != KVS_OK
        || kvs_api_msg_str(block, path, "id", 1, &id, aerr) != KVS_OK
        || kvs_api_msg_str(block, path, "name", 1, &name, aerr) != KVS_OK)
    {
        return KVS_EINVAL;
    }

    input = kvs_api_opt(block, "input");
    kvs_api_path(p, "%s.input", path);

    if (input == NULL) {
        return kvs_api_missing(p, aerr);
    }

    if (!json_is_object(input)) {
        return kvs_api_type_err(p, "an object", input, aerr);
    }

    if (kvs_api_opt(block, "cache_control") != NULL) {
        *cc = block;
    }

    args = json_dumps(input, JSON_COMPACT);
    if (args == NULL) {
        return kvs_api_msg_nomem(aerr);
    }

    c = json_object();
    f = json_object();
    if (kvs_api_msg_append(calls, c, aerr) != KVS_OK
        || kvs_api_msg_set(c, "function", f, aerr) != KVS_OK
        || kvs_api_msg_set(c, "id", json_stringn(id.ptr, id.len), aerr)
           != KVS_OK
        || kvs_api_msg_set(c, "type", json_string("function"), aerr)
           != KVS_OK
        || kvs_api_msg_set(f, "name", json_stringn(name.ptr, name.len),
                           aerr) != KVS_OK
        || kvs_api_msg_set(f, "arguments", json_string(args), aerr)
           != KVS_OK)
    {
        free(args);
        return KVS_ENOMEM;
    }

    free(args);

    return KVS_OK;
}


/* Anthropic's tools into OpenAI's function tools. */
int
kvs_api_msg_tools(kvs_api_req_t *req, kvs_api_err_t *aerr)
{
    char            path[KVS_API_PATH_LEN], p[KVS_API_PATH_LEN];
    size_t          i;
    json_t         *tools, *t, *f;
    const json_t   *src, *one, *schema;
    kvs_api_str_t   s;

    static const char *const  keys[] = {
        "type", "name", "description", "input_schema", "cache_control", NULL
    };

    src = kvs_api_opt(req->msg_root, "tools");
    if (src == NULL) {
        return KVS_OK;
    }

    if (!json_is_array(src)) {
        return kvs_api_type_err("tools", "an array", src, aerr);
    }

    tools = json_array();
    if (kvs_api_msg_set(req->root, "tools", tools, aerr) != KVS_OK) {
        return KVS_ENOMEM;
    }

    for (i = 0; i < json_array_size(src); i++) {
        one = json_array_get(src, i);
        kvs_api_path(path, "tools[%zu]", i);

        if (!json_is_object(one)) {
            return kvs_api_type_err(path, "an object", one, aerr);
        }

        if (kvs_api_msg_str(one, path, "type", 0, &s, aerr) != KVS_OK) {
            return KVS_EINVAL;
        }

        if (s.ptr != NULL && strcmp(s.ptr, "custom") != 0) {
            kvs_api_path(p, "%s.type", path);
            kvs_api_err_set(aerr, 400, p, "unsupported_value", "%s: '%.64s'"
                            " is a server tool, which this server does not "
                            "run; only client tools ('custom', or no type) "
                            "are supported.", p, s.ptr);
            return KVS_EINVAL;
        }

        if (kvs_api_keys(one, path, keys, aerr) != KVS_OK) {
            return KVS_EINVAL;
        }

        if (kvs_api_opt(one, "cache_control") != NULL) {
            kvs_api_path(p, "%s.cache_control", path);
            return kvs_api_msg_unsupported(p, "breakpoints on tools are not "
                                           "supported; put cache_control "
                                           "on the system prompt's last "
                                           "block instead.", aerr);
        }

        schema = kvs_api_opt(one, "input_schema");
        kvs_api_path(p, "%s.input_schema", path);

        if (schema == NULL) {
            return kvs_api_missing(p, aerr);
        }

        /* name and description: their types are the chat checker's */
        t = json_object();
        f = json_object();
        if (kvs_api_msg_append(tools, t, aerr) != KVS_OK
            || kvs_api_msg_set(t, "function", f, aerr) != KVS_OK
            || kvs_api_msg_set(t, "type", json_string("function"), aerr)
               != KVS_OK
            || kvs_api_msg_set(f, "parameters", json_deep_copy(schema),
                               aerr) != KVS_OK
            || (kvs_api_opt(one, "name") != NULL
                && kvs_api_msg_set(f, "name", json_deep_copy(
                                       json_object_get(one, "name")), aerr)
                   != KVS_OK)
            || (kvs_api_opt(one, "description") != NULL
                && kvs_api_msg_set(f, "description", json_deep_copy(
                                       json_object_get(one, "description")),
                                   aerr) != KVS_OK))
        {
            return KVS_ENOMEM;
        }
    }

    return KVS_OK;
}


int
kvs_api_msg_tool_choice(kvs_api_req_t *req, kvs_api_err_t *aerr)
{
    int             off;
    json_t         *c, *f;
    const char     *to;
    const json_t   *src, *v;
    kvs_api_str_t   type, name;

    static const char *const  keys[] = {
        "type", "name", "disable_parallel_tool_use", NULL
    };

    src = kvs_api_opt(req->msg_root, "tool_choice");
    if (src == NULL) {
        return KVS_OK;
    }

    if (!json_is_object(src)) {
        return kvs_api_type_err("tool_choice", "an object", src, aerr);
    }

    if (kvs_api_keys(src, "tool_choice", keys, aerr) != KVS_OK
        || kvs_api_msg_str(src, "tool_choice", "type", 1, &type, aerr)
           != KVS_OK)
    {
        return KVS_EINVAL;
    }

    to = NULL;

    if (strcmp(type.ptr, "auto") == 0) {
        to = "auto";

    } else if (strcmp(type.ptr, "any") == 0) {
        to = "required";

    } else if (strcmp(type.ptr, "none") == 0) {
        to = "none";

    } else if (strcmp(type.ptr, "tool") != 0) {
        kvs_api_err_set(aerr, 400, "tool_choice.type", "invalid_value",
                        "Invalid value: '%.64s'. Supported values are: "
                        "'auto', 'any', 'tool' and 'none'.", type.ptr);
        return KVS_EINVAL;
    }

    if (kvs_api_msg_str(src, "tool_choice", "name", to == NULL, &name, aerr)
        != KVS_OK)
    {
        return KVS_EINVAL;
    }

    if (to != NULL && name.ptr != NULL) {
        kvs_api_err_set(aerr, 400, "tool_choice.name", "invalid_value",
                        "tool_choice.name: only allowed with type 'tool'.");
        return KVS_EINVAL;
    }

    if (to != NULL) {
        c = json_string(to);

    } else {
        c = json_object();
        f = json_object();
        if (c == NULL || f == NULL || json_object_set_new(c, "function", f)
            || json_object_set_new(c, "type", json_string("function"))
            || json_object_set_new(f, "name",
                                   json_stringn(name.ptr, name.len)))
        {
            json_decref(c);
            return kvs_api_msg_nomem(aerr);
        }
    }

    if (kvs_api_msg_set(req->root, "tool_choice", c, aerr) != KVS_OK) {
        return KVS_ENOMEM;
    }

    v = kvs_api_opt(src, "disable_parallel_tool_use");

    if (v != NULL) {
        if (kvs_api_bool(v, "tool_choice.disable_parallel_tool_use", &off,
                         aerr) != KVS_OK)
        {
            return KVS_EINVAL;
        }

        /* OpenAI's parallel_tool_calls is refused with "none" */
        if (off && strcmp(type.ptr, "none") != 0
            && kvs_api_msg_set(req->root, "parallel_tool_calls",
                               json_false(), aerr) != KVS_OK)
        {
            return KVS_ENOMEM;
        }
    }

    return KVS_OK;
}


/* s: "a" replaced by "b" in place (at most once), within size. */
static void
kvs_api_msg_rename(char *s, size_t size, const char *a, const char *b)
{
    char    *at;
    size_t   la, lb, rest;

    at = strstr(s, a);
    if (at == NULL) {
        return;
    }

    la = strlen(a);
    lb = strlen(b);
    rest = strlen(at + la);

    if ((size_t) (at - s) + lb + rest + 1 > size) {
        return;
    }

    memmove(at + lb, at + la, rest + 1);
    memcpy(at, b, lb);
}


/* The chat checker's tool paths under their Anthropic names
 * ("tools[0].function.parameters.x" is "tools[0].input_schema.x",
 * "tool_choice.function.name" "tool_choice.name"). */
void
kvs_api_msg_tool_paths(kvs_api_err_t *aerr)
{
    if (aerr == NULL || (strncmp(aerr->param, "tools[", 6) != 0
                         && strncmp(aerr->param, "tool_choice.", 12) != 0))
    {
        return;
    }

    kvs_api_msg_rename(aerr->param, sizeof(aerr->param),
                       ".function.parameters", ".input_schema");
    kvs_api_msg_rename(aerr->param, sizeof(aerr->param), ".function.",
                       ".");
    kvs_api_msg_rename(aerr->message, sizeof(aerr->message),
                       ".function.parameters", ".input_schema");
    kvs_api_msg_rename(aerr->message, sizeof(aerr->message), ".function.",
                       ".");
}
