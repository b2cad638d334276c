/* netguard.c - address classification for the SSRF guard. Checked on the resolved address of
 * every connection (curl's open-socket callback), so DNS names and redirects that lead to a
 * private address are caught too. */
#include "netguard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

static int blocked_v4(uint32_t a) /* host byte order */
{
    static const struct {
        uint32_t net, mask;
    } ranges[] = {
        {0x00000000, 0xFF000000}, /* 0.0.0.0/8 "this network" */
        {0x0A000000, 0xFF000000}, /* 10/8 private */
        {0x64400000, 0xFFC00000}, /* 100.64/10 shared address space */
        {0x7F000000, 0xFF000000}, /* 127/8 loopback */
        {0xA9FE0000, 0xFFFF0000}, /* 169.254/16 link-local, cloud metadata */
        {0xAC100000, 0xFFF00000}, /* 172.16/12 private */
        {0xC0000000, 0xFFFFFF00}, /* 192.0.0/24 IETF protocol assignments */
        {0xC0000200, 0xFFFFFF00}, /* 192.0.2/24 documentation (TEST-NET-1) */
        {0xC0A80000, 0xFFFF0000}, /* 192.168/16 private */
        {0xC6120000, 0xFFFE0000}, /* 198.18/15 benchmarking */
        {0xC6336400, 0xFFFFFF00}, /* 198.51.100/24 documentation (TEST-NET-2) */
        {0xCB007100, 0xFFFFFF00}, /* 203.0.113/24 documentation (TEST-NET-3) */
        {0xE0000000, 0xF0000000}, /* 224/4 multicast */
        {0xF0000000, 0xF0000000}, /* 240/4 reserved, broadcast */
    };

    for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++)
        if ((a & ranges[i].mask) == ranges[i].net)
            return 1;
    return 0;
}

static uint32_t v4_at(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int blocked_v6(const uint8_t *b)
{
    static const uint8_t zero[16];
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    static const uint8_t siit[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0};
    static const uint8_t nat64_local[6] = {0, 0x64, 0xff, 0x9b, 0, 0x01};

    if (memcmp(b, zero, 15) == 0 && (b[15] == 0 || b[15] == 1))
        return 1; /* :: and ::1 */
    if (memcmp(b, mapped, 12) == 0 || memcmp(b, nat64, 12) == 0 || memcmp(b, siit, 12) == 0 ||
        memcmp(b, nat64_local, 6) == 0)
        return blocked_v4(v4_at(b + 12)); /* ::ffff:a.b.c.d, NAT64 (RFC 6052, 8215), SIIT */
    if (memcmp(b, zero, 12) == 0)
        return blocked_v4(v4_at(b + 12)); /* deprecated IPv4-compatible ::a.b.c.d */
    if (b[0] == 0x20 && b[1] == 0x02)
        return blocked_v4(v4_at(b + 2)); /* 6to4 2002:aabb:ccdd::/48 */
    if (b[0] == 0xff)
        return 1; /* multicast */
    if ((b[0] & 0xfe) == 0xfc)
        return 1; /* fc00::/7 unique local */
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80)
        return 1; /* fe80::/10 link-local */
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0)
        return 1; /* fec0::/10 site-local (deprecated) */
    if (b[0] == 0x01 && memcmp(b + 1, zero, 7) == 0)
        return 1; /* 100::/64 discard */
    if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8)
        return 1; /* 2001:db8::/32 documentation */
    if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0)
        return 1; /* 2001::/32 Teredo: a tunnel to an IPv4 address it hides */
    return 0;
}

int netguard_blocked(const struct sockaddr *sa)
{
    if (sa == NULL)
        return 1;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return blocked_v4(ntohl(in->sin_addr.s_addr));
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        return blocked_v6(in6->sin6_addr.s6_addr);
    }
    return 1;
}

int netguard_blocked_text(const char *ip)
{
    struct sockaddr_in in;
    struct sockaddr_in6 in6;

    memset(&in, 0, sizeof(in));
    memset(&in6, 0, sizeof(in6));
    if (inet_pton(AF_INET, ip, &in.sin_addr) == 1) {
        in.sin_family = AF_INET;
        return netguard_blocked((struct sockaddr *)&in);
    }
    if (inet_pton(AF_INET6, ip, &in6.sin6_addr) == 1) {
        in6.sin6_family = AF_INET6;
        return netguard_blocked((struct sockaddr *)&in6);
    }
    return 1;
}
