/*
 * test_gram_memo: the trie walk's transition memo (kvs_gram_memo.c)
 * changes the time of a mask, never its bits.  Over seeded random token
 * walks through many schemas (t/bench/gram_schemas.json's eleven and a
 * few here with bounded strings, patterns, enums, anyOf and recursion),
 * on a small vocabulary built here and on real ones (GPT-2 and Llama SPM
 * fixtures; the Llama 3 and Qwen2 GGUFs made by `kvserve convert-vocab`
 * at /tmp/llama3.gguf and /tmp/qwen2.gguf, each skipped with its name
 * when absent), every step's mask is computed by maskers that differ only
 * in the memo and must agree bit for bit:
 *
 *   plain       no state cache (a full trie walk), no memo: the reference
 *   memo        no state cache, the default memo
 *   tiny        no state cache, a memo of 3 states (cleared over and
 *               over: the caps' path)
 *   cached      the state cache and context-independent entries (their
 *               cut-stack walks through the memo), default memo
 *   cached-off  the same without a memo
 *   noskip      no state cache, the default memo with subtree skipping
 *               off (every trie node stepped through the memo)
 *   nokeep      as cached, but every entry's walk starts from an empty
 *               memo (kvs_gram_masker_t's nokeep), where "cached" keeps
 *               what one entry's walk learnt for the next ones
 *   checkall    as cached, but every mask's dependent tokens checked in
 *               one walk of their merged ranges through the check memo
 *               (check_memo_min 1; "cached" does so from 4000 tokens)
 *   nocheck     as cached, every dependent token checked on the matcher
 *               one by one (nocheckmemo: the reference for the two)
 *   nofan       no state cache, the default memo with the fan lists off
 *               (kvs_gram_memo_fans: every child of a node read)
 *   cached-nofan as cached, its entries' walks with the fan lists off
 *
 * The walks set their accepted subtrees as ranges at the end, by the
 * complement when those cover most of the text tokens: that path must
 * have been taken on every vocabulary (kvs_gram_memo_inverted), and
 * the check memo's (checks_memo of "checkall").
 *
 * The fan lists (a node's refused children passed by their bytes) must
 * have passed nodes on every vocabulary, and never with them off.
 *
 * Loop skipping (a subtree of byte groups on which the node's state
 * steps back to itself, taken whole) must have taken subtrees, and the
 * cached maskers' walks must have begun on kept states, on the real
 * vocabularies (an email's atext, a uuid's hex digits, the schemas'
 * free strings).
 *
 * and on the small vocabulary the plain mask equals the brute force too.
 * The matcher's caps are exercised as well: before some masks the node
 * cap is set a few nodes above what is alive (and the frontier cap low),
 * where a walk with the memo must refuse exactly what the plain walk
 * refuses.  The memo must also have been used (hits counted), so that a
 * memo never consulted could not pass.
 *
 * Loop regions (a looping state's class taken in runs of trie nodes,
 * only the nodes that leave it stepped) are compared the same way on
 * test_regions's vocabulary, built for them, under every node cap from
 * 1 to 160 above what is alive: regions must have been begun and runs
 * must have taken nodes there and on the real vocabularies.
 *
 * Subtree skipping (the memo takes a subtree whole when it proves every
 * string below it accepted) is compared the same way, and test_skip
 * walks a vocabulary built to trip it: multi-byte UTF-8 of every lead
 * byte's kind, tokens cut mid-character, the surrogate, overlong and
 * out-of-range sequences UTF-8 leaves out, quotes, backslashes, controls
 * and DEL inside long tokens that share prefixes; there skipping must
 * have taken subtrees and refused to take others.
 */

#include <unistd.h>

#include "kvs_test_gwalk.h"


