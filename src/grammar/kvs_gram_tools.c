/*
 * kvs_gram_tools: a tool-call spec (kvs_grammar.h) -> the grammar of the
 * outputs a model may write for it: free text, tool calls in the
 * syntax its chat template teaches, or text then calls, as tool_choice
 * says.
 *
 * Owns the canonical form of a call per syntax (the one the fixture
 * templates show; src/api/kvs_tool_parse.c reads every output this file
 * allows back into exactly the calls written):
 *
 *   hermes        <tool_call>\n{"name": "N", "arguments": A}\n</tool_call>
 *                 with "\n" between blocks
 *   llama3        {"name": "N", "parameters": A}, maybe after
 *                 <|python_tag|>; one call (its templates teach no way to
 *                 write several)
 *   mistral       [TOOL_CALLS][{"name": "N", "arguments": A}, ...]
 *   granite       <|tool_call|>[{"name": "N", "arguments": A}, ...]
 *   firefunction   functools[{"name": "N", "arguments": A}, ...]
 *   functionary   <function=N>A</function>, blocks back to back
 *   deepseek      <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function
 *                 <｜tool▁sep｜>N\n```json\nA\n```<｜tool▁call▁end｜>
 *                 (no break after "function"), the next call after "\n"
 *                 from <｜tool▁call▁begin｜> on, then <｜tool▁calls▁end｜>
 *   functionary32 N\nA, calls joined by ">>>" (the prompt ends with
 *                 ">>>": the output's first line is the recipient); text
 *                 is "all\n" then text, maybe then ">>>" and the calls;
 *                 no tool may be named "all"
 *   llama4        {"name": "N", "parameters": A}, several back to back
 *                 (as its template writes them): the whole output
 *   commandr      Action:\n```json\n[{"tool_name": "N", "parameters":
 *                 A}, ...]\n```
 *   commandr7b    <|START_ACTION|>[{"tool_call_id": "K", "tool_name":
 *                 "N", "parameters": A}, ...]<|END_ACTION|>, K 1 to 4
 *                 digits (the template numbers calls across the chat)
 *   minicpm3      <|tool_call_start|>\n```python\nN(k=V,k2=V2)\n...
 *                 \n```\n<|tool_call_end|>: keyword arguments, each
 *                 value JSON (its template writes them with tojson); the
 *                 parameters must be a plain object of properties named
 *                 as Python identifiers (a map: no arguments)
 *
 * The name is one of the tools' names and A is that tool's parameters
 * schema (one alternative per tool), compiled with KVS_GRAM_JANSSON so
 * that jansson, which the parser uses, reads every argument back.
 *
 * Free text is "any bytes that do not contain the syntax's marker": a
 * regular language, built from the marker's KMP automaton as right-
 * recursive rules T[k] (k bytes of the marker matched) -> "" | N[k], N[k]
 * -> byte T[next]: every reference is a tail call, so the matcher's
 * stack stays one node deep and a recurring automaton state is the same
 * stack id (the mask cache hits), and N[k] cannot be empty, so it stays
 * a lazy stack top with its FIRST set.  In auto mode the byte that
 * completes the marker goes on into the calls instead: the first
 * occurrence of the marker is where the parser finds the calls
 * (functionary32: text follows its "all\n" line, and its calls may also
 * come at once, the prompt having written their ">>>").  Llama 3 has
 * no marker (its calls are the whole output): its text is what, after
 * leading whitespace, does not start with "{" or <|python_tag|>.
 *
 * Invariants: nothing in g is used before kvs_gram_finish() succeeded;
 * every json_t taken here is released on every path; errors name the
 * spec's field ("tools[2].name: ...") or keep the schema compiler's
 * message under "tools[i].parameters.".
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/kvs_gram_schema_impl.h"

#define KVS_GT_MAX_TOOLS  128
#define KVS_GT_MAX_NAME   64
#define KVS_GT_MAX_MARK   32          /* bytes; DeepSeek's is 28 */

#define KVS_GT_AUTO      0
#define KVS_GT_REQUIRED  1
#define KVS_GT_NONE      2

#define KVS_GT_LLAMA3_TAG  "<|python_tag|>"

/* DeepSeek's delimiters all start so (U+FF5C, U+2581 in UTF-8) */
#define KVS_GT_DS  "<｜tool▁"


