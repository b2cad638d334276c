/* net.c - the outbound client: picks the path of each call and hands every end up through one
 * place (xfer_end), whichever path carried it.
 *
 * A platform call straight to an http:// or https:// URL, with no proxy and no redirect to
 * follow, is written and read by botgate itself on connections kept per origin (netpool.c):
 * curl resolves the name and connects the socket and lets it go (netcurl_dial); over TLS,
 * OpenSSL then does the handshake (nettls.c). Over HTTP/1.1 (cleartext, or TLS with the HTTP/1.1
 * setting) h1conn.c writes the request and reads the answer; over TLS with the HTTP/2 setting
 * the call is a stream of an HTTP/2 connection (h2conn.c), or goes over HTTP/1.1 on the same TLS
 * connection when the platform chooses it. libcurl 7.88 spends about 60,000 instructions and
 * two poll() calls per request writing the request and reading the answer over HTTP/1.1, and
 * keeps 5 KiB of state per call in flight over HTTP/2 (bench/README.md); these paths spend a few
 * thousand, no poll(), and a few hundred bytes per HTTP/2 stream. Everything else (proxies,
 * redirects, the SSRF-guarded client for URLs users give, any URL in a form they do not take)
 * is curl's (netcurl_start). */
#include "net.h"

#include "h1conn.h"
#include "h2conn.h"
#include "netcurl.h"
#include "neterr.h"
#include "netpool.h"
#include "nettls.h"

#include "../core/clock.h"

#include <event2/event.h>
#include <limits.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OWN_TRIES 5 /* connections tried when kept-alive ones turn out closed (curl: 5 too) */

/* Owned by its worker. */
struct net {
    struct event_base *base;
    net_config_t cfg;
    netcurl_t *curl;
    netpool_t *pool;
    SSL_CTX *tls; /* botgate's own HTTP/1.1 and HTTP/2 over TLS (platform client), or NULL */
    int own;      /* calls straight to the platform may be botgate's own: no guard, no proxy */
    net_xfer_t *spare;
};

typedef enum xfer_phase {
    XFER_CURL,     /* curl carries the call (netcurl_start) */
    XFER_KICK,     /* started, waiting for its turn of the loop */
    XFER_DIAL,     /* curl connects a socket for it (netcurl_dial) */
    XFER_EXCHANGE, /* its request and answer on an h1conn */
    XFER_STREAM,   /* a stream of an h2conn (whose socket it may be dialing) */
} xfer_phase_t;

/* Owned by net_t: in flight from net_start until its callback or cancel, then kept on the free
 * list with its timer and its request-head buffer. */
struct net_xfer {
    net_t *net;
    net_cb *cb;
    void *arg;
    xfer_phase_t phase;
    netcurl_job_t *job; /* curl's part: the whole call (XFER_CURL), or its connect */
    /* over botgate's own HTTP: */
    netpool_origin_t *origin;
    h1conn_t *link;          /* during XFER_EXCHANGE */
    h2conn_stream_t *stream; /* during XFER_STREAM */
    h2conn_t *dialing;       /* the HTTP/2 connection whose socket its connect is for */
    struct event *timer;     /* the kick, then the deadline */
    char *head;              /* the request head, kept with the record */
    size_t head_len, head_cap;
    char *body; /* the request body, owned, when it goes after the head (cleartext) */
    size_t body_len, max;
    char *answer; /* the answer's body while it is handed up, owned */
    int64_t started_us, deadline_us;
    int tries;
    unsigned link_reused : 1; /* the connection carried an answer before this request */
    unsigned reached : 1;     /* a try the platform refused may have reached it all the same */
    net_xfer_t *next;         /* free list */
};

net_t *net_new(struct event_base *base, const net_config_t *cfg)
{
    net_t *net = calloc(1, sizeof(*net));
    char bundle[PATH_MAX];

    if (net == NULL)
        return NULL;
    net->base = base;
    net->cfg = *cfg;
    net->curl = netcurl_new(base, cfg);
    net->pool = netpool_new(base);
    if (net->curl == NULL || net->pool == NULL) {
        net_free(net);
        return NULL;
    }
    net->own = !cfg->guard && !netcurl_proxied(net->curl);
    /* botgate's own HTTP/1.1 and HTTP/2 over TLS, for the platforms (user URLs stay curl's) */
    if (!cfg->guard) {
        netcurl_ca_bundle(bundle, sizeof(bundle));
        if ((net->tls = nettls_ctx_take(cfg->ca_file, bundle)) == NULL) {
            net_free(net);
            return NULL;
        }
    }
    return net;
}

