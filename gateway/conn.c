/* conn.c - tracking client connections (see conn.h).
 * evhttp 2.1 tells nobody when a connection closes unless a close callback was set on it, and
 * offers no hook where a new connection is seen together with its evhttp_connection. So the
 * bufferevent hook counts the connection and queues its bufferevent; a deferred callback, run
 * in the same loop iteration once evhttp has wired the connection up, finds the connection
 * (the bufferevent's callback argument) and sets the close callback. (A pass-through filter
 * bufferevent would see the free too, but evhttp then takes a reply as sent once it reaches
 * the filter, and closes Connection: close replies before they are written.) */
#include "conn.h"

#include "../core/clock.h"
#include "../core/dlist.h"
#include "../core/request.h"
#include "../core/rng.h"
#include "log.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_struct.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define CONN_BUCKETS 4096
#define SWEEP_MS     1000
#define LINE_KEEP    64 /* of each head line: enough for the framing headers' values */
/* A refused client has this long to finish sending (what it sends is read and dropped, as
 * evhttp's lingering close does, so that it gets to read the answer) and close. */
#define REFUSED_LINGER_MS 5000
/* A chunked body carries its framing too: the raw bytes may exceed the body by this much. */
#define CHUNKED_SLACK (64 * 1024)

/* Where a connection is in the request it is reading. evhttp parses the head itself and
 * consumes it line by line as it arrives, so the framing headers are checked here, on the bytes
 * as they are read into the input buffer (an evbuffer callback runs before evhttp's read
 * callback sees them): a request whose framing evhttp would get wrong is answered and the
 * connection closed before evhttp acts on it. */
typedef enum {
    CONN_HEAD,    /* the bytes that come are a request's head */
    CONN_BODY,    /* the head was fine: its body, until the request arrives complete */
    CONN_REFUSED, /* answered with an error: whatever comes is dropped until the close */
} conn_phase_t;

/* What a connection needs only while it reads a request: the head's framing and the bytes
 * counted against the worker's budget. Allocated with the first byte of a request (reading),
 * freed when the request has arrived, was refused, or the connection closed (done_reading):
 * a connection whose request is being worked on, or that waits for the next, holds none. */
typedef struct conn_reading {
    /* the head being read */
    unsigned lines; /* complete lines of this head */
    unsigned n_length, n_encoding;
    unsigned length_bad : 1, encoding_bad : 1, folded : 1;
    unsigned framing_line : 1; /* the previous line was Content-Length or Transfer-Encoding */
    unsigned broadcast : 1;    /* POST /broadcasts: its body may be REQUEST_MAX_BROADCAST_BODY */
    size_t line_len;           /* the current line's length, beyond LINE_KEEP too */
    char line[LINE_KEEP];      /* the start of the current line */
    int64_t length;            /* the Content-Length, -1 when none */
    /* the worker's budget */
    size_t received; /* bytes of this request read so far, head included */
    size_t charged;  /* counted against the budget: the most of received and declared */
} conn_reading_t;

/* Owned by the worker's table from the accept until evhttp closes the connection. */
typedef struct conn {
    conn_table_t *t;
    struct evhttp_connection *evcon; /* NULL until adopted */
    struct bufferevent *bev;
    int64_t progress_ms; /* accepted, a request arrived, or an answer was given */
    int busy;            /* API requests of this connection being worked on */
    /* the flags as bits: a record per client connection, thousands at once (bench/README.md) */
    unsigned phase : 2; /* a conn_phase_t */
    unsigned hold_off : 1;
    unsigned hold_idle : 2; /* loop turns in a row it woke while evhttp was not reading: 0-2 */
    conn_reading_t *rd;     /* owned; NULL but while a request is read */
    int64_t close_at_ms;    /* CONN_REFUSED: closed at the first sweep past it */
    struct evbuffer_cb_entry *watch; /* on_input on the input buffer */
    /* Keeps the socket registered for reading while evhttp's own read event is off (see
     * on_hold); pending from the adoption until the close, unless hold_off. */
    struct event hold;
    struct conn *prev, *next, *hnext;
} conn_t;
/* a record per client connection: within mimalloc's 224-byte class (bench/README.md) */
_Static_assert(sizeof(conn_t) <= 224, "conn_t grew past its size class");

