/*
 * test_api_req: OpenAI chat and completions request bodies parsed by
 * kvs_api_req_parse(): every field good, bad (type, range) and null, the
 * defaults, the prompt and stop forms, logit_bias keys, the error object
 * (status, param, code, message wording from OpenAI's), and bodies that
 * are not JSON at all (syntax errors with positions, invalid UTF-8, NUL,
 * duplicate keys, depth bombs, huge numbers, oversize).
 *
 * Bodies are written with ' for " (q() swaps them) so that they read as
 * JSON; the expected values are OpenAI's documented defaults and ranges
 * (../shared/reference/api.md) and numbers written here by hand.
 */

#include <jansson.h>
#include <math.h>

#include "kvs_test.h"

#include "api/kvs_api_req.h"
#include "base/kvs_utf8.h"
#include "tokenizer/kvs_chat.h"


static kvs_api_req_t  R;
static kvs_api_err_t  E;
static int            RC;


static int
teardown(void **state)
{
    kvs_api_req_free(&R);
    return 0;
}


/* Parses len bytes of body; R holds the result (freed first). */
static int
raw(kvs_api_kind_t kind, const char *body, size_t len, size_t max_body)
{
    kvs_api_req_free(&R);
    memset(&E, 0, sizeof(E));

    RC = kvs_api_req_parse(&R, kind, body, len, max_body, &E);

    if (RC != KVS_OK) {
        /* a failed parse owns nothing */
        assert_null(R.root);
        assert_null(R.prompts);
        assert_null(R.sample.logit_bias);
        assert_int_equal(R.kind, kind);
    }

    return RC;
}


/* A body written with ' for ". */
static int
q(kvs_api_kind_t kind, const char *fmt, ...)
{
    int      rc;
    char    *s, *p;
    va_list  ap;

    va_start(ap, fmt);
    assert_true(vasprintf(&s, fmt, ap) >= 0);
    va_end(ap);

    for (p = s; *p != '\0'; p++) {
        if (*p == '\'') {
            *p = '"';
        }
    }

    rc = raw(kind, s, strlen(s), 0);
    free(s);

    return rc;
}


#define CHAT_BASE  "{'model':'m','messages':[{'role':'user','content':'hi'}]"
#define CMPL_BASE  "{'model':'m','prompt':'hi'"

/* A minimal valid request plus extra top-level fields (may be ""). */
static int
chat(const char *extra)
{
    return q(KVS_API_CHAT, "%s%s%s}", CHAT_BASE, extra[0] ? "," : "",
             extra);
}


static int
cmpl(const char *extra)
{
    return q(KVS_API_COMPLETIONS, "%s%s%s}", CMPL_BASE, extra[0] ? "," : "",
             extra);
}


/* The last parse succeeded, and its sampling params pass the sampler's
 * own check (for a vocabulary holding every logit_bias id). */
static void
ok(void)
{
    kvs_err_t  err;

    if (RC != KVS_OK) {
        fail_msg("parse failed: %d %s (param '%s')", E.status, E.message,
                 E.param);
    }

    assert_non_null(R.root);

    if (kvs_sample_params_check(&R.sample, INT32_MAX, &err) != KVS_OK) {
        fail_msg("kvs_sample_params_check: %s", err.msg);
    }
}


/* The last parse failed with status, param ("" for null), code (NULL:
 * not checked) and a message containing msg (NULL: not checked). */
static void
bad(int status, const char *param, const char *code, const char *msg)
{
    if (RC == KVS_OK) {
        fail_msg("parse succeeded, want %d on '%s'", status, param);
    }

    if (E.status != status || strcmp(E.param, param) != 0
        || (code != NULL && strcmp(E.code, code) != 0)
        || (msg != NULL && strstr(E.message, msg) == NULL)
        || strcmp(E.type, "invalid_request_error") != 0)
    {
        fail_msg("got %d param '%s' code '%s' type '%s': %s\n"
                 "want %d param '%s' code '%s': ...%s...", E.status,
                 E.param, E.code, E.type, E.message, status, param,
                 code ? code : "*", msg ? msg : "*");
    }

    if (!kvs_utf8_valid((const uint8_t *) E.message, strlen(E.message))) {
        fail_msg("message is not UTF-8: %s", E.message);
    }
}


static int
str_is(kvs_api_str_t s, const char *want)
{
    return s.ptr != NULL && s.len == strlen(want)
           && memcmp(s.ptr, want, s.len) == 0 && s.ptr[s.len] == '\0';
}


/* Defaults: OpenAI's (temperature 1, top_p 1, n 1, no stop, no seed, no
 * streaming, no logprobs, penalties 0) and ours for the extensions. */
static void
test_chat_defaults(void **state)
{
    chat("");
    ok();

    assert_int_equal(R.kind, KVS_API_CHAT);
    assert_true(str_is(R.model, "m"));
    assert_true(json_is_array(R.messages));
    assert_int_equal(json_array_size(R.messages), 1);
    assert_null(R.prompts);
    assert_int_equal(R.n_prompts, 0);
    assert_int_equal(R.stream, 0);
    assert_int_equal(R.include_usage, 0);
    assert_int_equal(R.n, 1);
    assert_int_equal(R.max_tokens, -1);
    assert_int_equal(R.n_stop, 0);
    assert_int_equal(R.has_seed, 0);
    assert_true(R.sample.temperature == 1.0f);
    assert_true(R.sample.top_p == 1.0f);
    assert_int_equal(R.sample.top_k, 0);
    assert_true(R.sample.min_p == 0.0f);
    assert_true(R.sample.presence_penalty == 0.0f);
    assert_true(R.sample.frequency_penalty == 0.0f);
    assert_null(R.sample.logit_bias);
    assert_int_equal(R.sample.n_logit_bias, 0);
    assert_int_equal(R.sample.logprobs, 0);
    assert_int_equal(R.sample.top_logprobs, 0);
    assert_int_equal(R.echo, 0);
    assert_null(R.user.ptr);

    /* every optional field null is the same as absent */
    chat("'n':null,'stop':null,'seed':null,'stream':null,"
         "'stream_options':null,'temperature':null,'top_p':null,"
         "'top_k':null,'min_p':null,'presence_penalty':null,"
         "'frequency_penalty':null,'logit_bias':null,'user':null,"
         "'max_tokens':null,'max_completion_tokens':null,'logprobs':null,"
         "'top_logprobs':null");
    ok();
    assert_int_equal(R.n, 1);
    assert_int_equal(R.max_tokens, -1);
    assert_true(R.sample.temperature == 1.0f);
    assert_true(R.sample.top_p == 1.0f);
    assert_int_equal(R.has_seed, 0);
    assert_null(R.user.ptr);
}


static void
test_cmpl_defaults(void **state)
{
    cmpl("");
    ok();

    assert_int_equal(R.kind, KVS_API_COMPLETIONS);
    assert_true(str_is(R.model, "m"));
    assert_null(R.messages);
    assert_int_equal(R.n_prompts, 1);
    assert_true(str_is(R.prompts[0].text, "hi"));
    assert_null(R.prompts[0].ids);
    assert_int_equal(R.max_tokens, 16);
    assert_int_equal(R.n, 1);
    assert_int_equal(R.echo, 0);
    assert_int_equal(R.sample.logprobs, 0);
    assert_true(R.sample.temperature == 1.0f);

    cmpl("'max_tokens':null,'echo':null,'logprobs':null,'suffix':null,"
         "'best_of':null");
    ok();
    assert_int_equal(R.max_tokens, 16);
}


static void
test_model(void **state)
{
    q(KVS_API_CHAT, "{'messages':[{'role':'user','content':'hi'}]}");
    bad(400, "model", "missing_required_parameter",
        "Missing required parameter: 'model'.");

    q(KVS_API_CHAT, "{'model':null,'messages':[{'role':'user',"
      "'content':'hi'}]}");
    bad(400, "model", "missing_required_parameter", NULL);

    q(KVS_API_COMPLETIONS, "{'model':5,'prompt':'x'}");
    bad(400, "model", "invalid_type", "Invalid type for 'model': expected "
        "a string, but got an integer instead.");

    q(KVS_API_COMPLETIONS, "{'model':['m'],'prompt':'x'}");
    bad(400, "model", "invalid_type", "but got an array instead.");

    /* which models exist is the caller's business (a 404 there) */
    q(KVS_API_COMPLETIONS, "{'model':'','prompt':'x'}");
    ok();
    assert_true(str_is(R.model, ""));
}


