/*
 * test_api_msg: Anthropic's Messages API in the library (kvs_api_msg.h):
 * the parser's translation into the chat request (system, text blocks,
 * tool_use and tool_result, cache_control breakpoints at the translated
 * places, tools and tool_choice, the scalar fields with Anthropic's
 * ranges), its refusals naming the field as the client wrote it (image,
 * a prefill, server tools, unknown keys, max_tokens missing), the
 * anthropic-version check, and the writers: a whole message, a stream's
 * events in order (text then tool_use blocks, input_json_delta), the
 * stop reasons, errors with Anthropic's types and statuses, and the stop
 * sequence finder.  Every output is parsed back with jansson.
 *
 * Bodies are written with ' for " as in test_api_req.c.
 */

#include <jansson.h>

#include "kvs_test.h"

#include "api/kvs_api_msg.h"


static kvs_api_req_t  R;
static kvs_api_err_t  E;
static int            RC;


static int
teardown(void **state)
{
    kvs_api_req_free(&R);
    return 0;
}


static void
q_flags(unsigned flags, const char *fmt, ...)
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
    RC = kvs_api_msg_parse(&R, s, strlen(s), 0, flags, &E);
    free(s);

    if (RC != KVS_OK) {
        assert_null(R.root);
        assert_null(R.msg_root);
        assert_int_equal(R.kind, KVS_API_MESSAGES);
    }
}

#define q(...)  q_flags(0, __VA_ARGS__)

#define USER  "{'role':'user','content':'hi'}"


/* The translated message i as compact JSON with sorted keys. */
static char *
msg_json(size_t i)
{
    return json_dumps(json_array_get(R.messages, i),
                      JSON_COMPACT | JSON_SORT_KEYS);
}


static void
assert_msg(size_t i, const char *want)
{
    char  *got, *w, *p;

    got = msg_json(i);
    w = strdup(want);
    assert_non_null(got);
    assert_non_null(w);

    for (p = w; *p != '\0'; p++) {
        if (*p == '\'') {
            *p = '"';
        }
    }

    assert_string_equal(got, w);
    free(got);
    free(w);
}


static void
assert_err(const char *param, const char *in_message)
{
    assert_int_not_equal(RC, KVS_OK);
    assert_int_equal(E.status, 400);
    assert_string_equal(E.param, param);
    assert_non_null(strstr(E.message, in_message));
}


