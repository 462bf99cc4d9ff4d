/*
 * test_jinja: the Jinja interpreter (kvs_jinja.h) piece by piece.
 *
 * Renders: each statement, filter, test and method, the lexer's
 * whitespace control (trim_blocks, lstrip_blocks, "-" and "+"), Python
 * printing of values and the operators, on one context.  The expected
 * texts are Python jinja2 3.1's output for the same template and context
 * under Hugging Face's settings (t/unit/test_jinja_templates.py's hf_env),
 * recorded here so that the test runs without Python.
 * Errors: compile errors name the construct and its line; render errors
 * (undefined, type, raise_exception, unsafe methods) fail with the
 * template's message where it has one.  Limits: a nested loop bomb
 * stops at the step limit, endless macro recursion at the depth limit,
 * output and memory at theirs, and a failed render leaves out as it was.
 * Leaks: run under ASan (make unit-asan), every failed compile and render
 * here must free all it took.
 */

#include "kvs_test.h"

#include <jansson.h>

#include "tokenizer/kvs_jinja.h"


#define CTX_JSON \
    "{\"s\": \"  Hi there\\n\", \"n\": 3, \"f\": 2.5, \"l\": [1, \"a\"," \
    " null, true, 2.0], \"d\": {\"b\": 1, \"a\": [1, 2], \"c\": {\"x\":" \
    " \"y\"}}, \"none\": null, \"t\": true, \"msgs\": [{\"role\": \"sys" \
    "tem\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"U1" \
    "\"}, {\"role\": \"assistant\", \"content\": \"A1\"}, {\"role\": \"" \
    "user\", \"content\": \"U2\"}], \"u\": \"h\303\251llo w\303\266rld" \
    "\", \"words\": [\"b\", \"A\", \"a\", \"c\", \"B\"]}"

typedef struct {
    const char  *name;
    const char  *tpl;
    const char  *want;
} case_t;

