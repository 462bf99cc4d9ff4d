/*
 * test_kv_tier_host: the host memory tier's bookkeeping (kv/kvs_tier_host.h)
 * without a device, on plain malloc memory or a counting hook: blocks
 * come back byte for byte; a block is given back only under its whole
 * namespace (epoch, adapter, scope) and with its own tokens; another
 * epoch is never stored; the tier never holds more than its size, and
 * a full tier hands its least recently used block to the evict hook
 * (with its key, path id, tokens and bytes) before reusing the slot; a
 * refresh or a hit saves a block from eviction; held slots are never
 * taken or dropped, a tier whose slots are all held refuses a put and
 * changes nothing; the memory hooks are called once each, a failing
 * alloc leaks nothing; bad configurations are refused.
 */

#include "kvs_test.h"

#include "kv/kvs_kv_pool.h"
#include "kv/kvs_tier_host.h"

#define BT      4                     /* tokens per block */
#define BB      96                    /* bytes per block */
#define EPOCH   0x1234abcdull


typedef struct {
    int       calls;
    uint8_t   id[8][KVS_TIER_ID_LEN];
    int32_t   tok[8][BT];
    uint8_t   data[8][BB];
    uint32_t  adapter[8];
    char      scope[8][16];
    int       named[8];
    uint8_t   name[8][KVS_RADIX_NAME_LEN];
} evicted_t;

typedef struct {
    int     allocs;
    int     frees;
    int     fail;
    size_t  bytes;
} mem_t;


static void
on_evict(void *arg, const kvs_radix_key_t *key, const uint8_t *id,
    const uint8_t *name, const int32_t *tokens, const void *data)
{
    evicted_t  *ev = arg;

    assert_true(ev->calls < 8);
    ev->named[ev->calls] = name != NULL;
    if (name != NULL) {
        memcpy(ev->name[ev->calls], name, KVS_RADIX_NAME_LEN);
    }
    assert_int_equal(key->epoch, EPOCH);
    memcpy(ev->id[ev->calls], id, KVS_TIER_ID_LEN);
    memcpy(ev->tok[ev->calls], tokens, sizeof(ev->tok[0]));
    memcpy(ev->data[ev->calls], data, BB);
    ev->adapter[ev->calls] = key->adapter;
    assert_true(key->scope_len < 16);
    memcpy(ev->scope[ev->calls], key->scope, key->scope_len);
    ev->scope[ev->calls][key->scope_len] = '\0';
    ev->calls++;
}


static void *
mem_alloc(void *arg, size_t bytes, kvs_err_t *err)
{
    mem_t  *m = arg;

    m->allocs++;
    m->bytes = bytes;

    if (m->fail) {
        (void) kvs_err_set(err, KVS_ENOMEM, "no pinned memory today");
        return NULL;
    }

    return malloc(bytes);
}


static void
mem_free(void *arg, void *p)
{
    mem_t  *m = arg;

    m->frees++;
    free(p);
}


/* Block k: path id, tokens and bytes all derived from k. */
static void
blk(uint32_t k, uint8_t *id, int32_t *tok, uint8_t *data)
{
    uint32_t  i;

    for (i = 0; i < KVS_TIER_ID_LEN; i++) {
        id[i] = (uint8_t) (k * 31 + i);
    }

    for (i = 0; i < BT; i++) {
        tok[i] = (int32_t) (k * 100 + i);
    }

    for (i = 0; i < BB; i++) {
        data[i] = (uint8_t) (k * 7 + i * 3);
    }
}


static kvs_tier_host_t *
tier_new(uint32_t slots, evicted_t *ev, mem_t *mem)
{
    kvs_err_t              err;
    kvs_tier_host_t       *h;
    kvs_tier_host_conf_t   c;

    memset(&c, 0, sizeof(c));
    /* a partial block's bytes are not a slot */
    c.size = (uint64_t) slots * BB + BB - 1;
    c.block_bytes = BB;
    c.block_tokens = BT;
    c.epoch = EPOCH;
    c.evict = ev != NULL ? on_evict : NULL;
    c.evict_arg = ev;

    if (mem != NULL) {
        c.alloc = mem_alloc;
        c.free = mem_free;
        c.mem_arg = mem;
    }

    if (kvs_tier_host_new(&h, &c, &err) != KVS_OK) {
        fail_msg("new: %s", err.msg);
    }

    return h;
}


