/* worker.h - one worker thread: an event_base holding the HTTP server, the Redis client and
 * the upstream clients. Workers share nothing; the kernel spreads connections over them
 * (SO_REUSEPORT). The worker builds what its requests share (op_env_t) and hands it to them. */
#ifndef BOTGATE_GATEWAY_WORKER_H
#define BOTGATE_GATEWAY_WORKER_H

#include "config.h"
#include "http.h"
#include "metrics.h"
#include "op.h"
#include "broadcast.h"
#include "outbox.h"
#include "webhook.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct event;

typedef struct worker {
    int id;
    const config_t *cfg;
    struct event_base *base;
    op_env_t env;             /* what its requests share: store, upstream clients, in-flight */
    outbox_t *outbox;         /* its part of the outbox (Prefer: respond-async) */
    broadcasts_t *broadcasts; /* its part of the broadcasts (contract.md section 13) */
    webhook_t *webhook;       /* its webhook requests in flight (GET|POST /webhooks/<channelId>) */
    http_server_t http;       /* the listeners and the routes */
    pthread_t thread;
    int ctl[2]; /* main thread -> worker: 'd' drain, 'q' stop now */
    struct event *ctl_ev;
    struct event *drain_timer;
    struct event *drain_delay;
    struct event *ready_check; /* until its store is first ready: then ready_once, and no more */
    atomic_int ready_once;     /* its store has been ready since start-up (read by every worker) */
    metrics_t metrics;         /* this worker's counters, summed by /metrics */
    int redis_was_up;          /* its Redis has been up once: later losses are warnings */
} worker_t;

/* Creates the worker's loop and binds its listener; -1 with a log line on failure. */
int worker_init(worker_t *w, int id, const config_t *cfg);
int worker_start(worker_t *w);            /* runs the loop on a new thread */
void worker_tell(worker_t *w, char what); /* from the main thread: 'd' or 'q' */
void worker_cleanup(worker_t *w);

/* Every worker, for /metrics. Set once by main before the workers start. */
void worker_set_all(worker_t *all, int n);

/* A non-zero seed for core/rng.h, from getrandom(2); should that fail, from salt (an address
 * of the caller's), the time and the pid. */
uint64_t worker_seed(const void *salt);

#endif
