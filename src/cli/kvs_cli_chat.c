/*
 * kvs_cli_chat: `kvserve chat-template`: renders the OpenAI messages read
 * from stdin (an array, or a request object holding "messages" and maybe
 * "tools") with the model's chat template and prints the prompt exactly,
 * with no newline added, so that it can be compared byte for byte with
 * other renderers.
 *
 * The template is recognised from the GGUF's tokenizer.chat_template
 * unless --template names one, or --jinja gives a template file to run
 * as written (the server's default path: kvs_chat_render() through
 * kvs_chat_jinja, with the same checks, context and limits); bos_token
 * and eos_token are the texts of the vocabulary's BOS and EOS tokens, as
 * Hugging Face passes them.
 */

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/kvs_gguf.h"
#include "tokenizer/kvs_chat.h"
#include "tokenizer/kvs_chat_jinja.h"
#include "kvs_cli.h"


static void
kvs_cli_chat_usage(void)
{
    fprintf(stderr, "usage: kvserve chat-template [--template NAME | "
            "--jinja FILE] [--no-generation-prompt] model.gguf "
            "< messages.json\n"
            "  NAME: " KVS_CHAT_NAMES "\n"
            "  FILE: a Jinja chat template, run as written\n");
}


/* The text of the token whose id is stored under key, if any. */
static int
kvs_cli_chat_token(kvs_gguf_t *g, const char *key, const char **text,
    size_t *len, kvs_err_t *err)
{
    int               rc;
    uint64_t          id;
    kvs_gguf_arr_t    tokens;
    kvs_gguf_str_t    s;
    kvs_gguf_iter_t   it;

    *text = NULL;
    *len = 0;

    rc = kvs_gguf_get_uint(g, key, &id, err);
    if (rc == KVS_ENOTFOUND) {
        return KVS_OK;
    }

    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_gguf_get_arr(g, "tokenizer.ggml.tokens", &tokens, err);
    if (rc != KVS_OK) {
        return rc;
    }

    if (tokens.type != KVS_GGUF_STR || id >= tokens.n) {
        return kvs_err_set(err, KVS_EFORMAT, "%s %llu is not an index into "
                           "tokenizer.ggml.tokens (%llu strings)", key,
                           (unsigned long long) id,
                           (unsigned long long) tokens.n);
    }

    kvs_gguf_iter_init(&it, &tokens);

    while (kvs_gguf_iter_str(&it, &s)) {
        if (it.i - 1 == id) {
            *text = s.ptr;
            *len = s.len;
            return KVS_OK;
        }
    }

    return kvs_err_set(err, KVS_EFORMAT, "tokenizer.ggml.tokens: cannot "
                       "read token %llu", (unsigned long long) id);
}


/* A template file's text into b. */
static int
kvs_cli_chat_file(const char *path, kvs_buf_t *b)
{
    FILE    *f;
    char     chunk[65536];
    size_t   n;
    int      rc;

    f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return -1;
    }

    rc = 0;

    while (rc == 0 && (n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (kvs_buf_append(b, chunk, n) != KVS_OK) {
            fprintf(stderr, "kvserve chat-template: out of memory\n");
            rc = -1;
        }
    }

    if (rc == 0 && ferror(f)) {
        perror(path);
        rc = -1;
    }

    fclose(f);

    return rc;
}


/* named: the template --template names (or --jinja compiled), or NULL to
 * recognise it. */
