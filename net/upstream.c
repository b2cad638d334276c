/* upstream.c - the outbound client: curl's multi interface on the worker's event_base, and
 * botgate's own HTTP/1.1 and HTTP/2 on the sockets curl connects.
 *
 * A platform call straight to an http:// or https:// URL, with no proxy and no redirect to
 * follow, is written and read by botgate itself on connections kept per origin (host and port):
 * curl resolves the name and connects the socket (CURLOPT_CONNECT_ONLY) and lets it go; over TLS,
 * OpenSSL then does the handshake (tls_new). Over HTTP/1.1 (cleartext, or TLS with the HTTP/1.1
 * setting) the h1conn_ functions below write the request and read the answer (parsed by
 * core/h1resp.c); over TLS with the HTTP/2 setting the call is a stream of an HTTP/2 connection
 * (gateway/h2conn.c, on libnghttp2), or goes over HTTP/1.1 on the same TLS connection when the
 * platform chooses it. libcurl 7.88 spends about 60,000 instructions and two poll() calls per
 * request writing the request and reading the answer over HTTP/1.1, and keeps 5 KiB of state per
 * call in flight over HTTP/2 (bench/README.md); these paths spend a few thousand, no poll(), and
 * a few hundred bytes per HTTP/2 stream. Everything else (proxies, redirects, the SSRF-guarded
 * client for URLs users give, any URL in a form they do not take) is curl's, as below.
 *
 * The curl multi client (model: curl's docs/examples/hiperfifo.c): one libevent event per socket,
 * kept while curl's wish for it stays the same and while its connection waits in the pool between
 * calls (parked), so that a kept-alive connection costs no epoll_ctl per request. Easy handles and
 * transfer records are reused.
 *
 * Transfers are spread over several multi handles ("shards") of at most SHARD_XFERS each:
 * libcurl 7.88 walks its whole connection cache when a finished handle is removed and the
 * host's connections when it looks for one to reuse, so one multi handle with 5000
 * connections spends most of its time in those walks. A shard keeps them short; under light
 * load everything runs on the first shard and reuses its connections. */
#include "upstream.h"

#include "h2conn.h"
#include "handshake.h"

#include "../core/clock.h"
#include "h1resp.h"
#include "../core/hash.h"
#include "netguard.h"
#include "../core/numfmt.h"

#include <curl/curl.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define SHARD_XFERS 128 /* transfers in flight per multi handle before the next one is used */
#define SHARDS_MAX  64
#define URL_SLOTS   64 /* parsed URLs kept per worker */
/* A header line of the lists rather than CURLOPT_USERAGENT, which every easy handle would copy
 * and format again into a line of its own: two allocations per transfer in flight. */
#define USER_AGENT "User-Agent: botgate/1.0"
/* HTTP/1.1 connections botgate drives itself (h1conn_*): kept parked per origin, at
 * most this many, and closed rather than reused after this long unused (curl's own maximum
 * age of a pooled connection is 118 s; platforms and proxies close idle ones after a minute
 * or so, and a request written as the peer closes would be lost). */
#define H1_PARKED_MAX  256
#define H1_IDLE_MAX_MS 55000
#define H1_TRIES       5  /* connections tried when kept-alive ones turn out closed (curl: 5 too) */
#define SPARE_EASY     16 /* easy handles kept for the next connects of our own HTTP/1.1 */

/* ---- botgate's own HTTP/1.1 connection (h1conn_*) ----
 *
 * One HTTP/1.1 connection to a platform, on a socket libcurl connected and let go: botgate
 * writes each request and reads its answer itself, one exchange at a time, with the socket's
 * read event registered for the connection's whole life (no epoll_ctl per request) and no
 * poll() of its own. Over cleartext the request goes out with one sendmsg of two pieces (head,
 * body) when the socket takes it whole, which it nearly always does; over TLS (the SSL object
 * made by tls_new, which does the handshake before the first request) with one SSL_write of
 * one piece. The answer is read as it arrives into a buffer on the stack and handed to the
 * parser (core/h1resp), which keeps only what it must: a head split over two reads, the body.
 * Between exchanges the connection waits parked; readable then means the peer closed it (or,
 * over TLS, sent a session ticket, which is read and changes nothing).
 *
 * Over TLS, OpenSSL may hold records it has read from the socket (read-ahead) that the socket's
 * readiness no longer shows: an answer is therefore read until the parser has it whole or
 * SSL_read wants the socket again, never left in OpenSSL's buffer while waiting; and a
 * connection is parked only when OpenSSL holds nothing of it. */

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

/* Bytes read per recv (or SSL_read): a platform's answer is a few hundred, a media upload's
 * answer a few thousand; a longer one takes more reads. */
#define READ_CHUNK 16384

/* Owned by whoever holds it: the client's pool while parked, the transfer during an exchange. */
struct h1conn {
    struct event rd;  /* EV_READ | EV_PERSIST, registered from h1conn_new to h1conn_free */
    struct event *wr; /* only while a request (or a handshake) waits for room in the socket */
    int fd;
    SSL *ssl; /* owned; NULL over cleartext */
    /* the exchange in progress */
    const char *head, *body;
    size_t head_len, body_len, sent;
    h1conn_done_cb *cb;
    void *arg;
    h1resp_t ans;
    /* the connection */
    h1conn_idle_cb *on_idle;
    void *idle_arg;
    h1conn_t *next;
    int64_t parked_at;
    unsigned busy : 1, answered : 1, reusable : 1, ans_live : 1;
    unsigned shaken : 1; /* the TLS handshake is done */
    unsigned broken : 1; /* the TLS session failed: no close_notify at the end */
};

static void h1conn_on_readable(evutil_socket_t fd, short what, void *arg);
static void h1conn_on_writable(evutil_socket_t fd, short what, void *arg);

static h1conn_t *h1conn_new(struct event_base *base, int fd, SSL *ssl, h1conn_idle_cb *on_idle,
                            void *idle_arg)
{
    h1conn_t *c = calloc(1, sizeof(*c));

    if (c == NULL || (ssl != NULL && SSL_set_fd(ssl, fd) != 1)) {
        SSL_free(ssl);
        close(fd);
        free(c);
        return NULL;
    }
    c->fd = fd;
    c->ssl = ssl;
    c->on_idle = on_idle;
    c->idle_arg = idle_arg;
    event_assign(&c->rd, base, fd, EV_READ | EV_PERSIST, h1conn_on_readable, c);
    if (event_add(&c->rd, NULL) < 0) {
        SSL_free(ssl);
        close(fd);
        free(c);
        return NULL;
    }
    return c;
}

static void h1conn_free(h1conn_t *c)
{
    if (c == NULL)
        return;
    event_del(&c->rd);
    if (c->wr != NULL)
        event_free(c->wr);
    if (c->ans_live)
        h1resp_release(&c->ans);
    if (c->ssl != NULL) {
        /* a close_notify, best effort and without waiting: the socket closes next */
        if (c->shaken && !c->broken && !c->busy)
            SSL_shutdown(c->ssl);
        SSL_free(c->ssl);
    }
    close(c->fd);
    free(c);
}

/* Ends the exchange: the callback decides what becomes of the connection, so nothing of c is
 * touched after it. */
static void h1conn_finish(h1conn_t *c, h1conn_outcome_t outcome, int os_errno, const char *error)
{
    h1conn_result_t res;
    h1conn_done_cb *cb = c->cb;

    if (c->wr != NULL)
        event_del(c->wr);
    c->busy = 0;
    c->cb = NULL;
    if (outcome != H1CONN_ANSWER || c->sent < c->head_len + c->body_len)
        c->reusable = 0; /* an answer before the whole request went out ends the connection */
    if (outcome != H1CONN_ANSWER)
        c->broken = 1;
    memset(&res, 0, sizeof(res));
    res.outcome = outcome;
    res.answer = &c->ans;
    res.os_errno = os_errno;
    res.error = error;
    if (outcome == H1CONN_TLS_FAILED)
        res.verify = SSL_get_verify_result(c->ssl);
    cb(c->arg, c, &res);
}

/* Waits for room in the socket. 0, or -1 when the exchange ended. */
static int h1conn_wait_writable(h1conn_t *c)
{
    if (c->wr == NULL)
        c->wr =
            event_new(event_get_base(&c->rd), c->fd, EV_WRITE | EV_PERSIST, h1conn_on_writable, c);
    if (c->wr != NULL && event_add(c->wr, NULL) == 0)
        return 0;
    h1conn_finish(c, c->sent == 0 ? H1CONN_STALE : H1CONN_SEND_FAILED, ENOMEM, "out of memory");
    return -1;
}

/* The write failed with errno err (0: the peer closed) after c->sent bytes. */
static void h1conn_send_failed(h1conn_t *c, int err)
{
    /* A kept-alive connection the peer closed meanwhile refuses the first byte: nothing went
     * out, and another connection may carry the request. */
    if (c->sent == 0)
        h1conn_finish(c, H1CONN_STALE, err,
                      c->answered ? "the kept-alive connection was closed"
                                  : "the connection was closed");
    else
        h1conn_finish(c, H1CONN_SEND_FAILED, err, "sending the request failed");
}

