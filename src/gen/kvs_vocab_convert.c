/*
 * kvs_vocab_convert: the parts of `kvserve convert-vocab` that do not
 * depend on the input format (see kvs_vocab_convert.h for the layout
 * written, kvs_vocab_convert_impl.h for how the readers use these):
 * reading inputs whole, quoting values for messages, splitting lines, the
 * string map, the vocabulary being assembled, the special tokens, the
 * chat template and the GGUF writing.  The readers are
 * kvs_vocab_tiktoken.c and kvs_vocab_hf.c.
 *
 * Owns nothing past a call.  kvs_vc_map_t is an open-addressing table of
 * ids over (offset, length) pairs into a pool that must not move while
 * the table is used; the table is therefore built only once its pool is
 * complete.  The GGUF writer writes "<out>.tmp" and renames it, so that
 * the output appears under its name only when complete.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/kvs_hash.h"
#include "base/kvs_utf8.h"
#include "model/kvs_gguf.h"
#include "tokenizer/kvs_bytelevel.h"
#include "tokenizer/kvs_vocab.h"
#include "kvs_vocab_convert_impl.h"

#define KVS_VC_MAX_TEMPLATE   (1u << 20)     /* bytes of a chat template */
#define KVS_VC_SPECIAL_LEN    64             /* bytes of a special token's
                                                text, NUL included */


/*
 * Writes s[0..n) into buf as a double-quoted string for messages:
 * printable ASCII and valid UTF-8 above U+009F as they are, everything
 * else as \xNN, cut with "..." when it does not fit.
 */
const char *
kvs_vc_quote(const void *p, size_t n, char *buf, size_t size)
{
    size_t          i, o, k, step;
    uint32_t        cp;
    const uint8_t  *s;

    s = p;
    o = 0;
    buf[o++] = '"';

    for (i = 0; i < n; i += step) {
        step = kvs_utf8_next(s + i, n - i, &cp);

        if (o + 4 + 5 >= size) {
            memcpy(buf + o, "\"...", 4);
            buf[o + 4] = '\0';
            return buf;
        }

        if (step > 1 && cp >= 0xa0) {
            for (k = 0; k < step; k++) {
                buf[o++] = (char) s[i + k];
            }
            continue;
        }

        step = 1;

        if (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"' && s[i] != '\\') {
            buf[o++] = (char) s[i];
        } else {
            o += (size_t) snprintf(buf + o, size - o, "\\x%02x", s[i]);
        }
    }

    buf[o++] = '"';
    buf[o] = '\0';

    return buf;
}


int
kvs_vc_slurp(const char *path, size_t max, uint8_t **out, size_t *out_len,
    kvs_err_t *err)
{
    FILE     *f;
    long      n;
    uint8_t  *buf;

    *out = NULL;

    f = fopen(path, "rb");
    if (f == NULL) {
        return kvs_err_set(err, KVS_EIO, "cannot open \"%s\": %s", path,
                           strerror(errno));
    }

    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0
        || fseek(f, 0, SEEK_SET) != 0)
    {
        fclose(f);
        return kvs_err_set(err, KVS_EIO, "cannot read \"%s\": %s", path,
                           strerror(errno));
    }

    if ((unsigned long) n > max) {
        fclose(f);
        return kvs_err_set(err, KVS_EFORMAT, "\"%s\" is %ld bytes, more "
                           "than the %zu allowed", path, n, max);
    }

    /* one spare byte so that callers may NUL-terminate */
    buf = malloc((size_t) n + 1);
    if (buf == NULL) {
        fclose(f);
        return kvs_err_set(err, KVS_ENOMEM, "out of memory reading \"%s\"",
                           path);
    }

    if (fread(buf, 1, (size_t) n, f) != (size_t) n) {
        free(buf);
        fclose(f);
        return kvs_err_set(err, KVS_EIO, "cannot read \"%s\": short read",
                           path);
    }

    fclose(f);
    buf[n] = '\0';
    *out = buf;
    *out_len = (size_t) n;

    return KVS_OK;
}


/* --- lines ----------------------------------------------------------- */

size_t
kvs_vc_lines_count(const uint8_t *buf, size_t size)
{
    size_t  i, n;

    for (i = 0, n = 0; i < size; i++) {
        n += buf[i] == '\n';
    }

    /* a last line without its newline counts too */
    return n + (size > 0 && buf[size - 1] != '\n');
}


void
kvs_vc_lines_init(kvs_vc_lines_t *it, const uint8_t *buf, size_t size)
{
    it->p = buf;
    it->end = buf + size;
    it->lineno = 0;
}


