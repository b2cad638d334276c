/* ratelimit.c - the rate limits of a channel: type defaults and the record's override. */
#include "ratelimit.h"

#include <string.h>

/* contract.md section 8. Per sender: calls per second; per recipient: one every pair_ms. */
static const struct {
    const char *type;
    int per_second;
    int pair_every_ms, pair_burst;
} ratelimit_table[] = {
    {"facebook", 250, 0, 0},    {"whatsapp-cloud", 80, 6000, 45},
    {"whatsapp", 50, 6000, 45}, {"slack", 0, 1000, 3},
    {"wechat", 0, 0, 0},        {"teamwork", 0, 0, 0},
};

/* The interval that never lets more than per_second calls through in a second: rounded up. */
static int64_t ratelimit_interval_us(int64_t per_second)
{
    return per_second > 0 ? (1000000 + per_second - 1) / per_second : 0;
}

int ratelimit_defaults(const char *type, ratelimit_policy_t *out)
{
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; type != NULL && i < sizeof(ratelimit_table) / sizeof(ratelimit_table[0]);
         i++) {
        if (strcmp(type, ratelimit_table[i].type) != 0)
            continue;
        out->sender.interval_us = ratelimit_interval_us(ratelimit_table[i].per_second);
        out->sender.burst = out->sender.interval_us > 0 ? 1 : 0;
        out->pair.interval_us = (int64_t)ratelimit_table[i].pair_every_ms * 1000;
        out->pair.burst = ratelimit_table[i].pair_burst;
        return 0;
    }
    return -1;
}

/* An optional integer field of o in [min, max]: 0 when absent (*v untouched), 1 when read. */
static int ratelimit_int(const json_t *o, const char *name, const char *path, int64_t min,
                         int64_t max, int64_t *v, bg_error_t *err)
{
    const json_t *j = json_object_get(o, name);
    if (j == NULL)
        return 0;
    if (!json_is_integer(j) || json_integer_value(j) < min || json_integer_value(j) > max)
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "%s%s must be an integer %lld..%lld", path,
                            name, (long long)min, (long long)max);
    *v = json_integer_value(j);
    return 1;
}

/* Every key of o is one of names: a misspelt field would otherwise be silently ignored. */
static int ratelimit_known_keys(const json_t *o, const char *path, const char *const *names,
                                size_t n, bg_error_t *err)
{
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        size_t i = 0;
        while (i < n && strcmp(key, names[i]) != 0)
            i++;
        if (i == n)
            return bg_error_set(err, BG_ERR_MISSING_PARAM, "%s%.64s: unknown field", path, key);
    }
    return 0;
}

/* Sets rule from a rate (per_second) or a period (every_us) and a burst, as given. */
static int ratelimit_rule_set(ratelimit_rule_t *rule, int has_rate, int64_t interval_us,
                              int has_burst, int64_t burst)
{
    if (has_rate)
        rule->interval_us = interval_us;
    if (has_burst)
        rule->burst = (int)burst;
    if (rule->interval_us == 0)
        rule->burst = 0;
    else if (rule->burst < 1)
        rule->burst = 1;
    return 0;
}

int ratelimit_apply(ratelimit_policy_t *policy, const json_t *rate_limit, bg_error_t *err)
{
    static const char *const top[] = {"perSecond", "burst", "perRecipient"};
    static const char *const pair[] = {"everyMs", "burst"};
    ratelimit_policy_t p = *policy;
    int64_t per_second = 0, burst = 0, every_ms = 0, pair_burst = 0;
    int r1, r2, r3, r4;

    if (rate_limit == NULL || json_is_null(rate_limit))
        return 0;
    if (!json_is_object(rate_limit))
        return bg_error_set(err, BG_ERR_MISSING_PARAM, "rateLimit must be an object");
    if (ratelimit_known_keys(rate_limit, "rateLimit.", top, 3, err) < 0)
        return -1;
    if ((r1 = ratelimit_int(rate_limit, "perSecond", "rateLimit.", 0, RATELIMIT_MAX_PER_SECOND,
                            &per_second, err)) < 0 ||
        (r2 = ratelimit_int(rate_limit, "burst", "rateLimit.", 1, RATELIMIT_MAX_BURST, &burst,
                            err)) < 0)
        return -1;
    ratelimit_rule_set(&p.sender, r1, ratelimit_interval_us(per_second), r2, burst);

    const json_t *pr = json_object_get(rate_limit, "perRecipient");
    if (pr != NULL && !json_is_null(pr)) {
        if (!json_is_object(pr))
            return bg_error_set(err, BG_ERR_MISSING_PARAM,
                                "rateLimit.perRecipient must be an object");
        if (ratelimit_known_keys(pr, "rateLimit.perRecipient.", pair, 2, err) < 0)
            return -1;
        if ((r3 = ratelimit_int(pr, "everyMs", "rateLimit.perRecipient.", 0, RATELIMIT_MAX_EVERY_MS,
                                &every_ms, err)) < 0 ||
            (r4 = ratelimit_int(pr, "burst", "rateLimit.perRecipient.", 1, RATELIMIT_MAX_BURST,
                                &pair_burst, err)) < 0)
            return -1;
        ratelimit_rule_set(&p.pair, r3, every_ms * 1000, r4, pair_burst);
    }
    *policy = p;
    return 0;
}

int ratelimit_for_channel(const json_t *channel, ratelimit_policy_t *out, bg_error_t *err)
{
    ratelimit_defaults(json_string_value(json_object_get(channel, "type")), out);
    return ratelimit_apply(out, json_object_get(channel, "rateLimit"), err);
}

int ratelimit_is_off(const ratelimit_policy_t *policy)
{
    return policy->sender.interval_us == 0 && policy->pair.interval_us == 0;
}
