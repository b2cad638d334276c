/* conn.h - a worker's client connections: counted against the cap (past it the listener stops
 * accepting, below it resumes), and each must complete a request within the HTTP timeout
 * unless one of its requests is being worked on. evhttp's own timeout restarts with every
 * byte read, so without this a client trickling a byte at a time (slowloris) would hold its
 * connection, and its slot under the cap, for ever. */
#ifndef BOTGATE_GATEWAY_CONN_H
#define BOTGATE_GATEWAY_CONN_H

#include "config.h"
#include "metrics.h"

#include <stdint.h>

struct event_base;
struct evhttp;
struct evhttp_request;
struct evconnlistener;

#define CONN_MAX_HEADERS_SIZE (32 * 1024)

typedef struct conn_table conn_table_t;

/* The bufferevent hook on http, the sweep timer. rng: the worker's id state (ids of refused
 * requests). NULL on failure. */
conn_table_t *conn_setup(struct event_base *base, struct evhttp *http, const config_t *cfg,
                         metrics_t *metrics, uint64_t *rng);
void conn_cleanup(conn_table_t *t); /* after evhttp_free: frees what is left */

/* The listener the cap pauses and resumes; NULL once it is closed. */
void conn_set_listener(conn_table_t *t, struct evconnlistener *l);

/* A request of this connection arrived complete (progress), and, for API requests, is being
 * worked on until conn_request_done. */
void conn_request_arrived(conn_table_t *t, struct evhttp_request *req, int busy);
void conn_request_done(conn_table_t *t, struct evhttp_request *req);

#endif
