/* deliver_rate.c - the parts of a delivery's shared rate limits (contract.md section 8) that need
 * no delivery in flight: the channel's limits, the longest wait, the slot taken ahead. */
#include "deliver_rate.h"

#include "../core/clock.h"
#include "../core/hash.h"
#include "log.h"

#include <string.h>

/* A slot taken ahead serves a call that goes at most this late (what a reply's trip adds to a
 * slot taken just before the call): a later one could crowd the next slots' calls. */
#define SLOT_AHEAD_LATE_MS 10

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

void deliver_env_clear(deliver_env_t *env)
{
    store_rate_board_free(env->_pauses);
    env->_pauses = NULL;
    for (size_t i = 0; i < sizeof(env->_channels) / sizeof(env->_channels[0]); i++) {
        json_decref(env->_channels[i].record);
        memset(&env->_channels[i], 0, sizeof(env->_channels[i]));
    }
}

void deliver_slot_ahead(deliver_t *d, const char *member_id, int turn)
{
    ratelimit_policy_t policy;
    store_status_t st;

    /* a broadcast's message takes its slot after everyone else's, just before its call */
    if (d->phase != DL_IDLE || d->_ahead != NULL || d->bulk)
        return;
    deliver_rate_policy(d, &policy);
    /* a pair's limit needs the member's address, known once the member is read: its slot is
     * taken before the call as without one */
    if (policy.sender.interval_us == 0 || policy.pair.interval_us != 0)
        return;
    /* the board listens before a slot given now is used (deliver_start) */
    if (d->env->_pauses == NULL)
        d->env->_pauses = store_rate_board_new(d->env->store);
    d->_ahead = store_rate_take_ahead(d->env->store, d->channel_id, member_id, turn, &policy,
                                      deliver_rate_max_wait_ms(d), &st);
}

int deliver_ahead_take(deliver_t *d, store_rate_cb *cb, store_rate_verdict_t *verdict,
                       int64_t *wait_ms)
{
    store_rate_call_t *ahead = d->_ahead;

    if (d->phase != DL_IDLE || ahead == NULL)
        return 0;
    d->_ahead = NULL;
    d->phase = DL_RATE_TAKE;
    switch (store_rate_ahead_use(ahead, SLOT_AHEAD_LATE_MS, cb, d, verdict, wait_ms)) {
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
