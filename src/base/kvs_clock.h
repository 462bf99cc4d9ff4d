/*
 * kvs_clock: the one monotonic clock of kvserve.
 *
 * Every hop time a request carries is stamped with it, in whichever
 * process: the nginx worker (start, body, parse, tokenize, submit, first,
 * last, end), the engine process (recv, engine_first) and the engine's
 * step thread.  Those stamps are subtracted from one another, so they
 * must all come from this one function: CLOCK_MONOTONIC, which every
 * process of a host shares, in nanoseconds.
 */

#ifndef KVS_CLOCK_H
#define KVS_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds: never goes back, shared by the
 * processes of a host, meaningless across hosts or reboots. */
uint64_t kvs_now_ns(void);

/* The same clock in seconds, for durations that tools print. */
double kvs_now_s(void);

#endif /* KVS_CLOCK_H */