static kvs_radix_key_t
key_of(uint64_t epoch, uint32_t adapter, const char *scope)
{
    kvs_radix_key_t  k;

    k.epoch = epoch;
    k.adapter = adapter;
    k.scope = scope;
    k.scope_len = strlen(scope);

    return k;
}


static void
put(kvs_tier_host_t *h, const kvs_radix_key_t *key, uint32_t k)
{
    uint8_t    id[KVS_TIER_ID_LEN], data[BB];
    int32_t    tok[BT];
    kvs_err_t  err;

    blk(k, id, tok, data);

    if (kvs_tier_host_put(h, key, id, tok, data, &err) != KVS_OK) {
        fail_msg("put %u: %s", k, err.msg);
    }
}


/* 1 when block k comes back under key, its bytes equal */
static int
got(kvs_tier_host_t *h, const kvs_radix_key_t *key, uint32_t k)
{
    uint8_t    id[KVS_TIER_ID_LEN], data[BB], out[BB];
    int32_t    tok[BT];
    kvs_err_t  err;

    blk(k, id, tok, data);
    memset(out, 0, sizeof(out));

    if (kvs_tier_host_get(h, key, id, tok, out, &err) != KVS_OK) {
        assert_int_equal(err.code, KVS_ENOTFOUND);
        return 0;
    }

    assert_memory_equal(out, data, BB);

    return 1;
}


static void
test_round_trip(void **state)
{
    uint32_t                k;
    kvs_radix_key_t         key;
    kvs_tier_host_t        *h;
    kvs_tier_host_stats_t   st;

    (void) state;

    h = tier_new(8, NULL, NULL);
    key = key_of(EPOCH, 0, "tenant-a");

    for (k = 0; k < 5; k++) {
        put(h, &key, k);
    }

    for (k = 0; k < 5; k++) {
        assert_true(got(h, &key, k));
        assert_true(kvs_tier_host_has(h, &key, (uint8_t [16]) { 0 }) == 0);
    }

    assert_false(got(h, &key, 5));

    kvs_tier_host_stats(h, &st);
    assert_int_equal(st.slots, 8);
    assert_int_equal(st.used, 5);
    assert_int_equal(st.puts, 5);
    assert_int_equal(st.hits, 5);
    assert_int_equal(st.misses, 1);
    assert_int_equal(st.held, 0);
    assert_int_equal(st.block_bytes, BB);

    kvs_tier_host_free(h);
}


/* Another epoch, adapter or scope, or other tokens under the same id:
 * nothing comes back; a block of another epoch is not stored. */
static void
test_namespaces(void **state)
{
    uint8_t                 id[KVS_TIER_ID_LEN], data[BB], out[BB];
    int32_t                 tok[BT];
    kvs_err_t               err;
    kvs_radix_key_t         a, e2, ad, sc, sc2;
    kvs_tier_host_t        *h;
    kvs_tier_host_stats_t   st;

    (void) state;

    h = tier_new(4, NULL, NULL);
    a = key_of(EPOCH, 0, "team");
    e2 = key_of(EPOCH + 1, 0, "team");
    ad = key_of(EPOCH, 3, "team");
    sc = key_of(EPOCH, 0, "teaM");
    sc2 = key_of(EPOCH, 0, "team2");

    put(h, &a, 1);
    assert_true(got(h, &a, 1));
    assert_false(got(h, &e2, 1));
    assert_false(got(h, &ad, 1));
    assert_false(got(h, &sc, 1));
    assert_false(got(h, &sc2, 1));

    /* the same id with one token changed */
    blk(1, id, tok, data);
    tok[BT - 1]++;
    assert_int_equal(kvs_tier_host_get(h, &a, id, tok, out, &err),
                     KVS_ENOTFOUND);
    assert_true(kvs_tier_host_has(h, &a, id));

    /* another epoch is refused, and stores nothing */
    blk(2, id, tok, data);
    assert_int_equal(kvs_tier_host_put(h, &e2, id, tok, data, &err),
                     KVS_EINVAL);
    assert_non_null(strstr(err.msg, "epoch"));
    assert_false(kvs_tier_host_has(h, &e2, id));

    /* the same block under the adapter's namespace is another block */
    put(h, &ad, 1);
    assert_true(got(h, &ad, 1));
    assert_true(got(h, &a, 1));

    kvs_tier_host_stats(h, &st);
    assert_int_equal(st.used, 2);
    assert_int_equal(st.puts, 2);

    kvs_tier_host_free(h);
}


