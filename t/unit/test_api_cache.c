/*
 * test_api_cache: client cache breakpoints (Anthropic's cache_control).
 *
 * Parsing: cache_control on text parts and on messages, the default and
 * the two TTLs, null as absent, and the 400s (wrong type, unknown type or
 * ttl, a 5th breakpoint) with the param naming the field.
 *
 * Positions: with real vocabularies (fixtures) and chat templates, each
 * breakpoint's byte offset equals the length of the prompt prefix written
 * here by hand from the family's format (kvs_chat.h) up to the end of
 * that part's content, the full prompt starts with it, and the token
 * count equals the number of ids of that prefix tokenized on its own,
 * which are the first ids of the prompt (less the last one where the
 * tokenizer merges it with what follows, each such case said and shown:
 * the prompt's next id differs).
 *
 * Usage: Anthropic's cache_read_input_tokens and
 * cache_creation_input_tokens appear exactly when the request gave
 * breakpoints, beside OpenAI's prompt_tokens_details.cached_tokens.
 * Metrics: kvserve:prefix_cache_queries_total and _hits_total count
 * tokens per model (vLLM's names), and the engine's evictions appear
 * only with its gauges.
 */

#include "kvs_test_tok.h"

#include <jansson.h>

#include "api/kvs_api_cache.h"
#include "api/kvs_api_req.h"
#include "api/kvs_api_resp.h"
#include "metrics/kvs_metrics.h"
#include "tokenizer/kvs_chat.h"


static kvs_api_req_t  R;
static kvs_api_err_t  E;
static int            RC;


static int
teardown(void **state)
{
    kvs_api_req_free(&R);
    return 0;
}


/* Parses a chat body written with ' for ". */
static int
chat(const char *body)
{
    char  *s, *p;

    s = strdup(body);
    assert_non_null(s);

    for (p = s; *p != '\0'; p++) {
        if (*p == '\'') {
            *p = '"';
        }
    }

    kvs_api_req_free(&R);
    memset(&E, 0, sizeof(E));
    RC = kvs_api_req_parse(&R, KVS_API_CHAT, s, strlen(s), 0, &E);
    free(s);

    return RC;
}


static void
bad(const char *param, const char *code, const char *msg)
{
    if (RC == KVS_OK) {
        fail_msg("parse succeeded, want 400 on '%s'", param);
    }

    if (E.status != 400 || strcmp(E.param, param) != 0
        || strcmp(E.code, code) != 0 || strstr(E.message, msg) == NULL
        || strcmp(E.type, "invalid_request_error") != 0)
    {
        fail_msg("got %d param '%s' code '%s': %s\nwant 400 '%s' '%s' "
                 "...%s...", E.status, E.param, E.code, E.message, param,
                 code, msg);
    }
}


#define CC   "'cache_control':{'type':'ephemeral'}"
#define CC1H "'cache_control':{'type':'ephemeral','ttl':'1h'}"


static void
test_parse_ok(void **state)
{
    chat("{'model':'m','messages':["
         "{'role':'system','content':'S'," CC "},"
         "{'role':'user','content':[{'type':'text','text':'a'},"
         "  {'type':'text','text':'b'," CC1H "},"
         "  {'type':'text','text':'c','cache_control':null}]},"
         "{'role':'assistant','content':'x'},"
         "{'role':'user','content':[{'type':'text','text':'d',"
         "  'cache_control':{'type':'ephemeral','ttl':'5m'}}]," CC "}]}");

    if (RC != KVS_OK) {
        fail_msg("%s (%s)", E.message, E.param);
    }

    assert_int_equal(R.n_breaks, 4);
    assert_int_equal(R.breaks[0].message, 0);
    assert_int_equal(R.breaks[0].part, -1);
    assert_int_equal(R.breaks[0].ttl_ms, 5 * 60 * 1000);
    assert_int_equal(R.breaks[1].message, 1);
    assert_int_equal(R.breaks[1].part, 1);
    assert_int_equal(R.breaks[1].ttl_ms, 60 * 60 * 1000);
    assert_int_equal(R.breaks[2].message, 3);
    assert_int_equal(R.breaks[2].part, 0);
    assert_int_equal(R.breaks[2].ttl_ms, 5 * 60 * 1000);
    assert_int_equal(R.breaks[3].message, 3);
    assert_int_equal(R.breaks[3].part, -1);

    /* none */
    chat("{'model':'m','messages':[{'role':'user','content':'hi'}]}");
    assert_int_equal(RC, KVS_OK);
    assert_int_equal(R.n_breaks, 0);
}