static const char  *tmm_own[] = {
    "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\","
    " \"minLength\": 2, \"maxLength\": 40}, \"n\": {\"type\": \"integer\", "
    "\"minimum\": -3, \"maximum\": 250}}, \"required\": [\"name\", \"n\"], "
    "\"additionalProperties\": false}",
    "{\"type\": \"array\", \"items\": {\"enum\": [\"red\", \"green\", "
    "\"blue\", 1, null]}, \"minItems\": 1, \"maxItems\": 4}",
    "{\"$defs\": {\"t\": {\"type\": \"object\", \"properties\": {\"v\": "
    "{\"type\": \"number\"}, \"c\": {\"type\": \"array\", \"items\": "
    "{\"$ref\": \"#/$defs/t\"}, \"maxItems\": 2}}, \"required\": [\"v\"], "
    "\"additionalProperties\": false}}, \"$ref\": \"#/$defs/t\"}",
    "{\"type\": \"object\", \"properties\": {\"id\": {\"type\": \"string\", "
    "\"format\": \"uuid\"}, \"s\": {\"type\": \"string\", \"pattern\": "
    "\"^[\\u00e9a-z ]{1,8}$\"}, \"e\": {\"type\": \"string\", \"format\": "
    "\"email\"}}, \"required\": [\"id\", \"s\", \"e\"]}",
    "{\"anyOf\": [{\"type\": \"string\", \"maxLength\": 3}, "
    "{\"type\": \"null\"}, {\"type\": \"array\", \"maxItems\": 1}]}",
    "{\"type\": \"object\", \"properties\": {\"d\": {\"type\": \"string\", "
    "\"maxLength\": 300}}, \"required\": [\"d\"]}",
    "{\"type\": \"array\", \"items\": {\"type\": \"integer\"}}",
    /* last: test_regions's caps, every one up to 160, are tried on it */
    "{\"type\": \"object\", \"properties\": {\"k\": {\"type\": \"string\", "
    "\"pattern\": \"^[A-Z_]+[0-9]*$\"}, \"h\": {\"type\": \"string\", "
    "\"pattern\": \"^[a-z0-9-]+(\\\\.[a-z0-9-]+)+$\"}}, \"required\": [\"k\", "
    "\"h\"], \"additionalProperties\": false}",
};

#define TMM_N_OWN  (sizeof(tmm_own) / sizeof(tmm_own[0]))
#define TMM_MAX    32                 /* schemas at most */

enum { TMM_PLAIN, TMM_MEMO, TMM_TINY, TMM_CACHED, TMM_CACHED_OFF,
       TMM_NOSKIP, TMM_NOKEEP, TMM_CHECKALL, TMM_NOCHECK, TMM_NOFAN,
       TMM_CACHED_NOFAN, TMM_N };

static char    *tmm_schemas[TMM_MAX];       /* NULL: json_object mode */
static size_t   tmm_n;
static uint64_t tmm_hits, tmm_clears, tmm_skipped, tmm_refuted;
static uint64_t tmm_looped, tmm_kept, tmm_inverted, tmm_cmemo;
static uint64_t tmm_regions, tmm_region_nodes, tmm_fanned;


/* The bench's schemas from the repository, then ours. */
static int
tmm_setup(void **state)
{
    size_t        i;
    json_t       *a, *s;
    json_error_t  je;
    const char   *paths[] = { "t/bench/gram_schemas.json",
                              "../t/bench/gram_schemas.json" };

    (void) state;
    a = NULL;
    for (i = 0; i < 2 && a == NULL; i++) {
        a = json_load_file(paths[i], 0, &je);
    }
    if (a == NULL || !json_is_array(a) || json_array_size(a) < 5) {
        print_message("t/bench/gram_schemas.json not found from %s\n",
                      getcwd(NULL, 0));
        return -1;
    }

    for (i = 0; i < json_array_size(a) && tmm_n < TMM_MAX; i++) {
        s = json_object_get(json_array_get(a, i), "schema");
        tmm_schemas[tmm_n++] = s == NULL || json_is_null(s)
                               ? NULL : json_dumps(s, JSON_COMPACT);
    }
    json_decref(a);

    for (i = 0; i < TMM_N_OWN && tmm_n < TMM_MAX; i++) {
        tmm_schemas[tmm_n++] = strdup(tmm_own[i]);
    }

    return 0;
}


static int
tmm_teardown(void **state)
{
    size_t  i;

    (void) state;
    for (i = 0; i < tmm_n; i++) {
        free(tmm_schemas[i]);
    }

    return 0;
}


