/*
 * gpu_check_e2e: greedy generation through the backend interface, CUDA
 * against CPU, on stories260K (a trained model: clear margins) and on
 * generated models (kvs_gen: the "small" shape with BF16 weights, the
 * "tiny" shape with Q8_0 weights, qwen3 (BF16) and phi3 (F16) on the
 * "small" shape, phi3 again with a sliding window of 24 positions,
 * gemma2 (GeGLU, post-norms, scaled embeddings, both soft caps, a window
 * on every other layer) and gemma3 (per-head norms, windowed layers with
 * their own RoPE base) with windows of 24, and the "small" shape once in
 * every
 * other type of kvs_quant's table that kvserve makes: F16, the 4- to
 * 6-bit types, which the CUDA backend dequantizes to BF16 at load while
 * the CPU keeps them quantized, so each type's load path and the CPU's
 * kernel for it meet here).  "small" is 256 wide: every row is whole
 * 256-column blocks, as the K-quants need.
 *
 * stories260K runs five times: each backend's own K/V dtype, then both
 * caching in f16, bf16, int8 and fp8 (kvserve_kv_dtype).  In int8 and
 * fp8 both write the same bytes for the same F32 rows (kvs_kv_quant.h);
 * the rows themselves differ by the products' rounding, which a code
 * may round across, so their logits are held to the same GC_E2E_TOL.
 *
 * The schedule: three sequences, 64 generated tokens each; the first two
 * start together (a 1-token and a 21-token prompt), the third (40 tokens)
 * joins at step 5, so steps mix decodes with prefill chunks; chunks are
 * 16 tokens, so later chunks start after cached blocks; blocks come
 * from a kvs_kv_pool shared by the interleaved tables, so tables are not
 * contiguous.
 *
 * Two runs over that schedule:
 *   A. lock-step: each step goes through both backends' forward(); the
 *      CPU's argmax (lowest id on ties) is fed back to both, and every
 *      step's logits are kept;
 *   B. free: the CUDA backend alone, forward_sample() greedy, feeding
 *      back its own ids: the engine's real path.
 * The check: B's tokens equal A's CPU tokens.  At a divergence the
 * inputs were still identical, so A's logits at that step tell why: both
 * margins are printed (CPU: logit[cpu id] - logit[cuda id]; CUDA: the
 * reverse), and if the CPU margin is within twice the step's largest
 * logit difference the divergence is a near-tie that the logits' error
 * explains (PASS*), otherwise a FAIL.  The logits themselves must agree
 * within GC_E2E_TOL (norm-wise, every row of run A).
 */

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_check_pair.h"
#include "backend/kvs_backend.h"
#include "backend/cuda/kvs_cuda_plan.h"
#include "kv/kvs_kv_pool.h"
#include "kv/kvs_kv_table.h"
#include "gen/kvs_gen.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_model.h"

#define GC_E2E_SEQS    3
#define GC_E2E_GEN     64             /* tokens generated per sequence */
#define GC_E2E_CHUNK   16             /* prefill tokens per step */
#define GC_E2E_BLOCKS  64
#define GC_E2E_TOL     3e-2           /* logits, norm-wise relative */
#define GC_E2E_PROMPT  40             /* longest prompt */

static const uint32_t  gc_e2e_plen[GC_E2E_SEQS] = { 1, 21, 40 };

/* the table types run on the "small" shape besides BF16 (Q8_0 runs on
 * "tiny") */
static const uint32_t  gc_e2e_types[] = {
    KVS_GGML_F16, KVS_GGML_Q4_0, KVS_GGML_Q4_1, KVS_GGML_Q5_0,
    KVS_GGML_Q5_1, KVS_GGML_Q2_K, KVS_GGML_Q3_K, KVS_GGML_Q4_K,
    KVS_GGML_Q5_K, KVS_GGML_Q6_K, KVS_GGML_IQ4_NL, KVS_GGML_IQ4_XS
};
static const uint32_t  gc_e2e_start[GC_E2E_SEQS] = { 0, 0, 5 };

