/*
 * test_api_req_tools: a chat request's tool fields through
 * kvs_api_req_parse() (src/api/kvs_api_req_tools.c): tools, tool_choice,
 * parallel_tool_calls, assistant tool_calls and tool messages, good and
 * bad, each 400 naming the field as the client wrote it; the parameters
 * schema compiled so that an unsupported keyword names its path; and
 * kvs_api_req_tools_plan(), which turns them into the output constraint
 * once the model's template is known (the spec text checked field by
 * field, and the refusals: a built-in template, no syntax, with
 * response_format or stop).
 *
 * Bodies are written with ' for " as in test_api_req.c; the expected
 * defaults are OpenAI's (tool_choice "auto" with tools, "none" without,
 * parallel_tool_calls true).
 */

#include <jansson.h>

#include "kvs_test.h"

#include "api/kvs_api_req.h"


static kvs_api_req_t  R;
static kvs_api_err_t  E;
static int            RC;


static int
teardown(void **state)
{
    kvs_api_req_free(&R);
    return 0;
}


/* A chat body written with ' for ". */
static void
q(const char *fmt, ...)
{
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

    kvs_api_req_free(&R);
    memset(&E, 0, sizeof(E));
    RC = kvs_api_req_parse(&R, KVS_API_CHAT, s, strlen(s), 0, &E);
    free(s);

    if (RC != KVS_OK) {
        assert_null(R.root);
        assert_null(R.tools);
    }
}


#define USER  "{'role':'user','content':'hi'}"
#define TOOL_F \
    "{'type':'function','function':{'name':'f','description':'d'," \
    "'parameters':{'type':'object','properties':{'a':{'type':'string'}}," \
    "'required':['a']},'strict':true}}"
#define TOOL_G  "{'type':'function','function':{'name':'g-2'}}"


