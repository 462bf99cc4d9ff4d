/*
 * test_chat_tools: tool calling through the chat renderers.
 *
 *  - Through the real fixture templates of Qwen 2.5 and Llama 3.1 (the
 *    .jinja files in $KVS_FIXTURES/templates, each skipped naming it when
 *    absent), run by kvs_chat_render() as the server runs a model's own
 *    template: a request-shaped conversation (tools, an assistant turn
 *    with OpenAI tool_calls whose arguments are JSON text, tool results)
 *    renders each template's tool section with the definitions, the call
 *    with its arguments as the mapping they parse to, and the results.
 *  - The context on small templates written here: tools none when absent,
 *    arguments a mapping only when they parse as an object, null tool
 *    fields left out, the client's tree unchanged.
 *  - The checks: malformed tool fields are KVS_EINVAL naming them; the
 *    built-in families refuse tools, tool messages and tool_calls with
 *    KVS_EUNSUPPORTED naming the field, appending nothing.
 *  - The control-token guard over tools and tool fields (the Phi-3
 *    vocabulary fixture's control tokens), naming the path.
 *  - The render limits grow with the tools: 128 tools with large schemas
 *    printed indented by Llama 3.1's template render.
 *  - Cache breakpoints (kvs_api_cache_offsets(), which renders the
 *    conversation cut at each) see the tools too: through Qwen 2.5 a
 *    breakpoint on the user turn covers the tool section before it.
 */

#include "kvs_test.h"

#include "api/kvs_api_cache.h"
#include "tokenizer/kvs_chat.h"
#include "tokenizer/kvs_chat_jinja.h"
#include "tokenizer/kvs_vocab.h"


static kvs_err_t  err;


#define TOOLS \
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"," \
    "\"description\":\"Get the weather in a city.\",\"parameters\":" \
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"," \
    "\"description\":\"The city\"}},\"required\":[\"city\"]}}}]"

/* as a client sends it: arguments are JSON text, content null */
#define CONVO \
    "[{\"role\":\"system\",\"content\":\"Use tools.\"}," \
    "{\"role\":\"user\",\"content\":\"Weather in Paris?\"}," \
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":" \
    "\"call12345\",\"type\":\"function\",\"function\":{\"name\":" \
    "\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]}," \
    "{\"role\":\"tool\",\"tool_call_id\":\"call12345\",\"content\":" \
    "\"sunny, 21 C\"}]"


/* two calls in one turn, then their two results */
#define CONVO2 \
    "[{\"role\":\"system\",\"content\":\"Use tools.\"}," \
    "{\"role\":\"user\",\"content\":\"Weather in Paris and Oslo?\"}," \
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":" \
    "\"call1\",\"type\":\"function\",\"function\":{\"name\":" \
    "\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}," \
    "{\"id\":\"call2\",\"type\":\"function\",\"function\":{\"name\":" \
    "\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Oslo\\\"}\"}}]}," \
    "{\"role\":\"tool\",\"tool_call_id\":\"call1\",\"content\":" \
    "\"sunny, 21 C\"},{\"role\":\"tool\",\"tool_call_id\":\"call2\"," \
    "\"content\":\"rain\"}]"


static json_t *
load(const char *text)
{
    json_t  *j;

    j = json_loads(text, 0, NULL);
    assert_non_null(j);

    return j;
}


/* Renders messages (and tools, NULL: none) through tpl as the server
 * renders a model's own template; KVS_OK or the error (err). */
static int
render_text(const char *tpl, size_t len, const char *messages,
    const char *tools, kvs_buf_t *out)
{
    int                rc;
    json_t            *m, *t;
    kvs_chat_t         chat;
    kvs_chat_args_t    args;
    kvs_chat_jinja_t  *cj;

    assert_int_equal(kvs_chat_jinja_compile(&cj, tpl, len, NULL, &err),
                     KVS_OK);

    m = load(messages);
    t = tools != NULL ? load(tools) : NULL;

    memset(&chat, 0, sizeof(chat));
    chat.jinja = cj;
    memset(&args, 0, sizeof(args));
    args.bos = "<|begin_of_text|>";
    args.bos_len = strlen(args.bos);
    args.eos = "<|eot_id|>";
    args.eos_len = strlen(args.eos);
    args.add_generation_prompt = 1;
    args.tools = t;

    memset(out, 0, sizeof(*out));
    rc = kvs_chat_render(&chat, m, &args, out, &err);

    json_decref(m);
    json_decref(t);
    kvs_chat_jinja_free(cj);

    return rc;
}


