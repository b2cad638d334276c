/* cluster.c - Redis Cluster over redisc: the slot map read with CLUSTER SLOTS, one redisc per
 * master (and, with client-side caching, one subscriber per master), commands routed by the
 * slot of their key. The map is read again after a MOVED, when a master's connection goes,
 * and every REFRESH_MS while a master is down (that is how a failover is seen): never more
 * often than that, whatever the number of commands redirected. */
#include "cluster.h"
#include "resp.h"

#include "../core/clock.h"

#include <arpa/inet.h>
#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NODES_MAX     64  /* masters known at once */
#define ADDRS_MAX     128 /* where the map may be asked for: seeds, then every node seen */
#define REFRESH_MS    500 /* the least time between two reads of the map */
#define REDIRECTS_MAX 5   /* MOVED or ASK followed for one command */
#define TRYAGAIN_MS   20  /* a script's keys split by a slot migration: sent again after it */
#define TRYAGAIN_MAX  50  /* ... that many times at most (a second) */

/* One master: its command connection, and its subscriber with client-side caching. Owned by
 * the cluster; retired (freed on the next loop turn) when a new map gives it no slot. */
typedef struct cluster_node {
    cluster_t *cl;
    char host[64];
    int port;
    redisc_t *cmd;
    redisc_t *sub; /* NULL without cluster_track */
    int up;        /* cmd is connected */
    int tracking;  /* Redis confirmed tracking on cmd towards sub */
    int slots;     /* slots it serves in the current map */
} cluster_node_t;

/* A command in flight: owned by the cluster until its callback ran (or its reply was dropped
 * after cluster_cancel). The formatted command is kept for a redirection. */
struct cluster_cmd {
    cluster_t *cl;
    redisc_cb *cb; /* NULL once cancelled */
    void *arg;
    int redirects;
    int tries; /* TRYAGAIN answers so far */
    unsigned slot;
    char *buf;
    size_t len;
    cluster_cmd_t *next; /* in the spare list, or in the list waiting to try again */
};

/* Owned by the worker that created it; cluster_free() releases everything. */
struct cluster {
    struct event_base *base;
    redisc_config_t node_cfg;
    cluster_node_t *slots[CLUSTER_SLOTS]; /* NULL: no master known */
    cluster_node_t *nodes[NODES_MAX];
    int n_nodes;
    cluster_node_t *retired[NODES_MAX]; /* freed by gc, outside their own callbacks */
    int n_retired;
    sentinel_addr_t addrs[ADDRS_MAX];
    int n_addrs, next_addr, next_ask;
    int refreshing;          /* a CLUSTER SLOTS in flight, or a probe connecting */
    int64_t last_refresh_ms; /* when the last one started */
    char asked_host[64];     /* the node asked: CLUSTER SLOTS may leave its own host empty */
    redisc_t *probe;         /* a connection to a seed, while no master is up to ask */
    redisc_t *dead_probe;    /* freed by gc */
    struct event *refresh_timer, *probe_timer, *gc_timer, *again_timer;
    cluster_cmd_t *again; /* answered TRYAGAIN: sent again by again_timer */
    size_t in_flight;     /* commands accepted and not answered: at most max_in_flight */
    int mapped;           /* a map has been read */
    int64_t mapped_ms;    /* when the first one was */
    int up;               /* as last told to state_cb */
    int been_up;          /* up at least once since cluster_new */
    unsigned next_sub;    /* where the next subscriber that moves starts looking */
    int closing;
    redisc_state_cb *state_cb;
    void *state_arg;
    redisc_observe_cb *observe;
    void *observe_arg;
    /* client-side caching */
    char *anchor;
    char **trk_prefixes;
    int trk_n;
    redisc_tracking_cb *trk_cb;
    redisc_invalidate_cb *trk_invalidate;
    void *trk_arg;
    int trk_on;
    cluster_cmd_t *spare;
};

