/* test_keys.c - every Redis key is exactly contract.md's, hash tags included, and never cut. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "store/cluster.h"
#include "store/keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HASH "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* One key builder with its arguments bound, so every builder is tested the same way. */
typedef struct key_case {
    const char *name;
    const char *channel; /* the channel in the key's hash tag; NULL when the key has none */
    const char *suffix;  /* the key after the prefix */
    int (*build)(const struct key_case *c, char *buf, size_t size, const char *prefix);
} key_case_t;

static int k_token(const key_case_t *c, char *buf, size_t size, const char *prefix)
{
    (void)c;
    return store_key_token(buf, size, prefix, HASH);
}

static int k_channel(const key_case_t *c, char *buf, size_t size, const char *prefix)
{
    return store_key_channel(buf, size, prefix, c->channel);
}

static int k_member(const key_case_t *c, char *buf, size_t size, const char *prefix)
{
    return store_key_member(buf, size, prefix, c->channel, "M1");
}

static int k_member_base(const key_case_t *c, char *buf, size_t size, const char *prefix)
{
    return store_key_member_base(buf, size, prefix, c->channel);
}

static int k_recipient(const key_case_t *c, char *buf, size_t size, const char *prefix)
{
    return store_key_recipient(buf, size, prefix, c->channel, "85291234567");
}

static int k_tree(const key_case_t *c, char *buf, size_t size, const char *prefix)
{
    (void)c;
    return store_key_tree(buf, size, prefix, "T1");
}

static int k_contact(const key_case_t *c, char *buf, size_t size, const char *prefix)
{
    return store_key_contact(buf, size, prefix, c->channel, "M1");
}

static int k_cred_lock(const key_case_t *c, char *buf, size_t size, const char *prefix)
{
    return store_key_cred_lock(buf, size, prefix, c->channel);
}

static int k_media(const key_case_t *c, char *buf, size_t size, const char *prefix)
{
    return store_key_media(buf, size, prefix, c->channel, HASH);
}

static int k_turns(const key_case_t *c, char *buf, size_t size, const char *prefix)
{
    return store_key_turns(buf, size, prefix, c->channel, "M1");
}

static int k_leases(const key_case_t *c, char *buf, size_t size, const char *prefix)
{
    return store_key_leases(buf, size, prefix, c->channel, "M1");
}

/* An Idempotency-Key's record: the case's "channel" is the app. */
static int k_idem(const key_case_t *c, char *buf, size_t size, const char *prefix)
{
    return store_key_idem(buf, size, prefix, c->channel, "sendResponses", HASH);
}

static const key_case_t cases[] = {
    /* contract.md section 3 */
    {"token", NULL, "token:" HASH, k_token},
    {"channel", "C1", "channel:{C1}", k_channel},
    {"member", "C1", "member:{C1}:M1", k_member},
    {"recipient", "C1", "recipient:{C1}:85291234567", k_recipient},
    {"tree", NULL, "tree:T1", k_tree},
    /* botgate's own keys, in the channel's slot */
    {"member_base", "C1", "member:{C1}:", k_member_base},
    {"contact", "C1", "wacontactm:{C1}:M1", k_contact},
    {"cred_lock", "C1", "lock:{C1}:credential", k_cred_lock},
    {"media", "C1", "media:{C1}:" HASH, k_media},
    {"turnq", "C1", "turnq:{C1}:M1", k_turns},
    {"turnlease", "C1", "turnlease:{C1}:M1", k_leases},
    /* its tag is its whole scope (test_idem_spreads) */
    {"idem", "C1", "idem:{2:C1:sendResponses:" HASH "}", k_idem},
};

#define NCASES (sizeof(cases) / sizeof(cases[0]))

/* The hash tag Redis Cluster uses: what lies between the first '{' and the next '}', when
 * that is not empty; else the whole key. */
static void hash_tag(const char *key, char *out, size_t size)
{
    const char *open = strchr(key, '{'), *close = open ? strchr(open + 1, '}') : NULL;

    if (open == NULL || close == NULL || close == open + 1)
        snprintf(out, size, "%s", key);
    else
        snprintf(out, size, "%.*s", (int)(close - open - 1), open + 1);
}