static void
tmm_gram(kvs_gram_t *g, size_t i)
{
    kvs_err_t  err;
    int        rc;

    rc = tmm_schemas[i] != NULL ? tg_compile(g, tmm_schemas[i], 0, &err)
                                : kvs_gram_json_object(g, NULL, &err);
    if (rc != KVS_OK) {
        fail_msg("schema %zu: %s", i, err.msg);
    }
}


static void
tmm_first_diff(const kvs_gram_vocab_t *gv, const uint32_t *a,
    const uint32_t *b, const char *what, size_t schema, const char *text,
    size_t len)
{
    uint32_t  id;

    for (id = 0; id < gv->n_tokens; id++) {
        if ((a[id >> 5] ^ b[id >> 5]) >> (id & 31) & 1) {
            fail_msg("schema %zu after \"%.*s\": %s differs at token %u "
                     "(\"%.*s\"): %s there", schema, (int) len, text, what,
                     id, (int) gv->len[id], gv->bytes + gv->off[id],
                     a[id >> 5] >> (id & 31) & 1 ? "allowed" : "refused");
        }
    }
}


/* One masker's mask; rc kept (a dead end is an answer too). */
static int
tmm_mask(kvs_gram_masker_t *mk, uint32_t *bits)
{
    kvs_err_t  err;
    int        rc;

    rc = kvs_gram_mask(mk, bits, &err);
    if (rc != KVS_OK && rc != KVS_EFORMAT) {
        fail_msg("mask: %s", err.msg);
    }

    return rc;
}


/* Under tight caps: the plain walk and the memo's refuse alike.  dense:
 * every cap from 1 to 160 nodes above what is alive, where a walk's
 * bound on the nodes it makes is exact to the node (loop regions fill the
 * bound of the path above an exit). */
static void
tmm_caps(kvs_gram_matcher_t *m, kvs_gram_masker_t *mk, uint32_t words,
    uint32_t *a, uint32_t *b, const kvs_gram_vocab_t *gv, size_t schema,
    const char *text, size_t len, int dense)
{
    static const uint32_t  extra[] = { 1, 3, 6, 12, 30 };
    size_t                 k, nk;
    int                    ra, rb;
    kvs_gram_mlimits_t     keep;

    keep = m->lim;
    nk = dense ? 160 : sizeof(extra) / sizeof(extra[0]);

    for (k = 0; k < nk; k++) {
        m->lim.max_nodes = m->n_nodes + (dense ? (uint32_t) k + 1
                                               : extra[k]);
        m->lim.max_front = k == 0 ? 2 : keep.max_front;

        ra = tmm_mask(&mk[TMM_PLAIN], a);
        rb = tmm_mask(&mk[TMM_MEMO], b);
        assert_int_equal(ra, rb);
        if (ra == KVS_OK && memcmp(a, b, words * sizeof(uint32_t)) != 0) {
            tmm_first_diff(gv, a, b, "memo under a node cap", schema, text,
                           len);
        }
        rb = tmm_mask(&mk[TMM_TINY], b);
        assert_int_equal(ra, rb);
        if (ra == KVS_OK && memcmp(a, b, words * sizeof(uint32_t)) != 0) {
            tmm_first_diff(gv, a, b, "tiny memo under a node cap", schema,
                           text, len);
        }
    }

    m->lim = keep;
}


/*
 * Seeded walks over every schema: `walks` each, at most `steps` tokens;
 * the plain reference every `every`-th step (it is a full walk without
 * the memo, the slow part), the others every step; `brute`: the brute
 * force too; `caps`: the cap checks every 4th step (2: and on the last
 * schema every cap up to 160 nodes, every 2nd step).
 */
