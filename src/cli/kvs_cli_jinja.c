/*
 * kvs_cli_jinja: `kvserve jinja TEMPLATE CONTEXT.json [--now EPOCH]`
 * (strftime_now's clock, default the current time): renders a Jinja chat template file with the variables of a JSON object
 * (messages, tools, bos_token, add_generation_prompt, ...) through the C
 * interpreter and prints the text exactly, with no newline added, so that
 * it can be compared byte for byte with Python jinja2.  A compile or
 * render error goes to stderr with exit status 1.
 */

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer/kvs_jinja.h"
#include "kvs_cli.h"


static void
kvs_cli_jinja_usage(void)
{
    fprintf(stderr, "usage: kvserve jinja TEMPLATE_FILE CONTEXT_JSON_FILE "
            "[--now EPOCH] [--max-steps N] [--max-output BYTES]\n");
}


static int
kvs_cli_jinja_read(const char *path, kvs_buf_t *b)
{
    FILE    *f;
    char     chunk[65536];
    size_t   n;

    if ((f = fopen(path, "rb")) == NULL) {
        perror(path);
        return -1;
    }
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (kvs_buf_append(b, chunk, n) != KVS_OK) {
            fclose(f);
            fprintf(stderr, "kvserve jinja: out of memory\n");
            return -1;
        }
    }
    if (ferror(f)) {
        perror(path);
        fclose(f);
        return -1;
    }
    fclose(f);

    return 0;
}


int
kvs_cli_jinja(int argc, char **argv)
{
    const char        *files[2] = { NULL, NULL };
    kvs_jinja_opts_t   opts;
    kvs_jinja_t       *tpl = NULL;
    kvs_buf_t          src, out;
    json_t            *ctx = NULL;
    json_error_t       jerr;
    kvs_err_t          err;
    double             num;
    int                i, nfiles = 0, rc, status = 1;

    kvs_jinja_opts_default(&opts);
    opts.now = (int64_t) time(NULL);      /* --now overrides */
    memset(&src, 0, sizeof(src));
    memset(&out, 0, sizeof(out));

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--now") == 0 && i + 1 < argc) {
            if ((rc = kvs_cli_num("jinja", "--now", argv[++i], -1e12, 1e12, 1,
                                  &num)) != 0)
            {
                return rc;
            }
            opts.now = (int64_t) num;
        } else if (strcmp(argv[i], "--max-steps") == 0 && i + 1 < argc) {
            if ((rc = kvs_cli_num("jinja", "--max-steps", argv[++i], 1, 1e15,
                                  1, &num)) != 0)
            {
                return rc;
            }
            opts.max_steps = (uint64_t) num;
        } else if (strcmp(argv[i], "--max-output") == 0 && i + 1 < argc) {
            if ((rc = kvs_cli_num("jinja", "--max-output", argv[++i], 1,
                                  1e12, 1, &num)) != 0)
            {
                return rc;
            }
            opts.max_output = (size_t) num;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            kvs_cli_jinja_usage();
            return 2;
        } else if (nfiles < 2) {
            files[nfiles++] = argv[i];
        } else {
            kvs_cli_jinja_usage();
            return 2;
        }
    }
    if (nfiles != 2) {
        kvs_cli_jinja_usage();
        return 2;
    }

    if (kvs_cli_jinja_read(files[0], &src) != 0) {
        goto done;
    }
    ctx = json_load_file(files[1], JSON_REJECT_DUPLICATES, &jerr);
    if (ctx == NULL || !json_is_object(ctx)) {
        fprintf(stderr, "kvserve jinja: %s: %s\n", files[1],
                ctx == NULL ? jerr.text : "not a JSON object");
        goto done;
    }

    if (kvs_jinja_compile(&tpl, (const char *) src.data, src.len, &err)
        != KVS_OK)
    {
        fprintf(stderr, "kvserve jinja: %s: %s\n", files[0], err.msg);
        goto done;
    }
    if (kvs_jinja_render(tpl, ctx, &opts, &out, &err) != KVS_OK) {
        fprintf(stderr, "kvserve jinja: %s: %s\n", files[0], err.msg);
        goto done;
    }
    if (out.len > 0 && fwrite(out.data, 1, out.len, stdout) != out.len) {
        perror("stdout");
        goto done;
    }
    status = fflush(stdout) == 0 ? 0 : 1;

done:
    kvs_jinja_free(tpl);
    json_decref(ctx);
    kvs_buf_free(&src);
    kvs_buf_free(&out);

    return status;
}
