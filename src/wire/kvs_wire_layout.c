/*
 * kvs_wire_layout: the bodies' fixed fields as data (docs/engine-process.md
 * gives the same tables in prose), the code that writes and reads a
 * struct through them, and the checks of SUBMIT's repeated entries that
 * the encoder and the decoder both make.
 *
 * Invariants: a table lists its fields in wire order, and it is the only
 * place that order is written: kvs_wire_enc.c writes, kvs_wire_dec.c and
 * kvs_wire.c read through the same table, so what one writes the other
 * reads.  The decoder checks each field as it reads it (limits, flags,
 * finite floats, reserved bytes), with the field named as the table
 * names it; the encoder checks the caller's values before it reserves a
 * frame, so writing needs no checks.  Only src/base is called.
 */

#include <stddef.h>
#include <string.h>

#include "kvs_wire_impl.h"


#define KVS_MODEL(m)   KVS_WIRE_AT(kvs_wire_model_t, m)
#define KVS_REQ(m)     KVS_WIRE_AT(kvs_engine_req_t, m)
#define KVS_STATS(m)   KVS_WIRE_AT(kvs_wire_model_stats_t, m)
#define KVS_TENANT(m)  KVS_WIRE_AT(kvs_engine_tenant_t, m)
#define KVS_INDEX(m)   KVS_WIRE_AT(kvs_wire_index_t, m)
#define KVS_RESERVED(n)  { "reserved", KVS_WIRE_ZERO, n, 0, 0, 0 }


/* HELLO: one model, then its name_len and name */
static const kvs_wire_field_t  kvs_wire_hello_model_f[] = {
    { "index",        KVS_WIRE_INT, 4, 0, KVS_MODEL(index) },
    { "n_ctx",        KVS_WIRE_INT, 4, 0, KVS_MODEL(n_ctx) },
    { "n_vocab",      KVS_WIRE_INT, 4, 0, KVS_MODEL(n_vocab) },
    { "block_tokens", KVS_WIRE_INT, 4, 0, KVS_MODEL(block_tokens) },
    { "kv_blocks",    KVS_WIRE_INT, 4, 0, KVS_MODEL(kv_blocks) },
    { "file_size",    KVS_WIRE_INT, 8, 0, KVS_MODEL(file_size) },
    { "mtime_ns",     KVS_WIRE_INT, 8, 0, KVS_MODEL(mtime_ns) },
    { "dev",          KVS_WIRE_INT, 8, 0, KVS_MODEL(dev) },
    { "ino",          KVS_WIRE_INT, 8, 0, KVS_MODEL(ino) },
    { "epoch",        KVS_WIRE_INT, 8, 0, KVS_MODEL(epoch) },
    { "backend",      KVS_WIRE_INT, 1, KVS_BACKEND_CUDA, KVS_MODEL(backend) },
    { "kv_dtype",     KVS_WIRE_INT, 1, KVS_BACKEND_KV_MAX,
      KVS_MODEL(kv_dtype) },
    KVS_RESERVED(2),
    { "weights_mapped", KVS_WIRE_INT, 8, 0, KVS_MODEL(weights_mapped) },
    { "weights_owned",  KVS_WIRE_INT, 8, 0, KVS_MODEL(weights_owned) },
    { "weights_device", KVS_WIRE_INT, 8, 0, KVS_MODEL(weights_device) },
};


/* SUBMIT: after model and submit_ns, the request's fixed part; the
 * counts bound the sections that follow, so the decoder checks them
 * before it reads or allocates any */
