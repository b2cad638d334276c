/* worker.c - a worker's life: build its loop and what its requests share, register the
 * routes, run it on a thread, drain it on SIGTERM. */
#include "worker.h"

#include "../core/clock.h"
#include "../store/store.h"
#include "log.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/http.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define DRAIN_FLUSH_MS       200 /* after the last answer, time for it to leave the socket buffers */
#define DRAIN_CALL_MARGIN_MS 100  /* past the upstream timeout: a call left to finish is overdue */
#define WORKER_SCRIPTS_MAX   1024 /* compiled node scripts kept per worker (script_cache_t) */

static worker_t *all_workers;
static int all_count;

void worker_set_all(worker_t *all, int n)
{
    all_workers = all;
    all_count = n;
}

static void on_redis_state(void *arg, int up, const char *why)
{
    worker_t *w = arg;

    atomic_store_explicit(&w->metrics.redis_up, up ? 1 : 0, memory_order_relaxed);
    if (up) {
        w->redis_was_up = 1;
        log_msg(LOG_INFO, "worker %d: redis %s", w->id, why);
    } else if (!w->redis_was_up) {
        /* never reached since the start: the configuration is the usual cause */
        log_msg(LOG_ERROR, "worker %d: redis unreachable (%s); retrying", w->id, why);
    } else {
        atomic_fetch_add_explicit(&w->metrics.redis_reconnects, 1, memory_order_relaxed);
        log_msg(LOG_WARN, "worker %d: redis down: %s", w->id, why);
    }
}

/* Answers every request still in flight at once (a second signal, or calls overdue). */
static void abort_all(worker_t *w)
{
    op_drain_all(&w->env, 1);
}

static void finish_drain(worker_t *w)
{
    struct timeval tv = clock_ms_timeval(DRAIN_FLUSH_MS);

    event_base_loopexit(w->base, &tv);
}

/* Fires when the drain time is over, and once more if calls left to finish outlive their
 * timeout (which should not happen): the process exits within drain + upstream timeout. */
static void on_drain_timeout(evutil_socket_t fd, short what, void *arg)
{
    worker_t *w = arg;
    size_t before = w->env.in_flight, kept;
    int ms = w->cfg->upstream_timeout_ms + DRAIN_CALL_MARGIN_MS;
    struct timeval tv = clock_ms_timeval(ms);

    (void)fd;
    (void)what;
    if (w->env.draining == OP_DRAIN_OVER) {
        log_msg(LOG_WARN, "worker %d: %zu platform calls still out after the upstream timeout",
                w->id, w->env.in_flight);
        abort_all(w);
        finish_drain(w);
        return;
    }
    /* No platform call starts any more. A request whose message call is on the wire keeps it:
     * cut, the message might be delivered and still be reported as not sent, and a retry
     * elsewhere would send it twice. It is answered when the call ends, which its own timeout
     * bounds. Every other request is answered now. */
    w->env.draining = OP_DRAIN_OVER;
    kept = op_drain_all(&w->env, 0);
    if (before > 0)
        log_msg(LOG_WARN,
                "worker %d: drain time over, %zu requests cut short, %zu waiting for a platform "
                "call on the wire",
                w->id, before - kept, kept);
    if (kept == 0) {
        finish_drain(w);
        return;
    }
    evtimer_add(w->drain_timer, &tv);
}

/* New connections are refused from now on; the requests in flight get the drain time. */
static void stop_listening(worker_t *w)
{
    struct timeval tv = clock_ms_timeval(w->cfg->drain_timeout_ms);

    http_stop_listening(&w->http);
    if (w->env.in_flight == 0) {
        finish_drain(w);
        return;
    }
    evtimer_add(w->drain_timer, &tv);
}

static void on_drain_delay(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    stop_listening(arg);
}

