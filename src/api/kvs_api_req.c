/*
 * kvs_api_req: parsing an OpenAI chat or completions body into a
 * kvs_api_req_t: the JSON itself (size limit, strict UTF-8, no duplicate
 * keys, no NUL, jansson's depth limit), the typed field checkers with
 * OpenAI's error wording, and the error objects.  The scalar fields are
 * in kvs_api_req_fields.c, messages and prompts in kvs_api_req_msg.c.
 *
 * Invariants: on success every field of the request is in its range (so
 * kvs_sample_params_check() passes for any vocabulary larger than the
 * largest logit_bias id); on failure the request owns nothing and *aerr
 * says why, with param naming the field as the client wrote it.  An
 * absent field and JSON null are the same thing everywhere.
 */

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_utf8.h"
#include "kvs_api.h"
#include "kvs_api_req_impl.h"


/* Errors. */

/* Invalid UTF-8 becomes '?', so the error body never needs replacing. */
static void
kvs_api_err_clean(char *s)
{
    size_t    i, n, len;
    uint32_t  cp;

    len = strlen(s);

    for (i = 0; i < len; i += n) {
        n = kvs_utf8_next((const uint8_t *) s + i, len - i, &cp);

        if (n == 0) {
            s[i] = '?';
            n = 1;
        }
    }
}


void
kvs_api_err_set(kvs_api_err_t *aerr, int status, const char *param,
    const char *code, const char *fmt, ...)
{
    va_list  ap;

    if (aerr == NULL) {
        return;
    }

    aerr->status = status;

    va_start(ap, fmt);
    vsnprintf(aerr->message, sizeof(aerr->message), fmt, ap);
    va_end(ap);

    snprintf(aerr->param, sizeof(aerr->param), "%s",
             param != NULL ? param : "");
    snprintf(aerr->type, sizeof(aerr->type), "%s",
             "invalid_request_error");
    snprintf(aerr->code, sizeof(aerr->code), "%s",
             code != NULL ? code : "");

    kvs_api_err_clean(aerr->message);
    kvs_api_err_clean(aerr->param);
}


/* A field path as the library's messages start: name, .name, [i]. */
static size_t
kvs_api_path_len(const char *msg)
{
    size_t  i;
    char    c;

    for (i = 0; msg[i] != '\0'; i++) {
        c = msg[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
              || (c >= '0' && c <= '9') || c == '_' || c == '.'
              || c == '[' || c == ']'))
        {
            break;
        }
    }

    return msg[i] == ':' && msg[i + 1] == ' ' ? i : 0;
}


/* The request's top-level fields, the only roots a param may have: a
 * library message may start with its own names ("SUBMIT", "engine",
 * "sampler", "id"), which mean nothing to the client. */
static const char  *kvs_api_fields[] = {
    "model", "messages", "prompt", "n", "stop", "logit_bias", "max_tokens",
    "max_completion_tokens", "temperature", "top_p", "top_k", "min_p",
    "seed", "stream", "stream_options", "logprobs", "top_logprobs",
    "presence_penalty", "frequency_penalty", "user", "echo", "suffix",
    "best_of", "response_format", "tools", "tool_choice",
    "parallel_tool_calls", "functions", "function_call", "ignore_eos"
};


static int
kvs_api_path_is_field(const char *path, size_t len)
{
    size_t  i, n;

    for (n = 0; n < len && path[n] != '.' && path[n] != '['; n++) {
        /* the root's length */
    }

    for (i = 0; i < sizeof(kvs_api_fields) / sizeof(kvs_api_fields[0]);
         i++)
    {
        if (strlen(kvs_api_fields[i]) == n
            && memcmp(kvs_api_fields[i], path, n) == 0)
        {
            return 1;
        }
    }

    return 0;
}


void
kvs_api_err_from_msg(kvs_api_err_t *aerr, int status, const char *code,
    const char *msg)
{
    size_t       n, skip;
    const char  *m;
    char         param[KVS_API_PATH_LEN];

    m = msg;
    n = kvs_api_path_len(m);

    if (n != 0 && !kvs_api_path_is_field(m, n)) {
        /* "SUBMIT: logit_bias: ...": an internal prefix before a field */
        skip = n + 2;
        n = kvs_api_path_len(m + skip);

        if (n != 0 && kvs_api_path_is_field(m + skip, n)) {
            m += skip;

        } else {
            n = 0;
        }
    }

    if (n == 0 || n >= sizeof(param)) {
        kvs_api_err_set(aerr, status, NULL, code, "%s", msg);
        return;
    }

    memcpy(param, m, n);
    param[n] = '\0';

    kvs_api_err_set(aerr, status, param, code, "%s", m + n + 2);
}


int
kvs_api_err_json(const kvs_api_err_t *aerr, kvs_buf_t *out)
{
    return kvs_api_error_json(out, aerr->message, aerr->type,
                              aerr->param[0] != '\0' ? aerr->param : NULL,
                              aerr->code[0] != '\0' ? aerr->code : NULL);
}


