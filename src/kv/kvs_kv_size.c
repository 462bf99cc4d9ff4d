/*
 * kvs_kv_size: parsing kvserve_kv_cache values, reading the host's
 * available memory, and turning a budget into KV blocks (see the header).
 *
 * Parsing is strict and locale-free (no strtod: it would take "inf",
 * "1e-1", hex and leading blanks): a value is all digits with at most
 * one suffix letter, or digits around one decimal point.
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "kvs_kv_pool.h"
#include "kvs_kv_size.h"

#define KVS_MEMINFO_PATH   "/proc/meminfo"
#define KVS_MEMINFO_MAX    16384      /* the file is ~1.5 KiB; MemAvailable
                                         is its third line */
#define KVS_QUOTE_MAX      64         /* value bytes quoted in errors */


/* Sets err to "\"<value>\": <reason>", the value cut at KVS_QUOTE_MAX. */
static int
kvs_kv_cache_fail(kvs_err_t *err, int code, const char *str, size_t len,
    const char *fmt, ...)
{
    char     reason[KVS_ERR_MSG_LEN];
    va_list  ap;

    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);

    return kvs_err_set(err, code, "\"%.*s%s\": %s",
                       (int) (len > KVS_QUOTE_MAX ? KVS_QUOTE_MAX : len),
                       str, len > KVS_QUOTE_MAX ? "..." : "", reason);
}


static int
kvs_kv_cache_parse_fraction(kvs_kv_cache_spec_t *spec, const char *str,
    size_t len, kvs_err_t *err)
{
    double  v, scale;
    size_t  i, digits;
    int     point;

    v = 0;
    scale = 1;
    digits = 0;
    point = 0;

    for (i = 0; i < len; i++) {
        if (str[i] == '.' && !point) {
            point = 1;
            continue;
        }

        if (str[i] < '0' || str[i] > '9') {
            return kvs_kv_cache_fail(err, KVS_EINVAL, str, len,
                                     "not a fraction such as 0.5");
        }

        digits++;

        if (point) {
            scale /= 10;
            v += (str[i] - '0') * scale;

        } else {
            v = v * 10 + (str[i] - '0');
        }
    }

    if (digits == 0) {
        return kvs_kv_cache_fail(err, KVS_EINVAL, str, len,
                                 "not a fraction such as 0.5");
    }

    if (!(v > 0 && v <= 1)) {
        return kvs_kv_cache_fail(err, KVS_ERANGE, str, len,
                                 "fraction must be in (0, 1]");
    }

    spec->fraction = v;

    return KVS_OK;
}


static int
kvs_kv_cache_parse_size(kvs_kv_cache_spec_t *spec, const char *str,
    size_t len, kvs_err_t *err)
{
    size_t    i;
    uint64_t  n, unit;

    n = 0;

    for (i = 0; i < len && str[i] >= '0' && str[i] <= '9'; i++) {
        if (n > (UINT64_MAX - (uint64_t) (str[i] - '0')) / 10) {
            return kvs_kv_cache_fail(err, KVS_ERANGE, str, len,
                                     "size overflows 64 bits");
        }

        n = n * 10 + (uint64_t) (str[i] - '0');
    }

    unit = 1;

    if (i > 0 && i + 1 == len) {
        switch (str[i]) {
        case 'k': case 'K':  unit = (uint64_t) 1 << 10;  i++;  break;
        case 'm': case 'M':  unit = (uint64_t) 1 << 20;  i++;  break;
        case 'g': case 'G':  unit = (uint64_t) 1 << 30;  i++;  break;
        default:             break;
        }
    }

    if (i == 0 || i != len) {
        return kvs_kv_cache_fail(err, KVS_EINVAL, str, len,
                                 "not a size (bytes, or with a k, m or g "
                                 "suffix) or a fraction in (0, 1]");
    }

    if (n > UINT64_MAX / unit) {
        return kvs_kv_cache_fail(err, KVS_ERANGE, str, len,
                                 "size overflows 64 bits");
    }

    if (n == 0) {
        return kvs_kv_cache_fail(err, KVS_EINVAL, str, len,
                                 "size must be greater than 0");
    }

    spec->bytes = n * unit;

    return KVS_OK;
}


int
kvs_kv_cache_parse(kvs_kv_cache_spec_t *spec, const char *str, size_t len,
    kvs_err_t *err)
{
    spec->bytes = 0;
    spec->fraction = 0;

    if (len == 0) {
        return kvs_err_set(err, KVS_EINVAL, "\"\": empty, expected a size "
                           "such as 512m or a fraction such as 0.5");
    }

    if (memchr(str, '.', len) != NULL) {
        return kvs_kv_cache_parse_fraction(spec, str, len, err);
    }

    return kvs_kv_cache_parse_size(spec, str, len, err);
}


