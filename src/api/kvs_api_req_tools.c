/*
 * kvs_api_req_tools: a chat request's tool fields, checked for OpenAI's
 * schema and for what we can constrain:
 *
 *   tools                [{"type": "function", "function": {"name": N,
 *                        "description": D, "parameters": SCHEMA,
 *                        "strict": bool}}], 1..KVS_API_MAX_TOOLS, names
 *                        unique and OpenAI's pattern ([a-zA-Z0-9_-],
 *                        1..64); parameters compiled by the grammar
 *                        compiler here, so a keyword it cannot constrain
 *                        is a 400 naming its path
 *                        ("tools[0].function.parameters.properties.x.
 *                        format: ..."), as response_format's are
 *   tool_choice          "none", "auto", "required", or {"type":
 *                        "function", "function": {"name": N}} naming one
 *                        of tools; default "auto" with tools, "none"
 *                        without
 *   parallel_tool_calls  a boolean, default true
 *   messages             an assistant's tool_calls: [{"id", "type":
 *                        "function", "function": {"name", "arguments"
 *                        (a string)}}]; a tool message answers an id of
 *                        the nearest assistant turn with tool_calls before
 *                        it, with only tool messages between
 *
 * Invariants: every key we do not know inside these objects is a 400
 * (never ignored); tool_choice and parallel_tool_calls without tools are
 * a 400 as OpenAI's ("only allowed when 'tools' are specified"), so is
 * the deprecated functions/function_call pair (we do not act on them).
 * On success req->tools points at the checked array in the tree, which
 * is what the chat template's context gets as `tools`, as Hugging Face's
 * apply_chat_template() passes it.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_gram_req.h"
#include "kvs_api_req_impl.h"
#include "kvs_tool_parse.h"


/* obj[key] must be the string want. */
static int
kvs_api_tools_type(const json_t *obj, const char *path, const char *want,
    kvs_api_err_t *aerr)
{
    char           p[KVS_API_PATH_LEN];
    const json_t  *t;
    kvs_api_str_t  s;

    kvs_api_path(p, "%s.type", path);
    t = kvs_api_opt(obj, "type");

    if (t == NULL) {
        return kvs_api_missing(p, aerr);
    }

    if (kvs_api_str(t, p, &s, aerr) != KVS_OK) {
        return KVS_EINVAL;
    }

    if (strcmp(s.ptr, want) != 0) {
        kvs_api_err_set(aerr, 400, p, "invalid_value", "Invalid value: "
                        "'%.64s'. Supported values are: '%s'.", s.ptr, want);
        return KVS_EINVAL;
    }

    return KVS_OK;
}


/* obj.name: OpenAI's function name, 1..64 of a-z, A-Z, 0-9, _ and -. */
static int
kvs_api_tools_name(const json_t *obj, const char *path, kvs_api_str_t *out,
    kvs_api_err_t *aerr)
{
    size_t         i;
    char           c, p[KVS_API_PATH_LEN];
    const json_t  *v;

    kvs_api_path(p, "%s.name", path);
    v = kvs_api_opt(obj, "name");

    if (v == NULL) {
        return kvs_api_missing(p, aerr);
    }

    if (kvs_api_str(v, p, out, aerr) != KVS_OK) {
        return KVS_EINVAL;
    }

    for (i = 0; i < out->len; i++) {
        c = out->ptr[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
              || (c >= '0' && c <= '9') || c == '_' || c == '-'))
        {
            break;
        }
    }

    if (out->len == 0 || out->len > 64 || i < out->len) {
        kvs_api_err_set(aerr, 400, p, "invalid_value", "Invalid '%s': "
                        "expected 1 to 64 characters of a-z, A-Z, 0-9, _ "
                        "and -.", p);
        return KVS_EINVAL;
    }

    return KVS_OK;
}


static int
kvs_api_tools_nomem(kvs_api_err_t *aerr)
{
    kvs_api_err_set(aerr, 500, NULL, NULL, "Out of memory for the tools.");
    if (aerr != NULL) {
        snprintf(aerr->type, sizeof(aerr->type), "server_error");
    }

    return KVS_ENOMEM;
}


