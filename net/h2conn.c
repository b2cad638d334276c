/* h2conn.c - botgate's own HTTP/2 to a platform over TLS: libnghttp2 frames the streams and
 * keeps their state (flow control, HPACK, SETTINGS, PING, GOAWAY), OpenSSL carries the bytes,
 * and this file moves them between the two on the worker's event_base.
 *
 * Why not curl's HTTP/2: libcurl 7.88 keeps an easy handle (5.3 KiB) and its per-transfer state
 * for every call in flight, and about 225,000 instructions per call over TLS (bench/README.md);
 * a stream here is one small record in nghttp2 and one here.
 *
 * The socket's read event stays registered for the connection's whole life. Everything the
 * streams submit during one pass of the loop goes out in one SSL_write at its end (the kick
 * event), and a read takes all that OpenSSL holds before the frames it produced go out. The
 * callers' callbacks run only from this file's own events, never inside nghttp2 and never inside
 * h2conn_submit, h2conn_cancel or h2conn_undialed: a callback may submit or cancel freely. */
#include "h2conn.h"

#include "nettls.h"

#include "../core/clock.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define READ_CHUNK   16384 /* bytes per SSL_read, on the stack */
#define WRITE_BATCH  65536 /* frames gathered before an SSL_write */
#define FIELDS_MAX   48    /* request fields, pseudo-fields included */
#define ASSUMED_MAX  100   /* streams at once until the platform's SETTINGS say (RFC 9113 5.1.2) */
#define ANSWER_FIRST 256   /* first size of an answer body's buffer: most are a few hundred bytes */

/* Owned by its connection, from h2conn_submit until its end has been handed up (or, cancelled,
 * until nghttp2 or the connection is done with it). */
struct h2conn_stream {
    h2conn_t *c;
    h2conn_done_cb *cb; /* NULL once cancelled */
    void *arg;
    int32_t id;
    const char *body; /* in the caller's message; NULL once cancelled */
    size_t body_len, body_sent;
    char *ans; /* the answer's body, owned */
    size_t ans_len, ans_cap, max;
    int status;
    char retry_after[32];
    char *content_type; /* owned */
    const char *error;  /* static text, or the connection's why */
    int os_errno;
    h2conn_outcome_t outcome;
    unsigned out : 1;      /* its HEADERS may have gone out */
    unsigned complete : 1; /* the final answer ended (END_STREAM) */
    unsigned in_final : 1; /* the header block being read is the final answer's */
    unsigned too_large : 1, bad : 1, ended : 1;
    h2conn_stream_t *prev, *next; /* under way: c->live; ended: c->ended_head's queue */
};

/* Owned by whoever made it (its origin's pool, netpool.c). */
struct h2conn {
    nghttp2_session *ngh;
    struct event rd;   /* EV_READ | EV_PERSIST, from h2conn_attach to the end */
    struct event *wr;  /* only while a write waits for room */
    struct event kick; /* the end of this loop pass: write what was submitted, hand results up */
    int fd;
    SSL *ssl;
    char *out; /* frames nghttp2 produced, not yet taken by SSL_write */
    size_t out_len, out_sent, out_cap;
    h2conn_stream_t *live; /* under way */
    size_t n_live;
    h2conn_stream_t *ended_head, *ended_tail; /* ended, their callbacks due */
    h2conn_gone_cb *gone;
    void *gone_arg;
    int64_t idle_since;
    int32_t goaway_last; /* after a GOAWAY: the last stream the platform processes */
    uint32_t broke;      /* the error code of the GOAWAY botgate sent: the platform broke
                            HTTP/2 (0: it did not) */
    long verify;
    net_err_t dial_err;
    int dial_errno;
    char why[160]; /* the connection's end, in words, for its streams */
    unsigned attached : 1, shaken : 1, dead : 1, goaway : 1, exhausted : 1, broken : 1;
    unsigned gone_told : 1, not_h2 : 1, settings : 1;
};

static void h2conn_kick(h2conn_t *c)
{
    event_active(&c->kick, EV_TIMEOUT, 0);
}

