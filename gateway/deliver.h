/* deliver.h - delivering one response to a channel's platform: a fresh credential (one refresh
 * per channel at a time), a whatsapp contact check, a wechat media upload, the message call and
 * the retries the contract allows. It knows nothing of the request around it: it is started with
 * the response as JSON text (and parsed, when the caller has it) and answers through a
 * callback. */
#ifndef BOTGATE_GATEWAY_DELIVER_H
#define BOTGATE_GATEWAY_DELIVER_H

#include "../adapters/adapter.h"
#include "../core/error.h"
#include "../core/ratelimit.h"
#include "../core/result.h"
#include "../store/ratelimit.h"
#include "../store/store.h"
#include "config.h"
#include "metrics.h"
#include "../net/net.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct event_base;
struct credwait;
struct deliver_extra;

#define DELIVER_CHANNELS_KEPT_BITS 5 /* 32 slots in deliver_env_t._channels */

/* A channel record whose rate limits were read, held, with those limits and its "info" object
 * (deliver_rate.c deliver_rate_policy, deliver.c info). */
typedef struct deliver_channel_kept {
    json_t *record;
    const json_t *info;
    ratelimit_policy_t rate;
} deliver_channel_kept_t;

/* What every delivery of one worker shares; the worker fills it once, before its loop runs, and
 * owns it. Only that worker's thread touches it. */
typedef struct deliver_env {
    struct event_base *base;
    const config_t *cfg;
    store_t *store;
    net_t *up;      /* platform calls */
    net_t *up_user; /* URLs from users (media, webhooks): SSRF-guarded */
    metrics_t *metrics;
    uint64_t rng;                /* xorshift state for ids (core/rng.h) */
    struct credwait *cred_waits; /* deliveries waiting for a channel's credential (credwait.h) */
    store_rate_board_t *_pauses; /* the rate-limit pauses heard of, made at the first message */
    struct deliver_lane *_lanes; /* broadcasts' messages waiting for slots (deliver_rate.c) */
    /* Channel records whose rate limits were read, a slot each by the record's address (the
     * last one read in that slot): a record is never changed in place (a refresh changes a
     * copy, and only the contents of its "info"), so while it is the same object its limits
     * and "info" are too. A slot holds its record; deliver_env_clear lets them go. */
    deliver_channel_kept_t _channels[1 << DELIVER_CHANNELS_KEPT_BITS];
} deliver_env_t;

typedef enum {
    DL_IDLE = 0,
    DL_CRED_LOCK,     /* taking the channel's credential lock */
    DL_CRED_REREAD,   /* re-reading the channel: did another refresh it? */
    DL_CRED_WAIT,     /* another holds the lock: wait with the worker's others (credwait) */
    DL_CRED_CALL,     /* login / token call */
    DL_CRED_WRITE,    /* writing the new credential back */
    DL_CONTACT_CACHE, /* whatsapp: number seen valid lately? */
    DL_CONTACT_CALL,  /* whatsapp: /v1/contacts */
    DL_MEDIA_CACHE,   /* wechat: media_id cached for this URL? */
    DL_MEDIA_FETCH,   /* wechat: downloading the image */
    DL_MEDIA_UPLOAD,  /* wechat: uploading it */
    DL_RATE_TAKE,     /* taking the message's slot of the shared rate limits */
    DL_RATE_WAIT,     /* the slot is later: waiting for it on a timer */
    DL_RATE_PAUSE,    /* the platform said "rate limited": pausing the limit everywhere */
    DL_SEND,          /* the message call */
    DL_RETRY_WAIT,    /* waiting Retry-After before the one retry */
} deliver_phase_t;

/* The outcome of one delivery. Valid only during the done callback. */
typedef struct deliver_result {
    int ok;
    adapter_result_t res; /* meta on success */
    bg_error_t err;       /* on failure */
    int abort;            /* the failure concerns the whole request (first response only) */
    /* the response's messageEvent: from, to, timestamp, and on success its messageId (made up
     * when the platform gives none: every element has one); the caller adds the response */
    result_event_t event;
    const char *chat_id;    /* the platform's chat id on success, else the member's address */
    int64_t retry_after_ms; /* a rate limit's failure (120): when to try again; else 0 */
} deliver_result_t;

struct deliver;
typedef void deliver_done_fn(struct deliver *d, const deliver_result_t *r, void *arg);

/* One request's deliveries, one response at a time. The owner (the request) sets env, adapter,
 * channel, channel_id, to (deliver_set_address) and deadline_ms before the first
 * deliver_start, and frees channel and to. An idle delivery (phase DL_IDLE: finished or
 * cancelled) holds nothing else but a slot taken ahead: only one that deliver_holds needs
 * deliver_cancel. Fields with a leading '_' are deliver.c's own. */