/* The parameters schema at path, compiled as response_format's is. */
static int
kvs_api_tools_params(const json_t *schema, const char *path,
    kvs_api_err_t *aerr)
{
    int          rc;
    char        *text, param[KVS_API_PATH_LEN];
    size_t       len, n;
    kvs_err_t    err;
    kvs_gram_t   g;
    const char  *colon;

    if (!json_is_object(schema)) {
        return kvs_api_type_err(path, "an object", schema, aerr);
    }

    text = json_dumps(schema, JSON_SORT_KEYS | JSON_COMPACT);
    if (text == NULL) {
        return kvs_api_tools_nomem(aerr);
    }

    len = strlen(text);

    if (len > KVS_GRAM_REQ_MAX_SCHEMA) {
        free(text);
        kvs_api_err_set(aerr, 400, path, "invalid_value", "%s: %zu bytes "
                        "of JSON; at most %u.", path, len,
                        KVS_GRAM_REQ_MAX_SCHEMA);
        return KVS_EINVAL;
    }

    kvs_err_clear(&err);
    rc = kvs_gram_req_compile(&g, KVS_GRAM_REQ_SCHEMA, text, len, &err);
    kvs_gram_free(&g);
    free(text);

    if (rc == KVS_OK) {
        return KVS_OK;
    }

    if (rc == KVS_ENOMEM) {
        return kvs_api_tools_nomem(aerr);
    }

    if (strncmp(err.msg, "schema: ", 8) == 0) {
        kvs_api_err_set(aerr, 400, path, "invalid_value", "%s: %s", path,
                        err.msg + 8);
        return KVS_EINVAL;
    }

    colon = strstr(err.msg, ": ");
    n = colon != NULL ? (size_t) (colon - err.msg) : 0;

    if (n > 0 && strlen(path) + 1 + n < sizeof(param)) {
        kvs_api_path(param, "%s.%.*s", path, (int) n, err.msg);

    } else {
        kvs_api_path(param, "%s", path);
    }

    kvs_api_err_set(aerr, 400, param,
                    rc == KVS_EUNSUPPORTED ? "unsupported_value"
                                           : "invalid_value",
                    "%s.%s", path, err.msg);
    return KVS_EINVAL;
}


static int
kvs_api_tools_one(const json_t *tools, size_t i, kvs_api_err_t *aerr)
{
    size_t          j;
    char            path[KVS_API_PATH_LEN], p[KVS_API_PATH_LEN];
    const json_t   *t, *f, *v;
    kvs_api_str_t   name, other;

    static const char *const  keys[] = { "type", "function", NULL };
    static const char *const  fkeys[] = {
        "name", "description", "parameters", "strict", NULL
    };

    t = json_array_get(tools, i);
    kvs_api_path(path, "tools[%zu]", i);

    if (!json_is_object(t)) {
        return kvs_api_type_err(path, "an object", t, aerr);
    }

    if (kvs_api_keys(t, path, keys, aerr) != KVS_OK
        || kvs_api_tools_type(t, path, "function", aerr) != KVS_OK)
    {
        return KVS_EINVAL;
    }

    kvs_api_path(p, "%s.function", path);
    f = kvs_api_opt(t, "function");

    if (f == NULL) {
        return kvs_api_missing(p, aerr);
    }

    if (!json_is_object(f)) {
        return kvs_api_type_err(p, "an object", f, aerr);
    }

    snprintf(path, sizeof(path), "%s", p);

    if (kvs_api_keys(f, path, fkeys, aerr) != KVS_OK
        || kvs_api_tools_name(f, path, &name, aerr) != KVS_OK)
    {
        return KVS_EINVAL;
    }

    v = kvs_api_opt(f, "description");
    kvs_api_path(p, "%s.description", path);

    if (v != NULL && kvs_api_str(v, p, &other, aerr) != KVS_OK) {
        return KVS_EINVAL;
    }

    v = kvs_api_opt(f, "strict");
    kvs_api_path(p, "%s.strict", path);

    if (v != NULL && !json_is_boolean(v)) {
        return kvs_api_type_err(p, "a boolean", v, aerr);
    }

    for (j = 0; j < i; j++) {
        other.ptr = json_string_value(json_object_get(json_object_get(
                        json_array_get(tools, j), "function"), "name"));

        if (strcmp(other.ptr, name.ptr) == 0) {
            kvs_api_path(p, "%s.name", path);
            kvs_api_err_set(aerr, 400, p, "invalid_value", "Invalid '%s': "
                            "'%s' is also the name of tools[%zu].", p,
                            name.ptr, j);
            return KVS_EINVAL;
        }
    }

    /* absent parameters: a function without arguments ({} is sent) */
    v = kvs_api_opt(f, "parameters");
    kvs_api_path(p, "%s.parameters", path);

    return v != NULL ? kvs_api_tools_params(v, p, aerr) : KVS_OK;
}


