/*
 * kvs_tok: text <-> token ids with a kvs_vocab_t.
 *
 * The vocabulary is shared and read-only; all per-call scratch lives in a
 * kvs_tok_ctx_t that the caller owns, one per thread (an nginx worker, a
 * thread-pool thread).  Scratch grows on demand and is reused, so a warm
 * context allocates nothing per call.
 *
 * Encoding never changes the output on failure beyond what was appended
 * before the call: out->n is restored when an error is returned, except
 * for KVS_ETOOLONG (kvs_tok_encode_limit()), which keeps the prefix it
 * made.
 *
 * Memory: a call's scratch grows with its text (the pre-tokenizer's
 * pieces are cut in batches, so they do not), and what the context keeps
 * afterwards is bounded (KVS_TOK_SCRATCH_KEEP).
 */

#ifndef KVS_TOK_H
#define KVS_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_buf.h"
#include "base/kvs_err.h"
#include "kvs_vocab.h"

/* A growable array of token ids. */
typedef struct {
    int32_t  *ids;                    /* [cap] */
    size_t    n;
    size_t    cap;
} kvs_ids_t;

int kvs_ids_reserve(kvs_ids_t *a, size_t extra);
int kvs_ids_push(kvs_ids_t *a, int32_t id);
void kvs_ids_free(kvs_ids_t *a);

/* Per-thread scratch.  Each slot belongs to the file named beside it,
 * which allocates it lazily and frees it in its *_scratch_free(). */
typedef struct {
    void    *pretok;                  /* kvs_pretok.c */
    void    *bpe;                     /* kvs_tok_bpe.c */
    void    *spm;                     /* kvs_tok_spm.c */
    void    *wpm;                     /* kvs_tok_wpm.c */
    void    *norm;                    /* kvs_tok.c: NFC work, [norm_cap]
                                         code points, then UTF-8 */
    size_t   norm_cap;
} kvs_tok_ctx_t;

void kvs_tok_ctx_free(kvs_tok_ctx_t *ctx);  /* frees the slots, not ctx */

/*
 * What a context keeps between calls is bounded: every encoding call
 * ends with kvs_tok_ctx_trim(), which frees all the scratch when it holds
 * more than KVS_TOK_SCRATCH_KEEP bytes.  1 MiB keeps warm what ordinary
 * prompts use (the BPE cache, 256 KiB; a batch of pieces, 16 KiB; BPE
 * arrays for pieces up to about 8 KiB; SentencePiece and WordPiece
 * scratch for fragments of some 100 KiB), while a thread that once met a
 * huge prompt does not keep its scratch: 32 pool threads hold 32 MiB at
 * most, whatever the prompts were.
 */
#define KVS_TOK_SCRATCH_KEEP  (1024 * 1024)

/* Bytes of scratch the context holds now (its allocations, as sized). */
size_t kvs_tok_ctx_scratch_bytes(const kvs_tok_ctx_t *ctx);
/* Frees the scratch if it holds more than KVS_TOK_SCRATCH_KEEP. */
void kvs_tok_ctx_trim(kvs_tok_ctx_t *ctx);

/* Encode flags. */
#define KVS_TOK_ADD_BOS   0x01   /* prepend BOS if the vocabulary has one */
#define KVS_TOK_ADD_EOS   0x02
#define KVS_TOK_SPECIAL   0x04   /* parse control-token text (e.g.
                                    "<|eot_id|>") into its id; without it
                                    such text is tokenized as plain text.
                                    User-defined tokens always match. */

/* Appends the ids of text to out.  Invalid UTF-8 is rejected
 * (KVS_EINVAL, with the byte offset) before anything is appended. */
int kvs_tok_encode(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, unsigned flags, kvs_ids_t *out,
    kvs_err_t *err);

/* A byte range [off, off + len) of a text. */
typedef struct {
    size_t    off;
    size_t    len;
} kvs_span_t;

/* As kvs_tok_encode() with KVS_TOK_SPECIAL, except that a control token
 * whose text overlaps one of the guard spans (sorted, not overlapping) is
 * not parsed there: for chat prompts, where the spans are what the client
 * wrote (kvs_chat_render() reports them) and the rest is the template's.
 * Without special text in the spans the ids equal kvs_tok_encode()'s. */
int kvs_tok_encode_guarded(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, unsigned flags, const kvs_span_t *guard,
    size_t nguard, kvs_ids_t *out, kvs_err_t *err);

/* No limit for kvs_tok_encode_limit(). */
#define KVS_TOK_NO_LIMIT  SIZE_MAX

/*
 * As kvs_tok_encode_guarded(), but stops as soon as out is known to end
 * with more than limit ids (out->n counts what it held before the call
 * too): KVS_ETOOLONG, and out then holds the first ids of the whole
 * encoding, at most limit + 1 of them (fewer when the text left was
 * longer than limit tokens could cover, so it was not tokenized at all).
 * Text past the point where it stopped is neither pre-tokenized nor
 * merged, so refusing a prompt longer than a model's context costs what
 * its first tokens cost.
 */
int kvs_tok_encode_limit(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, unsigned flags, const kvs_span_t *guard,
    size_t nguard, size_t limit, kvs_ids_t *out, kvs_err_t *err);

/* Decode flags. */
#define KVS_DETOK_SPECIAL 0x01   /* show control tokens' text; by default
                                    they decode to nothing */

/* Appends the UTF-8 text of ids to out.  Ids out of range are an error.
 * Byte sequences that are not valid UTF-8 decode to U+FFFD, as the
 * reference tokenizers' decode does. */
int kvs_tok_decode(const kvs_vocab_t *v, const int32_t *ids, size_t n,
    unsigned flags, kvs_buf_t *out, kvs_err_t *err);

/* Streaming detokenizer: push ids one at a time, get only complete UTF-8
 * characters out (a multi-byte character split across tokens is held
 * until its last byte arrives), with the same text as kvs_tok_decode()
 * of the whole sequence once finished. */
typedef struct {
    const kvs_vocab_t  *v;
    unsigned            flags;
    size_t              ntok;         /* tokens pushed so far */
    uint8_t             pend[4];      /* bytes of an unfinished character */
    uint8_t             npend;
} kvs_detok_t;

void kvs_detok_init(kvs_detok_t *d, const kvs_vocab_t *v, unsigned flags);
int kvs_detok_push(kvs_detok_t *d, int32_t id, kvs_buf_t *out,
    kvs_err_t *err);
/* Places the detokenizer after ids (a prompt) without producing their
 * text, so the first generated token decodes as their continuation. */
void kvs_detok_skip(kvs_detok_t *d, const int32_t *ids, size_t n);
int kvs_detok_finish(kvs_detok_t *d, kvs_buf_t *out);  /* flush: U+FFFD
                                                         for a cut-off
                                                         character */

#endif /* KVS_TOK_H */
