/*
 * kvs_guard_match: finding a set's matches in a whole text and in a
 * stream of chunks, with the same answer for every chunking.
 *
 * The search (kvs_guard_next) tries every start from a position, left
 * to right, and decides each one rule by rule (kvs_guard_at), in file
 * order, over the rules whose match may begin with the byte there
 * (PCRE2's start bitmaps: a handful of 100 rules at most bytes, where
 * one alternation of all of them would try every rule at every start),
 * each anchored there and seeing only its window: the text cut W bytes
 * after the start (PCRE2_NOTEOL: the cut is not an end) when those
 * bytes are all there, else the text so far with PCRE2_PARTIAL_HARD
 * (never for a whole text, which has no more to come).
 *
 * Why a stream gets the whole text's answer: a decision at a start s
 * reads only the bytes of [s, s + W) and the character before s.  A
 * stream decides at s only when PCRE2 says no more text can change the
 * result there (no partial match: PARTIAL_HARD reports one whenever a
 * path reached the end of the text, $ and \b included), or when the W
 * bytes are all there, the same bytes the whole text gives; otherwise
 * it holds the text from s back, less than W bytes (a partial at s
 * with s + W past the end), and decides when more comes or the text
 * ends.  A rule may use no lookaround nor backreference
 * (kvs_guard_len.c), so what it reads is the window and the one
 * character before the start; and a window= rule no $, which would see
 * the cut as an end (with \b, \B, atomic groups and possessive
 * quantifiers, kept out of window= rules to be safe).
 *
 * Invariants: a stream's buffer never grows (cap fixed at init); bytes
 * before pos were emitted and only KVS_GUARD_CTX of them are kept; the
 * bytes held back are fewer than kvs_guard_window().
 */

#include <stdlib.h>
#include <string.h>

#include "kvs_guard_impl.h"

enum {
    KVS_GF_NONE = 0,
    KVS_GF_MATCH,
    KVS_GF_PARTIAL
};

typedef struct {
    int       kind;
    uint32_t  rule;
    size_t    start;
    size_t    end;
} kvs_gfound_t;


static int
kvs_guard_limit(kvs_err_t *err, int rc)
{
    PCRE2_UCHAR  msg[120];

    if (pcre2_get_error_message(rc, msg, sizeof(msg)) < 0) {
        strcpy((char *) msg, "unknown error");
    }

    return kvs_err_set(err, KVS_ERANGE, "the guard could not decide: %s",
                       (const char *) msg);
}


/* Rule by rule at start s < len, each within its window: those whose
 * match may begin with b[s], in file order (the others cannot match
 * there, nor partially). */
static int
kvs_guard_at(const kvs_guard_t *g, pcre2_match_data *md,
    const unsigned char *b, size_t len, size_t s, int final,
    kvs_gfound_t *f, kvs_err_t *err)
{
    int          rc;
    size_t       i, k, lim, sub;
    uint32_t     opts;
    PCRE2_SIZE  *ov;

    for (k = g->cand_off[b[s]]; k < g->cand_off[b[s] + 1]; k++) {
        i = g->cand[k];
        lim = s + g->rules[i].window;
        opts = PCRE2_NOTEMPTY;

        if (lim < len || (lim == len && !final)) {
            sub = lim;
            opts |= PCRE2_NOTEOL;

        } else {
            sub = len;
            opts |= final ? 0 : PCRE2_PARTIAL_HARD;
        }

        rc = pcre2_match(g->one[i], b, sub, s, opts, md, g->mctx);

        /* at an invalid byte PCRE2 anchors at the next valid character:
         * nothing at s (the search finds that one itself) */
        if (rc == PCRE2_ERROR_NOMATCH
            || ((rc >= 0 || rc == PCRE2_ERROR_PARTIAL)
                && pcre2_get_ovector_pointer(md)[0] != s))
        {
            continue;
        }

        if (rc == PCRE2_ERROR_PARTIAL) {
            f->kind = KVS_GF_PARTIAL;
            f->start = s;
            return KVS_OK;
        }

        if (rc < 0) {
            return kvs_guard_limit(err, rc);
        }

        ov = pcre2_get_ovector_pointer(md);
        f->kind = KVS_GF_MATCH;
        f->rule = (uint32_t) i;
        f->start = s;
        f->end = ov[1];
        return KVS_OK;
    }

    f->kind = KVS_GF_NONE;

    return KVS_OK;
}


/* The leftmost match, or partial match, from pos. */
static int
kvs_guard_next(const kvs_guard_t *g, pcre2_match_data *md,
    const unsigned char *b, size_t len, size_t pos, int final,
    kvs_gfound_t *f, kvs_err_t *err)
{
    int     rc;
    size_t  s;

    for (s = pos; s < len; s++) {
        if (g->cand_off[b[s]] == g->cand_off[b[s] + 1]) {
            continue;
        }

        rc = kvs_guard_at(g, md, b, len, s, final, f, err);
        if (rc != KVS_OK || f->kind != KVS_GF_NONE) {
            return rc;
        }
    }

    f->kind = KVS_GF_NONE;

    return KVS_OK;
}


