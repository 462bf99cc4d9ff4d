/*
 * kvs_api_req_fields: the scalar fields of chat and completions requests
 * (sampling, stop, seed, streaming, logit_bias, token limits, logprobs,
 * echo, and the completions fields we refuse), each checked for its type
 * and range and stored in the request with its default otherwise.
 *
 * Invariant: what is stored passes kvs_sample_params_check() for any
 * vocabulary larger than the largest logit_bias id; stop strings are
 * 1..256 bytes.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_api_req_impl.h"


/* Shorthands for top-level fields, where the key is the path. */

static int
kvs_api_f_num(const json_t *root, const char *key, double lo, double hi,
    float *out, kvs_api_err_t *aerr)
{
    int            rc;
    double         d;
    const json_t  *v;

    v = kvs_api_opt(root, key);
    if (v == NULL) {
        return KVS_OK;
    }

    rc = kvs_api_num(v, key, lo, hi, &d, aerr);
    if (rc == KVS_OK) {
        *out = (float) d;
    }

    return rc;
}


/* *given (may be NULL) is set to 1 when the field is there. */
static int
kvs_api_f_int(const json_t *root, const char *key, int64_t lo, int64_t hi,
    int64_t *out, int *given, kvs_api_err_t *aerr)
{
    const json_t  *v;

    v = kvs_api_opt(root, key);
    if (v == NULL) {
        return KVS_OK;
    }

    if (given != NULL) {
        *given = 1;
    }

    return kvs_api_int(v, key, lo, hi, out, aerr);
}


static int
kvs_api_f_bool(const json_t *root, const char *key, int *out,
    kvs_api_err_t *aerr)
{
    const json_t  *v;

    v = kvs_api_opt(root, key);

    return v == NULL ? KVS_OK : kvs_api_bool(v, key, out, aerr);
}


/* Fields both endpoints have. */

static int
kvs_api_req_stop1(kvs_api_req_t *req, const json_t *v, const char *path,
    kvs_api_err_t *aerr)
{
    int            rc;
    kvs_api_str_t  s;

    rc = kvs_api_str(v, path, &s, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    if (s.len == 0) {
        kvs_api_err_set(aerr, 400, path, "empty_string", "Invalid '%s': "
                        "empty string. Expected a string with minimum "
                        "length 1, but got an empty string instead.", path);
        return KVS_EINVAL;
    }

    if (s.len > KVS_API_MAX_STOP_LEN) {
        kvs_api_err_set(aerr, 400, path, "string_above_max_length",
                        "Invalid '%s': string too long. Expected a string "
                        "with maximum length %d bytes, but got a string "
                        "with length %zu instead.", path,
                        KVS_API_MAX_STOP_LEN, s.len);
        return KVS_EINVAL;
    }

    req->stop[req->n_stop++] = s;

    return KVS_OK;
}


static int
kvs_api_req_stop(kvs_api_req_t *req, const json_t *v, kvs_api_err_t *aerr)
{
    int            rc;
    char           path[KVS_API_PATH_LEN];
    size_t         i, n;
    const json_t  *s;

    if (json_is_string(v)) {
        return kvs_api_req_stop1(req, v, "stop", aerr);
    }

    if (!json_is_array(v)) {
        return kvs_api_type_err("stop", "a string or an array of strings",
                                v, aerr);
    }

    n = json_array_size(v);

    if (n == 0) {
        kvs_api_err_set(aerr, 400, "stop", "empty_array", "Invalid 'stop': "
                        "empty array. Expected an array with minimum "
                        "length 1, but got an empty array instead.");
        return KVS_EINVAL;
    }

    if (n > KVS_API_MAX_STOP) {
        return kvs_api_array_too_long("stop", KVS_API_MAX_STOP, n, aerr);
    }

    for (i = 0; i < n; i++) {
        s = json_array_get(v, i);
        kvs_api_path(path, "stop[%zu]", i);

        rc = kvs_api_req_stop1(req, s, path, aerr);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}


/* A token id written as a key: decimal digits only, at most INT32_MAX. */
static int
kvs_api_token_key(const char *key, int32_t *id)
{
    size_t   i;
    int64_t  v;

    v = 0;

    for (i = 0; key[i] != '\0'; i++) {
        if (key[i] < '0' || key[i] > '9') {
            return KVS_EINVAL;
        }

        v = v * 10 + (key[i] - '0');

        if (v > INT32_MAX) {
            return KVS_ERANGE;
        }
    }

    if (i == 0) {
        return KVS_EINVAL;
    }

    *id = (int32_t) v;

    return KVS_OK;
}


static int
kvs_api_req_logit_bias(kvs_api_req_t *req, const json_t *v,
    kvs_api_err_t *aerr)
{
    int                rc;
    char               got[32];
    size_t             n, i;
    double             d;
    json_t            *val;
    const char        *key;
    kvs_logit_bias_t  *bias;

    if (!json_is_object(v)) {
        return kvs_api_type_err("logit_bias", "an object", v, aerr);
    }

    n = json_object_size(v);
    if (n == 0) {
        return KVS_OK;
    }

    /* before the allocation: the entries' array is sized from n */
    if (n > KVS_API_MAX_BIAS) {
        kvs_api_err_set(aerr, 400, "logit_bias", "invalid_value", "Invalid "
                        "'logit_bias': too many entries. Expected at most "
                        "%d, but got %zu instead.", KVS_API_MAX_BIAS, n);
        return KVS_EINVAL;
    }

    bias = malloc(n * sizeof(kvs_logit_bias_t));
    if (bias == NULL) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "Out of memory for "
                        "logit_bias.");
        return KVS_ENOMEM;
    }

    /* the request owns it from here, so every exit below is clean */
    req->sample.logit_bias = bias;
    i = 0;

    json_object_foreach((json_t *) v, key, val) {
        rc = kvs_api_token_key(key, &bias[i].token);

        if (rc != KVS_OK) {
            kvs_api_err_set(aerr, 400, "logit_bias", "invalid_value",
                            "Invalid 'logit_bias': key '%.40s' is not a "
                            "token id: keys must be non-negative integers "
                            "up to %d written as strings, such as "
                            "\"50256\".", key, INT32_MAX);
            return KVS_EINVAL;
        }

        if (!json_is_number(val)) {
            kvs_api_err_set(aerr, 400, "logit_bias", "invalid_type",
                            "Invalid type for 'logit_bias': the bias for "
                            "token %s must be a number, but got %s "
                            "instead.", key, kvs_api_json_what(val));
            return KVS_EINVAL;
        }

        d = json_number_value(val);

        if (!(d >= -KVS_SAMPLE_MAX_BIAS && d <= KVS_SAMPLE_MAX_BIAS)) {
            kvs_api_num_text(val, got, sizeof(got));
            kvs_api_err_set(aerr, 400, "logit_bias",
                            d < 0 ? "decimal_below_min_value"
                                  : "decimal_above_max_value",
                            "Invalid 'logit_bias': the bias for token %s "
                            "must be between -100 and 100, but got %s "
                            "instead.", key, got);
            return KVS_EINVAL;
        }

        bias[i].bias = (float) d;
        req->sample.n_logit_bias = (uint32_t) ++i;
    }

    return KVS_OK;
}


