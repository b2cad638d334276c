/* http.c - evhttp set up as a server, the route table, and the transport half of answering an
 * API request. Every answer is JSON. */
#include "http.h"

#include "../core/clock.h"
#include "../core/error.h"
#include "../json/jsonw.h"
#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* evhttp formats a Date header for every answer it sends without one (gmtime and a printf);
 * the text changes once a second, so each worker thread keeps it. */
static void add_date(struct evhttp_request *req)
{
    static _Thread_local time_t shown = (time_t)-1;
    static _Thread_local char text[40];
    time_t now = time(NULL);
    struct tm tm;

    if (now != shown) {
        if (gmtime_r(&now, &tm) == NULL ||
            strftime(text, sizeof(text), "%a, %d %b %Y %H:%M:%S GMT", &tm) == 0)
            return; /* evhttp writes one */
        shown = now;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Date", text);
}

void http_send(struct evhttp_request *req, int status, const char *reason)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev;
    struct evbuffer *out;

    add_date(req);
    evhttp_send_reply(req, status, reason, NULL);
    if (evcon == NULL || (bev = evhttp_connection_get_bufferevent(evcon)) == NULL)
        return;
    out = bufferevent_get_output(bev);
    if (evbuffer_write(out, bufferevent_getfd(bev)) < 0 || evbuffer_get_length(out) > 0)
        return; /* the rest goes when the socket is writable */
    /* Everything left: tell evhttp now, as the write event would have (this may free the
     * connection, or start reading its next request). */
    bufferevent_trigger(bev, EV_WRITE, BEV_TRIG_IGNORE_WATERMARKS);
}

void http_send_json(struct evhttp_request *req, int status, const char *reason, const char *body)
{
    struct evbuffer *buf = evhttp_request_get_output_buffer(req);

    evbuffer_add(buf, body, strlen(body));
    http_send(req, status, reason);
}

static void free_buffer(const void *data, size_t len, void *arg)
{
    (void)len;
    (void)arg;
    free((void *)data);
}

/* One line per request, written as text rather than built as a jansson object: it runs for
 * every request at the default level. The strings come from parsed JSON or are botgate's own
 * ASCII. */
static void log_answer(const char *client, const http_answer_t *a, int64_t elapsed_us)
{
    char frac[4] = {'.'};
    int64_t us;
    jsonw_t w;

    if (!log_enabled(LOG_INFO))
        return;
    jw_init_size(&w, 256);
    jw_lit(&w, "\"msg\":\"request\",\"request_id\":");
    jw_str(&w, a->request_id);
    jw_lit(&w, a->route == METRICS_ROUTE_SEND         ? ",\"route\":\"sendResponses\",\"status\":"
               : a->route == METRICS_ROUTE_REQUESTS   ? ",\"route\":\"requests\",\"status\":"
               : a->route == METRICS_ROUTE_BROADCASTS ? ",\"route\":\"broadcasts\",\"status\":"
               : a->route == METRICS_ROUTE_WEBHOOKS
                   ? ",\"route\":\"webhooks\",\"status\":"
                   : ",\"route\":\"redirectMemberToNode\",\"status\":");
    jw_int(&w, a->status);
    if (a->code > 0) {
        jw_lit(&w, ",\"err_code\":");
        jw_int(&w, a->code);
    } else if (a->code == BG_ERR_UNAUTHORIZED) {
        jw_lit(&w, ",\"err\":\"unauthorized\"");
    }
    if (client[0] != '\0') { /* the peer: a load balancer in front names its clients itself */
        jw_lit(&w, ",\"client\":");
        jw_str(&w, client);
    }
    if (a->app) {
        jw_lit(&w, ",\"app\":");
        jw_str(&w, a->app);
    }
    if (a->channel) {
        jw_lit(&w, ",\"channel\":");
        jw_str(&w, a->channel);
    }
    if (a->member) {
        jw_lit(&w, ",\"member\":");
        jw_str(&w, a->member);
    }
    jw_lit(&w, ",\"platform_calls\":");
    jw_int(&w, a->platform_calls);
    jw_lit(&w, ",\"sent\":");
    jw_int(&w, a->sent);
    jw_lit(&w, ",\"failed\":");
    jw_int(&w, a->failed);
    /* milliseconds to the microsecond: 0.282, not a double's 0.28199999999999997 */
    us = elapsed_us < 0 ? 0 : elapsed_us % 1000;
    jw_lit(&w, ",\"duration_ms\":");
    jw_int(&w, elapsed_us < 0 ? 0 : elapsed_us / 1000);
    frac[1] = (char)('0' + us / 100);
    frac[2] = (char)('0' + us / 10 % 10);
    frac[3] = (char)('0' + us % 10);
    jw_raw(&w, frac, 4);
    if (!w.failed)
        log_fields_text(LOG_INFO, w.buf, w.len);
    jw_free(&w);
}

