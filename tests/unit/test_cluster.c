/* test_cluster.c - the slot of a key is Redis Cluster's (values from CLUSTER KEYSLOT of
 * redis-server 7.0), and every key of one channel lands in one slot, so that the scripts
 * that touch several of them run on one master. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "store/cluster.h"
#include "store/keys.h"

#include <string.h>

static unsigned slot(const char *key)
{
    return cluster_keyslot(key, strlen(key));
}

static void test_keyslot_matches_redis(void **state)
{
    static const struct {
        const char *key;
        unsigned slot;
    } cases[] = {
        {"foo", 12182},
        {"bar", 5061},
        {"123456789", 12739},
        {"{user1000}.following", 3443},
        {"foo{}{bar}", 8363},    /* an empty tag: the whole key */
        {"foo{{bar}}zap", 4015}, /* the tag is "{bar" */
        {"foo{bar}{zap}", 5061}, /* the first tag only */
        {"{", 4092},
        {"a{b", 13340},
        {"botgate:channel:{fb1}", 8945},
        {"botgate:token:2ba2b8393a124f84b9aa4741a26fa2e203b4de97e45f93008e2a24a6074949be", 12784},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (slot(cases[i].key) != cases[i].slot)
            fail_msg("%s: slot %u, Redis says %u", cases[i].key, slot(cases[i].key), cases[i].slot);
    }
}

static void test_keyslot_uses_length(void **state)
{
    (void)state;
    /* "foo" inside a longer buffer: only len bytes count */
    assert_int_equal(cluster_keyslot("foobar", 3), 12182);
    assert_int_equal(cluster_keyslot("{bar}x", 5), 5061);
}

static void test_channel_keys_share_a_slot(void **state)
{
    char key[STORE_KEY_MAX];
    const char *p = "botgate:", *ch = "wx-channel-42";
    unsigned want;

    (void)state;
    assert_true(store_key_channel(key, sizeof(key), p, ch) > 0);
    want = slot(key);
    assert_int_equal(want, slot(ch));
    assert_true(store_key_member(key, sizeof(key), p, ch, "m1") > 0);
    assert_int_equal(slot(key), want);
    assert_true(store_key_member_base(key, sizeof(key), p, ch) > 0);
    assert_int_equal(slot(key), want);
    assert_true(store_key_recipient(key, sizeof(key), p, ch, "psid-9") > 0);
    assert_int_equal(slot(key), want);
    assert_true(store_key_cred_lock(key, sizeof(key), p, ch) > 0);
    assert_int_equal(slot(key), want);
    assert_true(store_key_contact(key, sizeof(key), p, ch, "m1") > 0);
    assert_int_equal(slot(key), want);
    assert_true(store_key_media(key, sizeof(key), p, ch, "abc") > 0);
    assert_int_equal(slot(key), want);
    assert_true(store_key_rate(key, sizeof(key), p, ch, NULL) > 0);
    assert_int_equal(slot(key), want);
    assert_true(store_key_rate(key, sizeof(key), p, ch, "m1") > 0);
    assert_int_equal(slot(key), want);
    assert_true(store_key_rate_pause(key, sizeof(key), p, ch, NULL) > 0);
    assert_int_equal(slot(key), want);
    assert_true(store_key_rate_pause(key, sizeof(key), p, ch, "m1") > 0);
    assert_int_equal(slot(key), want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keyslot_matches_redis),
        cmocka_unit_test(test_keyslot_uses_length),
        cmocka_unit_test(test_channel_keys_share_a_slot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
