/*
 * kvs_api_req_unknown: the top-level fields of a chat or completions body
 * that the parser does not read.  They pass, as OpenAI lets them pass
 * (metadata, store, service_tier, ...), but they are named here so that
 * the caller can tell an operator what clients send that has no effect
 * (the nginx glue logs each name once per worker).
 *
 * Invariant: the lists below are the fields kvs_api_req_parse() (and
 * kvs_api_msg_parse(), for Anthropic's body) reads for each kind, and
 * nothing else; a field read for the other kind only
 * (prompt in a chat body, messages in a completions body) is unknown
 * here, as docs/api.md says it is ignored there.
 */

#include <string.h>

#include "kvs_api_req_impl.h"


/* both kinds */
static const char  *kvs_api_known_common[] = {
    "model", "n", "stop", "seed", "stream", "stream_options",
    "temperature", "top_p", "min_p", "top_k", "presence_penalty",
    "frequency_penalty", "logit_bias", "user", "ignore_eos",
    "response_format", "max_tokens", "logprobs", NULL
};

static const char  *kvs_api_known_chat[] = {
    "messages", "max_completion_tokens", "top_logprobs", "tools",
    "tool_choice", "parallel_tool_calls", "functions", "function_call",
    NULL
};

static const char  *kvs_api_known_cmpl[] = {
    "prompt", "echo", "suffix", "best_of", NULL
};

/* Anthropic's Messages body (kvs_api_msg.c), read from req->msg_root */
static const char  *kvs_api_known_msg[] = {
    "model", "messages", "system", "max_tokens", "stop_sequences",
    "temperature", "top_p", "top_k", "metadata", "stream", "tools",
    "tool_choice", "thinking", "mcp_servers", "container", "cache_control",
    NULL
};


static int
kvs_api_in(const char *const *list, const char *key)
{
    size_t  i;

    for (i = 0; list[i] != NULL; i++) {
        if (strcmp(list[i], key) == 0) {
            return 1;
        }
    }

    return 0;
}


size_t
kvs_api_req_unknown(const kvs_api_req_t *req, const char **names,
    size_t max)
{
    size_t       n;
    json_t      *v;
    const char  *k;

    if (req->root == NULL) {
        return 0;
    }

    n = 0;

    if (req->kind == KVS_API_MESSAGES) {
        json_object_foreach(req->msg_root, k, v) {
            if (!kvs_api_in(kvs_api_known_msg, k)) {
                if (n < max) {
                    names[n] = k;
                }
                n++;
            }
        }

        return n;
    }

    /* jansson's iteration takes no const; nothing here writes */
    json_object_foreach((json_t *) req->root, k, v) {
        if (kvs_api_in(kvs_api_known_common, k)
            || kvs_api_in(req->kind == KVS_API_CHAT ? kvs_api_known_chat
                                                    : kvs_api_known_cmpl,
                          k))
        {
            continue;
        }

        if (n < max) {
            names[n] = k;
        }

        n++;
    }

    (void) v;

    return n;
}
