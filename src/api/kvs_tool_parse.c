/*
 * kvs_tool_parse: generated text -> content and tool calls, for the
 * syntaxes kvs_tool_parse.h lists, and the detection of a template's
 * syntax.
 *
 * Invariants: the parser never reads past text[len] (text need not be
 * NUL-terminated), never fails on any input but for memory, and returns
 * either every call the output holds or none (the whole output as
 * content, less FUNCTIONARY32's "all\n" recipient line).  JSON is first
 * delimited by kvs_tool_json_end() (a scanner
 * that knows strings and brackets, so markers inside strings are
 * content of the strings), then parsed by jansson on that span alone.
 */

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kvs_tool_parse_impl.h"

#define KVS_TOOL_JSON_DEPTH  512

/* DeepSeek's delimiters: single tokens of its vocabulary, here as the
 * UTF-8 text its templates write (U+FF5C and U+2581 in them) */
#define KVS_TOOL_DS_OPEN   "<｜tool▁calls▁begin｜>"
#define KVS_TOOL_DS_CALL   "<｜tool▁call▁begin｜>"
#define KVS_TOOL_DS_SEP    "<｜tool▁sep｜>"
#define KVS_TOOL_DS_END    "<｜tool▁call▁end｜>"
#define KVS_TOOL_DS_CLOSE  "<｜tool▁calls▁end｜>"


typedef struct {
    const char  *open;                /* marker before the calls */
    const char  *close;               /* after each call, or NULL */
    int          array;               /* the calls are one JSON array */
    int          repeat;              /* open ... close again per call */
} kvs_tool_form_t;


/* Indexed by kvs_tool_syntax_t; LLAMA3, LLAMA4, DEEPSEEK, FUNCTIONARY32
 * and the Command R pair have their own code, their entries only give
 * the marker that kvs_tool_parse_hold() holds. */
static const kvs_tool_form_t  kvs_tool_forms[KVS_TOOL_SYN_N] = {
    { NULL, NULL, 0, 0 },
    { "<tool_call>", "</tool_call>", 0, 1 },
    { "<|python_tag|>", NULL, 0, 0 },
    { "[TOOL_CALLS]", NULL, 1, 0 },
    { "<|tool_call|>", NULL, 1, 0 },
    { "functools", NULL, 1, 0 },
    { "<function=", "</function>", 0, 1 },
    { KVS_TOOL_DS_OPEN, NULL, 0, 0 },
    { ">>>", NULL, 0, 0 },
    { "<|python_tag|>", NULL, 0, 0 },
    { "Action:", NULL, 1, 0 },
    { "<|START_ACTION|>", NULL, 1, 0 },
    { "<|tool_call_start|>", NULL, 0, 0 },
};

static const char  *kvs_tool_names[KVS_TOOL_SYN_N] = {
    "none", "hermes", "llama3", "mistral", "granite", "firefunction",
    "functionary", "deepseek", "functionary32", "llama4", "commandr",
    "commandr7b", "minicpm3"
};


const char *
kvs_tool_marker(kvs_tool_syntax_t syn)
{
    return (unsigned) syn < KVS_TOOL_SYN_N ? kvs_tool_forms[syn].open : NULL;
}


const char *
kvs_tool_find(const char *s, size_t len, const char *needle)
{
    size_t  n, i;

    n = strlen(needle);

    for (i = 0; n <= len && i <= len - n; i++) {
        if (s[i] == needle[0] && memcmp(s + i, needle, n) == 0) {
            return s + i;
        }
    }

    return NULL;
}