/* Messages (without brackets) and extra top-level fields. */
static void
chat(const char *msgs, const char *extra)
{
    q("{'model':'m','messages':[%s]%s%s}", msgs, extra[0] ? "," : "",
      extra);
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
bad(const char *param, const char *code, const char *msg)
{
    if (RC == KVS_OK) {
        fail_msg("parse succeeded, want a 400 on '%s'", param);
    }

    if (E.status != 400 || strcmp(E.param, param) != 0
        || (code != NULL && strcmp(E.code, code) != 0)
        || (msg != NULL && strstr(E.message, msg) == NULL))
    {
        fail_msg("got %d param '%s' code '%s': %s\nwant 400 param '%s' "
                 "code '%s': ...%s...", E.status, E.param, E.code,
                 E.message, param, code ? code : "*", msg ? msg : "*");
    }
}


/* kvs_api_req_tools_plan() on the parsed request R: its status, and the
 * 400's param when it fails. */
static int
plan(kvs_tool_syntax_t syn, int jinja, const char *param)
{
    int  rc;

    memset(&E, 0, sizeof(E));
    rc = kvs_api_req_tools_plan(&R, syn, jinja, &E);
    if (param == NULL) {
        if (rc != KVS_OK) {
            fail_msg("plan failed: %d %s (param '%s')", E.status,
                     E.message, E.param);
        }
    } else {
        assert_int_not_equal(rc, KVS_OK);
        assert_int_equal(E.status, 400);
        assert_string_equal(E.param, param);
    }

    return rc;
}


/* The spec R carries, parsed back. */
static json_t *
spec(void)
{
    json_t  *s;

    assert_int_equal(R.rf_kind, KVS_GRAM_REQ_TOOLS);
    assert_non_null(R.rf_schema);
    assert_int_equal(strlen(R.rf_schema), R.rf_schema_len);
    s = json_loads(R.rf_schema, 0, NULL);
    assert_non_null(s);

    return s;
}


static void
test_plan(void **state)
{
    json_t  *s, *t;

    /* auto: both tools, parallel, the syntax's name */
    chat(USER, "'tools':[" TOOL_F "," TOOL_G "]");
    ok();
    plan(KVS_TOOL_SYN_HERMES, 1, NULL);
    assert_int_equal(R.tool_syntax, KVS_TOOL_SYN_HERMES);
    s = spec();
    assert_string_equal(json_string_value(json_object_get(s, "choice")),
                        "auto");
    assert_string_equal(json_string_value(json_object_get(s, "syntax")),
                        "hermes");
    assert_true(json_is_true(json_object_get(s, "parallel")));
    t = json_object_get(s, "tools");
    assert_int_equal(json_array_size(t), 2);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(t, 0), "name")), "f");
    assert_string_equal(json_string_value(json_object_get(json_object_get(
                            json_object_get(json_object_get(
                                json_array_get(t, 0), "parameters"),
                            "properties"), "a"), "type")), "string");
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(t, 1), "name")), "g-2");
    assert_null(json_object_get(json_array_get(t, 1), "parameters"));
    /* canonical: what the engine's cache is keyed by */
    assert_null(strchr(R.rf_schema, ' '));
    json_decref(s);

    /* a named function: required, that tool alone; not parallel */
    chat(USER, "'tools':[" TOOL_F "," TOOL_G "],'tool_choice':{'type':"
         "'function','function':{'name':'g-2'}},'parallel_tool_calls':"
         "false");
    ok();
    plan(KVS_TOOL_SYN_LLAMA3, 1, NULL);
    s = spec();
    assert_string_equal(json_string_value(json_object_get(s, "choice")),
                        "required");
    assert_string_equal(json_string_value(json_object_get(s, "syntax")),
                        "llama3");
    assert_true(json_is_false(json_object_get(s, "parallel")));
    t = json_object_get(s, "tools");
    assert_int_equal(json_array_size(t), 1);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(t, 0), "name")), "g-2");
    json_decref(s);

    chat(USER, "'tools':[" TOOL_F "],'tool_choice':'required'");
    ok();
    plan(KVS_TOOL_SYN_MISTRAL, 1, NULL);
    s = spec();
    assert_string_equal(json_string_value(json_object_get(s, "choice")),
                        "required");
    json_decref(s);

    /* none: text without a call; nothing is parsed from it */
    chat(USER, "'tools':[" TOOL_F "],'tool_choice':'none'");
    ok();
    plan(KVS_TOOL_SYN_HERMES, 1, NULL);
    assert_int_equal(R.tool_syntax, KVS_TOOL_SYN_NONE);
    s = spec();
    assert_string_equal(json_string_value(json_object_get(s, "choice")),
                        "none");
    json_decref(s);

    /* none with stop: plain text, unconstrained */
    chat(USER, "'tools':[" TOOL_F "],'tool_choice':'none','stop':'x'");
    ok();
    plan(KVS_TOOL_SYN_HERMES, 1, NULL);
    assert_int_equal(R.rf_kind, KVS_GRAM_REQ_NONE);

    /* a template without a syntax: only none */
    chat(USER, "'tools':[" TOOL_F "],'tool_choice':'none'");
    ok();
    plan(KVS_TOOL_SYN_NONE, 1, NULL);
    assert_int_equal(R.rf_kind, KVS_GRAM_REQ_NONE);
    assert_int_equal(R.tool_syntax, KVS_TOOL_SYN_NONE);

    chat(USER, "'tools':[" TOOL_F "]");
    ok();
    plan(KVS_TOOL_SYN_NONE, 1, "tools");
    assert_non_null(strstr(E.message, "syntax"));
    assert_int_equal(R.rf_kind, KVS_GRAM_REQ_NONE);

    /* what only the calls' grammar refuses names its path */
    chat(USER, "'tools':[{'type':'function','function':{'name':'h',"
         "'parameters':{'type':'array'}}}]");
    ok();
    memset(&E, 0, sizeof(E));
    assert_int_equal(kvs_api_req_tools_plan(&R, KVS_TOOL_SYN_HERMES, 1, &E),
                     KVS_EINVAL);
    assert_int_equal(E.status, 400);
    assert_true(strncmp(E.param, "tools[0].parameters", 19) == 0);
    assert_int_equal(R.rf_kind, KVS_GRAM_REQ_NONE);

    /* a built-in template has no place for tools */
    chat(USER, "'tools':[" TOOL_F "],'tool_choice':'none'");
    ok();
    plan(KVS_TOOL_SYN_HERMES, 0, "tools");
    assert_non_null(strstr(E.message, "built-in"));

    /* not combined: response_format, stop */
    chat(USER, "'tools':[" TOOL_F "],'response_format':{'type':"
         "'json_object'}");
    ok();
    plan(KVS_TOOL_SYN_HERMES, 1, "response_format");
    assert_int_equal(R.rf_kind, KVS_GRAM_REQ_OBJECT);

    chat(USER, "'tools':[" TOOL_F "],'stop':['x']");
    ok();
    plan(KVS_TOOL_SYN_HERMES, 1, "stop");
    assert_int_equal(R.rf_kind, KVS_GRAM_REQ_NONE);
    assert_int_equal(R.tool_syntax, KVS_TOOL_SYN_NONE);

    /* the syntaxes of Llama 4 and Command R are named in the spec */
    chat(USER, "'tools':[" TOOL_F "],'tool_choice':'required'");
    ok();
    plan(KVS_TOOL_SYN_COMMANDR7B, 1, NULL);
    assert_int_equal(R.tool_syntax, KVS_TOOL_SYN_COMMANDR7B);
    assert_int_equal(R.tool_text_only, 0);
    s = spec();
    assert_string_equal(json_string_value(json_object_get(s, "syntax")),
                        "commandr7b");
    json_decref(s);

    chat(USER, "'tools':[" TOOL_F "]");
    ok();
    plan(KVS_TOOL_SYN_LLAMA4, 1, NULL);
    s = spec();
    assert_string_equal(json_string_value(json_object_get(s, "syntax")),
                        "llama4");
    json_decref(s);

    chat(USER, "'tools':[" TOOL_F "]");
    ok();
    plan(KVS_TOOL_SYN_MINICPM3, 1, NULL);
    s = spec();
    assert_string_equal(json_string_value(json_object_get(s, "syntax")),
                        "minicpm3");
    json_decref(s);

    chat(USER, "'tools':[" TOOL_F "]");
    ok();
    plan(KVS_TOOL_SYN_COMMANDR, 1, NULL);
    s = spec();
    assert_string_equal(json_string_value(json_object_get(s, "syntax")),
                        "commandr");
    json_decref(s);

    /* Functionary v3.2 writes "all\n" before text, tools or not: its
     * output is read as text with that line dropped */
    chat(USER, "");
    ok();
    plan(KVS_TOOL_SYN_FUNCTIONARY32, 1, NULL);
    assert_int_equal(R.tool_syntax, KVS_TOOL_SYN_FUNCTIONARY32);
    assert_int_equal(R.tool_text_only, 1);
    assert_int_equal(R.rf_kind, KVS_GRAM_REQ_NONE);

    chat(USER, "'tools':[" TOOL_F "],'tool_choice':'none'");
    ok();
    plan(KVS_TOOL_SYN_FUNCTIONARY32, 1, NULL);
    assert_int_equal(R.tool_syntax, KVS_TOOL_SYN_FUNCTIONARY32);
    assert_int_equal(R.tool_text_only, 1);

    chat(USER, "'tools':[" TOOL_F "]");
    ok();
    plan(KVS_TOOL_SYN_FUNCTIONARY32, 1, NULL);
    assert_int_equal(R.tool_syntax, KVS_TOOL_SYN_FUNCTIONARY32);
    assert_int_equal(R.tool_text_only, 0);

    /* not for a built-in template, nor for another syntax */
    chat(USER, "");
    ok();
    plan(KVS_TOOL_SYN_FUNCTIONARY32, 0, NULL);
    assert_int_equal(R.tool_syntax, KVS_TOOL_SYN_NONE);
    assert_int_equal(R.tool_text_only, 0);
    plan(KVS_TOOL_SYN_HERMES, 1, NULL);
    assert_int_equal(R.tool_syntax, KVS_TOOL_SYN_NONE);
}


