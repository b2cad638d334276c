/* metrics.c - recording into the per-worker counters. */
#include "metrics.h"

const double metrics_bounds[METRICS_LATENCY_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};

int metrics_code_slot(int err_code)
{
    if (err_code == 0)
        return 0;
    if (err_code == -1)
        return 1;
    if (err_code >= 100 && err_code < 100 + METRICS_CODES - 3)
        return 3 + err_code - 100;
    return 2;
}

static int bucket(int64_t us)
{
    int i = 0;

    while (i < METRICS_LATENCY_BUCKETS && (double)us / 1e6 > metrics_bounds[i])
        i++;
    return i;
}

void metrics_request(metrics_t *m, metrics_route_t route, int err_code, int64_t elapsed_us)
{
    atomic_fetch_add_explicit(&m->requests[route][metrics_code_slot(err_code)], 1,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&m->latency[route][bucket(elapsed_us)], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->latency_sum_us[route], (uint64_t)elapsed_us,
                              memory_order_relaxed);
}