static void
tmm_walks(const kvs_gram_vocab_t *gv, size_t walks, size_t steps,
    size_t every, int brute, int caps, uint64_t seed)
{
    int                 rc;
    size_t              i, w, step, len, n, nc, k;
    char               *text;
    uint32_t            words, id, **bits, *bf, *cand;
    uint64_t            rng, st[4];
    kvs_err_t           err;
    kvs_gram_t          g;
    kvs_gram_masker_t  *mk;
    tgw_rig_t           r;
    static const uint32_t  entries[TMM_N] = {
        [TMM_CACHED] = 16, [TMM_CACHED_OFF] = 16, [TMM_NOKEEP] = 16,
        [TMM_CHECKALL] = 16, [TMM_NOCHECK] = 16, [TMM_CACHED_NOFAN] = 16
    };
    static const char  *names[TMM_N] = {
        "plain", "memo", "tiny memo", "cached", "cached without memo",
        "memo without skipping", "cached without keeping",
        "cached, every check through the memo",
        "cached, checks token by token", "memo without fan lists",
        "cached without fan lists"
    };

    tgw_alloc(&r, gv, TMM_N);
    words = r.words;
    bits = r.bits;
    bf = r.bf;
    cand = r.cand;
    mk = r.mk;
    text = malloc(steps * (gv->max_len + 1) + 1);
    assert_non_null(text);

    for (i = 0; i < tmm_n; i++) {
        tmm_gram(&g, i);

        for (w = 0; w < walks; w++) {
            rng = seed + i * 1000003 + w * 7919;
            tgw_begin(&r, &g, gv, entries);
            mk[TMM_NOKEEP].nokeep = 1;
            mk[TMM_CHECKALL].check_memo_min = 1;
            mk[TMM_NOCHECK].nocheckmemo = 1;
            kvs_gram_memo_skip(mk[TMM_NOSKIP].memo, 0);
            kvs_gram_memo_fans(mk[TMM_NOFAN].memo, 0);
            kvs_gram_memo_fans(mk[TMM_CACHED_NOFAN].memo, 0);
            assert_int_equal(kvs_gram_masker_memo(&mk[TMM_PLAIN], 0, &err),
                             KVS_OK);
            assert_int_equal(kvs_gram_masker_memo(&mk[TMM_TINY], 3, &err),
                             KVS_OK);
            assert_int_equal(kvs_gram_masker_memo(&mk[TMM_CACHED_OFF], 0,
                                                  &err), KVS_OK);
            len = 0;

            for (step = 0; step < steps; step++) {
                rc = tmm_mask(&mk[TMM_MEMO], bits[TMM_MEMO]);
                assert_int_equal(rc, KVS_OK);

                for (k = 0; k < TMM_N; k++) {
                    if (k == TMM_MEMO || (k == TMM_PLAIN && step % every))
                    {
                        continue;
                    }
                    assert_int_equal(tmm_mask(&mk[k], bits[k]), KVS_OK);
                    if (memcmp(bits[k], bits[TMM_MEMO],
                               words * sizeof(uint32_t)) != 0)
                    {
                        tmm_first_diff(gv, bits[k], bits[TMM_MEMO],
                                       names[k], i, text, len);
                    }
                }

                if (brute) {
                    tg_brute(&r.m, gv, bf, words);
                    if (memcmp(bf, bits[TMM_MEMO], words * sizeof(uint32_t))
                        != 0)
                    {
                        tmm_first_diff(gv, bf, bits[TMM_MEMO], "brute force",
                                       i, text, len);
                    }
                }

                if (caps == 2 && i == tmm_n - 1 && step % 2 == 1) {
                    tmm_caps(&r.m, mk, words, bits[TMM_PLAIN], bf, gv, i, text,
                             len, 1);
                } else if (caps && step % 4 == 1) {
                    tmm_caps(&r.m, mk, words, bits[TMM_PLAIN], bf, gv, i, text,
                             len, 0);
                }

                /* mostly string bodies and values (long bounded strings),
                 * a closer one time in four, EOS when allowed one in
                 * three */
                for (id = 0, n = 0, nc = 0; id < gv->n_tokens; id++) {
                    if (!(bits[TMM_MEMO][id >> 5] >> (id & 31) & 1)) {
                        continue;
                    }
                    if (gv->kind[id] == KVS_GRAM_TOK_TEXT
                        && (memchr(gv->bytes + gv->off[id], '"',
                                   gv->len[id]) != NULL
                            || memchr(gv->bytes + gv->off[id], '}',
                                      gv->len[id]) != NULL
                            || memchr(gv->bytes + gv->off[id], ']',
                                      gv->len[id]) != NULL))
                    {
                        cand[gv->n_tokens - 1 - nc++] = id;
                    } else {
                        cand[n++] = id;
                    }
                }
                assert_true(n + nc > 0);

                if (nc > 0 && (n == 0 || tg_rand(&rng) % 4 == 0)) {
                    id = cand[gv->n_tokens - 1 - tg_rand(&rng) % nc];
                } else {
                    id = cand[tg_rand(&rng) % n];
                }
                if (kvs_gram_matcher_can_end(&r.m) && tg_rand(&rng) % 3 == 0) {
                    break;
                }
                if (gv->kind[id] == KVS_GRAM_TOK_END) {
                    break;
                }

                assert_int_equal(kvs_gram_accept_token(&r.m, gv, (int32_t) id,
                                                       &err), KVS_OK);
                memcpy(text + len, gv->bytes + gv->off[id], gv->len[id]);
                len += gv->len[id];
            }

            kvs_gram_memo_stats(mk[TMM_MEMO].memo, st);
            tmm_hits += st[0];
            kvs_gram_memo_stats(mk[TMM_TINY].memo, st);
            tmm_clears += st[3];
            kvs_gram_memo_stats(mk[TMM_PLAIN].memo, st);
            assert_true(st[0] == 0 && st[1] == 0);
            kvs_gram_memo_skips(mk[TMM_NOSKIP].memo, st);
            assert_true(st[0] == 0 && st[2] == 0);
            kvs_gram_memo_skips(mk[TMM_MEMO].memo, st);
            tmm_skipped += st[0];
            tmm_refuted += st[3];
            kvs_gram_memo_skips(mk[TMM_CACHED].memo, st);
            tmm_skipped += st[0];
            kvs_gram_memo_loops(mk[TMM_NOSKIP].memo, st);
            assert_true(st[0] == 0);
            kvs_gram_memo_loops(mk[TMM_MEMO].memo, st);
            tmm_looped += st[0];
            kvs_gram_memo_loops(mk[TMM_CACHED].memo, st);
            tmm_looped += st[0];
            kvs_gram_memo_regions(mk[TMM_NOSKIP].memo, st);
            assert_true(st[0] == 0);
            kvs_gram_memo_regions(mk[TMM_MEMO].memo, st);
            tmm_regions += st[0];
            tmm_region_nodes += st[1];
            kvs_gram_memo_regions(mk[TMM_CACHED].memo, st);
            tmm_regions += st[0];
            tmm_region_nodes += st[1];
            tmm_fanned += kvs_gram_memo_fanned(mk[TMM_MEMO].memo)
                          + kvs_gram_memo_fanned(mk[TMM_CACHED].memo);
            assert_true(kvs_gram_memo_fanned(mk[TMM_NOFAN].memo) == 0);
            assert_true(kvs_gram_memo_fanned(mk[TMM_CACHED_NOFAN].memo)
                        == 0);
            tmm_kept += kvs_gram_memo_kept(mk[TMM_CACHED].memo);
            assert_true(kvs_gram_memo_kept(mk[TMM_NOKEEP].memo) == 0);
            tmm_inverted += kvs_gram_memo_inverted(mk[TMM_MEMO].memo)
                            + kvs_gram_memo_inverted(mk[TMM_CACHED].memo);
            tmm_cmemo += mk[TMM_CHECKALL].checks_memo;
            assert_true(mk[TMM_NOCHECK].checks_memo == 0);

            tgw_end(&r);
        }

        kvs_gram_free(&g);
    }

    tgw_free(&r);
    free(text);
}


