/* bcpump.h - the delivery of broadcasts on one worker (contract.md section 13): members of the
 * running broadcasts taken a slice at a time within a window, rendered, and queued as outbox
 * requests, which the outbox delivers (outbox.c). */
#ifndef BOTGATE_GATEWAY_BCPUMP_H
#define BOTGATE_GATEWAY_BCPUMP_H

#include "op.h"

#define BCPUMP_ID_LEN 24 /* broadcast ids: 24 hex */

typedef struct bcpump bcpump_t;

/* A broadcast this worker saw end (its take dropped it from the running ones, so its status
 * callback is this worker's to post). */
typedef void bcpump_ended_fn(void *arg, const char *channel_id, const char *id);

/* The delivery of env's worker; it runs where the outbox does (env->outbox). NULL when out of
 * memory. */
bcpump_t *bcpump_new(op_env_t *env, bcpump_ended_fn *ended, void *arg);
/* Stops it: members taken and not queued are taken again after their lease. */
void bcpump_free(bcpump_t *b);

#endif
