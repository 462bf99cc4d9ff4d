/*
 * kvs_clock: see kvs_clock.h.
 */

#include <time.h>

#include "kvs_clock.h"


uint64_t
kvs_now_ns(void)
{
    struct timespec  ts;

    (void) clock_gettime(CLOCK_MONOTONIC, &ts);

    return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}


double
kvs_now_s(void)
{
    return (double) kvs_now_ns() / 1e9;
}
