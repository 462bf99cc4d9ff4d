/*
 * kvs_api_budget: a request's output budget: how many tokens each of its
 * prompts may generate, for each of its n choices, and the check of
 * prompt plus output against the model's context (OpenAI's
 * context_length_exceeded).  The engine host submits each prompt with
 * this budget, and kvserve_limit reserves the budget the prompt was
 * submitted with, so both agree.
 *
 * Units are tokens.  A prompt's budget is the client's max_tokens, or
 * without one (chat) the rest of the context; a budget that is accepted
 * is at least 1 and leaves prompt plus budget within the context.  The
 * check is exact for every max_tokens the parser lets through (up to
 * INT64_MAX) and every prompt length: nothing here overflows.
 *
 * A request's sequences are its prompts (a chat is one) times n: each is
 * one sequence in the engine with its own KV; kvs_api_budget_seqs()
 * caps them (kvserve_max_sequences), so that one small request cannot
 * ask the engine for thousands.
 */

#ifndef KVS_API_BUDGET_H
#define KVS_API_BUDGET_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_api_req.h"

typedef struct {
    uint32_t  max_tokens;   /* per choice: what the engine is sent */
    uint64_t  reserved;     /* max_tokens x n: the prompt's output over
                               all its choices */
} kvs_api_budget_t;

/*
 * The budget of one prompt of n_prompt tokens of req (its kind, its
 * max_tokens, -1 when absent, and n) for a model with a context of n_ctx
 * tokens.  KVS_OK with *b filled; KVS_ERANGE, *b untouched, with *aerr
 * a 400 on param "messages" (chat) or "prompt" with code
 * context_length_exceeded when the budget is under 1 token or prompt
 * plus budget is over n_ctx.
 */
int kvs_api_budget(const kvs_api_req_t *req, size_t n_prompt, uint32_t n_ctx,
    kvs_api_budget_t *b, kvs_api_err_t *aerr);

/*
 * The sequences req asks for (prompts x n) against max_seqs (>= 1).
 * KVS_OK; KVS_ERANGE with *aerr a 400 naming the numbers, on param "n"
 * when n alone is over the cap or there is one prompt (code
 * integer_above_max_value), else on "prompt" (code too_many_sequences).
 */
int kvs_api_budget_seqs(const kvs_api_req_t *req, uint32_t max_seqs,
    kvs_api_err_t *aerr);

/*
 * The same 400 for a prompt whose tokenizing stopped once it passed
 * n_ctx tokens (kvs_tok_encode_limit()): its length is only known to be
 * over n_ctx, and no budget can make it fit.
 */
void kvs_api_budget_too_long(const kvs_api_req_t *req, uint32_t n_ctx,
    kvs_api_err_t *aerr);

#endif /* KVS_API_BUDGET_H */