static void
expect_in(const kvs_buf_t *out, const char *what)
{
    if (memmem(out->data, out->len, what, strlen(what)) == NULL) {
        fail_msg("prompt lacks [%s]:\n%.*s", what, (int) out->len,
                 (const char *) out->data);
    }
}


static void
expect_not_in(const kvs_buf_t *out, const char *what)
{
    if (memmem(out->data, out->len, what, strlen(what)) != NULL) {
        fail_msg("prompt has [%s]:\n%.*s", what, (int) out->len,
                 (const char *) out->data);
    }
}


/* A fixture template's text, or NULL (skipping, naming it). */
static char *
fixture_template(const char *name, size_t *len)
{
    char         rel[256];
    const char  *path;

    snprintf(rel, sizeof(rel), "templates/%s", name);
    path = kvs_test_fixture(rel);
    if (path == NULL) {
        return NULL;
    }

    return (char *) kvs_test_slurp(path, len);
}


static void
test_qwen25(void **state)
{
    char       *tpl;
    size_t      len;
    kvs_buf_t   out;

    tpl = fixture_template("qwen2.5-7b-instruct.jinja", &len);
    if (tpl == NULL) {
        skip();
    }

    assert_int_equal(render_text(tpl, len, CONVO, TOOLS, &out), KVS_OK);

    /* the definitions, as the template's tojson writes them */
    expect_in(&out, "<tools>\n{\"type\": \"function\", \"function\": "
              "{\"name\": \"get_weather\", \"description\": \"Get the "
              "weather in a city.\", \"parameters\": {\"type\": "
              "\"object\", \"properties\": {\"city\": {\"type\": "
              "\"string\", \"description\": \"The city\"}}, "
              "\"required\": [\"city\"]}}}\n</tools>");
    expect_in(&out, "<|im_start|>system\nUse tools.\n\n# Tools");

    /* the call, its arguments a mapping (a string would be quoted) */
    expect_in(&out, "<|im_start|>assistant\n<tool_call>\n{\"name\": "
              "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
              "</tool_call><|im_end|>\n");

    /* the result, in a user turn as Qwen's template puts it */
    expect_in(&out, "<|im_start|>user\n<tool_response>\nsunny, 21 C\n"
              "</tool_response><|im_end|>\n<|im_start|>assistant\n");
    kvs_buf_free(&out);

    /* arguments that are not a JSON object stay the string */
    assert_int_equal(render_text(tpl, len,
                                 "[{\"role\":\"user\",\"content\":\"x\"},"
                                 "{\"role\":\"assistant\",\"tool_calls\":"
                                 "[{\"id\":\"a\",\"type\":\"function\","
                                 "\"function\":{\"name\":\"f\","
                                 "\"arguments\":\"[1, 2]\"}}]}]", TOOLS,
                                 &out), KVS_OK);
    expect_in(&out, "{\"name\": \"f\", \"arguments\": \"[1, 2]\"}");
    kvs_buf_free(&out);

    /* no tools: no tool section */
    assert_int_equal(render_text(tpl, len,
                                 "[{\"role\":\"user\",\"content\":\"x\"}]",
                                 NULL, &out), KVS_OK);
    expect_not_in(&out, "<tools>");
    expect_in(&out, "<|im_start|>user\nx<|im_end|>");
    kvs_buf_free(&out);

    free(tpl);
}


