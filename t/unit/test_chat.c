/*
 * test_chat: chat templates.  Every expected prompt below was written by
 * hand from the format's definition (see kvs_chat.h), not produced by our
 * code: one multi-turn conversation (system, user, assistant, user, with
 * the generation prompt) per family, then each family's whitespace
 * rules, text parts, role handling, every error with its field, and the
 * recognition of template texts (synthetic marker snippets here; the real
 * template texts are checked by test_chat_jinja.py against jinja2).
 */

#include "kvs_test.h"

#include <locale.h>
#include <time.h>

#include "model/kvs_gen.h"
#include "model/kvs_gguf.h"
#include "tokenizer/kvs_chat.h"

/* The conversation every family renders first (' stands for "). */
#define CONVO                                                             \
    "[{'role': 'system', 'content': 'You are terse.'},"                   \
    " {'role': 'user', 'content': 'Hi there'},"                           \
    " {'role': 'assistant', 'content': 'Hello! How can I help?'},"        \
    " {'role': 'user', 'content': 'What is 2+2?'}]"

static kvs_err_t  err;


/* JSON from a C-friendly spelling: ' becomes ". */
static json_t *
messages(const char *text)
{
    char          *s, *p;
    json_t        *j;
    json_error_t   jerr;

    s = strdup(text);
    assert_non_null(s);

    for (p = s; *p != '\0'; p++) {
        if (*p == '\'') {
            *p = '"';
        }
    }

    j = json_loads(s, 0, &jerr);
    if (j == NULL) {
        fail_msg("bad test JSON: %s: %s", jerr.text, s);
    }

    free(s);

    return j;
}


static void
args_for(kvs_chat_kind_t kind, kvs_chat_args_t *a, int agp)
{
    memset(a, 0, sizeof(kvs_chat_args_t));

    switch (kind) {

    case KVS_CHAT_LLAMA3:
    case KVS_CHAT_LLAMA31:
        a->bos = "<|begin_of_text|>";
        a->eos = "<|eot_id|>";
        break;

    case KVS_CHAT_GEMMA:
        a->bos = "<bos>";
        a->eos = "<eos>";
        break;

    default:
        a->bos = "<s>";
        a->eos = "</s>";
        break;
    }

    a->bos_len = strlen(a->bos);
    a->eos_len = strlen(a->eos);
    a->add_generation_prompt = agp;
}


/* Renders with a template of chat's kind; NULL (err set) on failure. */
static char *
render_with(const kvs_chat_t *chat, const char *json, int agp)
{
    int              rc;
    char            *s;
    json_t          *msgs;
    kvs_buf_t        out;
    kvs_chat_args_t  a;

    memset(&out, 0, sizeof(out));
    args_for(chat->kind, &a, agp);
    msgs = messages(json);

    rc = kvs_chat_render(chat, msgs, &a, &out, &err);
    json_decref(msgs);

    if (rc != KVS_OK) {
        assert_int_equal(out.len, 0);
        kvs_buf_free(&out);
        return NULL;
    }

    s = malloc(out.len + 1);
    assert_non_null(s);
    memcpy(s, out.data, out.len);
    s[out.len] = '\0';
    kvs_buf_free(&out);

    return s;
}


static char *
render(const char *name, const char *json, int agp)
{
    kvs_chat_t  chat;

    assert_int_equal(kvs_chat_by_name(name, strlen(name), &chat, &err),
                     KVS_OK);

    return render_with(&chat, json, agp);
}


static void
expect(const char *name, const char *json, int agp, const char *want)
{
    char  *got;

    got = render(name, json, agp);
    if (got == NULL) {
        fail_msg("%s: %s", name, err.msg);
    }

    if (strcmp(got, want) != 0) {
        print_error("%s\n got: \"%s\"\nwant: \"%s\"\n", name, got, want);
    }

    assert_string_equal(got, want);
    free(got);
}


/* Fails with KVS_EINVAL and a message containing msg. */
static void
expect_error(const char *name, const char *json, const char *msg)
{
    char  *got;

    got = render(name, json, 1);
    if (got != NULL) {
        fail_msg("%s: rendered \"%s\", expected an error", name, got);
    }

    assert_int_equal(err.code, KVS_EINVAL);
    if (strstr(err.msg, msg) == NULL) {
        fail_msg("error \"%s\" lacks \"%s\"", err.msg, msg);
    }
}


