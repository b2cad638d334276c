/* metrics.h - per-worker counters, written by the worker that owns them and read by whichever
 * worker answers GET /metrics (relaxed atomics: no locks on the request path). */
#ifndef BOTGATE_GATEWAY_METRICS_H
#define BOTGATE_GATEWAY_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

typedef enum {
    METRICS_ROUTE_SEND = 0,
    METRICS_ROUTE_REDIRECT,
    METRICS_ROUTE_OTHER,
    METRICS_ROUTES
} metrics_route_t;

/* err_code slots: 0 = success, 1 = unauthorized, 2 = internal, then 100..120. */
#define METRICS_CODES 24
#define METRICS_LATENCY_BUCKETS 14

typedef struct metrics {
    atomic_uint_fast64_t requests[METRICS_ROUTES][METRICS_CODES];
    atomic_uint_fast64_t latency[METRICS_ROUTES][METRICS_LATENCY_BUCKETS + 1]; /* +Inf last */
    atomic_uint_fast64_t latency_sum_us[METRICS_ROUTES];
    atomic_uint_fast64_t platform_calls[8][4];   /* platform index x outcome */
    atomic_uint_fast64_t platform_latency[8][METRICS_LATENCY_BUCKETS + 1];
    atomic_uint_fast64_t platform_latency_sum_us[8];
    atomic_uint_fast64_t redis_errors;
    atomic_uint_fast64_t redis_reconnects;
    atomic_uint_fast64_t credential_refreshes;
    atomic_int_fast64_t in_flight;
    atomic_int_fast64_t connections;
} metrics_t;

/* Bucket upper bounds in seconds, shared by every histogram. */
extern const double metrics_bounds[METRICS_LATENCY_BUCKETS];

int metrics_code_slot(int err_code);
void metrics_request(metrics_t *m, metrics_route_t route, int err_code, int64_t elapsed_us);

#endif