static void test_exact_keys(void **state)
{
    static const char *const prefixes[] = {"botgate:", "tenant7:", "", "x"};
    char buf[STORE_KEY_MAX], want[STORE_KEY_MAX];

    (void)state;
    for (size_t p = 0; p < sizeof(prefixes) / sizeof(prefixes[0]); p++) {
        for (size_t i = 0; i < NCASES; i++) {
            int n;

            snprintf(want, sizeof(want), "%s%s", prefixes[p], cases[i].suffix);
            memset(buf, 'Z', sizeof(buf));
            n = cases[i].build(&cases[i], buf, sizeof(buf), prefixes[p]);
            if (n < 0 || strcmp(buf, want) != 0)
                fail_msg("%s with prefix \"%s\": got %d \"%s\", want \"%s\"", cases[i].name,
                         prefixes[p], n, n < 0 ? "" : buf, want);
            assert_int_equal(n, strlen(want));
        }
    }
}

static void test_hash_tags(void **state)
{
    static const char *const channels[] = {"C1", "65f0c1d2e3a4b5c6d7e8f901", "ch:with:colons",
                                           "\xc3\xa9t\xc3\xa9"};
    char buf[STORE_KEY_MAX], tag[STORE_KEY_MAX];

    (void)state;
    for (size_t c = 0; c < sizeof(channels) / sizeof(channels[0]); c++) {
        for (size_t i = 0; i < NCASES; i++) {
            key_case_t kc = cases[i];

            if (kc.build == k_idem)
                continue; /* its tag is not a channel's: test_idem_spreads */
            if (kc.channel == NULL) {
                /* no hash tag: these keys are not bound to a channel's slot */
                assert_true(kc.build(&kc, buf, sizeof(buf), "botgate:") > 0);
                assert_null(strchr(buf, '{'));
                assert_null(strchr(buf, '}'));
                continue;
            }
            kc.channel = channels[c];
            assert_true(kc.build(&kc, buf, sizeof(buf), "botgate:") > 0);
            hash_tag(buf, tag, sizeof(tag));
            if (strcmp(tag, channels[c]) != 0)
                fail_msg("%s: key %s has hash tag \"%s\", want \"%s\"", kc.name, buf, tag,
                         channels[c]);
            /* the tag is the literal "{channelId}" right after the key's type */
            snprintf(tag, sizeof(tag), ":{%s}", channels[c]);
            assert_non_null(strstr(buf, tag));
        }
    }
}

/* An app's Idempotency-Key records spread over the cluster's slots: the tag is the app, the
 * route and the key, and a brace inside the key still leaves one slot per record. */
static void test_idem_spreads(void **state)
{
    static const char *const odd[] = {"a}b", "{x}", "}", "{", "k{}", "retry-7"};
    char buf[STORE_KEY_MAX], tag[STORE_KEY_MAX], idem_key[32];
    static unsigned char used[16384];
    unsigned slots = 0;

    (void)state;
    assert_true(store_key_idem(buf, sizeof(buf), "botgate:", "A1", "sendResponses", "k-1") > 0);
    hash_tag(buf, tag, sizeof(tag));
    assert_string_equal(tag, "2:A1:sendResponses:k-1");
    for (int i = 0; i < 1000; i++) {
        unsigned slot;

        snprintf(idem_key, sizeof(idem_key), "order-%d", i);
        assert_true(store_key_idem(buf, sizeof(buf), "botgate:", "A1", "sendResponses", idem_key) >
                    0);
        hash_tag(buf, tag, sizeof(tag));
        slot = cluster_keyslot(buf, strlen(buf));
        assert_int_equal(slot, cluster_keyslot(tag, strlen(tag)));
        slots += !used[slot];
        used[slot] = 1;
    }
    /* 1000 keys on one slot each, nearly all different (one app on one slot: 1) */
    if (slots < 950)
        fail_msg("1000 keys of one app on %u slots", slots);
    /* a key's own braces: the tag still begins with the app and route */
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        assert_true(store_key_idem(buf, sizeof(buf), "botgate:", "A1", "sendResponses", odd[i]) >
                    0);
        hash_tag(buf, tag, sizeof(tag));
        assert_memory_equal(tag, "2:A1:sendResponses:", 19);
    }
}

