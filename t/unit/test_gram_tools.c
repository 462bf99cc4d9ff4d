/*
 * test_gram_tools: the tool-call grammar (kvs_gram_tools.c) against the
 * tool-call parser (src/api/kvs_tool_parse.c), which is what reads the
 * model's output back: the spec's validation errors; for every syntax
 * and choice, seeded random walks through the grammar, by bytes and by
 * tokens of a small vocabulary holding the markers as single tokens,
 * until complete, whose outputs must parse into calls of the tools'
 * names with arguments valid per that tool's schema (the independent
 * validator of kvs_test_gram.h), or, for text, into no calls at all;
 * and at every token step the mask against the brute force.
 */

#include "kvs_test_gram.h"

#include "api/kvs_tool_parse.h"
#include "grammar/kvs_gram_req.h"


#define TT_WEATHER \
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": " \
    "\"string\", \"maxLength\": 8}, \"unit\": {\"enum\": [\"c\", \"f\"]}}, " \
    "\"required\": [\"city\"], \"additionalProperties\": false}"
#define TT_ADD \
    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": " \
    "\"integer\"}, \"b\": {\"type\": \"number\"}, \"tags\": {\"type\": " \
    "\"array\", \"items\": {\"type\": \"string\", \"pattern\": " \
    "\"^[a-z\\\\x00]{0,3}$\"}, \"maxItems\": 2}}, \"required\": [\"a\", " \
    "\"b\"], \"additionalProperties\": false}"

/* the tools every walk uses: index -> name, schema (NULL: absent, any
 * object) */
static const char  *tt_names[] = { "get_weather", "add", "ping" };
static const char  *tt_schemas[] = { TT_WEATHER, TT_ADD, NULL };

#define TT_N_TOOLS  3

#define tt_match(g, lit)  tg_match(g, lit, strlen(lit))

/* DeepSeek's delimiters (U+FF5C, U+2581 in UTF-8) */
#define TT_DS_OPEN   "<｜tool▁calls▁begin｜>"
#define TT_DS_CALL   "<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
#define TT_DS_END    "\n```<｜tool▁call▁end｜>"
#define TT_DS_CLOSE  "<｜tool▁calls▁end｜>"

static const struct {
    const char         *name;
    kvs_tool_syntax_t   syn;
    const char         *marker;       /* NULL: llama3 */
    int                 multi;
} tt_syntaxes[] = {
    { "hermes", KVS_TOOL_SYN_HERMES, "<tool_call>", 1 },
    { "llama3", KVS_TOOL_SYN_LLAMA3, NULL, 0 },
    { "mistral", KVS_TOOL_SYN_MISTRAL, "[TOOL_CALLS]", 1 },
    { "granite", KVS_TOOL_SYN_GRANITE, "<|tool_call|>", 1 },
    { "firefunction", KVS_TOOL_SYN_FIREFUNC, "functools", 1 },
    { "functionary", KVS_TOOL_SYN_FUNCTIONARY, "<function=", 1 },
    { "deepseek", KVS_TOOL_SYN_DEEPSEEK, TT_DS_OPEN, 1 },
    { "functionary32", KVS_TOOL_SYN_FUNCTIONARY32, ">>>", 1 },
    { "llama4", KVS_TOOL_SYN_LLAMA4, NULL, 1 },
    { "commandr", KVS_TOOL_SYN_COMMANDR, "Action:", 1 },
    { "commandr7b", KVS_TOOL_SYN_COMMANDR7B, "<|START_ACTION|>", 1 },
    { "minicpm3", KVS_TOOL_SYN_MINICPM3, "<|tool_call_start|>", 1 },
};

#define TT_LLAMA4  8
#define TT_CR      9
#define TT_CR7B    10
#define TT_MC3     11
#define TT_MC_S    "<|tool_call_start|>\n```python\n"
#define TT_MC_E    "\n```\n<|tool_call_end|>"
#define TT_R7_ACT  "<|START_ACTION|>"
#define TT_R7_END  "<|END_ACTION|>"

/* functionary32: text comes after this recipient line; calls may come
 * at once, the prompt having written their first marker */
#define TT_F32       7
#define TT_F32_TEXT  "all\n"
#define tt_f32_calls(s, text, len) \
    ((s) == TT_F32 && !((len) >= 4 && memcmp(text, TT_F32_TEXT, 4) == 0))

#define TT_N_SYN  (sizeof(tt_syntaxes) / sizeof(tt_syntaxes[0]))

static const char  *tt_choices[] = { "auto", "required", "none" };


/* The spec text: syntax s, choice c, parallel p, the first n tools. */
static char *
tt_spec(size_t s, size_t c, int p, size_t n)
{
    char    *out;
    size_t   i;
    json_t  *spec, *tools, *tool;

    tools = json_array();

    for (i = 0; i < n; i++) {
        tool = json_pack("{s:s}", "name", tt_names[i]);
        if (tt_schemas[i] != NULL) {
            json_object_set_new(tool, "parameters",
                                json_loads(tt_schemas[i], 0, NULL));
        }
        json_array_append_new(tools, tool);
    }

    spec = json_pack("{s:s, s:b, s:s, s:o}", "choice", tt_choices[c],
                     "parallel", p, "syntax", tt_syntaxes[s].name,
                     "tools", tools);
    out = json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(spec);

    return out;
}


static int
tt_compile(kvs_gram_t *g, const char *spec, kvs_err_t *err)
{
    return kvs_gram_req_compile(g, KVS_GRAM_REQ_TOOLS, spec, strlen(spec),
                                err);
}


