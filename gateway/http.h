/* http.h - the inbound side of a worker: evhttp configured for a server (limits, timeouts,
 * JSON content type), the listener, and the routes. */
#ifndef BOTGATE_GATEWAY_HTTP_H
#define BOTGATE_GATEWAY_HTTP_H

#include "worker.h"

struct evhttp_request;

/* The largest body evhttp reads at all. Bodies between REQUEST_MAX_BODY and this get our JSON
 * 413; above it evhttp answers 413 itself (libevent 2.1 has no hook for its error page). */
#define HTTP_TRANSPORT_MAX_BODY (8 * 1024 * 1024)
#define HTTP_MAX_HEADERS_SIZE (32 * 1024)

/* evhttp_send_reply, then the answer is written to the socket at once instead of waiting for
 * the next turn of the loop to find the socket writable: one epoll_ctl and one loop turn less
 * per request. What the kernel does not take at once is written the usual way. */
void http_send(struct evhttp_request *req, int status, const char *reason);

/* Creates w->http and w->listener. -1 on failure (logged). */
int http_start(worker_t *w);

#endif
