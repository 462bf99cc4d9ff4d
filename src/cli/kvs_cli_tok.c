/*
 * kvserve tokenize | detokenize: text <-> token ids with a model's (or a
 * vocabulary-only GGUF's) tokenizer, stdin to stdout.
 *
 *   tokenize   [--bos] [--special] model.gguf < text   ids on one line
 *   detokenize [--special] model.gguf < ids             the text, as is
 *
 * Defaults follow the reference test data: no BOS, special-token text
 * not parsed, control tokens not shown.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_cli.h"
#include "tokenizer/kvs_tok.h"


static int kvs_cli_tok_args(int argc, char **argv, int encode,
    unsigned *flags, const char **path);
static int kvs_cli_read_stdin(kvs_buf_t *b);


int
kvs_cli_tokenize(int argc, char **argv)
{
    int            rc;
    size_t         i;
    unsigned       flags;
    kvs_buf_t      in;
    kvs_err_t      err;
    kvs_ids_t      ids;
    const char    *path;
    kvs_vocab_t   *v;
    kvs_tok_ctx_t  ctx;

    rc = kvs_cli_tok_args(argc, argv, 1, &flags, &path);
    if (rc != 0) {
        return rc;
    }

    memset(&in, 0, sizeof(in));
    memset(&ids, 0, sizeof(ids));
    memset(&ctx, 0, sizeof(ctx));
    kvs_err_clear(&err);

    if (kvs_vocab_open(&v, path, &err) != KVS_OK) {
        fprintf(stderr, "kvserve tokenize: %s\n", err.msg);
        return 1;
    }

    rc = 1;

    if (kvs_cli_read_stdin(&in) != 0) {
        fprintf(stderr, "kvserve tokenize: reading stdin: %s\n",
                strerror(errno));
        goto done;
    }

    if (kvs_tok_encode(v, &ctx, (const char *) in.data, in.len, flags, &ids,
                       &err) != KVS_OK)
    {
        fprintf(stderr, "kvserve tokenize: %s\n", err.msg);
        goto done;
    }

    for (i = 0; i < ids.n; i++) {
        printf(i ? " %d" : "%d", ids.ids[i]);
    }

    printf("\n");
    rc = fflush(stdout) == 0 ? 0 : 1;

done:

    kvs_tok_ctx_free(&ctx);
    kvs_ids_free(&ids);
    kvs_buf_free(&in);
    kvs_vocab_free(v);

    return rc;
}


int
kvs_cli_detokenize(int argc, char **argv)
{
    int           rc;
    char         *p, *end;
    long          id;
    size_t        n;
    unsigned      flags;
    kvs_buf_t     in, out;
    kvs_err_t     err;
    kvs_ids_t     ids;
    const char   *path;
    kvs_vocab_t  *v;

    rc = kvs_cli_tok_args(argc, argv, 0, &flags, &path);
    if (rc != 0) {
        return rc;
    }

    memset(&in, 0, sizeof(in));
    memset(&out, 0, sizeof(out));
    memset(&ids, 0, sizeof(ids));
    kvs_err_clear(&err);

    if (kvs_vocab_open(&v, path, &err) != KVS_OK) {
        fprintf(stderr, "kvserve detokenize: %s\n", err.msg);
        return 1;
    }

    rc = 1;

    if (kvs_cli_read_stdin(&in) != 0
        || kvs_buf_append(&in, "", 1) != KVS_OK)
    {
        fprintf(stderr, "kvserve detokenize: reading stdin: %s\n",
                strerror(errno));
        goto done;
    }

    for (p = (char *) in.data, n = 0; ; n++) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'
               || *p == ',')
        {
            p++;
        }

        if (*p == '\0') {
            break;
        }

        errno = 0;
        id = strtol(p, &end, 10);

        if (end == p || errno != 0 || id < 0 || id > INT32_MAX
            || (*end != '\0' && strchr(" \t\r\n,", *end) == NULL))
        {
            fprintf(stderr, "kvserve detokenize: id %zu: \"%.*s\" is not "
                    "a token id\n", n, (int) strcspn(p, " \t\r\n,"), p);
            goto done;
        }

        if (kvs_ids_push(&ids, (int32_t) id) != KVS_OK) {
            fprintf(stderr, "kvserve detokenize: out of memory\n");
            goto done;
        }

        p = end;
    }

    if (kvs_tok_decode(v, ids.ids, ids.n, flags, &out, &err) != KVS_OK) {
        fprintf(stderr, "kvserve detokenize: %s\n", err.msg);
        goto done;
    }

    if (out.len > 0 && fwrite(out.data, 1, out.len, stdout) != out.len) {
        goto done;
    }

    rc = fflush(stdout) == 0 ? 0 : 1;

done:

    kvs_ids_free(&ids);
    kvs_buf_free(&in);
    kvs_buf_free(&out);
    kvs_vocab_free(v);

    return rc;
}


static int
kvs_cli_tok_args(int argc, char **argv, int encode, unsigned *flags,
    const char **path)
{
    int  i;

    *flags = 0;
    *path = NULL;

    for (i = 1; i < argc; i++) {
        if (encode && strcmp(argv[i], "--bos") == 0) {
            *flags |= KVS_TOK_ADD_BOS;

        } else if (strcmp(argv[i], "--special") == 0) {
            *flags |= encode ? KVS_TOK_SPECIAL : KVS_DETOK_SPECIAL;

        } else if (argv[i][0] == '-' || *path != NULL) {
            goto usage;

        } else {
            *path = argv[i];
        }
    }

    if (*path != NULL) {
        return 0;
    }

usage:

    fprintf(stderr, encode
            ? "usage: kvserve tokenize [--bos] [--special] model.gguf "
              "< text\n"
            : "usage: kvserve detokenize [--special] model.gguf < ids\n");

    return 2;
}


static int
kvs_cli_read_stdin(kvs_buf_t *b)
{
    size_t  n;

    for ( ;; ) {
        if (kvs_buf_reserve(b, 65536) != KVS_OK) {
            errno = ENOMEM;
            return -1;
        }

        n = fread(b->data + b->len, 1, 65536, stdin);
        b->len += n;

        if (n < 65536) {
            return ferror(stdin) ? -1 : 0;
        }
    }
}
