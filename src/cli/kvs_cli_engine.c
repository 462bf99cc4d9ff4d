/*
 * kvserve engine: the engine process in the foreground: loads one model,
 * serves it on a unix socket (kvs_srv, docs/engine-process.md) until
 * SIGINT or SIGTERM, or, with --parent-pid, until that process is gone
 * and no client is left.  One line on stderr per start, stop and
 * dropped client.
 *
 * The signal handler only writes the server's stop eventfd (async-signal
 * safe); SIGPIPE is ignored because a worker may vanish mid-write (the
 * server sends with MSG_NOSIGNAL anyway).
 */

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kvs_cli.h"
#include "engine/kvs_engine.h"
#include "kv/kvs_kv_pool.h"
#include "model/kvs_model.h"
#include "server/kvs_srv.h"
#include "tokenizer/kvs_vocab.h"

#define KVS_CLI_ENGINE_SEQS  16       /* full contexts the default KV
                                         cache holds on the CPU */
#define KVS_CLI_ENGINE_KV_FRACTION  0.9   /* of the device memory free
                                             after the weights, on CUDA */

typedef struct {
    const char  *socket;
    const char  *path;
    const char  *name;
    uint32_t     kv_blocks;           /* 0: KVS_CLI_ENGINE_SEQS contexts */
    uint32_t     block;
    unsigned     threads;
    uint32_t     max_batch_tokens;
    uint32_t     ctx;
    int          parent_pid;          /* 0: none */
    int          no_prefix_cache;
    uint64_t     pin_max;             /* bytes; 0: the engine's default */
    int          backend;             /* kvs_backend_kind_t; auto */
    int          device;              /* CUDA device ordinal */
} kvs_cli_engine_opts_t;


static kvs_srv_t  *kvs_cli_engine_srv;


static int kvs_cli_engine_args(int argc, char **argv,
    kvs_cli_engine_opts_t *o);
static void kvs_cli_engine_log(void *data, const char *msg);
static void kvs_cli_engine_signal(int signo);
static void kvs_cli_engine_usage(FILE *f);


int
kvs_cli_engine(int argc, char **argv)
{
    int                    rc, pidfd;
    char                   h[32];
    kvs_err_t              err;
    kvs_srv_t             *srv;
    kvs_model_t           *m;
    kvs_vocab_t           *v;
    kvs_srv_conf_t         conf;
    kvs_srv_model_t        sm;
    kvs_engine_stats_t     st;
    struct sigaction       sa;
    kvs_cli_engine_opts_t  o;

    rc = kvs_cli_engine_args(argc, argv, &o);
    if (rc != 0) {
        return rc < 0 ? 0 : rc;
    }

    kvs_err_clear(&err);
    m = NULL;
    v = NULL;
    srv = NULL;
    pidfd = -1;
    rc = 1;

    if (o.parent_pid > 0) {
        pidfd = (int) syscall(SYS_pidfd_open, (pid_t) o.parent_pid, 0);
        if (pidfd < 0) {
            kvs_err_set(&err, KVS_EIO, "--parent-pid %d: pidfd_open: %s",
                        o.parent_pid, strerror(errno));
            goto failed;
        }
    }

    if (kvs_model_open(&m, o.path, &err) != KVS_OK) {
        m = NULL;
        goto failed;
    }

    if (kvs_vocab_load(&v, m->gguf, &err) != KVS_OK) {
        v = NULL;
        goto failed;
    }

    memset(&sm, 0, sizeof(sm));
    sm.name = o.name;
    sm.engine.model = m;
    sm.engine.vocab = v;
    sm.engine.block_tokens = o.block;
    sm.engine.threads = o.threads;
    sm.engine.max_batch_tokens = o.max_batch_tokens;
    sm.engine.n_ctx = o.ctx;
    sm.engine.n_blocks = o.kv_blocks;
    sm.engine.no_prefix_cache = o.no_prefix_cache;
    sm.engine.pin_max_bytes = o.pin_max;
    sm.engine.backend = (kvs_backend_kind_t) o.backend;
    sm.engine.device = o.device;

    if (sm.engine.n_blocks == 0) {
        sm.engine.n_blocks = KVS_CLI_ENGINE_SEQS
            * (((o.ctx ? o.ctx : m->hp.n_ctx_train) + o.block - 1)
               / o.block);

        /* on a GPU, what the device has room for instead */
        sm.engine.kv_fraction = KVS_CLI_ENGINE_KV_FRACTION;
    }

    memset(&conf, 0, sizeof(conf));
    conf.lease_fd = -1;                  /* run by hand: no lease */
    conf.socket_path = o.socket;
    conf.models = &sm;
    conf.n_models = 1;
    conf.parent_pidfd = pidfd;
    conf.log = kvs_cli_engine_log;

    if (kvs_srv_new(&srv, &conf, &err) != KVS_OK) {
        srv = NULL;
        goto failed;
    }

    kvs_engine_stats(kvs_srv_engine(srv, 0), &st);

    fprintf(stderr, "kvserve engine: %s: %" PRIu32 " KV blocks of %" PRIu32
            " tokens (%s)\n", o.path, st.kv_blocks, o.block,
            kvs_cli_human((double) kvs_engine_kv_bytes(kvs_srv_engine(srv,
                                                                       0)),
                          h, sizeof(h)));

    kvs_cli_engine_srv = srv;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = kvs_cli_engine_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (kvs_srv_run(srv, &err) != KVS_OK) {
        goto failed;
    }

    rc = 0;

failed:

    if (rc != 0) {
        fprintf(stderr, "kvserve engine: %s\n", err.msg);
    }

    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    kvs_cli_engine_srv = NULL;

    kvs_srv_free(srv);
    kvs_vocab_free(v);
    kvs_model_close(m);

    if (pidfd >= 0) {
        close(pidfd);
    }

    return rc;
}


