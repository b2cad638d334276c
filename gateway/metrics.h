/* metrics.h - per-worker counters, written by the worker that owns them and read by whichever
 * worker answers GET /metrics (relaxed atomics: no locks on the request path). */
#ifndef BOTGATE_GATEWAY_METRICS_H
#define BOTGATE_GATEWAY_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

struct evbuffer;

typedef enum {
    METRICS_ROUTE_SEND = 0,
    METRICS_ROUTE_REDIRECT,
    METRICS_ROUTE_REQUESTS,   /* GET /requests/<id>: a queued request's status */
    METRICS_ROUTE_BROADCASTS, /* POST /broadcasts, GET and DELETE /broadcasts/<id> */
    METRICS_ROUTE_WEBHOOKS,   /* GET|POST /webhooks/<channelId>: the platforms' own webhooks */
    METRICS_ROUTES
} metrics_route_t;

/* err_code slots: 0 = success, 1 = unauthorized, 2 = any other code, then 100..130 (contract
 * section 5 and the codes sections 11-14 add). */
#define METRICS_CODES 34
/* HTTP status slots: 200, 413, 500, those of BOTGATE_HTTP_STATUS=conventional, and 202. */
#define METRICS_STATUSES 11
#define METRICS_BUCKETS  14
/* Outbound call targets: the six platforms, then media downloads and webhooks. */
#define METRICS_TARGETS   8
#define METRICS_PLATFORMS 6
#define METRICS_SHARDS    256 /* outbox streams (BOTGATE_OUTBOX_SHARDS) */
/* Why a queued request is tried again. */
typedef enum {
    METRICS_RETRY_RATE_LIMITED, /* its slot is later than an attempt's deadline, or a 429 */
    METRICS_RETRY_PLATFORM,     /* a 5xx, a refused or failed connection */
    METRICS_RETRY_STORE,        /* Redis failed before anything was sent */
    METRICS_RETRY_REASONS
} metrics_retry_t;
/* Why a webhook was refused before anything of it was read. */
typedef enum {
    METRICS_HOOK_SIGNATURE, /* a signature or token missing or wrong: 401 */
    METRICS_HOOK_REPLAY,    /* slack: a signature seen before, or a timestamp out of its window */
    METRICS_HOOK_REFUSALS
} metrics_hook_refusal_t;
/* Outcome of an outbound call: 2xx, 4xx, 5xx, no answer (connect failure, timeout, refused). */
#define METRICS_OUTCOMES 4

typedef struct metrics_histogram {
    atomic_uint_fast64_t buckets[METRICS_BUCKETS + 1]; /* the last one is +Inf */
    atomic_uint_fast64_t sum_us;
} metrics_histogram_t;

typedef struct metrics {
    atomic_uint_fast64_t requests[METRICS_ROUTES][METRICS_STATUSES][METRICS_CODES];
    metrics_histogram_t latency[METRICS_ROUTES];
    atomic_uint_fast64_t calls[METRICS_TARGETS][METRICS_OUTCOMES];
    metrics_histogram_t call_latency[METRICS_TARGETS];
    atomic_uint_fast64_t redis_commands;
    atomic_uint_fast64_t redis_errors;
    atomic_uint_fast64_t redis_reconnects;
    metrics_histogram_t redis_latency;
    atomic_uint_fast64_t credential_refreshes;
    /* the shared rate limits, by platform */
    metrics_histogram_t rate_wait[METRICS_PLATFORMS];     /* time a message waited for its slot */
    atomic_uint_fast64_t rate_refused[METRICS_PLATFORMS]; /* elements failed: slot too late */
    atomic_uint_fast64_t rate_answers[METRICS_PLATFORMS]; /* the platform said rate limited */
    /* messages handed to delivery, by platform and err_code (slot 0: sent) */
    atomic_uint_fast64_t messages[METRICS_PLATFORMS][METRICS_CODES];
    atomic_uint_fast64_t accept_pauses;
    /* the outbox (contract.md section 12) */
    atomic_uint_fast64_t outbox_accepted, outbox_attempts, outbox_claimed;
    atomic_uint_fast64_t outbox_ended[2];                       /* done, failed */
    atomic_uint_fast64_t outbox_retries[METRICS_RETRY_REASONS]; /* metrics_retry_t */
    atomic_uint_fast64_t callbacks[2];                          /* delivered, failed */
    atomic_uint_fast64_t callback_retries;
    /* broadcasts (contract.md section 13): accepted here, cancelled here, seen done by this
     * process's delivery (each once in all) */
    atomic_uint_fast64_t broadcasts[3];
    /* webhooks in (contract.md section 14), by platform */
    atomic_uint_fast64_t webhook_refused[METRICS_PLATFORMS][METRICS_HOOK_REFUSALS];
    atomic_uint_fast64_t webhook_events[METRICS_PLATFORMS];
    atomic_uint_fast64_t webhook_posts[2]; /* events to subscriptions: delivered, failed */
    atomic_uint_fast64_t webhook_post_retries;
    /* gauges of one worker's latest look at the streams (outbox_watch_depth) */
    atomic_int_fast64_t outbox_depth[METRICS_SHARDS], outbox_age_ms[METRICS_SHARDS];
    atomic_int_fast64_t outbox_shards;
    atomic_int_fast64_t in_flight;
    atomic_int_fast64_t connections;
    atomic_int_fast64_t redis_up;
} metrics_t;

void metrics_request(metrics_t *m, metrics_route_t route, int http_status, int err_code,
                     int64_t elapsed_us);
/* target: a channel type, "media" or "webhook" (others are not counted); status 0 when no
 * answer arrived. */
void metrics_call(metrics_t *m, const char *target, long http_status, int64_t elapsed_us);
void metrics_observe(metrics_histogram_t *h, int64_t elapsed_us);
/* A rate limit's event for platform (a channel type; others are not counted). */
void metrics_rate_wait(metrics_t *m, const char *platform, int64_t wait_us);
void metrics_rate_refused(metrics_t *m, const char *platform);
void metrics_rate_answer(metrics_t *m, const char *platform);
/* One message's end on platform (a channel type): err_code 0 when sent. A request answered
 * 200 can carry failed messages: this is what says whether anything was delivered. */
void metrics_message(metrics_t *m, const char *platform, int err_code);
/* A webhook of platform (a channel type) refused for why, or n of its events stored. */
void metrics_hook_refused(metrics_t *m, const char *platform, metrics_hook_refusal_t why);
void metrics_hook_events(metrics_t *m, const char *platform, unsigned n);
/* The store's observer of Redis commands (store_set_observer), with the metrics as arg. */
void metrics_on_redis_command(void *arg, int ok, int64_t latency_us);

/* Sums every worker's counters into buf, in the Prometheus text format (version 0.0.4). */
void metrics_render(struct evbuffer *buf, const metrics_t *const *all, int n);

/* One more of counter c (relaxed: a counter orders nothing). */
static inline void metrics_count(atomic_uint_fast64_t *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

#endif
