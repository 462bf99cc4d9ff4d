/*
 * kvs_vocab_convert: turns a byte-level BPE vocabulary published in
 * another format into a vocabulary-only GGUF file (no tensors), laid out
 * as llama.cpp's converter lays it out, so that kvs_vocab_open() and
 * llama.cpp both read it:
 *
 *   tiktoken ranks ("<base64> <rank>" lines, Llama 3's tokenizer.model)
 *       -> architecture "llama", pre "llama-bpe", the 256 Llama 3.1
 *          special tokens after the ranks (names as in the Hugging Face
 *          files), bos <|begin_of_text|>, eos <|end_of_text|> (the base
 *          model's), eot <|eot_id|>, eom <|eom_id|>, add_bos_token true;
 *   Hugging Face vocab.json + merges.txt (Qwen2)
 *       -> architecture "qwen2", pre "qwen2", <|endoftext|>,
 *          <|im_start|>, <|im_end|> after the vocabulary; eos and padding
 *          <|endoftext|>, eot <|im_end|>, add_bos_token false (bos_token_id
 *          is still <|endoftext|>, as llama.cpp's converter writes it).
 *
 * Invariants of the file written: tokenizer.ggml.model is "gpt2"; normal
 * tokens are stored in the GPT-2 byte-to-unicode alphabet and special
 * tokens as raw text (type 3, control); every one of the 256 bytes is a
 * token; token strings are unique as the loader sees them (raw bytes);
 * every merge "a b" names two tokens whose concatenation is a token.  The
 * output appears under its name only when complete (the GGUF writer
 * writes "<out>.tmp" and renames it); on any error nothing is left.
 *
 * A tiktoken file has no merges: each token of two or more bytes gets at
 * most one, found by running rank BPE over its own bytes with only the
 * lower ranks allowed; when that ends in exactly two parts "a b" is the
 * merge.  Merges are listed in the order of the merged token's rank, so
 * merge priority follows rank as in tiktoken.  Tokens that end in three
 * or more parts get no merge (they are produced only whole, by the
 * "ignore_merges" rule of llama-bpe) and are counted in n_unsplit.
 */

#ifndef KVS_VOCAB_CONVERT_H
#define KVS_VOCAB_CONVERT_H

#include <stdint.h>

#include "base/kvs_err.h"

typedef struct {
    const char  *pre;                 /* tokenizer.ggml.pre; NULL: the
                                         format's default */
    const char  *name;                /* general.name; NULL: default */
    const char  *chat_template;       /* path of a template file to store
                                         as tokenizer.chat_template, or
                                         NULL */
} kvs_vocab_convert_opts_t;

typedef struct {
    uint32_t     n_tokens;            /* special tokens included */
    uint32_t     n_special;
    uint32_t     n_merges;
    uint32_t     n_unsplit;           /* tiktoken: tokens of >= 2 bytes
                                         without a two-part split */
    int32_t      first_unsplit;       /* id of the first of them, or -1 */
    double       derive_seconds;      /* merge derivation (tiktoken) */
    double       seconds;             /* the whole conversion, wall time */
} kvs_vocab_convert_stats_t;

/* opts and stats may be NULL.  Errors name the file, the line (or the
 * JSON entry) and the offending value. */
int kvs_vocab_convert_tiktoken(const char *ranks_path, const char *out_path,
    const kvs_vocab_convert_opts_t *opts, kvs_vocab_convert_stats_t *stats,
    kvs_err_t *err);

int kvs_vocab_convert_hf(const char *vocab_path, const char *merges_path,
    const char *out_path, const kvs_vocab_convert_opts_t *opts,
    kvs_vocab_convert_stats_t *stats, kvs_err_t *err);

#endif /* KVS_VOCAB_CONVERT_H */
