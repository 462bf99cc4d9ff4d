/*
 * kvs_wire: the messages between nginx workers and the engine process
 * (docs/engine-process.md), as pure functions on buffers: no I/O, no
 * clock, no allocation beyond the caller's buffers and the decoded
 * structs' own arrays.
 *
 * A frame is a 16-byte header, all little-endian,
 *
 *     u32 len       the whole frame, header included, in
 *                   [KVS_WIRE_HDR, KVS_WIRE_MAX_FRAME]
 *     u16 type      KVS_WIRE_HELLO ...
 *     u16 version   KVS_WIRE_VERSION
 *     u64 id        the request id (SUBMIT, CANCEL, REFUSED, OUT) or a
 *                   nonce echoed by the reply (PING, STATS); 0 in HELLO
 *                   and DRAIN
 *
 * followed by the body of its type.  Every decoder checks every field
 * before trusting it (lengths within the frame, counts times sizes
 * without overflow, strings within their limits, enum and flag values,
 * floats finite) and consumes the body exactly; failures are KVS_EFORMAT
 * with the message type and field named.  A buffer holding only part of
 * a frame gives KVS_WIRE_AGAIN and consumes nothing.  What the decoders
 * accept, the encoders can produce, and the reverse: the encoders refuse
 * (KVS_ERANGE, field named) what a decoder would refuse, and leave the
 * buffer as it was on any failure.
 *
 * Semantic checks (token ids against the vocabulary, sampling ranges,
 * prompt length against the context) belong to kvs_engine_submit, whose
 * refusal travels back as REFUSED.
 *
 * HELLO's body layout is frozen across versions up to its version field,
 * so a peer can always tell which version it is talking to.
 */

#ifndef KVS_WIRE_H
#define KVS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_buf.h"
#include "base/kvs_err.h"
#include "engine/kvs_engine.h"

#define KVS_WIRE_VERSION      16       /* 2: prefix cache fields, tenant;
                                         3: SUBSCRIBE, INDEX; 4: HELLO's
                                         backend and memory; 5: SUBMIT's
                                         output constraint; 6: STATS's
                                         iteration token buckets; 7:
                                         STATS's KV pools, OUT's
                                         retry_after; 8: OUT's
                                         kv_block_us, n_cached_tier;
                                         STATS's disk tier; 9: INDEX's
                                         long pool room; 10: STATS's
                                         LoRA adapters; 11: INDEX's disk
                                         tier names and weight; 12: LORA;
                                         13: STATS's disk tier loader;
                                         14: STATS's host tier and LoRA
                                         load times, OUT's n_cached_host;
                                         15: INDEX's host tier names and
                                         weight, STATS's host tier copies
                                         off the step; 16: OUT's
                                         client_fault */
#define KVS_WIRE_HDR          16
#define KVS_WIRE_MAX_FRAME    (16u << 20)   /* 1M prompt ids take 4 MiB */
#define KVS_WIRE_AGAIN        1             /* need more bytes */

#define KVS_WIRE_MAX_MODELS   32
#define KVS_WIRE_MAX_NAME     255           /* model name bytes */
#define KVS_WIRE_MAX_BIAS     65536         /* logit_bias entries */
#define KVS_WIRE_MAX_STOP     16            /* = KVS_STOP_MAX */
#define KVS_WIRE_MAX_STOP_LEN 256           /* = KVS_STOP_MAX_LEN */
#define KVS_WIRE_MAX_MSG      (KVS_ERR_MSG_LEN - 1)  /* REFUSED, error */
#define KVS_WIRE_MAX_RETRY_AFTER  3600   /* OUT's retry_after, seconds */

typedef enum {
    KVS_WIRE_HELLO = 1,               /* engine -> worker, on accept */
    KVS_WIRE_SUBMIT,                  /* worker -> engine */
    KVS_WIRE_CANCEL,                  /* worker -> engine */
    KVS_WIRE_REFUSED,                 /* engine -> worker */
    KVS_WIRE_OUT,                     /* engine -> worker */
    KVS_WIRE_PING,                    /* worker -> engine */
    KVS_WIRE_PONG,                    /* engine -> worker */
    KVS_WIRE_STATS,                   /* worker -> engine: a request */
    KVS_WIRE_STATS_REPLY,             /* engine -> worker */
    KVS_WIRE_DRAIN,                   /* worker -> engine: stop accepting,
                                         release the lease, exit once
                                         the last client has gone */
    KVS_WIRE_SUBSCRIBE,               /* worker -> engine: this worker
                                         publishes the prefix index:
                                         send it INDEX frames (a resync
                                         first; again: a new resync).
                                         No body, id 0 */
    KVS_WIRE_INDEX,                   /* engine -> worker: names added
                                         and evicted, and the load */
    KVS_WIRE_LORA,                    /* worker -> engine: the adapter
                                         files its SUBMITs' adapter ids
                                         name (kvs_wire_lora_t) */
    KVS_WIRE_TYPE_MAX = KVS_WIRE_LORA
} kvs_wire_type_t;

