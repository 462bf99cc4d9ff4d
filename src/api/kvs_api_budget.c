/*
 * kvs_api_budget: a prompt's output budget and its context check (see
 * kvs_api_budget.h).  Pure: no allocation, no clock.
 */

#include "kvs_api_budget.h"


int
kvs_api_budget(const kvs_api_req_t *req, size_t n_prompt, uint32_t n_ctx,
    kvs_api_budget_t *b, kvs_api_err_t *aerr)
{
    int64_t      max_tokens, shown;
    const char  *what;

    if (req->max_tokens >= 0) {
        max_tokens = req->max_tokens;

    } else if (n_prompt < n_ctx) {
        max_tokens = (int64_t) (n_ctx - n_prompt);

    } else {
        /* the prompt fills the context: no room for the rest */
        max_tokens = 0;
    }

    /* prompt + max_tokens > n_ctx, without computing the sum */
    if (max_tokens < 1 || n_prompt > n_ctx
        || (uint64_t) max_tokens > n_ctx - (uint64_t) n_prompt)
    {
        what = req->kind != KVS_API_COMPLETIONS ? "messages" : "prompt";
        shown = max_tokens > 0 ? max_tokens : 1;

        /* shown is below 2^63, and so is any prompt's length: their
         * sum fits */
        kvs_api_err_set(aerr, 400, what, "context_length_exceeded",
                        "This model's maximum context length is %u tokens. "
                        "However, you requested %llu tokens (%zu in the "
                        "%s, %lld for the completion). Please reduce the "
                        "length of the %s or completion.",
                        (unsigned) n_ctx,
                        (unsigned long long) n_prompt
                        + (unsigned long long) shown,
                        n_prompt, what, (long long) shown, what);
        return KVS_ERANGE;
    }

    b->max_tokens = (uint32_t) max_tokens;
    b->reserved = (uint64_t) max_tokens * req->n;

    return KVS_OK;
}


int
kvs_api_budget_seqs(const kvs_api_req_t *req, uint32_t max_seqs,
    kvs_api_err_t *aerr)
{
    uint64_t  n_prompts, seqs;

    /* a chat is one prompt; so is a completion of one string */
    n_prompts = req->kind != KVS_API_COMPLETIONS || req->n_prompts == 0
                ? 1 : req->n_prompts;
    seqs = n_prompts * req->n;

    if (seqs <= max_seqs) {
        return KVS_OK;
    }

    if (req->n > max_seqs || n_prompts == 1) {
        kvs_api_err_set(aerr, 400, "n", "integer_above_max_value",
                        "Invalid 'n': this server answers at most %u "
                        "sequences (prompts x n) per request, and this "
                        "one asks for %llu (%llu prompt%s x n=%u). Use a "
                        "smaller n.", (unsigned) max_seqs,
                        (unsigned long long) seqs,
                        (unsigned long long) n_prompts,
                        n_prompts == 1 ? "" : "s", (unsigned) req->n);
        return KVS_ERANGE;
    }

    kvs_api_err_set(aerr, 400, "prompt", "too_many_sequences",
                    "Invalid 'prompt': this server answers at most %u "
                    "sequences (prompts x n) per request, and this one "
                    "asks for %llu (%llu prompts x n=%u). Send fewer "
                    "prompts per request.", (unsigned) max_seqs,
                    (unsigned long long) seqs,
                    (unsigned long long) n_prompts, (unsigned) req->n);

    return KVS_ERANGE;
}


void
kvs_api_budget_too_long(const kvs_api_req_t *req, uint32_t n_ctx,
    kvs_api_err_t *aerr)
{
    const char  *what;

    what = req->kind != KVS_API_COMPLETIONS ? "messages" : "prompt";

    kvs_api_err_set(aerr, 400, what, "context_length_exceeded",
                    "This model's maximum context length is %u tokens. "
                    "However, your %s resulted in more than %u tokens. "
                    "Please reduce the length of the %s.",
                    (unsigned) n_ctx, what, (unsigned) n_ctx, what);
}