/* ---- the spec's errors ------------------------------------------------ */

static void
test_spec_errors(void **state)
{
    size_t       i;
    kvs_err_t    err;
    kvs_gram_t   g;
    static const struct {
        const char  *spec;
        int          code;
        const char  *msg;
    } cases[] = {
        { "[]", KVS_EINVAL, "tools spec: must be an object" },
        { "{\"choice\"", KVS_EINVAL, "tools spec: not JSON" },
        { "{\"choice\":\"auto\",\"parallel\":true,\"syntax\":\"hermes\","
          "\"tools\":[{\"name\":\"f\"}],\"x\":1}", KVS_EINVAL,
          "x: unknown key" },
        { "{\"choice\":\"maybe\",\"parallel\":true,\"syntax\":\"hermes\","
          "\"tools\":[{\"name\":\"f\"}]}", KVS_EINVAL,
          "choice: \"maybe\" is not" },
        { "{\"parallel\":true,\"syntax\":\"hermes\","
          "\"tools\":[{\"name\":\"f\"}]}", KVS_EINVAL, "choice: must be" },
        { "{\"choice\":\"auto\",\"parallel\":1,\"syntax\":\"hermes\","
          "\"tools\":[{\"name\":\"f\"}]}", KVS_EINVAL,
          "parallel: must be true or false" },
        { "{\"choice\":\"auto\",\"parallel\":true,\"syntax\":\"chatml\","
          "\"tools\":[{\"name\":\"f\"}]}", KVS_EINVAL, "syntax: must be" },
        { "{\"choice\":\"auto\",\"parallel\":true,\"syntax\":\"hermes\","
          "\"tools\":{}}", KVS_EINVAL, "tools: must be an array" },
        { "{\"choice\":\"auto\",\"parallel\":true,\"syntax\":\"hermes\","
          "\"tools\":[]}", KVS_EINVAL, "tools: empty, with choice \"auto\"" },
        { "{\"choice\":\"required\",\"parallel\":true,\"syntax\":\"mistral\","
          "\"tools\":[]}", KVS_EINVAL,
          "tools: empty, with choice \"required\"" },
        { "{\"choice\":\"auto\",\"parallel\":true,\"syntax\":\"hermes\","
          "\"tools\":[1]}", KVS_EINVAL, "tools[0]: must be an object" },
        { "{\"choice\":\"auto\",\"parallel\":true,\"syntax\":\"hermes\","
          "\"tools\":[{\"name\":\"f\",\"description\":\"x\"}]}", KVS_EINVAL,
          "tools[0].description: unknown key" },
        { "{\"choice\":\"auto\",\"parallel\":true,\"syntax\":\"hermes\","
          "\"tools\":[{\"parameters\":{}}]}", KVS_EINVAL,
          "tools[0].name: must be a string" },
        { "{\"choice\":\"auto\",\"parallel\":true,\"syntax\":\"hermes\","
          "\"tools\":[{\"name\":\"f\"},{\"name\":\"a>b\"}]}", KVS_EINVAL,
          "tools[1].name: must be 1 to 64 of" },
        { "{\"choice\":\"auto\",\"parallel\":true,\"syntax\":\"hermes\","
          "\"tools\":[{\"name\":\"\"}]}", KVS_EINVAL,
          "tools[0].name: must be 1 to 64 of" },
        { "{\"choice\":\"auto\",\"parallel\":true,\"syntax\":\"hermes\","
          "\"tools\":[{\"name\":\"f\"},{\"name\":\"f\"}]}", KVS_EINVAL,
          "tools[1].name: \"f\" is tools[0]'s name too" },
        { "{\"choice\":\"auto\",\"parallel\":true,\"syntax\":\"hermes\","
          "\"tools\":[{\"name\":\"f\",\"parameters\":[]}]}", KVS_EINVAL,
          "tools[0].parameters: must be a JSON Schema object" },
        { "{\"choice\":\"auto\",\"parallel\":true,\"syntax\":\"hermes\","
          "\"tools\":[{\"name\":\"f\",\"parameters\":{\"type\":\"string\"}}"
          "]}", KVS_EINVAL, "tools[0].parameters.type: must be \"object\"" },
        { "{\"choice\":\"none\",\"parallel\":false,\"syntax\":\"granite\","
          "\"tools\":[{\"name\":\"f\"},{\"name\":\"g\",\"parameters\":"
          "{\"type\":\"object\",\"minProperties\":1}}]}", KVS_EUNSUPPORTED,
          "tools[1].parameters.minProperties: unsupported keyword" },
        { "{\"choice\":\"auto\",\"parallel\":true,\"syntax\":\"llama3\","
          "\"tools\":[{\"name\":\"f\",\"parameters\":{\"properties\":{\"a\":"
          "{\"type\":\"string\",\"pattern\":\"(?=x)\"}}}}]}",
          KVS_EUNSUPPORTED, "tools[0].parameters.properties.a.pattern: "
          "unsupported regex construct '(?='" },
        { "{\"choice\":\"required\",\"parallel\":true,\"syntax\":"
          "\"functionary\",\"tools\":[{\"name\":\"f\",\"parameters\":"
          "{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\"}},"
          "\"required\":[\"a\"]}}]}", KVS_EUNSUPPORTED,
          "tools[0].parameters.$ref" },
    };

    (void) state;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        kvs_err_clear(&err);
        assert_int_equal(tt_compile(&g, cases[i].spec, &err),
                         cases[i].code);
        if (strncmp(err.msg, cases[i].msg, strlen(cases[i].msg)) != 0) {
            fail_msg("case %zu: \"%s\", expected \"%s...\"", i, err.msg,
                     cases[i].msg);
        }
        kvs_gram_free(&g);
    }

    /* what is valid: "none" with no tools, parameters absent or without
     * "type", a named choice (required with one tool) */
    assert_int_equal(tt_compile(&g, "{\"choice\":\"none\",\"parallel\":"
                                "true,\"syntax\":\"hermes\",\"tools\":[]}",
                                &err), KVS_OK);
    assert_true(tt_match(&g, "plain text"));
    assert_false(tt_match(&g, "a <tool_call>"));
    kvs_gram_free(&g);

    assert_int_equal(tt_compile(&g, "{\"choice\":\"required\",\"parallel\":"
                                "false,\"syntax\":\"mistral\",\"tools\":[{"
                                "\"name\":\"f\",\"parameters\":{"
                                "\"properties\":{\"x\":{\"type\":"
                                "\"integer\"}}}}]}", &err), KVS_OK);
    assert_true(tt_match(&g, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": "
                         "{\"x\": 12}}]"));
    assert_false(tt_match(&g, "[TOOL_CALLS][{\"name\": \"g\", \"arguments\": "
                          "{\"x\": 12}}]"));
    /* not past 18 digits: jansson reads every argument back */
    assert_false(tt_match(&g, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": "
                          "{\"x\": 1234567890123456789}}]"));
    kvs_gram_free(&g);
}


