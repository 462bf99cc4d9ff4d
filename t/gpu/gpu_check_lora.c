/*
 * gpu_check_lora: the CUDA backend's LoRA (issue 25), part "lora" of
 * gpu-check:
 *
 *   A. the kernel (kvs_k_lora) against the same arithmetic on the host
 *      over the same BF16 image (kvs_cuda_lora_plan's layout and
 *      conversion): 37 rows, slots 0 (none), 1 (rank 5), 2 (rank 8), 3
 *      (rank 64) and 4 (rank 0 for this matrix: an adapter that leaves
 *      it alone), 19 rows of slot 3 so that its rows make three tasks,
 *      x in F32 and in BF16, sides 136 -> 48 and 48 -> 4096.  The
 *      adapted rows within 1e-5 (norm-wise; the order of the shrink's
 *      sums differs), every other row bit-for-bit as it was;
 *   B. the backend: generated llama and qwen3 bases (the "small" shape,
 *      BF16) with 8 generated adapters of ranks 8 and 64 (alternating,
 *      every target) in slots 1..8 of the CPU and CUDA backends; 9
 *      sequences, sequence s under slot s (0: the base), every step one
 *      batch of all of them through forward_lora of both (prompts of 3 +
 *      s tokens in one chunk, then 16 decodes), the CPU's argmax fed to
 *      both.  Checks: the logits within GC_LORA_TOL norm-wise of the
 *      CPU's over every row; each argmax the CPU's, or a near-tie (the
 *      CPU's margin within twice the row's largest difference).  And a
 *      control, so that the check can fail: a third backend (the CPU
 *      with no adapters) over the same batches must be further than 3 x
 *      GC_LORA_TOL from the adapted CPU logits, or the adapters were too
 *      weak to tell an ignored adapter from a working one.
 *
 * With --self-test (no device) B runs with the CPU standing in for CUDA
 * (so `make cuda-check` runs the harness), and A is skipped.
 */

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_check_pair.h"
#include "backend/kvs_backend.h"
#include "backend/cuda/kvs_cuda_lora_plan.h"
#include "gen/kvs_gen.h"
#include "gen/kvs_gen_lora.h"
#include "kv/kvs_kv_pool.h"
#include "kv/kvs_kv_table.h"
#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_lora.h"

#define GC_LORA_TOL     3e-2          /* GC_E2E_TOL: BF16 weights and
                                         adapters against the CPU's F32
                                         sums and adapters */
#define GC_LORA_AD      8
#define GC_LORA_SEQ     (GC_LORA_AD + 1)
#define GC_LORA_GEN     16
#define GC_LORA_BT      16
#define GC_LORA_BLOCKS  64
#define GC_LORA_PROMPT  (3 + GC_LORA_AD)

#define GC_K_ROWS       37
#define GC_K_SLOTS      4


/* --- A. the kernel ------------------------------------------------------ */

/* The host's replay of the kernels: T = scale * A x in F32 (any order),
 * y += T[r] BT[r] in rank order. */
static void
gc_lora_ref(float *y, const float *x, uint32_t n_in, uint32_t n_out,
    const uint16_t *a, const uint16_t *bt, uint32_t rank, float scale)
{
    float     t[64], s;
    uint32_t  r, i, o;

    for (r = 0; r < rank; r++) {
        s = 0.0f;
        for (i = 0; i < n_in; i++) {
            s += kvs_bf16_to_f32(a[(size_t) r * n_in + i]) * x[i];
        }
        t[r] = scale * s;
    }

    for (o = 0; o < n_out; o++) {
        for (r = 0; r < rank; r++) {
            y[o] = fmaf(t[r], kvs_bf16_to_f32(bt[(size_t) r * n_out + o]),
                        y[o]);
        }
    }
}


