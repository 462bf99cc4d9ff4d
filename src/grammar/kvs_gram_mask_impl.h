/*
 * kvs_gram_mask_impl: what the token mask's two files share
 * (kvs_gram_mask.c: the masker, its cache of masks by matcher state,
 * the plain walk and the mask as a union of entries; kvs_gram_ind.c:
 * the context-independent entries, their table and the merged check of
 * their dependent tokens).  Internal to src/grammar.
 *
 * kvs_gram_ientry_t's fields and invariants are kvs_gram_ind.c's (its
 * opening comment); kvs_gram_mask.c reads an entry's bits, ranges and
 * flags to make a mask from it, and never writes them.
 */

#ifndef KVS_GRAM_MASK_IMPL_H
#define KVS_GRAM_MASK_IMPL_H

#include "grammar/kvs_grammar.h"


/* A context-independent entry: for stacks whose top KVS_GRAM_CUT
 * positions are key, the tokens accepted whatever lies below, and the
 * ranges of sorted tokens (ids[lo .. hi)) that depend on it. */
struct kvs_gram_ientry_s {
    uint32_t   key[KVS_GRAM_CUT];     /* top positions, NIL-padded */
    uint32_t   used;                  /* 0: a free slot */
    uint64_t   stamp;                 /* the mask that last used it */
    uint64_t   hash;
    uint32_t  *bits;                  /* [words] accepted */
    uint32_t  *sparse;                /* [2 * n_sparse] (word index, word)
                                         of bits' nonzero words when they
                                         are few (kvs_gram_ind_seal), so
                                         a mask ORs those alone; NULL:
                                         read bits whole */
    uint32_t   n_sparse;
    uint32_t   some;                  /* 1: bits has a token */
    uint32_t  *ranges;                /* [2 * n_ranges] */
    uint32_t   n_ranges, cap_ranges;
    uint32_t   capped;                /* its build met a matcher cap */
    uint32_t   low;                   /* a low tier's key: the long
                                         tokens are all dependent */
    uint32_t   lent;                  /* bits and ranges are a vocabulary
                                         slice's (kvs_gram_slice.c), which
                                         outlives the table: read only,
                                         never freed here */
    uint32_t  *rest;                  /* [2 * n_rest] the ranges less the
                                         vocabulary's exit tokens, made on
                                         an exit mask's first use
                                         (kvs_gram_exit_rest); the slot's
                                         own, lent or not */
    uint32_t   n_rest;
    uint32_t   rest_made;             /* 0: not yet; 1: rest; 2: none
                                         kept, ranges are read */
};


/* An entry's memory freed and the slot zeroed (a free slot again). */
void kvs_gram_ind_free(kvs_gram_ientry_t *e);

/* The table's index by key hash made for its cap_ind entries (KVS_ENOMEM:
 * none), emptied, and freed. */
int kvs_gram_ind_index(kvs_gram_masker_t *mk);
void kvs_gram_ind_unindex_all(kvs_gram_masker_t *mk);

/* The key of a stack's top positions t into key (counted positions named
 * by a canonical copy); 1 if its entry is a low tier's.  kvs_gram_ind_name
 * with low_tier 0 leaves the low tier's counts as they are (the long
 * tokens' walks, kvs_gram_long.c). */
int kvs_gram_ind_key(const kvs_gram_masker_t *mk, const uint32_t *t,
    uint32_t *key);
int kvs_gram_ind_name(const kvs_gram_masker_t *mk, const uint32_t *t,
    uint32_t *key, int low_tier);

/* key (as kvs_gram_ind_key names it) with each counted position below
 * `below` copies and its family's keyed count (max_len + 1, rep_low or
 * the family's largest) named by the member at that count, in src; the
 * smallest count so renamed (0: none).  The two keys' cut walks
 * classify alike, and two stacks of the two keys over one node below
 * take alike, every token shorter than it (kvs_gram_rep.c's argument). */
uint32_t kvs_gram_ind_src(const kvs_gram_masker_t *mk, const uint32_t *key,
    uint32_t below, uint32_t *src);

/* The entry of the stack whose top positions are t0, found in the
 * masker's table (or its owner's) or built there; KVS_ETOOLONG when the
 * table has no slot this mask does not hold, or the work bound ran out. */
int kvs_gram_ind_get(kvs_gram_masker_t *mk, const uint32_t *t0,
    kvs_gram_ientry_t **out, kvs_err_t *err);

/* The table's entry of key t (as kvs_gram_ind_key names it) if it holds
 * one (stamped and counted a hit, as a mask's lookup), else NULL with
 * nothing changed: no slice looked up, no walk. */
kvs_gram_ientry_t *kvs_gram_ind_held(kvs_gram_masker_t *mk,
    const uint32_t *t);

/* The same where the table has the entry or a vocabulary slice gives
 * it, with no walk; else KVS_ENOTFOUND and nothing changed but the miss
 * counted (kvs_gram_ind_get's first step, and the warm's first pass,
 * kvs_gram_warm.c). */
int kvs_gram_ind_get_slice(kvs_gram_masker_t *mk, const uint32_t *t0,
    kvs_gram_ientry_t **out);

