/*
 * kvs_gram_reamb: how many parses a "pattern" regex can keep open at
 * once, estimated while kvs_gram_regex.c compiles it, so that a regex
 * whose matcher would hold thousands of stacks at every byte is refused
 * at compile time (a 400 naming the pattern) instead of making every
 * mask of the request walk the vocabulary once per stack on the engine
 * thread that all requests share (docs/grammar.md, "Ambiguous
 * schemas and patterns").
 *
 * Why the count grows: a counted repeat X{m,n} is compiled as n copies
 * of X's positions, and the matcher's stacks are positions.  When the
 * text does not tell where one iteration ends and the next begins (a
 * byte that may continue X at a point where X may end also begins X:
 * "a" in (a{1,60}){1,60}, or X may match the empty text), every split of
 * the text is a stack of its own, up to all of the repeat's positions
 * (and where X may match the empty text, at every byte):
 * 60 x 60 for that pattern, which took 10-60 ms a mask on a 128k
 * vocabulary.  Where every iteration's end is clear ((\d{1,3}\.){3},
 * ([A-Z][a-z]* ?){1,10}), a repeat adds no parses.
 *
 * The estimate is over code points: sets of code points 0-127, and one
 * bit for every code point above (so two non-ASCII sets are taken to
 * overlap: more estimates high, none low).  It owns no memory.
 *
 * Invariants: parses >= 1 for anything that matches a code point;
 * lengths, positions and parses saturate at KVS_RE_SAT (an unbounded
 * length is KVS_RE_SAT); an info is built only by these functions,
 * bottom up as the regex is parsed.
 */

#include <stdio.h>
#include <string.h>

#include "grammar/kvs_gram_schema_impl.h"

#define KVS_RE_SAT   (1ull << 40)


static uint64_t
kvs_re_sat_add(uint64_t a, uint64_t b)
{
    return a + b > KVS_RE_SAT ? KVS_RE_SAT : a + b;
}


static uint64_t
kvs_re_sat_mul(uint64_t a, uint64_t b)
{
    if (a == 0 || b == 0) {
        return 0;
    }

    return a > KVS_RE_SAT / b ? KVS_RE_SAT : a * b;
}


static void
kvs_re_cp_or(uint64_t *d, const uint64_t *s)
{
    d[0] |= s[0];
    d[1] |= s[1];
    d[2] |= s[2];
}


static int
kvs_re_cp_meet(const uint64_t *a, const uint64_t *b)
{
    return ((a[0] & b[0]) | (a[1] & b[1]) | (a[2] & b[2])) != 0;
}


void
kvs_re_info_empty(kvs_re_info_t *x)
{
    memset(x, 0, sizeof(*x));
}


void
kvs_re_info_cps(kvs_re_info_t *x, uint32_t lo, uint32_t hi)
{
    uint32_t  c;

    if (lo > 127) {
        x->first[2] |= 1;
        return;
    }

    for (c = lo; c <= hi && c <= 127; c++) {
        x->first[c >> 6] |= 1ull << (c & 63);
    }

    if (hi > 127) {
        x->first[2] |= 1;
    }
}


/* after kvs_re_info_empty and the set's kvs_re_info_cps: one code point */
void
kvs_re_info_atom(kvs_re_info_t *x)
{
    x->minl = 1;
    x->maxl = 1;
    x->positions = 1;
    x->parses = 1;
}