static int
gc_lora_kern_one(gc_ctx_t *c, gc_rng_t *rng, uint32_t n_in, uint32_t n_out,
    int xdt)
{
    static const uint32_t  ranks[GC_K_SLOTS + 1] = { 0, 5, 8, 64, 0 };

    int                     ok;
    char                    name[96];
    float                  *x, *xf, *y0, *y, *yref, scale[GC_K_SLOTS + 1];
    void                   *dy, *dx, *dw, *dm;
    uint16_t               *a[GC_K_SLOTS + 1], *bt[GC_K_SLOTS + 1];
    int32_t                 words[3 * GC_K_ROWS + 1];
    uint32_t                i, j, s, slots[GC_K_ROWS], n_task, rank, same;
    gc_err_t                e;
    gc_bufs_t               b;
    kvs_err_t               err;
    kvs_k_lora_mat_t        mats[GC_K_SLOTS + 1];
    kvs_cuda_lora_table_t   t;

    snprintf(name, sizeof(name), "lora %u -> %u, x %s, ranks 5/8/64",
             n_in, n_out, gc_dtype_name(xdt));

    memset(&b, 0, sizeof(b));
    memset(a, 0, sizeof(a));
    memset(bt, 0, sizeof(bt));
    x = gc_alloc((size_t) GC_K_ROWS * n_in * 4);
    xf = gc_alloc((size_t) GC_K_ROWS * n_in * 4);
    y0 = gc_alloc((size_t) GC_K_ROWS * n_out * 4);
    y = gc_alloc((size_t) GC_K_ROWS * n_out * 4);
    yref = gc_alloc((size_t) GC_K_ROWS * n_out * 4);

    if (kvs_cuda_lora_table_new(&t, 1, &err) != KVS_OK || x == NULL
        || xf == NULL || y0 == NULL || y == NULL || yref == NULL)
    {
        gc_fail(c, "lora", name, "out of host memory");
        ok = -1;
        goto done;
    }

    /* slots 1..3 adapt this matrix, 4 is set but not on it */
    for (s = 1; s <= GC_K_SLOTS; s++) {
        t.rank_max[s] = s == GC_K_SLOTS ? 8 : ranks[s];
        scale[s] = 0.5f + 0.25f * (float) s;

        if (ranks[s] == 0) {
            continue;
        }

        a[s] = gc_alloc((size_t) ranks[s] * n_in * 2);
        bt[s] = gc_alloc((size_t) ranks[s] * n_out * 2);
        if (a[s] == NULL || bt[s] == NULL) {
            ok = -1;
            goto done;
        }

        gc_fill(a[s], KVS_K_BF16, (size_t) ranks[s] * n_in, rng, -0.1f,
                0.1f);
        gc_fill(bt[s], KVS_K_BF16, (size_t) ranks[s] * n_out, rng, -0.1f,
                0.1f);
    }

    for (i = 0; i < GC_K_ROWS; i++) {
        slots[i] = i % 2 == 0 ? 3 : (i / 2) % (GC_K_SLOTS + 1);
    }

    gc_fill(x, xdt, (size_t) GC_K_ROWS * n_in, rng, -1.0f, 1.0f);
    for (i = 0; i < GC_K_ROWS * n_in; i++) {
        xf[i] = gc_load(x, xdt, i);
    }
    gc_fill(y0, KVS_K_F32, (size_t) GC_K_ROWS * n_out, rng, -1.0f, 1.0f);

    kvs_cuda_lora_group(&t, slots, GC_K_ROWS, GC_K_ROWS, words, &n_task,
                        &rank);

    /* the device's slot entries: addresses filled in once uploaded */
    memset(mats, 0, sizeof(mats));

    for (s = 1; s <= GC_K_SLOTS; s++) {
        if (ranks[s] == 0) {
            continue;
        }

        mats[s].a = gc_buf_upload(c, &b, a[s], (size_t) ranks[s] * n_in * 2);
        mats[s].bt = gc_buf_upload(c, &b, bt[s],
                                   (size_t) ranks[s] * n_out * 2);
        mats[s].rank = ranks[s];
        mats[s].scale = scale[s];

        if (mats[s].a == NULL || mats[s].bt == NULL) {
            gc_fail(c, "lora", name, "upload failed");
            ok = c->dead ? -1 : 0;
            goto done;
        }
    }

    dy = gc_buf_upload(c, &b, y0, (size_t) GC_K_ROWS * n_out * 4);
    dx = gc_buf_upload(c, &b, x, (size_t) GC_K_ROWS * n_in
                                 * gc_dtype_size(xdt));
    dw = gc_buf_upload(c, &b, words, sizeof(words));
    dm = gc_buf_upload(c, &b, mats, sizeof(mats));
    /* the scratch T is poisoned: a rank the shrink should have written
     * and did not comes out NaN */
    if (dy == NULL || dx == NULL || dw == NULL || dm == NULL
        || gc_launched(c, kvs_k_lora(dy, n_out, dx, xdt, n_in, n_in, n_out,
                                     dm, dw, GC_K_ROWS, n_task, 64,
                                     gc_buf_poisoned(c, &b, (size_t)
                                                     GC_K_ROWS * 64 * 4),
                                     0), name)
        || gc_download(c, y, dy, (size_t) GC_K_ROWS * n_out * 4))
    {
        gc_fail(c, "lora", name, "launch or download failed");
        ok = c->dead ? -1 : 0;
        goto done;
    }

    memcpy(yref, y0, (size_t) GC_K_ROWS * n_out * 4);
    memset(&e, 0, sizeof(e));
    same = 1;

    for (i = 0; i < GC_K_ROWS; i++) {
        s = slots[i];

        if (s == 0 || ranks[s] == 0) {
            same &= memcmp(y + (size_t) i * n_out, y0 + (size_t) i * n_out,
                           (size_t) n_out * 4) == 0;
            continue;
        }

        gc_lora_ref(yref + (size_t) i * n_out, xf + (size_t) i * n_in, n_in,
                    n_out, a[s], bt[s], ranks[s], scale[s]);

        /* the product alone: y - y0 against yref - y0 */
        for (j = 0; j < n_out; j++) {
            gc_err_add(&e, (double) y[(size_t) i * n_out + j]
                           - y0[(size_t) i * n_out + j],
                       (double) yref[(size_t) i * n_out + j]
                           - y0[(size_t) i * n_out + j]);
        }
    }

    gc_check(c, "lora", name, gc_err_rel(&e), e.maxabs, 1e-5);

    snprintf(name + strlen(name), sizeof(name) - strlen(name),
             ": other rows unchanged");
    printf("  lora %-58s %s\n", name, same ? "PASS" : "FAIL");
    gc_row(c, "lora", name, same ? "equal" : "changed", "", "",
           same ? "PASS" : "FAIL", "slot 0 and a slot without this matrix");
    ok = 0;

done:

    gc_bufs_free(&b);
    for (s = 0; s <= GC_K_SLOTS; s++) {
        free(a[s]);
        free(bt[s]);
    }
    kvs_cuda_lora_table_free(&t);
    free(x);
    free(xf);
    free(y0);
    free(y);
    free(yref);

    return ok;
}


