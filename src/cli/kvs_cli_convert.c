/*
 * kvs_cli_convert: `kvserve convert-vocab`: option parsing over
 * kvs_vocab_convert.  Exactly one input format (--tiktoken FILE or --hf
 * VOCAB MERGES) and one output file; prints a one-line summary.
 */

#include <stdio.h>
#include <string.h>

#include "tokenizer/kvs_vocab.h"
#include "gen/kvs_vocab_convert.h"
#include "kvs_cli.h"


static void
kvs_cli_convert_usage(void)
{
    fprintf(stderr,
        "usage: kvserve convert-vocab --tiktoken tokenizer.model [options] "
        "out.gguf\n"
        "       kvserve convert-vocab --hf vocab.json merges.txt [options] "
        "out.gguf\n"
        "options: --pre NAME (tokenizer.ggml.pre; default llama-bpe for "
        "--tiktoken,\n"
        "         qwen2 for --hf)  --name S (general.name)  "
        "--chat-template FILE\n");
}


int
kvs_cli_convert_vocab(int argc, char **argv)
{
    int                        i, rc;
    const char                *opt, *tiktoken, *vocab, *merges, *out;
    kvs_err_t                  err;
    kvs_vocab_convert_opts_t   opts;
    kvs_vocab_convert_stats_t  st;

    memset(&opts, 0, sizeof(opts));
    tiktoken = NULL;
    vocab = NULL;
    merges = NULL;
    out = NULL;

    for (i = 1; i < argc; i++) {
        opt = argv[i];

        if (strcmp(opt, "-h") == 0 || strcmp(opt, "--help") == 0) {
            kvs_cli_convert_usage();
            return 0;
        }

        if (opt[0] != '-' || opt[1] != '-') {
            if (out != NULL) {
                fprintf(stderr, "kvserve convert-vocab: more than one "
                        "output file (\"%s\", \"%s\")\n", out, opt);
                return 2;
            }
            out = opt;
            continue;
        }

        if (i + 1 >= argc) {
            fprintf(stderr, "kvserve convert-vocab: %s needs a value\n",
                    opt);
            return 2;
        }

        if (strcmp(opt, "--tiktoken") == 0) {
            tiktoken = argv[++i];
        } else if (strcmp(opt, "--hf") == 0) {
            if (i + 2 >= argc) {
                fprintf(stderr, "kvserve convert-vocab: --hf needs "
                        "vocab.json and merges.txt\n");
                return 2;
            }
            vocab = argv[++i];
            merges = argv[++i];
        } else if (strcmp(opt, "--pre") == 0) {
            opts.pre = argv[++i];
        } else if (strcmp(opt, "--name") == 0) {
            opts.name = argv[++i];
        } else if (strcmp(opt, "--chat-template") == 0) {
            opts.chat_template = argv[++i];
        } else {
            fprintf(stderr, "kvserve convert-vocab: unknown option %s\n",
                    opt);
            kvs_cli_convert_usage();
            return 2;
        }
    }

    if ((tiktoken == NULL) == (vocab == NULL) || out == NULL) {
        fprintf(stderr, "kvserve convert-vocab: give one of --tiktoken or "
                "--hf, and an output file\n");
        kvs_cli_convert_usage();
        return 2;
    }

    if (opts.pre != NULL && !kvs_pretok_known(opts.pre)) {
        fprintf(stderr, "kvserve convert-vocab: --pre \"%s\" is not a "
                "pre-tokenizer kvserve knows\n", opts.pre);
        return 2;
    }

    if (tiktoken != NULL) {
        rc = kvs_vocab_convert_tiktoken(tiktoken, out, &opts, &st, &err);
    } else {
        rc = kvs_vocab_convert_hf(vocab, merges, out, &opts, &st, &err);
    }

    if (rc != KVS_OK) {
        fprintf(stderr, "kvserve convert-vocab: %s\n", err.msg);
        return 1;
    }

    if (tiktoken != NULL) {
        printf("%s: %u tokens (%u special), %u merges derived (%u tokens "
               "without a two-part split), %.2f s (derivation %.2f s)\n",
               out, st.n_tokens, st.n_special, st.n_merges, st.n_unsplit,
               st.seconds, st.derive_seconds);
    } else {
        printf("%s: %u tokens (%u special), %u merges, %.2f s\n", out,
               st.n_tokens, st.n_special, st.n_merges, st.seconds);
    }

    return 0;
}
