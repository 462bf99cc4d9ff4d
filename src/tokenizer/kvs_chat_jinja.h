/*
 * kvs_chat_jinja: OpenAI chat `messages` -> prompt text through a model's
 * own chat template (its tokenizer.chat_template, or a template file),
 * run as written by the Jinja interpreter (kvs_jinja.h).
 *
 * The template is compiled once, at configuration time; a construct the
 * interpreter cannot run is refused then, naming it and its line.  A
 * compiled chat template is immutable: any number of threads render with
 * it at once.
 *
 * The context is what Hugging Face's apply_chat_template() gives:
 *   messages               the client's messages (kvs_chat_check_messages()
 *                          must have passed) as sent, every field kept
 *                          (tool messages' tool_call_id, name, the
 *                          assistant's tool_calls), except that role
 *                          "developer" is given as "system" (OpenAI's
 *                          newer name for it, which templates do not
 *                          know), a message without content (an assistant
 *                          turn that only calls tools) gets "" as vLLM
 *                          gives it, a null tool_calls, tool_call_id or
 *                          name is left out (null is absent in OpenAI's
 *                          API, while templates test `'tool_calls' in
 *                          message`), each tool call's function.arguments
 *                          (OpenAI's JSON text) is given as the mapping it
 *                          parses to when it is a JSON object, as vLLM
 *                          does (templates write `arguments | tojson` or
 *                          walk its items), and left as the string
 *                          otherwise, and content parts
 *                          are given as sent only to templates that walk
 *                          parts (found when compiling, by rendering a
 *                          one-part probe): for the others the parts'
 *                          texts are joined with nothing between them
 *                          into one string, as llama.cpp's server does,
 *                          since such a template would print the list's
 *                          Python repr.
 *   tools                  the caller's tools array as sent, or none
 *                          (null), as apply_chat_template() passes it
 *   add_generation_prompt  the caller's
 *   bos_token, eos_token   the vocabulary's token texts ("" for none)
 *   strftime_now(fmt)      the current time (UTC)
 *
 * Every render is bounded by the limits given at compile time (steps,
 * output bytes, macro depth, memory) grown with the request's size (see
 * below), so one request cannot hold a thread for long whatever its
 * template or messages.  The template writes BOS
 * itself where it wants one (bos_token), so the prompt is tokenized with
 * control tokens parsed and without adding another.
 */

#ifndef KVS_CHAT_JINJA_H
#define KVS_CHAT_JINJA_H

#include <stddef.h>

#include <jansson.h>

#include "base/kvs_buf.h"
#include "base/kvs_err.h"
#include "kvs_chat.h"
#include "kvs_jinja.h"
#include "kvs_vocab.h"

struct kvs_chat_jinja_s {
    kvs_jinja_t       *tpl;
    int                parts;         /* give content parts as sent */
    kvs_jinja_opts_t   limits;        /* per render; now is set then */
};

/*
 * Limits per chat render: the base below, grown per message and per byte
 * of content, so the work a request may cause is proportional to its size
 * (which kvserve_max_messages and the body size bound) and a cheap
 * request cannot hold its thread for long (20,000 steps are some 5 ms).
 * The published templates spend at most 70 steps per message plus about
 * 100 (docs/tokenizer.md), so the steps leave them a margin of 30.
 */
#define KVS_CJ_STEPS            20000
#define KVS_CJ_STEPS_PER_MSG    2000
#define KVS_CJ_OUTPUT           (64 * 1024)
#define KVS_CJ_OUTPUT_PER_MSG   1024
#define KVS_CJ_OUTPUT_PER_BYTE  4
#define KVS_CJ_DEPTH            32
#define KVS_CJ_MEMORY           (16 * 1024 * 1024)
#define KVS_CJ_MEMORY_PER_MSG   (16 * 1024)
#define KVS_CJ_MEMORY_PER_BYTE  16
/* and per JSON value of the tools and tool calls (a schema's node, an
 * argument), which templates print with tojson, often indented */
#define KVS_CJ_STEPS_PER_NODE   64
#define KVS_CJ_OUTPUT_PER_NODE  64
#define KVS_CJ_MEMORY_PER_NODE  256

/* The base limits above. */
void kvs_chat_jinja_limits(kvs_jinja_opts_t *limits);

/*
 * Compiles src[0..len) as a chat template rendered within limits (NULL:
 * kvs_chat_jinja_limits()).  On failure *out is NULL and err is the
 * interpreter's (KVS_EFORMAT, KVS_EUNSUPPORTED), naming the construct and
 * its line.
 */
int kvs_chat_jinja_compile(kvs_chat_jinja_t **out, const char *src,
    size_t len, const kvs_jinja_opts_t *limits, kvs_err_t *err);

void kvs_chat_jinja_free(kvs_chat_jinja_t *cj);

/*
 * Appends the prompt for messages (already checked by
 * kvs_chat_check_messages()) to out; args' bos, eos, tools and
 * add_generation_prompt are used, date and spans are not.  On failure
 * out->len is as it was: KVS_EINVAL for what the template refuses (the
 * message is raise_exception's, word for word) or a limit the render
 * passes ("chat template: render passes the limit of ..."), KVS_ENOMEM.
 */
int kvs_chat_jinja_render(const kvs_chat_jinja_t *cj,
    const json_t *messages, const kvs_chat_args_t *args, kvs_buf_t *out,
    kvs_err_t *err);

/*
 * KVS_EINVAL naming the field when a string of the client's that the
 * template may write holds the text of one of v's control tokens:
 * through a template run as written the client's text cannot be told
 * from the template's, so such text would become the control token (a
 * forged turn end or role); the named families keep it as plain text
 * instead.  Every string and object key of the messages and of tools
 * (NULL: none) is looked at: contents, tool_call_id, names, tool calls'
 * ids, names and arguments (as sent and, when they parse as a JSON
 * object, each string and key of what the template is given), the tool
 * definitions' names, descriptions and parameter schemas.  The error
 * names the value ("tools[0].function.description: holds the control
 * token text ...") or, for a key, the object holding it.
 */
int kvs_chat_jinja_guard(const kvs_vocab_t *v, const json_t *messages,
    const json_t *tools, kvs_err_t *err);

#endif /* KVS_CHAT_JINJA_H */
