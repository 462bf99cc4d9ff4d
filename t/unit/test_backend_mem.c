/*
 * test_backend_mem: what each backend says its weights and K/V take
 * (kvs_backend_mem_t): the CPU backend's bytes in the mapping and in its
 * own copies (kvs_cpu_model_footprint, kvs_cpu_model_mem, be->mem of a
 * made backend) and the CUDA plan's device bytes and K/V element
 * (kvs_cuda_plan_weights), over GGUF files written here with a mix of
 * types: matrices of nine table types, vectors F32, F16 and BF16, an
 * optional bias, tied and untied embeddings.  The expected numbers are
 * worked out in this file from the tensors' shapes and each type's block
 * (a table of its own, not the library's).
 */

#include "kvs_test.h"

#include <inttypes.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend/kvs_backend.h"
#include "backend/cpu/kvs_cpu.h"
#include "backend/cpu/kvs_cpu_qdot.h"
#include "backend/cuda/kvs_cuda_plan.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_gguf.h"
#include "model/kvs_model.h"

#define EMBD     256                  /* K-quant rows need 256 */
#define FF       512
#define HEADS    4
#define KV_HEADS 2
#define HD       (EMBD / HEADS)       /* 64 */
#define KVW      (KV_HEADS * HD)      /* 128 */
#define VOCAB    300
#define LAYERS   2
#define ALIGN    256                  /* KVS_CUDA_ALIGN, said again */
#define MAX_T    (3 + 12 * LAYERS)


/* One tensor of a test file, in the CUDA backend's slot order. */
typedef struct {
    char      name[64];
    uint32_t  type;
    uint64_t  ne0;
    uint64_t  ne1;                    /* 0: a vector */
} tensor_t;

typedef struct {
    tensor_t  t[MAX_T];
    uint32_t  n;
} file_t;


/* Elements per block and bytes per block, from ggml's definitions. */
static void
type_block(uint32_t type, uint64_t *block, uint64_t *size)
{
    switch (type) {
    case KVS_GGML_F32:    *block = 1;   *size = 4;   return;
    case KVS_GGML_F16:    *block = 1;   *size = 2;   return;
    case KVS_GGML_BF16:   *block = 1;   *size = 2;   return;
    case KVS_GGML_Q4_0:   *block = 32;  *size = 18;  return;
    case KVS_GGML_Q8_0:   *block = 32;  *size = 34;  return;
    case KVS_GGML_Q4_K:   *block = 256; *size = 144; return;
    case KVS_GGML_Q5_K:   *block = 256; *size = 176; return;
    case KVS_GGML_Q6_K:   *block = 256; *size = 210; return;
    case KVS_GGML_IQ4_XS: *block = 256; *size = 136; return;
    default:
        *block = 1;
        *size = 0;
        fail_msg("type %u not in the test's table", type);
    }
}


static uint64_t
stored_bytes(const tensor_t *t)
{
    uint64_t  block, size;

    type_block(t->type, &block, &size);

    return t->ne0 / block * size * (t->ne1 ? t->ne1 : 1);
}


