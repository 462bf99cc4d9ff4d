/*
 * test_api_tok: POST /tokenize and /detokenize bodies (kvs_api_tok.h):
 * which shape a body asks for (vLLM's prompt or messages, llama-server's
 * content; a model or none), the options and their defaults (BOS rule,
 * control-token text, generation prompt), every refusal naming its field
 * (unknown fields, wrong types, options we cannot honour, mixed shapes,
 * ids out of range), and the answers' exact text.
 *
 * Bodies are written with ' for " (as test_api_req.c does); the
 * expected defaults are vLLM's and llama-server's documented ones.
 */

#include <jansson.h>

#include "kvs_test.h"

#include "api/kvs_api_tok.h"


static kvs_api_tok_t  T_;
static kvs_api_err_t  E;
static int            RC;


static int
teardown(void **state)
{
    kvs_api_tok_free(&T_);
    return 0;
}


static char *
dq(const char *body)
{
    char  *s, *p;

    s = strdup(body);
    assert_non_null(s);

    for (p = s; *p != '\0'; p++) {
        if (*p == '\'') {
            *p = '"';
        }
    }

    return s;
}


static int
tok(const char *body)
{
    char  *s;

    kvs_api_tok_free(&T_);
    memset(&E, 0, sizeof(E));
    s = dq(body);
    RC = kvs_api_tokenize_parse(&T_, s, strlen(s), 0, &E);
    free(s);

    if (RC != KVS_OK) {
        /* a failed parse owns nothing */
        assert_null(T_.req.root);
        assert_null(T_.req.prompts);
        assert_null(T_.ids);
    }

    return RC;
}


static int
detok(const char *body)
{
    char  *s;

    kvs_api_tok_free(&T_);
    memset(&E, 0, sizeof(E));
    s = dq(body);
    RC = kvs_api_detokenize_parse(&T_, s, strlen(s), 0, &E);
    free(s);

    if (RC != KVS_OK) {
        assert_null(T_.req.root);
        assert_null(T_.ids);
    }

    return RC;
}


static void
ok(void)
{
    if (RC != KVS_OK) {
        fail_msg("parse failed: %d %s (param '%s')", E.status, E.message,
                 E.param);
    }
}


static void
bad(int status, const char *param, const char *code, const char *msg)
{
    if (RC == KVS_OK) {
        fail_msg("parse succeeded, want %d on '%s'", status, param);
    }

    if (E.status != status || strcmp(E.param, param) != 0
        || (code != NULL && strcmp(E.code, code) != 0)
        || (msg != NULL && strstr(E.message, msg) == NULL))
    {
        fail_msg("got %d param '%s' code '%s': %s\nwant %d param '%s' "
                 "code '%s': ...%s...", E.status, E.param, E.code,
                 E.message, status, param, code ? code : "*",
                 msg ? msg : "*");
    }
}


static void
test_vllm_prompt(void **state)
{
    tok("{'model':'m','prompt':'Hello'}");
    ok();
    assert_int_equal(T_.shape, KVS_API_TOK_VLLM);
    assert_int_equal(T_.req.kind, KVS_API_COMPLETIONS);
    assert_int_equal(T_.req.n_prompts, 1);
    assert_string_equal(T_.req.prompts[0].text.ptr, "Hello");
    assert_int_equal(T_.req.prompts[0].text.len, 5);
    assert_string_equal(T_.req.model.ptr, "m");
    assert_int_equal(T_.add_special, 1);      /* vLLM's default */
    assert_int_equal(T_.parse_special, 0);    /* as /v1/completions */

    tok("{'model':'m','prompt':'Hello','add_special_tokens':false}");
    ok();
    assert_int_equal(T_.add_special, 0);

    /* vLLM names no model in llama-server's way, but may omit it */
    tok("{'prompt':''}");
    ok();
    assert_null(T_.req.model.ptr);
    assert_int_equal(T_.req.prompts[0].text.len, 0);
}