/* Issue 27: app "A" with key "B:sendResponses:Z" and app "A:sendResponses:B" with key "Z" once
 * shared one record (the second request got 124). Every split of one text into app and key,
 * ':' and braces included, names its own record. */
static void test_idem_scopes_never_collide(void **state)
{
    static const char *const texts[] = {"A:sendResponses:B:sendResponses:Z", "1:A:2:B:3", "}{:}:{",
                                        "a:b"};
    char a[STORE_KEY_MAX], b[STORE_KEY_MAX], app[64];

    (void)state;
    assert_true(
        store_key_idem(a, sizeof(a), "botgate:", "A", "sendResponses", "B:sendResponses:Z") > 0);
    assert_true(
        store_key_idem(b, sizeof(b), "botgate:", "A:sendResponses:B", "sendResponses", "Z") > 0);
    assert_string_not_equal(a, b);
    assert_string_equal(a, "botgate:idem:{1:A:sendResponses:B:sendResponses:Z}");
    assert_string_equal(b, "botgate:idem:{17:A:sendResponses:B:sendResponses:Z}");
    /* each cut point of each text, under both routes: all names differ */
    for (size_t t = 0; t < sizeof(texts) / sizeof(texts[0]); t++) {
        size_t n = strlen(texts[t]);
        for (size_t i = 0; i < n; i++) {
            for (size_t j = i + 1; j < n; j++) {
                for (int r = 0; r < 4; r++) {
                    const char *ri = r & 1 ? "sendResponses" : "redirectMemberToNode";
                    const char *rj = r & 2 ? "sendResponses" : "redirectMemberToNode";
                    snprintf(app, sizeof(app), "%.*s", (int)i, texts[t]);
                    assert_true(store_key_idem(a, sizeof(a), "p:", app, ri, texts[t] + i) > 0);
                    snprintf(app, sizeof(app), "%.*s", (int)j, texts[t]);
                    assert_true(store_key_idem(b, sizeof(b), "p:", app, rj, texts[t] + j) > 0);
                    assert_string_not_equal(a, b);
                }
            }
        }
    }
    /* a route with ':' could be read two ways: refused */
    assert_int_equal(store_key_idem(a, sizeof(a), "p:", "A", "send:Responses", "Z"), -1);
    assert_int_equal(store_key_idem(a, sizeof(a), "p:", NULL, "sendResponses", "Z"), -1);
}