/* ---- a small vocabulary ----------------------------------------------- */

static const char  *tmm_pieces[] = {
    "{\"", "\":", "\": ", "\", \"", ", \"", "\"}", "\"]", "}]", "]}",
    "true", "false", "null", "nu", "ll", "123", "0.", ".5", "e+", "-1",
    "\\n", "\\u00", "\\\"", "\"},{\"", "\": [", "\": {\"", "name", "\"name",
    "\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac", "\xe6\x97", "\xa5", "\xf0\x9f",
    "abc", "abcdefgh", "a b", "@x.", ".com", "-4", "ab-", "0000",
};


static void
test_small(void **state)
{
    size_t             i, n, np;
    uint8_t           *texts[512], kinds[512];
    uint32_t           lens[512];
    kvs_gram_vocab_t  *gv;

    (void) state;

    /* every byte, the pieces, an EOS */
    n = 0;
    for (i = 0; i < 256; i++) {
        texts[n] = malloc(1);
        texts[n][0] = (uint8_t) i;
        lens[n] = 1;
        kinds[n++] = KVS_GRAM_TOK_TEXT;
    }
    np = sizeof(tmm_pieces) / sizeof(tmm_pieces[0]);
    for (i = 0; i < np; i++) {
        lens[n] = (uint32_t) strlen(tmm_pieces[i]);
        texts[n] = (uint8_t *) strdup(tmm_pieces[i]);
        kinds[n++] = KVS_GRAM_TOK_TEXT;
    }
    gv = tgw_vocab(texts, lens, kinds, n);

    tmm_hits = 0;
    tmm_clears = 0;
    tmm_inverted = 0;
    tmm_cmemo = 0;
    tmm_walks(gv, 4, 60, 1, 1, 1, 11);
    assert_true(tmm_hits > 0);
    assert_true(tmm_clears > 0);
    assert_true(tmm_inverted > 0);
    assert_true(tmm_cmemo > 0);

    kvs_gram_vocab_free(gv);
}


