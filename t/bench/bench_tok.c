/*
 * bench_tok: single-threaded encode speed of our tokenizer on a corpus,
 * and the growth of its time on pathological inputs.
 *
 *   bench_tok [-n N] [--chunk BYTES] [--ids out.bin] vocab.gguf corpus.txt
 *       prints "ours <MB/s> <tokens/s> <tokens> <best seconds>"
 *   bench_tok --worst [-n N] vocab.gguf
 *       prints "<kind> ours <s for 1 MiB> <s for 4 MiB> <ratio>" for each
 *       pathological text (one character repeated, letters without
 *       spaces); a ratio near 4 is linear or n log n, near 16 quadratic
 *
 * Encoding is kvs_tok_encode(flags 0): no BOS, special-token text not
 * parsed, the fixtures' convention.  MB is 10^6 bytes.  The time is the
 * best of N runs with a warm context and a warm id array, as a worker
 * that has served requests before has them.  The corpus is cut the way
 * tok_peer.py cuts it (--chunk 0: one call for the whole text), so the
 * peers see the same calls.  The ids file is little-endian int32, all
 * chunks' ids in order.
 */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer/kvs_tok.h"
#include "tokenizer/kvs_vocab.h"


typedef struct {
    size_t  off;
    size_t  len;
} bench_chunk_t;


static double
bench_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}


static char *
bench_slurp(const char *path, size_t *len)
{
    FILE    *f;
    char    *buf;
    long     n;

    f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "bench_tok: %s: %s\n", path, strerror(errno));
        return NULL;
    }

    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0
        || fseek(f, 0, SEEK_SET) != 0)
    {
        fprintf(stderr, "bench_tok: %s: cannot size\n", path);
        fclose(f);
        return NULL;
    }

    buf = malloc((size_t) n + 1);
    if (buf == NULL || fread(buf, 1, (size_t) n, f) != (size_t) n) {
        fprintf(stderr, "bench_tok: %s: read failed\n", path);
        free(buf);
        fclose(f);
        return NULL;
    }

    fclose(f);
    *len = (size_t) n;

    return buf;
}


/*
 * The chunks of text: after the last '\n' within the next max bytes,
 * else at the last UTF-8 character boundary (a character longer than
 * max is cut through, as tok_peer.py does).  max 0: one chunk.
 * Returns the number of chunks, written to *out ([n] allocated here).
 */
static size_t
bench_chunks(const char *text, size_t len, size_t max, bench_chunk_t **out)
{
    size_t          i, end, n, cap;
    const char     *nl;
    bench_chunk_t  *c, *nc;

    n = 0;
    cap = 16;
    c = malloc(cap * sizeof(bench_chunk_t));
    if (c == NULL) {
        return 0;
    }

    for (i = 0; i < len; i = end) {
        if (max == 0 || len - i <= max) {
            end = len;

        } else {
            nl = memrchr(text + i, '\n', max);
            if (nl != NULL) {
                end = (size_t) (nl - text) + 1;

            } else {
                end = i + max;
                while (end > i && ((unsigned char) text[end] & 0xC0) == 0x80)
                {
                    end--;
                }
                if (end == i) {
                    end = i + max;
                }
            }
        }

        if (n == cap) {
            cap *= 2;
            nc = realloc(c, cap * sizeof(bench_chunk_t));
            if (nc == NULL) {
                free(c);
                return 0;
            }
            c = nc;
        }

        c[n].off = i;
        c[n].len = end - i;
        n++;
    }

    *out = c;

    return n;
}


/* Encodes every chunk into ids (reset first); returns the seconds taken,
 * or a negative number on error (printed). */
static double
bench_encode(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx, const char *text,
    const bench_chunk_t *c, size_t nc, kvs_ids_t *ids)
{
    size_t     k;
    double     t0;
    kvs_err_t  err;

    ids->n = 0;
    t0 = bench_now();

    for (k = 0; k < nc; k++) {
        if (kvs_tok_encode(v, ctx, text + c[k].off, c[k].len, 0, ids, &err)
            != KVS_OK)
        {
            fprintf(stderr, "bench_tok: chunk at byte %zu: %s\n",
                    c[k].off, err.msg);
            return -1.0;
        }
    }

    return bench_now() - t0;
}


static int
bench_write_ids(const char *path, const kvs_ids_t *ids)
{
    FILE     *f;
    size_t    i;
    uint32_t  u;
    uint8_t   b[4];

    f = fopen(path, "wb");
    if (f == NULL) {
        fprintf(stderr, "bench_tok: %s: %s\n", path, strerror(errno));
        return -1;
    }

    for (i = 0; i < ids->n; i++) {
        u = (uint32_t) ids->ids[i];
        b[0] = (uint8_t) u;
        b[1] = (uint8_t) (u >> 8);
        b[2] = (uint8_t) (u >> 16);
        b[3] = (uint8_t) (u >> 24);
        if (fwrite(b, 1, 4, f) != 4) {
            fclose(f);
            return -1;
        }
    }

    return fclose(f) == 0 ? 0 : -1;
}


/* One pathological text of size bytes (whole characters); kind as
 * tok_peer.py's worst_texts(). */
