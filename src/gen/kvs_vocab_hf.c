/*
 * kvs_vocab_hf: kvs_vocab_convert_hf(), a Hugging Face vocab.json +
 * merges.txt pair (Qwen2) -> a vocabulary-only GGUF with Qwen2's three
 * special tokens (see kvs_vocab_convert.h).
 *
 * Owns nothing past a call.  Everything is validated before anything is
 * written: vocab.json is an object whose ids are 0..n-1, each once, and
 * whose keys are non-empty strings of the GPT-2 byte-to-unicode alphabet
 * holding all 256 bytes; every line of merges.txt (after an optional
 * "#version" line) is "left right", both tokens, their concatenation a
 * token, no pair twice.  Token strings stay as vocab.json spells them, so
 * the map is over alphabet strings; it is built once all of vocab.json
 * is in, and is not used after the special tokens are appended.
 */

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tokenizer/kvs_bytelevel.h"
#include "tokenizer/kvs_vocab.h"
#include "kvs_vocab_convert_impl.h"


static const char *const  kvs_vc_qwen2_named[3] = {
    "<|endoftext|>", "<|im_start|>", "<|im_end|>"
};

/* Qwen2 has no BOS of its own; llama.cpp's converter still writes
 * <|endoftext|> as bos_token_id (from config.json) with add_bos false,
 * and so do we, so that llama.cpp does not fall back to its own default
 * BPE BOS id. */
static const kvs_vc_profile_t  kvs_vc_qwen2 = {
    "qwen2", "qwen2", "Qwen2", 0, 3,
    kvs_vc_qwen2_named, 3, 0,
    0, 0, 2, -1, 0
};


/* (left << 32 | right) -> line of the merge, to refuse a repeated one. */
typedef struct {
    uint64_t  *key;                   /* [mask + 1] pair + 1; 0 empty */
    uint32_t  *line;                  /* [mask + 1] */
    uint32_t   mask;
} kvs_vc_pairs_t;


/* vocab.json: {"token": id, ...} with ids 0..n-1, each once. */
static int
kvs_vc_hf_vocab(kvs_vc_vocab_t *cv, const char *path, uint32_t n_extra,
    kvs_err_t *err)
{
    int            rc;
    char           q[KVS_VC_QUOTE], q2[KVS_VC_QUOTE];
    size_t         n, klen, i, bad;
    uint8_t        raw[2 * KVS_VC_MAX_TOKEN_LEN];
    json_t        *root, *val;
    json_int_t     id;
    const char    *key, **keys;
    size_t        *lens;
    json_error_t   jerr;

    root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        return kvs_err_set(err, KVS_EFORMAT, "%s:%d:%d: bad JSON: %s",
                           path, jerr.line, jerr.column, jerr.text);
    }

    keys = NULL;
    lens = NULL;

    if (!json_is_object(root)) {
        rc = kvs_err_set(err, KVS_EFORMAT, "%s: not a JSON object of "
                         "token -> id", path);
        goto done;
    }

    n = json_object_size(root);
    if (n == 0 || n > KVS_VC_MAX_TOKENS) {
        rc = kvs_err_set(err, KVS_EFORMAT, "%s: %zu tokens (1..%u "
                         "allowed)", path, n, KVS_VC_MAX_TOKENS);
        goto done;
    }

    keys = calloc(n, sizeof(char *));
    lens = calloc(n, sizeof(size_t));
    if (keys == NULL || lens == NULL
        || kvs_vc_vocab_init(cv, (uint32_t) n + n_extra) != KVS_OK)
    {
        rc = kvs_err_set(err, KVS_ENOMEM, "out of memory");
        goto done;
    }

    json_object_keylen_foreach(root, key, klen, val) {
        if (!json_is_integer(val)) {
            rc = kvs_err_set(err, KVS_EFORMAT, "%s: token %s: the id is "
                             "not an integer", path,
                             kvs_vc_quote(key, klen, q, sizeof(q)));
            goto done;
        }

        id = json_integer_value(val);
        if (id < 0 || (size_t) id >= n) {
            rc = kvs_err_set(err, KVS_EFORMAT, "%s: token %s has id %lld; "
                             "the %zu ids must be 0..%zu, each once", path,
                             kvs_vc_quote(key, klen, q, sizeof(q)),
                             (long long) id, n, n - 1);
            goto done;
        }

        if (keys[id] != NULL) {
            rc = kvs_err_set(err, KVS_EFORMAT, "%s: tokens %s and %s both "
                             "have id %lld", path,
                             kvs_vc_quote(keys[id], lens[id], q, sizeof(q)),
                             kvs_vc_quote(key, klen, q2, sizeof(q2)),
                             (long long) id);
            goto done;
        }

        if (klen == 0 || klen > 2 * KVS_VC_MAX_TOKEN_LEN) {
            rc = kvs_err_set(err, KVS_EFORMAT, "%s: token id %lld: %zu "
                             "bytes (1..%d allowed)", path, (long long) id,
                             klen, 2 * KVS_VC_MAX_TOKEN_LEN);
            goto done;
        }

        /* only to validate: the token is stored as spelt */
        if (kvs_bytelevel_decode(key, klen, raw, &bad) == (size_t) -1) {
            rc = kvs_err_set(err, KVS_EFORMAT, "%s: token %s (id %lld): "
                             "byte %zu is not in the GPT-2 byte-to-unicode "
                             "alphabet", path,
                             kvs_vc_quote(key, klen, q, sizeof(q)),
                             (long long) id, bad);
            goto done;
        }

        keys[id] = key;
        lens[id] = klen;
    }

    /* n keys, each id < n and none twice: all of 0..n-1 are there */

    rc = KVS_OK;

    for (i = 0; i < n && rc == KVS_OK; i++) {
        rc = kvs_vc_vocab_add(cv, keys[i], lens[i], 0, KVS_TOKT_NORMAL);
    }

    if (rc != KVS_OK) {
        rc = kvs_err_set(err, rc, "out of memory");
    }

