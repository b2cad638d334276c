/* broadcast.h - the Redis side of broadcasts (contract.md section 13). A broadcast is a record
 * (a hash: its app, the request body, state and counts) and the set of member ids not queued
 * yet, both under the channel's hash tag; accepting fills the set in slices (member ids checked
 * to exist, a tag's index copied, recipient ids resolved or members created), so that no script
 * holds Redis long. Delivery takes members from the set a slice at a time and queues each as an
 * outbox request (store/outbox.c) whose record names the broadcast's hash of its shard: the
 * outbox's scripts count its end there, and refuse to start it once the broadcast's cancel was
 * told to that shard. Every script names keys of one slot (a Redis Cluster runs them as one
 * server does): the status sums the shards' counts into the record. */
#ifndef BOTGATE_STORE_BROADCAST_H
#define BOTGATE_STORE_BROADCAST_H

#include "../core/hint.h"
#include "bcslice.h"
#include "store.h"

#include <stddef.h>
#include <stdint.h>

/* The scripts of the calls below, for botgatectl's blocking client (their KEYS and ARGV are
 * written above each in broadcast.c). */
extern const char store_bc_create_script[], store_bc_add_tag_script[], store_bc_finish_script[],
    store_bc_status_script[], store_bc_shard_script[], store_bc_merge_script[],
    store_bc_cancel_script[];

/* The stream a broadcast's status callback is queued to (its entry: store/outbox.h's
 * broadcast_channel), once, by the delivery's take that finds it ended; into buf, -1 when it
 * does not fit. */
int store_bc_callback_stream(char *buf, size_t size, const char *prefix);

typedef struct store_bc_call store_bc_call_t;
/* The callback will not run. */
void store_bc_cancel(store_bc_call_t *call);

/* A call's plain outcome: n is what the kind says (members added, a cursor, a total...), text
 * a string of the reply ("" when none) valid during the callback. */
typedef void store_bc_cb(void *arg, store_status_t st, int64_t n, const char *text);

/* ---- accepting ---- */

/* Makes broadcast id's record, state "accepting", kept keep_ms (a refused or abandoned accept
 * leaves nothing longer); shards: the outbox's (BOTGATE_OUTBOX_SHARDS), whose counts its status
 * sums. */
store_bc_call_t *store_bc_create(store_t *st, const char *channel_id, const char *id,
                                 const char *app, const char *body, size_t body_len,
                                 const char *callback, int64_t keep_ms, unsigned shards,
                                 store_bc_cb *cb, void *arg, store_status_t *status);
/* Adds member ids (n <= STORE_BROADCAST_SLICE_MAX) after checking each one's record exists:
 * text is the first that does not ("": all added). */
store_bc_call_t *store_bc_add_members(store_t *st, const char *channel_id, const char *id,
                                      const char *const *members, size_t n, store_bc_cb *cb,
                                      void *arg, store_status_t *status);
/* Adds the members of a tag's index from cursor (SSCAN ... COUNT count): text is the next
 * cursor ("0": the tag is done). */
store_bc_call_t *store_bc_add_tag(store_t *st, const char *channel_id, const char *id,
                                  const char *tag, const char *cursor, unsigned count,
                                  store_bc_cb *cb, void *arg, store_status_t *status);
/* Adds the members of recipient ids (n <= STORE_BROADCAST_SLICE_MAX), each made from
 * new_ids[i] and new_records[i] (JSON text) when its recipient key leads to no member, as a
 * sendResponses by recipientId makes it: one script run for the slice when the store's guesses
 * of the members (store_recipient_hints) hold or the recipients are new, a second one for
 * those it did not know (store_bc_rslice_t). n: the members added. */
store_bc_call_t *store_bc_add_recipients(store_t *st, const char *channel_id, const char *id,
                                         const char *const *recipients, const char *const *new_ids,
                                         const char *const *new_records, size_t n, store_bc_cb *cb,
                                         void *arg, store_status_t *status);
/* Ends accepting: n is the total (distinct members); the broadcast runs (or is done when there
 * are none), kept keep_ms, and its id leads to its channel. Its id's index and its line among
 * the running ones are written first (then a crash leaves an accepting one, which expires). */
store_bc_call_t *store_bc_finish(store_t *st, const char *channel_id, const char *id,
                                 int64_t keep_ms, store_bc_cb *cb, void *arg,
                                 store_status_t *status);
