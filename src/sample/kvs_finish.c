/*
 * kvs_finish: see kvs_finish.h.
 */

#include "kvs_finish.h"


const char *
kvs_finish_name(kvs_finish_t f)
{
    switch (f) {
    case KVS_FINISH_STOP:
        return "stop";
    case KVS_FINISH_LENGTH:
        return "length";
    case KVS_FINISH_CANCELLED:
        return "cancelled";
    case KVS_FINISH_ERROR:
        return "error";
    case KVS_FINISH_CONTENT_FILTER:
        return "content_filter";
    default:
        return "none";
    }
}


int
kvs_finish_answered(kvs_finish_t f)
{
    return f == KVS_FINISH_STOP || f == KVS_FINISH_LENGTH
           || f == KVS_FINISH_CONTENT_FILTER;
}
