/*
 * fuzz_api_req: libFuzzer target for the OpenAI request parser (`make
 * fuzz`).  Every input is parsed as a chat and as a completions body
 * (and once more under a body limit of half its size).  A parse either
 * fails with a well-formed error (a known status, a UTF-8 message, an
 * error body that is valid JSON with the four keys, a request that owns
 * nothing) or gives a request whose every field is in its documented
 * range; the messages (and tools) of an accepted chat request then
 * render with a built-in chat format and with a Jinja template that
 * walks the tool fields, or are refused with a field-naming KVS_EINVAL
 * (KVS_EUNSUPPORTED for tool calling through a built-in format).
 * The same input is parsed as /tokenize and /detokenize bodies too
 * (kvs_api_tok), with the same rule for failures, and an accepted one
 * answers valid JSON; an accepted request's unknown fields are named
 * (kvs_api_req_unknown), each a key of its body.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/kvs_api_req.h"
#include "api/kvs_api_tok.h"
#include "base/kvs_utf8.h"
#include "tokenizer/kvs_chat.h"
#include "tokenizer/kvs_chat_jinja.h"


#define FUZZ_CHECK(c)  do { if (!(c)) { __builtin_trap(); } } while (0)


static void
fuzz_str(kvs_api_str_t s, size_t max)
{
    FUZZ_CHECK(s.ptr != NULL && s.len <= max);
    FUZZ_CHECK(strlen(s.ptr) == s.len);            /* no NUL inside */
    FUZZ_CHECK(kvs_utf8_valid((const uint8_t *) s.ptr, s.len));
}


static void
fuzz_failed(const kvs_api_req_t *r, const kvs_api_err_t *e)
{
    json_t        *j, *o;
    kvs_buf_t      out;
    json_error_t   je;

    FUZZ_CHECK(r->root == NULL && r->prompts == NULL
               && r->sample.logit_bias == NULL);
    FUZZ_CHECK(e->status == 400 || e->status == 413 || e->status == 500);
    FUZZ_CHECK(e->message[0] != '\0');
    FUZZ_CHECK(kvs_utf8_valid((const uint8_t *) e->message,
                              strlen(e->message)));

    memset(&out, 0, sizeof(out));
    if (kvs_api_err_json(e, &out) != KVS_OK) {
        kvs_buf_free(&out);
        return;                                     /* out of memory */
    }

    j = json_loadb((const char *) out.data, out.len, 0, &je);
    FUZZ_CHECK(j != NULL);
    o = json_object_get(j, "error");
    FUZZ_CHECK(json_object_size(o) == 4);
    FUZZ_CHECK(json_is_string(json_object_get(o, "message")));
    json_decref(j);
    kvs_buf_free(&out);
}


/* A template reading every tool field, as the corpus' templates do
 * (Qwen's tojson of tools and arguments, Llama's items of arguments). */
static const char  fuzz_tools_tpl[] =
    "{% if tools %}{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
    "{% endif %}{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}"
    "{{ c.id }} {{ c.function.name }} {{ c.function.arguments | tojson }}"
    "{% if c.function.arguments is mapping %}"
    "{% for k, v in c.function.arguments | items %}{{ k }}={{ v }};"
    "{% endfor %}{% endif %}{% endfor %}{% endif %}"
    "{% if m.tool_call_id %} for {{ m.tool_call_id }}{% endif %}"
    "{% endfor %}";


/* chatml takes any order of turns, gemma insists on alternation and
 * trims: between them most of the renderer's checks are reached; the
 * Jinja template takes tool calling, which the two refuse */
