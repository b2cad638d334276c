/* clock.h - the clocks botgate reads, in one place. Pure modules never read a clock: they take
 * the time as an argument, and the I/O layers (gateway/, store/) read it here. */
#ifndef BOTGATE_CORE_CLOCK_H
#define BOTGATE_CORE_CLOCK_H

#include <stdint.h>
#include <sys/time.h>
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

/* The same of a delay in microseconds (a rate limit's slot may be less than a millisecond
 * away). */
static inline struct timeval clock_us_timeval(int64_t us)
{
    struct timeval tv = {0, 0};

    if (us > 0) {
        tv.tv_sec = (time_t)(us / 1000000);
        tv.tv_usec = (suseconds_t)(us % 1000000);
    }
    return tv;
}

/* A delay in milliseconds as the relative timeval that libevent's timers and hiredis's connect
 * take. A delay already over (ms < 0) becomes 0: libevent fires both at its next turn, but a
 * negative tv_usec is not a valid timeval. */
static inline struct timeval clock_ms_timeval(int64_t ms)
{
    struct timeval tv = {0, 0};

    if (ms > 0) {
        tv.tv_sec = (time_t)(ms / 1000);
        tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
    }
    return tv;
}

/* The pause before try tries + 1 of something that is tried again: first_ms, doubled at each
 * try before, at most max_ms (first_ms > 0). */
static inline int64_t clock_doubling_ms(int64_t first_ms, int64_t max_ms, int64_t tries)
{
    int64_t ms = first_ms;

    for (int64_t i = 0; i < tries && ms < max_ms; i++)
        ms *= 2;
    return ms < max_ms ? ms : max_ms;
}

#endif
