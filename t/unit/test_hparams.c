/*
 * test_hparams: hyper-parameters from synthesized headers: every required
 * key, when missing, is an error naming it; optional keys take their
 * defaults; RoPE scaling kinds; qwen2; what llama and qwen2 imply (RoPE
 * pairing, Q/K/V biases) and the projection widths, with key and value
 * heads of different sizes; inconsistent head counts and tensor shapes
 * are refused.
 */

#include "kvs_test.h"

#include "model/kvs_ggml_type.h"
#include "model/kvs_gguf.h"
#include "model/kvs_hparams.h"
#include "model/kvs_model.h"

#define ARCH_KEYS  16

typedef struct {
    const char  *arch;
    const char  *skip;                /* key left out, or NULL */
    const char  *scaling;             /* rope.scaling.type, or NULL */
    uint32_t     n_head_kv;
    uint32_t     attn_q_out;          /* override attn_q rows, 0: right */
    uint32_t     hd_k;                /* attention.key_length, 0: none (8) */
    uint32_t     hd_v;                /* attention.value_length, 0: none */
    int          no_bias;             /* qwen2 without its Q/K/V biases */
} spec_t;


static int
zero_fill(void *ctx, const char *name, void *dst, uint64_t n, kvs_err_t *e)
{
    memset(dst, 0, n);

    return KVS_OK;
}


/* "<arch>.<name>" into key; 0 when the spec leaves that key out. */
static int
arch_key(const spec_t *s, const char *name, char *key, size_t len)
{
    snprintf(key, len, "%s.%s", s->arch, name);

    return s->skip == NULL || strcmp(s->skip, key) != 0;
}


static void
key_u32(kvs_gguf_writer_t *w, const spec_t *s, const char *name, uint32_t v)
{
    char  key[96];

    if (arch_key(s, name, key, sizeof(key))) {
        kvs_gguf_set_u32(w, key, v);
    }
}


static void
key_f32(kvs_gguf_writer_t *w, const spec_t *s, const char *name, float v)
{
    char  key[96];

    if (arch_key(s, name, key, sizeof(key))) {
        kvs_gguf_set_f32(w, key, v);
    }
}


static void
tensor(kvs_gguf_writer_t *w, const char *name, uint64_t ne0, uint64_t ne1)
{
    uint64_t  ne[2] = { ne0, ne1 };

    kvs_gguf_w_tensor(w, name, KVS_GGML_F32, ne1 ? 2 : 1, ne, NULL);
}


/* A 2-layer model: embd 32, 4 heads of 8 (or of s->hd_k and s->hd_v),
 * ffn 48, vocab 64. */
static int
build(const spec_t *s, kvs_model_t **m, kvs_err_t *err)
{
    char                name[64];
    uint32_t            l, kv, hk, hv;
    kvs_gguf_writer_t  *w;
    const char         *path;

    path = kvs_test_tmp("hparams.gguf");
    kv = s->n_head_kv ? s->n_head_kv : 2;
    hk = s->hd_k ? s->hd_k : 8;
    hv = s->hd_v ? s->hd_v : hk;

    assert_int_equal(kvs_gguf_writer_new(&w, 3, NULL), KVS_OK);

    if (s->skip == NULL || strcmp(s->skip, "general.architecture") != 0) {
        kvs_gguf_set_str(w, "general.architecture", s->arch);
    }
    key_u32(w, s, "block_count", 2);
    key_u32(w, s, "embedding_length", 32);
    key_u32(w, s, "feed_forward_length", 48);
    key_u32(w, s, "attention.head_count", 4);
    key_u32(w, s, "attention.head_count_kv", kv);
    key_u32(w, s, "context_length", 256);
    key_u32(w, s, "vocab_size", 64);
    key_f32(w, s, "attention.layer_norm_rms_epsilon", 1e-6f);

    if (s->hd_k != 0) {
        key_u32(w, s, "attention.key_length", s->hd_k);
    }

    if (s->hd_v != 0) {
        key_u32(w, s, "attention.value_length", s->hd_v);
    }

    if (s->scaling != NULL) {
        snprintf(name, sizeof(name), "%s.rope.scaling.type", s->arch);
        kvs_gguf_set_str(w, name, s->scaling);
        key_f32(w, s, "rope.scaling.factor", 8.0f);
        key_u32(w, s, "rope.scaling.original_context_length", 8192);
        key_f32(w, s, "rope.scaling.low_freq_factor", 1.0f);
        key_f32(w, s, "rope.scaling.high_freq_factor", 4.0f);
        key_f32(w, s, "rope.scaling.yarn_beta_fast", 16.0f);
    }

    tensor(w, "token_embd.weight", 32, 64);
    tensor(w, "output_norm.weight", 32, 0);

    for (l = 0; l < 2; l++) {
#define T(suffix, ne0, ne1)                                                 \
        snprintf(name, sizeof(name), "blk.%u." suffix, l);                 \
        tensor(w, name, ne0, ne1)
        T("attn_norm.weight", 32, 0);
        T("attn_q.weight", 32, s->attn_q_out ? s->attn_q_out : 4 * hk);
        T("attn_k.weight", 32, hk * kv);
        T("attn_v.weight", 32, hv * kv);
        T("attn_output.weight", 4 * hv, 32);
        T("ffn_norm.weight", 32, 0);
        T("ffn_gate.weight", 32, 48);
        T("ffn_up.weight", 32, 48);
        T("ffn_down.weight", 48, 32);
        if (strcmp(s->arch, "qwen2") == 0 && !s->no_bias) {
            T("attn_q.bias", 4 * hk, 0);
            T("attn_k.bias", hk * kv, 0);
            T("attn_v.bias", hv * kv, 0);
        }
#undef T
    }

    assert_int_equal(kvs_gguf_writer_write(w, path, zero_fill, NULL, NULL),
                     KVS_OK);
    kvs_gguf_writer_free(w);

    return kvs_model_open(m, path, err);
}


