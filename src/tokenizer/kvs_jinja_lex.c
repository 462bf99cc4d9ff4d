/*
 * kvs_jinja_lex: template text to tokens, with Jinja's whitespace control
 * as Hugging Face configures it (trim_blocks, lstrip_blocks):
 *
 *   {%- / {{- / {#-   strip all whitespace before the tag;
 *   -%} / -}} / -#}   strip all whitespace after it;
 *   {%+ / +%}         keep the indentation before / the newline after;
 *   lstrip_blocks     spaces and tabs (any whitespace but a newline)
 *                     between a line's start and a {% or {# are dropped;
 *   trim_blocks       the one newline right after a %} or #} is dropped.
 *
 * A line "starts" at the template's start, after a newline in text, and
 * after a tag whose end consumed a newline; that is where jinja2 applies
 * lstrip_blocks to text that has no newline of its own.  Text tokens point
 * into the (normalised) source; string literals are decoded into the
 * arena with Python's escapes.  Invariant: the token array always ends
 * with one KVS_JT_EOF.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_utf8.h"
#include "kvs_jinja_impl.h"


typedef struct {
    kvs_jarena_t  *a;
    const char    *src;
    size_t         len;
    size_t         pos;
    uint32_t       line;
    kvs_jtok_t    *t;
    size_t         n;
    size_t         cap;
    kvs_err_t     *err;
} kvs_jlex_t;


static int
kvs_jlex_push(kvs_jlex_t *L, kvs_jtok_t *tok)
{
    kvs_jtok_t  *nt;
    size_t       cap;

    if (L->n == L->cap) {
        cap = L->cap ? L->cap * 2 : 256;
        nt = kvs_jarena_alloc(L->a, cap * sizeof(kvs_jtok_t));
        if (nt == NULL) {
            return kvs_err_set(L->err, KVS_ENOMEM, "template too large");
        }
        if (L->n) {
            memcpy(nt, L->t, L->n * sizeof(kvs_jtok_t));
        }
        L->t = nt;
        L->cap = cap;
    }

    L->t[L->n++] = *tok;

    return KVS_OK;
}


static uint32_t
kvs_jlex_lines(const char *p, size_t n)
{
    uint32_t  k = 0;

    while (n--) {
        k += (*p++ == '\n');
    }

    return k;
}


/* Python's \s over UTF-8 from p, bytes of the run */
static size_t
kvs_jlex_ws(const char *p, size_t n)
{
    return kvs_jstr_lspan(p, n, NULL, 0);
}


