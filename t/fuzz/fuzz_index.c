/*
 * fuzz_index: what the prefix index reads back from Redis, which it
 * never trusts (src/index): host records (kvs_index_host_parse, _check,
 * and the gateway's kvs_index_gw_accept), the host list, block entries,
 * write acknowledgements, advertise URLs, and a whole two-round lookup
 * fed arbitrary replies.
 *
 * The input is decoded into reply trees (kvs_index_reply_t, the glue's
 * mirror of a hiredis reply) by a small bytecode: each node starts with
 * a byte choosing its type; strings are raw input bytes, or, so that
 * the fuzzer reaches past the first check, one of the candidates' ids,
 * one of their incarnations in hex, or a host record formatted from
 * input fields.  Depth, width and node count are bounded.
 *
 * Checks beyond "no crash, no undefined behaviour, no leak": a parsed
 * host record formats and parses back to itself; a lookup never
 * believes a host holds more blocks than the prompt has, nor any block
 * for a host that is not up or of another epoch; a choice names a
 * candidate or none.
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index/kvs_index_gw.h"
#include "index/kvs_index_lookup.h"
#include "index/kvs_index_schema.h"

#define FI_NODES      4096
#define FI_DEPTH      4
#define FI_WIDTH      24
#define FI_HOSTS      8
#define FI_BLOCKS     300
#define FI_EPOCH      0x5eedULL
#define FI_STRS       256              /* formatted strings per input */


typedef struct {
    const uint8_t      *p;
    size_t              left;
    kvs_index_reply_t   node[FI_NODES];
    size_t              n_node;
    kvs_index_cand_t    cand[FI_HOSTS];
    char                id[FI_HOSTS][8];
    char                inc_hex[FI_HOSTS][KVS_INDEX_INC_HEX_LEN + 1];
    uint32_t            n_hosts;
    char                strs[FI_STRS][KVS_INDEX_HOST_VALUE_MAX + 1];
    size_t              n_strs;
} fi_t;


static uint8_t fi_u8(fi_t *f);
static uint64_t fi_u64(fi_t *f);
static const kvs_index_reply_t *fi_tree(fi_t *f);
static void fi_fill(fi_t *f, kvs_index_reply_t *r, unsigned depth);
static void fi_string(fi_t *f, kvs_index_reply_t *r);
static void fi_records(fi_t *f, const kvs_index_reply_t *r);
static void fi_lookup(fi_t *f);
static void fi_host_same(const kvs_index_host_t *a,
    const kvs_index_host_t *b);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint32_t  h;
    fi_t     *f;

    f = calloc(1, sizeof(fi_t));
    if (f == NULL) {
        return 0;
    }

    f->p = data;
    f->left = size;

    /* the candidates: ids h0..h7, incarnations from the input (never 0,
     * which no entry may carry), up or not, of this epoch or not */
    f->n_hosts = 1 + fi_u8(f) % FI_HOSTS;

    for (h = 0; h < f->n_hosts; h++) {
        snprintf(f->id[h], sizeof(f->id[h]), "h%" PRIu32, h);
        f->cand[h].id = f->id[h];
        f->cand[h].id_len = strlen(f->id[h]);
        f->cand[h].incarnation = fi_u64(f) | 1;
        f->cand[h].epoch = fi_u8(f) < 224 ? FI_EPOCH : FI_EPOCH + 1;
        f->cand[h].up = fi_u8(f) < 224;
        f->cand[h].load = fi_u8(f);
        f->cand[h].free_blocks = fi_u8(f);
        snprintf(f->inc_hex[h], sizeof(f->inc_hex[h]), "%016" PRIx64,
                 f->cand[h].incarnation);
    }

    fi_records(f, fi_tree(f));
    fi_lookup(f);

    free(f);

    return 0;
}