static void
test_llama31(void **state)
{
    char       *tpl;
    size_t      len;
    kvs_buf_t   out;

    tpl = fixture_template("llama-3.1-8b-instruct.jinja", &len);
    if (tpl == NULL) {
        skip();
    }

    assert_int_equal(render_text(tpl, len, CONVO, TOOLS, &out), KVS_OK);

    expect_in(&out, "<|begin_of_text|><|start_header_id|>system"
              "<|end_header_id|>\n\nEnvironment: ipython\n");

    /* the definitions in the first user turn, tojson with indent 4 */
    expect_in(&out, "Given the following functions");
    expect_in(&out, "{\n    \"type\": \"function\",\n    \"function\": {\n"
              "        \"name\": \"get_weather\",\n        \"description\": "
              "\"Get the weather in a city.\",\n");
    expect_in(&out, "\n\nWeather in Paris?<|eot_id|>");

    /* the call as Llama 3.1 writes it: the mapping under "parameters" */
    expect_in(&out, "<|start_header_id|>assistant<|end_header_id|>\n\n"
              "{\"name\": \"get_weather\", \"parameters\": {\"city\": "
              "\"Paris\"}}<|eot_id|>");

    /* the result in an ipython turn */
    expect_in(&out, "<|start_header_id|>ipython<|end_header_id|>\n\n"
              "\"sunny, 21 C\"<|eot_id|>");
    kvs_buf_free(&out);

    /* two calls in one turn: the template's own refusal, word for word */
    assert_int_equal(render_text(tpl, len,
                                 "[{\"role\":\"user\",\"content\":\"x\"},"
                                 "{\"role\":\"assistant\",\"tool_calls\":"
                                 "[{\"id\":\"a\",\"type\":\"function\","
                                 "\"function\":{\"name\":\"f\","
                                 "\"arguments\":\"{}\"}},{\"id\":\"b\","
                                 "\"type\":\"function\",\"function\":"
                                 "{\"name\":\"g\",\"arguments\":\"{}\"}}]}]",
                                 TOOLS, &out), KVS_EINVAL);
    assert_string_equal(err.msg, "This model only supports single "
                        "tool-calls at once!");
    assert_int_equal(out.len, 0);
    kvs_buf_free(&out);

    free(tpl);
}


static void
expect_small(const char *tpl, const char *messages, const char *tools,
    const char *want)
{
    kvs_buf_t  out;

    if (render_text(tpl, strlen(tpl), messages, tools, &out) != KVS_OK) {
        fail_msg("render failed: %s", err.msg);
    }

    if (out.len != strlen(want) || memcmp(out.data, want, out.len) != 0) {
        fail_msg("got [%.*s], want [%s]", (int) out.len,
                 (const char *) out.data, want);
    }

    kvs_buf_free(&out);
}


/* Each message's tool fields as the template sees them. */
#define FIELDS \
    "{% for m in messages %}[{{ m.role }}" \
    "{% if 'tool_calls' in m %} calls" \
    "{% for c in m.tool_calls %} {{ c.function.name }}=" \
    "{% if c.function.arguments is mapping %}map:" \
    "{{ c.function.arguments | tojson }}" \
    "{% else %}str:{{ c.function.arguments }}{% endif %}{% endfor %}" \
    "{% endif %}" \
    "{% if 'tool_call_id' in m %} id={{ m.tool_call_id }}{% endif %}" \
    "{% if 'name' in m %} name={{ m.name }}{% endif %}" \
    "|{{ m.content }}]{% endfor %}"

/* Llama 4: tools in the first user turn, JSON calls back to back (the
 * form its syntax, "llama4", generates), results in ipython turns. */
static void
test_llama4(void **state)
{
    char       *tpl;
    size_t      len;
    kvs_buf_t   out;

    tpl = fixture_template("llama-4.jinja", &len);
    if (tpl == NULL) {
        skip();
    }

    assert_int_equal(render_text(tpl, len, CONVO2, TOOLS, &out), KVS_OK);

    expect_in(&out, "<|header_start|>system<|header_end|>\n\nEnvironment: "
              "ipython\nUse tools.<|eot|>");
    expect_in(&out, "Respond in the format {\"name\": function name, "
              "\"parameters\": dictionary of argument name and its "
              "value}.Do not use variables.\n\n{\n    \"type\": "
              "\"function\",\n    \"function\": {\n        \"name\": "
              "\"get_weather\",");
    expect_in(&out, "}\n\nWeather in Paris and Oslo?<|eot|>");
    expect_in(&out, "<|header_start|>assistant<|header_end|>\n\n"
              "<|python_start|><|python_end|>{\"name\": \"get_weather\", "
              "\"parameters\": {\"city\": \"Paris\"}}{\"name\": "
              "\"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}"
              "<|eot|>");
    expect_in(&out, "<|header_start|>ipython<|header_end|>\n\n\"sunny, 21 "
              "C\"<|eot|><|header_start|>ipython<|header_end|>\n\n\"rain\""
              "<|eot|><|header_start|>assistant<|header_end|>\n\n");
    kvs_buf_free(&out);

    /* no tools: no tool section */
    assert_int_equal(render_text(tpl, len,
                                 "[{\"role\":\"user\",\"content\":\"x\"}]",
                                 NULL, &out), KVS_OK);
    expect_not_in(&out, "Environment: ipython");
    expect_in(&out, "<|header_start|>user<|header_end|>\n\nx<|eot|>");
    kvs_buf_free(&out);

    free(tpl);
}


/* Command R7B: the tools list in the system preamble, the calls as its
 * action list numbered across the chat (the template's namespace
 * counters), the results grouped by its loop with break. */
