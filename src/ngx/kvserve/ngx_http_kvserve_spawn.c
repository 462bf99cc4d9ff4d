/*
 * ngx_http_kvserve_spawn: the engine process, from the worker's side:
 * forking it under the lease, the child's life, the lease file's backoff
 * state, and the watchdog that kills a hung engine.
 *
 * One engine process per model per host: whichever worker finds no
 * engine of that model listening and wins the model's flock lease
 * (<engine_dir>/m-<key>.lock) forks it; the child serves that model
 * alone, calls only engine code (kvs_srv) and holds the lease for its
 * life, so a second engine of the model can never start beside it.
 * Each model has its own watchdog and backoff state: one model's crash
 * loop never delays another's engine.
 *
 * The engine exits by itself when the nginx master (or the single
 * process) is gone and no worker is connected: the child watches the
 * master's pidfd.  Nothing is spawned by `nginx -t` (no init_process).
 * It is no worker's: `nginx -s reload` leaves it running.
 *
 * Watchdog: every kvserve_engine_ping each worker sends a PING; an
 * engine from which nothing (PONG, OUT, HELLO) came for
 * kvserve_engine_hang_timeout is hung: the worker SIGKILLs it (the pid
 * from HELLO, or from the lease file while HELLO has not come) and
 * treats it as lost, and the freed lease lets the respawn follow.
 *
 * Models no longer configured: worker 0 of a new configuration sends
 * DRAIN to every engine socket in the directory that is none of its
 * models' (ngx_http_kvserve_engine_sweep), so such an engine serves the
 * older workers to the end and exits, as a changed file's engine does.
 *
 * Respawn backoff: the lease file holds "pid start died delay" (ms of
 * CLOCK_MONOTONIC), read and written only by the worker holding the
 * lease, so every worker shares it: an engine that lived less than
 * NGX_HTTP_KVSERVE_BACKOFF_RESET is replaced no sooner than delay after
 * its death was first seen, and delay doubles from
 * NGX_HTTP_KVSERVE_BACKOFF_MIN to NGX_HTTP_KVSERVE_BACKOFF_MAX.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <dirent.h>
#include <poll.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>

#include "ngx_http_kvserve_engine.h"
#include "server/kvs_srv.h"
#include "base/kvs_clock.h"

#define NGX_HTTP_KVSERVE_BACKOFF_MIN    100     /* ms */
#define NGX_HTTP_KVSERVE_BACKOFF_MAX    5000    /* ms */
#define NGX_HTTP_KVSERVE_BACKOFF_RESET  10000   /* ms: an engine that
                                                   lived this long died
                                                   of something else */
#define NGX_HTTP_KVSERVE_ENGINE_COMM    "kvserve engine"
#define NGX_HTTP_KVSERVE_SWEEP_WAIT     1000    /* ms for a dropped
                                                   model's engine to say
                                                   HELLO */


/* The lease file's content: written by the lease holder only. */
typedef struct {
    ngx_pid_t                 pid;         /* the last engine forked */
    uint64_t                  start;       /* ms, CLOCK_MONOTONIC */
    uint64_t                  died;        /* ms: first seen dead, 0 */
    uint64_t                  delay;       /* ms after died before the
                                              next fork */
} ngx_http_kvserve_lease_t;


static ngx_pid_t ngx_http_kvserve_lease_holder(ngx_http_kvserve_engine_t *e);


static kvs_srv_t                  *ngx_http_kvserve_child_srv;


/* ---- the watchdog ----------------------------------------------------- */

/* Is pid an engine process?  Its comm is ours (PR_SET_NAME): a pid
 * reused by another process since is left alone. */
static ngx_int_t
ngx_http_kvserve_is_engine(ngx_pid_t pid)
{
    int      fd;
    char     path[64], comm[32];
    ssize_t  n;

    ngx_sprintf((u_char *) path, "/proc/%P/comm%Z", pid);

    fd = open(path, O_RDONLY|O_CLOEXEC);
    if (fd == -1) {
        return NGX_DECLINED;
    }

    n = read(fd, comm, sizeof(comm) - 1);
    close(fd);

    if (n <= 0) {
        return NGX_DECLINED;
    }

    comm[n] = '\0';
    if (comm[n - 1] == '\n') {
        comm[n - 1] = '\0';
    }

    return ngx_strcmp(comm, NGX_HTTP_KVSERVE_ENGINE_COMM) == 0
           ? NGX_OK : NGX_DECLINED;
}


