/*
 * quant_sample: kvs_quant's row conversions as a command, for the Python
 * interop test (t/unit/test_quant_python.py), which compares them with
 * the gguf package's.
 *
 * usage: quant_sample list
 *            one line per type of kvs_quant's table:
 *            "<id> <name> <block> <bytes per block> <1 if we quantize>"
 *        quant_sample dequantize <type id> in.bin out.f32
 *            in.bin: whole blocks; out.f32: the values, float32 LE
 *        quant_sample quantize <type id> in.f32 out.bin
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"


static void *
read_all(const char *path, size_t *len)
{
    long   n;
    FILE  *f;
    void  *p;

    f = fopen(path, "rb");
    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0
        || fseek(f, 0, SEEK_SET) != 0)
    {
        perror(path);
        exit(1);
    }

    p = malloc(n > 0 ? (size_t) n : 1);
    if (p == NULL || fread(p, 1, (size_t) n, f) != (size_t) n) {
        perror(path);
        exit(1);
    }

    fclose(f);
    *len = (size_t) n;

    return p;
}


static void
write_all(const char *path, const void *p, size_t len)
{
    FILE  *f;

    f = fopen(path, "wb");
    if (f == NULL || fwrite(p, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}


int
main(int argc, char **argv)
{
    int                          convert;
    void                        *in, *out;
    size_t                       len, n;
    uint32_t                     t;
    kvs_err_t                    err;
    const kvs_quant_type_t      *q;
    const kvs_ggml_type_info_t  *info;

    if (argc == 2 && strcmp(argv[1], "list") == 0) {
        for (t = 0; t < KVS_GGML_TYPE_END; t++) {
            q = kvs_quant_type(t);
            info = kvs_ggml_type_info(t);

            if (q != NULL && info != NULL) {
                printf("%u %s %u %u %d\n", t, info->name, info->block,
                       info->size, q->quantize != NULL);
            }
        }

        return 0;
    }

    if (argc != 5 || (strcmp(argv[1], "dequantize") != 0
                      && strcmp(argv[1], "quantize") != 0))
    {
        fprintf(stderr, "usage: quant_sample list | dequantize|quantize "
                "<type id> in out\n");
        return 2;
    }

    convert = strcmp(argv[1], "dequantize") == 0;
    t = (uint32_t) strtoul(argv[2], NULL, 10);
    info = kvs_ggml_type_info(t);

    if (info == NULL) {
        fprintf(stderr, "quant_sample: unknown type %s\n", argv[2]);
        return 2;
    }

    in = read_all(argv[3], &len);

    if (convert) {
        if (len % info->size != 0) {
            fprintf(stderr, "quant_sample: %zu bytes are not whole blocks "
                    "of %u\n", len, info->size);
            return 2;
        }

        n = len / info->size * info->block;
        out = malloc(n * sizeof(float) + 1);

        if (out == NULL
            || kvs_quant_dequantize(t, in, out, n, &err) != KVS_OK)
        {
            fprintf(stderr, "quant_sample: %s\n",
                    out == NULL ? "out of memory" : err.msg);
            return 1;
        }

        write_all(argv[4], out, n * sizeof(float));

    } else {
        n = len / sizeof(float);
        out = malloc(n / info->block * info->size + 1);

        if (out == NULL
            || kvs_quant_quantize(t, in, out, n, &err) != KVS_OK)
        {
            fprintf(stderr, "quant_sample: %s\n",
                    out == NULL ? "out of memory" : err.msg);
            return 1;
        }

        write_all(argv[4], out, n / info->block * info->size);
    }

    free(in);
    free(out);

    return 0;
}