/* 4 slots, 6 blocks: 0 and 1 go to the evict hook, in that order, whole;
 * a refreshed block (put again) and a hit block stay. */
static void
test_capacity_lru(void **state)
{
    uint8_t                 id[KVS_TIER_ID_LEN], data[BB];
    int32_t                 tok[BT];
    uint32_t                k;
    evicted_t               ev;
    kvs_radix_key_t         key;
    kvs_tier_host_t        *h;
    kvs_tier_host_stats_t   st;

    (void) state;

    memset(&ev, 0, sizeof(ev));
    h = tier_new(4, &ev, NULL);
    key = key_of(EPOCH, 2, "s");

    for (k = 0; k < 6; k++) {
        put(h, &key, k);
        kvs_tier_host_stats(h, &st);
        assert_true(st.used <= 4);
    }

    assert_int_equal(ev.calls, 2);

    for (k = 0; k < 2; k++) {
        blk(k, id, tok, data);
        assert_memory_equal(ev.id[k], id, KVS_TIER_ID_LEN);
        assert_memory_equal(ev.tok[k], tok, sizeof(tok));
        assert_memory_equal(ev.data[k], data, BB);
        assert_int_equal(ev.adapter[k], 2);
        assert_string_equal(ev.scope[k], "s");
        assert_false(got(h, &key, k));
    }

    /* 2 3 4 5 held, least recent first: refresh 2 (a put again) and hit
     * 3, then two new blocks evict 4 and 5 */
    put(h, &key, 2);
    assert_true(got(h, &key, 3));
    put(h, &key, 6);
    put(h, &key, 7);

    assert_int_equal(ev.calls, 4);
    blk(4, id, tok, data);
    assert_memory_equal(ev.id[2], id, KVS_TIER_ID_LEN);
    blk(5, id, tok, data);
    assert_memory_equal(ev.id[3], id, KVS_TIER_ID_LEN);
    assert_true(got(h, &key, 2));
    assert_true(got(h, &key, 3));
    assert_true(got(h, &key, 6));
    assert_true(got(h, &key, 7));

    /* touch saves a block too */
    blk(2, id, tok, data);
    assert_true(kvs_tier_host_touch(h, &key, id));
    put(h, &key, 8);
    put(h, &key, 9);
    put(h, &key, 10);
    assert_true(got(h, &key, 2));
    assert_false(got(h, &key, 3));

    kvs_tier_host_stats(h, &st);
    assert_int_equal(st.used, 4);
    assert_int_equal(st.evicted, 7);
    assert_int_equal(st.put_dups, 1);
    assert_int_equal(ev.calls, 7);

    kvs_tier_host_free(h);
}


/* Held slots: never taken for room, never dropped; all held, a put is
 * KVS_KV_EFULL and changes nothing. */