/* Writes what the socket takes. 1: all of the request is out; 0: waiting; -1: ended. */
static int h1conn_send_more(h1conn_t *c)
{
    while (c->sent < c->head_len + c->body_len) {
        ssize_t n;

        if (c->ssl != NULL) {
            int k, err;
            ERR_clear_error();
            k = SSL_write(c->ssl, c->head + c->sent, (int)(c->head_len - c->sent));
            if (k > 0) {
                c->sent += (size_t)k;
                continue;
            }
            err = SSL_get_error(c->ssl, k);
            if (err == SSL_ERROR_WANT_WRITE)
                return h1conn_wait_writable(c);
            if (err == SSL_ERROR_WANT_READ)
                return 0; /* h1conn_on_readable sends on */
            h1conn_send_failed(c, err == SSL_ERROR_SYSCALL ? errno : 0);
            return -1;
        } else {
            struct iovec iov[2];
            struct msghdr msg;
            int k = 0;
            if (c->sent < c->head_len) {
                iov[k].iov_base = (char *)c->head + c->sent;
                iov[k++].iov_len = c->head_len - c->sent;
            }
            if (c->body_len > 0) {
                size_t off = c->sent > c->head_len ? c->sent - c->head_len : 0;
                iov[k].iov_base = (char *)c->body + off;
                iov[k++].iov_len = c->body_len - off;
            }
            memset(&msg, 0, sizeof(msg));
            msg.msg_iov = iov;
            msg.msg_iovlen = (size_t)k;
            n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        if (n > 0) {
            c->sent += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return h1conn_wait_writable(c);
        h1conn_send_failed(c, n < 0 ? errno : 0);
        return -1;
    }
    if (c->wr != NULL)
        event_del(c->wr);
    return 1;
}

/* Goes on with the TLS handshake. 1: done; 0: waiting for the socket; -1: ended. */
static int h1conn_handshake(h1conn_t *c)
{
    handshake_failure_t failure;

    switch (handshake_step(c->ssl, &failure)) {
    case HANDSHAKE_DONE:
        c->shaken = 1;
        /* fall through */
    case HANDSHAKE_WANT_READ:
        if (c->wr != NULL)
            event_del(c->wr);
        return c->shaken;
    case HANDSHAKE_WANT_WRITE:
        return h1conn_wait_writable(c);
    default:
        h1conn_finish(c, H1CONN_TLS_FAILED, failure.os_errno, failure.why);
        return -1;
    }
}

/* The request goes out, after the handshake over TLS. */
static void h1conn_proceed(h1conn_t *c)
{
    if (c->ssl != NULL && !c->shaken && h1conn_handshake(c) != 1)
        return;
    h1conn_send_more(c);
}

static void h1conn_on_writable(evutil_socket_t fd, short what, void *arg)
{
    h1conn_t *c = arg;

    (void)fd;
    (void)what;
    if (c->busy)
        h1conn_proceed(c);
}

/* The answer ended (or broke) with this result of the parser. */
static void h1conn_answer_ended(h1conn_t *c, int rc)
{
    switch (rc) {
    case H1RESP_DONE:
        c->answered = 1;
        c->reusable = c->ans.keep_alive != 0;
        h1conn_finish(c, H1CONN_ANSWER, 0, "");
        return;
    case H1RESP_TOO_LARGE:
        h1conn_finish(c, H1CONN_TOO_LARGE, 0, c->ans.error);
        return;
    default:
        h1conn_finish(c, H1CONN_BAD_ANSWER, 0, c->ans.error);
        return;
    }
}

/* The peer closed, or reset, the connection during an exchange. */
static void h1conn_peer_gone(h1conn_t *c, int os_errno)
{
    int rc;

    if (!h1resp_started(&c->ans)) {
        if (c->sent < c->head_len + c->body_len)
            h1conn_send_failed(c, os_errno);
        else
            h1conn_finish(c, H1CONN_NO_ANSWER, os_errno, "the connection closed before any answer");
        return;
    }
    if (os_errno != 0) {
        h1conn_finish(c, H1CONN_RECV_FAILED, os_errno, "the connection failed during the answer");
        return;
    }
    rc = h1resp_eof(&c->ans);
    if (rc == H1RESP_DONE) {
        c->answered = 1;
        c->reusable = 0;
        h1conn_finish(c, H1CONN_ANSWER, 0, "");
    } else {
        h1conn_finish(c, H1CONN_RECV_FAILED, 0, c->ans.error);
    }
}

/* Reads once. > 0: bytes in buf; 0: the peer closed (*err its errno or 0); -1: nothing yet
 * (over TLS: maybe a handshake message, such as a session ticket, was read); -2: failed
 * (*err, *why). */
static ssize_t h1conn_read_some(h1conn_t *c, char *buf, size_t size, int *err, const char **why)
{
    *err = 0;
    *why = "";
    if (c->ssl != NULL) {
        int k, e;
        ERR_clear_error();
        k = SSL_read(c->ssl, buf, (int)size);
        if (k > 0)
            return k;
        e = SSL_get_error(c->ssl, k);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            return -1;
        if (e == SSL_ERROR_ZERO_RETURN)
            return 0;
        c->broken = 1;
        if (e == SSL_ERROR_SYSCALL) {
            *err = errno;
            return *err == 0 ? 0 : -2;
        }
        *why = ERR_reason_error_string(ERR_peek_last_error());
        if (*why == NULL)
            *why = "TLS error";
        return -2;
    }
    for (;;) {
        ssize_t n = recv(c->fd, buf, size, 0);
        if (n >= 0)
            return n;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return -1;
        *err = errno;
        return -2;
    }
}

static void h1conn_on_readable(evutil_socket_t fd, short what, void *arg)
{
    h1conn_t *c = arg;
    char buf[READ_CHUNK];
    const char *why;
    int err;

    (void)fd;
    (void)what;
    if (!c->busy) {
        /* Parked. Over TLS a session ticket may come after the handshake: read, it is nothing
         * to act on. Anything else (bytes, the close) ends the connection. */
        if (c->ssl != NULL && h1conn_read_some(c, buf, sizeof(buf), &err, &why) == -1)
            return;
        c->reusable = 0;
        c->on_idle(c->idle_arg, c); /* frees c */
        return;
    }
    if (c->ssl != NULL && !c->shaken) {
        h1conn_proceed(c);
        return;
    }
    if (c->sent < c->head_len + c->body_len && c->ssl != NULL && h1conn_send_more(c) < 0)
        return; /* SSL_write wanted to read first; or the exchange ended */
    for (;;) {
        ssize_t n = h1conn_read_some(c, buf, sizeof(buf), &err, &why);
        size_t used = 0;
        int rc;

        if (n == -1)
            return;
        if (n == -2) {
            if (h1resp_started(&c->ans) || *why)
                h1conn_finish(c, H1CONN_RECV_FAILED, err, *why ? why : "reading the answer failed");
            else
                h1conn_peer_gone(c, err);
            return;
        }
        if (n == 0) {
            h1conn_peer_gone(c, err);
            return;
        }
        rc = h1resp_feed(&c->ans, buf, (size_t)n, &used);
        if (rc != H1RESP_MORE) {
            if (rc == H1RESP_DONE && used < (size_t)n)
                c->ans.keep_alive = 0; /* bytes past the answer: nobody asked for them */
            h1conn_answer_ended(c, rc);
            return;
        }
        /* Over cleartext, a read that did not fill the buffer took all there was: the next
         * bytes come with the next readiness, without a recv that would only say "nothing
         * yet". Over TLS a short read is one record, and more may be held: read on. */
        if (c->ssl == NULL && (size_t)n < sizeof(buf))
            return;
    }
}

static void h1conn_exchange(h1conn_t *c, const char *head, size_t head_len, const char *body,
                            size_t body_len, size_t max_answer, h1conn_done_cb *cb, void *arg)
{
    c->head = head;
    c->head_len = head_len;
    c->body = body;
    c->body_len = body ? body_len : 0;
    c->sent = 0;
    c->cb = cb;
    c->arg = arg;
    c->busy = 1;
    c->reusable = 0;
    if (c->ans_live)
        h1resp_release(&c->ans);
    h1resp_init(&c->ans, max_answer, 0);
    c->ans_live = 1;
    h1conn_proceed(c);
}

static void h1conn_abandon(h1conn_t *c)
{
    if (c->wr != NULL)
        event_del(c->wr);
    c->busy = 0;
    c->cb = NULL;
    c->reusable = 0;
    c->broken = 1;
}

static int h1conn_reusable(const h1conn_t *c)
{
    /* over TLS, only when OpenSSL holds nothing more of the socket (see the top) */
    return c->reusable && (c->ssl == NULL || !SSL_has_pending(c->ssl));
}

static void h1conn_park(h1conn_t *c, int64_t now_ms)
{
    if (c->ans_live) {
        h1resp_release(&c->ans);
        c->ans_live = 0;
    }
    if (c->wr != NULL) {
        event_free(c->wr);
        c->wr = NULL;
    }
    c->parked_at = now_ms;
}

/* ---- the client ---- */

typedef struct upstream_shard upstream_shard_t;

typedef struct upstream_origin upstream_origin_t;

/* A URL parsed for CURLOPT_CURLU, kept for the next calls to the same URL. Owned by its
 * upstream_t (urls, by hash of the text); its transfers in flight hold a reference each, as curl
 * may read it until the transfer ends. */
typedef struct upstream_url {
    char *text;    /* owned; NULL when the slot holds nothing */
    CURLU *parsed; /* owned */
    unsigned refs;
    /* A plain http:// URL (see h1_form) goes over our own HTTP/1.1 connections: */
    upstream_origin_t *origin; /* its host and port, or NULL: curl carries it */
    const char *target;        /* in text: the request target ("/..."), "" for "/" */
    const char *host;          /* in text: the Host field's value ... */
    size_t host_len;           /* ... this long (with the port, when not the scheme's own) */
} upstream_url_t;

/* A host and port, with its parked HTTP/1.1 connections (newest first). Owned by
 * its upstream_t (origins list), kept until upstream_free. */
struct upstream_origin {
    char *key;  /* "host:port", the host in lower case */
    char *host; /* the host alone, over TLS: the name the certificate must hold, and SNI's */
    int tls;
    int host_is_ip;
    SSL_SESSION *session; /* the newest TLS session (ticket) its connections got, owned */
    h1conn_t *parked;
    size_t n_parked;
    /* With the HTTP/2 setting, over TLS: its HTTP/2 connections (h2conn), owned, each freed
     * when it is gone (on_h2_gone) or idle too long; no_h2 once the platform chose HTTP/1.1. */
    h2conn_t **h2;
    size_t n_h2, cap_h2;
    uint32_t h2_streams; /* streams at once its platform allowed last (0: not yet told) */
    int no_h2;
    upstream_origin_t *next;
};

typedef enum {
    H1_OFF = 0,  /* curl carries the transfer */
    H1_KICK,     /* started, waiting for its turn of the loop */
    H1_CONNECT,  /* curl connects a socket for it (CURLOPT_CONNECT_ONLY) */
    H1_EXCHANGE, /* its request and answer on an h1conn */
    H2_STREAM,   /* a stream of an h2conn (whose socket it may be connecting: dialing) */
} h1_phase_t;

/* Owned by its upstream_t (socks, by descriptor): created on curl's first wish for a socket,
 * freed on CURL_POLL_REMOVE, or, when parked, when curl closes the socket. What curl wished last
 * is in the event's flags, and one socket per platform call waits at a time. */
typedef struct upstream_sock {
    struct event ev;
    upstream_shard_t *sh;
    /* Curl let the socket go (CURL_POLL_REMOVE) when its connection went back to the pool, and
     * wants it again for the next call on that connection: the event stays registered
     * meanwhile, so that a kept-alive connection costs no epoll_ctl per call (see park). */
    int parked;
} upstream_sock_t;

/* Owned by upstream_t: in flight from upstream_start until its callback or cancel, then kept
 * on the free list with its easy handle. */
struct upstream_xfer {
    upstream_t *up;
    upstream_shard_t *shard; /* the multi handle it runs on, while in flight */
    CURL *easy;
    struct curl_slist *headers; /* owned, unless it is up->json_headers */
    upstream_url_t *url;        /* the parsed URL curl was given, while in flight; or NULL */
    char *body;                 /* the request body, owned */
    upstream_cb *cb;
    void *arg;
    char *buf; /* the answer body */
    size_t len, cap, max;
    char retry_after[32];
    long hop;      /* redirects followed at the last pre-request check, -1 before it */
    long hop_sent; /* request bytes curl had counted when this hop's first attempt began */
    unsigned flags;
    /* as bits: a record per transfer in flight, thousands at once (bench/README.md) */
    unsigned has_retry_after : 1, blocked : 1, too_large : 1;
    unsigned resend_refused : 1; /* curl wanted to send the request again after it went out */
    upstream_xfer_t *next;       /* free list */
    /* over our own HTTP/1.1 connection (h1_phase not H1_OFF): */
    h1_phase_t h1_phase;
    upstream_origin_t *origin;
    h1conn_t *link;         /* during H1_EXCHANGE */
    struct event *h1_timer; /* the kick, then the deadline; kept with the record */
    char *head;             /* the request head, owned, kept with the record */
    size_t head_len, head_cap;
    size_t body_len;
    int64_t started_us, deadline_us;
    int h1_tries;
    unsigned link_reused : 1; /* the connection carried an answer before this request */
    /* over our own HTTP/2 (H2_STREAM): */
    h2conn_stream_t *stream;
    h2conn_t *dialing; /* the connection whose socket curl connects for it (H1_CONNECT) */
};

/* Owned by its upstream_t. */
struct upstream_shard {
    upstream_t *up;
    CURLM *multi;
    struct event *timer;
    size_t in_flight;
    int in_curl; /* inside curl_multi_socket_action, called from on_event or on_curl_timeout */
};

/* Owned by its worker. */
struct upstream {
    struct event_base *base;
    upstream_config_t cfg;
    upstream_shard_t *shards[SHARDS_MAX];
    int n_shards;
    size_t in_flight;
    upstream_xfer_t *spare;
    int proxy_env;                   /* the environment names a proxy: let curl use it */
    struct curl_slist *json_headers; /* the usual list, shared: JSON content type, no Expect */
    CURLSH *share;                   /* TLS sessions and DNS answers of all its transfers */
    upstream_sock_t **socks;         /* by descriptor: the sockets curl gave us, parked ones too */
    int n_socks;
    upstream_url_t urls[URL_SLOTS];
    upstream_origin_t *origins;
    CURL *spare_easy[SPARE_EASY];
    SSL_CTX *tls; /* our own HTTP/1.1 and HTTP/2 over TLS (platform client), or NULL */
    int n_spare_easy;
    curl_socket_t adopting; /* the socket curl connected for us, while curl lets it go */
    int adopted;            /* curl "closed" it meanwhile, leaving it open for us */
};

static void check_done(upstream_shard_t *sh);
static SSL_CTX *tls_ctx_take(const char *ca_file);
static void tls_ctx_give(SSL_CTX *ctx);

/* Lets curl act on a socket (or on its timeout), then hands up what it finished. */
static void multi_act(upstream_shard_t *sh, curl_socket_t fd, int action)
{
    int running;

    sh->in_curl = 1;
    curl_multi_socket_action(sh->multi, fd, action, &running);
    sh->in_curl = 0;
    check_done(sh);
}

static void on_event(evutil_socket_t fd, short what, void *arg)
{
    upstream_sock_t *sk = arg;
    int action = 0;

    if (sk->parked) {
        /* an idle connection became readable: the peer closed it (or sent what nobody asked
         * for). Curl finds it dead before it reuses it; until then the event is off, or it
         * would wake the loop on every turn. */
        event_del(&sk->ev);
        return;
    }
    if (what & EV_READ)
        action |= CURL_CSELECT_IN;
    if (what & EV_WRITE)
        action |= CURL_CSELECT_OUT;
    multi_act(sk->sh, fd, action); /* may free sk */
}

static void on_curl_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    multi_act(arg, CURL_SOCKET_TIMEOUT, 0);
}

static void sock_free(upstream_t *up, curl_socket_t s, upstream_sock_t *sk)
{
    event_del(&sk->ev);
    if (s >= 0 && s < up->n_socks && up->socks[s] == sk)
        up->socks[s] = NULL;
    free(sk);
}

/* Whether a socket curl lets go may stay registered until curl wants it again. Only the socket
 * of a connection going back to the pool after an answer, which curl closes through
 * on_close_socket: such a transfer has an HTTP status, and waited only to read. Curl's other
 * sockets (the threaded resolver's wake-up pipe, read-only too) are closed by curl itself,
 * unseen: an event left on one would make libevent believe a later socket of the same number
 * is already registered. A redirect's next hop resolves after the first hop's status, so
 * transfers that follow redirects never park. */
static int can_park(CURL *easy, const upstream_sock_t *sk)
{
    upstream_xfer_t *x = NULL;
    long status = 0;

    if (easy == NULL || (event_get_events(&sk->ev) & (EV_READ | EV_WRITE)) != EV_READ)
        return 0;
    if (curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x) != CURLE_OK || x == NULL ||
        (x->flags & UPSTREAM_FOLLOW))
        return 0;
    return curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK && status > 0;
}

