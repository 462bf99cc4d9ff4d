/*
 * kvs_gen: presets, checks, metadata and seeded weights of generated
 * models (see kvs_gen.h).  Weight matrices are uniform with standard
 * deviation 0.02 (GPT-2's initialisation); norm weights are always F32,
 * as llama.cpp stores 1-D tensors: 1 for llama (the files tests have
 * always made), uniform in [0.8, 1.2] for the other architectures, so
 * that a norm applied to the wrong vector, or not at all, shows in the
 * logits.
 *
 * Layouts, as llama.cpp's converter writes them: llama and qwen3 keep
 * attn_q/k/v and ffn_gate/up apart, qwen3 adds attn_q_norm/attn_k_norm
 * [head_dim] per layer and no biases; phi3 fuses attn_qkv (rows Q, K, V)
 * and ffn_up (rows gate, then up), has no tied output, and declares
 * phi3.attention.sliding_window (llama too, Mistral-style, with --swa:
 * the key kvserve reads, though llama.cpp's converter does not write it
 * for Mistral 7B v0.1); gemma2 and gemma3 add
 * post_attention_norm and post_ffw_norm per layer, tie the output, and
 * write key_length, the window and (gemma2) both soft-caps; gemma3 has
 * qwen3's per-head norms too.
 */

#define KVS_GEN_GEMMA(a)  ((a) == KVS_ARCH_GEMMA2 || (a) == KVS_ARCH_GEMMA3)

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_hash.h"
#include "model/kvs_dtype.h"
#include "kvs_gen.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_gguf.h"
#include "model/kvs_quant.h"
#include "kvs_quantize.h"

#define KVS_GEN_STD    0.02f
#define KVS_GEN_CHUNK  4096           /* elements converted at a time */


typedef struct {
    const char      *name;
    kvs_gen_spec_t   spec;
} kvs_gen_preset_t;

static const kvs_gen_preset_t  kvs_gen_presets[] = {
    /*                 name  L   embd  H   KV  ffn   vocab  ctx */
    { "tiny",  { "", 2,  64,  4,  2, 192,  512,   512,  0, 0, 0, 0, 0, 0,
                 NULL, 0, 0.0 } },
    { "small", { "", 4,  256, 8,  4, 768,  2048,  2048, 0, 0, 0, 0, 0, 0,
                 NULL, 0, 0.0 } },
    { "100m",  { "", 12, 768, 12, 4, 2048, 32000, 4096, 0, 1, 0, 0, 0, 0,
                 NULL, 0, 0.0 } },
};


int
kvs_gen_preset(kvs_gen_spec_t *spec, const char *preset, kvs_err_t *err)
{
    size_t  i;

    for (i = 0; i < sizeof(kvs_gen_presets) / sizeof(kvs_gen_presets[0]);
         i++)
    {
        if (strcmp(kvs_gen_presets[i].name, preset) == 0) {
            *spec = kvs_gen_presets[i].spec;
            snprintf(spec->name, sizeof(spec->name), "kvserve-%s", preset);
            spec->dtype = KVS_GGML_F32;
            return KVS_OK;
        }
    }

    return kvs_err_set(err, KVS_EINVAL, "unknown preset \"%s\" (tiny, small, "
                       "100m)", preset);
}


static const struct {
    const char  *name;
    kvs_arch_t   arch;
} kvs_gen_archs[] = {
    { "llama", KVS_ARCH_LLAMA },
    { "qwen3", KVS_ARCH_QWEN3 },
    { "phi3",  KVS_ARCH_PHI3 },
    { "gemma2", KVS_ARCH_GEMMA2 },
    { "gemma3", KVS_ARCH_GEMMA3 },
};


static const char *
kvs_gen_arch_name(kvs_arch_t arch)
{
    size_t  i;

    for (i = 0; i < sizeof(kvs_gen_archs) / sizeof(kvs_gen_archs[0]); i++) {
        if (kvs_gen_archs[i].arch == arch) {
            return kvs_gen_archs[i].name;
        }
    }

    return NULL;
}


int
kvs_gen_arch(const char *name, kvs_arch_t *arch, kvs_err_t *err)
{
    size_t  i;

    for (i = 0; i < sizeof(kvs_gen_archs) / sizeof(kvs_gen_archs[0]); i++) {
        if (strcmp(kvs_gen_archs[i].name, name) == 0) {
            *arch = kvs_gen_archs[i].arch;
            return KVS_OK;
        }
    }

    return kvs_err_set(err, KVS_EINVAL, "--arch \"%s\" is not one "
                       "gen-model writes (llama, qwen3, phi3, gemma2, "
                       "gemma3)", name);
}


