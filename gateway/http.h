/* http.h - the inbound side of a worker: evhttp configured for a server (limits, timeouts,
 * JSON content type), the listener, and the routes. */
#ifndef BOTGATE_GATEWAY_HTTP_H
#define BOTGATE_GATEWAY_HTTP_H

#include "worker.h"

struct evhttp_request;

/* The largest body evhttp reads at all: a backstop. A declared Content-Length over
 * REQUEST_MAX_BODY is refused before the body is read, and a chunked body soon after it
 * passes REQUEST_MAX_BODY (conn.c), both with our JSON 413. */
#define HTTP_TRANSPORT_MAX_BODY (2 * 1024 * 1024)
#define HTTP_MAX_HEADERS_SIZE (32 * 1024)

/* evhttp_send_reply, then the answer is written to the socket at once instead of waiting for
 * the next turn of the loop to find the socket writable: one epoll_ctl and one loop turn less
 * per request. What the kernel does not take at once is written the usual way. */
void http_send(struct evhttp_request *req, int status, const char *reason);

/* Creates w->http and w->listener, and w->admin_http when BOTGATE_ADMIN_LISTEN is set. -1 on
 * failure (logged). */
int http_start(worker_t *w);

#endif
