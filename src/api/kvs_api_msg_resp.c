/*
 * kvs_api_msg_resp: Anthropic Messages responses written from the chat
 * route's choices: the whole message, the server-sent events of a
 * stream, count_tokens' answer and the error objects, with the shared
 * JSON writer (kvs_api_jw.h).
 *
 * Invariants: everything written is valid JSON whatever the bytes (the
 * writer replaces invalid UTF-8); a tool call's input is written only
 * when its arguments parse as a JSON object (KVS_EINVAL otherwise,
 * nothing written); a failed call leaves the buffer at its length on
 * entry.  A stream opens at most one content block at a time, closes
 * it before the next one and before message_delta, and numbers blocks
 * from 0 in order; every event is "event: NAME\ndata: JSON\n\n".
 */

#include <string.h>

#include <jansson.h>

#include "kvs_api_jw.h"
#include "kvs_api_msg.h"


static const char  *kvs_api_msg_reasons[] = {
    "end_turn", "max_tokens", "stop_sequence", "tool_use", "refusal"
};


kvs_api_msg_stop_t
kvs_api_msg_stop_reason(const kvs_api_choice_t *c, int stop_seq)
{
    if (c->finish == KVS_FINISH_LENGTH) {
        return KVS_API_MSG_MAX_TOKENS;
    }

    /* kvserve_guard output=stop: Anthropic's name for a policy stop */
    if (c->finish == KVS_FINISH_CONTENT_FILTER) {
        return KVS_API_MSG_REFUSAL;
    }

    if (c->tool_finish) {
        return KVS_API_MSG_TOOL_USE;
    }

    return stop_seq >= 0 ? KVS_API_MSG_STOP_SEQUENCE : KVS_API_MSG_END_TURN;
}


void
kvs_api_msg_usage(kvs_api_msg_usage_t *mu, const kvs_api_usage_t *u)
{
    uint64_t  reused;

    reused = (uint64_t) u->cached_tokens + u->cache_creation_tokens;

    mu->cache_read = u->cached_tokens;
    mu->cache_creation = u->cache_creation_tokens;
    mu->input_tokens = u->prompt_tokens > reused
                       ? (uint32_t) (u->prompt_tokens - reused) : 0;
    mu->output_tokens = u->completion_tokens;
}


static void
kvs_api_msg_usage_json(kvs_jw_t *w, const kvs_api_msg_usage_t *u,
    uint32_t output_tokens)
{
    kvs_jw_lit(w, "\"usage\":{\"input_tokens\":");
    kvs_jw_u64(w, u->input_tokens);
    kvs_jw_lit(w, ",\"cache_creation_input_tokens\":");
    kvs_jw_u64(w, u->cache_creation);
    kvs_jw_lit(w, ",\"cache_read_input_tokens\":");
    kvs_jw_u64(w, u->cache_read);
    kvs_jw_lit(w, ",\"output_tokens\":");
    kvs_jw_u64(w, output_tokens);
    kvs_jw_lit(w, "}");
}


/* "stop_reason":...,"stop_sequence":... */
static void
kvs_api_msg_stop_json(kvs_jw_t *w, kvs_api_msg_stop_t reason,
    const kvs_api_req_t *req, int stop_seq)
{
    kvs_jw_lit(w, "\"stop_reason\":\"");
    kvs_jw_lit(w, kvs_api_msg_reasons[reason]);
    kvs_jw_lit(w, "\",\"stop_sequence\":");

    if (reason == KVS_API_MSG_STOP_SEQUENCE && req != NULL && stop_seq >= 0
        && (uint32_t) stop_seq < req->n_stop)
    {
        kvs_jw_str(w, req->stop[stop_seq].ptr, req->stop[stop_seq].len);

    } else {
        kvs_jw_lit(w, "null");
    }
}


