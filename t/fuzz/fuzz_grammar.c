/*
 * fuzz_grammar: the schema compiler, the tools spec compiler, the regex
 * compiler, the matcher and the mask on hostile input (src/grammar).
 *
 * The input is "schema JSON \0 bytes" (an object with a "syntax" or
 * "choice" key is a tools spec, kvs_gram_from_tools): it is compiled (any
 * outcome but a crash is fine; an error must carry a message); when it
 * compiles, the bytes are fed to a matcher one at a time while it takes
 * them, with a tiny vocabulary's mask checked against a brute force for
 * the first steps.  Without a \0 the whole input is also tried as a
 * `pattern`.  Checks beyond "no crash, no undefined behaviour, no leak":
 * a refused byte leaves the state as it was; rolling back and re-feeding
 * gives the same state; the mask equals the brute force; and for a tools
 * spec, bytes the grammar takes as a complete output are read back by
 * the tool-call parser (src/api/kvs_tool_parse.c) as its choice says:
 * calls for "required", none for "none", calls or text without the
 * marker for "auto" (a repeated key of a map, which no grammar can
 * exclude, is the one exception).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api/kvs_tool_parse.h"
#include "grammar/kvs_grammar.h"


static kvs_gram_vocab_t  *fz_gv;


static void
fz_vocab(void)
{
    static const char  *pieces[] = { "{\"", "\": ", "\", \"", "\"}", "true",
                                     "null", "12", "\\u00", "\xc3\xa9",
                                     "\xe6\x97", "}]", "[{", "<tool_call>",
                                     "[TOOL_CALLS]", "<function=",
                                     "<|python_tag|>" };
    static uint8_t      bytes[256];
    const uint8_t      *texts[256 + 17];
    uint32_t            lens[256 + 17], i;
    uint8_t             kinds[256 + 17];

    for (i = 0; i < 256; i++) {
        bytes[i] = (uint8_t) i;
        texts[i] = &bytes[i];
        lens[i] = 1;
        kinds[i] = KVS_GRAM_TOK_TEXT;
    }
    for (i = 0; i < 16; i++) {
        texts[256 + i] = (const uint8_t *) pieces[i];
        lens[256 + i] = (uint32_t) strlen(pieces[i]);
        kinds[256 + i] = KVS_GRAM_TOK_TEXT;
    }
    texts[272] = (const uint8_t *) "";
    lens[272] = 0;
    kinds[272] = KVS_GRAM_TOK_END;

    if (kvs_gram_vocab_from_bytes(&fz_gv, 273, texts, lens, kinds, NULL)
        != KVS_OK)
    {
        abort();
    }
}


static void
fz_check_mask(kvs_gram_masker_t *mk, kvs_gram_matcher_t *m)
{
    uint32_t  bits[9], id, want;
    size_t    n0;

    if (kvs_gram_mask(mk, bits, NULL) != KVS_OK) {
        return;
    }

    n0 = kvs_gram_matcher_len(m);

    for (id = 0; id < fz_gv->n_tokens; id++) {
        if (fz_gv->kind[id] == KVS_GRAM_TOK_END) {
            want = (uint32_t) kvs_gram_matcher_can_end(m);
        } else {
            want = kvs_gram_matcher_feed(m, fz_gv->bytes + fz_gv->off[id],
                                         fz_gv->len[id], NULL) == KVS_OK;
            if (want) {
                kvs_gram_matcher_rollback(m, fz_gv->len[id]);
            }
        }
        if ((bits[id >> 5] >> (id & 31) & 1) != want) {
            fprintf(stderr, "mask differs at token %u\n", id);
            abort();
        }
    }

    if (kvs_gram_matcher_len(m) != n0) {
        abort();
    }
}


/* 1 if some '{' of text starts an object with a repeated key */
static int
fz_dup_keys(const char *text, size_t len)
{
    size_t        i;
    json_t       *v;
    json_error_t  je;

    for (i = 0; i < len; i++) {
        if (text[i] != '{') {
            continue;
        }
        v = json_loadb(text + i, len - i, JSON_DISABLE_EOF_CHECK
                       | JSON_REJECT_DUPLICATES, &je);
        json_decref(v);
        if (v == NULL && strstr(je.text, "duplicate") != NULL) {
            return 1;
        }
    }

    return 0;
}