static void
test_messages(void **state)
{
    q(KVS_API_CHAT, "{'model':'m'}");
    bad(400, "messages", "missing_required_parameter",
        "Missing required parameter: 'messages'.");

    q(KVS_API_CHAT, "{'model':'m','messages':null}");
    bad(400, "messages", "missing_required_parameter", NULL);

    q(KVS_API_CHAT, "{'model':'m','messages':'hi'}");
    bad(400, "messages", "invalid_type", "Invalid type for 'messages': "
        "expected an array, but got a string instead.");

    q(KVS_API_CHAT, "{'model':'m','messages':[]}");
    bad(400, "messages", "empty_array", "Invalid 'messages': empty array. "
        "Expected an array with minimum length 1, but got an empty array "
        "instead.");

    q(KVS_API_CHAT, "{'model':'m','messages':['hi']}");
    bad(400, "messages[0]", "invalid_type", "expected an object, but got "
        "a string");

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user',"
      "'content':'a'},{'content':'b'}]}");
    bad(400, "messages[1].role", "missing_required_parameter",
        "Missing required parameter: 'messages[1].role'.");

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':7,'content':'a'}]}");
    bad(400, "messages[0].role", "invalid_type", NULL);

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'robot',"
      "'content':'a'}]}");
    bad(400, "messages[0].role", "invalid_value", "Invalid value: 'robot'."
        " Supported values are: 'system', 'developer', 'user', 'assistant'"
        " and 'tool'.");

    /* deprecated by OpenAI, and no function calling here */
    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'function',"
      "'name':'f','content':'a'}]}");
    bad(400, "messages[0].role", "invalid_value", NULL);

    /* case matters */
    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'User',"
      "'content':'a'}]}");
    bad(400, "messages[0].role", "invalid_value", NULL);

    /* every role, with the optional name, tool_call_id for the tool, and
     * an assistant turn with null content (it held tool calls) */
    q(KVS_API_CHAT, "{'model':'m','messages':["
      "{'role':'system','content':'s','name':'sys'},"
      "{'role':'developer','content':[{'type':'text','text':'d'}]},"
      "{'role':'user','content':'','name':null},"
      "{'role':'assistant','content':null,'tool_calls':[{'id':'call_1',"
      "'type':'function','function':{'name':'f','arguments':'{}'}}]},"
      "{'role':'tool','content':'42','tool_call_id':'call_1'},"
      "{'role':'assistant'},"
      "{'role':'user','content':[{'type':'text','text':'a'},"
      "{'type':'text','text':'b','extra':1}]}]}");
    ok();
    assert_int_equal(json_array_size(R.messages), 7);

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'tool',"
      "'content':'42'}]}");
    bad(400, "messages[0].tool_call_id", "missing_required_parameter",
        NULL);

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'tool',"
      "'content':'42','tool_call_id':1}]}");
    bad(400, "messages[0].tool_call_id", "invalid_type", NULL);

    /* tool_call_id means something on the tool message only: another
     * type or another role is refused, naming it (a number was once
     * accepted on a user message); null is absent */
    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user',"
      "'content':'a','tool_call_id':7}]}");
    bad(400, "messages[0].tool_call_id", "invalid_type", NULL);

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'system',"
      "'content':'s'},{'role':'assistant','content':'a',"
      "'tool_call_id':['c']}]}");
    bad(400, "messages[1].tool_call_id", "invalid_type", NULL);

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user',"
      "'content':'a','tool_call_id':'call_1'}]}");
    bad(400, "messages[0].tool_call_id", "invalid_value", "Invalid "
        "parameter: 'messages[0].tool_call_id' is only allowed on messages "
        "with role 'tool', not 'user'.");

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user',"
      "'content':'a','tool_call_id':null}]}");
    ok();

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'tool',"
      "'content':'42','tool_call_id':{'id':'c'}}]}");
    bad(400, "messages[0].tool_call_id", "invalid_type", NULL);

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user'}]}");
    bad(400, "messages[0].content", "missing_required_parameter",
        "Missing required parameter: 'messages[0].content'.");

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'system',"
      "'content':null}]}");
    bad(400, "messages[0].content", "missing_required_parameter", NULL);

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user',"
      "'content':5}]}");
    bad(400, "messages[0].content", "invalid_type", "expected a string or "
        "an array of content parts, but got an integer instead.");

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'assistant',"
      "'content':false}]}");
    bad(400, "messages[0].content", "invalid_type", NULL);

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user',"
      "'content':[]}]}");
    bad(400, "messages[0].content", "empty_array", NULL);

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user',"
      "'content':['text']}]}");
    bad(400, "messages[0].content[0]", "invalid_type", NULL);

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user','content':"
      "[{'type':'text','text':'a'},{'type':'image_url','image_url':"
      "{'url':'http://x/y.png'}}]}]}");
    bad(400, "messages[0].content[1].type", "invalid_value",
        "'image_url'. This server serves text models");

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'assistant',"
      "'content':[{'type':'refusal','refusal':'no'}]}]}");
    bad(400, "messages[0].content[0].type", "invalid_value", NULL);

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user','content':"
      "[{'text':'a'}]}]}");
    bad(400, "messages[0].content[0].type", "missing_required_parameter",
        NULL);

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user','content':"
      "[{'type':1,'text':'a'}]}]}");
    bad(400, "messages[0].content[0].type", "invalid_type", NULL);

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user','content':"
      "[{'type':'text'}]}]}");
    bad(400, "messages[0].content[0].text", "missing_required_parameter",
        NULL);

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user','content':"
      "[{'type':'text','text':['a']}]}]}");
    bad(400, "messages[0].content[0].text", "invalid_type", NULL);

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user',"
      "'content':'a','name':5}]}");
    bad(400, "messages[0].name", "invalid_type", NULL);

    /* the first bad message is the one named */
    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user','content':'a'},"
      "{'role':'user','content':'b'},{'role':'x','content':'c'},"
      "{'role':'y'}]}");
    bad(400, "messages[2].role", "invalid_value", NULL);
}


/*
 * What the parser accepts and a built-in chat format does not (tool
 * calls, the tool role) comes back from the renderer as a
 * KVS_EUNSUPPORTED naming the field; kvs_api_err_from_msg() makes it the
 * same kind of 400.  What both accept (null content) renders.
 */
static void
test_messages_render(void **state)
{
    kvs_buf_t        out;
    kvs_err_t        err;
    kvs_chat_t       tpl;
    kvs_api_err_t    a;
    kvs_chat_args_t  args;

    /* ChatML by its definition: "<|im_start|>ROLE\n" content
     * "<|im_end|>\n", developer shown as system, parts joined */
    static const char  want[] = "<|im_start|>system\nBe brief.<|im_end|>\n"
                                "<|im_start|>user\nHi there<|im_end|>\n"
                                "<|im_start|>assistant\nHello.<|im_end|>\n"
                                "<|im_start|>user\nBye<|im_end|>\n"
                                "<|im_start|>assistant\n";

    memset(&out, 0, sizeof(out));
    memset(&args, 0, sizeof(args));
    args.add_generation_prompt = 1;

    assert_int_equal(kvs_chat_by_name("chatml", 6, &tpl, &err), KVS_OK);

    q(KVS_API_CHAT, "{'model':'m','messages':["
      "{'role':'developer','content':'Be brief.'},"
      "{'role':'user','content':[{'type':'text','text':'Hi '},"
      "{'type':'text','text':'there'}]},"
      "{'role':'assistant','content':'Hello.'},"
      "{'role':'user','content':'Bye'}]}");
    ok();

    assert_int_equal(kvs_chat_render(&tpl, R.messages, &args, &out, &err),
                     KVS_OK);
    assert_int_equal(out.len, strlen(want));
    assert_memory_equal(out.data, want, out.len);
    out.len = 0;

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user','content':'a'},"
      "{'role':'assistant','tool_calls':[{'id':'c','type':'function',"
      "'function':{'name':'f','arguments':'{}'}}]},"
      "{'role':'tool','content':'1','tool_call_id':'c'}]}");
    ok();

    assert_int_equal(kvs_chat_render(&tpl, R.messages, &args, &out, &err),
                     KVS_EUNSUPPORTED);
    kvs_api_err_from_msg(&a, 400, "invalid_value", err.msg);
    assert_int_equal(a.status, 400);
    assert_string_equal(a.param, "messages[1].tool_calls");
    assert_string_equal(a.code, "invalid_value");
    assert_string_equal(a.type, "invalid_request_error");
    assert_null(strstr(a.message, "messages[1]"));
    assert_non_null(strstr(a.message, "Jinja"));

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user','content':'a'},"
      "{'role':'assistant','content':null}]}");
    ok();

    /* an assistant turn without content renders as an empty turn */
    out.len = 0;
    assert_int_equal(kvs_chat_render(&tpl, R.messages, &args, &out, &err),
                     KVS_OK);
    assert_non_null(memmem(out.data, out.len,
                           "<|im_start|>assistant\n<|im_end|>", 32));

    kvs_buf_free(&out);
}


