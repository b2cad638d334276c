/* deliver_rate.c - the parts of a delivery's shared rate limits (contract.md section 8) that need
 * no delivery in flight: the channel's limits, the longest wait, the slot taken ahead. */
#include "deliver_rate.h"

#include "../core/clock.h"
#include "../core/hash.h"
#include "../core/request.h"
#include "log.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

/* A slot taken ahead serves a call that goes at most this late (what a reply's trip adds to a
 * slot taken just before the call): a later one could crowd the next slots' calls. */
#define SLOT_AHEAD_LATE_MS 10

/* the script that reads a member's number for its contact (whatsapp) skips only an externalId
 * botgate would not send to */
_Static_assert(REQUEST_MAX_RECIPIENT < STORE_RATE_ADDRESS_MAX, "an address the script skips");

deliver_channel_kept_t *deliver_kept(deliver_env_t *env, const json_t *channel)
{
    return &env->_channels[hash_ptr(channel, DELIVER_CHANNELS_KEPT_BITS)];
}

/* The call that follows must still fit, with the upstream timeout, or half the time left when
 * that is shorter (a deployment whose upstream timeout is longer than its request deadline
 * would otherwise never wait). */
int64_t deliver_rate_max_wait_ms(const deliver_t *d)
{
    int64_t left = d->deadline_ms - clock_mono_us() / 1000, call = d->env->cfg->upstream_timeout_ms;

    if (call > left / 2)
        call = left / 2;
    left -= call + DEADLINE_MARGIN_MS;
    return left > 0 ? left : 0;
}

/* Read once per record object (and its "info" found, for info()): the cache hands every request
 * the same one until it changes in Redis. Records that share a slot take turns in it. */
void deliver_rate_policy(deliver_t *d, ratelimit_policy_t *policy)
{
    deliver_channel_kept_t *k = deliver_kept(d->env, d->channel);
    bg_error_t err;

    if (k->record == d->channel && d->channel != NULL) {
        *policy = k->rate;
        return;
    }
    if (ratelimit_for_channel(d->channel, policy, &err) < 0) {
        /* botgatectl refuses such a record; one written by hand keeps its type's limits (and
         * is read again, and warned of, at every message) */
        log_msg(LOG_WARN, "channel %s: %s; the type's defaults apply", d->channel_id, err.msg);
        ratelimit_defaults(d->adapter->type, policy);
        return;
    }
    json_decref(k->record);
    k->record = json_incref(d->channel);
    k->info = json_object_get(d->channel, "info");
    k->rate = *policy;
}

void deliver_slot_ahead(deliver_t *d, const char *member_id, int turn, store_idem_call_t *begin)
{
    ratelimit_policy_t policy;
    store_status_t st;
    unsigned pair = 0;

    /* a broadcast's message takes its slot after everyone else's, just before its call */
    if (d->phase != DL_IDLE || d->_ahead != NULL || d->bulk)
        return;
    deliver_rate_policy(d, &policy);
    /* a pair's limit is the member's: its keys are known before the record is read. A number
     * checked first (whatsapp): the member's cached contact is read with the slots, which are
     * taken only when it was seen valid for the number the record holds (the script reads it
     * as member_address, op.c, makes d->to of it) */
    if (policy.pair.interval_us != 0)
        pair = STORE_AHEAD_PAIR | (d->adapter->phone_recipients ? STORE_AHEAD_PHONE : 0) |
               (d->adapter->build_check != NULL ? STORE_AHEAD_CONTACT : 0);
    /* no limit; or a number checked first without a pair's limit: the check comes first, and a
     * slot taken before it would only go back */
    else if (policy.sender.interval_us == 0 || d->adapter->build_check != NULL)
        return;
    /* the board listens before a slot given now is used (deliver_start) */
    if (d->env->_pauses == NULL)
        d->env->_pauses = store_rate_board_new(d->env->store);
    d->_ahead = store_rate_take_ahead(d->env->store, d->channel_id, member_id, pair, turn, begin,
                                      &policy, deliver_rate_max_wait_ms(d), &st);
}