static const kvs_wire_field_t  kvs_wire_submit_req_f[] = {
    { "n_prompt",          KVS_WIRE_INT, 4, 0, KVS_REQ(n_prompt) },
    { "max_tokens",        KVS_WIRE_INT, 4, 0, KVS_REQ(max_tokens) },
    { "n",                 KVS_WIRE_INT, 4, KVS_ENGINE_MAX_N, KVS_REQ(n) },
    { "temperature",       KVS_WIRE_FINITE, 4, 0,
      KVS_REQ(sample.temperature) },
    { "top_k",             KVS_WIRE_INT, 4, 0, KVS_REQ(sample.top_k) },
    { "top_p",             KVS_WIRE_FINITE, 4, 0, KVS_REQ(sample.top_p) },
    { "min_p",             KVS_WIRE_FINITE, 4, 0, KVS_REQ(sample.min_p) },
    { "seed",              KVS_WIRE_INT, 8, 0, KVS_REQ(sample.seed) },
    { "presence_penalty",  KVS_WIRE_FINITE, 4, 0,
      KVS_REQ(sample.presence_penalty) },
    { "frequency_penalty", KVS_WIRE_FINITE, 4, 0,
      KVS_REQ(sample.frequency_penalty) },
    { "logprobs",          KVS_WIRE_FLAG, 1, 0, KVS_REQ(sample.logprobs) },
    { "top_logprobs",      KVS_WIRE_INT, 1, KVS_SAMPLE_MAX_TOP_LOGPROBS,
      KVS_REQ(sample.top_logprobs) },
    { "ignore_eos",        KVS_WIRE_FLAG, 1, 0, KVS_REQ(ignore_eos) },
    { "gram_kind",         KVS_WIRE_INT, 1, KVS_ENGINE_GRAM_KIND_MAX,
      KVS_REQ(gram_kind) },
    { "n_logit_bias",      KVS_WIRE_INT, 4, KVS_WIRE_MAX_BIAS,
      KVS_REQ(sample.n_logit_bias) },
    { "n_stop_ids",        KVS_WIRE_INT, 4, KVS_ENGINE_MAX_STOP_IDS,
      KVS_REQ(n_stop_ids) },
    { "n_stop",            KVS_WIRE_INT, 4, KVS_WIRE_MAX_STOP,
      KVS_REQ(n_stop) },
    { "adapter",           KVS_WIRE_INT, 4, 0, KVS_REQ(adapter) },
    { "scope_len",         KVS_WIRE_INT, 2, KVS_RADIX_MAX_SCOPE,
      KVS_REQ(scope_len) },
    { "n_pins",            KVS_WIRE_INT, 1, KVS_ENGINE_MAX_PINS,
      KVS_REQ(n_pins) },
    KVS_RESERVED(1),
    { "tenant_len",        KVS_WIRE_INT, 2, KVS_FAIR_MAX_KEY,
      KVS_REQ(tenant_len) },
    KVS_RESERVED(2),
    { "schema_len",        KVS_WIRE_INT, 4, KVS_ENGINE_MAX_SCHEMA,
      KVS_REQ(schema_len) },
};


/* SUBMIT: one logit_bias entry */
static const kvs_wire_field_t  kvs_wire_submit_bias_f[] = {
    { "logit_bias.token", KVS_WIRE_INT, 4, 0,
      KVS_WIRE_AT(kvs_logit_bias_t, token) },
    { "logit_bias.bias",  KVS_WIRE_FINITE, 4, 0,
      KVS_WIRE_AT(kvs_logit_bias_t, bias) },
};


/* SUBMIT: one pin, checked by kvs_wire_pin_check */
static const kvs_wire_field_t  kvs_wire_submit_pin_f[] = {
    { "pins.n_tokens", KVS_WIRE_INT, 4, 0,
      KVS_WIRE_AT(kvs_engine_pin_t, n_tokens) },
    { "pins.ttl_ms",   KVS_WIRE_INT, 4, 0,
      KVS_WIRE_AT(kvs_engine_pin_t, ttl_ms) },
};


/* STATS_REPLY: one model, kvs_engine_stats_t in its declaration order;
 * its tenants follow */