static void
test_defaults(void **state)
{
    chat(USER, "");
    ok();
    assert_null(R.tools);
    assert_int_equal(R.n_tools, 0);
    assert_int_equal(R.tool_choice, KVS_API_TOOL_NONE);
    assert_int_equal(R.parallel_tool_calls, 1);
    assert_int_equal(kvs_api_req_tools_plan(&R, KVS_TOOL_SYN_HERMES, 1, &E),
                     KVS_OK);
    assert_int_equal(R.rf_kind, KVS_GRAM_REQ_NONE);
    assert_int_equal(R.tool_syntax, KVS_TOOL_SYN_NONE);

    chat(USER, "'tools':[" TOOL_F "," TOOL_G "]");
    ok();
    assert_int_equal(R.n_tools, 2);
    assert_true(json_is_array(R.tools));
    assert_ptr_equal(R.tools, json_object_get(R.root, "tools"));
    assert_int_equal(R.tool_choice, KVS_API_TOOL_AUTO);
    assert_int_equal(R.parallel_tool_calls, 1);


    /* [] is no tools; null is absent */
    chat(USER, "'tools':[]");
    ok();
    assert_null(R.tools);
    assert_int_equal(R.tool_choice, KVS_API_TOOL_NONE);

    chat(USER, "'tools':null,'tool_choice':null,'parallel_tool_calls':null");
    ok();
    assert_int_equal(R.n_tools, 0);
}