static void
test_defaults(void **state)
{
    kvs_err_t     err;
    kvs_model_t  *m;
    spec_t        s = { "llama", NULL, NULL, 0, 0, 0, 0, 0 };

    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }

    assert_int_equal(m->hp.head_dim_k, 8);
    assert_int_equal(m->hp.head_dim_v, 8);
    assert_int_equal(m->hp.n_rot, 8);
    assert_true(m->hp.rope_freq_base == 10000.0);
    assert_true(m->hp.norm_eps == (double) 1e-6f);
    assert_int_equal(m->hp.n_vocab, 64);
    assert_true(m->hp.tied_embeddings);
    assert_int_equal(m->hp.rope_scaling, KVS_ROPE_SCALING_NONE);
    assert_int_equal(kvs_hparams_kv_bytes_per_token(&m->hp, 2),
                     2 * 2 * 2 * 8 * 2);

    kvs_model_close(m);
}


static void
test_missing_keys(void **state)
{
    size_t        i;
    char          want[128];
    kvs_err_t     err;
    kvs_model_t  *m;
    spec_t        s = { "llama", NULL, NULL, 0, 0, 0, 0, 0 };
    static const char  *required[] = {
        "general.architecture", "llama.block_count",
        "llama.embedding_length", "llama.feed_forward_length",
        "llama.attention.head_count", "llama.context_length",
        "llama.attention.layer_norm_rms_epsilon",
    };

    for (i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
        s.skip = required[i];
        assert_int_not_equal(build(&s, &m, &err), KVS_OK);
        snprintf(want, sizeof(want), "missing required key '%s'",
                 required[i]);
        if (strstr(err.msg, want) == NULL) {
            fail_msg("without %s: '%s'", required[i], err.msg);
        }
    }

    /* optional: head_count_kv defaults to head_count (then the K/V
     * tensors no longer match, which is reported by name) */
    s.skip = "llama.attention.head_count_kv";
    assert_int_not_equal(build(&s, &m, &err), KVS_OK);
    assert_non_null(strstr(err.msg, "tensor 'blk.0.attn_k.weight' has "
                                    "shape [32, 16]"));
}


static void
test_rope_scaling(void **state)
{
    kvs_err_t     err;
    kvs_model_t  *m;
    spec_t        s = { "llama", NULL, "yarn", 0, 0, 0, 0, 0 };

    assert_int_equal(build(&s, &m, &err), KVS_OK);
    assert_int_equal(m->hp.rope_scaling, KVS_ROPE_SCALING_YARN);
    assert_true(m->hp.rope_factor == 8.0);
    assert_int_equal(m->hp.rope_orig_ctx, 8192);
    assert_true(m->hp.rope_beta_fast == 16.0);
    assert_true(m->hp.rope_beta_slow == 1.0);
    assert_true(m->hp.rope_attn_factor == 1.0);
    kvs_model_close(m);

    s.scaling = "llama3";
    assert_int_equal(build(&s, &m, &err), KVS_OK);
    assert_int_equal(m->hp.rope_scaling, KVS_ROPE_SCALING_LLAMA3);
    assert_true(m->hp.rope_low_freq_factor == 1.0);
    assert_true(m->hp.rope_high_freq_factor == 4.0);
    kvs_model_close(m);

    s.skip = "llama.rope.scaling.high_freq_factor";
    assert_int_not_equal(build(&s, &m, &err), KVS_OK);
    assert_non_null(strstr(err.msg, "'llama.rope.scaling.high_freq_factor'"));

    s.skip = "llama.rope.scaling.factor";
    s.scaling = "linear";
    assert_int_not_equal(build(&s, &m, &err), KVS_OK);
    assert_non_null(strstr(err.msg, "'llama.rope.scaling.factor'"));

    s.skip = NULL;
    s.scaling = "ntk-by-parts";
    assert_int_equal(build(&s, &m, &err), KVS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "'ntk-by-parts'"));
}


