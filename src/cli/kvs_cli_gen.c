/*
 * kvs_cli_gen: `kvserve gen-model`: option parsing over kvs_gen.  A preset
 * (default "tiny") sets every shape; explicit options override it;
 * --arch (llama, qwen3, phi3, gemma2, gemma3) picks the layout, default
 * llama; without --tied, the output is the architecture's (gemma tied,
 * phi3 its own).
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/kvs_gen.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"
#include "kvs_cli.h"


static int
kvs_cli_u64(const char *opt, const char *s, uint64_t max, uint64_t *v)
{
    char  *end;

    errno = 0;
    *v = strtoull(s, &end, 10);

    if (s[0] == '\0' || s[0] == '-' || *end != '\0' || errno != 0
        || *v > max)
    {
        fprintf(stderr, "kvserve gen-model: %s \"%s\" is not a number in "
                "0..%llu\n", opt, s, (unsigned long long) max);
        return -1;
    }

    return 0;
}


/* A template file's text, NUL-ended, malloc'd; NULL (said) on failure. */
static char *
kvs_cli_gen_read(const char *path)
{
    long   n;
    FILE  *f;
    char  *text;

    f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "kvserve gen-model: --chat-template \"%s\": %s\n",
                path, strerror(errno));
        return NULL;
    }

    text = NULL;

    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0
        && fseek(f, 0, SEEK_SET) == 0)
    {
        text = malloc((size_t) n + 1);
        if (text != NULL && fread(text, 1, (size_t) n, f) == (size_t) n
            && memchr(text, '\0', (size_t) n) == NULL)
        {
            text[n] = '\0';

        } else {
            free(text);
            text = NULL;
        }
    }

    fclose(f);

    if (text == NULL) {
        fprintf(stderr, "kvserve gen-model: --chat-template \"%s\": cannot "
                "read it as text\n", path);
    }

    return text;
}


