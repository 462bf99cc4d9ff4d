/*
 * kvs_guard: content guards: a set of PCRE2 rules compiled from a
 * pattern file, checked against a whole text (a rendered prompt) and
 * against generated text as it streams, in chunks cut anywhere (token
 * and SSE boundaries, the middle of a UTF-8 character).
 *
 * The pattern file (docs/guard.md): one rule a line, `#` starts a
 * comment line, blank lines are skipped:
 *
 *     CLASS[:NAME] [window=N] PATTERN
 *
 * CLASS ([a-z0-9_], 1..32) is what a client is told ("content_policy_"
 * CLASS); NAME (same alphabet) labels the rule in metrics, by default
 * CLASS:LINE.  PATTERN is the rest of the line (trailing blanks and a
 * CR cut), compiled with PCRE2_UTF | PCRE2_MATCH_INVALID_UTF and JIT.
 *
 * Every rule has a window W: the most bytes a match of it, with the
 * character an end assertion ($, \b, \B) looks at, can span.  It is
 * computed from the pattern (kvs_guard_len.c; a documented subset of
 * PCRE2's syntax), or given by window=N for a pattern whose length is
 * unbounded (.*, +, {n,}); an unbounded pattern without window=, or one
 * outside the subset, is refused naming file and line.
 *
 * What matches (the same for a whole text and for any chunking of it):
 * the leftmost start at which some rule matches, the rule first in the
 * file winning at equal starts, a rule seeing only the W bytes from its
 * start (and the bytes before it for \b and (?m)^); empty matches never
 * count.  After a redacted match the search goes on at its end.
 *
 * Streaming: a stream emits the text that no match can include any more
 * and holds back at most W_max - 1 bytes (W_max: the set's largest
 * window), which PCRE2_PARTIAL_HARD says may still begin a match, plus
 * the at most 3 bytes of a UTF-8 character that a chunk boundary cut
 * (PCRE2 would take them for invalid: they wait for the rest); it keeps
 * 4 more bytes already emitted (one character) for \b.  Exact
 * across boundaries: a rule's decision at a start depends only on the W
 * bytes from it and the character before, which the stream waits for,
 * and PCRE2_PARTIAL_HARD reports a partial match whenever more text
 * could change the result at a start (kvs_guard_match.c).
 *
 * Memory: a set owns its compiled codes; a stream owns one buffer of
 * 4 + W_max - 1 + KVS_GUARD_SLICE bytes and one match data, fixed at
 * kvs_guard_stream_init; nothing grows with the text.  A set is
 * read-only once compiled: streams and checks in several threads may
 * share it.
 */

#ifndef KVS_GUARD_H
#define KVS_GUARD_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_buf.h"
#include "base/kvs_err.h"

#define KVS_GUARD_NAME_MAX    32      /* a class's or name's bytes */
#define KVS_GUARD_WINDOW_MAX  16384   /* bytes: window= and computed */
#define KVS_GUARD_RULES_MAX   4096
#define KVS_GUARD_LINE_MAX    8192    /* bytes of one line */
#define KVS_GUARD_SLICE       256     /* a stream scans this much new
                                         text at a time */
#define KVS_GUARD_CTX         4       /* bytes kept before the hold */
#define KVS_GUARD_CUT         3       /* bytes of a cut character */
#define KVS_GUARD_MARK        "[redacted]"

typedef struct kvs_guard_s  kvs_guard_t;

typedef enum {
    KVS_GUARD_OFF = 0,
    KVS_GUARD_STOP,                   /* end the output before a match */
    KVS_GUARD_REDACT                  /* replace a match, go on */
} kvs_guard_mode_t;

/* One rule, as the set describes it (read-only). */
typedef struct {
    char       cls[KVS_GUARD_NAME_MAX + 1];
    char       name[2 * KVS_GUARD_NAME_MAX + 2];  /* "pii:email" */
    uint32_t   line;
    uint32_t   window;                /* W, bytes */
    unsigned   explicit_window:1;     /* window= gave it */
} kvs_guard_rule_t;

/* Compiles file's rules; err names the file and line (and PCRE2's
 * message and offset) of the first bad one. */
int kvs_guard_load(kvs_guard_t **g, const char *path, kvs_err_t *err);
/* The same from a buffer; name stands for the file in messages. */
int kvs_guard_compile(kvs_guard_t **g, const char *name, const char *text,
    size_t len, kvs_err_t *err);
void kvs_guard_free(kvs_guard_t *g);

size_t kvs_guard_n_rules(const kvs_guard_t *g);
const kvs_guard_rule_t *kvs_guard_rule(const kvs_guard_t *g, size_t i);
/* W_max: a stream holds back at most this - 1 bytes. */
uint32_t kvs_guard_window(const kvs_guard_t *g);

/*
 * The window of one pattern from its syntax: KVS_OK with *w, or
 * KVS_ERANGE (unbounded: *w 0), or KVS_EUNSUPPORTED naming what is
 * outside the subset, with *off at it.  window_rule: the rule has
 * window=, which refuses end assertions, atomic groups and possessive
 * quantifiers (their results would change at the window's edge).
 */
int kvs_guard_measure(const char *pat, size_t len, int window_rule,
    uint32_t *w, size_t *off, kvs_err_t *err);

/*
 * The first match in text (a whole prompt): KVS_OK with *rule set to its
 * index, or to -1 when nothing matches; KVS_ERANGE when PCRE2 gave up
 * (its match limit), which the caller treats as a refusal.
 */
int kvs_guard_check(const kvs_guard_t *g, const char *text, size_t len,
    int32_t *rule, kvs_err_t *err);

/* Called for every match a stream finds, in order. */
typedef void (*kvs_guard_hit_pt)(void *data, uint32_t rule);

typedef struct {
    const kvs_guard_t  *g;
    void               *md;           /* pcre2_match_data_8 */
    unsigned char      *buf;          /* [cap]: ctx, then the hold */
    size_t              cap;
    size_t              len;
    size_t              pos;          /* buf[0..pos): emitted (context) */
    uint64_t            seen;         /* bytes fed so far */
    size_t              max_hold;     /* the most held back, for tests */
    kvs_guard_mode_t    mode;
    kvs_guard_hit_pt    hit;
    void               *hit_data;
    int32_t             stopped;      /* -1, or the rule that stopped it */
    uint32_t            n_hits;
} kvs_guard_stream_t;

int kvs_guard_stream_init(kvs_guard_stream_t *s, const kvs_guard_t *g,
    kvs_guard_mode_t mode, kvs_guard_hit_pt hit, void *data,
    kvs_err_t *err);
void kvs_guard_stream_free(kvs_guard_stream_t *s);

/*
 * Feeds n bytes; appends to out what is emitted now (text, markers).
 * After a stop (s->stopped >= 0) further text is dropped.  KVS_ERANGE
 * when PCRE2 gave up: the caller ends the output.
 */
int kvs_guard_feed(kvs_guard_stream_t *s, const char *p, size_t n,
    kvs_buf_t *out, kvs_err_t *err);
/* The text ended: what is held back is decided and emitted. */
int kvs_guard_end(kvs_guard_stream_t *s, kvs_buf_t *out, kvs_err_t *err);
/* Bytes held back now: under kvs_guard_window() + KVS_GUARD_CUT. */
size_t kvs_guard_held(const kvs_guard_stream_t *s);

#endif /* KVS_GUARD_H */
