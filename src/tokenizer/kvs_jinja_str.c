/*
 * kvs_jinja_str: the string operations of Python and jinja2 that filters
 * and methods share: case mapping (ASCII only), strip, replace, split,
 * splitlines, jinja2's indent and title, and markupsafe's escape.  Each
 * makes a new string in the render's arena and never changes its input;
 * loops over the text count steps, so a long string cannot run past the
 * render's limits.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_jinja_impl.h"


/* --- string helpers ------------------------------------------------------- */

int
kvs_jb_case(kvs_jctx_t *c, const kvs_jv_t *v, int how, kvs_jv_t *res)
{
    char    *p;
    size_t   i;
    int      start = 1, first = 1;

    p = kvs_jarena_dup(&c->arena, v->u.s.p, v->u.s.n);
    if (p == NULL && v->u.s.n > 0) {
        return kvs_jctx_nomem(c);
    }
    for (i = 0; i < v->u.s.n; i++) {
        char  ch = p[i];
        int   alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');

        switch (how) {
        case 'u':
            if (ch >= 'a' && ch <= 'z') {
                p[i] = (char) (ch - 32);
            }
            break;
        case 'l':
            if (ch >= 'A' && ch <= 'Z') {
                p[i] = (char) (ch + 32);
            }
            break;
        case 'c':                     /* str.capitalize */
            if (first && ch >= 'a' && ch <= 'z') {
                p[i] = (char) (ch - 32);
            } else if (!first && ch >= 'A' && ch <= 'Z') {
                p[i] = (char) (ch + 32);
            }
            break;
        case 't':                     /* str.title */
            if (start && ch >= 'a' && ch <= 'z') {
                p[i] = (char) (ch - 32);
            } else if (!start && ch >= 'A' && ch <= 'Z') {
                p[i] = (char) (ch + 32);
            }
            start = !alpha && ((uint8_t) ch < 0x80);
            break;
        }
        if (((uint8_t) ch & 0xc0) != 0x80) {
            first = 0;
        }
    }
    *res = kvs_jv_str(p, v->u.s.n);

    return KVS_OK;
}


/* jinja2's title filter: words begin after "-", whitespace, or ([{< */
int
kvs_jb_title_filter(kvs_jctx_t *c, const kvs_jv_t *v, kvs_jv_t *res)
{
    char    *p;
    size_t   i;
    int      start = 1;

    p = kvs_jarena_dup(&c->arena, v->u.s.p, v->u.s.n);
    if (p == NULL && v->u.s.n > 0) {
        return kvs_jctx_nomem(c);
    }
    for (i = 0; i < v->u.s.n; i++) {
        char  ch = p[i];
        int   sep = ch == '-' || ch == ' ' || ch == '\t' || ch == '\n'
                    || ch == '\r' || ch == '\f' || ch == '\v' || ch == '('
                    || ch == '{' || ch == '[' || ch == '<';

        if (start && !sep && ch >= 'a' && ch <= 'z') {
            p[i] = (char) (ch - 32);
        } else if (!start && ch >= 'A' && ch <= 'Z') {
            p[i] = (char) (ch + 32);
        }
        if (sep) {
            start = 1;
        } else if (((uint8_t) ch & 0xc0) != 0x80 || start) {
            start = 0;
        }
    }
    *res = kvs_jv_str(p, v->u.s.n);

    return KVS_OK;
}


int
kvs_jb_strip(kvs_jctx_t *c, const kvs_jv_t *v, const kvs_jv_t *chars,
    int left, int right, kvs_jv_t *res)
{
    const char  *cp = NULL;
    size_t       cn = 0, a = 0, b;
    int          rc;

    if (chars != NULL && chars->type != KVS_JV_NONE) {
        if ((rc = kvs_jb_want_str(c, chars, "strip")) != KVS_OK) {
            return rc;
        }
        cp = chars->u.s.p;
        cn = chars->u.s.n;
    }
    b = v->u.s.n;
    if (left) {
        a = kvs_jstr_lspan(v->u.s.p, b, cp, cn);
    }
    if (right && a < b) {
        b -= kvs_jstr_rspan(v->u.s.p + a, b - a, cp, cn);
    }
    *res = kvs_jv_str(v->u.s.p + a, b - a);

    return KVS_OK;
}


