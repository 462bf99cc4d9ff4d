/*
 * kvs_chat: OpenAI chat `messages` -> the prompt text of a chat template:
 * the model's own (tokenizer.chat_template) or a named family.
 *
 * Two renderers: a model's own template text, run as written by the Jinja
 * interpreter (kvs_chat_jinja.h; a kvs_chat_t whose jinja is set), which
 * is what a model serves by default; and the eight named families below,
 * rendered by C code written from each format's definition, byte for byte
 * what Hugging Face's apply_chat_template() gives with the real template
 * (jinja2, trim_blocks, lstrip_blocks) for the conversations the real
 * template accepts, which an operator selects by name.
 * kvs_chat_detect() recognises a family by its template's distinctive
 * markers; text that it does not recognise, or a variant it would render
 * differently, is KVS_EUNSUPPORTED.
 *
 * Messages (a jansson array, as a client sends it):
 *   role     "system" and "developer" (OpenAI's newer name for the same
 *            thing, rendered as "system"), "user", "assistant", and
 *            "tool" (a tool's result: content, and tool_call_id a
 *            string when present).  Anything else, the deprecated
 *            "function" included, is KVS_EINVAL.
 *   tool_calls  on an assistant message: an array of {"id", "type",
 *            "function": {"name": string, "arguments": string or
 *            object}} objects; null is absent; the message's content may
 *            then be null or absent.
 * Tool calling (tools in the args, tool messages, tool_calls) needs the
 * model's own template (chat->jinja): the templates' tool sections are
 * the model's and cannot be written from a family's definition, so the
 * families refuse each with KVS_EUNSUPPORTED naming it ("tools: ...",
 * "messages[2].role: ...", "messages[1].tool_calls: ...").
 *   content  a string, or a non-empty array of {"type": "text", "text":
 *            "..."} parts, concatenated with nothing between them (as
 *            llama.cpp's server does, and as the templates that walk parts
 *            themselves, Gemma 3's and Qwen2-VL's, do); the result is then
 *            what the template sees as the content string.  Gemma trims
 *            each part, as its template does.  Other part types
 *            ("image_url", ...) are KVS_EINVAL.
 * Errors name the field as OpenAI does:
 *   "messages[2].content[0].type: unsupported content part type
 *   'image_url'".
 *
 * Families ("trim" is Python's str.strip(), which Jinja's trim filter
 * is: ASCII whitespace, U+001C..U+001F, U+0085, U+00A0, U+1680,
 * U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000):
 *
 *   llama3    BOS, then per message H(ROLE) trim(content) "<|eot_id|>",
 *             where H(R) = "<|start_header_id|>" R "<|end_header_id|>\n\n";
 *             generation prompt: H(assistant).
 *   llama3.1  (3.1, 3.2, 3.3) as llama3, but always opens with BOS
 *             H(system) "Cutting Knowledge Date: December 2023\nToday
 *             Date: " DATE "\n\n" trim(first system message, if any)
 *             "<|eot_id|>".  DATE is the caller's, else "26 Jul 2024" (3.1,
 *             3.3), or today's for templates that call strftime_now (3.2).
 *   llama2    "<<SYS>>\nSYSTEM\n<</SYS>>\n\n" folded into the first user
 *             turn; each user turn BOS "[INST] " strip(turn) " [/INST]",
 *             each assistant turn " " strip(content) " " EOS.  No
 *             generation prompt (a prompt ends with [/INST] anyway).
 *   chatml    "<|im_start|>ROLE\n" content "<|im_end|>\n"; generation
 *             prompt "<|im_start|>assistant\n".  No trimming.  A default
 *             system prompt that the template inserts when the
 *             conversation has none (Qwen's) is found in the template
 *             text and inserted the same way.
 *   mistral   (the v0.1/v0.2 instruct format) BOS, then per user turn
 *             " [INST] " [SYSTEM "\n\n" on the first] content " [/INST]",
 *             per assistant turn " " content EOS.  No trimming, no
 *             generation prompt.
 *   zephyr    "<|ROLE|>\n" content EOS "\n"; generation prompt
 *             "<|assistant|>\n".  No trimming.
 *   phi3      "<|ROLE|>\n" content "<|end|>\n"; generation prompt
 *             "<|assistant|>\n".  No trimming.  (The first Phi-3-mini
 *             template drops system messages and writes the assistant
 *             header after every user turn whatever is asked; we render
 *             system messages as Phi-3's later templates do.  The two
 *             agree when there is no system message, user and assistant
 *             alternate from user, and the generation prompt is asked for
 *             exactly when the user spoke last.  The later templates end
 *             with EOS when no generation prompt is asked for; we do not.)
 *   gemma     BOS, then "<start_of_turn>ROLE\n" trim(content)
 *             "<end_of_turn>\n" with the assistant shown as "model" and
 *             SYSTEM "\n\n" (untrimmed; all its parts, where Gemma 3 takes
 *             the first) put before the first user turn's content (Gemma
 *             3; Gemma 1 and 2 refuse system messages and text parts);
 *             generation prompt "<start_of_turn>model\n".
 *
 * llama2, mistral and gemma need user and assistant turns to alternate,
 * starting with user, after an optional first system message (their
 * templates raise otherwise); a system message elsewhere is an error
 * there too.  The other families take any order.
 *
 * BOS and EOS are the vocabulary's token texts ("<|begin_of_text|>",
 * "<s>", "</s>"), passed in: the templates write bos_token and eos_token
 * as text.  The engine must therefore tokenize the prompt with
 * KVS_TOK_SPECIAL (so the marker texts become their control tokens) and
 * WITHOUT KVS_TOK_ADD_BOS (the BOS is already in the text where the
 * template wants one, and only there; chatml, zephyr and phi3 emit it
 * only when the model's template text mentions bos_token).
 *
 * Client text is not escaped but marked: kvs_chat_render() can report
 * the byte ranges of the prompt that came from message contents (after
 * the family's trimming: exactly the content bytes written, system
 * prompts folded into a user turn included; not the template's text, nor
 * a default system prompt taken from the template text, which is the
 * operator's), and the engine tokenizes the prompt with
 * kvs_tok_encode_guarded() over those spans.  A control token is then
 * parsed only where its whole text is the template's, so a client that
 * sends "<|eot_id|>" or "<s>" gets those characters as plain text and
 * cannot end its turn or forge another role's; when no content holds
 * marker text the ids are exactly those of the plain template rendering
 * tokenized with KVS_TOK_SPECIAL.  (User-defined tokens, which are
 * vocabulary and not control, match inside content too, as they do in
 * every tokenizer.)
 */

