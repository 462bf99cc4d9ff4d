/*
 * kvs_cuda_lora_plan: the CUDA backend's LoRA arithmetic that needs no
 * CUDA: the adapter's fit, its slot image's layout and BF16 conversion,
 * the slot table, and a step's grouping of rows by slot.  The header
 * says what each owns and the invariants they keep.
 */

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_cuda_lora_plan.h"
#include "model/kvs_dtype.h"


_Static_assert(KVS_CUDA_LORA_RANK_MAX == KVS_LORA_MAX_RANK,
               "the kernels take every rank the reader accepts");
_Static_assert(KVS_LORA_Q == 0 && KVS_LORA_DOWN == 6
               && KVS_CUDA_LORA_TARGETS == KVS_LORA_DOWN + 1,
               "q..down index the table");


void
kvs_cuda_lora_dims(const kvs_hparams_t *hp, kvs_lora_target_t t,
    uint64_t *n_in, uint64_t *n_out)
{
    *n_in = 0;
    *n_out = 0;

    switch (t) {
    case KVS_LORA_Q:
    case KVS_LORA_K:
    case KVS_LORA_V:
        if (hp->fused_qkv) {
            return;
        }
        *n_in = hp->n_embd;
        *n_out = t == KVS_LORA_Q ? hp->q_width
                 : t == KVS_LORA_K ? hp->k_width : hp->v_width;
        return;

    case KVS_LORA_O:
        *n_in = hp->o_width;
        *n_out = hp->n_embd;
        return;

    case KVS_LORA_GATE:
    case KVS_LORA_UP:
        if (hp->fused_gate_up) {
            return;
        }
        *n_in = hp->n_embd;
        *n_out = hp->n_ff;
        return;

    case KVS_LORA_DOWN:
        *n_in = hp->n_ff;
        *n_out = hp->n_embd;
        return;

    default:
        return;
    }
}


int
kvs_cuda_lora_fit(const kvs_hparams_t *hp, const kvs_lora_t *l,
    kvs_err_t *err)
{
    uint32_t               i;
    uint64_t               n_in, n_out;
    const kvs_lora_mat_t  *m;

    if (strcmp(l->arch, hp->arch) != 0) {
        return kvs_err_set(err, KVS_EINVAL, "cuda lora: adapter for %s, "
                           "the model is %s", l->arch, hp->arch);
    }

    for (i = 0; i < l->n_mat; i++) {
        m = &l->mat[i];
        n_in = 0;
        n_out = 0;

        if ((unsigned) m->target < KVS_CUDA_LORA_TARGETS) {
            kvs_cuda_lora_dims(hp, m->target, &n_in, &n_out);
        }

        if (m->layer >= hp->n_layer || n_in == 0 || m->n_in != n_in
            || m->n_out != n_out)
        {
            return kvs_err_set(err, KVS_EUNSUPPORTED, "cuda lora: adapter "
                               "tensor %s (%" PRIu64 " -> %" PRIu64 ") is "
                               "not a matrix the CUDA forward adapts",
                               m->name, m->n_in, m->n_out);
        }

        if (m->rank == 0 || m->rank > KVS_CUDA_LORA_RANK_MAX) {
            return kvs_err_set(err, KVS_EUNSUPPORTED, "cuda lora: adapter "
                               "tensor %s: rank %" PRIu32 " outside 1..%d",
                               m->name, m->rank, KVS_CUDA_LORA_RANK_MAX);
        }
    }

    return KVS_OK;
}


static uint64_t
kvs_cuda_lora_align(uint64_t x)
{
    return (x + KVS_CUDA_LORA_ALIGN - 1) & ~(uint64_t) (KVS_CUDA_LORA_ALIGN
                                                        - 1);
}