/* ---- a vocabulary for subtree skipping ----------------------------------- */

/* Pieces the tokens are made of: every kind of UTF-8 lead byte (and the
 * E0, ED, F0, F4 ranges' edges), what UTF-8 leaves out (surrogates,
 * overlongs, past 10FFFF, a lone continuation, C0/C1/F5), what a JSON
 * string refuses raw or escapes, and plain text. */
static const char  *tmm_frag[] = {
    "a", "b", "xy", " ", "0", "-", ".", "\xc3\xa9", "\xc2\x80", "\xdf\xbf",
    "\xe6\x97\xa5", "\xe0\xa0\x80", "\xe0\xbf\xbf", "\xed\x9f\xbf",
    "\xee\x80\x80", "\xef\xbf\xbf", "\xf0\x90\x80\x80", "\xf0\x9f\x98\x80",
    "\xf3\xbf\xbf\xbf", "\xf4\x8f\xbf\xbf", "\xed\xa0\x80", "\xe0\x9f\xbf",
    "\xf0\x8f\xbf\xbf", "\xf4\x90\x80\x80", "\xc0\xaf", "\xc1\xbf", "\xf5\x80",
    "\x80", "\"", "\\", "\\n", "\\\"", "\\u00e9", "\\ud83d", "\x1f", "\t",
    "\x7f", "}", "]", ",", ":", "\": \"", "\", \"", "\"}",
};