void net_free(net_t *net)
{
    net_xfer_t *x;

    if (net == NULL)
        return;
    while ((x = net->spare) != NULL) {
        net->spare = x->next;
        if (x->timer != NULL)
            event_free(x->timer);
        free(x->head);
        free(x);
    }
    netcurl_free(net->curl);
    netpool_free(net->pool);
    nettls_ctx_give(net->tls); /* after every connection made with it */
    free(net);
}

static void xfer_release(net_xfer_t *x)
{
    net_t *net = x->net;

    if (x->timer != NULL)
        event_del(x->timer);
    x->phase = XFER_CURL;
    x->job = NULL;
    x->link = NULL;
    x->origin = NULL;
    x->stream = NULL;
    x->dialing = NULL;
    free(x->body);
    x->body = NULL;
    /* the answer's body goes with the answer: a call that waits holds none */
    free(x->answer);
    x->answer = NULL;
    x->cb = NULL;
    x->next = net->spare;
    net->spare = x;
}

/* Stops what x holds, without its callback: its connection in the middle of an exchange (which
 * can carry nothing more), its stream, curl's call or connect for it. */
static void xfer_stop(net_xfer_t *x)
{
    if (x->link != NULL) {
        h1conn_abandon(x->link);
        h1conn_free(x->link);
        x->link = NULL;
    }
    if (x->stream != NULL) {
        h2conn_cancel(x->stream);
        x->stream = NULL;
    }
    netcurl_cancel(x->job);
    x->job = NULL;
    if (x->dialing != NULL) {
        /* the streams that wait for this socket go on another connection */
        h2conn_undialed(x->dialing, NET_ERR_OTHER, "", 0, 1);
        x->dialing = NULL;
    }
}

/* The one way out of a call: its end to its callback, then the record goes back. */
static void xfer_end(net_xfer_t *x, const net_answer_t *ans)
{
    net_cb *cb = x->cb;

    x->cb = NULL;
    if (cb != NULL)
        cb(x->arg, ans);
    xfer_release(x);
}

/* ---- botgate's own HTTP/1.1 and HTTP/2 ---- */

static void own_go(net_xfer_t *x);

/* Ends x without an answer; whatever it holds (its connect, its connection) goes first. what:
 * the failure in words (NULL: err's usual ones); detail and os_errno follow it. */
static void own_fail(net_xfer_t *x, net_err_t err, const char *what, const char *detail,
                     int os_errno, int not_sent)
{
    net_answer_t ans;
    char error[256];
    long long total_us = (long long)(clock_mono_us() - x->started_us);

    xfer_stop(x);
    memset(&ans, 0, sizeof(ans));
    ans.err = err;
    ans.not_sent = not_sent;
    ans.elapsed_us = total_us;
    ans.body = "";
    if (err == NET_ERR_MAYBE_RECEIVED)
        ans.error = NETERR_MAYBE_RECEIVED;
    else if (err == NET_ERR_TOO_LARGE)
        ans.error = NETERR_TOO_LARGE;
    else
        ans.error = neterr_format(error, sizeof(error), what != NULL ? what : neterr_what(err),
                                  detail, os_errno, total_us);
    xfer_end(x, &ans);
}

/* x's answer came: x takes body (len bytes, NUL-terminated, or NULL when empty) and hands the
 * answer up. */
static void own_answered(net_xfer_t *x, char *body, size_t len, int status, const char *retry_after,
                         const char *content_type)
{
    net_answer_t ans;

    memset(&ans, 0, sizeof(ans));
    x->answer = body;
    ans.err = NET_OK;
    ans.elapsed_us = (long long)(clock_mono_us() - x->started_us);
    ans.status = status;
    ans.body = body ? body : "";
    ans.body_len = body ? len : 0;
    ans.retry_after = retry_after;
    ans.content_type = content_type;
    ans.error = "";
    xfer_end(x, &ans);
}

/* The platform did not process x (or, refusing it, says so): it goes again, on another
 * connection or stream, up to OWN_TRIES tries in all. After the last one it may have reached
 * the platform OWN_TRIES times already (a platform that refuses streams it has read): unless
 * none of them went out, the caller is told that it may have, and must not send it again. */
static void own_again(net_xfer_t *x, const char *error, int os_errno)
{
    char detail[160];

    if (++x->tries < OWN_TRIES) {
        own_go(x);
    } else if (x->reached) {
        snprintf(detail, sizeof(detail), "%d tries, the last: %s", x->tries, error);
        own_fail(x, NET_ERR_REFUSED, NULL, detail, os_errno, 0);
    } else {
        own_fail(x, NET_ERR_SEND, NULL, error, os_errno, 1);
    }
}