static void on_ctl(evutil_socket_t fd, short what, void *arg)
{
    worker_t *w = arg;
    char c;

    (void)what;
    while (read(fd, &c, 1) == 1) {
        if (c == 'd' && !w->env.draining) {
            /* /readyz turns 503 and answers carry Connection: close at once; new connections
             * are still taken for BOTGATE_DRAIN_DELAY_MS, time for a load balancer's health
             * check to notice, then refused. */
            w->env.draining = 1;
            if (w->cfg->drain_delay_ms > 0) {
                struct timeval tv = clock_ms_timeval(w->cfg->drain_delay_ms);
                evtimer_add(w->drain_delay, &tv);
            } else {
                stop_listening(w);
            }
        } else if (c == 'q') {
            w->env.draining = OP_DRAIN_OVER;
            evtimer_del(w->drain_delay);
            stop_listening(w);
            abort_all(w);
            finish_drain(w);
        }
    }
}

/* A request was answered: the drain may finish. */
static void on_op_done(void *arg)
{
    worker_t *w = arg;

    if (w->env.draining && w->http.bound == NULL && w->env.in_flight == 0)
        finish_drain(w);
}

/* ---- the routes ---- */

static void on_health(void *arg, struct evhttp_request *req)
{
    (void)arg;
    http_send_json(req, 200, "OK", "{\"ok\":1}");
}

/* Every 50 ms from start-up until the worker's store is first ready (its Redis connected; with
 * a cluster, as cluster_ready says), then never again. */
static void on_ready_check(evutil_socket_t fd, short what, void *arg)
{
    worker_t *w = arg;
    struct timeval tv = {0, 50000};

    (void)fd;
    (void)what;
    if (store_ready(w->env.deliver.store))
        atomic_store(&w->ready_once, 1);
    else
        event_add(w->ready_check, &tv);
}

/* Whether every worker's store has been ready since start-up: until then the process is not,
 * whichever worker answers, or a load balancer would send requests that a worker still
 * connecting answers with 119. */
static int all_ready_once(void)
{
    for (int i = 0; i < all_count; i++)
        if (!atomic_load(&all_workers[i].ready_once))
            return 0;
    return 1;
}

/* Ready once every worker has reached Redis since start-up, then while the answering worker's
 * Redis is reachable and the worker is not draining, so that a load balancer stops sending
 * before the process goes away. */
static void on_ready(void *arg, struct evhttp_request *req)
{
    worker_t *w = arg;

    if (w->env.draining)
        http_send_json(req, 503, "Service Unavailable",
                       "{\"ok\":0,\"err_code\":121,\"err\":\"shutting down\","
                       "\"error\":\"shutting down\"}");
    else if (!store_ready(w->env.deliver.store) || !all_ready_once())
        http_send_json(req, 503, "Service Unavailable",
                       "{\"ok\":0,\"err_code\":119,\"err\":\"store unavailable\","
                       "\"error\":\"store unavailable\"}");
    else
        http_send_json(req, 200, "OK", "{\"ok\":1}");
}

static void on_metrics(void *arg, struct evhttp_request *req)
{
    const metrics_t *all[256];
    int n = all_count;

    (void)arg;
    if (n > 256)
        n = 256;
    for (int i = 0; i < n; i++)
        all[i] = &all_workers[i].metrics;
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4; charset=utf-8");
    metrics_render(evhttp_request_get_output_buffer(req), all, n);
    http_send(req, 200, "OK");
}