/* Remembers sk as the socket s, for when curl gives s back (parked) or closes it. */
static int sock_keep(upstream_t *up, curl_socket_t s, upstream_sock_t *sk)
{
    if (s >= up->n_socks) {
        int n = up->n_socks ? up->n_socks : 64;
        upstream_sock_t **socks;
        while (n <= s)
            n *= 2;
        if ((socks = realloc(up->socks, (size_t)n * sizeof(*socks))) == NULL)
            return -1;
        memset(socks + up->n_socks, 0, (size_t)(n - up->n_socks) * sizeof(*socks));
        up->socks = socks;
        up->n_socks = n;
    }
    up->socks[s] = sk;
    return 0;
}

/* curl's socket callback: never returns -1 (that would abort every transfer). */
static int on_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    upstream_shard_t *sh = userp;
    upstream_t *up = sh->up;
    upstream_sock_t *sk = socketp;
    short kind;

    if (what == CURL_POLL_REMOVE) {
        if (sk != NULL && can_park(easy, sk))
            sk->parked = 1;
        else if (sk != NULL)
            sock_free(up, s, sk);
        return 0;
    }
    kind = EV_PERSIST | ((what & CURL_POLL_IN) ? EV_READ : 0) |
           ((what & CURL_POLL_OUT) ? EV_WRITE : 0);
    if (sk == NULL && s >= 0 && s < up->n_socks && up->socks[s] != NULL) {
        sk = up->socks[s]; /* a parked connection's socket, back in use */
        sk->parked = 0;
        curl_multi_assign(sh->multi, s, sk);
        if (sk->sh == sh && event_get_events(&sk->ev) == kind &&
            event_pending(&sk->ev, EV_READ | EV_WRITE, NULL))
            return 0; /* registered as curl wants it: no epoll_ctl */
        event_del(&sk->ev);
    } else if (sk == NULL) {
        if ((sk = calloc(1, sizeof(*sk))) == NULL)
            return 0;
        if (sock_keep(up, s, sk) < 0) {
            free(sk);
            return 0;
        }
        curl_multi_assign(sh->multi, s, sk);
    } else if (event_get_events(&sk->ev) == kind) {
        return 0; /* unchanged: keep the event as it is */
    } else {
        event_del(&sk->ev); /* event_assign on a pending event corrupts libevent */
    }
    sk->sh = sh;
    event_assign(&sk->ev, up->base, s, kind, on_event, sk);
    event_add(&sk->ev, NULL);
    return 0;
}

/* Curl closes a connection's socket: a parked event goes first, while the descriptor is still
 * this socket's. */
static int on_close_socket(void *arg, curl_socket_t s)
{
    upstream_t *up = arg;

    if (s >= 0 && s < up->n_socks && up->socks[s] != NULL)
        sock_free(up, s, up->socks[s]);
    if (s == up->adopting) {
        up->adopted = 1; /* ours now: h1conn closes it */
        return 0;
    }
    return close(s);
}

/* curl's timer callback: only arms a libevent timer, never calls curl itself. "Now" for a
 * new transfer makes the timer active at once, so that curl runs at the end of this loop
 * iteration, after the callbacks already due, instead of in the next one: one pass of
 * epoll_wait less between a request's Redis answer and its platform call. Asked from inside
 * curl's own run, "now" waits for the next iteration as before, so that a transfer that
 * keeps asking cannot keep the loop from polling its sockets. */
static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    upstream_shard_t *sh = userp;
    struct timeval tv;

    (void)multi;
    if (timeout_ms < 0) {
        event_del(sh->timer);
        return 0;
    }
    if (timeout_ms == 0 && !sh->in_curl) {
        event_del(sh->timer);
        event_active(sh->timer, EV_TIMEOUT, 0);
        return 0;
    }
    tv.tv_sec = timeout_ms / 1000;
    tv.tv_usec = (timeout_ms % 1000) * 1000;
    event_add(sh->timer, &tv);
    return 0;
}

static size_t on_write(char *data, size_t size, size_t n, void *arg)
{
    upstream_xfer_t *x = arg;
    size_t bytes = size * n;

    if (x->len + bytes > x->max) {
        x->too_large = 1;
        return 0; /* makes curl fail the transfer with CURLE_WRITE_ERROR */
    }
    if (x->len + bytes + 1 > x->cap) {
        /* from 256 bytes: a platform's usual answer is a hundred or two, and the buffer stays
         * with the transfer record, one per send in flight */
        size_t cap = x->cap ? x->cap : 256;
        char *buf;
        while (cap < x->len + bytes + 1)
            cap *= 2;
        if ((buf = realloc(x->buf, cap)) == NULL)
            return 0;
        x->buf = buf;
        x->cap = cap;
    }
    memcpy(x->buf + x->len, data, bytes);
    x->len += bytes;
    return bytes;
}

static size_t on_header(char *line, size_t size, size_t n, void *arg)
{
    upstream_xfer_t *x = arg;
    size_t bytes = size * n, vlen;

    /* A new status line (redirect, 100 Continue) starts a new header block. */
    if (bytes > 5 && strncmp(line, "HTTP/", 5) == 0)
        x->has_retry_after = 0;
    if (bytes > 12 && strncasecmp(line, "Retry-After:", 12) == 0) {
        const char *v = line + 12;
        while (v < line + bytes && (*v == ' ' || *v == '\t'))
            v++;
        vlen = (size_t)(line + bytes - v);
        while (vlen > 0 && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' '))
            vlen--;
        if (vlen < sizeof(x->retry_after)) {
            memcpy(x->retry_after, v, vlen);
            x->retry_after[vlen] = '\0';
            x->has_retry_after = 1;
        }
    }
    return bytes;
}

static curl_socket_t open_socket(upstream_t *up, const struct curl_sockaddr *addr)
{
    curl_socket_t s = socket(addr->family, addr->socktype, addr->protocol);

    /* A record under this number would be of a socket curl closed without telling: never
     * take it for this one. */
    if (s >= 0 && s < up->n_socks && up->socks[s] != NULL)
        sock_free(up, s, up->socks[s]);
    return s;
}

static curl_socket_t on_open_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *addr)
{
    upstream_xfer_t *x = arg;

    (void)purpose;
    return open_socket(x->up, addr);
}

static curl_socket_t on_open_guarded(void *arg, curlsocktype purpose, struct curl_sockaddr *addr)
{
    upstream_xfer_t *x = arg;

    (void)purpose;
    if (netguard_blocked(&addr->addr)) {
        x->blocked = 1;
        return CURL_SOCKET_BAD;
    }
    return open_socket(x->up, addr);
}