/* Ends s once: out of the streams under way, into the queue of ends to hand up. */
static void stream_end(h2conn_t *c, h2conn_stream_t *s, h2conn_outcome_t outcome, int os_errno,
                       const char *error)
{
    if (s->ended)
        return;
    s->ended = 1;
    s->outcome = outcome;
    s->os_errno = os_errno;
    s->error = error;
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        c->live = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    c->n_live--;
    s->prev = NULL;
    s->next = NULL;
    if (c->ended_tail != NULL)
        c->ended_tail->next = s;
    else
        c->ended_head = s;
    c->ended_tail = s;
    if (c->n_live == 0)
        c->idle_since = clock_coarse_ms();
    h2conn_kick(c);
}

static void stream_free(h2conn_stream_t *s)
{
    free(s->ans);
    free(s->content_type);
    free(s);
}

/* The connection can carry nothing more: every stream under way ends, as refused when the
 * platform surely did not process it (nothing of it went out, or it is past a GOAWAY's last
 * stream), else as sent_outcome. */
static void h2conn_die(h2conn_t *c, h2conn_outcome_t sent_outcome, h2conn_outcome_t unsent_outcome,
                       int os_errno, const char *why)
{
    if (c->dead)
        return;
    c->dead = 1;
    if (why != c->why) {
        strncpy(c->why, why, sizeof(c->why) - 1);
        c->why[sizeof(c->why) - 1] = '\0';
    }
    if (c->attached)
        event_del(&c->rd);
    if (c->wr != NULL)
        event_del(c->wr);
    while (c->live != NULL) {
        h2conn_stream_t *s = c->live;
        int unsent = !s->out || (c->goaway && s->id > c->goaway_last);
        stream_end(c, s, unsent ? unsent_outcome : sent_outcome, os_errno, c->why);
    }
    h2conn_kick(c);
}

/* Hands up the ends queued, then, when c is over, tells its owner (which frees it). 1: c is
 * gone. */
static int h2conn_deliver(h2conn_t *c)
{
    h2conn_stream_t *s;

    while ((s = c->ended_head) != NULL) {
        h2conn_result_t res;
        if ((c->ended_head = s->next) == NULL)
            c->ended_tail = NULL;
        if (s->cb != NULL) {
            memset(&res, 0, sizeof(res));
            res.outcome = s->outcome;
            res.status = s->status;
            res.retry_after = s->retry_after[0] ? s->retry_after : NULL;
            res.content_type = s->content_type;
            res.body = s->ans;
            res.body_len = s->ans_len;
            res.os_errno = s->os_errno;
            res.error = s->error != NULL ? s->error : "";
            res.verify = c->verify;
            res.dial_err = c->dial_err;
            res.conn = c;
            res.sent = s->out;
            s->cb(s->arg, &res);
            s->ans = res.body; /* NULL when the callback took it */
        }
        stream_free(s);
    }
    if (c->dead && c->live == NULL && !c->gone_told) {
        c->gone_told = 1;
        c->gone(c->gone_arg, c); /* frees c */
        return 1;
    }
    return 0;
}

static void h2conn_wait_writable(h2conn_t *c);

/* Takes what nghttp2 has to send into c->out. 0, or -1 when c died. */
static int h2conn_gather(h2conn_t *c)
{
    while (c->out_len < WRITE_BATCH) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->ngh, &data);
        if (n < 0) {
            h2conn_die(c, H2CONN_BAD_ANSWER, H2CONN_REFUSED, 0, nghttp2_strerror((int)n));
            return -1;
        }
        if (n == 0)
            break;
        if (c->out_len + (size_t)n > c->out_cap) {
            size_t cap = c->out_cap ? c->out_cap : 4096;
            char *out;
            while (cap < c->out_len + (size_t)n)
                cap *= 2;
            if ((out = realloc(c->out, cap)) == NULL) {
                h2conn_die(c, H2CONN_NO_ANSWER, H2CONN_REFUSED, ENOMEM, "out of memory");
                return -1;
            }
            c->out = out;
            c->out_cap = cap;
        }
        memcpy(c->out + c->out_len, data, (size_t)n);
        c->out_len += (size_t)n;
    }
    return 0;
}

