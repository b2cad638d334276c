/* outbox.h - the Redis side of the outbox (contract.md section 12): one stream per shard, read
 * by the consumer group "botgate", and one record per accepted request (its body, status and
 * the elements delivered so far). Every write that must hold together is one script on keys of
 * one shard's slot: accepting (the record, the member's sequence number, the entry), starting
 * an attempt (order, lease, expiry), recording progress, and ending (the status, the member's
 * order passing, the entry acknowledged and, when asked, the status callback queued). */
#ifndef BOTGATE_STORE_OUTBOX_H
#define BOTGATE_STORE_OUTBOX_H

#include "store.h"

#include <stddef.h>
#include <stdint.h>

#define STORE_OUTBOX_GROUP        "botgate"
#define STORE_OUTBOX_SHARDS_MAX   256
#define STORE_OUTBOX_ELEMENTS_MAX 64 /* responses of one request: 50 at most (request.h) */

typedef struct store_outbox_call store_outbox_call_t;
/* The callback will not run. */
void store_outbox_cancel(store_outbox_call_t *call);

/* ---- accepting ---- */

typedef struct store_outbox_new {
    const char *app;  /* the token's app: the token itself was checked when it was accepted */
    const char *body; /* the request as JSON text */
    size_t body_len;
    const char *channel_id, *member_id;
    const char *callback; /* statusCallback URL, "" when none */
    const char *kind;     /* the operation: "" for sendResponses, "redirect" */
    /* > 0: the request takes its place in the member's turn queue now (contract.md sections 7
     * and 12: async and sync messages go out in the order they reached Redis), held this long
     * at most; its attempts wait for that turn (STORE_OUTBOX_TURN) and the final end gives it
     * back. 0: no turn (member order off). */
    int64_t turn_lease_ms;
    int64_t turn_guess_ms; /* the lease of a sync holder whose own is not set yet */
} store_outbox_new_t;

/* created_ms: Redis's clock when it was accepted. */
typedef void store_outbox_accept_cb(void *arg, store_status_t st, int64_t created_ms);
/* Writes request id's record, gives it the member's next sequence number and adds its entry
 * to the shard's stream. keep_ms: how long the record is kept unanswered (the queue TTL and
 * the status's own time); ttl_ms: what is not sent by then fails (128). */
store_outbox_call_t *store_outbox_accept(store_t *st, unsigned shard, const char *id,
                                         const store_outbox_new_t *req, int64_t keep_ms,
                                         int64_t ttl_ms, store_outbox_accept_cb *cb, void *arg,
                                         store_status_t *status);

/* An accept that got no answer (it timed out, the connection went): queued 1 when its script
 * ran; else 0, and from now on it cannot run (a late one queues nothing). */
typedef void store_outbox_settle_cb(void *arg, store_status_t st, int queued);
store_outbox_call_t *store_outbox_settle(store_t *st, unsigned shard, const char *id,
                                         int64_t keep_ms, store_outbox_settle_cb *cb, void *arg,
                                         store_status_t *status);

/* ---- the consumers ---- */

/* An entry read from a shard's stream: a request to deliver, a status callback to post, or a
 * webhook event to post to a subscription. */
typedef struct store_outbox_entry {
    unsigned shard;
    const char *entry_id;   /* the stream's id */
    const char *request_id; /* a request's or a callback's; an event's id */
    /* a request's or an event's member order key; a callback's when it is ordered ("" else) */
    const char *order_key;
    /* the channel and member whose turn queue holds a request's place, NULL without one (the
     * queue of shard's slot with a cluster: store_turn_keys) */
    const char *turn_channel, *turn_member;
    int callback;         /* 1: post the status of request_id */
    int64_t callback_seq; /* its number among the member's callbacks (0: not ordered) */
    /* an event (subscription not NULL): posted to url, signed with app's secret, as number
     * seq of its member's events to that subscription */
    const char *subscription, *url, *app, *body;
    size_t body_len;
    int64_t seq;
    /* a broadcast's status callback (callback 1, request_id the broadcast's id): its channel,
     * else NULL (store/broadcast.c's scripts write the entry) */
    const char *broadcast_channel;
    /* a request's, once its start told them (NULL before): its broadcast's hash of the shard
     * (store/broadcast.c; NULL or "" when none; a broadcast's entry names it, "bq", so that
     * its first start declares it), the channel its message index is under */
    const char *bc_hash, *channel;
} store_outbox_entry_t;

/* ---- webhook events (contract.md section 14) ---- */