/* The reason phrase of an API answer's status (RFC 9110 section 15). */
static const char *status_reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 202:
        return "Accepted";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 409:
        return "Conflict";
    case 413:
        return "Content Too Large";
    case 429:
        return "Too Many Requests";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    default:
        return "Internal Server Error";
    }
}

void http_answer(http_server_t *s, struct evhttp_request *req, const http_answer_t *a, char *text,
                 size_t len)
{
    struct evkeyvalq *headers = evhttp_request_get_output_headers(req);
    int64_t elapsed = clock_mono_us() - a->started_us;
    char client[INET6_ADDRSTRLEN] = "";

    /* read now: sending may close the connection, and its address goes with it */
    if (log_enabled(LOG_INFO) && evhttp_request_get_connection(req) != NULL) {
        char *peer = NULL;
        ev_uint16_t port;
        evhttp_connection_get_peer(evhttp_request_get_connection(req), &peer, &port);
        if (peer != NULL) {
            size_t n = strnlen(peer, sizeof(client) - 1);
            memcpy(client, peer, n);
            client[n] = '\0';
        }
    }

    if (text != NULL)
        evbuffer_add_reference(evhttp_request_get_output_buffer(req), text, len, free_buffer, NULL);
    conn_request_done(s->conns, req);
    evhttp_add_header(headers, "X-Request-Id", a->request_id);
    if (a->close)
        evhttp_add_header(headers, "Connection", "close");
    if (a->replayed)
        evhttp_add_header(headers, "Idempotent-Replayed", "true");
    /* counted before the answer leaves: whoever has the answer sees it in /metrics */
    metrics_request(s->metrics, a->route, a->status, a->code, elapsed);
    if (a->status == 503) /* store down or shutting down: a moment later, or another instance */
        evhttp_add_header(headers, "Retry-After", "1");
    /* RFC 9110 15.5.2: a 401 names its scheme: the API's tokens, unless the route named its
     * own (the webhooks' signatures) */
    else if (a->status == 401 && evhttp_find_header(headers, "WWW-Authenticate") == NULL)
        evhttp_add_header(headers, "WWW-Authenticate", "Bearer");
    http_send(req, a->status, status_reason(a->status));
    log_answer(client, a, elapsed);
}

void http_refuse(http_server_t *s, struct evhttp_request *req)
{
    /* The connection was marked busy when the request arrived, and only an answer unmarks it:
     * without this, a busy count that never returns to 0 keeps the sweep off the connection
     * and holds its slot under the cap for as long as the client wants. */
    conn_request_done(s->conns, req);
    evhttp_send_error(req, 500, "Internal Server Error");
}

int http_route(http_server_t *s, const http_route_t *r)
{
    if (s->n_routes == HTTP_ROUTES_MAX)
        return -1;
    s->routes[s->n_routes++] = *r;
    return 0;
}

/* The route of path: the one of method when several share the path (GET and POST
 * /webhooks/), else the first (answered 405). */
static const http_route_t *find_route(const http_server_t *s, const char *path, int on_admin,
                                      enum evhttp_cmd_type method)
{
    const http_route_t *first = NULL;

    if (method == EVHTTP_REQ_HEAD)
        method = EVHTTP_REQ_GET;
    for (unsigned i = 0; i < s->n_routes; i++) {
        const http_route_t *r = &s->routes[i];
        int here = on_admin ? r->where != HTTP_API
                            : r->where != HTTP_ADMIN || s->cfg->admin_listen[0] == '\0';
        /* a path ending in '/' is a prefix: the rest names a resource (/requests/<id>) */
        size_t n = strlen(r->path);
        if (here && (r->path[n - 1] == '/' ? strncmp(path, r->path, n) == 0 && path[n] != '\0'
                                           : strcmp(path, r->path) == 0)) {
            if (r->method == method)
                return r;
            if (first == NULL)
                first = r;
        }
    }
    return first;
}