/* Writes what nghttp2 has to send, as long as the socket takes it. */
static void h2conn_flush(h2conn_t *c)
{
    while (!c->dead) {
        int k, err;
        if (c->out_sent == c->out_len) {
            c->out_len = c->out_sent = 0;
            if (h2conn_gather(c) < 0 || c->out_len == 0)
                break;
        }
        ERR_clear_error();
        k = SSL_write(c->ssl, c->out + c->out_sent, (int)(c->out_len - c->out_sent));
        if (k > 0) {
            c->out_sent += (size_t)k;
            continue;
        }
        err = SSL_get_error(c->ssl, k);
        if (err == SSL_ERROR_WANT_WRITE) {
            h2conn_wait_writable(c);
            return;
        }
        if (err == SSL_ERROR_WANT_READ)
            return; /* the read event goes on */
        c->broken = 1;
        h2conn_die(c, H2CONN_NO_ANSWER, H2CONN_REFUSED, err == SSL_ERROR_SYSCALL ? errno : 0,
                   "sending to the platform failed");
        return;
    }
    if (c->wr != NULL)
        event_del(c->wr);
}

/* Goes on with the TLS handshake; when it is done, HTTP/2 starts if the platform chose it. */
static void h2conn_handshake(h2conn_t *c)
{
    const unsigned char *proto = NULL;
    unsigned proto_len = 0;
    nettls_failure_t failure;

    switch (nettls_handshake(c->ssl, &failure)) {
    case NETTLS_DONE:
        break;
    case NETTLS_WANT_READ:
        if (c->wr != NULL)
            event_del(c->wr);
        return;
    case NETTLS_WANT_WRITE:
        h2conn_wait_writable(c);
        return;
    default:
        c->broken = 1;
        c->verify = failure.verify;
        h2conn_die(c, H2CONN_TLS_FAILED, H2CONN_TLS_FAILED, failure.os_errno, failure.why);
        return;
    }
    c->shaken = 1;
    if (c->wr != NULL)
        event_del(c->wr);
    SSL_get0_alpn_selected(c->ssl, &proto, &proto_len);
    if (proto_len != 2 || memcmp(proto, "h2", 2) != 0) {
        c->not_h2 = 1;
        h2conn_die(c, H2CONN_NOT_H2, H2CONN_NOT_H2, 0, "the platform does not speak HTTP/2");
        return;
    }
    if (c->n_live == 0)
        c->idle_since = clock_coarse_ms();
    h2conn_flush(c); /* the preface, SETTINGS, and the streams submitted meanwhile */
}

static void h2conn_on_writable(evutil_socket_t fd, short what, void *arg)
{
    h2conn_t *c = arg;

    (void)fd;
    (void)what;
    if (!c->shaken)
        h2conn_handshake(c);
    else
        h2conn_flush(c);
    h2conn_deliver(c);
}

static void h2conn_wait_writable(h2conn_t *c)
{
    if (c->wr == NULL)
        c->wr =
            event_new(event_get_base(&c->rd), c->fd, EV_WRITE | EV_PERSIST, h2conn_on_writable, c);
    if (c->wr == NULL || event_add(c->wr, NULL) < 0)
        h2conn_die(c, H2CONN_NO_ANSWER, H2CONN_REFUSED, ENOMEM, "out of memory");
}

