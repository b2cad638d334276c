/* http.c - evhttp set up as a server, and the routes. Every answer is JSON. */
#include "http.h"

#include "conn.h"
#include "log.h"
#include "op.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* evhttp formats a Date header for every answer it sends without one (gmtime and a printf,
 * a tenth of its work on the answer); the text changes once a second, so each worker thread
 * keeps it. */
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

static void send_json(struct evhttp_request *req, int status, const char *reason,
                      const char *body)
{
    struct evbuffer *buf = evhttp_request_get_output_buffer(req);

    evbuffer_add(buf, body, strlen(body));
    http_send(req, status, reason);
}

static void health(worker_t *w, struct evhttp_request *req)
{
    (void)w;
    send_json(req, 200, "OK", "{\"ok\":1}");
}

/* Ready while Redis is reachable and the worker is not draining, so that a load balancer
 * stops sending before the process goes away. */
static void ready(worker_t *w, struct evhttp_request *req)
{
    if (w->draining)
        send_json(req, 503, "Service Unavailable",
                  "{\"ok\":0,\"err_code\":121,\"err\":\"shutting down\","
                  "\"error\":\"shutting down\"}");
    else if (!store_ready(w->store))
        send_json(req, 503, "Service Unavailable",
                  "{\"ok\":0,\"err_code\":119,\"err\":\"store unavailable\","
                  "\"error\":\"store unavailable\"}");
    else
        send_json(req, 200, "OK", "{\"ok\":1}");
}

static void metrics(worker_t *w, struct evhttp_request *req)
{
    const metrics_t *all[256];
    int n;
    worker_t *workers = worker_all(&n);

    (void)w;
    if (n > 256)
        n = 256;
    for (int i = 0; i < n; i++)
        all[i] = &workers[i].metrics;
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4; charset=utf-8");
    metrics_render(evhttp_request_get_output_buffer(req), all, n);
    http_send(req, 200, "OK");
}

/* Which listener answers a route. With BOTGATE_ADMIN_LISTEN set, /metrics moves to the admin
 * listener; the health checks are on both (load balancers probe the API address). */
enum route_where { ROUTE_API, ROUTE_BOTH, ROUTE_ADMIN };

static const struct route {
    const char *path;
    enum evhttp_cmd_type method; /* a GET route answers HEAD too */
    void (*handler)(worker_t *w, struct evhttp_request *req);
    int api; /* answered later, by an op: its connection is busy until then */
    enum route_where where;
} routes[] = {
    {"/sendResponses", EVHTTP_REQ_POST, op_send_start, 1, ROUTE_API},
    {"/redirectMemberToNode", EVHTTP_REQ_POST, op_redirect_start, 1, ROUTE_API},
    {"/healthz", EVHTTP_REQ_GET, health, 0, ROUTE_BOTH},
    {"/readyz", EVHTTP_REQ_GET, ready, 0, ROUTE_BOTH},
    {"/metrics", EVHTTP_REQ_GET, metrics, 0, ROUTE_ADMIN},
};

static const struct route *find_route(const worker_t *w, const char *path, int on_admin)
{
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        const struct route *r = &routes[i];
        int here = on_admin ? r->where != ROUTE_API
                            : r->where != ROUTE_ADMIN || w->cfg->admin_listen[0] == '\0';
        if (here && strcmp(path, r->path) == 0)
            return r;
    }
    return NULL;
}

static void serve(worker_t *w, struct evhttp_request *req, int on_admin)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    const struct route *r = path ? find_route(w, path, on_admin) : NULL;
    int allowed =
        r != NULL && (cmd == r->method || (cmd == EVHTTP_REQ_HEAD && r->method == EVHTTP_REQ_GET));

    /* every request, answered here or not: the connection's next request is checked from now */
    conn_request_arrived(w, req, allowed ? r->api : 0);
    if (path == NULL) {
        send_json(req, 400, "Bad Request",
                  "{\"ok\":0,\"err_code\":108,\"err\":\"bad request\",\"error\":\"bad request\"}");
        return;
    }
    if (allowed) {
        r->handler(w, req); /* evhttp leaves the body out of an answer to HEAD */
        return;
    }
    if (r != NULL) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          r->method == EVHTTP_REQ_POST ? "POST" : "GET, HEAD");
        send_json(req, 405, "Method Not Allowed",
                  "{\"ok\":0,\"err_code\":122,\"err\":\"method not allowed\","
                  "\"error\":\"method not allowed\"}");
        return;
    }
    send_json(req, 404, "Not Found", "{\"ok\":0,\"err_code\":122,\"err\":\"not found\",\"error\":\"not found\"}");
}

