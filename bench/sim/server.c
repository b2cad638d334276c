/* One evhttp server per thread: routing, the request path, and answers given later. */
#include "sim.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

/* Owned by main(); each is driven by exactly one thread, so nothing in it needs a lock. */
struct sim_server {
    struct event_base *base;
    struct evhttp *http;
    struct event *wake; /* reading end of wake_fds: asks the loop to stop */
    int wake_fds[2];
};

#define SIM_MIDRESET_GAP_MS 50 /* midreset: between the half answer and the reset */

/* A request answered later (latency, slow<N>, timeout, reset, midreset, /hook/slow). Owned by its
 * server thread and freed exactly once: after answering, or from the connection's close
 * callback when the client leaves, on reset, or when evhttp_free() runs at shutdown. */
typedef struct {
    struct evhttp_request *req;
    struct evhttp_connection *evcon;
    struct event *timer; /* NULL for SIM_ACT_HOLD */
    struct event *watch; /* readable socket: the client may have gone */
    sim_reply_t reply;
    int counted;   /* holds one unit of in_flight */
    int half_sent; /* midreset: the headers and half the body are out; the reset is next */
} sim_pending_t;

/* ---- replies ---- */

static int sim_evbuffer_write(const char *buf, size_t size, void *data)
{
    return evbuffer_add(data, buf, size);
}

static struct evbuffer *sim_reply_buffer(sim_reply_t *r)
{
    if (r->body == NULL)
        r->body = evbuffer_new();
    else
        evbuffer_drain(r->body, evbuffer_get_length(r->body));
    return r->body;
}

void sim_reply_json(sim_reply_t *r, int status, json_t *j)
{
    struct evbuffer *b = sim_reply_buffer(r);
    r->status = status;
    r->content_type = NULL;
    if (b != NULL && j != NULL)
        json_dump_callback(j, sim_evbuffer_write, b, JSON_COMPACT);
    json_decref(j);
}

void sim_reply_text(sim_reply_t *r, int status, const char *content_type, const char *text)
{
    struct evbuffer *b = sim_reply_buffer(r);
    r->status = status;
    r->content_type = content_type;
    if (b != NULL)
        evbuffer_add(b, text, strlen(text));
}

void sim_reply_clear(sim_reply_t *r)
{
    if (r->body != NULL)
        evbuffer_free(r->body);
    free(r->location);
    memset(r, 0, sizeof(*r));
}

static void sim_reply_send(struct evhttp_request *req, sim_reply_t *r)
{
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    if (r->content_type != NULL)
        evhttp_add_header(out, "Content-Type", r->content_type);
    if (r->retry_after[0] != '\0')
        evhttp_add_header(out, "Retry-After", r->retry_after);
    if (r->location != NULL)
        evhttp_add_header(out, "Location", r->location);
    evhttp_send_reply(req, r->status, NULL, r->body);
}

/* ---- the call as handlers see it ---- */

const char *sim_call_param(sim_call_t *c, const char *name)
{
    if (!c->params_parsed) {
        TAILQ_INIT(&c->params);
        if (c->query != NULL)
            evhttp_parse_query_str(c->query, &c->params);
        c->params_parsed = 1;
    }
    return evhttp_find_header(&c->params, name);
}

const char *sim_call_bearer(const sim_call_t *c)
{
    if (c->auth == NULL || strncasecmp(c->auth, "Bearer ", 7) != 0)
        return NULL;
    const char *t = c->auth + 7;
    while (*t == ' ')
        t++;
    return t;
}

/* ---- answers given later ---- */

static void sim_pending_free(sim_pending_t *p)
{
    if (p->timer != NULL)
        event_free(p->timer);
    if (p->watch != NULL)
        event_free(p->watch);
    sim_reply_clear(&p->reply);
    if (p->counted)
        sim_record_in_flight(-1);
    free(p);
}

/* evhttp calls this when it frees the connection; the request goes with it. */
static void sim_pending_closed(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    sim_pending_free(arg);
}

/* midreset: a 200 whose Content-Length promises the whole body, then only its first half,
 * written to the socket directly: evhttp must not think a reply is under way. */
