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

#include "peer_llama.h"


int
main(int argc, char **argv)
{
    int32_t                      i, n, n_vocab, threads;
    FILE                        *f;
    llama_token                 *ids;
    struct llama_batch           batch;
    struct llama_model          *model;
    struct llama_context        *ctx;

    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: %s MODEL.gguf \"ID ID ...\" OUT.f32 "
                "[THREADS]\n", argv[0]);
        return 2;
    }

    threads = argc == 5 ? atoi(argv[4]) : 1;
    if (threads < 1 || peer_llama_ids(argv[2], &ids, &n) != 0) {
        fprintf(stderr, "quant_peer_logits: bad ids or threads\n");
        return 2;
    }

    if (peer_llama_open("quant_peer_logits", argv[1], n, threads, ids, n,
                        &model, &ctx, &n_vocab) != 0)
    {
        return 1;
    }

    batch = llama_batch_init(n, 0, 1);
    peer_llama_fill(&batch, ids, n, 0, 1);

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