void
ngx_http_kvserve_engine_watchdog(ngx_event_t *ev)
{
    kvs_err_t                   err;
    ngx_pid_t                   pid;
    ngx_msec_t                  silent;
    ngx_connection_t           *dummy;
    ngx_http_kvserve_engine_t  *e;

    dummy = ev->data;
    e = dummy->data;

    if (ngx_http_kvserve_engs == NULL || e->c == NULL
        || e->kmcf->engine_ping == 0)
    {
        return;
    }

    silent = ngx_current_msec - e->last_rx;

    if (silent >= e->kmcf->engine_hang_timeout) {
        /* before HELLO the lease file names the engine */
        pid = e->ready ? (ngx_pid_t) e->hello.pid
                       : ngx_http_kvserve_lease_holder(e);

        if (pid > 0 && ngx_http_kvserve_is_engine(pid) == NGX_OK) {
            ngx_log_error(NGX_LOG_ALERT, e->cycle->log, 0,
                          "kvserve: engine %P sent nothing for %M ms: "
                          "hung, killing it (model \"%V\")", pid, silent,
                          &e->model->name);

            if (kill(pid, SIGKILL) == -1 && ngx_errno != NGX_ESRCH) {
                ngx_log_error(NGX_LOG_ALERT, e->cycle->log, ngx_errno,
                              "kvserve: kill(%P, SIGKILL) failed", pid);
            }

        } else {
            ngx_log_error(NGX_LOG_ALERT, e->cycle->log, 0,
                          "kvserve: the engine sent nothing for %M ms "
                          "and no engine process is known: reconnecting",
                          silent);
        }

        ngx_http_kvserve_engine_why(e, "(pid %P) sent nothing for %M ms: "
                                    "hung, killed; restarting", pid,
                                    silent);
        ngx_http_kvserve_engine_lost(e, "hung");
        return;
    }

    if (e->ready) {
        e->ping_seq++;

        if (kvs_wire_enc_empty(&e->wbuf, KVS_WIRE_PING, e->ping_seq, &err)
            == KVS_OK)
        {
            if (ngx_http_kvserve_engine_flush(e) == NGX_ERROR) {
                return;
            }
        }
    }

    if (e->c != NULL && !e->ping.timer_set) {
        ngx_add_timer(&e->ping, e->kmcf->engine_ping);
    }
}


/* ---- the engine process ----------------------------------------------- */

static void
ngx_http_kvserve_child_log(void *data, const char *msg)
{
    ngx_log_t  *log = data;

    ngx_time_update();
    ngx_log_error(NGX_LOG_NOTICE, log, 0, "kvserve: %s", msg);
}


static void
ngx_http_kvserve_child_signal(int signo)
{
    if (ngx_http_kvserve_child_srv != NULL) {
        kvs_srv_stop(ngx_http_kvserve_child_srv);
    }
}


/* Closes every descriptor from 3 up but those in keep[n]. */
static void
ngx_http_kvserve_child_close_fds(int *keep, ngx_uint_t n)
{
    int         t;
    ngx_uint_t  i, j;
    unsigned    from;

    for (i = 0; i < n; i++) {
        for (j = i + 1; j < n; j++) {
            if (keep[j] < keep[i]) {
                t = keep[i];
                keep[i] = keep[j];
                keep[j] = t;
            }
        }
    }

    from = 3;

    for (i = 0; i < n; i++) {
        if (keep[i] < 3 || (unsigned) keep[i] < from) {
            continue;
        }
        if ((unsigned) keep[i] > from) {
            (void) close_range(from, (unsigned) keep[i] - 1, 0);
        }
        from = (unsigned) keep[i] + 1;
    }

    (void) close_range(from, ~0U, 0);
}


/* "engine process for model NAME" in ps, as far as argv's room goes. */
static void
ngx_http_kvserve_child_title(ngx_str_t *name)
{
    u_char  title[128], *p;

    p = ngx_snprintf(title, sizeof(title) - 1, "engine process for model %V",
                     name);
    *p = '\0';

    ngx_setproctitle((char *) title);
}