/* Host records, host lists, entries, acknowledgements, URLs. */
static void
fi_records(fi_t *f, const kvs_index_reply_t *r)
{
    char                   ids[FI_HOSTS][KVS_INDEX_HOST_ID_MAX + 1];
    char                   value[KVS_INDEX_HOST_VALUE_MAX + 1];
    char                   addr[KVS_INDEX_GW_ADDR_MAX + 1];
    size_t                 i, n, skipped, len, id_len;
    uint64_t               inc;
    const char            *id;
    kvs_err_t              err;
    kvs_index_host_t       host, again;
    kvs_index_gw_host_t    known, out;
    kvs_index_host_want_t  want;
    kvs_index_reply_t      back;
    kvs_index_reject_t     why;

    kvs_err_clear(&err);

    if (kvs_index_host_parse(r, f->id[0], strlen(f->id[0]), &host, &why,
                             &err) == KVS_OK)
    {
        /* what parsed formats and parses back to the same record */
        if (kvs_index_host_format(&host, value, &len, &err) != KVS_OK) {
            abort();
        }

        memset(&back, 0, sizeof(back));
        back.type = KVS_INDEX_REPLY_STRING;
        back.str = value;
        back.len = len;

        if (kvs_index_host_parse(&back, host.id, strlen(host.id), &again,
                                 &why, &err) != KVS_OK)
        {
            abort();
        }

        fi_host_same(&host, &again);

        memset(&want, 0, sizeof(want));
        want.now_ms = fi_u64(f);
        want.max_age_ms = fi_u8(f);
        want.epoch = FI_EPOCH;
        want.check_epoch = 1;
        want.known = &again;
        (void) kvs_index_host_check(&host, &want, &why, &err);

        (void) kvs_index_gw_url_addr(host.url, strlen(host.url), addr,
                                     sizeof(addr), &len, &err);
    }

    memset(&known, 0, sizeof(known));
    snprintf(known.rec.id, sizeof(known.rec.id), "%s", f->id[0]);
    known.rec.incarnation = f->cand[0].incarnation;
    known.rec.ts_ms = 1000;
    known.sent = fi_u8(f);

    if (kvs_index_gw_accept(fi_u8(f) & 1 ? &known : NULL, r, f->id[0],
                            strlen(f->id[0]), 2000, fi_u8(f), &out, &why))
    {
        (void) kvs_index_gw_load(&out);
        kvs_index_gw_cand_update(&f->cand[0], &out, "m0", 2, FI_EPOCH, 16,
                                 fi_u8(f));
    }

    (void) kvs_index_hosts_parse(r, ids, FI_HOSTS, &n, &skipped, &err);
    if (n > FI_HOSTS) {
        abort();
    }

    (void) kvs_index_reply_written(r, &err);

    if (r->type == KVS_INDEX_REPLY_ARRAY) {
        for (i = 0; i + 1 < r->elements; i += 2) {
            if (kvs_index_blk_entry(&r->element[i], &r->element[i + 1],
                                    &id, &id_len, &inc) == KVS_OK
                && (id_len == 0 || id_len > KVS_INDEX_HOST_ID_MAX
                    || inc == 0))
            {
                abort();
            }
        }
    }

    if (r->type == KVS_INDEX_REPLY_STRING) {
        (void) kvs_index_gw_url_addr(r->str, r->len, addr, sizeof(addr),
                                     &len, &err);
        (void) kvs_index_gw_pseudo_id(r->str, r->len, ids[0]);
    }
}


/* A lookup of up to FI_BLOCKS names over the candidates, both rounds
 * answered from the input. */
