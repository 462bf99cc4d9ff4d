/*
 * kvs_quantize: `kvserve quantize`'s library side (see kvs_quantize.h):
 * the mixes as one table of data, the type each tensor gets, and the
 * rewrite of a model through kvs_quant's table.
 *
 * Invariants: nothing is written before every tensor's type is chosen
 * and the table can make it (the writer writes path.tmp, renamed at the
 * end, so a failure leaves no partial output); a tensor whose type does
 * not change is copied byte for byte (no round trip through f32); the
 * output's bytes do not depend on the thread count (rows are quantized
 * independently, each into its own place).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/kvs_threads.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_hparams.h"
#include "model/kvs_quant.h"
#include "kvs_quantize.h"

#define KVS_QUANTIZE_CHUNK  65536     /* f32 elements converted at a time
                                         (whole rows; at least one) */


#define F32   KVS_GGML_F32
#define F16   KVS_GGML_F16
#define BF16  KVS_GGML_BF16
#define Q4_0  KVS_GGML_Q4_0
#define Q4_1  KVS_GGML_Q4_1
#define Q5_0  KVS_GGML_Q5_0
#define Q5_1  KVS_GGML_Q5_1
#define Q8_0  KVS_GGML_Q8_0
#define Q2_K  KVS_GGML_Q2_K
#define Q3_K  KVS_GGML_Q3_K
#define Q4_K  KVS_GGML_Q4_K
#define Q5_K  KVS_GGML_Q5_K
#define Q6_K  KVS_GGML_Q6_K
#define IQ4N  KVS_GGML_IQ4_NL
#define IQ4X  KVS_GGML_IQ4_XS
#define BASE  KVS_MIX_BASE
#define NONE  { KVS_MIX_NEVER, BASE, BASE }

/*
 * The mixes, after llama.cpp's llama_tensor_get_type() for a Llama
 * without experts and without an importance matrix.  Columns: name,
 * LLAMA_FTYPE, base, output.weight, then the attn_v, attn_output and
 * ffn_down rules { when, type, otherwise }.  token_embd gets the base,
 * or output.weight's type when the model has none (tied embeddings).
 * Left out: llama.cpp's 70B-only bump of attn_v and its Falcon rules.
 */
static const kvs_quant_mix_t  kvs_quant_mixes[] = {
    { "f32",    0, F32,  F32,  NONE, NONE, NONE },
    { "f16",    1, F16,  F16,  NONE, NONE, NONE },
    { "bf16",  32, BF16, BF16, NONE, NONE, NONE },
    { "q4_0",   2, Q4_0, Q6_K, NONE, NONE, NONE },
    { "q4_1",   3, Q4_1, Q6_K, NONE, NONE, NONE },
    { "q8_0",   7, Q8_0, Q8_0, NONE, NONE, NONE },
    { "q5_0",   8, Q5_0, Q6_K, NONE, NONE, NONE },
    { "q5_1",   9, Q5_1, Q6_K, NONE, NONE, NONE },
    { "q2_k",  10, Q2_K, Q6_K,
      { KVS_MIX_GQA4, Q4_K, Q3_K },
      { KVS_MIX_ALL, Q3_K, BASE },
      { KVS_MIX_ALL, Q3_K, BASE } },
    { "q3_k_s", 11, Q3_K, Q6_K, NONE, NONE, NONE },
    { "q3_k_m", 12, Q3_K, Q6_K,
      { KVS_MIX_FIRST_2, Q5_K, Q4_K },
      { KVS_MIX_ALL, Q4_K, BASE },
      { KVS_MIX_FIRST_16TH, Q5_K, Q4_K } },
    { "q3_k_l", 13, Q3_K, Q6_K,
      { KVS_MIX_ALL, Q5_K, BASE },
      { KVS_MIX_ALL, Q5_K, BASE },
      { KVS_MIX_ALL, Q5_K, BASE } },
    { "q4_k_s", 14, Q4_K, Q6_K,
      { KVS_MIX_FIRST_4, Q5_K, BASE },
      NONE,
      { KVS_MIX_FIRST_8TH, Q5_K, BASE } },
    { "q4_k_m", 15, Q4_K, Q6_K,
      { KVS_MIX_MORE_BITS, Q6_K, BASE },
      NONE,
      { KVS_MIX_MORE_BITS, Q6_K, BASE } },
    { "q5_k_s", 16, Q5_K, Q6_K, NONE, NONE, NONE },
    { "q5_k_m", 17, Q5_K, Q6_K,
      { KVS_MIX_MORE_BITS, Q6_K, BASE },
      NONE,
      { KVS_MIX_MORE_BITS, Q6_K, BASE } },
    { "q6_k",   18, Q6_K, Q6_K, NONE, NONE, NONE },
    { "iq4_nl", 25, IQ4N, Q6_K,
      { KVS_MIX_GQA4, Q5_K, BASE },
      NONE,
      { KVS_MIX_FIRST_8TH, Q5_K, BASE } },
    { "iq4_xs", 30, IQ4X, Q6_K,
      { KVS_MIX_GQA4, Q5_K, BASE },
      NONE,
      { KVS_MIX_FIRST_8TH, Q5_K, BASE } },
};