/*
 * The child's last words: why it could not start or serve, in
 * <engine_dir>/m-<key>.err as "pid message", so that the workers can
 * answer the model's requests with the reason (the lease file is the
 * workers' to write, and a worker may rewrite it while we fail).
 */
static void
ngx_http_kvserve_last_words(ngx_http_kvserve_engine_t *e, const char *msg)
{
    int      fd;
    u_char   path[NGX_MAX_PATH], line[NGX_HTTP_KVSERVE_REASON_LEN], *p;
    size_t   len;

    len = ngx_strlen(e->lock_path);
    if (len < sizeof(".lock") || len + 1 > sizeof(path)) {
        return;
    }

    p = ngx_cpymem(path, e->lock_path, len - (sizeof(".lock") - 1));
    ngx_memcpy(p, ".err", sizeof(".err"));

    fd = open((char *) path, O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0600);
    if (fd == -1) {
        return;
    }

    p = ngx_snprintf(line, sizeof(line) - 1, "%P %s", ngx_getpid(), msg);
    *p++ = '\n';

    (void) write(fd, line, p - line);
    close(fd);
}


/* What the engine pid left as last words (NGX_OK, *msg filled), if it
 * did. */
static ngx_int_t
ngx_http_kvserve_last_words_of(ngx_http_kvserve_engine_t *e, ngx_pid_t pid,
    ngx_str_t *msg, u_char *buf, size_t size)
{
    int        fd;
    u_char     path[NGX_MAX_PATH], *p, *nl;
    size_t     len;
    ssize_t    n;
    ngx_int_t  who;

    len = ngx_strlen(e->lock_path);
    if (len < sizeof(".lock") || len + 1 > sizeof(path)) {
        return NGX_DECLINED;
    }

    p = ngx_cpymem(path, e->lock_path, len - (sizeof(".lock") - 1));
    ngx_memcpy(p, ".err", sizeof(".err"));

    fd = open((char *) path, O_RDONLY|O_CLOEXEC);
    if (fd == -1) {
        return NGX_DECLINED;
    }

    n = read(fd, buf, size);
    close(fd);

    if (n <= 0) {
        return NGX_DECLINED;
    }

    p = ngx_strlchr(buf, buf + n, ' ');
    nl = ngx_strlchr(buf, buf + n, '\n');

    if (p == NULL || nl == NULL || p > nl) {
        return NGX_DECLINED;
    }

    who = ngx_atoi(buf, p - buf);

    if (who == NGX_ERROR || (ngx_pid_t) who != pid) {
        return NGX_DECLINED;        /* another engine's */
    }

    msg->data = p + 1;
    msg->len = nl - (p + 1);

    return NGX_OK;
}


