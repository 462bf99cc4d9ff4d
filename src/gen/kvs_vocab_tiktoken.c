/*
 * kvs_vocab_tiktoken: kvs_vocab_convert_tiktoken(), tiktoken ranks
 * ("<base64> <rank>" lines, Llama 3's tokenizer.model) -> a
 * vocabulary-only GGUF with the Llama 3.1 special tokens, and the
 * derivation of merges that tiktoken files do not have (see
 * kvs_vocab_convert.h).
 *
 * Owns nothing past a call.  Every line is validated before anything is
 * written: strict base64, ranks 0..n-1 each once, no token twice, all 256
 * bytes present.  The ranks are kept as raw bytes (the map is over them)
 * and spelt in the GPT-2 alphabet only when added to the vocabulary.
 *
 * Merge derivation costs O(L^2) table look-ups for a token of L bytes
 * (one pass over the remaining pairs per merge); L is capped at
 * KVS_VC_MAX_TOKEN_LEN and real tokens are short (Llama 3: at most 128
 * bytes, 128000 tokens in well under a second).
 */

#include <stdlib.h>
#include <string.h>

#include "tokenizer/kvs_vocab.h"
#include "kvs_vocab_convert_impl.h"

#define KVS_VC_NONE           UINT32_MAX
#define KVS_VC_N_LLAMA3       256            /* Llama 3.1 special tokens */


/* Llama 3.1 as in its Hugging Face files (ids 128000..); the rest are
 * <|reserved_special_token_3|> (128011) .. _247|> (128255). */
static const char *const  kvs_vc_llama3_named[11] = {
    "<|begin_of_text|>", "<|end_of_text|>",
    "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
    "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
    "<|eot_id|>", "<|python_tag|>"
};

/* eos is <|end_of_text|>, the base model's end; instruct models end a
 * turn with <|eot_id|> (eot) or, after a tool call, <|eom_id|> (eom), and
 * both are written so that generation stops on either. */
static const kvs_vc_profile_t  kvs_vc_llama3 = {
    "llama", "llama-bpe", "Llama 3", 1, KVS_VC_N_LLAMA3,
    kvs_vc_llama3_named, 11, 3,
    0, 1, 9, 8, -1
};


/* Parsed ranks file: token (rank) i is raw[off[i] .. off[i] + len[i]). */
typedef struct {
    kvs_buf_t   raw;
    uint32_t   *off;                  /* [n] */
    uint32_t   *len;                  /* [n] */
    uint32_t   *line;                 /* [n] 1-based line of rank i */
    uint32_t    n;
    uint32_t    max_len;              /* bytes of the longest token */
} kvs_vc_ranks_t;


static int
kvs_vc_b64_val(uint8_t c)
{
    if (c >= 'A' && c <= 'Z') {
        return c - 'A';
    }
    if (c >= 'a' && c <= 'z') {
        return c - 'a' + 26;
    }
    if (c >= '0' && c <= '9') {
        return c - '0' + 52;
    }
    if (c == '+') {
        return 62;
    }
    if (c == '/') {
        return 63;
    }

    return -1;
}


/*
 * Strict standard base64 (RFC 4648 section 4, padded, canonical: the
 * unused bits of the last group are zero).  NULL on success, else why not.
 */
static const char *
kvs_vc_b64_decode(const uint8_t *s, size_t n, uint8_t *out, size_t *out_len)
{
    int       v[4], k;
    size_t    i, o, pad;
    uint32_t  g;

    if (n == 0) {
        return "empty";
    }

    if (n % 4 != 0) {
        return "length not a multiple of 4";
    }

    pad = s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;

    for (i = 0, o = 0; i < n; i += 4) {
        for (k = 0; k < 4; k++) {
            if (i + 4 == n && k >= 4 - (int) pad) {
                v[k] = 0;
                continue;
            }
            v[k] = kvs_vc_b64_val(s[i + k]);
            if (v[k] < 0) {
                return s[i + k] == '=' ? "'=' before the end"
                                       : "character outside the alphabet";
            }
        }

        g = (uint32_t) v[0] << 18 | (uint32_t) v[1] << 12
            | (uint32_t) v[2] << 6 | (uint32_t) v[3];

        out[o++] = (uint8_t) (g >> 16);
        if (i + 4 < n || pad < 2) {
            out[o++] = (uint8_t) (g >> 8);
        }
        if (i + 4 < n || pad < 1) {
            out[o++] = (uint8_t) g;
        }
    }

    if ((pad == 1 && (v[2] & 3) != 0) || (pad == 2 && (v[1] & 15) != 0)) {
        return "non-zero bits after the last byte";
    }

    *out_len = o;

    return NULL;
}


