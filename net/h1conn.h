/* h1conn.h - botgate's own HTTP/1.1 connection to a platform, on a socket it holds (cleartext,
 * or TLS by OpenSSL): one exchange at a time, its end handed up through the exchange's
 * callback; and the request head it writes, as libcurl would for the same call. The twin of
 * h2conn.h. */
#ifndef BOTGATE_NET_H1CONN_H
#define BOTGATE_NET_H1CONN_H

#include "h1resp.h"
#include "net-t.h"

#include <openssl/ssl.h>
#include <stddef.h>

struct event_base;

typedef struct h1conn h1conn_t;

typedef enum h1conn_outcome {
    H1CONN_ANSWER,      /* a whole answer: see result.answer */
    H1CONN_STALE,       /* a kept-alive connection turned out closed before any byte of the
                           request went out: nothing was sent */
    H1CONN_NO_ANSWER,   /* closed or reset after the request went out, before any answer byte */
    H1CONN_SEND_FAILED, /* writing failed after part of the request went out */
    H1CONN_RECV_FAILED, /* reading failed, or the connection closed in the middle of the answer */
    H1CONN_BAD_ANSWER,  /* the answer breaks HTTP/1.1 */
    H1CONN_TOO_LARGE,   /* the answer's body is longer than allowed */
    H1CONN_TLS_FAILED,  /* the TLS handshake failed: nothing was sent */
} h1conn_outcome_t;

typedef struct h1conn_result {
    h1conn_outcome_t outcome;
    h1resp_t *answer;  /* the parsed answer (and its body, to take); valid during the callback */
    int os_errno;      /* the system's error when a read or write failed, else 0 */
    const char *error; /* what was wrong, for the failures; "" for an answer */
    long verify;       /* H1CONN_TLS_FAILED: the certificate check's X509_V_* result */
} h1conn_result_t;

/* An exchange ended. The callback owns the connection's fate: h1conn_park (after a reusable
 * answer only) or h1conn_free. */
typedef void h1conn_done_cb(void *arg, h1conn_t *c, h1conn_result_t *res);
/* A parked connection became readable: its peer closed it (or sent what nobody asked for).
 * The callback frees it. */
typedef void h1conn_idle_cb(void *arg, h1conn_t *c);

/* A connection on fd (connected) and ssl (NULL over cleartext; made for fd's peer, not yet
 * shaken: the handshake comes before the first request). It owns both from here, also when
 * it returns NULL (out of memory). */
h1conn_t *h1conn_new(struct event_base *base, int fd, SSL *ssl, h1conn_idle_cb *on_idle,
                     void *idle_arg);

/* ssl's handshake was done already (by h2conn, whose platform chose HTTP/1.1). */
void h1conn_shaken(h1conn_t *c);

/* Sends a request (head, then body, which may be NULL; both stay the caller's until the
 * callback) and reads its answer, at most max_answer bytes of body. cb may run before this
 * returns, when the connection fails at once. */
void h1conn_exchange(h1conn_t *c, const char *head, size_t head_len, const char *body,
                     size_t body_len, size_t max_answer, h1conn_done_cb *cb, void *arg);

/* Stops the exchange under way without its callback; the connection can carry nothing more. */
void h1conn_abandon(h1conn_t *c);

/* After an answer: whether the connection may carry the next request. */
int h1conn_reusable(const h1conn_t *c);

/* Between exchanges: lets go of the last answer; readable from now on means closed (on_idle). */
void h1conn_park(h1conn_t *c);

void h1conn_free(h1conn_t *c);

/* The request head, as libcurl 7.88 writes one for the same call: request line (target: the
 * path and query, "" for "/"), Host (host_len bytes of host), Accept, the request's own lines,
 * then the body's length (and, as curl does for a body without a type of its own, the form
 * type). body_inside: the body too, after the head (over TLS: one record). Into *buf (grown as
 * needed, *cap its size), *len its length. -1 when a line has no colon, CR, LF or an empty value
 * (which curl reads as "leave this field out"), or out of memory: the call is then curl's. */
int h1conn_request_head(char **buf, size_t *cap, size_t *len, const net_request_t *req,
                        const char *target, const char *host, size_t host_len, int with_body,
                        int body_inside);

#endif
