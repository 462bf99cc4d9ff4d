/*
 * kvs_guard_set: reading a pattern file into a compiled rule set
 * (kvs_guard.h gives the syntax): each rule measured (kvs_guard_len.c),
 * compiled (PCRE2's errors and its start bitmap), then compiled again
 * anchored, JIT, for matching; and for each byte, the rules whose match
 * may begin with it.
 *
 * Invariants: a set is all or nothing: the first bad line fails the
 * whole compile, naming "FILE:LINE", and frees what was built; a
 * compiled set is never written again.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_guard_impl.h"

#define KVS_GUARD_FILE_MAX  (4 * 1024 * 1024)


static int
kvs_guard_word(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}


static int
kvs_guard_blank(int c)
{
    return c == ' ' || c == '\t';
}


/* One PCRE2 compile of pat[len]; JIT where the platform has it. */
static pcre2_code *
kvs_guard_pcre(const char *pat, size_t len, uint32_t opts, int *ecode,
    size_t *eoff)
{
    pcre2_code  *code;

    code = pcre2_compile((PCRE2_SPTR) pat, len, KVS_GUARD_COMPILE | opts,
                         ecode, eoff, NULL);
    if (code != NULL) {
        /* without JIT the interpreter answers the same */
        (void) pcre2_jit_compile(code, PCRE2_JIT_COMPLETE
                                       | PCRE2_JIT_PARTIAL_HARD);
    }

    return code;
}


static int
kvs_guard_pcre_err(kvs_err_t *err, const char *name, uint32_t line,
    int ecode, size_t eoff)
{
    PCRE2_UCHAR  msg[160];

    if (pcre2_get_error_message(ecode, msg, sizeof(msg)) < 0) {
        strcpy((char *) msg, "unknown error");
    }

    return kvs_err_set(err, KVS_EFORMAT, "%s:%u: the pattern does not "
                       "compile: %s at offset %zu", name, line,
                       (const char *) msg, eoff);
}


/* One rule line (blanks and CR already cut, not empty, not a comment). */
/* The bytes a match of code may begin with, as a 256-bit map. */
static void
kvs_guard_first_bytes(const pcre2_code *code, uint8_t *bits)
{
    int             c;
    uint32_t        type, unit;
    const uint8_t  *map;

    map = NULL;
    if (pcre2_pattern_info(code, PCRE2_INFO_FIRSTBITMAP, &map) == 0
        && map != NULL)
    {
        memcpy(bits, map, 32);
        return;
    }

    type = 0;
    unit = 0;
    (void) pcre2_pattern_info(code, PCRE2_INFO_FIRSTCODETYPE, &type);

    if (type != 1
        || pcre2_pattern_info(code, PCRE2_INFO_FIRSTCODEUNIT, &unit) != 0
        || unit > 0xff)
    {
        memset(bits, 0xff, 32);
        return;
    }

    /* one byte; caseless or not (PCRE2 does not say): both ASCII cases
     * and every non-ASCII lead byte (U+212A for k, and such) */
    memset(bits, 0, 32);
    bits[unit >> 3] |= (uint8_t) (1u << (unit & 7));
    c = (unit >= 'a' && unit <= 'z') ? (int) unit - 32
        : (unit >= 'A' && unit <= 'Z') ? (int) unit + 32 : (int) unit;
    bits[c >> 3] |= (uint8_t) (1u << (c & 7));
    memset(bits + (0xc0 >> 3), 0xff, 32 - (0xc0 >> 3));
}


