/*
 * kvs_quantize: a GGUF model rewritten with its weights quantized by one
 * of the usual mixes (`kvserve quantize`), and the mixes themselves.
 *
 * A mix says which type each weight gets, as llama.cpp's mixes of the
 * same names do (docs/quantization.md, "## Mixes"): a base type for most
 * matrices, its own type for output.weight, and per-layer rules for
 * attn_v, attn_output and ffn_down.  1-D tensors (norms, biases) are
 * copied as they are.  A matrix whose rows are not a multiple of its
 * type's block falls back to a type whose block fits (K-quants to the
 * 32-element types, then F16), as llama.cpp does.
 *
 * Every conversion goes through kvs_quant's table: the source rows are
 * dequantized by it and quantized by it, so a type the table gains is a
 * type the mixes may use with no change here; a mix naming a type the
 * table cannot make fails before anything is written.
 */

#ifndef KVS_QUANTIZE_H
#define KVS_QUANTIZE_H

#include <stdint.h>

#include "base/kvs_err.h"
#include "model/kvs_gguf.h"

/* A condition on a layer i of n (llama.cpp's names in the comments). */
typedef enum {
    KVS_MIX_NEVER = 0,
    KVS_MIX_ALL,                      /* every layer */
    KVS_MIX_MORE_BITS,                /* use_more_bits(i, n): the first
                                         and last eighth, and every third
                                         layer between */
    KVS_MIX_FIRST_8TH,                /* i < n / 8 */
    KVS_MIX_FIRST_16TH,               /* i < n / 16 */
    KVS_MIX_FIRST_2,                  /* i < 2 */
    KVS_MIX_FIRST_4,                  /* i < 4 */
    KVS_MIX_GQA4                      /* n_head / n_head_kv >= 4 */
} kvs_mix_when_t;

#define KVS_MIX_BASE  UINT32_MAX      /* "the mix's base type" */

typedef struct {
    kvs_mix_when_t  when;
    uint32_t        type;             /* when it holds */
    uint32_t        other;            /* when not (KVS_MIX_BASE) */
} kvs_mix_rule_t;

typedef struct {
    const char      *name;            /* "q4_k_m", as --type takes it */
    uint32_t         ftype;           /* llama.cpp's LLAMA_FTYPE_MOSTLY_* */
    uint32_t         base;            /* every other matrix, token_embd */
    uint32_t         output;          /* output.weight */
    kvs_mix_rule_t   attn_v;
    kvs_mix_rule_t   attn_output;
    kvs_mix_rule_t   ffn_down;
} kvs_quant_mix_t;

/* The mix of that name (case-insensitive), or NULL. */
const kvs_quant_mix_t *kvs_quant_mix(const char *name);

/* Every mix's name, ", "-separated, into buf[size]. */
void kvs_quant_mix_names(char *buf, size_t size);

/* The llama.cpp file type of a model all of whose matrices are `type`
 * (gen-model --dtype): the first mix with that base, 0 (all F32) for an
 * unquantized type we know no mix for. */
uint32_t kvs_quant_mix_ftype(uint32_t type);

/*
 * The type tensor `name` ([ne0] rows, n_dims dimensions) gets in `mix`,
 * for a model of n_layer layers and a GQA ratio of n_gqa, tied when it
 * has no output.weight (token_embd then takes the output's type): the
 * mix's rule, then the block fallback.  1-D tensors keep `cur`.
 */
uint32_t kvs_quant_mix_type(const kvs_quant_mix_t *mix, const char *name,
    uint32_t n_dims, uint64_t ne0, uint32_t cur, uint32_t n_layer,
    uint32_t n_gqa, int tied);

/* in (a GGUF model) written to out with mix's types; the metadata is
 * copied but for general.file_type and general.quantization_version. */
int kvs_quantize_file(const char *in, const char *out,
    const kvs_quant_mix_t *mix, kvs_err_t *err);

/* The same on n_threads threads (1 .. KVS_THREADS_MAX), to the same
 * bytes. */
int kvs_quantize_file_threads(const char *in, const char *out,
    const kvs_quant_mix_t *mix, unsigned n_threads, kvs_err_t *err);

#endif /* KVS_QUANTIZE_H */
