/*
 * test_gguf_read: the GGUF reader and hyper-parameters against real files:
 * stories260K (values from ../shared/fixtures/models/README.md, and its
 * weights compared with the llama2.c checkpoint they were converted from)
 * and every vocab .gguf (the table in ../shared/fixtures/vocab/README.md).
 */

#include "kvs_test.h"

#include "model/kvs_gguf.h"
#include "model/kvs_hparams.h"
#include "model/kvs_model.h"


static kvs_gguf_t *
open_fixture(const char *rel)
{
    const char  *path;
    kvs_err_t    err;
    kvs_gguf_t  *g;

    path = kvs_test_fixture(rel);
    if (path == NULL) {
        return NULL;
    }

    if (kvs_gguf_open(&g, path, &err) != KVS_OK) {
        fail_msg("%s: %s", path, err.msg);
    }

    return g;
}


static void
assert_str(const kvs_gguf_t *g, const char *key, const char *want)
{
    kvs_err_t       err;
    kvs_gguf_str_t  s;

    if (kvs_gguf_get_str(g, key, &s, &err) != KVS_OK) {
        fail_msg("%s: %s", key, err.msg);
    }
    if (!kvs_gguf_str_eq(s, want)) {
        fail_msg("%s = '%.*s', want '%s'", key, (int) s.len, s.ptr, want);
    }
}


static void
assert_u32(const kvs_gguf_t *g, const char *key, uint32_t want)
{
    uint32_t   v;
    kvs_err_t  err;

    if (kvs_gguf_get_u32(g, key, &v, &err) != KVS_OK) {
        fail_msg("%s: %s", key, err.msg);
    }
    assert_int_equal(v, want);
}


static void
test_stories_header(void **state)
{
    float                     eps;
    kvs_gguf_t               *g;
    const kvs_gguf_tensor_t  *t;

    g = open_fixture("models/stories260K-f32.gguf");
    if (g == NULL) {
        skip();
    }

    assert_int_equal(kvs_gguf_version(g), 3);
    assert_int_equal(kvs_gguf_n_tensors(g), 48);
    assert_int_equal(kvs_gguf_n_kv(g), 19);
    assert_int_equal(kvs_gguf_alignment(g), 32);
    assert_int_equal(kvs_gguf_data_offset(g), 14176);
    assert_int_equal(kvs_gguf_file_size(g), 1185376);

    /* the README's key order, first and last */
    assert_true(kvs_gguf_str_eq(kvs_gguf_kv_at(g, 0)->key,
                                "tokenizer.ggml.tokens"));
    assert_true(kvs_gguf_str_eq(kvs_gguf_kv_at(g, 18)->key,
                                "llama.attention.layer_norm_rms_epsilon"));

    assert_str(g, "tokenizer.ggml.model", "llama");
    assert_str(g, "general.architecture", "llama");
    assert_str(g, "general.name", "llama");
    assert_u32(g, "tokenizer.ggml.unknown_token_id", 0);
    assert_u32(g, "tokenizer.ggml.bos_token_id", 1);
    assert_u32(g, "tokenizer.ggml.eos_token_id", 2);
    assert_u32(g, "tokenizer.ggml.seperator_token_id", 4294967295u);
    assert_u32(g, "tokenizer.ggml.padding_token_id", 4294967295u);
    assert_u32(g, "llama.context_length", 2048);
    assert_u32(g, "llama.embedding_length", 64);
    assert_u32(g, "llama.feed_forward_length", 172);
    assert_u32(g, "llama.attention.head_count", 8);
    assert_u32(g, "llama.attention.head_count_kv", 4);
    assert_u32(g, "llama.block_count", 5);
    assert_u32(g, "llama.rope.dimension_count", 8);

    assert_int_equal(kvs_gguf_get_f32(g,
        "llama.attention.layer_norm_rms_epsilon", &eps, NULL), KVS_OK);
    assert_true(eps == 1e-5f);

    assert_null(kvs_gguf_find(g, "tokenizer.ggml.pre"));
    assert_null(kvs_gguf_find(g, "llama.rope.freq_base"));

    t = kvs_gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->type, 0);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 64);
    assert_int_equal(t->ne[1], 512);
    assert_int_equal(t->offset, 0);

    t = kvs_gguf_find_tensor(g, "output_norm.weight");
    assert_int_equal(t->offset, 131072);
    assert_int_equal(t->n_dims, 1);

    t = kvs_gguf_find_tensor(g, "output.weight");
    assert_int_equal(t->offset, 131328);

    /* blocks start at 262400 and take 181760 bytes each */
    assert_int_equal(kvs_gguf_find_tensor(g, "blk.0.attn_q.weight")->offset,
                     262400);
    assert_int_equal(kvs_gguf_find_tensor(g, "blk.1.attn_q.weight")->offset,
                     262400 + 181760);
    assert_int_equal(kvs_gguf_find_tensor(g, "blk.4.ffn_gate.weight")->ne[1],
                     172);
    assert_int_equal(kvs_gguf_find_tensor(g, "blk.4.ffn_down.weight")->ne[0],
                     172);

    /* the classifier is a stored copy of the (shared) embedding */
    assert_memory_equal(kvs_gguf_find_tensor(g, "token_embd.weight")->data,
                        kvs_gguf_find_tensor(g, "output.weight")->data,
                        64 * 512 * 4);

    kvs_gguf_close(g);
}


