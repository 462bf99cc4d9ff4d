/*
 * kvs_api_tok: the bodies of POST /tokenize and /detokenize, in vLLM's
 * and llama-server's shapes, and their answers.  Pure functions on
 * buffers; the caller tokenizes (the model's vocabulary and chat
 * template, possibly in a thread pool) and decodes.
 *
 * One endpoint serves both servers' clients; the request's own fields
 * choose the answer's shape (docs/api.md, "Operator endpoints"):
 *
 *   /tokenize   {"prompt"} or {"messages"} (vLLM): {"count",
 *               "max_model_len", "tokens"}; {"content"} (llama-server):
 *               {"tokens"};
 *   /detokenize {"model", "tokens"} (vLLM): {"prompt"}; {"tokens"}
 *               without a model (llama-server): {"content"}.
 *
 * A field we do not read is a 400 naming it, as is an option whose
 * non-default value we cannot honour (with_pieces, return_token_strs,
 * continue_final_message); these endpoints have no OpenAI fields to
 * let pass.
 *
 * Ownership: a parsed body owns its JSON tree (req.root) and the one
 * prompt or the ids; kvs_api_tok_free() frees them, also after a failed
 * parse (which leaves nothing).
 */

#ifndef KVS_API_TOK_H
#define KVS_API_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_buf.h"
#include "kvs_api_req.h"

#define KVS_API_TOK_VLLM   0          /* vLLM's answer */
#define KVS_API_TOK_LLAMA  1          /* llama-server's answer */

typedef struct {
    kvs_api_req_t   req;              /* model (ptr NULL: not given),
                                         root; tokenize: kind
                                         KVS_API_CHAT with messages (and
                                         tools), or KVS_API_COMPLETIONS
                                         with one text prompt */
    unsigned        shape;            /* KVS_API_TOK_* */
    int             add_special;      /* text: the vocabulary's BOS rule
                                         (vLLM's add_special_tokens,
                                         default true; llama-server's
                                         add_special, default false) */
    int             parse_special;    /* text: control-token text becomes
                                         its id (llama-server's
                                         parse_special, default true;
                                         vLLM's prompt: false, as
                                         /v1/completions tokenizes) */
    int             add_generation_prompt;  /* messages: default true */
    int32_t        *ids;              /* detokenize: [n_ids], owned */
    size_t          n_ids;
} kvs_api_tok_t;

/* Parse a /tokenize or /detokenize body (the same errors as
 * kvs_api_req_parse() for the body itself: 413 over max_body, 400 for
 * bad JSON or a bad field naming it). */
int kvs_api_tokenize_parse(kvs_api_tok_t *t, const char *body, size_t len,
    size_t max_body, kvs_api_err_t *aerr);
int kvs_api_detokenize_parse(kvs_api_tok_t *t, const char *body,
    size_t len, size_t max_body, kvs_api_err_t *aerr);

void kvs_api_tok_free(kvs_api_tok_t *t);

/* 400 naming tokens[i] for the first id outside 0..n_vocab-1. */
int kvs_api_tok_check_ids(const kvs_api_tok_t *t, uint32_t n_vocab,
    kvs_api_err_t *aerr);

/* The answers, appended to out; KVS_ENOMEM on failure. */
int kvs_api_tokenize_json(const kvs_api_tok_t *t, const int32_t *ids,
    size_t n, uint32_t max_model_len, kvs_buf_t *out);
int kvs_api_detokenize_json(const kvs_api_tok_t *t, const char *text,
    size_t len, kvs_buf_t *out);

#endif /* KVS_API_TOK_H */