/* Owned by the worker's server (conn_setup, conn_cleanup). */
struct conn_table {
    struct event_base *base;
    const config_t *cfg;
    metrics_t *metrics;
    uint64_t *rng;
    struct evconnlistener *listener; /* NULL once closed */
    int accepting;                   /* the listener is enabled */
    size_t connections;              /* open client connections */
    conn_t *all, *all_last;          /* every adopted connection */
    conn_t *buckets[CONN_BUCKETS];
    conn_t **fresh; /* accepted in this loop iteration, not yet adopted */
    size_t n_fresh, cap_fresh;
    size_t reading; /* bytes charged by requests being read, all connections */
    size_t reading_max;
    struct event *adopt;
    struct event *sweep;
};

static unsigned bucket_of(const void *evcon)
{
    uintptr_t p = (uintptr_t)evcon;

    return (unsigned)((p >> 4) ^ (p >> 16)) % CONN_BUCKETS;
}

static conn_t *find_by_evcon(conn_table_t *t, const struct evhttp_connection *evcon)
{
    conn_t *c = t->buckets[bucket_of(evcon)];

    while (c != NULL && c->evcon != evcon)
        c = c->hnext;
    return c;
}

/* Pauses or resumes accepting to follow the cap. */
static void update_accepting(conn_table_t *t)
{
    int want = t->connections < (size_t)t->cfg->max_connections;

    if (t->listener == NULL || want == t->accepting)
        return;
    if (want) {
        evconnlistener_enable(t->listener);
    } else {
        evconnlistener_disable(t->listener);
        atomic_fetch_add_explicit(&t->metrics->accept_pauses, 1, memory_order_relaxed);
    }
    t->accepting = want;
}

void conn_set_listener(conn_table_t *t, struct evconnlistener *l)
{
    t->listener = l;
    t->accepting = l != NULL;
    update_accepting(t);
}

static void uncount(conn_table_t *t)
{
    t->connections--;
    atomic_fetch_add_explicit(&t->metrics->connections, -1, memory_order_relaxed);
    update_accepting(t);
}

static void on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg);
static void done_reading(conn_t *c);

static void on_closed(struct evhttp_connection *evcon, void *arg)
{
    conn_t *c = arg, **pp;
    conn_table_t *t = c->t;

    for (pp = &t->buckets[bucket_of(evcon)]; *pp != c; pp = &(*pp)->hnext)
        ;
    *pp = c->hnext;
    DLIST_UNLINK(t->all, t->all_last, c);
    done_reading(c);
    evbuffer_remove_cb(bufferevent_get_input(c->bev), on_input, c);
    event_del(&c->hold);
    uncount(t);
    free(c);
}

/* ---- the head check ---- */

/* The state of the request being read, from its first byte; NULL without memory. */
static conn_reading_t *reading(conn_t *c)
{
    if (c->rd == NULL && (c->rd = calloc(1, sizeof(*c->rd))) != NULL)
        c->rd->length = -1;
    return c->rd;
}

/* Counts bytes the request holds against the worker's budget; -1 when it is spent. */
static int charge(conn_t *c, size_t total)
{
    conn_table_t *t = c->t;
    conn_reading_t *rd = c->rd;

    if (total <= rd->charged)
        return 0;
    if (t->reading + (total - rd->charged) > t->reading_max)
        return -1;
    t->reading += total - rd->charged;
    rd->charged = total;
    return 0;
}

/* The request arrived (its body left the input buffer for the request), was refused, or the
 * connection closed: what it held is no longer held for it, and its head is forgotten. */
static void done_reading(conn_t *c)
{
    if (c->rd == NULL)
        return;
    c->t->reading -= c->rd->charged;
    free(c->rd);
    c->rd = NULL;
}

static const char *trim(char *s)
{
    size_t n;

    s += strspn(s, " \t");
    n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    return s;
}