static void
test_choice(void **state)
{
    chat(USER, "'tools':[" TOOL_F "],'tool_choice':'none'");
    ok();
    assert_int_equal(R.tool_choice, KVS_API_TOOL_NONE);

    chat(USER, "'tools':[" TOOL_F "],'tool_choice':'required',"
         "'parallel_tool_calls':false");
    ok();
    assert_int_equal(R.tool_choice, KVS_API_TOOL_REQUIRED);
    assert_int_equal(R.parallel_tool_calls, 0);

    chat(USER, "'tools':[" TOOL_F "," TOOL_G "],'tool_choice':"
         "{'type':'function','function':{'name':'g-2'}}");
    ok();
    assert_int_equal(R.tool_choice, KVS_API_TOOL_NAMED);
    assert_int_equal(R.tool_named, 1);

    chat(USER, "'tools':[" TOOL_F "],'tool_choice':"
         "{'type':'function','function':{'name':'g'}}");
    bad("tool_choice.function.name", "invalid_value", "'g' is not in tools");

    chat(USER, "'tools':[" TOOL_F "],'tool_choice':'any'");
    bad("tool_choice", "invalid_value", "'any'");

    chat(USER, "'tools':[" TOOL_F "],'tool_choice':3");
    bad("tool_choice", "invalid_type", "a string or an object");

    chat(USER, "'tools':[" TOOL_F "],'tool_choice':{'type':'x'}");
    bad("tool_choice.type", "invalid_value", "'x'");

    chat(USER, "'tools':[" TOOL_F "],'tool_choice':{'type':'function'}");
    bad("tool_choice.function", "missing_required_parameter", NULL);

    chat(USER, "'tools':[" TOOL_F "],'tool_choice':{'type':'function',"
         "'function':{'name':'f','x':1}}");
    bad("tool_choice.function.x", "unknown_parameter", NULL);

    chat(USER, "'tools':[" TOOL_F "],'parallel_tool_calls':'yes'");
    bad("parallel_tool_calls", "invalid_type", "a boolean");

    /* only with tools */
    chat(USER, "'tool_choice':'auto'");
    bad("tool_choice", "invalid_value", "only allowed when 'tools'");

    chat(USER, "'tools':[],'parallel_tool_calls':true");
    bad("parallel_tool_calls", "invalid_value", "only allowed");

    /* the deprecated pair is not silently ignored */
    chat(USER, "'functions':[{'name':'f'}]");
    bad("functions", "unsupported_parameter", "deprecated");

    chat(USER, "'function_call':'auto'");
    bad("function_call", "unsupported_parameter", NULL);
}


