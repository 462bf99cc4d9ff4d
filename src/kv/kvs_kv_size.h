/*
 * kvs_kv_size: how much memory the KV cache gets, and how many blocks
 * that is for a model.
 *
 * The operator gives either a size ("512m", "2g", "1048576") or a
 * fraction of the memory that is available ("0.5"); the CPU backend's
 * available memory is MemAvailable from /proc/meminfo, the CUDA backend
 * passes the device's free memory instead.  The plan turns that budget
 * into whole blocks of block_tokens tokens for a model's bytes per token;
 * the bytes it reports are the blocks' bytes, never more than the budget.
 *
 * Invariants: a parsed spec has exactly one of bytes (> 0) and fraction
 * (in (0, 1]) set; a plan has n_blocks >= 1 and bytes = n_blocks x
 * block_tokens x kv_bytes_per_token <= its budget.  Nothing here
 * allocates; only kvs_mem_available does I/O (one read of /proc/meminfo).
 */

#ifndef KVS_KV_SIZE_H
#define KVS_KV_SIZE_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"

#define KVS_KV_CACHE_DEFAULT  "0.5"   /* of the memory available */

typedef struct {
    uint64_t  bytes;                  /* an absolute size, or 0 */
    double    fraction;               /* of available memory, or 0 */
} kvs_kv_cache_spec_t;

typedef struct {
    uint64_t  budget;                 /* bytes the spec grants */
    uint64_t  bytes;                  /* n_blocks x block_bytes <= budget */
    uint64_t  tokens;                 /* n_blocks x block_tokens */
    uint64_t  kv_bytes_per_token;
    uint32_t  n_blocks;               /* 1..KVS_KV_MAX_BLOCKS */
    uint32_t  block_tokens;
    uint32_t  full_ctx_blocks;        /* blocks one n_ctx sequence needs */
    int       full_ctx_fits;          /* n_blocks >= full_ctx_blocks */
} kvs_kv_cache_plan_t;

/*
 * Parses str[0..len): decimal bytes with an optional k, m or g suffix
 * (case-insensitive, powers of 1024, as nginx sizes are), or a fraction
 * written with a decimal point ("0.9", "1.0", ".25") in (0, 1].  Errors
 * (KVS_EINVAL, KVS_ERANGE for overflow) quote the value first:
 * "\"1.5\": fraction must be in (0, 1]".  *spec is zeroed on failure.
 */
int kvs_kv_cache_parse(kvs_kv_cache_spec_t *spec, const char *str,
    size_t len, kvs_err_t *err);

/*
 * The MemAvailable line of /proc/meminfo text, in bytes.  KVS_ENOTFOUND
 * when the line is absent (kernels before 3.14), KVS_EFORMAT when it is
 * not "<number> kB", KVS_ERANGE when it overflows.
 */
int kvs_meminfo_parse(const char *text, size_t len, uint64_t *bytes,
    kvs_err_t *err);

/* MemAvailable of this host, from /proc/meminfo; KVS_EIO naming the file
 * when it cannot be read, else as kvs_meminfo_parse(). */
int kvs_mem_available(uint64_t *bytes, kvs_err_t *err);

/*
 * The budget a spec grants out of avail_bytes: the spec's bytes, or
 * floor(fraction x avail_bytes).
 */
uint64_t kvs_kv_cache_budget(const kvs_kv_cache_spec_t *spec,
    uint64_t avail_bytes);

/*
 * Sizes the cache: as many blocks of block_tokens tokens of
 * kv_bytes_per_token bytes as the budget holds, capped at
 * KVS_KV_MAX_BLOCKS; full_ctx_fits says whether one sequence of n_ctx
 * tokens fits, for the caller to warn.  KVS_EINVAL for a bad spec or
 * zero sizes, KVS_ERANGE when not even one block fits; *plan is zeroed
 * on failure.
 */
int kvs_kv_cache_plan(kvs_kv_cache_plan_t *plan,
    const kvs_kv_cache_spec_t *spec, uint64_t avail_bytes,
    uint64_t kv_bytes_per_token, uint32_t block_tokens, uint32_t n_ctx,
    kvs_err_t *err);

/*
 * Writes bytes for people into buf: "512 B" below 1 KiB, else one decimal
 * in the largest binary unit that keeps the number >= 1 ("8.0 KiB",
 * "1.5 GiB"), rounded to nearest; returns buf.
 */
#define KVS_SIZE_FORMAT_LEN  32     /* enough for any uint64_t */

char *kvs_size_format(char *buf, size_t size, uint64_t bytes);

#endif /* KVS_KV_SIZE_H */
