/* netcurl.h - what only libcurl does for net/: calls through a proxy, calls that follow
 * redirects, calls to URLs users give (every connection past the SSRF guard), URLs in forms
 * botgate's own HTTP does not take; and connecting the sockets botgate's own HTTP/1.1 and
 * HTTP/2 then speak on (its resolver, its DNS cache, its happy eyeballs). curl's multi
 * interface on the worker's event_base; nothing of curl's is seen outside netcurl.c. */
#ifndef BOTGATE_NET_NETCURL_H
#define BOTGATE_NET_NETCURL_H

#include "net-t.h"

#include <stddef.h>

struct event_base;

typedef struct netcurl netcurl_t;
typedef struct netcurl_job netcurl_job_t;

netcurl_t *netcurl_new(struct event_base *base, const net_config_t *cfg);
/* The jobs in flight are the caller's to cancel first. */
void netcurl_free(netcurl_t *nc);

/* Whether a proxy the environment names carries nc's calls (they are then all curl's). */
int netcurl_proxied(const netcurl_t *nc);

/* The CA bundle libcurl was built to trust, into buf; "" when it names none. */
void netcurl_ca_bundle(char *buf, size_t size);

/* Starts req on curl: it takes req->body. The answer goes to cb, after this returned; NULL
 * when it could not start (cb never runs). */
netcurl_job_t *netcurl_start(netcurl_t *nc, net_request_t *req, net_cb *cb, void *arg);

/* A connect's end. */
typedef struct netcurl_dialed {
    int fd;          /* the connected socket, the callback's from now on; -1 when it failed */
    net_err_t err;   /* why not, when it failed (NET_OK and fd -1: the socket was lost) */
    const char *why; /* err in libcurl's words (static) */
    int os_errno;
    int not_sent; /* 1 when nothing reached the peer: the failure was to resolve or connect */
} netcurl_dialed_t;

typedef void netcurl_dial_cb(void *arg, const netcurl_dialed_t *d);

/* Has curl resolve key ("host:port") and connect a socket to it within timeout_ms, and hand
 * it over to cb (after this returned). NULL when out of memory (cb never runs). */
netcurl_job_t *netcurl_dial(netcurl_t *nc, const char *key, long timeout_ms, netcurl_dial_cb *cb,
                            void *arg);

/* Stops a job; its callback will not run. Never from inside a curl callback. */
void netcurl_cancel(netcurl_job_t *job);

#endif