static const uint16_t crc16_table[256] = {
    0x0000, 0x1021, 0x2042, 0x3063, 0x4084, 0x50a5, 0x60c6, 0x70e7, 0x8108, 0x9129, 0xa14a, 0xb16b,
    0xc18c, 0xd1ad, 0xe1ce, 0xf1ef, 0x1231, 0x0210, 0x3273, 0x2252, 0x52b5, 0x4294, 0x72f7, 0x62d6,
    0x9339, 0x8318, 0xb37b, 0xa35a, 0xd3bd, 0xc39c, 0xf3ff, 0xe3de, 0x2462, 0x3443, 0x0420, 0x1401,
    0x64e6, 0x74c7, 0x44a4, 0x5485, 0xa56a, 0xb54b, 0x8528, 0x9509, 0xe5ee, 0xf5cf, 0xc5ac, 0xd58d,
    0x3653, 0x2672, 0x1611, 0x0630, 0x76d7, 0x66f6, 0x5695, 0x46b4, 0xb75b, 0xa77a, 0x9719, 0x8738,
    0xf7df, 0xe7fe, 0xd79d, 0xc7bc, 0x48c4, 0x58e5, 0x6886, 0x78a7, 0x0840, 0x1861, 0x2802, 0x3823,
    0xc9cc, 0xd9ed, 0xe98e, 0xf9af, 0x8948, 0x9969, 0xa90a, 0xb92b, 0x5af5, 0x4ad4, 0x7ab7, 0x6a96,
    0x1a71, 0x0a50, 0x3a33, 0x2a12, 0xdbfd, 0xcbdc, 0xfbbf, 0xeb9e, 0x9b79, 0x8b58, 0xbb3b, 0xab1a,
    0x6ca6, 0x7c87, 0x4ce4, 0x5cc5, 0x2c22, 0x3c03, 0x0c60, 0x1c41, 0xedae, 0xfd8f, 0xcdec, 0xddcd,
    0xad2a, 0xbd0b, 0x8d68, 0x9d49, 0x7e97, 0x6eb6, 0x5ed5, 0x4ef4, 0x3e13, 0x2e32, 0x1e51, 0x0e70,
    0xff9f, 0xefbe, 0xdfdd, 0xcffc, 0xbf1b, 0xaf3a, 0x9f59, 0x8f78, 0x9188, 0x81a9, 0xb1ca, 0xa1eb,
    0xd10c, 0xc12d, 0xf14e, 0xe16f, 0x1080, 0x00a1, 0x30c2, 0x20e3, 0x5004, 0x4025, 0x7046, 0x6067,
    0x83b9, 0x9398, 0xa3fb, 0xb3da, 0xc33d, 0xd31c, 0xe37f, 0xf35e, 0x02b1, 0x1290, 0x22f3, 0x32d2,
    0x4235, 0x5214, 0x6277, 0x7256, 0xb5ea, 0xa5cb, 0x95a8, 0x8589, 0xf56e, 0xe54f, 0xd52c, 0xc50d,
    0x34e2, 0x24c3, 0x14a0, 0x0481, 0x7466, 0x6447, 0x5424, 0x4405, 0xa7db, 0xb7fa, 0x8799, 0x97b8,
    0xe75f, 0xf77e, 0xc71d, 0xd73c, 0x26d3, 0x36f2, 0x0691, 0x16b0, 0x6657, 0x7676, 0x4615, 0x5634,
    0xd94c, 0xc96d, 0xf90e, 0xe92f, 0x99c8, 0x89e9, 0xb98a, 0xa9ab, 0x5844, 0x4865, 0x7806, 0x6827,
    0x18c0, 0x08e1, 0x3882, 0x28a3, 0xcb7d, 0xdb5c, 0xeb3f, 0xfb1e, 0x8bf9, 0x9bd8, 0xabbb, 0xbb9a,
    0x4a75, 0x5a54, 0x6a37, 0x7a16, 0x0af1, 0x1ad0, 0x2ab3, 0x3a92, 0xfd2e, 0xed0f, 0xdd6c, 0xcd4d,
    0xbdaa, 0xad8b, 0x9de8, 0x8dc9, 0x7c26, 0x6c07, 0x5c64, 0x4c45, 0x3ca2, 0x2c83, 0x1ce0, 0x0cc1,
    0xef1f, 0xff3e, 0xcf5d, 0xdf7c, 0xaf9b, 0xbfba, 0x8fd9, 0x9ff8, 0x6e17, 0x7e36, 0x4e55, 0x5e74,
    0x2e93, 0x3eb2, 0x0ed1, 0x1ef0,
};