static void sim_pending_half(sim_pending_t *p, int sock)
{
    struct evbuffer *out = evbuffer_new();
    size_t len = p->reply.body != NULL ? evbuffer_get_length(p->reply.body) : 0;
    if (out == NULL)
        return;
    evbuffer_add_printf(out,
                        "HTTP/1.1 %d OK\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                        "Connection: keep-alive\r\n\r\n",
                        p->reply.status,
                        p->reply.content_type ? p->reply.content_type : "application/json", len);
    if (len > 0)
        evbuffer_remove_buffer(p->reply.body, out, len / 2);
    evbuffer_write(out, sock); /* a few hundred bytes: the socket buffer takes them at once */
    evbuffer_free(out);
}

static void sim_pending_fire(evutil_socket_t fd, short what, void *arg)
{
    sim_pending_t *p = arg;
    (void)fd;
    (void)what;
    if (p->reply.action == SIM_ACT_MIDRESET && !p->half_sent) {
        int sock = bufferevent_getfd(evhttp_connection_get_bufferevent(p->evcon));
        if (sock >= 0)
            sim_pending_half(p, sock);
        p->half_sent = 1;
        struct timeval tv = {.tv_sec = 0, .tv_usec = SIM_MIDRESET_GAP_MS * 1000};
        evtimer_add(p->timer, &tv);
        return;
    }
    if (p->reply.action == SIM_ACT_RESET || p->reply.action == SIM_ACT_MIDRESET) {
        /* Linger 0 turns the close into an RST, the harshest thing a platform can do. */
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        int sock = bufferevent_getfd(evhttp_connection_get_bufferevent(p->evcon));
        if (sock >= 0)
            setsockopt(sock, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        if (sock >= 0 && p->reply.action == SIM_ACT_MIDRESET) {
            /* evhttp shuts the socket down (a FIN) before it closes it, and a client that saw
             * the FIN reads a short body, not a reset. Dissolving the connection (connect to
             * AF_UNSPEC) sends the RST at once. */
            struct sockaddr sa = {.sa_family = AF_UNSPEC};
            connect(sock, &sa, sizeof(sa));
        }
        evhttp_connection_free(p->evcon); /* frees p through sim_pending_closed */
        return;
    }
    evhttp_connection_set_closecb(p->evcon, NULL, NULL);
    sim_reply_send(p->req, &p->reply);
    sim_pending_free(p);
}

/* evhttp stops reading a connection while its request waits for an answer, so it would not
 * notice the client leaving; this watch does, and frees the held request. */
static void sim_pending_watch(evutil_socket_t fd, short what, void *arg)
{
    sim_pending_t *p = arg;
    char c;
    (void)what;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0)
        return; /* a pipelined request: nothing more to learn from this socket */
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        event_add(p->watch, NULL);
        return;
    }
    evhttp_connection_free(p->evcon); /* frees p through sim_pending_closed */
}

static int sim_pending_start(sim_server_t *srv, struct evhttp_request *req, sim_reply_t *r,
                             int counted)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    if (evcon == NULL)
        return -1;
    int sock = bufferevent_getfd(evhttp_connection_get_bufferevent(evcon));
    sim_pending_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return -1;
    p->req = req;
    p->evcon = evcon;
    p->watch = sock >= 0 ? event_new(srv->base, sock, EV_READ, sim_pending_watch, p) : NULL;
    if (r->action != SIM_ACT_HOLD) {
        p->timer = evtimer_new(srv->base, sim_pending_fire, p);
        if (p->timer == NULL) {
            sim_pending_free(p);
            return -1;
        }
        int ms = r->delay_ms > SIM_MAX_DELAY ? SIM_MAX_DELAY : r->delay_ms;
        struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
        evtimer_add(p->timer, &tv);
    }
    if (p->watch != NULL)
        event_add(p->watch, NULL);
    p->reply = *r;
    memset(r, 0, sizeof(*r));
    p->counted = counted;
    evhttp_connection_set_closecb(evcon, sim_pending_closed, p);
    return 0;
}

static void sim_server_finish(sim_server_t *srv, struct evhttp_request *req, sim_reply_t *r,
                              int counted)
{
    if (r->action == SIM_ACT_ANSWER && r->delay_ms <= 0) {
        sim_reply_send(req, r);
        sim_reply_clear(r);
        if (counted)
            sim_record_in_flight(-1);
        return;
    }
    if (sim_pending_start(srv, req, r, counted) == 0)
        return;
    /* Out of memory: answering at once beats leaking the request. */
    if (r->action != SIM_ACT_ANSWER)
        sim_reply_json(r, 503, json_pack("{s:s}", "error", "simulator out of memory"));
    sim_reply_send(req, r);
    sim_reply_clear(r);
    if (counted)
        sim_record_in_flight(-1);
}