/* The child: engine code only, then _exit. */
static void
ngx_http_kvserve_child(ngx_http_kvserve_engine_t *e, int lease, int pidfd)
{
    int                            fd, rc, logfd, keep[3];
    long                           ncpu;
    cpu_set_t                      cpus;
    sigset_t                       set;
    kvs_err_t                      err;
    ngx_uint_t                     i, n, s;
    ngx_log_t                     *log;
    kvs_srv_t                     *srv;
    kvs_srv_conf_t                 conf;
    kvs_srv_model_t               *sm;
    struct sigaction               sa;
    ngx_http_kvserve_model_t      *m;
    ngx_http_kvserve_main_conf_t  *kmcf;
    static int                     sigs[] = {
        SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH,
        SIGCHLD, SIGALRM, SIGIO, SIGSYS, SIGPIPE
    };

    /* log lines carry our own pid */
    ngx_pid = ngx_getpid();

    kmcf = e->kmcf;
    log = e->cycle->log;
    logfd = log->file != NULL ? log->file->fd : -1;

    /* stdio: nothing in, nothing out, errors to the log */
    fd = open("/dev/null", O_RDWR);
    if (fd != -1) {
        (void) dup2(fd, 0);
        (void) dup2(fd, 1);
        if (logfd == -1 || logfd == 2) {
            (void) dup2(fd, 2);
        }
        if (fd > 2) {
            close(fd);
        }
    }

    if (logfd > 2) {
        (void) dup2(logfd, 2);
    }

    keep[0] = lease;
    keep[1] = pidfd;
    keep[2] = logfd;
    ngx_http_kvserve_child_close_fds(keep, 3);

    ngx_memzero(&sa, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    for (s = 0; s < sizeof(sigs) / sizeof(sigs[0]); s++) {
        (void) sigaction(sigs[s], &sa, NULL);
    }

    sa.sa_handler = SIG_IGN;
    (void) sigaction(SIGPIPE, &sa, NULL);

    sa.sa_handler = ngx_http_kvserve_child_signal;
    (void) sigaction(SIGTERM, &sa, NULL);
    (void) sigaction(SIGINT, &sa, NULL);

    sigemptyset(&set);
    (void) sigprocmask(SIG_SETMASK, &set, NULL);

    /* worker_cpu_affinity is the worker's, not ours */
    ncpu = sysconf(_SC_NPROCESSORS_CONF);
    CPU_ZERO(&cpus);
    for (i = 0; i < (ngx_uint_t) ncpu && i < CPU_SETSIZE; i++) {
        CPU_SET(i, &cpus);
    }
    (void) sched_setaffinity(0, sizeof(cpus), &cpus);

    (void) prctl(PR_SET_NAME, "kvserve engine", 0, 0, 0);

    /* this engine's model alone: the others have engines of their own */
    n = 1;
    m = e->model;

    ngx_http_kvserve_child_title(&m->name);

    sm = calloc(n, sizeof(kvs_srv_model_t));
    if (sm == NULL) {
        _exit(1);
    }

    for (i = 0; i < n; i++) {
        sm[i].name = (const char *) m[i].name.data;   /* NUL-ended */
        sm[i].engine.model = m[i].model;
        sm[i].engine.vocab = m[i].vocab;
        sm[i].engine.n_blocks = m[i].kv_plan.n_blocks;
        sm[i].engine.block_tokens = (uint32_t) kmcf->kv_block;
        sm[i].engine.threads = (unsigned) kmcf->n_threads;
        sm[i].engine.max_batch_tokens = (uint32_t) kmcf->max_batch_tokens;
        sm[i].engine.no_prefix_cache = !kmcf->prefix_cache;
        sm[i].engine.pin_max_bytes = (uint64_t) kmcf->pin_max;
        sm[i].engine.fair_w_prefill = (uint32_t) kmcf->fair_w_prefill;
        sm[i].engine.fair_w_decode = (uint32_t) kmcf->fair_w_decode;
        sm[i].engine.fair_kv_max_milli = (uint32_t) kmcf->fair_kv_max_milli;
        sm[i].engine.req_kv_max_milli = (uint32_t) kmcf->req_kv_max_milli;
        sm[i].engine.pool_min_tokens = (uint32_t) kmcf->pool_min_tokens;
        sm[i].engine.pool_share_milli = (uint32_t) kmcf->pool_share_milli;
        sm[i].engine.pool_max_prefill = (uint32_t) kmcf->pool_max_prefill;
        sm[i].engine.pool_chunk = (uint32_t) kmcf->pool_chunk;
        sm[i].engine.queue_timeout_ms = (uint32_t) kmcf->queue_timeout;
        sm[i].engine.backend = (kvs_backend_kind_t) kmcf->backend;
        sm[i].engine.device = (int) kmcf->device;
        sm[i].engine.kv_dtype_set = kmcf->kv_dtype != NGX_CONF_UNSET_UINT;
        sm[i].engine.kv_dtype = (uint32_t) m[i].kv_dtype;

        if (m[i].tier != NULL) {
            sm[i].engine.tier_path = (const char *) m[i].tier->path.data;
            sm[i].engine.tier_size = (uint64_t) m[i].tier->size;
            sm[i].engine.tier_model = m[i].tier_tag;
            sm[i].engine.tier_load_always = (int) m[i].tier->load_always;
        }

        if (m[i].thost != NULL) {
            sm[i].engine.tier_host_size = (uint64_t) m[i].thost->size;
        }

        /* a fraction is of the device's memory on CUDA (the plan's
         * n_blocks are the CPU's): this model's part of it */
        sm[i].engine.kv_fraction = m[i].kv_fraction;

        sm[i].engine.lora_slots = (uint32_t) kmcf->lora_slots;

        if (ngx_http_kvserve_lora_paths(&m[i], &sm[i].engine) != NGX_OK) {
            _exit(1);
        }
    }

    ngx_memzero(&conf, sizeof(conf));
    conf.socket_path = (const char *) e->sock_path;
    conf.models = sm;
    conf.n_models = (uint32_t) n;
    conf.parent_pidfd = pidfd;
    conf.lease_fd = lease;      /* ours alone: the worker closed its copy
                                   after the fork; DRAIN releases it */
    conf.log = ngx_http_kvserve_child_log;
    conf.log_data = log;

    rc = 1;

    if (kvs_srv_new(&srv, &conf, &err) != KVS_OK) {
        ngx_time_update();
        ngx_log_error(NGX_LOG_ALERT, log, 0, "kvserve: engine: %s",
                      err.msg);
        ngx_http_kvserve_last_words(e, err.msg);
        _exit(1);
    }

    ngx_http_kvserve_child_srv = srv;

    if (kvs_srv_run(srv, &err) == KVS_OK) {
        rc = 0;

    } else {
        ngx_time_update();
        ngx_log_error(NGX_LOG_ALERT, log, 0, "kvserve: engine: %s",
                      err.msg);
        ngx_http_kvserve_last_words(e, err.msg);
    }

    ngx_http_kvserve_child_srv = NULL;
    kvs_srv_free(srv);

    /* no atexit handlers, no stdio of the worker's to flush */
    _exit(rc);
}


/* ---- engines of models no longer configured ----------------------------- */

/* DRAIN to the engine listening at path, if one does; then closed. */
static void
ngx_http_kvserve_engine_drain_path(ngx_cycle_t *cycle, const char *path)
{
    int                  fd;
    u_char               hello[512];
    ssize_t              n;
    kvs_buf_t            b;
    kvs_err_t            err;
    struct pollfd        pfd;
    struct sockaddr_un   sa;

    if (ngx_strlen(path) >= sizeof(sa.sun_path)) {
        return;
    }

    fd = socket(AF_UNIX, SOCK_STREAM|SOCK_NONBLOCK|SOCK_CLOEXEC, 0);
    if (fd == -1) {
        return;
    }

    ngx_memzero(&sa, sizeof(sa));
    sa.sun_family = AF_UNIX;
    ngx_cpystrn((u_char *) sa.sun_path, (u_char *) path,
                sizeof(sa.sun_path));

    /* nobody listening (a path left behind) or a full backlog: nothing
     * to drain now */
    if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == -1) {
        close(fd);
        return;
    }

    /* its HELLO first: an engine that finds the connection closed while
     * it writes HELLO drops the client unread, DRAIN and all */
    pfd.fd = fd;
    pfd.events = POLLIN;
    pfd.revents = 0;

    if (poll(&pfd, 1, NGX_HTTP_KVSERVE_SWEEP_WAIT) != 1
        || recv(fd, hello, sizeof(hello), 0) <= 0)
    {
        ngx_log_error(NGX_LOG_WARN, cycle->log, 0,
                      "kvserve: engine at \"%s\" said nothing within %d ms: "
                      "not drained", path, NGX_HTTP_KVSERVE_SWEEP_WAIT);
        close(fd);
        return;
    }

    ngx_memzero(&b, sizeof(b));

    if (kvs_wire_enc_drain(&b, &err) == KVS_OK) {
        n = send(fd, b.data, b.len, MSG_NOSIGNAL);

        if (n == (ssize_t) b.len) {
            ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
                          "kvserve: engine at \"%s\" serves other models "
                          "than this configuration's: DRAIN sent (its model "
                          "is no longer configured)", path);
        }
    }

    kvs_buf_free(&b);
    close(fd);
}