static void
test_err_from_msg(void **state)
{
    kvs_api_err_t  a;

    kvs_api_err_from_msg(&a, 400, NULL, "messages[2].content[0].type: "
                         "unsupported");
    assert_string_equal(a.param, "messages[2].content[0].type");
    assert_string_equal(a.message, "unsupported");

    kvs_api_err_from_msg(&a, 400, NULL, "top_p: must be between 0 and 1 "
                         "(got 1.5)");
    assert_string_equal(a.param, "top_p");
    assert_string_equal(a.message, "must be between 0 and 1 (got 1.5)");

    /* no path: the whole message, param null */
    kvs_api_err_from_msg(&a, 500, NULL, "out of memory");
    assert_int_equal(a.status, 500);
    assert_string_equal(a.param, "");
    assert_string_equal(a.message, "out of memory");

    kvs_api_err_from_msg(&a, 400, NULL, "two words: no");
    assert_string_equal(a.param, "");
    assert_string_equal(a.message, "two words: no");

    kvs_api_err_from_msg(&a, 400, NULL, "x:no space");
    assert_string_equal(a.param, "");

    /* the wire's frame name is not a field: the field after it is
     * (a 70000-entry logit_bias once answered param "SUBMIT") */
    kvs_api_err_from_msg(&a, 400, NULL, "SUBMIT: logit_bias: 70000 "
                         "entries exceed 65536");
    assert_string_equal(a.param, "logit_bias");
    assert_string_equal(a.message, "70000 entries exceed 65536");

    kvs_api_err_from_msg(&a, 400, NULL, "SUBMIT: prompt: 9 ids exceed "
                         "the frame limit");
    assert_string_equal(a.param, "prompt");

    /* internal names alone never become param; the message keeps them */
    kvs_api_err_from_msg(&a, 500, NULL, "engine: out of memory");
    assert_string_equal(a.param, "");
    assert_string_equal(a.message, "engine: out of memory");

    kvs_api_err_from_msg(&a, 400, NULL, "id: request 7 is already running");
    assert_string_equal(a.param, "");

    kvs_api_err_from_msg(&a, 400, NULL, "SUBMIT: tenant: 300 bytes");
    assert_string_equal(a.param, "");
    assert_string_equal(a.message, "SUBMIT: tenant: 300 bytes");

    kvs_api_err_from_msg(&a, 400, NULL, "n_vocab: must be between 1 and 9");
    assert_string_equal(a.param, "");
}


static void
test_max_tokens(void **state)
{
    chat("'max_tokens':5");
    ok();
    assert_int_equal(R.max_tokens, 5);

    chat("'max_completion_tokens':7");
    ok();
    assert_int_equal(R.max_tokens, 7);

    /* both: max_completion_tokens wins, whichever comes first */
    chat("'max_tokens':5,'max_completion_tokens':7");
    ok();
    assert_int_equal(R.max_tokens, 7);

    chat("'max_completion_tokens':7,'max_tokens':5");
    ok();
    assert_int_equal(R.max_tokens, 7);

    chat("'max_tokens':5,'max_completion_tokens':null");
    ok();
    assert_int_equal(R.max_tokens, 5);

    chat("'max_tokens':9007199254740993");
    ok();
    assert_true(R.max_tokens == 9007199254740993LL);

    chat("'max_tokens':0");
    bad(400, "max_tokens", "integer_below_min_value", "Invalid "
        "'max_tokens': integer below minimum value. Expected a value >= 1, "
        "but got 0 instead.");

    chat("'max_completion_tokens':-3");
    bad(400, "max_completion_tokens", "integer_below_min_value", NULL);

    /* an invalid max_tokens is an error even when the other wins */
    chat("'max_tokens':'5','max_completion_tokens':7");
    bad(400, "max_tokens", "invalid_type", "Invalid type for 'max_tokens': "
        "expected an integer, but got a string instead.");

    chat("'max_tokens':5.0");
    bad(400, "max_tokens", "invalid_type", "but got a decimal instead.");

    chat("'max_completion_tokens':true");
    bad(400, "max_completion_tokens", "invalid_type", "got a boolean");
}


static void
test_cmpl_max_tokens(void **state)
{
    cmpl("'max_tokens':1");
    ok();
    assert_int_equal(R.max_tokens, 1);

    cmpl("'max_tokens':0");
    bad(400, "max_tokens", "integer_below_min_value", "Expected a value >= "
        "1, but got 0 instead.");

    /* 0 with echo: the prompt back, nothing generated */
    cmpl("'max_tokens':0,'echo':true");
    ok();
    assert_int_equal(R.max_tokens, 0);
    assert_int_equal(R.echo, 1);

    cmpl("'echo':true,'max_tokens':-1");
    bad(400, "max_tokens", "integer_below_min_value", "Expected a value >= "
        "0, but got -1 instead.");

    cmpl("'echo':'yes'");
    bad(400, "echo", "invalid_type", "expected a boolean, but got a "
        "string instead.");

    cmpl("'echo':1");
    bad(400, "echo", "invalid_type", NULL);

    /* a chat field: unknown here, so ignored */
    cmpl("'max_completion_tokens':'x'");
    ok();
    assert_int_equal(R.max_tokens, 16);
}


/* A number field at its bounds, just outside them, and of wrong types. */
static void
number_field(const char *key, const char *lo, const char *hi,
    const char *below, const char *above, const float *field)
{
    char  b[256], want[256];

    snprintf(b, sizeof(b), "'%s':%s", key, lo);
    chat(b);
    ok();
    assert_true(*field == (float) strtod(lo, NULL));

    snprintf(b, sizeof(b), "'%s':%s", key, hi);
    cmpl(b);
    ok();
    assert_true(*field == (float) strtod(hi, NULL));

    snprintf(b, sizeof(b), "'%s':%s", key, below);
    chat(b);
    snprintf(want, sizeof(want), "Invalid '%s': decimal below minimum "
             "value. Expected a value >= %s, but got %s instead.", key, lo,
             below);
    bad(400, key, "decimal_below_min_value", want);

    snprintf(b, sizeof(b), "'%s':%s", key, above);
    cmpl(b);
    snprintf(want, sizeof(want), "Invalid '%s': decimal above maximum "
             "value. Expected a value <= %s, but got %s instead.", key, hi,
             above);
    bad(400, key, "decimal_above_max_value", want);

    snprintf(b, sizeof(b), "'%s':true", key);
    chat(b);
    snprintf(want, sizeof(want), "Invalid type for '%s': expected a "
             "number, but got a boolean instead.", key);
    bad(400, key, "invalid_type", want);

    snprintf(b, sizeof(b), "'%s':'0.5'", key);
    cmpl(b);
    bad(400, key, "invalid_type", "but got a string instead.");

    snprintf(b, sizeof(b), "'%s':[0.5]", key);
    chat(b);
    bad(400, key, "invalid_type", "but got an array instead.");

    snprintf(b, sizeof(b), "'%s':{}", key);
    chat(b);
    bad(400, key, "invalid_type", "but got an object instead.");
}


static void
test_numbers(void **state)
{
    number_field("temperature", "0", "2", "-0.1", "2.0000001",
                 &R.sample.temperature);
    number_field("top_p", "0", "1", "-1", "1.5", &R.sample.top_p);
    number_field("min_p", "0", "1", "-0.001", "1.25", &R.sample.min_p);
    number_field("presence_penalty", "-2", "2", "-2.5", "3",
                 &R.sample.presence_penalty);
    number_field("frequency_penalty", "-2", "2", "-100", "2.01",
                 &R.sample.frequency_penalty);

    /* the brief's own example, word for word */
    chat("'top_p':1.5");
    bad(400, "top_p", "decimal_above_max_value", "Invalid 'top_p': decimal "
        "above maximum value. Expected a value <= 1, but got 1.5 "
        "instead.");

    chat("'temperature':0.7,'top_p':0.9,'min_p':0.05,"
         "'presence_penalty':-1.5,'frequency_penalty':0.25");
    ok();
    assert_true(R.sample.temperature == 0.7f);
    assert_true(R.sample.top_p == 0.9f);
    assert_true(R.sample.min_p == 0.05f);
    assert_true(R.sample.presence_penalty == -1.5f);
    assert_true(R.sample.frequency_penalty == 0.25f);

    /* integers are numbers; -0 is 0; underflow reads as 0 */
    chat("'temperature':1,'top_p':-0,'min_p':1e-400");
    ok();
    assert_true(R.sample.temperature == 1.0f);
    assert_true(R.sample.top_p == 0.0f);
    assert_true(R.sample.min_p == 0.0f);

    /* huge but finite: a range error that prints the number */
    chat("'temperature':1e308");
    bad(400, "temperature", "decimal_above_max_value", "but got 1e+308 "
        "instead.");

    chat("'temperature':-9223372036854775807");
    bad(400, "temperature", "decimal_below_min_value", "but got "
        "-9223372036854775807 instead.");
}


