/*
 * fuzz_wire: libFuzzer target for the engine process's protocol decoder
 * (`make fuzz`).  The input is a byte stream as a peer could send it:
 * frames are cut from it one after the other as the server does, each
 * decoded by its type.  Any input must give either errors or decoded
 * messages, never a memory error; and every frame that decodes must
 * encode back to exactly its own bytes (the decoders accept nothing the
 * encoders could not have written, and lose nothing).
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/kvs_wire.h"


static void
check_same(const kvs_buf_t *b, const uint8_t *f, size_t n)
{
    if (b->len != n || memcmp(b->data, f, n) != 0) {
        __builtin_trap();
    }
}


static void
one(const uint8_t *f, const kvs_wire_hdr_t *h, kvs_wire_submit_t *sub,
    kvs_wire_out_t *out, kvs_wire_hello_t *hello, kvs_wire_stats_t *st)
{
    int                 rc;
    uint64_t            u;
    kvs_buf_t           b;
    kvs_err_t           err;
    kvs_wire_refused_t  rf;
    kvs_wire_index_t    ix;

    static kvs_wire_lora_t  lora;     /* 6 KiB: off the stack */

    memset(&b, 0, sizeof(b));
    rc = KVS_EFORMAT;

    switch (h->type) {

    case KVS_WIRE_HELLO:
        if (kvs_wire_dec_hello(f, h->len, hello, &err) == KVS_OK) {
            rc = kvs_wire_enc_hello(&b, hello, &err);
        }
        break;

    case KVS_WIRE_SUBMIT:
        if (kvs_wire_dec_submit(f, h->len, sub, &err) == KVS_OK) {
            rc = kvs_wire_enc_submit(&b, h->id, sub->model, &sub->req,
                                     sub->submit_ns, &err);
        }
        break;

    case KVS_WIRE_REFUSED:
        if (kvs_wire_dec_refused(f, h->len, &rf, &err) == KVS_OK) {
            rc = kvs_wire_enc_refused(&b, h->id, rf.code, rf.msg, &err);
        }
        break;

    case KVS_WIRE_OUT:
        if (kvs_wire_dec_out(f, h->len, out, &err) == KVS_OK) {
            rc = kvs_wire_enc_out(&b, h->id, out->choice, &out->out,
                                  &out->t, &err);
        }
        break;

    case KVS_WIRE_PONG:
        if (kvs_wire_dec_pong(f, h->len, &u, &err) == KVS_OK) {
            rc = kvs_wire_enc_pong(&b, h->id, u, &err);
        }
        break;

    case KVS_WIRE_INDEX:
        if (kvs_wire_dec_index(f, h->len, &ix, &err) == KVS_OK) {
            rc = kvs_wire_enc_index(&b, h->id, &ix, &err);
        }
        break;

    case KVS_WIRE_LORA:
        if (kvs_wire_dec_lora(f, h->len, &lora, &err) == KVS_OK) {
            rc = kvs_wire_enc_lora(&b, &lora, &err);
        }
        break;

    case KVS_WIRE_STATS_REPLY:
        if (kvs_wire_dec_stats(f, h->len, st, &err) == KVS_OK) {
            rc = kvs_wire_enc_stats(&b, h->id, st, &err);
        }
        break;

    default:
        if (kvs_wire_dec_empty(f, h->len, &err) == KVS_OK) {
            rc = kvs_wire_enc_empty(&b, h->type, h->id, &err);
        }
        break;
    }

    if (rc == KVS_OK) {
        /* a HELLO's id is not carried (always 0 when encoded) */
        if (h->type != KVS_WIRE_HELLO || h->id == 0) {
            check_same(&b, f, h->len);
        }

    } else if (b.len != 0) {
        __builtin_trap();             /* a failed encode appended */
    }

    free(b.data);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t              off;
    uint8_t            *copy;
    kvs_err_t           err;
    kvs_wire_hdr_t      h;
    kvs_wire_out_t      out;
    kvs_wire_stats_t   *st;
    kvs_wire_hello_t   *hello;
    kvs_wire_submit_t   sub;

    /* an exact-size heap copy, so ASan sees any read past the end */
    copy = malloc(size ? size : 1);
    st = malloc(sizeof(kvs_wire_stats_t));
    hello = malloc(sizeof(kvs_wire_hello_t));

    if (copy == NULL || st == NULL || hello == NULL) {
        free(copy);
        free(st);
        free(hello);
        return 0;
    }

    memcpy(copy, data, size);
    memset(&sub, 0, sizeof(sub));
    memset(&out, 0, sizeof(out));

    /* the decoded structs are reused across frames, as the server does */
    for (off = 0; off < size; off += h.len) {
        if (kvs_wire_frame(copy + off, size - off, &h, &err) != KVS_OK) {
            break;
        }

        one(copy + off, &h, &sub, &out, hello, st);
    }

    kvs_wire_submit_free(&sub);
    free(out.out.tokens);
    free(out.out.lp);
    free(out.out.text.data);
    free(hello);
    free(st);
    free(copy);

    return 0;
}