static void on_request(struct evhttp_request *req, void *arg)
{
    serve(arg, req, 0);
}

static void on_admin_request(struct evhttp_request *req, void *arg)
{
    serve(arg, req, 1);
}

/* A listening socket on host:port, one per worker (SO_REUSEPORT: the kernel balances
 * accepts), disabled until the caller enables it. NULL on failure (logged). */
static struct evconnlistener *listen_on(worker_t *w, const char *host, int port)
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
    l = evconnlistener_new_bind(w->base, NULL, NULL,
                                LEV_OPT_REUSEABLE | LEV_OPT_REUSEABLE_PORT | LEV_OPT_CLOSE_ON_FREE |
                                    LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_DISABLED,
                                4096, (struct sockaddr *)&ss, sslen);
    if (l == NULL)
        log_msg(LOG_ERROR, "cannot listen on %s: %s", spec,
                evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
    return l;
}

/* The admin listener: its own evhttp, GET/HEAD only, small requests. Its connections are not
 * counted under the API's cap; keep the address internal. */
static int admin_start(worker_t *w)
{
    const config_t *cfg = w->cfg;
    struct evconnlistener *l;

    w->admin_http = evhttp_new(w->base);
    if (w->admin_http == NULL)
        return -1;
    evhttp_set_max_body_size(w->admin_http, 4096);
    evhttp_set_max_headers_size(w->admin_http, HTTP_MAX_HEADERS_SIZE);
    evhttp_set_timeout(w->admin_http, cfg->http_timeout_s);
    evhttp_set_default_content_type(w->admin_http, "application/json");
    evhttp_set_allowed_methods(w->admin_http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST);
    evhttp_set_gencb(w->admin_http, on_admin_request, w);
    if ((l = listen_on(w, cfg->admin_host, cfg->admin_port)) == NULL)
        return -1;
    if (evhttp_bind_listener(w->admin_http, l) == NULL) {
        evconnlistener_free(l);
        log_msg(LOG_ERROR, "cannot bind the admin HTTP server to %s", cfg->admin_listen);
        return -1;
    }
    evconnlistener_enable(l);
    return 0;
}

int http_start(worker_t *w)
{
    const config_t *cfg = w->cfg;

    w->http = evhttp_new(w->base);
    if (w->http == NULL)
        return -1;
    evhttp_set_max_body_size(w->http, HTTP_TRANSPORT_MAX_BODY);
    evhttp_set_max_headers_size(w->http, HTTP_MAX_HEADERS_SIZE);
    evhttp_set_timeout(w->http, cfg->http_timeout_s);
    evhttp_set_default_content_type(w->http, "application/json");
    /* A body over the limit is read and dropped before the 413 goes out, so that a client
     * still sending sees the answer instead of a reset. The HTTP timeout bounds it. */
    evhttp_set_flags(w->http, EVHTTP_SERVER_LINGERING_CLOSE);
    evhttp_set_allowed_methods(w->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    evhttp_set_gencb(w->http, on_request, w);
    if (conn_setup(w) < 0)
        return -1;
    if (cfg->admin_listen[0] != '\0' && admin_start(w) < 0)
        return -1;
    if ((w->listener = listen_on(w, cfg->listen_host, cfg->listen_port)) == NULL)
        return -1;
    if ((w->bound = evhttp_bind_listener(w->http, w->listener)) == NULL) {
        log_msg(LOG_ERROR, "cannot bind the HTTP server to %s", cfg->listen);
        return -1;
    }
    evconnlistener_enable(w->listener);
    w->accepting = 1;
    return 0;
}