static void
test_skip(void **state)
{
    size_t             i, k, n, nf, l, cut;
    uint8_t           *texts[3000], kinds[3000], buf[64];
    uint32_t           lens[3000];
    uint64_t           rng;
    kvs_gram_vocab_t  *gv;

    (void) state;

    /* every byte alone, then seeded strings of 1 to 6 pieces sharing
     * prefixes (each made from the one before one time in two), a third
     * of them cut at a random byte: mid-character ends */
    n = 0;
    for (i = 0; i < 256; i++) {
        texts[n] = malloc(1);
        texts[n][0] = (uint8_t) i;
        lens[n] = 1;
        kinds[n++] = KVS_GRAM_TOK_TEXT;
    }

    nf = sizeof(tmm_frag) / sizeof(tmm_frag[0]);
    rng = 77;
    l = 0;
    while (n < 2999) {
        if (tg_rand(&rng) % 2 == 0 || l == 0) {
            l = 0;
        }
        k = 1 + tg_rand(&rng) % 3;
        while (k-- > 0) {
            const char  *f = tmm_frag[tg_rand(&rng) % nf];

            if (l + strlen(f) > sizeof(buf)) {
                break;
            }
            memcpy(buf + l, f, strlen(f));
            l += strlen(f);
        }
        cut = tg_rand(&rng) % 3 == 0 && l > 1 ? 1 + tg_rand(&rng) % (l - 1)
                                              : l;
        texts[n] = malloc(cut);
        memcpy(texts[n], buf, cut);
        lens[n] = (uint32_t) cut;
        kinds[n++] = KVS_GRAM_TOK_TEXT;
    }
    gv = tgw_vocab(texts, lens, kinds, n);

    tmm_hits = 0;
    tmm_skipped = 0;
    tmm_refuted = 0;
    tmm_inverted = 0;
    tmm_cmemo = 0;
    tmm_fanned = 0;
    tmm_walks(gv, 3, 40, 1, 1, 1, 23);
    assert_true(tmm_fanned > 0);
    assert_true(tmm_cmemo > 0);
    assert_true(tmm_hits > 0);
    assert_true(tmm_skipped > 0);
    assert_true(tmm_refuted > 0);

    kvs_gram_vocab_free(gv);
}


/* ---- a vocabulary for loop regions ------------------------------------ */

/* Pieces the tokens are made of: a pattern's class ([a-z0-9-]) and the
 * bytes that leave it (a '.', quotes that end the string, capitals,
 * '_', a backslash, spaces, UTF-8), so that the class's paths from the
 * root and from inner nodes end in exits of every kind at every depth. */
static const char  *tmm_gfrag[] = {
    "a", "bc", "x9", "0", "7", "-", "q-z", "com", ".", ".org", "\"",
    "\",", "\"}", "\", \"", "A", "B_", "_", "Q7", "\\", "\\.", " ", ",",
    "\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x98\x80", "}", ":",
};

/* And subtrees made to be misjudged: under "Z" only capitals, '_' and
 * digits, a capital after a digit among them (taken whole, "Z9Z" would
 * pass); under "mm" a short, wide subtree whose leaves leave the class,
 * a region that fits under the tighter caps. */
static const char  *tmm_gtok[] = {
    "Z9", "Z9Z", "Z_9_", "Z_", "ZZ", "ZZ7", "Z_Z_", "Z7_", "mma\"", "mmb.",
    "mmc\",", "mmd\"}", "mme_", "mmf.a", "mmg\"", "mmh.", "mmi\"", "mmj.x",
    "mmk\"", "mml.", "mmm\",", "mmn.", "mmo\"}", "mmp.", "mmq\"",
    "70,", "12}", "3,", "45]", "123,\"", "9999}", "10, ", "77.5,",
};


static void
test_regions(void **state)
{
    size_t             i, k, n, l;
    uint8_t           *texts[4000], kinds[4000], buf[96];
    uint32_t           lens[4000];
    uint64_t           rng;
    const char        *f;
    kvs_gram_vocab_t  *gv;

    (void) state;

    /* every byte alone, the made ones, then seeded strings of 1 to 4
     * pieces, each made from the one before two times in three: long
     * shared paths */
    n = 0;
    for (i = 0; i < 256; i++) {
        buf[0] = (uint8_t) i;
        tgw_add(texts, lens, kinds, &n, 4000, buf, 1);
    }
    for (i = 0; i < sizeof(tmm_gtok) / sizeof(tmm_gtok[0]); i++) {
        tgw_add(texts, lens, kinds, &n, 4000, tmm_gtok[i],
                strlen(tmm_gtok[i]));
    }

    rng = 91;
    l = 0;
    while (n < 3999) {
        if (tg_rand(&rng) % 3 == 0 || l > 64) {
            l = 0;
        }
        for (k = 1 + tg_rand(&rng) % 4; k > 0; k--) {
            f = tmm_gfrag[tg_rand(&rng) % (sizeof(tmm_gfrag)
                                           / sizeof(tmm_gfrag[0]))];
            memcpy(buf + l, f, strlen(f));
            l += strlen(f);
        }
        tgw_add(texts, lens, kinds, &n, 4000, buf, l);
    }
    gv = tgw_vocab(texts, lens, kinds, n);

    tmm_regions = 0;
    tmm_region_nodes = 0;
    tmm_walks(gv, 3, 40, 1, 1, 2, 31);
    print_message("%llu loop regions, %llu nodes in runs\n",
                  (unsigned long long) tmm_regions,
                  (unsigned long long) tmm_region_nodes);
    assert_true(tmm_regions > 0);
    assert_true(tmm_region_nodes > 0);

    kvs_gram_vocab_free(gv);
}