/* Called before each attempt of a request, once the connection (and a proxy's CONNECT) is up.
 * libcurl 7.88 sends a request again, up to five times, when a reused connection dies before
 * the answer starts ("Connection died, retrying a fresh connect"), even when the request went
 * out whole: the platform may have received it, and a second attempt would deliver the message
 * twice. Request bytes written since this hop's first attempt began mean exactly that: the
 * attempt is refused.
 *
 * curl's request size adds up over the whole transfer: every redirect hop's request and every
 * proxy CONNECT (lib/http_proxy.c) count in it, and only curl_multi_add_handle resets it. A
 * followed redirect raises the redirect count (Curl_follow, FOLLOW_REDIR) and a resend does
 * not (FOLLOW_RETRY), so a changed count starts a new hop whose bytes so far are the baseline.
 * A resend on a new connection through a proxy counts that connection's CONNECT too: such an
 * attempt is refused even when nothing of the request had gone out, never sent twice. */
static int on_prereq(void *arg, char *primary_ip, char *local_ip, int primary_port, int local_port)
{
    upstream_xfer_t *x = arg;
    long sent = 0, hop = 0;

    (void)primary_ip;
    (void)local_ip;
    (void)primary_port;
    (void)local_port;
    curl_easy_getinfo(x->easy, CURLINFO_REQUEST_SIZE, &sent);
    curl_easy_getinfo(x->easy, CURLINFO_REDIRECT_COUNT, &hop);
    if (hop != x->hop) {
        x->hop = hop;
        x->hop_sent = sent;
        return CURL_PREREQFUNC_OK;
    }
    if (sent > x->hop_sent) {
        x->resend_refused = 1;
        return CURL_PREREQFUNC_ABORT;
    }
    return CURL_PREREQFUNC_OK;
}

static CURL *easy_new(upstream_t *up, upstream_xfer_t *x)
{
    CURL *e = curl_easy_init();

    if (e == NULL)
        return NULL;
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 3L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    /* curl allocates this receive buffer for every transfer in flight: 16 KiB by default,
     * far more than a platform's answer needs when thousands wait at once. */
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, up->cfg.buffer_size > 0 ? up->cfg.buffer_size : 16384L);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, x);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, up);
    curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, on_prereq);
    curl_easy_setopt(e, CURLOPT_PREREQDATA, x);
    /* Without a share every easy handle gets its own TLS session cache, allocated on its
     * first transfer even for plain HTTP (about 900 bytes per handle, and there is a handle
     * per transfer in flight), and a new connection resumes a TLS session only when the
     * handle that happens to open it made one before. The share holds one cache for all. */
    curl_easy_setopt(e, CURLOPT_SHARE, up->share);
    if (up->cfg.ca_file != NULL && up->cfg.ca_file[0] != '\0')
        curl_easy_setopt(e, CURLOPT_CAINFO, up->cfg.ca_file);
    if (up->cfg.http1)
        curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    /* Platform calls use the proxy the environment names. URLs users give never do: the SSRF
     * guard would see the proxy's address instead of the one the proxy then reaches, and a
     * proxy would fetch cloud metadata for anyone who asks. Without proxy variables, tell
     * curl so: it would otherwise read them and parse the URL for them on every transfer.
     * An empty no-proxy list too: without one, libcurl 7.88 reads no_proxy and NO_PROXY from
     * the environment on every transfer (a walk of the whole environment each, which a
     * container's injected service variables make long), only to find there is no proxy to
     * skip. With a proxy in use, NO_PROXY is left for curl to read, as the user set it. */
    if (!up->proxy_env || up->cfg.direct) {
        curl_easy_setopt(e, CURLOPT_PROXY, "");
        curl_easy_setopt(e, CURLOPT_NOPROXY, "");
    }
    return e;
}

/* An easy handle for x: a spare one made over to x, or a new one. A transfer over our own
 * HTTP/1.1 needs one only while curl connects its socket, and gives it back then (easy_give):
 * thousands of sends in flight on kept-alive connections hold no easy handle (5 KiB each). */
static CURL *easy_take(upstream_t *up, upstream_xfer_t *x)
{
    CURL *e = up->spare_easy[up->n_spare_easy > 0 ? up->n_spare_easy - 1 : 0];

    if (up->n_spare_easy == 0)
        return easy_new(up, x);
    up->n_spare_easy--;
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, x);
    curl_easy_setopt(e, CURLOPT_PREREQDATA, x);
    return e;
}

static void easy_give(upstream_t *up, upstream_xfer_t *x)
{
    if (up->n_spare_easy < SPARE_EASY)
        up->spare_easy[up->n_spare_easy++] = x->easy;
    else
        curl_easy_cleanup(x->easy);
    x->easy = NULL;
}

static void shard_free(upstream_shard_t *sh)
{
    if (sh == NULL)
        return;
    if (sh->multi != NULL)
        curl_multi_cleanup(sh->multi);
    if (sh->timer != NULL)
        event_free(sh->timer);
    free(sh);
}

