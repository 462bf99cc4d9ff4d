/*
 * test_tool_parse: generated text -> content and tool calls
 * (src/api/kvs_tool_parse.c) for each syntax: one call, parallel calls,
 * text before a call, nested arguments and strings holding the markers,
 * arguments as a string, and malformed or truncated output, which must
 * come back whole as content with no calls.  Also the streaming hold,
 * the JSON scanner, and the detection of each syntax from the real
 * templates of the fixture corpus (skipped when absent).
 *
 * Expected calls are written by hand from each family's documented
 * output format; arguments are compared as jansson's compact text.
 */

#include "kvs_test.h"

#include <dirent.h>

#include "api/kvs_tool_parse.h"

/* DeepSeek's delimiters (U+FF5C, U+2581 in UTF-8) */
#define DS_OPEN   "<｜tool▁calls▁begin｜>"
#define DS_CALL   "<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
#define DS_END    "<｜tool▁call▁end｜>"
#define DS_CLOSE  "<｜tool▁calls▁end｜>"


/* Parses s with syn: content must be want_content, and the calls the
 * name/arguments pairs in want[] (NULL-ended). */
static void
parses(kvs_tool_syntax_t syn, const char *s, const char *want_content,
    const char *const *want)
{
    size_t             i, n;
    kvs_err_t          err;
    kvs_tool_parsed_t  p;

    kvs_err_clear(&err);

    assert_int_equal(kvs_tool_parse(syn, s, strlen(s), &p, &err), KVS_OK);

    for (n = 0; want != NULL && want[n] != NULL; n += 2) {
        /* count */
    }

    if (p.n_calls != n / 2) {
        print_message("calls: %zu, want %zu, for: %s\n", p.n_calls, n / 2,
                      s);
    }

    assert_int_equal(p.n_calls, n / 2);
    assert_true(p.content_at <= p.content_len);
    assert_int_equal(p.content_len - p.content_at, strlen(want_content));
    assert_memory_equal(s + p.content_at, want_content,
                        p.content_len - p.content_at);

    for (i = 0; i < p.n_calls; i++) {
        assert_string_equal(p.calls[i].name, want[2 * i]);
        assert_string_equal(p.calls[i].arguments, want[2 * i + 1]);
        assert_int_equal(p.calls[i].arguments_len,
                         strlen(want[2 * i + 1]));
    }

    kvs_tool_parsed_free(&p);
}


/* s is not calls: all content. */
static void
text_only(kvs_tool_syntax_t syn, const char *s)
{
    parses(syn, s, s, NULL);
}


/* Every prefix of s (a truncated output) parses without a crash: either
 * all content, or calls after content that is a prefix of s. */
static void
prefixes(kvs_tool_syntax_t syn, const char *s)
{
    size_t             len, k;
    kvs_err_t          err;
    kvs_tool_parsed_t  p;

    len = strlen(s);

    for (k = 0; k < len; k++) {
        assert_int_equal(kvs_tool_parse(syn, s, k, &p, &err), KVS_OK);
        assert_true(p.content_len <= k);

        /* Command R7B's content may end before a closing tag */
        if (p.n_calls == 0 && syn != KVS_TOOL_SYN_COMMANDR7B) {
            assert_int_equal(p.content_len, k);
        }

        kvs_tool_parsed_free(&p);
    }
}


static void
test_hermes(void **state)
{
    kvs_tool_syntax_t  h = KVS_TOOL_SYN_HERMES;

    static const char *const  one[] = {
        "get_weather", "{\"city\":\"Paris\",\"unit\":\"c\"}", NULL
    };
    static const char *const  two[] = {
        "get_weather", "{\"city\":\"Paris\"}",
        "get_time", "{\"tz\":{\"name\":\"CET\",\"dst\":[true,null,1.5]}}",
        NULL
    };
    static const char *const  marker[] = {
        "echo", "{\"s\":\"</tool_call> and <tool_call> {]\\\"\"}", NULL
    };

    (void) state;

    parses(h, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
           "{\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>", "", one);
    parses(h, "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", "
           "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
           "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": "
           "{\"name\": \"CET\", \"dst\": [true, null, 1.5]}}}\n"
           "</tool_call>\n", "Let me check.", two);
    parses(h, "<tool_call>{\"name\":\"echo\",\"arguments\":{\"s\":"
           "\"</tool_call> and <tool_call> {]\\\"\"}}</tool_call>", "",
           marker);

    /* arguments as a string of JSON, and absent */
    static const char *const  str[] = { "f", "{\"a\":[1,2]}", NULL };
    static const char *const  none[] = { "f", "{}", NULL };

    parses(h, "<tool_call>{\"arguments\": \"{\\\"a\\\": [1, 2]}\", "
           "\"name\": \"f\"}</tool_call>", "", str);
    parses(h, "<tool_call>{\"name\": \"f\"}</tool_call>", "", none);

    /* malformed: bad JSON, no name, empty name, unknown key, arguments
     * not an object, text after, unclosed, truncated, a bad string */
    text_only(h, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": }}"
              "</tool_call>");
    text_only(h, "<tool_call>{\"arguments\": {}}</tool_call>");
    text_only(h, "<tool_call>{\"name\": \"\"}</tool_call>");
    text_only(h, "<tool_call>{\"name\": 7}</tool_call>");
    text_only(h, "<tool_call>{\"name\": \"f\", \"x\": 1}</tool_call>");
    text_only(h, "<tool_call>{\"name\": \"f\", \"arguments\": [1]}"
              "</tool_call>");
    text_only(h, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\"}"
              "</tool_call>");
    text_only(h, "<tool_call>{\"name\": \"f\"}</tool_call> and more");
    text_only(h, "<tool_call>{\"name\": \"f\"}");
    text_only(h, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"x");
    text_only(h, "<tool_call>{\"name\": \"f\"]</tool_call>");
    text_only(h, "<tool_call></tool_call>");
    text_only(h, "<tool_call>[{\"name\": \"f\"}]</tool_call> x");
    text_only(h, "I would use <tool_call> tags, but no.");
    text_only(h, "Plain answer, no calls.");
    text_only(h, "");

    prefixes(h, "Hi <tool_call>\n{\"name\": \"a\", \"arguments\": "
             "{\"s\": \"\\\"}\"}}\n</tool_call><tool_call>{\"name\": "
             "\"b\"}</tool_call>");
}