void
ngx_http_kvserve_engine_sweep(ngx_cycle_t *cycle,
    ngx_http_kvserve_engine_t *engs, ngx_uint_t n)
{
    DIR            *dir;
    size_t          len;
    ngx_uint_t      i, ours;
    u_char          path[NGX_MAX_PATH], *p;
    const char     *base;
    struct dirent  *de;

    if (n == 0) {
        return;
    }

    /* the directory of the first model's socket: engine_dir */
    base = strrchr((char *) engs[0].sock_path, '/');
    if (base == NULL) {
        return;
    }

    len = (u_char *) base - engs[0].sock_path;
    if (len + 2 + 256 > sizeof(path)) {
        return;
    }

    p = ngx_cpymem(path, engs[0].sock_path, len);
    *p = '\0';

    dir = opendir((char *) path);
    if (dir == NULL) {
        return;
    }

    while ((de = readdir(dir)) != NULL) {
        len = ngx_strlen(de->d_name);

        /* "m-<16 hex>.sock", or the one engine of older builds */
        if (!(len == sizeof("m-0123456789abcdef.sock") - 1
              && ngx_strncmp(de->d_name, "m-", 2) == 0
              && ngx_strcmp(de->d_name + len - 5, ".sock") == 0)
            && ngx_strcmp(de->d_name, "engine.sock") != 0)
        {
            continue;
        }

        ours = 0;
        for (i = 0; i < n; i++) {
            base = strrchr((char *) engs[i].sock_path, '/');
            if (base != NULL && ngx_strcmp(base + 1, de->d_name) == 0) {
                ours = 1;
                break;
            }
        }

        if (ours) {
            continue;
        }

        ngx_sprintf(p, "/%s%Z", de->d_name);
        ngx_http_kvserve_engine_drain_path(cycle, (char *) path);
        *p = '\0';
    }

    closedir(dir);
}