static upstream_shard_t *shard_new(upstream_t *up)
{
    upstream_shard_t *sh = calloc(1, sizeof(*sh));

    if (sh == NULL)
        return NULL;
    sh->up = up;
    sh->multi = curl_multi_init();
    sh->timer = evtimer_new(up->base, on_curl_timeout, sh);
    if (sh->multi == NULL || sh->timer == NULL) {
        shard_free(sh);
        return NULL;
    }
    curl_multi_setopt(sh->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(sh->multi, CURLMOPT_SOCKETDATA, sh);
    curl_multi_setopt(sh->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(sh->multi, CURLMOPT_TIMERDATA, sh);
    /* idle connections kept for reuse; a little more than the shard runs at once */
    curl_multi_setopt(sh->multi, CURLMOPT_MAXCONNECTS, (long)(SHARD_XFERS * 2));
    /* HTTP/2: a shard's transfers fit on one connection when the platform allows as many
     * streams (curl's own limit is 100). libcurl 7.88 gives every transfer past a full
     * connection a new one while the next is still connecting, one per transfer. */
    curl_multi_setopt(sh->multi, CURLMOPT_MAX_CONCURRENT_STREAMS, (long)SHARD_XFERS);
    return sh;
}

/* The first shard with room, so that light load stays on one connection pool; a new shard
 * when all are full; the least busy one past SHARDS_MAX. */
static upstream_shard_t *pick_shard(upstream_t *up)
{
    upstream_shard_t *least = NULL;

    for (int i = 0; i < up->n_shards; i++) {
        upstream_shard_t *sh = up->shards[i];
        if (sh->in_flight < SHARD_XFERS)
            return sh;
        if (least == NULL || sh->in_flight < least->in_flight)
            least = sh;
    }
    if (up->n_shards < SHARDS_MAX) {
        upstream_shard_t *sh = shard_new(up);
        if (sh != NULL) {
            up->shards[up->n_shards++] = sh;
            return sh;
        }
    }
    return least;
}

static const char *const proxy_vars[] = {"http_proxy",  "HTTP_PROXY", "https_proxy",
                                         "HTTPS_PROXY", "all_proxy",  "ALL_PROXY"};

upstream_t *upstream_new(struct event_base *base, const upstream_config_t *cfg)
{
    upstream_t *up = calloc(1, sizeof(*up));

    if (up == NULL)
        return NULL;
    up->base = base;
    up->cfg = *cfg;
    for (size_t i = 0; i < sizeof(proxy_vars) / sizeof(proxy_vars[0]); i++)
        if (getenv(proxy_vars[i]) != NULL && getenv(proxy_vars[i])[0] != '\0')
            up->proxy_env = 1;
    up->adopting = CURL_SOCKET_BAD;
    if ((up->json_headers = curl_slist_append(NULL, ADAPTER_JSON_HEADER)) != NULL &&
        (curl_slist_append(up->json_headers, "Expect:") == NULL ||
         curl_slist_append(up->json_headers, USER_AGENT) == NULL)) {
        curl_slist_free_all(up->json_headers);
        up->json_headers = NULL;
    }
    /* Only this worker's thread uses the share: no lock callbacks. */
    if ((up->share = curl_share_init()) != NULL &&
        (curl_share_setopt(up->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK ||
         curl_share_setopt(up->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK)) {
        curl_share_cleanup(up->share);
        up->share = NULL;
    }
    /* our own HTTP/1.1 and HTTP/2 over TLS, for the platforms (user URLs stay curl's) */
    if (!cfg->guard && (up->tls = tls_ctx_take(cfg->ca_file)) == NULL) {
        upstream_free(up);
        return NULL;
    }
    if (up->json_headers == NULL || up->share == NULL || pick_shard(up) == NULL) {
        upstream_free(up);
        return NULL;
    }
    return up;
}

static void xfer_release(upstream_xfer_t *x)
{
    upstream_t *up = x->up;

    if (x->shard != NULL)
        x->shard->in_flight--;
    x->shard = NULL;
    if (x->h1_timer != NULL)
        event_del(x->h1_timer);
    x->h1_phase = H1_OFF;
    x->link = NULL;
    x->origin = NULL;
    x->stream = NULL;
    x->dialing = NULL;
    if (x->headers != up->json_headers)
        curl_slist_free_all(x->headers);
    x->headers = NULL;
    if (x->url != NULL)
        x->url->refs--;
    x->url = NULL;
    free(x->body);
    x->body = NULL;
    x->cb = NULL;
    x->len = 0;
    /* The answer buffer goes with the answer: a transfer that waits for its platform holds
     * none (thousands wait at once), and a media answer's megabytes are not kept. */
    free(x->buf);
    x->buf = NULL;
    x->cap = 0;
    x->next = up->spare;
    up->spare = x;
    up->in_flight--;
}

static void origin_close_parked(upstream_origin_t *o)
{
    h1conn_t *c;

    while ((c = o->parked) != NULL) {
        o->parked = c->next;
        h1conn_free(c);
    }
    o->n_parked = 0;
}

void upstream_free(upstream_t *up)
{
    upstream_xfer_t *x;
    upstream_origin_t *o;

    if (up == NULL)
        return;
    /* Transfers still in flight are the owners' to cancel first; free only the spares. */
    while ((x = up->spare) != NULL) {
        up->spare = x->next;
        if (x->easy != NULL)
            curl_easy_cleanup(x->easy);
        if (x->h1_timer != NULL)
            event_free(x->h1_timer);
        free(x->head);
        free(x->buf);
        free(x);
    }
    while (up->n_spare_easy > 0)
        curl_easy_cleanup(up->spare_easy[--up->n_spare_easy]);
    while ((o = up->origins) != NULL) {
        up->origins = o->next;
        origin_close_parked(o);
        for (size_t i = 0; i < o->n_h2; i++)
            h2conn_free(o->h2[i]);
        free(o->h2);
        SSL_SESSION_free(o->session);
        free(o->host);
        free(o->key);
        free(o);
    }
    for (int i = 0; i < up->n_shards; i++)
        shard_free(up->shards[i]); /* closes the pool's connections: on_close_socket */
    for (int s = 0; s < up->n_socks; s++)
        if (up->socks[s] != NULL)
            sock_free(up, s, up->socks[s]); /* curl leaked it, or never told of its close */
    free(up->socks);
    if (up->share != NULL)
        curl_share_cleanup(up->share); /* after every easy handle that used it */
    for (int i = 0; i < URL_SLOTS; i++) {
        curl_url_cleanup(up->urls[i].parsed); /* after the easy handles that point to them */
        free(up->urls[i].text);
    }
    curl_slist_free_all(up->json_headers);
    tls_ctx_give(up->tls); /* after every connection made with it */
    free(up);
}

/* Our own HTTP/1.1 (or HTTP/2) carries a platform call only straight to the platform (no proxy,
 * whose CONNECT and authentication stay curl's), without following redirects, and only on the
 * platform client (the user-URL client's every connection passes the SSRF guard, which curl
 * applies). */
static int h1_allowed(const upstream_t *up, const char *url, unsigned flags)
{
    return !up->cfg.guard && !(flags & UPSTREAM_FOLLOW) && (!up->proxy_env || up->cfg.direct) &&
           (strncmp(url, "http://", 7) == 0 ||
            (up->tls != NULL && strncmp(url, "https://", 8) == 0));
}

static int is_alnum(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
}

static int is_hex(unsigned char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
}

/* A byte of a path or query that goes out as it is (RFC 3986: unreserved, sub-delims, ":",
 * "@", "/", "?", and "%" before two hex digits, checked by the caller). */
static int is_target_char(unsigned char ch)
{
    return is_alnum(ch) || (ch != '\0' && strchr("-._~!$&'()*+,;=:@/?%", ch) != NULL);
}

/* Whether the path has a "." or ".." segment, which curl would remove before sending. */
static int has_dot_segment(const char *t, size_t len)
{
    size_t i = 0;

    while (i < len && t[i] != '?') {
        size_t j = i + 1; /* t[i] is '/' */
        while (j < len && t[j] != '/' && t[j] != '?')
            j++;
        if ((j - i == 2 && t[i + 1] == '.') || (j - i == 3 && t[i + 1] == '.' && t[i + 2] == '.'))
            return 1;
        i = j;
    }
    return 0;
}

static upstream_origin_t *origin_find(upstream_t *up, int tls, const char *host, size_t host_len,
                                      unsigned port)
{
    char num[NUMFMT_DEC_SIZE];
    const char *p = numfmt_dec(num, port);
    size_t plen = strlen(p), klen = host_len + 1 + plen;
    upstream_origin_t *o;
    char *key = malloc(klen + 1);

    if (key == NULL)
        return NULL;
    for (size_t i = 0; i < host_len; i++)
        key[i] = (char)(host[i] >= 'A' && host[i] <= 'Z' ? host[i] - 'A' + 'a' : host[i]);
    key[host_len] = ':';
    memcpy(key + host_len + 1, p, plen + 1);
    for (o = up->origins; o != NULL; o = o->next)
        if (o->tls == tls && strcmp(o->key, key) == 0) {
            free(key);
            return o;
        }
    if ((o = calloc(1, sizeof(*o))) == NULL || (o->host = malloc(host_len + 1)) == NULL) {
        free(o);
        free(key);
        return NULL;
    }
    memcpy(o->host, key, host_len);
    o->host[host_len] = '\0';
    o->host_is_ip = 1;
    for (size_t i = 0; i < host_len; i++)
        if (!((key[i] >= '0' && key[i] <= '9') || key[i] == '.'))
            o->host_is_ip = 0;
    o->tls = tls;
    o->key = key;
    o->next = up->origins;
    up->origins = o;
    return o;
}

/* Reads a URL slot's text as a plain http:// URL for our own HTTP/1.1: a host of letters,
 * digits, dots and hyphens, a port maybe, and a path and query that need no normalizing.
 * Anything else (user info, an IPv6 literal, a fragment, a dot segment, a byte curl would
 * refuse or encode) is left to curl, which knows every form. */
static void h1_form(upstream_t *up, upstream_url_t *u)
{
    int tls = u->text[4] == 's';
    const char *t = u->text + (tls ? 8 : 7), *host = t, *p;
    unsigned port = tls ? 443 : 80;
    size_t host_len, len;

    u->origin = NULL;
    while (is_alnum((unsigned char)*t) || *t == '.' || *t == '-')
        t++;
    host_len = (size_t)(t - host);
    if (host_len == 0 || host_len > 253)
        return;
    if (*t == ':') {
        const char *d = ++t;
        port = 0;
        while (*t >= '0' && *t <= '9' && t - d < 5)
            port = port * 10 + (unsigned)(*t++ - '0');
        if (t == d || port == 0 || port > 65535 || (*t >= '0' && *t <= '9'))
            return;
    }
    if (*t != '\0' && *t != '/' && *t != '?')
        return;
    len = strlen(t);
    for (p = t; *p != '\0'; p++) {
        if (!is_target_char((unsigned char)*p))
            return;
        if (*p == '%' && (!is_hex((unsigned char)p[1]) || !is_hex((unsigned char)p[2])))
            return;
    }
    if (*t == '/' && has_dot_segment(t, len))
        return;
    u->target = t;
    /* curl names the port in Host only when it is not the scheme's own */
    u->host = host;
    u->host_len = port == (tls ? 443u : 80u) ? host_len : (size_t)(t - host);
    u->origin = origin_find(up, tls, host, host_len, port);
}

/* The slot of a URL, parsed (for CURLOPT_CURLU) and read for our own HTTP/1.1, or NULL when a
 * slot held by another URL's transfers leaves the call to curl's own parse.
 *
 * Given only CURLOPT_URL, libcurl 7.88 parses the URL on every transfer and then prints it back
 * into a normalized string (curl_url_set, then curl_url_get with its printf engine: about
 * 17,000 instructions of a call's 80,000 in curl). Given both, it copies the parsed URL instead
 * and keeps CURLOPT_URL's text as the transfer's URL; a redirect's target is parsed as before.
 * A parse is kept for the next calls to the same URL (the same platform and token), shared by
 * all the transfers in flight to it: a copy per transfer would cost a few hundred bytes per
 * send in flight. */
static upstream_url_t *url_slot(upstream_t *up, const char *url)
{
    size_t len = strlen(url), tail = len < 24 ? len : 24;
    /* the slot by the URL's end, where calls to one platform differ (the token, the page) */
    upstream_url_t *u = &up->urls[(hash_fnv1a(url + len - tail, tail) ^ len) % URL_SLOTS];

    if (u->text == NULL || strcmp(u->text, url) != 0) {
        if (u->refs > 0)
            return NULL;
        free(u->text);
        u->text = NULL;
        u->origin = NULL;
        if (u->parsed == NULL && (u->parsed = curl_url()) == NULL)
            return NULL;
        /* the flags curl itself parses a URL of CURLOPT_URL with (lib/url.c) */
        if (curl_url_set(u->parsed, CURLUPART_URL, url,
                         CURLU_GUESS_SCHEME | CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK ||
            (u->text = malloc(len + 1)) == NULL)
            return NULL;
        memcpy(u->text, url, len + 1);
        if (h1_allowed(up, url, 0))
            h1_form(up, u);
    }
    return u;
}

/* For curl: the slot's parse, held by the transfer until it ends. */
static CURLU *parsed_url(upstream_t *up, upstream_xfer_t *x, const char *url)
{
    upstream_url_t *u = url_slot(up, url);

    if (u == NULL)
        return NULL;
    u->refs++;
    x->url = u;
    return u->parsed;
}

static int ascii_prefix(const char *s, const char *prefix)
{
    return strncasecmp(s, prefix, strlen(prefix)) == 0;
}

/* Appends n bytes at x->head + *at (room was counted first). */
static void put(upstream_xfer_t *x, size_t *at, const char *s, size_t n)
{
    memcpy(x->head + *at, s, n);
    *at += n;
}

/* The request head, as curl 7.88 writes one for the same call: request line, Host, Accept,
 * the call's own lines, then the body's length (and, as curl does for a body without a type
 * of its own, the form type). A line without a colon, or with CR, LF or an empty value (which
 * curl reads as "leave this field out"), leaves the call to curl. body_inside: the body too,
 * after the head (over TLS: one record). 0, or -1. */
static int h1_build_head(upstream_xfer_t *x, const upstream_url_t *u, const adapter_call_t *call,
                         int with_body, int body_inside)
{
    size_t inside = with_body && body_inside && call->body != NULL ? call->body_len : 0;
    static const char form[] = "Content-Type: application/x-www-form-urlencoded\r\n";
    const char *target = u->target[0] == '/' ? u->target : NULL;
    char num[NUMFMT_DEC_SIZE];
    const char *clen = numfmt_dec(num, (long long)(with_body ? call->body_len : 0));
    size_t need, at = 0, tlen = strlen(u->target);
    int typed = 0;

    need = strlen(call->method) + 1 + (target ? 0 : 1) + tlen + 11 + 6 + u->host_len + 2 + 13 +
           sizeof(USER_AGENT) - 1 + 2 + 2;
    for (int i = 0; i < ADAPTER_MAX_HEADERS && call->headers[i] != NULL; i++) {
        const char *h = call->headers[i], *colon = strchr(h, ':'), *v;
        if (colon == NULL || colon == h || strpbrk(h, "\r\n") != NULL)
            return -1;
        for (v = colon + 1; *v == ' ' || *v == '\t'; v++)
            ;
        if (*v == '\0')
            return -1;
        typed |= ascii_prefix(h, "Content-Type:");
        need += strlen(h) + 2;
    }
    if (with_body)
        need += 16 + strlen(clen) + 2 + (typed ? 0 : sizeof(form) - 1) + inside;
    if (need > x->head_cap) {
        char *h = realloc(x->head, need);
        if (h == NULL)
            return -1;
        x->head = h;
        x->head_cap = need;
    }
    put(x, &at, call->method, strlen(call->method));
    put(x, &at, " ", 1);
    if (target == NULL)
        put(x, &at, "/", 1);
    put(x, &at, u->target, tlen);
    put(x, &at, " HTTP/1.1\r\nHost: ", 17);
    put(x, &at, u->host, u->host_len);
    put(x, &at, "\r\nAccept: */*\r\n", 15);
    for (int i = 0; i < ADAPTER_MAX_HEADERS && call->headers[i] != NULL; i++) {
        put(x, &at, call->headers[i], strlen(call->headers[i]));
        put(x, &at, "\r\n", 2);
    }
    put(x, &at, USER_AGENT "\r\n", sizeof(USER_AGENT) + 1);
    if (with_body) {
        put(x, &at, "Content-Length: ", 16);
        put(x, &at, clen, strlen(clen));
        put(x, &at, "\r\n", 2);
        if (!typed)
            put(x, &at, form, sizeof(form) - 1);
    }
    put(x, &at, "\r\n", 2);
    if (inside > 0)
        put(x, &at, call->body, inside);
    x->head_len = at;
    return 0;
}

static void on_h1_timer(evutil_socket_t fd, short what, void *arg);
static void on_h1_done(void *arg, h1conn_t *c, h1conn_result_t *res);
static void h1_fail(upstream_xfer_t *x, CURLcode code, const char *detail, int os_errno,
                    int not_sent);

/* A parked connection of the origin became readable: closed by its peer. */
static void on_h1_idle(void *arg, h1conn_t *c)
{
    upstream_origin_t *o = arg;
    h1conn_t *prev = NULL;

    for (h1conn_t *p = o->parked; p != NULL; prev = p, p = p->next)
        if (p == c) {
            if (prev == NULL)
                o->parked = c->next;
            else
                prev->next = c->next;
            o->n_parked--;
            break;
        }
    h1conn_free(c);
}

/* Keeps c for the origin's next call (newest first), or closes it when enough wait. */
static void origin_park(upstream_origin_t *o, h1conn_t *c)
{
    if (o->n_parked >= H1_PARKED_MAX) {
        h1conn_free(c);
        return;
    }
    h1conn_park(c, clock_coarse_ms());
    c->next = o->parked;
    o->parked = c;
    o->n_parked++;
}

/* The newest parked connection of the origin young enough to trust, or NULL. */
static h1conn_t *h1_unpark(upstream_origin_t *o)
{
    int64_t now = clock_coarse_ms();
    h1conn_t *c;

    while ((c = o->parked) != NULL) {
        o->parked = c->next;
        c->next = NULL;
        o->n_parked--;
        if (now - c->parked_at <= H1_IDLE_MAX_MS)
            return c;
        h1conn_free(c); /* and the older ones after it, one by one */
    }
    return NULL;
}

static void h1_exchange(upstream_xfer_t *x, h1conn_t *c, int reused)
{
    x->link = c;
    x->link_reused = (unsigned)reused;
    x->h1_phase = H1_EXCHANGE;
    h1conn_exchange(c, x->head, x->head_len, x->body, x->body_len, x->max, on_h1_done, x);
}

static void h2_go(upstream_xfer_t *x);

/* Has curl connect a socket to x's origin (CURLOPT_CONNECT_ONLY): curl resolves the name (its
 * threaded resolver and the share's DNS cache), tries the addresses, and hands the socket over
 * when connected (h1_connected). */
static void h1_dial(upstream_xfer_t *x)
{
    upstream_t *up = x->up;
    int64_t left_ms;
    CURL *e;
    char url[300];
    size_t klen = strlen(x->origin->key);

    left_ms = (x->deadline_us - clock_mono_us()) / 1000;
    if (x->easy == NULL)
        x->easy = easy_take(up, x);
    e = x->easy;
    if (e == NULL || (x->shard = pick_shard(up)) == NULL || klen + 9 > sizeof(url)) {
        x->shard = NULL;
        h1_fail(x, CURLE_OUT_OF_MEMORY, "", 0, 1);
        return;
    }
    x->shard->in_flight++;
    memcpy(url, "http://", 7);
    memcpy(url + 7, x->origin->key, klen);
    memcpy(url + 7 + klen, "/", 2);
    curl_easy_setopt(e, CURLOPT_CONNECT_ONLY, 1L);
    curl_easy_setopt(e, CURLOPT_CURLU, NULL);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PIPEWAIT, 0L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, left_ms > 0 ? (long)left_ms : 1L);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
    x->hop = -1;
    x->hop_sent = 0;
    x->h1_phase = H1_CONNECT;
    if (curl_multi_add_handle(x->shard->multi, e) != CURLM_OK) {
        x->h1_phase = H1_KICK; /* nothing for curl to let go */
        h1_fail(x, CURLE_OUT_OF_MEMORY, "", 0, 1);
    }
}

/* A parked connection of the origin, or a new one (h1_dial); over TLS with the HTTP/2 setting,
 * a stream of an HTTP/2 connection instead, unless the platform chose HTTP/1.1 before. */
static void h1_go(upstream_xfer_t *x)
{
    h1conn_t *c;

    if (x->origin->tls && !x->up->cfg.http1 && !x->origin->no_h2) {
        h2_go(x);
        return;
    }
    if ((c = h1_unpark(x->origin)) != NULL) {
        h1_exchange(x, c, 1);
        return;
    }
    h1_dial(x);
}

/* OpenSSL hands over a new session (a TLS 1.3 ticket, or a TLS 1.2 session): the origin keeps
 * the newest, for its next connection to resume. */
static int on_tls_session(SSL *ssl, SSL_SESSION *sess)
{
    upstream_origin_t *o = SSL_get_app_data(ssl);

    if (o == NULL)
        return 0;
    SSL_SESSION_free(o->session);
    o->session = sess;
    return 1; /* the reference is the origin's */
}

/* The TLS client for our own HTTP/1.1 and HTTP/2, as curl sets its own up: the certificate checked
 * against the system's CAs (curl's default bundle, which Debian builds from the same
 * certificates as curl's default CA directory) and BOTGATE_CA_FILE's, partial chains allowed,
 * TLS 1.2 at least, a peer's close without close_notify read as the end. The bundle is read here,
 * at start, never on a request's path. Read-ahead: one recv per answer instead of two per record
 * (h1conn_on_readable reads until OpenSSL holds nothing). NULL on failure. */
static SSL_CTX *tls_ctx_new(const char *ca_file)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    char *cainfo = NULL;
    int loaded = 0;
    CURL *e;

    if (ctx == NULL)
        return NULL;
    if ((e = curl_easy_init()) != NULL) {
        if (curl_easy_getinfo(e, CURLINFO_CAINFO, &cainfo) == CURLE_OK && cainfo != NULL &&
            cainfo[0] != '\0')
            loaded = SSL_CTX_load_verify_locations(ctx, cainfo, NULL) == 1;
        curl_easy_cleanup(e);
    }
    if (!loaded)
        SSL_CTX_set_default_verify_paths(ctx);
    if (ca_file != NULL && ca_file[0] != '\0' &&
        SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    X509_VERIFY_PARAM_set_flags(SSL_CTX_get0_param(ctx), X509_V_FLAG_PARTIAL_CHAIN);
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
                              SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_read_ahead(ctx, 1);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, on_tls_session);
    return ctx;
}

/* One TLS context for the whole process, made by the first worker's client and freed with the
 * last one's: the CA store it holds (the system's bundle, about 1 MB) is read once, not once
 * per worker. OpenSSL lets every thread make its SSL objects from it; what differs per worker
 * (the origin an SSL object belongs to) hangs on the SSL object. */
static pthread_mutex_t tls_lock = PTHREAD_MUTEX_INITIALIZER;
static SSL_CTX *tls_shared;
static int tls_users;

static SSL_CTX *tls_ctx_take(const char *ca_file)
{
    SSL_CTX *ctx;

    pthread_mutex_lock(&tls_lock);
    if (tls_shared == NULL)
        tls_shared = tls_ctx_new(ca_file);
    if ((ctx = tls_shared) != NULL)
        tls_users++;
    pthread_mutex_unlock(&tls_lock);
    return ctx;
}

static void tls_ctx_give(SSL_CTX *ctx)
{
    if (ctx == NULL)
        return;
    pthread_mutex_lock(&tls_lock);
    if (--tls_users == 0) {
        SSL_CTX_free(tls_shared);
        tls_shared = NULL;
    }
    pthread_mutex_unlock(&tls_lock);
}

/* An SSL object for a new connection to o: the host checked in the certificate (an address as
 * an address), named by SNI (a name only), HTTP/1.1 offered by ALPN (and first HTTP/2 with h2),
 * o's session resumed. */
static SSL *tls_new(upstream_t *up, upstream_origin_t *o, int h2)
{
    static const unsigned char both[] = "\x02h2\x08http/1.1";
    const unsigned char *alpn = h2 ? both : both + 3;
    unsigned alpn_len = h2 ? sizeof(both) - 1 : sizeof(both) - 4;
    SSL *ssl = SSL_new(up->tls);

    if (ssl == NULL)
        return NULL;
    SSL_set_app_data(ssl, o);
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if ((o->host_is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), o->host)
                       : SSL_set1_host(ssl, o->host)) != 1 ||
        (!o->host_is_ip && SSL_set_tlsext_host_name(ssl, o->host) != 1) ||
        SSL_set_alpn_protos(ssl, alpn, alpn_len) != 0) {
        SSL_free(ssl);
        return NULL;
    }
    if (o->session != NULL)
        SSL_set_session(ssl, o->session);
    SSL_set_connect_state(ssl);
    return ssl;
}

static void xfer_finish(upstream_xfer_t *x, CURLcode code);
static void h2_connected(upstream_xfer_t *x, CURLcode code, curl_socket_t fd);

/* curl finished connecting a socket for x (CURLOPT_CONNECT_ONLY): it becomes ours. Removing
 * the handle makes curl 7.88 drop its connect-only connection, closing the socket through
 * on_close_socket, which leaves this one open. */
static void h1_connected(upstream_xfer_t *x, CURLcode code)
{
    upstream_t *up = x->up;
    curl_socket_t fd = CURL_SOCKET_BAD;
    h1conn_t *c;
    SSL *ssl = NULL;

    if (code == CURLE_OK &&
        (curl_easy_getinfo(x->easy, CURLINFO_ACTIVESOCKET, &fd) != CURLE_OK || fd < 0))
        fd = CURL_SOCKET_BAD;
    up->adopting = fd;
    up->adopted = 0;
    curl_multi_remove_handle(x->shard->multi, x->easy);
    curl_easy_setopt(x->easy, CURLOPT_CONNECT_ONLY, 0L);
    up->adopting = CURL_SOCKET_BAD;
    x->shard->in_flight--;
    x->shard = NULL;
    /* curl kept the socket (a libcurl that no longer drops connect-only connections on
     * removal): a descriptor of our own, so that its close does not end ours */
    if (fd != CURL_SOCKET_BAD && !up->adopted)
        fd = dup(fd);
    if (x->dialing != NULL) {
        h2_connected(x, code, fd);
        return;
    }
    if (code != CURLE_OK) {
        xfer_finish(x, code);
        return;
    }
    easy_give(up, x);
    if (fd < 0) {
        h1_fail(x, CURLE_COULDNT_CONNECT, "the connected socket was lost", 0, 1);
        return;
    }
    if (x->origin->tls && (ssl = tls_new(up, x->origin, 0)) == NULL) {
        close(fd);
        h1_fail(x, CURLE_SSL_CONNECT_ERROR, "cannot set up TLS", 0, 1);
        return;
    }
    if ((c = h1conn_new(up->base, fd, ssl, on_h1_idle, x->origin)) == NULL) {
        h1_fail(x, CURLE_OUT_OF_MEMORY, "", 0, 1);
        return;
    }
    h1_exchange(x, c, 0);
}

/* The kick (H1_KICK, from upstream_start, so that no answer reaches the caller before
 * upstream_start returns), then the deadline. */
static void on_h1_timer(evutil_socket_t fd, short what, void *arg)
{
    upstream_xfer_t *x = arg;
    int64_t left_us;
    struct timeval tv;

    (void)fd;
    (void)what;
    if (x->h1_phase == H1_KICK) {
        left_us = x->deadline_us - clock_mono_us();
        if (left_us < 1)
            left_us = 1;
        tv.tv_sec = (time_t)(left_us / 1000000);
        tv.tv_usec = (suseconds_t)(left_us % 1000000);
        event_add(x->h1_timer, &tv);
        h1_go(x);
        return;
    }
    h1_fail(x, CURLE_OPERATION_TIMEDOUT, "", 0, 0);
}

/* What went wrong, in the words describe() uses. */
static const char *error_text(CURLcode code, const char *detail, int os_errno, long long total_us,
                              char *buf, size_t size)
{
    char os_text[128];
    const char *os = "";

    if (os_errno != 0)
        os = strerror_r(os_errno, os_text, sizeof(os_text));
    snprintf(buf, size, "%s%s%s%s%s (after %lld ms)", curl_easy_strerror(code), *detail ? ": " : "",
             detail, *os ? ": " : "", os, total_us / 1000);
    return buf;
}

/* What a transfer's own flags say went wrong, before any curl or system error: NULL if none. */
static const char *flagged_error(const upstream_xfer_t *x)
{
    if (x->blocked)
        return "address not allowed (private, loopback or link-local)";
    if (x->resend_refused)
        return "the connection closed after the request was sent; not sent again, as the "
               "platform may have received it";
    if (x->too_large)
        return "answer too large";
    return NULL;
}

/* Stops what x holds, without its callback: its connection in the middle of an exchange (which
 * can carry nothing more), curl's transfer or curl's connect for it. */
static void xfer_stop(upstream_xfer_t *x)
{
    if (x->h1_phase == H1_EXCHANGE && x->link != NULL) {
        h1conn_abandon(x->link);
        h1conn_free(x->link);
        x->link = NULL;
    }
    if (x->stream != NULL) {
        h2conn_cancel(x->stream);
        x->stream = NULL;
    }
    if (x->shard != NULL)
        curl_multi_remove_handle(x->shard->multi, x->easy);
    if (x->h1_phase == H1_CONNECT)
        curl_easy_setopt(x->easy, CURLOPT_CONNECT_ONLY, 0L);
    if (x->dialing != NULL) {
        /* the streams that wait for this socket go on another connection */
        h2conn_undialed(x->dialing, CURLE_ABORTED_BY_CALLBACK, 0, 1);
        x->dialing = NULL;
    }
}

/* Ends x without an answer; whatever it holds (its connect, its connection) goes first. */
static void h1_fail(upstream_xfer_t *x, CURLcode code, const char *detail, int os_errno,
                    int not_sent)
{
    upstream_answer_t ans;
    upstream_cb *cb = x->cb;
    void *arg = x->arg;
    char error[256];
    long long total_us = (long long)(clock_mono_us() - x->started_us);

    xfer_stop(x);
    memset(&ans, 0, sizeof(ans));
    ans.curl_code = code;
    ans.not_sent = not_sent;
    ans.elapsed_us = total_us;
    ans.too_large = x->too_large;
    ans.a.body = "";
    if ((ans.error = flagged_error(x)) == NULL)
        ans.error = error_text(code, detail, os_errno, total_us, error, sizeof(error));
    x->cb = NULL;
    if (cb != NULL)
        cb(arg, &ans);
    xfer_release(x);
}

/* x's answer came over our own HTTP/1.1 or HTTP/2: x takes body (len bytes, NUL-terminated,
 * or NULL when empty), hands the answer up and ends. */
static void h1_answered(upstream_xfer_t *x, char *body, size_t len, int status,
                        const char *retry_after, const char *content_type)
{
    upstream_answer_t ans;
    upstream_cb *cb = x->cb;
    void *arg = x->arg;

    memset(&ans, 0, sizeof(ans));
    x->len = len;
    x->buf = body;
    ans.curl_code = CURLE_OK;
    ans.elapsed_us = (long long)(clock_mono_us() - x->started_us);
    ans.a.status = status;
    ans.a.body = x->buf ? x->buf : "";
    ans.a.body_len = x->buf ? x->len : 0;
    ans.a.retry_after = retry_after;
    ans.a.content_type = content_type;
    ans.error = "";
    x->cb = NULL;
    if (cb != NULL)
        cb(arg, &ans);
    xfer_release(x);
}

/* Nothing of x reached the platform: it goes again, on another connection or stream, up to
 * H1_TRIES times. */
static void h1_again(upstream_xfer_t *x, const char *error, int os_errno)
{
    if (++x->h1_tries < H1_TRIES)
        h1_go(x);
    else
        h1_fail(x, CURLE_SEND_ERROR, error, os_errno, 1);
}

/* The TLS handshake failed: the certificate's problem when it was that. */
static void h1_tls_failed(upstream_xfer_t *x, long verify, const char *error, int os_errno)
{
    if (verify != X509_V_OK)
        h1_fail(x, CURLE_PEER_FAILED_VERIFICATION, X509_verify_cert_error_string(verify), 0, 0);
    else
        h1_fail(x, CURLE_SSL_CONNECT_ERROR, error, os_errno, 0);
}

/* An exchange on our own connection ended. */
static void on_h1_done(void *arg, h1conn_t *c, h1conn_result_t *res)
{
    upstream_xfer_t *x = arg;
    upstream_origin_t *o = x->origin;
    h1resp_t *r = res->answer;

    x->link = NULL;
    if (res->outcome != H1CONN_ANSWER) {
        int reused = x->link_reused;
        h1conn_free(c);
        switch (res->outcome) {
        case H1CONN_STALE: /* nothing went out: another connection carries it */
            h1_again(x, res->error, res->os_errno);
            return;
        case H1CONN_NO_ANSWER:
            x->resend_refused = (unsigned)reused;
            h1_fail(x, CURLE_GOT_NOTHING, "", res->os_errno, 0);
            return;
        case H1CONN_SEND_FAILED:
            h1_fail(x, CURLE_SEND_ERROR, res->error, res->os_errno, 0);
            return;
        case H1CONN_TOO_LARGE:
            x->too_large = 1;
            h1_fail(x, CURLE_WRITE_ERROR, res->error, 0, 0);
            return;
        case H1CONN_BAD_ANSWER:
            h1_fail(x, CURLE_WEIRD_SERVER_REPLY, res->error, 0, 0);
            return;
        case H1CONN_TLS_FAILED:
            h1_tls_failed(x, res->verify, res->error, res->os_errno);
            return;
        default:
            h1_fail(x, CURLE_RECV_ERROR, res->error, res->os_errno, 0);
            return;
        }
    }
    h1_answered(x, h1resp_take_body(r), r->body_len, r->status,
                r->retry_after[0] ? r->retry_after : NULL,
                r->content_type[0] ? r->content_type : NULL);
    /* after the callback: the answer's fields live in the connection's parser */
    if (h1conn_reusable(c))
        origin_park(o, c);
    else
        h1conn_free(c);
}

/* ---- our own HTTP/2 (h2conn): over TLS with the HTTP/2 setting ----
 *
 * An origin's HTTP/2 connections each carry up to as many streams at once as the platform
 * allows (H2CONN_STREAMS_MAX at most); a call goes on the first that takes one, and a new
 * connection is made only when none does. Calls that come while it connects wait on it as
 * streams, instead of each making a connection of its own: the first call's connect (h1_dial,
 * x->dialing) is the connection's. */

static void on_h2_done(void *arg, h2conn_result_t *res);

static void origin_drop_h2(upstream_origin_t *o, h2conn_t *c)
{
    for (size_t i = 0; i < o->n_h2; i++)
        if (o->h2[i] == c) {
            o->h2[i] = o->h2[--o->n_h2];
            return;
        }
}

/* A connection of o ended and every stream's end was handed up. */
static void on_h2_gone(void *arg, h2conn_t *c)
{
    origin_drop_h2(arg, c);
    h2conn_free(c);
}

/* The first connection of o that takes a stream; those idle too long to trust are closed. */
static h2conn_t *h2_pick(upstream_origin_t *o)
{
    int64_t now = clock_coarse_ms();

    for (size_t i = 0; i < o->n_h2;) {
        h2conn_t *c = o->h2[i];
        int64_t idle = h2conn_idle_since(c);
        if (idle != 0 && now - idle > H1_IDLE_MAX_MS) {
            o->h2[i] = o->h2[--o->n_h2];
            h2conn_free(c);
            continue;
        }
        if (h2conn_takes(c))
            return c;
        i++;
    }
    return NULL;
}

/* A new connection of o, waiting for its socket; NULL when out of memory. */
static h2conn_t *h2_add(upstream_t *up, upstream_origin_t *o)
{
    h2conn_t *c;

    if (o->n_h2 == o->cap_h2) {
        size_t cap = o->cap_h2 ? 2 * o->cap_h2 : 4;
        h2conn_t **h2 = realloc(o->h2, cap * sizeof(*h2));
        if (h2 == NULL)
            return NULL;
        o->h2 = h2;
        o->cap_h2 = cap;
    }
    /* a new connection sends at most as many streams as the platform allowed on the others,
     * rather than having them refused before its own SETTINGS come */
    if ((c = h2conn_new(up->base, o->h2_streams, on_h2_gone, o)) != NULL)
        o->h2[o->n_h2++] = c;
    return c;
}

/* x as a stream of a connection of its origin; the connection's socket is x's to connect when
 * it is a new one. */
static void h2_go(upstream_xfer_t *x)
{
    upstream_origin_t *o = x->origin;
    h2conn_t *c = h2_pick(o);
    int dial = 0;

    if (c != NULL)
        x->stream = h2conn_submit(c, x->head, x->head_len, x->max, on_h2_done, x);
    if (x->stream == NULL) {
        /* none takes a stream, or the one that did ran out of stream numbers */
        if ((c = h2_add(x->up, o)) == NULL ||
            (x->stream = h2conn_submit(c, x->head, x->head_len, x->max, on_h2_done, x)) == NULL) {
            if (c != NULL) {
                origin_drop_h2(o, c);
                h2conn_free(c);
            }
            h1_fail(x, CURLE_OUT_OF_MEMORY, "", 0, 1);
            return;
        }
        dial = 1;
    }
    x->h1_phase = H2_STREAM;
    if (dial) {
        x->dialing = c;
        h1_dial(x);
    }
}

/* curl connected (or failed to connect) the socket of the connection x was dialing. */
static void h2_connected(upstream_xfer_t *x, CURLcode code, curl_socket_t fd)
{
    upstream_t *up = x->up;
    h2conn_t *c = x->dialing;
    long os_errno = 0;
    SSL *ssl;

    x->dialing = NULL;
    x->h1_phase = H2_STREAM;
    if (code != CURLE_OK && curl_easy_getinfo(x->easy, CURLINFO_OS_ERRNO, &os_errno) != CURLE_OK)
        os_errno = 0;
    easy_give(up, x);
    if (code != CURLE_OK || fd < 0) {
        h2conn_undialed(c, code != CURLE_OK ? code : CURLE_COULDNT_CONNECT, (int)os_errno, 0);
        return;
    }
    if ((ssl = tls_new(up, x->origin, 1)) == NULL) {
        close(fd);
        h2conn_undialed(c, CURLE_SSL_CONNECT_ERROR, 0, 0);
        return;
    }
    h2conn_attach(c, fd, ssl); /* the streams waiting on it, x's among them, go out after */
}

/* The platform chose HTTP/1.1 in the handshake of c: its TLS connection, made and good, waits
 * parked for the calls that were to be its streams (the first one takes it). */
static void h2_fall_back(upstream_t *up, upstream_origin_t *o, h2conn_t *c)
{
    SSL *ssl = NULL;
    int fd = h2conn_take_socket(c, &ssl);
    h1conn_t *h1;

    if (fd < 0 || (h1 = h1conn_new(up->base, fd, ssl, on_h1_idle, o)) == NULL)
        return; /* h1conn_new closed both */
    h1->shaken = 1;
    origin_park(o, h1);
}

/* A stream ended: its answer, or why not. */
static void on_h2_done(void *arg, h2conn_result_t *res)
{
    upstream_xfer_t *x = arg;
    uint32_t allowed;
    char detail[128];

    x->stream = NULL;
    if ((allowed = h2conn_streams_allowed(res->conn)) != 0)
        x->origin->h2_streams = allowed;
    switch (res->outcome) {
    case H2CONN_ANSWER:
        break;
    case H2CONN_NOT_H2:
        x->origin->no_h2 = 1; /* the platform chose HTTP/1.1: from now on, ours */
        h2_fall_back(x->up, x->origin, res->conn);
        /* fall through */
    case H2CONN_REFUSED: /* not processed: safe on another stream or connection */
        h1_again(x, res->error, res->os_errno);
        return;
    case H2CONN_UNDIALED:
        h1_fail(x, (CURLcode)res->dial_code, "", res->os_errno, 1);
        return;
    case H2CONN_NO_ANSWER:
        x->resend_refused = 1;
        h1_fail(x, CURLE_RECV_ERROR, res->error, res->os_errno, 0);
        return;
    case H2CONN_RESET:
        snprintf(detail, sizeof(detail), "the platform reset the stream (%s)", res->error);
        h1_fail(x, CURLE_HTTP2_STREAM, detail, 0, 0);
        return;
    case H2CONN_TOO_LARGE:
        x->too_large = 1;
        h1_fail(x, CURLE_WRITE_ERROR, res->error, 0, 0);
        return;
    case H2CONN_BAD_ANSWER:
        snprintf(detail, sizeof(detail), "the platform's answer broke HTTP/2 (%s)", res->error);
        h1_fail(x, CURLE_HTTP2, detail, res->os_errno, 0);
        return;
    case H2CONN_TLS_FAILED:
        h1_tls_failed(x, res->verify, res->error, res->os_errno);
        return;
    }
    h1_answered(x, res->body, res->body_len, res->status, res->retry_after, res->content_type);
    res->body = NULL; /* x's now */
}

/* Sets x off on our own HTTP/1.1 when the call allows it: 1, or 0 to leave it to curl. */
static int h1_start(upstream_xfer_t *x, adapter_call_t *call, long timeout_ms)
{
    upstream_t *up = x->up;
    upstream_url_t *u;
    int with_body = strcmp(call->method, "GET") != 0;

    if (!h1_allowed(up, call->url, x->flags) || (u = url_slot(up, call->url)) == NULL ||
        u->origin == NULL || h1_build_head(x, u, call, with_body, u->origin->tls) < 0)
        return 0;
    if (x->h1_timer == NULL && (x->h1_timer = evtimer_new(up->base, on_h1_timer, x)) == NULL)
        return 0;
    x->origin = u->origin;
    x->h1_tries = 0;
    x->started_us = clock_mono_us();
    x->deadline_us = x->started_us + (int64_t)(timeout_ms > 0 ? timeout_ms : 1) * 1000;
    if (with_body && !u->origin->tls) {
        x->body = call->body;
        x->body_len = call->body ? call->body_len : 0;
        call->body = NULL;
    } else {
        x->body = NULL; /* none, or in the head */
        x->body_len = 0;
    }
    x->h1_phase = H1_KICK;
    event_active(x->h1_timer, EV_TIMEOUT, 0);
    return 1;
}

static upstream_xfer_t *xfer_start(upstream_t *up, adapter_call_t *call, long timeout_ms,
                                   size_t max_answer, unsigned flags, upstream_cb *cb, void *arg)
{
    upstream_xfer_t *x = up->spare;
    CURL *e;

    if (x != NULL) {
        up->spare = x->next;
    } else {
        if ((x = calloc(1, sizeof(*x))) == NULL)
            return NULL;
        x->up = up;
    }
    up->in_flight++;
    x->cb = cb;
    x->arg = arg;
    x->max = max_answer;
    x->len = 0;
    x->blocked = x->too_large = x->has_retry_after = x->resend_refused = 0;
    x->hop = -1;
    x->hop_sent = 0;
    x->flags = flags;
    if (h1_start(x, call, timeout_ms))
        return x;
    if (x->easy == NULL)
        x->easy = easy_take(up, x);
    e = x->easy;
    if (e == NULL || (x->shard = pick_shard(up)) == NULL) {
        x->next = up->spare;
        up->spare = x;
        up->in_flight--;
        return NULL;
    }
    x->shard->in_flight++;
    if (call->headers[0] != NULL && strcmp(call->headers[0], ADAPTER_JSON_HEADER) == 0 &&
        call->headers[1] == NULL) {
        x->headers = up->json_headers; /* most calls: five allocations fewer */
    } else {
        for (int i = 0; i < ADAPTER_MAX_HEADERS && call->headers[i]; i++)
            x->headers = curl_slist_append(x->headers, call->headers[i]);
        /* No "Expect: 100-continue" round trip for larger bodies. */
        x->headers = curl_slist_append(x->headers, "Expect:");
        x->headers = curl_slist_append(x->headers, USER_AGENT);
    }
    curl_easy_setopt(e, CURLOPT_URL, call->url);
    curl_easy_setopt(e, CURLOPT_CURLU, parsed_url(up, x, call->url));
    /* Platforms that speak HTTP/2 (over TLS) get one connection for a shard's transfers:
     * transfers started before the first connection knows whether it multiplexes wait for it
     * (ALPN tells at the end of the handshake) instead of each opening a TLS connection of its
     * own. Not over cleartext: there curl learns that a host does not multiplex only from its
     * first answer, and every transfer would wait for that. */
    curl_easy_setopt(e, CURLOPT_PIPEWAIT,
                     !up->cfg.http1 && strncasecmp(call->url, "https:", 6) == 0 ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
    if (strcmp(call->method, "GET") == 0) {
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else {
        x->body = call->body;
        call->body = NULL;
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)(x->body ? call->body_len : 0));
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body ? x->body : "");
        if (strcmp(call->method, "POST") != 0)
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, call->method);
        else
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, NULL);
    }
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, (flags & UPSTREAM_FOLLOW) ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION,
                     up->cfg.guard ? on_open_guarded : on_open_socket);
    if (curl_multi_add_handle(x->shard->multi, e) != CURLM_OK) {
        xfer_release(x);
        return NULL;
    }
    return x;
}