static void
fuzz_render(const kvs_api_req_t *r, int gemma)
{
    kvs_buf_t                 out;
    kvs_err_t                 err;
    kvs_chat_t                tpl;
    kvs_api_err_t             a;
    kvs_chat_args_t           args;
    int                       rc, k;

    static kvs_chat_jinja_t  *cj;

    if (cj == NULL
        && kvs_chat_jinja_compile(&cj, fuzz_tools_tpl,
                                  sizeof(fuzz_tools_tpl) - 1, NULL, &err)
           != KVS_OK)
    {
        FUZZ_CHECK(0);
    }

    memset(&args, 0, sizeof(args));
    args.add_generation_prompt = 1;
    args.tools = r->tools;

    for (k = 0; k < 2; k++) {
        if (k == 0) {
            if (kvs_chat_by_name(gemma ? "gemma" : "chatml", gemma ? 5 : 6,
                                 &tpl, &err) != KVS_OK)
            {
                continue;
            }

        } else {
            memset(&tpl, 0, sizeof(tpl));
            tpl.jinja = cj;
        }

        memset(&out, 0, sizeof(out));

        rc = kvs_chat_render(&tpl, r->messages, &args, &out, &err);
        FUZZ_CHECK(rc == KVS_OK || rc == KVS_EINVAL || rc == KVS_ENOMEM
                   || (rc == KVS_EUNSUPPORTED && k == 0));

        /* a render past its limits (deep arguments, say) is the
         * template's refusal, not a field's */
        if (rc == KVS_EINVAL && k == 1
            && strncmp(err.msg, "chat template: ", 15) == 0)
        {
            rc = KVS_OK;
        }

        if (rc == KVS_EINVAL || rc == KVS_EUNSUPPORTED) {
            kvs_api_err_from_msg(&a, 400, NULL, err.msg);
            FUZZ_CHECK(strncmp(a.param, "messages", 8) == 0
                       || (rc == KVS_EUNSUPPORTED
                           && strcmp(a.param, "tools") == 0));
        }

        kvs_buf_free(&out);
    }
}


static void
fuzz_ok(const kvs_api_req_t *r, kvs_api_kind_t kind, int gemma)
{
    size_t     i, j;
    int32_t    max_id;
    kvs_err_t  err;

    FUZZ_CHECK(r->root != NULL && r->kind == kind);
    fuzz_str(r->model, SIZE_MAX);
    FUZZ_CHECK(r->n >= 1 && r->n <= KVS_API_MAX_N);
    FUZZ_CHECK(r->n_stop <= KVS_API_MAX_STOP);
    FUZZ_CHECK(r->include_usage == 0 || r->stream == 1);

    for (i = 0; i < r->n_stop; i++) {
        fuzz_str(r->stop[i], KVS_API_MAX_STOP_LEN);
        FUZZ_CHECK(r->stop[i].len >= 1);
    }

    if (r->user.ptr != NULL) {
        fuzz_str(r->user, SIZE_MAX);
    }

    max_id = 0;
    for (i = 0; i < r->sample.n_logit_bias; i++) {
        FUZZ_CHECK(r->sample.logit_bias[i].token >= 0);
        if (r->sample.logit_bias[i].token > max_id) {
            max_id = r->sample.logit_bias[i].token;
        }
    }

    /* the smallest vocabulary holding every biased id (none holds
     * INT32_MAX: n_vocab is at most INT32_MAX) */
    if (max_id < INT32_MAX) {
        FUZZ_CHECK(kvs_sample_params_check(&r->sample,
                                           (uint32_t) max_id + 1, &err)
                   == KVS_OK);
    }

    if (kind == KVS_API_CHAT) {
        FUZZ_CHECK(json_array_size(r->messages) >= 1);
        FUZZ_CHECK(r->max_tokens == -1 || r->max_tokens >= 1);
        FUZZ_CHECK(r->prompts == NULL && r->echo == 0);
        FUZZ_CHECK(r->n_breaks <= KVS_API_MAX_BREAKS);

        /* cache_control breakpoints name a message, a part of it */
        for (i = 0; i < r->n_breaks; i++) {
            FUZZ_CHECK(r->breaks[i].message < json_array_size(r->messages));
            FUZZ_CHECK(r->breaks[i].part < 0
                       || (size_t) r->breaks[i].part < json_array_size(
                              json_object_get(json_array_get(r->messages,
                                  r->breaks[i].message), "content")));
            FUZZ_CHECK(r->breaks[i].ttl_ms == KVS_API_TTL_5M
                       || r->breaks[i].ttl_ms == KVS_API_TTL_1H);
            FUZZ_CHECK(i == 0
                       || r->breaks[i].message >= r->breaks[i - 1].message);
        }

        fuzz_render(r, gemma);
        return;
    }

    FUZZ_CHECK(r->messages == NULL);
    FUZZ_CHECK(r->max_tokens >= (r->echo ? 0 : 1));
    FUZZ_CHECK(r->n_prompts >= 1 && r->n_prompts <= KVS_API_MAX_PROMPTS);
    FUZZ_CHECK(r->sample.top_logprobs <= KVS_API_MAX_LOGPROBS_C);

    for (i = 0; i < r->n_prompts; i++) {
        if (r->prompts[i].text.ptr != NULL) {
            fuzz_str(r->prompts[i].text, SIZE_MAX);
            FUZZ_CHECK(r->prompts[i].ids == NULL);
            continue;
        }

        FUZZ_CHECK(r->prompts[i].n_ids >= 1);
        for (j = 0; j < r->prompts[i].n_ids; j++) {
            FUZZ_CHECK(r->prompts[i].ids[j] >= 0);
        }
    }
}