kvs_tool_syntax_t
kvs_tool_syntax_detect(const char *tpl, size_t len)
{
    /* most specific first: Functionary's template also names
     * <|python_tag|>, Hermes-on-Llama's names "parameters" */
    if (kvs_tool_find(tpl, len, KVS_TOOL_DS_OPEN) != NULL) {
        return KVS_TOOL_SYN_DEEPSEEK;
    }

    if (kvs_tool_find(tpl, len, "<|tool_call_start|>") != NULL) {
        return KVS_TOOL_SYN_MINICPM3;
    }

    if (kvs_tool_find(tpl, len, "<|START_ACTION|>") != NULL) {
        return KVS_TOOL_SYN_COMMANDR7B;
    }

    /* Command R's tool_use template asks for "Action:" and a json list
     * of "tool_name"s */
    if (kvs_tool_find(tpl, len, "Action:") != NULL
        && kvs_tool_find(tpl, len, "\"tool_name\"") != NULL)
    {
        return KVS_TOOL_SYN_COMMANDR;
    }

    /* Llama 4's headers, and its JSON call format in the tools prompt */
    if (kvs_tool_find(tpl, len, "<|header_start|>") != NULL
        && kvs_tool_find(tpl, len, "\"parameters\"") != NULL)
    {
        return KVS_TOOL_SYN_LLAMA4;
    }

    if (kvs_tool_find(tpl, len, "[TOOL_CALLS]") != NULL) {
        return KVS_TOOL_SYN_MISTRAL;
    }

    if (kvs_tool_find(tpl, len, "<|tool_call|>") != NULL) {
        return KVS_TOOL_SYN_GRANITE;
    }

    if (kvs_tool_find(tpl, len, "functools[") != NULL) {
        return KVS_TOOL_SYN_FIREFUNC;
    }

    /* Functionary v3.2's system prompt teaches its recipient lines */
    if (kvs_tool_find(tpl, len, ">>>${recipient}") != NULL) {
        return KVS_TOOL_SYN_FUNCTIONARY32;
    }

    if (kvs_tool_find(tpl, len, "<function=") != NULL) {
        return KVS_TOOL_SYN_FUNCTIONARY;
    }

    if (kvs_tool_find(tpl, len, "<tool_call>") != NULL) {
        return KVS_TOOL_SYN_HERMES;
    }

    if (kvs_tool_find(tpl, len, "<|start_header_id|>") != NULL
        && (kvs_tool_find(tpl, len, "<|python_tag|>") != NULL
            || kvs_tool_find(tpl, len, "\"parameters\"") != NULL))
    {
        return KVS_TOOL_SYN_LLAMA3;
    }

    return KVS_TOOL_SYN_NONE;
}


const char *
kvs_tool_syntax_name(kvs_tool_syntax_t syn)
{
    return (unsigned) syn < KVS_TOOL_SYN_N ? kvs_tool_names[syn] : "?";
}


/* JSON extent. */

int
kvs_tool_is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}


size_t
kvs_tool_skip_ws(const char *s, size_t len, size_t i)
{
    while (i < len && kvs_tool_is_ws(s[i])) {
        i++;
    }

    return i;
}


int
kvs_tool_json_end(const char *text, size_t len, size_t *end)
{
    size_t  i, depth;
    char    c, stack[KVS_TOOL_JSON_DEPTH];

    if (len == 0) {
        return KVS_ETOOLONG;
    }

    c = text[0];

    if (c != '{' && c != '[' && c != '"') {
        /* a scalar: its characters up to a delimiter */
        for (i = 0; i < len; i++) {
            c = text[i];

            if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')
                  || c == '-' || c == '+' || c == '.' || c == 'E'))
            {
                break;
            }
        }

        if (i == 0) {
            return KVS_EFORMAT;
        }

        if (i == len) {
            return KVS_ETOOLONG;
        }

        *end = i;
        return KVS_OK;
    }

    depth = 0;

    for (i = 0; i < len; i++) {
        c = text[i];

        if (c == '"') {
            for (i++; i < len && text[i] != '"'; i++) {
                if (text[i] == '\\') {
                    i++;
                }
            }

            if (i >= len) {
                return KVS_ETOOLONG;
            }

            if (depth == 0) {
                *end = i + 1;
                return KVS_OK;
            }

            continue;
        }

        if (c == '{' || c == '[') {
            if (depth == KVS_TOOL_JSON_DEPTH) {
                return KVS_EFORMAT;
            }

            stack[depth++] = c == '{' ? '}' : ']';
            continue;
        }

        if (c == '}' || c == ']') {
            if (depth == 0 || stack[depth - 1] != c) {
                return KVS_EFORMAT;
            }

            if (--depth == 0) {
                *end = i + 1;
                return KVS_OK;
            }
        }
    }

    return KVS_ETOOLONG;
}