static void
test_llama3(void **state)
{
    kvs_tool_syntax_t  l = KVS_TOOL_SYN_LLAMA3;

    static const char *const  one[] = {
        "get_weather", "{\"city\":\"Paris\"}", NULL
    };
    static const char *const  two[] = {
        "a", "{\"x\":{\"y\":[\"}\"]}}", "b", "{}", NULL
    };

    (void) state;

    parses(l, "{\"name\": \"get_weather\", \"parameters\": "
           "{\"city\": \"Paris\"}}", "", one);
    parses(l, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": "
           "{\"city\": \"Paris\"}}", "", one);
    parses(l, "  {\"name\": \"a\", \"parameters\": {\"x\": {\"y\": "
           "[\"}\"]}}}; {\"name\": \"b\", \"parameters\": {}};", "", two);

    /* a JSON answer that is not a call stays the answer */
    text_only(l, "{\"city\": \"Paris\"}");
    text_only(l, "The weather: {\"name\": \"a\", \"parameters\": {}}");
    text_only(l, "{\"name\": \"a\", \"parameters\": {}} is what I'd call");
    text_only(l, "<|python_tag|>print(1)");
    text_only(l, "{\"name\": \"a\", \"parameters\": {\"x\": 1");
    text_only(l, "{\"name\": \"a\", \"parameters\": {}}, {\"name\": \"b\"}");

    prefixes(l, "<|python_tag|>{\"name\": \"a\", \"parameters\": "
             "{\"x\": \"{\"}}; {\"name\": \"b\", \"parameters\": {}}");
}


static void
test_mistral(void **state)
{
    kvs_tool_syntax_t  m = KVS_TOOL_SYN_MISTRAL;

    static const char *const  two[] = {
        "get_weather", "{\"city\":\"Paris\"}",
        "get_time", "{\"s\":\"[TOOL_CALLS]\"}", NULL
    };

    (void) state;

    parses(m, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": "
           "{\"city\": \"Paris\"}, \"id\": \"abcdefghi\"}, {\"name\": "
           "\"get_time\", \"arguments\": {\"s\": \"[TOOL_CALLS]\"}}]", "",
           two);
    parses(m, "Sure. [TOOL_CALLS][{\"name\": \"get_weather\", "
           "\"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", "
           "\"arguments\": {\"s\": \"[TOOL_CALLS]\"}}]", "Sure.", two);

    text_only(m, "[TOOL_CALLS] {\"name\": \"f\"}");     /* not a list */
    text_only(m, "[TOOL_CALLS] []");
    text_only(m, "[TOOL_CALLS] [{\"name\": \"f\"}] [TOOL_CALLS] []");
    text_only(m, "[TOOL_CALLS] [{\"name\": \"f\"}, 3]");
    text_only(m, "[TOOL_CALLS] [{\"name\": \"f\"");

    prefixes(m, "ok [TOOL_CALLS] [{\"name\": \"a\", \"arguments\": "
             "{\"q\": [1, {\"r\": \"]\"}]}}, {\"name\": \"b\"}]");
}


