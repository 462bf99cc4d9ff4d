/*
 * kvs_cli_index: `kvserve index-names`, the prefix index's block names
 * of a token sequence (docs/prefix-index.md, "Naming"), one per whole
 * block, as the engine hosts publish them and the gateway looks them
 * up.  Tests and scripts use it to write index entries into Redis by
 * hand without computing xxh3 themselves.
 *
 *   kvserve index-names --model M [--epoch HEX] [--adapter A]
 *                       [--scope S] [--block N] [--root] [ID ...]
 *
 * The ids come from the arguments, or from stdin (separated by spaces,
 * commas or newlines) when there are none.  Output: with --root the
 * namespace's root name first, then name[i] for every whole block, 32
 * lowercase hex digits per line.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_cli.h"
#include "index/kvs_index_name.h"

#define KVS_CLI_INDEX_IDS_MAX  (1u << 24)


static void
kvs_cli_index_usage(void)
{
    fprintf(stderr,
            "usage: kvserve index-names --model M [--epoch HEX] "
            "[--adapter A]\n"
            "                           [--scope S] [--block N] [--root] "
            "[ID ...]\n"
            "  ids from the arguments, or from stdin when there are none;\n"
            "  prints the name of every whole block (32 hex digits a "
            "line)\n");
}


/* One token id: a whole decimal int32. */
static int
kvs_cli_index_id(const char *s, size_t len, int32_t *out)
{
    char       buf[24], *end;
    long long  v;

    if (len == 0 || len >= sizeof(buf)) {
        return -1;
    }

    memcpy(buf, s, len);
    buf[len] = '\0';

    errno = 0;
    v = strtoll(buf, &end, 10);

    if (*end != '\0' || errno != 0 || v < INT32_MIN || v > INT32_MAX) {
        return -1;
    }

    *out = (int32_t) v;

    return 0;
}


/* Appends an id to *ids (grown by doubling); -1 when out of memory or
 * over the bound. */
static int
kvs_cli_index_push(int32_t **ids, size_t *n, size_t *cap, int32_t id)
{
    int32_t  *p;
    size_t    c;

    if (*n == *cap) {
        if (*cap >= KVS_CLI_INDEX_IDS_MAX) {
            return -1;
        }

        c = *cap ? *cap * 2 : 256;
        p = realloc(*ids, c * sizeof(int32_t));
        if (p == NULL) {
            return -1;
        }

        *ids = p;
        *cap = c;
    }

    (*ids)[(*n)++] = id;

    return 0;
}


/* Reads ids from stdin; 0, or 1 after printing what was wrong. */
static int
kvs_cli_index_stdin(int32_t **ids, size_t *n, size_t *cap)
{
    int      ch;
    char     tok[24];
    size_t   len;
    int32_t  id;

    len = 0;

    for ( ;; ) {
        ch = getchar();

        if (ch == EOF || ch == ' ' || ch == ',' || ch == '\n' || ch == '\t'
            || ch == '\r')
        {
            if (len > 0) {
                if (kvs_cli_index_id(tok, len, &id) != 0) {
                    fprintf(stderr, "kvserve index-names: bad token id "
                            "\"%.*s\" on stdin\n", (int) len, tok);
                    return 1;
                }

                if (kvs_cli_index_push(ids, n, cap, id) != 0) {
                    fprintf(stderr, "kvserve index-names: too many ids\n");
                    return 1;
                }

                len = 0;
            }

            if (ch == EOF) {
                return 0;
            }

            continue;
        }

        if (len == sizeof(tok) - 1) {
            fprintf(stderr, "kvserve index-names: bad token id on stdin\n");
            return 1;
        }

        tok[len++] = (char) ch;
    }
}


