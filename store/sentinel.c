/* sentinel.c - one SENTINEL get-master-addr-by-name query over hiredis async, trying each
 * sentinel in turn with a timeout. hiredis 0.14 rules apply: the connect callback never frees
 * the context, and every callback tolerates a NULL reply. */
#include "sentinel.h"

#include <arpa/inet.h>
#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Owned by its caller until the callback has run or it is cancelled. */
struct sentinel_query {
    struct event_base *base;
    const sentinel_addr_t *sentinels;
    int n, tried, *next;
    char master[128];
    int timeout_ms;
    sentinel_cb *cb;
    void *arg;
    redisAsyncContext *ac; /* the sentinel being asked, NULL between attempts */
    struct event *timer;   /* the attempt's timeout, or "try the next one now" */
};

static void try_next(sentinel_query_t *q);

static void arm(sentinel_query_t *q, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

    evtimer_add(q->timer, &tv);
}

static void done(sentinel_query_t *q, int ok, const char *host, int port)
{
    sentinel_cb *cb = q->cb;
    void *arg = q->arg;

    event_free(q->timer);
    free(q);
    cb(arg, ok, host, port);
}

/* Gives up on the current sentinel (not from its connect callback). */
static void abandon(sentinel_query_t *q)
{
    redisAsyncContext *ac = q->ac;

    q->ac = NULL;
    if (ac != NULL) {
        ac->data = NULL;
        redisAsyncFree(ac);
    }
}

static void on_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    sentinel_query_t *q = privdata;
    redisReply *reply = r;
    char host[64];
    int port;

    if (ac->data == NULL || q->ac != ac)
        return; /* an attempt we already gave up */
    if (reply != NULL && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
        reply->element[0]->type == REDIS_REPLY_STRING &&
        reply->element[1]->type == REDIS_REPLY_STRING &&
        reply->element[0]->len < sizeof(host) &&
        (port = atoi(reply->element[1]->str)) > 0 && port < 65536) {
        memcpy(host, reply->element[0]->str, reply->element[0]->len + 1);
        q->ac = NULL;
        ac->data = NULL;
        redisAsyncDisconnect(ac); /* after this callback; our callbacks see data NULL */
        evtimer_del(q->timer);
        *q->next = (*q->next + q->n - 1) % q->n; /* ask this one first next time */
        done(q, 1, host, port);
        return;
    }
    /* no such master here, or the sentinel went away: ask the next one */
    q->ac = NULL;
    ac->data = NULL;
    if (reply != NULL)
        redisAsyncDisconnect(ac);
    arm(q, 0);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    sentinel_query_t *q = ac->data;

    if (q == NULL || status == REDIS_OK)
        return;
    /* hiredis frees this context after the callback (and calls on_reply with NULL) */
    q->ac = NULL;
    ((redisAsyncContext *)ac)->data = NULL;
    arm(q, 0);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    sentinel_query_t *q = ac->data;

    (void)status;
    if (q == NULL)
        return;
    q->ac = NULL;
    arm(q, 0);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    sentinel_query_t *q = arg;

    (void)fd;
    (void)what;
    abandon(q);
    try_next(q);
}

static void try_next(sentinel_query_t *q)
{
    const sentinel_addr_t *s;
    redisAsyncContext *ac;

    if (q->tried >= q->n) {
        done(q, 0, NULL, 0);
        return;
    }
    s = &q->sentinels[*q->next];
    *q->next = (*q->next + 1) % q->n;
    q->tried++;
    ac = redisAsyncConnect(s->host, s->port);
    if (ac == NULL || ac->err || redisLibeventAttach(ac, q->base) != REDIS_OK) {
        if (ac != NULL)
            redisAsyncFree(ac);
        arm(q, 0);
        return;
    }
    ac->data = q;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    q->ac = ac;
    if (redisAsyncCommand(ac, on_reply, q, "SENTINEL get-master-addr-by-name %s", q->master) !=
        REDIS_OK) {
        abandon(q);
        arm(q, 0);
        return;
    }
    arm(q, q->timeout_ms);
}

sentinel_query_t *sentinel_ask(struct event_base *base, const sentinel_addr_t *sentinels, int n,
                               int *next, const char *master, int timeout_ms, sentinel_cb *cb,
                               void *arg)
{
    sentinel_query_t *q;

    if (n <= 0 || (q = calloc(1, sizeof(*q))) == NULL)
        return NULL;
    q->base = base;
    q->sentinels = sentinels;
    q->n = n;
    q->next = next;
    snprintf(q->master, sizeof(q->master), "%s", master);
    q->timeout_ms = timeout_ms;
    q->cb = cb;
    q->arg = arg;
    if ((q->timer = evtimer_new(base, on_timer, q)) == NULL) {
        free(q);
        return NULL;
    }
    *q->next %= n;
    try_next(q);
    return q;
}

void sentinel_cancel(sentinel_query_t *q)
{
    if (q == NULL)
        return;
    abandon(q);
    event_free(q->timer);
    free(q);
}

int sentinel_parse_list(const char *spec, sentinel_addr_t *out, int max, int *n, char *errbuf,
                        unsigned long errlen)
{
    char buf[1024], *save = NULL, *item;

    *n = 0;
    snprintf(buf, sizeof(buf), "%s", spec);
    for (item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(item, ':');
        struct addrinfo hints, *res = NULL;
        int port;

        while (*item == ' ')
            item++;
        if (colon == NULL || (port = atoi(colon + 1)) <= 0 || port > 65535) {
            snprintf(errbuf, errlen, "sentinel %s: expected host:port", item);
            return -1;
        }
        if (*n == max) {
            snprintf(errbuf, errlen, "at most %d sentinels", max);
            return -1;
        }
        *colon = '\0';
        if (item[0] == '[' && colon[-1] == ']') {
            colon[-1] = '\0';
            item++;
        }
        memset(&hints, 0, sizeof(hints));
        hints.ai_socktype = SOCK_STREAM;
        if (getaddrinfo(item, NULL, &hints, &res) != 0 || res == NULL) {
            snprintf(errbuf, errlen, "cannot resolve sentinel %s", item);
            return -1;
        }
        if (res->ai_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)res->ai_addr)->sin6_addr,
                      out[*n].host, sizeof(out[*n].host));
        else
            inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, out[*n].host,
                      sizeof(out[*n].host));
        freeaddrinfo(res);
        out[*n].port = port;
        (*n)++;
    }
    if (*n == 0) {
        snprintf(errbuf, errlen, "no sentinel given");
        return -1;
    }
    return 0;
}
