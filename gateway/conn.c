/* conn.c - tracking client connections (see conn.h).
 * evhttp 2.1 tells nobody when a connection closes unless a close callback was set on it, and
 * offers no hook where a new connection is seen together with its evhttp_connection. So the
 * bufferevent hook counts the connection and queues its bufferevent; a deferred callback, run
 * in the same loop iteration once evhttp has wired the connection up, finds the connection
 * (the bufferevent's callback argument) and sets the close callback. (A pass-through filter
 * bufferevent would see the free too, but evhttp then takes a reply as sent once it reaches
 * the filter, and closes Connection: close replies before they are written.) */
#include "conn.h"

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CONN_BUCKETS 4096
#define SWEEP_MS 1000

/* Owned by the worker's table from adoption until evhttp closes the connection. */
typedef struct conn {
    worker_t *w;
    struct evhttp_connection *evcon;
    int64_t progress_ms; /* accepted, a request arrived, or an answer was given */
    int busy;            /* API requests of this connection being worked on */
    struct conn *prev, *next, *hnext;
} conn_t;

/* Owned by the worker (w->conns). */
struct conn_table {
    conn_t *all;                  /* every adopted connection */
    conn_t *buckets[CONN_BUCKETS];
    struct bufferevent **fresh;   /* accepted in this loop iteration, not yet adopted */
    size_t n_fresh, cap_fresh;
    struct event *adopt;
    struct event *sweep;
};

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static unsigned bucket_of(const void *evcon)
{
    uintptr_t p = (uintptr_t)evcon;

    return (unsigned)((p >> 4) ^ (p >> 16)) % CONN_BUCKETS;
}

static conn_t *lookup(conn_table_t *t, const struct evhttp_connection *evcon)
{
    conn_t *c = t->buckets[bucket_of(evcon)];

    while (c != NULL && c->evcon != evcon)
        c = c->hnext;
    return c;
}

void conn_update_accepting(worker_t *w)
{
    int want = w->connections < (size_t)w->cfg->max_connections;

    if (w->listener == NULL || want == w->accepting)
        return;
    if (want) {
        evconnlistener_enable(w->listener);
    } else {
        evconnlistener_disable(w->listener);
        atomic_fetch_add_explicit(&w->metrics.accept_pauses, 1, memory_order_relaxed);
    }
    w->accepting = want;
}

static void uncount(worker_t *w)
{
    w->connections--;
    atomic_fetch_add_explicit(&w->metrics.connections, -1, memory_order_relaxed);
    conn_update_accepting(w);
}

static void on_closed(struct evhttp_connection *evcon, void *arg)
{
    conn_t *c = arg, **pp;
    conn_table_t *t = c->w->conns;

    for (pp = &t->buckets[bucket_of(evcon)]; *pp != c; pp = &(*pp)->hnext)
        ;
    *pp = c->hnext;
    if (c->prev)
        c->prev->next = c->next;
    else
        t->all = c->next;
    if (c->next)
        c->next->prev = c->prev;
    uncount(c->w);
    free(c);
}

static void adopt(evutil_socket_t fd, short what, void *arg)
{
    worker_t *w = arg;
    conn_table_t *t = w->conns;
    int64_t now = now_ms();

    (void)fd;
    (void)what;
    for (size_t i = 0; i < t->n_fresh; i++) {
        struct evhttp_connection *evcon = NULL;
        conn_t *c;
        bufferevent_getcb(t->fresh[i], NULL, NULL, NULL, (void **)&evcon);
        if (evcon == NULL || (c = calloc(1, sizeof(*c))) == NULL) {
            /* untracked: never uncounted; only under memory exhaustion */
            continue;
        }
        c->w = w;
        c->evcon = evcon;
        c->progress_ms = now;
        c->hnext = t->buckets[bucket_of(evcon)];
        t->buckets[bucket_of(evcon)] = c;
        c->next = t->all;
        if (t->all)
            t->all->prev = c;
        t->all = c;
        evhttp_connection_set_closecb(evcon, on_closed, c);
    }
    t->n_fresh = 0;
}

static struct bufferevent *on_new_connection(struct event_base *base, void *arg)
{
    worker_t *w = arg;
    conn_table_t *t = w->conns;
    struct bufferevent *bev;

    if (t->n_fresh == t->cap_fresh) {
        size_t cap = t->cap_fresh ? t->cap_fresh * 2 : 64;
        struct bufferevent **fresh = realloc(t->fresh, cap * sizeof(*fresh));
        if (fresh == NULL)
            return NULL;
        t->fresh = fresh;
        t->cap_fresh = cap;
    }
    bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL)
        return NULL;
    t->fresh[t->n_fresh++] = bev;
    event_active(t->adopt, EV_TIMEOUT, 0);
    w->connections++;
    atomic_fetch_add_explicit(&w->metrics.connections, 1, memory_order_relaxed);
    conn_update_accepting(w);
    return bev;
}

/* Closes connections that made no progress within the HTTP timeout and have no request being
 * worked on: idle keep-alive connections (evhttp would too) and trickling ones (it would not). */
static void sweep(evutil_socket_t fd, short what, void *arg)
{
    worker_t *w = arg;
    int64_t limit = now_ms() - (int64_t)w->cfg->http_timeout_s * 1000;
    conn_t *c = w->conns->all, *next;

    (void)fd;
    (void)what;
    for (; c != NULL; c = next) {
        next = c->next;
        if (c->busy == 0 && c->progress_ms < limit)
            evhttp_connection_free(c->evcon); /* on_closed frees c */
    }
}

int conn_setup(worker_t *w)
{
    struct timeval tv = {SWEEP_MS / 1000, (SWEEP_MS % 1000) * 1000};

    w->conns = calloc(1, sizeof(*w->conns));
    if (w->conns == NULL)
        return -1;
    w->conns->adopt = event_new(w->base, -1, 0, adopt, w);
    w->conns->sweep = event_new(w->base, -1, EV_PERSIST, sweep, w);
    if (w->conns->adopt == NULL || w->conns->sweep == NULL || event_add(w->conns->sweep, &tv) < 0)
        return -1;
    evhttp_set_bevcb(w->http, on_new_connection, w);
    return 0;
}

void conn_cleanup(worker_t *w)
{
    conn_table_t *t = w->conns;

    if (t == NULL)
        return;
    if (t->adopt)
        event_free(t->adopt);
    if (t->sweep)
        event_free(t->sweep);
    free(t->fresh);
    free(t);
    w->conns = NULL;
}

void conn_request_arrived(worker_t *w, struct evhttp_request *req, int busy)
{
    conn_t *c = lookup(w->conns, evhttp_request_get_connection(req));

    if (c != NULL) {
        c->progress_ms = now_ms();
        c->busy += busy;
    }
}

void conn_request_done(worker_t *w, struct evhttp_request *req)
{
    conn_t *c = lookup(w->conns, evhttp_request_get_connection(req));

    if (c != NULL) {
        c->progress_ms = now_ms();
        if (c->busy > 0)
            c->busy--;
    }
}
