/* hook.h - the Redis side of webhooks in (contract.md section 14): a sender's member found or
 * made with its lastInboundAt in one script, an app's subscriptions, and an event queued for
 * them (with a receipt's mark on the queued request that sent the message) in one script of the
 * member's outbox shard. A webhook of a known member thus costs two round trips before its
 * answer: the member's script beside the subscriptions' read, then the event's script.
 * Every key a script touches is among its KEYS, all of one slot: a Redis Cluster then sends a
 * script whole to where its slot is moving (ASK, TRYAGAIN) instead of refusing a key in its
 * middle, which would stop it there with half of its writes kept. */
#ifndef BOTGATE_STORE_HOOK_H
#define BOTGATE_STORE_HOOK_H

#include "store.h"

#include <stddef.h>
#include <stdint.h>

typedef struct store_hook_call store_hook_call_t;
/* The callback will not run (NULL: nothing). */
void store_hook_cancel(store_hook_call_t *call);

/* ---- the sender's member ---- */

typedef struct store_hook_member {
    const char *channel_id, *recipient_id;
    /* the member id this worker last found for the recipient, NULL when none: the script names
     * the member's key among its KEYS, so it must know the id before it runs (a wrong guess
     * costs a round trip more, never a wrong answer) */
    const char *guess_id;
    const json_t *fresh; /* the record made when the sender is new, with a new "_id" */
    int64_t inbound_at;  /* > 0: lastInboundAt moves up to it (and updatedAt to now_ms) */
    int64_t now_ms;
} store_hook_member_t;

/* member_id: the sender's member (valid during the callback). record: NULL, or, when the
 * script could not write lastInboundAt itself (the field is stored in a form only
 * member_mark_inbound reads, an ISO date), the record as read (a new reference the callback
 * owns) for the caller's compare-and-set (store_update_member). */
typedef void store_hook_member_cb(void *arg, store_status_t st, const char *member_id,
                                  json_t *record);
/* The member a recipient id points to, made from m->fresh when there is none (as
 * store_member_for_recipient does), its lastInboundAt kept, in one script. */
store_hook_call_t *store_hook_member(store_t *st, const store_hook_member_t *m,
                                     store_hook_member_cb *cb, void *arg, store_status_t *status);

/* ---- subscriptions ---- */

/* An app's subscriptions (botgatectl subscription): subs is an array of their records, those
 * that are not valid left out (borrowed: valid during the callback). */
typedef void store_hook_subs_cb(void *arg, store_status_t st, const json_t *subs);
store_hook_call_t *store_hook_subscriptions(store_t *st, const char *app, store_hook_subs_cb *cb,
                                            void *arg, store_status_t *status);

/* ---- an event into the outbox ---- */

#define STORE_HOOK_SUBS_MAX     32 /* subscriptions one event goes to */
#define STORE_HOOK_MESSAGES_MAX 16 /* platform message ids one receipt names */

typedef struct store_hook_event {
    const char *event_id; /* the platform's retries of one event have the same id */
    const char *app, *channel_id, *member_id;
    const char *body; /* the event as JSON text ("" when it goes to no subscription) */
    size_t body_len;
    unsigned n_subs; /* the subscriptions it goes to */
    const char *sub_ids[STORE_HOOK_SUBS_MAX], *urls[STORE_HOOK_SUBS_MAX];
    /* a receipt: "delivered", "read" or "failed" (NULL: none) of the platform messages
     * message_ids, marked on the elements of the queued requests that sent them */
    const char *receipt;
    unsigned n_messages;
    const char *message_ids[STORE_HOOK_MESSAGES_MAX];
} store_hook_event_t;

/* queued: 1, or 0 when the event was queued before (a platform's retry: nothing added). */
typedef void store_hook_event_cb(void *arg, store_status_t st, int queued);
/* Queues ev once in shard (the member's: store_outbox_shard), an entry per subscription, each
 * numbered in its member's order to that subscription; its id is remembered keep_ms (the
 * platform's retries within it add nothing). A receipt first moves each element's receipt
 * forward (delivered, then read; failed whenever) and queues the request's status callback
 * again. One script; a round trip more when a message is a queued request's, whose record the
 * script must then name among its KEYS. */
store_hook_call_t *store_hook_event(store_t *st, unsigned shard, const store_hook_event_t *ev,
                                    int64_t keep_ms, store_hook_event_cb *cb, void *arg,
                                    store_status_t *status);

#endif
