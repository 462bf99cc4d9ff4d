/*
 * kvs_cli_plan: `kvserve plan`, the capacity planner (docs/capacity.md).
 *
 *     kvserve plan MODEL.gguf | --shape layers=L,kv_heads=H,head_dim=D
 *         --memory SIZE [--kv-dtype f32|f16|bf16|fp8|int8]
 *         [--context N] [--batch N] [--weights SIZE] [--block N]
 *
 * The shape comes from the model's hyper-parameters, read through the
 * validated GGUF reader (kvs_gguf_open, kvs_hparams_read and the tensor
 * checks a load makes), or from --shape.  A model's weights are the
 * bytes its tensors take as stored, subtracted from --memory before the
 * KV cache is planned; --weights gives (or overrides) them.  The figures
 * are kvs_kv_plan's, for the chosen element and, in a table below, for
 * every element with the model's KV heads (GQA) and with as many KV
 * heads as query heads (MHA), when the query heads are known.
 *
 * Exit status: 0 planned, 1 the model could not be read or nothing fits
 * the memory, 2 a bad argument (the message names it).
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kv/kvs_kv_plan.h"
#include "kv/kvs_kv_size.h"
#include "model/kvs_gguf.h"
#include "model/kvs_hparams.h"
#include "model/kvs_model.h"
#include "kvs_cli.h"

#define KVS_PLAN_CTX_DEFAULT  8192    /* --shape without --context */
#define KVS_PLAN_CTX_MAX      (1ULL << 40)


typedef struct {
    const char           *model;
    const char           *shape;
    const char           *memory;
    const char           *weights;
    kvs_kv_plan_dtype_t   dtype;
    uint64_t              context;    /* 0: the default */
    uint64_t              batch;
    uint32_t              block;
} kvs_plan_args_t;


static void
kvs_plan_usage(FILE *f)
{
    fprintf(f, "usage: kvserve plan (MODEL.gguf | --shape layers=L,"
            "kv_heads=H,head_dim=D[,heads=Q][,head_dim_v=V])\n"
            "           --memory SIZE [--kv-dtype f32|f16|bf16|fp8|int8] "
            "[--context N]\n"
            "           [--batch N] [--weights SIZE] [--block N]\n"
            "  SIZE: bytes with an optional k, m or g suffix (powers of "
            "1024); N: a whole\n  number, k = x1000 for --context "
            "(200k = 200000)\n");
}


/* A whole number, "k" for thousands when allowed, in 1..max. */
static int
kvs_plan_count(const char *opt, const char *s, int k_ok, uint64_t max,
    uint64_t *out)
{
    size_t    i, len;
    uint64_t  n, mult;

    len = strlen(s);
    mult = 1;

    if (k_ok && len > 1 && (s[len - 1] == 'k' || s[len - 1] == 'K')) {
        mult = 1000;
        len--;
    }

    n = 0;

    for (i = 0; i < len && i < 20; i++) {
        if (s[i] < '0' || s[i] > '9' || n > (UINT64_MAX - 9) / 10) {
            break;
        }
        n = n * 10 + (uint64_t) (s[i] - '0');
    }

    if (len == 0 || i != len || n == 0 || n > max / mult) {
        fprintf(stderr, "kvserve plan: %s \"%s\": expected a whole number "
                "1..%" PRIu64 "%s\n", opt, s, max,
                k_ok ? " (k: thousands)" : "");
        return 2;
    }

    *out = n * mult;

    return 0;
}


/* SIZE as nginx writes sizes (kvs_kv_cache_parse), a fraction refused. */
static int
kvs_plan_size(const char *opt, const char *s, int zero_ok, uint64_t *out)
{
    kvs_err_t            err;
    kvs_kv_cache_spec_t  spec;

    if (zero_ok && strcmp(s, "0") == 0) {
        *out = 0;
        return 0;
    }

    if (kvs_kv_cache_parse(&spec, s, strlen(s), &err) != KVS_OK) {
        fprintf(stderr, "kvserve plan: %s %s\n", opt, err.msg);
        return 2;
    }

    if (spec.bytes == 0) {
        fprintf(stderr, "kvserve plan: %s \"%s\": expected a size such as "
                "80g, not a fraction\n", opt, s);
        return 2;
    }

    *out = spec.bytes;

    return 0;
}


