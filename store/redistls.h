/* redistls.h - TLS to Redis (rediss://) under hiredis 0.14, which has none: a relay per
 * connection, hiredis speaking cleartext on one end of a socketpair and OpenSSL on the socket
 * to Redis, on the owner's event_base (libevent's OpenSSL bufferevent, non-blocking). */
#ifndef BOTGATE_STORE_REDISTLS_H
#define BOTGATE_STORE_REDISTLS_H

#include <stddef.h>

struct event_base;
struct redisAsyncContext;
struct ssl_ctx_st;

typedef struct redistls redistls_t;

/* The client context every Redis connection of the process shares: the server's certificate
 * checked against ca_file ("": the system's CAs), and a client certificate for mutual TLS
 * when cert_file and key_file are given. Made once, at start-up, and kept until exit. NULL
 * with a message naming the file on failure. */
struct ssl_ctx_st *redistls_ctx_new(const char *ca_file, const char *cert_file,
                                    const char *key_file, char *err, size_t errlen);

/* Told once: up 1 when the handshake is done and the certificate is that of name; up 0 with
 * why when the connect or the handshake failed (why never holds a secret). The relay may be
 * freed from inside. */
typedef void redistls_cb(void *arg, int up, const char *why);

/* Puts TLS under ac, just made by redisAsyncConnect and not yet attached to a loop: its socket
 * (connect in progress) goes to a relay on base, and ac gets the cleartext end of a socketpair
 * under the same descriptor number. hiredis then "connects" at once and its first commands wait
 * in the relay until the handshake is done. name is what the certificate must name: a host
 * name (also sent as SNI) or an IP address. NULL with why on failure (ac unchanged then).
 * Owned by the caller: redistls_free after the context is gone or given up. */
redistls_t *redistls_wrap(struct redisAsyncContext *ac, struct event_base *base,
                          struct ssl_ctx_st *ctx, const char *name, redistls_cb *cb, void *arg,
                          char *err, size_t errlen);
void redistls_free(redistls_t *t);

/* For a blocking client (botgatectl): connects to host:port (an IP address) within timeout_ms,
 * completes the handshake, and returns a blocking socket that speaks cleartext to the server,
 * relayed by a thread of its own until the socket is closed. -1 with why on failure. Ignores
 * SIGPIPE in the process (the relay writes to sockets their peer may have closed). */
int redistls_connect_blocking(struct ssl_ctx_st *ctx, const char *name, const char *host, int port,
                              int timeout_ms, char *err, size_t errlen);

#endif
