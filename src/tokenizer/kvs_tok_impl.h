/*
 * kvs_tok_impl: the stages of encoding, shared by kvs_tok.c and the
 * per-algorithm files.  Not for use outside src/tokenizer/.
 *
 * kvs_tok.c validates UTF-8, splits the text at special tokens and hands
 * each plain-text fragment to the vocabulary's algorithm:
 *
 *   SPM  kvs_tok_spm_encode(): whole fragment, score-driven merges.
 *   BPE  kvs_pretok_split() cuts the fragment into pieces,
 *        kvs_tok_bpe_piece() merges each piece by rank.
 *   WPM  kvs_tok_wpm_encode(): whole fragment, BERT normalisation, words,
 *        greedy longest-match WordPiece.
 */

#ifndef KVS_TOK_IMPL_H
#define KVS_TOK_IMPL_H

#include "kvs_tok.h"

/* A piece of a fragment: [off, off + len) in the fragment's bytes. */
typedef struct {
    uint32_t  off;
    uint32_t  len;
} kvs_piece_t;

/* --- pre-tokenizer (kvs_pretok.c) --------------------------------------- */

/* Compiles the regular expressions of a tokenizer.ggml.pre name.  An
 * unknown name is KVS_EUNSUPPORTED with the name quoted. */
int kvs_pretok_new(kvs_pretok_t **out, const char *name, kvs_err_t *err);
void kvs_pretok_free(kvs_pretok_t *p);

/* Splits text (valid UTF-8, len < 4 GiB) into pieces that cover it in
 * order.  *pieces points into ctx scratch, valid until the next call. */
int kvs_pretok_split(const kvs_pretok_t *p, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, const kvs_piece_t **pieces, size_t *n,
    kvs_err_t *err);
/* As kvs_pretok_split(), resumable: the first step's search starts at
 * from and stops once it made max pieces (the other steps may cut them
 * further); *next is where the next call starts, len when all is done.
 * The calls' pieces, in turn, are those of one kvs_pretok_split(). */
int kvs_pretok_split_from(const kvs_pretok_t *p, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, size_t from, size_t max,
    const kvs_piece_t **pieces, size_t *n, size_t *next, kvs_err_t *err);
void kvs_pretok_scratch_free(kvs_tok_ctx_t *ctx);
size_t kvs_pretok_scratch_bytes(const kvs_tok_ctx_t *ctx);


/* --- byte-level BPE (kvs_tok_bpe.c) ------------------------------------- */

/* Appends the ids of one piece (raw bytes). */
int kvs_tok_bpe_piece(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *piece, size_t len, kvs_ids_t *out, kvs_err_t *err);
void kvs_tok_bpe_scratch_free(kvs_tok_ctx_t *ctx);
size_t kvs_tok_bpe_scratch_bytes(const kvs_tok_ctx_t *ctx);

/* --- SentencePiece BPE (kvs_tok_spm.c) ---------------------------------- */

/* Appends the ids of one plain-text fragment; prefix: add the dummy
 * leading space (v->add_space_prefix and the fragment starts the text or
 * follows a special token). */
int kvs_tok_spm_encode(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, int prefix, kvs_ids_t *out,
    kvs_err_t *err);
void kvs_tok_spm_scratch_free(kvs_tok_ctx_t *ctx);
size_t kvs_tok_spm_scratch_bytes(const kvs_tok_ctx_t *ctx);

/* 1 if text can be merged word by word (see kvs_tok_spm.c); the loader
 * stores it in v->spm_words. */
int kvs_tok_spm_words_ok(const kvs_vocab_t *v);

/* --- WordPiece (kvs_tok_wpm.c) ------------------------------------------ */

/* Appends the ids of one plain-text fragment (valid UTF-8). */
int kvs_tok_wpm_encode(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, kvs_ids_t *out, kvs_err_t *err);
void kvs_tok_wpm_scratch_free(kvs_tok_ctx_t *ctx);
size_t kvs_tok_wpm_scratch_bytes(const kvs_tok_ctx_t *ctx);

#endif /* KVS_TOK_IMPL_H */
