/* sentinel.c - one SENTINEL get-master-addr-by-name query over hiredis async, trying each
 * sentinel in turn with a timeout. hiredis 0.14 rules apply: the connect callback never frees
 * the context, and every callback tolerates a NULL reply. */
#include "sentinel.h"

#include "redistls.h"

#include "../core/clock.h"

#include <arpa/inet.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Owned by its caller until the callback has run or it is cancelled. */
struct sentinel_query {
    struct event_base *base;
    struct evdns_base *dns; /* NULL: names are not looked up on the loop */
    struct ssl_ctx_st *tls; /* NULL: the sentinels are asked in clear */
    redistls_t *relay;      /* TLS under ac, or NULL */
    const sentinel_addr_t *sentinels;
    int n, tried, *next;
    char master[128];
    int timeout_ms;
    sentinel_cb *cb;
    void *arg;
    const sentinel_addr_t *asking;            /* the sentinel of this attempt */
    redisAsyncContext *ac;                    /* the sentinel being asked, NULL between attempts */
    struct evdns_getaddrinfo_request *lookup; /* a name being looked up, or NULL */
    void (*found)(sentinel_query_t *q);       /* what follows the lookup */
    char addr[64];                            /* what the lookup found ("" when nothing) */
    int nth;                                  /* the lookup's address to take (sentinel_addr_t) */
    int master_port;                          /* the master's, while its name is looked up */
    struct event *timer; /* runs then: the attempt's timeout, or the next step now */
    void (*then)(sentinel_query_t *q);
};

static void try_next(sentinel_query_t *q);

static void query_arm(sentinel_query_t *q, void (*then)(sentinel_query_t *q), int ms)
{
    struct timeval tv = clock_ms_timeval(ms);

    q->then = then;
    evtimer_add(q->timer, &tv);
}

/* host may be q's own (addr): copied before q goes. */
static void query_done(sentinel_query_t *q, int ok, const char *host, int port)
{
    sentinel_cb *cb = q->cb;
    void *arg = q->arg;
    char copy[sizeof(q->addr)] = "";

    if (host != NULL)
        snprintf(copy, sizeof(copy), "%s", host);
    redistls_free(q->relay);
    event_free(q->timer);
    free(q);
    cb(arg, ok, ok ? copy : NULL, port);
}

/* Gives up on the current sentinel and its lookup (not from its connect callback). */
static void abandon(sentinel_query_t *q)
{
    redisAsyncContext *ac = q->ac;
    struct evdns_getaddrinfo_request *lookup = q->lookup;

    q->ac = NULL;
    if (ac != NULL) {
        ac->data = NULL;
        redisAsyncFree(ac);
    }
    redistls_free(q->relay);
    q->relay = NULL;
    q->lookup = NULL;
    if (lookup != NULL)
        evdns_getaddrinfo_cancel(lookup); /* on_lookup sees EVUTIL_EAI_CANCEL */
}

static void next_attempt(sentinel_query_t *q)
{
    abandon(q);
    try_next(q);
}

static int is_address(const char *host)
{
    unsigned char buf[sizeof(struct in6_addr)];

    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

int sentinel_addresses(const struct addrinfo *res, int ipv4_first, char out[][46], int max)
{
    int n = 0;

    for (int pass = ipv4_first ? 0 : 1; pass < 2; pass++)
        for (const struct addrinfo *a = res; a != NULL && n < max; a = a->ai_next) {
            char text[46];
            int seen = 0;
            /* with ipv4_first, pass 0 takes the IPv4 addresses and pass 1 the rest */
            if (ipv4_first && (a->ai_family == AF_INET) != (pass == 0))
                continue;
            if (a->ai_family == AF_INET6)
                inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)a->ai_addr)->sin6_addr, text,
                          sizeof(text));
            else if (a->ai_family == AF_INET)
                inet_ntop(AF_INET, &((const struct sockaddr_in *)a->ai_addr)->sin_addr, text,
                          sizeof(text));
            else
                continue;
            for (int i = 0; i < n && !seen; i++) /* one per protocol when hints leave it open */
                seen = strcmp(out[i], text) == 0;
            if (!seen)
                snprintf(out[n++], sizeof(out[0]), "%s", text);
        }
    return n;
}

/* The nth address of res (IPv4 first; round, for a name that has fewer now than at start-up)
 * into out ("" when none); how many res has. */
static int nth_address(const struct evutil_addrinfo *res, int nth, char *out, size_t size)
{
    char all[SENTINEL_MAX][46];
    int n = sentinel_addresses(res, 1, all, SENTINEL_MAX);

    out[0] = '\0';
    if (n > 0)
        snprintf(out, size, "%.45s", all[nth % n]);
    return n;
}

/* Records what the lookup found; found() runs from the timer, never from inside
 * evdns_getaddrinfo (which may answer before it returns, from the hosts file). */
