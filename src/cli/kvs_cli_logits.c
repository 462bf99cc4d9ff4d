/*
 * kvserve logits: the CPU backend's logits at every position of a list of
 * token ids, raw float32 [n_ids][n_vocab] little-endian, to be compared
 * with an independent implementation (t/unit/test_logits_numpy.py).  No
 * tokenizer, no sampler: one sequence over a paged KV cache, prefilled in
 * steps of --chunk ids (default all in one) on --threads compute threads
 * (default one per online CPU).  With --lora, every position runs under
 * that LoRA adapter (the backend's forward_lora, the adapter in slot 1;
 * docs/lora.md), for t/unit/test_lora_numpy.py.
 * Exit status: 0 done, 1 failure (model, adapter, ids, context, memory,
 * write), 2 usage.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_cli.h"
#include "backend/kvs_backend.h"
#include "base/kvs_threads.h"
#include "kv/kvs_kv_pool.h"
#include "kv/kvs_kv_table.h"
#include "model/kvs_lora.h"
#include "model/kvs_model.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "kvserve logits writes floats as stored: little-endian hosts only"
#endif

#define KVS_CLI_LOGITS_USAGE                                                 \
    "usage: kvserve logits model.gguf -t \"ID ID ...\" [--block N]\n"        \
    "           [--chunk N] [--threads N] [--lora ADAPTER.gguf]\n"          \
    "           [-o out.f32]\n"


typedef struct {
    const char  *path;
    const char  *text;                /* -t: the ids as given */
    const char  *out;                 /* -o; NULL: stdout */
    const char  *lora;                /* --lora; NULL: the base alone */
    uint32_t     block;               /* KV block size, tokens */
    uint32_t     chunk;               /* ids per forward step; 0: all */
    uint32_t     threads;             /* compute threads; 0: one per
                                         online CPU */
} kvs_cli_logits_opts_t;

/* What a run holds; kvs_cli_logits_free() releases it at any stage. */
typedef struct {
    kvs_model_t     *m;
    int32_t         *ids;             /* [n_ids] */
    uint32_t         n_ids;
    kvs_backend_t   *be;
    kvs_kv_pool_t   *pool;
    kvs_kv_table_t   table;           /* the one sequence's blocks */
    float           *logits;          /* [n_ids][n_vocab] */
    kvs_lora_t      *lora;            /* --lora's, in slot 1 */
    uint32_t        *slots;           /* [chunk], each 1 */
} kvs_cli_logits_run_t;


static int kvs_cli_logits_args(int argc, char **argv,
    kvs_cli_logits_opts_t *o);
static int kvs_cli_logits_load(const kvs_cli_logits_opts_t *o,
    kvs_cli_logits_run_t *r, kvs_err_t *err);
static int kvs_cli_logits_forward(const kvs_cli_logits_opts_t *o,
    kvs_cli_logits_run_t *r, kvs_err_t *err);
static int kvs_cli_logits_write(const kvs_cli_logits_opts_t *o,
    const kvs_cli_logits_run_t *r, kvs_err_t *err);
static void kvs_cli_logits_free(kvs_cli_logits_run_t *r);
static int kvs_cli_logits_ids(const char *s, uint32_t n_vocab,
    int32_t **ids, uint32_t *n, kvs_err_t *err);


int
kvs_cli_logits(int argc, char **argv)
{
    int                    rc;
    kvs_err_t              err;
    kvs_cli_logits_run_t   r;
    kvs_cli_logits_opts_t  o;

    rc = kvs_cli_logits_args(argc, argv, &o);
    if (rc != 0) {
        return rc;
    }

    kvs_err_clear(&err);
    memset(&r, 0, sizeof(r));
    rc = 0;

    if (kvs_cli_logits_load(&o, &r, &err) != KVS_OK
        || kvs_cli_logits_forward(&o, &r, &err) != KVS_OK
        || kvs_cli_logits_write(&o, &r, &err) != KVS_OK)
    {
        fprintf(stderr, "kvserve logits: %s\n", err.msg);
        rc = 1;
    }

    kvs_cli_logits_free(&r);

    return rc;
}


