/*
 * ngx_http_kvserve_index: kvserve_index (its directive, its defaults)
 * and the publisher of an engine host's prefix index into Redis
 * (ngx_http_kvserve_index.h describes both; docs/prefix-index.md the
 * keys).
 *
 * Owns, in the subscribing worker only: the publisher's state (per
 * model: the host id, the engine's incarnation, epoch, block size and
 * load from HELLO and the latest INDEX frame), one reusable command
 * buffer, the heartbeat timer and the counters.  The state is static:
 * HELLO can arrive before this module's init_process has run (the
 * engine's connection is made by the main module's), so it is set up by
 * whichever comes first.
 *
 * Invariants:
 * - Names go to Redis in the order the engine gives them (parents added
 *   before children, children deleted before parents), each frame's in
 *   order within one pipeline or consecutive pipelines on the one
 *   connection, so a reader never sees a child without its parent from
 *   one frame.
 * - Nothing blocks and nothing is retried command by command: a batch
 *   that fails (Redis down, an error reply, a timeout) only marks the
 *   index as behind; once Redis is up again the publisher re-sends
 *   SUBSCRIBE and the engine's full listing rewrites every entry (at
 *   most once per RESYNC_GAP).  Entries deleted meanwhile stay until
 *   their TTL: a stale hint costs a gateway a miss, never a wrong
 *   answer (engines compare tokens).
 * - The heartbeat runs only while an engine is connected, so a dead
 *   engine's host record expires by itself (3 heartbeats).
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <unistd.h>

#include "ngx/kvserve/ngx_http_kvserve.h"
#include "ngx/kvserve/ngx_http_kvserve_param.h"
#include "ngx_http_kvserve_index.h"
#include "index/kvs_index_schema.h"

#define NGX_HTTP_KVSERVE_INDEX_HEARTBEAT   1000        /* ms */
#define NGX_HTTP_KVSERVE_INDEX_TTL         3600000     /* ms: 1 h */
#define NGX_HTTP_KVSERVE_INDEX_HOST_BEATS  3           /* host TTL */
#define NGX_HTTP_KVSERVE_INDEX_TRIM_BEATS  10          /* trim hosts every
                                                          10 beats ... */
#define NGX_HTTP_KVSERVE_INDEX_TRIM_TTLS   10          /* ... older than 10
                                                          host TTLs */
#define NGX_HTTP_KVSERVE_INDEX_TIMEOUT     10000       /* ms a batch may
                                                          take: a big
                                                          listing queues
                                                          many */
#define NGX_HTTP_KVSERVE_INDEX_RESYNC_GAP  2000        /* ms between full
                                                          listings asked */
#define NGX_HTTP_KVSERVE_INDEX_ERR_GAP     60000       /* ms between logged
                                                          error replies */

/* one flush: 4096 commands (2048 adds), ~200 bytes each at most */
#define NGX_HTTP_KVSERVE_INDEX_CMDS        4096
#define NGX_HTTP_KVSERVE_INDEX_ARGS        (NGX_HTTP_KVSERVE_INDEX_CMDS * 4)
#define NGX_HTTP_KVSERVE_INDEX_BUF         (NGX_HTTP_KVSERVE_INDEX_CMDS * 128)


typedef struct {
    ngx_flag_t                enabled;
    ngx_str_t                 redis;       /* "ip:port", resolved */
    ngx_str_t                 host_id;     /* 1..64 [A-Za-z0-9._-] */
    ngx_str_t                 advertise;   /* the URL gateways proxy to */
    ngx_msec_t                heartbeat;
    ngx_msec_t                ttl;         /* block entries' */
} ngx_http_kvserve_index_conf_t;


typedef struct {
    ngx_uint_t                known;       /* HELLO or an INDEX seen */
    ngx_uint_t                id_ok;
    ngx_uint_t                warned;      /* its record was refused */
    char                      id[KVS_INDEX_HOST_ID_MAX + 1];
    size_t                    id_len;
    uint64_t                  incarnation;
    uint64_t                  epoch;
    uint32_t                  block_tokens;
    uint32_t                  running;
    uint32_t                  waiting;
    uint32_t                  free_blocks;
    uint32_t                  long_min;    /* the long KV pool's, from */
    uint32_t                  long_room;   /*   the latest INDEX; 0: no */
    uint32_t                  long_slots;  /*   pools (docs/pools.md) */
    uint32_t                  tier_weight; /* the disk tier's tw; 0: no */
    uint32_t                  host_weight; /* the host tier's hw; 0: no */
} ngx_http_kvserve_index_model_t;


