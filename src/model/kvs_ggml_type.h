/*
 * kvs_ggml_type: the tensor element types a GGUF file may declare.
 *
 * Ids are ggml's `enum ggml_type` values as stored in GGUF tensor infos.
 * Every id we recognise has its block size (elements per block) and type
 * size (bytes per block), so the byte size of any tensor can be checked
 * against the file, whether or not we can compute with that type.  Ids that
 * ggml retired (4, 5, 31..33, 36..38) and ids past the table are unknown:
 * callers must reject them, never guess a size.
 */

#ifndef KVS_GGML_TYPE_H
#define KVS_GGML_TYPE_H

#include <stdint.h>

#include "base/kvs_err.h"

typedef enum {
    KVS_GGML_F32     = 0,
    KVS_GGML_F16     = 1,
    KVS_GGML_Q4_0    = 2,
    KVS_GGML_Q4_1    = 3,
    KVS_GGML_Q5_0    = 6,
    KVS_GGML_Q5_1    = 7,
    KVS_GGML_Q8_0    = 8,
    KVS_GGML_Q8_1    = 9,
    KVS_GGML_Q2_K    = 10,
    KVS_GGML_Q3_K    = 11,
    KVS_GGML_Q4_K    = 12,
    KVS_GGML_Q5_K    = 13,
    KVS_GGML_Q6_K    = 14,
    KVS_GGML_Q8_K    = 15,
    KVS_GGML_IQ2_XXS = 16,
    KVS_GGML_IQ2_XS  = 17,
    KVS_GGML_IQ3_XXS = 18,
    KVS_GGML_IQ1_S   = 19,
    KVS_GGML_IQ4_NL  = 20,
    KVS_GGML_IQ3_S   = 21,
    KVS_GGML_IQ2_S   = 22,
    KVS_GGML_IQ4_XS  = 23,
    KVS_GGML_I8      = 24,
    KVS_GGML_I16     = 25,
    KVS_GGML_I32     = 26,
    KVS_GGML_I64     = 27,
    KVS_GGML_F64     = 28,
    KVS_GGML_IQ1_M   = 29,
    KVS_GGML_BF16    = 30,
    KVS_GGML_TQ1_0   = 34,
    KVS_GGML_TQ2_0   = 35,
    KVS_GGML_MXFP4   = 39,
    KVS_GGML_NVFP4   = 40,
    KVS_GGML_Q1_0    = 41,
    KVS_GGML_TYPE_END = 42            /* one past the largest id we know */
} kvs_ggml_type_t;

typedef struct {
    const char  *name;                /* "F32", "Q8_0", ...; NULL: unknown */
    uint32_t     block;               /* elements per block */
    uint32_t     size;                /* bytes per block */
} kvs_ggml_type_info_t;

/* NULL for an id we do not recognise. */
const kvs_ggml_type_info_t *kvs_ggml_type_info(uint32_t type);

const char *kvs_ggml_type_name(uint32_t type);    /* "?" when unknown */

/* Type id from a name such as "f16" or "Q8_0" (any case); -1 if none. */
int kvs_ggml_type_from_name(const char *name);

/*
 * Bytes of a tensor of `type` whose innermost dimension is ne0 and whose
 * total element count is nelem.  Fails (and names the reason) for an
 * unknown type, for ne0 not a multiple of the block size, and on overflow.
 */
int kvs_ggml_nbytes(uint32_t type, uint64_t ne0, uint64_t nelem,
    uint64_t *nbytes, kvs_err_t *err);

#endif /* KVS_GGML_TYPE_H */
