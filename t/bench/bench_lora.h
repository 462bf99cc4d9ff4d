/*
 * bench_lora.h: what bench_lora and bench_lora_paging share: the base
 * model they generate (a preset, F32, seed 1) in KVS_TMP.
 */

#ifndef BENCH_LORA_H
#define BENCH_LORA_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "gen/kvs_gen.h"
#include "model/kvs_ggml_type.h"


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

    if (kvs_gen_preset(&spec, preset, err) != KVS_OK) {
        return err->code;
    }

    spec.dtype = KVS_GGML_F32;
    spec.seed = 1;
    snprintf(spec.name, sizeof(spec.name), "%s", tag);
    snprintf(path, len, "%s/%s.%d.gguf", bench_lora_tmp(), tag,
             (int) getpid());

    return kvs_gen_write(&spec, path, err);
}

#endif /* BENCH_LORA_H */