/* ---- the request path ---- */

static const sim_endpoint_t *sim_server_route(const char *path)
{
    if (strncmp(path, "/_sim/", 6) == 0)
        return sim_control_route(path);
    if (strncmp(path, "/media/", 7) == 0 || strncmp(path, "/hook/", 6) == 0)
        return sim_media_route(path);
    return sim_platform_route(path);
}

static void sim_server_error(struct evhttp_request *req, int status, const char *msg)
{
    sim_reply_t r = {0};
    sim_reply_json(&r, status, json_pack("{s:s}", "error", msg));
    sim_reply_send(req, &r);
    sim_reply_clear(&r);
}

static json_t *sim_server_record_body(const sim_call_t *c)
{
    if (c->record_body != NULL)
        return json_incref(c->record_body);
    if (c->body != NULL)
        return json_incref(c->body);
    if (c->raw_len == 0)
        return NULL;
    if (c->raw_len > 65536) /* a record of megabytes helps nobody */
        return json_pack("{s:I}", "size", (json_int_t)c->raw_len);
    json_t *j = json_loadb((const char *)c->raw, c->raw_len, JSON_DECODE_ANY, NULL);
    return j ? j : json_stringn((const char *)c->raw, c->raw_len);
}

static void sim_server_dispatch(struct evhttp_request *req, void *arg)
{
    sim_server_t *srv = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (path == NULL || *path == '\0')
        path = "/";

    const sim_endpoint_t *ep = sim_server_route(path);
    if (ep == NULL) {
        sim_server_error(req, 404, "not found");
        return;
    }
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if ((ep->methods & cmd) == 0) {
        sim_server_error(req, 405, "method not allowed");
        return;
    }

    sim_call_t c;
    memset(&c, 0, sizeof(c));
    int64_t ts = (ep->flags & SIM_EP_RECORD) ? sim_now_us() : 0;
    struct evkeyvalq *in_headers = evhttp_request_get_input_headers(req);
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    c.req = req;
    c.ts_us = ts;
    c.platform = ep->platform;
    c.kind = ep->kind;
    c.method = cmd == EVHTTP_REQ_GET ? "GET" : "POST";
    c.path = path;
    c.query = evhttp_uri_get_query(uri);
    c.auth = evhttp_find_header(in_headers, "Authorization");
    if (c.auth == NULL)
        c.auth = evhttp_find_header(in_headers, "x-api-key");
    c.raw_len = evbuffer_get_length(in);
    c.raw = c.raw_len ? evbuffer_pullup(in, -1) : (const unsigned char *)"";
    if (c.raw == NULL) { /* pullup of a large upload failed: no memory */
        sim_server_error(req, 503, "simulator out of memory");
        return;
    }
    if ((ep->flags & SIM_EP_JSON) && c.raw_len > 0)
        c.body = json_loadb((const char *)c.raw, c.raw_len, 0, NULL);

    int counted = (ep->flags & SIM_EP_INFLIGHT) != 0;
    if (counted)
        sim_record_in_flight(1);

    sim_reply_t r = {.status = 200};
    ep->handle(&c, &r);
    if (ep->flags & SIM_EP_RECORD)
        sim_platform_limit(&c, &r);
    sim_fault_apply(&c.fault, &r);

    if (ep->flags & SIM_EP_RECORD) {
        json_t *body = sim_server_record_body(&c);
        sim_entry_t e = {
            .platform = c.platform,
            .kind = c.kind,
            .method = c.method,
            .path = c.path,
            .query = c.query,
            .auth = c.auth,
            .recipient = c.recipient,
            .fault = c.fault.kind != SIM_FAULT_NONE ? c.fault.word : NULL,
            .body = body,
            .ts_us = ts,
            .limit = c.limit,
        };
        sim_record_add(&e);
        json_decref(body);
    }
    if (ep->flags & SIM_EP_LATENCY)
        r.delay_ms += sim_latency_get();
    sim_server_finish(srv, req, &r, counted);

    json_decref(c.body);
    json_decref(c.record_body);
    if (c.params_parsed)
        evhttp_clear_headers(&c.params);
}

