/*
 * test_tool_stream: the streaming reader of tool calls against the whole
 * output's parser.  For outputs in each syntax's grammar layout (content
 * before the calls, several calls, arguments with nested objects and
 * arrays, strings holding braces, quotes, backslashes, "name" and the
 * markers), fed cut at every byte and at random lengths: the heads come
 * in order with the names kvs_tool_parse() finds, and each call's pieces
 * join into JSON equal to its parsed arguments and free of white space
 * outside strings; content ends where the calls begin.  Text that is
 * not calls gives no event.
 */

#include <jansson.h>

#include "kvs_test.h"

#include "api/kvs_tool_parse.h"
#include "api/kvs_tool_stream.h"

#define MAX_CALLS  8

typedef struct {
    kvs_tool_syntax_t  syn;
    const char        *text;
    size_t             content;       /* bytes before the calls */
} case_t;

#define ARGS_A  "{\"city\": \"Pa{ris}\", \"n\": [1, 2, {\"x\": null}]}"
#define ARGS_B  "{\"q\": \"say \\\"name\\\": \\\"x\\\" </tool_call> \\\\\"}"

/* DeepSeek's delimiters (U+FF5C, U+2581 in UTF-8) */
#define DS_OPEN   "<｜tool▁calls▁begin｜>"
#define DS_CALL   "<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
#define DS_END    "\n```<｜tool▁call▁end｜>"
#define DS_CLOSE  "<｜tool▁calls▁end｜>"
#define ARGS_DS   "{\"s\": \"<｜tool▁sep｜>x\\n```json\\n\"}"

static const case_t  cases[] = {
    { KVS_TOOL_SYN_HERMES,
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      ARGS_A "}\n</tool_call>\n<tool_call>\n{\"name\": \"f-2\", "
      "\"arguments\": " ARGS_B "}\n</tool_call>", 13 },
    { KVS_TOOL_SYN_LLAMA3,
      "{\"name\": \"get_weather\", \"parameters\": " ARGS_A "}", 0 },
    { KVS_TOOL_SYN_LLAMA3,
      "<|python_tag|>{\"name\": \"f-2\", \"parameters\": " ARGS_B "}", 0 },
    { KVS_TOOL_SYN_MISTRAL,
      "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " ARGS_A
      "}, {\"name\": \"f-2\", \"arguments\": {}}]", 0 },
    { KVS_TOOL_SYN_GRANITE,
      "ok <|tool_call|>[{\"name\": \"a\", \"arguments\": " ARGS_B "}]", 3 },
    { KVS_TOOL_SYN_FIREFUNC,
      " functools[{\"name\": \"get_weather\", \"arguments\": " ARGS_A "}]",
      1 },
    { KVS_TOOL_SYN_FUNCTIONARY,
      "<function=get_weather>" ARGS_A "</function><function=f-2>" ARGS_B
      "</function>", 0 },
    { KVS_TOOL_SYN_DEEPSEEK,
      "Let me check.\n" DS_OPEN DS_CALL "get_weather\n```json\n" ARGS_A
      DS_END "\n" DS_CALL "f-2\n```json\n" ARGS_DS DS_END "\n" DS_CALL
      "g\n```json\n" ARGS_B DS_END DS_CLOSE, 14 },
    { KVS_TOOL_SYN_DEEPSEEK,
      DS_OPEN DS_CALL "a.b\n" ARGS_A "<｜tool▁call▁end｜>\n" DS_CALL
      "c\n```\n{}" DS_END DS_CLOSE, 0 },
    { KVS_TOOL_SYN_FUNCTIONARY32,
      "all\nLet me look.>>>get_weather\n" ARGS_A ">>>f-2\n" ARGS_B, 16 },
    { KVS_TOOL_SYN_FUNCTIONARY32,
      "a.b\n{\"s\": \">>>x\\n\"}>>>all2\n" ARGS_A, 0 },
    { KVS_TOOL_SYN_FUNCTIONARY32, "al\n{}", 0 },
    { KVS_TOOL_SYN_LLAMA4,
      "{\"name\": \"get_weather\", \"parameters\": " ARGS_A "}{\"name\": "
      "\"f-2\", \"parameters\": " ARGS_B "}", 0 },
    { KVS_TOOL_SYN_LLAMA4,
      "\n{\"name\": \"a\", \"parameters\": {}}", 1 },
    { KVS_TOOL_SYN_COMMANDR,
      "Searching.Action:\n```json\n[{\"tool_name\": \"get_weather\", "
      "\"parameters\": " ARGS_A "}, {\"tool_name\": \"f-2\", "
      "\"parameters\": " ARGS_B "}]\n```", 10 },
    { KVS_TOOL_SYN_COMMANDR7B,
      "<|START_THINKING|>Plan.<|END_THINKING|><|START_ACTION|>[{"
      "\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", "
      "\"parameters\": " ARGS_A "}, {\"tool_call_id\": \"1\", "
      "\"tool_name\": \"f-2\", \"parameters\": {\"s\": "
      "\"\\\"name\\\": \\\"<|END_ACTION|>\"}}]<|END_ACTION|>", 39 },
    { KVS_TOOL_SYN_MINICPM3,
      "Plan.\n<|tool_call_start|>\n```python\nget_weather(city=\"P)a,r=\","
      "n=[1, {\"x\": \"(\"}],q=" ARGS_B ")\nf-2()\ng(a = 1 , b=null)\n```\n"
      "<|tool_call_end|>", 6 },
    { KVS_TOOL_SYN_MINICPM3,
      "<|tool_call_start|>h(x=true)<|tool_call_end|>", 0 },
};


