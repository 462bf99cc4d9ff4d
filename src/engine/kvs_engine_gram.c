/*
 * kvs_engine_gram: output constraints (response_format, and the tool
 * calls' grammar, KVS_GRAM_REQ_TOOLS, whose messages name the tools spec's
 * fields already) in the engine:
 * the vocabulary's token trie built once at load, the compiled grammars
 * shared through a bounded cache (kvs_gram_req.h), and per constrained
 * sequence a matcher and a masker.
 *
 * Each sampling step of a constrained sequence masks its logits row
 * (-inf for every token the grammar refuses) before the sampler, which
 * is otherwise unchanged: greedy, temperature, top-k, top-p and the
 * seeded draw see the masked row, so a seed gives the same output every
 * time.  The chosen token then advances the matcher.  An END token
 * (EOS, EOT, EOM) is offered only when the grammar is complete, and a
 * sequence whose grammar accepts nothing more ends right after the token
 * that completed it (finish "stop"), without spending a step on EOS.
 *
 * Invariants: h->gram is non-NULL iff the sequence is constrained, and
 * then h->gm and h->gmk are initialised (or zero after a failed setup,
 * which kvs_engine_gram_seq_free handles); the matcher holds exactly the
 * bytes of the tokens appended to the sequence; e->gbits is the engine
 * thread's alone.  A constrained step always samples on the host (the
 * device sampler has no mask), and the KV cache and prefix cache never
 * see the grammar: it changes which token is chosen, not how one is
 * computed.
 */

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_clock.h"
#include "kvs_engine_impl.h"

/* per sequence: the states whose masks are kept (a mask is n_vocab bits:
 * 16 KiB at 128K tokens); per grammar: the context-independent entries,
 * shared by its sequences, their builds' memo, the long tokens'
 * classifications and its class runs' trie levels (so 256 x 19.5 KiB
 * with their lists of words, plus 1.55 MiB, 88 KiB and at most 514 KiB:
 * 7 MiB at 128K tokens, counted in the grammar cache's byte bound: 9
 * such grammars in its 64 MiB, 13 before the memo).
 * 256, not 64: a tool-call or API schema meets ~100-200 distinct keys
 * (bench_grammar's search_tool: 192), and a table smaller than that
 * evicts round robin and rebuilds, each a walk of the vocabulary trie */
#define KVS_ENGINE_GRAM_CACHE   16
#define KVS_ENGINE_GRAM_TABLE   256
#define KVS_ENGINE_GRAM_NODES   (1u << 20)

/* a mask walks the vocabulary trie once per open parse whose next byte
 * may be most bytes (a free string's, a broad class's) and whose top is
 * its own; a schema whose anyOf branches all begin alike keeps one such
 * parse per branch (200 strings of another minLength each: 1.1-1.7 s a
 * mask on Llama 3's vocabulary, at every token, on the thread every
 * request shares; 10 objects whose first key is the same free string
 * share one top: 0.3 ms).  Past this many tops the request ends
 * (docs/grammar.md, "Ambiguous schemas and patterns"); a pattern's own
 * are bounded at compile time (kvs_gram_reamb.c: 16) */
#define KVS_ENGINE_GRAM_BROAD        32
#define KVS_ENGINE_GRAM_BROAD_BYTES  16


