/*
 * kvs_batch: one forward step's input, the same for every backend: the
 * tokens of many sequences, prefill chunks and decodes mixed, each naming
 * the block table its K/V is read from and written to.
 *
 * Ownership: a batch borrows its entries and their tables; the caller
 * (the scheduler) keeps them alive for the call.
 */

#ifndef KVS_BATCH_H
#define KVS_BATCH_H

#include <stdint.h>

#include "kvs_kv_table.h"

/* One token of a batch. */
typedef struct {
    int32_t                 token;    /* [0, n_vocab) */
    uint32_t                pos;      /* its position; < table->n_tokens */
    const kvs_kv_table_t   *table;    /* its sequence's block table */
    int                     want_logits;
} kvs_batch_tok_t;

/*
 * A step's tokens.  Tokens of one sequence appear in position order (a
 * prefill chunk is consecutive positions); a token attends to positions
 * 0..pos of its table: those before this batch's must already be in the
 * cache.  Two entries of one sequence never share a position.
 */
typedef struct {
    const kvs_batch_tok_t  *toks;     /* [n] */
    uint32_t                n;
} kvs_batch_t;

#endif /* KVS_BATCH_H */
