/* idem.h - the Redis side of contract.md section 7: Idempotency-Key records and per-member
 * turns. Each call is one script under one hash tag; the record's and the queue's key names
 * are also the pub/sub channels their writers publish on (store_watch_key), so that a request
 * that waits polls nothing. Times are the Redis server's (TIME, or a key's TTL): every
 * instance agrees. */
#ifndef BOTGATE_STORE_IDEM_H
#define BOTGATE_STORE_IDEM_H

#include "store.h"

#include <stddef.h>
#include <stdint.h>

typedef struct store_idem_call store_idem_call_t;

typedef enum {
    STORE_IDEM_RUN,      /* the record is new: this request runs (it holds the lease) */
    STORE_IDEM_WAIT,     /* another holds the lease for wait_ms more */
    STORE_IDEM_DONE,     /* answered: status, code and body are the stored answer */
    STORE_IDEM_CONFLICT, /* the key was used for another request */
    STORE_IDEM_RESUME,   /* the holder's lease ran out without an answer: this one holds it now */
} store_idem_state_t;

typedef struct store_idem {
    store_idem_state_t state;
    int64_t wait_ms;
    int status, code;
    const char *body; /* valid during the callback only */
    size_t len;
    /* STORE_IDEM_RESUME: the response whose call may have gone out (at), and the elements
     * recorded for the responses before it (n_elements == at; NULL where none was recorded),
     * valid during the callback only */
    unsigned at, n_elements;
    const char *const *elements;
    const size_t *element_lens;
} store_idem_t;

/* res is NULL unless st is STORE_OK. */
typedef void store_idem_cb(void *arg, store_status_t st, const store_idem_t *res);
/* STORE_OK: recorded; STORE_CONFLICT: the record has another owner now (it was resumed). */
typedef void store_idem_progress_cb(void *arg, store_status_t st);

/* The callback will not run. */
void store_idem_cancel(store_idem_call_t *call);

/* The record key (store_key_idem) into buf; -1 when it does not fit. */
int store_idem_key(store_t *st, char *buf, size_t size, const char *app, const char *route,
                   const char *key);
/* Starts or joins the request of record key: fp is its fingerprint, owner who runs it,
 * lease_ms how long it may run, ttl_s how long the answer is kept (the record's TTL is set
 * here to both: an answer stored within the lease is kept at least ttl_s). */
store_idem_call_t *store_idem_begin(store_t *st, const char *key, const char *fp, const char *owner,
                                    int lease_ms, int ttl_s, store_idem_cb *cb, void *arg,
                                    store_status_t *status);
/* The same begin, made but not sent: it goes with the request's slots taken ahead when it can
 * (store_rate_take_ahead), else alone by store_idem_begin_send. Either way its callback runs
 * once, and store_idem_cancel stops it as a sent one. NULL with *status when out of memory. */
store_idem_call_t *store_idem_begin_held(store_t *st, const char *key, const char *fp,
                                         const char *owner, int lease_ms, int ttl_s,
                                         store_idem_cb *cb, void *arg, store_status_t *status);
/* Sends a held begin alone; nothing when it rides with the slots (or went already). 0, or -1
 * with *status: nothing was sent and the call is freed (its callback will not run). */
int store_idem_begin_send(store_idem_call_t *call, store_status_t *status);
/* The ride, for the limiter's script (ratelimit.c) alone. The words of a held begin: key, fp,
 * owner, held, ttl (IDEM_BEGIN_LUA), valid until store_idem_riding; -1 when it was sent. */
int store_idem_ride_words(const store_idem_call_t *call, const char *words[5]);
/* Its words went in the slots' command: its answer comes with theirs (store_idem_ridden). */
void store_idem_riding(store_idem_call_t *call);
/* The ride's answer: reply NULL (or an error) when the command failed; ran: the script went on
 * past the begin (it said run), else reply is the begin's. The call is freed. */
void store_idem_ridden(store_idem_call_t *call, const redisReply *reply, int ran);
/* The longest answer a record keeps: the largest request body (1 MiB) plus 64 KiB, room for
 * the 50 elements' own fields, so that every sendResponses answer fits; the caller stores a
 * longer one's replacement instead (docs/api.md, Idempotency). */
#define STORE_IDEM_ANSWER_MAX (1024 * 1024 + 64 * 1024)