static const case_t  cases[] = {
    { "ws-strip",
      "a  {%- if true %} b {% endif -%}  c",
      "a b c" },
    { "ws-trim-blocks",
      "{% if true %}\nx\n{% endif %}\ny",
      "x\ny" },
    { "ws-lstrip-blocks",
      "  {% if true %}\n  x\n  {% endif %}\nz",
      "  x\nz" },
    { "ws-plus",
      "  {%+ if true %}x{% endif +%}\ny",
      "  x\ny" },
    { "ws-comment",
      "a {#- c -#} b\n  {# c #}\nz",
      "ab\nz" },
    { "ws-var",
      "a  {{- 'x' -}}  b {{ 'y' }}\n",
      "axb y" },
    { "ws-trailing-nl",
      "x\n\n",
      "x\n" },
    { "ws-crlf",
      "a\r\nb{% if true %}\r\nc{% endif %}",
      "a\nbc" },
    { "ws-lstrip-not-var",
      "  {{ 1 }}\n  {% set x = 1 %}\n  x",
      "  1\n  x" },
    { "ws-lstrip-after-trim",
      "{% if true %}\n   {% if true %}\nz{% endif %}{% endif %}",
      "z" },
    { "if-elif",
      "{% for i in [1,2,3] %}{% if i == 1 %}one{% elif i == 2 %}two{% else "
      "%}many{% endif %};{% endfor %}",
      "one;two;many;" },
    { "for-loop",
      "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }"
      "}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex"
      "0 }}{{ loop.previtem }}{{ loop.nextitem }}|{% endfor %}",
      "10TrueFalse332b|21FalseFalse321ac|32FalseTrue310b|" },
    { "for-if-else",
      "{% for x in l if x %}{{ x }},{% else %}none{% endfor %}|{% for x in "
      "[] %}x{% else %}empty{% endfor %}",
      "1,a,True,2.0,|empty" },
    { "for-break-continue",
      "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% i"
      "f i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
      "0134" },
    { "for-items",
      "{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}{% for k in d %"
      "}{{ k }}{% endfor %}",
      "b=1;a=[1, 2];c={'x': 'y'};bac" },
    { "for-scope",
      "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}",
      "1" },
    { "namespace",
      "{% set ns = namespace(c=0, s='') %}{% for m in msgs %}{% set ns.c = "
      "ns.c + 1 %}{% set ns.s = ns.s ~ m.role[0] %}{% endfor %}{{ ns.c }} {"
      "{ ns.s }}",
      "4 suau" },
    { "set-tuple",
      "{% set a, b = 1, 'two' %}{{ a }}{{ b }}",
      "1two" },
    { "set-block",
      "{% set x | upper %}  hello {{ 'w' }}{% endset %}[{{ x }}]",
      "[  HELLO W]" },
    { "macro",
      "{% macro f(a, b='B', c=none) %}<{{ a }}{{ b }}{{ c }}>{% endmacro %}"
      "{{ f(1) }}{{ f(1, 2) }}{{ f('x', c=3) }}{{ f() }}",
      "<1BNone><12None><xB3><BNone>" },
    { "macro-recursion",
      "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int "
      "}}{% endif %}{% endmacro %}{{ fact(5) }}",
      "120" },
    { "call-block",
      "{% macro wrap(t) %}[{{ t }}:{{ caller() }}]{% endmacro %}{% call wra"
      "p('w') %}inner {{ n }}{% endcall %}",
      "[w:inner 3]" },
    { "filter-block",
      "{% filter upper %}abc {{ s }}{% endfilter %}|{% filter trim %}  x  {"
      "% endfilter %}|",
      "ABC   HI THERE\n|x|" },
    { "f-trim",
      "[{{ s|trim }}][{{ '\302\240 x\343\200\200'|trim }}][{{ 'xxaxx'|trim("
      "'x') }}]",
      "[Hi there][x][a]" },
    { "f-tojson",
      "{{ d|tojson }}|{{ u|tojson }}|{{ l|tojson }}|{{ 'a\"\\\\\\n\\t\\u000"
      "1'|tojson }}|{{ f|tojson }}|{{ none|tojson }}",
      "{\"b\": 1, \"a\": [1, 2], \"c\": {\"x\": \"y\"}}|\"h\303\251llo w"
      "\303\266rld\"|[1, \"a\", null, true, 2.0]|\"a\\\"\\\\\\n\\t\\u0001\""
      "|2.5|null" },
    { "f-tojson-indent",
      "{{ d|tojson(indent=2) }}|{{ [] |tojson(indent=2) }}|{{ {'k': {}}|toj"
      "son(indent=1) }}",
      "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    2\n  ],\n  \"c\": {\n    \"x"
      "\": \"y\"\n  }\n}|[]|{\n \"k\": {}\n}" },
    { "f-tojson-sort",
      "{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}",
      "{\"a\": [1, 2], \"b\": 1, \"c\": {\"x\": \"y\"}}|{\"b\":1,\"a\":[1,2"
      "],\"c\":{\"x\":\"y\"}}" },
    { "f-length",
      "{{ s|length }}{{ u|length }}{{ l|length }}{{ d|length }}{{ missing|l"
      "ength }}{{ l|count }}",
      "11115305" },
    { "f-select",
      "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content"
      "')|join(',') }}|{{ msgs|rejectattr('role', 'eq', 'user')|list|length"
      " }}|{{ l|select|list }}|{{ [1,2,3,4]|reject('odd')|list }}|{{ msgs|s"
      "electattr('content')|list|length }}",
      "U1,U2|2|[1, 'a', True, 2.0]|[2, 4]|4" },
    { "f-map",
      "{{ msgs|map(attribute='role')|unique|list }}|{{ words|map('upper')|j"
      "oin }}|{{ words|unique|list }}",
      "['system', 'user', 'assistant']|BAACB|['b', 'A', 'c']" },
    { "f-join",
      "{{ [1, 'a', none]|join }}|{{ words|join(', ') }}|{{ msgs|join('/', a"
      "ttribute='role') }}",
      "1aNone|b, A, a, c, B|system/user/assistant/user" },
    { "f-case",
      "{{ 'hELLo wORLD'|upper }}|{{ 'hELLo wORLD'|lower }}|{{ 'hELLo wORLD-"
      "x(y)'|title }}|{{ 'hELLo wORLD'|capitalize }}",
      "HELLO WORLD|hello world|Hello World-X(Y)|Hello world" },
    { "f-replace",
      "{{ 'aaa'|replace('a', 'bb') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ '"
      "ab'|replace('', '-') }}",
      "bbbbbb|bba|-a-b-" },
    { "f-indent",
      "[{{ 'a\nb\n\nc'|indent }}][{{ 'a\nb'|indent(2, true) }}][{{ 'a\n\nb'"
      "|indent('> ', blank=true) }}]",
      "[a\n    b\n\n    c][  a\n  b][a\n> \n> b]" },
    { "f-default",
      "{{ missing|default('dflt') }}|{{ none|default('x') }}|{{ ''|default("
      "'e', true) }}|{{ missing|d }}|",
      "dflt|None|e||" },
    { "f-misc",
      "{{ l|first }}{{ l|last }}{{ [3,1,2]|sort }}{{ words|sort }}{{ [3,1,2"
      "]|sort(reverse=true) }}{{ 'abc'|reverse }}{{ [1,2]|reverse|list }}{{"
      " d|dictsort }}",
      "12.0[1, 2, 3]['A', 'a', 'b', 'B', 'c'][3, 2, 1]cba[2, 1][('a', [1, 2"
      "]), ('b', 1), ('c', {'x': 'y'})]" },
    { "f-num",
      "{{ '42'|int }}{{ 'x'|int }}{{ 3.9|int }}{{ '2.5'|float }}{{ -3|abs }"
      "}{{ 2.567|round(2) }}{{ [1,2,3]|sum }}{{ 7|string ~ 'x' }}",
      "42032.532.5767x" },
    { "f-markup",
      "{{ 'a<b'|safe + '<i>' }}|{{ '<&>\"\\''|e }}|{{ '<x>' + 'y' }}",
      "a<b&lt;i&gt;|&lt;&amp;&gt;&#34;&#39;|<x>y" },
    { "f-items-undefined",
      "{% for k, v in missing|items %}x{% endfor %}ok",
      "ok" },
    { "tests",
      "{{ missing is defined }}{{ n is defined }}{{ missing is undefined }}"
      "{{ none is none }}{{ s is string }}{{ n is number }}{{ n is integer "
      "}}{{ f is float }}{{ t is boolean }}{{ t is true }}{{ t is false }}{"
      "{ d is mapping }}{{ l is iterable }}{{ n is iterable }}{{ s is seque"
      "nce }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 'a' is"
      " in 'cat' }}{{ 1 is eq 1.0 }}{{ none is sameas none }}{{ n is not no"
      "ne }}{{ 'ab' is lower }}{{ t is number }}{{ t is integer }}",
      "FalseTrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrueTrueFalseTrueTrueT"
      "rueTrueTrueTrueTrueTrueTrueTrueFalse" },
    { "m-str",
      "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip("
      "'x') }}|{{ s.startswith('  H') }}{{ s.endswith('\n') }}{{ 'abc'.star"
      "tswith(('x', 'a')) }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b \t c '.spl"
      "it() }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ "
      "'aXbX'.replace('X', '-') }}|{{ 'hi'.upper() }}{{ 'HI'.lower() }}{{ '"
      "ab cd'.title() }}{{ 'aB'.capitalize() }}|{{ 'abcabc'.find('c') }}{{ "
      "'abcabc'.count('bc') }}|{{ '-'.join(['a', 'b']) }}|{{ 'a\nb\r\nc'.sp"
      "litlines() }}",
      "Hi there|Hi there\n|  Hi there|hi|TrueTrueTrue|['a', 'b', '', 'c']|["
      "'a', 'b', 'c']|['a', 'b,c']|['a,b', 'c']|a-b-|HIhiAb CdAb|22|a-b|['a"
      "', 'b', 'c']" },
    { "m-dict",
      "{{ d.get('b') }}{{ d.get('zz') }}{{ d.get('zz', 'dflt') }}|{{ d.keys"
      "()|list }}|{{ d.values()|list }}|{{ d.items()|list }}|{{ d['c']['x']"
      " }}{{ d.c.x }}{{ d.zz }}",
      "1Nonedflt|['b', 'a', 'c']|[1, [1, 2], {'x': 'y'}]|[('b', 1), ('a', ["
      "1, 2]), ('c', {'x': 'y'})]|yy" },
    { "print",
      "{{ l }}|{{ d }}|{{ [0.1, 1e16, 1.5e-05, 2.0, -0.0, 100.0, 1e300, 123"
      "456789.125, 1/3] }}|{{ t }}{{ none }}|{{ ['it\\'s', 'say \"hi\"', 'b"
      "oth \\' \"', 'tab\\there', 'nl\\n', '\303\251\342\200\250\302\240'] "
      "}}|{{ (1,) }}{{ (1, 'a') }}|{{ 10 / 4 }}{{ 7 // 2 }}{{ -7 // 2 }}{{ "
      "-7 % 3 }}{{ 2 ** 10 }}{{ 7.5 % 2 }}",
      "[1, 'a', None, True, 2.0]|{'b': 1, 'a': [1, 2], 'c': {'x': 'y'}}|[0."
      "1, 1e+16, 1.5e-05, 2.0, -0.0, 100.0, 1e+300, 123456789.125, 0.333333"
      "3333333333]|TrueNone|[\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\t"
      "here', 'nl\\n', '\303\251\\u2028\\xa0']|(1,)(1, 'a')|2.53-4210241.5" },
    { "ops",
      "{{ 'abcdef'[::-1] }}|{{ 'abcdef'[1:] }}|{{ 'abcdef'[-2:] }}|{{ 'abcd"
      "ef'[1:5:2] }}|{{ l[1:3] }}|{{ u[1] }}{{ u[-1] }}|{{ 'a' in 'cat' }}{"
      "{ 'z' not in 'cat' }}{{ 1 in l }}{{ 'b' in d }}|{{ 'a' ~ 1 ~ none ~ "
      "missing }}|{{ [1] + [2] }}{{ 'ab' * 3 }}{{ [0] * 2 }}|{{ 1 < 2 < 3 }"
      "}{{ 1 < 3 < 2 }}|{{ 'yes' if t }}{{ 'no' if not t }}|{{ none or 'x' "
      "}}{{ 0 and 'y' }}{{ 'a' and 'b' }}|{{ not missing }}{{ n is not stri"
      "ng }}{{ -n }}{{ 'b' > 'a' }}{{ [1, 2] == [1, 2] }}{{ {'a': 1} == {'a"
      "': 1} }}{{ 1 == true }}",
      "fedcba|bcdef|ef|bd|['a', None]|\303\251d|TrueTrueTrueTrue|a1None|[1,"
      " 2]ababab[0, 0]|TrueFalse|yes|x0b|TrueTrue-3TrueTrueTrueTrue" },
    { "strftime",
      "{{ strftime_now('%Y-%m-%d %H:%M:%S %b %A') }}",
      "2025-01-15 00:00:00 Jan Wednesday" },
    { "adjacent-strings",
      "{{ 'a' 'b' \"c\" }}",
      "abc" },
    { "escapes",
      "{{ '\\x41\\u00e9\\n\\q\\101' }}",
      "A\303\251\n\\qA" },
    { "undefined-print",
      "[{{ missing }}][{{ d.zz }}][{{ none.x }}][{{ l[99] }}]",
      "[][][][]" },
    /* select, reject, map, unique, items and reverse give generators:
     * true even when empty, no len(), not reversible, not JSON */
    { "generators",
      "{% if []|select %}Y{% else %}N{% endif %}{% if [0]|reject|list %}Y"
      "{% else %}N{% endif %}{{ 2.0 is even }}{{ 3.0 is odd }}{{ [3, 1]|re"
      "verse|list }}{{ {\"a\": 1}|items|list }}{{ [1]|select|list|length }}",
      "YYTrueTrue[1, 3][('a', 1)]1" },
};


