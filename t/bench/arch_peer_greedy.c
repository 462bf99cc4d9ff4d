/*
 * arch_peer_greedy: llama.cpp's greedy continuation of a list of token
 * ids, for t/bench/arch_peer.sh to compare with kvserve's on the same
 * generated file of each architecture.  Only llama.h's public API is
 * used; the script compiles this against $LLAMA_CPP_BUILD at run time,
 * outside the build (nothing of kvserve links it).
 *
 * The prompt goes in as one batch, then one token per llama_decode over
 * llama.cpp's own KV cache: its incremental path, not a recompute.  Per
 * generated token one line "ID GAP" is printed, GAP being the distance
 * from the chosen logit to the runner-up, and that step's logits are
 * appended to OUT.f32 (raw float32 [N_NEW][n_vocab]), so the script can
 * tell a near-tie from a disagreement.  Ties go to the lowest id, as
 * kvserve's greedy sampler breaks them.
 *
 * Usage: arch_peer_greedy MODEL.gguf "ID ID ..." N_NEW OUT.f32
 * Exit status: 0 done, 1 failure (a model llama.cpp cannot load prints
 * "cannot load"), 2 usage.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"


static int arch_peer_ids(const char *s, llama_token **ids, int32_t *n);
static void arch_peer_log(enum ggml_log_level level, const char *text,
    void *data);


int
main(int argc, char **argv)
{
    int32_t                      i, n, n_new, n_vocab, best, v;
    FILE                        *f;
    float                        gap, second;
    const float                 *lg;
    llama_token                 *ids, tok;
    struct llama_batch           batch;
    struct llama_model          *model;
    struct llama_context        *ctx;
    const struct llama_vocab    *vocab;
    struct llama_model_params    mp;
    struct llama_context_params  cp;

    if (argc != 5 || arch_peer_ids(argv[2], &ids, &n) != 0
        || (n_new = atoi(argv[3])) < 1)
    {
        fprintf(stderr, "usage: %s MODEL.gguf \"ID ID ...\" N_NEW "
                "OUT.f32\n", argv[0]);
        return 2;
    }

    f = fopen(argv[4], "wb");
    if (f == NULL) {
        perror(argv[4]);
        return 1;
    }

    llama_log_set(arch_peer_log, NULL);
    llama_backend_init();

    mp = llama_model_default_params();
    model = llama_model_load_from_file(argv[1], mp);
    if (model == NULL) {
        fprintf(stderr, "arch_peer_greedy: %s: cannot load\n", argv[1]);
        return 1;
    }

    vocab = llama_model_get_vocab(model);
    n_vocab = llama_vocab_n_tokens(vocab);

    cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) (n + n_new < 256 ? 256 : n + n_new);
    cp.n_batch = cp.n_ctx;
    cp.n_ubatch = cp.n_ctx;
    cp.n_threads = 1;
    cp.n_threads_batch = 1;

    ctx = llama_init_from_model(model, cp);
    if (ctx == NULL) {
        fprintf(stderr, "arch_peer_greedy: no context\n");
        return 1;
    }

    batch = llama_batch_init(n, 0, 1);

    for (i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= n_vocab) {
            fprintf(stderr, "arch_peer_greedy: id %d out of the "
                    "vocabulary (%d)\n", ids[i], n_vocab);
            return 1;
        }
        batch.token[i] = ids[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = i == n - 1;
    }
    batch.n_tokens = n;

    for (i = 0; i < n_new; i++) {
        if (llama_decode(ctx, batch) != 0) {
            fprintf(stderr, "arch_peer_greedy: llama_decode failed\n");
            return 1;
        }

        lg = llama_get_logits_ith(ctx, batch.n_tokens - 1);
        best = 0;

        for (v = 1; v < n_vocab; v++) {
            if (lg[v] > lg[best]) {
                best = v;
            }
        }

        second = -1e30f;

        for (v = 0; v < n_vocab; v++) {
            if (v != best && lg[v] > second) {
                second = lg[v];
            }
        }

        gap = lg[best] - second;
        printf("%d %.9g\n", best, (double) gap);

        if (fwrite(lg, sizeof(float), (size_t) n_vocab, f)
            != (size_t) n_vocab)
        {
            perror(argv[4]);
            return 1;
        }

        tok = best;
        batch.token[0] = tok;
        batch.pos[0] = n + i;
        batch.n_seq_id[0] = 1;
        batch.seq_id[0][0] = 0;
        batch.logits[0] = 1;
        batch.n_tokens = 1;
    }

    if (fclose(f) != 0) {
        perror(argv[4]);
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
arch_peer_ids(const char *s, llama_token **ids, int32_t *n)
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


/* llama.cpp logs every tensor at load: errors only, which say why a
 * file is refused (an architecture it does not know) */
static void
arch_peer_log(enum ggml_log_level level, const char *text, void *data)
{
    if (level == GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}