int
kvs_cli_index_names(int argc, char **argv)
{
    int                rc, i, want_root;
    char               hex[KVS_INDEX_NAME_HEX_LEN + 1], *end;
    double             d;
    size_t             n_ids, cap, n_names, k;
    int32_t           *ids, id;
    uint32_t           block;
    uint64_t           epoch;
    kvs_err_t          err;
    kvs_index_ns_t     ns;
    kvs_index_name_t   root, *names;

    memset(&ns, 0, sizeof(ns));
    ns.adapter = "";
    ns.scope = "";
    block = 16;
    epoch = 0;
    want_root = 0;
    ids = NULL;
    n_ids = 0;
    cap = 0;
    names = NULL;
    rc = 1;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--root") == 0) {
            want_root = 1;
            continue;
        }

        if (strncmp(argv[i], "--", 2) == 0 && argv[i][2] != '\0') {
            if (i + 1 >= argc) {
                fprintf(stderr, "kvserve index-names: %s needs a value\n",
                        argv[i]);
                kvs_cli_index_usage();
                goto usage;
            }

            if (strcmp(argv[i], "--model") == 0) {
                ns.model = argv[++i];

            } else if (strcmp(argv[i], "--adapter") == 0) {
                ns.adapter = argv[++i];

            } else if (strcmp(argv[i], "--scope") == 0) {
                ns.scope = argv[++i];

            } else if (strcmp(argv[i], "--epoch") == 0) {
                i++;
                errno = 0;
                epoch = strtoull(argv[i], &end, 16);
                if (argv[i][0] == '\0' || *end != '\0' || errno != 0
                    || argv[i][0] == '-')
                {
                    fprintf(stderr, "kvserve index-names: --epoch: "
                            "expected up to 16 hex digits, got \"%s\"\n",
                            argv[i]);
                    goto usage;
                }

            } else if (strcmp(argv[i], "--block") == 0) {
                i++;
                if (kvs_cli_num("index-names", "--block", argv[i], 1,
                                KVS_INDEX_BLOCK_TOKENS_MAX, 1, &d)
                    != 0)
                {
                    goto usage;
                }
                block = (uint32_t) d;

            } else {
                fprintf(stderr, "kvserve index-names: unknown option "
                        "\"%s\"\n", argv[i]);
                kvs_cli_index_usage();
                goto usage;
            }

            continue;
        }

        if (kvs_cli_index_id(argv[i], strlen(argv[i]), &id) != 0) {
            fprintf(stderr, "kvserve index-names: bad token id \"%s\"\n",
                    argv[i]);
            goto usage;
        }

        if (kvs_cli_index_push(&ids, &n_ids, &cap, id) != 0) {
            fprintf(stderr, "kvserve index-names: out of memory\n");
            goto done;
        }
    }

    if (ns.model == NULL) {
        fprintf(stderr, "kvserve index-names: --model is required\n");
        kvs_cli_index_usage();
        goto usage;
    }

    if (n_ids == 0 && kvs_cli_index_stdin(&ids, &n_ids, &cap) != 0) {
        goto done;
    }

    ns.model_len = strlen(ns.model);
    ns.adapter_len = strlen(ns.adapter);
    ns.scope_len = strlen(ns.scope);
    ns.epoch = epoch;

    if (kvs_index_name_root(&ns, &root, &err) != KVS_OK) {
        fprintf(stderr, "kvserve index-names: %s\n", err.msg);
        goto usage;
    }

    if (n_ids / block > 0) {
        names = malloc((n_ids / block) * sizeof(kvs_index_name_t));
        if (names == NULL) {
            fprintf(stderr, "kvserve index-names: out of memory\n");
            goto done;
        }
    }

    n_names = 0;

    if (names != NULL
        && kvs_index_name_chain(&root, ids, n_ids, block, names,
                                n_ids / block, &n_names, &err)
           != KVS_OK)
    {
        fprintf(stderr, "kvserve index-names: %s\n", err.msg);
        goto done;
    }

    if (want_root) {
        kvs_index_name_hex(&root, hex);
        printf("%s\n", hex);
    }

    for (k = 0; k < n_names; k++) {
        kvs_index_name_hex(&names[k], hex);
        printf("%s\n", hex);
    }

    rc = fflush(stdout) == 0 ? 0 : 1;
    goto done;

usage:

    rc = 2;

done:

    free(ids);
    free(names);

    return rc;
}