done:

    free(keys);
    free(lens);
    json_decref(root);

    return rc;
}


/* Records (l, r) from line lineno; the line it was first on, or 0. */
static uint32_t
kvs_vc_pairs_add(kvs_vc_pairs_t *seen, int32_t l, int32_t r,
    uint32_t lineno)
{
    uint32_t  j;
    uint64_t  key;

    key = ((uint64_t) (uint32_t) l << 32 | (uint32_t) r) + 1;
    j = (uint32_t) ((key * 0x9E3779B97F4A7C15ULL) >> 32) & seen->mask;

    while (seen->key[j] != 0 && seen->key[j] != key) {
        j = (j + 1) & seen->mask;
    }

    if (seen->key[j] == key) {
        return seen->line[j];
    }

    seen->key[j] = key;
    seen->line[j] = lineno;

    return 0;
}


static int
kvs_vc_hf_merges(kvs_vc_vocab_t *cv, const kvs_vc_map_t *m,
    const char *vocab_path, const char *path, kvs_err_t *err)
{
    int              rc;
    char             q[KVS_VC_QUOTE];
    size_t           size, cap, nl;
    int32_t          l, r, res;
    uint8_t         *buf;
    uint32_t         first;
    kvs_buf_t        cat;
    kvs_vc_lines_t   it;
    kvs_vc_pairs_t   seen;
    const uint8_t   *p, *e, *sp;

    memset(&cat, 0, sizeof(cat));
    memset(&seen, 0, sizeof(seen));

    rc = kvs_vc_slurp(path, KVS_VC_MAX_FILE, &buf, &size, err);
    if (rc != KVS_OK) {
        return rc;
    }

    /* + 1: room even for an empty file, as malloc(0) may be NULL */
    nl = kvs_vc_lines_count(buf, size) + 1;

    for (cap = 16; cap < nl * 2; cap *= 2) { /* void */ }

    seen.key = calloc(cap, sizeof(uint64_t));
    seen.line = calloc(cap, sizeof(uint32_t));
    seen.mask = (uint32_t) (cap - 1);
    /* one merge per line, and each merge makes a distinct token */
    free(cv->merge);
    cv->merge = malloc(2 * nl * sizeof(uint32_t));
    if (seen.key == NULL || seen.line == NULL || cv->merge == NULL) {
        rc = kvs_err_set(err, KVS_ENOMEM, "out of memory");
        goto done;
    }

    kvs_vc_lines_init(&it, buf, size);
    rc = KVS_OK;

    while (kvs_vc_lines_next(&it, &p, &e)) {
        if (it.lineno == 1 && e - p >= 8 && memcmp(p, "#version", 8) == 0) {
            continue;
        }

        sp = memchr(p, ' ', (size_t) (e - p));
        if (sp == NULL || sp == p || sp + 1 == e
            || memchr(sp + 1, ' ', (size_t) (e - sp - 1)) != NULL)
        {
            rc = kvs_err_set(err, KVS_EFORMAT, "%s:%u: %s is not \"left "
                             "right\" (two symbols, one space)", path,
                             it.lineno,
                             kvs_vc_quote(p, (size_t) (e - p), q, sizeof(q)));
            goto done;
        }

        l = kvs_vc_map_find(m, p, (size_t) (sp - p));
        r = kvs_vc_map_find(m, sp + 1, (size_t) (e - sp - 1));
        if (l < 0 || r < 0) {
            rc = kvs_err_set(err, KVS_EFORMAT, "%s:%u: %s is not a token "
                             "of %s", path, it.lineno,
                             l < 0 ? kvs_vc_quote(p, (size_t) (sp - p), q,
                                                  sizeof(q))
                                   : kvs_vc_quote(sp + 1,
                                                  (size_t) (e - sp - 1), q,
                                                  sizeof(q)),
                             vocab_path);
            goto done;
        }

        cat.len = 0;
        if (kvs_buf_append(&cat, p, (size_t) (sp - p)) != KVS_OK
            || kvs_buf_append(&cat, sp + 1, (size_t) (e - sp - 1)) != KVS_OK)
        {
            rc = kvs_err_set(err, KVS_ENOMEM, "out of memory");
            goto done;
        }

        res = kvs_vc_map_find(m, cat.data, cat.len);
        if (res < 0) {
            rc = kvs_err_set(err, KVS_EFORMAT, "%s:%u: the merge makes %s, "
                             "which is not a token of %s", path, it.lineno,
                             kvs_vc_quote(cat.data, cat.len, q, sizeof(q)),
                             vocab_path);
            goto done;
        }

        first = kvs_vc_pairs_add(&seen, l, r, it.lineno);
        if (first != 0) {
            rc = kvs_err_set(err, KVS_EFORMAT, "%s:%u: merge %s repeats "
                             "line %u", path, it.lineno,
                             kvs_vc_quote(p, (size_t) (e - p), q, sizeof(q)),
                             first);
            goto done;
        }

        cv->merge[2 * cv->n_merges] = (uint32_t) l;
        cv->merge[2 * cv->n_merges + 1] = (uint32_t) r;
        cv->n_merges++;
    }

done:

    free(buf);
    free(seen.key);
    free(seen.line);
    kvs_buf_free(&cat);

    return rc;
}