int
kvs_vc_lines_next(kvs_vc_lines_t *it, const uint8_t **s, const uint8_t **e)
{
    const uint8_t  *nl;

    if (it->p >= it->end) {
        return 0;
    }

    nl = memchr(it->p, '\n', (size_t) (it->end - it->p));
    if (nl == NULL) {
        nl = it->end;
    }

    /* a CRLF line ends before its CR, as in tiktoken's splitlines() and
     * in Rust's lines() (the Hugging Face reader) */
    *s = it->p;
    *e = nl > it->p && nl[-1] == '\r' ? nl - 1 : nl;

    it->p = nl < it->end ? nl + 1 : it->end;
    it->lineno++;

    return 1;
}


/* --- string table ---------------------------------------------------- */

static uint32_t
kvs_vc_hash(const uint8_t *s, size_t n)
{
    uint64_t  h;

    h = kvs_fnv1a64(KVS_FNV1A64_INIT, s, n);

    return (uint32_t) (h ^ (h >> 32));
}


int
kvs_vc_map_init(kvs_vc_map_t *m, const uint8_t *base, const uint32_t *off,
    const uint32_t *len, uint32_t n)
{
    size_t  cap;

    /* load factor at most 1/2 keeps probes short */
    for (cap = 16; cap < (size_t) n * 2; cap *= 2) { /* void */ }

    m->slot = calloc(cap, sizeof(uint32_t));
    if (m->slot == NULL) {
        return KVS_ENOMEM;
    }

    m->base = base;
    m->off = off;
    m->len = len;
    m->mask = (uint32_t) (cap - 1);

    return KVS_OK;
}


void
kvs_vc_map_free(kvs_vc_map_t *m)
{
    free(m->slot);
    m->slot = NULL;
}


/* Slot holding s, or the empty slot where it would go. */
static uint32_t
kvs_vc_map_slot(const kvs_vc_map_t *m, const uint8_t *s, size_t n)
{
    uint32_t  i, id;

    i = kvs_vc_hash(s, n) & m->mask;

    while (m->slot[i] != 0) {
        id = m->slot[i] - 1;
        if (m->len[id] == n && memcmp(m->base + m->off[id], s, n) == 0) {
            break;
        }
        i = (i + 1) & m->mask;
    }

    return i;
}


int32_t
kvs_vc_map_find(const kvs_vc_map_t *m, const uint8_t *s, size_t n)
{
    return (int32_t) m->slot[kvs_vc_map_slot(m, s, n)] - 1;
}


int32_t
kvs_vc_map_add(kvs_vc_map_t *m, uint32_t id)
{
    uint32_t  i;

    i = kvs_vc_map_slot(m, m->base + m->off[id], m->len[id]);
    if (m->slot[i] != 0) {
        return (int32_t) m->slot[i] - 1;
    }

    m->slot[i] = id + 1;

    return -1;
}


/* The token whose raw bytes are s[0..n), n <= KVS_VC_SPECIAL_LEN, in a
 * map over alphabet strings (map_is_alpha) or raw bytes. */
static int32_t
kvs_vc_map_find_raw(const kvs_vc_map_t *m, int map_is_alpha,
    const uint8_t *s, size_t n)
{
    char  enc[2 * KVS_VC_SPECIAL_LEN];

    if (!map_is_alpha) {
        return kvs_vc_map_find(m, s, n);
    }

    return kvs_vc_map_find(m, (const uint8_t *) enc,
                           kvs_bytelevel_encode(s, n, enc));
}


/* --- the vocabulary being assembled ---------------------------------- */

int
kvs_vc_vocab_init(kvs_vc_vocab_t *cv, uint32_t cap)
{
    memset(cv, 0, sizeof(*cv));

    cv->off = malloc(cap * sizeof(uint32_t));
    cv->len = malloc(cap * sizeof(uint32_t));
    cv->type = malloc(cap * sizeof(int32_t));
    cv->merge = malloc(2 * (size_t) cap * sizeof(uint32_t));
    cv->cap = cap;

    if (cv->off == NULL || cv->len == NULL || cv->type == NULL
        || cv->merge == NULL)
    {
        return KVS_ENOMEM;
    }

    return KVS_OK;
}


void
kvs_vc_vocab_free(kvs_vc_vocab_t *cv)
{
    kvs_buf_free(&cv->text);
    free(cv->off);
    free(cv->len);
    free(cv->type);
    free(cv->merge);
    memset(cv, 0, sizeof(*cv));
}


int
kvs_vc_vocab_add(kvs_vc_vocab_t *cv, const void *s, size_t n, int spell,
    int32_t type)
{
    size_t  off;

    if (cv->n == cv->cap) {
        return KVS_EINVAL;
    }

    off = cv->text.len;

    if (spell) {
        /* each byte is one or two UTF-8 bytes in the alphabet */
        if (kvs_buf_reserve(&cv->text, 2 * n) != KVS_OK) {
            return KVS_ENOMEM;
        }
        cv->text.len += kvs_bytelevel_encode(s, n,
                                             (char *) cv->text.data + off);

    } else if (kvs_buf_append(&cv->text, s, n) != KVS_OK) {
        return KVS_ENOMEM;
    }

    if (cv->text.len > UINT32_MAX) {
        return KVS_ERANGE;
    }

    cv->off[cv->n] = (uint32_t) off;
    cv->len[cv->n] = (uint32_t) (cv->text.len - off);
    cv->type[cv->n] = type;
    cv->n++;

    return KVS_OK;
}