static void on_lookup(int result, struct evutil_addrinfo *res, void *arg)
{
    sentinel_query_t *q = arg;

    if (result == EVUTIL_EAI_CANCEL) { /* abandon() dropped it: q may be going away */
        if (res != NULL)
            evutil_freeaddrinfo(res);
        return;
    }
    q->lookup = NULL;
    q->addr[0] = '\0';
    if (result == 0)
        nth_address(res, q->nth, q->addr, sizeof(q->addr));
    if (res != NULL)
        evutil_freeaddrinfo(res);
    query_arm(q, q->found, 0);
}

/* Looks name up on the loop (hosts file, then DNS); found() follows, or next_attempt() when
 * the attempt's time is up first. */
static void look_up(sentinel_query_t *q, const char *name, int nth,
                    void (*found)(sentinel_query_t *q))
{
    struct evutil_addrinfo hints;
    struct evdns_getaddrinfo_request *req;

    q->nth = nth; /* which of its addresses */
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    q->found = found;
    query_arm(q, next_attempt, q->timeout_ms);
    req = evdns_getaddrinfo(q->dns, name, NULL, &hints, on_lookup, q);
    if (req != NULL) /* NULL: on_lookup has run already */
        q->lookup = req;
}

static void on_master_addr(redisAsyncContext *ac, void *r, void *privdata);
static void on_sentinel_connect(const redisAsyncContext *ac, int status);
static void on_sentinel_disconnect(const redisAsyncContext *ac, int status);

/* The sentinel's TLS handshake failed (or its connect): the next one is asked. */
static void on_sentinel_tls(void *arg, int up, const char *why)
{
    sentinel_query_t *q = arg;

    (void)why;
    if (!up) {
        abandon(q);
        query_arm(q, next_attempt, 0);
    }
}

static void ask(sentinel_query_t *q, const char *host)
{
    redisAsyncContext *ac;
    char err[160];

    /* host is an IP address: hiredis would resolve a name with a blocking call */
    ac = redisAsyncConnect(host, q->asking->port);
    if (ac != NULL && !ac->err && q->tls != NULL)
        q->relay =
            redistls_wrap(ac, q->base, q->tls, q->asking->name[0] != '\0' ? q->asking->name : host,
                          on_sentinel_tls, q, err, sizeof(err));
    if (ac == NULL || ac->err || (q->tls != NULL && q->relay == NULL) ||
        redisLibeventAttach(ac, q->base) != REDIS_OK) {
        if (ac != NULL)
            redisAsyncFree(ac);
        redistls_free(q->relay);
        q->relay = NULL;
        query_arm(q, next_attempt, 0);
        return;
    }
    ac->data = q;
    redisAsyncSetConnectCallback(ac, on_sentinel_connect);
    redisAsyncSetDisconnectCallback(ac, on_sentinel_disconnect);
    q->ac = ac;
    if (redisAsyncCommand(ac, on_master_addr, q, "SENTINEL get-master-addr-by-name %s",
                          q->master) != REDIS_OK) {
        abandon(q);
        query_arm(q, next_attempt, 0);
        return;
    }
    query_arm(q, next_attempt, q->timeout_ms);
}

/* The sentinel's name looked up again: a sentinel moved to another address is still found.
 * When the lookup fails, the address of start-up is tried. */
static void ask_found(sentinel_query_t *q)
{
    ask(q, q->addr[0] != '\0' ? q->addr : q->asking->host);
}

static void master_found(sentinel_query_t *q)
{
    if (q->addr[0] == '\0') {
        next_attempt(q);
        return;
    }
    query_done(q, 1, q->addr, q->master_port);
}

static void on_master_addr(redisAsyncContext *ac, void *r, void *privdata)
{
    sentinel_query_t *q = privdata;
    redisReply *reply = r;
    char host[256];
    int port;

    if (ac->data == NULL || q->ac != ac)
        return; /* an attempt we already gave up */
    if (reply != NULL && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
        reply->element[0]->type == REDIS_REPLY_STRING &&
        reply->element[1]->type == REDIS_REPLY_STRING && reply->element[0]->len < sizeof(host) &&
        (port = atoi(reply->element[1]->str)) > 0 && port < 65536) {
        memcpy(host, reply->element[0]->str, reply->element[0]->len + 1);
        q->ac = NULL;
        ac->data = NULL;
        redisAsyncDisconnect(ac); /* after this callback; our callbacks see data NULL */
        evtimer_del(q->timer);
        *q->next = (*q->next + q->n - 1) % q->n; /* ask this one first next time */
        if (is_address(host) && strlen(host) < sizeof(q->addr)) {
            query_done(q, 1, host, port);
        } else if (q->dns != NULL) {
            /* announced by name (announce-hostnames): looked up without blocking */
            q->master_port = port;
            look_up(q, host, 0, master_found);
        } else {
            query_arm(q, next_attempt, 0);
        }
        return;
    }
    /* no such master here, or the sentinel went away: ask the next one */
    q->ac = NULL;
    ac->data = NULL;
    if (reply != NULL)
        redisAsyncDisconnect(ac);
    query_arm(q, next_attempt, 0);
}