int
kvs_guard_check(const kvs_guard_t *g, const char *text, size_t len,
    int32_t *rule, kvs_err_t *err)
{
    int                rc;
    kvs_gfound_t       f;
    pcre2_match_data  *md;

    *rule = -1;

    md = pcre2_match_data_create(g->n_pairs, NULL);
    if (md == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    rc = kvs_guard_next(g, md, (const unsigned char *) (text ? text : ""),
                        len, 0, 1, &f, err);

    if (rc == KVS_OK && f.kind == KVS_GF_MATCH) {
        *rule = (int32_t) f.rule;
    }

    pcre2_match_data_free(md);

    return rc;
}


/* ---- streams ------------------------------------------------------------ */

int
kvs_guard_stream_init(kvs_guard_stream_t *s, const kvs_guard_t *g,
    kvs_guard_mode_t mode, kvs_guard_hit_pt hit, void *data,
    kvs_err_t *err)
{
    memset(s, 0, sizeof(*s));

    s->g = g;
    s->mode = mode;
    s->hit = hit;
    s->hit_data = data;
    s->stopped = -1;
    s->cap = KVS_GUARD_CTX + g->window - 1 + KVS_GUARD_SLICE;
    s->buf = malloc(s->cap);
    s->md = pcre2_match_data_create(g->n_pairs, NULL);

    if (s->buf == NULL || s->md == NULL) {
        kvs_guard_stream_free(s);
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    return KVS_OK;
}


void
kvs_guard_stream_free(kvs_guard_stream_t *s)
{
    free(s->buf);
    pcre2_match_data_free(s->md);
    s->buf = NULL;
    s->md = NULL;
}


size_t
kvs_guard_held(const kvs_guard_stream_t *s)
{
    return s->len - s->pos;
}


static int
kvs_guard_emit(kvs_buf_t *out, const unsigned char *p, size_t n,
    kvs_err_t *err)
{
    if (n > 0 && kvs_buf_append(out, p, n) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    return KVS_OK;
}


/* Decides what can be decided in the buffer, emits it, keeps the held
 * text and KVS_GUARD_CTX bytes before it. */
/* Bytes at the end of b[len] that begin a UTF-8 character the next
 * chunk completes: PCRE2 takes them for invalid, so they wait. */
static size_t
kvs_guard_cut_char(const unsigned char *b, size_t len)
{
    size_t  k, need;

    for (k = 1; k <= 3 && k <= len; k++) {
        if ((b[len - k] & 0xc0) != 0x80) {
            need = b[len - k] >= 0xf0 && b[len - k] <= 0xf4 ? 4
                   : b[len - k] >= 0xe0 && b[len - k] <= 0xef ? 3
                   : b[len - k] >= 0xc2 && b[len - k] <= 0xdf ? 2 : 0;
            return need > k ? k : 0;
        }
    }

    return 0;
}


static int
kvs_guard_scan(kvs_guard_stream_t *s, int final, kvs_buf_t *out,
    kvs_err_t *err)
{
    int           rc;
    size_t        from, end;
    kvs_gfound_t  f;

    rc = KVS_OK;
    end = s->len - (final ? 0 : kvs_guard_cut_char(s->buf, s->len));

    while (s->pos < end && s->stopped < 0) {
        rc = kvs_guard_next(s->g, s->md, s->buf, end, s->pos, final, &f,
                            err);
        if (rc != KVS_OK) {
            break;
        }

        if (f.kind == KVS_GF_NONE) {
            rc = kvs_guard_emit(out, s->buf + s->pos, end - s->pos, err);
            s->pos = end;
            break;
        }

        rc = kvs_guard_emit(out, s->buf + s->pos, f.start - s->pos, err);
        s->pos = f.start;

        if (rc != KVS_OK || f.kind == KVS_GF_PARTIAL) {
            break;
        }

        s->n_hits++;
        if (s->hit != NULL) {
            s->hit(s->hit_data, f.rule);
        }

        if (s->mode == KVS_GUARD_STOP) {
            s->stopped = (int32_t) f.rule;
            s->pos = s->len;
            break;
        }

        rc = kvs_guard_emit(out, (const unsigned char *) KVS_GUARD_MARK,
                            sizeof(KVS_GUARD_MARK) - 1, err);
        s->pos = f.end;

        if (rc != KVS_OK) {
            break;
        }
    }

    if (s->len - s->pos > s->max_hold) {
        s->max_hold = s->len - s->pos;
    }

    from = s->pos > KVS_GUARD_CTX ? s->pos - KVS_GUARD_CTX : 0;
    memmove(s->buf, s->buf + from, s->len - from);
    s->len -= from;
    s->pos -= from;

    return rc;
}


int
kvs_guard_feed(kvs_guard_stream_t *s, const char *p, size_t n,
    kvs_buf_t *out, kvs_err_t *err)
{
    int     rc;
    size_t  k;

    while (n > 0 && s->stopped < 0) {
        k = s->cap - s->len;
        k = k < n ? k : n;

        memcpy(s->buf + s->len, p, k);
        s->len += k;
        s->seen += k;
        p += k;
        n -= k;

        rc = kvs_guard_scan(s, 0, out, err);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}


int
kvs_guard_end(kvs_guard_stream_t *s, kvs_buf_t *out, kvs_err_t *err)
{
    return kvs_guard_scan(s, 1, out, err);
}