static void
test_multi_turn(void **state)
{
    expect("llama3", CONVO, 1,
           "<|begin_of_text|>"
           "<|start_header_id|>system<|end_header_id|>\n\n"
           "You are terse.<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\n"
           "Hi there<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n"
           "Hello! How can I help?<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\n"
           "What is 2+2?<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n");

    expect("llama3.1", CONVO, 1,
           "<|begin_of_text|>"
           "<|start_header_id|>system<|end_header_id|>\n\n"
           "Cutting Knowledge Date: December 2023\n"
           "Today Date: 26 Jul 2024\n\n"
           "You are terse.<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\n"
           "Hi there<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n"
           "Hello! How can I help?<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\n"
           "What is 2+2?<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n");

    expect("llama2", CONVO, 1,
           "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there [/INST]"
           " Hello! How can I help? </s>"
           "<s>[INST] What is 2+2? [/INST]");

    expect("chatml", CONVO, 1,
           "<|im_start|>system\nYou are terse.<|im_end|>\n"
           "<|im_start|>user\nHi there<|im_end|>\n"
           "<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
           "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
           "<|im_start|>assistant\n");

    expect("mistral", CONVO, 1,
           "<s> [INST] You are terse.\n\nHi there [/INST]"
           " Hello! How can I help?</s>"
           " [INST] What is 2+2? [/INST]");

    expect("zephyr", CONVO, 1,
           "<|system|>\nYou are terse.</s>\n"
           "<|user|>\nHi there</s>\n"
           "<|assistant|>\nHello! How can I help?</s>\n"
           "<|user|>\nWhat is 2+2?</s>\n"
           "<|assistant|>\n");

    expect("phi3", CONVO, 1,
           "<|system|>\nYou are terse.<|end|>\n"
           "<|user|>\nHi there<|end|>\n"
           "<|assistant|>\nHello! How can I help?<|end|>\n"
           "<|user|>\nWhat is 2+2?<|end|>\n"
           "<|assistant|>\n");

    expect("gemma", CONVO, 1,
           "<bos><start_of_turn>user\nYou are terse.\n\nHi there"
           "<end_of_turn>\n"
           "<start_of_turn>model\nHello! How can I help?<end_of_turn>\n"
           "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n"
           "<start_of_turn>model\n");
}


/* Without the generation prompt, and without a system message. */
static void
test_no_prompt_no_system(void **state)
{
    const char  *two = "[{'role': 'user', 'content': 'Hi'},"
                       " {'role': 'assistant', 'content': 'Yo'}]";

    expect("llama3", two, 0,
           "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
           "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
           "Yo<|eot_id|>");
    expect("llama3.1", two, 0,
           "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
           "Cutting Knowledge Date: December 2023\n"
           "Today Date: 26 Jul 2024\n\n<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\n"
           "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
           "Yo<|eot_id|>");
    expect("llama2", two, 0, "<s>[INST] Hi [/INST] Yo </s>");
    expect("mistral", two, 0, "<s> [INST] Hi [/INST] Yo</s>");
    expect("chatml", two, 0,
           "<|im_start|>user\nHi<|im_end|>\n"
           "<|im_start|>assistant\nYo<|im_end|>\n");
    expect("zephyr", two, 0, "<|user|>\nHi</s>\n<|assistant|>\nYo</s>\n");
    expect("phi3", two, 0,
           "<|user|>\nHi<|end|>\n<|assistant|>\nYo<|end|>\n");
    expect("gemma", two, 0,
           "<bos><start_of_turn>user\nHi<end_of_turn>\n"
           "<start_of_turn>model\nYo<end_of_turn>\n");

    /* llama2 and mistral have no generation prompt to add */
    expect("llama2", "[{'role': 'user', 'content': 'Hi'}]", 1,
           "<s>[INST] Hi [/INST]");
    expect("mistral", "[{'role': 'user', 'content': 'Hi'}]", 1,
           "<s> [INST] Hi [/INST]");
}