/* The TLS handshake failed: the certificate's problem when it was that. */
static void own_tls_failed(net_xfer_t *x, long verify, const char *error, int os_errno)
{
    if (verify != X509_V_OK)
        own_fail(x, NET_ERR_CERT, NULL, X509_verify_cert_error_string(verify), 0, 0);
    else
        own_fail(x, NET_ERR_TLS, NULL, error, os_errno, 0);
}

/* An exchange on an HTTP/1.1 connection ended. */
static void on_h1_done(void *arg, h1conn_t *c, h1conn_result_t *res)
{
    net_xfer_t *x = arg;
    netpool_origin_t *o = x->origin;
    h1resp_t *r = res->answer;

    x->link = NULL;
    if (res->outcome != H1CONN_ANSWER) {
        int reused = x->link_reused;
        h1conn_free(c);
        switch (res->outcome) {
        case H1CONN_STALE: /* nothing went out: another connection carries it */
            own_again(x, res->error, res->os_errno);
            return;
        case H1CONN_NO_ANSWER:
            own_fail(x, reused ? NET_ERR_MAYBE_RECEIVED : NET_ERR_NO_ANSWER, NULL, "",
                     res->os_errno, 0);
            return;
        case H1CONN_SEND_FAILED:
            own_fail(x, NET_ERR_SEND, NULL, res->error, res->os_errno, 0);
            return;
        case H1CONN_TOO_LARGE:
            own_fail(x, NET_ERR_TOO_LARGE, NULL, res->error, 0, 0);
            return;
        case H1CONN_BAD_ANSWER:
            own_fail(x, NET_ERR_PROTOCOL, NULL, res->error, 0, 0);
            return;
        case H1CONN_TLS_FAILED:
            own_tls_failed(x, res->verify, res->error, res->os_errno);
            return;
        default:
            own_fail(x, NET_ERR_RECV, NULL, res->error, res->os_errno, 0);
            return;
        }
    }
    own_answered(x, h1resp_take_body(r), r->body_len, r->status,
                 r->retry_after[0] ? r->retry_after : NULL,
                 r->content_type[0] ? r->content_type : NULL);
    /* after the callback: the answer's fields live in the connection's parser */
    if (h1conn_reusable(c))
        netpool_h1_park(o, c);
    else
        h1conn_free(c);
}

static void h1_exchange(net_xfer_t *x, h1conn_t *c, int reused)
{
    x->link = c;
    x->link_reused = (unsigned)reused;
    x->phase = XFER_EXCHANGE;
    h1conn_exchange(c, x->head, x->head_len, x->body, x->body_len, x->max, on_h1_done, x);
}

static void h2_dialed(net_xfer_t *x, const netcurl_dialed_t *d);

/* curl connected (or failed to connect) the socket x asked for: an HTTP/1.1 connection's, or
 * the HTTP/2 connection's x is dialing. */
static void on_dialed(void *arg, const netcurl_dialed_t *d)
{
    net_xfer_t *x = arg;
    netpool_origin_t *o = x->origin;
    h1conn_t *c;
    SSL *ssl = NULL;

    x->job = NULL;
    if (x->dialing != NULL) {
        h2_dialed(x, d);
        return;
    }
    if (d->fd < 0) {
        if (d->err != NET_OK)
            own_fail(x, d->err, d->why, "", d->os_errno, d->not_sent);
        else
            own_fail(x, NET_ERR_CONNECT, NULL, "the connected socket was lost", 0, 1);
        return;
    }
    if (o->tls && (ssl = nettls_new(x->net->tls, o->host, o->host_is_ip, &o->session, 0)) == NULL) {
        close(d->fd);
        own_fail(x, NET_ERR_TLS, NULL, "cannot set up TLS", 0, 1);
        return;
    }
    if ((c = netpool_h1_new(o, d->fd, ssl)) == NULL) {
        own_fail(x, NET_ERR_NOMEM, NULL, "", 0, 1);
        return;
    }
    h1_exchange(x, c, 0);
}

/* Has curl connect a socket to x's origin: curl resolves the name (its threaded resolver and
 * DNS cache), tries the addresses, and hands the socket over (on_dialed). */
static void own_dial(net_xfer_t *x)
{
    int64_t left_ms = (x->deadline_us - clock_mono_us()) / 1000;

    x->job =
        netcurl_dial(x->net->curl, x->origin->key, left_ms > 0 ? (long)left_ms : 1L, on_dialed, x);
    if (x->job == NULL) {
        own_fail(x, NET_ERR_NOMEM, NULL, "", 0, 1);
        return;
    }
    if (x->dialing == NULL)
        x->phase = XFER_DIAL;
}

