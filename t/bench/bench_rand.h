/*
 * bench_rand: the seeded values and the clock that the kernel benches
 * (bench_amx, bench_qpack) share, so that their matrices are made alike.
 */

#ifndef BENCH_RAND_H
#define BENCH_RAND_H

#include <math.h>
#include <stdint.h>
#include <time.h>


/* Seconds on the monotonic clock. */
static inline double
bench_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}


/* xorshift64: the next value of the stream s (never 0 if s is not). */
static inline uint64_t
bench_rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;

    return *s;
}


/* One N(0, 1) value (Box-Muller) from the stream s. */
static inline float
bench_gauss(uint64_t *s)
{
    double  u, v;

    u = ((double) (bench_rnd(s) >> 11) + 0.5) / 9007199254740992.0;
    v = ((double) (bench_rnd(s) >> 11) + 0.5) / 9007199254740992.0;

    return (float) (sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

#endif /* BENCH_RAND_H */
