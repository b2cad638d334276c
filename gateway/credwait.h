/* credwait.h - the deliveries of one worker that wait while another holds a channel's
 * credential lock, in one group per channel: one subscription to the lock's release, one
 * re-read at a time, one fallback timer. It knows nothing of deliveries: it hands each re-read
 * to its waiters, and the lock to try to one of them, through callbacks. */
#ifndef BOTGATE_GATEWAY_CREDWAIT_H
#define BOTGATE_GATEWAY_CREDWAIT_H

#include "../store/store.h"

#include <jansson.h>

struct event_base;
struct credwait;
struct credwait_waiter;

/* A re-read of the channel for waiter w (channel borrowed: json_incref keeps it; NULL unless
 * st is STORE_OK). The callee may leave the group (credwait_leave) and end other waiters. */
typedef void credwait_read_fn(struct credwait_waiter *w, store_status_t st, json_t *channel);
/* No waiter saw a new credential: w tries the lock for the group (the refresh may have failed
 * or its holder died). It stays in the group until it calls credwait_tried or credwait_leave. */
typedef void credwait_try_fn(struct credwait_waiter *w);

typedef struct credwait_ops {
    credwait_read_fn *on_read;
    credwait_try_fn *on_try;
} credwait_ops_t;

/* One waiter, kept by its owner (inside its own state); fields are credwait.c's. */
typedef struct credwait_waiter {
    struct credwait *_group;             /* NULL when not waiting */
    struct credwait_waiter *prev, *next; /* the group's waiters, oldest first */
    unsigned _seen;                      /* the group's last hand-out that looked at it */
} credwait_waiter_t;

/* w waits for the channel's lock with the other waiters of one worker (*groups, which only
 * that worker's thread touches; NULL at first), in a group made for the first of them: 0, or
 * -1 when out of memory. The group goes with its last waiter. */
int credwait_join(struct credwait **groups, struct event_base *base, store_t *store,
                  const char *channel_id, const credwait_ops_t *ops, credwait_waiter_t *w);
/* Takes w out of its group (it must be in one); the group goes with its last waiter. */
void credwait_leave(credwait_waiter_t *w);
/* w tried the lock for its group and found it still held: it waits on with the others. */
void credwait_tried(credwait_waiter_t *w);

static inline int credwait_waiting(const credwait_waiter_t *w)
{
    return w->_group != NULL;
}

#endif