int
kvs_engine_gram_new(kvs_engine_t *e, kvs_err_t *err)
{
    int        rc;
    size_t     words;
    uint64_t   t0;
    kvs_err_t  gerr;

    rc = kvs_gram_cache_init(&e->gcache, 0, 0, err);
    if (rc != KVS_OK) {
        return rc;
    }

    /* a table entry's bits, and the list of its nonzero words when it
     * keeps one (kvs_gram_ind.c's seal) */
    words = ((size_t) e->be->n_vocab + 31) / 32;
    e->gcache.entry_extra = (size_t) KVS_ENGINE_GRAM_TABLE
                            * (words * 4
                               + (words / KVS_GRAM_SPARSE_DIV + 1) * 8)
                            + kvs_gram_memo_bytes(KVS_GRAM_TABLE_MEMO_STATES)
                            + kvs_gram_long_bytes()
                            + kvs_gram_run_bytes();
    e->gbits = calloc(((size_t) e->be->n_vocab + 31) / 32, sizeof(uint32_t));
    e->gids = malloc((size_t) e->be->n_vocab * sizeof(int32_t));
    if (e->gbits == NULL || e->gids == NULL) {
        free(e->gbits);
        free(e->gids);
        e->gbits = NULL;
        e->gids = NULL;
        kvs_gram_cache_free(&e->gcache);
        return kvs_err_set(err, KVS_ENOMEM, "engine: out of memory for "
                           "the grammar mask");
    }

    /* a vocabulary the trie cannot be built for serves unconstrained
     * requests still; constrained ones are refused with the reason */
    t0 = kvs_now_ns();
    kvs_err_clear(&gerr);

    if (kvs_gram_vocab_from_vocab(&e->gv, e->conf.vocab, &gerr) != KVS_OK) {
        e->gv = NULL;
        snprintf(e->gv_why, sizeof(e->gv_why), "%s", gerr.msg);
    }

    e->gv_ns = kvs_now_ns() - t0;

    return KVS_OK;
}


void
kvs_engine_gram_free(kvs_engine_t *e)
{
    /* the tables first: their entries may be the vocabulary's slices */
    kvs_gram_cache_free(&e->gcache);
    kvs_gram_vocab_free(e->gv);
    e->gv = NULL;
    free(e->gbits);
    e->gbits = NULL;
    free(e->gids);
    e->gids = NULL;
}


/* "properties.a.format: ..." as the client's path ("schema: ..." is the
 * compile's own message about the whole schema) */
static void
kvs_engine_gram_path(kvs_err_t *err)
{
    char  msg[KVS_ERR_MSG_LEN];

    snprintf(msg, sizeof(msg), "%s", err->msg);

    if (strncmp(msg, "schema: ", 8) == 0) {
        snprintf(err->msg, sizeof(err->msg), "response_format.json_schema."
                 "%.280s", msg);
        return;
    }

    snprintf(err->msg, sizeof(err->msg), "response_format.json_schema."
             "schema.%.280s", msg);
}


