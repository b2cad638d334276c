/* redisc.c - async Redis client: one connection per worker, commands pipelined on it.
 * hiredis 0.14 has no timeouts and no reconnect; this file adds both. Commands in flight are
 * kept oldest first (Redis answers in order), so one timer is enough for two deadlines: a
 * command past its own is told NULL and left in flight, its reply dropped when it comes (a
 * server that is slow but answering keeps its connection, and the commands behind it theirs);
 * a connection that heard nothing for a whole timeout while commands wait is stuck: the
 * context is freed, every pending callback gets NULL, and a new connection is tried with
 * backoff. */
#include "redisc.h"

#include "../core/clock.h"
#include "../core/dlist.h"
#include "../core/hash.h"
#include "redistls.h"
#include "resp.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <hiredis/async.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BACKOFF_MIN_MS     50
#define REDISC_ARGV_MAX    32 /* words of a command written on the stack; longer: resp_format */
#define BACKOFF_MAX_MS     2000
#define SENTINEL_CHECK_MS  1000 /* how often a connected worker asks where the master is */
#define SUB_BUCKETS        64   /* a subscriber's channels, by hash of the name */
#define INVALIDATE_CHANNEL "__redis__:invalidate" /* where Redis sends tracking messages */

struct redisc_cmd {
    redisc_t *r;
    redisc_cb *cb; /* NULL once cancelled */
    void *arg;
    int64_t deadline_ms;
    int64_t sent_us;
    int late; /* past its deadline: told NULL already, its reply will be dropped */
    redisc_cmd_t *prev, *next;
};

/* One subscription; owned by its redisc from redisc_subscribe until redisc_unsubscribe. */
struct redisc_sub {
    redisc_t *r;
    redisc_message_cb *cb;
    void *arg;
    unsigned bucket;
    unsigned seen; /* the dispatch that last called it */
    redisc_sub_t *prev, *next;
    size_t len;
    char channel[];
};

/* DOWN -> CONNECTING (sentinels asked, TCP connect) -> SETUP (AUTH, SELECT, PING answered
 * before anybody else may send) -> UP. */
typedef enum { RC_DOWN, RC_CONNECTING, RC_SETUP, RC_UP } redisc_state_t;

/* Owned by the worker that created it; redisc_free() releases everything. */
struct redisc {
    struct event_base *base;
    redisc_config_t cfg;
    redisAsyncContext *ac; /* NULL while down */
    redisc_state_t state;
    struct event *timer; /* connect timeout, then the next deadline (on_deadline) */
    struct event *flush; /* the end of a loop pass that queued commands (on_flush) */
    struct event *retry; /* reconnect after backoff */
    int backoff_ms;
    /* In flight, oldest first; n counts them all, the late ones too (max_in_flight bounds
     * what a slow server makes us keep). live: the first one not late (the late ones are
     * always the oldest: every command gets the same timeout), NULL when none is. */
    redisc_cmd_t *head, *tail, *live;
    size_t n;
    int64_t heard_ms;    /* the last reply, or when a command was sent with none in flight */
    redisc_cmd_t *spare; /* free list, so that a command costs no malloc */
    redisc_state_cb *state_cb;
    void *state_arg;
    redisc_observe_cb *observe;
    void *observe_arg;
    /* Sentinel */
    sentinel_query_t *query; /* a question to the sentinels in flight */
    struct evdns_base *dns;  /* looks sentinel and master names up on base; NULL: none */
    struct event *check;     /* the periodic "is the master still there?" */
    int next_sentinel;
    char master_host[64]; /* the master currently used */
    int master_port;
    char why[256];           /* the last failure reported, so that a loop reports it once */
    char addr[128];          /* host:port or socket path of the last connect, for messages */
    int addr_at, addr_first; /* cfg.addrs: the one tried, and the one each round starts with */
    char failed[256];        /* the addresses that failed in this round, and why */
    redistls_t *relay;       /* TLS under ac (rediss://), NULL: none */
    int tls_wait;            /* ac is "connected" but the relay's handshake is not done */
    redisc_next_cb *next_cb; /* where to reconnect; NULL: cfg's host and port again */
    void *next_arg;
    /* a subscriber (redisc_new_subscriber) only */
    char *anchor;                                             /* NULL: not a subscriber */
    redisc_sub_t *subs[SUB_BUCKETS], *subs_last[SUB_BUCKETS]; /* oldest first */
    unsigned dispatches;
    /* client-side caching (redisc_track): on the command connection */
    redisc_t *trk_sub; /* where its invalidations arrive; NULL: not tracking */
    char **trk_prefixes;
    int trk_n;
    redisc_tracking_cb *trk_cb;
    redisc_invalidate_cb *trk_invalidate;
    void *trk_arg;
    int trk_on;      /* Redis confirmed tracking towards the current subscriber */
    int trk_pending; /* CLIENT TRACKING on ... in flight */
    int trk_stale;   /* a connection of the pair went since the last one was sent */
    /* ... and on its subscriber */
    redisc_t *trk_owner; /* the command connection it listens for; NULL: none */
    long long client_id; /* CLIENT ID of the current connection; -1: not known yet */
    int trk_listening;   /* subscribed to INVALIDATE_CHANNEL on the current connection */
};

static void event_add_ms(struct event *ev, int64_t ms)
{
    struct timeval tv = clock_ms_timeval(ms);

    event_add(ev, &tv);
}

/* Reports going up, and each different reason for being down once: a server that keeps
 * refusing us (wrong password, protected mode) does not flood the log at every retry. */
