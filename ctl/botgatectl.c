/* botgatectl - the admin CLI: tokens, channels, members and trees in botgate's Redis. A CLI,
 * not the request path, so it uses hiredis's blocking API. Secrets never leave it in clear,
 * except a new token, printed once. */
#include "../core/auth.h"
#include "../core/clock.h"
#include "../core/ratelimit.h"
#include "../core/request.h"
#include "../core/tree.h"
#include "../store/cluster.h"
#include "../store/keys.h"
#include "../store/redisc.h"

#include <botgate_version.h> /* generated in the build tree */

#include <ctype.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/time.h>
#include <time.h>

static redisContext *redis; /* one server; with a cluster, the seed that gave the slot map */
static char prefix[STORE_PREFIX_MAX] = "botgate:";
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

static int die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int die(const char *fmt, ...)
{
    va_list ap;

    fputs("botgatectl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

/* A connection to host:port (or the unix socket when host is NULL), authenticated and on the
 * URL's database; NULL after printing why. */
static redisContext *open_redis(const char *host, int port)
{
    struct timeval tv = {3, 0};
    redisContext *c = host == NULL ? redisConnectUnixWithTimeout(redis_cfg.unix_path, tv)
                                   : redisConnectWithTimeout(host, port, tv);
    redisReply *r = NULL;

    if (c == NULL || c->err) {
        die("cannot connect to Redis: %s", c ? c->errstr : "out of memory");
        goto fail;
    }
    redisSetTimeout(c, tv);
    if (redis_cfg.password[0]) {
        r = redisCommand(c, "AUTH %s", redis_cfg.password);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            die("Redis refused AUTH");
            goto fail;
        }
        freeReplyObject(r);
    }
    if (redis_cfg.db) {
        r = redisCommand(c, "SELECT %d", redis_cfg.db);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            die("Redis refused SELECT %d", redis_cfg.db);
            goto fail;
        }
        freeReplyObject(r);
    }
    return c;
fail:
    if (r != NULL)
        freeReplyObject(r);
    if (c != NULL)
        redisFree(c);
    return NULL;
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

    if (strpbrk(prefix, "{}") != NULL)
        return die("BOTGATE_REDIS_PREFIX must not contain { or } with BOTGATE_REDIS_CLUSTER");
    if (sentinel_parse_list(seeds, addr, CLUSTER_SEEDS_MAX, &n, err, sizeof(err)) < 0)
        return die("BOTGATE_REDIS_CLUSTER: %s", err);
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
    return die("no node of BOTGATE_REDIS_CLUSTER gave the slot map");
}

static int connect_redis(void)
{
    const char *url = getenv("BOTGATE_REDIS_URL");
    const char *p = getenv("BOTGATE_REDIS_PREFIX");
    const char *cluster = getenv("BOTGATE_REDIS_CLUSTER");
    char err[256];

    if (p != NULL) {
        if (strlen(p) >= sizeof(prefix))
            return die("BOTGATE_REDIS_PREFIX is too long");
        snprintf(prefix, sizeof(prefix), "%s", p);
    }
    if (redisc_parse_url(url ? url : "redis://127.0.0.1:6379/0", &redis_cfg, err, sizeof(err)) < 0)
        return die("BOTGATE_REDIS_URL: %s", err);
    if (cluster != NULL && cluster[0] != '\0')
        return connect_cluster(cluster);
    redis =
        redis_cfg.unix_path[0] ? open_redis(NULL, 0) : open_redis(redis_cfg.host, redis_cfg.port);
    return redis == NULL ? 1 : 0;
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
            die("Redis: %s", c->errstr);
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
        die("Redis: too many redirections");
    return r;
}