/* ---- checking an output ------------------------------------------------- */

/* 1 if some '{' of text starts an object with a repeated key (a map's
 * free keys: the grammar cannot make them unique; jansson refuses them) */
static int
tt_dup_keys(const char *text, size_t len)
{
    size_t        i;
    json_t       *v;
    json_error_t  je;

    for (i = 0; i < len; i++) {
        if (text[i] != '{') {
            continue;
        }
        v = json_loadb(text + i, len - i, JSON_DISABLE_EOF_CHECK
                       | JSON_REJECT_DUPLICATES, &je);
        json_decref(v);
        if (v == NULL && strstr(je.text, "duplicate") != NULL) {
            return 1;
        }
    }

    return 0;
}


static size_t  tt_n_out, tt_n_calls, tt_n_dup;


static const char *
tt_find(const char *text, size_t len, const char *m)
{
    size_t  n, i;

    n = strlen(m);
    for (i = 0; i + n <= len; i++) {
        if (memcmp(text + i, m, n) == 0) {
            return text + i;
        }
    }

    return NULL;
}


/*
 * A complete output of syntax s under choice c (parallel p): it parses
 * into what the choice allows.  Returns the number of calls.
 */
static size_t
tt_check(size_t s, size_t c, int p, size_t n_tools, const char *text,
    size_t len)
{
    size_t             i, j, n;
    kvs_err_t          err;
    const char        *mk;
    kvs_tool_parsed_t  out;

    assert_int_equal(kvs_tool_parse(tt_syntaxes[s].syn, text, len, &out,
                                    &err), KVS_OK);
    mk = tt_syntaxes[s].marker;

    if (out.n_calls == 0 && c != 2 && tt_dup_keys(text, len)
        && (mk == NULL || tt_find(text, len, mk) != NULL
            || text[0] == '{' || tt_f32_calls(s, text, len)))
    {
        /* the documented exception: a map with a repeated key */
        tt_n_dup++;
        return 0;
    }

    tt_n_out++;

    mk = tt_syntaxes[s].marker;

    if (c == 2 || (c == 0 && out.n_calls == 0)) {
        /* text: no calls, and no marker in it */
        if (out.n_calls != 0 || out.content_len != len
            || (mk != NULL && tt_find(text, len, mk) != NULL)
            || out.content_at != (s == TT_F32 ? 4 : 0))
        {
            fail_msg("%s/%s: text \"%.*s\" parsed as %zu calls",
                     tt_syntaxes[s].name, tt_choices[c], (int) len, text,
                     out.n_calls);
        }
        kvs_tool_parsed_free(&out);
        return 0;
    }

    if (out.n_calls == 0) {
        fail_msg("%s/%s: \"%.*s\" parsed as no calls", tt_syntaxes[s].name,
                 tt_choices[c], (int) len, text);
    }

    if (out.n_calls > 1 && (!p || !tt_syntaxes[s].multi)) {
        fail_msg("%s/%s: %zu calls without parallel: \"%.*s\"",
                 tt_syntaxes[s].name, tt_choices[c], out.n_calls, (int) len,
                 text);
    }

    if (c == 1 || tt_f32_calls(s, text, len)) {
        assert_int_equal(out.content_len, 0);
    } else if (mk != NULL) {
        /* auto: the content is the text before the first marker, less
         * trailing whitespace */
        n = (size_t) (tt_find(text, len, mk) - text);
        while (n > 0 && (text[n - 1] == ' ' || text[n - 1] == '\n'
                         || text[n - 1] == '\t' || text[n - 1] == '\r'))
        {
            n--;
        }
        assert_int_equal(out.content_len, n);
    }

    for (i = 0; i < out.n_calls; i++) {
        for (j = 0; j < n_tools; j++) {
            if (strcmp(out.calls[i].name, tt_names[j]) == 0) {
                break;
            }
        }
        if (j == n_tools) {
            fail_msg("%s: call of unknown tool %s", tt_syntaxes[s].name,
                     out.calls[i].name);
        }
        if (tt_schemas[j] != NULL
            && tg_valid_text(tt_schemas[j], out.calls[i].arguments,
                             out.calls[i].arguments_len) != 1)
        {
            fail_msg("%s: %s's arguments %s are not valid",
                     tt_syntaxes[s].name, tt_names[j],
                     out.calls[i].arguments);
        }
        if (tt_schemas[j] == NULL) {
            assert_true(out.calls[i].arguments[0] == '{');
        }
    }

    n = out.n_calls;
    tt_n_calls += n;
    kvs_tool_parsed_free(&out);

    return n;
}