static void tell(redisc_t *r, int up, const char *why)
{
    if (!up && strcmp(why, r->why) == 0)
        return;
    snprintf(r->why, sizeof(r->why), "%s", up ? "" : why);
    if (r->state_cb != NULL)
        r->state_cb(r->state_arg, up, why);
}

static void unlink_cmd(redisc_t *r, redisc_cmd_t *c)
{
    if (r->live == c)
        r->live = c->next;
    DLIST_UNLINK(r->head, r->tail, c);
    r->n--;
    c->next = r->spare;
    r->spare = c;
}

static void trk_lost(redisc_t *r);

static void schedule_reconnect(redisc_t *r)
{
    if (!event_pending(r->retry, EV_TIMEOUT, NULL))
        event_add_ms(r->retry, r->backoff_ms);
    r->backoff_ms = r->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : r->backoff_ms * 2;
}

/* The connect to r->addr failed (why names it and says why): 1 when another address of the
 * URL's name is to be tried now (the failure is kept for the round's message), 0 when the
 * round is over: all of them failed, and why says so for each (the next round starts with the
 * address that last worked, the first one until then). */
static int next_address(redisc_t *r, char *why, size_t size)
{
    size_t len = strlen(r->failed);

    if (r->cfg.n_addrs < 2 || r->cfg.n_sentinels > 0 || r->next_cb != NULL ||
        r->cfg.unix_path[0] != '\0')
        return 0;
    r->addr_at = (r->addr_at + 1) % r->cfg.n_addrs;
    if (r->addr_at != r->addr_first) {
        snprintf(r->failed + len, sizeof(r->failed) - len, "%s%.120s", len ? "; " : "", why);
        return 1;
    }
    if (len > 0) { /* every address: the earlier ones' reasons before the last one's */
        char last[160];
        snprintf(last, sizeof(last), "%.150s", why);
        snprintf(why, size, "%.120s; %.120s", r->failed, last);
    }
    r->failed[0] = '\0';
    return 0;
}

/* A connection that could not be made is told like one lost (each new reason once), so that
 * a Redis unreachable from the start is said, not only retried in silence; with another
 * address of the URL's name left, that one is tried first. */
static void connect_failed(redisc_t *r, const char *errstr)
{
    char why[256]; /* fits r->why, so that the same reason is told once */

    snprintf(why, sizeof(why), "cannot connect to %.90s: %.48s", r->addr, errstr);
    if (next_address(r, why, sizeof(why))) {
        event_add_ms(r->retry, 0);
        return;
    }
    tell(r, 0, why);
    schedule_reconnect(r);
}

/* The connection is gone: stop its timers and questions, say so, and retry after the backoff.
 * ac is the context to free (every pending callback gets NULL), or NULL when hiredis frees it
 * itself (a disconnect). Never called with ac from the connect callback (hiredis 0.14 frees the
 * context itself after a failed connect). */
static void go_down(redisc_t *r, redisAsyncContext *ac, const char *why)
{
    int elsewhere_now = r->next_cb != NULL && r->state == RC_UP;
    int connecting = r->state == RC_CONNECTING || r->tls_wait;

    r->ac = NULL;
    r->state = RC_DOWN;
    event_del(r->timer);
    event_del(r->check);
    sentinel_cancel(r->query);
    r->query = NULL;
    if (ac != NULL) {
        ac->data = NULL; /* on_redis_disconnect ignores a context we dropped */
        redisAsyncFree(ac);
    }
    redistls_free(r->relay); /* after the context: hiredis may still write to it while freed */
    r->relay = NULL;
    r->tls_wait = 0;
    trk_lost(r);
    if (connecting) { /* a connect timed out, or its TLS handshake failed */
        char told[256];
        if (strncmp(why, "cannot connect to ", 18) == 0) /* a TLS handshake's (on_tls) */
            snprintf(told, sizeof(told), "%s", why);
        else
            snprintf(told, sizeof(told), "cannot connect to %.90s: %.140s", r->addr, why);
        if (next_address(r, told, sizeof(told))) {
            event_add_ms(r->retry, 0);
            return;
        }
        tell(r, 0, told);
        schedule_reconnect(r);
        return;
    }
    tell(r, 0, why);
    if (elsewhere_now) /* another node, without the pause (backoff is at its least: up) */
        event_add_ms(r->retry, 0);
    else
        schedule_reconnect(r);
}

/* Gives up the current connection: every pending callback gets NULL. */
static void drop(redisc_t *r, const char *why)
{
    go_down(r, r->ac, why);
}

static void cmd_on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    redisc_cmd_t *c = privdata;
    redisc_t *r = c->r;
    redisc_cb *cb = c->cb;
    void *arg = c->arg;

    (void)ac;
    if (reply != NULL)
        r->heard_ms = clock_coarse_ms();
    if (r->observe != NULL && !c->late) /* a late one was counted when it timed out */
        r->observe(r->observe_arg,
                   reply != NULL && ((redisReply *)reply)->type != REDIS_REPLY_ERROR,
                   clock_mono_us() - c->sent_us);
    unlink_cmd(r, c);
    if (cb != NULL)
        cb(reply, arg);
    /* After a failover the old master comes back as a replica: writes answer READONLY. */
    if (reply != NULL && ((redisReply *)reply)->type == REDIS_REPLY_ERROR &&
        strncmp(((redisReply *)reply)->str, "READONLY", 8) == 0 && r->ac == ac)
        drop(r, "the server became a replica");
}