static void
test_holds(void **state)
{
    uint8_t                 id[KVS_TIER_ID_LEN], data[BB];
    int32_t                 tok[BT];
    uint32_t                k, slot[3];
    kvs_err_t               err;
    evicted_t               ev;
    const void             *p[3];
    kvs_radix_key_t         key;
    kvs_tier_host_t        *h;
    kvs_tier_host_stats_t   a, b;

    (void) state;

    memset(&ev, 0, sizeof(ev));
    h = tier_new(3, &ev, NULL);
    key = key_of(EPOCH, 0, "");

    for (k = 0; k < 3; k++) {
        put(h, &key, k);
    }

    for (k = 0; k < 3; k++) {
        blk(k, id, tok, data);
        assert_int_equal(kvs_tier_host_hold(h, &key, id, tok, &p[k],
                                            &slot[k], &err), KVS_OK);
        assert_memory_equal(p[k], data, BB);
    }

    kvs_tier_host_stats(h, &a);
    assert_int_equal(a.held, 3);

    blk(3, id, tok, data);
    assert_int_equal(kvs_tier_host_put(h, &key, id, tok, data, &err),
                     KVS_KV_EFULL);
    kvs_tier_host_stats(h, &b);
    assert_memory_equal(&a, &b, sizeof(a));
    assert_false(kvs_tier_host_has(h, &key, id));
    assert_int_equal(ev.calls, 0);

    blk(1, id, tok, data);
    assert_int_equal(kvs_tier_host_drop(h, &key, id), 0);

    /* released, block 1 is the only candidate though 0 is older */
    kvs_tier_host_release(h, slot[1]);
    put(h, &key, 3);
    assert_int_equal(ev.calls, 1);
    assert_memory_equal(ev.id[0], id, KVS_TIER_ID_LEN);
    blk(0, id, tok, data);
    assert_memory_equal(p[0], data, BB);

    kvs_tier_host_release(h, slot[0]);
    kvs_tier_host_release(h, slot[2]);
    kvs_tier_host_release(h, slot[2]);       /* once too many: ignored */
    kvs_tier_host_release(h, 99);            /* not a slot: ignored */
    kvs_tier_host_stats(h, &b);
    assert_int_equal(b.held, 0);

    assert_int_equal(kvs_tier_host_drop(h, &key, id), 1);
    assert_false(got(h, &key, 0));
    kvs_tier_host_stats(h, &b);
    assert_int_equal(b.used, 2);

    kvs_tier_host_free(h);
}


static void
test_mem_hooks(void **state)
{
    mem_t                  mem;
    kvs_err_t              err;
    kvs_radix_key_t        key;
    kvs_tier_host_t       *h;
    kvs_tier_host_conf_t   c;

    (void) state;

    memset(&mem, 0, sizeof(mem));
    h = tier_new(5, NULL, &mem);
    key = key_of(EPOCH, 0, "x");
    put(h, &key, 1);
    assert_true(got(h, &key, 1));
    assert_int_equal(mem.allocs, 1);
    assert_int_equal(mem.bytes, 5 * BB);
    kvs_tier_host_free(h);
    assert_int_equal(mem.frees, 1);

    /* a refused allocation: its error, nothing leaked (ASan) */
    memset(&mem, 0, sizeof(mem));
    mem.fail = 1;
    memset(&c, 0, sizeof(c));
    c.size = 4 * BB;
    c.block_bytes = BB;
    c.block_tokens = BT;
    c.alloc = mem_alloc;
    c.free = mem_free;
    c.mem_arg = &mem;
    h = (kvs_tier_host_t *) &c;
    assert_int_equal(kvs_tier_host_new(&h, &c, &err), KVS_ENOMEM);
    assert_null(h);
    assert_non_null(strstr(err.msg, "pinned"));
    assert_int_equal(mem.frees, 0);
}


static void
test_refused(void **state)
{
    uint8_t                id[KVS_TIER_ID_LEN], data[BB];
    int32_t                tok[BT];
    char                   big[KVS_RADIX_MAX_SCOPE + 2];
    kvs_err_t              err;
    mem_t                  mem;
    kvs_radix_key_t        key;
    kvs_tier_host_t       *h;
    kvs_tier_host_conf_t   c;

    (void) state;

    memset(&c, 0, sizeof(c));
    c.size = BB - 1;
    c.block_bytes = BB;
    c.block_tokens = BT;
    assert_int_equal(kvs_tier_host_new(&h, &c, &err), KVS_ERANGE);
    assert_non_null(strstr(err.msg, "hold 0 blocks"));

    c.size = 0;
    assert_int_equal(kvs_tier_host_new(&h, &c, &err), KVS_EINVAL);

    c.size = BB;
    c.block_tokens = 0;
    assert_int_equal(kvs_tier_host_new(&h, &c, &err), KVS_EINVAL);

    c.block_tokens = BT;
    c.alloc = mem_alloc;
    c.mem_arg = &mem;
    assert_int_equal(kvs_tier_host_new(&h, &c, &err), KVS_EINVAL);

    c.alloc = NULL;
    c.size = (uint64_t) BB * (KVS_TIER_HOST_MAX_SLOTS + 1ull);
    assert_int_equal(kvs_tier_host_new(&h, &c, &err), KVS_ERANGE);

    /* a scope too long to be a namespace's */
    h = tier_new(2, NULL, NULL);
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    key = key_of(EPOCH, 0, big);
    blk(1, id, tok, data);
    assert_int_equal(kvs_tier_host_put(h, &key, id, tok, data, &err),
                     KVS_EINVAL);
    assert_false(kvs_tier_host_has(h, &key, id));
    assert_false(got(h, &key, 1));
    kvs_tier_host_free(h);
    kvs_tier_host_free(NULL);
}