/* The shard of a member's outbox entries (FNV-1a of channel and member): all of a member's
 * requests and events go to one stream. */
unsigned store_outbox_shard(unsigned shards, const char *channel_id, const char *member_id);

/* An event's entries (one per subscription) are queued by store_hook_event (hook.h). */

/* Whether entry e (an event) may be posted now: 1 yes, 0 an earlier event of its member to
 * that subscription is not finished (watch e->order_key), 2 it was finished already. */
typedef void store_outbox_turn_cb(void *arg, store_status_t st, int turn);
store_outbox_call_t *store_outbox_event_turn(store_t *st, const store_outbox_entry_t *e,
                                             store_outbox_turn_cb *cb, void *arg,
                                             store_status_t *status);
/* Entry e is finished (posted, or given up): the member's order passes to its next event, the
 * entry is acknowledged and deleted, in one step. Fire and forget: a lost answer leaves the
 * entry pending, and a later turn finds it finished. */
void store_outbox_event_end(store_t *st, const store_outbox_entry_t *e);

/* entries valid during the callback only; n 0 when there were none (or st is not OK). */
typedef void store_outbox_entries_cb(void *arg, store_status_t st,
                                     const store_outbox_entry_t *entries, size_t n);

/* A connection of its own that waits in XREADGROUP ... BLOCK for new entries of shards first
 * .. first + shards - 1 (a blocking read holds its connection: never the one requests use).
 * With a Redis Cluster one blocking read names streams of one slot only, so a reader reads
 * one shard (shards 1), on a connection to the master of its slot, made at the first read,
 * moved where a MOVED points and made again when it is lost. NULL when out of memory. */
typedef struct store_outbox_reader store_outbox_reader_t;
store_outbox_reader_t *store_outbox_reader_new(store_t *st, unsigned first, unsigned shards,
                                               const char *consumer, int block_ms);
void store_outbox_reader_free(store_outbox_reader_t *r);
/* Reads up to count new entries, waiting block_ms at most; cb runs once (n 0: none came).
 * The consumer group is made first when the stream has none. -1 when nothing was sent. */
int store_outbox_read(store_outbox_reader_t *r, unsigned count, store_outbox_entries_cb *cb,
                      void *arg);
/* The entries of shard pending longer than min_idle_ms with another consumer (its instance
 * died), handed to consumer (XAUTOCLAIM). */
store_outbox_call_t *store_outbox_claim(store_t *st, unsigned shard, const char *consumer,
                                        int min_idle_ms, unsigned count,
                                        store_outbox_entries_cb *cb, void *arg,
                                        store_status_t *status);
/* A status callback's turn among its member's (entry e, callback_seq > 0): turn 1 when the
 * callbacks before it ended (store_outbox_turn_cb is the events' above). */
store_outbox_call_t *store_outbox_callback_turn(store_t *st, const store_outbox_entry_t *e,
                                                store_outbox_turn_cb *cb, void *arg,
                                                store_status_t *status);
/* A status callback ended (posted, or given up): its entry goes and the member's next
 * callback may go out (a PUBLISH on the order key tells its job). */
void store_outbox_callback_done(store_t *st, const store_outbox_entry_t *e);
/* Acknowledges and deletes an entry that has nothing left to do. */
void store_outbox_ack(store_t *st, unsigned shard, const char *entry_id);
/* The n entries of shard (ids) stay consumer's, their idle time back to 0 (XCLAIM ... JUSTID):
 * entries a live job holds are not taken over. Entries acknowledged meanwhile are left so. */
void store_outbox_keep(store_t *st, unsigned shard, const char *consumer, const char *const *ids,
                       unsigned n);
/* Removes the consumers of a shard's group that hold no entry and have not read for
 * min_idle_ms: those of workers that are gone (each worker of each process is a consumer of
 * its own; a live one reads at least every few seconds). */
void store_outbox_prune(store_t *st, unsigned shard, int64_t min_idle_ms);
/* Entries and the oldest entry's age (ms) of a shard's stream, for the metrics. */
typedef void store_outbox_depth_cb(void *arg, store_status_t st, int64_t pending,
                                   int64_t oldest_age_ms);
store_outbox_call_t *store_outbox_depth(store_t *st, unsigned shard, store_outbox_depth_cb *cb,
                                        void *arg, store_status_t *status);

/* ---- one attempt ---- */