typedef struct {
    uint32_t   n_vocab;
    int32_t    prompt[GC_E2E_SEQS][GC_E2E_PROMPT];
    int32_t    cpu[GC_E2E_SEQS][GC_E2E_GEN];   /* run A's tokens */
    int32_t    cuda_a[GC_E2E_SEQS][GC_E2E_GEN];  /* run A's CUDA argmax */
    int32_t    cuda[GC_E2E_SEQS][GC_E2E_GEN];  /* run B's tokens */
    float     *lc;                    /* [seqs][gen][n_vocab] CPU */
    float     *lg;                    /* [seqs][gen][n_vocab] CUDA */
    gc_err_t   e;                     /* over every row of run A */
} gc_e2e_t;

/* one sequence's progress through the schedule */
typedef struct {
    kvs_kv_table_t  tab;
    uint32_t        done;             /* prompt tokens computed */
    uint32_t        n_gen;
    int32_t         last;             /* last generated token */
} gc_e2e_seq_t;


/*
 * Builds step `step`'s batch; owner[i] is the sequence of the i-th entry
 * wanting logits.  Returns the entry count (0: nothing left), or -1.
 */
static int
gc_e2e_batch(gc_e2e_t *g, gc_e2e_seq_t *sq, kvs_kv_pool_t *pool,
    uint32_t step, kvs_batch_tok_t *toks, uint32_t *owner, uint32_t *n_want,
    kvs_err_t *err)
{
    uint32_t  s, n, k, len, pos0;

    n = 0;
    *n_want = 0;

    for (s = 0; s < GC_E2E_SEQS; s++) {
        if (step < gc_e2e_start[s] || sq[s].n_gen == GC_E2E_GEN) {
            continue;
        }

        if (sq[s].done < gc_e2e_plen[s]) {
            len = gc_e2e_plen[s] - sq[s].done;
            len = len > GC_E2E_CHUNK ? GC_E2E_CHUNK : len;
            pos0 = sq[s].done;
        } else {
            len = 1;
            pos0 = gc_e2e_plen[s] + sq[s].n_gen - 1;
        }

        if (kvs_kv_table_reserve(&sq[s].tab, pool, pos0 + len, err)
            != KVS_OK)
        {
            return -1;
        }

        for (k = 0; k < len; k++) {
            toks[n].token = sq[s].done < gc_e2e_plen[s]
                            ? g->prompt[s][pos0 + k] : sq[s].last;
            toks[n].pos = pos0 + k;
            toks[n].table = &sq[s].tab;
            toks[n].want_logits = sq[s].done < gc_e2e_plen[s]
                                  ? pos0 + k + 1 == gc_e2e_plen[s] : 1;
            if (toks[n].want_logits) {
                owner[(*n_want)++] = s;
            }
            n++;
        }
    }

    return (int) n;
}


/* after a step: every sequence that got logits takes its token */
static void
gc_e2e_advance(gc_e2e_seq_t *sq, const kvs_batch_tok_t *toks, uint32_t n,
    const uint32_t *owner, const int32_t *ids, uint32_t n_want)
{
    uint32_t  i, s;

    /* prompt progress; tab is a sequence's first member, so an entry's
     * table pointer is its sequence's address */
    for (i = 0; i < n; i++) {
        s = (uint32_t) ((const gc_e2e_seq_t *) (const void *) toks[i].table
                        - sq);
        if (sq[s].done < toks[i].pos + 1) {
            sq[s].done = toks[i].pos + 1;
        }
    }

    for (i = 0; i < n_want; i++) {
        s = owner[i];
        sq[s].last = ids[i];
        sq[s].n_gen++;
    }
}


static void
gc_e2e_release(gc_e2e_seq_t *sq, kvs_kv_pool_t *pool)
{
    uint32_t   s;
    kvs_err_t  err;

    for (s = 0; s < GC_E2E_SEQS; s++) {
        kvs_kv_table_release(&sq[s].tab, pool, &err);
    }

    memset(sq, 0, GC_E2E_SEQS * sizeof(gc_e2e_seq_t));
}


