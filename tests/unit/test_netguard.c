/* test_netguard.c - the SSRF guard: which addresses botgate refuses to reach for a user. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "net/netguard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/un.h>

static const char *const blocked[] = {
    /* IPv4 */
    "127.0.0.1",
    "127.255.255.254",
    "10.0.0.1",
    "10.255.255.255",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",
    "100.127.255.255",
    "0.0.0.0",
    "0.1.2.3",
    "224.0.0.1",
    "239.255.255.250",
    "255.255.255.255",
    "240.0.0.1",
    "192.0.0.8",
    "198.18.0.1",
    "198.19.255.255",
    /* documentation (RFC 5737) */
    "192.0.2.1",
    "192.0.2.255",
    "198.51.100.7",
    "198.51.100.0",
    "203.0.113.1",
    "203.0.113.255",
    /* IPv6 */
    "::1",
    "::",
    "fe80::1",
    "febf::1",
    "fc00::1",
    "fd12::1",
    "ff02::1",
    "ff05::2",
    "fec0::1",
    "100::1",
    "2001:db8::1", /* documentation (RFC 3849) */
    "2001:db8:ffff:ffff::1",
    "2001::1", /* Teredo (RFC 4380) */
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",
    "2001:0:ffff::1",
    /* IPv4 inside IPv6: mapped, NAT64, 6to4, compatible */
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:0.0.0.0",
    "64:ff9b::7f00:1",
    "::ffff:0:10.0.0.1",
    "64:ff9b:1::a00:1",
    "64:ff9b::a00:1",
    "64:ff9b::c0a8:101",
    "2002:7f00:1::1",
    "2002:a9fe:a9fe::1",
    "::127.0.0.1",
    "::10.0.0.1",
    "::0.0.0.2",
    "::ffff:192.0.2.1",
    "2002:cb00:7101::1",
};

static const char *const allowed[] = {
    "8.8.8.8",
    "1.1.1.1",
    "172.15.255.255",
    "172.32.0.1",
    "100.63.255.255",
    "100.128.0.1",
    "11.0.0.1",
    "9.255.255.255",
    "126.255.255.255",
    "128.0.0.1",
    "169.253.255.255",
    "169.255.0.1",
    "192.167.255.255",
    "192.169.0.1",
    "223.255.255.255",
    "198.17.255.255",
    "198.20.0.1",
    "192.0.1.255", /* next to the documentation ranges */
    "192.0.3.0",
    "198.51.99.255",
    "198.51.101.0",
    "203.0.112.255",
    "203.0.114.0",
    "2606:4700::1111",
    "2001:4860:4860::8888",
    "2001:db7:ffff::1",
    "2001:db9::1",
    "2001:200::1",
    "::ffff:203.0.114.1",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
    "2002:808:808::1",
    "fe7f::1",
    "fbff::1",
};

static void test_blocked_text(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(blocked) / sizeof(blocked[0]); i++)
        if (netguard_blocked_text(blocked[i]) != 1)
            fail_msg("%s is not blocked", blocked[i]);
}

static void test_allowed_text(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
        if (netguard_blocked_text(allowed[i]) != 0)
            fail_msg("%s is blocked", allowed[i]);
}

static void test_garbage_text(void **state)
{
    static const char *const garbage[] = {
        "",         "localhost", "1.2.3",       "1.2.3.4.5",  "256.1.1.1",
        "1.2.3.4 ", " 8.8.8.8",  "8.8.8.8/32",  "0x7f.0.0.1", "2130706433",
        "[::1]",    "::1%lo",    "example.com", "8.8.8.8:80", ":::",
        "gggg::1",
    };

    (void)state;
    for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++)
        if (netguard_blocked_text(garbage[i]) != 1)
            fail_msg("\"%s\" is not blocked", garbage[i]);
}

/* The socket-address form decides the same as the text form. */
static void test_sockaddr(void **state)
{
    struct sockaddr_in in;
    struct sockaddr_in6 in6;
    struct sockaddr_un un;
    const char *const *lists[] = {blocked, allowed};
    const size_t sizes[] = {sizeof(blocked) / sizeof(blocked[0]),
                            sizeof(allowed) / sizeof(allowed[0])};

    (void)state;
    for (int l = 0; l < 2; l++) {
        for (size_t i = 0; i < sizes[l]; i++) {
            const char *ip = lists[l][i];
            int want = l == 0;

            memset(&in, 0, sizeof(in));
            memset(&in6, 0, sizeof(in6));
            if (inet_pton(AF_INET, ip, &in.sin_addr) == 1) {
                in.sin_family = AF_INET;
                in.sin_port = htons(443);
                assert_int_equal(netguard_blocked((struct sockaddr *)&in), want);
            } else {
                assert_int_equal(inet_pton(AF_INET6, ip, &in6.sin6_addr), 1);
                in6.sin6_family = AF_INET6;
                in6.sin6_port = htons(443);
                assert_int_equal(netguard_blocked((struct sockaddr *)&in6), want);
            }
        }
    }
    /* other families and no address at all are blocked */
    memset(&un, 0, sizeof(un));
    un.sun_family = AF_UNIX;
    assert_int_equal(netguard_blocked((struct sockaddr *)&un), 1);
    memset(&in, 0, sizeof(in));
    in.sin_family = AF_UNSPEC;
    inet_pton(AF_INET, "8.8.8.8", &in.sin_addr);
    assert_int_equal(netguard_blocked((struct sockaddr *)&in), 1);
    assert_int_equal(netguard_blocked(NULL), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocked_text),
        cmocka_unit_test(test_allowed_text),
        cmocka_unit_test(test_garbage_text),
        cmocka_unit_test(test_sockaddr),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