static int
kvs_api_tools_choice(kvs_api_req_t *req, const json_t *c,
    kvs_api_err_t *aerr)
{
    size_t          i;
    const char     *s;
    const json_t   *f;
    kvs_api_str_t   name;

    static const char *const  keys[] = { "type", "function", NULL };
    static const char *const  fkeys[] = { "name", NULL };

    if (json_is_string(c)) {
        s = json_string_value(c);

        if (strcmp(s, "none") == 0) {
            req->tool_choice = KVS_API_TOOL_NONE;

        } else if (strcmp(s, "auto") == 0) {
            req->tool_choice = KVS_API_TOOL_AUTO;

        } else if (strcmp(s, "required") == 0) {
            req->tool_choice = KVS_API_TOOL_REQUIRED;

        } else {
            kvs_api_err_set(aerr, 400, "tool_choice", "invalid_value",
                            "Invalid value: '%.64s'. Supported values are: "
                            "'none', 'auto' and 'required', or an object "
                            "naming a function.", s);
            return KVS_EINVAL;
        }

        return KVS_OK;
    }

    if (!json_is_object(c)) {
        return kvs_api_type_err("tool_choice", "a string or an object", c,
                                aerr);
    }

    if (kvs_api_keys(c, "tool_choice", keys, aerr) != KVS_OK
        || kvs_api_tools_type(c, "tool_choice", "function", aerr) != KVS_OK)
    {
        return KVS_EINVAL;
    }

    f = kvs_api_opt(c, "function");

    if (f == NULL) {
        return kvs_api_missing("tool_choice.function", aerr);
    }

    if (!json_is_object(f)) {
        return kvs_api_type_err("tool_choice.function", "an object", f,
                                aerr);
    }

    if (kvs_api_keys(f, "tool_choice.function", fkeys, aerr) != KVS_OK
        || kvs_api_tools_name(f, "tool_choice.function", &name, aerr)
           != KVS_OK)
    {
        return KVS_EINVAL;
    }

    for (i = 0; i < req->n_tools; i++) {
        s = json_string_value(json_object_get(json_object_get(
                json_array_get(req->tools, i), "function"), "name"));

        if (strcmp(s, name.ptr) == 0) {
            req->tool_choice = KVS_API_TOOL_NAMED;
            req->tool_named = (uint32_t) i;
            return KVS_OK;
        }
    }

    kvs_api_err_set(aerr, 400, "tool_choice.function.name", "invalid_value",
                    "Invalid value for 'tool_choice': function '%s' is not "
                    "in tools.", name.ptr);
    return KVS_EINVAL;
}


/* A field that is only allowed with tools. */
static int
kvs_api_tools_only(const char *field, kvs_api_err_t *aerr)
{
    kvs_api_err_set(aerr, 400, field, "invalid_value", "Invalid value for "
                    "'%s': '%s' is only allowed when 'tools' are "
                    "specified.", field, field);
    return KVS_EINVAL;
}


/* The ids of messages[k].tool_calls, checked by kvs_api_req_tool_calls()
 * already: does one equal id? */
static int
kvs_api_tools_has_id(const json_t *calls, const char *id)
{
    size_t  j;

    for (j = 0; j < json_array_size(calls); j++) {
        if (strcmp(json_string_value(json_object_get(
                       json_array_get(calls, j), "id")), id) == 0)
        {
            return 1;
        }
    }

    return 0;
}