static int
gc_lora_kern(gc_ctx_t *c)
{
    gc_rng_t  rng;

    rng.s = c->seed ^ 0x4c6f5241ull;

    if (gc_lora_kern_one(c, &rng, 136, 48, KVS_K_F32) != 0
        || gc_lora_kern_one(c, &rng, 136, 48, KVS_K_BF16) != 0
        || gc_lora_kern_one(c, &rng, 48, 4096, KVS_K_BF16) != 0)
    {
        return -1;
    }

    return 0;
}


/* --- B. the backend ----------------------------------------------------- */

typedef struct {
    kvs_kv_table_t  tab;
    int32_t         prompt[GC_LORA_PROMPT];
    uint32_t        n_prompt;
    uint32_t        done;             /* positions computed */
    int32_t         last;
} gc_lora_seq_t;

typedef struct {
    gc_err_t   e;                     /* CUDA vs CPU, adapted */
    gc_err_t   ctl;                   /* CPU base vs CPU adapted */
    uint32_t   agree;
    uint32_t   ties;
    uint32_t   rows;
    uint32_t   bad;                   /* divergences not near-ties */
    char       note[160];
} gc_lora_res_t;


/* Every step: all sequences, through the three backends. */
static int
gc_lora_steps(gc_lora_seq_t *sq, kvs_kv_pool_t *pool, uint32_t n_vocab,
    kvs_backend_t *cpu, kvs_backend_t *cuda, kvs_backend_t *base,
    gc_lora_res_t *res, kvs_err_t *err)
{
    int               rc;
    float            *lc, *lg, *lb, dmax, *rc_row, *rg_row;
    int32_t           x, y;
    uint32_t          step, s, k, n, w, j, len, pos0;
    uint32_t          slots[GC_LORA_SEQ * GC_LORA_PROMPT];
    uint32_t          zero[GC_LORA_SEQ * GC_LORA_PROMPT];
    uint32_t          owner[GC_LORA_SEQ];
    kvs_batch_t       b;
    kvs_batch_tok_t   toks[GC_LORA_SEQ * GC_LORA_PROMPT];

    lc = gc_alloc((size_t) GC_LORA_SEQ * n_vocab * 4);
    lg = gc_alloc((size_t) GC_LORA_SEQ * n_vocab * 4);
    lb = gc_alloc((size_t) GC_LORA_SEQ * n_vocab * 4);
    if (lc == NULL || lg == NULL || lb == NULL) {
        free(lc);
        free(lg);
        free(lb);
        return kvs_err_set(err, KVS_ENOMEM, "out of host memory");
    }

    memset(zero, 0, sizeof(zero));
    rc = KVS_OK;

    for (step = 0; step <= GC_LORA_GEN && rc == KVS_OK; step++) {
        n = 0;
        w = 0;

        for (s = 0; s < GC_LORA_SEQ; s++) {
            len = step == 0 ? sq[s].n_prompt : 1;
            pos0 = sq[s].done;

            rc = kvs_kv_table_reserve(&sq[s].tab, pool, pos0 + len, err);
            if (rc != KVS_OK) {
                break;
            }

            for (k = 0; k < len; k++) {
                toks[n].token = step == 0 ? sq[s].prompt[k] : sq[s].last;
                toks[n].pos = pos0 + k;
                toks[n].table = &sq[s].tab;
                toks[n].want_logits = k + 1 == len;
                slots[n] = s;
                n++;
            }

            owner[w++] = s;
            sq[s].done = pos0 + len;
        }

        if (rc != KVS_OK) {
            break;
        }

        b.toks = toks;
        b.n = n;

        rc = cpu->ops->forward_lora(cpu, &b, slots, lc, err);
        if (rc == KVS_OK) {
            rc = cuda->ops->forward_lora(cuda, &b, slots, lg, err);
        }
        if (rc == KVS_OK) {
            rc = base->ops->forward_lora(base, &b, zero, lb, err);
        }
        if (rc != KVS_OK) {
            break;
        }

        for (j = 0; j < w; j++) {
            s = owner[j];
            rc_row = lc + (size_t) j * n_vocab;
            rg_row = lg + (size_t) j * n_vocab;
            x = gc_pair_argmax(rc_row, n_vocab);
            y = gc_pair_argmax(rg_row, n_vocab);
            dmax = 0.0f;

            for (k = 0; k < n_vocab; k++) {
                gc_err_add(&res->e, rg_row[k], rc_row[k]);
                if (s != 0) {
                    gc_err_add(&res->ctl, lb[(size_t) j * n_vocab + k],
                               rc_row[k]);
                }
                dmax = fmaxf(dmax, fabsf(rg_row[k] - rc_row[k]));
            }

            res->rows++;

            if (x == y) {
                res->agree++;

            } else if (rc_row[x] - rc_row[y] <= 2.0f * dmax) {
                res->ties++;

            } else {
                res->bad++;
                snprintf(res->note, sizeof(res->note), "seq %u step %u: "
                         "cpu %d margin %.3g, cuda %d", s, step, x,
                         rc_row[x] - rc_row[y], y);
            }

            sq[s].last = x;
        }
    }

    free(lc);
    free(lg);
    free(lb);

    return rc;
}


