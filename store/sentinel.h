/* sentinel.h - asking Redis Sentinel, asynchronously, where the master of a name is. */
#ifndef BOTGATE_STORE_SENTINEL_H
#define BOTGATE_STORE_SENTINEL_H

struct event_base;
struct evdns_base;
struct ssl_ctx_st;

#define SENTINEL_MAX 8

typedef struct sentinel_addr {
    char name[256]; /* as configured: a host name or an IP address */
    char host[64];  /* an IP address: name resolved at start-up, before any loop runs */
    int port;
    int nth; /* which of name's addresses: the list has an entry for each (IPv4 first) */
} sentinel_addr_t;

/* ok 0 when no sentinel answered with an address; host is an IP address then, valid for the
 * call only (a master the sentinels announce by name has been looked up). The query is freed
 * right after this callback. */
typedef void sentinel_cb(void *arg, int ok, const char *host, int port);

typedef struct sentinel_query sentinel_query_t;

/* Asks the sentinels in turn, from *next on, until one knows the master (each with
 * timeout_ms); *next is advanced so that the following query starts with the sentinel that
 * answered. Names (a sentinel's, or the master's when the sentinels announce host names) are
 * looked up with dns on base, never with a blocking call; with dns NULL a sentinel's address
 * of start-up is used and a master announced by name counts as no answer. With tls (rediss://)
 * the sentinels are asked over TLS, each certificate checked for the sentinel's name as
 * configured. NULL when nothing could be started (cb is then never called). */
sentinel_query_t *sentinel_ask(struct event_base *base, struct evdns_base *dns,
                               struct ssl_ctx_st *tls, const sentinel_addr_t *sentinels, int n,
                               int *next, const char *master, int timeout_ms, sentinel_cb *cb,
                               void *arg);

/* Stops the query; its callback will not run. */
void sentinel_cancel(sentinel_query_t *q);

/* Parses "host:port,host:port". Names are resolved here, with a blocking call: only at
 * start-up, before any loop runs (a name that does not resolve is a configuration error);
 * queries look them up again without blocking. A name's first address is its entry; its other
 * addresses follow every name's first, as entries of their own while max allows. -1 with a
 * message on failure. */
int sentinel_parse_list(const char *spec, sentinel_addr_t *out, int max, int *n, char *errbuf,
                        unsigned long errlen);

/* The distinct IPv4 and IPv6 addresses of res (getaddrinfo's) as text, at most max, in its
 * order, or its IPv4 ones first with ipv4_first: how many. */
struct addrinfo;
int sentinel_addresses(const struct addrinfo *res, int ipv4_first, char out[][46], int max);

#endif