typedef struct {
    uint32_t  len;                    /* whole frame, bytes */
    uint16_t  type;
    uint16_t  version;
    uint64_t  id;
} kvs_wire_hdr_t;

typedef struct {
    uint32_t  index;                  /* SUBMIT's model field */
    char      name[KVS_WIRE_MAX_NAME + 1];   /* 1..255 bytes, NUL added */
    uint32_t  n_ctx;                  /* tokens, prompt + output */
    uint32_t  n_vocab;
    uint32_t  block_tokens;           /* KV block size, tokens */
    uint32_t  kv_blocks;              /* KV pool size, blocks */
    uint64_t  file_size;              /* the GGUF's identity, so that a */
    int64_t   mtime_ns;               /* worker checks it tokenizes for */
    uint64_t  dev;                    /* the very file the engine serves: */
    uint64_t  ino;                    /* bytes, unix ns, st_dev, st_ino */
    uint64_t  epoch;                  /* xxh3-64 of the file's content:
                                         the weights' identity */
    uint32_t  backend;                /* kvs_backend_kind_t computing it:
                                         CPU or CUDA */
    uint32_t  kv_dtype;               /* kvs_backend_kv_dtype_t: what its
                                         K/V cache stores, so kv_rate and
                                         /v1/models charge its size */
    uint64_t  weights_mapped;         /* kvs_backend_mem_t's, bytes */
    uint64_t  weights_owned;
    uint64_t  weights_device;
} kvs_wire_model_t;

typedef struct {
    uint32_t          version;        /* the engine's KVS_WIRE_VERSION */
    uint32_t          pid;            /* the engine process (watchdog) */
    uint64_t          incarnation;    /* random per engine start */
    uint32_t          n_models;       /* 1..KVS_WIRE_MAX_MODELS */
    kvs_wire_model_t  models[KVS_WIRE_MAX_MODELS];
} kvs_wire_hello_t;

/* A decoded SUBMIT: req points into the arrays below, which the struct
 * owns and reuses from one decode to the next; after a failed decode req
 * is all zero. */
typedef struct {
    uint32_t           model;
    uint64_t           submit_ns;     /* worker's CLOCK_MONOTONIC */
    kvs_engine_req_t   req;           /* data is NULL */

    int32_t           *prompt;        /* [prompt_cap] */
    size_t             prompt_cap;
    kvs_logit_bias_t  *bias;          /* [bias_cap] */
    size_t             bias_cap;
    int32_t            stop_ids[KVS_ENGINE_MAX_STOP_IDS];
    const char        *stop[KVS_WIRE_MAX_STOP];    /* into stop_text */
    size_t             stop_len[KVS_WIRE_MAX_STOP];
    char               stop_text[KVS_WIRE_MAX_STOP
                                 * KVS_WIRE_MAX_STOP_LEN];
    char               scope[KVS_RADIX_MAX_SCOPE];  /* req.scope's bytes */
    char               tenant[KVS_FAIR_MAX_KEY];    /* req.tenant's */
    char              *schema;        /* [schema_cap] req.schema's */
    size_t             schema_cap;
} kvs_wire_submit_t;

typedef struct {
    int   code;                       /* a negative KVS_E* */
    char  msg[KVS_WIRE_MAX_MSG + 1];
} kvs_wire_refused_t;

/* CLOCK_MONOTONIC ns, system-wide, so hops can be timed across
 * processes; 0 when unknown. */
typedef struct {
    uint64_t  recv_ns;                /* the engine decoded the SUBMIT */
    uint64_t  first_ns;               /* this choice's first token left */
    uint64_t  now_ns;                 /* this frame was encoded */
} kvs_wire_times_t;

/* A decoded OUT: out holds this frame's content only (the decoder
 * resets its counts first and reuses its arrays); free it with
 * kvs_engine_out_free(). */
typedef struct {
    uint32_t          choice;         /* < the request's n */
    kvs_wire_times_t  t;
    kvs_engine_out_t  out;
} kvs_wire_out_t;

typedef struct {
    uint32_t              index;
    kvs_engine_stats_t    st;
    kvs_engine_tenants_t  tenants;    /* the fair share's, for metrics */
} kvs_wire_model_stats_t;

