/* bcpump.h - the delivery of broadcasts on one worker (contract.md section 13): members of the
 * running broadcasts taken a slice at a time within a window, rendered, and queued as outbox
 * requests, which the outbox delivers (outbox.c). */
#ifndef BOTGATE_GATEWAY_BCPUMP_H
#define BOTGATE_GATEWAY_BCPUMP_H

#include "op.h"

#define BCPUMP_ID_LEN 24 /* broadcast ids: 24 hex */

typedef struct bcpump bcpump_t;

/* The delivery of env's worker; it runs where the outbox does (env->outbox). NULL when out of
 * memory. */
bcpump_t *bcpump_new(op_env_t *env);
/* Stops it: members taken and not queued are taken again after their lease. */
void bcpump_free(bcpump_t *b);

#endif