#define KVS_QUANT_N_MIXES                                                    \
    (sizeof(kvs_quant_mixes) / sizeof(kvs_quant_mixes[0]))

#undef F32
#undef F16
#undef BF16
#undef Q4_0
#undef Q4_1
#undef Q5_0
#undef Q5_1
#undef Q8_0
#undef Q2_K
#undef Q3_K
#undef Q4_K
#undef Q5_K
#undef Q6_K
#undef IQ4N
#undef IQ4X
#undef BASE
#undef NONE


const kvs_quant_mix_t *
kvs_quant_mix(const char *name)
{
    size_t  i;

    for (i = 0; i < KVS_QUANT_N_MIXES; i++) {
        if (strcasecmp(kvs_quant_mixes[i].name, name) == 0) {
            return &kvs_quant_mixes[i];
        }
    }

    return NULL;
}


void
kvs_quant_mix_names(char *buf, size_t size)
{
    int     k;
    size_t  i, len;

    len = 0;

    if (size == 0) {
        return;
    }

    buf[0] = '\0';

    for (i = 0; i < KVS_QUANT_N_MIXES; i++) {
        k = snprintf(buf + len, size - len, "%s%s", i ? ", " : "",
                     kvs_quant_mixes[i].name);
        if (k < 0 || (size_t) k >= size - len) {
            return;
        }

        len += (size_t) k;
    }
}


uint32_t
kvs_quant_mix_ftype(uint32_t type)
{
    size_t  i;

    for (i = 0; i < KVS_QUANT_N_MIXES; i++) {
        if (kvs_quant_mixes[i].base == type) {
            return kvs_quant_mixes[i].ftype;
        }
    }

    return 0;
}


static int
kvs_quant_mix_holds(kvs_mix_when_t when, uint32_t i, uint32_t n,
    uint32_t n_gqa)
{
    switch (when) {
    case KVS_MIX_ALL:
        return 1;
    case KVS_MIX_MORE_BITS:
        return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
    case KVS_MIX_FIRST_8TH:
        return i < n / 8;
    case KVS_MIX_FIRST_16TH:
        return i < n / 16;
    case KVS_MIX_FIRST_2:
        return i < 2;
    case KVS_MIX_FIRST_4:
        return i < 4;
    case KVS_MIX_GQA4:
        return n_gqa >= 4;
    default:
        return 0;
    }
}