/* ---- the lease file: backoff state, the engine's pid ------------------ */

/* NGX_OK with *l filled, NGX_DECLINED for an empty, foreign or stale
 * (from before a reboot) file. */
static ngx_int_t
ngx_http_kvserve_lease_read(int fd, ngx_http_kvserve_lease_t *l,
    uint64_t now)
{
    char                pid_s[24];
    ssize_t             n;
    long long           pid;
    unsigned long long  start, died, delay;
    char                buf[128];

    n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0) {
        return NGX_DECLINED;
    }

    buf[n] = '\0';

    if (sscanf(buf, "%23s %llu %llu %llu", pid_s, &start, &died, &delay)
        != 4)
    {
        return NGX_DECLINED;
    }

    pid = strtoll(pid_s, NULL, 10);

    if (pid <= 0 || start > now || died > now
        || delay > NGX_HTTP_KVSERVE_BACKOFF_MAX)
    {
        return NGX_DECLINED;
    }

    l->pid = (ngx_pid_t) pid;
    l->start = start;
    l->died = died;
    l->delay = delay;

    return NGX_OK;
}


static void
ngx_http_kvserve_lease_write(ngx_http_kvserve_engine_t *e, int fd,
    const ngx_http_kvserve_lease_t *l)
{
    u_char   buf[128], *p;
    ssize_t  n;

    p = ngx_snprintf(buf, sizeof(buf), "%P %uL %uL %uL\n", l->pid,
                     l->start, l->died, l->delay);

    n = pwrite(fd, buf, p - buf, 0);

    if (n != p - buf || ftruncate(fd, p - buf) == -1) {
        ngx_log_error(NGX_LOG_ALERT, e->cycle->log, ngx_errno,
                      "kvserve: writing \"%s\" failed", e->lock_path);
    }
}


/* The engine holding the lease, from the file: 0 when the lease is free
 * or names no one. */
static ngx_pid_t
ngx_http_kvserve_lease_holder(ngx_http_kvserve_engine_t *e)
{
    int                       fd;
    ngx_pid_t                 pid;
    ngx_http_kvserve_lease_t  l;

    fd = open((char *) e->lock_path, O_RDONLY|O_CLOEXEC);
    if (fd == -1) {
        return 0;
    }

    pid = 0;

    if (flock(fd, LOCK_SH|LOCK_NB) == 0) {
        /* free: nobody to blame */
        (void) flock(fd, LOCK_UN);

    } else if (ngx_http_kvserve_lease_read(fd, &l,
                                           kvs_now_ns() / 1000000)
               == NGX_OK)
    {
        pid = l.pid;
    }

    close(fd);

    return pid;
}


/*
 * Takes the lease and forks the engine; when the lease is held, an
 * engine is running or starting and the reconnect timer will find it.
 * With the lease, the file says whether the last engine died young, and
 * then how long to wait before the next fork.
 */