static void
test_others(void **state)
{
    static const char *const  one[] = {
        "search", "{\"q\":\"cats\"}", NULL
    };
    static const char *const  two[] = {
        "search", "{\"q\":\"cats\"}", "open", "{\"url\":\"</function>\"}",
        NULL
    };

    (void) state;

    parses(KVS_TOOL_SYN_GRANITE, "<|tool_call|>[{\"name\": \"search\", "
           "\"arguments\": {\"q\": \"cats\"}}]", "", one);
    text_only(KVS_TOOL_SYN_GRANITE, "<|tool_call|>{\"name\": \"search\"}");

    parses(KVS_TOOL_SYN_FIREFUNC, " functools[{\"name\": \"search\", "
           "\"arguments\": {\"q\": \"cats\"}}]", "", one);
    text_only(KVS_TOOL_SYN_FIREFUNC, "functools[{\"name\": \"search\"},");

    parses(KVS_TOOL_SYN_FUNCTIONARY, "Looking.\n<function=search>"
           "{\"q\": \"cats\"}</function>\n<function=open>{\"url\": "
           "\"</function>\"}</function>", "Looking.", two);
    text_only(KVS_TOOL_SYN_FUNCTIONARY, "<function=>{}</function>");
    text_only(KVS_TOOL_SYN_FUNCTIONARY, "<function=a>[1]</function>");
    text_only(KVS_TOOL_SYN_FUNCTIONARY, "<function=a>{}");
    text_only(KVS_TOOL_SYN_FUNCTIONARY, "<function=a\"b>{}</function>");

    /* no syntax: everything is text */
    text_only(KVS_TOOL_SYN_NONE, "<tool_call>{\"name\": \"f\"}</tool_call>");

    prefixes(KVS_TOOL_SYN_FUNCTIONARY, "<function=search>{\"q\": "
             "\"cats\"}</function><function=open>{}</function>");
    prefixes(KVS_TOOL_SYN_GRANITE, "<|tool_call|>[{\"name\": \"search\", "
             "\"arguments\": {\"q\": \"cats\"}}]");
}


/* DeepSeek's blocks, as its templates write them and with the fence left
 * out; anything off the layout is text. */
static void
test_deepseek(void **state)
{
    kvs_tool_syntax_t         d = KVS_TOOL_SYN_DEEPSEEK;
    static const char *const  one[] = {
        "get_weather", "{\"city\":\"Oslo\"}", NULL
    };
    static const char *const  two[] = {
        "search", "{\"q\":\"```\"}", "open",
        "{\"url\":\"<｜tool▁call▁end｜>\"}", NULL
    };

    (void) state;

    parses(d, DS_OPEN DS_CALL "get_weather\n```json\n{\"city\": \"Oslo\"}"
           "\n```" DS_END DS_CLOSE, "", one);
    parses(d, "Let me check.\n\n" DS_OPEN DS_CALL "search\n```json\n"
           "{\"q\": \"```\"}\n```" DS_END "\n" DS_CALL "open\n```json\n"
           "{\"url\": \"<｜tool▁call▁end｜>\"}\n```" DS_END DS_CLOSE "\n",
           "Let me check.", two);
    /* no fence, or a bare one */
    parses(d, DS_OPEN DS_CALL "get_weather\n{\"city\": \"Oslo\"}"
           DS_END DS_CLOSE, "", one);
    parses(d, DS_OPEN DS_CALL "get_weather\n```\n{\"city\": \"Oslo\"}"
           "\n```" DS_END DS_CLOSE, "", one);

    /* malformed: arguments as a string (the templates write the JSON
     * text itself), no calls' end, no call end, a name with a space or
     * empty, another type, text after the end, arguments not an
     * object, an unclosed fence, text between calls, truncated */
    text_only(d, DS_OPEN DS_CALL "f\n```json\n\"{}\"\n```" DS_END DS_CLOSE);
    text_only(d, DS_OPEN DS_CALL "f\n```json\n{}\n```" DS_END);
    text_only(d, DS_OPEN DS_CALL "f\n```json\n{}\n```" DS_CLOSE);
    text_only(d, DS_OPEN DS_CALL "my f\n```json\n{}\n```" DS_END DS_CLOSE);
    text_only(d, DS_OPEN DS_CALL "\n```json\n{}\n```" DS_END DS_CLOSE);
    text_only(d, DS_OPEN "<｜tool▁call▁begin｜>code<｜tool▁sep｜>f\n"
              "```json\n{}\n```" DS_END DS_CLOSE);
    text_only(d, DS_OPEN DS_CALL "f\n```json\n{}\n```" DS_END DS_CLOSE
              " and more");
    text_only(d, DS_OPEN DS_CALL "f\n```json\n[1]\n```" DS_END DS_CLOSE);
    text_only(d, DS_OPEN DS_CALL "f\n```json\n{}\n" DS_END DS_CLOSE);
    text_only(d, DS_OPEN DS_CALL "f\n```json\n{}\n```" DS_END " so "
              DS_CALL "g\n{}" DS_END DS_CLOSE);
    text_only(d, DS_OPEN DS_CALL "f");
    text_only(d, DS_OPEN);

    prefixes(d, DS_OPEN DS_CALL "search\n```json\n{\"q\": \"a\"}\n```"
             DS_END "\n" DS_CALL "open\n```json\n{}\n```" DS_END DS_CLOSE);
}