/* One complete line of the head (its first LINE_KEEP bytes in rd->line, NUL-terminated). */
static void head_line(conn_reading_t *rd)
{
    int long_line = rd->line_len >= LINE_KEEP;
    char *colon;
    const char *v;

    if (rd->lines++ == 0) {
        /* the request line: evhttp's, but for the one route whose body may be larger (an
         * absolute-form target keeps REQUEST_MAX_BODY: no client sends one to an origin) */
        rd->broadcast = strncmp(rd->line, "POST /broadcasts", 16) == 0 &&
                        (rd->line[16] == ' ' || rd->line[16] == '?');
        return;
    }
    if (rd->line[0] == ' ' || rd->line[0] == '\t') {
        /* obs-fold: evhttp appends it to the header before */
        if (rd->framing_line)
            rd->folded = 1;
        return;
    }
    rd->framing_line = 0;
    /* only Content-Length and Transfer-Encoding matter here: the other lines end at a glance */
    if ((rd->line[0] | 0x20) != 'c' && (rd->line[0] | 0x20) != 't')
        return;
    if ((colon = strchr(rd->line, ':')) == NULL)
        return;
    *colon = '\0';
    v = trim(colon + 1);
    if (strcasecmp(rd->line, "Content-Length") == 0) {
        char *end;
        rd->framing_line = 1;
        rd->n_length++;
        if (long_line || *v < '0' || *v > '9' || strspn(v, "0123456789") != strlen(v)) {
            rd->length_bad = 1; /* "+80", "-1", "42, 42", empty, ... */
            return;
        }
        /* digits only: a value past the limit (or past int64) is a size refusal */
        v += strspn(v, "0");
        rd->length = strlen(v) > 18 ? INT64_MAX : (int64_t)strtoll(v, &end, 10);
    } else if (strcasecmp(rd->line, "Transfer-Encoding") == 0) {
        rd->framing_line = 1;
        rd->n_encoding++;
        if (long_line || strcasecmp(v, "chunked") != 0)
            rd->encoding_bad = 1; /* evhttp knows nothing but chunked */
    }
}

typedef struct verdict {
    int status;
    int code;
    const char *msg;
} verdict_t;

/* The most bytes the request's body may have. */
static size_t body_max(const conn_reading_t *rd)
{
    return rd->broadcast ? REQUEST_MAX_BROADCAST_BODY : REQUEST_MAX_BODY;
}

/* The empty line: the head is complete. 0 when evhttp may go on with it. */
static int head_done(conn_t *c, verdict_t *v)
{
    const conn_reading_t *rd = c->rd;

    if (rd->n_encoding > 0 && rd->n_length > 0)
        *v = (verdict_t){400, BG_ERR_MISSING_PARAM, "both Content-Length and Transfer-Encoding"};
    else if (rd->n_encoding > 1 || rd->encoding_bad)
        *v =
            (verdict_t){501, BG_ERR_MISSING_PARAM, "Transfer-Encoding not supported: only chunked"};
    else if (rd->n_length > 1)
        *v = (verdict_t){400, BG_ERR_MISSING_PARAM, "more than one Content-Length"};
    else if (rd->length_bad || rd->folded)
        *v = (verdict_t){400, BG_ERR_MISSING_PARAM, "invalid Content-Length"};
    else if (rd->length > (int64_t)body_max(rd))
        *v = (verdict_t){413, BG_ERR_LIMIT, "request body too large"};
    else if (rd->length > 0 && rd->received + (size_t)rd->length > c->t->reading_max)
        /* more than the worker reads at once: a retry would never be read either */
        *v = (verdict_t){413, BG_ERR_LIMIT,
                         "request body larger than a worker reads at once "
                         "(BOTGATE_MAX_READING_MB)"};
    else if (rd->length > 0 && charge(c, rd->received + (size_t)rd->length) < 0)
        *v = (verdict_t){503, BG_ERR_UNAVAILABLE, "too many requests being read; retry"};
    else
        return 0;
    return -1;
}

/* A line of the head ended (rd->line holds its first bytes): a header, or the empty line that
 * ends the head. 0, or -1 with the verdict. */
