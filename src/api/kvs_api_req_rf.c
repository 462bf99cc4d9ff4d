/*
 * kvs_api_req_rf: the request's response_format, on chat completions and
 * (an extension) on /v1/completions:
 *
 *   {"type": "text"}                               no constraint
 *   {"type": "json_object"}                        any JSON object
 *   {"type": "json_schema", "json_schema": {"name": ..., "schema": {...},
 *    "strict": bool, "description": ...}}          an instance of schema
 *
 * Invariants: on success req->rf_kind is set and, for json_schema,
 * req->rf_schema holds the schema's canonical text (sorted keys,
 * compact: what the engine compiles and caches by), at most
 * KVS_GRAM_REQ_MAX_SCHEMA bytes, which the grammar compiler accepted
 * here already: a keyword it does not support is a 400 whose message
 * starts with the keyword's path ("response_format.json_schema.schema.
 * properties.x.format: ..."), never ignored.  Any other type, a key we
 * do not know inside response_format, or a malformed shape is a 400
 * naming the field.  Stop strings with a JSON constraint are refused
 * (they could cut the JSON short).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_gram_req.h"
#include "kvs_api_req_impl.h"


/* OpenAI's rule for json_schema.name: a-z, A-Z, 0-9, _ and -, 1..64. */
static int
kvs_api_rf_name(const json_t *v, kvs_api_err_t *aerr)
{
    size_t         i;
    char           c;
    kvs_api_str_t  s;
    const char    *path = "response_format.json_schema.name";

    if (v == NULL) {
        return kvs_api_missing(path, aerr);
    }

    if (kvs_api_str(v, path, &s, aerr) != KVS_OK) {
        return KVS_EINVAL;
    }

    for (i = 0; i < s.len; i++) {
        c = s.ptr[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
              || (c >= '0' && c <= '9') || c == '_' || c == '-'))
        {
            break;
        }
    }

    if (s.len == 0 || s.len > 64 || i < s.len) {
        kvs_api_err_set(aerr, 400, path, "invalid_value", "Invalid '%s': "
                        "expected 1 to 64 characters of a-z, A-Z, 0-9, _ "
                        "and -.", path);
        return KVS_EINVAL;
    }

    return KVS_OK;
}


/* The compiler's "PATH: why" with our prefix; param is the whole path
 * when it fits, else the schema's. */
static void
kvs_api_rf_compile_err(const kvs_err_t *err, kvs_api_err_t *aerr)
{
    size_t       n;
    const char  *colon, *pre;
    char         param[KVS_API_PATH_LEN];

    pre = "response_format.json_schema.schema";

    /* "schema: ..." is about the text as a whole */
    if (strncmp(err->msg, "schema: ", 8) == 0) {
        kvs_api_err_set(aerr, 400, pre, "invalid_value", "%s: %s", pre,
                        err->msg + 8);
        return;
    }

    colon = strstr(err->msg, ": ");
    n = colon != NULL ? (size_t) (colon - err->msg) : 0;

    if (n > 0 && strlen(pre) + 1 + n < sizeof(param)) {
        kvs_api_path(param, "%s.%.*s", pre, (int) n, err->msg);

    } else {
        kvs_api_path(param, "%s", pre);
    }

    kvs_api_err_set(aerr, 400, param,
                    err->code == KVS_EUNSUPPORTED ? "unsupported_value"
                                                  : "invalid_value",
                    "%s.%s", pre, err->msg);
}