/* The timer at the next moment on_deadline may have something to do: the first command's
 * deadline that has not passed, or a whole timeout after the connection last heard. */
static void arm(redisc_t *r, int64_t now)
{
    int64_t at = r->heard_ms + r->cfg.command_timeout_ms;

    if (r->live != NULL && r->live->deadline_ms < at)
        at = r->live->deadline_ms;
    event_add_ms(r->timer, at - now);
}

/* The commands at the head past their deadline: each is told NULL now (its request answers
 * as on a lost connection) and stays in flight until its reply comes, dropped then, or the
 * connection goes; it is never told again. 0, or -1 when a callback gave up the connection. */
static int time_out_late(redisc_t *r, int64_t now)
{
    redisAsyncContext *ac = r->ac;
    redisc_cmd_t *c;

    while ((c = r->live) != NULL && c->deadline_ms <= now) {
        redisc_cb *cb = c->cb;
        r->live = c->next;
        c->late = 1;
        c->cb = NULL;
        if (r->observe != NULL)
            r->observe(r->observe_arg, 0, clock_mono_us() - c->sent_us);
        if (cb != NULL)
            cb(NULL, c->arg);
        if (r->ac != ac)
            return -1;
    }
    return 0;
}

/* A command's deadline or the silence's. Nothing heard for a whole timeout while commands
 * wait (none heard since the oldest was sent, or since the last reply): the server is stuck,
 * the connection is given up. Else only the commands past their own deadline time out: a
 * server that answers late (loaded, or a slow command of someone else's) keeps the
 * connection, and the thousands of commands in flight behind them that come in time. Before
 * the connection is up, its setup commands give it up as before. */
static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    redisc_t *r = arg;
    int64_t now = clock_coarse_ms();

    (void)fd;
    (void)what;
    if (r->state == RC_CONNECTING || r->tls_wait) {
        drop(r, r->tls_wait ? "connect timed out (TCP or TLS handshake)" : "connect timed out");
        return;
    }
    if (r->head == NULL)
        return;
    if (now - r->heard_ms >= r->cfg.command_timeout_ms ||
        (r->state != RC_UP && r->head->deadline_ms <= now)) {
        drop(r, "command timed out");
        return;
    }
    if (time_out_late(r, now) == 0 && r->head != NULL)
        arm(r, now);
}

/* The commands queued in this loop pass are written at its end, rather than when epoll_wait
 * reports the socket writable: hiredis's write event (not persistent) was added in this pass
 * and its delete after the write folds it into nothing in the base's changelist. Per batch,
 * two epoll_ctl (EPOLLOUT on, then off) and a turn of the loop less (bench a-tls: the
 * Redis socket's were every epoll_ctl botgate made). A socket that takes only part of the
 * batch keeps the event for the rest, as before. */
static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    redisc_t *r = arg;

    (void)fd;
    (void)what;
    if (r->ac != NULL && (r->ac->c.flags & REDIS_CONNECTED))
        redisAsyncHandleWrite(r->ac); /* on a failure, hiredis disconnects as from its event */
}

static void flush_soon(redisc_t *r)
{
    event_active(r->flush, EV_TIMEOUT, 0); /* already active: nothing more */
}

static void watch_head(redisc_t *r, int64_t now)
{
    if (r->head != NULL && !event_pending(r->timer, EV_TIMEOUT, NULL))
        arm(r, now);
}

/* argv in its wire form, written by resp.c rather than by hiredis's formatter (sds and a printf
 * of its own: about 2,000 instructions for a GET); a small command on the stack. */
static int send_argv(redisc_t *r, redisc_cmd_t *c, int argc, const char **argv,
                     const size_t *argvlen)
{
    size_t lens[REDISC_ARGV_MAX], size, len;
    char stack[512], *cmd = stack;
    int rc;

    if (argc > REDISC_ARGV_MAX) {
        if ((cmd = resp_format(argc, argv, argvlen, &len)) == NULL)
            return REDIS_ERR;
    } else {
        for (int i = 0; i < argc; i++)
            lens[i] = argvlen != NULL ? argvlen[i] : strlen(argv[i]);
        size = resp_command_size(argc, lens);
        if (size > sizeof(stack) && (cmd = malloc(size)) == NULL)
            return REDIS_ERR;
        len = resp_command(cmd, argc, argv, lens);
    }
    rc = redisAsyncFormattedCommand(r->ac, cmd_on_reply, c, cmd, len);
    if (cmd != stack)
        free(cmd);
    return rc;
}

/* Sends argv, or when argc is -1 the command hiredis formatted already in argv[0] (its length
 * in argvlen[0]). */
static int send_cmd(redisc_t *r, redisc_cb *cb, void *arg, int argc, const char **argv,
                    const size_t *argvlen, redisc_cmd_t **out)
{
    redisc_cmd_t *c = r->spare;
    int64_t now = clock_coarse_ms();
    int rc;

    if (c != NULL)
        r->spare = c->next;
    else if ((c = malloc(sizeof(*c))) == NULL)
        return REDISC_BUSY;
    c->r = r;
    c->cb = cb;
    c->arg = arg;
    c->late = 0;
    c->sent_us = r->observe != NULL ? clock_mono_us() : 0;
    c->deadline_ms = now + r->cfg.command_timeout_ms;
    if (argc < 0)
        rc = redisAsyncFormattedCommand(r->ac, cmd_on_reply, c, argv[0], argvlen[0]);
    else
        rc = send_argv(r, c, argc, argv, argvlen);
    if (rc != REDIS_OK) {
        c->next = r->spare;
        r->spare = c;
        return REDISC_DOWN;
    }
    if (r->n == 0) /* the silence counts from now: nothing was awaited before */
        r->heard_ms = now;
    DLIST_APPEND(r->head, r->tail, c);
    if (r->live == NULL)
        r->live = c;
    r->n++;
    watch_head(r, now);
    flush_soon(r);
    if (out != NULL)
        *out = c;
    return REDISC_OK;
}

