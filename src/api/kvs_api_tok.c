/*
 * kvs_api_tok: parsing POST /tokenize and /detokenize bodies (vLLM's and
 * llama-server's shapes) and writing their answers (kvs_api_tok.h says
 * which shape answers which body).
 *
 * Invariants: every field of these bodies is checked, and one we do not
 * read is a 400 naming it (never ignored); on failure the request owns
 * nothing and *aerr names the field as the client wrote it; messages
 * and tools are checked by the chat parser's own functions, so what
 * /tokenize renders is what /v1/chat/completions would.
 */

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_api.h"
#include "kvs_api_req_impl.h"
#include "kvs_api_tok.h"


static const char  *kvs_api_tokenize_keys[] = {
    "model", "prompt", "content", "messages", "tools", "tool_choice",
    "parallel_tool_calls", "add_special_tokens", "add_special",
    "parse_special", "add_generation_prompt", "continue_final_message",
    "with_pieces", "return_token_strs", NULL
};

static const char  *kvs_api_detokenize_keys[] = {
    "model", "tokens", NULL
};


/* A top-level field not in keys[] is a 400 naming it. */
static int
kvs_api_tok_keys(const json_t *root, const char *const *keys,
    kvs_api_err_t *aerr)
{
    size_t       i;
    json_t      *v;
    const char  *k;

    json_object_foreach((json_t *) root, k, v) {
        for (i = 0; keys[i] != NULL; i++) {
            if (strcmp(k, keys[i]) == 0) {
                break;
            }
        }

        if (keys[i] == NULL) {
            kvs_api_err_set(aerr, 400, k, "unknown_parameter",
                            "Unrecognized parameter: '%s'.", k);
            return KVS_EINVAL;
        }
    }

    (void) v;

    return KVS_OK;
}


/* An optional boolean field; *out keeps its default when absent. */
static int
kvs_api_tok_bool(const json_t *root, const char *key, int *out,
    kvs_api_err_t *aerr)
{
    const json_t  *v;

    v = kvs_api_opt(root, key);

    return v == NULL ? KVS_OK : kvs_api_bool(v, key, out, aerr);
}


/* A boolean option of which we honour only the default. */
static int
kvs_api_tok_only(const json_t *root, const char *key, int dflt,
    const char *why, kvs_api_err_t *aerr)
{
    int  b;

    b = dflt;

    if (kvs_api_tok_bool(root, key, &b, aerr) != KVS_OK) {
        return KVS_EINVAL;
    }

    if (b != dflt) {
        kvs_api_err_set(aerr, 400, key, "unsupported_value",
                        "%s %s is not supported: %s.", key,
                        b ? "true" : "false", why);
        return KVS_EINVAL;
    }

    return KVS_OK;
}


static int
kvs_api_tok_model(kvs_api_tok_t *t, kvs_api_err_t *aerr)
{
    const json_t  *v;

    v = kvs_api_opt(t->req.root, "model");

    return v == NULL ? KVS_OK : kvs_api_str(v, "model", &t->req.model, aerr);
}


static int
kvs_api_tok_text(kvs_api_tok_t *t, const json_t *v, const char *key,
    kvs_api_err_t *aerr)
{
    const json_t  *root;

    root = t->req.root;

    if (!json_is_string(v)) {
        return kvs_api_type_err(key, "a string", v, aerr);
    }

    t->req.kind = KVS_API_COMPLETIONS;
    t->req.prompts = calloc(1, sizeof(kvs_api_prompt_t));
    if (t->req.prompts == NULL) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "out of memory");
        return KVS_ENOMEM;
    }

    t->req.n_prompts = 1;
    t->req.prompts[0].text.ptr = json_string_value(v);
    t->req.prompts[0].text.len = json_string_length(v);

    if (t->shape == KVS_API_TOK_LLAMA) {
        t->add_special = 0;
        t->parse_special = 1;

        if (kvs_api_opt(root, "add_special_tokens") != NULL) {
            kvs_api_err_set(aerr, 400, "add_special_tokens",
                            "invalid_value", "add_special_tokens goes "
                            "with 'prompt'; with 'content' it is "
                            "'add_special'.");
            return KVS_EINVAL;
        }

        if (kvs_api_tok_bool(root, "add_special", &t->add_special, aerr)
            != KVS_OK
            || kvs_api_tok_bool(root, "parse_special", &t->parse_special,
                                aerr)
               != KVS_OK
            || kvs_api_tok_only(root, "with_pieces", 0, "the answer has "
                                "token ids only", aerr)
               != KVS_OK)
        {
            return KVS_EINVAL;
        }

    } else {
        t->add_special = 1;
        t->parse_special = 0;

        if (kvs_api_opt(root, "add_special") != NULL
            || kvs_api_opt(root, "parse_special") != NULL
            || kvs_api_opt(root, "with_pieces") != NULL)
        {
            kvs_api_err_set(aerr, 400, kvs_api_opt(root, "add_special")
                                       ? "add_special"
                                       : kvs_api_opt(root, "parse_special")
                                         ? "parse_special" : "with_pieces",
                            "invalid_value", "llama-server's options go "
                            "with 'content', not with 'prompt'.");
            return KVS_EINVAL;
        }

        if (kvs_api_tok_bool(root, "add_special_tokens", &t->add_special,
                             aerr)
            != KVS_OK)
        {
            return KVS_EINVAL;
        }
    }

    if (kvs_api_opt(root, "add_generation_prompt") != NULL
        || kvs_api_opt(root, "continue_final_message") != NULL
        || kvs_api_opt(root, "tools") != NULL)
    {
        kvs_api_err_set(aerr, 400, kvs_api_opt(root, "tools") ? "tools"
                                   : kvs_api_opt(root, "add_generation_"
                                                 "prompt")
                                     ? "add_generation_prompt"
                                     : "continue_final_message",
                        "invalid_value", "This option goes with "
                        "'messages'.");
        return KVS_EINVAL;
    }

    return KVS_OK;
}