static void
test_n(void **state)
{
    chat("'n':1");
    ok();
    assert_int_equal(R.n, 1);

    cmpl("'n':128");
    ok();
    assert_int_equal(R.n, 128);

    chat("'n':0");
    bad(400, "n", "integer_below_min_value", "Invalid 'n': integer below "
        "minimum value. Expected a value >= 1, but got 0 instead.");

    chat("'n':129");
    bad(400, "n", "integer_above_max_value", "Invalid 'n': integer above "
        "maximum value. Expected a value <= 128, but got 129 instead.");

    chat("'n':-9223372036854775808");
    bad(400, "n", "integer_below_min_value", "but got "
        "-9223372036854775808 instead.");

    /* 2.0 is a decimal in JSON: OpenAI rejects it for integer fields */
    chat("'n':2.0");
    bad(400, "n", "invalid_type", "Invalid type for 'n': expected an "
        "integer, but got a decimal instead.");

    chat("'n':'2'");
    bad(400, "n", "invalid_type", NULL);

    chat("'n':true");
    bad(400, "n", "invalid_type", "got a boolean");
}


static void
test_top_k(void **state)
{
    chat("'top_k':40");
    ok();
    assert_int_equal(R.sample.top_k, 40);

    /* vLLM's "off" */
    chat("'top_k':-1");
    ok();
    assert_int_equal(R.sample.top_k, 0);

    chat("'top_k':0");
    ok();
    assert_int_equal(R.sample.top_k, 0);

    /* larger than any vocabulary: off as well */
    chat("'top_k':99999999999");
    ok();
    assert_int_equal(R.sample.top_k, INT32_MAX);

    chat("'top_k':-2");
    bad(400, "top_k", "integer_below_min_value", "Expected a value >= -1, "
        "but got -2 instead.");

    chat("'top_k':4.5");
    bad(400, "top_k", "invalid_type", NULL);
}


static void
test_stop(void **state)
{
    char  b[1400], s[600];

    chat("'stop':'\\n'");
    ok();
    assert_int_equal(R.n_stop, 1);
    assert_true(str_is(R.stop[0], "\n"));

    cmpl("'stop':['a','bc','\\u00e9','d e']");
    ok();
    assert_int_equal(R.n_stop, 4);
    assert_true(str_is(R.stop[0], "a"));
    assert_true(str_is(R.stop[1], "bc"));
    assert_true(str_is(R.stop[2], "\xc3\xa9"));
    assert_true(str_is(R.stop[3], "d e"));

    chat("'stop':['x']");
    ok();
    assert_int_equal(R.n_stop, 1);

    chat("'stop':[]");
    bad(400, "stop", "empty_array", NULL);

    chat("'stop':['a','b','c','d','e']");
    bad(400, "stop", "array_above_max_length", "Invalid 'stop': array too "
        "long. Expected an array with maximum length 4, but got an array "
        "with length 5 instead.");

    chat("'stop':['a','']");
    bad(400, "stop[1]", "empty_string", "Invalid 'stop[1]': empty string.");

    chat("'stop':''");
    bad(400, "stop", "empty_string", NULL);

    chat("'stop':['a',1]");
    bad(400, "stop[1]", "invalid_type", "Invalid type for 'stop[1]': "
        "expected a string, but got an integer instead.");

    chat("'stop':['a',null]");
    bad(400, "stop[1]", "invalid_type", "but got null instead.");

    chat("'stop':5");
    bad(400, "stop", "invalid_type", "expected a string or an array of "
        "strings");

    chat("'stop':{'a':1}");
    bad(400, "stop", "invalid_type", NULL);

    /* 256 bytes is the limit, in bytes: 128 two-byte characters pass,
     * 129 do not */
    memset(s, 'x', 256);
    s[256] = '\0';
    snprintf(b, sizeof(b), "'stop':['%s']", s);
    chat(b);
    ok();
    assert_int_equal(R.stop[0].len, 256);

    memset(s, 'x', 257);
    s[257] = '\0';
    snprintf(b, sizeof(b), "'stop':['a','%s']", s);
    chat(b);
    bad(400, "stop[1]", "string_above_max_length", "but got a string with "
        "length 257 instead.");

    b[0] = '\0';
    strcat(b, "'stop':'");
    for (int i = 0; i < 128; i++) {
        strcat(b, "\xc3\xa9");
    }
    strcat(b, "'");
    chat(b);
    ok();
    assert_int_equal(R.stop[0].len, 256);

    b[strlen(b) - 1] = '\0';
    strcat(b, "\xc3\xa9'");
    chat(b);
    bad(400, "stop", "string_above_max_length", NULL);
}


static void
test_seed(void **state)
{
    chat("'seed':42");
    ok();
    assert_int_equal(R.has_seed, 1);
    assert_true(R.sample.seed == 42);

    /* any int64: negative ones wrap into the uint64 sampler seed */
    chat("'seed':-1");
    ok();
    assert_int_equal(R.has_seed, 1);
    assert_true(R.sample.seed == UINT64_MAX);

    chat("'seed':-9223372036854775808");
    ok();
    assert_true(R.sample.seed == 0x8000000000000000ULL);

    cmpl("'seed':9223372036854775807");
    ok();
    assert_true(R.sample.seed == 0x7fffffffffffffffULL);

    chat("'seed':0");
    ok();
    assert_int_equal(R.has_seed, 1);
    assert_true(R.sample.seed == 0);

    /* past int64: jansson refuses the number itself */
    chat("'seed':9223372036854775808");
    bad(400, "", NULL, "too big integer");

    chat("'seed':1.5");
    bad(400, "seed", "invalid_type", NULL);

    chat("'seed':'42'");
    bad(400, "seed", "invalid_type", NULL);
}


static void
test_stream(void **state)
{
    chat("'stream':true");
    ok();
    assert_int_equal(R.stream, 1);
    assert_int_equal(R.include_usage, 0);

    chat("'stream':false");
    ok();
    assert_int_equal(R.stream, 0);

    chat("'stream':'true'");
    bad(400, "stream", "invalid_type", "expected a boolean");

    chat("'stream':1");
    bad(400, "stream", "invalid_type", NULL);

    chat("'stream':true,'stream_options':{'include_usage':true}");
    ok();
    assert_int_equal(R.include_usage, 1);

    cmpl("'stream':true,'stream_options':{'include_usage':false,"
         "'include_obfuscation':false,'other':1}");
    ok();
    assert_int_equal(R.include_usage, 0);

    chat("'stream':true,'stream_options':{'include_usage':null}");
    ok();
    assert_int_equal(R.include_usage, 0);

    chat("'stream':true,'stream_options':{}");
    ok();

    /* "only set this when you set stream: true" */
    chat("'stream_options':{'include_usage':true}");
    bad(400, "stream_options", "invalid_value", "only allowed when "
        "'stream' is true");

    chat("'stream':false,'stream_options':{'include_usage':true}");
    bad(400, "stream_options", NULL, NULL);

    chat("'stream':false,'stream_options':null");
    ok();

    chat("'stream':true,'stream_options':true");
    bad(400, "stream_options", "invalid_type", "expected an object");

    chat("'stream':true,'stream_options':{'include_usage':'yes'}");
    bad(400, "stream_options.include_usage", "invalid_type",
        "Invalid type for 'stream_options.include_usage': expected a "
        "boolean, but got a string instead.");

    chat("'stream':true,'stream_options':{'include_obfuscation':0}");
    bad(400, "stream_options.include_obfuscation", "invalid_type", NULL);
}


static void
test_logprobs(void **state)
{
    chat("'logprobs':true");
    ok();
    assert_int_equal(R.sample.logprobs, 1);
    assert_int_equal(R.sample.top_logprobs, 0);

    chat("'logprobs':true,'top_logprobs':20");
    ok();
    assert_int_equal(R.sample.top_logprobs, 20);

    chat("'logprobs':false,'top_logprobs':0");
    ok();
    assert_int_equal(R.sample.logprobs, 0);

    chat("'top_logprobs':3");
    bad(400, "top_logprobs", "invalid_value", "'logprobs' must be set to "
        "true");

    chat("'logprobs':false,'top_logprobs':3");
    bad(400, "top_logprobs", NULL, NULL);

    chat("'logprobs':true,'top_logprobs':21");
    bad(400, "top_logprobs", "integer_above_max_value", "Expected a value "
        "<= 20, but got 21 instead.");

    chat("'logprobs':true,'top_logprobs':-1");
    bad(400, "top_logprobs", "integer_below_min_value", NULL);

    chat("'logprobs':1");
    bad(400, "logprobs", "invalid_type", "expected a boolean, but got an "
        "integer instead.");

    /* completions: an int 0..5, the number of alternatives */
    cmpl("'logprobs':0");
    ok();
    assert_int_equal(R.sample.logprobs, 1);
    assert_int_equal(R.sample.top_logprobs, 0);

    cmpl("'logprobs':5");
    ok();
    assert_int_equal(R.sample.logprobs, 1);
    assert_int_equal(R.sample.top_logprobs, 5);

    cmpl("'logprobs':6");
    bad(400, "logprobs", "integer_above_max_value", "Expected a value <= "
        "5, but got 6 instead.");

    cmpl("'logprobs':true");
    bad(400, "logprobs", "invalid_type", "expected an integer, but got a "
        "boolean instead.");

    /* a chat field: ignored in completions */
    cmpl("'top_logprobs':'x'");
    ok();
    assert_int_equal(R.sample.logprobs, 0);
}


