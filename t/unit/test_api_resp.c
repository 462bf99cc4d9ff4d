/*
 * test_api_resp: chat and completions response bodies and SSE events.
 * Every body is parsed back with jansson (duplicate keys rejected) and
 * checked key by key against the OpenAI shapes of api.md sections
 * 1.3-1.5; SSE framing is checked byte for byte; logprob tokens use real
 * vocabularies (GPT-2 byte-level BPE, Llama SentencePiece) from the
 * fixtures, including tokens that hold half a UTF-8 character.
 */

#include <jansson.h>
#include <math.h>

#include "kvs_test.h"

#include "api/kvs_api_resp.h"
#include "base/kvs_hash.h"

#define CREATED  1700000000


/* NUL-terminates b's text (not counted in b->len) for strstr. */
static char *
cstr(kvs_buf_t *b)
{
    assert_int_equal(kvs_buf_append(b, "", 1), KVS_OK);
    b->len--;

    return (char *) b->data;
}


static json_t *
parse_n(const uint8_t *p, size_t len)
{
    json_t        *j;
    json_error_t   e;

    j = json_loadb((const char *) p, len,
                   JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &e);
    if (j == NULL) {
        fail_msg("invalid JSON (%s at %d): %.*s", e.text, e.position,
                 (int) len, p);
    }

    return j;
}


/* o has exactly these keys (NULL-terminated). */
static void
keys_exact(const json_t *o, ...)
{
    size_t       n;
    va_list      ap;
    const char  *k;

    assert_true(json_is_object(o));

    n = 0;
    va_start(ap, o);

    while ((k = va_arg(ap, const char *)) != NULL) {
        if (json_object_get(o, k) == NULL) {
            fail_msg("key \"%s\" missing", k);
        }
        n++;
    }

    va_end(ap);

    if (json_object_size(o) != n) {
        fail_msg("%zu keys, want %zu", json_object_size(o), n);
    }
}


static const char *
str_of(const json_t *o, const char *k)
{
    const json_t  *s;

    s = json_object_get(o, k);
    if (!json_is_string(s)) {
        fail_msg("\"%s\" is not a string", k);
    }

    return json_string_value(s);
}


static json_int_t
int_of(const json_t *o, const char *k)
{
    const json_t  *i;

    i = json_object_get(o, k);
    if (!json_is_integer(i)) {
        fail_msg("\"%s\" is not an integer", k);
    }

    return json_integer_value(i);
}


static void
head_init(kvs_api_resp_head_t *h, kvs_api_kind_t kind, const char *id,
    int logprobs)
{
    memset(h, 0, sizeof(*h));
    h->kind = kind;
    h->id = id;
    h->id_len = strlen(id);
    h->model = "stories260K";
    h->model_len = strlen(h->model);
    h->created = CREATED;
    h->logprobs = logprobs;
}


static void
choice_init(kvs_api_choice_t *c, uint32_t index, const char *text,
    kvs_finish_t finish)
{
    memset(c, 0, sizeof(*c));
    c->index = index;
    c->text = text;
    c->len = text != NULL ? strlen(text) : 0;
    c->finish = finish;
}


static void
check_usage(const json_t *u, json_int_t p, json_int_t c, json_int_t cached)
{
    const json_t  *d;

    keys_exact(u, "prompt_tokens", "completion_tokens", "total_tokens",
               "prompt_tokens_details", "completion_tokens_details", NULL);
    assert_int_equal(int_of(u, "prompt_tokens"), p);
    assert_int_equal(int_of(u, "completion_tokens"), c);
    assert_int_equal(int_of(u, "total_tokens"), p + c);

    d = json_object_get(u, "prompt_tokens_details");
    keys_exact(d, "cached_tokens", NULL);
    assert_int_equal(int_of(d, "cached_tokens"), cached);

    d = json_object_get(u, "completion_tokens_details");
    keys_exact(d, "reasoning_tokens", NULL);
    assert_int_equal(int_of(d, "reasoning_tokens"), 0);
}


/* The keys every body and chunk has, with their values. */
static const json_t *
check_head(const json_t *j, const char *id, const char *object)
{
    const json_t  *ch;

    assert_string_equal(str_of(j, "id"), id);
    assert_string_equal(str_of(j, "object"), object);
    assert_int_equal(int_of(j, "created"), CREATED);
    assert_string_equal(str_of(j, "model"), "stories260K");

    ch = json_object_get(j, "choices");
    assert_true(json_is_array(ch));

    return ch;
}


/*
 * Splits an SSE stream into its events, checking the framing: each is
 * "data: " + one line + "\n\n".  Returns the JSON of each (NULL for
 * [DONE]).
 */
static size_t
sse_events(const kvs_buf_t *b, json_t **ev, size_t max)
{
    size_t          n, i, end;
    const uint8_t  *p;

    n = 0;
    i = 0;
    p = b->data;

    while (i < b->len) {
        assert_true(n < max);
        assert_true(b->len - i > 8);
        assert_memory_equal(p + i, "data: ", 6);
        i += 6;

        for (end = i; end < b->len && p[end] != '\n'; end++) {
            /* no CR either: it would end the SSE line */
            assert_true(p[end] != '\r');
        }

        assert_true(end + 1 < b->len);
        assert_int_equal(p[end + 1], '\n');

        if (end - i == 6 && memcmp(p + i, "[DONE]", 6) == 0) {
            ev[n++] = NULL;
        } else {
            ev[n++] = parse_n(p + i, end - i);
        }

        i = end + 2;
    }

    return n;
}


static void
test_ids(void **state)
{
    size_t    i, j, len;
    uint64_t  rng;
    char      ids[500][KVS_API_RESP_ID_MAX];

    rng = 12345;

    for (i = 0; i < 500; i++) {
        len = kvs_api_resp_id(ids[i], i % 2 ? KVS_API_COMPLETIONS
                                            : KVS_API_CHAT, &rng);
        assert_int_equal(len, strlen(ids[i]));

        if (i % 2) {
            assert_int_equal(len, 5 + KVS_API_RESP_ID_RAND);
            assert_memory_equal(ids[i], "cmpl-", 5);
        } else {
            assert_int_equal(len, 9 + KVS_API_RESP_ID_RAND);
            assert_memory_equal(ids[i], "chatcmpl-", 9);
        }

        for (j = len - KVS_API_RESP_ID_RAND; j < len; j++) {
            assert_true((ids[i][j] >= '0' && ids[i][j] <= '9')
                        || (ids[i][j] >= 'a' && ids[i][j] <= 'z')
                        || (ids[i][j] >= 'A' && ids[i][j] <= 'Z'));
        }

        /* the random parts differ, whatever the prefix */
        for (j = 0; j < i; j++) {
            assert_true(strcmp(ids[i] + len - KVS_API_RESP_ID_RAND,
                               ids[j] + strlen(ids[j])
                               - KVS_API_RESP_ID_RAND) != 0);
        }
    }
}


/* usage's cached_tokens_by_tier for a model with the tiers in tiered:
 * 8 cached, 2 from the disk, 1 from host memory (a tier the model does
 * not have reports nothing) */
