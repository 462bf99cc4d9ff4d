/*
 * kvs_jinja_print: how Python shows the interpreter's values, byte for
 * byte: str() and repr() (containers as repr, shortest round-trip
 * floats, True/None, quotes chosen as Python does), json.dumps with
 * ensure_ascii=False for tojson, markupsafe's escape, and the output
 * sinks they write to.  Only the render's main output is capped
 * (max_output); every sink grows in the render's arena.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_jinja_impl.h"


/* --- printing ------------------------------------------------------------- */

int
kvs_jsink_put(kvs_jctx_t *c, kvs_jsink_t *s, const char *p, size_t n)
{
    char    *np;
    size_t   cap;

    if (n == 0) {
        return KVS_OK;
    }
    if (s == c->out && c->opts->max_output
        && s->n + n > c->opts->max_output)
    {
        return kvs_jctx_fail(c, KVS_ETOOLONG, "output passes the limit of "
                             "%zu bytes", c->opts->max_output);
    }
    if (s->buf != NULL) {
        if (kvs_buf_append(s->buf, p, n) != KVS_OK) {
            return kvs_jctx_fail(c, KVS_ENOMEM, "out of memory");
        }
        s->n += n;
        return KVS_OK;
    }
    if (s->cap - s->n < n) {
        cap = s->cap ? s->cap : 256;
        while (cap - s->n < n) {
            if (cap > SIZE_MAX / 4) {
                return kvs_jctx_nomem(c);
            }
            cap *= 2;
        }
        np = kvs_jarena_alloc(&c->arena, cap);
        if (np == NULL) {
            return kvs_jctx_nomem(c);
        }
        if (s->n) {
            memcpy(np, s->p, s->n);
        }
        s->p = np;
        s->cap = cap;
    }
    memcpy(s->p + s->n, p, n);
    s->n += n;

    return KVS_OK;
}


/* markupsafe's escape(): what Markup arithmetic does to plain strings */
int
kvs_jv_html_put(kvs_jctx_t *c, kvs_jsink_t *s, const char *p, size_t n)
{
    size_t       i, run = 0;
    const char  *r;
    int          rc;

    for (i = 0; i < n; i++) {
        switch (p[i]) {
        case '&': r = "&amp;"; break;
        case '<': r = "&lt;"; break;
        case '>': r = "&gt;"; break;
        case '"': r = "&#34;"; break;
        case '\'': r = "&#39;"; break;
        default: continue;
        }
        if ((rc = kvs_jsink_put(c, s, p + run, i - run)) != KVS_OK
            || (rc = kvs_jsink_put(c, s, r, strlen(r))) != KVS_OK)
        {
            return rc;
        }
        run = i + 1;
    }

    return kvs_jsink_put(c, s, p + run, n - run);
}


static int
kvs_jsink_str(kvs_jctx_t *c, kvs_jsink_t *s, const char *str)
{
    return kvs_jsink_put(c, s, str, strlen(str));
}


void
kvs_jv_float_fmt(double f, char *buf, size_t len)
{
    char    tmp[40], digits[24], *e;
    int     prec, exp, nd, i, k;
    size_t  o = 0;

    if (isnan(f)) {
        snprintf(buf, len, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, len, f < 0 ? "-inf" : "inf");
        return;
    }

    /* the shortest digits that read back as f */
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) {
            break;
        }
    }
    e = strchr(tmp, 'e');
    exp = atoi(e + 1);
    nd = 0;
    for (i = 0; tmp + i < e; i++) {
        if (tmp[i] >= '0' && tmp[i] <= '9') {
            digits[nd++] = tmp[i];
        }
    }
    while (nd > 1 && digits[nd - 1] == '0') {
        nd--;
    }

    if (f < 0 || (f == 0 && signbit(f))) {
        buf[o++] = '-';
    }
    if (exp < -4 || exp >= 16) {
        buf[o++] = digits[0];
        if (nd > 1) {
            buf[o++] = '.';
            for (k = 1; k < nd; k++) {
                buf[o++] = digits[k];
            }
        }
        snprintf(buf + o, len - o, "e%c%02d", exp < 0 ? '-' : '+',
                 exp < 0 ? -exp : exp);
        return;
    }
    if (exp < 0) {
        buf[o++] = '0';
        buf[o++] = '.';
        for (k = 0; k < -exp - 1; k++) {
            buf[o++] = '0';
        }
        for (k = 0; k < nd; k++) {
            buf[o++] = digits[k];
        }
    } else {
        for (k = 0; k <= exp; k++) {
            buf[o++] = k < nd ? digits[k] : '0';
        }
        buf[o++] = '.';
        if (nd > exp + 1) {
            for (k = exp + 1; k < nd; k++) {
                buf[o++] = digits[k];
            }
        } else {
            buf[o++] = '0';
        }
    }
    buf[o] = '\0';
}