int
kvs_cuda_lora_layout(const kvs_lora_t *l, kvs_cuda_lora_part_t *parts,
    uint64_t *bytes, kvs_err_t *err)
{
    uint32_t               i;
    uint64_t               off, a, b;
    const kvs_lora_mat_t  *m;

    off = 0;

    for (i = 0; i < l->n_mat; i++) {
        m = &l->mat[i];

        /* rank <= 1024 and the sides are GGUF dimensions (< 2^63), but
         * their products are checked all the same */
        if (m->n_in > (UINT64_MAX / 4) / m->rank
            || m->n_out > (UINT64_MAX / 4) / m->rank)
        {
            return kvs_err_set(err, KVS_ERANGE, "cuda lora: %s: size "
                               "overflows", m->name);
        }

        a = (uint64_t) m->rank * m->n_in * 2;
        b = (uint64_t) m->rank * m->n_out * 2;

        if (off > UINT64_MAX / 2 - a - b - 2 * KVS_CUDA_LORA_ALIGN) {
            return kvs_err_set(err, KVS_ERANGE, "cuda lora: %s: size "
                               "overflows", m->name);
        }

        parts[i].a = off;
        off = kvs_cuda_lora_align(off + a);
        parts[i].bt = off;
        off = kvs_cuda_lora_align(off + b);
    }

    *bytes = off;

    return KVS_OK;
}


/* The one reader of an adapter's values in the CUDA backend: a change to
 * how kvs_lora_mat_t stores them is a change here only. */
void
kvs_cuda_lora_pack_mat(const kvs_lora_mat_t *m, uint16_t *a, uint16_t *bt)
{
    uint32_t  r;
    uint64_t  i, o;

    for (r = 0; r < m->rank; r++) {
        for (i = 0; i < m->n_in; i++) {
            a[(uint64_t) r * m->n_in + i] =
                kvs_f32_to_bf16(m->a[(uint64_t) r * m->n_in + i]);
        }
    }

    for (o = 0; o < m->n_out; o++) {
        for (r = 0; r < m->rank; r++) {
            bt[(uint64_t) r * m->n_out + o] =
                kvs_f32_to_bf16(m->b[o * m->rank + r]);
        }
    }
}


void
kvs_cuda_lora_pack(const kvs_lora_t *l, const kvs_cuda_lora_part_t *parts,
    uint64_t bytes, void *img)
{
    uint32_t  i;

    memset(img, 0, (size_t) bytes);

    for (i = 0; i < l->n_mat; i++) {
        kvs_cuda_lora_pack_mat(&l->mat[i],
                               (uint16_t *) (void *) ((char *) img
                                                      + parts[i].a),
                               (uint16_t *) (void *) ((char *) img
                                                      + parts[i].bt));
    }
}


size_t
kvs_cuda_lora_table_len(const kvs_cuda_lora_table_t *t)
{
    return (size_t) t->n_layer * KVS_CUDA_LORA_TARGETS
           * (KVS_CUDA_LORA_SLOTS + 1);
}


int
kvs_cuda_lora_table_new(kvs_cuda_lora_table_t *t, uint32_t n_layer,
    kvs_err_t *err)
{
    memset(t, 0, sizeof(*t));

    if (n_layer == 0 || n_layer > 65536) {
        return kvs_err_set(err, KVS_EINVAL, "cuda lora: %" PRIu32
                           " layers", n_layer);
    }

    t->n_layer = n_layer;
    t->ent = calloc(kvs_cuda_lora_table_len(t), sizeof(kvs_cuda_lora_ent_t));
    t->rank_max = calloc(KVS_CUDA_LORA_SLOTS + 1, sizeof(uint32_t));

    if (t->ent == NULL || t->rank_max == NULL) {
        kvs_cuda_lora_table_free(t);
        return kvs_err_set(err, KVS_ENOMEM, "cuda lora: out of memory for "
                           "the slot table");
    }

    return KVS_OK;
}


void
kvs_cuda_lora_table_free(kvs_cuda_lora_table_t *t)
{
    free(t->ent);
    free(t->rank_max);
    t->ent = NULL;
    t->rank_max = NULL;
    t->n_layer = 0;
}


kvs_cuda_lora_ent_t *
kvs_cuda_lora_table_at(const kvs_cuda_lora_table_t *t, uint32_t layer,
    kvs_lora_target_t target)
{
    return t->ent + ((size_t) layer * KVS_CUDA_LORA_TARGETS + target)
                    * (KVS_CUDA_LORA_SLOTS + 1);
}