static void
test_llama_content(void **state)
{
    tok("{'content':'Hi<|eot_id|>'}");
    ok();
    assert_int_equal(T_.shape, KVS_API_TOK_LLAMA);
    assert_int_equal(T_.add_special, 0);      /* llama-server's defaults */
    assert_int_equal(T_.parse_special, 1);
    assert_string_equal(T_.req.prompts[0].text.ptr, "Hi<|eot_id|>");

    tok("{'content':'x','add_special':true,'parse_special':false,"
        "'with_pieces':false}");
    ok();
    assert_int_equal(T_.add_special, 1);
    assert_int_equal(T_.parse_special, 0);

    tok("{'content':'x','with_pieces':true}");
    bad(400, "with_pieces", "unsupported_value", "with_pieces true is not "
        "supported");

    /* each server's options go with its own text field */
    tok("{'content':'x','add_special_tokens':true}");
    bad(400, "add_special_tokens", "invalid_value", "'add_special'");
    tok("{'prompt':'x','add_special':true}");
    bad(400, "add_special", "invalid_value", NULL);
    tok("{'prompt':'x','parse_special':true}");
    bad(400, "parse_special", "invalid_value", NULL);
    tok("{'content':'x','add_generation_prompt':true}");
    bad(400, "add_generation_prompt", "invalid_value", "'messages'");
}


static void
test_messages(void **state)
{
    tok("{'model':'m','messages':[{'role':'user','content':'Hi'}]}");
    ok();
    assert_int_equal(T_.shape, KVS_API_TOK_VLLM);
    assert_int_equal(T_.req.kind, KVS_API_CHAT);
    assert_non_null(T_.req.messages);
    assert_int_equal(T_.add_generation_prompt, 1);

    tok("{'model':'m','messages':[{'role':'user','content':'Hi'}],"
        "'add_generation_prompt':false,'add_special_tokens':false,"
        "'continue_final_message':false}");
    ok();
    assert_int_equal(T_.add_generation_prompt, 0);

    /* tools are checked as chat's are, and kept for the template */
    tok("{'model':'m','messages':[{'role':'user','content':'Hi'}],"
        "'tools':[{'type':'function','function':{'name':'f'}}]}");
    ok();
    assert_non_null(T_.req.tools);

    tok("{'model':'m','messages':[{'role':'user','content':'Hi'}],"
        "'tools':[{'type':'nope'}]}");
    assert_int_equal(RC, KVS_EINVAL);
    assert_true(strncmp(E.param, "tools[0]", 8) == 0);

    /* the chat parser's own checks */
    tok("{'model':'m','messages':[{'role':'robot','content':'Hi'}]}");
    bad(400, "messages[0].role", "invalid_value", NULL);
    tok("{'model':'m','messages':[]}");
    bad(400, "messages", "empty_array", NULL);

    tok("{'model':'m','messages':[{'role':'user','content':'Hi'}],"
        "'add_special_tokens':true}");
    bad(400, "add_special_tokens", "unsupported_value", NULL);
    tok("{'model':'m','messages':[{'role':'user','content':'Hi'}],"
        "'continue_final_message':true}");
    bad(400, "continue_final_message", "unsupported_value", NULL);
    tok("{'model':'m','messages':[{'role':'user','content':'Hi'}],"
        "'add_generation_prompt':'yes'}");
    bad(400, "add_generation_prompt", "invalid_type", NULL);
    tok("{'model':'m','messages':[{'role':'user','content':'Hi'}],"
        "'parse_special':true}");
    bad(400, "parse_special", "invalid_value", NULL);
}


static void
test_tokenize_refusals(void **state)
{
    tok("{'model':'m'}");
    bad(400, "prompt", "missing_required_parameter", NULL);
    tok("{'model':'m','prompt':null}");
    bad(400, "prompt", "missing_required_parameter", NULL);
    tok("{'model':'m','prompt':'a','content':'b'}");
    bad(400, "content", "invalid_value", "Give one of");
    tok("{'model':'m','prompt':'a','messages':[]}");
    bad(400, "messages", "invalid_value", NULL);
    tok("{'model':'m','prompt':[1,2]}");
    bad(400, "prompt", "invalid_type", "expected a string, but got an "
        "array instead");
    tok("{'content':7}");
    bad(400, "content", "invalid_type", NULL);
    tok("{'model':3,'prompt':'a'}");
    bad(400, "model", "invalid_type", NULL);
    tok("{'model':'m','prompt':'a','temperature':1}");
    bad(400, "temperature", "unknown_parameter", "Unrecognized parameter: "
        "'temperature'.");
    tok("{'model':'m','prompt':'a','return_token_strs':true}");
    bad(400, "return_token_strs", "unsupported_value", NULL);
    tok("{'model':'m','prompt':'a','add_special_tokens':1}");
    bad(400, "add_special_tokens", "invalid_type", NULL);
    tok("[1]");
    bad(400, "", "invalid_type", NULL);
    tok("{'prompt':'a',");
    assert_int_equal(RC, KVS_EFORMAT);
    tok("{'prompt':'a','prompt':'b'}");
    assert_int_equal(RC, KVS_EFORMAT);

    /* the size limit, before parsing */
    kvs_api_tok_free(&T_);
    RC = kvs_api_tokenize_parse(&T_, "{\"prompt\":\"abcdef\"}", 19, 10, &E);
    assert_int_equal(RC, KVS_ERANGE);
    assert_int_equal(E.status, 413);
}