static void
test_stories_vocab(void **state)
{
    char             want[8];
    double           score;
    int64_t          type;
    uint64_t         i;
    kvs_gguf_t      *g;
    kvs_gguf_str_t   s;
    kvs_gguf_arr_t   tokens, scores, types;
    kvs_gguf_iter_t  it;

    g = open_fixture("models/stories260K-f32.gguf");
    if (g == NULL) {
        skip();
    }

    assert_int_equal(kvs_gguf_get_arr(g, "tokenizer.ggml.tokens", &tokens,
                                      NULL), KVS_OK);
    assert_int_equal(kvs_gguf_get_arr(g, "tokenizer.ggml.scores", &scores,
                                      NULL), KVS_OK);
    assert_int_equal(kvs_gguf_get_arr(g, "tokenizer.ggml.token_type",
                                      &types, NULL), KVS_OK);
    assert_int_equal(tokens.type, KVS_GGUF_STR);
    assert_int_equal(tokens.n, 512);
    assert_int_equal(scores.type, KVS_GGUF_F32);
    assert_int_equal(types.type, KVS_GGUF_I32);

    kvs_gguf_iter_init(&it, &tokens);
    for (i = 0; i < 512; i++) {
        assert_true(kvs_gguf_iter_str(&it, &s));

        assert_int_equal(kvs_gguf_arr_int(&types, i, &type), KVS_OK);
        assert_int_equal(kvs_gguf_arr_float(&scores, i, &score), KVS_OK);

        if (i == 0) {
            assert_true(kvs_gguf_str_eq(s, "<unk>"));
            assert_int_equal(type, 2);
        } else if (i <= 2) {
            assert_true(kvs_gguf_str_eq(s, i == 1 ? "<s>" : "</s>"));
            assert_int_equal(type, 3);
        } else if (i <= 258) {
            snprintf(want, sizeof(want), "<0x%02X>", (unsigned) (i - 3));
            assert_true(kvs_gguf_str_eq(s, want));
            assert_int_equal(type, 6);
        } else {
            assert_int_equal(type, 1);
            assert_true(score == -(double) (i - 259));
        }

        if (i == 410) {
            /* the single space, as the SentencePiece marker U+2581 */
            assert_true(kvs_gguf_str_eq(s, "\xe2\x96\x81"));
        }
    }
    assert_false(kvs_gguf_iter_str(&it, &s));

    /* out-of-range and wrong-type element access fail cleanly */
    assert_int_equal(kvs_gguf_arr_int(&types, 512, &type), KVS_EINVAL);
    assert_int_equal(kvs_gguf_arr_int(&scores, 0, &type), KVS_ETYPE);

    kvs_gguf_close(g);
}