static const kvs_wire_field_t  kvs_wire_stats_model_f[] = {
    { "index",                KVS_WIRE_INT, 4, 0, KVS_STATS(index) },
    { "steps",                KVS_WIRE_INT, 8, 0, KVS_STATS(st.steps) },
    { "prefill_tokens",       KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.prefill_tokens) },
    { "decode_tokens",        KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.decode_tokens) },
    { "preemptions",          KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.preemptions) },
    { "kv_copies",            KVS_WIRE_INT, 8, 0, KVS_STATS(st.kv_copies) },
    { "step_ns",              KVS_WIRE_INT, 8, 0, KVS_STATS(st.step_ns) },
    { "step_ns_max",          KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.step_ns_max) },
    { "decode_only_steps",    KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.decode_only_steps) },
    { "decode_only_tokens",   KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.decode_only_tokens) },
    { "decode_only_ns",       KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.decode_only_ns) },
    { "batch_seqs",           KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.batch_seqs) },
    { "running",              KVS_WIRE_INT, 4, 0, KVS_STATS(st.running) },
    { "waiting",              KVS_WIRE_INT, 4, 0, KVS_STATS(st.waiting) },
    { "kv_blocks",            KVS_WIRE_INT, 4, 0, KVS_STATS(st.kv_blocks) },
    { "kv_used",              KVS_WIRE_INT, 4, 0, KVS_STATS(st.kv_used) },
    { "kv_used_max",          KVS_WIRE_INT, 4, 0,
      KVS_STATS(st.kv_used_max) },
    { "block_tokens",         KVS_WIRE_INT, 4, 0,
      KVS_STATS(st.block_tokens) },
    { "requests",             KVS_WIRE_INT, 8, 0, KVS_STATS(st.requests) },
    { "finished",             KVS_WIRE_INT, 8, 0, KVS_STATS(st.finished) },
    { "cache_query_tokens",   KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.cache_query_tokens) },
    { "cache_hit_tokens",     KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.cache_hit_tokens) },
    { "cache_evicted_blocks", KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.cache_evicted_blocks) },
    { "cache_blocks",         KVS_WIRE_INT, 4, 0,
      KVS_STATS(st.cache_blocks) },
    { "cache_pinned_blocks",  KVS_WIRE_INT, 4, 0,
      KVS_STATS(st.cache_pinned_blocks) },
    { "epoch",                KVS_WIRE_INT, 8, 0, KVS_STATS(st.epoch) },
    { "iter_tokens[0]",       KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.iter_tokens[0]) },
    { "iter_tokens[1]",       KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.iter_tokens[1]) },
    { "iter_tokens[2]",       KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.iter_tokens[2]) },
    { "iter_tokens[3]",       KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.iter_tokens[3]) },
    { "iter_tokens[4]",       KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.iter_tokens[4]) },
    { "iter_tokens[5]",       KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.iter_tokens[5]) },
    { "iter_tokens[6]",       KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.iter_tokens[6]) },
    { "iter_tokens[7]",       KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.iter_tokens[7]) },
    { "iter_tokens[8]",       KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.iter_tokens[8]) },
    { "iter_tokens[9]",       KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.iter_tokens[9]) },
    { "iter_tokens[10]",      KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.iter_tokens[10]) },
    { "iter_tokens[11]",      KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.iter_tokens[11]) },
    { "iter_tokens[12]",      KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.iter_tokens[12]) },
    { "iter_tokens[13]",      KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.iter_tokens[13]) },
    { "iter_tokens_sum",      KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.iter_tokens_sum) },
    { "pools",                KVS_WIRE_INT, 4, 1, KVS_STATS(st.pools) },
    { "pool_max[0]",          KVS_WIRE_INT, 4, 0,
      KVS_STATS(st.pool_max[0]) },
    { "pool_max[1]",          KVS_WIRE_INT, 4, 0,
      KVS_STATS(st.pool_max[1]) },
    { "pool_used[0]",         KVS_WIRE_INT, 4, 0,
      KVS_STATS(st.pool_used[0]) },
    { "pool_used[1]",         KVS_WIRE_INT, 4, 0,
      KVS_STATS(st.pool_used[1]) },
    { "pool_queued[0]",       KVS_WIRE_INT, 4, 0,
      KVS_STATS(st.pool_queued[0]) },
    { "pool_queued[1]",       KVS_WIRE_INT, 4, 0,
      KVS_STATS(st.pool_queued[1]) },
    { "pool_admitted[0]",     KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.pool_admitted[0]) },
    { "pool_admitted[1]",     KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.pool_admitted[1]) },
    { "pool_waited[0]",       KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.pool_waited[0]) },
    { "pool_waited[1]",       KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.pool_waited[1]) },
    { "pool_wait_ms[0]",      KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.pool_wait_ms[0]) },
    { "pool_wait_ms[1]",      KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.pool_wait_ms[1]) },
    { "pool_refused[0]",      KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.pool_refused[0]) },
    { "pool_refused[1]",      KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.pool_refused[1]) },
    { "cache_tier_hit_tokens", KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.cache_tier_hit_tokens) },
    { "tier.on",              KVS_WIRE_INT, 4, 1, KVS_STATS(st.tier.on) },
    { "tier.direct",          KVS_WIRE_INT, 4, 1,
      KVS_STATS(st.tier.direct) },
    { "tier.slots",           KVS_WIRE_INT, 8, 0, KVS_STATS(st.tier.slots) },
    { "tier.used",            KVS_WIRE_INT, 8, 0, KVS_STATS(st.tier.used) },
    { "tier.slot_bytes",      KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.slot_bytes) },
    { "tier.kept",            KVS_WIRE_INT, 8, 0, KVS_STATS(st.tier.kept) },
    { "tier.spilled",         KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.spilled) },
    { "tier.spill_kept",      KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.spill_kept) },
    { "tier.spill_dropped",   KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.spill_dropped) },
    { "tier.spill_written",   KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.spill_written) },
    { "tier.spill_failed",    KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.spill_failed) },
    { "tier.lookups",         KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.lookups) },
    { "tier.loads",           KVS_WIRE_INT, 8, 0, KVS_STATS(st.tier.loads) },
    { "tier.loaded_blocks",   KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.loaded_blocks) },
    { "tier.load_failed",     KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.load_failed) },
    { "tier.recomputed_blocks", KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.recomputed_blocks) },
    { "tier.load_ns",         KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.load_ns) },
    { "tier.corrupt",         KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.corrupt) },
    { "tier.bytes_written",   KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.bytes_written) },
    { "tier.bytes_read",      KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.bytes_read) },
    /* version 10: LoRA adapters (docs/lora.md) */
    { "lora_adapters",        KVS_WIRE_INT, 4, 0,
      KVS_STATS(st.lora_adapters) },
    { "lora_slots",           KVS_WIRE_INT, 4, 0, KVS_STATS(st.lora_slots) },
    { "lora_resident",        KVS_WIRE_INT, 4, 0,
      KVS_STATS(st.lora_resident) },
    { "lora_parked",          KVS_WIRE_INT, 4, 0,
      KVS_STATS(st.lora_parked) },
    { "lora_loads",           KVS_WIRE_INT, 8, 0, KVS_STATS(st.lora_loads) },
    { "lora_evictions",       KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.lora_evictions) },
    { "lora_waited",          KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.lora_waited) },
    { "lora_wait_ms",         KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.lora_wait_ms) },
    /* version 13: the disk tier's loader (docs/prefix-cache.md) */
    { "tier.load_waits",      KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.load_waits) },
    { "tier.load_wait_ns",    KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.load_wait_ns) },
    { "tier.loading",         KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.loading) },
    { "tier.probes",          KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.probes) },
    /* version 14: the host tier (docs/prefix-cache.md) */
    { "cache_host_hit_tokens", KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.cache_host_hit_tokens) },
    { "tier.host_on",         KVS_WIRE_INT, 4, 1,
      KVS_STATS(st.tier.host_on) },
    { "tier.host_slots",      KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.host_slots) },
    { "tier.host_used",       KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.host_used) },
    { "tier.host_block_bytes", KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.host_block_bytes) },
    { "tier.host_spilled",    KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.host_spilled) },
    { "tier.host_spill_kept", KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.host_spill_kept) },
    { "tier.host_spill_failed", KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.host_spill_failed) },
    { "tier.host_evicted",    KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.host_evicted) },
    { "tier.host_to_disk",    KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.host_to_disk) },
    { "tier.host_hits",       KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.host_hits) },
    { "tier.host_loads",      KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.host_loads) },
    { "tier.host_loaded_blocks", KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.host_loaded_blocks) },
    { "tier.host_load_ns",    KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.host_load_ns) },
    { "tier.host_bytes_in",   KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.host_bytes_in) },
    { "tier.host_bytes_out",  KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.host_bytes_out) },
    /* and the LoRA loads' times (docs/lora.md, "Paging") */
    { "lora_load_ns",         KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.lora_load_ns) },
    { "lora_install_ns",      KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.lora_install_ns) },
    { "lora_install_max_ns",  KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.lora_install_max_ns) },
    /* the host tier's copies off the step (version 15) */
    { "tier.host_async",      KVS_WIRE_INT, 4, 1,
      KVS_STATS(st.tier.host_async) },
    { "tier.host_copies",     KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.host_copies) },
    { "tier.host_copy_waits", KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.host_copy_waits) },
    { "tier.host_copy_wait_ns", KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.host_copy_wait_ns) },
    { "tier.host_copy_full",  KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.host_copy_full) },
    { "tier.host_copy_failed", KVS_WIRE_INT, 8, 0,
      KVS_STATS(st.tier.host_copy_failed) },
};

