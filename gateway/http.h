/* http.h - the inbound side of a worker: evhttp configured for a server (limits, timeouts,
 * JSON content type), the listener, and the routes. */
#ifndef BOTGATE_GATEWAY_HTTP_H
#define BOTGATE_GATEWAY_HTTP_H

#include "worker.h"

/* The largest body evhttp reads at all. Bodies between REQUEST_MAX_BODY and this get our JSON
 * 413; above it evhttp answers 413 itself (libevent 2.1 has no hook for its error page). */
#define HTTP_TRANSPORT_MAX_BODY (8 * 1024 * 1024)
#define HTTP_MAX_HEADERS_SIZE (32 * 1024)

/* Creates w->http and w->listener. -1 on failure (logged). */
int http_start(worker_t *w);

#endif
