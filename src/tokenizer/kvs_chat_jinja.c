/*
 * kvs_chat_jinja: building apply_chat_template's context from a chat
 * request and rendering a model's own template with it (the context is
 * described in kvs_chat_jinja.h).
 *
 * The context shares the client's message objects where it gives them as
 * sent (a reference each) and makes a shallow copy of a message only to
 * change a field, so building it costs a few allocations per message and
 * never writes to the request's tree; it is released before returning.
 */

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvs_chat_jinja.h"

/* the probe's text: no template writes it of its own */
#define KVS_CJ_PROBE  "kvs-part-probe-5e1f"


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
    size_t bytes, kvs_jinja_opts_t *opts)
{
    *opts = cj->limits;
    opts->max_steps += (uint64_t) n_msgs * KVS_CJ_STEPS_PER_MSG;
    opts->max_output += n_msgs * KVS_CJ_OUTPUT_PER_MSG
                        + bytes * KVS_CJ_OUTPUT_PER_BYTE;
    opts->max_memory += n_msgs * KVS_CJ_MEMORY_PER_MSG
                        + bytes * KVS_CJ_MEMORY_PER_BYTE;
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


/* The message as the template sees it: msg itself (a new reference) or a
 * shallow copy with role or content changed. */
static json_t *
kvs_chat_jinja_message(const kvs_chat_jinja_t *cj, json_t *msg)
{
    json_t  *r, *c, *m, *s;

    r = json_object_get(msg, "role");
    c = json_object_get(msg, "content");

    if (json_is_string(r) && strcmp(json_string_value(r), "developer") != 0
        && json_is_string(c))
    {
        return json_incref(msg);
    }

    if (json_is_array(c) && cj->parts
        && strcmp(json_string_value(r), "developer") != 0)
    {
        return json_incref(msg);
    }

    m = json_copy(msg);
    if (m == NULL) {
        return NULL;
    }

    if (strcmp(json_string_value(r), "developer") == 0
        && json_object_set_new(m, "role", json_string("system")) != 0)
    {
        json_decref(m);
        return NULL;
    }

    if (json_is_string(c) || (json_is_array(c) && cj->parts)) {
        return m;
    }

    s = json_is_array(c) ? kvs_chat_jinja_join(c) : json_string("");
    if (s == NULL || json_object_set_new(m, "content", s) != 0) {
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

    if (json_object_set_new(ctx, "add_generation_prompt",
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
    json_t           *ctx;
    kvs_err_t         e;
    kvs_jinja_opts_t  opts;

    ctx = kvs_chat_jinja_context(cj, messages, args);
    if (ctx == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "chat template: out of memory");
    }

    kvs_chat_jinja_scale(cj, json_array_size(messages),
                         kvs_chat_jinja_bytes(messages), &opts);

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


static int
kvs_chat_jinja_guard_text(const kvs_vocab_t *v, const json_t *s, size_t i,
    long part, kvs_err_t *err)
{
    size_t              j, n;
    int32_t             id;
    const char         *p;
    const kvs_token_t  *t;

    p = json_string_value(s);
    n = json_string_length(s);

    for (j = 0; j < n; j++) {
        id = kvs_chat_jinja_control_at(v, p + j, n - j);
        if (id < 0) {
            continue;
        }

        t = &v->tokens[id];

        if (part < 0) {
            return kvs_err_set(err, KVS_EINVAL, "messages[%zu].content: "
                               "holds the control token text '%.*s', which "
                               "the model's chat template cannot keep as "
                               "plain text", i, (int) t->len, t->text);
        }

        return kvs_err_set(err, KVS_EINVAL, "messages[%zu].content[%ld]."
                           "text: holds the control token text '%.*s', "
                           "which the model's chat template cannot keep "
                           "as plain text", i, part, (int) t->len,
                           t->text);
    }

    return KVS_OK;
}


int
kvs_chat_jinja_guard(const kvs_vocab_t *v, const json_t *messages,
    kvs_err_t *err)
{
    int            rc;
    size_t         i, j;
    const json_t  *msg, *c, *part;

    json_array_foreach(messages, i, msg) {
        c = json_object_get(msg, "content");

        if (json_is_string(c)) {
            rc = kvs_chat_jinja_guard_text(v, c, i, -1, err);
            if (rc != KVS_OK) {
                return rc;
            }

            continue;
        }

        json_array_foreach(c, j, part) {
            rc = kvs_chat_jinja_guard_text(v, json_object_get(part, "text"),
                                           i, (long) j, err);
            if (rc != KVS_OK) {
                return rc;
            }
        }
    }

    return KVS_OK;
}