typedef struct {
    ngx_uint_t                      inited;
    ngx_http_kvserve_index_conf_t  *conf;
    ngx_http_kvserve_redis_t       *rd;

    kvs_index_cmds_t                cmds;
    char                           *buf;       /* [INDEX_BUF] */
    const char                    **argv;      /* [INDEX_ARGS] */
    size_t                         *argvlen;   /* [INDEX_ARGS] */
    size_t                         *first;     /* [INDEX_CMDS] */

    ngx_event_t                     heartbeat;
    ngx_connection_t                dummy;     /* the timer's ev->data */
    ngx_uint_t                      beats;

    ngx_uint_t                      need_resync;  /* a batch failed */
    ngx_msec_t                      last_subscribe;
    ngx_msec_t                      last_err_log;
    ngx_uint_t                      cmd_warned;

    ngx_http_kvserve_index_model_t  models[KVS_WIRE_MAX_MODELS];

    /* counters, logged at exit */
    uint64_t                        n_add;
    uint64_t                        n_del;
    uint64_t                        n_dadd;       /* disk tier's names */
    uint64_t                        n_ddel;
    uint64_t                        n_hadd;       /* host tier's names */
    uint64_t                        n_hdel;
    uint64_t                        n_batches;
    uint64_t                        n_failed;     /* batches */
    uint64_t                        n_errors;     /* error replies */
    uint64_t                        n_resyncs;
} ngx_http_kvserve_index_pub_t;


static void *ngx_http_kvserve_index_create_conf(ngx_conf_t *cf);
static char *ngx_http_kvserve_index_init_conf(ngx_conf_t *cf, void *conf);
static char *ngx_http_kvserve_index_directive(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static ngx_int_t ngx_http_kvserve_index_time(ngx_conf_t *cf,
    ngx_str_t *value, ngx_str_t *v, ngx_msec_t min, ngx_msec_t *out);
static ngx_int_t ngx_http_kvserve_index_init_process(ngx_cycle_t *cycle);
static void ngx_http_kvserve_index_exit_process(ngx_cycle_t *cycle);
static ngx_http_kvserve_index_pub_t *ngx_http_kvserve_index_pub(void);
static void ngx_http_kvserve_index_beat(ngx_event_t *ev);
static void ngx_http_kvserve_index_flush(ngx_http_kvserve_index_pub_t *p);
static void ngx_http_kvserve_index_done(void *data,
    const kvs_index_reply_t *replies, size_t n);


static ngx_command_t  ngx_http_kvserve_index_commands[] = {

    { ngx_string("kvserve_index"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_1MORE,
      ngx_http_kvserve_index_directive,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_kvserve_index_module_ctx = {
    NULL,                                  /* preconfiguration */
    NULL,                                  /* postconfiguration */

    ngx_http_kvserve_index_create_conf,    /* create main configuration */
    ngx_http_kvserve_index_init_conf,      /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    NULL,                                  /* create location configuration */
    NULL                                   /* merge location configuration */
};


ngx_module_t  ngx_http_kvserve_index_module = {
    NGX_MODULE_V1,
    &ngx_http_kvserve_index_module_ctx,    /* module context */
    ngx_http_kvserve_index_commands,       /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_kvserve_index_init_process,   /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_kvserve_index_exit_process,   /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static ngx_http_kvserve_index_pub_t  ngx_http_kvserve_index_p;


/* ---- configuration ------------------------------------------------------ */

static void *
ngx_http_kvserve_index_create_conf(ngx_conf_t *cf)
{
    ngx_http_kvserve_index_conf_t  *icf;

    icf = ngx_pcalloc(cf->pool, sizeof(ngx_http_kvserve_index_conf_t));
    if (icf == NULL) {
        return NULL;
    }

    icf->heartbeat = NGX_CONF_UNSET_MSEC;
    icf->ttl = NGX_CONF_UNSET_MSEC;

    return icf;
}


static char *
ngx_http_kvserve_index_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_index_conf_t  *icf = conf;

    size_t      k;
    ngx_str_t  *value, v;
    kvs_err_t   err;
    ngx_uint_t  i;

    if (icf->enabled) {
        return "is duplicate";
    }

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_http_kvserve_param(&value[i], "redis", &v) == NGX_OK) {
            if (ngx_http_kvserve_redis_resolve(cf, &cmd->name, &value[i],
                                               &icf->redis)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_http_kvserve_param(&value[i], "host_id", &v) == NGX_OK) {

            if (kvs_index_host_id_check((const char *) v.data, v.len, &err)
                != KVS_OK)
            {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid value \"%V\" in \"%V\" "
                                   "directive: %s", &value[i], &cmd->name,
                                   err.msg);
                return NGX_CONF_ERROR;
            }

            icf->host_id = v;
            continue;
        }

        if (ngx_http_kvserve_param(&value[i], "advertise", &v) == NGX_OK) {

            /* the host record's url field: printable, no space */
            for (k = 0; k < v.len; k++) {
                if (v.data[k] <= 0x20 || v.data[k] >= 0x7f) {
                    break;
                }
            }

            if (v.len == 0 || v.len > KVS_INDEX_URL_MAX || k < v.len
                || (ngx_strncmp(v.data, "http://", 7) != 0
                    && ngx_strncmp(v.data, "https://", 8) != 0))
            {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid value \"%V\" in \"%V\" "
                                   "directive: an http:// or https:// URL "
                                   "of at most %d printable characters is "
                                   "needed", &value[i], &cmd->name,
                                   KVS_INDEX_URL_MAX);
                return NGX_CONF_ERROR;
            }

            icf->advertise = v;
            continue;
        }

        if (ngx_http_kvserve_param(&value[i], "heartbeat", &v) == NGX_OK) {
            if (ngx_http_kvserve_index_time(cf, &value[i], &v, 10,
                                            &icf->heartbeat)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }
            continue;
        }

        if (ngx_http_kvserve_param(&value[i], "ttl", &v) == NGX_OK) {
            if (ngx_http_kvserve_index_time(cf, &value[i], &v, 1000,
                                            &icf->ttl)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }
            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\" in \"%V\" directive",
                           &value[i], &cmd->name);
        return NGX_CONF_ERROR;
    }

    if (icf->redis.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"kvserve_index\" needs redis=<host:port>");
        return NGX_CONF_ERROR;
    }

    icf->enabled = 1;

    return NGX_CONF_OK;
}