static int add_routes(worker_t *w)
{
    w->env.send_route = (op_route_t){&w->env, &op_send_kind};
    w->env.redirect_route = (op_route_t){&w->env, &op_redirect_kind};
    const http_route_t routes[] = {
        {"/sendResponses", EVHTTP_REQ_POST, op_start, &w->env.send_route, 1, HTTP_API},
        {"/redirectMemberToNode", EVHTTP_REQ_POST, op_start, &w->env.redirect_route, 1, HTTP_API},
        {"/healthz", EVHTTP_REQ_GET, on_health, w, 0, HTTP_BOTH},
        {"/readyz", EVHTTP_REQ_GET, on_ready, w, 0, HTTP_BOTH},
        {"/metrics", EVHTTP_REQ_GET, on_metrics, w, 0, HTTP_ADMIN},
        {"/requests/", EVHTTP_REQ_GET, outbox_status_route, w->outbox, 1, HTTP_API},
        {"/broadcasts", EVHTTP_REQ_POST, broadcasts_post_route, w->broadcasts, 1, HTTP_API},
        {"/broadcasts/", EVHTTP_REQ_GET, broadcasts_id_route, w->broadcasts, 1, HTTP_API},
        {"/broadcasts/", EVHTTP_REQ_DELETE, broadcasts_id_route, w->broadcasts, 1, HTTP_API},
        {"/webhooks/", EVHTTP_REQ_POST, webhook_route, w->webhook, 1, HTTP_API},
        {"/webhooks/", EVHTTP_REQ_GET, webhook_route, w->webhook, 1, HTTP_API},
    };

    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
        if (http_route(&w->http, &routes[i]) < 0)
            return -1;
    return 0;
}

uint64_t worker_seed(const void *salt)
{
    uint64_t seed = 0;

    if (getrandom(&seed, sizeof(seed), 0) != sizeof(seed) || seed == 0)
        seed = (0x9E3779B97F4A7C15ULL ^ (uint64_t)(uintptr_t)salt ^ ((uint64_t)time(NULL) << 22) ^
                (uint64_t)getpid()) |
               1;
    return seed;
}

