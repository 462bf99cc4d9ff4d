/*
 * kvs_chat_jinja: building apply_chat_template's context from a chat
 * request and rendering a model's own template with it (the context is
 * described in kvs_chat_jinja.h).
 *
 * The context shares the client's message objects and tools where it
 * gives them as sent (a reference each) and makes a shallow copy of a
 * message, a tool call or its function only to change a field, so
 * building it costs a few allocations per message (and the parse of each
 * call's arguments) and never writes to the request's tree; it is
 * released before returning.
 *
 * The guard looks at every string and key the client sent in messages
 * and tools, and at what a call's arguments parse to (the template is
 * given that, and tojson writes "\u003c" back as "<"), so no client
 * text that the template may write can hold a control token's text.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvs_chat_jinja.h"

/* the probe's text: no template writes it of its own */
#define KVS_CJ_PROBE  "kvs-part-probe-5e1f"

/* bytes of a guard error's path; a longer one names its parent */
#define KVS_CJ_PATH   192


void
kvs_chat_jinja_limits(kvs_jinja_opts_t *limits)
{
    kvs_jinja_opts_default(limits);
    limits->max_steps = KVS_CJ_STEPS;
    limits->max_output = KVS_CJ_OUTPUT;
    limits->max_depth = KVS_CJ_DEPTH;
    limits->max_memory = KVS_CJ_MEMORY;
}


/* The render's limits: the base ones grown with the request, so a big
 * conversation renders while a small one cannot make its thread spin. */
static void
kvs_chat_jinja_scale(const kvs_chat_jinja_t *cj, size_t n_msgs,
    size_t bytes, size_t nodes, kvs_jinja_opts_t *opts)
{
    *opts = cj->limits;
    opts->max_steps += (uint64_t) n_msgs * KVS_CJ_STEPS_PER_MSG
                       + (uint64_t) nodes * KVS_CJ_STEPS_PER_NODE;
    opts->max_output += n_msgs * KVS_CJ_OUTPUT_PER_MSG
                        + bytes * KVS_CJ_OUTPUT_PER_BYTE
                        + nodes * KVS_CJ_OUTPUT_PER_NODE;
    opts->max_memory += n_msgs * KVS_CJ_MEMORY_PER_MSG
                        + bytes * KVS_CJ_MEMORY_PER_BYTE
                        + nodes * KVS_CJ_MEMORY_PER_NODE;
    opts->now = (int64_t) time(NULL);
}


/* Whether the template walks content parts: given one text part, it
 * renders the part's text and not the list's repr. */
static int
kvs_chat_jinja_walks_parts(kvs_chat_jinja_t *cj)
{
    int        rc;
    json_t    *msgs;
    kvs_buf_t  out;
    kvs_err_t  err;

    msgs = json_pack("[{s:s, s:[{s:s, s:s}]}]", "role", "user", "content",
                     "type", "text", "text", KVS_CJ_PROBE);
    if (msgs == NULL) {
        return 0;
    }

    memset(&out, 0, sizeof(out));
    cj->parts = 1;

    rc = kvs_chat_jinja_render(cj, msgs, &(kvs_chat_args_t) {
                                   .add_generation_prompt = 1 },
                               &out, &err);

    rc = rc == KVS_OK
         && memmem(out.data, out.len, KVS_CJ_PROBE, strlen(KVS_CJ_PROBE))
            != NULL
         && memmem(out.data, out.len, "'type'", 6) == NULL;

    cj->parts = 0;
    kvs_buf_free(&out);
    json_decref(msgs);

    return rc;
}