/* Each tool message answers a call of the assistant turn before it. */
static int
kvs_api_tools_answers(const json_t *msgs, kvs_api_err_t *aerr)
{
    size_t         i;
    char           p[KVS_API_PATH_LEN];
    const char    *role, *id;
    const json_t  *m, *calls;

    calls = NULL;

    for (i = 0; i < json_array_size(msgs); i++) {
        m = json_array_get(msgs, i);
        role = json_string_value(json_object_get(m, "role"));

        if (strcmp(role, "assistant") == 0) {
            calls = kvs_api_opt(m, "tool_calls");
            continue;
        }

        if (strcmp(role, "tool") != 0) {
            calls = NULL;
            continue;
        }

        id = json_string_value(json_object_get(m, "tool_call_id"));

        if (calls == NULL) {
            kvs_api_path(p, "messages[%zu].role", i);
            kvs_api_err_set(aerr, 400, p, "invalid_value", "Invalid "
                            "parameter: messages with role 'tool' must be a "
                            "response to a preceding message with "
                            "'tool_calls'.");
            return KVS_EINVAL;
        }

        if (!kvs_api_tools_has_id(calls, id)) {
            kvs_api_path(p, "messages[%zu].tool_call_id", i);
            kvs_api_err_set(aerr, 400, p, "invalid_value", "Invalid "
                            "parameter: '%s' ('%.64s') answers no tool call "
                            "of the assistant message before it.", p, id);
            return KVS_EINVAL;
        }
    }

    return KVS_OK;
}


int
kvs_api_req_tool_calls(const json_t *msg, const char *path, int assistant,
    kvs_api_err_t *aerr)
{
    size_t          j, k;
    char            p[KVS_API_PATH_LEN], cp[KVS_API_PATH_LEN];
    const json_t   *calls, *c, *f, *v;
    kvs_api_str_t   s;

    static const char *const  keys[] = { "id", "type", "function", NULL };
    static const char *const  fkeys[] = { "name", "arguments", NULL };

    calls = kvs_api_opt(msg, "tool_calls");
    if (calls == NULL) {
        return KVS_OK;
    }

    kvs_api_path(p, "%s.tool_calls", path);

    if (!assistant) {
        kvs_api_err_set(aerr, 400, p, "invalid_value", "Invalid parameter: "
                        "'%s' is only allowed on messages with role "
                        "'assistant'.", p);
        return KVS_EINVAL;
    }

    if (!json_is_array(calls)) {
        return kvs_api_type_err(p, "an array", calls, aerr);
    }

    if (json_array_size(calls) == 0) {
        kvs_api_err_set(aerr, 400, p, "empty_array", "Invalid '%s': empty "
                        "array. Expected an array with minimum length 1, "
                        "but got an empty array instead.", p);
        return KVS_EINVAL;
    }

    for (j = 0; j < json_array_size(calls); j++) {
        c = json_array_get(calls, j);
        kvs_api_path(cp, "%s[%zu]", p, j);

        if (!json_is_object(c)) {
            return kvs_api_type_err(cp, "an object", c, aerr);
        }

        if (kvs_api_keys(c, cp, keys, aerr) != KVS_OK
            || kvs_api_tools_type(c, cp, "function", aerr) != KVS_OK)
        {
            return KVS_EINVAL;
        }

        kvs_api_path(cp, "%s[%zu].id", p, j);
        v = kvs_api_opt(c, "id");

        if (v == NULL) {
            return kvs_api_missing(cp, aerr);
        }

        if (kvs_api_str(v, cp, &s, aerr) != KVS_OK) {
            return KVS_EINVAL;
        }

        for (k = 0; k < j; k++) {
            if (strcmp(json_string_value(json_object_get(
                           json_array_get(calls, k), "id")), s.ptr) == 0)
            {
                kvs_api_err_set(aerr, 400, cp, "invalid_value", "Invalid "
                                "'%s': '%.64s' is also the id of call %zu.",
                                cp, s.ptr, k);
                return KVS_EINVAL;
            }
        }

        kvs_api_path(cp, "%s[%zu].function", p, j);
        f = kvs_api_opt(c, "function");

        if (f == NULL) {
            return kvs_api_missing(cp, aerr);
        }

        if (!json_is_object(f)) {
            return kvs_api_type_err(cp, "an object", f, aerr);
        }

        if (kvs_api_keys(f, cp, fkeys, aerr) != KVS_OK
            || kvs_api_tools_name(f, cp, &s, aerr) != KVS_OK)
        {
            return KVS_EINVAL;
        }

        /* a string, as OpenAI's wire has it; the template gets it as
         * sent (the templates that print a mapping use tojson on it) */
        kvs_api_path(cp, "%s[%zu].function.arguments", p, j);
        v = kvs_api_opt(f, "arguments");

        if (v == NULL) {
            return kvs_api_missing(cp, aerr);
        }

        if (kvs_api_str(v, cp, &s, aerr) != KVS_OK) {
            return KVS_EINVAL;
        }
    }

    return KVS_OK;
}