static void test_does_not_fit(void **state)
{
    char buf[STORE_KEY_MAX], want[STORE_KEY_MAX];
    char *big;

    (void)state;
    for (size_t i = 0; i < NCASES; i++) {
        size_t len;

        snprintf(want, sizeof(want), "botgate:%s", cases[i].suffix);
        len = strlen(want);
        /* exactly enough room: the key and its terminator */
        assert_int_equal(cases[i].build(&cases[i], buf, len + 1, "botgate:"), len);
        assert_string_equal(buf, want);
        /* one byte short, much too short, no room at all: -1 */
        assert_int_equal(cases[i].build(&cases[i], buf, len, "botgate:"), -1);
        assert_int_equal(cases[i].build(&cases[i], buf, 8, "botgate:"), -1);
        assert_int_equal(cases[i].build(&cases[i], buf, 1, "botgate:"), -1);
        assert_int_equal(cases[i].build(&cases[i], buf, 0, "botgate:"), -1);
    }

    /* an id longer than a key buffer */
    big = malloc(STORE_KEY_MAX + 1);
    assert_non_null(big);
    memset(big, 'c', STORE_KEY_MAX);
    big[STORE_KEY_MAX] = '\0';
    assert_int_equal(store_key_channel(buf, sizeof(buf), "botgate:", big), -1);
    assert_int_equal(store_key_member(buf, sizeof(buf), "botgate:", "C1", big), -1);
    assert_int_equal(store_key_member(buf, sizeof(buf), "botgate:", big, "M1"), -1);
    assert_int_equal(store_key_recipient(buf, sizeof(buf), "botgate:", "C1", big), -1);
    assert_int_equal(store_key_tree(buf, sizeof(buf), "botgate:", big), -1);
    assert_int_equal(store_key_token(buf, sizeof(buf), big, HASH), -1);
    /* the largest ids a request may carry (256 bytes each) fit under the longest prefix */
    {
        char prefix[STORE_PREFIX_MAX];
        memset(prefix, 'p', sizeof(prefix) - 1);
        prefix[sizeof(prefix) - 1] = '\0';
        big[256] = '\0';
        assert_true(store_key_member(buf, sizeof(buf), prefix, big, big) > 0);
        assert_true(store_key_recipient(buf, sizeof(buf), prefix, big, big) > 0);
        assert_true(store_key_contact(buf, sizeof(buf), prefix, big, big) > 0);
        assert_true(store_key_tree(buf, sizeof(buf), prefix, big) > 0);
    }
    free(big);
}

/* A missing id never yields a key (a shorter key would name another record). */
static void test_missing_part(void **state)
{
    char buf[STORE_KEY_MAX];

    (void)state;
    assert_int_equal(store_key_member(buf, sizeof(buf), "botgate:", "C1", NULL), -1);
    assert_int_equal(store_key_member(buf, sizeof(buf), "botgate:", NULL, "M1"), -1);
    assert_int_equal(store_key_token(buf, sizeof(buf), NULL, HASH), -1);
    assert_int_equal(store_key_tree(buf, sizeof(buf), "botgate:", NULL), -1);
}

/* The patterns botgatectl lists with, and the ids read back from the keys they match. */
static void test_patterns_and_ids(void **state)
{
    char buf[STORE_KEY_MAX], ch[64], id[80];

    (void)state;

    assert_int_equal(store_key_pattern(buf, sizeof(buf), "botgate:", STORE_REC_TOKEN, NULL), 15);
    assert_string_equal(buf, "botgate:token:*");
    store_key_pattern(buf, sizeof(buf), "botgate:", STORE_REC_CHANNEL, NULL);
    assert_string_equal(buf, "botgate:channel:{*}");
    store_key_pattern(buf, sizeof(buf), "botgate:", STORE_REC_MEMBER, NULL);
    assert_string_equal(buf, "botgate:member:{*}:*");
    store_key_pattern(buf, sizeof(buf), "a*b?[c]\\:", STORE_REC_MEMBER, "C*1");
    assert_string_equal(buf, "a\\*b\\?\\[c\\]\\\\:member:{C\\*1}:*");
    store_key_pattern(buf, sizeof(buf), "botgate:", STORE_REC_TREE, NULL);
    assert_string_equal(buf, "botgate:tree:*");
    assert_int_equal(store_key_pattern(buf, 10, "botgate:", STORE_REC_TREE, NULL), -1);

    assert_int_equal(store_key_ids("botgate:member:{C1}:M:1", "botgate:", STORE_REC_MEMBER, ch,
                                   sizeof(ch), id, sizeof(id)),
                     0);
    assert_string_equal(ch, "C1");
    assert_string_equal(id, "M:1");
    assert_int_equal(store_key_ids("botgate:channel:{C1}", "botgate:", STORE_REC_CHANNEL, NULL, 0,
                                   id, sizeof(id)),
                     0);
    assert_string_equal(id, "C1");
    assert_int_equal(
        store_key_ids("botgate:token:" HASH, "botgate:", STORE_REC_TOKEN, NULL, 0, id, sizeof(id)),
        0);
    assert_string_equal(id, HASH);
    assert_int_equal(
        store_key_ids("botgate:tree:T1", "botgate:", STORE_REC_TREE, NULL, 0, id, sizeof(id)), 0);
    assert_string_equal(id, "T1");
    /* not keys of that kind */
    assert_int_equal(
        store_key_ids("botgate:channel:{C1}x", "botgate:", STORE_REC_CHANNEL, NULL, 0, id, 80), -1);
    assert_int_equal(
        store_key_ids("other:tree:T1", "botgate:", STORE_REC_TREE, NULL, 0, id, sizeof(id)), -1);
    assert_int_equal(store_key_ids("botgate:member:{C1}M", "botgate:", STORE_REC_MEMBER, ch,
                                   sizeof(ch), id, sizeof(id)),
                     -1);
    assert_int_equal(
        store_key_ids("botgate:tree:", "botgate:", STORE_REC_TREE, NULL, 0, id, sizeof(id)), -1);

    /* a tree import shares the tree's slot and never looks like a tree */
    assert_int_equal(store_key_tree_import(buf, sizeof(buf), "botgate:", "T1", "00ff"),
                     (int)strlen("{botgate:tree:T1}:import:00ff"));
    assert_string_equal(buf, "{botgate:tree:T1}:import:00ff");
    assert_int_equal(cluster_keyslot(buf, strlen(buf)),
                     cluster_keyslot("botgate:tree:T1", strlen("botgate:tree:T1")));
    assert_int_equal(store_key_ids(buf, "botgate:", STORE_REC_TREE, NULL, 0, id, sizeof(id)), -1);
}