/* The head of a message: id through "content":[ */
static void
kvs_api_msg_head(kvs_jw_t *w, const kvs_api_resp_head_t *h)
{
    kvs_jw_lit(w, "{\"id\":");
    kvs_jw_str(w, h->id, h->id_len);
    kvs_jw_lit(w, ",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
    kvs_jw_str(w, h->model, h->model_len);
    kvs_jw_lit(w, ",\"content\":[");
}


/* "toolu_" for the chat route's "call_" */
static void
kvs_api_msg_tool_id(kvs_jw_t *w, const char *id)
{
    size_t  len;

    len = strlen(id);

    if (len > 5 && memcmp(id, "call_", 5) == 0) {
        kvs_jw_lit(w, "\"toolu_");
        kvs_jw_put(w, id + 5, len - 5);
        kvs_jw_lit(w, "\"");
        return;
    }

    kvs_jw_str(w, id, len);
}


/* The arguments of each call must be a JSON object: written as they are
 * (the grammar made them) as a tool_use block's input. */
static int
kvs_api_msg_calls_check(const kvs_api_choice_t *c, kvs_err_t *err)
{
    size_t         i;
    json_t        *j;
    json_error_t   je;

    for (i = 0; i < c->n_calls; i++) {
        j = json_loadb(c->calls[i].args != NULL ? c->calls[i].args : "",
                       c->calls[i].args_len, 0, &je);

        if (!json_is_object(j)) {
            json_decref(j);
            return kvs_err_set(err, KVS_EINVAL, "tool call %zu: its "
                               "arguments are not a JSON object", i);
        }

        json_decref(j);
    }

    return KVS_OK;
}


int
kvs_api_msg_body(kvs_buf_t *out, const kvs_api_resp_head_t *h,
    const kvs_api_choice_t *c, const kvs_api_msg_usage_t *u,
    const kvs_api_req_t *req, int stop_seq, kvs_err_t *err)
{
    int        n;
    size_t     i, len0;
    kvs_jw_t   w;

    if (!kvs_finish_answered(c->finish)) {
        return kvs_err_set(err, KVS_EINVAL, "message: finish \"%s\" has no "
                           "stop_reason", kvs_finish_name(c->finish));
    }

    if (kvs_api_msg_calls_check(c, err) != KVS_OK) {
        return KVS_EINVAL;
    }

    len0 = out->len;
    w.b = out;
    w.rc = KVS_OK;
    n = 0;

    kvs_api_msg_head(&w, h);

    if (c->text != NULL && c->len > 0) {
        kvs_jw_lit(&w, "{\"type\":\"text\",\"text\":");
        kvs_jw_str(&w, c->text, c->len);
        kvs_jw_lit(&w, "}");
        n++;
    }

    for (i = 0; i < c->n_calls; i++) {
        kvs_jw_lit(&w, n++ ? ",{\"type\":\"tool_use\",\"id\":"
                           : "{\"type\":\"tool_use\",\"id\":");
        kvs_api_msg_tool_id(&w, c->calls[i].id);
        kvs_jw_lit(&w, ",\"name\":");
        kvs_jw_str(&w, c->calls[i].name, strlen(c->calls[i].name));
        kvs_jw_lit(&w, ",\"input\":");
        kvs_jw_put(&w, c->calls[i].args, c->calls[i].args_len);
        kvs_jw_lit(&w, "}");
    }

    kvs_jw_lit(&w, "],");
    kvs_api_msg_stop_json(&w, kvs_api_msg_stop_reason(c, stop_seq), req,
                          stop_seq);
    kvs_jw_lit(&w, ",");
    kvs_api_msg_usage_json(&w, u, u->output_tokens);
    kvs_jw_lit(&w, "}");

    if (kvs_jw_end(&w, len0) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "message: out of memory");
    }

    return KVS_OK;
}


int
kvs_api_msg_count_json(kvs_buf_t *out, uint32_t n)
{
    size_t    len0;
    kvs_jw_t  w;

    len0 = out->len;
    w.b = out;
    w.rc = KVS_OK;

    kvs_jw_lit(&w, "{\"input_tokens\":");
    kvs_jw_u64(&w, n);
    kvs_jw_lit(&w, "}");

    return kvs_jw_end(&w, len0);
}


/* ---- the stream ---------------------------------------------------------- */

/* "event: name\ndata: {"type":"name"" and the caller goes on */
static void
kvs_api_msg_event(kvs_jw_t *w, const char *name)
{
    kvs_jw_lit(w, "event: ");
    kvs_jw_lit(w, name);
    kvs_jw_lit(w, "\ndata: {\"type\":\"");
    kvs_jw_lit(w, name);
    kvs_jw_lit(w, "\"");
}