static void
tier_split(const kvs_api_resp_head_t *h, const kvs_api_choice_t *cs,
    int tiered, const char *want)
{
    char             *s;
    json_t           *j;
    kvs_buf_t         b;
    kvs_err_t         err;
    kvs_api_usage_t   u;

    memset(&u, 0, sizeof(u));
    u.prompt_tokens = 12;
    u.completion_tokens = 9;
    u.cached_tokens = 8;
    u.cached_tier = (tiered & KVS_API_TIER_DISK) ? 2 : 0;
    u.cached_host = (tiered & KVS_API_TIER_HOST) ? 1 : 0;
    u.tiered = tiered;

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_api_resp_body(&b, h, cs, 1, &u, NULL, &err),
                     KVS_OK);
    j = parse_n(b.data, b.len);
    s = json_dumps(json_object_get(json_object_get(json_object_get(j,
                                                                   "usage"),
                                                   "prompt_tokens_details"),
                                   "cached_tokens_by_tier"),
                   JSON_COMPACT | JSON_PRESERVE_ORDER);
    assert_non_null(s);
    assert_string_equal(s, want);
    free(s);
    json_decref(j);
    kvs_buf_free(&b);
}


static void
test_chat_body(void **state)
{
    json_t               *j;
    kvs_buf_t             b;
    kvs_err_t             err;
    const json_t         *ch, *c, *m;
    kvs_api_usage_t       u;
    kvs_api_choice_t      cs[2];
    kvs_api_resp_head_t   h;

    head_init(&h, KVS_API_CHAT, "chatcmpl-abc", 0);
    choice_init(&cs[0], 0, "Once upon a time", KVS_FINISH_STOP);
    choice_init(&cs[1], 1, "There was", KVS_FINISH_LENGTH);
    memset(&u, 0, sizeof(u));
    u.prompt_tokens = 12;
    u.completion_tokens = 9;
    u.cached_tokens = 8;

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_api_resp_body(&b, &h, cs, 2, &u, NULL, &err),
                     KVS_OK);

    j = parse_n(b.data, b.len);
    keys_exact(j, "id", "object", "created", "model", "choices", "usage",
               NULL);
    ch = check_head(j, "chatcmpl-abc", "chat.completion");
    assert_int_equal(json_array_size(ch), 2);

    c = json_array_get(ch, 0);
    keys_exact(c, "index", "message", "logprobs", "finish_reason", NULL);
    assert_int_equal(int_of(c, "index"), 0);
    assert_true(json_is_null(json_object_get(c, "logprobs")));
    assert_string_equal(str_of(c, "finish_reason"), "stop");
    m = json_object_get(c, "message");
    keys_exact(m, "role", "content", "refusal", NULL);
    assert_string_equal(str_of(m, "role"), "assistant");
    assert_string_equal(str_of(m, "content"), "Once upon a time");
    assert_true(json_is_null(json_object_get(m, "refusal")));

    c = json_array_get(ch, 1);
    assert_int_equal(int_of(c, "index"), 1);
    assert_string_equal(str_of(c, "finish_reason"), "length");
    assert_string_equal(str_of(json_object_get(c, "message"), "content"),
                        "There was");

    check_usage(json_object_get(j, "usage"), 12, 9, 8);
    assert_null(json_object_get(json_object_get(json_object_get(j, "usage"),
                                                "prompt_tokens_details"),
                                "cached_tokens_by_tier"));
    json_decref(j);

    /* the extension, split by tier: the pool's is the rest */
    tier_split(&h, cs, KVS_API_TIER_DISK, "{\"pool\":6,\"disk\":2}");
    tier_split(&h, cs, KVS_API_TIER_HOST, "{\"pool\":7,\"host\":1}");
    tier_split(&h, cs, KVS_API_TIER_HOST | KVS_API_TIER_DISK,
               "{\"pool\":5,\"host\":1,\"disk\":2}");

    /* appends after what the buffer holds; no usage: no key */
    b.len = 0;
    assert_int_equal(kvs_buf_append(&b, "xyz", 3), KVS_OK);
    assert_int_equal(kvs_api_resp_body(&b, &h, cs, 1, NULL, NULL, &err),
                     KVS_OK);
    assert_memory_equal(b.data, "xyz", 3);
    j = parse_n(b.data + 3, b.len - 3);
    keys_exact(j, "id", "object", "created", "model", "choices", NULL);
    json_decref(j);

    kvs_buf_free(&b);
}


static void
test_completions_body(void **state)
{
    json_t               *j;
    kvs_buf_t             b;
    kvs_err_t             err;
    const json_t         *ch, *c;
    kvs_api_usage_t       u;
    kvs_api_choice_t      cs[2];
    kvs_api_resp_head_t   h;

    head_init(&h, KVS_API_COMPLETIONS, "cmpl-xyz", 0);
    choice_init(&cs[0], 0, " the end.", KVS_FINISH_STOP);
    choice_init(&cs[1], 1, "", KVS_FINISH_LENGTH);
    memset(&u, 0, sizeof(u));
    u.prompt_tokens = 3;
    u.completion_tokens = 5;
    u.cached_tokens = 0;

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_api_resp_body(&b, &h, cs, 2, &u, NULL, &err),
                     KVS_OK);

    j = parse_n(b.data, b.len);
    keys_exact(j, "id", "object", "created", "model", "choices", "usage",
               NULL);
    ch = check_head(j, "cmpl-xyz", "text_completion");
    assert_int_equal(json_array_size(ch), 2);

    c = json_array_get(ch, 0);
    keys_exact(c, "text", "index", "logprobs", "finish_reason", NULL);
    assert_string_equal(str_of(c, "text"), " the end.");
    assert_int_equal(int_of(c, "index"), 0);
    assert_true(json_is_null(json_object_get(c, "logprobs")));
    assert_string_equal(str_of(c, "finish_reason"), "stop");

    c = json_array_get(ch, 1);
    assert_string_equal(str_of(c, "text"), "");
    assert_int_equal(int_of(c, "index"), 1);
    assert_string_equal(str_of(c, "finish_reason"), "length");

    check_usage(json_object_get(j, "usage"), 3, 5, 0);
    json_decref(j);
    kvs_buf_free(&b);
}