/* Typed field access. */

void
kvs_api_path(char *path, const char *fmt, ...)
{
    va_list  ap;

    va_start(ap, fmt);
    vsnprintf(path, KVS_API_PATH_LEN, fmt, ap);
    va_end(ap);
}


const json_t *
kvs_api_opt(const json_t *obj, const char *key)
{
    const json_t  *v;

    v = json_object_get(obj, key);

    return json_is_null(v) ? NULL : v;
}


const char *
kvs_api_json_what(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a decimal";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}


int
kvs_api_type_err(const char *path, const char *expected, const json_t *v,
    kvs_api_err_t *aerr)
{
    kvs_api_err_set(aerr, 400, path, "invalid_type", "Invalid type for "
                    "'%s': expected %s, but got %s instead.", path,
                    expected, kvs_api_json_what(v));

    return KVS_EINVAL;
}


int
kvs_api_missing(const char *path, kvs_api_err_t *aerr)
{
    kvs_api_err_set(aerr, 400, path, "missing_required_parameter",
                    "Missing required parameter: '%s'.", path);

    return KVS_EINVAL;
}


/* Only the keys OpenAI defines (keys[], NULL-ended): one we do not act on
 * is a 400 naming it, not ignored. */
int
kvs_api_keys(const json_t *obj, const char *path, const char *const *keys,
    kvs_api_err_t *aerr)
{
    size_t       i;
    const char  *k;
    json_t      *v;
    char         p[KVS_API_PATH_LEN];

    json_object_foreach((json_t *) obj, k, v) {
        for (i = 0; keys[i] != NULL; i++) {
            if (strcmp(k, keys[i]) == 0) {
                break;
            }
        }

        if (keys[i] == NULL) {
            kvs_api_path(p, "%s.%s", path, k);
            kvs_api_err_set(aerr, 400, p, "unknown_parameter", "Unrecognized "
                            "parameter: '%s.%s'.", path, k);
            return KVS_EINVAL;
        }
    }

    (void) v;

    return KVS_OK;
}


int
kvs_api_array_too_long(const char *path, size_t max, size_t n,
    kvs_api_err_t *aerr)
{
    kvs_api_err_set(aerr, 400, path, "array_above_max_length",
                    "Invalid '%s': array too long. Expected an array with "
                    "maximum length %zu, but got an array with length %zu "
                    "instead.", path, max, n);

    return KVS_EINVAL;
}


/* A number as the client wrote it, near enough: integers exactly, reals
 * in the shortest of %.15g and %.17g that reads back the same. */
void
kvs_api_num_text(const json_t *v, char *buf, size_t size)
{
    double  d;

    if (json_is_integer(v)) {
        snprintf(buf, size, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return;
    }

    d = json_real_value(v);

    snprintf(buf, size, "%.15g", d);

    if (strtod(buf, NULL) != d) {
        snprintf(buf, size, "%.17g", d);
    }
}


/* Integers count as numbers; booleans do not (jansson agrees). */
int
kvs_api_num(const json_t *v, const char *path, double lo, double hi,
    double *out, kvs_api_err_t *aerr)
{
    int     below;
    char    got[32];
    double  d;

    if (!json_is_number(v)) {
        return kvs_api_type_err(path, "a number", v, aerr);
    }

    d = json_number_value(v);

    if (d >= lo && d <= hi) {
        *out = d;
        return KVS_OK;
    }

    below = d < lo;
    kvs_api_num_text(v, got, sizeof(got));

    kvs_api_err_set(aerr, 400, path,
                    below ? "decimal_below_min_value"
                          : "decimal_above_max_value",
                    "Invalid '%s': decimal %s value. Expected a value %s "
                    "%g, but got %s instead.", path,
                    below ? "below minimum" : "above maximum",
                    below ? ">=" : "<=", below ? lo : hi, got);

    return KVS_EINVAL;
}


/* JSON integers only: 2.0 is a decimal and rejected, as OpenAI does. */
int
kvs_api_int(const json_t *v, const char *path, int64_t lo, int64_t hi,
    int64_t *out, kvs_api_err_t *aerr)
{
    int      below;
    int64_t  i;

    if (!json_is_integer(v)) {
        return kvs_api_type_err(path, "an integer", v, aerr);
    }

    i = (int64_t) json_integer_value(v);

    if (i >= lo && i <= hi) {
        *out = i;
        return KVS_OK;
    }

    below = i < lo;

    kvs_api_err_set(aerr, 400, path,
                    below ? "integer_below_min_value"
                          : "integer_above_max_value",
                    "Invalid '%s': integer %s value. Expected a value %s "
                    "%" PRId64 ", but got %" PRId64 " instead.", path,
                    below ? "below minimum" : "above maximum",
                    below ? ">=" : "<=", below ? lo : hi, i);

    return KVS_EINVAL;
}


int
kvs_api_bool(const json_t *v, const char *path, int *out,
    kvs_api_err_t *aerr)
{
    if (!json_is_boolean(v)) {
        return kvs_api_type_err(path, "a boolean", v, aerr);
    }

    *out = json_is_true(v);

    return KVS_OK;
}


int
kvs_api_str(const json_t *v, const char *path, kvs_api_str_t *out,
    kvs_api_err_t *aerr)
{
    if (!json_is_string(v)) {
        return kvs_api_type_err(path, "a string", v, aerr);
    }

    out->ptr = json_string_value(v);
    out->len = json_string_length(v);

    return KVS_OK;
}


/* The body itself. */

int
kvs_api_req_load(kvs_api_req_t *req, const char *body, size_t len,
    size_t max_body, kvs_api_err_t *aerr)
{
    json_t                *root;
    const char            *why, *hint;
    json_error_t           je;
    enum json_error_code   code;

    if (max_body != 0 && len > max_body) {
        kvs_api_err_set(aerr, 413, NULL, NULL, "Request body too large: "
                        "%zu bytes, the limit is %zu bytes.", len, max_body);
        return KVS_ERANGE;
    }

    if (body == NULL || len == 0) {
        kvs_api_err_set(aerr, 400, NULL, NULL, "We could not parse the JSON "
                        "body of your request: the body is empty, expected "
                        "a JSON object.");
        return KVS_EFORMAT;
    }

    /* DECODE_ANY so that a scalar body gets the type error below rather
     * than a syntax error; no ALLOW_NUL: every string stays a C string */
    root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY,
                      &je);

    if (root == NULL) {
        code = json_error_code(&je);
        why = je.text;
        hint = "";

        if (code == json_error_out_of_memory) {
            kvs_api_err_set(aerr, 500, NULL, NULL, "Out of memory parsing "
                            "the request body.");
            if (aerr != NULL) {
                snprintf(aerr->type, sizeof(aerr->type), "server_error");
            }
            return KVS_ENOMEM;
        }

        if (code == json_error_null_character) {
            why = "\\u0000 (NUL) is not accepted in strings";

        } else if (code == json_error_invalid_utf8) {
            hint = " (the body must be valid UTF-8)";
        }

        kvs_api_err_set(aerr, 400, NULL, NULL, "We could not parse the JSON "
                        "body of your request: %s%s, at line %d column %d.",
                        why, hint, je.line, je.column);
        return KVS_EFORMAT;
    }

    if (!json_is_object(root)) {
        kvs_api_err_set(aerr, 400, NULL, "invalid_type", "Invalid type for "
                        "the request body: expected a JSON object, but got "
                        "%s instead.", kvs_api_json_what(root));
        json_decref(root);
        return KVS_EINVAL;
    }

    req->root = root;

    return KVS_OK;
}


void
kvs_api_req_init(kvs_api_req_t *req, kvs_api_kind_t kind)
{
    memset(req, 0, sizeof(*req));
    req->kind = kind;
    req->n = 1;
    req->sample.temperature = 1.0f;
    req->sample.top_p = 1.0f;
}


int
kvs_api_req_parse(kvs_api_req_t *req, kvs_api_kind_t kind, const char *body,
    size_t len, size_t max_body, kvs_api_err_t *aerr)
{
    int            rc;
    const json_t  *v;

    kvs_api_req_init(req, kind);

    rc = kvs_api_req_load(req, body, len, max_body, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    v = kvs_api_opt(req->root, "model");

    if (v == NULL) {
        rc = kvs_api_missing("model", aerr);

    } else {
        rc = kvs_api_str(v, "model", &req->model, aerr);
    }

    if (rc == KVS_OK) {
        rc = kind == KVS_API_CHAT ? kvs_api_req_messages(req, aerr)
                                  : kvs_api_req_prompts(req, aerr);
    }

    if (rc == KVS_OK) {
        rc = kvs_api_req_common(req, aerr);
    }

    if (rc == KVS_OK) {
        rc = kind == KVS_API_CHAT ? kvs_api_req_chat(req, aerr)
                                  : kvs_api_req_cmpl(req, aerr);
    }

    if (rc == KVS_OK) {
        rc = kvs_api_req_response_format(req, aerr);
    }

    if (rc == KVS_OK && kind == KVS_API_CHAT) {
        rc = kvs_api_req_tools(req, aerr);
    }

    if (rc != KVS_OK) {
        kvs_api_req_free(req);
        req->kind = kind;
    }

    return rc;
}


void
kvs_api_req_free(kvs_api_req_t *req)
{
    size_t  i;

    if (req->prompts != NULL) {
        for (i = 0; i < req->n_prompts; i++) {
            free(req->prompts[i].ids);
        }

        free(req->prompts);
    }

    /* ours: kvs_api_req_logit_bias() allocated it */
    free((void *) req->sample.logit_bias);
    free(req->rf_schema);             /* json_dumps' malloc */

    json_decref(req->root);
    json_decref(req->msg_root);

    memset(req, 0, sizeof(*req));
}
