/* ratelimit.h - the platform rate limits shared by every worker and instance (contract.md
 * section 8): one script call in Redis per platform call, timed by Redis's clock, so that
 * instances with skewed clocks still share one schedule. Asynchronous like store.h: the
 * callback runs later on the worker's loop, exactly once, unless the call is cancelled. */
#ifndef BOTGATE_STORE_RATELIMIT_H
#define BOTGATE_STORE_RATELIMIT_H

#include "idem.h"
#include "store.h"

#include "../core/ratelimit.h"

#include <stdint.h>

typedef enum {
    STORE_RATE_GO,       /* slot taken: send now */
    STORE_RATE_WAIT,     /* slot taken wait_us ahead: send then (later callers queue after) */
    STORE_RATE_TOO_LATE, /* the slot is wait_us ahead, past max_wait_ms: nothing was taken */
    STORE_RATE_RETAKE,   /* the pair's slot (taken) is wait_us ahead, the sender's not taken
                          * (it would sit idle till then): at the pair's slot, take the
                          * sender's with store_rate_take(..., pair_held = 1) */
    STORE_RATE_SKIP,     /* store_rate_take_ahead: nothing taken (no such member, no address,
                          * a number not seen valid, or someone holds or waits for its turn:
                          * the slot would be stale when used) */
} store_rate_verdict_t;

typedef struct store_rate_call store_rate_call_t;

/* verdict and wait_us are meaningful only when st is STORE_OK. wait_us is in microseconds of
 * Redis's clock, exact: a slot 100 us away is waited for 100 us, not a whole millisecond. For
 * store_rate_pause, wait_us is the length of the pause now in force (whole milliseconds). */
typedef void store_rate_cb(void *arg, store_status_t st, store_rate_verdict_t verdict,
                           int64_t wait_us);

/* Takes a slot of the channel's sender limit and, when member_id is not NULL and pair_held is 0,
 * of the pair channel + recipient (kept by the member's id: store_key_rate), at the earliest time
 * both allow, after any pause in force (a pause counts even where the policy sets no limit).
 * max_wait_ms: how long the caller may wait; past it nothing is taken. NULL with *status set when
 * nothing could be sent (cb will then never run). */
store_rate_call_t *store_rate_take(store_t *st, const char *channel_id, const char *member_id,
                                   int pair_held, const ratelimit_policy_t *policy,
                                   int64_t max_wait_ms, store_rate_cb *cb, void *arg,
                                   store_status_t *status);

/* The same for a broadcast's message (contract.md section 12, last point): the sender's slot is
 * taken only when it is due (STORE_RATE_GO); a later one is not taken and the verdict is
 * STORE_RATE_TOO_LATE with the slot's distance (ask again then). A slot that passed at most
 * lag_ms ago is taken at its own time, so that an ask a timer made late loses no pace: the next
 * slot stays an interval after it. A pair's slot later than the sender's is taken as by
 * store_rate_take (STORE_RATE_RETAKE), when within max_wait_ms. So a broadcast never holds a
 * slot ahead: a conversational call that comes meanwhile takes the next slot, not one behind
 * the broadcast's. */
store_rate_call_t *store_rate_take_bulk(store_t *st, const char *channel_id, const char *member_id,
                                        int pair_held, const ratelimit_policy_t *policy,
                                        int64_t max_wait_ms, int64_t lag_ms, store_rate_cb *cb,
                                        void *arg, store_status_t *status);

/* What store_rate_take_ahead takes of a pair's limit: the member's pair's slot too
 * (STORE_AHEAD_PAIR), with the member's cached contact read (STORE_AHEAD_CONTACT, whatsapp),
 * its number a phone number ('+', '-', '(', ')' and spaces taken out, as
 * request_normalize_phone does: STORE_AHEAD_PHONE). An externalId of STORE_RATE_ADDRESS_MAX
 * bytes or more takes no slot ahead with a contact. */
#define STORE_AHEAD_PAIR       1u
#define STORE_AHEAD_PHONE      2u
#define STORE_AHEAD_CONTACT    4u
#define STORE_RATE_ADDRESS_MAX 192