static int
kvs_cli_engine_args(int argc, char **argv, kvs_cli_engine_opts_t *o)
{
    int          i, rc;
    double       d;
    const char  *opt;

    memset(o, 0, sizeof(kvs_cli_engine_opts_t));
    o->block = KVS_KV_BLOCK_TOKENS;
    o->backend = KVS_BACKEND_AUTO;

    for (i = 1; i < argc; i++) {
        opt = argv[i];

        if (strcmp(opt, "-h") == 0 || strcmp(opt, "--help") == 0) {
            kvs_cli_engine_usage(stdout);
            return -1;
        }

        if (opt[0] != '-') {
            if (o->path != NULL) {
                fprintf(stderr, "kvserve engine: more than one model\n");
                return 2;
            }

            o->path = opt;
            continue;
        }

        if (i + 1 >= argc) {
            fprintf(stderr, "kvserve engine: %s needs a value\n", opt);
            return 2;
        }

        i++;

        rc = kvs_cli_backend_opt("engine", opt, argv[i], &o->backend,
                                 &o->device);
        if (rc != 0) {
            if (rc == 1) {
                continue;
            }

            return rc;
        }

        if (strcmp(opt, "--socket") == 0) {
            o->socket = argv[i];

        } else if (strcmp(opt, "--name") == 0) {
            o->name = argv[i];

        } else if (strcmp(opt, "--kv-blocks") == 0) {
            if (kvs_cli_num("engine", opt, argv[i], 1, KVS_KV_MAX_BLOCKS, 1,
                            &d) != 0)
            {
                return 2;
            }

            o->kv_blocks = (uint32_t) d;

        } else if (strcmp(opt, "--block") == 0) {
            if (kvs_cli_num("engine", opt, argv[i], 1,
                            KVS_KV_MAX_BLOCK_TOKENS, 1, &d) != 0)
            {
                return 2;
            }

            o->block = (uint32_t) d;

        } else if (strcmp(opt, "--threads") == 0) {
            if (kvs_cli_num("engine", opt, argv[i], 0, 256, 1, &d) != 0) {
                return 2;
            }

            o->threads = (unsigned) d;

        } else if (strcmp(opt, "--max-batch-tokens") == 0) {
            if (kvs_cli_num("engine", opt, argv[i], 1, 1 << 20, 1, &d) != 0) {
                return 2;
            }

            o->max_batch_tokens = (uint32_t) d;

        } else if (strcmp(opt, "--ctx") == 0) {
            if (kvs_cli_num("engine", opt, argv[i], 1, 1 << 24, 1, &d) != 0) {
                return 2;
            }

            o->ctx = (uint32_t) d;

        } else if (strcmp(opt, "--prefix-cache") == 0) {
            if (strcmp(argv[i], "on") != 0 && strcmp(argv[i], "off") != 0) {
                fprintf(stderr, "kvserve engine: --prefix-cache: \"%s\", "
                        "expected on or off\n", argv[i]);
                return 2;
            }

            o->no_prefix_cache = strcmp(argv[i], "off") == 0;

        } else if (strcmp(opt, "--pin-max") == 0) {
            if (kvs_cli_num("engine", opt, argv[i], 1, 1e18, 1, &d) != 0) {
                return 2;
            }

            o->pin_max = (uint64_t) d;

        } else if (strcmp(opt, "--parent-pid") == 0) {
            if (kvs_cli_num("engine", opt, argv[i], 1, 4194304, 1, &d) != 0) {
                return 2;
            }

            o->parent_pid = (int) d;

        } else {
            fprintf(stderr, "kvserve engine: unknown option \"%s\"\n", opt);
            kvs_cli_engine_usage(stderr);
            return 2;
        }
    }

    if (o->path == NULL || o->socket == NULL) {
        fprintf(stderr, "kvserve engine: %s\n",
                o->path == NULL ? "no model given" : "no --socket given");
        kvs_cli_engine_usage(stderr);
        return 2;
    }

    if (o->name != NULL && (o->name[0] == '\0' || strlen(o->name) > 255)) {
        fprintf(stderr, "kvserve engine: --name: 1..255 bytes\n");
        return 2;
    }

    return 0;
}