/* A type whose block fits rows of ne0, as llama.cpp falls back. */
static uint32_t
kvs_quant_mix_fit(uint32_t type, uint64_t ne0)
{
    const kvs_ggml_type_info_t  *info;

    info = kvs_ggml_type_info(type);
    if (info != NULL && ne0 % info->block == 0) {
        return type;
    }

    switch (type) {
    case KVS_GGML_Q2_K:
    case KVS_GGML_Q3_K:
    case KVS_GGML_IQ4_XS:
        type = KVS_GGML_IQ4_NL;
        break;
    case KVS_GGML_Q4_K:
        type = KVS_GGML_Q5_0;
        break;
    case KVS_GGML_Q5_K:
        type = KVS_GGML_Q5_1;
        break;
    case KVS_GGML_Q6_K:
        type = KVS_GGML_Q8_0;
        break;
    default:
        return KVS_GGML_F16;
    }

    info = kvs_ggml_type_info(type);

    return info != NULL && ne0 % info->block == 0 ? type : KVS_GGML_F16;
}


uint32_t
kvs_quant_mix_type(const kvs_quant_mix_t *mix, const char *name,
    uint32_t n_dims, uint64_t ne0, uint32_t cur, uint32_t n_layer,
    uint32_t n_gqa, int tied)
{
    char                   *end;
    size_t                  len;
    uint32_t                type;
    unsigned long           layer;
    const char             *suffix;
    const kvs_mix_rule_t   *rule;

    len = strlen(name);

    if (n_dims < 2 || len < 7 || strcmp(name + len - 7, ".weight") != 0) {
        return cur;
    }

    type = mix->base;
    rule = NULL;
    layer = 0;

    /* a tied token_embd is also the output matrix, whose error weighs
     * on every logit: llama.cpp gives it the output's type */
    if (strcmp(name, "output.weight") == 0
        || (tied && strcmp(name, "token_embd.weight") == 0))
    {
        type = mix->output;

    } else if (strncmp(name, "blk.", 4) == 0) {
        layer = strtoul(name + 4, &end, 10);
        suffix = *end == '.' ? end + 1 : "";

        if (strcmp(suffix, "attn_v.weight") == 0) {
            rule = &mix->attn_v;
        } else if (strcmp(suffix, "attn_output.weight") == 0) {
            rule = &mix->attn_output;
        } else if (strcmp(suffix, "ffn_down.weight") == 0) {
            rule = &mix->ffn_down;
        }
    }

    if (rule != NULL && rule->when != KVS_MIX_NEVER) {
        type = kvs_quant_mix_holds(rule->when, (uint32_t) layer, n_layer,
                                   n_gqa)
               ? rule->type : rule->other;
        if (type == KVS_MIX_BASE) {
            type = mix->base;
        }
    }

    return kvs_quant_mix_fit(type, ne0);
}


/* ---- the rewrite ------------------------------------------------------ */

typedef struct {
    const kvs_gguf_t  *in;
    const uint32_t    *types;         /* output type by input tensor */
    kvs_threads_t     *tp;
    float             *f;             /* [threads][chunk] */
    uint64_t           chunk;         /* the largest tensor chunk */
} kvs_quantize_ctx_t;

/* One tensor's conversion, split into tasks of a chunk of whole rows:
 * rows are quantized independently, so the bytes do not depend on how
 * many threads share them. */
typedef struct {
    const kvs_quantize_ctx_t  *c;
    const kvs_gguf_tensor_t   *t;
    uint8_t                   *out;
    uint32_t                   type;
    uint64_t                   chunk;  /* elements per task */
    uint64_t                   in_row; /* input bytes per row */
    int                        failed; /* set once, by the first task
                                          that fails; then err is its */
    kvs_err_t                  err;
} kvs_quantize_job_t;


static int
kvs_quantize_meta(kvs_gguf_writer_t *w, const kvs_gguf_t *g, uint32_t ftype)
{
    int                   rc;
    uint64_t              i;
    const kvs_gguf_kv_t  *kv;

    rc = KVS_OK;

    for (i = 0; rc == KVS_OK && i < kvs_gguf_n_kv(g); i++) {
        kv = kvs_gguf_kv_at(g, i);

        if (kvs_gguf_str_eq(kv->key, "general.file_type")
            || kvs_gguf_str_eq(kv->key, "general.quantization_version"))
        {
            continue;
        }

        rc = kvs_gguf_w_copy(w, kv);
    }

    if (rc == KVS_OK) {
        rc = kvs_gguf_set_u32(w, "general.file_type", ftype);
    }

    if (rc == KVS_OK) {
        rc = kvs_gguf_set_u32(w, "general.quantization_version", 2);
    }

    return rc;
}