/* Runs a command given as argv; returns the reply or NULL after printing the error. */
static redisReply *command(int argc, const char **argv, const size_t *lens)
{
    redisContext *c = redis;
    redisReply *r;

    if (n_nodes > 0 && argc > 1)
        c = node_for(slot_node[cluster_keyslot(argv[1], lens ? lens[1] : strlen(argv[1]))]);
    if ((r = run_argv(c, argc, argv, lens)) == NULL)
        return NULL;
    if (r->type == REDIS_REPLY_ERROR) {
        die("Redis: %s", r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

static int set_key(const char *key, const char *value)
{
    const char *argv[] = {"SET", key, value};
    redisReply *r = command(3, argv, NULL);

    if (r == NULL)
        return 1;
    freeReplyObject(r);
    return 0;
}

static json_t *load_file(const char *path)
{
    json_error_t jerr;
    json_t *v = strcmp(path, "-") == 0 ? json_loadf(stdin, JSON_REJECT_DUPLICATES, &jerr)
                                       : json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);

    if (v == NULL)
        die("%s: line %d: %s", path, jerr.line, jerr.text);
    else if (!json_is_object(v)) {
        die("%s: must hold one JSON object", path);
        json_decref(v);
        v = NULL;
    }
    return v;
}

static const char *str_field(const json_t *o, const char *name)
{
    const char *s = json_string_value(json_object_get(o, name));

    return s && *s ? s : NULL;
}

/* An id a record is stored under: what a request may name (request ids' length and
 * characters), so that nothing is stored that the API could never reach. */
static int id_ok(const char *s)
{
    return s != NULL && strlen(s) <= REQUEST_MAX_ID && request_id_chars_ok(s);
}

/* Field names of channel info that hold secrets (interface.md marks them), matched loosely so
 * that a platform's new secret field is masked too. */
static int secret_name(const char *name)
{
    static const char *const words[] = {"token", "secret", "password", "key", "ticket"};
    char lower[128];
    size_t i;

    for (i = 0; name[i] && i + 1 < sizeof(lower); i++)
        lower[i] = (char)tolower((unsigned char)name[i]);
    lower[i] = '\0';
    for (i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strstr(lower, words[i]) != NULL)
            return 1;
    return 0;
}

static void mask_secrets(json_t *o)
{
    const char *k;
    json_t *v;

    json_object_foreach(o, k, v) {
        if (json_is_object(v))
            mask_secrets(v);
        else if (secret_name(k) && !json_is_null(v) && !json_is_boolean(v) &&
                 !(json_is_integer(v) && strstr(k, "Expiry")))
            json_object_set_new(o, k, json_string("****"));
    }
}

/* ---- token ---- */

static int parse_duration(const char *s, int64_t *ms)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    int64_t unit = 1000;

    if (end == s || v <= 0)
        return -1;
    if (*end == 'd')
        unit = 86400000;
    else if (*end == 'h')
        unit = 3600000;
    else if (*end == 'm')
        unit = 60000;
    else if (*end != 's' && *end != '\0')
        return -1;
    if (*end != '\0' && end[1] != '\0')
        return -1;
    *ms = (int64_t)v * unit;
    return 0;
}

static void token_usage(void)
{
    printf("usage: botgatectl token create --app APP --scope SCOPE [--scope SCOPE ...]\n"
           "                              [--label LABEL] [--expires-in 30d|12h|90m|3600s]\n"
           "                              [--channel CHANNEL_ID ...]\n"
           "       botgatectl token revoke TOKEN | --hash SHA256_HEX\n\n"
           "Scopes: bot:sendResponses, bot:redirectMemberToNode, bot:admin, api:admin.\n"
           "create prints the new token once on stdout; only its SHA-256 is stored.\n"
           "--channel limits the token to those channels of its app.\n");
}

static void b64url(const unsigned char *in, size_t n, char *out)
{
    static const char tbl[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0, i;

    for (i = 0; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = tbl[v >> 18 & 63];
        out[o++] = tbl[v >> 12 & 63];
        out[o++] = tbl[v >> 6 & 63];
        out[o++] = tbl[v & 63];
    }
    out[o] = '\0';
}

static int token_create(int argc, char **argv)
{
    const char *app = NULL, *label = "";
    json_t *scopes = json_array(), *channels = NULL, *record;
    int64_t expires = 0;
    unsigned char raw[30];
    char token[64] = "bgt_", hash[AUTH_HASH_HEX], key[STORE_KEY_MAX], *text;
    int rc = 1;

    for (int i = 0; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--help") == 0) {
            token_usage();
            rc = 0;
            goto out;
        }
        if (v == NULL) {
            die("%s needs a value (see token --help)", argv[i]);
            goto out;
        }
        if (strcmp(argv[i], "--app") == 0)
            app = v;
        else if (strcmp(argv[i], "--scope") == 0) {
            if (auth_scope_bit(v) == 0) {
                die("unknown scope %s (see token --help)", v);
                goto out;
            }
            json_array_append_new(scopes, json_string(v));
        } else if (strcmp(argv[i], "--label") == 0)
            label = v;
        else if (strcmp(argv[i], "--expires-in") == 0) {
            if (parse_duration(v, &expires) < 0) {
                die("--expires-in takes a duration such as 30d, 12h, 90m or 3600s");
                goto out;
            }
        } else if (strcmp(argv[i], "--channel") == 0) {
            if (channels == NULL)
                channels = json_array();
            json_array_append_new(channels, json_string(v));
        } else {
            die("unknown option %s (see token --help)", argv[i]);
            goto out;
        }
        i++;
    }
    if (app == NULL || json_array_size(scopes) == 0) {
        die("token create needs --app and at least one --scope (see token --help)");
        goto out;
    }
    if (!auth_app_valid(app)) {
        die("--app must be 1-%d bytes without ':' or control characters", AUTH_APP_MAX);
        goto out;
    }
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
        die("no randomness: %s", strerror(errno));
        goto out;
    }
    b64url(raw, sizeof(raw), token + 4);
    auth_hash_token(token, strlen(token), hash);
    record = json_pack(
        "{s:s, s:O, s:s, s:o, s:o, s:I}", "app", app, "scopes", scopes, "label", label, "expiresAt",
        expires ? json_integer(clock_wall_ms() + expires) : json_null(), "channels",
        channels ? json_incref(channels) : json_null(), "createdAt", (json_int_t)clock_wall_ms());
    text = json_dumps(record, JSON_COMPACT);
    json_decref(record);
    if (connect_redis() != 0 || store_key_token(key, sizeof(key), prefix, hash) < 0 ||
        set_key(key, text) != 0) {
        free(text);
        goto out;
    }
    free(text);
    printf("%s\n", token);
    fprintf(stderr, "token created for app %s (hash %.12s...); it is shown only this once\n", app,
            hash);
    rc = 0;
out:
    json_decref(scopes);
    json_decref(channels);
    return rc;
}

