/*
 * kvs_vocab_convert_impl: what kvs_vocab_convert.c lends the two format
 * readers (kvs_vocab_tiktoken.c, kvs_vocab_hf.c).  Private to those three
 * files; the public API is kvs_vocab_convert.h.
 *
 * A reader parses and validates its input into a kvs_vc_vocab_t (normal
 * tokens only, stored in the GPT-2 byte-to-unicode alphabet, and its
 * merges), then calls kvs_vc_finish(), which appends the profile's
 * special tokens and writes the file.  Errors are reported through
 * kvs_err_t with the file, the line or entry and the quoted value.
 */

#ifndef KVS_VOCAB_CONVERT_IMPL_H
#define KVS_VOCAB_CONVERT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_buf.h"
#include "base/kvs_clock.h"
#include "base/kvs_err.h"
#include "kvs_vocab_convert.h"

#define KVS_VC_MAX_FILE       (256u << 20)   /* bytes of one input */
#define KVS_VC_MAX_TOKENS     (1u << 24)
#define KVS_VC_MAX_TOKEN_LEN  4096           /* bytes, raw */
#define KVS_VC_QUOTE          96             /* quoted value buffer */


/* The vocabulary as it will be written. */
typedef struct {
    kvs_buf_t   text;                 /* token strings as GGUF stores them */
    uint32_t   *off;                  /* [cap] offset into text */
    uint32_t   *len;                  /* [cap] bytes */
    int32_t    *type;                 /* [cap] kvs_tok_type_t */
    uint32_t    n;
    uint32_t    cap;
    uint32_t   *merge;                /* [2 * n_merges] left, right ids */
    uint32_t    n_merges;
} kvs_vc_vocab_t;


/* Byte strings -> ids; the strings live in the caller's pool, which must
 * not move while the map is used. */
typedef struct {
    const uint8_t   *base;
    const uint32_t  *off;             /* [n] */
    const uint32_t  *len;             /* [n] */
    uint32_t        *slot;            /* [mask + 1] id + 1; 0 empty */
    uint32_t         mask;
} kvs_vc_map_t;


/* What each input format turns into. */
typedef struct {
    const char          *arch;
    const char          *pre;
    const char          *name;
    int                  add_bos;
    uint32_t             n_special;
    const char *const   *named;       /* the first n_named specials */
    uint32_t             n_named;
    uint32_t             reserved_at; /* number of special n_named */
    /* indexes into the special tokens; -1: no such key is written */
    int32_t              bos, eos, eot, eom, pad;
} kvs_vc_profile_t;


/* The lines of a buffer, each without its "\n" or "\r\n". */
typedef struct {
    const uint8_t   *p;               /* start of the next line */
    const uint8_t   *end;
    uint32_t         lineno;          /* 1-based, of the line last given */
} kvs_vc_lines_t;


/* s[0..n) as a double-quoted string for messages, in buf[size]. */
const char *kvs_vc_quote(const void *s, size_t n, char *buf, size_t size);

/* Reads a whole file of at most max bytes; *out (malloc'ed, one spare
 * NUL byte after *out_len) is the caller's. */
int kvs_vc_slurp(const char *path, size_t max, uint8_t **out,
    size_t *out_len, kvs_err_t *err);

/* How many lines kvs_vc_lines_next() gives for buf[0..size). */
size_t kvs_vc_lines_count(const uint8_t *buf, size_t size);
void kvs_vc_lines_init(kvs_vc_lines_t *it, const uint8_t *buf, size_t size);
/* The next line in [*s, *e); 0 when there is none. */
int kvs_vc_lines_next(kvs_vc_lines_t *it, const uint8_t **s,
    const uint8_t **e);

/* The map holds no ids until kvs_vc_map_add(); kvs_vc_map_free() may be
 * given a zeroed map. */
int kvs_vc_map_init(kvs_vc_map_t *m, const uint8_t *base,
    const uint32_t *off, const uint32_t *len, uint32_t n);
void kvs_vc_map_free(kvs_vc_map_t *m);
int32_t kvs_vc_map_find(const kvs_vc_map_t *m, const uint8_t *s, size_t n);
/* -1 when id was added, else the id that already has its string. */
int32_t kvs_vc_map_add(kvs_vc_map_t *m, uint32_t id);

/* Room for cap tokens and cap merges. */
int kvs_vc_vocab_init(kvs_vc_vocab_t *cv, uint32_t cap);
void kvs_vc_vocab_free(kvs_vc_vocab_t *cv);
/* Appends a token: s[0..n) as it is, or, if spell, the raw bytes s[0..n)
 * spelt in the GPT-2 alphabet.  KVS_EINVAL when full. */
int kvs_vc_vocab_add(kvs_vc_vocab_t *cv, const void *s, size_t n,
    int spell, int32_t type);

/* Every byte must be a token of m (over alphabet strings if map_is_alpha,
 * else raw bytes); path names the input in the error. */
int kvs_vc_check_bytes(const kvs_vc_map_t *m, int map_is_alpha,
    const char *path, kvs_err_t *err);

/* Zeroes stats (first_unsplit -1) if not NULL; returns the start time
 * for kvs_vc_finish(). */
double kvs_vc_start(kvs_vocab_convert_stats_t *stats);

/*
 * Appends p's special tokens to cv, after checking that no token of m
 * (spelt as for kvs_vc_check_bytes()) has a special token's raw bytes;
 * m is not used afterwards, as cv->text moves.  Then writes out_path and
 * fills stats (timed from t0).
 */
int kvs_vc_finish(kvs_vc_vocab_t *cv, const kvs_vc_profile_t *p,
    const kvs_vc_map_t *m, int map_is_alpha, const char *in_path,
    const kvs_vocab_convert_opts_t *opts, const char *out_path,
    kvs_vocab_convert_stats_t *stats, double t0, kvs_err_t *err);

#endif /* KVS_VOCAB_CONVERT_IMPL_H */