typedef struct {
    int       calls;
    int       fail;
    uint32_t  k;                      /* the block to write */
} fill_t;


static int
fill_blk(void *arg, void *dst, kvs_err_t *err)
{
    uint8_t   id[KVS_TIER_ID_LEN];
    int32_t   tok[BT];
    fill_t   *f = arg;

    f->calls++;

    if (f->fail) {
        return kvs_err_set(err, KVS_EIO, "the device said no");
    }

    blk(f->k, id, tok, dst);

    return KVS_OK;
}


/* put_with: the bytes written in place by the fill, the name handed to
 * the evict hook with the block (none for a plain put), a failed fill
 * stores nothing and frees its slot, a block already stored is
 * refreshed without a fill (stored 0), no_evict refuses when full. */
static void
test_put_with(void **state)
{
    int                     stored;
    uint8_t                 id[KVS_TIER_ID_LEN], data[BB];
    uint8_t                 name[KVS_RADIX_NAME_LEN];
    int32_t                 tok[BT];
    fill_t                  f;
    kvs_err_t               err;
    evicted_t               ev;
    kvs_radix_key_t         key;
    kvs_tier_host_t        *h;
    kvs_tier_host_stats_t   st;

    (void) state;

    memset(&ev, 0, sizeof(ev));
    memset(&f, 0, sizeof(f));
    h = tier_new(2, &ev, NULL);
    key = key_of(EPOCH, 0, "w");
    memset(name, 0xa5, sizeof(name));

    f.k = 1;
    blk(1, id, tok, data);
    assert_int_equal(kvs_tier_host_put_with(h, &key, id, name, tok,
                                            fill_blk, &f, 0, &stored, &err),
                     KVS_OK);
    assert_int_equal(stored, 1);
    assert_int_equal(f.calls, 1);
    assert_true(got(h, &key, 1));

    /* again: refreshed, not filled */
    assert_int_equal(kvs_tier_host_put_with(h, &key, id, name, tok,
                                            fill_blk, &f, 0, &stored, &err),
                     KVS_OK);
    assert_int_equal(stored, 0);
    assert_int_equal(f.calls, 1);

    /* a failed fill: nothing stored, the slot free again */
    f.fail = 1;
    f.k = 2;
    blk(2, id, tok, data);
    assert_int_equal(kvs_tier_host_put_with(h, &key, id, NULL, tok,
                                            fill_blk, &f, 0, &stored, &err),
                     KVS_EIO);
    assert_int_equal(stored, 0);
    assert_false(kvs_tier_host_has(h, &key, id));
    kvs_tier_host_stats(h, &st);
    assert_int_equal(st.used, 1);
    assert_int_equal(ev.calls, 0);

    /* 2 and 3 fill the tier; 1 (named) goes to the hook with its name,
     * then 2 (a plain put) without one */
    put(h, &key, 2);
    put(h, &key, 3);
    assert_int_equal(ev.calls, 1);
    assert_true(ev.named[0]);
    assert_memory_equal(ev.name[0], name, KVS_RADIX_NAME_LEN);
    blk(1, id, tok, data);
    assert_memory_equal(ev.data[0], data, BB);

    /* no_evict: a full tier refuses, nothing goes */
    f.fail = 0;
    f.k = 9;
    blk(9, id, tok, data);
    assert_int_equal(kvs_tier_host_put_with(h, &key, id, NULL, tok,
                                            fill_blk, &f, 1, &stored, &err),
                     KVS_KV_EFULL);
    assert_int_equal(ev.calls, 1);
    assert_false(kvs_tier_host_has(h, &key, id));

    put(h, &key, 4);
    assert_int_equal(ev.calls, 2);
    assert_false(ev.named[1]);
    blk(2, id, tok, data);
    assert_memory_equal(ev.id[1], id, KVS_TIER_ID_LEN);

    kvs_tier_host_stats(h, &st);
    assert_int_equal(st.used, 2);
    kvs_tier_host_free(h);
}


