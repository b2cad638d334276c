/* webhook.h - GET|POST /webhooks/<channelId>: the platforms' own webhooks (contract.md section
 * 14). A request is verified (handshake, signature or token, constant time) before anything of
 * it is read, parsed by the channel's adapter into events, each event's member found or made
 * and its lastInboundAt kept, the events stored, and only then the platform answered. */
#ifndef BOTGATE_GATEWAY_WEBHOOK_H
#define BOTGATE_GATEWAY_WEBHOOK_H

#include "op.h"

#include <event2/http.h>

/* A worker's webhook requests in flight. Owned by the worker; webhook_free frees it. */
typedef struct webhook webhook_t;

webhook_t *webhook_new(op_env_t *env);
/* Drops the requests still in flight (their store calls cancelled, nothing answered: the
 * server that holds their connections is freed next, and the platform sends again). */
void webhook_free(webhook_t *wh);
/* The route's handler (http_handler_fn), for GET and POST, with the webhook_t as arg. */
void webhook_route(void *arg, struct evhttp_request *req);

#endif
