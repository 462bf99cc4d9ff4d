/*
 * bench_guard: what the output guard costs per streamed token
 * (docs/performance.md, "Guard"): a set of 100 bounded PII, secret and
 * jailbreak rules like an operator's, over generated English-like text
 * with a few matches in it, cut into tokens of 1 to 7 bytes (4 on
 * average) and fed one at a time, as the nginx side feeds a choice's
 * OUT frames.  The baseline in the same run copies the same tokens into
 * the same output buffer without a guard.  Also the input check of a
 * whole prompt without a match, in MB/s.  Times are the thread's CPU
 * time, so that a loaded machine's waits do not count.
 *
 *   bench_guard [-t TOKENS] [-r RULES]
 *       prints "baseline <ns/token>", "guard <ns/token>", the
 *       difference, the matches found, the set's window, and
 *       "input <MB/s>"
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "guard/kvs_guard.h"


static uint64_t
now_ns(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}


static uint64_t  rng = 0x9e3779b97f4a7c15ull;

static uint32_t
rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t) (rng % n);
}


/* Twelve families, the rest of the 100 as vendor tokens and phrases. */
static void
make_rules(kvs_buf_t *b, int n)
{
    int                       i;
    static const char *const  fixed[] = {
        "pii:ssn \\b\\d{3}-\\d{2}-\\d{4}\\b",
        "pii:email [A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9.-]{1,63}"
            "\\.[A-Za-z]{2,10}",
        "pii:card \\b(?:\\d{4}[ -]?){3}\\d{4}\\b",
        "pii:phone \\(\\d{3}\\) \\d{3}-\\d{4}",
        "pii:ipv4 \\b(?:\\d{1,3}\\.){3}\\d{1,3}\\b",
        "pii:iban \\b[A-Z]{2}\\d{2}[A-Z0-9]{11,30}\\b",
        "secret:aws AKIA[0-9A-Z]{16}",
        "secret:github ghp_[A-Za-z0-9]{36}",
        "secret:openai sk-[A-Za-z0-9]{20,48}",
        "secret:slack xox[baprs]-[A-Za-z0-9-]{10,48}",
        "secret:pem -----BEGIN (?:RSA |EC )?PRIVATE KEY-----",
        "secret:password (?i)password\\s{0,3}[:=]\\s{0,3}\\S{1,64}",
    };
    static const char *const  phrases[] = {
        "ignore (?:all )?previous instructions",
        "disregard (?:the|your) (?:system|prior) prompt",
        "you are now (?:DAN|in developer mode)",
        "pretend (?:that )?you have no (?:rules|restrictions)",
    };

    for (i = 0; i < n && i < 12; i++) {
        kvs_buf_printf(b, "%s\n", fixed[i]);
    }

    for (; i < n; i++) {
        if (i % 3 == 0) {
            kvs_buf_printf(b, "jailbreak:p%d (?i)%s\\s{0,2}%d\n", i,
                           phrases[i % 4], i);
        } else {
            kvs_buf_printf(b, "secret:vendor%d v%dk_[A-Za-z0-9]{24,40}\n",
                           i, i);
        }
    }
}


static size_t
make_text(char *t, size_t cap, int with_hits)
{
    size_t                    n, k;
    const char               *w;
    static const char *const  words[] = {
        "the", "model", "answers", "a", "question", "about", "its", "data",
        "and", "then", "writes", "code", "for", "users", "who", "asked",
        "in", "2024", "with", "42", "items,", "each", "one", "of", "them",
        "clear.", "Call", "me", "at", "on", "Monday", "password", "key",
    };
    static const char *const  hits[] = {
        "123-45-6789", "jane.doe@example.com", "AKIAABCDEFGHIJKLMNOP",
        "(555) 010-4477",
    };

    n = 0;

    while (n + 64 < cap) {
        w = with_hits && rnd(400) == 0 ? hits[rnd(4)] : words[rnd(33)];
        k = strlen(w);
        memcpy(t + n, w, k);
        n += k;
        t[n++] = ' ';
    }

    return n;
}


int
main(int argc, char **argv)
{
    int                  i, n_rules;
    char                *text;
    size_t               len, n_tok, k, pos, *cut, tokens;
    int32_t              rule;
    uint64_t             t0, t_base, t_guard, t_in;
    kvs_buf_t            rules, out;
    kvs_err_t            err;
    kvs_guard_t         *g;
    kvs_guard_stream_t   st;

    tokens = 1000000;
    n_rules = 100;

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-t") == 0) {
            tokens = strtoul(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "-r") == 0) {
            n_rules = atoi(argv[i + 1]);
        }
    }

    memset(&rules, 0, sizeof(rules));
    memset(&out, 0, sizeof(out));
    make_rules(&rules, n_rules);

    if (kvs_guard_compile(&g, "bench", (const char *) rules.data, rules.len,
                          &err) != KVS_OK)
    {
        fprintf(stderr, "bench_guard: %s\n", err.msg);
        return 1;
    }

    text = malloc(tokens * 4 + 128);
    cut = malloc((tokens + 1) * sizeof(size_t));
    len = make_text(text, tokens * 4 + 128, 1);

    for (n_tok = 0, pos = 0; pos < len && n_tok < tokens; n_tok++) {
        cut[n_tok] = pos;
        pos += 1 + rnd(7);
    }
    cut[n_tok] = pos < len ? pos : len;

    /* the baseline: the same tokens into the same buffer */
    kvs_buf_reserve(&out, 4096);
    t0 = now_ns();
    for (k = 0; k < n_tok; k++) {
        if (out.len > 2048) {
            out.len = 0;
        }
        kvs_buf_append(&out, text + cut[k], cut[k + 1] - cut[k]);
    }
    t_base = now_ns() - t0;

    kvs_guard_stream_init(&st, g, KVS_GUARD_REDACT, NULL, NULL, &err);
    t0 = now_ns();
    for (k = 0; k < n_tok; k++) {
        out.len = 0;
        if (kvs_guard_feed(&st, text + cut[k], cut[k + 1] - cut[k], &out,
                           &err) != KVS_OK)
        {
            fprintf(stderr, "bench_guard: %s\n", err.msg);
            return 1;
        }
    }
    kvs_guard_end(&st, &out, &err);
    t_guard = now_ns() - t0;

    /* a prompt without a match: read to its end */
    len = make_text(text, tokens * 4 + 128, 0);
    t0 = now_ns();
    kvs_guard_check(g, text, len, &rule, &err);
    t_in = now_ns() - t0;

    printf("rules %d, window %u bytes, tokens %zu of %.2f bytes\n",
           n_rules, kvs_guard_window(g), n_tok,
           (double) cut[n_tok] / (double) n_tok);
    printf("baseline %.1f ns/token\n", (double) t_base / (double) n_tok);
    printf("guard    %.1f ns/token (added %.1f), %u matches redacted, "
           "at most %zu bytes held\n", (double) t_guard / (double) n_tok,
           (double) (t_guard - t_base) / (double) n_tok, st.n_hits,
           st.max_hold);
    printf("input    %.1f MB/s over %zu bytes without a match (rule %d)\n",
           (double) len / ((double) t_in / 1e9) / 1e6, len, (int) rule);

    kvs_guard_stream_free(&st);
    kvs_guard_free(g);
    kvs_buf_free(&rules);
    kvs_buf_free(&out);
    free(text);
    free(cut);

    return 0;
}