/* 0, or 2 after saying what is wrong. */
static int
kvs_cli_logits_args(int argc, char **argv, kvs_cli_logits_opts_t *o)
{
    int                  i;
    char                *end;
    uint32_t             hi, *p;
    unsigned long long   v;

    memset(o, 0, sizeof(*o));
    o->block = KVS_KV_BLOCK_TOKENS;

    for (i = 1; i < argc; i++) {
        if (argv[i][0] != '-' && o->path == NULL) {
            o->path = argv[i];

        } else if (i + 1 < argc && strcmp(argv[i], "-t") == 0) {
            o->text = argv[++i];

        } else if (i + 1 < argc && strcmp(argv[i], "-o") == 0) {
            o->out = argv[++i];

        } else if (i + 1 < argc && strcmp(argv[i], "--lora") == 0) {
            o->lora = argv[++i];

        } else if (i + 1 < argc && (strcmp(argv[i], "--block") == 0
                                    || strcmp(argv[i], "--chunk") == 0
                                    || strcmp(argv[i], "--threads") == 0))
        {
            p = argv[i][2] == 'b' ? &o->block
                : argv[i][2] == 'c' ? &o->chunk : &o->threads;
            hi = p == &o->block ? KVS_KV_MAX_BLOCK_TOKENS
                 : p == &o->threads ? KVS_THREADS_MAX : UINT32_MAX;
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

    if (o->path == NULL || o->text == NULL) {
        fprintf(stderr, "kvserve logits: a model and -t IDS are needed\n"
                KVS_CLI_LOGITS_USAGE);
        return 2;
    }

    return 0;
}


/* The model, and the ids within its vocabulary and its context. */
static int
kvs_cli_logits_load(const kvs_cli_logits_opts_t *o, kvs_cli_logits_run_t *r,
    kvs_err_t *err)
{
    int  rc;

    rc = kvs_model_open(&r->m, o->path, err);
    if (rc != KVS_OK) {
        r->m = NULL;
        return rc;
    }

    rc = kvs_cli_logits_ids(o->text, r->m->hp.n_vocab, &r->ids, &r->n_ids,
                            err);
    if (rc != KVS_OK) {
        return rc;
    }

    /* positions past the trained context are not the model's to answer */
    if (r->m->hp.n_ctx_train != 0 && r->n_ids > r->m->hp.n_ctx_train) {
        return kvs_err_set(err, KVS_ERANGE, "%u ids; the model's context "
                           "is %u", r->n_ids, r->m->hp.n_ctx_train);
    }

    return KVS_OK;
}


/* Prefills the one sequence chunk by chunk, keeping every position's
 * logits. */
static int
kvs_cli_logits_forward(const kvs_cli_logits_opts_t *o,
    kvs_cli_logits_run_t *r, kvs_err_t *err)
{
    int                 rc;
    size_t              off, nv;
    uint32_t            chunk, n_blocks, n, j;
    kvs_batch_t         b;
    kvs_batch_tok_t    *toks;               /* [chunk] */
    kvs_backend_conf_t  bc;

    nv = r->m->hp.n_vocab;
    chunk = o->chunk == 0 || o->chunk > r->n_ids ? r->n_ids : o->chunk;
    n_blocks = (r->n_ids + o->block - 1) / o->block;

    memset(&bc, 0, sizeof(bc));
    bc.n_blocks = n_blocks;
    bc.block_tokens = o->block;
    bc.threads = o->threads;

    if (kvs_backend_cpu_new(&r->be, r->m, &bc, err) != KVS_OK
        || kvs_kv_pool_new(&r->pool, n_blocks, o->block, err) != KVS_OK
        || kvs_kv_table_reserve(&r->table, r->pool, r->n_ids, err)
           != KVS_OK)
    {
        return err->code;
    }

    if (o->lora != NULL) {
        if (r->be->ops->set_lora == NULL) {
            return kvs_err_set(err, KVS_EUNSUPPORTED, "--lora: the backend "
                               "serves no LoRA adapters");
        }

        rc = kvs_lora_open(&r->lora, o->lora, r->m, err);
        if (rc != KVS_OK) {
            r->lora = NULL;
            return rc;
        }

        rc = r->be->ops->set_lora(r->be, 1, r->lora, err);
        if (rc != KVS_OK) {
            return rc;
        }

        r->slots = malloc(chunk * sizeof(uint32_t));
        if (r->slots == NULL) {
            return kvs_err_set(err, KVS_ENOMEM, "out of memory");
        }

        for (j = 0; j < chunk; j++) {
            r->slots[j] = 1;
        }
    }

    toks = malloc(chunk * sizeof(kvs_batch_tok_t));
    r->logits = malloc((size_t) r->n_ids * nv * sizeof(float));

    if (toks == NULL || r->logits == NULL) {
        free(toks);
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    rc = KVS_OK;

    for (off = 0; off < r->n_ids && rc == KVS_OK; off += n) {
        n = r->n_ids - off < chunk ? (uint32_t) (r->n_ids - off) : chunk;

        for (j = 0; j < n; j++) {
            toks[j].token = r->ids[off + j];
            toks[j].pos = (uint32_t) (off + j);
            toks[j].table = &r->table;
            toks[j].want_logits = 1;
        }

        b.toks = toks;
        b.n = n;
        rc = r->lora != NULL
             ? r->be->ops->forward_lora(r->be, &b, r->slots,
                                        r->logits + off * nv, err)
             : kvs_backend_forward(r->be, &b, r->logits + off * nv, err);
    }

    free(toks);

    return rc;
}


static int
kvs_cli_logits_write(const kvs_cli_logits_opts_t *o,
    const kvs_cli_logits_run_t *r, kvs_err_t *err)
{
    int     bad;
    FILE   *f;
    size_t  total;

    total = (size_t) r->n_ids * r->m->hp.n_vocab;
    f = o->out != NULL ? fopen(o->out, "wb") : stdout;
    bad = 1;

    if (f != NULL) {
        bad = fwrite(r->logits, sizeof(float), total, f) != total;
        bad |= (f == stdout ? fflush(f) : fclose(f)) != 0;
    }

    if (bad) {
        return kvs_err_set(err, KVS_EIO, "writing %s: %s",
                           o->out != NULL ? o->out : "stdout",
                           strerror(errno));
    }

    return KVS_OK;
}


static void
kvs_cli_logits_free(kvs_cli_logits_run_t *r)
{
    if (r->pool != NULL) {
        (void) kvs_kv_table_release(&r->table, r->pool, NULL);
    }

    free(r->ids);
    free(r->logits);
    kvs_kv_pool_free(r->pool);
    kvs_backend_free(r->be);          /* borrowed the adapter: first */
    kvs_lora_close(r->lora);
    free(r->slots);
    kvs_model_close(r->m);
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