/* the table above writes every bucket */
typedef char kvs_wire_iter_check_t[KVS_ENGINE_ITER_BOUNDS == 13 ? 1 : -1];


/* STATS_REPLY: a tenant's counts, after its key (none for the rest) */
static const kvs_wire_field_t  kvs_wire_stats_tenant_f[] = {
    { "tenant.prefill",   KVS_WIRE_INT, 8, 0, KVS_TENANT(prefill) },
    { "tenant.decode",    KVS_WIRE_INT, 8, 0, KVS_TENANT(decode) },
    { "tenant.kv_blocks", KVS_WIRE_INT, 4, 0, KVS_TENANT(kv_blocks) },
    { "tenant.n_seqs",    KVS_WIRE_INT, 4, 0, KVS_TENANT(n_seqs) },
};


/* INDEX: everything before the names (KVS_WIRE_INDEX_FIXED bytes);
 * kvs_wire.c checks the values as a whole */
static const kvs_wire_field_t  kvs_wire_index_head_f[] = {
    { "model",        KVS_WIRE_INT, 4, 0, KVS_INDEX(model) },
    { "incarnation",  KVS_WIRE_INT, 8, 0, KVS_INDEX(incarnation) },
    { "epoch",        KVS_WIRE_INT, 8, 0, KVS_INDEX(epoch) },
    { "block_tokens", KVS_WIRE_INT, 4, 0, KVS_INDEX(block_tokens) },
    { "running",      KVS_WIRE_INT, 4, 0, KVS_INDEX(running) },
    { "waiting",      KVS_WIRE_INT, 4, 0, KVS_INDEX(waiting) },
    { "free_blocks",  KVS_WIRE_INT, 4, 0, KVS_INDEX(free_blocks) },
    { "resync",       KVS_WIRE_INT, 4, 0, KVS_INDEX(resync) },
    { "n_add",        KVS_WIRE_INT, 4, 0, KVS_INDEX(n_add) },
    { "n_del",        KVS_WIRE_INT, 4, 0, KVS_INDEX(n_del) },
    { "long_min",     KVS_WIRE_INT, 4, 0, KVS_INDEX(long_min) },
    { "long_room",    KVS_WIRE_INT, 4, 0, KVS_INDEX(long_room) },
    { "long_slots",   KVS_WIRE_INT, 4, 0, KVS_INDEX(long_slots) },
    { "n_dadd",       KVS_WIRE_INT, 4, 0, KVS_INDEX(n_dadd) },
    { "n_ddel",       KVS_WIRE_INT, 4, 0, KVS_INDEX(n_ddel) },
    { "tier_weight",  KVS_WIRE_INT, 4, 0, KVS_INDEX(tier_weight) },
    { "n_hadd",       KVS_WIRE_INT, 4, 0, KVS_INDEX(n_hadd) },
    { "n_hdel",       KVS_WIRE_INT, 4, 0, KVS_INDEX(n_hdel) },
    { "host_weight",  KVS_WIRE_INT, 4, 0, KVS_INDEX(host_weight) },
};