/* ---- HTTP/2: over TLS with the HTTP/2 setting ----
 *
 * Calls that come while an origin's new connection connects wait on it as streams, instead of
 * each making a connection of its own: the first call's connect (x->dialing) is the
 * connection's. */

/* A stream ended: its answer, or why not. */
static void on_h2_done(void *arg, h2conn_result_t *res)
{
    net_xfer_t *x = arg;
    long allowed;
    char detail[128];

    x->stream = NULL;
    if ((allowed = h2conn_streams_allowed(res->conn)) >= 0)
        x->origin->h2_streams = allowed;
    switch (res->outcome) {
    case H2CONN_ANSWER:
        break;
    case H2CONN_NOT_H2:
        x->origin->no_h2 = 1; /* the platform chose HTTP/1.1: from now on, ours */
        netpool_h2_fall_back(x->origin, res->conn);
        /* fall through */
    case H2CONN_REFUSED: /* not processed: safe on another stream or connection */
        x->reached |= (unsigned)(res->sent != 0);
        own_again(x, res->error, res->os_errno);
        return;
    case H2CONN_UNDIALED:
        own_fail(x, res->dial_err, res->error[0] ? res->error : NULL, "", res->os_errno, 1);
        return;
    case H2CONN_NO_ANSWER:
        own_fail(x, NET_ERR_MAYBE_RECEIVED, NULL, res->error, res->os_errno, 0);
        return;
    case H2CONN_RESET:
        snprintf(detail, sizeof(detail), "the platform reset the stream (%s)", res->error);
        own_fail(x, NET_ERR_RESET, NULL, detail, 0, 0);
        return;
    case H2CONN_TOO_LARGE:
        own_fail(x, NET_ERR_TOO_LARGE, NULL, res->error, 0, 0);
        return;
    case H2CONN_BAD_ANSWER:
        snprintf(detail, sizeof(detail), "the platform's answer broke HTTP/2 (%s)", res->error);
        own_fail(x, NET_ERR_PROTOCOL, "Error in the HTTP2 framing layer", detail, res->os_errno, 0);
        return;
    case H2CONN_TLS_FAILED:
        own_tls_failed(x, res->verify, res->error, res->os_errno);
        return;
    }
    own_answered(x, res->body, res->body_len, res->status, res->retry_after, res->content_type);
    res->body = NULL; /* x's now */
}

/* x as a stream of a connection of its origin; the connection's socket is x's to connect when
 * it is a new one. */
static void h2_go(net_xfer_t *x)
{
    netpool_origin_t *o = x->origin;
    h2conn_t *c = netpool_h2_pick(o);
    int dial = 0;

    if (c != NULL) {
        x->stream = h2conn_submit(c, x->head, x->head_len, x->max, on_h2_done, x);
    } else if (netpool_h2_allows_none(o)) {
        /* a new connection would be told the same, after its streams were refused: the
         * platform takes no request until its SETTINGS say otherwise */
        own_fail(x, NET_ERR_REFUSED, NULL,
                 "its HTTP/2 SETTINGS allow no stream at once (MAX_CONCURRENT_STREAMS 0)", 0,
                 !x->reached);
        return;
    }
    if (x->stream == NULL) {
        /* none takes a stream, or the one that did ran out of stream numbers */
        if ((c = netpool_h2_add(o)) == NULL ||
            (x->stream = h2conn_submit(c, x->head, x->head_len, x->max, on_h2_done, x)) == NULL) {
            if (c != NULL)
                netpool_h2_close(o, c);
            own_fail(x, NET_ERR_NOMEM, NULL, "", 0, 1);
            return;
        }
        dial = 1;
    }
    x->phase = XFER_STREAM;
    if (dial) {
        x->dialing = c;
        own_dial(x);
    }
}

/* curl connected (or failed to connect) the socket of the connection x was dialing. */
static void h2_dialed(net_xfer_t *x, const netcurl_dialed_t *d)
{
    netpool_origin_t *o = x->origin;
    h2conn_t *c = x->dialing;
    SSL *ssl;

    x->dialing = NULL;
    if (d->fd < 0) {
        net_err_t err = d->err != NET_OK ? d->err : NET_ERR_CONNECT;
        h2conn_undialed(c, err, d->err != NET_OK ? d->why : neterr_what(err), d->os_errno, 0);
        return;
    }
    if ((ssl = nettls_new(x->net->tls, o->host, o->host_is_ip, &o->session, 1)) == NULL) {
        close(d->fd);
        h2conn_undialed(c, NET_ERR_TLS, neterr_what(NET_ERR_TLS), 0, 0);
        return;
    }
    h2conn_attach(c, d->fd, ssl); /* the streams waiting on it, x's among them, go out after */
}