unsigned cluster_keyslot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len), *close;
    uint16_t crc = 0;

    if (open != NULL && (close = memchr(open + 1, '}', len - (size_t)(open + 1 - key))) != NULL &&
        close > open + 1) {
        len = (size_t)(close - open - 1);
        key = open + 1;
    }
    for (size_t i = 0; i < len; i++)
        crc = (uint16_t)(crc << 8) ^ crc16_table[((crc >> 8) ^ (unsigned char)key[i]) & 0xff];
    return crc & (CLUSTER_SLOTS - 1);
}

static void arm_ms(struct event *ev, int64_t ms)
{
    struct timeval tv = clock_ms_timeval(ms);

    event_add(ev, &tv);
}

/* ---- the cluster's state, told to the owner ---- */

/* Up when a map is known, every slot of it served, and every master connected; tracking on
 * when, besides, every master's pair tracks. */
static void recompute(cluster_t *cl, const char *why)
{
    int up = cl->mapped, trk = cl->trk_cb != NULL;

    for (int s = 0; s < CLUSTER_SLOTS && up; s++)
        if (cl->slots[s] == NULL)
            up = 0;
    for (int i = 0; i < cl->n_nodes; i++)
        if (cl->nodes[i]->slots > 0) {
            up = up && cl->nodes[i]->up;
            trk = trk && cl->nodes[i]->tracking;
        }
    trk = trk && up;
    cl->been_up = cl->been_up || up;
    if (up != cl->up) {
        cl->up = up;
        if (cl->state_cb != NULL)
            cl->state_cb(cl->state_arg, up, up ? "cluster connected" : why);
    }
    if (trk != cl->trk_on) {
        cl->trk_on = trk;
        cl->trk_cb(cl->trk_arg, trk);
    }
}

/* ---- the slot map ---- */

static void refresh(cluster_t *cl);

/* Remembers addr as a place to ask for the map (seeds first, then every node seen). */
static void addr_add(cluster_t *cl, const char *host, int port)
{
    for (int i = 0; i < cl->n_addrs; i++)
        if (cl->addrs[i].port == port && strcmp(cl->addrs[i].host, host) == 0)
            return;
    if (cl->n_addrs == ADDRS_MAX)
        return;
    snprintf(cl->addrs[cl->n_addrs].host, sizeof(cl->addrs[0].host), "%s", host);
    cl->addrs[cl->n_addrs++].port = port;
}

static void node_on_state(void *arg, int up, const char *why)
{
    cluster_node_t *n = arg;
    char msg[200];

    n->up = up;
    snprintf(msg, sizeof(msg), "master %s:%d: %s", n->host, n->port, why);
    if (!up)
        refresh(n->cl); /* a failover may be under way: the map says when it is done */
    recompute(n->cl, msg);
}

static void node_on_command(void *arg, int ok, int64_t latency_us)
{
    cluster_t *cl = ((cluster_node_t *)arg)->cl;

    if (cl->observe != NULL)
        cl->observe(cl->observe_arg, ok, latency_us);
}

static void node_on_tracking(void *arg, int on)
{
    cluster_node_t *n = arg;

    n->tracking = on;
    recompute(n->cl, "client-side caching paused");
}

static void node_on_invalidate(void *arg, const char *key, size_t len)
{
    cluster_t *cl = ((cluster_node_t *)arg)->cl;

    cl->trk_invalidate(cl->trk_arg, key, len);
}

static void node_free(cluster_node_t *n)
{
    redisc_free(n->cmd);
    redisc_free(n->sub);
    free(n);
}

/* The pair of connections of a master, tracking when the cluster does. */
static int node_connect(cluster_node_t *n)
{
    cluster_t *cl = n->cl;
    redisc_config_t cfg = cl->node_cfg;

    snprintf(cfg.host, sizeof(cfg.host), "%s", n->host);
    cfg.port = n->port;
    if ((n->cmd = redisc_new(cl->base, &cfg)) == NULL)
        return -1;
    redisc_set_state_cb(n->cmd, node_on_state, n);
    redisc_set_observer(n->cmd, node_on_command, n);
    if (cl->anchor == NULL)
        return 0;
    if ((n->sub = redisc_new_subscriber(cl->base, &cfg, cl->anchor)) == NULL)
        return -1;
    return redisc_track(n->cmd, n->sub, (const char *const *)cl->trk_prefixes, cl->trk_n,
                        node_on_tracking, node_on_invalidate, n);
}

/* The master at host:port, connected to when new; NULL when host is not an IP address (a
 * name would need a blocking look-up), too many are known, or memory ran out. */