static int
kvs_plan_args(int argc, char **argv, kvs_plan_args_t *a)
{
    int          i;
    uint64_t     n;
    kvs_err_t    err;
    const char  *opt, *val;

    memset(a, 0, sizeof(kvs_plan_args_t));
    a->dtype = KVS_KV_PLAN_BF16;
    a->batch = 1;
    a->block = 16;

    for (i = 1; i < argc; i++) {
        opt = argv[i];

        if (strcmp(opt, "-h") == 0 || strcmp(opt, "--help") == 0) {
            kvs_plan_usage(stdout);
            return -1;
        }

        if (opt[0] != '-') {
            if (a->model != NULL) {
                fprintf(stderr, "kvserve plan: a second model \"%s\"\n",
                        opt);
                return 2;
            }
            a->model = opt;
            continue;
        }

        if (i + 1 >= argc) {
            fprintf(stderr, "kvserve plan: %s needs a value\n", opt);
            return 2;
        }

        val = argv[++i];

        if (strcmp(opt, "--shape") == 0) {
            a->shape = val;
        } else if (strcmp(opt, "--memory") == 0) {
            a->memory = val;
        } else if (strcmp(opt, "--weights") == 0) {
            a->weights = val;
        } else if (strcmp(opt, "--kv-dtype") == 0) {
            if (kvs_kv_plan_dtype_parse(&a->dtype, val, strlen(val), &err)
                != KVS_OK)
            {
                fprintf(stderr, "kvserve plan: --kv-dtype: %s\n", err.msg);
                return 2;
            }
        } else if (strcmp(opt, "--context") == 0) {
            if (kvs_plan_count(opt, val, 1, KVS_PLAN_CTX_MAX, &a->context)) {
                return 2;
            }
        } else if (strcmp(opt, "--batch") == 0) {
            if (kvs_plan_count(opt, val, 0, KVS_PLAN_CTX_MAX, &a->batch)) {
                return 2;
            }
        } else if (strcmp(opt, "--block") == 0) {
            if (kvs_plan_count(opt, val, 0, 65536, &n)) {
                return 2;
            }
            a->block = (uint32_t) n;
        } else {
            fprintf(stderr, "kvserve plan: unknown option \"%s\"\n", opt);
            kvs_plan_usage(stderr);
            return 2;
        }
    }

    if ((a->model == NULL) == (a->shape == NULL)) {
        fprintf(stderr, "kvserve plan: give a model or --shape (one of "
                "them)\n");
        kvs_plan_usage(stderr);
        return 2;
    }

    if (a->memory == NULL) {
        fprintf(stderr, "kvserve plan: --memory SIZE is required (the "
                "accelerator's or host's memory, e.g. 80g)\n");
        return 2;
    }

    return 0;
}


/* The shape, context and stored weights of a model file. */
static int
kvs_plan_model(const char *path, kvs_kv_shape_t *shape, uint64_t *ctx,
    uint64_t *weights, char *arch, size_t arch_len)
{
    uint64_t                  i;
    kvs_err_t                 err;
    kvs_gguf_t               *g;
    kvs_hparams_t             hp;
    const kvs_gguf_tensor_t  *t;

    if (kvs_gguf_open(&g, path, &err) != KVS_OK) {
        fprintf(stderr, "kvserve plan: %s\n", err.msg);
        return 1;
    }

    if (kvs_hparams_read(&hp, g, &err) != KVS_OK
        || kvs_model_check_tensors(g, &hp, &err) != KVS_OK)
    {
        fprintf(stderr, "kvserve plan: %s: not a servable model: %s\n",
                path, err.msg);
        kvs_gguf_close(g);
        return 1;
    }

    shape->n_layer = hp.n_layer;
    shape->n_head = hp.n_head;
    shape->n_head_kv = hp.n_head_kv;
    shape->head_dim_k = hp.head_dim_k;
    shape->head_dim_v = hp.head_dim_v;
    *ctx = hp.n_ctx_train;
    snprintf(arch, arch_len, "%s%s", hp.arch,
             hp.n_swa != 0 ? ", sliding-window layers counted at the full "
                             "context" : "");

    *weights = 0;
    for (i = 0; i < kvs_gguf_n_tensors(g); i++) {
        t = kvs_gguf_tensor_at(g, i);
        *weights += t->nbytes;
    }

    kvs_gguf_close(g);

    return 0;
}


