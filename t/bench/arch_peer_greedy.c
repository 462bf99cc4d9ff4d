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

#include "peer_llama.h"


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

    if (argc != 5 || peer_llama_ids(argv[2], &ids, &n) != 0
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

    if (peer_llama_open("arch_peer_greedy", argv[1], n + n_new, 1, ids, n,
                        &model, &ctx, &n_vocab) != 0)
    {
        return 1;
    }

    batch = llama_batch_init(n, 0, 1);
    peer_llama_fill(&batch, ids, n, 0, 0);

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
        peer_llama_fill(&batch, &tok, 1, n + i, 1);
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