static cluster_node_t *node_get(cluster_t *cl, const char *host, int port)
{
    unsigned char ip[16];
    cluster_node_t *n;

    for (int i = 0; i < cl->n_nodes; i++)
        if (cl->nodes[i]->port == port && strcmp(cl->nodes[i]->host, host) == 0)
            return cl->nodes[i];
    if (cl->n_nodes == NODES_MAX || port <= 0 || port > 65535 || strlen(host) >= sizeof(n->host) ||
        (inet_pton(AF_INET, host, ip) != 1 && inet_pton(AF_INET6, host, ip) != 1) ||
        (n = calloc(1, sizeof(*n))) == NULL)
        return NULL;
    n->cl = cl;
    snprintf(n->host, sizeof(n->host), "%s", host);
    n->port = port;
    if (node_connect(n) < 0) {
        node_free(n);
        return NULL;
    }
    cl->nodes[cl->n_nodes++] = n;
    addr_add(cl, host, port);
    return n;
}

/* host and port of a node entry of CLUSTER SLOTS ([host, port, id, ...]); 0 when valid. */
static int entry_addr(const cluster_t *cl, const redisReply *e, char *host, size_t size, int *port)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
        e->element[0]->type != REDIS_REPLY_STRING || e->element[1]->type != REDIS_REPLY_INTEGER)
        return -1;
    /* an empty host (or "?"): the node asked, on that port */
    snprintf(host, size, "%s",
             e->element[0]->len == 0 || strcmp(e->element[0]->str, "?") == 0 ? cl->asked_host
                                                                             : e->element[0]->str);
    *port = (int)e->element[1]->integer;
    return 0;
}

/* Installs the map of a CLUSTER SLOTS answer: [[start, end, master, replica...], ...].
 * Masters that serve no slot any more are retired. */
static int apply_map(cluster_t *cl, const redisReply *map)
{
    char host[64];
    int port;

    if (map->type != REDIS_REPLY_ARRAY || map->elements == 0)
        return -1;
    for (int s = 0; s < CLUSTER_SLOTS; s++)
        cl->slots[s] = NULL;
    for (int i = 0; i < cl->n_nodes; i++)
        cl->nodes[i]->slots = 0;
    for (size_t i = 0; i < map->elements; i++) {
        const redisReply *r = map->element[i];
        cluster_node_t *n;
        long long lo, hi;
        if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
            r->element[0]->type != REDIS_REPLY_INTEGER ||
            r->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        lo = r->element[0]->integer;
        hi = r->element[1]->integer;
        for (size_t j = 3; j < r->elements; j++) /* replicas: where to ask after a failover */
            if (entry_addr(cl, r->element[j], host, sizeof(host), &port) == 0)
                addr_add(cl, host, port);
        if (lo < 0 || hi >= CLUSTER_SLOTS || lo > hi ||
            entry_addr(cl, r->element[2], host, sizeof(host), &port) < 0 ||
            (n = node_get(cl, host, port)) == NULL)
            continue;
        for (long long s = lo; s <= hi; s++)
            cl->slots[s] = n;
        n->slots += (int)(hi - lo + 1);
    }
    for (int i = 0; i < cl->n_nodes;)
        if (cl->nodes[i]->slots == 0 && cl->n_retired < NODES_MAX) {
            cl->retired[cl->n_retired++] = cl->nodes[i];
            cl->nodes[i] = cl->nodes[--cl->n_nodes];
            event_active(cl->gc_timer, EV_TIMEOUT, 0);
        } else {
            i++;
        }
    if (!cl->mapped)
        cl->mapped_ms = clock_coarse_ms();
    cl->mapped = 1;
    return 0;
}

static void retire_probe(cluster_t *cl)
{
    if (cl->probe == NULL)
        return;
    event_del(cl->probe_timer);
    redisc_free(cl->dead_probe);
    cl->dead_probe = cl->probe;
    cl->probe = NULL;
    event_active(cl->gc_timer, EV_TIMEOUT, 0);
}

static void on_slots(redisReply *reply, void *arg)
{
    cluster_t *cl = arg;
    int degraded = 0;

    if (cl->closing)
        return;
    cl->refreshing = 0;
    if (reply == NULL || apply_map(cl, reply) < 0) {
        cl->next_addr++;
        cl->next_ask++;
        refresh(cl);
        return;
    }
    retire_probe(cl);
    recompute(cl, "the slot map changed");
    for (int i = 0; i < cl->n_nodes; i++)
        degraded = degraded || !cl->nodes[i]->up;
    for (int s = 0; s < CLUSTER_SLOTS && !degraded; s++)
        degraded = cl->slots[s] == NULL;
    if (degraded) /* wait for the failover (or the new masters' connections) */
        refresh(cl);
}