static void
test_escaping(void **state)
{
    int                   i;
    char                  all[40];
    json_t               *j;
    size_t                k;
    kvs_buf_t             b;
    kvs_err_t             err;
    const char           *p, *q;
    const json_t         *s;
    kvs_api_choice_t      c;
    kvs_api_resp_head_t   h;

    static const char  text[] = "a\"b\\c/\n\t\b\f\r\x01\x1f\x7f"
                                "\xe2\x80\xa8\xe2\x80\xa9\xc3\xa9\xf0\x9f"
                                "\xa6\x99";
    /* RFC 8259 escapes, short forms where JSON has one; U+2028/9
     * escaped; é and 🦙 kept as UTF-8; '/' and DEL as they are */
    static const char  want[] = "\"a\\\"b\\\\c/\\n\\t\\b\\f\\r\\u0001"
                                "\\u001f\x7f\\u2028\\u2029\xc3\xa9"
                                "\xf0\x9f\xa6\x99\"";

    head_init(&h, KVS_API_COMPLETIONS, "cmpl-1", 0);
    choice_init(&c, 0, text, KVS_FINISH_STOP);

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_api_resp_body(&b, &h, &c, 1, NULL, NULL, &err),
                     KVS_OK);
    assert_non_null(strstr(cstr(&b), want));
    j = parse_n(b.data, b.len);
    assert_string_equal(str_of(json_array_get(json_object_get(j, "choices"),
                                              0), "text"), text);
    json_decref(j);

    /* every control character, NUL included, round-trips and none is
     * left raw in the output */
    for (i = 0; i < 32; i++) {
        all[i] = (char) i;
    }
    memcpy(all + 32, "\"\\", 2);

    b.len = 0;
    c.text = all;
    c.len = 34;
    assert_int_equal(kvs_api_resp_body(&b, &h, &c, 1, NULL, NULL, &err),
                     KVS_OK);

    for (k = 0; k < b.len; k++) {
        assert_true(b.data[k] >= 0x20);
    }

    j = parse_n(b.data, b.len);
    s = json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                        "text");
    assert_int_equal(json_string_length(s), 34);
    assert_memory_equal(json_string_value(s), all, 34);
    json_decref(j);

    /* bytes that are not UTF-8 (the engine never sends them, ids and
     * models might): one U+FFFD per maximal subpart, a cut-off
     * character at the end included */
    b.len = 0;
    h.model = "m\xff" "x\xe4\xbd" "y\xed\xa0\x80" "z\xe4\xbd";
    h.model_len = strlen(h.model);
    c.text = "ok";
    c.len = 2;
    assert_int_equal(kvs_api_resp_body(&b, &h, &c, 1, NULL, NULL, &err),
                     KVS_OK);
    j = parse_n(b.data, b.len);
    /* ED A0 80 (a surrogate) is three maximal subparts of one byte */
    assert_string_equal(str_of(j, "model"),
                        "m\xef\xbf\xbdx\xef\xbf\xbdy\xef\xbf\xbd"
                        "\xef\xbf\xbd\xef\xbf\xbdz\xef\xbf\xbd");
    json_decref(j);

    /* the same writer serves chat content and chunks */
    head_init(&h, KVS_API_CHAT, "chatcmpl-1", 0);
    choice_init(&c, 0, text, KVS_FINISH_NONE);
    b.len = 0;
    assert_int_equal(kvs_api_resp_chunk(&b, &h, &c, 1, 0, NULL, &err),
                     KVS_OK);
    assert_non_null(strstr(cstr(&b), want));

    p = (const char *) b.data;
    q = strstr(p, "\n");
    assert_true(q == p + b.len - 2);

    kvs_buf_free(&b);
}


/* The stream of a 3-token chat answer, with and without usage. */
static void
test_chat_stream(void **state)
{
    int                   include_usage, i;
    size_t                n, k;
    json_t               *ev[16];
    kvs_buf_t             b;
    kvs_err_t             err;
    const json_t         *ch, *c, *d;
    kvs_api_usage_t       u;
    kvs_api_choice_t      cs;
    kvs_api_resp_head_t   h;

    static const char  *pieces[] = { "Hel", "lo", " world" };
    static const char   first[] =
        "data: {\"id\":\"chatcmpl-s1\",\"object\":\"chat.completion.chunk\","
        "\"created\":1700000000,\"model\":\"stories260K\",\"choices\":["
        "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
        "\"logprobs\":null,\"finish_reason\":null}]}\n\n";
    static const char   last[] =
        "data: {\"id\":\"chatcmpl-s1\",\"object\":\"chat.completion.chunk\","
        "\"created\":1700000000,\"model\":\"stories260K\",\"choices\":["
        "{\"index\":0,\"delta\":{},\"logprobs\":null,"
        "\"finish_reason\":\"stop\"}]}\n\n";

    head_init(&h, KVS_API_CHAT, "chatcmpl-s1", 0);
    memset(&u, 0, sizeof(u));
    u.prompt_tokens = 7;
    u.completion_tokens = 3;
    u.cached_tokens = 0;
    memset(&b, 0, sizeof(b));

    for (include_usage = 0; include_usage < 2; include_usage++) {
        b.len = 0;

        choice_init(&cs, 0, "", KVS_FINISH_NONE);
        cs.role = 1;
        assert_int_equal(kvs_api_resp_chunk(&b, &h, &cs, 1, include_usage,
                                            NULL, &err), KVS_OK);

        if (!include_usage) {
            assert_int_equal(b.len, sizeof(first) - 1);
            assert_memory_equal(b.data, first, b.len);
        }

        for (i = 0; i < 3; i++) {
            choice_init(&cs, 0, pieces[i], KVS_FINISH_NONE);
            assert_int_equal(kvs_api_resp_chunk(&b, &h, &cs, 1,
                                                include_usage, NULL, &err),
                             KVS_OK);
        }

        k = b.len;
        choice_init(&cs, 0, NULL, KVS_FINISH_STOP);
        assert_int_equal(kvs_api_resp_chunk(&b, &h, &cs, 1, include_usage,
                                            NULL, &err), KVS_OK);

        if (!include_usage) {
            assert_int_equal(b.len - k, sizeof(last) - 1);
            assert_memory_equal(b.data + k, last, b.len - k);
        }

        if (include_usage) {
            assert_int_equal(kvs_api_resp_usage_chunk(&b, &h, &u), KVS_OK);
        }

        k = b.len;
        assert_int_equal(kvs_api_resp_done(&b), KVS_OK);
        assert_int_equal(b.len - k, 14);
        assert_memory_equal(b.data + k, "data: [DONE]\n\n", 14);

        n = sse_events(&b, ev, 16);
        assert_int_equal(n, include_usage ? 7 : 6);
        assert_null(ev[n - 1]);

        for (k = 0; k < 5; k++) {
            if (include_usage) {
                keys_exact(ev[k], "id", "object", "created", "model",
                           "choices", "usage", NULL);
                assert_true(json_is_null(json_object_get(ev[k], "usage")));
            } else {
                keys_exact(ev[k], "id", "object", "created", "model",
                           "choices", NULL);
            }

            ch = check_head(ev[k], "chatcmpl-s1", "chat.completion.chunk");
            assert_int_equal(json_array_size(ch), 1);
            c = json_array_get(ch, 0);
            keys_exact(c, "index", "delta", "logprobs", "finish_reason",
                       NULL);
            assert_int_equal(int_of(c, "index"), 0);
            assert_true(json_is_null(json_object_get(c, "logprobs")));
            d = json_object_get(c, "delta");

            if (k == 0) {
                keys_exact(d, "role", "content", NULL);
                assert_string_equal(str_of(d, "role"), "assistant");
                assert_string_equal(str_of(d, "content"), "");
            } else if (k < 4) {
                keys_exact(d, "content", NULL);
                assert_string_equal(str_of(d, "content"), pieces[k - 1]);
            } else {
                keys_exact(d, NULL);
            }

            if (k < 4) {
                assert_true(json_is_null(json_object_get(c,
                                                         "finish_reason")));
            } else {
                assert_string_equal(str_of(c, "finish_reason"), "stop");
            }
        }

        if (include_usage) {
            keys_exact(ev[5], "id", "object", "created", "model", "choices",
                       "usage", NULL);
            ch = check_head(ev[5], "chatcmpl-s1", "chat.completion.chunk");
            assert_int_equal(json_array_size(ch), 0);
            check_usage(json_object_get(ev[5], "usage"), 7, 3, 0);
        }

        for (k = 0; k < n; k++) {
            json_decref(ev[k]);
        }
    }

    kvs_buf_free(&b);
}


