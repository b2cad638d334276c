/* conn.h - a worker's client connections: counted against the cap (past it the listener stops
 * accepting, below it resumes), and each must complete a request within the HTTP timeout
 * unless one of its requests is being worked on. evhttp's own timeout restarts with every
 * byte read, so without this a client trickling a byte at a time (slowloris) would hold its
 * connection, and its slot under the cap, for ever. */
#ifndef BOTGATE_GATEWAY_CONN_H
#define BOTGATE_GATEWAY_CONN_H

#include "worker.h"

struct evhttp;
struct evhttp_request;

typedef struct conn_table conn_table_t;

int conn_setup(worker_t *w);      /* the bufferevent hook on w->http, the sweep timer */
void conn_cleanup(worker_t *w);   /* after evhttp_free: frees what is left */

/* A request of this connection arrived complete (progress), and, for API requests, is being
 * worked on until conn_request_done. */
void conn_request_arrived(worker_t *w, struct evhttp_request *req, int busy);
void conn_request_done(worker_t *w, struct evhttp_request *req);

/* Pauses or resumes accepting to follow the cap. */
void conn_update_accepting(worker_t *w);

#endif
