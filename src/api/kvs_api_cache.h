/*
 * kvs_api_cache: where a chat request's cache breakpoints (cache_control,
 * kvs_api_break_t) fall in its prompt, first as byte offsets in the
 * rendered text, then as prompt token counts for the engine's pins.
 *
 * A breakpoint covers the prompt up to the end of its part's (or its
 * message's) content as the template wrote it.  The offset is found by
 * rendering the conversation cut there (the part's message keeps the
 * parts up to it, later messages keep their role with empty content),
 * which writes the same bytes as the full rendering up to that content's
 * end: the templates render messages in order and only roles, never
 * later contents, change what comes before.  The offset is the end of
 * the cut rendering's last content span, clamped to where the two
 * renderings agree, so it is a true prefix of the prompt whatever the
 * family does (a trim that the cut exposes only moves it earlier).
 * Through a Jinja template (chat->jinja), which reports no spans, it is
 * the whole cut rendering clamped the same way, so it may take in the
 * template's text up to the next content (the next turn's header).
 *
 * The token count is the number of leading prompt ids equal to the ids
 * of that text prefix tokenized on its own (the same guarded encoding,
 * spans cut at the offset).  So the pinned tokens are exactly what
 * another request whose prompt starts with the same text gets, and a
 * token that a tokenizer merges across the offset is left out.
 *
 * Both are pure functions of their inputs; the tokenizer context is the
 * caller's (one per thread).  Failures (KVS_EINVAL for messages the
 * template refuses, KVS_ENOMEM) write no output.
 */

#ifndef KVS_API_CACHE_H
#define KVS_API_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/kvs_err.h"
#include "tokenizer/kvs_chat.h"
#include "tokenizer/kvs_tok.h"
#include "kvs_api_req.h"

/*
 * off[k]: bytes of text[0..len) (messages rendered by chat with args,
 * args->spans unused) that breakpoint breaks[k] covers; 0 when its
 * content and all before it is empty.
 */
int kvs_api_cache_offsets(const kvs_chat_t *chat, const json_t *messages,
    const kvs_chat_args_t *args, const char *text, size_t len,
    const kvs_api_break_t *breaks, uint32_t n, size_t *off, kvs_err_t *err);

/*
 * n_tokens[k]: prompt ids ids[0..n_ids) (text[0..len) encoded with
 * flags, guarded by spans[n_spans]) that the text prefix
 * text[0..off[k]) accounts for, as above; 0 for off[k] == 0.
 */
int kvs_api_cache_tokens(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, unsigned flags, const kvs_span_t *spans,
    size_t n_spans, const int32_t *ids, size_t n_ids, const size_t *off,
    uint32_t n, uint32_t *n_tokens, kvs_err_t *err);

#endif /* KVS_API_CACHE_H */