/* A complete output of a tools grammar, read back by the parser. */
static void
fz_check_tools(int syn, const char *choice, const uint8_t *text,
    size_t len)
{
    /* what text never holds (llama3, llama4: none; functionary32: its calls
     * may come at once, but its text after "all\n" has no ">>>") */
    static const char  *markers[KVS_TOOL_SYN_N] = {
        NULL, "<tool_call>", NULL, "[TOOL_CALLS]", "<|tool_call|>",
        "functools", "<function=", "<｜tool▁calls▁begin｜>", ">>>", NULL,
        "Action:", "<|START_ACTION|>", "<|tool_call_start|>"
    };
    kvs_tool_parsed_t   p;
    const char         *mk;
    int                 calls, marked;

    if (kvs_tool_parse((kvs_tool_syntax_t) syn, (const char *) text, len,
                       &p, NULL) != KVS_OK)
    {
        return;                       /* out of memory */
    }

    calls = p.n_calls > 0;
    kvs_tool_parsed_free(&p);

    mk = markers[syn];
    marked = mk != NULL && memmem(text, len, mk, strlen(mk)) != NULL;

    if (fz_dup_keys((const char *) text, len)) {
        return;
    }

    if ((strcmp(choice, "required") == 0 && !calls)
        || (strcmp(choice, "none") == 0 && (calls || marked))
        || (strcmp(choice, "auto") == 0 && !calls && marked))
    {
        fprintf(stderr, "tools %s/%s: \"%.*s\" parsed as %s\n",
                kvs_tool_syntax_name((kvs_tool_syntax_t) syn), choice,
                (int) len, (const char *) text, calls ? "calls" : "text");
        abort();
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int                 rc, end, tools, syn;
    char                choice[16];
    uint8_t             out[512];
    size_t              split, i, fed;
    json_t             *s;
    uint32_t            rule;
    uint64_t            next[4], again[4];
    kvs_err_t           err;
    kvs_gram_t          g;
    kvs_gram_opts_t     o;
    kvs_gram_matcher_t  m;
    kvs_gram_masker_t   mk;
    kvs_gram_mlimits_t  ml;

    if (fz_gv == NULL) {
        fz_vocab();
    }

    for (split = 0; split < size && data[split] != 0; split++) {
        /* the schema's end */
    }

    memset(&o, 0, sizeof(o));
    o.lim.max_elems = 1 << 16;
    o.lim.max_rules = 1 << 14;
    o.flags = size > 0 && (data[size - 1] & 1) ? KVS_GRAM_COMPACT : 0;

    if (split == size) {
        kvs_err_clear(&err);
        kvs_gram_init(&g, &o.lim);
        rc = kvs_gram_regex(&g, (const char *) data, size, &rule, &err);
        if (rc != KVS_OK && err.msg[0] == '\0') {
            abort();
        }
        kvs_gram_free(&g);
    }

    s = json_loadb((const char *) data, split, JSON_DECODE_ANY, NULL);
    if (s == NULL) {
        return 0;
    }

    kvs_err_clear(&err);
    tools = json_object_get(s, "syntax") != NULL
            || json_object_get(s, "choice") != NULL;
    rc = tools ? kvs_gram_from_tools(&g, s, &o, &err)
               : kvs_gram_from_schema(&g, s, &o, &err);

    syn = 0;
    choice[0] = '\0';

    if (tools && rc == KVS_OK) {
        /* the spec's syntax names are the parser's */
        for (syn = KVS_TOOL_SYN_N - 1; syn > 0; syn--) {
            if (strcmp(kvs_tool_syntax_name((kvs_tool_syntax_t) syn),
                       json_string_value(json_object_get(s, "syntax")))
                == 0)
            {
                break;
            }
        }
        snprintf(choice, sizeof(choice), "%s",
                 json_string_value(json_object_get(s, "choice")));
    }

    json_decref(s);

    if (rc != KVS_OK) {
        if (err.msg[0] == '\0') {
            abort();
        }
        kvs_gram_free(&g);
        return 0;
    }

    memset(&ml, 0, sizeof(ml));
    ml.max_nodes = 1 << 16;
    ml.max_front = 512;

    if (kvs_gram_matcher_init(&m, &g, &ml, &err) != KVS_OK) {
        kvs_gram_free(&g);
        return 0;
    }
    if (kvs_gram_masker_init(&mk, fz_gv, &m, 4, &err) != KVS_OK) {
        abort();
    }

    fed = 0;
    for (i = split + 1; i < size && i < split + 1 + 512; i++) {
        if (fed < 8) {
            fz_check_mask(&mk, &m);
        }

        kvs_gram_matcher_next(&m, next);
        end = kvs_gram_matcher_can_end(&m);
        rc = kvs_gram_matcher_byte(&m, data[i], NULL);

        if (rc != KVS_OK) {
            /* refused: nothing changed */
            kvs_gram_matcher_next(&m, again);
            if (memcmp(next, again, sizeof(next)) != 0
                || end != kvs_gram_matcher_can_end(&m))
            {
                abort();
            }
            if (rc == KVS_EFORMAT && (next[data[i] >> 6]
                                      >> (data[i] & 63) & 1))
            {
                /* a byte in the next set may still die in the closure
                 * only if every stack that takes it dead-ends: never,
                 * since dead alternatives are pruned */
                abort();
            }
            continue;
        }
        out[fed++] = data[i];

        /* roll back one and re-feed: the same state */
        kvs_gram_matcher_next(&m, next);
        end = kvs_gram_matcher_can_end(&m);
        kvs_gram_matcher_rollback(&m, 1);
        if (kvs_gram_matcher_byte(&m, data[i], NULL) != KVS_OK) {
            abort();
        }
        kvs_gram_matcher_next(&m, again);
        if (memcmp(next, again, sizeof(next)) != 0
            || end != kvs_gram_matcher_can_end(&m))
        {
            abort();
        }
    }

    if (syn > 0 && kvs_gram_matcher_can_end(&m)) {
        fz_check_tools(syn, choice, out, fed);
    }

    kvs_gram_masker_free(&mk);
    kvs_gram_matcher_free(&m);
    kvs_gram_free(&g);

    return 0;
}
