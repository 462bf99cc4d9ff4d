/*
 * kvs_test: helpers shared by the cmocka unit tests: where fixtures and
 * scratch files live (from the environment the Makefile sets), and small
 * file utilities.  Header-only so each test stays one .c file.
 *
 *   KVS_FIXTURES  ../shared/fixtures (tests needing it skip, saying why)
 *   KVS_TMP       a scratch directory (build/tmp)
 */

#ifndef KVS_TEST_H
#define KVS_TEST_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>


static inline const char *
kvs_test_env(const char *name, const char *def)
{
    const char  *v;

    v = getenv(name);

    return v != NULL && v[0] != '\0' ? v : def;
}


/* Path under KVS_FIXTURES, or NULL (and a printed note) when absent. */
static inline const char *
kvs_test_fixture(const char *rel)
{
    static char  path[4][1024];
    static int   slot;
    struct stat  st;
    char        *p;

    p = path[slot++ % 4];
    snprintf(p, 1024, "%s/%s",
             kvs_test_env("KVS_FIXTURES", "../shared/fixtures"), rel);

    if (stat(p, &st) != 0) {
        print_message("SKIP: fixture %s is absent (set KVS_FIXTURES)\n", p);
        return NULL;
    }

    return p;
}


static inline const char *
kvs_test_tmp(const char *name)
{
    static char  path[4][1024];
    static int   slot;
    char        *p;

    p = path[slot++ % 4];
    snprintf(p, 1024, "%s/%s", kvs_test_env("KVS_TMP", "/tmp"), name);

    return p;
}


/* kvs_test_tmp(name) with this process's id after it: one file a
 * process, so that tests may run side by side. */
static inline const char *
kvs_test_tmp_pid(const char *name)
{
    static char  path[1024];

    snprintf(path, sizeof(path), "%s.%d", kvs_test_tmp(name),
             (int) getpid());

    return path;
}


/* Reads a whole file into a malloc()ed buffer; NULL on failure. */
static inline uint8_t *
kvs_test_slurp(const char *path, size_t *len)
{
    FILE     *f;
    long      n;
    uint8_t  *buf;

    f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }

    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);

    buf = malloc(n > 0 ? (size_t) n : 1);
    if (buf != NULL && fread(buf, 1, (size_t) n, f) != (size_t) n) {
        free(buf);
        buf = NULL;
    }

    fclose(f);
    *len = (size_t) n;

    return buf;
}

/* A reproducible N(0, 1) sample from *state: an LCG (Knuth's MMIX
 * constants) through Box-Muller, the same on every machine. */
static inline float
kvs_test_gauss(uint64_t *state)
{
    double  u, v;

    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    u = ((*state >> 11) + 1.0) / 9007199254740994.0;
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    v = (*state >> 11) / 9007199254740992.0;

    return (float) (sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v));
}


/*
 * The fake CUDA library's path for a test binary argv0: in its own
 * folder (build/unit/) or, for build/asan/unit/, in build/unit/; "" when
 * neither holds it (the tests that need it then skip).
 */
static inline void
kvs_test_fake_cuda(const char *argv0, char *path, size_t size)
{
    const char  *slash;

    path[0] = '\0';
    slash = argv0 != NULL ? strrchr(argv0, '/') : NULL;
    if (slash == NULL) {
        return;
    }

    snprintf(path, size, "%.*s/libkvs_fake_cuda.so",
             (int) (slash - argv0), argv0);
    if (access(path, R_OK) != 0) {
        snprintf(path, size, "%.*s/../../unit/libkvs_fake_cuda.so",
                 (int) (slash - argv0), argv0);
    }
    if (access(path, R_OK) != 0) {
        /* build/clang/asan/unit: the gcc build's (make's FAKE_CUDA_SO) */
        snprintf(path, size, "%.*s/../../../unit/libkvs_fake_cuda.so",
                 (int) (slash - argv0), argv0);
    }
    if (access(path, R_OK) != 0) {
        path[0] = '\0';
    }
}


#endif /* KVS_TEST_H */
