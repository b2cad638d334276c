/* redis.c - botgatectl's Redis: one server, or every master of a Redis Cluster, over hiredis's
 * blocking API (a CLI, not the request path). Commands are routed by their key's slot and
 * follow MOVED and ASK; listings SCAN every master with a cursor. */
#include "ctl.h"

#include "../store/cluster.h"
#include "../store/rediscfg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static redisContext *redis; /* one server; with a cluster, the seed that gave the slot map */
char ctl_prefix[STORE_PREFIX_MAX] = "botgate:";
static const char *url_option; /* --redis-url, or NULL */
static redisc_config_t redis_cfg;

/* Redis Cluster (BOTGATE_REDIS_CLUSTER): a connection per master met, made when first needed */
#define CTL_NODES_MAX 64
static struct {
    char host[64];
    int port;
    redisContext *c;
} nodes[CTL_NODES_MAX];
static int n_nodes;
static signed char slot_node[CLUSTER_SLOTS]; /* index in nodes; -1: unknown */

/* A connection to host:port (or the unix socket when host is NULL), TLS for rediss://,
 * authenticated and on the URL's database; NULL after printing why. */
static redisContext *open_redis(const char *host, int port)
{
    char err[400];
    redisContext *c = rediscfg_connect_blocking(&redis_cfg, host, port, 3000, err, sizeof(err));

    if (c == NULL)
        ctl_die("%s", err);
    return c;
}

/* The index of the master at host:port in nodes (not connected yet), or -1. */
static int node_index(const char *host, int port)
{
    for (int i = 0; i < n_nodes; i++)
        if (nodes[i].port == port && strcmp(nodes[i].host, host) == 0)
            return i;
    if (n_nodes == CTL_NODES_MAX || strlen(host) >= sizeof(nodes[0].host))
        return -1;
    snprintf(nodes[n_nodes].host, sizeof(nodes[0].host), "%s", host);
    nodes[n_nodes].port = port;
    return n_nodes++;
}

/* Reads the slot map from the first seed that answers; redis is left connected to it. */
static int connect_cluster(const char *seeds)
{
    sentinel_addr_t addr[CLUSTER_SEEDS_MAX];
    char err[256];
    int n = 0;

    if (strpbrk(ctl_prefix, "{}") != NULL)
        return ctl_die("BOTGATE_REDIS_PREFIX must not contain { or } with BOTGATE_REDIS_CLUSTER");
    if (sentinel_parse_list(seeds, addr, CLUSTER_SEEDS_MAX, &n, err, sizeof(err)) < 0)
        return ctl_die("BOTGATE_REDIS_CLUSTER: %s", err);
    redis_cfg.db = 0;
    memset(slot_node, -1, sizeof(slot_node));
    for (int i = 0; i < n; i++) {
        redisReply *map;
        if ((redis = open_redis(addr[i].host, addr[i].port)) == NULL)
            continue;
        map = redisCommand(redis, "CLUSTER SLOTS");
        if (map != NULL && map->type == REDIS_REPLY_ARRAY) {
            for (size_t j = 0; j < map->elements; j++) {
                redisReply *e = map->element[j];
                int k;
                if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
                    e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2)
                    continue;
                k = node_index(e->element[2]->element[0]->len ? e->element[2]->element[0]->str
                                                              : addr[i].host,
                               (int)e->element[2]->element[1]->integer);
                for (long long s = e->element[0]->integer;
                     k >= 0 && s <= e->element[1]->integer && s < CLUSTER_SLOTS; s++)
                    slot_node[s] = (signed char)k;
            }
            freeReplyObject(map);
            return 0;
        }
        if (map != NULL)
            freeReplyObject(map);
        redisFree(redis);
        redis = NULL;
    }
    return ctl_die("no node of BOTGATE_REDIS_CLUSTER gave the slot map");
}

void ctl_redis_use(const char *url)
{
    url_option = url;
}

