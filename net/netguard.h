/* netguard.h - the SSRF guard's decision: may botgate connect to this address on a user's
 * behalf (media downloads, webhook actions)? */
#ifndef BOTGATE_NET_NETGUARD_H
#define BOTGATE_NET_NETGUARD_H

#include <sys/socket.h>

/* 1 when the address is loopback, private, link-local, shared (CGNAT), multicast, reserved,
 * documentation (192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32), unspecified or
 * broadcast, including IPv4 addresses carried inside IPv6 (mapped, compatible, NAT64, 6to4)
 * and Teredo (2001::/32). Unknown address families are blocked too. */
int netguard_blocked(const struct sockaddr *sa);

/* The same for an address in text form; 1 also when the text is not an IP address. */
int netguard_blocked_text(const char *ip);

#endif
