/* worker.h - one worker thread: an event_base holding the HTTP server, the Redis client and
 * the upstream client. Workers share nothing; the kernel spreads connections over them
 * (SO_REUSEPORT). */
#ifndef BOTGATE_GATEWAY_WORKER_H
#define BOTGATE_GATEWAY_WORKER_H

#include "config.h"
#include "metrics.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct event;
struct evhttp;
struct evconnlistener;
struct evhttp_bound_socket;
struct conn_table;
struct op;
struct cred_wait;

/* worker_t.draining once the drain time is over: no request starts a platform call any more;
 * the message calls already on the wire finish within the upstream timeout. */
#define WORKER_DRAIN_OVER 2

typedef struct worker {
    int id;
    const config_t *cfg;
    struct event_base *base;
    struct evhttp *http;
    struct evconnlistener *listener; /* NULL once the worker stopped listening */
    struct evhttp_bound_socket *bound;
    struct evhttp *admin_http; /* BOTGATE_ADMIN_LISTEN's server, or NULL */
    struct store *store;
    struct upstream *up;      /* platform calls */
    struct upstream *up_user; /* URLs from users (media, webhooks): SSRF-guarded, own pool */
    pthread_t thread;
    int ctl[2];               /* main thread -> worker: 'd' drain, 'q' stop now */
    struct event *ctl_ev;
    struct event *drain_timer;
    struct event *drain_delay;
    int draining;             /* 1 after SIGTERM, WORKER_DRAIN_OVER once the drain time is over */
    size_t in_flight;         /* requests accepted and not yet answered */
    size_t connections;       /* open client connections */
    struct conn_table *conns; /* the connections, for the cap and the sweep (conn.c) */
    int accepting;            /* the listener is enabled */
    struct op *ops;           /* in-flight requests, oldest first (deadlines, drain) */
    struct op *ops_last;
    struct event *deadline_timer; /* due at the deadline of ops (op.c) */
    struct cred_wait *cred_waits; /* requests waiting for a channel's credential (deliver.c) */
    uint64_t rng;             /* xorshift state for ids */
    metrics_t metrics;        /* this worker's counters, summed by /metrics */
} worker_t;

/* Creates the worker's loop and binds its listener; -1 with a log line on failure. */
int worker_init(worker_t *w, int id, const config_t *cfg);
int worker_start(worker_t *w);           /* runs the loop on a new thread */
void worker_tell(worker_t *w, char what); /* from the main thread: 'd' or 'q' */
void worker_cleanup(worker_t *w);

/* Called by an op when it has answered: the drain may finish. */
void worker_op_done(worker_t *w);

/* A random hex id of n characters (n < size). */
void worker_random_hex(worker_t *w, char *out, size_t n);

/* Every worker, for /metrics. Set once by main before the workers start. */
void worker_set_all(worker_t *all, int n);
worker_t *worker_all(int *n);

#endif