static void
fi_lookup(fi_t *f)
{
    void                    *mem;
    size_t                   mem_len, i, n;
    uint32_t                 n_blocks, h, round, blocks[FI_HOSTS];
    kvs_err_t                err;
    kvs_index_name_t         names[FI_BLOCKS];
    kvs_index_lookup_t       lk;
    kvs_index_choice_t       choice;
    kvs_index_route_conf_t   conf;
    kvs_index_reply_t       *replies;

    kvs_err_clear(&err);
    kvs_index_route_conf_default(&conf);
    conf.stride = fi_u8(f) % 24;
    conf.round2_max = fi_u8(f);

    n_blocks = (uint32_t) (fi_u8(f) | (uint32_t) fi_u8(f) << 8) % FI_BLOCKS;
    memset(names, 0, sizeof(names));
    for (i = 0; i < n_blocks; i++) {
        names[i].b[0] = (uint8_t) i;
        names[i].b[1] = (uint8_t) (i >> 8);
    }

    mem_len = kvs_index_lookup_mem(n_blocks, f->n_hosts, &conf);
    mem = aligned_alloc(8, (mem_len + 7) & ~(size_t) 7);
    if (mem == NULL) {
        return;
    }

    if (kvs_index_lookup_init(&lk, mem, mem_len, f->cand, f->n_hosts,
                              FI_EPOCH, n_blocks, 16, &conf, &err)
        != KVS_OK)
    {
        free(mem);
        return;
    }

    for (round = 1; round <= 2 && lk.n_probe > 0; round++) {
        /* one reply per probe, contiguous as the glue lays them out;
         * now and then one too few */
        n = lk.n_probe;
        if (fi_u8(f) == 0xff && n > 0) {
            n--;
        }

        if (f->n_node + n > FI_NODES) {
            break;
        }

        replies = &f->node[f->n_node];
        f->n_node += n;
        for (i = 0; i < n; i++) {
            fi_fill(f, &replies[i], 1);
        }

        if (round == 1) {
            (void) kvs_index_lookup_round1(&lk, replies, n, &err);
        } else {
            (void) kvs_index_lookup_round2(&lk, replies, n, &err);
        }
    }

    kvs_index_lookup_result(&lk, blocks);

    for (h = 0; h < f->n_hosts; h++) {
        if (blocks[h] > n_blocks) {
            abort();
        }

        if ((!f->cand[h].up || f->cand[h].epoch != FI_EPOCH)
            && blocks[h] != 0)
        {
            abort();
        }
    }

    kvs_index_choose(f->cand, f->n_hosts, blocks, 16, n_blocks == 0, &conf,
                     &choice);
    if (choice.host >= (int32_t) f->n_hosts || choice.host < -1) {
        abort();
    }

    kvs_index_choose_hash(f->cand, f->n_hosts, names, n_blocks, &conf,
                          &choice);
    if (choice.host >= (int32_t) f->n_hosts || choice.host < -1) {
        abort();
    }

    free(mem);
}


/* A tree from the input; NIL once the input or the node pool is out. */
static const kvs_index_reply_t *
fi_tree(fi_t *f)
{
    kvs_index_reply_t  *r;

    if (f->n_node == FI_NODES) {
        return &f->node[0];
    }

    r = &f->node[f->n_node++];
    fi_fill(f, r, 0);

    return r;
}


static void
fi_fill(fi_t *f, kvs_index_reply_t *r, unsigned depth)
{
    size_t              i, n;
    kvs_index_reply_t  *el;

    memset(r, 0, sizeof(kvs_index_reply_t));

    switch (fi_u8(f) % 7) {

    case 0:
        r->type = KVS_INDEX_REPLY_NIL;
        break;

    case 1:
        r->type = KVS_INDEX_REPLY_INTEGER;
        r->integer = (long long) fi_u64(f);
        break;

    case 2:
        r->type = KVS_INDEX_REPLY_STATUS;
        fi_string(f, r);
        break;

    case 3:
        r->type = KVS_INDEX_REPLY_ERROR;
        fi_string(f, r);
        break;

    case 4:
    case 5:
        if (depth < FI_DEPTH) {
            n = fi_u8(f) % (FI_WIDTH + 1);
            if (f->n_node + n > FI_NODES) {
                n = FI_NODES - f->n_node;
            }

            r->type = KVS_INDEX_REPLY_ARRAY;
            el = &f->node[f->n_node];
            f->n_node += n;
            r->element = el;
            r->elements = n;

            for (i = 0; i < n; i++) {
                fi_fill(f, &el[i], depth + 1);
            }

            break;
        }

        /* fall through: too deep for another array */

    default:
        r->type = KVS_INDEX_REPLY_STRING;
        fi_string(f, r);
        break;
    }
}