/* Functionary v3.2: the output after the prompt's ">>>" */
static void
test_functionary32(void **state)
{
    kvs_tool_syntax_t         f = KVS_TOOL_SYN_FUNCTIONARY32;
    static const char *const  one[] = {
        "get_weather", "{\"city\":\">>>Oslo\"}", NULL
    };
    static const char *const  two[] = {
        "search", "{\"q\":\"cats\"}", "open", "{}", NULL
    };

    (void) state;

    parses(f, "get_weather\n{\"city\": \">>>Oslo\"}", "", one);
    parses(f, "search\n{\"q\": \"cats\"}>>>open\n{}\n", "", two);
    parses(f, "all\nLet me look.\n>>>search\n{\"q\": \"cats\"}>>>open\n{}",
           "Let me look.", two);
    parses(f, "all\n>>>get_weather\n{\"city\": \">>>Oslo\"}", "", one);

    /* text: "all\n" is the recipient, not content */
    parses(f, "all\nHello there.", "Hello there.", NULL);
    parses(f, "all\n", "", NULL);

    /* malformed: all content (less "all\n"); no recipient line */
    parses(f, "all\nok >>>f\n[1]", "ok >>>f\n[1]", NULL);
    parses(f, "all\nok >>>all\nmore", "ok >>>all\nmore", NULL);
    text_only(f, "Hello there.");
    text_only(f, "get_weather {}");
    text_only(f, "get weather\n{}");
    text_only(f, "f\n{}>>>");
    text_only(f, "f\n{} and text");
    text_only(f, "f\n{\"a\": ");
    text_only(f, "all");

    prefixes(f, "all\nok>>>search\n{\"q\": \"cats\"}>>>open\n{}");
    prefixes(f, "search\n{\"q\": \"cats\"}>>>open\n{}");
}


/* Llama 4: its template's JSON calls, back to back */
static void
test_llama4(void **state)
{
    kvs_tool_syntax_t         l = KVS_TOOL_SYN_LLAMA4;
    static const char *const  one[] = {
        "get_weather", "{\"city\":\"Paris\"}", NULL
    };
    static const char *const  two[] = {
        "get_weather", "{\"city\":\"Paris\"}", "get_time", "{}", NULL
    };

    (void) state;

    parses(l, "{\"name\": \"get_weather\", \"parameters\": {\"city\": "
           "\"Paris\"}}", "", one);
    parses(l, "  {\"name\": \"get_weather\", \"parameters\": {\"city\": "
           "\"Paris\"}}{\"name\": \"get_time\", \"parameters\": {}}\n",
           "", two);
    parses(l, "{\"name\": \"get_weather\", \"parameters\": {\"city\": "
           "\"Paris\"}}\n{\"name\": \"get_time\"}", "", two);
    parses(l, "{\"name\": \"get_weather\", \"parameters\": {\"city\": "
           "\"Paris\"}}; {\"name\": \"get_time\"}", "", two);

    /* text, and malformed calls: all content */
    text_only(l, "The weather is fine.");
    text_only(l, "{\"name\": \"f\", \"parameters\": {}} and more");
    text_only(l, "{\"name\": \"f\", \"parameters\": []}");
    text_only(l, "{\"name\": \"f\", \"parameters\": {}}{\"nam");
    text_only(l, "[get_weather(city='Paris')]");
    text_only(l, "{\"tool_name\": \"f\", \"parameters\": {}}");

    prefixes(l, "{\"name\": \"get_weather\", \"parameters\": {\"city\": "
             "\"Paris\"}}{\"name\": \"get_time\", \"parameters\": {}}");
}


/* Command R v01: "Action:" and a fenced JSON list */
static void
test_commandr(void **state)
{
    kvs_tool_syntax_t         c = KVS_TOOL_SYN_COMMANDR;
    static const char *const  one[] = {
        "internet_search", "{\"query\":\"Action: ```\"}", NULL
    };
    static const char *const  two[] = {
        "internet_search", "{\"query\":\"cats\"}", "directly-answer",
        "{}", NULL
    };

    (void) state;

    /* the layout the template writes into its history */
    parses(c, "Action:\n```json\n[\n    {\n        \"tool_name\": "
           "\"internet_search\",\n        \"parameters\": {\n    "
           "        \"query\": \"Action: ```\"\n        }\n    }\n]```\n",
           "", one);
    parses(c, "I will search.\nAction: ```json\n[{\"tool_name\": "
           "\"internet_search\", \"parameters\": {\"query\": \"cats\"}}, "
           "{\"tool_name\": \"directly-answer\", \"parameters\": {}}]\n```",
           "I will search.", two);
    /* unfenced */
    parses(c, "Action: [{\"tool_name\": \"internet_search\", "
           "\"parameters\": {\"query\": \"cats\"}}, {\"tool_name\": "
           "\"directly-answer\"}]", "", two);

    /* malformed: all content */
    text_only(c, "Plain answer, no action.");
    text_only(c, "Action:\n```json\n[{\"name\": \"f\", \"parameters\": "
              "{}}]\n```");
    text_only(c, "Action:\n```json\n[{\"tool_name\": \"f\", "
              "\"parameters\": {}}]\n");
    text_only(c, "Action:\n```json\n[]\n```");
    text_only(c, "Action:\n```json\n{\"tool_name\": \"f\"}\n```");
    text_only(c, "Action: [{\"tool_name\": \"f\"}] then more");
    text_only(c, "Action: [{\"tool_name\": \"f\", \"arguments\": {}, "
              "\"parameters\": {}}]");

    prefixes(c, "Ok.\nAction:\n```json\n[{\"tool_name\": \"internet_search\""
             ", \"parameters\": {\"query\": \"cats\"}}]\n```");
}