int
kvs_vc_check_bytes(const kvs_vc_map_t *m, int map_is_alpha,
    const char *path, kvs_err_t *err)
{
    unsigned  b;
    uint8_t   c;

    for (b = 0; b < 256; b++) {
        c = (uint8_t) b;

        if (kvs_vc_map_find_raw(m, map_is_alpha, &c, 1) < 0) {
            return kvs_err_set(err, KVS_EFORMAT, "%s: no token for the "
                               "byte 0x%02x (a byte-level BPE vocabulary "
                               "needs all 256)", path, b);
        }
    }

    return KVS_OK;
}


/* --- special tokens -------------------------------------------------- */

/* The text of special token i of a profile. */
static void
kvs_vc_special_text(const kvs_vc_profile_t *p, uint32_t i, char *buf,
    size_t size)
{
    if (i < p->n_named) {
        snprintf(buf, size, "%s", p->named[i]);
    } else {
        snprintf(buf, size, "<|reserved_special_token_%u|>",
                 p->reserved_at + i - p->n_named);
    }
}


/*
 * Appends the profile's special tokens, after checking that no normal
 * token has the same raw bytes (the loader compares raw bytes, and the
 * two would be indistinguishable).  m is over alphabet strings when
 * map_is_alpha, else over raw bytes; it is not used once cv->text grows.
 */
static int
kvs_vc_add_specials(kvs_vc_vocab_t *cv, const kvs_vc_profile_t *p,
    const kvs_vc_map_t *m, int map_is_alpha, const char *path,
    kvs_err_t *err)
{
    int       rc;
    char      text[KVS_VC_SPECIAL_LEN], q[KVS_VC_QUOTE];
    int32_t   id;
    uint32_t  i;

    for (i = 0; i < p->n_special; i++) {
        kvs_vc_special_text(p, i, text, sizeof(text));

        id = kvs_vc_map_find_raw(m, map_is_alpha, (const uint8_t *) text,
                                 strlen(text));
        if (id >= 0) {
            return kvs_err_set(err, KVS_EFORMAT, "%s: token %d is the text "
                               "of the special token %s", path, id,
                               kvs_vc_quote(text, strlen(text), q,
                                            sizeof(q)));
        }
    }

    for (i = 0; i < p->n_special; i++) {
        kvs_vc_special_text(p, i, text, sizeof(text));

        rc = kvs_vc_vocab_add(cv, text, strlen(text), 0, KVS_TOKT_CONTROL);
        if (rc != KVS_OK) {
            return kvs_err_set(err, rc, "out of memory");
        }
    }

    return KVS_OK;
}


/* --- the file -------------------------------------------------------- */

static int
kvs_vc_read_template(const char *path, uint8_t **out, size_t *len,
    kvs_err_t *err)
{
    int       rc;
    size_t    i;
    uint8_t  *t;

    rc = kvs_vc_slurp(path, KVS_VC_MAX_TEMPLATE, &t, len, err);
    if (rc != KVS_OK) {
        return kvs_err_prefix(err, "chat template");
    }

    if (*len == 0) {
        free(t);
        return kvs_err_set(err, KVS_EFORMAT, "chat template \"%s\" is "
                           "empty", path);
    }

    for (i = 0; i < *len; i++) {
        if (t[i] == '\0') {
            free(t);
            return kvs_err_set(err, KVS_EFORMAT, "chat template \"%s\": "
                               "NUL byte at offset %zu", path, i);
        }
    }

    if (!kvs_utf8_valid(t, *len)) {
        free(t);
        return kvs_err_set(err, KVS_EFORMAT, "chat template \"%s\" is not "
                           "valid UTF-8", path);
    }

    *out = t;

    return KVS_OK;
}


static void
kvs_vc_set_id(kvs_gguf_writer_t *w, const char *key, uint32_t first_special,
    int32_t special)
{
    if (special >= 0) {
        kvs_gguf_set_u32(w, key, first_special + (uint32_t) special);
    }
}