/* The per-head width the spec implies. */
static uint32_t
kvs_gen_head_dim(const kvs_gen_spec_t *s)
{
    return s->head_dim != 0 ? s->head_dim : s->n_embd / s->n_head;
}


int
kvs_gen_check(const kvs_gen_spec_t *spec, kvs_err_t *err)
{
    char                         name[16];
    size_t                       i;
    const kvs_quant_type_t      *q;
    const kvs_ggml_type_info_t  *info;

    if (spec->n_layer == 0 || spec->n_layer > 256) {
        return kvs_err_set(err, KVS_EINVAL, "--layers %u not in 1..256",
                           spec->n_layer);
    }

    if (kvs_gen_arch_name(spec->arch) == NULL) {
        return kvs_err_set(err, KVS_EINVAL, "--arch: architecture %d is "
                           "not one gen-model writes", (int) spec->arch);
    }

    if (spec->head_dim != 0) {
        if ((spec->arch != KVS_ARCH_QWEN3 && !KVS_GEN_GEMMA(spec->arch))
            || spec->head_dim % 2 != 0 || spec->head_dim > 1024
            || spec->n_head == 0 || spec->n_head > 256)
        {
            return kvs_err_set(err, KVS_EINVAL, "--head-dim %u: qwen3 "
                               "and gemma only, even, at most 1024, with "
                               "1..256 --heads", spec->head_dim);
        }

    } else if (spec->n_head == 0 || spec->n_embd == 0
               || spec->n_embd % spec->n_head != 0
               || (spec->n_embd / spec->n_head) % 2 != 0)
    {
        return kvs_err_set(err, KVS_EINVAL, "--dim %u must be a positive "
                           "multiple of --heads %u with an even head size",
                           spec->n_embd, spec->n_head);
    }

    if (spec->arch == KVS_ARCH_PHI3 && spec->tied) {
        return kvs_err_set(err, KVS_EINVAL, "--tied 1: phi3 has an output "
                           "matrix of its own (llama.cpp requires it)");
    }

    if (KVS_GEN_GEMMA(spec->arch) && !spec->tied) {
        return kvs_err_set(err, KVS_EINVAL, "--tied 0: gemma ties its "
                           "output to the embeddings");
    }

    if ((spec->swa_pattern != 0 || spec->rope_base_swa != 0.0)
        && !KVS_GEN_GEMMA(spec->arch))
    {
        return kvs_err_set(err, KVS_EINVAL, "--swa-pattern and "
                           "--rope-base-swa are gemma2 and gemma3 keys");
    }

    if (spec->rope_base_swa < 0.0 || spec->swa_pattern > 4097) {
        return kvs_err_set(err, KVS_EINVAL, "--rope-base-swa %g must be "
                           "positive, --swa-pattern %u at most 4096",
                           spec->rope_base_swa,
                           spec->swa_pattern ? spec->swa_pattern - 1 : 0);
    }

    if (spec->n_swa != 0 && spec->arch == KVS_ARCH_QWEN3) {
        return kvs_err_set(err, KVS_EINVAL, "--swa %u: qwen3 declares no "
                           "sliding window", spec->n_swa);
    }

    if (spec->n_embd > 16384 || spec->n_ff == 0 || spec->n_ff > 65536) {
        return kvs_err_set(err, KVS_EINVAL, "--dim %u (max 16384) or --ffn "
                           "%u (1..65536) out of range", spec->n_embd,
                           spec->n_ff);
    }

    if (spec->n_head_kv == 0 || spec->n_head % spec->n_head_kv != 0) {
        return kvs_err_set(err, KVS_EINVAL, "--kv-heads %u must divide "
                           "--heads %u", spec->n_head_kv, spec->n_head);
    }

    if (spec->n_vocab < 256 + KVS_GEN_N_SPECIAL || spec->n_vocab > 262144) {
        return kvs_err_set(err, KVS_EINVAL, "--vocab %u not in %d..262144",
                           spec->n_vocab, 256 + KVS_GEN_N_SPECIAL);
    }

    if (spec->n_ctx == 0 || spec->n_ctx > (1u << 24)) {
        return kvs_err_set(err, KVS_EINVAL, "--ctx %u not in 1..%u",
                           spec->n_ctx, 1u << 24);
    }

    q = kvs_quant_type(spec->dtype);
    if (q == NULL || q->quantize == NULL) {
        return kvs_err_set(err, KVS_EINVAL, "--dtype %s: kvserve cannot "
                           "make that type", kvs_ggml_type_name(spec->dtype));
    }

    /* every matrix's rows are n_embd or n_ff long; the type named as
     * --dtype takes it, in lower case */
    info = kvs_ggml_type_info(spec->dtype);
    if (spec->n_embd % info->block || spec->n_ff % info->block
        || (spec->n_head * kvs_gen_head_dim(spec)) % info->block)
    {
        for (i = 0; info->name[i] != '\0' && i + 1 < sizeof(name); i++) {
            name[i] = (char) tolower((unsigned char) info->name[i]);
        }
        name[i] = '\0';

        return kvs_err_set(err, KVS_EINVAL, "--dtype %s needs --dim (%u), "
                           "--ffn (%u) and heads x head size to be "
                           "multiples of %u", name, spec->n_embd,
                           spec->n_ff, info->block);
    }

    return KVS_OK;
}