/* ---- random byte walks --------------------------------------------------- */

/* Bytes that close JSON or a block, which walks lean to so they end. */
static int
tt_closer(uint8_t b)
{
    return b == '"' || b == '}' || b == ']' || b == '>' || b == '\n';
}


static void
tt_stats(const char *what)
{
    print_message("%s: %zu outputs checked, %zu calls in them, %zu with a "
                  "repeated map key\n", what, tt_n_out, tt_n_calls,
                  tt_n_dup);
    tt_n_out = tt_n_calls = tt_n_dup = 0;
}


static void
test_byte_walks(void **state)
{
    int                 p;
    char               *spec, text[4096];
    size_t              s, c, w, len, n, nc, calls, texts;
    uint8_t             cand[256];
    uint64_t            rng, set[4];
    unsigned            b;
    kvs_err_t           err;
    kvs_gram_t          g;
    kvs_gram_matcher_t  m;

    (void) state;

    rng = 0x9e3779b97f4a7c15ull;

    for (s = 0; s < TT_N_SYN; s++) {
        for (c = 0; c < 3; c++) {
            for (p = 0; p < 2; p++) {
                spec = tt_spec(s, c, p, TT_N_TOOLS);
                if (tt_compile(&g, spec, &err) != KVS_OK) {
                    fail_msg("%s: %s", spec, err.msg);
                }

                calls = texts = 0;

                for (w = 0; w < 60; w++) {
                    assert_int_equal(kvs_gram_matcher_init(&m, &g, NULL,
                                                           &err), KVS_OK);
                    len = 0;

                    /* some auto walks start with the marker's bytes, so
                     * that text-then-calls is walked too */
                    if (c == 0 && w % 3 == 0) {
                        /* llama3: no text before its calls */
                        len = (size_t) snprintf(text, sizeof(text), "%s",
                                                s == TT_F32
                                                ? TT_F32_TEXT "Hi. "
                                                : tt_syntaxes[s].marker
                                                  != NULL
                                                ? "Hi. " : "{\"name\": ");
                        if (tt_syntaxes[s].marker != NULL) {
                            len += (size_t) snprintf(text + len,
                                                     sizeof(text) - len,
                                                     "%s",
                                                     tt_syntaxes[s].marker);
                        }
                        assert_int_equal(kvs_gram_matcher_feed(&m, text,
                                                               len, &err),
                                         KVS_OK);
                    }

                    while (len < sizeof(text)) {
                        if (kvs_gram_matcher_can_end(&m)
                            && (kvs_gram_matcher_must_end(&m)
                                || tg_rand(&rng) % 6 == 0))
                        {
                            break;
                        }

                        kvs_gram_matcher_next(&m, set);

                        for (b = 0, n = 0, nc = 0; b < 256; b++) {
                            if (set[b >> 6] >> (b & 63) & 1) {
                                if (tt_closer((uint8_t) b)) {
                                    cand[255 - nc++] = (uint8_t) b;
                                } else {
                                    cand[n++] = (uint8_t) b;
                                }
                            }
                        }

                        assert_true(n + nc > 0);

                        b = nc > 0 && (n == 0 || tg_rand(&rng) % 3 == 0)
                            ? cand[255 - tg_rand(&rng) % nc]
                            : cand[tg_rand(&rng) % n];

                        assert_int_equal(kvs_gram_matcher_byte(&m,
                                                               (uint8_t) b,
                                                               &err),
                                         KVS_OK);
                        text[len++] = (char) b;
                    }

                    if (len < sizeof(text)) {
                        n = tt_check(s, c, p, TT_N_TOOLS, text, len);
                        calls += n;
                        texts += n == 0;
                    }

                    kvs_gram_matcher_free(&m);
                }

                /* every branch was walked: calls where the choice asks
                 * for them, text where it allows it */
                if (c != 2 && calls == 0) {
                    fail_msg("%s/%s: no walk made a call",
                             tt_syntaxes[s].name, tt_choices[c]);
                }
                if (c != 1 && texts == 0) {
                    fail_msg("%s/%s: no walk was text",
                             tt_syntaxes[s].name, tt_choices[c]);
                }

                kvs_gram_free(&g);
                free(spec);
            }
        }
    }

    tt_stats("byte walks");
}


/* ---- token walks on a small vocabulary, with the brute force ------------- */

static const char  *tt_pieces[] = {
    "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|python_tag|>",
    "<|tool_call|>", "functools", " functools[", "<function=",
    "</function>", "<tool", "_call>", "\n<tool_call>\n", "\n</tool_call>",
    "{\"name\": \"", "\", \"arguments\": {", "\", \"parameters\": {",
    "get_weather", "add", "ping", "{\"city\": \"", "\", \"unit\": \"",
    "\"}}", "}}", "}}]", "\"a\": ", "12", ", \"b\": ", "0.5", "e+1",
    "\"tags\": [\"", "\"]", "\\u0000", "\\u00", "Hello", " world", "Sure,",
    "{", "[{", "}, {", "\"}", "\n", "  ", "<", "[TOOL", "_CALLS]", "func",
    "tools", ">{", "get_weather>{", "\"city\": \"Paris\"",
    TT_DS_OPEN, TT_DS_CALL, "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>", TT_DS_CLOSE, "\n```json\n", "\n```", "```",
    "<｜", "ping\n", ("\n" TT_DS_CALL), ">>>", "all\n", ">>>add\n{",
    "get_weather\n{", ">>", "al",
    "}}{\"name\": \"", "Action:", "Action", ":\n```json\n[", "\n```",
    "]\n```", TT_R7_ACT, TT_R7_END, "<|START_", "[{\"tool_call_id\": \"",
    "\", \"tool_name\": \"", "{\"tool_name\": \"", "7\", ",
    TT_MC_S, TT_MC_E, "get_weather(city=\"", "add(a=", ",b=", "ping()",
    ")\n", "<|tool_call_", "\",unit=\"",
};