/* "name=<time>" (value, v its value) of at least min ms into *out, else
 * an error naming it */
static ngx_int_t
ngx_http_kvserve_index_time(ngx_conf_t *cf, ngx_str_t *value, ngx_str_t *v,
    ngx_msec_t min, ngx_msec_t *out)
{
    ngx_int_t  ms;

    ms = ngx_parse_time(v, 0);

    if (ms == NGX_ERROR || (ngx_msec_t) ms < min) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"kvserve_index\" "
                           "directive: a time of at least %Mms is needed",
                           value, min);
        return NGX_ERROR;
    }

    *out = (ngx_msec_t) ms;

    return NGX_OK;
}


/* The defaults that need the whole http block: its first listen. */
static char *
ngx_http_kvserve_index_init_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_kvserve_index_conf_t  *icf = conf;

    u_char                     *p, *last;
    size_t                      n;
    in_port_t                   port;
    ngx_http_conf_addr_t       *addr;
    ngx_http_conf_port_t       *ports;
    struct sockaddr            *sa;
    ngx_http_core_main_conf_t  *cmcf;
    u_char                      text[NGX_SOCKADDR_STRLEN];
    char                        host[256];

    if (!icf->enabled) {
        return NGX_CONF_OK;
    }

    ngx_conf_init_msec_value(icf->heartbeat,
                             NGX_HTTP_KVSERVE_INDEX_HEARTBEAT);
    ngx_conf_init_msec_value(icf->ttl, NGX_HTTP_KVSERVE_INDEX_TTL);

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    port = 0;
    addr = NULL;

    /* the core module's merge, which adds the default listen, ran
     * before this */
    if (cmcf->ports != NULL && cmcf->ports->nelts > 0) {
        ports = cmcf->ports->elts;
        port = ports[0].port;
        if (ports[0].addrs.nelts > 0) {
            addr = ports[0].addrs.elts;
        }
    }

    if (icf->advertise.len == 0) {
        if (addr == NULL) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "\"kvserve_index\": no listen in the http block "
                          "to advertise: set advertise=<url>");
            return NGX_CONF_ERROR;
        }

        sa = addr->opt.sockaddr;

        if (addr->opt.wildcard) {
            n = ngx_sprintf(text, "%s:%d",
                            sa->sa_family == AF_INET6 ? "[::1]"
                                                      : "127.0.0.1",
                            (int) port)
                - text;

        } else {
            n = ngx_sock_ntop(sa, addr->opt.socklen, text, sizeof(text), 1);
        }

        icf->advertise.data = ngx_pnalloc(cf->pool, sizeof("http://") + n);
        if (icf->advertise.data == NULL) {
            return NGX_CONF_ERROR;
        }

        icf->advertise.len = ngx_sprintf(icf->advertise.data, "http://%*s",
                                         n, text)
                             - icf->advertise.data;
    }

    if (icf->host_id.len == 0) {
        if (gethostname(host, sizeof(host) - 1) != 0) {
            ngx_cpystrn((u_char *) host, (u_char *) "kvserve", sizeof(host));
        }

        host[sizeof(host) - 1] = '\0';

        p = ngx_pnalloc(cf->pool, KVS_INDEX_HOST_ID_MAX + 1);
        if (p == NULL) {
            return NGX_CONF_ERROR;
        }

        /* room for "-65535" */
        last = ngx_cpystrn(p, (u_char *) host, KVS_INDEX_HOST_ID_MAX - 6 + 1);

        for (n = 0; p + n < last; n++) {
            if (!((p[n] >= 'a' && p[n] <= 'z') || (p[n] >= 'A' && p[n] <= 'Z')
                  || (p[n] >= '0' && p[n] <= '9') || p[n] == '.'
                  || p[n] == '_' || p[n] == '-'))
            {
                p[n] = '-';
            }
        }

        if (last == p) {
            last = ngx_cpymem(p, "kvserve", 7);
        }

        /* no listen (an advertise= elsewhere): the hostname alone */
        if (port != 0) {
            last = ngx_sprintf(last, "-%d", (int) port);
        }

        icf->host_id.data = p;
        icf->host_id.len = last - p;
    }

    ngx_log_error(NGX_LOG_NOTICE, cf->log, 0,
                  "kvserve_index: host \"%V\" at %V publishes to redis %V "
                  "(heartbeat %Mms, entries kept %Mms)", &icf->host_id,
                  &icf->advertise, &icf->redis, icf->heartbeat, icf->ttl);

    return NGX_CONF_OK;
}