/* The GGUF's tensors hold the same floats as the llama2.c checkpoint. */
static void
test_stories_matches_checkpoint(void **state)
{
    size_t                    len;
    uint8_t                  *bin;
    const char               *path;
    kvs_gguf_t               *g;
    const kvs_gguf_tensor_t  *t;

    path = kvs_test_fixture("models/stories260K.bin");
    g = open_fixture("models/stories260K-f32.gguf");
    if (path == NULL || g == NULL) {
        kvs_gguf_close(g);
        skip();
    }

    bin = kvs_test_slurp(path, &len);
    assert_non_null(bin);
    assert_int_equal(len, 1056540);

    /* offsets from the README's table of the .bin layout */
    t = kvs_gguf_find_tensor(g, "token_embd.weight");
    assert_memory_equal(bin + 28, t->data, 131072);

    t = kvs_gguf_find_tensor(g, "blk.0.attn_norm.weight");
    assert_memory_equal(bin + 131100, t->data, 256);

    t = kvs_gguf_find_tensor(g, "blk.0.attn_q.weight");
    assert_memory_equal(bin + 132380, t->data, 16384);

    t = kvs_gguf_find_tensor(g, "blk.4.ffn_up.weight");
    assert_memory_equal(bin + 819740 + 4 * 11008 * 4, t->data, 44032);

    t = kvs_gguf_find_tensor(g, "output_norm.weight");
    assert_memory_equal(bin + 1039900, t->data, 256);

    free(bin);
    kvs_gguf_close(g);
}