static void
test_token_walks(void **state)
{
    int                 p;
    char               *spec, *text;
    size_t              i, np, nv, s, c, w, step, len, n, nc, calls;
    uint8_t            *kinds, bytes[256];
    uint32_t           *lens, words, *bits, *brute, *fresh, *cand, id, best;
    uint64_t            rng;
    kvs_err_t           err;
    kvs_gram_t          g;
    const uint8_t     **texts;
    kvs_gram_vocab_t   *gv;
    kvs_gram_matcher_t  m;
    kvs_gram_masker_t   mk, plain;

    (void) state;

    np = sizeof(tt_pieces) / sizeof(tt_pieces[0]);
    nv = 256 + np + 1;
    kinds = calloc(nv, 1);
    lens = calloc(nv, sizeof(uint32_t));
    texts = calloc(nv, sizeof(uint8_t *));

    for (i = 0; i < 256; i++) {
        bytes[i] = (uint8_t) i;
        texts[i] = &bytes[i];
        lens[i] = 1;
    }
    for (i = 0; i < np; i++) {
        texts[256 + i] = (const uint8_t *) tt_pieces[i];
        lens[256 + i] = (uint32_t) strlen(tt_pieces[i]);
    }
    texts[256 + np] = (const uint8_t *) "</s>";
    lens[256 + np] = 4;
    kinds[256 + np] = KVS_GRAM_TOK_END;

    assert_int_equal(kvs_gram_vocab_from_bytes(&gv, (uint32_t) nv, texts,
                                               lens, kinds, &err), KVS_OK);

    words = (gv->n_tokens + 31) / 32;
    bits = malloc(words * sizeof(uint32_t));
    brute = malloc(words * sizeof(uint32_t));
    fresh = malloc(words * sizeof(uint32_t));
    cand = malloc(gv->n_tokens * sizeof(uint32_t));
    text = malloc(300 * gv->max_len + 1);
    rng = 424242;

    for (s = 0; s < TT_N_SYN; s++) {
        for (c = 0; c < 3; c++) {
            p = (int) (s + c) % 2;
            spec = tt_spec(s, c, p, TT_N_TOOLS);
            assert_int_equal(tt_compile(&g, spec, &err), KVS_OK);
            calls = 0;

            for (w = 0; w < 12; w++) {
                assert_int_equal(kvs_gram_matcher_init(&m, &g, NULL, &err),
                                 KVS_OK);
                assert_int_equal(kvs_gram_masker_init(&mk, gv, &m, 16,
                                                      &err), KVS_OK);
                assert_int_equal(kvs_gram_masker_init(&plain, gv, &m, 0,
                                                      &err), KVS_OK);
                len = 0;

                for (step = 0; step < 300; step++) {
                    if (kvs_gram_mask(&mk, bits, &err) != KVS_OK) {
                        fail_msg("%s after \"%.*s\": %s", spec, (int) len,
                                 text, err.msg);
                    }
                    tg_brute(&m, gv, brute, words);
                    assert_memory_equal(bits, brute,
                                        words * sizeof(uint32_t));
                    assert_int_equal(kvs_gram_mask(&plain, fresh, &err),
                                     KVS_OK);
                    assert_memory_equal(bits, fresh,
                                        words * sizeof(uint32_t));

                    /* candidates: closers at the top, the rest below;
                     * best: the longest allowed text token (markers and
                     * JSON pieces, so that calls get written) */
                    best = UINT32_MAX;
                    for (id = 0, n = 0, nc = 0; id < gv->n_tokens; id++) {
                        if (!(bits[id >> 5] >> (id & 31) & 1)
                            || gv->kind[id] != KVS_GRAM_TOK_TEXT)
                        {
                            continue;
                        }
                        if (best == UINT32_MAX
                            || gv->len[id] > gv->len[best])
                        {
                            best = id;
                        }
                        if (tt_closer(gv->bytes[gv->off[id]
                                                + gv->len[id] - 1]))
                        {
                            cand[gv->n_tokens - 1 - nc++] = id;
                        } else {
                            cand[n++] = id;
                        }
                    }

                    if (kvs_gram_matcher_can_end(&m)
                        && (best == UINT32_MAX || tg_rand(&rng) % 5 == 0))
                    {
                        id = (uint32_t) gv->ids[gv->n_text];
                    } else if (tg_rand(&rng) % 4 == 0) {
                        id = best;
                    } else if (nc > 0 && (n == 0 || tg_rand(&rng) % 2)) {
                        id = cand[gv->n_tokens - 1 - tg_rand(&rng) % nc];
                    } else {
                        id = cand[tg_rand(&rng) % n];
                    }

                    assert_true(bits[id >> 5] >> (id & 31) & 1);
                    assert_int_equal(kvs_gram_accept_token(&m, gv,
                                                            (int32_t) id,
                                                            &err), KVS_OK);
                    if (gv->kind[id] == KVS_GRAM_TOK_END) {
                        break;
                    }
                    memcpy(text + len, gv->bytes + gv->off[id],
                           gv->len[id]);
                    len += gv->len[id];
                }

                if (step < 300) {
                    calls += tt_check(s, c, p, TT_N_TOOLS, text, len);
                }

                kvs_gram_masker_free(&mk);
                kvs_gram_masker_free(&plain);
                kvs_gram_matcher_free(&m);
            }

            if (c == 1 && calls == 0) {
                fail_msg("%s: no token walk ended with a call", spec);
            }

            kvs_gram_free(&g);
            free(spec);
        }
    }

    tt_stats("token walks");

    kvs_gram_vocab_free(gv);
    free(bits);
    free(brute);
    free(fresh);
    free(cand);
    free(text);
    free(kinds);
    free(lens);
    free(texts);
}


