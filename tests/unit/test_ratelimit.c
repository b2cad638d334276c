/* test_ratelimit.c - the rate limits of a channel: contract.md's defaults per type and the
 * "rateLimit" override, with a clear error for every bad value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_util.h"

#include "core/ratelimit.h"
#include "store/keys.h"

#include <string.h>

static void policy_of(const char *channel_json, ratelimit_policy_t *p, int want_rc,
                      const char *want_msg)
{
    json_t *ch = load(channel_json);
    bg_error_t err = {0};
    int rc = ratelimit_for_channel(ch, p, &err);
    assert_int_equal(rc, want_rc);
    if (want_msg != NULL) {
        assert_int_equal(err.code, BG_ERR_MISSING_PARAM);
        assert_non_null(strstr(err.msg, want_msg));
    }
    json_decref(ch);
}

static void test_defaults_table(void **state)
{
    (void)state;
    ratelimit_policy_t p;

    assert_int_equal(ratelimit_defaults("facebook", &p), 0);
    assert_int_equal(p.sender.interval_us, 4000); /* 250/s */
    assert_int_equal(p.sender.burst, 1);
    assert_int_equal(p.pair.interval_us, 0);

    assert_int_equal(ratelimit_defaults("whatsapp-cloud", &p), 0);
    assert_int_equal(p.sender.interval_us, 12500); /* 80/s */
    assert_int_equal(p.pair.interval_us, 6000000);
    assert_int_equal(p.pair.burst, 45);

    assert_int_equal(ratelimit_defaults("whatsapp", &p), 0);
    assert_int_equal(p.sender.interval_us, 20000); /* 50/s */
    assert_int_equal(p.pair.interval_us, 6000000);
    assert_int_equal(p.pair.burst, 45);

    assert_int_equal(ratelimit_defaults("slack", &p), 0);
    assert_int_equal(p.sender.interval_us, 0);
    assert_int_equal(p.pair.interval_us, 1000000);
    assert_int_equal(p.pair.burst, 3);

    assert_int_equal(ratelimit_defaults("wechat", &p), 0);
    assert_true(ratelimit_is_off(&p));
    assert_int_equal(ratelimit_defaults("teamwork", &p), 0);
    assert_true(ratelimit_is_off(&p));

    assert_int_equal(ratelimit_defaults("telegram", &p), -1);
    assert_true(ratelimit_is_off(&p));
    assert_int_equal(ratelimit_defaults(NULL, &p), -1);
}

/* A rate that does not divide a second is rounded to the longer interval: never above it. */
static void test_interval_rounds_up(void **state)
{
    (void)state;
    ratelimit_policy_t p;
    policy_of("{\"type\":\"wechat\",\"rateLimit\":{\"perSecond\":3}}", &p, 0, NULL);
    assert_int_equal(p.sender.interval_us, 333334);
    assert_int_equal(p.sender.burst, 1);
    policy_of("{\"type\":\"wechat\",\"rateLimit\":{\"perSecond\":1000000,\"burst\":7}}", &p, 0,
              NULL);
    assert_int_equal(p.sender.interval_us, 1);
    assert_int_equal(p.sender.burst, 7);
}

static void test_override(void **state)
{
    (void)state;
    ratelimit_policy_t p;

    /* Only what is given changes. */
    policy_of("{\"type\":\"whatsapp-cloud\",\"rateLimit\":{\"perSecond\":50,\"burst\":5}}", &p, 0,
              NULL);
    assert_int_equal(p.sender.interval_us, 20000);
    assert_int_equal(p.sender.burst, 5);
    assert_int_equal(p.pair.interval_us, 6000000);
    assert_int_equal(p.pair.burst, 45);

    policy_of("{\"type\":\"whatsapp-cloud\",\"rateLimit\":{\"perRecipient\":{\"burst\":2}}}", &p, 0,
              NULL);
    assert_int_equal(p.sender.interval_us, 12500);
    assert_int_equal(p.pair.interval_us, 6000000);
    assert_int_equal(p.pair.burst, 2);

    /* 0 turns a limit off. */
    policy_of("{\"type\":\"whatsapp-cloud\",\"rateLimit\":{\"perSecond\":0,"
              "\"perRecipient\":{\"everyMs\":0}}}",
              &p, 0, NULL);
    assert_true(ratelimit_is_off(&p));
    assert_int_equal(p.sender.burst, 0);

    /* A limit on a type without one; burst defaults to 1. */
    policy_of("{\"type\":\"teamwork\",\"rateLimit\":{\"perRecipient\":{\"everyMs\":250}}}", &p, 0,
              NULL);
    assert_int_equal(p.pair.interval_us, 250000);
    assert_int_equal(p.pair.burst, 1);
    assert_int_equal(p.sender.interval_us, 0);

    /* null and absent: the defaults. */
    policy_of("{\"type\":\"facebook\",\"rateLimit\":null}", &p, 0, NULL);
    assert_int_equal(p.sender.interval_us, 4000);
    policy_of("{\"type\":\"slack\",\"rateLimit\":{\"perRecipient\":null}}", &p, 0, NULL);
    assert_int_equal(p.pair.interval_us, 1000000);
}

