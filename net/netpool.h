/* netpool.h - the connections botgate's own HTTP/1.1 and HTTP/2 keep per origin (a scheme, host
 * and port): parked HTTP/1.1 connections, HTTP/2 connections with room for streams, the newest
 * TLS session; and the URLs they can carry, read once and kept. One pool per client (net.c),
 * on one worker's thread. */
#ifndef BOTGATE_NET_NETPOOL_H
#define BOTGATE_NET_NETPOOL_H

#include "h1conn.h"
#include "h2conn.h"

#include <openssl/ssl.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;

typedef struct netpool netpool_t;

/* An origin: owned by its pool from the first URL that names it until netpool_free. Its
 * fields without '_' are for the client to read, and no_h2 and h2_streams for it to set. */
typedef struct netpool_origin {
    char *key;  /* "host:port", the host in lower case */
    char *host; /* the host alone, over TLS: the name the certificate must hold, SNI's */
    int tls;
    int host_is_ip;
    SSL_SESSION *session; /* the newest TLS session its connections got (nettls_new fills it) */
    long h2_streams;      /* streams at once its platform allowed last (-1: not yet told) */
    int no_h2;            /* the platform chose HTTP/1.1 over TLS: no HTTP/2 to it any more */
    /* netpool.c's: */
    struct netpool_parked *_parked; /* oldest first */
    size_t _n_parked, _cap_parked;
    h2conn_t **_h2; /* its HTTP/2 connections, each freed when it is gone or idle too long */
    size_t _n_h2, _cap_h2;
    netpool_t *_pool;
    struct netpool_origin *_next;
} netpool_origin_t;

/* A URL read for botgate's own HTTP: its origin, its request target and its Host field. */
typedef struct netpool_target {
    netpool_origin_t *origin;
    const char *target; /* the path and query ("/..."), "" for "/" */
    const char *host;   /* the Host field's value ... */
    size_t host_len;    /* ... this long (with the port, when not the scheme's own) */
} netpool_target_t;

netpool_t *netpool_new(struct event_base *base);
/* Closes every connection; the calls on them are the caller's to have stopped first. */
void netpool_free(netpool_t *p);

/* url (http:// or https://) read as botgate's own HTTP/1.1 and HTTP/2 take it: a host of
 * letters, digits, dots and hyphens, a port maybe, and a path and query that need no
 * normalizing. NULL for anything else (user info, an IPv6 literal, a fragment, a dot segment,
 * a byte curl would refuse or encode: libcurl knows every form), or out of memory. Valid until
 * the next call. */
const netpool_target_t *netpool_target(netpool_t *p, const char *url);

/* The newest parked HTTP/1.1 connection of o young enough to trust (older ones are closed),
 * now the caller's; or NULL. */
h1conn_t *netpool_h1_take(netpool_origin_t *o);
/* Keeps c (reusable, after an answer) for o's next call, or closes it when enough wait. */
void netpool_h1_park(netpool_origin_t *o, h1conn_t *c);
/* An HTTP/1.1 connection to o on fd (and ssl over TLS), the caller's until it parks it; NULL when
 * out of memory (fd and ssl are closed). */
h1conn_t *netpool_h1_new(netpool_origin_t *o, int fd, SSL *ssl);

/* The first HTTP/2 connection of o that takes a stream (those idle too long are closed), or
 * NULL. */
h2conn_t *netpool_h2_pick(netpool_origin_t *o);
/* A new HTTP/2 connection of o, waiting for its socket; NULL when out of memory. It sends at
 * most o->h2_streams at once (when more than 0) before its own SETTINGS come. */
h2conn_t *netpool_h2_add(netpool_origin_t *o);
/* Whether a live HTTP/2 connection of o has its platform allowing no stream at all: a new
 * connection would be told the same, after its streams were refused. */
int netpool_h2_allows_none(const netpool_origin_t *o);
/* Closes c, a connection of o, at once. */
void netpool_h2_close(netpool_origin_t *o, h2conn_t *c);
/* The platform chose HTTP/1.1 in c's handshake: its TLS connection, made and good, is parked
 * for the calls that were to be its streams (the first one takes it). */
void netpool_h2_fall_back(netpool_origin_t *o, h2conn_t *c);

#endif