static json_t *
ctx_load(void)
{
    json_error_t  jerr;
    json_t       *ctx;

    ctx = json_loads(CTX_JSON, 0, &jerr);
    assert_non_null(ctx);

    return ctx;
}


/* renders tpl; returns the status, the output in *out (caller frees) */
static int
render(const char *tpl, json_t *ctx, const kvs_jinja_opts_t *opts,
    kvs_buf_t *out, kvs_err_t *err)
{
    kvs_jinja_t  *t = NULL;
    int           rc;

    rc = kvs_jinja_compile(&t, tpl, strlen(tpl), err);
    if (rc != KVS_OK) {
        assert_null(t);
        return rc;
    }
    assert_non_null(t);
    rc = kvs_jinja_render(t, ctx, opts, out, err);
    kvs_jinja_free(t);

    return rc;
}


static kvs_jinja_opts_t
opts_test(void)
{
    kvs_jinja_opts_t  o;

    kvs_jinja_opts_default(&o);
    o.now = 1736899200;               /* 2025-01-15 00:00:00 UTC */

    return o;
}


static void
test_cases(void **state)
{
    json_t            *ctx = ctx_load();
    kvs_jinja_opts_t   o = opts_test();
    kvs_buf_t          out;
    kvs_err_t          err;
    size_t             i;
    int                bad = 0;

    (void) state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memset(&out, 0, sizeof(out));
        memset(&err, 0, sizeof(err));
        if (render(cases[i].tpl, ctx, &o, &out, &err) != KVS_OK) {
            printf("%s: failed: %s\n", cases[i].name, err.msg);
            bad++;
        } else if (out.len != strlen(cases[i].want)
                   || memcmp(out.data, cases[i].want, out.len) != 0)
        {
            printf("%s:\n  want [%s]\n  got  [%.*s]\n", cases[i].name,
                   cases[i].want, (int) out.len, (const char *) out.data);
            bad++;
        }
        kvs_buf_free(&out);
    }
    json_decref(ctx);
    assert_int_equal(bad, 0);
}