static void
kvs_gen_metadata(kvs_gguf_writer_t *w, const kvs_gen_spec_t *s,
    const kvs_gen_vocab_t *v)
{
    char         key[96];
    uint32_t     i;
    const char  *a;

    a = kvs_gen_arch_name(s->arch);

#define KVS_GEN_KEY(name)                                                    \
    (snprintf(key, sizeof(key), "%s." name, a), key)

    kvs_gguf_set_str(w, "general.architecture", a);
    kvs_gguf_set_str(w, "general.name", s->name);
    kvs_gguf_set_u32(w, "general.file_type", kvs_quant_mix_ftype(s->dtype));
    if (kvs_ggml_type_info(s->dtype)->block > 1) {
        kvs_gguf_set_u32(w, "general.quantization_version", 2);
    }

    kvs_gguf_w_key(w, "kvserve.generator.seed", KVS_GGUF_U64);
    kvs_gguf_w_scalar(w, KVS_GGUF_U64, &s->seed);

    kvs_gguf_set_u32(w, KVS_GEN_KEY("context_length"), s->n_ctx);
    kvs_gguf_set_u32(w, KVS_GEN_KEY("embedding_length"), s->n_embd);
    kvs_gguf_set_u32(w, KVS_GEN_KEY("block_count"), s->n_layer);
    kvs_gguf_set_u32(w, KVS_GEN_KEY("feed_forward_length"), s->n_ff);
    kvs_gguf_set_u32(w, KVS_GEN_KEY("rope.dimension_count"),
                     kvs_gen_head_dim(s));
    kvs_gguf_set_u32(w, KVS_GEN_KEY("attention.head_count"), s->n_head);
    kvs_gguf_set_u32(w, KVS_GEN_KEY("attention.head_count_kv"),
                     s->n_head_kv);
    if (s->head_dim != 0 || KVS_GEN_GEMMA(s->arch)) {
        kvs_gguf_set_u32(w, KVS_GEN_KEY("attention.key_length"),
                         kvs_gen_head_dim(s));
        kvs_gguf_set_u32(w, KVS_GEN_KEY("attention.value_length"),
                         kvs_gen_head_dim(s));
    }
    kvs_gguf_set_f32(w, KVS_GEN_KEY("attention.layer_norm_rms_epsilon"),
                     s->arch == KVS_ARCH_LLAMA ? 1e-5f : 1e-6f);
    kvs_gguf_set_f32(w, KVS_GEN_KEY("rope.freq_base"),
                     s->arch == KVS_ARCH_QWEN3 || s->arch == KVS_ARCH_GEMMA3
                     ? 1000000.0f : 10000.0f);
    if (s->arch == KVS_ARCH_GEMMA2) {
        kvs_gguf_set_f32(w, KVS_GEN_KEY("attn_logit_softcapping"), 50.0f);
        kvs_gguf_set_f32(w, KVS_GEN_KEY("final_logit_softcapping"), 30.0f);
    }
    if (s->arch == KVS_ARCH_PHI3 || KVS_GEN_GEMMA(s->arch)
        || (s->arch == KVS_ARCH_LLAMA && s->n_swa != 0))
    {
        kvs_gguf_set_u32(w, KVS_GEN_KEY("attention.sliding_window"),
                         s->n_swa != 0 ? s->n_swa : s->n_ctx);
    }
    if (s->swa_pattern != 0) {
        kvs_gguf_set_u32(w, KVS_GEN_KEY("attention.sliding_window_pattern"),
                         s->swa_pattern - 1);
    }
    if (s->rope_base_swa != 0.0) {
        kvs_gguf_set_f32(w, KVS_GEN_KEY("rope.freq_base_swa"),
                         (float) s->rope_base_swa);
    }
    kvs_gguf_set_u32(w, KVS_GEN_KEY("vocab_size"), s->n_vocab);

#undef KVS_GEN_KEY

    kvs_gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    kvs_gguf_set_str(w, "tokenizer.ggml.pre", "llama-bpe");

    kvs_gguf_w_key(w, "tokenizer.ggml.tokens", KVS_GGUF_ARR);
    kvs_gguf_w_arr(w, KVS_GGUF_STR, v->n_tokens);
    for (i = 0; i < v->n_tokens; i++) {
        kvs_gguf_w_str(w, v->tokens[i], strlen(v->tokens[i]));
    }

    kvs_gguf_w_key(w, "tokenizer.ggml.token_type", KVS_GGUF_ARR);
    kvs_gguf_w_arr(w, KVS_GGUF_I32, v->n_tokens);
    kvs_gguf_w_elems(w, v->types, v->n_tokens);

    kvs_gguf_w_key(w, "tokenizer.ggml.merges", KVS_GGUF_ARR);
    kvs_gguf_w_arr(w, KVS_GGUF_STR, v->n_merges);
    for (i = 0; i < v->n_merges; i++) {
        kvs_gguf_w_str(w, v->merges[i], strlen(v->merges[i]));
    }

    kvs_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", v->bos);
    kvs_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", v->eos);
    kvs_gguf_set_u32(w, "tokenizer.ggml.eot_token_id", v->eot);
    kvs_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", 1);
    kvs_gguf_set_bool(w, "tokenizer.ggml.add_eos_token", 0);
    kvs_gguf_set_str(w, "tokenizer.chat_template",
                     s->chat_template != NULL ? s->chat_template
                                              : kvs_gen_chat_template);
}