static void
test_commandr7b(void **state)
{
    char       *tpl;
    size_t      len;
    kvs_buf_t   out;

    tpl = fixture_template("command-r7b-12-2024-tool_use.jinja", &len);
    if (tpl == NULL) {
        skip();
    }

    assert_int_equal(render_text(tpl, len, CONVO2, TOOLS, &out), KVS_OK);

    expect_in(&out, "## Available Tools\n");
    expect_in(&out, "    {\"name\": \"get_weather\", \"description\": "
              "\"Get the weather in a city.\", \"parameters\": {\"type\": "
              "\"object\", \"properties\": {\"city\": {\"type\": "
              "\"string\", \"description\": \"The city\"}}, \"required\": "
              "[\"city\"]}, \"responses\": null}\n");
    expect_in(&out, "# Developer Preamble\nThe following instructions "
              "take precedence");
    expect_in(&out, "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
              "<|START_THINKING|><|END_THINKING|><|START_ACTION|>[\n"
              "    {\"tool_call_id\": \"0\", \"tool_name\": "
              "\"get_weather\", \"parameters\": {\"city\": \"Paris\"}},\n"
              "    {\"tool_call_id\": \"1\", \"tool_name\": "
              "\"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}\n"
              "]<|END_ACTION|><|END_OF_TURN_TOKEN|>");
    expect_in(&out, "<|START_TOOL_RESULT|>[\n    {\n        "
              "\"tool_call_id\": \"0\",\n        \"results\": {\n"
              "            \"0\": \"sunny, 21 C\"\n        },\n"
              "        \"is_error\": null\n    },\n    {\n"
              "        \"tool_call_id\": \"1\",");
    expect_in(&out, "\"0\": \"rain\"\n        },\n        \"is_error\": "
              "null\n    }\n]<|END_TOOL_RESULT|><|END_OF_TURN_TOKEN|>"
              "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
    kvs_buf_free(&out);

    /* no tools: no tool section, a text turn in its response tags */
    assert_int_equal(render_text(tpl, len,
                                 "[{\"role\":\"user\",\"content\":\"x\"},"
                                 "{\"role\":\"assistant\",\"content\":"
                                 "\"y\"},{\"role\":\"user\",\"content\":"
                                 "\"z\"}]", NULL, &out), KVS_OK);
    expect_not_in(&out, "## Available Tools");
    expect_in(&out, "<|CHATBOT_TOKEN|><|START_RESPONSE|>y<|END_RESPONSE|>"
              "<|END_OF_TURN_TOKEN|>");
    kvs_buf_free(&out);

    free(tpl);
}


/* Command R v01 tool_use: the tools as Python signatures (its recursive
 * type macro, items and indent filters), the calls after "Action:" as an
 * indented fenced list, the results in <results>. */
static void
test_commandr(void **state)
{
    char       *tpl;
    size_t      len;
    kvs_buf_t   out;

    tpl = fixture_template("command-r-v01-tool_use.jinja", &len);
    if (tpl == NULL) {
        skip();
    }

    assert_int_equal(render_text(tpl, len, CONVO2, TOOLS, &out), KVS_OK);

    expect_in(&out, "# User Preamble\nUse tools.\n\n## Available Tools\n");
    expect_in(&out, "```python\ndef get_weather(city: str) -> List[Dict]:\n"
              "    \"\"\"Get the weather in a city.\n\n    Args:\n        "
              "city (str): The city\n    \"\"\"\n    pass\n```"
              "<|END_OF_TURN_TOKEN|>");
    expect_in(&out, "<|CHATBOT_TOKEN|>\nAction:\n```json\n[\n    {\n"
              "        \"tool_name\": \"get_weather\",\n        "
              "\"parameters\": {\n            \"city\": \"Paris\"\n"
              "        }\n    },\n    {\n        \"tool_name\": "
              "\"get_weather\",");
    expect_in(&out, "<|SYSTEM_TOKEN|><results>\nsunny, 21 C</results>"
              "<|END_OF_TURN_TOKEN|>");
    expect_in(&out, "Write 'Action:' followed by a json-formatted list");
    kvs_buf_free(&out);

    /* an optional parameter and a typed array, through the type macro:
     * its recursive call for the items gives "Union[]" in jinja2 too
     * (checked against jinja2 3.1: the same text) */
    assert_int_equal(render_text(tpl, len,
                                 "[{\"role\":\"user\",\"content\":\"x\"}]",
                                 "[{\"type\":\"function\",\"function\":"
                                 "{\"name\":\"f\",\"description\":\"F.\","
                                 "\"parameters\":{\"type\":\"object\","
                                 "\"properties\":{\"a\":{\"type\":"
                                 "\"array\",\"items\":{\"type\":"
                                 "\"integer\"},\"description\":\"A\"},"
                                 "\"b\":{\"type\":\"boolean\","
                                 "\"description\":\"B\"}},\"required\":"
                                 "[\"a\"]}}}]", &out), KVS_OK);
    expect_in(&out, "def f(a: List[Union[]], b: Optional[bool] = None) -> "
              "List[Dict]:");
    expect_in(&out, "a (List[Union[]]): A\n        b (Optional[bool]): B\n");
    kvs_buf_free(&out);

    free(tpl);
}


/* MiniCPM3: the tools as Python signatures with pydantic fields (its
 * caller() macros), the calls as python lines with tojson values (the
 * form its syntax, "minicpm3", generates), results in tool turns. */
static void
test_minicpm3(void **state)
{
    char       *tpl;
    size_t      len;
    kvs_buf_t   out;

    tpl = fixture_template("minicpm3-4b.jinja", &len);
    if (tpl == NULL) {
        skip();
    }

    assert_int_equal(render_text(tpl, len, CONVO2, TOOLS, &out), KVS_OK);

    expect_in(&out, "<|im_start|>system\nUse tools.\n# Functions\n");
    expect_in(&out, "def get_weather(city):\n    \"\"\"Get the weather in "
              "a city.\n\n    Args:\n        city: str = Field(..., "
              "description=\"The city\")\n    \"\"\"\n");
    expect_in(&out, "<|im_start|>assistant\n<|tool_call_start|>\n```python\n"
              "get_weather(city=\"Paris\")\nget_weather(city=\"Oslo\")\n"
              "```\n<|tool_call_end|>\n<|im_end|>\n");
    expect_in(&out, "<|im_start|>tool\nsunny, 21 C<|im_end|>\n"
              "<|im_start|>tool\nrain<|im_end|>\n<|im_start|>assistant\n");
    kvs_buf_free(&out);

    free(tpl);
}


static void
test_context(void **state)
{
    char              *before, *after;
    json_t            *m;
    kvs_buf_t          out;
    kvs_chat_t         chat;
    kvs_chat_jinja_t  *cj;

    /* tools is none when absent, as apply_chat_template() passes it */
    expect_small("{{ tools is defined }} {{ tools is none }}",
                 "[{\"role\":\"user\",\"content\":\"x\"}]", NULL,
                 "True True");
    expect_small("{{ tools | length }} {{ tools[0].function.name }}",
                 "[{\"role\":\"user\",\"content\":\"x\"}]", TOOLS,
                 "1 get_weather");

    /* arguments: an object's text becomes the mapping, anything else
     * stays text; null tool fields are absent; content null is "" */
    expect_small(FIELDS,
                 "[{\"role\":\"user\",\"content\":\"q\",\"name\":null,"
                 "\"tool_calls\":null},"
                 "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":"
                 "[{\"id\":\"1\",\"type\":\"function\",\"function\":"
                 "{\"name\":\"a\",\"arguments\":\" {\\\"k\\\": [1, "
                 "\\\"\\\\u00e9\\\"]} \"}},"
                 "{\"id\":\"2\",\"function\":{\"name\":\"b\",\"arguments\":"
                 "\"{oops\"}},"
                 "{\"id\":\"3\",\"function\":{\"name\":\"c\",\"arguments\":"
                 "\"7\"}},"
                 "{\"id\":\"4\",\"function\":{\"name\":\"d\",\"arguments\":"
                 "{\"given\":true}}}]},"
                 "{\"role\":\"tool\",\"tool_call_id\":\"1\",\"name\":\"a\","
                 "\"content\":\"r\"}]", TOOLS,
                 "[user|q][assistant calls a=map:{\"k\": [1, \"\xc3\xa9\"]}"
                 " b=str:{oops c=str:7 d=map:{\"given\": true}|]"
                 "[tool id=1 name=a|r]");

    /* the client's tree is only read */
    m = load(CONVO);
    before = json_dumps(m, JSON_SORT_KEYS);
    assert_non_null(before);

    assert_int_equal(kvs_chat_jinja_compile(&cj, FIELDS, strlen(FIELDS),
                                            NULL, &err), KVS_OK);
    memset(&chat, 0, sizeof(chat));
    chat.jinja = cj;
    memset(&out, 0, sizeof(out));
    assert_int_equal(kvs_chat_render(&chat, m, &(kvs_chat_args_t) {
                                         .add_generation_prompt = 1 },
                                     &out, &err), KVS_OK);
    expect_in(&out, "get_weather=map:{\"city\": \"Paris\"}");

    after = json_dumps(m, JSON_SORT_KEYS);
    assert_non_null(after);
    assert_string_equal(before, after);

    kvs_chat_jinja_free(cj);
    kvs_buf_free(&out);
    free(before);
    free(after);
    json_decref(m);
}


static void
expect_refused(const char *messages, const char *tools, const char *want)
{
    kvs_buf_t  out;

    assert_int_equal(render_text("x", 1, messages, tools, &out),
                     KVS_EINVAL);
    if (strstr(err.msg, want) == NULL) {
        fail_msg("error \"%s\" lacks \"%s\"", err.msg, want);
    }

    assert_int_equal(out.len, 0);
    kvs_buf_free(&out);
}


static void
test_checks(void **state)
{
    expect_refused("[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":"
                 "[{\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]",
                 NULL, "messages[0].tool_calls: only an assistant message");
    expect_refused("[{\"role\":\"assistant\",\"tool_calls\":{}}]", NULL,
                 "messages[0].tool_calls: must be a non-empty array");
    expect_refused("[{\"role\":\"assistant\",\"tool_calls\":[]}]", NULL,
                 "messages[0].tool_calls: must be a non-empty array");
    expect_refused("[{\"role\":\"assistant\",\"tool_calls\":[7]}]", NULL,
                 "messages[0].tool_calls[0]: must be an object");
    expect_refused("[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":1}]}]",
                 NULL, "messages[0].tool_calls[0].id: must be a string");
    expect_refused("[{\"role\":\"assistant\",\"tool_calls\":[{}]}]", NULL,
                 "messages[0].tool_calls[0].function: missing");
    expect_refused("[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":"
                 "{\"arguments\":\"{}\"}}]}]", NULL,
                 "messages[0].tool_calls[0].function.name: missing");
    expect_refused("[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":"
                 "{\"name\":\"f\",\"arguments\":3}}]}]", NULL,
                 "messages[0].tool_calls[0].function.arguments: must be a "
                 "string");
    expect_refused("[{\"role\":\"tool\",\"content\":\"r\","
                   "\"tool_call_id\":5}]", NULL,
                   "messages[0].tool_call_id: must be a string");
    expect_refused("[{\"role\":\"tool\"}]", NULL, "messages[0].content: "
                 "missing");
    expect_refused("[{\"role\":\"function\",\"content\":\"r\"}]", NULL,
                 "messages[0].role: role 'function' (deprecated)");
    expect_refused("[{\"role\":\"user\",\"content\":\"x\"}]", "{}",
                 "tools: must be an array");
    expect_refused("[{\"role\":\"user\",\"content\":\"x\"}]", "[1]",
                 "tools[0]: must be an object");
}