int
kvs_cuda_lora_table_set(kvs_cuda_lora_table_t *t, uint32_t slot,
    const kvs_lora_t *l, uint64_t base, const kvs_cuda_lora_part_t *parts,
    kvs_err_t *err)
{
    uint32_t               i, ly, tg;
    kvs_cuda_lora_ent_t   *e;
    const kvs_lora_mat_t  *m;

    if (slot == 0 || slot > KVS_CUDA_LORA_SLOTS) {
        return kvs_err_set(err, KVS_EINVAL, "cuda lora: slot %" PRIu32
                           " outside 1..%d", slot, KVS_CUDA_LORA_SLOTS);
    }

    for (ly = 0; ly < t->n_layer; ly++) {
        for (tg = 0; tg < KVS_CUDA_LORA_TARGETS; tg++) {
            e = kvs_cuda_lora_table_at(t, ly, (kvs_lora_target_t) tg);
            memset(&e[slot], 0, sizeof(kvs_cuda_lora_ent_t));
        }
    }

    t->rank_max[slot] = 0;

    for (i = 0; l != NULL && i < l->n_mat; i++) {
        m = &l->mat[i];
        e = kvs_cuda_lora_table_at(t, m->layer, m->target) + slot;
        e->a = base + parts[i].a;
        e->bt = base + parts[i].bt;
        e->rank = m->rank;
        e->scale = m->scale;

        if (m->rank > t->rank_max[slot]) {
            t->rank_max[slot] = m->rank;
        }
    }

    return KVS_OK;
}


int
kvs_cuda_lora_check(const kvs_cuda_lora_table_t *t, const uint32_t *slots,
    uint32_t n, kvs_err_t *err)
{
    uint32_t  i, s;

    for (i = 0; i < n; i++) {
        s = slots[i];

        if (s != 0 && (s > KVS_CUDA_LORA_SLOTS || t->rank_max == NULL
                       || t->rank_max[s] == 0))
        {
            return kvs_err_set(err, KVS_EINVAL, "cuda forward: entry %"
                               PRIu32 ": adapter slot %" PRIu32 " holds "
                               "no adapter", i, s);
        }
    }

    return KVS_OK;
}


size_t
kvs_cuda_lora_group_words(uint32_t cap)
{
    return 3 * (size_t) cap + 1;
}


void
kvs_cuda_lora_group(const kvs_cuda_lora_table_t *t, const uint32_t *slots,
    uint32_t n, uint32_t cap, int32_t *words, uint32_t *n_task,
    uint32_t *rank)
{
    uint32_t   cnt[KVS_CUDA_LORA_SLOTS + 1], at[KVS_CUDA_LORA_SLOTS + 1];
    uint32_t   i, s, g, k, total;
    int32_t   *rows, *task0, *task_slot;

    rows = words;
    task0 = words + cap;
    task_slot = words + 2 * (size_t) cap + 1;

    memset(cnt, 0, sizeof(cnt));

    for (i = 0; i < n; i++) {
        cnt[slots[i]]++;
    }

    /* each slot's first place in rows, and its tasks */
    k = 0;
    total = 0;
    *rank = 0;

    for (s = 1; s <= KVS_CUDA_LORA_SLOTS; s++) {
        at[s] = total;

        for (g = 0; g < cnt[s]; g += KVS_CUDA_LORA_GROUP) {
            task0[k] = (int32_t) (total + g);
            task_slot[k] = (int32_t) s;
            k++;
        }

        if (cnt[s] != 0 && t->rank_max[s] > *rank) {
            *rank = t->rank_max[s];
        }

        total += cnt[s];
    }

    task0[k] = (int32_t) total;
    *n_task = k;

    for (i = 0; i < n; i++) {
        s = slots[i];
        if (s != 0) {
            rows[at[s]++] = (int32_t) i;
        }
    }
}


uint32_t
kvs_cuda_lora_need(const kvs_cuda_lora_table_t *t, uint32_t layer,
    kvs_lora_target_t target, const int32_t *task_slot, uint32_t n_task)
{
    uint32_t                    k, r;
    const kvs_cuda_lora_ent_t  *e;

    e = kvs_cuda_lora_table_at(t, layer, target);
    r = 0;

    for (k = 0; k < n_task; k++) {
        if (e[task_slot[k]].rank > r) {
            r = e[task_slot[k]].rank;
        }
    }

    return r;
}