static void
kvs_gen_tensor(kvs_gguf_writer_t *w, const char *name, uint32_t type,
    uint64_t ne0, uint64_t ne1)
{
    uint64_t  ne[2];

    ne[0] = ne0;
    ne[1] = ne1;

    kvs_gguf_w_tensor(w, name, type, ne1 ? 2 : 1, ne, NULL);
}


static void
kvs_gen_tensors(kvs_gguf_writer_t *w, const kvs_gen_spec_t *s)
{
    char      n[64];
    uint32_t  l, hd, q, kv, t;

    hd = kvs_gen_head_dim(s);
    q = hd * s->n_head;
    kv = hd * s->n_head_kv;
    t = s->dtype;

    kvs_gen_tensor(w, "token_embd.weight", t, s->n_embd, s->n_vocab);

    for (l = 0; l < s->n_layer; l++) {
#define KVS_GEN_BLK(suffix, type, ne0, ne1)                                 \
        snprintf(n, sizeof(n), "blk.%u." suffix, l);                        \
        kvs_gen_tensor(w, n, type, ne0, ne1)

        KVS_GEN_BLK("attn_norm.weight", KVS_GGML_F32, s->n_embd, 0);

        if (s->arch == KVS_ARCH_PHI3) {
            KVS_GEN_BLK("attn_qkv.weight", t, s->n_embd, q + 2 * kv);

        } else {
            KVS_GEN_BLK("attn_q.weight", t, s->n_embd, q);
            KVS_GEN_BLK("attn_k.weight", t, s->n_embd, kv);
            KVS_GEN_BLK("attn_v.weight", t, s->n_embd, kv);
        }

        if (s->arch == KVS_ARCH_QWEN3 || s->arch == KVS_ARCH_GEMMA3) {
            KVS_GEN_BLK("attn_q_norm.weight", KVS_GGML_F32, hd, 0);
            KVS_GEN_BLK("attn_k_norm.weight", KVS_GGML_F32, hd, 0);
        }

        KVS_GEN_BLK("attn_output.weight", t, q, s->n_embd);
        if (KVS_GEN_GEMMA(s->arch)) {
            KVS_GEN_BLK("post_attention_norm.weight", KVS_GGML_F32,
                        s->n_embd, 0);
        }
        KVS_GEN_BLK("ffn_norm.weight", KVS_GGML_F32, s->n_embd, 0);
        if (KVS_GEN_GEMMA(s->arch)) {
            KVS_GEN_BLK("post_ffw_norm.weight", KVS_GGML_F32, s->n_embd, 0);
        }

        if (s->arch == KVS_ARCH_PHI3) {
            KVS_GEN_BLK("ffn_down.weight", t, s->n_ff, s->n_embd);
            KVS_GEN_BLK("ffn_up.weight", t, s->n_embd, 2 * s->n_ff);

        } else {
            KVS_GEN_BLK("ffn_gate.weight", t, s->n_embd, s->n_ff);
            KVS_GEN_BLK("ffn_down.weight", t, s->n_ff, s->n_embd);
            KVS_GEN_BLK("ffn_up.weight", t, s->n_embd, s->n_ff);
        }
#undef KVS_GEN_BLK
    }

    kvs_gen_tensor(w, "output_norm.weight", KVS_GGML_F32, s->n_embd, 0);

    if (!s->tied) {
        kvs_gen_tensor(w, "output.weight", t, s->n_embd, s->n_vocab);
    }
}