/* a compile error: its code and the message, in full */
static void
compile_fails(const char *tpl, int code, const char *msg)
{
    kvs_jinja_t  *t = (kvs_jinja_t *) 1;
    kvs_err_t     err;

    memset(&err, 0, sizeof(err));
    assert_int_equal(kvs_jinja_compile(&t, tpl, strlen(tpl), &err), code);
    assert_null(t);
    if (strcmp(err.msg, msg) != 0) {
        printf("compile of [%s]:\n  want %s\n  got  %s\n", tpl, msg,
               err.msg);
    }
    assert_string_equal(err.msg, msg);
}


static void
test_compile_errors(void **state)
{
    (void) state;
    compile_fails("{% include 'x' %}", KVS_EUNSUPPORTED,
                  "line 1: unsupported statement 'include'");
    compile_fails("a\n\n{{ x | frobnicate }}", KVS_EUNSUPPORTED,
                  "line 3: unsupported filter 'frobnicate'");
    compile_fails("{{ x is frob }}", KVS_EUNSUPPORTED,
                  "line 1: unsupported test 'frob'");
    compile_fails("{% if x %}\nabc", KVS_EFORMAT,
                  "line 2: unexpected end of template: missing 'endif' for "
                  "the block of line 1");
    compile_fails("{{ 1 + }}", KVS_EFORMAT,
                  "line 1: expected an expression, got '}}'");
    compile_fails("{% for x in y recursive %}{% endfor %}", KVS_EUNSUPPORTED,
                  "line 1: unsupported recursive for loop");
    compile_fails("x\n{% endfor %}", KVS_EFORMAT,
                  "line 2: unexpected 'endfor'");
    compile_fails("{{ 'abc }}", KVS_EFORMAT, "line 1: unterminated string");
    compile_fails("{# never closed", KVS_EFORMAT,
                  "line 1: unterminated comment");
    compile_fails("\xff", KVS_EFORMAT, "template is not UTF-8 (byte 0)");
    compile_fails("{{ f(*args) }}", KVS_EUNSUPPORTED,
                  "line 1: unsupported *args in a call");
}


