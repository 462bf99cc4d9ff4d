/*
 * kvs_srv_lora: a connection's LoRA adapter ids (docs/lora.md,
 * "Reload").  A worker sends LORA after HELLO with its configuration's
 * adapter files of a model (path, epoch) in the order of its ids; each
 * is bound with the model's engine (kvs_engine_lora_bind: a file the
 * engine serves keeps its id, another gets a new one), and the
 * connection's SUBMITs that follow have their adapter id mapped to the
 * engine's.  So an engine kept across a reload serves the old workers'
 * ids as the old files and the new workers' as the new ones.
 *
 * Invariants: a connection without a LORA frame for a model names the
 * engine's ids as they are (the engine's own configuration's order);
 * with one, an id past its n, or one the engine refused to bind, is
 * refused at SUBMIT with the reason and reaches no engine; a later LORA
 * for the same model replaces the map whole.  Loop thread only.
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_srv_impl.h"


int
kvs_srv_lora(kvs_srv_t *srv, kvs_srv_client_t *c, const uint8_t *f,
    size_t f_len, kvs_err_t *err)
{
    uint32_t           i;
    kvs_err_t          berr;
    kvs_engine_t      *e;
    kvs_srv_lora_t    *map;
    kvs_wire_lora_t   *m;

    m = &srv->lora;

    if (kvs_wire_dec_lora(f, f_len, m, err) != KVS_OK) {
        return KVS_EFORMAT;
    }

    if (m->model >= srv->n_engines) {
        return kvs_err_set(err, KVS_EFORMAT, "LORA: model %u: this engine "
                           "serves %u", m->model, srv->n_engines);
    }

    map = c->lora[m->model];
    if (map == NULL) {
        map = malloc(sizeof(kvs_srv_lora_t));
        if (map == NULL) {
            return kvs_err_set(err, KVS_EFORMAT, "LORA: out of memory");
        }

        c->lora[m->model] = map;
    }

    e = srv->engines[m->model].e;
    map->n = m->n;
    map->why[0] = '\0';

    for (i = 0; i < m->n; i++) {
        kvs_err_clear(&berr);

        if (kvs_engine_lora_bind(e, m->ad[i].path, m->ad[i].path_len,
                                 m->ad[i].epoch, &map->id[i], &berr)
            == KVS_OK)
        {
            continue;
        }

        map->id[i] = 0;

        if (map->why[0] == '\0') {
            snprintf(map->why, sizeof(map->why), "%s", berr.msg);
        }

        kvs_srv_log(srv, "client %" PRIu64 ": LoRA adapter %u (%.*s) not "
                    "bound: %s", c->serial, i + 1, (int) m->ad[i].path_len,
                    m->ad[i].path, berr.msg);
    }

    return KVS_OK;
}


int
kvs_srv_lora_map(kvs_srv_t *srv, kvs_srv_client_t *c, char *msg)
{
    uint32_t         a;
    kvs_srv_lora_t  *map;

    a = srv->sub.req.adapter;
    map = c->lora[srv->sub.model];

    if (a == 0 || map == NULL) {
        return KVS_OK;
    }

    if (a > map->n) {
        snprintf(msg, KVS_ERR_MSG_LEN, "adapter %" PRIu32 ": the model "
                 "serves %" PRIu32 " LoRA adapter%s", a, map->n,
                 map->n == 1 ? "" : "s");
        return KVS_EINVAL;
    }

    if (map->id[a - 1] == 0) {
        snprintf(msg, KVS_ERR_MSG_LEN, "adapter %" PRIu32 ": not served "
                 "by this engine: %.250s", a, map->why);
        return KVS_EINVAL;
    }

    srv->sub.req.adapter = map->id[a - 1];

    return KVS_OK;
}


void
kvs_srv_lora_free(kvs_srv_client_t *c)
{
    uint32_t  i;

    for (i = 0; i < KVS_WIRE_MAX_MODELS; i++) {
        free(c->lora[i]);
        c->lora[i] = NULL;
    }
}
