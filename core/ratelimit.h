/* ratelimit.h - the platform rate limits of a channel (contract.md section 8): the defaults of
 * its type and the override of its record's "rateLimit" object. Pure: no clock, no I/O. */
#ifndef BOTGATE_CORE_RATELIMIT_H
#define BOTGATE_CORE_RATELIMIT_H

#include "error.h"

#include <jansson.h>
#include <stdint.h>

#define RATELIMIT_MAX_PER_SECOND 1000000 /* 1 call per microsecond: finer is not kept */
#define RATELIMIT_MAX_BURST      100000
#define RATELIMIT_MAX_EVERY_MS   86400000 /* one day */

/* One limit: at most burst calls at once, then one every interval_us. interval_us 0: none. */
typedef struct ratelimit_rule {
    int64_t interval_us;
    int burst; /* >= 1 when interval_us > 0 */
} ratelimit_rule_t;

/* What a channel sends from (its page, number or bot) and to (one recipient: the pair). */
typedef struct ratelimit_policy {
    ratelimit_rule_t sender;
    ratelimit_rule_t pair;
} ratelimit_policy_t;

/* The defaults of a channel type: facebook 250/s; whatsapp-cloud 80/s and the pair 1 per 6 s
 * burst 45; whatsapp 50/s and the same pair; slack the pair 1/s burst 3; wechat and teamwork
 * none. A per-sender limit comes with burst 1 unless overridden. -1 for an unknown type (the
 * policy is then "no limit"). */
int ratelimit_defaults(const char *type, ratelimit_policy_t *out);

/* Applies a "rateLimit" object to *policy: {"perSecond":N,"burst":B,"perRecipient":{"everyMs":E,
 * "burst":B}}, every field optional (an absent field keeps the default), 0 in perSecond or
 * everyMs = no limit, null = no override. On a bad value: -1, BG_ERR_MISSING_PARAM and a message
 * naming the field; *policy is then unchanged. */
int ratelimit_apply(ratelimit_policy_t *policy, const json_t *rate_limit, bg_error_t *err);

/* The policy of a channel record: the defaults of its "type" with its "rateLimit" applied. */
int ratelimit_for_channel(const json_t *channel, ratelimit_policy_t *out, bg_error_t *err);

/* 1 when neither limit is set. */
int ratelimit_is_off(const ratelimit_policy_t *policy);

#endif