static size_t
bench_worst_text(char *buf, size_t size, int kind)
{
    static const char  *units[] = {
        "a", " ", "1", "\n", "\xe4\xb8\xad" /* U+4E2D */,
        "\xf0\x9f\xa6\x99" /* U+1F999 */
    };
    size_t              i, u, n;
    uint64_t            x;

    if (kind == 6) {
        /* letters without spaces: the LCG tok_peer.py uses */
        x = 1;
        for (i = 0; i < size; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            buf[i] = (char) ('a' + (x >> 33) % 26);
        }
        return size;
    }

    u = strlen(units[kind]);
    n = size / u * u;
    for (i = 0; i < n; i += u) {
        memcpy(buf + i, units[kind], u);
    }

    return n;
}


static int
bench_worst(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx, int reps)
{
    static const char  *names[] = {
        "a", "space", "digit", "newline", "cjk", "emoji", "letters"
    };
    int                 kind, r, m;
    char               *buf;
    double              t, best[2], limit;
    size_t              len;
    const char         *env;
    kvs_ids_t           ids;
    bench_chunk_t       one;

    env = getenv("WORST_LIMIT");
    limit = env != NULL ? atof(env) : 5.0;

    buf = malloc(4 << 20);
    if (buf == NULL) {
        return 1;
    }
    memset(&ids, 0, sizeof(ids));

    for (kind = 0; kind < 7; kind++) {
        for (m = 0; m < 2; m++) {
            len = bench_worst_text(buf, (size_t) (m == 0 ? 1 : 4) << 20,
                                   kind);
            one.off = 0;
            one.len = len;
            best[m] = 1e30;

            for (r = 0; r < reps; r++) {
                t = bench_encode(v, ctx, buf, &one, 1, &ids);
                if (t < 0) {
                    free(buf);
                    kvs_ids_free(&ids);
                    return 1;
                }
                best[m] = t < best[m] ? t : best[m];
            }

            if (m == 0 && best[0] > limit) {
                break;
            }
        }

        if (best[0] > limit) {
            printf("%s ours %.4f - -\n", names[kind], best[0]);

        } else {
            printf("%s ours %.4f %.4f %.2f\n", names[kind], best[0],
                   best[1], best[1] / best[0]);
        }
        fflush(stdout);
    }

    free(buf);
    kvs_ids_free(&ids);

    return 0;
}


int
main(int argc, char **argv)
{
    int             i, reps, worst, rc;
    char           *text;
    double          t, best;
    size_t          len, chunk, nc;
    const char     *ids_path;
    kvs_err_t       err;
    kvs_ids_t       ids;
    kvs_vocab_t    *v;
    kvs_tok_ctx_t   ctx;
    bench_chunk_t  *c;

    c = NULL;
    reps = 3;
    chunk = 0;
    worst = 0;
    ids_path = NULL;

    for (i = 1; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);

        } else if (strcmp(argv[i], "--chunk") == 0 && i + 1 < argc) {
            chunk = (size_t) strtoull(argv[++i], NULL, 10);

        } else if (strcmp(argv[i], "--ids") == 0 && i + 1 < argc) {
            ids_path = argv[++i];

        } else if (strcmp(argv[i], "--worst") == 0) {
            worst = 1;

        } else {
            break;
        }
    }

    if (reps < 1 || argc - i != (worst ? 1 : 2)) {
        fprintf(stderr,
                "usage: bench_tok [-n N] [--chunk BYTES] [--ids out.bin] "
                "vocab.gguf corpus.txt\n"
                "       bench_tok --worst [-n N] vocab.gguf\n");
        return 2;
    }

    if (kvs_vocab_open(&v, argv[i], &err) != KVS_OK) {
        fprintf(stderr, "bench_tok: %s: %s\n", argv[i], err.msg);
        return 1;
    }

    memset(&ctx, 0, sizeof(ctx));

    if (worst) {
        rc = bench_worst(v, &ctx, reps);
        kvs_tok_ctx_free(&ctx);
        kvs_vocab_free(v);
        return rc;
    }

    text = bench_slurp(argv[i + 1], &len);
    if (text == NULL) {
        kvs_vocab_free(v);
        return 1;
    }

    nc = bench_chunks(text, len, chunk, &c);
    if (nc == 0 && len > 0) {
        fprintf(stderr, "bench_tok: out of memory\n");
        return 1;
    }

    memset(&ids, 0, sizeof(ids));
    best = 1e30;
    rc = 0;

    for (i = 0; i < reps; i++) {
        t = bench_encode(v, &ctx, text, c, nc, &ids);
        if (t < 0) {
            rc = 1;
            break;
        }
        best = t < best ? t : best;
    }

    if (rc == 0) {
        best = best > 0 ? best : 1e-9;
        printf("ours %.2f %.0f %zu %.6f\n", (double) len / best / 1e6,
               (double) ids.n / best, ids.n, best);

        if (ids_path != NULL && bench_write_ids(ids_path, &ids) != 0) {
            fprintf(stderr, "bench_tok: %s: write failed\n", ids_path);
            rc = 1;
        }
    }

    free(c);
    free(text);
    kvs_ids_free(&ids);
    kvs_tok_ctx_free(&ctx);
    kvs_vocab_free(v);

    return rc;
}