/* ---- subscriber ---- */

static unsigned sub_bucket(const char *name, size_t len)
{
    return hash_fnv1a(name, len) % SUB_BUCKETS;
}

/* The first subscription to the channel name, or NULL. */
static redisc_sub_t *sub_find(redisc_t *r, const char *name, size_t len)
{
    redisc_sub_t *s;

    for (s = r->subs[sub_bucket(name, len)]; s != NULL; s = s->next)
        if (s->len == len && memcmp(s->channel, name, len) == 0)
            return s;
    return NULL;
}

static void on_message(redisAsyncContext *ac, void *reply, void *privdata);
static void on_setup_reply(redisReply *reply, void *arg);

static void sub_send(redisc_t *r, const char *verb, const char *name, size_t len)
{
    const char *argv[] = {verb, name};
    size_t argvlen[] = {strlen(verb), len};

    /* A failure means the connection is going: the reconnect subscribes again. */
    redisAsyncCommandArgv(r->ac, on_message, r, 2, argv, argvlen);
    flush_soon(r);
}

static void subscribe_all(redisc_t *r)
{
    sub_send(r, "SUBSCRIBE", r->anchor, strlen(r->anchor));
    if (r->trk_owner != NULL)
        sub_send(r, "SUBSCRIBE", INVALIDATE_CHANNEL, sizeof(INVALIDATE_CHANNEL) - 1);
    for (unsigned b = 0; b < SUB_BUCKETS; b++)
        for (redisc_sub_t *s = r->subs[b]; s != NULL; s = s->next)
            if (sub_find(r, s->channel, s->len) == s)
                sub_send(r, "SUBSCRIBE", s->channel, s->len);
}

/* Calls every subscription of the channel once, whatever the callbacks subscribe or
 * unsubscribe meanwhile (each call starts again from the bucket's head). */
static void sub_dispatch(redisc_t *r, const char *name, size_t len, const char *msg, size_t msg_len)
{
    unsigned epoch = ++r->dispatches;
    redisc_sub_t *s;

    do {
        for (s = r->subs[sub_bucket(name, len)]; s != NULL; s = s->next)
            if (s->seen != epoch && s->len == len && memcmp(s->channel, name, len) == 0)
                break;
        if (s != NULL) {
            s->seen = epoch;
            s->cb(s->arg, msg, msg_len);
        }
    } while (s != NULL);
}

/* ---- client-side caching ---- */

static void on_tracking_off(redisReply *reply, void *arg)
{
    (void)reply;
    (void)arg; /* an error only means it was off already */
}

static void trk_start(redisc_t *r);

static void on_tracking(redisReply *reply, void *arg)
{
    redisc_t *r = arg;

    r->trk_pending--;
    if (reply == NULL && r->state == RC_UP && r->trk_pending == 0) {
        trk_start(r); /* the last one sent timed out on a slow server that kept the
                       * connection: again, or the cache would stay off until a reconnect */
        return;
    }
    if (reply == NULL || reply->type == REDIS_REPLY_ERROR)
        return; /* refused (a server before Redis 6, or the subscriber went meanwhile): the
                 * cache stays off until the next reconnect of either connection tries again */
    if (r->trk_pending > 0 || r->trk_stale || r->trk_on)
        return; /* only the last one sent, with both connections still the same, counts */
    r->trk_on = 1;
    if (r->trk_cb != NULL)
        r->trk_cb(r->trk_arg, 1);
}

/* Enables tracking on r towards its subscriber once both are up, the subscriber's CLIENT ID
 * known and its subscription to the invalidations confirmed (Redis only sends them to a
 * subscribed client). Off first: the connection may still track towards a subscriber
 * connection that is gone, and Redis refuses to add a prefix twice. */
static void trk_start(redisc_t *r)
{
    redisc_t *sub = r->trk_sub;
    const char *argv[8 + 2 * 8];
    char id[32];
    int argc = 0;

    if (r->state != RC_UP || sub->state != RC_UP || !sub->trk_listening || sub->client_id < 0)
        return;
    snprintf(id, sizeof(id), "%lld", sub->client_id);
    argv[0] = "CLIENT";
    argv[1] = "TRACKING";
    argv[2] = "off";
    send_cmd(r, on_tracking_off, r, 3, argv, NULL, NULL);
    argv[argc++] = "CLIENT";
    argv[argc++] = "TRACKING";
    argv[argc++] = "on";
    argv[argc++] = "REDIRECT";
    argv[argc++] = id;
    argv[argc++] = "BCAST";
    for (int i = 0; i < r->trk_n; i++) {
        argv[argc++] = "PREFIX";
        argv[argc++] = r->trk_prefixes[i];
    }
    argv[argc++] = "NOLOOP"; /* our own writes: the cache is refreshed with what was written */
    r->trk_stale = 0;
    if (send_cmd(r, on_tracking, r, argc, argv, NULL, NULL) == REDISC_OK)
        r->trk_pending++;
}