/* run A (cuda_be's forward beside the CPU's) or run B (forward_sample) */
static int
gc_e2e_run_one(gc_e2e_t *g, kvs_backend_t *cpu, kvs_backend_t *cuda,
    kvs_kv_pool_t *pool, int lockstep, kvs_err_t *err)
{
    int                    n, rc;
    float                 *lc, *lg, *rc_row, *rg_row;
    int32_t                ids[GC_E2E_SEQS], gen;
    uint32_t               step, i, j, s, n_want, owner[GC_E2E_SEQS];
    gc_e2e_seq_t           sq[GC_E2E_SEQS];
    kvs_batch_t            b;
    kvs_batch_tok_t        toks[GC_E2E_SEQS * GC_E2E_CHUNK];
    kvs_backend_sample_t   sp[GC_E2E_SEQS];

    memset(sq, 0, sizeof(sq));
    memset(sp, 0, sizeof(sp));

    lc = gc_alloc((size_t) GC_E2E_SEQS * g->n_vocab * 4);
    lg = gc_alloc((size_t) GC_E2E_SEQS * g->n_vocab * 4);
    if (lc == NULL || lg == NULL) {
        free(lc);
        free(lg);
        return KVS_ENOMEM;
    }

    rc = KVS_OK;

    for (step = 0; rc == KVS_OK; step++) {
        n = gc_e2e_batch(g, sq, pool, step, toks, owner, &n_want, err);
        if (n <= 0) {
            rc = n < 0 ? KVS_ENOMEM : KVS_OK;
            break;
        }

        b.toks = toks;
        b.n = (uint32_t) n;

        if (lockstep) {
            rc = kvs_backend_forward(cpu, &b, lc, err);
            if (rc == KVS_OK) {
                rc = kvs_backend_forward(cuda, &b, lg, err);
            }
            if (rc != KVS_OK) {
                break;
            }

            for (i = 0; i < n_want; i++) {
                s = owner[i];
                gen = (int32_t) sq[s].n_gen;
                rc_row = lc + (size_t) i * g->n_vocab;
                rg_row = lg + (size_t) i * g->n_vocab;

                ids[i] = gc_pair_argmax(rc_row, g->n_vocab);
                g->cpu[s][gen] = ids[i];
                g->cuda_a[s][gen] = gc_pair_argmax(rg_row, g->n_vocab);

                memcpy(g->lc + ((size_t) s * GC_E2E_GEN + gen) * g->n_vocab,
                       rc_row, (size_t) g->n_vocab * 4);
                memcpy(g->lg + ((size_t) s * GC_E2E_GEN + gen) * g->n_vocab,
                       rg_row, (size_t) g->n_vocab * 4);

                for (j = 0; j < g->n_vocab; j++) {
                    gc_err_add(&g->e, rg_row[j], rc_row[j]);
                }
            }

        } else if (cuda->ops->forward_sample == NULL
                   && cuda->kind == KVS_BACKEND_CPU)
        {
            /* --self-test: the CPU stands in, argmax on the host */
            rc = kvs_backend_forward(cuda, &b, lg, err);
            if (rc != KVS_OK) {
                break;
            }

            for (i = 0; i < n_want; i++) {
                ids[i] = gc_pair_argmax(lg + (size_t) i * g->n_vocab,
                                       g->n_vocab);
                g->cuda[owner[i]][sq[owner[i]].n_gen] = ids[i];
            }

        } else {
            if (cuda->ops->forward_sample == NULL) {
                rc = kvs_err_set(err, KVS_EUNSUPPORTED, "the CUDA backend "
                                 "has no forward_sample");
                break;
            }

            rc = cuda->ops->forward_sample(cuda, &b, sp, ids, err);
            if (rc != KVS_OK) {
                break;
            }

            for (i = 0; i < n_want; i++) {
                g->cuda[owner[i]][sq[owner[i]].n_gen] = ids[i];
            }
        }

        gc_e2e_advance(sq, toks, (uint32_t) n, owner, ids, n_want);
    }

    gc_e2e_release(sq, pool);
    free(lc);
    free(lg);

    return rc;
}