int
kvs_cli_gen_model(int argc, char **argv)
{
    int                      i, have_seed, have_tied, t, rc;
    char                     names[KVS_QUANT_NAMES_LEN];
    char                    *tmpl, *end;
    const char              *tpath;
    uint64_t                 v;
    uint32_t                *field;
    const char              *opt, *val, *out, *preset;
    kvs_err_t                err;
    kvs_gen_spec_t           spec;
    const kvs_quant_type_t  *q;

    preset = "tiny";
    tpath = NULL;
    tmpl = NULL;

    for (i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--preset") == 0) {
            preset = argv[i + 1];
        }
    }

    if (kvs_gen_preset(&spec, preset, &err) != KVS_OK) {
        fprintf(stderr, "kvserve gen-model: %s\n", err.msg);
        return 2;
    }

    have_seed = 0;
    have_tied = 0;
    out = NULL;

    for (i = 1; i < argc; i++) {
        opt = argv[i];

        if (opt[0] != '-' || opt[1] != '-') {
            if (out != NULL) {
                fprintf(stderr, "kvserve gen-model: more than one output "
                        "file (\"%s\", \"%s\")\n", out, opt);
                return 2;
            }
            out = opt;
            continue;
        }

        if (i + 1 >= argc) {
            fprintf(stderr, "kvserve gen-model: %s needs a value\n", opt);
            return 2;
        }

        val = argv[++i];
        field = NULL;

        if (strcmp(opt, "--preset") == 0) {
            continue;
        } else if (strcmp(opt, "--layers") == 0) {
            field = &spec.n_layer;
        } else if (strcmp(opt, "--dim") == 0) {
            field = &spec.n_embd;
        } else if (strcmp(opt, "--heads") == 0) {
            field = &spec.n_head;
        } else if (strcmp(opt, "--kv-heads") == 0) {
            field = &spec.n_head_kv;
        } else if (strcmp(opt, "--ffn") == 0) {
            field = &spec.n_ff;
        } else if (strcmp(opt, "--vocab") == 0) {
            field = &spec.n_vocab;
        } else if (strcmp(opt, "--ctx") == 0) {
            field = &spec.n_ctx;
        } else if (strcmp(opt, "--head-dim") == 0) {
            field = &spec.head_dim;
        } else if (strcmp(opt, "--swa") == 0) {
            field = &spec.n_swa;
        } else if (strcmp(opt, "--swa-pattern") == 0) {
            if (kvs_cli_u64(opt, val, 4096, &v) != 0) {
                return 2;
            }
            spec.swa_pattern = (uint32_t) v + 1;
        } else if (strcmp(opt, "--rope-base-swa") == 0) {
            spec.rope_base_swa = strtod(val, &end);
            if (end == val || *end != '\0' || !(spec.rope_base_swa > 0.0)
                || spec.rope_base_swa > 1e9)
            {
                fprintf(stderr, "kvserve gen-model: --rope-base-swa \"%s\" "
                        "is not a number in (0, 1e9]\n", val);
                return 2;
            }
        } else if (strcmp(opt, "--arch") == 0) {
            if (kvs_gen_arch(val, &spec.arch, &err) != KVS_OK) {
                fprintf(stderr, "kvserve gen-model: %s\n", err.msg);
                return 2;
            }
        } else if (strcmp(opt, "--seed") == 0) {
            if (kvs_cli_u64(opt, val, UINT64_MAX, &spec.seed) != 0) {
                return 2;
            }
            have_seed = 1;
        } else if (strcmp(opt, "--tied") == 0) {
            if (kvs_cli_u64(opt, val, 1, &v) != 0) {
                return 2;
            }
            spec.tied = (int) v;
            have_tied = 1;
        } else if (strcmp(opt, "--dtype") == 0) {
            /* any type of the table that has a quantizer */
            t = kvs_ggml_type_from_name(val);
            q = t < 0 ? NULL : kvs_quant_type((uint32_t) t);
            if (q == NULL || q->quantize == NULL) {
                kvs_quant_names(names, sizeof(names));
                fprintf(stderr, "kvserve gen-model: --dtype \"%s\" is not "
                        "a type kvserve can make (%s)\n", val, names);
                return 2;
            }
            spec.dtype = (uint32_t) t;
        } else if (strcmp(opt, "--chat-template") == 0) {
            tpath = val;
        } else if (strcmp(opt, "--name") == 0) {
            if (strlen(val) == 0 || strlen(val) >= sizeof(spec.name)) {
                fprintf(stderr, "kvserve gen-model: --name must be 1..%zu "
                        "bytes\n", sizeof(spec.name) - 1);
                return 2;
            }
            snprintf(spec.name, sizeof(spec.name), "%s", val);
        } else {
            fprintf(stderr, "kvserve gen-model: unknown option %s\n", opt);
            return 2;
        }

        if (field != NULL) {
            if (kvs_cli_u64(opt, val, UINT32_MAX, &v) != 0) {
                return 2;
            }
            *field = (uint32_t) v;
        }
    }

    /* the output the architecture has, unless --tied says otherwise
     * (then kvs_gen_check says why not) */
    if (!have_tied) {
        if (spec.arch == KVS_ARCH_GEMMA2 || spec.arch == KVS_ARCH_GEMMA3) {
            spec.tied = 1;
        } else if (spec.arch == KVS_ARCH_PHI3) {
            spec.tied = 0;
        }
    }

    if (!have_seed || out == NULL) {
        fprintf(stderr, "kvserve gen-model: --seed N and an output file are "
                "required\n");
        return 2;
    }

    if (tpath != NULL) {
        tmpl = kvs_cli_gen_read(tpath);
        if (tmpl == NULL) {
            return 2;
        }

        spec.chat_template = tmpl;
    }

    rc = kvs_gen_write(&spec, out, &err);
    free(tmpl);

    if (rc != KVS_OK) {
        fprintf(stderr, "kvserve gen-model: %s\n", err.msg);
        return 1;
    }

    return 0;
}