/* Which families strip, and what. */
static void
test_whitespace(void **state)
{
    const char  *padded =
        "[{'role': 'system', 'content': ' Sys \\n'},"
        " {'role': 'user', 'content': '\\n\\t Hi  there \\n'},"
        " {'role': 'assistant', 'content': '  Yo  '}]";

    expect("llama3", padded, 0,
           "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
           "Sys<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
           "Hi  there<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\nYo<|eot_id|>");
    expect("llama3.1", padded, 0,
           "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
           "Cutting Knowledge Date: December 2023\n"
           "Today Date: 26 Jul 2024\n\nSys<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\n"
           "Hi  there<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\nYo<|eot_id|>");

    /* the system block is inside the stripped turn: only the end goes */
    expect("llama2", padded, 0,
           "<s>[INST] <<SYS>>\n Sys \n\n<</SYS>>\n\n\n\t Hi  there [/INST]"
           " Yo </s>");
    expect("llama2", "[{'role': 'user', 'content': '  Hi  '}]", 0,
           "<s>[INST] Hi [/INST]");
    /* a blank user turn lets the strip take the block's own "\n\n" */
    expect("llama2", "[{'role': 'system', 'content': 'S'},"
                     " {'role': 'user', 'content': ' \\n '}]", 0,
           "<s>[INST] <<SYS>>\nS\n<</SYS>> [/INST]");

    expect("mistral", padded, 0,
           "<s> [INST]  Sys \n\n\n\n\t Hi  there \n [/INST]   Yo  </s>");
    expect("chatml", padded, 0,
           "<|im_start|>system\n Sys \n<|im_end|>\n"
           "<|im_start|>user\n\n\t Hi  there \n<|im_end|>\n"
           "<|im_start|>assistant\n  Yo  <|im_end|>\n");
    expect("zephyr", padded, 0,
           "<|system|>\n Sys \n</s>\n<|user|>\n\n\t Hi  there \n</s>\n"
           "<|assistant|>\n  Yo  </s>\n");
    expect("phi3", padded, 0,
           "<|system|>\n Sys \n<|end|>\n<|user|>\n\n\t Hi  there \n<|end|>\n"
           "<|assistant|>\n  Yo  <|end|>\n");
    /* Gemma trims the turn's content but not the folded system text */
    expect("gemma", padded, 0,
           "<bos><start_of_turn>user\n Sys \n\n\nHi  there<end_of_turn>\n"
           "<start_of_turn>model\nYo<end_of_turn>\n");

    /* Python's whitespace: NBSP, U+3000, U+2028, U+0085 and the
     * separators U+001C..U+001F go; ZERO WIDTH SPACE and U+FEFF stay */
    expect("llama3", "[{'role': 'user', 'content': "
                     "'\\u3000\\u00a0\\u2028\\u0085\\u001fHi\\u205f\\u202f'},"
                     " {'role': 'user', 'content': '\\u200bHi\\ufeff'}]", 0,
           "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
           "Hi<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
           "\xe2\x80\x8bHi\xef\xbb\xbf<|eot_id|>");
    /* all blank: nothing left */
    expect("gemma", "[{'role': 'user', 'content': ' \\t\\r\\n\\u2003'}]", 1,
           "<bos><start_of_turn>user\n<end_of_turn>\n"
           "<start_of_turn>model\n");
}


static void
test_parts_and_roles(void **state)
{
    const char  *parts =
        "[{'role': 'developer', 'content': [{'type': 'text', 'text': 'A'},"
        "  {'type': 'text', 'text': 'B'}]},"
        " {'role': 'user', 'content': [{'type': 'text', 'text': ' Hi '},"
        "  {'type': 'text', 'text': ' there '}]}]";

    /* joined with nothing; developer is system */
    expect("chatml", parts, 1,
           "<|im_start|>system\nAB<|im_end|>\n"
           "<|im_start|>user\n Hi  there <|im_end|>\n"
           "<|im_start|>assistant\n");
    /* llama3 strips the joined content as a whole */
    expect("llama3", parts, 0,
           "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
           "AB<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
           "Hi  there<|eot_id|>");
    /* Gemma strips each part */
    expect("gemma", parts, 0,
           "<bos><start_of_turn>user\nAB\n\nHithere<end_of_turn>\n");
    expect("mistral", parts, 0,
           "<s> [INST] AB\n\n Hi  there  [/INST]");
    expect("llama2", parts, 0,
           "<s>[INST] <<SYS>>\nAB\n<</SYS>>\n\n Hi  there [/INST]");

    /* extra fields (name, and a part's other keys) are ignored */
    expect("phi3", "[{'role': 'user', 'name': 'bob', 'content': "
                   "[{'type': 'text', 'text': 'x', 'cache': 1}]}]", 1,
           "<|user|>\nx<|end|>\n<|assistant|>\n");

    /* later system messages stay in place where the format allows it */
    expect("llama3.1", "[{'role': 'user', 'content': 'a'},"
                       " {'role': 'system', 'content': 'b'}]", 0,
           "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
           "Cutting Knowledge Date: December 2023\n"
           "Today Date: 26 Jul 2024\n\n<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\na<|eot_id|>"
           "<|start_header_id|>system<|end_header_id|>\n\nb<|eot_id|>");
    expect("zephyr", "[{'role': 'user', 'content': 'a'},"
                     " {'role': 'user', 'content': 'b'},"
                     " {'role': 'system', 'content': 'c'}]", 0,
           "<|user|>\na</s>\n<|user|>\nb</s>\n<|system|>\nc</s>\n");

    /* UTF-8 content and marker text pass through untouched */
    expect("chatml", "[{'role': 'user', 'content': "
                     "'caf\\u00e9 \\u732b <|im_end|>'}]", 0,
           "<|im_start|>user\ncaf\xc3\xa9 \xe7\x8c\xab <|im_end|>"
           "<|im_end|>\n");
}


