/*
 * kvserve triage URL [--interval S] [--model NAME] [--max HOP=VALUE]
 *                    [--save PREFIX]
 *
 * Scrapes a running server's /metrics twice, S seconds apart (5 by
 * default), and prints the walk of docs/triage.md: each hop in order
 * with its figures over the interval, "OUT" where one is past its
 * threshold, and the guilty hop (kvs_triage.c computes, this file only
 * fetches and prints).  --save writes the two scrapes as they came to
 * PREFIX-1.prom and PREFIX-2.prom (for a report, or a test's data).
 * Exit status: 0 every hop within bounds, 1 a hop is guilty, 2 usage,
 * 3 the server could not be scraped.
 *
 * The HTTP client is the least that reads /metrics: plain http://, one
 * HTTP/1.0 GET (so no chunked body), the whole answer read until the
 * server closes, 10 s for any one read or write.
 */

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "kvs_cli.h"
#include "base/kvs_buf.h"
#include "base/kvs_clock.h"
#include "metrics/kvs_prom.h"
#include "metrics/kvs_triage.h"

#define KVS_TRIAGE_IO_S     10
#define KVS_TRIAGE_MAX_BODY (64u << 20)

typedef struct {
    char  host[256];
    char  port[8];
    char  path[1024];
} kvs_cli_url_t;


/* http://host[:port][/path]; the path defaults to /metrics. */
static int
kvs_cli_url(const char *s, kvs_cli_url_t *u)
{
    size_t       n;
    const char  *p, *slash, *colon;

    if (strncmp(s, "http://", 7) != 0) {
        return -1;
    }

    s += 7;
    slash = strchr(s, '/');
    p = slash != NULL ? slash : s + strlen(s);

    colon = memchr(s, ':', (size_t) (p - s));
    n = (size_t) ((colon != NULL ? colon : p) - s);

    if (n == 0 || n >= sizeof(u->host)) {
        return -1;
    }

    memcpy(u->host, s, n);
    u->host[n] = '\0';

    if (colon != NULL) {
        n = (size_t) (p - colon - 1);
        if (n == 0 || n >= sizeof(u->port)
            || strspn(colon + 1, "0123456789") < n)
        {
            return -1;
        }
        memcpy(u->port, colon + 1, n);
        u->port[n] = '\0';

    } else {
        strcpy(u->port, "80");
    }

    if (slash == NULL || slash[1] == '\0') {
        strcpy(u->path, "/metrics");
    } else if (strlen(slash) < sizeof(u->path)
               && strpbrk(slash, " \r\n") == NULL)
    {
        strcpy(u->path, slash);
    } else {
        return -1;
    }

    return 0;
}


static int
kvs_cli_connect(const kvs_cli_url_t *u)
{
    int               fd, rc;
    struct timeval    tv;
    struct addrinfo   hints, *res, *ai;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;

    rc = getaddrinfo(u->host, u->port, &hints, &res);
    if (rc != 0) {
        fprintf(stderr, "kvserve triage: %s: %s\n", u->host,
                gai_strerror(rc));
        return -1;
    }

    fd = -1;
    tv.tv_sec = KVS_TRIAGE_IO_S;
    tv.tv_usec = 0;

    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0) {
            continue;
        }

        (void) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        (void) setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));

        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            break;
        }

        close(fd);
        fd = -1;
    }

    freeaddrinfo(res);

    if (fd < 0) {
        fprintf(stderr, "kvserve triage: cannot connect to %s:%s: %s\n",
                u->host, u->port, strerror(errno));
    }

    return fd;
}


/* The body of a 200 answer to GET u->path into body. */
static int
kvs_cli_get(const kvs_cli_url_t *u, kvs_buf_t *body)
{
    int        fd, status, rc;
    char       req[1400], buf[16384], *end;
    size_t     off, len, head;
    ssize_t    n;
    kvs_buf_t  resp;

    fd = kvs_cli_connect(u);
    if (fd < 0) {
        return -1;
    }

    len = (size_t) snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\n"
                            "Host: %s\r\nAccept: text/plain\r\n\r\n",
                            u->path, u->host);

    for (off = 0; off < len; off += (size_t) n) {
        n = write(fd, req + off, len - off);
        if (n <= 0) {
            fprintf(stderr, "kvserve triage: write: %s\n", strerror(errno));
            close(fd);
            return -1;
        }
    }

    memset(&resp, 0, sizeof(resp));
    rc = 0;

    for ( ;; ) {
        n = read(fd, buf, sizeof(buf));
        if (n == 0) {
            break;
        }
        if (n < 0 || resp.len > KVS_TRIAGE_MAX_BODY
            || kvs_buf_append(&resp, buf, (size_t) n) != KVS_OK)
        {
            fprintf(stderr, "kvserve triage: read: %s\n",
                    n < 0 ? strerror(errno) : "answer too large");
            rc = -1;
            break;
        }
    }

    close(fd);

    if (rc == 0) {
        end = resp.len >= 12 ? memmem(resp.data, resp.len, "\r\n\r\n", 4)
                             : NULL;
        status = 0;

        if (end != NULL && sscanf((char *) resp.data, "HTTP/1.%*d %d",
                                  &status) == 1 && status == 200)
        {
            head = (size_t) (end - (char *) resp.data) + 4;
            if (kvs_buf_append(body, (char *) resp.data + head,
                               resp.len - head) != KVS_OK)
            {
                rc = -1;
            }

        } else {
            fprintf(stderr, "kvserve triage: http://%s:%s%s answered %s%d\n",
                    u->host, u->port, u->path,
                    end == NULL ? "no HTTP header, status " : "status ",
                    status);
            rc = -1;
        }
    }

    kvs_buf_free(&resp);

    return rc;
}


