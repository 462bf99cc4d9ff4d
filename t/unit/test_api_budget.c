/*
 * test_api_budget: a request's output budget per prompt and its check
 * against the context (src/api/kvs_api_budget.c), which both the engine
 * host's submit and kvserve_limit's reservation use.
 *
 * Expected values are worked out by hand: the budget is max_tokens, or
 * (absent) the context less the prompt; it passes iff it is at least 1
 * and prompt + budget <= context; the reservation is budget x n.  The
 * error texts are OpenAI's, as t/006-completions.t sees them over HTTP.
 * The sequences' cap: prompts (a chat is one) x n passes iff it is at
 * most the cap; the 400 names n when n alone is over or there is one
 * prompt, else prompt, with the numbers.
 */

#include "kvs_test.h"

#include "api/kvs_api_budget.h"


static kvs_api_req_t
req(kvs_api_kind_t kind, int64_t max_tokens, uint32_t n)
{
    kvs_api_req_t  r;

    memset(&r, 0, sizeof(r));
    r.kind = kind;
    r.max_tokens = max_tokens;
    r.n = n;

    return r;
}


/* A budget that passes: its per-choice tokens and its reservation. */
static void
fits(const kvs_api_req_t *r, size_t n_prompt, uint32_t n_ctx,
    uint32_t max_tokens, uint64_t reserved)
{
    kvs_api_err_t     aerr;
    kvs_api_budget_t  b;

    memset(&aerr, 0, sizeof(aerr));

    assert_int_equal(kvs_api_budget(r, n_prompt, n_ctx, &b, &aerr), KVS_OK);
    assert_int_equal(b.max_tokens, max_tokens);
    assert_int_equal(b.reserved, reserved);
    assert_int_equal(aerr.status, 0);
}


/* A budget that does not fit: the 400 and its whole message. */
static void
over(const kvs_api_req_t *r, size_t n_prompt, uint32_t n_ctx,
    const char *param, const char *message)
{
    kvs_api_err_t     aerr;
    kvs_api_budget_t  b;

    b.max_tokens = 7;
    b.reserved = 7;

    assert_int_equal(kvs_api_budget(r, n_prompt, n_ctx, &b, &aerr),
                     KVS_ERANGE);
    assert_int_equal(aerr.status, 400);
    assert_string_equal(aerr.param, param);
    assert_string_equal(aerr.type, "invalid_request_error");
    assert_string_equal(aerr.code, "context_length_exceeded");
    assert_string_equal(aerr.message, message);

    /* nothing written on failure */
    assert_int_equal(b.max_tokens, 7);
    assert_int_equal(b.reserved, 7);
}


/* Completions: the client's max_tokens, n choices each. */
static void
test_given(void **state)
{
    kvs_api_req_t  r;

    (void) state;

    r = req(KVS_API_COMPLETIONS, 16, 1);
    fits(&r, 5, 512, 16, 16);

    r = req(KVS_API_COMPLETIONS, 100, 3);
    fits(&r, 5, 512, 100, 300);

    /* exactly the context: 12 + 500 = 512 */
    r = req(KVS_API_COMPLETIONS, 500, 128);
    fits(&r, 12, 512, 500, 64000);

    /* one over: 12 + 501 = 513 */
    r = req(KVS_API_COMPLETIONS, 501, 1);
    over(&r, 12, 512, "prompt",
         "This model's maximum context length is 512 tokens. However, you "
         "requested 513 tokens (12 in the prompt, 501 for the completion). "
         "Please reduce the length of the prompt or completion.");

    /* t/006-completions.t's TEST 14 */
    r = req(KVS_API_COMPLETIONS, 600, 1);
    over(&r, 5, 512, "prompt",
         "This model's maximum context length is 512 tokens. However, you "
         "requested 605 tokens (5 in the prompt, 600 for the completion). "
         "Please reduce the length of the prompt or completion.");

    /* max_tokens 0 (only with echo) leaves no output: shown as 1 */
    r = req(KVS_API_COMPLETIONS, 0, 1);
    over(&r, 5, 512, "prompt",
         "This model's maximum context length is 512 tokens. However, you "
         "requested 6 tokens (5 in the prompt, 1 for the completion). "
         "Please reduce the length of the prompt or completion.");
}


