/*
 * bench_gguf: time to open and fully validate GGUF files with our reader
 * (mmap, header walk, every string and array checked, tensor bounds) and
 * to read the hyper-parameters.  Prints "<file> <microseconds per open>".
 * usage: bench_gguf [-n N] file.gguf...
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/kvs_gguf.h"
#include "model/kvs_hparams.h"


static double
now_us(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec * 1e6 + (double) ts.tv_nsec / 1e3;
}


int
main(int argc, char **argv)
{
    int            i, k, n;
    double         t0, best, t;
    kvs_err_t      err;
    kvs_gguf_t    *g;
    kvs_hparams_t  hp;

    n = 20;
    i = 1;
    if (argc > 2 && strcmp(argv[1], "-n") == 0) {
        n = atoi(argv[2]);
        i = 3;
    }

    for (; i < argc; i++) {
        best = 1e30;

        /* best of n: the page cache is warm after the first */
        for (k = 0; k < n; k++) {
            t0 = now_us();
            if (kvs_gguf_open(&g, argv[i], &err) != KVS_OK) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            (void) kvs_hparams_read(&hp, g, NULL);
            kvs_gguf_close(g);
            t = now_us() - t0;
            best = t < best ? t : best;
        }

        printf("%s %.1f\n", argv[i], best);
    }

    return 0;
}
