/* Platform rate limits, enforced like the platforms do: per sender (page, phone number id, bot)
 * and per pair (sender + recipient), each a GCRA of a rate and a burst, so that no one-second
 * window lets more than rate + burst sends through. Configured with POST /_sim/limits. */
#include "sim.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define SIM_LIMIT_RULES   64
#define SIM_LIMIT_ID_MAX  128
#define SIM_LIMIT_KEYS    200000 /* kept states; past it, those that no longer matter go */
#define SIM_LIMIT_MAX_RPS 1000000

typedef struct {
    int64_t interval_us; /* 0: no limit */
    int64_t burst;
} sim_gcra_t;

typedef struct {
    sim_platform_t platform;
    char sender[SIM_LIMIT_ID_MAX]; /* "" = every sender of the platform */
    sim_gcra_t per_sender, per_pair;
} sim_limit_rule_t;

/* Shared by every server thread; the mutex guards all of it (held for a few map look-ups). */
static struct {
    pthread_mutex_t lock;
    sim_limit_rule_t rules[SIM_LIMIT_RULES];
    size_t n_rules;
    json_t *tat;    /* "platform\nsender[\nrecipient]" -> theoretical arrival time, us */
    json_t *config; /* the rules as configured, for GET */
    uint64_t passed, refused_sender, refused_pair;
} sim_lim = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int sim_limit_platform(const char *name, sim_platform_t *p)
{
    for (int i = 0; i < SIM_PLATFORM_HOOK; i++) {
        if (name != NULL && strcmp(name, sim_platform_name((sim_platform_t)i)) == 0) {
            *p = (sim_platform_t)i;
            return 0;
        }
    }
    return -1;
}

/* An optional integer field in [min, max]; -1 with a message when it is something else. */
static int sim_limit_int(json_t *o, const char *name, int64_t min, int64_t max, int64_t *v,
                         char *err, size_t errlen)
{
    json_t *j = json_object_get(o, name);
    if (j == NULL)
        return 0;
    if (!json_is_integer(j) || json_integer_value(j) < min || json_integer_value(j) > max) {
        snprintf(err, errlen, "%s must be an integer %lld..%lld", name, (long long)min,
                 (long long)max);
        return -1;
    }
    *v = json_integer_value(j);
    return 0;
}

/* {"platform":P,"sender":S?,"perSecond":N,"burst":B,"perRecipient":{"everyMs":E,"burst":B}} */
static int sim_limit_rule_parse(json_t *o, sim_limit_rule_t *rule, char *err, size_t errlen)
{
    int64_t rps = 0, burst = 1, every_ms = 0, pair_burst = 1;
    json_t *sender = json_object_get(o, "sender"), *pair = json_object_get(o, "perRecipient");

    memset(rule, 0, sizeof(*rule));
    if (!json_is_object(o)) {
        snprintf(err, errlen, "each rule must be an object");
        return -1;
    }
    if (sim_limit_platform(json_string_value(json_object_get(o, "platform")), &rule->platform)) {
        snprintf(err, errlen,
                 "platform must be one of facebook, whatsapp, whatsapp-cloud, "
                 "slack, wechat, teamwork");
        return -1;
    }
    if (sender != NULL && !json_is_null(sender) &&
        (!json_is_string(sender) || json_string_length(sender) >= SIM_LIMIT_ID_MAX)) {
        snprintf(err, errlen, "sender must be a string shorter than %d", SIM_LIMIT_ID_MAX);
        return -1;
    }
    if (json_is_string(sender))
        snprintf(rule->sender, sizeof(rule->sender), "%s", json_string_value(sender));
    if (pair != NULL && !json_is_object(pair)) {
        snprintf(err, errlen, "perRecipient must be an object");
        return -1;
    }
    if (sim_limit_int(o, "perSecond", 0, SIM_LIMIT_MAX_RPS, &rps, err, errlen) ||
        sim_limit_int(o, "burst", 1, 1000000, &burst, err, errlen) ||
        sim_limit_int(pair, "everyMs", 0, 86400000, &every_ms, err, errlen) ||
        sim_limit_int(pair, "burst", 1, 1000000, &pair_burst, err, errlen))
        return -1;
    rule->per_sender.interval_us = rps > 0 ? (1000000 + rps - 1) / rps : 0;
    rule->per_sender.burst = burst;
    rule->per_pair.interval_us = every_ms * 1000;
    rule->per_pair.burst = pair_burst;
    return 0;
}

int sim_limits_configure(json_t *body, char *err, size_t errlen)
{
    sim_limit_rule_t rules[SIM_LIMIT_RULES];
    json_t *list = json_object_get(body, "rules");
    size_t n = json_array_size(list);

    if (!json_is_array(list)) {
        snprintf(err, errlen, "rules must be an array");
        return -1;
    }
    if (n > SIM_LIMIT_RULES) {
        snprintf(err, errlen, "at most %d rules", SIM_LIMIT_RULES);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        char why[160];
        if (sim_limit_rule_parse(json_array_get(list, i), &rules[i], why, sizeof(why)) < 0) {
            snprintf(err, errlen, "rules[%zu]: %s", i, why);
            return -1;
        }
    }
    json_t *config = json_deep_copy(list), *old;
    pthread_mutex_lock(&sim_lim.lock);
    memcpy(sim_lim.rules, rules, n * sizeof(rules[0]));
    sim_lim.n_rules = n;
    old = sim_lim.config;
    sim_lim.config = config;
    if (sim_lim.tat != NULL)
        json_object_clear(sim_lim.tat);
    pthread_mutex_unlock(&sim_lim.lock);
    json_decref(old);
    return 0;
}