static int line_end(conn_t *c, verdict_t *v)
{
    conn_reading_t *rd = c->rd;
    size_t keep = rd->line_len < LINE_KEEP ? rd->line_len : LINE_KEEP - 1;

    if (keep > 0 && rd->line[keep - 1] == '\r')
        keep--;
    rd->line[keep] = '\0';
    if (keep == 0 && rd->line_len <= 1 && rd->lines > 0) {
        rd->line_len = 0;
        if (head_done(c, v) < 0)
            return -1;
        c->phase = CONN_BODY;
        return 0;
    }
    head_line(rd);
    rd->line_len = 0;
    return 0;
}

/* Follows n bytes that were just added at the end of buf. 0, or -1 with the verdict. */
static int follow(conn_t *c, struct evbuffer *buf, size_t n, verdict_t *v)
{
    struct evbuffer_ptr pos;
    size_t len = evbuffer_get_length(buf);
    conn_reading_t *rd = reading(c);

    if (rd == NULL) {
        *v = (verdict_t){503, BG_ERR_UNAVAILABLE, "out of memory; retry"};
        return -1;
    }
    rd->received += n;
    if (charge(c, rd->received) < 0) {
        *v = (verdict_t){503, BG_ERR_UNAVAILABLE, "too many requests being read; retry"};
        return -1;
    }
    if (c->phase == CONN_BODY) {
        if (rd->length < 0 && rd->received > body_max(rd) + CONN_MAX_HEADERS_SIZE + CHUNKED_SLACK) {
            *v = (verdict_t){413, BG_ERR_LIMIT, "request body too large"};
            return -1;
        }
        return 0;
    }
    /* CONN_HEAD: the new bytes, a line at a time (memchr and one copy of at most LINE_KEEP
     * bytes per line: this runs on every request's head) */
    if (evbuffer_ptr_set(buf, &pos, len - n, EVBUFFER_PTR_SET) < 0)
        return 0;
    while (c->phase == CONN_HEAD && pos.pos >= 0 && (size_t)pos.pos < len) {
        struct evbuffer_iovec vec[4];
        int nvec = evbuffer_peek(buf, -1, &pos, vec, 4);
        size_t seen = 0;

        if (nvec < 1)
            break;
        for (int i = 0; i < nvec && i < 4 && c->phase == CONN_HEAD; i++) {
            const char *p = vec[i].iov_base, *end = p + vec[i].iov_len;
            while (p < end) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                size_t seg = (size_t)((nl ? nl : end) - p);
                if (rd->line_len < LINE_KEEP - 1) {
                    size_t room = LINE_KEEP - 1 - rd->line_len;
                    memcpy(rd->line + rd->line_len, p, seg < room ? seg : room);
                }
                rd->line_len += seg;
                seen += seg;
                p += seg;
                if (nl == NULL)
                    break;
                p++;
                seen++;
                if (line_end(c, v) < 0)
                    return -1;
                if (c->phase != CONN_HEAD) {
                    /* A body of known length was charged whole by head_done: nothing more to
                     * watch until the request arrives (conn_request_arrived), and evhttp's
                     * drains of the head lines and the body call no callback. A chunked body
                     * is counted as it comes. */
                    if (rd->n_encoding == 0)
                        evbuffer_cb_clear_flags(buf, c->watch, EVBUFFER_CB_ENABLED);
                    return 0;
                }
            }
        }
        if (nvec <= 4 || evbuffer_ptr_set(buf, &pos, seen, EVBUFFER_PTR_ADD) < 0)
            break;
    }
    return 0;
}

/* Writes the answer to a refused request straight to the socket (evhttp has not parsed the
 * request: it cannot answer it) and lets the client read it: the connection stays open,
 * dropping what comes, until the client closes it or REFUSED_LINGER_MS (at most the HTTP
 * timeout) passed. */
