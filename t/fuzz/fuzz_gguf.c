/*
 * fuzz_gguf: libFuzzer target for the GGUF reader, hyper-parameters,
 * the tokenizer vocabulary loader and the LoRA adapter reader (`make
 * fuzz`).  Any input must give either an error or a file whose every
 * value, array element and tensor byte can be walked in bounds, a
 * vocabulary that loads whole or not at all, and an adapter whose every
 * A and B value can be read.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/kvs_gguf.h"
#include "model/kvs_hparams.h"
#include "model/kvs_lora.h"
#include "model/kvs_model.h"
#include "tokenizer/kvs_vocab.h"


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    volatile unsigned         sink;
    volatile float            fsink;
    uint8_t                  *copy;
    uint64_t                  i;
    kvs_err_t                 err;
    kvs_gguf_t               *g;
    kvs_vocab_t              *v;
    kvs_lora_t               *l;
    kvs_hparams_t             hp;
    kvs_gguf_str_t            s;
    kvs_gguf_arr_t            sub;
    kvs_gguf_iter_t           it;
    const kvs_gguf_kv_t      *kv;
    const kvs_gguf_tensor_t  *t;

    /* an exact-size heap copy, so ASan sees any read past the end */
    copy = malloc(size ? size : 1);
    if (copy == NULL) {
        return 0;
    }
    memcpy(copy, data, size);

    if (kvs_gguf_open_mem(&g, copy, size, &err) == KVS_OK) {
        sink = 0;

        for (i = 0; i < kvs_gguf_n_kv(g); i++) {
            kv = kvs_gguf_kv_at(g, i);
            if (kv->type != KVS_GGUF_ARR) {
                continue;
            }
            kvs_gguf_iter_init(&it, &kv->arr);
            while (kvs_gguf_iter_str(&it, &s)) {
                sink += s.len ? (uint8_t) s.ptr[s.len - 1] : 0;
            }
            while (kvs_gguf_iter_arr(&it, &sub)) {
                sink += (unsigned) sub.n;
            }
        }

        for (i = 0; i < kvs_gguf_n_tensors(g); i++) {
            t = kvs_gguf_tensor_at(g, i);
            if (t->nbytes) {
                sink += ((const uint8_t *) t->data)[t->nbytes - 1];
            }
        }

        if (kvs_hparams_read(&hp, g, &err) == KVS_OK) {
            sink += (unsigned) kvs_hparams_kv_bytes_per_token(&hp, 2);
            (void) kvs_model_check_tensors(g, &hp, &err);
        }

        /* a vocabulary either loads whole or is refused */
        if (kvs_vocab_load(&v, g, &err) == KVS_OK) {
            sink += v->n_tokens;
            kvs_vocab_free(v);
        }

        (void) sink;
        kvs_gguf_close(g);
    }

    /* an adapter, on its own: refused, or every value readable */
    if (kvs_lora_open_mem(&l, copy, size, NULL, &err) == KVS_OK) {
        fsink = 0.0f;
        for (i = 0; i < l->n_mat; i++) {
            fsink += l->mat[i].a[(uint64_t) l->mat[i].rank
                                 * l->mat[i].n_in - 1];
            fsink += l->mat[i].b[l->mat[i].n_out * l->mat[i].rank - 1];
        }
        (void) fsink;
        kvs_lora_close(l);
    }

    free(copy);

    return 0;
}
