/*
 * fake_cuda_backend: a stand-in for libkvserve_cuda.so for
 * test_backend_select, built as libkvs_fake_cuda.so: the probe finds one
 * "device" (ordinal 0), and the backend computes with the CPU backend
 * but implements forward_sample, picking each row's token on its own
 * from the coin the engine drew, with kvs_sample.h's pipeline (steps 3
 * to 8 and 10, min-p off) written out again here.  So an engine on it
 * must give the very tokens of an engine on the CPU: that checks that
 * the engine draws the coins kvs_sample() would, and when.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kvs_backend.h"

#define FAKE_BLOCKS  64               /* the pool when asked to size it */

typedef struct {
    kvs_backend_t  *cpu;
    float          *logits;           /* [rows][n_vocab] */
    size_t          cap;              /* floats */
    uint32_t       *cand;             /* [n_vocab] ids */
} fake_t;


int kvs_cuda_probe_device(int device, int *count, char *name,
    size_t name_len, uint64_t *mem, char *why, size_t why_len);
int kvs_cuda_backend_new(kvs_backend_t **out, const kvs_model_t *m,
    const kvs_backend_conf_t *conf, kvs_err_t *err);


/* a before b: larger p, then lower id */
static int
fake_before(const float *x, uint32_t a, uint32_t b)
{
    return x[a] > x[b] || (x[a] == x[b] && a < b);
}