/* r (either connection of a pair) went: what Redis tells from now on may not reach us. */
static void trk_lost(redisc_t *r)
{
    redisc_t *owner = r->trk_owner != NULL ? r->trk_owner : r;

    if (r->trk_owner != NULL) {
        r->client_id = -1;
        r->trk_listening = 0;
    }
    if (owner->trk_sub == NULL)
        return;
    owner->trk_stale = 1;
    if (owner->trk_on) {
        owner->trk_on = 0;
        if (owner->trk_cb != NULL)
            owner->trk_cb(owner->trk_arg, 0);
    }
}

/* A tracking message: the payload is the array of changed keys, or nil after a flush. */
static void trk_message(redisc_t *r, const redisReply *payload)
{
    redisc_t *owner = r->trk_owner;

    if (owner->trk_invalidate == NULL)
        return;
    if (payload->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < payload->elements; i++)
            if (payload->element[i]->type == REDIS_REPLY_STRING)
                owner->trk_invalidate(owner->trk_arg, payload->element[i]->str,
                                      payload->element[i]->len);
    } else {
        owner->trk_invalidate(owner->trk_arg, NULL, 0);
    }
}

static int is_invalidate_channel(const redisc_t *r, const redisReply *name)
{
    return r->trk_owner != NULL && name->len == sizeof(INVALIDATE_CHANNEL) - 1 &&
           memcmp(name->str, INVALIDATE_CHANNEL, name->len) == 0;
}

static void on_client_id(redisReply *reply, void *arg)
{
    redisc_t *r = arg;

    if (reply != NULL && reply->type == REDIS_REPLY_INTEGER && r->state == RC_SETUP)
        r->client_id = reply->integer;
    on_setup_reply(reply, arg);
}

int redisc_track(redisc_t *r, redisc_t *sub, const char *const *prefixes, int n_prefixes,
                 redisc_tracking_cb *tracking, redisc_invalidate_cb *invalidate, void *arg)
{
    if (sub->anchor == NULL || r->trk_sub != NULL || n_prefixes < 1 || n_prefixes > 8 ||
        (r->trk_prefixes = calloc((size_t)n_prefixes, sizeof(char *))) == NULL)
        return -1;
    for (int i = 0; i < n_prefixes; i++)
        if ((r->trk_prefixes[r->trk_n++] = strdup(prefixes[i])) == NULL)
            return -1;
    r->trk_sub = sub;
    r->trk_cb = tracking;
    r->trk_invalidate = invalidate;
    r->trk_arg = arg;
    sub->trk_owner = r;
    sub->client_id = -1;
    /* a subscriber already past its connect has not asked for its CLIENT ID: again */
    if (sub->state == RC_SETUP || sub->state == RC_UP)
        drop(sub, "enabling client-side caching");
    trk_start(r);
    return 0;
}

/* Every reply on a subscriber after its setup: ["subscribe"|"message"|"unsubscribe", channel,
 * count or payload]. */
static void on_message(redisAsyncContext *ac, void *reply, void *privdata)
{
    redisc_t *r = privdata;
    redisReply *m = reply;
    const redisReply *kind, *name;

    if (m == NULL || r->ac != ac || m->type != REDIS_REPLY_ARRAY || m->elements < 3)
        return; /* the connection went (it subscribes again when back) */
    kind = m->element[0];
    name = m->element[1];
    if (kind->type != REDIS_REPLY_STRING || name->type != REDIS_REPLY_STRING)
        return;
    if (is_invalidate_channel(r, name)) {
        if (strcmp(kind->str, "message") == 0) {
            trk_message(r, m->element[2]);
        } else if (strcmp(kind->str, "subscribe") == 0) {
            r->trk_listening = 1;
            trk_start(r->trk_owner);
        }
        return;
    }
    if (strcmp(kind->str, "message") == 0 && m->element[2]->type == REDIS_REPLY_STRING)
        sub_dispatch(r, name->str, name->len, m->element[2]->str, m->element[2]->len);
    else if (strcmp(kind->str, "subscribe") == 0)
        sub_dispatch(r, name->str, name->len, NULL, 0);
    else if (strcmp(kind->str, "unsubscribe") == 0 && sub_find(r, name->str, name->len))
        /* subscribed again while the UNSUBSCRIBE was on its way: hiredis dropped the channel */
        sub_send(r, "SUBSCRIBE", name->str, name->len);
}

/* AUTH, SELECT and PING answered: only now may requests use the connection. A server that
 * refuses us (wrong password, protected mode, loading) is not "up", so /readyz says so and
 * the reconnect backoff keeps growing. */
static void on_setup_reply(redisReply *reply, void *arg)
{
    redisc_t *r = arg;
    char why[160];

    if (r->state != RC_SETUP)
        return; /* the connection was given up already: this is its pending PING */
    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        snprintf(why, sizeof(why), "refused at connect: %.120s",
                 reply ? reply->str : "connection lost");
        drop(r, why);
        return;
    }
    if (r->n > 0)
        return; /* the last setup reply (PING) decides */
    r->state = RC_UP;
    r->backoff_ms = BACKOFF_MIN_MS;
    if (r->cfg.n_sentinels > 0)
        event_add_ms(r->check, SENTINEL_CHECK_MS);
    if (r->anchor != NULL)
        subscribe_all(r);
    if (r->trk_sub != NULL)
        trk_start(r);
    if (r->failed[0] != '\0') { /* which addresses failed before this one, and why */
        char why[256 + 128];
        snprintf(why, sizeof(why), "connected to %.100s (%.250s)", r->addr, r->failed);
        r->failed[0] = '\0';
        tell(r, 1, why);
    } else {
        tell(r, 1, "connected");
    }
    r->addr_first = r->addr_at; /* a reconnect starts with the address that worked */
}