static int token_revoke(int argc, char **argv)
{
    char hash[AUTH_HASH_HEX], key[STORE_KEY_MAX];
    redisReply *r;

    if (argc >= 1 && strcmp(argv[0], "--help") == 0) {
        token_usage();
        return 0;
    }
    if (argc == 2 && strcmp(argv[0], "--hash") == 0 && strlen(argv[1]) == 64)
        snprintf(hash, sizeof(hash), "%s", argv[1]);
    else if (argc == 1)
        auth_hash_token(argv[0], strlen(argv[0]), hash);
    else
        return die("token revoke takes TOKEN or --hash SHA256_HEX (see token --help)");
    if (connect_redis() != 0 || store_key_token(key, sizeof(key), prefix, hash) < 0)
        return 1;
    {
        const char *cmd[] = {"DEL", key};
        if ((r = command(2, cmd, NULL)) == NULL)
            return 1;
    }
    if (r->integer == 0) {
        freeReplyObject(r);
        return die("no such token");
    }
    freeReplyObject(r);
    fprintf(stderr, "token revoked\n");
    return 0;
}

/* ---- channel, member ---- */

static int channel_put(const char *path)
{
    json_t *ch = load_file(path), *info;
    char key[STORE_KEY_MAX], *text;
    ratelimit_policy_t limits;
    bg_error_t err = {0};
    const char *id;
    int rc = 1;

    if (ch == NULL)
        return 1;
    id = str_field(ch, "_id");
    info = json_object_get(ch, "info");
    if (!id_ok(id))
        die("%s: _id must be a non-empty id of at most %d bytes without control characters or "
            "braces",
            path, REQUEST_MAX_ID);
    else if (!auth_app_valid(str_field(ch, "app")))
        die("%s: app must be a string of 1-%d bytes without ':' or control characters", path,
            AUTH_APP_MAX);
    else if (str_field(ch, "type") == NULL)
        die("%s: type must be a non-empty string", path);
    else if (!json_is_object(info))
        die("%s: info must be an object", path);
    else if (json_object_get(ch, "on") != NULL && !json_is_boolean(json_object_get(ch, "on")))
        die("%s: on must be a boolean", path);
    else if (ratelimit_for_channel(ch, &limits, &err) < 0)
        die("%s: %s", path, err.msg);
    else if (connect_redis() == 0 && store_key_channel(key, sizeof(key), prefix, id) >= 0) {
        text = json_dumps(ch, JSON_COMPACT);
        rc = set_key(key, text);
        free(text);
        if (rc == 0)
            fprintf(stderr, "channel %s stored\n", id);
    }
    json_decref(ch);
    return rc;
}