/* tool_calls: whole in a message (content null or text beside them),
 * and in stream deltas as OpenAI sends them: a call's head with index,
 * id, type and name and empty arguments, then its arguments alone. */
static void
test_tool_calls(void **state)
{
    size_t                 n, k;
    char                   ids[2][KVS_API_CALL_ID_MAX];
    json_t                *j, *ev[8];
    uint64_t               rng;
    kvs_buf_t              b;
    kvs_err_t              err;
    const json_t          *c, *m, *t, *f, *d;
    kvs_api_choice_t       cs;
    kvs_api_tool_call_t    calls[2], piece;
    kvs_api_resp_head_t    h;

    static const char  args0[] = "{\"city\":\"Paris \\\"1\\\"\"}";

    rng = 7;
    for (k = 0; k < 2; k++) {
        assert_int_equal(kvs_api_resp_call_id(ids[k], &rng),
                         5 + KVS_API_RESP_ID_RAND);
        assert_memory_equal(ids[k], "call_", 5);
    }
    assert_string_not_equal(ids[0], ids[1]);

    memset(calls, 0, sizeof(calls));
    calls[0].index = 0;
    calls[0].id = ids[0];
    calls[0].name = "get_weather";
    calls[0].args = args0;
    calls[0].args_len = sizeof(args0) - 1;
    calls[1].index = 1;
    calls[1].id = ids[1];
    calls[1].name = "now";
    calls[1].args = "{}";
    calls[1].args_len = 2;

    head_init(&h, KVS_API_CHAT, "chatcmpl-t", 0);
    memset(&b, 0, sizeof(b));

    /* content null beside the calls; finish "tool_calls" */
    choice_init(&cs, 0, NULL, KVS_FINISH_STOP);
    cs.calls = calls;
    cs.n_calls = 2;
    cs.tool_finish = 1;
    assert_int_equal(kvs_api_resp_body(&b, &h, &cs, 1, NULL, NULL, &err),
                     KVS_OK);
    j = parse_n(b.data, b.len);
    c = json_array_get(check_head(j, "chatcmpl-t", "chat.completion"), 0);
    assert_string_equal(str_of(c, "finish_reason"), "tool_calls");
    m = json_object_get(c, "message");
    keys_exact(m, "role", "content", "refusal", "tool_calls", NULL);
    assert_true(json_is_null(json_object_get(m, "content")));
    t = json_object_get(m, "tool_calls");
    assert_int_equal(json_array_size(t), 2);
    keys_exact(json_array_get(t, 0), "id", "type", "function", NULL);
    assert_string_equal(str_of(json_array_get(t, 0), "id"), ids[0]);
    assert_string_equal(str_of(json_array_get(t, 0), "type"), "function");
    f = json_object_get(json_array_get(t, 0), "function");
    keys_exact(f, "name", "arguments", NULL);
    assert_string_equal(str_of(f, "name"), "get_weather");
    /* the arguments are a string holding the JSON text, escaped once */
    assert_string_equal(str_of(f, "arguments"), args0);
    f = json_object_get(json_array_get(t, 1), "function");
    assert_string_equal(str_of(f, "name"), "now");
    assert_string_equal(str_of(f, "arguments"), "{}");
    json_decref(j);

    /* text beside a call; without tool_finish a STOP stays "stop" */
    b.len = 0;
    choice_init(&cs, 0, "Let me check.", KVS_FINISH_STOP);
    cs.calls = calls;
    cs.n_calls = 1;
    assert_int_equal(kvs_api_resp_body(&b, &h, &cs, 1, NULL, NULL, &err),
                     KVS_OK);
    j = parse_n(b.data, b.len);
    c = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(str_of(c, "finish_reason"), "stop");
    m = json_object_get(c, "message");
    assert_string_equal(str_of(m, "content"), "Let me check.");
    assert_int_equal(json_array_size(json_object_get(m, "tool_calls")), 1);
    json_decref(j);

    /* no calls: no key */
    b.len = 0;
    choice_init(&cs, 0, "plain", KVS_FINISH_STOP);
    assert_int_equal(kvs_api_resp_body(&b, &h, &cs, 1, NULL, NULL, &err),
                     KVS_OK);
    j = parse_n(b.data, b.len);
    m = json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                        "message");
    keys_exact(m, "role", "content", "refusal", NULL);
    json_decref(j);

    /* the stream: head, arguments, finish */
    b.len = 0;
    piece = calls[0];
    piece.args = "";
    piece.args_len = 0;
    choice_init(&cs, 0, NULL, KVS_FINISH_NONE);
    cs.calls = &piece;
    cs.n_calls = 1;
    assert_int_equal(kvs_api_resp_chunk(&b, &h, &cs, 1, 0, NULL, &err),
                     KVS_OK);
    piece = calls[0];
    piece.id = NULL;
    assert_int_equal(kvs_api_resp_chunk(&b, &h, &cs, 1, 0, NULL, &err),
                     KVS_OK);
    choice_init(&cs, 0, NULL, KVS_FINISH_STOP);
    cs.tool_finish = 1;
    assert_int_equal(kvs_api_resp_chunk(&b, &h, &cs, 1, 0, NULL, &err),
                     KVS_OK);

    n = sse_events(&b, ev, 8);
    assert_int_equal(n, 3);

    c = json_array_get(json_object_get(ev[0], "choices"), 0);
    d = json_object_get(c, "delta");
    keys_exact(d, "tool_calls", NULL);
    t = json_array_get(json_object_get(d, "tool_calls"), 0);
    keys_exact(t, "index", "id", "type", "function", NULL);
    assert_int_equal(int_of(t, "index"), 0);
    assert_string_equal(str_of(t, "id"), ids[0]);
    f = json_object_get(t, "function");
    keys_exact(f, "name", "arguments", NULL);
    assert_string_equal(str_of(f, "name"), "get_weather");
    assert_string_equal(str_of(f, "arguments"), "");
    assert_true(json_is_null(json_object_get(c, "finish_reason")));

    d = json_object_get(json_array_get(json_object_get(ev[1], "choices"),
                                       0), "delta");
    t = json_array_get(json_object_get(d, "tool_calls"), 0);
    keys_exact(t, "index", "function", NULL);
    f = json_object_get(t, "function");
    keys_exact(f, "arguments", NULL);
    assert_string_equal(str_of(f, "arguments"), args0);

    c = json_array_get(json_object_get(ev[2], "choices"), 0);
    keys_exact(json_object_get(c, "delta"), NULL);
    assert_string_equal(str_of(c, "finish_reason"), "tool_calls");

    for (k = 0; k < n; k++) {
        json_decref(ev[k]);
    }

    kvs_buf_free(&b);
}