/* A chat request whose logit_bias has n distinct entries. */
static void
bias_many(size_t n)
{
    size_t     i;
    kvs_buf_t  b;
    char       num[32];

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_buf_append(&b, CHAT_BASE, strlen(CHAT_BASE)),
                     KVS_OK);
    assert_int_equal(kvs_buf_append(&b, ",'logit_bias':{", 15), KVS_OK);

    for (i = 0; i < n; i++) {
        snprintf(num, sizeof(num), "%s'%zu':1", i ? "," : "", i);
        assert_int_equal(kvs_buf_append(&b, num, strlen(num)), KVS_OK);
    }

    assert_int_equal(kvs_buf_append(&b, "}}", 3), KVS_OK);
    q(KVS_API_CHAT, "%s", (const char *) b.data);
    kvs_buf_free(&b);
}


static void
test_logit_bias(void **state)
{
    chat("'logit_bias':{'50256':-100,'0':100,'7':0.5,'007':-1.25}");
    ok();
    assert_int_equal(R.sample.n_logit_bias, 4);
    /* jansson keeps insertion order */
    assert_int_equal(R.sample.logit_bias[0].token, 50256);
    assert_true(R.sample.logit_bias[0].bias == -100.0f);
    assert_int_equal(R.sample.logit_bias[1].token, 0);
    assert_true(R.sample.logit_bias[1].bias == 100.0f);
    assert_int_equal(R.sample.logit_bias[2].token, 7);
    assert_true(R.sample.logit_bias[2].bias == 0.5f);
    assert_int_equal(R.sample.logit_bias[3].token, 7);
    assert_true(R.sample.logit_bias[3].bias == -1.25f);

    chat("'logit_bias':{}");
    ok();
    assert_int_equal(R.sample.n_logit_bias, 0);

    /* one SUBMIT carries at most KVS_API_MAX_BIAS entries: the limit
     * passes, one more is the client's 400 naming logit_bias (it was a
     * param "SUBMIT" from the wire encoder) */
    bias_many(KVS_API_MAX_BIAS);
    ok();
    assert_int_equal(R.sample.n_logit_bias, KVS_API_MAX_BIAS);

    bias_many(KVS_API_MAX_BIAS + 1);
    bad(400, "logit_bias", "invalid_value", "Invalid 'logit_bias': too "
        "many entries. Expected at most 65536, but got 65537 instead.");
    assert_null(R.sample.logit_bias);

    /* the largest id we take; the vocabulary bound is the caller's */
    cmpl("'logit_bias':{'2147483647':1}");
    assert_int_equal(RC, KVS_OK);
    assert_int_equal(R.sample.logit_bias[0].token, INT32_MAX);

    chat("'logit_bias':{'2147483648':1}");
    bad(400, "logit_bias", "invalid_value", "key '2147483648' is not a "
        "token id");

    chat("'logit_bias':{'1':1,'abc':1}");
    bad(400, "logit_bias", "invalid_value", "Invalid 'logit_bias': key "
        "'abc' is not a token id");

    chat("'logit_bias':{'-1':1}");
    bad(400, "logit_bias", "invalid_value", NULL);

    chat("'logit_bias':{'+1':1}");
    bad(400, "logit_bias", "invalid_value", NULL);

    chat("'logit_bias':{'':1}");
    bad(400, "logit_bias", "invalid_value", NULL);

    chat("'logit_bias':{'1.0':1}");
    bad(400, "logit_bias", "invalid_value", NULL);

    chat("'logit_bias':{' 1':1}");
    bad(400, "logit_bias", "invalid_value", NULL);

    chat("'logit_bias':{'99999999999999999999999':1}");
    bad(400, "logit_bias", "invalid_value", NULL);

    chat("'logit_bias':{'5':101}");
    bad(400, "logit_bias", "decimal_above_max_value", "the bias for token "
        "5 must be between -100 and 100, but got 101 instead.");

    chat("'logit_bias':{'5':-100.5}");
    bad(400, "logit_bias", "decimal_below_min_value", "got -100.5 instead");

    chat("'logit_bias':{'5':'1'}");
    bad(400, "logit_bias", "invalid_type", "must be a number, but got a "
        "string instead.");

    chat("'logit_bias':{'5':true}");
    bad(400, "logit_bias", "invalid_type", NULL);

    chat("'logit_bias':{'5':null}");
    bad(400, "logit_bias", "invalid_type", "but got null instead.");

    chat("'logit_bias':[1,2]");
    bad(400, "logit_bias", "invalid_type", "expected an object, but got an "
        "array instead.");
}


static void
test_user(void **state)
{
    chat("'user':'user-1234'");
    ok();
    assert_true(str_is(R.user, "user-1234"));

    cmpl("'user':''");
    ok();
    assert_true(str_is(R.user, ""));

    chat("'user':1234");
    bad(400, "user", "invalid_type", NULL);
}


static void
test_prompt(void **state)
{
    char    *b;
    size_t   i, len;

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':'hello'}");
    ok();
    assert_int_equal(R.n_prompts, 1);
    assert_true(str_is(R.prompts[0].text, "hello"));

    /* "" is a prompt (OpenAI accepts it): the caller decides what an
     * empty prompt means for its model */
    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':''}");
    ok();
    assert_true(str_is(R.prompts[0].text, ""));

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':['a','','c']}");
    ok();
    assert_int_equal(R.n_prompts, 3);
    assert_true(str_is(R.prompts[0].text, "a"));
    assert_true(str_is(R.prompts[1].text, ""));
    assert_true(str_is(R.prompts[2].text, "c"));

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':[1,0,2147483647]}");
    ok();
    assert_int_equal(R.n_prompts, 1);
    assert_null(R.prompts[0].text.ptr);
    assert_int_equal(R.prompts[0].n_ids, 3);
    assert_int_equal(R.prompts[0].ids[0], 1);
    assert_int_equal(R.prompts[0].ids[1], 0);
    assert_int_equal(R.prompts[0].ids[2], INT32_MAX);

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':[[1,2],[3]]}");
    ok();
    assert_int_equal(R.n_prompts, 2);
    assert_int_equal(R.prompts[0].n_ids, 2);
    assert_int_equal(R.prompts[0].ids[1], 2);
    assert_int_equal(R.prompts[1].n_ids, 1);
    assert_int_equal(R.prompts[1].ids[0], 3);
    assert_null(R.prompts[1].text.ptr);

    q(KVS_API_COMPLETIONS, "{'model':'m'}");
    bad(400, "prompt", "missing_required_parameter", NULL);

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':null}");
    bad(400, "prompt", "missing_required_parameter", NULL);

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':5}");
    bad(400, "prompt", "invalid_type", NULL);

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':{'text':'a'}}");
    bad(400, "prompt", "invalid_type", NULL);

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':[]}");
    bad(400, "prompt", "empty_array", NULL);

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':[[1],[]]}");
    bad(400, "prompt[1]", "empty_array", NULL);

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':['a',1]}");
    bad(400, "prompt[1]", "invalid_type", "Invalid type for 'prompt[1]': "
        "expected a string, but got an integer instead.");

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':[1,'a']}");
    bad(400, "prompt[1]", "invalid_type", "expected an integer, but got a "
        "string");

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':[[1],[2,'x']]}");
    bad(400, "prompt[1][1]", "invalid_type", NULL);

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':[[1],2]}");
    bad(400, "prompt[1]", "invalid_type", "expected an array of integers");

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':[5,-1]}");
    bad(400, "prompt[1]", "integer_below_min_value", "Expected a value >= "
        "0, but got -1 instead.");

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':[[2147483648]]}");
    bad(400, "prompt[0][0]", "integer_above_max_value", NULL);

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':[1.0]}");
    bad(400, "prompt[0]", "invalid_type", "got a decimal");

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':[true]}");
    bad(400, "prompt[0]", "invalid_type", "expected a string, an integer "
        "or an array of integers, but got a boolean instead.");

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':[null]}");
    bad(400, "prompt[0]", "invalid_type", NULL);

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':[['a']]}");
    bad(400, "prompt[0][0]", "invalid_type", NULL);

    /* 128 prompts, then 129; a list of ids has no such limit */
    for (i = 128; i <= 129; i++) {
        b = malloc(64 + 4 * i);
        assert_non_null(b);
        len = (size_t) sprintf(b, "{\"model\":\"m\",\"prompt\":[");
        for (size_t j = 0; j < i; j++) {
            len += (size_t) sprintf(b + len, "%s\"p\"", j ? "," : "");
        }
        strcpy(b + len, "]}");

        raw(KVS_API_COMPLETIONS, b, strlen(b), 0);
        free(b);

        if (i == 128) {
            ok();
            assert_int_equal(R.n_prompts, 128);
        } else {
            bad(400, "prompt", "array_above_max_length", "Expected an array "
                "with maximum length 128, but got an array with length 129 "
                "instead.");
        }
    }

    b = malloc(64 + 4 * 1000);
    assert_non_null(b);
    len = (size_t) sprintf(b, "{\"model\":\"m\",\"prompt\":[");
    for (i = 0; i < 1000; i++) {
        len += (size_t) sprintf(b + len, "%s%zu", i ? "," : "", i);
    }
    strcpy(b + len, "]}");
    raw(KVS_API_COMPLETIONS, b, strlen(b), 0);
    free(b);
    ok();
    assert_int_equal(R.n_prompts, 1);
    assert_int_equal(R.prompts[0].n_ids, 1000);
    assert_int_equal(R.prompts[0].ids[999], 999);

    /* chat ignores prompt, completions ignores messages */
    q(KVS_API_CHAT, CHAT_BASE ",'prompt':5}");
    ok();
    q(KVS_API_COMPLETIONS, CMPL_BASE ",'messages':5}");
    ok();
}