#define R7_ACT  "<|START_ACTION|>"
#define R7_END  "<|END_ACTION|>"


/* Command R7B: a plan, then <|START_ACTION|>[...]<|END_ACTION|>; or an
 * answer in its response tags */
static void
test_commandr7b(void **state)
{
    kvs_tool_syntax_t         c = KVS_TOOL_SYN_COMMANDR7B;
    static const char *const  one[] = {
        "get_weather", "{\"city\":\"<|END_ACTION|>\"}", NULL
    };
    static const char *const  two[] = {
        "get_weather", "{\"city\":\"Paris\"}", "get_time", "{}", NULL
    };

    (void) state;

    parses(c, R7_ACT "[{\"tool_call_id\": \"0\", \"tool_name\": "
           "\"get_weather\", \"parameters\": {\"city\": "
           "\"<|END_ACTION|>\"}}]" R7_END, "", one);
    parses(c, "<|START_THINKING|>I will look up both.<|END_THINKING|>"
           R7_ACT "[\n    {\"tool_call_id\": \"0\", \"tool_name\": "
           "\"get_weather\", \"parameters\": {\"city\": \"Paris\"}},\n"
           "    {\"tool_call_id\": \"1\", \"tool_name\": \"get_time\", "
           "\"parameters\": {}}\n]" R7_END, "I will look up both.", two);
    parses(c, "Plan: both. " R7_ACT "[{\"tool_name\": \"get_weather\", "
           "\"parameters\": {\"city\": \"Paris\"}}, {\"tool_name\": "
           "\"get_time\"}]" R7_END "\n", "Plan: both.", two);

    /* text: the response tags are not content */
    parses(c, "<|START_RESPONSE|>Hello there.<|END_RESPONSE|>",
           "Hello there.", NULL);
    parses(c, "<|START_RESPONSE|>Hello", "Hello", NULL);
    parses(c, "Hello there.<|END_RESPONSE|>\n", "Hello there.", NULL);
    parses(c, "<|START_RESPONSE|>a<|END_RESPONSE|> b",
           "a<|END_RESPONSE|> b", NULL);

    /* malformed: all content (less the opening tag) */
    text_only(c, "Hello there.");
    parses(c, "<|START_THINKING|>x<|END_THINKING|>" R7_ACT "[{\"tool_name\":"
           " \"f\"}]", "x<|END_THINKING|>" R7_ACT "[{\"tool_name\": \"f\"}]",
           NULL);
    text_only(c, R7_ACT "[{\"tool_name\": \"f\"}]" R7_END " more");
    text_only(c, R7_ACT "[{\"name\": \"f\"}]" R7_END);
    text_only(c, R7_ACT "{\"tool_name\": \"f\"}" R7_END);
    text_only(c, R7_ACT "[{\"tool_name\": \"f\", \"parameters\": 1}]"
              R7_END);
    text_only(c, R7_ACT "[{\"tool_name\": \"f\", \"parameters\": {}]"
              R7_END);

    prefixes(c, "<|START_THINKING|>p<|END_THINKING|>" R7_ACT "[{"
             "\"tool_call_id\": \"0\", \"tool_name\": \"get_time\", "
             "\"parameters\": {}}]" R7_END);
}


#define MC_S  "<|tool_call_start|>\n```python\n"
#define MC_E  "\n```\n<|tool_call_end|>"


/* MiniCPM3: python calls with JSON values for keyword arguments */
static void
test_minicpm3(void **state)
{
    kvs_tool_syntax_t         c = KVS_TOOL_SYN_MINICPM3;
    static const char *const  one[] = {
        "get_weather", "{\"city\":\"a)b\\\",c=\",\"n\":[1,{\"x\":null}]}",
        NULL
    };
    static const char *const  two[] = {
        "get_weather", "{\"city\":\"Paris\"}", "ping", "{}", NULL
    };

    (void) state;

    parses(c, MC_S "get_weather(city=\"a)b\\\",c=\",n=[1, {\"x\": null}])"
           MC_E, "", one);
    parses(c, "<|thought_start|>\nBoth.\n<|thought_end|>\n" MC_S
           "get_weather(city=\"Paris\")\nping()" MC_E "\n",
           "<|thought_start|>\nBoth.\n<|thought_end|>", two);
    /* unfenced, spaces around "=" (a trailing "," is malformed) */
    text_only(c, "<|tool_call_start|>get_weather( city = \"Paris\" , )\n"
              "ping( )<|tool_call_end|>");
    parses(c, "<|tool_call_start|>get_weather( city = \"Paris\" )\n"
           "ping( )<|tool_call_end|>", "", two);

    /* malformed: all content */
    text_only(c, "It is sunny.");
    text_only(c, MC_S "get_weather(city=\"Paris\")" MC_E " and more");
    text_only(c, MC_S "get_weather(city=\"Paris\", city=\"Oslo\")" MC_E);
    text_only(c, MC_S "get_weather(\"Paris\")" MC_E);
    text_only(c, MC_S "get_weather(city='Paris')" MC_E);
    text_only(c, MC_S "get_weather(city=True)" MC_E);
    text_only(c, MC_S "get weather(city=1)" MC_E);
    text_only(c, MC_S "get_weather(city=1" MC_E);
    text_only(c, MC_S "get_weather(city=1)\n```\n");
    text_only(c, MC_S "()" MC_E);

    prefixes(c, "ok " MC_S "get_weather(city=\"Paris\",n=[1])\nping()" MC_E);
}


