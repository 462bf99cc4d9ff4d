/*
 * kvserve generate: one prompt, one sequence, text to stdout as it is
 * made, through the engine (kvs_engine.h) stepped on this thread: GGUF
 * model and vocabulary, tokenizer, scheduler (the prompt prefilled in
 * chunks of KVS_CLI_GENERATE_CHUNK tokens, then one token per step), CPU
 * backend over a paged KV cache, sampler, streaming detokenizer.
 *
 * Output, byte for byte: the prompt text exactly as given, then the text
 * of the generated tokens, flushed after every token; nothing is added
 * (no final newline), so that stdout can be compared with a reference
 * text or piped on.  The engine places the detokenizer after the
 * prompt's ids so that the first generated token is decoded as a
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
#include "engine/kvs_engine.h"
#include "kv/kvs_kv_pool.h"
#include "model/kvs_model.h"
#include "tokenizer/kvs_tok.h"

#define KVS_CLI_GENERATE_CHUNK    256   /* prefill tokens per step: bounds
                                           the backend's batch scratch */
#define KVS_CLI_GENERATE_MAX_NEW  (1u << 30)


typedef struct {
    const char           *path;
    const char           *prompt;
    uint32_t              n_new;      /* tokens to generate at most */
    uint32_t              block;      /* KV block size, tokens */
    unsigned              enc_flags;  /* KVS_TOK_SPECIAL or 0 */
    int                   backend;    /* kvs_backend_kind_t; the CPU */
    int                   device;     /* CUDA device ordinal */
    kvs_sample_params_t   sp;
} kvs_cli_generate_opts_t;


static int kvs_cli_generate_args(int argc, char **argv,
    kvs_cli_generate_opts_t *o);
static int kvs_cli_generate_run(const kvs_cli_generate_opts_t *o);
static int kvs_cli_generate_flush(kvs_buf_t *out);
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
    int          i, rc;
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

        rc = kvs_cli_backend_opt("generate", opt, argv[i], &o->backend,
                                 &o->device);
        if (rc != 0) {
            if (rc == 1) {
                continue;
            }

            return rc;
        }


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
    int                  rc;
    double               pre_s, dec_s;
    uint32_t             n_prompt, n_ctx, max_tokens;
    kvs_err_t            err;
    kvs_ids_t            ids;
    const char          *stop;
    kvs_model_t         *m;
    kvs_vocab_t         *v;
    kvs_engine_t        *e;
    kvs_tok_ctx_t        ctx;
    kvs_engine_seq_t    *h, *r;
    kvs_engine_req_t     req;
    kvs_engine_out_t     out;
    kvs_engine_conf_t    conf;
    kvs_engine_stats_t   st;

    memset(&out, 0, sizeof(out));
    memset(&ids, 0, sizeof(ids));
    memset(&ctx, 0, sizeof(ctx));
    kvs_err_clear(&err);

    m = NULL;
    v = NULL;
    e = NULL;
    h = NULL;
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
    max_tokens = o->n_new < n_ctx - n_prompt ? o->n_new : n_ctx - n_prompt;

    /* one sequence: the blocks it can fill, prompt chunks of 256 */
    memset(&conf, 0, sizeof(conf));
    conf.model = m;
    conf.vocab = v;
    conf.block_tokens = o->block;
    conf.n_blocks = (n_prompt + max_tokens - 1 + o->block - 1) / o->block;
    conf.max_batch_tokens = KVS_CLI_GENERATE_CHUNK;
    conf.max_running = 1;
    conf.n_ctx = n_ctx;
    conf.backend = (kvs_backend_kind_t) o->backend;
    conf.device = o->device;

    memset(&req, 0, sizeof(req));
    req.prompt = ids.ids;
    req.n_prompt = n_prompt;
    req.max_tokens = max_tokens;
    req.sample = o->sp;

    if (kvs_engine_new(&e, &conf, &err) != KVS_OK) {
        e = NULL;
        goto failed;
    }

    fprintf(stderr, "kvserve generate: %s\n", kvs_engine_backend(e));

    if (kvs_engine_submit(e, &req, &h, &err) != KVS_OK) {
        h = NULL;
        goto failed;
    }

    if (o->sp.temperature > 0) {
        fprintf(stderr, "kvserve generate: seed %llu\n",
                (unsigned long long) o->sp.seed);
    }

    /* the prompt as given, then each step's text as it comes */

    if (fwrite(o->prompt, 1, strlen(o->prompt), stdout)
        != strlen(o->prompt) || fflush(stdout) != 0)
    {
        kvs_err_set(&err, KVS_EIO, "writing stdout: %s", strerror(errno));
        goto failed;
    }

    while (out.finish == KVS_FINISH_NONE && kvs_engine_step(e)) {
        if (kvs_engine_ready(e, &r, 1) == 0) {
            continue;
        }

        if (kvs_engine_read(e, h, &out) < 0) {
            kvs_err_set(&err, KVS_ENOMEM, "out of memory");
            goto failed;
        }

        if (kvs_cli_generate_flush(&out.text) != 0) {
            kvs_err_set(&err, KVS_EIO, "writing stdout: %s",
                        strerror(errno));
            goto failed;
        }
    }

    if (out.finish == KVS_FINISH_ERROR) {
        kvs_err_set(&err, KVS_EINVAL, "%s", out.error);
        goto failed;
    }

    kvs_engine_stats(e, &st);

    if (out.finish == KVS_FINISH_STOP) {
        stop = "end of text";
    } else {
        stop = max_tokens == o->n_new ? "length" : "context full";
    }

    pre_s = (double) (st.step_ns - st.decode_only_ns) / 1e9;
    dec_s = (double) st.decode_only_ns / 1e9;

    fprintf(stderr, "\nkvserve generate: prompt %u tokens, generated %u "
            "(stop: %s)\n"
            "kvserve generate: prefill %u tokens in %.3f ms, %.1f "
            "tokens/s; decode %llu tokens in %.3f ms, %.1f tokens/s\n",
            n_prompt, out.n_generated, stop,
            n_prompt, pre_s * 1e3, pre_s > 0 ? n_prompt / pre_s : 0.0,
            (unsigned long long) st.decode_only_tokens, dec_s * 1e3,
            dec_s > 0 ? st.decode_only_tokens / dec_s : 0.0);

    rc = 0;
    goto done;

failed:

    fflush(stdout);
    fprintf(stderr, "kvserve generate: %s\n", err.msg);

done:

    if (h != NULL) {
        kvs_engine_close(e, h);
    }

    kvs_engine_out_free(&out);
    kvs_engine_free(e);
    kvs_tok_ctx_free(&ctx);
    kvs_ids_free(&ids);
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


static void
kvs_cli_generate_usage(FILE *f)
{
    fprintf(f,
        "usage: kvserve generate model.gguf [-p TEXT] [-n NEW_TOKENS]\n"
        "           [--temp T] [--top-p P] [--top-k K] [--seed S]\n"
        "           [--block N] [--special] [--backend cpu|cuda|auto]\n"
        "           [--device N]\n"
        "  defaults: -p \"\" -n 256 --temp 1.0 --top-p 0.9 --top-k 0 (off)\n"
        "  --seed from the clock, --block 16; --temp 0 is greedy;\n"
        "  --backend cpu; auto: CUDA device N (0) when it answers\n");
}