/* Python's str.isprintable() for one code point, approximately: the
 * control, format, separator and private-use ranges of the BMP */
static int
kvs_jrepr_printable(uint32_t cp)
{
    if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) {
        return 0;
    }
    if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200f)
        || (cp >= 0x2028 && cp <= 0x202f) || (cp >= 0x205f && cp <= 0x206f)
        || cp == 0x3000 || cp == 0xfeff || (cp >= 0xfff9 && cp <= 0xfffb)
        || (cp >= 0xd800 && cp <= 0xf8ff) || cp == 0x061c || cp == 0x180e
        || (cp >= 0x600 && cp <= 0x605) || cp == 0x6dd || cp == 0x70f
        || cp >= 0xf0000 || (cp >= 0xe0000 && cp <= 0xe0fff))
    {
        return 0;
    }

    return 1;
}


static int
kvs_jrepr_str(kvs_jctx_t *c, kvs_jsink_t *s, const char *p, size_t n)
{
    char      q = '\'', buf[16];
    size_t    i, k, run;
    uint32_t  cp;
    int       rc;

    if (memchr(p, '\'', n) != NULL && memchr(p, '"', n) == NULL) {
        q = '"';
    }
    if ((rc = kvs_jsink_put(c, s, &q, 1)) != KVS_OK) {
        return rc;
    }
    for (i = 0; i < n; i += k) {
        /* a run of bytes that need nothing */
        for (run = i; run < n; run++) {
            uint8_t  b = (uint8_t) p[run];

            if (b < 0x20 || b == 0x7f || b == '\\' || b == (uint8_t) q
                || b >= 0x80)
            {
                break;
            }
        }
        if (run > i) {
            if ((rc = kvs_jsink_put(c, s, p + i, run - i)) != KVS_OK) {
                return rc;
            }
            k = run - i;
            continue;
        }
        k = kvs_jstr_next(p + i, n - i, &cp);
        if (cp == '\\' || cp == (uint32_t) q) {
            buf[0] = '\\';
            buf[1] = (char) cp;
            buf[2] = '\0';
        } else if (cp == '\n') {
            strcpy(buf, "\\n");
        } else if (cp == '\r') {
            strcpy(buf, "\\r");
        } else if (cp == '\t') {
            strcpy(buf, "\\t");
        } else if (kvs_jrepr_printable(cp)) {
            if ((rc = kvs_jsink_put(c, s, p + i, k)) != KVS_OK) {
                return rc;
            }
            continue;
        } else if (cp < 0x100) {
            snprintf(buf, sizeof(buf), "\\x%02x", cp);
        } else if (cp < 0x10000) {
            snprintf(buf, sizeof(buf), "\\u%04x", cp);
        } else {
            snprintf(buf, sizeof(buf), "\\U%08x", cp);
        }
        if ((rc = kvs_jsink_str(c, s, buf)) != KVS_OK) {
            return rc;
        }
    }

    return kvs_jsink_put(c, s, &q, 1);
}


static int kvs_jv_print(kvs_jctx_t *c, kvs_jsink_t *s, const kvs_jv_t *v,
    int repr, unsigned level);


static int
kvs_jv_print_dict(kvs_jctx_t *c, kvs_jsink_t *s, const kvs_jdict_t *d,
    unsigned level)
{
    size_t  i;
    int     rc;

    if ((rc = kvs_jsink_str(c, s, "{")) != KVS_OK) {
        return rc;
    }
    for (i = 0; i < d->n; i++) {
        if ((i > 0 && (rc = kvs_jsink_str(c, s, ", ")) != KVS_OK)
            || (rc = kvs_jv_print(c, s, &d->k[i], 1, level + 1)) != KVS_OK
            || (rc = kvs_jsink_str(c, s, ": ")) != KVS_OK
            || (rc = kvs_jv_print(c, s, &d->v[i], 1, level + 1)) != KVS_OK)
        {
            return rc;
        }
    }

    return kvs_jsink_str(c, s, "}");
}