typedef struct {
    const char  *name;                /* the spec's "syntax" */
    const char  *lead;                /* before the marker, required mode */
    const char  *marker;              /* free text never holds it; NULL:
                                         llama3 */
    const char  *rest;                /* after the marker, before a call */
    const char  *sep;                 /* between calls; NULL: one call */
    const char  *close;               /* after the last call */
    const char  *key;                 /* the arguments' key; NULL: the
                                         name outside the JSON, then: */
    const char  *name_end;            /* between the name and A */
    const char  *call_end;            /* after A */
    const char  *text_lead;           /* before text; not NULL: the calls
                                         may also come at once, without
                                         the marker (the prompt wrote
                                         it) */
    const char  *name_key;            /* the JSON key of the name */
    int          id;                  /* a "tool_call_id" of digits
                                         before the name */
    int          kwargs;              /* A as Python keyword arguments
                                         (key=JSON, ...) */
} kvs_gt_syntax_t;


static const kvs_gt_syntax_t  kvs_gt_syntaxes[] = {
    { "hermes", "", "<tool_call>", "\n", "\n</tool_call>\n<tool_call>\n",
      "\n</tool_call>", "arguments", NULL, NULL, NULL, "name", 0, 0 },
    { "llama3", "", NULL, "", NULL, "", "parameters", NULL, NULL, NULL,
      "name", 0, 0 },
    { "mistral", "", "[TOOL_CALLS]", "[", ", ", "]", "arguments", NULL,
      NULL, NULL, "name", 0, 0 },
    { "granite", "", "<|tool_call|>", "[", ", ", "]", "arguments", NULL,
      NULL, NULL, "name", 0, 0 },
    { "firefunction", " ", "functools", "[", ", ", "]", "arguments", NULL,
      NULL, NULL, "name", 0, 0 },
    { "functionary", "", "<function=", "", "<function=", "", NULL, ">",
      "</function>", NULL, "name", 0, 0 },
    { "deepseek", "", KVS_GT_DS "calls▁begin｜>",
      KVS_GT_DS "call▁begin｜>function" KVS_GT_DS "sep｜>",
      "\n" KVS_GT_DS "call▁begin｜>function" KVS_GT_DS "sep｜>",
      KVS_GT_DS "calls▁end｜>", NULL, "\n```json\n",
      "\n```" KVS_GT_DS "call▁end｜>", NULL, "name", 0, 0 },
    { "functionary32", "", ">>>", "", ">>>", "", NULL, "\n", "", "all\n",
      "name", 0, 0 },
    { "llama4", "", NULL, "", "", "", "parameters", NULL, NULL, NULL,
      "name", 0, 0 },
    { "commandr", "", "Action:", "\n```json\n[", ", ", "]\n```",
      "parameters", NULL, NULL, NULL, "tool_name", 0, 0 },
    { "commandr7b", "", "<|START_ACTION|>", "[", ", ", "]<|END_ACTION|>",
      "parameters", NULL, NULL, NULL, "tool_name", 1, 0 },
    { "minicpm3", "", "<|tool_call_start|>", "\n```python\n", "\n",
      "\n```\n<|tool_call_end|>", NULL, "(", ")", NULL, "name", 0, 1 },
};

#define KVS_GT_N_SYNTAX  (sizeof(kvs_gt_syntaxes) / sizeof(kvs_gt_syntax_t))


typedef struct {
    kvs_gram_t             *g;
    kvs_err_t              *err;
    kvs_gram_opts_t         o;
    const kvs_gt_syntax_t  *syn;
    int                     choice;
    int                     parallel;
    size_t                  n;
    const char             *names[KVS_GT_MAX_TOOLS];
    json_t                 *schemas[KVS_GT_MAX_TOOLS];   /* owned */
} kvs_gt_t;


/* ---- the spec ---------------------------------------------------------- */

static int
kvs_gt_name_ok(const char *s, size_t n)
{
    size_t  i;

    if (n == 0 || n > KVS_GT_MAX_NAME) {
        return 0;
    }

    /* OpenAI's function names, and "." and ":" (namespaced tools): none
     * needs escaping in JSON, none ends Functionary's <function=N> or
     * DeepSeek's name line */
    for (i = 0; i < n; i++) {
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')
              || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'
              || s[i] == '.' || s[i] == ':'))
        {
            return 0;
        }
    }

    return 1;
}


/* The arguments' schema: the parameters, which must describe an object
 * (the parser reads only objects as arguments); absent: any object. */