static void on_redis_connect(const redisAsyncContext *ac, int status)
{
    redisc_t *r = ac->data;

    if (r == NULL)
        return;
    if (!r->tls_wait || status != REDIS_OK) /* with TLS, the timer also bounds the handshake */
        event_del(r->timer);
    if (status != REDIS_OK) {
        /* hiredis frees the context after this callback: only forget it. */
        r->ac = NULL;
        r->state = RC_DOWN;
        redistls_free(r->relay);
        r->relay = NULL;
        r->tls_wait = 0;
        connect_failed(r, ac->errstr);
        return;
    }
    r->state = RC_SETUP;
    if (r->cfg.password[0] != '\0') {
        /* AUTH user password (an ACL user), or AUTH password (the default user) */
        const char *argv[] = {"AUTH", r->cfg.user, r->cfg.password};
        int with_user = r->cfg.user[0] != '\0';
        argv[1] = with_user ? r->cfg.user : r->cfg.password;
        send_cmd(r, on_setup_reply, r, 2 + with_user, argv, NULL, NULL);
    }
    if (r->cfg.db != 0) {
        char db[16];
        const char *argv[] = {"SELECT", db};
        snprintf(db, sizeof(db), "%d", r->cfg.db);
        send_cmd(r, on_setup_reply, r, 2, argv, NULL, NULL);
    }
    if (r->trk_owner != NULL) { /* before SUBSCRIBE: a subscribed connection takes no CLIENT */
        const char *argv[] = {"CLIENT", "ID"};
        send_cmd(r, on_client_id, r, 2, argv, NULL, NULL);
    }
    {
        const char *argv[] = {"PING"};
        send_cmd(r, on_setup_reply, r, 1, argv, NULL, NULL);
    }
}

static void on_redis_disconnect(const redisAsyncContext *ac, int status)
{
    redisc_t *r = ac->data;

    (void)status;
    if (r == NULL)
        return;
    go_down(r, NULL, "connection lost");
}

/* hiredis's events on the loop: hiredis 0.14's libevent adapter (hiredis/adapters/libevent.h)
 * but for the read event, persistent here. hiredis asks for the read again after every read:
 * the adapter's one-shot event, gone when it fired, came back as an EPOLL_CTL_MOD in every loop
 * pass that read a reply; a persistent event asked for again is left as it is. The write
 * event stays one-shot: it is wanted only while a batch waits for room (see on_flush). */
typedef struct {
    redisAsyncContext *ac;
    struct event *rev, *wev;
} rc_events_t;

static void rc_on_read(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    redisAsyncHandleRead(((rc_events_t *)arg)->ac);
}

static void rc_on_write(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    redisAsyncHandleWrite(((rc_events_t *)arg)->ac);
}

static void rc_add_read(void *arg)
{
    event_add(((rc_events_t *)arg)->rev, NULL); /* already pending: nothing changes */
}

static void rc_del_read(void *arg)
{
    event_del(((rc_events_t *)arg)->rev);
}

static void rc_add_write(void *arg)
{
    event_add(((rc_events_t *)arg)->wev, NULL);
}

static void rc_del_write(void *arg)
{
    event_del(((rc_events_t *)arg)->wev);
}

static void rc_cleanup(void *arg)
{
    rc_events_t *e = arg;

    event_free(e->rev);
    event_free(e->wev);
    free(e);
}

static int rc_attach(redisAsyncContext *ac, struct event_base *base)
{
    rc_events_t *e;

    if (ac->ev.data != NULL || (e = calloc(1, sizeof(*e))) == NULL)
        return REDIS_ERR;
    e->ac = ac;
    e->rev = event_new(base, ac->c.fd, EV_READ | EV_PERSIST, rc_on_read, e);
    e->wev = event_new(base, ac->c.fd, EV_WRITE, rc_on_write, e);
    if (e->rev == NULL || e->wev == NULL) {
        if (e->rev != NULL)
            event_free(e->rev);
        if (e->wev != NULL)
            event_free(e->wev);
        free(e);
        return REDIS_ERR;
    }
    ac->ev.addRead = rc_add_read;
    ac->ev.delRead = rc_del_read;
    ac->ev.addWrite = rc_add_write;
    ac->ev.delWrite = rc_del_write;
    ac->ev.cleanup = rc_cleanup;
    ac->ev.data = e;
    /* as the adapter: the write event tells when the connect is done */
    event_add(e->rev, NULL);
    event_add(e->wev, NULL);
    return REDIS_OK;
}

/* A subscriber's messages are read before anything else the loop has ready (the worker's
 * base has 3 priorities, everything else at the default 1): an invalidation already in the
 * socket is applied before a request that arrived in the same loop turn reads the cache.
 * Just attached, neither event is active yet, as event_priority_set requires. On a base
 * without priorities 0 is the only one, and nothing changes. */
static int sub_prioritise(redisAsyncContext *ac)
{
    rc_events_t *e = ac->ev.data;

    return event_priority_set(e->rev, 0);
}

/* The relay's handshake is done (the setup commands hiredis sent meanwhile go now, and their
 * time starts now), or the TCP connect or the handshake failed. */
