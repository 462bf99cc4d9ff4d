/*
 * kvs_ggml_type: block and byte sizes of ggml tensor types.
 *
 * The sizes follow from each type's block layout (for example Q8_0: one
 * f16 scale plus 32 int8 = 34 bytes per 32 elements; Q8_1: two f32 plus
 * 32 int8 = 40).  t/unit/test_gguf_python.py checks the whole table
 * against the Python `gguf` package's GGML_QUANT_SIZES.
 */

#include <stddef.h>
#include <strings.h>

#include "kvs_ggml_type.h"


static const kvs_ggml_type_info_t  kvs_ggml_types[KVS_GGML_TYPE_END] = {
    [KVS_GGML_F32]     = { "F32",     1,   4 },
    [KVS_GGML_F16]     = { "F16",     1,   2 },
    [KVS_GGML_Q4_0]    = { "Q4_0",    32,  18 },
    [KVS_GGML_Q4_1]    = { "Q4_1",    32,  20 },
    [KVS_GGML_Q5_0]    = { "Q5_0",    32,  22 },
    [KVS_GGML_Q5_1]    = { "Q5_1",    32,  24 },
    [KVS_GGML_Q8_0]    = { "Q8_0",    32,  34 },
    [KVS_GGML_Q8_1]    = { "Q8_1",    32,  40 },
    [KVS_GGML_Q2_K]    = { "Q2_K",    256, 84 },
    [KVS_GGML_Q3_K]    = { "Q3_K",    256, 110 },
    [KVS_GGML_Q4_K]    = { "Q4_K",    256, 144 },
    [KVS_GGML_Q5_K]    = { "Q5_K",    256, 176 },
    [KVS_GGML_Q6_K]    = { "Q6_K",    256, 210 },
    [KVS_GGML_Q8_K]    = { "Q8_K",    256, 292 },
    [KVS_GGML_IQ2_XXS] = { "IQ2_XXS", 256, 66 },
    [KVS_GGML_IQ2_XS]  = { "IQ2_XS",  256, 74 },
    [KVS_GGML_IQ3_XXS] = { "IQ3_XXS", 256, 98 },
    [KVS_GGML_IQ1_S]   = { "IQ1_S",   256, 50 },
    [KVS_GGML_IQ4_NL]  = { "IQ4_NL",  32,  18 },
    [KVS_GGML_IQ3_S]   = { "IQ3_S",   256, 110 },
    [KVS_GGML_IQ2_S]   = { "IQ2_S",   256, 82 },
    [KVS_GGML_IQ4_XS]  = { "IQ4_XS",  256, 136 },
    [KVS_GGML_I8]      = { "I8",      1,   1 },
    [KVS_GGML_I16]     = { "I16",     1,   2 },
    [KVS_GGML_I32]     = { "I32",     1,   4 },
    [KVS_GGML_I64]     = { "I64",     1,   8 },
    [KVS_GGML_F64]     = { "F64",     1,   8 },
    [KVS_GGML_IQ1_M]   = { "IQ1_M",   256, 56 },
    [KVS_GGML_BF16]    = { "BF16",    1,   2 },
    [KVS_GGML_TQ1_0]   = { "TQ1_0",   256, 54 },
    [KVS_GGML_TQ2_0]   = { "TQ2_0",   256, 66 },
    [KVS_GGML_MXFP4]   = { "MXFP4",   32,  17 },
    [KVS_GGML_NVFP4]   = { "NVFP4",   64,  36 },
    [KVS_GGML_Q1_0]    = { "Q1_0",    128, 18 },
};


const kvs_ggml_type_info_t *
kvs_ggml_type_info(uint32_t type)
{
    if (type >= KVS_GGML_TYPE_END || kvs_ggml_types[type].name == NULL) {
        return NULL;
    }

    return &kvs_ggml_types[type];
}


const char *
kvs_ggml_type_name(uint32_t type)
{
    const kvs_ggml_type_info_t  *ti;

    ti = kvs_ggml_type_info(type);

    return ti ? ti->name : "?";
}


int
kvs_ggml_type_from_name(const char *name)
{
    int  t;

    for (t = 0; t < KVS_GGML_TYPE_END; t++) {
        if (kvs_ggml_types[t].name != NULL
            && strcasecmp(kvs_ggml_types[t].name, name) == 0)
        {
            return t;
        }
    }

    return -1;
}


int
kvs_ggml_nbytes(uint32_t type, uint64_t ne0, uint64_t nelem,
    uint64_t *nbytes, kvs_err_t *err)
{
    uint64_t                     nblocks;
    const kvs_ggml_type_info_t  *ti;

    ti = kvs_ggml_type_info(type);
    if (ti == NULL) {
        return kvs_err_set(err, KVS_EUNSUPPORTED,
                           "unknown ggml tensor type %u", type);
    }

    if (ne0 % ti->block != 0) {
        return kvs_err_set(err, KVS_EFORMAT,
                           "row of %llu elements is not a multiple of the "
                           "%s block size %u",
                           (unsigned long long) ne0, ti->name, ti->block);
    }

    nblocks = nelem / ti->block;
    if (nblocks > UINT64_MAX / ti->size) {
        return kvs_err_set(err, KVS_ERANGE, "tensor byte size overflows");
    }

    *nbytes = nblocks * ti->size;

    return KVS_OK;
}