static void
test_suffix_best_of(void **state)
{
    cmpl("'suffix':'}'");
    bad(400, "suffix", "unsupported_value", "suffix is not supported");

    cmpl("'suffix':''");
    ok();

    cmpl("'suffix':5");
    bad(400, "suffix", "invalid_type", NULL);

    cmpl("'best_of':1");
    ok();

    cmpl("'best_of':2");
    bad(400, "best_of", "unsupported_value", "best_of is not supported");

    cmpl("'best_of':0");
    bad(400, "best_of", "unsupported_value", NULL);

    cmpl("'best_of':1.0");
    bad(400, "best_of", "invalid_type", NULL);

    /* chat has neither: ignored there */
    chat("'suffix':'x','best_of':3,'echo':'x'");
    ok();
    assert_int_equal(R.echo, 0);
}


/* What OpenAI has and we do not act on passes, as does anything else;
 * tools are checked (test_api_req_tools.c) and pass when well formed. */
static void
test_unknown_fields(void **state)
{
    size_t       n, i;
    const char  *names[8];

    chat("'tools':[{'type':'function','function':{'name':'f'}}],"
         "'tool_choice':'auto','response_format':{'type':'text'},"
         "'metadata':{'a':'b'},'store':false,'service_tier':'auto',"
         "'parallel_tool_calls':true,'reasoning_effort':'low',"
         "'prompt_cache_key':'k','safety_identifier':'s','x-y':[1,{}]");
    ok();

    /* they pass, and are named for the operator's log: the ones the
     * parser does not read, and only those */
    n = kvs_api_req_unknown(&R, names, 8);
    assert_int_equal(n, 7);

    for (i = 0; i < n; i++) {
        assert_true(strcmp(names[i], "metadata") == 0
                    || strcmp(names[i], "store") == 0
                    || strcmp(names[i], "service_tier") == 0
                    || strcmp(names[i], "reasoning_effort") == 0
                    || strcmp(names[i], "prompt_cache_key") == 0
                    || strcmp(names[i], "safety_identifier") == 0
                    || strcmp(names[i], "x-y") == 0);
    }

    /* more than asked for: counted, max filled */
    assert_int_equal(kvs_api_req_unknown(&R, names, 2), 7);

    /* every field the parser reads is known */
    chat("'n':1,'stop':'x','seed':1,'stream':true,'stream_options':"
         "{'include_usage':true},'temperature':1,'top_p':1,'min_p':0,"
         "'top_k':1,'presence_penalty':0,'frequency_penalty':0,"
         "'logit_bias':{},'user':'u','ignore_eos':true,'max_tokens':3,"
         "'max_completion_tokens':3,'logprobs':true,'top_logprobs':1");
    ok();
    assert_int_equal(kvs_api_req_unknown(&R, names, 8), 0);

    cmpl("'echo':false,'suffix':'','best_of':1,'logprobs':1,"
         "'ignore_eos':false,'max_tokens':3");
    ok();
    assert_int_equal(kvs_api_req_unknown(&R, names, 8), 0);

    /* a field of the other endpoint is unknown here */
    cmpl("'messages':[],'top_logprobs':2");
    ok();
    assert_int_equal(kvs_api_req_unknown(&R, names, 8), 2);

    chat("'prompt':'x'");
    ok();
    assert_int_equal(kvs_api_req_unknown(&R, names, 8), 1);
    assert_string_equal(names[0], "prompt");
}


/* ignore_eos (vLLM's and llama-server's extension): a boolean on both
 * endpoints, off by default, null as absent, any other type a 400
 * naming it. */
static void
test_ignore_eos(void **state)
{
    chat("");
    ok();
    assert_int_equal(R.ignore_eos, 0);

    chat("'ignore_eos':true");
    ok();
    assert_int_equal(R.ignore_eos, 1);

    cmpl("'ignore_eos':true");
    ok();
    assert_int_equal(R.ignore_eos, 1);

    cmpl("'ignore_eos':false");
    ok();
    assert_int_equal(R.ignore_eos, 0);

    chat("'ignore_eos':null");
    ok();
    assert_int_equal(R.ignore_eos, 0);

    chat("'ignore_eos':1");
    bad(400, "ignore_eos", "invalid_type", "Invalid type for 'ignore_eos': "
        "expected a boolean, but got an integer instead.");

    cmpl("'ignore_eos':'true'");
    bad(400, "ignore_eos", "invalid_type", "but got a string instead.");
}


/* response_format: text, json_object, json_schema on both endpoints;
 * the schema's canonical text; every bad shape a 400 naming the field;
 * an unsupported keyword a 400 naming its path. */
static void
test_response_format(void **state)
{
    char  *big;
    size_t i;

    chat("'response_format':{'type':'text'}");
    ok();
    assert_int_equal(R.rf_kind, KVS_GRAM_REQ_NONE);
    assert_null(R.rf_schema);

    chat("'response_format':null");
    ok();
    assert_int_equal(R.rf_kind, KVS_GRAM_REQ_NONE);

    chat("'response_format':{'type':'json_object'}");
    ok();
    assert_int_equal(R.rf_kind, KVS_GRAM_REQ_OBJECT);

    cmpl("'response_format':{'type':'json_object'}");
    ok();
    assert_int_equal(R.rf_kind, KVS_GRAM_REQ_OBJECT);

    /* sorted keys, compact: the engine's cache key */
    chat("'response_format':{'type':'json_schema','json_schema':{'name':"
         "'p-1_x','strict':true,'description':'d','schema':{'type':"
         "'object','properties':{'b':{'type':'integer'},'a':{'type':"
         "'string'}},'required':['b']}}}");
    ok();
    assert_int_equal(R.rf_kind, KVS_GRAM_REQ_SCHEMA);
    assert_int_equal(R.rf_strict, 1);
    assert_string_equal(R.rf_schema, "{\"properties\":{\"a\":{\"type\":"
                        "\"string\"},\"b\":{\"type\":\"integer\"}},"
                        "\"required\":[\"b\"],\"type\":\"object\"}");
    assert_int_equal(R.rf_schema_len, strlen(R.rf_schema));

    cmpl("'response_format':{'type':'json_schema','json_schema':{'name':"
         "'x','schema':{'enum':[1,2]},'strict':false}}");
    ok();
    assert_int_equal(R.rf_kind, KVS_GRAM_REQ_SCHEMA);
    assert_int_equal(R.rf_strict, 0);

    /* no schema: any JSON value */
    chat("'response_format':{'type':'json_schema','json_schema':{'name':"
         "'x'}}");
    ok();
    assert_string_equal(R.rf_schema, "{}");

    /* shapes */
    chat("'response_format':'json_object'");
    bad(400, "response_format", "invalid_type", "expected an object");
    chat("'response_format':{}");
    bad(400, "response_format.type", "missing_required_parameter", NULL);
    chat("'response_format':{'type':'xml'}");
    bad(400, "response_format.type", "invalid_value", "'json_schema'");
    chat("'response_format':{'type':3}");
    bad(400, "response_format.type", "invalid_type", NULL);
    chat("'response_format':{'type':'json_object','schema':{}}");
    bad(400, "response_format.schema", "unknown_parameter", NULL);
    chat("'response_format':{'type':'json_schema'}");
    bad(400, "response_format.json_schema", "missing_required_parameter",
        NULL);
    chat("'response_format':{'type':'json_schema','json_schema':[]}");
    bad(400, "response_format.json_schema", "invalid_type", NULL);
    chat("'response_format':{'type':'json_schema','json_schema':{'schema':"
         "{}}}");
    bad(400, "response_format.json_schema.name",
        "missing_required_parameter", NULL);
    chat("'response_format':{'type':'json_schema','json_schema':{'name':"
         "'a b'}}");
    bad(400, "response_format.json_schema.name", "invalid_value", NULL);
    chat("'response_format':{'type':'json_schema','json_schema':{'name':"
         "'x','strict':'yes'}}");
    bad(400, "response_format.json_schema.strict", "invalid_type", NULL);
    chat("'response_format':{'type':'json_schema','json_schema':{'name':"
         "'x','description':1}}");
    bad(400, "response_format.json_schema.description", "invalid_type",
        NULL);
    chat("'response_format':{'type':'json_schema','json_schema':{'name':"
         "'x','schema':[1]}}");
    bad(400, "response_format.json_schema.schema", "invalid_type", NULL);
    chat("'response_format':{'type':'json_schema','json_schema':{'name':"
         "'x','extra':1}}");
    bad(400, "response_format.json_schema.extra", "unknown_parameter",
        NULL);

    /* what the grammar cannot do: named with its path, never ignored */
    chat("'response_format':{'type':'json_schema','json_schema':{'name':"
         "'x','schema':{'type':'object','properties':{'x':{'type':"
         "'string','format':'hostname'}}}}}");
    bad(400, "response_format.json_schema.schema.properties.x.format",
        "unsupported_value", "response_format.json_schema.schema."
        "properties.x.format: 'hostname' is not supported");
    cmpl("'response_format':{'type':'json_schema','json_schema':{'name':"
         "'x','schema':{'type':'array','items':{'minProperties':1}}}}");
    bad(400, "response_format.json_schema.schema.items.minProperties",
        "unsupported_value", "minProperties");
    chat("'response_format':{'type':'json_schema','json_schema':{'name':"
         "'x','schema':{'type':'nothing'}}}");
    bad(400, "response_format.json_schema.schema.type", NULL, NULL);

    /* stop strings could cut the JSON short */
    chat("'stop':'}','response_format':{'type':'json_object'}");
    bad(400, "stop", "invalid_value", "response_format json_object");

    /* the size bound on the schema's text */
    big = malloc(KVS_GRAM_REQ_MAX_SCHEMA + 200);
    assert_non_null(big);
    i = (size_t) sprintf(big, "'response_format':{'type':'json_schema',"
                         "'json_schema':{'name':'x','schema':{'description'"
                         ":'");
    memset(big + i, 'a', KVS_GRAM_REQ_MAX_SCHEMA);
    strcpy(big + i + KVS_GRAM_REQ_MAX_SCHEMA, "'}}}");
    chat(big);
    free(big);
    bad(400, "response_format.json_schema.schema", "invalid_value",
        "at most 65536");
}