typedef enum {
    STORE_OUTBOX_RUN,   /* this attempt runs: it holds the record's lease */
    STORE_OUTBOX_FINAL, /* done or failed already: nothing to do */
    STORE_OUTBOX_GONE,  /* no such record (expired) */
    STORE_OUTBOX_ORDER, /* an earlier request of the member is not finished: wait for it */
    STORE_OUTBOX_WAIT,  /* another attempt holds the lease, or a retry is due later: wait_ms */
    STORE_OUTBOX_TURN,  /* a request ahead in the member's turn queue (a sync one) holds it */
    STORE_OUTBOX_HASH,  /* a broadcast's: to be started again with its hash (bc_hash) */
} store_outbox_state_t;

/* What an attempt starts from; strings valid during the callback only. */
typedef struct store_outbox_start {
    store_outbox_state_t state;
    int64_t wait_ms;
    unsigned next;       /* the first response not finished */
    int crashed;         /* an attempt died with the call of response next maybe out */
    int expired;         /* older than the queue TTL: what is not sent fails with 128 */
    int64_t attempts;    /* counting this one */
    int bulk;            /* a broadcast's message (store/broadcast.c): low priority */
    const char *bc_hash; /* its hash ("" when not a broadcast's; HASH: the one to declare) */
    const char *channel; /* the request's channel */
    const char *body, *app;
    const char *kind; /* as accepted (store_outbox_new_t) */
    size_t body_len;
    /* the elements of the responses before next ("" where none was recorded) */
    const char *elements[STORE_OUTBOX_ELEMENTS_MAX];
    size_t element_lens[STORE_OUTBOX_ELEMENTS_MAX];
} store_outbox_start_t;

typedef void store_outbox_start_cb(void *arg, store_status_t st, const store_outbox_start_t *s);
/* Starts an attempt on request id (entry e) as owner, for lease_ms at most. */
store_outbox_call_t *store_outbox_start(store_t *st, const store_outbox_entry_t *e,
                                        const char *owner, int lease_ms, store_outbox_start_cb *cb,
                                        void *arg, store_status_t *status);
/* STORE_OK: recorded; STORE_CONFLICT: another attempt holds the record now. */
typedef void store_outbox_done_cb(void *arg, store_status_t st);
/* Records response i's final element before the next response's call may go out. */
store_outbox_call_t *store_outbox_progress(store_t *st, const store_outbox_entry_t *e,
                                           const char *owner, unsigned i, const char *element,
                                           size_t len, store_outbox_done_cb *cb, void *arg,
                                           store_status_t *status);

/* How an attempt ended. */
typedef struct store_outbox_end {
    int final;          /* 1: status and result are the end; 0: tried again in delay_ms */
    const char *status; /* "done" or "failed" */
    const char *result; /* JSON text: {"sendResult":..} or {"error":..} */
    size_t result_len;
    int64_t delay_ms;
    int64_t keep_ms;          /* a final status is kept this long */
    int64_t callback_keep_ms; /* the member's order is kept this long for a callback queued */
} store_outbox_end_t;
/* Ends an attempt on entry e's request: final, its order and turn pass. */
store_outbox_call_t *store_outbox_end(store_t *st, const store_outbox_entry_t *e, const char *owner,
                                      const store_outbox_end_t *end, store_outbox_done_cb *cb,
                                      void *arg, store_status_t *status);

/* ---- the status ---- */

typedef struct store_outbox_status {
    const char *app, *status, *callback, *member_id;
    const char *receipts; /* "" or a JSON object: element index -> "delivered|read|failed" */
    int64_t attempts, created_ms, updated_ms;
    const char *result; /* the final result's JSON text, NULL until then */
    size_t result_len;
    unsigned n_elements; /* until then, the elements recorded so far ("" where none) */
    const char *elements[STORE_OUTBOX_ELEMENTS_MAX];
    size_t element_lens[STORE_OUTBOX_ELEMENTS_MAX];
} store_outbox_status_t;
/* s NULL with STORE_NOT_FOUND when there is no such record. */
typedef void store_outbox_status_cb(void *arg, store_status_t st, const store_outbox_status_t *s);
store_outbox_call_t *store_outbox_status(store_t *st, unsigned shard, const char *id,
                                         store_outbox_status_cb *cb, void *arg,
                                         store_status_t *status);

/* An app's signing secret for status callbacks (STORE_NOT_FOUND, secret NULL: none set). */
typedef void store_outbox_secret_cb(void *arg, store_status_t st, const char *secret);
store_outbox_call_t *store_outbox_secret(store_t *st, const char *app, store_outbox_secret_cb *cb,
                                         void *arg, store_status_t *status);

#endif