/* acc = acc followed by b */
void
kvs_re_info_concat(kvs_re_info_t *acc, const kvs_re_info_t *b)
{
    int            split;
    kvs_re_info_t  a;

    a = *acc;

    /* a point where a may end and go on is also one where b may begin */
    split = a.minl != a.maxl && kvs_re_cp_meet(a.cont, b->first);

    if (a.minl == 0) {
        kvs_re_cp_or(acc->first, b->first);
    }

    kvs_re_cp_or(acc->inner, b->inner);
    if (a.maxl > 0) {
        kvs_re_cp_or(acc->inner, b->first);
    }

    memcpy(acc->cont, b->cont, sizeof(acc->cont));
    if (b->minl == 0) {
        kvs_re_cp_or(acc->cont, a.cont);
        kvs_re_cp_or(acc->cont, b->first);
    }

    acc->minl = kvs_re_sat_add(a.minl, b->minl);
    acc->maxl = kvs_re_sat_add(a.maxl, b->maxl);
    acc->positions = kvs_re_sat_add(a.positions, b->positions);
    acc->parses = split ? kvs_re_sat_add(a.parses, b->parses)
                        : (a.parses > b->parses ? a.parses : b->parses);
}


/* acc = acc | b; `first` says acc is b alone so far */
void
kvs_re_info_alt(kvs_re_info_t *acc, const kvs_re_info_t *b, int first)
{
    int  both;

    if (first) {
        *acc = *b;
        return;
    }

    /* alternatives that begin alike are all open after that byte */
    both = kvs_re_cp_meet(acc->first, b->first);

    kvs_re_cp_or(acc->first, b->first);
    kvs_re_cp_or(acc->inner, b->inner);
    kvs_re_cp_or(acc->cont, b->cont);

    /* of "a|aa", the end of "a" is inside "aa": whatever may come inside
     * one alternative may go on from another's end */
    if (acc->minl != b->minl || acc->maxl != b->maxl
        || acc->minl != acc->maxl)
    {
        kvs_re_cp_or(acc->cont, acc->inner);
    }

    acc->minl = acc->minl < b->minl ? acc->minl : b->minl;
    acc->maxl = acc->maxl > b->maxl ? acc->maxl : b->maxl;
    acc->positions = kvs_re_sat_add(acc->positions, b->positions);
    acc->parses = both ? kvs_re_sat_add(acc->parses, b->parses)
                       : (acc->parses > b->parses ? acc->parses
                                                  : b->parses);
}


/* x = x{min,max} (max UINT32_MAX: no bound).  KVS_EUNSUPPORTED with a
 * reason in why[] when the repeat could keep more than max_parses
 * parses open, x unchanged then (max_parses UINT64_MAX: never). */
int
kvs_re_info_repeat(kvs_re_info_t *x, uint32_t min, uint32_t max,
    uint64_t max_parses, char *why, size_t why_len)
{
    int       loops, split;
    uint64_t  copies, parses;

    /* one iteration or none: a copy of x, optional */
    loops = max >= 2;

    /* an end of an iteration where the next byte may also begin one, or
     * an iteration that may take nothing at all */
    split = loops && (x->minl == 0 || kvs_re_cp_meet(x->cont, x->first));

    /* an unbounded repeat's tail is one copy looping on itself */
    copies = max == UINT32_MAX ? (uint64_t) min + 1 : max;
    parses = split ? kvs_re_sat_mul(copies, x->positions) : x->parses;

    if (parses > max_parses) {
        snprintf(why, why_len, "can split the same text into iterations "
                 "in up to %llu ways at once (more than %llu): a repeat "
                 "whose iterations' ends the text does not tell apart, "
                 "such as (a{1,60}){1,60}; write it unnested, e.g. "
                 "a{1,3600}", (unsigned long long) parses,
                 (unsigned long long) max_parses);
        return KVS_EUNSUPPORTED;
    }

    if (max > min) {
        kvs_re_cp_or(x->cont, x->first);
    }
    if (loops) {
        kvs_re_cp_or(x->inner, x->first);
    }

    x->minl = kvs_re_sat_mul(x->minl, min);
    x->maxl = max == UINT32_MAX ? KVS_RE_SAT : kvs_re_sat_mul(x->maxl, max);
    x->positions = kvs_re_sat_mul(copies, x->positions);
    x->parses = parses;

    if (max == 0) {
        kvs_re_info_empty(x);
    }

    return KVS_OK;
}