int
kvs_jb_replace(kvs_jctx_t *c, const kvs_jv_t *s, const kvs_jv_t *old,
    const kvs_jv_t *new, int64_t count, kvs_jv_t *res)
{
    kvs_jsink_t   out;
    const char   *p = s->u.s.p, *hit;
    size_t        n = s->u.s.n, i = 0, k;
    int           rc;

    memset(&out, 0, sizeof(out));
    if (old->u.s.n == 0) {
        /* Python inserts new between every character */
        for (i = 0; i <= n; i += k) {
            if (count >= 0 && count-- == 0) {
                rc = kvs_jsink_put(c, &out, p + i, n - i);
                if (rc != KVS_OK) {
                    return rc;
                }
                break;
            }
            if ((rc = kvs_jctx_step(c)) != KVS_OK
                || (rc = kvs_jsink_put(c, &out, new->u.s.p, new->u.s.n))
                   != KVS_OK)
            {
                return rc;
            }
            if (i == n) {
                break;
            }
            k = kvs_jstr_off(p + i, n - i, 1);
            if ((rc = kvs_jsink_put(c, &out, p + i, k)) != KVS_OK) {
                return rc;
            }
        }
        *res = kvs_jv_str(out.p, out.n);
        return KVS_OK;
    }

    while (i <= n && count != 0
           && (hit = memmem(p + i, n - i, old->u.s.p, old->u.s.n)) != NULL)
    {
        k = (size_t) (hit - (p + i));
        if ((rc = kvs_jctx_step(c)) != KVS_OK
            || (rc = kvs_jsink_put(c, &out, p + i, k)) != KVS_OK
            || (rc = kvs_jsink_put(c, &out, new->u.s.p, new->u.s.n))
               != KVS_OK)
        {
            return rc;
        }
        i += k + old->u.s.n;
        if (count > 0) {
            count--;
        }
    }
    if ((rc = kvs_jsink_put(c, &out, p + i, n - i)) != KVS_OK) {
        return rc;
    }
    *res = kvs_jv_str(out.p, out.n);

    return KVS_OK;
}