static const char *SLOTS_ARGV[] = {"CLUSTER", "SLOTS"};

static void on_probe_state(void *arg, int up, const char *why)
{
    cluster_t *cl = arg;

    (void)why;
    if (up && redisc_command(cl->probe, on_slots, cl, 2, SLOTS_ARGV, NULL, NULL) == REDISC_OK)
        event_del(cl->probe_timer);
}

/* No master is up to ask: a connection of its own to the next seed (or node seen). */
static void start_probe(cluster_t *cl)
{
    redisc_config_t cfg = cl->node_cfg;
    const sentinel_addr_t *a = &cl->addrs[cl->next_addr % cl->n_addrs];

    snprintf(cfg.host, sizeof(cfg.host), "%s", a->host);
    cfg.port = a->port;
    snprintf(cl->asked_host, sizeof(cl->asked_host), "%s", a->host);
    if ((cl->probe = redisc_new(cl->base, &cfg)) == NULL) {
        cl->refreshing = 0;
        return;
    }
    redisc_set_state_cb(cl->probe, on_probe_state, cl);
    arm_ms(cl->probe_timer, cfg.connect_timeout_ms + cfg.command_timeout_ms);
}

/* The probe's seed did not answer in time: the next one, after the pause. */
static void on_probe_timeout(evutil_socket_t fd, short what, void *arg)
{
    cluster_t *cl = arg;
    redisc_t *probe = cl->probe;
    int was_refreshing = cl->refreshing;

    (void)fd;
    (void)what;
    /* A CLUSTER SLOTS pending gets NULL inside the free: on_slots then moves on to the next
     * address itself (and may start a new probe: cl->probe is cleared first). */
    cl->probe = NULL;
    cl->refreshing = 0;
    redisc_free(probe);
    if (was_refreshing && !cl->refreshing && !event_pending(cl->refresh_timer, EV_TIMEOUT, NULL)) {
        cl->next_addr++;
        refresh(cl);
    }
}

static void start_refresh(cluster_t *cl)
{
    cl->refreshing = 1;
    cl->last_refresh_ms = clock_coarse_ms();
    for (int i = 0; i < cl->n_nodes; i++) {
        cluster_node_t *n = cl->nodes[(cl->next_ask + i) % cl->n_nodes];
        if (redisc_command(n->cmd, on_slots, cl, 2, SLOTS_ARGV, NULL, NULL) == REDISC_OK) {
            snprintf(cl->asked_host, sizeof(cl->asked_host), "%s", n->host);
            return;
        }
    }
    if (cl->probe == NULL)
        start_probe(cl);
    else if (redisc_connected(cl->probe))
        on_probe_state(cl, 1, "");
}

/* Reads the map again now, or when REFRESH_MS has passed since the last time. */
static void refresh(cluster_t *cl)
{
    int64_t wait = cl->last_refresh_ms + REFRESH_MS - clock_coarse_ms();

    if (cl->refreshing || cl->closing || event_pending(cl->refresh_timer, EV_TIMEOUT, NULL))
        return;
    if (wait > 0)
        arm_ms(cl->refresh_timer, wait);
    else
        start_refresh(cl);
}

static void on_refresh_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    refresh(arg);
}

/* Frees retired masters and probes outside of their own callbacks. */
static void on_gc(evutil_socket_t fd, short what, void *arg)
{
    cluster_t *cl = arg;

    (void)fd;
    (void)what;
    while (cl->n_retired > 0)
        node_free(cl->retired[--cl->n_retired]);
    redisc_free(cl->dead_probe);
    cl->dead_probe = NULL;
}

/* ---- commands ---- */

static void cmd_free(cluster_cmd_t *cc)
{
    cluster_t *cl = cc->cl;

    free(cc->buf);
    cc->buf = NULL;
    cc->next = cl->spare;
    cl->spare = cc;
}

static void on_asking(redisReply *reply, void *arg)
{
    (void)reply;
    (void)arg; /* the command after it tells */
}

static void cmd_on_reply(redisReply *reply, void *arg);