int
kvs_chat_jinja_compile(kvs_chat_jinja_t **out, const char *src, size_t len,
    const kvs_jinja_opts_t *limits, kvs_err_t *err)
{
    int                rc;
    kvs_chat_jinja_t  *cj;

    *out = NULL;

    cj = calloc(1, sizeof(kvs_chat_jinja_t));
    if (cj == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    if (limits != NULL) {
        cj->limits = *limits;

    } else {
        kvs_chat_jinja_limits(&cj->limits);
    }

    rc = kvs_jinja_compile(&cj->tpl, src, len, err);
    if (rc != KVS_OK) {
        free(cj);
        return rc;
    }

    cj->parts = kvs_chat_jinja_walks_parts(cj);
    *out = cj;

    return KVS_OK;
}


void
kvs_chat_jinja_free(kvs_chat_jinja_t *cj)
{
    if (cj == NULL) {
        return;
    }

    kvs_jinja_free(cj->tpl);
    free(cj);
}


/* The parts' texts joined, for a template that takes content strings. */
static json_t *
kvs_chat_jinja_join(const json_t *parts)
{
    size_t         i;
    json_t        *s;
    kvs_buf_t      b;
    const json_t  *part, *t;

    memset(&b, 0, sizeof(b));

    json_array_foreach(parts, i, part) {
        t = json_object_get(part, "text");
        if (kvs_buf_append(&b, json_string_value(t), json_string_length(t))
            != KVS_OK)
        {
            kvs_buf_free(&b);
            return NULL;
        }
    }

    s = json_stringn_nocheck(b.len ? (const char *) b.data : "", b.len);
    kvs_buf_free(&b);

    return s;
}


/*
 * What a call's arguments (OpenAI's JSON text) parse to when that is an
 * object, as vLLM gives them to templates; NULL otherwise (not JSON, or
 * another JSON value: the template gets the string), *nomem set when
 * parsing ran out of memory.
 */
static json_t *
kvs_chat_jinja_args(const json_t *a, int *nomem)
{
    json_t        *v;
    json_error_t   e;

    *nomem = 0;

    if (!json_is_string(a)) {
        return NULL;
    }

    v = json_loadb(json_string_value(a), json_string_length(a), 0, &e);
    if (v == NULL) {
        *nomem = json_error_code(&e) == json_error_out_of_memory;
        return NULL;
    }

    if (!json_is_object(v)) {
        json_decref(v);
        return NULL;
    }

    return v;
}


/* A tool call as the template sees it: call itself (a new reference), or
 * a copy whose function's arguments are the mapping they parse to. */
static json_t *
kvs_chat_jinja_call(json_t *call)
{
    int      nomem;
    json_t  *f, *args, *c, *fc;

    f = json_object_get(call, "function");
    args = kvs_chat_jinja_args(json_object_get(f, "arguments"), &nomem);

    if (args == NULL) {
        return nomem ? NULL : json_incref(call);
    }

    c = json_copy(call);
    fc = json_copy(f);

    if (c == NULL || fc == NULL
        || json_object_set_new(fc, "arguments", args) != 0)
    {
        json_decref(c);
        json_decref(fc);
        json_decref(args);
        return NULL;
    }

    if (json_object_set_new(c, "function", fc) != 0) {
        json_decref(c);
        return NULL;
    }

    return c;
}


/* msg's tool_calls, each as the template sees it, into m (msg's copy). */
static int
kvs_chat_jinja_calls(json_t *m, const json_t *calls)
{
    size_t   j;
    json_t  *a, *c, *call;

    a = json_array();
    if (a == NULL) {
        return -1;
    }

    json_array_foreach(calls, j, call) {
        c = kvs_chat_jinja_call(call);
        if (c == NULL || json_array_append_new(a, c) != 0) {
            json_decref(a);
            return -1;
        }
    }

    return json_object_set_new(m, "tool_calls", a);
}


/* A null tool field: absent in OpenAI's API, so left out (a template's
 * `'tool_calls' in message` must not see it). */
static int
kvs_chat_jinja_has_null(const json_t *msg)
{
    return json_is_null(json_object_get(msg, "tool_calls"))
           || json_is_null(json_object_get(msg, "tool_call_id"))
           || json_is_null(json_object_get(msg, "name"));
}


/* The message as the template sees it: msg itself (a new reference) or a
 * shallow copy with role, content or tool fields changed. */
static json_t *
kvs_chat_jinja_message(const kvs_chat_jinja_t *cj, json_t *msg)
{
    int      developer, content_as_is;
    json_t  *r, *c, *m, *s, *calls;

    r = json_object_get(msg, "role");
    c = json_object_get(msg, "content");
    calls = json_object_get(msg, "tool_calls");

    developer = strcmp(json_string_value(r), "developer") == 0;
    content_as_is = json_is_string(c) || (json_is_array(c) && cj->parts);

    if (!developer && content_as_is && !json_is_array(calls)
        && !kvs_chat_jinja_has_null(msg))
    {
        return json_incref(msg);
    }

    m = json_copy(msg);
    if (m == NULL) {
        return NULL;
    }

    if (developer
        && json_object_set_new(m, "role", json_string("system")) != 0)
    {
        json_decref(m);
        return NULL;
    }

    if (!content_as_is) {
        s = json_is_array(c) ? kvs_chat_jinja_join(c) : json_string("");
        if (s == NULL || json_object_set_new(m, "content", s) != 0) {
            json_decref(m);
            return NULL;
        }
    }

    if (json_is_null(calls)) {
        json_object_del(m, "tool_calls");
    }

    if (json_is_null(json_object_get(m, "tool_call_id"))) {
        json_object_del(m, "tool_call_id");
    }

    if (json_is_null(json_object_get(m, "name"))) {
        json_object_del(m, "name");
    }

    if (json_is_array(calls) && kvs_chat_jinja_calls(m, calls) != 0) {
        json_decref(m);
        return NULL;
    }

    return m;
}


/* Bytes of the messages' contents. */
static size_t
kvs_chat_jinja_bytes(const json_t *messages)
{
    size_t         i, j, n;
    const json_t  *msg, *c, *part;

    n = 0;

    json_array_foreach(messages, i, msg) {
        c = json_object_get(msg, "content");
        n += json_string_length(c);

        json_array_foreach(c, j, part) {
            n += json_string_length(json_object_get(part, "text"));
        }
    }

    return n;
}


/* Values and string bytes (keys' too) of j, for the render's limits. */
static void
kvs_chat_jinja_weigh(const json_t *j, size_t *nodes, size_t *bytes)
{
    size_t         i;
    const char    *key;
    const json_t  *v;

    (*nodes)++;

    if (json_is_string(j)) {
        *bytes += json_string_length(j);

    } else if (json_is_array(j)) {
        json_array_foreach(j, i, v) {
            kvs_chat_jinja_weigh(v, nodes, bytes);
        }

    } else if (json_is_object(j)) {
        /* jansson's iteration takes no const; nothing here writes */
        json_object_foreach((json_t *) j, key, v) {
            *bytes += strlen(key);
            kvs_chat_jinja_weigh(v, nodes, bytes);
        }
    }
}


static json_t *
kvs_chat_jinja_str(const char *p, size_t n)
{
    return p != NULL ? json_stringn_nocheck(p, n) : json_string("");
}


static json_t *
kvs_chat_jinja_context(const kvs_chat_jinja_t *cj, const json_t *messages,
    const kvs_chat_args_t *args)
{
    size_t   i;
    json_t  *ctx, *msgs, *msg, *m;

    ctx = json_object();
    msgs = json_array();
    if (ctx == NULL || msgs == NULL
        || json_object_set_new(ctx, "messages", msgs) != 0)
    {
        json_decref(ctx);
        return NULL;
    }

    json_array_foreach(messages, i, msg) {
        m = kvs_chat_jinja_message(cj, msg);
        if (m == NULL || json_array_append_new(msgs, m) != 0) {
            json_decref(ctx);
            return NULL;
        }
    }

    /* none when absent, as apply_chat_template() passes it; the caller's
     * array is only read */
    if (json_object_set_new(ctx, "tools", args->tools != NULL
                                          ? json_incref((json_t *) args->tools)
                                          : json_null()) != 0
        || json_object_set_new(ctx, "add_generation_prompt",
                            json_boolean(args->add_generation_prompt)) != 0
        || json_object_set_new(ctx, "bos_token",
                               kvs_chat_jinja_str(args->bos, args->bos_len))
           != 0
        || json_object_set_new(ctx, "eos_token",
                               kvs_chat_jinja_str(args->eos, args->eos_len))
           != 0)
    {
        json_decref(ctx);
        return NULL;
    }

    return ctx;
}


int
kvs_chat_jinja_render(const kvs_chat_jinja_t *cj,
    const json_t *messages, const kvs_chat_args_t *args, kvs_buf_t *out,
    kvs_err_t *err)
{
    int               rc;
    size_t            i, nodes, bytes;
    json_t           *ctx;
    kvs_err_t         e;
    const json_t     *m;
    kvs_jinja_opts_t  opts;

    ctx = kvs_chat_jinja_context(cj, messages, args);
    if (ctx == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "chat template: out of memory");
    }

    /* tools and calls as given: their schemas and arguments are what a
     * template prints at length */
    nodes = 0;
    bytes = kvs_chat_jinja_bytes(messages);

    if (args->tools != NULL) {
        kvs_chat_jinja_weigh(args->tools, &nodes, &bytes);
    }

    json_array_foreach(json_object_get(ctx, "messages"), i, m) {
        if (json_object_get(m, "tool_calls") != NULL) {
            kvs_chat_jinja_weigh(json_object_get(m, "tool_calls"), &nodes,
                                 &bytes);
        }
    }

    kvs_chat_jinja_scale(cj, json_array_size(messages), bytes, nodes, &opts);

    rc = kvs_jinja_render(cj->tpl, ctx, &opts, out, &e);
    json_decref(ctx);

    if (rc == KVS_ETOOLONG) {
        /* a limit of the template's work, not the prompt's length: the
         * request asked for too much rendering */
        return kvs_err_set(err, KVS_EINVAL, "chat template: %s", e.msg);
    }

    if (rc != KVS_OK && err != NULL) {
        *err = e;
    }

    return rc;
}


