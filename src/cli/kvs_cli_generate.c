/*
 * kvserve generate: one prompt, one sequence, text to stdout as it is
 * made.  The smallest complete path through the engine's parts: GGUF
 * model and vocabulary, tokenizer, CPU backend over a paged KV cache
 * (pool and one block table), sampler, streaming detokenizer.  There is
 * no scheduler: the whole prompt is prefilled (in chunks of
 * KVS_CLI_GENERATE_CHUNK tokens), then one token per step.
 *
 * Output, byte for byte: the prompt text exactly as given, then the text
 * of the generated tokens, flushed after every token; nothing is added
 * (no final newline), so that stdout can be compared with a reference
 * text or piped on.  The detokenizer is first fed the prompt's ids (their
 * text discarded) so that the first generated token is decoded as a
 * continuation (an SPM "▁word" keeps its space after a prompt, and loses
 * it after a bare BOS, as llama2.c run.c prints it).
 *
 * Generation stops, without printing the stopping token, when the model
 * samples its EOS, EOT or EOM id or its BOS id (a model that emits BOS is
 * starting a new document; llama2.c run.c stops there, and stories260K
 * relies on it), after NEW_TOKENS tokens, or when prompt plus output fill
 * the model's context length.
 *
 * Defaults follow llama2.c run.c: temperature 1.0, top-p 0.9, top-k off,
 * 256 new tokens, seed from the clock (printed on stderr to replay a run);
 * --temp 0 is greedy.  BOS is added when the vocabulary says so
 * (tokenizer.ggml.add_bos_token, default on for SPM); control-token text
 * in the prompt is plain text unless --special.
 *
 * Exit status: 0 done, 1 failure (model, prompt, memory, write), 2 usage.
 * Timing goes to stderr at the end.
 */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvs_cli.h"
#include "../backend/kvs_cpu.h"
#include "../engine/kvs_sample.h"
#include "../kv/kvs_kv_pool.h"
#include "../kv/kvs_kv_table.h"
#include "../model/kvs_model.h"
#include "../tokenizer/kvs_tok.h"

#define KVS_CLI_GENERATE_CHUNK    256   /* prefill tokens per step: bounds
                                           the backend's batch scratch */
#define KVS_CLI_GENERATE_MAX_NEW  (1u << 30)


typedef struct {
    const char           *path;
    const char           *prompt;
    uint32_t              n_new;      /* tokens to generate at most */
    uint32_t              block;      /* KV block size, tokens */
    unsigned              enc_flags;  /* KVS_TOK_SPECIAL or 0 */
    kvs_sample_params_t   sp;
} kvs_cli_generate_opts_t;


static int kvs_cli_generate_args(int argc, char **argv,
    kvs_cli_generate_opts_t *o);
static int kvs_cli_generate_run(const kvs_cli_generate_opts_t *o);
static int kvs_cli_generate_flush(kvs_buf_t *out);
static double kvs_cli_generate_now(void);
static void kvs_cli_generate_usage(FILE *f);


int
kvs_cli_generate(int argc, char **argv)
{
    int                      rc;
    kvs_cli_generate_opts_t  o;

    /* -1: help was asked for and given */
    rc = kvs_cli_generate_args(argc, argv, &o);
    if (rc != 0) {
        return rc < 0 ? 0 : rc;
    }

    return kvs_cli_generate_run(&o);
}