/* Chat without max_tokens: the rest of the context. */
static void
test_absent(void **state)
{
    kvs_api_req_t  r;

    (void) state;

    r = req(KVS_API_CHAT, -1, 1);
    fits(&r, 12, 512, 500, 500);
    fits(&r, 511, 512, 1, 1);
    fits(&r, 1, 4096, 4095, 4095);

    r = req(KVS_API_CHAT, -1, 2);
    fits(&r, 12, 512, 500, 1000);

    /* the prompt fills the context: no room for one token */
    r = req(KVS_API_CHAT, -1, 1);
    over(&r, 512, 512, "messages",
         "This model's maximum context length is 512 tokens. However, you "
         "requested 513 tokens (512 in the messages, 1 for the "
         "completion). Please reduce the length of the messages or "
         "completion.");

    /* and over it */
    over(&r, 600, 512, "messages",
         "This model's maximum context length is 512 tokens. However, you "
         "requested 601 tokens (600 in the messages, 1 for the "
         "completion). Please reduce the length of the messages or "
         "completion.");

    /* chat with max_tokens names messages too */
    r = req(KVS_API_CHAT, 10, 1);
    fits(&r, 502, 512, 10, 10);
    over(&r, 503, 512, "messages",
         "This model's maximum context length is 512 tokens. However, you "
         "requested 513 tokens (503 in the messages, 10 for the "
         "completion). Please reduce the length of the messages or "
         "completion.");
}


/* Several prompts: each is checked on its own; what a request reserves
 * is the sum of their reservations. */
static void
test_prompts(void **state)
{
    size_t            i;
    uint64_t          total;
    kvs_api_req_t     r;
    kvs_api_err_t     aerr;
    kvs_api_budget_t  b;

    static const size_t  lens[] = { 10, 200, 462 };

    (void) state;

    r = req(KVS_API_COMPLETIONS, 50, 2);
    total = 0;

    for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        assert_int_equal(kvs_api_budget(&r, lens[i], 512, &b, &aerr),
                         KVS_OK);
        assert_int_equal(b.max_tokens, 50);
        total += b.reserved;
    }

    /* 3 prompts x 50 tokens x 2 choices */
    assert_int_equal(total, 300);

    /* a 4th of 463 tokens does not fit (463 + 50 = 513) */
    over(&r, 463, 512, "prompt",
         "This model's maximum context length is 512 tokens. However, you "
         "requested 513 tokens (463 in the prompt, 50 for the completion). "
         "Please reduce the length of the prompt or completion.");

    /* without max_tokens each prompt gets its own rest of the context:
     * (512 - 10) + (512 - 200) + (512 - 462) = 864, times 3 choices */
    r = req(KVS_API_COMPLETIONS, -1, 3);
    total = 0;

    for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        assert_int_equal(kvs_api_budget(&r, lens[i], 512, &b, &aerr),
                         KVS_OK);
        total += b.reserved;
    }

    assert_int_equal(total, 2592);
}


/* Values at the ends of their types: nothing overflows. */
static void
test_overflow(void **state)
{
    kvs_api_req_t  r;

    (void) state;

    /* the largest max_tokens the parser takes: refused, the sum shown
     * exactly (5 + 2^63 - 1) */
    r = req(KVS_API_COMPLETIONS, INT64_MAX, 1);
    over(&r, 5, 512, "prompt",
         "This model's maximum context length is 512 tokens. However, you "
         "requested 9223372036854775812 tokens (5 in the prompt, "
         "9223372036854775807 for the completion). Please reduce the "
         "length of the prompt or completion.");

    /* over 2^32: never truncated into a budget that fits */
    r = req(KVS_API_COMPLETIONS, 4294967296LL + 10, 1);
    over(&r, 5, UINT32_MAX, "prompt",
         "This model's maximum context length is 4294967295 tokens. "
         "However, you requested 4294967311 tokens (5 in the prompt, "
         "4294967306 for the completion). Please reduce the length of the "
         "prompt or completion.");

    /* the largest context and n: (2^32 - 2) x 128 needs 64 bits */
    r = req(KVS_API_CHAT, -1, 128);
    fits(&r, 1, UINT32_MAX, UINT32_MAX - 1,
         (uint64_t) (UINT32_MAX - 1) * 128);

    r = req(KVS_API_CHAT, UINT32_MAX - 1, 128);
    fits(&r, 1, UINT32_MAX, UINT32_MAX - 1, 549755813632ULL);

    /* a prompt longer than any context */
    r = req(KVS_API_CHAT, -1, 1);
    over(&r, (size_t) 1 << 40, 512, "messages",
         "This model's maximum context length is 512 tokens. However, you "
         "requested 1099511627777 tokens (1099511627776 in the messages, 1 "
         "for the completion). Please reduce the length of the messages or "
         "completion.");
}


/* A request of n_prompts prompts (0: a single string) and n choices
 * against the cap max: KVS_OK, or the 400's param, code and message. */
