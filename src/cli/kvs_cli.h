/*
 * kvs_cli: sub-commands of the `kvserve` command-line tool.  Each takes
 * argc/argv after the sub-command name and returns a process exit status
 * (0 ok, 1 failure, 2 usage error); messages go to stderr.
 */

#ifndef KVS_CLI_H
#define KVS_CLI_H

int kvs_cli_info(int argc, char **argv);
int kvs_cli_gen_model(int argc, char **argv);
int kvs_cli_tokenize(int argc, char **argv);        /* kvs_cli_tok.c */
int kvs_cli_detokenize(int argc, char **argv);      /* kvs_cli_tok.c */
int kvs_cli_convert_vocab(int argc, char **argv);   /* kvs_cli_convert.c */
int kvs_cli_chat_template(int argc, char **argv);   /* kvs_cli_chat.c */
int kvs_cli_jinja(int argc, char **argv);           /* kvs_cli_jinja.c */
int kvs_cli_generate(int argc, char **argv);        /* kvs_cli_generate.c */
int kvs_cli_logits(int argc, char **argv);          /* kvs_cli_logits.c */
int kvs_cli_quantize(int argc, char **argv);        /* kvs_cli_quantize.c */
int kvs_cli_plan(int argc, char **argv);            /* kvs_cli_plan.c */
int kvs_cli_gen_lora(int argc, char **argv);        /* kvs_cli_lora.c */
int kvs_cli_merge_lora(int argc, char **argv);      /* kvs_cli_lora.c */

/* `kvserve info` of an adapter file, against base when not NULL. */
int kvs_cli_lora_info(const char *path, const char *base, int json);

int kvs_cli_bench(int argc, char **argv);           /* kvs_cli_bench.c */
int kvs_cli_engine(int argc, char **argv);          /* kvs_cli_engine.c */
int kvs_cli_index_names(int argc, char **argv);     /* kvs_cli_index.c */
int kvs_cli_triage(int argc, char **argv);          /* kvs_cli_triage.c */

/* Parses a whole decimal number in [lo, hi] (an integer if asked) into
 * *out; otherwise prints "kvserve CMD: OPT: expected ..." and returns 2. */
int kvs_cli_num(const char *cmd, const char *opt, const char *s, double lo,
    double hi, int integer, double *out);

/* --backend cpu|cuda|auto and --device N (kvs_cli_engine.c): 1 when opt
 * is one of them and val was stored into *kind (a kvs_backend_kind_t)
 * or *device, 0 when opt is neither, 2 after printing why val is bad. */
int kvs_cli_backend_opt(const char *cmd, const char *opt, const char *val,
    int *kind, int *device);

/* Formats bytes as "1.25 MiB" into buf. */
const char *kvs_cli_human(double bytes, char *buf, unsigned len);

#endif /* KVS_CLI_H */