static int
kvs_cli_generate_args(int argc, char **argv, kvs_cli_generate_opts_t *o)
{
    int          i;
    double       d;
    kvs_err_t    err;
    const char  *opt;

    memset(o, 0, sizeof(*o));
    o->prompt = "";
    o->n_new = 256;
    o->block = KVS_KV_BLOCK_TOKENS;
    o->sp.temperature = 1.0f;
    o->sp.top_p = 0.9f;
    o->sp.seed = (uint64_t) time(NULL);

    for (i = 1; i < argc; i++) {
        opt = argv[i];

        if (strcmp(opt, "-h") == 0 || strcmp(opt, "--help") == 0) {
            kvs_cli_generate_usage(stdout);
            return -1;
        }

        if (strcmp(opt, "--special") == 0) {
            o->enc_flags |= KVS_TOK_SPECIAL;
            continue;
        }

        if (opt[0] != '-') {
            if (o->path != NULL) {
                fprintf(stderr, "kvserve generate: more than one model "
                        "(\"%s\" and \"%s\")\n", o->path, opt);
                kvs_cli_generate_usage(stderr);
                return 2;
            }

            o->path = opt;
            continue;
        }

        if (i + 1 >= argc) {
            fprintf(stderr, "kvserve generate: %s needs a value\n", opt);
            kvs_cli_generate_usage(stderr);
            return 2;
        }

        i++;

        if (strcmp(opt, "-p") == 0 || strcmp(opt, "--prompt") == 0) {
            o->prompt = argv[i];

        } else if (strcmp(opt, "-n") == 0) {
            if (kvs_cli_num("generate", opt, argv[i], 1,
                            KVS_CLI_GENERATE_MAX_NEW, 1, &d) != 0)
            {
                return 2;
            }

            o->n_new = (uint32_t) d;

        } else if (strcmp(opt, "--temp") == 0) {
            if (kvs_cli_num("generate", opt, argv[i], 0, 2, 0, &d) != 0) {
                return 2;
            }

            o->sp.temperature = (float) d;

        } else if (strcmp(opt, "--top-p") == 0) {
            if (kvs_cli_num("generate", opt, argv[i], 0, 1, 0, &d) != 0) {
                return 2;
            }

            o->sp.top_p = (float) d;

        } else if (strcmp(opt, "--top-k") == 0) {
            if (kvs_cli_num("generate", opt, argv[i], 0, INT32_MAX, 1, &d)
                != 0)
            {
                return 2;
            }

            o->sp.top_k = (int32_t) d;

        } else if (strcmp(opt, "--seed") == 0) {
            /* 2^53: every seed up to it is exact in a double */
            if (kvs_cli_num("generate", opt, argv[i], 0,
                            9007199254740992.0, 1, &d) != 0)
            {
                return 2;
            }

            o->sp.seed = (uint64_t) d;

        } else if (strcmp(opt, "--block") == 0) {
            if (kvs_cli_num("generate", opt, argv[i], 1,
                            KVS_KV_MAX_BLOCK_TOKENS, 1, &d) != 0)
            {
                return 2;
            }

            o->block = (uint32_t) d;

        } else {
            fprintf(stderr, "kvserve generate: unknown option \"%s\"\n",
                    opt);
            kvs_cli_generate_usage(stderr);
            return 2;
        }
    }

    if (o->path == NULL) {
        fprintf(stderr, "kvserve generate: no model given\n");
        kvs_cli_generate_usage(stderr);
        return 2;
    }

    /* n_vocab is not known yet; no field checked here depends on it */
    if (kvs_sample_params_check(&o->sp, INT32_MAX, &err) != KVS_OK) {
        fprintf(stderr, "kvserve generate: %s\n", err.msg);
        return 2;
    }

    return 0;
}


