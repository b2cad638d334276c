/* upstream.h - outbound HTTP on curl's multi interface, driven by the worker's event_base, and
 * botgate's own HTTP/1.1 and HTTP/2 on sockets curl connects (upstream.c tells which call takes
 * which): thousands of platform calls in flight on one thread, connections kept alive per worker.
 * A worker has two clients: one for the platforms (configured URLs) and one for URLs users
 * give (media downloads, webhooks) whose every connection passes the SSRF guard and goes direct,
 * never through a proxy of the environment (the guard would check the proxy's address). They must
 * not share a connection pool: a user URL on a platform's host would reuse an unchecked
 * connection. */
#ifndef BOTGATE_NET_UPSTREAM_H
#define BOTGATE_NET_UPSTREAM_H

#include "../adapters/adapter.h"

#include <stddef.h>

struct event_base;

typedef struct upstream upstream_t;
typedef struct upstream_xfer upstream_xfer_t;

typedef struct upstream_config {
    const char *ca_file; /* extra CA bundle, or NULL/"" */
    int guard;           /* 1: every connection passes the SSRF guard (user URLs) */
    int direct;          /* 1: never through a proxy of the environment (user URLs) */
    long buffer_size;    /* curl's receive buffer per transfer in flight (bytes) */
    int http1; /* 1: HTTP/1.1 only; 0: HTTP/2 where TLS offers it (both botgate's own) */
} upstream_config_t;

/* What came back. Valid only during the callback. */
typedef struct upstream_answer {
    adapter_answer_t a; /* status 0 when no HTTP answer arrived */
    int curl_code;      /* CURLE_OK or the failure */
    int not_sent;       /* 1 when the request surely never reached the peer (connect failed) */
    int blocked;        /* 1 when the SSRF guard refused the address */
    int too_large;      /* 1 when the answer was longer than allowed */
    const char *error;  /* what went wrong, "" when nothing */
    long long elapsed_us;
} upstream_answer_t;

typedef void upstream_cb(void *arg, const upstream_answer_t *ans);

enum {
    UPSTREAM_FOLLOW = 1u << 0, /* follow up to 3 redirects (each checked by the guard) */
};

upstream_t *upstream_new(struct event_base *base, const upstream_config_t *cfg);
void upstream_free(upstream_t *up); /* cancels what is in flight without callbacks */

/* Starts call and empties it (adapter_call_free), whether it started or not: the transfer
 * keeps what it needs. Returns NULL when the call could not be started (the callback never
 * runs). */
upstream_xfer_t *upstream_start(upstream_t *up, adapter_call_t *call, long timeout_ms,
                                size_t max_answer, unsigned flags, upstream_cb *cb, void *arg);

/* Stops a transfer; its callback will not run. Never call it from inside a curl callback. */
void upstream_cancel(upstream_xfer_t *x);

size_t upstream_in_flight(const upstream_t *up);

#endif