static void serve(http_server_t *s, struct evhttp_request *req, int on_admin)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    const http_route_t *r = path ? find_route(s, path, on_admin, cmd) : NULL;
    int allowed =
        r != NULL && (cmd == r->method || (cmd == EVHTTP_REQ_HEAD && r->method == EVHTTP_REQ_GET));

    /* every request, answered here or not: the connection's next request is checked from now */
    conn_request_arrived(s->conns, req, allowed ? r->api : 0);
    if (path == NULL) {
        http_send_json(req, 400, "Bad Request",
                       "{\"ok\":0,\"err_code\":108,\"err\":\"bad request\",\"error\":\"bad "
                       "request\"}");
        return;
    }
    if (allowed) {
        r->handler(r->arg, req); /* evhttp leaves the body out of an answer to HEAD */
        return;
    }
    if (r != NULL) {
        int get = 0, post = 0; /* every route of the path (GET and POST /webhooks/) */
        for (unsigned i = 0; i < s->n_routes; i++)
            if (strcmp(s->routes[i].path, r->path) == 0) {
                get |= s->routes[i].method == EVHTTP_REQ_GET;
                post |= s->routes[i].method == EVHTTP_REQ_POST;
            }
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          get && post ? "GET, HEAD, POST"
                          : post      ? "POST"
                                      : "GET, HEAD");
        http_send_json(req, 405, "Method Not Allowed",
                       "{\"ok\":0,\"err_code\":122,\"err\":\"method not allowed\","
                       "\"error\":\"method not allowed\"}");
        return;
    }
    http_send_json(req, 404, "Not Found",
                   "{\"ok\":0,\"err_code\":122,\"err\":\"not found\",\"error\":\"not found\"}");
}

static void on_request(struct evhttp_request *req, void *arg)
{
    serve(arg, req, 0);
}

static void on_admin_request(struct evhttp_request *req, void *arg)
{
    serve(arg, req, 1);
}

/* Whether another process listens on sa. SO_REUSEPORT lets any socket of the same user join
 * a listening group, so the workers' own binds cannot tell an unrelated botgate (a second
 * `make run`, a stale deploy) from a sibling worker: it would silently take a share of the
 * connections. A bind without SO_REUSEPORT fails with EADDRINUSE only while something listens
 * there (SO_REUSEADDR: the connections of an earlier run left in TIME_WAIT do not count). The
 * first worker asks just before its own bind: two processes would have to start within the
 * same few microseconds to both pass. */
static int listened_elsewhere(const struct sockaddr *sa, int len)
{
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, taken;

    if (fd < 0)
        return 0; /* the bind that follows says why */
    taken = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
            bind(fd, sa, (socklen_t)len) < 0 && errno == EADDRINUSE;
    close(fd);
    return taken;
}

/* A listening socket on host:port, one per worker (SO_REUSEPORT: the kernel balances
 * accepts), disabled until the caller enables it. setting names the address in messages.
 * NULL on failure (logged). */