/* n = 2 interleaved, completions: each chunk one choice. */
static void
test_completions_stream(void **state)
{
    size_t                n, k;
    json_t               *ev[16];
    kvs_buf_t             b;
    kvs_err_t             err;
    const json_t         *c;
    kvs_api_usage_t       u;
    kvs_api_choice_t      cs[2];
    kvs_api_resp_head_t   h;
    char                  text[2][32];

    head_init(&h, KVS_API_COMPLETIONS, "cmpl-s2", 0);
    memset(&b, 0, sizeof(b));
    memset(text, 0, sizeof(text));

    choice_init(&cs[0], 0, "A", KVS_FINISH_NONE);
    choice_init(&cs[1], 1, "B", KVS_FINISH_NONE);
    assert_int_equal(kvs_api_resp_chunk(&b, &h, &cs[0], 1, 1, NULL, &err),
                     KVS_OK);
    assert_int_equal(kvs_api_resp_chunk(&b, &h, &cs[1], 1, 1, NULL, &err),
                     KVS_OK);
    choice_init(&cs[0], 0, "a", KVS_FINISH_LENGTH);
    choice_init(&cs[1], 1, "b", KVS_FINISH_STOP);
    /* both in one event */
    assert_int_equal(kvs_api_resp_chunk(&b, &h, cs, 2, 1, NULL, &err),
                     KVS_OK);
    memset(&u, 0, sizeof(u));
    u.prompt_tokens = 4;
    u.completion_tokens = 4;
    u.cached_tokens = 4;
    assert_int_equal(kvs_api_resp_usage_chunk(&b, &h, &u), KVS_OK);
    assert_int_equal(kvs_api_resp_done(&b), KVS_OK);

    n = sse_events(&b, ev, 16);
    assert_int_equal(n, 5);
    assert_null(ev[4]);

    for (k = 0; k < 3; k++) {
        keys_exact(ev[k], "id", "object", "created", "model", "choices",
                   "usage", NULL);
        assert_true(json_is_null(json_object_get(ev[k], "usage")));
        check_head(ev[k], "cmpl-s2", "text_completion");
    }

    c = json_array_get(json_object_get(ev[1], "choices"), 0);
    keys_exact(c, "text", "index", "logprobs", "finish_reason", NULL);
    assert_int_equal(int_of(c, "index"), 1);
    assert_string_equal(str_of(c, "text"), "B");
    assert_true(json_is_null(json_object_get(c, "finish_reason")));

    assert_int_equal(json_array_size(json_object_get(ev[2], "choices")), 2);
    c = json_array_get(json_object_get(ev[2], "choices"), 0);
    assert_string_equal(str_of(c, "finish_reason"), "length");
    assert_string_equal(str_of(c, "text"), "a");
    c = json_array_get(json_object_get(ev[2], "choices"), 1);
    assert_string_equal(str_of(c, "finish_reason"), "stop");
    assert_int_equal(int_of(c, "index"), 1);

    assert_int_equal(json_array_size(json_object_get(ev[3], "choices")), 0);
    check_usage(json_object_get(ev[3], "usage"), 4, 4, 4);

    for (k = 0; k < n; k++) {
        json_decref(ev[k]);
    }

    kvs_buf_free(&b);
}


static void
test_errors(void **state)
{
    json_t                 *j;
    const json_t           *e;
    kvs_buf_t               b;
    kvs_err_t               err;
    kvs_api_choice_t        c;
    kvs_api_resp_head_t     h;
    kvs_sample_logprobs_t   lp;

    static const char  want[] =
        "data: {\"error\":{\"message\":\"the engine stopped\","
        "\"type\":\"server_error\",\"param\":null,"
        "\"code\":\"engine_failed\"}}\n\n";

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_buf_append(&b, "keep", 4), KVS_OK);

    head_init(&h, KVS_API_CHAT, "chatcmpl-e", 0);

    /* a whole body needs a finish reason; a cancelled or failed sequence
     * never makes a normal choice */
    choice_init(&c, 0, "x", KVS_FINISH_NONE);
    assert_int_equal(kvs_api_resp_body(&b, &h, &c, 1, NULL, NULL, &err),
                     KVS_EINVAL);
    c.finish = KVS_FINISH_CANCELLED;
    assert_int_equal(kvs_api_resp_chunk(&b, &h, &c, 1, 0, NULL, &err),
                     KVS_EINVAL);
    c.finish = KVS_FINISH_ERROR;
    assert_int_equal(kvs_api_resp_body(&b, &h, &c, 1, NULL, NULL, &err),
                     KVS_EINVAL);

    /* logprobs need the vocabulary */
    memset(&lp, 0, sizeof(lp));
    h.logprobs = 1;
    c.finish = KVS_FINISH_STOP;
    c.lp = &lp;
    c.n_lp = 1;
    assert_int_equal(kvs_api_resp_body(&b, &h, &c, 1, NULL, NULL, &err),
                     KVS_EINVAL);
    assert_int_equal(b.len, 4);

    /* records the request did not ask for are ignored */
    h.logprobs = 0;
    assert_int_equal(kvs_api_resp_body(&b, &h, &c, 1, NULL, NULL, &err),
                     KVS_OK);
    j = parse_n(b.data + 4, b.len - 4);
    assert_true(json_is_null(json_object_get(json_array_get(
        json_object_get(j, "choices"), 0), "logprobs")));
    json_decref(j);
    b.len = 4;

    assert_int_equal(kvs_api_resp_error_event(&b, "the engine stopped",
                                              "server_error",
                                              "engine_failed"), KVS_OK);
    assert_int_equal(b.len - 4, sizeof(want) - 1);
    assert_memory_equal(b.data + 4, want, sizeof(want) - 1);

    b.len = 0;
    assert_int_equal(kvs_api_resp_error_event(&b, "bad \"\n\xff", "x",
                                              NULL), KVS_OK);
    assert_memory_equal(b.data, "data: ", 6);
    assert_memory_equal(b.data + b.len - 2, "\n\n", 2);
    j = parse_n(b.data + 6, b.len - 8);
    keys_exact(j, "error", NULL);
    e = json_object_get(j, "error");
    keys_exact(e, "message", "type", "param", "code", NULL);
    assert_string_equal(str_of(e, "message"), "bad \"\n\xef\xbf\xbd");
    assert_true(json_is_null(json_object_get(e, "code")));
    json_decref(j);

    kvs_buf_free(&b);
}


/* --- logprobs ------------------------------------------------------------ */