const char *deliver_ahead_contact(const deliver_t *d)
{
    if (d->phase != DL_IDLE || d->_ahead == NULL)
        return NULL;
    /* cached for the member's number now (else it changed since: checked again) */
    return store_contact_wa_id(store_rate_ahead_contact(d->_ahead), d->to);
}

int deliver_ahead_take(deliver_t *d, store_rate_cb *cb, store_rate_verdict_t *verdict,
                       int64_t *wait_us)
{
    store_rate_call_t *ahead = d->_ahead;
    ratelimit_policy_t policy;

    if (d->phase != DL_IDLE || ahead == NULL)
        return 0;
    d->_ahead = NULL;
    /* a policy with a pair's limit needs the pair's slot, one without none (the channel's
     * record changed meanwhile): else the slots go back, and the message takes its own */
    deliver_rate_policy(d, &policy);
    if (store_rate_ahead_pair(ahead) != (policy.pair.interval_us != 0)) {
        store_rate_cancel(ahead);
        return 0;
    }
    d->phase = DL_RATE_TAKE;
    switch (store_rate_ahead_use(ahead, SLOT_AHEAD_LATE_MS, cb, d, verdict, wait_us)) {
    case 2:
        d->_rate = ahead;
        return 2;
    case 1:
        return 1;
    }
    return 0;
}

void deliver_ahead_drop(deliver_t *d)
{
    if (d->phase == DL_IDLE) {
        store_rate_cancel(d->_ahead);
        d->_ahead = NULL;
    }
}

/* ---- the broadcasts' lanes ---- */

/* A lane's take is for a slot that is due, never one ahead: a conversational message that comes
 * meanwhile waits at most a slot interval for its own (with slots taken ahead, it waited behind
 * them: 3 ms at 1,000/s, most of its latency beside a broadcast). The timer that asks is late
 * by a reply's trip and its own lateness (its timer's), and every lane of
 * every instance is late when Redis or the machine stalls: a slot that passed at most this long
 * ago (LANE_LAG_SLOTS slot intervals for a faster limit) is still taken at its own time, so that
 * the lateness costs no pace (store_rate_take_bulk); after a stall the lanes make up at most
 * that many slots back to back. Scenario g (1,000/s, three instances on 2 shared cores): with a
 * lag of 2 ms, 2-3.5 % of the time was lost to longer stalls (95-97 % of the limit); with 8 ms,
 * 0.5 % (99 %). */
#define LANE_LAG_MS    8
#define LANE_LAG_SLOTS 8
#define LANE_EARLY     8 /* after a slot, the next is asked for an eighth of an interval early */

/* The broadcasts' messages of one worker and channel waiting for a slot, first first. Owned by
 * the worker's env (a list from _lanes); freed when empty with no take in flight, and by
 * deliver_env_clear. The deliveries in q are their requests'. */
typedef struct deliver_lane {
    struct deliver_lane *next;
    deliver_env_t *env;
    store_rate_cb *cb; /* a message's answer (deliver.c) */
    deliver_t **q;
    size_t n, cap;
    store_rate_call_t *ask;  /* the take in flight, for asker */
    deliver_t *asker;        /* NULL once it left: the slot goes to the next message */
    unsigned ask_pair : 1;   /* the take had a pair's keys: its slot is only asker's */
    unsigned pair_limit : 1; /* the channel limits pairs (at the last take) */
    unsigned timed : 1;      /* the timer is armed: the next ask then */
    unsigned in_cb;          /* answers being handed out: the lane stays */
    int64_t interval_us;     /* of the sender's limit, at the last take */
    int64_t lag_ms;          /* the takes' lag (LANE_LAG_MS, less for a fast limit) */
    int64_t due_ms;          /* monotonic: no slot before this (0: unknown) */
    struct event *timer;
    char channel_id[];
} deliver_lane_t;

static void lane_ask(deliver_lane_t *l);

static deliver_lane_t *lane_find(deliver_env_t *env, const char *channel_id)
{
    for (deliver_lane_t *l = env->_lanes; l != NULL; l = l->next)
        if (strcmp(l->channel_id, channel_id) == 0)
            return l;
    return NULL;
}

