/* redisc.h - the async Redis client of one worker, on hiredis 0.14 and the worker's event_base:
 * connect timeout, per-command timeout, reconnect with backoff, a cap on commands in flight.
 * Modelled on h2o's lib/common/redis.c. */
#ifndef BOTGATE_STORE_REDISC_H
#define BOTGATE_STORE_REDISC_H

#include "sentinel.h"

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;

typedef struct redisc redisc_t;
typedef struct redisc_cmd redisc_cmd_t;
typedef struct redisc_sub redisc_sub_t;

/* Called once per command unless it was cancelled. reply is NULL when the command failed
 * (connection lost, timed out); it is freed by hiredis after the call. A command past its
 * timeout is told NULL then, whether or not the connection stays (a server that answers, only
 * late, keeps it): never again, its reply is dropped when it comes. */
typedef void redisc_cb(redisReply *reply, void *arg);

#define REDISC_ADDRS_MAX 8 /* addresses of the URL's host name tried in turn */

typedef struct redisc_config {
    char host[256]; /* an IP address: hiredis resolves names with a blocking call */
    int port;
    /* Every address the URL's host name resolved to, host (the first) included, in the
     * resolver's order: a connect that fails (refused, unreachable, timed out) goes on to the
     * next one at once, and the backoff starts only once all of them failed (localhost is ::1
     * first on many systems, and a Redis bound to 127.0.0.1 refuses it). 0 or 1: host only;
     * a Cluster node's and a sentinel-announced master's connections use host alone. */
    char addrs[REDISC_ADDRS_MAX][46]; /* INET6_ADDRSTRLEN */
    int n_addrs;
    char unix_path[256]; /* used instead of host:port when not empty */
    /* TLS (rediss://): with tls_ctx set (rediscfg_tls_setup), every connection to Redis and to
     * the sentinels is TLS, its certificate verified for tls_name, or for the address connected
     * to when tls_name is empty (a Cluster node, a master announced by the sentinels). */
    int tls;                    /* the URL is rediss:// */
    struct ssl_ctx_st *tls_ctx; /* shared by every connection, kept until exit */
    char tls_name[256];
    char user[128];     /* an ACL user: AUTH user password (Redis 6+); "": AUTH password */
    char password[256]; /* AUTH on connect when not empty */
    int db;             /* SELECT on connect when not 0 */
    int connect_timeout_ms;
    /* A command's own timeout; a connection that hears nothing for that long while commands
     * wait is given up (stuck), one that answers late only fails the late commands. */
    int command_timeout_ms;
    /* commands in flight on the connection, those timed out whose replies have not come yet
     * included; past it: REDISC_BUSY */
    int max_in_flight;
    /* Redis Sentinel: when n_sentinels > 0 the master of master_name is asked for before
     * every connect, checked every SENTINEL_CHECK_MS, and host/port above are ignored. */
    sentinel_addr_t sentinels[SENTINEL_MAX];
    int n_sentinels;
    char master_name[128];
} redisc_config_t;

enum { REDISC_OK = 0, REDISC_DOWN = -1, REDISC_BUSY = -2 };

redisc_t *redisc_new(struct event_base *base, const redisc_config_t *cfg);
void redisc_free(redisc_t *r); /* pending callbacks are called with NULL */

/* Told when the connection comes up (up = 1) or goes down (up = 0, why says why), so that the
 * owner can log it and count it. */
typedef void redisc_state_cb(void *arg, int up, const char *why);
void redisc_set_state_cb(redisc_t *r, redisc_state_cb *cb, void *arg);

/* Told of every command that ends: ok 0 when it failed or timed out; latency from sending. */
typedef void redisc_observe_cb(void *arg, int ok, int64_t latency_us);
void redisc_set_observer(redisc_t *r, redisc_observe_cb *cb, void *arg);

/* Where to connect after a loss: asked before every reconnect with the address just lost or
 * refused in host and port, it writes the next one (Redis Cluster: any node will do for a
 * subscriber). With it, a connection lost while up is tried again at once, elsewhere, and
 * the backoff starts with the next failure; without it, the same address after the backoff. */
typedef void redisc_next_cb(void *arg, char *host, size_t size, int *port);
void redisc_set_next(redisc_t *r, redisc_next_cb *cb, void *arg);

int redisc_connected(const redisc_t *r);

/* Sends one command. Returns REDISC_OK and sets *out (a handle valid until the callback runs or
 * redisc_cancel) or REDISC_DOWN / REDISC_BUSY, in which case cb is never called. */
int redisc_command(redisc_t *r, redisc_cb *cb, void *arg, int argc, const char **argv,
                   const size_t *argvlen, redisc_cmd_t **out);

/* The same, for a command already in Redis's wire format (resp.h): a command
 * that may be sent again elsewhere (Redis Cluster's redirections) is formatted once. */
int redisc_command_formatted(redisc_t *r, redisc_cb *cb, void *arg, const char *cmd, size_t len,
                             redisc_cmd_t **out);

/* The callback of cmd will not be called; the reply is dropped when it arrives. */
void redisc_cancel(redisc_cmd_t *cmd);

/* Subscriptions. A subscriber is a connection of its own (a subscribed connection takes no
 * other command), made like redisc_new's and kept up the same way; anchor names a channel it
 * stays subscribed to, so that it never leaves subscribe mode (hiredis 0.14 asserts on a
 * message that arrives after its count of subscriptions fell to 0). */
redisc_t *redisc_new_subscriber(struct event_base *base, const redisc_config_t *cfg,
                                const char *anchor);

/* Called with each message published on the channel, and with msg NULL when the subscription
 * (re)starts: what was published before may have been missed. */
typedef void redisc_message_cb(void *arg, const char *msg, size_t len);

/* Subscribes to channel on subscriber r (several subscriptions may share a channel: one
 * SUBSCRIBE). NULL when out of memory. While r is down the subscription waits for it. */
redisc_sub_t *redisc_subscribe(redisc_t *r, const char *channel, redisc_message_cb *cb, void *arg);
/* The callback of sub will not be called again; sub is freed. */
void redisc_unsubscribe(redisc_sub_t *sub);

/* Server-assisted client-side caching (Redis 6+, RESP2 form). Redis tells subscriber sub
 * (redisc_new_subscriber) of every write, by anyone, to a key under one of the prefixes
 * (CLIENT TRACKING on REDIRECT <sub's CLIENT ID> BCAST PREFIX ... NOLOOP, sent on command
 * connection r; writes made on r itself are not told). tracking is told 1 once Redis confirmed
 * it on the current pair of connections, and 0 as soon as either goes: from then on changes
 * may go unheard (and the owner must forget what it cached) until it is told 1 again; both
 * are reconnected and tracking enabled again on its own. invalidate is told each changed key,
 * or key NULL when everything may have changed (FLUSHALL). One pair per Redis server: a
 * deployment of several servers pairs a command connection and a subscriber per server.
 * Call before the loop runs; -1 when out of memory or sub is not a subscriber. */
typedef void redisc_tracking_cb(void *arg, int on);
typedef void redisc_invalidate_cb(void *arg, const char *key, size_t len);
int redisc_track(redisc_t *r, redisc_t *sub, const char *const *prefixes, int n_prefixes,
                 redisc_tracking_cb *tracking, redisc_invalidate_cb *invalidate, void *arg);

#endif