ngx_uint_t
ngx_http_kvserve_index_subscriber(ngx_cycle_t *cycle)
{
    ngx_http_kvserve_index_conf_t  *icf;
    ngx_http_kvserve_main_conf_t   *kmcf;

    icf = ngx_http_cycle_get_module_main_conf(cycle,
                                              ngx_http_kvserve_index_module);
    kmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_kvserve_module);

    if (icf == NULL || !icf->enabled || kmcf == NULL || !kmcf->used
        || kmcf->models->nelts == 0)
    {
        return 0;
    }

    return ngx_process == NGX_PROCESS_SINGLE
           || (ngx_process == NGX_PROCESS_WORKER && ngx_worker == 0);
}


ngx_str_t *
ngx_http_kvserve_index_redis_addr(ngx_cycle_t *cycle)
{
    ngx_http_kvserve_index_conf_t  *icf;

    icf = ngx_http_cycle_get_module_main_conf(cycle,
                                              ngx_http_kvserve_index_module);

    return (icf != NULL && icf->enabled) ? &icf->redis : NULL;
}


/* ---- the publisher's life ----------------------------------------------- */

static ngx_int_t
ngx_http_kvserve_index_init_process(ngx_cycle_t *cycle)
{
    ngx_http_kvserve_index_conf_t  *icf;

    icf = ngx_http_cycle_get_module_main_conf(cycle,
                                              ngx_http_kvserve_index_module);

    if (icf != NULL && icf->enabled
        && !ngx_http_kvserve_index_subscriber(cycle)
        && (ngx_process == NGX_PROCESS_WORKER
            || ngx_process == NGX_PROCESS_SINGLE)
        && ngx_worker == 0)
    {
        ngx_log_error(NGX_LOG_WARN, cycle->log, 0,
                      "kvserve_index: no location serves kvserve here: "
                      "nothing is published");
    }

    if (!ngx_http_kvserve_index_subscriber(cycle)) {
        return NGX_OK;
    }

    /* may have been set up by HELLO already */
    if (ngx_http_kvserve_index_pub() == NULL) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


static void
ngx_http_kvserve_index_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_kvserve_index_pub_t  *p;

    p = &ngx_http_kvserve_index_p;

    if (p->inited && p->heartbeat.timer_set) {
        ngx_del_timer(&p->heartbeat);
    }

    /* every worker's Redis connections, the gateway's too: pending
     * batches fail here, the publisher's done only counts them */
    ngx_http_kvserve_redis_exit(cycle);

    if (!p->inited) {
        return;
    }

    ngx_log_error(NGX_LOG_INFO, cycle->log, 0,
                  "kvserve_index: published %uL added and %uL evicted "
                  "blocks, %uL written to and %uL dropped from the disk "
                  "tier, %uL into and %uL out of the host tier, in %uL "
                  "batches, %uL failed, %uL error replies, %uL full "
                  "listings asked", p->n_add, p->n_del, p->n_dadd,
                  p->n_ddel, p->n_hadd, p->n_hdel, p->n_batches,
                  p->n_failed, p->n_errors, p->n_resyncs);

    ngx_free(p->buf);
    ngx_free(p->argv);
    ngx_free(p->argvlen);
    ngx_free(p->first);
    p->inited = 0;
}


