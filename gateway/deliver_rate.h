/* deliver_rate.h - deliver.c's own view of the parts of the shared rate limits (contract.md
 * section 8) that need no delivery in flight: a channel's limits, read once per record, and the
 * longest a message may wait for its slot (deliver_rate.c). */
#ifndef BOTGATE_GATEWAY_DELIVER_RATE_H
#define BOTGATE_GATEWAY_DELIVER_RATE_H

#include "deliver.h"

#define DEADLINE_MARGIN_MS 20 /* leave time to answer after a call times out */

/* The slot where what was read of a channel record is kept (deliver_rate_policy, info). */
deliver_channel_kept_t *deliver_kept(deliver_env_t *env, const json_t *channel);
/* The rate limits of the delivery's channel record. */
void deliver_rate_policy(deliver_t *d, ratelimit_policy_t *policy);
/* The longest a message may wait for its slot. */
int64_t deliver_rate_max_wait_ms(const deliver_t *d);
/* The message's slot from the one taken ahead (deliver_slot_ahead), when there is one on time:
 * 1 with *verdict and *wait_us; 2 when its answer is still to come (cb gets it, d->_rate is
 * it, in DL_RATE_TAKE); 0: none, take one. */
int deliver_ahead_take(deliver_t *d, store_rate_cb *cb, store_rate_verdict_t *verdict,
                       int64_t *wait_us);
/* whatsapp: the wa_id cached for the member's number (d->to), read with the slots taken ahead
 * (deliver_slot_ahead), once their answer came; NULL when none was read (then the delivery
 * reads it or checks the number itself). The slots stay for deliver_ahead_take. */
const char *deliver_ahead_contact(const deliver_t *d);
/* A slot taken ahead goes back before a store call of another phase takes its place: the calls
 * before the message's (a credential, a contact) would make it late anyway. */
void deliver_ahead_drop(deliver_t *d);

/* A broadcast's message waits for its slot of the sender's limit (a channel that sets one) in
 * the lane of its worker and channel: one take in flight per lane, for the first message, which
 * takes the slot only when it is due (store_rate_take_bulk); for a later one the lane asks
 * again then, on one timer. cb gets the message's answer as from store_rate_take
 * (STORE_RATE_TOO_LATE only past its longest wait); d is in phase DL_RATE_TAKE meanwhile.
 * deliver_cancel takes it out with deliver_lane_leave (fine for a delivery not in a lane). -1
 * when out of memory (nothing done). */
int deliver_lane_join(deliver_t *d, store_rate_cb *cb);
void deliver_lane_leave(deliver_t *d);

#endif