static void
test_tools_bad(void **state)
{
    char  *big;
    size_t i, n;

    chat(USER, "'tools':{}");
    bad("tools", "invalid_type", "an array");

    chat(USER, "'tools':[3]");
    bad("tools[0]", "invalid_type", "an object");

    chat(USER, "'tools':[" TOOL_F ",{'function':{'name':'x'}}]");
    bad("tools[1].type", "missing_required_parameter", NULL);

    chat(USER, "'tools':[{'type':'retrieval','function':{'name':'x'}}]");
    bad("tools[0].type", "invalid_value", "'retrieval'");

    chat(USER, "'tools':[{'type':'function'}]");
    bad("tools[0].function", "missing_required_parameter", NULL);

    chat(USER, "'tools':[{'type':'function','function':'f'}]");
    bad("tools[0].function", "invalid_type", NULL);

    chat(USER, "'tools':[{'type':'function','function':{'name':'f'},"
         "'extra':1}]");
    bad("tools[0].extra", "unknown_parameter", NULL);

    chat(USER, "'tools':[{'type':'function','function':{'name':'f',"
         "'examples':[]}}]");
    bad("tools[0].function.examples", "unknown_parameter", NULL);

    chat(USER, "'tools':[{'type':'function','function':{}}]");
    bad("tools[0].function.name", "missing_required_parameter", NULL);

    chat(USER, "'tools':[{'type':'function','function':{'name':'a b'}}]");
    bad("tools[0].function.name", "invalid_value", "1 to 64 characters");

    chat(USER, "'tools':[{'type':'function','function':{'name':''}}]");
    bad("tools[0].function.name", "invalid_value", NULL);

    chat(USER, "'tools':[{'type':'function','function':{'name':'"
         "a1234567890123456789012345678901234567890123456789012345678901234"
         "'}}]");
    bad("tools[0].function.name", "invalid_value", NULL);

    chat(USER, "'tools':[" TOOL_G "," TOOL_G "]");
    bad("tools[1].function.name", "invalid_value", "also the name of "
        "tools[0]");

    chat(USER, "'tools':[{'type':'function','function':{'name':'f',"
         "'description':1}}]");
    bad("tools[0].function.description", "invalid_type", NULL);

    chat(USER, "'tools':[{'type':'function','function':{'name':'f',"
         "'strict':'y'}}]");
    bad("tools[0].function.strict", "invalid_type", NULL);

    chat(USER, "'tools':[{'type':'function','function':{'name':'f',"
         "'parameters':[]}}]");
    bad("tools[0].function.parameters", "invalid_type", "an object");

    /* the grammar compiler's verdict, naming the keyword's path */
    chat(USER, "'tools':[{'type':'function','function':{'name':'f',"
         "'parameters':{'type':'object','properties':{'x':{'type':"
         "'string','format':'hostname'}}}}}]");
    bad("tools[0].function.parameters.properties.x.format",
        "unsupported_value", "tools[0].function.parameters.properties.x."
        "format");

    /* more tools than OpenAI's limit, then exactly the limit */
    for (n = KVS_API_MAX_TOOLS + 1; n >= KVS_API_MAX_TOOLS; n--) {
        big = malloc(n * 64 + 64);
        assert_non_null(big);
        strcpy(big, "'tools':[");

        for (i = 0; i < n; i++) {
            sprintf(big + strlen(big), "%s{'type':'function','function':"
                    "{'name':'f%zu'}}", i ? "," : "", i);
        }

        strcat(big, "]");
        chat(USER, big);
        free(big);

        if (n > KVS_API_MAX_TOOLS) {
            bad("tools", "array_above_max_length", "maximum length 128");

        } else {
            ok();
            assert_int_equal(R.n_tools, KVS_API_MAX_TOOLS);
        }
    }
}