static void
test_bad_syntax(void **state)
{
    kvs_err_t          err;
    kvs_tool_parsed_t  p;

    (void) state;

    kvs_err_clear(&err);
    assert_int_equal(kvs_tool_parse(KVS_TOOL_SYN_N, "x", 1, &p, &err),
                     KVS_EINVAL);
    assert_int_equal(p.n_calls, 0);
    assert_string_equal(kvs_tool_syntax_name(KVS_TOOL_SYN_N), "?");
    assert_string_equal(kvs_tool_syntax_name(KVS_TOOL_SYN_MISTRAL),
                        "mistral");
}


static void
test_json_end(void **state)
{
    size_t  end;

    (void) state;

    end = 0;
    assert_int_equal(kvs_tool_json_end("{\"a\": \"}\"} x", 12, &end),
                     KVS_OK);
    assert_int_equal(end, 10);
    assert_int_equal(kvs_tool_json_end("[1, [2]]]", 9, &end), KVS_OK);
    assert_int_equal(end, 8);
    assert_int_equal(kvs_tool_json_end("\"a\\\"b\" ", 7, &end), KVS_OK);
    assert_int_equal(end, 6);
    assert_int_equal(kvs_tool_json_end("12,", 3, &end), KVS_OK);
    assert_int_equal(end, 2);
    assert_int_equal(kvs_tool_json_end("{\"a\": [}", 8, &end), KVS_EFORMAT);
    assert_int_equal(kvs_tool_json_end("{\"a\": [1]", 9, &end),
                     KVS_ETOOLONG);
    assert_int_equal(kvs_tool_json_end("\"ab\\", 4, &end), KVS_ETOOLONG);
    assert_int_equal(kvs_tool_json_end("", 0, &end), KVS_ETOOLONG);
    assert_int_equal(kvs_tool_json_end("}", 1, &end), KVS_EFORMAT);
}


/* Deeper than the scanner's bound: refused, not a stack overflow. */
static void
test_deep(void **state)
{
    char               *s;
    size_t              i, n;
    kvs_err_t           err;
    kvs_tool_parsed_t   p;

    (void) state;

    n = 100000;
    s = malloc(n + 32);
    assert_non_null(s);

    memcpy(s, "<tool_call>", 11);
    for (i = 0; i < n; i++) {
        s[11 + i] = '[';
    }

    assert_int_equal(kvs_tool_parse(KVS_TOOL_SYN_HERMES, s, n + 11, &p, &err),
                     KVS_OK);
    assert_int_equal(p.n_calls, 0);
    assert_int_equal(p.content_len, n + 11);

    free(s);
}


static void
hold(kvs_tool_syntax_t syn, const char *s, size_t want)
{
    assert_int_equal(kvs_tool_parse_hold(syn, s, strlen(s)), want);
}