static void
test_detokenize(void **state)
{
    kvs_buf_t  b;

    detok("{'model':'m','tokens':[72,101,0,2147483647]}");
    ok();
    assert_int_equal(T_.shape, KVS_API_TOK_VLLM);
    assert_int_equal(T_.n_ids, 4);
    assert_int_equal(T_.ids[0], 72);
    assert_int_equal(T_.ids[3], 2147483647);

    /* against a vocabulary: the first id out of it, by index */
    RC = kvs_api_tok_check_ids(&T_, 2147483647u, &E);
    bad(400, "tokens[3]", "invalid_value", "token id 2147483647 is out of "
        "the vocabulary of 2147483647 tokens");
    assert_int_equal(kvs_api_tok_check_ids(&T_, 2147483647u + 1u, &E),
                     KVS_OK);
    RC = kvs_api_tok_check_ids(&T_, 100, &E);
    bad(400, "tokens[1]", "invalid_value", NULL);

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_api_detokenize_json(&T_, "He\"l\n", 5, &b), KVS_OK);
    assert_int_equal(b.len, strlen("{\"prompt\":\"He\\\"l\\n\"}"));
    assert_memory_equal(b.data, "{\"prompt\":\"He\\\"l\\n\"}", b.len);
    kvs_buf_free(&b);

    detok("{'tokens':[]}");
    ok();
    assert_int_equal(T_.shape, KVS_API_TOK_LLAMA);
    assert_int_equal(T_.n_ids, 0);
    assert_int_equal(kvs_api_tok_check_ids(&T_, 1, &E), KVS_OK);

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_api_detokenize_json(&T_, "", 0, &b), KVS_OK);
    assert_int_equal(b.len, strlen("{\"content\":\"\"}"));
    assert_memory_equal(b.data, "{\"content\":\"\"}", b.len);
    kvs_buf_free(&b);

    detok("{'tokens':[1,-1]}");
    bad(400, "tokens[1]", "integer_below_min_value", NULL);
    detok("{'tokens':[1,2147483648]}");
    bad(400, "tokens[1]", "integer_above_max_value", NULL);
    detok("{'tokens':[1.0]}");
    bad(400, "tokens[0]", "invalid_type", NULL);
    detok("{'tokens':'1 2'}");
    bad(400, "tokens", "invalid_type", NULL);
    detok("{'model':'m'}");
    bad(400, "tokens", "missing_required_parameter", NULL);
    detok("{'tokens':[1],'prompt':'x'}");
    bad(400, "prompt", "unknown_parameter", NULL);
}


static void
test_tokenize_json(void **state)
{
    kvs_buf_t      b;
    const int32_t  ids[3] = { 507, 0, 2147483647 };

    tok("{'model':'m','prompt':'x'}");
    ok();

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_api_tokenize_json(&T_, ids, 3, 4096, &b), KVS_OK);
    assert_int_equal(b.len, strlen("{\"count\":3,\"max_model_len\":4096,"
                                   "\"tokens\":[507,0,2147483647]}"));
    assert_memory_equal(b.data, "{\"count\":3,\"max_model_len\":4096,"
                        "\"tokens\":[507,0,2147483647]}", b.len);
    kvs_buf_free(&b);

    tok("{'content':'x'}");
    ok();

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_api_tokenize_json(&T_, ids, 0, 4096, &b), KVS_OK);
    assert_int_equal(b.len, strlen("{\"tokens\":[]}"));
    assert_memory_equal(b.data, "{\"tokens\":[]}", b.len);
    assert_int_equal(kvs_api_tokenize_json(&T_, ids, 1, 4096, &b), KVS_OK);
    assert_memory_equal(b.data + strlen("{\"tokens\":[]}"),
                        "{\"tokens\":[507]}", strlen("{\"tokens\":[507]}"));
    kvs_buf_free(&b);
}


#define TT(f)  cmocka_unit_test_teardown(f, teardown)

int
main(void)
{
    const struct CMUnitTest  tests[] = {
        TT(test_vllm_prompt),
        TT(test_llama_content),
        TT(test_messages),
        TT(test_tokenize_refusals),
        TT(test_detokenize),
        TT(test_tokenize_json),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