static void
kvs_plan_row(const kvs_kv_shape_t *shape, uint32_t kv_heads,
    kvs_kv_plan_dtype_t dt, uint64_t budget, const kvs_plan_args_t *a,
    uint64_t context, int chosen)
{
    char           buf[32];
    const char    *att;
    kvs_err_t      err;
    kvs_kv_plan_t  p;

    /* the model's own KV heads: GQA when fewer than its query heads,
     * "-" when those are not known; the query heads' count: MHA */
    att = kv_heads != shape->n_head_kv || shape->n_head == kv_heads ? "MHA"
          : shape->n_head == 0 ? "-" : "GQA";

    if (kvs_kv_plan_compute_dtype(&p, shape, kv_heads, dt, budget,
                                  a->block, context, a->batch, &err)
        != KVS_OK)
    {
        printf("  %-5s %3s %4u %s\n", kvs_kv_plan_dtype_name(dt), att,
               kv_heads, err.msg);
        return;
    }

    printf("  %-5s %3s %4u %12" PRIu64 " %12s %14" PRIu64 " %10" PRIu64
           " %12" PRIu64 "%s\n", kvs_kv_plan_dtype_name(dt), att, kv_heads,
           p.bytes_per_token,
           kvs_cli_human((double) p.context_bytes, buf, sizeof(buf)),
           p.tokens, p.seqs_at_context, p.context_at_batch,
           chosen ? "  <-" : "");
}


