/*
 * test_model_arch: the qwen3, phi3, gemma2 and gemma3 layouts as llama.cpp's
 * converter writes them, from synthesized headers: what each architecture
 * implies (per-head Q/K norms, fused QKV and gate/up, the sliding window,
 * the LongRoPE factor set), and every way a file can get them wrong refused
 * with an error naming the key or tensor: a tensor missing, of another
 * shape, a bias the forward has no place for, half of a LongRoPE pair. Also
 * gen-model's refusals of specs llama.cpp would not load.
 */

#include "kvs_test.h"

#include <math.h>

#include "gen/kvs_gen.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_gguf.h"
#include "model/kvs_hparams.h"
#include "model/kvs_model.h"

/* 2 layers, embd 32, 4 heads of 8 (2 K/V heads, or head_dim 12 for
 * qwen3), ffn 48, vocab 64, context 256 */
#define EMBD  32
#define FF    48

typedef struct {
    const char  *arch;                /* qwen3, phi3, gemma2, gemma3 */
    const char  *skip;                /* tensor or key left out */
    const char  *wrong;               /* tensor written one row longer */
    uint32_t     head_dim;            /* qwen3's key_length, 0: 8 */
    uint32_t     window;              /* phi3's sliding_window */
    uint32_t     orig_ctx;            /* phi3 LongRoPE: original context,
                                         0: no factors */
    int          bias;                /* add attn_q/k/v biases */
    int          only_long;           /* LongRoPE's long factors alone */
    int          pattern;             /* sliding_window_pattern + 1, 0:
                                         none; -1: as an array */
    float        base_swa;            /* rope.freq_base_swa, 0: none */
} spec_t;


static int
zero_fill(void *ctx, const char *name, void *dst, uint64_t n, kvs_err_t *e)
{
    memset(dst, 0, n);

    return KVS_OK;
}


static int
kept(const spec_t *s, const char *name)
{
    return s->skip == NULL || strcmp(s->skip, name) != 0;
}


static void
key_u32(kvs_gguf_writer_t *w, const spec_t *s, const char *name, uint32_t v)
{
    char  key[96];

    snprintf(key, sizeof(key), "%s.%s", s->arch, name);
    if (kept(s, key)) {
        kvs_gguf_set_u32(w, key, v);
    }
}


static void
tensor(kvs_gguf_writer_t *w, const spec_t *s, const char *name,
    uint64_t ne0, uint64_t ne1)
{
    uint64_t  ne[2];

    if (!kept(s, name)) {
        return;
    }

    ne[0] = ne0;
    ne[1] = ne1;

    if (s->wrong != NULL && strcmp(s->wrong, name) == 0) {
        ne[ne1 ? 1 : 0]++;
    }

    kvs_gguf_w_tensor(w, name, KVS_GGML_F32, ne1 ? 2 : 1, ne, NULL);
}