static void
test_parse_bad(void **state)
{
    chat("{'model':'m','messages':[{'role':'user','content':["
         "{'type':'text','text':'a','cache_control':'ephemeral'}]}]}");
    bad("messages[0].content[0].cache_control", "invalid_type",
        "expected an object, but got a string");

    chat("{'model':'m','messages':[{'role':'user','content':'a',"
         "'cache_control':{'ttl':'5m'}}]}");
    bad("messages[0].cache_control.type", "missing_required_parameter",
        "Missing required parameter");

    chat("{'model':'m','messages':[{'role':'user','content':'a',"
         "'cache_control':{'type':'persistent'}}]}");
    bad("messages[0].cache_control.type", "invalid_value",
        "'persistent'");

    chat("{'model':'m','messages':[{'role':'user','content':'a',"
         "'cache_control':{'type':5}}]}");
    bad("messages[0].cache_control.type", "invalid_type",
        "expected a string");

    chat("{'model':'m','messages':[{'role':'user','content':["
         "{'type':'text','text':'a',"
         "'cache_control':{'type':'ephemeral','ttl':'10m'}}]}]}");
    bad("messages[0].content[0].cache_control.ttl", "invalid_value",
        "'10m'. Supported values are: '5m' and '1h'");

    chat("{'model':'m','messages':[{'role':'user','content':'a',"
         "'cache_control':{'type':'ephemeral','ttl':300}}]}");
    bad("messages[0].cache_control.ttl", "invalid_type",
        "expected a string");

    /* the 5th, wherever it is, names itself */
    chat("{'model':'m','messages':["
         "{'role':'system','content':'S'," CC "},"
         "{'role':'user','content':'u1'," CC "},"
         "{'role':'assistant','content':'a1'," CC "},"
         "{'role':'user','content':[{'type':'text','text':'x'," CC "},"
         "  {'type':'text','text':'y'," CC "}]}]}");
    bad("messages[3].content[1].cache_control", "too_many_cache_breakpoints",
        "A maximum of 4 blocks with cache_control may be provided. "
        "Found 5.");
}


/* Positions through a real tokenizer. */

typedef struct {
    const char  *vocab;               /* fixture */
    const char  *family;
    const char  *bos, *eos;           /* texts the worker passes */
    const char  *json;                /* ' for ", with cache_control */
    const char  *want[KVS_API_MAX_BREAKS];  /* prefixes, by hand */
    size_t       merged[KVS_API_MAX_BREAKS];  /* the prefix's last ids
                                                 that the prompt merges
                                                 with what follows */
} cache_case_t;