int worker_init(worker_t *w, int id, const config_t *cfg)
{
    struct event_config *ec;
    net_config_t ucfg;

    memset(w, 0, sizeof(*w));
    w->id = id;
    w->cfg = cfg;
    w->ctl[0] = w->ctl[1] = -1;
    w->env.deliver.rng = worker_seed(w);
    /* One thread per base: no locking inside libevent. */
    ec = event_config_new();
    event_config_set_flag(ec, EVENT_BASE_FLAG_NOLOCK);
    /* A 0 ms timer that curl asks for must not wait for the coarse clock's next tick; and the
     * changelist folds an event's disable/enable within one loop turn (evhttp does that for
     * every request) into no epoll_ctl at all. */
    event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
    event_config_set_flag(ec, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    w->base = event_base_new_with_config(ec);
    event_config_free(ec);
    /* before any event exists: the Redis invalidations are read first (priority 0, redisc.c);
     * everything else keeps the default, 1 */
    if (w->base == NULL || event_base_priority_init(w->base, 3) < 0)
        return -1;
    w->env.deliver.base = w->base;
    w->env.deliver.cfg = cfg;
    w->env.deliver.metrics = &w->metrics;
    w->env.deliver.store = store_new(w->base, &cfg->store);
    if (w->env.deliver.store == NULL)
        return -1;
    store_set_state_cb(w->env.deliver.store, on_redis_state, w);
    store_set_observer(w->env.deliver.store, metrics_on_redis_command, &w->metrics);
    memset(&ucfg, 0, sizeof(ucfg));
    ucfg.ca_file = cfg->ca_file;
    ucfg.http1 = strcmp(cfg->upstream_http, "1.1") == 0;
    /* platform answers are a few hundred bytes: curl's smallest receive buffer (1 KiB) keeps
     * the memory of a send in flight low; a longer answer only takes more reads */
    ucfg.buffer_size = 1024;
    w->env.deliver.up = net_new(w->base, &ucfg);
    ucfg.guard = !cfg->allow_private_media;
    ucfg.direct = 1;
    ucfg.http1 = 0;           /* the setting is for platform calls */
    ucfg.buffer_size = 65536; /* media downloads */
    w->env.deliver.up_user = net_new(w->base, &ucfg);
    if (w->env.deliver.up == NULL || w->env.deliver.up_user == NULL) {
        log_msg(LOG_ERROR, "the platform client could not start (is BOTGATE_CA_FILE a PEM CA "
                           "bundle?)");
        return -1;
    }
    {
        script_limits_t lim = {cfg->script_max_instructions, cfg->script_max_memory_kb,
                               cfg->script_max_ms, clock_mono_us};
        if ((w->env.scripts = script_cache_new(lim, WORKER_SCRIPTS_MAX)) == NULL)
            return -1;
    }
    if (pipe2(w->ctl, O_NONBLOCK | O_CLOEXEC) < 0)
        return -1;
    w->ctl_ev = event_new(w->base, w->ctl[0], EV_READ | EV_PERSIST, on_ctl, w);
    w->drain_timer = evtimer_new(w->base, on_drain_timeout, w);
    w->drain_delay = evtimer_new(w->base, on_drain_delay, w);
    w->env.deadline_timer = evtimer_new(w->base, op_on_deadlines, &w->env);
    w->ready_check = evtimer_new(w->base, on_ready_check, w);
    if (w->ctl_ev == NULL || w->drain_timer == NULL || w->drain_delay == NULL ||
        w->env.deadline_timer == NULL || w->ready_check == NULL || event_add(w->ctl_ev, NULL) < 0)
        return -1;
    event_active(w->ready_check, EV_TIMEOUT, 0);
    w->env.http = &w->http;
    w->env.done = on_op_done;
    w->env.done_arg = w;
    w->http.base = w->base;
    w->http.cfg = cfg;
    w->http.metrics = &w->metrics;
    w->http.rng = &w->env.deliver.rng;
    /* the later workers join the listening group that the first one made */
    w->http.first = id == 0;
    if ((w->outbox = outbox_new(&w->env, id)) == NULL)
        return -1;
    if (id == 0)
        outbox_watch_depth(w->outbox); /* the streams are the process's: one worker looks */
    if ((w->broadcasts = broadcasts_new(&w->env)) == NULL)
        return -1;
    if ((w->webhook = webhook_new(&w->env)) == NULL)
        return -1;
    if (add_routes(w) < 0)
        return -1;
    return http_start(&w->http);
}

static void *worker_thread(void *arg)
{
    worker_t *w = arg;

    event_base_dispatch(w->base);
    return NULL;
}

int worker_start(worker_t *w)
{
    return pthread_create(&w->thread, NULL, worker_thread, w) == 0 ? 0 : -1;
}

void worker_tell(worker_t *w, char what)
{
    ssize_t n = write(w->ctl[1], &what, 1);

    (void)n;
}

void worker_cleanup(worker_t *w)
{
    abort_all(w);
    w->env.draining = 1;
    broadcasts_free(w->broadcasts); /* its accepts in flight answered 121 */
    w->broadcasts = NULL;
    outbox_free(w->outbox); /* after the ops: what they held of it is let go */
    w->outbox = NULL;
    webhook_free(w->webhook); /* before the server that holds their connections */
    w->webhook = NULL;
    http_free(&w->http);
    if (w->ctl_ev != NULL)
        event_free(w->ctl_ev);
    if (w->drain_timer != NULL)
        event_free(w->drain_timer);
    if (w->drain_delay != NULL)
        event_free(w->drain_delay);
    if (w->ready_check != NULL)
        event_free(w->ready_check);
    if (w->env.deadline_timer != NULL)
        event_free(w->env.deadline_timer);
    net_free(w->env.deliver.up);
    net_free(w->env.deliver.up_user);
    op_env_clear(&w->env);
    script_cache_free(w->env.scripts);
    w->env.scripts = NULL;
    store_free(w->env.deliver.store);
    if (w->base != NULL)
        event_base_free(w->base);
    if (w->ctl[0] >= 0)
        close(w->ctl[0]);
    if (w->ctl[1] >= 0)
        close(w->ctl[1]);
}