typedef struct {
    uint32_t   n_heads;
    char       names[MAX_CALLS][80];
    kvs_buf_t  args[MAX_CALLS];
    size_t     content;
    int        failed;
} got_t;


/* Feeds text grown by `step` bytes at a time (0: random lengths). */
static void
feed(kvs_tool_syntax_t syn, const char *text, size_t step, uint64_t *rng,
    got_t *g)
{
    int                rc;
    size_t             len, total;
    kvs_buf_t          piece;
    kvs_tool_delta_t   d;
    kvs_tool_stream_t  ts;

    memset(g, 0, sizeof(*g));
    memset(&piece, 0, sizeof(piece));
    kvs_tool_stream_init(&ts, syn);
    total = strlen(text);
    len = 0;

    while (len < total) {
        if (step > 0) {
            len += step;
        } else {
            *rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
            len += 1 + (*rng >> 33) % 9;
        }
        if (len > total) {
            len = total;
        }

        while ((rc = kvs_tool_stream_next(&ts, text, len, &d, &piece))
               != KVS_TS_EV_NONE)
        {
            assert_true(rc == KVS_TS_EV_HEAD || rc == KVS_TS_EV_ARGS
                        || rc == KVS_TS_EV_FAIL);
            if (rc == KVS_TS_EV_FAIL) {
                g->failed = 1;
                break;
            }
            if (rc == KVS_TS_EV_HEAD) {
                assert_int_equal(d.index, g->n_heads);
                assert_true(g->n_heads < MAX_CALLS && d.name_len < 80);
                memcpy(g->names[g->n_heads], d.name, d.name_len);
                g->names[g->n_heads][d.name_len] = '\0';
                g->n_heads++;
                g->content = ts.content;
                continue;
            }
            /* a piece belongs to the last head */
            assert_int_equal(d.index + 1, g->n_heads);
            assert_true(piece.len > 0);
            assert_int_equal(kvs_buf_append(&g->args[d.index], piece.data,
                                            piece.len), KVS_OK);
            piece.len = 0;
        }

        if (g->failed) {
            break;
        }
    }

    kvs_buf_free(&piece);
}


static void
check_case(const case_t *c, size_t step, uint64_t *rng)
{
    size_t             i, k;
    int                in_str, esc;
    got_t              g;
    json_t            *a, *b;
    kvs_err_t          err;
    kvs_tool_parsed_t  p;

    assert_int_equal(kvs_tool_parse(c->syn, c->text, strlen(c->text), &p,
                                    &err), KVS_OK);
    assert_true(p.n_calls > 0);

    feed(c->syn, c->text, step, rng, &g);

    assert_false(g.failed);
    assert_int_equal(g.n_heads, p.n_calls);
    assert_int_equal(g.content, c->content);

    for (i = 0; i < p.n_calls; i++) {
        assert_string_equal(g.names[i], p.calls[i].name);

        /* compact: no space outside strings */
        in_str = 0;
        esc = 0;
        for (k = 0; k < g.args[i].len; k++) {
            char ch = (char) g.args[i].data[k];

            if (in_str) {
                if (esc) {
                    esc = 0;
                } else if (ch == '\\') {
                    esc = 1;
                } else if (ch == '"') {
                    in_str = 0;
                }
            } else {
                assert_true(ch != ' ' && ch != '\n');
                in_str = ch == '"';
            }
        }

        a = json_loadb((const char *) g.args[i].data, g.args[i].len, 0,
                       NULL);
        b = json_loads(p.calls[i].arguments, 0, NULL);
        if (a == NULL || b == NULL || !json_equal(a, b)) {
            fail_msg("%s call %zu step %zu: pieces %.*s, parsed %s",
                     kvs_tool_syntax_name(c->syn), i, step,
                     (int) g.args[i].len, g.args[i].data,
                     p.calls[i].arguments);
        }
        json_decref(a);
        json_decref(b);
        kvs_buf_free(&g.args[i]);
    }

    kvs_tool_parsed_free(&p);
}