/* The shape of each syntax's output, written out once (the forms the
 * templates teach) and read back by the parser. */
static void
test_forms(void **state)
{
    size_t              i;
    char               *spec;
    kvs_err_t           err;
    kvs_gram_t          g;
    static const struct {
        size_t       s, c;
        const char  *text;
        size_t       calls;
    } cases[] = {
        { 0, 1, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
          "{\"city\": \"Oslo\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
          "\"ping\", \"arguments\": {}}\n</tool_call>", 2 },
        { 0, 0, "Let me look.<tool_call>\n{\"name\": \"ping\", \"arguments\": "
          "{\"x\": [1, \"</tool_call>\"]}}\n</tool_call>", 1 },
        { 1, 1, "{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": "
          "-2.5e-3}}", 1 },
        { 1, 0, "<|python_tag|>{\"name\": \"ping\", \"parameters\": {}}", 1 },
        { 1, 0, "It is <b>sunny</b>.", 0 },
        { 2, 1, "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}}, "
          "{\"name\": \"add\", \"arguments\": {\"a\": 0, \"b\": 1}}]", 2 },
        { 3, 0, "ok<|tool_call|>[{\"name\": \"ping\", \"arguments\": "
          "{\"k\": null}}]", 1 },
        { 4, 1, " functools[{\"name\": \"get_weather\", \"arguments\": "
          "{\"city\": \"\\u00e9\", \"unit\": \"c\"}}]", 1 },
        { 5, 0, "Sure.<function=ping>{}</function><function=add>{\"a\": 3, "
          "\"b\": 4, \"tags\": []}</function>", 2 },
        { 5, 2, "no <function call here", 0 },
        { 6, 1, TT_DS_OPEN TT_DS_CALL "get_weather\n```json\n{\"city\": "
          "\"Oslo\"}" TT_DS_END "\n" TT_DS_CALL "ping\n```json\n{}"
          TT_DS_END TT_DS_CLOSE, 2 },
        { 6, 0, "Checking." TT_DS_OPEN TT_DS_CALL "get_weather\n```json\n"
          "{\"city\": \"```\"}" TT_DS_END TT_DS_CLOSE, 1 },
        { 6, 2, "text with <｜tool▁calls▁end｜> and ```json", 0 },
        { 7, 1, "get_weather\n{\"city\": \">>>\"}>>>ping\n{}", 2 },
        { 7, 0, "all\nSure.>>>add\n{\"a\": 1, \"b\": 2}", 1 },
        { 7, 0, "ping\n{}", 1 },
        { 7, 0, "all\nNo call > here >> either.", 0 },
        { 7, 2, "all\nplain", 0 },
        { TT_LLAMA4, 1, "{\"name\": \"ping\", \"parameters\": {}}{\"name\": "
          "\"add\", \"parameters\": {\"a\": 1, \"b\": 2}}", 2 },
        { TT_LLAMA4, 0, "{\"name\": \"ping\", \"parameters\": {}}", 1 },
        { TT_LLAMA4, 0, "It is sunny.", 0 },
        { TT_CR, 1, "Action:\n```json\n[{\"tool_name\": \"ping\", "
          "\"parameters\": {}}, {\"tool_name\": \"get_weather\", "
          "\"parameters\": {\"city\": \"```\"}}]\n```", 2 },
        { TT_CR, 0, "Let me search.Action:\n```json\n[{\"tool_name\": "
          "\"ping\", \"parameters\": {}}]\n```", 1 },
        { TT_CR, 2, "No Action here, Action - none.", 0 },
        { TT_CR7B, 1, TT_R7_ACT "[{\"tool_call_id\": \"0\", \"tool_name\": "
          "\"ping\", \"parameters\": {}}, {\"tool_call_id\": \"12\", "
          "\"tool_name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}]"
          TT_R7_END, 2 },
        { TT_CR7B, 0, "I will ping." TT_R7_ACT "[{\"tool_call_id\": \"3\", "
          "\"tool_name\": \"ping\", \"parameters\": {}}]" TT_R7_END, 1 },
        { TT_CR7B, 2, "Hello <|START_ACT", 0 },
        { TT_MC3, 1, TT_MC_S "get_weather(city=\"Oslo\",unit=\"c\")\n"
          "ping()\nadd(a=1,b=2.5,tags=[\"x\", \"\"])" TT_MC_E, 3 },
        { TT_MC3, 0, "<|thought_start|>\nI will ping.\n<|thought_end|>\n"
          TT_MC_S "ping()" TT_MC_E, 1 },
        { TT_MC3, 2, "add(a=1) is not a call here", 0 },
    };

    (void) state;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        spec = tt_spec(cases[i].s, cases[i].c, 1, TT_N_TOOLS);
        assert_int_equal(tt_compile(&g, spec, &err), KVS_OK);
        if (!tg_match(&g, cases[i].text, strlen(cases[i].text))) {
            fail_msg("case %zu: %s refuses %s", i, spec, cases[i].text);
        }
        assert_int_equal(tt_check(cases[i].s, cases[i].c, 1, TT_N_TOOLS,
                                  cases[i].text, strlen(cases[i].text)),
                         cases[i].calls);
        kvs_gram_free(&g);
        free(spec);
    }

    /* refused: text holding the marker, calls without parallel, llama3
     * text that the parser would read as a call, a second llama3 call */
    spec = tt_spec(0, 2, 1, TT_N_TOOLS);
    assert_int_equal(tt_compile(&g, spec, &err), KVS_OK);
    assert_false(tt_match(&g, "x<tool_call>y"));
    assert_true(tt_match(&g, "x<tool_cal>y"));
    kvs_gram_free(&g);
    free(spec);

    spec = tt_spec(2, 1, 0, TT_N_TOOLS);
    assert_int_equal(tt_compile(&g, spec, &err), KVS_OK);
    assert_false(tt_match(&g, "[TOOL_CALLS][{\"name\": \"ping\", "
                          "\"arguments\": {}}, {\"name\": \"ping\", "
                          "\"arguments\": {}}]"));
    kvs_gram_free(&g);
    free(spec);

    spec = tt_spec(1, 0, 1, TT_N_TOOLS);
    assert_int_equal(tt_compile(&g, spec, &err), KVS_OK);
    assert_true(tt_match(&g, " hi"));
    assert_false(tt_match(&g, " \n{hi"));
    assert_false(tt_match(&g, "{hi"));
    assert_false(tt_match(&g, "\n<|python_tag|>hi"));
    assert_false(tt_match(&g, "<|python_tag|>hi"));
    assert_true(tt_match(&g, "<|python_ta"));
    assert_false(tt_match(&g, "{\"name\": \"ping\", \"parameters\": {}}; "
                          "{\"name\": \"ping\", \"parameters\": {}}"));
    kvs_gram_free(&g);
    free(spec);

    /* functionary32: text needs its recipient line, has no ">>>"; no
     * text in required; "all" is no tool's name */
    spec = tt_spec(TT_F32, 0, 1, TT_N_TOOLS);
    assert_int_equal(tt_compile(&g, spec, &err), KVS_OK);
    assert_false(tt_match(&g, "Hello"));
    assert_false(tt_match(&g, "all\nHi >>> there"));
    assert_false(tt_match(&g, "all\nHi>>>all\nmore"));
    kvs_gram_free(&g);
    free(spec);
    spec = tt_spec(TT_F32, 1, 1, TT_N_TOOLS);
    assert_int_equal(tt_compile(&g, spec, &err), KVS_OK);
    assert_false(tt_match(&g, "all\n>>>ping\n{}"));
    assert_true(tt_match(&g, "ping\n{}>>>ping\n{}"));
    kvs_gram_free(&g);
    free(spec);
    assert_int_equal(tt_compile(&g, "{\"choice\":\"auto\",\"parallel\":"
                                "true,\"syntax\":\"functionary32\","
                                "\"tools\":[{\"name\":\"all\"}]}", &err),
                     KVS_EINVAL);
    assert_non_null(strstr(err.msg, "tools[0].name: \"all\""));
    kvs_gram_free(&g);

    /* DeepSeek: text without its marker; one call without parallel; the
     * calls' end is not optional (the parser wants it) */
    spec = tt_spec(6, 0, 0, TT_N_TOOLS);
    assert_int_equal(tt_compile(&g, spec, &err), KVS_OK);
    assert_true(tt_match(&g, "a <｜tool▁calls▁begin b"));
    assert_false(tt_match(&g, "a " TT_DS_OPEN "b"));
    assert_false(tt_match(&g, TT_DS_OPEN TT_DS_CALL "ping\n```json\n{}"
                          TT_DS_END));
    assert_false(tt_match(&g, TT_DS_OPEN TT_DS_CALL "ping\n```json\n{}"
                          TT_DS_END "\n" TT_DS_CALL "ping\n```json\n{}"
                          TT_DS_END TT_DS_CLOSE));
    kvs_gram_free(&g);
    free(spec);

    /* Llama 4: text never starts with "{"; calls back to back only with
     * parallel */
    spec = tt_spec(TT_LLAMA4, 0, 0, TT_N_TOOLS);
    assert_int_equal(tt_compile(&g, spec, &err), KVS_OK);
    assert_false(tt_match(&g, " {hi"));
    assert_false(tt_match(&g, "{\"name\": \"ping\", \"parameters\": {}}"
                          "{\"name\": \"ping\", \"parameters\": {}}"));
    assert_false(tt_match(&g, "{\"name\": \"pong\", \"parameters\": {}}"));
    kvs_gram_free(&g);
    free(spec);

    /* Command R: no "Action:" in text; the fence is not optional */
    spec = tt_spec(TT_CR, 0, 1, TT_N_TOOLS);
    assert_int_equal(tt_compile(&g, spec, &err), KVS_OK);
    assert_false(tt_match(&g, "a Action: b"));
    assert_false(tt_match(&g, "Action: [{\"tool_name\": \"ping\", "
                          "\"parameters\": {}}]"));
    assert_false(tt_match(&g, "Action:\n```json\n[{\"name\": \"ping\", "
                          "\"parameters\": {}}]\n```"));
    kvs_gram_free(&g);
    free(spec);

    /* MiniCPM3: keyword arguments only, in the schema's order; a map
     * takes none; a property that is no identifier is refused */
    spec = tt_spec(TT_MC3, 1, 1, TT_N_TOOLS);
    assert_int_equal(tt_compile(&g, spec, &err), KVS_OK);
    assert_false(tt_match(&g, TT_MC_S "ping(x=1)" TT_MC_E));
    assert_false(tt_match(&g, TT_MC_S "add(b=1,a=2)" TT_MC_E));
    assert_false(tt_match(&g, TT_MC_S "add({\"a\": 1, \"b\": 2})" TT_MC_E));
    assert_false(tt_match(&g, TT_MC_S "add(a=1, b=2)" TT_MC_E));
    kvs_gram_free(&g);
    free(spec);
    assert_int_equal(tt_compile(&g, "{\"choice\":\"auto\",\"parallel\":"
                                "true,\"syntax\":\"minicpm3\",\"tools\":"
                                "[{\"name\":\"f\",\"parameters\":{"
                                "\"properties\":{\"a-b\":{}}}}]}", &err),
                     KVS_EINVAL);
    assert_non_null(strstr(err.msg, "tools[0].parameters.properties: "
                           "'a-b' is not a Python identifier"));
    kvs_gram_free(&g);
    assert_int_equal(tt_compile(&g, "{\"choice\":\"auto\",\"parallel\":"
                                "true,\"syntax\":\"minicpm3\",\"tools\":"
                                "[{\"name\":\"f\",\"parameters\":{"
                                "\"anyOf\":[{\"properties\":{}}]}}]}", &err),
                     KVS_EINVAL);
    assert_non_null(strstr(err.msg, "tools[0].parameters.anyOf: not "
                           "supported"));
    kvs_gram_free(&g);

    /* Command R7B: digits for ids; the action's end is not optional;
     * required is calls only */
    spec = tt_spec(TT_CR7B, 1, 1, TT_N_TOOLS);
    assert_int_equal(tt_compile(&g, spec, &err), KVS_OK);
    assert_false(tt_match(&g, TT_R7_ACT "[{\"tool_call_id\": \"a\", "
                          "\"tool_name\": \"ping\", \"parameters\": {}}]"
                          TT_R7_END));
    assert_false(tt_match(&g, TT_R7_ACT "[{\"tool_call_id\": \"12345\", "
                          "\"tool_name\": \"ping\", \"parameters\": {}}]"
                          TT_R7_END));
    assert_false(tt_match(&g, TT_R7_ACT "[{\"tool_call_id\": \"1\", "
                          "\"tool_name\": \"ping\", \"parameters\": {}}]"));
    assert_false(tt_match(&g, "Plan." TT_R7_ACT "[{\"tool_call_id\": \"1\", "
                          "\"tool_name\": \"ping\", \"parameters\": {}}]"
                          TT_R7_END));
    kvs_gram_free(&g);
    free(spec);
}