/* Reads all that the socket and OpenSSL hold into nghttp2. 0, or -1 when c died. */
static int h2conn_read(h2conn_t *c)
{
    uint8_t buf[READ_CHUNK];

    for (;;) {
        int k, err;
        ssize_t used;
        ERR_clear_error();
        k = SSL_read(c->ssl, buf, (int)sizeof(buf));
        if (k <= 0) {
            err = SSL_get_error(c->ssl, k);
            if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE)
                return 0;
            if (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && errno == 0)) {
                h2conn_die(c, H2CONN_NO_ANSWER, H2CONN_REFUSED, 0, "the connection closed");
            } else {
                const char *why = ERR_reason_error_string(ERR_peek_last_error());
                c->broken = 1;
                h2conn_die(c, H2CONN_NO_ANSWER, H2CONN_REFUSED,
                           err == SSL_ERROR_SYSCALL ? errno : 0,
                           err != SSL_ERROR_SYSCALL && why != NULL ? why : "the connection failed");
            }
            return -1;
        }
        used = nghttp2_session_mem_recv(c->ngh, buf, (size_t)k);
        if (used < 0) {
            /* nghttp2 has queued its GOAWAY: a last flush tells the platform why */
            h2conn_flush(c);
            h2conn_die(c, H2CONN_BAD_ANSWER, H2CONN_REFUSED, 0, nghttp2_strerror((int)used));
            return -1;
        }
        /* Nothing left in OpenSSL's buffer (it reads ahead as much as the socket holds, up to
         * a record's size): another SSL_read would only meet EAGAIN, one read(2) for nothing
         * on every readable event (half the reads of this socket, strace of bench a-tls).
         * What the socket may still hold keeps the read event (level-triggered) ready. */
        if (!SSL_has_pending(c->ssl))
            return 0;
    }
}

static void h2conn_on_readable(evutil_socket_t fd, short what, void *arg)
{
    h2conn_t *c = arg;

    (void)fd;
    (void)what;
    if (!c->shaken) {
        h2conn_handshake(c);
    } else if (!c->dead && h2conn_read(c) == 0) {
        h2conn_flush(c); /* SETTINGS and PING acknowledged, windows opened */
        if (!c->dead && c->broke != NGHTTP2_NO_ERROR) {
            snprintf(c->why, sizeof(c->why), "%s, on the whole connection",
                     nghttp2_http2_strerror(c->broke));
            h2conn_die(c, H2CONN_BAD_ANSWER, H2CONN_REFUSED, 0, c->why);
        } else if (!c->dead && !nghttp2_session_want_read(c->ngh) &&
                   !nghttp2_session_want_write(c->ngh)) {
            h2conn_die(c, H2CONN_NO_ANSWER, H2CONN_REFUSED, 0, "the platform ended the connection");
        }
    }
    h2conn_deliver(c);
}

static void h2conn_on_kick(evutil_socket_t fd, short what, void *arg)
{
    h2conn_t *c = arg;

    (void)fd;
    (void)what;
    if (c->shaken && !c->dead)
        h2conn_flush(c);
    h2conn_deliver(c);
}

/* ---- nghttp2's callbacks: they record, and end streams; nothing of the callers runs here ---- */

static h2conn_stream_t *stream_of(h2conn_t *c, int32_t id)
{
    return nghttp2_session_get_stream_user_data(c->ngh, id);
}

static int on_before_frame_send(nghttp2_session *ngh, const nghttp2_frame *frame, void *arg)
{
    h2conn_stream_t *s;

    (void)ngh;
    if (frame->hd.type == NGHTTP2_HEADERS && (s = stream_of(arg, frame->hd.stream_id)) != NULL)
        s->out = 1; /* from here on the platform may receive it */
    return 0;
}

/* A request's HEADERS could not go out (a GOAWAY came first, or it was cancelled): nghttp2
 * never opened the stream, so it is found in the list by its number. */