static void
kvs_api_msg_index(kvs_jw_t *w, uint32_t index)
{
    kvs_jw_lit(w, ",\"index\":");
    kvs_jw_u64(w, index);
}


static void
kvs_api_msg_start(kvs_api_msg_stream_t *st, kvs_jw_t *w,
    const kvs_api_resp_head_t *h)
{
    kvs_api_msg_event(w, "message_start");
    kvs_jw_lit(w, ",\"message\":");
    kvs_api_msg_head(w, h);
    kvs_jw_lit(w, "],\"stop_reason\":null,\"stop_sequence\":null,");
    kvs_api_msg_usage_json(w, &st->usage, 0);
    kvs_jw_lit(w, "}}\n\n");
    st->started = 1;
}


static void
kvs_api_msg_close(kvs_api_msg_stream_t *st, kvs_jw_t *w)
{
    if (!st->open) {
        return;
    }

    kvs_api_msg_event(w, "content_block_stop");
    kvs_api_msg_index(w, st->index);
    kvs_jw_lit(w, "}\n\n");
    st->open = 0;
    st->index++;
}


/* content_block_start of a text block (call NULL) or a tool_use block,
 * then the stream's one ping after its first block's start. */
static void
kvs_api_msg_open(kvs_api_msg_stream_t *st, kvs_jw_t *w,
    const kvs_api_tool_call_t *call)
{
    kvs_api_msg_close(st, w);

    kvs_api_msg_event(w, "content_block_start");
    kvs_api_msg_index(w, st->index);

    if (call == NULL) {
        kvs_jw_lit(w, ",\"content_block\":{\"type\":\"text\",\"text\":\"\"}"
                      "}\n\n");

    } else {
        kvs_jw_lit(w, ",\"content_block\":{\"type\":\"tool_use\",\"id\":");
        kvs_api_msg_tool_id(w, call->id);
        kvs_jw_lit(w, ",\"name\":");
        kvs_jw_str(w, call->name, strlen(call->name));
        kvs_jw_lit(w, ",\"input\":{}}}\n\n");
    }

    st->open = 1;
    st->tool = call != NULL;

    if (!st->pinged) {
        kvs_jw_lit(w, "event: ping\ndata: {\"type\":\"ping\"}\n\n");
        st->pinged = 1;
    }
}


static void
kvs_api_msg_delta(kvs_api_msg_stream_t *st, kvs_jw_t *w, const char *type,
    const char *key, const char *s, size_t len)
{
    kvs_api_msg_event(w, "content_block_delta");
    kvs_api_msg_index(w, st->index);
    kvs_jw_lit(w, ",\"delta\":{\"type\":\"");
    kvs_jw_lit(w, type);
    kvs_jw_lit(w, "\",\"");
    kvs_jw_lit(w, key);
    kvs_jw_lit(w, "\":");
    kvs_jw_str(w, s, len);
    kvs_jw_lit(w, "}}\n\n");
}


int
kvs_api_msg_sse(kvs_api_msg_stream_t *st, kvs_buf_t *out,
    const kvs_api_resp_head_t *h, const kvs_api_choice_t *c,
    kvs_err_t *err)
{
    size_t                      i, len0;
    kvs_jw_t                    w;
    const kvs_api_tool_call_t  *t;

    for (i = 0; i < c->n_calls; i++) {
        if (c->calls[i].id == NULL && (!st->open || !st->tool)) {
            return kvs_err_set(err, KVS_EINVAL, "stream: arguments of a "
                               "tool call whose head was not sent");
        }
    }

    len0 = out->len;
    w.b = out;
    w.rc = KVS_OK;

    if (!st->started) {
        kvs_api_msg_start(st, &w, h);
    }

    if (c->text != NULL && c->len > 0) {
        if (!st->open || st->tool) {
            kvs_api_msg_open(st, &w, NULL);
        }

        kvs_api_msg_delta(st, &w, "text_delta", "text", c->text, c->len);
    }

    for (i = 0; i < c->n_calls; i++) {
        t = &c->calls[i];

        if (t->id != NULL) {
            kvs_api_msg_open(st, &w, t);
        }

        if (t->args_len > 0) {
            kvs_api_msg_delta(st, &w, "input_json_delta", "partial_json",
                              t->args, t->args_len);
        }
    }

    if (c->finish != KVS_FINISH_NONE) {
        kvs_api_msg_close(st, &w);
        st->ended = 1;
        st->finish = c->finish;
        st->tool_finish = c->tool_finish ? 1 : 0;
    }

    if (kvs_jw_end(&w, len0) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "stream: out of memory");
    }

    return KVS_OK;
}