static int
build(const spec_t *s, kvs_model_t **m, kvs_err_t *err)
{
    char                name[64], key[96];
    uint8_t             layers_swa[2] = { 1, 0 };
    uint32_t            l, hd, q, kv;
    kvs_gguf_writer_t  *w;
    const char         *path;

    path = kvs_test_tmp("model_arch.gguf");
    hd = s->head_dim ? s->head_dim : 8;
    q = 4 * hd;
    kv = 2 * hd;

    assert_int_equal(kvs_gguf_writer_new(&w, 3, NULL), KVS_OK);

    kvs_gguf_set_str(w, "general.architecture", s->arch);
    key_u32(w, s, "block_count", 2);
    key_u32(w, s, "embedding_length", EMBD);
    key_u32(w, s, "feed_forward_length", FF);
    key_u32(w, s, "attention.head_count", 4);
    key_u32(w, s, "attention.head_count_kv", 2);
    key_u32(w, s, "context_length", 256);
    key_u32(w, s, "vocab_size", 64);
    snprintf(key, sizeof(key), "%s.attention.layer_norm_rms_epsilon",
             s->arch);
    kvs_gguf_set_f32(w, key, 1e-6f);

    if (s->head_dim != 0) {
        key_u32(w, s, "attention.key_length", hd);
        key_u32(w, s, "attention.value_length", hd);
    }

    if (strcmp(s->arch, "qwen3") != 0 && s->window != 0) {
        key_u32(w, s, "attention.sliding_window", s->window);
    }

    if (s->pattern > 0) {
        key_u32(w, s, "attention.sliding_window_pattern",
                (uint32_t) s->pattern - 1);

    } else if (s->pattern < 0) {
        snprintf(key, sizeof(key), "%s.attention.sliding_window_pattern",
                 s->arch);
        kvs_gguf_w_key(w, key, KVS_GGUF_ARR);
        kvs_gguf_w_arr(w, KVS_GGUF_BOOL, 2);
        kvs_gguf_w_elems(w, layers_swa, 2);
    }

    if (s->base_swa != 0.0f) {
        snprintf(key, sizeof(key), "%s.rope.freq_base_swa", s->arch);
        kvs_gguf_set_f32(w, key, s->base_swa);
    }

    if (s->orig_ctx != 0) {
        key_u32(w, s, "rope.scaling.original_context_length", s->orig_ctx);
        snprintf(key, sizeof(key), "%s.rope.scaling.attn_factor", s->arch);
        kvs_gguf_set_f32(w, key, 1.19f);
        tensor(w, s, "rope_factors_long.weight", hd / 2, 0);
        if (!s->only_long) {
            tensor(w, s, "rope_factors_short.weight", hd / 2, 0);
        }
    }

    tensor(w, s, "token_embd.weight", EMBD, 64);
    tensor(w, s, "output_norm.weight", EMBD, 0);
    tensor(w, s, "output.weight", EMBD, 64);

    for (l = 0; l < 2; l++) {
#define T(suffix, ne0, ne1)                                                 \
        snprintf(name, sizeof(name), "blk.%u." suffix, l);                 \
        tensor(w, s, name, ne0, ne1)

        T("attn_norm.weight", EMBD, 0);

        if (strcmp(s->arch, "phi3") == 0) {
            T("attn_qkv.weight", EMBD, q + 2 * kv);
            T("ffn_up.weight", EMBD, 2 * FF);

        } else {
            T("attn_q.weight", EMBD, q);
            T("attn_k.weight", EMBD, kv);
            T("attn_v.weight", EMBD, kv);
            if (strcmp(s->arch, "gemma2") != 0) {
                T("attn_q_norm.weight", hd, 0);
                T("attn_k_norm.weight", hd, 0);
            }
            T("ffn_gate.weight", EMBD, FF);
            T("ffn_up.weight", EMBD, FF);
        }

        if (strncmp(s->arch, "gemma", 5) == 0) {
            T("post_attention_norm.weight", EMBD, 0);
            T("post_ffw_norm.weight", EMBD, 0);
        }

        if (s->bias) {
            T("attn_q.bias", q, 0);
            T("attn_k.bias", kv, 0);
            T("attn_v.bias", kv, 0);
        }

        T("attn_output.weight", q, EMBD);
        T("ffn_norm.weight", EMBD, 0);
        T("ffn_down.weight", FF, EMBD);
#undef T
    }

    assert_int_equal(kvs_gguf_writer_write(w, path, zero_fill, NULL, NULL),
                     KVS_OK);
    kvs_gguf_writer_free(w);

    return kvs_model_open(m, path, err);
}


static void
expect_error(const spec_t *s, const char *what)
{
    kvs_err_t     err;
    kvs_model_t  *m;

    m = NULL;
    assert_int_not_equal(build(s, &m, &err), KVS_OK);
    assert_null(m);

    if (strstr(err.msg, what) == NULL) {
        fail_msg("expected \"%s\" in \"%s\"", what, err.msg);
    }
}


