/*
 * kvs_cpu_lora: batched heterogeneous LoRA on the CPU backend.  A kv
 * holds up to KVS_CPU_LORA_SLOTS adapters in slots 1..N (slot 0 is "no
 * adapter"); kvs_cpu_forward_lora() takes each batch entry's slot.  For each adapted matrix the
 * forward computes the base product once for the whole batch
 * (kvs_cpu_matmul), then kvs_cpu_lora_apply() adds each row's own
 * adapter's low-rank product, y += scale * B (A x), over the rows with
 * an adapter only, taken in slot order (a step's rows are grouped by
 * adapter once, by kvs_cpu_lora_prepare), so an adapter's A and B stay
 * in cache across its rows; rows with slot 0 are never touched.
 *
 * Invariants: a slot's adapter was checked against the model when set
 * (every pair's shapes are the matrices' the forward multiplies: fused
 * phi3 tensors are refused); its per-(layer, target) index is built
 * then, so a step looks a matrix up in O(1).  A row's result depends
 * only on its own input and adapter (kvs_lora_apply_row's order), never
 * on the batch, the grouping or the thread.  kv borrows the adapters:
 * they must outlive their slot.
 */

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_buf.h"
#include "kvs_cpu_impl.h"


/* The matrix the forward multiplies for target t of layer ly. */
static const kvs_cpu_mat_t *
kvs_cpu_lora_mat(const kvs_cpu_layer_t *ly, kvs_lora_target_t t)
{
    switch (t) {
    case KVS_LORA_Q:    return &ly->wq;
    case KVS_LORA_K:    return &ly->wk;
    case KVS_LORA_V:    return &ly->wv;
    case KVS_LORA_O:    return &ly->wo;
    case KVS_LORA_GATE: return &ly->w1;
    case KVS_LORA_UP:   return &ly->w3;
    case KVS_LORA_DOWN: return &ly->w2;
    default:            return NULL;
    }
}


int
kvs_cpu_kv_set_lora(kvs_cpu_kv_t *kv, const kvs_cpu_model_t *cm,
    uint32_t slot, const kvs_lora_t *l, kvs_err_t *err)
{
    uint32_t                 i;
    kvs_cpu_lora_slot_t     *s;
    const kvs_lora_mat_t    *m;
    const kvs_cpu_mat_t     *w;
    const kvs_lora_mat_t   **by;

    if (slot == 0 || slot > KVS_CPU_LORA_SLOTS) {
        return kvs_err_set(err, KVS_EINVAL, "cpu lora: slot %" PRIu32
                           " outside 1..%u", slot, KVS_CPU_LORA_SLOTS);
    }

    by = NULL;

    if (l != NULL) {
        if (strcmp(l->arch, cm->hp.arch) != 0) {
            return kvs_err_set(err, KVS_EINVAL, "cpu lora: adapter for %s, "
                               "the model is %s", l->arch, cm->hp.arch);
        }

        /* every pair fits the matrix the forward multiplies */
        for (i = 0; i < l->n_mat; i++) {
            m = &l->mat[i];
            w = m->layer < cm->hp.n_layer
                ? kvs_cpu_lora_mat(&cm->layers[m->layer], m->target) : NULL;

            if (w == NULL || w->cols != m->n_in || w->rows != m->n_out
                || (cm->hp.fused_gate_up && (m->target == KVS_LORA_GATE
                                             || m->target == KVS_LORA_UP)))
            {
                return kvs_err_set(err, KVS_EUNSUPPORTED, "cpu lora: "
                                   "adapter tensor %s (%" PRIu64 " -> %"
                                   PRIu64 ") is not a matrix the CPU "
                                   "forward adapts", m->name, m->n_in,
                                   m->n_out);
            }
        }

        by = calloc((size_t) cm->hp.n_layer * KVS_LORA_N_TARGETS,
                    sizeof(*by));
        if (by == NULL) {
            return kvs_err_set(err, KVS_ENOMEM, "cpu lora: out of memory");
        }

        for (i = 0; i < l->n_mat; i++) {
            m = &l->mat[i];
            by[(size_t) m->layer * KVS_LORA_N_TARGETS + m->target] = m;
        }
    }

    s = &kv->lora[slot - 1];
    free(s->by);
    s->l = l;
    s->by = by;

    return KVS_OK;
}


void
kvs_cpu_kv_lora_free(kvs_cpu_kv_t *kv)
{
    uint32_t  i;

    for (i = 0; i < KVS_CPU_LORA_SLOTS; i++) {
        free(kv->lora[i].by);
    }

    free(kv->lora_rows);
    free(kv->lora_tmp);
}