static void
check_case(const cache_case_t *c)
{
    int              rc;
    char            *s, *p;
    size_t           off[KVS_API_MAX_BREAKS], wl;
    uint32_t         k, nt[KVS_API_MAX_BREAKS];
    kvs_err_t        err;
    kvs_ids_t        ids, pre;
    kvs_buf_t        text, spans;
    kvs_chat_t       ch;
    kvs_vocab_t     *v;
    kvs_tok_ctx_t    ctx;
    kvs_chat_args_t  a;

    v = kvs_test_vocab(c->vocab, 0);
    if (v == NULL) {
        skip();
    }

    s = strdup(c->json);
    assert_non_null(s);
    for (p = s; *p != '\0'; p++) {
        if (*p == '\'') {
            *p = '"';
        }
    }

    kvs_api_req_free(&R);
    rc = kvs_api_req_parse(&R, KVS_API_CHAT, s, strlen(s), 0, &E);
    free(s);
    if (rc != KVS_OK) {
        fail_msg("%s: %s", c->family, E.message);
    }

    memset(&a, 0, sizeof(a));
    memset(&text, 0, sizeof(text));
    memset(&spans, 0, sizeof(spans));
    memset(&ids, 0, sizeof(ids));
    memset(&pre, 0, sizeof(pre));
    memset(&ctx, 0, sizeof(ctx));

    a.bos = c->bos;
    a.bos_len = strlen(c->bos);
    a.eos = c->eos;
    a.eos_len = strlen(c->eos);
    a.add_generation_prompt = 1;
    a.spans = &spans;

    assert_int_equal(kvs_chat_by_name(c->family, strlen(c->family), &ch,
                                      &err), KVS_OK);
    assert_int_equal(kvs_chat_render(&ch, R.messages, &a, &text, &err),
                     KVS_OK);
    assert_int_equal(kvs_tok_encode_guarded(v, &ctx, (char *) text.data,
                     text.len, KVS_TOK_SPECIAL, (kvs_span_t *) spans.data,
                     spans.len / sizeof(kvs_span_t), &ids, &err), KVS_OK);

    a.spans = NULL;
    rc = kvs_api_cache_offsets(&ch, R.messages, &a, (char *) text.data,
                               text.len, R.breaks, R.n_breaks, off, &err);
    if (rc != KVS_OK) {
        fail_msg("%s: offsets: %s", c->family, err.msg);
    }

    rc = kvs_api_cache_tokens(v, &ctx, (char *) text.data, text.len,
                              KVS_TOK_SPECIAL, (kvs_span_t *) spans.data,
                              spans.len / sizeof(kvs_span_t), ids.ids, ids.n,
                              off, R.n_breaks, nt, &err);
    if (rc != KVS_OK) {
        fail_msg("%s: tokens: %s", c->family, err.msg);
    }

    for (k = 0; k < R.n_breaks; k++) {
        assert_non_null(c->want[k]);
        wl = strlen(c->want[k]);

        if (off[k] != wl || text.len < wl
            || memcmp(text.data, c->want[k], wl) != 0)
        {
            fail_msg("%s: breakpoint %u at byte %zu, want %zu:\n%.*s\n---\n"
                     "%s", c->family, k, off[k], wl, (int) text.len,
                     (char *) text.data, c->want[k]);
        }

        pre.n = 0;
        assert_int_equal(kvs_tok_encode(v, &ctx, c->want[k], wl,
                                        KVS_TOK_SPECIAL, &pre, &err),
                         KVS_OK);

        if (nt[k] + c->merged[k] != pre.n) {
            fail_msg("%s: breakpoint %u: %u tokens, the prefix has %zu "
                     "(%zu merged)", c->family, k, nt[k], pre.n,
                     c->merged[k]);
        }

        assert_true(nt[k] > 0 && nt[k] < ids.n);
        assert_memory_equal(pre.ids, ids.ids, nt[k] * sizeof(int32_t));

        if (c->merged[k] > 0) {
            assert_true(pre.ids[nt[k]] != ids.ids[nt[k]]);
        }
    }

    assert_null(k < KVS_API_MAX_BREAKS ? c->want[k] : NULL);

    kvs_ids_free(&ids);
    kvs_ids_free(&pre);
    kvs_buf_free(&text);
    kvs_buf_free(&spans);
    kvs_tok_ctx_free(&ctx);
    kvs_vocab_free(v);
}