static kvs_vocab_t *
vocab(const char *name)
{
    const char   *path;
    kvs_err_t     err;
    kvs_vocab_t  *v;

    path = kvs_test_fixture(name);
    if (path == NULL) {
        return NULL;
    }

    if (kvs_vocab_open(&v, path, &err) != KVS_OK) {
        fail_msg("%s: %s", path, err.msg);
    }

    return v;
}


static int32_t
tok(const kvs_vocab_t *v, const char *text)
{
    int32_t  id;

    id = kvs_vocab_find(v, text, strlen(text));
    if (id < 0) {
        fail_msg("no token '%s'", text);
    }

    return id;
}


static void
lp_set(kvs_sample_logprobs_t *r, int32_t token, float logprob, int n_top,
    ...)
{
    int      i;
    va_list  ap;

    memset(r, 0, sizeof(*r));
    r->token = token;
    r->logprob = logprob;
    r->n_top = n_top;

    va_start(ap, n_top);

    for (i = 0; i < n_top; i++) {
        r->top_token[i] = va_arg(ap, int32_t);
        r->top_logprob[i] = (float) va_arg(ap, double);
    }

    va_end(ap);
}


/* A logprob as JSON: a real, and the float it reads back as. */
static void
check_lp(const json_t *x, float want)
{
    if (!json_is_real(x)) {
        fail_msg("logprob is not a real");
    }

    if ((float) json_real_value(x) != want) {
        fail_msg("logprob %.9g, want %.9g", json_real_value(x),
                 (double) want);
    }
}


static void
check_bytes(const json_t *a, const char *bytes, size_t n)
{
    size_t  i;

    assert_true(json_is_array(a));
    assert_int_equal(json_array_size(a), n);

    for (i = 0; i < n; i++) {
        assert_int_equal(json_integer_value(json_array_get(a, i)),
                         (uint8_t) bytes[i]);
    }
}


static void
test_chat_logprobs(void **state)
{
    int32_t                 hello, c3, a9, bang, eot, e_acute;
    uint8_t                 byte;
    json_t                 *j, *ev[4];
    size_t                  i, n;
    kvs_buf_t               b, text;
    kvs_err_t               err;
    kvs_vocab_t            *v;
    const json_t           *c, *lp, *e, *t;
    kvs_api_choice_t        cs;
    kvs_api_resp_head_t     h;
    kvs_sample_logprobs_t   r[4];

    v = vocab("vocab/ggml-vocab-gpt-2.gguf");
    if (v == NULL) {
        skip();
    }

    /* GPT-2 byte-level: "é" is C3 A9, and each byte is a token too */
    hello = tok(v, " Hello");
    c3 = tok(v, "\xc3");
    a9 = tok(v, "\xa9");
    e_acute = tok(v, "\xc3\xa9");
    bang = tok(v, "!");
    eot = tok(v, "<|endoftext|>");

    lp_set(&r[0], hello, -0.5f, 2, hello, -0.5, bang, -1.25);
    lp_set(&r[1], c3, -0.125f, 2, e_acute, -0.0625, c3, -0.125);
    lp_set(&r[2], a9, 0.0f, 0);
    lp_set(&r[3], bang, -INFINITY, 1, eot, -2.3025851);

    head_init(&h, KVS_API_CHAT, "chatcmpl-lp", 1);
    choice_init(&cs, 0, " Hello\xc3\xa9!", KVS_FINISH_STOP);
    cs.lp = r;
    cs.n_lp = 4;

    memset(&b, 0, sizeof(b));
    memset(&text, 0, sizeof(text));
    assert_int_equal(kvs_api_resp_body(&b, &h, &cs, 1, NULL, v, &err),
                     KVS_OK);
    j = parse_n(b.data, b.len);
    c = json_array_get(json_object_get(j, "choices"), 0);
    lp = json_object_get(c, "logprobs");
    keys_exact(lp, "content", "refusal", NULL);
    assert_true(json_is_null(json_object_get(lp, "refusal")));
    lp = json_object_get(lp, "content");
    assert_int_equal(json_array_size(lp), 4);

    for (i = 0; i < 4; i++) {
        e = json_array_get(lp, i);
        keys_exact(e, "token", "logprob", "bytes", "top_logprobs", NULL);
        t = json_object_get(e, "bytes");
        for (n = 0; n < json_array_size(t); n++) {
            byte = (uint8_t) json_integer_value(json_array_get(t, n));
            assert_int_equal(kvs_buf_append(&text, &byte, 1), KVS_OK);
        }
    }

    /* the bytes put together are the text; the tokens alone are not */
    assert_int_equal(text.len, cs.len);
    assert_memory_equal(text.data, cs.text, cs.len);

    e = json_array_get(lp, 0);
    assert_string_equal(str_of(e, "token"), " Hello");
    check_lp(json_object_get(e, "logprob"), -0.5f);
    check_bytes(json_object_get(e, "bytes"), " Hello", 6);
    t = json_object_get(e, "top_logprobs");
    assert_int_equal(json_array_size(t), 2);
    keys_exact(json_array_get(t, 1), "token", "logprob", "bytes", NULL);
    assert_string_equal(str_of(json_array_get(t, 1), "token"), "!");
    check_lp(json_object_get(json_array_get(t, 1), "logprob"), -1.25f);
    check_bytes(json_object_get(json_array_get(t, 1), "bytes"), "!", 1);

    /* half a character: U+FFFD as its token, the byte in bytes */
    e = json_array_get(lp, 1);
    assert_string_equal(str_of(e, "token"), "\xef\xbf\xbd");
    check_bytes(json_object_get(e, "bytes"), "\xc3", 1);
    t = json_object_get(e, "top_logprobs");
    assert_string_equal(str_of(json_array_get(t, 0), "token"), "\xc3\xa9");
    check_bytes(json_object_get(json_array_get(t, 0), "bytes"), "\xc3\xa9",
                2);
    check_lp(json_object_get(json_array_get(t, 0), "logprob"), -0.0625f);

    e = json_array_get(lp, 2);
    assert_string_equal(str_of(e, "token"), "\xef\xbf\xbd");
    check_lp(json_object_get(e, "logprob"), 0.0f);
    assert_int_equal(json_array_size(json_object_get(e, "top_logprobs")), 0);

    /* -inf has no JSON form: the floor */
    e = json_array_get(lp, 3);
    check_lp(json_object_get(e, "logprob"), -9999.0f);
    t = json_array_get(json_object_get(e, "top_logprobs"), 0);
    assert_string_equal(str_of(t, "token"), "<|endoftext|>");
    check_bytes(json_object_get(t, "bytes"), "<|endoftext|>", 13);
    check_lp(json_object_get(t, "logprob"), -2.3025851f);
    json_decref(j);

    /* asked for, no token: an empty list, not null */
    choice_init(&cs, 0, "", KVS_FINISH_LENGTH);
    b.len = 0;
    assert_int_equal(kvs_api_resp_body(&b, &h, &cs, 1, NULL, v, &err),
                     KVS_OK);
    j = parse_n(b.data, b.len);
    c = json_array_get(json_object_get(j, "choices"), 0);
    assert_int_equal(json_array_size(json_object_get(
        json_object_get(c, "logprobs"), "content")), 0);
    json_decref(j);

    /* streaming: the role chunk has none, a content chunk its tokens */
    b.len = 0;
    choice_init(&cs, 0, "", KVS_FINISH_NONE);
    cs.role = 1;
    assert_int_equal(kvs_api_resp_chunk(&b, &h, &cs, 1, 0, v, &err),
                     KVS_OK);
    choice_init(&cs, 0, " Hello", KVS_FINISH_NONE);
    cs.lp = r;
    cs.n_lp = 1;
    assert_int_equal(kvs_api_resp_chunk(&b, &h, &cs, 1, 0, v, &err),
                     KVS_OK);
    n = sse_events(&b, ev, 4);
    assert_int_equal(n, 2);
    c = json_array_get(json_object_get(ev[0], "choices"), 0);
    assert_true(json_is_null(json_object_get(c, "logprobs")));
    c = json_array_get(json_object_get(ev[1], "choices"), 0);
    lp = json_object_get(json_object_get(c, "logprobs"), "content");
    assert_int_equal(json_array_size(lp), 1);
    assert_string_equal(str_of(json_array_get(lp, 0), "token"), " Hello");
    json_decref(ev[0]);
    json_decref(ev[1]);

    /* an id outside the vocabulary: refused, nothing written */
    b.len = 0;
    r[1].top_token[1] = (int32_t) v->n_tokens;
    choice_init(&cs, 0, "x", KVS_FINISH_STOP);
    cs.lp = r;
    cs.n_lp = 2;
    assert_int_equal(kvs_api_resp_body(&b, &h, &cs, 1, NULL, v, &err),
                     KVS_EINVAL);
    assert_int_equal(b.len, 0);

    kvs_buf_free(&b);
    kvs_buf_free(&text);
    kvs_vocab_free(v);
}