int
kvs_cpu_lora_check(const kvs_cpu_kv_t *kv, const kvs_batch_t *b,
    const uint32_t *slots, kvs_err_t *err)
{
    uint32_t  i, s;

    for (i = 0; slots != NULL && i < b->n; i++) {
        s = slots[i];

        if (s != 0 && (s > KVS_CPU_LORA_SLOTS || kv->lora[s - 1].l == NULL)) {
            return kvs_err_set(err, KVS_EINVAL, "cpu forward: entry %"
                               PRIu32 ": adapter slot %" PRIu32 " holds no "
                               "adapter", i, s);
        }
    }

    return KVS_OK;
}


int
kvs_cpu_lora_prepare(kvs_cpu_fw_t *fw, kvs_err_t *err)
{
    size_t               cnt[KVS_CPU_LORA_SLOTS + 1], need;
    uint32_t             i, s, rank;
    kvs_cpu_kv_t        *kv;
    const kvs_batch_t   *b;

    kv = fw->kv;
    b = fw->b;
    fw->lora_n = 0;

    if (fw->lora_slots == NULL) {
        return KVS_OK;
    }

    memset(cnt, 0, sizeof(cnt));
    rank = 0;

    for (i = 0; i < b->n; i++) {
        s = fw->lora_slots[i];
        if (s != 0) {
            cnt[s]++;
            fw->lora_n++;
            if (kv->lora[s - 1].l->rank_max > rank) {
                rank = kv->lora[s - 1].l->rank_max;
            }
        }
    }

    if (fw->lora_n == 0) {
        return KVS_OK;
    }

    need = (size_t) kvs_threads_count(kv->threads) * rank;

    if (kvs_grow((void **) &kv->lora_rows, &kv->lora_rows_cap, b->n,
                 sizeof(uint32_t)) != KVS_OK
        || kvs_grow((void **) &kv->lora_tmp, &kv->lora_tmp_cap, need,
                    sizeof(float)) != KVS_OK)
    {
        fw->lora_n = 0;
        return kvs_err_set(err, KVS_ENOMEM, "cpu forward: out of memory "
                           "for the adapters' rows");
    }

    fw->lora_rank = rank;

    /* a counting sort of the adapted rows by slot, stable */
    for (s = 1, need = 0; s <= KVS_CPU_LORA_SLOTS; s++) {
        i = (uint32_t) cnt[s];
        cnt[s] = need;
        need += i;
    }

    for (i = 0; i < b->n; i++) {
        s = fw->lora_slots[i];
        if (s != 0) {
            kv->lora_rows[cnt[s]++] = i;
        }
    }

    return KVS_OK;
}


typedef struct {
    const kvs_cpu_fw_t  *fw;
    uint32_t             layer;
    kvs_lora_target_t    target;
    const float         *x;
    uint32_t             ldx;
    float               *y;
    uint32_t             ldy;
} kvs_cpu_lora_job_t;


#define KVS_CPU_LORA_CHUNK  4         /* rows per task */


static void
kvs_cpu_lora_task(void *arg, uint32_t task, uint32_t thread)
{
    uint32_t                   j, end, row, s;
    kvs_cpu_kv_t              *kv;
    const kvs_lora_mat_t      *m;
    const kvs_cpu_lora_job_t  *job;

    job = arg;
    kv = job->fw->kv;
    end = (task + 1) * KVS_CPU_LORA_CHUNK;
    end = end < job->fw->lora_n ? end : job->fw->lora_n;

    for (j = task * KVS_CPU_LORA_CHUNK; j < end; j++) {
        row = kv->lora_rows[j];
        s = job->fw->lora_slots[row];
        m = kv->lora[s - 1].by[(size_t) job->layer * KVS_LORA_N_TARGETS
                               + job->target];
        if (m != NULL) {
            kvs_lora_apply_row(m, job->x + (size_t) row * job->ldx,
                               job->y + (size_t) row * job->ldy,
                               kv->lora_tmp
                               + (size_t) thread * job->fw->lora_rank);
        }
    }
}


void
kvs_cpu_lora_apply(const kvs_cpu_fw_t *fw, uint32_t layer,
    kvs_lora_target_t target, const float *x, uint32_t ldx, float *y,
    uint32_t ldy)
{
    kvs_cpu_lora_job_t  job;

    if (fw->lora_n == 0) {
        return;
    }

    job.fw = fw;
    job.layer = layer;
    job.target = target;
    job.x = x;
    job.ldx = ldx;
    job.y = y;
    job.ldy = ldy;

    kvs_threads_run(kvs_cpu_pool(fw, (double) fw->lora_n * fw->lora_rank
                                     * (ldx + ldy)),
                    kvs_cpu_lora_task, &job,
                    (fw->lora_n + KVS_CPU_LORA_CHUNK - 1)
                    / KVS_CPU_LORA_CHUNK);
}