static void
test_translate(void **state)
{
    q("{'model':'m','max_tokens':7,'system':'Be brief.','messages':[%s]}",
      USER);
    assert_int_equal(RC, KVS_OK);
    assert_int_equal(R.kind, KVS_API_MESSAGES);
    assert_string_equal(R.model.ptr, "m");
    assert_int_equal(R.max_tokens, 7);
    assert_int_equal(R.n, 1);
    assert_int_equal(json_array_size(R.messages), 2);
    assert_msg(0, "{'content':'Be brief.','role':'system'}");
    assert_msg(1, "{'content':'hi','role':'user'}");
    assert_int_equal(R.n_breaks, 0);
    assert_null(R.tools);

    /* system blocks with a breakpoint, an assistant turn with text and
     * a tool_use, the user's tool_result (an error) and text */
    q("{'model':'m','max_tokens':9,'system':[{'type':'text','text':'S',"
      "'cache_control':{'type':'ephemeral','ttl':'1h'}}],'messages':["
      "{'role':'user','content':[{'type':'text','text':'a'},"
      "{'type':'text','text':'b','cache_control':{'type':'ephemeral'}}]},"
      "{'role':'assistant','content':[{'type':'text','text':'c'},"
      "{'type':'tool_use','id':'t1','name':'f','input':{'x':1}}]},"
      "{'role':'user','content':[{'type':'tool_result','tool_use_id':'t1',"
      "'content':'ok','is_error':true},{'type':'text','text':'d'}]}],"
      "'tools':[{'name':'f','description':'F','input_schema':"
      "{'type':'object','properties':{'x':{'type':'integer'}}}}]}");
    assert_int_equal(RC, KVS_OK);
    assert_int_equal(json_array_size(R.messages), 5);
    assert_msg(0, "{'content':[{'cache_control':{'ttl':'1h','type':"
               "'ephemeral'},'text':'S','type':'text'}],'role':'system'}");
    assert_msg(2, "{'content':[{'text':'c','type':'text'}],'role':"
               "'assistant','tool_calls':[{'function':{'arguments':"
               "'{\\\"x\\\":1}','name':'f'},'id':'t1','type':"
               "'function'}]}");
    assert_msg(3, "{'content':[{'text':'Error: ','type':'text'},"
               "{'text':'ok','type':'text'}],'role':'tool',"
               "'tool_call_id':'t1'}");
    assert_msg(4, "{'content':[{'text':'d','type':'text'}],'role':'user'}");

    /* breakpoints at the translated places: system part 0, user part 1 */
    assert_int_equal(R.n_breaks, 2);
    assert_int_equal(R.breaks[0].message, 0);
    assert_int_equal(R.breaks[0].part, 0);
    assert_int_equal(R.breaks[0].ttl_ms, KVS_API_TTL_1H);
    assert_int_equal(R.breaks[1].message, 1);
    assert_int_equal(R.breaks[1].part, 1);
    assert_int_equal(R.breaks[1].ttl_ms, KVS_API_TTL_5M);

    /* tools as OpenAI's function tools, tool_choice auto by default */
    assert_int_equal(R.n_tools, 1);
    assert_int_equal(R.tool_choice, KVS_API_TOOL_AUTO);
    assert_string_equal(json_string_value(json_object_get(json_object_get(
        json_array_get(R.tools, 0), "function"), "name")), "f");

    /* the top-level cache_control: after the last message */
    q("{'model':'m','max_tokens':1,'cache_control':{'type':'ephemeral'},"
      "'messages':[%s]}", USER);
    assert_int_equal(RC, KVS_OK);
    assert_int_equal(R.n_breaks, 1);
    assert_int_equal(R.breaks[0].message, 0);
    assert_int_equal(R.breaks[0].part, -1);
}


static void
test_fields(void **state)
{
    q("{'model':'m','max_tokens':3,'temperature':0.25,'top_p':0.5,"
      "'top_k':7,'stream':true,'metadata':{'user_id':'u9'},"
      "'stop_sequences':['\\n\\nHuman:','END'],'messages':[%s]}", USER);
    assert_int_equal(RC, KVS_OK);
    assert_true(R.sample.temperature == 0.25f);
    assert_true(R.sample.top_p == 0.5f);
    assert_int_equal(R.sample.top_k, 7);
    assert_int_equal(R.stream, 1);
    assert_string_equal(R.user.ptr, "u9");
    assert_int_equal(R.n_stop, 2);
    assert_string_equal(R.stop[1].ptr, "END");

    /* defaults */
    q("{'model':'m','max_tokens':3,'messages':[%s]}", USER);
    assert_true(R.sample.temperature == 1.0f);
    assert_int_equal(R.stream, 0);
    assert_int_equal(R.n_stop, 0);

    /* count_tokens: no max_tokens needed */
    q_flags(KVS_API_MSG_COUNT, "{'model':'m','messages':[%s]}", USER);
    assert_int_equal(RC, KVS_OK);
    assert_int_equal(R.max_tokens, -1);

    /* unknown top-level fields pass, and are named */
    q("{'model':'m','max_tokens':3,'service_tier':'auto','x':1,"
      "'messages':[%s]}", USER);
    {
        const char  *names[4];

        assert_int_equal(RC, KVS_OK);
        assert_int_equal(kvs_api_req_unknown(&R, names, 4), 2);
        assert_string_equal(names[0], "service_tier");
        assert_string_equal(names[1], "x");
    }
}


