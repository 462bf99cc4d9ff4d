/*
 * kvs_err: formatting of error messages into a caller-owned buffer.
 * Never allocates, never fails: an over-long message is truncated.
 */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kvs_err.h"


int
kvs_err_set(kvs_err_t *err, int code, const char *fmt, ...)
{
    va_list  ap;

    if (err == NULL) {
        return code;
    }

    err->code = code;

    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);

    return code;
}


int
kvs_err_prefix(kvs_err_t *err, const char *fmt, ...)
{
    char         old[KVS_ERR_MSG_LEN];
    size_t       n, i;
    va_list      ap;
    const char  *sep = ": ";

    if (err == NULL) {
        return KVS_OK;
    }

    memcpy(old, err->msg, sizeof(old));

    va_start(ap, fmt);
    n = (size_t) vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);

    if (n >= sizeof(err->msg)) {
        return err->code;
    }

    /* append ": old", truncated to what is left */
    old[sizeof(old) - 1] = '\0';
    for (i = 0; n < sizeof(err->msg) - 1 && sep[i] != '\0'; i++) {
        err->msg[n++] = sep[i];
    }
    for (i = 0; n < sizeof(err->msg) - 1 && old[i] != '\0'; i++) {
        err->msg[n++] = old[i];
    }
    err->msg[n] = '\0';

    return err->code;
}


void
kvs_err_clear(kvs_err_t *err)
{
    if (err != NULL) {
        err->code = KVS_OK;
        err->msg[0] = '\0';
    }
}


const char *
kvs_err_name(int code)
{
    switch (code) {
    case KVS_OK:           return "ok";
    case KVS_EIO:          return "io";
    case KVS_EFORMAT:      return "format";
    case KVS_ENOMEM:       return "nomem";
    case KVS_ENOTFOUND:    return "notfound";
    case KVS_ETYPE:        return "type";
    case KVS_EINVAL:       return "inval";
    case KVS_EUNSUPPORTED: return "unsupported";
    case KVS_ERANGE:       return "range";
    case KVS_ETOOLONG:     return "toolong";
    default:               return "unknown";
    }
}
