/*
 * kvs_guard_ref: the guard's definition (src/guard/kvs_guard.h), written
 * naively for the tests and the fuzz target: for every start from the
 * left, every rule in file order, each compiled here on its own and
 * matched anchored within its window over the whole text; the first
 * that matches is the match.  Redact replaces it with the marker and
 * goes on at its end; stop keeps the text before it.  No partial
 * matching, no alternation, no buffer: what a stream must equal.
 */

#ifndef KVS_GUARD_REF_H
#define KVS_GUARD_REF_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_buf.h"
#include "guard/kvs_guard.h"

typedef struct {
    pcre2_code  *code[64];
    uint32_t     window[64];
    size_t       n;
} kvs_guard_ref_t;


/* pats[i]: rule i's pattern as in the file; g: the compiled set (its
 * windows).  0 on success. */
static inline int
kvs_guard_ref_init(kvs_guard_ref_t *ref, const kvs_guard_t *g,
    const char *const *pats, size_t n)
{
    int     ec;
    size_t  i, eo;

    memset(ref, 0, sizeof(*ref));

    for (i = 0; i < n && i < 64; i++) {
        ref->code[i] = pcre2_compile((PCRE2_SPTR) pats[i],
                                     PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF | PCRE2_MATCH_INVALID_UTF,
                                     &ec, &eo, NULL);
        if (ref->code[i] == NULL) {
            return -1;
        }
        ref->window[i] = kvs_guard_rule(g, i)->window;
        ref->n++;
    }

    return 0;
}


static inline void
kvs_guard_ref_free(kvs_guard_ref_t *ref)
{
    size_t  i;

    for (i = 0; i < ref->n; i++) {
        pcre2_code_free(ref->code[i]);
    }
}


/* The output for mode over text[len]; hits[] the rules matched, in
 * order (*n_hits of them, at most max_hits recorded). */
static inline void
kvs_guard_ref_run(const kvs_guard_ref_t *ref, kvs_guard_mode_t mode,
    const char *text, size_t len, kvs_buf_t *out, uint32_t *hits,
    size_t max_hits, size_t *n_hits)
{
    int                rc;
    size_t             pos, s, i, lim, end;
    uint32_t           opts;
    pcre2_match_data  *md;

    md = pcre2_match_data_create(64, NULL);
    *n_hits = 0;
    pos = 0;

    for (s = 0; s <= len; s++) {
        if (s < pos) {
            continue;
        }

        for (i = 0; i < ref->n; i++) {
            lim = s + ref->window[i];
            opts = PCRE2_ANCHORED | PCRE2_NOTEMPTY;
            if (lim < len) {
                opts |= PCRE2_NOTEOL;
            }
            rc = pcre2_match(ref->code[i], (PCRE2_SPTR) text,
                             lim < len ? lim : len, s, opts, md, NULL);
            /* at an invalid byte PCRE2 anchors at the next valid
             * character: not a match at s */
            if (rc >= 0 && pcre2_get_ovector_pointer(md)[0] == s) {
                break;
            }
        }

        if (i == ref->n) {
            continue;
        }

        end = pcre2_get_ovector_pointer(md)[1];
        kvs_buf_append(out, text + pos, s - pos);
        if (*n_hits < max_hits) {
            hits[*n_hits] = (uint32_t) i;
        }
        (*n_hits)++;

        if (mode == KVS_GUARD_STOP) {
            pcre2_match_data_free(md);
            return;
        }

        kvs_buf_append(out, KVS_GUARD_MARK, sizeof(KVS_GUARD_MARK) - 1);
        pos = end;
        s = end - 1;    /* the loop's s++ starts at end */
    }

    kvs_buf_append(out, text + pos, len - pos);
    pcre2_match_data_free(md);
}

#endif /* KVS_GUARD_REF_H */
