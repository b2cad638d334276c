/* outbox_post.h - the outbox's signed POSTs (contract.md sections 12 and 14): a JSON body posted
 * to a URL for an app, signed with the app's secret, tried with backoff for 24 h until a 2xx.
 * The status callbacks go this way, and so can any event the outbox delivers to a subscriber. */
#ifndef BOTGATE_GATEWAY_OUTBOX_POST_H
#define BOTGATE_GATEWAY_OUTBOX_POST_H

#include "op.h"

typedef struct outbox_post outbox_post_t;

#define OUTBOX_POST_FOR_MS (24LL * 3600 * 1000) /* a post is tried this long */

/* What to post. Copied by outbox_post_start: the caller may free it at once. */
typedef struct outbox_post_req {
    const char *app;      /* whose secret signs it (an app without one: sent unsigned) */
    const char *url;      /* http:// or https://; the SSRF guard checks its address */
    const char *body;     /* JSON text carrying event_id: the receiver's de-duplication key */
    const char *event_id; /* names the post in the logs */
    int64_t since_ms;     /* wall clock the 24 h are counted from (when the event happened) */
    atomic_uint_fast64_t *retries; /* counted on every retry, or NULL */
} outbox_post_req_t;

/* The end of a post, after which it is freed: delivered 1 (a 2xx), or 0 (not taken in 24 h, or
 * out of memory). Never called from within outbox_post_start. */
typedef void outbox_post_done_fn(void *arg, int delivered);

/* Posts req on env's loop: each try fetches the app's secret, signs with the time of the try
 * (header Botgate-Signature: t=<unix s>,v1=<hex HMAC-SHA256 of "<t>.<body>">), and is tried
 * again after a jittered backoff until a 2xx. NULL when out of memory. */
outbox_post_t *outbox_post_start(op_env_t *env, const outbox_post_req_t *req,
                                 outbox_post_done_fn *done, void *arg);
/* Stops p without calling done (at shutdown: the caller keeps what it needs to post again). */
void outbox_post_cancel(outbox_post_t *p);

/* The outbox's backoff before try attempts + 1: 1 s doubling, at most 5 min, each a random time
 * between half and all of it, so that instances that failed together spread out. */
int64_t outbox_backoff_ms(op_env_t *env, int64_t attempts);
/* Arms timer ev for ms from now (at once when ms <= 0): the outbox files' one way to wait. */
struct event;
void outbox_arm(struct event *ev, int64_t ms);

#endif