void
ngx_http_kvserve_engine_spawn(ngx_http_kvserve_engine_t *e)
{
    int                       lease, pidfd;
    pid_t                     pid, watch;
    u_char                    wbuf[NGX_HTTP_KVSERVE_REASON_LEN];
    uint64_t                  ms;
    ngx_str_t                 words;
    ngx_msec_t                now;
    ngx_http_kvserve_lease_t  l;

    now = ngx_current_msec;

    /* one try per 100 ms per worker, whatever the reconnect rate */
    if (e->last_spawn != 0 && now - e->last_spawn < 100) {
        return;
    }

    e->last_spawn = now ? now : 1;

    lease = open((char *) e->lock_path, O_RDWR|O_CREAT|O_CLOEXEC, 0600);
    if (lease == -1) {
        ngx_log_error(NGX_LOG_ALERT, e->cycle->log, ngx_errno,
                      "kvserve: open(\"%s\") failed", e->lock_path);
        return;
    }

    if (flock(lease, LOCK_EX|LOCK_NB) == -1) {
        close(lease);
        return;
    }

    ms = kvs_now_ns() / 1000000;

    if (ngx_http_kvserve_lease_read(lease, &l, ms) != NGX_OK) {
        ngx_memzero(&l, sizeof(l));

    } else if (l.died == 0) {
        /* the first to see the last engine gone */
        l.died = ms;

        if (ms - l.start >= NGX_HTTP_KVSERVE_BACKOFF_RESET) {
            l.delay = 0;

        } else {
            ngx_log_error(NGX_LOG_WARN, e->cycle->log, 0,
                          "kvserve: engine %P lived %uL ms: the next one "
                          "starts in %uL ms (model \"%V\")", l.pid,
                          ms - l.start, l.delay, &e->model->name);
        }

        ngx_http_kvserve_lease_write(e, lease, &l);
    }

    /* an engine that could not start said why */
    ngx_str_null(&words);

    if (l.pid != 0) {
        (void) ngx_http_kvserve_last_words_of(e, l.pid, &words, wbuf,
                                              sizeof(wbuf));
    }

    if (l.died != 0 && ms - l.died < l.delay) {
        if (words.len) {
            ngx_http_kvserve_engine_why(e, "(pid %P) failed after %uL ms: "
                                        "%V; the next one starts in %uL ms",
                                        l.pid, l.died - l.start, &words,
                                        l.delay - (ms - l.died));
        } else {
            ngx_http_kvserve_engine_why(e, "(pid %P) died after %uL ms; "
                                        "the next one starts in %uL ms",
                                        l.pid, l.died - l.start,
                                        l.delay - (ms - l.died));
        }

        close(lease);
        return;
    }

    /* with master_process off there is no master: watch ourselves */
    watch = (ngx_process == NGX_PROCESS_SINGLE) ? ngx_pid : ngx_parent;

    pidfd = (int) syscall(SYS_pidfd_open, watch, 0);
    if (pidfd == -1) {
        ngx_log_error(NGX_LOG_ALERT, e->cycle->log, ngx_errno,
                      "kvserve: pidfd_open(%P) failed: an engine that "
                      "could outlive nginx is not started", watch);
        close(lease);
        return;
    }

    pid = fork();

    if (pid == 0) {
        ngx_http_kvserve_child(e, lease, pidfd);
        _exit(1);
    }

    if (pid == -1) {
        ngx_log_error(NGX_LOG_ALERT, e->cycle->log, ngx_errno,
                      "kvserve: fork() of the engine failed");

    } else {
        ngx_log_error(NGX_LOG_NOTICE, e->cycle->log, 0,
                      "kvserve: worker %P started engine process %P for "
                      "model \"%V\"", ngx_pid, pid, &e->model->name);

        if (words.len) {
            ngx_http_kvserve_engine_why(e, "(pid %P) is starting; the last "
                                        "one (pid %P) failed: %V", pid,
                                        l.pid, &words);
        } else {
            ngx_http_kvserve_engine_why(e, "(pid %P) is starting", pid);
        }

        /* the next young death waits twice as long as this one would */
        l.delay = (l.died == 0 || l.delay == 0)
                  ? NGX_HTTP_KVSERVE_BACKOFF_MIN
                  : ngx_min(l.delay * 2, NGX_HTTP_KVSERVE_BACKOFF_MAX);
        l.pid = pid;
        l.start = ms;
        l.died = 0;

        /* still under the lease: the child shares this open file */
        ngx_http_kvserve_lease_write(e, lease, &l);
    }

    /* the child's copy of the open file keeps the lock */
    close(lease);
    close(pidfd);
}