/* A built-in family refuses tool calling, naming the field, and appends
 * nothing. */
static void
expect_family(const char *name, const char *messages, const char *tools,
    const char *want)
{
    json_t           *m, *t;
    kvs_buf_t         out;
    kvs_chat_t        chat;
    kvs_chat_args_t   args;

    assert_int_equal(kvs_chat_by_name(name, strlen(name), &chat, &err),
                     KVS_OK);

    m = load(messages);
    t = tools != NULL ? load(tools) : NULL;

    memset(&args, 0, sizeof(args));
    args.add_generation_prompt = 1;
    args.tools = t;

    memset(&out, 0, sizeof(out));
    assert_int_equal(kvs_buf_append(&out, "keep", 4), KVS_OK);

    assert_int_equal(kvs_chat_render(&chat, m, &args, &out, &err),
                     KVS_EUNSUPPORTED);
    if (strncmp(err.msg, want, strlen(want)) != 0
        || strstr(err.msg, "(Jinja)") == NULL)
    {
        fail_msg("%s: error \"%s\" does not start \"%s\" or name Jinja",
                 name, err.msg, want);
    }

    assert_int_equal(out.len, 4);

    kvs_buf_free(&out);
    json_decref(m);
    json_decref(t);
}


static void
test_families_refuse(void **state)
{
    size_t  i;

    static const char  *names[] = {
        "llama3", "llama3.1", "llama2", "chatml", "mistral", "zephyr",
        "phi3", "gemma"
    };

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        expect_family(names[i], "[{\"role\":\"user\",\"content\":\"x\"}]",
                      TOOLS, "tools: ");
        expect_family(names[i], CONVO, NULL, "messages[2].tool_calls: ");
        expect_family(names[i], "[{\"role\":\"user\",\"content\":\"x\"},"
                      "{\"role\":\"tool\",\"tool_call_id\":\"c\","
                      "\"content\":\"r\"}]", NULL, "messages[1].role: ");
    }
}