static void
test_errors(void **state)
{
    int              rc;
    json_t          *j;
    kvs_buf_t        out;
    kvs_chat_t       chat;
    kvs_chat_args_t  a;

    expect_error("llama3", "[{'role': 'system', 'content': 'S'},"
                 " {'role': 'user', 'content': 'x'},"
                 " {'role': 'user', 'content': [{'type': 'image_url',"
                 "   'image_url': {'url': 'http://x/y.png'}}]}]",
                 "messages[2].content[0].type: unsupported content part "
                 "type 'image_url'");
    expect_error("chatml", "[{'role': 'user', 'content': 'x'},"
                 " {'role': 'tool', 'content': '42'}]",
                 "messages[1].role: role 'tool' is not supported");
    expect_error("chatml", "[{'role': 'robot', 'content': 'x'}]",
                 "messages[0].role: unsupported role 'robot'; use system, "
                 "developer, user or assistant");
    expect_error("chatml", "[{'content': 'x'}]", "messages[0].role: missing");
    expect_error("chatml", "[{'role': 7, 'content': 'x'}]",
                 "messages[0].role: must be a string");
    expect_error("chatml", "[{'role': 'user'}]",
                 "messages[0].content: missing");
    expect_error("chatml", "[{'role': 'assistant', 'content': null}]",
                 "messages[0].content: missing");
    expect_error("chatml", "[{'role': 'user', 'content': 3}]",
                 "messages[0].content: must be a string or an array");
    expect_error("chatml", "[{'role': 'user', 'content': []}]",
                 "messages[0].content: empty array");
    expect_error("chatml", "[{'role': 'user', 'content': ['x']}]",
                 "messages[0].content[0]: must be an object");
    expect_error("chatml", "[{'role': 'user', 'content': [{'text': 'x'}]}]",
                 "messages[0].content[0].type: missing");
    expect_error("chatml", "[{'role': 'user', 'content': "
                 "[{'type': 'text', 'text': 'a'}, {'type': 'text'}]}]",
                 "messages[0].content[1].text: missing");
    expect_error("chatml", "[{'role': 'user', 'content': "
                 "[{'type': 'text', 'text': 5}]}]",
                 "messages[0].content[0].text: must be a string");
    expect_error("chatml", "[]", "messages: empty array");
    expect_error("chatml", "{'role': 'user'}", "messages: must be an array");
    expect_error("chatml", "['hi']", "messages[0]: must be an object");

    /* the alternating families */
    expect_error("llama2", "[{'role': 'user', 'content': 'a'},"
                 " {'role': 'user', 'content': 'b'}]",
                 "messages[1].role: expected 'assistant': the llama2 chat "
                 "template needs user and assistant messages to alternate");
    expect_error("mistral", "[{'role': 'system', 'content': 'a'},"
                 " {'role': 'assistant', 'content': 'b'}]",
                 "messages[1].role: expected 'user'");
    expect_error("gemma", "[{'role': 'user', 'content': 'a'},"
                 " {'role': 'system', 'content': 'b'}]",
                 "messages[1].role: the gemma chat template takes a system "
                 "message only as the first message");
    expect_error("mistral", "[{'role': 'developer', 'content': 'a'}]",
                 "messages: the mistral chat template needs a user message "
                 "after the system message");
    /* ... and the first bad field in message order wins */
    expect_error("gemma", "[{'role': 'user', 'content': 'a'},"
                 " {'role': 'user', 'content': 'b'},"
                 " {'role': 'user', 'content': 4}]", "messages[1].role");

    /* a failed render leaves what the buffer held */
    memset(&out, 0, sizeof(out));
    assert_int_equal(kvs_buf_append(&out, "keep", 4), KVS_OK);
    assert_int_equal(kvs_chat_by_name("llama3", 6, &chat, &err), KVS_OK);
    args_for(chat.kind, &a, 1);
    j = messages("[{'role': 'user', 'content': 'a'},"
                 " {'role': 'user', 'content': [{'type': 'input_audio'}]}]");
    rc = kvs_chat_render(&chat, j, &a, &out, &err);
    assert_int_equal(rc, KVS_EINVAL);
    assert_int_equal(out.len, 4);
    assert_memory_equal(out.data, "keep", 4);
    assert_non_null(strstr(err.msg, "'input_audio'"));

    /* and a good one appends after it */
    json_decref(j);
    j = messages("[{'role': 'user', 'content': 'a'}]");
    assert_int_equal(kvs_chat_render(&chat, j, &a, &out, &err), KVS_OK);
    assert_int_equal(out.len, 4 + strlen("<|begin_of_text|>"
                     "<|start_header_id|>user<|end_header_id|>\n\na<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\n"));
    json_decref(j);
    kvs_buf_free(&out);

    /* JSON strings may hold NULs: "user\0x" is not "user" */
    j = json_pack("[{s:s%, s:s}]", "role", "user\0x", (size_t) 6,
                  "content", "a");
    assert_non_null(j);
    assert_int_equal(kvs_chat_render(&chat, j, &a, &out, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "messages[0].role: unsupported role"));
    json_decref(j);

    chat.kind = KVS_CHAT_N;
    assert_null(render_with(&chat, "[{'role': 'user', 'content': 'a'}]", 1));
    assert_int_equal(err.code, KVS_EINVAL);
}


