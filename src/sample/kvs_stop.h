/*
 * kvs_stop: stop strings matched on the streamed, detokenized text of one
 * sequence (OpenAI's "stop"), across token boundaries.
 *
 * The engine feeds the text the streaming detokenizer produces, chunk by
 * chunk; the matcher appends to the caller's buffer every byte that can
 * no longer be the start of a stop string and holds back the rest, so
 * streaming stays live and a stop string is never shown, even in part.
 *
 * Which stop wins: the generated text is cut at the earliest position P
 * where any stop string occurs (what truncating the finished text at the
 * first occurrence of any of them gives, whatever the chunking).  The
 * reported string is the shortest one occurring at P (the lowest index
 * among duplicates).  The match is decided at the first byte where that
 * is certain: a stop string has completed at P and no partial match of
 * another one starts before P.  So with stops "\nUser:" and "User" the
 * text "\nUser:" is cut before the newline, although "User" completed
 * first: the matcher waits for the ":" (at most the longest stop's
 * length minus one bytes) instead of stopping at "User".
 *
 * Usage, per generated token:
 *     kvs_detok_push(&dt, id, &piece, &err);
 *     kvs_stop_feed(&st, piece.data, piece.len, &text, &err);
 *     if (st.matched >= 0) -> finish_reason "stop", text is final
 * and at EOS or max_tokens: kvs_stop_flush(&st, &text, &err), which can
 * still report a match that was waiting on a longer candidate.
 *
 * Matching is on bytes.  Stop strings are valid UTF-8 and the detokenizer
 * emits whole characters, so matches and the held-back tail start on
 * character boundaries and the emitted text is always whole characters.
 *
 * Cost: an Aho-Corasick automaton over the stop strings (at most
 * 1 + 16 * 256 nodes of 16 bytes, one allocation at init), run once over
 * each fed byte: per feed O(len + longest stop) time, no allocation but
 * the caller's output buffer's growth.  The held-back tail is at most
 * the longest stop string minus one byte.
 *
 * Threads: one matcher per sequence, used by one thread at a time.
 */

#ifndef KVS_STOP_H
#define KVS_STOP_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_buf.h"
#include "base/kvs_err.h"

#define KVS_STOP_MAX      16         /* strings per matcher (API: 4) */
#define KVS_STOP_MAX_LEN  256        /* bytes per string */

typedef struct kvs_stop_node_s  kvs_stop_node_t;

/* Fields are read-only outside kvs_stop.c. */
typedef struct {
    kvs_stop_node_t  *node;       /* [n_node] the automaton; NULL if n 0 */
    uint8_t          *hold;       /* [max_len] held-back bytes */
    unsigned          n;          /* stop strings */
    unsigned          n_node;
    size_t            max_len;    /* longest stop string, bytes */

    unsigned          state;      /* automaton node after the fed text */
    size_t            n_hold;     /* bytes in hold, <= max_len - 1 */
    uint64_t          fed;        /* bytes fed (and consumed) so far */

    int               pending;    /* a stop completed at pend_at but an
                                     earlier-starting one may follow */
    int               pend_idx;
    uint64_t          pend_at;

    int               done;       /* matched or flushed: input ignored */
    int               matched;    /* index of the stop string, or -1 */
    uint64_t          match_at;   /* byte offset of the match in the whole
                                     generated text (bytes emitted) */
} kvs_stop_t;


/*
 * Builds the matcher for strs[0..n) (n may be 0: pass-through); lens
 * gives each string's length, or lens NULL means NUL-terminated strings.
 * KVS_EINVAL names the first bad string (empty, longer than 256 bytes,
 * invalid UTF-8) or too many strings; KVS_ENOMEM.  On failure s owns
 * nothing.  The strings are not kept.
 */
int kvs_stop_init(kvs_stop_t *s, const char *const *strs, const size_t *lens,
    unsigned n, kvs_err_t *err);

/*
 * Consumes text[0..len) and appends to out what became final.  When this
 * completes a stop string (s->matched >= 0 afterwards) out receives the
 * text up to the match and nothing after it, and later feeds are no-ops.
 * KVS_ENOMEM (out could not grow) leaves s and out unchanged.
 */
int kvs_stop_feed(kvs_stop_t *s, const char *text, size_t len,
    kvs_buf_t *out, kvs_err_t *err);

/*
 * End of generation: appends the held-back text to out (or, when a match
 * was waiting on a longer candidate, the text before it, and sets
 * s->matched).  Afterwards feeds are no-ops.  KVS_ENOMEM leaves s and out
 * unchanged.
 */
int kvs_stop_flush(kvs_stop_t *s, kvs_buf_t *out, kvs_err_t *err);

/* Back to an empty stream with the same stop strings (a new sequence, or
 * a preempted one whose text is regenerated). */
void kvs_stop_reset(kvs_stop_t *s);

void kvs_stop_free(kvs_stop_t *s);

#endif /* KVS_STOP_H */