/* Phi-3's own vocabulary and template: parts, message-level, system. */
static void
test_pos_phi3(void **state)
{
    cache_case_t   c = {
        "vocab/ggml-vocab-phi-3.gguf", "phi3", "<s>", "</s>",
        "{'model':'m','messages':["
        "{'role':'system','content':'You are terse.'," CC "},"
        "{'role':'user','content':[{'type':'text','text':'Tell me '},"
        "  {'type':'text','text':'about cats.'," CC "},"
        "  {'type':'text','text':' Be short.'}]},"
        "{'role':'assistant','content':'Cats purr.'},"
        "{'role':'user','content':[{'type':'text','text':'More'," CC "}]}"
        "]}",
        {
            "<|system|>\nYou are terse.",
            "<|system|>\nYou are terse.<|end|>\n"
            "<|user|>\nTell me about cats.",
            "<|system|>\nYou are terse.<|end|>\n"
            "<|user|>\nTell me about cats. Be short.<|end|>\n"
            "<|assistant|>\nCats purr.<|end|>\n<|user|>\nMore",
            NULL
        },
        { 0 }
    };

    check_case(&c);
}


/* Llama 2 (SentencePiece): the system message folded into the first
 * user turn, its breakpoint inside that turn. */
static void
test_pos_llama2(void **state)
{
    cache_case_t   c = {
        "vocab/ggml-vocab-llama-spm.gguf", "llama2", "<s>", "</s>",
        "{'model':'m','messages':["
        "{'role':'system','content':'Answer in French.'," CC "},"
        "{'role':'user','content':'What is a cat?'," CC1H "},"
        "{'role':'assistant','content':'Un chat.'},"
        "{'role':'user','content':[{'type':'text','text':'And a dog?',"
        CC "}, {'type':'text','text':' Briefly.'}]}]}",
        {
            "<s>[INST] <<SYS>>\nAnswer in French.",
            "<s>[INST] <<SYS>>\nAnswer in French.\n<</SYS>>\n\n"
            "What is a cat?",
            "<s>[INST] <<SYS>>\nAnswer in French.\n<</SYS>>\n\n"
            "What is a cat? [/INST] Un chat. </s><s>[INST] And a dog?",
            NULL
        },
        { 0 }
    };

    check_case(&c);
}


/* Mistral on the same vocabulary: no trimming, " [INST] " turns. */
static void
test_pos_mistral(void **state)
{
    cache_case_t   c = {
        "vocab/ggml-vocab-llama-spm.gguf", "mistral", "<s>", "</s>",
        "{'model':'m','messages':["
        "{'role':'user','content':'Hello there'," CC "},"
        "{'role':'assistant','content':'Hi!'," CC "},"
        "{'role':'user','content':'Name three colours.'}]}",
        {
            "<s> [INST] Hello there",
            "<s> [INST] Hello there [/INST] Hi!",
            NULL
        },
        { 0 }
    };

    check_case(&c);
}


/* Llama 3's whitespace rule on the Llama SPM vocabulary (its markers are
 * plain text there): a message's joined parts are trimmed as a whole, so
 * a breakpoint after "Hello " ends before the space, and one on a part
 * whose neighbours are blank ends where the content does; there "." and
 * the "<" of "<|eot_id|>" are one token, ".<", so it stops before the
 * ".". */
static void
test_pos_llama3_trim(void **state)
{
    kvs_vocab_t    *v;
    cache_case_t   c = {
        "vocab/ggml-vocab-llama-spm.gguf", "llama3", "<|begin_of_text|>",
        "<|eot_id|>",
        "{'model':'m','messages':["
        "{'role':'user','content':[{'type':'text','text':'Hello '," CC "},"
        "  {'type':'text','text':'world'}]},"
        "{'role':'assistant','content':'Hi.'},"
        "{'role':'user','content':[{'type':'text','text':'  Tell me '},"
        "  {'type':'text','text':'about cats.  '," CC "},"
        "  {'type':'text','text':'  '}]}]}",
        {
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
            "Hello",
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
            "Hello world<|eot_id|><|start_header_id|>assistant"
            "<|end_header_id|>\n\nHi.<|eot_id|><|start_header_id|>user"
            "<|end_header_id|>\n\nTell me about cats.",
            NULL
        },
        { 0, 1, 0, 0 }
    };

    v = kvs_test_vocab(c.vocab, 0);
    if (v == NULL) {
        skip();
    }

    assert_true(kvs_vocab_find(v, ".<", 2) >= 0);
    kvs_vocab_free(v);

    check_case(&c);
}