/* The publisher, set up on first use in the subscribing worker; NULL
 * elsewhere or when out of memory. */
static ngx_http_kvserve_index_pub_t *
ngx_http_kvserve_index_pub(void)
{
    ngx_cycle_t                   *cycle;
    ngx_http_kvserve_index_pub_t  *p;

    p = &ngx_http_kvserve_index_p;

    if (p->inited) {
        return p;
    }

    cycle = (ngx_cycle_t *) ngx_cycle;

    if (!ngx_http_kvserve_index_subscriber(cycle)) {
        return NULL;
    }

    ngx_memzero(p, sizeof(ngx_http_kvserve_index_pub_t));

    p->conf = ngx_http_cycle_get_module_main_conf(cycle,
                                              ngx_http_kvserve_index_module);

    p->buf = ngx_alloc(NGX_HTTP_KVSERVE_INDEX_BUF, cycle->log);
    p->argv = ngx_alloc(NGX_HTTP_KVSERVE_INDEX_ARGS * sizeof(char *),
                        cycle->log);
    p->argvlen = ngx_alloc(NGX_HTTP_KVSERVE_INDEX_ARGS * sizeof(size_t),
                           cycle->log);
    p->first = ngx_alloc(NGX_HTTP_KVSERVE_INDEX_CMDS * sizeof(size_t),
                         cycle->log);

    if (p->buf == NULL || p->argv == NULL || p->argvlen == NULL
        || p->first == NULL)
    {
        goto failed;
    }

    kvs_index_cmds_init(&p->cmds, p->buf, NGX_HTTP_KVSERVE_INDEX_BUF,
                        p->argv, p->argvlen, NGX_HTTP_KVSERVE_INDEX_ARGS,
                        p->first, NGX_HTTP_KVSERVE_INDEX_CMDS);

    p->rd = ngx_http_kvserve_redis_get(cycle, &p->conf->redis);
    if (p->rd == NULL) {
        goto failed;
    }

    p->dummy.fd = (ngx_socket_t) -1;
    p->heartbeat.handler = ngx_http_kvserve_index_beat;
    p->heartbeat.data = &p->dummy;
    p->heartbeat.log = cycle->log;
    p->heartbeat.cancelable = 1;

    /* a first listing is asked with the first SUBSCRIBE */
    p->last_subscribe = ngx_current_msec;
    p->inited = 1;

    ngx_add_timer(&p->heartbeat, p->conf->heartbeat);

    return p;

failed:

    ngx_free(p->buf);
    ngx_free(p->argv);
    ngx_free(p->argvlen);
    ngx_free(p->first);
    ngx_memzero(p, sizeof(ngx_http_kvserve_index_pub_t));

    return NULL;
}