/* Stores the answer (when owner still holds the record; the begin's TTL keeps it ttl_s), drops
 * the progress recorded for a resume, and tells the waiters (those that marked the record).
 * cb (NULL: nobody asks) is told STORE_OK once Redis ran it, also when another owner or an
 * answer was there already; STORE_UNAVAILABLE or STORE_BUSY when Redis did not answer: it may
 * have run or not, and running it again changes nothing once it did. */
store_idem_call_t *store_idem_finish(store_t *st, const char *key, const char *owner,
                                     int http_status, int code, const char *body, size_t len,
                                     store_idem_progress_cb *cb, void *arg, store_status_t *status);
/* Records that response done was delivered (its result element) and that the call of the
 * next one may go out: what a request that resumes this one must not send again. */
store_idem_call_t *store_idem_progress(store_t *st, const char *key, const char *owner,
                                       unsigned done, const char *element, size_t len,
                                       store_idem_progress_cb *cb, void *arg,
                                       store_status_t *status);
/* Drops the record (when owner still holds it unanswered: the request did not run, a retry
 * runs afresh) and tells the waiters. cb (NULL: nobody asks) is told as store_idem_finish's:
 * running it again changes nothing once it did, nor once another request took the key. */
store_idem_call_t *store_idem_abandon(store_t *st, const char *key, const char *owner,
                                      store_idem_progress_cb *cb, void *arg,
                                      store_status_t *status);

/* Per-member order (contract.md section 7). A member's queue is a list of turn ids (one per
 * request, random) in the order they reached Redis; the first holds the turn. Queued requests
 * (the outbox) hold places in it too, taken and given back by the outbox's scripts: with a
 * Redis Cluster the queue is therefore in the slot of the member's outbox shard (shard below:
 * store_outbox_shard of the channel and member, or a queued entry's own shard), on one server
 * under the channel's hash tag as before. */

/* The member's queue and leases keys (keys.h) into turns and leases; -1 when they do not fit.
 * For the store's own modules (the outbox's scripts name them). */
int store_turn_keys(store_t *st, unsigned shard, const char *channel_id, const char *member_id,
                    char turns[STORE_KEY_MAX], char leases[STORE_KEY_MAX]);
/* The queue key of a member into buf; -1 when it does not fit. It is also the channel told the
 * id whose turn it is when a turn passes to a request that waits. */
int store_turn_key(store_t *st, char *buf, size_t size, unsigned shard, const char *channel_id,
                   const char *member_id);

typedef struct store_turn_take store_turn_take_t;
/* st: of the turn (STORE_OK: id is queued); queued: someone is ahead (then ask store_turn_join);
 * member_st and member (a new reference, NULL unless STORE_OK): the member read with it. */
typedef void store_turn_taken_cb(void *arg, store_status_t st, int queued, store_status_t member_st,
                                 json_t *member);
/* Queues id, held lease_ms at most when it is first, in one round trip without a script, with
 * the member record read in it (brief as store_get_member; -1: not read). Once anything was
 * sent, the caller gives the turn back (store_turn_done) whatever the answer. */
store_turn_take_t *store_turn_take(store_t *st, unsigned shard, const char *channel_id,
                                   const char *member_id, const char *id, int lease_ms, int brief,
                                   store_turn_taken_cb *cb, void *arg, store_status_t *status);
void store_turn_take_cancel(store_turn_take_t *t); /* the callback will not run */
/* STORE_OK: wait_ms 0 when it is id's turn, else how long the turn ahead may last. */
typedef void store_turn_cb(void *arg, store_status_t st, int64_t wait_ms);
/* For an id queued behind another: records its lease (lease_ms from now) when first, drops the
 * ids ahead whose lease ran out, and says whether it is id's turn. An id no longer queued (its
 * own lease ran out) is told it is its turn: its deadline has passed too. */
store_idem_call_t *store_turn_join(store_t *st, unsigned shard, const char *channel_id,
                                   const char *member_id, const char *id, int lease_ms, int first,
                                   store_turn_cb *cb, void *arg, store_status_t *status);
/* id leaves the queue; when someone waits, the queue's channel is told the next id. recorded:
 * id went through store_turn_join (its lease field goes too). */
void store_turn_done(store_t *st, unsigned shard, const char *channel_id, const char *member_id,
                     const char *id, int recorded);

#endif