int
kvs_meminfo_parse(const char *text, size_t len, uint64_t *bytes,
    kvs_err_t *err)
{
    static const char  key[] = "MemAvailable:";

    size_t       klen;
    uint64_t     kb;
    const char  *p, *end, *eol, *digits;

    *bytes = 0;
    klen = sizeof(key) - 1;
    p = text;
    end = text + len;

    /* every line is "Name:   <n> kB" or "Name:   <n>"; find ours */
    for ( ;; ) {
        if ((size_t) (end - p) >= klen && memcmp(p, key, klen) == 0) {
            break;
        }

        eol = memchr(p, '\n', (size_t) (end - p));
        if (eol == NULL) {
            return kvs_err_set(err, KVS_ENOTFOUND, "no MemAvailable line "
                               "in " KVS_MEMINFO_PATH " (Linux 3.14+)");
        }

        p = eol + 1;
    }

    eol = memchr(p, '\n', (size_t) (end - p));
    if (eol == NULL) {
        eol = end;
    }

    p += klen;

    while (p < eol && (*p == ' ' || *p == '\t')) {
        p++;
    }

    digits = p;
    kb = 0;

    while (p < eol && *p >= '0' && *p <= '9') {
        if (kb > (UINT64_MAX - (uint64_t) (*p - '0')) / 10) {
            return kvs_err_set(err, KVS_ERANGE, "MemAvailable in "
                               KVS_MEMINFO_PATH " overflows 64 bits");
        }

        kb = kb * 10 + (uint64_t) (*p - '0');
        p++;
    }

    if (p == digits) {
        return kvs_err_set(err, KVS_EFORMAT, "MemAvailable in "
                           KVS_MEMINFO_PATH " is not a number: \"%.*s\"",
                           (int) (eol - digits), digits);
    }

    while (p < eol && *p == ' ') {
        p++;
    }

    if (eol - p != 2 || memcmp(p, "kB", 2) != 0) {
        return kvs_err_set(err, KVS_EFORMAT, "MemAvailable in "
                           KVS_MEMINFO_PATH " is not in kB: \"%.*s\"",
                           (int) (eol - digits), digits);
    }

    if (kb > UINT64_MAX / 1024) {
        return kvs_err_set(err, KVS_ERANGE, "MemAvailable in "
                           KVS_MEMINFO_PATH " overflows 64 bits");
    }

    *bytes = kb * 1024;

    return KVS_OK;
}


int
kvs_mem_available(uint64_t *bytes, kvs_err_t *err)
{
    int      fd, e;
    char     buf[KVS_MEMINFO_MAX];
    size_t   len;
    ssize_t  n;

    *bytes = 0;

    fd = open(KVS_MEMINFO_PATH, O_RDONLY | O_CLOEXEC);
    if (fd == -1) {
        return kvs_err_set(err, KVS_EIO, "cannot open " KVS_MEMINFO_PATH
                           ": %s", strerror(errno));
    }

    len = 0;

    /* procfs may return the file in several reads; what does not fit is
     * far past the lines we read */
    while (len < sizeof(buf)) {
        n = read(fd, buf + len, sizeof(buf) - len);

        if (n == -1) {
            if (errno == EINTR) {
                continue;
            }

            e = errno;
            close(fd);
            return kvs_err_set(err, KVS_EIO, "cannot read " KVS_MEMINFO_PATH
                               ": %s", strerror(e));
        }

        if (n == 0) {
            break;
        }

        len += (size_t) n;
    }

    close(fd);

    return kvs_meminfo_parse(buf, len, bytes, err);
}


uint64_t
kvs_kv_cache_budget(const kvs_kv_cache_spec_t *spec, uint64_t avail_bytes)
{
    double  v;

    if (spec->bytes != 0) {
        return spec->bytes;
    }

    if (!(spec->fraction > 0)) {
        return 0;
    }

    if (spec->fraction >= 1) {
        return avail_bytes;
    }

    /* a double near 2^64 may round up past it: clamp before the cast */
    v = spec->fraction * (double) avail_bytes;

    if (v >= (double) avail_bytes) {
        return avail_bytes;
    }

    return (uint64_t) v;
}


int
kvs_kv_cache_plan(kvs_kv_cache_plan_t *plan, const kvs_kv_cache_spec_t *spec,
    uint64_t avail_bytes, uint64_t kv_bytes_per_token, uint32_t block_tokens,
    uint32_t n_ctx, kvs_err_t *err)
{
    int       rc;
    uint32_t  n_blocks;
    uint64_t  budget;

    memset(plan, 0, sizeof(*plan));

    if ((spec->bytes != 0) == (spec->fraction != 0)
        || (spec->bytes == 0 && !(spec->fraction > 0 && spec->fraction <= 1)))
    {
        return kvs_err_set(err, KVS_EINVAL, "kv cache: a size or a "
                           "fraction in (0, 1] is needed, exactly one");
    }

    if (n_ctx == 0) {
        return kvs_err_set(err, KVS_EINVAL, "kv cache: context of 0 tokens");
    }

    budget = kvs_kv_cache_budget(spec, avail_bytes);

    rc = kvs_kv_pool_blocks_for_bytes(budget, kv_bytes_per_token,
                                      block_tokens, &n_blocks, err);
    if (rc != KVS_OK) {
        return rc;
    }

    /* blocks_for_bytes checked that one block's bytes fit in 64 bits, and
     * n_blocks of them fit in the budget */
    plan->budget = budget;
    plan->n_blocks = n_blocks;
    plan->block_tokens = block_tokens;
    plan->kv_bytes_per_token = kv_bytes_per_token;
    plan->tokens = (uint64_t) n_blocks * block_tokens;
    plan->bytes = plan->tokens * kv_bytes_per_token;
    plan->full_ctx_blocks = n_ctx / block_tokens
                            + (n_ctx % block_tokens != 0);
    plan->full_ctx_fits = n_blocks >= plan->full_ctx_blocks;

    return KVS_OK;
}


char *
kvs_size_format(char *buf, size_t size, uint64_t bytes)
{
    static const char  *units[] = { "KiB", "MiB", "GiB", "TiB", "PiB",
                                    "EiB" };

    double  v;
    size_t  u;

    if (bytes < 1024) {
        snprintf(buf, size, "%" PRIu64 " B", bytes);
        return buf;
    }

    v = (double) bytes / 1024;
    u = 0;

    /* 1048575 bytes is "1.0 MiB", not "1024.0 KiB" */
    while (v >= 1023.95 && u + 1 < sizeof(units) / sizeof(units[0])) {
        v /= 1024;
        u++;
    }

    snprintf(buf, size, "%.1f %s", v, units[u]);

    return buf;
}
