/*
 * kvs_engine_lora: the engine's LoRA adapters (docs/lora.md): opened at
 * load from conf.lora_paths against the served model, each in its own
 * backend slot, and a step's forward with every batch entry under its
 * sequence's adapter (kvs_backend's forward_lora: the base products once
 * for the whole batch, then each adapted row's own low-rank product), so
 * one step mixes sequences of different adapters and of the base.
 *
 * Invariants:
 *   - adapter id i (1..n_loras) is loras[i - 1] in backend slot i, for
 *     the engine's whole life (every adapter is resident: no paging
 *     yet); a request naming another id is refused at submit;
 *   - a sequence's prefix cache namespace has the adapter's id and
 *     lora_epoch[i - 1], a hash of the weights' epoch and the adapter
 *     file's (xxh3-64 of its bytes, kvs_lora_t.epoch), never equal to
 *     the weights' own: the same prompt under two adapters, or under a
 *     replaced adapter file, never shares a block;
 *   - every batch entry's table is its sequence's kvs_seq_t.table (the
 *     scheduler's contract, kvs_sched.c), and kvs_seq_t is the first
 *     member of kvs_engine_seq_t: an entry's sequence is found from its
 *     table;
 *   - a step with no adapted sequence takes the plain forward: serving
 *     the base costs what it did.
 */

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_buf.h"
#include "base/kvs_hash.h"
#include "base/kvs_le.h"
#include "kvs_engine_impl.h"


int
kvs_engine_lora_new(kvs_engine_t *e, kvs_err_t *err)
{
    int       rc;
    uint8_t   b[16];
    uint32_t  i, n;

    n = e->conf.n_loras;

    if (n == 0) {
        return KVS_OK;
    }

    if (n > KVS_ENGINE_MAX_LORAS) {
        return kvs_err_set(err, KVS_EINVAL, "engine: %" PRIu32 " LoRA "
                           "adapters; at most %d", n, KVS_ENGINE_MAX_LORAS);
    }

    if (e->be->ops->set_lora == NULL || e->be->ops->forward_lora == NULL) {
        return kvs_err_set(err, KVS_EUNSUPPORTED, "engine: the %s backend "
                           "serves no LoRA adapters (%" PRIu32
                           " configured); use the CPU backend",
                           kvs_backend_name(e->be->kind), n);
    }

    e->loras = calloc(n, sizeof(kvs_lora_t *));
    e->lora_epoch = calloc(n, sizeof(uint64_t));
    if (e->loras == NULL || e->lora_epoch == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "engine: out of memory for "
                           "the adapters");
    }

    for (i = 0; i < n; i++) {
        rc = kvs_lora_open(&e->loras[i], e->conf.lora_paths[i],
                           e->conf.model, err);
        if (rc != KVS_OK) {
            e->loras[i] = NULL;
            return rc;
        }

        e->n_loras = i + 1;

        rc = e->be->ops->set_lora(e->be, i + 1, e->loras[i], err);
        if (rc != KVS_OK) {
            kvs_err_prefix(err, "adapter %" PRIu32, i + 1);
            return rc;
        }

        kvs_le_put64(b, e->epoch);
        kvs_le_put64(b + 8, e->loras[i]->epoch);
        e->lora_epoch[i] = kvs_fnv1a64(KVS_FNV1A64_INIT, b, sizeof(b));

        if (e->lora_epoch[i] == e->epoch) {
            e->lora_epoch[i] ^= 1;    /* never the base's namespace */
        }
    }

    e->conf.lora_paths = NULL;        /* borrowed for kvs_engine_new */

    return KVS_OK;
}


void
kvs_engine_lora_free(kvs_engine_t *e)
{
    uint32_t  i;

    for (i = 0; i < e->n_loras; i++) {
        kvs_lora_close(e->loras[i]);
    }

    free(e->loras);
    free(e->lora_epoch);
    free(e->lora_slots);
    e->loras = NULL;
    e->lora_epoch = NULL;
    e->lora_slots = NULL;
    e->n_loras = 0;
}


int
kvs_engine_lora_forward(kvs_engine_t *e, const kvs_sched_plan_t *plan,
    kvs_err_t *err)
{
    uint32_t                i, adapted;
    kvs_seq_t              *seq;
    const kvs_kv_table_t   *table;
    const kvs_engine_seq_t *h;

    adapted = 0;

    for (seq = plan->seqs; seq != NULL; seq = seq->step_next) {
        adapted |= ((kvs_engine_seq_t *) seq)->adapter;
    }

    if (adapted == 0) {
        return kvs_backend_forward(e->be, &plan->batch, e->logits, err);
    }

    if (kvs_grow((void **) &e->lora_slots, &e->lora_slots_cap,
                 plan->batch.n, sizeof(uint32_t)) != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM, "engine: out of memory for "
                           "the step's adapters");
    }

    table = NULL;
    h = NULL;

    for (i = 0; i < plan->batch.n; i++) {
        if (plan->batch.toks[i].table != table) {
            table = plan->batch.toks[i].table;
            h = (const kvs_engine_seq_t *)
                ((const char *) table - offsetof(kvs_seq_t, table));
        }

        e->lora_slots[i] = h->adapter;
    }

    return e->be->ops->forward_lora(e->be, &plan->batch, e->lora_slots,
                                    e->logits, err);
}


uint32_t
kvs_engine_n_loras(const kvs_engine_t *e)
{
    return e->n_loras;
}


const kvs_lora_t *
kvs_engine_lora(const kvs_engine_t *e, uint32_t id)
{
    return id >= 1 && id <= e->n_loras ? e->loras[id - 1] : NULL;
}


uint64_t
kvs_engine_lora_epoch(const kvs_engine_t *e, uint32_t id)
{
    return id >= 1 && id <= e->n_loras ? e->lora_epoch[id - 1] : e->epoch;
}
