/*
 * kvs_cli_quantize: `kvserve quantize IN.gguf OUT.gguf --type MIX
 * [--threads N]`: a copy of a model with its weights quantized by one of
 * the usual mixes (src/gen/kvs_quantize.c holds the mixes and does the
 * work), on N threads (default: the online CPUs; the bytes are the same
 * for any N).
 *
 * Exit status: 0 written, 1 the file could not be read, converted or
 * written (OUT is left as it was), 2 a usage error (an unknown mix lists
 * the known ones).
 */

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/kvs_threads.h"

#include "gen/kvs_quantize.h"
#include "kvs_cli.h"


int
kvs_cli_quantize(int argc, char **argv)
{
    int                     i;
    long                    cpus;
    char                    names[256];
    double                  d;
    unsigned                threads;
    const char             *in, *out, *type;
    kvs_err_t               err;
    const kvs_quant_mix_t  *mix;

    in = NULL;
    out = NULL;
    type = NULL;
    cpus = sysconf(_SC_NPROCESSORS_ONLN);
    threads = cpus < 1 ? 1 : cpus > KVS_THREADS_MAX ? KVS_THREADS_MAX
                                                      : (unsigned) cpus;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--type") == 0 && i + 1 < argc) {
            type = argv[++i];
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            if (kvs_cli_num("quantize", argv[i], argv[i + 1], 1,
                            KVS_THREADS_MAX, 1, &d) != 0)
            {
                return 2;
            }
            threads = (unsigned) d;
            i++;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "kvserve quantize: unexpected argument "
                    "\"%s\"\n", argv[i]);
            return 2;
        } else if (in == NULL) {
            in = argv[i];
        } else if (out == NULL) {
            out = argv[i];
        } else {
            fprintf(stderr, "kvserve quantize: unexpected argument "
                    "\"%s\"\n", argv[i]);
            return 2;
        }
    }

    kvs_quant_mix_names(names, sizeof(names));

    if (in == NULL || out == NULL || type == NULL) {
        fprintf(stderr, "usage: kvserve quantize IN.gguf OUT.gguf --type "
                "NAME [--threads N]\n  NAME: %s\n", names);
        return 2;
    }

    mix = kvs_quant_mix(type);
    if (mix == NULL) {
        fprintf(stderr, "kvserve quantize: --type \"%s\" is not one of %s\n",
                type, names);
        return 2;
    }

    kvs_err_clear(&err);

    if (kvs_quantize_file_threads(in, out, mix, threads, &err) != KVS_OK) {
        fprintf(stderr, "kvserve quantize: %s\n", err.msg);
        return 1;
    }

    return 0;
}