/* str.split / rsplit (sep NULL: runs of whitespace) */
int
kvs_jb_split(kvs_jctx_t *c, const kvs_jv_t *s, const kvs_jv_t *sep,
    int64_t maxsplit, int from_right, kvs_jv_t *res)
{
    const char  *p = s->u.s.p, *hit;
    size_t       n = s->u.s.n, i, j, w;
    kvs_jv_t     out, tmp;
    int          rc;

    if ((rc = kvs_jv_list_new(c, 0, &out)) != KVS_OK) {
        return rc;
    }

    if (sep == NULL || sep->type == KVS_JV_NONE) {
        if (from_right && maxsplit >= 0) {
            /* rare: split all, then join the head back */
            return kvs_jctx_fail(c, KVS_EUNSUPPORTED, "rsplit() with a limit "
                                 "and no separator is not supported");
        }
        i = 0;
        for ( ;; ) {
            i += kvs_jstr_lspan(p + i, n - i, NULL, 0);
            if (i >= n) {
                break;
            }
            if (maxsplit == 0) {
                w = kvs_jstr_rspan(p + i, n - i, NULL, 0);
                rc = kvs_jlist_push(c, out.u.list,
                                    kvs_jv_str(p + i, n - i - w));
                if (rc != KVS_OK) {
                    return rc;
                }
                break;
            }
            for (j = i; j < n; j += kvs_jstr_off(p + j, n - j, 1)) {
                if (kvs_jstr_lspan(p + j, n - j, NULL, 0) > 0) {
                    break;
                }
            }
            if ((rc = kvs_jctx_step(c)) != KVS_OK
                || (rc = kvs_jlist_push(c, out.u.list,
                                        kvs_jv_str(p + i, j - i))) != KVS_OK)
            {
                return rc;
            }
            if (maxsplit > 0) {
                maxsplit--;
            }
            i = j;
        }
        *res = out;
        return KVS_OK;
    }

    if ((rc = kvs_jb_want_str(c, sep, "split")) != KVS_OK) {
        return rc;
    }
    if (sep->u.s.n == 0) {
        return kvs_jctx_fail(c, KVS_EINVAL, "empty separator");
    }

    if (from_right) {
        /* collect from the end, then reverse */
        size_t  end = n;

        while (maxsplit != 0) {
            const char  *last = NULL;
            size_t       k = 0;

            while (k + sep->u.s.n <= end
                   && (hit = memmem(p + k, end - k, sep->u.s.p, sep->u.s.n))
                      != NULL)
            {
                last = hit;
                k = (size_t) (hit - p) + 1;
                if ((rc = kvs_jctx_step(c)) != KVS_OK) {
                    return rc;
                }
            }
            if (last == NULL || (size_t) (last - p) + sep->u.s.n > end) {
                break;
            }
            j = (size_t) (last - p);
            if ((rc = kvs_jlist_push(c, out.u.list,
                                     kvs_jv_str(p + j + sep->u.s.n,
                                                end - j - sep->u.s.n)))
                != KVS_OK)
            {
                return rc;
            }
            end = j;
            if (maxsplit > 0) {
                maxsplit--;
            }
        }
        if ((rc = kvs_jlist_push(c, out.u.list, kvs_jv_str(p, end)))
            != KVS_OK)
        {
            return rc;
        }
        for (i = 0, j = out.u.list->n - 1; i < j; i++, j--) {
            tmp = out.u.list->v[i];
            out.u.list->v[i] = out.u.list->v[j];
            out.u.list->v[j] = tmp;
        }
        *res = out;
        return KVS_OK;
    }

    i = 0;
    while (maxsplit != 0
           && (hit = memmem(p + i, n - i, sep->u.s.p, sep->u.s.n)) != NULL)
    {
        j = (size_t) (hit - p);
        if ((rc = kvs_jctx_step(c)) != KVS_OK
            || (rc = kvs_jlist_push(c, out.u.list, kvs_jv_str(p + i, j - i)))
               != KVS_OK)
        {
            return rc;
        }
        i = j + sep->u.s.n;
        if (maxsplit > 0) {
            maxsplit--;
        }
    }
    if ((rc = kvs_jlist_push(c, out.u.list, kvs_jv_str(p + i, n - i)))
        != KVS_OK)
    {
        return rc;
    }
    *res = out;

    return KVS_OK;
}


/* the line breaks of str.splitlines(): bytes of the break at p, or 0 */
static size_t
kvs_jb_linebreak(const char *p, size_t n)
{
    uint8_t  b = (uint8_t) p[0];

    if (b == '\r') {
        return n > 1 && p[1] == '\n' ? 2 : 1;
    }
    if (b == '\n' || b == 0x0b || b == 0x0c || (b >= 0x1c && b <= 0x1e)) {
        return 1;
    }
    if (b == 0xc2 && n > 1 && (uint8_t) p[1] == 0x85) {
        return 2;
    }
    if (b == 0xe2 && n > 2 && (uint8_t) p[1] == 0x80
        && ((uint8_t) p[2] == 0xa8 || (uint8_t) p[2] == 0xa9))
    {
        return 3;
    }

    return 0;
}


int
kvs_jb_splitlines(kvs_jctx_t *c, const char *p, size_t n, kvs_jv_t *res)
{
    kvs_jv_t  out;
    size_t    i = 0, start = 0, k;
    int       rc;

    if ((rc = kvs_jv_list_new(c, 0, &out)) != KVS_OK) {
        return rc;
    }
    while (i < n) {
        k = kvs_jb_linebreak(p + i, n - i);
        if (k == 0) {
            i++;
            continue;
        }
        if ((rc = kvs_jctx_step(c)) != KVS_OK
            || (rc = kvs_jlist_push(c, out.u.list,
                                    kvs_jv_str(p + start, i - start)))
               != KVS_OK)
        {
            return rc;
        }
        i += k;
        start = i;
    }
    if (start < n
        && (rc = kvs_jlist_push(c, out.u.list,
                                kvs_jv_str(p + start, n - start))) != KVS_OK)
    {
        return rc;
    }
    *res = out;

    return KVS_OK;
}