static int
kvs_cli_generate_run(const kvs_cli_generate_opts_t *o)
{
    int               rc, have_sampler;
    double            t0, t1, t2;
    int32_t           tok;
    uint32_t          n_prompt, n_ctx, n_total, n_blocks, n_gen, n, i;
    uint64_t          want;
    size_t            off;
    float            *logits;
    kvs_buf_t         out;
    kvs_err_t         err;
    kvs_ids_t         ids;
    kvs_detok_t       d;
    char              stop[48];
    kvs_model_t      *m;
    kvs_vocab_t      *v;
    kvs_cpu_kv_t     *kv;
    kvs_sampler_t     smp;
    kvs_kv_pool_t    *pool;
    kvs_tok_ctx_t     ctx;
    kvs_batch_tok_t  *toks;
    kvs_kv_table_t    table;
    kvs_cpu_model_t  *cm;
    kvs_batch_t       b;

    memset(&out, 0, sizeof(out));
    memset(&ids, 0, sizeof(ids));
    memset(&ctx, 0, sizeof(ctx));
    memset(&table, 0, sizeof(table));
    kvs_err_clear(&err);

    m = NULL;
    v = NULL;
    cm = NULL;
    kv = NULL;
    pool = NULL;
    toks = NULL;
    logits = NULL;
    have_sampler = 0;
    stop[0] = '\0';
    rc = 1;

    if (kvs_model_open(&m, o->path, &err) != KVS_OK) {
        m = NULL;
        goto failed;
    }

    if (kvs_vocab_load(&v, m->gguf, &err) != KVS_OK) {
        v = NULL;
        kvs_err_prefix(&err, "%s", o->path);
        goto failed;
    }

    if (kvs_tok_encode(v, &ctx, o->prompt, strlen(o->prompt),
                       o->enc_flags | (v->add_bos ? KVS_TOK_ADD_BOS : 0),
                       &ids, &err)
        != KVS_OK)
    {
        kvs_err_prefix(&err, "prompt");
        goto failed;
    }

    if (ids.n == 0) {
        kvs_err_set(&err, KVS_EINVAL, "the prompt is empty and the model "
                    "adds no BOS: nothing to start from");
        goto failed;
    }

    /* a token sampled at position n_ctx - 1 is the last that fits */
    n_ctx = m->hp.n_ctx_train != 0 ? m->hp.n_ctx_train : UINT32_MAX;

    if (ids.n >= n_ctx) {
        kvs_err_set(&err, KVS_ERANGE, "the prompt is %zu tokens; the "
                    "model's context is %u, which leaves no room to "
                    "generate", ids.n, n_ctx);
        goto failed;
    }

    n_prompt = (uint32_t) ids.n;
    want = (uint64_t) n_prompt + o->n_new;
    n_total = want < n_ctx ? (uint32_t) want : n_ctx;
    n_blocks = (n_total + o->block - 1) / o->block;

    if (kvs_sampler_init(&smp, &o->sp, m->hp.n_vocab, &err) != KVS_OK) {
        goto failed;
    }

    have_sampler = 1;

    if (kvs_cpu_model_new(&cm, m, &err) != KVS_OK
        || kvs_kv_pool_new(&pool, n_blocks, o->block, &err) != KVS_OK
        || kvs_cpu_kv_new(&kv, cm, n_blocks, o->block, &err) != KVS_OK
        || kvs_kv_table_reserve(&table, pool, n_total, &err) != KVS_OK)
    {
        goto failed;
    }

    n = n_prompt < KVS_CLI_GENERATE_CHUNK ? n_prompt
                                          : KVS_CLI_GENERATE_CHUNK;
    toks = malloc(n * sizeof(kvs_batch_tok_t));
    logits = malloc((size_t) m->hp.n_vocab * sizeof(float));

    if (toks == NULL || logits == NULL) {
        kvs_err_set(&err, KVS_ENOMEM, "out of memory");
        goto failed;
    }

    if (o->sp.temperature > 0) {
        fprintf(stderr, "kvserve generate: seed %llu\n",
                (unsigned long long) o->sp.seed);
    }

    /* the prompt as given; the detokenizer learns where it stands */

    if (fwrite(o->prompt, 1, strlen(o->prompt), stdout)
        != strlen(o->prompt) || fflush(stdout) != 0)
    {
        kvs_err_set(&err, KVS_EIO, "writing stdout: %s", strerror(errno));
        goto failed;
    }

    kvs_detok_init(&d, v, 0);

    for (i = 0; i < n_prompt; i++) {
        if (kvs_detok_push(&d, ids.ids[i], &out, &err) != KVS_OK) {
            goto failed;
        }

        out.len = 0;
    }

    t0 = kvs_cli_generate_now();

    for (off = 0; off < n_prompt; off += n) {
        n = n_prompt - off < KVS_CLI_GENERATE_CHUNK
            ? (uint32_t) (n_prompt - off) : KVS_CLI_GENERATE_CHUNK;

        for (i = 0; i < n; i++) {
            toks[i].token = ids.ids[off + i];
            toks[i].pos = (uint32_t) (off + i);
            toks[i].table = &table;
            toks[i].want_logits = off + i + 1 == n_prompt;
        }

        b.toks = toks;
        b.n = n;

        if (kvs_cpu_forward(cm, kv, &b, logits, &err) != KVS_OK) {
            goto failed;
        }
    }

    t1 = kvs_cli_generate_now();

    /* generated token g sits at position n_prompt + g */

    n_gen = 0;

    for ( ;; ) {
        if (kvs_sample(&smp, logits, &tok, &err) != KVS_OK) {
            goto failed;
        }

        if (kvs_vocab_ends_text(v, tok)) {
            snprintf(stop, sizeof(stop), "end of text, token %d",
                     (int) tok);
            break;
        }

        if (kvs_sampler_accept(&smp, tok, &err) != KVS_OK
            || kvs_detok_push(&d, tok, &out, &err) != KVS_OK)
        {
            goto failed;
        }

        if (kvs_cli_generate_flush(&out) != 0) {
            kvs_err_set(&err, KVS_EIO, "writing stdout: %s",
                        strerror(errno));
            goto failed;
        }

        n_gen++;

        if (n_prompt + n_gen >= n_total) {
            snprintf(stop, sizeof(stop), "%s",
                     n_gen == o->n_new ? "length" : "context full");
            break;
        }

        toks[0].token = tok;
        toks[0].pos = n_prompt + n_gen - 1;
        toks[0].table = &table;
        toks[0].want_logits = 1;
        b.toks = toks;
        b.n = 1;

        if (kvs_cpu_forward(cm, kv, &b, logits, &err) != KVS_OK) {
            goto failed;
        }
    }

    t2 = kvs_cli_generate_now();

    if (kvs_detok_finish(&d, &out) != KVS_OK
        || kvs_cli_generate_flush(&out) != 0)
    {
        kvs_err_set(&err, KVS_EIO, "writing stdout: %s", strerror(errno));
        goto failed;
    }

    /* decode steps: every generated token but the last was fed back */
    n = n_gen > 0 ? n_gen - 1 : 0;

    fprintf(stderr, "\nkvserve generate: prompt %u tokens, generated %u "
            "(stop: %s)\n"
            "kvserve generate: prefill %u tokens in %.3f ms, %.1f "
            "tokens/s; decode %u tokens in %.3f ms, %.1f tokens/s\n",
            n_prompt, n_gen, stop,
            n_prompt, (t1 - t0) * 1e3,
            t1 > t0 ? n_prompt / (t1 - t0) : 0.0,
            n, (t2 - t1) * 1e3, t2 > t1 ? n / (t2 - t1) : 0.0);

    rc = 0;
    goto done;

failed:

    fflush(stdout);
    fprintf(stderr, "kvserve generate: %s\n", err.msg);

done:

    if (pool != NULL) {
        (void) kvs_kv_table_release(&table, pool, NULL);
    }

    if (have_sampler) {
        kvs_sampler_free(&smp);
    }

    free(toks);
    free(logits);
    kvs_cpu_kv_free(kv);
    kvs_kv_pool_free(pool);
    kvs_cpu_model_free(cm);
    kvs_tok_ctx_free(&ctx);
    kvs_ids_free(&ids);
    kvs_buf_free(&out);
    kvs_vocab_free(v);
    kvs_model_close(m);

    return rc;
}


/* Writes and empties out; the token is on its way before the next step. */
static int
kvs_cli_generate_flush(kvs_buf_t *out)
{
    if (out->len > 0 && fwrite(out->data, 1, out->len, stdout) != out->len)
    {
        return -1;
    }

    out->len = 0;

    return fflush(stdout) == 0 ? 0 : -1;
}


static double
kvs_cli_generate_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}


static void
kvs_cli_generate_usage(FILE *f)
{
    fprintf(f,
        "usage: kvserve generate model.gguf [-p TEXT] [-n NEW_TOKENS]\n"
        "           [--temp T] [--top-p P] [--top-k K] [--seed S]\n"
        "           [--block N] [--special]\n"
        "  defaults: -p \"\" -n 256 --temp 1.0 --top-p 0.9 --top-k 0 (off)\n"
        "  --seed from the clock, --block 16; --temp 0 is greedy\n");
}