/* Sends cc to n (with ASKING first for an ASK redirection). */
static int cmd_send(cluster_cmd_t *cc, cluster_node_t *n, int asking)
{
    static const char *asking_argv[] = {"ASKING"};
    int rc;

    if (asking &&
        (rc = redisc_command(n->cmd, on_asking, NULL, 1, asking_argv, NULL, NULL)) != REDISC_OK)
        return rc;
    return redisc_command_formatted(n->cmd, cmd_on_reply, cc, cc->buf, cc->len, NULL);
}

/* The command's answer is reply: cb is told and cc freed. */
static void cmd_done(cluster_cmd_t *cc, redisReply *reply)
{
    redisc_cb *cb = cc->cb;
    void *cb_arg = cc->arg;

    cc->cl->in_flight--;
    cmd_free(cc);
    if (cb != NULL)
        cb(reply, cb_arg);
}

/* cc is sent again after TRYAGAIN_MS, to the master of its slot then; -1 when it has waited
 * enough. */
static int wait_again(cluster_cmd_t *cc)
{
    cluster_t *cl = cc->cl;

    if (cc->tries >= TRYAGAIN_MAX || cl->closing)
        return -1;
    cc->tries++;
    cc->next = cl->again;
    cl->again = cc;
    if (!event_pending(cl->again_timer, EV_TIMEOUT, NULL))
        arm_ms(cl->again_timer, TRYAGAIN_MS);
    return 0;
}

/* "TRYAGAIN": a multi-key command (a script) whose keys a slot migration has split between
 * two masters; it will pass once the migration moved them all. */
static int try_again(cluster_cmd_t *cc, const char *err)
{
    return strncmp(err, "TRYAGAIN", 8) == 0 ? wait_again(cc) : -1;
}

static void on_again(evutil_socket_t fd, short what, void *arg)
{
    cluster_t *cl = arg;
    cluster_cmd_t *list = cl->again;

    (void)fd;
    (void)what;
    cl->again = NULL;
    while (list != NULL) {
        cluster_cmd_t *cc = list;
        cluster_node_t *n = cl->slots[cc->slot];
        list = cc->next;
        if (n == NULL || cmd_send(cc, n, 0) != REDISC_OK)
            cmd_done(cc, NULL);
    }
}

/* Follows "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>"; 0 when sent again. */
static int redirect(cluster_cmd_t *cc, const char *err)
{
    cluster_t *cl = cc->cl;
    int asking = strncmp(err, "ASK ", 4) == 0, port;
    const char *p, *colon;
    char host[64];
    unsigned long slot;
    cluster_node_t *n;

    if ((!asking && strncmp(err, "MOVED ", 6) != 0) || cc->redirects >= REDIRECTS_MAX ||
        cl->closing)
        return -1;
    p = strchr(err, ' ') + 1;
    slot = strtoul(p, (char **)&p, 10);
    if (*p != ' ' || slot >= CLUSTER_SLOTS || (colon = strrchr(p, ':')) == NULL ||
        colon - p - 1 >= (long)sizeof(host))
        return -1;
    snprintf(host, sizeof(host), "%.*s", (int)(colon - p - 1), p + 1);
    port = atoi(colon + 1);
    if ((n = node_get(cl, host, port)) == NULL)
        return -1;
    if (!asking) { /* the slot moved for good: use n from now on, and read the whole map */
        cl->slots[slot] = n;
        refresh(cl);
    }
    /* Moved again: the masters do not agree yet (the end of a migration is told to each in
     * turn); asking again at once would only bounce between them. */
    if (cc->redirects++ > 0 && !asking)
        return wait_again(cc);
    return cmd_send(cc, n, asking) == REDISC_OK ? 0 : -1;
}

static void cmd_on_reply(redisReply *reply, void *arg)
{
    cluster_cmd_t *cc = arg;

    if (reply != NULL && reply->type == REDIS_REPLY_ERROR &&
        (redirect(cc, reply->str) == 0 || try_again(cc, reply->str) == 0))
        return;
    cmd_done(cc, reply);
}

/* As cluster_command; argc -1: argv[0] is the command in wire format, argvlen[0] long (as
 * redisc's send_cmd takes it). */