static void lane_free(deliver_lane_t *l)
{
    store_rate_cancel(l->ask);
    if (l->timer != NULL)
        event_free(l->timer);
    free(l->q);
    free(l);
}

/* An empty lane with nothing in flight goes. */
static void lane_gc(deliver_lane_t *l)
{
    deliver_lane_t **p = &l->env->_lanes;

    if (l->n > 0 || l->ask != NULL || l->in_cb > 0)
        return;
    while (*p != l)
        p = &(*p)->next;
    *p = l->next;
    lane_free(l);
}

static void lane_remove(deliver_lane_t *l, deliver_t *d)
{
    for (size_t i = 0; i < l->n; i++) {
        if (l->q[i] == d) {
            memmove(&l->q[i], &l->q[i + 1], (l->n - i - 1) * sizeof(*l->q));
            l->n--;
            break;
        }
    }
    if (l->asker == d)
        l->asker = NULL;
}

/* d leaves the lane and gets its answer. */
static void lane_answer(deliver_lane_t *l, deliver_t *d, store_status_t st,
                        store_rate_verdict_t verdict, int64_t wait_us)
{
    lane_remove(l, d);
    l->in_cb++;
    l->cb(d, st, verdict, wait_us);
    l->in_cb--;
}

/* In microseconds: a fast limit's slots are less than a millisecond apart. */
static void lane_arm(deliver_lane_t *l, int64_t us)
{
    struct timeval tv = clock_us_timeval(us);

    l->timed = evtimer_add(l->timer, &tv) == 0;
}

static void on_lane_answer(void *arg, store_status_t st, store_rate_verdict_t verdict,
                           int64_t wait_us)
{
    deliver_lane_t *l = arg;
    deliver_t *d = l->asker;
    int64_t now = clock_mono_us() / 1000, next = 0;

    l->ask = NULL;
    l->asker = NULL;
    l->in_cb++;
    if (st == STORE_OK && verdict == STORE_RATE_TOO_LATE && d != NULL &&
        wait_us > deliver_rate_max_wait_ms(d) * 1000) {
        lane_answer(l, d, st, verdict, wait_us); /* too late for it (its pair's, maybe): 120 */
    } else if (st == STORE_OK && verdict == STORE_RATE_TOO_LATE) {
        /* nothing taken: the sender's next slot is wait_us away; asked again then (a message
         * whose longest wait ends before, fails with 120: lane_ask) */
        if (d != NULL) {
            l->due_ms = now + (wait_us + 999) / 1000;
            next = wait_us > 0 ? wait_us : 1;
        }
    } else {
        int taken = st == STORE_OK && (verdict == STORE_RATE_GO || verdict == STORE_RATE_WAIT);
        /* a slot of the sender's taken for a message that left goes to the next one, when
         * that one needs no pair's slot */
        if (d == NULL && taken && !l->ask_pair && !l->pair_limit && l->n > 0 &&
            !l->q[0]->_rate_retried && !l->q[0]->_pauses_heard) {
            d = l->q[0];
            d->_pair_held = 0;
        }
        if (d != NULL)
            lane_answer(l, d, st, verdict, wait_us);
        l->due_ms = 0;
        /* the next slot is at most one interval later (less when this one was late): asked
         * for a little before a whole interval, unless conversational calls take it meanwhile
         * (then the answer says when). A timer made from each answer would add the trip and
         * its lateness to every slot, until the lag is used up and slots are lost (6 % of
         * the pace at 1,000/s); asked early, the answer says when (wait_us). */
        if (taken)
            next = wait_us + l->interval_us - l->interval_us / LANE_EARLY;
    }
    l->in_cb--;
    if (next > 0 && l->n > 0 && l->ask == NULL) /* (an answer handed out may have asked) */
        lane_arm(l, next);
    lane_ask(l);
    lane_gc(l);
}