static int
kvs_jlex_string(kvs_jlex_t *L, kvs_jtok_t *tok)
{
    char          q, *out, *o;
    size_t        i, start, k;
    uint32_t      cp, v;
    const char   *s = L->src;
    uint8_t       u[4];
    size_t        nu;
    int           d;

    q = s[L->pos];
    start = ++L->pos;
    for (i = start; i < L->len && s[i] != q; i++) {
        if (s[i] == '\\' && i + 1 < L->len) {
            i++;
        }
    }
    if (i >= L->len) {
        return kvs_err_set(L->err, KVS_EFORMAT,
                           "line %u: unterminated string", tok->line);
    }

    out = kvs_jarena_alloc(L->a, i - start + 1);
    if (out == NULL) {
        return kvs_err_set(L->err, KVS_ENOMEM, "template too large");
    }
    o = out;

    for (k = start; k < i; k++) {
        if (s[k] != '\\') {
            *o++ = s[k];
            continue;
        }
        k++;
        switch (s[k]) {
        case '\n': break;
        case '\\': *o++ = '\\'; break;
        case '\'': *o++ = '\''; break;
        case '"': *o++ = '"'; break;
        case 'a': *o++ = '\a'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'v': *o++ = '\v'; break;
        case 'x': case 'u': case 'U':
            nu = s[k] == 'x' ? 2 : s[k] == 'u' ? 4 : 8;
            v = 0;
            for (d = 0; d < (int) nu; d++) {
                char  h = k + 1 + d < i ? s[k + 1 + d] : 0;
                int   x = h >= '0' && h <= '9' ? h - '0'
                          : h >= 'a' && h <= 'f' ? h - 'a' + 10
                          : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (x < 0) {
                    return kvs_err_set(L->err, KVS_EFORMAT,
                                       "line %u: bad \\%c escape in a string",
                                       tok->line, s[k]);
                }
                v = v * 16 + (uint32_t) x;
            }
            k += nu;
            cp = v;
            if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
                return kvs_err_set(L->err, KVS_EUNSUPPORTED,
                                   "line %u: string escape of U+%04X is not "
                                   "a character", tok->line, cp);
            }
            if (cp < 0x80) {
                u[0] = (uint8_t) cp; nu = 1;
            } else if (cp < 0x800) {
                u[0] = 0xc0 | (cp >> 6); u[1] = 0x80 | (cp & 0x3f); nu = 2;
            } else if (cp < 0x10000) {
                u[0] = 0xe0 | (cp >> 12); u[1] = 0x80 | ((cp >> 6) & 0x3f);
                u[2] = 0x80 | (cp & 0x3f); nu = 3;
            } else {
                u[0] = 0xf0 | (cp >> 18); u[1] = 0x80 | ((cp >> 12) & 0x3f);
                u[2] = 0x80 | ((cp >> 6) & 0x3f); u[3] = 0x80 | (cp & 0x3f);
                nu = 4;
            }
            /* an escape is never longer than what it stands for */
            memcpy(o, u, nu);
            o += nu;
            break;
        default:
            if (s[k] >= '0' && s[k] <= '7') {
                v = 0;
                for (d = 0; d < 3 && k < i && s[k] >= '0' && s[k] <= '7';
                     d++, k++)
                {
                    v = v * 8 + (uint32_t) (s[k] - '0');
                }
                k--;
                if (v >= 0x80) {
                    *o++ = (char) (0xc0 | (v >> 6));
                    *o++ = (char) (0x80 | (v & 0x3f));
                } else {
                    *o++ = (char) v;
                }
                break;
            }
            /* Python keeps an unknown escape as it is */
            *o++ = '\\';
            *o++ = s[k];
        }
    }

    tok->type = KVS_JT_STRING;
    tok->p = out;
    tok->n = (size_t) (o - out);
    L->line += kvs_jlex_lines(s + start, i - start);
    L->pos = i + 1;

    return KVS_OK;
}


static int
kvs_jlex_number(kvs_jlex_t *L, kvs_jtok_t *tok)
{
    const char  *s = L->src;
    size_t       i = L->pos, j;
    char         buf[64], *b = buf;
    int          is_float = 0;

    while (i < L->len && ((s[i] >= '0' && s[i] <= '9') || s[i] == '_')) {
        i++;
    }
    if (i + 1 < L->len && s[i] == '.' && s[i + 1] >= '0' && s[i + 1] <= '9') {
        is_float = 1;
        i++;
        while (i < L->len && ((s[i] >= '0' && s[i] <= '9') || s[i] == '_')) {
            i++;
        }
    }
    if (i < L->len && (s[i] == 'e' || s[i] == 'E')) {
        j = i + 1;
        if (j < L->len && (s[j] == '+' || s[j] == '-')) {
            j++;
        }
        if (j < L->len && s[j] >= '0' && s[j] <= '9') {
            is_float = 1;
            i = j;
            while (i < L->len && s[i] >= '0' && s[i] <= '9') {
                i++;
            }
        }
    }

    if (i - L->pos >= sizeof(buf)) {
        return kvs_err_set(L->err, KVS_EUNSUPPORTED,
                           "line %u: number too long", tok->line);
    }
    for (j = L->pos; j < i; j++) {
        if (s[j] != '_') {
            *b++ = s[j];
        }
    }
    *b = '\0';

    if (is_float) {
        tok->type = KVS_JT_FLOAT;
        tok->f = strtod(buf, NULL);
    } else {
        tok->type = KVS_JT_INT;
        errno = 0;
        tok->i = strtoll(buf, NULL, 10);
        if (errno == ERANGE) {
            /* Python's ints are unbounded, ours are 64-bit */
            return kvs_err_set(L->err, KVS_EUNSUPPORTED,
                               "line %u: integer %s too large", tok->line,
                               buf);
        }
    }
    L->pos = i;

    return KVS_OK;
}