static void refuse_now(conn_t *c, struct evbuffer *buf, const verdict_t *v)
{
    static const char *const reasons[] = {"Bad Request", "Payload Too Large", "Not Implemented",
                                          "Service Unavailable"};
    const char *reason = v->status == 400   ? reasons[0]
                         : v->status == 413 ? reasons[1]
                         : v->status == 501 ? reasons[2]
                                            : reasons[3];
    char body[256], text[600], id[17];
    int blen, n;
    evutil_socket_t fd = bufferevent_getfd(c->bev);

    rng_hex(c->t->rng, id, 16);

    blen =
        snprintf(body, sizeof(body), "{\"ok\":0,\"err_code\":%d,\"err\":\"%s\",\"error\":\"%s\"}",
                 v->code, v->msg, v->msg);
    n = snprintf(text, sizeof(text),
                 "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                 "X-Request-Id: %s\r\n%sConnection: close\r\n\r\n%s",
                 v->status, reason, blen, id, v->status == 503 ? "Retry-After: 1\r\n" : "", body);
    evbuffer_drain(buf, evbuffer_get_length(buf));
    c->phase = CONN_REFUSED;
    c->close_at_ms = clock_coarse_ms() + REFUSED_LINGER_MS;
    done_reading(c);
    log_msg(LOG_INFO, "refused a request before its body: status %d, %s, request_id %s", v->status,
            v->msg, id);
    /* A fresh answer to a socket that has sent a request: the kernel takes it whole unless the
     * client stopped reading, and then it is lost with the connection. */
    if (fd >= 0 && n > 0 && send(fd, text, (size_t)n, MSG_NOSIGNAL) == n)
        shutdown(fd, SHUT_WR);
}

/* The input buffer's callback: runs as bytes are read, before evhttp's read callback. */
static void on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    conn_t *c = arg;
    verdict_t v;

    if (info->n_added == 0)
        return;
    if (c->phase == CONN_REFUSED) {
        evbuffer_drain(buf, evbuffer_get_length(buf));
        return;
    }
    if (follow(c, buf, info->n_added, &v) < 0)
        refuse_now(c, buf, &v);
}

/* ---- the socket's registration ---- */

/* evhttp stops reading a connection while its request is worked on and reads again after the
 * answer: with its read event the only one on the socket, that is an epoll_ctl to take the
 * socket out and another (libevent's changelist makes it a MOD when both fall in one loop
 * turn) to put it back, for every request. A second read event on the same socket, ours,
 * keeps the kernel's registration as it is while evhttp's comes and goes: libevent changes
 * the epoll set only when the first event on a socket is added or the last removed.
 *
 * Ours does nothing when the socket is readable and evhttp reads it. It also wakes in the turn
 * where evhttp read a request and stopped (both events fire together): nothing is left to read
 * then, and it does not wake again. A second turn in a row while evhttp is not reading means
 * the client sent more, or closed, during the request: the socket would stay readable and wake
 * the loop on every turn, so ours steps aside until the answer (conn_request_done), and the
 * bytes or the close wait in the kernel as they always did. */
static void on_hold(evutil_socket_t fd, short what, void *arg)
{
    conn_t *c = arg;

    (void)fd;
    (void)what;
    if (bufferevent_get_enabled(c->bev) & EV_READ) {
        c->hold_idle = 0;
        return;
    }
    if (++c->hold_idle < 2)
        return;
    event_del(&c->hold);
    c->hold_off = 1;
}

/* ---- reading the socket ---- */

/* What one read asks for: libevent's reads are at most 4096 bytes too (EVBUFFER_MAX_READ), and
 * with the 48 bytes of the chain's own header this is one 4 KiB block of the input buffer. */
#define READ_SIZE (4096 - 48)

/* The bufferevent's read event runs this in place of libevent's bufferevent_readcb
 * (bufferevent_sock.c, 2.1.12), which it follows step for step but one: evbuffer_read asks the
 * kernel how many bytes wait (ioctl FIONREAD) before every read, a system call per request.
 * This reads into the space the buffer reserves, READ_SIZE at most; epoll, level-triggered,
 * reports the socket again for what did not fit. evhttp sets no read watermark and no rate
 * limit on its connections, the two things bufferevent_readcb also checks. */