static void
nesting(char *buf, size_t n, const char *open, const char *mid,
    const char *close)
{
    size_t  i, k = 0;

    for (i = 0; i < n; i++) {
        k += (size_t) sprintf(buf + k, "%s", open);
    }
    k += (size_t) sprintf(buf + k, "%s", mid);
    for (i = 0; i < n; i++) {
        k += (size_t) sprintf(buf + k, "%s", close);
    }
}


static void
test_compile_nesting(void **state)
{
    static char  buf[65536];
    kvs_jinja_t  *t = NULL;
    kvs_err_t     err;

    (void) state;
    /* deep enough to smash a stack if unbounded: refused by name */
    nesting(buf, 5000, "(", "1", ")");
    memmove(buf + 3, buf, strlen(buf) + 1);
    memcpy(buf, "{{ ", 3);
    strcat(buf, " }}");
    assert_int_equal(kvs_jinja_compile(&t, buf, strlen(buf), &err),
                     KVS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "nested too deeply"));

    nesting(buf, 2000, "{% if x %}", "y", "{% endif %}");
    assert_int_equal(kvs_jinja_compile(&t, buf, strlen(buf), &err),
                     KVS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "nested too deeply"));

    /* a modest nesting is fine */
    nesting(buf, 30, "{% if true %}", "y", "{% endif %}");
    assert_int_equal(kvs_jinja_compile(&t, buf, strlen(buf), &err), KVS_OK);
    kvs_jinja_free(t);
}


