/* outbox_status.h - what the outbox tells of a queued request (contract.md section 12): its
 * status object, and GET /requests/<id> answering it to the request's app. */
#ifndef BOTGATE_GATEWAY_OUTBOX_STATUS_H
#define BOTGATE_GATEWAY_OUTBOX_STATUS_H

#include "../store/broadcast.h"
#include "../store/outbox.h"
#include "op.h"

struct evhttp_request;

#define OUTBOX_REQUEST_ID_LEN 24 /* 2 hex of the shard, 22 random */

/* The GET /requests/<id> in flight of one worker. */
typedef struct outbox_status outbox_status_t;

/* NULL when out of memory. */
outbox_status_t *outbox_status_new(op_env_t *env);
/* Drops what is in flight, unanswered (the worker is going away). */
void outbox_status_free(outbox_status_t *os);
/* GET /requests/<id>: 200 with the status object, 129 for an unknown id or another app's. */
void outbox_status_get(outbox_status_t *os, struct evhttp_request *req);

/* {"ok":1,"requestId":..,"status":..,"attempts":N,"createdAt":..,"updatedAt":..,"sendResult":..}
 * with "eventId" first when event_id is not NULL (a callback). NULL when out of memory. */
char *outbox_status_text(const char *id, const store_outbox_status_t *s, const char *event_id,
                         size_t *len);
/* A broadcast's (GET /broadcasts/<id>, and its status callback, which outbox.c posts):
 * {"ok":1,"broadcastId","state","total","queued","sent","failed","unknown","cancelled",
 * "createdAt","updatedAt"}, with "eventId" first when event_id is not NULL. NULL when out of
 * memory. */
char *outbox_broadcast_status_text(const char *id, const store_bc_status_t *s, const char *event_id,
                                   size_t *len);

#endif