static void read_socket(evutil_socket_t fd, short what, void *arg)
{
    struct bufferevent *bev = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    struct evbuffer_iovec vec[2];
    struct iovec iov[2];
    ssize_t n = -1;
    int nvec;

    if (what == EV_TIMEOUT) {
        bufferevent_disable(bev, EV_READ);
        bufferevent_trigger_event(bev, BEV_EVENT_READING | BEV_EVENT_TIMEOUT, 0);
        return;
    }
    /* only the bufferevent adds to its input: the end is frozen but while it reads */
    evbuffer_unfreeze(in, 0);
    nvec = evbuffer_reserve_space(in, READ_SIZE, vec, 2);
    if (nvec > 0) {
        for (int i = 0; i < nvec; i++)
            iov[i] = (struct iovec){vec[i].iov_base, vec[i].iov_len};
        n = readv(fd, iov, nvec);
    }
    if (n > 0) {
        /* the bytes fill the first space, then the second */
        if ((size_t)n <= vec[0].iov_len) {
            vec[0].iov_len = (size_t)n;
            nvec = 1;
        } else {
            vec[1].iov_len = (size_t)n - vec[0].iov_len;
        }
        evbuffer_commit_space(in, vec, nvec); /* runs on_input */
    }
    evbuffer_freeze(in, 0);
    if (n > 0) {
        bufferevent_trigger(bev, EV_READ, 0); /* evhttp's read callback */
        return;
    }
    if (n < 0 && nvec > 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    bufferevent_disable(bev, EV_READ);
    bufferevent_trigger_event(bev, BEV_EVENT_READING | (n == 0 ? BEV_EVENT_EOF : BEV_EVENT_ERROR),
                              0);
}

/* Puts read_socket in the place of libevent's read callback. evhttp has set the socket
 * (bufferevent_setfd, the one place libevent assigns the event, with these flags) and enabled
 * reading: the event is taken off and put back as it was, which libevent's list of epoll
 * changes turns into no change at all. */
static void take_reads(struct bufferevent *bev)
{
    struct event *ev = &bev->ev_read;
    int priority = event_get_priority(ev);
    int reading = event_pending(ev, EV_READ, NULL);

    event_del(ev);
    event_assign(ev, event_get_base(ev), event_get_fd(ev), EV_READ | EV_PERSIST | EV_FINALIZE,
                 read_socket, bev);
    event_priority_set(ev, priority);
    if (reading)
        event_add(ev, evutil_timerisset(&bev->timeout_read) ? &bev->timeout_read : NULL);
}

/* ---- the table ---- */

static void adopt(evutil_socket_t fd, short what, void *arg)
{
    conn_table_t *t = arg;

    (void)fd;
    (void)what;
    for (size_t i = 0; i < t->n_fresh; i++) {
        conn_t *c = t->fresh[i];
        struct evhttp_connection *evcon = NULL;
        bufferevent_getcb(c->bev, NULL, NULL, NULL, (void **)&evcon);
        if (evcon == NULL) {
            /* untracked: never uncounted; only under memory exhaustion */
            evbuffer_remove_cb(bufferevent_get_input(c->bev), on_input, c);
            done_reading(c);
            free(c);
            continue;
        }
        c->evcon = evcon;
        c->hnext = t->buckets[bucket_of(evcon)];
        t->buckets[bucket_of(evcon)] = c;
        DLIST_PREPEND(t->all, t->all_last, c);
        evhttp_connection_set_closecb(evcon, on_closed, c);
        event_assign(&c->hold, t->base, bufferevent_getfd(c->bev), EV_READ | EV_PERSIST, on_hold,
                     c);
        event_add(&c->hold, NULL);
        take_reads(c->bev);
    }
    t->n_fresh = 0;
}

static struct bufferevent *on_new_connection(struct event_base *base, void *arg)
{
    conn_table_t *t = arg;
    struct bufferevent *bev;
    conn_t *c;

    if (t->n_fresh == t->cap_fresh) {
        size_t cap = t->cap_fresh ? t->cap_fresh * 2 : 64;
        conn_t **fresh = realloc(t->fresh, cap * sizeof(*fresh));
        if (fresh == NULL)
            return NULL;
        t->fresh = fresh;
        t->cap_fresh = cap;
    }
    if ((c = calloc(1, sizeof(*c))) == NULL)
        return NULL;
    bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL ||
        (c->watch = evbuffer_add_cb(bufferevent_get_input(bev), on_input, c)) == NULL) {
        if (bev != NULL)
            bufferevent_free(bev);
        free(c);
        return NULL;
    }
    c->t = t;
    c->bev = bev;
    c->progress_ms = clock_coarse_ms();
    c->phase = CONN_HEAD;
    t->fresh[t->n_fresh++] = c;
    event_active(t->adopt, EV_TIMEOUT, 0);
    t->connections++;
    atomic_fetch_add_explicit(&t->metrics->connections, 1, memory_order_relaxed);
    update_accepting(t);
    return bev;
}