static struct evconnlistener *listen_on(http_server_t *s, const char *setting, const char *host,
                                        int port)
{
    struct sockaddr_storage ss;
    int sslen = sizeof(ss);
    char spec[320];
    struct evconnlistener *l;

    if (strchr(host, ':') != NULL)
        snprintf(spec, sizeof(spec), "[%s]:%d", host, port);
    else
        snprintf(spec, sizeof(spec), "%s:%d", host, port);
    memset(&ss, 0, sizeof(ss));
    if (evutil_parse_sockaddr_port(spec, (struct sockaddr *)&ss, &sslen) < 0) {
        log_msg(LOG_ERROR, "cannot parse listen address %s", spec);
        return NULL;
    }
    if (s->first && listened_elsewhere((struct sockaddr *)&ss, sslen)) {
        log_msg(LOG_ERROR,
                "cannot listen on %s (%s): another process already listens there; stop it "
                "or choose another address",
                spec, setting);
        return NULL;
    }
    l = evconnlistener_new_bind(s->base, NULL, NULL,
                                LEV_OPT_REUSEABLE | LEV_OPT_REUSEABLE_PORT | LEV_OPT_CLOSE_ON_FREE |
                                    LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_DISABLED,
                                4096, (struct sockaddr *)&ss, sslen);
    if (l == NULL)
        log_msg(LOG_ERROR, "cannot listen on %s (%s): %s", spec, setting,
                evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
    return l;
}

/* The admin listener: its own evhttp, GET/HEAD only, small requests. Its connections are not
 * counted under the API's cap; keep the address internal. */
static int admin_start(http_server_t *s)
{
    const config_t *cfg = s->cfg;
    struct evconnlistener *l;

    s->admin_http = evhttp_new(s->base);
    if (s->admin_http == NULL)
        return -1;
    evhttp_set_max_body_size(s->admin_http, 4096);
    evhttp_set_max_headers_size(s->admin_http, HTTP_MAX_HEADERS_SIZE);
    evhttp_set_timeout(s->admin_http, cfg->http_timeout_s);
    evhttp_set_default_content_type(s->admin_http, "application/json");
    evhttp_set_allowed_methods(s->admin_http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST);
    evhttp_set_gencb(s->admin_http, on_admin_request, s);
    if ((l = listen_on(s, "BOTGATE_ADMIN_LISTEN", cfg->admin_host, cfg->admin_port)) == NULL)
        return -1;
    if (evhttp_bind_listener(s->admin_http, l) == NULL) {
        evconnlistener_free(l);
        log_msg(LOG_ERROR, "cannot bind the admin HTTP server to %s", cfg->admin_listen);
        return -1;
    }
    evconnlistener_enable(l);
    return 0;
}

int http_start(http_server_t *s)
{
    const config_t *cfg = s->cfg;
    struct evconnlistener *l;

    s->http = evhttp_new(s->base);
    if (s->http == NULL)
        return -1;
    evhttp_set_max_body_size(s->http, HTTP_TRANSPORT_MAX_BODY);
    evhttp_set_max_headers_size(s->http, HTTP_MAX_HEADERS_SIZE);
    evhttp_set_timeout(s->http, cfg->http_timeout_s);
    evhttp_set_default_content_type(s->http, "application/json");
    /* A body over the limit is read and dropped before the 413 goes out, so that a client
     * still sending sees the answer instead of a reset. The HTTP timeout bounds it. */
    evhttp_set_flags(s->http, EVHTTP_SERVER_LINGERING_CLOSE);
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    evhttp_set_gencb(s->http, on_request, s);
    if ((s->conns = conn_setup(s->base, s->http, cfg, s->metrics, s->rng)) == NULL)
        return -1;
    if (cfg->admin_listen[0] != '\0' && admin_start(s) < 0)
        return -1;
    if ((l = listen_on(s, "BOTGATE_LISTEN", cfg->listen_host, cfg->listen_port)) == NULL)
        return -1;
    if ((s->bound = evhttp_bind_listener(s->http, l)) == NULL) {
        evconnlistener_free(l);
        log_msg(LOG_ERROR, "cannot bind the HTTP server to %s", cfg->listen);
        return -1;
    }
    evconnlistener_enable(l);
    conn_set_listener(s->conns, l);
    return 0;
}

/* Closes the listening socket: from now on a new connection is refused at once, which a load
 * balancer retries on another instance safely (a connection left waiting in the accept queue
 * of a socket nobody serves would be reset later, with its request). */
void http_stop_listening(http_server_t *s)
{
    if (s->bound == NULL)
        return;
    conn_set_listener(s->conns, NULL);
    evhttp_del_accept_socket(s->http, s->bound); /* frees the listener, closes the fd */
    s->bound = NULL;
}

void http_free(http_server_t *s)
{
    s->bound = NULL; /* evhttp_free frees it with its listener */
    if (s->conns != NULL)
        conn_set_listener(s->conns, NULL);
    if (s->http != NULL)
        evhttp_free(s->http);
    if (s->admin_http != NULL)
        evhttp_free(s->admin_http);
    s->http = s->admin_http = NULL;
    conn_cleanup(s->conns);
    s->conns = NULL;
}