static void
test_completions_logprobs(void **state)
{
    int32_t                 hello, c3, a9, e4, bang;
    json_t                 *j, *ev[4];
    size_t                  n;
    kvs_buf_t               b;
    kvs_err_t               err;
    kvs_vocab_t            *v;
    const json_t           *c, *lp, *a, *d;
    kvs_api_choice_t        cs;
    kvs_api_textpos_t       pos;
    kvs_api_resp_head_t     h;
    kvs_sample_logprobs_t   r[4];

    v = vocab("vocab/ggml-vocab-gpt-2.gguf");
    if (v == NULL) {
        skip();
    }

    hello = tok(v, " Hello");
    c3 = tok(v, "\xc3");
    a9 = tok(v, "\xa9");
    e4 = tok(v, "\xe4");
    bang = tok(v, "!");

    /* the sampled token outside the top list is added to the dict; two
     * half characters both show U+FFFD: one key, the likelier's */
    lp_set(&r[0], hello, -0.75f, 1, bang, -0.5);
    lp_set(&r[1], c3, -0.25f, 2, c3, -0.25, e4, -1.5);
    lp_set(&r[2], a9, -0.1f, 1, a9, -0.1);
    lp_set(&r[3], bang, -1.0f, 0);

    head_init(&h, KVS_API_COMPLETIONS, "cmpl-lp", 1);
    choice_init(&cs, 0, " Hello\xc3\xa9!", KVS_FINISH_STOP);
    cs.lp = r;
    cs.n_lp = 4;

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_api_resp_body(&b, &h, &cs, 1, NULL, v, &err),
                     KVS_OK);
    /* shortest forms, always reals */
    assert_non_null(strstr(cstr(&b),
                           "\"token_logprobs\":[-0.75,-0.25,-0.1,-1.0]"));

    j = parse_n(b.data, b.len);
    c = json_array_get(json_object_get(j, "choices"), 0);
    lp = json_object_get(c, "logprobs");
    keys_exact(lp, "tokens", "token_logprobs", "top_logprobs",
               "text_offset", NULL);

    a = json_object_get(lp, "tokens");
    assert_int_equal(json_array_size(a), 4);
    assert_string_equal(json_string_value(json_array_get(a, 0)), " Hello");
    assert_string_equal(json_string_value(json_array_get(a, 1)),
                        "\xef\xbf\xbd");
    assert_string_equal(json_string_value(json_array_get(a, 2)),
                        "\xef\xbf\xbd");
    assert_string_equal(json_string_value(json_array_get(a, 3)), "!");

    a = json_object_get(lp, "token_logprobs");
    check_lp(json_array_get(a, 0), -0.75f);
    check_lp(json_array_get(a, 2), -0.1f);

    a = json_object_get(lp, "top_logprobs");
    assert_int_equal(json_array_size(a), 4);
    d = json_array_get(a, 0);
    keys_exact(d, "!", " Hello", NULL);
    check_lp(json_object_get(d, "!"), -0.5f);
    check_lp(json_object_get(d, " Hello"), -0.75f);
    d = json_array_get(a, 1);
    keys_exact(d, "\xef\xbf\xbd", NULL);
    check_lp(json_object_get(d, "\xef\xbf\xbd"), -0.25f);
    d = json_array_get(a, 3);
    keys_exact(d, "!", NULL);
    check_lp(json_object_get(d, "!"), -1.0f);

    /* code points before each token: " Hello" is 6; "é" counts at its
     * first byte's token; "!" follows it */
    a = json_object_get(lp, "text_offset");
    assert_int_equal(json_array_size(a), 4);
    assert_int_equal(json_integer_value(json_array_get(a, 0)), 0);
    assert_int_equal(json_integer_value(json_array_get(a, 1)), 6);
    assert_int_equal(json_integer_value(json_array_get(a, 2)), 6);
    assert_int_equal(json_integer_value(json_array_get(a, 3)), 7);
    json_decref(j);

    /* a stream keeps the position across chunks (echo: from base 10) */
    kvs_api_textpos_init(&pos, v, NULL, 0, 10);
    b.len = 0;
    choice_init(&cs, 0, " Hello", KVS_FINISH_NONE);
    cs.lp = r;
    cs.n_lp = 2;
    cs.pos = &pos;
    assert_int_equal(kvs_api_resp_chunk(&b, &h, &cs, 1, 0, v, &err),
                     KVS_OK);
    choice_init(&cs, 0, "\xc3\xa9!", KVS_FINISH_STOP);
    cs.lp = r + 2;
    cs.n_lp = 2;
    cs.pos = &pos;
    assert_int_equal(kvs_api_resp_chunk(&b, &h, &cs, 1, 0, v, &err),
                     KVS_OK);
    assert_int_equal(pos.chars, 18);

    n = sse_events(&b, ev, 4);
    assert_int_equal(n, 2);
    a = json_object_get(json_object_get(json_array_get(
        json_object_get(ev[0], "choices"), 0), "logprobs"), "text_offset");
    assert_int_equal(json_array_size(a), 2);
    assert_int_equal(json_integer_value(json_array_get(a, 0)), 10);
    assert_int_equal(json_integer_value(json_array_get(a, 1)), 16);
    a = json_object_get(json_object_get(json_array_get(
        json_object_get(ev[1], "choices"), 0), "logprobs"), "text_offset");
    assert_int_equal(json_integer_value(json_array_get(a, 0)), 16);
    assert_int_equal(json_integer_value(json_array_get(a, 1)), 17);
    json_decref(ev[0]);
    json_decref(ev[1]);

    kvs_buf_free(&b);
    kvs_vocab_free(v);
}