/* a render error: its code and a part of its message */
static void
render_fails(const char *tpl, int code, const char *part)
{
    json_t            *ctx = ctx_load();
    kvs_jinja_opts_t   o = opts_test();
    kvs_buf_t          out;
    kvs_err_t          err;

    memset(&out, 0, sizeof(out));
    assert_int_equal(kvs_buf_append(&out, "keep", 4), KVS_OK);
    memset(&err, 0, sizeof(err));
    assert_int_equal(render(tpl, ctx, &o, &out, &err), code);
    if (strstr(err.msg, part) == NULL) {
        printf("render of [%s]: want \"%s\" in \"%s\"\n", tpl, part,
               err.msg);
    }
    assert_non_null(strstr(err.msg, part));
    /* out is as it was */
    assert_int_equal(out.len, 4);
    assert_memory_equal(out.data, "keep", 4);
    kvs_buf_free(&out);
    json_decref(ctx);
}


static void
test_render_errors(void **state)
{
    json_t            *ctx = ctx_load();
    kvs_jinja_opts_t   o = opts_test();
    kvs_buf_t          out;
    kvs_err_t          err;

    (void) state;
    render_fails("{{ missing.x }}", KVS_EINVAL, "'missing' is undefined");
    render_fails("a\n{{ missing['x'] }}", KVS_EINVAL,
                 "line 2: 'missing' is undefined");
    render_fails("{% set x = [1] %}{% set _ = x.append(2) %}{{ x }}",
                 KVS_EINVAL, "unsafe");
    render_fails("{% set _ = d.update({'a': 1}) %}", KVS_EINVAL, "unsafe");
    render_fails("{{ 1 + 'a' }}", KVS_EINVAL, "unsupported operand types");
    render_fails("{{ missing + 1 }}", KVS_EINVAL, "'missing' is undefined");
    render_fails("{% for x in none %}{% endfor %}", KVS_EINVAL,
                 "'NoneType' object is not iterable");
    render_fails("{{ 1 // 0 }}", KVS_EINVAL, "by zero");
    render_fails("{% for a, b in [1, 2] %}{% endfor %}", KVS_EINVAL,
                 "not iterable");
    render_fails("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", KVS_EINVAL,
                 "macro 'f' takes not more than 1 argument(s)");
    render_fails("{{ 'a'() }}", KVS_EINVAL, "'str' object is not callable");
    render_fails("{{ missing|tojson }}", KVS_EINVAL, "not JSON serializable");
    render_fails("{{ [1, 2] < 'a' }}", KVS_EINVAL, "cannot order");
    render_fails("{{ 9223372036854775807 + 1 }}", KVS_ERANGE,
                 "integer overflow");
    render_fails("{{ [1]|select|length }}", KVS_EINVAL,
                 "object of type 'generator' has no len()");
    render_fails("{{ [1]|select|last }}", KVS_EINVAL, "not reversible");
    render_fails("{{ [1]|map('string')|tojson }}", KVS_EINVAL,
                 "not JSON serializable");
    render_fails("{{ {'a': 1}|indent }}", KVS_EINVAL, "indent needs a string");

    /* raise_exception: the template's message, nothing added */
    memset(&out, 0, sizeof(out));
    assert_int_equal(render("x{{ raise_exception('Only user and assistant "
                            "roles') }}", ctx, &o, &out, &err), KVS_EINVAL);
    assert_string_equal(err.msg, "Only user and assistant roles");
    assert_int_equal(out.len, 0);
    kvs_buf_free(&out);

    /* the context must be an object */
    {
        kvs_jinja_t  *t;
        json_t       *arr = json_array();

        assert_int_equal(kvs_jinja_compile(&t, "x", 1, &err), KVS_OK);
        assert_int_equal(kvs_jinja_render(t, arr, &o, &out, &err),
                         KVS_EINVAL);
        /* NULL context: no variables */
        assert_int_equal(kvs_jinja_render(t, NULL, NULL, &out, &err), KVS_OK);
        assert_int_equal(out.len, 1);
        kvs_jinja_free(t);
        json_decref(arr);
        kvs_buf_free(&out);
    }
    json_decref(ctx);
}