/* a value printed (str, repr or JSON) at nesting level: bounded in depth,
 * and one step of the render's budget */
static int
kvs_jv_print_enter(kvs_jctx_t *c, unsigned level)
{
    if (level > KVS_JINJA_MAX_NEST) {
        return kvs_jctx_fail(c, KVS_ETOOLONG, "value nested too deeply");
    }

    return kvs_jctx_step(c);
}


static int
kvs_jv_print(kvs_jctx_t *c, kvs_jsink_t *s, const kvs_jv_t *v, int repr,
    unsigned level)
{
    char    buf[64];
    size_t  i;
    int     rc;

    if ((rc = kvs_jv_print_enter(c, level)) != KVS_OK) {
        return rc;
    }

    switch (v->type) {
    case KVS_JV_UNDEF:
        return repr ? kvs_jsink_str(c, s, "Undefined") : KVS_OK;
    case KVS_JV_NONE:
        return kvs_jsink_str(c, s, "None");
    case KVS_JV_BOOL:
        return kvs_jsink_str(c, s, v->u.i ? "True" : "False");
    case KVS_JV_INT:
        snprintf(buf, sizeof(buf), "%lld", (long long) v->u.i);
        return kvs_jsink_str(c, s, buf);
    case KVS_JV_FLOAT:
        kvs_jv_float_fmt(v->u.f, buf, sizeof(buf));
        return kvs_jsink_str(c, s, buf);
    case KVS_JV_STR:
        if (repr) {
            return kvs_jrepr_str(c, s, v->u.s.p, v->u.s.n);
        }
        return kvs_jsink_put(c, s, v->u.s.p, v->u.s.n);
    case KVS_JV_LIST:
        if (v->flag == KVS_JL_GEN) {
            /* jinja2 prints the object's address: nothing to match */
            return kvs_jsink_str(c, s, "<generator object>");
        }
        if ((rc = kvs_jsink_str(c, s, v->flag ? "(" : "[")) != KVS_OK) {
            return rc;
        }
        for (i = 0; i < v->u.list->n; i++) {
            if ((i > 0 && (rc = kvs_jsink_str(c, s, ", ")) != KVS_OK)
                || (rc = kvs_jv_print(c, s, &v->u.list->v[i], 1, level + 1))
                   != KVS_OK)
            {
                return rc;
            }
        }
        if (v->flag && v->u.list->n == 1
            && (rc = kvs_jsink_str(c, s, ",")) != KVS_OK)
        {
            return rc;
        }
        return kvs_jsink_str(c, s, v->flag ? ")" : "]");
    case KVS_JV_DICT:
        return kvs_jv_print_dict(c, s, v->u.dict, level);
    case KVS_JV_NS:
        if ((rc = kvs_jsink_str(c, s, "<Namespace ")) != KVS_OK
            || (rc = kvs_jv_print_dict(c, s, v->u.dict, level)) != KVS_OK)
        {
            return rc;
        }
        return kvs_jsink_str(c, s, ">");
    case KVS_JV_LOOP:
        snprintf(buf, sizeof(buf), "<LoopContext %lld/%lld>",
                 (long long) v->u.loop->index0 + 1,
                 (long long) v->u.loop->length);
        return kvs_jsink_str(c, s, buf);
    case KVS_JV_MACRO:
        return kvs_jsink_str(c, s, "<Macro>");
    default:
        return kvs_jsink_str(c, s, "<built-in function>");
    }
}


int
kvs_jv_str_put(kvs_jctx_t *c, kvs_jsink_t *s, const kvs_jv_t *v)
{
    return kvs_jv_print(c, s, v, 0, 0);
}


int
kvs_jv_repr_put(kvs_jctx_t *c, kvs_jsink_t *s, const kvs_jv_t *v)
{
    return kvs_jv_print(c, s, v, 1, 0);
}