static int
kvs_cli_chat_run(const char *path, const kvs_chat_t *named, int agp)
{
    int               rc;
    json_t           *in, *msgs;
    kvs_buf_t         out;
    kvs_err_t         err;
    kvs_gguf_t       *g;
    kvs_chat_t        chat;
    json_error_t      jerr;
    kvs_gguf_str_t    t;
    kvs_chat_args_t   args;

    in = json_loadf(stdin, 0, &jerr);
    if (in == NULL) {
        fprintf(stderr, "kvserve chat-template: stdin: bad JSON at line %d "
                "column %d: %s\n", jerr.line, jerr.column, jerr.text);
        return 1;
    }

    msgs = json_is_object(in) ? json_object_get(in, "messages") : in;

    if (kvs_gguf_open(&g, path, &err) != KVS_OK) {
        fprintf(stderr, "kvserve chat-template: %s\n", err.msg);
        json_decref(in);
        return 1;
    }

    memset(&out, 0, sizeof(out));
    memset(&args, 0, sizeof(args));
    args.add_generation_prompt = agp;
    args.tools = json_is_object(in) ? json_object_get(in, "tools") : NULL;

    if (named != NULL) {
        chat = *named;
        rc = KVS_OK;

    } else {
        rc = kvs_gguf_get_str(g, "tokenizer.chat_template", &t, &err);
        if (rc == KVS_ENOTFOUND) {
            kvs_err_set(&err, rc, "\"%s\" has no tokenizer.chat_template: "
                        "name one with --template (" KVS_CHAT_NAMES ")",
                        path);

        } else if (rc == KVS_OK) {
            rc = kvs_chat_detect(t.ptr, t.len, &chat, &err);
        }
    }

    if (rc == KVS_OK) {
        rc = kvs_cli_chat_token(g, "tokenizer.ggml.bos_token_id",
                                &args.bos, &args.bos_len, &err);
    }

    if (rc == KVS_OK) {
        rc = kvs_cli_chat_token(g, "tokenizer.ggml.eos_token_id",
                                &args.eos, &args.eos_len, &err);
    }

    if (rc == KVS_OK) {
        rc = kvs_chat_render(&chat, msgs, &args, &out, &err);
    }

    if (rc == KVS_OK && out.len > 0
        && fwrite(out.data, 1, out.len, stdout) != out.len)
    {
        rc = kvs_err_set(&err, KVS_EIO, "writing stdout failed");
    }

    if (rc != KVS_OK) {
        fprintf(stderr, "kvserve chat-template: %s\n", err.msg);
    }

    kvs_buf_free(&out);
    kvs_gguf_close(g);
    json_decref(in);

    return rc == KVS_OK && fflush(stdout) == 0 ? 0 : 1;
}


/* --jinja FILE: the file compiled as the server compiles a model's. */
static int
kvs_cli_chat_jinja(const char *path, const char *file, int agp)
{
    int                rc;
    kvs_buf_t          text;
    kvs_err_t          err;
    kvs_chat_t         chat;
    kvs_chat_jinja_t  *cj;

    memset(&text, 0, sizeof(text));

    if (kvs_cli_chat_file(file, &text) != 0) {
        kvs_buf_free(&text);
        return 1;
    }

    rc = kvs_chat_jinja_compile(&cj, text.len ? (const char *) text.data
                                              : "", text.len, NULL, &err);
    kvs_buf_free(&text);

    if (rc != KVS_OK) {
        fprintf(stderr, "kvserve chat-template: %s: %s\n", file, err.msg);
        return 1;
    }

    memset(&chat, 0, sizeof(chat));
    chat.jinja = cj;

    rc = kvs_cli_chat_run(path, &chat, agp);
    kvs_chat_jinja_free(cj);

    return rc;
}


int
kvs_cli_chat_template(int argc, char **argv)
{
    int          i, agp;
    kvs_err_t    err;
    kvs_chat_t   chat;
    const char  *path, *name, *file;

    agp = 1;
    path = NULL;
    name = NULL;
    file = NULL;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--template") == 0 && i + 1 < argc) {
            name = argv[++i];

        } else if (strcmp(argv[i], "--jinja") == 0 && i + 1 < argc) {
            file = argv[++i];

        } else if (strcmp(argv[i], "--no-generation-prompt") == 0) {
            agp = 0;

        } else if (argv[i][0] == '-' || path != NULL) {
            kvs_cli_chat_usage();
            return 2;

        } else {
            path = argv[i];
        }
    }

    if (path == NULL || (name != NULL && file != NULL)) {
        kvs_cli_chat_usage();
        return 2;
    }

    if (file != NULL) {
        return kvs_cli_chat_jinja(path, file, agp);
    }

    if (name == NULL) {
        return kvs_cli_chat_run(path, NULL, agp);
    }

    if (kvs_chat_by_name(name, strlen(name), &chat, &err) != KVS_OK) {
        fprintf(stderr, "kvserve chat-template: %s\n", err.msg);
        return 2;
    }

    return kvs_cli_chat_run(path, &chat, agp);
}