typedef struct deliver {
    deliver_env_t *env;
    const adapter_ops_t *adapter;
    json_t *channel;        /* the channel record (owned; replaced after a refresh) */
    const char *channel_id; /* borrowed from the request, outlives the deliveries */
    /* the member's address on the platform, then after its NUL the member's id, whose pair's
     * rate keys (and whatsapp contact) are the member's (deliver_set_address; the owner's) */
    char *to;
    int64_t deadline_ms; /* monotonic: nothing is started that cannot end before it */
    deliver_phase_t phase;
    unsigned _text_len;
    const char *_text; /* the response being delivered (borrowed until done) */
    json_t *_response; /* the same parsed, until its call is built (deliver_start_parsed) */
    deliver_done_fn *_done;
    void *_arg;
    net_xfer_t *_xfer; /* the call of phase in flight */
    /* The store call of phase in flight: the rate limiter's in DL_RATE_TAKE and DL_RATE_PAUSE,
     * in DL_IDLE the slot taken ahead (deliver_slot_ahead) or NULL, else a record's (a delivery
     * waits for one thing at a time). */
    union {
        store_call_t *_call;
        store_rate_call_t *_rate;
        store_rate_call_t *_ahead;
    };
    struct deliver_extra *_x; /* state of the rare paths, allocated when first needed */
    uint16_t platform_calls;  /* calls started, for the request's log line */
    uint16_t _delivered : 15; /* responses already through delivery */
    /* a broadcast's message (contract.md section 12, last point): it waits for the sender's
     * slots in its worker's lane of the channel, which takes one only when it is due (never
     * ahead, never out of the burst), so that conversational traffic
     * finds its slot almost as if it were alone. In the bits of _delivered: op_t stays in its
     * size class. */
    uint16_t bulk : 1;
    uint16_t failed; /* of those, the ones that failed (the request's log line) */
    unsigned _timer_armed : 1, _cred_ready : 1, _cred_refreshed : 1, _cred_forced : 1,
        _lock_held : 1, _contact_ready : 1, _auth_retried : 2, _rate_retried : 1,
        _connect_retried : 1, _slot_ready : 1, _pair_held : 1, _pauses_heard : 2,
        failed_other : 1, /* a message failed other than rate limited (120) */
        /* the last message failed and surely reached no platform: refused before its call
         * (a rate limit's 120, a failed connection) or answered 5xx: a later try cannot
         * deliver it twice (the outbox retries it) */
        last_unsent : 1;
} deliver_t;

/* Sets d->to (the owner frees it): the member's address, and its id after it. -1 when out of
 * memory. */
int deliver_set_address(deliver_t *d, const char *to, const char *member_id);
/* The member's id of d->to: its pair's rate limit and its whatsapp contact are the member's
 * (store_key_rate), so that a member is paced alike however a request names it. */
static inline const char *deliver_member_id(const deliver_t *d)
{
    return d->to + strlen(d->to) + 1;
}

/* Lets go what the worker's deliveries kept between them (deliver_env_t._channels). */
void deliver_env_clear(deliver_env_t *env);

/* Delivers the response text[0..len) (borrowed until done runs). done runs exactly once, from a
 * callback of the loop or at once, unless deliver_cancel comes first; the delivery is idle
 * again when it runs. */
void deliver_start(deliver_t *d, const char *text, size_t len, deliver_done_fn *done, void *arg);
/* Ends a delivery before anything of it starts: done runs at once with err (never an abort),
 * counted as a failed message like any other (a closed conversation window, core/window.h). */
void deliver_refuse(deliver_t *d, const bg_error_t *err, deliver_done_fn *done, void *arg);
/* The same, with the response also parsed (a reference, taken over; NULL: none), as a caller
 * that keeps the validated response has it: the message call is built from it, which saves a
 * parse of the text, and it goes as soon as that call is built (thousands of calls wait at
 * once); a later build (a retry) reads the text. */
void deliver_start_parsed(deliver_t *d, json_t *response, const char *text, size_t len,
                          deliver_done_fn *done, void *arg);
/* Before the first deliver_start, with adapter, channel, channel_id and deadline_ms set, in the
 * loop pass that sends the member's read (before it, and before the turn's RPUSH): the first
 * message's slot of the channel's sender limit goes in that round trip (store_rate_take_ahead),
 * and of the member's pair's limit, when it has one. Where a number is checked first
 * (whatsapp), the member's cached contact comes with them (deliver_ahead_contact; the slots
 * only when it was seen valid for the number the record holds). The first message uses them
 * when its call goes at the slot's time; else, and when no message uses them, they go back
 * (deliver_cancel). begin: a request's Idempotency-Key begin held (store_idem_begin_held), to
 * ride with the slots when it can; NULL: none (store_rate_take_ahead). */
void deliver_slot_ahead(deliver_t *d, const char *member_id, int turn, store_idem_call_t *begin);
/* Stops what is in flight (no callback) and frees what it held, a slot taken ahead too: the
 * delivery is idle and can be started again. */
void deliver_cancel(deliver_t *d);
/* 1 when the delivery holds anything (deliver_cancel lets it go). */
static inline int deliver_holds(const deliver_t *d)
{
    return d->phase != DL_IDLE || d->_ahead != NULL;
}
/* 1 when messages ended and every one was rate limited (120): nothing was sent, and the same
 * request may be sent again (after the retryAfterMs its elements carry). */
static inline int deliver_only_rate_limited(const deliver_t *d)
{
    return d->_delivered > 0 && d->failed == d->_delivered && !d->failed_other;
}
/* Messages that ended sent so far (failed ones are d->failed). */
static inline int deliver_sent(const deliver_t *d)
{
    return d->_delivered - d->failed;
}
/* The message call is out: it may deliver whatever happens now. */
int deliver_on_wire(const deliver_t *d);
/* No retry any more (the drain): the call out is the last one. */
void deliver_no_retry(deliver_t *d);

/* A messageEvent of this channel and member: from, to, timestamp and message_id are set;
 * the caller sets response (or type and data). buf holds a numeric from address. */
result_event_t deliver_event(const deliver_t *d, const char *message_id, char buf[32]);
/* The same for a parsed response, as JSON. New reference. */
json_t *deliver_event_json(const deliver_t *d, const json_t *response, const char *message_id);

/* Milliseconds left before deadline_ms. */
int64_t deliver_remaining_ms(const deliver_t *d);

/* Starts an adapter's call on net (net_start) and empties it (adapter_call_free), whether it
 * started or not. */
net_xfer_t *deliver_net_start(net_t *net, adapter_call_t *call, long timeout_ms, size_t max_answer,
                              unsigned flags, net_cb *cb, void *arg);

#endif