/* Elements per conversion of rows of ne0: whole rows, at least one. */
static uint64_t
kvs_quantize_chunk(uint64_t ne0)
{
    return KVS_QUANTIZE_CHUNK / ne0 > 0 ? KVS_QUANTIZE_CHUNK / ne0 * ne0
                                        : ne0;
}


static void
kvs_quantize_task(void *arg, uint32_t task, uint32_t thread)
{
    int                          rc, was;
    float                       *f;
    uint64_t                     done, n;
    kvs_err_t                    err;
    kvs_quantize_job_t          *job;
    const kvs_ggml_type_info_t  *to;

    job = arg;
    to = kvs_ggml_type_info(job->type);
    f = job->c->f + (size_t) thread * job->c->chunk;
    done = (uint64_t) task * job->chunk;
    n = job->t->nelem - done < job->chunk ? job->t->nelem - done
                                          : job->chunk;

    kvs_err_clear(&err);

    rc = kvs_quant_dequantize(job->t->type, (const uint8_t *) job->t->data
                              + done / job->t->ne[0] * job->in_row,
                              f, (size_t) n, &err);
    if (rc == KVS_OK) {
        rc = kvs_quant_quantize(job->type, f,
                                job->out + done / to->block * to->size,
                                (size_t) n, &err);
    }

    was = 0;
    if (rc != KVS_OK
        && __atomic_compare_exchange_n(&job->failed, &was, 1, 0,
                                       __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    {
        job->err = err;
    }
}


/* The writer's fill for a tensor whose type changes: the input's rows
 * dequantized and quantized through the table, a chunk per task. */
static int
kvs_quantize_fill(void *arg, const char *name, void *dst, uint64_t nbytes,
    kvs_err_t *err)
{
    uint64_t                     i, tasks;
    kvs_quantize_ctx_t          *c;
    kvs_quantize_job_t           job;
    const kvs_gguf_tensor_t     *t;
    const kvs_ggml_type_info_t  *ti, *to;

    c = arg;
    t = NULL;
    memset(&job, 0, sizeof(job));

    for (i = 0; i < kvs_gguf_n_tensors(c->in); i++) {
        t = kvs_gguf_tensor_at(c->in, i);
        if (kvs_gguf_str_eq(t->name, name)) {
            job.type = c->types[i];
            break;
        }
        t = NULL;
    }

    if (t == NULL) {
        return kvs_err_set(err, KVS_EINVAL, "no tensor %s", name);
    }

    ti = kvs_ggml_type_info(t->type);
    to = kvs_ggml_type_info(job.type);

    if (t->nelem / to->block * to->size > nbytes) {
        return kvs_err_set(err, KVS_EINVAL, "tensor %s: output too small",
                           name);
    }

    job.c = c;
    job.t = t;
    job.out = dst;
    job.in_row = t->ne[0] / ti->block * ti->size;
    job.chunk = kvs_quantize_chunk(t->ne[0]);
    tasks = (t->nelem + job.chunk - 1) / job.chunk;

    if (tasks > UINT32_MAX) {
        return kvs_err_set(err, KVS_EINVAL, "tensor %s: too large", name);
    }

    kvs_threads_run(c->tp, kvs_quantize_task, &job, (uint32_t) tasks);

    if (job.failed) {
        *err = job.err;
        return kvs_err_prefix(err, "tensor %s", name);
    }

    return KVS_OK;
}


int
kvs_quantize_file(const char *in, const char *out,
    const kvs_quant_mix_t *mix, kvs_err_t *err)
{
    return kvs_quantize_file_threads(in, out, mix, 1, err);
}


int
kvs_quantize_file_threads(const char *in, const char *out,
    const kvs_quant_mix_t *mix, unsigned n_threads, kvs_err_t *err)
{
    int                       rc;
    char                      name[KVS_GGUF_MAX_NAME + 1];
    uint32_t                 *types, n_gqa;
    uint64_t                  i, chunk;
    kvs_gguf_t               *g;
    kvs_hparams_t             hp;
    kvs_gguf_writer_t        *w;
    kvs_quantize_ctx_t        ctx;
    const kvs_quant_type_t   *q;
    const kvs_gguf_tensor_t  *t;

    rc = kvs_gguf_open(&g, in, err);
    if (rc != KVS_OK) {
        return rc;
    }

    types = NULL;
    w = NULL;
    ctx.f = NULL;
    ctx.tp = NULL;

    rc = kvs_hparams_read(&hp, g, err);
    if (rc != KVS_OK) {
        goto done;
    }

    n_gqa = hp.n_head_kv > 0 ? hp.n_head / hp.n_head_kv : 1;

    types = calloc(kvs_gguf_n_tensors(g) + 1, sizeof(uint32_t));
    if (types == NULL) {
        rc = kvs_err_set(err, KVS_ENOMEM, "out of memory");
        goto done;
    }

    /* every type chosen and checked against the table first */
    chunk = 0;

    for (i = 0; i < kvs_gguf_n_tensors(g); i++) {
        t = kvs_gguf_tensor_at(g, i);
        snprintf(name, sizeof(name), "%.*s", (int) t->name.len,
                 t->name.ptr);

        types[i] = kvs_quant_mix_type(mix, name, t->n_dims, t->ne[0],
                                      t->type, hp.n_layer, n_gqa,
                                      hp.tied_embeddings);
        if (types[i] == t->type) {
            continue;
        }

        rc = kvs_quant_check(name, t->type, err);
        if (rc != KVS_OK) {
            (void) kvs_err_prefix(err, "cannot read");
            goto done;
        }

        q = kvs_quant_type(types[i]);
        if (q == NULL || q->quantize == NULL) {
            rc = kvs_err_set(err, KVS_EUNSUPPORTED, "mix %s "
                             "wants %s for tensor %s, which kvserve cannot "
                             "make", mix->name,
                             kvs_ggml_type_name(types[i]), name);
            goto done;
        }

        if (kvs_quantize_chunk(t->ne[0]) > chunk) {
            chunk = kvs_quantize_chunk(t->ne[0]);
        }
    }

    if (chunk > 0) {
        rc = kvs_threads_new(&ctx.tp, n_threads, err);
        if (rc != KVS_OK) {
            goto done;
        }

        ctx.chunk = chunk;
        ctx.f = malloc(chunk * n_threads * sizeof(float));
        if (ctx.f == NULL) {
            rc = kvs_err_set(err, KVS_ENOMEM, "out of memory");
            goto done;
        }
    }

    rc = kvs_gguf_writer_new(&w, 3, err);
    if (rc != KVS_OK) {
        goto done;
    }

    if (kvs_quantize_meta(w, g, mix->ftype) != KVS_OK) {
        rc = kvs_err_set(err, KVS_EINVAL, "cannot copy the "
                         "metadata of \"%s\"", in);
        goto done;
    }

    for (i = 0; i < kvs_gguf_n_tensors(g); i++) {
        t = kvs_gguf_tensor_at(g, i);
        snprintf(name, sizeof(name), "%.*s", (int) t->name.len,
                 t->name.ptr);

        rc = kvs_gguf_w_tensor(w, name, types[i], t->n_dims, t->ne,
                               types[i] == t->type ? t->data : NULL);
        if (rc != KVS_OK) {
            rc = kvs_err_set(err, rc, "cannot declare tensor %s",
                             name);
            goto done;
        }
    }

    ctx.in = g;
    ctx.types = types;

    rc = kvs_gguf_writer_write(w, out, kvs_quantize_fill, &ctx, err);

done:

    kvs_gguf_writer_free(w);
    kvs_threads_free(ctx.tp);
    free(ctx.f);
    free(types);
    kvs_gguf_close(g);

    return rc;
}