/*
 * A string node: raw input bytes, a candidate's id or incarnation, or a
 * host record formatted from input fields (then perhaps cut short or
 * with one byte changed).
 */
static void
fi_string(fi_t *f, kvs_index_reply_t *r)
{
    char              *s;
    size_t             n, len;
    uint8_t            kind, h;
    kvs_err_t          err;
    kvs_index_host_t   host;

    kind = fi_u8(f);
    h = fi_u8(f) % f->n_hosts;

    if (kind < 96) {
        n = fi_u8(f);
        n = n < f->left ? n : f->left;
        r->str = (const char *) f->p;
        r->len = n;
        f->p += n;
        f->left -= n;
        return;
    }

    if (kind < 144) {
        r->str = f->id[h];
        r->len = strlen(f->id[h]);
        return;
    }

    if (kind < 192 || f->n_strs == FI_STRS) {
        r->str = f->inc_hex[h];
        r->len = KVS_INDEX_INC_HEX_LEN;
        return;
    }

    memset(&host, 0, sizeof(host));
    snprintf(host.id, sizeof(host.id), "%s", f->id[h]);
    snprintf(host.model, sizeof(host.model), "m%u", fi_u8(f) % 3);
    snprintf(host.url, sizeof(host.url), "%s://10.0.0.%u:%u/v1",
             fi_u8(f) & 1 ? "http" : "https", fi_u8(f), fi_u8(f) * 257u);
    host.incarnation = fi_u8(f) & 1 ? f->cand[h].incarnation : fi_u64(f);
    host.epoch = fi_u8(f) < 200 ? FI_EPOCH : fi_u64(f);
    host.block_tokens = fi_u8(f) < 200 ? 16 : fi_u8(f);
    host.running = fi_u8(f);
    host.waiting = fi_u8(f);
    host.free_blocks = (uint32_t) fi_u64(f);
    host.ts_ms = fi_u64(f) % 4000;

    s = f->strs[f->n_strs];
    kvs_err_clear(&err);
    if (kvs_index_host_format(&host, s, &len, &err) != KVS_OK) {
        r->str = "";
        r->len = 0;
        return;
    }

    f->n_strs++;

    /* damage: cut, or one byte changed */
    if (kind >= 240 && len > 0) {
        len = fi_u8(f) % len;
    } else if (kind >= 224 && len > 0) {
        s[fi_u8(f) % len] = (char) fi_u8(f);
    }

    r->str = s;
    r->len = len;
}


static void
fi_host_same(const kvs_index_host_t *a, const kvs_index_host_t *b)
{
    if (strcmp(a->id, b->id) != 0 || strcmp(a->url, b->url) != 0
        || strcmp(a->model, b->model) != 0
        || a->incarnation != b->incarnation || a->epoch != b->epoch
        || a->block_tokens != b->block_tokens || a->running != b->running
        || a->waiting != b->waiting || a->free_blocks != b->free_blocks
        || a->ts_ms != b->ts_ms)
    {
        abort();
    }
}


static uint8_t
fi_u8(fi_t *f)
{
    uint8_t  v;

    if (f->left == 0) {
        return 0;
    }

    v = *f->p++;
    f->left--;

    return v;
}


static uint64_t
fi_u64(fi_t *f)
{
    int       i;
    uint64_t  v;

    v = 0;
    for (i = 0; i < 8; i++) {
        v = v << 8 | fi_u8(f);
    }

    return v;
}