/* A refused accept: the record and its sets are deleted, its running line dropped. */
void store_bc_abort(store_t *st, const char *channel_id, const char *id);

/* ---- status and cancel, by id ---- */

/* The channel of broadcast id (text; STORE_NOT_FOUND when none). */
store_bc_call_t *store_bc_channel(store_t *st, const char *id, store_bc_cb *cb, void *arg,
                                  store_status_t *status);

typedef struct store_bc_status {
    const char *app, *state, *callback;
    int64_t total, sent, failed, unknown, cancelled, sending, created_ms, updated_ms;
} store_bc_status_t;
/* s NULL with STORE_NOT_FOUND when there is no such record. Unless it is done, the shards'
 * counts are summed into the record first (one script per shard and one more): the counts are
 * those of this moment, and sending counts the attempts whose lease is not over. */
typedef void store_bc_status_cb(void *arg, store_status_t st, const store_bc_status_t *s);
store_bc_call_t *store_bc_status(store_t *st, const char *channel_id, const char *id,
                                 store_bc_status_cb *cb, void *arg, store_status_t *status);
/* Cancels what is not queued yet and marks the broadcast cancelled when app is its app, then
 * tells every shard (no queued member starts there from then on): n is how many of its
 * members are being sent now (-1: not app's, or no such broadcast), text the state before. */
store_bc_call_t *store_bc_cancel_run(store_t *st, const char *channel_id, const char *id,
                                     const char *app, store_bc_cb *cb, void *arg,
                                     store_status_t *status);

/* ---- delivery ---- */

/* Tells cb when a broadcast starts running (and when the watch (re)starts). NULL when out of
 * memory. */
redisc_sub_t *store_bc_watch(store_t *st, redisc_message_cb *cb, void *arg);
/* The running broadcasts of every channel (text: "<channel>\t<id>" lines). */
store_bc_call_t *store_bc_active(store_t *st, store_bc_cb *cb, void *arg, store_status_t *status);

typedef struct store_bc_take {
    const char *state; /* "take"; or "full", "empty" (nothing to take now), "accepting",
                        * "gone", or the state when it is not running */
    int ended;         /* not running: this take dropped it from the running ones (once in all;
                        * its callback was queued before) */
    const char *body, *app, *channel; /* the request, its app, the channel record ("" none) */
    size_t n;
    const char *const *members; /* member ids, and each one's record ("" when none) */
    const char *const *records;
    const size_t *record_lens;
} store_bc_take_t;
typedef void store_bc_take_cb(void *arg, store_status_t st, const store_bc_take_t *t);
/* Takes up to max members to queue, while fewer than window are queued and not finished; a
 * member taken and not confirmed (store_bc_taken) within lease_ms is taken again. A script
 * takes their ids, then one MGET reads their records (a member deleted meanwhile has ""). The
 * shards' counts are summed first every few hundred ms (what frees the window and ends the
 * broadcast); a cancelled one is told to the shards first, then the members a dead taker left are
 * taken (their enqueue records them cancelled); an ended one's callback is queued, then it leaves
 * the running ones. */
store_bc_call_t *store_bc_take(store_t *st, const char *channel_id, const char *id, unsigned max,
                               unsigned window, int64_t lease_ms, store_bc_take_cb *cb, void *arg,
                               store_status_t *status);

/* One member's outbox request of a broadcast (store_bc_enqueue). */
typedef struct store_bc_request {
    const char *request_id; /* the same for a member taken again: it is queued once */
    const char *member_id;
    const char *body; /* {"channelId","memberId","response"} rendered for the member */
    size_t body_len;
} store_bc_request_t;
/* Queues requests (all of one outbox shard, n <= STORE_BROADCAST_SLICE_MAX) as the outbox
 * accepts one (record, member's sequence number, stream entry), skipping those queued already
 * (once the shard was told of a cancel, each is recorded cancelled instead); keep_ms and ttl_ms
 * as store_outbox_accept. */
store_bc_call_t *store_bc_enqueue(store_t *st, unsigned shard, const char *channel_id,
                                  const char *id, const char *app, const store_bc_request_t *reqs,
                                  size_t n, int64_t keep_ms, int64_t ttl_ms, store_bc_cb *cb,
                                  void *arg, store_status_t *status);
/* The members queued: no longer taken again. */
void store_bc_taken(store_t *st, const char *channel_id, const char *id, const char *const *members,
                    size_t n);

#endif
