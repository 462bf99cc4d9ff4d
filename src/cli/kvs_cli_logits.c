/*
 * kvserve logits: the CPU backend's logits at every position of a list of
 * token ids, raw float32 [n_ids][n_vocab] little-endian, to be compared
 * with an independent implementation (t/unit/test_logits_numpy.py).  No
 * tokenizer, no sampler: one sequence over a paged KV cache, prefilled in
 * steps of --chunk ids (default all in one).  Exit status: 0 done,
 * 1 failure (model, ids, context, memory, write), 2 usage.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_cli.h"
#include "backend/kvs_backend.h"
#include "kv/kvs_kv_pool.h"
#include "kv/kvs_kv_table.h"
#include "model/kvs_model.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "kvserve logits writes floats as stored: little-endian hosts only"
#endif

#define KVS_CLI_LOGITS_USAGE                                                 \
    "usage: kvserve logits model.gguf -t \"ID ID ...\" [--block N]\n"        \
    "           [--chunk N] [-o out.f32]\n"


static int kvs_cli_logits_ids(const char *s, uint32_t n_vocab,
    int32_t **ids, uint32_t *n, kvs_err_t *err);


int
kvs_cli_logits(int argc, char **argv)
{
    int                 i, rc;
    FILE               *f;
    int32_t            *ids;
    char               *end;
    uint32_t            block, chunk, n_ids, n_blocks, n, j, hi, *p;
    size_t              off, nv, total;
    unsigned long long  v;
    float              *logits;             /* [n_ids][n_vocab] */
    kvs_err_t           err;
    const char         *path, *text, *out;
    kvs_model_t        *m;
    kvs_backend_t      *be;
    kvs_kv_pool_t      *pool;
    kvs_batch_tok_t    *toks;               /* [chunk] */
    kvs_kv_table_t      table;
    kvs_batch_t         b;
    kvs_backend_conf_t  bc;

    path = NULL;
    text = NULL;
    out = NULL;
    block = KVS_KV_BLOCK_TOKENS;
    chunk = 0;
    n_ids = 0;

    for (i = 1; i < argc; i++) {
        if (argv[i][0] != '-' && path == NULL) {
            path = argv[i];

        } else if (i + 1 < argc && strcmp(argv[i], "-t") == 0) {
            text = argv[++i];

        } else if (i + 1 < argc && strcmp(argv[i], "-o") == 0) {
            out = argv[++i];

        } else if (i + 1 < argc && (strcmp(argv[i], "--block") == 0
                                    || strcmp(argv[i], "--chunk") == 0))
        {
            p = argv[i][2] == 'b' ? &block : &chunk;
            hi = p == &block ? KVS_KV_MAX_BLOCK_TOKENS : UINT32_MAX;
            errno = 0;
            v = strtoull(argv[++i], &end, 10);

            if (argv[i][0] < '0' || argv[i][0] > '9' || *end != '\0'
                || errno != 0 || v < 1 || v > hi)
            {
                fprintf(stderr, "kvserve logits: %s: expected an integer "
                        "in 1..%u, got \"%s\"\n", argv[i - 1], hi, argv[i]);
                return 2;
            }

            *p = (uint32_t) v;

        } else {
            fprintf(stderr, "kvserve logits: unexpected \"%s\"\n"
                    KVS_CLI_LOGITS_USAGE, argv[i]);
            return 2;
        }
    }

    if (path == NULL || text == NULL) {
        fprintf(stderr, "kvserve logits: a model and -t IDS are needed\n"
                KVS_CLI_LOGITS_USAGE);
        return 2;
    }

    kvs_err_clear(&err);
    memset(&table, 0, sizeof(table));
    m = NULL;
    be = NULL;
    pool = NULL;
    ids = NULL;
    toks = NULL;
    logits = NULL;
    rc = 1;

    if (kvs_model_open(&m, path, &err) != KVS_OK) {
        m = NULL;
        goto done;
    }

    nv = m->hp.n_vocab;

    if (kvs_cli_logits_ids(text, m->hp.n_vocab, &ids, &n_ids, &err)
        != KVS_OK)
    {
        goto done;
    }

    /* positions past the trained context are not the model's to answer */
    if (m->hp.n_ctx_train != 0 && n_ids > m->hp.n_ctx_train) {
        kvs_err_set(&err, KVS_ERANGE, "%u ids; the model's context is %u",
                    n_ids, m->hp.n_ctx_train);
        goto done;
    }

    chunk = chunk == 0 || chunk > n_ids ? n_ids : chunk;
    n_blocks = (n_ids + block - 1) / block;

    memset(&bc, 0, sizeof(bc));
    bc.n_blocks = n_blocks;
    bc.block_tokens = block;

    if (kvs_backend_cpu_new(&be, m, &bc, &err) != KVS_OK
        || kvs_kv_pool_new(&pool, n_blocks, block, &err) != KVS_OK
        || kvs_kv_table_reserve(&table, pool, n_ids, &err) != KVS_OK)
    {
        goto done;
    }

    toks = malloc(chunk * sizeof(kvs_batch_tok_t));
    logits = malloc((size_t) n_ids * nv * sizeof(float));

    if (toks == NULL || logits == NULL) {
        kvs_err_set(&err, KVS_ENOMEM, "out of memory");
        goto done;
    }

    for (off = 0; off < n_ids; off += n) {
        n = n_ids - off < chunk ? (uint32_t) (n_ids - off) : chunk;

        for (j = 0; j < n; j++) {
            toks[j].token = ids[off + j];
            toks[j].pos = (uint32_t) (off + j);
            toks[j].table = &table;
            toks[j].want_logits = 1;
        }

        b.toks = toks;
        b.n = n;

        if (kvs_backend_forward(be, &b, logits + off * nv, &err)
            != KVS_OK)
        {
            goto done;
        }
    }

    total = (size_t) n_ids * nv;
    f = out != NULL ? fopen(out, "wb") : stdout;

    if (f != NULL) {
        rc = fwrite(logits, sizeof(float), total, f) != total;
        rc |= (f == stdout ? fflush(f) : fclose(f)) != 0;
    }

    if (rc != 0) {
        kvs_err_set(&err, KVS_EIO, "writing %s: %s",
                    out != NULL ? out : "stdout", strerror(errno));
    }