static int
kvs_gt_params(kvs_gt_t *t, size_t i, const json_t *p)
{
    const json_t  *ty;
    json_t        *s;

    if (p == NULL) {
        s = json_pack("{s:s}", "type", "object");

    } else if (!json_is_object(p)) {
        return kvs_err_set(t->err, KVS_EINVAL, "tools[%zu].parameters: must "
                           "be a JSON Schema object", i);

    } else if ((ty = json_object_get(p, "type")) != NULL) {
        if (!json_is_string(ty)
            || strcmp(json_string_value(ty), "object") != 0)
        {
            return kvs_err_set(t->err, KVS_EINVAL, "tools[%zu].parameters."
                               "type: must be \"object\" (arguments are a "
                               "JSON object)", i);
        }
        s = json_incref((json_t *) p);

    } else {
        /* a shallow copy with "type": "object": $defs stay reachable */
        s = json_copy((json_t *) p);
        if (s != NULL && json_object_set_new(s, "type",
                                             json_string("object")) != 0)
        {
            json_decref(s);
            s = NULL;
        }
    }

    if (s == NULL) {
        return kvs_err_set(t->err, KVS_ENOMEM, "tools: out of memory");
    }

    t->schemas[i] = s;

    return KVS_OK;
}


/* Keyword arguments are the members of one plain object: a combinator
 * or a value keyword at the top would apply kvs_sc_t.kwargs to the
 * wrong object. */
static int
kvs_gt_kwargs_ok(kvs_gt_t *t, size_t i)
{
    size_t       j;
    const char  *k;
    json_t      *v;

    static const char  *ok[] = {
        "type", "properties", "required", "additionalProperties",
        "description", "title", "$defs", "definitions", "$schema"
    };

    json_object_foreach(t->schemas[i], k, v) {
        for (j = 0; j < sizeof(ok) / sizeof(ok[0]); j++) {
            if (strcmp(k, ok[j]) == 0) {
                break;
            }
        }

        if (j == sizeof(ok) / sizeof(ok[0])) {
            return kvs_err_set(t->err, KVS_EINVAL, "tools[%zu].parameters."
                               "%.64s: not supported where the calls take "
                               "keyword arguments (%s)", i, k,
                               t->syn->name);
        }
    }

    return KVS_OK;
}


/* The schema compiler's message under "tools[i].parameters.". */
static int
kvs_gt_schema_err(kvs_gt_t *t, size_t i, int rc, const kvs_err_t *e)
{
    if (rc == KVS_ENOMEM) {
        return kvs_err_set(t->err, rc, "%s", e->msg);
    }

    return kvs_err_set(t->err, rc, "tools[%zu].parameters.%s", i, e->msg);
}