/* compares run B with run A and records the verdict */
static void
gc_e2e_verdict(gc_ctx_t *c, gc_e2e_t *g, const char *label)
{
    int          explained, diverged, agree_a;
    char         name[96], note[160], value[48];
    float        dmax;
    double       rel;
    int32_t      x, y;
    uint32_t     s, i, j;
    const float  *lc, *lg;

    rel = gc_err_rel(&g->e);
    snprintf(name, sizeof(name), "%s: logits CUDA vs CPU (run A)", label);
    gc_check(c, "e2e", name, rel, g->e.maxabs, GC_E2E_TOL);

    agree_a = 0;
    for (s = 0; s < GC_E2E_SEQS; s++) {
        for (i = 0; i < GC_E2E_GEN; i++) {
            agree_a += g->cpu[s][i] == g->cuda_a[s][i];
        }
    }

    diverged = 0;
    explained = 1;
    note[0] = '\0';

    for (s = 0; s < GC_E2E_SEQS; s++) {
        for (i = 0; i < GC_E2E_GEN; i++) {
            if (g->cuda[s][i] == g->cpu[s][i]) {
                continue;
            }

            x = g->cpu[s][i];
            y = g->cuda[s][i];
            lc = g->lc + ((size_t) s * GC_E2E_GEN + i) * g->n_vocab;
            lg = g->lg + ((size_t) s * GC_E2E_GEN + i) * g->n_vocab;

            dmax = 0.0f;
            for (j = 0; j < g->n_vocab; j++) {
                dmax = fmaxf(dmax, fabsf(lc[j] - lg[j]));
            }

            if (y < 0 || (uint32_t) y >= g->n_vocab) {
                printf("  %s: sequence %u token %u: CUDA id %d is outside "
                       "the vocabulary\n", label, s, i, y);
                explained = 0;

            } else {
                printf("  %s: sequence %u diverges at token %u: CPU %d "
                       "(CPU margin %.6f over %d), CUDA %d (CUDA margin "
                       "%.6f over %d); max |logit diff| %.6f\n", label, s,
                       i, x, lc[x] - lc[y], y, y, lg[y] - lg[x], x, dmax);

                if (lc[x] - lc[y] > 2.0f * dmax) {
                    explained = 0;
                }

                snprintf(note + strlen(note), sizeof(note) - strlen(note),
                         "seq %u tok %u: cpu %d margin %.2g, cuda %d "
                         "margin %.2g; ", s, i, x, lc[x] - lc[y], y,
                         lg[y] - lg[x]);
            }

            diverged++;
            break;
        }
    }

    snprintf(name, sizeof(name), "%s: greedy %dx%d tokens CUDA == CPU",
             label, GC_E2E_SEQS, GC_E2E_GEN);
    snprintf(value, sizeof(value), "%d/%d seqs equal", GC_E2E_SEQS - diverged,
             GC_E2E_SEQS);

    printf("  e2e  %-58s %s (lock-step argmax agree %d/%d)  %s\n", name,
           value, agree_a, GC_E2E_SEQS * GC_E2E_GEN,
           diverged == 0 ? "PASS" : explained ? "PASS* (near-tie)"
                                              : "FAIL");
    fflush(stdout);

    gc_row(c, "e2e", name, value, "", "",
           diverged == 0 ? "PASS" : explained ? "PASS*" : "FAIL",
           note);
}


/* The CUDA backend's own report of its weights and K/V element against
 * the plan's for the file (what kvserve info prints for CUDA): the
 * loader and the plan must carve the same bytes. */
static void
gc_e2e_mem(gc_ctx_t *c, const char *label, const kvs_model_t *m,
    const kvs_backend_t *be, int kv_set)
{
    int        kv_dt, ok;
    char       value[64], note[128];
    uint32_t   want;
    uint64_t   bytes;
    kvs_err_t  err;

    if (kvs_cuda_plan_weights(m, &bytes, &kv_dt, &err) != KVS_OK) {
        gc_fail(c, "mem", label, err.msg);
        return;
    }

    /* the dtype asked for (kvserve_kv_dtype), else the plan's */
    want = kv_set >= 0 ? (uint32_t) kv_set
           : kv_dt == KVS_CUDA_DT_F32 ? KVS_BACKEND_KV_F32
                                      : KVS_BACKEND_KV_BF16;
    ok = be->mem.weights_device == bytes && be->mem.kv_dtype == want;

    snprintf(value, sizeof(value), "%" PRIu64 " B, KV %s",
             be->mem.weights_device, kvs_backend_kv_name(be->mem.kv_dtype));
    snprintf(note, sizeof(note), "plan %" PRIu64 " B, KV %s", bytes,
             kvs_backend_kv_name(want));
    printf("  mem  %-58s %s (%s)  %s\n", label, value, note,
           ok ? "PASS" : "FAIL");
    gc_row(c, "mem", label, value, "", "", ok ? "PASS" : "FAIL", note);
}