upstream_xfer_t *upstream_start(upstream_t *up, adapter_call_t *call, long timeout_ms,
                                size_t max_answer, unsigned flags, upstream_cb *cb, void *arg)
{
    upstream_xfer_t *x = xfer_start(up, call, timeout_ms, max_answer, flags, cb, arg);

    /* curl copied the URL and the header lines, the body is the transfer's: nothing of the
     * call is held while the platform takes its time */
    adapter_call_free(call);
    return x;
}

void upstream_cancel(upstream_xfer_t *x)
{
    if (x == NULL)
        return;
    xfer_stop(x);
    xfer_release(x);
}

size_t upstream_in_flight(const upstream_t *up)
{
    return up->in_flight;
}

/* What went wrong, from what curl tells of the transfer afterwards. Not curl's error buffer:
 * that is 256 bytes held by every transfer in flight, thousands at once, for the few that
 * fail. Nothing of the URL or the address either: it goes into answers, and a platform URL
 * may hold an access token, a user's media URL may resolve to an address of our network. */
static const char *describe(upstream_xfer_t *x, CURLcode code, long long total_us, char *buf,
                            size_t size)
{
    const char *cert = "";
    long os_errno = 0, verify = X509_V_OK;

    if (code == CURLE_PEER_FAILED_VERIFICATION &&
        curl_easy_getinfo(x->easy, CURLINFO_SSL_VERIFYRESULT, &verify) == CURLE_OK &&
        verify != X509_V_OK)
        cert = X509_verify_cert_error_string(verify);
    if (curl_easy_getinfo(x->easy, CURLINFO_OS_ERRNO, &os_errno) != CURLE_OK)
        os_errno = 0;
    return error_text(code, cert, (int)os_errno, total_us, buf, size);
}