static void
test_refused(void **state)
{
    q("{'model':'m','messages':[%s]}", USER);
    assert_err("max_tokens", "max_tokens");

    q("{'model':'m','max_tokens':0,'messages':[%s]}", USER);
    assert_err("max_tokens", "below minimum");

    q("{'model':'m','max_tokens':1,'temperature':1.5,'messages':[%s]}",
      USER);
    assert_err("temperature", "above maximum");

    q("{'model':'m','max_tokens':1,'top_k':0,'messages':[%s]}", USER);
    assert_err("top_k", "below minimum");

    q("{'model':'m','max_tokens':1,'messages':[]}");
    assert_err("messages", "at least one");

    q("{'model':'m','max_tokens':1,'messages':[{'role':'system',"
      "'content':'x'}]}");
    assert_err("messages[0].role", "'user' and 'assistant'");

    q("{'model':'m','max_tokens':1,'messages':[{'role':'user','content':"
      "[{'type':'image','source':{}}]}]}");
    assert_err("messages[0].content[0].type", "'image' content blocks");

    q("{'model':'m','max_tokens':1,'messages':[{'role':'user','content':"
      "[{'type':'document','source':{}}]}]}");
    assert_err("messages[0].content[0].type", "'document'");

    q("{'model':'m','max_tokens':1,'messages':[%s,{'role':'assistant',"
      "'content':'pre'}]}", USER);
    assert_err("messages[1]", "prefill");

    q("{'model':'m','max_tokens':1,'messages':[{'role':'user','content':"
      "[{'type':'text','text':'a','citations':[]}]}]}");
    assert_err("messages[0].content[0].citations", "Unrecognized");

    q("{'model':'m','max_tokens':1,'messages':[{'role':'user','content':"
      "[{'type':'text','text':'a'},{'type':'tool_result',"
      "'tool_use_id':'t'}]}]}");
    assert_err("messages[0].content[1]", "must come before");

    q("{'model':'m','max_tokens':1,'messages':[{'role':'user','content':"
      "[{'type':'tool_use','id':'t','name':'f','input':{}}]}]}");
    assert_err("messages[0].content[0].type", "only allowed in assistant");

    q("{'model':'m','max_tokens':1,'stop_sequences':['a','b','c','d','e'],"
      "'messages':[%s]}", USER);
    assert_err("stop_sequences", "array too long");

    q("{'model':'m','max_tokens':1,'stop_sequences':[''],'messages':[%s]}",
      USER);
    assert_err("stop_sequences[0]", "1 to 256 bytes");

    q("{'model':'m','max_tokens':1,'metadata':{'user':'x'},"
      "'messages':[%s]}", USER);
    assert_err("metadata.user", "Unrecognized");

    q("{'model':'m','max_tokens':1,'thinking':{'type':'enabled',"
      "'budget_tokens':1024},'messages':[%s]}", USER);
    assert_err("thinking", "not supported");

    q("{'model':'m','max_tokens':1,'thinking':{'type':'disabled'},"
      "'messages':[%s]}", USER);
    assert_int_equal(RC, KVS_OK);

    /* tools: server tools, a breakpoint on a tool, no input_schema, a
     * schema the grammar cannot take (named under its own path) */
    q("{'model':'m','max_tokens':1,'tools':[{'type':'web_search_20250305',"
      "'name':'web_search'}],'messages':[%s]}", USER);
    assert_err("tools[0].type", "server tool");

    q("{'model':'m','max_tokens':1,'tools':[{'name':'f','input_schema':{},"
      "'cache_control':{'type':'ephemeral'}}],'messages':[%s]}", USER);
    assert_err("tools[0].cache_control", "not supported");

    q("{'model':'m','max_tokens':1,'tools':[{'name':'f'}],"
      "'messages':[%s]}", USER);
    assert_err("tools[0].input_schema", "Missing");

    q("{'model':'m','max_tokens':1,'tools':[{'name':'f','input_schema':"
      "{'type':'object','properties':{'a':{'type':'string','format':"
      "'hostname-x'}}}}],'messages':[%s]}", USER);
    assert_int_not_equal(RC, KVS_OK);
    assert_int_equal(strncmp(E.param, "tools[0].input_schema", 21), 0);
    assert_null(strstr(E.message, "function"));

    q("{'model':'m','max_tokens':1,'tools':[{'name':'bad name',"
      "'input_schema':{}}],'messages':[%s]}", USER);
    assert_err("tools[0].name", "1 to 64 characters");
}


