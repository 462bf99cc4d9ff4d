/*
 * kvs_test_cpu: helpers shared by the CPU backend tests: a greedy driver
 * that steps several sequences through kvs_cpu_forward together (their
 * tokens interleaved in each batch, prefill in chunks), optionally
 * keeping the logits each greedy id came from, and the pool check every
 * test ends with (consistent, and every block back).
 * Header-only, like kvs_test.h.
 */

#ifndef KVS_TEST_CPU_H
#define KVS_TEST_CPU_H

#include "kvs_test.h"

#include "backend/cpu/kvs_cpu.h"
#include "kv/kvs_kv_pool.h"
#include "kv/kvs_kv_table.h"


/*
 * One sequence being generated: ids[0..n_ids) known (the prompt, then
 * greedy picks), ids[0..n_fed) already through the model.  The caller
 * owns ids and lg and zeroes table before the first run.
 */
typedef struct {
    kvs_kv_table_t   table;
    int32_t         *ids;             /* [n_total] prompt, then greedy */
    float           *lg;              /* NULL, or [n_total - n_prompt]
                                         [n_vocab]: the logits each greedy
                                         id came from */
    uint32_t         n_prompt;        /* where lg starts; with lg only */
    uint32_t         n_ids;           /* known ids */
    uint32_t         n_fed;           /* positions already computed */
    uint32_t         n_total;         /* stop once this many ids */
    uint32_t         chunk;           /* prefill tokens per step, >= 1 */
} kvs_test_seq_t;


/* The pool is consistent and every block is back in it. */
static inline void
kvs_test_pool_ok(const kvs_kv_pool_t *pool)
{
    kvs_err_t  err;

    if (kvs_kv_pool_check(pool, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }

    assert_int_equal(kvs_kv_pool_used_count(pool), 0);
}


/* max |a - b| / max |b| over n floats (every one finite); b must not be
 * all zeros, or a model whose logits are all 0 would compare equal
 * vacuously. */
static inline double
kvs_test_rel_err(const float *a, const float *b, size_t n)
{
    size_t  i;
    double  d, dmax, bmax;

    dmax = 0.0;
    bmax = 0.0;

    for (i = 0; i < n; i++) {
        assert_true(isfinite(a[i]) && isfinite(b[i]));
        d = fabs((double) a[i] - b[i]);
        dmax = d > dmax ? d : dmax;
        bmax = fabs(b[i]) > bmax ? fabs(b[i]) : bmax;
    }

    assert_true(bmax > 1e-3);

    return dmax / bmax;
}


/* The first index of the largest of v[0..n), n >= 1. */
static inline int32_t
kvs_test_argmax(const float *v, uint32_t n)
{
    uint32_t  i, best;

    best = 0;

    for (i = 1; i < n; i++) {
        if (v[i] > v[best]) {
            best = i;
        }
    }

    return (int32_t) best;
}


/*
 * Steps all sequences together until each holds n_total ids: each step
 * takes up to `chunk` unfed ids of every sequence, interleaved in the
 * batch (each sequence's own in position order), and appends the argmax
 * of a sequence's last logits once all its known ids are fed.  With
 * adapters (NULL: none), sequence s runs under kv's LoRA slot
 * adapters[s] (0: the base).
 */
static inline void
kvs_test_run_seqs_lora(const kvs_cpu_model_t *cm, kvs_cpu_kv_t *kv,
    kvs_kv_pool_t *pool, kvs_test_seq_t *seqs, uint32_t n_seqs,
    const uint32_t *adapters)
{
    uint32_t          s, n, r, nw, active, max_take, cap, nv;
    uint32_t         *take, *row;         /* [n_seqs] each */
    uint32_t         *slots;              /* [cap] */
    float            *logits;             /* [n_seqs][n_vocab] */
    kvs_err_t         err;
    kvs_batch_tok_t  *toks;               /* [cap]: a step never exceeds
                                             every id of every sequence */
    kvs_batch_t       b;

    nv = cm->hp.n_vocab;
    cap = 0;

    for (s = 0; s < n_seqs; s++) {
        cap += seqs[s].n_total;
    }

    toks = malloc(cap * sizeof(kvs_batch_tok_t));
    take = malloc(2 * n_seqs * sizeof(uint32_t));
    logits = malloc((size_t) n_seqs * nv * sizeof(float));
    slots = malloc(cap * sizeof(uint32_t));
    assert_non_null(slots);
    assert_non_null(toks);
    assert_non_null(take);
    assert_non_null(logits);
    row = take + n_seqs;

    for ( ;; ) {
        active = 0;
        max_take = 0;

        for (s = 0; s < n_seqs; s++) {
            take[s] = 0;

            if (seqs[s].n_ids >= seqs[s].n_total) {
                continue;
            }

            take[s] = seqs[s].n_ids - seqs[s].n_fed;
            if (take[s] > seqs[s].chunk) {
                take[s] = seqs[s].chunk;
            }

            if (take[s] > max_take) {
                max_take = take[s];
            }

            active++;

            if (kvs_kv_table_reserve(&seqs[s].table, pool,
                                     seqs[s].n_fed + take[s], &err)
                != KVS_OK)
            {
                fail_msg("%s", err.msg);
            }
        }

        if (active == 0) {
            break;
        }

        /* round r takes each sequence's r-th token of this step */
        n = 0;
        nw = 0;

        for (r = 0; r < max_take; r++) {
            for (s = 0; s < n_seqs; s++) {
                if (r >= take[s]) {
                    continue;
                }

                toks[n].token = seqs[s].ids[seqs[s].n_fed + r];
                toks[n].pos = seqs[s].n_fed + r;
                toks[n].table = &seqs[s].table;
                slots[n] = adapters != NULL ? adapters[s] : 0;
                toks[n].want_logits = r + 1 == take[s]
                    && seqs[s].n_fed + take[s] == seqs[s].n_ids;

                if (toks[n].want_logits) {
                    row[s] = nw++;
                }

                n++;
            }
        }

        b.toks = toks;
        b.n = n;

        if (kvs_cpu_forward_lora(cm, kv, &b, adapters != NULL ? slots : NULL,
                                 logits, &err)
            != KVS_OK)
        {
            fail_msg("%s", err.msg);
        }

        for (s = 0; s < n_seqs; s++) {
            if (take[s] == 0) {
                continue;
            }

            seqs[s].n_fed += take[s];

            if (seqs[s].n_fed != seqs[s].n_ids) {
                continue;
            }

            if (seqs[s].lg != NULL) {
                memcpy(seqs[s].lg
                       + (size_t) (seqs[s].n_ids - seqs[s].n_prompt) * nv,
                       logits + (size_t) row[s] * nv, nv * sizeof(float));
            }

            seqs[s].ids[seqs[s].n_ids++] =
                kvs_test_argmax(logits + (size_t) row[s] * nv, nv);
        }
    }

    free(logits);
    free(take);
    free(toks);
    free(slots);
}


static inline void
kvs_test_run_seqs(const kvs_cpu_model_t *cm, kvs_cpu_kv_t *kv,
    kvs_kv_pool_t *pool, kvs_test_seq_t *seqs, uint32_t n_seqs)
{
    kvs_test_run_seqs_lora(cm, kv, pool, seqs, n_seqs, NULL);
}


#endif /* KVS_TEST_CPU_H */