/* cand: each byte's rules, in file order. */
static int
kvs_guard_cands(kvs_guard_t *g, const uint8_t *bits, kvs_err_t *err)
{
    size_t    i, c, k;
    uint32_t  n;

    n = 0;
    for (c = 0; c < 256; c++) {
        g->cand_off[c] = n;
        for (i = 0; i < g->n; i++) {
            n += (bits[32 * i + (c >> 3)] >> (c & 7)) & 1;
        }
    }
    g->cand_off[256] = n;

    g->cand = malloc((n ? n : 1) * sizeof(uint16_t));
    if (g->cand == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    for (k = 0, c = 0; c < 256; c++) {
        for (i = 0; i < g->n; i++) {
            if ((bits[32 * i + (c >> 3)] >> (c & 7)) & 1) {
                g->cand[k++] = (uint16_t) i;
            }
        }
    }

    return KVS_OK;
}


static int
kvs_guard_line(kvs_guard_t *g, uint8_t *bits,
    const char *name, uint32_t line, const char *p, const char *end,
    kvs_err_t *err)
{
    int                ecode, rc;
    char              *q;
    size_t             n, eoff, off;
    uint32_t           caps, w;
    kvs_err_t          e;
    const char        *s;
    unsigned long      win;
    kvs_guard_rule_t  *r;

    r = &g->rules[g->n];
    memset(r, 0, sizeof(*r));
    r->line = line;

    for (s = p; p < end && kvs_guard_word((unsigned char) *p); p++) {
        /* the class */
    }

    n = (size_t) (p - s);
    if (n == 0 || n > KVS_GUARD_NAME_MAX) {
        return kvs_err_set(err, KVS_EFORMAT, "%s:%u: a rule starts with "
                           "its class: 1 to %d of [a-z0-9_]", name, line,
                           KVS_GUARD_NAME_MAX);
    }

    memcpy(r->cls, s, n);

    if (p < end && *p == ':') {
        for (s = ++p; p < end && kvs_guard_word((unsigned char) *p); p++) {
            /* the name */
        }

        if (p == s || (size_t) (p - s) > KVS_GUARD_NAME_MAX) {
            return kvs_err_set(err, KVS_EFORMAT, "%s:%u: a rule's name "
                               "after \"%s:\" is 1 to %d of [a-z0-9_]",
                               name, line, r->cls, KVS_GUARD_NAME_MAX);
        }

        snprintf(r->name, sizeof(r->name), "%s:%.*s", r->cls,
                 (int) (p - s), s);

    } else {
        snprintf(r->name, sizeof(r->name), "%s:%u", r->cls, line);
    }

    if (p < end && !kvs_guard_blank((unsigned char) *p)) {
        return kvs_err_set(err, KVS_EFORMAT, "%s:%u: a blank must follow "
                           "the class \"%s\"", name, line, r->cls);
    }

    while (p < end && kvs_guard_blank((unsigned char) *p)) {
        p++;
    }

    if ((size_t) (end - p) > 7 && strncmp(p, "window=", 7) == 0) {
        errno = 0;
        win = strtoul(p + 7, &q, 10);
        if (q == p + 7 || errno != 0 || win == 0
            || win > KVS_GUARD_WINDOW_MAX
            || (q < end && !kvs_guard_blank((unsigned char) *q)))
        {
            return kvs_err_set(err, KVS_EFORMAT, "%s:%u: invalid \"%.*s\": "
                               "window= takes 1 to %d bytes", name, line,
                               (int) (q > p && q <= end ? q - p : 7), p,
                               KVS_GUARD_WINDOW_MAX);
        }

        r->window = (uint32_t) win;
        r->explicit_window = 1;

        for (p = q; p < end && kvs_guard_blank((unsigned char) *p); p++) {
            /* to the pattern */
        }
    }

    if (p == end) {
        return kvs_err_set(err, KVS_EFORMAT, "%s:%u: the rule \"%s\" has "
                           "no pattern", name, line, r->name);
    }

    n = (size_t) (end - p);

    rc = kvs_guard_measure(p, n, r->explicit_window, &w, &off, &e);

    /* PCRE2's own message first: a pattern that does not compile */
    g->one[g->n] = kvs_guard_pcre(p, n, 0, &ecode, &eoff);
    if (g->one[g->n] == NULL) {
        return kvs_guard_pcre_err(err, name, line, ecode, eoff);
    }

    if (rc != KVS_OK) {
        return kvs_err_set(err, rc, "%s:%u: %s", name, line, e.msg);
    }

    if (!r->explicit_window) {
        r->window = w;
    }

    if (pcre2_pattern_info(g->one[g->n], PCRE2_INFO_CAPTURECOUNT, &caps)
        != 0)
    {
        return kvs_err_set(err, KVS_EFORMAT, "%s:%u: PCRE2 gave no capture "
                           "count", name, line);
    }

    kvs_guard_first_bytes(g->one[g->n], bits);

    /* matched anchored at a start, which JIT runs when compiled so */
    pcre2_code_free(g->one[g->n]);
    g->one[g->n] = kvs_guard_pcre(p, n, PCRE2_ANCHORED, &ecode, &eoff);
    if (g->one[g->n] == NULL) {
        return kvs_guard_pcre_err(err, name, line, ecode, eoff);
    }

    if (1 + caps > g->n_pairs) {
        g->n_pairs = 1 + caps;
    }

    if (r->window > g->window) {
        g->window = r->window;
    }

    g->n++;

    return KVS_OK;
}


int
kvs_guard_compile(kvs_guard_t **gp, const char *name, const char *text,
    size_t len, kvs_err_t *err)
{
    int           rc;
    size_t        n;
    uint8_t      *bits;
    uint32_t      line;
    const char   *p, *end, *e, *nl;
    kvs_guard_t  *g;

    *gp = NULL;

    /* rules: at most one per line */
    for (n = 1, p = text; p < text + len; p++) {
        n += (*p == '\n');
    }

    if (n > KVS_GUARD_RULES_MAX) {
        n = KVS_GUARD_RULES_MAX + 1;
    }

    g = calloc(1, sizeof(kvs_guard_t));
    if (g == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    /* one more: the rule being read when a line fails */
    g->rules = calloc(n + 1, sizeof(kvs_guard_rule_t));
    g->one = calloc(n + 1, sizeof(pcre2_code *));
    g->mctx = pcre2_match_context_create(NULL);
    bits = calloc(n + 1, 32);
    g->n_pairs = 1;

    if (g->rules == NULL || g->one == NULL || g->mctx == NULL
        || bits == NULL)
    {
        free(bits);
        kvs_guard_free(g);
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    pcre2_set_match_limit(g->mctx, KVS_GUARD_MATCH_LIMIT);

    rc = KVS_OK;
    line = 0;

    for (p = text, end = text + len; p < end && rc == KVS_OK; p = nl + 1) {
        nl = memchr(p, '\n', (size_t) (end - p));
        if (nl == NULL) {
            nl = end;
        }

        line++;

        if ((size_t) (nl - p) > KVS_GUARD_LINE_MAX) {
            rc = kvs_err_set(err, KVS_EFORMAT, "%s:%u: the line is over "
                             "%d bytes", name, line, KVS_GUARD_LINE_MAX);
            break;
        }

        for (e = nl; e > p && (kvs_guard_blank((unsigned char) e[-1])
                               || e[-1] == '\r'); e--)
        {
            /* trailing blanks and CR */
        }

        while (p < e && kvs_guard_blank((unsigned char) *p)) {
            p++;
        }

        if (p == e || *p == '#') {
            continue;
        }

        if (g->n == KVS_GUARD_RULES_MAX) {
            rc = kvs_err_set(err, KVS_ERANGE, "%s:%u: over %d rules", name,
                             line, KVS_GUARD_RULES_MAX);
            break;
        }

        rc = kvs_guard_line(g, bits + 32 * g->n, name, line, p, e, err);
    }

    if (rc == KVS_OK && g->n == 0) {
        rc = kvs_err_set(err, KVS_EFORMAT, "%s: no rules", name);
    }

    if (rc == KVS_OK) {
        rc = kvs_guard_cands(g, bits, err);
    }

    free(bits);

    if (rc != KVS_OK) {
        kvs_guard_free(g);
        return rc;
    }

    *gp = g;

    return KVS_OK;
}


int
kvs_guard_load(kvs_guard_t **gp, const char *path, kvs_err_t *err)
{
    int     rc;
    FILE   *f;
    char   *text;
    size_t  n;

    *gp = NULL;

    f = fopen(path, "rb");
    if (f == NULL) {
        return kvs_err_set(err, KVS_EIO, "%s: %s", path, strerror(errno));
    }

    text = malloc(KVS_GUARD_FILE_MAX + 1);
    if (text == NULL) {
        fclose(f);
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    n = fread(text, 1, KVS_GUARD_FILE_MAX + 1, f);

    if (ferror(f)) {
        rc = kvs_err_set(err, KVS_EIO, "%s: read failed", path);

    } else if (n > KVS_GUARD_FILE_MAX) {
        rc = kvs_err_set(err, KVS_ERANGE, "%s: over %d bytes", path,
                         KVS_GUARD_FILE_MAX);

    } else {
        rc = kvs_guard_compile(gp, path, text, n, err);
    }

    fclose(f);
    free(text);

    return rc;
}


void
kvs_guard_free(kvs_guard_t *g)
{
    size_t  i;

    if (g == NULL) {
        return;
    }

    for (i = 0; g->one != NULL && i < g->n; i++) {
        pcre2_code_free(g->one[i]);
    }

    /* a rule that failed after its compile */
    if (g->one != NULL && g->rules != NULL) {
        pcre2_code_free(g->one[g->n]);
    }

    pcre2_match_context_free(g->mctx);
    free(g->cand);
    free(g->rules);
    free(g->one);
    free(g);
}


size_t
kvs_guard_n_rules(const kvs_guard_t *g)
{
    return g->n;
}


const kvs_guard_rule_t *
kvs_guard_rule(const kvs_guard_t *g, size_t i)
{
    return i < g->n ? &g->rules[i] : NULL;
}


uint32_t
kvs_guard_window(const kvs_guard_t *g)
{
    return g->window;
}