static int route_command(cluster_t *cl, const char *key, redisc_cb *cb, void *arg, int argc,
                         const char **argv, const size_t *argvlen, cluster_cmd_t **out)
{
    unsigned slot = cluster_keyslot(key, strlen(key));
    cluster_node_t *n = cl->slots[slot];
    cluster_cmd_t *cc;
    size_t len;
    int rc;

    if (n == NULL || !n->up) {
        refresh(cl);
        return REDISC_DOWN;
    }
    /* the worker's cap, as with one server: the masters together take no more than it did */
    if (cl->in_flight >= (size_t)cl->node_cfg.max_in_flight)
        return REDISC_BUSY;
    if ((cc = cl->spare) != NULL)
        cl->spare = cc->next;
    else if ((cc = malloc(sizeof(*cc))) == NULL)
        return REDISC_BUSY;
    cc->cl = cl;
    cc->cb = cb;
    cc->arg = arg;
    cc->redirects = cc->tries = 0;
    cc->slot = slot;
    if (argc < 0 && (cc->buf = malloc(argvlen[0])) != NULL) {
        memcpy(cc->buf, argv[0], argvlen[0]);
        len = argvlen[0];
    } else if (argc >= 0) {
        cc->buf = resp_format(argc, argv, argvlen, &len);
    }
    if (cc->buf == NULL) {
        cmd_free(cc);
        return REDISC_BUSY;
    }
    cc->len = len;
    if ((rc = cmd_send(cc, n, 0)) != REDISC_OK) {
        cmd_free(cc);
        return rc;
    }
    cl->in_flight++;
    if (out != NULL)
        *out = cc;
    return REDISC_OK;
}

int cluster_command(cluster_t *cl, const char *key, redisc_cb *cb, void *arg, int argc,
                    const char **argv, const size_t *argvlen, cluster_cmd_t **out)
{
    return route_command(cl, key, cb, arg, argc, argv, argvlen, out);
}

int cluster_command_formatted(cluster_t *cl, const char *key, redisc_cb *cb, void *arg,
                              const char *cmd, size_t len, cluster_cmd_t **out)
{
    return route_command(cl, key, cb, arg, -1, &cmd, &len, out);
}

void cluster_cancel(cluster_cmd_t *cmd)
{
    if (cmd != NULL)
        cmd->cb = NULL;
}

/* ---- life ---- */

cluster_t *cluster_new(struct event_base *base, const redisc_config_t *node,
                       const sentinel_addr_t *seeds, int n_seeds)
{
    cluster_t *cl = calloc(1, sizeof(*cl));

    if (cl == NULL)
        return NULL;
    cl->base = base;
    cl->node_cfg = *node;
    cl->node_cfg.n_sentinels = 0;
    cl->node_cfg.db = 0; /* a cluster has database 0 only */
    cl->node_cfg.unix_path[0] = '\0';
    cl->node_cfg.n_addrs = 0; /* each connection is to its node's host alone (the seeds are a
                                 list of their own, every address of a name included) */
    for (int i = 0; i < n_seeds; i++)
        addr_add(cl, seeds[i].host, seeds[i].port);
    cl->refresh_timer = evtimer_new(base, on_refresh_timer, cl);
    cl->probe_timer = evtimer_new(base, on_probe_timeout, cl);
    cl->gc_timer = evtimer_new(base, on_gc, cl);
    cl->again_timer = evtimer_new(base, on_again, cl);
    if (cl->n_addrs == 0 || cl->refresh_timer == NULL || cl->probe_timer == NULL ||
        cl->gc_timer == NULL || cl->again_timer == NULL) {
        cluster_free(cl);
        return NULL;
    }
    refresh(cl);
    return cl;
}

void cluster_free(cluster_t *cl)
{
    if (cl == NULL)
        return;
    cl->closing = 1;
    while (cl->again != NULL) {
        cluster_cmd_t *cc = cl->again;
        cl->again = cc->next;
        cmd_done(cc, NULL);
    }
    for (int i = 0; i < cl->n_nodes; i++)
        node_free(cl->nodes[i]);
    for (int i = 0; i < cl->n_retired; i++)
        node_free(cl->retired[i]);
    redisc_free(cl->probe);
    redisc_free(cl->dead_probe);
    if (cl->refresh_timer)
        event_free(cl->refresh_timer);
    if (cl->probe_timer)
        event_free(cl->probe_timer);
    if (cl->gc_timer)
        event_free(cl->gc_timer);
    if (cl->again_timer)
        event_free(cl->again_timer);
    while (cl->spare != NULL) {
        cluster_cmd_t *cc = cl->spare;
        cl->spare = cc->next;
        free(cc);
    }
    for (int i = 0; i < cl->trk_n; i++)
        free(cl->trk_prefixes[i]);
    free(cl->trk_prefixes);
    free(cl->anchor);
    free(cl);
}