/* Free text is a flat automaton: one stack, whatever the text's length
 * (tail calls), and a recurring state is a state-cache hit. */
static void
test_text_state(void **state)
{
    char                *spec;
    uint8_t              bytes[257], kinds[257];
    uint32_t             i, lens[257], bits[9];
    kvs_err_t            err;
    kvs_gram_t           g;
    const uint8_t       *texts[257];
    kvs_gram_vocab_t    *gv;
    kvs_gram_matcher_t   m;
    kvs_gram_masker_t    mk;
    const kvs_gram_level_t  *lv;

    (void) state;

    memset(kinds, 0, sizeof(kinds));
    for (i = 0; i < 256; i++) {
        bytes[i] = (uint8_t) i;
        texts[i] = &bytes[i];
        lens[i] = 1;
    }
    texts[256] = (const uint8_t *) "";
    lens[256] = 0;
    kinds[256] = KVS_GRAM_TOK_END;
    assert_int_equal(kvs_gram_vocab_from_bytes(&gv, 257, texts, lens, kinds,
                                               &err), KVS_OK);

    spec = tt_spec(0, 0, 1, TT_N_TOOLS);
    assert_int_equal(tt_compile(&g, spec, &err), KVS_OK);
    assert_int_equal(kvs_gram_matcher_init(&m, &g, NULL, &err), KVS_OK);
    assert_int_equal(kvs_gram_masker_init(&mk, gv, &m, 16, &err), KVS_OK);
    mk.keepall = 1;

    for (i = 0; i < 40; i++) {
        assert_int_equal(kvs_gram_mask(&mk, bits, &err), KVS_OK);
        /* text: every byte but the marker's first would do; EOS too */
        assert_true(bits['a' >> 5] >> ('a' & 31) & 1);
        assert_true(bits[256 >> 5] >> (256 & 31) & 1);
        /* "a<" then "b": the automaton leaves state 0 and comes back */
        assert_int_equal(kvs_gram_accept_token(&m, gv, "a<b"[i % 3], &err),
                         KVS_OK);
        lv = &m.lv[m.n_lv - 1];
        assert_int_equal(lv->n_front, 1);
    }

    /* two states recur: after the first mask of each, hits */
    assert_true(mk.hits >= 37);

    kvs_gram_masker_free(&mk);
    kvs_gram_matcher_free(&m);
    kvs_gram_free(&g);
    kvs_gram_vocab_free(gv);
    free(spec);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_forms),
        cmocka_unit_test(test_text_state),
        cmocka_unit_test(test_byte_walks),
        cmocka_unit_test(test_token_walks),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
