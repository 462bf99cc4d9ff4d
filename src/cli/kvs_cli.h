/*
 * kvs_cli: sub-commands of the `kvserve` command-line tool.  Each takes
 * argc/argv after the sub-command name and returns a process exit status
 * (0 ok, 1 failure, 2 usage error); messages go to stderr.
 */

#ifndef KVS_CLI_H
#define KVS_CLI_H

int kvs_cli_info(int argc, char **argv);
int kvs_cli_gen_model(int argc, char **argv);

/* Formats bytes as "1.25 MiB" into buf. */
const char *kvs_cli_human(double bytes, char *buf, unsigned len);

#endif /* KVS_CLI_H */