static void
test_stories_hparams(void **state)
{
    kvs_err_t      err;
    kvs_model_t   *m;
    const char    *path;
    kvs_hparams_t *hp;

    path = kvs_test_fixture("models/stories260K-f32.gguf");
    if (path == NULL) {
        skip();
    }

    if (kvs_model_open(&m, path, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }

    hp = &m->hp;
    assert_string_equal(hp->arch, "llama");
    assert_int_equal(hp->n_layer, 5);
    assert_int_equal(hp->n_head, 8);
    assert_int_equal(hp->n_head_kv, 4);
    assert_int_equal(hp->head_dim_k, 8);
    assert_int_equal(hp->head_dim_v, 8);
    assert_int_equal(hp->n_embd, 64);
    assert_int_equal(hp->n_ff, 172);
    assert_int_equal(hp->n_ctx_train, 2048);
    assert_int_equal(hp->n_vocab, 512);
    assert_int_equal(hp->n_rot, 8);
    assert_true(hp->rope_freq_base == 10000.0);
    assert_true(hp->norm_eps == (double) 1e-5f);
    assert_int_equal(hp->rope_scaling, KVS_ROPE_SCALING_NONE);
    assert_false(hp->tied_embeddings);
    assert_false(hp->has_rope_freqs);

    /* 260032 trained floats (README) + the stored classifier copy */
    assert_int_equal(hp->n_params, 260032 + 64 * 512);

    /* 2 x layers x kv_heads x head_dim x bytes */
    assert_int_equal(kvs_hparams_kv_bytes_per_token(hp, 2),
                     2 * 5 * 4 * 8 * 2);
    assert_int_equal(kvs_hparams_kv_bytes_per_token(hp, 4), 1280);

    assert_int_equal(m->file_size, 1185376);

    kvs_model_close(m);
}


/* ../shared/fixtures/vocab/README.md, "GGUF facts for the copied files". */
static const struct {
    const char  *file;
    const char  *arch;
    const char  *model;
    const char  *pre;                 /* NULL: absent */
    uint64_t     n_tokens;
    int64_t      n_merges;            /* -1: absent */
    int64_t      bos, eos;            /* -1: absent */
    int          add_bos;             /* -1: absent */
    const char  *hparams_err;         /* what kvs_hparams_read says */
} vocabs[] = {
    { "ggml-vocab-baichuan.gguf", "baichuan", "llama", NULL, 64000, -1,
      1, 2, -1, "architecture 'baichuan' is not supported" },
    { "ggml-vocab-bert-bge.gguf", "bert", "bert", "bert-bge", 30522, -1,
      -1, -1, -1, "architecture 'bert' is not supported" },
    { "ggml-vocab-deepseek-coder.gguf", "llama", "gpt2", "deepseek-coder",
      32256, 31757, 32013, 32014, 1,
      "missing tensor 'token_embd.weight'" },
    { "ggml-vocab-falcon.gguf", "falcon", "gpt2", "falcon", 65024, 64784,
      11, 11, -1, "architecture 'falcon' is not supported" },
    { "ggml-vocab-gpt-2.gguf", "gpt2", "gpt2", "gpt-2", 50257, 50000,
      50256, 50256, -1, "architecture 'gpt2' is not supported" },
    { "ggml-vocab-gpt-neox.gguf", "gptneox", "gpt2", NULL, 50432, 50009,
      0, 0, -1, "architecture 'gptneox' is not supported" },
    { "ggml-vocab-llama-spm.gguf", "llama", "llama", "default", 32000, -1,
      1, 2, 1, "missing tensor 'token_embd.weight'" },
    { "ggml-vocab-mpt.gguf", "mpt", "gpt2", "mpt", 50432, 50009, 0, 0, -1,
      "architecture 'mpt' is not supported" },
    { "ggml-vocab-phi-3.gguf", "phi3", "llama", "default", 32064, -1,
      1, 32000, 1, "missing required key 'phi3.attention.sliding_window'" },
    { "ggml-vocab-starcoder.gguf", "starcoder2", "gpt2", "starcoder", 49152,
      48872, 0, 0, -1, "architecture 'starcoder2' is not supported" },
};


static void
test_vocab_files(void **state)
{
    int             b, seen;
    char            rel[128];
    size_t          i;
    uint32_t        id;
    kvs_err_t       err;
    kvs_gguf_t     *g;
    kvs_gguf_arr_t  arr;
    kvs_hparams_t   hp;

    seen = 0;

    for (i = 0; i < sizeof(vocabs) / sizeof(vocabs[0]); i++) {
        snprintf(rel, sizeof(rel), "vocab/%s", vocabs[i].file);
        g = open_fixture(rel);
        if (g == NULL) {
            continue;
        }
        seen++;

        print_message("  %s\n", vocabs[i].file);

        assert_int_equal(kvs_gguf_version(g), 3);
        assert_int_equal(kvs_gguf_n_tensors(g), 0);
        assert_str(g, "general.architecture", vocabs[i].arch);
        assert_str(g, "tokenizer.ggml.model", vocabs[i].model);

        if (vocabs[i].pre) {
            assert_str(g, "tokenizer.ggml.pre", vocabs[i].pre);
        } else {
            assert_null(kvs_gguf_find(g, "tokenizer.ggml.pre"));
        }

        assert_int_equal(kvs_gguf_get_arr(g, "tokenizer.ggml.tokens", &arr,
                                          NULL), KVS_OK);
        assert_int_equal(arr.type, KVS_GGUF_STR);
        assert_int_equal(arr.n, vocabs[i].n_tokens);

        if (vocabs[i].n_merges >= 0) {
            assert_int_equal(kvs_gguf_get_arr(g, "tokenizer.ggml.merges",
                                              &arr, NULL), KVS_OK);
            assert_int_equal(arr.n, vocabs[i].n_merges);
        } else {
            assert_null(kvs_gguf_find(g, "tokenizer.ggml.merges"));
        }

        if (vocabs[i].bos >= 0) {
            assert_int_equal(kvs_gguf_get_u32(g,
                "tokenizer.ggml.bos_token_id", &id, NULL), KVS_OK);
            assert_int_equal(id, vocabs[i].bos);
            assert_int_equal(kvs_gguf_get_u32(g,
                "tokenizer.ggml.eos_token_id", &id, NULL), KVS_OK);
            assert_int_equal(id, vocabs[i].eos);
        } else {
            assert_null(kvs_gguf_find(g, "tokenizer.ggml.bos_token_id"));
        }

        if (vocabs[i].add_bos >= 0) {
            assert_int_equal(kvs_gguf_get_bool(g,
                "tokenizer.ggml.add_bos_token", &b, NULL), KVS_OK);
            assert_int_equal(b, vocabs[i].add_bos);
        } else {
            assert_null(kvs_gguf_find(g, "tokenizer.ggml.add_bos_token"));
        }

        /* vocab-only files are not models: the reason names the key */
        assert_int_not_equal(kvs_hparams_read(&hp, g, &err) == KVS_OK
                             && kvs_model_check_tensors(g, &hp, &err)
                                == KVS_OK, 1);
        if (strstr(err.msg, vocabs[i].hparams_err) == NULL) {
            fail_msg("%s: hparams error '%s', want '%s'", vocabs[i].file,
                     err.msg, vocabs[i].hparams_err);
        }

        kvs_gguf_close(g);
    }

    if (seen == 0) {
        skip();
    }
}


/* A real header with RoPE scaling: deepseek-coder's (linear, factor 4). */
static void
test_hparams_rope_scaling(void **state)
{
    kvs_err_t      err;
    kvs_gguf_t    *g;
    kvs_hparams_t  hp;

    g = open_fixture("vocab/ggml-vocab-deepseek-coder.gguf");
    if (g == NULL) {
        skip();
    }

    if (kvs_hparams_read(&hp, g, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }

    assert_int_equal(hp.n_layer, 32);
    assert_int_equal(hp.n_embd, 4096);
    assert_int_equal(hp.n_ff, 11008);
    assert_int_equal(hp.n_head, 32);
    assert_int_equal(hp.n_head_kv, 32);
    assert_int_equal(hp.head_dim_k, 128);
    assert_int_equal(hp.n_ctx_train, 16384);
    assert_int_equal(hp.n_vocab, 32256);
    assert_true(hp.rope_freq_base == 100000.0);
    assert_true(hp.norm_eps == (double) 1e-6f);
    assert_int_equal(hp.rope_scaling, KVS_ROPE_SCALING_LINEAR);
    assert_true(hp.rope_factor == 4.0);

    /* 2 x 32 layers x 32 KV heads x 128 x 2 bytes = 512 KiB per token */
    assert_int_equal(kvs_hparams_kv_bytes_per_token(&hp, 2), 524288);

    kvs_gguf_close(g);
}


static void
test_typed_getters(void **state)
{
    int              b;
    double           f;
    uint8_t          u8;
    uint32_t         u32;
    uint64_t         u;
    kvs_err_t        err;
    kvs_gguf_t      *g;
    kvs_gguf_str_t   s;

    g = open_fixture("vocab/ggml-vocab-llama-spm.gguf");
    if (g == NULL) {
        skip();
    }

    assert_int_equal(kvs_gguf_get_u32(g, "general.architecture", &u32, &err),
                     KVS_ETYPE);
    assert_non_null(strstr(err.msg, "'general.architecture' is str"));

    assert_int_equal(kvs_gguf_get_str(g, "no.such.key", &s, &err),
                     KVS_ENOTFOUND);
    assert_non_null(strstr(err.msg, "'no.such.key'"));

    assert_int_equal(kvs_gguf_get_u8(g, "tokenizer.ggml.bos_token_id", &u8,
                                     &err), KVS_ETYPE);
    assert_int_equal(kvs_gguf_get_bool(g, "tokenizer.ggml.bos_token_id", &b,
                                       &err), KVS_ETYPE);

    /* lenient getters widen integers and floats, never strings */
    assert_int_equal(kvs_gguf_get_uint(g, "tokenizer.ggml.eos_token_id", &u,
                                       &err), KVS_OK);
    assert_int_equal(u, 2);
    assert_int_equal(kvs_gguf_get_uint(g, "tokenizer.ggml.add_bos_token", &u,
                                       &err), KVS_ETYPE);
    assert_int_equal(kvs_gguf_get_float(g, "tokenizer.ggml.eos_token_id", &f,
                                        &err), KVS_ETYPE);
    assert_int_equal(kvs_gguf_get_float(g, "tokenizer.ggml.model", &f, NULL),
                     KVS_ETYPE);

    kvs_gguf_close(g);
}


static void
test_open_errors(void **state)
{
    kvs_err_t    err;
    kvs_gguf_t  *g;

    assert_int_equal(kvs_gguf_open(&g, "/nonexistent/x.gguf", &err),
                     KVS_EIO);
    assert_null(g);
    assert_non_null(strstr(err.msg, "/nonexistent/x.gguf"));
    assert_non_null(strstr(err.msg, "No such file"));

    assert_int_equal(kvs_gguf_open(&g, "/", &err), KVS_EIO);
    assert_non_null(strstr(err.msg, "not a regular file"));

    assert_int_equal(kvs_gguf_open(&g, "/dev/null", &err), KVS_EIO);

    assert_int_equal(kvs_gguf_open_mem(&g, "GGUF", 4, &err), KVS_EFORMAT);
    assert_non_null(strstr(err.msg, "header version"));
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_stories_header),
        cmocka_unit_test(test_stories_vocab),
        cmocka_unit_test(test_stories_matches_checkpoint),
        cmocka_unit_test(test_stories_hparams),
        cmocka_unit_test(test_vocab_files),
        cmocka_unit_test(test_hparams_rope_scaling),
        cmocka_unit_test(test_typed_getters),
        cmocka_unit_test(test_open_errors),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