/* Scrape n (1 or 2) into p; its text also to PREFIX-n.prom when save
 * is not NULL. */
static int
kvs_cli_scrape(const kvs_cli_url_t *u, kvs_prom_t *p, const char *save,
    int n)
{
    int        rc;
    char       path[4096];
    FILE      *f;
    kvs_buf_t  body;
    kvs_err_t  err;

    memset(&body, 0, sizeof(body));

    if (kvs_cli_get(u, &body) != 0) {
        kvs_buf_free(&body);
        return -1;
    }

    rc = 0;

    if (save != NULL) {
        snprintf(path, sizeof(path), "%s-%d.prom", save, n);
        f = fopen(path, "w");
        if (f == NULL || fwrite(body.data, 1, body.len, f) != body.len
            || fclose(f) != 0)
        {
            fprintf(stderr, "kvserve triage: %s: %s\n", path,
                    strerror(errno));
            rc = -1;
        }
    }

    if (rc == 0
        && kvs_prom_parse(p, (const char *) body.data, body.len, &err)
           != KVS_OK)
    {
        fprintf(stderr, "kvserve triage: %s\n", err.msg);
        rc = -1;
    }

    kvs_buf_free(&body);

    return rc;
}


static void
kvs_cli_triage_usage(void)
{
    fprintf(stderr, "usage: kvserve triage http://HOST[:PORT][/PATH] "
            "[--interval S] [--model NAME]\n"
            "                      [--max HOP=VALUE ...] "
            "[--save PREFIX]\n"
            "hops: network queueing tokenization limit route prefill "
            "kv_cache batching decode\n");
}


int
kvs_cli_triage(int argc, char **argv)
{
    int              i, hop, rc;
    char            *eq;
    double           interval, v, t0, t1, max[KVS_TRIAGE_N];
    kvs_buf_t        out;
    kvs_err_t        err;
    kvs_prom_t       a, b;
    const char      *url, *model, *save;
    kvs_triage_t     t;
    kvs_cli_url_t    u;
    struct timespec  ts;

    url = NULL;
    model = NULL;
    save = NULL;
    interval = 5;

    for (i = 0; i < KVS_TRIAGE_N; i++) {
        max[i] = -1;
    }

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--interval") == 0 && i + 1 < argc) {
            if (kvs_cli_num("triage", "--interval", argv[++i], 0.1, 3600, 0,
                            &interval) != 0)
            {
                return 2;
            }

        } else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
            model = argv[++i];

        } else if (strcmp(argv[i], "--save") == 0 && i + 1 < argc) {
            save = argv[++i];

        } else if (strcmp(argv[i], "--max") == 0 && i + 1 < argc) {
            i++;
            eq = strchr(argv[i], '=');
            if (eq != NULL) {
                *eq = '\0';
            }
            hop = kvs_triage_hop_by_name(argv[i]);
            if (eq == NULL || hop < 0) {
                fprintf(stderr, "kvserve triage: --max: expected HOP=VALUE "
                        "with a hop of the walk, got \"%s\"\n", argv[i]);
                kvs_cli_triage_usage();
                return 2;
            }
            if (kvs_cli_num("triage", "--max", eq + 1, 0, 1e9, 0, &v) != 0) {
                return 2;
            }
            max[hop] = v;

        } else if (argv[i][0] != '-' && url == NULL) {
            url = argv[i];

        } else {
            kvs_cli_triage_usage();
            return 2;
        }
    }

    if (url == NULL || kvs_cli_url(url, &u) != 0) {
        if (url != NULL) {
            fprintf(stderr, "kvserve triage: not an http:// URL: %s\n", url);
        }
        kvs_cli_triage_usage();
        return 2;
    }

    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));

    if (kvs_cli_scrape(&u, &a, save, 1) != 0) {
        return 3;
    }

    t0 = kvs_now_s();

    ts.tv_sec = (time_t) interval;
    ts.tv_nsec = (long) ((interval - (double) ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        /* the rest of the interval */
    }

    t1 = kvs_now_s();

    if (kvs_cli_scrape(&u, &b, save, 2) != 0) {
        kvs_prom_free(&a);
        return 3;
    }

    memset(&out, 0, sizeof(out));

    rc = kvs_triage_compute(&a, &b, t1 - t0, model, max, &t, &err);
    if (rc == KVS_OK) {
        rc = kvs_triage_write(&t, &out, &err);
    }

    kvs_prom_free(&a);
    kvs_prom_free(&b);

    if (rc != KVS_OK) {
        fprintf(stderr, "kvserve triage: %s\n", err.msg);
        kvs_buf_free(&out);
        return 3;
    }

    fwrite(out.data, 1, out.len, stdout);
    kvs_buf_free(&out);

    return t.guilty >= 0 ? 1 : 0;
}