static void
test_names(void **state)
{
    int          k;
    const char  *name;
    kvs_chat_t   chat;

    for (k = 0; k < KVS_CHAT_N; k++) {
        name = kvs_chat_name((kvs_chat_kind_t) k);
        assert_int_equal(kvs_chat_by_name(name, strlen(name), &chat, &err),
                         KVS_OK);
        assert_int_equal(chat.kind, k);
        assert_null(chat.system);
        assert_non_null(strstr(KVS_CHAT_NAMES, name));
    }

    assert_string_equal(kvs_chat_name(KVS_CHAT_N), "?");

    assert_int_equal(kvs_chat_by_name("vicuna", 6, &chat, &err), KVS_EINVAL);
    assert_string_equal(err.msg, "unknown chat template \"vicuna\": use one "
                        "of llama3, llama3.1, llama2, chatml, mistral, "
                        "zephyr, phi3, gemma");
    /* lengths count: a prefix or a longer name is not a name */
    assert_int_equal(kvs_chat_by_name("llama3.1", 6, &chat, &err), KVS_OK);
    assert_int_equal(chat.kind, KVS_CHAT_LLAMA3);
    assert_int_equal(kvs_chat_by_name("llama", 5, &chat, &err), KVS_EINVAL);
    assert_int_equal(kvs_chat_by_name("LLAMA3", 6, &chat, &err), KVS_EINVAL);
}


static void
detect_as(const char *text, kvs_chat_kind_t kind, int bos)
{
    kvs_chat_t  chat;

    if (kvs_chat_detect(text, strlen(text), &chat, &err) != KVS_OK) {
        fail_msg("\"%s\": %s", text, err.msg);
    }

    assert_int_equal(chat.kind, kind);
    assert_int_equal(chat.bos, bos);
}


static void
detect_fails(const char *text, const char *msg)
{
    kvs_chat_t  chat;

    assert_int_equal(kvs_chat_detect(text, strlen(text), &chat, &err),
                     KVS_EUNSUPPORTED);
    if (strstr(err.msg, msg) == NULL) {
        fail_msg("\"%s\": error \"%s\" lacks \"%s\"", text, err.msg, msg);
    }
}