/* Calls. */

/* Appends the call in obj (a JSON object) to out; KVS_EFORMAT when it is
 * not one.  name_given: Functionary's, outside the JSON (obj is then the
 * arguments themselves).  cohere: the name is "tool_name", the id
 * "tool_call_id". */
int
kvs_tool_add(kvs_tool_parsed_t *out, json_t *obj, const char *name_given,
    size_t name_len, int cohere)
{
    const char       *nkey, *idkey;
    char             *name, *args;
    size_t            n;
    json_t           *a, *parsed;
    const char       *k;
    json_t           *v;
    kvs_tool_call_t  *calls;

    if (!json_is_object(obj)) {
        return KVS_EFORMAT;
    }

    a = NULL;
    nkey = cohere ? "tool_name" : "name";
    idkey = cohere ? "tool_call_id" : "id";

    if (name_given != NULL) {
        a = obj;

    } else {
        json_object_foreach(obj, k, v) {
            if (strcmp(k, nkey) == 0 || strcmp(k, idkey) == 0) {
                continue;
            }

            if ((strcmp(k, "arguments") == 0 || strcmp(k, "parameters") == 0)
                && a == NULL)
            {
                a = v;
                continue;
            }

            return KVS_EFORMAT;
        }

        v = json_object_get(obj, nkey);

        if (!json_is_string(v) || json_string_length(v) == 0) {
            return KVS_EFORMAT;
        }

        name_given = json_string_value(v);
        name_len = json_string_length(v);

        if (memchr(name_given, '\0', name_len) != NULL) {
            return KVS_EFORMAT;
        }
    }

    parsed = NULL;

    if (json_is_string(a)) {
        /* arguments as a string of JSON, as OpenAI's own wire has them */
        parsed = json_loadb(json_string_value(a), json_string_length(a),
                            JSON_REJECT_DUPLICATES, NULL);
        a = parsed;

        if (a == NULL) {
            return KVS_EFORMAT;
        }
    }

    if (a != NULL && !json_is_object(a)) {
        json_decref(parsed);
        return KVS_EFORMAT;
    }

    if (a != NULL) {
        args = json_dumps(a, JSON_COMPACT | JSON_PRESERVE_ORDER);

    } else {
        args = strdup("{}");
    }

    json_decref(parsed);

    name = malloc(name_len + 1);
    n = out->n_calls + 1;
    calls = realloc(out->calls, n * sizeof(kvs_tool_call_t));

    if (calls != NULL) {
        out->calls = calls;
    }

    if (args == NULL || name == NULL || calls == NULL) {
        free(args);
        free(name);
        return KVS_ENOMEM;
    }

    memcpy(name, name_given, name_len);
    name[name_len] = '\0';

    calls[n - 1].name = name;
    calls[n - 1].arguments = args;
    calls[n - 1].arguments_len = strlen(args);
    out->n_calls = n;

    return KVS_OK;
}


/* One JSON value at text[*i..len), parsed; *i moves past it. */
int
kvs_tool_json_at(const char *text, size_t len, size_t *i, json_t **out)
{
    int     rc;
    size_t  end;

    rc = kvs_tool_json_end(text + *i, len - *i, &end);
    if (rc != KVS_OK) {
        return KVS_EFORMAT;
    }

    /* any value: the callers check its shape (a keyword argument's
     * value may be a scalar) */
    *out = json_loadb(text + *i, end, JSON_REJECT_DUPLICATES
                      | JSON_DECODE_ANY, NULL);
    if (*out == NULL) {
        return KVS_EFORMAT;
    }

    *i += end;

    return KVS_OK;
}