/* The control token whose text starts at p[0..n), or -1. */
static int32_t
kvs_chat_jinja_control_at(const kvs_vocab_t *v, const char *p, size_t n)
{
    uint32_t            k, b;
    const kvs_token_t  *t;

    b = (uint8_t) p[0];

    for (k = v->special_start[b]; k < v->special_start[b + 1]; k++) {
        t = &v->tokens[v->special[k]];
        if (t->type == KVS_TOKT_CONTROL && t->len <= n
            && memcmp(t->text, p, t->len) == 0)
        {
            return v->special[k];
        }
    }

    return -1;
}


/* A walk over the client's strings, with the path of where it is. */
typedef struct {
    const kvs_vocab_t  *v;
    kvs_err_t          *err;
    size_t              len;          /* of path */
    int                 fixed;        /* inside parsed arguments: the
                                         path stays the string's */
    char                path[KVS_CJ_PATH];
} kvs_cj_guard_t;


/* p[0..n) (a value, or a key of the object at path) holds no control
 * token's text. */
static int
kvs_chat_jinja_guard_text(kvs_cj_guard_t *g, const char *p, size_t n,
    int key)
{
    size_t              j;
    int32_t             id;
    const kvs_token_t  *t;

    for (j = 0; j < n; j++) {
        id = kvs_chat_jinja_control_at(g->v, p + j, n - j);
        if (id < 0) {
            continue;
        }

        t = &g->v->tokens[id];

        return kvs_err_set(g->err, KVS_EINVAL, "%s: %s the control token "
                           "text '%.*s', which the model's chat template "
                           "cannot keep as plain text", g->path,
                           key ? "a key holds" : "holds", (int) t->len,
                           t->text);
    }

    return KVS_OK;
}


