/*
 * bench_lora.h: what bench_lora and bench_lora_paging share: the base
 * model they generate (a preset, F32, seed 1) in KVS_TMP.  Besides the
 * generator's presets (tiny, small, 100m) there is "8b-layer": one layer
 * of Llama 3 8B's shapes (4096 wide, 32 heads, 8 KV heads, FFN 14336), a
 * vocabulary of 2048, so that a rank-r adapter stands to the layer's
 * weights as on the real model (rank 16 on every matrix: 0.6% of them;
 * on the small preset, 9.9%).
 */

#ifndef BENCH_LORA_H
#define BENCH_LORA_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen/kvs_gen.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_model.h"


/* KVS_TMP, or /tmp. */
static inline const char *
bench_lora_tmp(void)
{
    return getenv("KVS_TMP") != NULL ? getenv("KVS_TMP") : "/tmp";
}


/* Writes preset's model (F32, seed 1, named tag) to
 * KVS_TMP/tag.<pid>.gguf, its name into path[len]. */
static inline int
bench_lora_base(const char *preset, const char *tag, char *path,
    size_t len, kvs_err_t *err)
{
    kvs_gen_spec_t  spec;

    if (strcmp(preset, "8b-layer") == 0) {
        if (kvs_gen_preset(&spec, "small", err) != KVS_OK) {
            return err->code;
        }
        spec.n_layer = 1;
        spec.n_embd = 4096;
        spec.n_head = 32;
        spec.n_head_kv = 8;
        spec.n_ff = 14336;
        spec.n_vocab = 2048;

    } else if (kvs_gen_preset(&spec, preset, err) != KVS_OK) {
        return err->code;
    }

    spec.dtype = KVS_GGML_F32;
    spec.seed = 1;
    snprintf(spec.name, sizeof(spec.name), "%s", tag);
    snprintf(path, len, "%s/%s.%d.gguf", bench_lora_tmp(), tag,
             (int) getpid());

    return kvs_gen_write(&spec, path, err);
}

/* The model's parameters: every tensor's elements. */
static inline uint64_t
bench_lora_params(const kvs_model_t *m)
{
    uint32_t                  d;
    uint64_t                  i, n, total;
    const kvs_gguf_tensor_t  *t;

    total = 0;

    for (i = 0; i < kvs_gguf_n_tensors(m->gguf); i++) {
        t = kvs_gguf_tensor_at(m->gguf, i);
        n = 1;
        for (d = 0; d < t->n_dims; d++) {
            n *= t->ne[d];
        }
        total += n;
    }

    return total;
}

#endif /* BENCH_LORA_H */