/* jinja2's indent filter */
int
kvs_jb_indent(kvs_jctx_t *c, const kvs_jv_t *s, const kvs_jargs_t *args,
    kvs_jv_t *res)
{
    const kvs_jv_t  *w = kvs_jargs_get(args, 0, "width");
    const kvs_jv_t  *first = kvs_jargs_get(args, 1, "first");
    const kvs_jv_t  *blank = kvs_jargs_get(args, 2, "blank");
    kvs_jsink_t      ind, out;
    kvs_jv_t         lines, text;
    size_t           i;
    int64_t          k, width = 4;
    int              rc;

    memset(&ind, 0, sizeof(ind));
    memset(&out, 0, sizeof(out));
    if (w != NULL && w->type == KVS_JV_STR) {
        if ((rc = kvs_jsink_put(c, &ind, w->u.s.p, w->u.s.n)) != KVS_OK) {
            return rc;
        }
    } else {
        if (w != NULL) {
            if (w->type != KVS_JV_INT && w->type != KVS_JV_BOOL) {
                return kvs_jctx_fail(c, KVS_EINVAL, "indent width must be an "
                                     "int or a string");
            }
            width = w->u.i;
        }
        if (width > 4096) {
            return kvs_jctx_fail(c, KVS_ETOOLONG, "indent width too large");
        }
        for (k = 0; k < width; k++) {
            if ((rc = kvs_jsink_put(c, &ind, " ", 1)) != KVS_OK) {
                return rc;
            }
        }
    }

    /* s += "\n" first, as jinja2 does, for splitlines */
    if ((rc = kvs_jsink_put(c, &out, s->u.s.p, s->u.s.n)) != KVS_OK
        || (rc = kvs_jsink_put(c, &out, "\n", 1)) != KVS_OK
        || (rc = kvs_jb_splitlines(c, out.p, out.n, &lines)) != KVS_OK)
    {
        return rc;
    }
    memset(&out, 0, sizeof(out));

    if (first != NULL && kvs_jv_truthy(first)
        && (rc = kvs_jsink_put(c, &out, ind.p, ind.n)) != KVS_OK)
    {
        return rc;
    }
    for (i = 0; i < lines.u.list->n; i++) {
        text = lines.u.list->v[i];
        if ((rc = kvs_jctx_step(c)) != KVS_OK) {
            return rc;
        }
        if (i > 0) {
            if ((rc = kvs_jsink_put(c, &out, "\n", 1)) != KVS_OK) {
                return rc;
            }
            if ((text.u.s.n > 0 || (blank != NULL && kvs_jv_truthy(blank)))
                && (rc = kvs_jsink_put(c, &out, ind.p, ind.n)) != KVS_OK)
            {
                return rc;
            }
        }
        if ((rc = kvs_jsink_put(c, &out, text.u.s.p, text.u.s.n)) != KVS_OK)
        {
            return rc;
        }
    }
    *res = kvs_jv_str(out.p, out.n);

    return KVS_OK;
}


int
kvs_jb_escape(kvs_jctx_t *c, const kvs_jv_t *s, kvs_jv_t *res)
{
    kvs_jsink_t  out;
    int          rc;

    if (s->flag) {
        *res = *s;
        return KVS_OK;
    }
    memset(&out, 0, sizeof(out));
    if ((rc = kvs_jv_html_put(c, &out, s->u.s.p, s->u.s.n)) != KVS_OK) {
        return rc;
    }
    *res = kvs_jv_str(out.p, out.n);
    res->flag = 1;

    return KVS_OK;
}