static int member_put(const char *path)
{
    json_t *m = load_file(path);
    char key[STORE_KEY_MAX], rkey[STORE_KEY_MAX], phone[256], *text;
    const char *id, *channel, *ext, *platform;
    int rc = 1;

    if (m == NULL)
        return 1;
    id = str_field(m, "_id");
    channel = str_field(m, "channel");
    ext = str_field(m, "externalId");
    platform = str_field(m, "platform");
    /* whatsapp members are found by their number as botgate normalises it */
    if (ext != NULL && platform != NULL && strncmp(platform, "whatsapp", 8) == 0) {
        request_normalize_phone(ext, phone, sizeof(phone));
        ext = phone[0] ? phone : NULL;
    }
    if (!id_ok(id) || !id_ok(channel))
        die("%s: _id and channel must be non-empty ids of at most %d bytes without control "
            "characters or braces",
            path, REQUEST_MAX_ID);
    else if (connect_redis() == 0 && store_key_member(key, sizeof(key), prefix, channel, id) >= 0) {
        text = json_dumps(m, JSON_COMPACT);
        rc = set_key(key, text);
        free(text);
        /* the member is also found by its platform address */
        if (rc == 0 && ext != NULL &&
            store_key_recipient(rkey, sizeof(rkey), prefix, channel, ext) >= 0)
            rc = set_key(rkey, id);
        if (rc == 0)
            fprintf(stderr, "member %s of channel %s stored\n", id, channel);
    }
    json_decref(m);
    return rc;
}

/* ---- tree ---- */