#define KVS_FIELDS(t)  { t, sizeof(t) / sizeof(t[0]) }

const kvs_wire_fields_t  kvs_wire_hello_model =
    KVS_FIELDS(kvs_wire_hello_model_f);
const kvs_wire_fields_t  kvs_wire_submit_req =
    KVS_FIELDS(kvs_wire_submit_req_f);
const kvs_wire_fields_t  kvs_wire_submit_bias =
    KVS_FIELDS(kvs_wire_submit_bias_f);
const kvs_wire_fields_t  kvs_wire_submit_pin =
    KVS_FIELDS(kvs_wire_submit_pin_f);
const kvs_wire_fields_t  kvs_wire_stats_model =
    KVS_FIELDS(kvs_wire_stats_model_f);
const kvs_wire_fields_t  kvs_wire_stats_tenant =
    KVS_FIELDS(kvs_wire_stats_tenant_f);
const kvs_wire_fields_t  kvs_wire_index_head =
    KVS_FIELDS(kvs_wire_index_head_f);


size_t
kvs_wire_fields_size(const kvs_wire_fields_t *fs)
{
    size_t  i, n;

    n = 0;

    for (i = 0; i < fs->n; i++) {
        n += fs->f[i].wire;
    }

    return n;
}


uint8_t *
kvs_wire_put_fields(uint8_t *p, const kvs_wire_fields_t *fs,
    const void *base)
{
    size_t                   i;
    uint64_t                 v;
    const uint8_t           *at;
    const kvs_wire_field_t  *fd;

    for (i = 0; i < fs->n; i++) {
        fd = &fs->f[i];
        at = (const uint8_t *) base + fd->off;

        v = fd->kind == KVS_WIRE_ZERO ? 0 : kvs_wire_load(at, fd->mem);

        if (fd->kind == KVS_WIRE_FLAG) {
            v = v != 0;
        }

        switch (fd->wire) {

        case 1:
            *p++ = (uint8_t) v;
            break;

        case 2:
            p = kvs_le_put16(p, (uint16_t) v);
            break;

        case 4:
            p = kvs_le_put32(p, (uint32_t) v);
            break;

        default:
            p = kvs_le_put64(p, v);
        }
    }

    return p;
}