/* reserve: a pending slot is found by puts only, never evicted or
 * dropped; ready makes it a block, cancel forgets it */
static void
test_reserve(void **state)
{
    int                     stored;
    void                   *dst, *d1;
    uint8_t                 id[KVS_TIER_ID_LEN], data[BB];
    int32_t                 tok[BT];
    uint32_t                slot, s2;
    kvs_err_t               err;
    evicted_t               ev;
    kvs_radix_key_t         key;
    kvs_tier_host_t        *h;
    kvs_tier_host_stats_t   st;

    (void) state;

    memset(&ev, 0, sizeof(ev));
    h = tier_new(2, &ev, NULL);
    key = key_of(EPOCH, 0, "w");

    blk(1, id, tok, data);
    assert_int_equal(kvs_tier_host_reserve(h, &key, id, NULL, tok, 0,
                                           &stored, &slot, &dst, &err),
                     KVS_OK);
    assert_int_equal(stored, 1);
    assert_non_null(dst);
    assert_true(slot < 2);
    d1 = dst;

    /* pending: no lookup sees it, a second reserve finds it */
    assert_false(kvs_tier_host_has(h, &key, id));
    assert_false(kvs_tier_host_touch(h, &key, id));
    assert_false(got(h, &key, 1));
    assert_false(kvs_tier_host_drop(h, &key, id));
    assert_int_equal(kvs_tier_host_reserve(h, &key, id, NULL, tok, 0,
                                           &stored, &s2, &dst, &err),
                     KVS_OK);
    assert_int_equal(stored, 0);
    assert_int_equal(s2, KVS_TIER_HOST_NONE);

    /* the tier full around it: the other slot is taken for room, never
     * the pending one */
    put(h, &key, 2);
    put(h, &key, 3);
    assert_int_equal(ev.calls, 1);
    blk(2, id, tok, data);
    assert_memory_equal(ev.id[0], id, KVS_TIER_ID_LEN);

    /* its bytes written, ready: a block like any */
    blk(1, id, tok, data);
    memcpy(d1, data, BB);
    kvs_tier_host_stats(h, &st);
    assert_int_equal(st.held, 1);
    kvs_tier_host_ready(h, slot);
    kvs_tier_host_stats(h, &st);
    assert_int_equal(st.held, 0);
    assert_true(got(h, &key, 1));
    assert_true(got(h, &key, 3));

    kvs_tier_host_free(h);

    /* cancel: the slot free again, nothing stored, no hook */
    memset(&ev, 0, sizeof(ev));
    h = tier_new(1, &ev, NULL);
    blk(5, id, tok, data);
    assert_int_equal(kvs_tier_host_reserve(h, &key, id, NULL, tok, 0,
                                           &stored, &slot, &dst, &err),
                     KVS_OK);
    memcpy(dst, data, BB);

    /* the only slot pending: a put has no room */
    blk(6, id, tok, data);
    assert_int_equal(kvs_tier_host_put(h, &key, id, tok, data, &err),
                     KVS_KV_EFULL);

    kvs_tier_host_cancel(h, slot);
    assert_false(got(h, &key, 5));
    kvs_tier_host_stats(h, &st);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.held, 0);
    assert_int_equal(st.puts, 0);
    put(h, &key, 6);
    assert_true(got(h, &key, 6));
    assert_int_equal(ev.calls, 0);

    /* ready: the bytes written meanwhile come back */
    memset(&ev, 0, sizeof(ev));
    kvs_tier_host_free(h);
    h = tier_new(1, &ev, NULL);
    blk(7, id, tok, data);
    assert_int_equal(kvs_tier_host_reserve(h, &key, id, NULL, tok, 0,
                                           &stored, &slot, &dst, &err),
                     KVS_OK);
    memcpy(dst, data, BB);
    kvs_tier_host_ready(h, slot);
    assert_true(got(h, &key, 7));
    kvs_tier_host_free(h);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_namespaces),
        cmocka_unit_test(test_capacity_lru),
        cmocka_unit_test(test_holds),
        cmocka_unit_test(test_mem_hooks),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_put_with),
        cmocka_unit_test(test_reserve),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
