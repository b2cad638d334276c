/* http.h - the inbound side of a worker: evhttp configured for a server (limits, timeouts,
 * JSON content type), the listeners, a table of routes, and the transport half of answering.
 * It knows no route's handler: whoever builds the server registers them. */
#ifndef BOTGATE_GATEWAY_HTTP_H
#define BOTGATE_GATEWAY_HTTP_H

#include "../core/request.h"
#include "config.h"
#include "conn.h"
#include "metrics.h"

#include <event2/http.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct evconnlistener;
struct evhttp_bound_socket;

/* The largest body evhttp reads at all: a backstop. A declared Content-Length over the route's
 * limit (REQUEST_MAX_BODY, REQUEST_MAX_BROADCAST_BODY for POST /broadcasts) is refused before
 * the body is read, and a chunked body soon after it passes that limit (conn.c), both with
 * our JSON 413. */
#define HTTP_TRANSPORT_MAX_BODY (REQUEST_MAX_BROADCAST_BODY + 1024 * 1024)
#define HTTP_MAX_HEADERS_SIZE   CONN_MAX_HEADERS_SIZE
#define HTTP_ROUTES_MAX         14

typedef void http_handler_fn(void *arg, struct evhttp_request *req);

/* Which listener answers a route. With BOTGATE_ADMIN_LISTEN set, HTTP_ADMIN routes move to the
 * admin listener; HTTP_BOTH routes are on both (load balancers probe the API address). */
typedef enum { HTTP_API, HTTP_BOTH, HTTP_ADMIN } http_where_t;

typedef struct http_route {
    const char *path;
    enum evhttp_cmd_type method; /* a GET route answers HEAD too */
    http_handler_fn *handler;
    void *arg;
    int api; /* answered later (http_answer): its connection is busy until then */
    http_where_t where;
} http_route_t;

/* One worker's server. The worker sets base, cfg, metrics, rng and first, registers the
 * routes, then calls http_start; http_free frees what it made. */
typedef struct http_server {
    struct event_base *base;
    const config_t *cfg;
    metrics_t *metrics;
    uint64_t *rng; /* ids of refused requests (conn.c) */
    int first;     /* the process's first: refuses addresses in use */
    struct evhttp *http;
    struct evhttp *admin_http;         /* BOTGATE_ADMIN_LISTEN's server, or NULL */
    struct evhttp_bound_socket *bound; /* NULL once the server stopped listening */
    conn_table_t *conns;
    http_route_t routes[HTTP_ROUTES_MAX];
    unsigned n_routes;
} http_server_t;

/* The answer of an API request: what its log line and metrics say besides the body. */
typedef struct http_answer {
    int status; /* 200, 413 or 500; with BOTGATE_HTTP_STATUS=conventional also 400,
                 * 401, 404, 409, 429, 502, 503 */
    int code;   /* err_code, 0 on success */
    metrics_route_t route;
    const char *request_id;
    const char *channel; /* or NULL */
    const char *member;  /* or NULL */
    const char *app;     /* the token's app, or NULL before it is known */
    int platform_calls;
    int sent, failed;   /* messages sent and failed (a 200 may carry failed ones) */
    int64_t started_us; /* monotonic (clock_mono_us) */
    int close;          /* Connection: close (the server is draining) */
    int replayed;       /* Idempotent-Replayed: true (an Idempotency-Key's stored answer) */
} http_answer_t;

/* Adds a route; -1 when the table is full. */
int http_route(http_server_t *s, const http_route_t *r);
/* Creates the servers and listeners, and starts accepting. -1 on failure (logged). */
int http_start(http_server_t *s);
/* Closes the API listening socket: new connections are refused from now on. */
void http_stop_listening(http_server_t *s);
void http_free(http_server_t *s);

/* evhttp_send_reply, then the answer is written to the socket at once instead of waiting for
 * the next turn of the loop to find the socket writable. What the kernel does not take at once
 * is written the usual way. */
void http_send(struct evhttp_request *req, int status, const char *reason);
void http_send_json(struct evhttp_request *req, int status, const char *reason, const char *body);
/* Answers an API request with text (taken over; NULL: no body): X-Request-Id, Connection:
 * close while draining, counted in metrics before it leaves, and its log line. */
void http_answer(http_server_t *s, struct evhttp_request *req, const http_answer_t *a, char *text,
                 size_t len);
/* An API request that could not even be taken on (out of memory): a bare 500. */
void http_refuse(http_server_t *s, struct evhttp_request *req);

#endif