done:

    if (rc != 0) {
        fprintf(stderr, "kvserve logits: %s\n", err.msg);
    }

    if (pool != NULL) {
        (void) kvs_kv_table_release(&table, pool, NULL);
    }

    free(ids);
    free(toks);
    free(logits);
    kvs_kv_pool_free(pool);
    kvs_backend_free(be);
    kvs_model_close(m);

    return rc;
}


/* Parses whitespace-separated ids, each in [0, n_vocab), at least one. */
static int
kvs_cli_logits_ids(const char *s, uint32_t n_vocab, int32_t **ids,
    uint32_t *n, kvs_err_t *err)
{
    char                *end;
    int32_t             *a;
    uint32_t             k;
    unsigned long long   v;

    /* k ids take 2k - 1 characters at least */
    a = malloc((strlen(s) / 2 + 1) * sizeof(int32_t));
    if (a == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    for (k = 0; *(s += strspn(s, " \t\r\n")) != '\0'; s = end) {
        errno = 0;
        v = strtoull(s, &end, 10);

        if (*s < '0' || *s > '9' || errno != 0 || v >= n_vocab
            || (*end != '\0' && strchr(" \t\r\n", *end) == NULL))
        {
            free(a);
            return kvs_err_set(err, KVS_EINVAL, "-t: \"%.*s\" is not a "
                               "token id in 0..%u",
                               (int) strcspn(s, " \t\r\n"), s, n_vocab - 1);
        }

        a[k++] = (int32_t) v;
    }

    if (k == 0) {
        free(a);
        return kvs_err_set(err, KVS_EINVAL, "-t: no token ids");
    }

    *ids = a;
    *n = k;

    return KVS_OK;
}