static void
test_qwen2_and_shapes(void **state)
{
    kvs_err_t     err;
    kvs_model_t  *m;
    spec_t        s = { "qwen2", NULL, NULL, 1, 0, 0, 0, 0 };

    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_string_equal(m->hp.arch, "qwen2");
    assert_int_equal(m->hp.n_head_kv, 1);
    assert_int_equal(kvs_hparams_kv_bytes_per_token(&m->hp, 2),
                     2 * 2 * 1 * 8 * 2);
    kvs_model_close(m);

    s.n_head_kv = 3;                 /* 4 heads cannot share 3 KV heads */
    assert_int_not_equal(build(&s, &m, &err), KVS_OK);
    assert_non_null(strstr(err.msg, "not a multiple of head_count_kv 3"));

    s.arch = "llama";
    s.n_head_kv = 2;
    s.attn_q_out = 40;
    assert_int_not_equal(build(&s, &m, &err), KVS_OK);
    assert_non_null(strstr(err.msg, "'blk.0.attn_q.weight' has shape "
                                    "[32, 40] (2 dims), expected [32, 32]"));

    s.attn_q_out = 0;
    s.arch = "gemma";
    assert_int_equal(build(&s, &m, &err), KVS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "architecture 'gemma'"));
}


static void
assert_widths(const kvs_hparams_t *hp, uint32_t q, uint32_t k, uint32_t v,
    uint32_t o)
{
    assert_int_equal(hp->q_width, q);
    assert_int_equal(hp->k_width, k);
    assert_int_equal(hp->v_width, v);
    assert_int_equal(hp->o_width, o);
}


/* The facts kvs_hparams_read() derives from the architecture's name and
 * the head counts, which the tensor checks and the backends read. */
static void
test_arch_facts(void **state)
{
    kvs_err_t     err;
    kvs_model_t  *m;
    spec_t        s = { "llama", NULL, NULL, 0, 0, 0, 0, 0 };

    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_int_equal(m->hp.arch_id, KVS_ARCH_LLAMA);
    assert_int_equal(m->hp.rope_pairing, KVS_ROPE_NORM);
    assert_false(m->hp.qkv_bias);
    assert_widths(&m->hp, 4 * 8, 2 * 8, 2 * 8, 4 * 8);
    kvs_model_close(m);

    s.arch = "qwen2";
    s.n_head_kv = 1;
    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_int_equal(m->hp.arch_id, KVS_ARCH_QWEN2);
    assert_int_equal(m->hp.rope_pairing, KVS_ROPE_NEOX);
    assert_true(m->hp.qkv_bias);
    assert_widths(&m->hp, 4 * 8, 1 * 8, 1 * 8, 4 * 8);
    kvs_model_close(m);

    /* qwen2's biases are required */
    s.no_bias = 1;
    assert_int_equal(build(&s, &m, &err), KVS_EFORMAT);
    assert_non_null(strstr(err.msg, "missing tensor 'blk.0.attn_q.bias'"));

    /* keys of 12, values of 6: every width takes its own head size */
    s.no_bias = 0;
    s.n_head_kv = 2;
    s.hd_k = 12;
    s.hd_v = 6;
    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_int_equal(m->hp.head_dim_k, 12);
    assert_int_equal(m->hp.head_dim_v, 6);
    assert_int_equal(m->hp.n_rot, 12);
    assert_widths(&m->hp, 4 * 12, 2 * 12, 2 * 6, 4 * 6);
    assert_int_equal(kvs_hparams_kv_bytes_per_token(&m->hp, 2),
                     2 * 2 * (12 + 6) * 2);
    kvs_model_close(m);

    s.arch = "llama";
    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_int_equal(m->hp.rope_pairing, KVS_ROPE_NORM);
    assert_widths(&m->hp, 48, 24, 12, 24);
    kvs_model_close(m);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_missing_keys),
        cmocka_unit_test(test_rope_scaling),
        cmocka_unit_test(test_qwen2_and_shapes),
        cmocka_unit_test(test_arch_facts),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
