/*
 * gguf_sample: writes kvs_sample's file, for the Python interop test.
 * usage: gguf_sample out.gguf version alignment
 */

#include <stdio.h>
#include <stdlib.h>

#include "kvs_sample.h"


int
main(int argc, char **argv)
{
    kvs_err_t  err;

    if (argc != 4) {
        fprintf(stderr, "usage: gguf_sample out.gguf version alignment\n");
        return 2;
    }

    if (kvs_sample_write(argv[1], (uint32_t) atoi(argv[2]),
                         (uint32_t) atoi(argv[3]), &err) != KVS_OK)
    {
        fprintf(stderr, "gguf_sample: %s\n", err.msg);
        return 1;
    }

    return 0;
}