/* Gemma on the same vocabulary: each part trimmed on its own, the system
 * message folded into the first user turn before its content.  The parts
 * join into one word, "onetwothree", which SentencePiece splits anew: the
 * prefix's last piece, "wo", is not the prompt's ("w", "oth", "ree"), so
 * the second breakpoint stops before it. */
static void
test_pos_gemma(void **state)
{
    cache_case_t  c = {
        "vocab/ggml-vocab-llama-spm.gguf", "gemma", "<bos>", "<eos>",
        "{'model':'m','messages':["
        "{'role':'system','content':'Be kind.'," CC "},"
        "{'role':'user','content':[{'type':'text','text':' one '},"
        "  {'type':'text','text':' two '," CC "},"
        "  {'type':'text','text':' three'}]}]}",
        {
            "<bos><start_of_turn>user\nBe kind.",
            "<bos><start_of_turn>user\nBe kind.\n\nonetwo",
            NULL
        },
        { 0, 1, 0, 0 }
    };

    check_case(&c);
}


/* ChatML on a byte-level BPE vocabulary (GPT-2's: the markers are
 * plain text to it): "." and the "<" of "<|im_end|>" are one token, ".<",
 * so the first breakpoint stops before the ".". */
static void
test_pos_chatml(void **state)
{
    kvs_vocab_t    *v;
    cache_case_t   c = {
        "vocab/ggml-vocab-gpt-2.gguf", "chatml", "", "<|endoftext|>",
        "{'model':'m','messages':["
        "{'role':'system','content':'You help.'," CC "},"
        "{'role':'user','content':[{'type':'text','text':'One, '},"
        "  {'type':'text','text':'two,'," CC "},"
        "  {'type':'text','text':' three.'}]}]}",
        {
            "<|im_start|>system\nYou help.",
            "<|im_start|>system\nYou help.<|im_end|>\n"
            "<|im_start|>user\nOne, two,",
            NULL
        },
        { 1, 0, 0, 0 }
    };

    v = kvs_test_vocab(c.vocab, 0);
    if (v == NULL) {
        skip();
    }

    assert_true(kvs_vocab_find(v, ".<", 2) >= 0);
    kvs_vocab_free(v);

    check_case(&c);
}


static json_t *
usage_of(const kvs_api_usage_t *u)
{
    char                 *nl;
    json_t               *j, *us;
    kvs_buf_t             b;
    json_error_t          jerr;
    kvs_api_resp_head_t   h;

    memset(&h, 0, sizeof(h));
    h.kind = KVS_API_CHAT;
    h.id = "chatcmpl-x";
    h.id_len = 10;
    h.model = "m";
    h.model_len = 1;

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_api_resp_usage_chunk(&b, &h, u), KVS_OK);
    assert_int_equal(kvs_buf_printf(&b, "%c", '\0'), KVS_OK);

    /* "data: {...}\n\n" */
    assert_memory_equal(b.data, "data: ", 6);
    nl = strchr((char *) b.data + 6, '\n');
    assert_non_null(nl);
    j = json_loadb((char *) b.data + 6, (size_t) (nl - (char *) b.data - 6),
                   0, &jerr);
    kvs_buf_free(&b);
    if (j == NULL) {
        fail_msg("usage chunk: %s", jerr.text);
    }

    us = json_object_get(j, "usage");
    assert_non_null(us);
    json_incref(us);
    json_decref(j);

    return us;
}


