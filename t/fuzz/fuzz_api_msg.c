/*
 * fuzz_api_msg: libFuzzer target for Anthropic's Messages request parser
 * (kvs_api_msg_parse, `make fuzz`).  Every input is parsed as a Messages
 * body and as a count_tokens body.  A parse either fails with a
 * well-formed error (a known status, a UTF-8 message, Anthropic's error
 * body valid JSON, a request that owns nothing) or gives a chat request
 * whose fields are in their documented ranges (Anthropic's temperature
 * and top_p in 0..1, max_tokens >= 1 unless counting, breakpoints naming
 * a translated message and part), whose translated messages render with
 * the chatml format or are refused with a field-naming KVS_EINVAL, and
 * whose unknown fields are keys of the body.  The input's bytes are also
 * written as a message's text and as a stream's deltas, which must give
 * valid JSON.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/kvs_api_msg.h"
#include "base/kvs_utf8.h"
#include "tokenizer/kvs_chat.h"


#define FUZZ_CHECK(c)  do { if (!(c)) { __builtin_trap(); } } while (0)


static void
fuzz_json(const kvs_buf_t *b, size_t from)
{
    json_t        *j;
    json_error_t   je;

    /* \u0000 is valid JSON (the text may hold NUL bytes) */
    j = json_loadb((const char *) b->data + from, b->len - from,
                   JSON_ALLOW_NUL, &je);
    FUZZ_CHECK(j != NULL);
    json_decref(j);
}


static void
fuzz_failed(const kvs_api_req_t *r, const kvs_api_err_t *e)
{
    kvs_buf_t  out;

    FUZZ_CHECK(r->root == NULL && r->msg_root == NULL
               && r->kind == KVS_API_MESSAGES);
    FUZZ_CHECK(e->status == 400 || e->status == 413 || e->status == 500);
    FUZZ_CHECK(e->message[0] != '\0');
    FUZZ_CHECK(kvs_utf8_valid((const uint8_t *) e->message,
                              strlen(e->message)));

    memset(&out, 0, sizeof(out));
    if (kvs_api_msg_error_json(&out, e->status, e->message) == KVS_OK) {
        fuzz_json(&out, 0);
    }
    kvs_buf_free(&out);
}


static void
fuzz_ok(const kvs_api_req_t *r, unsigned flags)
{
    int              rc;
    size_t           i, n;
    kvs_buf_t        out;
    kvs_err_t        err;
    kvs_chat_t       tpl;
    const char      *names[8];
    kvs_chat_args_t  args;

    FUZZ_CHECK(r->kind == KVS_API_MESSAGES && r->root != NULL
               && r->msg_root != NULL && r->n == 1);
    FUZZ_CHECK(json_array_size(r->messages) >= 1);
    FUZZ_CHECK(r->max_tokens >= 1
               || ((flags & KVS_API_MSG_COUNT) && r->max_tokens == -1));
    FUZZ_CHECK(r->sample.temperature >= 0 && r->sample.temperature <= 1);
    FUZZ_CHECK(r->sample.top_p >= 0 && r->sample.top_p <= 1);
    FUZZ_CHECK(r->sample.top_k >= 0);
    FUZZ_CHECK(r->n_stop <= KVS_API_MAX_STOP);

    for (i = 0; i < r->n_stop; i++) {
        FUZZ_CHECK(r->stop[i].len >= 1
                   && r->stop[i].len <= KVS_API_MAX_STOP_LEN);
    }

    FUZZ_CHECK(r->n_breaks <= KVS_API_MAX_BREAKS);

    for (i = 0; i < r->n_breaks; i++) {
        FUZZ_CHECK(r->breaks[i].message < json_array_size(r->messages));
        FUZZ_CHECK(r->breaks[i].part < 0
                   || (size_t) r->breaks[i].part < json_array_size(
                          json_object_get(json_array_get(r->messages,
                              r->breaks[i].message), "content")));
    }

    FUZZ_CHECK((r->tools == NULL) == (r->n_tools == 0));

    n = kvs_api_req_unknown(r, names, 8);
    for (i = 0; i < n && i < 8; i++) {
        FUZZ_CHECK(json_object_get(r->msg_root, names[i]) != NULL);
    }

    /* the translation renders, or is refused naming messages or tools */
    if (kvs_chat_by_name("chatml", 6, &tpl, &err) != KVS_OK) {
        return;
    }

    memset(&args, 0, sizeof(args));
    args.add_generation_prompt = 1;
    args.tools = r->tools;
    memset(&out, 0, sizeof(out));

    rc = kvs_chat_render(&tpl, r->messages, &args, &out, &err);
    FUZZ_CHECK(rc == KVS_OK || rc == KVS_EINVAL || rc == KVS_EUNSUPPORTED
               || rc == KVS_ENOMEM);
    kvs_buf_free(&out);
}