/* Extends the path by a member's key, when it is a plain name that fits
 * (so the error's path stays one a client can read as a field); returns
 * the length to put back. */
static size_t
kvs_chat_jinja_guard_key(kvs_cj_guard_t *g, const char *key)
{
    size_t  k, n, len;

    len = g->len;
    n = strlen(key);

    if (g->fixed || n == 0 || len + 1 + n >= sizeof(g->path)) {
        return len;
    }

    for (k = 0; k < n; k++) {
        if (!((key[k] >= 'a' && key[k] <= 'z')
              || (key[k] >= 'A' && key[k] <= 'Z')
              || (key[k] >= '0' && key[k] <= '9') || key[k] == '_'))
        {
            return len;
        }
    }

    g->path[len] = '.';
    memcpy(g->path + len + 1, key, n + 1);
    g->len = len + 1 + n;

    return len;
}


/* Extends the path by an element's index. */
static size_t
kvs_chat_jinja_guard_index(kvs_cj_guard_t *g, size_t i)
{
    int     n;
    size_t  len;

    len = g->len;

    if (g->fixed) {
        return len;
    }

    n = snprintf(g->path + len, sizeof(g->path) - len, "[%zu]", i);
    if (n < 0 || (size_t) n >= sizeof(g->path) - len) {
        g->path[len] = '\0';
        return len;
    }

    g->len = len + (size_t) n;

    return len;
}