int
kvs_wire_get_fields(kvs_wire_rd_t *rd, const kvs_wire_fields_t *fs,
    void *base)
{
    size_t                   i;
    uint64_t                 v;
    uint8_t                 *at;
    const kvs_wire_field_t  *fd;

    for (i = 0; i < fs->n; i++) {
        fd = &fs->f[i];
        at = (uint8_t *) base + fd->off;

        switch (fd->kind) {

        case KVS_WIRE_FLAG:
            if (kvs_wire_flag(rd, fd->name, (int *) at) != KVS_OK) {
                return KVS_EFORMAT;
            }
            break;

        case KVS_WIRE_FINITE:
            if (kvs_wire_finite(rd, fd->name, (float *) at) != KVS_OK) {
                return KVS_EFORMAT;
            }
            break;

        default:
            if (kvs_wire_int(rd, fd->name, fd->wire, &v, 8) != KVS_OK) {
                return KVS_EFORMAT;
            }

            if (fd->kind == KVS_WIRE_ZERO && v != 0) {
                return kvs_err_set(rd->err, KVS_EFORMAT, "%s: %s: must be 0 "
                                   "(got %llu)", rd->what, fd->name,
                                   (unsigned long long) v);
            }

            if (fd->max != 0 && v > fd->max) {
                return kvs_err_set(rd->err, KVS_EFORMAT, "%s: %s: %llu "
                                   "exceeds %u", rd->what, fd->name,
                                   (unsigned long long) v, fd->max);
            }

            if (fd->kind == KVS_WIRE_INT) {
                kvs_wire_store(at, fd->mem, v);
            }
        }
    }

    return KVS_OK;
}


/* --- SUBMIT's repeated entries ------------------------------------------- */

int
kvs_wire_stop_check(size_t i, size_t len, int code, kvs_err_t *err)
{
    if (len > KVS_WIRE_MAX_STOP_LEN) {
        return kvs_err_set(err, code, "SUBMIT: stop[%zu]: %zu bytes exceed "
                           "%d", i, len, KVS_WIRE_MAX_STOP_LEN);
    }

    return KVS_OK;
}


int
kvs_wire_pin_check(const kvs_engine_pin_t *pin, size_t i, uint32_t n_prompt,
    int code, kvs_err_t *err)
{
    if (pin->n_tokens == 0 || pin->n_tokens > n_prompt) {
        return kvs_err_set(err, code, "SUBMIT: pins[%zu].n_tokens: %u is not "
                           "in 1..%u", i, pin->n_tokens, n_prompt);
    }

    if (pin->ttl_ms == 0 || pin->ttl_ms > KVS_ENGINE_MAX_PIN_TTL) {
        return kvs_err_set(err, code, "SUBMIT: pins[%zu].ttl_ms: %u is not "
                           "in 1..%d", i, pin->ttl_ms, KVS_ENGINE_MAX_PIN_TTL);
    }

    return KVS_OK;
}
