/* h2conn.h - one HTTP/2 connection to a platform over TLS, on a socket botgate holds: the TLS
 * handshake (OpenSSL), the frames (libnghttp2), many platform calls at once as its streams, each
 * call's end handed up through its own callback. */
#ifndef BOTGATE_NET_H2CONN_H
#define BOTGATE_NET_H2CONN_H

#include "net-t.h"

#include <openssl/ssl.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;

typedef struct h2conn h2conn_t;
typedef struct h2conn_stream h2conn_stream_t;

typedef enum h2conn_outcome {
    H2CONN_ANSWER,     /* a whole answer */
    H2CONN_REFUSED,    /* the platform surely did not process it: it refused the stream
                          (REFUSED_STREAM), the stream was past a GOAWAY's last one, or the
                          connection ended before the request went out. It may go again. */
    H2CONN_NOT_H2,     /* the platform did not choose HTTP/2 in the handshake: nothing went out */
    H2CONN_NO_ANSWER,  /* the connection ended after the request went out, before its answer */
    H2CONN_RESET,      /* the platform reset the stream after the request went out */
    H2CONN_TOO_LARGE,  /* the answer's body is longer than allowed */
    H2CONN_BAD_ANSWER, /* the answer or the connection broke HTTP/2 */
    H2CONN_TLS_FAILED, /* the TLS handshake failed: nothing went out */
    H2CONN_UNDIALED,   /* the connection never got its socket: nothing went out */
} h2conn_outcome_t;

/* A stream's end. Valid only during the callback. */
typedef struct h2conn_result {
    h2conn_outcome_t outcome;
    int status;               /* the final answer's status */
    const char *retry_after;  /* the answer's field, or NULL */
    const char *content_type; /* the answer's field, or NULL */
    char *body;               /* the answer's body, NUL-terminated, or NULL when empty: the callback
                                 may take it (and set the field to NULL), else it is freed after */
    size_t body_len;
    int os_errno;       /* the system's error when a read or write failed, else 0 */
    const char *error;  /* what was wrong, for the failures; "" for an answer */
    long verify;        /* H2CONN_TLS_FAILED: the certificate check's X509_V_* result */
    net_err_t dial_err; /* H2CONN_UNDIALED: the failure given to h2conn_undialed (its words
                           in error) */
    h2conn_t *conn;     /* the stream's connection (see h2conn_take_socket) */
    int sent; /* its request may have reached the platform (its HEADERS went out), even when
                 the platform says it did not process it (H2CONN_REFUSED) */
} h2conn_result_t;

typedef void h2conn_done_cb(void *arg, h2conn_result_t *res);
/* The connection can carry nothing more and every stream's end has been handed up: the
 * callback frees it (h2conn_free). */
typedef void h2conn_gone_cb(void *arg, h2conn_t *c);

/* A connection waiting for its socket: streams can be submitted at once, and go out after the
 * handshake, as many at once as assumed_max until the platform's SETTINGS say (0: 100, RFC
 * 9113's recommended least). Owned by whoever made it; NULL when out of memory. */
h2conn_t *h2conn_new(struct event_base *base, uint32_t assumed_max, h2conn_gone_cb *gone,
                     void *gone_arg);

/* The socket is connected: c takes it and ssl (made for it, not yet shaken, offering "h2" by
 * ALPN) and does the handshake. */
void h2conn_attach(h2conn_t *c, int fd, SSL *ssl);

/* The socket will never come: every stream ends H2CONN_UNDIALED with err, why (static text)
 * and os_errno, or, with may_retry, H2CONN_REFUSED (the connect was stopped, not failed). */
void h2conn_undialed(h2conn_t *c, net_err_t err, const char *why, int os_errno, int may_retry);

/* Submits a request given as an HTTP/1.1 message: the request line, the header section (Host
 * as :authority) and the body after it, as botgate writes one; msg stays the caller's and must
 * live until the stream ends or is cancelled. Nothing is sent and no callback runs before this
 * returns. NULL when c takes no more streams or memory ran out. */
h2conn_stream_t *h2conn_submit(h2conn_t *c, const char *msg, size_t msg_len, size_t max_answer,
                               h2conn_done_cb *cb, void *arg);

/* Resets the stream if it is under way; its callback will not run, and msg is no longer read. */
void h2conn_cancel(h2conn_stream_t *s);

/* Whether a new stream would start on c now or as soon as the handshake is done: not ending,
 * and fewer streams than the platform allows at once (at most H2CONN_STREAMS_MAX). */
int h2conn_takes(const h2conn_t *c);

/* The streams at once the platform's SETTINGS allow on c, or -1 before they came. */
long h2conn_streams_allowed(const h2conn_t *c);

/* Whether c, not ending, has the platform's SETTINGS allowing no stream at all: a stream
 * submitted anywhere else would be refused just as well. */
int h2conn_allows_none(const h2conn_t *c);

/* When c last had no stream (clock_coarse_ms), or 0 while it has some or is not yet up. */
int64_t h2conn_idle_since(const h2conn_t *c);

/* After H2CONN_NOT_H2: the socket and its TLS session, shaken, for HTTP/1.1; c no longer
 * holds them. -1 when c has none to give (or gave them already). */
int h2conn_take_socket(h2conn_t *c, SSL **ssl);

/* Closes c; streams not yet ended end without their callbacks. */
void h2conn_free(h2conn_t *c);

#define H2CONN_STREAMS_MAX 1000

#endif