static void
kvs_chat_jinja_guard_back(kvs_cj_guard_t *g, size_t len)
{
    g->len = len;
    g->path[len] = '\0';
}


static int
kvs_chat_jinja_guard_walk(kvs_cj_guard_t *g, const json_t *j)
{
    int            rc;
    size_t         i, back;
    const char    *key;
    const json_t  *v;

    if (json_is_string(j)) {
        return kvs_chat_jinja_guard_text(g, json_string_value(j),
                                         json_string_length(j), 0);
    }

    if (json_is_array(j)) {
        json_array_foreach(j, i, v) {
            back = kvs_chat_jinja_guard_index(g, i);
            rc = kvs_chat_jinja_guard_walk(g, v);
            kvs_chat_jinja_guard_back(g, back);

            if (rc != KVS_OK) {
                return rc;
            }
        }

        return KVS_OK;
    }

    if (!json_is_object(j)) {
        return KVS_OK;
    }

    /* jansson's iteration takes no const; nothing here writes */
    json_object_foreach((json_t *) j, key, v) {
        rc = kvs_chat_jinja_guard_text(g, key, strlen(key), 1);
        if (rc != KVS_OK) {
            return rc;
        }

        back = kvs_chat_jinja_guard_key(g, key);
        rc = kvs_chat_jinja_guard_walk(g, v);
        kvs_chat_jinja_guard_back(g, back);

        if (rc != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}


/* What messages[i]'s calls' arguments parse to, as the template gets
 * them (the strings as sent were walked with the message). */
static int
kvs_chat_jinja_guard_args(kvs_cj_guard_t *g, const json_t *msg, size_t i)
{
    int            rc, nomem;
    size_t         j;
    json_t        *args;
    const json_t  *call, *calls;

    calls = json_object_get(msg, "tool_calls");

    json_array_foreach(calls, j, call) {
        args = kvs_chat_jinja_args(json_object_get(json_object_get(call,
                                       "function"), "arguments"), &nomem);
        if (args == NULL) {
            if (nomem) {
                return kvs_err_set(g->err, KVS_ENOMEM, "chat template: out "
                                   "of memory");
            }

            continue;
        }

        g->len = (size_t) snprintf(g->path, sizeof(g->path),
                                   "messages[%zu].tool_calls[%zu].function."
                                   "arguments", i, j);
        g->fixed = 1;
        rc = kvs_chat_jinja_guard_walk(g, args);
        g->fixed = 0;
        json_decref(args);

        if (rc != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}


int
kvs_chat_jinja_guard(const kvs_vocab_t *v, const json_t *messages,
    const json_t *tools, kvs_err_t *err)
{
    int             rc;
    size_t          i;
    const json_t   *msg;
    kvs_cj_guard_t  g;

    g.v = v;
    g.err = err;
    g.fixed = 0;

    if (tools != NULL) {
        g.len = (size_t) snprintf(g.path, sizeof(g.path), "tools");
        rc = kvs_chat_jinja_guard_walk(&g, tools);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    json_array_foreach(messages, i, msg) {
        g.len = (size_t) snprintf(g.path, sizeof(g.path), "messages[%zu]",
                                  i);
        rc = kvs_chat_jinja_guard_walk(&g, msg);
        if (rc == KVS_OK) {
            rc = kvs_chat_jinja_guard_args(&g, msg, i);
        }

        if (rc != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}
