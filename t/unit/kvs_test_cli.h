/*
 * kvs_test_cli.h: running the kvserve CLI ($KVS_CLI) from a unit test
 * through the shell: its path (or a SKIP note when it is not built), and
 * one run's output and exit status, into a growing buffer the caller
 * frees or into a fixed one (cut at its size).
 */

#ifndef KVS_TEST_CLI_H
#define KVS_TEST_CLI_H

#include "kvs_test.h"

#include <sys/wait.h>
#include <unistd.h>


typedef struct {
    char    *out;                     /* what the command printed, NUL-
                                         ended; malloc'ed, the caller's */
    size_t   len;
    int      status;                  /* exit status, -1 if not exited */
} run_t;


/* The CLI's path, or NULL (and a SKIP note) when it is not set up. */
static inline const char *
kvs_test_cli_path(void)
{
    const char  *cli;

    cli = getenv("KVS_CLI");

    if (cli == NULL || cli[0] == '\0' || access(cli, X_OK) != 0) {
        print_message("SKIP: KVS_CLI is not an executable (%s)\n",
                      cli != NULL ? cli : "unset");
        return NULL;
    }

    return cli;
}


/* Runs "'$KVS_CLI' ARGS" (ARGS already shell-quoted, redirections
 * included) and keeps all it printed on stdout. */
static inline void
kvs_test_cli_run(const char *args, run_t *r)
{
    int      st;
    char     cmd[8192];
    FILE    *f;
    size_t   n, cap;

    snprintf(cmd, sizeof(cmd), "'%s' %s", getenv("KVS_CLI"), args);

    f = popen(cmd, "r");
    assert_non_null(f);

    cap = 4096;
    r->out = malloc(cap);
    assert_non_null(r->out);
    r->len = 0;

    while ((n = fread(r->out + r->len, 1, cap - r->len - 1, f)) > 0) {
        r->len += n;

        if (cap - r->len - 1 == 0) {
            cap *= 2;
            r->out = realloc(r->out, cap);
            assert_non_null(r->out);
        }
    }

    r->out[r->len] = '\0';
    st = pclose(f);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}


/* Runs "'$KVS_CLI' ARGS 2>&1"; at most size - 1 bytes of its output
 * into out[size]; its exit status. */
static inline int
kvs_test_cli_run_buf(const char *args, char *out, size_t size)
{
    int     st;
    char    cmd[8192];
    FILE   *f;
    size_t  n;

    snprintf(cmd, sizeof(cmd), "'%s' %s 2>&1", getenv("KVS_CLI"), args);
    f = popen(cmd, "r");
    assert_non_null(f);
    n = fread(out, 1, size - 1, f);
    out[n] = '\0';
    st = pclose(f);

    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#endif /* KVS_TEST_CLI_H */