static void
test_qwen3(void **state)
{
    kvs_err_t     err;
    kvs_model_t  *m;
    spec_t        s;

    memset(&s, 0, sizeof(s));
    s.arch = "qwen3";

    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_int_equal(m->hp.arch_id, KVS_ARCH_QWEN3);
    assert_int_equal(m->hp.rope_pairing, KVS_ROPE_NEOX);
    assert_true(m->hp.qk_norm);
    assert_false(m->hp.qkv_bias);
    assert_false(m->hp.fused_qkv);
    assert_int_equal(m->hp.n_swa, 0);
    kvs_model_close(m);

    /* heads wider than embd / heads, as the real Qwen3 files have */
    s.head_dim = 12;
    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_int_equal(m->hp.head_dim_k, 12);
    assert_int_equal(m->hp.q_width, 48);
    kvs_model_close(m);

    s.head_dim = 0;
    s.skip = "blk.1.attn_k_norm.weight";
    expect_error(&s, "missing tensor 'blk.1.attn_k_norm.weight'");

    s.skip = NULL;
    s.wrong = "blk.0.attn_q_norm.weight";
    expect_error(&s, "'blk.0.attn_q_norm.weight' has shape [9, 1]");

    s.wrong = NULL;
    s.bias = 1;
    expect_error(&s, "'blk.0.attn_q.bias': architecture qwen3 has no "
                     "Q/K/V biases");
}


static void
test_phi3(void **state)
{
    kvs_err_t     err;
    kvs_model_t  *m;
    spec_t        s;

    memset(&s, 0, sizeof(s));
    s.arch = "phi3";
    s.window = 64;

    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_int_equal(m->hp.arch_id, KVS_ARCH_PHI3);
    assert_int_equal(m->hp.rope_pairing, KVS_ROPE_NEOX);
    assert_true(m->hp.fused_qkv);
    assert_true(m->hp.fused_gate_up);
    assert_false(m->hp.qk_norm);
    assert_int_equal(m->hp.n_swa, 64);
    assert_int_equal(kvs_hparams_swa(&m->hp, 1), 64);
    assert_int_equal(m->hp.rope_longrope, 0);
    assert_null(kvs_hparams_rope_factors(&m->hp));
    kvs_model_close(m);

    /* a window as long as the context is no window */
    s.window = 256;
    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_int_equal(m->hp.n_swa, 0);
    kvs_model_close(m);

    /* LongRoPE: the long set when the context outgrows the original */
    s.orig_ctx = 64;
    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_int_equal(m->hp.rope_longrope, 2);
    assert_string_equal(kvs_hparams_rope_factors(&m->hp),
                        "rope_factors_long.weight");
    assert_true(m->hp.rope_attn_factor > 1.18
                && m->hp.rope_attn_factor < 1.2);
    kvs_model_close(m);

    s.orig_ctx = 4096;
    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_string_equal(kvs_hparams_rope_factors(&m->hp),
                        "rope_factors_short.weight");
    kvs_model_close(m);

    s.only_long = 1;
    expect_error(&s, "rope_factors_long and rope_factors_short go "
                     "together");

    s.only_long = 0;
    s.wrong = "rope_factors_short.weight";
    expect_error(&s, "'rope_factors_short.weight' has shape [5, 1]");

    s.wrong = NULL;
    s.orig_ctx = 0;
    s.skip = "phi3.attention.sliding_window";
    expect_error(&s, "missing required key 'phi3.attention.sliding_window'");

    s.skip = "blk.1.attn_qkv.weight";
    expect_error(&s, "missing tensor 'blk.1.attn_qkv.weight'");

    s.skip = NULL;
    s.wrong = "blk.0.attn_qkv.weight";
    expect_error(&s, "'blk.0.attn_qkv.weight' has shape [32, 65]");

    s.wrong = "blk.1.ffn_up.weight";
    expect_error(&s, "'blk.1.ffn_up.weight' has shape [32, 97]");

    s.wrong = NULL;
    s.bias = 1;
    expect_error(&s, "architecture phi3 has no Q/K/V biases");
}