static void on_tls(void *arg, int up, const char *why)
{
    redisc_t *r = arg;
    char msg[256];
    int64_t now = clock_coarse_ms();

    if (!up) {
        snprintf(msg, sizeof(msg), "cannot connect to %.90s: %.140s", r->addr, why);
        drop(r, msg);
        return;
    }
    r->tls_wait = 0;
    event_del(r->timer);
    for (redisc_cmd_t *c = r->head; c != NULL; c = c->next)
        c->deadline_ms = now + r->cfg.command_timeout_ms;
    r->heard_ms = now;
    watch_head(r, now);
}

/* rediss://: TLS under ac before it is attached (see redistls.h). */
static int tls_wrap(redisc_t *r, redisAsyncContext *ac, const char *host)
{
    char err[160];

    r->relay = redistls_wrap(ac, r->base, r->cfg.tls_ctx,
                             r->cfg.tls_name[0] != '\0' ? r->cfg.tls_name : host, on_tls, r, err,
                             sizeof(err));
    if (r->relay == NULL) {
        connect_failed(r, err);
        return -1;
    }
    r->tls_wait = 1;
    return 0;
}

static void connect_to(redisc_t *r, const char *host, int port)
{
    redisAsyncContext *ac;

    if (host == NULL) {
        snprintf(r->addr, sizeof(r->addr), "%.120s", r->cfg.unix_path);
        ac = redisAsyncConnectUnix(r->cfg.unix_path);
    } else {
        snprintf(r->addr, sizeof(r->addr), "%.100s:%d", host, port);
        ac = redisAsyncConnect(host, port);
    }
    if (ac == NULL || ac->err) {
        char why[160];
        snprintf(why, sizeof(why), "%s", ac != NULL ? ac->errstr : "out of memory");
        if (ac != NULL)
            redisAsyncFree(ac);
        r->state = RC_DOWN;
        connect_failed(r, why);
        return;
    }
    if (host != NULL && r->cfg.tls_ctx != NULL && tls_wrap(r, ac, host) < 0) {
        redisAsyncFree(ac);
        r->state = RC_DOWN;
        return;
    }
    ac->data = r;
    if (rc_attach(ac, r->base) != REDIS_OK || (r->anchor != NULL && sub_prioritise(ac) != 0) ||
        redisAsyncSetConnectCallback(ac, on_redis_connect) != REDIS_OK ||
        redisAsyncSetDisconnectCallback(ac, on_redis_disconnect) != REDIS_OK) {
        redisAsyncFree(ac);
        redistls_free(r->relay);
        r->relay = NULL;
        r->tls_wait = 0;
        r->state = RC_DOWN;
        schedule_reconnect(r);
        return;
    }
    r->ac = ac;
    r->state = RC_CONNECTING;
    event_add_ms(r->timer, r->cfg.connect_timeout_ms);
}

static void on_master(void *arg, int ok, const char *host, int port)
{
    redisc_t *r = arg;

    r->query = NULL;
    if (!ok) {
        r->state = RC_DOWN;
        schedule_reconnect(r);
        return;
    }
    snprintf(r->master_host, sizeof(r->master_host), "%s", host);
    r->master_port = port;
    connect_to(r, r->master_host, r->master_port);
}

static void connect_now(redisc_t *r)
{
    if (r->cfg.n_sentinels > 0) {
        r->state = RC_CONNECTING;
        r->query = sentinel_ask(r->base, r->dns, r->cfg.tls_ctx, r->cfg.sentinels,
                                r->cfg.n_sentinels, &r->next_sentinel, r->cfg.master_name,
                                r->cfg.connect_timeout_ms, on_master, r);
        if (r->query == NULL) {
            r->state = RC_DOWN;
            schedule_reconnect(r);
        }
        return;
    }
    if (r->cfg.unix_path[0] != '\0')
        connect_to(r, NULL, 0);
    else if (r->cfg.n_addrs > 1 && r->next_cb == NULL)
        connect_to(r, r->cfg.addrs[r->addr_at], r->cfg.port);
    else
        connect_to(r, r->cfg.host, r->cfg.port);
}

/* The sentinels' answer to the periodic check: a failover moved the master elsewhere. */
static void on_master_checked(void *arg, int ok, const char *host, int port)
{
    redisc_t *r = arg;

    r->query = NULL;
    if (r->state != RC_UP)
        return;
    if (ok && (strcmp(host, r->master_host) != 0 || port != r->master_port)) {
        drop(r, "the sentinels moved the master");
        return;
    }
    event_add_ms(r->check, SENTINEL_CHECK_MS);
}

static void on_check(evutil_socket_t fd, short what, void *arg)
{
    redisc_t *r = arg;

    (void)fd;
    (void)what;
    if (r->state != RC_UP || r->query != NULL)
        return;
    r->query = sentinel_ask(r->base, r->dns, r->cfg.tls_ctx, r->cfg.sentinels, r->cfg.n_sentinels,
                            &r->next_sentinel, r->cfg.master_name, r->cfg.connect_timeout_ms,
                            on_master_checked, r);
    if (r->query == NULL)
        event_add_ms(r->check, SENTINEL_CHECK_MS);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    redisc_t *r = arg;

    (void)fd;
    (void)what;
    if (r->next_cb != NULL)
        r->next_cb(r->next_arg, r->cfg.host, sizeof(r->cfg.host), &r->cfg.port);
    connect_now(r);
}