static int tree_import(const char *path)
{
    json_t *tree = load_file(path), *nodes, *node, *meta;
    bg_error_t err;
    char key[STORE_KEY_MAX], tmp[STORE_KEY_MAX + 40], suffix[24];
    const char *id, *name;
    unsigned char rnd[8];
    size_t argc, i = 0, n;
    const char **argv = NULL;
    char **texts = NULL;
    redisReply *r;
    int rc = 1;

    if (tree == NULL)
        return 1;
    if (tree_validate(tree, &err) < 0) {
        die("%s: %s", path, err.msg);
        goto out;
    }
    if (!auth_app_valid(str_field(tree, "app"))) {
        die("%s: app must be a string of 1-%d bytes without ':' or control characters", path,
            AUTH_APP_MAX);
        goto out;
    }
    id = str_field(tree, "_id");
    nodes = json_object_get(tree, "nodes");
    n = json_object_size(nodes);
    argc = 2 + 2 * (n + 1);
    argv = calloc(argc, sizeof(*argv));
    texts = calloc(n + 1, sizeof(*texts));
    if (argv == NULL || texts == NULL || connect_redis() != 0 ||
        store_key_tree(key, sizeof(key), prefix, id) < 0)
        goto out;
    /* Written to a temporary key, then renamed over the tree: readers see the old tree or the
     * new one, never a mix. */
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        goto out;
    snprintf(suffix, sizeof(suffix), "%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2],
             rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    /* braced: the tree's own key is its hash tag, so that both share a Redis Cluster slot */
    snprintf(tmp, sizeof(tmp), "{%s}:import:%s", key, suffix);
    argv[0] = "HSET";
    argv[1] = tmp;
    meta = tree_meta_json(tree);
    texts[0] = json_dumps(meta, JSON_COMPACT);
    json_decref(meta);
    argv[2] = "_tree";
    argv[3] = texts[0];
    json_object_foreach(nodes, name, node) {
        texts[++i] = json_dumps(node, JSON_COMPACT);
        argv[2 + 2 * i] = name;
        argv[3 + 2 * i] = texts[i];
    }
    if ((r = command((int)argc, argv, NULL)) == NULL)
        goto out;
    freeReplyObject(r);
    {
        const char *ren[] = {"RENAME", tmp, key};
        if ((r = command(3, ren, NULL)) == NULL)
            goto out;
        freeReplyObject(r);
    }
    fprintf(stderr, "tree %s imported: %zu nodes\n", id, n);
    rc = 0;
out:
    if (texts != NULL)
        for (size_t k = 0; k <= n; k++)
            free(texts[k]);
    free(texts);
    free(argv);
    json_decref(tree);
    return rc;
}

static int tree_get(const char *id)
{
    char key[STORE_KEY_MAX];
    json_t *out, *nodes;
    redisReply *r;
    char *text;

    if (connect_redis() != 0 || store_key_tree(key, sizeof(key), prefix, id) < 0)
        return 1;
    {
        const char *argv[] = {"HGETALL", key};
        if ((r = command(2, argv, NULL)) == NULL)
            return 1;
    }
    if (r->elements == 0) {
        freeReplyObject(r);
        return die("no tree %s", id);
    }
    out = json_object();
    nodes = json_object();
    json_object_set_new(out, "_id", json_string(id));
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        json_t *v = json_loadb(r->element[i + 1]->str, r->element[i + 1]->len, 0, NULL);
        if (v == NULL)
            v = json_stringn(r->element[i + 1]->str, r->element[i + 1]->len);
        if (strcmp(r->element[i]->str, "_tree") == 0 && json_is_object(v)) {
            json_object_update(out, v);
            json_decref(v);
        } else {
            json_object_set_new(nodes, r->element[i]->str, v);
        }
    }
    freeReplyObject(r);
    json_object_set_new(out, "nodes", nodes);
    text = json_dumps(out, JSON_INDENT(2));
    printf("%s\n", text);
    free(text);
    json_decref(out);
    return 0;
}

/* ---- get ---- */

static int get(int argc, char **argv)
{
    char key[STORE_KEY_MAX];
    redisReply *r;
    json_t *v;
    char *text;
    int k;

    if (argc >= 1 && strcmp(argv[0], "--help") == 0) {
        printf("usage: botgatectl get channel CHANNEL_ID\n"
               "       botgatectl get member CHANNEL_ID MEMBER_ID\n"
               "       botgatectl get token SHA256_HEX\n"
               "       botgatectl get tree TREE_ID\n\n"
               "Prints the record as JSON; every secret in it is shown as \"****\".\n");
        return 0;
    }
    if (argc == 2 && strcmp(argv[0], "channel") == 0)
        k = store_key_channel(key, sizeof(key), prefix, argv[1]);
    else if (argc == 3 && strcmp(argv[0], "member") == 0)
        k = store_key_member(key, sizeof(key), prefix, argv[1], argv[2]);
    else if (argc == 2 && strcmp(argv[0], "token") == 0)
        k = store_key_token(key, sizeof(key), prefix, argv[1]);
    else if (argc == 2 && strcmp(argv[0], "tree") == 0)
        return tree_get(argv[1]);
    else
        return die("get takes: channel ID | member CHANNEL_ID MEMBER_ID | token HASH | tree ID "
                   "(see get --help)");
    if (k < 0 || connect_redis() != 0)
        return 1;
    {
        const char *cmd[] = {"GET", key};
        if ((r = command(2, cmd, NULL)) == NULL)
            return 1;
    }
    if (r->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return die("no %s %s", argv[0], argv[1]);
    }
    v = json_loadb(r->str, r->len, 0, NULL);
    freeReplyObject(r);
    if (v == NULL)
        return die("the stored %s is not JSON", argv[0]);
    mask_secrets(v);
    text = json_dumps(v, JSON_INDENT(2));
    printf("%s\n", text);
    free(text);
    json_decref(v);
    return 0;
}