/* Marker snippets written for this test, not real templates. */
static void
test_detect(void **state)
{
    char         today[32], want[512], *got;
    time_t       now;
    const char  *t;
    kvs_chat_t   chat;
    struct tm    tm;

    detect_as("{{ '<|start_header_id|>' + role }}", KVS_CHAT_LLAMA3, 1);
    detect_as("<|start_header_id|> Cutting Knowledge Date", KVS_CHAT_LLAMA31,
              1);
    detect_as("{{ '[INST] ' }} <<SYS>>", KVS_CHAT_LLAMA2, 1);
    detect_as("{{ ' [INST] ' + x }}", KVS_CHAT_MISTRAL, 1);
    detect_as("{{- \" [INST] \" + x }}", KVS_CHAT_MISTRAL, 1);
    detect_as("{{ '<|im_start|>' + role }}", KVS_CHAT_CHATML, 0);
    detect_as("{{ bos_token }}{{ '<|im_start|>' }}", KVS_CHAT_CHATML, 1);
    detect_as("{{ '<|user|>\n' + c + eos_token }}", KVS_CHAT_ZEPHYR, 0);
    detect_as("{{ '<|user|>\n' + c + '<|end|>' }}", KVS_CHAT_PHI3, 0);
    detect_as("{{ bos_token }}<|user|><|end|>", KVS_CHAT_PHI3, 1);
    detect_as("<start_of_turn>", KVS_CHAT_GEMMA, 1);

    /* the generated models' template (a real Llama 3 template text) */
    detect_as(kvs_gen_chat_template, KVS_CHAT_LLAMA3, 1);

    detect_fails("{{ '[INST] ' }}[SYSTEM_PROMPT]", "later Mistral format");
    detect_fails("{{ '[INST] ' }}[AVAILABLE_TOOLS]", "later Mistral format");
    detect_fails("{{ '[INST] ' + c }}", "without the \" [INST] \" spacing");
    detect_fails("<|im_start|>system<|im_sep|>", "<|im_sep|> (Phi-4)");
    detect_fails("<|user|>\n{{ c }}", "neither by <|end|>");
    detect_fails("<|im_start|><start_of_turn>", "more than one format");
    detect_fails("{{ '### Human: ' + c }}\n\x01",
                 "none of the markers we know; name one with "
                 "kvserve_chat_template (llama3, llama3.1, llama2, chatml, "
                 "mistral, zephyr, phi3, gemma); it starts "
                 "\"{{ '### Human: ' + c }}..\"");
    assert_int_equal(kvs_chat_detect("", 0, &chat, &err), KVS_EUNSUPPORTED);
    assert_int_equal(kvs_chat_detect(NULL, 0, &chat, &err),
                     KVS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "empty"));

    /* a template that asks for today's date gets it (C-locale month) */
    t = "<|start_header_id|> strftime_now Cutting Knowledge Date";
    assert_int_equal(kvs_chat_detect(t, strlen(t), &chat, &err), KVS_OK);
    assert_int_equal(chat.kind, KVS_CHAT_LLAMA31);
    assert_int_equal(chat.today, 1);

    now = time(NULL);
    localtime_r(&now, &tm);
    setlocale(LC_TIME, "C");
    strftime(today, sizeof(today), "%d %b %Y", &tm);
    snprintf(want, sizeof(want),
             "<|begin_of_text|><|start_header_id|>system<|end_header_id|>"
             "\n\nCutting Knowledge Date: December 2023\nToday Date: %s"
             "\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
             "a<|eot_id|>", today);
    got = render_with(&chat, "[{'role': 'user', 'content': 'a'}]", 0);
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
}


