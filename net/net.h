/* net.h - botgate's outbound HTTP client, driven by the worker's event_base: thousands of calls
 * in flight on one thread, connections kept alive per worker. A call straight to the platform
 * goes over botgate's own HTTP/1.1 (h1conn.c) or HTTP/2 (h2conn.c) on connections kept per
 * origin (netpool.c); the rest (proxies, redirects, URLs users give, odd URLs) is libcurl's
 * (netcurl.c). Either way the answer comes back through the call's one callback.
 *
 * A worker has two clients: one for the platforms (configured URLs) and one for URLs users
 * give (media downloads, webhooks) whose every connection passes the SSRF guard and goes direct,
 * never through a proxy of the environment (the guard would check the proxy's address). They
 * must not share a connection pool: a user URL on a platform's host would reuse an unchecked
 * connection. */
#ifndef BOTGATE_NET_NET_H
#define BOTGATE_NET_NET_H

#include "net-t.h"

struct event_base;

typedef struct net net_t;
typedef struct net_xfer net_xfer_t;

net_t *net_new(struct event_base *base, const net_config_t *cfg);
void net_free(net_t *net); /* the calls in flight are the caller's to cancel first */

/* Starts req: net keeps what it needs of it and takes its body. Its end goes to cb, never
 * before this returns. NULL when the call could not be started (cb never runs). */
net_xfer_t *net_start(net_t *net, net_request_t *req, net_cb *cb, void *arg);

/* Stops a call; its callback will not run. */
void net_cancel(net_xfer_t *x);

#endif