/* the tokens inside one tag, up to and including its end */
static int
kvs_jlex_tag(kvs_jlex_t *L, char kind, int *strip_after, int *keep_nl)
{
    const char  *s = L->src;
    kvs_jtok_t   tok;
    int          depth = 0, rc;
    char         c, end = kind == '%' ? '%' : '}';
    size_t       w;

    for ( ;; ) {
        while (L->pos < L->len
               && (w = kvs_jlex_ws(s + L->pos, L->len - L->pos)) > 0)
        {
            L->line += kvs_jlex_lines(s + L->pos, w);
            L->pos += w;
        }
        if (L->pos >= L->len) {
            return kvs_err_set(L->err, KVS_EFORMAT,
                               "line %u: unexpected end of template inside "
                               "a %s", L->line,
                               kind == '%' ? "{% %} tag" : "{{ }} tag");
        }

        memset(&tok, 0, sizeof(tok));
        tok.line = L->line;
        c = s[L->pos];

        /* the end: "-%}", "+%}", "%}" ("}}" only outside brackets) */
        if (depth == 0 || kind == '%') {
            size_t  k = L->pos;
            int     sign = 0;

            if ((c == '-' || c == '+') && k + 2 < L->len + 0
                && s[k + 1] == end && s[k + 2] == '}')
            {
                sign = c;
                k++;
            }
            if (k + 1 < L->len && s[k] == end && s[k + 1] == '}'
                && (kind == '%' || depth == 0))
            {
                *strip_after = sign == '-';
                *keep_nl = sign == '+';
                L->pos = k + 2;
                tok.type = kind == '%' ? KVS_JT_BLOCK_END : KVS_JT_VAR_END;
                return kvs_jlex_push(L, &tok);
            }
        }

        if (c == '\'' || c == '"') {
            if ((rc = kvs_jlex_string(L, &tok)) != KVS_OK) {
                return rc;
            }

        } else if (c >= '0' && c <= '9') {
            if ((rc = kvs_jlex_number(L, &tok)) != KVS_OK) {
                return rc;
            }

        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
                   || c == '_')
        {
            size_t  i = L->pos;

            while (i < L->len
                   && ((s[i] >= 'a' && s[i] <= 'z')
                       || (s[i] >= 'A' && s[i] <= 'Z')
                       || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            {
                i++;
            }
            tok.type = KVS_JT_NAME;
            tok.p = s + L->pos;
            tok.n = i - L->pos;
            L->pos = i;

        } else {
            char  d = L->pos + 1 < L->len ? s[L->pos + 1] : 0;

            tok.type = KVS_JT_OP;
            tok.op = (uint8_t) c;
            L->pos++;
            if (c == '/' && d == '/') {
                tok.op = KVS_JOP_FDIV;
            } else if (c == '*' && d == '*') {
                tok.op = KVS_JOP_POW;
            } else if (c == '=' && d == '=') {
                tok.op = KVS_JOP_EQ;
            } else if (c == '!' && d == '=') {
                tok.op = KVS_JOP_NE;
            } else if (c == '<' && d == '=') {
                tok.op = KVS_JOP_LE;
            } else if (c == '>' && d == '=') {
                tok.op = KVS_JOP_GE;
            } else if (strchr("+-/*%~[](){}|,.:;<>=", c) == NULL || c == 0) {
                return kvs_err_set(L->err, KVS_EFORMAT,
                                   "line %u: unexpected character '%c' in a "
                                   "tag", L->line,
                                   c > 32 && c < 127 ? c : '?');
            } else {
                d = 0;
            }
            if (d) {
                L->pos++;
            }
            if (c == '(' || c == '[' || c == '{') {
                depth++;
            } else if ((c == ')' || c == ']' || c == '}') && depth > 0) {
                depth--;
            }
        }

        if ((rc = kvs_jlex_push(L, &tok)) != KVS_OK) {
            return rc;
        }
    }
}


int
kvs_jinja_lex(kvs_jarena_t *a, const char *src, size_t len,
    kvs_jtok_t **toks, size_t *n, kvs_err_t *err)
{
    kvs_jlex_t   L;
    kvs_jtok_t   tok;
    const char  *s = src, *p;
    size_t       start, tlen, i, after;
    char         kind, sign;
    int          rc, strip_next = 0, keep_nl, line_start = 1, trim_nl;

    memset(&L, 0, sizeof(L));
    L.a = a;
    L.src = src;
    L.len = len;
    L.line = 1;
    L.err = err;

    for ( ;; ) {
        /* the next tag */
        start = L.pos;
        p = NULL;
        for (i = L.pos; i + 1 < len; i++) {
            if (s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%'
                                || s[i + 1] == '#'))
            {
                p = s + i;
                break;
            }
        }
        tlen = (p ? (size_t) (p - s) : len) - start;
        kind = p ? p[1] : 0;
        sign = p && p + 2 < s + len ? p[2] : 0;
        if (sign != '-' && sign != '+') {
            sign = 0;
        }

        if (strip_next) {
            size_t  w = kvs_jlex_ws(s + start, tlen);

            start += w;
            tlen -= w;
            line_start = w > 0 && s[start - 1] == '\n';
        }

        if (p != NULL && sign == '-') {
            tlen -= kvs_jstr_rspan(s + start, tlen, NULL, 0);

        } else if (p != NULL && sign != '+' && kind != '{') {
            /* lstrip_blocks: whitespace alone on its line before a tag */
            size_t  l = tlen;

            while (l > 0 && s[start + l - 1] != '\n') {
                l--;
            }
            if ((l > 0 || line_start) && l < tlen
                && kvs_jlex_ws(s + start + l, tlen - l) == tlen - l)
            {
                tlen = l;
            }
        }

        if (tlen > 0) {
            memset(&tok, 0, sizeof(tok));
            tok.type = KVS_JT_TEXT;
            tok.line = L.line;
            tok.p = s + start;
            tok.n = tlen;
            if ((rc = kvs_jlex_push(&L, &tok)) != KVS_OK) {
                return rc;
            }
        }

        if (p == NULL) {
            break;
        }

        L.line += kvs_jlex_lines(s + L.pos, (size_t) (p - s) - L.pos);
        L.pos = (size_t) (p - s) + 2 + (sign != 0);
        strip_next = 0;
        keep_nl = 0;
        trim_nl = 0;

        if (kind == '#') {
            size_t  k;

            for (k = L.pos; k + 1 < len; k++) {
                if (s[k] == '#' && s[k + 1] == '}') {
                    break;
                }
            }
            if (k + 1 >= len) {
                return kvs_err_set(err, KVS_EFORMAT,
                                   "line %u: unterminated comment", L.line);
            }
            after = k + 2;
            if (k > L.pos && s[k - 1] == '-') {
                strip_next = 1;
            } else if (k > L.pos && s[k - 1] == '+') {
                keep_nl = 1;
            }
            L.line += kvs_jlex_lines(s + L.pos, after - L.pos);
            L.pos = after;
            trim_nl = !strip_next && !keep_nl;

        } else {
            memset(&tok, 0, sizeof(tok));
            tok.type = kind == '%' ? KVS_JT_BLOCK_BEGIN : KVS_JT_VAR_BEGIN;
            tok.line = L.line;
            if ((rc = kvs_jlex_push(&L, &tok)) != KVS_OK) {
                return rc;
            }
            rc = kvs_jlex_tag(&L, kind == '%' ? '%' : '{', &strip_next,
                              &keep_nl);
            if (rc != KVS_OK) {
                return rc;
            }
            trim_nl = kind == '%' && !strip_next && !keep_nl;
        }

        line_start = 0;
        if (trim_nl && L.pos < len && s[L.pos] == '\n') {
            L.pos++;
            L.line++;
            line_start = 1;
        }
        if (strip_next) {
            /* line_start is decided when the stripped run is known */
            line_start = 0;
        }
    }

    memset(&tok, 0, sizeof(tok));
    tok.type = KVS_JT_EOF;
    tok.line = L.line;
    if ((rc = kvs_jlex_push(&L, &tok)) != KVS_OK) {
        return rc;
    }

    *toks = L.t;
    *n = L.n;

    return KVS_OK;
}