static int
gc_e2e_model(gc_ctx_t *c, const char *label, const char *path, int kv_dt)
{
    int                  rc;
    char                 why[KVS_ERR_MSG_LEN + 64];
    uint32_t             s;
    gc_rng_t             rng;
    kvs_err_t            err;
    gc_e2e_t            *g;
    gc_pair_t            p;
    kvs_model_t         *m;
    kvs_backend_conf_t   conf;

    m = NULL;
    memset(&p, 0, sizeof(p));
    g = calloc(1, sizeof(*g));

    if (g == NULL) {
        return -1;
    }

    rc = kvs_model_open(&m, path, &err);
    if (rc != KVS_OK) {
        snprintf(why, sizeof(why), "open %s: %s", path, err.msg);
        gc_fail(c, "e2e", label, why);
        free(g);
        return 0;
    }

    g->n_vocab = m->hp.n_vocab;
    g->lc = gc_alloc((size_t) GC_E2E_SEQS * GC_E2E_GEN * g->n_vocab * 4);
    g->lg = gc_alloc((size_t) GC_E2E_SEQS * GC_E2E_GEN * g->n_vocab * 4);

    rng.s = c->seed ^ 0x653265ull;
    for (s = 0; s < GC_E2E_SEQS; s++) {
        gc_pair_prompt(&rng, g->prompt[s], GC_E2E_PROMPT, g->n_vocab);
        g->prompt[s][0] = 1;          /* BOS in stories260K and Llama */
    }

    /* kvserve_kv_dtype: both backends cache in that dtype (-1: each its
     * own) */
    memset(&conf, 0, sizeof(conf));
    conf.kv_dtype_set = kv_dt >= 0;
    conf.kv_dtype = kv_dt >= 0 ? (uint32_t) kv_dt : 0;

    rc = g->lc == NULL || g->lg == NULL
         ? kvs_err_set(&err, KVS_ENOMEM, "out of host memory")
         : gc_pair_new(c, &p, m, &conf, GC_E2E_BLOCKS, GC_E2E_CHUNK, &err);

    if (rc == KVS_OK) {
        printf("  %s: %u layers, %u embd, vocab %u; CUDA backend on %s "
               "(%s), K/V %.1f MiB\n", label, m->hp.n_layer,
               m->hp.n_embd, m->hp.n_vocab, p.info.device, p.info.reason,
               (double) p.cuda->kv_bytes / (1 << 20));

        /* a self-test's "CUDA" is the CPU: no device bytes */
        if (!c->self_test) {
            gc_e2e_mem(c, label, m, p.cuda, kv_dt);
        }
    }

    if (rc == KVS_OK) {
        rc = gc_e2e_run_one(g, p.cpu, p.cuda, p.pool, 1, &err);
    }

    if (rc == KVS_OK) {
        rc = gc_e2e_run_one(g, p.cpu, p.cuda, p.pool, 0, &err);
    }

    if (rc == KVS_OK) {
        gc_e2e_verdict(c, g, label);

    } else {
        snprintf(why, sizeof(why), "%s", err.msg);
        gc_fail(c, "e2e", label, why);
    }

    gc_pair_free(&p);
    kvs_model_close(m);
    free(g->lc);
    free(g->lg);
    free(g);

    return c->dead ? -1 : 0;
}


/* a generated model of an architecture gen-model writes, with a sliding
 * window of n_swa positions (0: none), written to tmp and removed once
 * open */
