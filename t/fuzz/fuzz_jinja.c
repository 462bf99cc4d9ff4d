/*
 * fuzz_jinja: libFuzzer target for the Jinja interpreter (`make fuzz`).
 * The input is template text; it is compiled and, when it compiles,
 * rendered against one fixed chat context under tight limits.  Any input
 * must compile or be refused with a message, and render or fail with a
 * message, within the limits: no crash, no hang (the step limit), no
 * output past the cap, and a failed render leaves the output as it was.
 * Seeds: the real templates in $(FIXTURES)/templates.
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tokenizer/kvs_jinja.h"


#define FUZZ_MAX_OUTPUT  (64 * 1024)

static json_t  *ctx;

static const char  ctx_json[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"Be brief.\"},"
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", "
    "\"text\": \"Hi \\u00e9\"}]},"
    "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": "
    "\"call12345\", \"type\": \"function\", \"function\": {\"name\": "
    "\"f\", \"arguments\": {\"x\": 1.5, \"y\": [true, null]}}}]},"
    "{\"role\": \"tool\", \"content\": \"{\\\"ok\\\": 1}\"},"
    "{\"role\": \"user\", \"content\": \"  and\\n\\tmore  \"}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", "
    "\"description\": \"d\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"x\": {\"type\": \"number\"}}, \"required\": "
    "[\"x\"]}}}],"
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", "
    "\"eos_token\": \"</s>\", \"n\": 3}";


int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    json_error_t  jerr;

    (void) argc;
    (void) argv;
    ctx = json_loads(ctx_json, 0, &jerr);
    if (ctx == NULL) {
        fprintf(stderr, "fuzz_jinja: bad context: %s\n", jerr.text);
        exit(2);
    }

    return 0;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kvs_jinja_t       *tpl = NULL;
    kvs_jinja_opts_t   opts;
    kvs_buf_t          out;
    kvs_err_t          err;
    int                rc;

    memset(&err, 0, sizeof(err));
    rc = kvs_jinja_compile(&tpl, (const char *) data, size, &err);
    if (rc != KVS_OK) {
        if (tpl != NULL || err.msg[0] == '\0') {
            abort();
        }
        return 0;
    }
    if (tpl == NULL) {
        abort();
    }

    kvs_jinja_opts_default(&opts);
    opts.max_steps = 20000;
    opts.max_output = FUZZ_MAX_OUTPUT;
    opts.max_depth = 16;
    opts.max_memory = 8 << 20;
    opts.now = 1736899200;

    memset(&out, 0, sizeof(out));
    if (kvs_buf_append(&out, "pre", 3) != KVS_OK) {
        abort();
    }
    memset(&err, 0, sizeof(err));
    rc = kvs_jinja_render(tpl, ctx, &opts, &out, &err);
    if (rc == KVS_OK) {
        if (out.len < 3 || out.len - 3 > FUZZ_MAX_OUTPUT) {
            abort();
        }
    } else if (out.len != 3 || err.msg[0] == '\0' || err.code != rc) {
        abort();
    }

    kvs_buf_free(&out);
    kvs_jinja_free(tpl);

    return 0;
}