/* A key's hash; the memo an entry's build steps (the table's when mk
 * shares one, its steps counted in mk's work until the build resets it
 * with kvs_gram_memo_work(mo, NULL); else mk's own). */
uint64_t kvs_gram_tuple_hash(const uint32_t *t);
kvs_gram_memo_t *kvs_gram_ind_memo(kvs_gram_masker_t *mk);

/* The dependent tokens of mk->used[0 .. n_used) checked in one walk
 * through the check memo, the accepted ones set in bits; -1: not done
 * (too few to pay, or no memory: the caller checks them token by
 * token), else 1 if one was accepted. */
int kvs_gram_ind_check_all(kvs_gram_masker_t *mk, uint32_t n_used,
    uint32_t *bits, kvs_err_t *err);


/* kvs_gram_long.c: a mask's long tokens (by index in gv->long_x) that
 * its low-tier stacks accept, and those that depend on the real stacks. */
typedef struct {
    uint32_t  acc[KVS_GRAM_LONG_WORDS];
    uint32_t  dep[KVS_GRAM_LONG_WORDS];
} kvs_gram_lset_t;

/* The classification of the long tokens of lo bytes or more from the
 * stack whose top positions are t (a low tier's key, at its own counts),
 * found in the table's cache or walked there, OR-ed into ls; KVS_ERANGE:
 * its walk met a matcher cap, KVS_ETOOLONG: the work bound ran out (not
 * classified: the caller checks those tokens on the real stacks). */
int kvs_gram_long_get(kvs_gram_masker_t *mk, const uint32_t *t, uint32_t lo,
    kvs_gram_lset_t *ls, kvs_err_t *err);

/* The same by the tokens' characters alone, where t's key is a JSON
 * string's character at its own count (kvs_gram_long.c says when):
 * 1 if it classified them into ls, 0 if the key is not such a one. */
int kvs_gram_long_direct(kvs_gram_masker_t *mk, const uint32_t *t,
    uint32_t lo, kvs_gram_lset_t *ls);

/* What one byte of such a string's character makes at most, per stack:
 * kvs_gram_intern calls and frontier stacks (kvs_gram_long.c). */
#define KVS_GRAM_LONG_STEP  32

/* ls's accepted tokens set in bits (1 if one was); its dependent ones
 * as ranges of sorted positions into r (room for n_long pairs), their
 * number of ranges returned. */
int kvs_gram_long_set(const kvs_gram_masker_t *mk, const kvs_gram_lset_t *ls,
    uint32_t *bits);
uint32_t kvs_gram_long_deps(const kvs_gram_masker_t *mk,
    const kvs_gram_lset_t *ls, uint32_t *r);


/* kvs_gram_exit.c: in a string's state (a free string's, or a bounded
 * one's optional characters), its closing tokens' verdicts set in bits
 * from their tails (1 if one was allowed, 0 if none) and mk->decided
 * pointed at them; -1: not such a state, or not decided so (a cap, the
 * work bound, no memory: the caller checks them as before).  With rec
 * (a verdict fill), the newly allowed ones shorter than len are
 * appended to rec->ids, and rec's front and nodes raised to what their
 * paths could meet; kvs_gram_exits_tokens() bounds how many. */
int kvs_gram_exit_check(kvs_gram_masker_t *mk, uint32_t *bits,
    kvs_gram_vrec_t *rec, uint32_t len);

/* kvs_gram_exit.c: the dependent ranges of e that a check must read
 * now: while a mask's exit tokens are decided (mk->decided), e's ranges
 * less those tokens (made once per entry), else its ranges. */
void kvs_gram_exit_rest(kvs_gram_masker_t *mk, kvs_gram_ientry_t *e,
    const uint32_t **ranges, uint32_t *n_ranges);

/* kvs_gram_run.c: 1 if position p is a reference to x in a copy of a
 * repetition's optional copies with no separator between them (each
 * copy x then the rest, kvs_gram_rep.c), the family's member with c_at
 * copies left in *at. */
int kvs_gram_run_copies(const kvs_gram_t *g, uint32_t p, uint32_t *at);

/* kvs_gram_run.c: for a key at a count of a run of one byte class,
 * the count c (0: not such a key), the key of its family's largest
 * count in src and the class in set[4] (bits by byte); and its entry e
 * (a free slot's, bits and ranges not allocated) made from that key's
 * entry se, which met no cap.  KVS_ENOMEM leaves e for kvs_gram_ind_free. */
uint32_t kvs_gram_run_src(const kvs_gram_masker_t *mk, const uint32_t *key,
    uint32_t *src, uint64_t *set);
int kvs_gram_run_derive(kvs_gram_masker_t *mk, kvs_gram_ientry_t *e,
    const kvs_gram_ientry_t *se, uint32_t c, const uint64_t *set);
/* 1 if key is a run's source or a count taken from it (the warm builds
 * those on an allowance of their own, kvs_gram_warm.c). */
int kvs_gram_run_in(const kvs_gram_masker_t *mk, const uint32_t *key);

/* kvs_gram_run.c: a table's trie levels (kvs_gram_masker_t.rlev) */
typedef struct kvs_gram_rlev_s kvs_gram_rlev_t;
void kvs_gram_run_free(kvs_gram_masker_t *mk);

#endif /* KVS_GRAM_MASK_IMPL_H */