/* /tokenize and /detokenize bodies: a failure as the parser's, an
 * accepted body's fields in range and its answer valid JSON. */
static void
fuzz_tok(const char *copy, size_t size)
{
    int            rc;
    size_t         i;
    json_t        *j;
    kvs_buf_t      out;
    kvs_api_tok_t  t;
    kvs_api_err_t  e;
    json_error_t   je;
    const int32_t  ids[2] = { 0, 2147483647 };

    memset(&e, 0, sizeof(e));
    rc = kvs_api_tokenize_parse(&t, copy, size, 0, &e);

    if (rc != KVS_OK) {
        fuzz_failed(&t.req, &e);
        FUZZ_CHECK(t.ids == NULL);

    } else {
        FUZZ_CHECK(t.shape == KVS_API_TOK_VLLM
                   || t.shape == KVS_API_TOK_LLAMA);
        if (t.req.kind == KVS_API_CHAT) {
            FUZZ_CHECK(json_array_size(t.req.messages) > 0);
        } else {
            FUZZ_CHECK(t.req.n_prompts == 1);
            fuzz_str(t.req.prompts[0].text, size);
        }

        memset(&out, 0, sizeof(out));
        if (kvs_api_tokenize_json(&t, ids, 2, 1, &out) == KVS_OK) {
            j = json_loadb((const char *) out.data, out.len, 0, &je);
            FUZZ_CHECK(j != NULL);
            json_decref(j);
        }
        kvs_buf_free(&out);
    }

    kvs_api_tok_free(&t);

    memset(&e, 0, sizeof(e));
    rc = kvs_api_detokenize_parse(&t, copy, size, 0, &e);

    if (rc != KVS_OK) {
        fuzz_failed(&t.req, &e);
        FUZZ_CHECK(t.ids == NULL);

    } else {
        for (i = 0; i < t.n_ids; i++) {
            FUZZ_CHECK(t.ids[i] >= 0);
        }

        rc = kvs_api_tok_check_ids(&t, 100, &e);
        FUZZ_CHECK(rc == KVS_OK || (e.status == 400
                                    && strncmp(e.param, "tokens[", 7) == 0));

        memset(&out, 0, sizeof(out));
        if (kvs_api_detokenize_json(&t, "a\"b", 3, &out) == KVS_OK) {
            j = json_loadb((const char *) out.data, out.len, 0, &je);
            FUZZ_CHECK(j != NULL);
            json_decref(j);
        }
        kvs_buf_free(&out);
    }

    kvs_api_tok_free(&t);
}


/* The unknown fields an accepted request names are keys of its body. */
static void
fuzz_unknown(const kvs_api_req_t *r)
{
    size_t       i, n;
    const char  *names[4];

    n = kvs_api_req_unknown(r, names, 4);

    for (i = 0; i < n && i < 4; i++) {
        FUZZ_CHECK(json_object_get(r->root, names[i]) != NULL);
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int             rc, k;
    char           *copy;
    kvs_api_req_t   r;
    kvs_api_err_t   e;

    /* an exact-size heap copy, so ASan sees any read past the end */
    copy = malloc(size ? size : 1);
    if (copy == NULL) {
        return 0;
    }
    memcpy(copy, data, size);

    for (k = 0; k < 2; k++) {
        memset(&e, 0, sizeof(e));

        rc = kvs_api_req_parse(&r, (kvs_api_kind_t) k, copy, size, 0, &e);

        if (rc == KVS_OK) {
            fuzz_unknown(&r);
            fuzz_ok(&r, (kvs_api_kind_t) k, (int) (size & 1));
        } else {
            fuzz_failed(&r, &e);
        }

        kvs_api_req_free(&r);
    }

    fuzz_tok(copy, size);

    /* over the limit: refused before parsing */
    if (size >= 2) {
        rc = kvs_api_req_parse(&r, KVS_API_CHAT, copy, size, size / 2, &e);
        FUZZ_CHECK(rc != KVS_OK && e.status == 413);
        kvs_api_req_free(&r);
    }

    free(copy);

    return 0;
}
