/*
 * kvs_cli_lora: `kvserve gen-lora`, `kvserve merge-lora`, and what
 * `kvserve info` prints for an adapter file (kvs_cli_info hands an
 * adapter over here).  Option parsing only: the work is kvs_gen_lora's
 * and kvs_lora's.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gen/kvs_gen_lora.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_lora.h"
#include "model/kvs_model.h"
#include "kvs_cli.h"


int
kvs_cli_gen_lora(int argc, char **argv)
{
    int                   i, have_seed;
    double                v;
    kvs_err_t             err;
    const char           *base, *out, *opt, *targets;
    kvs_gen_lora_spec_t   spec;

    memset(&spec, 0, sizeof(spec));
    spec.rank = 8;
    spec.strength = 0.5f;
    spec.alpha = -1.0f;
    targets = "q,k,v,o,gate,up,down";
    base = NULL;
    out = NULL;
    have_seed = 0;

    for (i = 1; i < argc; i++) {
        opt = argv[i];

        if (opt[0] != '-') {
            if (base == NULL) {
                base = opt;
            } else if (out == NULL) {
                out = opt;
            } else {
                fprintf(stderr, "kvserve gen-lora: unexpected argument "
                        "\"%s\"\n", opt);
                return 2;
            }
            continue;
        }

        if (i + 1 >= argc) {
            fprintf(stderr, "kvserve gen-lora: %s needs a value\n", opt);
            return 2;
        }

        if (strcmp(opt, "--rank") == 0) {
            if (kvs_cli_num("gen-lora", opt, argv[++i], 1, KVS_LORA_MAX_RANK,
                            1, &v) != 0)
            {
                return 2;
            }
            spec.rank = (uint32_t) v;

        } else if (strcmp(opt, "--alpha") == 0) {
            if (kvs_cli_num("gen-lora", opt, argv[++i], 0, 1e6, 0, &v) != 0) {
                return 2;
            }
            spec.alpha = (float) v;

        } else if (strcmp(opt, "--strength") == 0) {
            if (kvs_cli_num("gen-lora", opt, argv[++i], 1e-6, 100, 0, &v)
                != 0)
            {
                return 2;
            }
            spec.strength = (float) v;

        } else if (strcmp(opt, "--seed") == 0) {
            if (kvs_cli_num("gen-lora", opt, argv[++i], 0, 9007199254740991.0,
                            1, &v) != 0)
            {
                return 2;
            }
            spec.seed = (uint64_t) v;
            have_seed = 1;

        } else if (strcmp(opt, "--targets") == 0) {
            targets = argv[++i];

        } else {
            fprintf(stderr, "kvserve gen-lora: unknown option \"%s\"\n", opt);
            return 2;
        }
    }

    if (base == NULL || out == NULL || !have_seed) {
        fprintf(stderr, "usage: kvserve gen-lora BASE.gguf [--rank R] "
                "[--alpha A] [--strength S]\n"
                "       [--targets q,k,v,o,gate,up,down] --seed S "
                "OUT.gguf\n");
        return 2;
    }

    if (kvs_gen_lora_targets(targets, &spec.targets, &err) != KVS_OK) {
        fprintf(stderr, "kvserve gen-lora: %s\n", err.msg);
        return 2;
    }

    if (spec.alpha < 0.0f) {
        spec.alpha = 2.0f * (float) spec.rank;
    }

    if (kvs_gen_lora_write(base, &spec, out, &err) != KVS_OK) {
        fprintf(stderr, "kvserve gen-lora: %s\n", err.msg);
        return 1;
    }

    return 0;
}


int
kvs_cli_merge_lora(int argc, char **argv)
{
    kvs_err_t  err;

    if (argc != 4 || argv[1][0] == '-' || argv[2][0] == '-'
        || argv[3][0] == '-')
    {
        fprintf(stderr, "usage: kvserve merge-lora BASE.gguf ADAPTER.gguf "
                "OUT.gguf\n");
        return 2;
    }

    if (kvs_gen_lora_merge(argv[1], argv[2], argv[3], &err) != KVS_OK) {
        fprintf(stderr, "kvserve merge-lora: %s\n", err.msg);
        return 1;
    }

    return 0;
}


static int
kvs_cli_lora_json(const char *path, const kvs_lora_t *l, const char *base)
{
    char     epoch[17];
    json_t  *root, *mats, *m;
    uint32_t i;

    mats = json_array();

    for (i = 0; mats != NULL && i < l->n_mat; i++) {
        m = json_pack("{s:s,s:i,s:s,s:i,s:I,s:I,s:s,s:s,s:f}",
                      "tensor", l->mat[i].name,
                      "layer", (int) l->mat[i].layer,
                      "target", kvs_lora_target_name(l->mat[i].target),
                      "rank", (int) l->mat[i].rank,
                      "n_in", (json_int_t) l->mat[i].n_in,
                      "n_out", (json_int_t) l->mat[i].n_out,
                      "type_a", kvs_ggml_type_name(l->mat[i].type_a),
                      "type_b", kvs_ggml_type_name(l->mat[i].type_b),
                      "scale", (double) l->mat[i].scale);
        if (m == NULL || json_array_append_new(mats, m) != 0) {
            json_decref(mats);
            mats = NULL;
        }
    }

    snprintf(epoch, sizeof(epoch), "%016llx", (unsigned long long) l->epoch);

    root = json_pack("{s:s,s:s,s:s,s:s,s:s?,s:f,s:i,s:I,s:I,s:s,s:o?}",
                     "file", path, "type", "lora", "architecture", l->arch,
                     "name", l->name, "base", base,
                     "alpha", (double) l->alpha,
                     "rank_max", (int) l->rank_max,
                     "n_params", (json_int_t) l->n_params,
                     "file_size", (json_int_t) l->file_size,
                     "epoch", epoch, "matrices", mats);
    if (root == NULL) {
        fprintf(stderr, "kvserve info: out of memory\n");
        return 1;
    }

    json_dumpf(root, stdout, JSON_INDENT(2) | JSON_SORT_KEYS);
    fputc('\n', stdout);
    json_decref(root);

    return 0;
}


int
kvs_cli_lora_info(const char *path, const char *base, int json)
{
    int           rc;
    uint32_t      i;
    kvs_err_t     err;
    kvs_lora_t   *l;
    kvs_model_t  *m;

    m = NULL;

    if (base != NULL && kvs_model_open(&m, base, &err) != KVS_OK) {
        fprintf(stderr, "kvserve info: --base: %s\n", err.msg);
        return 1;
    }

    rc = kvs_lora_open(&l, path, m, &err);
    kvs_model_close(m);

    if (rc != KVS_OK) {
        fprintf(stderr, "kvserve info: %s\n", err.msg);
        return 1;
    }

    if (json) {
        rc = kvs_cli_lora_json(path, l, base);
        kvs_lora_close(l);
        return rc;
    }

    if (base != NULL) {
        printf("%s: LoRA adapter for %s, fits %s\n", path, l->arch, base);
    } else {
        printf("%s: LoRA adapter for %s (checked on its own; --base "
               "BASE.gguf checks it against a base)\n", path, l->arch);
    }
    printf("  name            %s\n", l->name[0] ? l->name : "-");
    printf("  alpha           %g%s\n", (double) l->alpha,
           l->alpha == 0.0f ? " (none: scale 1)" : "");
    printf("  matrices        %u, layers 0..%u, rank up to %u\n", l->n_mat,
           l->n_layer_max - 1, l->rank_max);
    printf("  parameters      %llu\n", (unsigned long long) l->n_params);
    printf("  epoch           %016llx\n", (unsigned long long) l->epoch);

    for (i = 0; i < l->n_mat; i++) {
        printf("  %-32s %-5s rank %-4u [%llu -> %llu] %s/%s scale %g\n",
               l->mat[i].name, kvs_lora_target_name(l->mat[i].target),
               l->mat[i].rank, (unsigned long long) l->mat[i].n_in,
               (unsigned long long) l->mat[i].n_out,
               kvs_ggml_type_name(l->mat[i].type_a),
               kvs_ggml_type_name(l->mat[i].type_b),
               (double) l->mat[i].scale);
    }

    kvs_lora_close(l);

    return 0;
}