int
kvs_engine_gram_setup(kvs_engine_t *e, kvs_engine_seq_t *h,
    const kvs_engine_req_t *req, kvs_err_t *err)
{
    int                 rc;
    const char         *what;
    kvs_gram_mlimits_t  ml;

    if (req->gram_kind == KVS_GRAM_REQ_NONE) {
        return KVS_OK;
    }

    if (req->gram_kind > KVS_GRAM_REQ_KIND_MAX) {
        return kvs_err_set(err, KVS_EINVAL, "response_format: constraint "
                           "kind %u is unknown", req->gram_kind);
    }

    /* a stop string could cut the output before the grammar is complete
     * (invalid JSON): the API refuses the pair, and so does the engine */
    what = req->gram_kind == KVS_GRAM_REQ_TOOLS ? "tools"
                                                : "response_format";

    if (req->n_stop > 0) {
        return kvs_err_set(err, KVS_EINVAL, "stop: stop strings cannot be "
                           "combined with %s", req->gram_kind
                           == KVS_GRAM_REQ_TOOLS ? "tool calls' grammar"
                           : "response_format json_object or json_schema");
    }

    if ((req->gram_kind == KVS_GRAM_REQ_SCHEMA
         || req->gram_kind == KVS_GRAM_REQ_TOOLS)
        && (req->schema == NULL || req->schema_len == 0
            || req->schema_len > KVS_GRAM_REQ_MAX_SCHEMA))
    {
        return kvs_err_set(err, KVS_EINVAL, "%s: schema of %zu bytes; "
                           "expected 1..%u", what, req->schema_len,
                           KVS_GRAM_REQ_MAX_SCHEMA);
    }

    if (e->gv == NULL) {
        return kvs_err_set(err, KVS_EUNSUPPORTED, "%s: this model's "
                           "vocabulary has no token trie (%s)", what,
                           e->gv_why);
    }

    rc = kvs_gram_cache_get(&e->gcache, req->gram_kind, req->schema,
                            req->schema_len, &h->gram, err);
    if (rc != KVS_OK) {
        /* the worker compiled it already: only a worker of another build
         * gets here, and the path still names the keyword */
        if (err != NULL && rc != KVS_ENOMEM
            && req->gram_kind != KVS_GRAM_REQ_TOOLS)
        {
            kvs_engine_gram_path(err);
        }
        h->gram = NULL;
        return rc;
    }

    h->gcache = &e->gcache;

    memset(&ml, 0, sizeof(ml));
    ml.max_nodes = KVS_ENGINE_GRAM_NODES;

    rc = kvs_gram_matcher_init(&h->gm, kvs_gram_cached_gram(h->gram), &ml,
                               err);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_gram_masker_init(&h->gmk, e->gv, &h->gm, KVS_ENGINE_GRAM_CACHE,
                              err);
    if (rc != KVS_OK) {
        return rc;
    }

    /* under the bound above, a mask may still cost up to 32 walks of
     * the vocabulary: its work is bounded too (docs/grammar.md, "A
     * mask's work budget") */
    kvs_gram_masker_budget(&h->gmk, kvs_gram_work_budget(e->gv));

    return KVS_OK;
}


void
kvs_engine_gram_seq_free(kvs_engine_seq_t *h)
{
    if (h->gram == NULL) {
        return;
    }

    kvs_gram_masker_free(&h->gmk);
    kvs_gram_matcher_free(&h->gm);
    kvs_gram_cache_put(h->gcache, h->gram);
    h->gram = NULL;
}