int ctl_redis_connect(void)
{
    const char *env_url = getenv("BOTGATE_REDIS_URL");
    const char *url = url_option ? url_option : env_url;
    const char *p = getenv("BOTGATE_REDIS_PREFIX");
    const char *cluster = getenv("BOTGATE_REDIS_CLUSTER");
    char err[256];

    if (redis != NULL)
        return 0;
    if (p != NULL) {
        if (strlen(p) >= sizeof(ctl_prefix))
            return ctl_die("BOTGATE_REDIS_PREFIX is too long");
        snprintf(ctl_prefix, sizeof(ctl_prefix), "%s", p);
    }
    if (rediscfg_parse_url(url ? url : "redis://127.0.0.1:6379/0", &redis_cfg, err, sizeof(err)) <
        0)
        return ctl_die("%s: %s", url_option ? "--redis-url" : "BOTGATE_REDIS_URL", err);
#define ENV_OR_EMPTY(name) (getenv(name) ? getenv(name) : "")
    if (rediscfg_tls_setup(
            &redis_cfg, ENV_OR_EMPTY("BOTGATE_REDIS_CA_FILE"),
            ENV_OR_EMPTY("BOTGATE_REDIS_TLS_CERT_FILE"), ENV_OR_EMPTY("BOTGATE_REDIS_TLS_KEY_FILE"),
            ENV_OR_EMPTY("BOTGATE_REDIS_TLS_NAME"), cluster && cluster[0], err, sizeof(err)) < 0)
        return ctl_die("Redis TLS: %s", err);
#undef ENV_OR_EMPTY
    if (cluster != NULL && cluster[0] != '\0')
        return connect_cluster(cluster) == 0 ? 0 : CTL_FAIL;
    redis =
        redis_cfg.unix_path[0] ? open_redis(NULL, 0) : open_redis(redis_cfg.host, redis_cfg.port);
    return redis == NULL ? CTL_FAIL : 0;
}

void ctl_redis_close(void)
{
    for (int i = 0; i < n_nodes; i++)
        if (nodes[i].c != NULL && nodes[i].c != redis)
            redisFree(nodes[i].c);
    if (redis != NULL)
        redisFree(redis);
    redis = NULL;
    n_nodes = 0;
}

/* The connection to the master of the slot of key (argv[1] of every command botgatectl
 * sends); the seed's when the slot is unknown. */
static redisContext *node_for(int k)
{
    if (k < 0)
        return redis;
    if (nodes[k].c == NULL)
        nodes[k].c = open_redis(nodes[k].host, nodes[k].port);
    return nodes[k].c;
}

/* Runs argv on c, following MOVED and ASK (ASKING first) in a cluster. */
static redisReply *run_argv(redisContext *c, int argc, const char **argv, const size_t *lens)
{
    redisReply *r = NULL;
    int asking = 0;

    for (int hop = 0; hop < 5 && c != NULL; hop++) {
        char host[64];
        int port, k;
        unsigned slot;
        if (asking) {
            redisReply *a = redisCommand(c, "ASKING");
            if (a != NULL)
                freeReplyObject(a);
        }
        r = redisCommandArgv(c, argc, argv, lens);
        if (r == NULL) {
            ctl_die("Redis: %s", c->errstr);
            return NULL;
        }
        if (r->type != REDIS_REPLY_ERROR ||
            (sscanf(r->str, "MOVED %u %63[^:]:%d", &slot, host, &port) != 3 &&
             sscanf(r->str, "ASK %u %63[^:]:%d", &slot, host, &port) != 3) ||
            slot >= CLUSTER_SLOTS || (k = node_index(host, port)) < 0)
            return r;
        asking = r->str[0] == 'A';
        if (!asking)
            slot_node[slot] = (signed char)k;
        freeReplyObject(r);
        r = NULL;
        c = node_for(k);
    }
    if (r == NULL)
        ctl_die("Redis: too many redirections");
    return r;
}

/* Runs argv on the node of its key's slot; NULL after printing why. */
static redisReply *routed(int argc, const char **argv, const size_t *lens)
{
    redisContext *c = redis;
    int k = argc > 3 && strcmp(argv[0], "EVAL") == 0 ? 3 : 1; /* EVAL script n key ... */

    if (n_nodes > 0 && argc > k)
        c = node_for(slot_node[cluster_keyslot(argv[k], lens ? lens[k] : strlen(argv[k]))]);
    return run_argv(c, argc, argv, lens);
}