/* Closes connections that made no progress within the HTTP timeout and have no request being
 * worked on: idle keep-alive connections (evhttp would too) and trickling ones (it would not). */
static void sweep(evutil_socket_t fd, short what, void *arg)
{
    conn_table_t *t = arg;
    int64_t limit = clock_coarse_ms() - (int64_t)t->cfg->http_timeout_s * 1000;
    conn_t *c = t->all, *next;

    (void)fd;
    (void)what;
    int64_t now = clock_coarse_ms();

    for (; c != NULL; c = next) {
        next = c->next;
        if (c->busy == 0 &&
            (c->progress_ms < limit || (c->phase == CONN_REFUSED && now >= c->close_at_ms)))
            evhttp_connection_free(c->evcon); /* on_closed frees c */
    }
}

conn_table_t *conn_setup(struct event_base *base, struct evhttp *http, const config_t *cfg,
                         metrics_t *metrics, uint64_t *rng)
{
    struct timeval tv = clock_ms_timeval(SWEEP_MS);
    conn_table_t *t = calloc(1, sizeof(*t));

    if (t == NULL)
        return NULL;
    t->base = base;
    t->cfg = cfg;
    t->metrics = metrics;
    t->rng = rng;
    t->reading_max = (size_t)cfg->max_reading_mb * 1024 * 1024;
    t->adopt = event_new(base, -1, 0, adopt, t);
    t->sweep = event_new(base, -1, EV_PERSIST, sweep, t);
    if (t->adopt == NULL || t->sweep == NULL || event_add(t->sweep, &tv) < 0) {
        conn_cleanup(t);
        return NULL;
    }
    evhttp_set_bevcb(http, on_new_connection, t);
    return t;
}

void conn_cleanup(conn_table_t *t)
{
    if (t == NULL)
        return;
    if (t->adopt)
        event_free(t->adopt);
    if (t->sweep)
        event_free(t->sweep);
    free(t->fresh);
    free(t);
}

void conn_request_arrived(conn_table_t *t, struct evhttp_request *req, int busy)
{
    conn_t *c = find_by_evcon(t, evhttp_request_get_connection(req));
    struct evbuffer *in;
    verdict_t v;

    if (c == NULL)
        return;
    c->progress_ms = clock_coarse_ms();
    c->busy += busy;
    /* The body went from the input buffer into the request: what is left there is the head of
     * the next request, sent before this one was answered. evhttp reads it only after the
     * answer; a bad one closes the connection with the answer instead. */
    done_reading(c);
    if (c->phase == CONN_REFUSED)
        return;
    c->phase = CONN_HEAD;
    in = bufferevent_get_input(c->bev);
    evbuffer_cb_set_flags(in, c->watch, EVBUFFER_CB_ENABLED);
    if (evbuffer_get_length(in) > 0 && follow(c, in, evbuffer_get_length(in), &v) < 0) {
        log_msg(LOG_DEBUG, "refused a pipelined request: %d %s", v.status, v.msg);
        evbuffer_drain(in, evbuffer_get_length(in));
        done_reading(c);
        c->phase = CONN_REFUSED;
        c->close_at_ms = clock_coarse_ms() + REFUSED_LINGER_MS;
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
    }
}

void conn_request_done(conn_table_t *t, struct evhttp_request *req)
{
    conn_t *c = find_by_evcon(t, evhttp_request_get_connection(req));

    if (c != NULL) {
        c->progress_ms = clock_coarse_ms();
        if (c->busy > 0)
            c->busy--;
        c->hold_idle = 0;
        if (c->hold_off) {
            c->hold_off = 0; /* evhttp reads again as the answer goes, in this loop turn */
            event_add(&c->hold, NULL);
        }
    }
}