static int
kvs_api_req_stream(kvs_api_req_t *req, kvs_api_err_t *aerr)
{
    int            rc, obf;
    const json_t  *root, *so, *v;

    root = req->root;

    rc = kvs_api_f_bool(root, "stream", &req->stream, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    so = kvs_api_opt(root, "stream_options");
    if (so == NULL) {
        return KVS_OK;
    }

    if (!json_is_object(so)) {
        return kvs_api_type_err("stream_options", "an object", so, aerr);
    }

    /* OpenAI's and vLLM's rule: "only set this when you set stream:
     * true"; a client that sends it otherwise meant to stream */
    if (!req->stream) {
        kvs_api_err_set(aerr, 400, "stream_options", "invalid_value",
                        "The 'stream_options' parameter is only allowed "
                        "when 'stream' is true.");
        return KVS_EINVAL;
    }

    v = kvs_api_opt(so, "include_usage");
    if (v != NULL) {
        rc = kvs_api_bool(v, "stream_options.include_usage",
                          &req->include_usage, aerr);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    /* accepted and ignored: we send no obfuscation padding */
    v = kvs_api_opt(so, "include_obfuscation");
    if (v != NULL) {
        return kvs_api_bool(v, "stream_options.include_obfuscation", &obf,
                            aerr);
    }

    return KVS_OK;
}


int
kvs_api_req_common(kvs_api_req_t *req, kvs_api_err_t *aerr)
{
    int                   rc;
    int64_t               i;
    const json_t         *root, *v;
    kvs_sample_params_t  *sp;

    root = req->root;
    sp = &req->sample;

    i = 1;
    rc = kvs_api_f_int(root, "n", 1, KVS_API_MAX_N, &i, NULL, aerr);
    if (rc != KVS_OK) {
        return rc;
    }
    req->n = (uint32_t) i;

    v = kvs_api_opt(root, "stop");
    if (v != NULL) {
        rc = kvs_api_req_stop(req, v, aerr);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    i = 0;
    rc = kvs_api_f_int(root, "seed", INT64_MIN, INT64_MAX, &i,
                       &req->has_seed, aerr);
    if (rc != KVS_OK) {
        return rc;
    }
    sp->seed = (uint64_t) i;

    rc = kvs_api_req_stream(req, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    if (kvs_api_f_num(root, "temperature", 0, 2, &sp->temperature, aerr)
        || kvs_api_f_num(root, "top_p", 0, 1, &sp->top_p, aerr)
        || kvs_api_f_num(root, "min_p", 0, 1, &sp->min_p, aerr)
        || kvs_api_f_num(root, "presence_penalty", -2, 2,
                         &sp->presence_penalty, aerr)
        || kvs_api_f_num(root, "frequency_penalty", -2, 2,
                         &sp->frequency_penalty, aerr))
    {
        return KVS_EINVAL;
    }

    /* vLLM's convention: -1 (and 0) mean off; above INT32_MAX is off too,
     * as no vocabulary is that large */
    i = 0;
    rc = kvs_api_f_int(root, "top_k", -1, INT64_MAX, &i, NULL, aerr);
    if (rc != KVS_OK) {
        return rc;
    }
    sp->top_k = i < 0 ? 0 : (i > INT32_MAX ? INT32_MAX : (int32_t) i);

    /* vLLM's and llama-server's extension, which serving benchmarks
     * send to get exactly max_tokens out of every request */
    rc = kvs_api_f_bool(root, "ignore_eos", &req->ignore_eos, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    v = kvs_api_opt(root, "logit_bias");
    if (v != NULL) {
        rc = kvs_api_req_logit_bias(req, v, aerr);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    v = kvs_api_opt(root, "user");
    if (v != NULL) {
        return kvs_api_str(v, "user", &req->user, aerr);
    }

    return KVS_OK;
}


/* The fields only chat has. */
int
kvs_api_req_chat(kvs_api_req_t *req, kvs_api_err_t *aerr)
{
    int            rc;
    int64_t        i;
    const json_t  *root;

    root = req->root;

    req->max_tokens = -1;
    rc = kvs_api_f_int(root, "max_tokens", 1, INT64_MAX, &req->max_tokens,
                       NULL, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_api_f_int(root, "max_completion_tokens", 1, INT64_MAX,
                       &req->max_tokens, NULL, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_api_f_bool(root, "logprobs", &req->sample.logprobs, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    i = 0;
    rc = kvs_api_f_int(root, "top_logprobs", 0, KVS_SAMPLE_MAX_TOP_LOGPROBS,
                       &i, NULL, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    /* vLLM's reading of "logprobs must be true if this is used": 0 asks
     * for nothing, so it passes without logprobs */
    if (i > 0 && !req->sample.logprobs) {
        kvs_api_err_set(aerr, 400, "top_logprobs", "invalid_value",
                        "Invalid 'top_logprobs': 'logprobs' must be set to "
                        "true when 'top_logprobs' is used.");
        return KVS_EINVAL;
    }

    req->sample.top_logprobs = (int32_t) i;

    return KVS_OK;
}


/* The fields only completions has. */
int
kvs_api_req_cmpl(kvs_api_req_t *req, kvs_api_err_t *aerr)
{
    int            rc, given;
    int64_t        i;
    const json_t  *root, *v;

    root = req->root;

    rc = kvs_api_f_bool(root, "echo", &req->echo, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    /* 0 only makes sense with echo: the prompt comes back, nothing new */
    req->max_tokens = KVS_API_MAX_TOKENS_C;
    rc = kvs_api_f_int(root, "max_tokens", req->echo ? 0 : 1, INT64_MAX,
                       &req->max_tokens, NULL, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    i = 0;
    given = 0;
    rc = kvs_api_f_int(root, "logprobs", 0, KVS_API_MAX_LOGPROBS_C, &i,
                       &given, aerr);
    if (rc != KVS_OK) {
        return rc;
    }
    req->sample.logprobs = given;
    req->sample.top_logprobs = (int32_t) i;

    v = kvs_api_opt(root, "suffix");
    if (v != NULL) {
        if (!json_is_string(v)) {
            return kvs_api_type_err("suffix", "a string", v, aerr);
        }

        /* "" inserts nothing, so it asks for nothing we lack */
        if (json_string_length(v) != 0) {
            kvs_api_err_set(aerr, 400, "suffix", "unsupported_value",
                            "suffix is not supported: this server does "
                            "not do insertion (fill-in-the-middle).");
            return KVS_EINVAL;
        }
    }

    v = kvs_api_opt(root, "best_of");
    if (v != NULL) {
        if (!json_is_integer(v)) {
            return kvs_api_type_err("best_of", "an integer", v, aerr);
        }

        if (json_integer_value(v) != 1) {
            kvs_api_err_set(aerr, 400, "best_of", "unsupported_value",
                            "best_of is not supported: only 1 (the "
                            "default) is accepted; use n for several "
                            "completions.");
            return KVS_EINVAL;
        }
    }

    return KVS_OK;
}