/* The calls in a JSON array or object: each element a call. */
int
kvs_tool_add_value(kvs_tool_parsed_t *out, json_t *v, int cohere)
{
    int     rc;
    size_t  j;

    if (!json_is_array(v)) {
        return kvs_tool_add(out, v, NULL, 0, cohere);
    }

    if (json_array_size(v) == 0) {
        return KVS_EFORMAT;
    }

    for (j = 0; j < json_array_size(v); j++) {
        rc = kvs_tool_add(out, json_array_get(v, j), NULL, 0, cohere);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}


/* A name written outside JSON.  strict (DeepSeek's, which ends at a
 * newline): nor white space, '`' or control bytes, so that a stray line
 * of text is not taken for one. */
int
kvs_tool_name_ok(const char *s, size_t n, int strict)
{
    size_t         i;
    unsigned char  c;

    if (n == 0) {
        return 0;
    }

    for (i = 0; i < n; i++) {
        c = (unsigned char) s[i];

        if (c == '"' || c == '<'
            || (strict && (c <= ' ' || c == '`' || c == 0x7f)))
        {
            return 0;
        }
    }

    return 1;
}


/* text[*i..) starts with lit: *i moves past it. */
int
kvs_tool_lit(const char *text, size_t len, size_t *i, const char *lit)
{
    size_t  n;

    n = strlen(lit);

    if (len - *i < n || memcmp(text + *i, lit, n) != 0) {
        return 0;
    }

    *i += n;

    return 1;
}


/* From the marker at text[i]: the calls of a marker-led syntax, to the
 * end of the text. */
static int
kvs_tool_parse_marked(kvs_tool_syntax_t syn, const char *text, size_t len,
    size_t i, kvs_tool_parsed_t *out)
{
    int                     rc;
    size_t                  n, name_at;
    json_t                 *v;
    const char             *q = NULL;
    const kvs_tool_form_t  *f;

    f = &kvs_tool_forms[syn];

    do {
        n = strlen(f->open);

        if (len - i < n || memcmp(text + i, f->open, n) != 0) {
            return KVS_EFORMAT;
        }

        i += n;
        name_at = i;

        if (syn == KVS_TOOL_SYN_FUNCTIONARY) {
            /* <function=NAME>{args}</function> */
            q = memchr(text + i, '>', len - i);
            if (q == NULL || q == text + i) {
                return KVS_EFORMAT;
            }

            i = (size_t) (q - text) + 1;
        }

        i = kvs_tool_skip_ws(text, len, i);

        rc = kvs_tool_json_at(text, len, &i, &v);
        if (rc != KVS_OK) {
            return rc;
        }

        if (syn == KVS_TOOL_SYN_FUNCTIONARY) {
            n = (size_t) (q - (text + name_at));
            rc = kvs_tool_name_ok(text + name_at, n, 0)
                 ? kvs_tool_add(out, v, text + name_at, n, 0) : KVS_EFORMAT;

        } else {
            rc = f->array && !json_is_array(v)
                 ? KVS_EFORMAT : kvs_tool_add_value(out, v, 0);
        }

        json_decref(v);

        if (rc != KVS_OK) {
            return rc;
        }

        i = kvs_tool_skip_ws(text, len, i);

        if (f->close != NULL) {
            n = strlen(f->close);

            if (len - i < n || memcmp(text + i, f->close, n) != 0) {
                return KVS_EFORMAT;
            }

            i = kvs_tool_skip_ws(text, len, i + n);
        }

    } while (f->repeat && i < len);

    return i == len ? KVS_OK : KVS_EFORMAT;
}


/* One call whose arguments are the JSON object at text[*i..len): named
 * name[n] (NULL: the object holds its name), appended to out; *i moves
 * past the object. */
static int
kvs_tool_call_at(const char *text, size_t len, size_t *i, const char *name,
    size_t n, kvs_tool_parsed_t *out)
{
    int      rc;
    json_t  *v;

    rc = kvs_tool_json_at(text, len, i, &v);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_tool_add(out, v, name, n, 0);
    json_decref(v);

    return rc;
}


/* DeepSeek, from its marker at text[i]: calls, each
 * <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```
 * <｜tool▁call▁end｜>, then <｜tool▁calls▁end｜> and nothing more. */
static int
kvs_tool_parse_deepseek(const char *text, size_t len, size_t i,
    kvs_tool_parsed_t *out)
{
    int      rc, fence;
    size_t   name_at, n;

    if (!kvs_tool_lit(text, len, &i, KVS_TOOL_DS_OPEN)) {
        return KVS_EFORMAT;
    }

    for ( ;; ) {
        i = kvs_tool_skip_ws(text, len, i);

        /* "function" is the only type the templates write */
        if (!kvs_tool_lit(text, len, &i, KVS_TOOL_DS_CALL)
            || !kvs_tool_lit(text, len, &i, "function")
            || !kvs_tool_lit(text, len, &i, KVS_TOOL_DS_SEP))
        {
            return KVS_EFORMAT;
        }

        name_at = i;

        while (i < len && text[i] != '\n') {
            i++;
        }

        n = i - name_at;

        if (i == len || !kvs_tool_name_ok(text + name_at, n, 1)) {
            return KVS_EFORMAT;
        }

        i = kvs_tool_skip_ws(text, len, i);

        /* the templates fence the arguments; a model may not */
        fence = kvs_tool_lit(text, len, &i, "```");
        if (fence) {
            (void) kvs_tool_lit(text, len, &i, "json");
            i = kvs_tool_skip_ws(text, len, i);
        }

        rc = kvs_tool_call_at(text, len, &i, text + name_at, n, out);
        if (rc != KVS_OK) {
            return rc;
        }

        i = kvs_tool_skip_ws(text, len, i);

        if (fence && !kvs_tool_lit(text, len, &i, "```")) {
            return KVS_EFORMAT;
        }

        i = kvs_tool_skip_ws(text, len, i);

        if (!kvs_tool_lit(text, len, &i, KVS_TOOL_DS_END)) {
            return KVS_EFORMAT;
        }

        i = kvs_tool_skip_ws(text, len, i);

        if (kvs_tool_lit(text, len, &i, KVS_TOOL_DS_CLOSE)) {
            return kvs_tool_skip_ws(text, len, i) == len ? KVS_OK
                                                         : KVS_EFORMAT;
        }
    }
}


/* Functionary v3.2, from text[i] (after "all\n" text and its ">>>", or
 * the output's start): calls NAME\n{...}, joined by ">>>". */
static int
kvs_tool_parse_f32(const char *text, size_t len, size_t i,
    kvs_tool_parsed_t *out)
{
    int      rc;
    size_t   name_at, n;

    for ( ;; ) {
        name_at = i;

        while (i < len && text[i] != '\n') {
            i++;
        }

        n = i - name_at;

        /* "all" is the recipient of text, never a function */
        if (i == len || !kvs_tool_name_ok(text + name_at, n, 1)
            || (n == 3 && memcmp(text + name_at, "all", 3) == 0))
        {
            return KVS_EFORMAT;
        }

        i = kvs_tool_skip_ws(text, len, i);

        rc = kvs_tool_call_at(text, len, &i, text + name_at, n, out);
        if (rc != KVS_OK) {
            return rc;
        }

        i = kvs_tool_skip_ws(text, len, i);

        if (i == len) {
            return KVS_OK;
        }

        if (!kvs_tool_lit(text, len, &i, ">>>")) {
            return KVS_EFORMAT;
        }
    }
}


/* Llama 3: the output is calls separated by ";", maybe after the tag;
 * back_to_back (Llama 4): or by nothing but whitespace. */
static int
kvs_tool_parse_llama3(const char *text, size_t len, int back_to_back,
    kvs_tool_parsed_t *out)
{
    int      rc;
    size_t   i, n;

    i = kvs_tool_skip_ws(text, len, 0);
    n = strlen(kvs_tool_forms[KVS_TOOL_SYN_LLAMA3].open);

    if (len - i >= n
        && memcmp(text + i, kvs_tool_forms[KVS_TOOL_SYN_LLAMA3].open, n) == 0)
    {
        i = kvs_tool_skip_ws(text, len, i + n);
    }

    for ( ;; ) {
        if (i == len || text[i] != '{') {
            return KVS_EFORMAT;
        }

        rc = kvs_tool_call_at(text, len, &i, NULL, 0, out);
        if (rc != KVS_OK) {
            return rc;
        }

        i = kvs_tool_skip_ws(text, len, i);

        if (i == len) {
            return KVS_OK;
        }

        if (back_to_back && text[i] == '{') {
            continue;
        }

        if (text[i] != ';') {
            return KVS_EFORMAT;
        }

        i = kvs_tool_skip_ws(text, len, i + 1);

        if (i == len) {
            return KVS_OK;            /* a trailing ";" */
        }
    }
}


void
kvs_tool_parsed_free(kvs_tool_parsed_t *p)
{
    size_t  i;

    for (i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }

    free(p->calls);
    p->calls = NULL;
    p->n_calls = 0;
}


int
kvs_tool_parse(kvs_tool_syntax_t syn, const char *text, size_t len,
    kvs_tool_parsed_t *out, kvs_err_t *err)
{
    int          rc;
    size_t       at;
    const char  *m;

    memset(out, 0, sizeof(*out));
    out->content_len = len;

    if ((unsigned) syn >= KVS_TOOL_SYN_N) {
        return kvs_err_set(err, KVS_EINVAL, "tool syntax %d: unknown",
                           (int) syn);
    }

    if (syn == KVS_TOOL_SYN_NONE || len == 0) {
        return KVS_OK;
    }

    if (syn == KVS_TOOL_SYN_LLAMA3 || syn == KVS_TOOL_SYN_LLAMA4) {
        at = 0;
        rc = kvs_tool_parse_llama3(text, len, syn == KVS_TOOL_SYN_LLAMA4,
                                   out);

    } else if (syn == KVS_TOOL_SYN_FUNCTIONARY32) {
        /* text for "all", then maybe calls after ">>>" (text holds no
         * JSON to scan: the first ">>>" ends it); or calls at once */
        at = 0;

        if (len >= 4 && memcmp(text, "all\n", 4) == 0) {
            out->content_at = 4;
            m = kvs_tool_find(text + 4, len - 4, ">>>");
            if (m == NULL) {
                return KVS_OK;
            }

            at = (size_t) (m - text);
        }

        rc = kvs_tool_parse_f32(text, len, at == 0 ? 0 : at + 3, out);

    } else {
        out->content_at = kvs_tool_parse_skip(syn, text, len);
        m = kvs_tool_find(text, len, kvs_tool_forms[syn].open);
        if (m == NULL) {
            at = len;
            rc = KVS_EFORMAT;

        } else {
            at = (size_t) (m - text);
            rc = syn == KVS_TOOL_SYN_DEEPSEEK
                 ? kvs_tool_parse_deepseek(text, len, at, out)
                 : syn == KVS_TOOL_SYN_COMMANDR
                   || syn == KVS_TOOL_SYN_COMMANDR7B
                 ? kvs_tool_parse_cohere(syn, text, len, at, out)
                 : syn == KVS_TOOL_SYN_MINICPM3
                 ? kvs_tool_parse_mc3(text, len, at, out)
                 : kvs_tool_parse_marked(syn, text, len, at, out);
        }
    }

    if (rc == KVS_ENOMEM) {
        kvs_tool_parsed_free(out);
        return kvs_err_set(err, KVS_ENOMEM, "tool calls: out of memory");
    }

    if (rc != KVS_OK || out->n_calls == 0) {
        /* all or nothing: malformed calls are the model's text */
        kvs_tool_parsed_free(out);
        out->content_len = len;

    } else {
        while (at > out->content_at && kvs_tool_is_ws(text[at - 1])) {
            at--;
        }

        out->content_len = at;
    }

    if (syn == KVS_TOOL_SYN_COMMANDR7B) {
        kvs_tool_r7_trim(text, out);
    }

    return KVS_OK;
}


/* The bytes of text[len] before open, or before a tail that may
 * become open when more comes. */
size_t
kvs_tool_hold_marker(const char *open, const char *text, size_t len)
{
    size_t       n, k;
    const char  *m;

    m = kvs_tool_find(text, len, open);

    if (m != NULL) {
        return (size_t) (m - text);
    }

    n = strlen(open);

    for (k = n - 1; k > 0; k--) {
        if (k <= len && memcmp(text + len - k, open, k) == 0) {
            return len - k;
        }
    }

    return len;
}


/* text[len] is a proper beginning of lit */
int
kvs_tool_prefix(const char *text, size_t len, const char *lit)
{
    return len < strlen(lit) && memcmp(text, lit, len) == 0;
}


size_t
kvs_tool_parse_hold(kvs_tool_syntax_t syn, const char *text, size_t len)
{
    size_t  i;

    if ((unsigned) syn >= KVS_TOOL_SYN_N || syn == KVS_TOOL_SYN_NONE) {
        return len;
    }

    if (syn == KVS_TOOL_SYN_FUNCTIONARY32) {
        /* until "all\n" is there, the output may be calls; after it,
         * text up to a ">>>" */
        if (len < 4 || memcmp(text, "all\n", 4) != 0) {
            return 0;
        }

        return 4 + kvs_tool_hold_marker(">>>", text + 4, len - 4);
    }

    if (syn == KVS_TOOL_SYN_COMMANDR7B) {
        return kvs_tool_r7_hold(text, len);
    }

    if (syn == KVS_TOOL_SYN_LLAMA3 || syn == KVS_TOOL_SYN_LLAMA4) {
        /* calls are the whole output: text that may still become one is
         * held until it cannot (its first non-space is neither "{" nor
         * the tag's "<") */
        i = kvs_tool_skip_ws(text, len, 0);

        if (i == len || text[i] == '{' || text[i] == '<') {
            return 0;
        }

        return len;
    }

    /* a marker's beginning at the very end may be completed by what
     * comes next: held too */
    return kvs_tool_hold_marker(kvs_tool_forms[syn].open, text, len);
}


size_t
kvs_tool_parse_hold_text(kvs_tool_syntax_t syn, const char *text,
    size_t len)
{
    if ((syn == KVS_TOOL_SYN_FUNCTIONARY32 && kvs_tool_prefix(text, len,
                                                              "all\n"))
        || (syn == KVS_TOOL_SYN_COMMANDR7B
            && kvs_tool_r7_opening(text, len)))
    {
        return 0;
    }

    return len;
}


size_t
kvs_tool_parse_skip(kvs_tool_syntax_t syn, const char *text, size_t len)
{
    if (syn == KVS_TOOL_SYN_COMMANDR7B) {
        return kvs_tool_r7_skip(text, len);
    }

    return syn == KVS_TOOL_SYN_FUNCTIONARY32 && len >= 4
           && memcmp(text, "all\n", 4) == 0 ? 4 : 0;
}