#define CALL(id, name) \
    "{'id':'" id "','type':'function','function':{'name':'" name "'," \
    "'arguments':'{\\'a\\': 1}'}}"


static void
test_messages(void **state)
{
    /* a round trip with two parallel calls, content null */
    chat(USER ",{'role':'assistant','content':null,'tool_calls':["
         CALL("c1", "f") "," CALL("c2", "g-2") "]},"
         "{'role':'tool','tool_call_id':'c2','content':'2'},"
         "{'role':'tool','tool_call_id':'c1','content':'1'},"
         "{'role':'assistant','content':'done'}," USER,
         "'tools':[" TOOL_F "," TOOL_G "]");
    ok();
    assert_int_equal(json_array_size(R.messages), 6);

    /* tool_calls in history need no tools list (as HF renders them) */
    chat(USER ",{'role':'assistant','tool_calls':[" CALL("c1", "f") "]},"
         "{'role':'tool','tool_call_id':'c1','content':'1'}", "");
    ok();

    chat(USER ",{'role':'tool','tool_call_id':'c1','content':'1'}", "");
    bad("messages[1].role", "invalid_value", "must be a response to a "
        "preceding message with 'tool_calls'");

    chat(USER ",{'role':'assistant','tool_calls':[" CALL("c1", "f") "]},"
         USER ",{'role':'tool','tool_call_id':'c1','content':'1'}", "");
    bad("messages[3].role", "invalid_value", NULL);

    chat(USER ",{'role':'assistant','tool_calls':[" CALL("c1", "f") "]},"
         "{'role':'tool','tool_call_id':'c9','content':'1'}", "");
    bad("messages[2].tool_call_id", "invalid_value", "'c9'");

    chat(USER ",{'role':'tool','content':'1'}", "");
    bad("messages[1].tool_call_id", "missing_required_parameter", NULL);

    chat("{'role':'user','content':'hi','tool_calls':[" CALL("c1", "f")
         "]}", "");
    bad("messages[0].tool_calls", "invalid_value", "role 'assistant'");

    chat(USER ",{'role':'assistant','tool_calls':{}}", "");
    bad("messages[1].tool_calls", "invalid_type", "an array");

    chat(USER ",{'role':'assistant','tool_calls':[]}", "");
    bad("messages[1].tool_calls", "empty_array", NULL);

    chat(USER ",{'role':'assistant','tool_calls':[" CALL("c1", "f") ","
         CALL("c1", "g") "]}", "");
    bad("messages[1].tool_calls[1].id", "invalid_value", "also the id");

    chat(USER ",{'role':'assistant','tool_calls':[{'type':'function',"
         "'function':{'name':'f','arguments':'{}'}}]}", "");
    bad("messages[1].tool_calls[0].id", "missing_required_parameter", NULL);

    chat(USER ",{'role':'assistant','tool_calls':[{'id':'c','type':'fn',"
         "'function':{'name':'f','arguments':'{}'}}]}", "");
    bad("messages[1].tool_calls[0].type", "invalid_value", NULL);

    chat(USER ",{'role':'assistant','tool_calls':[{'id':'c','type':"
         "'function','function':{'name':'f','arguments':{}}}]}", "");
    bad("messages[1].tool_calls[0].function.arguments", "invalid_type",
        "a string");

    chat(USER ",{'role':'assistant','tool_calls':[{'id':'c','type':"
         "'function','function':{'name':'f'}}]}", "");
    bad("messages[1].tool_calls[0].function.arguments",
        "missing_required_parameter", NULL);

    chat(USER ",{'role':'assistant','tool_calls':[{'id':'c','type':"
         "'function','function':{'name':'f','arguments':'{}'},'x':0}]}", "");
    bad("messages[1].tool_calls[0].x", "unknown_parameter", NULL);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test_teardown(test_defaults, teardown),
        cmocka_unit_test_teardown(test_choice, teardown),
        cmocka_unit_test_teardown(test_tools_bad, teardown),
        cmocka_unit_test_teardown(test_messages, teardown),
        cmocka_unit_test_teardown(test_plan, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