int
kvs_vocab_convert_hf(const char *vocab_path, const char *merges_path,
    const char *out_path, const kvs_vocab_convert_opts_t *opts,
    kvs_vocab_convert_stats_t *stats, kvs_err_t *err)
{
    int              rc;
    double           t0;
    uint32_t         i;
    kvs_vc_map_t     m;
    kvs_vc_vocab_t   cv;

    t0 = kvs_vc_start(stats);
    memset(&m, 0, sizeof(m));
    memset(&cv, 0, sizeof(cv));

    rc = kvs_vc_hf_vocab(&cv, vocab_path, kvs_vc_qwen2.n_special, err);
    if (rc != KVS_OK) {
        goto done;
    }

    if (kvs_vc_map_init(&m, cv.text.data, cv.off, cv.len, cv.n) != KVS_OK) {
        rc = kvs_err_set(err, KVS_ENOMEM, "out of memory");
        goto done;
    }

    /* vocab.json keys are unique, and the alphabet is one-to-one */
    for (i = 0; i < cv.n; i++) {
        (void) kvs_vc_map_add(&m, i);
    }

    rc = kvs_vc_check_bytes(&m, 1, vocab_path, err);
    if (rc != KVS_OK) {
        goto done;
    }

    rc = kvs_vc_hf_merges(&cv, &m, vocab_path, merges_path, err);
    if (rc != KVS_OK) {
        goto done;
    }

    rc = kvs_vc_finish(&cv, &kvs_vc_qwen2, &m, 1, vocab_path, opts,
                       out_path, stats, t0, err);

done:

    kvs_vc_map_free(&m);
    kvs_vc_vocab_free(&cv);

    return rc;
}
