/*
 * kvs_guard_impl: the compiled set, shared by kvs_guard's files only.
 *
 * Invariants: one[i] is rule i, anchored, for deciding at one start
 * within its window; cand[cand_off[c] .. cand_off[c + 1]) lists, in file
 * order, the rules whose match may begin with byte c (PCRE2's start
 * bitmap of the rule, all of them where it has none); all compiled with
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
    size_t                  n;
    uint32_t                n_pairs;  /* the most ovector pairs a rule
                                         needs */
    uint32_t                window;   /* W_max */
    pcre2_match_context    *mctx;     /* its match limit */
    uint16_t               *cand;     /* rules by first byte */
    uint32_t                cand_off[257];
};

#define KVS_GUARD_COMPILE  (PCRE2_UTF | PCRE2_MATCH_INVALID_UTF \
                            | PCRE2_DUPNAMES)
#define KVS_GUARD_MATCH_LIMIT  1000000

#endif /* KVS_GUARD_IMPL_H */