/* A parked connection of the origin, or a new one; over TLS with the HTTP/2 setting, a stream
 * of an HTTP/2 connection instead, unless the platform chose HTTP/1.1 before. */
static void own_go(net_xfer_t *x)
{
    h1conn_t *c;

    if (x->origin->tls && !x->net->cfg.http1 && !x->origin->no_h2) {
        h2_go(x);
        return;
    }
    if ((c = netpool_h1_take(x->origin)) != NULL) {
        h1_exchange(x, c, 1);
        return;
    }
    own_dial(x);
}

/* The kick (XFER_KICK, from net_start, so that no answer reaches the caller before net_start
 * returns), then the deadline. */
static void on_xfer_timer(evutil_socket_t fd, short what, void *arg)
{
    net_xfer_t *x = arg;
    int64_t left_us;
    struct timeval tv;

    (void)fd;
    (void)what;
    if (x->phase == XFER_KICK) {
        left_us = x->deadline_us - clock_mono_us();
        if (left_us < 1)
            left_us = 1;
        tv = clock_us_timeval(left_us);
        event_add(x->timer, &tv);
        own_go(x);
        return;
    }
    own_fail(x, NET_ERR_TIMEOUT, NULL, "", 0, 0);
}

/* Our own HTTP/1.1 (or HTTP/2) carries a platform call only straight to the platform (no proxy,
 * whose CONNECT and authentication stay curl's), without following redirects, and only on the
 * platform client (the user-URL client's every connection passes the SSRF guard, which curl
 * applies). */
static int own_allowed(const net_t *net, const char *url, unsigned flags)
{
    return net->own && !(flags & NET_FOLLOW) &&
           (strncmp(url, "http://", 7) == 0 ||
            (net->tls != NULL && strncmp(url, "https://", 8) == 0));
}

/* Sets x off on botgate's own HTTP when the call allows it: 1, or 0 to leave it to curl. */
static int own_start(net_xfer_t *x, net_request_t *req)
{
    net_t *net = x->net;
    const netpool_target_t *t;
    int with_body = strcmp(req->method, "GET") != 0;

    if (!own_allowed(net, req->url, req->flags) ||
        (t = netpool_target(net->pool, req->url)) == NULL ||
        h1conn_request_head(&x->head, &x->head_cap, &x->head_len, req, t->target, t->host,
                            t->host_len, with_body, t->origin->tls) < 0)
        return 0;
    if (x->timer == NULL && (x->timer = evtimer_new(net->base, on_xfer_timer, x)) == NULL)
        return 0;
    x->origin = t->origin;
    x->tries = 0;
    x->reached = 0;
    x->started_us = clock_mono_us();
    x->deadline_us = x->started_us + (int64_t)(req->timeout_ms > 0 ? req->timeout_ms : 1) * 1000;
    if (with_body && !t->origin->tls) {
        x->body = req->body;
        x->body_len = req->body ? req->body_len : 0;
        req->body = NULL;
    } else {
        x->body = NULL; /* none, or in the head */
        x->body_len = 0;
    }
    x->phase = XFER_KICK;
    event_active(x->timer, EV_TIMEOUT, 0);
    return 1;
}

/* ---- libcurl ---- */

static void on_curl_answer(void *arg, const net_answer_t *ans)
{
    net_xfer_t *x = arg;

    x->job = NULL; /* netcurl lets it go after this */
    xfer_end(x, ans);
}

net_xfer_t *net_start(net_t *net, net_request_t *req, net_cb *cb, void *arg)
{
    net_xfer_t *x = net->spare;

    if (x != NULL) {
        net->spare = x->next;
    } else if ((x = calloc(1, sizeof(*x))) != NULL) {
        x->net = net;
    }
    if (x != NULL) {
        x->cb = cb;
        x->arg = arg;
        x->max = req->max_answer;
        if (!own_start(x, req)) {
            x->phase = XFER_CURL;
            if ((x->job = netcurl_start(net->curl, req, on_curl_answer, x)) == NULL) {
                xfer_release(x);
                x = NULL;
            }
        }
    }
    /* the body is the call's when it took it: nothing of the request is held while the
     * platform takes its time */
    free(req->body);
    req->body = NULL;
    return x;
}

void net_cancel(net_xfer_t *x)
{
    if (x == NULL)
        return;
    xfer_stop(x);
    xfer_release(x);
}