/* ---- lifecycle ---- */

static void sim_server_wake(evutil_socket_t fd, short what, void *arg)
{
    sim_server_t *srv = arg;
    (void)fd;
    (void)what;
    event_base_loopbreak(srv->base);
}

static struct evconnlistener *sim_server_listen(struct event_base *base, const char *host, int port)
{
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC,
        .ai_socktype = SOCK_STREAM,
        .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
    };
    struct addrinfo *res = NULL;
    char service[16];
    snprintf(service, sizeof(service), "%d", port);
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0) {
        fprintf(stderr, "botgate-sim: %s: %s\n", host, gai_strerror(rc));
        return NULL;
    }
    /* Every thread binds the same port; the kernel spreads connections over them. */
    const unsigned flags =
        LEV_OPT_REUSEABLE | LEV_OPT_REUSEABLE_PORT | LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC;
    struct evconnlistener *lev = NULL;
    for (struct addrinfo *ai = res; ai != NULL && lev == NULL; ai = ai->ai_next)
        lev = evconnlistener_new_bind(base, NULL, NULL, flags, 1024, ai->ai_addr,
                                      (int)ai->ai_addrlen);
    if (lev == NULL)
        fprintf(stderr, "botgate-sim: cannot listen on %s:%d: %s\n", host, port, strerror(errno));
    freeaddrinfo(res);
    return lev;
}

static int sim_server_port(struct evconnlistener *lev)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    memset(&ss, 0, sizeof(ss));
    if (getsockname(evconnlistener_get_fd(lev), (struct sockaddr *)&ss, &len) != 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -1;
}

sim_server_t *sim_server_new(const char *host, int port, int *bound_port)
{
    sim_server_t *srv = calloc(1, sizeof(*srv));
    if (srv == NULL)
        return NULL;
    srv->wake_fds[0] = srv->wake_fds[1] = -1;
    /* Without the precise timer libevent reads CLOCK_MONOTONIC_COARSE, whose jiffy steps
     * (up to 4 ms) would swamp a latency of a few milliseconds. */
    struct event_config *cfg = event_config_new();
    if (cfg == NULL)
        goto fail;
    event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    srv->base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    if (srv->base == NULL)
        goto fail;
    srv->http = evhttp_new(srv->base);
    if (srv->http == NULL)
        goto fail;
    evhttp_set_max_body_size(srv->http, SIM_MAX_BODY);
    evhttp_set_max_headers_size(srv->http, SIM_MAX_HEADERS);
    evhttp_set_default_content_type(srv->http, "application/json");
    evhttp_set_allowed_methods(srv->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST);
    evhttp_set_gencb(srv->http, sim_server_dispatch, srv);

    struct evconnlistener *lev = sim_server_listen(srv->base, host, port);
    if (lev == NULL)
        goto fail;
    if (evhttp_bind_listener(srv->http, lev) == NULL) {
        evconnlistener_free(lev);
        goto fail;
    }
    *bound_port = sim_server_port(lev);
    if (*bound_port <= 0)
        goto fail;

    if (pipe2(srv->wake_fds, O_CLOEXEC | O_NONBLOCK) != 0)
        goto fail;
    srv->wake = event_new(srv->base, srv->wake_fds[0], EV_READ, sim_server_wake, srv);
    if (srv->wake == NULL || event_add(srv->wake, NULL) != 0)
        goto fail;
    return srv;

fail:
    sim_server_free(srv);
    return NULL;
}

void *sim_server_run(void *arg)
{
    sim_server_t *srv = arg;
    event_base_dispatch(srv->base);
    return NULL;
}

void sim_server_stop(sim_server_t *srv)
{
    ssize_t n;
    do {
        n = write(srv->wake_fds[1], "x", 1);
    } while (n < 0 && errno == EINTR);
}

void sim_server_free(sim_server_t *srv)
{
    if (srv == NULL)
        return;
    /* Frees every connection; held and delayed requests go through sim_pending_closed. */
    if (srv->http != NULL)
        evhttp_free(srv->http);
    if (srv->wake != NULL)
        event_free(srv->wake);
    for (int i = 0; i < 2; i++)
        if (srv->wake_fds[i] >= 0)
            close(srv->wake_fds[i]);
    if (srv->base != NULL)
        event_base_free(srv->base);
    free(srv);
}
