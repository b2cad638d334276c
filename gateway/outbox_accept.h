/* outbox_accept.h - accepting a request sent with Prefer: respond-async: checked, queued in a
 * shard's stream and answered 202 (the outbox's accept, outbox.c's hook). */
#ifndef BOTGATE_GATEWAY_OUTBOX_ACCEPT_H
#define BOTGATE_GATEWAY_OUTBOX_ACCEPT_H

#include "op.h"

/* An attempt's lease past its deadline (also the margin of a queued request's turn lease). */
#define OUTBOX_LEASE_MARGIN_MS 5000

/* Queues op (an async op that passed every check) in the stream of its member's shard (of
 * shards) and answers it: 202, or the error. op_outbox(op) holds the accept's state until
 * outbox_accept_release. */
void outbox_accept(op_t *op, unsigned shards);
/* Stops the accept's call and timer (the op is being stopped). */
void outbox_accept_cancel(op_t *op);
/* Frees the accept's state (the op is freed). */
void outbox_accept_release(op_t *op);

#endif