static void
seqs(kvs_api_kind_t kind, size_t n_prompts, uint32_t n, uint32_t max,
    const char *param, const char *code, const char *message)
{
    kvs_api_req_t  r;
    kvs_api_err_t  aerr;

    r = req(kind, 16, n);
    r.n_prompts = n_prompts;
    memset(&aerr, 0, sizeof(aerr));

    if (param == NULL) {
        assert_int_equal(kvs_api_budget_seqs(&r, max, &aerr), KVS_OK);
        assert_int_equal(aerr.status, 0);
        return;
    }

    assert_int_equal(kvs_api_budget_seqs(&r, max, &aerr), KVS_ERANGE);
    assert_int_equal(aerr.status, 400);
    assert_string_equal(aerr.param, param);
    assert_string_equal(aerr.code, code);
    assert_string_equal(aerr.message, message);
}


static void
test_seqs(void **state)
{
    /* at the cap: 16 x 1, 1 x 16, 4 x 4, 2 x 8 */
    seqs(KVS_API_COMPLETIONS, 16, 1, 16, NULL, NULL, NULL);
    seqs(KVS_API_COMPLETIONS, 0, 16, 16, NULL, NULL, NULL);
    seqs(KVS_API_COMPLETIONS, 4, 4, 16, NULL, NULL, NULL);
    seqs(KVS_API_CHAT, 1, 16, 16, NULL, NULL, NULL);
    seqs(KVS_API_COMPLETIONS, 2, 8, 16, NULL, NULL, NULL);

    /* the measured amplification: 128 x 128 = 16384 */
    seqs(KVS_API_COMPLETIONS, 128, 128, 16, "n", "integer_above_max_value",
         "Invalid 'n': this server answers at most 16 sequences (prompts "
         "x n) per request, and this one asks for 16384 (128 prompts x "
         "n=128). Use a smaller n.");

    /* one over, by the prompts: 17 x 1 and 3 x 6 = 18 */
    seqs(KVS_API_COMPLETIONS, 17, 1, 16, "prompt", "too_many_sequences",
         "Invalid 'prompt': this server answers at most 16 sequences "
         "(prompts x n) per request, and this one asks for 17 (17 "
         "prompts x n=1). Send fewer prompts per request.");
    seqs(KVS_API_COMPLETIONS, 3, 6, 16, "prompt", "too_many_sequences",
         "Invalid 'prompt': this server answers at most 16 sequences "
         "(prompts x n) per request, and this one asks for 18 (3 "
         "prompts x n=6). Send fewer prompts per request.");

    /* by n: a chat (always one prompt), and a single string */
    seqs(KVS_API_CHAT, 1, 17, 16, "n", "integer_above_max_value",
         "Invalid 'n': this server answers at most 16 sequences (prompts "
         "x n) per request, and this one asks for 17 (1 prompt x n=17). "
         "Use a smaller n.");
    seqs(KVS_API_COMPLETIONS, 0, 2, 1, "n", "integer_above_max_value",
         "Invalid 'n': this server answers at most 1 sequences (prompts "
         "x n) per request, and this one asks for 2 (1 prompt x n=2). "
         "Use a smaller n.");
}



/* A prompt whose tokenizing stopped past the context: the same 400 on
 * the same param, saying it is longer than the context. */
static void
test_too_long(void **state)
{
    kvs_api_req_t  r;
    kvs_api_err_t  aerr;

    r = req(KVS_API_COMPLETIONS, 16, 1);
    memset(&aerr, 0, sizeof(aerr));
    kvs_api_budget_too_long(&r, 512, &aerr);
    assert_int_equal(aerr.status, 400);
    assert_string_equal(aerr.param, "prompt");
    assert_string_equal(aerr.type, "invalid_request_error");
    assert_string_equal(aerr.code, "context_length_exceeded");
    assert_string_equal(aerr.message,
        "This model's maximum context length is 512 tokens. However, "
        "your prompt resulted in more than 512 tokens. Please reduce the "
        "length of the prompt.");

    r = req(KVS_API_CHAT, -1, 2);
    memset(&aerr, 0, sizeof(aerr));
    kvs_api_budget_too_long(&r, 4096, &aerr);
    assert_int_equal(aerr.status, 400);
    assert_string_equal(aerr.param, "messages");
    assert_string_equal(aerr.code, "context_length_exceeded");
    assert_string_equal(aerr.message,
        "This model's maximum context length is 4096 tokens. However, "
        "your messages resulted in more than 4096 tokens. Please reduce "
        "the length of the messages.");
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_given),
        cmocka_unit_test(test_absent),
        cmocka_unit_test(test_prompts),
        cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_seqs),
        cmocka_unit_test(test_too_long),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