static void
test_tool_choice(void **state)
{
#define TOOLS \
    "'tools':[{'name':'f','input_schema':{'type':'object'}}," \
    "{'name':'g','input_schema':{'type':'object'}}]"

    q("{'model':'m','max_tokens':1," TOOLS ",'tool_choice':{'type':'any'},"
      "'messages':[%s]}", USER);
    assert_int_equal(RC, KVS_OK);
    assert_int_equal(R.tool_choice, KVS_API_TOOL_REQUIRED);
    assert_int_equal(R.parallel_tool_calls, 1);

    q("{'model':'m','max_tokens':1," TOOLS ",'tool_choice':{'type':'tool',"
      "'name':'g','disable_parallel_tool_use':true},'messages':[%s]}",
      USER);
    assert_int_equal(RC, KVS_OK);
    assert_int_equal(R.tool_choice, KVS_API_TOOL_NAMED);
    assert_int_equal(R.tool_named, 1);
    assert_int_equal(R.parallel_tool_calls, 0);

    q("{'model':'m','max_tokens':1," TOOLS ",'tool_choice':{'type':"
      "'none'},'messages':[%s]}", USER);
    assert_int_equal(RC, KVS_OK);
    assert_int_equal(R.tool_choice, KVS_API_TOOL_NONE);

    q("{'model':'m','max_tokens':1," TOOLS ",'tool_choice':{'type':'auto'}"
      ",'messages':[%s]}", USER);
    assert_int_equal(R.tool_choice, KVS_API_TOOL_AUTO);

    q("{'model':'m','max_tokens':1," TOOLS ",'tool_choice':{'type':"
      "'tool'},'messages':[%s]}", USER);
    assert_err("tool_choice.name", "Missing");

    q("{'model':'m','max_tokens':1," TOOLS ",'tool_choice':{'type':"
      "'tool','name':'h'},'messages':[%s]}", USER);
    assert_err("tool_choice.name", "not in tools");

    q("{'model':'m','max_tokens':1," TOOLS ",'tool_choice':{'type':"
      "'some'},'messages':[%s]}", USER);
    assert_err("tool_choice.type", "'auto', 'any', 'tool' and 'none'");

    q("{'model':'m','max_tokens':1," TOOLS ",'tool_choice':'any',"
      "'messages':[%s]}", USER);
    assert_err("tool_choice", "an object");

#undef TOOLS
}


static void
test_version(void **state)
{
    kvs_api_err_t  e;

    assert_int_equal(kvs_api_msg_version("2023-06-01", 10, &e), KVS_OK);
    assert_int_equal(kvs_api_msg_version("2026-10-21", 10, &e), KVS_OK);
    assert_int_equal(kvs_api_msg_version("2023-06-0", 9, &e), KVS_EINVAL);
    assert_string_equal(e.param, "anthropic-version");
    assert_non_null(strstr(e.message, "\"2023-06-0\""));
    assert_int_equal(kvs_api_msg_version(NULL, 0, &e), KVS_EINVAL);
    assert_non_null(strstr(e.message, "required"));
}


/* out's bytes parsed as one JSON value (NULL when they are not one) */
static json_t *
parse(const kvs_buf_t *out, size_t from)
{
    json_error_t  je;

    return json_loadb((const char *) out->data + from, out->len - from, 0,
                      &je);
}


static const kvs_api_resp_head_t  H = {
    KVS_API_MESSAGES, "msg_1", 5, "m", 1, 0, 0
};