/* The first message's slots taken ahead of the delivery, in the round trip of the member's read
 * (send it before that read and the turn's RPUSH): the sender's and, with STORE_AHEAD_PAIR, the
 * member's pair's (its keys are the member's, store_key_rate: the script names every key it
 * touches among its KEYS), both or none. With STORE_AHEAD_CONTACT, whatsapp's cached contact
 * of the member (store_get_contact) is read too and handed over (store_rate_ahead_contact), and
 * the slots are taken only when it is of the number the member's record holds, and that
 * number itself: a number not seen valid lately is checked before its slots are taken. Nothing
 * either unless member_id's record exists and, with turn 1, nobody holds or waits for the
 * member's turn (its queue is empty; on one server only: with a Redis Cluster the queue is in
 * another slot, not looked at, and a request that finds someone ahead lets its slots go). No
 * callback: the caller hands the call to its delivery with store_rate_ahead_use, or lets it go
 * with store_rate_cancel, which gives back the slots taken and not used (each when no other
 * slot was taken after it: else it is lost, one slot, as a send that failed would have used
 * it). begin, when not NULL, is an Idempotency-Key's begin held (store_idem_begin_held): with
 * turn 1 on one server it rides in the same script call, which runs it first and takes the
 * slots only when it says run (else the call's answer is STORE_RATE_SKIP); the caller sends it
 * alone after this call either way (store_idem_begin_send does nothing for one that rides).
 * NULL when nothing was sent. */
store_rate_call_t *store_rate_take_ahead(store_t *st, const char *channel_id, const char *member_id,
                                         unsigned pair, int turn, store_idem_call_t *begin,
                                         const ratelimit_policy_t *policy, int64_t max_wait_ms,
                                         store_status_t *status);
/* 1 when a call of store_rate_take_ahead asked for a pair's slot. */
int store_rate_ahead_pair(const store_rate_call_t *call);
/* The contact read by a call of store_rate_take_ahead with STORE_AHEAD_CONTACT, once its answer
 * came (a round trip on the same connection after it), as store_get_contact's value
 * ("<number> <wa_id>": store_contact_wa_id reads it); NULL when none is cached, the call failed
 * or its answer is still to come. */
const char *store_rate_ahead_contact(const store_rate_call_t *call);
/* The delivery's slot, from a call of store_rate_take_ahead (taken over). 2: its answer is still
 * to come: cb gets it, as from store_rate_take or STORE_RATE_SKIP (none taken: take one), and
 * call is the delivery's call in flight. 1: it came, in *verdict and *wait_us (as from now; the
 * call is gone), STORE_RATE_RETAKE as from store_rate_take. 0: no slot to use (none taken, the
 * call failed, or the slot's time passed more than late_ms ago: then it was given back): take
 * one now. */
int store_rate_ahead_use(store_rate_call_t *call, int64_t late_ms, store_rate_cb *cb, void *arg,
                         store_rate_verdict_t *verdict, int64_t *wait_us);

/* The feedback of a platform rate-limit answer: pauses the sender's limit (member_id NULL)
 * or the pair's, for every instance, retry_after_ms when the platform said (> 0; at most 60 s),
 * else 1 s, doubled by each refusal that comes after the pause ended (up to 60 s), and forgotten
 * when none comes for as long. A refusal during a pause (of a call sent before it) leaves it as
 * it is. Every board (below) hears of the pause. cb may be NULL. */
store_rate_call_t *store_rate_pause(store_t *st, const char *channel_id, const char *member_id,
                                    int64_t retry_after_ms, store_rate_cb *cb, void *arg,
                                    store_status_t *status);

/* The callback will not run. A slot taken ahead and not used is given back. */
void store_rate_cancel(store_rate_call_t *call);

/* A worker's board of the pauses in force, heard of as store_rate_pause sets them (by any worker
 * or instance: a publish from the pause script), so that a send whose slot was granted before a
 * pause began sees it just before its call without a round trip. It hears of a pause a publish's
 * latency late, and of none while its subscriber connection is down. NULL when out of memory. */
typedef struct store_rate_board store_rate_board_t;
store_rate_board_t *store_rate_board_new(store_t *st);
void store_rate_board_free(store_rate_board_t *b); /* before its store; NULL is fine */
/* Milliseconds left of the latest pause heard of for the channel's sender or, when member_id
 * is not NULL, the pair; 0 when none (or b is NULL). */
int64_t store_rate_board_paused(store_rate_board_t *b, const char *channel_id,
                                const char *member_id);

#endif
