/* outbox.h - the outbox of one worker (contract.md section 12): it queues the requests sent
 * with Prefer: respond-async, delivers queued ones as attempts (ops without an HTTP request, on
 * the worker's loop), answers GET /requests/<id>, and posts the signed status callbacks. */
#ifndef BOTGATE_GATEWAY_OUTBOX_H
#define BOTGATE_GATEWAY_OUTBOX_H

#include "op.h"

struct evhttp_request;
typedef struct outbox outbox_t;

/* The outbox of env's worker (its consumer name made from worker_id): installs env->outbox
 * and starts reading, once the loop runs (with a Redis Cluster, a blocking read per shard on
 * its slot's master). NULL when out of memory. */
outbox_t *outbox_new(op_env_t *env, int worker_id);
/* Stops what is in flight and frees it all; the ops must have been answered before (what is
 * not finished stays in Redis for another consumer). */
void outbox_free(outbox_t *ob);
/* GET /requests/<id> (http_handler_fn, arg the outbox). */
void outbox_status_route(void *arg, struct evhttp_request *req);
/* Refreshes the queue depth gauges (one worker does it for the process). */
void outbox_watch_depth(outbox_t *ob);

#endif