static int
gc_lora_model(gc_ctx_t *c, const char *label, kvs_arch_t arch)
{
    int                  rc;
    char                 base_path[4000], ad_path[GC_LORA_AD][4096];
    char                 name[96], value[48], why[KVS_ERR_MSG_LEN + 64];
    double               rel, ctl;
    uint32_t             s;
    gc_rng_t             rng;
    gc_pair_t            p;
    kvs_err_t            err;
    kvs_model_t         *m;
    kvs_lora_t          *ad[GC_LORA_AD];
    kvs_backend_t       *base;
    gc_lora_seq_t        sq[GC_LORA_SEQ];
    gc_lora_res_t        res;
    kvs_gen_spec_t       spec;
    kvs_gen_lora_spec_t  ls;

    m = NULL;
    base = NULL;
    memset(&p, 0, sizeof(p));
    memset(ad, 0, sizeof(ad));
    memset(ad_path, 0, sizeof(ad_path));
    memset(sq, 0, sizeof(sq));
    memset(&res, 0, sizeof(res));

    snprintf(base_path, sizeof(base_path), "%s/gpu-check-lora-%d-%d.gguf",
             c->tmp, (int) getpid(), (int) arch);

    rc = kvs_gen_preset(&spec, "small", &err);
    if (rc == KVS_OK) {
        spec.dtype = KVS_GGML_BF16;
        spec.seed = 11;
        spec.arch = arch;
        rc = kvs_gen_write(&spec, base_path, &err);
    }

    for (s = 0; rc == KVS_OK && s < GC_LORA_AD; s++) {
        snprintf(ad_path[s], sizeof(ad_path[s]), "%s-a%u.gguf", base_path,
                 s + 1);
        memset(&ls, 0, sizeof(ls));
        ls.rank = s % 2 ? 64 : 8;
        ls.targets = 0x7f;
        ls.seed = 300 + s;
        ls.alpha = 2.0f * (float) ls.rank;
        ls.strength = 0.5f;
        rc = kvs_gen_lora_write(base_path, &ls, ad_path[s], &err);
    }

    if (rc == KVS_OK) {
        rc = kvs_model_open(&m, base_path, &err);
    }

    for (s = 0; rc == KVS_OK && s < GC_LORA_AD; s++) {
        rc = kvs_lora_open(&ad[s], ad_path[s], m, &err);
    }

    if (rc == KVS_OK) {
        rc = gc_pair_new(c, &p, m, NULL, GC_LORA_BLOCKS, GC_LORA_BT, &err);
    }
    /* the control: the CPU's again, no adapter set */
    if (rc == KVS_OK) {
        rc = kvs_backend_new(&base, m, &p.conf, NULL, &err);
    }
    if (rc == KVS_OK && (p.cuda->ops->set_lora == NULL
                         || p.cuda->ops->forward_lora == NULL))
    {
        rc = kvs_err_set(&err, KVS_EUNSUPPORTED, "the %s backend has no "
                         "set_lora / forward_lora",
                         kvs_backend_name(p.cuda->kind));
    }

    for (s = 0; rc == KVS_OK && s < GC_LORA_AD; s++) {
        rc = p.cpu->ops->set_lora(p.cpu, s + 1, ad[s], &err);
        if (rc == KVS_OK) {
            rc = p.cuda->ops->set_lora(p.cuda, s + 1, ad[s], &err);
        }
    }

    if (rc == KVS_OK) {
        rng.s = c->seed ^ 0x10ca1ull ^ (uint64_t) arch;

        for (s = 0; s < GC_LORA_SEQ; s++) {
            sq[s].n_prompt = 3 + s;
            gc_pair_prompt(&rng, sq[s].prompt, sq[s].n_prompt,
                           m->hp.n_vocab);
        }

        rc = gc_lora_steps(sq, p.pool, m->hp.n_vocab, p.cpu, p.cuda, base,
                           &res, &err);
    }

    if (rc != KVS_OK) {
        snprintf(why, sizeof(why), "%s", err.msg);
        gc_fail(c, "lora", label, why);

    } else {
        rel = gc_err_rel(&res.e);
        ctl = gc_err_rel(&res.ctl);

        snprintf(name, sizeof(name), "%s: logits CUDA vs CPU, base + 8 "
                 "adapters", label);
        gc_check(c, "lora", name, rel, res.e.maxabs, GC_LORA_TOL);

        snprintf(name, sizeof(name), "%s: adapters' effect (control)",
                 label);
        snprintf(value, sizeof(value), "%.3g", ctl);
        printf("  lora %-58s %s (must exceed %.3g)  %s\n", name, value,
               3 * GC_LORA_TOL, ctl > 3 * GC_LORA_TOL ? "PASS" : "FAIL");
        gc_row(c, "lora", name, value, "> 0.09", "",
               ctl > 3 * GC_LORA_TOL ? "PASS" : "FAIL",
               "CPU without adapters vs with, the same batches");

        snprintf(name, sizeof(name), "%s: greedy ids CUDA == CPU", label);
        snprintf(value, sizeof(value), "%u/%u (+%u near-ties)", res.agree,
                 res.rows, res.ties);
        printf("  lora %-58s %s  %s\n", name, value,
               res.bad == 0 ? (res.ties == 0 ? "PASS" : "PASS*") : "FAIL");
        gc_row(c, "lora", name, value, "", "",
               res.bad == 0 ? (res.ties == 0 ? "PASS" : "PASS*") : "FAIL",
               res.note);
    }

    for (s = 0; p.pool != NULL && s < GC_LORA_SEQ; s++) {
        kvs_kv_table_release(&sq[s].tab, p.pool, &err);
    }

    kvs_backend_free(base);
    gc_pair_free(&p);

    for (s = 0; s < GC_LORA_AD; s++) {
        kvs_lora_close(ad[s]);
        if (ad_path[s][0] != '\0') {
            unlink(ad_path[s]);
        }
    }

    kvs_model_close(m);
    unlink(base_path);

    return c->dead ? -1 : 0;
}


int
gc_lora_run(gc_ctx_t *c)
{
    if (!c->self_test && gc_lora_kern(c) != 0) {
        return -1;
    }

    if (gc_lora_model(c, "llama small bf16", KVS_ARCH_LLAMA) != 0
        || gc_lora_model(c, "qwen3 small bf16", KVS_ARCH_QWEN3) != 0)
    {
        return -1;
    }

    return 0;
}