static int on_frame_not_send(nghttp2_session *ngh, const nghttp2_frame *frame, int lib_error,
                             void *arg)
{
    h2conn_t *c = arg;

    (void)ngh;
    (void)lib_error;
    if (frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    for (h2conn_stream_t *s = c->live; s != NULL; s = s->next)
        if (s->id == frame->hd.stream_id) {
            stream_end(c, s, H2CONN_REFUSED, 0, "the connection was ending");
            break;
        }
    return 0;
}

/* nghttp2 ends what the platform broke: a stream (RST_STREAM) or the whole connection (GOAWAY
 * with an error). Either is told as a bad answer, not as the platform's own reset or close. */
static int on_frame_send(nghttp2_session *ngh, const nghttp2_frame *frame, void *arg)
{
    h2conn_t *c = arg;
    h2conn_stream_t *s;

    (void)ngh;
    if (frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code != NGHTTP2_NO_ERROR) {
        c->broke = frame->goaway.error_code;
    } else if (frame->hd.type == NGHTTP2_RST_STREAM &&
               frame->rst_stream.error_code != NGHTTP2_CANCEL &&
               (s = stream_of(c, frame->hd.stream_id)) != NULL && !s->bad) {
        s->bad = 1;
        s->error = nghttp2_http2_strerror(frame->rst_stream.error_code);
    }
    return 0;
}

static int on_begin_headers(nghttp2_session *ngh, const nghttp2_frame *frame, void *arg)
{
    h2conn_stream_t *s = stream_of(arg, frame->hd.stream_id);

    (void)ngh;
    if (s != NULL)
        s->in_final = 0; /* until its :status says it is the final answer's */
    return 0;
}

static int field_is(const uint8_t *name, size_t len, const char *what)
{
    return len == strlen(what) && memcmp(name, what, len) == 0;
}

/* nghttp2 has checked the field (names in lower case, :status three digits). */
static int on_stream_field(nghttp2_session *ngh, const nghttp2_frame *frame, const uint8_t *name,
                           size_t name_len, const uint8_t *value, size_t value_len, uint8_t flags,
                           void *arg)
{
    h2conn_stream_t *s = stream_of(arg, frame->hd.stream_id);

    (void)ngh;
    (void)flags;
    if (s == NULL || s->cb == NULL)
        return 0;
    if (field_is(name, name_len, ":status")) {
        int status =
            value_len != 3 ? 0 : (value[0] - '0') * 100 + (value[1] - '0') * 10 + (value[2] - '0');
        if (status >= 200) {
            s->status = status;
            s->in_final = 1;
            s->retry_after[0] = '\0';
            free(s->content_type);
            s->content_type = NULL;
        }
        return 0;
    }
    if (!s->in_final)
        return 0; /* an interim answer's fields, or trailers */
    if (field_is(name, name_len, "retry-after") && value_len < sizeof(s->retry_after)) {
        memcpy(s->retry_after, value, value_len);
        s->retry_after[value_len] = '\0';
    } else if (field_is(name, name_len, "content-type") && value_len < 256 &&
               s->content_type == NULL && (s->content_type = malloc(value_len + 1)) != NULL) {
        memcpy(s->content_type, value, value_len);
        s->content_type[value_len] = '\0';
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *ngh, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *arg)
{
    h2conn_stream_t *s = stream_of(arg, id);

    (void)flags;
    if (s == NULL || s->cb == NULL || s->too_large)
        return 0;
    if (s->ans_len + len > s->max) {
        s->too_large = 1;
        nghttp2_submit_rst_stream(ngh, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
        return 0;
    }
    if (s->ans_len + len + 1 > s->ans_cap) {
        size_t cap = s->ans_cap ? s->ans_cap : ANSWER_FIRST;
        char *ans;
        while (cap < s->ans_len + len + 1)
            cap *= 2;
        if ((ans = realloc(s->ans, cap)) == NULL) {
            s->too_large = 1; /* nothing better to say; the stream ends */
            nghttp2_submit_rst_stream(ngh, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
            return 0;
        }
        s->ans = ans;
        s->ans_cap = cap;
    }
    memcpy(s->ans + s->ans_len, data, len);
    s->ans_len += len;
    s->ans[s->ans_len] = '\0';
    return 0;
}

static int on_frame_recv(nghttp2_session *ngh, const nghttp2_frame *frame, void *arg)
{
    h2conn_t *c = arg;
    h2conn_stream_t *s;

    (void)ngh;
    if (frame->hd.type == NGHTTP2_SETTINGS && !(frame->hd.flags & NGHTTP2_FLAG_ACK)) {
        c->settings = 1;
    } else if (frame->hd.type == NGHTTP2_GOAWAY) {
        c->goaway = 1;
        c->goaway_last = frame->goaway.last_stream_id;
    } else if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
               (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
               (s = stream_of(c, frame->hd.stream_id)) != NULL && s->status >= 200) {
        s->complete = 1;
    }
    return 0;
}

/* nghttp2 reset the stream itself: the answer broke HTTP/2's rules for messages. */
static int on_invalid_frame(nghttp2_session *ngh, const nghttp2_frame *frame, int lib_error,
                            void *arg)
{
    h2conn_stream_t *s = frame->hd.stream_id ? stream_of(arg, frame->hd.stream_id) : NULL;

    (void)ngh;
    if (s != NULL && !s->bad) {
        s->bad = 1;
        s->error = nghttp2_strerror(lib_error);
    }
    return 0;
}

static int on_stream_close(nghttp2_session *ngh, int32_t id, uint32_t code, void *arg)
{
    h2conn_t *c = arg;
    h2conn_stream_t *s = stream_of(c, id);

    (void)ngh;
    if (s == NULL || s->ended)
        return 0;
    nghttp2_session_set_stream_user_data(ngh, id, NULL);
    if (s->too_large)
        stream_end(c, s, H2CONN_TOO_LARGE, 0, "answer too large");
    else if (code == NGHTTP2_NO_ERROR && s->complete)
        stream_end(c, s, H2CONN_ANSWER, 0, "");
    else if (code == NGHTTP2_REFUSED_STREAM || (c->goaway && id > c->goaway_last))
        stream_end(c, s, H2CONN_REFUSED, 0, "the platform refused the stream");
    else if (s->bad)
        stream_end(c, s, H2CONN_BAD_ANSWER, 0, s->error);
    else
        stream_end(c, s, H2CONN_RESET, 0, nghttp2_http2_strerror(code));
    return 0;
}

static ssize_t on_read_body(nghttp2_session *ngh, int32_t id, uint8_t *buf, size_t length,
                            uint32_t *flags, nghttp2_data_source *source, void *arg)
{
    h2conn_stream_t *s = source->ptr;
    size_t n;

    (void)ngh;
    (void)id;
    (void)arg;
    if (s->body == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* cancelled: the stream is reset */
    n = s->body_len - s->body_sent;
    if (n > length)
        n = length;
    memcpy(buf, s->body + s->body_sent, n);
    s->body_sent += n;
    if (s->body_sent == s->body_len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

/* ---- the connection ---- */

h2conn_t *h2conn_new(struct event_base *base, uint32_t assumed_max, h2conn_gone_cb *gone,
                     void *gone_arg)
{
    static const nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};
    h2conn_t *c = calloc(1, sizeof(*c));
    nghttp2_session_callbacks *cbs = NULL;
    nghttp2_option *opt = NULL;
    int rv = -1;

    if (c == NULL)
        return NULL;
    c->fd = -1;
    c->gone = gone;
    c->gone_arg = gone_arg;
    evtimer_assign(&c->kick, base, h2conn_on_kick, c);
    if (nghttp2_session_callbacks_new(&cbs) == 0 && nghttp2_option_new(&opt) == 0) {
        nghttp2_session_callbacks_set_before_frame_send_callback(cbs, on_before_frame_send);
        nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
        nghttp2_session_callbacks_set_on_frame_not_send_callback(cbs, on_frame_not_send);
        nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback(cbs, on_stream_field);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
        nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
        nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cbs, on_invalid_frame);
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
        nghttp2_option_set_peer_max_concurrent_streams(opt,
                                                       assumed_max ? assumed_max : ASSUMED_MAX);
        rv = nghttp2_session_client_new2(&c->ngh, cbs, c, opt);
    }
    nghttp2_session_callbacks_del(cbs);
    nghttp2_option_del(opt);
    if (rv != 0 || nghttp2_submit_settings(c->ngh, NGHTTP2_FLAG_NONE, settings, 1) != 0) {
        h2conn_free(c);
        return NULL;
    }
    return c;
}

void h2conn_attach(h2conn_t *c, int fd, SSL *ssl)
{
    struct event_base *base = event_get_base(&c->kick);

    c->fd = fd;
    c->ssl = ssl;
    if (SSL_set_fd(ssl, fd) != 1) {
        h2conn_die(c, H2CONN_TLS_FAILED, H2CONN_TLS_FAILED, 0, "cannot set up TLS");
        return;
    }
    event_assign(&c->rd, base, fd, EV_READ | EV_PERSIST, h2conn_on_readable, c);
    if (event_add(&c->rd, NULL) < 0) {
        h2conn_die(c, H2CONN_TLS_FAILED, H2CONN_TLS_FAILED, ENOMEM, "out of memory");
        return;
    }
    c->attached = 1;
    h2conn_handshake(c);
}

void h2conn_undialed(h2conn_t *c, net_err_t err, const char *why, int os_errno, int may_retry)
{
    c->dial_err = err;
    c->dial_errno = os_errno;
    h2conn_die(c, may_retry ? H2CONN_REFUSED : H2CONN_UNDIALED,
               may_retry ? H2CONN_REFUSED : H2CONN_UNDIALED, os_errno, why);
}

/* The message's header section, from after the request line: one field per line, "name:"
 * then the value after optional white space. */
static int fields_add(nghttp2_nv *nv, size_t *n, const char *name, size_t name_len,
                      const char *value, size_t value_len)
{
    if (*n >= FIELDS_MAX)
        return -1;
    nv[*n].name = (uint8_t *)name;
    nv[*n].namelen = name_len;
    nv[*n].value = (uint8_t *)value;
    nv[*n].valuelen = value_len;
    nv[*n].flags = NGHTTP2_NV_FLAG_NONE; /* nghttp2 copies, and lowers the names */
    (*n)++;
    return 0;
}

/* HTTP/1.1's fields that say something of the connection, which HTTP/2 forbids (RFC 9113
 * 8.2.2), and Host, which becomes :authority. */
static int connection_field(const char *name, size_t len)
{
    static const char *const names[] = {"host",    "connection",        "keep-alive",
                                        "upgrade", "transfer-encoding", "proxy-connection",
                                        "te"};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (len == strlen(names[i]) && strncasecmp(name, names[i], len) == 0)
            return 1;
    return 0;
}

h2conn_stream_t *h2conn_submit(h2conn_t *c, const char *msg, size_t msg_len, size_t max_answer,
                               h2conn_done_cb *cb, void *arg)
{
    nghttp2_nv nv[FIELDS_MAX];
    nghttp2_data_provider body;
    const char *p = msg, *end = msg + msg_len, *sp1, *sp2, *eol;
    const char *authority = NULL;
    size_t n = 4, authority_len = 0;
    h2conn_stream_t *s;
    int32_t id;

    if (!h2conn_takes(c))
        return NULL;
    /* the request line: method, target, version */
    if ((eol = memchr(p, '\n', msg_len)) == NULL ||
        (sp1 = memchr(p, ' ', (size_t)(eol - p))) == NULL ||
        (sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1))) == NULL)
        return NULL;
    nv[0] = (nghttp2_nv){(uint8_t *)":method", (uint8_t *)p, 7, (size_t)(sp1 - p),
                         NGHTTP2_NV_FLAG_NONE};
    for (p = eol + 1; p < end && *p != '\r'; p = eol + 1) {
        const char *colon, *v, *vend;
        if ((eol = memchr(p, '\n', (size_t)(end - p))) == NULL ||
            (colon = memchr(p, ':', (size_t)(eol - p))) == NULL)
            return NULL;
        for (v = colon + 1; *v == ' ' || *v == '\t'; v++)
            ;
        vend = eol > v && eol[-1] == '\r' ? eol - 1 : eol;
        if ((size_t)(colon - p) == 4 && strncasecmp(p, "host", 4) == 0) {
            authority = v;
            authority_len = (size_t)(vend - v);
        } else if (!connection_field(p, (size_t)(colon - p)) &&
                   fields_add(nv, &n, p, (size_t)(colon - p), v, (size_t)(vend - v)) < 0) {
            return NULL;
        }
    }
    if (authority == NULL || p + 2 > end)
        return NULL;
    nv[1] = (nghttp2_nv){(uint8_t *)":scheme", (uint8_t *)"https", 7, 5, NGHTTP2_NV_FLAG_NONE};
    nv[2] = (nghttp2_nv){(uint8_t *)":authority", (uint8_t *)authority, 10, authority_len,
                         NGHTTP2_NV_FLAG_NONE};
    nv[3] = (nghttp2_nv){(uint8_t *)":path", (uint8_t *)sp1 + 1, 5, (size_t)(sp2 - sp1 - 1),
                         NGHTTP2_NV_FLAG_NONE};
    if ((s = calloc(1, sizeof(*s))) == NULL)
        return NULL;
    s->c = c;
    s->cb = cb;
    s->arg = arg;
    s->max = max_answer;
    s->body = p + 2;
    s->body_len = (size_t)(end - s->body);
    body.source.ptr = s;
    body.read_callback = on_read_body;
    id = nghttp2_submit_request(c->ngh, NULL, nv, n, s->body_len > 0 ? &body : NULL, s);
    if (id < 0) {
        if (id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE)
            c->exhausted = 1; /* its numbers are used up: new streams go on another */
        free(s);
        return NULL;
    }
    s->id = id;
    s->next = c->live;
    if (c->live != NULL)
        c->live->prev = s;
    c->live = s;
    c->n_live++;
    if (c->shaken)
        h2conn_kick(c);
    return s;
}

void h2conn_cancel(h2conn_stream_t *s)
{
    h2conn_t *c = s->c;

    s->cb = NULL;
    s->body = NULL;
    if (s->ended || c->dead)
        return; /* freed when the queue of ends is handed up, or with c */
    nghttp2_submit_rst_stream(c->ngh, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
    if (c->shaken)
        h2conn_kick(c);
}

int h2conn_takes(const h2conn_t *c)
{
    uint32_t most;

    if (c->dead || c->goaway || c->exhausted)
        return 0;
    most = nghttp2_session_get_remote_settings(c->ngh, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
    if (most > H2CONN_STREAMS_MAX)
        most = H2CONN_STREAMS_MAX;
    return c->n_live < most;
}

int h2conn_take_socket(h2conn_t *c, SSL **ssl)
{
    int fd = c->fd;

    if (!c->not_h2 || fd < 0)
        return -1;
    *ssl = c->ssl;
    c->ssl = NULL;
    c->fd = -1;
    return fd;
}

long h2conn_streams_allowed(const h2conn_t *c)
{
    return c->settings ? (long)nghttp2_session_get_remote_settings(
                             c->ngh, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
                       : -1;
}

int h2conn_allows_none(const h2conn_t *c)
{
    return !c->dead && !c->goaway && h2conn_streams_allowed(c) == 0;
}

int64_t h2conn_idle_since(const h2conn_t *c)
{
    return c->n_live == 0 && c->shaken && !c->dead ? c->idle_since : 0;
}

void h2conn_free(h2conn_t *c)
{
    h2conn_stream_t *s;

    if (c == NULL)
        return;
    event_del(&c->kick);
    if (c->attached)
        event_del(&c->rd);
    if (c->wr != NULL)
        event_free(c->wr);
    while ((s = c->live) != NULL) {
        c->live = s->next;
        stream_free(s);
    }
    while ((s = c->ended_head) != NULL) {
        c->ended_head = s->next;
        stream_free(s);
    }
    nghttp2_session_del(c->ngh);
    if (c->ssl != NULL) {
        /* a close_notify, best effort and without waiting: the socket closes next */
        if (c->shaken && !c->broken)
            SSL_shutdown(c->ssl);
        SSL_free(c->ssl);
    }
    if (c->fd >= 0)
        close(c->fd);
    free(c->out);
    free(c);
}
