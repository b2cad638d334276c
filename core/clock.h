/* clock.h - the clocks botgate reads, in one place. Pure modules never read a clock: they take
 * the time as an argument, and the I/O layers (gateway/, store/) read it here. */
#ifndef BOTGATE_CORE_CLOCK_H
#define BOTGATE_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic microseconds: durations and deadlines. */
static inline int64_t clock_mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Monotonic milliseconds at the kernel tick's resolution (a few ms), without a full clock read:
 * for timeouts that are seconds long and checked often. */
static inline int64_t clock_coarse_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wall-clock milliseconds since the epoch: what records and answers carry. */
static inline int64_t clock_wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