redisReply *ctl_redis_command(int argc, const char **argv, const size_t *lens)
{
    redisReply *r;

    if ((r = routed(argc, argv, lens)) == NULL)
        return NULL;
    if (r->type == REDIS_REPLY_ERROR) {
        ctl_die("Redis: %s", r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

int ctl_redis_set(const char *key, const char *value)
{
    const char *argv[] = {"SET", key, value};
    redisReply *r = ctl_redis_command(3, argv, NULL);

    if (r == NULL)
        return CTL_FAIL;
    freeReplyObject(r);
    return 0;
}

/* A reply a fetch gives for a key that moved to another node meanwhile (resharding). */
static int redirected(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR &&
           (strncmp(r->str, "MOVED ", 6) == 0 || strncmp(r->str, "ASK ", 4) == 0);
}

/* Fetch j of key i as an argv (the key in argv[1]). */
static void fetch_argv(const ctl_fetch_t *f, const redisReply *key, const char **argv, size_t *lens)
{
    for (int a = 0; a < f->argc; a++) {
        argv[a] = a == 1 ? key->str : f->argv[a];
        lens[a] = a == 1 ? key->len : strlen(argv[a]);
    }
}

/* The fetches of every key in keys, pipelined on c, handed to fn key by key. All replies are
 * read before any is retried elsewhere, so that c stays in step. */
static int scan_batch(redisContext *c, const redisReply *keys, const ctl_fetch_t *fetch, int nfetch,
                      ctl_scan_fn *fn, void *arg)
{
    size_t n = keys->elements * (size_t)nfetch, got = 0;
    redisReply **replies = calloc(n ? n : 1, sizeof(*replies));
    const char *argv[4];
    size_t lens[4];
    int rc = 0;

    if (replies == NULL)
        return ctl_die("out of memory");
    for (size_t i = 0; i < n && rc == 0; i++) {
        fetch_argv(&fetch[i % (size_t)nfetch], keys->element[i / (size_t)nfetch], argv, lens);
        if (redisAppendCommandArgv(c, fetch[i % (size_t)nfetch].argc, argv, lens) != REDIS_OK)
            rc = ctl_die("Redis: %s", c->errstr);
    }
    for (; got < n && rc == 0; got++) {
        void *r = NULL;
        if (redisGetReply(c, &r) != REDIS_OK)
            rc = ctl_die("Redis: %s", c->errstr);
        replies[got] = r;
    }
    for (size_t i = 0; i < got && rc == 0; i++)
        if (redirected(replies[i])) { /* the key moved meanwhile (resharding): ask its node */
            fetch_argv(&fetch[i % (size_t)nfetch], keys->element[i / (size_t)nfetch], argv, lens);
            freeReplyObject(replies[i]);
            replies[i] = routed(fetch[i % (size_t)nfetch].argc, argv, lens);
        }
    for (size_t i = 0; i < keys->elements && rc == 0; i++) {
        int ok = 1;
        for (int j = 0; j < nfetch; j++) {
            const redisReply *r = replies[i * (size_t)nfetch + (size_t)j];
            /* gone since the SCAN, or not a record of this kind: skipped */
            ok &= r != NULL && r->type != REDIS_REPLY_ERROR && r->type != REDIS_REPLY_NIL;
        }
        if (ok)
            rc = fn(arg, keys->element[i]->str, replies + i * (size_t)nfetch);
    }
    for (size_t i = 0; i < got; i++)
        if (replies[i] != NULL)
            freeReplyObject(replies[i]);
    free(replies);
    return rc;
}

/* SCAN on one node, a batch at a time. */
static int scan_node(redisContext *c, const char *pattern, const ctl_fetch_t *fetch, int nfetch,
                     ctl_scan_fn *fn, void *arg)
{
    char cursor[32] = "0";
    int rc = 0;

    do {
        redisReply *r = redisCommand(c, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        if (r == NULL)
            return ctl_die("Redis: %s", c->errstr);
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING || r->element[0]->len >= sizeof(cursor) ||
            r->element[1]->type != REDIS_REPLY_ARRAY) {
            rc = ctl_die("Redis: SCAN: %s", r->type == REDIS_REPLY_ERROR ? r->str : "odd answer");
            freeReplyObject(r);
            return rc;
        }
        memcpy(cursor, r->element[0]->str, r->element[0]->len + 1);
        rc = scan_batch(c, r->element[1], fetch, nfetch, fn, arg);
        freeReplyObject(r);
    } while (rc == 0 && strcmp(cursor, "0") != 0);
    return rc;
}

int ctl_redis_scan(const char *pattern, const ctl_fetch_t *fetch, int nfetch, ctl_scan_fn *fn,
                   void *arg)
{
    int rc;

    if (ctl_redis_connect() != 0)
        return CTL_FAIL;
    if (n_nodes == 0)
        return scan_node(redis, pattern, fetch, nfetch, fn, arg);
    /* a Cluster: every master holds its own slots' keys */
    for (int k = 0; k < n_nodes; k++) {
        redisContext *c = node_for(k);
        if (c == NULL)
            return CTL_FAIL;
        if ((rc = scan_node(c, pattern, fetch, nfetch, fn, arg)) != 0)
            return rc;
    }
    return 0;
}