static void
expect_guard(const kvs_vocab_t *v, const char *messages, const char *tools,
    const char *want)
{
    int      rc;
    json_t  *m, *t;

    m = load(messages);
    t = tools != NULL ? load(tools) : NULL;

    rc = kvs_chat_jinja_guard(v, m, t, &err);

    if (want == NULL) {
        if (rc != KVS_OK) {
            fail_msg("refused: %s", err.msg);
        }

    } else {
        assert_int_equal(rc, KVS_EINVAL);
        if (strncmp(err.msg, want, strlen(want)) != 0) {
            fail_msg("error \"%s\" does not start \"%s\"", err.msg, want);
        }
    }

    json_decref(m);
    json_decref(t);
}


#define USER  "[{\"role\":\"user\",\"content\":\"x\"}]"

#define TOOL_WITH(desc, prop) \
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":" \
    "\"" desc "\",\"parameters\":{\"type\":\"object\",\"properties\":{" \
    "\"" prop "\":{\"type\":\"string\",\"enum\":[\"a\",\"b\"]}}}}}]"

#define CALL_WITH(args, id) \
    "[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\"," \
    "\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\"," \
    "\"function\":{\"name\":\"f\",\"arguments\":\"" args "\"}}]}," \
    "{\"role\":\"tool\",\"tool_call_id\":\"" id "\",\"content\":\"ok\"}]"