static void
kvs_vc_ranks_free(kvs_vc_ranks_t *t)
{
    kvs_buf_free(&t->raw);
    free(t->off);
    free(t->len);
    free(t->line);
}


static int
kvs_vc_ranks_parse(kvs_vc_ranks_t *t, const char *path, const uint8_t *buf,
    size_t size, kvs_err_t *err)
{
    char             q[KVS_VC_QUOTE];
    size_t           nl, dlen, k;
    uint32_t         rank;
    uint64_t         v;
    const char      *why;
    const uint8_t   *p, *e, *sp;
    kvs_vc_lines_t   it;

    memset(t, 0, sizeof(*t));

    nl = kvs_vc_lines_count(buf, size);

    if (nl == 0) {
        return kvs_err_set(err, KVS_EFORMAT, "%s: empty file", path);
    }
    if (nl > KVS_VC_MAX_TOKENS) {
        return kvs_err_set(err, KVS_EFORMAT, "%s: %zu lines, more than the "
                           "%u tokens allowed", path, nl, KVS_VC_MAX_TOKENS);
    }

    t->n = (uint32_t) nl;
    t->off = malloc(nl * sizeof(uint32_t));
    t->len = malloc(nl * sizeof(uint32_t));
    t->line = calloc(nl, sizeof(uint32_t));
    /* decoded bytes never outnumber the base64 characters */
    if (t->off == NULL || t->len == NULL || t->line == NULL
        || kvs_buf_reserve(&t->raw, size) != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    kvs_vc_lines_init(&it, buf, size);

    while (kvs_vc_lines_next(&it, &p, &e)) {
        sp = memchr(p, ' ', (size_t) (e - p));
        if (sp == NULL) {
            return kvs_err_set(err, KVS_EFORMAT, "%s:%u: %s is not "
                               "\"<base64> <rank>\"", path, it.lineno,
                               kvs_vc_quote(p, (size_t) (e - p), q,
                                            sizeof(q)));
        }

        why = kvs_vc_b64_decode(p, (size_t) (sp - p),
                                t->raw.data + t->raw.len, &dlen);
        if (why != NULL) {
            return kvs_err_set(err, KVS_EFORMAT, "%s:%u: bad base64 %s (%s)",
                               path, it.lineno,
                               kvs_vc_quote(p, (size_t) (sp - p), q,
                                            sizeof(q)), why);
        }

        if (dlen > KVS_VC_MAX_TOKEN_LEN) {
            return kvs_err_set(err, KVS_EFORMAT, "%s:%u: token of %zu "
                               "bytes, more than the %d allowed", path,
                               it.lineno, dlen, KVS_VC_MAX_TOKEN_LEN);
        }

        v = 0;
        for (k = 1; sp + k < e && k <= 11; k++) {
            if (sp[k] < '0' || sp[k] > '9') {
                break;
            }
            v = v * 10 + (uint64_t) (sp[k] - '0');
        }

        if (k == 1 || sp + k != e) {
            return kvs_err_set(err, KVS_EFORMAT, "%s:%u: rank %s is not a "
                               "decimal number", path, it.lineno,
                               kvs_vc_quote(sp + 1, (size_t) (e - sp - 1), q,
                                            sizeof(q)));
        }

        if (v >= t->n) {
            return kvs_err_set(err, KVS_EFORMAT, "%s:%u: rank %llu out of "
                               "range: the %u lines must hold the ranks "
                               "0..%u, each once", path, it.lineno,
                               (unsigned long long) v, t->n, t->n - 1);
        }

        rank = (uint32_t) v;
        if (t->line[rank] != 0) {
            return kvs_err_set(err, KVS_EFORMAT, "%s:%u: duplicate rank %u "
                               "(also on line %u)", path, it.lineno, rank,
                               t->line[rank]);
        }

        t->line[rank] = it.lineno;
        t->off[rank] = (uint32_t) t->raw.len;
        t->len[rank] = (uint32_t) dlen;
        t->raw.len += dlen;
        if (dlen > t->max_len) {
            t->max_len = (uint32_t) dlen;
        }
    }

    /* n lines, each rank < n and none twice: all of 0..n-1 are there */

    return KVS_OK;
}


/* The ranks into m, refusing a token seen twice. */
static int
kvs_vc_ranks_index(kvs_vc_map_t *m, const kvs_vc_ranks_t *t,
    const char *path, kvs_err_t *err)
{
    char      q[KVS_VC_QUOTE];
    int32_t   dup;
    uint32_t  i;

    if (kvs_vc_map_init(m, t->raw.data, t->off, t->len, t->n) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    for (i = 0; i < t->n; i++) {
        dup = kvs_vc_map_add(m, i);
        if (dup >= 0) {
            return kvs_err_set(err, KVS_EFORMAT, "%s:%u: token %s (rank %u) "
                               "is already rank %d (line %u)", path,
                               t->line[i],
                               kvs_vc_quote(t->raw.data + t->off[i],
                                            t->len[i], q, sizeof(q)),
                               i, dup, t->line[dup]);
        }
    }

    return KVS_OK;
}


/* Rank of s[0..n) if it is below max_rank, else KVS_VC_NONE. */
static uint32_t
kvs_vc_rank_below(const kvs_vc_map_t *m, const uint8_t *s, size_t n,
    uint32_t max_rank)
{
    int32_t  r;

    r = kvs_vc_map_find(m, s, n);

    return r >= 0 && (uint32_t) r < max_rank ? (uint32_t) r : KVS_VC_NONE;
}


/*
 * Rank BPE over s[0..n) using only ranks below max_rank, as tiktoken
 * does it (lowest-ranked adjacent pair first, leftmost on a tie).
 * Returns the number of parts left; pos[0..parts] are their boundaries.
 * pos and pr hold n + 1 entries.
 */
static uint32_t
kvs_vc_bpe(const kvs_vc_map_t *m, const uint8_t *s, uint32_t n,
    uint32_t max_rank, uint32_t *pos, uint32_t *pr)
{
    uint32_t  np, i, best, bi;

    for (i = 0; i <= n; i++) {
        pos[i] = i;
    }
    np = n;

    /* pr[i]: rank of parts i and i + 1 joined, KVS_VC_NONE if barred */
    for (i = 0; i + 1 < np; i++) {
        pr[i] = kvs_vc_rank_below(m, s + pos[i], pos[i + 2] - pos[i],
                                  max_rank);
    }

    while (np > 1) {
        best = KVS_VC_NONE;
        bi = 0;
        for (i = 0; i + 1 < np; i++) {
            if (pr[i] < best) {
                best = pr[i];
                bi = i;
            }
        }

        if (best == KVS_VC_NONE) {
            break;
        }

        /* parts bi and bi + 1 become one: drop boundary bi + 1 */
        memmove(pos + bi + 1, pos + bi + 2, (np - bi - 1) * sizeof(*pos));
        if (bi + 2 < np) {
            memmove(pr + bi + 1, pr + bi + 2, (np - bi - 2) * sizeof(*pr));
        }
        np--;

        if (bi > 0) {
            pr[bi - 1] = kvs_vc_rank_below(m, s + pos[bi - 1],
                                           pos[bi + 1] - pos[bi - 1],
                                           max_rank);
        }
        if (bi + 1 < np) {
            pr[bi] = kvs_vc_rank_below(m, s + pos[bi], pos[bi + 2] - pos[bi],
                                       max_rank);
        }
    }

    return np;
}


/* The merges of cv, in the order of the merged token's rank. */
static int
kvs_vc_derive_merges(kvs_vc_vocab_t *cv, const kvs_vc_map_t *m,
    const kvs_vc_ranks_t *t, const char *path,
    kvs_vocab_convert_stats_t *stats, kvs_err_t *err)
{
    int        rc;
    double     t1;
    int32_t    l, r, first_unsplit;
    uint32_t   i, np, n_unsplit;
    uint32_t  *pos, *pr;          /* [max_len + 1] part boundaries, ranks */

    pos = malloc(((size_t) t->max_len + 1) * sizeof(uint32_t));
    pr = malloc(((size_t) t->max_len + 1) * sizeof(uint32_t));
    if (pos == NULL || pr == NULL) {
        rc = kvs_err_set(err, KVS_ENOMEM, "out of memory");
        goto done;
    }

    t1 = kvs_now_s();
    n_unsplit = 0;
    first_unsplit = -1;

    for (i = 0; i < t->n; i++) {
        if (t->len[i] < 2) {
            continue;
        }

        np = kvs_vc_bpe(m, t->raw.data + t->off[i], t->len[i], i, pos, pr);
        if (np != 2) {
            if (n_unsplit++ == 0) {
                first_unsplit = (int32_t) i;
            }
            continue;
        }

        l = kvs_vc_map_find(m, t->raw.data + t->off[i], pos[1]);
        r = kvs_vc_map_find(m, t->raw.data + t->off[i] + pos[1],
                            t->len[i] - pos[1]);
        if (l < 0 || r < 0) {
            /* the parts came out of merges of tokens: cannot happen */
            rc = kvs_err_set(err, KVS_EFORMAT, "%s:%u: internal error "
                             "splitting rank %u", path, t->line[i], i);
            goto done;
        }

        cv->merge[2 * cv->n_merges] = (uint32_t) l;
        cv->merge[2 * cv->n_merges + 1] = (uint32_t) r;
        cv->n_merges++;
    }

    if (stats != NULL) {
        stats->derive_seconds = kvs_now_s() - t1;
        stats->n_unsplit = n_unsplit;
        stats->first_unsplit = first_unsplit;
    }

    rc = KVS_OK;

done:

    free(pos);
    free(pr);

    return rc;
}


int
kvs_vocab_convert_tiktoken(const char *ranks_path, const char *out_path,
    const kvs_vocab_convert_opts_t *opts, kvs_vocab_convert_stats_t *stats,
    kvs_err_t *err)
{
    int              rc;
    double           t0;
    size_t           size;
    uint8_t         *buf;
    uint32_t         i;
    kvs_vc_map_t     m;
    kvs_vc_ranks_t   t;
    kvs_vc_vocab_t   cv;

    t0 = kvs_vc_start(stats);
    memset(&m, 0, sizeof(m));
    memset(&t, 0, sizeof(t));
    memset(&cv, 0, sizeof(cv));

    rc = kvs_vc_slurp(ranks_path, KVS_VC_MAX_FILE, &buf, &size, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_vc_ranks_parse(&t, ranks_path, buf, size, err);
    free(buf);
    if (rc != KVS_OK) {
        goto done;
    }

    rc = kvs_vc_ranks_index(&m, &t, ranks_path, err);
    if (rc != KVS_OK) {
        goto done;
    }

    rc = kvs_vc_check_bytes(&m, 0, ranks_path, err);
    if (rc != KVS_OK) {
        goto done;
    }

    if (kvs_vc_vocab_init(&cv, t.n + kvs_vc_llama3.n_special) != KVS_OK) {
        rc = kvs_err_set(err, KVS_ENOMEM, "out of memory");
        goto done;
    }

    rc = kvs_vc_derive_merges(&cv, &m, &t, ranks_path, stats, err);
    if (rc != KVS_OK) {
        goto done;
    }

    /* GGUF strings: the ranks in the GPT-2 alphabet */
    if (kvs_buf_reserve(&cv.text, 2 * t.raw.len + 16384) != KVS_OK) {
        rc = kvs_err_set(err, KVS_ENOMEM, "out of memory");
        goto done;
    }

    for (i = 0; i < t.n; i++) {
        rc = kvs_vc_vocab_add(&cv, t.raw.data + t.off[i], t.len[i], 1,
                              KVS_TOKT_NORMAL);
        if (rc != KVS_OK) {
            rc = kvs_err_set(err, rc, "out of memory");
            goto done;
        }
    }

    /* the map is over t.raw, which does not move */
    rc = kvs_vc_finish(&cv, &kvs_vc_llama3, &m, 0, ranks_path, opts,
                       out_path, stats, t0, err);

done:

    kvs_vc_map_free(&m);
    kvs_vc_ranks_free(&t);
    kvs_vc_vocab_free(&cv);

    return rc;
}
