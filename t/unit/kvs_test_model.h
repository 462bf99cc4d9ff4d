/*
 * kvs_test_model: helpers shared by the tests that need a model with its
 * vocabulary: a seeded random one written by kvs_gen (the file lives in
 * KVS_TMP only while it is opened: named after the spec and this pid, so
 * concurrent runs do not collide, and unlinked once open), and the
 * stories260K fixture.  Any failure fails the test; an absent fixture
 * is a skip the caller takes.  Header-only, like kvs_test.h.
 */

#ifndef KVS_TEST_MODEL_H
#define KVS_TEST_MODEL_H

#include "kvs_test.h"

#include <unistd.h>

#include "gen/kvs_gen.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_model.h"
#include "tokenizer/kvs_vocab.h"


typedef struct {
    kvs_model_t  *m;
    kvs_vocab_t  *v;
} kvs_test_model_t;


/* Writes spec's model to KVS_TMP and opens it; spec->name names the file,
 * so it must be a plain file name. */
static inline void
kvs_test_model_gen(kvs_test_model_t *md, const kvs_gen_spec_t *spec)
{
    char         name[128];
    const char  *path;
    kvs_err_t    err;

    snprintf(name, sizeof(name), "%s.%d.gguf", spec->name, (int) getpid());
    path = kvs_test_tmp(name);

    if (kvs_gen_write(spec, path, &err) != KVS_OK
        || kvs_model_open(&md->m, path, &err) != KVS_OK
        || kvs_vocab_load(&md->v, md->m->gguf, &err) != KVS_OK)
    {
        fail_msg("%s: %s", path, err.msg);
    }

    unlink(path);
}


/* The small model the engine and server tests run on: 1 layer, 32
 * wide, 2 heads (2 K/V), feed-forward 64, 300 ids, F32; name names the
 * file, n_ctx, seed and tied (output tied to the embedding) vary. */
static inline void
kvs_test_model_small(kvs_test_model_t *md, const char *name, uint32_t n_ctx,
    uint64_t seed, int tied)
{
    kvs_gen_spec_t  spec;

    memset(&spec, 0, sizeof(spec));
    snprintf(spec.name, sizeof(spec.name), "%s", name);
    spec.n_layer = 1;
    spec.n_embd = 32;
    spec.n_head = 2;
    spec.n_head_kv = 2;
    spec.n_ff = 64;
    spec.n_vocab = 300;
    spec.n_ctx = n_ctx;
    spec.dtype = KVS_GGML_F32;
    spec.tied = tied;
    spec.seed = seed;

    kvs_test_model_gen(md, &spec);
}


/* Opens stories260K (f32); -1 when the fixture is absent (a SKIP line is
 * printed), so the caller skips. */
static inline int
kvs_test_model_stories(kvs_test_model_t *md)
{
    const char  *path;
    kvs_err_t    err;

    path = kvs_test_fixture("models/stories260K-f32.gguf");
    if (path == NULL) {
        return -1;
    }

    if (kvs_model_open(&md->m, path, &err) != KVS_OK
        || kvs_vocab_load(&md->v, md->m->gguf, &err) != KVS_OK)
    {
        fail_msg("%s: %s", path, err.msg);
    }

    return 0;
}


static inline void
kvs_test_model_free(kvs_test_model_t *md)
{
    kvs_vocab_free(md->v);
    kvs_model_close(md->m);
}


#endif /* KVS_TEST_MODEL_H */