static void usage(void)
{
    printf("usage: botgatectl COMMAND ...\n\n"
           "  token create --app A --scope S [--scope S2] [--label L] [--expires-in D]\n"
           "  token revoke TOKEN | --hash SHA256_HEX\n"
           "  channel put FILE.json        store a channel record (- reads stdin)\n"
           "  member put FILE.json         store a member record and its recipient key\n"
           "  tree import FILE.json        validate a tree and replace it atomically\n"
           "  tree get TREE_ID\n"
           "  get KIND ID...               print a record, secrets masked\n\n"
           "Redis: BOTGATE_REDIS_URL (default redis://127.0.0.1:6379/0), key prefix\n"
           "BOTGATE_REDIS_PREFIX (default botgate:). Every command takes --help;\n"
           "--version prints the version.\n");
}

static int put_usage(const char *kind)
{
    printf("usage: botgatectl %s put FILE.json\n\nStores the %s record in FILE.json "
           "(- reads stdin); see docs/operations.md for its fields.\n",
           kind, kind);
    return 0;
}

int main(int argc, char **argv)
{
    int rc;

    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage();
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0 ||
        strcmp(argv[1], "version") == 0) {
        printf("botgatectl %s\n", BOTGATE_VERSION);
        return 0;
    }
    if (strcmp(argv[1], "token") == 0 && argc >= 3 && strcmp(argv[2], "create") == 0)
        rc = token_create(argc - 3, argv + 3);
    else if (strcmp(argv[1], "token") == 0 && argc >= 3 && strcmp(argv[2], "revoke") == 0)
        rc = token_revoke(argc - 3, argv + 3);
    else if (strcmp(argv[1], "token") == 0) {
        token_usage();
        rc = argc >= 3 && strcmp(argv[2], "--help") == 0 ? 0 : 2;
    } else if ((strcmp(argv[1], "channel") == 0 || strcmp(argv[1], "member") == 0) &&
               argc >= 3 && strcmp(argv[2], "--help") == 0)
        rc = put_usage(argv[1]);
    else if ((strcmp(argv[1], "channel") == 0 || strcmp(argv[1], "member") == 0) && argc == 4 &&
             strcmp(argv[2], "put") == 0 && strcmp(argv[3], "--help") == 0)
        rc = put_usage(argv[1]);
    else if (strcmp(argv[1], "channel") == 0 && argc == 4 && strcmp(argv[2], "put") == 0)
        rc = channel_put(argv[3]);
    else if (strcmp(argv[1], "member") == 0 && argc == 4 && strcmp(argv[2], "put") == 0)
        rc = member_put(argv[3]);
    else if (strcmp(argv[1], "tree") == 0 && argc == 4 && strcmp(argv[2], "import") == 0)
        rc = strcmp(argv[3], "--help") == 0
                 ? (printf("usage: botgatectl tree import FILE.json\n\nValidates the tree "
                           "and all its nodes, then replaces the stored tree atomically.\n"),
                    0)
                 : tree_import(argv[3]);
    else if (strcmp(argv[1], "tree") == 0 && argc == 4 && strcmp(argv[2], "get") == 0)
        rc = strcmp(argv[3], "--help") == 0
                 ? (printf("usage: botgatectl tree get TREE_ID\n"), 0)
                 : tree_get(argv[3]);
    else if (strcmp(argv[1], "get") == 0)
        rc = get(argc - 2, argv + 2);
    else {
        usage();
        rc = 2;
    }
    if (redis != NULL)
        redisFree(redis);
    return rc;
}
