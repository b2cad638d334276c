/* h1conn.c - botgate's own HTTP/1.1 connection to a platform, on a socket libcurl connected and
 * let go (netcurl.c): botgate writes each request and reads its answer itself, one exchange at a
 * time, with the socket's read event registered for the connection's whole life (no epoll_ctl per
 * request) and no poll() of its own. Over cleartext the request goes out with one sendmsg of two
 * pieces (head, body) when the socket takes it whole, which it nearly always does; over TLS (the
 * SSL object made by nettls_new, whose handshake comes before the first request) with one
 * SSL_write of one piece. The answer is read as it arrives into a buffer on the stack and handed
 * to the parser (h1resp.c), which keeps only what it must: a head split over two reads, the body.
 * Between exchanges the connection waits parked; readable then means the peer closed it (or, over
 * TLS, sent a session ticket, which is read and changes nothing).
 *
 * Over TLS, OpenSSL may hold records it has read from the socket (read-ahead) that the socket's
 * readiness no longer shows: an answer is therefore read until the parser has it whole or
 * SSL_read wants the socket again, never left in OpenSSL's buffer while waiting; and a
 * connection is parked only when OpenSSL holds nothing of it. */
#include "h1conn.h"

#include "nettls.h"

#include "../json/numfmt.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <openssl/err.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* Bytes read per recv (or SSL_read): a platform's answer is a few hundred, a media upload's
 * answer a few thousand; a longer one takes more reads. */
#define READ_CHUNK 16384

/* Owned by whoever holds it: its origin's pool while parked (netpool.c), the call during an
 * exchange (net.c). */
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
    unsigned busy : 1, answered : 1, reusable : 1, ans_live : 1;
    unsigned shaken : 1; /* the TLS handshake is done */
    unsigned broken : 1; /* the TLS session failed: no close_notify at the end */
};

static void h1conn_on_readable(evutil_socket_t fd, short what, void *arg);
static void h1conn_on_writable(evutil_socket_t fd, short what, void *arg);

h1conn_t *h1conn_new(struct event_base *base, int fd, SSL *ssl, h1conn_idle_cb *on_idle,
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

void h1conn_free(h1conn_t *c)
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
    nettls_failure_t failure;

    switch (nettls_handshake(c->ssl, &failure)) {
    case NETTLS_DONE:
        c->shaken = 1;
        /* fall through */
    case NETTLS_WANT_READ:
        if (c->wr != NULL)
            event_del(c->wr);
        return c->shaken;
    case NETTLS_WANT_WRITE:
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

void h1conn_exchange(h1conn_t *c, const char *head, size_t head_len, const char *body,
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

void h1conn_abandon(h1conn_t *c)
{
    if (c->wr != NULL)
        event_del(c->wr);
    c->busy = 0;
    c->cb = NULL;
    c->reusable = 0;
    c->broken = 1;
}

int h1conn_reusable(const h1conn_t *c)
{
    /* over TLS, only when OpenSSL holds nothing more of the socket (see the top) */
    return c->reusable && (c->ssl == NULL || !SSL_has_pending(c->ssl));
}

void h1conn_park(h1conn_t *c)
{
    if (c->ans_live) {
        h1resp_release(&c->ans);
        c->ans_live = 0;
    }
    if (c->wr != NULL) {
        event_free(c->wr);
        c->wr = NULL;
    }
}

void h1conn_shaken(h1conn_t *c)
{
    c->shaken = 1;
}

static int ascii_prefix(const char *s, const char *prefix)
{
    return strncasecmp(s, prefix, strlen(prefix)) == 0;
}

/* Appends n bytes at buf + *at (room was counted first). */
static void head_put(char *buf, size_t *at, const char *s, size_t n)
{
    memcpy(buf + *at, s, n);
    *at += n;
}

int h1conn_request_head(char **buf, size_t *cap, size_t *len, const net_request_t *req,
                        const char *target, const char *host, size_t host_len, int with_body,
                        int body_inside)
{
    size_t inside = with_body && body_inside && req->body != NULL ? req->body_len : 0;
    static const char form[] = "Content-Type: application/x-www-form-urlencoded\r\n";
    const char *const *lines = req->headers;
    char num[NUMFMT_DEC_SIZE];
    const char *clen = numfmt_dec(num, (long long)(with_body ? req->body_len : 0));
    size_t need, at = 0, tlen = strlen(target);
    int typed = 0, slash = target[0] != '/';
    char *h;

    need = strlen(req->method) + 1 + (size_t)slash + tlen + 11 + 6 + host_len + 2 + 13 +
           sizeof(NET_USER_AGENT) - 1 + 2 + 2;
    for (int i = 0; lines != NULL && lines[i] != NULL; i++) {
        const char *line = lines[i], *colon = strchr(line, ':'), *v;
        if (colon == NULL || colon == line || strpbrk(line, "\r\n") != NULL)
            return -1;
        for (v = colon + 1; *v == ' ' || *v == '\t'; v++)
            ;
        if (*v == '\0')
            return -1;
        typed |= ascii_prefix(line, "Content-Type:");
        need += strlen(line) + 2;
    }
    if (with_body)
        need += 16 + strlen(clen) + 2 + (typed ? 0 : sizeof(form) - 1) + inside;
    if (need > *cap) {
        if ((h = realloc(*buf, need)) == NULL)
            return -1;
        *buf = h;
        *cap = need;
    }
    h = *buf;
    head_put(h, &at, req->method, strlen(req->method));
    head_put(h, &at, " ", 1);
    if (slash)
        head_put(h, &at, "/", 1);
    head_put(h, &at, target, tlen);
    head_put(h, &at, " HTTP/1.1\r\nHost: ", 17);
    head_put(h, &at, host, host_len);
    head_put(h, &at, "\r\nAccept: */*\r\n", 15);
    for (int i = 0; lines != NULL && lines[i] != NULL; i++) {
        head_put(h, &at, lines[i], strlen(lines[i]));
        head_put(h, &at, "\r\n", 2);
    }
    head_put(h, &at, NET_USER_AGENT "\r\n", sizeof(NET_USER_AGENT) + 1);
    if (with_body) {
        head_put(h, &at, "Content-Length: ", 16);
        head_put(h, &at, clen, strlen(clen));
        head_put(h, &at, "\r\n", 2);
        if (!typed)
            head_put(h, &at, form, sizeof(form) - 1);
    }
    head_put(h, &at, "\r\n", 2);
    if (inside > 0)
        head_put(h, &at, req->body, inside);
    *len = at;
    return 0;
}