static int
kvs_vc_write(const kvs_vc_vocab_t *cv, const kvs_vc_profile_t *p,
    uint32_t first_special, const kvs_vocab_convert_opts_t *opts,
    const char *out_path, kvs_err_t *err)
{
    int                 rc;
    char                key[96];
    size_t              tlen;
    uint8_t            *tmpl;
    uint32_t            i, l, r;
    kvs_buf_t           m;
    kvs_gguf_writer_t  *w;

    tmpl = NULL;
    tlen = 0;

    if (opts != NULL && opts->chat_template != NULL) {
        rc = kvs_vc_read_template(opts->chat_template, &tmpl, &tlen, err);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    rc = kvs_gguf_writer_new(&w, 3, err);
    if (rc != KVS_OK) {
        free(tmpl);
        return rc;
    }

    memset(&m, 0, sizeof(m));

    kvs_gguf_set_str(w, "general.architecture", p->arch);
    kvs_gguf_set_str(w, "general.name",
                     opts != NULL && opts->name != NULL ? opts->name
                                                        : p->name);
    snprintf(key, sizeof(key), "%s.vocab_size", p->arch);
    kvs_gguf_set_u32(w, key, cv->n);

    kvs_gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    kvs_gguf_set_str(w, "tokenizer.ggml.pre",
                     opts != NULL && opts->pre != NULL ? opts->pre : p->pre);

    kvs_gguf_w_key(w, "tokenizer.ggml.tokens", KVS_GGUF_ARR);
    kvs_gguf_w_arr(w, KVS_GGUF_STR, cv->n);
    for (i = 0; i < cv->n; i++) {
        kvs_gguf_w_str(w, (const char *) cv->text.data + cv->off[i],
                       cv->len[i]);
    }

    kvs_gguf_w_key(w, "tokenizer.ggml.token_type", KVS_GGUF_ARR);
    kvs_gguf_w_arr(w, KVS_GGUF_I32, cv->n);
    kvs_gguf_w_elems(w, cv->type, cv->n);

    kvs_gguf_w_key(w, "tokenizer.ggml.merges", KVS_GGUF_ARR);
    kvs_gguf_w_arr(w, KVS_GGUF_STR, cv->n_merges);
    for (i = 0; i < cv->n_merges; i++) {
        l = cv->merge[2 * i];
        r = cv->merge[2 * i + 1];

        m.len = 0;
        if (kvs_buf_append(&m, cv->text.data + cv->off[l], cv->len[l])
                != KVS_OK
            || kvs_buf_append(&m, " ", 1) != KVS_OK
            || kvs_buf_append(&m, cv->text.data + cv->off[r], cv->len[r])
                != KVS_OK)
        {
            rc = kvs_err_set(err, KVS_ENOMEM, "out of memory");
            goto done;
        }
        kvs_gguf_w_str(w, (const char *) m.data, m.len);
    }

    kvs_vc_set_id(w, "tokenizer.ggml.bos_token_id", first_special, p->bos);
    kvs_vc_set_id(w, "tokenizer.ggml.eos_token_id", first_special, p->eos);
    kvs_vc_set_id(w, "tokenizer.ggml.eot_token_id", first_special, p->eot);
    kvs_vc_set_id(w, "tokenizer.ggml.eom_token_id", first_special, p->eom);
    kvs_vc_set_id(w, "tokenizer.ggml.padding_token_id", first_special,
                  p->pad);
    kvs_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", p->add_bos);
    kvs_gguf_set_bool(w, "tokenizer.ggml.add_eos_token", 0);

    if (tmpl != NULL) {
        kvs_gguf_w_key(w, "tokenizer.chat_template", KVS_GGUF_STR);
        kvs_gguf_w_str(w, (const char *) tmpl, tlen);
    }

    rc = kvs_gguf_writer_write(w, out_path, NULL, NULL, err);

done:

    kvs_buf_free(&m);
    kvs_gguf_writer_free(w);
    free(tmpl);

    return rc;
}


double
kvs_vc_start(kvs_vocab_convert_stats_t *stats)
{
    if (stats != NULL) {
        memset(stats, 0, sizeof(*stats));
        stats->first_unsplit = -1;
    }

    return kvs_now_s();
}


int
kvs_vc_finish(kvs_vc_vocab_t *cv, const kvs_vc_profile_t *p,
    const kvs_vc_map_t *m, int map_is_alpha, const char *in_path,
    const kvs_vocab_convert_opts_t *opts, const char *out_path,
    kvs_vocab_convert_stats_t *stats, double t0, kvs_err_t *err)
{
    int       rc;
    uint32_t  first_special;

    first_special = cv->n;

    rc = kvs_vc_add_specials(cv, p, m, map_is_alpha, in_path, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_vc_write(cv, p, first_special, opts, out_path, err);
    if (rc != KVS_OK) {
        return rc;
    }

    if (stats != NULL) {
        stats->n_tokens = cv->n;
        stats->n_special = p->n_special;
        stats->n_merges = cv->n_merges;
        stats->seconds = kvs_now_s() - t0;
    }

    return KVS_OK;
}