static void
test_body(void **state)
{
    json_t               *j, *u, *c;
    kvs_buf_t             out;
    kvs_err_t             err;
    kvs_api_usage_t       cu;
    kvs_api_choice_t      ch;
    kvs_api_msg_usage_t   mu;
    kvs_api_tool_call_t   call = { 0, "call_ABC", "f", "{\"a\":1}", 7 };

    memset(&out, 0, sizeof(out));
    memset(&ch, 0, sizeof(ch));

    cu.prompt_tokens = 100;
    cu.completion_tokens = 9;
    cu.cached_tokens = 60;
    cu.cache_creation_tokens = 30;
    cu.breakpoints = 1;
    kvs_api_msg_usage(&mu, &cu);
    assert_int_equal(mu.input_tokens, 10);
    assert_int_equal(mu.cache_read, 60);
    assert_int_equal(mu.cache_creation, 30);
    assert_int_equal(mu.output_tokens, 9);

    q("{'model':'m','max_tokens':3,'stop_sequences':['X','YZ'],"
      "'messages':[%s]}", USER);

    /* text, ended by the second stop sequence */
    ch.text = "hi \"there\"\xff";
    ch.len = strlen(ch.text);
    ch.finish = KVS_FINISH_STOP;
    assert_int_equal(kvs_api_msg_body(&out, &H, &ch, &mu, &R, 1, &err),
                     KVS_OK);
    j = parse(&out, 0);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "id")),
                        "msg_1");
    assert_string_equal(json_string_value(json_object_get(j, "type")),
                        "message");
    assert_string_equal(json_string_value(json_object_get(j, "role")),
                        "assistant");
    c = json_array_get(json_object_get(j, "content"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "text")),
                        "hi \"there\"\xef\xbf\xbd");
    assert_string_equal(json_string_value(json_object_get(j,
                        "stop_reason")), "stop_sequence");
    assert_string_equal(json_string_value(json_object_get(j,
                        "stop_sequence")), "YZ");
    u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "input_tokens")),
                     10);
    assert_int_equal(json_integer_value(json_object_get(u,
                     "cache_read_input_tokens")), 60);
    assert_int_equal(json_integer_value(json_object_get(u,
                     "cache_creation_input_tokens")), 30);
    assert_int_equal(json_integer_value(json_object_get(u,
                     "output_tokens")), 9);
    json_decref(j);

    /* a tool call, no text: a tool_use block with its input */
    out.len = 0;
    ch.text = NULL;
    ch.len = 0;
    ch.calls = &call;
    ch.n_calls = 1;
    ch.tool_finish = 1;
    assert_int_equal(kvs_api_msg_body(&out, &H, &ch, &mu, &R, -1, &err),
                     KVS_OK);
    j = parse(&out, 0);
    assert_non_null(j);
    assert_int_equal(json_array_size(json_object_get(j, "content")), 1);
    c = json_array_get(json_object_get(j, "content"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "type")),
                        "tool_use");
    assert_string_equal(json_string_value(json_object_get(c, "id")),
                        "toolu_ABC");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(c,
                     "input"), "a")), 1);
    assert_string_equal(json_string_value(json_object_get(j,
                        "stop_reason")), "tool_use");
    assert_true(json_is_null(json_object_get(j, "stop_sequence")));
    json_decref(j);

    /* arguments that are not an object: refused, nothing written */
    out.len = 0;
    call.args = "[1]";
    call.args_len = 3;
    assert_int_equal(kvs_api_msg_body(&out, &H, &ch, &mu, &R, -1, &err),
                     KVS_EINVAL);
    assert_int_equal(out.len, 0);

    /* max_tokens; an unfinished choice is refused */
    ch.calls = NULL;
    ch.n_calls = 0;
    ch.tool_finish = 0;
    ch.finish = KVS_FINISH_LENGTH;
    assert_int_equal(kvs_api_msg_stop_reason(&ch, -1),
                     KVS_API_MSG_MAX_TOKENS);
    ch.finish = KVS_FINISH_STOP;
    assert_int_equal(kvs_api_msg_stop_reason(&ch, -1),
                     KVS_API_MSG_END_TURN);
    /* a guard's stop (kvserve_guard output=stop), even past a stop
     * sequence's text, is Anthropic's refusal */
    ch.finish = KVS_FINISH_CONTENT_FILTER;
    assert_int_equal(kvs_api_msg_stop_reason(&ch, -1), KVS_API_MSG_REFUSAL);
    assert_int_equal(kvs_api_msg_stop_reason(&ch, 0), KVS_API_MSG_REFUSAL);
    out.len = 0;
    assert_int_equal(kvs_api_msg_body(&out, &H, &ch, &mu, &R, -1, &err),
                     KVS_OK);
    j = parse(&out, 0);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j,
                        "stop_reason")), "refusal");
    json_decref(j);
    ch.finish = KVS_FINISH_NONE;
    assert_int_equal(kvs_api_msg_body(&out, &H, &ch, &mu, &R, -1, &err),
                     KVS_EINVAL);

    out.len = 0;
    assert_int_equal(kvs_api_msg_count_json(&out, 42), KVS_OK);
    assert_int_equal(out.len, strlen("{\"input_tokens\":42}"));
    assert_memory_equal(out.data, "{\"input_tokens\":42}", out.len);

    kvs_buf_free(&out);
}