/* SentencePiece: "▁" is a space, <0xNN> byte tokens are their byte, and
 * text_offset follows the detokenizer after a prompt. */
static void
test_spm_logprobs(void **state)
{
    int32_t                 hello, world, e4, prompt[2];
    json_t                 *j;
    kvs_buf_t               b;
    kvs_err_t               err;
    kvs_vocab_t            *v;
    const json_t           *e, *a;
    kvs_api_choice_t        cs;
    kvs_api_textpos_t       pos;
    kvs_api_resp_head_t     h;
    kvs_sample_logprobs_t   r[3];

    v = vocab("vocab/ggml-vocab-llama-spm.gguf");
    if (v == NULL) {
        skip();
    }

    hello = tok(v, "\xe2\x96\x81Hello");
    world = tok(v, "\xe2\x96\x81world");
    e4 = tok(v, "<0xE4>");

    lp_set(&r[0], hello, -1.0f, 1, e4, -3.0);
    lp_set(&r[1], e4, -2.0f, 0);
    lp_set(&r[2], world, -0.5f, 0);

    head_init(&h, KVS_API_CHAT, "chatcmpl-spm", 1);
    choice_init(&cs, 0, "Hello\xef\xbf\xbd world", KVS_FINISH_STOP);
    cs.lp = r;
    cs.n_lp = 3;

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_api_resp_body(&b, &h, &cs, 1, NULL, v, &err),
                     KVS_OK);
    j = parse_n(b.data, b.len);
    a = json_object_get(json_object_get(json_array_get(
        json_object_get(j, "choices"), 0), "logprobs"), "content");

    e = json_array_get(a, 0);
    assert_string_equal(str_of(e, "token"), " Hello");
    check_bytes(json_object_get(e, "bytes"), " Hello", 6);
    e = json_array_get(json_object_get(e, "top_logprobs"), 0);
    assert_string_equal(str_of(e, "token"), "\xef\xbf\xbd");
    check_bytes(json_object_get(e, "bytes"), "\xe4", 1);

    e = json_array_get(a, 1);
    check_bytes(json_object_get(e, "bytes"), "\xe4", 1);
    e = json_array_get(a, 2);
    assert_string_equal(str_of(e, "token"), " world");
    json_decref(j);

    /* completions: from a fresh start the first "▁" is the dummy prefix
     * and shows nothing ("Hello" is 5); after a prompt it is a space (6) */
    h.kind = KVS_API_COMPLETIONS;
    r[1] = r[2];
    choice_init(&cs, 0, "Hello world", KVS_FINISH_STOP);
    cs.lp = r;
    cs.n_lp = 2;

    b.len = 0;
    assert_int_equal(kvs_api_resp_body(&b, &h, &cs, 1, NULL, v, &err),
                     KVS_OK);
    j = parse_n(b.data, b.len);
    a = json_object_get(json_object_get(json_array_get(
        json_object_get(j, "choices"), 0), "logprobs"), "text_offset");
    assert_int_equal(json_integer_value(json_array_get(a, 0)), 0);
    assert_int_equal(json_integer_value(json_array_get(a, 1)), 5);
    json_decref(j);

    prompt[0] = v->bos;
    prompt[1] = tok(v, "\xe2\x96\x81Say");
    kvs_api_textpos_init(&pos, v, prompt, 2, 0);
    cs.pos = &pos;

    b.len = 0;
    assert_int_equal(kvs_api_resp_body(&b, &h, &cs, 1, NULL, v, &err),
                     KVS_OK);
    j = parse_n(b.data, b.len);
    a = json_object_get(json_object_get(json_array_get(
        json_object_get(j, "choices"), 0), "logprobs"), "text_offset");
    assert_int_equal(json_integer_value(json_array_get(a, 0)), 0);
    assert_int_equal(json_integer_value(json_array_get(a, 1)), 6);
    assert_int_equal(pos.chars, 12);
    json_decref(j);

    kvs_buf_free(&b);
    kvs_vocab_free(v);
}


/* Float text: shortest round-trip, typed real, floor for -inf/NaN. */
static void
test_logprob_numbers(void **state)
{
    int                     i;
    char                   *s;
    json_t                 *j;
    uint64_t                rng;
    kvs_buf_t               b;
    kvs_err_t               err;
    kvs_vocab_t            *v;
    const json_t           *a;
    kvs_api_choice_t        cs;
    kvs_api_resp_head_t     h;
    kvs_sample_logprobs_t   r[64];

    static const char  want[] = "-0.5,0.0,-0.0,-1.0,-1.25e-05,-9999.0,"
                                "-9999.0,-20.0,";

    v = vocab("vocab/ggml-vocab-gpt-2.gguf");
    if (v == NULL) {
        skip();
    }

    lp_set(&r[0], 0, -0.5f, 0);
    lp_set(&r[1], 0, 0.0f, 0);
    lp_set(&r[2], 0, -0.0f, 0);
    lp_set(&r[3], 0, -1.0f, 0);
    lp_set(&r[4], 0, -1.25e-5f, 0);
    lp_set(&r[5], 0, -INFINITY, 0);
    lp_set(&r[6], 0, NAN, 0);
    lp_set(&r[7], 0, -20.0f, 0);

    rng = 7;
    for (i = 8; i < 64; i++) {
        lp_set(&r[i], 0, -(float) (kvs_splitmix64(&rng) >> 40)
                         / (float) (1 << 20), 0);
    }

    head_init(&h, KVS_API_COMPLETIONS, "cmpl-n", 1);
    choice_init(&cs, 0, "", KVS_FINISH_LENGTH);
    cs.lp = r;
    cs.n_lp = 64;

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_api_resp_body(&b, &h, &cs, 1, NULL, v, &err),
                     KVS_OK);
    s = strstr(cstr(&b), "\"token_logprobs\":[");
    assert_non_null(s);
    s += strlen("\"token_logprobs\":[");
    assert_memory_equal(s, want, sizeof(want) - 1);

    j = parse_n(b.data, b.len);
    a = json_object_get(json_object_get(json_array_get(
        json_object_get(j, "choices"), 0), "logprobs"), "token_logprobs");

    for (i = 8; i < 64; i++) {
        check_lp(json_array_get(a, i), r[i].logprob);
    }

    json_decref(j);
    kvs_buf_free(&b);
    kvs_vocab_free(v);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_ids),
        cmocka_unit_test(test_chat_body),
        cmocka_unit_test(test_completions_body),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_chat_stream),
        cmocka_unit_test(test_completions_stream),
        cmocka_unit_test(test_tool_calls),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_chat_logprobs),
        cmocka_unit_test(test_completions_logprobs),
        cmocka_unit_test(test_spm_logprobs),
        cmocka_unit_test(test_logprob_numbers),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