static void
test_limits(void **state)
{
    json_t            *ctx = ctx_load();
    kvs_jinja_opts_t   o = opts_test();
    kvs_buf_t          out;
    kvs_err_t          err;
    kvs_jinja_t       *t;
    const char        *bomb = "{% for a in range(1000) %}"
                              "{% for b in range(1000) %}"
                              "{% for c in range(1000) %}{{ c }}"
                              "{% endfor %}{% endfor %}{% endfor %}";

    (void) state;
    memset(&out, 0, sizeof(out));

    /* a loop bomb stops at the step limit */
    o.max_steps = 100000;
    o.max_output = 0;
    assert_int_equal(render(bomb, ctx, &o, &out, &err), KVS_ETOOLONG);
    assert_non_null(strstr(err.msg, "limit of 100000 steps"));
    assert_int_equal(out.len, 0);

    /* endless recursion stops at the depth limit, whatever the steps */
    o = opts_test();
    o.max_depth = 20;
    assert_int_equal(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}"
                            "{{ f(0) }}", ctx, &o, &out, &err),
                     KVS_ETOOLONG);
    assert_non_null(strstr(err.msg, "nested deeper than 20"));
    o.max_depth = 21;
    assert_int_equal(render("{% macro f(n) %}{% if n < 20 %}{{ f(n + 1) }}"
                            "{% else %}{{ n }}{% endif %}{% endmacro %}"
                            "{{ f(0) }}", ctx, &o, &out, &err), KVS_OK);
    assert_int_equal(out.len, 2);
    assert_memory_equal(out.data, "20", 2);
    out.len = 0;

    /* the caller() of a call block counts too */
    o.max_depth = 10;
    assert_int_equal(render("{% macro f() %}{% call f() %}x{% endcall %}"
                            "{% endmacro %}{{ f() }}", ctx, &o, &out, &err),
                     KVS_ETOOLONG);

    /* output: exactly at the cap is fine, one byte more is not */
    o = opts_test();
    o.max_output = 1000;
    assert_int_equal(render("{% for i in range(100) %}0123456789"
                            "{% endfor %}", ctx, &o, &out, &err), KVS_OK);
    assert_int_equal(out.len, 1000);
    out.len = 0;
    assert_int_equal(render("{% for i in range(100) %}0123456789"
                            "{% endfor %}!", ctx, &o, &out, &err),
                     KVS_ETOOLONG);
    assert_non_null(strstr(err.msg, "output passes the limit of 1000"));
    assert_int_equal(out.len, 0);

    /* memory: a string too big, or built up bit by bit */
    o = opts_test();
    o.max_memory = 1 << 20;
    assert_int_equal(render("{% set s = 'ab' * 100000000 %}", ctx, &o, &out,
                            &err), KVS_ETOOLONG);
    assert_int_equal(render("{% set ns = namespace(s='') %}"
                            "{% for i in range(100000) %}"
                            "{% set ns.s = ns.s ~ 'abcdefgh' %}{% endfor %}"
                            "{{ ns.s|length }}", ctx, &o, &out, &err),
                     KVS_ETOOLONG);
    assert_non_null(strstr(err.msg, "memory limit"));
    assert_int_equal(out.len, 0);

    /* and a template is reusable after a failed render */
    o = opts_test();
    o.max_steps = 50;
    assert_int_equal(kvs_jinja_compile(&t, bomb, strlen(bomb), &err),
                     KVS_OK);
    assert_int_equal(kvs_jinja_render(t, ctx, &o, &out, &err), KVS_ETOOLONG);
    o.max_steps = 0;                  /* none */
    {
        const char   *small = "{% for i in range(3) %}{{ i }}{% endfor %}";
        kvs_jinja_t  *t2;

        assert_int_equal(kvs_jinja_compile(&t2, small, strlen(small), &err),
                         KVS_OK);
        assert_int_equal(kvs_jinja_render(t2, ctx, &o, &out, &err), KVS_OK);
        assert_int_equal(out.len, 3);
        assert_memory_equal(out.data, "012", 3);
        kvs_jinja_free(t2);
    }
    kvs_jinja_free(t);
    kvs_buf_free(&out);
    json_decref(ctx);
}