/* ---- real vocabularies -------------------------------------------------- */

static void
tmm_vocab(const char *path, size_t walks, size_t steps, size_t every,
    int caps, uint64_t seed)
{
    kvs_err_t          err;
    kvs_vocab_t       *v;
    kvs_gram_vocab_t  *gv;

    if (kvs_vocab_open(&v, path, &err) != KVS_OK) {
        fail_msg("%s: %s", path, err.msg);
    }
    assert_int_equal(kvs_gram_vocab_from_vocab(&gv, v, &err), KVS_OK);

    tmm_hits = 0;
    tmm_skipped = 0;
    tmm_looped = 0;
    tmm_regions = 0;
    tmm_region_nodes = 0;
    tmm_kept = 0;
    tmm_inverted = 0;
    tmm_cmemo = 0;
    tmm_fanned = 0;
    tmm_walks(gv, walks, steps, every, 0, caps, seed);
    print_message("%s: %llu subtrees by loops, %llu loop regions (%llu "
                  "nodes in runs), %llu walks on kept states, "
                  "%llu walks set by the complement, %llu masks checked "
                  "through the memo, %llu nodes passed by fan lists\n",
                  path,
                  (unsigned long long) tmm_looped,
                  (unsigned long long) tmm_regions,
                  (unsigned long long) tmm_region_nodes,
                  (unsigned long long) tmm_kept,
                  (unsigned long long) tmm_inverted,
                  (unsigned long long) tmm_cmemo,
                  (unsigned long long) tmm_fanned);
    assert_true(tmm_fanned > 0);
    assert_true(tmm_inverted > 0);
    assert_true(tmm_cmemo > 0);
    assert_true(tmm_hits > 0);
    assert_true(tmm_skipped > 0);
    assert_true(tmm_looped + tmm_regions > 0);
    assert_true(tmm_region_nodes > 0);
    assert_true(tmm_kept > 0);

    kvs_gram_vocab_free(gv);
    kvs_vocab_free(v);
}


static void
test_gpt2(void **state)
{
    const char  *path;

    (void) state;
    path = kvs_test_fixture("vocab/ggml-vocab-gpt-2.gguf");
    if (path == NULL) {
        skip();
        return;
    }
    tmm_vocab(path, 2, 24, 3, 1, 101);
}


static void
test_llama_spm(void **state)
{
    const char  *path;

    (void) state;
    path = kvs_test_fixture("vocab/ggml-vocab-llama-spm.gguf");
    if (path == NULL) {
        skip();
        return;
    }
    tmm_vocab(path, 1, 24, 3, 0, 202);
}


/* The converted 128k and 152k vocabularies (docs/grammar.md, "Timing"),
 * where they were made. */
static void
tmm_converted(const char *path, uint64_t seed)
{
    if (access(path, R_OK) != 0) {
        print_message("SKIP: %s is absent (kvserve convert-vocab makes it, "
                      "docs/grammar.md)\n", path);
        skip();
        return;
    }
    tmm_vocab(path, 1, 16, 4, 0, seed);
}


static void
test_llama3(void **state)
{
    (void) state;
    tmm_converted("/tmp/llama3.gguf", 303);
}


static void
test_qwen2(void **state)
{
    (void) state;
    tmm_converted("/tmp/qwen2.gguf", 404);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_small),
        cmocka_unit_test(test_skip),
        cmocka_unit_test(test_regions),
        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_llama_spm),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_qwen2),
    };

    return cmocka_run_group_tests(tests, tmm_setup, tmm_teardown);
}
