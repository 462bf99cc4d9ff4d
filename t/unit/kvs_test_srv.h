/*
 * kvs_test_srv: helpers shared by the tests that run the engine process's
 * server (src/server) in a thread and talk to it over its socket like
 * the nginx workers do: starting and stopping the server thread, and a
 * blocking test client that reads whole frames.  The caller loads the
 * model and fills s->sm (the served model) before starting.  Any failure
 * fails the test.  Header-only, like kvs_test.h.
 */

#ifndef KVS_TEST_SRV_H
#define KVS_TEST_SRV_H

#include "kvs_test.h"
#include "kvs_test_model.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "server/kvs_srv.h"
#include "wire/kvs_wire.h"


typedef struct {
    kvs_srv_t        *srv;
    pthread_t         thr;
    int               rc;             /* kvs_srv_run's, once joined */
    char              path[256];      /* the socket */
    kvs_test_model_t  md;             /* the caller's to load and free */
    kvs_srv_model_t   sm;             /* the caller's to fill */
} kvs_test_srv_t;

typedef struct {
    int               fd;
    kvs_buf_t         in;
    size_t            off;            /* of the next frame in `in` */
    uint8_t          *frame;          /* the last frame read, in `in` */
    kvs_wire_hdr_t    h;
    kvs_wire_hello_t  hello;
} kvs_test_cl_t;


static inline void *
kvs_test_srv_main(void *arg)
{
    kvs_err_t        err;
    kvs_test_srv_t  *s;

    s = arg;
    s->rc = kvs_srv_run(s->srv, &err);

    if (s->rc != KVS_OK) {
        print_message("kvs_srv_run: %s\n", err.msg);
    }

    return NULL;
}


static inline void
kvs_test_srv_log(void *data, const char *msg)
{
    if (getenv("KVS_TEST_VERBOSE") != NULL) {
        print_message("server: %s\n", msg);
    }
}


/* Starts the server of s->sm on a fresh socket path named after tag and
 * this pid; parent_fd and lease_fd (or -1) and out_limit (0: the
 * default) go to its configuration. */
static inline void
kvs_test_srv_start(kvs_test_srv_t *s, const char *tag, size_t out_limit,
    int parent_fd, int lease_fd)
{
    char            name[64];
    kvs_err_t       err;
    kvs_srv_conf_t  conf;
    static int      n;

    snprintf(name, sizeof(name), "%s.%d.%d.sock", tag, (int) getpid(), n++);
    snprintf(s->path, sizeof(s->path), "%s", kvs_test_tmp(name));
    unlink(s->path);

    memset(&conf, 0, sizeof(conf));
    conf.socket_path = s->path;
    conf.models = &s->sm;
    conf.n_models = 1;
    conf.parent_pidfd = parent_fd;
    conf.lease_fd = lease_fd;
    conf.out_limit = out_limit;
    conf.log = kvs_test_srv_log;

    if (kvs_srv_new(&s->srv, &conf, &err) != KVS_OK) {
        fail_msg("kvs_srv_new: %s", err.msg);
    }

    assert_int_equal(pthread_create(&s->thr, NULL, kvs_test_srv_main, s),
                     0);
}


/* Waits for the server thread to end (it was stopped, or it left by
 * itself) and frees the server; the model stays. */
static inline void
kvs_test_srv_join(kvs_test_srv_t *s)
{
    assert_int_equal(pthread_join(s->thr, NULL), 0);
    assert_int_equal(s->rc, KVS_OK);
    kvs_srv_free(s->srv);
    s->srv = NULL;
}


static inline void
kvs_test_srv_stop(kvs_test_srv_t *s)
{
    kvs_srv_stop(s->srv);
    kvs_test_srv_join(s);
}


/* Reads until a whole frame is there, waiting at most ms for each read;
 * 0 with cl->frame and cl->h set, 1 on EOF, 2 on time out. */
static inline int
kvs_test_cl_read(kvs_test_cl_t *cl, int ms)
{
    int             rc;
    ssize_t         got;
    kvs_err_t       err;
    struct pollfd   pfd;

    if (cl->off > 0) {
        memmove(cl->in.data, cl->in.data + cl->off, cl->in.len - cl->off);
        cl->in.len -= cl->off;
        cl->off = 0;
    }

    for ( ;; ) {
        rc = kvs_wire_frame(cl->in.data, cl->in.len, &cl->h, &err);
        if (rc == KVS_OK) {
            cl->frame = cl->in.data;
            cl->off = cl->h.len;
            return 0;
        }

        if (rc != KVS_WIRE_AGAIN) {
            fail_msg("client: bad frame from the server: %s", err.msg);
        }

        pfd.fd = cl->fd;
        pfd.events = POLLIN;

        if (poll(&pfd, 1, ms) != 1) {
            return 2;
        }

        assert_int_equal(kvs_buf_reserve(&cl->in, 65536), KVS_OK);
        got = read(cl->fd, cl->in.data + cl->in.len,
                   cl->in.cap - cl->in.len);

        if (got == 0 || (got < 0 && errno == ECONNRESET)) {
            return 1;
        }

        assert_true(got > 0);
        cl->in.len += (size_t) got;
    }
}


/* Connects to the server at path and reads its HELLO (the engine speaks
 * first) into cl->hello, waiting at most ms. */
static inline void
kvs_test_cl_connect(kvs_test_cl_t *cl, const char *path, int ms)
{
    kvs_err_t           err;
    struct sockaddr_un  sa;

    memset(cl, 0, sizeof(*cl));
    cl->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(cl->fd >= 0);

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    assert_true(strlen(path) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, path, strlen(path));

    if (connect(cl->fd, (struct sockaddr *) &sa, sizeof(sa)) != 0) {
        fail_msg("connect %s: %s", path, strerror(errno));
    }

    assert_int_equal(kvs_test_cl_read(cl, ms), 0);
    assert_int_equal(cl->h.type, KVS_WIRE_HELLO);
    assert_int_equal(kvs_wire_dec_hello(cl->frame, cl->h.len, &cl->hello,
                                        &err), KVS_OK);
}


/* Writes all of p[0, n). */
static inline void
kvs_test_cl_send(kvs_test_cl_t *cl, const void *p, size_t n)
{
    ssize_t  w;

    while (n > 0) {
        w = send(cl->fd, p, n, MSG_NOSIGNAL);
        assert_true(w > 0);
        p = (const uint8_t *) p + w;
        n -= (size_t) w;
    }
}


static inline void
kvs_test_cl_close(kvs_test_cl_t *cl)
{
    if (cl->fd >= 0) {
        close(cl->fd);
        cl->fd = -1;
    }

    kvs_buf_free(&cl->in);
}

#endif /* KVS_TEST_SRV_H */