static void
test_json_errors(void **state)
{
    const char  *s;

    s = "{\n  \"model\": \"m\",\n  \"messages\": x\n}";
    raw(KVS_API_CHAT, s, strlen(s), 0);
    bad(400, "", "", "We could not parse the JSON body of your request: ");
    bad(400, "", "", "at line 3 column 15.");

    s = "{\"model\":\"m\",}";
    raw(KVS_API_COMPLETIONS, s, strlen(s), 0);
    bad(400, "", "", "line 1 column 14");

    /* truncated */
    s = "{\"model\":\"m\",\"prompt\":\"abc";
    raw(KVS_API_COMPLETIONS, s, strlen(s), 0);
    bad(400, "", "", "line 1");

    /* trailing garbage after the object */
    s = "{\"model\":\"m\",\"prompt\":\"a\"} {}";
    raw(KVS_API_COMPLETIONS, s, strlen(s), 0);
    bad(400, "", "", "line 1 column");

    raw(KVS_API_CHAT, "", 0, 0);
    bad(400, "", "", "the body is empty");

    raw(KVS_API_CHAT, NULL, 0, 1024);
    bad(400, "", "", "the body is empty");

    raw(KVS_API_CHAT, " \r\n\t", 4, 0);
    bad(400, "", "", "line 2");

    /* valid JSON, but not an object */
    raw(KVS_API_CHAT, "[]", 2, 0);
    bad(400, "", "invalid_type", "expected a JSON object, but got an array "
        "instead.");

    raw(KVS_API_CHAT, "42", 2, 0);
    bad(400, "", "invalid_type", "but got an integer instead.");

    raw(KVS_API_COMPLETIONS, "\"x\"", 3, 0);
    bad(400, "", "invalid_type", "but got a string instead.");

    raw(KVS_API_COMPLETIONS, "null", 4, 0);
    bad(400, "", "invalid_type", "but got null instead.");

    /* duplicate keys, at the top and inside */
    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user',"
      "'content':'a'}],'model':'n'}");
    bad(400, "", "", "duplicate object key");

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user',"
      "'role':'system','content':'a'}]}");
    bad(400, "", "", "duplicate object key");

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':'a','x':{'k':1,'k':2}}");
    bad(400, "", "", "duplicate object key");
}


static void
test_utf8_nul(void **state)
{
    static const char  *bodies[] = {
        "{\"model\":\"m\",\"prompt\":\"a\xff\"}",          /* bad byte */
        "{\"model\":\"m\",\"prompt\":\"\xc3\"}",           /* cut */
        "{\"model\":\"m\",\"prompt\":\"\xc0\xaf\"}",       /* overlong */
        "{\"model\":\"m\",\"prompt\":\"\xed\xa0\x80\"}",   /* surrogate */
        "{\"model\":\"m\",\"prompt\":\"\xf4\x90\x80\x80\"}", /* > 10FFFF */
        "{\"model\":\"m\",\"prompt\":\"a\",\"x\xfe\":1}",  /* in a key */
    };
    size_t       i;
    const char  *s;

    for (i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        raw(KVS_API_COMPLETIONS, bodies[i], strlen(bodies[i]), 0);
        bad(400, "", "", "the body must be valid UTF-8");
        bad(400, "", "", "line 1 column");
    }

    /* a 4-byte character is fine */
    s = "{\"model\":\"m\",\"prompt\":\"\xf0\x9f\x98\x80\"}";
    raw(KVS_API_COMPLETIONS, s, strlen(s), 0);
    ok();
    assert_true(str_is(R.prompts[0].text, "\xf0\x9f\x98\x80"));

    /* escaped surrogate pairs decode; a lone escaped surrogate does not */
    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':'\\ud83d\\ude00'}");
    ok();
    assert_true(str_is(R.prompts[0].text, "\xf0\x9f\x98\x80"));

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':'\\ud83d'}");
    bad(400, "", "", "line 1");

    /* NUL: refused escaped, anywhere (so every string is a C string) */
    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':'a\\u0000b'}");
    bad(400, "", "", "\\u0000 (NUL) is not accepted in strings");

    q(KVS_API_CHAT, CHAT_BASE ",'unknown':'\\u0000'}");
    bad(400, "", "", "NUL");

    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user',"
      "'content':'\\u0000'}]}");
    bad(400, "", "", "NUL");

    /* and raw: in a string, and after the object */
    s = "{\"model\":\"m\",\"prompt\":\"a\0b\"}";
    raw(KVS_API_COMPLETIONS, s, 27, 0);
    bad(400, "", "", "line 1 column");

    s = "{\"model\":\"m\",\"prompt\":\"a\"}\0";
    raw(KVS_API_COMPLETIONS, s, 27, 0);
    bad(400, "", "", "line 1 column");

    s = "\0";
    raw(KVS_API_COMPLETIONS, s, 1, 0);
    bad(400, "", "", "line 1 column");
}


/* Nesting deeper than jansson's limit (2048) is an error, not a crash;
 * shallower nesting in an unknown field is ignored like the rest. */
static void
test_deep(void **state)
{
    char    *b;
    size_t   n, len, i;

    n = 100000;
    b = malloc(2 * n + 64);
    assert_non_null(b);

    memset(b, '[', n);
    memset(b + n, ']', n);
    raw(KVS_API_CHAT, b, 2 * n, 0);
    bad(400, "", "", "maximum parsing depth reached");

    len = (size_t) sprintf(b, CMPL_BASE ",'x':");
    for (i = 0; i < len; i++) {
        b[i] = b[i] == '\'' ? '"' : b[i];
    }
    for (i = 0; i < n; i++) {
        len += (size_t) sprintf(b + len, "{\"a\":");
        if (len > 2 * n - 16) {
            break;
        }
    }
    raw(KVS_API_COMPLETIONS, b, len, 0);
    bad(400, "", "", NULL);

    len = (size_t) sprintf(b, "{\"model\":\"m\",\"prompt\":\"p\",\"x\":");
    memset(b + len, '[', 1000);
    memset(b + len + 1000, ']', 1000);
    strcpy(b + len + 2000, "}");
    raw(KVS_API_COMPLETIONS, b, strlen(b), 0);
    ok();

    free(b);
}