int
kvs_api_req_tools(kvs_api_req_t *req, kvs_api_err_t *aerr)
{
    size_t         i, n;
    const json_t  *t, *v;

    req->tools = NULL;
    req->n_tools = 0;
    req->tool_choice = KVS_API_TOOL_NONE;
    req->parallel_tool_calls = 1;

    if (kvs_api_opt(req->root, "functions") != NULL
        || kvs_api_opt(req->root, "function_call") != NULL)
    {
        v = kvs_api_opt(req->root, "functions");
        kvs_api_err_set(aerr, 400, v != NULL ? "functions" : "function_call",
                        "unsupported_parameter", "Unsupported parameter: "
                        "'%s' is deprecated and not supported; use 'tools' "
                        "and 'tool_choice'.",
                        v != NULL ? "functions" : "function_call");
        return KVS_EINVAL;
    }

    if (kvs_api_tools_answers(req->messages, aerr) != KVS_OK) {
        return KVS_EINVAL;
    }

    t = kvs_api_opt(req->root, "tools");

    if (t != NULL) {
        if (!json_is_array(t)) {
            return kvs_api_type_err("tools", "an array", t, aerr);
        }

        n = json_array_size(t);

        if (n > KVS_API_MAX_TOOLS) {
            return kvs_api_array_too_long("tools", KVS_API_MAX_TOOLS, n,
                                          aerr);
        }

        for (i = 0; i < n; i++) {
            if (kvs_api_tools_one(t, i, aerr) != KVS_OK) {
                return aerr != NULL && aerr->status == 500 ? KVS_ENOMEM
                                                           : KVS_EINVAL;
            }
        }

        /* OpenAI takes [] as no tools */
        if (n > 0) {
            req->tools = t;
            req->n_tools = (uint32_t) n;
            req->tool_choice = KVS_API_TOOL_AUTO;
        }
    }

    v = kvs_api_opt(req->root, "tool_choice");

    if (v != NULL) {
        if (req->n_tools == 0) {
            return kvs_api_tools_only("tool_choice", aerr);
        }

        if (kvs_api_tools_choice(req, v, aerr) != KVS_OK) {
            return KVS_EINVAL;
        }
    }

    v = kvs_api_opt(req->root, "parallel_tool_calls");

    if (v != NULL) {
        if (req->n_tools == 0) {
            return kvs_api_tools_only("parallel_tool_calls", aerr);
        }

        if (kvs_api_bool(v, "parallel_tool_calls", &req->parallel_tool_calls,
                         aerr) != KVS_OK)
        {
            return KVS_EINVAL;
        }
    }

    return KVS_OK;
}


/* The spec of kvs_gram_from_tools(): choice, parallel, syntax and each
 * callable tool's name and parameters (absent: any object). */
static json_t *
kvs_api_tools_spec(const kvs_api_req_t *req, const char *choice,
    const char *syntax)
{
    size_t         i;
    json_t        *spec, *list, *one;
    const json_t  *f, *params;

    spec = json_object();
    list = json_array();
    if (spec == NULL || list == NULL
        || json_object_set_new(spec, "tools", list) != 0)
    {
        json_decref(list);
        json_decref(spec);
        return NULL;
    }

    for (i = 0; i < req->n_tools; i++) {
        if (req->tool_choice == KVS_API_TOOL_NAMED && i != req->tool_named) {
            continue;
        }

        f = json_object_get(json_array_get(req->tools, i), "function");
        params = json_object_get(f, "parameters");

        one = json_object();
        if (one == NULL || json_array_append_new(list, one) != 0
            || json_object_set(one, "name", json_object_get(f, "name"))
               != 0
            || (params != NULL
                && json_object_set(one, "parameters", (json_t *) params)
                   != 0))
        {
            json_decref(spec);
            return NULL;
        }
    }

    if (json_object_set_new(spec, "choice", json_string(choice)) != 0
        || json_object_set_new(spec, "parallel",
                               json_boolean(req->parallel_tool_calls))
           != 0
        || json_object_set_new(spec, "syntax", json_string(syntax)) != 0)
    {
        json_decref(spec);
        return NULL;
    }

    return spec;
}