static int
kvs_api_tok_messages(kvs_api_tok_t *t, kvs_api_err_t *aerr)
{
    int            rc, b;
    const json_t  *root;

    root = t->req.root;
    t->req.kind = KVS_API_CHAT;
    t->shape = KVS_API_TOK_VLLM;
    t->add_generation_prompt = 1;

    rc = kvs_api_req_messages(&t->req, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_api_req_tools(&t->req, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    /* the chat template writes the special tokens where it wants them,
     * as for /v1/chat/completions */
    b = 0;
    if (kvs_api_tok_bool(root, "add_special_tokens", &b, aerr) != KVS_OK) {
        return KVS_EINVAL;
    }

    if (b) {
        kvs_api_err_set(aerr, 400, "add_special_tokens", "unsupported_value",
                        "add_special_tokens true is not supported with "
                        "messages: the chat template writes the special "
                        "tokens.");
        return KVS_EINVAL;
    }

    if (kvs_api_opt(root, "add_special") != NULL
        || kvs_api_opt(root, "parse_special") != NULL
        || kvs_api_opt(root, "with_pieces") != NULL)
    {
        kvs_api_err_set(aerr, 400, kvs_api_opt(root, "add_special")
                                   ? "add_special"
                                   : kvs_api_opt(root, "parse_special")
                                     ? "parse_special" : "with_pieces",
                        "invalid_value", "llama-server's options go with "
                        "'content', not with 'messages'.");
        return KVS_EINVAL;
    }

    if (kvs_api_tok_bool(root, "add_generation_prompt",
                         &t->add_generation_prompt, aerr)
        != KVS_OK
        || kvs_api_tok_only(root, "continue_final_message", 0,
                            "the final message is rendered as a whole "
                            "turn", aerr)
           != KVS_OK)
    {
        return KVS_EINVAL;
    }

    return KVS_OK;
}


int
kvs_api_tokenize_parse(kvs_api_tok_t *t, const char *body, size_t len,
    size_t max_body, kvs_api_err_t *aerr)
{
    int            rc, given;
    const json_t  *root, *prompt, *content, *messages;

    memset(t, 0, sizeof(*t));

    rc = kvs_api_req_load(&t->req, body, len, max_body, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    root = t->req.root;
    t->req.n = 1;

    rc = kvs_api_tok_keys(root, kvs_api_tokenize_keys, aerr);

    if (rc == KVS_OK) {
        rc = kvs_api_tok_model(t, aerr);
    }

    prompt = kvs_api_opt(root, "prompt");
    content = kvs_api_opt(root, "content");
    messages = kvs_api_opt(root, "messages");
    given = (prompt != NULL) + (content != NULL) + (messages != NULL);

    if (rc == KVS_OK && given == 0) {
        kvs_api_err_set(aerr, 400, "prompt", "missing_required_parameter",
                        "Missing required parameter: 'prompt' (or "
                        "'messages', or llama-server's 'content').");
        rc = KVS_EINVAL;
    }

    if (rc == KVS_OK && given > 1) {
        kvs_api_err_set(aerr, 400, messages != NULL ? "messages" : "content",
                        "invalid_value", "Give one of 'prompt', 'messages' "
                        "and 'content'.");
        rc = KVS_EINVAL;
    }

    if (rc == KVS_OK) {
        rc = kvs_api_tok_only(root, "return_token_strs", 0, "the answer "
                              "has token ids only", aerr);
    }

    if (rc == KVS_OK) {
        if (messages != NULL) {
            rc = kvs_api_tok_messages(t, aerr);

        } else if (content != NULL) {
            t->shape = KVS_API_TOK_LLAMA;
            rc = kvs_api_tok_text(t, content, "content", aerr);

        } else {
            t->shape = KVS_API_TOK_VLLM;
            rc = kvs_api_tok_text(t, prompt, "prompt", aerr);
        }
    }

    if (rc != KVS_OK) {
        kvs_api_tok_free(t);
    }

    return rc;
}


int
kvs_api_detokenize_parse(kvs_api_tok_t *t, const char *body, size_t len,
    size_t max_body, kvs_api_err_t *aerr)
{
    int            rc;
    size_t         i, n;
    int64_t        id;
    const json_t  *v;
    char           path[KVS_API_PATH_LEN];

    memset(t, 0, sizeof(*t));

    rc = kvs_api_req_load(&t->req, body, len, max_body, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_api_tok_keys(t->req.root, kvs_api_detokenize_keys, aerr);

    if (rc == KVS_OK) {
        rc = kvs_api_tok_model(t, aerr);
    }

    t->shape = t->req.model.ptr != NULL ? KVS_API_TOK_VLLM
                                        : KVS_API_TOK_LLAMA;

    v = kvs_api_opt(t->req.root, "tokens");

    if (rc == KVS_OK && v == NULL) {
        rc = kvs_api_missing("tokens", aerr);
    }

    if (rc == KVS_OK && !json_is_array(v)) {
        rc = kvs_api_type_err("tokens", "an array", v, aerr);
    }

    n = rc == KVS_OK ? json_array_size(v) : 0;

    if (n > 0) {
        t->ids = malloc(n * sizeof(int32_t));
        if (t->ids == NULL) {
            kvs_api_err_set(aerr, 500, NULL, NULL, "out of memory");
            rc = KVS_ENOMEM;
        }
    }

    for (i = 0; i < n && rc == KVS_OK; i++) {
        kvs_api_path(path, "tokens[%zu]", i);
        rc = kvs_api_int(json_array_get(v, i), path, 0, INT32_MAX, &id,
                         aerr);
        t->ids[i] = (int32_t) id;
    }

    t->n_ids = n;

    if (rc != KVS_OK) {
        kvs_api_tok_free(t);
    }

    return rc;
}


void
kvs_api_tok_free(kvs_api_tok_t *t)
{
    free(t->ids);
    kvs_api_req_free(&t->req);
    memset(t, 0, sizeof(*t));
}


int
kvs_api_tok_check_ids(const kvs_api_tok_t *t, uint32_t n_vocab,
    kvs_api_err_t *aerr)
{
    size_t  i;
    char    path[KVS_API_PATH_LEN];

    for (i = 0; i < t->n_ids; i++) {
        if ((uint32_t) t->ids[i] >= n_vocab) {
            kvs_api_path(path, "tokens[%zu]", i);
            kvs_api_err_set(aerr, 400, path, "invalid_value", "Invalid "
                            "'%s': token id %d is out of the vocabulary "
                            "of %u tokens.", path, (int) t->ids[i],
                            (unsigned) n_vocab);
            return KVS_EINVAL;
        }
    }

    return KVS_OK;
}


int
kvs_api_tokenize_json(const kvs_api_tok_t *t, const int32_t *ids, size_t n,
    uint32_t max_model_len, kvs_buf_t *out)
{
    size_t  i;

    /* an id is at most 11 characters and a comma */
    if (kvs_buf_reserve(out, 64 + n * 12) != KVS_OK) {
        return KVS_ENOMEM;
    }

    if (t->shape == KVS_API_TOK_VLLM) {
        if (kvs_buf_printf(out, "{\"count\":%zu,\"max_model_len\":%u,",
                           n, (unsigned) max_model_len)
            != KVS_OK)
        {
            return KVS_ENOMEM;
        }

        if (kvs_buf_append(out, "\"tokens\":[", 10) != KVS_OK) {
            return KVS_ENOMEM;
        }

    } else if (kvs_buf_append(out, "{\"tokens\":[", 11) != KVS_OK) {
        return KVS_ENOMEM;
    }

    for (i = 0; i < n; i++) {
        if (kvs_buf_printf(out, i == 0 ? "%d" : ",%d", (int) ids[i])
            != KVS_OK)
        {
            return KVS_ENOMEM;
        }
    }

    return kvs_buf_append(out, "]}", 2);
}


int
kvs_api_detokenize_json(const kvs_api_tok_t *t, const char *text,
    size_t len, kvs_buf_t *out)
{
    int      rc;
    char    *s;
    json_t  *root, *str;

    root = json_object();
    str = json_stringn(text, len);

    if (root == NULL || str == NULL
        || json_object_set_new(root, t->shape == KVS_API_TOK_VLLM
                                     ? "prompt" : "content", str)
           != 0)
    {
        if (str != NULL && root != NULL) {
            /* set_new took str even on failure */
            str = NULL;
        }
        json_decref(str);
        json_decref(root);
        return KVS_ENOMEM;
    }

    s = json_dumps(root, JSON_COMPACT);
    json_decref(root);

    if (s == NULL) {
        return KVS_ENOMEM;
    }

    rc = kvs_buf_append(out, s, strlen(s));
    free(s);

    return rc;
}