static void xfer_finish(upstream_xfer_t *x, CURLcode code)
{
    upstream_answer_t ans;
    upstream_cb *cb = x->cb;
    void *arg = x->arg;
    long status = 0;
    char *ctype = NULL;
    curl_off_t total_us = 0;
    char error[256];

    memset(&ans, 0, sizeof(ans));
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(x->easy, CURLINFO_CONTENT_TYPE, &ctype);
    curl_easy_getinfo(x->easy, CURLINFO_TOTAL_TIME_T, &total_us);
    if (x->buf == NULL && (x->buf = malloc(1)) != NULL)
        x->cap = 1;
    if (x->buf != NULL)
        x->buf[x->len] = '\0';
    ans.curl_code = code;
    ans.blocked = x->blocked;
    ans.too_large = x->too_large;
    ans.elapsed_us = (long long)total_us;
    ans.a.status = code == CURLE_OK ? status : 0;
    ans.a.body = x->buf ? x->buf : "";
    ans.a.body_len = code == CURLE_OK ? x->len : 0;
    ans.a.retry_after = x->has_retry_after ? x->retry_after : NULL;
    ans.a.content_type = ctype;
    ans.not_sent = code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST ||
                   code == CURLE_COULDNT_RESOLVE_PROXY;
    if ((ans.error = flagged_error(x)) == NULL)
        ans.error =
            code != CURLE_OK ? describe(x, code, (long long)total_us, error, sizeof(error)) : "";
    if (cb != NULL)
        cb(arg, &ans);
    xfer_release(x);
}

static void check_done(upstream_shard_t *sh)
{
    CURLMsg *msg;
    int left;

    while ((msg = curl_multi_info_read(sh->multi, &left)) != NULL) {
        upstream_xfer_t *x;
        CURLcode code;
        if (msg->msg != CURLMSG_DONE)
            continue;
        code = msg->data.result;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        if (x->h1_phase == H1_CONNECT) {
            h1_connected(x, code);
            continue;
        }
        curl_multi_remove_handle(sh->multi, msg->easy_handle);
        xfer_finish(x, code);
    }
}
