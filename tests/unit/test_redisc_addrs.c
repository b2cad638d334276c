/* test_redisc_addrs.c - a Redis URL's host name with several addresses: each is tried in turn
 * (a Redis bound to 127.0.0.1 behind a name that resolves to ::1 first), against a real
 * redis-server; the log names every address that failed and why. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "redis_test.h"
#include "store/rediscfg.h"

#include <arpa/inet.h>
#include <netdb.h>

typedef struct told {
    int ups, downs;
    char last[512];
} told_t;

static void on_state(void *arg, int up, const char *why)
{
    told_t *t = arg;

    if (up)
        t->ups++;
    else
        t->downs++;
    snprintf(t->last, sizeof(t->last), "%s", why);
}

/* A client of the addresses given, in that order, on port; its messages into t. */
static redisc_t *client(const char *const *addrs, int n, int port, told_t *t)
{
    redisc_config_t cfg;

    memset(&cfg, 0, sizeof(cfg));
    for (int i = 0; i < n; i++)
        snprintf(cfg.addrs[i], sizeof(cfg.addrs[i]), "%s", addrs[i]);
    cfg.n_addrs = n;
    snprintf(cfg.host, sizeof(cfg.host), "%s", addrs[0]);
    cfg.port = port;
    cfg.connect_timeout_ms = 1000;
    cfg.command_timeout_ms = 1000;
    cfg.max_in_flight = 10;
    memset(t, 0, sizeof(*t));
    redisc_t *r = redisc_new(rt.base, &cfg);
    assert_non_null(r);
    redisc_set_state_cb(r, on_state, t);
    return r;
}

/* ::1 first, then 127.0.0.1, where Redis listens: it connects, at once (no backoff), and says
 * which address failed first. It failed before: ::1 alone, again and again. */
static void test_second_address_after_the_first_fails(void **state)
{
    (void)state;
    const char *addrs[] = {"::1", "127.0.0.1"};
    told_t t;
    redisc_t *r = client(addrs, 2, rt.port, &t);
    char want[64];

    run_until(&t.ups, 3000);
    assert_int_equal(t.ups, 1);
    assert_int_equal(t.downs, 0); /* one address left: nothing down to tell yet */
    assert_true(redisc_connected(r));
    snprintf(want, sizeof(want), "connected to 127.0.0.1:%d (cannot connect to ::1:%d", rt.port,
             rt.port);
    assert_non_null(strstr(t.last, want));
    redisc_free(r);
}

/* Neither listens: told once per round, naming both addresses and each one's reason. */
static void test_every_address_failing_is_told_with_each(void **state)
{
    (void)state;
    int port = redis_test_free_port();
    const char *addrs[] = {"::1", "127.0.0.1"};
    told_t t;
    redisc_t *r = client(addrs, 2, port, &t);
    char a[64], b[64];

    run_until(&t.downs, 3000);
    assert_int_equal(t.downs, 1);
    assert_int_equal(t.ups, 0);
    snprintf(a, sizeof(a), "cannot connect to ::1:%d: ", port);
    snprintf(b, sizeof(b), "; cannot connect to 127.0.0.1:%d: ", port);
    assert_non_null(strstr(t.last, a));
    assert_non_null(strstr(t.last, b));
    assert_true(strstr(t.last, a) < strstr(t.last, b)); /* in the order tried */
    redisc_free(r);
}

/* A name's addresses: each once (getaddrinfo gives one per protocol when hints leave it
 * open), in the resolver's order or IPv4 first. */
static void test_addresses_of_a_name_each_once(void **state)
{
    (void)state;
    struct sockaddr_in6 six = {.sin6_family = AF_INET6};
    struct sockaddr_in four = {.sin_family = AF_INET};
    struct addrinfo a[4];
    char out[REDISC_ADDRS_MAX][46];

    inet_pton(AF_INET6, "::1", &six.sin6_addr);
    inet_pton(AF_INET, "127.0.0.1", &four.sin_addr);
    memset(a, 0, sizeof(a));
    for (int i = 0; i < 4; i++) {
        int v6 = i % 2 == 0;
        a[i].ai_family = v6 ? AF_INET6 : AF_INET;
        a[i].ai_addr = v6 ? (struct sockaddr *)&six : (struct sockaddr *)&four;
        a[i].ai_next = i < 3 ? &a[i + 1] : NULL;
    }
    assert_int_equal(sentinel_addresses(a, 0, out, REDISC_ADDRS_MAX), 2);
    assert_string_equal(out[0], "::1");
    assert_string_equal(out[1], "127.0.0.1");
    assert_int_equal(sentinel_addresses(a, 0, out, 1), 1);
    /* sentinels and cluster seeds: IPv4 first, as they took it alone before */
    assert_int_equal(sentinel_addresses(a, 1, out, REDISC_ADDRS_MAX), 2);
    assert_string_equal(out[0], "127.0.0.1");
    assert_string_equal(out[1], "::1");
}

/* The URL keeps every address of its name, the first as host. */
static void test_url_keeps_every_address(void **state)
{
    (void)state;
    redisc_config_t cfg;
    char err[128];

    assert_int_equal(rediscfg_parse_url("redis://localhost:6390/2", &cfg, err, sizeof(err)), 0);
    assert_true(cfg.n_addrs >= 1);
    assert_string_equal(cfg.host, cfg.addrs[0]);
    assert_int_equal(rediscfg_parse_url("redis://127.0.0.1:6390", &cfg, err, sizeof(err)), 0);
    assert_int_equal(cfg.n_addrs, 1);
    assert_string_equal(cfg.addrs[0], "127.0.0.1");
}

int main(void)
{
    (void)raw; /* redis_test.h's, for the tests that read the store's replies */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_second_address_after_the_first_fails),
        cmocka_unit_test(test_every_address_failing_is_told_with_each),
        cmocka_unit_test(test_addresses_of_a_name_each_once),
        cmocka_unit_test(test_url_keeps_every_address),
    };
    return cmocka_run_group_tests(tests, redis_test_setup, redis_test_teardown);
}