static int
kvs_gt_tool(kvs_gt_t *t, size_t i, const json_t *tool)
{
    int            rc;
    size_t         j;
    const char    *k;
    json_t        *v;
    kvs_err_t      e;
    kvs_gram_t     tmp;
    const json_t  *name;

    if (!json_is_object(tool)) {
        return kvs_err_set(t->err, KVS_EINVAL, "tools[%zu]: must be an "
                           "object", i);
    }

    json_object_foreach((json_t *) tool, k, v) {
        if (strcmp(k, "name") != 0 && strcmp(k, "parameters") != 0) {
            return kvs_err_set(t->err, KVS_EINVAL, "tools[%zu].%.64s: "
                               "unknown key", i, k);
        }
    }

    name = json_object_get(tool, "name");

    if (!json_is_string(name)) {
        return kvs_err_set(t->err, KVS_EINVAL, "tools[%zu].name: must be a "
                           "string", i);
    }

    if (!kvs_gt_name_ok(json_string_value(name), json_string_length(name))) {
        return kvs_err_set(t->err, KVS_EINVAL, "tools[%zu].name: must be 1 "
                           "to %d of a-z, A-Z, 0-9, '_', '-', '.', ':'", i,
                           KVS_GT_MAX_NAME);
    }

    for (j = 0; j < i; j++) {
        if (strcmp(t->names[j], json_string_value(name)) == 0) {
            return kvs_err_set(t->err, KVS_EINVAL, "tools[%zu].name: \"%s\" "
                               "is tools[%zu]'s name too", i,
                               json_string_value(name), j);
        }
    }

    if (t->syn->text_lead != NULL
        && strcmp(json_string_value(name), "all") == 0)
    {
        return kvs_err_set(t->err, KVS_EINVAL, "tools[%zu].name: \"all\" "
                           "is this syntax's recipient for text, not a "
                           "function", i);
    }

    t->names[i] = json_string_value(name);

    rc = kvs_gt_params(t, i, json_object_get(tool, "parameters"));
    if (rc != KVS_OK) {
        return rc;
    }

    if (t->syn->kwargs) {
        rc = kvs_gt_kwargs_ok(t, i);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    /* alone first: its messages, and a schema that derives nothing
     * ($ref cycles) caught for this tool rather than for the whole */
    kvs_err_clear(&e);
    rc = kvs_gram_from_schema(&tmp, t->schemas[i], &t->o, &e);
    kvs_gram_free(&tmp);

    return rc == KVS_OK ? KVS_OK : kvs_gt_schema_err(t, i, rc, &e);
}


static int
kvs_gt_spec(kvs_gt_t *t, const json_t *spec)
{
    int            rc;
    size_t         i;
    const char    *k, *s;
    json_t        *v;
    const json_t  *tools;

    if (!json_is_object(spec)) {
        return kvs_err_set(t->err, KVS_EINVAL, "tools spec: must be an "
                           "object");
    }

    json_object_foreach((json_t *) spec, k, v) {
        if (strcmp(k, "choice") != 0 && strcmp(k, "parallel") != 0
            && strcmp(k, "syntax") != 0 && strcmp(k, "tools") != 0)
        {
            return kvs_err_set(t->err, KVS_EINVAL, "%.64s: unknown key", k);
        }
    }

    v = json_object_get(spec, "choice");
    s = json_string_value(v);

    if (s == NULL) {
        return kvs_err_set(t->err, KVS_EINVAL, "choice: must be \"auto\", "
                           "\"required\" or \"none\"");
    }

    if (strcmp(s, "auto") == 0) {
        t->choice = KVS_GT_AUTO;
    } else if (strcmp(s, "required") == 0) {
        t->choice = KVS_GT_REQUIRED;
    } else if (strcmp(s, "none") == 0) {
        t->choice = KVS_GT_NONE;
    } else {
        return kvs_err_set(t->err, KVS_EINVAL, "choice: \"%.32s\" is not "
                           "\"auto\", \"required\" or \"none\"", s);
    }

    v = json_object_get(spec, "parallel");

    if (!json_is_boolean(v)) {
        return kvs_err_set(t->err, KVS_EINVAL, "parallel: must be true or "
                           "false");
    }

    t->parallel = json_is_true(v);

    s = json_string_value(json_object_get(spec, "syntax"));

    for (i = 0; s != NULL && i < KVS_GT_N_SYNTAX; i++) {
        if (strcmp(s, kvs_gt_syntaxes[i].name) == 0) {
            t->syn = &kvs_gt_syntaxes[i];
            break;
        }
    }

    if (t->syn == NULL) {
        return kvs_err_set(t->err, KVS_EINVAL, "syntax: must be one of "
                           "hermes, llama3, mistral, granite, firefunction, "
                           "functionary, deepseek, functionary32, llama4, "
                           "commandr, commandr7b, minicpm3");
    }

    tools = json_object_get(spec, "tools");

    if (!json_is_array(tools)) {
        return kvs_err_set(t->err, KVS_EINVAL, "tools: must be an array");
    }

    if (json_array_size(tools) > KVS_GT_MAX_TOOLS) {
        return kvs_err_set(t->err, KVS_EINVAL, "tools: %zu tools; at most "
                           "%d", json_array_size(tools), KVS_GT_MAX_TOOLS);
    }

    if (json_array_size(tools) == 0 && t->choice != KVS_GT_NONE) {
        return kvs_err_set(t->err, KVS_EINVAL, "tools: empty, with choice "
                           "\"%s\"", t->choice == KVS_GT_AUTO ? "auto"
                                                              : "required");
    }

    for (i = 0; i < json_array_size(tools); i++) {
        rc = kvs_gt_tool(t, i, json_array_get(tools, i));
        t->n = i + 1;                 /* schemas[i] may be set: freed */

        if (rc != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}


/* ---- rules --------------------------------------------------------------- */

/* A new rule with one alternative: lit, then ref (NONE: none), then
 * lit2. */
static int
kvs_gt_seq_rule(kvs_gt_t *t, const char *lit, uint32_t ref,
    const char *lit2, uint32_t *rule)
{
    int             rc;
    kvs_gram_seq_t  q;

    memset(&q, 0, sizeof(q));
    kvs_gram_seq_lit(&q, lit, strlen(lit));
    if (ref != KVS_SC_NONE) {
        kvs_gram_seq_ref(&q, ref);
    }
    kvs_gram_seq_lit(&q, lit2, strlen(lit2));

    rc = kvs_gram_rule_new(t->g, rule, t->err);
    if (rc == KVS_OK) {
        rc = kvs_gram_add_alt(t->g, *rule, &q, t->err);
    }

    kvs_gram_seq_free(&q);

    return rc;
}


/* Adds to rule one alternative per run of bytes with the same target:
 * [lo, hi] then a reference to to[b]; bytes whose target is NONE are
 * left out. */
static int
kvs_gt_runs(kvs_gt_t *t, uint32_t rule, const uint32_t to[256])
{
    int             rc;
    unsigned        lo, hi;
    kvs_gram_seq_t  q;

    memset(&q, 0, sizeof(q));
    rc = KVS_OK;

    for (lo = 0; lo < 256 && rc == KVS_OK; lo = hi + 1) {
        for (hi = lo; hi < 255 && to[hi + 1] == to[lo]; hi++) {
            /* the run */
        }

        if (to[lo] == KVS_SC_NONE) {
            continue;
        }

        kvs_gram_seq_reset(&q);
        kvs_gram_seq_range(&q, (uint8_t) lo, (uint8_t) hi);
        kvs_gram_seq_ref(&q, to[lo]);
        rc = kvs_gram_add_alt(t->g, rule, &q, t->err);
    }

    kvs_gram_seq_free(&q);

    return rc;
}


/* A pair (T, N): T -> "" | N, N nonempty (its alternatives added by the
 * caller).  T is what others reference. */
static int
kvs_gt_pair(kvs_gt_t *t, uint32_t *tr, uint32_t *nr)
{
    int             rc;
    kvs_gram_seq_t  q;

    memset(&q, 0, sizeof(q));

    rc = kvs_gram_rule_new(t->g, tr, t->err);
    if (rc == KVS_OK) {
        rc = kvs_gram_rule_new(t->g, nr, t->err);
    }
    if (rc == KVS_OK) {
        rc = kvs_gram_add_alt(t->g, *tr, NULL, t->err);
    }
    if (rc == KVS_OK) {
        kvs_gram_seq_ref(&q, *nr);
        rc = kvs_gram_add_alt(t->g, *tr, &q, t->err);
    }

    kvs_gram_seq_free(&q);

    return rc;
}


/*
 * Text without the marker: T[0] of its KMP automaton.  after != NONE:
 * the byte completing the marker goes on into `after` (auto mode);
 * NONE: it is refused (text only).
 */
static int
kvs_gt_text(kvs_gt_t *t, const char *mk, uint32_t after, uint32_t *rule)
{
    int       rc;
    size_t    m, k, f;
    unsigned  b;
    uint8_t   nx[KVS_GT_MAX_MARK][256];      /* 8 KiB: bytes, not words */
    uint32_t  tr[KVS_GT_MAX_MARK], nr[KVS_GT_MAX_MARK], to[256];
    size_t    fail[KVS_GT_MAX_MARK];

    m = strlen(mk);

    if (m == 0 || m >= KVS_GT_MAX_MARK) {
        /* the syntax table's, never a request's */
        return kvs_err_set(t->err, KVS_EINVAL, "tools: marker of %zu bytes",
                           m);
    }

    /* fail[k]: the longest proper border of mk[0..k] */
    fail[0] = 0;
    for (k = 1, f = 0; k < m; k++) {
        while (f > 0 && mk[k] != mk[f]) {
            f = fail[f - 1];
        }
        if (mk[k] == mk[f]) {
            f++;
        }
        fail[k] = f;
    }

    for (k = 0; k < m; k++) {
        for (b = 0; b < 256; b++) {
            if (b == (unsigned char) mk[k]) {
                nx[k][b] = (uint8_t) (k + 1);
            } else {
                nx[k][b] = k == 0 ? 0 : nx[fail[k - 1]][b];
            }
        }
    }

    for (k = 0, rc = KVS_OK; k < m && rc == KVS_OK; k++) {
        rc = kvs_gt_pair(t, &tr[k], &nr[k]);
    }

    for (k = 0; k < m && rc == KVS_OK; k++) {
        for (b = 0; b < 256; b++) {
            to[b] = nx[k][b] < m ? tr[nx[k][b]] : after;
        }
        rc = kvs_gt_runs(t, nr[k], to);
    }

    if (rc == KVS_OK) {
        *rule = tr[0];
    }

    return rc;
}


/* Llama 3's text: after any whitespace, not "{" nor <|python_tag|>
 * (kvs_tool_parse would read those as calls), then anything. */
static int
kvs_gt_llama3_text(kvs_gt_t *t, uint32_t *rule)
{
    int          rc;
    size_t       k, m;
    unsigned     b;
    uint32_t     any, anyn, t0, n0, pt[KVS_GT_MAX_MARK], pn[KVS_GT_MAX_MARK];
    uint32_t     to[256];
    const char  *tag = KVS_GT_LLAMA3_TAG;

    m = strlen(tag);

    rc = kvs_gt_pair(t, &any, &anyn);
    if (rc == KVS_OK) {
        for (b = 0; b < 256; b++) {
            to[b] = any;
        }
        rc = kvs_gt_runs(t, anyn, to);
    }
    if (rc == KVS_OK) {
        rc = kvs_gt_pair(t, &t0, &n0);
    }

    /* pt[k]: k bytes of the tag written (k = 1 .. m - 1) */
    for (k = 1; k < m && rc == KVS_OK; k++) {
        rc = kvs_gt_pair(t, &pt[k], &pn[k]);
    }

    for (k = 1; k < m && rc == KVS_OK; k++) {
        for (b = 0; b < 256; b++) {
            to[b] = any;
        }
        to[(unsigned char) tag[k]] = k + 1 < m ? pt[k + 1] : KVS_SC_NONE;
        rc = kvs_gt_runs(t, pn[k], to);
    }

    if (rc == KVS_OK) {
        /* leading whitespace is skipped by the parser: it may come,
         * and what follows it is held to the same rule */
        for (b = 0; b < 256; b++) {
            to[b] = b == ' ' || b == '\t' || b == '\n' || b == '\r' ? t0
                    : b == '{' ? KVS_SC_NONE : any;
        }
        to[(unsigned char) tag[0]] = pt[1];
        rc = kvs_gt_runs(t, n0, to);
    }

    if (rc == KVS_OK) {
        *rule = t0;
    }

    return rc;
}


/* One call of any tool: an alternative per tool, each with its own
 * arguments' grammar. */
static int
kvs_gt_call(kvs_gt_t *t, uint32_t *rule)
{
    int             rc;
    size_t          i;
    uint32_t        args, digit, digits;
    kvs_sc_t        sc, shared;
    kvs_gram_seq_t  q;
    const char     *comma, *colon;

    comma = t->o.flags & KVS_GRAM_COMPACT ? "," : ", ";
    colon = t->o.flags & KVS_GRAM_COMPACT ? ":" : ": ";

    memset(&q, 0, sizeof(q));

    /* no shared rule made yet: every one KVS_SC_NONE */
    kvs_sc_init(&shared, t->g, NULL, &t->o, t->err);

    digits = KVS_SC_NONE;
    rc = KVS_OK;

    if (t->syn->id) {
        kvs_gram_seq_range(&q, '0', '9');
        rc = kvs_gram_rule_new(t->g, &digit, t->err);
        if (rc == KVS_OK) {
            rc = kvs_gram_add_alt(t->g, digit, &q, t->err);
        }
        if (rc == KVS_OK) {
            rc = kvs_gram_repeat(t->g, digit, NULL, 1, 4, &digits, t->err);
        }
    }

    if (rc == KVS_OK) {
        rc = kvs_gram_rule_new(t->g, rule, t->err);
    }

    for (i = 0; i < t->n && rc == KVS_OK; i++) {
        kvs_sc_init(&sc, t->g, t->schemas[i], &t->o, t->err);

        /* JSON's lexical rules once for all tools: fewer rules, and the
         * same positions in every tool's strings, which is what the
         * context-independent masks are keyed by */
        sc.r_value = shared.r_value;
        sc.r_string = shared.r_string;
        sc.r_char = shared.r_char;
        sc.r_body = shared.r_body;
        sc.r_int = shared.r_int;
        sc.r_number = shared.r_number;
        sc.r_uint = shared.r_uint;

        sc.kwargs = t->syn->kwargs;
        rc = kvs_sc_schema(&sc, t->schemas[i], &args);
        free(sc.refs);
        sc.refs = NULL;
        shared = sc;

        if (rc != KVS_OK) {
            /* alone it compiled: the grammar's caps, all tools together */
            if (t->err != NULL) {
                kvs_err_t  e = *t->err;

                rc = kvs_gt_schema_err(t, i, rc, &e);
            }
            break;
        }

        kvs_gram_seq_reset(&q);

        if (t->syn->key == NULL) {
            kvs_gram_seq_lit(&q, t->names[i], strlen(t->names[i]));
            kvs_gram_seq_lit(&q, t->syn->name_end,
                             strlen(t->syn->name_end));
            kvs_gram_seq_ref(&q, args);
            kvs_gram_seq_lit(&q, t->syn->call_end,
                             strlen(t->syn->call_end));

        } else {
            kvs_gram_seq_lit(&q, "{", 1);

            if (t->syn->id) {
                kvs_gram_seq_lit(&q, "\"tool_call_id\"", 14);
                kvs_gram_seq_lit(&q, colon, strlen(colon));
                kvs_gram_seq_lit(&q, "\"", 1);
                kvs_gram_seq_ref(&q, digits);
                kvs_gram_seq_lit(&q, "\"", 1);
                kvs_gram_seq_lit(&q, comma, strlen(comma));
            }

            kvs_gram_seq_lit(&q, "\"", 1);
            kvs_gram_seq_lit(&q, t->syn->name_key, strlen(t->syn->name_key));
            kvs_gram_seq_lit(&q, "\"", 1);
            kvs_gram_seq_lit(&q, colon, strlen(colon));
            kvs_gram_seq_lit(&q, "\"", 1);
            kvs_gram_seq_lit(&q, t->names[i], strlen(t->names[i]));
            kvs_gram_seq_lit(&q, "\"", 1);
            kvs_gram_seq_lit(&q, comma, strlen(comma));
            kvs_gram_seq_lit(&q, "\"", 1);
            kvs_gram_seq_lit(&q, t->syn->key, strlen(t->syn->key));
            kvs_gram_seq_lit(&q, "\"", 1);
            kvs_gram_seq_lit(&q, colon, strlen(colon));
            kvs_gram_seq_ref(&q, args);
            kvs_gram_seq_lit(&q, "}", 1);
        }

        rc = kvs_gram_add_alt(t->g, *rule, &q, t->err);
    }

    kvs_gram_seq_free(&q);

    return rc;
}


/* After the marker: rest, one or more calls, close. */
static int
kvs_gt_after(kvs_gt_t *t, uint32_t call, uint32_t *rule)
{
    int             rc;
    uint32_t        calls;
    kvs_gram_seq_t  sep;

    memset(&sep, 0, sizeof(sep));

    if (t->syn->sep != NULL) {
        kvs_gram_seq_lit(&sep, t->syn->sep, strlen(t->syn->sep));
    }

    rc = kvs_gram_repeat(t->g, call, &sep, 1,
                         t->parallel && t->syn->sep != NULL ? UINT32_MAX : 1,
                         &calls, t->err);
    kvs_gram_seq_free(&sep);

    if (rc == KVS_OK) {
        rc = kvs_gt_seq_rule(t, t->syn->rest, calls, t->syn->close, rule);
    }

    return rc;
}


/* Functionary v3.2's: the calls at once (not none), or the text lead
 * then text (auto: maybe then the marker and the calls). */
static int
kvs_gt_lead_root(kvs_gt_t *t, uint32_t after, uint32_t *root)
{
    int             rc;
    uint32_t        text;
    kvs_gram_seq_t  q;

    text = KVS_SC_NONE;
    rc = KVS_OK;

    if (t->choice != KVS_GT_REQUIRED) {
        rc = kvs_gt_text(t, t->syn->marker,
                         t->choice == KVS_GT_AUTO ? after : KVS_SC_NONE,
                         &text);
    }

    if (rc == KVS_OK) {
        rc = kvs_gram_rule_new(t->g, root, t->err);
    }

    memset(&q, 0, sizeof(q));

    if (rc == KVS_OK && text != KVS_SC_NONE) {
        kvs_gram_seq_lit(&q, t->syn->text_lead, strlen(t->syn->text_lead));
        kvs_gram_seq_ref(&q, text);
        rc = kvs_gram_add_alt(t->g, *root, &q, t->err);
    }

    if (rc == KVS_OK && after != KVS_SC_NONE) {
        kvs_gram_seq_reset(&q);
        kvs_gram_seq_ref(&q, after);
        rc = kvs_gram_add_alt(t->g, *root, &q, t->err);
    }

    kvs_gram_seq_free(&q);

    return rc;
}


static int
kvs_gt_root(kvs_gt_t *t, uint32_t *root)
{
    int             rc;
    uint32_t        call, after, text;
    kvs_gram_seq_t  q;

    call = after = KVS_SC_NONE;
    rc = KVS_OK;

    if (t->choice != KVS_GT_NONE) {
        rc = kvs_gt_call(t, &call);
    }

    if (rc == KVS_OK && t->choice != KVS_GT_NONE && t->syn->marker != NULL) {
        rc = kvs_gt_after(t, call, &after);
    }

    if (rc != KVS_OK) {
        return rc;
    }

    if (t->syn->marker == NULL) {
        /* llama3, llama4: the call is the whole output, or text; llama4
         * may write several back to back */
        text = KVS_SC_NONE;

        if (call != KVS_SC_NONE && t->syn->sep != NULL) {
            memset(&q, 0, sizeof(q));
            kvs_gram_seq_lit(&q, t->syn->sep, strlen(t->syn->sep));
            rc = kvs_gram_repeat(t->g, call, &q, 1,
                                 t->parallel ? UINT32_MAX : 1, &call,
                                 t->err);
            kvs_gram_seq_free(&q);
        }

        if (t->choice != KVS_GT_REQUIRED) {
            rc = kvs_gt_llama3_text(t, &text);
        }

        if (rc == KVS_OK) {
            rc = kvs_gram_rule_new(t->g, root, t->err);
        }

        memset(&q, 0, sizeof(q));

        if (rc == KVS_OK && text != KVS_SC_NONE) {
            kvs_gram_seq_ref(&q, text);
            rc = kvs_gram_add_alt(t->g, *root, &q, t->err);
        }

        if (rc == KVS_OK && call != KVS_SC_NONE) {
            kvs_gram_seq_reset(&q);
            kvs_gram_seq_ref(&q, call);
            rc = kvs_gram_add_alt(t->g, *root, &q, t->err);
        }

        if (rc == KVS_OK && call != KVS_SC_NONE && t->syn->sep == NULL) {
            kvs_gram_seq_reset(&q);
            kvs_gram_seq_lit(&q, KVS_GT_LLAMA3_TAG,
                             strlen(KVS_GT_LLAMA3_TAG));
            kvs_gram_seq_ref(&q, call);
            rc = kvs_gram_add_alt(t->g, *root, &q, t->err);
        }

        kvs_gram_seq_free(&q);

        return rc;
    }

    if (t->syn->text_lead != NULL) {
        return kvs_gt_lead_root(t, after, root);
    }

    switch (t->choice) {

    case KVS_GT_REQUIRED:
        memset(&q, 0, sizeof(q));
        kvs_gram_seq_lit(&q, t->syn->lead, strlen(t->syn->lead));
        kvs_gram_seq_lit(&q, t->syn->marker, strlen(t->syn->marker));
        kvs_gram_seq_ref(&q, after);

        rc = kvs_gram_rule_new(t->g, root, t->err);
        if (rc == KVS_OK) {
            rc = kvs_gram_add_alt(t->g, *root, &q, t->err);
        }

        kvs_gram_seq_free(&q);
        return rc;

    case KVS_GT_AUTO:
        return kvs_gt_text(t, t->syn->marker, after, root);

    default:
        return kvs_gt_text(t, t->syn->marker, KVS_SC_NONE, root);
    }
}


int
kvs_gram_from_tools(kvs_gram_t *g, const json_t *spec,
    const kvs_gram_opts_t *opts, kvs_err_t *err)
{
    int        rc;
    size_t     i;
    uint32_t   root;
    kvs_gt_t  *t;

    kvs_gram_init(g, opts != NULL ? &opts->lim : NULL);

    if (spec == NULL) {
        return kvs_err_set(err, KVS_EINVAL, "no tools spec");
    }

    /* kvs_gt_t holds 2 x 128 pointers: not for the stack */
    t = calloc(1, sizeof(kvs_gt_t));
    if (t == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "tools: out of memory");
    }

    t->g = g;
    t->err = err;
    if (opts != NULL) {
        t->o = *opts;
    }
    t->o.flags |= KVS_GRAM_JANSSON;

    rc = kvs_gt_spec(t, spec);

    if (rc == KVS_OK) {
        rc = kvs_gt_root(t, &root);
    }

    if (rc == KVS_OK) {
        rc = kvs_gram_finish(g, root, err);
    }

    for (i = 0; i < t->n; i++) {
        json_decref(t->schemas[i]);
    }

    free(t);

    return rc;
}