int
kvs_cli_backend_opt(const char *cmd, const char *opt, const char *val,
    int *kind, int *device)
{
    double              d;
    kvs_backend_kind_t  k;

    if (strcmp(opt, "--backend") == 0) {
        if (kvs_backend_parse(val, strlen(val), &k) != KVS_OK) {
            fprintf(stderr, "kvserve %s: --backend: \"%s\", expected cpu, "
                    "cuda or auto\n", cmd, val);
            return 2;
        }

        *kind = (int) k;
        return 1;
    }

    if (strcmp(opt, "--device") == 0) {
        if (kvs_cli_num(cmd, opt, val, 0, 1023, 1, &d) != 0) {
            return 2;
        }

        *device = (int) d;
        return 1;
    }

    return 0;
}


static void
kvs_cli_engine_log(void *data, const char *msg)
{
    char        when[32];
    time_t      now;
    struct tm   tm;

    now = time(NULL);
    localtime_r(&now, &tm);
    strftime(when, sizeof(when), "%Y/%m/%d %H:%M:%S", &tm);

    fprintf(stderr, "%s kvserve engine: %s\n", when, msg);
}


static void
kvs_cli_engine_signal(int signo)
{
    if (kvs_cli_engine_srv != NULL) {
        kvs_srv_stop(kvs_cli_engine_srv);
    }
}


static void
kvs_cli_engine_usage(FILE *f)
{
    fprintf(f,
        "usage: kvserve engine --socket PATH model.gguf [--name NAME]\n"
        "           [--kv-blocks N] [--block B] [--threads T]\n"
        "           [--max-batch-tokens N] [--ctx N] [--parent-pid PID]\n"
        "           [--prefix-cache on|off] [--pin-max BYTES]\n"
        "           [--backend cpu|cuda|auto] [--device N]\n"
        "  serve the model to nginx workers over the unix socket PATH\n"
        "  (docs/engine-process.md) until SIGINT/SIGTERM; --parent-pid:\n"
        "  also exit once PID is gone and no client is connected.\n"
        "  Default KV cache: %d full contexts; the prefix cache is on,\n"
        "  pinning at most a quarter of it per cache scope.  --backend\n"
        "  auto (the default) computes on CUDA device N (0) when it\n"
        "  answers, else on the CPU; cuda fails when it does not.  On\n"
        "  CUDA the default KV cache is 90%% of the device memory left.\n",
        KVS_CLI_ENGINE_SEQS);
}