typedef struct {
    const kvs_gen_spec_t  *spec;
} kvs_gen_fill_ctx_t;


/* Weight values: uniform on [-a, a] with a = sqrt(3) x std. */
static int
kvs_gen_fill(void *ctx, const char *name, void *dst, uint64_t nbytes,
    kvs_err_t *err)
{
    int                          rc;
    float                        f[KVS_GEN_CHUNK];
    size_t                       len;
    uint8_t                     *out;
    uint64_t                     rng, nelem, done, n, i;
    const kvs_gen_spec_t        *s;
    const kvs_gen_fill_ctx_t    *c;
    const kvs_ggml_type_info_t  *ti;
    const float                  a = KVS_GEN_STD * 1.7320508f;

    c = ctx;
    s = c->spec;
    len = strlen(name);

    rng = kvs_fnv1a64(s->seed, name, len);

    if (len > 11 && strcmp(name + len - 11, "norm.weight") == 0) {
        for (i = 0; i < nbytes / 4; i++) {
            ((float *) dst)[i] = s->arch == KVS_ARCH_LLAMA ? 1.0f
                : 1.0f + 0.2f * (2.0f * (float) (kvs_splitmix64(&rng) >> 40)
                                 / (float) (1 << 24) - 1.0f);
        }
        return KVS_OK;
    }

    ti = kvs_ggml_type_info(s->dtype);
    nelem = nbytes / ti->size * ti->block;

    out = dst;

    for (done = 0; done < nelem; done += n) {
        n = nelem - done < KVS_GEN_CHUNK ? nelem - done : KVS_GEN_CHUNK;

        for (i = 0; i < n; i++) {
            f[i] = a * (2.0f * (float) (kvs_splitmix64(&rng) >> 40)
                        / (float) (1 << 24) - 1.0f);
        }

        /* KVS_GEN_CHUNK is a multiple of every block; so is nelem */
        rc = kvs_quant_quantize(s->dtype, f, out, (size_t) n, err);
        if (rc != KVS_OK) {
            return rc;
        }

        out += n / ti->block * ti->size;
    }

    return KVS_OK;
}


int
kvs_gen_write(const kvs_gen_spec_t *spec, const char *path, kvs_err_t *err)
{
    int                  rc;
    kvs_gen_vocab_t      vocab;
    kvs_gguf_writer_t   *w;
    kvs_gen_fill_ctx_t   ctx;

    rc = kvs_gen_check(spec, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_gen_vocab_build(&vocab, spec->n_vocab, spec->seed, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_gguf_writer_new(&w, 3, err);
    if (rc != KVS_OK) {
        kvs_gen_vocab_free(&vocab);
        return rc;
    }

    kvs_gen_metadata(w, spec, &vocab);
    kvs_gen_tensors(w, spec);

    ctx.spec = spec;
    rc = kvs_gguf_writer_write(w, path, kvs_gen_fill, &ctx, err);

    kvs_gguf_writer_free(w);
    kvs_gen_vocab_free(&vocab);

    return rc;
}