/*
 * INDEX: one model's prefix cache changes (docs/prefix-index.md), body
 *
 *     u32 model, u64 incarnation, u64 epoch, u32 block_tokens,
 *     u32 running, u32 waiting, u32 free_blocks, u32 resync,
 *     u32 n_add, u32 n_del, u32 long_min, u32 long_room, u32 long_slots,
 *     u32 n_dadd, u32 n_ddel, u32 tier_weight,
 *     u32 n_hadd, u32 n_hdel, u32 host_weight,
 *     then (n_add + n_del + n_dadd + n_ddel + n_hadd + n_hdel) names of
 *     16 bytes
 *
 * n_dadd and n_ddel are the disk tier's names (written to it, gone from
 * it), after the pool's; tier_weight is a disk block's worth per mille
 * of a pool block's (0: not said, else 1..1000).  n_hadd and n_hdel are
 * the host tier's names (version 15), after the disk tier's, and
 * host_weight a host-tier block's worth the same way.
 *
 * The header's id counts the INDEX frames the engine process sent to
 * that client (1, 2, ...), for logs.  A batch bigger than a frame goes
 * in several (at most KVS_WIRE_INDEX_MAX_NAMES names each); every frame
 * of a resync has resync set.  n_add = n_del = 0 is a load report.
 */
#define KVS_WIRE_INDEX_FIXED      84
#define KVS_WIRE_INDEX_MAX_NAMES  ((KVS_WIRE_MAX_FRAME - KVS_WIRE_HDR \
                                    - KVS_WIRE_INDEX_FIXED) / 16)

typedef struct {
    uint32_t        model;            /* index into HELLO's models */
    uint64_t        incarnation;      /* the engine process's, nonzero */
    uint64_t        epoch;            /* the model's weight epoch */
    uint32_t        block_tokens;     /* 1..KVS_KV_MAX_BLOCK_TOKENS */
    uint32_t        running;          /* load when sent: sequences */
    uint32_t        waiting;          /*   running and waiting, */
    uint32_t        free_blocks;      /*   free + evictable KV blocks */
    uint32_t        resync;           /* 1: part of the full listing sent
                                         after a SUBSCRIBE; 0 or 1 */
    uint32_t        n_add;            /* names added (parents first) */
    uint32_t        n_del;            /* names evicted (children first) */
    uint32_t        long_min;         /* KV pools' min_tokens; 0: none */
    uint32_t        long_room;        /* blocks the long pool may admit */
    uint32_t        long_slots;       /* its free prefill slots */
    uint32_t        n_dadd;           /* names written to the disk tier */
    uint32_t        n_ddel;           /* names gone from it */
    uint32_t        tier_weight;      /* 0, or 1..1000 per mille */
    uint32_t        n_hadd;           /* names into the host tier */
    uint32_t        n_hdel;           /* names out of it */
    uint32_t        host_weight;      /* 0, or 1..1000 per mille */
    const uint8_t  *names;            /* [(n_add + n_del + n_dadd + n_ddel
                                         + n_hadd + n_hdel) * 16] added,
                                         deleted, disk added, disk
                                         deleted, host added, host
                                         deleted, kvs_index_name_t
                                         bytes; decoded: points into the
                                         frame */
} kvs_wire_index_t;

/*
 * LORA (version 12): the LoRA adapters of one model in the worker's
 * configuration, in the order of its adapter ids (docs/lora.md,
 * "Reload"), body
 *
 *     u32 model, u32 n, then n times: u64 epoch, u32 path_len, path
 *
 * id 0; n is 0..KVS_ENGINE_MAX_LORAS, a path 1..KVS_WIRE_MAX_PATH bytes
 * without NUL.  A worker sends it after each HELLO it accepts, before
 * any SUBMIT: the SUBMITs that follow on that connection name entry i
 * as adapter id i + 1.
 */
#define KVS_WIRE_MAX_PATH     4095

typedef struct {
    uint64_t        epoch;            /* the file's xxh3-64 as the worker
                                         read it */
    const char     *path;             /* [path_len], no NUL; decoded:
                                         points into the frame */
    uint32_t        path_len;
} kvs_wire_lora_ad_t;

typedef struct {
    uint32_t            model;        /* index into HELLO's models */
    uint32_t            n;
    kvs_wire_lora_ad_t  ad[KVS_ENGINE_MAX_LORAS];
} kvs_wire_lora_t;

typedef struct {
    uint32_t                clients;  /* connections now */
    uint32_t                requests; /* requests in flight */
    uint32_t                n_models;
    kvs_wire_model_stats_t  models[KVS_WIRE_MAX_MODELS];
} kvs_wire_stats_t;


/*
 * Looks at the start of p[n]: KVS_OK with *h filled when a whole frame
 * (h->len bytes) is there, KVS_WIRE_AGAIN when more bytes are needed
 * (nothing is consumed), KVS_EFORMAT for a header that can never be
 * valid (length out of range, unknown type, other version), even before
 * the rest arrives.
 */