int
kvs_engine_gram_mask(kvs_engine_t *e, kvs_engine_seq_t *h, float *logits,
    uint32_t *n_ids, kvs_err_t *err)
{
    int                 rc;
    uint32_t            i, n, nt, w, word, m;
    uint32_t           *bits;
    kvs_gram_masker_t  *table;

    bits = e->gbits;
    n = e->be->n_vocab;
    nt = e->gv->n_tokens < n ? e->gv->n_tokens : n;

    /* the grammar's shared table, attached here on the engine thread:
     * only this thread masks with it (its first request warms it:
     * kvs_gram_cached_table) */
    if (!h->gshared) {
        rc = kvs_gram_cached_table(h->gram, e->gv, KVS_ENGINE_GRAM_TABLE,
                                   &h->gm.lim, &table, err);
        if (rc != KVS_OK) {
            return rc;
        }
        kvs_gram_masker_share(&h->gmk, table);
        h->gshared = 1;
    }

    /* counted only where the frontier could hold that many at all */
    if (h->gm.lv[h->gm.n_lv - 1].n_front > KVS_ENGINE_GRAM_BROAD) {
        if (kvs_gram_matcher_broad(&h->gm, KVS_ENGINE_GRAM_BROAD_BYTES,
                                   KVS_ENGINE_GRAM_BROAD)
            > KVS_ENGINE_GRAM_BROAD)
        {
            h->client_fault = 1;
            return kvs_err_set(err, KVS_ETOOLONG, "the output's grammar "
                               "holds more than %u parses open at once that "
                               "may each take most bytes next ("
                               "anyOf branches that begin alike, or an "
                               "ambiguous pattern); each would cost a walk "
                               "of the vocabulary at every token. Make the "
                               "branches differ earlier or simplify the "
                               "schema.", KVS_ENGINE_GRAM_BROAD);
        }
    }

    rc = kvs_gram_mask(&h->gmk, bits, err);
    if (rc != KVS_OK && kvs_gram_work_over(&h->gmk.work)) {
        h->client_fault = 1;
        return kvs_err_set(err, KVS_ETOOLONG, "the output's grammar took "
                           "more work for one token than %d walks of the "
                           "vocabulary (parses kept open at once: anyOf "
                           "branches that begin alike, or an ambiguous "
                           "pattern); each token would stall every "
                           "request. Make the branches differ earlier or "
                           "simplify the schema.", KVS_GRAM_WORK_WALKS);
    }
    if (rc != KVS_OK) {
        return rc;
    }

    /* the request's extra stop tokens end the output: only where the
     * grammar may end (a text token among them would cut it short) */
    if (!kvs_gram_matcher_can_end(&h->gm)) {
        for (i = 0; i < h->n_stop_ids; i++) {
            if ((uint32_t) h->stop_ids[i] < nt) {
                bits[h->stop_ids[i] >> 5] &= ~(1u << (h->stop_ids[i] & 31));
            }
        }
    }

    /* a word at a time: most words of a mask are all set or all clear;
     * the allowed ids are listed in increasing order as they go by */
    w = (nt + 31) / 32;
    m = 0;

    for (i = 0; i < w; i++) {
        word = bits[i];

        if (i == w - 1 && (nt & 31) != 0) {
            word &= (1u << (nt & 31)) - 1;
            bits[i] = word;
        }

        for (n = word; n != 0; n &= n - 1) {
            e->gids[m++] = (int32_t) (i * 32 + (uint32_t) __builtin_ctz(n));
        }

        if (word == 0xffffffffu) {
            continue;
        }

        if (word == 0) {
            logits[i * 32 + 0] = -INFINITY;
            for (n = 1; n < 32 && i * 32 + n < nt; n++) {
                logits[i * 32 + n] = -INFINITY;
            }
            continue;
        }

        for (n = 0; n < 32 && i * 32 + n < nt; n++) {
            if (!(word & (1u << n))) {
                logits[i * 32 + n] = -INFINITY;
            }
        }
    }

    /* ids past the trie's vocabulary (none when the sizes agree) */
    for (i = nt; i < e->be->n_vocab; i++) {
        logits[i] = -INFINITY;
    }

    *n_ids = m;

    return KVS_OK;
}


int32_t
kvs_engine_gram_fix(kvs_engine_t *e, const float *row, int32_t tok)
{
    uint32_t  i, nt;
    int32_t   best;

    nt = e->gv->n_tokens < e->be->n_vocab ? e->gv->n_tokens
                                          : e->be->n_vocab;

    if (tok >= 0 && (uint32_t) tok < nt
        && (e->gbits[tok >> 5] >> (tok & 31)) & 1)
    {
        return tok;
    }

    /* the draw's float sum fell short of the coin and it took the last
     * id: take the likeliest allowed token instead, deterministically */
    best = -1;

    for (i = 0; i < nt; i++) {
        if (((e->gbits[i >> 5] >> (i & 31)) & 1)
            && (best < 0 || row[i] > row[best]))
        {
            best = (int32_t) i;
        }
    }

    return best;
}


int
kvs_engine_gram_accept(kvs_engine_t *e, kvs_engine_seq_t *h, int32_t tok,
    int *end, kvs_err_t *err)
{
    int  rc;

    *end = 0;

    if (e->gv->kind[tok] == KVS_GRAM_TOK_END) {
        if (!kvs_gram_matcher_can_end(&h->gm)) {
            return kvs_err_set(err, KVS_EINVAL, "response_format: token %"
                               PRId32 " ends the output before the grammar "
                               "is complete", tok);
        }

        *end = 1;
        return KVS_OK;
    }

    rc = kvs_gram_accept_token(&h->gm, e->gv, tok, err);
    if (rc != KVS_OK) {
        return rc;
    }

    *end = kvs_gram_matcher_must_end(&h->gm) ? 2 : 0;

    return KVS_OK;
}
