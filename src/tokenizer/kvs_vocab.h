/*
 * kvs_vocab: a tokenizer vocabulary loaded from GGUF metadata.
 *
 * Owns: the token table (texts copied into one pool, so a vocabulary
 * outlives the GGUF file it came from), a text -> id hash, the BPE merge
 * table ((left id, right id) -> rank and merged id), special-token ids and
 * flags, and the compiled pre-tokenizer.
 *
 * Invariants: after kvs_vocab_load() returns KVS_OK the vocabulary is
 * immutable and may be shared by any number of threads; every id stored
 * in it (bos, eos, merge results, byte tokens) is < n_tokens or -1.
 *
 * Token text, per kind:
 *   SPM  the piece as stored (U+2581 "▁" marks a space; <0xNN> byte
 *        tokens are kept as that text, their byte is in byte_of[]).
 *   WPM  as llama.cpp's converter stores WordPiece: a word-initial
 *        piece with a "▁" prefix ("▁to"), a continuation without its
 *        "##" ("jhl"), "[...]" tokens as they are.
 *   BPE  normal and byte tokens: the raw bytes, i.e. the GPT-2
 *        byte-to-unicode mapping already undone; control and
 *        user-defined tokens: the text as stored (it is raw text).
 * The text -> id hash is over these texts, so BPE merges look up raw
 * bytes and never re-encode.
 */

#ifndef KVS_VOCAB_H
#define KVS_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"

typedef enum {
    KVS_VOCAB_SPM = 1,                /* tokenizer.ggml.model "llama" */
    KVS_VOCAB_BPE = 2,                /* tokenizer.ggml.model "gpt2" */
    KVS_VOCAB_WPM = 3                 /* tokenizer.ggml.model "bert" */
} kvs_vocab_kind_t;

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
typedef enum {
    KVS_TOKT_UNDEFINED    = 0,
    KVS_TOKT_NORMAL       = 1,
    KVS_TOKT_UNKNOWN      = 2,
    KVS_TOKT_CONTROL      = 3,
    KVS_TOKT_USER_DEFINED = 4,
    KVS_TOKT_UNUSED       = 5,
    KVS_TOKT_BYTE         = 6
} kvs_tok_type_t;

typedef struct {
    const char   *text;               /* into the vocabulary's pool */
    uint32_t      len;                /* bytes */
    float         score;              /* SPM merge priority; 0 for BPE */
    uint8_t       type;               /* kvs_tok_type_t */
} kvs_token_t;

typedef struct kvs_pretok_s  kvs_pretok_t;

typedef struct {
    uint64_t           serial;        /* unique per load in this process:
                                         per-context caches key on it */
    kvs_vocab_kind_t   kind;
    uint32_t           n_tokens;
    kvs_token_t       *tokens;        /* [n_tokens] */
    uint32_t           max_token_len; /* bytes of the longest text */

    int32_t            bos, eos, eot, eom, unk, pad;   /* -1: none */
    int                add_bos;       /* tokenizer.ggml.add_bos_token */
    int                add_eos;       /* tokenizer.ggml.add_eos_token */
    int                add_space_prefix;  /* SPM dummy prefix (default 1) */
    int                strip_first_space; /* decode drops the "▁" that
                                             starts the first token (SPM
                                             with the dummy prefix, WPM) */
    int                ignore_merges; /* BPE: a piece that is a token is
                                         emitted whole (llama-bpe) */
    int                nfc;           /* BPE: NFC-normalise input (qwen2) */
    int                spm_words;     /* SPM: merges never cross a word
                                         start (kvs_tok_spm_words_ok) */

    char               pre_name[64];  /* tokenizer.ggml.pre, or "default" */
    kvs_pretok_t      *pre;           /* BPE only; NULL for SPM, WPM */

    int32_t            byte_token[256];  /* byte -> token id, -1 if none:
                                            SPM <0xNN>, BPE the 1-byte
                                            token */
    int16_t           *byte_of;       /* [n_tokens] SPM: the byte of a
                                         <0xNN> token, else -1; NULL for
                                         BPE and WPM */

    uint32_t           n_merges;

    /* Special tokens (control, unknown and user-defined, text not
     * empty) for partitioning text: grouped by first byte, longest first
     * within a group; special[special_start[b] .. special_start[b + 1])
     * start with byte b. */
    uint32_t           n_special;
    int32_t           *special;       /* [n_special] token ids */
    uint32_t           special_start[257];

    /* private: hash tables and the pool (kvs_vocab.c) */
    uint32_t          *tok_slots;     /* [tok_mask + 1] id + 1, 0 empty */
    uint32_t           tok_mask;
    uint64_t          *merge_keys;    /* [merge_mask + 1] l<<32|r, ~0 empty */
    uint64_t          *merge_vals;    /* [merge_mask + 1] rank<<32|id */
    uint32_t           merge_mask;
    char              *pool;
    size_t             pool_len;
} kvs_vocab_t;

struct kvs_gguf_s;

/* Reads the tokenizer.* keys of an open GGUF.  Errors name the key and
 * the element (e.g. "tokenizer.ggml.merges[17]: 'a b' names no token"),
 * and an unknown tokenizer.ggml.model or tokenizer.ggml.pre is an error
 * (KVS_EUNSUPPORTED), never a silent fallback. */
int kvs_vocab_load(kvs_vocab_t **out, const struct kvs_gguf_s *g,
    kvs_err_t *err);
int kvs_vocab_open(kvs_vocab_t **out, const char *path, kvs_err_t *err);
void kvs_vocab_free(kvs_vocab_t *v);

/* 1 for a token that ends the text: EOS, EOT, EOM, and BOS, which a model
 * emits to start the next document (llama2.c's generate stops at it). */
static inline int
kvs_vocab_ends_text(const kvs_vocab_t *v, int32_t tok)
{
    return tok == v->eos || tok == v->eot || tok == v->eom || tok == v->bos;
}

/* Token id of exactly these bytes (see "Token text" above), or -1. */
int32_t kvs_vocab_find(const kvs_vocab_t *v, const void *text, size_t len);

/* BPE: the rank of merging left+right and the id it yields; -1 if the
 * pair does not merge. */
static inline int64_t kvs_vocab_merge(const kvs_vocab_t *v, int32_t left,
    int32_t right, int32_t *result);

static inline int64_t
kvs_vocab_merge(const kvs_vocab_t *v, int32_t left, int32_t right,
    int32_t *result)
{
    uint64_t  key, h;
    uint32_t  i;

    if (v->merge_keys == NULL) {
        return -1;
    }

    key = (uint64_t) (uint32_t) left << 32 | (uint32_t) right;
    h = key * 0x9E3779B97F4A7C15ULL;
    i = (uint32_t) (h >> 32) & v->merge_mask;

    for ( ;; ) {
        if (v->merge_keys[i] == key) {
            *result = (int32_t) (uint32_t) v->merge_vals[i];
            return (int64_t) (v->merge_vals[i] >> 32);
        }

        if (v->merge_keys[i] == UINT64_MAX) {
            return -1;
        }

        i = (i + 1) & v->merge_mask;
    }
}

/* 1 if name is a tokenizer.ggml.pre value kvserve implements
 * (kvs_pretok.c). */
int kvs_pretok_known(const char *name);

/* "llama", "gpt2" or "bert". */
const char *kvs_vocab_kind_name(kvs_vocab_kind_t kind);

#endif /* KVS_VOCAB_H */