void
ngx_http_kvserve_index_hello(const kvs_wire_hello_t *hello,
    ngx_uint_t model)
{
    u_char                          *last, idx[NGX_INT_T_LEN + 2];
    size_t                           k;
    kvs_err_t                        err;
    ngx_uint_t                       i, j;
    ngx_http_kvserve_index_pub_t    *p;
    ngx_http_kvserve_index_model_t  *m;

    p = ngx_http_kvserve_index_pub();
    if (p == NULL) {
        return;
    }

    /* one engine process per model: its model j is the configuration's
     * model + j (j is 0) */
    for (j = 0; j < hello->n_models && model + j < KVS_WIRE_MAX_MODELS;
         j++)
    {
        i = model + j;
        m = &p->models[i];

        if (!m->known || m->incarnation != hello->incarnation) {
            m->running = 0;
            m->waiting = 0;
            m->free_blocks = hello->models[j].kv_blocks;
            m->long_min = 0;
            m->long_room = 0;
            m->long_slots = 0;
            m->tier_weight = 0;
            m->host_weight = 0;
        }

        m->known = 1;
        m->incarnation = hello->incarnation;
        m->epoch = hello->models[j].epoch;
        m->block_tokens = hello->models[j].block_tokens;

        /* "<host_id>", "<host_id>.1", ...: one record per model */
        last = ngx_snprintf(idx, sizeof(idx), ".%ui", i);
        k = i == 0 ? 0 : (size_t) (last - idx);

        m->id_ok = 0;
        m->id_len = 0;

        if (p->conf->host_id.len + k <= KVS_INDEX_HOST_ID_MAX) {
            last = ngx_cpymem(m->id, p->conf->host_id.data,
                              p->conf->host_id.len);
            last = ngx_cpymem(last, idx, k);
            *last = '\0';
            m->id_len = last - (u_char *) m->id;
            m->id_ok = kvs_index_host_id_check(m->id, m->id_len, &err)
                       == KVS_OK;
        }

        if (!m->id_ok && !m->warned) {
            ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                          "kvserve_index: model \"%s\" is not published: "
                          "its host id \"%V.%ui\" is too long",
                          hello->models[j].name, &p->conf->host_id, i);
            m->warned = 1;
        }
    }

    /* the engine's SUBSCRIBE answer is a full listing */
    p->need_resync = 0;
    p->last_subscribe = ngx_current_msec;

    /* the host record now, not a heartbeat later */
    if (p->heartbeat.timer_set) {
        ngx_del_timer(&p->heartbeat);
    }

    ngx_add_timer(&p->heartbeat, 1);
}


/* ---- publishing ---------------------------------------------------------- */

void
ngx_http_kvserve_index_publish(const kvs_wire_index_t *ix)
{
    int                              rc;
    size_t                           i, n, k, end;
    uint32_t                         cnt[KVS_WIRE_INDEX_LISTS];
    kvs_err_t                        err;
    kvs_index_tier_t                 tier;
    kvs_index_name_t                 name;
    const kvs_wire_hello_t          *hello;
    ngx_http_kvserve_index_pub_t    *p;
    ngx_http_kvserve_index_model_t  *m;

    p = ngx_http_kvserve_index_pub();
    /* engine.c numbered ix->model as the configuration does */
    hello = ngx_http_kvserve_engine_hello_of(ix->model);

    if (p == NULL || hello == NULL
        || ix->model >= KVS_WIRE_MAX_MODELS || ix->incarnation == 0)
    {
        return;
    }

    m = &p->models[ix->model];

    m->known = 1;
    m->incarnation = ix->incarnation;
    m->epoch = ix->epoch;
    m->block_tokens = ix->block_tokens;
    m->running = ix->running;
    m->waiting = ix->waiting;
    m->free_blocks = ix->free_blocks;
    m->long_min = ix->long_min;
    m->long_room = ix->long_room;
    m->long_slots = ix->long_slots;
    m->tier_weight = ix->tier_weight;
    m->host_weight = ix->host_weight;

    /* the lists in the frame's order: the pool's adds and dels, the
     * disk tier's (d:<id>), the host tier's (h:<id>); a frame holds at
     * most KVS_WIRE_INDEX_MAX_NAMES names (checked when decoded) */
    n = (size_t) kvs_wire_index_lists(ix, cnt);

    if (n == 0 || !m->id_ok) {
        return;
    }

    /* Redis is down and behind already: the next full listing covers
     * this frame too, so do not build commands only to fail them */
    if (p->need_resync && !ngx_http_kvserve_redis_up(p->rd)) {
        return;
    }

    kvs_index_cmds_reset(&p->cmds);

    k = 0;
    end = cnt[0];

    for (i = 0; i < n; i++) {
        while (i >= end) {
            end += cnt[++k];
        }

        tier = k < 2 ? KVS_INDEX_TIER_POOL
               : k < 4 ? KVS_INDEX_TIER_DISK : KVS_INDEX_TIER_HOST;

        ngx_memcpy(name.b, ix->names + i * KVS_INDEX_NAME_LEN,
                   KVS_INDEX_NAME_LEN);

        for ( ;; ) {
            if (k % 2 == 0) {
                rc = kvs_index_cmd_blk_tier_add(&p->cmds, &name, m->id,
                                                m->id_len, m->incarnation,
                                                p->conf->ttl, tier, &err);
            } else {
                rc = kvs_index_cmd_blk_tier_del(&p->cmds, &name, m->id,
                                                m->id_len, tier, &err);
            }

            if (rc != KVS_ERANGE || p->cmds.n_cmds == 0) {
                break;
            }

            /* full: send what is there, in order, and go on */
            ngx_http_kvserve_index_flush(p);
        }

        if (rc != KVS_OK) {
            if (!p->cmd_warned) {
                ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                              "kvserve_index: %s", err.msg);
                p->cmd_warned = 1;
            }

            p->need_resync = 1;
            break;
        }
    }

    p->n_add += ix->n_add;
    p->n_del += ix->n_del;
    p->n_dadd += ix->n_dadd;
    p->n_ddel += ix->n_ddel;
    p->n_hadd += ix->n_hadd;
    p->n_hdel += ix->n_hdel;

    ngx_http_kvserve_index_flush(p);
}