static void
test_cases(void **state)
{
    size_t    i, step;
    uint64_t  rng;

    rng = 7;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (step = 1; step <= 3; step++) {
            check_case(&cases[i], step, &rng);
        }
        check_case(&cases[i], strlen(cases[i].text), &rng);
        for (step = 0; step < 20; step++) {
            check_case(&cases[i], 0, &rng);
        }
    }
}


static void
test_not_calls(void **state)
{
    got_t     g;
    uint64_t  rng;

    rng = 1;

    /* plain text, a marker's beginning at the end, text in NONE */
    feed(KVS_TOOL_SYN_HERMES, "Just text <tool_ca", 1, &rng, &g);
    assert_int_equal(g.n_heads, 0);
    assert_false(g.failed);

    feed(KVS_TOOL_SYN_MISTRAL, "no calls [TOOL_CALL", 0, &rng, &g);
    assert_int_equal(g.n_heads, 0);

    /* LLAMA3: text that is not a call fails at once */
    feed(KVS_TOOL_SYN_LLAMA3, "Hello there", 1, &rng, &g);
    assert_true(g.failed);
    assert_int_equal(g.n_heads, 0);

    feed(KVS_TOOL_SYN_LLAMA3, "<b>bold</b>", 1, &rng, &g);
    assert_true(g.failed);

    feed(KVS_TOOL_SYN_NONE, "{\"name\": \"x\"}", 1, &rng, &g);
    assert_true(g.failed);
    assert_int_equal(g.n_heads, 0);

    /* a name that never ends is not one the grammar wrote */
    {
        char  big[600];

        memset(big, 'a', sizeof(big));
        memcpy(big, "<function=", 10);
        big[sizeof(big) - 1] = '\0';
        feed(KVS_TOOL_SYN_FUNCTIONARY, big, 7, &rng, &g);
        assert_true(g.failed);
        assert_int_equal(g.n_heads, 0);
    }

    /* DeepSeek: the marker's beginning is no call; a fence that is not
     * one fails after the head */
    feed(KVS_TOOL_SYN_DEEPSEEK, "no <｜tool▁calls▁beg", 1, &rng, &g);
    assert_int_equal(g.n_heads, 0);
    assert_false(g.failed);

    feed(KVS_TOOL_SYN_DEEPSEEK, DS_OPEN DS_CALL "f\n`x{}", 1, &rng, &g);
    assert_true(g.failed);
    assert_int_equal(g.n_heads, 1);

    /* Functionary v3.2: text after "all\n" (a ">>" is no marker) */
    feed(KVS_TOOL_SYN_FUNCTIONARY32, "all\nJust >> text >", 1, &rng, &g);
    assert_int_equal(g.n_heads, 0);
    assert_false(g.failed);

    /* Llama 4 reads as Llama 3: text is no call */
    feed(KVS_TOOL_SYN_LLAMA4, "Sunny today", 1, &rng, &g);
    assert_true(g.failed);
    assert_int_equal(g.n_heads, 0);

    /* Command R: "Action" without its colon, the response tags */
    feed(KVS_TOOL_SYN_COMMANDR, "No Action here: {\"tool_name\": \"x\"",
         1, &rng, &g);
    assert_int_equal(g.n_heads, 0);
    assert_false(g.failed);

    feed(KVS_TOOL_SYN_COMMANDR7B, "<|START_RESPONSE|>Hi {\"tool_name\": "
         "\"x\"}<|END_RESPONSE|>", 2, &rng, &g);
    assert_int_equal(g.n_heads, 0);
    assert_false(g.failed);

    /* MiniCPM3: no marker, no call; a fence that is not python */
    feed(KVS_TOOL_SYN_MINICPM3, "f(a=1) <|tool_call_sta", 1, &rng, &g);
    assert_int_equal(g.n_heads, 0);
    assert_false(g.failed);

    feed(KVS_TOOL_SYN_MINICPM3, "<|tool_call_start|>\n```json\nf()", 1,
         &rng, &g);
    assert_true(g.failed);
    assert_int_equal(g.n_heads, 0);

    /* a head, then arguments that are not an object */
    feed(KVS_TOOL_SYN_COMMANDR7B, "<|START_ACTION|>[{\"tool_name\": \"f\", "
         "\"parameters\": 3}]", 1, &rng, &g);
    assert_true(g.failed);
    assert_int_equal(g.n_heads, 1);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_not_calls),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