int
kvs_cli_plan(int argc, char **argv)
{
    int              rc;
    char             b1[32], b2[32], b3[32], arch[128];
    uint64_t         memory, weights, budget, context, model_ctx;
    uint32_t         elem;
    unsigned         d;
    kvs_err_t        err;
    kvs_kv_plan_t    p;
    kvs_kv_shape_t   shape;
    kvs_plan_args_t  a;

    rc = kvs_plan_args(argc, argv, &a);
    if (rc != 0) {
        return rc < 0 ? 0 : rc;
    }

    if (kvs_plan_size("--memory", a.memory, 0, &memory) != 0) {
        return 2;
    }

    weights = 0;
    model_ctx = 0;
    arch[0] = '\0';

    if (a.shape != NULL) {
        if (kvs_kv_shape_parse(&shape, a.shape, strlen(a.shape), &err)
            != KVS_OK)
        {
            fprintf(stderr, "kvserve plan: --shape: %s\n", err.msg);
            return 2;
        }

    } else if (kvs_plan_model(a.model, &shape, &model_ctx, &weights, arch,
                              sizeof(arch)) != 0)
    {
        return 1;
    }

    if (a.weights != NULL
        && kvs_plan_size("--weights", a.weights, 1, &weights) != 0)
    {
        return 2;
    }

    context = a.context ? a.context
              : model_ctx ? model_ctx : KVS_PLAN_CTX_DEFAULT;
    elem = kvs_kv_plan_dtype_bytes(a.dtype);

    if (kvs_kv_plan_budget(&budget, memory, weights, &err) != KVS_OK) {
        fprintf(stderr, "kvserve plan: %s\n", err.msg);
        return 1;
    }

    if (kvs_kv_plan_compute_dtype(&p, &shape, shape.n_head_kv, a.dtype,
                                  budget, a.block, context, a.batch, &err)
        != KVS_OK)
    {
        fprintf(stderr, "kvserve plan: %s\n", err.msg);
        return err.code == KVS_ERANGE ? 1 : 2;
    }

    if (a.model != NULL) {
        printf("model %s (%s)\n", a.model, arch);
    }

    printf("shape: %u layers, %u KV heads", shape.n_layer, shape.n_head_kv);
    if (shape.n_head != 0) {
        printf(" of %u query heads (GQA %u:1)", shape.n_head,
               shape.n_head / shape.n_head_kv);
    }
    printf(", head_dim %u", shape.head_dim_k);
    if (shape.head_dim_v != shape.head_dim_k) {
        printf(" (values %u)", shape.head_dim_v);
    }
    printf("\nmemory %s (%" PRIu64 " B) - weights %s (%" PRIu64 " B%s) = "
           "KV budget %s (%" PRIu64 " B)\n",
           kvs_cli_human((double) memory, b1, sizeof(b1)), memory,
           kvs_cli_human((double) weights, b2, sizeof(b2)), weights,
           a.weights != NULL ? ", given" : a.model != NULL
           ? ", as stored" : ", none given",
           kvs_cli_human((double) budget, b3, sizeof(b3)), budget);

    printf("\nKV per token (%s, %u B per element):\n",
           kvs_kv_plan_dtype_name(a.dtype), elem);
    if (shape.head_dim_v == shape.head_dim_k) {
        printf("  2 x %u layers x %u KV heads x %u head_dim x %u B",
               shape.n_layer, shape.n_head_kv, shape.head_dim_k, elem);
    } else {
        printf("  %u layers x %u KV heads x (%u + %u) x %u B",
               shape.n_layer, shape.n_head_kv, shape.head_dim_k,
               shape.head_dim_v, elem);
    }

    /* int8, fp8: a float scale per (layer, K or V, KV head) of a block */
    if (a.dtype == KVS_KV_PLAN_INT8 || a.dtype == KVS_KV_PLAN_FP8) {
        printf(" + scales (2 x %u x %u x 4 B a block of %u), rounded up",
               shape.n_layer, shape.n_head_kv, a.block);
    }

    printf(" = %" PRIu64 " B (%s)\n", p.bytes_per_token,
           kvs_cli_human((double) p.bytes_per_token, b1, sizeof(b1)));

    printf("  one %" PRIu64 "-token sequence: %" PRIu64 " B (%s)\n",
           context, p.context_bytes,
           kvs_cli_human((double) p.context_bytes, b1, sizeof(b1)));
    printf("  tokens that fit: %" PRIu64 " (%" PRIu64 " blocks of %u)\n",
           p.tokens, p.n_blocks, a.block);
    printf("  concurrent sequences at %" PRIu64 " tokens: %" PRIu64 "\n",
           context, p.seqs_at_context);
    printf("  longest context at batch %" PRIu64 ": %" PRIu64 " tokens\n",
           a.batch, p.context_at_batch);

    if (p.seqs_at_context == 0) {
        printf("  one %" PRIu64 "-token sequence needs %.2f x the KV "
               "budget\n", context,
               (double) p.context_bytes / (double) budget);
    }

    printf("\nwith and without GQA and KV quantization (ctx = %" PRIu64
           ", batch %" PRIu64 "):\n  %-5s %3s %4s %12s %12s %14s %10s %12s\n",
           context, a.batch, "dtype", "att", "KVh", "B/token", "per seq",
           "tokens fit", "seqs@ctx", "ctx@batch");

    for (d = 0; d < KVS_KV_PLAN_N; d++) {
        kvs_plan_row(&shape, shape.n_head_kv, (kvs_kv_plan_dtype_t) d,
                     budget, &a, context, d == (unsigned) a.dtype);
    }

    if (shape.n_head != 0 && shape.n_head != shape.n_head_kv) {
        for (d = 0; d < KVS_KV_PLAN_N; d++) {
            kvs_plan_row(&shape, shape.n_head, (kvs_kv_plan_dtype_t) d,
                         budget, &a, context, 0);
        }
    } else if (shape.n_head == 0) {
        printf("  (MHA rows need heads= in --shape)\n");
    }

    return p.n_blocks == 0 ? 1 : 0;
}