/* the input as generated text: a whole message and a stream's deltas */
static void
fuzz_write(const uint8_t *data, size_t size)
{
    size_t                 at;
    kvs_buf_t              out;
    kvs_err_t              err;
    kvs_api_choice_t       c;
    kvs_api_msg_usage_t    u;
    kvs_api_msg_stream_t   st;
    kvs_api_tool_call_t    head = { 0, "call_x", "f", NULL, 0 };

    static const kvs_api_resp_head_t  h = {
        KVS_API_MESSAGES, "msg_x", 5, "m", 1, 0, 0
    };

    memset(&out, 0, sizeof(out));
    memset(&c, 0, sizeof(c));
    memset(&u, 0, sizeof(u));
    memset(&st, 0, sizeof(st));

    c.text = (const char *) data;
    c.len = size;
    c.finish = KVS_FINISH_STOP;

    if (kvs_api_msg_body(&out, &h, &c, &u, NULL, -1, &err) == KVS_OK) {
        fuzz_json(&out, 0);
    }

    /* half as text, the rest as a tool call's arguments */
    out.len = 0;
    c.finish = KVS_FINISH_NONE;
    c.len = size / 2;

    if (kvs_api_msg_sse(&st, &out, &h, &c, &err) == KVS_OK) {
        c.text = NULL;
        c.len = 0;
        head.args = (const char *) data + size / 2;
        head.args_len = size - size / 2;
        c.calls = &head;
        c.n_calls = 1;
        (void) kvs_api_msg_sse(&st, &out, &h, &c, &err);
        (void) kvs_api_msg_sse_end(&st, &out, &h, 1, NULL, -1, &err);
    }

    /* every event's data is JSON */
    at = 0;

    while (at < out.len) {
        char  *ev, *nl, *end;

        ev = (char *) out.data + at;
        end = memmem(ev, out.len - at, "\n\n", 2);
        FUZZ_CHECK(end != NULL);
        nl = memchr(ev, '\n', (size_t) (end - ev));
        FUZZ_CHECK(nl != NULL && strncmp(nl + 1, "data: ", 6) == 0);

        {
            json_t        *j;
            json_error_t   je;

            j = json_loadb(nl + 7, (size_t) (end - nl - 7), JSON_ALLOW_NUL,
                           &je);
            FUZZ_CHECK(j != NULL);
            json_decref(j);
        }

        at = (size_t) (end + 2 - (char *) out.data);
    }

    kvs_buf_free(&out);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int             rc;
    char           *copy;
    unsigned        k;
    kvs_api_req_t   r;
    kvs_api_err_t   e;

    /* an exact-size copy, so ASan sees any read past the body */
    copy = malloc(size ? size : 1);
    if (copy == NULL) {
        return 0;
    }
    memcpy(copy, data, size);

    for (k = 0; k < 2; k++) {
        memset(&e, 0, sizeof(e));
        rc = kvs_api_msg_parse(&r, copy, size, 0,
                               k ? KVS_API_MSG_COUNT : 0, &e);

        if (rc == KVS_OK) {
            fuzz_ok(&r, k ? KVS_API_MSG_COUNT : 0);
        } else {
            fuzz_failed(&r, &e);
        }

        kvs_api_req_free(&r);
    }

    free(copy);

    fuzz_write(data, size);

    return 0;
}
