/*
 * quant_peer_logits: llama.cpp's logits at every position of a list of
 * token ids, written as `kvserve logits` writes its own (raw float32
 * [n_ids][n_vocab], little-endian), so t/bench/quant_peer.sh can compare
 * the two on one file.  Only llama.h's public API is used; the script
 * compiles this against $LLAMA_CPP_BUILD at bench time, outside the
 * build (no part of kvserve links it).  One sequence, all ids in one
 * batch, every position's logits requested.
 *
 * Usage: quant_peer_logits MODEL.gguf "ID ID ..." OUT.f32 [THREADS]
 * Exit status: 0 done, 1 failure, 2 usage.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"


static int quant_peer_ids(const char *s, llama_token **ids, int32_t *n);
static void quant_peer_quiet(enum ggml_log_level level, const char *text,
    void *data);


int
main(int argc, char **argv)
{
    int32_t                      i, n, n_vocab, threads;
    FILE                        *f;
    llama_token                 *ids;
    struct llama_batch           batch;
    struct llama_model          *model;
    struct llama_context        *ctx;
    const struct llama_vocab    *vocab;
    struct llama_model_params    mp;
    struct llama_context_params  cp;

    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: %s MODEL.gguf \"ID ID ...\" OUT.f32 "
                "[THREADS]\n", argv[0]);
        return 2;
    }

    threads = argc == 5 ? atoi(argv[4]) : 1;
    if (threads < 1 || quant_peer_ids(argv[2], &ids, &n) != 0) {
        fprintf(stderr, "quant_peer_logits: bad ids or threads\n");
        return 2;
    }

    /* llama.cpp logs every tensor at load: only errors matter here */
    llama_log_set(quant_peer_quiet, NULL);
    llama_backend_init();

    mp = llama_model_default_params();
    model = llama_model_load_from_file(argv[1], mp);
    if (model == NULL) {
        fprintf(stderr, "quant_peer_logits: %s: cannot load\n", argv[1]);
        return 1;
    }

    vocab = llama_model_get_vocab(model);
    n_vocab = llama_vocab_n_tokens(vocab);

    for (i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= n_vocab) {
            fprintf(stderr, "quant_peer_logits: id %d out of the "
                    "vocabulary (%d)\n", ids[i], n_vocab);
            return 1;
        }
    }

    cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) (n < 256 ? 256 : n);
    cp.n_batch = cp.n_ctx;
    cp.n_ubatch = cp.n_ctx;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;

    ctx = llama_init_from_model(model, cp);
    if (ctx == NULL) {
        fprintf(stderr, "quant_peer_logits: no context\n");
        return 1;
    }

    batch = llama_batch_init(n, 0, 1);
    for (i = 0; i < n; i++) {
        batch.token[i] = ids[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n;

    if (llama_decode(ctx, batch) != 0) {
        fprintf(stderr, "quant_peer_logits: llama_decode failed\n");
        return 1;
    }

    f = fopen(argv[3], "wb");
    if (f == NULL) {
        perror(argv[3]);
        return 1;
    }

    for (i = 0; i < n; i++) {
        if (fwrite(llama_get_logits_ith(ctx, i), sizeof(float),
                   (size_t) n_vocab, f) != (size_t) n_vocab)
        {
            perror(argv[3]);
            return 1;
        }
    }

    if (fclose(f) != 0) {
        perror(argv[3]);
        return 1;
    }

    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(ids);

    return 0;
}


/* ids separated by spaces or commas, as `kvserve logits -t` takes them */
static int
quant_peer_ids(const char *s, llama_token **ids, int32_t *n)
{
    long          v;
    char         *end;
    size_t        cap;
    llama_token  *a;

    cap = strlen(s) / 2 + 1;
    a = malloc(cap * sizeof(llama_token));
    if (a == NULL) {
        return -1;
    }

    *n = 0;
    for ( ;; ) {
        while (*s == ' ' || *s == ',') {
            s++;
        }
        if (*s == '\0') {
            break;
        }
        v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > 0x7fffffff || (size_t) *n == cap) {
            free(a);
            return -1;
        }
        a[(*n)++] = (llama_token) v;
        s = end;
    }

    if (*n == 0) {
        free(a);
        return -1;
    }

    *ids = a;
    return 0;
}


static void
quant_peer_quiet(enum ggml_log_level level, const char *text, void *data)
{
    if (level == GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}