static void
test_hold(void **state)
{
    (void) state;

    hold(KVS_TOOL_SYN_HERMES, "Hello", 5);
    hold(KVS_TOOL_SYN_HERMES, "Hello <tool", 6);
    hold(KVS_TOOL_SYN_HERMES, "Hello <", 6);
    hold(KVS_TOOL_SYN_HERMES, "Hello <b>", 9);
    hold(KVS_TOOL_SYN_HERMES, "Hi <tool_call>{\"na", 3);
    hold(KVS_TOOL_SYN_MISTRAL, "ok [TOOL_C", 3);
    hold(KVS_TOOL_SYN_LLAMA3, "  {\"name", 0);
    hold(KVS_TOOL_SYN_LLAMA3, "", 0);
    hold(KVS_TOOL_SYN_LLAMA3, "The answer", 10);
    hold(KVS_TOOL_SYN_NONE, "<tool_call>", 11);
    hold(KVS_TOOL_SYN_FUNCTIONARY, "x <function", 2);
    hold(KVS_TOOL_SYN_FUNCTIONARY32, "al", 0);
    hold(KVS_TOOL_SYN_FUNCTIONARY32, "get_weather\n{", 0);
    hold(KVS_TOOL_SYN_FUNCTIONARY32, "all\nHi >", 7);
    hold(KVS_TOOL_SYN_FUNCTIONARY32, "all\nHi >>>f", 7);
    hold(KVS_TOOL_SYN_FUNCTIONARY32, "all\nHi > there", 14);
    assert_int_equal(kvs_tool_parse_skip(KVS_TOOL_SYN_FUNCTIONARY32,
                                         "all\nHi", 6), 4);
    assert_int_equal(kvs_tool_parse_skip(KVS_TOOL_SYN_FUNCTIONARY32,
                                         "all", 3), 0);
    assert_int_equal(kvs_tool_parse_skip(KVS_TOOL_SYN_HERMES, "all\nHi",
                                         6), 0);
    hold(KVS_TOOL_SYN_DEEPSEEK, "ok <｜tool▁calls", 3);
    hold(KVS_TOOL_SYN_DEEPSEEK, "ok " DS_OPEN DS_CALL, 3);
    hold(KVS_TOOL_SYN_DEEPSEEK, "ok <｜tool▁call▁begin｜>", 30);
    hold(KVS_TOOL_SYN_LLAMA4, " {\"name", 0);
    hold(KVS_TOOL_SYN_LLAMA4, "Sunny", 5);
    hold(KVS_TOOL_SYN_COMMANDR, "Ok. Acti", 4);
    hold(KVS_TOOL_SYN_COMMANDR, "Ok. Action:\n", 4);
    hold(KVS_TOOL_SYN_COMMANDR, "Ok. Actually", 12);
    hold(KVS_TOOL_SYN_COMMANDR7B, "<|START_RE", 0);
    hold(KVS_TOOL_SYN_COMMANDR7B, "<|START_RESPONSE|>Hi", 20);
    hold(KVS_TOOL_SYN_COMMANDR7B, "<|START_RESPONSE|>Hi<|END_RES", 20);
    hold(KVS_TOOL_SYN_COMMANDR7B, "<|START_RESPONSE|>Hi<|END_RESPONSE|>",
         20);
    hold(KVS_TOOL_SYN_COMMANDR7B, "plan <|START_ACT", 5);
    assert_int_equal(kvs_tool_parse_skip(KVS_TOOL_SYN_COMMANDR7B,
                                         "<|START_RESPONSE|>Hi", 20), 18);
    assert_int_equal(kvs_tool_parse_skip(KVS_TOOL_SYN_COMMANDR7B,
                                         "<|START_THINKING|>", 18), 18);
    assert_int_equal(kvs_tool_parse_skip(KVS_TOOL_SYN_COMMANDR7B,
                                         "<|START_RESP", 12), 0);

    /* text whatever it holds: only a recipient line not yet whole waits */
    assert_int_equal(kvs_tool_parse_hold_text(KVS_TOOL_SYN_FUNCTIONARY32,
                                              "al", 2), 0);
    assert_int_equal(kvs_tool_parse_hold_text(KVS_TOOL_SYN_FUNCTIONARY32,
                                              "all\nHi >>>", 10), 10);
    assert_int_equal(kvs_tool_parse_hold_text(KVS_TOOL_SYN_FUNCTIONARY32,
                                              "alt", 3), 3);
    assert_int_equal(kvs_tool_parse_hold_text(KVS_TOOL_SYN_COMMANDR7B,
                                              "<|START_R", 9), 0);
    assert_int_equal(kvs_tool_parse_hold_text(KVS_TOOL_SYN_HERMES,
                                              "<tool_c", 7), 7);
}


/* Every template of the corpus, and the syntax it teaches (NONE: none
 * we parse); a template the table lacks fails, so that a new one is
 * looked at. */
