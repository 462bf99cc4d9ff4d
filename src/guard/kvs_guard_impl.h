/*
 * kvs_guard_impl: the compiled set, shared by kvs_guard's files only.
 *
 * Invariants: all[] is one alternation of every rule, each wrapped in a
 * capture group (rule i's is group grp[i]); one[i] is rule i alone, for
 * deciding at one start within its window; both are compiled with
 * PCRE2_UTF | PCRE2_MATCH_INVALID_UTF and JIT (complete and partial
 * hard).  Nothing changes once kvs_guard_compile returned.
 */

#ifndef KVS_GUARD_IMPL_H
#define KVS_GUARD_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "kvs_guard.h"

struct kvs_guard_s {
    kvs_guard_rule_t       *rules;    /* [n] */
    pcre2_code             **one;     /* [n] */
    uint32_t               *grp;      /* [n] */
    size_t                  n;
    pcre2_code             *all;
    uint32_t                n_pairs;  /* all's ovector pairs */
    uint32_t                window;   /* W_max */
    uint32_t                window_min;  /* the smallest W */
    pcre2_match_context    *mctx;     /* its match limit */
};

#define KVS_GUARD_COMPILE  (PCRE2_UTF | PCRE2_MATCH_INVALID_UTF \
                            | PCRE2_DUPNAMES)
#define KVS_GUARD_MATCH_LIMIT  1000000

#endif /* KVS_GUARD_IMPL_H */