/* With a cluster, a member's turn keys are in its outbox shard's slot, with the shard's stream,
 * records and order key, so that the outbox's scripts name them together; the channel goes
 * behind its length (a ':' in it cannot make two members' keys one). */
static void test_outbox_turn_keys(void **state)
{
    char turns[STORE_KEY_MAX], leases[STORE_KEY_MAX], stream[STORE_KEY_MAX], order[STORE_KEY_MAX],
        other[STORE_KEY_MAX];
    int n;

    (void)state;
    n = store_key_outbox_turns(turns, sizeof(turns), "botgate:", 7, "C1", "M1");
    assert_string_equal(turns, "botgate:outbox:{7}:turnq:2:C1:M1");
    assert_int_equal(n, strlen(turns));
    n = store_key_outbox_leases(leases, sizeof(leases), "botgate:", 7, "C1", "M1");
    assert_string_equal(leases, "botgate:outbox:{7}:turnlease:2:C1:M1");
    assert_int_equal(n, strlen(leases));
    store_key_outbox(stream, sizeof(stream), "botgate:", 7);
    store_key_outbox_order(order, sizeof(order), "botgate:", 7, "C1", "M1");
    assert_int_equal(cluster_keyslot(turns, strlen(turns)),
                     cluster_keyslot(stream, strlen(stream)));
    assert_int_equal(cluster_keyslot(leases, strlen(leases)),
                     cluster_keyslot(order, strlen(order)));
    /* channel "a:1" member "b" and channel "a" member "1:b" */
    store_key_outbox_turns(turns, sizeof(turns), "botgate:", 0, "a:1", "b");
    store_key_outbox_turns(other, sizeof(other), "botgate:", 0, "a", "1:b");
    assert_string_not_equal(turns, other);
    /* missing parts, no room */
    assert_int_equal(store_key_outbox_turns(turns, sizeof(turns), "botgate:", 0, NULL, "M1"), -1);
    assert_int_equal(store_key_outbox_leases(leases, sizeof(leases), "botgate:", 0, "C1", NULL),
                     -1);
    assert_int_equal(store_key_outbox_turns(turns, 20, "botgate:", 7, "C1", "M1"), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_keys),       cmocka_unit_test(test_hash_tags),
        cmocka_unit_test(test_idem_spreads),     cmocka_unit_test(test_idem_scopes_never_collide),
        cmocka_unit_test(test_does_not_fit),     cmocka_unit_test(test_missing_part),
        cmocka_unit_test(test_patterns_and_ids), cmocka_unit_test(test_outbox_turn_keys),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