static void
test_guard(void **state)
{
    kvs_vocab_t  *v;
    const char   *path;

    path = kvs_test_fixture("vocab/ggml-vocab-phi-3.gguf");
    if (path == NULL) {
        skip();
    }

    assert_int_equal(kvs_vocab_open(&v, path, &err), KVS_OK);

    /* clean: nothing refused */
    expect_guard(v, CONVO, TOOLS, NULL);
    expect_guard(v, CALL_WITH("{\\\"q\\\": \\\"<|end plain\\\"}", "c1"),
                 TOOL_WITH("a <|end b", "city"), NULL);

    /* the tool definitions */
    expect_guard(v, USER, TOOL_WITH("stop<|end|>", "city"),
                 "tools[0].function.description: holds the control token "
                 "text '<|end|>'");
    expect_guard(v, USER, TOOL_WITH("fine", "<|assistant|>"),
                 "tools[0].function.parameters.properties: a key holds the "
                 "control token text '<|assistant|>'");
    expect_guard(v, USER,
                 "[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                 "\"parameters\":{\"type\":\"object\",\"properties\":{\"u\":"
                 "{\"type\":\"string\",\"enum\":[\"ok\",\"<|user|>\"]}}}}}]",
                 "tools[0].function.parameters.properties.u.enum[1]: holds");

    /* the calls: arguments as sent, and what they decode to */
    expect_guard(v, CALL_WITH("{\\\"q\\\": \\\"<|end|>\\\"}", "c1"), NULL,
                 "messages[1].tool_calls[0].function.arguments: holds the "
                 "control token text '<|end|>'");
    expect_guard(v, CALL_WITH("{\\\"q\\\": \\\"\\\\u003c|end|>\\\"}", "c1"),
                 NULL, "messages[1].tool_calls[0].function.arguments: holds "
                 "the control token text '<|end|>'");
    expect_guard(v, CALL_WITH("{\\\"\\\\u003c|system|>\\\": 1}", "c1"), NULL,
                 "messages[1].tool_calls[0].function.arguments: a key holds "
                 "the control token text '<|system|>'");

    /* the tool result's fields */
    expect_guard(v, CALL_WITH("{}", "<|end|>"), NULL,
                 "messages[2].tool_call_id: holds");
    expect_guard(v, "[{\"role\":\"tool\",\"tool_call_id\":\"c\","
                 "\"name\":\"<|assistant|>\",\"content\":\"r\"}]", NULL,
                 "messages[0].name: holds");
    expect_guard(v, "[{\"role\":\"tool\",\"tool_call_id\":\"c\","
                 "\"content\":[{\"type\":\"text\",\"text\":\"<|end|>\"}]}]",
                 NULL, "messages[0].content[0].text: holds");

    kvs_vocab_free(v);
}