static void
test_detect(void **state)
{
    size_t       i, len = 0;
    uint8_t     *t;
    const char  *path;
    char         rel[128];

    static const struct {
        const char         *file;
        kvs_tool_syntax_t   syn;
    } cases[] = {
        { "chatglm3-6b", KVS_TOOL_SYN_NONE },
        { "command-r-v01-rag", KVS_TOOL_SYN_NONE },
        { "command-r-v01-tool_use", KVS_TOOL_SYN_COMMANDR },
        { "command-r-v01", KVS_TOOL_SYN_NONE },
        { "command-r7b-12-2024-tool_use", KVS_TOOL_SYN_COMMANDR7B },
        { "dbrx-instruct", KVS_TOOL_SYN_NONE },
        { "deepseek-r1-distill-llama-8b", KVS_TOOL_SYN_DEEPSEEK },
        { "deepseek-r1", KVS_TOOL_SYN_DEEPSEEK },
        { "deepseek-v2-lite-chat", KVS_TOOL_SYN_NONE },
        { "deepseek-v2.5", KVS_TOOL_SYN_DEEPSEEK },
        { "deepseek-v3", KVS_TOOL_SYN_DEEPSEEK },
        { "exaone-3.5-2.4b-instruct", KVS_TOOL_SYN_NONE },
        { "falcon3-3b-instruct", KVS_TOOL_SYN_HERMES },
        { "firefunction-v2", KVS_TOOL_SYN_FIREFUNC },
        { "functionary-medium-v3.1", KVS_TOOL_SYN_FUNCTIONARY },
        { "functionary-medium-v3.2", KVS_TOOL_SYN_FUNCTIONARY32 },
        { "gemma-2-2b-it", KVS_TOOL_SYN_NONE },
        { "gemma-3-1b-it", KVS_TOOL_SYN_NONE },
        { "glm-4-9b-chat", KVS_TOOL_SYN_NONE },
        { "granite-3.0-1b-a400m-instruct", KVS_TOOL_SYN_GRANITE },
        { "granite-3.1-3b-a800m-instruct", KVS_TOOL_SYN_GRANITE },
        { "granite-3.2-2b-instruct", KVS_TOOL_SYN_GRANITE },
        { "granite-3.3-2b-instruct", KVS_TOOL_SYN_GRANITE },
        { "hermes-2-pro-llama-3-8b-tool_use", KVS_TOOL_SYN_HERMES },
        { "hermes-3-llama-3.1-8b-tool_use", KVS_TOOL_SYN_HERMES },
        { "internlm2-chat-7b", KVS_TOOL_SYN_NONE },
        { "llama-2-7b-chat", KVS_TOOL_SYN_NONE },
        { "llama-3-8b-instruct", KVS_TOOL_SYN_NONE },
        { "llama-3.1-8b-instruct", KVS_TOOL_SYN_LLAMA3 },
        { "llama-3.2-3b-instruct", KVS_TOOL_SYN_LLAMA3 },
        { "llama-3.3-70b-instruct", KVS_TOOL_SYN_LLAMA3 },
        { "llama-4-ollama-gguf", KVS_TOOL_SYN_LLAMA4 },
        { "llama-4", KVS_TOOL_SYN_LLAMA4 },
        { "minicpm3-4b", KVS_TOOL_SYN_MINICPM3 },
        { "mistral-7b-instruct-v0.1", KVS_TOOL_SYN_NONE },
        { "mistral-7b-instruct-v0.3", KVS_TOOL_SYN_MISTRAL },
        { "mistral-nemo-instruct-2407", KVS_TOOL_SYN_MISTRAL },
        { "mistral-small-24b-instruct-2501", KVS_TOOL_SYN_NONE },
        { "mistral-small-3.1-24b-instruct-2503", KVS_TOOL_SYN_NONE },
        { "mixtral-8x7b-instruct-v0.1", KVS_TOOL_SYN_NONE },
        { "openchat-3.5-0106", KVS_TOOL_SYN_NONE },
        { "phi-3-medium-128k-instruct", KVS_TOOL_SYN_NONE },
        { "phi-3-mini-4k-instruct", KVS_TOOL_SYN_NONE },
        { "phi-3.5-mini-instruct", KVS_TOOL_SYN_NONE },
        { "phi-4-mini-instruct", KVS_TOOL_SYN_NONE },
        { "phi-4", KVS_TOOL_SYN_NONE },
        { "qwen2-7b-instruct", KVS_TOOL_SYN_NONE },
        { "qwen2.5-7b-instruct", KVS_TOOL_SYN_HERMES },
        { "qwen3-0.6b", KVS_TOOL_SYN_HERMES },
        { "qwen3-1.7b", KVS_TOOL_SYN_HERMES },
        { "qwq-32b", KVS_TOOL_SYN_HERMES },
        { "smollm2-instruct", KVS_TOOL_SYN_NONE },
        { "tinyllama-1.1b-chat-v1.0", KVS_TOOL_SYN_NONE },
        { "yi-1.5-34b-chat", KVS_TOOL_SYN_NONE },
    };

    DIR            *dir;
    size_t          n, j;
    struct dirent  *de;

    (void) state;

    path = kvs_test_fixture("templates");
    dir = path != NULL ? opendir(path) : NULL;

    while (dir != NULL && (de = readdir(dir)) != NULL) {
        n = strlen(de->d_name);
        if (n < 7 || strcmp(de->d_name + n - 6, ".jinja") != 0) {
            continue;
        }
        for (j = 0; j < sizeof(cases) / sizeof(cases[0]); j++) {
            if (strlen(cases[j].file) == n - 6
                && memcmp(cases[j].file, de->d_name, n - 6) == 0)
            {
                break;
            }
        }
        if (j == sizeof(cases) / sizeof(cases[0])) {
            fail_msg("templates/%s: not in the table", de->d_name);
        }
    }

    if (dir != NULL) {
        closedir(dir);
    }

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(rel, sizeof(rel), "templates/%s.jinja", cases[i].file);

        path = kvs_test_fixture(rel);
        if (path == NULL) {
            continue;
        }

        t = kvs_test_slurp(path, &len);
        assert_non_null(t);

        if (kvs_tool_syntax_detect((const char *) t, len) != cases[i].syn) {
            print_message("%s: %s\n", cases[i].file, kvs_tool_syntax_name(
                          kvs_tool_syntax_detect((const char *) t, len)));
        }

        assert_int_equal(kvs_tool_syntax_detect((const char *) t, len),
                         cases[i].syn);
        free(t);
    }
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_hermes),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_mistral),
        cmocka_unit_test(test_others),
        cmocka_unit_test(test_deepseek),
        cmocka_unit_test(test_functionary32),
        cmocka_unit_test(test_llama4),
        cmocka_unit_test(test_commandr),
        cmocka_unit_test(test_commandr7b),
        cmocka_unit_test(test_minicpm3),
        cmocka_unit_test(test_bad_syntax),
        cmocka_unit_test(test_json_end),
        cmocka_unit_test(test_deep),
        cmocka_unit_test(test_hold),
        cmocka_unit_test(test_detect),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