static void
ngx_http_kvserve_index_flush(ngx_http_kvserve_index_pub_t *p)
{
    if (p->cmds.n_cmds == 0) {
        return;
    }

    p->n_batches++;

    /* hiredis copies the commands: the buffer is free once this
     * returns; done may run before */
    (void) ngx_http_kvserve_redis_batch(p->rd, &p->cmds,
                                        NGX_HTTP_KVSERVE_INDEX_TIMEOUT,
                                        ngx_http_kvserve_index_done, p);

    kvs_index_cmds_reset(&p->cmds);
}


static void
ngx_http_kvserve_index_done(void *data, const kvs_index_reply_t *replies,
    size_t n)
{
    ngx_http_kvserve_index_pub_t  *p = data;

    size_t      i, bad;
    kvs_err_t   err, first;

    if (replies == NULL) {
        p->n_failed++;
        p->need_resync = 1;
        return;
    }

    bad = 0;

    for (i = 0; i < n; i++) {
        if (kvs_index_reply_written(&replies[i], &err) != KVS_OK) {
            if (bad++ == 0) {
                first = err;
            }
        }
    }

    if (bad == 0) {
        return;
    }

    p->n_errors += bad;
    p->need_resync = 1;

    if (p->last_err_log == 0
        || ngx_current_msec - p->last_err_log
           >= NGX_HTTP_KVSERVE_INDEX_ERR_GAP)
    {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "kvserve_index: redis refused %uz of %uz writes: %s",
                      bad, n, first.msg);
        p->last_err_log = ngx_current_msec;
        if (p->last_err_log == 0) {
            p->last_err_log = 1;
        }
    }
}


/* The adapter files of the configuration's model `name` (its
 * kvserve_lora lines) into *set: what the record says this host serves
 * under that model, so that a gateway sends a BASE:NAME request only to
 * the hosts whose NAME is its own file (docs/lora.md, "Across hosts"). */
static void
ngx_http_kvserve_index_loras(const char *name, kvs_index_lora_set_t *set)
{
    size_t                         len;
    ngx_uint_t                     i, k;
    ngx_http_kvserve_lora_t       *a;
    ngx_http_kvserve_model_t      *m;
    ngx_http_kvserve_main_conf_t  *kmcf;

    ngx_memzero(set, sizeof(kvs_index_lora_set_t));

    kmcf = ngx_http_cycle_get_module_main_conf((ngx_cycle_t *) ngx_cycle,
                                               ngx_http_kvserve_module);
    if (kmcf == NULL || kmcf->models == NULL) {
        return;
    }

    len = ngx_strlen(name);
    m = kmcf->models->elts;

    for (i = 0; i < kmcf->models->nelts; i++) {
        if (m[i].loras == NULL || m[i].name.len != len
            || ngx_strncmp(m[i].name.data, name, len) != 0)
        {
            continue;
        }

        a = m[i].loras->elts;

        for (k = 0; k < m[i].loras->nelts; k++) {
            kvs_index_lora_set_add(set, a[k].epoch);
        }
    }
}