/* 128 tools of 24 described properties each (some 380 KB as Llama 3.1
 * prints them, indented), over the base limits: the limits grow with
 * the tools, so they render. */
static void
test_many_tools(void **state)
{
    char       *tpl, *text, name[32], prop[32];
    size_t      len, i, k;
    json_t     *tools, *props, *fn;
    kvs_buf_t   out;

    tpl = fixture_template("llama-3.1-8b-instruct.jinja", &len);
    if (tpl == NULL) {
        skip();
    }

    tools = json_array();
    for (i = 0; i < 128; i++) {
        props = json_object();
        for (k = 0; k < 24; k++) {
            snprintf(prop, sizeof(prop), "p%zu", k);
            json_object_set_new(props, prop, json_pack("{s:s, s:s}", "type",
                "string", "description", "a property of this function, "
                "described at some length as real schemas are"));
        }

        snprintf(name, sizeof(name), "fn_%zu", i);
        fn = json_pack("{s:s, s:{s:s, s:s, s:{s:s, s:o}}}", "type",
                       "function", "function", "name", name, "description",
                       "does one thing well", "parameters", "type", "object",
                       "properties", props);
        assert_non_null(fn);
        json_array_append_new(tools, fn);
    }

    text = json_dumps(tools, 0);
    assert_non_null(text);

    assert_int_equal(render_text(tpl, len, CONVO, text, &out), KVS_OK);
    print_message("128 tools: %zu bytes of prompt\n", out.len);
    assert_true(out.len > 256 * 1024);
    expect_in(&out, "\"name\": \"fn_127\"");
    kvs_buf_free(&out);

    free(text);
    json_decref(tools);
    free(tpl);
}


static void
test_cache_offsets(void **state)
{
    char              *tpl;
    size_t             len, off[2];
    json_t            *m, *t;
    kvs_buf_t          out;
    kvs_chat_t         chat;
    kvs_chat_args_t    args;
    kvs_api_break_t    breaks[2];
    kvs_chat_jinja_t  *cj;
    const char        *end, *user, *res;

    tpl = fixture_template("qwen2.5-7b-instruct.jinja", &len);
    if (tpl == NULL) {
        skip();
    }

    assert_int_equal(kvs_chat_jinja_compile(&cj, tpl, len, NULL, &err),
                     KVS_OK);
    memset(&chat, 0, sizeof(chat));
    chat.jinja = cj;

    m = load(CONVO);
    t = load(TOOLS);

    memset(&args, 0, sizeof(args));
    args.add_generation_prompt = 1;
    args.tools = t;

    memset(&out, 0, sizeof(out));
    assert_int_equal(kvs_chat_render(&chat, m, &args, &out, &err), KVS_OK);

    end = memmem(out.data, out.len, "</tools>", 8);
    user = memmem(out.data, out.len, "Weather in Paris?", 17);
    res = memmem(out.data, out.len, "sunny, 21 C", 11);
    assert_true(end != NULL && user != NULL && res != NULL);

    memset(breaks, 0, sizeof(breaks));
    breaks[0].message = 1;
    breaks[0].part = -1;
    breaks[1].message = 3;
    breaks[1].part = -1;

    assert_int_equal(kvs_api_cache_offsets(&chat, m, &args,
                                           (const char *) out.data, out.len,
                                           breaks, 2, off, &err), KVS_OK);

    /* the cut renderings had the tools: they agree past the section */
    assert_true(off[0] >= (size_t) (user + 17 - (const char *) out.data));
    assert_true(off[0] > (size_t) (end - (const char *) out.data));
    assert_true(off[1] >= (size_t) (res + 11 - (const char *) out.data));
    assert_true(off[0] < off[1] && off[1] <= out.len);

    kvs_buf_free(&out);
    json_decref(m);
    json_decref(t);
    kvs_chat_jinja_free(cj);
    free(tpl);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_qwen25),
        cmocka_unit_test(test_llama31),
        cmocka_unit_test(test_llama4),
        cmocka_unit_test(test_commandr7b),
        cmocka_unit_test(test_commandr),
        cmocka_unit_test(test_minicpm3),
        cmocka_unit_test(test_context),
        cmocka_unit_test(test_checks),
        cmocka_unit_test(test_families_refuse),
        cmocka_unit_test(test_guard),
        cmocka_unit_test(test_many_tools),
        cmocka_unit_test(test_cache_offsets),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