/* The events of out from `from`: names[] and their data parsed. */
static size_t
events(const kvs_buf_t *out, const char **names, json_t **data, size_t max)
{
    size_t        n;
    char         *s, *p, *e, *nl;
    json_error_t  je;

    s = strndup((const char *) out->data, out->len);
    assert_non_null(s);
    n = 0;

    for (p = s; *p != '\0' && n < max; p = e + 2) {
        e = strstr(p, "\n\n");
        assert_non_null(e);
        *e = '\0';
        assert_int_equal(strncmp(p, "event: ", 7), 0);
        nl = strchr(p, '\n');
        assert_non_null(nl);
        *nl = '\0';
        names[n] = strdup(p + 7);
        assert_int_equal(strncmp(nl + 1, "data: ", 6), 0);
        data[n] = json_loads(nl + 7, 0, &je);
        assert_non_null(data[n]);
        assert_string_equal(json_string_value(json_object_get(data[n],
                            "type")), names[n]);
        n++;
    }

    free(s);

    return n;
}


static void
test_stream(void **state)
{
    size_t                 i, n;
    json_t                *d[32];
    kvs_buf_t              out;
    kvs_err_t              err;
    const char            *names[32];
    kvs_api_choice_t       c;
    kvs_api_msg_stream_t   st;
    kvs_api_tool_call_t    head = { 0, "call_Q", "f", NULL, 0 };
    kvs_api_tool_call_t    piece = { 0, NULL, NULL, "{\"a\":", 5 };

    static const char *const  want[] = {
        "message_start", "content_block_start", "ping",
        "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop"
    };

    memset(&out, 0, sizeof(out));
    memset(&st, 0, sizeof(st));
    st.usage.input_tokens = 5;

    /* the role chunk with "", two text deltas, a call's head and a
     * piece of its arguments, the finish */
    memset(&c, 0, sizeof(c));
    c.role = 1;
    c.text = "";
    assert_int_equal(kvs_api_msg_sse(&st, &out, &H, &c, &err), KVS_OK);
    c.role = 0;
    c.text = "Hel";
    c.len = 3;
    assert_int_equal(kvs_api_msg_sse(&st, &out, &H, &c, &err), KVS_OK);
    c.text = "lo";
    c.len = 2;
    assert_int_equal(kvs_api_msg_sse(&st, &out, &H, &c, &err), KVS_OK);
    c.text = NULL;
    c.len = 0;
    c.calls = &head;
    c.n_calls = 1;
    assert_int_equal(kvs_api_msg_sse(&st, &out, &H, &c, &err), KVS_OK);
    c.calls = &piece;
    assert_int_equal(kvs_api_msg_sse(&st, &out, &H, &c, &err), KVS_OK);
    c.calls = NULL;
    c.n_calls = 0;
    c.finish = KVS_FINISH_STOP;
    c.tool_finish = 1;
    assert_int_equal(kvs_api_msg_sse(&st, &out, &H, &c, &err), KVS_OK);
    assert_int_equal(kvs_api_msg_sse_end(&st, &out, &H, 4, &R, -1, &err),
                     KVS_OK);

    n = events(&out, names, d, 32);
    assert_int_equal(n, sizeof(want) / sizeof(want[0]));

    for (i = 0; i < n; i++) {
        assert_string_equal(names[i], want[i]);
    }

    assert_int_equal(json_integer_value(json_object_get(json_object_get(
        json_object_get(d[0], "message"), "usage"), "input_tokens")), 5);
    assert_string_equal(json_string_value(json_object_get(json_object_get(
        d[3], "delta"), "text")), "Hel");
    assert_int_equal(json_integer_value(json_object_get(d[5], "index")), 0);
    assert_int_equal(json_integer_value(json_object_get(d[6], "index")), 1);
    assert_string_equal(json_string_value(json_object_get(json_object_get(
        d[6], "content_block"), "id")), "toolu_Q");
    assert_string_equal(json_string_value(json_object_get(json_object_get(
        d[7], "delta"), "type")), "input_json_delta");
    assert_string_equal(json_string_value(json_object_get(json_object_get(
        d[7], "delta"), "partial_json")), "{\"a\":");
    assert_string_equal(json_string_value(json_object_get(json_object_get(
        d[9], "delta"), "stop_reason")), "tool_use");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(
        d[9], "usage"), "output_tokens")), 4);

    for (i = 0; i < n; i++) {
        free((char *) names[i]);
        json_decref(d[i]);
    }

    /* an argument piece without its head is refused, nothing written */
    memset(&st, 0, sizeof(st));
    out.len = 0;
    memset(&c, 0, sizeof(c));
    c.calls = &piece;
    c.n_calls = 1;
    assert_int_equal(kvs_api_msg_sse(&st, &out, &H, &c, &err), KVS_EINVAL);
    assert_int_equal(out.len, 0);

    /* nothing generated: start, delta, stop, no block */
    assert_int_equal(kvs_api_msg_sse_end(&st, &out, &H, 1, &R, -1, &err),
                     KVS_OK);
    n = events(&out, names, d, 32);
    assert_int_equal(n, 3);
    assert_string_equal(names[0], "message_start");
    assert_string_equal(names[1], "message_delta");
    assert_string_equal(names[2], "message_stop");

    for (i = 0; i < n; i++) {
        free((char *) names[i]);
        json_decref(d[i]);
    }

    kvs_buf_free(&out);
}