json_t *sim_limits_get(void)
{
    pthread_mutex_lock(&sim_lim.lock);
    json_t *o =
        json_pack("{s:o,s:I,s:{s:I,s:I}}", "rules",
                  sim_lim.config ? json_incref(sim_lim.config) : json_array(), "passed",
                  (json_int_t)sim_lim.passed, "refused", "sender",
                  (json_int_t)sim_lim.refused_sender, "pair", (json_int_t)sim_lim.refused_pair);
    pthread_mutex_unlock(&sim_lim.lock);
    return o;
}

void sim_limits_reset(void)
{
    pthread_mutex_lock(&sim_lim.lock);
    if (sim_lim.tat != NULL)
        json_object_clear(sim_lim.tat);
    sim_lim.passed = sim_lim.refused_sender = sim_lim.refused_pair = 0;
    pthread_mutex_unlock(&sim_lim.lock);
}

void sim_limits_free(void)
{
    json_decref(sim_lim.tat);
    json_decref(sim_lim.config);
    sim_lim.tat = sim_lim.config = NULL;
}

/* Called with the lock held. The rule of this sender, else the platform's, else NULL. */
static const sim_limit_rule_t *sim_limit_rule_find(sim_platform_t p, const char *sender)
{
    const sim_limit_rule_t *any = NULL;
    for (size_t i = 0; i < sim_lim.n_rules; i++) {
        const sim_limit_rule_t *r = &sim_lim.rules[i];
        if (r->platform != p)
            continue;
        if (r->sender[0] != '\0' && sender != NULL && strcmp(r->sender, sender) == 0)
            return r;
        if (r->sender[0] == '\0' && any == NULL)
            any = r;
    }
    return any;
}

/* Called with the lock held. The time (us) the limit's state at key lets a send go, and in
 * *next its state after one that goes now. */
static int64_t sim_gcra_slot(const sim_gcra_t *g, const char *key, int64_t now, int64_t *next)
{
    json_t *v = json_object_get(sim_lim.tat, key);
    int64_t tat = v != NULL ? json_integer_value(v) : now;
    if (tat < now)
        tat = now;
    *next = tat + g->interval_us;
    int64_t at = tat - (g->burst - 1) * g->interval_us;
    return at > now ? at : now;
}

/* Drops the states whose time has passed: they say no more than an absent one. */
static void sim_limit_prune(int64_t now)
{
    const char *k;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(sim_lim.tat, tmp, k, v) {
        if (json_integer_value(v) <= now)
            json_object_del(sim_lim.tat, k);
    }
}

sim_limit_hit_t sim_limits_check(sim_platform_t p, const char *sender, const char *recipient,
                                 int64_t now_us, int64_t *retry_ms)
{
    char skey[SIM_LIMIT_ID_MAX + 32], pkey[sizeof(skey) + 2 * SIM_LIMIT_ID_MAX + 8];
    sim_limit_hit_t hit = SIM_LIMIT_NONE;
    int64_t s_next = 0, p_next = 0, at;

    pthread_mutex_lock(&sim_lim.lock);
    const sim_limit_rule_t *rule = sim_limit_rule_find(p, sender);
    if (rule == NULL) {
        pthread_mutex_unlock(&sim_lim.lock);
        return SIM_LIMIT_NONE;
    }
    if (sim_lim.tat == NULL)
        sim_lim.tat = json_object();
    if (json_object_size(sim_lim.tat) > SIM_LIMIT_KEYS)
        sim_limit_prune(now_us);
    snprintf(skey, sizeof(skey), "%s\n%.127s", sim_platform_name(p), sender ? sender : "");
    snprintf(pkey, sizeof(pkey), "%s\n%.255s", skey, recipient ? recipient : "");
    int s_on = rule->per_sender.interval_us > 0;
    int p_on = rule->per_pair.interval_us > 0 && recipient != NULL;
    if (s_on && (at = sim_gcra_slot(&rule->per_sender, skey, now_us, &s_next)) > now_us) {
        hit = SIM_LIMIT_SENDER;
        sim_lim.refused_sender++;
    } else if (p_on && (at = sim_gcra_slot(&rule->per_pair, pkey, now_us, &p_next)) > now_us) {
        hit = SIM_LIMIT_PAIR;
        sim_lim.refused_pair++;
    } else {
        if (s_on)
            json_object_set_new(sim_lim.tat, skey, json_integer(s_next));
        if (p_on)
            json_object_set_new(sim_lim.tat, pkey, json_integer(p_next));
        sim_lim.passed++;
    }
    pthread_mutex_unlock(&sim_lim.lock);
    if (hit != SIM_LIMIT_NONE)
        *retry_ms = (at - now_us + 999) / 1000;
    return hit;
}