static void on_lane_timer(evutil_socket_t fd, short what, void *arg)
{
    deliver_lane_t *l = arg;

    (void)fd;
    (void)what;
    l->timed = 0;
    lane_ask(l);
    lane_gc(l);
}

/* The first message's take, when none is in flight nor timed. */
static void lane_ask(deliver_lane_t *l)
{
    while (l->n > 0) {
        deliver_t *d = l->q[0];
        ratelimit_policy_t policy;
        store_status_t st;
        int64_t max_wait = deliver_rate_max_wait_ms(d), now = clock_mono_us() / 1000;
        int pair;

        if (l->due_ms > now + max_wait) { /* its slot comes too late for it: 120 */
            lane_answer(l, d, STORE_OK, STORE_RATE_TOO_LATE, (l->due_ms - now) * 1000);
            continue;
        }
        if (l->ask != NULL || l->timed)
            return;
        deliver_rate_policy(d, &policy);
        policy.sender.burst = 1; /* the burst is left to conversational traffic */
        l->interval_us = policy.sender.interval_us;
        l->lag_ms = LANE_LAG_SLOTS * l->interval_us / 1000;
        l->lag_ms = l->lag_ms > LANE_LAG_MS ? LANE_LAG_MS : l->lag_ms < 1 ? 1 : l->lag_ms;
        l->pair_limit = policy.pair.interval_us > 0;
        /* the pair's keys only where it has a limit, or the platform just paused it */
        pair =
            !d->_pair_held && (policy.pair.interval_us > 0 || d->_rate_retried || d->_pauses_heard);
        l->asker = d;
        l->ask_pair = pair;
        l->ask = store_rate_take_bulk(d->env->store, d->channel_id,
                                      pair ? deliver_member_id(d) : NULL, d->_pair_held, &policy,
                                      max_wait, l->lag_ms, on_lane_answer, l, &st);
        d->_pair_held = 0;
        if (l->ask == NULL) {
            l->asker = NULL;
            lane_answer(l, d, st, STORE_RATE_GO, 0);
        }
    }
}

int deliver_lane_join(deliver_t *d, store_rate_cb *cb)
{
    deliver_env_t *env = d->env;
    deliver_lane_t *l = lane_find(env, d->channel_id);

    if (l == NULL) {
        size_t len = strlen(d->channel_id);
        if ((l = calloc(1, sizeof(*l) + len + 1)) == NULL)
            return -1;
        memcpy(l->channel_id, d->channel_id, len + 1);
        l->env = env;
        l->cb = cb;
        if ((l->timer = evtimer_new(env->base, on_lane_timer, l)) == NULL) {
            free(l);
            return -1;
        }
        l->next = env->_lanes;
        env->_lanes = l;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        deliver_t **q = realloc(l->q, cap * sizeof(*q));
        if (q == NULL) {
            lane_gc(l);
            return -1;
        }
        l->q = q;
        l->cap = cap;
    }
    /* a message whose pair's slot is held comes back first: that slot is passing */
    if (d->_pair_held) {
        memmove(&l->q[1], &l->q[0], l->n * sizeof(*l->q));
        l->q[0] = d;
    } else {
        l->q[l->n] = d;
    }
    l->n++;
    d->phase = DL_RATE_TAKE;
    d->_rate = NULL;
    lane_ask(l);
    lane_gc(l);
    return 0;
}

void deliver_lane_leave(deliver_t *d)
{
    deliver_lane_t *l = lane_find(d->env, d->channel_id);

    if (l == NULL)
        return;
    lane_remove(l, d);
    lane_gc(l);
}

void deliver_env_clear(deliver_env_t *env)
{
    store_rate_board_free(env->_pauses);
    env->_pauses = NULL;
    while (env->_lanes != NULL) {
        deliver_lane_t *l = env->_lanes;
        env->_lanes = l->next;
        lane_free(l);
    }
    for (size_t i = 0; i < sizeof(env->_channels) / sizeof(env->_channels[0]); i++) {
        json_decref(env->_channels[i].record);
        memset(&env->_channels[i], 0, sizeof(env->_channels[i]));
    }
}