redisc_t *redisc_new(struct event_base *base, const redisc_config_t *cfg)
{
    redisc_t *r = calloc(1, sizeof(*r));

    if (r == NULL)
        return NULL;
    r->base = base;
    r->cfg = *cfg;
    r->backoff_ms = BACKOFF_MIN_MS;
    r->timer = evtimer_new(base, on_deadline, r);
    r->retry = evtimer_new(base, on_retry, r);
    r->check = evtimer_new(base, on_check, r);
    r->flush = event_new(base, -1, 0, on_flush, r);
    if (r->timer == NULL || r->retry == NULL || r->check == NULL || r->flush == NULL) {
        redisc_free(r);
        return NULL;
    }
    /* Before the loop runs (resolv.conf and the hosts file are read here, once); without it
     * the sentinels' addresses of start-up are used. */
    if (cfg->n_sentinels > 0)
        r->dns = evdns_base_new(base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
                                          EVDNS_BASE_DISABLE_WHEN_INACTIVE);
    connect_now(r);
    return r;
}

redisc_t *redisc_new_subscriber(struct event_base *base, const redisc_config_t *cfg,
                                const char *anchor)
{
    redisc_t *r = redisc_new(base, cfg);

    if (r != NULL && (r->anchor = strdup(anchor)) == NULL) {
        redisc_free(r);
        return NULL;
    }
    return r;
}

redisc_sub_t *redisc_subscribe(redisc_t *r, const char *channel, redisc_message_cb *cb, void *arg)
{
    size_t len = strlen(channel);
    redisc_sub_t *s = malloc(sizeof(*s) + len + 1);
    int first = sub_find(r, channel, len) == NULL;

    if (s == NULL || r->anchor == NULL) {
        free(s);
        return NULL;
    }
    s->r = r;
    s->cb = cb;
    s->arg = arg;
    s->seen = r->dispatches;
    s->len = len;
    memcpy(s->channel, channel, len + 1);
    s->bucket = sub_bucket(channel, len);
    DLIST_APPEND(r->subs[s->bucket], r->subs_last[s->bucket], s);
    if (first && r->state == RC_UP)
        sub_send(r, "SUBSCRIBE", channel, len);
    return s;
}

void redisc_unsubscribe(redisc_sub_t *s)
{
    redisc_t *r;

    if (s == NULL)
        return;
    r = s->r;
    DLIST_UNLINK(r->subs[s->bucket], r->subs_last[s->bucket], s);
    if (r->state == RC_UP && sub_find(r, s->channel, s->len) == NULL)
        sub_send(r, "UNSUBSCRIBE", s->channel, s->len);
    free(s);
}

void redisc_free(redisc_t *r)
{
    redisc_cmd_t *c;

    if (r == NULL)
        return;
    if (r->ac != NULL) {
        redisAsyncContext *ac = r->ac;
        r->ac = NULL;
        r->state = RC_DOWN;
        ac->data = NULL;
        redisAsyncFree(ac);
    }
    redistls_free(r->relay);
    sentinel_cancel(r->query);
    if (r->dns)
        evdns_base_free(r->dns, 0);
    if (r->timer)
        event_free(r->timer);
    if (r->retry)
        event_free(r->retry);
    if (r->check)
        event_free(r->check);
    if (r->flush)
        event_free(r->flush);
    while ((c = r->spare) != NULL) {
        r->spare = c->next;
        free(c);
    }
    for (unsigned b = 0; b < SUB_BUCKETS; b++)
        while (r->subs[b] != NULL) {
            redisc_sub_t *s = r->subs[b];
            r->subs[b] = s->next;
            free(s);
        }
    free(r->anchor);
    for (int i = 0; i < r->trk_n; i++)
        free(r->trk_prefixes[i]);
    free(r->trk_prefixes);
    if (r->trk_sub != NULL)
        r->trk_sub->trk_owner = NULL;
    if (r->trk_owner != NULL)
        r->trk_owner->trk_sub = NULL;
    free(r);
}

void redisc_set_state_cb(redisc_t *r, redisc_state_cb *cb, void *arg)
{
    r->state_cb = cb;
    r->state_arg = arg;
}

void redisc_set_next(redisc_t *r, redisc_next_cb *cb, void *arg)
{
    r->next_cb = cb;
    r->next_arg = arg;
}

void redisc_set_observer(redisc_t *r, redisc_observe_cb *cb, void *arg)
{
    r->observe = cb;
    r->observe_arg = arg;
}

int redisc_connected(const redisc_t *r)
{
    return r->state == RC_UP;
}

/* Whether a caller's command may go now: REDISC_OK, or why not. */
static int admit(const redisc_t *r)
{
    if (r->state != RC_UP)
        return REDISC_DOWN;
    if (r->n >= (size_t)r->cfg.max_in_flight)
        return REDISC_BUSY;
    return REDISC_OK;
}

int redisc_command(redisc_t *r, redisc_cb *cb, void *arg, int argc, const char **argv,
                   const size_t *argvlen, redisc_cmd_t **out)
{
    int rc = admit(r);

    return rc != REDISC_OK ? rc : send_cmd(r, cb, arg, argc, argv, argvlen, out);
}

int redisc_command_formatted(redisc_t *r, redisc_cb *cb, void *arg, const char *cmd, size_t len,
                             redisc_cmd_t **out)
{
    int rc = admit(r);

    return rc != REDISC_OK ? rc : send_cmd(r, cb, arg, -1, &cmd, &len, out);
}

void redisc_cancel(redisc_cmd_t *cmd)
{
    if (cmd != NULL)
        cmd->cb = NULL;
}