/*
 * The host records and the hosts set, every heartbeat while an engine is
 * connected; and, once Redis is up again after a failed batch, a new
 * SUBSCRIBE so that the engine lists its whole tree again.
 */
static void
ngx_http_kvserve_index_beat(ngx_event_t *ev)
{
    uint64_t                         now, host_ttl;
    kvs_err_t                        err;
    ngx_uint_t                       i;
    kvs_index_host_t                 h;
    const kvs_wire_hello_t          *hello;
    ngx_http_kvserve_index_pub_t    *p;
    ngx_http_kvserve_index_model_t  *m;

    p = &ngx_http_kvserve_index_p;

    if (!p->inited) {
        return;
    }

    if (!ngx_terminate) {
        ngx_add_timer(&p->heartbeat, p->conf->heartbeat);
    }

    hello = ngx_http_kvserve_engine_hello();
    if (hello == NULL) {
        return;
    }

    if (p->need_resync && ngx_http_kvserve_redis_up(p->rd)
        && ngx_current_msec - p->last_subscribe
           >= NGX_HTTP_KVSERVE_INDEX_RESYNC_GAP)
    {
        if (ngx_http_kvserve_engine_subscribe() == NGX_OK) {
            ngx_log_error(NGX_LOG_INFO, ev->log, 0,
                          "kvserve_index: redis %V caught up: the engine "
                          "lists its cache again", &p->conf->redis);
            p->need_resync = 0;
            p->last_subscribe = ngx_current_msec;
            p->n_resyncs++;
        }
    }

    now = ngx_http_kvserve_redis_now_ms();
    host_ttl = (uint64_t) p->conf->heartbeat
               * NGX_HTTP_KVSERVE_INDEX_HOST_BEATS;

    kvs_index_cmds_reset(&p->cmds);

    /* one engine per model: a model whose engine is down is not
     * announced (its record expires) */
    for (i = 0; i < KVS_WIRE_MAX_MODELS; i++) {
        m = &p->models[i];
        hello = ngx_http_kvserve_engine_hello_of(i);

        if (hello == NULL || !m->known || !m->id_ok) {
            continue;
        }

        ngx_memzero(&h, sizeof(kvs_index_host_t));
        ngx_memcpy(h.id, m->id, m->id_len + 1);
        ngx_cpystrn((u_char *) h.url, p->conf->advertise.data,
                    ngx_min(p->conf->advertise.len, KVS_INDEX_URL_MAX) + 1);
        ngx_cpystrn((u_char *) h.model, (u_char *) hello->models[0].name,
                    sizeof(h.model));
        h.incarnation = m->incarnation;
        h.epoch = m->epoch;
        h.block_tokens = m->block_tokens;
        h.running = m->running;
        h.waiting = m->waiting;
        h.free_blocks = m->free_blocks;
        h.long_min = m->long_min;
        h.long_room = m->long_room;
        h.long_slots = m->long_slots;
        h.tier_weight = m->tier_weight;
        h.host_weight = m->host_weight;
        h.ts_ms = now;
        h.has_loras = 1;
        ngx_http_kvserve_index_loras(hello->models[0].name, &h.loras);

        if (kvs_index_cmd_host_set(&p->cmds, &h, host_ttl, &err) != KVS_OK
            || kvs_index_cmd_hosts_add(&p->cmds, m->id, m->id_len, now,
                                       &err)
               != KVS_OK)
        {
            if (!m->warned) {
                ngx_log_error(NGX_LOG_ERR, ev->log, 0,
                              "kvserve_index: model \"%s\" is not "
                              "published: %s", hello->models[0].name,
                              err.msg);
                m->warned = 1;
            }

            m->id_ok = 0;
            continue;
        }
    }

    if (++p->beats % NGX_HTTP_KVSERVE_INDEX_TRIM_BEATS == 0
        && now > host_ttl * NGX_HTTP_KVSERVE_INDEX_TRIM_TTLS)
    {
        (void) kvs_index_cmd_hosts_trim(&p->cmds,
                              now - host_ttl * NGX_HTTP_KVSERVE_INDEX_TRIM_TTLS,
                              &err);
    }

    ngx_http_kvserve_index_flush(p);
}