static void test_invalid(void **state)
{
    (void)state;
    static const struct {
        const char *json, *msg;
    } cases[] = {
        {"{\"type\":\"facebook\",\"rateLimit\":5}", "rateLimit must be an object"},
        {"{\"type\":\"facebook\",\"rateLimit\":[]}", "rateLimit must be an object"},
        {"{\"type\":\"facebook\",\"rateLimit\":{\"perSecond\":-1}}",
         "rateLimit.perSecond must be an integer 0..1000000"},
        {"{\"type\":\"facebook\",\"rateLimit\":{\"perSecond\":1.5}}", "rateLimit.perSecond"},
        {"{\"type\":\"facebook\",\"rateLimit\":{\"perSecond\":\"80\"}}", "rateLimit.perSecond"},
        {"{\"type\":\"facebook\",\"rateLimit\":{\"perSecond\":1000001}}", "rateLimit.perSecond"},
        {"{\"type\":\"facebook\",\"rateLimit\":{\"burst\":0}}",
         "rateLimit.burst must be an integer 1..100000"},
        {"{\"type\":\"facebook\",\"rateLimit\":{\"persecond\":10}}",
         "rateLimit.persecond: unknown field"},
        {"{\"type\":\"facebook\",\"rateLimit\":{\"perRecipient\":true}}",
         "rateLimit.perRecipient must be an object"},
        {"{\"type\":\"facebook\",\"rateLimit\":{\"perRecipient\":{\"everyMs\":-5}}}",
         "rateLimit.perRecipient.everyMs must be an integer 0..86400000"},
        {"{\"type\":\"facebook\",\"rateLimit\":{\"perRecipient\":{\"burst\":100001}}}",
         "rateLimit.perRecipient.burst must be an integer 1..100000"},
        {"{\"type\":\"facebook\",\"rateLimit\":{\"perRecipient\":{\"every\":5}}}",
         "rateLimit.perRecipient.every: unknown field"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ratelimit_policy_t p;
        policy_of(cases[i].json, &p, -1, cases[i].msg);
    }
}

/* On error the policy keeps what it had: half an override is never applied. */
static void test_invalid_leaves_policy(void **state)
{
    (void)state;
    ratelimit_policy_t p;
    bg_error_t err = {0};
    json_t *rl = load("{\"perSecond\":10,\"perRecipient\":{\"everyMs\":\"x\"}}");
    ratelimit_defaults("whatsapp-cloud", &p);
    assert_int_equal(ratelimit_apply(&p, rl, &err), -1);
    assert_int_equal(p.sender.interval_us, 12500);
    assert_int_equal(p.pair.interval_us, 6000000);
    json_decref(rl);
}

/* The limiter's keys live in the channel's hash tag, so one script may touch them all. */
static void test_keys(void **state)
{
    (void)state;
    char buf[STORE_KEY_MAX];
    assert_int_equal(store_key_rate(buf, sizeof(buf), "botgate:", "C1", NULL), 24);
    assert_string_equal(buf, "botgate:rate:{C1}:sender");
    store_key_rate(buf, sizeof(buf), "botgate:", "C1", "M1");
    assert_string_equal(buf, "botgate:rate:{C1}:pairm:M1");
    store_key_rate_pause(buf, sizeof(buf), "p:", "C1", NULL);
    assert_string_equal(buf, "p:ratepause:{C1}:sender");
    store_key_rate_pause(buf, sizeof(buf), "p:", "C1", "u1");
    assert_string_equal(buf, "p:ratepause:{C1}:pairm:u1");
    assert_int_equal(store_key_rate(buf, 10, "botgate:", "C1", NULL), -1);
    assert_int_equal(store_key_rate_pause(buf, sizeof(buf), "botgate:", NULL, "u1"), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_table),
        cmocka_unit_test(test_interval_rounds_up),
        cmocka_unit_test(test_override),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_invalid_leaves_policy),
        cmocka_unit_test(test_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