/* the same compiled template, many renders with other data */
static void
test_reuse(void **state)
{
    const char   *tpl = "{% for m in messages %}<{{ m.role }}>{{ m.content "
                        "| trim }}{% endfor %}{% if add_generation_prompt %}"
                        "<assistant>{% endif %}";
    kvs_jinja_t  *t;
    kvs_buf_t     out;
    kvs_err_t     err;
    json_t       *ctx;
    char          want[64];
    int           i;

    (void) state;
    memset(&out, 0, sizeof(out));
    assert_int_equal(kvs_jinja_compile(&t, tpl, strlen(tpl), &err), KVS_OK);
    for (i = 0; i < 50; i++) {
        ctx = json_pack("{s:[{s:s,s:s}],s:b}", "messages", "role", "user",
                        "content", i % 2 ? " hi " : "yo",
                        "add_generation_prompt", i % 3 == 0);
        out.len = 0;
        assert_int_equal(kvs_jinja_render(t, ctx, NULL, &out, &err), KVS_OK);
        snprintf(want, sizeof(want), "<user>%s%s", i % 2 ? "hi" : "yo",
                 i % 3 == 0 ? "<assistant>" : "");
        assert_int_equal(out.len, strlen(want));
        assert_memory_equal(out.data, want, out.len);
        json_decref(ctx);
    }
    kvs_jinja_free(t);
    kvs_buf_free(&out);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_compile_errors),
        cmocka_unit_test(test_compile_nesting),
        cmocka_unit_test(test_render_errors),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_reuse),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