static void
test_huge_numbers(void **state)
{
    chat("'n':99999999999999999999");
    bad(400, "", "", "too big integer");

    chat("'temperature':1e400");
    bad(400, "", "", "real number overflow");

    chat("'temperature':-1e400");
    bad(400, "", "", "real number overflow");

    /* in an unknown field too: the body is not valid for us */
    chat("'x':123456789012345678901234567890");
    bad(400, "", "", "too big integer");

    chat("'max_tokens':9223372036854775807");
    ok();
    assert_true(R.max_tokens == INT64_MAX);

    chat("'top_p':0.99999999999999999999999");
    ok();
    assert_true(R.sample.top_p == 1.0f);
}


static void
test_body_limit(void **state)
{
    const char  *s;
    size_t       len;

    s = "{\"model\":\"m\",\"prompt\":\"hello\"}";
    len = strlen(s);

    raw(KVS_API_COMPLETIONS, s, len, len);
    ok();

    raw(KVS_API_COMPLETIONS, s, len, 0);
    ok();

    raw(KVS_API_COMPLETIONS, s, len, len - 1);
    assert_int_equal(RC, KVS_ERANGE);
    bad(413, "", "", "Request body too large: 30 bytes, the limit is 29 "
        "bytes.");

    /* checked before parsing: no JSON error for a large bad body */
    raw(KVS_API_CHAT, "xxxxxxxx", 8, 4);
    bad(413, "", "", NULL);
}


/* A failure after something was allocated leaves nothing (ASan checks). */
static void
test_cleanup(void **state)
{
    kvs_api_req_t  r;

    cmpl("'logit_bias':{'1':1,'2':2},'user':5");
    bad(400, "user", NULL, NULL);

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':[[1,2],[3],['x']]}");
    bad(400, "prompt[2][0]", NULL, NULL);

    q(KVS_API_COMPLETIONS, "{'model':'m','prompt':[[1,2],[3]],'n':0}");
    bad(400, "n", NULL, NULL);

    /* freeing twice, or a zeroed request, is harmless */
    memset(&r, 0, sizeof(r));
    kvs_api_req_free(&r);
    kvs_api_req_free(&r);
}


static void
test_err_json(void **state)
{
    json_t         *j, *e;
    kvs_buf_t       out;
    json_error_t    je;
    kvs_api_err_t   a;
    char            big[400];

    memset(&out, 0, sizeof(out));

    chat("'top_p':1.5");
    assert_int_equal(kvs_api_err_json(&E, &out), KVS_OK);

    j = json_loadb((const char *) out.data, out.len, 0, &je);
    assert_non_null(j);
    e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "message")),
                        "Invalid 'top_p': decimal above maximum value. "
                        "Expected a value <= 1, but got 1.5 instead.");
    assert_string_equal(json_string_value(json_object_get(e, "type")),
                        "invalid_request_error");
    assert_string_equal(json_string_value(json_object_get(e, "param")),
                        "top_p");
    assert_string_equal(json_string_value(json_object_get(e, "code")),
                        "decimal_above_max_value");
    json_decref(j);

    /* param and code empty: JSON null, all four keys present */
    out.len = 0;
    raw(KVS_API_CHAT, "{", 1, 0);
    assert_int_equal(kvs_api_err_json(&E, &out), KVS_OK);
    j = json_loadb((const char *) out.data, out.len, 0, &je);
    assert_non_null(j);
    e = json_object_get(j, "error");
    assert_int_equal(json_object_size(e), 4);
    assert_true(json_is_null(json_object_get(e, "param")));
    assert_true(json_is_null(json_object_get(e, "code")));
    json_decref(j);

    /* client bytes that are not UTF-8 never reach the message */
    kvs_api_err_set(&a, 400, "x", NULL, "bad '%s'", "a\xff\xc3");
    assert_string_equal(a.message, "bad 'a?" "?'");

    /* a message cut inside a character ends valid */
    memset(big, 0, sizeof(big));
    for (size_t i = 0; i + 2 < sizeof(big); i += 2) {
        memcpy(big + i, "\xc3\xa9", 2);
    }
    kvs_api_err_set(&a, 400, NULL, NULL, "x%s", big);
    assert_int_equal(strlen(a.message), sizeof(a.message) - 1);
    assert_true(kvs_utf8_valid((const uint8_t *) a.message,
                               strlen(a.message)));

    kvs_buf_free(&out);
}


/* Everything at once, as an SDK sends it. */
static void
test_full(void **state)
{
    q(KVS_API_CHAT, "{'model':'stories','messages':[{'role':'system',"
      "'content':'You are terse.'},{'role':'user','content':'Once'}],"
      "'temperature':0.8,'top_p':0.95,'n':2,'stop':['\\n\\n','END'],"
      "'seed':1234,'stream':true,'stream_options':{'include_usage':true},"
      "'logprobs':true,'top_logprobs':3,'presence_penalty':0.5,"
      "'frequency_penalty':-0.5,'logit_bias':{'13':-100},'user':'u',"
      "'max_completion_tokens':64,'top_k':50,'min_p':0.1}");
    ok();

    assert_true(str_is(R.model, "stories"));
    assert_int_equal(json_array_size(R.messages), 2);
    assert_true(R.sample.temperature == 0.8f);
    assert_true(R.sample.top_p == 0.95f);
    assert_int_equal(R.n, 2);
    assert_int_equal(R.n_stop, 2);
    assert_true(str_is(R.stop[0], "\n\n"));
    assert_true(str_is(R.stop[1], "END"));
    assert_int_equal(R.has_seed, 1);
    assert_true(R.sample.seed == 1234);
    assert_int_equal(R.stream, 1);
    assert_int_equal(R.include_usage, 1);
    assert_int_equal(R.sample.logprobs, 1);
    assert_int_equal(R.sample.top_logprobs, 3);
    assert_true(R.sample.presence_penalty == 0.5f);
    assert_true(R.sample.frequency_penalty == -0.5f);
    assert_int_equal(R.sample.n_logit_bias, 1);
    assert_int_equal(R.sample.logit_bias[0].token, 13);
    assert_true(str_is(R.user, "u"));
    assert_int_equal(R.max_tokens, 64);
    assert_int_equal(R.sample.top_k, 50);
    assert_true(R.sample.min_p == 0.1f);

    q(KVS_API_COMPLETIONS, "{'model':'stories','prompt':['Once','Twice'],"
      "'max_tokens':32,'temperature':0,'n':3,'stop':'.','seed':-7,"
      "'echo':true,'logprobs':2,'stream':true,"
      "'stream_options':{'include_usage':false},'suffix':null,"
      "'best_of':1,'user':'u'}");
    ok();

    assert_int_equal(R.n_prompts, 2);
    assert_true(str_is(R.prompts[1].text, "Twice"));
    assert_int_equal(R.max_tokens, 32);
    assert_true(R.sample.temperature == 0.0f);
    assert_int_equal(R.n, 3);
    assert_int_equal(R.n_stop, 1);
    assert_true(R.sample.seed == (uint64_t) -7);
    assert_int_equal(R.echo, 1);
    assert_int_equal(R.sample.logprobs, 1);
    assert_int_equal(R.sample.top_logprobs, 2);
}


/* kvserve_max_messages' check: at the cap passes, over it is OpenAI's
 * "array too long" naming messages; completions have none to count. */
static void
test_check_messages(void **state)
{
    q(KVS_API_CHAT, "{'model':'m','messages':[{'role':'user','content':"
      "'a'},{'role':'assistant','content':'b'},{'role':'user',"
      "'content':'c'}]}");
    ok();

    RC = kvs_api_req_check_messages(&R, 3, &E);
    assert_int_equal(RC, KVS_OK);

    RC = kvs_api_req_check_messages(&R, 2, &E);
    bad(400, "messages", "array_above_max_length", "Invalid 'messages': "
        "array too long. Expected an array with maximum length 2, but got "
        "an array with length 3 instead.");

    cmpl("");
    ok();
    assert_int_equal(kvs_api_req_check_messages(&R, 1, &E), KVS_OK);
}


#define T(f)  cmocka_unit_test_teardown(f, teardown)

int
main(void)
{
    const struct CMUnitTest  tests[] = {
        T(test_chat_defaults),
        T(test_cmpl_defaults),
        T(test_model),
        T(test_messages),
        T(test_check_messages),
        T(test_messages_render),
        T(test_err_from_msg),
        T(test_max_tokens),
        T(test_cmpl_max_tokens),
        T(test_numbers),
        T(test_n),
        T(test_top_k),
        T(test_stop),
        T(test_seed),
        T(test_stream),
        T(test_logprobs),
        T(test_logit_bias),
        T(test_user),
        T(test_prompt),
        T(test_suffix_best_of),
        T(test_unknown_fields),
        T(test_ignore_eos),
        T(test_response_format),
        T(test_json_errors),
        T(test_utf8_nul),
        T(test_deep),
        T(test_huge_numbers),
        T(test_body_limit),
        T(test_cleanup),
        T(test_err_json),
        T(test_full),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