int
kvs_jv_to_str(kvs_jctx_t *c, const kvs_jv_t *v, kvs_jv_t *out)
{
    kvs_jsink_t  s;
    int          rc;

    if (v->type == KVS_JV_STR) {
        *out = *v;
        return KVS_OK;
    }
    memset(&s, 0, sizeof(s));
    if ((rc = kvs_jv_str_put(c, &s, v)) != KVS_OK) {
        return rc;
    }
    *out = kvs_jv_str(s.p, s.n);

    return KVS_OK;
}


/* --- json.dumps ----------------------------------------------------------- */

static int
kvs_jjson_str(kvs_jctx_t *c, kvs_jsink_t *s, const char *p, size_t n)
{
    size_t  i, run;
    char    buf[8];
    int     rc;

    if ((rc = kvs_jsink_str(c, s, "\"")) != KVS_OK) {
        return rc;
    }
    for (i = 0; i < n; ) {
        for (run = i; run < n; run++) {
            uint8_t  b = (uint8_t) p[run];

            if (b < 0x20 || b == '"' || b == '\\') {
                break;
            }
        }
        if (run > i) {
            if ((rc = kvs_jsink_put(c, s, p + i, run - i)) != KVS_OK) {
                return rc;
            }
            i = run;
            continue;
        }
        switch (p[i]) {
        case '"': strcpy(buf, "\\\""); break;
        case '\\': strcpy(buf, "\\\\"); break;
        case '\n': strcpy(buf, "\\n"); break;
        case '\r': strcpy(buf, "\\r"); break;
        case '\t': strcpy(buf, "\\t"); break;
        case '\b': strcpy(buf, "\\b"); break;
        case '\f': strcpy(buf, "\\f"); break;
        default:
            snprintf(buf, sizeof(buf), "\\u%04x", (unsigned) (uint8_t) p[i]);
        }
        if ((rc = kvs_jsink_str(c, s, buf)) != KVS_OK) {
            return rc;
        }
        i++;
    }

    return kvs_jsink_str(c, s, "\"");
}