/* The caller's date wins; a NULL BOS or EOS writes nothing. */
static void
test_args(void **state)
{
    json_t           *j;
    kvs_buf_t         out;
    kvs_chat_t        chat;
    kvs_chat_args_t   a;

    memset(&out, 0, sizeof(out));
    memset(&a, 0, sizeof(a));
    a.date = "01 Jan 2030";

    j = messages("[{'role': 'system', 'content': 'S'},"
                 " {'role': 'user', 'content': 'a'},"
                 " {'role': 'assistant', 'content': 'b'}]");

    assert_int_equal(kvs_chat_by_name("llama3.1", 8, &chat, &err), KVS_OK);
    assert_int_equal(kvs_chat_render(&chat, j, &a, &out, &err), KVS_OK);
    assert_int_equal(kvs_buf_append(&out, "", 1), KVS_OK);
    assert_string_equal((char *) out.data,
           "<|start_header_id|>system<|end_header_id|>\n\n"
           "Cutting Knowledge Date: December 2023\n"
           "Today Date: 01 Jan 2030\n\nS<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\na<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\nb<|eot_id|>");

    out.len = 0;
    assert_int_equal(kvs_chat_by_name("llama2", 6, &chat, &err), KVS_OK);
    assert_int_equal(kvs_chat_render(&chat, j, &a, &out, &err), KVS_OK);
    assert_int_equal(kvs_buf_append(&out, "", 1), KVS_OK);
    assert_string_equal((char *) out.data,
           "[INST] <<SYS>>\nS\n<</SYS>>\n\na [/INST] b ");

    json_decref(j);
    kvs_buf_free(&out);
}


/* A ChatML template's default system prompt (Qwen's way). */
static void
test_default_system(void **state)
{
    char        *got;
    kvs_chat_t   chat;

    static const char  quoted[] =
        "{% if messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\\nYou are Testbot, a test.<|im_end|>\\n' }}"
        "{% endif %}{{ '<|im_start|>' + m.role }}";
    static const char  raw[] =
        "{{ '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>' }}"
        "{% if loop.first and m.role != 'system' %}<|im_start|>system\n"
        "Be kind.<|im_end|>\n{% endif %}";
    static const char  expr[] =
        "{{ '<|im_start|>system\n' + sys + '<|im_end|>' }}";

    assert_int_equal(kvs_chat_detect(quoted, strlen(quoted), &chat, &err),
                     KVS_OK);
    assert_int_equal(chat.kind, KVS_CHAT_CHATML);
    assert_int_equal(chat.system_len, strlen("You are Testbot, a test."));
    assert_memory_equal(chat.system, "You are Testbot, a test.",
                        chat.system_len);

    got = render_with(&chat, "[{'role': 'user', 'content': 'Hi'}]", 1);
    assert_non_null(got);
    assert_string_equal(got,
        "<|im_start|>system\nYou are Testbot, a test.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    free(got);

    /* the conversation's own system (or developer) message replaces it */
    got = render_with(&chat, "[{'role': 'developer', 'content': 'Mine'},"
                             " {'role': 'user', 'content': 'Hi'}]", 0);
    assert_non_null(got);
    assert_string_equal(got, "<|im_start|>system\nMine<|im_end|>\n"
                             "<|im_start|>user\nHi<|im_end|>\n");
    free(got);

    /* raw template text after a block tag; the expression is skipped */
    assert_int_equal(kvs_chat_detect(raw, strlen(raw), &chat, &err), KVS_OK);
    assert_int_equal(chat.system_len, 8);
    assert_memory_equal(chat.system, "Be kind.", 8);

    /* an expression is not a default */
    assert_int_equal(kvs_chat_detect(expr, strlen(expr), &chat, &err),
                     KVS_OK);
    assert_null(chat.system);
}


/* The Phi-3 vocabulary fixture's own template text. */
static void
test_phi3_fixture(void **state)
{
    const char      *path;
    kvs_gguf_t      *g;
    kvs_chat_t       chat;
    kvs_gguf_str_t   t;

    path = kvs_test_fixture("vocab/ggml-vocab-phi-3.gguf");
    if (path == NULL) {
        skip();
    }

    assert_int_equal(kvs_gguf_open(&g, path, &err), KVS_OK);
    assert_int_equal(kvs_gguf_get_str(g, "tokenizer.chat_template", &t,
                                      &err), KVS_OK);
    assert_int_equal(kvs_chat_detect(t.ptr, t.len, &chat, &err), KVS_OK);
    assert_int_equal(chat.kind, KVS_CHAT_PHI3);
    assert_int_equal(chat.bos, 1);               /* it writes bos_token */
    kvs_gguf_close(g);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_multi_turn),
        cmocka_unit_test(test_no_prompt_no_system),
        cmocka_unit_test(test_whitespace),
        cmocka_unit_test(test_parts_and_roles),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_args),
        cmocka_unit_test(test_default_system),
        cmocka_unit_test(test_phi3_fixture),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