#ifndef KVS_CHAT_H
#define KVS_CHAT_H

#include <stddef.h>
#include <jansson.h>

#include "base/kvs_buf.h"
#include "base/kvs_err.h"
#include "kvs_tok.h"

typedef enum {
    KVS_CHAT_LLAMA3 = 0,
    KVS_CHAT_LLAMA31,
    KVS_CHAT_LLAMA2,
    KVS_CHAT_CHATML,
    KVS_CHAT_MISTRAL,
    KVS_CHAT_ZEPHYR,
    KVS_CHAT_PHI3,
    KVS_CHAT_GEMMA,
    KVS_CHAT_N
} kvs_chat_kind_t;

/* For messages: the names kvs_chat_by_name() accepts, in order. */
#define KVS_CHAT_NAMES \
    "llama3, llama3.1, llama2, chatml, mistral, zephyr, phi3, gemma"

typedef struct kvs_chat_jinja_s  kvs_chat_jinja_t;

/* A template: a family plus what the model's template text adds to it,
 * or (jinja set) the model's template itself. */
typedef struct {
    const kvs_chat_jinja_t  *jinja;   /* non-NULL: render through it; the
                                         fields below are then unused */
    kvs_chat_kind_t   kind;
    int               bos;            /* write BOS first: fixed by the
                                         family, or (chatml, zephyr, phi3)
                                         1 if the text uses bos_token */
    int               today;          /* llama3.1: DATE is today's */
    const char       *system;         /* chatml: default system prompt, or
                                         NULL; points into the template
                                         text, which must outlive this */
    size_t            system_len;     /* bytes */
} kvs_chat_t;

typedef struct {
    const char       *bos;            /* BOS token text; NULL: none */
    size_t            bos_len;        /* bytes */
    const char       *eos;            /* EOS token text; NULL: none */
    size_t            eos_len;        /* bytes */
    const char       *date;           /* llama3.1 "Today Date" (NUL-ended),
                                         NULL: see above */
    int               add_generation_prompt;
    kvs_buf_t        *spans;          /* NULL, or receives a kvs_span_t
                                         per non-empty content written;
                                         see kvs_chat_render() */
    const json_t     *tools;          /* the request's tools array as
                                         sent ([{"type": "function",
                                         "function": {...}}]), or NULL
                                         (or JSON null): none */
} kvs_chat_args_t;

/*
 * Recognises a template text (tokenizer.chat_template); KVS_EUNSUPPORTED,
 * saying what was seen, when it is none of the families above.
 */
int kvs_chat_detect(const char *text, size_t len, kvs_chat_t *chat,
    kvs_err_t *err);

/* The family's own standard form, by name (the names above, exactly);
 * KVS_EINVAL listing the names otherwise. */
int kvs_chat_by_name(const char *name, size_t len, kvs_chat_t *chat,
    kvs_err_t *err);

/* "llama3", ...; "?" for an out-of-range kind. */
const char *kvs_chat_name(kvs_chat_kind_t kind);

/*
 * Checks what the model's own template requires of messages: an array of
 * objects with a supported role, text content and well-formed tool
 * fields, as described above (not the families' turn order, nor their
 * refusal of tool calling).  KVS_EINVAL naming the field otherwise.
 */
int kvs_chat_check_messages(const json_t *messages, kvs_err_t *err);

/*
 * Appends the prompt for messages to out (through chat->jinja, see
 * kvs_chat_jinja_render(): no content spans are reported then).  With
 * args->spans set, also appends to *args->spans the byte ranges of the
 * appended text that are message content, one kvs_span_t per non-empty
 * content, with offsets counted from out->len at the call (so, when out
 * starts empty, ready for kvs_tok_encode_guarded()): in increasing
 * order, not overlapping, none empty.  args->spans is a byte buffer
 * holding whole kvs_span_t's (KVS_EINVAL otherwise); its len grows by
 * sizeof(kvs_span_t) per span.  On failure (KVS_EINVAL for bad messages,
 * KVS_EUNSUPPORTED for tool calling through a family, KVS_ENOMEM)
 * out->len and args->spans->len are restored, so nothing is appended to
 * either.
 */
int kvs_chat_render(const kvs_chat_t *chat, const json_t *messages,
    const kvs_chat_args_t *args, kvs_buf_t *out, kvs_err_t *err);

#endif /* KVS_CHAT_H */