static int
gc_e2e_gen(gc_ctx_t *c, const char *preset, uint32_t dtype, kvs_arch_t arch,
    uint32_t n_swa)
{
    int             rc;
    char            path[4096], label[64];
    kvs_err_t       err;
    kvs_gen_spec_t  spec;

    snprintf(label, sizeof(label), "gen %s %s%s%s", preset,
             kvs_ggml_type_name(dtype), arch == KVS_ARCH_QWEN3 ? " qwen3"
             : arch == KVS_ARCH_PHI3 ? " phi3"
             : arch == KVS_ARCH_GEMMA2 ? " gemma2"
             : arch == KVS_ARCH_GEMMA3 ? " gemma3" : "",
             n_swa != 0 ? " window" : "");
    snprintf(path, sizeof(path), "%s/gpu-check-%d-%s-%s-%d-%u.gguf",
             c->tmp, (int) getpid(), preset, kvs_ggml_type_name(dtype),
             (int) arch, n_swa);

    if (kvs_gen_preset(&spec, preset, &err) != KVS_OK) {
        gc_fail(c, "e2e", label, err.msg);
        return 0;
    }

    spec.dtype = dtype;
    spec.seed = 7;
    spec.arch = arch;
    spec.tied = arch == KVS_ARCH_PHI3 ? 0 : spec.tied;
    /* gemma ties its output to the embeddings */
    spec.tied = arch == KVS_ARCH_GEMMA2 || arch == KVS_ARCH_GEMMA3
                ? 1 : spec.tied;
    spec.n_swa = n_swa;

    if (kvs_gen_write(&spec, path, &err) != KVS_OK) {
        gc_fail(c, "e2e", label, err.msg);
        return 0;
    }

    rc = gc_e2e_model(c, label, path, -1);
    unlink(path);

    return rc;
}


int
gc_e2e_run(gc_ctx_t *c)
{
    char    path[4096];
    size_t  i;

    if (c->fixtures == NULL || c->fixtures[0] == '\0') {
        printf("  e2e  stories260K: SKIP (no KVS_FIXTURES)\n");
        gc_row(c, "e2e", "stories260K", "-", "", "", "SKIP",
               "KVS_FIXTURES not set");

    } else {
        snprintf(path, sizeof(path), "%s/models/stories260K-f32.gguf",
                 c->fixtures);

        if (access(path, R_OK) != 0) {
            /* a missing fixture is a skip that names it, as in the unit
             * tests, never a failure */
            printf("  e2e  stories260K: SKIP: fixture %s is absent (set "
                   "KVS_FIXTURES)\n", path);
            gc_row(c, "e2e", "stories260K", "-", "", "", "SKIP",
                   "fixture absent");

        } else if (gc_e2e_model(c, "stories260K f32", path, -1) != 0
                   /* the K/V dtypes both backends store, each against
                    * the CPU caching in the same dtype */
                   || gc_e2e_model(c, "stories260K f32, K/V f16", path,
                                   KVS_KV_F16) != 0
                   || gc_e2e_model(c, "stories260K f32, K/V bf16", path,
                                   KVS_KV_BF16) != 0
                   || gc_e2e_model(c, "stories260K f32, K/V int8", path,
                                   KVS_KV_INT8) != 0
                   || gc_e2e_model(c, "stories260K f32, K/V fp8", path,
                                   KVS_KV_FP8) != 0)
        {
            return -1;
        }
    }

    /* qwen3: the per-head norm kernel; phi3: fused QKV and gate/up
     * bound as views, then with a window shorter than the prompts and
     * the generations (decode splits and prefill tiles start inside
     * it); gemma2 and gemma3: everything gemma adds, windows of 24 */
    if (gc_e2e_gen(c, "small", KVS_GGML_BF16, KVS_ARCH_LLAMA, 0) != 0
        || gc_e2e_gen(c, "tiny", KVS_GGML_Q8_0, KVS_ARCH_LLAMA, 0) != 0
        || gc_e2e_gen(c, "small", KVS_GGML_BF16, KVS_ARCH_QWEN3, 0) != 0
        || gc_e2e_gen(c, "small", KVS_GGML_F16, KVS_ARCH_PHI3, 0) != 0
        || gc_e2e_gen(c, "small", KVS_GGML_F16, KVS_ARCH_PHI3, 24) != 0
        || gc_e2e_gen(c, "small", KVS_GGML_BF16, KVS_ARCH_GEMMA2, 24) != 0
        || gc_e2e_gen(c, "small", KVS_GGML_BF16, KVS_ARCH_GEMMA3, 24) != 0)
    {
        return -1;
    }

    for (i = 0; i < sizeof(gc_e2e_types) / sizeof(gc_e2e_types[0]); i++) {
        if (gc_e2e_gen(c, "small", gc_e2e_types[i], KVS_ARCH_LLAMA, 0)
            != 0)
        {
            return -1;
        }
    }

    return 0;
}