int kvs_wire_frame(const uint8_t *p, size_t n, kvs_wire_hdr_t *h,
    kvs_err_t *err);

/* Body decoders: f is one whole frame of f_len bytes whose header
 * kvs_wire_frame() accepted with the decoder's type. */
int kvs_wire_dec_hello(const uint8_t *f, size_t f_len, kvs_wire_hello_t *m,
    kvs_err_t *err);
int kvs_wire_dec_submit(const uint8_t *f, size_t f_len,
    kvs_wire_submit_t *m, kvs_err_t *err);
int kvs_wire_dec_refused(const uint8_t *f, size_t f_len,
    kvs_wire_refused_t *m, kvs_err_t *err);
int kvs_wire_dec_out(const uint8_t *f, size_t f_len, kvs_wire_out_t *m,
    kvs_err_t *err);
int kvs_wire_dec_pong(const uint8_t *f, size_t f_len, uint64_t *now_ns,
    kvs_err_t *err);
int kvs_wire_dec_stats(const uint8_t *f, size_t f_len, kvs_wire_stats_t *m,
    kvs_err_t *err);
/* CANCEL, PING, STATS and DRAIN have no body. */
int kvs_wire_dec_empty(const uint8_t *f, size_t f_len, kvs_err_t *err);
/* DRAIN only (its id is 0): a frame of another type is KVS_EFORMAT. */
int kvs_wire_dec_drain(const uint8_t *f, size_t f_len, kvs_err_t *err);

/* The INDEX frame's name lists in its order (the pool's adds and dels,
 * the disk tier's, the host tier's) into n[KVS_WIRE_INDEX_LISTS] (NULL:
 * not wanted); returns how many names in all. */
#define KVS_WIRE_INDEX_LISTS  6
uint64_t kvs_wire_index_lists(const kvs_wire_index_t *ix, uint32_t *n);

/* INDEX: ix->names points into f (valid while f is); the counts are
 * checked against the frame's length before anything is read. */
int kvs_wire_dec_index(const uint8_t *f, size_t f_len, kvs_wire_index_t *ix,
    kvs_err_t *err);
/* SUBSCRIBE only (no body, id 0). */
int kvs_wire_dec_subscribe(const uint8_t *f, size_t f_len, kvs_err_t *err);
/* LORA: the paths point into f (valid while f is). */
int kvs_wire_dec_lora(const uint8_t *f, size_t f_len, kvs_wire_lora_t *m,
    kvs_err_t *err);

void kvs_wire_submit_free(kvs_wire_submit_t *m);

/* Encoders append one frame (OUT: one or more) to b. */
int kvs_wire_enc_hello(kvs_buf_t *b, const kvs_wire_hello_t *m,
    kvs_err_t *err);
int kvs_wire_enc_submit(kvs_buf_t *b, uint64_t id, uint32_t model,
    const kvs_engine_req_t *req, uint64_t submit_ns, kvs_err_t *err);
int kvs_wire_enc_refused(kvs_buf_t *b, uint64_t id, int code,
    const char *msg, kvs_err_t *err);
/* Splits into several OUT frames when the output does not fit one
 * (text is cut at UTF-8 character starts when it can be); only the last
 * carries finish and the error. */
int kvs_wire_enc_out(kvs_buf_t *b, uint64_t id, uint32_t choice,
    const kvs_engine_out_t *out, const kvs_wire_times_t *t,
    kvs_err_t *err);
int kvs_wire_enc_pong(kvs_buf_t *b, uint64_t id, uint64_t now_ns,
    kvs_err_t *err);
int kvs_wire_enc_stats(kvs_buf_t *b, uint64_t id,
    const kvs_wire_stats_t *m, kvs_err_t *err);
/* CANCEL, PING, STATS, DRAIN */
int kvs_wire_enc_empty(kvs_buf_t *b, kvs_wire_type_t type, uint64_t id,
    kvs_err_t *err);
/* DRAIN, id 0: sent by a worker whose HELLO check failed (the engine
 * serves another configuration's models). */
int kvs_wire_enc_drain(kvs_buf_t *b, kvs_err_t *err);

/* One INDEX frame, id the frame's counter; KVS_ERANGE when the names do
 * not fit a frame (split them: KVS_WIRE_INDEX_MAX_NAMES). */
int kvs_wire_enc_index(kvs_buf_t *b, uint64_t id, const kvs_wire_index_t *ix,
    kvs_err_t *err);
int kvs_wire_enc_subscribe(kvs_buf_t *b, kvs_err_t *err);
int kvs_wire_enc_lora(kvs_buf_t *b, const kvs_wire_lora_t *m,
    kvs_err_t *err);

const char *kvs_wire_type_name(unsigned type);   /* "SUBMIT"; "?" */

#endif /* KVS_WIRE_H */