static int32_t
fake_pick(fake_t *f, float *x, uint32_t n, const kvs_backend_sample_t *p)
{
    uint32_t  i, j, k, m, t, rank;
    float     max, sum, cutoff, cum, r, cdf;

    if (p->temperature == 0.0f) {
        for (i = 1, j = 0; i < n; i++) {
            if (x[i] > x[j]) {
                j = i;
            }
        }
        return (int32_t) j;
    }

    for (i = 0; i < n; i++) {
        x[i] /= p->temperature;
    }

    k = p->top_k > 0 ? (uint32_t) p->top_k : 0;

    if (k > 0 && k < n) {
        /* rank by counting: the k first stay (O(n^2), small vocabs) */
        for (i = 0; i < n; i++) {
            f->cand[i] = 0;
            for (j = 0, rank = 0; j < n; j++) {
                rank += j != i && fake_before(x, j, i);
            }
            f->cand[i] = rank;
        }
        for (i = 0; i < n; i++) {
            if (f->cand[i] >= k) {
                x[i] = -INFINITY;
            }
        }
    }

    max = x[0];
    for (i = 1; i < n; i++) {
        max = x[i] > max ? x[i] : max;
    }
    sum = 0.0f;
    for (i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    for (i = 0; i < n; i++) {
        x[i] /= sum;
    }

    if ((k == 0 || k >= n) && p->top_p >= 1.0f) {
        cdf = 0.0f;
        for (i = 0; i < n; i++) {
            cdf += x[i];
            if (p->coin < cdf) {
                return (int32_t) i;
            }
        }
        return (int32_t) n - 1;
    }

    m = 0;

    if (p->top_p < 1.0f) {
        cutoff = n > 1 ? (1.0f - p->top_p) / (float) (n - 1) : 0.0f;
        for (i = 0; i < n; i++) {
            if (x[i] >= cutoff) {
                f->cand[m++] = i;
            }
        }

        if (m == 0) {
            for (i = 1, j = 0; i < n; i++) {
                j = x[i] > x[j] ? i : j;
            }
            return (int32_t) j;
        }

        /* insertion sort, larger first, ties by id */
        for (i = 1; i < m; i++) {
            t = f->cand[i];
            for (j = i; j > 0 && fake_before(x, t, f->cand[j - 1]); j--) {
                f->cand[j] = f->cand[j - 1];
            }
            f->cand[j] = t;
        }

        cum = 0.0f;
        for (i = 0; i < m; i++) {
            cum += x[f->cand[i]];
            if (cum > p->top_p) {
                m = i + 1;
                break;
            }
        }

    } else {
        for (i = 0; i < n; i++) {
            if (x[i] > 0.0f) {
                f->cand[m++] = i;
            }
        }
    }

    sum = 0.0f;
    for (i = 0; i < m; i++) {
        sum += x[f->cand[i]];
    }

    r = p->coin * sum;
    cdf = 0.0f;
    for (i = 0; i < m; i++) {
        cdf += x[f->cand[i]];
        if (r < cdf) {
            return (int32_t) f->cand[i];
        }
    }

    return (int32_t) f->cand[m - 1];
}


static int
fake_forward(kvs_backend_t *be, const kvs_batch_t *b, float *logits,
    kvs_err_t *err)
{
    fake_t  *f = be->impl;

    return kvs_backend_forward(f->cpu, b, logits, err);
}


static int
fake_forward_sample(kvs_backend_t *be, const kvs_batch_t *b,
    const kvs_backend_sample_t *params, int32_t *ids, kvs_err_t *err)
{
    int       rc;
    size_t    need;
    uint32_t  i, rows;
    fake_t   *f = be->impl;

    for (i = 0, rows = 0; i < b->n; i++) {
        rows += b->toks[i].want_logits != 0;
    }

    need = (size_t) rows * be->n_vocab;
    if (need > f->cap) {
        free(f->logits);
        f->logits = malloc(need * sizeof(float));
        f->cap = f->logits != NULL ? need : 0;
        if (f->logits == NULL) {
            return kvs_err_set(err, KVS_ENOMEM, "fake: out of memory");
        }
    }

    rc = kvs_backend_forward(f->cpu, b, f->logits, err);
    if (rc != KVS_OK) {
        return rc;
    }

    for (i = 0; i < rows; i++) {
        ids[i] = fake_pick(f, f->logits + (size_t) i * be->n_vocab,
                           be->n_vocab, &params[i]);
    }

    return KVS_OK;
}


static int
fake_copy_block(kvs_backend_t *be, uint32_t dst, uint32_t src,
    kvs_err_t *err)
{
    fake_t  *f = be->impl;

    return kvs_backend_copy_block(f->cpu, dst, src, err);
}


static void
fake_free(kvs_backend_t *be)
{
    fake_t  *f = be->impl;

    kvs_backend_free(f->cpu);
    free(f->logits);
    free(f->cand);
    free(be);
}


static const kvs_backend_ops_t  fake_ops = {
    fake_forward,
    fake_forward_sample,
    fake_copy_block,
    fake_free,
    NULL,                                   /* no second tier */
    NULL,
    NULL,                                   /* no LoRA adapters */
    NULL,
    NULL,                                   /* no host tier */
    NULL,
    NULL,                                   /* nor LoRA's two halves */
    NULL,
    NULL,
    NULL,                                   /* copies at once: */
    NULL,                                   /* none off the step */
    NULL,
    NULL
};


int
kvs_cuda_probe_device(int device, int *count, char *name, size_t name_len,
    uint64_t *mem, char *why, size_t why_len)
{
    *count = 1;

    if (device != 0) {
        snprintf(why, why_len, "device %d: the host has 1 device (0..0)",
                 device);
        return 101;
    }

    snprintf(name, name_len, "fake device (sm_90)");
    *mem = 1ull << 30;

    return 0;
}


int
kvs_cuda_backend_new(kvs_backend_t **out, const kvs_model_t *m,
    const kvs_backend_conf_t *conf, kvs_err_t *err)
{
    int                 rc;
    fake_t             *f;
    kvs_backend_t      *be;
    kvs_backend_conf_t  cc;

    *out = NULL;

    be = calloc(1, sizeof(kvs_backend_t) + sizeof(fake_t));
    if (be == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "fake: out of memory");
    }

    f = (fake_t *) (be + 1);
    f->cand = malloc(m->hp.n_vocab * sizeof(uint32_t));

    cc = *conf;
    cc.kind = KVS_BACKEND_CPU;
    if (cc.n_blocks == 0) {
        cc.n_blocks = FAKE_BLOCKS;
    }

    rc = f->cand == NULL ? kvs_err_set(err, KVS_ENOMEM, "fake: memory")
                         : kvs_backend_cpu_new(&f->cpu, m, &cc, err);
    if (rc != KVS_OK) {
        free(f->cand);
        free(be);
        return rc;
    }

    *be = *f->cpu;
    be->ops = &fake_ops;
    be->kind = KVS_BACKEND_CUDA;
    be->impl = f;

    *out = be;

    return KVS_OK;
}