static int
kvs_api_rf_schema(kvs_api_req_t *req, const json_t *js, kvs_api_err_t *aerr)
{
    int            rc;
    char          *text;
    size_t         len;
    json_t        *empty;
    kvs_err_t      err;
    kvs_gram_t     g;
    const json_t  *schema, *v;

    static const char *const  keys[] = {
        "name", "schema", "strict", "description", NULL
    };

    if (!json_is_object(js)) {
        return kvs_api_type_err("response_format.json_schema", "an object",
                                js, aerr);
    }

    if (kvs_api_keys(js, "response_format.json_schema", keys, aerr)
        != KVS_OK
        || kvs_api_rf_name(kvs_api_opt(js, "name"), aerr) != KVS_OK)
    {
        return KVS_EINVAL;
    }

    v = kvs_api_opt(js, "description");
    if (v != NULL && !json_is_string(v)) {
        return kvs_api_type_err("response_format.json_schema.description",
                                "a string", v, aerr);
    }

    v = kvs_api_opt(js, "strict");
    if (v != NULL
        && kvs_api_bool(v, "response_format.json_schema.strict",
                        &req->rf_strict, aerr) != KVS_OK)
    {
        return KVS_EINVAL;
    }

    /* OpenAI makes schema optional: absent, any JSON value (the empty
     * schema), as JSON Schema says */
    schema = kvs_api_opt(js, "schema");
    empty = NULL;

    if (schema == NULL) {
        empty = json_object();
        if (empty == NULL) {
            goto nomem;
        }
        schema = empty;

    } else if (!json_is_object(schema) && !json_is_boolean(schema)) {
        return kvs_api_type_err("response_format.json_schema.schema",
                                "an object", schema, aerr);
    }

    text = json_dumps(schema, JSON_SORT_KEYS | JSON_COMPACT
                              | JSON_ENCODE_ANY);
    json_decref(empty);

    if (text == NULL) {
        goto nomem;
    }

    len = strlen(text);

    if (len > KVS_GRAM_REQ_MAX_SCHEMA) {
        free(text);
        kvs_api_err_set(aerr, 400, "response_format.json_schema.schema",
                        "invalid_value", "response_format.json_schema."
                        "schema: %zu bytes of JSON; at most %u.", len,
                        KVS_GRAM_REQ_MAX_SCHEMA);
        return KVS_EINVAL;
    }

    kvs_err_clear(&err);
    rc = kvs_gram_req_compile(&g, KVS_GRAM_REQ_SCHEMA, text, len, &err);
    kvs_gram_free(&g);

    if (rc == KVS_ENOMEM) {
        free(text);
        goto nomem;
    }

    if (rc != KVS_OK) {
        free(text);
        kvs_api_rf_compile_err(&err, aerr);
        return KVS_EINVAL;
    }

    req->rf_kind = KVS_GRAM_REQ_SCHEMA;
    req->rf_schema = text;
    req->rf_schema_len = len;

    return KVS_OK;

nomem:

    kvs_api_err_set(aerr, 500, NULL, NULL, "Out of memory for the "
                    "response_format schema.");
    if (aerr != NULL) {
        snprintf(aerr->type, sizeof(aerr->type), "server_error");
    }

    return KVS_ENOMEM;
}


int
kvs_api_req_response_format(kvs_api_req_t *req, kvs_api_err_t *aerr)
{
    const json_t   *rf, *t;
    kvs_api_str_t   type;

    static const char *const  keys_text[] = { "type", NULL };
    static const char *const  keys_schema[] = {
        "type", "json_schema", NULL
    };

    req->rf_kind = KVS_GRAM_REQ_NONE;

    rf = kvs_api_opt(req->root, "response_format");
    if (rf == NULL) {
        return KVS_OK;
    }

    if (!json_is_object(rf)) {
        return kvs_api_type_err("response_format", "an object", rf, aerr);
    }

    t = kvs_api_opt(rf, "type");
    if (t == NULL) {
        return kvs_api_missing("response_format.type", aerr);
    }

    if (kvs_api_str(t, "response_format.type", &type, aerr) != KVS_OK) {
        return KVS_EINVAL;
    }

    if (strcmp(type.ptr, "text") == 0 || strcmp(type.ptr, "json_object") == 0)
    {
        if (kvs_api_keys(rf, "response_format", keys_text, aerr)
            != KVS_OK)
        {
            return KVS_EINVAL;
        }

        req->rf_kind = type.ptr[0] == 't' ? KVS_GRAM_REQ_NONE
                                          : KVS_GRAM_REQ_OBJECT;

    } else if (strcmp(type.ptr, "json_schema") == 0) {
        if (kvs_api_keys(rf, "response_format", keys_schema, aerr)
            != KVS_OK)
        {
            return KVS_EINVAL;
        }

        t = kvs_api_opt(rf, "json_schema");
        if (t == NULL) {
            return kvs_api_missing("response_format.json_schema", aerr);
        }

        if (kvs_api_rf_schema(req, t, aerr) != KVS_OK) {
            return aerr != NULL && aerr->status == 500 ? KVS_ENOMEM
                                                       : KVS_EINVAL;
        }

    } else {
        kvs_api_err_set(aerr, 400, "response_format.type", "invalid_value",
                        "Invalid value for 'response_format.type': "
                        "expected one of 'text', 'json_object' and "
                        "'json_schema'.");
        return KVS_EINVAL;
    }

    if (req->rf_kind != KVS_GRAM_REQ_NONE && req->n_stop > 0) {
        kvs_api_err_set(aerr, 400, "stop", "invalid_value", "Invalid 'stop':"
                        " stop sequences cannot be combined with "
                        "response_format %s (they could cut the JSON "
                        "short).", type.ptr);
        return KVS_EINVAL;
    }

    return KVS_OK;
}
