/* broadcast.h - broadcasts of one worker (contract.md section 13): POST /broadcasts checks a
 * broadcast as a send is checked and writes its recipients to Redis in slices; GET and DELETE
 * /broadcasts/<id> tell and cancel it; and the worker's delivery takes members of the running
 * broadcasts, a slice at a time within a window, renders the responses for each and queues
 * them as outbox requests, which the outbox delivers (outbox.c). */
#ifndef BOTGATE_GATEWAY_BROADCAST_H
#define BOTGATE_GATEWAY_BROADCAST_H

#include "op.h"

struct evhttp_request;
typedef struct broadcasts broadcasts_t;

/* The broadcasts of env's worker; delivery runs where the outbox does (env->outbox), and the
 * routes answer 121 where it does not. NULL when out of memory. */
broadcasts_t *broadcasts_new(op_env_t *env);
/* Answers what is in flight (121) and frees it all: what is not queued stays in Redis. */
void broadcasts_free(broadcasts_t *b);
/* POST /broadcasts, and GET or DELETE /broadcasts/<id> (http_handler_fn, arg b). */
void broadcasts_post_route(void *arg, struct evhttp_request *req);
void broadcasts_id_route(void *arg, struct evhttp_request *req);

#endif