static void
test_errors(void **state)
{
    json_t     *j;
    kvs_buf_t   out;

    memset(&out, 0, sizeof(out));

    assert_int_equal(kvs_api_msg_status(503), 529);
    assert_int_equal(kvs_api_msg_status(429), 429);
    assert_string_equal(kvs_api_msg_error_type(400),
                        "invalid_request_error");
    assert_string_equal(kvs_api_msg_error_type(401), "authentication_error");
    assert_string_equal(kvs_api_msg_error_type(403), "permission_error");
    assert_string_equal(kvs_api_msg_error_type(404), "not_found_error");
    assert_string_equal(kvs_api_msg_error_type(413), "request_too_large");
    assert_string_equal(kvs_api_msg_error_type(429), "rate_limit_error");
    assert_string_equal(kvs_api_msg_error_type(500), "api_error");
    assert_string_equal(kvs_api_msg_error_type(503), "overloaded_error");
    assert_string_equal(kvs_api_msg_error_type(504), "api_error");

    assert_int_equal(kvs_api_msg_error_json(&out, 404, "no \"m\""), KVS_OK);
    j = parse(&out, 0);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "type")),
                        "error");
    assert_string_equal(json_string_value(json_object_get(json_object_get(
        j, "error"), "type")), "not_found_error");
    assert_string_equal(json_string_value(json_object_get(json_object_get(
        j, "error"), "message")), "no \"m\"");
    json_decref(j);

    out.len = 0;
    assert_int_equal(kvs_api_msg_error_event(&out, 503, "busy"), KVS_OK);
    assert_int_equal(strncmp((const char *) out.data,
                             "event: error\ndata: {", 20), 0);
    assert_int_equal(memcmp(out.data + out.len - 2, "\n\n", 2), 0);
    j = parse(&out, 19);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(json_object_get(
        j, "error"), "type")), "overloaded_error");
    json_decref(j);

    kvs_buf_free(&out);
}


static void
test_stop_which(void **state)
{
    q("{'model':'m','max_tokens':3,'stop_sequences':['abc','ab','x'],"
      "'messages':[%s]}", USER);
    assert_int_equal(RC, KVS_OK);
    assert_int_equal(kvs_api_msg_stop_which(&R, "abcd", 4), 1);
    assert_int_equal(kvs_api_msg_stop_which(&R, "xy", 2), 2);
    assert_int_equal(kvs_api_msg_stop_which(&R, "a", 1), -1);
    assert_int_equal(kvs_api_msg_stop_which(&R, "", 0), -1);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test_teardown(test_translate, teardown),
        cmocka_unit_test_teardown(test_fields, teardown),
        cmocka_unit_test_teardown(test_refused, teardown),
        cmocka_unit_test_teardown(test_tool_choice, teardown),
        cmocka_unit_test(test_version),
        cmocka_unit_test_teardown(test_body, teardown),
        cmocka_unit_test_teardown(test_stream, teardown),
        cmocka_unit_test(test_errors),
        cmocka_unit_test_teardown(test_stop_which, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