static void
add(file_t *f, const char *name, uint32_t type, uint64_t ne0, uint64_t ne1)
{
    tensor_t  *t;

    assert_true(f->n < MAX_T);
    t = &f->t[f->n++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->type = type;
    t->ne0 = ne0;
    t->ne1 = ne1;
}


/*
 * The mixed file: layer 0 takes a different type per matrix and non-F32
 * vectors (and a Q bias), layer 1 is Q8_0 and F32 norms; untied unless
 * `tied` (then no output.weight).  all_f32 makes every tensor F32.
 */
static void
build(file_t *f, int tied, int all_f32)
{
    char      name[64];
    uint32_t  l;

    memset(f, 0, sizeof(file_t));

#define T(ty)  (all_f32 ? KVS_GGML_F32 : (ty))

    add(f, "token_embd.weight", T(KVS_GGML_Q4_K), EMBD, VOCAB);
    add(f, "output_norm.weight", T(KVS_GGML_F16), EMBD, 0);
    if (!tied) {
        add(f, "output.weight", T(KVS_GGML_Q6_K), EMBD, VOCAB);
    }

    for (l = 0; l < LAYERS; l++) {
#define L(suffix, ty0, ty1, ne0, ne1)                                        \
        snprintf(name, sizeof(name), "blk.%" PRIu32 ".%s", l, suffix);      \
        add(f, name, T(l == 0 ? (ty0) : (ty1)), ne0, ne1)

        /* slot order: kvs_cuda_plan_layer's */
        L("attn_norm.weight", KVS_GGML_BF16, KVS_GGML_F32, EMBD, 0);
        L("attn_q.weight", KVS_GGML_Q8_0, KVS_GGML_Q8_0, EMBD, EMBD);
        L("attn_k.weight", KVS_GGML_F16, KVS_GGML_Q8_0, EMBD, KVW);
        L("attn_v.weight", KVS_GGML_BF16, KVS_GGML_Q8_0, EMBD, KVW);
        if (l == 0) {
            L("attn_q.bias", KVS_GGML_F16, KVS_GGML_F16, EMBD, 0);
        }
        L("attn_output.weight", KVS_GGML_Q4_0, KVS_GGML_Q8_0, EMBD, EMBD);
        L("ffn_norm.weight", KVS_GGML_F32, KVS_GGML_F32, EMBD, 0);
        L("ffn_gate.weight", KVS_GGML_Q5_K, KVS_GGML_Q8_0, EMBD, FF);
        L("ffn_up.weight", KVS_GGML_IQ4_XS, KVS_GGML_Q8_0, EMBD, FF);
        L("ffn_down.weight", KVS_GGML_F32, KVS_GGML_Q8_0, FF, EMBD);
#undef L
    }

#undef T
}


static int
fill_zero(void *ctx, const char *name, void *dst, uint64_t nbytes,
    kvs_err_t *err)
{
    /* zero blocks: scales of 0, every type's valid encoding */
    memset(dst, 0, nbytes);

    return KVS_OK;
}


static kvs_model_t *
write_open(const file_t *f, const char *tag)
{
    char                name[128];
    uint32_t            i, nd;
    uint64_t            ne[2];
    const char         *path;
    kvs_err_t           err;
    kvs_model_t        *m;
    kvs_gguf_writer_t  *w;

    m = NULL;
    assert_int_equal(kvs_gguf_writer_new(&w, 3, &err), KVS_OK);
    kvs_gguf_set_str(w, "general.architecture", "llama");
    kvs_gguf_set_str(w, "general.name", tag);
    kvs_gguf_set_u32(w, "llama.context_length", 128);
    kvs_gguf_set_u32(w, "llama.embedding_length", EMBD);
    kvs_gguf_set_u32(w, "llama.block_count", LAYERS);
    kvs_gguf_set_u32(w, "llama.feed_forward_length", FF);
    kvs_gguf_set_u32(w, "llama.rope.dimension_count", HD);
    kvs_gguf_set_u32(w, "llama.attention.head_count", HEADS);
    kvs_gguf_set_u32(w, "llama.attention.head_count_kv", KV_HEADS);
    kvs_gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    kvs_gguf_set_f32(w, "llama.rope.freq_base", 10000.0f);
    kvs_gguf_set_u32(w, "llama.vocab_size", VOCAB);

    for (i = 0; i < f->n; i++) {
        ne[0] = f->t[i].ne0;
        ne[1] = f->t[i].ne1;
        nd = f->t[i].ne1 ? 2 : 1;
        assert_int_equal(kvs_gguf_w_tensor(w, f->t[i].name, f->t[i].type,
                                           nd, ne, NULL), KVS_OK);
    }

    snprintf(name, sizeof(name), "mem-%s.%d.gguf", tag, (int) getpid());
    path = kvs_test_tmp(name);

    if (kvs_gguf_writer_write(w, path, fill_zero, NULL, &err) != KVS_OK
        || kvs_model_open(&m, path, &err) != KVS_OK)
    {
        fail_msg("%s: %s", path, err.msg);
    }

    kvs_gguf_writer_free(w);
    unlink(path);

    return m;
}


/* The CPU's figures worked out from the shapes, nothing repacked:
 * matrices and F32 vectors in the mapping, other vectors as F32 copies. */
static void
cpu_expect(const file_t *f, uint64_t *mapped, uint64_t *owned)
{
    uint32_t  i;

    *mapped = 0;
    *owned = 0;

    for (i = 0; i < f->n; i++) {
        if (f->t[i].ne1 != 0 || f->t[i].type == KVS_GGML_F32) {
            *mapped += stored_bytes(&f->t[i]);
        } else {
            *owned += f->t[i].ne0 * 4;
        }
    }
}


/* The CUDA plan's worked out: each tensor aligned to 256 in slot order,
 * matrices F32 4 bytes an element, F16 2, everything else BF16's 2,
 * vectors F32; then the RoPE table, HD / 2 doubles. */
static uint64_t
cuda_expect(const file_t *f, int *all_f32)
{
    uint32_t  i;
    uint64_t  total, elem;

    total = 0;
    *all_f32 = 1;

    for (i = 0; i < f->n; i++) {
        if (f->t[i].ne1 == 0) {
            elem = 4;
        } else {
            elem = f->t[i].type == KVS_GGML_F32 ? 4 : 2;
            *all_f32 &= f->t[i].type == KVS_GGML_F32;
        }

        total = (total + ALIGN - 1) / ALIGN * ALIGN;
        total += f->t[i].ne0 * (f->t[i].ne1 ? f->t[i].ne1 : 1) * elem;
    }

    total = (total + ALIGN - 1) / ALIGN * ALIGN;

    return total + HD / 2 * 8;
}


static void
check_cpu(const file_t *f, kvs_model_t *m)
{
    uint64_t             mapped, owned, em, eo, packed;
    uint32_t             i;
    kvs_err_t            err;
    kvs_backend_t       *be;
    kvs_cpu_model_t     *cm;
    kvs_backend_conf_t   bc;

    cpu_expect(f, &em, &eo);

    /* capped at AVX2: nothing is repacked, the figures are exact */
    setenv("KVSERVE_CPU_SIMD", "1", 1);
    assert_int_equal(kvs_cpu_model_footprint(m, &mapped, &owned, &err),
                     KVS_OK);
    assert_true(mapped == em);
    assert_true(owned == eo);

    /* a model loaded for compute says the same */
    assert_int_equal(kvs_cpu_model_new(&cm, m, &err), KVS_OK);
    mapped = owned = 0;
    kvs_cpu_model_mem(cm, &mapped, &owned);
    assert_true(mapped == em);
    assert_true(owned == eo);
    kvs_cpu_model_free(cm);

    /* and so does the backend the engine makes, with an f32 cache */
    memset(&bc, 0, sizeof(bc));
    bc.n_blocks = 2;
    bc.block_tokens = 16;
    bc.threads = 1;
    bc.kind = KVS_BACKEND_CPU;
    assert_int_equal(kvs_backend_cpu_new(&be, m, &bc, &err), KVS_OK);
    assert_true(be->mem.weights_mapped == em);
    assert_true(be->mem.weights_owned == eo);
    assert_true(be->mem.weights_device == 0);
    assert_int_equal(be->mem.kv_dtype, KVS_BACKEND_KV_F32);
    assert_int_equal(kvs_backend_kv_size(be->mem.kv_dtype), 4);
    assert_string_equal(kvs_backend_kv_name(be->mem.kv_dtype), "f32");
    /* its K/V storage is that element: 2 blocks of 16 tokens, K and V
     * of KVW floats each per layer */
    assert_true(be->kv_bytes == 2ull * 16 * LAYERS * 2 * KVW * 4);
    kvs_backend_free(be);

    /* at this host's own level: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
     * Q4_K, Q5_K and Q6_K product matrices (not tok_embd) leave the
     * mapping for a repacked
     * copy of at least their bytes on AVX-512 VNNI; elsewhere the
     * figures above again */
    unsetenv("KVSERVE_CPU_SIMD");
    assert_int_equal(kvs_cpu_model_footprint(m, &mapped, &owned, &err),
                     KVS_OK);

    for (i = 0, packed = 0; i < f->n; i++) {
        if (f->t[i].ne1 != 0
            && (f->t[i].type == KVS_GGML_Q8_0
                || kvs_cpu_qlp_rec(f->t[i].type) != 0
                || kvs_cpu_qkp_rec(f->t[i].type) != 0)
            && strcmp(f->t[i].name, "token_embd.weight") != 0)
        {
            packed += stored_bytes(&f->t[i]);
        }
    }

    if (mapped == em) {
        assert_true(owned == eo);
    } else {
        assert_true(packed > 0);
        assert_true(mapped == em - packed);
        assert_true(owned - eo >= packed);
        assert_int_equal((owned - eo) % 64, 0);
    }
}


static void
test_mixed(void **state)
{
    int           kv_dt, all_f32;
    file_t        f;
    uint64_t      dev, mapped, owned;
    kvs_err_t     err;
    kvs_model_t  *m;

    build(&f, 0, 0);
    m = write_open(&f, "mixed");

    check_cpu(&f, m);

    /* by hand for one tensor: Q4_K token_embd, 300 rows of 256 / 256
     * blocks of 144 bytes = 43200 bytes in the mapping, 153600 on the
     * device (BF16) */
    assert_int_equal(stored_bytes(&f.t[0]), 43200);
    cpu_expect(&f, &mapped, &owned);
    /* output_norm F16, attn_norm BF16, the F16 bias: three vectors of
     * 256 floats owned */
    assert_int_equal(owned, 3 * 256 * 4);

    assert_int_equal(kvs_cuda_plan_weights(m, &dev, &kv_dt, &err), KVS_OK);
    assert_true(dev == cuda_expect(&f, &all_f32));
    assert_false(all_f32);
    assert_int_equal(kv_dt, KVS_CUDA_DT_BF16);
    /* quantized in the file, wider on the device */
    assert_true(dev > mapped + owned);

    kvs_model_close(m);
}


static void
test_tied(void **state)
{
    int           kv_dt, all_f32;
    file_t        f;
    uint64_t      dev;
    kvs_err_t     err;
    kvs_model_t  *m;

    /* no output.weight: the embedding serves both, counted once */
    build(&f, 1, 0);
    m = write_open(&f, "tied");

    check_cpu(&f, m);

    assert_int_equal(kvs_cuda_plan_weights(m, &dev, &kv_dt, &err), KVS_OK);
    assert_true(dev == cuda_expect(&f, &all_f32));
    assert_int_equal(kv_dt, KVS_CUDA_DT_BF16);

    kvs_model_close(m);
}


static void
test_all_f32(void **state)
{
    int           kv_dt, all_f32;
    file_t        f;
    uint64_t      dev, mapped, owned;
    kvs_err_t     err;
    kvs_model_t  *m;

    build(&f, 0, 1);
    m = write_open(&f, "f32");

    check_cpu(&f, m);
    cpu_expect(&f, &mapped, &owned);
    assert_int_equal(owned, 0);

    /* every matrix F32: the CUDA cache stays F32, the CPU's sums */
    assert_int_equal(kvs_cuda_plan_weights(m, &dev, &kv_dt, &err), KVS_OK);
    assert_true(dev == cuda_expect(&f, &all_f32));
    assert_true(all_f32);
    assert_int_equal(kv_dt, KVS_CUDA_DT_F32);

    kvs_model_close(m);
}


static void
test_names(void **state)
{
    assert_string_equal(kvs_backend_kv_name(KVS_BACKEND_KV_F32), "f32");
    assert_string_equal(kvs_backend_kv_name(KVS_BACKEND_KV_BF16), "bf16");
    assert_string_equal(kvs_backend_kv_name(KVS_BACKEND_KV_MAX + 1), "?");
    assert_int_equal(kvs_backend_kv_size(KVS_BACKEND_KV_F32), 4);
    assert_int_equal(kvs_backend_kv_size(KVS_BACKEND_KV_BF16), 2);
    assert_int_equal(kvs_backend_kv_size(KVS_BACKEND_KV_MAX + 1), 0);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_mixed),
        cmocka_unit_test(test_tied),
        cmocka_unit_test(test_all_f32),
        cmocka_unit_test(test_names),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