int
kvs_api_req_tools_plan(kvs_api_req_t *req, kvs_tool_syntax_t syn,
    int jinja, kvs_api_err_t *aerr)
{
    int          rc;
    char        *text;
    json_t      *spec;
    kvs_err_t    err;
    kvs_gram_t   g;
    const char  *choice;

    req->tool_syntax = KVS_TOOL_SYN_NONE;
    req->tool_text_only = 0;

    /* Functionary v3.2's generation prompt ends with ">>>": its text
     * answers begin with the recipient line "all\n", tools or not */
    if (jinja && syn == KVS_TOOL_SYN_FUNCTIONARY32
        && (req->n_tools == 0 || req->tool_choice == KVS_API_TOOL_NONE))
    {
        req->tool_syntax = KVS_TOOL_SYN_FUNCTIONARY32;
        req->tool_text_only = 1;
    }

    if (req->n_tools == 0) {
        return KVS_OK;
    }

    if (!jinja) {
        kvs_api_err_set(aerr, 400, "tools", "invalid_value", "Invalid "
                        "'tools': the model's chat template is a built-in "
                        "format, which has no place for tools; serve the "
                        "model with its own (Jinja) template.");
        return KVS_EINVAL;
    }

    /* "none": the tools are rendered but the output is text; without a
     * syntax we parse, nothing constrains or parses it */
    if (syn == KVS_TOOL_SYN_NONE || syn >= KVS_TOOL_SYN_N) {
        if (req->tool_choice == KVS_API_TOOL_NONE) {
            return KVS_OK;
        }

        kvs_api_err_set(aerr, 400, "tools", "invalid_value", "Invalid "
                        "'tools': the model's chat template teaches no "
                        "tool-call syntax kvserve parses (hermes, llama3, "
                        "mistral, granite, firefunction, functionary, "
                        "deepseek, functionary32, llama4, commandr, "
                        "commandr7b, minicpm3); "
                        "only tool_choice 'none' is possible.");
        return KVS_EINVAL;
    }

    if (req->rf_kind != KVS_GRAM_REQ_NONE) {
        kvs_api_err_set(aerr, 400, "response_format", "invalid_value",
                        "Invalid 'response_format': it cannot be combined "
                        "with tools yet.");
        return KVS_EINVAL;
    }

    if (req->n_stop > 0) {
        if (req->tool_choice == KVS_API_TOOL_NONE) {
            return KVS_OK;
        }

        kvs_api_err_set(aerr, 400, "stop", "invalid_value", "Invalid 'stop':"
                        " stop sequences cannot be combined with tools "
                        "(they could cut a tool call short).");
        return KVS_EINVAL;
    }

    switch (req->tool_choice) {
    case KVS_API_TOOL_NONE:
        choice = "none";
        break;
    case KVS_API_TOOL_AUTO:
        choice = "auto";
        break;
    default:
        choice = "required";
        break;
    }

    spec = kvs_api_tools_spec(req, choice, kvs_tool_syntax_name(syn));
    text = spec != NULL ? json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS)
                        : NULL;
    json_decref(spec);

    if (text == NULL) {
        return kvs_api_tools_nomem(aerr);
    }

    if (strlen(text) > KVS_GRAM_REQ_MAX_SCHEMA) {
        kvs_api_err_set(aerr, 400, "tools", "invalid_value", "Invalid "
                        "'tools': the tool definitions take %zu bytes as "
                        "canonical JSON, over the %u this host takes.",
                        strlen(text), KVS_GRAM_REQ_MAX_SCHEMA);
        free(text);
        return KVS_EINVAL;
    }

    /* compiled once here so that a failure is the client's 400, not the
     * engine's; the engine compiles it again through its cache */
    rc = kvs_gram_req_compile(&g, KVS_GRAM_REQ_TOOLS, text, strlen(text),
                              &err);
    kvs_gram_free(&g);

    /* the message leads with the spec's path ("tools[0].parameters.
     * type: ..."), which becomes param */
    if (rc != KVS_OK) {
        kvs_api_err_from_msg(aerr, rc == KVS_ENOMEM ? 500 : 400,
                             "invalid_value", err.msg);
        free(text);
        return rc == KVS_ENOMEM ? KVS_ENOMEM : KVS_EINVAL;
    }

    free(req->rf_schema);
    req->rf_schema = text;
    req->rf_schema_len = strlen(text);
    req->rf_kind = KVS_GRAM_REQ_TOOLS;
    if (req->tool_choice != KVS_API_TOOL_NONE) {
        req->tool_syntax = (unsigned) syn;
    }

    return KVS_OK;
}