int
kvs_api_msg_sse_end(kvs_api_msg_stream_t *st, kvs_buf_t *out,
    const kvs_api_resp_head_t *h, uint32_t output_tokens,
    const kvs_api_req_t *req, int stop_seq, kvs_err_t *err)
{
    size_t            len0;
    kvs_jw_t          w;
    kvs_api_choice_t  c;

    memset(&c, 0, sizeof(c));
    c.finish = st->finish;
    c.tool_finish = st->tool_finish;

    len0 = out->len;
    w.b = out;
    w.rc = KVS_OK;

    if (!st->started) {
        kvs_api_msg_start(st, &w, h);
    }

    kvs_api_msg_close(st, &w);

    kvs_api_msg_event(&w, "message_delta");
    kvs_jw_lit(&w, ",\"delta\":{");
    kvs_api_msg_stop_json(&w, kvs_api_msg_stop_reason(&c, stop_seq), req,
                          stop_seq);
    kvs_jw_lit(&w, "},");
    kvs_api_msg_usage_json(&w, &st->usage, output_tokens);
    kvs_jw_lit(&w, "}\n\n");

    kvs_api_msg_event(&w, "message_stop");
    kvs_jw_lit(&w, "}\n\n");

    if (kvs_jw_end(&w, len0) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "stream: out of memory");
    }

    return KVS_OK;
}


/* ---- errors -------------------------------------------------------------- */

int
kvs_api_msg_status(int status)
{
    return status == 503 ? 529 : status;
}


const char *
kvs_api_msg_error_type(int status)
{
    switch (status) {
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 503:
    case 529:
        return "overloaded_error";
    default:
        return status >= 500 ? "api_error" : "invalid_request_error";
    }
}


static void
kvs_api_msg_error(kvs_jw_t *w, int status, const char *message)
{
    kvs_jw_lit(w, "{\"type\":\"error\",\"error\":{\"type\":\"");
    kvs_jw_lit(w, kvs_api_msg_error_type(status));
    kvs_jw_lit(w, "\",\"message\":");
    kvs_jw_str(w, message != NULL ? message : "",
               message != NULL ? strlen(message) : 0);
    kvs_jw_lit(w, "}}");
}


/* the error object, as an "event: error" when event is set */
static int
kvs_api_msg_error_out(kvs_buf_t *out, int status, const char *message,
    int event)
{
    size_t    len0;
    kvs_jw_t  w;

    len0 = out->len;
    w.b = out;
    w.rc = KVS_OK;

    kvs_jw_lit(&w, event ? "event: error\ndata: " : "");
    kvs_api_msg_error(&w, status, message);
    kvs_jw_lit(&w, event ? "\n\n" : "");

    return kvs_jw_end(&w, len0);
}


int
kvs_api_msg_error_json(kvs_buf_t *out, int status, const char *message)
{
    return kvs_api_msg_error_out(out, status, message, 0);
}


int
kvs_api_msg_error_event(kvs_buf_t *out, int status, const char *message)
{
    return kvs_api_msg_error_out(out, status, message, 1);
}


int
kvs_api_msg_stop_which(const kvs_api_req_t *req, const char *tail,
    size_t len)
{
    int       best;
    uint32_t  k;

    best = -1;

    for (k = 0; k < req->n_stop; k++) {
        if (req->stop[k].len <= len
            && memcmp(tail, req->stop[k].ptr, req->stop[k].len) == 0
            && (best < 0 || req->stop[k].len < req->stop[best].len))
        {
            best = (int) k;
        }
    }

    return best;
}