void cluster_set_state_cb(cluster_t *cl, redisc_state_cb *cb, void *arg)
{
    cl->state_cb = cb;
    cl->state_arg = arg;
}

void cluster_set_observer(cluster_t *cl, redisc_observe_cb *cb, void *arg)
{
    cl->observe = cb;
    cl->observe_arg = arg;
}

int cluster_ready(const cluster_t *cl)
{
    /* Starting: not while the masters' first connects may still succeed (a master that is
     * down for good must not keep a new instance out for ever). */
    if (!cl->been_up &&
        (!cl->mapped || clock_coarse_ms() - cl->mapped_ms <
                            cl->node_cfg.connect_timeout_ms + cl->node_cfg.command_timeout_ms))
        return 0;
    for (int i = 0; i < cl->n_nodes; i++)
        if (cl->nodes[i]->slots > 0 && cl->nodes[i]->up)
            return 1;
    return 0;
}

/* The subscriber lost its node, or was refused, at host:port: a master that is up (a node
 * that answers right now) other than that one, in turn; else the next address known. */
static void sub_next(void *arg, char *host, size_t size, int *port)
{
    cluster_t *cl = arg;
    int lost = -1;

    for (int i = 0; i < cl->n_nodes; i++) {
        const cluster_node_t *n = cl->nodes[(cl->next_sub + (unsigned)i) % (unsigned)cl->n_nodes];
        if (n->slots > 0 && n->up && (n->port != *port || strcmp(n->host, host) != 0)) {
            cl->next_sub += (unsigned)i + 1;
            snprintf(host, size, "%s", n->host);
            *port = n->port;
            return;
        }
    }
    for (int i = 0; i < cl->n_addrs && lost < 0; i++)
        if (cl->addrs[i].port == *port && strcmp(cl->addrs[i].host, host) == 0)
            lost = i;
    snprintf(host, size, "%s", cl->addrs[(lost + 1) % cl->n_addrs].host);
    *port = cl->addrs[(lost + 1) % cl->n_addrs].port;
}

redisc_t *cluster_new_subscriber(cluster_t *cl, const char *anchor)
{
    redisc_config_t cfg = cl->node_cfg;
    redisc_t *sub;

    snprintf(cfg.host, sizeof(cfg.host), "%s", cl->addrs[0].host);
    cfg.port = cl->addrs[0].port;
    if ((sub = redisc_new_subscriber(cl->base, &cfg, anchor)) != NULL)
        redisc_set_next(sub, sub_next, cl);
    return sub;
}

redisc_t *cluster_new_connection(cluster_t *cl, const char *key, const char *host, int port,
                                 int command_timeout_ms)
{
    redisc_config_t cfg = cl->node_cfg;
    const cluster_node_t *n = cl->slots[cluster_keyslot(key, strlen(key))];

    if (host == NULL && n == NULL) {
        refresh(cl); /* the slot's master may be known after it */
        return NULL;
    }
    if (host != NULL)
        refresh(cl); /* a MOVED: the map is behind */
    snprintf(cfg.host, sizeof(cfg.host), "%s", host != NULL ? host : n->host);
    cfg.port = host != NULL ? port : n->port;
    cfg.command_timeout_ms = command_timeout_ms;
    return redisc_new(cl->base, &cfg);
}

int cluster_track(cluster_t *cl, const char *anchor, const char *const *prefixes, int n_prefixes,
                  redisc_tracking_cb *tracking, redisc_invalidate_cb *invalidate, void *arg)
{
    if (cl->anchor != NULL || cl->n_nodes > 0 || n_prefixes < 1 ||
        (cl->trk_prefixes = calloc((size_t)n_prefixes, sizeof(char *))) == NULL)
        return -1;
    for (int i = 0; i < n_prefixes; i++)
        if ((cl->trk_prefixes[cl->trk_n++] = strdup(prefixes[i])) == NULL)
            return -1;
    cl->trk_cb = tracking;
    cl->trk_invalidate = invalidate;
    cl->trk_arg = arg;
    return (cl->anchor = strdup(anchor)) == NULL ? -1 : 0;
}
