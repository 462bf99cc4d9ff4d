/*
 * peer_llama.h: what the programs that run llama.cpp beside kvserve
 * (quant_peer_logits.c, arch_peer_greedy.c) share: reading a list of
 * token ids, quieting llama.cpp's load log, and opening a model with one
 * context of at least n_ctx positions.  Only llama.h's public API; the
 * scripts compile these programs against $LLAMA_CPP_BUILD at bench time,
 * outside the build (nothing of kvserve links them).  Static functions:
 * each program is one translation unit.
 */

#ifndef PEER_LLAMA_H
#define PEER_LLAMA_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"


/* ids separated by spaces or commas, as `kvserve logits -t` takes them;
 * 0, or -1 on a bad list (*ids is then not set) */
static int
peer_llama_ids(const char *s, llama_token **ids, int32_t *n)
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


/* llama.cpp logs every tensor at load: errors, which say why a file is
 * refused (an architecture it does not know, say), and warnings, which
 * say what of the file it ignores (newer peers ignore phi3's window) */
static void
peer_llama_log(enum ggml_log_level level, const char *text, void *data)
{
    (void) data;

    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) {
        fputs(text, stderr);
    }
}


/*
 * Loads path with one context of max(n_ctx, 256) positions (batch and
 * ubatch as large, so a prompt goes in as one batch) on `threads`
 * threads; checks ids[0..n) against the vocabulary.  0, or 1 after a
 * message that starts with `who` ("cannot load" when llama.cpp refuses
 * the file).
 */
static int
peer_llama_open(const char *who, const char *path, int32_t n_ctx,
    int32_t threads, const llama_token *ids, int32_t n,
    struct llama_model **model, struct llama_context **ctx,
    int32_t *n_vocab)
{
    int32_t                      i;
    struct llama_model_params    mp;
    struct llama_context_params  cp;

    llama_log_set(peer_llama_log, NULL);
    llama_backend_init();

    mp = llama_model_default_params();
    *model = llama_model_load_from_file(path, mp);
    if (*model == NULL) {
        fprintf(stderr, "%s: %s: cannot load\n", who, path);
        return 1;
    }

    *n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(*model));

    for (i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= *n_vocab) {
            fprintf(stderr, "%s: id %d out of the vocabulary (%d)\n", who,
                    ids[i], *n_vocab);
            return 1;
        }
    }

    cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) (n_ctx < 256 ? 256 : n_ctx);
    cp.n_batch = cp.n_ctx;
    cp.n_ubatch = cp.n_ctx;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;

    *ctx = llama_init_from_model(*model, cp);
    if (*ctx == NULL) {
        fprintf(stderr, "%s: no context\n", who);
        return 1;
    }

    return 0;
}


/* one sequence's tokens ids[0..n) at positions pos0.., logits only for the
 * last one unless all_logits */
static void
peer_llama_fill(struct llama_batch *batch, const llama_token *ids,
    int32_t n, int32_t pos0, int all_logits)
{
    int32_t  i;

    for (i = 0; i < n; i++) {
        batch->token[i] = ids[i];
        batch->pos[i] = pos0 + i;
        batch->n_seq_id[i] = 1;
        batch->seq_id[i][0] = 0;
        batch->logits[i] = all_logits || i == n - 1;
    }

    batch->n_tokens = n;
}

#endif /* PEER_LLAMA_H */