static void on_sentinel_connect(const redisAsyncContext *ac, int status)
{
    sentinel_query_t *q = ac->data;

    if (q == NULL || status == REDIS_OK)
        return;
    /* hiredis frees this context after the callback (and calls on_master_addr with NULL) */
    q->ac = NULL;
    ((redisAsyncContext *)ac)->data = NULL;
    query_arm(q, next_attempt, 0);
}

static void on_sentinel_disconnect(const redisAsyncContext *ac, int status)
{
    sentinel_query_t *q = ac->data;

    (void)status;
    if (q == NULL)
        return;
    q->ac = NULL;
    query_arm(q, next_attempt, 0);
}

static void on_query_timer(evutil_socket_t fd, short what, void *arg)
{
    sentinel_query_t *q = arg;

    (void)fd;
    (void)what;
    q->then(q);
}

static void try_next(sentinel_query_t *q)
{
    if (q->tried >= q->n) {
        query_done(q, 0, NULL, 0);
        return;
    }
    q->asking = &q->sentinels[*q->next];
    *q->next = (*q->next + 1) % q->n;
    q->tried++;
    if (q->dns != NULL && q->asking->name[0] != '\0' && !is_address(q->asking->name))
        look_up(q, q->asking->name, q->asking->nth, ask_found);
    else
        ask(q, q->asking->host);
}

sentinel_query_t *sentinel_ask(struct event_base *base, struct evdns_base *dns,
                               struct ssl_ctx_st *tls, const sentinel_addr_t *sentinels, int n,
                               int *next, const char *master, int timeout_ms, sentinel_cb *cb,
                               void *arg)
{
    sentinel_query_t *q;

    if (n <= 0 || (q = calloc(1, sizeof(*q))) == NULL)
        return NULL;
    q->base = base;
    q->dns = dns;
    q->tls = tls;
    q->sentinels = sentinels;
    q->n = n;
    q->next = next;
    snprintf(q->master, sizeof(q->master), "%s", master);
    q->timeout_ms = timeout_ms;
    q->cb = cb;
    q->arg = arg;
    if ((q->timer = evtimer_new(base, on_query_timer, q)) == NULL) {
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
    /* the items' other addresses, as entries that follow every item's first */
    sentinel_addr_t more[SENTINEL_MAX];
    int n_more = 0;

    *n = 0;
    snprintf(buf, sizeof(buf), "%s", spec);
    for (item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(item, ':');
        struct addrinfo hints, *res = NULL;
        int port, found;

        while (*item == ' ')
            item++;
        if (colon == NULL || (port = atoi(colon + 1)) <= 0 || port > 65535) {
            snprintf(errbuf, errlen, "%s: expected host:port", item);
            return -1;
        }
        if (*n == max) {
            snprintf(errbuf, errlen, "at most %d addresses", max);
            return -1;
        }
        *colon = '\0';
        if (item[0] == '[' && colon[-1] == ']') {
            colon[-1] = '\0';
            item++;
        }
        if (strlen(item) >= sizeof(out[*n].name)) {
            snprintf(errbuf, errlen, "%.64s...: name too long", item);
            return -1;
        }
        memset(&hints, 0, sizeof(hints));
        hints.ai_socktype = SOCK_STREAM;
        /* blocking, but at start-up only: the loops do not run yet */
        if (getaddrinfo(item, NULL, &hints, &res) != 0 || res == NULL) {
            snprintf(errbuf, errlen, "cannot resolve %s", item);
            return -1;
        }
        found = nth_address(res, 0, out[*n].host, sizeof(out[*n].host));
        /* each other address of the name is one more entry, tried in turn like the others
         * (localhost: 127.0.0.1, then ::1): a name is not one address that may be down */
        for (int k = 1; k < found && n_more < SENTINEL_MAX; k++, n_more++) {
            nth_address(res, k, more[n_more].host, sizeof(more[n_more].host));
            snprintf(more[n_more].name, sizeof(more[n_more].name), "%s", item);
            more[n_more].port = port;
            more[n_more].nth = k;
        }
        freeaddrinfo(res);
        snprintf(out[*n].name, sizeof(out[*n].name), "%s", item);
        out[*n].port = port;
        out[*n].nth = 0;
        (*n)++;
    }
    if (*n == 0) {
        snprintf(errbuf, errlen, "no sentinel given");
        return -1;
    }
    for (int k = 0; k < n_more && *n < max; k++)
        out[(*n)++] = more[k];
    return 0;
}