static int
kvs_jjson_nl(kvs_jctx_t *c, kvs_jsink_t *s, const char *indent,
    size_t nindent, unsigned level)
{
    int  rc;

    if ((rc = kvs_jsink_str(c, s, "\n")) != KVS_OK) {
        return rc;
    }
    while (level--) {
        if ((rc = kvs_jsink_put(c, s, indent, nindent)) != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}


/* a dict key as json.dumps makes it a string */
static int
kvs_jjson_key(kvs_jctx_t *c, kvs_jsink_t *s, const kvs_jv_t *k)
{
    char  buf[64];

    switch (k->type) {
    case KVS_JV_STR:
        return kvs_jjson_str(c, s, k->u.s.p, k->u.s.n);
    case KVS_JV_NONE:
        return kvs_jsink_str(c, s, "\"null\"");
    case KVS_JV_BOOL:
        return kvs_jsink_str(c, s, k->u.i ? "\"true\"" : "\"false\"");
    case KVS_JV_INT:
        snprintf(buf, sizeof(buf), "\"%lld\"", (long long) k->u.i);
        return kvs_jsink_str(c, s, buf);
    case KVS_JV_FLOAT:
        buf[0] = '"';
        kvs_jv_float_fmt(k->u.f, buf + 1, sizeof(buf) - 2);
        strcat(buf, "\"");
        return kvs_jsink_str(c, s, buf);
    default:
        return kvs_jctx_fail(c, KVS_EINVAL, "keys must be str, int, float, "
                             "bool or None, not %s", kvs_jv_type_name(k));
    }
}


int
kvs_jv_json_put(kvs_jctx_t *c, kvs_jsink_t *s, const kvs_jv_t *v,
    const char *indent, size_t nindent, const char *item_sep,
    const char *key_sep, int sort_keys, unsigned level)
{
    char               buf[64];
    size_t             i, j, n, *order = NULL;
    const kvs_jdict_t  *d;
    int                rc;

    if ((rc = kvs_jv_print_enter(c, level)) != KVS_OK) {
        return rc;
    }

    switch (v->type) {
    case KVS_JV_NONE:
        return kvs_jsink_str(c, s, "null");
    case KVS_JV_BOOL:
        return kvs_jsink_str(c, s, v->u.i ? "true" : "false");
    case KVS_JV_INT:
        snprintf(buf, sizeof(buf), "%lld", (long long) v->u.i);
        return kvs_jsink_str(c, s, buf);
    case KVS_JV_FLOAT:
        if (isnan(v->u.f)) {
            return kvs_jsink_str(c, s, "NaN");
        }
        if (isinf(v->u.f)) {
            return kvs_jsink_str(c, s, v->u.f < 0 ? "-Infinity" : "Infinity");
        }
        kvs_jv_float_fmt(v->u.f, buf, sizeof(buf));
        return kvs_jsink_str(c, s, buf);
    case KVS_JV_STR:
        return kvs_jjson_str(c, s, v->u.s.p, v->u.s.n);
    case KVS_JV_LIST:
        if (v->flag == KVS_JL_GEN) {
            return kvs_jctx_fail(c, KVS_EINVAL, "Object of type generator "
                                 "is not JSON serializable");
        }
        n = v->u.list->n;
        if (n == 0) {
            return kvs_jsink_str(c, s, "[]");
        }
        if ((rc = kvs_jsink_str(c, s, "[")) != KVS_OK) {
            return rc;
        }
        for (i = 0; i < n; i++) {
            if (i > 0 && (rc = kvs_jsink_str(c, s, item_sep)) != KVS_OK) {
                return rc;
            }
            if (indent != NULL
                && (rc = kvs_jjson_nl(c, s, indent, nindent, level + 1))
                   != KVS_OK)
            {
                return rc;
            }
            rc = kvs_jv_json_put(c, s, &v->u.list->v[i], indent, nindent,
                                 item_sep, key_sep, sort_keys, level + 1);
            if (rc != KVS_OK) {
                return rc;
            }
        }
        if (indent != NULL
            && (rc = kvs_jjson_nl(c, s, indent, nindent, level)) != KVS_OK)
        {
            return rc;
        }
        return kvs_jsink_str(c, s, "]");
    case KVS_JV_DICT:
        d = v->u.dict;
        n = d->n;
        if (n == 0) {
            return kvs_jsink_str(c, s, "{}");
        }
        if (sort_keys) {
            order = kvs_jarena_alloc(&c->arena, n * sizeof(size_t));
            if (order == NULL) {
                return kvs_jctx_nomem(c);
            }
            /* insertion sort: dicts here are small and steps bound it */
            for (i = 0; i < n; i++) {
                int  r = 0;

                for (j = i; j > 0; j--) {
                    if ((rc = kvs_jctx_step(c)) != KVS_OK
                        || (rc = kvs_jv_cmp(c, &d->k[order[j - 1]], &d->k[i],
                                            &r)) != KVS_OK)
                    {
                        return rc;
                    }
                    if (r <= 0) {
                        break;
                    }
                    order[j] = order[j - 1];
                }
                order[j] = i;
            }
        }
        if ((rc = kvs_jsink_str(c, s, "{")) != KVS_OK) {
            return rc;
        }
        for (i = 0; i < n; i++) {
            j = order ? order[i] : i;
            if (i > 0 && (rc = kvs_jsink_str(c, s, item_sep)) != KVS_OK) {
                return rc;
            }
            if (indent != NULL
                && (rc = kvs_jjson_nl(c, s, indent, nindent, level + 1))
                   != KVS_OK)
            {
                return rc;
            }
            if ((rc = kvs_jjson_key(c, s, &d->k[j])) != KVS_OK
                || (rc = kvs_jsink_str(c, s, key_sep)) != KVS_OK)
            {
                return rc;
            }
            rc = kvs_jv_json_put(c, s, &d->v[j], indent, nindent, item_sep,
                                 key_sep, sort_keys, level + 1);
            if (rc != KVS_OK) {
                return rc;
            }
        }
        if (indent != NULL
            && (rc = kvs_jjson_nl(c, s, indent, nindent, level)) != KVS_OK)
        {
            return rc;
        }
        return kvs_jsink_str(c, s, "}");
    default:
        return kvs_jctx_fail(c, KVS_EINVAL, "Object of type %s is not JSON "
                             "serializable", kvs_jv_type_name(v));
    }
}