static void
test_gemma(void **state)
{
    kvs_err_t     err;
    kvs_model_t  *m;
    spec_t        s;

    memset(&s, 0, sizeof(s));
    s.arch = "gemma2";

    /* no window key: llama.cpp's 4096, beyond this context: none */
    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_int_equal(m->hp.arch_id, KVS_ARCH_GEMMA2);
    assert_true(m->hp.geglu && m->hp.post_norms);
    assert_false(m->hp.qk_norm);
    assert_int_equal(m->hp.n_swa, 0);
    assert_true(m->hp.attn_softcap == 50.0 && m->hp.final_softcap == 30.0);
    assert_true(fabs(m->hp.embd_scale - sqrt(32.0)) < 1e-12);
    assert_true(m->hp.attn_scale == (double) (1.0f / sqrtf(8.0f)));
    kvs_model_close(m);

    /* windowed even layers, global odd ones */
    s.window = 16;
    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_int_equal(kvs_hparams_swa(&m->hp, 0), 16);
    assert_int_equal(kvs_hparams_swa(&m->hp, 1), 0);
    assert_true(m->hp.rope_base_swa == 0.0);
    kvs_model_close(m);

    /* gemma2's local layers with a base of their own (scaled as the
     * model), and a pattern making every layer local; an equal base is
     * the global table; a per-layer array is refused, naming the key */
    s.base_swa = 1000.0f;
    s.pattern = 1;
    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_int_equal(m->hp.swa_period, 0);
    assert_int_equal(kvs_hparams_swa(&m->hp, 1), 16);
    assert_int_equal(kvs_hparams_swa_all(&m->hp), 16);
    assert_true(m->hp.rope_base_swa == 1000.0 && m->hp.rope_swa_scaled);
    assert_true(kvs_hparams_rope_swa(&m->hp, 1));
    kvs_model_close(m);

    s.base_swa = 10000.0f;
    s.pattern = 3;
    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_int_equal(m->hp.swa_period, 2);
    assert_int_equal(kvs_hparams_swa(&m->hp, 1), 0);
    assert_true(m->hp.rope_base_swa == 0.0);
    assert_false(kvs_hparams_rope_swa(&m->hp, 0));
    kvs_model_close(m);

    s.base_swa = 0.0f;
    s.pattern = -1;
    expect_error(&s, "'gemma2.attention.sliding_window_pattern' is arr, "
                 "expected an integer");
    s.pattern = 0;

    s.skip = "blk.1.post_ffw_norm.weight";
    expect_error(&s, "missing tensor 'blk.1.post_ffw_norm.weight'");
    s.skip = NULL;
    s.wrong = "blk.0.post_attention_norm.weight";
    expect_error(&s, "'blk.0.post_attention_norm.weight' has shape [33,");
    s.wrong = NULL;
    s.bias = 1;
    expect_error(&s, "architecture gemma2 has no Q/K/V biases");

    /* gemma3: per-head norms, a global layer every sixth (none of the
     * two here), no caps, its windowed layers' own RoPE base */
    memset(&s, 0, sizeof(s));
    s.arch = "gemma3";
    s.window = 16;
    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_true(m->hp.qk_norm && m->hp.geglu && m->hp.post_norms);
    assert_int_equal(m->hp.swa_period, 6);
    assert_int_equal(kvs_hparams_swa(&m->hp, 1), 16);
    assert_int_equal(kvs_hparams_swa(&m->hp, 5), 0);
    assert_true(m->hp.attn_softcap == 0.0 && m->hp.final_softcap == 0.0);
    assert_true(m->hp.rope_base_swa == 10000.0);
    assert_false(m->hp.rope_swa_scaled);
    assert_true(kvs_hparams_rope_swa(&m->hp, 1));
    assert_false(kvs_hparams_rope_swa(&m->hp, 5));
    kvs_model_close(m);

    /* a global layer every second one, as the file says */
    s.pattern = 3;
    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_int_equal(m->hp.swa_period, 2);
    assert_int_equal(kvs_hparams_swa(&m->hp, 0), 16);
    assert_int_equal(kvs_hparams_swa(&m->hp, 1), 0);
    assert_false(kvs_hparams_rope_swa(&m->hp, 1));
    kvs_model_close(m);
    s.pattern = 0;

    /* a window of the whole context masks nothing, but the local layers
     * keep their own RoPE table, as llama.cpp reads such a file */
    s.window = 256;
    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_int_equal(kvs_hparams_swa(&m->hp, 1), 0);
    assert_true(m->hp.rope_base_swa == 10000.0);
    assert_true(kvs_hparams_rope_swa(&m->hp, 1));
    kvs_model_close(m);

    /* no window key (the converter's all-global Gemma 3): every layer
     * global, one RoPE table */
    s.window = 16;
    s.skip = "gemma3.attention.sliding_window";
    if (build(&s, &m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_int_equal(kvs_hparams_swa(&m->hp, 1), 0);
    assert_true(m->hp.rope_base_swa == 0.0);
    assert_false(kvs_hparams_rope_swa(&m->hp, 1));
    kvs_model_close(m);
    s.skip = "blk.0.attn_q_norm.weight";
    expect_error(&s, "missing tensor 'blk.0.attn_q_norm.weight'");
}


/* gen-model writes only what llama.cpp would load. */
static void
test_gen_refusals(void **state)
{
    kvs_err_t       err;
    kvs_arch_t      arch;
    kvs_gen_spec_t  spec;

    assert_int_equal(kvs_gen_arch("qwen3", &arch, &err), KVS_OK);
    assert_int_equal(arch, KVS_ARCH_QWEN3);
    assert_int_equal(kvs_gen_arch("gemma9", &arch, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "\"gemma9\""));

    assert_int_equal(kvs_gen_preset(&spec, "tiny", &err), KVS_OK);
    spec.arch = KVS_ARCH_PHI3;
    spec.tied = 1;
    assert_int_equal(kvs_gen_check(&spec, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "phi3"));

    spec.tied = 0;
    assert_int_equal(kvs_gen_check(&spec, &err), KVS_OK);
    spec.head_dim = 32;
    assert_int_equal(kvs_gen_check(&spec, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "--head-dim"));

    spec.arch = KVS_ARCH_QWEN3;
    assert_int_equal(kvs_gen_check(&spec, &err), KVS_OK);
    spec.n_swa = 8;
    assert_int_equal(kvs_gen_check(&spec, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "--swa"));

    /* llama: a Mistral-style window when asked for (still 8 here), but
     * no head size of its own */
    spec.arch = KVS_ARCH_LLAMA;
    assert_int_equal(kvs_gen_check(&spec, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "--head-dim"));
    spec.head_dim = 0;
    assert_int_equal(kvs_gen_check(&spec, &err), KVS_OK);

    /* gemma: tied output, a window allowed */
    spec.arch = KVS_ARCH_GEMMA2;
    spec.tied = 0;
    assert_int_equal(kvs_gen_check(&spec, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "--tied 0"));
    spec.tied = 1;
    assert_int_equal(kvs_gen_check(&spec, &err), KVS_OK);

    /* gemma's optional keys, on gemma alone */
    spec.rope_base_swa = 5e4;
    spec.swa_pattern = 4;
    assert_int_equal(kvs_gen_check(&spec, &err), KVS_OK);
    spec.arch = KVS_ARCH_LLAMA;
    assert_int_equal(kvs_gen_check(&spec, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "--rope-base-swa"));
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_phi3),
        cmocka_unit_test(test_gemma),
        cmocka_unit_test(test_gen_refusals),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