static void
test_usage(void **state)
{
    json_t           *us;
    kvs_api_usage_t   u;

    memset(&u, 0, sizeof(u));
    u.prompt_tokens = 100;
    u.completion_tokens = 5;
    u.cached_tokens = 64;
    u.cache_creation_tokens = 32;

    /* no breakpoints: OpenAI's fields only */
    us = usage_of(&u);
    assert_int_equal(json_integer_value(json_object_get(
        json_object_get(us, "prompt_tokens_details"), "cached_tokens")), 64);
    assert_null(json_object_get(us, "cache_read_input_tokens"));
    assert_null(json_object_get(us, "cache_creation_input_tokens"));
    json_decref(us);

    u.breakpoints = 1;
    us = usage_of(&u);
    assert_int_equal(json_integer_value(json_object_get(
        json_object_get(us, "prompt_tokens_details"), "cached_tokens")), 64);
    assert_int_equal(json_integer_value(json_object_get(us,
                     "cache_read_input_tokens")), 64);
    assert_int_equal(json_integer_value(json_object_get(us,
                     "cache_creation_input_tokens")), 32);
    assert_int_equal(json_integer_value(json_object_get(us,
                     "total_tokens")), 105);
    json_decref(us);
}


static void
test_metrics(void **state)
{
    char                   *text;
    size_t                  size;
    uint32_t                len[2] = { 512, 512 };
    kvs_buf_t               b;
    kvs_err_t               err;
    kvs_metrics_t          *m;
    kvs_metrics_gauges_t    g[2];
    const char             *names[2] = { "a", "b" };

    size = kvs_metrics_size(2);
    m = malloc(size);
    assert_non_null(m);
    assert_int_equal(kvs_metrics_init(m, size, 2, names, len, &err), KVS_OK);

    kvs_metrics_prefix_cache(m, 1, 100, 64);
    kvs_metrics_prefix_cache(m, 1, 50, 0);
    kvs_metrics_prefix_cache(m, 7, 50, 50);   /* no such model: ignored */

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_metrics_write(m, NULL, &b, &err), KVS_OK);
    assert_int_equal(kvs_buf_printf(&b, "%c", '\0'), KVS_OK);
    text = (char *) b.data;

    assert_non_null(strstr(text, "# TYPE kvserve:prefix_cache_queries_total "
                                 "counter\n"));
    assert_non_null(strstr(text, "kvserve:prefix_cache_queries_total"
                                 "{model_name=\"a\"} 0\n"));
    assert_non_null(strstr(text, "kvserve:prefix_cache_queries_total"
                                 "{model_name=\"b\"} 150\n"));
    assert_non_null(strstr(text, "kvserve:prefix_cache_hits_total"
                                 "{model_name=\"b\"} 64\n"));
    assert_null(strstr(text, "prefix_cache_evicted_blocks"));

    memset(g, 0, sizeof(g));
    g[0].have = 1;
    g[0].cache_evicted_blocks = 12;
    b.len = 0;
    assert_int_equal(kvs_metrics_write(m, g, &b, &err), KVS_OK);
    assert_int_equal(kvs_buf_printf(&b, "%c", '\0'), KVS_OK);
    text = (char *) b.data;
    assert_non_null(strstr(text, "kvserve:prefix_cache_evicted_blocks_total"
                                 "{model_name=\"a\"} 12\n"));
    assert_null(strstr(text, "kvserve:prefix_cache_evicted_blocks_total"
                             "{model_name=\"b\"}"));

    kvs_buf_free(&b);
    free(m);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test_teardown(test_parse_ok, teardown),
        cmocka_unit_test_teardown(test_parse_bad, teardown),
        cmocka_unit_test_teardown(test_pos_phi3, teardown),
        cmocka_unit_test_teardown(test_pos_llama2, teardown),
        cmocka_unit_test_teardown(test_pos_mistral, teardown),
        cmocka_unit_test_teardown(test_pos_chatml, teardown),
        cmocka_unit_test_teardown(test_pos_llama3_trim, teardown),
        cmocka_unit_test_teardown(test_pos_gemma, teardown),
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_metrics),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
